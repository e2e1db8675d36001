package rxe

import (
	"encoding/binary"
	"sync"
	"time"

	"github.com/rdmago/rdmago/internal/racesync"
	"github.com/rdmago/rdmago/rxe/link"
	"github.com/rdmago/rdmago/rxe/wire"
	"github.com/rdmago/rdmago/verbs"
)

// responderHost is what the responder needs of its QP beyond
// engineHost: receive WQEs and where they complete, the memory the peer's
// requests name, and a way to be stepped again. For an XRC_RECV QP, x is
// the XRC SRQ of the request at hand, which gives the receive WQEs, their
// PD and CQ, and the PD remote accesses are checked against; elsewhere it
// is nil.
type responderHost interface {
	engineHost
	// popRecv takes the oldest receive WQE, if any, into w: from the
	// QP's receive queue or its SRQ, or x.
	popRecv(x *srq, w *recvWQE) bool
	// unpopRecv puts back a receive WQE taken for a packet that failed.
	unpopRecv(x *srq, w *recvWQE)
	// recvMemory maps a receive WQE's SGEs, checked for local write.
	recvMemory(x *srq, sges []verbs.SGE, segs [][]byte) ([][]byte, uint64, bool)
	// pushRecv completes a receive; a CQ that overflows fails the QP.
	pushRecv(x *srq, wc verbs.WC, solicited bool)
	// peerMemory resolves [va, va+n) of the region or window rkey
	// names, if it grants right to this QP.
	peerMemory(x *srq, rkey uint32, va, n uint64, right verbs.AccessFlags) ([]byte, bool)
	// invalidate invalidates the type 2 window rkey names, if it was
	// bound through this QP (SEND_WITH_INV).
	invalidate(rkey uint32) bool
	// xrcSRQ returns the XRC SRQ of the QP's domain numbered n, or nil.
	xrcSRQ(n uint32) *srq
	// atomics is held while an atomic reads and writes memory
	// (IBV_ATOMIC_HCA: atomic with respect to the device's others).
	atomics() *sync.Mutex
	// holdAck says the QP holds an ACK back (flushAck), for the
	// device's pollers to release.
	holdAck()
	// kick has the QP stepped again soon.
	kick()
	// event raises an asynchronous event on the QP.
	event(t verbs.EventType)
}

// responder answers the peer's requests (Linux rxe's rxe_responder): it
// executes them in PSN order against local memory and receive WQEs, and
// builds the acknowledgements, NAKs and READ and atomic responses.
type responder struct {
	host  responderHost
	stats tally
	attr  *ownerAttr
	typ   verbs.QPType
	qpn   uint32

	epsn       wire.PSN // expected PSN
	msn        uint32   // messages completed
	inited     bool
	nakSeq     bool      // a PSN sequence error NAK was sent for epsn
	nakSeqSeen int       // out-of-order packets since that NAK
	hold       holdQueue // requests past the gap at epsn (hold.go)

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
	// this step (pumpReads keeps it under maxReadBurst). While the
	// link's send queue holds packets (noRoom), they wait.
	reads     []readJob
	burst     int
	noRoom    bool
	sinceRoom int // READ response packets since the last look at the room

	// The acknowledgement to send after this batch of packets; held
	// (until at the latest) by a step a poller ran (flushAck).
	ack        bool
	ackPSN     wire.PSN
	ackSyn     wire.Syndrome
	held       bool
	until      time.Time
	unanswered bool     // an ACK was held and the QP has sent no request since
	segsBuf    [][]byte // room for segs, kept from message to message (made on first use: an idle QP keeps none)
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

// reset starts the expected PSNs at psn (RQ_PSN was set).
func (r *responder) reset(psn wire.PSN) {
	r.clear()
	r.epsn, r.inited = psn, true
}

// clear drops all the responder's state (the QP went to RESET).
func (r *responder) clear() {
	clear(r.res)
	r.hold.reset()
	*r = responder{host: r.host, stats: r.stats, attr: r.attr, typ: r.typ, qpn: r.qpn, res: r.res}
}

// abortMessage drops the message in progress (its receive WQE was flushed).
func (r *responder) abortMessage() {
	r.inMsg, r.recv, r.segs, r.wbuf = false, nil, nil, nil
}

// popRecv takes the oldest receive WQE into cur, or returns nil.
func (r *responder) popRecv() *recvWQE {
	if !r.host.popRecv(r.xsrq, &r.cur) {
		return nil
	}
	return &r.cur
}

// out returns a packet buffer of the out batch, for the connected peer.
func (r *responder) out() *link.Packet {
	return r.host.queueOutTo(r.attr.dest, r.attr.sgid)
}

// remoteMemory resolves [va, va+n) of the region or window rkey names for
// a remote access that needs right, which the QP must allow too. A
// zero-length access names no memory and needs no key (IBTA vol. 1
// §9.4.1.1.2).
func (r *responder) remoteMemory(rkey uint32, va, n uint64, right verbs.AccessFlags) ([]byte, bool) {
	if n == 0 {
		return nil, true
	}
	if r.attr.access&right == 0 {
		return nil, false
	}
	return r.host.peerMemory(r.memSRQ, rkey, va, n, right)
}

// respond handles a request packet (the responder).
func (r *responder) respond(p *wire.Packet, now time.Time) {
	if !r.inited {
		return
	}
	psn := p.BTH.PSN()
	d := psn.Diff(r.epsn)
	switch {
	case d > 0:
		if r.typ == verbs.QPTUC {
			// UC: packets were lost. Drop the message in progress
			// and resynchronise on this packet if it starts one.
			r.ucResync(p, psn)
			return
		}
		if r.nakSeq {
			// NAKed already; NAK again only if so many packets have
			// come since that the NAK must have been lost.
			r.nakSeqSeen++
		}
		r.stats.add(verbs.CounterOutOfSeqRequest, 1)
		if r.typ == verbs.QPTRC && d < holdSlots && (p.OpCode().IsSend() || p.OpCode().IsWrite()) {
			r.hold.put(psn, p.Raw)
		}
		if !r.nakSeq || r.nakSeqSeen >= renakAfter {
			r.nakSeq, r.nakSeqSeen = true, 0
			r.sendAck(r.epsn, wire.NAKPSNSequenceError)
		}
		return
	case d < 0:
		if reliableType(r.typ) {
			r.stats.add(verbs.CounterDuplicateRequest, 1)
			r.duplicate(p, psn)
		}
		return
	}
	if r.typ == verbs.QPTUC && r.dropping {
		if !p.OpCode().IsFirst() {
			r.epsn = r.epsn.Add(1)
			return
		}
		r.dropping = false
	}
	if !r.execute(p) {
		return // RNR NAK or error NAK already sent; epsn unchanged
	}
	r.nakSeq = false
	// SENDs and WRITEs are acknowledged when asked; READs and atomics are
	// answered by their responses, which carry the AETH.
	if p.BTH.AckReq() && reliableType(r.typ) && (p.OpCode().IsSend() || p.OpCode().IsWrite()) {
		if r.ack {
			r.stats.add(verbs.CounterAckDeferred, 1) // folded into this one
		}
		r.ack, r.ackPSN, r.ackSyn = true, psn, wire.SyndromeACKUnlimited
	}
	if r.hold.n > 0 {
		r.drainHeld(psn)
	}
}

// drainHeld executes, in order, the requests held past the gap that the
// request of PSN psn, just executed, filled (hold.go), and acknowledges
// the last of them. Held packets are executed exactly as if they came now:
// one that is refused (RNR, or an error) ends it, and the rest are dropped
// for the requester to send again. If a gap remains before packets still
// held, it is not NAKed here: the requester that went back for the first
// has almost always sent the missing one again already, and a NAK in place
// of the ACK would make it go back once more (and Linux rxe's requester,
// which leaves its retry only on an ACK, would ignore it). The next packet
// out of sequence NAKs it, as ever.
func (r *responder) drainHeld(psn wire.PSN) {
	if b := r.hold.take(psn); b != nil {
		release(b) // its copy came while this one was held
	}
	last, drained := psn, false
	for {
		at := r.epsn
		b := r.hold.take(at)
		if b == nil {
			break
		}
		var p wire.Packet
		if err := p.Decode(*b); err != nil {
			// Cannot be: it decoded when it came. Let the requester
			// send it again.
			release(b)
			r.hold.reset()
			break
		}
		ok := r.execute(&p)
		release(b)
		if !ok {
			// Refused, and answered (an RNR or error NAK): the
			// requester goes back to at, and sends the rest again.
			r.hold.reset()
			r.ack = false
			return
		}
		r.nakSeq = false
		last, drained = at, true
	}
	r.hold.dropBefore(r.epsn)
	if drained {
		if r.ack {
			r.stats.add(verbs.CounterAckDeferred, 1)
		}
		r.ack, r.ackPSN, r.ackSyn = true, last, wire.SyndromeACKUnlimited
	}
}

// ucResync handles a UC packet after a gap: the message in progress is
// lost; a FIRST or ONLY packet starts afresh.
func (r *responder) ucResync(p *wire.Packet, psn wire.PSN) {
	if r.inMsg && r.recv != nil {
		// The receive WQE stays posted for the next message.
		r.host.unpopRecv(r.xsrq, r.recv)
	}
	r.inMsg, r.recv, r.wbuf = false, nil, nil
	r.epsn = psn
	if !p.OpCode().IsFirst() {
		r.dropping = true
		r.epsn = psn.Add(1)
		return
	}
	r.dropping = false
	r.execute(p)
}

// execute carries out an in-order request. It returns false if the packet
// was refused (RNR or an error) and epsn must not advance.
func (r *responder) execute(p *wire.Packet) bool {
	op := p.OpCode()
	psn := p.BTH.PSN()
	mtu := r.attr.mtu
	// Opcode sequence: a FIRST or ONLY starts a message, MIDDLE and LAST
	// continue one of the same kind.
	kind := kindSend
	if op.IsWrite() {
		kind = kindWrite
	}
	if r.inMsg {
		if op.IsFirst() || kind != r.kind {
			return r.fatalNAK(psn, wire.NAKInvalidRequest, verbs.EventQPReqErr, "opcode sequence")
		}
	} else if !op.IsFirst() && (op.IsSend() || op.IsWrite()) {
		return r.fatalNAK(psn, wire.NAKInvalidRequest, verbs.EventQPReqErr, "opcode sequence")
	}
	if (op.IsFirst() && !op.IsLast() || op.IsMiddle()) && len(p.Payload) != mtu || len(p.Payload) > mtu {
		return r.fatalNAK(psn, wire.NAKInvalidRequest, verbs.EventQPReqErr, "packet length")
	}
	if r.typ == verbs.QPTXRCRecv {
		// The XRCETH must name an XRC SRQ of the QP's domain, the
		// same for every packet of a message; anything else is an
		// invalid request, NAKed, and the QP fails as an RC
		// responder does.
		s := r.host.xrcSRQ(p.XRCETH.SRQN())
		if s == nil || r.inMsg && s != r.xsrq {
			return r.fatalNAK(psn, wire.NAKInvalidRequest, verbs.EventQPReqErr, "XRC SRQ")
		}
		r.xsrq, r.memSRQ = s, s
	}
	switch {
	case op.IsSend():
		if op.IsFirst() {
			w := r.popRecv()
			if w == nil {
				return r.rnrNAK(psn)
			}
			segs, total, ok := r.host.recvMemory(r.xsrq, w.sges, r.segsBuf[:0])
			r.segsBuf = segs[:0]
			if !ok {
				return r.failRecv(w.wrid, verbs.WCLocProtErr, psn, wire.NAKRemoteOperational, verbs.EventQPFatal, "receive WQE")
			}
			r.inMsg, r.kind, r.recv, r.segs, r.recvLen, r.off = true, kindSend, w, segs, total, 0
		}
		if r.off+uint64(len(p.Payload)) > r.recvLen {
			wrid := r.recv.wrid
			r.inMsg, r.recv = false, nil
			return r.failRecv(wrid, verbs.WCLocLenErr, psn, wire.NAKInvalidRequest, verbs.EventQPReqErr, "receive buffer too small")
		}
		if p.IETH != nil && !r.host.invalidate(p.IETH.RKey()) {
			// SEND_WITH_INV naming no type 2 window of this QP.
			wrid := r.recv.wrid
			r.inMsg, r.recv = false, nil
			return r.failRecv(wrid, verbs.WCRemInvReqErr, psn, wire.NAKInvalidRequest, verbs.EventQPReqErr, "invalidate R_Key")
		}
		scatter(r.segs, r.off, p.Payload)
		r.off += uint64(len(p.Payload))
		r.epsn = r.epsn.Add(1)
		if op.IsLast() {
			wc := verbs.WC{WRID: r.recv.wrid, Status: verbs.WCSuccess, Opcode: verbs.WCRecv, ByteLen: uint32(r.off), QPNum: r.qpn, SrcQP: r.attr.destQP}
			if p.ImmDt != nil {
				wc.ImmData, wc.WCFlags = p.ImmDt.Imm(), verbs.WCWithImm
			}
			if p.IETH != nil {
				wc.ImmData, wc.WCFlags = p.IETH.RKey(), verbs.WCWithInv
			}
			r.inMsg, r.recv, r.segs = false, nil, nil
			r.msn++
			r.host.pushRecv(r.xsrq, wc, p.BTH.SolicitedEvent())
		}
	case op.IsWrite():
		// WRITE with immediate consumes a receive WQE: take it before
		// anything else, so an RNR NAK leaves no state behind.
		var imm *recvWQE
		if op.HasImmDt() {
			if imm = r.popRecv(); imm == nil {
				return r.rnrNAK(psn)
			}
		}
		if op.IsFirst() {
			r.stats.add(verbs.CounterRDMARecvs, 1)
			reth := p.RETH
			n := uint64(reth.DMALen())
			buf, ok := r.remoteMemory(reth.RKey(), reth.VA(), n, verbs.AccessRemoteWrite)
			if !ok {
				r.host.unpopRecv(r.xsrq, imm)
				return r.fatalNAK(psn, wire.NAKRemoteAccessError, verbs.EventQPAccessErr, "rkey, bounds or rights")
			}
			r.inMsg, r.kind, r.wbuf, r.wlen, r.off = true, kindWrite, buf, n, 0
		}
		if r.off+uint64(len(p.Payload)) > r.wlen || op.IsLast() && r.off+uint64(len(p.Payload)) != r.wlen {
			r.inMsg = false
			r.host.unpopRecv(r.xsrq, imm)
			return r.fatalNAK(psn, wire.NAKInvalidRequest, verbs.EventQPReqErr, "write length")
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
					ImmData: p.ImmDt.Imm(), WCFlags: verbs.WCWithImm, QPNum: r.qpn, SrcQP: r.attr.destQP}
				r.host.pushRecv(r.xsrq, wc, p.BTH.SolicitedEvent())
			}
		}
	case rcOp(op) == wire.RCReadRequest:
		r.stats.add(verbs.CounterRDMARecvs, 1)
		reth := p.RETH
		n := uint64(reth.DMALen())
		buf, ok := r.remoteMemory(reth.RKey(), reth.VA(), n, verbs.AccessRemoteRead)
		if !ok {
			return r.fatalNAK(psn, wire.NAKRemoteAccessError, verbs.EventQPAccessErr, "rkey, bounds or rights")
		}
		npkts := uint32(1)
		if n > uint64(mtu) {
			npkts = uint32((n + uint64(mtu) - 1) / uint64(mtu))
		}
		r.msn++
		r.remember(resource{valid: true, firstPSN: psn, npkts: npkts, rkey: reth.RKey(), va: reth.VA(), length: n})
		r.epsn = r.epsn.Add(npkts)
		r.sendReadResponse(psn, buf, mtu)
	case rcOp(op) == wire.RCCompareSwap || rcOp(op) == wire.RCFetchAdd:
		a := p.AtomicETH
		if a.VA()&7 != 0 {
			return r.fatalNAK(psn, wire.NAKInvalidRequest, verbs.EventQPReqErr, "misaligned atomic")
		}
		b, ok := r.remoteMemory(a.RKey(), a.VA(), 8, verbs.AccessRemoteAtomic)
		if !ok {
			return r.fatalNAK(psn, wire.NAKRemoteAccessError, verbs.EventQPAccessErr, "rkey, bounds or rights")
		}
		racesync.Sync()
		r.host.atomics().Lock()
		orig := binary.NativeEndian.Uint64(b)
		if rcOp(op) == wire.RCFetchAdd {
			binary.NativeEndian.PutUint64(b, orig+a.SwapAdd())
		} else if orig == a.Compare() {
			binary.NativeEndian.PutUint64(b, a.SwapAdd())
		}
		r.host.atomics().Unlock()
		racesync.Sync()
		r.msn++
		r.remember(resource{valid: true, atomic: true, firstPSN: psn, npkts: 1, orig: orig})
		r.epsn = r.epsn.Add(1)
		r.sendAtomicAck(psn, orig)
	default:
		return r.fatalNAK(psn, wire.NAKInvalidRequest, verbs.EventQPReqErr, "opcode "+op.String())
	}
	return true
}

// remember stores a READ or atomic in the responder resources.
func (r *responder) remember(res resource) {
	if len(r.res) != r.attr.maxDestRd {
		r.res = make([]resource, r.attr.maxDestRd)
		r.resN = 0
	}
	r.res[r.resN%len(r.res)] = res
	r.resN++
}

// duplicate answers a request the responder has already executed: SENDs
// and WRITEs are acknowledged again, READs are replayed from memory and
// atomics from the saved result (never executed twice).
func (r *responder) duplicate(p *wire.Packet, psn wire.PSN) {
	op := p.OpCode()
	if r.typ == verbs.QPTXRCRecv {
		// A replayed READ reads through the PD of the SRQ it names;
		// a duplicate naming none of the domain's is ignored.
		if r.memSRQ = r.host.xrcSRQ(p.XRCETH.SRQN()); r.memSRQ == nil {
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
			buf, ok := r.remoteMemory(reth.RKey(), va, n, verbs.AccessRemoteRead)
			if !ok {
				return
			}
			r.sendReadResponse(psn, buf, r.attr.mtu)
			return
		}
	case rcOp(op) == wire.RCCompareSwap || rcOp(op) == wire.RCFetchAdd:
		for _, res := range r.res {
			if res.valid && res.atomic && res.firstPSN == psn {
				r.sendAtomicAck(psn, res.orig)
				return
			}
		}
	}
}

// readJob is a READ response being sent: the packets from psn on carry
// buf, k packets of which have gone. Or, if ack, an acknowledgement that
// waits behind READ responses (sendAck): one packet, an ACK or NAK with
// syn, or an ATOMIC ACKNOWLEDGE of orig if atomic.
type readJob struct {
	psn   wire.PSN
	buf   []byte
	npkts int
	k     int

	ack    bool
	atomic bool
	syn    wire.Syndrome
	msn    uint32 // the MSN when it was made
	orig   uint64
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
func (r *responder) sendReadResponse(psn wire.PSN, buf []byte, mtu int) {
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
	r.pumpReads()
}

// pumpReads sends queued READ response packets, as many as the step's
// maxReadBurst allows.
func (r *responder) pumpReads() {
	if r.noRoom {
		return // the QP is kicked when the link has room
	}
	r.sendReads(maxReadBurst-r.burst, false)
}

// sendReads sends up to budget queued READ response packets, stopping
// early if the link fills up, unless all.
func (r *responder) sendReads(budget int, all bool) {
	mtu := r.attr.mtu
	racesync.Sync()
	start := budget
	for len(r.reads) > 0 && budget > 0 && (all || !r.noRoom) {
		j := &r.reads[0]
		if j.ack {
			r.ackNow(j.psn, j.syn, j.msn, j.atomic, j.orig)
			budget--
			r.reads[0] = readJob{}
			r.reads = r.reads[1:]
			continue
		}
		for ; j.k < j.npkts && budget > 0; j.k, budget = j.k+1, budget-1 {
			if r.sinceRoom++; !all && r.sinceRoom > roomCheckEvery {
				r.sinceRoom = 1
				if !r.host.hasRoom() {
					r.sinceRoom = 0
					r.noRoom = true // the link filled up meanwhile
					break
				}
			}
			h := wire.Headers{BTH: wire.BTHFields{PKey: wire.DefaultPKey, DestQP: r.attr.destQP, PSN: j.psn.Add(uint32(j.k))},
				Syndrome: wire.SyndromeACKUnlimited, MSN: r.msn}
			switch {
			case j.npkts == 1:
				h.BTH.OpCode = opcodeFor(r.typ, wire.RCReadResponseOnly)
			case j.k == 0:
				h.BTH.OpCode = opcodeFor(r.typ, wire.RCReadResponseFirst)
			case j.k == j.npkts-1:
				h.BTH.OpCode = opcodeFor(r.typ, wire.RCReadResponseLast)
			default:
				h.BTH.OpCode = opcodeFor(r.typ, wire.RCReadResponseMiddle)
			}
			n := len(j.buf)
			chunk := j.buf[min(j.k*mtu, n):min((j.k+1)*mtu, n)]
			out := r.out()
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
	if len(r.reads) > 0 && !r.noRoom {
		r.host.kick() // more to send: come back after other work
	}
}

// Responses go out in PSN order: an acknowledgement of a later request
// must not overtake the rest of an earlier READ's response (the requester
// would take it to mean that response was lost). So an acknowledgement
// made while READ responses are queued waits behind them, in the same
// queue, and goes as they do: within the step's budget, and once the link
// has room.

// sendAtomicAck sends an ATOMIC ACKNOWLEDGE, after any READ response
// still queued.
func (r *responder) sendAtomicAck(psn wire.PSN, orig uint64) {
	if len(r.reads) > 0 {
		r.reads = append(r.reads, readJob{psn: psn, npkts: 1, ack: true, atomic: true, msn: r.msn, orig: orig})
		return
	}
	r.ackNow(psn, 0, r.msn, true, orig)
}

// sendAck sends an ACK or NAK, after any READ response still queued. An
// ACK queued behind them and not yet sent is replaced by a later one,
// which says more, and a NAK by the same NAK.
func (r *responder) sendAck(psn wire.PSN, syn wire.Syndrome) {
	if n := len(r.reads); n > 0 {
		last := &r.reads[n-1]
		switch {
		case last.ack && !last.atomic && last.syn.Kind() == wire.KindACK && syn.Kind() == wire.KindACK:
			last.psn, last.syn, last.msn = psn, syn, r.msn
		case last.ack && !last.atomic && last.psn == psn && last.syn == syn:
		default:
			r.reads = append(r.reads, readJob{psn: psn, npkts: 1, ack: true, syn: syn, msn: r.msn})
		}
		return
	}
	r.ackNow(psn, syn, r.msn, false, 0)
}

// sendAckNow sends an ACK or NAK at once, after every READ response still
// queued, whatever the step's budget and the link's room: for a NAK that
// ends the connection, and an ACK held when the QP goes to RESET or ERR
// or is destroyed, after which the QP sends nothing. (What the link's
// send queue has no room for is lost, and the peer's retries end it.)
func (r *responder) sendAckNow(psn wire.PSN, syn wire.Syndrome) {
	if len(r.reads) > 0 {
		r.sendReads(1<<30, true)
	}
	r.ackNow(psn, syn, r.msn, false, 0)
}

// ackNow builds an acknowledgement carrying msn into the out batch: an
// ATOMIC ACKNOWLEDGE of orig if atomic, else an ACK or NAK with syn.
func (r *responder) ackNow(psn wire.PSN, syn wire.Syndrome, msn uint32, atomic bool, orig uint64) {
	h := wire.Headers{BTH: wire.BTHFields{OpCode: opcodeFor(r.typ, wire.RCAcknowledge), PKey: wire.DefaultPKey, DestQP: r.attr.destQP, PSN: psn},
		Syndrome: syn, MSN: msn}
	if atomic {
		h.BTH.OpCode = opcodeFor(r.typ, wire.RCAtomicAcknowledge)
		h.Syndrome, h.OrigData = wire.SyndromeACKUnlimited, orig
	}
	out := r.out()
	out.Buf, _ = wire.AppendPacket(out.Buf, &h, nil)
}

// beginStep readies the responder for a step of its QP; fresh says the
// step takes in packets, room that the link has room for READ responses
// (otherwise they wait, and the QP is stepped again once it has). An ACK
// held from the last step goes before what they bring: its PSN comes
// first, and READ responses they start must not be drained ahead of it
// (sendAck).
func (r *responder) beginStep(now time.Time, fresh, room bool) {
	r.burst, r.noRoom, r.sinceRoom = 0, !room, 0
	if r.held && fresh {
		r.flushAck(now, false, true)
	}
}

// endStep ends the receiving part of a step: the ACK of the packets taken
// in goes, or is held if polled (flushAck), and READ responses go as far
// as the step's budget allows. fresh says the step took in packets.
func (r *responder) endStep(now time.Time, polled, fresh bool) {
	r.flushAck(now, polled, fresh)
	if len(r.reads) > 0 && r.attr.state != verbs.QPSErr {
		r.pumpReads()
	}
}

// deadline returns when the responder must next see the time: when the
// ACK it holds is due (zero: it holds none).
func (r *responder) deadline() time.Time {
	if r.held {
		return r.until
	}
	return time.Time{}
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
func (r *responder) flushAck(now time.Time, polled, fresh bool) {
	switch {
	case !r.ack:
		return
	case r.held && !fresh && now.Before(r.until):
		return // nothing new, and not yet due
	case !r.held && polled && fresh && !r.unanswered:
		// unanswered until the QP sends a request (qp.sendSide): a
		// program that did not answer the last time is not waited for.
		r.held, r.until, r.unanswered = true, now.Add(ackHold), true
		r.host.holdAck()
		return
	}
	r.ack, r.held = false, false
	r.sendAck(r.ackPSN, r.ackSyn)
}

// flushHeld sends the ACK a polled step held: at once if final (the QP
// goes to RESET or ERR or is destroyed, and sends nothing after it),
// otherwise as any ACK goes, behind READ responses still queued.
func (r *responder) flushHeld(now time.Time, final bool) {
	if !r.held {
		return
	}
	if final {
		r.ack, r.held = false, false
		r.sendAckNow(r.ackPSN, r.ackSyn)
		return
	}
	r.flushAck(now, false, true)
}

// rnrNAK refuses a packet for want of a receive WQE. It returns false,
// execute's answer for a refused packet.
func (r *responder) rnrNAK(psn wire.PSN) bool {
	if reliableType(r.typ) {
		r.stats.add(verbs.CounterSendRNRErr, 1)
		r.sendAck(psn, wire.RNRNAKSyndrome(r.attr.minRNR))
	} else {
		// UC drops the message; the sender never knows.
		r.dropping = true
		r.epsn = psn.Add(1)
	}
	return false
}

// failRecv completes the receive WQE wrid with status and refuses the
// message (fatalNAK). An RC QP is in ERR before the completion can be
// polled, as a NIC's is: a program that queries the QP on seeing the
// error finds it failed.
func (r *responder) failRecv(wrid uint64, status verbs.WCStatus, psn wire.PSN, syn wire.Syndrome, ev verbs.EventType, why string) bool {
	ret := r.fatalNAK(psn, syn, ev, why)
	r.host.pushRecv(r.xsrq, verbs.WC{WRID: wrid, Status: status, Opcode: verbs.WCRecv, QPNum: r.qpn}, false)
	return ret
}

// fatalNAK refuses a packet with an error NAK and moves the QP to ERR, as
// rxe does for the responder's class B, C and D errors on RC. why names
// the check that failed, for the reader of the call. It returns false,
// execute's answer for a refused packet.
func (r *responder) fatalNAK(psn wire.PSN, syn wire.Syndrome, ev verbs.EventType, why string) bool {
	if !reliableType(r.typ) {
		// UC: the message is silently dropped; a receive WQE it had
		// taken stays for the next message.
		if r.recv != nil {
			r.host.unpopRecv(r.xsrq, r.recv)
		}
		r.recv, r.segs = nil, nil
		r.inMsg, r.dropping = false, true
		r.epsn = psn.Add(1)
		return false
	}
	r.sendAckNow(psn, syn)
	r.host.event(ev)
	r.host.toError()
	return false
}
