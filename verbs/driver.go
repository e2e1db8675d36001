package verbs

import (
	"context"
	"net/netip"
)

// The interfaces below are implemented by providers — the software RoCE
// device (package rxe) and, behind the rdmacore build tag, rdma-core —
// much as libibverbs' providers fill in struct verbs_context_ops. Programs
// do not use them: they use Device, Context, PD, MR, CQ and QP, which check
// what every provider would check and hand the rest to the provider.

// Provider lists the devices of one kind of RDMA device.
type Provider interface {
	// Name names the provider ("rxe").
	Name() string
	// Devices returns the provider's devices, in a stable order.
	Devices() ([]*Device, error)
}

// DeviceDriver is a provider's device.
type DeviceDriver interface {
	// Open opens the device (ibv_open_device). events receives the
	// context's asynchronous events.
	Open(events EventSink) (ContextDriver, error)
}

// EventSink takes asynchronous events from a provider.
type EventSink interface {
	// Event reports an asynchronous event. The provider names the QP by
	// number; the verbs layer finds the *QP. It never blocks.
	Event(typ EventType, qpNum uint32, port uint8)
	// SRQEvent reports an asynchronous event of a shared receive queue
	// (IBV_EVENT_SRQ_LIMIT_REACHED, IBV_EVENT_SRQ_ERR). It never blocks.
	SRQEvent(typ EventType, srq SRQDriver)
	// CQEvent reports an asynchronous event of a completion queue
	// (IBV_EVENT_CQ_ERR: it overran). It never blocks.
	CQEvent(typ EventType, cq CQDriver)
}

// ContextDriver is an open device.
type ContextDriver interface {
	QueryDevice() (DeviceAttr, error)
	QueryPort(port uint8) (PortAttr, error)
	QueryGID(port uint8, index int) (GID, error)
	QueryPKey(port uint8, index int) (uint16, error)
	AllocPD() (PDDriver, error)
	// CreateCQ creates a completion queue of at least cqe entries
	// (ibv_create_cq). notify is nil for a CQ without a completion
	// channel; otherwise the provider calls it, without blocking, each
	// time the armed CQ takes a completion that fires it (as the
	// hardware writes an event to the channel's file). A software
	// provider can use package swcq.
	CreateCQ(cqe int, notify func()) (CQDriver, error)
	Close() error
}

// CQDriver is a provider's completion queue. Poll reads the provider's
// queue directly: no copy, no goroutine between the completion and the
// program.
type CQDriver interface {
	// Poll moves up to len(wc) completions into wc (ibv_poll_cq); it
	// never blocks.
	Poll(wc []WC) (int, error)
	// Wait returns when a completion is queued or ctx is done.
	Wait(ctx context.Context) error
	// ReqNotify arms the CQ (ibv_req_notify_cq).
	ReqNotify(solicitedOnly bool) error
	// Resize changes the number of entries (ibv_resize_cq).
	Resize(cqe int) error
	// Len is the number of completions queued; Cap the number of entries.
	Len() int
	Cap() int
	// Destroy destroys the CQ (ibv_destroy_cq); the verbs layer has
	// checked that no QP uses it.
	Destroy() error
}

// PDDriver is a provider's protection domain.
type PDDriver interface {
	// RegMR registers buf. It returns the region's keys and the virtual
	// address of buf[0] that SGEs and remote peers use.
	RegMR(buf []byte, access AccessFlags) (MRDriver, error)
	CreateQP(attr *QPInitAttr) (QPDriver, error)
	CreateAH(attr *AHAttr) (AHDriver, error)
	CreateSRQ(attr *SRQInitAttr) (SRQDriver, error)
	AllocMW(t MWType) (MWDriver, error)
	Dealloc() error
}

// SRQDriver is a provider's shared receive queue.
type SRQDriver interface {
	Modify(attr *SRQAttr, mask SRQAttrMask) error
	Query() (SRQAttr, error)
	PostRecv(wrs []RecvWR) error
	Destroy() error
}

// MWDriver is a provider's memory window.
type MWDriver interface {
	// RKey returns the key the window was allocated with.
	RKey() uint32
	Dealloc() error
}

// MRDriver is a provider's memory region.
type MRDriver interface {
	Keys() (lkey, rkey uint32)
	Addr() uint64
	// Dereg fails with ErrBusy while memory windows are bound to the
	// region.
	Dereg() error
}

// AHDriver is a provider's address handle.
type AHDriver interface {
	Destroy() error
}

// QPDriver is a provider's queue pair. Modify must apply CheckModify to the
// QP's current state itself, as the state can change under the caller (a
// QP goes to ERR on a fatal error).
type QPDriver interface {
	Num() uint32
	Modify(attr *QPAttr, mask QPAttrMask) error
	Query() (QPAttr, QPInitAttr, error)
	PostSend(wrs []SendWR) error
	PostRecv(wrs []RecvWR) error
	// AttachMcast and DetachMcast add the QP to a multicast group and
	// take it out (UD only).
	AttachMcast(gid GID) error
	DetachMcast(gid GID) error
	Destroy() error
}

// Optional capabilities. A driver may implement any of the interfaces
// below beside the one its object must; the verbs layer finds them by type
// assertion and, where a driver lacks one, does what this list says.
//
//	interface       implemented by   without it
//	ForkIniter      Provider         ForkInit has nothing to do for the provider
//	AddrLister      DeviceDriver     rdmacm opens the device and reads its GID table
//	NodeTyper       DeviceDriver     a channel adapter on InfiniBand or RoCE
//	DevicePather    DeviceDriver     no kernel device: DevName, DevPath, IBDevPath are ""
//	CountersDriver  DeviceDriver,    QueryCounters fails with ErrNotSupported
//	                QPDriver
//	ProgressDriver  ContextDriver    SetProgress is accepted and changes nothing
//	DeviceExDriver  ContextDriver    QueryDeviceEx: QueryDevice's attributes, zero for the rest
//	CompVectors     ContextDriver    one completion vector (0)
//	CQExCreator     ContextDriver    CreateCQEx offers WCStandardFlags over an ordinary CQ
//	CQExDriver      CQDriver         CreateCQEx's ordinary CQs are read through Poll
//	BatchPoster     QPDriver         WRComplete posts with PostSend
//	XRCDriver       ContextDriver    XRC domains, SRQs and QPs fail with ErrNotSupported
//	                                 before they reach the provider
//
// The connection manager also looks, on a device that runs its own QP1
// (the software device), for the hooks rdmacm documents with its IB CM.

// ForkIniter is a provider that must prepare for fork before memory is
// registered (its ForkInit is ibv_fork_init).
type ForkIniter interface {
	ForkInit() error
}

// AddrLister is a device driver that lists its IP addresses, its GID
// table, without being opened.
type AddrLister interface {
	Addrs() []netip.Addr
}

// NodeTyper is a device driver whose node or transport type is not a
// channel adapter's on InfiniBand or RoCE.
type NodeTyper interface {
	NodeType() NodeType
	TransportType() TransportType
}

// DevicePather is a device driver whose device is the kernel's: its
// uverbs device's name and sysfs path, and its own sysfs path (struct
// ibv_device's dev_name, dev_path, ibdev_path).
type DevicePather interface {
	DevName() string
	DevPath() string
	IBDevPath() string
}

// CountersDriver is a device or QP driver that keeps Counters.
type CountersDriver interface {
	Counters() Counters
}

// ProgressDriver is a context driver whose device the program can drive
// (a software device). Contexts of other providers accept either
// Progress and keep behaving as they do.
type ProgressDriver interface {
	SetProgress(p Progress) error
}

// DeviceExDriver is a context driver that reports extended attributes
// (ibv_query_device_ex). Without it, QueryDeviceEx returns QueryDevice's
// attributes and zero for the rest, as libibverbs does for a provider
// without query_device_ex.
type DeviceExDriver interface {
	QueryDeviceEx() (DeviceAttrEx, error)
}

// CompVectors is implemented by context drivers whose device has more
// than one completion vector (num_comp_vectors).
type CompVectors interface {
	NumCompVectors() int
	// CreateCQOnVector is CreateCQ with the CQ's events on a vector
	// other than 0.
	CreateCQOnVector(cqe int, notify func(), vector int) (CQDriver, error)
}

// CQExCreator is a context driver with extended completion queues of its
// own (ibv_create_cq_ex): it provides the fields attr.WCFlags asks for or
// fails with ErrNotSupported. attr.Flags holds the flags only when
// CompMask says so; the verbs layer has checked the rest as for CreateCQ.
// Without it, CreateCQEx offers WCStandardFlags over the provider's
// ordinary CQ.
type CQExCreator interface {
	CreateCQEx(attr *CQInitAttrEx, notify func()) (CQExDriver, error)
}

// CQExDriver is a completion queue that hands out completions one at a
// time (the start_poll, next_poll and end_poll of struct ibv_cq_ex).
// StartPoll and NextPoll fill cur with the next completion, or return
// ErrNoEntry itself (not wrapped, so that polling an empty CQ allocates
// nothing) when there is none; EndPoll ends the batch. A CQDriver that
// also implements these serves CreateCQEx's ordinary CQs directly.
type CQExDriver interface {
	CQDriver
	StartPoll(cur *WCEx) error
	NextPoll(cur *WCEx) error
	EndPoll()
}

// BatchPoster is a QP driver that can post a list of send work requests
// all or none, as WRComplete promises: it checks each as PostSend would
// and, if one is refused, posts none and returns a *WRError naming it.
// Without it, WRComplete posts with PostSend.
type BatchPoster interface {
	PostSendBatch(wrs []SendWR) error
}

// XRCDriver is a context driver whose device does XRC (IBV_DEVICE_XRC).
// Its PDDriver.CreateQP then also makes XRC_SEND QPs: QPType QPTXRCSend,
// a SendCQ, no RecvCQ and no SRQ, a send queue only, whose work requests
// carry SendWR.RemoteSRQN.
type XRCDriver interface {
	// OpenXRCD opens an XRC domain (ibv_open_xrcd). The verbs layer has
	// checked the attributes' form: both comp_mask bits, and O_CREAT
	// when FD is -1. A provider that cannot share domains by file fails
	// an FD other than -1 with ErrNotSupported.
	OpenXRCD(attr *XRCDInitAttr) (XRCDDriver, error)
}

// XRCDDriver is a provider's XRC domain, as this open of it sees it.
type XRCDDriver interface {
	// CreateSRQ creates an XRC SRQ of the domain (ibv_create_srq_ex
	// with IBV_SRQT_XRC). attr.PD, attr.XRCD (this domain) and attr.CQ
	// are set and of the same context; the provider sets attr.Attr to
	// the sizes it gave.
	CreateSRQ(attr *SRQInitAttrEx) (XRCSRQDriver, error)
	// CreateQP creates an XRC_RECV QP of the domain (ibv_create_qp_ex
	// with IBV_QP_INIT_ATTR_XRCD) and returns a handle on it.
	CreateQP(attr *QPInitAttr) (QPDriver, error)
	// OpenQP returns another handle on the domain's XRC_RECV QP num
	// (ibv_open_qp), failing with ErrNoEntry if the domain has none.
	// Each handle is destroyed on its own; the QP lives until the
	// last is. Asynchronous events of the QP go to every context that
	// holds a handle.
	OpenQP(num uint32) (QPDriver, error)
	// Close closes this open of the domain (ibv_close_xrcd); the verbs
	// layer has checked that none of its SRQs or QP handles is left.
	Close() error
}

// XRCSRQDriver is a provider's XRC SRQ.
type XRCSRQDriver interface {
	SRQDriver
	// Num returns the SRQ's number, what senders name in the XRCETH
	// (ibv_get_srq_num).
	Num() uint32
}

// The functions below give a provider its own side of the objects it
// made, such as the AH of a UD send request or the CQ a QP completes into.
// They are for providers; programs have no use for them. Each returns nil
// for a nil object.

// DeviceDriverOf returns the provider's side of d.
func DeviceDriverOf(d *Device) DeviceDriver {
	if d == nil {
		return nil
	}
	return d.drv
}

// ContextDriverOf returns the provider's side of c.
func ContextDriverOf(c *Context) ContextDriver {
	if c == nil {
		return nil
	}
	return c.drv
}

// PDDriverOf returns the provider's side of pd.
func PDDriverOf(pd *PD) PDDriver {
	if pd == nil {
		return nil
	}
	return pd.drv
}

// MRDriverOf returns the provider's side of mr.
func MRDriverOf(mr *MR) MRDriver {
	if mr == nil {
		return nil
	}
	return mr.drv
}

// MWDriverOf returns the provider's side of mw.
func MWDriverOf(mw *MW) MWDriver {
	if mw == nil {
		return nil
	}
	return mw.drv
}

// AHDriverOf returns the provider's side of ah.
func AHDriverOf(ah *AH) AHDriver {
	if ah == nil {
		return nil
	}
	return ah.drv
}

// SRQDriverOf returns the provider's side of s.
func SRQDriverOf(s *SRQ) SRQDriver {
	if s == nil {
		return nil
	}
	return s.drv
}

// QPDriverOf returns the provider's side of qp.
func QPDriverOf(qp *QP) QPDriver {
	if qp == nil {
		return nil
	}
	return qp.drv
}
