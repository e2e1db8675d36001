// Command ping-sr-3 is the OFA course's ping-sr-3 (seed 003): ping-sr-2
// with the answer to the third problem, a waiting side that burns a CPU.
//
// What this lesson changes from ping-sr-2: the completion queue is made
// with a completion channel (ibv_create_comp_channel, ibv_create_cq on
// it) and armed (ibv_req_notify_cq), and our_await_completion no longer
// spins. It polls once; if that finds nothing it waits for the channel's
// event (our_wait_for_notification: ibv_get_cq_event blocks, the event is
// counted for ibv_ack_cq_events, and ibv_req_notify_cq arms the CQ for the
// next one), then polls again. A waiting side now sleeps; the price is
// the wake-up on each message, so the round trip takes longer.
//
// It counts what its polls find and prints the counts at the end:
// n_1st_poll_non_zero (a completion was already there), n_1st_poll_zero
// (it had to wait), n_2nd_poll_non_zero (the event brought one) and
// n_2nd_poll_zero (the event was for a completion an earlier poll had
// taken: the race between ibv_req_notify_cq and the poll that empties the
// queue, which man ibv_get_cq_event describes), and the events taken.
//
// The CM event goroutine, the keepalive and ECONNRESET are ping-sr-2's.
// A blocked ibv_get_cq_event must also end when the peer disconnects or
// a keepalive is due: here it is given a context that the CM event
// goroutine ends when the connection leaves ESTABLISHED, with a deadline
// at the keepalive's time.
//
// Usage (the flags are ping-sr-0's; the server takes the client's -c and -s):
//
//	ping-sr-3 server [-a address] [-p port] [-c count] [-s size] [-P pause] [-V] [-v] [-t]
//	ping-sr-3 client -a server [-p port] [-c count] [-s size] [-P pause] [-V] [-v] [-t]
//
//	go run ./examples/ping-sr-3 server &
//	go run ./examples/ping-sr-3 client -a 127.0.0.1 -c 20 -P 1s
//
// and watch top: the side that waits uses no CPU (ping-sr-2's spins).
package main

import (
	"context"
	"errors"

	"github.com/rdmago/rdmago/examples/internal/course"
	_ "github.com/rdmago/rdmago/rdmacore" // rdma-core devices, with -tags rdmacore
	_ "github.com/rdmago/rdmago/rxe"      // the software RoCE device
	"github.com/rdmago/rdmago/verbs"
)

// lesson is what this program does that ping-sr-0 does not; the course's
// flow (course.Lesson.Run) runs it.
var lesson = course.Lesson{
	Name:          "ping-sr-3",
	Kind:          course.PingPong,
	ConnectInfo:   true,
	EventChannel:  true,
	CMEventThread: true,
	Keepalive:     true,
	CompChannel:   true,            // new: the CQ on a completion channel
	Await:         awaitCompletion, // new: sleep until the channel's event
}

func main() { lesson.Run() }

// awaitCompletion is ping-sr-3's our_await_completion: poll; when the
// queue is empty, sleep in our_wait_for_notification and poll again.
func awaitCompletion(c *course.Control) course.AwaitFunc {
	return func(ctx context.Context, wc *verbs.WC) error {
		return c.AwaitNotified(ctx, wc, func(ctx context.Context, left bool) (bool, error) {
			return waitForNotification(ctx, c, left)
		})
	}
}

// waitForNotification is our_wait_for_notification: it blocks in
// ibv_get_cq_event until the armed CQ has a completion, then accounts for
// the event and arms the CQ again (TookCQEvent: ibv_ack_cq_events,
// ibv_req_notify_cq). The wait also ends, with no event taken, when the
// CM event goroutine sees the connection leave ESTABLISHED (unless left:
// it has, and a SEND in flight is still to complete) or a keepalive is
// due, which it then sends.
func waitForNotification(ctx context.Context, c *course.Control, left bool) (bool, error) {
	wctx, cancel := context.WithCancel(ctx)
	defer cancel()
	if !left {
		stop := context.AfterFunc(c.ConnContext(), cancel)
		defer stop()
	}
	keepalive := false
	if d, ok := c.KeepaliveDue(); ok {
		var cancelT context.CancelFunc
		wctx, cancelT = context.WithTimeout(wctx, d)
		defer cancelT()
		keepalive = true
	}
	cq, err := c.CompChannel.GetCQEvent(wctx) // ibv_get_cq_event
	switch {
	case ctx.Err() != nil:
		c.Options().ReportError("ibv_get_cq_event", err)
		return false, err
	case errors.Is(err, context.DeadlineExceeded) && keepalive:
		return false, c.KeepaliveIfQuiet()
	case err != nil:
		return false, nil // the connection left ESTABLISHED: the next look says so
	}
	return true, c.TookCQEvent(cq)
}
