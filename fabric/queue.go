package fabric

import (
	"context"
	"sync"
	"sync/atomic"
)

// queue is what event and completion queues share: entries, error
// entries (which readers must take with ReadErr first), and a channel
// closed at every change, for waiters. The channel is made only when
// someone waits, so that a queue nobody blocks on (a polled CQ) costs no
// allocation per entry.
type queue[T, E any] struct {
	mu     sync.Mutex
	items  []T
	errs   []E
	wake   chan struct{} // nil while nobody waits
	closed bool
	// some says items or errs hold something, or the queue is closed:
	// set under mu at each change, so that a reader spinning on an
	// empty queue (fi_cq_read in a loop) takes no lock.
	some atomic.Bool
}

func newQueue[T, E any]() queue[T, E] { return queue[T, E]{} }

// noteSome sets some from what the queue holds. Called with mu held.
func (q *queue[T, E]) noteSome() {
	q.some.Store(len(q.items) > 0 || len(q.errs) > 0 || q.closed)
}

// signal wakes the waiters. Called with mu held.
func (q *queue[T, E]) signal() {
	if q.wake != nil {
		close(q.wake)
		q.wake = nil
	}
}

func (q *queue[T, E]) push(x T) {
	q.mu.Lock()
	q.items = append(q.items, x)
	q.some.Store(true)
	q.signal()
	q.mu.Unlock()
}

func (q *queue[T, E]) pushErr(e E) {
	q.mu.Lock()
	q.errs = append(q.errs, e)
	q.some.Store(true)
	q.signal()
	q.mu.Unlock()
}

// take moves up to len(buf) entries into buf: ErrAvail while an error
// entry waits, ErrAgain when there is nothing (or len(buf) is 0 and
// something is there: then it returns 0, nil).
func (q *queue[T, E]) take(op string, buf []T) (int, error) {
	if !q.some.Load() {
		return 0, ErrAgain
	}
	q.mu.Lock()
	defer q.mu.Unlock()
	if len(q.errs) > 0 {
		return 0, ErrAvail
	}
	if len(q.items) == 0 {
		if q.closed {
			return 0, Errorf(op, ErrBadFD, "queue closed")
		}
		return 0, ErrAgain
	}
	n := copy(buf, q.items)
	q.items = q.items[:copy(q.items, q.items[n:])]
	q.noteSome()
	return n, nil
}

func (q *queue[T, E]) takeErr() (E, error) {
	q.mu.Lock()
	defer q.mu.Unlock()
	if len(q.errs) == 0 {
		var zero E
		return zero, ErrAgain
	}
	e := q.errs[0]
	q.errs = q.errs[1:]
	q.noteSome()
	return e, nil
}

// waiter returns the channel the next change closes.
func (q *queue[T, E]) waiter() chan struct{} {
	q.mu.Lock()
	defer q.mu.Unlock()
	if q.wake == nil {
		q.wake = make(chan struct{})
	}
	return q.wake
}

// wait blocks until the queue holds an entry or an error entry, or is
// closed, or ctx is done.
func (q *queue[T, E]) wait(ctx context.Context) error {
	for {
		q.mu.Lock()
		n, closed := len(q.items)+len(q.errs), q.closed
		if n > 0 || closed {
			q.mu.Unlock()
			return nil
		}
		if q.wake == nil {
			q.wake = make(chan struct{})
		}
		w := q.wake
		q.mu.Unlock()
		select {
		case <-w:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}

func (q *queue[T, E]) close() {
	q.mu.Lock()
	q.closed = true
	q.some.Store(true)
	q.signal()
	q.mu.Unlock()
}
