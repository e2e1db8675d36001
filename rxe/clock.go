package rxe

import "time"

// clock is the time as the QP engine sees it. A device runs on the wall
// clock; a test gives it one it moves by hand (see clock_test.go), so that
// every timer of the protocol — retransmission, the RNR wait — can be
// checked a microsecond before its deadline and at it, with no sleeping.
// The engine reads the time once per step and passes it down as now: no
// code below step asks the clock.
type clock interface {
	now() time.Time
	// newTimer returns a stopped timer.
	newTimer() timer
}

// timer wakes a QP's owner goroutine at the engine's next deadline.
type timer interface {
	// ch receives when the timer fires.
	ch() <-chan time.Time
	// reset makes the timer fire d from now, as the clock counts.
	reset(d time.Duration)
	stop()
}

// wallClock is time as the time package tells it.
type wallClock struct{}

func (wallClock) now() time.Time { return time.Now() }

func (wallClock) newTimer() timer {
	t := time.NewTimer(time.Hour)
	t.Stop()
	return wallTimer{t}
}

type wallTimer struct{ t *time.Timer }

func (w wallTimer) ch() <-chan time.Time  { return w.t.C }
func (w wallTimer) reset(d time.Duration) { w.t.Reset(d) }
func (w wallTimer) stop()                 { w.t.Stop() }
