package rxm

import (
	"context"
	"net/netip"
	"os"
	"sync"

	"github.com/rdmago/rdmago/fabric"
)

// Endpoint is an FI_EP_RDM endpoint as libfabric's ofi_rxm makes one over
// a MSG provider: reliable messages to any peer of the AV over
// connections it makes on the first send to a peer, each message with
// rxm's 64-byte header in front. It owns what is the same over any
// provider — the connections (made on demand, accepted, crossing
// requests settled, what waits on them), matching messages with
// receives, reassembling segments (SAR), rendezvous bookkeeping and the
// read that ends one, RMA passed to the connection, progress and Close —
// and leaves to the provider's Transport how a message is put on the
// wire and what its connections need.
//
// A provider's RDM endpoint is this type: the provider gives New its
// Transport and its send call.
type Endpoint struct {
	fabric.NoAtomics
	Sends // the send calls, over the Transport's Send
	Binds // Mu, the AV, the CQs and counters

	T    Transport
	Cfg  Config
	D    fabric.DomainRef
	info *fabric.Info

	enabled bool
	closed  bool
	pep     fabric.PassiveEndpointDriver
	name    netip.AddrPort
	icq     *fabric.CQ // the connections' completions
	ieq     *fabric.EQ // the connections' and the listener's events
	conns   map[netip.AddrPort]*Conn
	byEP    map[fabric.EndpointDriver]*Conn
	nextIdx uint64
	q       Queue[*Conn]
	sar     map[sarKey]*Msg[*Conn]
	nextMsg uint64
	rndv    map[uint64]*RndvSend
	// retry holds work a connection's queue refused (ErrAgain) or that
	// waits for a resource: it runs again, in order, after each pump.
	retry []func() bool
	// orphans are sends that waited on a connection the peer refused
	// because its own request to us wins (EALREADY): they go over the
	// peer's connection when it comes.
	orphans map[netip.AddrPort][]Waiter
	pid     uint64
	h       *Handlers
	cancel  context.CancelFunc
	wg      sync.WaitGroup
}

// Config are the numbers a provider's rxm announces and uses.
type Config struct {
	InjectSize int    // fi_inject's limit
	RxSize     uint32 // the rx_size the connection data announces
	// RegisterReads: a rendezvous read needs the receive buffer
	// registered (verbs); one the program did not register is, for the
	// read's time.
	RegisterReads bool
}

// Transport is what a MSG provider gives an rxm endpoint. Every call but
// Listen and Open is made with Mu held.
type Transport interface {
	// Listen opens the passive endpoint peers connect to, bound to eq
	// and listening (info is the RDM endpoint's, as FI_EP_MSG).
	Listen(info *fabric.Info, eq *fabric.EQ) (fabric.PassiveEndpointDriver, error)
	// Open opens a MSG endpoint: to connect to info.DestAddr, or to
	// accept the request info came with.
	Open(info *fabric.Info) (fabric.EndpointDriver, error)
	// Attach readies a new connection whose endpoint is bound to the
	// RDM endpoint's EQ and CQ: enables it and posts its receive
	// buffers (each an *RxBuf as the context).
	Attach(c *Conn) error
	// Detach releases what Attach made, once the endpoint is closed.
	// It is called without Mu, in the background.
	Detach(c *Conn)
	// Send puts a message on the wire over c, which may not be up yet
	// (Conn.Queue waits for it).
	Send(c *Conn, m Out) error
	// SendCtrl sends a control packet of rxm's (a rendezvous's "read
	// done") over c.
	SendCtrl(c *Conn, p *Pkt)
	// Completion and Failure take the completions of the provider's own
	// operations (its sends); they report whether e was one.
	Completion(e fabric.CQEntry) bool
	Failure(ee fabric.CQErrEntry) bool
	// Close releases what the provider's part of the endpoint holds.
	Close()
}

// Conn is the connection to one peer.
type Conn struct {
	EP      fabric.EndpointDriver
	Peer    netip.AddrPort // the peer's name: its listening address
	Addr    fabric.Addr    // its AV handle, or AddrNotAvail
	MyIdx   uint64
	PeerIdx uint64 // the peer's index of the connection, for rxm headers
	PeerPID uint64
	Ready   bool
	Ext     any // the provider's
	sarOpen int // messages coming in segments
	waiting []Waiter
}

// Waiter is work for a connection that is not up yet: it runs with the
// connection when it is, or with nil and the reason when it never will.
type Waiter func(c *Conn, errno fabric.Errno)

// RxBuf is a receive buffer posted on a connection.
type RxBuf struct {
	C    *Conn
	Buf  []byte
	Desc any
}

// RndvSend is a message whose peer reads it from our memory
// (rendezvous); it completes when the peer says it has.
type RndvSend struct {
	C      *Conn
	Ctx    any
	Flags  uint64
	Length uint64
	MR     *fabric.MR
}

// rdOp is a rendezvous read into a program's receive.
type rdOp struct {
	m     Msg[*Conn]
	r     Recv
	local *fabric.MR // a registration of our own, or nil
}

// rmaOp is the program's RMA, passed to a connection.
type rmaOp struct {
	ctx  any
	comp bool
}

// sarKey names a message coming in segments.
type sarKey struct {
	c  *Conn
	id uint64
}

const (
	sarLimit = 8 * EagerLimit // C's default FI_OFI_RXM_SAR_LIMIT
	maxSAR   = 16             // messages a connection may have coming in segments at once
)

// New makes an RDM endpoint over t (fi_endpoint with FI_EP_RDM).
func New(t Transport, cfg Config, d fabric.DomainRef, info *fabric.Info) *Endpoint {
	r := &Endpoint{T: t, Cfg: cfg, D: d, info: info.Dup(), conns: map[netip.AddrPort]*Conn{}, byEP: map[fabric.EndpointDriver]*Conn{},
		sar: map[sarKey]*Msg[*Conn]{}, rndv: map[uint64]*RndvSend{}, orphans: map[netip.AddrPort][]Waiter{}, pid: uint64(os.Getpid())}
	r.Self = r
	r.Sends = Sends{To: r.send, InjectSize: cfg.InjectSize}
	r.icq, _ = d.OpenCQ(nil)
	r.ieq, _ = d.Fabric.OpenEQ()
	return r
}

// Out is a message the program sends (fi_send and its kin).
type Out struct {
	Op        string // the call, for errors
	Buf       []byte // the program's: an inject copies it before it returns
	Tagged    bool
	Tag, Data uint64
	Ctx       any
	Flags     uint64 // the call's: FlagInject, FlagRemoteCQData, completion flags
	Inject    bool   // no completion
	CompFlags uint64 // its completion's flags
}

// send is every send call: it finds the connection to dest and gives
// the message to the provider.
func (r *Endpoint) send(op string, buf []byte, dest fabric.Addr, tagged bool, tag, data uint64, ctx any, flags uint64) error {
	r.Mu.Lock()
	defer r.Mu.Unlock()
	c, err := r.Conn(op, dest)
	if err != nil {
		return err
	}
	m := Out{Op: op, Buf: buf, Tagged: tagged, Tag: tag, Data: data, Ctx: ctx, Flags: flags,
		Inject: flags&fabric.FlagInject != 0, CompFlags: fabric.CompSend | fabric.CompMsg}
	if tagged {
		m.CompFlags = fabric.CompSend | fabric.CompTagged
	}
	return r.T.Send(c, m)
}

// Enable starts the listener peers connect to, whose address Name
// returns (fi_enable).
func (r *Endpoint) Enable() error {
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
	p, err := r.T.Listen(li, r.ieq)
	if err != nil {
		return err
	}
	r.pep = p
	r.name, _ = p.Name()
	r.enabled = true
	ctx, cancel := context.WithCancel(context.Background())
	r.cancel = cancel
	r.wg.Add(1)
	go func() {
		defer r.wg.Done()
		Loop(ctx, r.ieq, r.icq, r.pump)
	}()
	return nil
}

// Enabled reports whether Enable succeeded. Called with Mu held.
func (r *Endpoint) Enabled() bool { return r.enabled }

// Progress drives the connections (fabric.Progressor).
func (r *Endpoint) Progress() { r.pump() }

// pump takes the connections' events and completions and acts on them.
func (r *Endpoint) pump() bool {
	if !r.Mu.TryLock() {
		return false // someone is at it
	}
	defer r.Mu.Unlock()
	r.PumpLocked()
	return true
}

// PumpLocked is Progress with Mu held.
func (r *Endpoint) PumpLocked() {
	if !r.closed {
		Pump(r.ieq, r.icq, r.handlers())
		r.runRetries()
	}
}

func (r *Endpoint) handlers() *Handlers {
	if r.h == nil {
		r.h = &Handlers{Event: r.cmEvent, EventErr: r.connFailed, Comp: r.completion, CompErr: r.opFailed}
	}
	return r.h
}

// Later runs try now, unless earlier work waits, and again after each
// pump until it returns true: the way to wait for room in a
// connection's queue (ErrAgain) or for a free buffer, in order. Called
// with Mu held.
func (r *Endpoint) Later(try func() bool) {
	if len(r.retry) > 0 || !try() {
		r.retry = append(r.retry, try)
	}
}

func (r *Endpoint) runRetries() {
	w := r.retry
	r.retry = nil
	for i, f := range w {
		if !f() {
			r.retry = append(r.retry, w[i:]...)
			return
		}
	}
}

// ---- Connections ----

// Conn returns the connection for operation op to dest, making it if
// there is none. Called with Mu held, which it lets go while the
// provider opens a new connection's endpoint (resolving the peer's
// address and route may take a while).
func (r *Endpoint) Conn(op string, dest fabric.Addr) (*Conn, error) {
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
	r.Mu.Unlock()
	e, err := r.T.Open(mi)
	r.Mu.Lock()
	if err != nil {
		return nil, err
	}
	if r.closed {
		e.Close()
		return nil, fabric.Errorf(op, fabric.ErrOpBadState, "endpoint closed")
	}
	if c := r.conns[peer]; c != nil {
		e.Close() // another call, or the peer, made one meanwhile
		return c, nil
	}
	c, err := r.newConn(e, peer, dest, true)
	if err != nil {
		return nil, err
	}
	data := Connect{Port: r.name.Port(), Flow: FlowPeerOff, EagerLimit: EagerLimit, RxSize: r.Cfg.RxSize, ConnID: r.pid<<32 | c.MyIdx}
	if err := e.Connect(peer, data.Bytes()); err != nil {
		r.dropConn(c)
		return nil, err
	}
	return c, nil
}

// newConn binds a connection's endpoint and has the provider ready it.
// A loopback connection's far end (ours, connecting to ourselves) only
// receives: it is not the connection sends to peer take. Called with Mu
// held.
func (r *Endpoint) newConn(e fabric.EndpointDriver, peer netip.AddrPort, addr fabric.Addr, sendable bool) (*Conn, error) {
	c := &Conn{EP: e, Peer: peer, Addr: addr, MyIdx: r.nextIdx}
	r.nextIdx++
	e.BindEQ(r.ieq)
	e.BindCQ(r.icq, fabric.BindTransmit|fabric.BindRecv)
	if err := r.T.Attach(c); err != nil {
		e.Close()
		return nil, err
	}
	if sendable {
		r.conns[peer] = c
	}
	r.byEP[e] = c
	return c, nil
}

// Live reports whether c is still one of the endpoint's connections.
// Called with Mu held.
func (r *Endpoint) Live(c *Conn) bool { return c != nil && r.byEP[c.EP] == c }

// dropConn forgets a connection and closes it in the background (its
// cancelled receives land in icq, which the closing does not wait on).
// Called with Mu held.
func (r *Endpoint) dropConn(c *Conn) {
	if r.conns[c.Peer] == c {
		delete(r.conns, c.Peer)
	}
	delete(r.byEP, c.EP)
	for id, s := range r.rndv {
		if s.C == c {
			r.FailRndv(id, fabric.ErrConnReset)
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
		c.EP.Close()
		r.T.Detach(c)
	}()
}

// Queue runs w with c now if c is up, or when it comes up (with nil and
// the reason if it never does). Called with Mu held.
func (c *Conn) Queue(w Waiter) {
	if c.Ready {
		w(c, 0)
		return
	}
	c.waiting = append(c.waiting, w)
}

// failWaiting fails what waited on c.
func failWaiting(w []Waiter, errno fabric.Errno) {
	for _, f := range w {
		f(nil, errno)
	}
}

func (r *Endpoint) cmEvent(ev fabric.EQEntry) {
	switch ev.Event {
	case fabric.EventConnReq:
		r.connReq(ev)
	case fabric.EventConnected:
		e, _ := ev.FID.(fabric.EndpointDriver)
		c := r.byEP[e]
		if c == nil {
			return
		}
		if a, ok := ParseAccept(ev.Data); ok && !c.Ready {
			c.PeerIdx, c.PeerPID = a.ConnID&0xffffffff, a.ConnID>>32
		}
		c.Ready = true
		w := c.waiting
		c.waiting = nil
		for _, f := range w {
			f(c, 0)
		}
	case fabric.EventShutdown:
		if e, ok := ev.FID.(fabric.EndpointDriver); ok {
			if c := r.byEP[e]; c != nil {
				r.dropConn(c)
			}
		}
	}
}

// connReq answers a peer's connection request: it checks rxm's connect
// data, settles a request crossing ours, and accepts with its own.
func (r *Endpoint) connReq(ev fabric.EQEntry) {
	cd, err := ParseConnect(ev.Data)
	if err != nil {
		r.pep.Reject(ev.Info.Handle, Reject)
		return
	}
	peer := netip.AddrPortFrom(ev.Info.DestAddr.Addr().Unmap(), cd.Port)
	addr := fabric.AddrNotAvail
	if r.AV != nil {
		addr = r.AV.Find(peer)
	}
	loopback := false
	var moved []Waiter
	if old := r.conns[peer]; old != nil {
		switch ResolveClash(old.Ready, old.PeerPID, cd.ConnID>>32, peer, r.name) {
		case RefuseAlready:
			r.pep.Reject(ev.Info.Handle, RejectAlready)
			return
		case Replace:
			moved, old.waiting = old.waiting, nil
			r.dropConn(old)
		case Loopback:
			loopback = true
		}
	}
	mi := ev.Info
	mi.TxAttr.Size, mi.RxAttr.Size = 0, 0
	e, err := r.T.Open(mi)
	if err == nil {
		var c *Conn
		if c, err = r.newConn(e, peer, addr, !loopback); err == nil {
			c.waiting = append(moved, r.orphans[peer]...)
			delete(r.orphans, peer)
			c.PeerIdx, c.PeerPID = cd.ConnID&0xffffffff, cd.ConnID>>32
			if err = e.Accept(Accept{ConnID: r.pid<<32 | c.MyIdx, RxSize: r.Cfg.RxSize, Flow: FlowPeerOff}.Bytes()); err != nil {
				r.dropConn(c)
				w := c.waiting
				c.waiting = nil
				failWaiting(w, fabric.ErrConnRefused)
			}
			return
		}
	}
	r.pep.Reject(ev.Info.Handle, Reject)
	failWaiting(moved, fabric.ErrConnRefused)
}

// connFailed fails what waited on a connection that did not come up,
// unless the peer refused it because its own request to us goes on
// (EALREADY): then it waits for that one.
func (r *Endpoint) connFailed(ee fabric.EQErrEntry) {
	e, _ := ee.FID.(fabric.EndpointDriver)
	c := r.byEP[e]
	if c == nil {
		return
	}
	r.dropConn(c)
	w := c.waiting
	c.waiting = nil
	if ee.Err == fabric.ErrConnRefused && len(ee.ErrData) >= 2 && ee.ErrData[1] == ReasonAlready {
		if nc := r.conns[c.Peer]; nc != nil {
			for _, f := range w {
				nc.Queue(f)
			}
			return
		}
		r.orphans[c.Peer] = append(r.orphans[c.Peer], w...)
		return
	}
	failWaiting(w, ee.Err)
}

// ---- Rendezvous sends ----

// NextMsgID numbers a message of ours (a rendezvous, a segmented one).
// Called with Mu held.
func (r *Endpoint) NextMsgID() uint64 {
	r.nextMsg++
	return r.nextMsg
}

// AddRndv records a rendezvous send under id until the peer's "read
// done" completes it. Called with Mu held.
func (r *Endpoint) AddRndv(id uint64, s *RndvSend) { r.rndv[id] = s }

// Rndv returns the rendezvous send id, or nil. Called with Mu held.
func (r *Endpoint) Rndv(id uint64) *RndvSend { return r.rndv[id] }

// FailRndv fails a rendezvous send. Called with Mu held.
func (r *Endpoint) FailRndv(id uint64, errno fabric.Errno) {
	s := r.rndv[id]
	if s == nil {
		return
	}
	delete(r.rndv, id)
	s.MR.Close()
	r.Comp.Failed(fabric.CQErrEntry{CQEntry: fabric.CQEntry{Context: s.Ctx, Flags: s.Flags}, Err: errno})
}

// ---- Completions of the connections ----

// ---- The program's calls ----

// RMA on an RDM endpoint goes straight over the connection to the peer,
// as rxm passes it to its MSG endpoints, with no rxm header.

// rma runs do on dest's connection now if it is up, or when it comes up.
func (r *Endpoint) rma(op string, dest fabric.Addr, flags uint64, o *rmaOp, do func(e fabric.EndpointDriver, o *rmaOp) error) error {
	r.Mu.Lock()
	defer r.Mu.Unlock()
	c, err := r.Conn(op, dest)
	if err != nil {
		return err
	}
	if c.Ready {
		return do(c.EP, o)
	}
	c.Queue(func(c *Conn, errno fabric.Errno) {
		if c != nil {
			if err := do(c.EP, o); err == nil {
				return
			}
			errno = fabric.ErrConnReset // the connection broke meanwhile
		}
		if o.comp {
			r.Comp.Failed(fabric.CQErrEntry{CQEntry: fabric.CQEntry{Context: o.ctx, Flags: flags}, Err: errno})
		}
	})
	return nil
}

// Write writes buf to dest's region key at addr (fi_write).
func (r *Endpoint) Write(buf []byte, desc any, dest fabric.Addr, addr, key uint64, context any) error {
	return r.rma("fi_write", dest, fabric.CompRMA|fabric.CompWrite, &rmaOp{ctx: context, comp: true}, func(e fabric.EndpointDriver, o *rmaOp) error {
		return e.Write(buf, desc, fabric.AddrNotAvail, addr, key, o)
	})
}

// WriteData is Write with remote CQ data (fi_writedata).
func (r *Endpoint) WriteData(buf []byte, desc any, data uint64, dest fabric.Addr, addr, key uint64, context any) error {
	return r.rma("fi_writedata", dest, fabric.CompRMA|fabric.CompWrite, &rmaOp{ctx: context, comp: true}, func(e fabric.EndpointDriver, o *rmaOp) error {
		return e.WriteData(buf, desc, data, fabric.AddrNotAvail, addr, key, o)
	})
}

// InjectWrite writes buf, copied at once, with no completion
// (fi_inject_write); the write counter counts it.
func (r *Endpoint) InjectWrite(buf []byte, dest fabric.Addr, addr, key uint64) error {
	if err := r.injectFits("fi_inject_write", buf); err != nil {
		return err
	}
	b := append([]byte(nil), buf...)
	return r.rma("fi_inject_write", dest, fabric.CompRMA|fabric.CompWrite, &rmaOp{}, func(e fabric.EndpointDriver, _ *rmaOp) error {
		err := e.InjectWrite(b, fabric.AddrNotAvail, addr, key)
		if err == nil {
			r.Comp.Count(fabric.CompRMA | fabric.CompWrite)
		}
		return err
	})
}

// Read reads len(buf) bytes of src's region key at addr (fi_read).
func (r *Endpoint) Read(buf []byte, desc any, src fabric.Addr, addr, key uint64, context any) error {
	return r.rma("fi_read", src, fabric.CompRMA|fabric.CompRead, &rmaOp{ctx: context, comp: true}, func(e fabric.EndpointDriver, o *rmaOp) error {
		return e.Read(buf, desc, fabric.AddrNotAvail, addr, key, o)
	})
}

// Name is the listening address peers connect to (fi_getname).
func (r *Endpoint) Name() (netip.AddrPort, error) {
	r.Mu.Lock()
	defer r.Mu.Unlock()
	if !r.enabled {
		return netip.AddrPort{}, fabric.Errorf("fi_getname", fabric.ErrOpBadState, "enable the endpoint first")
	}
	return r.name, nil
}

// Close closes the connections and the listener; receives and sends
// outstanding complete with ErrCanceled (fi_close).
func (r *Endpoint) Close() error {
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
	r.byEP, r.conns = map[fabric.EndpointDriver]*Conn{}, map[netip.AddrPort]*Conn{}
	for _, c := range conns {
		c.EP.Close()
		r.T.Detach(c)
	}
	// What the connections cancelled (sends, rendezvous reads, RMA)
	// fails the program's operations it was part of; what never went
	// fails too.
	Pump(r.ieq, r.icq, r.handlers())
	for _, c := range conns {
		w := c.waiting
		c.waiting = nil
		failWaiting(w, fabric.ErrCanceled)
	}
	for peer, w := range r.orphans {
		failWaiting(w, fabric.ErrCanceled)
		delete(r.orphans, peer)
	}
	r.runRetries()
	for _, u := range r.q.Drain() {
		r.Comp.Failed(fabric.CQErrEntry{CQEntry: fabric.CQEntry{Context: u.Ctx, Flags: fabric.CompRecv}, Err: fabric.ErrCanceled})
	}
	for id := range r.rndv {
		r.FailRndv(id, fabric.ErrCanceled)
	}
	if r.pep != nil {
		r.pep.Close()
	}
	r.T.Close()
	r.icq.Close()
	r.ieq.Close()
	r.Comp.Detach(r)
	return nil
}
