package rxe

import (
	"sync"
	"testing"
	"time"

	"github.com/rdmago/rdmago/rxe/wire"
	"github.com/rdmago/rdmago/verbs"
)

// fakeClock is a clock a test moves by hand. Its timers fire, as the wall
// clock's would, when the time is moved to or past their deadline.
type fakeClock struct {
	mu     sync.Mutex
	t      time.Time
	timers []*fakeTimer
}

type fakeTimer struct {
	clk *fakeClock
	c   chan time.Time
	at  time.Time // zero: stopped
}

func newFakeClock() *fakeClock {
	return &fakeClock{t: time.Date(2026, time.January, 1, 0, 0, 0, 0, time.UTC)}
}

func (c *fakeClock) now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.t
}

func (c *fakeClock) newTimer() timer {
	c.mu.Lock()
	defer c.mu.Unlock()
	t := &fakeTimer{clk: c, c: make(chan time.Time, 1)}
	c.timers = append(c.timers, t)
	return t
}

// set moves the time to t, firing the timers due by then.
func (c *fakeClock) set(t time.Time) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if t.Before(c.t) {
		panic("fakeClock: time goes forward only")
	}
	c.t = t
	for _, tm := range c.timers {
		if !tm.at.IsZero() && !t.Before(tm.at) {
			tm.at = time.Time{}
			select {
			case tm.c <- t:
			default:
			}
		}
	}
}

func (c *fakeClock) advance(d time.Duration) { c.set(c.now().Add(d)) }

// armed returns the earliest deadline a timer is set for (zero: none).
func (c *fakeClock) armed() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	var first time.Time
	for _, tm := range c.timers {
		if !tm.at.IsZero() && (first.IsZero() || tm.at.Before(first)) {
			first = tm.at
		}
	}
	return first
}

func (t *fakeTimer) ch() <-chan time.Time { return t.c }

func (t *fakeTimer) reset(d time.Duration) {
	t.clk.mu.Lock()
	defer t.clk.mu.Unlock()
	t.drain()
	t.at = t.clk.t.Add(d)
}

func (t *fakeTimer) stop() {
	t.clk.mu.Lock()
	defer t.clk.mu.Unlock()
	t.drain()
	t.at = time.Time{}
}

// drain empties the channel, as Reset and Stop do for a time.Timer.
func (t *fakeTimer) drain() {
	select {
	case <-t.c:
	default:
	}
}

// newTimedPeer returns a peer whose device runs on a fake clock, the
// clock and the device's QP.
func newTimedPeer(t *testing.T, seed uint64, adjust func(*pairOpts)) (*peer, *fakeClock, *qp) {
	t.Helper()
	clk := newFakeClock()
	var adj []func(*pairOpts)
	if adjust != nil {
		adj = append(adj, adjust)
	}
	p := newPeer(t, seed, pairOpts{clock: clk}, adj...)
	return p, clk, verbs.QPDriverOf(p.e.qp).(*qp)
}

// stepNow runs q's step at the clock's time on the calling goroutine,
// after any step under way. When it returns, all that was posted and
// delivered before, and every timer due by now, has been handled.
func stepNow(q *qp) {
	q.stepMu.Lock()
	defer q.stepMu.Unlock()
	q.step(q.hw.clock.now(), false)
}

// expectCount fails t unless q's counter k is want.
func expectCount(t *testing.T, q *qp, k verbs.Counter, want uint64, when string) {
	t.Helper()
	if got := q.stats[k].Load(); got != want {
		t.Fatalf("%s: %s is %d, want %d", when, k, got, want)
	}
}

// waitCount waits, without moving the clock, until q's counter k reaches
// want: a packet the peer sent was handled.
func waitCount(t *testing.T, q *qp, k verbs.Counter, want uint64) {
	t.Helper()
	for end := time.Now().Add(5 * time.Second); q.stats[k].Load() < want; {
		if time.Now().After(end) {
			t.Fatalf("%s stayed at %d, want %d", k, q.stats[k].Load(), want)
		}
		time.Sleep(100 * time.Microsecond)
	}
}

// expectPacket reads the device's next packet and checks its opcode and
// PSN.
func (p *peer) expectPacket(op wire.OpCode, psn wire.PSN) *wire.Packet {
	p.t.Helper()
	pkt := p.recv(5 * time.Second)
	if pkt.OpCode() != op || pkt.BTH.PSN() != psn {
		p.t.Fatalf("device sent %s PSN %d, want %s PSN %d", pkt.OpCode(), pkt.BTH.PSN(), op, psn)
	}
	return pkt
}

// expectNoPacket checks the device sent nothing the peer has read yet.
func (p *peer) expectNoPacket(when string) {
	p.t.Helper()
	select {
	case b := <-p.in:
		p.t.Fatalf("%s: device sent % x", when, b[:min(len(b), 12)])
	default:
	}
}

// expectDeadline checks that q's next deadline is want (zero: none) and,
// if there is one, that its timer fires by then. Times print as offsets
// from t0.
func expectDeadline(t *testing.T, clk *fakeClock, q *qp, want, t0 time.Time, when string) {
	t.Helper()
	q.stepMu.Lock()
	d := q.deadline()
	q.stepMu.Unlock()
	off := func(x time.Time) string {
		if x.IsZero() {
			return "none"
		}
		return x.Sub(t0).String()
	}
	if !d.Equal(want) {
		t.Fatalf("%s: the next deadline is %s, want %s", when, off(d), off(want))
	}
	if a := clk.armed(); !want.IsZero() && (a.IsZero() || a.After(want)) {
		t.Fatalf("%s: the timer fires at %s, after the deadline %s", when, off(a), off(want))
	}
}
