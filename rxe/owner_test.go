package rxe

import (
	"testing"
	"time"

	"github.com/rdmago/rdmago/rxe/link"
	"github.com/rdmago/rdmago/verbs"
)

// A QP's owner goroutine starts with the first thing only it can do: a
// connected QP that has carried nothing has none, a send under the default
// progress starts it, and Destroy stops it, or does its last work itself
// when there was none.
func TestAQPStartsItsOwnerWhenFirstWoken(t *testing.T) {
	a, b, _ := memPair(t, 16, link.Faults{}, pairOpts{})
	qa, qb := verbs.QPDriverOf(a.qp).(*qp), verbs.QPDriverOf(b.qp).(*qp)
	if qa.owner.Load() || qb.owner.Load() {
		t.Fatalf("owners started by connecting: a %v, b %v", qa.owner.Load(), qb.owner.Load())
	}
	if err := b.qp.PostRecv([]verbs.RecvWR{{WRID: 1, SGList: []verbs.SGE{b.mr.SGE(0, 64)}}}); err != nil {
		t.Fatal(err)
	}
	if qb.owner.Load() {
		t.Fatal("a receive WQE started the owner")
	}
	if err := a.qp.PostSend([]verbs.SendWR{{WRID: 9, Opcode: verbs.WRSend, SendFlags: verbs.SendSignaled, SGList: []verbs.SGE{a.mr.SGE(0, 64)}}}); err != nil {
		t.Fatal(err)
	}
	if !qa.owner.Load() {
		t.Fatal("a send under the default progress left the owner unstarted")
	}
	if wcs := a.wait(1, 5*time.Second); wcs[0].Status != verbs.WCSuccess {
		t.Fatalf("sender: %s", describe(wcs))
	}
	if wcs := b.wait(1, 5*time.Second); wcs[0].Status != verbs.WCSuccess {
		t.Fatalf("receiver: %s", describe(wcs))
	}
	if qb.owner.Load() {
		t.Fatal("receiving started the owner: the receive loop steps the QP itself")
	}
	for _, q := range []*qp{qa, qb} { // with an owner, then without
		started := q.owner.Load()
		done := make(chan struct{})
		go func() { q.Destroy(); close(done) }()
		select {
		case <-done:
		case <-time.After(5 * time.Second):
			t.Fatalf("Destroy of a QP whose owner started=%v does not return", started)
		}
		if started {
			select {
			case <-q.exited:
			default:
				t.Fatal("Destroy returned before the owner exited")
			}
		}
	}
}

// A move to ERR is made by the calling goroutine when nobody else steps
// the QP: the receive WQEs are flushed by the time Modify returns, and no
// owner goroutine is started for it.
func TestAMoveToERRFlushesOnTheCallersGoroutine(t *testing.T) {
	a, _, _ := memPair(t, 17, link.Faults{}, pairOpts{})
	q := verbs.QPDriverOf(a.qp).(*qp)
	if err := a.qp.PostRecv([]verbs.RecvWR{{WRID: 1, SGList: []verbs.SGE{a.mr.SGE(0, 64)}}, {WRID: 2, SGList: []verbs.SGE{a.mr.SGE(64, 64)}}}); err != nil {
		t.Fatal(err)
	}
	if err := a.qp.Modify(&verbs.QPAttr{QPState: verbs.QPSErr}, verbs.QPAttrState); err != nil {
		t.Fatal(err)
	}
	wcs := make([]verbs.WC, 4)
	n, err := a.cq.Poll(wcs)
	if err != nil {
		t.Fatal(err)
	}
	if n != 2 || wcs[0].Status != verbs.WCWRFlushErr || wcs[1].Status != verbs.WCWRFlushErr {
		t.Fatalf("after Modify to ERR: %s", describe(wcs[:n]))
	}
	if q.owner.Load() {
		t.Fatal("the move to ERR started the owner")
	}
}

// Connection setup (RESET to INIT to RTR to RTS) leaves the owner nothing
// to do; moves to ERR, RESET or SQD, and out of them, do not.
func TestQuietMoves(t *testing.T) {
	for _, tc := range []struct {
		prev, next verbs.QPState
		quiet      bool
	}{
		{verbs.QPSReset, verbs.QPSInit, true},
		{verbs.QPSInit, verbs.QPSInit, true},
		{verbs.QPSInit, verbs.QPSRTR, true},
		{verbs.QPSRTR, verbs.QPSRTS, true},
		{verbs.QPSRTS, verbs.QPSRTS, true},
		{verbs.QPSRTS, verbs.QPSErr, false},
		{verbs.QPSRTS, verbs.QPSReset, false},
		{verbs.QPSInit, verbs.QPSReset, false},
		{verbs.QPSRTS, verbs.QPSSQD, false},
		{verbs.QPSSQD, verbs.QPSRTS, false},
		{verbs.QPSSQE, verbs.QPSRTS, false},
		{verbs.QPSErr, verbs.QPSReset, false},
	} {
		if got := quietMove(tc.prev, tc.next); got != tc.quiet {
			t.Errorf("quietMove(%s, %s) = %v, want %v", tc.prev, tc.next, got, tc.quiet)
		}
	}
}
