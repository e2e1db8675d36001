package rxe

import (
	"encoding/binary"
	"errors"
	"time"

	"github.com/rdmago/rdmago/internal/racesync"
	"github.com/rdmago/rdmago/rxe/wire"
	"github.com/rdmago/rdmago/verbs"
)

// receive handles one packet for this QP.
func (q *qp) receive(in *inPacket, now time.Time) {
	var p wire.Packet
	if err := p.Decode(in.buf); err != nil {
		q.receiveMalformed(in, err)
		return
	}
	op := p.OpCode()
	if q.datagram() {
		if op.Transport() == wire.TransportUD {
			q.receiveUD(&p, in)
		}
		return
	}
	if op.Transport() != q.transport() {
		return // wrong transport for this QP: silently dropped (IBTA C9-54)
	}
	if q.typ == verbs.QPTXRCSend && !op.IsResponse() || q.typ == verbs.QPTXRCRecv && op.IsResponse() {
		return // an XRC QP is only a requester or only a responder
	}
	switch q.st.state {
	case verbs.QPSReset, verbs.QPSInit, verbs.QPSErr:
		return
	}
	if in.src != q.st.dest {
		return // a connected QP takes packets from its peer only
	}
	if op.IsResponse() {
		if q.st.state == verbs.QPSRTR {
			return
		}
		q.complete(&p, now)
		return
	}
	q.respond(&p, in, now)
}

// receiveMalformed handles a packet Decode refused. A request whose
// length does not fit its opcode (a payload where the opcode has none, too
// short for its extended headers) is, on a reliable QP at the expected PSN,
// a length error: an invalid request (IBTA vol. 1 §9.7.5.1.3, responder
// class C), NAKed and fatal to the QP like any other. Everything else
// (a bad opcode or version, a response, another PSN) is dropped.
func (q *qp) receiveMalformed(in *inPacket, err error) {
	if !q.reliable() || len(in.buf) < wire.BTHLen ||
		!errors.Is(err, wire.ErrLength) && !errors.Is(err, wire.ErrTruncated) && !errors.Is(err, wire.ErrPadCount) {
		return
	}
	bth := wire.BTH(in.buf[:wire.BTHLen])
	op := bth.OpCode()
	if op.Transport() != q.transport() || op.IsResponse() || q.typ == verbs.QPTXRCSend || !q.resp.inited {
		return
	}
	switch q.st.state {
	case verbs.QPSReset, verbs.QPSInit, verbs.QPSErr:
		return
	}
	if in.src != q.st.dest || bth.PSN() != q.resp.epsn {
		return
	}
	q.fatalNAK(bth.PSN(), wire.NAKInvalidRequest, verbs.EventQPReqErr, "length")
}

// complete handles an acknowledgement or read response (the completer).
func (q *qp) complete(p *wire.Packet, now time.Time) {
	r := &q.req
	if !r.inited {
		return
	}
	psn := p.BTH.PSN()
	// Only responses to PSNs we sent and that are not yet acknowledged
	// count; the rest are stale duplicates.
	if psn.Diff(r.una) < 0 && !p.OpCode().IsReadResponse() || psn.Diff(r.psn) >= 0 {
		return
	}
	op := rcOp(p.OpCode())
	if op == wire.RCAcknowledge {
		syn := p.AETH.Syndrome()
		switch syn.Kind() {
		case wire.KindACK:
			q.ackThrough(psn, now)
		case wire.KindRNRNAK:
			q.count(verbs.CounterRcvdRNRErr, 1)
			q.ackThrough(psn.Add(0xffffff), now) // everything before psn
			if r.rnrRetries == 0 && q.st.rnrRetry != 7 {
				q.failAt(psn, verbs.WCRNRRetryExcErr)
				return
			}
			if q.st.rnrRetry != 7 {
				r.rnrRetries--
			}
			r.rnrPending = true
			r.rnrUntil = now.Add(wire.RNRTimerDuration(syn.Value()))
			// The peer answered: the transport is alive. Its retries
			// start afresh, and the retransmit timer waits until the
			// request goes again after the RNR wait.
			r.retries = q.st.retryCnt
			r.retryAt = time.Time{}
			q.rewind(psn)
		case wire.KindNAK:
			q.ackThrough(psn.Add(0xffffff), now)
			switch syn {
			case wire.NAKPSNSequenceError:
				q.count(verbs.CounterRcvdSeqErr, 1)
				// A repeated NAK for the PSN we went back to is the
				// responder asking again (renakAfter), not a new
				// error: resend without spending a retry. The
				// retransmit timer still bounds a peer that makes no
				// progress.
				if !(r.nakSet && r.nakPSN == psn) && !q.useRetry() {
					q.failAt(psn, verbs.WCRetryExcErr)
					return
				}
				r.nakPSN, r.nakSet = psn, true
				q.count(verbs.CounterCompleterRetryErr, 1)
				q.rewind(psn)
			case wire.NAKRemoteAccessError:
				q.failAt(psn, verbs.WCRemAccessErr)
			case wire.NAKRemoteOperational:
				q.failAt(psn, verbs.WCRemOpErr)
			default:
				q.failAt(psn, verbs.WCRemInvReqErr)
			}
		}
		return
	}
	// A read response or atomic acknowledgement: find its WQE.
	w := q.wqeAt(psn)
	if w == nil {
		return
	}
	if op == wire.RCAtomicAcknowledge {
		if !w.isReadOrAtomic() || w.wr.Opcode == verbs.WRRDMARead || psn != w.firstPSN || w.done {
			return
		}
		q.ackThrough(psn.Add(0xffffff), now)
		racesync.Sync()
		binary.NativeEndian.PutUint64(w.segs[0], p.AtomicAckETH.OrigData())
		racesync.Sync()
		w.done = true
		q.ackThrough(psn, now)
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
			q.resendFrom(want)
		}
		return
	}
	q.ackThrough(psn.Add(0xffffff), now)
	mtu := uint64(q.st.mtu)
	off := uint64(w.readDone) * mtu
	expect := min(mtu, w.length-min(w.length, off))
	lastPkt := w.readDone == w.npkts-1
	if uint64(len(p.Payload)) != expect || op.IsLast() != lastPkt {
		q.failAt(psn, verbs.WCBadRespErr)
		return
	}
	scatter(w.segs, off, p.Payload)
	w.readDone++
	r.progress = true
	if lastPkt {
		w.done = true
		q.ackThrough(psn, now)
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
func (q *qp) resendFrom(psn wire.PSN) {
	r := &q.req
	if r.gapSet && r.readGap == psn {
		// Asked already. Ask again only if so many later packets
		// have come since that the answer must have been lost.
		r.gapSeen++
		if r.gapSeen < reaskAfter {
			return
		}
	}
	if !q.useRetry() {
		q.failAt(psn, verbs.WCRetryExcErr)
		return
	}
	q.count(verbs.CounterCompleterRetryErr, 1)
	r.readGap, r.gapSet, r.gapSeen = psn, true, 0
	q.rewind(psn)
}

// useRetry spends one transport retry; false when none are left. A
// retry_cnt of 7 never runs out.
func (q *qp) useRetry() bool {
	if q.st.retryCnt == 7 {
		return true // 7 means retry forever, as in Linux rxe
	}
	r := &q.req
	if r.retries <= 0 {
		return false
	}
	r.retries--
	return true
}

// ackThrough retires what an acknowledgement of PSN a covers: SENDs and
// WRITEs whose last PSN is not after a. A READ or atomic it passes without
// its response lost that response: it is asked for again.
func (q *qp) ackThrough(a wire.PSN, now time.Time) {
	r := &q.req
	if a.Diff(r.una) < 0 {
		return
	}
	advanced := false
	for _, w := range q.sq {
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
				q.resendFrom(w.firstPSN.Add(w.readDone))
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
	for _, w := range q.sq {
		if !w.started {
			break
		}
		if w.done {
			if end := w.lastPSN().Add(1); end.Diff(newUna) > 0 && end.Diff(r.psn) <= 0 {
				newUna = end
			}
			continue
		}
		if w.isReadOrAtomic() && newUna.Diff(w.firstPSN) >= 0 {
			newUna = w.firstPSN.Add(w.readDone)
		}
		break
	}
	if newUna.Diff(r.una) > 0 {
		r.una = newUna
		advanced = true
	}
	if advanced {
		q.madeProgress(now)
	}
}

// madeProgress resets the retry budget and restarts the retransmit timer.
func (q *qp) madeProgress(now time.Time) {
	r := &q.req
	r.retries = q.st.retryCnt
	r.rnrRetries = q.st.rnrRetry
	if r.una == r.psn || q.st.timeout == 0 {
		r.retryAt = time.Time{}
	} else {
		r.retryAt = now.Add(q.st.timeout)
	}
}

// wqeAt returns the started WQE whose PSN range holds psn.
func (q *qp) wqeAt(psn wire.PSN) *sendWQE {
	for _, w := range q.sq {
		if !w.started {
			return nil
		}
		if psn.Diff(w.firstPSN) >= 0 && psn.Diff(w.lastPSN()) <= 0 {
			return w
		}
	}
	return nil
}

// rewind makes the requester send again from PSN psn (go-back-N): the WQE
// holding it resumes there and every later one starts over. It never
// moves the send position forward, nor una, which only ACKs advance.
func (q *qp) rewind(psn wire.PSN) {
	r := &q.req
	for i, w := range q.sq {
		if !w.started {
			return
		}
		if w.done || w.lastPSN().Diff(psn) < 0 {
			continue
		}
		if i < r.next {
			r.next = i
		}
		switch d := psn.Diff(w.firstPSN); {
		case w.isReadOrAtomic() || d <= 0:
			w.sent = 0
		case w.sent > uint32(d):
			w.sent = uint32(d)
		}
		for _, x := range q.sq[i+1:] {
			if !x.started {
				break
			}
			x.sent = 0
		}
		return
	}
}

// failAt completes the WQE holding psn with status and fails the QP.
func (q *qp) failAt(psn wire.PSN, status verbs.WCStatus) {
	switch status {
	case verbs.WCRetryExcErr:
		q.count(verbs.CounterRetryExceededErr, 1)
	case verbs.WCRNRRetryExcErr:
		q.count(verbs.CounterRetryRNRExceededErr, 1)
	}
	if w := q.wqeAt(psn); w != nil {
		w.done, w.status = true, status
	} else {
		for _, w := range q.sq {
			if !w.done {
				w.done, w.status = true, status
				break
			}
		}
	}
	q.toError()
}

// onTimer handles the retransmit timer: resend from the oldest
// unacknowledged PSN, or fail with RETRY_EXC_ERR when retries run out.
func (q *qp) onTimer(now time.Time) {
	r := &q.req
	if r.rnrPending {
		return // waiting out an RNR NAK: not a lost packet
	}
	if r.retryAt.IsZero() || now.Before(r.retryAt) || r.una == r.psn {
		if r.una == r.psn {
			r.retryAt = time.Time{}
		}
		return
	}
	if !q.useRetry() {
		q.failAt(r.una, verbs.WCRetryExcErr)
		return
	}
	r.retryAt = now.Add(q.st.timeout)
	q.count(verbs.CounterCompleterRetryErr, 1)
	q.rewind(r.una)
}
