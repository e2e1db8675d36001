package verbs_test

import (
	"errors"
	"os"
	"testing"

	"github.com/rdmago/rdmago/verbs"
)

// xrcDevice is a provider whose contexts have XRC domains: fake drivers
// that record what the verbs layer hands them, to pin down the checks and
// the reference counting the verbs layer does for every provider.
type xrcDevice struct{ ctx *xrcContext }

func (d xrcDevice) Open(ev verbs.EventSink) (verbs.ContextDriver, error) {
	d.ctx.events = ev
	return d.ctx, nil
}

type xrcContext struct {
	cqContext
	events  verbs.EventSink
	nextNum uint32
	// lastQP is the attributes the last PDDriver.CreateQP was given.
	lastQP verbs.QPInitAttr
}

func (c *xrcContext) AllocPD() (verbs.PDDriver, error) { return &xrcPD{c: c}, nil }

func (c *xrcContext) OpenXRCD(*verbs.XRCDInitAttr) (verbs.XRCDDriver, error) {
	return &xrcDomain{c: c, qps: map[uint32]int{}}, nil
}

type xrcPD struct{ c *xrcContext }

func (p *xrcPD) RegMR([]byte, verbs.AccessFlags) (verbs.MRDriver, error) {
	return nil, verbs.ErrNotSupported
}
func (p *xrcPD) CreateAH(*verbs.AHAttr) (verbs.AHDriver, error) { return nil, verbs.ErrNotSupported }
func (p *xrcPD) AllocMW(verbs.MWType) (verbs.MWDriver, error)   { return nil, verbs.ErrNotSupported }
func (p *xrcPD) Dealloc() error                                 { return nil }
func (p *xrcPD) CreateSRQ(*verbs.SRQInitAttr) (verbs.SRQDriver, error) {
	return &xrcSRQ{}, nil
}
func (p *xrcPD) CreateQP(attr *verbs.QPInitAttr) (verbs.QPDriver, error) {
	p.c.lastQP = *attr
	p.c.nextNum++
	return &xrcQP{num: p.c.nextNum}, nil
}

type xrcDomain struct {
	c   *xrcContext
	qps map[uint32]int // handles per XRC_RECV QP
}

func (d *xrcDomain) CreateSRQ(attr *verbs.SRQInitAttrEx) (verbs.XRCSRQDriver, error) {
	d.c.nextNum++
	return &xrcSRQ{num: d.c.nextNum}, nil
}

func (d *xrcDomain) CreateQP(*verbs.QPInitAttr) (verbs.QPDriver, error) {
	d.c.nextNum++
	d.qps[d.c.nextNum]++
	return &xrcQP{num: d.c.nextNum, d: d}, nil
}

func (d *xrcDomain) OpenQP(num uint32) (verbs.QPDriver, error) {
	if d.qps[num] == 0 {
		return nil, verbs.Errorf("ibv_open_qp", verbs.ErrNoEntry, "no such QP")
	}
	d.qps[num]++
	return &xrcQP{num: num, d: d}, nil
}

func (d *xrcDomain) Close() error { return nil }

type xrcSRQ struct{ num uint32 }

func (s *xrcSRQ) Modify(*verbs.SRQAttr, verbs.SRQAttrMask) error { return nil }
func (s *xrcSRQ) Query() (verbs.SRQAttr, error)                  { return verbs.SRQAttr{}, nil }
func (s *xrcSRQ) PostRecv([]verbs.RecvWR) error                  { return nil }
func (s *xrcSRQ) Destroy() error                                 { return nil }
func (s *xrcSRQ) Num() uint32                                    { return s.num }

type xrcQP struct {
	num uint32
	d   *xrcDomain // XRC_RECV handles
}

func (q *xrcQP) Num() uint32                                  { return q.num }
func (q *xrcQP) Modify(*verbs.QPAttr, verbs.QPAttrMask) error { return nil }
func (q *xrcQP) PostSend([]verbs.SendWR) error                { return nil }
func (q *xrcQP) PostRecv([]verbs.RecvWR) error                { return nil }
func (q *xrcQP) AttachMcast(verbs.GID) error                  { return nil }
func (q *xrcQP) DetachMcast(verbs.GID) error                  { return nil }
func (q *xrcQP) Query() (verbs.QPAttr, verbs.QPInitAttr, error) {
	return verbs.QPAttr{}, verbs.QPInitAttr{}, nil
}
func (q *xrcQP) Destroy() error {
	if q.d != nil {
		q.d.qps[q.num]--
	}
	return nil
}

// xrcRig opens a context of the fake XRC device with a PD and a CQ.
type xrcRig struct {
	drv *xrcContext
	ctx *verbs.Context
	pd  *verbs.PD
	cq  *verbs.CQ
}

func newXRCRig(t *testing.T) *xrcRig {
	t.Helper()
	r := &xrcRig{drv: &xrcContext{}}
	var err error
	if r.ctx, err = verbs.NewDevice("xrc_test", 1, xrcDevice{r.drv}).Open(); err != nil {
		t.Fatal(err)
	}
	if r.pd, err = r.ctx.AllocPD(); err != nil {
		t.Fatal(err)
	}
	if r.cq, err = r.ctx.CreateCQ(16, nil, 0); err != nil {
		t.Fatal(err)
	}
	return r
}

func TestOpenXRCDChecksItsAttributes(t *testing.T) {
	both := verbs.XRCDInitAttrFD | verbs.XRCDInitAttrOFlags
	tests := []struct {
		name string
		attr *verbs.XRCDInitAttr
		want error // nil: opens
	}{
		{"nil: a domain of its own", nil, nil},
		{"fd -1 with O_CREAT", &verbs.XRCDInitAttr{CompMask: both, FD: -1, OFlags: os.O_CREATE}, nil},
		{"a file with O_CREAT|O_EXCL", &verbs.XRCDInitAttr{CompMask: both, FD: 3, OFlags: os.O_CREATE | os.O_EXCL}, nil},
		{"fd -1 without O_CREAT", &verbs.XRCDInitAttr{CompMask: both, FD: -1}, verbs.ErrInvalidArgument},
		{"comp_mask without OFLAGS", &verbs.XRCDInitAttr{CompMask: verbs.XRCDInitAttrFD, FD: -1, OFlags: os.O_CREATE}, verbs.ErrInvalidArgument},
		{"comp_mask with unknown bits", &verbs.XRCDInitAttr{CompMask: both | 4, FD: -1, OFlags: os.O_CREATE}, verbs.ErrNotSupported},
		{"oflags with O_RDWR", &verbs.XRCDInitAttr{CompMask: both, FD: -1, OFlags: os.O_CREATE | os.O_RDWR}, verbs.ErrInvalidArgument},
		{"fd -2", &verbs.XRCDInitAttr{CompMask: both, FD: -2, OFlags: os.O_CREATE}, verbs.ErrInvalidArgument},
	}
	r := newXRCRig(t)
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			x, err := r.ctx.OpenXRCD(tt.attr)
			if !errors.Is(err, tt.want) || err != nil && tt.want == nil {
				t.Fatalf("OpenXRCD: %v, want %v", err, tt.want)
			}
			if x != nil {
				if x.Context() != r.ctx {
					t.Error("the domain names another context")
				}
				if err := x.Close(); err != nil {
					t.Error(err)
				}
			}
		})
	}
}

func TestProviderWithoutXRCRefusesEveryXRCCall(t *testing.T) {
	// pdOnlyDevice has PDs and CQs but no XRC domains: nothing XRC may
	// reach its drivers.
	ctx, err := verbs.NewDevice("no_xrc", 1, pdOnlyDevice{}).Open()
	if err != nil {
		t.Fatal(err)
	}
	if _, err := ctx.OpenXRCD(nil); !errors.Is(err, verbs.ErrNotSupported) {
		t.Errorf("OpenXRCD: %v, want ErrNotSupported", err)
	}
	pd, err := ctx.AllocPD()
	if err != nil {
		t.Fatal(err)
	}
	cq, err := ctx.CreateCQ(4, nil, 0)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := pd.CreateQP(&verbs.QPInitAttr{QPType: verbs.QPTXRCSend, SendCQ: cq}); !errors.Is(err, verbs.ErrNotSupported) {
		t.Errorf("XRC_SEND QP: %v, want ErrNotSupported", err)
	}
}

// pdOnlyDevice has PDs (the XRC fake's) but no XRC domains.
type pdOnlyDevice struct{}

func (pdOnlyDevice) Open(verbs.EventSink) (verbs.ContextDriver, error) {
	return pdOnlyContext{}, nil
}

type pdOnlyContext struct{ cqContext }

func (pdOnlyContext) AllocPD() (verbs.PDDriver, error) { return &xrcPD{c: &xrcContext{}}, nil }

func TestXRCSendQPHasNoReceiveSide(t *testing.T) {
	r := newXRCRig(t)
	other, err := r.ctx.CreateCQ(4, nil, 0)
	if err != nil {
		t.Fatal(err)
	}
	srq, err := r.pd.CreateSRQ(&verbs.SRQInitAttr{Attr: verbs.SRQAttr{MaxWR: 4}})
	if err != nil {
		t.Fatal(err)
	}
	qp, err := r.pd.CreateQP(&verbs.QPInitAttr{QPType: verbs.QPTXRCSend, SendCQ: r.cq, RecvCQ: other, SRQ: srq,
		Cap: verbs.QPCap{MaxSendWR: 4, MaxSendSGE: 1}})
	if err != nil {
		t.Fatal(err)
	}
	if r.drv.lastQP.RecvCQ != nil || r.drv.lastQP.SRQ != nil {
		t.Errorf("the provider was given a receive CQ %v / SRQ %v for an XRC_SEND QP", r.drv.lastQP.RecvCQ, r.drv.lastQP.SRQ)
	}
	if qp.RecvCQ() != nil || qp.SRQ() != nil || qp.SendCQ() != r.cq || qp.PD() != r.pd {
		t.Error("the QP reports a receive side, or not its send CQ and PD")
	}
	// The receive CQ and SRQ given were ignored, so nothing holds them.
	if err := other.Destroy(); err != nil {
		t.Errorf("the ignored receive CQ: %v", err)
	}
	if err := srq.Destroy(); err != nil {
		t.Errorf("the ignored SRQ: %v", err)
	}
	err = qp.PostRecv([]verbs.RecvWR{{WRID: 5}})
	var we *verbs.WRError
	if !errors.As(err, &we) || we.WRID != 5 || !errors.Is(err, verbs.ErrInvalidArgument) {
		t.Errorf("PostRecv on XRC_SEND: %v", err)
	}
	if err := r.cq.Destroy(); !errors.Is(err, verbs.ErrBusy) {
		t.Errorf("destroying the send CQ of a live QP: %v, want ErrBusy", err)
	}
	if err := qp.Destroy(); err != nil {
		t.Fatal(err)
	}
	if err := r.cq.Destroy(); err != nil {
		t.Error(err)
	}
	if err := r.pd.Dealloc(); err != nil {
		t.Error(err)
	}
}

func TestXRCRecvQPComesFromADomainNotAPD(t *testing.T) {
	r := newXRCRig(t)
	if _, err := r.pd.CreateQP(&verbs.QPInitAttr{QPType: verbs.QPTXRCRecv, SendCQ: r.cq, RecvCQ: r.cq}); !errors.Is(err, verbs.ErrInvalidArgument) {
		t.Errorf("XRC_RECV from a PD: %v, want ErrInvalidArgument", err)
	}
	x, err := r.ctx.OpenXRCD(nil)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := x.CreateQP(&verbs.QPInitAttr{QPType: verbs.QPTRC}); !errors.Is(err, verbs.ErrInvalidArgument) {
		t.Errorf("RC QP from an XRC domain: %v, want ErrInvalidArgument", err)
	}
	qp, err := x.CreateQP(&verbs.QPInitAttr{QPType: verbs.QPTXRCRecv, QPContext: "target", Cap: verbs.QPCap{MaxSendWR: 9}})
	if err != nil {
		t.Fatal(err)
	}
	if qp.PD() != nil || qp.SendCQ() != nil || qp.RecvCQ() != nil || qp.XRCD() != x || qp.Type() != verbs.QPTXRCRecv || qp.QPContext() != "target" {
		t.Errorf("XRC_RECV QP: pd %v cqs %v %v xrcd %v type %s context %v", qp.PD(), qp.SendCQ(), qp.RecvCQ(), qp.XRCD(), qp.Type(), qp.QPContext())
	}
	for _, err := range []error{
		qp.PostSend([]verbs.SendWR{{WRID: 1}}),
		qp.PostRecv([]verbs.RecvWR{{WRID: 1}}),
	} {
		if !errors.Is(err, verbs.ErrInvalidArgument) {
			t.Errorf("posting to an XRC_RECV QP: %v, want ErrInvalidArgument", err)
		}
	}
	if err := x.Close(); !errors.Is(err, verbs.ErrBusy) {
		t.Errorf("closing a domain with a QP: %v, want ErrBusy", err)
	}
	if err := qp.Destroy(); err != nil {
		t.Fatal(err)
	}
	if err := x.Close(); err != nil {
		t.Fatal(err)
	}
	if _, err := x.CreateQP(&verbs.QPInitAttr{QPType: verbs.QPTXRCRecv}); !errors.Is(err, verbs.ErrClosed) {
		t.Errorf("QP from a closed domain: %v, want ErrClosed", err)
	}
}

func TestOpenQPSharesTheQPUntilTheLastHandle(t *testing.T) {
	r := newXRCRig(t)
	x, err := r.ctx.OpenXRCD(nil)
	if err != nil {
		t.Fatal(err)
	}
	first, err := x.CreateQP(&verbs.QPInitAttr{QPType: verbs.QPTXRCRecv})
	if err != nil {
		t.Fatal(err)
	}
	all := verbs.QPOpenAttrNum | verbs.QPOpenAttrXRCD | verbs.QPOpenAttrType
	bad := []struct {
		name string
		attr verbs.QPOpenAttr
		want error
	}{
		{"no type bit", verbs.QPOpenAttr{CompMask: verbs.QPOpenAttrNum | verbs.QPOpenAttrXRCD, QPNum: first.Num(), XRCD: x, QPType: verbs.QPTXRCRecv}, verbs.ErrInvalidArgument},
		{"an RC QP", verbs.QPOpenAttr{CompMask: all, QPNum: first.Num(), XRCD: x, QPType: verbs.QPTRC}, verbs.ErrInvalidArgument},
		{"no domain", verbs.QPOpenAttr{CompMask: all, QPNum: first.Num(), QPType: verbs.QPTXRCRecv}, verbs.ErrInvalidArgument},
		{"no such QP", verbs.QPOpenAttr{CompMask: all, QPNum: first.Num() + 100, XRCD: x, QPType: verbs.QPTXRCRecv}, verbs.ErrNoEntry},
	}
	for _, b := range bad {
		if _, err := r.ctx.OpenQP(&b.attr); !errors.Is(err, b.want) {
			t.Errorf("%s: %v, want %v", b.name, err, b.want)
		}
	}
	second, err := r.ctx.OpenQP(&verbs.QPOpenAttr{CompMask: all | verbs.QPOpenAttrContext, QPNum: first.Num(), XRCD: x, QPType: verbs.QPTXRCRecv, QPContext: 2})
	if err != nil {
		t.Fatal(err)
	}
	if second == first || second.Num() != first.Num() || second.QPContext() != 2 {
		t.Fatalf("opened handle %p num %#x context %v", second, second.Num(), second.QPContext())
	}
	// Events name a live handle: the first, then the second once the
	// first is gone.
	event := func() *verbs.QP {
		r.drv.events.Event(verbs.EventQPFatal, first.Num(), 0)
		ev := <-r.ctx.AsyncEvents()
		return ev.QP
	}
	if got := event(); got != first {
		t.Errorf("event names %p, want the first handle %p", got, first)
	}
	if err := first.Destroy(); err != nil {
		t.Fatal(err)
	}
	if got := event(); got != second {
		t.Errorf("event names %p, want the remaining handle %p", got, second)
	}
	if err := x.Close(); !errors.Is(err, verbs.ErrBusy) {
		t.Errorf("closing the domain with a handle left: %v, want ErrBusy", err)
	}
	if err := second.Destroy(); err != nil {
		t.Fatal(err)
	}
	if got := event(); got != nil {
		t.Errorf("event after the last handle names %p", got)
	}
	if err := x.Close(); err != nil {
		t.Fatal(err)
	}
}

func TestCreateSRQExMakesXRCSRQsWithNumbers(t *testing.T) {
	r := newXRCRig(t)
	x, err := r.ctx.OpenXRCD(nil)
	if err != nil {
		t.Fatal(err)
	}
	xrcMask := verbs.SRQInitAttrType | verbs.SRQInitAttrPD | verbs.SRQInitAttrXRCD | verbs.SRQInitAttrCQ
	attr := verbs.SRQAttr{MaxWR: 8, MaxSGE: 1}
	bad := []struct {
		name string
		attr verbs.SRQInitAttrEx
		want error
	}{
		{"no PD", verbs.SRQInitAttrEx{Attr: attr, CompMask: xrcMask &^ verbs.SRQInitAttrPD, SRQType: verbs.SRQTXRC, XRCD: x, CQ: r.cq}, verbs.ErrInvalidArgument},
		{"XRC without a CQ", verbs.SRQInitAttrEx{Attr: attr, CompMask: xrcMask &^ verbs.SRQInitAttrCQ, SRQType: verbs.SRQTXRC, PD: r.pd, XRCD: x}, verbs.ErrInvalidArgument},
		{"XRC without a domain", verbs.SRQInitAttrEx{Attr: attr, CompMask: xrcMask, SRQType: verbs.SRQTXRC, PD: r.pd, CQ: r.cq}, verbs.ErrInvalidArgument},
		{"XRC with max_wr 0", verbs.SRQInitAttrEx{CompMask: xrcMask, SRQType: verbs.SRQTXRC, PD: r.pd, XRCD: x, CQ: r.cq}, verbs.ErrInvalidArgument},
		{"basic with a CQ", verbs.SRQInitAttrEx{Attr: attr, CompMask: verbs.SRQInitAttrPD | verbs.SRQInitAttrCQ, PD: r.pd, CQ: r.cq}, verbs.ErrInvalidArgument},
		{"tag matching", verbs.SRQInitAttrEx{Attr: attr, CompMask: verbs.SRQInitAttrType | verbs.SRQInitAttrPD, SRQType: verbs.SRQTTM, PD: r.pd}, verbs.ErrNotSupported},
		{"type 7", verbs.SRQInitAttrEx{Attr: attr, CompMask: verbs.SRQInitAttrType | verbs.SRQInitAttrPD, SRQType: 7, PD: r.pd}, verbs.ErrInvalidArgument},
	}
	for _, b := range bad {
		if _, err := r.ctx.CreateSRQEx(&b.attr); !errors.Is(err, b.want) {
			t.Errorf("%s: %v, want %v", b.name, err, b.want)
		}
	}
	basic, err := r.ctx.CreateSRQEx(&verbs.SRQInitAttrEx{Attr: attr, CompMask: verbs.SRQInitAttrPD, PD: r.pd})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := basic.Num(); !errors.Is(err, verbs.ErrInvalidArgument) {
		t.Errorf("Num of a basic SRQ: %v, want ErrInvalidArgument", err)
	}
	xs, err := r.ctx.CreateSRQEx(&verbs.SRQInitAttrEx{Attr: attr, CompMask: xrcMask, SRQType: verbs.SRQTXRC, PD: r.pd, XRCD: x, CQ: r.cq, SRQContext: "x"})
	if err != nil {
		t.Fatal(err)
	}
	n, err := xs.Num()
	if err != nil || n != verbs.SRQDriverOf(xs).(*xrcSRQ).num {
		t.Errorf("Num: %#x %v, want the provider's %#x", n, err, verbs.SRQDriverOf(xs).(*xrcSRQ).num)
	}
	if xs.Type() != verbs.SRQTXRC || xs.XRCD() != x || xs.CQ() != r.cq || xs.PD() != r.pd || xs.SRQContext() != "x" {
		t.Error("the XRC SRQ does not report what it was made with")
	}
	// An XRC SRQ is not a QP's SRQ.
	if _, err := r.pd.CreateQP(&verbs.QPInitAttr{QPType: verbs.QPTRC, SendCQ: r.cq, RecvCQ: r.cq, SRQ: xs}); !errors.Is(err, verbs.ErrInvalidArgument) {
		t.Errorf("RC QP on an XRC SRQ: %v, want ErrInvalidArgument", err)
	}
	// The SRQ holds its domain, CQ and PD.
	for name, f := range map[string]func() error{"domain": x.Close, "CQ": r.cq.Destroy, "PD": r.pd.Dealloc} {
		if err := f(); !errors.Is(err, verbs.ErrBusy) {
			t.Errorf("releasing the %s of a live XRC SRQ: %v, want ErrBusy", name, err)
		}
	}
	if err := xs.Destroy(); err != nil {
		t.Fatal(err)
	}
	if _, err := xs.Num(); !errors.Is(err, verbs.ErrClosed) {
		t.Errorf("Num of a destroyed SRQ: %v, want ErrClosed", err)
	}
	for _, f := range []func() error{x.Close, r.cq.Destroy, basic.Destroy, r.pd.Dealloc} {
		if err := f(); err != nil {
			t.Error(err)
		}
	}
}

var (
	_ verbs.XRCDriver    = (*xrcContext)(nil)
	_ verbs.XRCSRQDriver = (*xrcSRQ)(nil)
)

// sharedXRCContext is xrcContext whose opens of a domain are all the same
// domain, as opens through one file are: a QP made through one open can be
// opened through another.
type sharedXRCContext struct {
	xrcContext
	domain *xrcDomain
}

func (c *sharedXRCContext) OpenXRCD(*verbs.XRCDInitAttr) (verbs.XRCDDriver, error) {
	if c.domain == nil {
		c.domain = &xrcDomain{c: &c.xrcContext, qps: map[uint32]int{}}
	}
	return c.domain, nil
}

type sharedXRCDevice struct{ ctx *sharedXRCContext }

func (d sharedXRCDevice) Open(ev verbs.EventSink) (verbs.ContextDriver, error) {
	d.ctx.events = ev
	return d.ctx, nil
}

// TestQPEventsNameAHandleOfAnyOpenOfTheDomain: a context that holds
// handles on one XRC_RECV QP through two opens of its domain keeps getting
// the QP's events, naming the handle left, when the other is destroyed.
func TestQPEventsNameAHandleOfAnyOpenOfTheDomain(t *testing.T) {
	drv := &sharedXRCContext{}
	ctx, err := verbs.NewDevice("xrc_shared", 1, sharedXRCDevice{drv}).Open()
	if err != nil {
		t.Fatal(err)
	}
	var x [2]*verbs.XRCD
	for i := range x {
		if x[i], err = ctx.OpenXRCD(nil); err != nil {
			t.Fatal(err)
		}
	}
	created, err := x[0].CreateQP(&verbs.QPInitAttr{QPType: verbs.QPTXRCRecv})
	if err != nil {
		t.Fatal(err)
	}
	opened, err := ctx.OpenQP(&verbs.QPOpenAttr{CompMask: verbs.QPOpenAttrNum | verbs.QPOpenAttrXRCD | verbs.QPOpenAttrType,
		QPNum: created.Num(), XRCD: x[1], QPType: verbs.QPTXRCRecv})
	if err != nil {
		t.Fatal(err)
	}
	if err := created.Destroy(); err != nil {
		t.Fatal(err)
	}
	drv.events.Event(verbs.EventQPFatal, opened.Num(), 0)
	if ev := <-ctx.AsyncEvents(); ev.QP != opened {
		t.Fatalf("the event names %p, want the handle opened through the other open %p", ev.QP, opened)
	}
	if err := opened.Destroy(); err != nil {
		t.Fatal(err)
	}
	for i := range x {
		if err := x[i].Close(); err != nil {
			t.Fatal(err)
		}
	}
}
