package fabric

import (
	"encoding/binary"
	"fmt"
	"net"
	"net/netip"
)

// Endpoint names in bytes. libfabric's fi_getname and fi_av_insert deal
// in opaque names whose layout the info's address format gives; most
// providers here name endpoints by socket address (netip.AddrPort in this
// API), but an FI_EP_DGRAM endpoint of the verbs provider is named by its
// UD queue pair (UDName, FI_ADDR_IB_UD). These helpers carry names of
// either kind as the bytes C programs exchange.

// UDName is the name of an InfiniBand UD endpoint (libfabric's struct
// ofi_ib_ud_ep_name, address format FI_ADDR_IB_UD): the port's GID, the
// QP number, LID, P_Key, a service number and the service level. Its
// bytes (32, host order as C lays them out on x86) are what the verbs
// provider's fi_getname returns for FI_EP_DGRAM.
type UDName struct {
	GID     [16]byte
	QPN     uint32
	LID     uint16
	PKey    uint16
	Service uint16
	SL      uint8
}

// UDNameLen is the length of a UDName's bytes.
const UDNameLen = 32

// Bytes lays the name out as struct ofi_ib_ud_ep_name.
func (n UDName) Bytes() []byte {
	b := make([]byte, UDNameLen)
	copy(b, n.GID[:])
	binary.LittleEndian.PutUint32(b[16:], n.QPN)
	binary.LittleEndian.PutUint16(b[20:], n.LID)
	binary.LittleEndian.PutUint16(b[22:], n.PKey)
	binary.LittleEndian.PutUint16(b[24:], n.Service)
	b[26] = n.SL
	return b
}

// ParseUDName reads a struct ofi_ib_ud_ep_name.
func ParseUDName(b []byte) (UDName, error) {
	if len(b) < UDNameLen {
		return UDName{}, Errorf("fi_av_insert", ErrInvalid, fmt.Sprintf("an FI_ADDR_IB_UD name is %d bytes, not %d", UDNameLen, len(b)))
	}
	var n UDName
	copy(n.GID[:], b)
	n.QPN = binary.LittleEndian.Uint32(b[16:])
	n.LID = binary.LittleEndian.Uint16(b[20:])
	n.PKey = binary.LittleEndian.Uint16(b[22:])
	n.Service = binary.LittleEndian.Uint16(b[24:])
	n.SL = b[26]
	return n, nil
}

// String prints the name as fi_tostr does:
// "fi_addr_ib_ud://GID:QPN/LID/P_Key/SL", numbers in hex.
func (n UDName) String() string {
	return fmt.Sprintf("fi_addr_ib_ud://%s:%x/%x/%x/%x", netip.AddrFrom16(n.GID), n.QPN, n.LID, n.PKey, n.SL)
}

// RawNamer is implemented by the drivers of endpoints whose names are
// not socket addresses: RawName returns fi_getname's bytes and their
// format.
type RawNamer interface {
	RawName() (AddrFormat, []byte, error)
}

// GetName returns an endpoint's name as fi_getname does, in bytes, with
// its address format: a struct sockaddr_in or sockaddr_in6 for endpoints
// named by socket address, the provider's own layout otherwise (a UDName
// for the verbs provider's FI_EP_DGRAM). Pass the bytes to a peer's
// AV.InsertName. ep is an Endpoint or a PassiveEndpoint.
func GetName(ep any) (AddrFormat, []byte, error) {
	if e, ok := ep.(*Endpoint); ok {
		if err := e.live("fi_getname"); err != nil {
			return FormatUnspec, nil, err
		}
		if r, ok := e.drv.(RawNamer); ok {
			return r.RawName()
		}
	}
	switch e := ep.(type) {
	case interface {
		Name() (netip.AddrPort, error)
	}:
		a, err := e.Name()
		if err != nil {
			return FormatUnspec, nil, err
		}
		f, b := SockaddrBytes(a)
		return f, b, nil
	}
	return FormatUnspec, nil, Errorf("fi_getname", ErrInvalid, "not an endpoint")
}

// SockaddrBytes lays a socket address out as Linux's struct sockaddr_in
// (16 bytes, FI_SOCKADDR_IN) or, for IPv6, struct sockaddr_in6 (28
// bytes, FI_SOCKADDR_IN6, the zone as its scope ID).
func SockaddrBytes(a netip.AddrPort) (AddrFormat, []byte) {
	if ip := a.Addr(); ip.Is4() || ip.Is4In6() {
		b := make([]byte, 16)
		binary.LittleEndian.PutUint16(b, 2) // AF_INET
		binary.BigEndian.PutUint16(b[2:], a.Port())
		v4 := ip.Unmap().As4()
		copy(b[4:], v4[:])
		return FormatSockaddrIn, b
	}
	b := make([]byte, 28)
	binary.LittleEndian.PutUint16(b, 10) // AF_INET6
	binary.BigEndian.PutUint16(b[2:], a.Port())
	ip := a.Addr().As16()
	copy(b[8:], ip[:])
	if z := a.Addr().Zone(); z != "" {
		if ifi, err := net.InterfaceByName(z); err == nil {
			binary.LittleEndian.PutUint32(b[24:], uint32(ifi.Index))
		}
	}
	return FormatSockaddrIn6, b
}

// ParseSockaddr reads a struct sockaddr_in (format FI_SOCKADDR_IN) or
// sockaddr_in6 (FI_SOCKADDR_IN6); FI_SOCKADDR takes either, by family.
func ParseSockaddr(f AddrFormat, b []byte) (netip.AddrPort, error) {
	if len(b) >= 2 && f == FormatSockaddr {
		switch binary.LittleEndian.Uint16(b) {
		case 2:
			f = FormatSockaddrIn
		case 10:
			f = FormatSockaddrIn6
		}
	}
	switch {
	case f == FormatSockaddrIn && len(b) >= 8 && binary.LittleEndian.Uint16(b) == 2:
		return netip.AddrPortFrom(netip.AddrFrom4([4]byte(b[4:8])), binary.BigEndian.Uint16(b[2:])), nil
	case f == FormatSockaddrIn6 && len(b) >= 28 && binary.LittleEndian.Uint16(b) == 10:
		a := netip.AddrFrom16([16]byte(b[8:24]))
		if idx := binary.LittleEndian.Uint32(b[24:]); idx != 0 {
			if ifi, err := net.InterfaceByIndex(int(idx)); err == nil {
				a = a.WithZone(ifi.Name)
			}
		}
		return netip.AddrPortFrom(a, binary.BigEndian.Uint16(b[2:])), nil
	}
	return netip.AddrPort{}, Errorf("fi_av_insert", ErrInvalid, fmt.Sprintf("not a name of format %v: %d bytes", f, len(b)))
}

// isSockaddrFormat reports whether f's names are socket addresses.
func isSockaddrFormat(f AddrFormat) bool {
	return f == FormatSockaddr || f == FormatSockaddrIn || f == FormatSockaddrIn6
}
