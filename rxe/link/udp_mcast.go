package link

import (
	"fmt"
	"net"
	"net/netip"
)

// JoinGroup implements Joiner: it opens a socket bound to the group and
// the link's port, a member of the group on the interface that holds the
// link's address. Packets the link sends to the group leave through that
// interface too (see setMulticastInterface).
func (u *UDP) JoinGroup(group netip.Addr) (Link, error) {
	group = group.Unmap()
	if !group.IsMulticast() || group.Is4() != u.local.Is4() {
		return nil, fmt.Errorf("rxe/link: join %v from %v: %w", group, u.local, ErrAddr)
	}
	ifi, err := interfaceOf(u.local)
	if err != nil {
		return nil, fmt.Errorf("rxe/link: join %v: %w", group, err)
	}
	conn, err := listenGroup(group, u.local, ifi, u.port)
	if err != nil {
		return nil, fmt.Errorf("rxe/link: join %v on %s: %w", group, ifi.Name, err)
	}
	g := &UDP{conn: conn, local: group, port: u.port, srcPort: u.port, maxPacket: u.maxPacket, scope: u.scope}
	opt := UDPOptions{RecvBuffer: DefaultSocketBuffer, SendBuffer: DefaultSocketBuffer}
	if raw, err := conn.SyscallConn(); err == nil {
		controlSocket(raw, group.Is4(), &opt) // TOS/TTL reporting and buffers; binding is done
	}
	if err := g.init(&opt, false, false); err != nil {
		conn.Close()
		return nil, fmt.Errorf("rxe/link: join %v: %w", group, err)
	}
	return g, nil
}

// interfaceOf returns the network interface that holds address a, or for
// a loopback address not configured as such (127.0.0.2) the interface
// whose prefix covers it.
func interfaceOf(a netip.Addr) (*net.Interface, error) {
	ifs, err := net.Interfaces()
	if err != nil {
		return nil, err
	}
	a = a.WithZone("")
	var covering *net.Interface
	for i := range ifs {
		addrs, err := ifs[i].Addrs()
		if err != nil {
			continue
		}
		for _, x := range addrs {
			p, err := netip.ParsePrefix(x.String())
			if err != nil {
				continue
			}
			if p.Addr().Unmap() == a {
				return &ifs[i], nil
			}
			if covering == nil && a.IsLoopback() && p.Contains(a) {
				covering = &ifs[i]
			}
		}
	}
	if covering != nil {
		return covering, nil
	}
	return nil, fmt.Errorf("no interface has address %v", a)
}
