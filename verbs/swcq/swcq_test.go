package swcq

import (
	"errors"
	"testing"
	"time"

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

// A stamped CQ hands out each completion with the time it was pushed:
// in push order, within the wall-clock window of the pushes, and across a
// resize.
func TestStampedCQStampsCompletionsInOrder(t *testing.T) {
	cq := NewStamped(8, nil)
	rawBefore, _ := Clock()
	before := time.Now()
	for i := range 6 {
		cq.Push(&verbs.WC{WRID: uint64(i)}, false)
	}
	after := time.Now()
	rawAfter, _ := Clock()
	var cur verbs.WCEx
	if err := cq.StartPoll(&cur); err != nil {
		t.Fatal(err)
	}
	if err := cq.Resize(16); err != nil {
		t.Fatal(err)
	}
	prev := uint64(0)
	for i := 0; ; i++ {
		if cur.WRID != uint64(i) {
			t.Fatalf("completion %d has wr_id %d", i, cur.WRID)
		}
		if cur.CompletionTS < max(prev, rawBefore) || cur.CompletionTS > rawAfter {
			t.Errorf("completion %d stamped %d: not in [%d, %d] after %d", i, cur.CompletionTS, rawBefore, rawAfter, prev)
		}
		if w := time.Unix(0, int64(cur.CompletionWallclockNS)); w.Before(before.Truncate(0)) || w.After(after.Truncate(0)) {
			t.Errorf("completion %d: wall clock %s outside [%s, %s]", i, w, before, after)
		}
		prev = cur.CompletionTS
		if err := cq.NextPoll(&cur); err != nil {
			if err != verbs.ErrNoEntry || i != 5 {
				t.Fatalf("after completion %d: %v, want ErrNoEntry after 6", i, err)
			}
			break
		}
	}
	cq.EndPoll()
}

// An ordinary CQ reads no clock: its completions carry no time, and a
// stale time in the caller's WCEx is cleared.
func TestUnstampedCQHandsOutNoTime(t *testing.T) {
	cq := New(2, nil)
	cq.Push(&verbs.WC{WRID: 1}, false)
	cur := verbs.WCEx{CompletionTS: 5, CompletionWallclockNS: 5}
	if err := cq.StartPoll(&cur); err != nil || cur.WRID != 1 || cur.CompletionTS != 0 || cur.CompletionWallclockNS != 0 {
		t.Fatalf("StartPoll: %v %+v", err, cur)
	}
	if err := cq.StartPoll(&cur); err != verbs.ErrNoEntry {
		t.Fatalf("StartPoll on an empty CQ: %v, want ErrNoEntry itself", err)
	}
	cq.Push(&verbs.WC{}, false)
	cq.Push(&verbs.WC{}, false)
	cq.Push(&verbs.WC{}, false) // overruns
	cq.StartPoll(&cur)
	cq.NextPoll(&cur)
	if err := cq.NextPoll(&cur); !errors.Is(err, verbs.ErrIO) {
		t.Fatalf("polling an overrun CQ dry: %v, want EIO", err)
	}
	cq.Destroy()
	if err := cq.StartPoll(&cur); !errors.Is(err, verbs.ErrClosed) {
		t.Fatalf("StartPoll after Destroy: %v, want ErrClosed", err)
	}
}

// A poll that finds the CQ empty, or has no room, calls the empty-poll
// hook (the device's manual progress) and looks again; one that takes a
// completion does not.
func TestEmptyOrRoomlessPollDrivesProgress(t *testing.T) {
	cq := New(4, nil)
	calls := 0
	cq.SetOnEmptyPoll(func() {
		calls++
		if calls == 1 {
			cq.Push(&verbs.WC{WRID: 7}, false) // what the progress brought
		}
	})
	wc := make([]verbs.WC, 2)
	if n, err := cq.Poll(wc); err != nil || n != 1 || wc[0].WRID != 7 || calls != 1 {
		t.Fatalf("empty CQ: Poll = %d, %v (wr_id %d) after %d progress calls; want the completion the progress pushed, after 1", n, err, wc[0].WRID, calls)
	}
	cq.Push(&verbs.WC{WRID: 8}, false)
	if n, _ := cq.Poll(wc); n != 1 || calls != 1 {
		t.Fatalf("a poll that found a completion called the progress (%d calls)", calls)
	}
	for _, room := range [][]verbs.WC{nil, {}} {
		before := calls
		if n, err := cq.Poll(room); n != 0 || err != nil || calls != before+1 {
			t.Fatalf("Poll with no room = %d, %v, progress calls %d; want 0, nil, 1", n, err, calls-before)
		}
	}
}

// A CQ makes its ring with its first completion: before that, polls find
// nothing, Cap and Len answer, Resize works, and the ring then holds
// exactly the room asked for; plain and stamped alike.
func TestACQWithNoRingYetBehavesAsAnEmptyOne(t *testing.T) {
	for _, cq := range []*CQ{New(4, nil), NewStamped(4, nil)} {
		var cur verbs.WCEx
		if err := cq.StartPoll(&cur); err != verbs.ErrNoEntry {
			t.Fatalf("StartPoll of a CQ with no ring: %v, want ErrNoEntry", err)
		}
		if n, err := cq.Poll(make([]verbs.WC, 2)); n != 0 || err != nil {
			t.Fatalf("Poll of a CQ with no ring: %d, %v", n, err)
		}
		if cq.Cap() != 4 || cq.Len() != 0 {
			t.Fatalf("Cap %d, Len %d; want 4 and 0", cq.Cap(), cq.Len())
		}
		if err := cq.Resize(2); err != nil {
			t.Fatal(err)
		}
		for i := range 2 {
			if !cq.Push(&verbs.WC{WRID: uint64(i)}, false) {
				t.Fatalf("push %d refused", i)
			}
		}
		if cq.Push(&verbs.WC{}, false) {
			t.Fatal("a push beyond the resized room was taken")
		}
		if err := cq.StartPoll(&cur); err != nil || cur.WRID != 0 {
			t.Fatalf("StartPoll: %v, wr_id %d", err, cur.WRID)
		}
		if err := cq.NextPoll(&cur); err != nil || cur.WRID != 1 {
			t.Fatalf("NextPoll: %v, wr_id %d", err, cur.WRID)
		}
		cq.Destroy()
	}
	cq := New(3, nil)
	cq.Destroy()
	if cq.Push(&verbs.WC{}, false) {
		t.Fatal("a push after Destroy was taken")
	}
}
