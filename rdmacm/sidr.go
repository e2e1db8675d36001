package rdmacm

import (
	"net/netip"

	"github.com/rdmago/rdmago/rdmacm/mad"
	"github.com/rdmago/rdmago/verbs"
)

// Datagram IDs (the UDP port space, or the IB port space with a UD QP)
// find their peer's QP with Service ID Resolution: a SIDR_REQ to the
// service, answered by a SIDR_REP with the QP number and Q_Key.

// sendSIDRREQ sends the SIDR_REQ of a datagram ID. Called with cm.mu held.
func (id *cmID) sendSIDRREQ(user []byte) error {
	a, c := id.agent, &id.c
	if len(user) > mad.SIDRREQUserPrivateDataLen {
		return errf("private data of %d bytes: a SIDR_REQ carries at most %d", len(user), mad.SIDRREQUserPrivateDataLen)
	}
	*c = conn{state: cmSIDRReqSent, sgid: int(id.route.SGIDIndex), peerGID: id.peer.Addr()}
	c.localID = a.newCommID()
	c.tid = uint64(c.localID)<<32 | uint64(randUint32())
	c.ackTO = id.opts.ack()
	rt := id.opts.responseTimeout()
	c.timeout = peerTimeout(c.ackTO, rt)
	c.retries = int(id.opts.retries())
	m := &mad.SIDRREQ{RequestID: c.localID, PKey: 0xffff,
		ServiceID: mad.MakeServiceID(mad.PortSpace(id.ps), id.peer.Port())}
	h := mad.CMAHeader{Port: id.local.Port(), Src: id.local.Addr(), Dst: id.peer.Addr()}
	if id.ps == PSIB {
		copy(m.PrivateData[:], user)
	} else if err := m.SetCMAPrivateData(&h, user); err != nil {
		return err
	}
	id.register()
	c.retr = a.startRetrier(marshal(c.tid, m), c.peerGID, c.sgid, c.timeout, c.retries, id, (*cmID).sidrTimedOut)
	return nil
}

// sidrTimedOut is a SIDR_REQ's end when its retries ran out. Called with
// cm.mu held.
func (id *cmID) sidrTimedOut() {
	id.c.retr = nil
	id.toIdle()
	id.event(BackendEvent{Type: EventUnreachable, Status: -int(verbs.ErrTimedOut)})
}

func (a *agent) handleSIDRREP(in *inMAD, m *mad.SIDRREP) {
	id := a.conns[m.RequestID]
	if id == nil || id.c.state != cmSIDRReqSent {
		return
	}
	id.toIdle()
	pdata := append([]byte(nil), m.PrivateData[:]...)
	if m.Status != mad.SIDRSuccess {
		id.event(BackendEvent{Type: EventUnreachable, Status: int(m.Status), UD: UDParam{PrivateData: pdata}})
		return
	}
	if m.QKey != UDPQKey && id.ps == PSUDP {
		id.event(BackendEvent{Type: EventUnreachable, Status: -int(verbs.ErrInvalidArgument), UD: UDParam{PrivateData: pdata}})
		return
	}
	id.c.ud = UDParam{PrivateData: pdata, QPNum: m.QPN, QKey: m.QKey, AHAttr: id.ahAttr(in.src, in.sgid)}
	id.event(BackendEvent{Type: EventEstablished, UD: id.c.ud})
}

// ahAttr is the address vector to the peer at gid.
func (id *cmID) ahAttr(peer netip.Addr, sgid int) verbs.AHAttr {
	return verbs.AHAttr{IsGlobal: true, PortNum: 1, GRH: verbs.GlobalRoute{
		DGID: verbs.GIDFromAddr(peer), SGIDIndex: uint8(sgid), HopLimit: 64, TrafficClass: id.opts.tos}}
}

func (a *agent) handleSIDRREQ(in *inMAD, m *mad.SIDRREQ) {
	key := remoteKey{m.RequestID, addrKey(in.src)}
	if id := a.remotes[key]; id != nil {
		if id.c.last != nil {
			a.answer(id.c.last, id.c.peerGID, id.c.sgid) // our SIDR_REP was lost
		}
		return
	}
	ps, port, ok := m.ServiceID.Split()
	var lis *cmID
	var hdr mad.CMAHeader
	var user []byte
	if ok {
		dst := in.src
		if PortSpace(ps) == PSIB {
			user = m.PrivateData[:]
			dst = netip.Addr{}
		} else if h, u, err := m.CMAHeader(); err == nil {
			hdr, user, dst = h, u, h.Dst
		}
		if user != nil {
			lis = listenerFor(a, PortSpace(ps), port, dst)
		}
	}
	if lis == nil || (lis.ps != PSUDP && lis.ps != PSIB) {
		a.reply(in, &mad.SIDRREP{RequestID: m.RequestID, Status: mad.SIDRUnsupported, ServiceID: m.ServiceID})
		return
	}
	if lis.pending >= lis.backlog {
		a.stats.Dropped++
		return
	}
	child := &cmID{ps: lis.ps, state: stateConnect, qpType: verbs.QPTUD, parent: lis, opts: lis.opts}
	a.refs++
	child.agent = a
	local := a.gids[in.sgid]
	if hdr.Dst.IsValid() {
		local = hdr.Dst
	}
	child.local = netip.AddrPortFrom(local, port)
	child.peer = netip.AddrPortFrom(in.src, hdr.Port)
	if hdr.Src.IsValid() {
		child.peer = netip.AddrPortFrom(hdr.Src, hdr.Port)
	}
	c := &child.c
	*c = conn{state: cmSIDRReqRcvd, sgid: in.sgid, peerGID: in.src, tid: in.hdr.TransactionID,
		remoteID: m.RequestID, remoteGUID: addrKey(in.src), counted: true}
	c.localID = a.newCommID()
	c.serviceID = m.ServiceID
	child.route = Route{SGID: verbs.GIDFromAddr(local), DGID: verbs.GIDFromAddr(in.src), SGIDIndex: uint8(in.sgid),
		PathMTU: a.mtu, HopLimit: 64}
	child.register()
	lis.pending++
	lis.event(BackendEvent{Type: EventConnectRequest, Child: child,
		Param: ConnParam{PrivateData: append([]byte(nil), user...)},
		UD:    UDParam{PrivateData: append([]byte(nil), user...), AHAttr: child.ahAttr(in.src, in.sgid)}})
}

// addrKey folds an address into the GUID half of a remoteKey, for SIDR
// requests, which carry no CA GUID.
func addrKey(a netip.Addr) uint64 {
	b := a.As16()
	var k uint64
	for i, x := range b {
		k ^= uint64(x) << (8 * (i % 8))
	}
	return k
}

// acceptSIDR answers a SIDR_REQ with the ID's QP. Called with cm.mu held.
func (id *cmID) acceptSIDR(p *ConnParam) error {
	const op = "rdma_accept"
	var param ConnParam
	if p != nil {
		param = *p
	}
	qpn := param.QPNum
	if id.qp != nil {
		qpn = id.qp.Num()
	}
	if qpn == 0 {
		return verbs.Errorf(op, verbs.ErrInvalidArgument, "the ID has no QP and ConnParam.QPNum is 0")
	}
	if len(param.PrivateData) > mad.SIDRREPPrivateDataLen {
		return verbs.Errorf(op, verbs.ErrInvalidArgument, errf("private data of %d bytes: a SIDR_REP carries at most %d", len(param.PrivateData), mad.SIDRREPPrivateDataLen).Error())
	}
	id.sendSIDRREP(mad.SIDRSuccess, qpn, param.PrivateData)
	id.countDone()
	// The ID stays in the agent's tables until destroyed, to answer
	// duplicate requests with the same SIDR_REP.
	id.c.state = cmIdle
	return nil
}

// sendSIDRREP answers the SIDR_REQ. Called with cm.mu held.
func (id *cmID) sendSIDRREP(status mad.SIDRStatus, qpn uint32, pdata []byte) {
	c := &id.c
	m := &mad.SIDRREP{RequestID: c.remoteID, Status: status, ServiceID: c.serviceID}
	if status == mad.SIDRSuccess {
		m.QPN, m.QKey = qpn, UDPQKey
	}
	copy(m.PrivateData[:], pdata)
	c.last = marshal(c.tid, m)
	id.agent.send(c.last, c.peerGID, c.sgid)
}
