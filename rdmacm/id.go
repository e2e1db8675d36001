package rdmacm

import (
	"context"
	"net/netip"
	"time"

	"github.com/rdmago/rdmago/rdmacm/mad"
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

	// Guarded by cm.mu.
	ch        *EventChannel
	sync      bool
	context   any
	state     idState
	agent     *agent   // the device's connection manager
	agents    []*agent // a wildcard listener's agents, one per device
	claims    []func() // a listener's service claims on shared devices, to release
	local     netip.AddrPort
	peer      netip.AddrPort
	portBound bool
	route     Route
	opts      options

	// Listening.
	backlog int
	pending int // requests not yet accepted or rejected
	parent  *ID // a request's listening ID
	epAttr  *verbs.QPInitAttr
	epPD    *verbs.PD

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

	c conn // the IB CM connection

	// The ID's backend ID, when a backend serves its device (see
	// Backend), and the device context it shares.
	k    BackendID
	kdev *kdevice
}

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
	cm.mu.Lock()
	defer cmUnlock()
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
	cm.mu.Lock()
	defer cmUnlock()
	return id.context
}

// SetContext replaces the user's value (assigning id->context).
func (id *ID) SetContext(v any) {
	cm.mu.Lock()
	defer cmUnlock()
	id.context = v
}

// PortSpace returns the ID's port space (id->ps).
func (id *ID) PortSpace() PortSpace { return id.ps }

// Verbs returns the device context the ID is bound to (id->verbs), or nil
// before it is bound or resolved. All IDs on a device share it.
func (id *ID) Verbs() *verbs.Context {
	cm.mu.Lock()
	defer cmUnlock()
	if id.kdev != nil {
		return id.kdev.ctx
	}
	if id.agent == nil {
		return nil
	}
	return id.agent.ctx
}

// Device returns the device the ID is bound to, or nil.
func (id *ID) Device() *verbs.Device {
	cm.mu.Lock()
	defer cmUnlock()
	if id.kdev != nil {
		return id.kdev.dev
	}
	if id.agent == nil {
		return nil
	}
	return id.agent.dev
}

// PortNum returns the device port the ID uses (id->port_num): 1 once
// bound, 0 before.
func (id *ID) PortNum() uint8 {
	cm.mu.Lock()
	defer cmUnlock()
	if id.agent == nil && id.kdev == nil {
		return 0
	}
	return 1
}

// Channel returns the ID's event channel (id->channel); nil for a
// synchronous ID, and once the ID is destroyed.
func (id *ID) Channel() *EventChannel {
	cm.mu.Lock()
	defer cmUnlock()
	if id.sync {
		return nil
	}
	return id.ch
}

// LocalAddr returns the ID's local address and port (rdma_get_local_addr,
// rdma_get_src_port).
func (id *ID) LocalAddr() netip.AddrPort {
	cm.mu.Lock()
	defer cmUnlock()
	return id.local
}

// PeerAddr returns the peer's address and port (rdma_get_peer_addr,
// rdma_get_dst_port).
func (id *ID) PeerAddr() netip.AddrPort {
	cm.mu.Lock()
	defer cmUnlock()
	return id.peer
}

// Route returns the resolved route (id->route).
func (id *ID) Route() Route {
	cm.mu.Lock()
	defer cmUnlock()
	return id.route
}

// QP returns the ID's QP (id->qp), or nil.
func (id *ID) QP() *verbs.QP { cm.mu.Lock(); defer cmUnlock(); return id.qp }

// PD returns the protection domain of the ID's QP (id->pd), or nil.
func (id *ID) PD() *verbs.PD { cm.mu.Lock(); defer cmUnlock(); return id.pd }

// SendCQ returns the CQ of the QP's send queue (id->send_cq).
func (id *ID) SendCQ() *verbs.CQ { cm.mu.Lock(); defer cmUnlock(); return id.sendCQ }

// RecvCQ returns the CQ of the QP's receive queue (id->recv_cq).
func (id *ID) RecvCQ() *verbs.CQ { cm.mu.Lock(); defer cmUnlock(); return id.recvCQ }

// SendCompChannel returns the completion channel of the CQ CreateQP made
// for sends (id->send_cq_channel), or nil if the user gave the CQ.
func (id *ID) SendCompChannel() *verbs.CompChannel {
	cm.mu.Lock()
	defer cmUnlock()
	return id.sendCh
}

// RecvCompChannel returns the completion channel of the CQ CreateQP made
// for receives (id->recv_cq_channel), or nil if the user gave the CQ.
func (id *ID) RecvCompChannel() *verbs.CompChannel {
	cm.mu.Lock()
	defer cmUnlock()
	return id.recvCh
}

// SetTOS sets the IP type of service of the ID's connections
// (rdma_set_option RDMA_OPTION_ID_TOS), before the route is resolved.
func (id *ID) SetTOS(tos uint8) error {
	cm.mu.Lock()
	defer cmUnlock()
	id.opts.tos = tos
	if id.k != nil {
		return id.k.SetTOS(tos)
	}
	return nil
}

// SetReuseAddr lets the ID bind a port other IDs have bound
// (rdma_set_option RDMA_OPTION_ID_REUSEADDR).
func (id *ID) SetReuseAddr(on bool) error {
	cm.mu.Lock()
	defer cmUnlock()
	id.opts.reuseAddr = on
	if id.k != nil {
		return id.k.SetReuseAddr(on)
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
	cm.mu.Lock()
	defer cmUnlock()
	id.opts.ackTimeout = code
	if id.k != nil {
		return id.k.SetACKTimeout(code)
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
	cm.mu.Lock()
	defer cmUnlock()
	id.opts.cmSet = true
	id.opts.cmTimeout = responseTimeout
	id.opts.cmRetries = maxRetries
	return nil
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

// event queues an event for id. Called with cm.mu held.
func (id *ID) event(ev *Event) {
	if id.state == stateDestroying || id.ch == nil {
		return
	}
	ev.ID = id
	id.ch.push(ev)
}

// BindAddr binds the ID to a local address and port (rdma_bind_addr). An
// unspecified address binds the port on every device (for Listen); port 0
// picks a free port.
func (id *ID) BindAddr(addr netip.AddrPort) error {
	const op = "rdma_bind_addr"
	cm.mu.Lock()
	defer cmUnlock()
	if id.state != stateIdle {
		return verbs.Errorf(op, verbs.ErrInvalidArgument, "the ID is already bound")
	}
	return id.bind(op, addr)
}

// bind is BindAddr with cm.mu held.
func (id *ID) bind(op string, addr netip.AddrPort) error {
	ip := addr.Addr().Unmap()
	if !ip.IsValid() {
		return verbs.Errorf(op, verbs.ErrInvalidArgument, "no address")
	}
	var a *agent
	if ip.IsUnspecified() {
		cmUnlock()
		b := wildcardBackend(ip)
		cm.mu.Lock()
		if id.state != stateIdle {
			return verbs.Errorf(op, verbs.ErrInvalidArgument, "the ID changed state (destroyed?) while binding")
		}
		if b != nil {
			return id.kbind(b, nil, addr)
		}
	} else {
		cmUnlock()
		dev := deviceFor(ip)
		cm.mu.Lock()
		if id.state != stateIdle {
			return verbs.Errorf(op, verbs.ErrInvalidArgument, "the ID changed state (destroyed?) while binding")
		}
		if dev == nil {
			why := "no RDMA device serves " + ip.String()
			if _, err := verbs.Devices(); err != nil {
				why += " (" + err.Error() + ")"
			} else if h := verbs.NoProviderHint(); h != "" {
				why += " (" + h + ")"
			}
			return verbs.Errorf(op, verbs.ErrAddrNotAvail, why)
		}
		if b := backendFor(dev); b != nil {
			return id.kbind(b, dev, addr)
		}
		var err error
		if a, err = agentFor(dev); err != nil {
			return err
		}
	}
	port, err := bindPort(id, ip, addr.Port())
	if err != nil {
		if a != nil {
			a.release()
		}
		return err
	}
	id.portBound = true
	id.local = netip.AddrPortFrom(ip, port)
	id.agent = a
	id.state = stateAddrBound
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
	cm.mu.Lock()
	if id.state != stateIdle && id.state != stateAddrBound {
		cmUnlock()
		return verbs.Errorf(op, verbs.ErrInvalidArgument, "the ID is not idle")
	}
	d := dst.Addr().Unmap()
	if !d.IsValid() || d.IsUnspecified() || d.IsMulticast() && id.ps != PSUDP && id.ps != PSIPoIB {
		cmUnlock()
		return verbs.Errorf(op, verbs.ErrInvalidArgument, "bad destination "+dst.String())
	}
	if src.Addr().IsValid() && id.state == stateIdle {
		if err := id.bind(op, src); err != nil {
			cmUnlock()
			return err
		}
	}
	if id.state == stateIdle && id.k == nil {
		// Unbound: a backend takes the ID if it serves the device the
		// route leaves from.
		cmUnlock()
		b := routeBackend(d)
		cm.mu.Lock()
		if b != nil && id.state == stateIdle && id.k == nil {
			if err := id.startBackend(b); err != nil {
				cmUnlock()
				return err
			}
		}
	}
	if k := id.k; k != nil {
		cmUnlock()
		return id.kwait(op, k.ResolveAddr(src, dst, timeout), EventAddrResolved)
	}
	status := id.resolveAddr(d)
	if status == 0 {
		id.peer = netip.AddrPortFrom(d, dst.Port())
		id.state = stateAddrResolved
		id.event(&Event{Type: EventAddrResolved})
	} else {
		id.event(&Event{Type: EventAddrError, Status: status})
	}
	cmUnlock()
	return id.wait(op, EventAddrResolved)
}

// resolveAddr finds the device and source address for d. It returns 0 or
// a negative errno. Called with cm.mu held.
func (id *ID) resolveAddr(d netip.Addr) int {
	if id.agent != nil {
		if id.local.Addr().Is4() != d.Is4() {
			return -int(verbs.ErrInvalidArgument)
		}
		return 0
	}
	// Unbound, or bound to the unspecified address: route.
	cmUnlock()
	src, err := routeSource(d)
	var dev *verbs.Device
	if err == nil {
		dev = deviceFor(src)
		if dev == nil && src.IsLoopback() {
			dev, src = loopbackDevice(src)
		}
	}
	cm.mu.Lock()
	if id.state == stateDestroying || id.agent != nil {
		return -int(verbs.ErrInvalidArgument)
	}
	if err != nil {
		return -int(verbs.ErrNetUnreach)
	}
	if dev == nil {
		return -int(verbs.ErrNoDevice)
	}
	a, err := agentFor(dev)
	if err != nil {
		return -int(verbs.ErrNoDevice)
	}
	if !id.portBound {
		port, err := bindPort(id, src, 0)
		if err != nil {
			a.release()
			return -int(verbs.ErrAddrInUse)
		}
		id.portBound = true
		id.local = netip.AddrPortFrom(src, port)
	} else {
		id.local = netip.AddrPortFrom(src, id.local.Port())
	}
	id.agent = a
	return 0
}

// ResolveRoute resolves the route to the peer (rdma_resolve_route): on
// RoCEv2 the source and destination GIDs and the path MTU. The result
// comes as a ROUTE_RESOLVED event; a synchronous ID waits for it.
func (id *ID) ResolveRoute(timeout time.Duration) error {
	const op = "rdma_resolve_route"
	if k := id.kernel(); k != nil {
		return id.kwait(op, k.ResolveRoute(timeout), EventRouteResolved)
	}
	cm.mu.Lock()
	if id.state != stateAddrResolved {
		cmUnlock()
		return verbs.Errorf(op, verbs.ErrInvalidArgument, "the address is not resolved")
	}
	id.route = id.makeRoute()
	id.state = stateRouteResolved
	id.event(&Event{Type: EventRouteResolved})
	cmUnlock()
	return id.wait(op, EventRouteResolved)
}

// makeRoute builds the route from the resolved addresses. Called with
// cm.mu held.
func (id *ID) makeRoute() Route {
	a := id.agent
	sgid := a.gidIndex(id.local.Addr())
	r := Route{
		SGID:         verbs.GIDFromAddr(id.local.Addr()),
		DGID:         verbs.GIDFromAddr(id.peer.Addr()),
		SGIDIndex:    uint8(max(sgid, 0)),
		PathMTU:      a.mtu,
		HopLimit:     64,
		TrafficClass: id.opts.tos,
	}
	return r
}

// maxBacklog is the most connection requests a listener holds pending
// (the default of Linux's net.rdma_ucm.max_backlog).
const maxBacklog = 1024

// Listen starts listening for connection requests (rdma_listen) on the
// bound address and port. backlog bounds the requests not yet accepted or
// rejected; requests beyond it are dropped without an answer, and the
// peer's CM resends them, as Linux's rdma_cm does when a listener's
// backlog is used up (its ucma returns ENOMEM for the request, and the IB
// CM then drops it rather than reject it). A backlog that is not positive
// or is above maxBacklog means maxBacklog, as the kernel's
// net.rdma_ucm.max_backlog (1024 by default) caps it.
func (id *ID) Listen(backlog int) error {
	const op = "rdma_listen"
	cm.mu.Lock()
	defer cmUnlock()
	if id.k != nil {
		if err := id.k.Listen(backlog); err != nil {
			return err
		}
		id.state = stateListen
		return nil
	}
	if id.state != stateAddrBound {
		return verbs.Errorf(op, verbs.ErrInvalidArgument, "the ID is not bound (rdma_bind_addr)")
	}
	if backlog <= 0 || backlog > maxBacklog {
		backlog = maxBacklog
	}
	id.backlog = backlog
	if id.agent == nil {
		// A wildcard: listen on every device of the address family.
		cmUnlock()
		devs := candidates()
		cm.mu.Lock()
		if id.state != stateAddrBound || id.agents != nil {
			return verbs.Errorf(op, verbs.ErrInvalidArgument, "the ID changed state (destroyed?) while listening")
		}
		for _, d := range devs {
			ok := false
			for _, a := range deviceAddrs(d) {
				if a.Is4() == id.local.Addr().Is4() {
					ok = true
				}
			}
			if !ok {
				continue
			}
			if a, err := agentFor(d); err == nil {
				id.agents = append(id.agents, a)
			}
		}
		if len(id.agents) == 0 {
			return verbs.Errorf(op, verbs.ErrNoDevice, "no RDMA device to listen on")
		}
	}
	// Claim the service on devices other processes share, so that their
	// connection requests come here (and a second listener is refused).
	sid := uint64(mad.MakeServiceID(mad.PortSpace(id.ps), id.local.Port()))
	agents := id.agents
	if id.agent != nil {
		agents = []*agent{id.agent}
	}
	for _, a := range agents {
		c, ok := verbs.DeviceDriverOf(a.dev).(ServiceClaimer)
		if !ok {
			continue
		}
		release, err := c.ClaimService(id.local.Addr(), sid)
		if err != nil {
			id.releaseClaims()
			if id.agent == nil {
				for _, a := range id.agents {
					a.release()
				}
				id.agents = nil
			}
			return err
		}
		id.claims = append(id.claims, release)
	}
	id.state = stateListen
	return nil
}

// releaseClaims gives up the listener's service claims.
func (id *ID) releaseClaims() {
	for _, r := range id.claims {
		r()
	}
	id.claims = nil
}

// listensOn reports whether a wildcard listener listens on agent a.
func (id *ID) listensOn(a *agent) bool {
	for _, x := range id.agents {
		if x == a {
			return true
		}
	}
	return false
}

// GetRequest waits for a connection request on a synchronous listening ID
// and returns its new ID (rdma_get_request). If the listening ID was made
// by CreateEP with QP attributes, the new ID has its QP.
func (id *ID) GetRequest(ctx context.Context) (*ID, error) {
	const op = "rdma_get_request"
	cm.mu.Lock()
	if !id.sync || id.state != stateListen {
		cmUnlock()
		return nil, verbs.Errorf(op, verbs.ErrInvalidArgument, "not a synchronous listening ID")
	}
	ch := id.ch
	cmUnlock()
	for {
		ev, err := ch.GetEvent(ctx)
		if err != nil {
			return nil, err
		}
		if ev.Type != EventConnectRequest {
			continue
		}
		child := ev.ID
		cm.mu.Lock()
		attr, pd := id.epAttr, id.epPD
		child.ch.ids--
		child.ch = newChannel()
		child.ch.ids++
		child.sync = true
		child.c.reqEvent = ev
		cmUnlock()
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
	cm.mu.Lock()
	defer cmUnlock()
	return id.c.reqEvent
}

// SetEndpointQP records the QP attributes GetRequest gives the QPs of the
// listening ID's requests (what rdma_create_ep stores for a passive
// endpoint).
func (id *ID) SetEndpointQP(pd *verbs.PD, attr *verbs.QPInitAttr) {
	cm.mu.Lock()
	defer cmUnlock()
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
	cm.mu.Lock()
	defer cmUnlock()
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
	cm.mu.Lock()
	sync, ch := id.sync, id.ch
	cmUnlock()
	if !sync {
		return nil
	}
	ev, err := ch.GetEvent(context.Background())
	if err != nil {
		return err
	}
	cm.mu.Lock()
	if id.state != stateDestroying {
		id.lastWait = ev
	}
	cmUnlock()
	if ev.Type != want || ev.Status != 0 {
		return &opError{op: op, ev: ev}
	}
	return nil
}

// LastEvent returns the event a synchronous ID's last blocking call ended
// on (librdmacm's id->event): with the peer's private data after Connect.
func (id *ID) LastEvent() *Event {
	cm.mu.Lock()
	defer cmUnlock()
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
	cm.mu.Lock()
	if id.state == stateDestroying {
		cmUnlock()
		return nil
	}
	if k := id.k; k != nil {
		cmUnlock()
		id.kdestroy(k)
		return nil
	}
	for _, ev := range id.destroyLocked() {
		// A request nobody took: refuse it and let it go.
		child := ev.ID
		if child != nil && child != id && child.state != stateDestroying {
			child.destroyLocked()
			child.dropAgent()
		}
	}
	a, issued := id.agent, uint64(0)
	if a != nil {
		issued = a.issued
	}
	cmUnlock()
	id.leaveAll()
	id.freeQP()
	id.DestroySRQ()
	if a != nil {
		a.flush(issued, flushTimeout)
	}
	cm.mu.Lock()
	id.dropAgent()
	cmUnlock()
	return nil
}

// destroyLocked ends the ID's connection and detaches it from its port,
// listeners and channel, returning the events it still had queued.
// Called with cm.mu held.
func (id *ID) destroyLocked() []*Event {
	id.abandon()
	id.state = stateDestroying
	unbindPort(id)
	id.releaseClaims()
	for _, a := range id.agents {
		a.release()
	}
	id.agents = nil
	id.countDone()
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
	id.c.reqEvent = nil
	return evs
}

// Close is Destroy, for io.Closer.
func (id *ID) Close() error { return id.Destroy() }

// flushTimeout bounds how long Destroy and Disconnect wait for their CM
// message to leave.
const flushTimeout = time.Second
