package fabric

import (
	"net/netip"
	"strconv"
	"sync"
	"sync/atomic"

	"github.com/rdmago/rdmago/fabric/internal/unwrap"
)

// EndpointDriver is the provider's side of an endpoint (struct fid_ep's
// operations): what Endpoint calls once its common checks pass. A driver
// is never called after Close, nor with a nil EQ, CQ, AV, counter or
// message, nor with an inject larger than its info's inject size.
// Tagged messages, atomics and options are optional: a driver offers
// them by implementing TaggedDriver, Atomics and OptDriver.
type EndpointDriver interface {
	BindEQ(eq *EQ) error
	BindCQ(cq *CQ, flags uint64) error
	BindAV(av *AV) error
	BindCounter(c *Counter, flags uint64) error
	Enable() error
	Connect(addr netip.AddrPort, param []byte) error
	Accept(param []byte) error
	Shutdown() error
	Name() (netip.AddrPort, error)
	Peer() (netip.AddrPort, error)

	Recv(buf []byte, desc any, src Addr, context any) error
	Send(buf []byte, desc any, dest Addr, context any) error
	SendData(buf []byte, desc any, data uint64, dest Addr, context any) error
	Inject(buf []byte, dest Addr) error
	SendMsg(msg *Msg, flags uint64) error

	Write(buf []byte, desc any, dest Addr, addr, key uint64, context any) error
	WriteData(buf []byte, desc any, data uint64, dest Addr, addr, key uint64, context any) error
	Read(buf []byte, desc any, src Addr, addr, key uint64, context any) error
	InjectWrite(buf []byte, dest Addr, addr, key uint64) error

	// Close is called once.
	Close() error
}

// TaggedDriver is implemented by the drivers of endpoints with FI_TAGGED
// (fi_trecv, fi_tsend, fi_tinject, fi_tsendmsg). Endpoint answers the
// tagged calls of an endpoint whose driver lacks it with ErrNotSupported.
type TaggedDriver interface {
	TRecv(buf []byte, desc any, src Addr, tag, ignore uint64, context any) error
	TSend(buf []byte, desc any, dest Addr, tag uint64, context any) error
	TInject(buf []byte, dest Addr, tag uint64) error
	TSendMsg(msg *Msg, tag uint64, flags uint64) error
}

// OptDriver is implemented by the drivers of endpoints with options
// (fi_getopt, fi_setopt). Endpoint answers the option calls of an
// endpoint whose driver lacks it with ErrNoProtoOpt.
type OptDriver interface {
	GetOpt(opt Opt) (int, error)
	SetOpt(opt Opt, value int) error
}

// CMDataSize is OptDriver for an endpoint whose one option is
// FI_OPT_CM_DATA_SIZE, the most private data it carries, which cannot
// be set. Providers embed it.
type CMDataSize int

// GetOpt returns the size for OptCMDataSize.
func (n CMDataSize) GetOpt(opt Opt) (int, error) {
	if opt == OptCMDataSize {
		return int(n), nil
	}
	return 0, Errorf("fi_getopt", ErrNoProtoOpt, "")
}

// SetOpt sets nothing.
func (CMDataSize) SetOpt(Opt, int) error { return Errorf("fi_setopt", ErrNoProtoOpt, "") }

// PassiveEndpointDriver is the provider's side of a passive endpoint
// (struct fid_pep's operations). It is never called after Close, nor
// with a nil EQ.
type PassiveEndpointDriver interface {
	Bind(eq *EQ) error
	Listen() error
	Name() (netip.AddrPort, error)
	Reject(handle any, param []byte) error
	Close() error
}

func init() {
	unwrap.Endpoint = func(ep any) any { return ep.(*Endpoint).drv }
	unwrap.Domain = func(d any) any { return d.(*Domain).ref() }
}

// Endpoint is a communication endpoint (fi_endpoint, struct fid_ep). A
// connected endpoint (FI_EP_MSG) ignores the address arguments; a
// connectionless one (FI_EP_RDM, FI_EP_DGRAM) sends to and receives
// from the addresses of its AV (AddrNotAvail for "any"). After Close,
// every call fails with ErrBadFD.
type Endpoint struct {
	drv    EndpointDriver
	inject int // the inject size, or -1 for no limit known
	closed atomic.Bool
}

func newEndpoint(drv EndpointDriver, info *Info) *Endpoint {
	e := &Endpoint{drv: drv, inject: -1}
	if info != nil && info.TxAttr != nil {
		e.inject = info.TxAttr.InjectSize
	}
	if f, ok := drv.(fidSetter); ok {
		f.setFID(e)
	}
	return e
}

// OpenEndpoint opens an endpoint (fi_endpoint); for an FI_CONNREQ's
// info, it is the endpoint that Accept answers the request with.
func (d *Domain) OpenEndpoint(info *Info, context any) (*Endpoint, error) {
	if info == nil {
		return nil, Errorf("fi_endpoint", ErrInvalid, "no info")
	}
	if d.isClosed() {
		return nil, Errorf("fi_endpoint", ErrBadFD, "domain closed")
	}
	drv, err := d.Fabric.prov.Endpoint(d.ref(), info, context)
	if err != nil {
		return nil, err
	}
	return newEndpoint(drv, info), nil
}

func (e *Endpoint) live(op string) error {
	if e.closed.Load() {
		return Errorf(op, ErrBadFD, "endpoint closed")
	}
	return nil
}

func (e *Endpoint) injectFits(op string, n int) error {
	if err := e.live(op); err != nil {
		return err
	}
	if e.inject >= 0 && n > e.inject {
		return Errorf(op, ErrMsgSize, "inject of more than "+strconv.Itoa(e.inject)+" bytes")
	}
	return nil
}

func nonNil[T any](op, what string, p *T) error {
	if p == nil {
		return Errorf(op, ErrInvalid, "no "+what)
	}
	return nil
}

// BindEQ binds the event queue (fi_ep_bind with an EQ).
func (e *Endpoint) BindEQ(eq *EQ) error {
	if err := e.live("fi_ep_bind"); err != nil {
		return err
	}
	if err := nonNil("fi_ep_bind", "EQ", eq); err != nil {
		return err
	}
	return e.drv.BindEQ(eq)
}

// BindCQ binds a CQ for transmits (BindTransmit), receives (BindRecv) or
// both (fi_ep_bind with a CQ).
func (e *Endpoint) BindCQ(cq *CQ, flags uint64) error {
	if err := e.live("fi_ep_bind"); err != nil {
		return err
	}
	if err := nonNil("fi_ep_bind", "CQ", cq); err != nil {
		return err
	}
	return e.drv.BindCQ(cq, flags)
}

// BindAV binds the address vector (fi_ep_bind with an AV).
func (e *Endpoint) BindAV(av *AV) error {
	if err := e.live("fi_ep_bind"); err != nil {
		return err
	}
	if err := nonNil("fi_ep_bind", "AV", av); err != nil {
		return err
	}
	return e.drv.BindAV(av)
}

// BindCounter binds a counter for the operations flags names: BindSend,
// BindRecvCount, BindRead, BindWrite, BindRemoteRead, BindRemoteWrite
// (fi_ep_bind with a counter).
func (e *Endpoint) BindCounter(c *Counter, flags uint64) error {
	if err := e.live("fi_ep_bind"); err != nil {
		return err
	}
	if err := nonNil("fi_ep_bind", "counter", c); err != nil {
		return err
	}
	return e.drv.BindCounter(c, flags)
}

// Enable enables the endpoint (fi_enable).
func (e *Endpoint) Enable() error {
	if err := e.live("fi_enable"); err != nil {
		return err
	}
	return e.drv.Enable()
}

// Connect connects to a passive endpoint (fi_connect); FI_CONNECTED or
// an error entry follows on the EQ.
func (e *Endpoint) Connect(addr netip.AddrPort, param []byte) error {
	if err := e.live("fi_connect"); err != nil {
		return err
	}
	return e.drv.Connect(addr, param)
}

// Accept accepts the request the endpoint was opened with (fi_accept).
func (e *Endpoint) Accept(param []byte) error {
	if err := e.live("fi_accept"); err != nil {
		return err
	}
	return e.drv.Accept(param)
}

// Shutdown closes the connection (fi_shutdown).
func (e *Endpoint) Shutdown() error {
	if err := e.live("fi_shutdown"); err != nil {
		return err
	}
	return e.drv.Shutdown()
}

// Name returns the endpoint's address (fi_getname).
func (e *Endpoint) Name() (netip.AddrPort, error) {
	if err := e.live("fi_getname"); err != nil {
		return netip.AddrPort{}, err
	}
	return e.drv.Name()
}

// Peer returns its peer's address (fi_getpeer).
func (e *Endpoint) Peer() (netip.AddrPort, error) {
	if err := e.live("fi_getpeer"); err != nil {
		return netip.AddrPort{}, err
	}
	return e.drv.Peer()
}

// Recv posts a receive buffer (fi_recv).
func (e *Endpoint) Recv(buf []byte, desc any, src Addr, context any) error {
	if err := e.live("fi_recv"); err != nil {
		return err
	}
	return e.drv.Recv(buf, desc, src, context)
}

// Send sends buf (fi_send).
func (e *Endpoint) Send(buf []byte, desc any, dest Addr, context any) error {
	if err := e.live("fi_send"); err != nil {
		return err
	}
	return e.drv.Send(buf, desc, dest, context)
}

// SendData sends buf with remote CQ data (fi_senddata).
func (e *Endpoint) SendData(buf []byte, desc any, data uint64, dest Addr, context any) error {
	if err := e.live("fi_senddata"); err != nil {
		return err
	}
	return e.drv.SendData(buf, desc, data, dest, context)
}

// Inject sends buf, copied at once, with no completion (fi_inject); it
// fails with ErrMsgSize beyond the inject size (TxAttr.InjectSize).
func (e *Endpoint) Inject(buf []byte, dest Addr) error {
	if err := e.injectFits("fi_inject", len(buf)); err != nil {
		return err
	}
	return e.drv.Inject(buf, dest)
}

// SendMsg sends with flags (fi_sendmsg): FlagTransmitComplete,
// FlagDeliveryComplete, FlagRemoteCQData, FlagInject, FlagCompletion.
func (e *Endpoint) SendMsg(msg *Msg, flags uint64) error {
	if err := e.live("fi_sendmsg"); err != nil {
		return err
	}
	if err := nonNil("fi_sendmsg", "message", msg); err != nil {
		return err
	}
	if flags&FlagInject != 0 {
		if err := e.injectFits("fi_sendmsg", len(msg.Buf)); err != nil {
			return err
		}
	}
	return e.drv.SendMsg(msg, flags)
}

func (e *Endpoint) tagged(op string) (TaggedDriver, error) {
	if err := e.live(op); err != nil {
		return nil, err
	}
	t, ok := e.drv.(TaggedDriver)
	if !ok {
		return nil, Errorf(op, ErrNotSupported, "the endpoint has no FI_TAGGED")
	}
	return t, nil
}

// TRecv posts a receive for a tagged message (fi_trecv): it takes a
// message whose tag matches tag in the bits ignore leaves clear. An
// endpoint without FI_TAGGED fails with ErrNotSupported.
func (e *Endpoint) TRecv(buf []byte, desc any, src Addr, tag, ignore uint64, context any) error {
	t, err := e.tagged("fi_trecv")
	if err != nil {
		return err
	}
	return t.TRecv(buf, desc, src, tag, ignore, context)
}

// TSend sends a tagged message (fi_tsend).
func (e *Endpoint) TSend(buf []byte, desc any, dest Addr, tag uint64, context any) error {
	t, err := e.tagged("fi_tsend")
	if err != nil {
		return err
	}
	return t.TSend(buf, desc, dest, tag, context)
}

// TInject is Inject for a tagged message (fi_tinject).
func (e *Endpoint) TInject(buf []byte, dest Addr, tag uint64) error {
	t, err := e.tagged("fi_tinject")
	if err != nil {
		return err
	}
	if err := e.injectFits("fi_tinject", len(buf)); err != nil {
		return err
	}
	return t.TInject(buf, dest, tag)
}

// TSendMsg is SendMsg for a tagged message (fi_tsendmsg).
func (e *Endpoint) TSendMsg(msg *Msg, tag uint64, flags uint64) error {
	t, err := e.tagged("fi_tsendmsg")
	if err != nil {
		return err
	}
	if err := nonNil("fi_tsendmsg", "message", msg); err != nil {
		return err
	}
	if flags&FlagInject != 0 {
		if err := e.injectFits("fi_tsendmsg", len(msg.Buf)); err != nil {
			return err
		}
	}
	return t.TSendMsg(msg, tag, flags)
}

// Write writes buf to the peer's region key at addr (fi_write).
func (e *Endpoint) Write(buf []byte, desc any, dest Addr, addr, key uint64, context any) error {
	if err := e.live("fi_write"); err != nil {
		return err
	}
	return e.drv.Write(buf, desc, dest, addr, key, context)
}

// WriteData is Write that also delivers data to the peer's CQ
// (fi_writedata).
func (e *Endpoint) WriteData(buf []byte, desc any, data uint64, dest Addr, addr, key uint64, context any) error {
	if err := e.live("fi_writedata"); err != nil {
		return err
	}
	return e.drv.WriteData(buf, desc, data, dest, addr, key, context)
}

// Read reads len(buf) bytes of the peer's region key at addr into buf
// (fi_read).
func (e *Endpoint) Read(buf []byte, desc any, src Addr, addr, key uint64, context any) error {
	if err := e.live("fi_read"); err != nil {
		return err
	}
	return e.drv.Read(buf, desc, src, addr, key, context)
}

// InjectWrite writes buf, copied at once, with no completion
// (fi_inject_write); it is counted by a BindWrite counter.
func (e *Endpoint) InjectWrite(buf []byte, dest Addr, addr, key uint64) error {
	if err := e.injectFits("fi_inject_write", len(buf)); err != nil {
		return err
	}
	return e.drv.InjectWrite(buf, dest, addr, key)
}

func (e *Endpoint) atomics(op string) (Atomics, error) {
	if err := e.live(op); err != nil {
		return nil, err
	}
	a, ok := e.drv.(Atomics)
	if !ok {
		return nil, errNoAtomic(op)
	}
	return a, nil
}

// Atomic applies op with the elements of buf to the target (fi_atomic);
// an endpoint without FI_ATOMIC fails with ErrNoSys.
func (e *Endpoint) Atomic(buf []byte, desc any, dest Addr, addr, key uint64, dt Datatype, op AtomicOp, context any) error {
	a, err := e.atomics("fi_atomic")
	if err != nil {
		return err
	}
	return a.Atomic(buf, desc, dest, addr, key, dt, op, context)
}

// FetchAtomic is Atomic that also returns the target's prior elements in
// result (fi_fetch_atomic).
func (e *Endpoint) FetchAtomic(buf []byte, desc any, result []byte, resultDesc any, dest Addr, addr, key uint64, dt Datatype, op AtomicOp, context any) error {
	a, err := e.atomics("fi_fetch_atomic")
	if err != nil {
		return err
	}
	return a.FetchAtomic(buf, desc, result, resultDesc, dest, addr, key, dt, op, context)
}

// CompareAtomic swaps in buf's elements where the target compares with
// compare's as op says, and returns the prior ones in result
// (fi_compare_atomic).
func (e *Endpoint) CompareAtomic(buf []byte, desc any, compare []byte, compareDesc any, result []byte, resultDesc any, dest Addr, addr, key uint64, dt Datatype, op AtomicOp, context any) error {
	a, err := e.atomics("fi_compare_atomic")
	if err != nil {
		return err
	}
	return a.CompareAtomic(buf, desc, compare, compareDesc, result, resultDesc, dest, addr, key, dt, op, context)
}

// AtomicValid says whether the endpoint offers op on dt, and on how many
// elements at once (fi_atomicvalid).
func (e *Endpoint) AtomicValid(dt Datatype, op AtomicOp) (int, error) {
	a, err := e.atomics("fi_atomicvalid")
	if err != nil {
		return 0, err
	}
	return a.AtomicValid(dt, op)
}

// FetchAtomicValid is AtomicValid for FetchAtomic (fi_fetch_atomicvalid).
func (e *Endpoint) FetchAtomicValid(dt Datatype, op AtomicOp) (int, error) {
	a, err := e.atomics("fi_fetch_atomicvalid")
	if err != nil {
		return 0, err
	}
	return a.FetchAtomicValid(dt, op)
}

// CompareAtomicValid is AtomicValid for CompareAtomic
// (fi_compare_atomicvalid).
func (e *Endpoint) CompareAtomicValid(dt Datatype, op AtomicOp) (int, error) {
	a, err := e.atomics("fi_compare_atomicvalid")
	if err != nil {
		return 0, err
	}
	return a.CompareAtomicValid(dt, op)
}

// GetOpt reads an endpoint option (fi_getopt at FI_OPT_ENDPOINT):
// ErrNoProtoOpt for an option the provider does not have.
func (e *Endpoint) GetOpt(opt Opt) (int, error) {
	if err := e.live("fi_getopt"); err != nil {
		return 0, err
	}
	o, ok := e.drv.(OptDriver)
	if !ok {
		return 0, Errorf("fi_getopt", ErrNoProtoOpt, "")
	}
	return o.GetOpt(opt)
}

// SetOpt sets an endpoint option (fi_setopt at FI_OPT_ENDPOINT).
func (e *Endpoint) SetOpt(opt Opt, value int) error {
	if err := e.live("fi_setopt"); err != nil {
		return err
	}
	o, ok := e.drv.(OptDriver)
	if !ok {
		return Errorf("fi_setopt", ErrNoProtoOpt, "")
	}
	return o.SetOpt(opt, value)
}

// Close closes the endpoint (fi_close): outstanding operations complete
// with ErrCanceled. A second Close does nothing.
func (e *Endpoint) Close() error {
	if !e.closed.CompareAndSwap(false, true) {
		return nil
	}
	return e.drv.Close()
}

// PassiveEndpoint listens for connection requests (fi_passive_ep, struct
// fid_pep). After Close, every call fails with ErrBadFD.
type PassiveEndpoint struct {
	drv    PassiveEndpointDriver
	closed atomic.Bool

	mu        sync.Mutex
	bound     bool // an EQ is bound
	listening bool
}

// OpenPassiveEndpoint opens a listening endpoint (fi_passive_ep).
func (f *Fabric) OpenPassiveEndpoint(info *Info, context any) (*PassiveEndpoint, error) {
	if info == nil {
		return nil, Errorf("fi_passive_ep", ErrInvalid, "no info")
	}
	drv, err := f.prov.PassiveEndpoint(f, info, context)
	if err != nil {
		return nil, err
	}
	return &PassiveEndpoint{drv: drv}, nil
}

func (p *PassiveEndpoint) live(op string) error {
	if p.closed.Load() {
		return Errorf(op, ErrBadFD, "passive endpoint closed")
	}
	return nil
}

// Bind binds the event queue (fi_pep_bind).
func (p *PassiveEndpoint) Bind(eq *EQ) error {
	if err := p.live("fi_pep_bind"); err != nil {
		return err
	}
	if err := nonNil("fi_pep_bind", "EQ", eq); err != nil {
		return err
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if err := p.drv.Bind(eq); err != nil {
		return err
	}
	p.bound = true
	return nil
}

// Listen starts listening (fi_listen): FI_ENOEQ before an EQ is bound,
// FI_EALREADY once listening.
func (p *PassiveEndpoint) Listen() error {
	if err := p.live("fi_listen"); err != nil {
		return err
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	switch {
	case !p.bound:
		return Errorf("fi_listen", ErrNoEQ, "bind an EQ first")
	case p.listening:
		return Errorf("fi_listen", ErrAlready, "already listening")
	}
	if err := p.drv.Listen(); err != nil {
		return err
	}
	p.listening = true
	return nil
}

// Name returns the listening address (fi_getname).
func (p *PassiveEndpoint) Name() (netip.AddrPort, error) {
	if err := p.live("fi_getname"); err != nil {
		return netip.AddrPort{}, err
	}
	return p.drv.Name()
}

// Reject refuses a request from an FI_CONNREQ event (fi_reject).
func (p *PassiveEndpoint) Reject(handle any, param []byte) error {
	if err := p.live("fi_reject"); err != nil {
		return err
	}
	return p.drv.Reject(handle, param)
}

// Close stops listening (fi_close). A second Close does nothing.
func (p *PassiveEndpoint) Close() error {
	if !p.closed.CompareAndSwap(false, true) {
		return nil
	}
	return p.drv.Close()
}

// EndpointBinds is what fi_ep_bind binds an endpoint driver to: its EQ
// and the CQs and counters its operations report to (Comp). A provider
// embeds it, sets Lock to the lock that guards its endpoint and Self to
// the driver, which the bound CQs and counters then progress; it so has
// its BindEQ, BindCQ and BindCounter. The driver reads EQ and Comp with
// Lock held.
type EndpointBinds struct {
	Lock sync.Locker
	Self Progressor
	EQ   *EQ
	Comp Completions
	fid  atomic.Value
}

// BindEQ binds the EQ the endpoint's connection events go to.
func (b *EndpointBinds) BindEQ(eq *EQ) error {
	b.Lock.Lock()
	defer b.Lock.Unlock()
	b.EQ = eq
	return nil
}

// BindCQ binds cq for transmits (BindTransmit), receives (BindRecv) or
// both.
func (b *EndpointBinds) BindCQ(cq *CQ, flags uint64) error {
	b.Lock.Lock()
	defer b.Lock.Unlock()
	return b.Comp.BindCQ(cq, flags, b.Self)
}

// BindCounter binds a counter for the operations flags names.
func (b *EndpointBinds) BindCounter(c *Counter, flags uint64) error {
	b.Lock.Lock()
	defer b.Lock.Unlock()
	return b.Comp.BindCounter(c, flags, b.Self)
}

// FID is what the endpoint's events name it by (EQEntry.FID): the
// *Endpoint the program holds, or Self for an endpoint a provider opened
// for itself.
func (b *EndpointBinds) FID() any {
	if f := b.fid.Load(); f != nil {
		return f
	}
	return b.Self
}

func (b *EndpointBinds) setFID(ep *Endpoint) { b.fid.Store(ep) }

// fidSetter is a driver that embeds EndpointBinds.
type fidSetter interface{ setFID(*Endpoint) }

// PassiveBinds is what fi_pep_bind binds a passive endpoint driver to,
// its EQ: a provider embeds it and so has its Bind.
type PassiveBinds struct {
	mu sync.Mutex
	eq *EQ
}

// Bind binds the EQ the connection requests go to.
func (b *PassiveBinds) Bind(eq *EQ) error {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.eq = eq
	return nil
}

// Queue returns the bound EQ.
func (b *PassiveBinds) Queue() *EQ {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.eq
}

// ListenAddr is the address a passive endpoint of info listens on
// (fi_listen): its source address, or any IPv4 address and port.
func ListenAddr(info *Info) netip.AddrPort {
	if info != nil && info.SrcAddr.IsValid() {
		return info.SrcAddr
	}
	return netip.AddrPortFrom(netip.IPv4Unspecified(), 0)
}
