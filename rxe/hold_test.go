package rxe

import (
	"fmt"
	"testing"
	"time"

	"github.com/rdmago/rdmago/rxe/wire"
	"github.com/rdmago/rdmago/verbs"
)

// postRecvs gives the rig's responder n receive WQEs of 64 bytes, WRIDs 0
// to n-1.
func (s *recvRig) postRecvs(n int) {
	for i := range n {
		s.host.rq.push(uint64(i), []verbs.SGE{{Addr: uint64(64 * i), Length: 64}})
	}
}

// expectAnswer checks that ps is one acknowledgement, of the PSN and
// with the syndrome given.
func expectAnswer(t *testing.T, ps []*wire.Packet, want string, syn wire.Syndrome, when string) {
	t.Helper()
	if expectPSNs(t, ps, want, when); ps[0].AETH.Syndrome() != syn {
		t.Fatalf("%s: syndrome %#x, want %#x", when, uint8(ps[0].AETH.Syndrome()), uint8(syn))
	}
}

// wrids lists the WRIDs of the completions the rig's responder made.
func (s *recvRig) wrids() string {
	out := ""
	for _, wc := range s.host.wcs {
		out += fmt.Sprintf(" %d", wc.WRID)
	}
	return out
}

func TestResponderExecutesHeldRequestsOnceTheGapFills(t *testing.T) {
	s := newRecvRig(t)
	s.postRecvs(4)
	t0 := time.Unix(1000, 0)
	expectAnswer(t, s.step(t0, false, send(1), send(2), send(3)), " RC_ACKNOWLEDGE@0", wire.NAKPSNSequenceError, "packets past the gap")
	if len(s.host.wcs) != 0 || s.resp.hold.n != 3 {
		t.Fatalf("past the gap: completions %+v, held %d; want none and 3", s.host.wcs, s.resp.hold.n)
	}
	// The missing packet executes, and the three held behind it after
	// it, in PSN order; one ACK covers them all.
	expectAnswer(t, s.step(t0, false, send(0)), " RC_ACKNOWLEDGE@3", wire.SyndromeACKUnlimited, "the gap filled")
	if got := s.wrids(); got != " 0 1 2 3" || s.resp.hold.n != 0 || s.resp.epsn != rigPSN.Add(4) {
		t.Fatalf("completions%s, held %d, expected PSN %d; want 0 1 2 3, none and 4", got, s.resp.hold.n, s.resp.epsn.Diff(rigPSN))
	}
	// The requester's resends of them are duplicates: acknowledged
	// again, not executed again.
	ps := s.step(t0, false, send(1), send(2), send(3))
	if expectPSNs(t, ps, " RC_ACKNOWLEDGE@3", "the resends"); len(s.host.wcs) != 4 {
		t.Fatalf("the resends made completions %s", s.wrids())
	}
}

// Once the first gap fills, a second gap before packets still held is
// not NAKed at once (the requester's pass is most likely sending it again
// already): the held packets up to it are acknowledged, and the next
// packet out of sequence NAKs it, as ever.
func TestResponderAcknowledgesUpToTheNextGapOnceTheFirstFills(t *testing.T) {
	s := newRecvRig(t)
	s.postRecvs(5)
	t0 := time.Unix(1000, 0)
	s.step(t0, false, send(1), send(3))
	expectAnswer(t, s.step(t0, false, send(0)), " RC_ACKNOWLEDGE@1", wire.SyndromeACKUnlimited, "the first gap filled")
	if got := s.wrids(); got != " 0 1" {
		t.Fatalf("completions%s, want 0 1", got)
	}
	expectAnswer(t, s.step(t0, false, send(4)), " RC_ACKNOWLEDGE@2", wire.NAKPSNSequenceError, "a packet past the second gap")
	expectPSNs(t, s.step(t0, false, send(2)), " RC_ACKNOWLEDGE@4", "the second gap filled")
	if got := s.wrids(); got != " 0 1 2 3 4" {
		t.Fatalf("completions%s, want 0 1 2 3 4", got)
	}
}

// A held request is executed as it would have been had it come then: a
// SEND that finds no receive WQE is RNR NAKed, and what was held after it
// is dropped, for the requester to send again after its RNR wait.
func TestResponderDropsWhatIsHeldAfterAnRNRNAK(t *testing.T) {
	s := newRecvRig(t)
	s.postRecvs(1)
	t0 := time.Unix(1000, 0)
	s.step(t0, false, send(1), send(2))
	expectAnswer(t, s.step(t0, false, send(0)), " RC_ACKNOWLEDGE@1", wire.RNRNAKSyndrome(rigRNR), "the held SEND with no receive WQE")
	if s.resp.hold.n != 0 || s.resp.epsn != rigPSN.Add(1) {
		t.Fatalf("held %d, expected PSN %d; want none and 1", s.resp.hold.n, s.resp.epsn.Diff(rigPSN))
	}
	s.host.rq.push(1, []verbs.SGE{{Addr: 64, Length: 64}})
	expectPSNs(t, s.step(t0, false, send(1)), " RC_ACKNOWLEDGE@1", "after posting")
	if got := s.wrids(); got != " 0 1" {
		t.Fatalf("completions%s, want 0 1: the SEND at 2 was dropped, not executed", got)
	}
}

// Only SENDs and WRITEs of RC are held, within a window of the expected
// PSN: a READ past the gap, a packet too far ahead and, on UC, anything.
func TestResponderHoldsOnlyRCSendsAndWritesNearTheGap(t *testing.T) {
	read := wire.Headers{BTH: wire.BTHFields{OpCode: wire.RCReadRequest, PKey: wire.DefaultPKey, DestQP: 0x22, PSN: rigPSN.Add(2)},
		RETH: wire.RETHFields{VA: 0, RKey: 7, DMALen: 8}}
	for _, tc := range []struct {
		name string
		typ  verbs.QPType
		h    wire.Headers
		held int
	}{
		{"a SEND", verbs.QPTRC, send(1), 1},
		{"a READ", verbs.QPTRC, read, 0},
		{"a SEND a window ahead", verbs.QPTRC, send(holdSlots), 0},
		{"a SEND on UC", verbs.QPTUC, send(1), 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := newRecvRig(t)
			s.resp.typ = tc.typ
			s.step(time.Unix(1000, 0), false, tc.h)
			if s.resp.hold.n != tc.held {
				t.Fatalf("held %d, want %d", s.resp.hold.n, tc.held)
			}
		})
	}
}

// After going back for a NAK, the requester sends nothing an ACK then
// covers: a responder that held the window acknowledges it all once the
// missing request came.
func TestRequesterSkipsWhatAnACKCoveredAfterGoingBack(t *testing.T) {
	s := newSendRig(t)
	t0 := time.Unix(1000, 0)
	s.post(verbs.WRRDMAWrite, 8*rigMTU)
	if ps := s.step(t0); len(ps) != 8 {
		t.Fatalf("sent %d packets, want 8", len(ps))
	}
	s.answer(wire.RCAcknowledge, rigPSN.Add(2), wire.NAKPSNSequenceError, nil, t0)
	s.answer(wire.RCAcknowledge, rigPSN.Add(5), wire.SyndromeACKUnlimited, nil, t0)
	expectPSNs(t, s.step(t0), " RC_RDMA_WRITE_MIDDLE@6 RC_RDMA_WRITE_LAST@7+A", "after a NAK of 2 and an ACK of 5")
}

// A request whose answer never comes, with nothing sent after it to bring
// a NAK, goes again long before the retransmit timer: the last packet is
// sent again alone, asking for an ACK, once the requester has neither
// sent nor heard anything for tailAfter, then after twice that, spending
// no retry; then only the timer.
func TestCompleterProbesTheTailWhenTheAnswersStop(t *testing.T) {
	s := newSendRig(t)
	t0 := time.Unix(1000, 0)
	s.post(verbs.WRRDMAWrite, 3*rigMTU)
	s.step(t0)
	rtt := 300 * time.Microsecond
	s.answer(wire.RCAcknowledge, rigPSN, wire.SyndromeACKUnlimited, nil, t0.Add(rtt))
	wait := 4 * rtt // four of the shortest round trip, the longest of the four
	if d := s.comp.tailAfter(); d != wait {
		t.Fatalf("tailAfter %v, want %v", d, wait)
	}
	retries := s.comp.retries
	at := t0.Add(rtt) // the silence starts with the last answer
	for k := 1; k <= maxTails; k++ {
		expectPSNs(t, s.step(at.Add(wait-time.Nanosecond)), "", fmt.Sprintf("just before tail probe %d", k))
		at = at.Add(wait)
		expectPSNs(t, s.step(at), " RC_RDMA_WRITE_LAST@2+A", fmt.Sprintf("tail probe %d", k))
		wait *= 2
	}
	if !s.comp.tailAt().IsZero() || s.comp.retries != retries {
		t.Fatalf("after %d probes: next at %v, %d retries left; want none, and %d", maxTails, s.comp.tailAt(), s.comp.retries, retries)
	}
	// Its ACK completes the WQE; a new request may be probed again.
	s.answer(wire.RCAcknowledge, rigPSN.Add(2), wire.SyndromeACKUnlimited, nil, at)
	if !s.sq.wqes[0].done {
		t.Fatal("the ACK of the probe did not complete the WRITE")
	}
	s.post(verbs.WRSend, 8)
	s.step(at)
	if d := s.comp.tailAt(); !d.Equal(at.Add(s.comp.tailAfter())) {
		t.Fatalf("a new request: tail probe at %v, want %v on", d.Sub(at), s.comp.tailAfter())
	}
}

// The tail probe sends no READ again (a READ request sent again is
// answered with the whole READ), and then waits for progress before it
// tries again; and it is not due while a NAK's gap is open (the early
// go-back's business).
func TestCompleterProbesNoREADOrOpenGap(t *testing.T) {
	t0 := time.Unix(1000, 0)
	s := newSendRig(t)
	s.post(verbs.WRSend, 8)
	s.post(verbs.WRRDMARead, 8)
	s.step(t0)
	s.answer(wire.RCAcknowledge, rigPSN, wire.SyndromeACKUnlimited, nil, t0.Add(time.Microsecond))
	due := s.comp.tailAt()
	if due.IsZero() {
		t.Fatal("no tail probe due at all")
	}
	expectPSNs(t, s.step(due), "", "a READ last, when the probe falls due")
	if d := s.comp.tailAt(); !d.IsZero() {
		t.Fatalf("a READ last: another probe at %v", d.Sub(t0))
	}
	s = newSendRig(t)
	for range 3 {
		s.post(verbs.WRSend, 8)
	}
	s.step(t0)
	s.answer(wire.RCAcknowledge, rigPSN, wire.SyndromeACKUnlimited, nil, t0.Add(time.Microsecond))
	s.answer(wire.RCAcknowledge, rigPSN.Add(1), wire.NAKPSNSequenceError, nil, t0.Add(2*time.Microsecond))
	if d := s.comp.tailAt(); !d.IsZero() {
		t.Fatalf("a gap open: tail probe at %v", d.Sub(t0))
	}
}

// While the link has no room, a tail probe that falls due leaves no
// deadline in the past (noRoom's contract): the owner's timer would fire
// every microsecond until the link drained.
func TestNoRoomLeavesNoTailProbeDue(t *testing.T) {
	s := newSendRig(t)
	t0 := time.Unix(1000, 0)
	s.post(verbs.WRRDMAWrite, 100*rigMTU)
	s.host.roomFor = sendBatch
	if ps := s.step(t0); len(ps) != sendBatch {
		t.Fatalf("sent %d", len(ps))
	}
	s.answer(wire.RCAcknowledge, rigPSN, wire.SyndromeACKUnlimited, nil, t0.Add(100*time.Microsecond))
	now := t0.Add(2 * time.Millisecond) // well past tailAfter, well before the timer
	for i := range 3 {
		s.comp.noRoom(now)
		if d := s.comp.deadline(); !d.After(now) {
			t.Fatalf("noRoom %d: deadline %v before now: the owner spins", i, now.Sub(d))
		}
		now = now.Add(time.Microsecond)
	}
}

// No tail probe while a go-back pass is under way (it stopped for room):
// the pass sends the last packet again itself, and the probe must not
// move its position past the packets it has yet to send.
func TestTailProbeWaitsForAGoBackPassToEnd(t *testing.T) {
	s := newSendRig(t)
	t0 := time.Unix(1000, 0)
	s.post(verbs.WRRDMAWrite, 100*rigMTU)
	if ps := s.step(t0); len(ps) != 100 {
		t.Fatalf("sent %d", len(ps))
	}
	t1 := t0.Add(100 * time.Microsecond)
	s.answer(wire.RCAcknowledge, rigPSN, wire.SyndromeACKUnlimited, nil, t1)
	// The timer: go back to 1; the link fills after one batch.
	T := t1.Add(s.attr.timeout)
	s.host.roomFor = s.host.built + sendBatch
	ps := s.step(T)
	if len(ps) != sendBatch || ps[0].BTH.PSN() != rigPSN.Add(1) {
		t.Fatalf("timeout: sent%s", psns(ps))
	}
	// Room again, after tailAfter.
	s.host.roomFor = 0
	ps = s.step(T.Add(2 * time.Millisecond))
	if len(ps) != 99-sendBatch {
		t.Fatalf("with room again: sent %d packets, want the %d the pass had left (%d..99)", len(ps), 99-sendBatch, 1+sendBatch)
	}
}

// The tail probe is for silence: a WRITE posted behind a long READ is
// not sent again while the READ's responses come in.
func TestNoTailProbeWhileAnswersFlow(t *testing.T) {
	s := newSendRig(t)
	t0 := time.Unix(1000, 0)
	s.post(verbs.WRSend, 8)
	s.step(t0)
	s.answer(wire.RCAcknowledge, rigPSN, wire.SyndromeACKUnlimited, nil, t0.Add(100*time.Microsecond))
	const n = 100
	s.post(verbs.WRRDMARead, n*rigMTU)
	s.post(verbs.WRRDMAWrite, 8)
	t1 := t0.Add(time.Millisecond)
	s.step(t1)
	probes := 0
	now := t1
	for k := range n {
		now = now.Add(100 * time.Microsecond)
		op := wire.RCReadResponseMiddle
		switch k {
		case 0:
			op = wire.RCReadResponseFirst
		case n - 1:
			op = wire.RCReadResponseLast
		}
		s.answer(op, rigPSN.Add(1+uint32(k)), wire.SyndromeACKUnlimited, make([]byte, rigMTU), now)
		for _, p := range s.step(now) {
			if p.OpCode() == wire.RCWriteOnly {
				probes++
			}
		}
	}
	if probes > 0 {
		t.Fatalf("%d tail probes of the WRITE while the READ's %d responses came in, one every 100 µs (tailAfter %v)", probes, n, s.comp.tailAfter())
	}
}
