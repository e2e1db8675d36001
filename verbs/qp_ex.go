package verbs

import (
	"strconv"
	"sync"
	"sync/atomic"
)

// QPInitAttrMask says which fields of a QPInitAttrEx count (enum
// ibv_qp_init_attr_mask).
type QPInitAttrMask uint32

// QPInitAttrEx.CompMask bits. CreateQPEx needs QPInitAttrPD, or
// QPInitAttrXRCD for an XRC_RECV QP; it takes QPInitAttrCreateFlags and
// QPInitAttrSendOpsFlags, and fails with ErrNotSupported for the others.
const (
	QPInitAttrPD           QPInitAttrMask = 1 << 0 // IBV_QP_INIT_ATTR_PD
	QPInitAttrXRCD         QPInitAttrMask = 1 << 1 // IBV_QP_INIT_ATTR_XRCD
	QPInitAttrCreateFlags  QPInitAttrMask = 1 << 2 // IBV_QP_INIT_ATTR_CREATE_FLAGS
	QPInitAttrMaxTSOHeader QPInitAttrMask = 1 << 3 // IBV_QP_INIT_ATTR_MAX_TSO_HEADER
	QPInitAttrIndTable     QPInitAttrMask = 1 << 4 // IBV_QP_INIT_ATTR_IND_TABLE
	QPInitAttrRXHash       QPInitAttrMask = 1 << 5 // IBV_QP_INIT_ATTR_RX_HASH
	QPInitAttrSendOpsFlags QPInitAttrMask = 1 << 6 // IBV_QP_INIT_ATTR_SEND_OPS_FLAGS
)

// QPCreateFlags are a QP's creation flags (enum ibv_qp_create_flags).
// They concern raw packet and UD QPs of some devices; the software
// device has none of them.
type QPCreateFlags uint32

// QP creation flags.
const (
	QPCreateBlockSelfMcastLB   QPCreateFlags = 1 << 1  // IBV_QP_CREATE_BLOCK_SELF_MCAST_LB
	QPCreateScatterFCS         QPCreateFlags = 1 << 8  // IBV_QP_CREATE_SCATTER_FCS
	QPCreateCVLANStripping     QPCreateFlags = 1 << 9  // IBV_QP_CREATE_CVLAN_STRIPPING
	QPCreateSourceQPN          QPCreateFlags = 1 << 10 // IBV_QP_CREATE_SOURCE_QPN
	QPCreatePCIWriteEndPadding QPCreateFlags = 1 << 11 // IBV_QP_CREATE_PCI_WRITE_END_PADDING
)

// QPCreateSendOpsFlags are the work requests a QP's QPEx builds (enum
// ibv_qp_create_send_ops_flags; QPInitAttrEx.SendOpsFlags).
type QPCreateSendOpsFlags uint64

// Send operations of the work request builder.
const (
	QPExWithRDMAWrite         QPCreateSendOpsFlags = 1 << 0  // IBV_QP_EX_WITH_RDMA_WRITE: WRRDMAWrite
	QPExWithRDMAWriteWithImm  QPCreateSendOpsFlags = 1 << 1  // IBV_QP_EX_WITH_RDMA_WRITE_WITH_IMM: WRRDMAWriteImm
	QPExWithSend              QPCreateSendOpsFlags = 1 << 2  // IBV_QP_EX_WITH_SEND: WRSend
	QPExWithSendWithImm       QPCreateSendOpsFlags = 1 << 3  // IBV_QP_EX_WITH_SEND_WITH_IMM: WRSendImm
	QPExWithRDMARead          QPCreateSendOpsFlags = 1 << 4  // IBV_QP_EX_WITH_RDMA_READ: WRRDMARead
	QPExWithAtomicCmpAndSwp   QPCreateSendOpsFlags = 1 << 5  // IBV_QP_EX_WITH_ATOMIC_CMP_AND_SWP: WRAtomicCmpSwp
	QPExWithAtomicFetchAndAdd QPCreateSendOpsFlags = 1 << 6  // IBV_QP_EX_WITH_ATOMIC_FETCH_AND_ADD: WRAtomicFetchAdd
	QPExWithLocalInv          QPCreateSendOpsFlags = 1 << 7  // IBV_QP_EX_WITH_LOCAL_INV: WRLocalInv
	QPExWithBindMW            QPCreateSendOpsFlags = 1 << 8  // IBV_QP_EX_WITH_BIND_MW: WRBindMW
	QPExWithSendWithInv       QPCreateSendOpsFlags = 1 << 9  // IBV_QP_EX_WITH_SEND_WITH_INV: WRSendInv
	QPExWithTSO               QPCreateSendOpsFlags = 1 << 10 // IBV_QP_EX_WITH_TSO (not supported)
	QPExWithFlush             QPCreateSendOpsFlags = 1 << 11 // IBV_QP_EX_WITH_FLUSH (not supported)
	QPExWithAtomicWrite       QPCreateSendOpsFlags = 1 << 12 // IBV_QP_EX_WITH_ATOMIC_WRITE (not supported)
)

// QPInitAttrEx describes a queue pair to create with CreateQPEx (struct
// ibv_qp_init_attr_ex): QPInitAttr's fields, then those CompMask names.
// Of C's other fields, max_tso_header, rwq_ind_tbl, rx_hash_conf and
// source_qpn are not supported (their CompMask bits fail with
// ErrNotSupported).
type QPInitAttrEx struct {
	QPInitAttr
	CompMask QPInitAttrMask
	PD       *PD // the QP's protection domain (QPInitAttrPD)
	// XRCD is the XRC domain of an XRC_RECV QP (QPInitAttrXRCD), which
	// has no PD: CreateQPEx is then XRCD.CreateQP.
	XRCD *XRCD
	// CreateFlags (QPInitAttrCreateFlags) must be 0: no flag is
	// supported.
	CreateFlags QPCreateFlags
	// SendOpsFlags (QPInitAttrSendOpsFlags) are the work requests the
	// QP's QPEx may build. Creation fails with ErrNotSupported if the QP
	// type or the device does not have one of them.
	SendOpsFlags QPCreateSendOpsFlags
}

// Device capability flags the send operations depend on.
const (
	DeviceMemWindowType2A = 1 << 23 // IBV_DEVICE_MEM_WINDOW_TYPE_2A
)

// sendOpsOf returns the send operations a QP of type t has on a device
// with attributes a: those its transport defines, less those the device
// lacks (atomics, memory windows, invalidation).
func sendOpsOf(t QPType, a *DeviceAttr) QPCreateSendOpsFlags {
	const (
		uc = QPExWithRDMAWrite | QPExWithRDMAWriteWithImm | QPExWithSend | QPExWithSendWithImm | QPExWithLocalInv | QPExWithBindMW
		rc = uc | QPExWithRDMARead | QPExWithAtomicCmpAndSwp | QPExWithAtomicFetchAndAdd | QPExWithSendWithInv
	)
	var ops QPCreateSendOpsFlags
	switch t {
	case QPTRC, QPTXRCSend:
		ops = rc
	case QPTUC:
		ops = uc
	case QPTUD:
		ops = QPExWithSend | QPExWithSendWithImm
	}
	if a.AtomicCap == AtomicNone {
		ops &^= QPExWithAtomicCmpAndSwp | QPExWithAtomicFetchAndAdd
	}
	if a.DeviceCapFlags&(DeviceMemWindowType2A|DeviceMemWindowType2B) == 0 {
		ops &^= QPExWithBindMW
	}
	if a.DeviceCapFlags&DeviceMemMgtExtensions == 0 {
		ops &^= QPExWithLocalInv | QPExWithSendWithInv
	}
	return ops
}

// CreateQPEx creates a queue pair (ibv_create_qp_ex). With
// QPInitAttrSendOpsFlags, the QP's QPEx builds work requests for the
// operations attr.SendOpsFlags names. On return attr.Cap holds the sizes
// the device gave.
func (c *Context) CreateQPEx(attr *QPInitAttrEx) (*QP, error) {
	const op = "ibv_create_qp_ex"
	if err := c.check(op); err != nil {
		return nil, err
	}
	if attr == nil {
		return nil, Errorf(op, ErrInvalidArgument, "no attributes")
	}
	const known = QPInitAttrPD | QPInitAttrXRCD | QPInitAttrCreateFlags | QPInitAttrMaxTSOHeader | QPInitAttrIndTable | QPInitAttrRXHash | QPInitAttrSendOpsFlags
	switch m := attr.CompMask; {
	case m&^known != 0:
		return nil, Errorf(op, ErrNotSupported, "comp_mask has unknown bits")
	case m&(QPInitAttrMaxTSOHeader|QPInitAttrIndTable|QPInitAttrRXHash) != 0:
		return nil, Errorf(op, ErrNotSupported, "comp_mask asks for TSO, an indirection table or RX hashing")
	case m&QPInitAttrCreateFlags != 0 && attr.CreateFlags != 0:
		return nil, Errorf(op, ErrNotSupported, "create_flags")
	case m&QPInitAttrXRCD != 0:
		switch {
		case attr.XRCD == nil || attr.XRCD.ctx != c:
			return nil, Errorf(op, ErrInvalidArgument, "IBV_QP_INIT_ATTR_XRCD needs an XRC domain of this context")
		case m&QPInitAttrSendOpsFlags != 0:
			return nil, Errorf(op, ErrInvalidArgument, "an XRC_RECV QP has no send queue to build work requests for")
		}
		return attr.XRCD.CreateQP(&attr.QPInitAttr)
	case m&QPInitAttrPD == 0 || attr.PD == nil:
		return nil, Errorf(op, ErrInvalidArgument, "the QP needs a protection domain (IBV_QP_INIT_ATTR_PD)")
	case attr.PD.ctx != c:
		return nil, Errorf(op, ErrInvalidArgument, "the protection domain belongs to another context")
	}
	var ops QPCreateSendOpsFlags
	if attr.CompMask&QPInitAttrSendOpsFlags != 0 {
		ops = attr.SendOpsFlags
		dev, err := c.drv.QueryDevice()
		if err != nil {
			return nil, err
		}
		if missing := ops &^ sendOpsOf(attr.QPType, &dev); missing != 0 {
			return nil, Errorf(op, ErrNotSupported, "send_ops_flags 0x"+strconv.FormatUint(uint64(missing), 16)+" not available on a "+attr.QPType.String()+" QP of this device")
		}
	}
	qp, err := attr.PD.CreateQP(&attr.QPInitAttr)
	if err != nil {
		return nil, err
	}
	if attr.CompMask&QPInitAttrSendOpsFlags != 0 {
		qp.ex = &QPEx{qp: qp, ops: ops, cap: attr.Cap}
	}
	return qp, nil
}

// QPEx is a QP's work request builder (struct ibv_qp_ex, the ibv_wr_*
// API): between WRStart and WRComplete a program builds work requests
// with one builder call each (WRSend, WRRDMAWrite ...) followed by its
// setters (WRSetSGE, WRSetUDAddr ...), and WRComplete posts them all at
// once; WRAbort drops them. Nothing reaches the send queue before
// WRComplete.
//
// WRID and WRFlags are read by each builder call, as C's qpx->wr_id and
// qpx->wr_flags: set them before it.
//
// As in C, the calls report nothing: the first mistake (an operation
// the QP was not created for, a setter without a builder, too many SGEs
// or inline bytes, a UD request without an address) is remembered, the
// calls after it do nothing, and WRComplete returns it without posting.
//
// WRStart to WRComplete or WRAbort is a critical section: another
// goroutine's WRStart waits for it. The calls in between belong to the
// goroutine that called WRStart.
type QPEx struct {
	WRID    uint64
	WRFlags SendFlags

	qp  *QP
	ops QPCreateSendOpsFlags
	cap QPCap

	mu   sync.Mutex // held from WRStart to WRComplete or WRAbort
	open atomic.Bool
	err  error
	wrs  []SendWR
	data []wrData // per request of wrs: its SGEs
	sges []SGE

	// Inline data is copied into inl, which is registered with the QP's
	// PD when a batch is posted (the providers copy inline data at post
	// time from registered memory); inlUsed bytes of it hold this
	// batch's.
	inl     []byte
	inlUsed int
	inlMu   sync.Mutex // guards inlMR and closed, which the QP's Destroy touches
	inlMR   *MR
	closed  bool
}

// wrData is where a request's SGEs are in QPEx.sges; an inline request's
// SGE addresses are offsets into QPEx.inl until the batch is posted.
type wrData struct {
	off, n int
	inline bool
	srqn   bool // WRSetXRCSRQN was called
}

// QPEx returns the QP's work request builder (ibv_qp_to_qp_ex), or nil
// if the QP was not created by CreateQPEx with QPInitAttrSendOpsFlags.
func (qp *QP) QPEx() *QPEx { return qp.ex }

// QP returns the QP the builder posts to.
func (qx *QPEx) QP() *QP { return qx.qp }

// WRStart begins a batch of work requests (ibv_wr_start). It waits while
// another goroutine has one open.
func (qx *QPEx) WRStart() {
	qx.mu.Lock()
	qx.open.Store(true)
	qx.err = nil
	qx.wrs = qx.wrs[:0]
	qx.data = qx.data[:0]
	qx.sges = qx.sges[:0]
	qx.inlUsed = 0
}

// fail remembers the batch's first error.
func (qx *QPEx) fail(op string, errno Errno, detail string) {
	if qx.err == nil {
		qx.err = Errorf(op, errno, detail)
	}
}

// add starts a work request of opcode o, which needs send_ops_flags bit
// need; it returns nil after an error.
func (qx *QPEx) add(op string, o WROpcode, need QPCreateSendOpsFlags) *SendWR {
	switch {
	case qx.err != nil:
		return nil
	case !qx.open.Load():
		qx.fail(op, ErrInvalidArgument, "no batch started (WRStart)")
		return nil
	case qx.ops&need == 0:
		qx.fail(op, ErrNotSupported, o.String()+" is not in the QP's send_ops_flags")
		return nil
	}
	if err := qx.checkLast(); err != nil {
		qx.err = err
		return nil
	}
	qx.wrs = append(qx.wrs, SendWR{WRID: qx.WRID, Opcode: o, SendFlags: qx.WRFlags})
	qx.data = append(qx.data, wrData{})
	return &qx.wrs[len(qx.wrs)-1]
}

// checkLast checks that the last request has what its QP type needs.
func (qx *QPEx) checkLast() error {
	if len(qx.wrs) == 0 {
		return nil
	}
	switch {
	case qx.qp.typ == QPTUD && qx.wrs[len(qx.wrs)-1].AH == nil:
		return Errorf("ibv_wr_complete", ErrInvalidArgument, "a UD work request needs ibv_wr_set_ud_addr")
	case qx.qp.typ == QPTXRCSend && !qx.data[len(qx.data)-1].srqn:
		return Errorf("ibv_wr_complete", ErrInvalidArgument, "an XRC_SEND work request needs ibv_wr_set_xrc_srqn")
	}
	return nil
}

// last returns the request the setter op applies to, or nil.
func (qx *QPEx) last(op string) *SendWR {
	if qx.err != nil {
		return nil
	}
	if len(qx.wrs) == 0 || !qx.open.Load() {
		qx.fail(op, ErrInvalidArgument, "no work request to set (call a builder first)")
		return nil
	}
	return &qx.wrs[len(qx.wrs)-1]
}

// WRAtomicCmpSwp builds an ATOMIC_CMP_AND_SWP (ibv_wr_atomic_cmp_swp):
// if the 8 bytes at remoteAddr equal compare, they become swap. The
// original value lands in the one 8-byte SGE set next.
func (qx *QPEx) WRAtomicCmpSwp(rkey uint32, remoteAddr, compare, swap uint64) {
	if w := qx.add("ibv_wr_atomic_cmp_swp", WRAtomicCmpAndSwp, QPExWithAtomicCmpAndSwp); w != nil {
		w.RKey, w.RemoteAddr, w.CompareAdd, w.Swap = rkey, remoteAddr, compare, swap
	}
}

// WRAtomicFetchAdd builds an ATOMIC_FETCH_AND_ADD
// (ibv_wr_atomic_fetch_add): add is added to the 8 bytes at remoteAddr,
// whose original value lands in the one 8-byte SGE set next.
func (qx *QPEx) WRAtomicFetchAdd(rkey uint32, remoteAddr, add uint64) {
	if w := qx.add("ibv_wr_atomic_fetch_add", WRAtomicFetchAndAdd, QPExWithAtomicFetchAndAdd); w != nil {
		w.RKey, w.RemoteAddr, w.CompareAdd = rkey, remoteAddr, add
	}
}

// WRBindMW builds a BIND_MW of a type 2 window (ibv_wr_bind_mw): once it
// executes, mw answers to rkey (see IncRKey) for the memory info names.
// It takes no data.
func (qx *QPEx) WRBindMW(mw *MW, rkey uint32, info *MWBindInfo) {
	const op = "ibv_wr_bind_mw"
	w := qx.add(op, WRBindMW, QPExWithBindMW)
	if w == nil {
		return
	}
	if mw == nil || info == nil {
		qx.fail(op, ErrInvalidArgument, "no memory window or bind info")
		return
	}
	w.BindMW = BindMWWR{MW: mw, RKey: rkey, BindInfo: *info}
}

// WRLocalInv builds a LOCAL_INV (ibv_wr_local_inv): the type 2 window or
// region answering to invalidateRKey stops answering. It takes no data.
func (qx *QPEx) WRLocalInv(invalidateRKey uint32) {
	if w := qx.add("ibv_wr_local_inv", WRLocalInv, QPExWithLocalInv); w != nil {
		w.InvalidateRKey = invalidateRKey
	}
}

// WRRDMARead builds an RDMA READ (ibv_wr_rdma_read) from the peer's
// memory at remoteAddr into the SGEs set next.
func (qx *QPEx) WRRDMARead(rkey uint32, remoteAddr uint64) {
	if w := qx.add("ibv_wr_rdma_read", WRRDMARead, QPExWithRDMARead); w != nil {
		w.RKey, w.RemoteAddr = rkey, remoteAddr
	}
}

// WRRDMAWrite builds an RDMA WRITE (ibv_wr_rdma_write) of the data set
// next to the peer's memory at remoteAddr.
func (qx *QPEx) WRRDMAWrite(rkey uint32, remoteAddr uint64) {
	if w := qx.add("ibv_wr_rdma_write", WRRDMAWrite, QPExWithRDMAWrite); w != nil {
		w.RKey, w.RemoteAddr = rkey, remoteAddr
	}
}

// WRRDMAWriteImm builds an RDMA WRITE WITH IMMEDIATE
// (ibv_wr_rdma_write_imm): the peer also completes a receive
// (IBV_WC_RECV_RDMA_WITH_IMM) carrying immData.
func (qx *QPEx) WRRDMAWriteImm(rkey uint32, remoteAddr uint64, immData uint32) {
	if w := qx.add("ibv_wr_rdma_write_imm", WRRDMAWriteWithImm, QPExWithRDMAWriteWithImm); w != nil {
		w.RKey, w.RemoteAddr, w.ImmData = rkey, remoteAddr, immData
	}
}

// WRSend builds a SEND (ibv_wr_send) of the data set next.
func (qx *QPEx) WRSend() {
	qx.add("ibv_wr_send", WRSend, QPExWithSend)
}

// WRSendImm builds a SEND WITH IMMEDIATE (ibv_wr_send_imm).
func (qx *QPEx) WRSendImm(immData uint32) {
	if w := qx.add("ibv_wr_send_imm", WRSendWithImm, QPExWithSendWithImm); w != nil {
		w.ImmData = immData
	}
}

// WRSendInv builds a SEND WITH INVALIDATE (ibv_wr_send_inv): the peer
// invalidates its window or region answering to invalidateRKey before
// it completes the receive.
func (qx *QPEx) WRSendInv(invalidateRKey uint32) {
	if w := qx.add("ibv_wr_send_inv", WRSendWithInv, QPExWithSendWithInv); w != nil {
		w.InvalidateRKey = invalidateRKey
	}
}

// WRSetUDAddr addresses the last request of a UD QP
// (ibv_wr_set_ud_addr): the address handle, the remote QP number and
// Q_Key.
func (qx *QPEx) WRSetUDAddr(ah *AH, remoteQPN, remoteQKey uint32) {
	const op = "ibv_wr_set_ud_addr"
	w := qx.last(op)
	if w == nil {
		return
	}
	if ah == nil {
		qx.fail(op, ErrInvalidArgument, "no address handle")
		return
	}
	w.AH, w.RemoteQPN, w.RemoteQKey = ah, remoteQPN, remoteQKey
}

// WRSetXRCSRQN names the remote XRC SRQ the last request of an XRC_SEND
// QP is for (ibv_wr_set_xrc_srqn; SendWR.RemoteSRQN).
func (qx *QPEx) WRSetXRCSRQN(remoteSRQN uint32) {
	if w := qx.last("ibv_wr_set_xrc_srqn"); w != nil {
		w.RemoteSRQN = remoteSRQN
		qx.data[len(qx.data)-1].srqn = true
	}
}

// setData gives the last request n SGEs, appended to qx.sges by the
// caller from off on.
func (qx *QPEx) setData(w *SendWR, off int, inline bool) {
	d := &qx.data[len(qx.data)-1]
	d.off, d.n, d.inline = off, len(qx.sges)-off, inline
	if inline {
		w.SendFlags |= SendInline
	} else {
		w.SendFlags &^= SendInline
	}
}

// WRSetSGE gives the last request one buffer of registered memory
// (ibv_wr_set_sge); a length of 0 means no data.
func (qx *QPEx) WRSetSGE(lkey uint32, addr uint64, length uint32) {
	w := qx.last("ibv_wr_set_sge")
	if w == nil {
		return
	}
	off := len(qx.sges)
	if length != 0 {
		qx.sges = append(qx.sges, SGE{Addr: addr, Length: length, LKey: lkey})
	}
	qx.setData(w, off, false)
}

// WRSetSGEList gives the last request the buffers of sges, logically
// concatenated (ibv_wr_set_sge_list). sges is copied.
func (qx *QPEx) WRSetSGEList(sges []SGE) {
	const op = "ibv_wr_set_sge_list"
	w := qx.last(op)
	if w == nil {
		return
	}
	if len(sges) > int(qx.cap.MaxSendSGE) {
		qx.fail(op, ErrInvalidArgument, itoa(len(sges))+" SGEs, the QP takes "+itoa(int(qx.cap.MaxSendSGE)))
		return
	}
	off := len(qx.sges)
	qx.sges = append(qx.sges, sges...)
	qx.setData(w, off, false)
}

// WRSetInlineData gives the last request data copied now
// (ibv_wr_set_inline_data), as IBV_SEND_INLINE does: the caller may
// reuse data at once. It is for SENDs and RDMA WRITEs of up to the QP's
// max_inline_data bytes.
func (qx *QPEx) WRSetInlineData(data []byte) {
	copy(qx.inline("ibv_wr_set_inline_data", len(data)), data)
}

// WRSetInlineDataList is WRSetInlineData with the buffers of bufs,
// logically concatenated (ibv_wr_set_inline_data_list).
func (qx *QPEx) WRSetInlineDataList(bufs [][]byte) {
	n := 0
	for _, b := range bufs {
		n += len(b)
	}
	dst := qx.inline("ibv_wr_set_inline_data_list", n)
	for _, b := range bufs {
		dst = dst[copy(dst, b):]
	}
}

// inline makes n bytes of the staging buffer the last request's data and
// returns them for the caller to fill; after an error, nil.
func (qx *QPEx) inline(op string, n int) []byte {
	w := qx.last(op)
	if w == nil {
		return nil
	}
	switch w.Opcode {
	case WRSend, WRSendWithImm, WRSendWithInv, WRRDMAWrite, WRRDMAWriteWithImm:
	default:
		qx.fail(op, ErrInvalidArgument, "inline data with "+w.Opcode.String()+" (SEND and RDMA WRITE only)")
		return nil
	}
	if n > int(qx.cap.MaxInlineData) {
		qx.fail(op, ErrInvalidArgument, itoa(n)+" inline bytes, the QP takes "+itoa(int(qx.cap.MaxInlineData)))
		return nil
	}
	if need := qx.inlUsed + n; need > len(qx.inl) {
		grown := make([]byte, max(2*len(qx.inl), need, 256))
		copy(grown, qx.inl[:qx.inlUsed])
		qx.inl = grown
	}
	start := qx.inlUsed
	qx.inlUsed += n
	off := len(qx.sges)
	if n > 0 {
		qx.sges = append(qx.sges, SGE{Addr: uint64(start), Length: uint32(n)})
	}
	qx.setData(w, off, true)
	return qx.inl[start:qx.inlUsed]
}

// WRAbort drops the batch's work requests (ibv_wr_abort): none is
// posted.
func (qx *QPEx) WRAbort() {
	if !qx.open.Load() {
		return
	}
	qx.finish()
}

// finish ends the batch.
func (qx *QPEx) finish() {
	clear(qx.wrs) // let go of the AHs, MRs and windows the requests name
	qx.wrs = qx.wrs[:0]
	qx.open.Store(false)
	qx.mu.Unlock()
}

// WRComplete posts the batch's work requests (ibv_wr_complete) and ends
// the batch. If a call of the batch went wrong it posts none and returns
// that call's error. Otherwise it posts them all as one list; a
// provider that can (the software device does) checks them all first and
// posts none if one is refused. On one that cannot, such as rdma-core's
// (ibv_post_send), the error is a *WRError naming the first request not
// posted, and those before it were.
func (qx *QPEx) WRComplete() error {
	if !qx.open.Load() {
		return Errorf("ibv_wr_complete", ErrInvalidArgument, "no batch started (WRStart)")
	}
	defer qx.finish()
	if qx.err != nil {
		return qx.err
	}
	if err := qx.checkLast(); err != nil {
		return err
	}
	if len(qx.wrs) == 0 {
		return nil
	}
	var inl *MR
	if qx.inlUsed > 0 {
		var err error
		if inl, err = qx.stagingMR(); err != nil {
			return err
		}
	}
	for i := range qx.wrs {
		d := qx.data[i]
		if d.n == 0 {
			qx.wrs[i].SGList = nil
			continue
		}
		sg := qx.sges[d.off : d.off+d.n : d.off+d.n]
		if d.inline {
			for j := range sg {
				sg[j].Addr += inl.Addr()
				sg[j].LKey = inl.LKey()
			}
		}
		qx.wrs[i].SGList = sg
	}
	return qx.qp.postSend("ibv_wr_complete", qx.wrs, true)
}

// stagingMR returns inl registered with the QP's PD, registering it anew
// if it grew.
func (qx *QPEx) stagingMR() (*MR, error) {
	qx.inlMu.Lock()
	defer qx.inlMu.Unlock()
	if qx.closed {
		return nil, Errorf("ibv_wr_complete", ErrClosed, "QP destroyed")
	}
	if qx.inlMR != nil && len(qx.inlMR.Buf()) == len(qx.inl) {
		return qx.inlMR, nil
	}
	mr, err := qx.qp.pd.RegMR(qx.inl, 0)
	if err != nil {
		return nil, err
	}
	if qx.inlMR != nil {
		qx.inlMR.Dereg()
	}
	qx.inlMR = mr
	return mr, nil
}

// release lets go of the staging memory; the QP is being destroyed.
func (qx *QPEx) release() {
	qx.inlMu.Lock()
	mr := qx.inlMR
	qx.inlMR, qx.closed = nil, true
	qx.inlMu.Unlock()
	if mr != nil {
		mr.Dereg()
	}
}
