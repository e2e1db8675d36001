package pcap

import "strconv"

// LinkType is a capture link-layer header type: one of the LINKTYPE_* values
// registered at https://www.tcpdump.org/linktypes.html.
type LinkType uint32

// Link types understood by [Decode]. Other values may appear in a [Packet];
// Decode reports them as unsupported.
const (
	// LinkTypeNull is BSD loopback encapsulation: a 4-byte address family
	// in the byte order of the capturing host.
	LinkTypeNull LinkType = 0
	// LinkTypeEthernet is an IEEE 802.3 Ethernet header (DIX or 802.3 with
	// LLC), possibly followed by VLAN tags.
	LinkTypeEthernet LinkType = 1
	// LinkTypeRaw is a raw IPv4 or IPv6 packet; the version is given by the
	// first nibble.
	LinkTypeRaw LinkType = 101
	// LinkTypeLoop is OpenBSD loopback encapsulation: a 4-byte big-endian
	// address family.
	LinkTypeLoop LinkType = 108
	// LinkTypeLinuxSLL is the 16-byte Linux "cooked" capture header (v1).
	LinkTypeLinuxSLL LinkType = 113
	// LinkTypeIPv4 is a raw IPv4 packet.
	LinkTypeIPv4 LinkType = 228
	// LinkTypeIPv6 is a raw IPv6 packet.
	LinkTypeIPv6 LinkType = 229
	// LinkTypeLinuxSLL2 is the 20-byte Linux "cooked" capture header (v2).
	LinkTypeLinuxSLL2 LinkType = 276
)

// String returns the name of t, such as "Ethernet", or "LinkType(n)" for a
// link type this package does not know.
func (t LinkType) String() string {
	switch t {
	case LinkTypeNull:
		return "Null"
	case LinkTypeEthernet:
		return "Ethernet"
	case LinkTypeRaw:
		return "Raw"
	case LinkTypeLoop:
		return "Loop"
	case LinkTypeLinuxSLL:
		return "LinuxSLL"
	case LinkTypeIPv4:
		return "IPv4"
	case LinkTypeIPv6:
		return "IPv6"
	case LinkTypeLinuxSLL2:
		return "LinuxSLL2"
	}
	return "LinkType(" + strconv.FormatUint(uint64(t), 10) + ")"
}
