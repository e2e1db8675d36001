package rxe

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"net/netip"
	"sync"
	"sync/atomic"
	"syscall"

	"github.com/rdmago/rdmago/rxe/link"
	"github.com/rdmago/rdmago/verbs"
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
	qp1Received   atomic.Pointer[func()]
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
