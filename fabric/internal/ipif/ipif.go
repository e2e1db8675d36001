// Package ipif lists the host's IP addresses as the socket-based fabric
// providers (tcp, udp, sockets) name them in their fi_info entries: one
// per address of each interface that is up, the fabric named after the
// address's network and the domain after the interface.
package ipif

import (
	"net"
	"net/netip"

	"github.com/rdmago/rdmago/fabric"
)

// Iface is one address of one interface.
type Iface struct {
	Name   string       // the interface's ("lo"), which names the domain
	Addr   netip.Addr   // with the zone of a link-local IPv6 address
	Prefix netip.Prefix // the network, which names the fabric ("127.0.0.1/32" for loopback, as C)
}

// List lists the host's addresses: other interfaces first, loopback
// last, IPv4 before IPv6 within each.
func List() []Iface {
	ifs, err := net.Interfaces()
	if err != nil {
		return nil
	}
	var out, loop []Iface
	for _, ifi := range ifs {
		if ifi.Flags&net.FlagUp == 0 {
			continue
		}
		addrs, _ := ifi.Addrs()
		var v4, v6 []Iface
		for _, a := range addrs {
			ipn, ok := a.(*net.IPNet)
			if !ok {
				continue
			}
			ip, _ := netip.AddrFromSlice(ipn.IP)
			ip = ip.Unmap()
			ones, _ := ipn.Mask.Size()
			if ip.IsLoopback() {
				ones = ip.BitLen() // C names loopback fabrics 127.0.0.1/32
			}
			if ip.Is6() && ip.IsLinkLocalUnicast() {
				ip = ip.WithZone(ifi.Name)
			}
			x := Iface{Name: ifi.Name, Addr: ip, Prefix: netip.PrefixFrom(ip.WithZone(""), ones).Masked()}
			switch {
			case ip.Is4():
				v4 = append(v4, x)
			case ip.IsLinkLocalUnicast():
				v6 = append([]Iface{x}, v6...) // link-local first, as C lists them
			default:
				v6 = append(v6, x)
			}
		}
		if ifi.Flags&net.FlagLoopback != 0 {
			loop = append(append(loop, v4...), v6...)
		} else {
			out = append(append(out, v4...), v6...)
		}
	}
	return append(out, loop...)
}

// Infos lists what a socket provider offers on each of the host's
// addresses that the call of fi_getinfo allows, as C's util providers
// do: with FlagSource, node and service name the local address, and only
// its interface is listed; otherwise a node names the peer, and only the
// interface the host routes it from is listed; the hints' source and
// destination addresses narrow the list further. template makes an
// address's entry; each gets the call's addresses, and a loopback entry
// listed for no peer at all drops FI_REMOTE_COMM, as C lists it.
func Infos(node, service string, flags uint64, hints *fabric.Info, template func(Iface) *fabric.Info) ([]*fabric.Info, error) {
	ad, err := fabric.ResolveAddressing(node, service, flags, hints)
	if err != nil {
		return nil, err
	}
	var out []*fabric.Info
	for _, x := range List() {
		switch {
		case flags&fabric.FlagSource != 0 && node != "" && x.Addr.WithZone("") != ad.Node.WithZone(""),
			flags&fabric.FlagSource == 0 && node != "" && ad.RouteSrc.IsValid() && x.Addr.WithZone("") != ad.RouteSrc.WithZone(""),
			flags&fabric.FlagSource == 0 && ad.Node.IsValid() && ad.Node.Is4() != x.Addr.Is4(),
			hints != nil && hints.SrcAddr.IsValid() && hints.SrcAddr.Addr().WithZone("") != x.Addr.WithZone(""),
			hints != nil && hints.DestAddr.IsValid() && hints.DestAddr.Addr().Is4() != x.Addr.Is4():
			continue
		}
		i := template(x)
		if !ad.Dest.IsValid() && node == "" && service == "" && x.Addr.IsLoopback() {
			i.Caps &^= fabric.CapRemoteComm
		}
		ad.Place(i, x.Addr)
		out = append(out, i)
	}
	return out, nil
}
