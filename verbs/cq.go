package verbs

import (
	"context"
	"sync"

	"github.com/rdmago/rdmago/internal/racesync"
)

// CQ is a completion queue (struct ibv_cq). The provider fills it;
// programs take completions with Poll, and wait for them with Wait, with a
// completion channel (ReqNotify + CompChannel.GetCQEvent, as in C), or with
// both.
type CQ struct {
	ctx     *Context
	channel *CompChannel
	drv     CQDriver

	mu         sync.Mutex
	users      int // QPs using this CQ
	events     uint64
	acked      uint64
	userCtx    any
	closed     bool
	destroying bool
}

// CreateCQ creates a completion queue with room for at least cqe
// completions (ibv_create_cq). channel, if not nil, receives an event each
// time the CQ is armed with ReqNotify and a completion arrives.
// compVector is the completion vector its events go to, from 0 to
// NumCompVectors()-1 (the software device has one).
func (c *Context) CreateCQ(cqe int, channel *CompChannel, compVector int) (*CQ, error) {
	return c.createCQ("ibv_create_cq", cqe, channel, compVector, func(notify func()) (CQDriver, error) {
		return c.driverCQ(cqe, notify, compVector)
	})
}

// driverCQ has the provider create a CQ, on a completion vector other
// than 0 if asked.
func (c *Context) driverCQ(cqe int, notify func(), compVector int) (CQDriver, error) {
	if v, ok := c.drv.(CompVectors); ok && compVector != 0 {
		return v.CreateCQOnVector(cqe, notify, compVector)
	}
	return c.drv.CreateCQ(cqe, notify)
}

// createCQ checks the arguments every CQ takes, has create make the
// provider's CQ, and binds it to the channel and the context.
func (c *Context) createCQ(op string, cqe int, channel *CompChannel, compVector int, create func(notify func()) (CQDriver, error)) (*CQ, error) {
	if err := c.check(op); err != nil {
		return nil, err
	}
	if n := c.NumCompVectors(); compVector < 0 || compVector >= n {
		return nil, Errorf(op, ErrInvalidArgument, "comp_vector "+itoa(compVector)+" not in [0, "+itoa(n)+")")
	}
	attr, err := c.drv.QueryDevice()
	if err != nil {
		return nil, err
	}
	if cqe < 1 || cqe > attr.MaxCQE {
		return nil, Errorf(op, ErrInvalidArgument, "cqe "+itoa(cqe)+" not in [1, "+itoa(attr.MaxCQE)+"]")
	}
	if channel != nil && channel.ctx != c {
		return nil, Errorf(op, ErrInvalidArgument, "completion channel belongs to another context")
	}
	cq := &CQ{ctx: c, channel: channel}
	var notify func()
	if channel != nil {
		notify = cq.fired
	}
	if cq.drv, err = create(notify); err != nil {
		return nil, err
	}
	if channel != nil {
		channel.attach(1)
	}
	c.mu.Lock()
	c.cqs[cq.drv] = cq
	c.mu.Unlock()
	return cq, nil
}

// NumCompVectors is how many completion vectors the device has
// (ibv_context's num_comp_vectors): 1 unless the provider says more.
func (c *Context) NumCompVectors() int {
	if v, ok := c.drv.(CompVectors); ok {
		return max(v.NumCompVectors(), 1)
	}
	return 1
}

// SetCQContext sets the program's value that comes with the CQ (the
// cq_context of ibv_create_cq, which ibv_get_cq_event returns with it).
func (cq *CQ) SetCQContext(v any) {
	cq.mu.Lock()
	defer cq.mu.Unlock()
	cq.userCtx = v
}

// CQContext returns the value SetCQContext set (cq->cq_context).
func (cq *CQ) CQContext() any {
	cq.mu.Lock()
	defer cq.mu.Unlock()
	return cq.userCtx
}

// CQDriverOf returns the provider's side of cq, for providers: a QP's
// provider finds there the CQ it completes into.
func CQDriverOf(cq *CQ) CQDriver {
	if cq == nil {
		return nil
	}
	return cq.drv
}

// fired is the provider's notice that the armed CQ took a completion: one
// event to the completion channel.
func (cq *CQ) fired() {
	cq.mu.Lock()
	cq.events++
	cq.mu.Unlock()
	if !cq.channel.post(cq) {
		// Dropped by a full channel: there is nothing to acknowledge.
		cq.mu.Lock()
		cq.events--
		cq.mu.Unlock()
	}
}

// Poll moves up to len(wc) completions into wc and returns how many
// (ibv_poll_cq). It never blocks. After an overflow it returns an error
// wrapping ErrIO once the queue is drained. Under ProgressManual a Poll
// that finds nothing, or has no room (wc empty, as fi_cq_read with a count
// of 0), drives the device: a program that waits for something other than
// a completion (an RDMA WRITE landing in its memory) polls so.
func (cq *CQ) Poll(wc []WC) (int, error) {
	n, err := cq.drv.Poll(wc)
	racesync.Sync() // after the take: what the device wrote before completing is the program's to read
	return n, err
}

// Len returns the number of completions waiting to be polled.
func (cq *CQ) Len() int { return cq.drv.Len() }

// Cap returns the number of completions the CQ holds (ibv_cq.cqe).
func (cq *CQ) Cap() int { return cq.drv.Cap() }

// Wait blocks until the CQ holds a completion or ctx is done. It needs no
// completion channel and no arming: it is the Go way to wait, usable
// alongside Poll from one goroutine.
func (cq *CQ) Wait(ctx context.Context) error { return cq.drv.Wait(ctx) }

// ReqNotify arms the CQ: the next completion (with solicitedOnly, the next
// solicited or failed one) sends one event to the CQ's completion channel
// (ibv_req_notify_cq). Completions already queued do not fire.
func (cq *CQ) ReqNotify(solicitedOnly bool) error {
	if cq.channel == nil {
		return Errorf("ibv_req_notify_cq", ErrInvalidArgument, "CQ has no completion channel")
	}
	return cq.drv.ReqNotify(solicitedOnly)
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
	if cqe < 1 || cqe > attr.MaxCQE {
		return Errorf("ibv_resize_cq", ErrInvalidArgument, "cqe "+itoa(cqe)+" not in [1, "+itoa(attr.MaxCQE)+"]")
	}
	return cq.drv.Resize(cqe)
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
	if cq.destroying {
		return Errorf("ibv_destroy_cq", ErrBusy, "being destroyed by another goroutine")
	}
	if cq.users > 0 {
		return Errorf("ibv_destroy_cq", ErrBusy, itoa(cq.users)+" QP(s) still use the CQ")
	}
	if cq.acked < cq.events && cq.channel != nil {
		return Errorf("ibv_destroy_cq", ErrBusy, "unacknowledged completion events: call AckEvents")
	}
	// The provider may wait for its own goroutines, which may be
	// reporting an event (fired takes mu): destroy without holding it.
	cq.destroying = true
	cq.mu.Unlock()
	err := cq.drv.Destroy()
	if err == nil {
		cq.ctx.mu.Lock()
		delete(cq.ctx.cqs, cq.drv)
		cq.ctx.mu.Unlock()
	}
	cq.mu.Lock()
	cq.destroying = false
	if err != nil {
		return err
	}
	cq.closed = true
	if cq.channel != nil {
		cq.channel.attach(-1)
	}
	return nil
}

// CompChannel is a completion event channel (struct ibv_comp_channel): the
// armed CQs bound to it report their next completion through it.
//
// Its queue has no bound, as the kernel's has none: each armed CQ queues
// one event, and a program re-arms a CQ only after reading its event, so
// a dropped event would leave that CQ silent for ever. Events wait in c;
// those c has no room for wait in over, and a goroutine moves them into c,
// in order, as the program reads.
type CompChannel struct {
	ctx *Context

	mu sync.Mutex
	// c is made when first used (queue): rdma_create_qp makes two
	// channels per QP, which a program that polls its CQs never reads.
	c      chan *CQ
	cqs    int
	closed bool
	over   []*CQ // events c had no room for, oldest first
	moving bool  // the goroutine moving over into c runs
	// done is closed by Close. Only a mover waits on it, so it is made
	// when the first mover starts: most channels never need one.
	done  chan struct{}
	mover sync.WaitGroup
}

// compChannelLen is the room of a channel's queue before events wait in
// its overflow. The queue is allocated with the channel's first use:
// rdma_cm makes two channels per QP, and at 4096 entries (32 KiB) they
// took a third of a connection's setup. A CQ has at most one event
// waiting per arming, and most channels serve one or two CQs.
const compChannelLen = 8

// CreateCompChannel creates a completion channel (ibv_create_comp_channel).
func (c *Context) CreateCompChannel() (*CompChannel, error) {
	if err := c.check("ibv_create_comp_channel"); err != nil {
		return nil, err
	}
	return &CompChannel{ctx: c}, nil
}

// queue returns c, making it first if need be.
func (ch *CompChannel) queue() chan *CQ {
	ch.mu.Lock()
	defer ch.mu.Unlock()
	return ch.queueLocked()
}

// queueLocked is queue with ch.mu held.
func (ch *CompChannel) queueLocked() chan *CQ {
	if ch.c == nil {
		ch.c = make(chan *CQ, compChannelLen)
	}
	return ch.c
}

func (ch *CompChannel) attach(d int) {
	ch.mu.Lock()
	ch.cqs += d
	ch.mu.Unlock()
}

// post queues an event of cq. It reports false if the channel is closed.
func (ch *CompChannel) post(cq *CQ) bool {
	ch.mu.Lock()
	defer ch.mu.Unlock()
	if ch.closed {
		return false
	}
	if len(ch.over) == 0 {
		select {
		case ch.queueLocked() <- cq:
			return true
		default:
		}
	}
	ch.over = append(ch.over, cq)
	if !ch.moving {
		ch.moving = true
		if ch.done == nil {
			ch.done = make(chan struct{})
		}
		ch.mover.Add(1)
		go ch.move()
	}
	return true
}

// move feeds the overflow into c as the program reads, then ends.
func (ch *CompChannel) move() {
	defer ch.mover.Done()
	for {
		ch.mu.Lock()
		if len(ch.over) == 0 || ch.closed {
			ch.over, ch.moving = nil, false
			ch.mu.Unlock()
			return
		}
		cq, c := ch.over[0], ch.queueLocked()
		ch.mu.Unlock()
		select {
		case c <- cq:
			ch.mu.Lock()
			ch.over[0] = nil
			ch.over = ch.over[1:]
			ch.mu.Unlock()
		case <-ch.done:
		}
	}
}

// GetCQEvent waits for the next event and returns its CQ
// (ibv_get_cq_event). Each event must be acknowledged with CQ.AckEvents.
func (ch *CompChannel) GetCQEvent(ctx context.Context) (*CQ, error) {
	select {
	case cq := <-ch.queue():
		return cq, nil
	case <-ctx.Done():
		return nil, ctx.Err()
	}
}

// C returns the channel GetCQEvent reads, for use in select.
func (ch *CompChannel) C() <-chan *CQ { return ch.queue() }

// Close destroys the channel (ibv_destroy_comp_channel). It fails with
// ErrBusy while CQs are bound to it.
func (ch *CompChannel) Close() error {
	ch.mu.Lock()
	if ch.cqs > 0 {
		ch.mu.Unlock()
		return Errorf("ibv_destroy_comp_channel", ErrBusy, itoa(ch.cqs)+" CQ(s) still bound")
	}
	if !ch.closed {
		ch.closed = true
		if ch.done != nil {
			close(ch.done)
		}
	}
	ch.mu.Unlock()
	ch.mover.Wait()
	return nil
}
