package rxe

import (
	"errors"
	"net/netip"
	"time"

	"github.com/rdmago/rdmago/rxe/link"
	"github.com/rdmago/rdmago/rxe/wire"
	"github.com/rdmago/rdmago/verbs"
)

// A QP's execution: who runs its steps (the owner goroutine, or a caller
// that polls), one step of the requester, completer and responder, the
// outgoing packets and their timer, and the receive path.

// ensureOwner starts the owner goroutine unless it was started (or the
// QP torn down).
func (q *qp) ensureOwner() {
	if !q.owner.Load() && q.owner.CompareAndSwap(false, true) {
		go q.run()
	}
}

// kick wakes the owner, starting it if need be; it never blocks.
func (q *qp) kick() {
	q.ensureOwner()
	select {
	case q.wake <- struct{}{}:
	default:
	}
}

// deliver queues a received packet for the owner, waking it if wake. It
// reports whether the QP took the buffer (false: the QP is gone and the
// caller keeps it).
func (q *qp) deliver(p inPacket, wake bool) bool {
	q.mu.Lock()
	if q.destroyed {
		q.mu.Unlock()
		return false
	}
	q.inbox = append(q.inbox, p)
	q.mu.Unlock()
	if wake {
		q.kick()
	}
	return true
}

// poke has the QP's new work done (what was posted or delivered): under
// manual progress (verbs.ProgressManual) at once, on the calling
// goroutine, unless the owner is at it already; otherwise by the owner.
// QP1 (GSI) is stepped at once too: it carries management datagrams one
// at a time, each awaited (the connection manager's Disconnect waits for
// its DREQ to leave), so the owner's wake-up would only add to the wait,
// and the kernel's MAD layer, likewise, posts to the hardware from the
// sender's thread. The caller holds no lock of the QP's.
func (q *qp) poke() {
	if !q.ctx.manual.Load() && q.typ != verbs.QPTGSI {
		q.kick()
		return
	}
	q.stepHereTold(false)
}

// stepHere runs the owner's step on the calling goroutine, unless the
// owner (or another goroutine) is at it already; then it wakes the owner,
// which steps again once it is done. polled says a CQ poller delivered
// packets to the QP (manual progress). The caller holds no lock of the
// QP's. It reports whether the step was QP1's and completed receives: the
// caller then tells the connection manager (device.tellQP1), or has it
// told (tellQP1Later).
func (q *qp) stepHere(polled bool) (qp1Received bool) {
	if !q.stepMu.TryLock() {
		q.kick()
		return false
	}
	select {
	case <-q.done:
		q.stepMu.Unlock()
		return false // destroyed: its owner has let go of everything
	default:
	}
	q.step(q.hw.clock.now(), polled)
	tell := q.takeReceived()
	q.stepMu.Unlock()
	return tell
}

// stepHereTold is stepHere for a goroutine that posts or modifies: if
// QP1 received, the connection manager is told on a goroutine of its own.
// Its handling may post to QP1 (the poster may be its own MAD poster) or
// destroy it, and must not wait behind the caller.
func (q *qp) stepHereTold(polled bool) {
	if q.stepHere(polled) {
		q.hw.dev.tellQP1Later()
	}
}

// takeReceived reports whether the step just run was QP1's and completed
// a receive, which the device then tells the connection manager of
// (device.OnQP1Receive), once stepMu is let go. Called with stepMu held.
func (q *qp) takeReceived() bool {
	r := q.received && q.typ == verbs.QPTGSI
	q.received = false
	return r
}

// event reports an asynchronous event on this QP.
func (q *qp) event(t verbs.EventType) {
	for _, e := range q.eventSinks() {
		e.Event(t, q.num, 1)
	}
}

// run is the owner goroutine.
func (q *qp) run() {
	defer close(q.exited)
	var tc <-chan time.Time // the timer's, taken in the first step after armTimer made it
	for {
		fired := false
		select {
		case <-q.wake:
		case <-tc:
			fired = true
		case <-q.done:
			q.stepMu.Lock() // a poster or poller may be stepping
			defer q.stepMu.Unlock()
			q.stopOwner()
			return
		}
		q.stepMu.Lock()
		if fired {
			q.timerAt = time.Time{} // armTimer sets it again
		}
		q.step(q.hw.clock.now(), false)
		if tc == nil && q.timer != nil {
			tc = q.timer.ch()
		}
		tell := q.takeReceived()
		q.stepMu.Unlock()
		if tell {
			// Not here: the connection manager's handling may
			// destroy QP1, which waits for this goroutine to end.
			q.hw.dev.tellQP1Later()
		}
	}
}

// stopOwner is the owner's last work, once the QP is destroyed (stepMu
// held).
func (q *qp) stopOwner() {
	// The program saw the data; the peer still waits for the ACK that
	// says so.
	q.sendHeldAck(q.hw.clock.now(), true)
	q.mu.Lock()
	inbox := q.inbox
	q.inbox = nil
	q.mu.Unlock()
	for _, p := range inbox {
		if p.buf != nil {
			q.hw.putBuf(p.buf)
		}
	}
	if q.timer != nil {
		q.timer.stop()
	}
}

// step takes what arrived and was posted and does all the work it allows.
// polled says a CQ poller delivered the packets and runs the step: it may
// hold the ACK back (flushAck).
func (q *qp) step(now time.Time, polled bool) {
	q.mu.Lock()
	pend := q.pending
	q.pending = pendingOps{}
	if pend.reset || pend.flush {
		// An ACK held from the last step is owed for what came before
		// the RESET or ERR: it goes now, with the attributes it was
		// made under.
		q.sendHeldAck(now, true)
	}
	q.snapshot()
	q.work, q.inbox = q.inbox, q.work[:0]
	if pend.reset {
		// Before taking what was posted since the reset.
		q.resetOwner()
	}
	q.epochSeen = q.epoch
	q.sq.wqes = append(q.sq.wqes, q.posted...)
	clear(q.posted)
	q.posted = q.posted[:0]
	q.mu.Unlock()

	if q.st.state != verbs.QPSSQD {
		q.drainedSent = false
	}
	if pend.resetResp {
		q.resp.reset(q.st.rqPSN)
	}
	if pend.resetReq {
		q.sq.reset(q.st.sqPSN)
		q.req.reset()
		q.comp.reset()
		q.drainedSent = false
	}
	room := q.hw.sendRoom(q)
	q.resp.beginStep(now, len(q.work) > 0 && !pend.reset, room)
	rcvd := uint64(0) // counted once per step: two atomic adds, not two per packet
	for i := range q.work {
		p := &q.work[i]
		if p.fn != nil {
			p.fn()
			p.fn = nil
			continue
		}
		if !pend.reset {
			rcvd++
			q.receive(p, now)
		}
		q.hw.putBuf(p.buf)
		p.buf = nil
	}
	if rcvd > 0 {
		q.count(verbs.CounterRcvdPkts, rcvd)
	}
	q.resp.endStep(now, polled, rcvd > 0)
	if q.st.state == verbs.QPSErr {
		q.flush()
	} else {
		if pend.flush {
			q.flush()
		}
		q.sendSide(now, room)
		if q.st.state == verbs.QPSErr {
			q.flush() // a local error just now: flush what is left
		}
	}
	if q.resp.held && q.outLen() > 0 {
		q.resp.flushAck(now, false, true) // something goes anyway: the ACK rides along
	}
	q.sendOut()
	q.armTimer(now)
}

// sendSide runs the send side of a step: the completer's timer, the
// requester, and the completions both leave. Retiring first frees room
// under max_rd_atomic for the requester; retiring after completes what
// finished as it went out (UC, UD, local operations, local errors). The
// requester builds nothing while the link has no room (hw.sendRoom).
func (q *qp) sendSide(now time.Time, room bool) {
	if room {
		q.comp.onTimer(now)
	} else {
		q.comp.noRoom(now)
	}
	q.retire()
	if room {
		q.req.sendMore(now)
	}
	if q.req.takeBuilt() {
		q.resp.unanswered = false // the program answers: its ACKs may wait for it
	}
	q.retire()
	q.checkDrained()
}

// sendHeldAck sends the ACK a polled step held, if there is one (stepMu
// held): at once if final (RESET, ERR, Destroy: nothing goes after it),
// otherwise as any ACK goes (responder.flushHeld).
func (q *qp) sendHeldAck(now time.Time, final bool) {
	if q.resp.held {
		q.resp.flushHeld(now, final)
		q.sendOut()
	}
}

// snapshot copies the attributes the owner needs (q.mu held).
func (q *qp) snapshot() {
	a := &q.attr
	s := &q.st
	s.state = a.QPState
	s.mtu = a.PathMTU.Bytes()
	if q.datagram() {
		s.mtu = q.hw.mtu.Bytes()
	}
	s.destQP = a.DestQPNum
	s.dest = a.AHAttr.GRH.DGID.Addr()
	s.sgid = int(a.AHAttr.GRH.SGIDIndex)
	s.timeout = 0
	if a.Timeout > 0 {
		s.timeout = time.Duration(4096<<a.Timeout) * time.Nanosecond
	}
	s.retryCnt = int(a.RetryCnt)
	s.rnrRetry = int(a.RNRRetry)
	s.minRNR = a.MinRNRTimer
	s.maxRdAtomic = max(int(a.MaxRdAtomic), 1)
	s.maxDestRd = max(int(a.MaxDestRdAtomic), 1)
	s.access = a.QPAccessFlags
	s.qkey = a.QKey
	s.rqPSN = wire.PSN(a.RQPSN)
	s.sqPSN = wire.PSN(a.SQPSN)
}

// resetOwner drops all protocol state (the QP went to RESET).
func (q *qp) resetOwner() {
	q.sq.clear()
	q.req.reset()
	q.comp.reset()
	q.resp.clear()
	q.drainedSent = false
}

// toError moves the QP to ERR from the owner.
func (q *qp) toError() {
	q.mu.Lock()
	if q.attr.QPState != verbs.QPSReset {
		q.attr.QPState = verbs.QPSErr
	}
	q.mu.Unlock()
	q.st.state = verbs.QPSErr
}

// flush completes every outstanding WQE with WR_FLUSH_ERR (the QP is in
// ERR), keeping the status of one that already failed.
func (q *qp) flush() {
	q.sq.failAll(verbs.WCWRFlushErr)
	q.retire()
	q.mu.Lock()
	flushed := q.rq.takeAll(nil)
	lastWQE := q.srq != nil && !q.lastWQESent
	q.lastWQESent = true
	q.mu.Unlock()
	if r := q.resp.recv; r != nil {
		// The message being received when the QP failed.
		q.pushRecv(q.resp.xsrq, verbs.WC{WRID: r.wrid, Status: verbs.WCWRFlushErr, Opcode: verbs.WCRecv, QPNum: q.num}, false)
	}
	for _, id := range flushed {
		q.pushRecv(nil, verbs.WC{WRID: id, Status: verbs.WCWRFlushErr, Opcode: verbs.WCRecv, QPNum: q.num}, false)
	}
	q.resp.abortMessage()
	if lastWQE {
		// A QP on an SRQ takes no more of its WQEs (IBTA 11.6.3).
		q.event(verbs.EventQPLastWQEReached)
	}
}

// queueOutTo returns a packet buffer of the out batch to build into, for
// addr from the link of GID index sgid. The first packet of a step
// borrows a batch from the device (hw.getOut).
func (q *qp) queueOutTo(addr netip.Addr, sgid int) *link.Packet {
	if q.out == nil {
		q.out = q.hw.getOut()
	}
	b := q.out
	if len(b.pkts) == cap(b.pkts) || len(b.pkts) > 0 && sgid != q.outSGID {
		q.flushOut()
	}
	q.outSGID = sgid
	i := len(b.pkts)
	if b.bufs[i] == nil {
		b.bufs[i] = make([]byte, 0, maxPacket)
	}
	b.pkts = b.pkts[:i+1]
	p := &b.pkts[i]
	p.Buf = b.bufs[i][:0]
	p.Addr = addr
	return p
}

// hasRoom sends what the step has built so far and reports whether the
// QP's links still have room for more (hw.sendRoom); if not, the QP is
// kicked once they have.
func (q *qp) hasRoom() bool {
	q.flushOut()
	return q.hw.sendRoom(q)
}

// outLen is how many packets the out batch holds.
func (q *qp) outLen() int {
	if q.out == nil {
		return 0
	}
	return len(q.out.pkts)
}

// flushOut sends the out batch; the QP keeps the batch for more.
func (q *qp) flushOut() {
	n := q.outLen()
	if n == 0 {
		return
	}
	q.count(verbs.CounterSentPkts, uint64(n))
	if err := q.hw.send(q.outSGID, q.out.pkts); err != nil {
		q.count(verbs.CounterSendErr, 1)
	}
	q.out.pkts = q.out.pkts[:0]
}

// sendOut sends the out batch and gives it back to the device: the step's
// sending is over.
func (q *qp) sendOut() {
	if q.out == nil {
		return
	}
	q.flushOut()
	q.hw.putOut(q.out)
	q.out = nil
}

// armTimer makes sure the owner's timer fires by the next deadline: the
// completer's (retransmission, the end of an RNR wait) or a held ACK's. It
// moves the timer only to an earlier time. A deadline that went away or
// moved later (every ACK moves the retransmit deadline) leaves the timer
// as it is, to fire early into a step that finds nothing due and sets it
// again: starting and stopping a runtime timer each step would wake an
// idle thread of the scheduler each time.
func (q *qp) armTimer(now time.Time) {
	if !now.Before(q.timerAt) {
		q.timerAt = time.Time{} // it fired, or is about to
	}
	d := q.deadline()
	if d.IsZero() || !q.timerAt.IsZero() && !d.Before(q.timerAt) {
		return
	}
	q.timerAt = d
	if q.timer == nil {
		// The QP's first deadline. The owner, which may already wait
		// with no timer, is woken to take the timer's channel.
		q.timer = q.hw.clock.newTimer()
		q.timer.reset(max(d.Sub(now), time.Microsecond))
		q.kick()
		return
	}
	q.ensureOwner() // the owner waits for the timer
	q.timer.reset(max(d.Sub(now), time.Microsecond))
}

// deadline returns when the owner must next step (zero: no time is
// awaited).
func (q *qp) deadline() time.Time {
	var d time.Time
	if q.st.state == verbs.QPSRTS || q.st.state == verbs.QPSSQD {
		d = q.comp.deadline() // only a sending requester waits for time
	}
	if a := q.resp.deadline(); !a.IsZero() && (d.IsZero() || a.Before(d)) {
		d = a
	}
	return d
}

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
		q.comp.complete(&p, now)
		return
	}
	q.resp.respond(&p, now)
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
	q.resp.fatalNAK(bth.PSN(), wire.NAKInvalidRequest, verbs.EventQPReqErr, "length")
}
