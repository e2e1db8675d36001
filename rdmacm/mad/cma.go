package mad

import (
	"encoding/binary"
	"fmt"
	"net/netip"
)

// PortSpace is an rdma_cm port space (enum rdma_ucm_port_space): the
// namespace of the port numbers in a service ID.
type PortSpace uint16

// rdma_cm port spaces. The IP ones are 0x01 followed by the IP protocol
// number, as in the RDMA IP CM Service (IBTA vol. 1 Annex A11).
const (
	PortSpaceIPoIB PortSpace = 0x0002 // RDMA_PS_IPOIB
	PortSpaceTCP   PortSpace = 0x0106 // RDMA_PS_TCP: RC connections
	PortSpaceUDP   PortSpace = 0x0111 // RDMA_PS_UDP: UD, via SIDR
	PortSpaceIB    PortSpace = 0x013F // RDMA_PS_IB: any QP type
)

// String returns the port space's name ("TCP", "UDP", "IB", "IPoIB"), or
// its value in hex.
func (ps PortSpace) String() string {
	switch ps {
	case PortSpaceIPoIB:
		return "IPoIB"
	case PortSpaceTCP:
		return "TCP"
	case PortSpaceUDP:
		return "UDP"
	case PortSpaceIB:
		return "IB"
	}
	return fmt.Sprintf("PortSpace(0x%04x)", uint16(ps))
}

// ServiceID is a 64-bit CM service ID. rdma_cm forms the service IDs of IP
// addresses as (port space << 16) + port (cma_get_service_id); the rping
// capture's is 0x0000000001061c06, TCP port 7174.
type ServiceID uint64

// MakeServiceID returns rdma_cm's service ID for port in port space ps.
func MakeServiceID(ps PortSpace, port uint16) ServiceID {
	return ServiceID(uint64(ps)<<16 | uint64(port))
}

// Split returns the port space and port of an rdma_cm service ID. ok is
// false if the top 32 bits are not zero or the port space is not one of
// the four rdma_cm defines; ps and port are then those bits anyway.
func (id ServiceID) Split() (ps PortSpace, port uint16, ok bool) {
	ps, port = PortSpace(id>>16), uint16(id)
	switch ps {
	case PortSpaceIPoIB, PortSpaceTCP, PortSpaceUDP, PortSpaceIB:
		ok = id>>32 == 0
	}
	return ps, port, ok
}

// String returns "TCP:7174" for an rdma_cm service ID, the ID in hex
// otherwise.
func (id ServiceID) String() string {
	if ps, port, ok := id.Split(); ok {
		return fmt.Sprintf("%s:%d", ps, port)
	}
	return fmt.Sprintf("0x%016x", uint64(id))
}

// CMAVersion is the version of rdma_cm's private-data header.
const CMAVersion = 0

// CMAHeaderLen is the size of rdma_cm's private-data header.
const CMAHeaderLen = 36

// User private data sizes left by the rdma_cm header.
const (
	REQUserPrivateDataLen     = REQPrivateDataLen - CMAHeaderLen     // 56
	SIDRREQUserPrivateDataLen = SIDRREQPrivateDataLen - CMAHeaderLen // 180
)

// CMAHeader is the header rdma_cm puts at the start of the private data of
// a REQ or SIDR_REQ for an IP address (struct cma_hdr in Linux
// drivers/infiniband/core/cma.c):
//
//	byte 0      cma_version, 0
//	byte 1      IP version (4 or 6) in the upper nibble
//	bytes 2-3   port, big endian
//	bytes 4-19  source address (IPv4 in bytes 16-19, the rest zero)
//	bytes 20-35 destination address (IPv4 in bytes 32-35)
//
// The addresses are the active side's (Src) and the passive side's (Dst);
// the passive side's port is in the service ID.
type CMAHeader struct {
	Port uint16     // the active side's source port
	Src  netip.Addr // both IPv4 or both IPv6
	Dst  netip.Addr
}

// IPVersion returns 4 or 6, the version the header's Src gives, or 0 if Src
// is not valid.
func (h *CMAHeader) IPVersion() int {
	switch {
	case h.Src.Is4():
		return 4
	case h.Src.Is6():
		return 6
	}
	return 0
}

const (
	cmaVersion = 0
	cmaIPVer   = 1
	cmaPort    = 2
	cmaSrc     = 4
	cmaDst     = 20
)

// ParseCMAHeader parses the rdma_cm header at the start of b, the private
// data of a REQ or SIDR_REQ, and returns it with the rest of b, the
// application's private data. It fails on a header shorter than 36 bytes,
// with [ErrCMAVersion] for a version other than 0 and with [ErrIPVersion]
// for an IP version other than 4 or 6, as Linux does. For IPv4 it ignores
// the 12 bytes before each address, as Linux does.
func ParseCMAHeader(b []byte) (CMAHeader, []byte, error) {
	var h CMAHeader
	if len(b) < CMAHeaderLen {
		return h, nil, fmt.Errorf("%w: rdma_cm header needs %d bytes of private data, have %d", ErrLength, CMAHeaderLen, len(b))
	}
	if v := b[cmaVersion]; v != CMAVersion {
		return h, nil, fmt.Errorf("%w %d at private data byte %d, want %d", ErrCMAVersion, v, cmaVersion, CMAVersion)
	}
	h.Port = binary.BigEndian.Uint16(b[cmaPort:])
	switch v := b[cmaIPVer] >> 4; v {
	case 4:
		h.Src = netip.AddrFrom4([4]byte(b[cmaSrc+12:]))
		h.Dst = netip.AddrFrom4([4]byte(b[cmaDst+12:]))
	case 6:
		h.Src = netip.AddrFrom16([16]byte(b[cmaSrc:]))
		h.Dst = netip.AddrFrom16([16]byte(b[cmaDst:]))
	default:
		return CMAHeader{}, nil, fmt.Errorf("%w %d at private data byte %d, want 4 or 6", ErrIPVersion, v, cmaIPVer)
	}
	return h, b[CMAHeaderLen:], nil
}

// Append appends the 36-byte header to b. It fails with [ErrIPVersion],
// leaving b as it was, unless Src and Dst are both IPv4 or both IPv6
// (IPv4-mapped IPv6 addresses count as IPv6; zones are dropped).
func (h *CMAHeader) Append(b []byte) ([]byte, error) {
	v := h.IPVersion()
	if v == 0 || !h.Dst.IsValid() || h.Dst.Is4() != (v == 4) {
		return b, fmt.Errorf("%w: source %v and destination %v must both be IPv4 or both IPv6", ErrIPVersion, h.Src, h.Dst)
	}
	b, p := grow(b, CMAHeaderLen)
	p[cmaVersion] = CMAVersion
	p[cmaIPVer] = byte(v) << 4
	binary.BigEndian.PutUint16(p[cmaPort:], h.Port)
	if v == 4 {
		s, d := h.Src.As4(), h.Dst.As4()
		copy(p[cmaSrc+12:], s[:])
		copy(p[cmaDst+12:], d[:])
	} else {
		s, d := h.Src.As16(), h.Dst.As16()
		copy(p[cmaSrc:], s[:])
		copy(p[cmaDst:], d[:])
	}
	return b, nil
}

// setCMAPrivateData writes h, data and zero padding to pd.
func setCMAPrivateData(pd []byte, h *CMAHeader, data []byte) error {
	if n := len(pd) - CMAHeaderLen; len(data) > n {
		return fmt.Errorf("%w: %d bytes of private data after the rdma_cm header, room for %d", ErrLength, len(data), n)
	}
	hdr, err := h.Append(make([]byte, 0, CMAHeaderLen))
	if err != nil {
		return err
	}
	copy(pd, hdr)
	n := copy(pd[CMAHeaderLen:], data)
	clear(pd[CMAHeaderLen+n:])
	return nil
}
