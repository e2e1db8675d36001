package rxe

import (
	"slices"
	"testing"

	"github.com/rdmago/rdmago/verbs"
)

// The receive queue hands WQEs out oldest first across growth and
// wrap-around, puts one back at the head, and once grown takes and gives
// without allocating.
func TestRecvQueueKeepsOrderAndStopsAllocating(t *testing.T) {
	var rq recvQueue
	sge := func(i int) []verbs.SGE { return []verbs.SGE{{Addr: uint64(i), Length: uint32(i), LKey: 7}} }
	var w recvWQE
	next := 0 // the next WRID pop must return
	for i := range 100 {
		rq.push(uint64(i), sge(i))
		if i%3 == 2 {
			for range 2 {
				if !rq.pop(&w) || w.wrid != uint64(next) || !slices.Equal(w.sges, sge(next)) {
					t.Fatalf("pop gave %d %v, want %d", w.wrid, w.sges, next)
				}
				next++
			}
		}
	}
	rq.unpop(&w) // the last one popped goes back
	next--
	ids := rq.takeAll(nil)
	want := make([]uint64, 0, 100-next)
	for i := next; i < 100; i++ {
		want = append(want, uint64(i))
	}
	if !slices.Equal(ids, want) || rq.len() != 0 || rq.pop(&w) {
		t.Fatalf("takeAll = %v, want %v, then len %d", ids, want, rq.len())
	}
	s := sge(1)
	if a := testing.AllocsPerRun(100, func() {
		for i := range 64 {
			rq.push(uint64(i), s)
		}
		for rq.pop(&w) {
		}
	}); a != 0 {
		t.Fatalf("%v allocations per 64 pushes and pops once grown", a)
	}
}
