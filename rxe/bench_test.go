package rxe

import (
	"fmt"
	"testing"
	"time"

	"github.com/rdmago/rdmago/verbs"
)

// benchOp measures one operation at one size over UDP loopback, keeping
// depth requests in flight, and reports bytes per second.
func benchOp(b *testing.B, op verbs.WROpcode, size, depth int) {
	la, lb := udpLinks(b)
	a, peer := newPair(b, la, lb, pairOpts{bufSize: max(size, 4096), mtu: verbs.MTU4096, sendWR: 512, recvWR: 512})
	wr := verbs.SendWR{Opcode: op, SendFlags: verbs.SendSignaled, SGList: []verbs.SGE{a.mr.SGE(0, size)},
		RemoteAddr: peer.mr.Addr(), RKey: peer.mr.RKey()}
	recvs := make([]verbs.RecvWR, depth)
	for i := range recvs {
		recvs[i] = verbs.RecvWR{WRID: uint64(i), SGList: []verbs.SGE{peer.mr.SGE(0, size)}}
	}
	isSend := op == verbs.WRSend
	if isSend {
		if err := peer.qp.PostRecv(recvs); err != nil {
			b.Fatal(err)
		}
	}
	b.SetBytes(int64(size))
	b.ReportAllocs()
	wcs := make([]verbs.WC, 64)
	posted, done := 0, 0
	b.ResetTimer()
	for done < b.N {
		for posted < b.N && posted-done < depth {
			if err := a.qp.PostSend([]verbs.SendWR{wr}); err != nil {
				b.Fatal(err)
			}
			posted++
		}
		got := a.wait(1, 10*time.Second)
		if got[0].Status != verbs.WCSuccess {
			b.Fatalf("completion %s", got[0].Status)
		}
		done++
		if isSend {
			n, _ := peer.cq.Poll(wcs)
			for i := 0; i < n; i++ {
				peer.qp.PostRecv(recvs[:1])
			}
		}
	}
}

func BenchmarkRCWrite(b *testing.B) {
	for _, size := range []int{64, 4 << 10, 64 << 10, 1 << 20} {
		b.Run(sizeName(size), func(b *testing.B) { benchOp(b, verbs.WRRDMAWrite, size, 16) })
	}
}

func BenchmarkRCRead(b *testing.B) {
	for _, size := range []int{64, 4 << 10, 64 << 10, 1 << 20} {
		b.Run(sizeName(size), func(b *testing.B) { benchOp(b, verbs.WRRDMARead, size, 16) })
	}
}

func BenchmarkRCSend(b *testing.B) {
	for _, size := range []int{64, 4 << 10, 64 << 10, 1 << 20} {
		b.Run(sizeName(size), func(b *testing.B) { benchOp(b, verbs.WRSend, size, 16) })
	}
}

// BenchmarkRCSendLatency is a ping-pong of 8-byte SENDs: ns/op is one
// round trip.
func BenchmarkRCSendLatency(b *testing.B) {
	la, lb := udpLinks(b)
	a, peer := newPair(b, la, lb, pairOpts{mtu: verbs.MTU4096})
	post := func(e *end) {
		if err := e.qp.PostRecv([]verbs.RecvWR{{SGList: []verbs.SGE{e.mr.SGE(0, 8)}}}); err != nil {
			b.Fatal(err)
		}
	}
	post(a)
	post(peer)
	send := func(e *end) {
		if err := e.qp.PostSend([]verbs.SendWR{{Opcode: verbs.WRSend, SendFlags: verbs.SendInline, SGList: []verbs.SGE{e.mr.SGE(64, 8)}}}); err != nil {
			b.Fatal(err)
		}
	}
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		send(a)
		peer.wait(1, 10*time.Second)
		post(peer)
		send(peer)
		a.wait(1, 10*time.Second)
		post(a)
	}
}

func sizeName(n int) string {
	switch {
	case n >= 1<<20:
		return fmt.Sprintf("%dMiB", n>>20)
	case n >= 1<<10:
		return fmt.Sprintf("%dKiB", n>>10)
	}
	return fmt.Sprintf("%dB", n)
}

// BenchmarkUDSend sends UD messages over UDP loopback with at most 32
// not yet received, and reports the bytes received per second.
func BenchmarkUDSend(b *testing.B) {
	for _, size := range []int{64, 1024, 4096} {
		b.Run(sizeName(size), func(b *testing.B) {
			const depth = 32
			la, lb := udpLinks(b)
			a := newUDEnd(b, "bud_a", la, testQKey)
			r := newUDEnd(b, "bud_b", lb, testQKey)
			ah := a.ah(b, r)
			recv := func(i int) verbs.RecvWR {
				return verbs.RecvWR{WRID: uint64(i), SGList: []verbs.SGE{r.mr.SGE(i%64*r.slot, r.slot)}}
			}
			for i := 0; i < 2*depth; i++ {
				if err := r.qp.PostRecv([]verbs.RecvWR{recv(i)}); err != nil {
					b.Fatal(err)
				}
			}
			wr := verbs.SendWR{Opcode: verbs.WRSend, SGList: []verbs.SGE{a.mr.SGE(0, size)}, AH: ah, RemoteQPN: r.qp.Num(), RemoteQKey: testQKey}
			wcs := make([]verbs.WC, 64)
			b.SetBytes(int64(size))
			b.ReportAllocs()
			b.ResetTimer()
			sent, got := 0, 0
			for got < b.N {
				for sent < b.N && sent-got < depth {
					w := wr
					if sent%16 == 15 {
						w.SendFlags = verbs.SendSignaled // reap the send queue now and then
					}
					if err := a.qp.PostSend([]verbs.SendWR{w}); err != nil {
						b.Fatal(err)
					}
					sent++
					a.cq.Poll(wcs)
				}
				for _, wc := range r.wait(1, 10*time.Second) {
					if wc.Status != verbs.WCSuccess {
						b.Fatalf("receive %s", wc.Status)
					}
					r.qp.PostRecv([]verbs.RecvWR{recv(int(wc.WRID))})
					got++
				}
			}
		})
	}
}
