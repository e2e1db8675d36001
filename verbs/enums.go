package verbs

import "strconv"

// WCStatus is the status of a work completion (enum ibv_wc_status).
type WCStatus uint32

// Work completion statuses, numbered as in libibverbs.
const (
	WCSuccess          WCStatus = 0  // IBV_WC_SUCCESS
	WCLocLenErr        WCStatus = 1  // IBV_WC_LOC_LEN_ERR
	WCLocQPOpErr       WCStatus = 2  // IBV_WC_LOC_QP_OP_ERR
	WCLocEECOpErr      WCStatus = 3  // IBV_WC_LOC_EEC_OP_ERR
	WCLocProtErr       WCStatus = 4  // IBV_WC_LOC_PROT_ERR
	WCWRFlushErr       WCStatus = 5  // IBV_WC_WR_FLUSH_ERR
	WCMWBindErr        WCStatus = 6  // IBV_WC_MW_BIND_ERR
	WCBadRespErr       WCStatus = 7  // IBV_WC_BAD_RESP_ERR
	WCLocAccessErr     WCStatus = 8  // IBV_WC_LOC_ACCESS_ERR
	WCRemInvReqErr     WCStatus = 9  // IBV_WC_REM_INV_REQ_ERR
	WCRemAccessErr     WCStatus = 10 // IBV_WC_REM_ACCESS_ERR
	WCRemOpErr         WCStatus = 11 // IBV_WC_REM_OP_ERR
	WCRetryExcErr      WCStatus = 12 // IBV_WC_RETRY_EXC_ERR
	WCRNRRetryExcErr   WCStatus = 13 // IBV_WC_RNR_RETRY_EXC_ERR
	WCLocRDDViolErr    WCStatus = 14 // IBV_WC_LOC_RDD_VIOL_ERR
	WCRemInvRDReqErr   WCStatus = 15 // IBV_WC_REM_INV_RD_REQ_ERR
	WCRemAbortErr      WCStatus = 16 // IBV_WC_REM_ABORT_ERR
	WCInvEECNErr       WCStatus = 17 // IBV_WC_INV_EECN_ERR
	WCInvEECStateErr   WCStatus = 18 // IBV_WC_INV_EEC_STATE_ERR
	WCFatalErr         WCStatus = 19 // IBV_WC_FATAL_ERR
	WCRespTimeoutErr   WCStatus = 20 // IBV_WC_RESP_TIMEOUT_ERR
	WCGeneralErr       WCStatus = 21 // IBV_WC_GENERAL_ERR
	WCTMErr            WCStatus = 22 // IBV_WC_TM_ERR
	WCTMRndvIncomplete WCStatus = 23 // IBV_WC_TM_RNDV_INCOMPLETE
)

var wcStatusStr = [...]string{
	"success",
	"local length error",
	"local QP operation error",
	"local EE context operation error",
	"local protection error",
	"Work Request Flushed Error",
	"memory bind operation error",
	"bad response error",
	"local access error",
	"remote invalid request error",
	"remote access error",
	"remote operation error",
	"transport retry counter exceeded",
	"RNR retry counter exceeded",
	"local RDD violation error",
	"remote invalid RD request",
	"aborted error",
	"invalid EE context number",
	"invalid EE context state",
	"fatal error",
	"response timeout error",
	"general error",
	"TM error",
	"TM software rendezvous",
}

// String describes the status as ibv_wc_status_str does.
func (s WCStatus) String() string {
	if int(s) < len(wcStatusStr) {
		return wcStatusStr[s]
	}
	return "unknown"
}

// WCOpcode says what operation a work completion is for (enum ibv_wc_opcode).
type WCOpcode uint32

// Work completion opcodes, numbered as in libibverbs.
const (
	WCSend            WCOpcode = 0   // IBV_WC_SEND
	WCRDMAWrite       WCOpcode = 1   // IBV_WC_RDMA_WRITE
	WCRDMARead        WCOpcode = 2   // IBV_WC_RDMA_READ
	WCCompSwap        WCOpcode = 3   // IBV_WC_COMP_SWAP
	WCFetchAdd        WCOpcode = 4   // IBV_WC_FETCH_ADD
	WCBindMW          WCOpcode = 5   // IBV_WC_BIND_MW
	WCLocalInv        WCOpcode = 6   // IBV_WC_LOCAL_INV
	WCTSO             WCOpcode = 7   // IBV_WC_TSO
	WCFlush           WCOpcode = 8   // IBV_WC_FLUSH
	WCAtomicWrite     WCOpcode = 9   // IBV_WC_ATOMIC_WRITE
	WCRecv            WCOpcode = 128 // IBV_WC_RECV
	WCRecvRDMAWithImm WCOpcode = 129 // IBV_WC_RECV_RDMA_WITH_IMM
)

// String names the opcode as libibverbs does, without the IBV_WC_ prefix.
func (o WCOpcode) String() string {
	switch o {
	case WCSend:
		return "SEND"
	case WCRDMAWrite:
		return "RDMA_WRITE"
	case WCRDMARead:
		return "RDMA_READ"
	case WCCompSwap:
		return "COMP_SWAP"
	case WCFetchAdd:
		return "FETCH_ADD"
	case WCBindMW:
		return "BIND_MW"
	case WCLocalInv:
		return "LOCAL_INV"
	case WCTSO:
		return "TSO"
	case WCFlush:
		return "FLUSH"
	case WCAtomicWrite:
		return "ATOMIC_WRITE"
	case WCRecv:
		return "RECV"
	case WCRecvRDMAWithImm:
		return "RECV_RDMA_WITH_IMM"
	}
	return "WC_OPCODE(" + strconv.Itoa(int(o)) + ")"
}

// WCFlags are the flags of a work completion (enum ibv_wc_flags).
type WCFlags uint32

// Work completion flags.
const (
	WCWithGRH  WCFlags = 1 << 0 // IBV_WC_GRH: the first 40 bytes of the receive buffer hold a GRH
	WCWithImm  WCFlags = 1 << 1 // IBV_WC_WITH_IMM: ImmData is valid
	WCIPCSumOK WCFlags = 1 << 2 // IBV_WC_IP_CSUM_OK
	WCWithInv  WCFlags = 1 << 3 // IBV_WC_WITH_INV: InvalidatedRKey is valid
)

// WROpcode is the operation of a send work request (enum ibv_wr_opcode).
type WROpcode uint32

// Send work request opcodes, numbered as in libibverbs.
const (
	WRRDMAWrite         WROpcode = 0  // IBV_WR_RDMA_WRITE
	WRRDMAWriteWithImm  WROpcode = 1  // IBV_WR_RDMA_WRITE_WITH_IMM
	WRSend              WROpcode = 2  // IBV_WR_SEND
	WRSendWithImm       WROpcode = 3  // IBV_WR_SEND_WITH_IMM
	WRRDMARead          WROpcode = 4  // IBV_WR_RDMA_READ
	WRAtomicCmpAndSwp   WROpcode = 5  // IBV_WR_ATOMIC_CMP_AND_SWP
	WRAtomicFetchAndAdd WROpcode = 6  // IBV_WR_ATOMIC_FETCH_AND_ADD
	WRLocalInv          WROpcode = 7  // IBV_WR_LOCAL_INV
	WRBindMW            WROpcode = 8  // IBV_WR_BIND_MW
	WRSendWithInv       WROpcode = 9  // IBV_WR_SEND_WITH_INV
	WRTSO               WROpcode = 10 // IBV_WR_TSO
	WRDriver1           WROpcode = 11 // IBV_WR_DRIVER1
	WRFlush             WROpcode = 14 // IBV_WR_FLUSH
	WRAtomicWrite       WROpcode = 15 // IBV_WR_ATOMIC_WRITE
)

// String names the opcode as libibverbs does, without the IBV_WR_ prefix.
func (o WROpcode) String() string {
	switch o {
	case WRRDMAWrite:
		return "RDMA_WRITE"
	case WRRDMAWriteWithImm:
		return "RDMA_WRITE_WITH_IMM"
	case WRSend:
		return "SEND"
	case WRSendWithImm:
		return "SEND_WITH_IMM"
	case WRRDMARead:
		return "RDMA_READ"
	case WRAtomicCmpAndSwp:
		return "ATOMIC_CMP_AND_SWP"
	case WRAtomicFetchAndAdd:
		return "ATOMIC_FETCH_AND_ADD"
	case WRLocalInv:
		return "LOCAL_INV"
	case WRBindMW:
		return "BIND_MW"
	case WRSendWithInv:
		return "SEND_WITH_INV"
	case WRTSO:
		return "TSO"
	case WRDriver1:
		return "DRIVER1"
	case WRFlush:
		return "FLUSH"
	case WRAtomicWrite:
		return "ATOMIC_WRITE"
	}
	return "WR_OPCODE(" + strconv.Itoa(int(o)) + ")"
}

// SendFlags modify a send work request (enum ibv_send_flags).
type SendFlags uint32

// Send flags.
const (
	SendFence     SendFlags = 1 << 0 // IBV_SEND_FENCE: wait for earlier RDMA READs and atomics
	SendSignaled  SendFlags = 1 << 1 // IBV_SEND_SIGNALED: generate a completion
	SendSolicited SendFlags = 1 << 2 // IBV_SEND_SOLICITED: set the SE bit
	SendInline    SendFlags = 1 << 3 // IBV_SEND_INLINE: copy the data at post time
	SendIPCSum    SendFlags = 1 << 4 // IBV_SEND_IP_CSUM
)

// AccessFlags are memory and QP access rights (enum ibv_access_flags).
type AccessFlags uint32

// Access flags.
const (
	AccessLocalWrite      AccessFlags = 1 << 0  // IBV_ACCESS_LOCAL_WRITE
	AccessRemoteWrite     AccessFlags = 1 << 1  // IBV_ACCESS_REMOTE_WRITE
	AccessRemoteRead      AccessFlags = 1 << 2  // IBV_ACCESS_REMOTE_READ
	AccessRemoteAtomic    AccessFlags = 1 << 3  // IBV_ACCESS_REMOTE_ATOMIC
	AccessMWBind          AccessFlags = 1 << 4  // IBV_ACCESS_MW_BIND
	AccessZeroBased       AccessFlags = 1 << 5  // IBV_ACCESS_ZERO_BASED
	AccessOnDemand        AccessFlags = 1 << 6  // IBV_ACCESS_ON_DEMAND
	AccessHugeTLB         AccessFlags = 1 << 7  // IBV_ACCESS_HUGETLB
	AccessFlushGlobal     AccessFlags = 1 << 8  // IBV_ACCESS_FLUSH_GLOBAL
	AccessFlushPersistent AccessFlags = 1 << 9  // IBV_ACCESS_FLUSH_PERSISTENT
	AccessRelaxedOrdering AccessFlags = 1 << 20 // IBV_ACCESS_RELAXED_ORDERING
)

// QPState is a queue pair state (enum ibv_qp_state).
type QPState uint32

// Queue pair states (IBTA vol. 1 §10.3.1).
const (
	QPSReset   QPState = 0 // IBV_QPS_RESET
	QPSInit    QPState = 1 // IBV_QPS_INIT
	QPSRTR     QPState = 2 // IBV_QPS_RTR: ready to receive
	QPSRTS     QPState = 3 // IBV_QPS_RTS: ready to send
	QPSSQD     QPState = 4 // IBV_QPS_SQD: send queue drained
	QPSSQE     QPState = 5 // IBV_QPS_SQE: send queue error
	QPSErr     QPState = 6 // IBV_QPS_ERR
	QPSUnknown QPState = 7 // IBV_QPS_UNKNOWN
)

var qpStateStr = [...]string{"RESET", "INIT", "RTR", "RTS", "SQD", "SQE", "ERR", "UNKNOWN"}

// String names the state ("RTS").
func (s QPState) String() string {
	if int(s) < len(qpStateStr) {
		return qpStateStr[s]
	}
	return "QPS(" + strconv.Itoa(int(s)) + ")"
}

// QPType is a queue pair's transport service (enum ibv_qp_type).
type QPType uint32

// Queue pair types.
const (
	QPTGSI       QPType = 1  // IB_QPT_GSI (kernel verbs): QP1, the general services QP that carries CM MADs
	QPTRC        QPType = 2  // IBV_QPT_RC: reliable connection
	QPTUC        QPType = 3  // IBV_QPT_UC: unreliable connection
	QPTUD        QPType = 4  // IBV_QPT_UD: unreliable datagram
	QPTRawPacket QPType = 8  // IBV_QPT_RAW_PACKET
	QPTXRCSend   QPType = 9  // IBV_QPT_XRC_SEND
	QPTXRCRecv   QPType = 10 // IBV_QPT_XRC_RECV
)

// String names the type ("RC").
func (t QPType) String() string {
	switch t {
	case QPTGSI:
		return "GSI"
	case QPTRC:
		return "RC"
	case QPTUC:
		return "UC"
	case QPTUD:
		return "UD"
	case QPTRawPacket:
		return "RAW_PACKET"
	case QPTXRCSend:
		return "XRC_SEND"
	case QPTXRCRecv:
		return "XRC_RECV"
	}
	return "QPT(" + strconv.Itoa(int(t)) + ")"
}

// QPAttrMask says which fields of a QPAttr a ModifyQP call sets or a
// QueryQP call asks for (enum ibv_qp_attr_mask).
type QPAttrMask uint32

// Queue pair attribute mask bits.
const (
	QPAttrState            QPAttrMask = 1 << 0  // IBV_QP_STATE
	QPAttrCurState         QPAttrMask = 1 << 1  // IBV_QP_CUR_STATE
	QPAttrEnSQDAsyncNotify QPAttrMask = 1 << 2  // IBV_QP_EN_SQD_ASYNC_NOTIFY
	QPAttrAccessFlags      QPAttrMask = 1 << 3  // IBV_QP_ACCESS_FLAGS
	QPAttrPKeyIndex        QPAttrMask = 1 << 4  // IBV_QP_PKEY_INDEX
	QPAttrPort             QPAttrMask = 1 << 5  // IBV_QP_PORT
	QPAttrQKey             QPAttrMask = 1 << 6  // IBV_QP_QKEY
	QPAttrAV               QPAttrMask = 1 << 7  // IBV_QP_AV
	QPAttrPathMTU          QPAttrMask = 1 << 8  // IBV_QP_PATH_MTU
	QPAttrTimeout          QPAttrMask = 1 << 9  // IBV_QP_TIMEOUT
	QPAttrRetryCnt         QPAttrMask = 1 << 10 // IBV_QP_RETRY_CNT
	QPAttrRNRRetry         QPAttrMask = 1 << 11 // IBV_QP_RNR_RETRY
	QPAttrRQPSN            QPAttrMask = 1 << 12 // IBV_QP_RQ_PSN
	QPAttrMaxQPRdAtomic    QPAttrMask = 1 << 13 // IBV_QP_MAX_QP_RD_ATOMIC
	QPAttrAltPath          QPAttrMask = 1 << 14 // IBV_QP_ALT_PATH
	QPAttrMinRNRTimer      QPAttrMask = 1 << 15 // IBV_QP_MIN_RNR_TIMER
	QPAttrSQPSN            QPAttrMask = 1 << 16 // IBV_QP_SQ_PSN
	QPAttrMaxDestRdAtomic  QPAttrMask = 1 << 17 // IBV_QP_MAX_DEST_RD_ATOMIC
	QPAttrPathMigState     QPAttrMask = 1 << 18 // IBV_QP_PATH_MIG_STATE
	QPAttrCap              QPAttrMask = 1 << 19 // IBV_QP_CAP
	QPAttrDestQPN          QPAttrMask = 1 << 20 // IBV_QP_DEST_QPN
	QPAttrRateLimit        QPAttrMask = 1 << 25 // IBV_QP_RATE_LIMIT
)

var qpAttrMaskNames = [...]string{
	0: "IBV_QP_STATE", 1: "IBV_QP_CUR_STATE", 2: "IBV_QP_EN_SQD_ASYNC_NOTIFY", 3: "IBV_QP_ACCESS_FLAGS",
	4: "IBV_QP_PKEY_INDEX", 5: "IBV_QP_PORT", 6: "IBV_QP_QKEY", 7: "IBV_QP_AV", 8: "IBV_QP_PATH_MTU",
	9: "IBV_QP_TIMEOUT", 10: "IBV_QP_RETRY_CNT", 11: "IBV_QP_RNR_RETRY", 12: "IBV_QP_RQ_PSN",
	13: "IBV_QP_MAX_QP_RD_ATOMIC", 14: "IBV_QP_ALT_PATH", 15: "IBV_QP_MIN_RNR_TIMER", 16: "IBV_QP_SQ_PSN",
	17: "IBV_QP_MAX_DEST_RD_ATOMIC", 18: "IBV_QP_PATH_MIG_STATE", 19: "IBV_QP_CAP", 20: "IBV_QP_DEST_QPN",
	25: "IBV_QP_RATE_LIMIT",
}

// String lists the bits by their libibverbs names, joined by "|".
func (m QPAttrMask) String() string {
	if m == 0 {
		return "0"
	}
	var b []byte
	for i := 0; i < 32; i++ {
		if m&(1<<i) == 0 {
			continue
		}
		if len(b) > 0 {
			b = append(b, '|')
		}
		if i < len(qpAttrMaskNames) && qpAttrMaskNames[i] != "" {
			b = append(b, qpAttrMaskNames[i]...)
		} else {
			b = append(b, "1<<"...)
			b = strconv.AppendInt(b, int64(i), 10)
		}
	}
	return string(b)
}

// MTU is an InfiniBand MTU code (enum ibv_mtu).
type MTU uint32

// MTU codes.
const (
	MTU256  MTU = 1 // IBV_MTU_256
	MTU512  MTU = 2 // IBV_MTU_512
	MTU1024 MTU = 3 // IBV_MTU_1024
	MTU2048 MTU = 4 // IBV_MTU_2048
	MTU4096 MTU = 5 // IBV_MTU_4096
)

// Bytes returns the MTU in bytes, or 0 for an invalid code.
func (m MTU) Bytes() int {
	if m < MTU256 || m > MTU4096 {
		return 0
	}
	return 128 << m
}

// MTUFromBytes returns the code of the largest MTU not above n bytes, or 0
// if n is below 256.
func MTUFromBytes(n int) MTU {
	for m := MTU4096; m >= MTU256; m-- {
		if m.Bytes() <= n {
			return m
		}
	}
	return 0
}

// String gives the MTU in bytes ("1024"), as ibv_devinfo prints it.
func (m MTU) String() string {
	if b := m.Bytes(); b != 0 {
		return strconv.Itoa(b)
	}
	return "invalid MTU"
}

// PortState is the state of a port (enum ibv_port_state).
type PortState uint32

// Port states.
const (
	PortNOP         PortState = 0 // IBV_PORT_NOP
	PortDown        PortState = 1 // IBV_PORT_DOWN
	PortInit        PortState = 2 // IBV_PORT_INIT
	PortArmed       PortState = 3 // IBV_PORT_ARMED
	PortActive      PortState = 4 // IBV_PORT_ACTIVE
	PortActiveDefer PortState = 5 // IBV_PORT_ACTIVE_DEFER
)

// String names the state as ibv_port_state_str does ("PORT_ACTIVE").
func (s PortState) String() string {
	switch s {
	case PortNOP:
		return "PORT_NOP"
	case PortDown:
		return "PORT_DOWN"
	case PortInit:
		return "PORT_INIT"
	case PortArmed:
		return "PORT_ARMED"
	case PortActive:
		return "PORT_ACTIVE"
	case PortActiveDefer:
		return "PORT_ACTIVE_DEFER"
	}
	return "invalid state"
}

// LinkLayer is the link layer of a port.
type LinkLayer uint8

// Link layers.
const (
	LinkLayerUnspecified LinkLayer = 0 // IBV_LINK_LAYER_UNSPECIFIED
	LinkLayerInfiniBand  LinkLayer = 1 // IBV_LINK_LAYER_INFINIBAND
	LinkLayerEthernet    LinkLayer = 2 // IBV_LINK_LAYER_ETHERNET
)

// String names the link layer as ibv_devinfo prints it.
func (l LinkLayer) String() string {
	switch l {
	case LinkLayerInfiniBand:
		return "InfiniBand"
	case LinkLayerEthernet:
		return "Ethernet"
	}
	return "Unspecified"
}

// NodeType is the kind of node a device is (enum ibv_node_type).
type NodeType int32

// Node types.
const (
	NodeUnknown NodeType = -1 // IBV_NODE_UNKNOWN
	NodeCA      NodeType = 1  // IBV_NODE_CA: channel adapter
	NodeSwitch  NodeType = 2  // IBV_NODE_SWITCH
	NodeRouter  NodeType = 3  // IBV_NODE_ROUTER
	NodeRNIC    NodeType = 4  // IBV_NODE_RNIC
)

// String names the node type as ibv_node_type_str does.
func (t NodeType) String() string {
	switch t {
	case NodeCA:
		return "InfiniBand channel adapter"
	case NodeSwitch:
		return "InfiniBand switch"
	case NodeRouter:
		return "InfiniBand router"
	case NodeRNIC:
		return "iWARP NIC"
	}
	return "unknown"
}

// TransportType is a device's transport (enum ibv_transport_type).
type TransportType int32

// Transport types.
const (
	TransportUnknown TransportType = -1 // IBV_TRANSPORT_UNKNOWN
	TransportIB      TransportType = 0  // IBV_TRANSPORT_IB (InfiniBand and RoCE)
	TransportIWARP   TransportType = 1  // IBV_TRANSPORT_IWARP
)

// String names the transport as ibv_devinfo prints it.
func (t TransportType) String() string {
	switch t {
	case TransportIB:
		return "InfiniBand"
	case TransportIWARP:
		return "iWARP"
	}
	return "invalid transport"
}

// AtomicCap says how atomics are guaranteed (enum ibv_atomic_cap).
type AtomicCap uint32

// Atomic capabilities.
const (
	AtomicNone AtomicCap = 0 // IBV_ATOMIC_NONE
	AtomicHCA  AtomicCap = 1 // IBV_ATOMIC_HCA: atomic with respect to this device's other atomics
	AtomicGlob AtomicCap = 2 // IBV_ATOMIC_GLOB
)

// String names the capability as ibv_devinfo prints it.
func (a AtomicCap) String() string {
	switch a {
	case AtomicNone:
		return "ATOMIC_NONE"
	case AtomicHCA:
		return "ATOMIC_HCA"
	case AtomicGlob:
		return "ATOMIC_GLOB"
	}
	return "invalid atomic capability"
}

// EventType is the type of an asynchronous event (enum ibv_event_type).
type EventType uint32

// Asynchronous event types.
const (
	EventCQErr            EventType = 0  // IBV_EVENT_CQ_ERR
	EventQPFatal          EventType = 1  // IBV_EVENT_QP_FATAL
	EventQPReqErr         EventType = 2  // IBV_EVENT_QP_REQ_ERR
	EventQPAccessErr      EventType = 3  // IBV_EVENT_QP_ACCESS_ERR
	EventCommEst          EventType = 4  // IBV_EVENT_COMM_EST
	EventSQDrained        EventType = 5  // IBV_EVENT_SQ_DRAINED
	EventPathMig          EventType = 6  // IBV_EVENT_PATH_MIG
	EventPathMigErr       EventType = 7  // IBV_EVENT_PATH_MIG_ERR
	EventDeviceFatal      EventType = 8  // IBV_EVENT_DEVICE_FATAL
	EventPortActive       EventType = 9  // IBV_EVENT_PORT_ACTIVE
	EventPortErr          EventType = 10 // IBV_EVENT_PORT_ERR
	EventLIDChange        EventType = 11 // IBV_EVENT_LID_CHANGE
	EventPKeyChange       EventType = 12 // IBV_EVENT_PKEY_CHANGE
	EventSMChange         EventType = 13 // IBV_EVENT_SM_CHANGE
	EventSRQErr           EventType = 14 // IBV_EVENT_SRQ_ERR
	EventSRQLimitReached  EventType = 15 // IBV_EVENT_SRQ_LIMIT_REACHED
	EventQPLastWQEReached EventType = 16 // IBV_EVENT_QP_LAST_WQE_REACHED
	EventClientReregister EventType = 17 // IBV_EVENT_CLIENT_REREGISTER
	EventGIDChange        EventType = 18 // IBV_EVENT_GID_CHANGE
	EventWQFatal          EventType = 19 // IBV_EVENT_WQ_FATAL
)

var eventStr = [...]string{
	"CQ error", "local work queue catastrophic error", "invalid request local work queue error",
	"local access violation work queue error", "communication established", "send queue drained",
	"path migrated", "path migration request error", "local catastrophic error", "port active",
	"port error", "LID change", "P_Key change", "SM change", "SRQ catastrophic error",
	"SRQ limit reached", "last WQE reached", "client reregistration", "GID table change",
	"WQ fatal",
}

// String describes the event as ibv_event_type_str does.
func (e EventType) String() string {
	if int(e) < len(eventStr) {
		return eventStr[e]
	}
	return "unknown"
}

// MigState is a path migration state (enum ibv_mig_state).
type MigState uint32

// Path migration states.
const (
	MigMigrated MigState = 0 // IBV_MIG_MIGRATED
	MigRearm    MigState = 1 // IBV_MIG_REARM
	MigArmed    MigState = 2 // IBV_MIG_ARMED
)
