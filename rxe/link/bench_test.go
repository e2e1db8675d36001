package link_test

import (
	"fmt"
	"testing"

	"github.com/rdmago/rdmago/rxe/link"
	"github.com/rdmago/rdmago/rxe/wire"
)

// benchRounds sends batches of batch packets with payload bytes each from a
// to b and receives them, one batch at a time, reporting the payload
// throughput and packets per second.
func benchRounds(b *testing.B, from, to link.Link, batch, payload int) {
	pkts := make([]link.Packet, batch)
	for i := range pkts {
		pkts[i] = link.Packet{Buf: newPacket(b, newRand(1), wire.RCWriteMiddle, payload, uint32(i)), Addr: to.LocalAddr()}
	}
	bufs := recvBuffers(64, to.MaxPacket())
	b.SetBytes(int64(batch * payload))
	b.ReportAllocs()
	for b.Loop() {
		if err := from.Send(pkts); err != nil {
			b.Fatal(err)
		}
		for got := 0; got < batch; {
			n, err := to.Recv(bufs)
			if err != nil {
				b.Fatal(err)
			}
			got += n
		}
	}
	b.ReportMetric(float64(b.N*batch)/b.Elapsed().Seconds(), "pkts/s")
}

func BenchmarkUDPSendRecv(b *testing.B) {
	for _, gso := range []bool{true, false} {
		for _, gro := range []bool{true, false} {
			for _, size := range []int{1024, 4096} {
				for _, batch := range []int{1, 16, 64} {
					b.Run(fmt.Sprintf("gso=%v/gro=%v/payload=%d/batch=%d", gso, gro, size, batch), func(b *testing.B) {
						a, c := listenPair(b, addr1, addr2, link.UDPOptions{DisableGSO: !gso, DisableGRO: !gro})
						benchRounds(b, a, c, batch, size)
					})
				}
			}
		}
	}
}

func BenchmarkMemSendRecv(b *testing.B) {
	for _, batch := range []int{1, 64} {
		b.Run(fmt.Sprintf("payload=4096/batch=%d", batch), func(b *testing.B) {
			_, a, c := memPair(b, 1)
			benchRounds(b, a, c, batch, 4096)
		})
	}
}
