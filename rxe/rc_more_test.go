package rxe

import (
	"bytes"
	"context"
	"fmt"
	"net/netip"
	"testing"
	"time"

	"github.com/rdmago/rdmago/rxe/link"
	"github.com/rdmago/rdmago/verbs"
)

// TestRCTransfersOverUDPLoopback runs the transfer matrix of the lossy
// tests over real UDP sockets on loopback.
func TestRCTransfersOverUDPLoopback(t *testing.T) {
	la, lb := udpLinks(t)
	a, b := newPair(t, la, lb, pairOpts{bufSize: 3*region + 8192, mtu: verbs.MTU1024, timeout: 14})
	k := 0
	for _, op := range []verbs.WROpcode{verbs.WRSend, verbs.WRSendWithImm, verbs.WRRDMAWrite, verbs.WRRDMAWriteWithImm, verbs.WRRDMARead} {
		for _, size := range []int{0, 1, 1023, 1024, 1025, 1 << 20, 8 << 20} {
			if size == 8<<20 && testing.Short() {
				continue
			}
			checkTransfer(t, fmt.Sprintf("%s/%d", op, size), a, b, op, size, k%2*2*region)
			k++
		}
	}
	checkAtomicsExactlyOnce(t, a, b, 100)
}

// TestRCBetweenTwoQPsOfOneDevice connects two QPs of the same device:
// packets go to the device's own address.
func TestRCBetweenTwoQPsOfOneDevice(t *testing.T) {
	for _, transport := range []string{"udp", "mem"} {
		t.Run(transport, func(t *testing.T) {
			var l link.Link
			if transport == "udp" {
				la, lb := udpLinks(t)
				lb.Close()
				l = la
			} else {
				n := link.NewNetwork(3)
				m, err := n.Attach(netip.MustParseAddr("10.1.0.1"))
				if err != nil {
					t.Fatal(err)
				}
				l = m
			}
			o := pairOpts{}
			o.defaults()
			a := newEnd(t, "rxe_self", l, &o)
			// A second QP, CQ and MR on the same context.
			b := &end{t: t, ctx: a.ctx, pd: a.pd}
			var err error
			if b.cq, err = a.ctx.CreateCQ(256, nil, 0); err != nil {
				t.Fatal(err)
			}
			b.qp, err = a.pd.CreateQP(&verbs.QPInitAttr{SendCQ: b.cq, RecvCQ: b.cq, QPType: verbs.QPTRC,
				Cap: verbs.QPCap{MaxSendWR: 16, MaxRecvWR: 16, MaxSendSGE: 4, MaxRecvSGE: 4}})
			if err != nil {
				t.Fatal(err)
			}
			b.buf = make([]byte, 1<<20)
			if b.mr, err = a.pd.RegMR(b.buf, o.access); err != nil {
				t.Fatal(err)
			}
			connect(t, a, b, &o)
			t.Cleanup(func() {
				for _, f := range []func() error{b.qp.Destroy, b.mr.Dereg, b.cq.Destroy} {
					if err := f(); err != nil {
						t.Error(err)
					}
				}
				a.close()
			})
			if b.qp.Num() == a.qp.Num() {
				t.Fatal("two QPs with one number")
			}
			exerciseRC(t, a, b)
		})
	}
}

// TestRCScatterGatherLists sends from three SGEs into two.
func TestRCScatterGatherLists(t *testing.T) {
	a, b, _ := memPair(t, 5, link.Faults{}, pairOpts{mtu: verbs.MTU1024})
	fill(a.buf[:8192], 4)
	if err := b.qp.PostRecv([]verbs.RecvWR{{WRID: 1, SGList: []verbs.SGE{b.mr.SGE(100, 1500), b.mr.SGE(5000, 3000)}}}); err != nil {
		t.Fatal(err)
	}
	err := a.qp.PostSend([]verbs.SendWR{{WRID: 2, Opcode: verbs.WRSend, SendFlags: verbs.SendSignaled,
		SGList: []verbs.SGE{a.mr.SGE(0, 1000), a.mr.SGE(2000, 1), a.mr.SGE(4000, 2999)}}})
	if err != nil {
		t.Fatal(err)
	}
	a.wait(1, 5*time.Second)
	if wc := b.wait(1, 5*time.Second)[0]; wc.ByteLen != 4000 || wc.Status != verbs.WCSuccess {
		t.Fatalf("receive %+v", wc)
	}
	want := append(append(append([]byte(nil), a.buf[0:1000]...), a.buf[2000:2001]...), a.buf[4000:6999]...)
	got := append(append([]byte(nil), b.buf[100:1600]...), b.buf[5000:7500]...)
	if !bytes.Equal(got, want) {
		t.Fatal("scattered data differs")
	}
}

// TestRCFenceWaitsForEarlierReads posts a READ into local memory and a
// fenced WRITE that sends that same memory on: the WRITE must carry what
// the READ fetched, so it may not start before the READ completes.
func TestRCFenceWaitsForEarlierReads(t *testing.T) {
	for _, fence := range []bool{true, false} {
		t.Run(fmt.Sprintf("fence=%v", fence), func(t *testing.T) {
			// Latency leaves an unfenced WRITE time to gather first.
			a, b, _ := memPair(t, 6, link.Faults{Delay: 2 * time.Millisecond}, pairOpts{mtu: verbs.MTU1024})
			const n = 16 << 10
			fill(b.buf[:n], 1)
			flags := verbs.SendSignaled
			if fence {
				flags |= verbs.SendFence
			}
			err := a.qp.PostSend([]verbs.SendWR{
				{WRID: 1, Opcode: verbs.WRRDMARead, SendFlags: verbs.SendSignaled, SGList: []verbs.SGE{a.mr.SGE(0, n)},
					RemoteAddr: b.mr.Addr(), RKey: b.mr.RKey()},
				{WRID: 2, Opcode: verbs.WRRDMAWrite, SendFlags: flags, SGList: []verbs.SGE{a.mr.SGE(0, n)},
					RemoteAddr: b.mr.Addr() + 128<<10, RKey: b.mr.RKey()},
			})
			if err != nil {
				t.Fatal(err)
			}
			for _, wc := range a.wait(2, 5*time.Second) {
				if wc.Status != verbs.WCSuccess {
					t.Fatalf("completion %+v", wc)
				}
			}
			forwarded := bytes.Equal(b.buf[128<<10:128<<10+n], b.buf[:n])
			if fence && !forwarded {
				t.Fatal("the fenced WRITE sent memory before the READ had filled it")
			}
			if !fence && forwarded {
				// The control: unfenced, the WRITE gathers at once,
				// long before the READ response is back.
				t.Fatal("an unfenced WRITE waited: the test no longer tells fence from no fence")
			}
		})
	}
}

// TestSQDrainRaisesEventAndHoldsNewRequests moves an RTS QP to SQD.
func TestSQDrainRaisesEventAndHoldsNewRequests(t *testing.T) {
	a, b, _ := memPair(t, 8, link.Faults{}, pairOpts{})
	if err := a.qp.Modify(&verbs.QPAttr{QPState: verbs.QPSSQD, EnSQDAsyncNotify: 1}, verbs.QPAttrState|verbs.QPAttrEnSQDAsyncNotify); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	for {
		ev, err := a.ctx.GetAsyncEvent(ctx)
		if err != nil {
			t.Fatalf("no SQ_DRAINED event: %v", err)
		}
		if ev.Type == verbs.EventSQDrained && ev.QP == a.qp {
			break
		}
	}
	// A WRITE posted in SQD waits until the QP is back in RTS.
	if err := a.qp.PostSend([]verbs.SendWR{{WRID: 9, Opcode: verbs.WRRDMAWrite, SendFlags: verbs.SendSignaled,
		SGList: []verbs.SGE{a.mr.SGE(0, 8)}, RemoteAddr: b.mr.Addr(), RKey: b.mr.RKey()}}); err != nil {
		t.Fatal(err)
	}
	time.Sleep(20 * time.Millisecond)
	if a.cq.Len() != 0 {
		t.Fatal("a request started while the send queue was drained")
	}
	if err := a.qp.Modify(&verbs.QPAttr{QPState: verbs.QPSRTS}, verbs.QPAttrState); err != nil {
		t.Fatal(err)
	}
	if wc := a.wait(1, 5*time.Second)[0]; wc.Status != verbs.WCSuccess || wc.WRID != 9 {
		t.Fatalf("completion %+v", wc)
	}
}

// A QP that raised SQ_DRAINED, was reset and was brought back to SQD
// raises it again, even when the program's Modify calls all came before
// its owner stepped once.
func TestSQDrainedAgainAfterAReset(t *testing.T) {
	o := pairOpts{}
	o.defaults()
	a, b, _ := memPair(t, 8, link.Faults{}, o)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	toSQD := func() {
		t.Helper()
		if err := a.qp.Modify(&verbs.QPAttr{QPState: verbs.QPSSQD, EnSQDAsyncNotify: 1}, verbs.QPAttrState|verbs.QPAttrEnSQDAsyncNotify); err != nil {
			t.Fatal(err)
		}
	}
	waitDrained := func(when string) {
		t.Helper()
		for {
			ev, err := a.ctx.GetAsyncEvent(ctx)
			if err != nil {
				t.Fatalf("%s: no SQ_DRAINED event: %v", when, err)
			}
			if ev.Type == verbs.EventSQDrained && ev.QP == a.qp {
				return
			}
		}
	}
	toSQD()
	waitDrained("the first time")
	q := verbs.QPDriverOf(a.qp).(*qp)
	q.stepMu.Lock() // the owner steps once every Modify is in
	if err := a.qp.Modify(&verbs.QPAttr{QPState: verbs.QPSReset}, verbs.QPAttrState); err != nil {
		q.stepMu.Unlock()
		t.Fatal(err)
	}
	gidB, _ := b.ctx.QueryGID(1, 0)
	connectQP(t, a, gidB, b.qp.Num(), 1, 1, &o)
	toSQD()
	q.stepMu.Unlock()
	q.kick()
	waitDrained("after the reset")
}

func TestOpenReportsPortActive(t *testing.T) {
	n := link.NewNetwork(1)
	l, _ := n.Attach(netip.MustParseAddr("10.2.0.1"))
	ctx := openDevice(t, Config{Links: []link.Link{l}})
	c, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	if ev, err := ctx.GetAsyncEvent(c); err != nil || ev.Type != verbs.EventPortActive || ev.Port != 1 {
		t.Fatalf("event %+v %v, want PORT_ACTIVE on port 1", ev, err)
	}
}
