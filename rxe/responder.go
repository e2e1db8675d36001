package rxe

import (
	"encoding/binary"
	"fmt"
	"time"

	"github.com/rdmago/rdmago/internal/racesync"
	"github.com/rdmago/rdmago/rxe/wire"
	"github.com/rdmago/rdmago/verbs"
	"github.com/rdmago/rdmago/verbs/swcq"
)

// responder is the receive side's protocol state.
type responder struct {
	epsn       wire.PSN // expected PSN
	msn        uint32   // messages completed
	inited     bool
	nakSeq     bool // a PSN sequence error NAK was sent for epsn
	nakSeqSeen int  // out-of-order packets since that NAK

	// The message in progress (between a FIRST and its LAST).
	inMsg    bool
	kind     msgKind
	recv     *recvWQE // SEND: the receive WQE being filled (cur, or nil)
	cur      recvWQE  // the receive WQE popRecv took last
	segs     [][]byte // its memory
	recvLen  uint64
	off      uint64
	wbuf     []byte // WRITE: the target memory
	wlen     uint64
	dropping bool // UC: the rest of a broken message is dropped

	// XRC_RECV: the XRC SRQ of the request being executed, which gives
	// receive WQEs and the CQ (the same for every packet of a message),
	// and that of the packet at hand, whose PD checks remote access (a
	// duplicate may name another than the message in progress).
	xsrq   *srq
	memSRQ *srq

	// Responder resources: recent READs and atomics, for replaying
	// duplicates (max_dest_rd_atomic of them).
	res  []resource
	resN int

	// READ responses being sent, and how many packets of them went in
	// this step (pumpReads keeps it under maxReadBurst).
	reads []readJob
	burst int

	// The acknowledgement to send after this batch of packets; held
	// (until at the latest) by a step a poller ran (flushAck).
	ack        bool
	ackPSN     wire.PSN
	ackSyn     wire.Syndrome
	held       bool
	until      time.Time
	unanswered bool // an ACK was held and the QP has sent no request since
	segsBuf    [maxSGE][]byte
}

type msgKind uint8

const (
	kindSend msgKind = iota + 1
	kindWrite
)

// resource remembers a READ or atomic for duplicate handling.
type resource struct {
	valid    bool
	atomic   bool
	firstPSN wire.PSN
	npkts    uint32
	orig     uint64 // atomic: the value returned
	// READ: what the request asked for; a repeat may ask only for a
	// part of it.
	rkey   uint32
	va     uint64
	length uint64
}

func (r *responder) reset(psn wire.PSN) {
	res := r.res
	*r = responder{epsn: psn, inited: true, res: res}
	clear(r.res)
}

// abortMessage drops the message in progress (its receive WQE was flushed).
func (r *responder) abortMessage(q *qp) {
	r.inMsg, r.recv, r.segs, r.wbuf = false, nil, nil, nil
}

// PostRecv implements verbs.QPDriver (ibv_post_recv).
func (q *qp) PostRecv(wrs []verbs.RecvWR) error {
	err := q.postRecv(wrs)
	q.poke()
	return err
}

func (q *qp) postRecv(wrs []verbs.RecvWR) error {
	q.mu.Lock()
	defer q.mu.Unlock()
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
			return &verbs.WRError{Index: i, WRID: wr.WRID, Err: err}
		}
		q.rq.push(wr.WRID, wr.SGList)
	}
	if q.attr.QPState == verbs.QPSErr {
		q.pending.flush = true
	}
	return nil
}

// popRecv takes the oldest receive WQE, if any, from the QP's receive
// queue or its SRQ (for XRC, the request's XRC SRQ).
func (q *qp) popRecv() *recvWQE {
	w := &q.resp.cur
	var ok bool
	switch {
	case q.typ == verbs.QPTXRCRecv:
		ok = q.resp.xsrq.pop(w)
	case q.srq != nil:
		ok = q.srq.pop(w)
	default:
		q.mu.Lock()
		ok = q.rq.pop(w)
		q.mu.Unlock()
	}
	if !ok {
		return nil
	}
	return w
}

// unpopRecv puts back a receive WQE taken for a packet that failed.
func (q *qp) unpopRecv(w *recvWQE) {
	if w == nil {
		return
	}
	if q.typ == verbs.QPTXRCRecv {
		q.resp.xsrq.unpop(w)
		return
	}
	if q.srq != nil {
		q.srq.unpop(w)
		return
	}
	q.mu.Lock()
	defer q.mu.Unlock()
	q.rq.unpop(w)
}

// recvComp returns where receives complete: the QP's receive CQ, or for an
// XRC_RECV QP the CQ of the request's XRC SRQ.
func (q *qp) recvComp() *swcq.CQ {
	if q.typ == verbs.QPTXRCRecv {
		return q.resp.xsrq.cq
	}
	return q.rcq
}

// recvPD returns the PD receive buffers are checked against: the QP's,
// or for an XRC_RECV QP that of the request's XRC SRQ.
func (q *qp) recvPD() *pd {
	if q.typ == verbs.QPTXRCRecv {
		return q.resp.xsrq.pd
	}
	return q.pd
}

// memPD returns the PD a remote access of the packet at hand is checked
// against: the QP's, or for an XRC_RECV QP that of the XRC SRQ the packet
// names.
func (q *qp) memPD() *pd {
	if q.typ == verbs.QPTXRCRecv {
		if s := q.resp.memSRQ; s != nil {
			return s.pd
		}
		return nil
	}
	return q.pd
}

// respond handles a request packet (the responder).
func (q *qp) respond(p *wire.Packet, in *inPacket, now time.Time) {
	r := &q.resp
	if !r.inited {
		return
	}
	psn := p.BTH.PSN()
	d := psn.Diff(r.epsn)
	switch {
	case d > 0:
		if q.typ == verbs.QPTUC {
			// UC: packets were lost. Drop the message in progress
			// and resynchronise on this packet if it starts one.
			q.ucResync(p, psn)
			return
		}
		if r.nakSeq {
			// NAKed already; NAK again only if so many packets have
			// come since that the NAK must have been lost.
			r.nakSeqSeen++
		}
		q.count(verbs.CounterOutOfSeqRequest, 1)
		if !r.nakSeq || r.nakSeqSeen >= renakAfter {
			r.nakSeq, r.nakSeqSeen = true, 0
			q.sendAck(r.epsn, wire.NAKPSNSequenceError)
		}
		return
	case d < 0:
		if q.reliable() {
			q.count(verbs.CounterDuplicateRequest, 1)
			q.duplicate(p, psn)
		}
		return
	}
	if q.typ == verbs.QPTUC && r.dropping {
		if !p.OpCode().IsFirst() {
			r.epsn = r.epsn.Add(1)
			return
		}
		r.dropping = false
	}
	syn, ok := q.execute(p, in)
	if !ok {
		return // RNR NAK or error NAK already sent; epsn unchanged
	}
	_ = syn
	r.nakSeq = false
	// SENDs and WRITEs are acknowledged when asked; READs and atomics are
	// answered by their responses, which carry the AETH.
	if p.BTH.AckReq() && q.reliable() && (p.OpCode().IsSend() || p.OpCode().IsWrite()) {
		if r.ack {
			q.count(verbs.CounterAckDeferred, 1) // folded into this one
		}
		r.ack, r.ackPSN, r.ackSyn = true, psn, wire.SyndromeACKUnlimited
	}
}

// ucResync handles a UC packet after a gap: the message in progress is
// lost; a FIRST or ONLY packet starts afresh.
func (q *qp) ucResync(p *wire.Packet, psn wire.PSN) {
	r := &q.resp
	if r.inMsg && r.recv != nil {
		// The receive WQE stays posted for the next message.
		q.unpopRecv(r.recv)
	}
	r.inMsg, r.recv, r.wbuf = false, nil, nil
	r.epsn = psn
	if !p.OpCode().IsFirst() {
		r.dropping = true
		r.epsn = psn.Add(1)
		return
	}
	r.dropping = false
	q.execute(p, nil)
}

// execute carries out an in-order request. It returns false if the packet
// was refused (RNR or an error) and epsn must not advance.
func (q *qp) execute(p *wire.Packet, in *inPacket) (wire.Syndrome, bool) {
	r := &q.resp
	op := p.OpCode()
	psn := p.BTH.PSN()
	mtu := q.st.mtu
	// Opcode sequence: a FIRST or ONLY starts a message, MIDDLE and LAST
	// continue one of the same kind.
	kind := kindSend
	if op.IsWrite() {
		kind = kindWrite
	}
	if r.inMsg {
		if op.IsFirst() || kind != r.kind {
			return q.fatalNAK(psn, wire.NAKInvalidRequest, verbs.EventQPReqErr, "opcode sequence")
		}
	} else if !op.IsFirst() && (op.IsSend() || op.IsWrite()) {
		return q.fatalNAK(psn, wire.NAKInvalidRequest, verbs.EventQPReqErr, "opcode sequence")
	}
	if (op.IsFirst() && !op.IsLast() || op.IsMiddle()) && len(p.Payload) != mtu || len(p.Payload) > mtu {
		return q.fatalNAK(psn, wire.NAKInvalidRequest, verbs.EventQPReqErr, "packet length")
	}
	if q.typ == verbs.QPTXRCRecv {
		// The XRCETH must name an XRC SRQ of the QP's domain, the
		// same for every packet of a message; anything else is an
		// invalid request, NAKed, and the QP fails as an RC
		// responder does.
		s := q.xrcSRQ(p.XRCETH.SRQN())
		if s == nil || r.inMsg && s != r.xsrq {
			return q.fatalNAK(psn, wire.NAKInvalidRequest, verbs.EventQPReqErr, "XRC SRQ")
		}
		r.xsrq, r.memSRQ = s, s
	}
	switch {
	case op.IsSend():
		if op.IsFirst() {
			w := q.popRecv()
			if w == nil {
				return q.rnrNAK(psn)
			}
			segs, total, ok := q.hw.resolveSGEs(q.recvPD(), w.sges, true, r.segsBuf[:0])
			if !ok {
				q.recvComp().Push(&verbs.WC{WRID: w.wrid, Status: verbs.WCLocProtErr, Opcode: verbs.WCRecv, QPNum: q.num}, false)
				return q.fatalNAK(psn, wire.NAKRemoteOperational, verbs.EventQPFatal, "receive WQE")
			}
			r.inMsg, r.kind, r.recv, r.segs, r.recvLen, r.off = true, kindSend, w, segs, total, 0
		}
		if r.off+uint64(len(p.Payload)) > r.recvLen {
			q.recvComp().Push(&verbs.WC{WRID: r.recv.wrid, Status: verbs.WCLocLenErr, Opcode: verbs.WCRecv, QPNum: q.num}, false)
			r.inMsg, r.recv = false, nil
			return q.fatalNAK(psn, wire.NAKInvalidRequest, verbs.EventQPReqErr, "receive buffer too small")
		}
		if p.IETH != nil && !q.invalidate(p.IETH.RKey()) {
			// SEND_WITH_INV naming no type 2 window of this QP.
			q.recvComp().Push(&verbs.WC{WRID: r.recv.wrid, Status: verbs.WCRemInvReqErr, Opcode: verbs.WCRecv, QPNum: q.num}, false)
			r.inMsg, r.recv = false, nil
			return q.fatalNAK(psn, wire.NAKInvalidRequest, verbs.EventQPReqErr, "invalidate R_Key")
		}
		scatter(r.segs, r.off, p.Payload)
		r.off += uint64(len(p.Payload))
		r.epsn = r.epsn.Add(1)
		if op.IsLast() {
			wc := verbs.WC{WRID: r.recv.wrid, Status: verbs.WCSuccess, Opcode: verbs.WCRecv, ByteLen: uint32(r.off), QPNum: q.num, SrcQP: q.st.destQP}
			if p.ImmDt != nil {
				wc.ImmData, wc.WCFlags = p.ImmDt.Imm(), verbs.WCWithImm
			}
			if p.IETH != nil {
				wc.ImmData, wc.WCFlags = p.IETH.RKey(), verbs.WCWithInv
			}
			r.inMsg, r.recv, r.segs = false, nil, nil
			r.msn++
			q.pushRecv(&wc, p.BTH.SolicitedEvent())
		}
	case op.IsWrite():
		// WRITE with immediate consumes a receive WQE: take it before
		// anything else, so an RNR NAK leaves no state behind.
		var imm *recvWQE
		if op.HasImmDt() {
			if imm = q.popRecv(); imm == nil {
				return q.rnrNAK(psn)
			}
		}
		if op.IsFirst() {
			q.count(verbs.CounterRDMARecvs, 1)
			reth := p.RETH
			n := uint64(reth.DMALen())
			buf, ok := q.remoteMemory(reth.RKey(), reth.VA(), n, verbs.AccessRemoteWrite)
			if !ok {
				q.unpopRecv(imm)
				return q.fatalNAK(psn, wire.NAKRemoteAccessError, verbs.EventQPAccessErr, "rkey, bounds or rights")
			}
			r.inMsg, r.kind, r.wbuf, r.wlen, r.off = true, kindWrite, buf, n, 0
		}
		if r.off+uint64(len(p.Payload)) > r.wlen || op.IsLast() && r.off+uint64(len(p.Payload)) != r.wlen {
			r.inMsg = false
			q.unpopRecv(imm)
			return q.fatalNAK(psn, wire.NAKInvalidRequest, verbs.EventQPReqErr, "write length")
		}
		racesync.Sync()
		copy(r.wbuf[r.off:], p.Payload)
		racesync.Sync()
		r.off += uint64(len(p.Payload))
		r.epsn = r.epsn.Add(1)
		if op.IsLast() {
			r.inMsg, r.wbuf = false, nil
			r.msn++
			if imm != nil {
				wc := verbs.WC{WRID: imm.wrid, Status: verbs.WCSuccess, Opcode: verbs.WCRecvRDMAWithImm, ByteLen: uint32(r.wlen),
					ImmData: p.ImmDt.Imm(), WCFlags: verbs.WCWithImm, QPNum: q.num, SrcQP: q.st.destQP}
				q.pushRecv(&wc, p.BTH.SolicitedEvent())
			}
		}
	case rcOp(op) == wire.RCReadRequest:
		q.count(verbs.CounterRDMARecvs, 1)
		reth := p.RETH
		n := uint64(reth.DMALen())
		buf, ok := q.remoteMemory(reth.RKey(), reth.VA(), n, verbs.AccessRemoteRead)
		if !ok {
			return q.fatalNAK(psn, wire.NAKRemoteAccessError, verbs.EventQPAccessErr, "rkey, bounds or rights")
		}
		npkts := uint32(1)
		if n > uint64(mtu) {
			npkts = uint32((n + uint64(mtu) - 1) / uint64(mtu))
		}
		r.msn++
		q.remember(resource{valid: true, firstPSN: psn, npkts: npkts, rkey: reth.RKey(), va: reth.VA(), length: n})
		r.epsn = r.epsn.Add(npkts)
		q.sendReadResponse(psn, buf, mtu)
	case rcOp(op) == wire.RCCompareSwap || rcOp(op) == wire.RCFetchAdd:
		a := p.AtomicETH
		if a.VA()&7 != 0 {
			return q.fatalNAK(psn, wire.NAKInvalidRequest, verbs.EventQPReqErr, "misaligned atomic")
		}
		b, ok := q.remoteMemory(a.RKey(), a.VA(), 8, verbs.AccessRemoteAtomic)
		if !ok {
			return q.fatalNAK(psn, wire.NAKRemoteAccessError, verbs.EventQPAccessErr, "rkey, bounds or rights")
		}
		racesync.Sync()
		q.hw.atomicMu.Lock()
		orig := binary.NativeEndian.Uint64(b)
		if rcOp(op) == wire.RCFetchAdd {
			binary.NativeEndian.PutUint64(b, orig+a.SwapAdd())
		} else if orig == a.Compare() {
			binary.NativeEndian.PutUint64(b, a.SwapAdd())
		}
		q.hw.atomicMu.Unlock()
		racesync.Sync()
		r.msn++
		q.remember(resource{valid: true, atomic: true, firstPSN: psn, npkts: 1, orig: orig})
		r.epsn = r.epsn.Add(1)
		q.sendAtomicAck(psn, orig)
	default:
		return q.fatalNAK(psn, wire.NAKInvalidRequest, verbs.EventQPReqErr, "opcode "+op.String())
	}
	return wire.SyndromeACKUnlimited, true
}

// remoteMemory resolves [va, va+n) of the region rkey names for a remote
// access that needs right: the region must belong to this QP's PD and
// grant right, and the QP must allow it too. A zero-length access names no
// memory and needs no key (IBTA vol. 1 §9.4.1.1.2).
func (q *qp) remoteMemory(rkey uint32, va, n uint64, right verbs.AccessFlags) ([]byte, bool) {
	if n == 0 {
		return nil, true
	}
	if q.st.access&right == 0 {
		return nil, false
	}
	m := q.hw.lookup(rkey, q.memPD())
	if m == nil {
		return q.windowMemory(rkey, va, n, right)
	}
	if m.access&right == 0 {
		return nil, false
	}
	return m.span(va, n)
}

// pushRecv completes a receive, failing the QP if the CQ overflows. An
// XRC SRQ's CQ is of the SRQ's context, which need not be the QP's.
func (q *qp) pushRecv(wc *verbs.WC, solicited bool) {
	if cq := q.recvComp(); !cq.Push(wc, solicited) {
		c := q.ctx
		if q.typ == verbs.QPTXRCRecv {
			c = q.resp.xsrq.ctx
		}
		q.cqOverflow(c, cq)
	}
}

// remember stores a READ or atomic in the responder resources.
func (q *qp) remember(res resource) {
	r := &q.resp
	if len(r.res) != q.st.maxDestRd {
		r.res = make([]resource, q.st.maxDestRd)
		r.resN = 0
	}
	r.res[r.resN%len(r.res)] = res
	r.resN++
}

// duplicate answers a request the responder has already executed: SENDs
// and WRITEs are acknowledged again, READs are replayed from memory and
// atomics from the saved result (never executed twice).
func (q *qp) duplicate(p *wire.Packet, psn wire.PSN) {
	r := &q.resp
	op := p.OpCode()
	if q.typ == verbs.QPTXRCRecv {
		// A replayed READ reads through the PD of the SRQ it names;
		// a duplicate naming none of the domain's is ignored.
		if r.memSRQ = q.xrcSRQ(p.XRCETH.SRQN()); r.memSRQ == nil {
			return
		}
	}
	switch {
	case op.IsSend() || op.IsWrite():
		if p.BTH.AckReq() || op.IsLast() {
			r.ack, r.ackPSN, r.ackSyn = true, r.epsn.Add(0xffffff), wire.SyndromeACKUnlimited
		}
	case rcOp(op) == wire.RCReadRequest:
		for _, res := range r.res {
			if !res.valid || res.atomic || psn.Diff(res.firstPSN) < 0 || psn.Diff(res.firstPSN.Add(res.npkts-1)) > 0 {
				continue
			}
			reth := p.RETH
			va, n := reth.VA(), uint64(reth.DMALen())
			if n > 0 && (reth.RKey() != res.rkey || va < res.va || va-res.va > res.length || n > res.length-(va-res.va)) {
				return // not a part of the READ remembered: ignored
			}
			buf, ok := q.remoteMemory(reth.RKey(), va, n, verbs.AccessRemoteRead)
			if !ok {
				return
			}
			q.sendReadResponse(psn, buf, q.st.mtu)
			return
		}
	case rcOp(op) == wire.RCCompareSwap || rcOp(op) == wire.RCFetchAdd:
		for _, res := range r.res {
			if res.valid && res.atomic && res.firstPSN == psn {
				q.sendAtomicAck(psn, res.orig)
				return
			}
		}
	}
}

// readJob is a READ response being sent: the packets from psn on carry
// buf, k packets of which have gone.
type readJob struct {
	psn   wire.PSN
	buf   []byte
	npkts int
	k     int
}

// maxReadBurst is the most READ response packets the responder sends in
// one step of the owner before it lets other work in; a long READ goes out
// over several steps instead of flooding the link in one burst.
const maxReadBurst = 512

// sendReadResponse queues the response packets of a READ of buf from PSN
// psn. A duplicate request means the requester went back to psn and will
// ask again for everything after it (go-back-N): the responses queued for
// psn and later PSNs are dropped, so that the repeated one goes out first.
// Were it queued behind them, the requester would see only later packets,
// take the repeated request for lost and ask again, for ever.
func (q *qp) sendReadResponse(psn wire.PSN, buf []byte, mtu int) {
	r := &q.resp
	npkts := 1
	if len(buf) > mtu {
		npkts = (len(buf) + mtu - 1) / mtu
	}
	k := 0
	for _, j := range r.reads {
		if j.psn.Add(uint32(j.npkts)).Diff(psn) > 0 {
			continue // ends after psn: asked for again
		}
		r.reads[k] = j
		k++
	}
	clear(r.reads[k:])
	r.reads = append(r.reads[:k], readJob{psn: psn, buf: buf, npkts: npkts})
	q.pumpReads()
}

// pumpReads sends queued READ response packets, as many as the step's
// maxReadBurst allows.
func (q *qp) pumpReads() {
	q.sendReads(maxReadBurst - q.resp.burst)
}

// sendReads sends up to budget queued READ response packets.
func (q *qp) sendReads(budget int) {
	r := &q.resp
	mtu := q.st.mtu
	racesync.Sync()
	start := budget
	for len(r.reads) > 0 && budget > 0 {
		j := &r.reads[0]
		for ; j.k < j.npkts && budget > 0; j.k, budget = j.k+1, budget-1 {
			h := wire.Headers{BTH: wire.BTHFields{PKey: wire.DefaultPKey, DestQP: q.st.destQP, PSN: j.psn.Add(uint32(j.k))},
				Syndrome: wire.SyndromeACKUnlimited, MSN: r.msn}
			switch {
			case j.npkts == 1:
				h.BTH.OpCode = q.opcode(wire.RCReadResponseOnly)
			case j.k == 0:
				h.BTH.OpCode = q.opcode(wire.RCReadResponseFirst)
			case j.k == j.npkts-1:
				h.BTH.OpCode = q.opcode(wire.RCReadResponseLast)
			default:
				h.BTH.OpCode = q.opcode(wire.RCReadResponseMiddle)
			}
			n := len(j.buf)
			chunk := j.buf[min(j.k*mtu, n):min((j.k+1)*mtu, n)]
			out := q.queueOut()
			b, err := wire.AppendPacket(out.Buf, &h, chunk)
			if err != nil {
				panic("rxe: read response: " + err.Error())
			}
			out.Buf = b
		}
		if j.k == j.npkts {
			r.reads[0] = readJob{}
			r.reads = r.reads[1:]
		}
	}
	r.burst += start - budget
	racesync.Sync()
	if len(r.reads) > 0 {
		q.kick() // more to send: come back after other work
	}
}

// drainReads sends every queued READ response packet now. Responses go
// out in PSN order, so an acknowledgement of a later request must not
// overtake the rest of an earlier READ's response (the requester would
// take it to mean that response was lost).
func (q *qp) drainReads() {
	if len(q.resp.reads) > 0 {
		q.sendReads(1 << 30)
	}
}

// sendAtomicAck sends an ATOMIC ACKNOWLEDGE.
func (q *qp) sendAtomicAck(psn wire.PSN, orig uint64) {
	q.drainReads()
	h := wire.Headers{BTH: wire.BTHFields{OpCode: q.opcode(wire.RCAtomicAcknowledge), PKey: wire.DefaultPKey, DestQP: q.st.destQP, PSN: psn},
		Syndrome: wire.SyndromeACKUnlimited, MSN: q.resp.msn, OrigData: orig}
	out := q.queueOut()
	out.Buf, _ = wire.AppendPacket(out.Buf, &h, nil)
}

// sendAck sends an ACK or NAK now, after any READ response still queued.
func (q *qp) sendAck(psn wire.PSN, syn wire.Syndrome) {
	q.drainReads()
	h := wire.Headers{BTH: wire.BTHFields{OpCode: q.opcode(wire.RCAcknowledge), PKey: wire.DefaultPKey, DestQP: q.st.destQP, PSN: psn},
		Syndrome: syn, MSN: q.resp.msn}
	out := q.queueOut()
	out.Buf, _ = wire.AppendPacket(out.Buf, &h, nil)
}

// ackHold is the longest a poller's step holds an ACK back (flushAck).
const ackHold = 50 * time.Microsecond

// flushAck sends the coalesced ACK of the batch just processed. A step a
// CQ poller runs (manual progress) holds it back instead: the poller is
// about to hand the completion to a program that often answers at once,
// and the ACK then leaves in the same batch as the answer, one send fewer
// on the round trip's path. A held ACK goes with the next packets the QP
// sends, before the next packets it takes in, when the program polls
// again without having answered (hw.releaseHeld), or ackHold later,
// whichever comes first. A QP whose program did not answer while its last
// ACK was held sends the next at once, until it sends a request again.
// fresh says the step received packets.
func (q *qp) flushAck(now time.Time, polled, fresh bool) {
	r := &q.resp
	switch {
	case !r.ack:
		return
	case r.held && !fresh && now.Before(r.until):
		return // nothing new, and not yet due
	case !r.held && polled && fresh && !r.unanswered:
		// unanswered until the QP sends a request (buildRequest): a
		// program that did not answer the last time is not waited for.
		r.held, r.until, r.unanswered = true, now.Add(ackHold), true
		q.hw.noteHeld(q)
		return
	}
	r.ack, r.held = false, false
	q.sendAck(r.ackPSN, r.ackSyn)
}

// rnrNAK refuses a packet for want of a receive WQE.
func (q *qp) rnrNAK(psn wire.PSN) (wire.Syndrome, bool) {
	if q.reliable() {
		q.count(verbs.CounterSendRNRErr, 1)
		q.sendAck(psn, wire.RNRNAKSyndrome(q.st.minRNR))
	} else {
		// UC drops the message; the sender never knows.
		q.resp.dropping = true
		q.resp.epsn = psn.Add(1)
	}
	return 0, false
}

// fatalNAK refuses a packet with an error NAK and moves the QP to ERR, as
// rxe does for the responder's class B, C and D errors on RC.
func (q *qp) fatalNAK(psn wire.PSN, syn wire.Syndrome, ev verbs.EventType, why string) (wire.Syndrome, bool) {
	if !q.reliable() {
		// UC: the message is silently dropped; a receive WQE it had
		// taken stays for the next message.
		if q.resp.recv != nil {
			q.unpopRecv(q.resp.recv)
		}
		q.resp.recv, q.resp.segs = nil, nil
		q.resp.inMsg, q.resp.dropping = false, true
		q.resp.epsn = psn.Add(1)
		return 0, false
	}
	_ = why
	q.sendAck(psn, syn)
	q.event(ev)
	q.toError()
	return syn, false
}
