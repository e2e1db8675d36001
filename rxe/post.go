package rxe

import (
	"fmt"
	"slices"

	"github.com/rdmago/rdmago/verbs"
	"github.com/rdmago/rdmago/verbs/swcq"
)

// The QP's queues as the program sees them: work requests checked and
// queued at post time (ibv_post_send, ibv_post_recv), and send WQEs
// completed in order once the requester and completer are done with them.

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
	var ud udDest
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

// checkDrained raises IBV_EVENT_SQ_DRAINED once an SQD QP has no request
// in flight, if the transition to SQD asked for it.
func (q *qp) checkDrained() {
	if q.st.state != verbs.QPSSQD || q.drainedSent || q.sq.busy() {
		return
	}
	q.drainedSent = true
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
	k := q.sq.doneHead()
	if k == 0 {
		return
	}
	q.mu.Lock()
	stale := q.epoch != q.epochSeen // a RESET came after these were taken
	if !stale {
		q.sqDepth -= k
	}
	q.mu.Unlock()
	for _, w := range q.sq.wqes[:k] {
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
	q.freeSendWQEs(q.sq.wqes[:k]...)
	q.mu.Unlock()
	q.sq.drop(k)
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

// PostRecv implements verbs.QPDriver (ibv_post_recv).
//
// A receive WQE needs no step of the QP: a message that found the queue
// empty was refused (RC's RNR NAK has its sender try again; UC and UD
// drop it), not kept waiting for one. Only a QP in ERR is stepped, to
// flush what was posted.
func (q *qp) PostRecv(wrs []verbs.RecvWR) error {
	flush, err := q.postRecv(wrs)
	if flush {
		q.poke()
	}
	return err
}

// postRecv queues wrs, reporting whether the QP must be stepped to flush
// them (it is in ERR).
func (q *qp) postRecv(wrs []verbs.RecvWR) (flush bool, err error) {
	q.mu.Lock()
	defer q.mu.Unlock()
	defer func() {
		if q.attr.QPState == verbs.QPSErr {
			q.pending.flush, flush = true, true
		}
	}()
	for i := range wrs {
		wr := &wrs[i]
		var err error
		switch {
		case q.destroyed:
			err = verbs.Errorf("ibv_post_recv", verbs.ErrClosed, "QP destroyed")
		case q.srq != nil:
			err = verbs.Errorf("ibv_post_recv", verbs.ErrInvalidArgument, fmt.Sprintf("QP %#x receives from an SRQ: post there", q.num))
		case q.typ == verbs.QPTXRCSend || q.typ == verbs.QPTXRCRecv:
			err = verbs.Errorf("ibv_post_recv", verbs.ErrInvalidArgument, fmt.Sprintf("%s QP %#x has no receive queue: post to an XRC SRQ", q.typ, q.num))
		case q.attr.QPState == verbs.QPSReset:
			err = verbs.Errorf("ibv_post_recv", verbs.ErrInvalidArgument, fmt.Sprintf("QP %#x is in RESET", q.num))
		case len(wr.SGList) > int(q.cap.MaxRecvSGE):
			err = verbs.Errorf("ibv_post_recv", verbs.ErrInvalidArgument, fmt.Sprintf("%d SGEs, the QP takes %d", len(wr.SGList), q.cap.MaxRecvSGE))
		case q.rq.len() >= int(q.cap.MaxRecvWR):
			err = verbs.Errorf("ibv_post_recv", verbs.ErrNoMemory, fmt.Sprintf("receive queue full (%d WRs)", q.cap.MaxRecvWR))
		}
		if err != nil {
			return false, &verbs.WRError{Index: i, WRID: wr.WRID, Err: err}
		}
		q.rq.push(wr.WRID, wr.SGList)
	}
	return false, nil
}
