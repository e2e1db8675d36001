package verbs

import (
	"errors"
	"strings"
	"testing"
)

func TestCheckModifyFollowsTheQPStateMachine(t *testing.T) {
	const (
		initRC  = QPAttrState | QPAttrPKeyIndex | QPAttrPort | QPAttrAccessFlags
		initUD  = QPAttrState | QPAttrPKeyIndex | QPAttrPort | QPAttrQKey
		rtrRC   = QPAttrState | QPAttrAV | QPAttrPathMTU | QPAttrDestQPN | QPAttrRQPSN | QPAttrMaxDestRdAtomic | QPAttrMinRNRTimer
		rtrUC   = QPAttrState | QPAttrAV | QPAttrPathMTU | QPAttrDestQPN | QPAttrRQPSN
		rtsRC   = QPAttrState | QPAttrSQPSN | QPAttrTimeout | QPAttrRetryCnt | QPAttrRNRRetry | QPAttrMaxQPRdAtomic
		rtsUCUD = QPAttrState | QPAttrSQPSN
	)
	tests := []struct {
		name    string
		typ     QPType
		cur     QPState
		to      QPState
		mask    QPAttrMask
		wantErr string // empty: allowed
	}{
		{"RC RESET to INIT", QPTRC, QPSReset, QPSInit, initRC, ""},
		{"RC RESET to INIT without access flags", QPTRC, QPSReset, QPSInit, initRC &^ QPAttrAccessFlags, "needs IBV_QP_ACCESS_FLAGS"},
		{"RC RESET to INIT with a Q_Key", QPTRC, QPSReset, QPSInit, initRC | QPAttrQKey, "does not take IBV_QP_QKEY"},
		{"UD RESET to INIT", QPTUD, QPSReset, QPSInit, initUD, ""},
		{"UD RESET to INIT without Q_Key", QPTUD, QPSReset, QPSInit, initUD &^ QPAttrQKey, "needs IBV_QP_QKEY"},
		{"RC RESET to RTR skips INIT", QPTRC, QPSReset, QPSRTR, rtrRC, "no transition RESET->RTR"},
		{"RC INIT to INIT changes access", QPTRC, QPSInit, QPSInit, QPAttrState | QPAttrAccessFlags, ""},
		{"RC INIT to RTR", QPTRC, QPSInit, QPSRTR, rtrRC, ""},
		{"RC INIT to RTR without path MTU", QPTRC, QPSInit, QPSRTR, rtrRC &^ QPAttrPathMTU, "needs IBV_QP_PATH_MTU"},
		{"RC INIT to RTR without min RNR timer and dest rd atomic", QPTRC, QPSInit, QPSRTR, rtrRC &^ (QPAttrMinRNRTimer | QPAttrMaxDestRdAtomic), "needs IBV_QP_MIN_RNR_TIMER|IBV_QP_MAX_DEST_RD_ATOMIC"},
		{"UC INIT to RTR", QPTUC, QPSInit, QPSRTR, rtrUC, ""},
		{"UC INIT to RTR with min RNR timer", QPTUC, QPSInit, QPSRTR, rtrUC | QPAttrMinRNRTimer, "does not take IBV_QP_MIN_RNR_TIMER"},
		{"UD INIT to RTR with nothing", QPTUD, QPSInit, QPSRTR, QPAttrState, ""},
		{"UD INIT to RTR with an AV", QPTUD, QPSInit, QPSRTR, QPAttrState | QPAttrAV, "does not take IBV_QP_AV"},
		{"RC RTR to RTS", QPTRC, QPSRTR, QPSRTS, rtsRC, ""},
		{"RC RTR to RTS without timeout", QPTRC, QPSRTR, QPSRTS, rtsRC &^ QPAttrTimeout, "needs IBV_QP_TIMEOUT"},
		{"UC RTR to RTS", QPTUC, QPSRTR, QPSRTS, rtsUCUD, ""},
		{"UD RTR to RTS", QPTUD, QPSRTR, QPSRTS, rtsUCUD, ""},
		{"RC INIT to RTS skips RTR", QPTRC, QPSInit, QPSRTS, rtsRC, "no transition INIT->RTS"},
		{"RC RTS to RTS changes min RNR timer", QPTRC, QPSRTS, QPSRTS, QPAttrState | QPAttrMinRNRTimer, ""},
		{"RC RTS to RTS cannot change the PSN", QPTRC, QPSRTS, QPSRTS, QPAttrState | QPAttrSQPSN, "does not take IBV_QP_SQ_PSN"},
		{"RTS to SQD", QPTRC, QPSRTS, QPSSQD, QPAttrState | QPAttrEnSQDAsyncNotify, ""},
		{"SQD to RTS", QPTRC, QPSSQD, QPSRTS, QPAttrState, ""},
		{"RC SQD to SQD changes the timeout", QPTRC, QPSSQD, QPSSQD, QPAttrState | QPAttrTimeout, ""},
		{"UD SQE to RTS", QPTUD, QPSSQE, QPSRTS, QPAttrState, ""},
		{"any state to ERR", QPTRC, QPSRTR, QPSErr, QPAttrState, ""},
		{"ERR to RESET", QPTRC, QPSErr, QPSReset, QPAttrState, ""},
		{"ERR to RTS", QPTRC, QPSErr, QPSRTS, QPAttrState, "no transition ERR->RTS"},
		{"to RESET with attributes", QPTRC, QPSRTS, QPSReset, QPAttrState | QPAttrTimeout, "does not take IBV_QP_TIMEOUT"},
		{"current state mismatch", QPTRC, QPSRTR, QPSRTS, rtsRC | QPAttrCurState, "IBV_QP_CUR_STATE says RTS"},
		{"raw packet QPs", QPTRawPacket, QPSReset, QPSInit, initRC, "not supported"},
		// XRC: the send side is an RC requester without a responder,
		// the receive side an RC responder whose only sends are
		// acknowledgements (Linux's XRC_INI and XRC_TGT rows).
		{"XRC_SEND RESET to INIT", QPTXRCSend, QPSReset, QPSInit, initRC, ""},
		{"XRC_RECV RESET to INIT", QPTXRCRecv, QPSReset, QPSInit, initRC, ""},
		{"XRC_RECV RESET to INIT without access flags", QPTXRCRecv, QPSReset, QPSInit, initRC &^ QPAttrAccessFlags, "needs IBV_QP_ACCESS_FLAGS"},
		{"XRC_SEND INIT to RTR", QPTXRCSend, QPSInit, QPSRTR, rtrUC, ""},
		{"XRC_SEND INIT to RTR with responder resources", QPTXRCSend, QPSInit, QPSRTR, rtrRC, "does not take IBV_QP_MIN_RNR_TIMER|IBV_QP_MAX_DEST_RD_ATOMIC"},
		{"XRC_RECV INIT to RTR", QPTXRCRecv, QPSInit, QPSRTR, rtrRC, ""},
		{"XRC_RECV INIT to RTR without min RNR timer", QPTXRCRecv, QPSInit, QPSRTR, rtrRC &^ QPAttrMinRNRTimer, "needs IBV_QP_MIN_RNR_TIMER"},
		{"XRC_SEND RTR to RTS", QPTXRCSend, QPSRTR, QPSRTS, rtsRC, ""},
		{"XRC_SEND RTR to RTS without retry count", QPTXRCSend, QPSRTR, QPSRTS, rtsRC &^ QPAttrRetryCnt, "needs IBV_QP_RETRY_CNT"},
		{"XRC_SEND RTR to RTS with min RNR timer", QPTXRCSend, QPSRTR, QPSRTS, rtsRC | QPAttrMinRNRTimer, "does not take IBV_QP_MIN_RNR_TIMER"},
		{"XRC_RECV RTR to RTS", QPTXRCRecv, QPSRTR, QPSRTS, QPAttrState | QPAttrSQPSN | QPAttrTimeout, ""},
		{"XRC_RECV RTR to RTS without timeout", QPTXRCRecv, QPSRTR, QPSRTS, rtsUCUD, "needs IBV_QP_TIMEOUT"},
		{"XRC_RECV RTR to RTS with retries", QPTXRCRecv, QPSRTR, QPSRTS, rtsRC, "does not take IBV_QP_RETRY_CNT|IBV_QP_RNR_RETRY|IBV_QP_MAX_QP_RD_ATOMIC"},
		{"XRC_RECV RTS to RTS changes min RNR timer", QPTXRCRecv, QPSRTS, QPSRTS, QPAttrState | QPAttrMinRNRTimer, ""},
		{"XRC_SEND RTS to RTS cannot change min RNR timer", QPTXRCSend, QPSRTS, QPSRTS, QPAttrState | QPAttrMinRNRTimer, "does not take IBV_QP_MIN_RNR_TIMER"},
		{"XRC_SEND SQD to SQD changes the retry count", QPTXRCSend, QPSSQD, QPSSQD, QPAttrState | QPAttrRetryCnt, ""},
		{"XRC_RECV SQD to SQD cannot change the retry count", QPTXRCRecv, QPSSQD, QPSSQD, QPAttrState | QPAttrRetryCnt, "does not take IBV_QP_RETRY_CNT"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			attr := &QPAttr{QPState: tt.to, CurQPState: QPSRTS}
			next, err := CheckModify(tt.typ, tt.cur, attr, tt.mask)
			if tt.wantErr == "" {
				if err != nil || next != tt.to {
					t.Fatalf("got %s, %v; want %s", next, err, tt.to)
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
				t.Fatalf("err = %v, want one saying %q", err, tt.wantErr)
			}
			if next != tt.cur {
				t.Errorf("state %s after a refused transition, want %s", next, tt.cur)
			}
			if !errors.Is(err, ErrInvalidArgument) && !errors.Is(err, ErrNotSupported) {
				t.Errorf("err %v is neither EINVAL nor EOPNOTSUPP", err)
			}
		})
	}
}

func TestEnumStringsMatchLibibverbs(t *testing.T) {
	tests := []struct{ got, want string }{
		{WCSuccess.String(), "success"},
		{WCWRFlushErr.String(), "Work Request Flushed Error"},
		{WCRemAccessErr.String(), "remote access error"},
		{WCRetryExcErr.String(), "transport retry counter exceeded"},
		{WCRNRRetryExcErr.String(), "RNR retry counter exceeded"},
		{WCStatus(99).String(), "unknown"},
		{QPSRTS.String(), "RTS"},
		{PortActive.String(), "PORT_ACTIVE"},
		{MTU1024.String(), "1024"},
		{EventQPAccessErr.String(), "local access violation work queue error"},
		{(QPAttrState | QPAttrPathMTU).String(), "IBV_QP_STATE|IBV_QP_PATH_MTU"},
	}
	for _, tt := range tests {
		if tt.got != tt.want {
			t.Errorf("got %q, want %q", tt.got, tt.want)
		}
	}
	// The numbers are libibverbs' own.
	nums := []struct {
		name      string
		got, want uint32
	}{
		{"IBV_WC_REM_ACCESS_ERR", uint32(WCRemAccessErr), 10},
		{"IBV_WC_RECV_RDMA_WITH_IMM", uint32(WCRecvRDMAWithImm), 129},
		{"IBV_WR_ATOMIC_FETCH_AND_ADD", uint32(WRAtomicFetchAndAdd), 6},
		{"IBV_WR_SEND_WITH_INV", uint32(WRSendWithInv), 9},
		{"IBV_QPS_ERR", uint32(QPSErr), 6},
		{"IBV_QPT_UD", uint32(QPTUD), 4},
		{"IBV_QP_DEST_QPN", uint32(QPAttrDestQPN), 1 << 20},
		{"IBV_ACCESS_REMOTE_ATOMIC", uint32(AccessRemoteAtomic), 8},
		{"IBV_SEND_INLINE", uint32(SendInline), 8},
		{"IBV_MTU_4096", uint32(MTU4096), 5},
		{"IBV_EVENT_SRQ_LIMIT_REACHED", uint32(EventSRQLimitReached), 15},
	}
	for _, n := range nums {
		if n.got != n.want {
			t.Errorf("%s = %d, want %d", n.name, n.got, n.want)
		}
	}
	if MTUFromBytes(1500-80) != MTU1024 || MTUFromBytes(65536) != MTU4096 || MTUFromBytes(100) != 0 {
		t.Error("MTUFromBytes")
	}
}
