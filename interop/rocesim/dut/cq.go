package dut

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"time"

	"github.com/rdmago/rdmago/verbs"
)

// maxPending bounds the completions kept for PollComplete; older ones
// are dropped past it.
const maxPending = 4096

// manualPollInterval is how often a waiter on a manually polled CQ looks
// again when another waiter may have taken its completion.
const manualPollInterval = 20 * time.Millisecond

// cq is a completion queue and the completions taken from it that no one
// has claimed yet. Operations claim theirs by work request ID; receives
// wait for PollComplete. Unless the CQ is polled manually, a goroutine
// takes completions as they come, as async-rdma's polling thread does
// for the Rust side.
type cq struct {
	side   *Side
	id     uint32
	cq     *verbs.CQ
	manual bool
	buf    []verbs.WC // one poll's worth (max_cqe)

	pollMu sync.Mutex // one poller at a time, so completions keep their order

	mu      sync.Mutex
	pending []verbs.WC
	changed chan struct{}     // closed and replaced when pending grows
	sends   map[uint64]bool   // operations waiting for their completion
	recvs   map[uint64]uint32 // receives of LocalRecv: the immediate they must carry (0: any)

	cancel context.CancelFunc
	done   chan struct{}
}

func newCQ(s *Side, vcq *verbs.CQ, maxCQE int, manual bool) *cq {
	c := &cq{
		side: s, cq: vcq, manual: manual, buf: make([]verbs.WC, max(maxCQE, 1)),
		changed: make(chan struct{}), sends: map[uint64]bool{}, recvs: map[uint64]uint32{},
	}
	if !manual {
		ctx, cancel := context.WithCancel(context.Background())
		c.cancel, c.done = cancel, make(chan struct{})
		go c.run(ctx)
	}
	return c
}

// run takes completions as they come until stop.
func (c *cq) run(ctx context.Context) {
	defer close(c.done)
	for {
		if err := c.cq.Wait(ctx); err != nil {
			return
		}
		if _, err := c.poll(); err != nil {
			c.side.logf("CQ %d: %v; no longer polled", c.id, err)
			return
		}
	}
}

// stop ends the polling goroutine, if any.
func (c *cq) stop() {
	if c.cancel != nil {
		c.cancel()
		<-c.done
	}
}

// poll takes what the CQ holds into pending (ibv_poll_cq) and checks the
// receives of LocalRecv among it.
func (c *cq) poll() (int, error) {
	c.pollMu.Lock()
	defer c.pollMu.Unlock()
	n, err := c.cq.Poll(c.buf)
	if err != nil || n == 0 {
		return n, err
	}
	var failed []string
	c.mu.Lock()
	for _, wc := range c.buf[:n] {
		if imm, ok := c.recvs[wc.WRID]; ok {
			delete(c.recvs, wc.WRID)
			if msg := checkRecv(&wc, imm); msg != "" {
				failed = append(failed, msg)
			}
		}
	}
	c.pending = append(c.pending, c.buf[:n]...)
	if k := len(c.pending) - maxPending; k > 0 {
		c.pending = slices.Delete(c.pending, 0, k)
	}
	close(c.changed)
	c.changed = make(chan struct{})
	c.mu.Unlock()
	for _, msg := range failed {
		c.side.fail("CQ %d: %s", c.id, msg)
	}
	return n, nil
}

// checkRecv says what is wrong with the completion of a LocalRecv, if
// anything.
func checkRecv(wc *verbs.WC, imm uint32) string {
	switch {
	case wc.Status != verbs.WCSuccess:
		return "receive completed with " + wc.Status.String()
	case imm == 0:
		return ""
	case wc.WCFlags&verbs.WCWithImm == 0:
		return fmt.Sprintf("receive completed without the immediate data %#x", imm)
	case CImm(wc.ImmData) != imm:
		return fmt.Sprintf("receive completed with immediate data %#x, expected %#x", CImm(wc.ImmData), imm)
	}
	return ""
}

// take returns the oldest completion that match accepts, waiting for one
// until ctx is done. match runs with c.mu held.
func (c *cq) take(ctx context.Context, match func(*verbs.WC) bool) (verbs.WC, error) {
	for {
		c.mu.Lock()
		for i := range c.pending {
			if match(&c.pending[i]) {
				wc := c.pending[i]
				c.pending = slices.Delete(c.pending, i, i+1)
				c.mu.Unlock()
				return wc, nil
			}
		}
		changed := c.changed
		c.mu.Unlock()
		if !c.manual {
			select {
			case <-changed:
				continue
			case <-ctx.Done():
				return verbs.WC{}, ctx.Err()
			}
		}
		n, err := c.poll()
		if err != nil {
			return verbs.WC{}, err
		}
		if n > 0 {
			continue
		}
		wctx, cancel := context.WithTimeout(ctx, manualPollInterval)
		c.cq.Wait(wctx)
		cancel()
		if err := ctx.Err(); err != nil {
			return verbs.WC{}, err
		}
	}
}

// expectSend marks wrid as an operation's, which PollComplete leaves.
func (c *cq) expectSend(wrid uint64) {
	c.mu.Lock()
	c.sends[wrid] = true
	c.mu.Unlock()
}

// expectRecv marks wrid as a LocalRecv's receive, to be checked.
func (c *cq) expectRecv(wrid uint64, imm uint32) {
	c.mu.Lock()
	c.recvs[wrid] = imm
	c.mu.Unlock()
}

// forget drops what expectSend or expectRecv noted for wrid, and its
// completion if it came unclaimed.
func (c *cq) forget(wrid uint64) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.sends[wrid] {
		c.pending = slices.DeleteFunc(c.pending, func(wc verbs.WC) bool { return wc.WRID == wrid })
	}
	delete(c.sends, wrid)
	delete(c.recvs, wrid)
}
