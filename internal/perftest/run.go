package perftest

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"runtime"
	"sync/atomic"
	"time"
	"unsafe"

	"github.com/rdmago/rdmago/internal/yield"
	"github.com/rdmago/rdmago/rdmacm"
	"github.com/rdmago/rdmago/verbs"
)

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
	dev, err := openDevice(o.Device)
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

func openDevice(name string) (*verbs.Device, error) {
	if name != "" {
		d, err := verbs.DeviceByName(name)
		if err != nil {
			return nil, fmt.Errorf("IB device %s not found", name)
		}
		return d, nil
	}
	devs, err := verbs.Devices()
	if err != nil || len(devs) == 0 {
		return nil, errors.New("no IB devices found")
	}
	return devs[0], nil
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
	dev, err := openDevice(o.Device)
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

// sizes is the list of message sizes of the run.
func (o *Options) sizes() []int {
	if !o.All {
		return []int{o.Size}
	}
	largest := MaxSize
	if o.Conn == UD {
		largest = o.MTU.Bytes() // a datagram is one packet
	}
	var s []int
	for n := 2; n <= largest; n *= 2 {
		s = append(s, n)
	}
	return s
}

// sendWR is QP q's work request of one iteration of size bytes: from
// its local half to the peer's QP's target half.
// The SGE lives in r.sges[j]: each request of a list built at once needs
// its own j.
func (r *res) sendWR(q, size int, signaled bool, j int) verbs.SendWR {
	if j >= len(r.sges) {
		r.sges = make([]verbs.SGE, j+1)
	}
	r.sges[j] = r.mr.SGE(q*r.half, size)
	wr := verbs.SendWR{SGList: r.sges[j : j+1 : j+1]}
	rem := &r.rem[q]
	switch r.o.Tool.Verb {
	case Send:
		wr.Opcode = verbs.WRSend
		if r.o.Conn == UD {
			wr.AH, wr.RemoteQPN, wr.RemoteQKey = r.ahs[q], rem.qpn, udQKey
		}
	case Write:
		wr.Opcode, wr.RemoteAddr, wr.RKey = verbs.WRRDMAWrite, rem.vaddr, rem.rkey
	case Read:
		wr.Opcode, wr.RemoteAddr, wr.RKey = verbs.WRRDMARead, rem.vaddr, rem.rkey
	case Atomic:
		// perftest's operands: add 1, or compare with 1 and swap in 0.
		wr.Opcode, wr.RemoteAddr, wr.RKey, wr.CompareAdd = verbs.WRAtomicFetchAndAdd, rem.vaddr, rem.rkey, 1
		if r.o.AtomicType == CmpAndSwap {
			wr.Opcode, wr.Swap = verbs.WRAtomicCmpAndSwp, 0
		}
	}
	if signaled {
		wr.SendFlags |= verbs.SendSignaled
	}
	if size <= r.inline && (r.o.Tool.Verb == Send || r.o.Tool.Verb == Write) {
		wr.SendFlags |= verbs.SendInline
	}
	return wr
}

// postOne posts one signaled request of size bytes on the first QP.
func (r *res) postOne(size int) error {
	r.one[0] = r.sendWR(0, size, true, 0)
	return r.qp.PostSend(r.one[:])
}

// Run runs the tool: a server without o.Server, a client with it.
func Run(ctx context.Context, o *Options, stdout, stderr io.Writer) error {
	out, err := newOutput(o, stdout, stderr)
	if err != nil {
		return err
	}
	// As perftest (ctx_find_dev, check_link before it connects): a
	// wrong -d, -i or -x fails at once, not once a peer has come.
	if err := checkDevice(o); err != nil {
		return err
	}
	if err := checkPlot(o.Plot); err != nil {
		return err
	}
	if o.Server == "" {
		fmt.Fprint(out.table, "\n************************************\n* Waiting for client to connect... *\n************************************\n")
	}
	c, err := dialCtrl(ctx, o)
	if err != nil {
		return err
	}
	defer c.Close()
	stop := context.AfterFunc(ctx, func() { c.Close() })
	defer stop()
	if o.RdmaCM {
		// The test's QPs are on the device rdma_cm reaches the peer by.
		o.Device = c.cm.conn.ID.Device().Name()
	}
	r, err := setup(o)
	if err != nil {
		return err
	}
	defer r.close()
	var peerCycle int
	if r.mtu, peerCycle, err = c.hello(r.mtu); err != nil {
		return err
	}
	if o.Conn == UD {
		// A datagram is one packet: the size is at most the MTU, as
		// perftest makes it (or refuses a larger -s).
		o.MTU = r.mtu
		if o.Size > r.mtu.Bytes() {
			if o.sizeSet && !o.All {
				return fmt.Errorf("max message size in UD cannot be greater than MTU (%d)", r.mtu.Bytes())
			}
			fmt.Fprintf(stderr, " Max msg size in UD is MTU %d\n Changing to this MTU\n", r.mtu.Bytes())
			o.Size = r.mtu.Bytes()
		}
	}
	if peerCycle > r.half {
		return fmt.Errorf("the peer's cycle buffer (%d bytes) is larger than this side's %d", peerCycle, r.half)
	}
	if o.RdmaCM {
		if err := r.cmConnectQPs(ctx, c); err != nil {
			return err
		}
	}
	t := o.Tool
	printBanner(out.table, o, r)
	// Before the test: perftest's handshakes, in its order and number
	// for N QPs: each QP's keys, ctx_connect, each QP's again and one
	// more with the first QP's (send_bw has the one before the N).
	for i := range r.qps {
		if r.rem[i], err = c.firstKey(r, i); err != nil {
			return err
		}
	}
	if t.Lat && t.Verb != Send {
		// write_lat, read_lat, atomic_lat (one QP) have a handshake
		// before the keys; the key message is the same every time, so
		// the second carries what the first did.
		if err := c.againKey(r, 0); err != nil {
			return err
		}
	}
	printAddrs(out.table, o, r.my, r.rem)
	if !o.RdmaCM {
		if err := r.connect(); err != nil {
			return err
		}
	}
	if t.Verb == Send && !t.Lat {
		if err := c.againKey(r, 0); err != nil {
			return err
		}
	}
	for i := range r.qps {
		if err := c.againKey(r, i); err != nil {
			return err
		}
	}
	if t.Verb != Send || t.Lat {
		if err := c.againKey(r, 0); err != nil {
			return err
		}
	}
	switch {
	case !t.Lat && t.Verb != Send:
		err = runRDMABW(ctx, c, r, out)
	case !t.Lat:
		err = runSendBW(ctx, c, r, out)
	case t.Verb == Send:
		err = runSendLat(ctx, c, r, out)
	case t.Verb == Write:
		err = runWriteLat(ctx, c, r, out)
	default:
		err = runReadLat(ctx, c, r, out)
	}
	if err != nil {
		return err
	}
	return out.plot()
}

// runRDMABW is ib_write_bw and ib_read_bw: the client moves the data and
// reports; the server waits, then prints the client's report.
func runRDMABW(ctx context.Context, c *ctrl, r *res, out *output) error {
	o := r.o
	out.bwHeader()
	if o.Duplex {
		return runRDMABiBW(ctx, c, r, out)
	}
	var last bwReport
	if o.Infinitely && !c.server {
		// Until stopped; the server waits in the next exchange.
		return c.during(ctx, func(ctx context.Context) error { return r.bwInfinitely(ctx, o.Size, out) })
	}
	if !c.server {
		err := c.during(ctx, func(ctx context.Context) error {
			for _, size := range o.sizes() {
				if err := r.warmUp(ctx, size); err != nil {
					return err
				}
				var rep bwReport
				var err error
				if o.Duration > 0 {
					rep, err = r.bwDuration(ctx, size)
				} else {
					rep, err = r.bwIterations(ctx, size)
				}
				if err != nil {
					return err
				}
				out.bwRow(rep)
				last = rep
			}
			return nil
		})
		if err != nil {
			return err
		}
	}
	if err := r.serveWhile(func() error { _, err := c.handshake(&r.my[0]); return err }); err != nil {
		return err
	}
	peer, err := c.xchgReport(last)
	if err != nil {
		return err
	}
	if c.server {
		out.bwRow(peer)
	}
	fmt.Fprint(out.table, resultLine)
	return c.closeConn(&r.my[0])
}

// bwIterations posts o.Iters operations of size bytes on each QP,
// o.TxDepth at most outstanding per QP, every o.CQMod-th (and the last)
// signaled, and measures when each was posted and completed (in the
// order posted and completed over all QPs, as perftest counts them).
func (r *res) bwIterations(ctx context.Context, size int) (bwReport, error) {
	o := r.o
	n := o.Iters
	total := n * len(r.qps)
	posted, completed := newStamps(total), newStamps(total)
	scnt := make([]int, len(r.qps))
	ccnt := make([]int, len(r.qps))
	tposted, tdone := 0, 0
	list := make([]verbs.SendWR, o.PostList)
	// ib_send_bw -b also takes the peer's sends, as many as it sends,
	// reposting receives as they complete.
	recvs, rdone := 0, 0
	got := make([]int, len(r.qps))
	if o.Tool.Verb == Send && o.Duplex {
		recvs = total
	}
	for tdone < total || rdone < recvs {
		for q, qp := range r.qps {
			// -l: o.PostList requests at a time (the iterations are a
			// multiple of it), as one ibv_post_send of a chain.
			for scnt[q] < n && scnt[q]-ccnt[q]+o.PostList <= o.TxDepth {
				k := min(o.PostList, n-scnt[q])
				for j := range k {
					c := scnt[q] + j
					list[j] = r.sendWR(q, size, (c+1)%o.CQMod == 0 || c == n-1, j)
					list[j].WRID = uint64(q)<<32 | uint64(c)
				}
				now := stampNow()
				if err := qp.PostSend(list[:k]); err != nil {
					return bwReport{}, fmt.Errorf("couldn't post send: qp %d scnt=%d: %w", q, scnt[q], err)
				}
				for range k {
					posted[tposted] = now
					tposted++
				}
				scnt[q] += k
			}
		}
		wcs, err := r.poll(ctx)
		if err != nil {
			return bwReport{}, err
		}
		now := stampNow()
		for _, wc := range wcs {
			if wc.Opcode&verbs.WCRecv != 0 {
				if q, ok := r.qpIndex[wc.QPNum]; ok && recvs > 0 {
					got[q]++
					r.rxPosted[q]--
					rdone++
				}
				continue
			}
			// A signaled completion completes every request of its QP up
			// to it.
			q, last := int(wc.WRID>>32), int(uint32(wc.WRID))
			if q >= len(r.qps) {
				continue
			}
			for ; ccnt[q] <= last && ccnt[q] < n; ccnt[q]++ {
				completed[tdone] = now
				tdone++
			}
		}
		if recvs > 0 {
			for q := range r.qps {
				if err := r.fillRecvs(q, min(o.RxDepth, n-got[q])); err != nil {
					return bwReport{}, err
				}
			}
		}
	}
	return bwReportOf(o, size, posted, completed), nil
}

// runSendBW is ib_send_bw: per size, the server posts receives, a
// handshake starts the run, and each side prints its own row.
func runSendBW(ctx context.Context, c *ctrl, r *res, out *output) error {
	o := r.o
	out.bwHeader()
	sizes := o.sizes()
	if o.Infinitely {
		if c.server {
			for q := range r.qps {
				if err := r.fillRecvs(q, o.RxDepth); err != nil {
					return err
				}
			}
		}
		if _, err := c.handshake(&r.my[0]); err != nil {
			return err
		}
		return c.during(ctx, func(ctx context.Context) error { return r.bwInfinitely(ctx, o.Size, out) })
	}
	for _, size := range sizes {
		if c.server || o.Duplex {
			for q := range r.qps {
				if err := r.fillRecvs(q, min(o.RxDepth, o.Iters)); err != nil {
					return err
				}
			}
		}
		if _, err := c.handshake(&r.my[0]); err != nil {
			return err
		}
		var rep bwReport
		err := c.during(ctx, func(ctx context.Context) error {
			var err error
			switch {
			case o.Duration > 0:
				rep, err = r.bwDuration(ctx, size)
			case c.server && !o.Duplex:
				rep, err = r.recvIterations(ctx, size)
			default:
				rep, err = r.bwIterations(ctx, size)
			}
			return err
		})
		if err != nil {
			return err
		}
		rep.size = uint64(size)
		if o.Duplex {
			// -b: the sides trade reports, and each prints the sum.
			peer, err := c.xchgReport(rep)
			if err != nil {
				return err
			}
			rep.peak += peer.peak
			rep.avg += peer.avg
			rep.msgRate += peer.msgRate
		}
		out.bwRow(rep)
		if o.All { // after every size, the last too
			if _, err := c.handshake(&r.my[0]); err != nil {
				return err
			}
		}
	}
	fmt.Fprint(out.table, resultLine)
	return c.closeConn(&r.my[0])
}

// fillRecvs posts receives (each of the largest size, into QP q's
// target half) until n are outstanding on QP q.
func (r *res) fillRecvs(q, n int) error {
	for r.rxPosted[q] < n {
		r.rsge[0] = r.mr.SGE((len(r.qps)+q)*r.half, r.half)
		r.rwr[0] = verbs.RecvWR{WRID: uint64(r.rxPosted[q]), SGList: r.rsge[:]}
		if err := r.qps[q].PostRecv(r.rwr[:]); err != nil {
			return fmt.Errorf("couldn't post receive: %w", err)
		}
		r.rxPosted[q]++
	}
	return nil
}

// recvIterations takes o.Iters receives on each QP, reposting as they
// complete.
func (r *res) recvIterations(ctx context.Context, size int) (bwReport, error) {
	o := r.o
	n := o.Iters
	total := n * len(r.qps)
	posted, completed := newStamps(total), newStamps(total)
	got := make([]int, len(r.qps))
	done := 0
	// The clock starts when the run does (the handshake just returned):
	// the first completions may come back in one batch after a wait.
	start := stampNow()
	for i := range posted {
		posted[i] = start
	}
	for done < total {
		wcs, err := r.poll(ctx)
		if err != nil {
			return bwReport{}, err
		}
		now := stampNow()
		for _, wc := range wcs {
			q, ok := r.qpIndex[wc.QPNum]
			if !ok || wc.Opcode&verbs.WCRecv == 0 {
				continue
			}
			completed[done] = now
			done++
			got[q]++
			r.rxPosted[q]--
		}
		for q := range r.qps {
			if err := r.fillRecvs(q, min(o.RxDepth, n-got[q])); err != nil {
				return bwReport{}, err
			}
		}
	}
	noPeak := *o
	noPeak.NoPeak = true // perftest's server computes no peak for receives
	return bwReportOf(&noPeak, size, posted, completed), nil
}

// runSendLat is ib_send_lat: per size a handshake, then the ping-pong
// (the client sends first, the server answers each message); each side
// prints its own row.
func runSendLat(ctx context.Context, c *ctrl, r *res, out *output) error {
	o := r.o
	out.latHeader()
	for _, size := range o.sizes() {
		if err := r.fillRecvs(0, o.RxDepth); err != nil {
			return err
		}
		if _, err := c.handshake(&r.my[0]); err != nil {
			return err
		}
		err := c.during(ctx, func(ctx context.Context) error {
			return r.latLoop(ctx, out, size, 2, func(ctx context.Context, i int, mark func()) error {
				if c.server {
					if err := r.waitRecv(ctx); err != nil {
						return err
					}
				}
				mark()
				if err := r.postOne(size); err != nil {
					return fmt.Errorf("couldn't post send: %w", err)
				}
				if !c.server {
					return r.waitRecv(ctx)
				}
				return nil
			})
		})
		if err != nil {
			return err
		}
	}
	fmt.Fprint(out.table, resultLine)
	return c.closeConn(&r.my[0])
}

// waitRecv waits for one receive (passing over send completions) and
// keeps the receive queue full.
func (r *res) waitRecv(ctx context.Context) error {
	for {
		n, err := r.cq.Poll(r.wc[:1])
		if err != nil {
			return err
		}
		if n == 0 {
			if err := r.waitCQ(ctx); err != nil {
				return fmt.Errorf("waiting for a receive: %w", err)
			}
			continue
		}
		r.spins, r.yielding = 0, false
		wc := r.wc[0]
		if wc.Status != verbs.WCSuccess {
			return fmt.Errorf("completion with error: %s", wc.Status)
		}
		if wc.Opcode&verbs.WCRecv == 0 {
			continue
		}
		r.rxPosted[0]--
		return r.fillRecvs(0, r.o.RxDepth)
	}
}

// runReadLat is ib_read_lat and ib_atomic_lat: the client reads (or
// operates atomically on) the server's memory, one operation at a time,
// and prints; the server only waits for it to finish.
func runReadLat(ctx context.Context, c *ctrl, r *res, out *output) error {
	o := r.o
	if !c.server {
		out.latHeader()
		err := c.during(ctx, func(ctx context.Context) error {
			for _, size := range o.sizes() {
				err := r.latLoop(ctx, out, size, 1, func(ctx context.Context, i int, mark func()) error {
					mark()
					if err := r.postOne(size); err != nil {
						return fmt.Errorf("couldn't post read: %w", err)
					}
					_, err := r.poll(ctx)
					return err
				})
				if err != nil {
					return err
				}
			}
			return nil
		})
		if err != nil {
			return err
		}
	}
	fmt.Fprint(out.table, resultLine)
	return c.closeConn(&r.my[0])
}

// runWriteLat is ib_write_lat: each side RDMA-writes size bytes into the
// other's memory, the last byte a counter, and watches its own memory for
// the peer's counter to come; the server writes first. Each side prints
// its own row; there is no closing exchange.
func runWriteLat(ctx context.Context, c *ctrl, r *res, out *output) error {
	return c.during(ctx, func(ctx context.Context) error { return writeLat(ctx, r, out) })
}

func writeLat(ctx context.Context, r *res, out *output) error {
	o := r.o
	out.latHeader()
	server := o.Server == ""
	for _, size := range o.sizes() {
		post := r.buf[size-1 : size]
		watch := r.half + size - 1
		// The client's n-th write answers the server's n-th; the server's
		// first goes unprompted and it waits last for the client's last.
		err := r.latLoop(ctx, out, size, 2, func(ctx context.Context, i int, mark func()) error {
			switch {
			case !server:
				if err := r.watchByte(ctx, watch, byte(i+1)); err != nil {
					return err
				}
			case i > 0:
				if err := r.watchByte(ctx, watch, byte(i)); err != nil {
					return err
				}
			}
			mark()
			post[0] = byte(i + 1)
			if err := r.postOne(size); err != nil {
				return fmt.Errorf("couldn't post send: scnt=%d: %w", i+1, err)
			}
			if _, err := r.poll(ctx); err != nil {
				return err
			}
			if server && i == o.Iters-1 && o.Duration == 0 {
				return r.watchByte(ctx, watch, byte(o.Iters))
			}
			return nil
		})
		if err != nil {
			return err
		}
		if o.Duration > 0 {
			r.linger(ctx, watch)
		}
	}
	fmt.Fprint(out.table, resultLine)
	return nil
}

// linger keeps a -D write_lat run's QP while the peer, whose clock
// started a moment apart, still writes into byte i: a write that finds
// the QP gone is retried by the peer, and perftest waits for its
// completion without end. It returns once the byte has stood still for
// lingerQuiet, or after lingerMax.
func (r *res) linger(ctx context.Context, i int) {
	const lingerQuiet, lingerMax = 300 * time.Millisecond, 5 * time.Second
	last, since, start := loadByte(r.buf, i), time.Now(), time.Now()
	for ctx.Err() == nil && time.Since(start) < lingerMax && time.Since(since) < lingerQuiet {
		time.Sleep(time.Millisecond)
		if v := loadByte(r.buf, i); v != last {
			last, since = v, time.Now()
		}
	}
}

// latLoop runs one size of a latency test: step o.Iters times, then the
// row of the times step marked (see latStats); with -D, step for
// o.Duration seconds instead, and the row of the marks in the sample
// window (perftest's duration report: the average and the rate).
func (r *res) latLoop(ctx context.Context, out *output, size int, factor float64, step func(ctx context.Context, i int, mark func()) error) error {
	o := r.o
	if o.Duration == 0 {
		stamps := newStamps(o.Iters)
		for i := range o.Iters {
			if err := step(ctx, i, func() { stamps[i] = stampNow() }); err != nil {
				return err
			}
		}
		out.latRow(size, o.Iters, stamps, factor)
		return nil
	}
	start := time.Now()
	from := start.Add(time.Duration(o.Margin) * time.Second)
	to := start.Add(time.Duration(o.Duration-o.Margin) * time.Second)
	end := start.Add(time.Duration(o.Duration) * time.Second)
	run, cancel := context.WithDeadline(ctx, end)
	defer cancel()
	count := 0
	mark := func() {
		if now := time.Now(); !now.Before(from) && now.Before(to) {
			count++
		}
	}
	for i := 0; time.Now().Before(end); i++ {
		if err := step(run, i, mark); err != nil {
			if run.Err() != nil && ctx.Err() == nil {
				break // the time is up
			}
			return err
		}
	}
	out.latDurRow(size, count, to.Sub(from), factor)
	return nil
}

// watchByte waits until byte i of the buffer, which the peer writes by
// RDMA, holds want. Busy-polling (manual progress), it polls the CQ with
// no room between looks, which lands the write on the software device as
// a NIC would on its own. Otherwise it spins a while, then sleeps a little
// between looks: the write lands by goroutines of this process, which a
// spinning goroutine would keep waiting.
func (r *res) watchByte(ctx context.Context, i int, want byte) error {
	for spins := 0; ; spins++ {
		if loadByte(r.buf, i) == want {
			r.spins, r.yielding = 0, false
			return nil
		}
		if r.ch == nil {
			if _, err := r.cq.Poll(nil); err != nil {
				return fmt.Errorf("poll CQ failed: %w", err)
			}
			if err := r.waitCQ(ctx); err != nil {
				return fmt.Errorf("waiting for the peer's write: %w", err)
			}
			continue
		}
		if spins < 256 {
			continue
		}
		if spins%1024 == 0 && ctx.Err() != nil {
			return fmt.Errorf("waiting for the peer's write: %w", ctx.Err())
		}
		time.Sleep(time.Microsecond)
	}
}

// serveWhile runs wait, the passive side's wait for the peer to finish,
// meanwhile driving the software device as a NIC's engine runs on its own:
// busy-polling, a goroutine polls the CQ with no room until wait returns,
// so that the peer's WRITEs and READs are answered at once, not each time
// the device's goroutines wake. With -e, or on a device that moves the
// data itself (hardware), it leaves that to the device.
func (r *res) serveWhile(wait func() error) error {
	if r.ch != nil || !r.drives {
		return wait()
	}
	stop, done := make(chan struct{}), make(chan error, 1)
	go func() {
		for {
			select {
			case <-stop:
				done <- nil
				return
			default:
			}
			if _, err := r.cq.Poll(nil); err != nil {
				done <- fmt.Errorf("poll CQ failed: %w", err)
				return
			}
			yield.CPU()
		}
	}()
	err := wait()
	close(stop)
	if perr := <-done; err == nil {
		err = perr
	}
	return err
}

// loadByte reads b[i], which the device writes concurrently, as one
// atomic load of the aligned word that holds it (b's array is
// word-aligned, as the Go allocator aligns large arrays).
func loadByte(b []byte, i int) byte {
	base := unsafe.Pointer(unsafe.SliceData(b))
	word := (*uint32)(unsafe.Add(base, i&^3))
	v := atomic.LoadUint32(word)
	var bytes [4]byte
	*(*uint32)(unsafe.Pointer(&bytes)) = v
	return bytes[i&3]
}

// during runs a test with a context that ends if the peer goes away, or
// finishes while this side has not (see ctrl.watch); the error then says
// which.
func (c *ctrl) during(ctx context.Context, test func(context.Context) error) error {
	run, stop := c.watch(ctx)
	err := test(run)
	stop()
	if err != nil {
		return runErr(run, err)
	}
	return nil
}

// runRDMABiBW is -b: both sides move data at once, a handshake starting
// each size (and, with -a, ending it); the sides trade reports and each
// prints the sum.
func runRDMABiBW(ctx context.Context, c *ctrl, r *res, out *output) error {
	o := r.o
	for _, size := range o.sizes() {
		if _, err := c.handshake(&r.my[0]); err != nil {
			return err
		}
		var mine bwReport
		err := c.during(ctx, func(ctx context.Context) error {
			if err := r.warmUp(ctx, size); err != nil {
				return err
			}
			var err error
			mine, err = r.bwIterations(ctx, size)
			return err
		})
		if err != nil {
			return err
		}
		if o.All {
			if _, err := c.handshake(&r.my[0]); err != nil {
				return err
			}
		}
		peer, err := c.xchgReport(mine)
		if err != nil {
			return err
		}
		sum := mine
		sum.peak += peer.peak
		sum.avg += peer.avg
		sum.msgRate += peer.msgRate
		out.bwRow(sum)
	}
	fmt.Fprint(out.table, resultLine)
	return c.closeConn(&r.my[0])
}

// warmUp is --perform_warm_up: on each QP a tx depth of signaled
// operations of size bytes (a post list's worth with -l), all waited
// for, before the measured run.
func (r *res) warmUp(ctx context.Context, size int) error {
	o := r.o
	if !o.WarmUp {
		return nil
	}
	n := o.TxDepth
	if o.PostList > 1 {
		n = o.PostList
	}
	for q, qp := range r.qps {
		list := make([]verbs.SendWR, n)
		for j := range list {
			list[j] = r.sendWR(q, size, true, j)
			list[j].WRID = warmUpWRID
		}
		if err := qp.PostSend(list); err != nil {
			return fmt.Errorf("couldn't post send during warm up: qp %d: %w", q, err)
		}
		for done := 0; done < n; {
			wcs, err := r.poll(ctx)
			if err != nil {
				return fmt.Errorf("warm up: %w", err)
			}
			done += len(wcs)
		}
	}
	return nil
}

// warmUpWRID marks the warm-up's requests.
const warmUpWRID = ^uint64(0)

// bwDuration is -D: operations posted for o.Duration seconds, as many as
// the tx depth allows (on the ib_send_bw server, receives taken as they
// come); those that complete in the sample window (the run less o.Margin
// at each end) are counted, over the window's length. As perftest, the
// run ends when the time is up, not waiting for what is still in flight.
func (r *res) bwDuration(ctx context.Context, size int) (bwReport, error) {
	o := r.o
	recv := o.Tool.Verb == Send && o.Server == "" && !o.Duplex
	start := time.Now()
	sampleFrom := start.Add(time.Duration(o.Margin) * time.Second)
	sampleTo := start.Add(time.Duration(o.Duration-o.Margin) * time.Second)
	end := start.Add(time.Duration(o.Duration) * time.Second)
	run, cancel := context.WithDeadline(ctx, end)
	defer cancel()
	var counted uint64
	t := r.newTimed(recv)
	for time.Now().Before(end) {
		if err := t.fill(size); err != nil {
			return bwReport{}, err
		}
		wcs, err := r.poll(run)
		if err != nil {
			if run.Err() != nil && ctx.Err() == nil {
				break // the time is up
			}
			return bwReport{}, err
		}
		now := time.Now()
		if n := t.count(wcs); !now.Before(sampleFrom) && now.Before(sampleTo) {
			counted += n
		}
	}
	// Over the sample window, as perftest's alarms time it.
	return rateReport(o, size, counted, sampleTo.Sub(sampleFrom)), nil
}

// bwInfinitely is --run_infinitely: operations of size bytes posted (on
// the ib_send_bw server, receives taken) until ctx ends, and every
// o.Duration seconds a row of what completed in that time.
func (r *res) bwInfinitely(ctx context.Context, size int, out *output) error {
	o := r.o
	recv := o.Tool.Verb == Send && o.Server == ""
	period := time.Duration(o.Duration) * time.Second
	start := time.Now()
	next := start.Add(period)
	var done uint64 // completed in this period
	t := r.newTimed(recv)
	for {
		if err := t.fill(size); err != nil {
			return err
		}
		wcs, err := r.poll(ctx)
		if err != nil {
			return err
		}
		done += t.count(wcs)
		if now := time.Now(); !now.Before(next) {
			out.bwRow(rateReport(o, size, done, now.Sub(start)))
			start, next, done = now, now.Add(period), 0
		}
	}
}

// timed is the posting of a run that lasts a time (-D,
// --run_infinitely): on the ib_send_bw server its receive queues kept
// full, elsewhere its send queues, each request signaled every
// CQ-moderation count so that a completion stands for that many.
type timed struct {
	r          *res
	recv       bool
	scnt, ccnt []uint64
	list       []verbs.SendWR
}

func (r *res) newTimed(recv bool) *timed {
	return &timed{r: r, recv: recv, scnt: make([]uint64, len(r.qps)), ccnt: make([]uint64, len(r.qps)),
		list: make([]verbs.SendWR, r.o.PostList)}
}

// fill posts what the queues have room for.
func (t *timed) fill(size int) error {
	r, o := t.r, t.r.o
	for q, qp := range r.qps {
		if t.recv {
			if err := r.fillRecvs(q, o.RxDepth); err != nil {
				return err
			}
			continue
		}
		for t.scnt[q]-t.ccnt[q]+uint64(o.PostList) <= uint64(o.TxDepth) {
			for j := range t.list {
				c := t.scnt[q] + uint64(j)
				t.list[j] = r.sendWR(q, size, (c+1)%uint64(o.CQMod) == 0, j)
				t.list[j].WRID = uint64(q)<<32 | uint64(uint32(c))
			}
			if err := qp.PostSend(t.list); err != nil {
				return fmt.Errorf("couldn't post send: qp %d scnt=%d: %w", q, t.scnt[q], err)
			}
			t.scnt[q] += uint64(o.PostList)
		}
	}
	return nil
}

// count takes completions and returns how many operations they finish.
func (t *timed) count(wcs []verbs.WC) uint64 {
	r := t.r
	var n uint64
	for _, wc := range wcs {
		if t.recv {
			if q, ok := r.qpIndex[wc.QPNum]; ok && wc.Opcode&verbs.WCRecv != 0 {
				r.rxPosted[q]--
				n++
			}
			continue
		}
		if q := int(wc.WRID >> 32); q < len(r.qps) && wc.Opcode&verbs.WCRecv == 0 {
			t.ccnt[q] += uint64(r.o.CQMod)
			n += uint64(r.o.CQMod)
		}
	}
	return n
}

// rateReport is the row of n operations of size bytes in d, without a
// peak (the timed runs').
func rateReport(o *Options, size int, n uint64, d time.Duration) bwReport {
	rep := bwReport{size: uint64(size), iters: n}
	unit := float64(1 << 20)
	if o.ReportGbits {
		unit = 125e6
	}
	if s := d.Seconds(); s > 0 {
		rep.avg = float64(size) * float64(n) / s / unit
		rep.msgRate = float64(n) / s / 1e6
	}
	return rep
}

// idleBeforeYield is how long a busy poll finds nothing before it starts
// yielding the CPU to other threads.
const idleBeforeYield = 200 * time.Microsecond
