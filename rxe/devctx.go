package rxe

import (
	"fmt"
	"sync"
	"sync/atomic"

	"github.com/rdmago/rdmago/rxe/wire"
	"github.com/rdmago/rdmago/verbs"
	"github.com/rdmago/rdmago/verbs/swcq"
)

// A device context (ibv_context): what ibv_open_device returns, the
// queries, CQs and PDs made on it, and its Close.

// devctx implements verbs.ContextDriver.
type devctx struct {
	dev    *device
	hw     *hw
	events verbs.EventSink

	manual atomic.Bool // verbs.ProgressManual: posts and polls drive the device

	// pollProgress and pollWait as func values, made once: every CQ of
	// the context gets them (hookCQ).
	onEmptyPoll, onWait func()

	mu        sync.Mutex
	closed    bool
	xrcdOpens []*xrcdOpen // XRC domains opened here and not closed
}

// SetProgress implements verbs.ProgressDriver.
func (c *devctx) SetProgress(p verbs.Progress) error {
	c.manual.Store(p == verbs.ProgressManual)
	return nil
}

// QueryDevice implements verbs.ContextDriver (ibv_query_device).
func (c *devctx) QueryDevice() (verbs.DeviceAttr, error) {
	return verbs.DeviceAttr{
		FWVer:                 "0.0.0",
		NodeGUID:              c.dev.guid,
		SysImageGUID:          c.dev.guid,
		MaxMRSize:             maxMRSize,
		PageSizeCap:           0xfffff000,
		VendorID:              vendorID,
		HWVer:                 0,
		MaxQP:                 maxQP,
		MaxQPWR:               maxQPWR,
		DeviceCapFlags:        verbs.DeviceBadPKeyCntr | verbs.DeviceBadQKeyCntr | verbs.DeviceChangePhyPort | verbs.DeviceUDAVPortEnforce | verbs.DevicePortActiveEvent | verbs.DeviceSysImageGUID | verbs.DeviceRCRNRNAKGen | verbs.DeviceSRQResize | verbs.DeviceMemWindow | verbs.DeviceMemWindowType2B | verbs.DeviceMemMgtExtensions | verbs.DeviceXRC,
		MaxSGE:                maxSGE,
		MaxSGERD:              maxSGE,
		MaxCQ:                 maxCQ,
		MaxCQE:                maxCQE,
		MaxMR:                 maxMR,
		MaxPD:                 maxPD,
		MaxQPRdAtom:           maxRdAtomic,
		MaxResRdAtom:          0x3f000, // RXE_MAX_RES_RD_ATOM
		MaxQPInitRdAtom:       maxRdAtomic,
		AtomicCap:             verbs.AtomicHCA,
		MaxMW:                 maxMR,
		MaxMcastGrp:           8192,
		MaxMcastQPAttach:      56,
		MaxTotalMcastQPAttach: 0x70000,
		MaxAH:                 0x7fff,
		MaxSRQ:                maxSRQ,
		MaxSRQWR:              maxSRQWR,
		MaxSRQSGE:             maxSGE,
		MaxPKeys:              maxPKeys,
		LocalCADelayAck:       15,
		PhysPortCnt:           1,
		MaxInlineData:         maxInline,
	}, nil
}

// QueryPort implements verbs.ContextDriver (ibv_query_port).
func (c *devctx) QueryPort(port uint8) (verbs.PortAttr, error) {
	if port != 1 {
		return verbs.PortAttr{}, verbs.Errorf("ibv_query_port", verbs.ErrInvalidArgument, fmt.Sprintf("port %d: rxe devices have port 1 only", port))
	}
	return verbs.PortAttr{
		State:         verbs.PortActive,
		MaxMTU:        verbs.MTU4096,
		ActiveMTU:     c.hw.mtu,
		GIDTblLen:     len(c.hw.gids),
		PortCapFlags:  0x00010000 | 0x04000000, // IBV_PORT_CM_SUP, IBV_PORT_IP_BASED_GIDS
		MaxMsgSz:      maxMsgSize,
		PKeyTblLen:    1,
		MaxVLNum:      1,
		ActiveWidth:   2,    // 4X
		ActiveSpeed:   0x20, // EDR, what rxe reports for fast links
		PhysState:     5,    // LinkUp
		LinkLayer:     verbs.LinkLayerEthernet,
		SubnetTimeout: 0,
	}, nil
}

// QueryGID implements verbs.ContextDriver (ibv_query_gid).
func (c *devctx) QueryGID(port uint8, index int) (verbs.GID, error) {
	if port != 1 || index < 0 || index >= len(c.hw.gids) {
		return verbs.GID{}, verbs.Errorf("ibv_query_gid", verbs.ErrInvalidArgument, fmt.Sprintf("port %d GID index %d: table has %d entries", port, index, len(c.hw.gids)))
	}
	return c.hw.gids[index], nil
}

// QueryPKey implements verbs.ContextDriver (ibv_query_pkey).
func (c *devctx) QueryPKey(port uint8, index int) (uint16, error) {
	if port != 1 || index != 0 {
		return 0, verbs.Errorf("ibv_query_pkey", verbs.ErrInvalidArgument, fmt.Sprintf("port %d P_Key index %d", port, index))
	}
	return wire.DefaultPKey, nil
}

// CreateCQ implements verbs.ContextDriver (ibv_create_cq): a software CQ
// the device's QPs push completions into.
func (c *devctx) CreateCQ(cqe int, notify func()) (verbs.CQDriver, error) {
	return c.hookCQ(swcq.New(cqe, notify)), nil
}

// hookCQ gives a CQ of the context what its empty polls and its waits do
// (pollProgress, pollWait).
func (c *devctx) hookCQ(cq *swcq.CQ) *swcq.CQ {
	cq.SetOnEmptyPoll(c.onEmptyPoll)
	cq.SetOnWait(c.onWait)
	return cq
}

// pollProgress is what an empty CQ poll does: under manual progress, it
// takes the packets waiting on the network and runs their QPs.
func (c *devctx) pollProgress() {
	if c.manual.Load() {
		c.hw.progress()
	}
}

// pollWait is what a CQ wait (or arming) does: under manual progress,
// it tells the receive loops that the pollers stopped, so that they read
// the network again without waiting out standAside.
func (c *devctx) pollWait() {
	if c.manual.Load() {
		c.hw.pollersWait()
	}
}

// AllocPD implements verbs.ContextDriver (ibv_alloc_pd).
func (c *devctx) AllocPD() (verbs.PDDriver, error) {
	return &pd{ctx: c}, nil
}

// Close implements verbs.ContextDriver (ibv_close_device).
func (c *devctx) Close() error {
	c.mu.Lock()
	if c.closed {
		c.mu.Unlock()
		return nil
	}
	c.closed = true
	c.mu.Unlock()
	// Destroy this context's QPs and release its memory regions and
	// windows, as the kernel does when a process closes its verbs file
	// (ibv_close_device succeeds whatever is still allocated), then let
	// go of the hardware. A peer's RDMA to a released region fails with
	// a remote access error.
	orphans := c.closeXRC() // XRC_RECV QPs are the handles' (see xrc.go)
	var mine []*qp
	c.hw.mu.Lock()
	for _, q := range c.hw.qps {
		if q.ctx == c && q.typ != verbs.QPTXRCRecv {
			mine = append(mine, q)
		}
	}
	for k, m := range c.hw.keys {
		if m.pd.ctx == c {
			m.valid.Store(false)
			delete(c.hw.keys, k)
			delete(c.hw.keyIdx, k>>8)
		}
	}
	for i, w := range c.hw.mws {
		if w.pd.ctx == c {
			w.dead.Store(true)
			w.unbind()
			delete(c.hw.mws, i)
		}
	}
	c.hw.mu.Unlock()
	for _, q := range mine {
		q.Destroy()
	}
	for _, q := range orphans {
		q.teardown()
	}
	c.dev.release()
	return nil
}
