package wire

import (
	"bytes"
	"net/netip"
	"os"
	"path/filepath"
	"testing"
)

// FuzzParse feeds arbitrary bytes to Parse. Errors are fine; panics are
// not. A packet that parses must rebuild byte for byte (pad and ICRC
// aside) from its Headers and Payload, and its views must lie inside it.
func FuzzParse(f *testing.F) {
	for _, op := range validOpCodes() {
		for _, n := range []int{0, 1, 4, 9} {
			b, err := AppendPacket(nil, sampleHeaders(op), samplePayload(op, n))
			if err != nil {
				f.Fatal(err)
			}
			f.Add(b)
		}
	}
	// XRC requests whose XRCETH has its reserved byte set, and one cut
	// inside the XRCETH.
	for _, op := range []OpCode{XRCSendOnly, XRCWriteFirst, XRCReadRequest, XRCCompareSwap} {
		b, err := AppendPacket(nil, sampleHeaders(op), samplePayload(op, 4))
		if err != nil {
			f.Fatal(err)
		}
		b[BTHLen] = 0xff
		f.Add(b)
		f.Add(b[:BTHLen+2])
	}
	for _, d := range goldenDatagrams(f) {
		f.Add(d.Payload)
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		p, err := Parse(b)
		if err != nil {
			return
		}
		h := p.Headers()
		rebuilt, err := AppendPacket(nil, &h, p.Payload)
		if err != nil {
			t.Fatalf("parsed packet does not rebuild: %v", err)
		}
		if len(rebuilt) != len(b) {
			t.Fatalf("rebuilt %d bytes from %d", len(rebuilt), len(b))
		}
		// Reserved bits are not kept, so compare fields, not bytes.
		q, err := Parse(rebuilt)
		if err != nil {
			t.Fatalf("rebuilt packet does not parse: %v", err)
		}
		if q.Headers() != h || !bytes.Equal(q.Payload, p.Payload) {
			t.Fatalf("rebuilt %+v\nfrom %+v", q.Headers(), h)
		}
		_ = p.String()
		ph := PseudoHeader{Src: netip.AddrFrom4([4]byte{10, 0, 0, 1}), Dst: netip.AddrFrom4([4]byte{10, 0, 0, 2}), DstPort: UDPPort}
		ph.SetICRC(rebuilt)
		if _, _, ok := ph.CheckICRCAnyIPv4ID(rebuilt); !ok {
			t.Fatal("own ICRC does not check")
		}
	})
}

// FuzzParseDatagram feeds arbitrary IP packets to ParseDatagram and the
// ICRC routines.
func FuzzParseDatagram(f *testing.F) {
	for _, d := range goldenDatagrams(f) {
		f.Add(d.raw)
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		d, err := ParseDatagram(b)
		if err != nil {
			return
		}
		if len(d.Payload) > len(b) || len(d.UDP) != UDPLen {
			t.Fatalf("views out of bounds: %d/%d", len(d.Payload), len(d.UDP))
		}
		_ = d.CheckICRC()
		ph := d.PseudoHeader()
		_, _, _ = ph.CheckICRCAnyIPv4ID(d.Payload)
	})
}

// goldenDatagram is one RoCEv2 packet of the golden captures of Linux
// Soft-RoCE in testdata/captures (copies of ../shared/interop/captures).
type goldenDatagram struct {
	Datagram
	raw   []byte
	name  string // capture file
	index int    // packet number in the file
}

// goldenDatagrams pulls IPv4 packets out of the golden captures with a
// minimal pcapng walk (the wire package's own tests must not depend on
// internal/pcap, whose tests cover it).
func goldenDatagrams(tb testing.TB) []goldenDatagram {
	files, _ := filepath.Glob("../../testdata/captures/*.pcapng")
	var out []goldenDatagram
	for _, name := range files {
		index := 0
		data, err := os.ReadFile(name)
		if err != nil {
			tb.Fatal(err)
		}
		// Little-endian pcapng of Ethernet frames, as the harness writes.
		for off := 0; off+12 <= len(data); {
			typ := le32(data[off:])
			n := int(le32(data[off+4:]))
			if n < 12 || off+n > len(data) {
				break
			}
			if typ == 6 || typ == 3 || typ == 2 {
				index++
			}
			if typ == 6 && n >= 32 {
				caplen := int(le32(data[off+20:]))
				if 28+caplen <= n {
					frame := data[off+28 : off+28+caplen]
					if len(frame) > 14 && frame[12] == 0x08 && frame[13] == 0x00 {
						if d, err := ParseDatagram(frame[14:]); err == nil && d.DstPort() == UDPPort {
							out = append(out, goldenDatagram{d, frame[14:], filepath.Base(name), index})
						}
					}
				}
			}
			off += n
		}
	}
	if len(out) == 0 {
		tb.Fatal("no RoCEv2 packets found in ../../testdata/captures")
	}
	return out
}

func le32(b []byte) uint32 {
	return uint32(b[0]) | uint32(b[1])<<8 | uint32(b[2])<<16 | uint32(b[3])<<24
}
