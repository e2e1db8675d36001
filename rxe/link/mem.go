package link

import (
	"fmt"
	"math/rand/v2"
	"net/netip"
	"sync"
	"syscall"
	"time"
)

// Defaults of an in-memory Network.
const (
	// DefaultMemMaxPacket is the largest packet a Network carries unless
	// told otherwise: room for a 4096-byte payload and every header.
	DefaultMemMaxPacket = 8192
	// DefaultMemQueueLen is the number of packets a link's receive queue
	// holds unless told otherwise; more are dropped, as a socket drops
	// datagrams when its buffer is full.
	DefaultMemQueueLen = 4096
)

// memHopLimit is the hop limit Mem links report: what a Linux host sends
// with by default.
const memHopLimit = 64

// maxFreeBuffers bounds the buffers a Network keeps for reuse.
const maxFreeBuffers = 1024

// Network is an in-memory network of links (see Attach), with fault
// injection. Every random decision comes from one PCG generator seeded at
// creation and drawn under the network's lock, so a given seed and a given
// order of sends give the same faults.
type Network struct {
	mu        sync.Mutex
	rng       *rand.Rand
	faults    Faults
	links     map[netip.Addr]*Mem
	groups    map[netip.Addr][]*Mem // multicast group members, in joining order
	maxPacket int
	queueLen  int
	stats     NetworkStats
	free      [][]byte // packet buffers for reuse
}

// NetworkStats holds a Network's counters. All count packets.
type NetworkStats struct {
	// Delivered counts packets put in a receive queue, duplicates
	// included.
	Delivered uint64
	// Lost, Filtered, Duplicated, Reordered and Corrupted count the
	// packets each of Faults' mischiefs befell.
	Lost, Filtered, Duplicated, Reordered, Corrupted uint64
	// NoRoute counts packets sent to an address no link is attached at.
	NoRoute uint64
	// Overflow counts packets dropped at a full receive queue.
	Overflow uint64
}

// NewNetwork returns an empty network with no faults whose random choices
// derive from seed.
func NewNetwork(seed uint64) *Network {
	return &Network{
		rng:       rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15)),
		links:     make(map[netip.Addr]*Mem),
		groups:    make(map[netip.Addr][]*Mem),
		maxPacket: DefaultMemMaxPacket,
		queueLen:  DefaultMemQueueLen,
	}
}

// SetFaults sets how the network mistreats the packets sent from now on. It
// may be called at any time.
func (n *Network) SetFaults(f Faults) {
	n.mu.Lock()
	defer n.mu.Unlock()
	n.faults = f
}

// SetMaxPacket sets the largest packet the network carries (MaxPacket of
// its links), DefaultMemMaxPacket to start with.
func (n *Network) SetMaxPacket(size int) {
	n.mu.Lock()
	defer n.mu.Unlock()
	n.maxPacket = size
}

// SetQueueLen sets how many packets each link's receive queue holds,
// DefaultMemQueueLen to start with.
func (n *Network) SetQueueLen(packets int) {
	n.mu.Lock()
	defer n.mu.Unlock()
	n.queueLen = packets
}

// Stats returns the network's counters.
func (n *Network) Stats() NetworkStats {
	n.mu.Lock()
	defer n.mu.Unlock()
	return n.stats
}

// Attach returns a new link at addr (IPv4 in either form), the address
// other links send to to reach it. It fails, wrapping syscall.EADDRINUSE, if
// a link is attached there already; closing the link detaches it.
func (n *Network) Attach(addr netip.Addr) (*Mem, error) {
	addr = addr.Unmap()
	if !addr.IsValid() || addr.IsUnspecified() || addr.IsMulticast() {
		return nil, fmt.Errorf("rxe/link: cannot attach at %v: a link needs one unicast address", addr)
	}
	n.mu.Lock()
	defer n.mu.Unlock()
	if _, ok := n.links[addr]; ok {
		return nil, fmt.Errorf("rxe/link: %v is already attached to the network: %w", addr, syscall.EADDRINUSE)
	}
	m := &Mem{
		net:   n,
		addr:  addr,
		ready: make(chan struct{}, 1),
		done:  make(chan struct{}),
	}
	n.links[addr] = m
	return m, nil
}

// Inject delivers pkt to the link at to as if from, exactly as given: no ICRC
// is computed and no fault applies. It is for tests that feed a device
// malformed packets. It fails if no link is at to, the packet is too long
// for the network or the receive queue is full.
func (n *Network) Inject(from, to netip.Addr, pkt []byte) error {
	n.mu.Lock()
	defer n.mu.Unlock()
	dst := n.links[to.Unmap()]
	switch {
	case dst == nil:
		return fmt.Errorf("rxe/link: inject to %v: no link is attached there", to)
	case len(pkt) > n.maxPacket:
		return fmt.Errorf("%w: %d bytes, at most %d", ErrPacketTooLarge, len(pkt), n.maxPacket)
	}
	if !n.enqueue(dst, memPacket{buf: n.copyBuffer(pkt), from: from.Unmap()}) {
		return fmt.Errorf("rxe/link: inject to %v: receive queue full", to)
	}
	return nil
}

// transmit carries pkt, sent by src to dst (a link's address or a
// multicast group), through the network's faults.
func (n *Network) transmit(src *Mem, dst netip.Addr, pkt []byte) {
	n.mu.Lock()
	defer n.mu.Unlock()
	if dst.IsMulticast() {
		members := n.groups[dst]
		if len(members) == 0 {
			n.stats.NoRoute++
			src.stats.dropped.Add(1)
		}
		for _, to := range members {
			n.carry(src, to, pkt) // each copy meets its own faults
		}
		return
	}
	to := n.links[dst]
	if to == nil {
		n.stats.NoRoute++
		src.stats.dropped.Add(1)
		return
	}
	n.carry(src, to, pkt)
}

// carry carries one copy of pkt from src to to. Called with n.mu held.
func (n *Network) carry(src, to *Mem, pkt []byte) {
	v := n.faults.judge(n.rng, len(pkt))
	if v.drop {
		n.stats.Lost++
		src.stats.dropped.Add(1)
		return
	}
	p := memPacket{buf: n.copyBuffer(pkt), from: src.addr}
	if d := n.faults.Delay; d > 0 {
		p.due = time.Now().Add(d)
	}
	if v.duplicate {
		// The copy travels apart from the original, and escapes its
		// corruption and reordering.
		n.stats.Duplicated++
		dup := p
		dup.buf = n.copyBuffer(p.buf)
		n.enqueue(to, dup)
	}
	if v.corruptBit >= 0 {
		n.stats.Corrupted++
		flipBit(p.buf, v.corruptBit)
	}
	if v.reorderAfter > 0 {
		n.stats.Reordered++
		to.held = append(to.held, heldPacket{memPacket: p, after: v.reorderAfter, deadline: time.Now().Add(ReorderHold)})
		return
	}
	n.enqueue(to, p)
}

// enqueue puts p at the tail of to's receive queue, followed by any held
// packets it was the last to overtake, and wakes to's Recv. It reports
// false, and frees p, if the queue was full. Called with n.mu held.
func (n *Network) enqueue(to *Mem, p memPacket) bool {
	ok := n.push(to, p)
	released := false
	held := to.held[:0]
	for _, h := range to.held {
		if h.after--; h.after > 0 {
			held = append(held, h)
			continue
		}
		n.push(to, h.memPacket)
		released = true
	}
	clear(to.held[len(held):])
	to.held = held
	if ok || released {
		to.wake()
	}
	return ok
}

// push appends p to to's receive queue if there is room. Called with n.mu
// held.
func (n *Network) push(to *Mem, p memPacket) bool {
	if to.queue.len() >= n.queueLen {
		n.stats.Overflow++
		to.stats.overflow.Add(1)
		n.freeBuffer(p.buf)
		return false
	}
	n.stats.Delivered++
	to.queue.push(p)
	return true
}

// copyBuffer returns a copy of b in a buffer from the free list if one is
// large enough. Called with n.mu held.
func (n *Network) copyBuffer(b []byte) []byte {
	var buf []byte
	if k := len(n.free); k > 0 && cap(n.free[k-1]) >= len(b) {
		buf = n.free[k-1][:len(b)]
		n.free[k-1] = nil
		n.free = n.free[:k-1]
	} else {
		buf = make([]byte, len(b), max(len(b), n.maxPacket))
	}
	copy(buf, b)
	return buf
}

// freeBuffer returns b to the free list. Called with n.mu held.
func (n *Network) freeBuffer(b []byte) {
	if len(n.free) < maxFreeBuffers && cap(b) >= n.maxPacket {
		n.free = append(n.free, b)
	}
}

// detach removes m from the network and frees what it holds. Called with
// n.mu held.
func (n *Network) detach(m *Mem) {
	if n.links[m.addr] == m {
		delete(n.links, m.addr)
	}
	if g := n.groups[m.addr]; len(g) > 0 {
		k := 0
		for _, x := range g {
			if x != m {
				g[k] = x
				k++
			}
		}
		clear(g[k:])
		if k == 0 {
			delete(n.groups, m.addr)
		} else {
			n.groups[m.addr] = g[:k]
		}
	}
	for m.queue.len() > 0 {
		n.freeBuffer(m.queue.pop().buf)
	}
	for _, h := range m.held {
		n.freeBuffer(h.buf)
	}
	m.held = nil
}
