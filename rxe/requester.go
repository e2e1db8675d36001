package rxe

import (
	"net/netip"
	"time"

	"github.com/rdmago/rdmago/rxe/link"
	"github.com/rdmago/rdmago/rxe/wire"
	"github.com/rdmago/rdmago/verbs"
)

// The QP engine has three parts, as Linux rxe's has. The requester turns
// send WQEs into request packets; the completer (completer.go) takes the
// acknowledgements and READ and atomic responses that come back, and
// decides what is done, what goes again and when; the responder
// (responder.go) answers the peer's requests. Each takes a WQE or a parsed
// packet and the time, now, and leaves packets in the QP's out batch,
// completions as WQEs marked done and its next deadline. None reads a
// clock, starts a goroutine or calls the link: the QP (qp.go) runs them in
// its step, and owns the rest.

// engineHost is what the requester and the completer need of their QP:
// the out batch, local memory and the move to ERR. A *qp is one; the
// send side's unit tests use a fake.
type engineHost interface {
	// queueOutTo returns a packet buffer of the out batch to build
	// into, for addr from the link of GID index sgid.
	queueOutTo(addr netip.Addr, sgid int) *link.Packet
	// resolve maps an SGE list to the memory it names in the QP's PD,
	// checking local write access if write. false: LOC_PROT_ERR.
	resolve(sges []verbs.SGE, write bool, segs [][]byte) ([][]byte, bool)
	// localOp carries out a BIND_MW or LOCAL_INV work request and
	// returns its completion status.
	localOp(wr *verbs.SendWR) verbs.WCStatus
	// toError moves the QP to ERR; the attributes the parts share say
	// so at once.
	toError()
	// hasRoom sends the packets built so far and reports whether the
	// link still has room for more (hw.sendRoom); if not, the QP is
	// stepped again once it has.
	hasRoom() bool
}

// tally is where the engine's parts count (verbs.Counter): the QP's
// counters and its device's. A value, not a method of the host, so that
// counting stays an inlined pair of atomic adds on the packet path.
type tally struct{ qp, dev *counters }

func (t tally) add(k verbs.Counter, n uint64) {
	t.qp[k].Add(n)
	t.dev[k].Add(n)
}

// sendWQE is a send work request on its way through the requester.
type sendWQE struct {
	wr       verbs.SendWR
	sges     []verbs.SGE // owned copy of wr.SGList
	inline   []byte      // data copied at post time (isInline)
	ud       udDest      // UD: where it goes
	length   uint64
	signaled bool

	// Owner state.
	segs     [][]byte // local memory, resolved when the WQE starts
	started  bool     // PSNs assigned
	firstPSN wire.PSN
	npkts    uint32 // PSNs the operation uses
	sent     uint32 // packets sent in the current pass (a request counts 1 for READ and atomics)
	readDone uint32 // READ: response packets received in order
	done     bool
	status   verbs.WCStatus
}

func (w *sendWQE) lastPSN() wire.PSN { return w.firstPSN.Add(w.npkts - 1) }

// isInline reports whether the data was copied at post time, into inline
// (IBV_SEND_INLINE), rather than read from the SGEs.
func (w *sendWQE) isInline() bool { return w.wr.SendFlags&verbs.SendInline != 0 }

// isReadOrAtomic reports whether the WQE needs a response carrying data.
func (w *sendWQE) isReadOrAtomic() bool {
	switch w.wr.Opcode {
	case verbs.WRRDMARead, verbs.WRAtomicCmpAndSwp, verbs.WRAtomicFetchAndAdd:
		return true
	}
	return false
}

// packetsToSend is how many packets the WQE sends in a pass.
func (w *sendWQE) packetsToSend() uint32 {
	if w.isReadOrAtomic() {
		return 1
	}
	return w.npkts
}

// sendQueue is the send queue as the requester and the completer share
// it: the WQEs the owner took from the program, oldest first, until they
// retire, and the PSNs they use.
type sendQueue struct {
	wqes   []*sendWQE
	psn    wire.PSN // next PSN to assign
	una    wire.PSN // oldest unanswered PSN
	next   int      // index in wqes of the next WQE to (re)send
	inited bool     // SQ_PSN was set: the QP may send
}

// reset starts the PSNs at psn (SQ_PSN was set).
func (s *sendQueue) reset(psn wire.PSN) {
	s.psn, s.una, s.next, s.inited = psn, psn, 0, true
}

// clear drops every WQE and the PSNs (the QP went to RESET).
func (s *sendQueue) clear() {
	clear(s.wqes)
	*s = sendQueue{wqes: s.wqes[:0]}
}

// wqeAt returns the started WQE whose PSN range holds psn.
func (s *sendQueue) wqeAt(psn wire.PSN) *sendWQE {
	for _, w := range s.wqes {
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
func (s *sendQueue) rewind(psn wire.PSN) {
	for i, w := range s.wqes {
		if !w.started {
			return
		}
		if w.done || w.lastPSN().Diff(psn) < 0 {
			continue
		}
		if i < s.next {
			s.next = i
		}
		switch d := psn.Diff(w.firstPSN); {
		case w.isReadOrAtomic() || d <= 0:
			w.sent = 0
		case w.sent > uint32(d):
			w.sent = uint32(d)
		}
		for _, x := range s.wqes[i+1:] {
			if !x.started {
				break
			}
			x.sent = 0
		}
		return
	}
}

// sentAfter counts the request packets of the current pass with PSNs
// after psn, up to last. A READ or atomic request is one packet, however
// many PSNs its responses take.
func (s *sendQueue) sentAfter(psn, last wire.PSN) int {
	n := 0
	for _, w := range s.wqes {
		if !w.started {
			break
		}
		if w.sent == 0 {
			continue
		}
		if w.isReadOrAtomic() {
			if w.firstPSN.Diff(psn) > 0 && w.firstPSN.Diff(last) <= 0 {
				n++
			}
			continue
		}
		lo, hi := w.firstPSN, w.firstPSN.Add(w.sent-1)
		if lo.Diff(psn) <= 0 {
			lo = psn.Add(1)
		}
		if hi.Diff(last) > 0 {
			hi = last
		}
		if d := hi.Diff(lo); d >= 0 {
			n += int(d) + 1
		}
	}
	return n
}

// more reports whether the requester has requests of the current pass
// still to send (now, or once the window, a fence or max_rd_atomic lets
// them).
func (s *sendQueue) more() bool { return s.next < len(s.wqes) }

// busy reports whether a request is in flight: started, not completed.
func (s *sendQueue) busy() bool {
	for _, w := range s.wqes {
		if w.started && !w.done {
			return true
		}
	}
	return false
}

// doneHead is how many WQEs at the head are done: those that may retire,
// in order.
func (s *sendQueue) doneHead() int {
	k := 0
	for _, w := range s.wqes {
		if !w.done {
			break
		}
		k++
	}
	return k
}

// drop removes the first k WQEs (they retired).
func (s *sendQueue) drop(k int) {
	clear(s.wqes[:k])
	s.wqes = append(s.wqes[:0], s.wqes[k:]...)
	s.next = max(s.next-k, 0)
}

// failAll completes every WQE not yet done with status, keeping the
// status of one that already failed.
func (s *sendQueue) failAll(status verbs.WCStatus) {
	for _, w := range s.wqes {
		if !w.done {
			w.done, w.status = true, status
		}
	}
}

// requester builds request packets from the send queue (Linux rxe's
// rxe_requester).
type requester struct {
	sq    *sendQueue
	comp  *completer // keeps the retransmit timer and the RNR wait
	host  engineHost
	stats tally
	attr  *ownerAttr
	typ   verbs.QPType
	qpn   uint32
	noack int  // packets sent since the last AckReq
	built bool // a request was built since takeBuilt
	tail  bool // the packet being built is a tail probe: it asks for an ACK
}

// reset drops the requester's state (the QP went to RESET, or SQ_PSN was
// set).
func (r *requester) reset() { r.noack, r.built = 0, false }

// takeBuilt reports whether a request was built since it was last asked.
func (r *requester) takeBuilt() bool {
	b := r.built
	r.built = false
	return b
}

// sending reports whether the QP's state lets requests go.
func (r *requester) sending() bool {
	return r.attr.state == verbs.QPSRTS || r.attr.state == verbs.QPSSQD
}

// roomCheckEvery is how many packets the requester, or the responder's
// READ responses, build between looks at whether the link still has room:
// an out batch.
const roomCheckEvery = sendBatch

// sendMore builds, at now, what the window, fences and max_rd_atomic
// allow.
func (r *requester) sendMore(now time.Time) {
	s := r.sq
	if !s.inited || !r.sending() || r.comp.rnrWait(now) {
		return
	}
	mtu := uint64(r.attr.mtu)
	built := 0
	if r.comp.tailDue {
		r.comp.tailDue = false
		r.sendTail(mtu, now)
		built++
	}
	for s.next < len(s.wqes) {
		if !r.sending() {
			return // a local error moved the QP to ERR: send nothing more
		}
		w := s.wqes[s.next]
		if w.done {
			s.next++
			continue
		}
		if !w.started {
			if r.attr.state == verbs.QPSSQD {
				return // drained: start nothing new
			}
			if !r.start(w, mtu) {
				return
			}
			if w.done { // failed locally
				s.next++
				continue
			}
		}
		if !w.isReadOrAtomic() {
			// What the responder acknowledged since the requester
			// went back does not go again: a responder that held
			// the requests after a gap (hold.go) acknowledges them
			// all once the missing one comes.
			if d := s.una.Diff(w.firstPSN); d > 0 && uint32(d) > w.sent {
				w.sent = min(uint32(d), w.npkts)
			}
		}
		for w.sent < w.packetsToSend() {
			psn := w.firstPSN.Add(w.sent)
			if w.isReadOrAtomic() {
				psn = w.firstPSN.Add(w.readDone)
			}
			if psn.Diff(s.una) >= maxUnackedPSN {
				return // window full
			}
			if built > 0 && built%roomCheckEvery == 0 && !r.host.hasRoom() {
				return // the link filled up meanwhile
			}
			r.build(w, mtu, now)
			built++
		}
		s.next++
	}
}

// sendTail sends the last request packet sent again, asking for an ACK,
// leaving the send position where it is: the completer's tail probe
// (completer.tailAt).
func (r *requester) sendTail(mtu uint64, now time.Time) {
	psn := r.comp.hiSent
	w := r.sq.wqeAt(psn)
	if w == nil || w.done || w.isReadOrAtomic() {
		return // answered meanwhile
	}
	sent := w.sent
	w.sent = uint32(psn.Diff(w.firstPSN))
	r.tail = true
	r.build(w, mtu, now)
	r.tail = false
	w.sent = sent
	r.stats.add(verbs.CounterCompleterRetryErr, 1)
}

// start assigns PSNs to a WQE and resolves its memory. It returns false
// if the WQE must wait (fence, max_rd_atomic).
func (r *requester) start(w *sendWQE, mtu uint64) bool {
	s := r.sq
	if w.wr.SendFlags&verbs.SendFence != 0 || w.isReadOrAtomic() {
		// In flight: READs and atomics not completed, and those after
		// the oldest incomplete WQE even if their response came (they
		// retire in order). Bounding the latter by max_rd_atomic keeps
		// every request we may have to repeat within the responder's
		// max_dest_rd_atomic resources, which replay it.
		pending, inFlight := 0, 0
		for _, x := range s.wqes[:s.next] {
			if x.started && x.isReadOrAtomic() {
				inFlight++
				if !x.done {
					pending++
				}
			}
		}
		if w.wr.SendFlags&verbs.SendFence != 0 && pending > 0 {
			return false
		}
		if w.isReadOrAtomic() && inFlight >= r.attr.maxRdAtomic {
			return false
		}
	}
	switch w.wr.Opcode {
	case verbs.WRBindMW, verbs.WRLocalInv:
		// Local operations: carried out here, in order, using no PSN.
		status := r.host.localOp(&w.wr)
		w.started, w.firstPSN, w.npkts = true, s.psn, 0
		w.done, w.status = true, status
		if status != verbs.WCSuccess {
			r.host.toError()
		}
		return true
	}
	if !w.isInline() {
		segs, ok := r.host.resolve(w.sges, w.isReadOrAtomic(), w.segs[:0])
		if !ok {
			w.done, w.status = true, verbs.WCLocProtErr
			r.host.toError()
			return true
		}
		w.segs = segs
	}
	w.npkts = 1
	if w.wr.Opcode != verbs.WRAtomicCmpAndSwp && w.wr.Opcode != verbs.WRAtomicFetchAndAdd && w.length > mtu {
		w.npkts = uint32((w.length + mtu - 1) / mtu)
	}
	w.firstPSN = s.psn
	s.psn = s.psn.Add(w.npkts)
	w.started = true
	switch w.wr.Opcode {
	case verbs.WRRDMAWrite, verbs.WRRDMAWriteWithImm, verbs.WRRDMARead:
		r.stats.add(verbs.CounterRDMASends, 1)
	}
	return true
}

// build builds the next packet of w into the out batch, at now.
func (r *requester) build(w *sendWQE, mtu uint64, now time.Time) {
	h := wire.Headers{BTH: wire.BTHFields{PKey: wire.DefaultPKey, DestQP: r.attr.destQP}, XRCSRQN: w.wr.RemoteSRQN}
	var off, n uint64
	last := false
	switch w.wr.Opcode {
	case verbs.WRRDMARead:
		k := uint64(w.readDone)
		h.BTH.OpCode = opcodeFor(r.typ, wire.RCReadRequest)
		h.BTH.PSN = w.firstPSN.Add(w.readDone)
		h.RETH = wire.RETHFields{VA: w.wr.RemoteAddr + k*mtu, RKey: w.wr.RKey, DMALen: uint32(w.length - min(w.length, k*mtu))}
		w.sent = 1
		last = true
	case verbs.WRAtomicCmpAndSwp, verbs.WRAtomicFetchAndAdd:
		h.BTH.OpCode = opcodeFor(r.typ, wire.RCFetchAdd)
		h.AtomicETH = wire.AtomicETHFields{VA: w.wr.RemoteAddr, RKey: w.wr.RKey, SwapAdd: w.wr.CompareAdd}
		if w.wr.Opcode == verbs.WRAtomicCmpAndSwp {
			h.BTH.OpCode = opcodeFor(r.typ, wire.RCCompareSwap)
			h.AtomicETH.SwapAdd, h.AtomicETH.Compare = w.wr.Swap, w.wr.CompareAdd
		}
		h.BTH.PSN = w.firstPSN
		w.sent = 1
		last = true
	case verbs.WRSend, verbs.WRSendWithImm:
		if datagramType(r.typ) {
			r.buildUD(w)
			return
		}
		fallthrough
	default:
		k := w.sent
		off = uint64(k) * mtu
		n = min(mtu, w.length-off)
		first := k == 0
		last = k == w.npkts-1
		h.BTH.OpCode = opcodeFor(r.typ, requestOpCode(w.wr.Opcode, first, last))
		h.BTH.PSN = w.firstPSN.Add(k)
		if first && (w.wr.Opcode == verbs.WRRDMAWrite || w.wr.Opcode == verbs.WRRDMAWriteWithImm) {
			h.RETH = wire.RETHFields{VA: w.wr.RemoteAddr, RKey: w.wr.RKey, DMALen: uint32(w.length)}
		}
		h.Imm = w.wr.ImmData
		h.IETHRKey = w.wr.InvalidateRKey
		h.BTH.SolicitedEvent = last && w.wr.SendFlags&verbs.SendSolicited != 0
		w.sent++
	}
	r.built = true
	reliable := reliableType(r.typ)
	r.noack++
	if reliable && (last || r.noack >= maxPktPerAck || r.tail) {
		h.BTH.AckReq = true
		r.noack = 0
	}
	p := r.host.queueOutTo(r.attr.dest, r.attr.sgid)
	buf, payload, err := wire.AppendHeaders(p.Buf, &h, int(n))
	if err != nil {
		panic("rxe: building " + h.BTH.OpCode.String() + ": " + err.Error()) // a bug: the opcode table and this switch disagree
	}
	if w.isInline() {
		copy(payload, w.inline[off:off+n])
	} else {
		gather(payload, w.segs, off)
	}
	p.Buf = buf
	if r.typ == verbs.QPTUC && last {
		// UC: nothing acknowledges; a WQE is done once sent.
		w.done = true
		r.sq.una = w.lastPSN().Add(1)
	}
	if reliable {
		r.comp.sent(h.BTH.PSN, now)
	}
}

// requestOpCode picks the RC opcode of one packet of a SEND or WRITE.
func requestOpCode(op verbs.WROpcode, first, last bool) wire.OpCode {
	var c wire.OpCode
	imm := op == verbs.WRSendWithImm || op == verbs.WRRDMAWriteWithImm
	switch op {
	case verbs.WRSend, verbs.WRSendWithImm, verbs.WRSendWithInv:
		switch {
		case first && last:
			c = wire.RCSendOnly
			if imm {
				c = wire.RCSendOnlyWithImmediate
			} else if op == verbs.WRSendWithInv {
				c = wire.RCSendOnlyWithInvalidate
			}
		case first:
			c = wire.RCSendFirst
		case last:
			c = wire.RCSendLast
			if imm {
				c = wire.RCSendLastWithImmediate
			} else if op == verbs.WRSendWithInv {
				c = wire.RCSendLastWithInvalidate
			}
		default:
			c = wire.RCSendMiddle
		}
	default: // RDMA WRITE
		switch {
		case first && last:
			c = wire.RCWriteOnly
			if imm {
				c = wire.RCWriteOnlyWithImmediate
			}
		case first:
			c = wire.RCWriteFirst
		case last:
			c = wire.RCWriteLast
			if imm {
				c = wire.RCWriteLastWithImmediate
			}
		default:
			c = wire.RCWriteMiddle
		}
	}
	return c
}
