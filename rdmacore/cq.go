//go:build rdmacore && linux && cgo

package rdmacore

/*
#cgo noescape rg_poll_cq
#cgo nocallback rg_poll_cq
#include "shim.h"
*/
import "C"

import (
	"context"
	"os"
	"sync"
	"sync/atomic"
	"unsafe"

	"github.com/rdmago/rdmago/verbs"
)

// cq is a completion queue with a completion channel of its own, which
// serves both the program's completion channel (notify) and CQ.Wait.
type cq struct {
	c      *ctx
	cq     *C.struct_ibv_cq
	ch     *C.struct_ibv_comp_channel
	f      *os.File
	notify func()
	armed  atomic.Bool // the program armed the CQ (ReqNotify)
	done   chan struct{}

	// ex is the CQ as ibv_create_cq_ex made it, or nil; wcFlags are
	// the fields it was asked for.
	ex      *C.struct_ibv_cq_ex
	wcFlags C.uint64_t

	mu      sync.Mutex
	wake    chan struct{} // closed at the next event
	stash   []verbs.WCEx  // completions Len, Wait and StartPoll took from the device
	started bool
	closed  bool
}

// start starts the goroutine that takes the CQ's events. Called with mu
// held or before the CQ is shared.
func (q *cq) start() {
	if q.started {
		return
	}
	q.started = true
	go q.readEvents()
}

// readEvents takes each event of the CQ's channel (ibv_get_cq_event,
// ibv_ack_cq_events), passes it to the program's channel if the program
// armed the CQ, and wakes Wait.
func (q *cq) readEvents() {
	defer close(q.done)
	eachEvent(q.f, func() C.int { return C.rg_get_cq_event(q.ch) }, func() {
		if q.armed.Swap(false) && q.notify != nil {
			q.notify()
		}
		q.mu.Lock()
		close(q.wake)
		q.wake = make(chan struct{})
		q.mu.Unlock()
	})
}

// Poll polls the device's CQ straight into wc (ibv_poll_cq).
func (q *cq) Poll(wc []verbs.WC) (int, error) {
	if len(wc) == 0 {
		return 0, nil
	}
	n := 0
	if q.hasStash() {
		q.mu.Lock()
		for n < len(wc) && n < len(q.stash) {
			wc[n] = q.stash[n].WC
			n++
		}
		q.unstash(n)
		q.mu.Unlock()
		if n == len(wc) {
			return n, nil
		}
	}
	got := C.rg_poll_cq(q.cq, C.int(len(wc)-n), (*C.struct_ibv_wc)(unsafe.Pointer(&wc[n])))
	if got < 0 {
		if n > 0 {
			return n, nil
		}
		return 0, verbs.Errorf("ibv_poll_cq", verbs.ErrIO, "the device reported a CQ error")
	}
	return n + int(got), nil
}

// stashed tells Poll whether Len or Wait took completions ahead of it.
var stashed atomic.Int64

func (q *cq) hasStash() bool {
	if stashed.Load() == 0 {
		return false
	}
	q.mu.Lock()
	defer q.mu.Unlock()
	return len(q.stash) > 0
}

// unstash drops the first n stashed completions (mu held).
func (q *cq) unstash(n int) {
	if n == 0 {
		return
	}
	q.stash = q.stash[:copy(q.stash, q.stash[n:])]
	if len(q.stash) == 0 {
		stashed.Add(-1)
	}
}

// fill polls what the device holds into the stash, so that Len can count
// it; an extended CQ is read with the extended API, its timestamps
// included. Called with mu held.
func (q *cq) fill() error {
	var buf [64]verbs.WCEx
	for {
		var got int
		if q.ex != nil {
			var err error
			if got, err = q.pollEx(buf[:]); err != nil {
				return err
			}
		} else {
			var wc [len(buf)]verbs.WC
			got = max(int(C.rg_poll_cq(q.cq, C.int(len(wc)), (*C.struct_ibv_wc)(unsafe.Pointer(&wc[0])))), 0)
			for i := range got {
				buf[i] = verbs.WCEx{WC: wc[i]}
			}
		}
		if got == 0 {
			return nil
		}
		if len(q.stash) == 0 {
			stashed.Add(1)
		}
		q.stash = append(q.stash, buf[:got]...)
		if got < len(buf) {
			return nil
		}
	}
}

func (q *cq) Len() int {
	q.mu.Lock()
	defer q.mu.Unlock()
	q.fill()
	return len(q.stash)
}

func (q *cq) Cap() int { return int(q.cq.cqe) }

// Wait returns when the CQ holds a completion or ctx is done: it arms the
// CQ, looks once more, and sleeps on its channel.
func (q *cq) Wait(ctx context.Context) error {
	for {
		q.mu.Lock()
		if q.closed {
			q.mu.Unlock()
			return verbs.Errorf("ibv_get_cq_event", verbs.ErrClosed, "CQ destroyed")
		}
		q.start()
		wake := q.wake
		if rc := C.rg_req_notify_cq(q.cq, 0); rc != 0 {
			q.mu.Unlock()
			return failRC("ibv_req_notify_cq", rc)
		}
		err := q.fill()
		n := len(q.stash)
		q.mu.Unlock()
		if err != nil && n == 0 {
			return err
		}
		if n > 0 {
			return nil
		}
		select {
		case <-wake:
		case <-q.done:
			return verbs.Errorf("ibv_get_cq_event", verbs.ErrClosed, "CQ destroyed")
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}

func (q *cq) ReqNotify(solicitedOnly bool) error {
	q.armed.Store(true)
	s := 0
	if solicitedOnly {
		s = 1
	}
	if rc := C.rg_req_notify_cq(q.cq, C.int(s)); rc != 0 {
		return failRC("ibv_req_notify_cq", rc)
	}
	return nil
}

func (q *cq) Resize(cqe int) error {
	if rc := C.ibv_resize_cq(q.cq, C.int(cqe)); rc != 0 {
		return failRC("ibv_resize_cq", rc)
	}
	return nil
}

func (q *cq) Destroy() error {
	q.mu.Lock()
	if q.closed {
		q.mu.Unlock()
		return nil
	}
	q.closed = true
	started := q.started
	if len(q.stash) > 0 {
		stashed.Add(-1)
		q.stash = nil
	}
	q.mu.Unlock()
	q.f.Close()
	if started {
		<-q.done
	}
	if rc := C.ibv_destroy_cq(q.cq); rc != 0 {
		return failRC("ibv_destroy_cq", rc)
	}
	q.c.s.mu.Lock()
	delete(q.c.s.byCQ, q.cq)
	q.c.s.mu.Unlock()
	C.ibv_destroy_comp_channel(q.ch)
	q.c.track(kindCQ, q, false)
	return nil
}

func (q *cq) release() { q.Destroy() }
