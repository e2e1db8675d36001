package rxe

import (
	"sync"

	"github.com/rdmago/rdmago/verbs"
)

// A QP is the host of its engine's parts: what the requester, completer
// and responder need of it (engineHost, responderHost) is here, beside
// queueOutTo, toError, kick and event, which the QP also uses itself.

// resolve implements engineHost: memory of the QP's PD.
func (q *qp) resolve(sges []verbs.SGE, write bool, segs [][]byte) ([][]byte, bool) {
	segs, _, ok := q.hw.resolveSGEs(q.pd, sges, write, segs)
	return segs, ok
}

// The rest of responderHost. x is the XRC SRQ of the request at hand, for
// an XRC_RECV QP, which has no queues, PD or CQs of its own.

func (q *qp) popRecv(x *srq, w *recvWQE) bool {
	switch {
	case x != nil:
		return x.pop(w)
	case q.srq != nil:
		return q.srq.pop(w)
	}
	q.mu.Lock()
	defer q.mu.Unlock()
	return q.rq.pop(w)
}

func (q *qp) unpopRecv(x *srq, w *recvWQE) {
	switch {
	case w == nil:
	case x != nil:
		x.unpop(w)
	case q.srq != nil:
		q.srq.unpop(w)
	default:
		q.mu.Lock()
		q.rq.unpop(w)
		q.mu.Unlock()
	}
}

func (q *qp) recvMemory(x *srq, sges []verbs.SGE, segs [][]byte) ([][]byte, uint64, bool) {
	p := q.pd
	if x != nil {
		p = x.pd
	}
	return q.hw.resolveSGEs(p, sges, true, segs)
}

func (q *qp) pushRecv(x *srq, wc verbs.WC, solicited bool) {
	c, cq := q.ctx, q.rcq
	if x != nil {
		c, cq = x.ctx, x.cq // an XRC SRQ's CQ is of the SRQ's context
	}
	if !cq.Push(&wc, solicited) {
		q.cqOverflow(c, cq)
	}
	q.received = true
}

func (q *qp) peerMemory(x *srq, rkey uint32, va, n uint64, right verbs.AccessFlags) ([]byte, bool) {
	p := q.pd
	if q.typ == verbs.QPTXRCRecv {
		if x == nil {
			return nil, false // the request named no SRQ of the domain
		}
		p = x.pd
	}
	m := q.hw.lookup(rkey, p)
	if m == nil {
		return q.windowMemory(p, rkey, va, n, right)
	}
	if m.access&right == 0 {
		return nil, false
	}
	return m.span(va, n)
}

func (q *qp) atomics() *sync.Mutex { return &q.hw.atomicMu }

func (q *qp) holdAck() { q.hw.noteHeld(q) }

var (
	_ engineHost    = (*qp)(nil)
	_ responderHost = (*qp)(nil)
)
