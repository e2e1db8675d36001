package rxe

import "github.com/rdmago/rdmago/verbs"

// recvQueue is a receive queue, a QP's or an SRQ's: a ring of receive
// WQEs, oldest first. Each slot keeps the room of the SGE list it last
// held, so that once the ring has grown to the queue's use, posting and
// taking allocate nothing. The owner of the queue guards it.
type recvQueue struct {
	ring    []recvWQE
	head, n int
}

// len returns the number of WQEs queued.
func (rq *recvQueue) len() int { return rq.n }

// push queues a WQE at the tail, copying sges.
func (rq *recvQueue) push(wrid uint64, sges []verbs.SGE) {
	if rq.n == len(rq.ring) {
		rq.grow()
	}
	w := &rq.ring[(rq.head+rq.n)%len(rq.ring)]
	w.wrid, w.sges = wrid, append(w.sges[:0], sges...)
	rq.n++
}

// pop moves the oldest WQE into w, reusing w's SGE room; false if the
// queue is empty.
func (rq *recvQueue) pop(w *recvWQE) bool {
	if rq.n == 0 {
		return false
	}
	s := &rq.ring[rq.head]
	w.wrid, w.sges = s.wrid, append(w.sges[:0], s.sges...)
	rq.head = (rq.head + 1) % len(rq.ring)
	rq.n--
	return true
}

// unpop puts w back at the head, as the oldest WQE.
func (rq *recvQueue) unpop(w *recvWQE) {
	if rq.n == len(rq.ring) {
		rq.grow()
	}
	rq.head = (rq.head - 1 + len(rq.ring)) % len(rq.ring)
	s := &rq.ring[rq.head]
	s.wrid, s.sges = w.wrid, append(s.sges[:0], w.sges...)
	rq.n++
}

// takeAll empties the queue, appending the WQEs' IDs, oldest first, to ids.
func (rq *recvQueue) takeAll(ids []uint64) []uint64 {
	for ; rq.n > 0; rq.n-- {
		ids = append(ids, rq.ring[rq.head].wrid)
		rq.head = (rq.head + 1) % len(rq.ring)
	}
	rq.head = 0
	return ids
}

// grow doubles the ring, keeping the WQEs in order.
func (rq *recvQueue) grow() {
	ring := make([]recvWQE, max(4, 2*len(rq.ring)))
	for i := range rq.n {
		ring[i] = rq.ring[(rq.head+i)%len(rq.ring)]
	}
	rq.ring, rq.head = ring, 0
}
