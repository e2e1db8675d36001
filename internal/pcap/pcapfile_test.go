package pcap

import (
	"encoding/binary"
	"testing"
)

func TestPcapByteOrdersAndResolutions(t *testing.T) {
	tests := []struct {
		name  string
		order byteOrder
		nano  bool
	}{
		{"little-endian microseconds", binary.LittleEndian, false},
		{"big-endian microseconds", binary.BigEndian, false},
		{"little-endian nanoseconds", binary.LittleEndian, true},
		{"big-endian nanoseconds", binary.BigEndian, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f := newPcapFile(tt.order, tt.nano, 65535, uint32(LinkTypeEthernet))
			f.record(1700000000, 123456, []byte("first"), 60)
			f.record(1700000001, 999999, nil, 0)
			f.record(0xfffffff0, 1, []byte("third"), 5) // seconds are unsigned
			scale := int64(1000)
			if tt.nano {
				scale = 1
			}
			wantPackets(t, f.buf, []got{
				{Time: ts(1700000000, 123456*scale), LinkType: LinkTypeEthernet, Data: "first", OrigLen: 60, Offset: 24, Index: 1},
				{Time: ts(1700000001, 999999*scale), LinkType: LinkTypeEthernet, Data: "", OrigLen: 0, Offset: 24 + 16 + 5, Index: 2},
				{Time: ts(0xfffffff0, scale), LinkType: LinkTypeEthernet, Data: "third", OrigLen: 5, Offset: 24 + 16 + 5 + 16, Index: 3},
			})
		})
	}
}

func TestPcapLinkTypeFieldMasksUpperBits(t *testing.T) {
	tests := []struct {
		name  string
		field uint32
		want  LinkType
	}{
		{"plain Ethernet", 1, LinkTypeEthernet},
		{"Ethernet with 4-byte FCS", 0x4<<28 | 0x04000000 | 1, LinkTypeEthernet},
		{"Linux SLL2 with FCS length bit but no F bit", 0x1<<28 | 276, LinkTypeLinuxSLL2},
		{"raw IPv6 with reserved bits set", 0x03ff0000 | 229, LinkTypeIPv6},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f := newPcapFile(binary.LittleEndian, false, 0, tt.field).record(1, 0, []byte("x"), 1)
			ps, _ := readAll(t, f.buf)
			if len(ps) != 1 || ps[0].LinkType != tt.want {
				t.Fatalf("got %+v, want one packet of link type %v", ps, tt.want)
			}
		})
	}
}

func TestPcapCapturedLengthLimits(t *testing.T) {
	big := make([]byte, MaxPacketLen+1)
	tests := []struct {
		name    string
		snaplen uint32
		incl    uint32
		orig    uint32
		data    []byte
		err     string // empty for success
	}{
		{"captured length above original length is accepted", 0, 10, 4, big[:10], ""},
		{"captured length equal to snaplen is accepted", 10, 10, 10, big[:10], ""},
		{"zero snaplen means no limit below the cap", 0, MaxPacketLen, MaxPacketLen, big[:MaxPacketLen], ""},
		{"captured length above snaplen is kept", 10, 11, 11, big[:11], ""},
		{"captured length above the cap is rejected", 0, MaxPacketLen + 1, 0, big, "exceeds maximum 262144"},
		{"huge snaplen does not lift the cap", 0xffffffff, 0xfffffff0, 0, nil, "captured length 4294967280 exceeds maximum"},
		{"huge captured length without data is rejected before reading", 0, 0xffffffff, 0, nil, "exceeds maximum"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f := newPcapFile(binary.BigEndian, false, tt.snaplen, 1)
			f.rawRecord(1, 0, tt.incl, tt.orig, tt.data)
			if tt.err != "" {
				wantError(t, f.buf, 24, tt.err)
				return
			}
			ps, err := readAll(t, f.buf)
			if len(ps) != 1 || len(ps[0].Data) != int(tt.incl) || ps[0].OrigLen != int(tt.orig) {
				t.Fatalf("got %d packets (error %v), want one of %d bytes with OrigLen %d", len(ps), err, tt.incl, tt.orig)
			}
		})
	}
}
