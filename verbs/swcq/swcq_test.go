package swcq

import (
	"testing"

	"github.com/rdmago/rdmago/verbs"
)

// An armed CQ calls notify once per arming, outside its lock.
func TestNotifyOncePerArm(t *testing.T) {
	var cq *CQ
	calls := 0
	cq = New(4, func() {
		calls++
		cq.Len() // would deadlock if called under the CQ's lock
	})
	cq.Push(&verbs.WC{}, false)
	cq.ReqNotify(false)
	cq.Push(&verbs.WC{}, false)
	cq.Push(&verbs.WC{}, false)
	if calls != 1 {
		t.Errorf("notify called %d times, want 1", calls)
	}
}

// An overrun is told once, however many completions are refused after it.
func TestOverrunIsToldOnce(t *testing.T) {
	cq := New(1, nil)
	if cq.FirstOverrun() {
		t.Fatal("an empty CQ says it overran")
	}
	wc := verbs.WC{WRID: 1}
	if !cq.Push(&wc, false) || cq.Push(&wc, false) || cq.Push(&wc, false) {
		t.Fatal("a CQ of one took more than one completion")
	}
	if !cq.FirstOverrun() || cq.FirstOverrun() {
		t.Error("the overrun was not told exactly once")
	}
}
