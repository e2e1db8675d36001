package verbs_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/rdmago/rdmago/verbs"
	"github.com/rdmago/rdmago/verbs/swcq"
)

// cqDevice is a provider with CQs and nothing else: software CQs from
// package swcq, the helper software providers use.
type cqDevice struct{}

func (cqDevice) Open(verbs.EventSink) (verbs.ContextDriver, error) { return cqContext{}, nil }

type cqContext struct{}

func (cqContext) QueryDevice() (verbs.DeviceAttr, error)  { return verbs.DeviceAttr{MaxCQE: 1024}, nil }
func (cqContext) QueryPort(uint8) (verbs.PortAttr, error) { return verbs.PortAttr{}, nil }
func (cqContext) QueryGID(uint8, int) (verbs.GID, error)  { return verbs.GID{}, nil }
func (cqContext) QueryPKey(uint8, int) (uint16, error)    { return 0xffff, nil }
func (cqContext) AllocPD() (verbs.PDDriver, error)        { return nil, verbs.ErrNotSupported }
func (cqContext) Close() error                            { return nil }
func (cqContext) CreateCQ(cqe int, notify func()) (verbs.CQDriver, error) {
	return swcq.New(cqe, notify), nil
}

// newTestCQ makes a CQ of cqe entries, with a completion channel if
// withChannel, and returns what the provider pushes completions into.
func newTestCQ(t *testing.T, cqe int, withChannel bool) (*verbs.CQ, *swcq.CQ, *verbs.CompChannel) {
	t.Helper()
	ctx, err := verbs.NewDevice("cq_test", 1, cqDevice{}).Open()
	if err != nil {
		t.Fatal(err)
	}
	var ch *verbs.CompChannel
	if withChannel {
		if ch, err = ctx.CreateCompChannel(); err != nil {
			t.Fatal(err)
		}
	}
	cq, err := ctx.CreateCQ(cqe, ch, 0)
	if err != nil {
		t.Fatal(err)
	}
	return cq, verbs.CQDriverOf(cq).(*swcq.CQ), ch
}

func TestCQPollsInOrderAndOverflows(t *testing.T) {
	cq, p, _ := newTestCQ(t, 3, false)
	for i := 0; i < 3; i++ {
		if !p.Push(&verbs.WC{WRID: uint64(i)}, false) {
			t.Fatalf("push %d refused", i)
		}
	}
	wc := make([]verbs.WC, 2)
	if n, err := cq.Poll(wc); n != 2 || err != nil || wc[0].WRID != 0 || wc[1].WRID != 1 {
		t.Fatalf("poll: %d %v %+v", n, err, wc)
	}
	p.Push(&verbs.WC{WRID: 3}, false)
	p.Push(&verbs.WC{WRID: 4}, false)
	if p.Push(&verbs.WC{WRID: 5}, false) {
		t.Fatal("push into a full CQ accepted")
	}
	if n, _ := cq.Poll(make([]verbs.WC, 8)); n != 3 {
		t.Fatalf("polled %d, want the 3 queued", n)
	}
	if _, err := cq.Poll(wc); !errors.Is(err, verbs.ErrIO) {
		t.Fatalf("poll after overrun: %v, want EIO", err)
	}
}

func TestCQNotifiesOncePerArm(t *testing.T) {
	cq, p, ch := newTestCQ(t, 16, true)
	p.Push(&verbs.WC{}, false) // not armed: no event
	if err := cq.ReqNotify(false); err != nil {
		t.Fatal(err)
	}
	p.Push(&verbs.WC{}, false)
	p.Push(&verbs.WC{}, false) // second completion, same arm: no second event
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	got, err := ch.GetCQEvent(ctx)
	if err != nil || got != cq {
		t.Fatalf("GetCQEvent: %v %v", got, err)
	}
	select {
	case <-ch.C():
		t.Fatal("two events for one arm")
	default:
	}
	// Solicited-only arming ignores unsolicited successes.
	cq.ReqNotify(true)
	p.Push(&verbs.WC{}, false)
	select {
	case <-ch.C():
		t.Fatal("event for an unsolicited completion")
	default:
	}
	p.Push(&verbs.WC{}, true)
	if _, err := ch.GetCQEvent(ctx); err != nil {
		t.Fatal(err)
	}
	cq.ReqNotify(true)
	p.Push(&verbs.WC{Status: verbs.WCRemAccessErr}, false) // errors always wake
	if _, err := ch.GetCQEvent(ctx); err != nil {
		t.Fatal(err)
	}
	if err := cq.Destroy(); !errors.Is(err, verbs.ErrBusy) {
		t.Fatalf("destroy with unacknowledged events: %v, want EBUSY", err)
	}
	cq.AckEvents(3)
	if err := cq.Destroy(); err != nil {
		t.Fatal(err)
	}
	if _, err := cq.Poll(make([]verbs.WC, 1)); !errors.Is(err, verbs.ErrClosed) {
		t.Fatalf("poll after destroy: %v", err)
	}
}

func TestCQWaitReturnsWhenACompletionArrives(t *testing.T) {
	cq, p, _ := newTestCQ(t, 4, false)
	go func() {
		time.Sleep(10 * time.Millisecond)
		p.Push(&verbs.WC{WRID: 9}, false)
	}()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := cq.Wait(ctx); err != nil {
		t.Fatal(err)
	}
	short, cancel2 := context.WithTimeout(context.Background(), 10*time.Millisecond)
	defer cancel2()
	cq.Poll(make([]verbs.WC, 4))
	if err := cq.Wait(short); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Wait on an empty CQ: %v", err)
	}
}

func TestCQResizeKeepsWhatIsQueued(t *testing.T) {
	cq, p, _ := newTestCQ(t, 2, false)
	p.Push(&verbs.WC{WRID: 1}, false)
	p.Push(&verbs.WC{WRID: 2}, false)
	if err := cq.Resize(1); !errors.Is(err, verbs.ErrInvalidArgument) {
		t.Errorf("resize below the queued: %v", err)
	}
	if err := cq.Resize(4096); !errors.Is(err, verbs.ErrInvalidArgument) {
		t.Errorf("resize above max_cqe: %v", err)
	}
	if err := cq.Resize(8); err != nil || cq.Cap() != 8 || cq.Len() != 2 {
		t.Fatalf("resize: %v, cap %d len %d", err, cq.Cap(), cq.Len())
	}
	wc := make([]verbs.WC, 4)
	if n, _ := cq.Poll(wc); n != 2 || wc[0].WRID != 1 || wc[1].WRID != 2 {
		t.Errorf("after resize: %d %+v", n, wc[:n])
	}
}
