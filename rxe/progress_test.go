package rxe

import (
	"fmt"
	"net"
	"net/netip"
	"sync"
	"testing"
	"time"

	"github.com/rdmago/rdmago/rxe/link"
	"github.com/rdmago/rdmago/verbs"
)

// stubLink is a link whose incoming packets a test queues. TryRecv hands
// them out one per read and counts the reads; WaitReadable blocks until
// Close, so the device's receive loop never takes them.
type stubLink struct {
	addr   netip.Addr
	mu     sync.Mutex
	queued int
	reads  int
	closed chan struct{}
	once   sync.Once
}

func newStubLink(addr string) *stubLink {
	return &stubLink{addr: netip.MustParseAddr(addr), closed: make(chan struct{})}
}

func (l *stubLink) LocalAddr() netip.Addr    { return l.addr }
func (l *stubLink) Port() uint16             { return 4791 }
func (l *stubLink) MaxPacket() int           { return maxPacket }
func (l *stubLink) Send([]link.Packet) error { return nil }
func (l *stubLink) Stats() link.Stats        { return link.Stats{} }
func (l *stubLink) Held() bool               { return false }

func (l *stubLink) Recv([]link.Packet) (int, error) {
	<-l.closed
	return 0, net.ErrClosed
}

func (l *stubLink) WaitReadable() error {
	<-l.closed
	return net.ErrClosed
}

func (l *stubLink) Close() error {
	l.once.Do(func() { close(l.closed) })
	return nil
}

// TryRecv hands out a queued packet: one for a QP that does not exist,
// which the device reads and drops.
func (l *stubLink) TryRecv(pkts []link.Packet) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.reads++
	if l.queued == 0 || len(pkts) == 0 {
		return 0, nil
	}
	l.queued--
	b := pkts[0].Buf[:64]
	clear(b)
	b[5], b[6], b[7] = 0xab, 0xcd, 0xef // destination QP 0xabcdef
	pkts[0].Buf = b
	return 1, nil
}

func (l *stubLink) state() (queued, reads int) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.queued, l.reads
}

// A poll under manual progress reads the device's links in turn, from a
// different one each time, and stops at the first that had packets: the
// poller then looks at its CQ without a read of the other links (a system
// call each) in between. Over two polls every link is read.
func TestAPollReadsTheLinksInTurnUpToTheFirstWithPackets(t *testing.T) {
	l0, l1 := newStubLink("127.0.0.1"), newStubLink("::1")
	dev, err := NewDevice(Config{Name: "rxe_stub", Links: []link.Link{l0, l1}})
	if err != nil {
		t.Fatal(err)
	}
	ctx, err := dev.Open()
	if err != nil {
		t.Fatal(err)
	}
	defer ctx.Close()
	if err := ctx.SetProgress(verbs.ProgressManual); err != nil {
		t.Fatal(err)
	}
	cq, err := ctx.CreateCQ(16, nil, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer cq.Destroy()
	verbs.DeviceDriverOf(dev).(*device).hw.pollNext.Store(0) // the first poll starts at link 1

	links := []*stubLink{l0, l1}
	for i, step := range []struct {
		queue     [2]int // packets queued on each link before the poll
		wantReads [2]int // reads of each link the poll makes
	}{
		{queue: [2]int{1, 1}, wantReads: [2]int{0, 1}}, // starts at link 1, which has one
		{wantReads: [2]int{1, 0}},                      // starts at link 0, which has one
		{wantReads: [2]int{1, 1}},                      // nothing anywhere: both are read
		{queue: [2]int{1, 0}, wantReads: [2]int{1, 0}}, // starts at link 0, which has one
		{queue: [2]int{1, 0}, wantReads: [2]int{1, 1}}, // starts at link 1, which has none
	} {
		var before [2]int
		for j, l := range links {
			l.mu.Lock()
			l.queued += step.queue[j]
			before[j] = l.reads
			l.mu.Unlock()
		}
		if _, err := cq.Poll(make([]verbs.WC, 1)); err != nil {
			t.Fatal(err)
		}
		for j, l := range links {
			queued, reads := l.state()
			if got := reads - before[j]; got != step.wantReads[j] {
				t.Errorf("poll %d: link %d read %d times, want %d", i, j, got, step.wantReads[j])
			}
			if queued != 0 && step.wantReads[j] > 0 {
				t.Errorf("poll %d: link %d still holds %d packets", i, j, queued)
			}
		}
	}
}

// A receive needs no step of its QP (a message that found no receive WQE
// was refused, not kept), except on a QP in ERR, where it completes at
// once with WR_FLUSH_ERR: by the owner under the default progress, on the
// posting goroutine under manual progress.
func TestARecvPostedInERRIsFlushedUnderEitherProgress(t *testing.T) {
	for _, manual := range []bool{false, true} {
		t.Run(fmt.Sprintf("manual=%v", manual), func(t *testing.T) {
			a, b, _ := memPair(t, 15, link.Faults{}, pairOpts{})
			if manual {
				setManualProgress(t, a, b)
			}
			// Received into at once, while the QP is in RTS.
			if err := b.qp.PostRecv([]verbs.RecvWR{{WRID: 1, SGList: []verbs.SGE{b.mr.SGE(0, 64)}}}); err != nil {
				t.Fatal(err)
			}
			if err := a.qp.PostSend([]verbs.SendWR{{WRID: 9, Opcode: verbs.WRSend, SendFlags: verbs.SendSignaled, SGList: []verbs.SGE{a.mr.SGE(0, 64)}}}); err != nil {
				t.Fatal(err)
			}
			a.wait(1, 5*time.Second)
			if wcs := b.wait(1, 5*time.Second); wcs[0].Status != verbs.WCSuccess || wcs[0].WRID != 1 {
				t.Fatalf("receive in RTS: %s", describe(wcs))
			}
			if err := b.qp.Modify(&verbs.QPAttr{QPState: verbs.QPSErr}, verbs.QPAttrState); err != nil {
				t.Fatal(err)
			}
			if err := b.qp.PostRecv([]verbs.RecvWR{{WRID: 2, SGList: []verbs.SGE{b.mr.SGE(0, 64)}}, {WRID: 3, SGList: []verbs.SGE{b.mr.SGE(64, 64)}}}); err != nil {
				t.Fatal(err)
			}
			wcs := b.wait(2, 5*time.Second)
			for i, wc := range wcs {
				if wc.Status != verbs.WCWRFlushErr || wc.WRID != uint64(2+i) {
					t.Fatalf("receives posted in ERR: %s", describe(wcs))
				}
			}
		})
	}
}
