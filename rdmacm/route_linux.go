package rdmacm

import (
	"net/netip"

	"golang.org/x/sys/unix"
)

// routeSource returns the local address the host's routing table picks to
// reach dst (the source address rdma_resolve_addr finds): that of a UDP
// socket connected to dst, which sends nothing and is closed at once. The
// socket is made with bare system calls, as it is never read: the net
// package would also register it with the runtime's poller and take it
// off again, more than doubling the cost, and a Dial without a local
// address pays it every time. A link-local dst or source, with a zone,
// goes through the net package, which knows the zone's interface.
func routeSource(dst netip.Addr) (netip.Addr, error) {
	if dst.Zone() != "" {
		return routeSourceNet(dst)
	}
	dst = dst.Unmap()
	family := unix.AF_INET6
	var sa unix.Sockaddr = &unix.SockaddrInet6{Port: 4791, Addr: dst.As16()}
	if dst.Is4() {
		family, sa = unix.AF_INET, &unix.SockaddrInet4{Port: 4791, Addr: dst.As4()}
	}
	fd, err := unix.Socket(family, unix.SOCK_DGRAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return netip.Addr{}, err
	}
	defer unix.Close(fd)
	// As the net package's datagram sockets, which may connect to a
	// broadcast address.
	if err := unix.SetsockoptInt(fd, unix.SOL_SOCKET, unix.SO_BROADCAST, 1); err != nil {
		return netip.Addr{}, err
	}
	if err := unix.Connect(fd, sa); err != nil {
		return netip.Addr{}, err
	}
	local, err := unix.Getsockname(fd)
	if err != nil {
		return netip.Addr{}, err
	}
	switch a := local.(type) {
	case *unix.SockaddrInet4:
		return netip.AddrFrom4(a.Addr), nil
	case *unix.SockaddrInet6:
		if a.ZoneId != 0 {
			// A link-local source: the net package names its zone.
			return routeSourceNet(dst)
		}
		return netip.AddrFrom16(a.Addr).Unmap(), nil
	}
	return netip.Addr{}, unix.EAFNOSUPPORT
}
