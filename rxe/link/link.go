package link

import (
	"errors"
	"fmt"
	"net/netip"
	"sync/atomic"
	"syscall"

	"github.com/rdmago/rdmago/rxe/wire"
)

// MinPacket is the length of the shortest RoCEv2 packet: a BTH and an ICRC.
// Links drop and count shorter ones.
const MinPacket = wire.BTHLen + wire.ICRCLen

// Packet is one RoCEv2 packet: the UDP payload from the BTH to the ICRC.
type Packet struct {
	// Buf holds the packet. On Send, len(Buf) is the packet length and its
	// last four bytes are overwritten with the ICRC the link computes for
	// the IP and UDP headers it sends the packet with. On Recv, the caller
	// provides Buf with a capacity of at least the link's MaxPacket (a
	// longer packet is dropped and counted as Truncated), and Recv sets its
	// length.
	Buf []byte

	// Addr is the peer: the destination IP address on Send, the source on
	// Recv. Send accepts IPv4 addresses in either form, plain or
	// IPv4-mapped IPv6 (::ffff:a.b.c.d, the form of a RoCEv2 GID); Recv
	// reports them plain.
	Addr netip.Addr

	// TClass and HopLimit are, on Recv, the IPv4 type of service or IPv6
	// traffic class and the IPv4 TTL or IPv6 hop limit the packet arrived
	// with, when the link can see them (0 otherwise). A UD receiver reports
	// them in the GRH. Send ignores them.
	TClass, HopLimit uint8
}

// Link carries RoCEv2 packets between devices. Send may be called from
// several goroutines at once; Recv from one at a time.
type Link interface {
	// LocalAddr returns the IP address packets are sent from: the
	// device's GID, in plain form for IPv4.
	LocalAddr() netip.Addr

	// Port returns the UDP port the link listens on, sends from and sends
	// to (wire.UDPPort in production).
	Port() uint16

	// MaxPacket returns the length of the largest packet (UDP payload)
	// the link carries.
	MaxPacket() int

	// Send computes the ICRC of each packet and sends them all. Delivery
	// is unreliable: a packet may be lost without an error. Send blocks
	// only while the network pushes back (a full socket buffer), and
	// never if the link is a SendQueue. It tries
	// every packet; a packet that cannot be sent (shorter than MinPacket,
	// longer than MaxPacket, to an address of the wrong family, refused by
	// the kernel) is counted in Stats.SendErrors, and Send returns the
	// first such error once it has tried the rest (of a packet a
	// SendQueue sends later, the error is only counted). After Close it
	// returns net.ErrClosed. Send keeps neither pkts nor their buffers
	// once it returns: the caller may reuse them at once.
	Send(pkts []Packet) error

	// Recv blocks until at least one packet has arrived, fills pkts[:n]
	// with up to len(pkts) of them and returns n. Packets with a bad ICRC,
	// shorter than MinPacket or longer than their buffer are dropped and
	// counted, never returned. Recv may exchange buffers between the
	// elements of pkts (each buffer given stays somewhere in pkts). After
	// Close it returns net.ErrClosed.
	Recv(pkts []Packet) (n int, err error)

	// Stats returns the link's counters.
	Stats() Stats

	// Close closes the link, unblocking Recv, and releases everything it
	// holds (no goroutine outlives it). Closing twice is harmless.
	Close() error
}

// TryReceiver is a Link that can also be read without waiting, so that
// several goroutines can take turns reading it in the order the packets
// came: the device's receive goroutine waits with WaitReadable and reads
// with TryRecv, and a CQ poller doing manual progress reads with TryRecv
// too, one reader at a time (the device holds a lock around each read and
// the delivery of what it read). Recv and TryRecv are not used on the same
// link.
type TryReceiver interface {
	// WaitReadable blocks until TryRecv may find a packet, reading
	// nothing; after Close it returns net.ErrClosed.
	WaitReadable() error
	// TryRecv is Recv that returns 0 at once when no packet is waiting.
	TryRecv(pkts []Packet) (n int, err error)
	// Held reports whether packets already taken from the network wait
	// in the link, which the next TryRecv returns before reading more.
	Held() bool
}

// SendQueue is a Link whose Send never waits for the network: the
// packets the network has no room for wait in the link, in order, and a
// goroutine of the link's sends them as room comes. A device stops
// building requests while anything waits, and goes on when told the
// queue is empty.
type SendQueue interface {
	// Queued returns how many bytes wait in the link to be sent.
	Queued() int
	// OnQueueEmpty sets f to be called, on a goroutine of the link's,
	// each time the queue empties; nil removes it. f must not block.
	OnQueueEmpty(f func())
}

// Joiner is a Link that can receive what is sent to an IP multicast group:
// JoinGroup returns a link that receives the group's packets (LocalAddr is
// the group) until it is closed. Packets to a group are sent through the
// joining link's Send, to the group's address.
type Joiner interface {
	JoinGroup(group netip.Addr) (Link, error)
}

// Stats holds a link's counters. All count packets.
type Stats struct {
	// Sent counts packets handed to the network.
	Sent uint64
	// SendErrors counts packets Send could not send.
	SendErrors uint64
	// Dropped counts packets this link sent that the network lost on the
	// way: on a Mem, by fault injection, the Filter, or for want of a link
	// at the destination address; on a UDP link, for want of room in its
	// send queue.
	Dropped uint64
	// Queued counts packets that waited in the link's send queue
	// (SendQueue) because the network had no room for them at once.
	Queued uint64

	// Received counts packets Recv returned.
	Received uint64
	// BadICRC counts received packets dropped because their ICRC did not
	// match.
	BadICRC uint64
	// Short counts received packets dropped for being shorter than
	// MinPacket.
	Short uint64
	// Truncated counts received packets dropped for being longer than the
	// buffer Recv was given.
	Truncated uint64
	// Overflow counts packets dropped on arrival because the receive queue
	// was full (on Linux, the socket's SO_RXQ_OVFL count, which counts
	// datagrams: with UDP GRO one may have held a run of packets).
	Overflow uint64

	// Unreachable counts ICMP errors the network sent back for packets
	// this link sent (Linux only).
	Unreachable uint64

	// Forwarded counts packets a Shared link's leader handed to the
	// processes that own them, ForwardDrops those it could not (the owner
	// had gone, or its queue was full), and ForwardedIn the packets a
	// follower got from the leader.
	Forwarded, ForwardDrops, ForwardedIn uint64
}

// add returns the sums of s's and o's counters.
func (s Stats) add(o Stats) Stats {
	return Stats{
		Sent: s.Sent + o.Sent, SendErrors: s.SendErrors + o.SendErrors, Dropped: s.Dropped + o.Dropped, Queued: s.Queued + o.Queued,
		Received: s.Received + o.Received, BadICRC: s.BadICRC + o.BadICRC, Short: s.Short + o.Short,
		Truncated: s.Truncated + o.Truncated, Overflow: s.Overflow + o.Overflow,
		Unreachable: s.Unreachable + o.Unreachable,
		Forwarded:   s.Forwarded + o.Forwarded, ForwardDrops: s.ForwardDrops + o.ForwardDrops, ForwardedIn: s.ForwardedIn + o.ForwardedIn,
	}
}

// counters are the live counters behind Stats.
type counters struct {
	sent, sendErrors, dropped, queued             atomic.Uint64
	received, badICRC, short, truncated, overflow atomic.Uint64
	unreachable                                   atomic.Uint64
}

// snapshot returns the counters' current values.
func (c *counters) snapshot() Stats {
	return Stats{
		Sent:        c.sent.Load(),
		SendErrors:  c.sendErrors.Load(),
		Dropped:     c.dropped.Load(),
		Queued:      c.queued.Load(),
		Received:    c.received.Load(),
		BadICRC:     c.badICRC.Load(),
		Short:       c.short.Load(),
		Truncated:   c.truncated.Load(),
		Overflow:    c.overflow.Load(),
		Unreachable: c.unreachable.Load(),
	}
}

// Errors Send returns for packets it cannot send. Each is wrapped with the
// details; test for them with errors.Is.
var (
	// ErrShortPacket means a packet is shorter than MinPacket.
	ErrShortPacket = errors.New("rxe/link: packet shorter than a BTH and an ICRC")
	// ErrPacketTooLarge means a packet is longer than the link's
	// MaxPacket.
	ErrPacketTooLarge = errors.New("rxe/link: packet longer than the link carries")
	// ErrAddr means a destination address is invalid, unspecified or of
	// the other IP family than the link's.
	ErrAddr = errors.New("rxe/link: bad destination address")
)

// checkPacket checks that p can be sent from local over a link carrying
// packets of up to max bytes, and returns its destination in plain form.
func checkPacket(p *Packet, local netip.Addr, max int) (netip.Addr, error) {
	dst := p.Addr.Unmap()
	switch {
	case len(p.Buf) < MinPacket:
		return dst, fmt.Errorf("%w: %d bytes", ErrShortPacket, len(p.Buf))
	case len(p.Buf) > max:
		return dst, fmt.Errorf("%w: %d bytes, at most %d", ErrPacketTooLarge, len(p.Buf), max)
	case !dst.IsValid() || dst.IsUnspecified() || dst.Is4() != local.Is4():
		return dst, fmt.Errorf("%w: %v from %v", ErrAddr, p.Addr, local)
	}
	return dst, nil
}

// pseudoHeader returns the pseudo header of a packet sent from local's
// UDP port srcPort to peer's port dstPort, by a sender whose IPv4 datagrams
// carry identification id and DF (see the package documentation).
func pseudoHeader(local, peer netip.Addr, srcPort, dstPort, id uint16) wire.PseudoHeader {
	return wire.PseudoHeader{
		Src: local, Dst: peer,
		SrcPort: srcPort, DstPort: dstPort,
		IPv4ID: id, IPv4Flags: wire.IPv4DontFragment,
	}
}

// Unreachable is what a link learns from the network when a packet it
// sent found nobody: the kernel's ICMP "port unreachable" (no RoCE device
// listens at the address), "host unreachable" or "network unreachable",
// with the destination and the start of the packet (its BTH and what
// follows), so that the device can tell which request failed.
type Unreachable func(dst netip.Addr, errno syscall.Errno, pkt []byte)

// Notifier is a link that reports unreachable destinations, on Linux from
// the socket's error queue (IP_RECVERR).
type Notifier interface {
	SetUnreachable(fn Unreachable)
}

// SetUnreachable implements Notifier.
func (u *UDP) SetUnreachable(fn Unreachable) { u.unreachable.Store(&fn) }

// report is one ICMP error on its way to the Unreachable function.
type report struct {
	dst   netip.Addr
	errno syscall.Errno
	pkt   []byte
}
