package pcap

import (
	"encoding/binary"
	"errors"
	"fmt"
)

// EtherType values returned by [Decode] for the common network protocols.
const (
	EtherTypeIPv4 uint16 = 0x0800
	EtherTypeARP  uint16 = 0x0806
	EtherTypeIPv6 uint16 = 0x86dd
)

// VLAN tag protocol identifiers skipped by [Decode] in Ethernet frames.
const (
	etherTypeVLAN     = 0x8100 // IEEE 802.1Q
	etherTypeQinQ     = 0x88a8 // IEEE 802.1ad service tag
	etherTypeQinQOld  = 0x9100 // pre-standard double tagging
	maxEtherLength    = 1500   // type/length values up to this are 802.3 lengths
	ethernetHeaderLen = 14
	vlanTagLen        = 4
	linuxSLLLen       = 16
	linuxSLL2Len      = 20
	loopbackHeaderLen = 4
)

// BSD address families that denote IPv4 and IPv6 in Null and Loop headers.
// AF_INET6 differs between systems: 10 (Linux), 24 (OpenBSD, NetBSD),
// 28 (FreeBSD, DragonFly) and 30 (Darwin).
const afInet = 2

// ErrShortFrame is wrapped by the error [Decode] returns when a frame is too
// short to hold its link-layer header.
var ErrShortFrame = errors.New("frame too short for link-layer header")

// ErrUnsupportedLinkType is wrapped by the error [Decode] returns for a link
// type it cannot decode.
var ErrUnsupportedLinkType = errors.New("unsupported link type")

// Decode strips the link-layer header of a frame captured with link type lt
// and returns the network-layer protocol, as an EtherType, and the packet
// that follows the header. payload aliases frame.
//
//   - Ethernet: proto is the EtherType after any VLAN tags (0x8100, 0x88a8,
//     0x9100). An IEEE 802.3 frame whose type field is a length is decoded
//     through its LLC/SNAP header if it has one; otherwise proto is 0 and
//     payload is the LLC packet. The payload may include Ethernet padding
//     and a frame check sequence.
//   - Null (host byte order) and Loop (big-endian): the address family
//     AF_INET (2) maps to 0x0800 and AF_INET6 (10, 24, 28, 30) to 0x86DD;
//     any other family gives proto 0.
//   - Raw: proto is 0x0800 or 0x86DD according to the IP version in the
//     first nibble, or 0 for another version.
//   - IPv4, IPv6: proto is 0x0800 or 0x86DD and payload is the whole frame.
//   - Linux cooked capture v1 (16-byte header, protocol at bytes 14-15) and
//     v2 (20-byte header, protocol at bytes 0-1): proto is the header's
//     protocol field. Values below 0x0600 are Linux ETH_P_* numbers rather
//     than EtherTypes (for example 0x0004 for an 802.2 LLC payload).
//
// Decode returns an error wrapping [ErrShortFrame] if the frame is too short
// for its link-layer header, and one wrapping [ErrUnsupportedLinkType] for
// any other link type. It never panics.
func Decode(lt LinkType, frame []byte) (proto uint16, payload []byte, err error) {
	switch lt {
	case LinkTypeEthernet:
		return decodeEthernet(frame)
	case LinkTypeNull:
		if len(frame) < loopbackHeaderLen {
			return 0, nil, shortFrame(lt, len(frame), loopbackHeaderLen)
		}
		// The family is in the capturing host's byte order. Families are
		// small numbers, so the value was written big-endian if its first
		// two bytes are zero.
		af := binary.LittleEndian.Uint32(frame)
		if af&0xffff == 0 {
			af = binary.BigEndian.Uint32(frame)
		}
		return addressFamily(af), frame[loopbackHeaderLen:], nil
	case LinkTypeLoop:
		if len(frame) < loopbackHeaderLen {
			return 0, nil, shortFrame(lt, len(frame), loopbackHeaderLen)
		}
		return addressFamily(binary.BigEndian.Uint32(frame)), frame[loopbackHeaderLen:], nil
	case LinkTypeRaw:
		if len(frame) < 1 {
			return 0, nil, shortFrame(lt, len(frame), 1)
		}
		switch frame[0] >> 4 {
		case 4:
			return EtherTypeIPv4, frame, nil
		case 6:
			return EtherTypeIPv6, frame, nil
		}
		return 0, frame, nil
	case LinkTypeIPv4:
		return EtherTypeIPv4, frame, nil
	case LinkTypeIPv6:
		return EtherTypeIPv6, frame, nil
	case LinkTypeLinuxSLL:
		if len(frame) < linuxSLLLen {
			return 0, nil, shortFrame(lt, len(frame), linuxSLLLen)
		}
		return binary.BigEndian.Uint16(frame[14:]), frame[linuxSLLLen:], nil
	case LinkTypeLinuxSLL2:
		if len(frame) < linuxSLL2Len {
			return 0, nil, shortFrame(lt, len(frame), linuxSLL2Len)
		}
		return binary.BigEndian.Uint16(frame[0:]), frame[linuxSLL2Len:], nil
	}
	return 0, nil, fmt.Errorf("pcap: %w %v", ErrUnsupportedLinkType, lt)
}

// decodeEthernet strips an Ethernet header and any VLAN tags.
func decodeEthernet(frame []byte) (uint16, []byte, error) {
	if len(frame) < ethernetHeaderLen {
		return 0, nil, shortFrame(LinkTypeEthernet, len(frame), ethernetHeaderLen)
	}
	typ := binary.BigEndian.Uint16(frame[12:])
	rest := frame[ethernetHeaderLen:]
	for typ == etherTypeVLAN || typ == etherTypeQinQ || typ == etherTypeQinQOld {
		if len(rest) < vlanTagLen {
			return 0, nil, fmt.Errorf("pcap: %w: truncated VLAN tag in %d-byte Ethernet frame", ErrShortFrame, len(frame))
		}
		typ = binary.BigEndian.Uint16(rest[2:])
		rest = rest[vlanTagLen:]
	}
	if typ > maxEtherLength {
		return typ, rest, nil
	}
	// IEEE 802.3 with a length field: trim to it, then look for SNAP
	// (DSAP 0xaa, SSAP 0xaa, control 0x03, OUI 00-00-00, EtherType).
	if int(typ) < len(rest) {
		rest = rest[:typ]
	}
	if len(rest) >= 8 && rest[0] == 0xaa && rest[1] == 0xaa && rest[2] == 0x03 &&
		rest[3] == 0 && rest[4] == 0 && rest[5] == 0 {
		return binary.BigEndian.Uint16(rest[6:]), rest[8:], nil
	}
	return 0, rest, nil
}

// addressFamily maps a BSD address family to an EtherType, or 0.
func addressFamily(af uint32) uint16 {
	switch af {
	case afInet:
		return EtherTypeIPv4
	case 10, 24, 28, 30:
		return EtherTypeIPv6
	}
	return 0
}

// shortFrame returns the error for a frame of n bytes that needs at least
// need bytes of link-layer header.
func shortFrame(lt LinkType, n, need int) error {
	return fmt.Errorf("pcap: %w: %v frame of %d bytes, need %d", ErrShortFrame, lt, n, need)
}
