package perftest

import (
	"context"
	"fmt"
	"math/rand/v2"
	"runtime"
	"time"

	"github.com/rdmago/rdmago/internal/tool"
	"github.com/rdmago/rdmago/internal/yield"
	"github.com/rdmago/rdmago/rdmacm"
	"github.com/rdmago/rdmago/verbs"
)

// A test's verbs objects: the device, PD, buffers, CQs and QPs, and how
// they are connected and polled.

// res are a run's verbs objects: one RC QP, its CQ and a buffer of two
// halves, the local half the source of sends and writes (and the target
// of reads), the remote half what the peer writes into or reads.
type res struct {
	o     *Options
	ctx   *verbs.Context
	pd    *verbs.PD
	cq    *verbs.CQ
	spins int // empty polls in a row, without -e
	// idleSince is when the polls started finding nothing; past
	// idleBeforeYield, yielding is set.
	idleSince time.Time
	yielding  bool
	qps       []*verbs.QP // -q of them; the latency tests have one
	qp        *verbs.QP   // qps[0]
	mr        *verbs.MR
	buf       []byte
	half      int
	port      verbs.PortAttr
	inline    int
	my        []dest // per QP
	rem       []dest
	mtu       verbs.MTU
	wc        []verbs.WC
	ch        *verbs.CompChannel // with -e
	ahs       []*verbs.AH        // UD: per QP, the peer's
	cmIDs     []*rdmacm.ID       // -R: the IDs that connected the QPs
	gid       verbs.GID
	// rxPosted counts the receives outstanding, per QP.
	rxPosted []int
	// sges holds the SGEs of the send work requests being built, one per
	// request of a list (sendWR), and one, rwr and rsge the single send and
	// receive being posted: the verbs copy what they keep, so these are
	// reused, and posting allocates nothing.
	sges []verbs.SGE
	// drives says the program's polls drive the device (manual progress
	// on a software device).
	drives  bool
	one     [1]verbs.SendWR
	rwr     [1]verbs.RecvWR
	rsge    [1]verbs.SGE
	qpIndex map[uint32]int // QP number → index
}

// checkDevice opens the device and checks the port and the GID index
// the run will use, as perftest does before it connects; with -R and no
// -d the device is the one rdma_cm reaches the peer by, known only then.
func checkDevice(o *Options) error {
	if o.RdmaCM && o.Device == "" {
		return nil
	}
	dev, err := tool.Device(o.Device)
	if err != nil {
		return err
	}
	ctx, err := dev.Open()
	if err != nil {
		return fmt.Errorf("couldn't get context for the device: %w", err)
	}
	defer ctx.Close()
	port, err := ctx.QueryPort(o.IBPort)
	if err != nil {
		return fmt.Errorf("unable to query port %d of %s: %w", o.IBPort, dev.Name(), err)
	}
	if port.State != verbs.PortActive {
		return fmt.Errorf("port %d of %s is not active", o.IBPort, dev.Name())
	}
	if o.GIDIndex >= 0 {
		if _, err := ctx.QueryGID(o.IBPort, o.GIDIndex); err != nil {
			return fmt.Errorf("couldn't read GID index %d of %s port %d: %w", o.GIDIndex, dev.Name(), o.IBPort, err)
		}
	}
	return nil
}

func (r *res) close() {
	for _, ah := range r.ahs {
		ah.Destroy()
	}
	for _, id := range r.cmIDs {
		id.Disconnect()
		id.DestroyQP()
		id.Destroy()
	}
	for _, qp := range r.qps[len(r.cmIDs):] {
		qp.Destroy()
	}
	if r.cq != nil {
		r.cq.Destroy()
	}
	if r.ch != nil {
		r.ch.Close()
	}
	if r.mr != nil {
		r.mr.Dereg()
	}
	if r.pd != nil {
		r.pd.Dealloc()
	}
	if r.ctx != nil {
		r.ctx.Close()
	}
}

// setup opens the device and makes the QP (in INIT), the CQ and the
// buffer.
func setup(o *Options) (*res, error) {
	r := &res{o: o}
	dev, err := tool.Device(o.Device)
	if err != nil {
		return nil, err
	}
	if o.Device == "" {
		o.Device = dev.Name()
	}
	if r.ctx, err = dev.Open(); err != nil {
		return nil, fmt.Errorf("couldn't get context for the device: %w", err)
	}
	fail := func(err error) (*res, error) {
		r.close()
		return nil, err
	}
	if r.port, err = r.ctx.QueryPort(o.IBPort); err != nil {
		return fail(fmt.Errorf("unable to query port %d: %w", o.IBPort, err))
	}
	if r.port.State != verbs.PortActive {
		return fail(fmt.Errorf("port %d is not active", o.IBPort))
	}
	if o.GIDIndex < 0 {
		o.GIDIndex = 0
		for i := 0; i < r.port.GIDTblLen; i++ {
			if g, err := r.ctx.QueryGID(o.IBPort, i); err == nil && g.Addr().Is4() {
				o.GIDIndex = i
				break
			}
		}
	}
	gid, err := r.ctx.QueryGID(o.IBPort, o.GIDIndex)
	if err != nil {
		return fail(fmt.Errorf("couldn't read GID index %d: %w", o.GIDIndex, err))
	}
	if o.MTU == 0 {
		o.MTU = r.port.ActiveMTU
	}
	r.mtu = min(o.MTU, r.port.ActiveMTU)
	attr, err := r.ctx.QueryDevice()
	if err != nil {
		return fail(err)
	}
	if (o.Tool.Verb == Read || o.Tool.Verb == Atomic) && o.OutReads == 0 {
		o.OutReads = attr.MaxQPRdAtom
	}
	if o.Inline < 0 {
		o.Inline = 0
		switch {
		case o.Tool.Lat && o.Tool.Verb == Send && o.Conn == UD:
			o.Inline = min(188, attr.MaxInlineData) // perftest's defaults for latency
		case o.Tool.Lat && o.Tool.Verb == Send:
			o.Inline = min(236, attr.MaxInlineData)
		case o.Tool.Lat && o.Tool.Verb == Write:
			o.Inline = min(220, attr.MaxInlineData)
		}
	}
	if r.pd, err = r.ctx.AllocPD(); err != nil {
		return fail(fmt.Errorf("couldn't allocate PD: %w", err))
	}
	// Each half is at least cycleBuffer long: perftest's bandwidth tests
	// move their remote address through the peer's cycle buffer (its page
	// size, exchanged in the system data) as they post.
	r.half = max(o.maxSize(), cycleBuffer)
	n := o.NumQPs
	if total := o.bufferSize(); total > maxBuffer || uint64(total) > attr.MaxMRSize {
		return fail(fmt.Errorf("couldn't allocate work buffer: %d QPs of 2 × %d bytes need %d bytes, over the %d allowed (use a smaller -q or -s, or no -a)",
			n, r.half, total, min(maxBuffer, attr.MaxMRSize)))
	}
	r.buf = make([]byte, 2*n*r.half) // n local halves, then n targets
	if r.mr, err = r.pd.RegMR(r.buf, verbs.AccessLocalWrite|verbs.AccessRemoteWrite|verbs.AccessRemoteRead|verbs.AccessRemoteAtomic); err != nil {
		return fail(fmt.Errorf("couldn't allocate MR: %w", err))
	}
	depth := n * (o.TxDepth + o.RxDepth)
	if o.Events {
		if r.ch, err = r.ctx.CreateCompChannel(); err != nil {
			return fail(fmt.Errorf("couldn't create completion channel: %w", err))
		}
	} else if err = r.ctx.SetProgress(verbs.ProgressManual); err != nil {
		// Busy polling drives the software device (perftest's default).
		return fail(fmt.Errorf("couldn't set manual progress: %w", err))
	} else {
		// A hardware device moves the data itself, and ignores it.
		_, r.drives = verbs.ContextDriverOf(r.ctx).(verbs.ProgressDriver)
	}
	r.sges = make([]verbs.SGE, max(o.TxDepth, o.PostList))
	if r.cq, err = r.ctx.CreateCQ(depth+1, r.ch, 0); err != nil {
		return fail(fmt.Errorf("couldn't create CQ: %w", err))
	}
	r.qpIndex = map[uint32]int{}
	r.rem = make([]dest, n)
	r.rxPosted = make([]int, n)
	r.wc = make([]verbs.WC, 64)
	r.gid = gid
	if o.RdmaCM {
		return r, nil // rdma_cm makes the QPs (cmConnectQPs)
	}
	for i := range n {
		init := r.qpInit()
		qp, err := r.pd.CreateQP(&init)
		if err != nil {
			return fail(fmt.Errorf("couldn't create QP[%d]: %w", i, err))
		}
		qa := verbs.QPAttr{QPState: verbs.QPSInit, PortNum: o.IBPort, QPAccessFlags: r.access(), QKey: udQKey}
		mask := verbs.QPAttrState | verbs.QPAttrPKeyIndex | verbs.QPAttrPort | verbs.QPAttrAccessFlags
		if o.Conn == UD {
			mask = verbs.QPAttrState | verbs.QPAttrPKeyIndex | verbs.QPAttrPort | verbs.QPAttrQKey
		}
		if err := qp.Modify(&qa, mask); err != nil {
			qp.Destroy()
			return fail(fmt.Errorf("failed to modify QP[%d] to INIT: %w", i, err))
		}
		r.addQP(qp, int(init.Cap.MaxInlineData))
	}
	return r, nil
}

// qpInit is the attributes of the test's QPs.
func (r *res) qpInit() verbs.QPInitAttr {
	o := r.o
	qpType := map[Conn]verbs.QPType{RC: verbs.QPTRC, UC: verbs.QPTUC, UD: verbs.QPTUD}[o.Conn]
	return verbs.QPInitAttr{SendCQ: r.cq, RecvCQ: r.cq, QPType: qpType, Cap: verbs.QPCap{
		MaxSendWR: uint32(o.TxDepth + 8), MaxRecvWR: uint32(max(o.RxDepth, 1)), MaxSendSGE: 1, MaxRecvSGE: 1, MaxInlineData: uint32(o.Inline)}}
}

// access is what the test's QPs let the peer do.
func (r *res) access() verbs.AccessFlags {
	if r.o.Conn == UC {
		return verbs.AccessLocalWrite | verbs.AccessRemoteWrite // all a UC QP may grant
	}
	return verbs.AccessLocalWrite | verbs.AccessRemoteWrite | verbs.AccessRemoteRead | verbs.AccessRemoteAtomic
}

// addQP takes qp (in INIT, or connected by rdma_cm) as the next of the
// test's QPs, whose inline data the device limits to inline bytes.
func (r *res) addQP(qp *verbs.QP, inline int) {
	o := r.o
	i := len(r.qps)
	n := o.NumQPs
	r.qps = append(r.qps, qp)
	r.qp = r.qps[0]
	if inline < o.Inline {
		o.Inline = inline
	}
	r.inline = o.Inline
	out := 1
	if o.Tool.Verb == Read || o.Tool.Verb == Atomic {
		out = o.OutReads
	}
	r.qpIndex[qp.Num()] = i
	r.my = append(r.my, dest{lid: r.port.LID, outReads: out, qpn: qp.Num(), psn: rand.Uint32() & 0xffffff, rkey: r.mr.RKey(),
		vaddr: r.mr.Addr() + uint64((n+i)*r.half), gid: r.gid, gidIndex: o.GIDIndex})
}

// maxBuffer bounds a run's buffer (2 × -q × the largest size): -q 1024
// with -a would ask for 16 GiB, which an allocation cannot refuse but
// the process's memory may not hold.
const maxBuffer = 1 << 30

// udQKey is the Q_Key of perftest's UD QPs (DEF_QKEY).
const udQKey = 0x11111111

// connect brings each QP to RTS towards the peer's of the same index
// (ctx_connect); a UD QP gets an address handle for the peer's instead.
func (r *res) connect() error {
	o := r.o
	for i, qp := range r.qps {
		my, rem := &r.my[i], &r.rem[i]
		ah := verbs.AHAttr{DLID: rem.lid, PortNum: o.IBPort, IsGlobal: true,
			GRH: verbs.GlobalRoute{DGID: rem.gid, SGIDIndex: uint8(o.GIDIndex), HopLimit: 0xff}}
		if o.Conn == UD {
			if err := qp.Modify(&verbs.QPAttr{QPState: verbs.QPSRTR}, verbs.QPAttrState); err != nil {
				return fmt.Errorf("failed to modify QP[%d] to RTR: %w", i, err)
			}
			if err := qp.Modify(&verbs.QPAttr{QPState: verbs.QPSRTS, SQPSN: my.psn}, verbs.QPAttrState|verbs.QPAttrSQPSN); err != nil {
				return fmt.Errorf("failed to modify QP[%d] to RTS: %w", i, err)
			}
			a, err := r.pd.CreateAH(&ah)
			if err != nil {
				return fmt.Errorf("failed to create AH: %w", err)
			}
			r.ahs = append(r.ahs, a)
			continue
		}
		attr := verbs.QPAttr{QPState: verbs.QPSRTR, PathMTU: r.mtu, DestQPNum: rem.qpn, RQPSN: rem.psn, AHAttr: ah,
			MaxDestRdAtomic: uint8(max(my.outReads, 1)), MinRNRTimer: 12}
		mask := verbs.QPAttrState | verbs.QPAttrAV | verbs.QPAttrPathMTU | verbs.QPAttrDestQPN | verbs.QPAttrRQPSN
		if o.Conn == RC {
			mask |= verbs.QPAttrMaxDestRdAtomic | verbs.QPAttrMinRNRTimer
		}
		if err := qp.Modify(&attr, mask); err != nil {
			return fmt.Errorf("failed to modify QP[%d] to RTR: %w", i, err)
		}
		attr = verbs.QPAttr{QPState: verbs.QPSRTS, SQPSN: my.psn, Timeout: o.QPTimeout, RetryCnt: 7, RNRRetry: 7,
			MaxRdAtomic: uint8(max(min(my.outReads, rem.outReads), 1))}
		mask = verbs.QPAttrState | verbs.QPAttrSQPSN
		if o.Conn == RC {
			mask |= verbs.QPAttrTimeout | verbs.QPAttrRetryCnt | verbs.QPAttrRNRRetry | verbs.QPAttrMaxQPRdAtomic
		}
		if err := qp.Modify(&attr, mask); err != nil {
			return fmt.Errorf("failed to modify QP[%d] to RTS: %w", i, err)
		}
	}
	return nil
}

// poll takes completions, waiting (see waitCQ) until at least one is there.
func (r *res) poll(ctx context.Context) ([]verbs.WC, error) {
	for {
		n, err := r.cq.Poll(r.wc)
		if err != nil {
			return nil, fmt.Errorf("poll CQ failed: %w", err)
		}
		if n > 0 {
			r.spins, r.yielding = 0, false
			for _, wc := range r.wc[:n] {
				if wc.Status != verbs.WCSuccess {
					return nil, fmt.Errorf("completion with error: %s (wr_id %d, vendor error %#x)", wc.Status, wc.WRID, wc.VendorErr)
				}
			}
			return r.wc[:n], nil
		}
		if err := r.waitCQ(ctx); err != nil {
			return nil, fmt.Errorf("waiting for completions: %w", err)
		}
	}
}

// waitCQ waits until the CQ may hold a completion: with -e on its
// completion channel (ibv_req_notify_cq, ibv_get_cq_event); else, as
// perftest does, not at all: the caller polls again at once, and under
// manual progress each empty poll drives the software device. Now and then
// it lets other threads run (see yield.CPU).
func (r *res) waitCQ(ctx context.Context) error {
	if r.ch == nil {
		if err := ctx.Err(); err != nil {
			return err
		}
		// Polls that go on finding nothing (a peer that is slow to
		// answer, packets forwarded by the process sharing the device's
		// address) yield the CPU as well, which the threads that would
		// deliver may need; a poll that is answered soon never does,
		// since yielding slows every round trip.
		r.spins++
		switch {
		case r.spins == 1:
			r.idleSince = time.Now()
		case r.yielding:
			yield.CPU()
		case r.spins%64 == 0:
			r.yielding = time.Since(r.idleSince) > idleBeforeYield
			runtime.Gosched()
		}
		return nil
	}
	if err := r.cq.ReqNotify(false); err != nil {
		return fmt.Errorf("couldn't request CQ notification: %w", err)
	}
	if r.cq.Len() > 0 {
		return nil // it came before the arming
	}
	if _, err := r.ch.GetCQEvent(ctx); err != nil {
		return fmt.Errorf("failed to get cq_event: %w", err)
	}
	r.cq.AckEvents(1)
	return nil
}
