package rdmacm

import (
	"context"
	"sync"

	"github.com/rdmago/rdmago/internal/fifo"
	"github.com/rdmago/rdmago/verbs"
)

// EventChannel delivers the events of the IDs created on it (struct
// rdma_event_channel). Events queue without bound, in order, until
// GetEvent takes them.
type EventChannel struct {
	mu     sync.Mutex
	queue  []*Event
	ready  chan struct{} // has a value while the queue is not empty
	done   chan struct{} // closed by Close
	closed bool
	ids    int // IDs using the channel; guarded by idMu
}

// CreateEventChannel opens an event channel (rdma_create_event_channel).
func CreateEventChannel() (*EventChannel, error) {
	return newChannel(), nil
}

func newChannel() *EventChannel {
	return &EventChannel{ready: make(chan struct{}, 1), done: make(chan struct{})}
}

// GetEvent waits for the next event (rdma_get_cm_event). It returns
// ctx's error if ctx ends first, and an ErrClosed error once the channel
// is closed.
func (ch *EventChannel) GetEvent(ctx context.Context) (*Event, error) {
	for {
		ch.mu.Lock()
		if len(ch.queue) > 0 {
			ev := ch.queue[0]
			ch.queue = fifo.PopFront(ch.queue)
			if len(ch.queue) > 0 {
				ch.signal()
			}
			ch.mu.Unlock()
			return ev, nil
		}
		closed := ch.closed
		ch.mu.Unlock()
		if closed {
			return nil, verbs.Errorf("rdma_get_cm_event", verbs.ErrClosed, "event channel destroyed")
		}
		select {
		case <-ch.ready:
		case <-ch.done:
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
}

// Ready returns a channel that holds a value while events are queued:
// select on it beside verbs.CompChannel.C, a timer or a context, then
// take the events with PollEvent, as a C program polls the channel's fd
// and then calls rdma_get_cm_event. (GetEvent takes the same value when
// it waits, and gives it back while events remain.)
func (ch *EventChannel) Ready() <-chan struct{} { return ch.ready }

// PollEvent takes the next event if one is queued, without waiting
// (rdma_get_cm_event on a non-blocking channel, which fails with EAGAIN
// when the queue is empty). The value Ready held may be stale: an event
// can leave the queue with its ID (Destroy, Migrate).
func (ch *EventChannel) PollEvent() (*Event, bool) {
	ch.mu.Lock()
	defer ch.mu.Unlock()
	if len(ch.queue) == 0 {
		return nil, false
	}
	ev := ch.queue[0]
	ch.queue = fifo.PopFront(ch.queue)
	if len(ch.queue) > 0 {
		ch.signal()
	}
	return ev, true
}

// signal marks the channel ready; called with ch.mu held.
func (ch *EventChannel) signal() {
	select {
	case ch.ready <- struct{}{}:
	default:
	}
}

// push queues an event.
func (ch *EventChannel) push(ev *Event) {
	ch.mu.Lock()
	defer ch.mu.Unlock()
	if ch.closed {
		return
	}
	ch.queue = append(ch.queue, ev)
	ch.signal()
}

// take removes and returns the queued events of id, including requests
// to a listening id (for Migrate).
func (ch *EventChannel) take(id *ID) []*Event {
	ch.mu.Lock()
	defer ch.mu.Unlock()
	var out []*Event
	kept := ch.queue[:0]
	for _, ev := range ch.queue {
		if ev.ID == id || ev.ListenID == id {
			out = append(out, ev)
		} else {
			kept = append(kept, ev)
		}
	}
	for i := len(kept); i < len(ch.queue); i++ {
		ch.queue[i] = nil
	}
	ch.queue = kept
	return out
}

// Close destroys the channel (rdma_destroy_event_channel). As in C, every
// ID created on it must be destroyed (or migrated away) first: Close
// fails with ErrBusy otherwise. A GetEvent blocked on the channel returns.
func (ch *EventChannel) Close() error {
	idMu.Lock()
	defer idMu.Unlock()
	if ch.ids > 0 {
		return verbs.Errorf("rdma_destroy_event_channel", verbs.ErrBusy, "IDs still use the channel")
	}
	ch.shut()
	return nil
}

// shut closes the channel: queued events are dropped and every GetEvent
// returns.
func (ch *EventChannel) shut() {
	ch.mu.Lock()
	defer ch.mu.Unlock()
	if !ch.closed {
		ch.closed = true
		ch.queue = nil
		close(ch.done)
	}
}
