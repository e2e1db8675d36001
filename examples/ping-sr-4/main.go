// Command ping-sr-4 is the OFA course's ping-sr-4 (seed 003): the last
// ping-pong, with one wait for both kinds of news and no extra thread.
//
// What this lesson changes from ping-sr-3: both channels are made
// non-blocking, and the program waits for either with one POSIX poll() on
// their file descriptors, as a socket program waits for its sockets; the
// CM event thread is gone. In Go the poll() is a select on the event
// channel's Ready and the completion channel's C. When the event channel
// is ready, rdma_get_cm_event on the non-blocking channel takes the event
// (PollEvent, which like the C call may find none: EAGAIN) and the event
// is recorded as the latest; when the completion channel is, its event is
// taken and counted, the CQ armed again, and the CQ polled. Connection
// set-up waits the same way, on the event channel alone.
//
// The rest is ping-sr-3's: the poll statistics, the keepalive (its timer
// is one more case of the select) and ECONNRESET once the connection has
// left ESTABLISHED.
//
// Usage (the flags are ping-sr-0's; the server takes the client's -c and -s):
//
//	ping-sr-4 server [-a address] [-p port] [-c count] [-s size] [-P pause] [-V] [-v] [-t]
//	ping-sr-4 client -a server [-p port] [-c count] [-s size] [-P pause] [-V] [-v] [-t]
//
//	go run ./examples/ping-sr-4 server &
//	go run ./examples/ping-sr-4 client -a 127.0.0.1 -c 1000
package main

import (
	"context"
	"fmt"
	"time"

	"github.com/rdmago/rdmago/examples/internal/course"
	"github.com/rdmago/rdmago/rdmacm"
	_ "github.com/rdmago/rdmago/rdmacore" // rdma-core devices, with -tags rdmacore
	_ "github.com/rdmago/rdmago/rxe"      // the software RoCE device
	"github.com/rdmago/rdmago/verbs"
)

// lesson is what this program does that ping-sr-0 does not; the course's
// flow (course.Lesson.Run) runs it.
var lesson = course.Lesson{
	Name:         "ping-sr-4",
	Kind:         course.PingPong,
	ConnectInfo:  true,
	EventChannel: true,
	Keepalive:    true,
	CompChannel:  true,
	// New: no CM event goroutine; both channels are read without
	// blocking, after one wait for either.
	WaitEvent: waitEvent,
	Await:     awaitCompletion,
}

func main() { lesson.Run() }

// waitEvent makes ping-sr-4's wait for a connection's next CM event:
// poll() on the channel's fd — a select on Ready — then rdma_get_cm_event,
// which on a non-blocking channel may find nothing (PollEvent).
func waitEvent(c *course.Control) func(context.Context) (*rdmacm.Event, error) {
	return func(ctx context.Context) (*rdmacm.Event, error) {
		for {
			if ev, ok := c.Channel.PollEvent(); ok { // rdma_get_cm_event
				return ev, nil
			}
			select { // poll(): the event channel's fd
			case <-c.Channel.Ready():
			case <-ctx.Done():
				return nil, fmt.Errorf("poll: %w", context.Cause(ctx))
			}
		}
	}
}

// awaitCompletion is ping-sr-4's our_await_completion: poll the CQ; when
// it is empty, wait in one poll() on both channels (pollChannels) and
// poll again.
func awaitCompletion(c *course.Control) course.AwaitFunc {
	return func(ctx context.Context, wc *verbs.WC) error {
		return c.AwaitNotified(ctx, wc, func(ctx context.Context, _ bool) (bool, error) {
			return pollChannels(ctx, c)
		})
	}
}

// pollChannels is the poll() on both channels' fds: it waits for the
// first of a CM event, a completion event and the keepalive's time, and
// handles it. A CM event is taken (rdma_get_cm_event on the non-blocking
// channel) and recorded as the latest; a completion event is taken and
// accounted for, and the CQ armed again (cqEvent: the caller polls the
// CQ); at the keepalive's time a keepalive is sent.
func pollChannels(ctx context.Context, c *course.Control) (cqEvent bool, err error) {
	o := c.Options()
	var keepalive <-chan time.Time
	if d, ok := c.KeepaliveDue(); ok {
		t := time.NewTimer(d)
		defer t.Stop()
		keepalive = t.C
	}
	select {
	case <-c.Channel.Ready():
		if ev, ok := c.Channel.PollEvent(); ok { // rdma_get_cm_event
			o.Trace("poll", "got cm event", fmt.Sprintf("%d (%s) status %d", ev.Type, ev.Type, ev.Status))
			c.RecordCMEvent(ev.Type, ev.Status)
			ev.Ack() // rdma_ack_cm_event
		}
		return false, nil
	case cq := <-c.CompChannel.C(): // ibv_get_cq_event on the non-blocking channel
		return true, c.TookCQEvent(cq)
	case <-keepalive:
		return false, c.KeepaliveIfQuiet()
	case <-ctx.Done():
		err := fmt.Errorf("poll: %w", context.Cause(ctx))
		o.ReportError("poll", err)
		return false, err
	}
}
