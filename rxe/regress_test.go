package rxe

import (
	"context"
	"net/netip"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/rdmago/rdmago/rxe/link"
	"github.com/rdmago/rdmago/verbs"
)

// TestInlinePostsDoNotDeadlockWithRegistration: the receive loop delivering
// to a QP, a poster resolving inline data and a registration waiting for
// the device's table lock must not wait on each other in a ring.
func TestInlinePostsDoNotDeadlockWithRegistration(t *testing.T) {
	a, b, _ := memPair(t, 11, link.Faults{}, pairOpts{sendWR: 4096})
	stop := make(chan struct{})
	var wg sync.WaitGroup
	var rounds atomic.Int64
	loop := func(f func()) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				select {
				case <-stop:
					return
				default:
					f()
				}
			}
		}()
	}
	wcs := make([]verbs.WC, 64)
	loop(func() { // traffic into b
		a.qp.PostSend([]verbs.SendWR{{Opcode: verbs.WRRDMAWrite, SGList: []verbs.SGE{a.mr.SGE(0, 32)}, RemoteAddr: b.mr.Addr() + 4096, RKey: b.mr.RKey()}})
		a.cq.Poll(wcs)
	})
	inline := make([]verbs.SendWR, 16)
	for i := range inline {
		inline[i] = verbs.SendWR{Opcode: verbs.WRRDMAWrite, SendFlags: verbs.SendInline, SGList: []verbs.SGE{b.mr.SGE(0, 32)}, RemoteAddr: a.mr.Addr() + 4096, RKey: a.mr.RKey()}
	}
	bwcs := make([]verbs.WC, 64)
	loop(func() { // inline posts on b
		b.qp.PostSend(inline)
		b.cq.Poll(bwcs)
		rounds.Add(1)
	})
	buf := make([]byte, 64)
	loop(func() { // writers on b's tables
		if mr, err := b.pd.RegMR(buf, verbs.AccessLocalWrite); err == nil {
			mr.Dereg()
		}
	})
	defer func() { close(stop); wg.Wait() }()
	last := int64(-1)
	for i := 0; i < 10; i++ {
		time.Sleep(100 * time.Millisecond)
		if p := rounds.Load(); p == last {
			t.Fatalf("no progress after %d rounds: deadlocked", p)
		} else {
			last = p
		}
	}
}

func TestUCSendsCompleteWithoutAcknowledgements(t *testing.T) {
	a, b, _ := memPair(t, 12, link.Faults{}, pairOpts{typ: verbs.QPTUC, sendWR: 4})
	for i := 0; i < 8; i++ {
		if err := b.qp.PostRecv([]verbs.RecvWR{{WRID: uint64(i), SGList: []verbs.SGE{b.mr.SGE(0, 4096)}}}); err != nil {
			t.Fatal(err)
		}
	}
	for i := 0; i < 8; i++ { // more than the queue holds: slots must come back
		fill(a.buf[:3000], byte(i))
		if err := a.qp.PostSend([]verbs.SendWR{{WRID: uint64(i), Opcode: verbs.WRSend, SendFlags: verbs.SendSignaled, SGList: []verbs.SGE{a.mr.SGE(0, 3000)}}}); err != nil {
			t.Fatalf("post %d: %v", i, err)
		}
		if wc := a.wait(1, 2*time.Second)[0]; wc.Status != verbs.WCSuccess {
			t.Fatalf("send %d: %s", i, wc.Status)
		}
		if wc := b.wait(1, 2*time.Second)[0]; wc.Status != verbs.WCSuccess || wc.ByteLen != 3000 {
			t.Fatalf("receive %d: %+v", i, wc)
		}
	}
}

func TestRNROnWriteWithImmediateRecovers(t *testing.T) {
	a, b, _ := memPair(t, 13, link.Faults{}, pairOpts{minRNR: 1})
	fill(a.buf[:3000], 7)
	if err := a.qp.PostSend([]verbs.SendWR{{WRID: 1, Opcode: verbs.WRRDMAWriteWithImm, SendFlags: verbs.SendSignaled, ImmData: 7,
		SGList: []verbs.SGE{a.mr.SGE(0, 3000)}, RemoteAddr: b.mr.Addr() + 8192, RKey: b.mr.RKey()}}); err != nil {
		t.Fatal(err)
	}
	time.Sleep(5 * time.Millisecond) // RNR NAKs go back and forth
	if err := b.qp.PostRecv([]verbs.RecvWR{{WRID: 9}}); err != nil {
		t.Fatal(err)
	}
	if wc := a.wait(1, 3*time.Second)[0]; wc.Status != verbs.WCSuccess {
		t.Fatalf("sender: %s; receiver in %s", wc.Status, b.qp.State())
	}
	if wc := b.wait(1, 3*time.Second)[0]; wc.Opcode != verbs.WCRecvRDMAWithImm || wc.ImmData != 7 || wc.ByteLen != 3000 {
		t.Fatalf("receiver: %+v", wc)
	}
}

func TestNothingIsSentAfterALocalError(t *testing.T) {
	a, b, _ := memPair(t, 14, link.Faults{}, pairOpts{})
	b.qp.PostRecv([]verbs.RecvWR{{WRID: 5, SGList: []verbs.SGE{b.mr.SGE(0, 64)}}})
	bad := a.mr.SGE(0, 64)
	bad.LKey ^= 0x5a5a
	if err := a.qp.PostSend([]verbs.SendWR{
		{WRID: 1, Opcode: verbs.WRSend, SendFlags: verbs.SendSignaled, SGList: []verbs.SGE{bad}},
		{WRID: 2, Opcode: verbs.WRSend, SendFlags: verbs.SendSignaled, SGList: []verbs.SGE{a.mr.SGE(0, 64)}},
	}); err != nil {
		t.Fatal(err)
	}
	wcs := a.wait(2, 2*time.Second)
	if wcs[0].Status != verbs.WCLocProtErr || wcs[1].Status != verbs.WCWRFlushErr {
		t.Fatalf("sender: %s", describe(wcs))
	}
	time.Sleep(20 * time.Millisecond)
	if n := b.cq.Len(); n != 0 {
		t.Fatalf("the receiver got %d completions from a QP in ERR", n)
	}
}

func TestResetDropsOldWorkAndKeepsNewWork(t *testing.T) {
	a, b, _ := memPair(t, 15, link.Faults{}, pairOpts{})
	q := verbs.QPDriverOf(a.qp).(*qp)
	block, started := make(chan struct{}), make(chan struct{})
	q.deliver(inPacket{fn: func() { close(started); <-block }}, true) // hold the owner
	<-started
	released := false
	release := func() {
		if !released {
			released = true
			close(block)
		}
	}
	defer release()
	for _, e := range []*end{a, b} {
		if err := e.qp.Modify(&verbs.QPAttr{QPState: verbs.QPSReset}, verbs.QPAttrState); err != nil {
			t.Fatal(err)
		}
	}
	o := pairOpts{}
	o.defaults()
	connect(t, a, b, &o) // both sides start afresh
	b.qp.PostRecv([]verbs.RecvWR{{WRID: 5, SGList: []verbs.SGE{b.mr.SGE(0, 64)}}})
	if err := a.qp.PostSend([]verbs.SendWR{{WRID: 1, Opcode: verbs.WRSend, SendFlags: verbs.SendSignaled, SGList: []verbs.SGE{a.mr.SGE(0, 64)}}}); err != nil {
		t.Fatal(err)
	}
	release()
	if wc := a.wait(1, 3*time.Second)[0]; wc.Status != verbs.WCSuccess || wc.WRID != 1 {
		t.Fatalf("send after RESET: %+v", wc)
	}
}

// TestRetryCnt7NeverRunsOut: as in Linux rxe, retry_cnt 7 retries for
// ever (ibv_*_pingpong rely on it when the peer is overrun).
func TestRetryCnt7NeverRunsOut(t *testing.T) {
	la, lb := udpLinks(t)
	a, b := newPair(t, la, lb, pairOpts{retry: 7, timeout: 8}) // 1 ms ACK timeout
	b.qp.Modify(&verbs.QPAttr{QPState: verbs.QPSErr}, verbs.QPAttrState)
	if err := a.qp.PostSend([]verbs.SendWR{{WRID: 1, Opcode: verbs.WRSend, SendFlags: verbs.SendSignaled, SGList: []verbs.SGE{a.mr.SGE(0, 8)}}}); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
	defer cancel()
	if err := a.cq.Wait(ctx); err == nil {
		wc := make([]verbs.WC, 1)
		a.cq.Poll(wc)
		t.Fatalf("completion %s after retry_cnt 7", describe(wc))
	}
}

// Closing a context releases its memory regions and windows even while
// another context keeps the device open, as closing the verbs file does on
// Linux: no peer reaches a closed context's memory.
func TestContextCloseReleasesItsRegionsAndWindows(t *testing.T) {
	network := link.NewNetwork(31)
	l, err := network.Attach(netip.MustParseAddr("10.31.0.1"))
	if err != nil {
		t.Fatal(err)
	}
	dev, err := NewDevice(Config{Name: "rxe_closing", Links: []link.Link{l}})
	if err != nil {
		t.Fatal(err)
	}
	keep, err := dev.Open()
	if err != nil {
		t.Fatal(err)
	}
	defer keep.Close()
	ctx, err := dev.Open()
	if err != nil {
		t.Fatal(err)
	}
	pd, _ := ctx.AllocPD()
	region, err := pd.RegMR(make([]byte, 4096), verbs.AccessLocalWrite|verbs.AccessRemoteWrite|verbs.AccessMWBind)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := pd.AllocMW(verbs.MWType2); err != nil {
		t.Fatal(err)
	}
	h := verbs.DeviceDriverOf(dev).(*device).hw
	if h.lookup(region.RKey(), verbs.MRDriverOf(region).(*mr).pd) == nil {
		t.Fatal("the region is not in the key table")
	}
	if err := ctx.Close(); err != nil {
		t.Fatalf("Close with a region and a window: %v", err)
	}
	h.mu.RLock()
	keys, mws := len(h.keys), len(h.mws)
	h.mu.RUnlock()
	if keys != 0 || mws != 0 {
		t.Errorf("after Close: %d regions and %d windows left in the device's tables", keys, mws)
	}
}
