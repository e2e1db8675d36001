// Package hostcc picks the congestion control of the TCP connections the
// socket-based fabric providers (tcp, sockets) make to their own host.
//
// A connection whose two ends are on one host crosses no network: there
// is no queue to keep short and no flow to share with, so congestion
// control has nothing to do on it, and one that paces (BBR, the default
// of some systems) only slows it. A paced sender does not hand a large
// message to the loopback device in its own system call: the kernel
// sends the segments past its pacing budget later, from a timer, and the
// delivery to the receiving socket that each send carries on loopback
// goes with them, to whichever CPU the timer fires on. On a machine whose
// default is bbr, a ping-pong of 1 MiB messages between two processes of
// plain poll and read moved 3.1 GB/s with bbr and 8.6 to 9.2 GB/s with
// reno, and iperf3 over loopback 20 and 60 Gbit/s; 64 KiB and 256 KiB
// messages, which fit the pacing budget, were the same with both.
//
// So for a connection to its own host a provider asks for reno, which
// Linux lets any process choose (net.ipv4.tcp_allowed_congestion_control
// always holds it), and which on a connection that never loses a
// segment behaves as cubic does. Connections to other hosts keep the
// system's choice. C libfabric's tcp provider leaves the system's choice
// on every connection.
package hostcc

import (
	"net"
	"net/netip"

	"golang.org/x/sys/unix"
)

// Local is the congestion control asked for on connections to the host
// itself.
const Local = "reno"

// IsLocal reports whether a connection from local to peer stays on this
// host: the peer is a loopback address, or the connection's own address
// (which Linux routes through the loopback device too).
func IsLocal(local, peer netip.Addr) bool {
	local, peer = local.Unmap(), peer.Unmap()
	return peer.IsLoopback() || peer == local
}

// Set asks for Local on the connected TCP socket fd if the connection
// from local to peer stays on this host, and reports whether it did. A
// refusal (a kernel without reno, a seccomp filter) leaves the socket as
// it was: the choice is about speed only.
func Set(fd int, local, peer netip.Addr) bool {
	if !IsLocal(local, peer) {
		return false
	}
	return unix.SetsockoptString(fd, unix.IPPROTO_TCP, unix.TCP_CONGESTION, Local) == nil
}

// SetConn is Set for a connection of the net package.
func SetConn(c *net.TCPConn) bool {
	local, ok1 := c.LocalAddr().(*net.TCPAddr)
	peer, ok2 := c.RemoteAddr().(*net.TCPAddr)
	raw, err := c.SyscallConn()
	if !ok1 || !ok2 || err != nil {
		return false
	}
	set := false
	raw.Control(func(fd uintptr) { set = Set(int(fd), local.AddrPort().Addr(), peer.AddrPort().Addr()) })
	return set
}
