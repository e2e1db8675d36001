package verbs

import (
	"os"
	"sync"
)

// XRC, the eXtended Reliable Connection transport, lets one send queue
// reach many receive queues of a remote process: an XRC_SEND QP is
// connected to an XRC_RECV QP as an RC QP is to its peer, and each of its
// work requests names, in SendWR.RemoteSRQN, which XRC shared receive
// queue behind that XRC_RECV QP takes it. Receive queues are grouped in
// XRC domains (XRCD): an XRC_RECV QP delivers only into the XRC SRQs of
// its own domain. A process then needs one send QP per remote node, not
// one per remote process or queue.

// XRCDInitAttrMask says which fields of an XRCDInitAttr are set (enum
// ibv_xrcd_init_attr_mask).
type XRCDInitAttrMask uint32

// XRC domain init attribute bits.
const (
	XRCDInitAttrFD     XRCDInitAttrMask = 1 << 0 // IBV_XRCD_INIT_ATTR_FD
	XRCDInitAttrOFlags XRCDInitAttrMask = 1 << 1 // IBV_XRCD_INIT_ATTR_OFLAGS
)

// XRCDInitAttr describes the XRC domain to open (struct
// ibv_xrcd_init_attr). As in libibverbs, CompMask must have both bits.
type XRCDInitAttr struct {
	CompMask XRCDInitAttrMask
	// FD is a file the domain is associated with, so that whoever opens
	// the same file (inode) shares the domain; -1 opens a domain of its
	// own, which needs OFlags os.O_CREATE.
	FD int
	// OFlags is os.O_CREATE (create the file's domain if it has none),
	// optionally with os.O_EXCL (fail if it has one).
	OFlags int
}

// XRCD is an XRC domain (struct ibv_xrcd): the XRC SRQs and XRC_RECV QPs
// that may deliver to each other.
type XRCD struct {
	ctx *Context
	drv XRCDDriver

	mu     sync.Mutex
	users  int // XRC SRQs and XRC_RECV QP handles of the domain
	closed bool
}

// OpenXRCD opens an XRC domain (ibv_open_xrcd). A nil attr is the common
// case, a domain of its own (FD -1, OFlags os.O_CREATE). With an FD, the
// provider decides whether it can share domains by file: the software
// device shares them between the contexts of one process, rdma-core
// through the kernel between processes. A provider without XRC fails with
// ErrNotSupported.
func (c *Context) OpenXRCD(attr *XRCDInitAttr) (*XRCD, error) {
	const op = "ibv_open_xrcd"
	if err := c.check(op); err != nil {
		return nil, err
	}
	a := XRCDInitAttr{CompMask: XRCDInitAttrFD | XRCDInitAttrOFlags, FD: -1, OFlags: os.O_CREATE}
	if attr != nil {
		a = *attr
	}
	switch {
	case a.CompMask&^(XRCDInitAttrFD|XRCDInitAttrOFlags) != 0:
		return nil, Errorf(op, ErrNotSupported, "unknown bits in comp_mask")
	case a.CompMask != XRCDInitAttrFD|XRCDInitAttrOFlags:
		return nil, Errorf(op, ErrInvalidArgument, "comp_mask needs IBV_XRCD_INIT_ATTR_FD and IBV_XRCD_INIT_ATTR_OFLAGS")
	case a.FD < -1:
		return nil, Errorf(op, ErrInvalidArgument, "fd "+itoa(a.FD))
	case a.OFlags&^(os.O_CREATE|os.O_EXCL) != 0:
		return nil, Errorf(op, ErrInvalidArgument, "oflags may hold O_CREAT and O_EXCL only")
	case a.FD == -1 && a.OFlags&os.O_CREATE == 0:
		return nil, Errorf(op, ErrInvalidArgument, "a domain without a file (fd -1) needs O_CREAT")
	}
	x, ok := c.drv.(XRCDriver)
	if !ok {
		return nil, Errorf(op, ErrNotSupported, c.dev.name+" has no XRC domains")
	}
	drv, err := x.OpenXRCD(&a)
	if err != nil {
		return nil, err
	}
	return &XRCD{ctx: c, drv: drv}, nil
}

// Context returns the context the domain was opened on (xrcd->context).
func (x *XRCD) Context() *Context { return x.ctx }

func (x *XRCD) acquire(op string) error {
	x.mu.Lock()
	defer x.mu.Unlock()
	if x.closed {
		return Errorf(op, ErrClosed, "XRC domain closed")
	}
	x.users++
	return nil
}

func (x *XRCD) release() {
	x.mu.Lock()
	x.users--
	x.mu.Unlock()
}

// Close closes the domain (ibv_close_xrcd). It fails with ErrBusy while
// XRC SRQs or XRC_RECV QPs of the domain, made or opened through this
// XRCD, exist.
func (x *XRCD) Close() error {
	x.mu.Lock()
	defer x.mu.Unlock()
	if x.closed {
		return nil
	}
	if x.users > 0 {
		return Errorf("ibv_close_xrcd", ErrBusy, itoa(x.users)+" XRC SRQ(s) or XRC_RECV QP(s) still use the domain")
	}
	if err := x.drv.Close(); err != nil {
		return err
	}
	x.closed = true
	return nil
}

// XRCDDriverOf returns the provider's side of x.
func XRCDDriverOf(x *XRCD) XRCDDriver {
	if x == nil {
		return nil
	}
	return x.drv
}

// CreateQP creates an XRC_RECV QP in the domain (ibv_create_qp_ex with
// IBV_QP_INIT_ATTR_XRCD and qp_type IBV_QPT_XRC_RECV). The QP has no PD,
// no CQs and no queues of its own: requests reaching it name an XRC SRQ
// of the domain, which gives the receive WQE, the completion queue and
// the PD remote access is checked against. attr.QPType must be
// QPTXRCRecv; QPContext and SQSigAll count, the rest is ignored (as the
// kernel ignores them). The QP lives until it and every handle OpenQP
// gave on it are destroyed.
func (x *XRCD) CreateQP(attr *QPInitAttr) (*QP, error) {
	const op = "ibv_create_qp_ex"
	if attr == nil {
		return nil, Errorf(op, ErrInvalidArgument, "no attributes")
	}
	if attr.QPType != QPTXRCRecv {
		return nil, Errorf(op, ErrInvalidArgument, "an XRC domain makes XRC_RECV QPs, not "+attr.QPType.String()+" (make those with PD.CreateQP)")
	}
	if err := x.ctx.check(op); err != nil {
		return nil, err
	}
	if err := x.acquire(op); err != nil {
		return nil, err
	}
	drv, err := x.drv.CreateQP(attr)
	if err != nil {
		x.release()
		return nil, err
	}
	attr.Cap = QPCap{}
	return x.addRecvQP(drv, attr.QPContext), nil
}

// QPOpenAttrMask says which fields of a QPOpenAttr are set (enum
// ibv_qp_open_attr_mask).
type QPOpenAttrMask uint32

// QP open attribute bits.
const (
	QPOpenAttrNum     QPOpenAttrMask = 1 << 0 // IBV_QP_OPEN_ATTR_NUM
	QPOpenAttrXRCD    QPOpenAttrMask = 1 << 1 // IBV_QP_OPEN_ATTR_XRCD
	QPOpenAttrContext QPOpenAttrMask = 1 << 2 // IBV_QP_OPEN_ATTR_CONTEXT
	QPOpenAttrType    QPOpenAttrMask = 1 << 3 // IBV_QP_OPEN_ATTR_TYPE
)

// QPOpenAttr names a shareable QP to open (struct ibv_qp_open_attr).
// CompMask needs QPOpenAttrNum, QPOpenAttrXRCD and QPOpenAttrType;
// QPOpenAttrContext makes QPContext count.
type QPOpenAttr struct {
	CompMask  QPOpenAttrMask
	QPNum     uint32
	XRCD      *XRCD
	QPContext any
	QPType    QPType // QPTXRCRecv, the only kind that can be shared
}

// OpenQP opens another handle on an XRC_RECV QP of an XRC domain
// (ibv_open_qp), such as one another part of the program made and shares
// by number. The handle modifies, queries and destroys like the QP it
// opens; destroying it leaves the QP to the other handles, and the QP
// goes with the last one. Asynchronous events of the QP reach every
// context that holds a handle.
func (c *Context) OpenQP(attr *QPOpenAttr) (*QP, error) {
	const op = "ibv_open_qp"
	if err := c.check(op); err != nil {
		return nil, err
	}
	const need = QPOpenAttrNum | QPOpenAttrXRCD | QPOpenAttrType
	switch {
	case attr.CompMask&^(need|QPOpenAttrContext) != 0:
		return nil, Errorf(op, ErrNotSupported, "unknown bits in comp_mask")
	case attr.CompMask&need != need:
		return nil, Errorf(op, ErrInvalidArgument, "comp_mask needs IBV_QP_OPEN_ATTR_NUM, IBV_QP_OPEN_ATTR_XRCD and IBV_QP_OPEN_ATTR_TYPE")
	case attr.XRCD == nil || attr.XRCD.ctx != c:
		return nil, Errorf(op, ErrInvalidArgument, "the XRC domain must be one of this context")
	case attr.QPType != QPTXRCRecv:
		return nil, Errorf(op, ErrInvalidArgument, "only XRC_RECV QPs can be opened, not "+attr.QPType.String())
	}
	x := attr.XRCD
	if err := x.acquire(op); err != nil {
		return nil, err
	}
	drv, err := x.drv.OpenQP(attr.QPNum)
	if err != nil {
		x.release()
		return nil, err
	}
	var uc any
	if attr.CompMask&QPOpenAttrContext != 0 {
		uc = attr.QPContext
	}
	return x.addRecvQP(drv, uc), nil
}

// addRecvQP registers a new XRC_RECV QP handle (x holds a use for it).
func (x *XRCD) addRecvQP(drv QPDriver, userCtx any) *QP {
	qp := &QP{ctx: x.ctx, xrcd: x, drv: drv, num: drv.Num(), typ: QPTXRCRecv, userCtx: userCtx}
	c := x.ctx
	c.mu.Lock()
	if c.recvQPs == nil {
		c.recvQPs = map[uint32][]*QP{}
	}
	c.recvQPs[qp.num] = append(c.recvQPs[qp.num], qp)
	if c.qps[qp.num] == nil {
		c.qps[qp.num] = qp
	}
	c.mu.Unlock()
	return qp
}

// dropRecvQP unregisters a destroyed XRC_RECV QP handle: the context's
// table names another handle of the same QP, made or opened through any
// of the context's opens of the domain, if one is left.
func (x *XRCD) dropRecvQP(qp *QP) {
	x.release()
	c := x.ctx
	c.mu.Lock()
	hs := c.recvQPs[qp.num]
	for i, h := range hs {
		if h == qp {
			hs = append(hs[:i:i], hs[i+1:]...)
			break
		}
	}
	if len(hs) == 0 {
		delete(c.recvQPs, qp.num)
	} else {
		c.recvQPs[qp.num] = hs
	}
	if c.qps[qp.num] == qp {
		delete(c.qps, qp.num)
		if len(hs) > 0 {
			c.qps[qp.num] = hs[0]
		}
	}
	c.mu.Unlock()
}

// SRQType is a shared receive queue's kind (enum ibv_srq_type).
type SRQType uint32

// Shared receive queue types.
const (
	SRQTBasic SRQType = 0 // IBV_SRQT_BASIC: receives for the QPs created with it
	SRQTXRC   SRQType = 1 // IBV_SRQT_XRC: receives for XRC senders that name it
	SRQTTM    SRQType = 2 // IBV_SRQT_TM: tag matching (not supported here)
)

// String names the type ("XRC").
func (t SRQType) String() string {
	switch t {
	case SRQTBasic:
		return "BASIC"
	case SRQTXRC:
		return "XRC"
	case SRQTTM:
		return "TM"
	}
	return "SRQT(" + itoa(int(t)) + ")"
}

// SRQInitAttrMask says which fields of an SRQInitAttrEx are set (enum
// ibv_srq_init_attr_mask).
type SRQInitAttrMask uint32

// SRQ init attribute bits.
const (
	SRQInitAttrType SRQInitAttrMask = 1 << 0 // IBV_SRQ_INIT_ATTR_TYPE
	SRQInitAttrPD   SRQInitAttrMask = 1 << 1 // IBV_SRQ_INIT_ATTR_PD
	SRQInitAttrXRCD SRQInitAttrMask = 1 << 2 // IBV_SRQ_INIT_ATTR_XRCD
	SRQInitAttrCQ   SRQInitAttrMask = 1 << 3 // IBV_SRQ_INIT_ATTR_CQ
	SRQInitAttrTM   SRQInitAttrMask = 1 << 4 // IBV_SRQ_INIT_ATTR_TM
)

// SRQInitAttrEx describes a shared receive queue to create with
// CreateSRQEx (struct ibv_srq_init_attr_ex). CompMask says which of the
// fields after Attr count: SRQInitAttrPD always; for an XRC SRQ also
// SRQInitAttrType (with SRQType SRQTXRC), SRQInitAttrXRCD and
// SRQInitAttrCQ.
type SRQInitAttrEx struct {
	SRQContext any
	Attr       SRQAttr
	CompMask   SRQInitAttrMask
	SRQType    SRQType
	// PD is the protection domain the receive buffers belong to; for
	// an XRC SRQ, remote RDMA and atomics through it are checked
	// against it as well.
	PD *PD
	// XRCD is the XRC domain of an XRC SRQ, and CQ the completion
	// queue its receives complete to.
	XRCD *XRCD
	CQ   *CQ
}

// CreateSRQEx creates a shared receive queue (ibv_create_srq_ex): a basic
// one, as PD.CreateSRQ does, or an XRC SRQ, which XRC senders reach by its
// number (SRQ.Num) through any XRC_RECV QP of its domain. On return
// attr.Attr holds the sizes the device gave.
func (c *Context) CreateSRQEx(attr *SRQInitAttrEx) (*SRQ, error) {
	const op = "ibv_create_srq_ex"
	if err := c.check(op); err != nil {
		return nil, err
	}
	m := attr.CompMask
	typ := SRQTBasic
	if m&SRQInitAttrType != 0 {
		typ = attr.SRQType
	}
	switch {
	case m&^(SRQInitAttrType|SRQInitAttrPD|SRQInitAttrXRCD|SRQInitAttrCQ|SRQInitAttrTM) != 0:
		return nil, Errorf(op, ErrNotSupported, "unknown bits in comp_mask")
	case m&SRQInitAttrPD == 0 || attr.PD == nil:
		return nil, Errorf(op, ErrInvalidArgument, "an SRQ needs a PD (IBV_SRQ_INIT_ATTR_PD)")
	case attr.PD.ctx != c:
		return nil, Errorf(op, ErrInvalidArgument, "the PD belongs to another device context")
	}
	switch typ {
	case SRQTBasic:
		if m&(SRQInitAttrXRCD|SRQInitAttrCQ|SRQInitAttrTM) != 0 {
			return nil, Errorf(op, ErrInvalidArgument, "a basic SRQ takes no XRC domain, CQ or tag matching attributes")
		}
		init := SRQInitAttr{Attr: attr.Attr, SRQContext: attr.SRQContext}
		s, err := attr.PD.CreateSRQ(&init)
		if err == nil {
			attr.Attr = init.Attr
		}
		return s, err
	case SRQTXRC:
	case SRQTTM:
		return nil, Errorf(op, ErrNotSupported, "tag matching SRQs")
	default:
		return nil, Errorf(op, ErrInvalidArgument, "srq_type "+typ.String())
	}
	switch {
	case m&SRQInitAttrXRCD == 0 || attr.XRCD == nil || m&SRQInitAttrCQ == 0 || attr.CQ == nil:
		return nil, Errorf(op, ErrInvalidArgument, "an XRC SRQ needs an XRC domain and a CQ (IBV_SRQ_INIT_ATTR_XRCD, IBV_SRQ_INIT_ATTR_CQ)")
	case attr.XRCD.ctx != c || attr.CQ.ctx != c:
		return nil, Errorf(op, ErrInvalidArgument, "the XRC domain or the CQ belongs to another device context")
	case attr.Attr.MaxWR == 0:
		return nil, Errorf(op, ErrInvalidArgument, "max_wr is 0")
	}
	pd, x, cq := attr.PD, attr.XRCD, attr.CQ
	if err := pd.acquire(op); err != nil {
		return nil, err
	}
	if err := x.acquire(op); err != nil {
		pd.release()
		return nil, err
	}
	drv, err := x.drv.CreateSRQ(attr)
	if err != nil {
		x.release()
		pd.release()
		return nil, err
	}
	cq.use()
	s := &SRQ{pd: pd, drv: drv, userCtx: attr.SRQContext, typ: SRQTXRC, xrcd: x, cq: cq, num: drv.Num()}
	c.mu.Lock()
	c.srqs[drv] = s
	c.mu.Unlock()
	return s, nil
}
