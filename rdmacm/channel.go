package rdmacm

import (
	"context"
	"sync"

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
	ids    int // IDs using the channel; guarded by cm.mu

	cOnce sync.Once
	c     chan *Event // C's channel, fed by pump
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
			ch.queue[0] = nil
			ch.queue = ch.queue[1:]
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

// C returns a channel that delivers the events in order, for a select
// that waits on the connection manager's events and on other channels
// at once (verbs.CompChannel.C, a timer, a context): what a C program
// does by polling the event channel's fd beside its completion
// channel's. The first call starts the delivery; from then on each event
// goes to C or to a GetEvent, whichever asks first. The channel is closed
// once the event channel is.
func (ch *EventChannel) C() <-chan *Event {
	ch.cOnce.Do(func() {
		ch.c = make(chan *Event)
		go ch.pump()
	})
	return ch.c
}

// pump feeds C's channel until the event channel is closed.
func (ch *EventChannel) pump() {
	defer close(ch.c)
	for {
		ev, err := ch.GetEvent(context.Background()) // returns once closed
		if err != nil {
			return
		}
		select {
		case ch.c <- ev:
		case <-ch.done:
			return
		}
	}
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
	cm.mu.Lock()
	defer cm.mu.Unlock()
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
