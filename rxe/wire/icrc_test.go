package wire

import (
	"hash/crc32"
	"math/rand/v2"
	"net/netip"
	"testing"
)

func TestCRCSmallMatchesHashCRC32(t *testing.T) {
	rng := rand.New(rand.NewPCG(5, 6))
	b := make([]byte, 80)
	for i := range b {
		b[i] = byte(rng.Uint32())
	}
	for n := 0; n <= len(b); n++ {
		for off := 0; off < 8 && off+n <= len(b); off++ {
			seed := rng.Uint32()
			in := b[off : off+n]
			if got, want := crcSmall(seed, in), crc32.Update(seed, crc32.IEEETable, in); got != want {
				t.Fatalf("%d bytes at offset %d from %#08x: crcSmall %#08x, hash/crc32 %#08x", n, off, seed, got, want)
			}
		}
	}
}

// benchPacket returns a 64-byte RDMA WRITE as the rate test sends it, with
// its ICRC set for ph.
func benchPacket(b *testing.B, ph *PseudoHeader) []byte {
	pkt, err := AppendPacket(nil, sampleHeaders(RCWriteOnly), make([]byte, 64))
	if err != nil {
		b.Fatal(err)
	}
	ph.SetICRC(pkt)
	return pkt
}

var benchPH = PseudoHeader{
	Src: netip.MustParseAddr("127.0.0.1"), Dst: netip.MustParseAddr("127.0.0.2"),
	SrcPort: 49152, DstPort: UDPPort, IPv4Flags: IPv4DontFragment,
}

// BenchmarkSetICRC is a sender's cost per 64-byte WRITE.
func BenchmarkSetICRC(b *testing.B) {
	ph := benchPH
	pkt := benchPacket(b, &ph)
	b.SetBytes(int64(len(pkt)))
	for b.Loop() {
		ph.SetICRC(pkt)
	}
}

// BenchmarkIPv4IDSolverCheck is a receiver's cost per 64-byte WRITE, for
// the first packet of a GSO send (ID 0, the fast path) and a later one
// (ID 5, solved for).
func BenchmarkIPv4IDSolverCheck(b *testing.B) {
	for _, id := range []uint16{0, 5} {
		b.Run(map[uint16]string{0: "id0", 5: "id5"}[id], func(b *testing.B) {
			ph := benchPH
			ph.IPv4ID = id
			pkt := benchPacket(b, &ph)
			var s IPv4IDSolver
			b.SetBytes(int64(len(pkt)))
			for b.Loop() {
				if got, _, ok := s.Check(&ph, pkt); !ok || got != id {
					b.Fatalf("Check = %d, %v; want %d, true", got, ok, id)
				}
			}
		})
	}
}
