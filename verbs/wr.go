package verbs

// SGE is a scatter/gather element (struct ibv_sge): Length bytes at virtual
// address Addr inside the memory region whose local key is LKey. MR.SGE
// builds one from an offset into a region.
type SGE struct {
	Addr   uint64
	Length uint32
	LKey   uint32
}

// SendWR is a send work request (struct ibv_send_wr). Which fields count
// depends on Opcode.
//
// One difference from C: with IBV_SEND_INLINE, libibverbs reads the data
// from the SGE addresses and ignores their lkeys; Go cannot read memory
// through a bare address, so here the SGEs must name registered memory
// (lkey included), which the post copies from at once as in C.
type SendWR struct {
	WRID      uint64
	SGList    []SGE
	Opcode    WROpcode
	SendFlags SendFlags
	// ImmData is the immediate data of *_WITH_IMM operations, carried to
	// the peer's completion as is.
	ImmData uint32
	// InvalidateRKey is the key SEND_WITH_INV invalidates at the peer and
	// LOCAL_INV invalidates here.
	InvalidateRKey uint32
	// RemoteAddr and RKey name the peer's memory for RDMA and atomic
	// operations (wr.rdma / wr.atomic).
	RemoteAddr uint64
	RKey       uint32
	// CompareAdd is the compare operand of CMP_AND_SWP or the addend of
	// FETCH_AND_ADD; Swap is the swap operand.
	CompareAdd uint64
	Swap       uint64
	// AH, RemoteQPN and RemoteQKey address a UD send (wr.ud).
	AH         *AH
	RemoteQPN  uint32
	RemoteQKey uint32
	// RemoteSRQN names, on an XRC_SEND QP, the XRC SRQ behind the
	// peer XRC_RECV QP that the request is for: the one whose receive
	// WQE a SEND takes, and whose PD checks an RDMA or atomic's remote
	// access (qp_type.xrc.remote_srqn, what ibv_wr_set_xrc_srqn sets;
	// 24 bits). Other QP types ignore it.
	RemoteSRQN uint32
	// BindMW describes a BIND_MW (wr.bind_mw).
	BindMW BindMWWR
}

// RecvWR is a receive work request (struct ibv_recv_wr).
type RecvWR struct {
	WRID   uint64
	SGList []SGE
}

// WC is a work completion (struct ibv_wc).
type WC struct {
	WRID      uint64
	Status    WCStatus
	Opcode    WCOpcode
	VendorErr uint32
	ByteLen   uint32
	// ImmData holds the immediate data when WCFlags has WCWithImm, and
	// the invalidated R_Key when it has WCWithInv (a union in C).
	ImmData      uint32
	QPNum        uint32
	SrcQP        uint32
	WCFlags      WCFlags
	PKeyIndex    uint16
	SLID         uint16
	SL           uint8
	DLIDPathBits uint8
}

// InvalidatedRKey returns the R_Key a SEND_WITH_INV invalidated (valid when
// WCFlags has WCWithInv).
func (wc *WC) InvalidatedRKey() uint32 { return wc.ImmData }
