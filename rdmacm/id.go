package rdmacm

import (
	"context"
	"net/netip"
	"sync"
	"time"

	"github.com/rdmago/rdmago/verbs"
)

// idState is where an ID is in rdma_cm's life cycle (enum rdma_cm_state).
type idState int

const (
	stateIdle idState = iota
	stateAddrBound
	stateAddrResolved
	stateRouteResolved
	stateListen
	stateConnect    // connecting or connected
	stateDisconnect // disconnected
	stateDestroying
)

// ID is a connection manager identifier (struct rdma_cm_id), the rdma_cm
// counterpart of a socket: it is bound to an address, resolves a route,
// listens, or connects, and owns the QP of its connection.
//
// An ID created on an EventChannel reports the outcome of its operations as
// events on the channel. An ID created without one is synchronous, as in
// librdmacm: ResolveAddr, ResolveRoute, Connect and Accept wait for their
// outcome and return it as an error, and a listening ID hands out requests
// through GetRequest.
type ID struct {
	ps PortSpace

	// Guarded by idMu.
	ch       *EventChannel
	sync     bool
	context  any
	state    idState
	local    netip.AddrPort
	peer     netip.AddrPort
	route    Route
	opts     options
	epAttr   *verbs.QPInitAttr // what GetRequest makes its requests' QPs with
	epPD     *verbs.PD
	reqEvent *Event // GetRequest's CONNECT_REQUEST event

	// The ID's QP and what CreateQP made for it.
	qp       *verbs.QP
	pd       *verbs.PD
	sendCQ   *verbs.CQ
	recvCQ   *verbs.CQ
	sendCh   *verbs.CompChannel
	recvCh   *verbs.CompChannel
	ownCQs   bool
	srq      *verbs.SRQ // made by CreateSRQ (id->srq)
	groups   []*mcGroup // multicast groups joined
	qpType   verbs.QPType
	lastWait *Event // the event a synchronous call ended on

	// b is the connection manager serving the ID, from when it is bound
	// or its address resolved: the Backend registered for its device,
	// or the built-in IB CM (ibcm.go). kdev is the device context the
	// IDs on that device share.
	b    BackendID
	kdev *kdevice
}

// idMu guards the IDs, their channels' ID counts and the shared device
// contexts. It is never held while an ID calls an operation of its
// backend (which may deliver events, and so take idMu); it may be held
// while it calls a backend's getters.
var idMu sync.Mutex

// options are the settable per-ID options (rdma_set_option and the Go
// extensions).
type options struct {
	tos        uint8
	ackTimeout uint8 // 0: the default
	cmSet      bool  // SetCMTimeouts was called
	cmTimeout  uint8
	cmRetries  uint8
	reuseAddr  bool
}

// Defaults of Linux's rdma_cm.
const (
	// CMResponseTimeout is the CM response timeout code rdma_cm puts in
	// a REQ: 4.096 µs << 20, about 4.3 s (CMA_CM_RESPONSE_TIMEOUT).
	CMResponseTimeout = 20
	// MaxCMRetries is how often a CM message is resent before the
	// connection attempt fails (CMA_MAX_CM_RETRIES).
	MaxCMRetries = 15
	// defaultACKTimeout is the local ACK timeout code RoCE connections
	// get: the packet lifetime (18) plus one, as in Linux's REQs.
	defaultACKTimeout = 19
	// minRNRTimer is the RNR NAK delay code connected QPs get (0.64 ms).
	minRNRTimer = 12
)

// Route is the path a resolved ID uses (the RoCE view of struct
// rdma_route): which local GID, which peer GID, and the path's MTU.
type Route struct {
	SGID         verbs.GID
	DGID         verbs.GID
	SGIDIndex    uint8
	PathMTU      verbs.MTU
	HopLimit     uint8
	TrafficClass uint8
	FlowLabel    uint32
}

// CreateID creates an ID in port space ps (rdma_create_id). Events for it
// go to ch; with a nil ch the ID is synchronous. context is the user's
// value, returned by Context.
func CreateID(ch *EventChannel, context any, ps PortSpace) (*ID, error) {
	if !ps.valid() {
		return nil, verbs.Errorf("rdma_create_id", verbs.ErrInvalidArgument, "unknown port space "+ps.String())
	}
	id := &ID{ps: ps, context: context}
	switch ps {
	case PSUDP:
		id.qpType = verbs.QPTUD
	default:
		id.qpType = verbs.QPTRC
	}
	idMu.Lock()
	defer idMu.Unlock()
	if ch == nil {
		ch = newChannel()
		id.sync = true
	} else {
		ch.mu.Lock()
		closed := ch.closed
		ch.mu.Unlock()
		if closed {
			return nil, verbs.Errorf("rdma_create_id", verbs.ErrClosed, "event channel destroyed")
		}
	}
	id.ch = ch
	ch.ids++
	return id, nil
}

// Context returns the user's value given to CreateID (id->context).
func (id *ID) Context() any {
	idMu.Lock()
	defer idMu.Unlock()
	return id.context
}

// SetContext replaces the user's value (assigning id->context).
func (id *ID) SetContext(v any) {
	idMu.Lock()
	defer idMu.Unlock()
	id.context = v
}

// PortSpace returns the ID's port space (id->ps).
func (id *ID) PortSpace() PortSpace { return id.ps }

// Verbs returns the device context the ID is bound to (id->verbs), or nil
// before it is bound or resolved. All IDs on a device share it.
func (id *ID) Verbs() *verbs.Context {
	idMu.Lock()
	defer idMu.Unlock()
	if id.kdev == nil {
		return nil
	}
	return id.kdev.ctx
}

// Device returns the device the ID is bound to, or nil.
func (id *ID) Device() *verbs.Device {
	idMu.Lock()
	defer idMu.Unlock()
	if id.kdev == nil {
		return nil
	}
	return id.kdev.dev
}

// PortNum returns the device port the ID uses (id->port_num): 1 once
// bound, 0 before.
func (id *ID) PortNum() uint8 {
	idMu.Lock()
	defer idMu.Unlock()
	if id.kdev == nil {
		return 0
	}
	return 1
}

// Channel returns the ID's event channel (id->channel), nil once the ID
// is destroyed. A synchronous ID has one of its own, as in librdmacm: its
// blocking calls wait on it, and a synchronous listener's connection
// requests arrive on it, so that a program may take them with GetEvent
// (rdma_get_cm_event(id->channel), as the OFA course does) as well as
// with GetRequest. A request's new ID is then synchronous too, with a
// channel of its own.
func (id *ID) Channel() *EventChannel {
	idMu.Lock()
	defer idMu.Unlock()
	if id.state == stateDestroying {
		return nil
	}
	return id.ch
}

// LocalAddr returns the ID's local address and port (rdma_get_local_addr,
// rdma_get_src_port).
func (id *ID) LocalAddr() netip.AddrPort {
	idMu.Lock()
	defer idMu.Unlock()
	return id.local
}

// PeerAddr returns the peer's address and port (rdma_get_peer_addr,
// rdma_get_dst_port).
func (id *ID) PeerAddr() netip.AddrPort {
	idMu.Lock()
	defer idMu.Unlock()
	return id.peer
}

// Route returns the resolved route (id->route).
func (id *ID) Route() Route {
	idMu.Lock()
	defer idMu.Unlock()
	return id.route
}

// QP returns the ID's QP (id->qp), or nil.
func (id *ID) QP() *verbs.QP { idMu.Lock(); defer idMu.Unlock(); return id.qp }

// PD returns the protection domain of the ID's QP (id->pd), or nil.
func (id *ID) PD() *verbs.PD { idMu.Lock(); defer idMu.Unlock(); return id.pd }

// SendCQ returns the CQ of the QP's send queue (id->send_cq).
func (id *ID) SendCQ() *verbs.CQ { idMu.Lock(); defer idMu.Unlock(); return id.sendCQ }

// RecvCQ returns the CQ of the QP's receive queue (id->recv_cq).
func (id *ID) RecvCQ() *verbs.CQ { idMu.Lock(); defer idMu.Unlock(); return id.recvCQ }

// SendCompChannel returns the completion channel of the CQ CreateQP made
// for sends (id->send_cq_channel), or nil if the user gave the CQ.
func (id *ID) SendCompChannel() *verbs.CompChannel {
	idMu.Lock()
	defer idMu.Unlock()
	return id.sendCh
}

// RecvCompChannel returns the completion channel of the CQ CreateQP made
// for receives (id->recv_cq_channel), or nil if the user gave the CQ.
func (id *ID) RecvCompChannel() *verbs.CompChannel {
	idMu.Lock()
	defer idMu.Unlock()
	return id.recvCh
}

// SetTOS sets the IP type of service of the ID's connections
// (rdma_set_option RDMA_OPTION_ID_TOS), before the route is resolved.
func (id *ID) SetTOS(tos uint8) error {
	idMu.Lock()
	defer idMu.Unlock()
	id.opts.tos = tos
	if id.b != nil {
		return id.b.SetTOS(tos)
	}
	return nil
}

// SetReuseAddr lets the ID bind a port other IDs have bound
// (rdma_set_option RDMA_OPTION_ID_REUSEADDR).
func (id *ID) SetReuseAddr(on bool) error {
	idMu.Lock()
	defer idMu.Unlock()
	id.opts.reuseAddr = on
	if id.b != nil {
		return id.b.SetReuseAddr(on)
	}
	return nil
}

// SetACKTimeout sets the local ACK timeout code of the ID's QP
// (rdma_set_option RDMA_OPTION_ID_ACK_TIMEOUT): 4.096 µs << code. It also
// sets the packet lifetime the connection manager reckons with (code-1),
// and so its timewait. The default is 19, about 2.1 s, as Linux's.
func (id *ID) SetACKTimeout(code uint8) error {
	if code == 0 || code > 31 {
		return verbs.Errorf("rdma_set_option", verbs.ErrInvalidArgument, "ACK timeout code must be 1..31")
	}
	idMu.Lock()
	defer idMu.Unlock()
	id.opts.ackTimeout = code
	if id.b != nil {
		return id.b.SetACKTimeout(code)
	}
	return nil
}

// SetCMTimeouts sets how long the ID waits for an answer to a CM message
// (4.096 µs << responseTimeout, default 20: 4.3 s) and how often it sends
// it again (default 15), as it advertises them in its REQ. Linux fixes
// both; this Go extension lets a program notice a dead peer sooner.
func (id *ID) SetCMTimeouts(responseTimeout, maxRetries uint8) error {
	if responseTimeout > 31 || maxRetries > 15 {
		return verbs.Errorf("rdma_set_option", verbs.ErrInvalidArgument, "response timeout code must be 0..31 and retries 0..15")
	}
	idMu.Lock()
	defer idMu.Unlock()
	id.opts.cmSet = true
	id.opts.cmTimeout = responseTimeout
	id.opts.cmRetries = maxRetries
	if s, ok := id.b.(cmTimeoutSetter); ok {
		return s.SetCMTimeouts(responseTimeout, maxRetries)
	}
	return nil
}

// cmTimeoutSetter is a backend ID whose CM timeouts a program may set
// (SetCMTimeouts): the built-in IB CM's. The kernel's CM fixes them.
type cmTimeoutSetter interface {
	SetCMTimeouts(responseTimeout, maxRetries uint8) error
}

func (o *options) ack() uint8 {
	if o.ackTimeout == 0 {
		return defaultACKTimeout
	}
	return o.ackTimeout
}

func (o *options) responseTimeout() uint8 {
	if !o.cmSet {
		return CMResponseTimeout
	}
	return o.cmTimeout
}

func (o *options) retries() uint8 {
	if !o.cmSet {
		return MaxCMRetries
	}
	return o.cmRetries
}

// ibTime converts an IBTA time code (4.096 µs << code) to a duration.
func ibTime(code uint8) time.Duration {
	return time.Duration(4096<<min(code, 31)) * time.Nanosecond
}

// event queues an event for id. Called with idMu held.
func (id *ID) event(ev *Event) {
	if id.state == stateDestroying || id.ch == nil {
		return
	}
	ev.ID = id
	id.ch.push(ev)
}

// backend returns the ID's backend ID, or nil.
func (id *ID) backend() BackendID {
	idMu.Lock()
	defer idMu.Unlock()
	return id.b
}

// BindAddr binds the ID to a local address and port (rdma_bind_addr). An
// unspecified address binds the port on every device (for Listen); port 0
// picks a free port.
func (id *ID) BindAddr(addr netip.AddrPort) error {
	const op = "rdma_bind_addr"
	idMu.Lock()
	state := id.state
	idMu.Unlock()
	if state != stateIdle {
		return verbs.Errorf(op, verbs.ErrInvalidArgument, "the ID is already bound")
	}
	return id.bind(op, addr)
}

// bind hands the ID to the backend of addr's device (for the unspecified
// address, the backend of every device of its family, or the built-in
// CM) and binds it there.
func (id *ID) bind(op string, addr netip.AddrPort) error {
	ip := addr.Addr().Unmap()
	if !ip.IsValid() {
		return verbs.Errorf(op, verbs.ErrInvalidArgument, "no address")
	}
	var b Backend
	var dev *verbs.Device
	switch {
	case ip.IsUnspecified():
		b = wildcardBackend(ip)
	case !registeredBackends():
		b = builtin // which finds the device itself
	default:
		if dev = deviceFor(ip); dev == nil {
			return noDevice(op, ip)
		}
		b = backendFor(dev)
	}
	idMu.Lock()
	state := id.state
	idMu.Unlock()
	if state != stateIdle {
		return verbs.Errorf(op, verbs.ErrInvalidArgument, "the ID changed state (destroyed?) while binding")
	}
	k, err := id.newBackendID(b)
	if err != nil {
		return err
	}
	if err := k.BindAddr(addr); err != nil {
		k.Destroy()
		return err
	}
	idMu.Lock()
	if id.state != stateIdle || id.b != nil {
		idMu.Unlock()
		k.Destroy()
		return verbs.Errorf(op, verbs.ErrInvalidArgument, "the ID changed state (destroyed?) while binding")
	}
	id.b = k
	id.local = k.LocalAddr()
	id.state = stateAddrBound
	id.bindDevice()
	idMu.Unlock()
	return nil
}

// ResolveAddr resolves dst to a local device and address
// (rdma_resolve_addr): the device whose GID is src, or the one holding the
// address the host routes dst from. The result comes as an
// ADDR_RESOLVED or ADDR_ERROR event; a synchronous ID waits for it.
// timeout is accepted for the C signature: resolution over RoCEv2 needs
// no network exchange and ends at once.
func (id *ID) ResolveAddr(src, dst netip.AddrPort, timeout time.Duration) error {
	const op = "rdma_resolve_addr"
	idMu.Lock()
	state := id.state
	idMu.Unlock()
	if state != stateIdle && state != stateAddrBound {
		return verbs.Errorf(op, verbs.ErrInvalidArgument, "the ID is not idle")
	}
	d := dst.Addr().Unmap()
	if !d.IsValid() || d.IsUnspecified() || d.IsMulticast() && id.ps != PSUDP && id.ps != PSIPoIB {
		return verbs.Errorf(op, verbs.ErrInvalidArgument, "bad destination "+dst.String())
	}
	if src.Addr().IsValid() && state == stateIdle {
		if err := id.bind(op, src); err != nil {
			return err
		}
	}
	k := id.backend()
	if k == nil {
		// Unbound: the backend of the device the route leaves from
		// takes the ID.
		nk, err := id.newBackendID(routeBackend(d))
		if err != nil {
			return err
		}
		idMu.Lock()
		if id.state != stateIdle || id.b != nil {
			idMu.Unlock()
			nk.Destroy()
			return verbs.Errorf(op, verbs.ErrInvalidArgument, "the ID changed state (destroyed?) while resolving")
		}
		id.b, k = nk, nk
		idMu.Unlock()
	}
	return id.kwait(op, k.ResolveAddr(src, dst, timeout), EventAddrResolved)
}

// ResolveRoute resolves the route to the peer (rdma_resolve_route): on
// RoCEv2 the source and destination GIDs and the path MTU. The result
// comes as a ROUTE_RESOLVED event; a synchronous ID waits for it.
func (id *ID) ResolveRoute(timeout time.Duration) error {
	const op = "rdma_resolve_route"
	k := id.backend()
	if k == nil {
		return verbs.Errorf(op, verbs.ErrInvalidArgument, "the address is not resolved")
	}
	return id.kwait(op, k.ResolveRoute(timeout), EventRouteResolved)
}

// Listen starts listening for connection requests (rdma_listen) on the
// bound address and port. backlog bounds the requests not yet accepted or
// rejected; requests beyond it are dropped without an answer, and the
// peer's CM resends them, as Linux's rdma_cm does when a listener's
// backlog is used up (its ucma returns ENOMEM for the request, and the IB
// CM then drops it rather than reject it). A backlog that is not positive
// or is above 1024 means 1024, as the kernel's net.rdma_ucm.max_backlog
// (1024 by default) caps it.
func (id *ID) Listen(backlog int) error {
	const op = "rdma_listen"
	k := id.backend()
	if k == nil {
		return verbs.Errorf(op, verbs.ErrInvalidArgument, "the ID is not bound (rdma_bind_addr)")
	}
	if err := k.Listen(backlog); err != nil {
		return err
	}
	idMu.Lock()
	defer idMu.Unlock()
	if id.state != stateDestroying {
		id.state = stateListen
	}
	return nil
}

// Connect starts connecting to the resolved peer (rdma_connect). For the
// TCP and IB port spaces it sends a REQ; ESTABLISHED follows when the peer
// accepts (the CM moves the ID's QP to RTR and RTS and answers with RTU),
// REJECTED when it refuses, UNREACHABLE when it does not answer. Without a
// QP of the ID's own, CONNECT_RESPONSE comes instead, and the caller moves
// its QP (InitQPAttr) and calls Establish. For the UDP port space it sends
// a SIDR_REQ; ESTABLISHED carries the peer's QP number and Q_Key. A nil p
// asks for the device's limits, 7 retries and infinite RNR retries. A
// synchronous ID waits for the outcome.
func (id *ID) Connect(p *ConnParam) error {
	const op = "rdma_connect"
	idMu.Lock()
	k := id.b
	want := EventEstablished
	if id.qp == nil && id.ps != PSUDP {
		want = EventConnectResponse
	}
	idMu.Unlock()
	if k == nil {
		return verbs.Errorf(op, verbs.ErrInvalidArgument, "the route is not resolved")
	}
	if err := k.Connect(p); err != nil {
		return err
	}
	idMu.Lock()
	if id.state == stateRouteResolved {
		id.state = stateConnect
	}
	idMu.Unlock()
	return id.wait(op, want)
}

// Accept accepts a connection request (rdma_accept): for a connected port
// space it moves the ID's QP to RTR and RTS and sends the REP, and
// ESTABLISHED follows the peer's RTU; for the UDP port space it answers
// the SIDR_REQ with the QP's number. A nil p takes the peer's resources
// and 7 RNR retries. A synchronous ID waits for ESTABLISHED.
func (id *ID) Accept(p *ConnParam) error {
	const op = "rdma_accept"
	idMu.Lock()
	k, datagram := id.b, id.ps == PSUDP || id.qpType == verbs.QPTUD
	idMu.Unlock()
	if k == nil {
		return verbs.Errorf(op, verbs.ErrInvalidArgument, "no connection request to accept")
	}
	if datagram {
		return k.Accept(p) // the SIDR_REP ends it: no ESTABLISHED here
	}
	return id.kwait(op, k.Accept(p), EventEstablished)
}

// Reject refuses a connection request (rdma_reject) with a REJ of reason
// "consumer defined" (28) carrying up to 148 bytes of private data, or for
// the UDP port space a SIDR_REP with status "rejected".
func (id *ID) Reject(privateData []byte) error {
	k := id.backend()
	if k == nil {
		return verbs.Errorf("rdma_reject", verbs.ErrInvalidArgument, "no connection request to reject")
	}
	return k.Reject(privateData)
}

// Establish completes a connection whose QP the user moves (rdma_establish):
// after CONNECT_RESPONSE and moving the QP to RTS, it sends the RTU.
func (id *ID) Establish() error {
	k := id.backend()
	if k == nil {
		return verbs.Errorf("rdma_establish", verbs.ErrInvalidArgument, "no connect response to answer")
	}
	return k.Establish()
}

// Disconnect closes the connection (rdma_disconnect): it moves the QP to
// the error state, flushing its work requests, and sends a DREQ, or the
// DREP if the peer disconnected first. DISCONNECTED follows on both sides
// (at once here when answering the peer, otherwise on the peer's DREP or
// when the DREQ goes unanswered), and TIMEWAIT_EXIT after the timewait.
func (id *ID) Disconnect() error {
	k := id.backend()
	if k == nil {
		return verbs.Errorf("rdma_disconnect", verbs.ErrInvalidArgument, "not connected")
	}
	return k.Disconnect()
}

// GetRequest waits for a connection request on a synchronous listening ID
// and returns its new ID (rdma_get_request). If the listening ID was made
// by CreateEP with QP attributes, the new ID has its QP.
func (id *ID) GetRequest(ctx context.Context) (*ID, error) {
	const op = "rdma_get_request"
	idMu.Lock()
	if !id.sync || id.state != stateListen {
		idMu.Unlock()
		return nil, verbs.Errorf(op, verbs.ErrInvalidArgument, "not a synchronous listening ID")
	}
	ch := id.ch
	idMu.Unlock()
	for {
		ev, err := ch.GetEvent(ctx)
		if err != nil {
			return nil, err
		}
		if ev.Type != EventConnectRequest {
			continue
		}
		child := ev.ID // synchronous, on a channel of its own
		idMu.Lock()
		attr, pd := id.epAttr, id.epPD
		child.reqEvent = ev
		idMu.Unlock()
		if attr != nil {
			a := *attr
			if err := child.CreateQP(pd, &a); err != nil {
				child.Reject(nil)
				child.Destroy()
				return nil, err
			}
		}
		return child, nil
	}
}

// RequestEvent returns the CONNECT_REQUEST event a synchronous ID from
// GetRequest was made by: the peer's connection parameters and private
// data (librdmacm's id->event).
func (id *ID) RequestEvent() *Event {
	idMu.Lock()
	defer idMu.Unlock()
	return id.reqEvent
}

// SetEndpointQP records the QP attributes GetRequest gives the QPs of the
// listening ID's requests (what rdma_create_ep stores for a passive
// endpoint).
func (id *ID) SetEndpointQP(pd *verbs.PD, attr *verbs.QPInitAttr) {
	idMu.Lock()
	defer idMu.Unlock()
	if attr == nil {
		id.epAttr = nil
	} else {
		a := *attr
		id.epAttr = &a
	}
	id.epPD = pd
}

// Migrate moves the ID, and its events not yet taken, to another channel
// (rdma_migrate_id). A nil ch makes the ID synchronous.
func (id *ID) Migrate(ch *EventChannel) error {
	idMu.Lock()
	defer idMu.Unlock()
	if id.state == stateDestroying {
		return verbs.Errorf("rdma_migrate_id", verbs.ErrClosed, "ID destroyed")
	}
	old, wasSync := id.ch, id.sync
	sync := ch == nil
	if sync {
		ch = newChannel()
	} else {
		ch.mu.Lock()
		closed := ch.closed
		ch.mu.Unlock()
		if closed {
			return verbs.Errorf("rdma_migrate_id", verbs.ErrClosed, "event channel destroyed")
		}
	}
	evs := old.take(id)
	old.ids--
	id.ch, id.sync = ch, sync
	ch.ids++
	for _, ev := range evs {
		if child := ev.ID; ev.ListenID == id && child.ch == old {
			// A request not yet taken goes with its listener.
			old.ids--
			child.ch, child.sync = ch, sync
			ch.ids++
		}
		ch.push(ev)
	}
	if wasSync {
		old.shut() // a synchronous call waiting on the ID returns
	}
	return nil
}

// wait makes a synchronous ID's call wait for its outcome event.
func (id *ID) wait(op string, want EventType) error {
	idMu.Lock()
	sync, ch := id.sync, id.ch
	idMu.Unlock()
	if !sync {
		return nil
	}
	ev, err := ch.GetEvent(context.Background())
	if err != nil {
		return err
	}
	idMu.Lock()
	if id.state != stateDestroying {
		id.lastWait = ev
	}
	idMu.Unlock()
	if ev.Type != want || ev.Status != 0 {
		return &opError{op: op, ev: ev}
	}
	return nil
}

// LastEvent returns the event a synchronous ID's last blocking call ended
// on (librdmacm's id->event): with the peer's private data after Connect.
func (id *ID) LastEvent() *Event {
	idMu.Lock()
	defer idMu.Unlock()
	return id.lastWait
}

// opError is a synchronous call's failure: the event it ended on.
type opError struct {
	op string
	ev *Event
}

func (e *opError) Error() string {
	return e.op + ": " + (&EventError{Type: e.ev.Type, Status: e.ev.Status}).Error()
}

func (e *opError) Unwrap() error { return &EventError{Type: e.ev.Type, Status: e.ev.Status} }

// Destroy destroys the ID (rdma_destroy_id), its QP, and the CQs
// CreateQP made for it. A connected ID disconnects first; the connection
// manager keeps answering the peer for the connection's timewait. No
// events are delivered for the ID afterwards, and a synchronous call
// blocked on it returns. Requests to a listening ID that were not yet
// taken from its channel are rejected and destroyed with it. Close is the
// same.
func (id *ID) Destroy() error {
	idMu.Lock()
	if id.state == stateDestroying {
		idMu.Unlock()
		return nil
	}
	var orphans []*ID
	for _, ev := range id.destroyLocked() {
		// A request nobody took: refuse it and let it go.
		if child := ev.ID; child != nil && child != id && child.state != stateDestroying {
			child.destroyLocked()
			orphans = append(orphans, child)
		}
	}
	k := id.b
	idMu.Unlock()
	for _, child := range orphans {
		child.b.Reject(nil)
		child.b.Destroy()
		child.releaseDevice()
	}
	id.leaveAll()
	id.freeQP()
	id.DestroySRQ()
	if k != nil {
		k.Destroy()
	}
	id.releaseDevice()
	return nil
}

// destroyLocked detaches the ID from its channel, returning the events
// it still had queued. Called with idMu held.
func (id *ID) destroyLocked() []*Event {
	id.state = stateDestroying
	id.ch.ids--
	evs := id.ch.take(id)
	if id.sync {
		id.ch.shut() // wakes a synchronous call waiting on it
	} else {
		// The ID sends no more events, and may linger in timewait
		// long after the program closed the channel: let it go.
		id.ch = nil
	}
	id.lastWait = nil
	id.reqEvent = nil
	return evs
}

// Close is Destroy, for io.Closer.
func (id *ID) Close() error { return id.Destroy() }
