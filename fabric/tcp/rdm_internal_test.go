package tcp

import (
	"testing"
)

// Internal frames (read responses, ACKs) go ahead of the program's frames
// but in the order they were queued: the peer matches read responses in
// order.
func TestInternalFramesKeepTheirOrder(t *testing.T) {
	e := &ep{}
	user := &txEntry{bufs: [][]byte{{1}}, partial: true}
	later := &txEntry{bufs: [][]byte{{2}}}
	e.txq = []*txEntry{user, later}
	a, b := &txEntry{}, &txEntry{}
	e.queueFirst(a)
	e.queueFirst(b)
	if len(e.txq) != 4 || e.txq[0] != user || e.txq[1] != a || e.txq[2] != b || e.txq[3] != later {
		t.Fatalf("queue order wrong: %v", e.txq)
	}
}
