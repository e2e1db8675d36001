package fabric

import (
	"errors"
	"net/netip"
	"slices"
	"testing"
)

// recorder is a driver that records what reaches it.
type recorder struct{ calls []string }

func (r *recorder) note(op string) error { r.calls = append(r.calls, op); return nil }

func (r *recorder) BindEQ(*EQ) error                              { return r.note("BindEQ") }
func (r *recorder) BindCQ(*CQ, uint64) error                      { return r.note("BindCQ") }
func (r *recorder) BindAV(*AV) error                              { return r.note("BindAV") }
func (r *recorder) BindCounter(*Counter, uint64) error            { return r.note("BindCounter") }
func (r *recorder) Enable() error                                 { return r.note("Enable") }
func (r *recorder) Connect(netip.AddrPort, []byte) error          { return r.note("Connect") }
func (r *recorder) Accept([]byte) error                           { return r.note("Accept") }
func (r *recorder) Shutdown() error                               { return r.note("Shutdown") }
func (r *recorder) Name() (netip.AddrPort, error)                 { return netip.AddrPort{}, r.note("Name") }
func (r *recorder) Peer() (netip.AddrPort, error)                 { return netip.AddrPort{}, r.note("Peer") }
func (r *recorder) Recv([]byte, any, Addr, any) error             { return r.note("Recv") }
func (r *recorder) Send([]byte, any, Addr, any) error             { return r.note("Send") }
func (r *recorder) SendData([]byte, any, uint64, Addr, any) error { return r.note("SendData") }
func (r *recorder) Inject([]byte, Addr) error                     { return r.note("Inject") }
func (r *recorder) SendMsg(*Msg, uint64) error                    { return r.note("SendMsg") }
func (r *recorder) Write([]byte, any, Addr, uint64, uint64, any) error {
	return r.note("Write")
}
func (r *recorder) WriteData([]byte, any, uint64, Addr, uint64, uint64, any) error {
	return r.note("WriteData")
}
func (r *recorder) Read([]byte, any, Addr, uint64, uint64, any) error { return r.note("Read") }
func (r *recorder) InjectWrite([]byte, Addr, uint64, uint64) error    { return r.note("InjectWrite") }
func (r *recorder) Close() error                                      { return r.note("Close") }

// taggedRecorder has FI_TAGGED too.
type taggedRecorder struct{ recorder }

func (r *taggedRecorder) TRecv([]byte, any, Addr, uint64, uint64, any) error { return r.note("TRecv") }
func (r *taggedRecorder) TSend([]byte, any, Addr, uint64, any) error         { return r.note("TSend") }
func (r *taggedRecorder) TInject([]byte, Addr, uint64) error                 { return r.note("TInject") }
func (r *taggedRecorder) TSendMsg(*Msg, uint64, uint64) error                { return r.note("TSendMsg") }

func injectInfo(n int) *Info {
	i := AllocInfo()
	i.TxAttr.InjectSize = n
	return i
}

// The checks every provider shares are made once, before the driver is
// called: a refused call never reaches it.
func TestEndpointRefusesBeforeTheDriver(t *testing.T) {
	big := make([]byte, 9)
	for _, c := range []struct {
		name string
		call func(*Endpoint) error
		want Errno
	}{
		{"fi_inject over the inject size", func(e *Endpoint) error { return e.Inject(big, AddrNotAvail) }, ErrMsgSize},
		{"fi_inject_write over the inject size", func(e *Endpoint) error { return e.InjectWrite(big, AddrNotAvail, 0, 1) }, ErrMsgSize},
		{"fi_sendmsg FI_INJECT over the inject size", func(e *Endpoint) error { return e.SendMsg(&Msg{Buf: big}, FlagInject) }, ErrMsgSize},
		{"fi_sendmsg without a message", func(e *Endpoint) error { return e.SendMsg(nil, 0) }, ErrInvalid},
		{"fi_ep_bind without a CQ", func(e *Endpoint) error { return e.BindCQ(nil, BindTransmit) }, ErrInvalid},
		{"fi_ep_bind without an EQ", func(e *Endpoint) error { return e.BindEQ(nil) }, ErrInvalid},
		{"fi_ep_bind without an AV", func(e *Endpoint) error { return e.BindAV(nil) }, ErrInvalid},
		{"fi_ep_bind without a counter", func(e *Endpoint) error { return e.BindCounter(nil, BindSend) }, ErrInvalid},
		{"fi_trecv without FI_TAGGED", func(e *Endpoint) error { return e.TRecv(nil, nil, AddrNotAvail, 0, 0, nil) }, ErrNotSupported},
		{"fi_tsend without FI_TAGGED", func(e *Endpoint) error { return e.TSend(nil, nil, AddrNotAvail, 0, nil) }, ErrNotSupported},
		{"fi_tinject without FI_TAGGED", func(e *Endpoint) error { return e.TInject(nil, AddrNotAvail, 0) }, ErrNotSupported},
		{"fi_tsendmsg without FI_TAGGED", func(e *Endpoint) error { return e.TSendMsg(&Msg{}, 0, 0) }, ErrNotSupported},
		{"fi_atomic without FI_ATOMIC", func(e *Endpoint) error {
			return e.Atomic(nil, nil, AddrNotAvail, 0, 0, Uint64, OpSum, nil)
		}, ErrNoSys},
		{"fi_getopt of a driver without options", func(e *Endpoint) error { _, err := e.GetOpt(OptCMDataSize); return err }, ErrNoProtoOpt},
		{"fi_setopt of a driver without options", func(e *Endpoint) error { return e.SetOpt(OptRxSize, 1) }, ErrNoProtoOpt},
		{"fi_atomicvalid without FI_ATOMIC", func(e *Endpoint) error { _, err := e.AtomicValid(Uint64, OpSum); return err }, ErrNoSys},
	} {
		t.Run(c.name, func(t *testing.T) {
			r := &recorder{}
			e := newEndpoint(r, injectInfo(8))
			if err := c.call(e); !errors.Is(err, c.want) {
				t.Fatalf("%v, want %v", err, c.want)
			}
			if len(r.calls) != 0 {
				t.Fatalf("the driver was called: %v", r.calls)
			}
		})
	}
}

func TestEndpointPassesWhatFitsToTheDriver(t *testing.T) {
	r := &taggedRecorder{}
	e := newEndpoint(r, injectInfo(8))
	small := make([]byte, 8)
	for _, err := range []error{
		e.Inject(small, AddrNotAvail),
		e.TInject(small, AddrNotAvail, 1),
		e.SendMsg(&Msg{Buf: small}, FlagInject),
		e.TRecv(nil, nil, AddrNotAvail, 0, 0, nil),
	} {
		if err != nil {
			t.Fatal(err)
		}
	}
	if want := []string{"Inject", "TInject", "SendMsg", "TRecv"}; !slices.Equal(r.calls, want) {
		t.Fatalf("driver calls %v, want %v", r.calls, want)
	}
}

// After Close every call fails with FI_EBADF and the driver is closed
// once.
func TestClosedEndpointRefusesEveryCall(t *testing.T) {
	r := &recorder{}
	e := newEndpoint(r, injectInfo(8))
	if err := e.Close(); err != nil {
		t.Fatal(err)
	}
	if err := e.Close(); err != nil {
		t.Fatal(err)
	}
	_, nameErr := e.Name()
	_, optErr := e.GetOpt(OptCMDataSize)
	for i, err := range []error{
		e.Enable(), e.Send(nil, nil, AddrNotAvail, nil), e.Recv(nil, nil, AddrNotAvail, nil),
		e.Read(nil, nil, AddrNotAvail, 0, 0, nil), e.Connect(netip.AddrPort{}, nil), nameErr, optErr,
		e.BindCQ(&CQ{}, BindTransmit), e.TSend(nil, nil, AddrNotAvail, 0, nil),
	} {
		if !errors.Is(err, ErrBadFD) {
			t.Errorf("call %d after Close: %v, want ErrBadFD", i, err)
		}
	}
	if want := []string{"Close"}; !slices.Equal(r.calls, want) {
		t.Fatalf("driver calls %v, want %v", r.calls, want)
	}
}

type pepRecorder struct{ recorder }

func (p *pepRecorder) Bind(*EQ) error           { return p.note("Bind") }
func (p *pepRecorder) Listen() error            { return p.note("Listen") }
func (p *pepRecorder) Reject(any, []byte) error { return p.note("Reject") }

func TestClosedPassiveEndpointRefusesEveryCall(t *testing.T) {
	r := &pepRecorder{}
	p := &PassiveEndpoint{drv: r}
	if err := p.Bind(nil); !errors.Is(err, ErrInvalid) {
		t.Fatalf("fi_pep_bind without an EQ: %v", err)
	}
	p.Close()
	p.Close()
	_, nameErr := p.Name()
	for i, err := range []error{p.Listen(), p.Bind(&EQ{}), p.Reject(nil, nil), nameErr} {
		if !errors.Is(err, ErrBadFD) {
			t.Errorf("call %d after Close: %v, want ErrBadFD", i, err)
		}
	}
	if want := []string{"Close"}; !slices.Equal(r.calls, want) {
		t.Fatalf("driver calls %v, want %v", r.calls, want)
	}
}

func TestListenWantsAnEQAndListensOnce(t *testing.T) {
	r := &pepRecorder{}
	p := &PassiveEndpoint{drv: r}
	if err := p.Listen(); !errors.Is(err, ErrNoEQ) {
		t.Fatalf("fi_listen before fi_pep_bind: %v, want ErrNoEQ", err)
	}
	if err := p.Bind(&EQ{}); err != nil {
		t.Fatal(err)
	}
	if err := p.Listen(); err != nil {
		t.Fatal(err)
	}
	if err := p.Listen(); !errors.Is(err, ErrAlready) {
		t.Fatalf("second fi_listen: %v, want ErrAlready", err)
	}
	if want := []string{"Bind", "Listen"}; !slices.Equal(r.calls, want) {
		t.Fatalf("driver calls %v, want %v", r.calls, want)
	}
}
