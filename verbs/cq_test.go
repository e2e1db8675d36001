package verbs

import (
	"context"
	"errors"
	"testing"
	"time"
)

// newTestCQ makes a CQ without a provider: the CQ is the verbs layer's own.
func newTestCQ(cqe int, ch *CompChannel) *CQ {
	return &CQ{ring: make([]WC, cqe), channel: ch, nonEmpty: make(chan struct{}, 1)}
}

func TestCQPollsInOrderAndOverflows(t *testing.T) {
	cq := newTestCQ(3, nil)
	for i := 0; i < 3; i++ {
		if !cq.Push(&WC{WRID: uint64(i)}, false) {
			t.Fatalf("push %d refused", i)
		}
	}
	wc := make([]WC, 2)
	if n, err := cq.Poll(wc); n != 2 || err != nil || wc[0].WRID != 0 || wc[1].WRID != 1 {
		t.Fatalf("poll: %d %v %+v", n, err, wc)
	}
	cq.Push(&WC{WRID: 3}, false)
	cq.Push(&WC{WRID: 4}, false)
	if cq.Push(&WC{WRID: 5}, false) {
		t.Fatal("push into a full CQ accepted")
	}
	if n, _ := cq.Poll(make([]WC, 8)); n != 3 {
		t.Fatalf("polled %d, want the 3 queued", n)
	}
	if _, err := cq.Poll(wc); !errors.Is(err, ErrIO) {
		t.Fatalf("poll after overrun: %v, want EIO", err)
	}
}

func TestCQNotifiesOncePerArm(t *testing.T) {
	ch := &CompChannel{c: make(chan *CQ, 8)}
	cq := newTestCQ(16, ch)
	cq.Push(&WC{}, false) // not armed: no event
	if err := cq.ReqNotify(false); err != nil {
		t.Fatal(err)
	}
	cq.Push(&WC{}, false)
	cq.Push(&WC{}, false) // second completion, same arm: no second event
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
	cq.Push(&WC{}, false)
	select {
	case <-ch.C():
		t.Fatal("event for an unsolicited completion")
	default:
	}
	cq.Push(&WC{}, true)
	if _, err := ch.GetCQEvent(ctx); err != nil {
		t.Fatal(err)
	}
	cq.ReqNotify(true)
	cq.Push(&WC{Status: WCRemAccessErr}, false) // errors always wake
	if _, err := ch.GetCQEvent(ctx); err != nil {
		t.Fatal(err)
	}
	if err := cq.Destroy(); !errors.Is(err, ErrBusy) {
		t.Fatalf("destroy with unacknowledged events: %v, want EBUSY", err)
	}
	cq.AckEvents(3)
	if err := cq.Destroy(); err != nil {
		t.Fatal(err)
	}
}

func TestCQWaitReturnsWhenACompletionArrives(t *testing.T) {
	cq := newTestCQ(4, nil)
	go func() {
		time.Sleep(10 * time.Millisecond)
		cq.Push(&WC{WRID: 9}, false)
	}()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := cq.Wait(ctx); err != nil {
		t.Fatal(err)
	}
	short, cancel2 := context.WithTimeout(context.Background(), 10*time.Millisecond)
	defer cancel2()
	cq.Poll(make([]WC, 4))
	if err := cq.Wait(short); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Wait on an empty CQ: %v", err)
	}
}
