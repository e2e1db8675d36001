package rxe

import (
	"encoding/binary"
	"errors"
	"fmt"
	"math/rand/v2"
	"net"
	"net/netip"
	"slices"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/rdmago/rdmago/rxe/link"
	"github.com/rdmago/rdmago/rxe/wire"
	"github.com/rdmago/rdmago/verbs"
	"github.com/rdmago/rdmago/verbs/swcq"
)

// Device limits, as Linux rxe reports them (rxe_param.h).
const (
	maxQP         = 0x10000
	maxQPWR       = 0x4000
	maxSGE        = 32
	maxInline     = 400
	maxCQ         = 0x4000
	maxCQE        = 0x7fff
	maxMR         = 0x10000
	maxPD         = 0x7ff0
	maxRdAtomic   = 128
	maxSRQ        = 960
	maxSRQWR      = 0x4000
	maxPKeys      = 64
	maxMsgSize    = 0x800000 // 8 MiB
	maxMRSize     = 1 << 40
	minQPN        = 0x11 // QP numbers start above the special QPs, as in rxe
	vendorID      = 0xffffff
	maxUnackedPSN = 128 // the most PSNs a requester has in flight
	maxPktPerAck  = 64  // the requester asks for an ACK at least this often
	// maxPacket bounds a RoCE packet: the largest path MTU plus headers.
	maxPacket = 4096 + 128
	// recvBatch is how many packets the receive loop takes per call.
	recvBatch = 64
)

// device implements verbs.DeviceDriver. Its hardware state (sockets, QP
// and key tables) starts with the first Open and stops with the last Close.
type device struct {
	cfg  Config
	guid uint64

	cmUnreachable atomic.Pointer[func(netip.Addr, syscall.Errno, []byte)]
	stats         counters

	mu        sync.Mutex
	hw        *hw
	refs      int
	linksGone bool // the Config's links were closed with the last context
}

// Open implements verbs.DeviceDriver.
func (d *device) Open(events verbs.EventSink) (verbs.ContextDriver, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	started := false
	if d.hw == nil {
		if d.linksGone {
			return nil, verbs.Errorf("ibv_open_device", verbs.ErrClosed, d.cfg.Name+": its links were closed with its last context; make a new device")
		}
		h, err := startHW(d)
		if err != nil {
			return nil, err
		}
		d.hw = h
		started = true
	}
	d.refs++
	if started && events != nil {
		// The port came up with the device, as a netdev coming up
		// raises IBV_EVENT_PORT_ACTIVE on Linux.
		events.Event(verbs.EventPortActive, 0, 1)
	}
	c := &devctx{dev: d, hw: d.hw, events: events}
	c.onEmptyPoll, c.onWait = c.pollProgress, c.pollWait
	return c, nil
}

func (d *device) release() {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.refs--
	if d.refs == 0 {
		d.hw.stop()
		d.hw = nil
		d.linksGone = len(d.cfg.Links) > 0
	}
}

// hw is a running device: its links, receive loops and object tables.
type hw struct {
	dev   *device
	links []link.Link
	gids  []verbs.GID
	mtu   verbs.MTU
	port  uint16
	clock clock // the engine's time (wallClock but in tests)

	mu       sync.RWMutex
	qps      map[uint32]*qp
	keys     map[uint32]*mr      // by key
	mws      map[uint32]*mw      // by index (the key's upper 24 bits)
	keyIdx   map[uint32]struct{} // indexes of region keys
	nsrq     int
	srqs     map[uint32]*srq   // XRC SRQs, by number
	xrcds    map[fileKey]*xrcd // XRC domains opened through a file
	nextSRQN uint32            // the next XRC SRQ number to try
	nextQPN  uint32            // the low 16 bits of the next QP number to try
	owner    uint8             // the upper 8 bits of the device's QP numbers (see share.go)

	upMu    sync.Mutex // guards bringing the links up, and stopped
	stopped bool
	quit    chan struct{} // closed by stop

	mcastMu sync.Mutex
	mcast   map[netip.Addr]*group // multicast groups QPs are attached to

	// readers are the links' readers, one for each of links.
	readers []linkReader
	// rooms are the links' send queues, one for each of links (room.go).
	rooms []linkRoom

	// held lists the QPs that held an ACK for their program's answer
	// (flushAck); nheld is its length, for the polls to check cheaply.
	heldMu sync.Mutex
	held   []*qp
	nheld  atomic.Int32

	pollNext atomic.Uint32 // the link a poll reads first (progress), turn by turn

	cmAns cmAnswers // answering CM messages nobody here takes (cmanswer.go)

	atomicMu sync.Mutex // makes atomics atomic with respect to each other (IBV_ATOMIC_HCA)
	bufs     sync.Pool  // *bufBox holding receive buffers of maxPacket bytes
	outs     sync.Pool  // *outBatch, for steps that send (getOut)
	boxes    sync.Pool  // empty *bufBox, so that moving buffers allocates nothing
	wg       sync.WaitGroup
}

func startHW(d *device) (*hw, error) {
	h := &hw{
		dev:      d,
		mtu:      activeMTU(d.cfg.NetdevMTU),
		port:     d.cfg.Port,
		qps:      map[uint32]*qp{},
		keys:     map[uint32]*mr{},
		mws:      map[uint32]*mw{},
		mcast:    map[netip.Addr]*group{},
		keyIdx:   map[uint32]struct{}{},
		srqs:     map[uint32]*srq{},
		xrcds:    map[fileKey]*xrcd{},
		nextQPN:  minQPN,
		nextSRQN: 1,
		clock:    d.cfg.clock,
		quit:     make(chan struct{}),
	}
	if h.clock == nil {
		h.clock = wallClock{}
	}
	if len(d.cfg.Links) == 0 {
		// On the network, QP numbers start at a random point: a process
		// that restarts on an address (its device's GUID is made from
		// it) then rarely gives its new connections the numbers of its
		// old ones, which a peer still holding those in timewait would
		// refuse as stale (as Linux's ib_cm does).
		h.nextQPN = minQPN + uint32(rand.IntN(0x10000-minQPN))
	}
	h.bufs.New = func() any { return &bufBox{b: make([]byte, maxPacket)} }
	for _, a := range d.cfg.Addrs {
		h.gids = append(h.gids, verbs.GIDFromAddr(a))
	}
	if len(d.cfg.Links) > 0 {
		if sh, ok := d.cfg.Links[0].(*link.Shared); ok {
			h.owner = sh.Owner() // QP numbers in the range the link routes here
		}
		h.startLinks(d.cfg.Links)
	}
	return h, nil
}

// up brings the device onto the network, if it is not yet: it joins the
// processes that share its addresses (see share.go) and starts receiving.
// A device comes up with its first QP, so that opening and querying a
// device never needs its UDP port.
func (h *hw) up() error {
	h.upMu.Lock()
	defer h.upMu.Unlock()
	if h.stopped {
		return verbs.Errorf("ibv_create_qp", verbs.ErrClosed, "device closed")
	}
	if h.links != nil {
		return nil
	}
	links, owner, err := shareAddrs(h.dev.cfg.Addrs, h.dev.cfg.Port)
	if err != nil {
		errno := verbs.ErrIO
		if errors.Is(err, syscall.EADDRINUSE) {
			errno = verbs.ErrAddrInUse
		}
		return verbs.Errorf("ibv_create_qp", errno, fmt.Sprintf("bringing %s up: %v", h.dev.cfg.Name, err))
	}
	h.owner = owner
	h.startLinks(links)
	return nil
}

// startLinks starts a receive loop on each link.
func (h *hw) startLinks(links []link.Link) {
	h.links = links
	for _, l := range links {
		if n, ok := l.(link.Notifier); ok {
			n.SetUnreachable(h.unreachable)
		}
	}
	h.watchRooms(links)
	h.readers = make([]linkReader, len(links))
	for i := range links {
		h.readers[i].batch = newReceiveBatch(h)
		h.readers[i].nudge = make(chan struct{}, 1)
		h.wg.Add(1)
		go h.recvLoop(i)
	}
}

// stop closes the links and waits for the receive loops.
func (h *hw) stop() {
	h.upMu.Lock()
	h.stopped = true // pollers read no more
	h.upMu.Unlock()
	// The links close while the receive loops still run: a shared
	// address's leader forwards what reached its port before it lets
	// the port go (link.Shared.Close), and only the loop reads it now.
	for _, l := range h.links {
		l.Close()
	}
	close(h.quit)
	h.mcastMu.Lock()
	for a, g := range h.mcast {
		g.link.Close()
		delete(h.mcast, a)
	}
	h.mcastMu.Unlock()
	h.wg.Wait()
	h.mu.Lock()
	qps := make([]*qp, 0, len(h.qps))
	for _, q := range h.qps {
		qps = append(qps, q)
	}
	h.mu.Unlock()
	for _, q := range qps {
		q.Destroy()
	}
}

// linkReader is how a link is read. A link that can be read without
// waiting (link.TryReceiver) is read by whoever holds mu, the receive loop
// or a CQ poller doing manual progress, into batch; reading and handing
// over what was read under one lock keeps the packets in the order they
// came.
type linkReader struct {
	mu    sync.Mutex
	batch *receiveBatch
	// polls counts the pollers' reads: while it moves, the receive loop
	// stands aside (recvLoop), unless nudged: a poller went to wait.
	polls atomic.Uint64
	nudge chan struct{}
}

// standAside is how long the receive loop leaves a link to the pollers
// reading it before it looks again whether they still do. A poller that
// stops polling leaves what arrives after it to the receive loop, which
// then takes it up to this much later.
const standAside = 500 * time.Microsecond

// recvLoop reads packets from link i and hands each to its QP.
func (h *hw) recvLoop(i int) {
	defer h.wg.Done()
	l := h.links[i]
	if tr, ok := l.(link.TryReceiver); ok {
		rd := &h.readers[i]
		busy := false // the last read found packets: read again before waiting
		seen := rd.polls.Load()
		pause := time.NewTimer(time.Hour)
		defer pause.Stop()
		for {
			var err error
			if !busy {
				// While pollers read the link (manual progress), the
				// loop leaves it to them: waiting on the link would
				// wake it for each packet they read anyway, taking
				// a CPU from the poll.
			aside:
				for n := rd.polls.Load(); n != seen; n = rd.polls.Load() {
					seen = n
					pause.Reset(standAside)
					select {
					case <-pause.C:
					case <-rd.nudge:
						seen = rd.polls.Load()
						break aside
					case <-h.quit:
						return
					}
				}
				err = tr.WaitReadable()
			}
			if err == nil {
				rd.mu.Lock()
				var n int
				n, err = h.readLink(i, l, tr, rd.batch, false)
				rd.mu.Unlock()
				busy = n > 0
			}
			if errors.Is(err, net.ErrClosed) {
				return
			}
		}
	}
	r := newReceiveBatch(h)
	for {
		n, err := l.Recv(r.pkts)
		if err != nil {
			if errors.Is(err, net.ErrClosed) {
				r.release(h)
				return
			}
			continue
		}
		h.dispatch(i, l, r, n, false)
	}
}

// readLink reads link i without waiting (its reader's mu held) and hands
// what it read over, and the packets the link still holds after that read
// (bounded: what one read brought). It returns how many it read.
func (h *hw) readLink(i int, l link.Link, tr link.TryReceiver, r *receiveBatch, polled bool) (int, error) {
	total := 0
	for {
		n, err := tr.TryRecv(r.pkts)
		if err != nil {
			return total, err
		}
		if n > 0 {
			h.dispatch(i, l, r, n, polled)
			total += n
		}
		if n == 0 || !tr.Held() {
			return total, nil
		}
	}
}

// receiveBatch is what a reader of a link needs: packet buffers to read
// into and room to look their QPs up.
type receiveBatch struct {
	pkts  []link.Packet
	qs    []*qp
	touch []*qp // the QPs the batch went to, to be stepped
}

func newReceiveBatch(h *hw) *receiveBatch {
	r := &receiveBatch{pkts: make([]link.Packet, recvBatch), qs: make([]*qp, recvBatch)}
	for j := range r.pkts {
		r.pkts[j].Buf = h.getBuf()
	}
	return r
}

func (r *receiveBatch) release(h *hw) {
	for j := range r.pkts {
		h.putBuf(r.pkts[j].Buf)
	}
}

// dispatch hands the n packets read from link i into r to their QPs (or,
// for a shared address's leader, to the processes that own them), and runs
// each QP that got some on this goroutine when its owner is idle (waking
// the owner otherwise): one goroutine switch less per packet than handing
// every packet to the owner, which the owner's select would cost.
func (h *hw) dispatch(i int, l link.Link, r *receiveBatch, n int, polled bool) {
	// Look the QPs up first and deliver without h.mu: deliver takes
	// q.mu, and a poster holding q.mu may need h.mu (inline data).
	sh, leading := l.(*link.Shared)
	leading = leading && sh.Leading()
	forwarded := false
	h.mu.RLock()
	for j := 0; j < n; j++ {
		r.qs[j] = h.qps[binary.BigEndian.Uint32(r.pkts[j].Buf[4:8])&0xffffff]
	}
	h.mu.RUnlock()
	for j := 0; j < n; j++ {
		p := &r.pkts[j]
		q := r.qs[j]
		r.qs[j] = nil
		if leading {
			owner, ok := h.route(sh, p.Buf)
			if !ok {
				continue
			}
			if owner != h.owner && !h.cmOwnerGone(sh, owner, p.Buf) {
				sh.Forward(owner, p)
				forwarded = true
				continue
			}
		}
		if q == nil {
			// No such QP: dropped, as hardware does; but a CM request
			// for QP1 here, where no connection manager runs, is
			// answered as the IB CM answers it (cmanswer.go).
			h.answerCM(l, p)
			continue
		}
		in := inPacket{buf: p.Buf, src: p.Addr, tclass: p.TClass, hop: p.HopLimit, link: uint8(i)}
		if q.deliver(in, false) {
			p.Buf = h.getBuf()
			if !slices.Contains(r.touch, q) {
				r.touch = append(r.touch, q)
			}
		}
	}
	if forwarded {
		sh.Flush()
	}
	for j := 0; j < n; j++ {
		r.pkts[j].Buf = r.pkts[j].Buf[:cap(r.pkts[j].Buf)]
	}
	for k, q := range r.touch {
		// Only a QP whose own program polls may hold its ACK for that
		// program's answer; another context's QP found by the poll
		// sends it at once.
		q.stepHere(polled && q.ctx.manual.Load())
		r.touch[k] = nil
	}
	r.touch = r.touch[:0]
}

// progress is manual progress (verbs.ProgressManual) for a CQ poll that
// found nothing: it reads the device's links without waiting and runs the
// QPs of the packets it finds on the calling goroutine. A link another
// goroutine is reading is left to it.
func (h *hw) progress() {
	h.upMu.Lock()
	links, readers, stopped := h.links, h.readers, h.stopped
	h.upMu.Unlock()
	if stopped {
		return
	}
	if h.nheld.Load() > 0 {
		h.releaseHeld()
	}
	// The links are read in turn, from a different one each time, up to
	// the first that has packets: the poller then looks at its CQ before
	// the others are read, a system call less on the round trip's path
	// (a device has a link per address: IPv4 and IPv6 on loopback).
	start := 0
	if len(links) > 1 {
		start = int(h.pollNext.Add(1) % uint32(len(links)))
	}
	for k := range links {
		i := (start + k) % len(links)
		l := links[i]
		tr, ok := l.(link.TryReceiver)
		if !ok {
			continue
		}
		readers[i].polls.Add(1)
		if !readers[i].mu.TryLock() {
			continue
		}
		n, _ := h.readLink(i, l, tr, readers[i].batch, true)
		readers[i].mu.Unlock()
		if n > 0 {
			return
		}
	}
}

// noteHeld records that q holds an ACK (its stepMu held).
func (h *hw) noteHeld(q *qp) {
	h.heldMu.Lock()
	h.held = append(h.held, q)
	h.nheld.Store(int32(len(h.held)))
	h.heldMu.Unlock()
}

// releaseHeld sends the ACKs held for an answer that did not come: the
// program polls again instead. A QP another goroutine is stepping stays
// listed for the next poll.
func (h *hw) releaseHeld() {
	h.heldMu.Lock()
	qs := h.held
	h.held = nil
	h.nheld.Store(0)
	h.heldMu.Unlock()
	var busy []*qp
	for i, q := range qs {
		qs[i] = nil
		if !q.stepMu.TryLock() {
			busy = append(busy, q)
			continue
		}
		select {
		case <-q.done:
		default:
			q.sendHeldAck(h.clock.now(), false)
		}
		q.stepMu.Unlock()
	}
	if len(busy) > 0 {
		h.heldMu.Lock()
		h.held = append(h.held, busy...)
		h.nheld.Store(int32(len(h.held)))
		h.heldMu.Unlock()
	}
}

// pollersWait tells the receive loops standing aside that a poller went
// to wait (pollWait).
func (h *hw) pollersWait() {
	h.upMu.Lock()
	readers := h.readers
	h.upMu.Unlock()
	for i := range readers {
		select {
		case readers[i].nudge <- struct{}{}:
		default:
		}
	}
}

// bufBox carries a receive buffer through the pool without allocating.
type bufBox struct{ b []byte }

// getBuf takes a receive buffer of maxPacket bytes from the pool.
func (h *hw) getBuf() []byte {
	x := h.bufs.Get().(*bufBox)
	b := x.b
	x.b = nil
	h.boxes.Put(x)
	return b
}

// putBuf returns a receive buffer to the pool.
func (h *hw) putBuf(b []byte) {
	x, _ := h.boxes.Get().(*bufBox)
	if x == nil {
		x = new(bufBox)
	}
	x.b = b[:cap(b)]
	h.bufs.Put(x)
}

// sendBatch is how many packets the owner sends per link call.
const sendBatch = 64

// outBatch holds the packets a QP's step builds until it sends them. A
// step borrows one from the device and gives it back once it has sent
// (qp.sendOut), so the buffers belong to the steps that are sending, not
// to every QP that ever sent: a QP between steps holds none.
type outBatch struct {
	pkts []link.Packet
	bufs [][]byte // bufs[i] backs pkts[i]: maxPacket bytes, made on first use
}

// getOut returns an empty out batch.
func (h *hw) getOut() *outBatch {
	if b, ok := h.outs.Get().(*outBatch); ok {
		return b
	}
	return &outBatch{pkts: make([]link.Packet, 0, sendBatch), bufs: make([][]byte, sendBatch)}
}

// putOut takes back a batch whose packets were sent.
func (h *hw) putOut(b *outBatch) {
	b.pkts = b.pkts[:0]
	h.outs.Put(b)
}

// send hands packets to the link that serves GID index sgid.
func (h *hw) send(sgid int, pkts []link.Packet) error {
	if sgid >= len(h.links) {
		sgid = 0
	}
	return h.links[sgid].Send(pkts)
}

// newKey returns a memory key whose index (upper 24 bits) no region or
// window uses (h.mu held): random, so that keys are not guessable, with
// its low byte free to change like an IB key's variant.
func (h *hw) newKey() uint32 {
	for {
		k := randomKey()
		if k>>8 == 0 || k>>8 == 0xffffff {
			continue
		}
		if _, taken := h.mws[k>>8]; taken {
			continue
		}
		if _, taken := h.keyIdx[k>>8]; !taken {
			return k
		}
	}
}

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

var (
	_ verbs.DeviceDriver  = (*device)(nil)
	_ verbs.ContextDriver = (*devctx)(nil)
)

// Addrs returns the IP addresses the device serves, its GID table, without
// opening it. The connection manager uses it to find the device that owns
// an address.
func (d *device) Addrs() []netip.Addr {
	return append([]netip.Addr(nil), d.cfg.Addrs...)
}
