package verbs

import "fmt"

// transition lists, for one QP state change, the attributes each transport
// must and may set (IBTA vol. 1 §10.3.1 and table 91; the same table
// ib_modify_qp_is_ok in Linux's core enforces for every provider).
type transition struct {
	req, opt [numQPTypes]QPAttrMask // indexed by qpTypeIndex
}

// The transports of the table, in qpTypeIndex order.
const (
	tRC = iota
	tUC
	tUD
	tXRCSend // IB_QPT_XRC_INI in the kernel's table
	tXRCRecv // IB_QPT_XRC_TGT
	numQPTypes
)

func qpTypeIndex(t QPType) int {
	switch t {
	case QPTRC:
		return tRC
	case QPTUC:
		return tUC
	case QPTUD, QPTGSI:
		return tUD
	case QPTXRCSend:
		return tXRCSend
	case QPTXRCRecv:
		return tXRCRecv
	}
	return -1
}

// The attribute groups the table repeats.
const (
	initAttrsConn = QPAttrPKeyIndex | QPAttrPort | QPAttrAccessFlags
	initAttrsUD   = QPAttrPKeyIndex | QPAttrPort | QPAttrQKey
	// rtrConn is what every connected QP needs to receive; a responder
	// (RC, XRC_RECV) needs its READ/atomic resources and RNR timer too.
	rtrConn      = QPAttrAV | QPAttrPathMTU | QPAttrDestQPN | QPAttrRQPSN
	rtrResponder = rtrConn | QPAttrMaxDestRdAtomic | QPAttrMinRNRTimer
	rtrOptConn   = QPAttrAltPath | QPAttrAccessFlags | QPAttrPKeyIndex
	// rtsRequester is what a reliable requester (RC, XRC_SEND) needs.
	rtsRequester = QPAttrSQPSN | QPAttrTimeout | QPAttrRetryCnt | QPAttrRNRRetry | QPAttrMaxQPRdAtomic
	// toRTSConn is the optional part of the transitions into RTS (and
	// RTS to RTS) of connected QPs; a responder may change its RNR
	// timer there too.
	toRTSConn      = QPAttrCurState | QPAttrAltPath | QPAttrAccessFlags | QPAttrPathMigState
	toRTSResponder = toRTSConn | QPAttrMinRNRTimer
	toRTSUD        = QPAttrCurState | QPAttrQKey
	sqdRequester   = QPAttrPort | QPAttrAV | QPAttrTimeout | QPAttrRetryCnt | QPAttrRNRRetry | QPAttrMaxQPRdAtomic |
		QPAttrAltPath | QPAttrAccessFlags | QPAttrPKeyIndex | QPAttrPathMigState
)

var transitions = map[[2]QPState]transition{
	{QPSReset, QPSInit}: {
		req: [numQPTypes]QPAttrMask{initAttrsConn, initAttrsConn, initAttrsUD, initAttrsConn, initAttrsConn},
	},
	{QPSInit, QPSInit}: {
		opt: [numQPTypes]QPAttrMask{initAttrsConn, initAttrsConn, initAttrsUD, initAttrsConn, initAttrsConn},
	},
	{QPSInit, QPSRTR}: {
		req: [numQPTypes]QPAttrMask{rtrResponder, rtrConn, 0, rtrConn, rtrResponder},
		opt: [numQPTypes]QPAttrMask{rtrOptConn, rtrOptConn, QPAttrPKeyIndex | QPAttrQKey, rtrOptConn, rtrOptConn},
	},
	{QPSRTR, QPSRTS}: {
		// An XRC_RECV QP sends only acknowledgements: no retries, no
		// READ/atomic requests of its own.
		req: [numQPTypes]QPAttrMask{rtsRequester, QPAttrSQPSN, QPAttrSQPSN, rtsRequester, QPAttrSQPSN | QPAttrTimeout},
		opt: [numQPTypes]QPAttrMask{toRTSResponder, toRTSConn, toRTSUD, toRTSConn, toRTSResponder},
	},
	{QPSRTS, QPSRTS}: {
		opt: [numQPTypes]QPAttrMask{toRTSResponder, toRTSConn, toRTSUD, toRTSConn, toRTSResponder},
	},
	{QPSRTS, QPSSQD}: {
		opt: [numQPTypes]QPAttrMask{QPAttrEnSQDAsyncNotify, QPAttrEnSQDAsyncNotify, QPAttrEnSQDAsyncNotify, QPAttrEnSQDAsyncNotify, QPAttrEnSQDAsyncNotify},
	},
	{QPSSQD, QPSRTS}: {
		opt: [numQPTypes]QPAttrMask{toRTSResponder, toRTSConn, toRTSUD, toRTSConn, toRTSResponder},
	},
	{QPSSQD, QPSSQD}: {
		opt: [numQPTypes]QPAttrMask{
			sqdRequester | QPAttrMaxDestRdAtomic | QPAttrMinRNRTimer,
			QPAttrAV | QPAttrAltPath | QPAttrAccessFlags | QPAttrPKeyIndex | QPAttrPathMigState,
			QPAttrPKeyIndex | QPAttrQKey,
			sqdRequester,
			QPAttrPort | QPAttrAV | QPAttrTimeout | QPAttrMaxDestRdAtomic | QPAttrAltPath | QPAttrAccessFlags |
				QPAttrPKeyIndex | QPAttrMinRNRTimer | QPAttrPathMigState,
		},
	},
	{QPSSQE, QPSRTS}: {
		// SQE is not entered by RC or XRC QPs; they are listed as RC
		// for completeness.
		opt: [numQPTypes]QPAttrMask{
			QPAttrCurState | QPAttrAccessFlags,
			QPAttrCurState | QPAttrAccessFlags,
			toRTSUD,
			QPAttrCurState | QPAttrAccessFlags,
			QPAttrCurState | QPAttrAccessFlags,
		},
	},
}

// CheckModify reports whether a QP of type t in state cur may be modified
// with mask, and which state it would move to. It applies the rules of
// IBTA vol. 1 §10.3.1 that libibverbs providers enforce: a transition must
// exist; every attribute required for it must be in the mask; no attribute
// outside required and optional may be. Any state may go to RESET or ERR
// with no other attribute. The error names the missing or illegal
// attributes.
func CheckModify(t QPType, cur QPState, attr *QPAttr, mask QPAttrMask) (QPState, error) {
	next := cur
	if mask&QPAttrState != 0 {
		next = attr.QPState
	}
	if next > QPSErr {
		return cur, Errorf("ibv_modify_qp", ErrInvalidArgument, fmt.Sprintf("invalid target state %d", next))
	}
	if mask&QPAttrCurState != 0 && attr.CurQPState != cur {
		return cur, Errorf("ibv_modify_qp", ErrInvalidArgument,
			fmt.Sprintf("IBV_QP_CUR_STATE says %s but the QP is in %s", attr.CurQPState, cur))
	}
	ti := qpTypeIndex(t)
	if ti < 0 {
		return cur, Errorf("ibv_modify_qp", ErrNotSupported, "QP type "+t.String())
	}
	var req, opt QPAttrMask
	switch {
	case next == QPSReset || next == QPSErr:
		// Always allowed, from any state.
	default:
		tr, ok := transitions[[2]QPState{cur, next}]
		if !ok {
			return cur, Errorf("ibv_modify_qp", ErrInvalidArgument,
				fmt.Sprintf("no transition %s->%s for a %s QP", cur, next, t))
		}
		req, opt = tr.req[ti], tr.opt[ti]
	}
	if missing := req &^ mask; missing != 0 {
		return cur, Errorf("ibv_modify_qp", ErrInvalidArgument,
			fmt.Sprintf("%s->%s of a %s QP needs %s", cur, next, t, missing))
	}
	if extra := mask &^ (req | opt | QPAttrState); extra != 0 {
		return cur, Errorf("ibv_modify_qp", ErrInvalidArgument,
			fmt.Sprintf("%s->%s of a %s QP does not take %s", cur, next, t, extra))
	}
	return next, nil
}
