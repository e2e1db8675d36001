package rdmacm

import (
	"net/netip"
	"time"

	"github.com/rdmago/rdmago/rdmacm/mad"
	"github.com/rdmago/rdmago/verbs"
)

// cmState is a connection's IB CM state (IBTA vol. 1 §12.9; enum
// ib_cm_state).
type cmState int

const (
	cmIdle cmState = iota
	cmReqSent
	cmReqRcvd
	cmMRAReqSent
	cmMRAReqRcvd
	cmRepSent
	cmRepRcvd
	cmEstablished
	cmDreqSent
	cmDreqRcvd
	cmTimewait
	cmSIDRReqSent
	cmSIDRReqRcvd
)

// conn is an ID's IB CM connection.
type conn struct {
	state      cmState
	localID    uint32 // our communication ID (or SIDR request ID)
	remoteID   uint32
	remoteGUID uint64
	remoteQPN  uint32
	tid        uint64
	sgid       int        // our GID index
	peerGID    netip.Addr // the peer's GID
	registered bool       // in the agent's tables

	retr    *retrier // the MAD being resent: REQ, REP, DREQ or SIDR_REQ
	last    []byte   // the last reply sent (RTU, MRA, REJ, DREP), for duplicates
	timeout time.Duration
	retries int

	// What Accept needs of a received REQ, its responder resources and
	// initiator depth, and what the SIDR_REP needs of a SIDR_REQ, its
	// service ID. The messages themselves are not kept: a connection
	// lingers in timewait for seconds after it is closed, and a busy
	// server holds thousands.
	peerRespRes   uint8
	peerInitDepth uint8
	serviceID     mad.ServiceID

	myPSN     uint32 // the PSN the peer sends from
	peerPSN   uint32 // the PSN we send from
	respRes   uint8  // our max_dest_rd_atomic
	initDepth uint8  // our max_rd_atomic
	ackTO     uint8  // the QP's local ACK timeout code
	retryCnt  uint8
	rnrRetry  uint8
	pathMTU   verbs.MTU

	timewait     stopper
	counted      bool // counted in the listener's pending requests
	lingering    bool // destroyed by the user, kept until timewait ends
	disconnected bool // DISCONNECTED was delivered
	ud           UDParam
}

// register enters the connection in its agent's tables. Called with cm.mu
// held.
func (id *cmID) register() {
	a := id.agent
	id.c.registered = true
	a.conns[id.c.localID] = id
	if id.c.remoteID != 0 {
		a.remotes[remoteKey{id.c.remoteID, id.c.remoteGUID}] = id
	}
}

// unregister removes the connection from its agent's tables and stops its
// timers. Called with cm.mu held.
func (id *cmID) unregister() {
	c := &id.c
	c.retr.stop()
	c.retr = nil
	if c.timewait != nil {
		c.timewait.Stop()
		c.timewait = nil
	}
	if !c.registered {
		return
	}
	c.registered = false
	a := id.agent
	if a.conns[c.localID] == id {
		delete(a.conns, c.localID)
	}
	if k := (remoteKey{c.remoteID, c.remoteGUID}); a.remotes[k] == id {
		delete(a.remotes, k)
	}
	if k := (remoteKey{c.remoteQPN, c.remoteGUID}); a.qpns[k] == id {
		delete(a.qpns, k)
	}
}

// dropAgent lets go of the ID's agent unless its connection lingers.
// Called with cm.mu held.
func (id *cmID) dropAgent() {
	if id.c.lingering || id.agent == nil {
		return
	}
	id.unregister()
	id.agent.release()
	id.agent = nil
}

// abandon ends the connection of an ID being destroyed as the ib_cm does
// when its cm_id is destroyed. Called with cm.mu held.
func (id *cmID) abandon() {
	c := &id.c
	switch c.state {
	case cmReqSent, cmMRAReqRcvd:
		id.sendREJ(mad.RejectTimeout, mad.MsgCodeREQ, nil)
		id.toIdle()
	case cmReqRcvd, cmMRAReqSent, cmRepSent:
		id.sendREJ(mad.RejectConsumerDefined, mad.MsgCodeREQ, nil)
		id.toIdle()
	case cmRepRcvd:
		id.sendREJ(mad.RejectConsumerDefined, mad.MsgCodeREP, nil)
		id.toIdle()
	case cmEstablished:
		id.sendDREQ(nil)
		c.lingering = true
	case cmDreqSent, cmTimewait:
		c.lingering = true
	case cmDreqRcvd:
		id.sendDREP(nil)
		c.lingering = true
	case cmSIDRReqRcvd:
		// Refuse it, or the peer's next retry would be a new request.
		id.sendSIDRREP(mad.SIDRReject, 0, nil)
		id.toIdle()
	case cmSIDRReqSent:
		id.toIdle()
	}
}

// toIdle ends the connection's CM state. Called with cm.mu held.
func (id *cmID) toIdle() {
	id.unregister()
	id.c.state = cmIdle
}

// peerTimeout is how long to wait for the peer to answer a CM message: the
// round trip of two packet lifetimes plus its response time (as the
// ib_cm's timeout_ms).
func peerTimeout(ackTimeout, responseTimeout uint8) time.Duration {
	pl := ackTimeout - 1
	return 2*ibTime(pl) + ibTime(responseTimeout)
}

// ---- Active side ----

// Connect implements BackendID: for a connected QP it sends a REQ, for a
// datagram one (the UDP port space, or a UD QP) a SIDR_REQ.
func (id *cmID) Connect(p *ConnParam) error {
	const op = "rdma_connect"
	cm.mu.Lock()
	defer cmUnlock()
	if id.state != stateRouteResolved {
		return verbs.Errorf(op, verbs.ErrInvalidArgument, "the route is not resolved")
	}
	param, err := id.connParam(p)
	if err != nil {
		return err
	}
	if id.ps == PSUDP || id.qpType == verbs.QPTUD {
		err = id.sendSIDRREQ(param.PrivateData)
	} else {
		err = id.sendREQ(param)
	}
	if err != nil {
		return verbs.Errorf(op, verbs.ErrInvalidArgument, err.Error())
	}
	id.state = stateConnect
	return nil
}

// connParam fills in the defaults of p. Called with cm.mu held.
func (id *cmID) connParam(p *ConnParam) (ConnParam, error) {
	var out ConnParam
	if p != nil {
		out = *p
	} else {
		da, _ := id.agent.ctx.QueryDevice()
		out = ConnParam{ResponderResources: uint8(min(da.MaxQPRdAtom, 255)),
			InitiatorDepth: uint8(min(da.MaxQPInitRdAtom, 255)), RetryCount: 7, RNRRetryCount: 7}
	}
	if out.RetryCount > 7 {
		out.RetryCount = 7
	}
	if out.RNRRetryCount > 7 {
		out.RNRRetryCount = 7
	}
	if id.qp == nil && out.QPNum == 0 && id.ps != PSUDP {
		return out, verbs.Errorf("rdma_connect", verbs.ErrInvalidArgument, "the ID has no QP and ConnParam.QPNum is 0")
	}
	return out, nil
}

// sendREQ builds and sends the REQ of a connection. Called with cm.mu held.
func (id *cmID) sendREQ(p ConnParam) error {
	a, c := id.agent, &id.c
	var user []byte
	if len(p.PrivateData) > mad.REQUserPrivateDataLen {
		return errf("private data of %d bytes: a REQ carries at most %d", len(p.PrivateData), mad.REQUserPrivateDataLen)
	}
	user = p.PrivateData
	qpn, srq := p.QPNum, p.SRQ != 0
	if id.qp != nil {
		qpn, srq = id.qp.Num(), id.qp.SRQ() != nil
	}
	*c = conn{state: cmReqSent, sgid: int(id.route.SGIDIndex), peerGID: id.peer.Addr()}
	c.localID = a.newCommID()
	c.tid = uint64(c.localID)<<32 | uint64(randUint32())
	c.myPSN = randUint32() & 0xffffff
	c.respRes, c.initDepth = p.ResponderResources, p.InitiatorDepth
	c.ackTO = id.opts.ack()
	c.retryCnt = p.RetryCount
	c.pathMTU = id.route.PathMTU
	rt := id.opts.responseTimeout()
	c.timeout = peerTimeout(c.ackTO, rt)
	c.retries = int(id.opts.retries())
	transport := mad.TransportRC
	if id.qp != nil && id.qp.Type() == verbs.QPTUC {
		transport = mad.TransportUC
	}
	req := &mad.REQ{
		LocalCommID:             c.localID,
		ServiceID:               mad.MakeServiceID(mad.PortSpace(id.ps), id.peer.Port()),
		LocalCAGUID:             a.guid,
		LocalQPN:                qpn,
		ResponderResources:      p.ResponderResources,
		InitiatorDepth:          p.InitiatorDepth,
		RemoteCMResponseTimeout: rt,
		TransportServiceType:    transport,
		EndToEndFlowControl:     p.FlowControl != 0,
		StartingPSN:             c.myPSN,
		LocalCMResponseTimeout:  rt,
		RetryCount:              p.RetryCount,
		PKey:                    0xffff,
		PathMTU:                 mad.MTU(id.route.PathMTU),
		RNRRetryCount:           p.RNRRetryCount,
		MaxCMRetries:            uint8(c.retries),
		SRQ:                     srq,
		Primary: mad.Path{
			LocalLID:        0xffff,
			RemoteLID:       0xffff,
			LocalGID:        mad.GIDFromAddr(id.local.Addr()),
			RemoteGID:       mad.GIDFromAddr(id.peer.Addr()),
			FlowLabel:       flowLabel(qpn, c.localID),
			TrafficClass:    id.route.TrafficClass,
			HopLimit:        id.route.HopLimit,
			LocalACKTimeout: c.ackTO,
		},
	}
	id.route.FlowLabel = req.Primary.FlowLabel
	h := mad.CMAHeader{Port: id.local.Port(), Src: id.local.Addr(), Dst: id.peer.Addr()}
	if id.ps == PSIB {
		// The IB port space carries the user's private data whole.
		copy(req.PrivateData[:], user)
	} else if err := req.SetCMAPrivateData(&h, user); err != nil {
		return err
	}
	id.register()
	c.retr = a.startRetrier(marshal(c.tid, req), c.peerGID, c.sgid, c.timeout, c.retries, id, (*cmID).reqTimedOut)
	return nil
}

// flowLabel derives a 20-bit flow label for a connection, which RoCEv2
// devices turn into the UDP source port of its packets.
func flowLabel(qpn, commID uint32) uint32 {
	v := uint64(qpn)*0x9e3779b97f4a7c15 ^ uint64(commID)
	v ^= v >> 29
	return uint32(v) & 0xfffff
}

// reqTimedOut: the REQ went unanswered (IB_CM_REQ_ERROR).
func (id *cmID) reqTimedOut() {
	id.c.retr = nil
	id.toIdle()
	id.qpToError()
	id.event(BackendEvent{Type: EventUnreachable, Status: -int(verbs.ErrTimedOut)})
}

func (a *agent) handleMRA(in *inMAD, m *mad.MRA) {
	id := a.conns[m.RemoteCommID]
	if id == nil {
		return
	}
	c := &id.c
	wait := 2*ibTime(c.ackTO-1) + ibTime(m.ServiceTimeout)
	switch {
	case m.MessageMRAed == mad.MsgCodeREQ && (c.state == cmReqSent || c.state == cmMRAReqRcvd):
		c.state = cmMRAReqRcvd
	case m.MessageMRAed == mad.MsgCodeREP && c.state == cmRepSent:
	default:
		return
	}
	// The peer needs longer: wait for its service time before resending
	// (IBTA §12.6.6; the ib_cm lengthens the MAD's timeout).
	c.retr.extend(wait)
}

func (a *agent) handleREP(in *inMAD, m *mad.REP) {
	id := a.conns[m.RemoteCommID]
	if id == nil {
		// Linux answers a REP for no connection with REJ "invalid
		// communication ID".
		a.reply(in, &mad.REJ{LocalCommID: m.RemoteCommID, RemoteCommID: m.LocalCommID, MessageRejected: mad.MsgCodeREP, Reason: mad.RejectInvalidCommID})
		return
	}
	c := &id.c
	switch c.state {
	case cmReqSent, cmMRAReqRcvd:
	case cmEstablished:
		if m.LocalCommID == c.remoteID {
			a.answer(c.last, c.peerGID, c.sgid) // our RTU was lost
		}
		return
	default:
		return
	}
	if k := (remoteKey{m.LocalQPN, m.LocalCAGUID}); a.qpns[k] != nil && a.qpns[k] != id {
		// The peer's QP is still connected to another of our IDs.
		c.retr.stop()
		c.remoteID = m.LocalCommID
		id.sendREJ(mad.RejectStaleConn, mad.MsgCodeREP, nil)
		id.toIdle()
		// Reported as the REJ this side sent: reason 10, stale
		// connection (an ICMP port unreachable is ECONNREFUSED).
		id.event(BackendEvent{Type: EventRejected, Status: int(mad.RejectStaleConn)})
		return
	}
	c.retr.stop()
	c.retr = nil
	c.remoteID, c.remoteGUID, c.remoteQPN = m.LocalCommID, m.LocalCAGUID, m.LocalQPN
	a.remotes[remoteKey{c.remoteID, c.remoteGUID}] = id
	a.qpns[remoteKey{c.remoteQPN, c.remoteGUID}] = id
	c.peerPSN = m.StartingPSN
	c.respRes = min(c.respRes, m.InitiatorDepth)
	c.initDepth = min(c.initDepth, m.ResponderResources)
	c.rnrRetry = m.RNRRetryCount
	param := ConnParam{PrivateData: append([]byte(nil), m.PrivateData[:]...),
		ResponderResources: m.InitiatorDepth, InitiatorDepth: m.ResponderResources,
		FlowControl: b2u8(m.EndToEndFlowControl), RNRRetryCount: m.RNRRetryCount, SRQ: b2u8(m.SRQ), QPNum: m.LocalQPN}
	c.state = cmRepRcvd
	if id.qp == nil {
		// The user moves the QP and calls Establish.
		id.event(BackendEvent{Type: EventConnectResponse, Param: param})
		return
	}
	if err := id.qpToRTS(); err != nil {
		id.sendREJ(mad.RejectConsumerDefined, mad.MsgCodeREP, nil)
		id.toIdle()
		id.event(BackendEvent{Type: EventConnectError, Status: -int(verbs.ErrInvalidArgument)})
		return
	}
	id.sendRTU()
	id.event(BackendEvent{Type: EventEstablished, Param: param})
}

// sendRTU sends the RTU that completes the handshake. Called with cm.mu
// held.
func (id *cmID) sendRTU() {
	c := &id.c
	c.last = marshal(c.tid, &mad.RTU{LocalCommID: c.localID, RemoteCommID: c.remoteID})
	id.agent.send(c.last, c.peerGID, c.sgid)
	c.state = cmEstablished
}

// Establish implements BackendID: it sends the RTU.
func (id *cmID) Establish() error {
	cm.mu.Lock()
	defer cmUnlock()
	if id.c.state != cmRepRcvd {
		return verbs.Errorf("rdma_establish", verbs.ErrInvalidArgument, "no connect response to answer")
	}
	id.sendRTU()
	return nil
}

func (a *agent) handleREJ(in *inMAD, m *mad.REJ) {
	var id *cmID
	if m.RemoteCommID != 0 {
		id = a.conns[m.RemoteCommID]
	} else {
		for _, x := range a.conns {
			switch {
			case m.LocalCommID != 0 && x.c.remoteID == m.LocalCommID && x.c.peerGID == in.src:
				// The active side gave up on a request we hold.
				id = x
			case m.MessageRejected == mad.MsgCodeREQ && x.c.tid == in.hdr.TransactionID &&
				(x.c.state == cmReqSent || x.c.state == cmMRAReqRcvd):
				// Refused before the peer made an ID: found by the TID.
				id = x
			}
		}
	}
	if id == nil {
		return
	}
	c := &id.c
	if c.remoteID != 0 && m.LocalCommID != c.remoteID {
		return // from another connection of the peer's
	}
	param := ConnParam{PrivateData: append([]byte(nil), m.PrivateData[:]...)}
	switch c.state {
	case cmReqSent, cmMRAReqRcvd, cmRepRcvd, cmRepSent, cmMRAReqSent, cmReqRcvd:
		id.countDone()
		id.toIdle()
		id.qpToError()
		id.event(BackendEvent{Type: EventRejected, Status: int(m.Reason), Param: param})
	case cmEstablished, cmDreqSent, cmDreqRcvd:
		// The peer gave up on the connection (a stale one, say): as
		// Linux's cma, report REJECTED with its reason.
		id.qpToError()
		id.enterTimewait()
		id.c.disconnected = true
		id.event(BackendEvent{Type: EventRejected, Status: int(m.Reason), Param: param})
	}
}

// ---- Passive side ----

func (a *agent) handleREQ(in *inMAD, m *mad.REQ) {
	// A duplicate of a REQ already being handled.
	if id := a.remotes[remoteKey{m.LocalCommID, m.LocalCAGUID}]; id != nil {
		c := &id.c
		switch c.state {
		case cmReqRcvd:
			// The user is still deciding: ask the peer to wait.
			c.state = cmMRAReqSent
			id.sendMRA()
		case cmMRAReqSent:
			a.answer(c.last, c.peerGID, c.sgid)
		case cmTimewait:
			a.reply(in, &mad.REJ{LocalCommID: c.localID, RemoteCommID: m.LocalCommID, MessageRejected: mad.MsgCodeREQ, Reason: mad.RejectStaleConn})
		}
		return
	}
	if m.TransportServiceType != mad.TransportRC && m.TransportServiceType != mad.TransportUC {
		a.reply(in, &mad.REJ{RemoteCommID: m.LocalCommID, MessageRejected: mad.MsgCodeREQ, Reason: mad.RejectInvalidTransportType})
		return
	}
	if a.gidIndex(m.Primary.RemoteGID.Addr()) < 0 {
		rej := &mad.REJ{RemoteCommID: m.LocalCommID, MessageRejected: mad.MsgCodeREQ, Reason: mad.RejectInvalidGID, RejectInfoLen: 16}
		copy(rej.ARI[:], m.Primary.RemoteGID[:])
		a.reply(in, rej)
		return
	}
	// A connection from a QP that is still connected here is stale.
	if old := a.qpns[remoteKey{m.LocalQPN, m.LocalCAGUID}]; old != nil {
		a.reply(in, &mad.REJ{RemoteCommID: m.LocalCommID, MessageRejected: mad.MsgCodeREQ, Reason: mad.RejectStaleConn})
		return
	}
	ps, port, ok := m.ServiceID.Split()
	var hdr mad.CMAHeader
	var user []byte
	var lis *cmID
	if ok {
		dst := m.Primary.RemoteGID.Addr()
		if PortSpace(ps) != PSIB {
			h, u, err := m.CMAHeader()
			if err == nil {
				hdr, user, dst = h, u, h.Dst
			}
		} else {
			user = m.PrivateData[:]
		}
		if user != nil {
			lis = listenerFor(a, PortSpace(ps), port, dst)
		}
	}
	if lis == nil {
		a.reply(in, &mad.REJ{RemoteCommID: m.LocalCommID, MessageRejected: mad.MsgCodeREQ, Reason: mad.RejectInvalidServiceID})
		return
	}
	if lis.pending >= lis.backlog {
		a.stats.Dropped++ // the peer resends
		return
	}
	// A new ID for the request, handed to the listener's handler.
	child := &cmID{ps: lis.ps, state: stateConnect, qpType: verbs.QPTRC, parent: lis, opts: lis.opts}
	if m.TransportServiceType == mad.TransportUC {
		child.qpType = verbs.QPTUC
	}
	a.refs++
	child.agent = a
	src := m.Primary.LocalGID.Addr()
	srcPort := uint16(0)
	if hdr.Src.IsValid() {
		src, srcPort = hdr.Src, hdr.Port
	}
	child.local = netip.AddrPortFrom(m.Primary.RemoteGID.Addr(), port)
	child.peer = netip.AddrPortFrom(src, srcPort)
	c := &child.c
	*c = conn{state: cmReqRcvd, sgid: in.sgid, peerGID: in.src, tid: in.hdr.TransactionID,
		remoteID: m.LocalCommID, remoteGUID: m.LocalCAGUID, remoteQPN: m.LocalQPN, counted: true,
		peerRespRes: m.ResponderResources, peerInitDepth: m.InitiatorDepth}
	c.localID = a.newCommID()
	c.peerPSN = m.StartingPSN
	c.myPSN = randUint32() & 0xffffff
	c.ackTO = m.Primary.LocalACKTimeout
	if c.ackTO == 0 {
		c.ackTO = defaultACKTimeout
	}
	c.retryCnt, c.rnrRetry = m.RetryCount, m.RNRRetryCount
	c.pathMTU = min(verbs.MTU(m.PathMTU), a.mtu)
	c.timeout = peerTimeout(c.ackTO, m.LocalCMResponseTimeout)
	c.retries = int(m.MaxCMRetries)
	child.route = Route{SGID: verbs.GIDFromAddr(child.local.Addr()), DGID: verbs.GIDFromAddr(in.src), SGIDIndex: uint8(in.sgid),
		PathMTU: c.pathMTU, HopLimit: m.Primary.HopLimit, TrafficClass: m.Primary.TrafficClass, FlowLabel: m.Primary.FlowLabel}
	child.register()
	lis.pending++
	param := ConnParam{PrivateData: append([]byte(nil), user...),
		ResponderResources: m.InitiatorDepth, InitiatorDepth: m.ResponderResources,
		FlowControl: b2u8(m.EndToEndFlowControl), RetryCount: m.RetryCount, RNRRetryCount: m.RNRRetryCount,
		SRQ: b2u8(m.SRQ), QPNum: m.LocalQPN}
	lis.event(BackendEvent{Type: EventConnectRequest, Param: param, Child: child})
}

// sendMRA asks the peer to wait for our answer to its REQ. Called with
// cm.mu held.
func (id *cmID) sendMRA() {
	c := &id.c
	// Service timeout 24: about 69 s, as Linux's rdma_cm asks.
	c.last = marshal(c.tid, &mad.MRA{LocalCommID: c.localID, RemoteCommID: c.remoteID, MessageMRAed: mad.MsgCodeREQ, ServiceTimeout: 24})
	id.agent.answer(c.last, c.peerGID, c.sgid) // if dropped, the next duplicate sends it
}

// Accept implements BackendID: for a connection it moves the ID's QP to
// RTR and RTS and sends the REP, and ESTABLISHED follows the peer's RTU;
// for a SIDR_REQ it answers with the QP's number, and no event follows.
func (id *cmID) Accept(p *ConnParam) error {
	const op = "rdma_accept"
	cm.mu.Lock()
	defer cmUnlock()
	c := &id.c
	if c.state == cmSIDRReqRcvd {
		return id.acceptSIDR(p)
	}
	if c.state != cmReqRcvd && c.state != cmMRAReqSent {
		return verbs.Errorf(op, verbs.ErrInvalidArgument, "no connection request to accept")
	}
	var param ConnParam
	if p != nil {
		param = *p
	} else {
		param = ConnParam{ResponderResources: c.peerInitDepth, InitiatorDepth: c.peerRespRes, RNRRetryCount: 7}
	}
	if len(param.PrivateData) > mad.REPPrivateDataLen {
		return verbs.Errorf(op, verbs.ErrInvalidArgument, errf("private data of %d bytes: a REP carries at most %d", len(param.PrivateData), mad.REPPrivateDataLen).Error())
	}
	qpn, srq := param.QPNum, param.SRQ != 0
	if id.qp != nil {
		qpn, srq = id.qp.Num(), id.qp.SRQ() != nil
	} else if qpn == 0 {
		return verbs.Errorf(op, verbs.ErrInvalidArgument, "the ID has no QP and ConnParam.QPNum is 0")
	}
	c.respRes = min(param.ResponderResources, 255)
	c.initDepth = min(param.InitiatorDepth, c.peerRespRes)
	if id.qp != nil {
		if err := id.qpToRTS(); err != nil {
			return err
		}
	}
	rep := &mad.REP{
		LocalCommID:         c.localID,
		RemoteCommID:        c.remoteID,
		LocalQPN:            qpn,
		StartingPSN:         c.myPSN,
		ResponderResources:  c.respRes,
		InitiatorDepth:      c.initDepth,
		TargetACKDelay:      15,
		EndToEndFlowControl: param.FlowControl != 0,
		RNRRetryCount:       min(param.RNRRetryCount, 7),
		SRQ:                 srq,
		LocalCAGUID:         id.agent.guid,
	}
	copy(rep.PrivateData[:], param.PrivateData)
	c.state = cmRepSent
	id.countDone()
	id.agent.qpns[remoteKey{c.remoteQPN, c.remoteGUID}] = id
	c.retr = id.agent.startRetrier(marshal(c.tid, rep), c.peerGID, c.sgid, c.timeout, c.retries, id, (*cmID).repTimedOut)
	return nil
}

// countDone takes a request off its listener's backlog. Called with cm.mu
// held.
func (id *cmID) countDone() {
	if id.c.counted && id.parent != nil {
		id.parent.pending--
	}
	id.c.counted = false
}

// repTimedOut: no RTU came (IB_CM_REP_ERROR).
func (id *cmID) repTimedOut() {
	id.c.retr = nil
	id.toIdle()
	id.qpToError()
	id.event(BackendEvent{Type: EventUnreachable, Status: -int(verbs.ErrTimedOut)})
}

func (a *agent) handleRTU(in *inMAD, m *mad.RTU) {
	id := a.conns[m.RemoteCommID]
	if id == nil || id.c.state != cmRepSent || m.LocalCommID != id.c.remoteID {
		return
	}
	id.c.retr.stop()
	id.c.retr = nil
	id.c.state = cmEstablished
	id.event(BackendEvent{Type: EventEstablished, Param: ConnParam{PrivateData: append([]byte(nil), m.PrivateData[:]...)}})
}

// Reject implements BackendID: a REJ of reason "consumer defined" (28),
// or for a SIDR_REQ a SIDR_REP with status "rejected".
func (id *cmID) Reject(privateData []byte) error {
	const op = "rdma_reject"
	cm.mu.Lock()
	defer cmUnlock()
	c := &id.c
	switch c.state {
	case cmSIDRReqRcvd:
		if len(privateData) > mad.SIDRREPPrivateDataLen {
			return verbs.Errorf(op, verbs.ErrInvalidArgument, "private data too long for a SIDR_REP")
		}
		id.sendSIDRREP(mad.SIDRReject, 0, privateData)
		id.countDone()
		id.c.state = cmIdle // kept in the tables to answer duplicates
		return nil
	case cmReqRcvd, cmMRAReqSent:
	default:
		return verbs.Errorf(op, verbs.ErrInvalidArgument, "no connection request to reject")
	}
	if len(privateData) > mad.REJPrivateDataLen {
		return verbs.Errorf(op, verbs.ErrInvalidArgument, errf("private data of %d bytes: a REJ carries at most %d", len(privateData), mad.REJPrivateDataLen).Error())
	}
	id.sendREJ(mad.RejectConsumerDefined, mad.MsgCodeREQ, privateData)
	id.countDone()
	id.toIdle()
	return nil
}

// sendREJ sends a REJ for the connection. Called with cm.mu held.
func (id *cmID) sendREJ(reason mad.RejectReason, msg mad.MsgCode, pdata []byte) {
	c := &id.c
	rej := &mad.REJ{LocalCommID: c.localID, RemoteCommID: c.remoteID, MessageRejected: msg, Reason: reason}
	if reason == mad.RejectTimeout {
		// The ARI of a timeout is our CA GUID.
		rej.RejectInfoLen = 8
		for i := 0; i < 8; i++ {
			rej.ARI[i] = byte(id.agent.guid >> (56 - 8*i))
		}
	}
	copy(rej.PrivateData[:], pdata)
	c.last = marshal(c.tid, rej)
	id.agent.send(c.last, c.peerGID, c.sgid)
}

// ---- Disconnection ----

// Disconnect implements BackendID: it moves the QP to the error state and
// sends a DREQ, or the DREP if the peer disconnected first, and waits, at
// most flushTimeout, for it to leave.
func (id *cmID) Disconnect() error {
	cm.mu.Lock()
	err := id.disconnect()
	a, issued := id.agent, uint64(0)
	if a != nil {
		issued = a.issued
	}
	cmUnlock()
	if err == nil && a != nil {
		a.flush(issued, flushTimeout)
	}
	return err
}

// disconnect is Disconnect with cm.mu held.
func (id *cmID) disconnect() error {
	const op = "rdma_disconnect"
	c := &id.c
	switch c.state {
	case cmEstablished, cmRepSent:
		id.qpToError()
		id.sendDREQ(nil)
	case cmDreqRcvd:
		id.qpToError()
		id.sendDREP(nil)
	case cmDreqSent, cmTimewait:
		return nil
	case cmRepRcvd:
		id.sendREJ(mad.RejectConsumerDefined, mad.MsgCodeREP, nil)
		id.toIdle()
		id.qpToError()
	default:
		return verbs.Errorf(op, verbs.ErrInvalidArgument, "not connected")
	}
	id.state = stateDisconnect
	return nil
}

// sendDREQ starts the disconnection. Called with cm.mu held.
func (id *cmID) sendDREQ(pdata []byte) {
	c := &id.c
	c.retr.stop()
	m := &mad.DREQ{LocalCommID: c.localID, RemoteCommID: c.remoteID, RemoteQPN: c.remoteQPN}
	copy(m.PrivateData[:], pdata)
	c.state = cmDreqSent
	c.retr = id.agent.startRetrier(marshal(c.tid, m), c.peerGID, c.sgid, c.timeout, c.retries, id, (*cmID).dreqTimedOut)
}

// dreqTimedOut: the peer never answered the DREQ (IB_CM_DREQ_ERROR).
func (id *cmID) dreqTimedOut() {
	id.c.retr = nil
	id.enterTimewait()
	id.disconnectedEvent(-int(verbs.ErrTimedOut))
}

// sendDREP answers the peer's DREQ and enters the timewait. Called with
// cm.mu held.
func (id *cmID) sendDREP(pdata []byte) {
	c := &id.c
	m := &mad.DREP{LocalCommID: c.localID, RemoteCommID: c.remoteID}
	copy(m.PrivateData[:], pdata)
	id.agent.send(marshal(c.tid, m), c.peerGID, c.sgid)
	id.enterTimewait() // a DREQ again gets a DREP made afresh
}

// disconnectedEvent delivers DISCONNECTED once.
func (id *cmID) disconnectedEvent(status int) {
	if id.c.disconnected {
		return
	}
	id.c.disconnected = true
	if id.state == stateConnect {
		id.state = stateDisconnect
	}
	id.event(BackendEvent{Type: EventDisconnected, Status: status})
}

// enterTimewait keeps the connection's identifiers reserved for a while so
// that late packets of it are not taken for a new connection's, then lets
// it go (TIMEWAIT_EXIT). Called with cm.mu held.
func (id *cmID) enterTimewait() {
	c := &id.c
	c.retr.stop()
	c.retr = nil
	c.last = nil // timewait answers from scratch (handleDREQ, handleREQ)
	if c.state == cmTimewait {
		return
	}
	c.state = cmTimewait
	if k := (remoteKey{c.remoteQPN, c.remoteGUID}); id.agent.qpns[k] == id {
		delete(id.agent.qpns, k)
	}
	c.timewait = id.agent.clock.afterFunc(ibTime(c.ackTO), func() {
		cm.mu.Lock()
		defer cmUnlock()
		if c.state != cmTimewait || c.timewait == nil {
			return
		}
		c.timewait = nil
		id.toIdle()
		if c.lingering {
			c.lingering = false
			id.dropAgent()
			return
		}
		id.event(BackendEvent{Type: EventTimewaitExit})
	})
}

func (a *agent) handleDREQ(in *inMAD, m *mad.DREQ) {
	id := a.conns[m.RemoteCommID]
	if id == nil || id.c.remoteID != m.LocalCommID {
		// Answer a DREQ for a connection gone: the peer stops resending.
		a.reply(in, &mad.DREP{LocalCommID: m.RemoteCommID, RemoteCommID: m.LocalCommID})
		return
	}
	c := &id.c
	switch c.state {
	case cmRepSent, cmEstablished:
		c.retr.stop()
		c.retr = nil
		c.state = cmDreqRcvd
		if c.lingering {
			id.sendDREP(nil)
		}
		id.disconnectedEvent(0)
	case cmDreqSent:
		// Both sides disconnect at once: answer, and we are done.
		id.sendDREP(nil)
		id.disconnectedEvent(0)
	case cmTimewait:
		a.reply(in, &mad.DREP{LocalCommID: c.localID, RemoteCommID: c.remoteID})
	}
}

func (a *agent) handleDREP(in *inMAD, m *mad.DREP) {
	id := a.conns[m.RemoteCommID]
	if id == nil || id.c.state != cmDreqSent || id.c.remoteID != m.LocalCommID {
		return
	}
	id.enterTimewait()
	id.disconnectedEvent(0)
}

func b2u8(b bool) uint8 {
	if b {
		return 1
	}
	return 0
}
