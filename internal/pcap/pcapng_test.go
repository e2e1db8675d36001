package pcap

import (
	"bytes"
	"encoding/binary"
	"testing"
	"time"
)

func TestPcapngInterfaceTimestamps(t *testing.T) {
	for _, order := range []byteOrder{binary.LittleEndian, binary.BigEndian} {
		t.Run(order.String(), func(t *testing.T) {
			f := newNGFile(order)
			f.idb(LinkTypeEthernet, 0) // default: microseconds
			f.idb(LinkTypeRaw, 0, f.opt(2, []byte("eth1")), f.tsresol(9), f.endOpt())
			f.idb(LinkTypeLinuxSLL, 0, f.tsresol(0x80|10), f.tsoffset(1000))
			f.idb(LinkTypeIPv4, 0, f.tsresol(12), f.opt(3, []byte("description")))
			f.idb(LinkTypeNull, 0, f.tsresol(0), f.tsoffset(-10))
			f.idb(LinkTypeLoop, 0, f.opt(optTSResol, []byte{9, 9}), f.endOpt(), f.tsresol(3)) // malformed, then after the end: ignored
			f.epb(0, 1700000000_123456, []byte("a"), 1)
			f.epb(1, 1700000000_123456789, []byte("bb"), 2)
			f.epb(2, 5<<10|512, []byte("ccc"), 3)
			f.epb(3, 1_000_000_123456_789_012, []byte("dddd"), 4)
			f.epb(4, 20, nil, 0)
			f.epb(5, 7_000001, []byte("f"), 1)
			off := func(i int) int64 { return int64(f.ends[i]) }
			wantPackets(t, f.buf, []got{
				{Time: ts(1700000000, 123456000), LinkType: LinkTypeEthernet, Data: "a", OrigLen: 1, Offset: off(6), Index: 1},
				{Time: ts(1700000000, 123456789), LinkType: LinkTypeRaw, Data: "bb", OrigLen: 2, Offset: off(7), Index: 2, Interface: 1},
				{Time: ts(1005, 500000000), LinkType: LinkTypeLinuxSLL, Data: "ccc", OrigLen: 3, Offset: off(8), Index: 3, Interface: 2},
				{Time: ts(1_000_000, 123456789), LinkType: LinkTypeIPv4, Data: "dddd", OrigLen: 4, Offset: off(9), Index: 4, Interface: 3},
				{Time: ts(10, 0), LinkType: LinkTypeNull, Offset: off(10), Index: 5, Interface: 4},
				{Time: ts(7, 1000), LinkType: LinkTypeLoop, Data: "f", OrigLen: 1, Offset: off(11), Index: 6, Interface: 5},
			})
		})
	}
}

func TestPcapngMultipleSections(t *testing.T) {
	le, be := binary.LittleEndian, binary.BigEndian
	f := newNGFile(le)
	f.idb(LinkTypeEthernet, 0)
	f.idb(LinkTypeRaw, 0)
	f.epb(1, 1, []byte("s1"), 2)
	f.shb(be, f.opt(4, []byte("writer")))
	f.idb(LinkTypeLinuxSLL2, 0, f.tsresol(9))
	f.epb(0, 2, []byte("s2"), 2)
	f.shb(le)
	f.idb(LinkTypeIPv6, 0)
	f.idb(LinkTypeNull, 0)
	f.pb(1, 3, []byte("s3"), 2)
	wantPackets(t, f.buf, []got{
		{Time: ts(0, 1000), LinkType: LinkTypeRaw, Data: "s1", OrigLen: 2, Offset: int64(f.ends[2]), Index: 1, Interface: 1},
		{Time: ts(0, 2), LinkType: LinkTypeLinuxSLL2, Data: "s2", OrigLen: 2, Offset: int64(f.ends[5]), Index: 2},
		{Time: ts(0, 3000), LinkType: LinkTypeNull, Data: "s3", OrigLen: 2, Offset: int64(f.ends[9]), Index: 3, Interface: 1},
	})
}

func TestPcapngNewSectionForgetsInterfaces(t *testing.T) {
	f := newNGFile(binary.LittleEndian)
	f.idb(LinkTypeEthernet, 0)
	f.idb(LinkTypeEthernet, 0)
	f.epb(1, 0, []byte("ok"), 2)
	f.shb(binary.BigEndian)
	f.idb(LinkTypeEthernet, 0)
	at := len(f.buf)
	f.epb(1, 0, []byte("bad"), 3)
	wantError(t, f.buf, int64(at), "enhanced packet block refers to undefined interface 1 (section has 1)")
}

// zeroTime is got.Time for a packet without a timestamp.
var zeroTime = time.Time{}.Format(time.RFC3339Nano)

func TestPcapngSimpleAndObsoletePacketBlocks(t *testing.T) {
	f := newNGFile(binary.BigEndian)
	f.idb(LinkTypeEthernet, 8)
	f.idb(LinkTypeRaw, 0, f.tsresol(6))
	f.spb(12, []byte("12345678"))      // truncated to the snaplen
	f.spb(3, []byte("abc"))            // shorter than snaplen, padded
	f.spb(100, []byte("wxyz"))         // block shorter than snaplen and length
	f.pb(1, 1_500000, []byte("pb"), 9) // interface 1
	f.pb(0, 2_000000, []byte("p0"), 2)
	wantPackets(t, f.buf, []got{
		{Time: zeroTime, LinkType: LinkTypeEthernet, Data: "12345678", OrigLen: 12, Offset: int64(f.ends[2]), Index: 1},
		{Time: zeroTime, LinkType: LinkTypeEthernet, Data: "abc", OrigLen: 3, Offset: int64(f.ends[3]), Index: 2},
		{Time: zeroTime, LinkType: LinkTypeEthernet, Data: "wxyz", OrigLen: 100, Offset: int64(f.ends[4]), Index: 3},
		{Time: ts(1, 500000000), LinkType: LinkTypeRaw, Data: "pb", OrigLen: 9, Offset: int64(f.ends[5]), Index: 4, Interface: 1},
		{Time: ts(2, 0), LinkType: LinkTypeEthernet, Data: "p0", OrigLen: 2, Offset: int64(f.ends[6]), Index: 5},
	})
}

func TestPcapngSkipsOtherBlocks(t *testing.T) {
	f := newNGFile(binary.LittleEndian)
	f.block(blockNRB, options(f.opt(1, []byte{10, 0, 0, 1, 'h', 0}), f.endOpt())) // name resolution
	f.idb(LinkTypeEthernet, 0)
	f.block(blockISB, make([]byte, 12))                   // interface statistics
	f.block(0x00000bad, []byte("\x00\x00\x00\x01custom")) // custom, copiable
	f.block(0x40000bad, []byte("\x00\x00\x00\x01custom")) // custom, not copiable
	f.block(blockDSB, make([]byte, 40))                   // decryption secrets
	f.block(0x7fffffff, nil)                              // unknown, empty body
	f.block(0x80000001, bytes.Repeat([]byte{0xff}, 4096)) // unknown, local use
	f.epb(0, 0, []byte("packet"), 6)
	f.block(blockISB, make([]byte, 12))
	wantPackets(t, f.buf, []got{
		{Time: ts(0, 0), LinkType: LinkTypeEthernet, Data: "packet", OrigLen: 6, Offset: int64(f.ends[8]), Index: 1},
	})
}

func TestPcapngCorruptBlocks(t *testing.T) {
	tests := []struct {
		name string
		// add appends the corrupt block to a section with one Ethernet
		// interface.
		add func(f *ngFile)
		msg string
	}{
		{"block length below 12", func(f *ngFile) {
			f.rawBlock(blockISB, 8, 8, nil)
		}, "interface statistics block length 8 less than minimum 12"},
		{"block length below the type's minimum", func(f *ngFile) {
			f.rawBlock(blockEPB, 28, 28, make([]byte, 16))
		}, "enhanced packet block length 28 less than minimum 32"},
		{"block length not a multiple of 4", func(f *ngFile) {
			f.rawBlock(blockNRB, 30, 30, make([]byte, 18))
		}, "name resolution block length 30 not a multiple of 4"},
		{"block length above the maximum", func(f *ngFile) {
			f.rawBlock(0x1234, MaxBlockLen+4, MaxBlockLen+4, nil)
		}, "block of type 0x1234 length 16777220 exceeds maximum 16777216"},
		{"huge block length", func(f *ngFile) {
			f.rawBlock(blockEPB, 0xfffffffc, 0xfffffffc, nil)
		}, "exceeds maximum"},
		{"trailing length mismatch", func(f *ngFile) {
			f.rawBlock(blockEPB, 36, 40, f.epbBody(0, 0, 4, []byte("abcd"), 4))
		}, "enhanced packet block trailing length 40 does not match leading length 36"},
		{"trailing length mismatch in skipped block", func(f *ngFile) {
			f.rawBlock(blockISB, 24, 12, make([]byte, 12))
		}, "interface statistics block trailing length 12"},
		{"undefined interface id", func(f *ngFile) {
			f.epb(1, 0, []byte("x"), 1)
		}, "enhanced packet block refers to undefined interface 1 (section has 1)"},
		{"obsolete packet block with undefined interface", func(f *ngFile) {
			f.pb(7, 0, []byte("x"), 1)
		}, "packet block refers to undefined interface 7"},
		{"captured length overruns the block", func(f *ngFile) {
			f.block(blockEPB, f.epbBody(0, 0, 100, []byte("abcdefgh"), 100))
		}, "captured length 100 overruns enhanced packet block of length 40"},
		{"huge captured length", func(f *ngFile) {
			f.block(blockEPB, f.epbBody(0, 0, 0xffffffff, []byte("abcd"), 100))
		}, "captured length 4294967295 overruns enhanced packet block"},
		{"captured length above the packet cap", func(f *ngFile) {
			f.epb(0, 0, make([]byte, MaxPacketLen+4), MaxPacketLen+4)
		}, "captured length 262148 exceeds maximum 262144"},
		{"simple packet above the packet cap", func(f *ngFile) {
			f.spb(MaxPacketLen+4, make([]byte, MaxPacketLen+4))
		}, "captured length 262148 exceeds maximum 262144"},
		{"option overruns the interface description block", func(f *ngFile) {
			opt := f.order.AppendUint16(nil, 2)
			opt = f.order.AppendUint16(opt, 100)
			f.idb(LinkTypeRaw, 0, append(opt, "eth0"...))
		}, "option 2 of length 100 overruns interface description block of length 28"},
		{"if_tsresol beyond 64 bits", func(f *ngFile) {
			f.idb(LinkTypeRaw, 0, f.tsresol(20))
		}, "unsupported if_tsresol 0x14"},
		{"if_tsresol power of two beyond 64 bits", func(f *ngFile) {
			f.idb(LinkTypeRaw, 0, f.tsresol(0x80|64))
		}, "unsupported if_tsresol 0xc0"},
		{"bad byte-order magic in a later section", func(f *ngFile) {
			f.block(blockSHB, []byte("\x01\x02\x03\x04\x01\x00\x00\x00\xff\xff\xff\xff\xff\xff\xff\xff"))
		}, "bad byte-order magic 0x01020304"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f := newNGFile(binary.LittleEndian).idb(LinkTypeEthernet, 0)
			at := len(f.buf)
			tt.add(f)
			wantError(t, f.buf, int64(at), tt.msg)
		})
	}
}

func TestPcapngSimplePacketBlockNeedsInterface(t *testing.T) {
	f := newNGFile(binary.BigEndian).spb(1, []byte("x"))
	wantError(t, f.buf, int64(f.ends[0]), "simple packet block in a section with no interface")
}
