package rxe

import (
	"flag"
	"runtime"
	"testing"
	"time"

	"github.com/rdmago/rdmago/verbs"
)

var manyQPs = flag.Int("rxe.qps", 1000, "connected QP pairs TestManyConnectedQPsPassTraffic makes")

// A thousand connected RC QPs on one device (and as many on its peer's)
// all carry traffic at once: each sends a SEND and an RDMA WRITE with
// immediate to its peer over UDP, and every one arrives, on the QP it was
// sent to. Run with -rxe.qps=10000 for the figure at ten thousand; the
// test logs the time to connect, the time the traffic took and the heap
// per QP.
func TestManyConnectedQPsPassTraffic(t *testing.T) {
	n := *manyQPs
	if testing.Short() {
		n = min(n, 200)
	}
	la, lb := udpLinks(t)
	o := pairOpts{sendWR: 4, recvWR: 4}
	o.defaults()
	a := newEnd(t, "rxe_many_a", la, &o)
	b := newEnd(t, "rxe_many_b", lb, &o)
	t.Cleanup(func() { a.close(); b.close() })
	mk := func(e *end, cq *verbs.CQ) *verbs.QP {
		qp, err := e.pd.CreateQP(&verbs.QPInitAttr{SendCQ: cq, RecvCQ: cq, QPType: verbs.QPTRC,
			Cap: verbs.QPCap{MaxSendWR: 4, MaxRecvWR: 4, MaxSendSGE: 1, MaxRecvSGE: 1, MaxInlineData: 16}})
		if err != nil {
			t.Fatal(err)
		}
		return qp
	}
	cqA, err := a.ctx.CreateCQ(n+16, nil, 0)
	if err != nil {
		t.Fatal(err)
	}
	cqB, err := b.ctx.CreateCQ(2*n+16, nil, 0)
	if err != nil {
		t.Fatal(err)
	}
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	start := time.Now()
	qa, qb := make([]*verbs.QP, n), make([]*verbs.QP, n)
	byNum := map[uint32]int{}
	for i := range n {
		qa[i], qb[i] = mk(a, cqA), mk(b, cqB)
		x, y := *a, *b
		x.qp, y.qp = qa[i], qb[i]
		connect(t, &x, &y, &o)
		byNum[qb[i].Num()] = i
	}
	connected := time.Since(start)
	runtime.GC()
	runtime.ReadMemStats(&after)
	perQP := float64(int64(after.HeapInuse+after.StackInuse)-int64(before.HeapInuse+before.StackInuse)) / float64(2*n)
	t.Cleanup(func() {
		for i := range n {
			qa[i].Destroy()
			qb[i].Destroy()
		}
		cqA.Destroy()
		cqB.Destroy()
	})
	start = time.Now()
	for i := range n {
		if err := qb[i].PostRecv([]verbs.RecvWR{{WRID: uint64(i), SGList: []verbs.SGE{b.mr.SGE(0, 8)}}, {WRID: uint64(i)}}); err != nil {
			t.Fatal(err)
		}
	}
	for i := range n {
		err := qa[i].PostSend([]verbs.SendWR{
			{WRID: uint64(i), Opcode: verbs.WRSend, SendFlags: verbs.SendInline, SGList: []verbs.SGE{a.mr.SGE(0, 8)}},
			{WRID: uint64(i), Opcode: verbs.WRRDMAWriteWithImm, SendFlags: verbs.SendSignaled, ImmData: uint32(i),
				SGList: []verbs.SGE{a.mr.SGE(64, 8)}, RemoteAddr: b.mr.Addr() + 64, RKey: b.mr.RKey()}})
		if err != nil {
			t.Fatal(err)
		}
	}
	got := make([]int, n) // per QP: 1 for the SEND, 2 for the WRITE with immediate
	bEnd := end{t: t, cq: cqB}
	for _, wc := range bEnd.wait(2*n, 60*time.Second) {
		i, ok := byNum[wc.QPNum]
		switch {
		case !ok || wc.Status != verbs.WCSuccess || wc.WRID != uint64(i):
			t.Fatalf("receive completion %+v (QP %d of the pairs)", wc, i)
		case wc.Opcode == verbs.WCRecv:
			got[i] |= 1
		case wc.Opcode == verbs.WCRecvRDMAWithImm && wc.ImmData == uint32(i):
			got[i] |= 2
		default:
			t.Fatalf("receive completion %+v", wc)
		}
	}
	aEnd := end{t: t, cq: cqA}
	for _, wc := range aEnd.wait(n, 60*time.Second) {
		if wc.Status != verbs.WCSuccess {
			t.Fatalf("send completion %+v", wc)
		}
	}
	for i, g := range got {
		if g != 3 {
			t.Fatalf("QP pair %d received %b", i, g)
		}
	}
	took := time.Since(start)
	runtime.GC() // twice: the device's pools of packet buffers drop what traffic left in them
	runtime.GC()
	var busy runtime.MemStats
	runtime.ReadMemStats(&busy)
	grew := func(after, before uint64) float64 { return float64(int64(after)-int64(before)) / float64(2*n) }
	perBusyQP := grew(busy.HeapInuse+busy.StackInuse, before.HeapInuse+before.StackInuse)
	stackPerQP := grew(busy.StackInuse, before.StackInuse)
	t.Logf("%d QP pairs: connected in %v, traffic in %v; heap and stack per QP %.0f B connected, %.0f B after its traffic (%.0f B of it goroutine stacks)",
		n, connected.Round(time.Millisecond), took.Round(time.Millisecond), perQP, perBusyQP, stackPerQP)
	// A QP that has sent keeps no packet buffers (they are the device's,
	// lent per step): about 8 KB, where 64 kept buffers made it 330 KB.
	if perBusyQP > 64<<10 {
		t.Errorf("%.0f B per QP after traffic, want well under 64 KiB", perBusyQP)
	}
}
