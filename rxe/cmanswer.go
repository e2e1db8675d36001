package rxe

import (
	"encoding/binary"
	"sync"
	"time"

	"github.com/rdmago/rdmago/rxe/link"
	"github.com/rdmago/rdmago/rxe/wire"
)

// Every connection request gets an answer, as on a Linux host, where the
// kernel's IB CM (drivers/infiniband/core/cm.c) answers for a port that
// has no listener even when no program uses RDMA: a REQ for a service
// nobody listens on gets a REJ with reason 8 (invalid service ID), a
// SIDR_REQ a SIDR_REP with status 1 (service ID not supported), a DREQ for
// a connection it does not know a DREP. Here the connection manager lives
// in each program (package rdmacm, on QP1), so a process that has none
// would leave such a request unanswered and its sender waiting for
// seconds before it gives up. The device answers them itself when nobody
// in the process takes QP1's packets (no QP1 exists), and the leader of a
// shared address answers those addressed, by communication ID, to an
// owner number no process holds any more. Like rdmacm's agent, it answers
// a REP for no connection with a REJ, reason 6 (invalid communication ID),
// which lets the passive side give up at once; Linux drops such a REP.
// Other messages of unknown connections are dropped, as Linux drops them.

// CM MAD fields the answers read or write (IBTA vol. 1 §13.4 and
// §12.6; offsets from the start of the MAD and of the CM message).
const (
	madLen         = 256 // a CM MAD, header and message
	madBaseVersion = 1
	madClassVerCM  = 2    // the CM class version Linux registers
	madMethodSend  = 0x03 // every CM message is a Send
	madTIDOff      = 8
	madAttrOff     = 16
	cmAttrREJ      = 0x0012
	cmAttrREP      = 0x0013
	cmAttrDREQ     = 0x0015
	cmAttrDREP     = 0x0016
	cmLocalIDOff   = 0 // every message but SIDR: the sender's communication ID (SIDR: the request ID)

	rejMsgOff     = 8  // REJ: message rejected, upper 2 bits
	rejReasonOff  = 10 // REJ: the reason, 16 bits
	rejMsgREQ     = 0  // the REJ answers a REQ
	rejMsgREP     = 1  // the REJ answers a REP
	rejInvalidID  = 6  // IB_CM_REJ_INVALID_COMM_ID
	rejInvalidSvc = 8  // IB_CM_REJ_INVALID_SERVICE_ID

	sidrRepStatusOff  = 4  // SIDR_REP: status
	sidrRepServiceOff = 12 // SIDR_REP: the service ID
	sidrUnsupported   = 1  // IB_SIDR_UNSUPPORTED: service ID not supported

	// cmAnswerLen is the length of an answer, and the least a request
	// can have: a UD SEND_ONLY carrying one MAD.
	cmAnswerLen = wire.BTHLen + wire.DETHLen + madLen + wire.ICRCLen
)

// cmAnswersPerMs bounds the answers a device sends per millisecond: a
// flood of requests costs no more than this; the rest are dropped, and
// their senders, if real, resend.
const cmAnswersPerMs = 16

// ownerSeenFor is how long the leader trusts what it found out about an
// owner number (held by a process or not) before looking again; that a
// number is free, only until a process joins the address (which takes
// the first free number).
const ownerSeenFor = 250 * time.Millisecond

// cmAnswers is what a device needs to answer CM messages itself.
type cmAnswers struct {
	mu     sync.Mutex
	window int64  // the millisecond sent counts for
	sent   int    // answers sent in window
	psn    uint32 // the PSN of the next answer, as a QP1 counts its sends
	buf    [cmAnswerLen]byte
	out    [1]link.Packet
	// owners caches, per shared link, whether each owner number is held.
	owners map[*link.Shared]*[maxOwners]ownerSeen
	// answered counts the answers sent, limited those dropped by the
	// bound, probes the looks at whether an owner number is held.
	answered, limited, probes uint64
}

type ownerSeen struct {
	until  time.Time
	gone   bool
	joined uint64 // the processes admitted to the address when it looked (link.Shared.Admitted)
}

// cmAnswer writes into out the answer the IB CM gives req, a packet (BTH
// to ICRC) for QP1 that no connection manager takes, and returns its
// length, or 0 if req gets none: it is not a CM REQ, SIDR_REQ, REP or
// DREQ, sent as the CM sends them (a UD SEND_ONLY to QP1 with Q_Key
// 0x80010000, MAD base version 1, class version 2, method Send). The
// answer goes from QP1 to QP1 with the request's P_Key and transaction
// ID; its ICRC is left for the link to fill in. It neither allocates nor
// panics, whatever req holds.
func cmAnswer(out *[cmAnswerLen]byte, req []byte, psn uint32) int {
	if len(req) < cmAnswerLen {
		return 0
	}
	bth := wire.BTH(req[:wire.BTHLen])
	deth := wire.DETH(req[wire.BTHLen : wire.BTHLen+wire.DETHLen])
	if bth.OpCode() != wire.UDSendOnly || bth.TVer() != 0 || bth.DestQP() != gsiQPN || deth.QKey() != wire.GSIQKey {
		return 0
	}
	in := req[madOffset : madOffset+madLen]
	if in[0] != madBaseVersion || in[1] != mgmtClassCM || in[2] != madClassVerCM || in[3] != madMethodSend {
		return 0
	}
	var attr uint16
	switch binary.BigEndian.Uint16(in[madAttrOff:]) {
	case cmAttrREQ, cmAttrREP:
		attr = cmAttrREJ
	case cmAttrDREQ:
		attr = cmAttrDREP
	case cmAttrSIDRREQ:
		attr = cmAttrSIDRREP
	default:
		return 0
	}
	h := wire.Headers{
		BTH:  wire.BTHFields{OpCode: wire.UDSendOnly, PKey: bth.PKey(), DestQP: gsiQPN, PSN: wire.PSN(psn & 0xffffff)},
		DETH: wire.DETHFields{QKey: wire.GSIQKey, SrcQP: gsiQPN},
	}
	pkt, m, err := wire.AppendHeaders(out[:0], &h, madLen)
	if err != nil || len(pkt) != cmAnswerLen {
		return 0
	}
	clear(m)
	m[0], m[1], m[2], m[3] = madBaseVersion, mgmtClassCM, madClassVerCM, madMethodSend
	copy(m[madTIDOff:madTIDOff+8], in[madTIDOff:])
	binary.BigEndian.PutUint16(m[madAttrOff:], attr)
	msg, body := in[madHeaderLen:], m[madHeaderLen:]
	switch binary.BigEndian.Uint16(in[madAttrOff:]) {
	case cmAttrREQ:
		// No communication ID of ours; theirs is the one rejected.
		copy(body[cmRemoteIDOff:cmRemoteIDOff+4], msg[cmLocalIDOff:cmLocalIDOff+4])
		body[rejMsgOff] = rejMsgREQ << 6
		binary.BigEndian.PutUint16(body[rejReasonOff:], rejInvalidSvc)
	case cmAttrREP:
		// The ID the REP names as ours, and theirs.
		copy(body[cmLocalIDOff:cmLocalIDOff+4], msg[cmRemoteIDOff:cmRemoteIDOff+4])
		copy(body[cmRemoteIDOff:cmRemoteIDOff+4], msg[cmLocalIDOff:cmLocalIDOff+4])
		body[rejMsgOff] = rejMsgREP << 6
		binary.BigEndian.PutUint16(body[rejReasonOff:], rejInvalidID)
	case cmAttrDREQ:
		copy(body[cmLocalIDOff:cmLocalIDOff+4], msg[cmRemoteIDOff:cmRemoteIDOff+4])
		copy(body[cmRemoteIDOff:cmRemoteIDOff+4], msg[cmLocalIDOff:cmLocalIDOff+4])
	case cmAttrSIDRREQ:
		copy(body[cmLocalIDOff:cmLocalIDOff+4], msg[cmLocalIDOff:cmLocalIDOff+4]) // the request ID
		body[sidrRepStatusOff] = sidrUnsupported
		copy(body[sidrRepServiceOff:sidrRepServiceOff+8], msg[cmServiceIDOff:cmServiceIDOff+8])
	}
	return len(pkt)
}

// answerCM answers, on link l, the packet p that arrived for QP1 of a
// process with no QP1, if it is a CM message the IB CM answers (cmAnswer),
// within the bound of cmAnswersPerMs.
func (h *hw) answerCM(l link.Link, p *link.Packet) {
	if len(p.Buf) < cmAnswerLen || binary.BigEndian.Uint32(p.Buf[4:8])&0xffffff != gsiQPN {
		return
	}
	a := &h.cmAns
	a.mu.Lock()
	defer a.mu.Unlock()
	n := cmAnswer(&a.buf, p.Buf, a.psn)
	if n == 0 {
		return
	}
	if ms := h.clock.now().UnixMilli(); ms != a.window {
		a.window, a.sent = ms, 0
	}
	if a.sent >= cmAnswersPerMs {
		a.limited++
		return
	}
	a.sent++
	a.psn++
	a.answered++
	a.out[0] = link.Packet{Buf: a.buf[:n], Addr: p.Addr}
	l.Send(a.out[:])
	a.out[0] = link.Packet{}
}

// cmOwnerGone reports, for a packet the leader of the shared address sh
// would forward to owner, whether it is a CM message that gets an answer
// (a REP or DREQ, which name their receiver by communication ID) and no
// process holds that owner number: the leader then takes it as its own,
// and its connection manager, or the device (answerCM), answers it.
func (h *hw) cmOwnerGone(sh *link.Shared, owner uint8, pkt []byte) bool {
	if !answersByCommID(pkt) {
		return false
	}
	now := h.clock.now()
	a := &h.cmAns
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.owners == nil {
		a.owners = map[*link.Shared]*[maxOwners]ownerSeen{}
	}
	seen := a.owners[sh]
	if seen == nil {
		seen = new([maxOwners]ownerSeen)
		a.owners[sh] = seen
	}
	e := &seen[owner]
	joined := sh.Admitted() // before looking: a process that joins after has the number or finds it taken
	if now.Before(e.until) && (!e.gone || e.joined == joined) {
		return e.gone
	}
	a.probes++
	e.gone = !sh.OwnerHeld(owner)
	e.until = now.Add(ownerSeenFor)
	e.joined = joined
	return e.gone
}

// answersByCommID reports whether pkt, for QP1, is a CM message that the
// IB CM answers and that names its receiver by communication ID: a REP or
// a DREQ.
func answersByCommID(pkt []byte) bool {
	if len(pkt) < madOffset+madHeaderLen || binary.BigEndian.Uint32(pkt[4:8])&0xffffff != gsiQPN || pkt[madOffset+1] != mgmtClassCM {
		return false
	}
	attr := binary.BigEndian.Uint16(pkt[madOffset+madAttrOff:])
	return attr == cmAttrREP || attr == cmAttrDREQ
}
