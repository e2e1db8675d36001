package pcap

import (
	"bytes"
	"encoding/binary"
	"errors"
	"testing"
)

// ethFrame returns an Ethernet frame with the given type/length field and
// payload.
func ethFrame(typ uint16, payload []byte) []byte {
	b := []byte{0x02, 0, 0, 0, 0, 1, 0x02, 0, 0, 0, 0, 2}
	b = binary.BigEndian.AppendUint16(b, typ)
	return append(b, payload...)
}

// cat concatenates byte slices.
func cat(parts ...[]byte) []byte {
	var b []byte
	for _, p := range parts {
		b = append(b, p...)
	}
	return b
}

// be16 and be32 encode big-endian integers; le32 encodes little-endian.
func be16(v uint16) []byte { return binary.BigEndian.AppendUint16(nil, v) }
func be32(v uint32) []byte { return binary.BigEndian.AppendUint32(nil, v) }
func le32(v uint32) []byte { return binary.LittleEndian.AppendUint32(nil, v) }

func TestDecode(t *testing.T) {
	ip4 := []byte{0x45, 0, 0, 20, 1, 2, 3, 4}
	ip6 := []byte{0x60, 0, 0, 0, 0, 8, 17, 64}
	sll := func(proto uint16) []byte { // packet type, ARPHRD_ETHER, address
		return cat(be16(0), be16(1), be16(6), []byte{2, 0, 0, 0, 0, 1, 0, 0}, be16(proto))
	}
	sll2 := func(proto uint16) []byte {
		return cat(be16(proto), be16(0), be32(3), be16(1), []byte{4, 6}, []byte{2, 0, 0, 0, 0, 1, 0, 0})
	}
	snap := []byte{0xaa, 0xaa, 0x03, 0, 0, 0}
	stp := []byte{0x42, 0x42, 0x03, 0, 0, 0, 0, 0}
	tests := []struct {
		name    string
		lt      LinkType
		frame   []byte
		proto   uint16
		payload []byte
	}{
		{"Ethernet IPv4", LinkTypeEthernet, ethFrame(0x0800, ip4), 0x0800, ip4},
		{"Ethernet ARP", LinkTypeEthernet, ethFrame(0x0806, []byte{0, 1}), 0x0806, []byte{0, 1}},
		{"Ethernet with empty payload", LinkTypeEthernet, ethFrame(0x86dd, nil), 0x86dd, []byte{}},
		{"Ethernet 802.1Q tag skipped", LinkTypeEthernet, ethFrame(0x8100, cat(be16(0x0064), be16(0x0800), ip4)), 0x0800, ip4},
		{"Ethernet 802.1ad and 802.1Q tags skipped", LinkTypeEthernet, ethFrame(0x88a8, cat(be16(10), be16(0x8100), be16(20), be16(0x86dd), ip6)), 0x86dd, ip6},
		{"Ethernet legacy 0x9100 tag skipped", LinkTypeEthernet, ethFrame(0x9100, cat(be16(10), be16(0x0800), ip4)), 0x0800, ip4},
		{"802.3 SNAP frame", LinkTypeEthernet, ethFrame(uint16(8+len(ip4)), cat(snap, be16(0x0800), ip4)), 0x0800, ip4},
		{"802.3 LLC frame trimmed to its length", LinkTypeEthernet, ethFrame(uint16(len(stp)), cat(stp, make([]byte, 30))), 0, stp},
		{"802.3 length longer than the frame", LinkTypeEthernet, ethFrame(1500, stp), 0, stp},
		{"Null little-endian AF_INET", LinkTypeNull, cat(le32(2), ip4), 0x0800, ip4},
		{"Null big-endian AF_INET", LinkTypeNull, cat(be32(2), ip4), 0x0800, ip4},
		{"Null Linux AF_INET6", LinkTypeNull, cat(le32(10), ip6), 0x86dd, ip6},
		{"Null BSD AF_INET6", LinkTypeNull, cat(le32(24), ip6), 0x86dd, ip6},
		{"Null FreeBSD AF_INET6", LinkTypeNull, cat(be32(28), ip6), 0x86dd, ip6},
		{"Null Darwin AF_INET6", LinkTypeNull, cat(le32(30), ip6), 0x86dd, ip6},
		{"Null unknown family", LinkTypeNull, cat(le32(7), ip4), 0, ip4},
		{"Loop big-endian AF_INET", LinkTypeLoop, cat(be32(2), ip4), 0x0800, ip4},
		{"Loop big-endian AF_INET6", LinkTypeLoop, cat(be32(24), ip6), 0x86dd, ip6},
		{"Loop ignores little-endian families", LinkTypeLoop, cat(le32(2), ip4), 0, ip4},
		{"Raw IPv4", LinkTypeRaw, ip4, 0x0800, ip4},
		{"Raw IPv6", LinkTypeRaw, ip6, 0x86dd, ip6},
		{"Raw unknown version", LinkTypeRaw, []byte{0x50}, 0, []byte{0x50}},
		{"IPv4 link type", LinkTypeIPv4, ip4, 0x0800, ip4},
		{"IPv6 link type", LinkTypeIPv6, ip6, 0x86dd, ip6},
		{"IPv6 link type with empty frame", LinkTypeIPv6, nil, 0x86dd, nil},
		{"Linux cooked v1 IPv4", LinkTypeLinuxSLL, cat(sll(0x0800), ip4), 0x0800, ip4},
		{"Linux cooked v1 802.2 LLC", LinkTypeLinuxSLL, cat(sll(0x0004), stp), 0x0004, stp},
		{"Linux cooked v2 IPv6", LinkTypeLinuxSLL2, cat(sll2(0x86dd), ip6), 0x86dd, ip6},
		{"Linux cooked v2 header only", LinkTypeLinuxSLL2, sll2(0x0806), 0x0806, []byte{}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			proto, payload, err := Decode(tt.lt, tt.frame)
			if err != nil {
				t.Fatalf("Decode: %v", err)
			}
			if proto != tt.proto || !bytes.Equal(payload, tt.payload) {
				t.Errorf("Decode = %#04x % x, want %#04x % x", proto, payload, tt.proto, tt.payload)
			}
		})
	}
}

func TestDecodeRejectsShortFrames(t *testing.T) {
	tests := []struct {
		name  string
		lt    LinkType
		frame []byte
	}{
		{"empty Ethernet frame", LinkTypeEthernet, nil},
		{"Ethernet frame without type", LinkTypeEthernet, make([]byte, 13)},
		{"truncated VLAN tag", LinkTypeEthernet, ethFrame(0x8100, []byte{0, 1, 8})},
		{"truncated inner VLAN tag", LinkTypeEthernet, ethFrame(0x88a8, cat(be16(1), be16(0x8100), be16(2)))},
		{"short Null header", LinkTypeNull, []byte{2, 0, 0}},
		{"short Loop header", LinkTypeLoop, []byte{0, 0}},
		{"empty Raw frame", LinkTypeRaw, nil},
		{"short Linux cooked v1 header", LinkTypeLinuxSLL, make([]byte, 15)},
		{"short Linux cooked v2 header", LinkTypeLinuxSLL2, make([]byte, 19)},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			proto, payload, err := Decode(tt.lt, tt.frame)
			if !errors.Is(err, ErrShortFrame) {
				t.Fatalf("Decode = %#04x, % x, %v; want ErrShortFrame", proto, payload, err)
			}
		})
	}
}

func TestDecodeRejectsUnsupportedLinkTypes(t *testing.T) {
	for _, lt := range []LinkType{105, 127, 0xffff, 0xffffffff} {
		_, _, err := Decode(lt, make([]byte, 64))
		if !errors.Is(err, ErrUnsupportedLinkType) {
			t.Errorf("Decode(%v) error = %v, want ErrUnsupportedLinkType", lt, err)
		}
	}
}

func TestLinkTypeString(t *testing.T) {
	tests := []struct {
		lt   LinkType
		want string
	}{
		{LinkTypeNull, "Null"},
		{LinkTypeEthernet, "Ethernet"},
		{LinkTypeRaw, "Raw"},
		{LinkTypeLoop, "Loop"},
		{LinkTypeLinuxSLL, "LinuxSLL"},
		{LinkTypeIPv4, "IPv4"},
		{LinkTypeIPv6, "IPv6"},
		{LinkTypeLinuxSLL2, "LinuxSLL2"},
		{105, "LinkType(105)"},
	}
	for _, tt := range tests {
		if got := tt.lt.String(); got != tt.want {
			t.Errorf("LinkType(%d).String() = %q, want %q", uint32(tt.lt), got, tt.want)
		}
	}
}
