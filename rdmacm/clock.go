package rdmacm

import (
	"sync"
	"time"
)

// clock is the time the IB CM's timers run on: a MAD's retransmissions,
// the wait an MRA asks for, timewait. The connection manager runs on the
// wall clock; a test gives it one it moves by hand (fakeClock), so that
// each timer can be checked just before its deadline and at it, with no
// sleeping. A timer's function runs on a goroutine of its own with no
// lock held; it takes cm.mu itself.
type clock interface {
	afterFunc(d time.Duration, f func()) stopper
}

// stopper is a timer that can be stopped (time.Timer's Stop).
type stopper interface{ Stop() bool }

type wallClock struct{}

func (wallClock) afterFunc(d time.Duration, f func()) stopper { return time.AfterFunc(d, f) }

// cmClock is the clock an agent takes when it starts, for its timers and
// those of its connections. Guarded by cm.mu; tests set it with
// useFakeClock before making the devices their IDs use, so that what
// other tests' connections do later stays on the clocks of their own.
var cmClock clock = wallClock{}

// fakeClock is a clock a test moves with advance.
type fakeClock struct {
	mu     sync.Mutex
	now    time.Duration
	timers []*fakeTimer
}

type fakeTimer struct {
	c       *fakeClock
	at      time.Duration
	f       func()
	stopped bool
}

func (c *fakeClock) afterFunc(d time.Duration, f func()) stopper {
	c.mu.Lock()
	defer c.mu.Unlock()
	t := &fakeTimer{c: c, at: c.now + d, f: f}
	c.timers = append(c.timers, t)
	return t
}

func (t *fakeTimer) Stop() bool {
	t.c.mu.Lock()
	defer t.c.mu.Unlock()
	was := !t.stopped
	t.stopped = true
	return was
}

// advance moves the clock d forward and runs, in the order of their
// deadlines, the functions of the timers that fall due, each to its end,
// on the caller's goroutine. It returns how many ran.
func (c *fakeClock) advance(d time.Duration) int {
	c.mu.Lock()
	end := c.now + d
	ran := 0
	for {
		var next *fakeTimer
		for _, t := range c.timers {
			if !t.stopped && t.at <= end && (next == nil || t.at < next.at) {
				next = t
			}
		}
		if next == nil {
			break
		}
		next.stopped = true
		c.now = next.at
		c.mu.Unlock()
		next.f()
		ran++
		c.mu.Lock()
	}
	c.now = end
	live := c.timers[:0]
	for _, t := range c.timers {
		if !t.stopped {
			live = append(live, t)
		}
	}
	c.timers = live
	c.mu.Unlock()
	return ran
}

// pending is the time to the next timer's deadline, and false if none is
// armed.
func (c *fakeClock) pending() (time.Duration, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	var next time.Duration
	found := false
	for _, t := range c.timers {
		if !t.stopped && (!found || t.at-c.now < next) {
			next, found = t.at-c.now, true
		}
	}
	return next, found
}

// armed is how many timers wait for their deadline.
func (c *fakeClock) armed() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	n := 0
	for _, t := range c.timers {
		if !t.stopped {
			n++
		}
	}
	return n
}
