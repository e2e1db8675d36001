package rdmacm

import (
	"errors"
	"fmt"
	"net/netip"
	"time"

	"github.com/rdmago/rdmago/internal/fifo"
	"github.com/rdmago/rdmago/rdmacm/mad"
	"github.com/rdmago/rdmago/verbs"
)

// The built-in IB CM is the Backend of every device no registered
// Backend serves: the software device above all. An ID calls it, as it
// calls any backend, through BackendID, and hears from it through
// BackendEvents. It speaks the IB CM protocol on each device's QP1
// through that device's agent (agent.go): connections in cm.go, Service
// ID Resolution in sidr.go.
//
// Its state is guarded by cm.mu, which is never held while a MAD is
// posted nor while an event is delivered: both are queued under the lock
// and handed on by whoever lets go of it (cmUnlock). The ID layer's lock
// (idMu) may be held while it calls the getters below (LocalAddr, Route,
// Device, SetHandler, InitQPAttr, the options), which let go of cm.mu
// with a plain Unlock and queue nothing; it is never held while it calls
// an operation, which may deliver events.

// ibcm is the built-in IB CM.
type ibcm struct{}

// builtin is the backend of the devices no registered backend serves.
var builtin Backend = ibcm{}

// Serves implements Backend: the built-in CM serves any device.
func (ibcm) Serves(*verbs.Device) bool { return true }

// CreateID implements Backend.
func (ibcm) CreateID(ps PortSpace, handle func(BackendEvent)) (BackendID, error) {
	id := &cmID{ps: ps, handle: handle, qpType: verbs.QPTRC}
	if ps == PSUDP {
		id.qpType = verbs.QPTUD
	}
	return id, nil
}

// sharedContext implements contextSharer: the IDs on a device share its
// agent's context and PD. Called with idMu held.
func (ibcm) sharedContext(dev *verbs.Device) (*verbs.Context, *verbs.PD, func(), error) {
	cm.mu.Lock()
	defer cm.mu.Unlock() // nothing queued: no cmUnlock under idMu
	a, err := agentFor(dev)
	if err != nil {
		return nil, nil, nil, err
	}
	return a.ctx, a.pd, func() {
		cm.mu.Lock()
		defer cm.mu.Unlock()
		a.release()
	}, nil
}

// cmID is an ID of the built-in IB CM: an address, a listener, or one
// connection.
type cmID struct {
	ps PortSpace

	// Guarded by cm.mu.
	handle    func(BackendEvent)
	state     idState
	agent     *agent   // the device's connection manager
	agents    []*agent // a wildcard listener's agents, one per device
	claims    []func() // a listener's service claims on shared devices, to release
	local     netip.AddrPort
	peer      netip.AddrPort
	portBound bool
	route     Route
	opts      options
	qp        *verbs.QP // the QP AttachQP gave
	qpType    verbs.QPType
	groups    map[netip.Addr]*verbs.QP // groups joined, each with the QP attached to it (or nil)

	// Listening.
	backlog int
	pending int   // requests not yet accepted or rejected
	parent  *cmID // a request's listener

	c conn // the connection
}

// queuedEvent is an event waiting for delivery to its ID's handler.
type queuedEvent struct {
	id *cmID
	ev BackendEvent
}

// event queues ev for the ID's handler. Called with cm.mu held.
func (id *cmID) event(ev BackendEvent) {
	if id.state == stateDestroying {
		return
	}
	cm.events = append(cm.events, queuedEvent{id, ev})
}

// maxKeptEvents is the room of cm.events kept between deliveries.
const maxKeptEvents = 64

// deliverEvents hands the queued events to their IDs' handlers, in order,
// with no lock held. One goroutine delivers at a time; one that finds
// another at work leaves the queue to it. A handler is looked up when its
// event is delivered, so a request's new ID may get its handler (in the
// CONNECT_REQUEST's delivery) after its first events were queued. Called
// without cm.mu.
func deliverEvents() {
	cm.mu.Lock()
	if cm.delivering {
		cm.mu.Unlock()
		return
	}
	cm.delivering = true
	for len(cm.events) > 0 {
		e := cm.events[0]
		cm.events = fifo.PopFront(cm.events)
		h := e.id.handle
		cm.mu.Unlock()
		switch {
		case h != nil:
			h(e.ev)
		case e.ev.Child != nil:
			// A request for a listener nobody hears: refuse it.
			e.ev.Child.Reject(nil)
			e.ev.Child.Destroy()
		}
		cm.mu.Lock()
	}
	if cap(cm.events) > maxKeptEvents {
		cm.events = nil // what a burst grew goes
	}
	cm.delivering = false
	cmUnlock()
}

// SetHandler implements BackendID.
func (id *cmID) SetHandler(handle func(BackendEvent)) {
	cm.mu.Lock()
	defer cm.mu.Unlock()
	id.handle = handle
}

// SetTOS implements BackendID.
func (id *cmID) SetTOS(tos uint8) error {
	cm.mu.Lock()
	defer cm.mu.Unlock()
	id.opts.tos = tos
	return nil
}

// SetReuseAddr implements BackendID.
func (id *cmID) SetReuseAddr(on bool) error {
	cm.mu.Lock()
	defer cm.mu.Unlock()
	id.opts.reuseAddr = on
	return nil
}

// SetACKTimeout implements BackendID.
func (id *cmID) SetACKTimeout(code uint8) error {
	cm.mu.Lock()
	defer cm.mu.Unlock()
	id.opts.ackTimeout = code
	return nil
}

// SetCMTimeouts implements cmTimeoutSetter.
func (id *cmID) SetCMTimeouts(responseTimeout, maxRetries uint8) error {
	cm.mu.Lock()
	defer cm.mu.Unlock()
	id.opts.cmSet = true
	id.opts.cmTimeout = responseTimeout
	id.opts.cmRetries = maxRetries
	return nil
}

// Device implements BackendID.
func (id *cmID) Device() *verbs.Device {
	cm.mu.Lock()
	defer cm.mu.Unlock()
	if id.agent == nil {
		return nil
	}
	return id.agent.dev
}

// LocalAddr implements BackendID.
func (id *cmID) LocalAddr() netip.AddrPort {
	cm.mu.Lock()
	defer cm.mu.Unlock()
	return id.local
}

// PeerAddr implements BackendID.
func (id *cmID) PeerAddr() netip.AddrPort {
	cm.mu.Lock()
	defer cm.mu.Unlock()
	return id.peer
}

// Route implements BackendID.
func (id *cmID) Route() Route {
	cm.mu.Lock()
	defer cm.mu.Unlock()
	return id.route
}

// BindAddr implements BackendID: it reserves the port in the port space
// and, for an address of a device, starts or shares the device's agent.
func (id *cmID) BindAddr(addr netip.AddrPort) error {
	const op = "rdma_bind_addr"
	ip := addr.Addr().Unmap()
	if !ip.IsValid() {
		return verbs.Errorf(op, verbs.ErrInvalidArgument, "no address")
	}
	var dev *verbs.Device
	if !ip.IsUnspecified() {
		if dev = deviceFor(ip); dev == nil {
			return noDevice(op, ip)
		}
	}
	cm.mu.Lock()
	defer cmUnlock()
	if id.state != stateIdle {
		return verbs.Errorf(op, verbs.ErrInvalidArgument, "the ID is already bound")
	}
	var a *agent
	if dev != nil {
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

// noDevice is BindAddr's error for an address no device holds.
func noDevice(op string, ip netip.Addr) error {
	why := "no RDMA device serves " + ip.String()
	if _, err := verbs.Devices(); err != nil {
		why += " (" + err.Error() + ")"
	} else if h := verbs.NoProviderHint(); h != "" {
		why += " (" + h + ")"
	}
	return verbs.Errorf(op, verbs.ErrAddrNotAvail, why)
}

// ResolveAddr implements BackendID. Resolution over RoCEv2 needs no
// network exchange: ADDR_RESOLVED or ADDR_ERROR is queued at once.
func (id *cmID) ResolveAddr(src, dst netip.AddrPort, _ time.Duration) error {
	const op = "rdma_resolve_addr"
	d := dst.Addr().Unmap()
	cm.mu.Lock()
	state := id.state
	cmUnlock()
	if state == stateIdle && src.Addr().IsValid() {
		if err := id.BindAddr(src); err != nil {
			return err
		}
	}
	cm.mu.Lock()
	defer cmUnlock()
	if id.state != stateIdle && id.state != stateAddrBound {
		return verbs.Errorf(op, verbs.ErrInvalidArgument, "the ID is not idle")
	}
	status := id.resolveAddr(d)
	if status != 0 {
		id.event(BackendEvent{Type: EventAddrError, Status: status})
		return nil
	}
	id.peer = netip.AddrPortFrom(d, dst.Port())
	id.state = stateAddrResolved
	id.event(BackendEvent{Type: EventAddrResolved})
	return nil
}

// resolveAddr finds the device and source address for d. It returns 0 or
// a negative errno. Called with cm.mu held.
func (id *cmID) resolveAddr(d netip.Addr) int {
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

// ResolveRoute implements BackendID: on RoCEv2 the source and
// destination GIDs and the path MTU, queued as ROUTE_RESOLVED at once.
func (id *cmID) ResolveRoute(time.Duration) error {
	cm.mu.Lock()
	defer cmUnlock()
	if id.state != stateAddrResolved {
		return verbs.Errorf("rdma_resolve_route", verbs.ErrInvalidArgument, "the address is not resolved")
	}
	a := id.agent
	id.route = Route{
		SGID:         verbs.GIDFromAddr(id.local.Addr()),
		DGID:         verbs.GIDFromAddr(id.peer.Addr()),
		SGIDIndex:    uint8(max(a.gidIndex(id.local.Addr()), 0)),
		PathMTU:      a.mtu,
		HopLimit:     64,
		TrafficClass: id.opts.tos,
	}
	id.state = stateRouteResolved
	id.event(BackendEvent{Type: EventRouteResolved})
	return nil
}

// maxBacklog is the most connection requests a listener holds pending
// (the default of Linux's net.rdma_ucm.max_backlog).
const maxBacklog = 1024

// Listen implements BackendID. A wildcard listens on every device of the
// address family; on devices other processes share, the service is
// claimed, so that their connection requests come here (and a second
// listener is refused). A backlog that is not positive or is above
// maxBacklog means maxBacklog.
func (id *cmID) Listen(backlog int) error {
	const op = "rdma_listen"
	cm.mu.Lock()
	bound, wild := id.state == stateAddrBound, id.agent == nil
	cmUnlock()
	if !bound {
		return verbs.Errorf(op, verbs.ErrInvalidArgument, "the ID is not bound (rdma_bind_addr)")
	}
	var devs []*verbs.Device
	if wild {
		devs = candidates()
	}
	cm.mu.Lock()
	defer cmUnlock()
	if id.state != stateAddrBound || id.agents != nil {
		return verbs.Errorf(op, verbs.ErrInvalidArgument, "the ID changed state (destroyed?) while listening")
	}
	if backlog <= 0 || backlog > maxBacklog {
		backlog = maxBacklog
	}
	id.backlog = backlog
	if wild {
		for _, d := range devs {
			if !hasFamily(d, id.local.Addr()) {
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

// hasFamily reports whether device d has an address of ip's family.
func hasFamily(d *verbs.Device, ip netip.Addr) bool {
	for _, a := range deviceAddrs(d) {
		if a.Is4() == ip.Is4() {
			return true
		}
	}
	return false
}

// releaseClaims gives up the listener's service claims.
func (id *cmID) releaseClaims() {
	for _, r := range id.claims {
		r()
	}
	id.claims = nil
}

// listensOn reports whether a wildcard listener listens on agent a.
func (id *cmID) listensOn(a *agent) bool {
	for _, x := range id.agents {
		if x == a {
			return true
		}
	}
	return false
}

// AttachQP implements BackendID: it moves qp to INIT, or a UD QP all the
// way to RTS.
func (id *cmID) AttachQP(qp *verbs.QP) error {
	cm.mu.Lock()
	attr, mask, err := id.qpAttr(verbs.QPSInit)
	cm.mu.Unlock()
	if err != nil {
		return err
	}
	if qp.Type() == verbs.QPTUD {
		attr.QKey = UDPQKey
		mask |= verbs.QPAttrQKey
		mask &^= verbs.QPAttrAccessFlags
	}
	if err := qp.Modify(&attr, mask); err != nil {
		return err
	}
	if qp.Type() == verbs.QPTUD {
		if err := qp.Modify(&verbs.QPAttr{QPState: verbs.QPSRTR}, verbs.QPAttrState); err != nil {
			return err
		}
		if err := qp.Modify(&verbs.QPAttr{QPState: verbs.QPSRTS, SQPSN: randUint32() & 0xffffff}, verbs.QPAttrState|verbs.QPAttrSQPSN); err != nil {
			return err
		}
	}
	cm.mu.Lock()
	defer cm.mu.Unlock()
	id.qp, id.qpType = qp, qp.Type()
	return nil
}

// DetachQP implements BackendID.
func (id *cmID) DetachQP() {
	cm.mu.Lock()
	defer cm.mu.Unlock()
	id.qp = nil
}

// JoinMulticast implements BackendID. On RoCE there is no subnet manager
// to ask: the join completes at once, attaching the ID's QP to the group
// unless flags is JoinSendOnlyFullMember.
func (id *cmID) JoinMulticast(ip netip.Addr, flags MulticastJoinFlags) error {
	const op = "rdma_join_multicast"
	cm.mu.Lock()
	if id.agent == nil {
		cmUnlock()
		return verbs.Errorf(op, verbs.ErrInvalidArgument, "the ID is bound to no device (bind a local address)")
	}
	ev := BackendEvent{Type: EventMulticastJoin, Group: ip, UD: UDParam{QPNum: MulticastQPN, QKey: UDPQKey,
		AHAttr: verbs.AHAttr{IsGlobal: true, PortNum: 1, GRH: verbs.GlobalRoute{DGID: MulticastGID(ip),
			SGIDIndex: uint8(max(id.agent.gidIndex(id.local.Addr()), 0)), HopLimit: mcastHopLimit, TrafficClass: id.opts.tos}}}}
	qp := id.qp
	cmUnlock()
	var attached *verbs.QP
	if qp != nil && flags != JoinSendOnlyFullMember {
		if err := qp.AttachMcast(ev.UD.AHAttr.GRH.DGID, 0); err != nil {
			ev = BackendEvent{Type: EventMulticastError, Group: ip, Status: -int(errnoOf(err))}
		} else {
			attached = qp
		}
	}
	cm.mu.Lock()
	defer cmUnlock()
	if id.groups == nil {
		id.groups = map[netip.Addr]*verbs.QP{}
	}
	id.groups[ip] = attached
	id.event(ev)
	return nil
}

// LeaveMulticast implements BackendID: it detaches the QP the join
// attached, if any.
func (id *cmID) LeaveMulticast(ip netip.Addr) error {
	cm.mu.Lock()
	qp, ok := id.groups[ip]
	delete(id.groups, ip)
	cmUnlock()
	if !ok {
		return verbs.Errorf("rdma_leave_multicast", verbs.ErrAddrNotAvail, "the ID has not joined "+ip.String())
	}
	return detachGroup(qp, ip)
}

// detachGroup detaches qp, if not nil, from group ip.
func detachGroup(qp *verbs.QP, ip netip.Addr) error {
	if qp == nil {
		return nil
	}
	err := qp.DetachMcast(MulticastGID(ip), 0)
	if errors.Is(err, verbs.ErrClosed) {
		return nil // the QP is gone, and its attachments with it
	}
	return err
}

// Destroy implements BackendID: it ends the connection as the ib_cm does
// when its cm_id is destroyed (a connected one disconnects and lingers
// for its timewait, answering the peer), frees the port, and waits, at
// most flushTimeout, for its last MAD to leave.
func (id *cmID) Destroy() error {
	cm.mu.Lock()
	if id.state == stateDestroying {
		cmUnlock()
		return nil
	}
	id.abandon()
	id.state = stateDestroying
	unbindPort(id)
	id.releaseClaims()
	for _, a := range id.agents {
		a.release()
	}
	id.agents = nil
	id.countDone()
	groups := id.groups
	id.groups = nil
	a, issued := id.agent, uint64(0)
	if a != nil {
		issued = a.issued
	}
	cmUnlock()
	for ip, qp := range groups {
		detachGroup(qp, ip)
	}
	if a != nil {
		a.flush(issued, flushTimeout)
	}
	cm.mu.Lock()
	id.dropAgent()
	cmUnlock()
	return nil
}

// flushTimeout bounds how long Destroy and Disconnect wait for their CM
// message to leave.
const flushTimeout = time.Second

// InitQPAttr implements BackendID.
func (id *cmID) InitQPAttr(s verbs.QPState) (verbs.QPAttr, verbs.QPAttrMask, error) {
	cm.mu.Lock()
	defer cm.mu.Unlock()
	return id.qpAttr(s)
}

// qpAttr is InitQPAttr with cm.mu held.
func (id *cmID) qpAttr(s verbs.QPState) (verbs.QPAttr, verbs.QPAttrMask, error) {
	const op = "rdma_init_qp_attr"
	c := &id.c
	switch s {
	case verbs.QPSInit:
		if id.agent == nil {
			return verbs.QPAttr{}, 0, verbs.Errorf(op, verbs.ErrInvalidArgument, "the ID is not bound to a device")
		}
		attr := verbs.QPAttr{QPState: verbs.QPSInit, PortNum: 1,
			QPAccessFlags: verbs.AccessLocalWrite | verbs.AccessRemoteWrite | verbs.AccessRemoteRead | verbs.AccessRemoteAtomic}
		mask := verbs.QPAttrState | verbs.QPAttrPKeyIndex | verbs.QPAttrPort | verbs.QPAttrAccessFlags
		if id.qpType == verbs.QPTUD {
			attr.QKey = UDPQKey
			mask = mask&^verbs.QPAttrAccessFlags | verbs.QPAttrQKey
		}
		return attr, mask, nil
	case verbs.QPSRTR:
		if c.state != cmRepRcvd && c.state != cmReqRcvd && c.state != cmMRAReqSent && c.state != cmRepSent && c.state != cmEstablished {
			return verbs.QPAttr{}, 0, verbs.Errorf(op, verbs.ErrInvalidArgument, "the peer's QP is not known yet")
		}
		attr := verbs.QPAttr{
			QPState:         verbs.QPSRTR,
			PathMTU:         c.pathMTU,
			DestQPNum:       c.remoteQPN,
			RQPSN:           c.myPSN,
			MaxDestRdAtomic: c.respRes,
			MinRNRTimer:     minRNRTimer,
			AHAttr: verbs.AHAttr{IsGlobal: true, PortNum: 1, GRH: verbs.GlobalRoute{
				DGID: verbs.GIDFromAddr(c.peerGID), SGIDIndex: uint8(c.sgid),
				HopLimit: id.route.HopLimit, TrafficClass: id.route.TrafficClass, FlowLabel: id.route.FlowLabel}},
		}
		mask := verbs.QPAttrState | verbs.QPAttrAV | verbs.QPAttrPathMTU | verbs.QPAttrDestQPN | verbs.QPAttrRQPSN
		if id.qpType != verbs.QPTUC {
			mask |= verbs.QPAttrMaxDestRdAtomic | verbs.QPAttrMinRNRTimer
		}
		return attr, mask, nil
	case verbs.QPSRTS:
		if c.state != cmRepRcvd && c.state != cmReqRcvd && c.state != cmMRAReqSent && c.state != cmRepSent && c.state != cmEstablished {
			return verbs.QPAttr{}, 0, verbs.Errorf(op, verbs.ErrInvalidArgument, "the peer's QP is not known yet")
		}
		attr := verbs.QPAttr{QPState: verbs.QPSRTS, SQPSN: c.peerPSN, Timeout: c.ackTO,
			RetryCnt: c.retryCnt, RNRRetry: c.rnrRetry, MaxRdAtomic: c.initDepth}
		mask := verbs.QPAttrState | verbs.QPAttrSQPSN
		if id.qpType != verbs.QPTUC {
			mask |= verbs.QPAttrTimeout | verbs.QPAttrRetryCnt | verbs.QPAttrRNRRetry | verbs.QPAttrMaxQPRdAtomic
		}
		return attr, mask, nil
	case verbs.QPSErr:
		return verbs.QPAttr{QPState: verbs.QPSErr}, verbs.QPAttrState, nil
	}
	return verbs.QPAttr{}, 0, verbs.Errorf(op, verbs.ErrInvalidArgument, fmt.Sprintf("no attributes for state %v", s))
}

// qpToRTS moves the ID's QP to RTR and RTS for its connection. Called with
// cm.mu held.
func (id *cmID) qpToRTS() error {
	var attr verbs.QPAttr // one for both moves: Modify keeps no pointer to it, and it escapes
	for _, s := range []verbs.QPState{verbs.QPSRTR, verbs.QPSRTS} {
		var mask verbs.QPAttrMask
		var err error
		if attr, mask, err = id.qpAttr(s); err != nil {
			return err
		}
		if err := id.qp.Modify(&attr, mask); err != nil {
			return err
		}
	}
	return nil
}

// qpToError moves the ID's QP to ERR, flushing its work requests. Called
// with cm.mu held.
func (id *cmID) qpToError() {
	if id.qp != nil && id.qp.Type() != verbs.QPTUD {
		id.qp.Modify(&verbs.QPAttr{QPState: verbs.QPSErr}, verbs.QPAttrState)
	}
}
