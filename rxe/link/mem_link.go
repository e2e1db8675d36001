package link

import (
	"fmt"
	"net"
	"net/netip"
	"sync"
	"sync/atomic"
	"time"

	"github.com/rdmago/rdmago/rxe/wire"
)

// Mem is a Link attached to an in-memory Network (see Network.Attach). It
// sends from and to port wire.UDPPort, computes each packet's ICRC as the UDP
// link does (IPv4 ID 0 and DF), and checks it exactly on receipt, so a
// packet the network corrupted is dropped and counted in BadICRC. Received
// packets report traffic class 0 and hop limit 64, what a Linux peer sends
// by default.
type Mem struct {
	net       *Network
	addr      netip.Addr
	stats     counters
	ready     chan struct{} // signalled when packets are queued
	done      chan struct{} // closed by Close
	closed    atomic.Bool
	closeOnce sync.Once

	// Guarded by net.mu.
	queue memQueue
	held  []heldPacket // reordered packets waiting for later ones

	// recvMu serialises Recv, which alone uses timer.
	recvMu sync.Mutex
	timer  *time.Timer
}

var _ Link = (*Mem)(nil)

// memPacket is a packet in a receive queue.
type memPacket struct {
	buf  []byte
	from netip.Addr
	due  time.Time // when it arrives (zero: at once)
}

// heldPacket is a packet held back to be delivered after later ones.
type heldPacket struct {
	memPacket
	after    int       // packets still to overtake it
	deadline time.Time // when it is delivered anyway
}

// LocalAddr implements Link.LocalAddr.
func (m *Mem) LocalAddr() netip.Addr { return m.addr }

// Port implements Link.Port. It is wire.UDPPort.
func (m *Mem) Port() uint16 { return wire.UDPPort }

// MaxPacket implements Link.MaxPacket. It is the network's (see
// Network.SetMaxPacket).
func (m *Mem) MaxPacket() int {
	m.net.mu.Lock()
	defer m.net.mu.Unlock()
	return m.net.maxPacket
}

// Stats implements Link.Stats.
func (m *Mem) Stats() Stats { return m.stats.snapshot() }

// Send implements Link.Send. It copies each packet, so the caller may reuse
// the buffers as soon as it returns, and never blocks: a packet that finds
// the receive queue full is dropped.
func (m *Mem) Send(pkts []Packet) error {
	if m.closed.Load() {
		return net.ErrClosed
	}
	n := m.net
	var firstErr error
	for i := range pkts {
		p := &pkts[i]
		dst, err := checkPacket(p, m.addr, m.MaxPacket())
		if err != nil {
			m.stats.sendErrors.Add(1)
			if firstErr == nil {
				firstErr = err
			}
			continue
		}
		ph := pseudoHeader(m.addr, dst, wire.UDPPort, wire.UDPPort, 0)
		ph.SetICRC(p.Buf)
		m.stats.sent.Add(1)
		if !n.pass(p.Buf, m.addr, dst) {
			m.stats.dropped.Add(1)
			continue
		}
		n.transmit(m, dst, p.Buf)
	}
	return firstErr
}

// pass applies the network's Filter, if any, to pkt.
func (n *Network) pass(pkt []byte, from, to netip.Addr) bool {
	n.mu.Lock()
	f := n.faults.Filter
	n.mu.Unlock()
	if f == nil || f(pkt, from, to) {
		return true
	}
	n.mu.Lock()
	n.stats.Filtered++
	n.mu.Unlock()
	return false
}

// Recv implements Link.Recv. Packets arrive in the order the network
// delivered them.
func (m *Mem) Recv(pkts []Packet) (int, error) {
	if len(pkts) == 0 {
		return 0, nil
	}
	m.recvMu.Lock()
	defer m.recvMu.Unlock()
	for {
		k, wait, err := m.take(pkts)
		if err != nil || k > 0 {
			return k, err
		}
		var timeout <-chan time.Time
		if wait >= 0 {
			if m.timer == nil {
				m.timer = time.NewTimer(wait)
			} else {
				m.timer.Reset(wait)
			}
			timeout = m.timer.C
		}
		select {
		case <-m.ready:
		case <-m.done:
		case <-timeout:
		}
		if m.timer != nil {
			m.timer.Stop()
		}
	}
}

// take moves the packets that have arrived into pkts, checking each, and
// returns how many it moved. If none, it returns how long until one is due
// (-1 if none is in sight). After Close it returns net.ErrClosed.
func (m *Mem) take(pkts []Packet) (k int, wait time.Duration, err error) {
	n := m.net
	n.mu.Lock()
	defer n.mu.Unlock()
	if m.closed.Load() {
		return 0, 0, net.ErrClosed
	}
	now := time.Now()
	m.releaseHeld(now)
	wait = -1
	for k < len(pkts) && m.queue.len() > 0 {
		if due := m.queue.front().due; !due.IsZero() && due.After(now) {
			wait = due.Sub(now)
			break
		}
		q := m.queue.pop()
		if m.accept(&pkts[k], &q) {
			k++
		}
		n.freeBuffer(q.buf)
	}
	if k > 0 {
		m.stats.received.Add(uint64(k))
		return k, 0, nil
	}
	for _, h := range m.held {
		if d := h.deadline.Sub(now); wait < 0 || d < wait {
			wait = d
		}
	}
	return 0, wait, nil
}

// releaseHeld queues the held packets whose deadline has passed. Called
// with net.mu held.
func (m *Mem) releaseHeld(now time.Time) {
	held := m.held[:0]
	for _, h := range m.held {
		if h.deadline.After(now) {
			held = append(held, h)
			continue
		}
		m.net.push(m, h.memPacket)
	}
	clear(m.held[len(held):])
	m.held = held
}

// accept copies q into p if it fits and its ICRC is good, and counts it if
// not.
func (m *Mem) accept(p *Packet, q *memPacket) bool {
	switch {
	case len(q.buf) < MinPacket:
		m.stats.short.Add(1)
		return false
	case len(q.buf) > cap(p.Buf):
		m.stats.truncated.Add(1)
		return false
	}
	ph := pseudoHeader(q.from, m.addr, wire.UDPPort, wire.UDPPort, 0)
	if !ph.CheckICRC(q.buf) {
		m.stats.badICRC.Add(1)
		return false
	}
	p.Buf = append(p.Buf[:0], q.buf...)
	p.Addr, p.TClass, p.HopLimit = q.from, 0, memHopLimit
	return true
}

// JoinGroup implements Joiner: the link it returns receives a copy of
// every packet sent to group (an IP multicast address of the links'
// family), each copy meeting the network's faults on its own.
func (m *Mem) JoinGroup(group netip.Addr) (Link, error) {
	group = group.Unmap()
	if !group.IsMulticast() || group.Is4() != m.addr.Is4() {
		return nil, fmt.Errorf("rxe/link: join %v from %v: %w", group, m.addr, ErrAddr)
	}
	if m.closed.Load() {
		return nil, net.ErrClosed
	}
	g := &Mem{net: m.net, addr: group, ready: make(chan struct{}, 1), done: make(chan struct{})}
	n := m.net
	n.mu.Lock()
	n.groups[group] = append(n.groups[group], g)
	n.mu.Unlock()
	return g, nil
}

// wake tells a blocked Recv that packets are queued.
func (m *Mem) wake() {
	select {
	case m.ready <- struct{}{}:
	default:
	}
}

// Close implements Link.Close. It detaches the link from the network, so
// packets sent to its address are dropped from now on, and unblocks Recv.
func (m *Mem) Close() error {
	m.closeOnce.Do(func() {
		m.net.mu.Lock()
		m.closed.Store(true)
		m.net.detach(m)
		m.net.mu.Unlock()
		close(m.done)
	})
	return nil
}

// memQueue is a FIFO of packets.
type memQueue struct {
	q    []memPacket
	head int
}

func (q *memQueue) len() int          { return len(q.q) - q.head }
func (q *memQueue) front() *memPacket { return &q.q[q.head] }

func (q *memQueue) push(p memPacket) {
	if q.head > 0 && q.head >= len(q.q)/2 {
		// Slide the live packets down rather than grow.
		n := copy(q.q, q.q[q.head:])
		clear(q.q[n:])
		q.q, q.head = q.q[:n], 0
	}
	q.q = append(q.q, p)
}

func (q *memQueue) pop() memPacket {
	p := q.q[q.head]
	q.q[q.head] = memPacket{}
	q.head++
	if q.head == len(q.q) {
		q.q, q.head = q.q[:0], 0
	}
	return p
}
