package vrb

import (
	"context"
	"net/netip"
	"sync"
	"sync/atomic"
	"time"
	"unsafe"

	"github.com/rdmago/rdmago/fabric"
	"github.com/rdmago/rdmago/rdmacm"
	"github.com/rdmago/rdmago/verbs"
)

// ---- Endpoint ----

type epState int

const (
	stIdle epState = iota
	stAccepting
	stConnecting
	stConnected
	stShutdown
	stClosed
)

// op is an outstanding work request.
type op struct {
	ctx   any
	flags uint64 // completion flags
	len   uint64
	buf   []byte // a receive's buffer
	comp  bool   // report a completion (not an inject)
}

type ep struct {
	d    fabric.DomainRef
	dom  *domain
	info *fabric.Info
	ctx  any

	mu                   sync.Mutex
	state                epState
	fabric.CMDataSize    // FI_OPT_CM_DATA_SIZE: 55, as C's provider
	fabric.EndpointBinds // under mu
	ch                   *rdmacm.EventChannel
	id                   *rdmacm.ID
	req                  *connReq
	cq                   *verbs.CQ
	qp                   *verbs.QP
	bounce               *verbs.MR // inject's registered staging buffer
	ops                  map[uint64]op
	nextID               uint64
	txOut                int // sends outstanding
	rxOut                int
	txSize               int
	rxSize               int
	inline               int
	cancel               context.CancelFunc
	wg                   sync.WaitGroup
	polls                atomic.Uint64
	wc                   [16]verbs.WC
	started              bool
	ud                   *udState // an FI_EP_DGRAM endpoint's; nil for FI_EP_MSG
	probing              bool     // a dead-peer probe is outstanding
	probeAge             int      // looks since the outstanding probe was posted
	lost                 bool     // the peer stopped answering (see peerLost)
}

// Dead-peer detection. A connected QP learns that its peer vanished only
// when something it sent goes unacknowledged until its retries run out
// (IBV_WC_RETRY_EXC_ERR); with nothing to send, a program that waits for
// a receive would wait for ever. So, every probeEvery while nothing is
// outstanding in the send direction, the endpoint posts a probe: a
// zero-length RDMA WRITE, which names no memory, needs no key (IBTA vol.
// 1 C9-88), takes no receive at the peer and never reaches its program,
// but is acknowledged by a live peer's device like any request. The
// connection's retry count (connRetryCount) bounds how long an
// unanswered probe or send takes to fail: with rdma_cm's ACK timeout (4.096
// µs << 19, 2.1 s) a dead peer is noticed within probeEvery + 4 × 2.1 s,
// under 12 s. The QP then flushes what is posted (FI_ECANCELED
// completions) and the EQ gets an FI_ETIMEDOUT error entry and
// FI_SHUTDOWN. A QP whose retries never run out (the passive side takes
// the count from the active side's request, and C's provider asks for
// 7) would never fail the probe: a probe still unanswered probeMisses
// looks later (9 s; a live peer's device answers at once, and nothing
// was ahead of it in the send queue) puts the QP in the error state
// itself, with the same outcome, within 12 s.
const (
	probeEvery  = 3 * time.Second
	probeMisses = 3
	// probeWRID is the probe's work request ID, one track never hands out.
	probeWRID = ^uint64(0)
	// defaultConnRetryCount is the transport retry count the endpoint asks for
	// in rdma_connect (the passive side's QP takes it from the REQ too).
	// 7, which C's provider asks for, means "retry for ever" to the
	// software RoCE devices (Linux rxe's and rdmago's), so a send to a
	// dead peer would never fail. 2 was too few on a lossy path: Linux
	// rxe spends a retry for each sequence error NAK and each timeout
	// until an ACK makes progress, and at 1 % loss a C peer's QP ran out
	// in about one fi_pingpong run of ten (500 round trips of 4 KiB).
	defaultConnRetryCount = 3
)

// connRetryCount is defaultConnRetryCount; tests change it.
var connRetryCount uint8 = defaultConnRetryCount

func (provider) Endpoint(d fabric.DomainRef, info *fabric.Info, context any) (fabric.EndpointDriver, error) {
	if info == nil || info.EPAttr == nil {
		return nil, fabric.Errorf("fi_endpoint", fabric.ErrInvalid, "no endpoint attributes")
	}
	switch info.EPAttr.Type {
	case fabric.EPMsg, fabric.EPDgram:
	case fabric.EPRDM:
		return newRDM(d, info, context)
	default:
		return nil, fabric.Errorf("fi_endpoint", fabric.ErrInvalid, "the verbs provider's endpoints are FI_EP_MSG, FI_EP_DGRAM and FI_EP_RDM")
	}
	dom, err := driverOf(d)
	if err != nil {
		return nil, err
	}
	if info.EPAttr.Type == fabric.EPDgram {
		return newDgram(d, dom, info, context), nil
	}
	e := newEP(d, dom, info, context, injectSize)
	if e.ch, err = rdmacm.CreateEventChannel(); err != nil {
		return nil, fabric.Errorf("fi_endpoint", fabric.ErrNoMemory, err.Error())
	}
	if r, ok := info.Handle.(*connReq); ok {
		if !r.taken.CompareAndSwap(false, true) {
			e.ch.Close()
			return nil, fabric.Errorf("fi_endpoint", fabric.ErrInvalid, "the connection request was already answered")
		}
		if err := r.id.Migrate(e.ch); err != nil {
			e.ch.Close()
			return nil, fabric.Errorf("fi_endpoint", fabric.ErrIO, err.Error())
		}
		e.id, e.req, e.state = r.id, r, stAccepting
		return e, nil
	}
	if e.id, err = rdmacm.CreateID(e.ch, e, rdmacm.PSTCP); err != nil {
		e.ch.Close()
		return nil, fabric.Errorf("fi_endpoint", fabric.ErrNoMemory, err.Error())
	}
	if info.DestAddr.IsValid() {
		// As C's provider does (rdma_create_ep): the route is known when
		// fi_endpoint returns, so the QP can be made at fi_enable.
		if err := e.resolve(info.DestAddr); err != nil {
			e.id.Destroy()
			e.ch.Close()
			return nil, err
		}
	}
	return e, nil
}

// newEP makes an endpoint with the queue sizes and inline size (at most
// inline) info asks for.
func newEP(d fabric.DomainRef, dom *domain, info *fabric.Info, context any, inline int) *ep {
	e := &ep{d: d, dom: dom, info: info.Dup(), ctx: context, ops: map[uint64]op{}, txSize: defaultSize, rxSize: defaultSize, inline: inline}
	e.Lock, e.Self, e.CMDataSize = &e.mu, e, maxCMData
	if info.TxAttr != nil && info.TxAttr.Size > 0 {
		e.txSize = info.TxAttr.Size
	}
	if info.RxAttr != nil && info.RxAttr.Size > 0 {
		e.rxSize = info.RxAttr.Size
	}
	if info.TxAttr != nil && info.TxAttr.InjectSize > 0 && info.TxAttr.InjectSize < inline {
		e.inline = info.TxAttr.InjectSize
	}
	return e
}

// resolve resolves the address and route to dst, waiting for the events
// on the endpoint's channel (before its event loop runs).
func (e *ep) resolve(dst netip.AddrPort) error {
	ctx, cancel := context.WithTimeout(context.Background(), 2*resolveTimeout+time.Second)
	defer cancel()
	wait := func(want rdmacm.EventType) error {
		ev, err := e.ch.GetEvent(ctx)
		if err != nil {
			return fabric.Errorf("fi_endpoint", fabric.ErrTimedOut, err.Error())
		}
		defer ev.Ack()
		if ev.Type != want {
			return fabric.Errorf("fi_endpoint", fabric.ErrHostUnreach, ev.Type.String())
		}
		return nil
	}
	src := e.info.SrcAddr
	if src.IsValid() && src.Addr().IsUnspecified() {
		src = netip.AddrPort{}
	}
	if src.IsValid() {
		src = netip.AddrPortFrom(src.Addr(), 0)
	}
	if err := e.id.ResolveAddr(src, dst, resolveTimeout); err != nil {
		return fabric.Errorf("fi_endpoint", fabric.ErrHostUnreach, err.Error())
	}
	if err := wait(rdmacm.EventAddrResolved); err != nil {
		return err
	}
	if err := e.id.ResolveRoute(resolveTimeout); err != nil {
		return fabric.Errorf("fi_endpoint", fabric.ErrHostUnreach, err.Error())
	}
	return wait(rdmacm.EventRouteResolved)
}

// BindAV binds the address vector a datagram endpoint sends by; a
// connected endpoint needs none.
func (e *ep) BindAV(av *fabric.AV) error {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.ud != nil {
		e.ud.av = av
	}
	return nil
}

// Enable creates the QP (rdma_create_qp) with a CQ of its own.
func (e *ep) Enable() error {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.qp != nil {
		return nil
	}
	if e.ud != nil {
		return e.enableUD()
	}
	if e.EQ == nil || e.Comp.TxCQ == nil || e.Comp.RxCQ == nil {
		return fabric.Errorf("fi_enable", fabric.ErrNoCQ, "bind an EQ and CQs first")
	}
	if e.id.Verbs() == nil {
		return fabric.Errorf("fi_enable", fabric.ErrOpBadState, "the endpoint has no route (open it with a destination address)")
	}
	cq, err := e.dom.ctx.CreateCQ(e.txSize+e.rxSize, nil, 0)
	if err != nil {
		return fabric.Errorf("fi_enable", fabric.ErrNoMemory, err.Error())
	}
	attr := verbs.QPInitAttr{SendCQ: cq, RecvCQ: cq, QPType: verbs.QPTRC, Cap: verbs.QPCap{
		MaxSendWR: uint32(e.txSize) + 1 /* the probe */, MaxRecvWR: uint32(e.rxSize), MaxSendSGE: maxIOV, MaxRecvSGE: maxIOV, MaxInlineData: uint32(e.inline)}}
	if err := e.id.CreateQP(e.dom.pd, &attr); err != nil {
		cq.Destroy()
		return fabric.Errorf("fi_enable", fabric.ErrNoMemory, err.Error())
	}
	e.inline = min(e.inline, int(attr.Cap.MaxInlineData))
	bounce, err := e.dom.pd.RegMR(make([]byte, max(e.inline, 1)), verbs.AccessLocalWrite)
	if err != nil {
		e.id.DestroyQP()
		cq.Destroy()
		return fabric.Errorf("fi_enable", fabric.ErrNoMemory, err.Error())
	}
	e.cq, e.qp, e.bounce = cq, e.id.QP(), bounce
	e.startBackground()
	return nil
}

// startBackground starts the goroutine that takes completions while the
// program does not poll. Called with e.mu held.
func (e *ep) startBackground() {
	ctx, cancel := context.WithCancel(context.Background())
	e.cancel = cancel
	e.wg.Add(1)
	go e.background(ctx)
}

// connParam is what C's provider offers in connect and accept.
func (e *ep) connParam(data []byte) *rdmacm.ConnParam {
	p := &rdmacm.ConnParam{PrivateData: data, FlowControl: 1, RetryCount: connRetryCount, RNRRetryCount: 7}
	if a, err := e.dom.ctx.QueryDevice(); err == nil {
		p.ResponderResources = uint8(min(a.MaxQPRdAtom, 255))
		p.InitiatorDepth = uint8(min(a.MaxQPInitRdAtom, 255))
	}
	return p
}

// Connect sends the connection request (rdma_connect); FI_CONNECTED or an
// error entry follows on the EQ. addr must be where the endpoint was
// opened to (its info's DestAddr), as C's provider resolves it then.
func (e *ep) Connect(addr netip.AddrPort, param []byte) error {
	if e.ud != nil {
		return fabric.Errorf("fi_connect", fabric.ErrNotSupported, "an FI_EP_DGRAM endpoint is not connected")
	}
	data, err := withHdr("fi_connect", param)
	if err != nil {
		return err
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	switch {
	case e.qp == nil:
		return fabric.Errorf("fi_connect", fabric.ErrOpBadState, "enable the endpoint first")
	case e.state != stIdle:
		return fabric.Errorf("fi_connect", fabric.ErrIsConn, "the endpoint is connecting or connected")
	}
	if peer := e.id.PeerAddr(); addr.IsValid() && peer.IsValid() && addr.Addr().Unmap() != peer.Addr().Unmap() {
		return fabric.Errorf("fi_connect", fabric.ErrInvalid, "the endpoint was opened to "+peer.String())
	}
	if err := e.id.Connect(e.connParam(data)); err != nil {
		return fabric.Errorf("fi_connect", errnoOf(err, fabric.ErrConnRefused), err.Error())
	}
	e.state = stConnecting
	e.startEvents()
	return nil
}

// Accept accepts the request the endpoint was opened on (rdma_accept);
// FI_CONNECTED follows.
func (e *ep) Accept(param []byte) error {
	if e.ud != nil {
		return fabric.Errorf("fi_accept", fabric.ErrNotSupported, "an FI_EP_DGRAM endpoint is not connected")
	}
	data, err := withHdr("fi_accept", param)
	if err != nil {
		return err
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	switch {
	case e.state != stAccepting:
		return fabric.Errorf("fi_accept", fabric.ErrOpBadState, "the endpoint was not opened on a connection request")
	case e.qp == nil:
		return fabric.Errorf("fi_accept", fabric.ErrOpBadState, "enable the endpoint first")
	}
	if err := e.id.Accept(e.connParam(data)); err != nil {
		return fabric.Errorf("fi_accept", errnoOf(err, fabric.ErrConnReset), err.Error())
	}
	e.state = stConnecting
	e.startEvents()
	return nil
}

// startEvents starts the CM event loop. Called with e.mu held.
func (e *ep) startEvents() {
	if e.started {
		return
	}
	e.started = true
	ctx, cancel := context.WithCancel(context.Background())
	prev := e.cancel
	e.cancel = func() { prev(); cancel() }
	e.wg.Add(1)
	go e.events(ctx)
}

// events turns the ID's CM events into EQ events.
func (e *ep) events(ctx context.Context) {
	defer e.wg.Done()
	for {
		ev, err := e.ch.GetEvent(ctx)
		if err != nil {
			return
		}
		typ, status, data := ev.Type, ev.Status, stripHdr(ev.Param.PrivateData)
		ev.Ack()
		e.mu.Lock()
		if e.state == stClosed {
			e.mu.Unlock()
			return
		}
		eq := e.EQ
		switch typ {
		case rdmacm.EventEstablished:
			e.state = stConnected
			e.wg.Add(1)
			go e.probe(ctx)
			e.mu.Unlock()
			eq.Write(fabric.EQEntry{Event: fabric.EventConnected, FID: e.FID(), Data: data})
			continue
		case rdmacm.EventRejected:
			e.state = stShutdown
			e.mu.Unlock()
			eq.WriteErr(fabric.EQErrEntry{FID: e.FID(), Err: fabric.ErrConnRefused, ErrData: data})
			continue
		case rdmacm.EventUnreachable, rdmacm.EventConnectError:
			e.state = stShutdown
			e.mu.Unlock()
			errno := fabric.ErrConnRefused
			if status == -110 {
				errno = fabric.ErrTimedOut
			}
			eq.WriteErr(fabric.EQErrEntry{FID: e.FID(), Err: errno})
			continue
		case rdmacm.EventDisconnected, rdmacm.EventDeviceRemoval:
			was, lost := e.state, e.lost
			e.state = stShutdown
			e.mu.Unlock()
			if (was == stConnected || was == stShutdown) && !lost {
				eq.Write(fabric.EQEntry{Event: fabric.EventShutdown, FID: e.FID()})
			}
			continue
		}
		e.mu.Unlock()
	}
}

func (e *ep) Shutdown() error {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.state != stConnected || e.ud != nil {
		return nil
	}
	e.state = stShutdown
	e.id.Disconnect()
	return nil
}

// Name returns the endpoint's address (fi_getname); a datagram endpoint
// has a UD name instead, which fabric.GetName returns (RawName).
func (e *ep) Name() (netip.AddrPort, error) {
	if e.ud != nil {
		return netip.AddrPort{}, fabric.Errorf("fi_getname", fabric.ErrAddrNotAvail, "an FI_EP_DGRAM endpoint is named by an FI_ADDR_IB_UD name: use fabric.GetName")
	}
	return e.id.LocalAddr(), nil
}

func (e *ep) Peer() (netip.AddrPort, error) {
	if e.ud != nil {
		return netip.AddrPort{}, fabric.Errorf("fi_getpeer", fabric.ErrNotConn, "an FI_EP_DGRAM endpoint is not connected")
	}
	p := e.id.PeerAddr()
	if !p.IsValid() {
		return p, fabric.Errorf("fi_getpeer", fabric.ErrNotConn, "")
	}
	return p, nil
}

// Close disconnects, completes what is outstanding with ErrCanceled and
// frees the QP, CQ and ID.
func (e *ep) Close() error {
	e.mu.Lock()
	if e.state == stClosed {
		e.mu.Unlock()
		return nil
	}
	was := e.state
	e.state = stClosed
	cancel := e.cancel
	e.mu.Unlock()
	if was == stConnected && e.ud == nil {
		e.id.Disconnect()
	}
	if cancel != nil {
		cancel()
	}
	e.wg.Wait()
	// No CQ or counter polls the endpoint from here on; one that took it
	// before finds it closed (Progress) or its CQ gone (progressLocked).
	e.Comp.Detach(e)
	e.mu.Lock()
	for _, o := range e.ops {
		if o.comp {
			e.Comp.Failed(fabric.CQErrEntry{CQEntry: fabric.CQEntry{Context: o.ctx, Flags: o.flags}, Err: fabric.ErrCanceled})
		}
	}
	e.ops = map[uint64]op{}
	cq, qp, bounce := e.cq, e.qp, e.bounce
	e.cq, e.qp, e.bounce = nil, nil, nil
	e.mu.Unlock()
	if e.ud != nil {
		if qp != nil {
			qp.Destroy()
		}
		e.ud.destroyAHs()
	} else {
		if qp != nil {
			e.id.DestroyQP()
		}
		e.id.Destroy()
	}
	if cq != nil {
		cq.Destroy()
	}
	if bounce != nil {
		bounce.Dereg()
	}
	if e.ch != nil {
		e.ch.Close()
	}
	return nil
}

// ---- Data ----

func (e *ep) live(op string) error {
	switch e.state {
	case stConnected:
		return nil
	case stIdle, stAccepting, stConnecting:
		if e.qp != nil && op == "fi_recv" {
			return nil // receives may be posted before the connection is up
		}
		return fabric.Errorf(op, fabric.ErrOpBadState, "not connected")
	}
	return fabric.Errorf(op, fabric.ErrShutdown, "the connection is closed")
}

// sge finds buf in the region desc names.
func sge(op string, buf []byte, desc any) ([]verbs.SGE, error) {
	if len(buf) == 0 {
		return nil, nil
	}
	m, ok := desc.(*fabric.MR)
	if !ok || m == nil {
		return nil, fabric.Errorf(op, fabric.ErrInvalid, "no memory descriptor: the verbs provider needs FI_MR_LOCAL buffers (MR.Desc)")
	}
	vm, ok := fabric.MRDriverOf(m).(*verbs.MR)
	if !ok || len(m.Buf) == 0 {
		return nil, fabric.Errorf(op, fabric.ErrInvalid, "the descriptor is not a verbs region")
	}
	base := uintptr(unsafe.Pointer(unsafe.SliceData(m.Buf)))
	p := uintptr(unsafe.Pointer(unsafe.SliceData(buf)))
	if p < base || p+uintptr(len(buf)) > base+uintptr(len(m.Buf)) {
		return nil, fabric.Errorf(op, fabric.ErrInvalid, "the buffer is not inside the region its descriptor names")
	}
	return []verbs.SGE{vm.SGE(int(p-base), len(buf))}, nil
}

// track records an outstanding request and returns its wr_id. Called
// with e.mu held.
func (e *ep) track(o op) uint64 {
	e.nextID++
	e.ops[e.nextID] = o
	return e.nextID
}

func (e *ep) Recv(buf []byte, desc any, _ fabric.Addr, context any) error {
	e.mu.Lock()
	defer e.mu.Unlock()
	if err := e.live("fi_recv"); err != nil {
		return err
	}
	sg, err := sge("fi_recv", buf, desc)
	if err != nil {
		return err
	}
	if e.rxOut >= e.rxSize {
		return fabric.ErrAgain
	}
	id := e.track(op{ctx: context, flags: fabric.CompRecv | fabric.CompMsg, buf: buf, comp: true})
	if err := e.qp.PostRecv([]verbs.RecvWR{{WRID: id, SGList: sg}}); err != nil {
		delete(e.ops, id)
		return fabric.Errorf("fi_recv", fabric.ErrInvalid, err.Error())
	}
	e.rxOut++
	return nil
}

// post posts one send work request; dest addresses a datagram
// endpoint's. Called without e.mu.
func (e *ep) post(name string, wr verbs.SendWR, buf []byte, desc any, dest fabric.Addr, o op, inject bool) error {
	e.mu.Lock()
	defer e.mu.Unlock()
	if err := e.live(name); err != nil {
		return err
	}
	if e.ud != nil {
		if err := e.ud.address(name, &wr, dest, len(buf)); err != nil {
			return err
		}
	}
	if inject {
		if len(buf) > e.inline {
			return fabric.Errorf(name, fabric.ErrMsgSize, "inject of more than the inline size")
		}
		n := copy(e.bounce.Buf(), buf)
		if n > 0 {
			wr.SGList = []verbs.SGE{e.bounce.SGE(0, n)}
		}
		wr.SendFlags |= verbs.SendInline
	} else {
		sg, err := sge(name, buf, desc)
		if err != nil {
			return err
		}
		wr.SGList = sg
	}
	if e.txOut >= e.txSize {
		e.progressLocked()
		if e.txOut >= e.txSize {
			return fabric.ErrAgain
		}
	}
	wr.SendFlags |= verbs.SendSignaled
	o.len = uint64(len(buf))
	wr.WRID = e.track(o)
	if err := e.qp.PostSend([]verbs.SendWR{wr}); err != nil {
		delete(e.ops, wr.WRID)
		return fabric.Errorf(name, fabric.ErrInvalid, err.Error())
	}
	e.txOut++
	return nil
}

var sendOp = op{flags: fabric.CompSend | fabric.CompMsg}

func (e *ep) Send(buf []byte, desc any, dest fabric.Addr, context any) error {
	o := sendOp
	o.ctx, o.comp = context, true
	return e.post("fi_send", verbs.SendWR{Opcode: verbs.WRSend}, buf, desc, dest, o, false)
}

// SendData sends buf with data in the immediate (IBV_WR_SEND_WITH_IMM).
func (e *ep) SendData(buf []byte, desc any, data uint64, dest fabric.Addr, context any) error {
	o := sendOp
	o.ctx, o.comp = context, true
	return e.post("fi_senddata", verbs.SendWR{Opcode: verbs.WRSendWithImm, ImmData: uint32(data)}, buf, desc, dest, o, false)
}

// Inject sends buf inline with no completion (fi_inject).
func (e *ep) Inject(buf []byte, dest fabric.Addr) error {
	return e.post("fi_inject", verbs.SendWR{Opcode: verbs.WRSend}, buf, nil, dest, sendOp, true)
}

// SendMsg sends with flags: FlagInject posts inline, FlagRemoteCQData
// carries Data in the immediate. Verbs sends complete when the peer has
// them, so FlagTransmitComplete and FlagDeliveryComplete hold anyway.
func (e *ep) SendMsg(m *fabric.Msg, flags uint64) error {
	wr := verbs.SendWR{Opcode: verbs.WRSend}
	if flags&fabric.FlagRemoteCQData != 0 {
		wr.Opcode, wr.ImmData = verbs.WRSendWithImm, uint32(m.Data)
	}
	o := sendOp
	inject := flags&fabric.FlagInject != 0
	o.ctx, o.comp = m.Context, !inject
	return e.post("fi_sendmsg", wr, m.Buf, m.Desc, m.Addr, o, inject)
}

var writeOp = op{flags: fabric.CompRMA | fabric.CompWrite}

// Write writes buf to the peer's region key at virtual address addr
// (IBV_WR_RDMA_WRITE).
func (e *ep) Write(buf []byte, desc any, _ fabric.Addr, addr, key uint64, context any) error {
	o := writeOp
	o.ctx, o.comp = context, true
	return e.post("fi_write", verbs.SendWR{Opcode: verbs.WRRDMAWrite, RemoteAddr: addr, RKey: uint32(key)}, buf, desc, fabric.AddrNotAvail, o, false)
}

// WriteData is Write with data in the immediate
// (IBV_WR_RDMA_WRITE_WITH_IMM): it consumes a receive at the peer.
func (e *ep) WriteData(buf []byte, desc any, data uint64, _ fabric.Addr, addr, key uint64, context any) error {
	o := writeOp
	o.ctx, o.comp = context, true
	return e.post("fi_writedata", verbs.SendWR{Opcode: verbs.WRRDMAWriteWithImm, RemoteAddr: addr, RKey: uint32(key), ImmData: uint32(data)}, buf, desc, fabric.AddrNotAvail, o, false)
}

// InjectWrite writes buf inline with no completion (fi_inject_write).
func (e *ep) InjectWrite(buf []byte, _ fabric.Addr, addr, key uint64) error {
	return e.post("fi_inject_write", verbs.SendWR{Opcode: verbs.WRRDMAWrite, RemoteAddr: addr, RKey: uint32(key)}, buf, nil, fabric.AddrNotAvail, writeOp, true)
}

// Read reads the peer's region key at virtual address addr into buf
// (IBV_WR_RDMA_READ).
func (e *ep) Read(buf []byte, desc any, _ fabric.Addr, addr, key uint64, context any) error {
	o := op{ctx: context, flags: fabric.CompRMA | fabric.CompRead, comp: true}
	return e.post("fi_read", verbs.SendWR{Opcode: verbs.WRRDMARead, RemoteAddr: addr, RKey: uint32(key)}, buf, desc, fabric.AddrNotAvail, o, false)
}
