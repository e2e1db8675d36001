package pingpong

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/rdmago/rdmago/verbs"
)

const (
	recvWRID = 1          // PINGPONG_RECV_WRID
	sendWRID = 2          // PINGPONG_SEND_WRID
	fill     = 0x7b       // what rc, uc and ud fill their buffer with
	udQKey   = 0x11111111 // ibv_ud_pingpong's Q_Key
)

// ppContext holds one side's verbs objects (struct pingpong_context).
type ppContext struct {
	o         *Options
	ctx       *verbs.Context
	channel   *verbs.CompChannel
	pd        *verbs.PD
	mr        *verbs.MR
	cq        *verbs.CQ
	srq       *verbs.SRQ
	qps       []*verbs.QP
	ah        *verbs.AH
	index     map[uint32]int // QP number to index in qps
	mem       []byte         // the registered memory: the message sent, then the receive slots
	slotLen   int            // bytes per receive slot: the GRH area (UD) and a message
	off       int            // where a message starts in a receive slot: after the GRH area for UD
	free      []int          // SRQ: receive slots not posted
	fill      byte           // the byte the buffers are filled with
	sendFlags verbs.SendFlags
	pending   []int // per QP: the work requests it waits for before sending again
}

// Memory. The C programs send from and receive into one buffer. With one
// QP that is safe, as each side sends only after its receive completed,
// but an RC retransmission may read it while the peer's answer is being
// written, and the QPs of srq_pingpong write and read it at the same time:
// harmless in C, a data race in Go. So here the message sent has memory of
// its own, never written after setup, and receives land in slots: one for
// the one-QP programs, and for SRQ one per posted receive, each reposted
// only once its completion has been polled (RxDepth × Size bytes).
//
// The work request ID of a receive carries its slot above the low byte,
// which holds PINGPONG_RECV_WRID or PINGPONG_SEND_WRID as in C.
const slotShift = 8

// newContext is pp_init_ctx: it opens the device and creates the buffer,
// CQ, SRQ and QPs, and brings the QPs to INIT.
func newContext(dev *verbs.Device, o *Options) (*ppContext, error) {
	pp := &ppContext{o: o, fill: fill, sendFlags: verbs.SendSignaled, index: map[uint32]int{}}
	if o.Transport == UD {
		pp.off = verbs.GRHLen
	}
	if o.Transport == SRQ {
		pp.fill = 0 // ibv_srq_pingpong zeroes its buffer
	}
	pp.slotLen = pp.off + o.Size
	var err error
	if pp.ctx, err = dev.Open(); err != nil {
		return nil, fmt.Errorf("couldn't get context for %s: %w", dev.Name(), err)
	}
	fail := func(err error) (*ppContext, error) { pp.close(); return nil, err }
	// Check the sizes against the device before allocating anything: a
	// message above max_msg_sz would fail only when sent, after both
	// sides have allocated and connected.
	if err := checkLimits(pp.ctx, o); err != nil {
		return fail(err)
	}
	slots := 1
	if o.Transport == SRQ {
		slots = o.RxDepth
		for i := slots - 1; i >= 0; i-- {
			pp.free = append(pp.free, i)
		}
	}
	pp.mem = bytes.Repeat([]byte{pp.fill}, o.Size+slots*pp.slotLen)
	if o.Check {
		markPages(pp.mem[:o.Size])
	}
	if o.Transport == UD {
		port, err := pp.ctx.QueryPort(o.IBPort)
		if err != nil {
			return fail(fmt.Errorf("unable to query port info for port %d: %w", o.IBPort, err))
		}
		if mtu := port.ActiveMTU.Bytes(); o.Size > mtu {
			return fail(fmt.Errorf("requested size %d larger than port MTU (%d): a UD message is one packet", o.Size, mtu))
		}
	}
	if o.Events {
		if pp.channel, err = pp.ctx.CreateCompChannel(); err != nil {
			return fail(fmt.Errorf("couldn't create completion channel: %w", err))
		}
	}
	if pp.pd, err = pp.ctx.AllocPD(); err != nil {
		return fail(fmt.Errorf("couldn't allocate PD: %w", err))
	}
	if pp.mr, err = pp.pd.RegMR(pp.mem, verbs.AccessLocalWrite); err != nil {
		return fail(fmt.Errorf("couldn't register MR: %w", err))
	}
	n := o.numQP()
	if pp.cq, err = pp.ctx.CreateCQ(o.RxDepth+n, pp.channel, 0); err != nil {
		return fail(fmt.Errorf("couldn't create CQ: %w", err))
	}
	qpType := verbs.QPTRC
	switch o.Transport {
	case UC:
		qpType = verbs.QPTUC
	case UD:
		qpType = verbs.QPTUD
	case SRQ:
		pp.srq, err = pp.pd.CreateSRQ(&verbs.SRQInitAttr{Attr: verbs.SRQAttr{MaxWR: uint32(o.RxDepth), MaxSGE: 1}})
		if err != nil {
			return fail(fmt.Errorf("couldn't create SRQ: %w", err))
		}
	}
	for i := 0; i < n; i++ {
		init := &verbs.QPInitAttr{SendCQ: pp.cq, RecvCQ: pp.cq, SRQ: pp.srq, QPType: qpType,
			Cap: verbs.QPCap{MaxSendWR: 1, MaxSendSGE: 1}}
		if pp.srq == nil {
			init.Cap.MaxRecvWR, init.Cap.MaxRecvSGE = uint32(o.RxDepth), 1
		}
		qp, err := pp.pd.CreateQP(init)
		if err != nil {
			return fail(fmt.Errorf("couldn't create QP[%d]: %w", i, err))
		}
		pp.qps = append(pp.qps, qp)
		pp.index[qp.Num()] = i
		if _, got, err := qp.Query(); err == nil && int(got.Cap.MaxInlineData) >= o.Size {
			pp.sendFlags |= verbs.SendInline
		}
	}
	for i, qp := range pp.qps {
		attr := verbs.QPAttr{QPState: verbs.QPSInit, PortNum: o.IBPort}
		mask := verbs.QPAttrState | verbs.QPAttrPKeyIndex | verbs.QPAttrPort
		if o.Transport == UD {
			attr.QKey = udQKey
			mask |= verbs.QPAttrQKey
		} else {
			mask |= verbs.QPAttrAccessFlags
		}
		if err := qp.Modify(&attr, mask); err != nil {
			return fail(fmt.Errorf("failed to modify QP[%d] to INIT: %w", i, err))
		}
	}
	pp.pending = make([]int, n)
	return pp, nil
}

func (pp *ppContext) close() {
	for _, qp := range pp.qps {
		qp.Destroy()
	}
	if pp.srq != nil {
		pp.srq.Destroy()
	}
	if pp.cq != nil {
		pp.cq.Destroy()
	}
	if pp.mr != nil {
		pp.mr.Dereg()
	}
	if pp.ah != nil {
		pp.ah.Destroy()
	}
	if pp.pd != nil {
		pp.pd.Dealloc()
	}
	if pp.channel != nil {
		pp.channel.Close()
	}
	if pp.ctx != nil {
		pp.ctx.Close()
	}
}

// global reports whether an address needs a GRH: whether the GID's
// interface ID is set, the test the C programs make.
func global(gid verbs.GID) bool {
	return binary64(gid[8:]) != 0
}

// route is the address vector towards rem (ah_attr of pp_connect_ctx).
func (pp *ppContext) route(rem *dest) verbs.AHAttr {
	o := pp.o
	ah := verbs.AHAttr{DLID: uint16(rem.lid), SL: o.SL, PortNum: o.IBPort}
	if global(rem.gid) {
		ah.IsGlobal = true
		ah.GRH = verbs.GlobalRoute{HopLimit: 1, DGID: rem.gid, SGIDIndex: uint8(max(o.GIDIndex, 0))}
	}
	return ah
}

// connect is pp_connect_ctx: it brings each QP to RTS towards the peer's
// QP of the same index (for UD: to RTS, and makes the address handle).
func (pp *ppContext) connect(my, rem []dest) error {
	o := pp.o
	if o.Transport == UD {
		qp := pp.qps[0]
		if err := qp.Modify(&verbs.QPAttr{QPState: verbs.QPSRTR}, verbs.QPAttrState); err != nil {
			return fmt.Errorf("failed to modify QP to RTR: %w", err)
		}
		if err := qp.Modify(&verbs.QPAttr{QPState: verbs.QPSRTS, SQPSN: my[0].psn}, verbs.QPAttrState|verbs.QPAttrSQPSN); err != nil {
			return fmt.Errorf("failed to modify QP to RTS: %w", err)
		}
		ah := pp.route(&rem[0])
		var err error
		if pp.ah, err = pp.pd.CreateAH(&ah); err != nil {
			return fmt.Errorf("failed to create AH: %w", err)
		}
		return nil
	}
	for i, qp := range pp.qps {
		ah := pp.route(&rem[i])
		attr := verbs.QPAttr{QPState: verbs.QPSRTR, PathMTU: o.MTU, DestQPNum: rem[i].qpn, RQPSN: rem[i].psn, AHAttr: ah}
		mask := verbs.QPAttrState | verbs.QPAttrAV | verbs.QPAttrPathMTU | verbs.QPAttrDestQPN | verbs.QPAttrRQPSN
		if o.Transport != UC {
			attr.MaxDestRdAtomic, attr.MinRNRTimer = 1, 12
			mask |= verbs.QPAttrMaxDestRdAtomic | verbs.QPAttrMinRNRTimer
		}
		if err := qp.Modify(&attr, mask); err != nil {
			return fmt.Errorf("failed to modify QP[%d] to RTR: %w", i, err)
		}
		attr = verbs.QPAttr{QPState: verbs.QPSRTS, SQPSN: my[i].psn}
		mask = verbs.QPAttrState | verbs.QPAttrSQPSN
		if o.Transport != UC {
			attr.Timeout, attr.RetryCnt, attr.RNRRetry, attr.MaxRdAtomic = 14, 7, 7, 1
			mask |= verbs.QPAttrTimeout | verbs.QPAttrRetryCnt | verbs.QPAttrRNRRetry | verbs.QPAttrMaxQPRdAtomic
		}
		if err := qp.Modify(&attr, mask); err != nil {
			return fmt.Errorf("failed to modify QP[%d] to RTS: %w", i, err)
		}
	}
	return nil
}

func binary64(b []byte) uint64 {
	var v uint64
	for _, x := range b[:8] {
		v = v<<8 | uint64(x)
	}
	return v
}

// postRecv posts up to n receives (of a whole slot, the GRH area
// included) to the QP or the SRQ and returns how many it posted.
func (pp *ppContext) postRecv(n int) int {
	for i := 0; i < n; i++ {
		slot := 0
		if pp.srq != nil {
			if len(pp.free) == 0 {
				return i
			}
			slot = pp.free[len(pp.free)-1]
		}
		wr := []verbs.RecvWR{{WRID: uint64(slot)<<slotShift | recvWRID,
			SGList: []verbs.SGE{pp.mr.SGE(pp.o.Size+slot*pp.slotLen, pp.slotLen)}}}
		var err error
		if pp.srq != nil {
			err = pp.srq.PostRecv(wr)
		} else {
			err = pp.qps[0].PostRecv(wr)
		}
		if err != nil {
			return i
		}
		if pp.srq != nil {
			pp.free = pp.free[:len(pp.free)-1]
		}
	}
	return n
}

// received returns the message a receive completion delivered, and frees
// its slot for reposting.
func (pp *ppContext) received(wc *verbs.WC) ([]byte, error) {
	slot := int(wc.WRID >> slotShift)
	n := int(wc.ByteLen)
	if slot >= (len(pp.mem)-pp.o.Size)/pp.slotLen || n < pp.off || n > pp.slotLen {
		return nil, fmt.Errorf("received %d bytes, expected %d", n-pp.off, pp.o.Size)
	}
	if pp.srq != nil {
		pp.free = append(pp.free, slot)
	}
	start := pp.o.Size + slot*pp.slotLen
	return pp.mem[start+pp.off : start+n], nil
}

// postSend sends the message on QP i.
func (pp *ppContext) postSend(i int, rem []dest) error {
	wr := verbs.SendWR{WRID: sendWRID, Opcode: verbs.WRSend, SendFlags: pp.sendFlags,
		SGList: []verbs.SGE{pp.mr.SGE(0, pp.o.Size)}}
	if pp.o.Transport == UD {
		wr.AH, wr.RemoteQPN, wr.RemoteQKey = pp.ah, rem[0].qpn, udQKey
	}
	if err := pp.qps[i].PostSend([]verbs.SendWR{wr}); err != nil {
		return fmt.Errorf("couldn't post send: %w", err)
	}
	return nil
}

// prepare posts RxDepth receives and, with Events, arms the CQ.
func (pp *ppContext) prepare() (int, error) {
	routs := pp.postRecv(pp.o.RxDepth)
	if routs < pp.o.RxDepth {
		return 0, fmt.Errorf("couldn't post receive (%d)", routs)
	}
	if pp.o.Events {
		if err := pp.cq.ReqNotify(false); err != nil {
			return 0, fmt.Errorf("couldn't request CQ notification: %w", err)
		}
	}
	return routs, nil
}

// loop bounces the messages: the main loop of the C programs. The client
// starts by sending on every QP; after that a QP sends again once both its
// last send and a receive on it have completed, until Iters sends have
// completed in all. Receives are topped up to RxDepth when no more than
// one per QP is left.
func (pp *ppContext) loop(ctx context.Context, routs int, rem []dest) (time.Duration, error) {
	o := pp.o
	n := len(pp.qps)
	for i := range pp.pending {
		pp.pending[i] = recvWRID
	}
	if o.Server != "" {
		for i := range pp.qps {
			if err := pp.postSend(i, rem); err != nil {
				return 0, err
			}
			pp.pending[i] |= sendWRID
		}
	}
	start := time.Now()
	rcnt, scnt, events := 0, 0, 0
	wcs := make([]verbs.WC, 2)
	if o.Transport == SRQ {
		wcs = make([]verbs.WC, n+o.RxDepth)
	}
	for rcnt < o.Iters || scnt < o.Iters {
		if o.Events {
			wctx, cancel := pp.idleContext(ctx)
			cq, err := pp.channel.GetCQEvent(wctx)
			cancel()
			if err != nil {
				return 0, pp.idleError(ctx, err, rcnt, scnt, "failed to get cq_event")
			}
			events++
			if cq != pp.cq {
				return 0, errors.New("CQ event for unknown CQ")
			}
			if err := pp.cq.ReqNotify(false); err != nil {
				return 0, fmt.Errorf("couldn't request CQ notification: %w", err)
			}
		}
		ne, err := pp.cq.Poll(wcs)
		if err != nil {
			return 0, fmt.Errorf("poll CQ failed: %w", err)
		}
		if ne == 0 && !o.Events {
			wctx, cancel := pp.idleContext(ctx)
			err := pp.cq.Wait(wctx)
			cancel()
			if err != nil {
				return 0, pp.idleError(ctx, err, rcnt, scnt, "waiting for completions")
			}
			continue
		}
		for _, wc := range wcs[:ne] {
			if wc.Status != verbs.WCSuccess {
				return 0, fmt.Errorf("failed status %s (%d) for wr_id %d", wc.Status, wc.Status, wc.WRID&(1<<slotShift-1))
			}
			i, ok := pp.index[wc.QPNum]
			if !ok {
				return 0, fmt.Errorf("couldn't find QPN %06x", wc.QPNum)
			}
			kind := int(wc.WRID & (1<<slotShift - 1))
			switch kind {
			case sendWRID:
				scnt++
			case recvWRID:
				msg, err := pp.received(&wc)
				if err != nil {
					return 0, err
				}
				if o.Check {
					if err := checkFilled(msg, o.Size, pp.fill); err != nil {
						return 0, err
					}
				}
				routs--
				if routs <= n {
					routs += pp.postRecv(o.RxDepth - routs)
					if routs < o.RxDepth {
						return 0, fmt.Errorf("couldn't post receive (%d)", routs)
					}
				}
				rcnt++
			default:
				return 0, fmt.Errorf("completion for unknown wr_id %d", wc.WRID)
			}
			pp.pending[i] &^= kind
			if scnt < o.Iters && pp.pending[i] == 0 {
				if err := pp.postSend(i, rem); err != nil {
					return 0, err
				}
				pp.pending[i] = recvWRID | sendWRID
			}
		}
	}
	elapsed := time.Since(start)
	if o.Events {
		pp.cq.AckEvents(events)
	}
	return elapsed, nil
}

// checkLimits checks the run's sizes against what the device reports
// (ibv_query_device, ibv_query_port), naming the limit a size exceeds.
func checkLimits(ctx *verbs.Context, o *Options) error {
	da, err := ctx.QueryDevice()
	if err != nil {
		return fmt.Errorf("couldn't query device: %w", err)
	}
	pa, err := ctx.QueryPort(o.IBPort)
	if err != nil {
		return fmt.Errorf("unable to query port info for port %d: %w", o.IBPort, err)
	}
	switch {
	case pa.MaxMsgSz > 0 && uint64(o.Size) > uint64(pa.MaxMsgSz):
		return fmt.Errorf("message size %d above the port's max_msg_sz %d", o.Size, pa.MaxMsgSz)
	case da.MaxQPWR > 0 && o.RxDepth > da.MaxQPWR:
		return fmt.Errorf("rx depth %d above the device's max_qp_wr %d", o.RxDepth, da.MaxQPWR)
	case o.Transport == SRQ && da.MaxSRQWR > 0 && o.RxDepth > da.MaxSRQWR:
		return fmt.Errorf("rx depth %d above the device's max_srq_wr %d", o.RxDepth, da.MaxSRQWR)
	case da.MaxCQE > 0 && o.RxDepth+o.numQP() > da.MaxCQE:
		return fmt.Errorf("rx depth %d and %d QPs need %d CQ entries, above the device's max_cqe %d", o.RxDepth, o.numQP(), o.RxDepth+o.numQP(), da.MaxCQE)
	}
	if mem := uint64(o.Size) * uint64(1+max(1, o.RxDepth)); o.Transport == SRQ && mem > uint64(da.MaxMRSize) {
		return fmt.Errorf("%d receive buffers of %d bytes exceed the device's max_mr_size %d", o.RxDepth, o.Size, da.MaxMRSize)
	}
	return nil
}

// idleContext bounds one wait for completions by Options.Idle.
func (pp *ppContext) idleContext(ctx context.Context) (context.Context, context.CancelFunc) {
	if pp.o.Idle <= 0 {
		return context.WithCancel(ctx)
	}
	return context.WithTimeout(ctx, pp.o.Idle)
}

// idleError explains a wait that ended without a completion: the run was
// interrupted, or the peer has stopped answering (it failed, was killed,
// or its host went away), which the C programs would wait on for ever.
func (pp *ppContext) idleError(ctx context.Context, err error, rcnt, scnt int, what string) error {
	if ctx.Err() == nil && errors.Is(err, context.DeadlineExceeded) {
		return fmt.Errorf("no completion for %v after %d of %d messages received and %d sent: the peer has stopped answering", pp.o.Idle, rcnt, pp.o.Iters, scnt)
	}
	return fmt.Errorf("%s: %w", what, err)
}
