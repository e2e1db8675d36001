package rsocket

import (
	"sync"
	"time"
)

// deadline is one direction's deadline (SetReadDeadline,
// SetWriteDeadline): a channel that is closed once the deadline passes,
// replaced when the deadline moves.
type deadline struct {
	mu      sync.Mutex
	timer   *time.Timer
	expired chan struct{}
}

func newDeadline() *deadline { return &deadline{expired: make(chan struct{})} }

// set moves the deadline to t; the zero time means none.
func (d *deadline) set(t time.Time) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.timer != nil && !d.timer.Stop() {
		<-d.expired // the timer fired: wait for it to close the channel
	}
	d.timer = nil
	if isClosed(d.expired) {
		d.expired = make(chan struct{})
	}
	if t.IsZero() {
		return
	}
	dur := time.Until(t)
	if dur <= 0 {
		close(d.expired)
		return
	}
	ch := d.expired
	d.timer = time.AfterFunc(dur, func() { close(ch) })
}

// done returns a channel closed once the deadline has passed.
func (d *deadline) done() <-chan struct{} {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.expired
}

// stop releases the timer.
func (d *deadline) stop() {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.timer != nil && d.timer.Stop() {
		d.timer = nil // set need not wait for a channel no one will close
	}
}

func isClosed(ch <-chan struct{}) bool {
	select {
	case <-ch:
		return true
	default:
		return false
	}
}
