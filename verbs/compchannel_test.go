package verbs_test

import (
	"context"
	"testing"
	"time"

	"github.com/rdmago/rdmago/verbs"
	"github.com/rdmago/rdmago/verbs/swcq"
)

// One completion channel, 300 CQs (more than its queue's room), each armed
// once and taking one completion before the program reads the channel, as
// ibv_get_cq_event allows: the kernel's queue is unbounded. Every CQ is
// reported, in the order the CQs fired; a dropped event would leave its CQ
// silent for ever, since a program re-arms a CQ only after its event.
func TestCompChannelReportsEveryArmedCQ(t *testing.T) {
	const ncq = 300
	ctx, err := verbs.NewDevice("cq_chan", 1, cqDevice{}).Open()
	if err != nil {
		t.Fatal(err)
	}
	ch, err := ctx.CreateCompChannel()
	if err != nil {
		t.Fatal(err)
	}
	var cqs []*verbs.CQ
	for i := 0; i < ncq; i++ {
		cq, err := ctx.CreateCQ(4, ch, 0)
		if err != nil {
			t.Fatal(err)
		}
		if err := cq.ReqNotify(false); err != nil {
			t.Fatal(err)
		}
		verbs.CQDriverOf(cq).(*swcq.CQ).Push(&verbs.WC{WRID: uint64(i)}, false)
		cqs = append(cqs, cq)
	}
	got := 0
	for {
		c, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
		cq, err := ch.GetCQEvent(c)
		cancel()
		if err != nil {
			break
		}
		cq.AckEvents(1)
		if got < ncq && cq != cqs[got] {
			t.Fatalf("event %d is another CQ's: the channel's queue and its overflow reorder events", got)
		}
		got++
	}
	if got != ncq {
		t.Fatalf("%d events for %d armed CQs that completed: %d CQs never reported", got, ncq, ncq-got)
	}
	for _, cq := range cqs {
		if err := cq.Destroy(); err != nil {
			t.Fatal(err)
		}
	}
	if err := ch.Close(); err != nil {
		t.Fatal(err)
	}
	if err := ctx.Close(); err != nil {
		t.Fatal(err)
	}
}
