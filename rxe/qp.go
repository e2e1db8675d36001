package rxe

import (
	"fmt"
	"net/netip"
	"sync"
	"sync/atomic"
	"time"

	"github.com/rdmago/rdmago/rxe/wire"
	"github.com/rdmago/rdmago/verbs"
	"github.com/rdmago/rdmago/verbs/swcq"
)

// qp implements verbs.QPDriver. Fields under mu are shared with the
// goroutines that post, modify and query; the rest is the owner's: protocol
// state, touched only by whoever runs step holding stepMu (the owner
// goroutine, run, or a goroutine that delivered packets, posted, polled or
// modified: see stepHere, poke and Modify; or teardown, once).
type qp struct {
	stats  counters // statistics (verbs.Counter), read by others
	ctx    *devctx
	hw     *hw
	pd     *pd
	num    uint32
	typ    verbs.QPType
	sendCQ *verbs.CQ // as created, for Query
	recvCQ *verbs.CQ
	scq    *swcq.CQ // the same, where completions go
	rcq    *swcq.CQ
	sigAll bool
	cap    verbs.QPCap
	srq    *srq  // if set, receive WQEs come from it
	xrcd   *xrcd // XRC_RECV: the domain whose SRQs requests name

	mu        sync.Mutex
	attr      verbs.QPAttr
	posted    []*sendWQE // send WQEs posted, not yet taken by the owner
	free      []*sendWQE // retired send WQEs, to be posted again (no allocation per work request)
	rq        recvQueue  // receive WQEs
	inbox     []inPacket
	sqDepth   int // send WQEs posted and not yet completed
	epoch     int // bumped by every RESET
	pending   pendingOps
	destroyed bool
	// lastWQESent: IBV_EVENT_QP_LAST_WQE_REACHED was raised for this
	// stay in ERR (QPs on an SRQ).
	lastWQESent bool
	handles     []*xrcHandle // XRC_RECV: the handles open on the QP

	wake   chan struct{}
	done   chan struct{}
	exited chan struct{}
	// owner says the owner goroutine was started, or that teardown took
	// its place. It starts with the first kick or timer (ensureOwner):
	// a QP that nobody has woken, such as one connected and idle, has
	// no goroutine.
	owner atomic.Bool

	// stepMu is held by whoever runs step: the owner goroutine, the
	// receive loop, a goroutine that polls (manual progress), posts
	// (manual progress, or to QP1: see poke) or modifies (Modify), or
	// teardown when no owner ran.
	stepMu sync.Mutex

	// Owner state.
	epochSeen int       // q.epoch when the owner last took the posted WQEs
	st        ownerAttr // the owner's copy of the attributes
	sq        sendQueue // WQEs taken from posted, oldest first, until completed
	req       requester
	comp      completer
	resp      responder
	// drainedSent: IBV_EVENT_SQ_DRAINED was raised for this stay in SQD.
	drainedSent bool
	out         *outBatch // the packets being built; borrowed from hw for a step's sends
	outSGID     int       // the GID index (link) the out batch leaves from
	// received: the step completed a receive. For QP1 the device tells
	// the connection manager once the step is over (takeReceived).
	received bool
	// timer wakes the owner at the engine's next deadline. It is made by
	// the first armTimer: a QP that never waits for a deadline (one that
	// connection setup makes and closes unused, say) never has one.
	timer   timer
	timerAt time.Time // when timer fires (zero: it is stopped, or fired)
	work    []inPacket
}

// pendingOps are state changes Modify asks the owner to carry out.
type pendingOps struct {
	resetReq, resetResp bool // SQ_PSN / RQ_PSN were set
	reset               bool // the QP went to RESET
	flush               bool // the QP went to ERR
}

// ownerAttr is the owner's snapshot of what it needs from the attributes.
type ownerAttr struct {
	state       verbs.QPState
	mtu         int
	destQP      uint32
	dest        netip.Addr
	sgid        int
	timeout     time.Duration // 0: no retransmit timer
	retryCnt    int
	rnrRetry    int
	minRNR      uint8
	maxRdAtomic int
	maxDestRd   int
	access      verbs.AccessFlags
	qkey        uint32
	rqPSN       wire.PSN
	sqPSN       wire.PSN
}

// inPacket is a received packet on its way to the owner. buf comes from
// the device's pool and goes back to it once processed.
type inPacket struct {
	fn     func() // if set, not a packet: run by the owner in its turn (tests)
	buf    []byte
	src    netip.Addr
	dst    netip.Addr // the group, for a packet sent to a multicast group
	tclass uint8
	hop    uint8
	link   uint8
}

// recvWQE is a posted receive request.
type recvWQE struct {
	wrid uint64
	sges []verbs.SGE
}

// CreateQP implements verbs.PDDriver (ibv_create_qp), XRC_SEND QPs
// included (XRC_RECV QPs come from an XRC domain: xrcdOpen.CreateQP).
func (p *pd) CreateQP(attr *verbs.QPInitAttr) (verbs.QPDriver, error) {
	c := attr.Cap
	switch {
	case c.MaxSendWR > maxQPWR || c.MaxRecvWR > maxQPWR:
		return nil, verbs.Errorf("ibv_create_qp", verbs.ErrInvalidArgument, fmt.Sprintf("max_send_wr %d / max_recv_wr %d above the device's %d", c.MaxSendWR, c.MaxRecvWR, maxQPWR))
	case c.MaxSendSGE > maxSGE || c.MaxRecvSGE > maxSGE:
		return nil, verbs.Errorf("ibv_create_qp", verbs.ErrInvalidArgument, fmt.Sprintf("max_send_sge %d / max_recv_sge %d above the device's %d", c.MaxSendSGE, c.MaxRecvSGE, maxSGE))
	case c.MaxInlineData > maxInline:
		return nil, verbs.Errorf("ibv_create_qp", verbs.ErrInvalidArgument, fmt.Sprintf("max_inline_data %d above the device's %d", c.MaxInlineData, maxInline))
	}
	xrc := attr.QPType == verbs.QPTXRCSend
	switch attr.QPType {
	case verbs.QPTRC, verbs.QPTUC, verbs.QPTUD, verbs.QPTGSI, verbs.QPTXRCSend:
	default:
		return nil, verbs.Errorf("ibv_create_qp", verbs.ErrNotSupported, "QP type "+attr.QPType.String()+" (rxe does RC, UC, UD and XRC)")
	}
	scq, ok1 := verbs.CQDriverOf(attr.SendCQ).(*swcq.CQ)
	rcq, ok2 := verbs.CQDriverOf(attr.RecvCQ).(*swcq.CQ)
	if xrc {
		rcq, ok2 = nil, attr.RecvCQ == nil // an XRC_SEND QP receives nothing
	}
	if !ok1 || !ok2 {
		return nil, verbs.Errorf("ibv_create_qp", verbs.ErrInvalidArgument, "the CQs belong to another provider's device")
	}
	var shared *srq
	if attr.SRQ != nil {
		s, ok := verbs.SRQDriverOf(attr.SRQ).(*srq)
		if !ok || s.ctx.hw != p.ctx.hw || s.xrcd != nil || xrc {
			return nil, verbs.Errorf("ibv_create_qp", verbs.ErrInvalidArgument, "the SRQ belongs to another device, or is not a basic SRQ of an RC, UC or UD QP")
		}
		shared = s
	}
	// Round up as rxe does: at least one of each, inline at least as
	// much as the SGEs can describe cheaply.
	c.MaxSendWR = max(c.MaxSendWR, 1)
	c.MaxRecvWR = max(c.MaxRecvWR, 1)
	c.MaxSendSGE = max(c.MaxSendSGE, 1)
	c.MaxRecvSGE = max(c.MaxRecvSGE, 1)
	if shared != nil || xrc {
		c.MaxRecvWR, c.MaxRecvSGE = 0, 0
	}
	attr.Cap = c
	q := &qp{
		ctx: p.ctx, hw: p.ctx.hw, pd: p, typ: attr.QPType,
		sendCQ: attr.SendCQ, recvCQ: attr.RecvCQ, scq: scq, rcq: rcq, sigAll: attr.SQSigAll, cap: c, srq: shared,
	}
	if xrc {
		q.recvCQ = nil
	}
	if err := q.start(); err != nil {
		return nil, err
	}
	return q, nil
}

// start brings the device up, numbers the QP and enters it in the
// device's table. Its owner goroutine starts later, if ever (ensureOwner).
func (q *qp) start() error {
	h := q.hw
	if err := h.up(); err != nil {
		return err
	}
	q.wake, q.done, q.exited = make(chan struct{}, 1), make(chan struct{}), make(chan struct{})
	q.attr.QPState = verbs.QPSReset
	q.attr.PathMTU = verbs.MTU1024
	if q.datagram() {
		q.attr.PathMTU = h.mtu // UD messages go up to the port's MTU
	}
	q.attr.Cap = q.cap
	q.attr.PortNum = 1
	// Whole before it enters the table: from then on the receive loop
	// may run it (stepHere), before this goroutine goes on.
	h.mu.Lock()
	if len(h.qps) >= maxQP {
		h.mu.Unlock()
		return verbs.Errorf("ibv_create_qp", verbs.ErrNoMemory, "too many QPs")
	}
	if q.typ == verbs.QPTGSI {
		if _, taken := h.qps[gsiQPN]; taken {
			h.mu.Unlock()
			return verbs.Errorf("ibv_create_qp", verbs.ErrBusy, "the device's QP1 exists already")
		}
		q.num = gsiQPN
	}
	for q.num == 0 {
		// QP numbers stay in the owner's range, owner<<16 | 0x11..0xffff,
		// so that a shared address's leader knows whose a packet is.
		n := uint32(h.owner)<<16 | h.nextQPN
		h.nextQPN++
		if h.nextQPN > 0xffff {
			h.nextQPN = minQPN
		}
		if _, taken := h.qps[n]; !taken {
			q.num = n
			break
		}
	}
	stats := tally{&q.stats, &h.dev.stats}
	q.req = requester{sq: &q.sq, comp: &q.comp, host: q, stats: stats, attr: &q.st, typ: q.typ, qpn: q.num}
	q.comp = completer{sq: &q.sq, host: q, stats: stats, attr: &q.st}
	q.resp = responder{host: q, stats: stats, attr: &q.st, typ: q.typ, qpn: q.num}
	h.qps[q.num] = q
	h.mu.Unlock()
	return nil
}

// gsiQPN is the general services QP's number.
const gsiQPN = 1

// datagram reports whether the QP carries datagrams (UD, and QP1).
func (q *qp) datagram() bool { return datagramType(q.typ) }

// reliable reports whether the QP runs RC's protocol: acknowledgements,
// retries, READs and atomics (RC and both XRC sides).
func (q *qp) reliable() bool { return reliableType(q.typ) }

// transport is the transport prefix of the QP's opcodes.
func (q *qp) transport() wire.Transport { return transportOf(q.typ) }

// datagramType reports whether QPs of type t carry datagrams (UD, and QP1).
func datagramType(t verbs.QPType) bool { return t == verbs.QPTUD || t == verbs.QPTGSI }

// reliableType reports whether QPs of type t run RC's protocol.
func reliableType(t verbs.QPType) bool {
	return t == verbs.QPTRC || t == verbs.QPTXRCSend || t == verbs.QPTXRCRecv
}

// transportOf is the transport prefix of the opcodes of QPs of type t.
func transportOf(t verbs.QPType) wire.Transport {
	switch t {
	case verbs.QPTUC:
		return wire.TransportUC
	case verbs.QPTXRCSend, verbs.QPTXRCRecv:
		return wire.TransportXRC
	case verbs.QPTUD, verbs.QPTGSI:
		return wire.TransportUD
	}
	return wire.TransportRC
}

// rcOp returns the RC opcode of op's operation (XRC_ACKNOWLEDGE gives
// RC_ACKNOWLEDGE), for the code that handles both alike.
func rcOp(op wire.OpCode) wire.OpCode { return op &^ 0xe0 }

// opcodeFor returns the opcode of the RC operation op in the transport of
// QPs of type t.
func opcodeFor(t verbs.QPType, op wire.OpCode) wire.OpCode {
	return rcOp(op) | wire.OpCode(transportOf(t))
}

// Num implements verbs.QPDriver.
func (q *qp) Num() uint32 { return q.num }

// Modify implements verbs.QPDriver (ibv_modify_qp).
//
// A move that leaves work (see quietMove) is done by the calling goroutine
// when nobody else is stepping the QP, as a post is under manual progress;
// otherwise by the owner.
func (q *qp) Modify(attr *verbs.QPAttr, mask verbs.QPAttrMask) error {
	step, err := q.modify(attr, mask)
	if step {
		q.stepHereTold(false)
	}
	return err
}

// modify is Modify under q.mu; it reports whether the QP is to be stepped.
func (q *qp) modify(attr *verbs.QPAttr, mask verbs.QPAttrMask) (step bool, err error) {
	q.mu.Lock()
	defer q.mu.Unlock()
	if q.destroyed {
		return false, verbs.Errorf("ibv_modify_qp", verbs.ErrClosed, "QP destroyed")
	}
	next, err := verbs.CheckModify(q.typ, q.attr.QPState, attr, mask)
	if err != nil {
		return false, err
	}
	if err := q.checkValues(attr, mask); err != nil {
		return false, err
	}
	a := &q.attr
	if mask&verbs.QPAttrAccessFlags != 0 {
		a.QPAccessFlags = attr.QPAccessFlags
	}
	if mask&verbs.QPAttrPKeyIndex != 0 {
		a.PKeyIndex = attr.PKeyIndex
	}
	if mask&verbs.QPAttrPort != 0 {
		a.PortNum = attr.PortNum
	}
	if mask&verbs.QPAttrQKey != 0 {
		a.QKey = attr.QKey
	}
	if mask&verbs.QPAttrAV != 0 {
		a.AHAttr = attr.AHAttr
	}
	if mask&verbs.QPAttrPathMTU != 0 {
		a.PathMTU = attr.PathMTU
	}
	if mask&verbs.QPAttrTimeout != 0 {
		a.Timeout = attr.Timeout
	}
	if mask&verbs.QPAttrRetryCnt != 0 {
		a.RetryCnt = attr.RetryCnt
	}
	if mask&verbs.QPAttrRNRRetry != 0 {
		a.RNRRetry = attr.RNRRetry
	}
	if mask&verbs.QPAttrRQPSN != 0 {
		a.RQPSN = attr.RQPSN & wire.PSNMask
		q.pending.resetResp = true
	}
	if mask&verbs.QPAttrMaxQPRdAtomic != 0 {
		a.MaxRdAtomic = attr.MaxRdAtomic
	}
	if mask&verbs.QPAttrMinRNRTimer != 0 {
		a.MinRNRTimer = attr.MinRNRTimer
	}
	if mask&verbs.QPAttrSQPSN != 0 {
		a.SQPSN = attr.SQPSN & wire.PSNMask
		q.pending.resetReq = true
	}
	if mask&verbs.QPAttrMaxDestRdAtomic != 0 {
		a.MaxDestRdAtomic = attr.MaxDestRdAtomic
	}
	if mask&verbs.QPAttrPathMigState != 0 {
		a.PathMigState = attr.PathMigState
	}
	if mask&verbs.QPAttrDestQPN != 0 {
		a.DestQPNum = attr.DestQPNum & 0xffffff
	}
	if mask&verbs.QPAttrEnSQDAsyncNotify != 0 {
		a.EnSQDAsyncNotify = attr.EnSQDAsyncNotify
	}
	switch next {
	case verbs.QPSSQD:
		if q.attr.QPState != verbs.QPSSQD {
			a.SQDraining = 1
		}
	case verbs.QPSReset:
		q.lastWQESent = false
		q.pending.reset = true
		q.pending.flush = false
		q.posted = nil
		q.rq.takeAll(nil)
		q.sqDepth = 0
		q.epoch++ // WQEs from before the reset neither complete nor count
	case verbs.QPSErr:
		q.pending.flush = true
	}
	prev := a.QPState
	a.QPState = next
	return !quietMove(prev, next) || q.sqDepth > 0, nil
}

// quietMove reports whether a QP with no send WQE outstanding that moves
// from state prev to next leaves its owner nothing to do: the next step,
// which a post or a packet brings, takes up the new attributes and PSNs.
// That is connection setup (RESET, INIT, RTR, RTS), which then starts no
// owner goroutine (ensureOwner). A move to RESET, ERR or SQD, or out of
// SQD, SQE or ERR, is stepped at once (by Modify's caller, or the owner
// if someone else is stepping the QP).
func quietMove(prev, next verbs.QPState) bool {
	setup := func(s verbs.QPState) bool {
		return s == verbs.QPSReset || s == verbs.QPSInit || s == verbs.QPSRTR || s == verbs.QPSRTS
	}
	return setup(prev) && setup(next) && next != verbs.QPSReset
}

// checkValues checks attribute values as rxe does, beyond the mask rules.
func (q *qp) checkValues(attr *verbs.QPAttr, mask verbs.QPAttrMask) error {
	bad := func(what string) error {
		return verbs.Errorf("ibv_modify_qp", verbs.ErrInvalidArgument, what)
	}
	if mask&verbs.QPAttrPort != 0 && attr.PortNum != 1 {
		return bad(fmt.Sprintf("port_num %d: rxe devices have port 1 only", attr.PortNum))
	}
	if mask&verbs.QPAttrPKeyIndex != 0 && attr.PKeyIndex != 0 {
		return bad(fmt.Sprintf("pkey_index %d: the P_Key table has one entry", attr.PKeyIndex))
	}
	if mask&verbs.QPAttrPathMTU != 0 && (attr.PathMTU < verbs.MTU256 || attr.PathMTU > q.hw.mtu) {
		return bad(fmt.Sprintf("path_mtu %s above the port's active MTU %s", attr.PathMTU, q.hw.mtu))
	}
	if mask&verbs.QPAttrAV != 0 {
		av := &attr.AHAttr
		if !av.IsGlobal || av.GRH.DGID.IsZero() {
			return bad("RoCE needs a global address: ah_attr.is_global and a DGID")
		}
		if int(av.GRH.SGIDIndex) >= len(q.hw.gids) {
			return bad(fmt.Sprintf("sgid_index %d: the GID table has %d entries", av.GRH.SGIDIndex, len(q.hw.gids)))
		}
		src := q.hw.gids[av.GRH.SGIDIndex].Addr()
		if src.Is4() != av.GRH.DGID.Addr().Is4() {
			return bad(fmt.Sprintf("source GID %s and destination GID %s are of different IP versions", src, av.GRH.DGID.Addr()))
		}
	}
	if mask&verbs.QPAttrTimeout != 0 && attr.Timeout > 31 {
		return bad(fmt.Sprintf("timeout %d above 31", attr.Timeout))
	}
	if mask&verbs.QPAttrRetryCnt != 0 && attr.RetryCnt > 7 {
		return bad(fmt.Sprintf("retry_cnt %d above 7", attr.RetryCnt))
	}
	if mask&verbs.QPAttrRNRRetry != 0 && attr.RNRRetry > 7 {
		return bad(fmt.Sprintf("rnr_retry %d above 7", attr.RNRRetry))
	}
	if mask&verbs.QPAttrMinRNRTimer != 0 && attr.MinRNRTimer > 31 {
		return bad(fmt.Sprintf("min_rnr_timer %d above 31", attr.MinRNRTimer))
	}
	if mask&verbs.QPAttrMaxQPRdAtomic != 0 && int(attr.MaxRdAtomic) > maxRdAtomic {
		return bad(fmt.Sprintf("max_rd_atomic %d above %d", attr.MaxRdAtomic, maxRdAtomic))
	}
	if mask&verbs.QPAttrMaxDestRdAtomic != 0 && int(attr.MaxDestRdAtomic) > maxRdAtomic {
		return bad(fmt.Sprintf("max_dest_rd_atomic %d above %d", attr.MaxDestRdAtomic, maxRdAtomic))
	}
	const accessBits = verbs.AccessLocalWrite | verbs.AccessRemoteWrite | verbs.AccessRemoteRead | verbs.AccessRemoteAtomic | verbs.AccessMWBind
	if mask&verbs.QPAttrAccessFlags != 0 && attr.QPAccessFlags&^accessBits != 0 {
		return bad(fmt.Sprintf("qp_access_flags %#x has bits a QP does not take", attr.QPAccessFlags))
	}
	return nil
}

// Query implements verbs.QPDriver (ibv_query_qp).
func (q *qp) Query() (verbs.QPAttr, verbs.QPInitAttr, error) {
	q.mu.Lock()
	defer q.mu.Unlock()
	a := q.attr
	a.CurQPState = a.QPState
	a.Cap = q.cap
	return a, verbs.QPInitAttr{SendCQ: q.sendCQ, RecvCQ: q.recvCQ, Cap: q.cap, QPType: q.typ, SQSigAll: q.sigAll}, nil // SRQ: the verbs layer knows it
}

// Destroy implements verbs.QPDriver (ibv_destroy_qp).
func (q *qp) Destroy() error {
	q.mu.Lock()
	if q.destroyed {
		q.mu.Unlock()
		return nil
	}
	q.destroyed = true
	q.mu.Unlock()
	q.teardown()
	return nil
}

// teardown takes a QP marked destroyed out of the device and stops its
// owner.
func (q *qp) teardown() {
	q.hw.mu.Lock()
	if q.hw.qps[q.num] == q {
		delete(q.hw.qps, q.num)
	}
	q.hw.mu.Unlock()
	q.hw.leaveAll(q)
	close(q.done)
	if q.owner.CompareAndSwap(false, true) {
		// No owner ever ran, and none will: its last work is done here.
		q.stepMu.Lock()
		q.stopOwner()
		q.stepMu.Unlock()
		return
	}
	<-q.exited
}

var _ verbs.QPDriver = (*qp)(nil)
