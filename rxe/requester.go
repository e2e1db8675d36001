package rxe

import (
	"fmt"
	"slices"
	"time"

	"github.com/rdmago/rdmago/rxe/wire"
	"github.com/rdmago/rdmago/verbs"
	"github.com/rdmago/rdmago/verbs/swcq"
)

// sendWQE is a send work request on its way through the requester.
type sendWQE struct {
	wr       verbs.SendWR
	sges     []verbs.SGE // owned copy of wr.SGList
	inline   []byte      // data copied at post time (isInline)
	ud       *udDest     // UD: where it goes
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

// requester is the send side's protocol state.
type requester struct {
	psn         wire.PSN // next PSN to assign
	una         wire.PSN // oldest unacknowledged PSN
	next        int      // index in sq of the next WQE to (re)send
	noack       int      // packets sent since the last AckReq
	retries     int      // transport retries left
	rnrRetries  int      // RNR retries left
	retryAt     time.Time
	rnrUntil    time.Time // after an RNR NAK, wait until then
	rnrPending  bool
	progress    bool     // something was acknowledged since the timer was armed
	readGap     wire.PSN // the last PSN resendFrom asked again from
	gapSet      bool
	gapSeen     int      // out-of-order responses since asking again from readGap
	nakPSN      wire.PSN // the PSN of the last sequence error NAK
	nakSet      bool
	inited      bool
	drainedSent bool // IBV_EVENT_SQ_DRAINED raised for this stay in SQD
}

func (r *requester) reset(psn wire.PSN) {
	*r = requester{psn: psn, una: psn, inited: true}
}

// deadline returns when the owner must next wake for the requester.
func (r *requester) deadline() time.Time {
	if r.rnrPending {
		return r.rnrUntil
	}
	return r.retryAt
}

// PostSend implements verbs.QPDriver (ibv_post_send).
func (q *qp) PostSend(wrs []verbs.SendWR) error {
	err := q.postSend(wrs)
	q.poke()
	return err
}

func (q *qp) postSend(wrs []verbs.SendWR) error {
	q.mu.Lock()
	defer q.mu.Unlock()
	if q.destroyed {
		return &verbs.WRError{Err: verbs.Errorf("ibv_post_send", verbs.ErrClosed, "QP destroyed")}
	}
	n := 0
	for i := range wrs {
		w, err := q.checkSend(&wrs[i])
		if err != nil {
			return &verbs.WRError{Index: i, WRID: wrs[i].WRID, Err: err}
		}
		q.posted = append(q.posted, w)
		q.sqDepth++
		n++
	}
	return nil
}

// checkSend validates a send work request as rxe does at post time and
// returns its WQE (q.mu held).
func (q *qp) checkSend(wr *verbs.SendWR) (*sendWQE, error) {
	bad := func(errno verbs.Errno, format string, args ...any) error {
		return verbs.Errorf("ibv_post_send", errno, fmt.Sprintf(format, args...))
	}
	switch s := q.attr.QPState; s {
	case verbs.QPSRTS, verbs.QPSSQD, verbs.QPSErr, verbs.QPSSQE:
	default:
		return nil, bad(verbs.ErrInvalidArgument, "QP %#x is in %s: sends need RTS", q.num, s)
	}
	if q.typ == verbs.QPTXRCRecv {
		return nil, bad(verbs.ErrInvalidArgument, "XRC_RECV QP %#x has no send queue", q.num)
	}
	if !opAllowed(q.typ, wr.Opcode) {
		return nil, bad(verbs.ErrInvalidArgument, "opcode %s not valid on a %s QP", wr.Opcode, q.typ)
	}
	if q.typ == verbs.QPTXRCSend && wr.RemoteSRQN > 0xffffff {
		return nil, bad(verbs.ErrInvalidArgument, "remote_srqn %#x above 24 bits", wr.RemoteSRQN)
	}
	if len(wr.SGList) > int(q.cap.MaxSendSGE) {
		return nil, bad(verbs.ErrInvalidArgument, "%d SGEs, the QP takes %d", len(wr.SGList), q.cap.MaxSendSGE)
	}
	if q.sqDepth >= int(q.cap.MaxSendWR) {
		return nil, bad(verbs.ErrNoMemory, "send queue full (%d WRs)", q.cap.MaxSendWR)
	}
	var length uint64
	for _, s := range wr.SGList {
		length += uint64(s.Length)
	}
	if length > maxMsgSize {
		return nil, bad(verbs.ErrInvalidArgument, "message of %d bytes above the %d-byte maximum", length, maxMsgSize)
	}
	var ud *udDest
	if q.datagram() {
		d, err := q.checkUD(wr, length)
		if err != nil {
			return nil, err
		}
		ud = d
	}
	switch wr.Opcode {
	case verbs.WRBindMW:
		if len(wr.SGList) != 0 || wr.SendFlags&verbs.SendInline != 0 {
			return nil, bad(verbs.ErrInvalidArgument, "BIND_MW takes no data")
		}
		if wr.BindMW.MW == nil {
			return nil, bad(verbs.ErrInvalidArgument, "BIND_MW without a memory window")
		}
		if info := &wr.BindMW.BindInfo; info.Length > 0 && info.MR == nil {
			return nil, bad(verbs.ErrInvalidArgument, "BIND_MW of %d bytes without a memory region", info.Length)
		}
	case verbs.WRLocalInv:
		if len(wr.SGList) != 0 || wr.SendFlags&verbs.SendInline != 0 {
			return nil, bad(verbs.ErrInvalidArgument, "LOCAL_INV takes no data")
		}
	case verbs.WRAtomicCmpAndSwp, verbs.WRAtomicFetchAndAdd:
		if length != 8 || len(wr.SGList) != 1 {
			return nil, bad(verbs.ErrInvalidArgument, "an atomic needs one 8-byte SGE, have %d bytes", length)
		}
		if wr.RemoteAddr&7 != 0 {
			return nil, bad(verbs.ErrInvalidArgument, "atomic remote address %#x is not 8-byte aligned", wr.RemoteAddr)
		}
	}
	w := q.newSendWQE()
	w.wr, w.length, w.signaled, w.ud = *wr, length, q.sigAll || wr.SendFlags&verbs.SendSignaled != 0, ud
	if wr.SendFlags&verbs.SendInline != 0 {
		if w.isReadOrAtomic() {
			q.freeSendWQEs(w)
			return nil, bad(verbs.ErrInvalidArgument, "IBV_SEND_INLINE with %s", wr.Opcode)
		}
		if length > uint64(q.cap.MaxInlineData) {
			q.freeSendWQEs(w)
			return nil, bad(verbs.ErrInvalidArgument, "%d inline bytes, the QP takes %d", length, q.cap.MaxInlineData)
		}
		// Copy now: the caller may reuse the buffer as soon as we return.
		segs, _, ok := q.hw.resolveSGEs(q.pd, wr.SGList, false, w.segs[:0])
		w.segs = segs
		if !ok {
			q.freeSendWQEs(w)
			return nil, bad(verbs.ErrInvalidArgument, "inline data must lie in memory registered with this PD")
		}
		w.inline = slices.Grow(w.inline[:0], int(length))[:length]
		gather(w.inline, segs, 0)
		clear(w.segs)
	} else {
		w.sges = append(w.sges[:0], wr.SGList...)
	}
	w.wr.SGList = nil
	return w, nil
}

// newSendWQE takes a retired send WQE, emptied, or makes one (q.mu held).
func (q *qp) newSendWQE() *sendWQE {
	n := len(q.free)
	if n == 0 {
		return new(sendWQE)
	}
	w := q.free[n-1]
	q.free[n-1] = nil
	q.free = q.free[:n-1]
	return w
}

// freeSendWQEs keeps retired WQEs for newSendWQE, their buffers' room
// kept and everything else cleared (q.mu held). It keeps at most the
// send queue's depth.
func (q *qp) freeSendWQEs(ws ...*sendWQE) {
	for _, w := range ws {
		if len(q.free) >= int(q.cap.MaxSendWR) {
			return
		}
		clear(w.segs)
		*w = sendWQE{sges: w.sges[:0], inline: w.inline[:0], segs: w.segs[:0]}
		q.free = append(q.free, w)
	}
}

// opAllowed says which work requests each transport takes. XRC sends
// what RC does but SEND_WITH_INV: the type 2 windows it would invalidate
// are bound through a QP's own send queue, which an XRC_RECV QP lacks.
func opAllowed(t verbs.QPType, op verbs.WROpcode) bool {
	switch op {
	case verbs.WRSend, verbs.WRSendWithImm:
		return t != verbs.QPTXRCRecv
	case verbs.WRRDMAWrite, verbs.WRRDMAWriteWithImm, verbs.WRBindMW, verbs.WRLocalInv:
		return t == verbs.QPTRC || t == verbs.QPTUC || t == verbs.QPTXRCSend
	case verbs.WRRDMARead, verbs.WRAtomicCmpAndSwp, verbs.WRAtomicFetchAndAdd:
		return t == verbs.QPTRC || t == verbs.QPTXRCSend
	case verbs.WRSendWithInv:
		return t == verbs.QPTRC
	}
	return false
}

// sendMore sends what the window, the fence and max_rd_atomic allow.
func (q *qp) sendMore(now time.Time) {
	r := &q.req
	if !r.inited || q.st.state != verbs.QPSRTS && q.st.state != verbs.QPSSQD {
		return
	}
	if r.rnrPending {
		if now.Before(r.rnrUntil) {
			return
		}
		r.rnrPending = false
	}
	mtu := uint64(q.st.mtu)
	for r.next < len(q.sq) {
		if q.st.state != verbs.QPSRTS && q.st.state != verbs.QPSSQD {
			return // a local error moved the QP to ERR: send nothing more
		}
		w := q.sq[r.next]
		if w.done {
			r.next++
			continue
		}
		if !w.started {
			if q.st.state == verbs.QPSSQD {
				return // drained: start nothing new
			}
			if !q.startWQE(w, mtu) {
				return
			}
			if w.done { // failed locally
				r.next++
				continue
			}
		}
		for w.sent < w.packetsToSend() {
			psn := w.firstPSN.Add(w.sent)
			if w.isReadOrAtomic() {
				psn = w.firstPSN.Add(w.readDone)
			}
			if psn.Diff(r.una) >= maxUnackedPSN {
				return // window full
			}
			q.buildRequest(w, mtu, now)
		}
		r.next++
	}
}

// packetsToSend is how many packets the WQE sends in a pass.
func (w *sendWQE) packetsToSend() uint32 {
	if w.isReadOrAtomic() {
		return 1
	}
	return w.npkts
}

// startWQE assigns PSNs to a WQE and resolves its memory. It returns false
// if the WQE must wait (fence, max_rd_atomic).
func (q *qp) startWQE(w *sendWQE, mtu uint64) bool {
	r := &q.req
	if w.wr.SendFlags&verbs.SendFence != 0 || w.isReadOrAtomic() {
		// In flight: READs and atomics not completed, and those after
		// the oldest incomplete WQE even if their response came (they
		// retire in order). Bounding the latter by max_rd_atomic keeps
		// every request we may have to repeat within the responder's
		// max_dest_rd_atomic resources, which replay it.
		pending, inFlight := 0, 0
		for _, x := range q.sq[:r.next] {
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
		if w.isReadOrAtomic() && inFlight >= q.st.maxRdAtomic {
			return false
		}
	}
	switch w.wr.Opcode {
	case verbs.WRBindMW, verbs.WRLocalInv:
		// Local operations: carried out here, in order, using no PSN.
		status := verbs.WCSuccess
		if w.wr.Opcode == verbs.WRBindMW {
			status = q.bindMW(&w.wr.BindMW)
		} else if !q.invalidate(w.wr.InvalidateRKey) {
			status = verbs.WCLocQPOpErr
		}
		w.started, w.firstPSN, w.npkts = true, r.psn, 0
		w.done, w.status = true, status
		if status != verbs.WCSuccess {
			q.toError()
		}
		return true
	}
	if !w.isInline() {
		write := w.isReadOrAtomic()
		segs, _, ok := q.hw.resolveSGEs(q.pd, w.sges, write, w.segs[:0])
		if !ok {
			w.done, w.status = true, verbs.WCLocProtErr
			q.toError()
			return true
		}
		w.segs = segs
	}
	w.npkts = 1
	if w.wr.Opcode != verbs.WRAtomicCmpAndSwp && w.wr.Opcode != verbs.WRAtomicFetchAndAdd && w.length > mtu {
		w.npkts = uint32((w.length + mtu - 1) / mtu)
	}
	w.firstPSN = r.psn
	r.psn = r.psn.Add(w.npkts)
	w.started = true
	switch w.wr.Opcode {
	case verbs.WRRDMAWrite, verbs.WRRDMAWriteWithImm, verbs.WRRDMARead:
		q.count(verbs.CounterRDMASends, 1)
	}
	return true
}

// buildRequest builds the next packet of w into the out batch, at now.
func (q *qp) buildRequest(w *sendWQE, mtu uint64, now time.Time) {
	r := &q.req
	h := wire.Headers{BTH: wire.BTHFields{PKey: wire.DefaultPKey, DestQP: q.st.destQP}, XRCSRQN: w.wr.RemoteSRQN}
	var off, n uint64
	last := false
	switch w.wr.Opcode {
	case verbs.WRRDMARead:
		k := uint64(w.readDone)
		h.BTH.OpCode = q.opcode(wire.RCReadRequest)
		h.BTH.PSN = w.firstPSN.Add(w.readDone)
		h.RETH = wire.RETHFields{VA: w.wr.RemoteAddr + k*mtu, RKey: w.wr.RKey, DMALen: uint32(w.length - min(w.length, k*mtu))}
		w.sent = 1
		last = true
	case verbs.WRAtomicCmpAndSwp, verbs.WRAtomicFetchAndAdd:
		h.BTH.OpCode = q.opcode(wire.RCFetchAdd)
		h.AtomicETH = wire.AtomicETHFields{VA: w.wr.RemoteAddr, RKey: w.wr.RKey, SwapAdd: w.wr.CompareAdd}
		if w.wr.Opcode == verbs.WRAtomicCmpAndSwp {
			h.BTH.OpCode = q.opcode(wire.RCCompareSwap)
			h.AtomicETH.SwapAdd, h.AtomicETH.Compare = w.wr.Swap, w.wr.CompareAdd
		}
		h.BTH.PSN = w.firstPSN
		w.sent = 1
		last = true
	case verbs.WRSend, verbs.WRSendWithImm:
		if q.datagram() {
			q.buildUD(w)
			return
		}
		fallthrough
	default:
		k := w.sent
		off = uint64(k) * mtu
		n = min(mtu, w.length-off)
		first := k == 0
		last = k == w.npkts-1
		h.BTH.OpCode = q.opcode(requestOpCode(w.wr.Opcode, first, last))
		h.BTH.PSN = w.firstPSN.Add(k)
		if first && (w.wr.Opcode == verbs.WRRDMAWrite || w.wr.Opcode == verbs.WRRDMAWriteWithImm) {
			h.RETH = wire.RETHFields{VA: w.wr.RemoteAddr, RKey: w.wr.RKey, DMALen: uint32(w.length)}
		}
		h.Imm = w.wr.ImmData
		h.IETHRKey = w.wr.InvalidateRKey
		h.BTH.SolicitedEvent = last && w.wr.SendFlags&verbs.SendSolicited != 0
		w.sent++
	}
	q.resp.unanswered = false // the program answers: its ACKs may wait for it
	r.noack++
	if q.reliable() && (last || r.noack >= maxPktPerAck) {
		h.BTH.AckReq = true
		r.noack = 0
	}
	p := q.queueOut()
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
	if q.typ == verbs.QPTUC && last {
		// UC: nothing acknowledges; a WQE is done once sent.
		w.done = true
		r.una = w.lastPSN().Add(1)
	}
	if q.reliable() && r.retryAt.IsZero() && q.st.timeout > 0 {
		r.retryAt = now.Add(q.st.timeout)
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

// checkDrained raises IBV_EVENT_SQ_DRAINED once an SQD QP has no request
// in flight, if the transition to SQD asked for it.
func (q *qp) checkDrained() {
	if q.st.state != verbs.QPSSQD || q.req.drainedSent {
		return
	}
	for _, w := range q.sq {
		if w.started && !w.done {
			return
		}
	}
	q.req.drainedSent = true
	q.mu.Lock()
	notify := q.attr.EnSQDAsyncNotify != 0
	q.attr.SQDraining = 0
	q.mu.Unlock()
	if notify {
		q.event(verbs.EventSQDrained)
	}
}

// retire completes finished WQEs in order, as a CQ must see them. Their
// send queue slots are freed first: a program may post again as soon as
// it polls a completion.
func (q *qp) retire() {
	k := 0
	for _, w := range q.sq {
		if !w.done {
			break
		}
		k++
	}
	if k == 0 {
		return
	}
	q.mu.Lock()
	stale := q.epoch != q.epochSeen // a RESET came after these were taken
	if !stale {
		q.sqDepth -= k
	}
	q.mu.Unlock()
	for _, w := range q.sq[:k] {
		if stale {
			break
		}
		if w.signaled || w.status != verbs.WCSuccess {
			wc := verbs.WC{WRID: w.wr.WRID, Status: w.status, Opcode: wcOpcode(w.wr.Opcode), QPNum: q.num}
			if w.status == verbs.WCSuccess {
				wc.ByteLen = uint32(w.length)
			}
			if !q.scq.Push(&wc, false) {
				q.cqOverflow(q.ctx, q.scq)
			}
		}
	}
	q.mu.Lock()
	q.freeSendWQEs(q.sq[:k]...)
	q.mu.Unlock()
	clear(q.sq[:k])
	q.sq = append(q.sq[:0], q.sq[k:]...)
	q.req.next = max(q.req.next-k, 0)
}

// cqOverflow handles a full CQ of context c: the CQ reports
// IBV_EVENT_CQ_ERR to c and the QP fails, as with hardware.
func (q *qp) cqOverflow(c *devctx, cq *swcq.CQ) {
	if c.events != nil && cq.FirstOverrun() {
		c.events.CQEvent(verbs.EventCQErr, cq)
	}
	q.toError()
}

func wcOpcode(op verbs.WROpcode) verbs.WCOpcode {
	switch op {
	case verbs.WRRDMAWrite, verbs.WRRDMAWriteWithImm:
		return verbs.WCRDMAWrite
	case verbs.WRRDMARead:
		return verbs.WCRDMARead
	case verbs.WRAtomicCmpAndSwp:
		return verbs.WCCompSwap
	case verbs.WRAtomicFetchAndAdd:
		return verbs.WCFetchAdd
	case verbs.WRLocalInv:
		return verbs.WCLocalInv
	case verbs.WRBindMW:
		return verbs.WCBindMW
	}
	return verbs.WCSend
}
