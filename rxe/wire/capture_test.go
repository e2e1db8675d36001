package wire

import (
	"bytes"
	"encoding/binary"
	"testing"
)

func TestGoldenCapturesParseAndRebuild(t *testing.T) {
	pkts := goldenDatagrams(t)
	if len(pkts) < 200 {
		t.Fatalf("only %d RoCEv2 packets in the golden captures", len(pkts))
	}
	ops := map[OpCode]int{}
	for _, c := range pkts {
		d := c.Datagram
		p, err := Parse(d.Payload)
		if err != nil {
			t.Fatalf("%s #%d: %v", c.name, c.index, err)
		}
		ops[p.OpCode()]++
		if !d.CheckICRC() {
			t.Errorf("%s #%d %s: ICRC %#08x does not check (computed %#08x)", c.name, c.index, p.OpCode(), p.ICRC, d.ICRC())
		}
		// Rebuild the packet from its parsed fields alone and compute
		// the ICRC from the pseudo header a userspace sender knows.
		h := p.Headers()
		rebuilt, err := AppendPacket(nil, &h, p.Payload)
		if err != nil {
			t.Fatalf("%s #%d: rebuild: %v", c.name, c.index, err)
		}
		ph := d.PseudoHeader()
		ph.SetICRC(rebuilt)
		if !bytes.Equal(rebuilt, d.Payload) {
			t.Errorf("%s #%d %s: rebuilt packet differs\n got %x\nwant %x", c.name, c.index, p.OpCode(), rebuilt, d.Payload)
		}
		// What a receiver on a UDP socket can check: everything but the
		// IPv4 ID and DF bit, which it recovers.
		blind := ph
		blind.IPv4ID, blind.IPv4Flags = 0, 0
		id, flags, ok := blind.CheckICRCAnyIPv4ID(d.Payload)
		if !ok || id != d.IPv4ID() || flags != d.IPv4Flags() {
			t.Errorf("%s #%d: any-ID check: id %#x flags %#x ok %v; packet has id %#x flags %#x",
				c.name, c.index, id, flags, ok, d.IPv4ID(), d.IPv4Flags())
		}
	}
	for _, op := range []OpCode{
		RCSendFirst, RCSendMiddle, RCSendLast, RCSendOnly, RCSendOnlyWithImmediate,
		RCWriteFirst, RCWriteLast, RCWriteLastWithImmediate, RCWriteOnly, RCWriteOnlyWithImmediate,
		RCReadRequest, RCReadResponseFirst, RCReadResponseLast, RCReadResponseOnly,
		RCAcknowledge, RCAtomicAcknowledge, RCCompareSwap, RCFetchAdd, UDSendOnly,
	} {
		if ops[op] == 0 {
			t.Errorf("no %s in the golden captures", op)
		}
	}
}

func TestGoldenCapturesFailICRCOnEveryBitFlip(t *testing.T) {
	for _, c := range goldenDatagrams(t) {
		d := c.Datagram
		// Flip each bit the ICRC covers, in the IP and UDP headers and
		// in the RoCE packet, and see the check fail. Masked fields are
		// skipped: the ICRC is meant not to see them.
		masked := func(layer string, i int) bool {
			switch layer {
			case "ip":
				return i == 1 || i == 8 || i == 10 || i == 11
			case "udp":
				return i == 6 || i == 7
			case "roce":
				return i == 4 || i >= len(d.Payload)-ICRCLen
			}
			return false
		}
		for _, l := range []struct {
			name string
			b    []byte
		}{{"ip", d.IP}, {"udp", d.UDP}, {"roce", d.Payload}} {
			for i := range l.b {
				if masked(l.name, i) {
					continue
				}
				for bit := 0; bit < 8; bit++ {
					l.b[i] ^= 1 << bit
					if d.CheckICRC() {
						t.Fatalf("%s #%d: ICRC still checks with bit %d of %s byte %d flipped", c.name, c.index, bit, l.name, i)
					}
					l.b[i] ^= 1 << bit
				}
			}
		}
		// And the masked fields really are masked.
		d.IP[8]--                                   // TTL
		d.IP[1] ^= 0x03                             // ECN
		binary.BigEndian.PutUint16(d.IP[10:], 0x42) // header checksum
		d.UDP[6], d.Payload[4] = 0x77, d.Payload[4]^0xc0
		if !d.CheckICRC() {
			t.Fatalf("%s #%d: ICRC depends on a masked field", c.name, c.index)
		}
	}
}
