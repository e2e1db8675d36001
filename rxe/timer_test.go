package rxe

import (
	"fmt"
	"testing"
	"time"

	"github.com/rdmago/rdmago/rxe/wire"
	"github.com/rdmago/rdmago/verbs"
)

// The engine's timers, on a fake clock: each is checked a microsecond
// before its deadline, where nothing may happen, and at it. The peer is
// the test's (peer_test.go); the device's QP runs its step on the test's
// goroutine (stepNow) at the time the test set.

// timeoutCode is the QP timeout of these tests: 4.096 µs << 14 = 67.1 ms.
const timeoutCode = 14

var timeoutAt14 = time.Duration(4096<<timeoutCode) * time.Nanosecond

// postSend posts a signaled 8-byte SEND with wrid from the start of e's
// buffer.
func postSend(t *testing.T, e *end, wrid uint64) {
	t.Helper()
	if err := e.qp.PostSend([]verbs.SendWR{{WRID: wrid, Opcode: verbs.WRSend, SendFlags: verbs.SendSignaled, SGList: []verbs.SGE{e.mr.SGE(0, 8)}}}); err != nil {
		t.Fatal(err)
	}
}

// expectNoCompletion fails t if e's CQ holds a completion.
func expectNoCompletion(t *testing.T, e *end, when string) {
	t.Helper()
	wcs := make([]verbs.WC, 4)
	if n, _ := e.cq.Poll(wcs); n > 0 {
		t.Fatalf("%s: completions %s, want none yet", when, describe(wcs[:n]))
	}
}

// A request nobody acknowledges is sent again exactly one timeout
// (4.096 µs << timeout) after it went, and again each timeout after that;
// with retry_cnt spent, the next timeout fails it with RETRY_EXC_ERR.
// Nothing happens a microsecond earlier.
func TestRetransmitTimerFiresAtItsDeadlineNotBefore(t *testing.T) {
	const retries = 2
	p, clk, q := newTimedPeer(t, 101, func(o *pairOpts) { o.timeout, o.retry = timeoutCode, retries })
	t0 := clk.now()
	postSend(t, p.e, 1)
	p.expectPacket(wire.RCSendOnly, 0)
	stepNow(q)
	expectDeadline(t, clk, q, t0.Add(timeoutAt14), t0, "after the send")
	for try := 1; try <= retries; try++ {
		deadline := t0.Add(time.Duration(try) * timeoutAt14)
		clk.set(deadline.Add(-time.Microsecond))
		stepNow(q)
		expectCount(t, q, verbs.CounterCompleterRetryErr, uint64(try-1), fmt.Sprintf("1 µs before timeout %d", try))
		p.expectNoPacket(fmt.Sprintf("1 µs before timeout %d", try))
		clk.set(deadline)
		if try > 1 {
			stepNow(q)
		} // else the owner goroutine, woken by its timer, sends it
		p.expectPacket(wire.RCSendOnly, 0)
		expectCount(t, q, verbs.CounterCompleterRetryErr, uint64(try), fmt.Sprintf("at timeout %d", try))
		expectDeadline(t, clk, q, deadline.Add(timeoutAt14), t0, fmt.Sprintf("after retry %d", try))
	}
	last := t0.Add((retries + 1) * timeoutAt14)
	clk.set(last.Add(-time.Microsecond))
	stepNow(q)
	expectNoCompletion(t, p.e, "1 µs before the last timeout")
	clk.set(last)
	stepNow(q)
	wcs := p.e.wait(1, 5*time.Second)
	if wcs[0].WRID != 1 || wcs[0].Status != verbs.WCRetryExcErr {
		t.Fatalf("completion %s, want wr_id 1 failed with RETRY_EXC_ERR", describe(wcs))
	}
	expectCount(t, q, verbs.CounterRetryExceededErr, 1, "after the last timeout")
	p.expectNoPacket("after the retries ran out")
	expectDeadline(t, clk, q, time.Time{}, t0, "in ERR")
}

// An ACK that covers some of what is outstanding restarts the timer from
// the ACK's arrival: the rest is resent one timeout after that, not after
// the first send. An ACK of everything stops the timer.
func TestAcknowledgementRestartsTheRetransmitTimer(t *testing.T) {
	p, clk, q := newTimedPeer(t, 102, func(o *pairOpts) { o.timeout = timeoutCode })
	t0 := clk.now()
	postSend(t, p.e, 1)
	postSend(t, p.e, 2)
	p.expectPacket(wire.RCSendOnly, 0)
	p.expectPacket(wire.RCSendOnly, 1)

	half := t0.Add(timeoutAt14 / 2)
	clk.set(half)
	p.send(wire.Headers{BTH: wire.BTHFields{OpCode: wire.RCAcknowledge, PSN: 0}, Syndrome: wire.SyndromeACKUnlimited, MSN: 1}, nil, nil)
	if wcs := p.e.wait(1, 5*time.Second); wcs[0].WRID != 1 || wcs[0].Status != verbs.WCSuccess {
		t.Fatalf("completion %s, want wr_id 1", describe(wcs))
	}
	stepNow(q)
	expectDeadline(t, clk, q, half.Add(timeoutAt14), t0, "after the ACK")
	clk.set(t0.Add(timeoutAt14)) // the first send's deadline: no longer one
	stepNow(q)
	expectCount(t, q, verbs.CounterCompleterRetryErr, 0, "at the first send's deadline")
	p.expectNoPacket("at the first send's deadline")
	clk.set(half.Add(timeoutAt14))
	stepNow(q)
	p.expectPacket(wire.RCSendOnly, 1)

	p.send(wire.Headers{BTH: wire.BTHFields{OpCode: wire.RCAcknowledge, PSN: 1}, Syndrome: wire.SyndromeACKUnlimited, MSN: 2}, nil, nil)
	p.e.wait(1, 5*time.Second)
	stepNow(q)
	expectDeadline(t, clk, q, time.Time{}, t0, "with nothing outstanding")
}

// An RNR NAK holds the request back for the time its timer code gives
// (IBTA 9.7.5.2.8), then sends it again; the retransmit timer does not run
// meanwhile, and starts over when the request goes again. With rnr_retry
// spent, the next RNR NAK fails the request with RNR_RETRY_EXC_ERR.
func TestRNRNAKWaitsOutItsTimerThenResends(t *testing.T) {
	const rnrCode = 14 // 1.92 ms: well under the retransmit timeout
	p, clk, q := newTimedPeer(t, 103, func(o *pairOpts) { o.timeout, o.rnrRetry = timeoutCode, 1 })
	rnrWait := wire.RNRTimerDuration(rnrCode)
	postSend(t, p.e, 1)
	p.expectPacket(wire.RCSendOnly, 0)

	clk.advance(time.Millisecond)
	t1 := clk.now()
	p.send(wire.Headers{BTH: wire.BTHFields{OpCode: wire.RCAcknowledge, PSN: 0}, Syndrome: wire.RNRNAKSyndrome(rnrCode), MSN: 0}, nil, nil)
	waitCount(t, q, verbs.CounterRcvdRNRErr, 1)
	stepNow(q)
	expectDeadline(t, clk, q, t1.Add(rnrWait), t1, "after the RNR NAK")
	sent := q.stats[verbs.CounterSentPkts].Load()
	clk.set(t1.Add(rnrWait - time.Microsecond))
	stepNow(q)
	expectCount(t, q, verbs.CounterSentPkts, sent, "1 µs before the RNR wait ends")
	p.expectNoPacket("1 µs before the RNR wait ends")
	clk.set(t1.Add(rnrWait))
	stepNow(q)
	p.expectPacket(wire.RCSendOnly, 0)
	expectDeadline(t, clk, q, t1.Add(rnrWait+timeoutAt14), t1, "after the RNR resend")
	expectCount(t, q, verbs.CounterCompleterRetryErr, 0, "after the RNR resend")

	p.send(wire.Headers{BTH: wire.BTHFields{OpCode: wire.RCAcknowledge, PSN: 0}, Syndrome: wire.RNRNAKSyndrome(rnrCode), MSN: 0}, nil, nil)
	wcs := p.e.wait(1, 5*time.Second)
	if wcs[0].WRID != 1 || wcs[0].Status != verbs.WCRNRRetryExcErr {
		t.Fatalf("completion %s, want wr_id 1 failed with RNR_RETRY_EXC_ERR", describe(wcs))
	}
}

// The responder folds the acknowledgements a batch of requests asks for
// into one, of the batch's last PSN (ack_deferred counts the others): the
// packets one step takes in get one ACK, whatever the clock.
func TestResponderAcknowledgesABatchOnce(t *testing.T) {
	const n = 4
	p, _, q := newTimedPeer(t, 104, nil)
	for i := range n {
		if err := p.e.qp.PostRecv([]verbs.RecvWR{{WRID: uint64(i), SGList: []verbs.SGE{p.e.mr.SGE(i*64, 64)}}}); err != nil {
			t.Fatal(err)
		}
	}
	q.stepMu.Lock() // no step runs until the whole batch is in
	for i := range n {
		pkt, err := wire.AppendPacket(nil, &wire.Headers{BTH: wire.BTHFields{OpCode: wire.RCSendOnly, PKey: wire.DefaultPKey, DestQP: q.num, PSN: wire.PSN(i), AckReq: true}}, []byte("8 bytes!"))
		if err != nil {
			t.Fatal(err)
		}
		buf := q.hw.getBuf()[:len(pkt)]
		copy(buf, pkt)
		q.deliver(inPacket{buf: buf, src: p.addr}, false)
	}
	sent := q.stats[verbs.CounterSentPkts].Load()
	q.step(q.hw.clock.now(), false)
	q.stepMu.Unlock()
	expectCount(t, q, verbs.CounterSentPkts, sent+1, "after the batch")
	expectCount(t, q, verbs.CounterAckDeferred, n-1, "after the batch")
	p.expectAck(n-1, wire.SyndromeACKUnlimited)
	p.expectNoPacket("after the batch's ACK")
	if wcs := p.e.wait(n, 5*time.Second); len(wcs) != n {
		t.Fatalf("%d receive completions, want %d", len(wcs), n)
	}
}

// A long READ is answered maxReadBurst packets per step, so that one
// request does not hold the QP's other work back; the rest follows, in
// order, in the steps after.
func TestResponderPacesALongRead(t *testing.T) {
	const npkts = maxReadBurst + 40
	p, _, q := newTimedPeer(t, 105, nil)
	mtu := uint32(verbs.MTU1024.Bytes())
	pkt, err := wire.AppendPacket(nil, &wire.Headers{BTH: wire.BTHFields{OpCode: wire.RCReadRequest, PKey: wire.DefaultPKey, DestQP: q.num, PSN: 0, AckReq: true},
		RETH: wire.RETHFields{VA: p.e.mr.Addr(), RKey: p.e.mr.RKey(), DMALen: npkts * mtu}}, nil)
	if err != nil {
		t.Fatal(err)
	}
	q.stepMu.Lock()
	buf := q.hw.getBuf()[:len(pkt)]
	copy(buf, pkt)
	q.deliver(inPacket{buf: buf, src: p.addr}, false)
	sent := q.stats[verbs.CounterSentPkts].Load()
	q.step(q.hw.clock.now(), false)
	took := q.stats[verbs.CounterSentPkts].Load() - sent
	q.stepMu.Unlock()
	if took != maxReadBurst {
		t.Fatalf("the step that took the READ sent %d packets, want %d", took, maxReadBurst)
	}
	p.expectReadResponses(0, npkts)
}

// expectReadResponses reads the n packets of a READ response from PSN
// first, in order.
func (p *peer) expectReadResponses(first wire.PSN, n int) {
	p.t.Helper()
	for k := range n {
		op := wire.RCReadResponseMiddle
		switch k {
		case 0:
			op = wire.RCReadResponseFirst
		case n - 1:
			op = wire.RCReadResponseLast
		}
		p.expectPacket(op, first.Add(uint32(k)))
	}
}

// deliverSend hands q a SEND ONLY of PSN psn asking for an ACK, as the
// receive loop would, without running the QP.
func deliverSend(t *testing.T, p *peer, q *qp, psn wire.PSN) {
	t.Helper()
	pkt, err := wire.AppendPacket(nil, &wire.Headers{BTH: wire.BTHFields{OpCode: wire.RCSendOnly, PKey: wire.DefaultPKey, DestQP: q.num, PSN: psn, AckReq: true}}, []byte("8 bytes!"))
	if err != nil {
		t.Fatal(err)
	}
	buf := q.hw.getBuf()[:len(pkt)]
	copy(buf, pkt)
	q.deliver(inPacket{buf: buf, src: p.addr}, false)
}

// A step a CQ poller runs (manual progress) holds the ACK of what it
// received: it leaves with the QP's next send, before the next packets are
// taken in, when the QP is destroyed, reset or fails, or ackHold later. A
// step the receive loop or the owner runs sends it at once.
func TestPolledStepHoldsItsACKUntilTheNextSendOrAckHold(t *testing.T) {
	for _, release := range []string{"timer", "send", "next packet", "destroy", "reset", "error", "not polled"} {
		t.Run(release, func(t *testing.T) {
			p, clk, q := newTimedPeer(t, 106, nil)
			for i := range 2 {
				if err := p.e.qp.PostRecv([]verbs.RecvWR{{WRID: uint64(i), SGList: []verbs.SGE{p.e.mr.SGE(i*64, 64)}}}); err != nil {
					t.Fatal(err)
				}
			}
			t0 := clk.now()
			q.stepMu.Lock()
			deliverSend(t, p, q, 0)
			q.step(t0, release != "not polled")
			q.stepMu.Unlock()
			if release == "not polled" {
				p.expectAck(0, wire.SyndromeACKUnlimited)
				expectDeadline(t, clk, q, time.Time{}, t0, "after a step the receive loop ran")
				return
			}
			p.expectNoPacket("after the poller's step")
			expectDeadline(t, clk, q, t0.Add(ackHold), t0, "with the ACK held")
			switch release {
			case "timer":
				clk.set(t0.Add(ackHold - time.Microsecond))
				stepNow(q)
				p.expectNoPacket("1 µs before the hold ends")
				clk.set(t0.Add(ackHold))
				stepNow(q)
				p.expectAck(0, wire.SyndromeACKUnlimited)
			case "send":
				postSend(t, p.e, 9)
				stepNow(q)
				p.expectPacket(wire.RCSendOnly, 0)
				p.expectAck(0, wire.SyndromeACKUnlimited)
			case "next packet":
				// The held ACK goes first, and the next packet's
				// own rides along with it.
				q.stepMu.Lock()
				deliverSend(t, p, q, 1)
				q.step(t0, true)
				q.stepMu.Unlock()
				p.expectAck(0, wire.SyndromeACKUnlimited)
				p.expectAck(1, wire.SyndromeACKUnlimited)
			case "destroy", "reset", "error":
				// The program may have seen the data and gone: the
				// peer still gets its ACK, at once.
				switch release {
				case "destroy":
					q.Destroy()
				case "reset", "error":
					st := map[string]verbs.QPState{"reset": verbs.QPSReset, "error": verbs.QPSErr}[release]
					if err := p.e.qp.Modify(&verbs.QPAttr{QPState: st}, verbs.QPAttrState); err != nil {
						t.Fatal(err)
					}
					stepNow(q)
				}
				p.expectAck(0, wire.SyndromeACKUnlimited)
				p.expectNoPacket("after the QP was " + release)
				return
			}
			p.expectNoPacket("after the held ACK went")
			want := time.Time{}
			if release == "send" {
				want = t0.Add(time.Duration(4096<<12) * time.Nanosecond) // the SEND's retransmit timeout
			}
			expectDeadline(t, clk, q, want, t0, "after the held ACK went")
		})
	}
}

// A held ACK goes before what the next packets bring: ahead of the
// responses to a long READ that came after it, which stay paced at
// maxReadBurst per step.
func TestHeldACKGoesBeforeTheNextPacketsResponses(t *testing.T) {
	const npkts = 2 * maxReadBurst // 1 MiB, the whole region
	p, clk, q := newTimedPeer(t, 108, nil)
	if err := p.e.qp.PostRecv([]verbs.RecvWR{{WRID: 1, SGList: []verbs.SGE{p.e.mr.SGE(0, 64)}}}); err != nil {
		t.Fatal(err)
	}
	q.stepMu.Lock()
	deliverSend(t, p, q, 0)
	q.step(clk.now(), true)
	mtu := uint32(verbs.MTU1024.Bytes())
	pkt, err := wire.AppendPacket(nil, &wire.Headers{BTH: wire.BTHFields{OpCode: wire.RCReadRequest, PKey: wire.DefaultPKey, DestQP: q.num, PSN: 1, AckReq: true},
		RETH: wire.RETHFields{VA: p.e.mr.Addr(), RKey: p.e.mr.RKey(), DMALen: npkts * mtu}}, nil)
	if err != nil {
		q.stepMu.Unlock()
		t.Fatal(err)
	}
	buf := q.hw.getBuf()[:len(pkt)]
	copy(buf, pkt)
	q.deliver(inPacket{buf: buf, src: p.addr}, false)
	sent := q.stats[verbs.CounterSentPkts].Load()
	q.step(clk.now(), true)
	took := q.stats[verbs.CounterSentPkts].Load() - sent
	q.stepMu.Unlock()
	if took != maxReadBurst+1 {
		t.Errorf("the step sent %d packets, want the held ACK and maxReadBurst = %d READ responses", took, maxReadBurst)
	}
	p.expectAck(0, wire.SyndromeACKUnlimited)
	p.expectReadResponses(1, npkts) // the rest follow in later steps, in order
}

// A QP whose program did not answer while its ACK was held sends the next
// ACK at once; once it sends a request again, its ACKs wait once more.
func TestUnansweredQPStopsHoldingItsACKs(t *testing.T) {
	p, clk, q := newTimedPeer(t, 109, nil)
	for i := range 3 {
		if err := p.e.qp.PostRecv([]verbs.RecvWR{{WRID: uint64(i), SGList: []verbs.SGE{p.e.mr.SGE(i*64, 64)}}}); err != nil {
			t.Fatal(err)
		}
	}
	polledStep := func(psn wire.PSN) {
		t.Helper()
		q.stepMu.Lock()
		deliverSend(t, p, q, psn)
		q.step(clk.now(), true)
		q.stepMu.Unlock()
	}
	polledStep(0)
	p.expectNoPacket("the first ACK, held")
	clk.advance(ackHold)
	stepNow(q)
	p.expectAck(0, wire.SyndromeACKUnlimited) // by the timer: no answer came
	polledStep(1)
	p.expectAck(1, wire.SyndromeACKUnlimited) // at once
	postSend(t, p.e, 9)
	stepNow(q)
	p.expectPacket(wire.RCSendOnly, 0)
	polledStep(2)
	p.expectNoPacket("after the QP answered, its next ACK is held again")
}
