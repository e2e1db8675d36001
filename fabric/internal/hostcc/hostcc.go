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
// Linux lets any process choose unless the administrator restricted
// net.ipv4.tcp_allowed_congestion_control, and which on a connection that
// never loses a segment stays in slow start as cubic does. Connections
// to other hosts keep the system's choice. C libfabric's tcp provider
// leaves the system's choice on every connection.
//
// The environment variable RDMAGO_LOCAL_TCP_CC changes what is asked for:
// "system" keeps the system's choice on these connections too, and any
// other value names the congestion control to ask for instead of reno
// (one the kernel refuses leaves the system's choice, as a refusal of
// reno does).
package hostcc

import (
	"net"
	"net/netip"
	"os"

	"golang.org/x/sys/unix"
)

// Local is the congestion control asked for on connections to the host
// itself, unless RDMAGO_LOCAL_TCP_CC says otherwise.
const Local = "reno"

// Env is the environment variable that overrides Local ("system": ask
// for nothing).
const Env = "RDMAGO_LOCAL_TCP_CC"

// IsLocal reports whether a connection from local to peer stays on this
// host: either end is a loopback address, or the peer is an address of
// this host (Linux routes a connection to any of its own addresses
// through the loopback device).
func IsLocal(local, peer netip.Addr) bool {
	local, peer = local.Unmap(), peer.Unmap()
	if local.IsLoopback() || peer.IsLoopback() || peer.WithZone("") == local.WithZone("") {
		return true
	}
	return isHostAddr(peer)
}

// isHostAddr reports whether a is one of this host's addresses.
func isHostAddr(a netip.Addr) bool {
	addrs, err := net.InterfaceAddrs()
	if err != nil {
		return false
	}
	a = a.WithZone("")
	for _, x := range addrs {
		if ipn, ok := x.(*net.IPNet); ok {
			if ip, ok := netip.AddrFromSlice(ipn.IP); ok && ip.Unmap() == a {
				return true
			}
		}
	}
	return false
}

// Want returns the congestion control to ask for on connections to the
// host itself: Local, or what RDMAGO_LOCAL_TCP_CC names ("" for
// "system": none).
func Want() string {
	v, ok := os.LookupEnv(Env)
	switch {
	case !ok || v == "":
		return Local
	case v == "system":
		return ""
	}
	return v
}

// Set asks for Want() on the connected TCP socket fd if the connection
// from local to peer stays on this host, and reports whether it did. A
// refusal (a kernel without it, an administrator's restriction) leaves
// the socket as it was: the choice is about speed only.
func Set(fd int, local, peer netip.Addr) bool {
	cc := Want()
	if cc == "" || !IsLocal(local, peer) {
		return false
	}
	return unix.SetsockoptString(fd, unix.IPPROTO_TCP, unix.TCP_CONGESTION, cc) == nil
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
