package course

import (
	"context"
	"fmt"
	"math"
	"time"

	"github.com/rdmago/rdmago/internal/yield"
	"github.com/rdmago/rdmago/verbs"
)

// AwaitFunc waits for the next work completion of the connection and
// stores it in wc (our_await_completion): each lesson has its own. It
// returns the error of a completion that failed, of a peer that is gone,
// or of ctx (the program was interrupted).
type AwaitFunc func(ctx context.Context, wc *verbs.WC) error

// AwaitCompletionBusy is ping-sr-0's our_await_completion: it calls
// ibv_poll_cq until a completion comes, burning the CPU, and never learns
// of a peer that is gone. It gives up only when ctx ends. Between polls it
// yields the CPU (yield.CPU), which the software device needs.
func (c *Control) AwaitCompletionBusy(ctx context.Context, wc *verbs.WC) error {
	for spins := 0; ; spins++ {
		n, err := c.poll(wc) // ibv_poll_cq
		if err != nil {
			c.o.ReportError("ibv_poll_cq", err)
			return err
		}
		if n == 1 {
			c.Took(wc)
			return c.CheckCompletion(wc)
		}
		yield.CPU()
		if spins%1024 == 0 && ctx.Err() != nil {
			return interrupted(ctx)
		}
	}
}

// AwaitCompletionBusyCM is ping-sr-2's our_await_completion: still a busy
// poll, but it also looks at the latest event the CM event goroutine
// recorded, and once the connection has left ESTABLISHED and nothing more
// can complete it reports the peer gone (ECONNRESET) instead of polling
// for ever. While it waits it sends keepalives, for a peer killed without
// a disconnect.
func (c *Control) AwaitCompletionBusyCM(ctx context.Context, wc *verbs.WC) error {
	for spins := 0; ; spins++ {
		gone := c.LatestCMEventErr() // read before the poll that must find the queue empty
		n, err := c.poll(wc)         // ibv_poll_cq
		if err != nil {
			c.o.ReportError("ibv_poll_cq", err)
			return err
		}
		if n == 1 {
			if keepalive, err := c.Took(wc); keepalive {
				if err != nil {
					return err
				}
				continue
			}
			return c.CheckCompletion(wc)
		}
		if err := c.PeerGone(gone); err != nil {
			return err
		}
		yield.CPU()
		if spins%1024 == 0 {
			if ctx.Err() != nil {
				return interrupted(ctx)
			}
			if err := c.KeepaliveIfQuiet(); err != nil {
				return err
			}
		}
	}
}

// poll polls the CQ for one completion into wc (ibv_poll_cq).
func (c *Control) poll(wc *verbs.WC) (int, error) {
	var one [1]verbs.WC
	n, err := c.CQ.Poll(one[:])
	if n == 1 {
		*wc = one[0]
	}
	return n, err
}

// Poll is ibv_poll_cq for one completion, into wc, for the awaits of the
// programs.
func (c *Control) Poll(wc *verbs.WC) (int, error) { return c.poll(wc) }

// interrupted is the error of a wait that ctx ended.
func interrupted(ctx context.Context) error {
	return fmt.Errorf("interrupted: %w", context.Cause(ctx))
}

// PeerGone turns gone, what LatestCMEventErr said before the last poll
// found the queue empty, into the error of the wait: the peer has
// disconnected, so a receive will never complete. While a SEND or
// keepalive is in flight the wait goes on, for it completes either way
// (the peer's acknowledgement may trail its disconnect request, and a
// peer that is gone fails it within the transport's retries).
func (c *Control) PeerGone(gone error) error {
	if gone == nil || c.sendsInFlight > 0 {
		return nil
	}
	c.o.ReportError("our_await_completion", gone)
	return gone
}

// SendsInFlight returns how many SENDs and keepalives are posted and not
// yet completed: while any is, a wait will see a completion.
func (c *Control) SendsInFlight() int { return c.sendsInFlight }

// PollStats are the counts ping-sr-3 and 4 keep of what their polls
// found: whether the poll before a wait found a completion, and whether
// the poll after a completion event did (none: the event was for a
// completion an earlier poll took).
type PollStats struct {
	FirstPollZero, FirstPollNonZero   uint64 // n_1st_poll_zero, n_1st_poll_non_zero
	SecondPollZero, SecondPollNonZero uint64 // n_2nd_poll_zero, n_2nd_poll_non_zero
	CQEvents                          uint64 // completion events taken
}

// ReportStats prints the poll statistics.
func (c *Control) ReportStats() {
	s := &c.Stats
	c.o.Printf("n_1st_poll_zero %d, n_1st_poll_non_zero %d, n_2nd_poll_zero %d, n_2nd_poll_non_zero %d, cq events %d",
		s.FirstPollZero, s.FirstPollNonZero, s.SecondPollZero, s.SecondPollNonZero, s.CQEvents)
}

// keepalive is the state of the keepalive: when a completion last came,
// and whether a keepalive is in flight.
type keepalive struct {
	on          bool
	quietSince  time.Time
	outstanding bool
}

// KeepaliveIdle is how long a program that sends keepalives waits without
// a completion before it sends one.
const KeepaliveIdle = 500 * time.Millisecond

// ACKTimeout is the local ACK timeout the programs that send keepalives
// set on their IDs (rdma_set_option RDMA_OPTION_ID_ACK_TIMEOUT):
// 4.096 µs << 16, about 268 ms. With RetryCount retries, a peer that no
// longer answers fails a work request within about 1.6 s.
const ACKTimeout = 16

// EnableKeepalive makes the awaits of this connection send keepalives, and
// sets the ID's ACK timeout to ACKTimeout so that they fail soon. Call it
// before connecting or accepting.
func (c *Control) EnableKeepalive() error {
	if err := c.ID.SetACKTimeout(ACKTimeout); err != nil { // rdma_set_option
		c.o.ReportError("rdma_set_option", err)
		return err
	}
	c.keepalive = keepalive{on: true, quietSince: time.Now()}
	return nil
}

// KeepaliveDue returns how long until KeepaliveIfQuiet would send a
// keepalive, for a wait that must wake for it; false if it would not.
func (c *Control) KeepaliveDue() (time.Duration, bool) {
	k := &c.keepalive
	if !k.on || k.outstanding {
		return 0, false
	}
	return max(0, KeepaliveIdle-time.Since(k.quietSince)), true
}

// KeepaliveIfQuiet posts a keepalive if keepalives are on, none is in
// flight, and no completion came for KeepaliveIdle: an RDMA WRITE of no
// bytes, which needs no remote key and changes nothing at the peer but
// must be acknowledged by it.
func (c *Control) KeepaliveIfQuiet() error {
	if d, ok := c.KeepaliveDue(); !ok || d > 0 {
		return nil
	}
	wr := []verbs.SendWR{{WRID: KeepaliveWRID, Opcode: verbs.WRRDMAWrite, SendFlags: verbs.SendSignaled}}
	if err := c.QP.PostSend(wr); err != nil { // ibv_post_send
		if c.QP.State() == verbs.QPSErr {
			return nil // the connection failed; its flushed work requests say how
		}
		c.o.ReportError("ibv_post_send", err)
		return err
	}
	c.o.Trace("ibv_post_send", "keepalive after quiet ms", KeepaliveIdle.Milliseconds())
	c.keepalive.outstanding = true
	c.keepalive.quietSince = time.Now()
	c.sendsInFlight++
	return nil
}

// Took accounts for a completion an await polled: a SEND's or
// keepalive's is no longer in flight, and the keepalive's clock starts
// again. For a keepalive's completion it returns true, and the error of
// one that failed (the peer no longer answers); the await then polls on.
func (c *Control) Took(wc *verbs.WC) (keepalive bool, err error) {
	c.keepalive.quietSince = time.Now()
	if wc.WRID < RecvWRIDBase || wc.WRID == KeepaliveWRID {
		c.sendsInFlight--
	}
	if wc.WRID != KeepaliveWRID {
		return false, nil
	}
	c.keepalive.outstanding = false
	if wc.Status == verbs.WCSuccess {
		return true, nil
	}
	err = verbs.Errorf("our_await_completion", ErrPeerGone,
		fmt.Sprintf("the peer stopped answering: keepalive completed with status %d %s", wc.Status, wc.Status))
	c.o.ReportError("our_await_completion", err)
	return true, err
}

// BusyPoll makes ping-sr-0's await for a connection (AwaitCompletionBusy),
// for Lesson.Await.
func BusyPoll(c *Control) AwaitFunc { return c.AwaitCompletionBusy }

// BusyPollCM makes ping-sr-2's await for a connection
// (AwaitCompletionBusyCM), for Lesson.Await.
func BusyPollCM(c *Control) AwaitFunc { return c.AwaitCompletionBusyCM }

// WaitFunc is how a lesson with a completion channel sleeps when its poll
// found the CQ empty: it returns true when it took a completion event
// (with TookCQEvent), false when something else ended the wait (a
// connection manager event, the keepalive's time) and the await should
// look again. left says the connection has left ESTABLISHED while a SEND
// is still in flight: the wait must then not end merely because of that.
type WaitFunc func(ctx context.Context, left bool) (cqEvent bool, err error)

// AwaitNotified is the our_await_completion of the lessons with a
// completion channel (ping-sr-3 and 4): poll the CQ; if it is empty,
// sleep in wait, and after a completion event poll again. It counts what
// each poll found (Stats), takes keepalives' completions, and once the
// connection has left ESTABLISHED and nothing more can complete returns
// ECONNRESET, as ping-sr-2's does.
func (c *Control) AwaitNotified(ctx context.Context, wc *verbs.WC, wait WaitFunc) error {
	s := &c.Stats
	for {
		gone := c.LatestCMEventErr() // before the poll that must find the queue empty
		n, err := c.poll(wc)         // ibv_poll_cq
		if err != nil {
			c.o.ReportError("ibv_poll_cq", err)
			return err
		}
		if n == 0 {
			s.FirstPollZero++
			if err := c.PeerGone(gone); err != nil {
				return err
			}
			// No completion here yet: wait for one.
			cqEvent, err := wait(ctx, gone != nil)
			if err != nil {
				return err
			}
			if !cqEvent {
				continue
			}
			if n, err = c.poll(wc); err != nil { // ibv_poll_cq
				c.o.ReportError("ibv_poll_cq", err)
				return err
			}
			if n == 0 {
				s.SecondPollZero++
				continue
			}
			s.SecondPollNonZero++
		} else {
			s.FirstPollNonZero++
		}
		if keepalive, err := c.Took(wc); keepalive {
			if err != nil {
				return err
			}
			continue
		}
		return c.CheckCompletion(wc)
	}
}

// TookCQEvent accounts for a completion event a wait took from the
// completion channel: it counts it for ibv_ack_cq_events (acknowledging
// a batch when the count would overflow, and the rest in UnsetupQP) and
// asks for an event when the next completion arrives in the empty queue
// (ibv_req_notify_cq). A completion that arrives between the request and
// the poll that follows raises an event that finds the queue empty
// (n_2nd_poll_zero): the race man ibv_get_cq_event describes.
func (c *Control) TookCQEvent(cq *verbs.CQ) error {
	c.Stats.CQEvents++
	c.CQEventsThatNeedAck++
	if c.CQEventsThatNeedAck == math.MaxInt32 {
		cq.AckEvents(c.CQEventsThatNeedAck) // ibv_ack_cq_events
		c.CQEventsThatNeedAck = 0
	}
	if err := cq.ReqNotify(false); err != nil { // ibv_req_notify_cq
		c.o.ReportError("ibv_req_notify_cq", err)
		return err
	}
	return nil
}
