package verbs

import "fmt"

// transition lists, for one QP state change, the attributes each transport
// must and may set (IBTA vol. 1 §10.3.1 and table 91; the same table
// ib_modify_qp_is_ok in Linux's core enforces for every provider).
type transition struct {
	req, opt [3]QPAttrMask // indexed by qpTypeIndex: RC, UC, UD
}

func qpTypeIndex(t QPType) int {
	switch t {
	case QPTRC:
		return 0
	case QPTUC:
		return 1
	case QPTUD, QPTGSI:
		return 2
	}
	return -1
}

// The attribute groups the table repeats.
const (
	initAttrsConn = QPAttrPKeyIndex | QPAttrPort | QPAttrAccessFlags
	initAttrsUD   = QPAttrPKeyIndex | QPAttrPort | QPAttrQKey
)

var transitions = map[[2]QPState]transition{
	{QPSReset, QPSInit}: {
		req: [3]QPAttrMask{initAttrsConn, initAttrsConn, initAttrsUD},
	},
	{QPSInit, QPSInit}: {
		opt: [3]QPAttrMask{initAttrsConn, initAttrsConn, initAttrsUD},
	},
	{QPSInit, QPSRTR}: {
		req: [3]QPAttrMask{
			QPAttrAV | QPAttrPathMTU | QPAttrDestQPN | QPAttrRQPSN | QPAttrMaxDestRdAtomic | QPAttrMinRNRTimer,
			QPAttrAV | QPAttrPathMTU | QPAttrDestQPN | QPAttrRQPSN,
			0,
		},
		opt: [3]QPAttrMask{
			QPAttrAltPath | QPAttrAccessFlags | QPAttrPKeyIndex,
			QPAttrAltPath | QPAttrAccessFlags | QPAttrPKeyIndex,
			QPAttrPKeyIndex | QPAttrQKey,
		},
	},
	{QPSRTR, QPSRTS}: {
		req: [3]QPAttrMask{
			QPAttrSQPSN | QPAttrTimeout | QPAttrRetryCnt | QPAttrRNRRetry | QPAttrMaxQPRdAtomic,
			QPAttrSQPSN,
			QPAttrSQPSN,
		},
		opt: [3]QPAttrMask{
			QPAttrCurState | QPAttrAltPath | QPAttrAccessFlags | QPAttrMinRNRTimer | QPAttrPathMigState,
			QPAttrCurState | QPAttrAltPath | QPAttrAccessFlags | QPAttrPathMigState,
			QPAttrCurState | QPAttrQKey,
		},
	},
	{QPSRTS, QPSRTS}: {
		opt: [3]QPAttrMask{
			QPAttrCurState | QPAttrAccessFlags | QPAttrAltPath | QPAttrPathMigState | QPAttrMinRNRTimer,
			QPAttrCurState | QPAttrAccessFlags | QPAttrAltPath | QPAttrPathMigState,
			QPAttrCurState | QPAttrQKey,
		},
	},
	{QPSRTS, QPSSQD}: {
		opt: [3]QPAttrMask{QPAttrEnSQDAsyncNotify, QPAttrEnSQDAsyncNotify, QPAttrEnSQDAsyncNotify},
	},
	{QPSSQD, QPSRTS}: {
		opt: [3]QPAttrMask{
			QPAttrCurState | QPAttrAltPath | QPAttrAccessFlags | QPAttrMinRNRTimer | QPAttrPathMigState,
			QPAttrCurState | QPAttrAltPath | QPAttrAccessFlags | QPAttrPathMigState,
			QPAttrCurState | QPAttrQKey,
		},
	},
	{QPSSQD, QPSSQD}: {
		opt: [3]QPAttrMask{
			QPAttrPort | QPAttrAV | QPAttrTimeout | QPAttrRetryCnt | QPAttrRNRRetry | QPAttrMaxQPRdAtomic |
				QPAttrMaxDestRdAtomic | QPAttrAltPath | QPAttrAccessFlags | QPAttrPKeyIndex | QPAttrMinRNRTimer | QPAttrPathMigState,
			QPAttrAV | QPAttrAltPath | QPAttrAccessFlags | QPAttrPKeyIndex | QPAttrPathMigState,
			QPAttrPKeyIndex | QPAttrQKey,
		},
	},
	{QPSSQE, QPSRTS}: {
		opt: [3]QPAttrMask{
			QPAttrCurState | QPAttrAccessFlags, // SQE is not entered by RC QPs, listed for completeness
			QPAttrCurState | QPAttrAccessFlags,
			QPAttrCurState | QPAttrQKey,
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
