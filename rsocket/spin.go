package rsocket

import (
	"runtime"
	"sync/atomic"
	"time"
)

// DefaultPollTime is how long a Read or Write that has to wait polls the
// connection's completion queue before it sleeps, when Config.PollTime is
// zero. (librdmacm's polling_time defaults to 10 µs, with the kernel
// waking the thread after; a Go wake-up through the device's goroutines
// costs more than that, so the poll is longer.)
const DefaultPollTime = 50 * time.Microsecond

// spinners counts the goroutines of the process polling a CQ in spin: at
// most maxSpinners, one per CPU the process runs Go on (GOMAXPROCS), poll
// at once, so that a process with many connections waiting never has
// more goroutines polling than it has CPUs; the others sleep at once.
// (With fewer, two connections of one process answering each other on
// one device would take turns sleeping.)
var spinners atomic.Int32

func maxSpinners() int32 { return int32(runtime.GOMAXPROCS(0)) }

// spin polls the CQ while the state stays as it is (c.mu held, let go of
// between polls), until the connection's poll time has passed since the
// call that waits first polled (since; set by the first spin of the
// call): a call polls for that long in all, as rsockets' do, and a call
// that has slept once (woken, say, by a send's completion rather than
// what it waits for) sleeps again at once rather than polling, on a
// machine where the poll would take a CPU from the peer that is about to
// answer. It reports whether
// it should be looked at again: completions came, the connection failed
// or is closing, or dl passed. Under the device's manual progress each
// empty poll reads the network on this goroutine.
func (c *Conn) spin(dl *deadline, since *time.Time) bool {
	if c.pollTime <= 0 || c.cq == nil || !c.connected {
		return false
	}
	if spinners.Add(1) > maxSpinners() {
		spinners.Add(-1)
		return false
	}
	defer spinners.Add(-1)
	if since.IsZero() {
		*since = time.Now()
	} else if time.Since(*since) >= c.pollTime {
		return false
	}
	moves := c.moves
	for {
		if c.poll(c.wcs[:]) != 0 {
			return true
		}
		if time.Since(*since) >= c.pollTime {
			return false
		}
		c.mu.Unlock()
		runtime.Gosched()
		c.mu.Lock()
		if c.closing || c.moves != moves {
			return true
		}
		select {
		case <-dl.done():
			return true
		default:
		}
	}
}
