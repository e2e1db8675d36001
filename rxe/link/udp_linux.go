package link

import (
	"net"
	"net/netip"
	"os"
	"syscall"

	"golang.org/x/sys/unix"
)

// batchSize is the most packets one recvmmsg or sendmmsg call moves.
const batchSize = 64

// mmsghdr is struct mmsghdr of <sys/socket.h>, which x/sys/unix does not
// define: a message header and the byte count the kernel returns. Go pads
// the struct to its alignment as C does.
type mmsghdr struct {
	Hdr unix.Msghdr
	Len uint32
}

// controlSocket sets up a new socket before it is bound (net.ListenConfig's
// Control hook):
//
//   - path MTU discovery in "do" mode, so that datagrams leave with DF set and
//     IPv4 identification 0, as the ICRC assumes (see the package doc); this
//     one must succeed;
//   - over IPv6, the acceptance of datagrams whose UDP checksum is 0
//     (UDP_NO_CHECK6_RX), which is what Linux rxe sends; this one must
//     succeed too;
//   - ICMP errors for what the socket sends queued for it to read
//     (IP_RECVERR), so that a destination where no RoCE device listens is
//     known at once (see Notifier);
//   - the receipt of the traffic class and hop limit of each datagram, and of
//     the socket's drop count (SO_RXQ_OVFL);
//   - large socket buffers, forced past the system limits when the process
//     may (CAP_NET_ADMIN), and otherwise as large as the limits allow.
func controlSocket(c syscall.RawConn, v4 bool, opt *UDPOptions) error {
	var err error
	what := "IP_MTU_DISCOVER"
	cerr := c.Control(func(fd uintptr) {
		s := int(fd)
		if v4 {
			err = unix.SetsockoptInt(s, unix.IPPROTO_IP, unix.IP_MTU_DISCOVER, unix.IP_PMTUDISC_DO)
			unix.SetsockoptInt(s, unix.IPPROTO_IP, unix.IP_RECVTOS, 1)
			unix.SetsockoptInt(s, unix.IPPROTO_IP, unix.IP_RECVERR, 1)
			unix.SetsockoptInt(s, unix.IPPROTO_IP, unix.IP_RECVTTL, 1)
		} else {
			err = unix.SetsockoptInt(s, unix.IPPROTO_IPV6, unix.IPV6_MTU_DISCOVER, unix.IPV6_PMTUDISC_DO)
			unix.SetsockoptInt(s, unix.IPPROTO_IPV6, unix.IPV6_RECVTCLASS, 1)
			unix.SetsockoptInt(s, unix.IPPROTO_IPV6, unix.IPV6_RECVERR, 1)
			unix.SetsockoptInt(s, unix.IPPROTO_IPV6, unix.IPV6_RECVHOPLIMIT, 1)
			// RoCEv2 senders may leave the UDP checksum 0 over IPv6, as
			// Linux rxe does (the ICRC protects the packet); without
			// this option the kernel drops such datagrams as illegal.
			if err == nil {
				if e := unix.SetsockoptInt(s, unix.IPPROTO_UDP, unix.UDP_NO_CHECK6_RX, 1); e != nil {
					err, what = e, "UDP_NO_CHECK6_RX"
				}
			}
		}
		unix.SetsockoptInt(s, unix.SOL_SOCKET, unix.SO_RXQ_OVFL, 1)
		setBuffer(s, unix.SO_RCVBUFFORCE, unix.SO_RCVBUF, opt.RecvBuffer)
		setBuffer(s, unix.SO_SNDBUFFORCE, unix.SO_SNDBUF, opt.SendBuffer)
	})
	if cerr != nil {
		return cerr
	}
	if err != nil {
		return os.NewSyscallError("setsockopt "+what, err)
	}
	return nil
}

// setBuffer sets a socket buffer to size bytes, with the force option if
// the process has the privilege and the plain one, which the kernel caps,
// otherwise.
func setBuffer(fd, force, plain, size int) {
	if unix.SetsockoptInt(fd, unix.SOL_SOCKET, force, size) != nil {
		unix.SetsockoptInt(fd, unix.SOL_SOCKET, plain, size)
	}
}

// init prepares the batches of a new link, with GSO and GRO if asked for
// and the kernel has them.
func (u *UDP) init(_ *UDPOptions, gso, gro bool) error {
	raw, err := offPoller(u.conn)
	if err != nil {
		return err
	}
	u.sock, u.conn = raw, nil
	u.receiver.init(raw, gro && enableGRO(raw))
	gso = gso && gsoSupported(raw)
	u.sender.init(raw, gso, false)
	u.drainer.init(raw, gso, true)
	u.receiver.drain, u.sender.drain, u.drainer.drain = u.drainErrors, u.drainErrors, u.drainErrors
	u.startReporter()
	u.startDrainer()
	return nil
}

// enableGRO asks the kernel to queue runs of datagrams it has coalesced
// (generic receive offload, and on loopback GSO sends, which it then leaves
// whole) as one datagram with a UDP_GRO control message giving the segment
// size, instead of cutting them up again (UDP_GRO, Linux 5.0). It reports
// whether the kernel agreed.
func enableGRO(raw syscall.RawConn) bool {
	var err error
	if cerr := raw.Control(func(fd uintptr) {
		err = unix.SetsockoptInt(int(fd), unix.SOL_UDP, unix.UDP_GRO, 1)
	}); cerr != nil || err != nil {
		return false
	}
	return true
}

// gsoSupported reports whether the kernel can segment UDP sends (UDP_SEGMENT,
// Linux 4.18). Like quic-go, it wants Linux 5 or later, as earlier kernels
// had bugs in this path.
func gsoSupported(raw syscall.RawConn) bool {
	var err error
	if cerr := raw.Control(func(fd uintptr) {
		_, err = unix.GetsockoptInt(int(fd), unix.IPPROTO_UDP, unix.UDP_SEGMENT)
	}); cerr != nil || err != nil {
		return false
	}
	var uts unix.Utsname
	if unix.Uname(&uts) != nil {
		return false
	}
	major := 0
	for _, c := range uts.Release {
		if c < '0' || c > '9' {
			break
		}
		major = major*10 + int(c-'0')
	}
	return major >= 5
}

// setMulticastInterface makes the socket send multicast out of the
// interface that holds its address, rather than wherever the routing
// table points, and loop it back to members on this host.
func setMulticastInterface(conn *net.UDPConn, local netip.Addr) {
	raw, err := conn.SyscallConn()
	if err != nil {
		return
	}
	ifi, _ := interfaceOf(local)
	raw.Control(func(fd uintptr) {
		s := int(fd)
		if local.Is4() {
			unix.SetsockoptInet4Addr(s, unix.IPPROTO_IP, unix.IP_MULTICAST_IF, local.As4())
			unix.SetsockoptInt(s, unix.IPPROTO_IP, unix.IP_MULTICAST_LOOP, 1)
		} else if ifi != nil {
			unix.SetsockoptInt(s, unix.IPPROTO_IPV6, unix.IPV6_MULTICAST_IF, ifi.Index)
			unix.SetsockoptInt(s, unix.IPPROTO_IPV6, unix.IPV6_MULTICAST_LOOP, 1)
		}
	})
}

// queued returns the length of the next datagram waiting in the
// socket's receive queue (SIOCINQ), 0 when there is none.
func (u *UDP) queued() int {
	n := 0
	u.receiver.raw.Control(func(fd uintptr) {
		n, _ = unix.IoctlGetInt(int(fd), unix.SIOCINQ)
	})
	return n
}
