package link

import (
	"net"
	"net/netip"
	"os"

	"golang.org/x/sys/unix"
)

// listenGroup opens a UDP socket bound to exactly group:port (the net
// package would bind the wildcard address, which takes unicast packets
// too and collides with the device's own sockets) and joins the group on
// ifi, whose address local is.
func listenGroup(group, local netip.Addr, ifi *net.Interface, port uint16) (*net.UDPConn, error) {
	family := unix.AF_INET6
	if group.Is4() {
		family = unix.AF_INET
	}
	fd, err := unix.Socket(family, unix.SOCK_DGRAM|unix.SOCK_CLOEXEC|unix.SOCK_NONBLOCK, unix.IPPROTO_UDP)
	if err != nil {
		return nil, os.NewSyscallError("socket", err)
	}
	fail := func(call string, err error) (*net.UDPConn, error) {
		unix.Close(fd)
		return nil, os.NewSyscallError(call, err)
	}
	// Several devices and programs on one host may join one group.
	if err := unix.SetsockoptInt(fd, unix.SOL_SOCKET, unix.SO_REUSEADDR, 1); err != nil {
		return fail("setsockopt SO_REUSEADDR", err)
	}
	if group.Is4() {
		if err := unix.Bind(fd, &unix.SockaddrInet4{Port: int(port), Addr: group.As4()}); err != nil {
			return fail("bind", err)
		}
		mreq := &unix.IPMreqn{Multiaddr: group.As4(), Address: local.As4(), Ifindex: int32(ifi.Index)}
		if err := unix.SetsockoptIPMreqn(fd, unix.IPPROTO_IP, unix.IP_ADD_MEMBERSHIP, mreq); err != nil {
			return fail("setsockopt IP_ADD_MEMBERSHIP", err)
		}
	} else {
		if err := unix.Bind(fd, &unix.SockaddrInet6{Port: int(port), Addr: group.As16(), ZoneId: uint32(ifi.Index)}); err != nil {
			return fail("bind", err)
		}
		mreq := &unix.IPv6Mreq{Multiaddr: group.As16(), Interface: uint32(ifi.Index)}
		if err := unix.SetsockoptIPv6Mreq(fd, unix.IPPROTO_IPV6, unix.IPV6_JOIN_GROUP, mreq); err != nil {
			return fail("setsockopt IPV6_JOIN_GROUP", err)
		}
	}
	f := os.NewFile(uintptr(fd), "rdma-mcast")
	defer f.Close() // FilePacketConn duplicates the descriptor
	pc, err := net.FilePacketConn(f)
	if err != nil {
		return nil, err
	}
	return pc.(*net.UDPConn), nil
}
