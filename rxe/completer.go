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
	nakGot     int      // sequence error NAKs of nakPSN received
	nakBehind  int      // request packets after nakPSN sent before its latest copy
	nakAhead   int      // request packets after nakPSN sent since its latest copy
	nakGoing   bool     // gone back to nakPSN, which has not gone again yet
	lastSent   wire.PSN // the PSN of the last request sent
	putOffs    int      // timeouts put off in a row for want of room (noRoom)

	// The round trip, measured from a request's first copy to the
	// first ACK or NAK that covers it, on requests that went once
	// (Karn's rule). A sample is long when the ACK was asked for further
	// on, or came after a loss; the shortest drives the early go-back
	// (see quickAfter).
	minRTT  time.Duration // the shortest measured; 0 until measured
	rttPSN  wire.PSN      // the request being timed, if rttSet
	rttAt   time.Time
	rttSet  bool
	hiSent  wire.PSN // the highest PSN sent, if sentAny
	sentAny bool
	quickAt time.Time // go back at una then, if nothing has come
	quicks  int       // early go-backs since the last progress

	srtt       time.Duration // the smoothed round trip, of the same samples
	quietSince time.Time     // when the last request went or answer came
	tails      int           // tail probes since the last progress
	tailDue    bool          // a tail probe is to go (requester.sendTail)
}

// reset drops the completer's state and gives it full retry budgets (the
// QP went to RESET, or SQ_PSN was set).
func (c *completer) reset() {
	*c = completer{sq: c.sq, host: c.host, stats: c.stats, attr: c.attr, retries: c.attr.retryCnt, rnrRetries: c.attr.rnrRetry}
}

// deadline returns when the completer must next see the time: the end of
// an RNR wait, the early go-back or the retransmit timer (zero: none).
func (c *completer) deadline() time.Time {
	if c.rnrPending {
		return c.rnrUntil
	}
	d := c.retryAt
	if !c.quickAt.IsZero() && (d.IsZero() || c.quickAt.Before(d)) {
		d = c.quickAt
	}
	if t := c.tailAt(); !t.IsZero() && (d.IsZero() || t.Before(d)) {
		d = t
	}
	return d
}

// The tail probe. A lost request with nothing sent after it, or a lost
// ACK of the last requests, brings no NAK: the requester hears nothing
// until its retransmit timer, which the program sets for the worst case
// (2.1 s for the timeout code 19 rdma_cm gives RoCE connections), and a
// ping-pong stalls that long. So when the requester has neither sent nor
// heard anything for tailAfter(), it sends its last request packet again,
// asking for an ACK, spending no retry: if that packet was lost, this is
// its resend; if the ACK was, the responder answers the duplicate with an
// ACK again (as the IBTA has it, and Linux rxe does); if more went
// missing, the responder NAKs the gap. Up to maxTails probes, each
// waiting twice as long as the last, until the transport makes progress
// again; then only the timer. (TCP's tail loss probe does the same.)
const maxTails = 2

// minTailAfter is the shortest wait before a tail probe. While requests
// stream, each answer puts the probe off, and the owner's timer, set for
// it, fires early into a step that finds it not yet due: the floor keeps
// those wake-ups rare (a 64-byte WRITE stream lost 5 % of its rate to
// them at a few hundred microseconds).
const minTailAfter = time.Millisecond

// tailAfter is how long the requester waits in silence before a tail
// probe: twice the smoothed round trip, four times the shortest, the
// longest a responder of this device holds an ACK back (ackHold) plus two
// of the shortest, and minTailAfter, whichever is longest; doubled for
// each probe since the last progress. It is
// 0 (never) when the timeout is infinite, until a round trip was
// measured, and when it would pass half the timeout (the timer comes
// soon enough).
func (c *completer) tailAfter() time.Duration {
	if c.attr.timeout == 0 || c.minRTT == 0 {
		return 0
	}
	d := max(2*c.srtt, 4*c.minRTT, ackHold+2*c.minRTT, minTailAfter) << c.tails
	if d > c.attr.timeout/2 {
		return 0
	}
	return d
}

// tailAt returns when a tail probe is due (zero: none): requests are
// unanswered, the requester has sent all it has (its pass is over: one
// that went back has yet to send the last packet again anyway), none of
// the other waits applies (an RNR wait, a gap a NAK reported), and probes
// are left. It runs at every step, so it looks at no WQE: whether the last
// packet is one to probe with is for onTimer to find (tailable).
func (c *completer) tailAt() time.Time {
	s := c.sq
	if c.tailDue || c.tails >= maxTails || c.rnrPending || c.nakSet || s.una == s.psn || !c.sentAny || s.more() {
		return time.Time{}
	}
	d := c.tailAfter()
	if d == 0 {
		return time.Time{}
	}
	return c.quietSince.Add(d)
}

// tailable reports whether the last packet sent is one to probe with: a
// SEND's or WRITE's not yet answered (a READ request sent again is
// answered with the whole READ again).
func (c *completer) tailable() bool {
	w := c.sq.wqeAt(c.hiSent)
	return w != nil && !w.done && !w.isReadOrAtomic()
}

// Early go-back. The retransmit timer is set by the program for the worst
// case (4.096 µs × 2^timeout, 67 ms for timeout 14), and a requester
// whose window is full and whose last ACKs or NAKs were lost waits it
// out, sending nothing: after lost ACKs, or when staleNAK took the NAK of
// a lost resend for stale. So, like a NIC's adaptive retransmission but
// only while a gap a NAK reported is open, the completer also goes back
// at una after quickAfter() in which it neither sent nor heard anything,
// without spending a retry: at most maxQuicks
// times until the transport makes progress again, each waiting twice as
// long as the last, after which only the timer, and its retry count,
// decide. Requests sent twice are duplicates, which the responder
// acknowledges and drops.
const maxQuicks = 3

// quickAfter is how long the completer waits in silence before it goes
// back early: an eighth of the retransmit timeout, or 4 times the
// shortest round trip measured if that is longer (a slow peer); doubled
// for each early go-back since the last progress. It is 0 (never) when
// the timeout is infinite, until the peer has answered once (before that
// only the timer decides), and when 4 round trips take more than half the
// timeout (the timer comes soon enough).
func (c *completer) quickAfter() time.Duration {
	if c.attr.timeout == 0 || c.minRTT == 0 {
		return 0
	}
	d := max(c.attr.timeout/8, 4*c.minRTT)
	if d > c.attr.timeout/2 {
		return 0
	}
	return d << c.quicks
}

// armQuick starts the early go-back's wait afresh at now. It waits only
// while a gap a sequence error NAK reported is open (nakSet), which is
// when NAKs may be taken for stale: a path that is only slow never goes
// back early.
func (c *completer) armQuick(now time.Time) {
	if d := c.quickAfter(); d > 0 && c.nakSet {
		c.quickAt = now.Add(d)
	} else {
		c.quickAt = time.Time{}
	}
}

// backstop reports whether the early go-back can still come, should the
// answers stop: staleNAK's mistakes rely on it.
func (c *completer) backstop() bool { return c.quickAfter() > 0 && c.quicks < maxQuicks }

// goBack makes the requester send again from psn. A request being timed
// that goes again no longer measures a round trip (Karn's rule).
func (c *completer) goBack(psn wire.PSN) {
	if c.rttSet && c.rttPSN.Diff(psn) >= 0 {
		c.rttSet = false
	}
	c.sq.rewind(psn)
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

// sent starts the retransmit timer, if it is not running, for the request
// of PSN psn the requester sent at now, and times it if it is the first
// copy of its PSN and none is being timed.
func (c *completer) sent(psn wire.PSN, now time.Time) {
	if c.retryAt.IsZero() && c.attr.timeout > 0 {
		c.retryAt = now.Add(c.attr.timeout)
	}
	first := !c.sentAny || psn.Diff(c.hiSent) > 0
	if first {
		c.hiSent, c.sentAny = psn, true
	}
	if first && !c.rttSet {
		c.rttPSN, c.rttAt, c.rttSet = psn, now, true
	}
	c.armQuick(now)
	c.lastSent, c.quietSince = psn, now
	if c.nakSet {
		d := psn.Diff(c.nakPSN)
		if d == 0 || c.nakGoing {
			// nakPSN goes again (or the requester went back
			// further): what went after its last copy is behind it.
			c.nakBehind += c.nakAhead
			c.nakAhead, c.nakGoing = 0, false
		}
		if d > 0 {
			c.nakAhead++
		}
	}
}

// staleNAK reports whether the n-th sequence error NAK of nakPSN is one
// the responder sent before the latest copy of nakPSN reached it, so that
// going back again would only send twice what is on its way.
//
// The responder NAKs the first request it takes out of sequence and then
// again after every renakAfter more (in case the NAK was lost). Every
// request the requester sent after nakPSN and before nakPSN last went
// reaches the responder out of sequence, and so brings up to
// 1 + (k-1)/renakAfter NAKs of k such requests. The answers to the old
// window come in after the requester went back and resent part of it:
// without this count each would send that part again. A NAK beyond the
// count means the latest copy of nakPSN was lost too, and the requester
// goes back once more. Requests and NAKs lost on the way make the count
// too high, so a NAK of a lost copy may be taken for stale: the next one,
// renakAfter requests on, then goes back; or, if the window is full and
// none comes, the early go-back (quickAfter). With nothing more to send,
// or no early go-back left (see backstop: an infinite timeout, no round
// trip measured yet, a peer so slow that 4 round trips pass half the
// timeout, or maxQuicks spent), the caller goes back anyway. Linux rxe's
// responder NAKs once, which the count takes as it is.
func (c *completer) staleNAK(n int) bool {
	k := c.nakBehind
	return k > 0 && n <= 1+(k-1)/renakAfter
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
	c.armQuick(now) // the responder is there
	c.quietSince = now
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
			c.goBack(psn)
		case wire.KindNAK:
			c.ackThrough(psn.Add(0xffffff), now)
			switch syn {
			case wire.NAKPSNSequenceError:
				c.stats.add(verbs.CounterRcvdSeqErr, 1)
				// A repeated NAK for the PSN we went back to is the
				// responder asking again (renakAfter), not a new
				// error, and spends no retry; the retransmit timer
				// still bounds a peer that makes no progress. It
				// goes back again only if it is not one of those the
				// old window brought (staleNAK), and not while that
				// PSN has yet to go again anyway.
				if c.nakSet && c.nakPSN == psn {
					c.nakGot++
					if c.nakGoing || c.staleNAK(c.nakGot) && s.more() && c.backstop() {
						return
					}
				} else {
					if !c.useRetry() {
						c.failAt(psn, verbs.WCRetryExcErr)
						return
					}
					c.nakPSN, c.nakSet, c.nakGot = psn, true, 1
					c.nakBehind, c.nakAhead = 0, s.sentAfter(psn, c.lastSent)
				}
				c.nakGoing = true
				c.stats.add(verbs.CounterCompleterRetryErr, 1)
				c.goBack(psn)
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
	c.goBack(psn)
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
		if c.nakSet && newUna.Diff(c.nakPSN) > 0 {
			c.nakSet = false // that gap is closed: no NAK of it can come
			c.quickAt = time.Time{}
		}
	}
	if c.rttSet && a.Diff(c.rttPSN) >= 0 {
		rtt := now.Sub(c.rttAt)
		if c.srtt == 0 {
			c.srtt = rtt
		} else {
			c.srtt += (rtt - c.srtt) / 8
		}
		if c.minRTT == 0 || rtt < c.minRTT {
			first := c.minRTT == 0
			c.minRTT = max(rtt, time.Microsecond)
			if first {
				c.armQuick(now) // the first answer makes the early go-back possible
			}
		}
		c.rttSet = false
	}
	if advanced {
		c.madeProgress(now)
	}
}

// madeProgress resets the retry budget, restarts the retransmit timer and
// allows early go-backs again.
func (c *completer) madeProgress(now time.Time) {
	c.putOffs, c.quicks, c.tails = 0, 0, 0
	c.retries = c.attr.retryCnt
	c.rnrRetries = c.attr.rnrRetry
	if c.sq.una == c.sq.psn {
		c.quickAt = time.Time{}
	}
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
// could not have gone), up to maxPutOffs in a row, an early go-back that
// falls due waits afresh (nothing could go: no silence), and an RNR wait
// that is over ends, its resend left for when the link has room. None
// leaves a deadline behind that is already due.
func (c *completer) noRoom(now time.Time) {
	if c.rnrPending && !now.Before(c.rnrUntil) {
		c.rnrPending = false
	}
	if !c.quickAt.IsZero() && !now.Before(c.quickAt) {
		c.armQuick(now) // nothing could go: not a silence
	}
	if t := c.tailAt(); !t.IsZero() && !now.Before(t) {
		c.quietSince = now // nor for the tail probe
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
// retries run out; and, before that, the early go-back (quickAfter).
func (c *completer) onTimer(now time.Time) {
	s := c.sq
	if !s.inited || c.rnrPending {
		return // waiting out an RNR NAK: not a lost packet
	}
	if s.una == s.psn {
		c.retryAt, c.quickAt = time.Time{}, time.Time{}
		return
	}
	if t := c.tailAt(); !t.IsZero() && !now.Before(t) && (c.retryAt.IsZero() || now.Before(c.retryAt)) {
		if c.tailable() {
			c.tails++
			c.tailDue = true
			c.rttSet = false // its answer may be the probe's (Karn's rule)
		} else {
			c.tails = maxTails // none until the transport makes progress
		}
	}
	if c.retryAt.IsZero() || now.Before(c.retryAt) {
		if !c.quickAt.IsZero() && !now.Before(c.quickAt) {
			c.quickAt = time.Time{}
			if c.quicks < maxQuicks {
				c.quicks++
				c.stats.add(verbs.CounterCompleterRetryErr, 1)
				c.goBack(s.una)
			}
		}
		return
	}
	if !c.useRetry() {
		c.failAt(s.una, verbs.WCRetryExcErr)
		return
	}
	c.retryAt = now.Add(c.attr.timeout)
	c.stats.add(verbs.CounterCompleterRetryErr, 1)
	c.goBack(s.una)
}
