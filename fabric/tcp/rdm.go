package tcp

import (
	"context"
	"net/netip"
	"os"
	"sync"

	"github.com/rdmago/rdmago/fabric"
	"github.com/rdmago/rdmago/fabric/internal/rxm"
)

// FI_EP_RDM as libfabric 1.17's tcp;ofi_rxm: reliable messages to any
// peer of the AV over tcp connections made on the first send, each
// message framed with rxm's 64-byte packet header; up to 16 KiB sent at
// once (eager), larger ones by rendezvous: the receiver reads the data
// from the sender's memory with an RMA read and tells it when done.
// Tagged messages up to the eager limit go as raw tagged tcp frames, as
// C's rxm sends them.

const (
	rxmRxSize     = 4096
	rxmInjectSize = 64
	rxmBufs       = 16 // receive buffers posted per connection
	rxmKeyBase    = 0x80000000

	rxmPktLen  = rxm.PktLen
	eagerLimit = rxm.EagerLimit
)

// connReqData is rxm's 24-byte connect data: over tcp, without flow
// control, as C's.
func connReqData(port uint16, connID uint64) []byte {
	return rxm.Connect{Port: port, Flow: rxm.FlowPeerOff, EagerLimit: eagerLimit, RxSize: rxmRxSize, ConnID: connID}.Bytes()
}

// connRespData is rxm's 16-byte accept data.
func connRespData(connID uint64) []byte {
	return rxm.Accept{ConnID: connID, RxSize: rxmRxSize, Flow: rxm.FlowPeerOff}.Bytes()
}

// rconn is the connection to one peer.
type rconn struct {
	ep      *ep
	peer    netip.AddrPort // the peer's advertised (listening) address
	addr    fabric.Addr    // its AV handle, or AddrNotAvail
	myIdx   uint64
	peerIdx uint64
	peerPID uint64
	ready   bool
	waiting []pending // sends waiting for the connection
}

// pending is a send waiting for its connection: how to send it over a
// connection, and what to report if it never goes.
type pending struct {
	send  func(c *rconn)
	ctx   any
	flags uint64
	comp  bool
	rndv  uint64 // the rendezvous's message id, or 0
}

// umsg is a message of a connection (its body an eager payload); urecv
// a receive of the program.
type (
	umsg  = rxm.Msg[*rconn]
	urecv = rxm.Recv
)

// Internal contexts of the connections' operations.
type (
	rxBuf struct {
		c   *rconn
		buf []byte
	}
	txUser struct { // an eager send the program made
		ctx    any
		flags  uint64
		length uint64
		comp   bool
	}
	txInternal struct{} // a control packet
	rdOp       struct { // a rendezvous read into a program's buffer
		m umsg
		r urecv
	}
	rndvSend struct {
		ctx    any
		flags  uint64
		length uint64
		mr     *fabric.MR
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
	port    uint16
	icq     *fabric.CQ // the connections' completions
	ieq     *fabric.EQ // the connections' and the listener's events
	conns   map[netip.AddrPort]*rconn
	orphans map[netip.AddrPort][]pending // sends whose connection the peer refused for its own (EALREADY)
	byEP    map[*ep]*rconn
	nextIdx uint64
	q       rxm.Queue[*rconn]
	nextMsg uint64
	nextKey uint64
	rndv    map[uint64]*rndvSend
	done    chan struct{}
	wg      sync.WaitGroup
	pid     uint64
	h       *rxm.Handlers // what pumping the connections calls, made once
}

func newRDM(d fabric.DomainRef, info *fabric.Info, context any) (*rdm, error) {
	r := &rdm{d: d, info: info.Dup(), ctx: context, conns: map[netip.AddrPort]*rconn{}, byEP: map[*ep]*rconn{}, orphans: map[netip.AddrPort][]pending{},
		rndv: map[uint64]*rndvSend{}, done: make(chan struct{}), pid: uint64(os.Getpid())}
	r.Self = r
	r.Sends = rxm.Sends{To: r.sendTo, InjectSize: rxmInjectSize}
	r.icq, _ = d.OpenCQ(nil)
	r.ieq, _ = d.Fabric.OpenEQ()
	return r, nil
}

// Enable starts the listener peers connect to, whose address Name
// returns.
func (r *rdm) Enable() error {
	r.Mu.Lock()
	defer r.Mu.Unlock()
	if r.enabled {
		return nil
	}
	if err := r.Bound(); err != nil {
		return err
	}
	li := r.info.Dup()
	li.EPAttr.Type = fabric.EPMsg
	p := &pep{info: li, conns: map[*connReq]bool{}}
	if err := p.Bind(r.ieq); err != nil {
		return err
	}
	if err := p.Listen(); err != nil {
		return err
	}
	r.pep = p
	name, _ := p.Name()
	r.port = name.Port()
	r.enabled = true
	r.wg.Add(1)
	go r.loop()
	return nil
}

// loop handles the connections' events and completions when the program
// is not polling.
func (r *rdm) loop() {
	defer r.wg.Done()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go func() {
		<-r.done
		cancel()
	}()
	rxm.Loop(ctx, r.ieq, r.icq, r.pump)
}

// Progress drives the connections (fabric.Progressor).
func (r *rdm) Progress() { r.pump() }

// pump takes the connections' events and completions and acts on them.
func (r *rdm) pump() bool {
	if !r.Mu.TryLock() {
		return false // someone is at it
	}
	defer r.Mu.Unlock()
	if !r.closed {
		if r.h == nil {
			r.h = &rxm.Handlers{Event: r.cmEvent, EventErr: r.connFailed, Comp: r.completion, CompErr: r.opFailed}
		}
		rxm.Pump(r.ieq, r.icq, r.h)
	}
	return true
}

// ---- Connections ----

// conn returns the connection to dest, making it if there is none.
// Called with r.Mu held.
func (r *rdm) conn(dest fabric.Addr) (*rconn, error) {
	if r.AV == nil {
		return nil, fabric.Errorf("fi_send", fabric.ErrNoAV, "")
	}
	peer, err := r.AV.Lookup(dest)
	if err != nil {
		return nil, err
	}
	if c := r.conns[peer]; c != nil {
		return c, nil
	}
	mi := r.info.Dup()
	mi.EPAttr.Type = fabric.EPMsg
	mi.TxAttr.Size, mi.RxAttr.Size = 0, 0
	d, _ := provider{}.Endpoint(r.d, mi, nil)
	e := d.(*ep)
	c := r.newConn(e, peer, dest, true)
	if err := e.Connect(peer, connReqData(r.port, r.pid<<32|c.myIdx)); err != nil {
		r.dropConn(c)
		return nil, err
	}
	return c, nil
}

// newConn sets up a connection's endpoint. Called with r.Mu held.
// A loopback connection's far end (ours, connecting to ourselves) only
// receives: it is not the connection sends to peer take.
func (r *rdm) newConn(e *ep, peer netip.AddrPort, addr fabric.Addr, sendable bool) *rconn {
	c := &rconn{ep: e, peer: peer, addr: addr, myIdx: r.nextIdx}
	r.nextIdx++
	e.BindEQ(r.ieq)
	e.BindCQ(r.icq, fabric.BindTransmit|fabric.BindRecv)
	// The peer's reads of rendezvous regions are rxm's, not the
	// program's: the remote-read counter leaves them out.
	e.internalKey = func(key uint64) bool { return key&rxmKeyBase == rxmKeyBase }
	for _, b := range []uint64{fabric.BindRemoteRead, fabric.BindRemoteWrite} {
		if cn := r.Comp.Counter(b); cn != nil {
			e.BindCounter(cn, b)
		}
	}
	for i := 0; i < rxmBufs; i++ {
		b := &rxBuf{c: c, buf: make([]byte, rxmPktLen+eagerLimit)}
		e.Recv(b.buf, nil, fabric.AddrNotAvail, b)
	}
	if sendable {
		r.conns[peer] = c
	}
	r.byEP[e] = c
	return c
}

func (r *rdm) dropConn(c *rconn) {
	if r.conns[c.peer] == c {
		delete(r.conns, c.peer)
	}
	delete(r.byEP, c.ep)
	r.wg.Add(1)
	go func() { // its cancellations land in icq, which nobody reads
		defer r.wg.Done()
		c.ep.Close()
	}()
}

// cmEvent handles a connection event. Called with r.Mu held.
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
		for _, p := range w {
			p.send(c)
		}
	case fabric.EventShutdown:
		if e, ok := ev.FID.(*ep); ok {
			if c := r.byEP[e]; c != nil {
				r.dropConn(c)
			}
		}
	}
}

// connReq answers a peer's connection: it checks rxm's connect data and
// accepts with its own.
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
	var moved []pending
	if old := r.conns[peer]; old != nil {
		me, _ := r.pep.Name()
		switch rxm.ResolveClash(old.ready, old.peerPID, cd.ConnID>>32, peer, me) {
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
	dd, err := provider{}.Endpoint(r.d, mi, nil)
	if err != nil {
		r.pep.Reject(ev.Info.Handle, rxm.Reject)
		r.failWaiting(&rconn{waiting: moved}, fabric.ErrConnRefused)
		return
	}
	e := dd.(*ep)
	c := r.newConn(e, peer, addr, !loopback)
	c.waiting = append(moved, r.orphans[peer]...)
	delete(r.orphans, peer)
	c.peerIdx, c.peerPID = cd.ConnID&0xffffffff, cd.ConnID>>32
	if err := e.Accept(connRespData(r.pid<<32 | c.myIdx)); err != nil {
		r.dropConn(c)
		r.failWaiting(c, fabric.ErrConnRefused)
	}
}

// connFailed fails what waited on a connection that did not come up.
func (r *rdm) connFailed(ee fabric.EQErrEntry) {
	e, _ := ee.FID.(*ep)
	c := r.byEP[e]
	if c == nil {
		return
	}
	r.dropConn(c)
	if ee.Err == fabric.ErrConnRefused && len(ee.ErrData) >= 2 && ee.ErrData[1] == rxm.ReasonAlready {
		// The peer's own request to us goes on: what waited goes over it.
		if nc := r.conns[c.peer]; nc != nil {
			for _, p := range c.waiting {
				nc.queue(p)
			}
		} else {
			r.orphans[c.peer] = append(r.orphans[c.peer], c.waiting...)
		}
		c.waiting = nil
		return
	}
	r.failWaiting(c, ee.Err)
}

// failWaiting reports the sends waiting on c as failed with errno.
// Called with r.Mu held.
func (r *rdm) failWaiting(c *rconn, errno fabric.Errno) {
	for _, p := range c.waiting {
		if p.rndv != 0 {
			if s := r.rndv[p.rndv]; s != nil {
				s.mr.Close()
				delete(r.rndv, p.rndv)
			}
		}
		if p.comp {
			r.Comp.Failed(fabric.CQErrEntry{CQEntry: fabric.CQEntry{Context: p.ctx, Flags: p.flags}, Err: errno})
		}
	}
	c.waiting = nil
}

// ---- Completions of the connections ----

func (r *rdm) completion(e fabric.CQEntry) {
	switch x := e.Context.(type) {
	case *rxBuf:
		r.received(x, e)
		if r.byEP[x.c.ep] == x.c {
			x.c.ep.Recv(x.buf, nil, fabric.AddrNotAvail, x)
		}
	case *txUser:
		if x.comp {
			r.Comp.Done(fabric.CQEntry{Context: x.ctx, Flags: x.flags, Len: x.length})
		} else {
			r.Comp.Count(x.flags) // an inject
		}
	case nil:
		// A peer's RMA write with CQ data. (The connection counted it,
		// into the counter newConn bound, as it counts the others.)
		if e.Flags&fabric.CompRemoteCQData != 0 && r.Comp.RxCQ != nil {
			r.Comp.PostRx(e)
		}
	case *rdOp:
		// The rendezvous data is in: tell the sender, complete the receive.
		var b [rxmPktLen]byte
		p := rxm.Pkt{Ctrl: rxm.CtrlRndvRdDone, ConnID: x.m.Conn.peerIdx, MsgID: x.m.MsgID}
		p.Marshal(b[:])
		x.m.Conn.ep.send(b[:], 0, &txInternal{}, fabric.FlagCompletion)
		r.deliverDone(x.r, x.m, x.m.Size)
	}
}

func (r *rdm) opFailed(ee fabric.CQErrEntry) {
	switch x := ee.Context.(type) {
	case *rxBuf:
		// A frame too big for rxm's buffers: the buffer goes back.
		if ee.Err != fabric.ErrCanceled && r.byEP[x.c.ep] == x.c {
			x.c.ep.Recv(x.buf, nil, fabric.AddrNotAvail, x)
		}
	case *txUser:
		if x.comp {
			r.Comp.Failed(fabric.CQErrEntry{CQEntry: fabric.CQEntry{Context: x.ctx, Flags: x.flags}, Err: ee.Err})
		}
	case *rdOp:
		r.Comp.Failed(fabric.CQErrEntry{CQEntry: fabric.CQEntry{Context: x.r.Ctx, Flags: x.m.Flags()}, Err: ee.Err})
	}
}

// received parses what came on a connection.
func (r *rdm) received(b *rxBuf, e fabric.CQEntry) {
	data := e.Buf
	if e.Flags&fabric.CompTagged != 0 {
		// A raw tagged frame: no rxm header.
		r.deliver(umsg{Conn: b.c, From: b.c.addr, Tagged: true, Tag: e.Tag, Body: data, Size: uint64(len(data)),
			Data: e.Data, HasCQ: e.Flags&fabric.CompRemoteCQData != 0})
		return
	}
	p, ok := rxm.ParsePkt(data)
	if !ok {
		return
	}
	body := data[rxmPktLen:]
	m := umsg{Conn: b.c, From: b.c.addr, Tagged: p.Op == rxm.OpTagged, Tag: p.Tag, Data: p.Data, HasCQ: p.Flags&rxm.FlagRemoteCQData != 0, Size: p.Size, MsgID: p.MsgID}
	switch p.Ctrl {
	case rxm.CtrlEager:
		if p.Size > uint64(len(body)) {
			return
		}
		m.Body = body[:p.Size]
		r.deliver(m)
	case rxm.CtrlRndvReq:
		iov, ok := rxm.ParseRndvHdr(body)
		if !ok {
			return
		}
		m.Rndv = iov
		r.deliver(m)
	case rxm.CtrlRndvRdDone:
		if s := r.rndv[p.MsgID]; s != nil {
			delete(r.rndv, p.MsgID)
			s.mr.Close()
			r.Comp.Done(fabric.CQEntry{Context: s.ctx, Flags: s.flags, Len: s.length})
		}
	}
}

// deliver matches a message with a posted receive, or keeps it.
func (r *rdm) deliver(m umsg) {
	u, ok, full := r.q.Arrive(m)
	switch {
	case full:
		// The peer sends far ahead of the receives: drop the connection
		// rather than buffer without end.
		r.dropConn(m.Conn)
	case ok:
		r.complete(u, m)
	}
}

// complete moves a message into a receive: at once when eager, by an RMA
// read of the sender's memory for a rendezvous.
func (r *rdm) complete(u urecv, m umsg) {
	if m.Rndv == nil {
		n := copy(u.Buf, m.Body)
		if uint64(n) < m.Size {
			r.Comp.Failed(fabric.CQErrEntry{CQEntry: fabric.CQEntry{Context: u.Ctx, Flags: m.Flags(), Len: uint64(n), Buf: u.Buf[:n], Tag: m.Tag},
				OLen: m.Size - uint64(n), Err: fabric.ErrTrunc})
			return
		}
		r.deliverDone(u, m, m.Size)
		return
	}
	if m.Size > uint64(len(u.Buf)) || len(m.Rndv) != 1 || m.Rndv[0].Len != m.Size {
		r.Comp.Failed(fabric.CQErrEntry{CQEntry: fabric.CQEntry{Context: u.Ctx, Flags: m.Flags(), Tag: m.Tag}, OLen: m.Size, Err: fabric.ErrTrunc})
		return
	}
	v := m.Rndv[0]
	if err := m.Conn.ep.Read(u.Buf[:v.Len], nil, fabric.AddrNotAvail, v.Addr, v.Key, &rdOp{m: m, r: u}); err != nil {
		r.Comp.Failed(fabric.CQErrEntry{CQEntry: fabric.CQEntry{Context: u.Ctx, Flags: m.Flags()}, Err: fabric.ErrIO})
	}
}

func (r *rdm) deliverDone(u urecv, m umsg, n uint64) {
	r.Comp.Done(fabric.CQEntry{Context: u.Ctx, Flags: m.Flags(), Len: n, Buf: u.Buf[:n], Data: m.Data, Tag: m.Tag})
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
	return r.post(urecv{Buf: buf, Src: src, Ctx: context})
}

func (r *rdm) TRecv(buf []byte, desc any, src fabric.Addr, tag, ignore uint64, context any) error {
	return r.post(urecv{Buf: buf, Src: src, Tagged: true, Tag: tag, Ignore: ignore, Ctx: context})
}

// connFor returns the connection for an operation to dest. Called with
// r.Mu held.
func (r *rdm) connFor(op string, dest fabric.Addr) (*rconn, error) {
	if r.closed || !r.enabled {
		return nil, fabric.Errorf(op, fabric.ErrOpBadState, "endpoint not enabled")
	}
	return r.conn(dest)
}

// queue sends p now if the connection is up, or when it comes up.
func (c *rconn) queue(p pending) {
	if c.ready {
		p.send(c)
	} else {
		c.waiting = append(c.waiting, p)
	}
}

// sendTo sends a message to dest: eager, raw tagged or rendezvous.
func (r *rdm) sendTo(op string, buf []byte, dest fabric.Addr, tagged bool, tag, data uint64, context any, flags uint64) error {
	r.Mu.Lock()
	defer r.Mu.Unlock()
	c, err := r.connFor(op, dest)
	if err != nil {
		return err
	}
	inject := flags&fabric.FlagInject != 0
	if inject {
		buf = append([]byte(nil), buf...)
	}
	cflags := fabric.CompSend | fabric.CompMsg
	if tagged {
		cflags = fabric.CompSend | fabric.CompTagged
	}
	p := pending{ctx: context, flags: cflags, comp: !inject}
	switch {
	case len(buf) <= eagerLimit && tagged:
		t := &txUser{ctx: context, flags: cflags, length: uint64(len(buf)), comp: !inject}
		fl := fabric.FlagCompletion | flags&(fabric.FlagRemoteCQData|fabric.FlagTransmitComplete|fabric.FlagDeliveryComplete)
		p.send = func(c *rconn) { c.ep.sendFrame(buf, data, t, fl, true, tag) }
	case len(buf) <= eagerLimit:
		pkt := make([]byte, rxmPktLen+len(buf))
		h := rxm.Pkt{Ctrl: rxm.CtrlEager, Size: uint64(len(buf)), Data: data}
		if flags&fabric.FlagRemoteCQData != 0 {
			h.Flags = rxm.FlagRemoteCQData
		}
		copy(pkt[rxmPktLen:], buf)
		t := &txUser{ctx: context, flags: cflags, length: uint64(len(buf)), comp: !inject}
		fl := fabric.FlagCompletion | flags&(fabric.FlagTransmitComplete|fabric.FlagDeliveryComplete)
		p.send = func(c *rconn) {
			h.ConnID = c.peerIdx // known once connected
			h.Marshal(pkt)
			c.ep.send(pkt, 0, t, fl)
		}
	default:
		// Rendezvous: the peer reads buf through a region of our own.
		r.nextKey++
		mr, err := r.d.RegMR(buf, fabric.AccessRemoteRead, rxmKeyBase|r.nextKey)
		if err != nil {
			return err
		}
		r.nextMsg++
		id := r.nextMsg
		r.rndv[id] = &rndvSend{ctx: context, flags: cflags, length: uint64(len(buf)), mr: mr}
		p.rndv, p.comp = id, false // Close and failures report it through r.rndv
		// addr 0: the region is named by offset.
		pkt := append(make([]byte, rxmPktLen), rxm.RndvHdr([]rxm.IOV{{Addr: 0, Len: uint64(len(buf)), Key: mr.Key()}})...)
		h := rxm.Pkt{Ctrl: rxm.CtrlRndvReq, MsgID: id, Size: uint64(len(buf)), Data: data, Tag: tag}
		if tagged {
			h.Op = rxm.OpTagged
		}
		if flags&fabric.FlagRemoteCQData != 0 {
			h.Flags = rxm.FlagRemoteCQData
		}
		p.send = func(c *rconn) {
			h.ConnID = c.peerIdx
			h.Marshal(pkt)
			c.ep.send(pkt, 0, &txInternal{}, fabric.FlagCompletion)
		}
	}
	c.queue(p)
	return nil
}

// RMA on an RDM endpoint goes straight over the connection to the peer,
// as rxm passes it to its MSG endpoints: the peer's tcp endpoint serves
// it against the peer's registered regions, with no rxm header.

// rma queues an RMA operation for dest's connection. Called without r.Mu.
func (r *rdm) rma(op string, dest fabric.Addr, t *txUser, do func(e *ep, t *txUser) error) error {
	r.Mu.Lock()
	defer r.Mu.Unlock()
	c, err := r.connFor(op, dest)
	if err != nil {
		return err
	}
	p := pending{ctx: t.ctx, flags: t.flags, comp: t.comp}
	p.send = func(c *rconn) {
		if err := do(c.ep, t); err != nil {
			// The connection broke meanwhile: the operation fails as the
			// connection's other operations do.
			if t.comp {
				r.Comp.Failed(fabric.CQErrEntry{CQEntry: fabric.CQEntry{Context: t.ctx, Flags: t.flags}, Err: errnoOf(err, fabric.ErrConnReset)})
			}
		}
	}
	c.queue(p)
	return nil
}

// Write writes buf to dest's region key at addr (fi_write).
func (r *rdm) Write(buf []byte, desc any, dest fabric.Addr, addr, key uint64, context any) error {
	t := &txUser{ctx: context, flags: fabric.CompRMA | fabric.CompWrite, length: uint64(len(buf)), comp: true}
	return r.rma("fi_write", dest, t, func(e *ep, t *txUser) error {
		return e.Write(buf, nil, fabric.AddrNotAvail, addr, key, t)
	})
}

// WriteData is Write with remote CQ data (fi_writedata).
func (r *rdm) WriteData(buf []byte, desc any, data uint64, dest fabric.Addr, addr, key uint64, context any) error {
	t := &txUser{ctx: context, flags: fabric.CompRMA | fabric.CompWrite, length: uint64(len(buf)), comp: true}
	return r.rma("fi_writedata", dest, t, func(e *ep, t *txUser) error {
		return e.WriteData(buf, nil, data, fabric.AddrNotAvail, addr, key, t)
	})
}

// InjectWrite writes buf, copied at once, with no completion
// (fi_inject_write).
func (r *rdm) InjectWrite(buf []byte, dest fabric.Addr, addr, key uint64) error {
	if len(buf) > rxmInjectSize {
		return fabric.Errorf("fi_inject_write", fabric.ErrMsgSize, "inject of more than 64 bytes")
	}
	buf = append([]byte(nil), buf...)
	t := &txUser{flags: fabric.CompRMA | fabric.CompWrite, length: uint64(len(buf))}
	return r.rma("fi_inject_write", dest, t, func(e *ep, t *txUser) error {
		return e.Write(buf, nil, fabric.AddrNotAvail, addr, key, t)
	})
}

// Read reads len(buf) bytes of src's region key at addr (fi_read).
func (r *rdm) Read(buf []byte, desc any, src fabric.Addr, addr, key uint64, context any) error {
	t := &txUser{ctx: context, flags: fabric.CompRMA | fabric.CompRead, length: uint64(len(buf)), comp: true}
	return r.rma("fi_read", src, t, func(e *ep, t *txUser) error {
		return e.Read(buf, nil, fabric.AddrNotAvail, addr, key, t)
	})
}

// GetOpt: an RDM endpoint has no options (it offers neither FI_MULTI_RECV
// nor FI_BUFFERED_RECV, whose options rxm has).

// SetOpt: see GetOpt.

// Name is the listening address peers connect to (fi_getname).
func (r *rdm) Name() (netip.AddrPort, error) {
	r.Mu.Lock()
	defer r.Mu.Unlock()
	if r.pep == nil {
		return netip.AddrPort{}, fabric.Errorf("fi_getname", fabric.ErrOpBadState, "enable the endpoint first")
	}
	return r.pep.Name()
}

// Close closes the connections and the listener; posted receives and
// unfinished sends complete with ErrCanceled.
func (r *rdm) Close() error {
	r.Mu.Lock()
	if r.closed {
		r.Mu.Unlock()
		return nil
	}
	r.closed = true
	close(r.done)
	conns := r.byEP
	r.byEP, r.conns = map[*ep]*rconn{}, map[netip.AddrPort]*rconn{}
	for _, c := range conns {
		r.failWaiting(c, fabric.ErrCanceled)
	}
	for peer, w := range r.orphans {
		r.failWaiting(&rconn{waiting: w}, fabric.ErrCanceled)
		delete(r.orphans, peer)
	}
	for _, u := range r.q.Drain() {
		r.Comp.Failed(fabric.CQErrEntry{CQEntry: fabric.CQEntry{Context: u.Ctx, Flags: fabric.CompRecv}, Err: fabric.ErrCanceled})
	}
	for id, s := range r.rndv {
		s.mr.Close()
		r.Comp.Failed(fabric.CQErrEntry{CQEntry: fabric.CQEntry{Context: s.ctx, Flags: s.flags}, Err: fabric.ErrCanceled})
		delete(r.rndv, id)
	}
	p := r.pep
	r.Mu.Unlock()
	for e := range conns {
		e.Close()
	}
	if p != nil {
		p.Close()
	}
	r.wg.Wait()
	// What the connections canceled: the program's sends among it.
	r.Mu.Lock()
	for {
		ee, err := r.icq.ReadErr()
		if err != nil {
			break
		}
		switch x := ee.Context.(type) {
		case *txUser:
			if x.comp {
				r.Comp.Failed(fabric.CQErrEntry{CQEntry: fabric.CQEntry{Context: x.ctx, Flags: x.flags}, Err: fabric.ErrCanceled})
			}
		case *rdOp:
			// A receive whose rendezvous read was under way.
			r.Comp.Failed(fabric.CQErrEntry{CQEntry: fabric.CQEntry{Context: x.r.Ctx, Flags: x.m.Flags()}, Err: fabric.ErrCanceled})
		}
	}
	r.Mu.Unlock()
	r.Comp.Detach(r)
	return nil
}
