package rxe

import (
	"fmt"
	"net/netip"
	"sync"
	"testing"
	"time"

	"github.com/rdmago/rdmago/rxe/link"
	"github.com/rdmago/rdmago/rxe/wire"
	"github.com/rdmago/rdmago/verbs"
)

// The requester and the completer on their own: no QP, device, link or
// goroutine. The test is their host (engineHost), takes the packets they
// build, answers with packets of its own and says what time it is.

// fakeHost is an engineHost: it keeps the packets built, gives SGEs as
// offsets into mem, and counts.
type fakeHost struct {
	attr      *ownerAttr
	out       []link.Packet
	mem       []byte
	counts    counters // the QP's; the device's are devCounts
	devCounts counters
	roomFor   int // hasRoom says no once this many packets were built (0: never)
	built     int
}

func (h *fakeHost) queueOutTo(addr netip.Addr, sgid int) *link.Packet {
	h.built++
	h.out = append(h.out, link.Packet{Addr: addr, Buf: make([]byte, 0, maxPacket)})
	return &h.out[len(h.out)-1]
}

func (h *fakeHost) resolve(sges []verbs.SGE, write bool, segs [][]byte) ([][]byte, bool) {
	for _, s := range sges {
		if s.Addr+uint64(s.Length) > uint64(len(h.mem)) {
			return segs, false
		}
		segs = append(segs, h.mem[s.Addr:s.Addr+uint64(s.Length)])
	}
	return segs, true
}

func (h *fakeHost) localOp(*verbs.SendWR) verbs.WCStatus { return verbs.WCSuccess }

func (h *fakeHost) toError() { h.attr.state = verbs.QPSErr }

func (h *fakeHost) hasRoom() bool { return h.roomFor == 0 || h.built < h.roomFor }

// takeOut empties the out batch and returns its packets, decoded.
func (h *fakeHost) takeOut(t *testing.T) []*wire.Packet {
	t.Helper()
	var ps []*wire.Packet
	for _, o := range h.out {
		p := new(wire.Packet)
		if err := p.Decode(o.Buf); err != nil {
			t.Fatalf("the engine built a malformed packet: %v", err)
		}
		ps = append(ps, p)
	}
	h.out = h.out[:0]
	return ps
}

// sendRig is a requester and a completer over one send queue, as a QP
// holds them.
type sendRig struct {
	t    *testing.T
	attr ownerAttr
	host fakeHost
	sq   sendQueue
	req  requester
	comp completer
}

const (
	rigMTU     = 1024
	rigPSN     = wire.PSN(0xfffff0) // wraps within the tests
	rigRNR     = 14                 // RNR timer code: 1.28 ms
	rigRNRWait = 1280 * time.Microsecond
)

func newSendRig(t *testing.T) *sendRig {
	s := &sendRig{t: t, attr: ownerAttr{
		state: verbs.QPSRTS, mtu: rigMTU, destQP: 0x22, dest: netip.MustParseAddr("192.0.2.2"),
		timeout: timeoutAt14, retryCnt: 2, rnrRetry: 2, maxRdAtomic: 4, maxDestRd: 4,
	}}
	s.host = fakeHost{attr: &s.attr, mem: make([]byte, 1<<20)}
	stats := tally{&s.host.counts, &s.host.devCounts}
	s.req = requester{sq: &s.sq, comp: &s.comp, host: &s.host, stats: stats, attr: &s.attr, typ: verbs.QPTRC, qpn: 0x11}
	s.comp = completer{sq: &s.sq, host: &s.host, stats: stats, attr: &s.attr}
	s.sq.reset(rigPSN)
	s.req.reset()
	s.comp.reset()
	return s
}

// post queues a signaled work request of n bytes from offset 0.
func (s *sendRig) post(op verbs.WROpcode, n uint32) *sendWQE {
	w := &sendWQE{wr: verbs.SendWR{WRID: uint64(len(s.sq.wqes)), Opcode: op, RemoteAddr: 0x1000, RKey: 7}, length: uint64(n), signaled: true}
	w.sges = []verbs.SGE{{Addr: 0, Length: n}}
	s.sq.wqes = append(s.sq.wqes, w)
	return w
}

// step runs the send side as a QP's step does at now and returns the
// packets it built.
func (s *sendRig) step(now time.Time) []*wire.Packet {
	s.t.Helper()
	s.comp.onTimer(now)
	s.req.sendMore(now)
	return s.host.takeOut(s.t)
}

// answer hands the completer an acknowledgement (or, with payload, a
// READ response) of psn at now.
func (s *sendRig) answer(op wire.OpCode, psn wire.PSN, syn wire.Syndrome, payload []byte, now time.Time) {
	s.t.Helper()
	h := wire.Headers{BTH: wire.BTHFields{OpCode: op, PKey: wire.DefaultPKey, DestQP: 0x11, PSN: psn}, Syndrome: syn}
	s.comp.complete(parsed(s.t, &h, payload), now)
}

// parsed builds the packet of h and payload and parses it, as the
// device's receive path hands a packet to the engine.
func parsed(t *testing.T, h *wire.Headers, payload []byte) *wire.Packet {
	t.Helper()
	b, err := wire.AppendPacket(nil, h, payload)
	if err != nil {
		t.Fatal(err)
	}
	p := new(wire.Packet)
	if err := p.Decode(b); err != nil {
		t.Fatal(err)
	}
	return p
}

// psns lists the packets' opcodes and PSNs, relative to rigPSN.
func psns(ps []*wire.Packet) string {
	s := ""
	for _, p := range ps {
		ack := ""
		if p.BTH.AckReq() {
			ack = "+A"
		}
		s += fmt.Sprintf(" %s@%d%s", p.OpCode(), p.BTH.PSN().Diff(rigPSN), ack)
	}
	return s
}

func expectPSNs(t *testing.T, ps []*wire.Packet, want string, when string) {
	t.Helper()
	if got := psns(ps); got != want {
		t.Fatalf("%s: sent%s, want%s", when, got, want)
	}
}

// A request nobody answers goes again one timeout after it went, and
// after every timeout while retries last; the next fails it with
// RETRY_EXC_ERR and the QP with it. A microsecond early, nothing goes.
func TestCompleterRetransmitsAtTheDeadlineNotBefore(t *testing.T) {
	s := newSendRig(t)
	t0 := time.Unix(1000, 0)
	w := s.post(verbs.WRSend, 8)
	expectPSNs(t, s.step(t0), " RC_SEND_ONLY@0+A", "at first")
	for try := 1; try <= 2; try++ {
		due := t0.Add(time.Duration(try) * timeoutAt14)
		if got := s.comp.deadline(); !got.Equal(due) {
			t.Fatalf("before retry %d: deadline t0+%v, want t0+%v", try, got.Sub(t0), due.Sub(t0))
		}
		expectPSNs(t, s.step(due.Add(-time.Microsecond)), "", fmt.Sprintf("1 µs before retry %d", try))
		expectPSNs(t, s.step(due), " RC_SEND_ONLY@0+A", fmt.Sprintf("at retry %d", try))
	}
	last := t0.Add(3 * timeoutAt14)
	expectPSNs(t, s.step(last.Add(-time.Microsecond)), "", "1 µs before the last timeout")
	if w.done {
		t.Fatal("failed a microsecond before the last timeout")
	}
	expectPSNs(t, s.step(last), "", "when retries ran out")
	if !w.done || w.status != verbs.WCRetryExcErr || s.attr.state != verbs.QPSErr {
		t.Fatalf("after the last timeout: done %v, status %s, QP %s; want RETRY_EXC_ERR and ERR", w.done, w.status, s.attr.state)
	}
	if got := s.host.counts[verbs.CounterCompleterRetryErr].Load(); got != 2 {
		t.Fatalf("completer_retry_err %d, want 2", got)
	}
}

// An ACK of the last PSN completes the WQE and stops the timer.
func TestCompleterCompletesOnTheACKAndStopsTheTimer(t *testing.T) {
	s := newSendRig(t)
	t0 := time.Unix(1000, 0)
	w := s.post(verbs.WRRDMAWrite, 3*rigMTU)
	expectPSNs(t, s.step(t0), " RC_RDMA_WRITE_FIRST@0 RC_RDMA_WRITE_MIDDLE@1 RC_RDMA_WRITE_LAST@2+A", "the write")
	s.answer(wire.RCAcknowledge, rigPSN.Add(1), wire.SyndromeACKUnlimited, nil, t0.Add(time.Millisecond))
	if w.done {
		t.Fatal("done on an ACK of its middle packet")
	}
	if got, want := s.comp.retryAt, t0.Add(time.Millisecond+timeoutAt14); !got.Equal(want) {
		t.Fatalf("after a partial ACK: timer at t0+%v, want it restarted at t0+%v", got.Sub(t0), want.Sub(t0))
	}
	s.answer(wire.RCAcknowledge, rigPSN.Add(2), wire.SyndromeACKUnlimited, nil, t0.Add(2*time.Millisecond))
	if !w.done || w.status != verbs.WCSuccess || s.sq.doneHead() != 1 {
		t.Fatalf("after the last ACK: done %v, status %s", w.done, w.status)
	}
	if d := s.comp.deadline(); !d.IsZero() {
		t.Fatalf("nothing in flight, and the deadline is t0+%v", d.Sub(t0))
	}
}

// After an RNR NAK the request waits out the RNR timer the NAK gives, and
// goes again at its end, not a microsecond before.
func TestCompleterWaitsOutAnRNRNAK(t *testing.T) {
	s := newSendRig(t)
	t0 := time.Unix(1000, 0)
	s.post(verbs.WRSend, 8)
	s.step(t0)
	nak := t0.Add(time.Millisecond)
	s.answer(wire.RCAcknowledge, rigPSN, wire.RNRNAKSyndrome(rigRNR), nil, nak)
	if got, want := s.comp.deadline(), nak.Add(rigRNRWait); !got.Equal(want) {
		t.Fatalf("deadline t0+%v, want the end of the RNR wait, t0+%v", got.Sub(t0), want.Sub(t0))
	}
	expectPSNs(t, s.step(nak.Add(rigRNRWait-time.Microsecond)), "", "1 µs before the RNR wait ends")
	expectPSNs(t, s.step(nak.Add(rigRNRWait)), " RC_SEND_ONLY@0+A", "when the RNR wait ends")
}

// The requester asks for an ACK on a message's last packet and every
// maxPktPerAck packets, and keeps at most maxUnackedPSN in flight; an ACK
// opens the window by what it covers.
func TestRequesterWindowAndACKRequests(t *testing.T) {
	s := newSendRig(t)
	t0 := time.Unix(1000, 0)
	s.post(verbs.WRRDMAWrite, 200*rigMTU)
	ps := s.step(t0)
	if len(ps) != maxUnackedPSN {
		t.Fatalf("sent %d packets, want the window, %d", len(ps), maxUnackedPSN)
	}
	for i, p := range ps {
		if want := (i+1)%maxPktPerAck == 0; p.BTH.AckReq() != want {
			t.Fatalf("packet %d: AckReq %v, want %v", i, p.BTH.AckReq(), want)
		}
	}
	expectPSNs(t, s.step(t0), "", "with the window full")
	s.answer(wire.RCAcknowledge, rigPSN.Add(maxPktPerAck-1), wire.SyndromeACKUnlimited, nil, t0)
	ps = s.step(t0)
	if len(ps) != maxPktPerAck || ps[0].BTH.PSN() != rigPSN.Add(maxUnackedPSN) {
		t.Fatalf("after an ACK of %d packets: sent%s", maxPktPerAck, psns(ps))
	}
	if last := ps[len(ps)-1]; last.OpCode() != wire.RCWriteMiddle || !last.BTH.AckReq() {
		t.Fatalf("packet %d: %s, AckReq %v", maxUnackedPSN+maxPktPerAck-1, last.OpCode(), last.BTH.AckReq())
	}
}

// The requester looks at the link's room after each out batch and stops
// once it has none; a retransmit timeout that falls due meanwhile is put
// off, spending no retry, since the request could not go.
func TestRequesterStopsWhenTheLinkFillsUp(t *testing.T) {
	s := newSendRig(t)
	t0 := time.Unix(1000, 0)
	s.post(verbs.WRRDMAWrite, 200*rigMTU)
	s.host.roomFor = sendBatch // the first batch fills the link
	if ps := s.step(t0); len(ps) != sendBatch {
		t.Fatalf("sent %d packets, want one batch, %d, before the link filled", len(ps), sendBatch)
	}
	due := t0
	for i := range maxPutOffs {
		due = due.Add(s.attr.timeout)
		s.comp.noRoom(due.Add(-time.Microsecond))
		if s.comp.deadline() != due {
			t.Fatalf("timeout %d, 1 µs before it: deadline moved by %v", i+1, s.comp.deadline().Sub(due))
		}
		s.comp.noRoom(due)
		if s.comp.retries != s.attr.retryCnt || s.comp.deadline() != due.Add(s.attr.timeout) {
			t.Fatalf("timeout %d with no room: %d retries left (want %d), deadline %v after it (want %v)",
				i+1, s.comp.retries, s.attr.retryCnt, s.comp.deadline().Sub(due), s.attr.timeout)
		}
	}
	due = due.Add(s.attr.timeout)
	s.comp.noRoom(due)
	if s.comp.retries != s.attr.retryCnt-1 {
		t.Fatalf("timeout %d with no room: %d retries left, want one spent: a link full that long is down", maxPutOffs+1, s.comp.retries)
	}
	s.host.roomFor = 0
	ps := s.step(due)
	if len(ps) != maxUnackedPSN || ps[0].BTH.PSN() != rigPSN {
		t.Fatalf("with room again: sent%s; want the window again from 0", psns(ps))
	}
}

// A PSN sequence error NAK sends everything again from its PSN (go-back-N)
// and spends a retry; the same NAK again is the responder asking again,
// which spends none.
func TestCompleterGoesBackOnASequenceNAK(t *testing.T) {
	s := newSendRig(t)
	t0 := time.Unix(1000, 0)
	for range 4 {
		s.post(verbs.WRSend, 8)
	}
	s.step(t0)
	s.answer(wire.RCAcknowledge, rigPSN.Add(2), wire.NAKPSNSequenceError, nil, t0)
	if !s.sq.wqes[1].done || s.sq.wqes[2].done {
		t.Fatal("a NAK of PSN 2 must complete PSNs 0 and 1, and only them")
	}
	expectPSNs(t, s.step(t0), " RC_SEND_ONLY@2+A RC_SEND_ONLY@3+A", "after the NAK")
	if s.comp.retries != 1 {
		t.Fatalf("retries left %d, want 1", s.comp.retries)
	}
	s.answer(wire.RCAcknowledge, rigPSN.Add(2), wire.NAKPSNSequenceError, nil, t0)
	expectPSNs(t, s.step(t0), " RC_SEND_ONLY@2+A RC_SEND_ONLY@3+A", "after the NAK again")
	if s.comp.retries != 1 {
		t.Fatalf("the repeated NAK spent a retry: %d left, want 1", s.comp.retries)
	}
}

// The responder NAKs a gap again after every renakAfter requests out of
// sequence. Those NAKs answer the window sent before the requester went
// back, and arrive while it is resending: the completer counts them and
// does not go back again for them, only for a NAK beyond them, which says
// the resent request was lost too.
func TestCompleterDoesNotGoBackAgainForNAKsOfTheOldWindow(t *testing.T) {
	s := newSendRig(t)
	t0 := time.Unix(1000, 0)
	const p = 10 // the NAKed PSN
	s.post(verbs.WRRDMAWrite, 100*rigMTU)
	s.post(verbs.WRRDMAWrite, 200*rigMTU) // more than the window: there is always more to send
	if n := len(s.step(t0)); n != maxUnackedPSN {
		t.Fatalf("sent %d packets, want the window, %d", n, maxUnackedPSN)
	}
	// Requests p+1 on reach the responder out of sequence: it NAKs the
	// first and then after every renakAfter more.
	renaks := func(k int) int { return 1 + (k-1)/renakAfter }
	behind := maxUnackedPSN - p - 1
	naks := renaks(behind)
	if naks < 3 {
		t.Fatalf("the test wants at least 3 NAKs of the old window, has %d", naks)
	}
	nak := func(psn uint32) { s.answer(wire.RCAcknowledge, rigPSN.Add(psn), wire.NAKPSNSequenceError, nil, t0) }
	goesBack := func(psn uint32, when string) {
		t.Helper()
		ps := s.step(t0)
		if len(ps) == 0 || ps[0].BTH.PSN() != rigPSN.Add(psn) {
			t.Fatalf("%s: sent%s, want a resend from %d", when, psns(ps), psn)
		}
	}
	nak(p)
	nak(p) // before the requester resent: it is going back already
	goesBack(p, "after the NAK")
	for k := 3; k <= naks; k++ {
		nak(p)
		expectPSNs(t, s.step(t0), "", fmt.Sprintf("NAK %d of %d from the old window", k, naks))
	}
	if got := s.host.counts[verbs.CounterCompleterRetryErr].Load(); got != 1 {
		t.Errorf("completer_retry_err %d, want 1", got)
	}
	// One more: the resent PSN p was lost as well.
	nak(p)
	goesBack(p, "after a NAK beyond the old window's")
	// The resent window's requests, out of sequence too, bring more NAKs
	// of the same gap, counted on from the old window's: stale as well.
	total := behind + maxUnackedPSN - 1
	for k := naks + 2; k <= renaks(total); k++ {
		nak(p)
		expectPSNs(t, s.step(t0), "", fmt.Sprintf("NAK %d, of the resent window", k))
	}
	nak(p)
	goesBack(p, "after a NAK beyond both windows'")
	if s.comp.retries != 1 {
		t.Errorf("retries left %d, want 1: only the first NAK of a gap spends one", s.comp.retries)
	}
	// Once an ACK covers p, a NAK of a later PSN is a new gap.
	s.answer(wire.RCAcknowledge, rigPSN.Add(p+20), wire.SyndromeACKUnlimited, nil, t0)
	nak(p + 30)
	goesBack(p+30, "after a NAK of a new gap")
}

// A READ request is one packet, however many PSNs its responses take:
// the completer counts the responder's NAKs by packets.
func TestCompleterCountsAREADAsOneRequestForNAKs(t *testing.T) {
	s := newSendRig(t)
	t0 := time.Unix(1000, 0)
	// A first SEND, answered: the peer is there (see quickAfter).
	s.post(verbs.WRSend, 8)
	s.step(t0)
	s.answer(wire.RCAcknowledge, rigPSN, wire.SyndromeACKUnlimited, nil, t0.Add(100*time.Microsecond))
	s.post(verbs.WRSend, 8)
	s.post(verbs.WRRDMARead, 64*rigMTU)
	for range 60 {
		s.post(verbs.WRSend, 8)
	}
	s.post(verbs.WRRDMAWrite, 100*rigMTU)
	ps := s.step(t0)
	// PSN 1 is lost; 1 READ, 60 SENDs and 3 WRITE packets come after it,
	// which bring 2 NAKs.
	if len(ps) != 1+1+60+3 {
		t.Fatalf("sent %d packets, want 65", len(ps))
	}
	nak := func() { s.answer(wire.RCAcknowledge, rigPSN.Add(1), wire.NAKPSNSequenceError, nil, t0) }
	nak()
	if ps := s.step(t0); len(ps) != 65 {
		t.Fatalf("after the NAK: sent %d packets, want 65", len(ps))
	}
	nak()
	expectPSNs(t, s.step(t0), "", "the old window's second NAK")
	nak()
	if ps := s.step(t0); len(ps) != 65 {
		t.Fatalf("after a third NAK (the resent PSN 1 was lost): sent %d packets, want 65", len(ps))
	}
}

// When the requester has nothing more to send, no later request would
// bring a NAK the count could trust: a NAK it takes for stale goes back
// anyway, so that a lost copy waits for no timer.
func TestCompleterGoesBackForAStaleNAKWithNothingMoreToSend(t *testing.T) {
	s := newSendRig(t)
	t0 := time.Unix(1000, 0)
	s.post(verbs.WRRDMAWrite, 100*rigMTU)
	s.step(t0)
	for k := 1; k <= 2; k++ {
		s.answer(wire.RCAcknowledge, rigPSN.Add(10), wire.NAKPSNSequenceError, nil, t0)
		if ps := s.step(t0); len(ps) != 90 || ps[0].BTH.PSN() != rigPSN.Add(10) {
			t.Fatalf("NAK %d: sent%s", k, psns(ps))
		}
	}
}

// A requester recovering from a gap a NAK reported that neither sends nor
// hears anything for quickAfter() goes back at una, spending no retry,
// waiting twice as long each time, at most maxQuicks times before the
// transport makes progress again; then only the retransmit timer goes
// back. Without a gap open it never goes back early.
func TestCompleterGoesBackEarlyWhenTheAnswersStop(t *testing.T) {
	s := newSendRig(t)
	t0 := time.Unix(1000, 0)
	s.post(verbs.WRRDMAWrite, 300*rigMTU)
	if n := len(s.step(t0)); n != maxUnackedPSN {
		t.Fatalf("sent %d packets, want the window", n)
	}
	// 100 µs on, the responder NAKs PSN 64, a fast round trip for the
	// first 64: the early go-back waits an eighth of the timeout.
	t1 := t0.Add(100 * time.Microsecond)
	s.answer(wire.RCAcknowledge, rigPSN.Add(maxPktPerAck), wire.NAKPSNSequenceError, nil, t1)
	wait := s.attr.timeout / 8
	if d := s.comp.quickAfter(); d != wait {
		t.Fatalf("quickAfter %v, want %v", d, wait)
	}
	if n := len(s.step(t1)); n != maxUnackedPSN {
		t.Fatalf("after the NAK: sent %d packets, want the window from %d", n, maxPktPerAck)
	}
	retries := s.comp.retries // the NAK spent one
	at := t1
	for k := 1; k <= maxQuicks; k++ {
		if d := s.comp.deadline(); !d.Equal(at.Add(wait)) {
			t.Fatalf("early go-back %d: deadline %v after the last send, want %v", k, d.Sub(at), wait)
		}
		expectPSNs(t, s.step(at.Add(wait-time.Nanosecond)), "", fmt.Sprintf("just before early go-back %d", k))
		at = at.Add(wait)
		ps := s.step(at)
		if len(ps) != maxUnackedPSN || ps[0].BTH.PSN() != rigPSN.Add(maxPktPerAck) {
			t.Fatalf("early go-back %d: sent%s, want the window from %d", k, psns(ps), maxPktPerAck)
		}
		wait *= 2
	}
	if s.comp.retries != retries {
		t.Fatalf("early go-backs spent retries: %d left, want %d", s.comp.retries, retries)
	}
	// The retransmit timer, started by the NAK's progress, still runs,
	// and nothing goes before it.
	due := t1.Add(s.attr.timeout)
	expectPSNs(t, s.step(due.Add(-time.Nanosecond)), "", "after maxQuicks early go-backs")
	ps := s.step(due)
	if len(ps) != maxUnackedPSN || s.comp.retries != retries-1 {
		t.Fatalf("at the timeout: sent %d packets, %d retries left", len(ps), s.comp.retries)
	}
	// An ACK that closes the gap ends early go-backs; a new gap allows
	// them again, at the first wait.
	t2 := due.Add(time.Millisecond)
	s.answer(wire.RCAcknowledge, rigPSN.Add(2*maxPktPerAck-1), wire.SyndromeACKUnlimited, nil, t2)
	s.step(t2)
	if d := s.comp.retryAt; !d.Equal(t2.Add(s.attr.timeout)) || !s.comp.quickAt.IsZero() {
		t.Fatalf("gap closed: timer %v on, early go-back at %v; want the retransmit timer, and none", d.Sub(t2), s.comp.quickAt)
	}
	s.answer(wire.RCAcknowledge, rigPSN.Add(3*maxPktPerAck), wire.NAKPSNSequenceError, nil, t2)
	s.step(t2)
	if ps := s.step(t2.Add(s.attr.timeout / 8)); len(ps) == 0 || ps[0].BTH.PSN() != rigPSN.Add(3*maxPktPerAck) {
		t.Fatalf("new gap: early go-back sent%s", psns(ps))
	}
}

// A peer whose round trip is slow gets 4 of them before the early go-back.
func TestCompleterWaitsLongerForASlowPeer(t *testing.T) {
	s := newSendRig(t)
	t0 := time.Unix(1000, 0)
	s.post(verbs.WRSend, 8)
	s.step(t0)
	rtt := s.attr.timeout / 16
	s.answer(wire.RCAcknowledge, rigPSN, wire.SyndromeACKUnlimited, nil, t0.Add(rtt))
	if d := s.comp.quickAfter(); d != 4*rtt {
		t.Fatalf("quickAfter %v with a round trip of %v, want %v", d, rtt, 4*rtt)
	}
}

// Without an early go-back, with an infinite timeout or with the early
// go-backs spent, every NAK goes back, as nothing would make up for one
// taken for stale wrongly.
func TestCompleterWithoutAnEarlyGoBackGoesBackOnEveryNAK(t *testing.T) {
	for _, spent := range []bool{false, true} {
		s := newSendRig(t)
		if !spent {
			s.attr.timeout = 0
		}
		t0 := time.Unix(1000, 0)
		s.post(verbs.WRRDMAWrite, 100*rigMTU)
		s.post(verbs.WRRDMAWrite, 200*rigMTU)
		s.step(t0)
		s.answer(wire.RCAcknowledge, rigPSN, wire.SyndromeACKUnlimited, nil, t0.Add(time.Microsecond))
		s.step(t0) // the window moved on by one
		if spent {
			s.comp.quicks = maxQuicks
		} else {
			expectPSNs(t, s.step(t0.Add(time.Hour)), "", "an hour on, with an infinite timeout")
		}
		// PSN 1 was lost (a NAK of a later one would make progress,
		// which allows early go-backs again).
		for k := 1; k <= 3; k++ {
			s.answer(wire.RCAcknowledge, rigPSN.Add(1), wire.NAKPSNSequenceError, nil, t0)
			if ps := s.step(t0); len(ps) == 0 || ps[0].BTH.PSN() != rigPSN.Add(1) {
				t.Fatalf("early go-backs spent %v, NAK %d: sent%s", spent, k, psns(ps))
			}
		}
	}
}

// A gap in a READ's responses asks again, once, for the rest from the
// first missing packet, with the RETH moved on to it.
func TestCompleterAsksAgainFromAReadResponseGap(t *testing.T) {
	s := newSendRig(t)
	t0 := time.Unix(1000, 0)
	w := s.post(verbs.WRRDMARead, 4*rigMTU)
	expectPSNs(t, s.step(t0), " RC_RDMA_READ_REQUEST@0+A", "the READ")
	chunk := make([]byte, rigMTU)
	s.answer(wire.RCReadResponseFirst, rigPSN, wire.SyndromeACKUnlimited, chunk, t0)
	s.answer(wire.RCReadResponseMiddle, rigPSN.Add(2), wire.SyndromeACKUnlimited, chunk, t0)
	ps := s.step(t0)
	expectPSNs(t, ps, " RC_RDMA_READ_REQUEST@1+A", "after the gap")
	if reth := ps[0].RETH; reth.VA() != 0x1000+rigMTU || reth.DMALen() != 3*rigMTU {
		t.Fatalf("asked again for %d bytes at %#x, want %d at %#x", reth.DMALen(), reth.VA(), 3*rigMTU, 0x1000+rigMTU)
	}
	s.answer(wire.RCReadResponseLast, rigPSN.Add(3), wire.SyndromeACKUnlimited, chunk, t0)
	expectPSNs(t, s.step(t0), "", "after a later response of the same gap")
	for k := uint32(1); k < 4; k++ {
		op := wire.RCReadResponseMiddle
		if k == 3 {
			op = wire.RCReadResponseLast
		}
		s.answer(op, rigPSN.Add(k), wire.SyndromeACKUnlimited, chunk, t0)
	}
	if !w.done || w.status != verbs.WCSuccess {
		t.Fatalf("after every response: done %v, status %s", w.done, w.status)
	}
}

// fakeRespHost is a responderHost: one receive queue, remote memory
// anyone may reach by rkey 7, and a CQ that is a slice.
type fakeRespHost struct {
	fakeHost
	rq     recvQueue
	wcs    []verbs.WC
	kicks  int
	holds  int
	events []verbs.EventType
	mu     sync.Mutex
}

func (h *fakeRespHost) popRecv(_ *srq, w *recvWQE) bool      { return h.rq.pop(w) }
func (h *fakeRespHost) unpopRecv(_ *srq, w *recvWQE)         { h.rq.unpop(w) }
func (h *fakeRespHost) pushRecv(_ *srq, wc verbs.WC, _ bool) { h.wcs = append(h.wcs, wc) }
func (h *fakeRespHost) invalidate(uint32) bool               { return false }
func (h *fakeRespHost) xrcSRQ(uint32) *srq                   { return nil }
func (h *fakeRespHost) atomics() *sync.Mutex                 { return &h.mu }
func (h *fakeRespHost) holdAck()                             { h.holds++ }
func (h *fakeRespHost) kick()                                { h.kicks++ }
func (h *fakeRespHost) event(t verbs.EventType)              { h.events = append(h.events, t) }

func (h *fakeRespHost) recvMemory(_ *srq, sges []verbs.SGE, segs [][]byte) ([][]byte, uint64, bool) {
	segs, ok := h.resolve(sges, true, segs)
	var n uint64
	for _, s := range sges {
		n += uint64(s.Length)
	}
	return segs, n, ok
}

func (h *fakeRespHost) peerMemory(_ *srq, rkey uint32, va, n uint64, _ verbs.AccessFlags) ([]byte, bool) {
	if rkey != 7 || va+n > uint64(len(h.mem)) {
		return nil, false
	}
	return h.mem[va : va+n], true
}

// recvRig is a responder as a QP holds it.
type recvRig struct {
	t      *testing.T
	attr   ownerAttr
	host   fakeRespHost
	resp   responder
	noRoom bool // the link has no room (hw.sendRoom) in the next steps
}

func newRecvRig(t *testing.T) *recvRig {
	s := &recvRig{t: t, attr: ownerAttr{
		state: verbs.QPSRTS, mtu: rigMTU, destQP: 0x11, dest: netip.MustParseAddr("192.0.2.1"),
		minRNR: rigRNR, maxDestRd: 4, access: verbs.AccessRemoteWrite | verbs.AccessRemoteRead | verbs.AccessRemoteAtomic,
	}}
	s.host.attr = &s.attr
	s.host.mem = make([]byte, 1<<20)
	s.resp = responder{host: &s.host, stats: tally{&s.host.counts, &s.host.devCounts}, attr: &s.attr, typ: verbs.QPTRC, qpn: 0x22}
	s.resp.reset(rigPSN)
	return s
}

// step gives the responder packets in one step of its QP at now, as a
// CQ poller's step if polled, and returns what it sent.
func (s *recvRig) step(now time.Time, polled bool, hs ...wire.Headers) []*wire.Packet {
	s.t.Helper()
	s.resp.beginStep(now, len(hs) > 0, !s.noRoom)
	for i := range hs {
		n := 0
		if hs[i].BTH.OpCode.IsSend() || hs[i].BTH.OpCode.IsWrite() {
			n = 8
		}
		s.resp.respond(parsed(s.t, &hs[i], make([]byte, n)), now)
	}
	s.resp.endStep(now, polled, len(hs) > 0)
	return s.host.takeOut(s.t)
}

// send is an 8-byte SEND_ONLY at PSN k (from rigPSN), asking for an
// ACK.
func send(k uint32) wire.Headers {
	return wire.Headers{BTH: wire.BTHFields{OpCode: wire.RCSendOnly, PKey: wire.DefaultPKey, DestQP: 0x22, PSN: rigPSN.Add(k), AckReq: true}}
}

// An ACK a CQ poller's step holds back goes when it is due, ackHold after
// the packets came, not a microsecond before; a step that is not a
// poller's sends its ACK at once.
func TestResponderHoldsAPolledACKUntilItIsDue(t *testing.T) {
	s := newRecvRig(t)
	t0 := time.Unix(1000, 0)
	s.host.rq.push(1, []verbs.SGE{{Addr: 0, Length: 64}})
	s.host.rq.push(2, []verbs.SGE{{Addr: 64, Length: 64}})
	expectPSNs(t, s.step(t0, true, send(0)), "", "a poller's step")
	if s.host.holds != 1 || !s.resp.deadline().Equal(t0.Add(ackHold)) {
		t.Fatalf("holds %d, deadline t0+%v; want 1 and t0+%v", s.host.holds, s.resp.deadline().Sub(t0), ackHold)
	}
	expectPSNs(t, s.step(t0.Add(ackHold-time.Microsecond), false), "", "1 µs before the held ACK is due")
	expectPSNs(t, s.step(t0.Add(ackHold), false), " RC_ACKNOWLEDGE@0", "when the held ACK is due")
	if !s.resp.deadline().IsZero() {
		t.Fatal("a deadline with no ACK held")
	}
	// The program did not answer while the ACK was held: the next goes
	// at once, even from a poller's step.
	expectPSNs(t, s.step(t0.Add(time.Millisecond), true, send(1)), " RC_ACKNOWLEDGE@1", "the next, unanswered")
	if len(s.host.wcs) != 2 || s.host.wcs[1].WRID != 2 || s.host.wcs[1].ByteLen != 8 {
		t.Fatalf("receive completions %+v", s.host.wcs)
	}
}

// A long READ's response goes out maxReadBurst packets a step, the
// responder asking to be stepped again until it is all out.
func TestResponderPacesALongREADResponse(t *testing.T) {
	s := newRecvRig(t)
	const npkts = maxReadBurst + 88
	read := wire.Headers{BTH: wire.BTHFields{OpCode: wire.RCReadRequest, PKey: wire.DefaultPKey, DestQP: 0x22, PSN: rigPSN, AckReq: true},
		RETH: wire.RETHFields{VA: 0, RKey: 7, DMALen: npkts * rigMTU}}
	t0 := time.Unix(1000, 0)
	ps := s.step(t0, false, read)
	if len(ps) != maxReadBurst || s.host.kicks == 0 {
		t.Fatalf("first step: %d packets, %d kicks; want %d and a kick", len(ps), s.host.kicks, maxReadBurst)
	}
	if ps[0].OpCode() != wire.RCReadResponseFirst || ps[maxReadBurst-1].BTH.PSN() != rigPSN.Add(maxReadBurst-1) {
		t.Fatalf("first step: %s … PSN %d", ps[0].OpCode(), ps[maxReadBurst-1].BTH.PSN().Diff(rigPSN))
	}
	kicks := s.host.kicks
	ps = s.step(t0, false)
	if len(ps) != npkts-maxReadBurst || ps[len(ps)-1].OpCode() != wire.RCReadResponseLast || s.host.kicks != kicks {
		t.Fatalf("second step: %d packets ending %s, %d more kicks; want %d ending RC_RDMA_READ_RESPONSE_LAST, none", len(ps), ps[len(ps)-1].OpCode(), s.host.kicks-kicks, npkts-maxReadBurst)
	}
}

// READ responses stop after the out batch in which the link filled up,
// whether they are one long READ's or several short ones', and wait for
// the link's room (no kick).
func TestResponderStopsREADResponsesWhenTheLinkFillsUp(t *testing.T) {
	const npkts = 200
	for _, reads := range []int{1, 8} {
		s := newRecvRig(t)
		var hs []wire.Headers
		per := uint32(npkts / reads)
		for k := range uint32(reads) {
			hs = append(hs, wire.Headers{BTH: wire.BTHFields{OpCode: wire.RCReadRequest, PKey: wire.DefaultPKey, DestQP: 0x22, PSN: rigPSN.Add(k * per), AckReq: true},
				RETH: wire.RETHFields{VA: 0, RKey: 7, DMALen: per * rigMTU}})
		}
		t0 := time.Unix(1000, 0)
		s.host.roomFor = sendBatch // the first batch fills the link
		if ps := s.step(t0, false, hs...); len(ps) != sendBatch || s.host.kicks != 0 {
			t.Fatalf("%d READs: sent %d packets and kicked %d times; want one batch, %d, and no kick", reads, len(ps), s.host.kicks, sendBatch)
		}
		s.host.roomFor = 0
		if ps := s.step(t0, false); len(ps) != npkts-sendBatch || ps[len(ps)-1].OpCode() != wire.RCReadResponseLast {
			t.Fatalf("%d READs, with room again: %d packets, want the other %d", reads, len(ps), npkts-sendBatch)
		}
	}
}

// An ACK made while READ responses are queued goes behind them, as they
// go: not while the link has no room, and a later ACK replaces one that
// has not gone yet.
func TestResponderQueuesAnACKBehindREADResponses(t *testing.T) {
	s := newRecvRig(t)
	const npkts = maxReadBurst + 88
	read := wire.Headers{BTH: wire.BTHFields{OpCode: wire.RCReadRequest, PKey: wire.DefaultPKey, DestQP: 0x22, PSN: rigPSN, AckReq: true},
		RETH: wire.RETHFields{VA: 0, RKey: 7, DMALen: npkts * rigMTU}}
	write := func(k uint32) wire.Headers {
		return wire.Headers{BTH: wire.BTHFields{OpCode: wire.RCWriteOnly, PKey: wire.DefaultPKey, DestQP: 0x22, PSN: rigPSN.Add(k), AckReq: true},
			RETH: wire.RETHFields{VA: 0, RKey: 7, DMALen: 8}}
	}
	t0 := time.Unix(1000, 0)
	if ps := s.step(t0, false, read); len(ps) != maxReadBurst {
		t.Fatalf("first step: %d packets, want %d", len(ps), maxReadBurst)
	}
	s.noRoom = true
	for k := uint32(npkts); k < npkts+2; k++ {
		if ps := s.step(t0, false, write(k)); len(ps) != 0 {
			t.Fatalf("WRITE at %d with no room on the link: sent %d packets, want none (the first %s)", k, len(ps), ps[0].OpCode())
		}
	}
	s.noRoom = false
	ps := s.step(t0, false)
	if len(ps) != npkts-maxReadBurst+1 {
		t.Fatalf("once the link has room: %d packets, want the other %d responses and one ACK", len(ps), npkts-maxReadBurst)
	}
	last := ps[len(ps)-1]
	if ps[len(ps)-2].OpCode() != wire.RCReadResponseLast || last.OpCode() != wire.RCAcknowledge || last.BTH.PSN() != rigPSN.Add(npkts+1) {
		t.Fatalf("once the link has room: … %s, %s@%d; want … RC_RDMA_READ_RESPONSE_LAST, RC_ACKNOWLEDGE@%d",
			ps[len(ps)-2].OpCode(), last.OpCode(), last.BTH.PSN().Diff(rigPSN), npkts+1)
	}
}

// An ACK a polled step held while READ responses were queued goes at once
// behind all of them when the QP goes to RESET or ERR or is destroyed
// (final), and behind them as they go otherwise.
func TestResponderSendsAHeldACKBehindREADResponses(t *testing.T) {
	const npkts = 2*maxReadBurst + 88
	read := wire.Headers{BTH: wire.BTHFields{OpCode: wire.RCReadRequest, PKey: wire.DefaultPKey, DestQP: 0x22, PSN: rigPSN, AckReq: true},
		RETH: wire.RETHFields{VA: 0, RKey: 7, DMALen: npkts * rigMTU}}
	write := wire.Headers{BTH: wire.BTHFields{OpCode: wire.RCWriteOnly, PKey: wire.DefaultPKey, DestQP: 0x22, PSN: rigPSN.Add(npkts), AckReq: true},
		RETH: wire.RETHFields{VA: 0, RKey: 7, DMALen: 8}}
	for _, final := range []bool{true, false} {
		s := newRecvRig(t)
		s.host.mem = make([]byte, npkts*rigMTU)
		t0 := time.Unix(1000, 0)
		s.step(t0, false, read)
		if ps := s.step(t0, true, write); len(ps) != maxReadBurst || !s.resp.held {
			t.Fatalf("the WRITE's polled step: %d packets, ACK held %v; want %d responses and the ACK held", len(ps), s.resp.held, maxReadBurst)
		}
		s.resp.flushHeld(t0, final)
		ps := s.host.takeOut(t)
		if !final {
			if len(ps) != 0 {
				t.Fatalf("not final: sent %d packets, want none yet", len(ps))
			}
			ps = s.step(t0, false) // the ACK was queued: it goes as they do
		}
		last := ps[len(ps)-1]
		if len(ps) != npkts-2*maxReadBurst+1 || last.OpCode() != wire.RCAcknowledge || last.BTH.PSN() != rigPSN.Add(npkts) {
			t.Fatalf("final %v: %d packets ending %s@%d; want the other %d responses, then RC_ACKNOWLEDGE@%d",
				final, len(ps), last.OpCode(), last.BTH.PSN().Diff(rigPSN), npkts-2*maxReadBurst, npkts)
		}
	}
}

// A SEND with no receive WQE posted is RNR NAKed with the QP's
// min_rnr_timer and leaves nothing behind: once a WQE is posted the same
// PSN is taken.
func TestResponderRNRNAKsASendWithNoReceive(t *testing.T) {
	s := newRecvRig(t)
	t0 := time.Unix(1000, 0)
	ps := s.step(t0, false, send(0))
	expectPSNs(t, ps, " RC_ACKNOWLEDGE@0", "no receive WQE")
	if syn := ps[0].AETH.Syndrome(); syn != wire.RNRNAKSyndrome(rigRNR) {
		t.Fatalf("syndrome %#x, want an RNR NAK with timer %d", uint8(syn), rigRNR)
	}
	s.host.rq.push(9, []verbs.SGE{{Addr: 0, Length: 64}})
	ps = s.step(t0, false, send(0))
	if expectPSNs(t, ps, " RC_ACKNOWLEDGE@0", "after posting"); ps[0].AETH.Syndrome() != wire.SyndromeACKUnlimited || len(s.host.wcs) != 1 {
		t.Fatalf("after posting: syndrome %#x, completions %+v", uint8(ps[0].AETH.Syndrome()), s.host.wcs)
	}
}

// A packet ahead of the expected PSN is NAKed with a sequence error
// once; the NAK goes again only after renakAfter more such packets.
func TestResponderNAKsAGapOnceThenAgainAfterRenakAfter(t *testing.T) {
	s := newRecvRig(t)
	t0 := time.Unix(1000, 0)
	expectPSNs(t, s.step(t0, false, send(1)), " RC_ACKNOWLEDGE@0", "the first packet past the gap")
	for k := uint32(2); k < renakAfter+1; k++ {
		expectPSNs(t, s.step(t0, false, send(k)), "", fmt.Sprintf("packet %d past the gap", k))
	}
	ps := s.step(t0, false, send(renakAfter+1))
	if expectPSNs(t, ps, " RC_ACKNOWLEDGE@0", "renakAfter packets on"); ps[0].AETH.Syndrome() != wire.NAKPSNSequenceError {
		t.Fatalf("syndrome %#x, want a PSN sequence error NAK", uint8(ps[0].AETH.Syndrome()))
	}
}
