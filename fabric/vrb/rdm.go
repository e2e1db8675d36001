package vrb

import (
	"context"
	"errors"
	"net/netip"
	"os"
	"sync"

	"github.com/rdmago/rdmago/fabric"
	"github.com/rdmago/rdmago/fabric/internal/rxm"
)

// FI_EP_RDM as libfabric 1.17's verbs;ofi_rxm: reliable messages to any
// peer of the AV over RC connections this provider makes through
// rdma_cm on the first send to a peer, each message a SEND with rxm's
// 64-byte header in front:
//   - up to 16 KiB at once (eager);
//   - up to 128 KiB in segments of 16 KiB (SAR: each segment a SEND with
//     its number, the message's id and FIRST, MIDDLE or LAST);
//   - larger by rendezvous: the sender registers the message for remote
//     read and sends its virtual address and key; the receiver reads it
//     with RDMA READ and says so with a "read done".
//
// The connection data is rxm's (port, connection index, eager limit)
// behind the verbs provider's one-byte length. This endpoint offers its
// peers no credit-based flow control (rxm's FLOW_CTRL_PEER_OFF), which
// rxm accepts by not counting credits either; receive buffers stay
// posted, and a sender that outruns them is held back by RC's RNR
// retries.

const (
	rdmRxBufs   = 32                          // receive buffers posted per connection
	rdmTxSlots  = 64                          // registered send buffers of the endpoint
	rdmSlotLen  = rxm.PktLen + rxm.EagerLimit // a packet of the largest eager message
	sarLimit    = 8 * rxm.EagerLimit          // C's default FI_OFI_RXM_SAR_LIMIT
	rdmInject   = 192                         // C's inject_size
	rdmSize     = 2048                        // C's tx and rx size
	rdmRxSizeCM = rdmRxBufs                   // the rx_size the connection data announces
	rdmTagBits  = uint64(0xaaaaaaaaaaaaaaaa)  // mem_tag_format, as C's
	rdmMaxSAR   = 16                          // messages a connection may have coming in segments at once
)

// rdmTemplate is the fi_info of C's verbs;ofi_rxm entry for a device
// address.
func rdmTemplate(x devAddr) *fabric.Info {
	i := template(x)
	caps := fabric.CapMsg | fabric.CapRMA | fabric.CapTagged | fabric.CapRead | fabric.CapWrite | fabric.CapRecv | fabric.CapSend |
		fabric.CapRemoteRead | fabric.CapRemoteWrite | fabric.CapLocalComm | fabric.CapRemoteComm
	i.Caps, i.Mode = caps, 0
	i.TxAttr.Caps = fabric.CapMsg | fabric.CapRMA | fabric.CapTagged | fabric.CapRead | fabric.CapWrite | fabric.CapSend
	i.TxAttr.CompOrder, i.TxAttr.InjectSize, i.TxAttr.Size = 0, rdmInject, rdmSize
	i.RxAttr.Caps = fabric.CapMsg | fabric.CapRMA | fabric.CapTagged | fabric.CapRecv | fabric.CapRemoteRead | fabric.CapRemoteWrite
	i.RxAttr.Mode, i.RxAttr.CompOrder, i.RxAttr.Size = 0, 0, rdmSize
	i.EPAttr.Type, i.EPAttr.Protocol, i.EPAttr.MemTagFormat = fabric.EPRDM, fabric.ProtoRXM, rdmTagBits
	i.DomainAttr.DataProgress = fabric.ProgressManual
	i.DomainAttr.CQCnt, i.DomainAttr.EPCnt, i.DomainAttr.TxCtxCnt, i.DomainAttr.RxCtxCnt = 65536, 32768, 1, 1
	i.DomainAttr.MaxEPTxCtx, i.DomainAttr.MaxEPRxCtx = 1, 1
	i.FabricAttr.ProvName = Name + ";ofi_rxm"
	return i
}

// rconn is the connection to one peer.
type rconn struct {
	ep      *ep
	peer    netip.AddrPort // the peer's name: its listening address
	addr    fabric.Addr    // its AV handle, or AddrNotAvail
	myIdx   uint64
	peerIdx uint64
	peerPID uint64
	sarOpen int // messages coming in segments
	ready   bool
	rxMR    *fabric.MR // the receive buffers' registration
	waiting []func(c *rconn)
}

// umsg is a message of a connection; urecv a receive of the program.
type (
	umsg  = rxm.Msg[*rconn]
	urecv = rxm.Recv
)

// sarKey names a message coming in segments.
type sarKey struct {
	c  *rconn
	id uint64
}

// Contexts of the connections' operations.
type (
	rxBuf struct {
		c   *rconn
		buf []byte
	}
	txOp struct { // a packet this endpoint sent
		slot int
		user *userSend // the program's send it is part of, or nil
		rndv uint64    // the rendezvous it asks for, or 0
	}
	userSend struct {
		ctx    any
		flags  uint64
		length uint64
		comp   bool
		left   int // packets not yet completed
	}
	rdOp struct { // a rendezvous read into a program's buffer
		m     umsg
		r     urecv
		local *fabric.MR // a registration of our own, or nil
	}
	rndvSend struct {
		c      *rconn
		ctx    any
		flags  uint64
		length uint64
		mr     *fabric.MR
	}
	rmaOp struct { // the program's RMA, passed to the connection
		ctx any
	}
)

type rdm struct {
	fabric.NoAtomics
	rxm.Sends // the send calls, over sendTo
	d         fabric.DomainRef
	info      *fabric.Info
	ctx       any

	rxm.Binds // Mu, the AV, the CQs and counters

	enabled bool
	closed  bool
	pep     *pep
	name    netip.AddrPort
	icq     *fabric.CQ
	ieq     *fabric.EQ
	conns   map[netip.AddrPort]*rconn
	byEP    map[*ep]*rconn
	nextIdx uint64
	q       rxm.Queue[*rconn]
	sar     map[sarKey]*umsg
	nextMsg uint64
	rndv    map[uint64]*rndvSend
	tx      []byte
	txMR    *fabric.MR
	free    []int
	// retry holds work a connection's queue refused (ErrAgain) or that
	// waits for a send slot: it runs again, in order, after each pump.
	retry []func() bool
	// orphans are sends that waited on a connection the peer refused
	// because its own request to us wins (EALREADY): they go over the
	// peer's connection when it comes.
	orphans map[netip.AddrPort][]func(*rconn)
	pid     uint64
	h       *rxm.Handlers
	cancel  context.CancelFunc
	wg      sync.WaitGroup
}

func newRDM(d fabric.DomainRef, info *fabric.Info, context any) (*rdm, error) {
	r := &rdm{d: d, info: info.Dup(), ctx: context, conns: map[netip.AddrPort]*rconn{}, byEP: map[*ep]*rconn{},
		sar: map[sarKey]*umsg{}, rndv: map[uint64]*rndvSend{}, orphans: map[netip.AddrPort][]func(*rconn){}, pid: uint64(os.Getpid())}
	r.Self = r
	r.Sends = rxm.Sends{To: r.sendTo, InjectSize: rdmInject}
	r.icq, _ = d.OpenCQ(nil)
	r.ieq, _ = d.Fabric.OpenEQ()
	return r, nil
}

// Enable registers the send buffers and starts the listener peers
// connect to, whose address Name returns.
func (r *rdm) Enable() error {
	r.Mu.Lock()
	defer r.Mu.Unlock()
	if r.enabled {
		return nil
	}
	if err := r.Bound(); err != nil {
		return err
	}
	tx := make([]byte, rdmTxSlots*rdmSlotLen)
	mr, err := r.d.RegMR(tx, fabric.AccessSend, 0)
	if err != nil {
		return err
	}
	li := r.info.Dup()
	li.EPAttr.Type = fabric.EPMsg
	pe, err := provider{}.PassiveEndpoint(r.d.Fabric, li, nil)
	if err != nil {
		mr.Close()
		return err
	}
	p := pe.(*pep)
	err = p.Bind(r.ieq)
	if err == nil {
		err = p.Listen()
	}
	if err != nil {
		p.Close()
		mr.Close()
		return err
	}
	r.pep = p
	r.name, _ = p.Name()
	r.tx, r.txMR, r.free = tx, mr, nil
	for i := rdmTxSlots - 1; i >= 0; i-- {
		r.free = append(r.free, i)
	}
	r.enabled = true
	ctx, cancel := context.WithCancel(context.Background())
	r.cancel = cancel
	r.wg.Add(1)
	go func() {
		defer r.wg.Done()
		rxm.Loop(ctx, r.ieq, r.icq, r.pump)
	}()
	return nil
}

// pump takes the connections' events and completions and acts on them.
func (r *rdm) pump() bool {
	if !r.Mu.TryLock() {
		return false
	}
	defer r.Mu.Unlock()
	r.pumpLocked()
	return true
}

// pumpLocked is pump with r.Mu held.
func (r *rdm) pumpLocked() {
	if !r.closed {
		rxm.Pump(r.ieq, r.icq, r.handlers())
		r.runRetries()
	}
}

// handlers are what pumping the connections calls, made once.
func (r *rdm) handlers() *rxm.Handlers {
	if r.h == nil {
		r.h = &rxm.Handlers{Event: r.cmEvent, EventErr: r.connFailed, Comp: r.completion, CompErr: r.opFailed}
	}
	return r.h
}

// runRetries runs the deferred work in order, keeping what still cannot
// go. Called with r.Mu held.
func (r *rdm) runRetries() {
	w := r.retry
	r.retry = nil
	for i, f := range w {
		if !f() {
			r.retry = append(r.retry, w[i:]...)
			return
		}
	}
}

// Progress drives the connections (fabric.Progressor).
func (r *rdm) Progress() { r.pump() }

// ---- Connections ----

// conn returns the connection to dest, making it if there is none.
// Called with r.Mu held, which it lets go while it resolves a new peer.
func (r *rdm) conn(op string, dest fabric.Addr) (*rconn, error) {
	if r.closed || !r.enabled {
		return nil, fabric.Errorf(op, fabric.ErrOpBadState, "endpoint not enabled")
	}
	if r.AV == nil {
		return nil, fabric.Errorf(op, fabric.ErrNoAV, "")
	}
	peer, err := r.AV.Lookup(dest)
	if err != nil {
		return nil, err
	}
	if c := r.conns[peer]; c != nil {
		return c, nil
	}
	mi := r.info.Dup()
	mi.EPAttr.Type, mi.DestAddr = fabric.EPMsg, peer
	mi.TxAttr.Size, mi.RxAttr.Size = 0, 0
	// Opening the endpoint resolves the peer's address and route, which
	// may take a while: the connections' progress goes on meanwhile.
	r.Mu.Unlock()
	d, err := provider{}.Endpoint(r.d, mi, nil)
	r.Mu.Lock()
	if err != nil {
		return nil, err
	}
	if r.closed {
		d.Close()
		return nil, fabric.Errorf(op, fabric.ErrOpBadState, "endpoint closed")
	}
	if c := r.conns[peer]; c != nil {
		d.Close() // another call, or the peer, made one meanwhile
		return c, nil
	}
	c, err := r.newConn(d.(*ep), peer, dest, true)
	if err != nil {
		return nil, err
	}
	data := rxm.Connect{Port: r.name.Port(), Flow: rxm.FlowPeerOff, EagerLimit: rxm.EagerLimit, RxSize: rdmRxSizeCM, ConnID: r.pid<<32 | c.myIdx}
	if err := c.ep.Connect(peer, data.Bytes()); err != nil {
		r.dropConn(c)
		return nil, err
	}
	return c, nil
}

// newConn enables a connection's endpoint and posts its receive
// buffers. Called with r.Mu held.
func (r *rdm) newConn(e *ep, peer netip.AddrPort, addr fabric.Addr, sendable bool) (*rconn, error) {
	c := &rconn{ep: e, peer: peer, addr: addr, myIdx: r.nextIdx}
	r.nextIdx++
	e.BindEQ(r.ieq)
	e.BindCQ(r.icq, fabric.BindTransmit|fabric.BindRecv)
	if err := e.Enable(); err != nil {
		e.Close()
		return nil, err
	}
	bufs := make([]byte, rdmRxBufs*rdmSlotLen)
	mr, err := r.d.RegMR(bufs, fabric.AccessRecv, 0)
	if err != nil {
		e.Close()
		return nil, err
	}
	c.rxMR = mr
	for i := range rdmRxBufs {
		b := &rxBuf{c: c, buf: bufs[i*rdmSlotLen : (i+1)*rdmSlotLen : (i+1)*rdmSlotLen]}
		e.Recv(b.buf, mr.Desc(), fabric.AddrNotAvail, b)
	}
	if sendable {
		r.conns[peer] = c
	}
	r.byEP[e] = c
	return c, nil
}

// dropConn forgets a connection and closes it in the background (its
// cancelled receives land in icq, which the closing does not wait on).
func (r *rdm) dropConn(c *rconn) {
	if r.conns[c.peer] == c {
		delete(r.conns, c.peer)
	}
	delete(r.byEP, c.ep)
	for id, s := range r.rndv {
		if s.c == c {
			r.failRndv(id, fabric.ErrConnReset)
		}
	}
	for k := range r.sar {
		if k.c == c {
			r.endSAR(k)
		}
	}
	r.wg.Add(1)
	go func() {
		defer r.wg.Done()
		c.ep.Close()
		c.rxMR.Close()
	}()
}

func (r *rdm) cmEvent(ev fabric.EQEntry) {
	switch ev.Event {
	case fabric.EventConnReq:
		r.connReq(ev)
	case fabric.EventConnected:
		e, _ := ev.FID.(*ep)
		c := r.byEP[e]
		if c == nil {
			return
		}
		if a, ok := rxm.ParseAccept(ev.Data); ok && !c.ready {
			c.peerIdx, c.peerPID = a.ConnID&0xffffffff, a.ConnID>>32
		}
		c.ready = true
		w := c.waiting
		c.waiting = nil
		for _, send := range w {
			send(c)
		}
	case fabric.EventShutdown:
		if e, ok := ev.FID.(*ep); ok {
			if c := r.byEP[e]; c != nil {
				r.dropConn(c)
			}
		}
	}
}

// connReq answers a peer's connection request: it checks rxm's connect
// data and accepts with its own.
func (r *rdm) connReq(ev fabric.EQEntry) {
	cd, err := rxm.ParseConnect(ev.Data)
	if err != nil {
		r.pep.Reject(ev.Info.Handle, rxm.Reject)
		return
	}
	peer := netip.AddrPortFrom(ev.Info.DestAddr.Addr().Unmap(), cd.Port)
	addr := fabric.AddrNotAvail
	if r.AV != nil {
		addr = r.AV.Find(peer)
	}
	loopback := false
	var moved []func(*rconn)
	if old := r.conns[peer]; old != nil {
		switch rxm.ResolveClash(old.ready, old.peerPID, cd.ConnID>>32, peer, r.name) {
		case rxm.RefuseAlready:
			r.pep.Reject(ev.Info.Handle, rxm.RejectAlready)
			return
		case rxm.Replace:
			moved, old.waiting = old.waiting, nil
			r.dropConn(old)
		case rxm.Loopback:
			loopback = true
		}
	}
	mi := ev.Info
	mi.TxAttr.Size, mi.RxAttr.Size = 0, 0
	d, err := provider{}.Endpoint(r.d, mi, nil)
	if err == nil {
		var c *rconn
		if c, err = r.newConn(d.(*ep), peer, addr, !loopback); err == nil {
			c.waiting = append(moved, r.orphans[peer]...)
			delete(r.orphans, peer)
			c.peerIdx, c.peerPID = cd.ConnID&0xffffffff, cd.ConnID>>32
			if err = c.ep.Accept(rxm.Accept{ConnID: r.pid<<32 | c.myIdx, RxSize: rdmRxSizeCM, Flow: rxm.FlowPeerOff}.Bytes()); err != nil {
				r.dropConn(c)
				r.failWaiting(c)
			}
			return
		}
	}
	r.pep.Reject(ev.Info.Handle, rxm.Reject)
	for _, send := range moved {
		send(nil)
	}
}

// failWaiting fails what waited on c.
func (r *rdm) failWaiting(c *rconn) {
	w := c.waiting
	c.waiting = nil
	for _, send := range w {
		send(nil) // each reports its own failure
	}
}

// connFailed fails what waited on a connection that did not come up,
// unless the peer refused it because its own request to us goes on
// (EALREADY): then it waits for that one.
func (r *rdm) connFailed(ee fabric.EQErrEntry) {
	e, _ := ee.FID.(*ep)
	c := r.byEP[e]
	if c == nil {
		return
	}
	r.dropConn(c)
	if ee.Err == fabric.ErrConnRefused && len(ee.ErrData) >= 2 && ee.ErrData[1] == rxm.ReasonAlready {
		if nc := r.conns[c.peer]; nc != nil {
			for _, send := range c.waiting {
				nc.queue(send)
			}
			c.waiting = nil
			return
		}
		r.orphans[c.peer] = append(r.orphans[c.peer], c.waiting...)
		c.waiting = nil
		return
	}
	r.failWaiting(c)
}

// ---- Completions of the connections ----

func (r *rdm) completion(e fabric.CQEntry) {
	switch x := e.Context.(type) {
	case *rxBuf:
		if e.Flags&fabric.CompRemoteWrite != 0 {
			// A peer's fi_writedata: its data consumed this buffer.
			if e.Flags&fabric.CompRemoteCQData != 0 && r.Comp.RxCQ != nil {
				r.Comp.PostRx(fabric.CQEntry{Flags: e.Flags, Data: e.Data})
			}
		} else {
			r.received(x, e)
		}
		if r.byEP[x.c.ep] == x.c {
			x.c.ep.Recv(x.buf, x.c.rxMR.Desc(), fabric.AddrNotAvail, x)
		}
	case *txOp:
		r.free = append(r.free, x.slot)
		if u := x.user; u != nil {
			if u.left--; u.left == 0 {
				if u.comp {
					r.Comp.Done(fabric.CQEntry{Context: u.ctx, Flags: u.flags, Len: u.length})
				} else {
					r.Comp.Count(u.flags)
				}
			}
		}
	case *rdOp:
		if x.local != nil {
			x.local.Close()
		}
		p := rxm.Pkt{Ctrl: rxm.CtrlRndvRdDone, MsgID: x.m.MsgID}
		r.sendCtrl(x.m.Conn, &p, nil)
		r.Comp.Done(fabric.CQEntry{Context: x.r.Ctx, Flags: x.m.Flags(), Len: x.m.Size, Buf: x.r.Buf[:x.m.Size], Data: x.m.Data, Tag: x.m.Tag})
	case *rmaOp:
		e.Context = x.ctx
		r.Comp.Done(e)
	}
}

// failRndv fails a rendezvous send. Called with r.Mu held.
func (r *rdm) failRndv(id uint64, errno fabric.Errno) {
	s := r.rndv[id]
	if s == nil {
		return
	}
	delete(r.rndv, id)
	s.mr.Close()
	r.Comp.Failed(fabric.CQErrEntry{CQEntry: fabric.CQEntry{Context: s.ctx, Flags: s.flags}, Err: errno})
}

func (r *rdm) opFailed(ee fabric.CQErrEntry) {
	switch x := ee.Context.(type) {
	case *rxBuf:
		if ee.Err != fabric.ErrCanceled && r.byEP[x.c.ep] == x.c {
			x.c.ep.Recv(x.buf, x.c.rxMR.Desc(), fabric.AddrNotAvail, x)
		}
	case *txOp:
		r.free = append(r.free, x.slot)
		if x.rndv != 0 {
			r.failRndv(x.rndv, ee.Err)
		}
		if u := x.user; u != nil && u.left > 0 {
			u.left = 0 // the first failure reports; the rest are quiet
			if u.comp {
				r.Comp.Failed(fabric.CQErrEntry{CQEntry: fabric.CQEntry{Context: u.ctx, Flags: u.flags}, Err: ee.Err})
			}
		}
	case *rdOp:
		if x.local != nil {
			x.local.Close()
		}
		r.Comp.Failed(fabric.CQErrEntry{CQEntry: fabric.CQEntry{Context: x.r.Ctx, Flags: x.m.Flags()}, Err: ee.Err})
	case *rmaOp:
		ee.Context = x.ctx
		r.Comp.Failed(ee)
	}
}

// received parses what came on a connection.
func (r *rdm) received(b *rxBuf, e fabric.CQEntry) {
	p, ok := rxm.ParsePkt(e.Buf)
	if !ok {
		return
	}
	body := e.Buf[rxm.PktLen:]
	m := umsg{Conn: b.c, From: b.c.addr, Tagged: p.Op == rxm.OpTagged, Tag: p.Tag, Data: p.Data, HasCQ: p.Flags&rxm.FlagRemoteCQData != 0, Size: p.Size, MsgID: p.MsgID}
	switch p.Ctrl {
	case rxm.CtrlEager:
		if p.Size > uint64(len(body)) {
			return
		}
		m.Body = body[:p.Size]
		r.deliver(m)
	case rxm.CtrlSeg:
		r.segment(m, p, body)
	case rxm.CtrlRndvReq:
		iov, ok := rxm.ParseRndvHdr(body)
		if !ok {
			return
		}
		m.Rndv = iov
		r.deliver(m)
	case rxm.CtrlRndvRdDone:
		if s := r.rndv[p.MsgID]; s != nil && s.c == b.c {
			delete(r.rndv, p.MsgID)
			s.mr.Close()
			r.Comp.Done(fabric.CQEntry{Context: s.ctx, Flags: s.flags, Len: s.length})
		}
	case rxm.CtrlCredit:
		// Credits for flow control this endpoint did not ask for.
	}
}

// segment adds one SAR segment to its message, and delivers the message
// when the last is in. Segments come in order (one RC connection).
func (r *rdm) segment(m umsg, p rxm.Pkt, body []byte) {
	k := sarKey{m.Conn, p.MsgID}
	a := r.sar[k]
	if p.CtrlData&3 == rxm.SegFirst || a == nil {
		r.endSAR(k)
		if p.CtrlData&3 != rxm.SegFirst || p.Size <= rxm.EagerLimit || p.Size > sarLimit || m.Conn.sarOpen >= rdmMaxSAR {
			return // not a message C's rxm sends in segments
		}
		m.Body = make([]byte, 0, p.Size)
		a = &m
		r.sar[k] = a
		m.Conn.sarOpen++
	}
	n := int(p.SegSize)
	if n > len(body) || n > cap(a.Body)-len(a.Body) {
		r.endSAR(k) // a segment past the message it belongs to
		return
	}
	a.Body = append(a.Body, body[:n]...)
	if p.CtrlData&3 == rxm.SegLast || uint64(len(a.Body)) == a.Size {
		r.endSAR(k)
		if uint64(len(a.Body)) != a.Size {
			return // segments lost to a broken connection
		}
		r.deliver(*a)
	}
}

// endSAR forgets a message coming in segments.
func (r *rdm) endSAR(k sarKey) {
	if _, ok := r.sar[k]; ok {
		delete(r.sar, k)
		k.c.sarOpen--
	}
}

// deliver matches a message with a posted receive, or keeps it.
func (r *rdm) deliver(m umsg) {
	u, ok, full := r.q.Arrive(m)
	switch {
	case full:
		r.dropConn(m.Conn) // the peer sends far ahead of the receives
	case ok:
		r.complete(u, m)
	}
}

// complete moves a message into a receive: at once when it is here, by
// an RDMA READ of the sender's memory for a rendezvous.
func (r *rdm) complete(u urecv, m umsg) {
	if m.Rndv == nil {
		n := copy(u.Buf, m.Body)
		if uint64(n) < m.Size {
			r.Comp.Failed(fabric.CQErrEntry{CQEntry: fabric.CQEntry{Context: u.Ctx, Flags: m.Flags(), Len: uint64(n), Buf: u.Buf[:n], Tag: m.Tag},
				OLen: m.Size - uint64(n), Err: fabric.ErrTrunc})
			return
		}
		r.Comp.Done(fabric.CQEntry{Context: u.Ctx, Flags: m.Flags(), Len: m.Size, Buf: u.Buf[:m.Size], Data: m.Data, Tag: m.Tag})
		return
	}
	if m.Size > uint64(len(u.Buf)) || len(m.Rndv) != 1 || m.Rndv[0].Len != m.Size {
		// Nothing is read; the sender hears it is done with its buffer.
		r.Comp.Failed(fabric.CQErrEntry{CQEntry: fabric.CQEntry{Context: u.Ctx, Flags: m.Flags(), Tag: m.Tag}, OLen: m.Size, Err: fabric.ErrTrunc})
		r.sendCtrl(m.Conn, &rxm.Pkt{Ctrl: rxm.CtrlRndvRdDone, MsgID: m.MsgID}, nil)
		return
	}
	v := m.Rndv[0]
	op := &rdOp{m: m, r: u}
	desc := u.Desc
	if _, ok := desc.(*fabric.MR); !ok {
		mr, err := r.d.RegMR(u.Buf[:v.Len], fabric.AccessRecv, 0)
		if err != nil {
			r.Comp.Failed(fabric.CQErrEntry{CQEntry: fabric.CQEntry{Context: u.Ctx, Flags: m.Flags()}, Err: fabric.ErrNoMemory})
			return
		}
		op.local, desc = mr, mr.Desc()
	}
	read := func() bool {
		err := m.Conn.ep.Read(u.Buf[:v.Len], desc, fabric.AddrNotAvail, v.Addr, v.Key, op)
		if errors.Is(err, fabric.ErrAgain) {
			return false
		}
		if err != nil {
			if op.local != nil {
				op.local.Close()
			}
			r.Comp.Failed(fabric.CQErrEntry{CQEntry: fabric.CQEntry{Context: u.Ctx, Flags: m.Flags()}, Err: fabric.ErrIO})
		}
		return true
	}
	if len(r.retry) > 0 || !read() {
		r.retry = append(r.retry, read)
	}
}

// ---- The program's calls ----

func (r *rdm) post(u urecv) error {
	r.Mu.Lock()
	defer r.Mu.Unlock()
	if r.closed {
		return fabric.Errorf("fi_recv", fabric.ErrBadFD, "endpoint closed")
	}
	if m, ok := r.q.Post(u); ok {
		r.complete(u, m)
	}
	return nil
}

func (r *rdm) Recv(buf []byte, desc any, src fabric.Addr, context any) error {
	return r.post(urecv{Buf: buf, Desc: desc, Src: src, Ctx: context})
}

func (r *rdm) TRecv(buf []byte, desc any, src fabric.Addr, tag, ignore uint64, context any) error {
	return r.post(urecv{Buf: buf, Desc: desc, Src: src, Tagged: true, Tag: tag, Ignore: ignore, Ctx: context})
}

// slot is a registered send buffer taken for one packet.
type slot struct {
	i   int
	pkt []byte
}

// take reserves n send buffers; false if there are not so many free.
// Called with r.Mu held.
func (r *rdm) take(n int) ([]slot, bool) {
	if len(r.free) < n {
		return nil, false
	}
	out := make([]slot, n)
	for k := range out {
		i := r.free[len(r.free)-1]
		r.free = r.free[:len(r.free)-1]
		out[k] = slot{i: i, pkt: r.tx[i*rdmSlotLen : (i+1)*rdmSlotLen]}
	}
	return out, true
}

// fill writes a packet into s.
func (s *slot) fill(p *rxm.Pkt, body []byte) {
	p.Marshal(s.pkt)
	n := copy(s.pkt[rxm.PktLen:], body)
	s.pkt = s.pkt[:rxm.PktLen+n]
}

// postSlot sends the packet in s over c, its connection index set; user
// is the program's send it is part of, rndv the rendezvous it asks for.
// A packet the connection's queue has no room for waits in r.retry; one
// that cannot go (no connection, a broken one) gives its slot back and
// fails what it was part of. Called with r.Mu held.
func (r *rdm) postSlot(c *rconn, s slot, user *userSend, rndv uint64) {
	try := func() bool {
		if c != nil && r.byEP[c.ep] == c {
			rxm.SetConnID(s.pkt, c.peerIdx)
			err := c.ep.Send(s.pkt, r.txMR.Desc(), fabric.AddrNotAvail, &txOp{slot: s.i, user: user, rndv: rndv})
			if err == nil {
				return true
			}
			if errors.Is(err, fabric.ErrAgain) {
				return false
			}
		}
		r.free = append(r.free, s.i)
		if rndv != 0 {
			r.failRndv(rndv, fabric.ErrConnRefused)
		}
		if user != nil && user.left > 0 {
			user.left = 0
			if user.comp {
				r.Comp.Failed(fabric.CQErrEntry{CQEntry: fabric.CQEntry{Context: user.ctx, Flags: user.flags}, Err: fabric.ErrConnRefused})
			}
		}
		return true
	}
	if len(r.retry) > 0 || !try() {
		r.retry = append(r.retry, try) // (behind what waits already: order holds)
	}
}

// sendCtrl sends a control packet with no body of the program's, when a
// send slot is free. Called with r.Mu held.
func (r *rdm) sendCtrl(c *rconn, p *rxm.Pkt, body []byte) {
	try := func() bool {
		s, ok := r.take(1)
		if !ok {
			return false
		}
		s[0].fill(p, body)
		r.postSlot(c, s[0], nil, 0)
		return true
	}
	if len(r.retry) > 0 || !try() {
		r.retry = append(r.retry, try)
	}
}

// queue runs send on c now if it is up, or when it comes up (with nil if
// it never does).
func (c *rconn) queue(send func(c *rconn)) {
	if c.ready {
		send(c)
		return
	}
	c.waiting = append(c.waiting, send)
}

// sendTo sends a message to dest: eager, in segments, or by rendezvous.
// The data is copied into registered send buffers before it returns.
func (r *rdm) sendTo(op string, buf []byte, dest fabric.Addr, tagged bool, tag, data uint64, context any, flags uint64) error {
	r.Mu.Lock()
	defer r.Mu.Unlock()
	c, err := r.conn(op, dest)
	if err != nil {
		return err
	}
	inject := flags&fabric.FlagInject != 0
	cflags := fabric.CompSend | fabric.CompMsg
	h := rxm.Pkt{Size: uint64(len(buf)), Data: data, Tag: tag}
	if tagged {
		cflags, h.Op = fabric.CompSend|fabric.CompTagged, rxm.OpTagged
	}
	if flags&fabric.FlagRemoteCQData != 0 {
		h.Flags = rxm.FlagRemoteCQData
	}
	u := &userSend{ctx: context, flags: cflags, length: uint64(len(buf)), comp: !inject}
	switch {
	case len(buf) <= sarLimit:
		n := max(1, (len(buf)+rxm.EagerLimit-1)/rxm.EagerLimit)
		slots, ok := r.take(n)
		if !ok {
			r.pumpLocked()
			if slots, ok = r.take(n); !ok {
				return fabric.ErrAgain
			}
		}
		u.left = n
		if n == 1 {
			h.Ctrl = rxm.CtrlEager
			slots[0].fill(&h, buf)
		} else {
			r.nextMsg++
			h.Ctrl, h.MsgID = rxm.CtrlSeg, r.nextMsg
			for i := range slots {
				seg := buf[i*rxm.EagerLimit : min(len(buf), (i+1)*rxm.EagerLimit)]
				p := h
				p.SegSize, p.SegNo, p.CtrlData = uint16(len(seg)), uint32(i), rxm.SegMiddle
				switch i {
				case 0:
					p.CtrlData = rxm.SegFirst
				case n - 1:
					p.CtrlData = rxm.SegLast
				}
				slots[i].fill(&p, seg)
			}
		}
		c.queue(func(c *rconn) {
			for _, s := range slots {
				r.postSlot(c, s, u, 0)
			}
		})
		return nil
	case inject:
		return fabric.Errorf(op, fabric.ErrMsgSize, "inject over the inject size")
	}
	// Rendezvous: the peer reads buf through a registration of ours.
	slots, ok := r.take(1)
	if !ok {
		return fabric.ErrAgain
	}
	mr, err := r.d.RegMR(buf, fabric.AccessRemoteRead, 0)
	if err != nil {
		r.free = append(r.free, slots[0].i)
		return err
	}
	r.nextMsg++
	id := r.nextMsg
	r.rndv[id] = &rndvSend{c: c, ctx: context, flags: cflags, length: uint64(len(buf)), mr: mr}
	h.Ctrl, h.MsgID = rxm.CtrlRndvReq, id
	slots[0].fill(&h, rxm.RndvHdr([]rxm.IOV{{Addr: mr.Addr(), Len: uint64(len(buf)), Key: mr.Key()}}))
	c.queue(func(c *rconn) {
		if s := r.rndv[id]; s != nil && c != nil {
			s.c = c // (the connection it goes over may be the peer's)
		}
		r.postSlot(c, slots[0], nil, id)
	})
	return nil
}

// RMA goes straight over the connection to the peer, as rxm passes it to
// its MSG endpoint.
func (r *rdm) rma(op string, dest fabric.Addr, ctx any, do func(e *ep, o *rmaOp) error) error {
	r.Mu.Lock()
	defer r.Mu.Unlock()
	c, err := r.conn(op, dest)
	if err != nil {
		return err
	}
	o := &rmaOp{ctx: ctx}
	if c.ready {
		return do(c.ep, o)
	}
	c.queue(func(c *rconn) {
		err := fabric.Errorf(op, fabric.ErrConnRefused, "")
		if c != nil {
			err = do(c.ep, o)
		}
		if err != nil && ctx != nil {
			r.Comp.Failed(fabric.CQErrEntry{CQEntry: fabric.CQEntry{Context: ctx, Flags: fabric.CompRMA}, Err: fabric.ErrConnRefused})
		}
	})
	return nil
}

func (r *rdm) Write(buf []byte, desc any, dest fabric.Addr, addr, key uint64, context any) error {
	return r.rma("fi_write", dest, context, func(e *ep, o *rmaOp) error { return e.Write(buf, desc, fabric.AddrNotAvail, addr, key, o) })
}

func (r *rdm) WriteData(buf []byte, desc any, data uint64, dest fabric.Addr, addr, key uint64, context any) error {
	return r.rma("fi_writedata", dest, context, func(e *ep, o *rmaOp) error {
		return e.WriteData(buf, desc, data, fabric.AddrNotAvail, addr, key, o)
	})
}

func (r *rdm) InjectWrite(buf []byte, dest fabric.Addr, addr, key uint64) error {
	b := append([]byte(nil), buf...)
	return r.rma("fi_inject_write", dest, nil, func(e *ep, _ *rmaOp) error { return e.InjectWrite(b, fabric.AddrNotAvail, addr, key) })
}

func (r *rdm) Read(buf []byte, desc any, src fabric.Addr, addr, key uint64, context any) error {
	return r.rma("fi_read", src, context, func(e *ep, o *rmaOp) error { return e.Read(buf, desc, fabric.AddrNotAvail, addr, key, o) })
}

// Name is the listening address peers connect to (fi_getname).
func (r *rdm) Name() (netip.AddrPort, error) {
	r.Mu.Lock()
	defer r.Mu.Unlock()
	if !r.enabled {
		return netip.AddrPort{}, fabric.Errorf("fi_getname", fabric.ErrOpBadState, "enable the endpoint first")
	}
	return r.name, nil
}

// Close closes the connections and the listener; receives and sends
// outstanding complete with ErrCanceled.
func (r *rdm) Close() error {
	r.Mu.Lock()
	if r.closed {
		r.Mu.Unlock()
		return nil
	}
	r.closed = true
	cancel := r.cancel
	r.Mu.Unlock()
	if cancel != nil {
		cancel()
	}
	r.wg.Wait() // the loop, and the connections dropped before
	r.Mu.Lock()
	defer r.Mu.Unlock()
	conns := r.byEP
	r.byEP, r.conns = map[*ep]*rconn{}, map[netip.AddrPort]*rconn{}
	for _, c := range conns {
		c.ep.Close()
		c.rxMR.Close()
	}
	// What the connections cancelled (sends, rendezvous reads, RMA)
	// fails the program's operations it was part of; what never went
	// fails too.
	rxm.Pump(r.ieq, r.icq, r.handlers())
	for _, c := range conns {
		r.failWaiting(c)
	}
	for peer, w := range r.orphans {
		for _, send := range w {
			send(nil)
		}
		delete(r.orphans, peer)
	}
	r.runRetries()
	for _, u := range r.q.Drain() {
		r.Comp.Failed(fabric.CQErrEntry{CQEntry: fabric.CQEntry{Context: u.Ctx, Flags: fabric.CompRecv}, Err: fabric.ErrCanceled})
	}
	for id := range r.rndv {
		r.failRndv(id, fabric.ErrCanceled)
	}
	if r.pep != nil {
		r.pep.Close()
	}
	if r.txMR != nil {
		r.txMR.Close()
	}
	r.icq.Close()
	r.ieq.Close()
	r.Comp.Detach(r)
	return nil
}
