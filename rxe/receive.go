package rxe

import (
	"encoding/binary"
	"errors"
	"net"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/rdmago/rdmago/rxe/link"
)

// The device's receive path: one loop per link reads batches of packets
// and hands each to its QP (or the CM agent), and a polling caller may do
// the same on its own goroutine (verbs.ProgressManual).

// linkReader is how a link is read. A link that can be read without
// waiting (link.TryReceiver) is read by whoever holds mu, the receive loop
// or a CQ poller doing manual progress, into batch; reading and handing
// over what was read under one lock keeps the packets in the order they
// came.
type linkReader struct {
	mu    sync.Mutex
	batch *receiveBatch
	// polls counts the pollers' reads: while it moves, the receive loop
	// stands aside (recvLoop), unless nudged: a poller went to wait.
	polls atomic.Uint64
	nudge chan struct{}
}

// standAside is how long the receive loop leaves a link to the pollers
// reading it before it looks again whether they still do. A poller that
// stops polling leaves what arrives after it to the receive loop, which
// then takes it up to this much later.
const standAside = 500 * time.Microsecond

// recvLoop reads packets from link i and hands each to its QP.
func (h *hw) recvLoop(i int) {
	defer h.wg.Done()
	l := h.links[i]
	if tr, ok := l.(link.TryReceiver); ok {
		rd := &h.readers[i]
		busy := false // the last read found packets: read again before waiting
		seen := rd.polls.Load()
		pause := time.NewTimer(time.Hour)
		defer pause.Stop()
		for {
			var err error
			if !busy {
				// While pollers read the link (manual progress), the
				// loop leaves it to them: waiting on the link would
				// wake it for each packet they read anyway, taking
				// a CPU from the poll.
			aside:
				for n := rd.polls.Load(); n != seen; n = rd.polls.Load() {
					seen = n
					pause.Reset(standAside)
					select {
					case <-pause.C:
					case <-rd.nudge:
						seen = rd.polls.Load()
						break aside
					case <-h.quit:
						return
					}
				}
				err = tr.WaitReadable()
			}
			if err == nil {
				rd.mu.Lock()
				var n int
				n, err = h.readLink(i, l, tr, rd.batch, false)
				tell := rd.batch.takeQP1()
				rd.mu.Unlock()
				busy = n > 0
				if tell {
					h.dev.tellQP1()
				}
			}
			if errors.Is(err, net.ErrClosed) {
				return
			}
		}
	}
	r := newReceiveBatch(h)
	for {
		n, err := l.Recv(r.pkts)
		if err != nil {
			if errors.Is(err, net.ErrClosed) {
				r.release(h)
				return
			}
			continue
		}
		h.dispatch(i, l, r, n, false)
		if r.takeQP1() {
			h.dev.tellQP1()
		}
	}
}

// readLink reads link i without waiting (its reader's mu held) and hands
// what it read over, and the packets the link still holds after that read
// (bounded: what one read brought). It returns how many it read.
func (h *hw) readLink(i int, l link.Link, tr link.TryReceiver, r *receiveBatch, polled bool) (int, error) {
	total := 0
	for {
		n, err := tr.TryRecv(r.pkts)
		if err != nil {
			return total, err
		}
		if n > 0 {
			h.dispatch(i, l, r, n, polled)
			total += n
		}
		if n == 0 || !tr.Held() {
			return total, nil
		}
	}
}

// receiveBatch is what a reader of a link needs: packet buffers to read
// into and room to look their QPs up.
type receiveBatch struct {
	pkts  []link.Packet
	qs    []*qp
	touch []*qp // the QPs the batch went to, to be stepped
	// qp1: stepping them, QP1 completed receives, which the reader
	// tells the connection manager of once it let go of the link.
	qp1 bool
}

// takeQP1 reports whether QP1 completed receives since it was last asked.
func (r *receiveBatch) takeQP1() bool {
	t := r.qp1
	r.qp1 = false
	return t
}

func newReceiveBatch(h *hw) *receiveBatch {
	r := &receiveBatch{pkts: make([]link.Packet, recvBatch), qs: make([]*qp, recvBatch)}
	for j := range r.pkts {
		r.pkts[j].Buf = h.getBuf()
	}
	return r
}

func (r *receiveBatch) release(h *hw) {
	for j := range r.pkts {
		h.putBuf(r.pkts[j].Buf)
	}
}

// dispatch hands the n packets read from link i into r to their QPs (or,
// for a shared address's leader, to the processes that own them), and runs
// each QP that got some on this goroutine when its owner is idle (waking
// the owner otherwise): one goroutine switch less per packet than handing
// every packet to the owner, which the owner's select would cost.
func (h *hw) dispatch(i int, l link.Link, r *receiveBatch, n int, polled bool) {
	// Look the QPs up first and deliver without h.mu: deliver takes
	// q.mu, and a poster holding q.mu may need h.mu (inline data).
	sh, leading := l.(*link.Shared)
	leading = leading && sh.Leading()
	forwarded := false
	h.mu.RLock()
	for j := 0; j < n; j++ {
		r.qs[j] = h.qps[binary.BigEndian.Uint32(r.pkts[j].Buf[4:8])&0xffffff]
	}
	h.mu.RUnlock()
	for j := 0; j < n; j++ {
		p := &r.pkts[j]
		q := r.qs[j]
		r.qs[j] = nil
		if leading {
			owner, ok := h.route(sh, p.Buf)
			if !ok {
				continue
			}
			if owner != h.owner && !h.cmOwnerGone(sh, owner, p.Buf) {
				sh.Forward(owner, p)
				forwarded = true
				continue
			}
		}
		if q == nil {
			// No such QP: dropped, as hardware does; but a CM request
			// for QP1 here, where no connection manager runs, is
			// answered as the IB CM answers it (cmanswer.go).
			h.answerCM(l, p)
			continue
		}
		in := inPacket{buf: p.Buf, src: p.Addr, tclass: p.TClass, hop: p.HopLimit, link: uint8(i)}
		if q.deliver(in, false) {
			p.Buf = h.getBuf()
			if !slices.Contains(r.touch, q) {
				r.touch = append(r.touch, q)
			}
		}
	}
	if forwarded {
		sh.Flush()
	}
	for j := 0; j < n; j++ {
		r.pkts[j].Buf = r.pkts[j].Buf[:cap(r.pkts[j].Buf)]
	}
	for k, q := range r.touch {
		// Only a QP whose own program polls may hold its ACK for that
		// program's answer; another context's QP found by the poll
		// sends it at once.
		if q.stepHere(polled && q.ctx.manual.Load()) {
			r.qp1 = true
		}
		r.touch[k] = nil
	}
	r.touch = r.touch[:0]
}

// progress is manual progress (verbs.ProgressManual) for a CQ poll that
// found nothing: it reads the device's links without waiting and runs the
// QPs of the packets it finds on the calling goroutine. A link another
// goroutine is reading is left to it.
func (h *hw) progress() {
	h.upMu.Lock()
	links, readers, stopped := h.links, h.readers, h.stopped
	h.upMu.Unlock()
	if stopped {
		return
	}
	if h.nheld.Load() > 0 {
		h.releaseHeld()
	}
	// The links are read in turn, from a different one each time, up to
	// the first that has packets: the poller then looks at its CQ before
	// the others are read, a system call less on the round trip's path
	// (a device has a link per address: IPv4 and IPv6 on loopback).
	start := 0
	if len(links) > 1 {
		start = int(h.pollNext.Add(1) % uint32(len(links)))
	}
	for k := range links {
		i := (start + k) % len(links)
		l := links[i]
		tr, ok := l.(link.TryReceiver)
		if !ok {
			continue
		}
		readers[i].polls.Add(1)
		if !readers[i].mu.TryLock() {
			continue
		}
		n, _ := h.readLink(i, l, tr, readers[i].batch, true)
		if readers[i].batch.takeQP1() {
			// On a goroutine of its own: the poller is the program's,
			// which may hold locks of its own.
			h.dev.tellQP1Later()
		}
		readers[i].mu.Unlock()
		if n > 0 {
			return
		}
	}
}

// noteHeld records that q holds an ACK (its stepMu held).
func (h *hw) noteHeld(q *qp) {
	h.heldMu.Lock()
	h.held = append(h.held, q)
	h.nheld.Store(int32(len(h.held)))
	h.heldMu.Unlock()
}

// releaseHeld sends the ACKs held for an answer that did not come: the
// program polls again instead. A QP another goroutine is stepping stays
// listed for the next poll.
func (h *hw) releaseHeld() {
	h.heldMu.Lock()
	qs := h.held
	h.held = nil
	h.nheld.Store(0)
	h.heldMu.Unlock()
	var busy []*qp
	for i, q := range qs {
		qs[i] = nil
		if !q.stepMu.TryLock() {
			busy = append(busy, q)
			continue
		}
		select {
		case <-q.done:
		default:
			q.sendHeldAck(h.clock.now(), false)
		}
		q.stepMu.Unlock()
	}
	if len(busy) > 0 {
		h.heldMu.Lock()
		h.held = append(h.held, busy...)
		h.nheld.Store(int32(len(h.held)))
		h.heldMu.Unlock()
	}
}

// pollersWait tells the receive loops standing aside that a poller went
// to wait (pollWait).
func (h *hw) pollersWait() {
	h.upMu.Lock()
	readers := h.readers
	h.upMu.Unlock()
	for i := range readers {
		select {
		case readers[i].nudge <- struct{}{}:
		default:
		}
	}
}
