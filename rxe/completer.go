package rxe

import (
	"encoding/binary"
	"time"

	"github.com/rdmago/rdmago/internal/racesync"
	"github.com/rdmago/rdmago/rxe/wire"
	"github.com/rdmago/rdmago/verbs"
)

// completer takes what answers the requester's packets, acknowledgements
// and READ and atomic responses, and marks WQEs done; it keeps the
// retransmit timer, the RNR wait and the retry budgets, and rewinds the
// send queue when a request must go again (Linux rxe's rxe_completer).
type completer struct {
	sq    *sendQueue
	host  engineHost
	stats tally
	attr  *ownerAttr

	retries    int // transport retries left
	rnrRetries int // RNR retries left
	retryAt    time.Time
	rnrUntil   time.Time // after an RNR NAK, wait until then
	rnrPending bool
	readGap    wire.PSN // the last PSN resendFrom asked again from
	gapSet     bool
	gapSeen    int      // out-of-order responses since asking again from readGap
	nakPSN     wire.PSN // the PSN of the last sequence error NAK
	nakSet     bool
	putOffs    int // timeouts put off in a row for want of room (noRoom)
}

// reset drops the completer's state and gives it full retry budgets (the
// QP went to RESET, or SQ_PSN was set).
func (c *completer) reset() {
	*c = completer{sq: c.sq, host: c.host, stats: c.stats, attr: c.attr, retries: c.attr.retryCnt, rnrRetries: c.attr.rnrRetry}
}

// deadline returns when the completer must next see the time: the end of
// an RNR wait, or the retransmit timer (zero: neither).
func (c *completer) deadline() time.Time {
	if c.rnrPending {
		return c.rnrUntil
	}
	return c.retryAt
}

// rnrWait reports whether the requester must still wait, at now, after
// an RNR NAK.
func (c *completer) rnrWait(now time.Time) bool {
	if !c.rnrPending {
		return false
	}
	if now.Before(c.rnrUntil) {
		return true
	}
	c.rnrPending = false
	return false
}

// sent starts the retransmit timer, if it is not running, for a request
// the requester sent at now.
func (c *completer) sent(now time.Time) {
	if c.retryAt.IsZero() && c.attr.timeout > 0 {
		c.retryAt = now.Add(c.attr.timeout)
	}
}

// complete handles an acknowledgement or a READ or atomic response.
func (c *completer) complete(p *wire.Packet, now time.Time) {
	s := c.sq
	if !s.inited {
		return
	}
	psn := p.BTH.PSN()
	// Only responses to PSNs we sent and that are not yet acknowledged
	// count; the rest are stale duplicates.
	if psn.Diff(s.una) < 0 && !p.OpCode().IsReadResponse() || psn.Diff(s.psn) >= 0 {
		return
	}
	op := rcOp(p.OpCode())
	if op == wire.RCAcknowledge {
		syn := p.AETH.Syndrome()
		switch syn.Kind() {
		case wire.KindACK:
			c.ackThrough(psn, now)
		case wire.KindRNRNAK:
			c.stats.add(verbs.CounterRcvdRNRErr, 1)
			c.ackThrough(psn.Add(0xffffff), now) // everything before psn
			if c.rnrRetries == 0 && c.attr.rnrRetry != 7 {
				c.failAt(psn, verbs.WCRNRRetryExcErr)
				return
			}
			if c.attr.rnrRetry != 7 {
				c.rnrRetries--
			}
			c.rnrPending = true
			c.rnrUntil = now.Add(wire.RNRTimerDuration(syn.Value()))
			// The peer answered: the transport is alive. Its retries
			// start afresh, and the retransmit timer waits until the
			// request goes again after the RNR wait.
			c.retries = c.attr.retryCnt
			c.retryAt = time.Time{}
			s.rewind(psn)
		case wire.KindNAK:
			c.ackThrough(psn.Add(0xffffff), now)
			switch syn {
			case wire.NAKPSNSequenceError:
				c.stats.add(verbs.CounterRcvdSeqErr, 1)
				// A repeated NAK for the PSN we went back to is the
				// responder asking again (renakAfter), not a new
				// error: resend without spending a retry. The
				// retransmit timer still bounds a peer that makes no
				// progress.
				if !(c.nakSet && c.nakPSN == psn) && !c.useRetry() {
					c.failAt(psn, verbs.WCRetryExcErr)
					return
				}
				c.nakPSN, c.nakSet = psn, true
				c.stats.add(verbs.CounterCompleterRetryErr, 1)
				s.rewind(psn)
			case wire.NAKRemoteAccessError:
				c.failAt(psn, verbs.WCRemAccessErr)
			case wire.NAKRemoteOperational:
				c.failAt(psn, verbs.WCRemOpErr)
			default:
				c.failAt(psn, verbs.WCRemInvReqErr)
			}
		}
		return
	}
	// A read response or atomic acknowledgement: find its WQE.
	w := s.wqeAt(psn)
	if w == nil {
		return
	}
	if op == wire.RCAtomicAcknowledge {
		if !w.isReadOrAtomic() || w.wr.Opcode == verbs.WRRDMARead || psn != w.firstPSN || w.done {
			return
		}
		c.ackThrough(psn.Add(0xffffff), now)
		racesync.Sync()
		binary.NativeEndian.PutUint64(w.segs[0], p.AtomicAckETH.OrigData())
		racesync.Sync()
		w.done = true
		c.ackThrough(psn, now)
		return
	}
	// RDMA READ response.
	if w.wr.Opcode != verbs.WRRDMARead || w.done {
		return
	}
	want := w.firstPSN.Add(w.readDone)
	if psn != want {
		// A gap: responses were lost. Ask again from the first missing
		// one, once per gap.
		if psn.Diff(want) > 0 {
			c.resendFrom(want)
		}
		return
	}
	c.ackThrough(psn.Add(0xffffff), now)
	mtu := uint64(c.attr.mtu)
	off := uint64(w.readDone) * mtu
	expect := min(mtu, w.length-min(w.length, off))
	lastPkt := w.readDone == w.npkts-1
	if uint64(len(p.Payload)) != expect || op.IsLast() != lastPkt {
		c.failAt(psn, verbs.WCBadRespErr)
		return
	}
	scatter(w.segs, off, p.Payload)
	w.readDone++
	if lastPkt {
		w.done = true
		c.ackThrough(psn, now)
	}
}

// reaskAfter is how many out-of-order packets a side lets pass after
// asking its peer to go back (a NAK, or a repeated READ request) before
// it decides the request was lost and asks again, rather than waiting for
// the retransmit timer. It is above the packets a peer has in flight.
const reaskAfter = 2 * maxReadBurst

// renakAfter is the same for the responder's PSN sequence error NAK. A
// requester stops at maxUnackedPSN packets in flight, so it must be well
// below that, or a lost NAK would always wait for the timer.
const renakAfter = maxUnackedPSN / 4

// resendFrom rewinds to a READ or atomic whose response is missing, once
// for each such PSN (every later response or ACK would ask again). A
// missing response so detected is an implied NAK, a PSN sequence error
// like an explicit one: it spends a transport retry, and fails the WQE with
// RETRY_EXC_ERR when none is left (IBTA vol. 1 chapter 9, as Linux rxe).
func (c *completer) resendFrom(psn wire.PSN) {
	if c.gapSet && c.readGap == psn {
		// Asked already. Ask again only if so many later packets
		// have come since that the answer must have been lost.
		c.gapSeen++
		if c.gapSeen < reaskAfter {
			return
		}
	}
	if !c.useRetry() {
		c.failAt(psn, verbs.WCRetryExcErr)
		return
	}
	c.stats.add(verbs.CounterCompleterRetryErr, 1)
	c.readGap, c.gapSet, c.gapSeen = psn, true, 0
	c.sq.rewind(psn)
}

// useRetry spends one transport retry; false when none are left. A
// retry_cnt of 7 never runs out.
func (c *completer) useRetry() bool {
	if c.attr.retryCnt == 7 {
		return true // 7 means retry forever, as in Linux rxe
	}
	if c.retries <= 0 {
		return false
	}
	c.retries--
	return true
}

// ackThrough retires what an acknowledgement of PSN a covers: SENDs and
// WRITEs whose last PSN is not after a. A READ or atomic it passes without
// its response lost that response: it is asked for again.
func (c *completer) ackThrough(a wire.PSN, now time.Time) {
	s := c.sq
	if a.Diff(s.una) < 0 {
		return
	}
	advanced := false
	for _, w := range s.wqes {
		if !w.started || w.firstPSN.Diff(a) > 0 {
			break
		}
		if w.done {
			continue
		}
		if w.isReadOrAtomic() {
			// The responder acknowledged past a request whose
			// response has not come: the response was lost.
			if a.Diff(w.lastPSN()) > 0 {
				c.resendFrom(w.firstPSN.Add(w.readDone))
			}
			break
		}
		if w.lastPSN().Diff(a) > 0 {
			break
		}
		w.done = true
		advanced = true
	}
	newUna := a.Add(1)
	// una is the first PSN not yet answered. A READ or atomic finished by
	// its responses is answered without any ACK covering it, and so are
	// the READ responses that came in order while an earlier READ was
	// being asked for again: una moves past both. It never passes the
	// responses still missing. (The send window counts from una: short
	// of these, it could stay shut with the next READ never asked for.)
	for _, w := range s.wqes {
		if !w.started {
			break
		}
		if w.done {
			if end := w.lastPSN().Add(1); end.Diff(newUna) > 0 && end.Diff(s.psn) <= 0 {
				newUna = end
			}
			continue
		}
		if w.isReadOrAtomic() && newUna.Diff(w.firstPSN) >= 0 {
			newUna = w.firstPSN.Add(w.readDone)
		}
		break
	}
	if newUna.Diff(s.una) > 0 {
		s.una = newUna
		advanced = true
	}
	if advanced {
		c.madeProgress(now)
	}
}

// madeProgress resets the retry budget and restarts the retransmit timer.
func (c *completer) madeProgress(now time.Time) {
	c.putOffs = 0
	c.retries = c.attr.retryCnt
	c.rnrRetries = c.attr.rnrRetry
	if c.sq.una == c.sq.psn || c.attr.timeout == 0 {
		c.retryAt = time.Time{}
	} else {
		c.retryAt = now.Add(c.attr.timeout)
	}
}

// failAt completes the WQE holding psn with status and fails the QP.
func (c *completer) failAt(psn wire.PSN, status verbs.WCStatus) {
	switch status {
	case verbs.WCRetryExcErr:
		c.stats.add(verbs.CounterRetryExceededErr, 1)
	case verbs.WCRNRRetryExcErr:
		c.stats.add(verbs.CounterRetryRNRExceededErr, 1)
	}
	if w := c.sq.wqeAt(psn); w != nil {
		w.done, w.status = true, status
	} else {
		for _, w := range c.sq.wqes {
			if !w.done {
				w.done, w.status = true, status
				break
			}
		}
	}
	c.host.toError()
}

// maxPutOffs is how many timeouts in a row noRoom puts off before it takes
// one as it comes: a link full for that long is as good as down.
const maxPutOffs = 8

// noRoom is the completer's part of a step whose link has no room
// (hw.sendRoom): the requester sends nothing, so a retransmit timeout that
// falls due now is put off by a timeout, spending no retry (the request
// could not have gone), up to maxPutOffs in a row, and an RNR wait that is
// over ends, its resend left for when the link has room. Neither leaves a
// deadline behind that is already due.
func (c *completer) noRoom(now time.Time) {
	if c.rnrPending && !now.Before(c.rnrUntil) {
		c.rnrPending = false
	}
	if !c.retryAt.IsZero() && !now.Before(c.retryAt) {
		if c.putOffs >= maxPutOffs {
			c.onTimer(now)
			return
		}
		c.putOffs++
		c.retryAt = now.Add(c.attr.timeout)
	}
}

// onTimer handles the retransmit timer at now: resend from the oldest
// unacknowledged PSN once it is due, or fail with RETRY_EXC_ERR when
// retries run out.
func (c *completer) onTimer(now time.Time) {
	s := c.sq
	if !s.inited || c.rnrPending {
		return // waiting out an RNR NAK: not a lost packet
	}
	if c.retryAt.IsZero() || now.Before(c.retryAt) || s.una == s.psn {
		if s.una == s.psn {
			c.retryAt = time.Time{}
		}
		return
	}
	if !c.useRetry() {
		c.failAt(s.una, verbs.WCRetryExcErr)
		return
	}
	c.retryAt = now.Add(c.attr.timeout)
	c.stats.add(verbs.CounterCompleterRetryErr, 1)
	s.rewind(s.una)
}
