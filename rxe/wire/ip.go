package wire

import (
	"encoding/binary"
	"errors"
	"fmt"
	"net/netip"
)

// UDPPort is the destination UDP port of RoCEv2 (IANA "roce").
const UDPPort = 4791

// IP and UDP header lengths.
const (
	IPv4MinLen = 20
	IPv6Len    = 40
	UDPLen     = 8
	protoUDP   = 17
)

// IPv4 flag bits, in the 16-bit flags-and-fragment-offset field.
const (
	IPv4DontFragment  = 0x4000
	ipv4MoreFragments = 0x2000
	ipv4FragOffMask   = 0x1fff
)

// ErrNotUDP is returned by ParseDatagram for an IP packet that does not carry
// a whole UDP datagram (another protocol, or a fragment).
var ErrNotUDP = errors.New("rxe/wire: not a UDP datagram")

// Datagram is an IPv4 or IPv6 packet carrying UDP, as ParseDatagram finds
// it: views of the IP header, the UDP header and the UDP payload.
type Datagram struct {
	IP       []byte // the IP header (IPv4 with its options; IPv6 without extension headers)
	UDP      []byte // the 8-byte UDP header
	Payload  []byte // the UDP payload, trimmed to the UDP length
	Src, Dst netip.Addr
}

// SrcPort returns the UDP source port.
func (d *Datagram) SrcPort() uint16 { return binary.BigEndian.Uint16(d.UDP[0:]) }

// DstPort returns the UDP destination port.
func (d *Datagram) DstPort() uint16 { return binary.BigEndian.Uint16(d.UDP[2:]) }

// IsIPv4 reports whether the datagram came in IPv4.
func (d *Datagram) IsIPv4() bool { return d.IP[0]>>4 == 4 }

// IPv4ID returns the IPv4 identification field (0 for IPv6).
func (d *Datagram) IPv4ID() uint16 {
	if !d.IsIPv4() {
		return 0
	}
	return binary.BigEndian.Uint16(d.IP[4:])
}

// IPv4Flags returns the IPv4 flags-and-fragment-offset field (0 for IPv6).
func (d *Datagram) IPv4Flags() uint16 {
	if !d.IsIPv4() {
		return 0
	}
	return binary.BigEndian.Uint16(d.IP[6:])
}

// ParseDatagram parses b, an IPv4 or IPv6 packet, down to its UDP payload.
// Bytes past the IP total length (link-layer padding) are ignored. It fails
// with ErrTruncated on short input, ErrNotUDP for other protocols and
// fragments, and ErrLength when the length fields disagree. It does not
// verify the IPv4 header checksum or the UDP checksum.
func ParseDatagram(b []byte) (Datagram, error) {
	var d Datagram
	if len(b) < 1 {
		return d, fmt.Errorf("%w: empty IP packet", ErrTruncated)
	}
	var rest []byte
	switch b[0] >> 4 {
	case 4:
		if len(b) < IPv4MinLen {
			return d, fmt.Errorf("%w: %d bytes of IPv4 header", ErrTruncated, len(b))
		}
		ihl := int(b[0]&0x0f) * 4
		total := int(binary.BigEndian.Uint16(b[2:]))
		if ihl < IPv4MinLen || total < ihl {
			return d, fmt.Errorf("%w: IPv4 header length %d, total length %d", ErrLength, ihl, total)
		}
		if len(b) < total {
			return d, fmt.Errorf("%w: IPv4 total length %d, have %d bytes", ErrTruncated, total, len(b))
		}
		if b[9] != protoUDP {
			return d, fmt.Errorf("%w: IPv4 protocol %d", ErrNotUDP, b[9])
		}
		if ff := binary.BigEndian.Uint16(b[6:]); ff&(ipv4MoreFragments|ipv4FragOffMask) != 0 {
			return d, fmt.Errorf("%w: IPv4 fragment", ErrNotUDP)
		}
		d.IP = b[:ihl:ihl]
		d.Src = netip.AddrFrom4([4]byte(b[12:16]))
		d.Dst = netip.AddrFrom4([4]byte(b[16:20]))
		rest = b[ihl:total]
	case 6:
		if len(b) < IPv6Len {
			return d, fmt.Errorf("%w: %d bytes of IPv6 header", ErrTruncated, len(b))
		}
		plen := int(binary.BigEndian.Uint16(b[4:]))
		if len(b) < IPv6Len+plen {
			return d, fmt.Errorf("%w: IPv6 payload length %d, have %d bytes", ErrTruncated, plen, len(b)-IPv6Len)
		}
		if b[6] != protoUDP {
			return d, fmt.Errorf("%w: IPv6 next header %d", ErrNotUDP, b[6])
		}
		d.IP = b[:IPv6Len:IPv6Len]
		d.Src = netip.AddrFrom16([16]byte(b[8:24]))
		d.Dst = netip.AddrFrom16([16]byte(b[24:40]))
		rest = b[IPv6Len : IPv6Len+plen]
	default:
		return d, fmt.Errorf("%w: IP version %d", ErrNotUDP, b[0]>>4)
	}
	if len(rest) < UDPLen {
		return Datagram{}, fmt.Errorf("%w: %d bytes of UDP header", ErrTruncated, len(rest))
	}
	ulen := int(binary.BigEndian.Uint16(rest[4:]))
	if ulen < UDPLen || ulen > len(rest) {
		return Datagram{}, fmt.Errorf("%w: UDP length %d in %d bytes", ErrLength, ulen, len(rest))
	}
	d.UDP = rest[:UDPLen:UDPLen]
	d.Payload = rest[UDPLen:ulen:ulen]
	return d, nil
}
