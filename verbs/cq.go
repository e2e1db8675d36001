package verbs

import (
	"context"
	"sync"

	"github.com/rdmago/rdmago/internal/racesync"
)

// CQ is a completion queue (struct ibv_cq). Providers add completions with
// Push; programs take them with Poll, and wait for them with Wait, with a
// completion channel (ReqNotify + CompChannel.GetCQEvent, as in C), or with
// both.
type CQ struct {
	ctx     *Context
	channel *CompChannel

	mu       sync.Mutex
	ring     []WC // circular: n entries from head
	head, n  int
	armed    notifyMode
	overflow bool
	users    int // QPs using this CQ
	events   uint64
	acked    uint64
	closed   bool
	nonEmpty chan struct{} // signalled (without blocking) on each Push
}

type notifyMode uint8

const (
	notifyNone notifyMode = iota
	notifyAll
	notifySolicited
)

// CreateCQ creates a completion queue with room for at least cqe
// completions (ibv_create_cq). channel, if not nil, receives an event each
// time the CQ is armed with ReqNotify and a completion arrives.
// compVector is accepted for compatibility and ignored.
func (c *Context) CreateCQ(cqe int, channel *CompChannel, compVector int) (*CQ, error) {
	if err := c.check("ibv_create_cq"); err != nil {
		return nil, err
	}
	attr, err := c.drv.QueryDevice()
	if err != nil {
		return nil, err
	}
	if cqe < 1 || cqe > attr.MaxCQE {
		return nil, Errorf("ibv_create_cq", ErrInvalidArgument, "cqe "+itoa(cqe)+" not in [1, "+itoa(attr.MaxCQE)+"]")
	}
	if channel != nil && channel.ctx != c {
		return nil, Errorf("ibv_create_cq", ErrInvalidArgument, "completion channel belongs to another context")
	}
	cq := &CQ{ctx: c, channel: channel, ring: make([]WC, cqe), nonEmpty: make(chan struct{}, 1)}
	if channel != nil {
		channel.attach(1)
	}
	return cq, nil
}

// Push adds a completion; solicited says whether it is for a solicited
// message (a SEND with the SE bit). It is for providers. It returns false if
// the CQ is full: the completion is lost and the CQ is in error, and the
// provider should report EventCQErr and fail the QP, as hardware does.
func (cq *CQ) Push(wc *WC, solicited bool) bool {
	cq.mu.Lock()
	if cq.closed || cq.overflow {
		cq.mu.Unlock()
		return false
	}
	if cq.n == len(cq.ring) {
		cq.overflow = true
		cq.mu.Unlock()
		return false
	}
	cq.ring[(cq.head+cq.n)%len(cq.ring)] = *wc
	cq.n++
	fire := cq.armed == notifyAll || cq.armed == notifySolicited && (solicited || wc.Status != WCSuccess)
	if fire {
		cq.armed = notifyNone
		cq.events++
	}
	select {
	case cq.nonEmpty <- struct{}{}:
	default:
	}
	cq.mu.Unlock()
	if fire && cq.channel != nil && !cq.channel.post(cq) {
		// Dropped by a full channel: there is nothing to acknowledge.
		cq.mu.Lock()
		cq.events--
		cq.mu.Unlock()
	}
	return true
}

// Poll moves up to len(wc) completions into wc and returns how many
// (ibv_poll_cq). It never blocks. After an overflow it returns an error
// wrapping ErrIO once the queue is drained.
func (cq *CQ) Poll(wc []WC) (int, error) {
	racesync.Sync()
	cq.mu.Lock()
	defer cq.mu.Unlock()
	if cq.closed {
		return 0, Errorf("ibv_poll_cq", ErrClosed, "CQ destroyed")
	}
	k := 0
	for k < len(wc) && cq.n > 0 {
		wc[k] = cq.ring[cq.head]
		cq.head = (cq.head + 1) % len(cq.ring)
		cq.n--
		k++
	}
	if k == 0 && cq.overflow {
		return 0, Errorf("ibv_poll_cq", ErrIO, "CQ overrun: completions were lost")
	}
	return k, nil
}

// Len returns the number of completions waiting to be polled.
func (cq *CQ) Len() int {
	cq.mu.Lock()
	defer cq.mu.Unlock()
	return cq.n
}

// Cap returns the number of completions the CQ holds (ibv_cq.cqe).
func (cq *CQ) Cap() int {
	cq.mu.Lock()
	defer cq.mu.Unlock()
	return len(cq.ring)
}

// Wait blocks until the CQ holds a completion or ctx is done. It needs no
// completion channel and no arming: it is the Go way to wait, usable
// alongside Poll from one goroutine.
func (cq *CQ) Wait(ctx context.Context) error {
	for {
		cq.mu.Lock()
		n, closed := cq.n, cq.closed
		cq.mu.Unlock()
		if closed {
			return Errorf("ibv_poll_cq", ErrClosed, "CQ destroyed")
		}
		if n > 0 {
			return nil
		}
		select {
		case <-cq.nonEmpty:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}

// ReqNotify arms the CQ: the next completion (with solicitedOnly, the next
// solicited or failed one) sends one event to the CQ's completion channel
// (ibv_req_notify_cq). Completions already queued do not fire.
func (cq *CQ) ReqNotify(solicitedOnly bool) error {
	cq.mu.Lock()
	defer cq.mu.Unlock()
	if cq.closed {
		return Errorf("ibv_req_notify_cq", ErrClosed, "CQ destroyed")
	}
	if cq.channel == nil {
		return Errorf("ibv_req_notify_cq", ErrInvalidArgument, "CQ has no completion channel")
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

// AckEvents acknowledges n events GetCQEvent returned for this CQ
// (ibv_ack_cq_events).
func (cq *CQ) AckEvents(n int) {
	cq.mu.Lock()
	cq.acked += uint64(n)
	cq.mu.Unlock()
}

// Resize changes the number of completions the CQ holds (ibv_resize_cq).
// It fails with ErrInvalidArgument if cqe is below the number queued.
func (cq *CQ) Resize(cqe int) error {
	attr, err := cq.ctx.drv.QueryDevice()
	if err != nil {
		return err
	}
	cq.mu.Lock()
	defer cq.mu.Unlock()
	if cq.closed {
		return Errorf("ibv_resize_cq", ErrClosed, "CQ destroyed")
	}
	if cqe < 1 || cqe < cq.n || cqe > attr.MaxCQE {
		return Errorf("ibv_resize_cq", ErrInvalidArgument,
			"cqe "+itoa(cqe)+" with "+itoa(cq.n)+" queued, max "+itoa(attr.MaxCQE))
	}
	ring := make([]WC, cqe)
	for i := 0; i < cq.n; i++ {
		ring[i] = cq.ring[(cq.head+i)%len(cq.ring)]
	}
	cq.ring, cq.head = ring, 0
	return nil
}

// use and release count the QPs that use the CQ; providers' QPs call them
// through the verbs layer.
func (cq *CQ) use() {
	cq.mu.Lock()
	cq.users++
	cq.mu.Unlock()
}

func (cq *CQ) release() {
	cq.mu.Lock()
	cq.users--
	cq.mu.Unlock()
}

// Destroy destroys the CQ (ibv_destroy_cq). It fails with ErrBusy while a
// QP uses it or while events from GetCQEvent are not acknowledged.
func (cq *CQ) Destroy() error {
	cq.mu.Lock()
	defer cq.mu.Unlock()
	if cq.closed {
		return nil
	}
	if cq.users > 0 {
		return Errorf("ibv_destroy_cq", ErrBusy, itoa(cq.users)+" QP(s) still use the CQ")
	}
	if cq.acked < cq.events && cq.channel != nil {
		return Errorf("ibv_destroy_cq", ErrBusy, "unacknowledged completion events: call AckEvents")
	}
	cq.closed = true
	if cq.channel != nil {
		cq.channel.attach(-1)
	}
	close(cq.nonEmpty)
	return nil
}

// CompChannel is a completion event channel (struct ibv_comp_channel): the
// armed CQs bound to it report their next completion through it.
type CompChannel struct {
	ctx *Context
	c   chan *CQ

	mu     sync.Mutex
	cqs    int
	closed bool
}

// compChannelLen bounds the events a channel queues. An event is sent only
// by an armed CQ, and arming is one-shot, so it is reached only by a
// program that arms without reading events; further events are dropped.
const compChannelLen = 4096

// CreateCompChannel creates a completion channel (ibv_create_comp_channel).
func (c *Context) CreateCompChannel() (*CompChannel, error) {
	if err := c.check("ibv_create_comp_channel"); err != nil {
		return nil, err
	}
	return &CompChannel{ctx: c, c: make(chan *CQ, compChannelLen)}, nil
}

func (ch *CompChannel) attach(d int) {
	ch.mu.Lock()
	ch.cqs += d
	ch.mu.Unlock()
}

func (ch *CompChannel) post(cq *CQ) bool {
	select {
	case ch.c <- cq:
		return true
	default:
		return false
	}
}

// GetCQEvent waits for the next event and returns its CQ
// (ibv_get_cq_event). Each event must be acknowledged with CQ.AckEvents.
func (ch *CompChannel) GetCQEvent(ctx context.Context) (*CQ, error) {
	select {
	case cq := <-ch.c:
		return cq, nil
	case <-ctx.Done():
		return nil, ctx.Err()
	}
}

// C returns the channel GetCQEvent reads, for use in select.
func (ch *CompChannel) C() <-chan *CQ { return ch.c }

// Close destroys the channel (ibv_destroy_comp_channel). It fails with
// ErrBusy while CQs are bound to it.
func (ch *CompChannel) Close() error {
	ch.mu.Lock()
	defer ch.mu.Unlock()
	if ch.cqs > 0 {
		return Errorf("ibv_destroy_comp_channel", ErrBusy, itoa(ch.cqs)+" CQ(s) still bound")
	}
	ch.closed = true
	return nil
}
