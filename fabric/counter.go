package fabric

import (
	"context"
	"slices"
	"sync"
)

// Counter counts completed operations (fi_cntr_open): a lighter way than
// a CQ to learn that work is done. Endpoints bound to it (BindCounter)
// add one per operation of the kinds they were bound for, and one to the
// error count per operation that failed.
type Counter struct {
	mu   sync.Mutex
	val  uint64
	errs uint64
	wake chan struct{} // closed at a change; nil while nobody waits
	eps  []Progressor
}

// OpenCounter opens a counter (fi_cntr_open).
func (d *Domain) OpenCounter() (*Counter, error) {
	return &Counter{}, nil
}

func (c *Counter) signal() {
	if c.wake != nil {
		close(c.wake)
		c.wake = nil
	}
}

// attach has Read and Wait progress p; detach undoes it when the
// endpoint closes or is bound to another counter.
func (c *Counter) attach(p Progressor) {
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, x := range c.eps {
		if x == p {
			return
		}
	}
	c.eps = append(c.eps, p)
}

func (c *Counter) detach(p Progressor) {
	c.mu.Lock()
	defer c.mu.Unlock()
	for i, x := range c.eps {
		if x == p {
			c.eps = append(c.eps[:i:i], c.eps[i+1:]...)
			return
		}
	}
}

// Add adds n (fi_cntr_add).
func (c *Counter) Add(n uint64) {
	c.mu.Lock()
	c.val += n
	c.signal()
	c.mu.Unlock()
}

// Set sets the count (fi_cntr_set).
func (c *Counter) Set(n uint64) {
	c.mu.Lock()
	c.val = n
	c.signal()
	c.mu.Unlock()
}

// AddErr and SetErr change the error count (fi_cntr_adderr,
// fi_cntr_seterr).
func (c *Counter) AddErr(n uint64) {
	c.mu.Lock()
	c.errs += n
	c.signal()
	c.mu.Unlock()
}

func (c *Counter) SetErr(n uint64) {
	c.mu.Lock()
	c.errs = n
	c.signal()
	c.mu.Unlock()
}

func (c *Counter) progress() {
	c.mu.Lock()
	eps := c.eps
	c.mu.Unlock()
	for _, p := range eps {
		p.Progress()
	}
}

// Read returns the count (fi_cntr_read), after progressing the endpoints
// bound to the counter.
func (c *Counter) Read() uint64 {
	c.progress()
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.val
}

// ReadErr returns the error count (fi_cntr_readerr).
func (c *Counter) ReadErr() uint64 {
	c.progress()
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.errs
}

// Wait blocks until the count reaches threshold (fi_cntr_wait), an
// operation fails (ErrAvail), or ctx is done (ErrTimedOut).
func (c *Counter) Wait(ctx context.Context, threshold uint64) error {
	c.mu.Lock()
	errs0 := c.errs
	c.mu.Unlock()
	for {
		c.progress()
		c.mu.Lock()
		v, e := c.val, c.errs
		if c.wake == nil {
			c.wake = make(chan struct{})
		}
		w := c.wake
		c.mu.Unlock()
		switch {
		case v >= threshold:
			return nil
		case e != errs0:
			return Errorf("fi_cntr_wait", ErrAvail, "an operation failed")
		}
		select {
		case <-w:
		case <-ctx.Done():
			return Errorf("fi_cntr_wait", ErrTimedOut, "")
		}
	}
}

// Close closes the counter (fi_close).
func (c *Counter) Close() error { return nil }

// Completions is what a provider reports an endpoint's operations to:
// the CQs and the counters bound to it. Providers embed one and use
// Done, Failed and Count; BindCQ and BindCounter fill it in.
type Completions struct {
	TxCQ, RxCQ *CQ
	cntrs      [6]*Counter // send, recv, read, write, remote read, remote write
}

// BindCQ binds cq for transmits (BindTransmit), receives (BindRecv) or
// both, and has it progress p.
func (cs *Completions) BindCQ(cq *CQ, flags uint64, p Progressor) error {
	if flags&(BindTransmit|BindRecv) == 0 {
		return Errorf("fi_ep_bind", ErrBadFlags, "bind a CQ with FI_TRANSMIT, FI_RECV or both")
	}
	old := []*CQ{cs.TxCQ, cs.RxCQ}
	if flags&BindTransmit != 0 {
		cs.TxCQ = cq
	}
	if flags&BindRecv != 0 {
		cs.RxCQ = cq
	}
	cq.attach(p) // (once: attach ignores a second)
	for _, o := range old {
		if o != nil && o != cs.TxCQ && o != cs.RxCQ {
			o.detach(p) // bound no more: it stops progressing p
		}
	}
	return nil
}

// Detach stops the bound CQs and counters from progressing p (its
// endpoint closed).
func (cs *Completions) Detach(p Progressor) {
	if cs.TxCQ != nil {
		cs.TxCQ.detach(p)
	}
	if cs.RxCQ != nil && cs.RxCQ != cs.TxCQ {
		cs.RxCQ.detach(p)
	}
	for _, c := range cs.cntrs {
		if c != nil {
			c.detach(p)
		}
	}
}

// Counter returns the counter bound for the operation bind names
// (BindSend, …, BindRemoteWrite), or nil. A provider that layers
// endpoints (an RDM endpoint over connections) binds its program's
// counters to the endpoints underneath with it.
func (cs *Completions) Counter(bind uint64) *Counter {
	for i, b := range cntrBits {
		if bind == b {
			return cs.cntrs[i]
		}
	}
	return nil
}

// Counter bind flags (fi_ep_bind with a counter).
const (
	BindSend        = uint64(CapSend)
	BindRecvCount   = uint64(CapRecv)
	BindRead        = uint64(CapRead)
	BindWrite       = uint64(CapWrite)
	BindRemoteRead  = uint64(CapRemoteRead)
	BindRemoteWrite = uint64(CapRemoteWrite)
)

var cntrBits = [6]uint64{BindSend, BindRecvCount, BindRead, BindWrite, BindRemoteRead, BindRemoteWrite}

// BindCounter binds c for the operations flags names; p is the endpoint,
// which the counter's readers then progress.
func (cs *Completions) BindCounter(c *Counter, flags uint64, p Progressor) error {
	if flags&(BindSend|BindRecvCount|BindRead|BindWrite|BindRemoteRead|BindRemoteWrite) == 0 {
		return Errorf("fi_ep_bind", ErrBadFlags, "bind a counter for FI_SEND, FI_RECV, FI_READ, FI_WRITE, FI_REMOTE_READ or FI_REMOTE_WRITE")
	}
	old := cs.cntrs
	for i, b := range cntrBits {
		if flags&b != 0 {
			cs.cntrs[i] = c
		}
	}
	c.attach(p)
	for _, o := range old {
		if o != nil && !slices.Contains(cs.cntrs[:], o) {
			o.detach(p) // bound no more
		}
	}
	return nil
}

// counter returns the counter for an operation with completion flags f.
func (cs *Completions) counter(f uint64) *Counter {
	switch {
	case f&CompRemoteWrite != 0:
		return cs.cntrs[5]
	case f&CompRemoteRead != 0:
		return cs.cntrs[4]
	case f&CompRead != 0:
		return cs.cntrs[2]
	case f&CompWrite != 0:
		return cs.cntrs[3]
	case f&CompRecv != 0:
		return cs.cntrs[1]
	case f&CompSend != 0:
		return cs.cntrs[0]
	}
	return nil
}

func rxSide(f uint64) bool { return f&(CompRecv|CompRemoteWrite|CompRemoteRead) != 0 }

// Done reports a completed operation: to the transmit or receive CQ its
// flags name, and to its counter.
func (cs *Completions) Done(e CQEntry) {
	cq := cs.TxCQ
	if rxSide(e.Flags) {
		cq = cs.RxCQ
	}
	if cq != nil {
		cq.push(e)
	}
	cs.Count(e.Flags)
}

// Failed reports a failed operation.
func (cs *Completions) Failed(e CQErrEntry) {
	cq := cs.TxCQ
	if rxSide(e.Flags) {
		cq = cs.RxCQ
	}
	if cq != nil {
		cq.pushErr(e)
	}
	if c := cs.counter(e.Flags); c != nil {
		c.AddErr(1)
	}
}

// PostRx queues e on the receive CQ, if one is bound, and counts
// nothing: a provider that layers endpoints passes on with it what the
// connections underneath reported (remote CQ data of a peer's write).
func (cs *Completions) PostRx(e CQEntry) {
	if cs.RxCQ != nil {
		cs.RxCQ.push(e)
	}
}

// Count counts an operation that has no CQ entry (an inject, a peer's
// RMA without CQ data).
func (cs *Completions) Count(flags uint64) {
	if c := cs.counter(flags); c != nil {
		c.Add(1)
	}
}
