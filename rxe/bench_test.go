package rxe

import (
	"fmt"
	"net/netip"
	"runtime"
	"slices"
	"testing"
	"time"

	"github.com/rdmago/rdmago/rxe/link"

	"github.com/rdmago/rdmago/verbs"
)

// benchOp measures one operation at one size over UDP loopback, keeping
// depth requests in flight, and reports bytes per second.
func benchOp(b *testing.B, op verbs.WROpcode, size, depth int) {
	la, lb := udpLinks(b)
	a, peer := newPair(b, la, lb, pairOpts{bufSize: max(size, 4096), mtu: verbs.MTU4096, sendWR: 512, recvWR: 512})
	runOps(b, a, peer, op, size, depth)
}

// runOps posts b.N requests of op and size from a to peer, depth at a
// time, and waits for each completion.
func runOps(b *testing.B, a, peer *end, op verbs.WROpcode, size, depth int) {
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
		got := a.wait(1, 30*time.Second)
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

// BenchmarkWriteUnderLoss is 1 MiB RDMA WRITE goodput, 16 in flight, on
// the in-memory network, lossless and with 1 % of packets dropped at
// random: each loss costs the responder's go-back-N window of resends.
// scripts/speed.sh reports the ratio (goal: at least half of lossless).
func BenchmarkWriteUnderLoss(b *testing.B) {
	for _, drop := range []float64{0, 0.001, 0.01, 0.05, 0.10} {
		b.Run(fmt.Sprintf("loss=%g%%", drop*100), func(b *testing.B) {
			a, peer, _ := memPair(b, 15, link.Faults{Drop: drop}, pairOpts{bufSize: 1 << 20, mtu: verbs.MTU4096, sendWR: 64, recvWR: 64})
			runOps(b, a, peer, verbs.WRRDMAWrite, 1<<20, 16)
		})
	}
}

// BenchmarkIdleQPMemory reports the memory a connected RC QP that has
// carried no traffic yet holds (B/QP: heap and goroutine stacks): 256
// pairs of QPs connected across two devices on the in-memory network,
// measured before and after (goal: at most 16 KiB).
func BenchmarkIdleQPMemory(b *testing.B) {
	const pairs = 256
	o := pairOpts{typ: verbs.QPTRC, bufSize: 64, mtu: verbs.MTU4096, sendWR: 64, recvWR: 64}
	o.defaults()
	n := link.NewNetwork(16)
	la, _ := n.Attach(netip.MustParseAddr("10.0.0.1"))
	lb, _ := n.Attach(netip.MustParseAddr("10.0.0.2"))
	da, err := NewDevice(Config{Name: "idle_a", Links: []link.Link{la}, NetdevMTU: 9000})
	if err != nil {
		b.Fatal(err)
	}
	db, err := NewDevice(Config{Name: "idle_b", Links: []link.Link{lb}, NetdevMTU: 9000})
	if err != nil {
		b.Fatal(err)
	}
	a, peer := newEndOn(b, da, &o), newEndOn(b, db, &o)
	defer func() { a.close(); peer.close() }()
	var before, after runtime.MemStats
	for range b.N {
		runtime.GC()
		runtime.ReadMemStats(&before)
		var qps []*verbs.QP
		destroy := func() {
			for _, qp := range qps {
				qp.Destroy()
			}
		}
		for range pairs {
			x, y := *a, *peer
			for _, e := range []*end{&x, &y} {
				qp, err := e.pd.CreateQP(&verbs.QPInitAttr{SendCQ: e.cq, RecvCQ: e.cq, QPType: verbs.QPTRC,
					Cap: verbs.QPCap{MaxSendWR: o.sendWR, MaxRecvWR: o.recvWR, MaxSendSGE: 4, MaxRecvSGE: 4, MaxInlineData: 64}})
				if err != nil {
					destroy()
					b.Fatal(err)
				}
				e.qp = qp
				qps = append(qps, qp)
			}
			connect(b, &x, &y, &o)
		}
		runtime.GC()
		runtime.ReadMemStats(&after)
		used := func(m *runtime.MemStats) float64 { return float64(m.HeapInuse + m.StackInuse) }
		b.ReportMetric((used(&after)-used(&before))/(2*pairs), "B/QP")
		destroy()
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

// BenchmarkRCSendLatency is a ping-pong of 8-byte SENDs over UDP
// loopback: ns/op is one round trip. "wait" sleeps in CQ.Wait under the
// default progress; "busy-poll" spins on CQ.Poll under manual progress,
// the goroutine that polls driving the device (perftest's default).
func BenchmarkRCSendLatency(b *testing.B) {
	for _, mode := range []struct {
		name   string
		manual bool
	}{{"wait", false}, {"busy-poll", true}} {
		b.Run(mode.name, func(b *testing.B) {
			la, lb := udpLinks(b)
			a, peer := newPair(b, la, lb, pairOpts{mtu: verbs.MTU4096})
			wait := func(e *end) { e.wait(1, 10*time.Second) }
			if mode.manual {
				setManualProgress(b, a, peer)
				wcs := make([]verbs.WC, 4)
				wait = func(e *end) {
					for {
						n, err := e.cq.Poll(wcs)
						if err != nil {
							b.Fatal(err)
						}
						if n > 0 {
							return
						}
					}
				}
			}
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
			done := make(chan struct{})
			go func() { // the peer echoes every SEND
				defer close(done)
				for i := 0; i < b.N; i++ {
					wait(peer)
					post(peer)
					send(peer)
				}
			}()
			rtts := make([]time.Duration, b.N)
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				t0 := time.Now()
				send(a)
				wait(a)
				rtts[i] = time.Since(t0)
				post(a)
			}
			b.StopTimer()
			<-done
			slices.Sort(rtts)
			b.ReportMetric(float64(rtts[len(rtts)/2].Nanoseconds()), "p50-ns")
			b.ReportMetric(float64(rtts[len(rtts)*99/100].Nanoseconds()), "p99-ns")
		})
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
			// Made before the timer starts, so that allocs/op counts
			// the device's allocations only.
			recvs := make([]verbs.RecvWR, 2*depth)
			for i := range recvs {
				recvs[i] = verbs.RecvWR{WRID: uint64(i), SGList: []verbs.SGE{r.mr.SGE(i%64*r.slot, r.slot)}}
				if err := r.qp.PostRecv(recvs[i : i+1]); err != nil {
					b.Fatal(err)
				}
			}
			ws := []verbs.SendWR{{Opcode: verbs.WRSend, SGList: []verbs.SGE{a.mr.SGE(0, size)}, AH: ah, RemoteQPN: r.qp.Num(), RemoteQKey: testQKey}}
			wcs, rwcs := make([]verbs.WC, 64), make([]verbs.WC, 64)
			b.SetBytes(int64(size))
			b.ReportAllocs()
			b.ResetTimer()
			sent, got := 0, 0
			last := time.Now()
			for got < b.N {
				for sent < b.N && sent-got < depth {
					ws[0].SendFlags = 0
					if sent%16 == 15 {
						ws[0].SendFlags = verbs.SendSignaled // reap the send queue now and then
					}
					if err := a.qp.PostSend(ws); err != nil {
						b.Fatal(err)
					}
					sent++
					a.cq.Poll(wcs)
				}
				n, err := r.cq.Poll(rwcs)
				if err != nil {
					b.Fatal(err)
				}
				if n == 0 {
					if time.Since(last) > 10*time.Second {
						b.Fatalf("nothing received for 10 s: %d sent, %d received", sent, got)
					}
					runtime.Gosched()
					continue
				}
				last = time.Now()
				for _, wc := range rwcs[:n] {
					if wc.Status != verbs.WCSuccess {
						b.Fatalf("receive %s", wc.Status)
					}
					r.qp.PostRecv(recvs[wc.WRID : wc.WRID+1])
					got++
				}
			}
		})
	}
}

// BenchmarkRCWriteRate is ib_write_bw's message rate run (-s 64 -t 128
// -l 16) over UDP loopback in one process: RDMA WRITEs posted sixteen to a
// list with one signaled, at most 128 in flight, the poster busy-polling
// under manual progress. It reports messages per second; ns/op is per
// WRITE. Profile it with -cpuprofile.
func BenchmarkRCWriteRate(b *testing.B) {
	for _, size := range []int{64, 1 << 20} {
		b.Run(sizeName(size), func(b *testing.B) {
			const depth, list = 128, 16
			la, lb := udpLinks(b)
			a, peer := newPair(b, la, lb, pairOpts{bufSize: max(size, 4096), mtu: verbs.MTU1024, sendWR: 512, recvWR: 512})
			setManualProgress(b, a, peer)
			wrs := make([]verbs.SendWR, list)
			for i := range wrs {
				wrs[i] = verbs.SendWR{Opcode: verbs.WRRDMAWrite, SGList: []verbs.SGE{a.mr.SGE(0, size)},
					RemoteAddr: peer.mr.Addr(), RKey: peer.mr.RKey()}
			}
			wrs[list-1].SendFlags = verbs.SendSignaled
			wcs := make([]verbs.WC, 16)
			b.SetBytes(int64(size))
			b.ReportAllocs()
			b.ResetTimer()
			posted, done := 0, 0
			for done < b.N {
				for posted < b.N && posted+list-done <= depth {
					if err := a.qp.PostSend(wrs); err != nil {
						b.Fatal(err)
					}
					posted += list
				}
				n, err := a.cq.Poll(wcs)
				if err != nil {
					b.Fatal(err)
				}
				for _, wc := range wcs[:n] {
					if wc.Status != verbs.WCSuccess {
						b.Fatalf("completion %s", wc.Status)
					}
					done += list
				}
			}
			b.StopTimer()
			b.ReportMetric(float64(b.N)/b.Elapsed().Seconds()/1e6, "Mmsg/s")
		})
	}
}

// In steady state a work request allocates nothing, nor does its
// completion or its packets on either side: posting, polling, building,
// sending, receiving and acknowledging reuse what the QP, the device and
// the links hold (issue: zero allocations per work request). Lists of 16
// RDMA WRITEs, of 16 SENDs and of 16 UD SENDs, one signaled, over UDP
// under manual progress.
func TestSteadyStateWorkRequestsAllocateNothing(t *testing.T) {
	if raceEnabled {
		t.Skip("the race detector allocates")
	}
	for _, c := range []struct {
		name string
		op   verbs.WROpcode
		ud   bool
	}{{"RDMA_WRITE", verbs.WRRDMAWrite, false}, {"SEND", verbs.WRSend, false}, {"UD_SEND", verbs.WRSend, true}} {
		op := c.op
		t.Run(c.name, func(t *testing.T) {
			la, lb := udpLinks(t)
			var a, b *end
			var ah *verbs.AH
			if c.ud {
				ua, ub := newUDEnd(t, "steady_a", la, testQKey), newUDEnd(t, "steady_b", lb, testQKey)
				a, b, ah = ua.end, ub.end, ua.ah(t, ub)
			} else {
				a, b = newPair(t, la, lb, pairOpts{sendWR: 64, recvWR: 64})
			}
			setManualProgress(t, a, b)
			const list = 16
			wrs := make([]verbs.SendWR, list)
			for i := range wrs {
				wrs[i] = verbs.SendWR{Opcode: op, SGList: []verbs.SGE{a.mr.SGE(0, 64)}, RemoteAddr: b.mr.Addr(), RKey: b.mr.RKey()}
				if c.ud {
					wrs[i].AH, wrs[i].RemoteQPN, wrs[i].RemoteQKey = ah, b.qp.Num(), testQKey
				}
			}
			wrs[list-1].SendFlags = verbs.SendSignaled
			recvs := make([]verbs.RecvWR, list)
			for i := range recvs {
				recvs[i] = verbs.RecvWR{SGList: []verbs.SGE{b.mr.SGE(4096, verbs.GRHLen+64)}}
			}
			wcs := make([]verbs.WC, list)
			round := func() {
				if op == verbs.WRSend {
					if err := b.qp.PostRecv(recvs); err != nil {
						t.Fatal(err)
					}
				}
				if err := a.qp.PostSend(wrs); err != nil {
					t.Fatal(err)
				}
				for got := 0; got < 1; {
					n, err := a.cq.Poll(wcs[:1])
					if err != nil || n == 1 && wcs[0].Status != verbs.WCSuccess {
						t.Fatalf("poll: %v %+v", err, wcs[0])
					}
					got += n
				}
				deadline := time.Now().Add(10 * time.Second) // a lost UD message fails the test, not hangs it
				for got := 0; op == verbs.WRSend && got < list; {
					n, err := b.cq.Poll(wcs)
					if err != nil || n == 0 && time.Now().After(deadline) {
						t.Fatalf("receive: %v; %d of %d in 10 s", err, got, list)
					}
					for _, wc := range wcs[:n] {
						if wc.Status != verbs.WCSuccess {
							t.Fatalf("receive completion %+v", wc)
						}
					}
					got += n
				}
			}
			for range 50 {
				round() // warm up: buffers, pools, slices at their size
			}
			if avg := testing.AllocsPerRun(200, round); avg >= 1 {
				t.Errorf("%.2f allocations per list of %d work requests, want none", avg, list)
			}
		})
	}
}
