package link

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/netip"
	"os"
	"strconv"
	"sync"
	"sync/atomic"
	"syscall"

	"github.com/rdmago/rdmago/rxe/wire"
)

// DefaultSocketBuffer is the size the UDP link asks for its socket's receive
// and send buffers when UDPOptions leaves them 0: room for about a thousand
// 4 KiB packets, so that a burst from a fast peer is not lost while the
// receiving goroutine is descheduled. Without privilege the kernel caps it
// at net.core.rmem_max and wmem_max.
const DefaultSocketBuffer = 4 << 20

// Largest UDP payloads: 65535 bytes of IPv4 datagram less a 20-byte IPv4
// header and the UDP header, and 65535 bytes of IPv6 payload less the UDP
// header.
const (
	maxUDPPayload4 = 65535 - wire.IPv4MinLen - wire.UDPLen
	maxUDPPayload6 = 65535 - wire.UDPLen
)

// disableGSOEnv and disableGROEnv name the environment variables that, set
// to 1, keep the UDP link from using UDP generic segmentation offload on
// send and generic receive offload on receive.
const (
	disableGSOEnv = "RDMAGO_DISABLE_GSO"
	disableGROEnv = "RDMAGO_DISABLE_GRO"
)

// UDPOptions tunes a UDP link. The zero value is the default.
type UDPOptions struct {
	// RecvBuffer and SendBuffer are the socket buffer sizes to ask for, in
	// bytes (0 means DefaultSocketBuffer). As root the link forces them
	// past the system's limits (SO_RCVBUFFORCE); otherwise the kernel
	// caps them silently.
	RecvBuffer, SendBuffer int

	// DisableGSO keeps the link from sending runs of packets as one UDP
	// GSO send. Setting the environment variable RDMAGO_DISABLE_GSO=1 does
	// the same for every link.
	DisableGSO bool

	// DisableGRO keeps the link from asking the kernel for runs of
	// packets coalesced into one datagram (UDP_GRO), which it reads
	// whole and cuts up itself. Setting the environment variable
	// RDMAGO_DISABLE_GRO=1 does the same for every link.
	DisableGRO bool
}

// UDP is a Link over a UDP socket bound to one address of the host. On
// Linux it moves packets in batches with recvmmsg and sendmmsg, and runs of
// packets as single UDP GSO sends and GRO datagrams (see the package
// documentation); elsewhere, one packet per system call.
type UDP struct {
	conn      *net.UDPConn
	sock      io.Closer // what Close closes: conn, or the socket taken off the runtime's poller
	local     netip.Addr
	port      uint16 // the RoCEv2 port: packets go to it, and arrive at it
	srcPort   uint16 // the port the socket is bound to: port, or another if it only sends
	scope     uint32 // the interface index of a link-local address
	maxPacket int
	closed    atomic.Bool
	stats     counters
	// unreachable is told of ICMP errors for what the link sent, by a
	// goroutine of its own (see startReporter) fed through reports.
	unreachable atomic.Pointer[Unreachable]
	reports     chan report
	done        chan struct{}
	reporter    sync.WaitGroup
	idSolver    wire.IPv4IDSolver // used by Recv and TryRecv, one goroutine at a time

	// sendMu guards the sender's preallocated batch and the send queue,
	// and serialises Send. The drainer, which sends the queue, has a
	// batch of its own (udp_queue_linux.go).
	sendMu  sync.Mutex
	sender  sender
	queue   sendQueue
	drainer sender
	noGSO   atomic.Bool // the device cannot checksum GSO sends (EIO): send without

	// recvMu guards the receiver's preallocated batch, and serialises
	// Recv and TryRecv.
	recvMu   sync.Mutex
	receiver receiver
}

var _ Link = (*UDP)(nil)

// ListenUDP returns a UDP link bound to exactly addr: a unicast IPv4 or IPv6
// address of this host and a port (wire.UDPPort in production; 0 picks a free
// one). An IPv4-mapped IPv6 address binds as IPv4. If the address is taken,
// the error says so and wraps syscall.EADDRINUSE.
func ListenUDP(addr netip.AddrPort, opt UDPOptions) (*UDP, error) {
	return listenUDP(addr, 0, opt)
}

// listenUDP is ListenUDP, with a sending port of its own if roce is not 0:
// the link then sends from the port it binds (addr's; 0 picks one) to
// peers' port roce, and Port reports roce.
func listenUDP(addr netip.AddrPort, roce uint16, opt UDPOptions) (*UDP, error) {
	ip := addr.Addr().Unmap()
	if !ip.IsValid() || ip.IsUnspecified() || ip.IsMulticast() {
		return nil, fmt.Errorf("rxe/link: cannot bind %v: a link needs one unicast address, which the ICRC covers", addr)
	}
	ap := netip.AddrPortFrom(ip, addr.Port())
	network := "udp6"
	if ip.Is4() {
		network = "udp4"
	}
	if opt.RecvBuffer <= 0 {
		opt.RecvBuffer = DefaultSocketBuffer
	}
	if opt.SendBuffer <= 0 {
		opt.SendBuffer = DefaultSocketBuffer
	}
	lc := net.ListenConfig{Control: func(_, _ string, c syscall.RawConn) error {
		return controlSocket(c, ip.Is4(), &opt)
	}}
	pc, err := lc.ListenPacket(context.Background(), network, ap.String())
	if err != nil {
		return nil, listenError(ap, err)
	}
	return newUDP(pc.(*net.UDPConn), ip, roce, opt)
}

// newUDP makes a link of conn, a UDP socket bound to ip and set up by
// controlSocket (here or, for a socket handed over by another process,
// there); roce is as for listenUDP.
func newUDP(conn *net.UDPConn, ip netip.Addr, roce uint16, opt UDPOptions) (*UDP, error) {
	ap := netip.AddrPortFrom(ip, uint16(conn.LocalAddr().(*net.UDPAddr).Port))
	u := &UDP{
		conn:      conn,
		sock:      conn,
		local:     ip,
		port:      uint16(conn.LocalAddr().(*net.UDPAddr).Port),
		maxPacket: maxUDPPayload6,
	}
	u.srcPort = u.port
	if roce != 0 {
		u.port = roce
	}
	if ip.Is4() {
		u.maxPacket = maxUDPPayload4
	}
	if z := ip.Zone(); z != "" {
		if ifi, err := net.InterfaceByName(z); err == nil {
			u.scope = uint32(ifi.Index)
		} else if n, err := strconv.ParseUint(z, 10, 32); err == nil {
			u.scope = uint32(n)
		}
	}
	gso := !opt.DisableGSO && os.Getenv(disableGSOEnv) != "1"
	gro := !opt.DisableGRO && os.Getenv(disableGROEnv) != "1"
	setMulticastInterface(conn, ip)
	if err := u.init(&opt, gso, gro); err != nil {
		u.sock.Close()
		return nil, fmt.Errorf("rxe/link: set up %v: %w", ap, err)
	}
	return u, nil
}

// listenError explains why binding ap failed.
func listenError(ap netip.AddrPort, err error) error {
	switch {
	case errors.Is(err, syscall.EADDRINUSE):
		return fmt.Errorf("rxe/link: %v is already in use (another RoCE device or Linux Soft-RoCE is bound to it): %w", ap, err)
	case errors.Is(err, syscall.EADDRNOTAVAIL):
		return fmt.Errorf("rxe/link: %v is not an address of this host: %w", ap, err)
	}
	return fmt.Errorf("rxe/link: listen on %v: %w", ap, err)
}

// LocalAddr implements Link.LocalAddr.
func (u *UDP) LocalAddr() netip.Addr { return u.local }

// Port implements Link.Port.
func (u *UDP) Port() uint16 { return u.port }

// MaxPacket implements Link.MaxPacket. It is the largest UDP payload (65507
// bytes over IPv4, 65527 over IPv6); packets longer than the path MTU fail
// to send, since the link never fragments.
func (u *UDP) MaxPacket() int { return u.maxPacket }

// Stats implements Link.Stats.
func (u *UDP) Stats() Stats { return u.stats.snapshot() }

// Send implements Link.Send.
func (u *UDP) Send(pkts []Packet) error {
	if u.closed.Load() {
		return net.ErrClosed
	}
	return u.transmit(pkts)
}

// Recv implements Link.Recv.
func (u *UDP) Recv(pkts []Packet) (int, error) {
	if u.closed.Load() {
		return 0, net.ErrClosed
	}
	if len(pkts) == 0 {
		return 0, nil
	}
	u.recvMu.Lock()
	defer u.recvMu.Unlock()
	return u.recv(pkts)
}

// Close implements Link.Close. It closes the socket, which unblocks Recv and
// Send.
func (u *UDP) Close() error {
	if u.closed.Swap(true) {
		return nil
	}
	err := u.sock.Close()
	if u.done != nil {
		close(u.done)
		u.reporter.Wait()
	}
	return err
}

// peer checks that p can be sent and returns its destination in plain
// form.
func (u *UDP) peer(p *Packet) (netip.Addr, error) {
	return checkPacket(p, u.local, u.maxPacket)
}

// accept reports whether pkt, received from from, is a packet to hand up:
// long enough and with a good ICRC. It counts those it rejects.
func (u *UDP) accept(pkt []byte, from netip.AddrPort) bool {
	if len(pkt) < MinPacket {
		u.stats.short.Add(1)
		return false
	}
	ph := wire.PseudoHeader{Src: from.Addr(), Dst: u.local, SrcPort: from.Port(), DstPort: u.port}
	var ok bool
	if u.local.Is4() {
		_, _, ok = u.idSolver.Check(&ph, pkt)
	} else {
		ok = ph.CheckICRC(pkt)
	}
	if !ok {
		u.stats.badICRC.Add(1)
	}
	return ok
}

// closedError returns net.ErrClosed if err comes from the socket having been
// closed, and err otherwise.
func closedError(err error) error {
	if errors.Is(err, net.ErrClosed) {
		return net.ErrClosed
	}
	return err
}
