// Package swcq is a completion queue in memory, for software providers: a
// ring of completions the provider pushes into and the program polls, with
// the arming of ibv_req_notify_cq. It implements verbs.CQDriver; the rxe
// provider uses it, and a provider whose hardware has its own CQ (rdma-core)
// does not.
package swcq

import (
	"context"
	"errors"
	"sync"
	"time"

	"github.com/rdmago/rdmago/verbs"
)

// CQ is a software completion queue.
type CQ struct {
	notify func() // verbs' completion-channel hook, called when an armed CQ fires

	mu sync.Mutex
	// ring is circular: n entries from head. It is made with the first
	// completion (or Resize): a CQ that never takes one, such as those
	// rdma_create_qp makes for a connection closed unused, costs no ring.
	ring        []verbs.WC
	size        int     // the room of ring, made or not
	stamps      []stamp // NewStamped: when each entry of ring was pushed
	head, n     int
	armed       notifyMode
	overrunTold bool // FirstOverrun has said so
	overflow    bool
	closed      bool
	nonEmpty    chan struct{} // signalled (without blocking) on each Push
	onEmpty     func()        // SetOnEmptyPoll's
	onWait      func()        // SetOnWait's
}

type notifyMode uint8

const (
	notifyNone notifyMode = iota
	notifyAll
	notifySolicited
)

// New returns a CQ with room for cqe completions. notify, if not nil, is
// called (without the CQ's lock) each time an armed CQ takes a completion
// that fires it.
func New(cqe int, notify func()) *CQ {
	return &CQ{notify: notify, size: cqe, nonEmpty: make(chan struct{}, 1)}
}

// NewStamped returns a CQ like New's that also records when each
// completion is pushed, for an extended CQ asked for completion
// timestamps: StartPoll and NextPoll hand them out with the completion,
// in Clock's units. Only such CQs read the clock.
func NewStamped(cqe int, notify func()) *CQ {
	cq := New(cqe, notify)
	cq.stamps = make([]stamp, cqe)
	return cq
}

// stamp is when a completion was pushed: Clock's two readings.
type stamp struct{ raw, wallNS uint64 }

// The clock completions are stamped with counts nanoseconds of the
// process's monotonic clock: a provider reports ClockKHz as its
// hca_core_clock and TimestampMask as its completion_timestamp_mask.
const (
	ClockKHz      = 1_000_000 // 1 GHz: one tick a nanosecond
	TimestampMask = ^uint64(0)
)

// epoch is the raw clock's zero.
var epoch = time.Now()

// Clock reads the clock completions are stamped with: raw is the
// monotonic time in nanoseconds since the package was loaded, wallNS the
// same moment in nanoseconds since the Unix epoch. Raw readings never go
// backwards, whatever happens to the wall clock.
func Clock() (raw, wallNS uint64) {
	t := time.Now()
	return uint64(t.Sub(epoch)), uint64(t.UnixNano())
}

// Push adds a completion; solicited says whether it is for a solicited
// message (a SEND with the SE bit). It returns false if the CQ is full:
// the completion is lost and the CQ is in error, and the provider should
// report EventCQErr and fail the QP, as hardware does.
func (cq *CQ) Push(wc *verbs.WC, solicited bool) bool {
	cq.mu.Lock()
	if cq.closed || cq.overflow {
		cq.mu.Unlock()
		return false
	}
	if cq.n == cq.size {
		cq.overflow = true
		cq.mu.Unlock()
		return false
	}
	if cq.ring == nil {
		cq.ring = make([]verbs.WC, cq.size)
	}
	i := (cq.head + cq.n) % cq.size
	cq.ring[i] = *wc
	if cq.stamps != nil {
		// Read under the lock, so that the stamps of the queue's
		// entries never decrease whichever QPs push them.
		raw, wall := Clock()
		cq.stamps[i] = stamp{raw, wall}
	}
	cq.n++
	fire := cq.armed == notifyAll || cq.armed == notifySolicited && (solicited || wc.Status != verbs.WCSuccess)
	if fire {
		cq.armed = notifyNone
	}
	select {
	case cq.nonEmpty <- struct{}{}:
	default:
	}
	cq.mu.Unlock()
	if fire && cq.notify != nil {
		cq.notify()
	}
	return true
}

// FirstOverrun reports whether the CQ has overrun and this is the first
// call to say so: a provider reports IBV_EVENT_CQ_ERR once per CQ, as
// hardware does, however many completions are refused after it.
func (cq *CQ) FirstOverrun() bool {
	cq.mu.Lock()
	defer cq.mu.Unlock()
	if !cq.overflow || cq.overrunTold {
		return false
	}
	cq.overrunTold = true
	return true
}

// Poll implements verbs.CQDriver (ibv_poll_cq).
func (cq *CQ) Poll(wc []verbs.WC) (int, error) {
	n, err := cq.poll(wc)
	if n == 0 && err == nil && cq.onEmpty != nil {
		cq.onEmpty()
		n, err = cq.poll(wc)
	}
	return n, err
}

// SetOnEmptyPoll makes a Poll or StartPoll that finds the CQ empty call f,
// then look again: f is the device making progress on the polling
// goroutine (see verbs.ProgressManual). It is set once, before the CQ is
// used.
func (cq *CQ) SetOnEmptyPoll(f func()) { cq.onEmpty = f }

// SetOnWait makes Wait, before it blocks, and ReqNotify call f: the
// program stops polling to wait for an event, and the device, which left
// the network to its polls, takes it back (see verbs.ProgressManual). It
// is set once, before the CQ is used.
func (cq *CQ) SetOnWait(f func()) { cq.onWait = f }

func (cq *CQ) poll(wc []verbs.WC) (int, error) {
	cq.mu.Lock()
	defer cq.mu.Unlock()
	if cq.closed {
		return 0, verbs.Errorf("ibv_poll_cq", verbs.ErrClosed, "CQ destroyed")
	}
	k := 0
	for k < len(wc) && cq.n > 0 {
		wc[k] = cq.ring[cq.head]
		cq.pop()
		k++
	}
	if k == 0 && cq.overflow {
		return 0, verbs.Errorf("ibv_poll_cq", verbs.ErrIO, "CQ overrun: completions were lost")
	}
	return k, nil
}

// pop drops the oldest completion (mu held).
func (cq *CQ) pop() {
	cq.head = (cq.head + 1) % cq.size
	cq.n--
}

// StartPoll implements verbs.CQExDriver (ibv_start_poll): it takes the
// oldest completion into cur, with its timestamps if the CQ is stamped.
// It returns verbs.ErrNoEntry when the CQ is empty.
func (cq *CQ) StartPoll(cur *verbs.WCEx) error {
	err := cq.take(cur, "ibv_start_poll")
	if errors.Is(err, verbs.ErrNoEntry) && cq.onEmpty != nil {
		cq.onEmpty() // as Poll does
		err = cq.take(cur, "ibv_start_poll")
	}
	return err
}

// NextPoll implements verbs.CQExDriver (ibv_next_poll), as StartPoll.
func (cq *CQ) NextPoll(cur *verbs.WCEx) error { return cq.take(cur, "ibv_next_poll") }

// EndPoll implements verbs.CQExDriver (ibv_end_poll). StartPoll and
// NextPoll consume what they hand out, so there is nothing to do.
func (cq *CQ) EndPoll() {}

func (cq *CQ) take(cur *verbs.WCEx, op string) error {
	cq.mu.Lock()
	defer cq.mu.Unlock()
	if cq.closed {
		return verbs.Errorf(op, verbs.ErrClosed, "CQ destroyed")
	}
	if cq.n == 0 {
		if cq.overflow {
			return verbs.Errorf(op, verbs.ErrIO, "CQ overrun: completions were lost")
		}
		return verbs.ErrNoEntry
	}
	cur.WC = cq.ring[cq.head]
	cur.CompletionTS, cur.CompletionWallclockNS = 0, 0
	if cq.stamps != nil {
		s := cq.stamps[cq.head]
		cur.CompletionTS, cur.CompletionWallclockNS = s.raw, s.wallNS
	}
	cq.pop()
	return nil
}

// Len implements verbs.CQDriver.
func (cq *CQ) Len() int {
	cq.mu.Lock()
	defer cq.mu.Unlock()
	return cq.n
}

// Cap implements verbs.CQDriver.
func (cq *CQ) Cap() int {
	cq.mu.Lock()
	defer cq.mu.Unlock()
	return cq.size
}

// Wait implements verbs.CQDriver.
func (cq *CQ) Wait(ctx context.Context) error {
	for {
		cq.mu.Lock()
		n, closed := cq.n, cq.closed
		cq.mu.Unlock()
		if closed {
			return verbs.Errorf("ibv_poll_cq", verbs.ErrClosed, "CQ destroyed")
		}
		if n > 0 {
			return nil
		}
		if cq.onWait != nil {
			cq.onWait()
		}
		select {
		case <-cq.nonEmpty:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}

// ReqNotify implements verbs.CQDriver (ibv_req_notify_cq).
func (cq *CQ) ReqNotify(solicitedOnly bool) error {
	if cq.onWait != nil {
		cq.onWait() // arming is how a program starts to wait on a channel
	}
	cq.mu.Lock()
	defer cq.mu.Unlock()
	if cq.closed {
		return verbs.Errorf("ibv_req_notify_cq", verbs.ErrClosed, "CQ destroyed")
	}
	if solicitedOnly {
		if cq.armed != notifyAll {
			cq.armed = notifySolicited
		}
	} else {
		cq.armed = notifyAll
	}
	return nil
}

// Resize implements verbs.CQDriver (ibv_resize_cq). It fails with
// ErrInvalidArgument if cqe is below the number queued.
func (cq *CQ) Resize(cqe int) error {
	cq.mu.Lock()
	defer cq.mu.Unlock()
	if cq.closed {
		return verbs.Errorf("ibv_resize_cq", verbs.ErrClosed, "CQ destroyed")
	}
	if cqe < 1 || cqe < cq.n {
		return verbs.Errorf("ibv_resize_cq", verbs.ErrInvalidArgument, "fewer entries than completions queued")
	}
	ring := make([]verbs.WC, cqe)
	var stamps []stamp
	if cq.stamps != nil {
		stamps = make([]stamp, cqe)
	}
	for i := 0; i < cq.n; i++ {
		j := (cq.head + i) % cq.size
		ring[i] = cq.ring[j]
		if stamps != nil {
			stamps[i] = cq.stamps[j]
		}
	}
	cq.ring, cq.size, cq.stamps, cq.head = ring, cqe, stamps, 0
	return nil
}

// Destroy implements verbs.CQDriver (ibv_destroy_cq).
func (cq *CQ) Destroy() error {
	cq.mu.Lock()
	defer cq.mu.Unlock()
	if !cq.closed {
		cq.closed = true
		close(cq.nonEmpty)
	}
	return nil
}

var _ verbs.CQExDriver = (*CQ)(nil)
