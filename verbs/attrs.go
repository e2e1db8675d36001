package verbs

// DeviceAttr holds a device's capabilities and limits (struct
// ibv_device_attr, from ibv_query_device).
type DeviceAttr struct {
	FWVer                 string
	NodeGUID              uint64
	SysImageGUID          uint64
	MaxMRSize             uint64
	PageSizeCap           uint64
	VendorID              uint32
	VendorPartID          uint32
	HWVer                 uint32
	MaxQP                 int
	MaxQPWR               int
	DeviceCapFlags        uint32
	MaxSGE                int
	MaxSGERD              int
	MaxCQ                 int
	MaxCQE                int
	MaxMR                 int
	MaxPD                 int
	MaxQPRdAtom           int
	MaxEECRdAtom          int
	MaxResRdAtom          int
	MaxQPInitRdAtom       int
	MaxEECInitRdAtom      int
	AtomicCap             AtomicCap
	MaxEE                 int
	MaxRDD                int
	MaxMW                 int
	MaxRawIPv6QP          int
	MaxRawEthyQP          int
	MaxMcastGrp           int
	MaxMcastQPAttach      int
	MaxTotalMcastQPAttach int
	MaxAH                 int
	MaxFMR                int
	MaxMapPerFMR          int
	MaxSRQ                int
	MaxSRQWR              int
	MaxSRQSGE             int
	MaxPKeys              int
	LocalCADelayAck       uint8
	PhysPortCnt           uint8
	// MaxInlineData is the largest IBV_SEND_INLINE payload (an rdma-core
	// extension reported by rxe; not in struct ibv_device_attr).
	MaxInlineData int
}

// Device capability flags (enum ibv_device_cap_flags) that rxe reports.
const (
	DeviceResizeMaxWR     = 1 << 0  // IBV_DEVICE_RESIZE_MAX_WR
	DeviceBadPKeyCntr     = 1 << 1  // IBV_DEVICE_BAD_PKEY_CNTR
	DeviceBadQKeyCntr     = 1 << 2  // IBV_DEVICE_BAD_QKEY_CNTR
	DeviceRawMulti        = 1 << 3  // IBV_DEVICE_RAW_MULTI
	DeviceAutoPathMig     = 1 << 4  // IBV_DEVICE_AUTO_PATH_MIG
	DeviceChangePhyPort   = 1 << 5  // IBV_DEVICE_CHANGE_PHY_PORT
	DeviceUDAVPortEnforce = 1 << 6  // IBV_DEVICE_UD_AV_PORT_ENFORCE
	DeviceCurrQPStateMod  = 1 << 7  // IBV_DEVICE_CURR_QP_STATE_MOD
	DeviceShutdownPort    = 1 << 8  // IBV_DEVICE_SHUTDOWN_PORT
	DeviceInitType        = 1 << 9  // IBV_DEVICE_INIT_TYPE
	DevicePortActiveEvent = 1 << 10 // IBV_DEVICE_PORT_ACTIVE_EVENT
	DeviceSysImageGUID    = 1 << 11 // IBV_DEVICE_SYS_IMAGE_GUID
	DeviceRCRNRNAKGen     = 1 << 12 // IBV_DEVICE_RC_RNR_NAK_GEN
	DeviceSRQResize       = 1 << 13 // IBV_DEVICE_SRQ_RESIZE
	DeviceNNotifyCQ       = 1 << 14 // IBV_DEVICE_N_NOTIFY_CQ
	// Deprecated: the flag is IBV_DEVICE_N_NOTIFY_CQ; use DeviceNNotifyCQ.
	DeviceNMaxSGE          = DeviceNNotifyCQ
	DeviceMemWindow        = 1 << 17 // IBV_DEVICE_MEM_WINDOW
	DeviceXRC              = 1 << 20 // IBV_DEVICE_XRC: XRC domains, SRQs and QPs (Context.OpenXRCD)
	DeviceMemWindowType2B  = 1 << 24 // IBV_DEVICE_MEM_WINDOW_TYPE_2B
	DeviceMemMgtExtensions = 1 << 21 // IBV_DEVICE_MEM_MGT_EXTENSIONS
)

// PortAttr holds a port's state and limits (struct ibv_port_attr, from
// ibv_query_port).
type PortAttr struct {
	State         PortState
	MaxMTU        MTU
	ActiveMTU     MTU
	GIDTblLen     int
	PortCapFlags  uint32
	MaxMsgSz      uint32
	BadPKeyCntr   uint32
	QKeyViolCntr  uint32
	PKeyTblLen    int
	LID           uint16
	SMLID         uint16
	LMC           uint8
	MaxVLNum      uint8
	SMSL          uint8
	SubnetTimeout uint8
	InitTypeReply uint8
	ActiveWidth   uint8
	ActiveSpeed   uint8
	PhysState     uint8
	LinkLayer     LinkLayer
}

// GlobalRoute is the GRH part of an address vector (struct ibv_global_route).
// On RoCE every address is global.
type GlobalRoute struct {
	DGID         GID    // destination GID: the peer's IP address
	FlowLabel    uint32 // 20 bits
	SGIDIndex    uint8  // index of the source GID in the port's table
	HopLimit     uint8
	TrafficClass uint8
}

// AHAttr is an address vector (struct ibv_ah_attr): where a QP or an
// address handle sends.
type AHAttr struct {
	GRH         GlobalRoute
	DLID        uint16 // unused on RoCE
	SL          uint8
	SrcPathBits uint8
	StaticRate  uint8
	IsGlobal    bool // must be true on RoCE
	PortNum     uint8
}

// QPCap holds a queue pair's queue sizes (struct ibv_qp_cap). On create,
// the requested minimums; the device may round them up and reports what
// it gave in QPInitAttr.Cap after CreateQP and in QueryQP.
type QPCap struct {
	MaxSendWR     uint32
	MaxRecvWR     uint32
	MaxSendSGE    uint32
	MaxRecvSGE    uint32
	MaxInlineData uint32
}

// QPInitAttr describes a queue pair to create (struct ibv_qp_init_attr).
type QPInitAttr struct {
	SendCQ   *CQ
	RecvCQ   *CQ
	Cap      QPCap
	QPType   QPType
	SQSigAll bool // every send work request completes signaled
	// SRQ, if set, is the shared receive queue the QP takes receive
	// work requests from; the QP then has no receive queue of its own
	// (Cap.MaxRecvWR and MaxRecvSGE are ignored and reported as 0).
	SRQ *SRQ
	// QPContext is the program's value that comes with the QP
	// (qp_context): QP.QPContext returns it, and the QP of an
	// AsyncEvent carries it.
	QPContext any
}

// QPAttr holds a queue pair's attributes (struct ibv_qp_attr), set by
// ModifyQP for the fields its mask names and filled in by QueryQP.
type QPAttr struct {
	QPState          QPState
	CurQPState       QPState
	PathMTU          MTU
	PathMigState     MigState
	QKey             uint32
	RQPSN            uint32
	SQPSN            uint32
	DestQPNum        uint32
	QPAccessFlags    AccessFlags
	Cap              QPCap
	AHAttr           AHAttr
	AltAHAttr        AHAttr
	PKeyIndex        uint16
	AltPKeyIndex     uint16
	EnSQDAsyncNotify uint8
	SQDraining       uint8
	MaxRdAtomic      uint8 // outstanding RDMA READ / atomic requests this QP may issue
	MaxDestRdAtomic  uint8 // outstanding RDMA READ / atomic requests it accepts
	MinRNRTimer      uint8 // RNR timer code sent in RNR NAKs (IBTA table 45)
	PortNum          uint8
	Timeout          uint8 // local ACK timeout: 4.096 µs × 2^Timeout, 0 = infinite
	RetryCnt         uint8 // transport retries before RETRY_EXC_ERR (7 = infinite on rxe)
	RNRRetry         uint8 // RNR retries before RNR_RETRY_EXC_ERR (7 = infinite)
	AltPortNum       uint8
	AltTimeout       uint8
	RateLimit        uint32
}
