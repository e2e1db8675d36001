package nvmeof

import (
	"context"
	"fmt"
	"sync"

	"github.com/rdmago/rdmago/nvmeof/wire"
	"github.com/rdmago/rdmago/rdmacm"
	"github.com/rdmago/rdmago/verbs"
)

// hostQueue is one of a host's queues (the admin queue or an I/O
// queue): depth command slots, each with its capsule buffer and a data
// buffer the target reads from and writes into, and depth receives for
// the responses.
type hostQueue struct {
	*rdmaQueue
	qid     uint16
	depth   int
	inline  int // in-capsule data the target takes (0 on the admin queue)
	maxData int // the data buffer of a slot

	cmdMR  *verbs.MR // depth capsules of CommandLen+inline bytes
	dataMR *verbs.MR // depth data buffers of maxData bytes
	respMR *verbs.MR // depth responses

	// windows: each slot's data is reached through a type 2 memory
	// window bound for the command, which the target invalidates with its
	// response; without them (StaticKeys, or a device with none) the data
	// region's own key serves every command.
	windows bool

	free  chan int
	mu    sync.Mutex
	slots []hostSlot
}

type hostSlot struct {
	busy      bool
	sent      bool // the capsule's send completed
	answered  bool // its response came
	abandoned bool // its submitter gave up waiting
	finished  bool // its result was handed over (or the queue failed)
	comp      wire.Completion
	done      chan error

	mw    *verbs.MW // the slot's window (windows only)
	rkey  uint32    // its key for the command out, or the last one
	bound bool      // the window may still be bound: invalidate it before the next bind
}

// dial connects queue qid to the target at addr: the RDMA transport's
// private data asks for a submission queue of depth entries.
func dialQueue(ctx context.Context, addr string, qid uint16, depth, maxData int, o *Options) (*hostQueue, error) {
	q := &hostQueue{qid: qid, depth: depth, maxData: maxData, free: make(chan int, depth), slots: make([]hostSlot, depth)}
	capsule := wire.CommandLen + maxInline
	ropts := &rdmacm.Options{
		// A command takes up to three sends: LOCAL_INV of its window's
		// last key, BIND_MW, and the capsule.
		Cap:         verbs.QPCap{MaxSendWR: uint32(3*depth + 2), MaxRecvWR: uint32(depth + 1), MaxSendSGE: 1, MaxRecvSGE: 1},
		SharedCQ:    true,
		LocalAddr:   o.LocalAddr,
		PrivateData: wire.CMReq{QID: qid, HRQSize: uint16(depth), HSQSize: uint16(depth - 1), CNTLID: 0xffff}.Bytes(),
		Setup: func(c *rdmacm.Conn) error {
			q.rdmaQueue = newRDMAQueue(c)
			var err error
			if q.cmdMR, err = q.register(depth*capsule, verbs.AccessLocalWrite); err != nil {
				return err
			}
			access := verbs.AccessLocalWrite | verbs.AccessRemoteRead | verbs.AccessRemoteWrite
			if !o.StaticKeys {
				q.windows = q.allocWindows(c.PD, depth)
			}
			if q.windows {
				access = verbs.AccessLocalWrite | verbs.AccessMWBind
			}
			if q.dataMR, err = q.register(depth*maxData, access); err != nil {
				return err
			}
			if q.respMR, err = q.register(depth*wire.CompletionLen, verbs.AccessLocalWrite); err != nil {
				return err
			}
			for i := range depth {
				if err := q.postRecv(wrRecv|uint64(i), q.respMR, i*wire.CompletionLen, wire.CompletionLen); err != nil {
					return err
				}
			}
			return nil
		},
		Undo: func(c *rdmacm.Conn) { q.release() },
	}
	c, err := rdmacm.Dial(ctx, addr, ropts)
	if err != nil {
		return nil, dialError(err)
	}
	if rep, err := wire.ParseCMRep(c.PrivateData); err == nil && rep.CRQSize != 0 && int(rep.CRQSize) < depth {
		// The target posted fewer receives than asked for: send no more
		// commands at once than it has.
		q.depth = int(rep.CRQSize)
	}
	for i := range q.depth {
		q.slots[i].done = make(chan error, 1)
		q.free <- i
	}
	for i := q.depth; i < depth; i++ {
		if w := q.slots[i].mw; w != nil {
			w.Dealloc() // a slot the target left no room for
			q.slots[i].mw = nil
		}
	}
	q.start(q.completed, q.failAll)
	return q, nil
}

// allocWindows gives each slot a type 2 memory window, and reports
// whether the device has them; without, it leaves none.
func (q *hostQueue) allocWindows(pd *verbs.PD, n int) bool {
	for i := range n {
		w, err := pd.AllocMW(verbs.MWType2)
		if err != nil {
			for j := range i {
				q.slots[j].mw.Dealloc()
				q.slots[j].mw = nil
			}
			return false
		}
		q.slots[i].mw, q.slots[i].rkey = w, w.RKey()
	}
	return true
}

// release deallocates the slots' windows and deregisters the queue's
// memory (windows first: a region with windows bound stays registered).
func (q *hostQueue) release() {
	for i := range q.slots {
		if w := q.slots[i].mw; w != nil {
			w.Dealloc()
			q.slots[i].mw = nil
		}
	}
	for _, mr := range q.mrs {
		mr.Dereg()
	}
	q.mrs = nil
}

// close closes the queue and frees what it holds.
func (q *hostQueue) close() {
	q.rdmaQueue.closeWith(q.release)
}

// maxInline is the in-capsule data a host slot has room for.
const maxInline = 8192

func dialError(err error) error {
	return fmt.Errorf("nvmeof: connect: %w", err)
}

// completed handles one completion of the queue's CQ.
func (q *hostQueue) completed(wc *verbs.WC) {
	i := int(wc.WRID &^ wrKind)
	switch wc.WRID & wrKind {
	case wrSend:
		q.mu.Lock()
		q.slots[i].sent = true
		q.finishLocked(i)
		q.mu.Unlock()
	case wrRecv:
		if q.failed() != nil {
			return // the queue failed: what still comes is moot
		}
		comp, err := wire.ParseCompletion(q.respMR.Buf()[i*wire.CompletionLen:])
		if err != nil || wc.ByteLen < wire.CompletionLen {
			q.fail(fmt.Errorf("%w: a response of %d bytes", ErrDisconnected, wc.ByteLen))
			return
		}
		if q.postRecv(wc.WRID, q.respMR, i*wire.CompletionLen, wire.CompletionLen) != nil {
			return
		}
		s := int(comp.CID)
		q.mu.Lock()
		if s >= len(q.slots) || !q.slots[s].busy || q.slots[s].answered {
			q.mu.Unlock()
			q.fail(fmt.Errorf("%w: a response for command %d, which is not outstanding", ErrDisconnected, comp.CID))
			return
		}
		if wc.WCFlags&verbs.WCWithInv != 0 && q.slots[s].mw != nil && wc.InvalidatedRKey() == q.slots[s].rkey {
			q.slots[s].bound = false // the target invalidated the window with its response
		}
		q.slots[s].comp, q.slots[s].answered = comp, true
		q.finishLocked(s)
		q.mu.Unlock()
	}
}

// finishLocked hands slot i its result once its capsule was sent and
// answered (q.mu held).
func (q *hostQueue) finishLocked(i int) {
	s := &q.slots[i]
	if !s.sent || !s.answered || s.finished {
		return
	}
	s.finished = true
	if s.abandoned {
		q.releaseLocked(i)
		return
	}
	s.done <- nil
}

func (q *hostQueue) releaseLocked(i int) {
	s := &q.slots[i]
	*s = hostSlot{done: s.done, mw: s.mw, rkey: s.rkey, bound: s.bound}
	q.free <- i
}

// failAll ends every outstanding command with the queue's failure.
func (q *hostQueue) failAll(err error) {
	q.mu.Lock()
	defer q.mu.Unlock()
	for i := range q.slots {
		s := &q.slots[i]
		if !s.busy || s.finished {
			continue
		}
		s.finished = true
		if !s.abandoned { // an abandoned slot is never reused: the queue is gone
			s.done <- err
		}
	}
}

// Data directions of a command.
const (
	noData = iota
	toHost
	toController
)

// exec sends cmd and waits for its completion. Data travels through the
// slot's buffer: out (to the controller) is copied there first, or into
// the capsule when it fits in-capsule; in (to the host) receives what
// the controller wrote. It returns the completion; a failed status is a
// *wire.StatusError.
func (q *hostQueue) exec(ctx context.Context, cmd wire.Command, dir int, out []byte, in []byte) (wire.Completion, error) {
	if err := q.failed(); err != nil {
		return wire.Completion{}, err
	}
	var i int
	select {
	case i = <-q.free:
	case <-ctx.Done():
		return wire.Completion{}, ctx.Err()
	case <-q.ctx.Done():
		return wire.Completion{}, q.failed()
	}
	capsule := wire.CommandLen + maxInline
	cbuf := q.cmdMR.Buf()[i*capsule : (i+1)*capsule]
	data := q.dataMR.Buf()[i*q.maxData : (i+1)*q.maxData]
	cmd.CID = uint16(i)
	n := wire.CommandLen
	var wrs [3]verbs.SendWR
	posts := wrs[:0]
	keyed := func(length int, right verbs.AccessFlags) wire.SGL {
		addr := q.dataMR.Addr() + uint64(i*q.maxData)
		if !q.windows {
			return wire.Keyed(addr, uint32(length), q.dataMR.RKey(), false)
		}
		// Bind the slot's window to this command's data alone, with the
		// one right it needs, and ask the target to invalidate it.
		s := &q.slots[i]
		if s.bound {
			posts = append(posts, verbs.SendWR{WRID: wrBind | uint64(i), Opcode: verbs.WRLocalInv, InvalidateRKey: s.rkey})
		}
		s.rkey, s.bound = verbs.IncRKey(s.rkey), true
		posts = append(posts, verbs.SendWR{WRID: wrBind | uint64(i), Opcode: verbs.WRBindMW, BindMW: verbs.BindMWWR{
			MW: s.mw, RKey: s.rkey, BindInfo: verbs.MWBindInfo{MR: q.dataMR, Addr: addr, Length: uint64(length), AccessFlags: right}}})
		return wire.Keyed(addr, uint32(length), s.rkey, true)
	}
	switch {
	case dir == noData, dir == toHost && len(in) == 0, dir == toController && len(out) == 0:
		// A null descriptor, as Linux's host sends: a keyed block of
		// length 0 (a data block of address type is refused by nvmet).
		cmd.SGL = wire.Keyed(0, 0, 0, false)
	case dir == toController && len(out) <= q.inline:
		copy(cbuf[wire.CommandLen:], out)
		cmd.SGL = wire.InCapsule(0, uint32(len(out)))
		n += len(out)
	case dir == toController:
		copy(data, out)
		cmd.SGL = keyed(len(out), verbs.AccessRemoteRead)
	case dir == toHost:
		cmd.SGL = keyed(len(in), verbs.AccessRemoteWrite)
	}
	cmd.Put(cbuf)
	q.mu.Lock()
	q.slots[i].busy = true
	q.mu.Unlock()
	posts = append(posts, verbs.SendWR{WRID: wrSend | uint64(i), Opcode: verbs.WRSend, SendFlags: verbs.SendSignaled,
		SGList: []verbs.SGE{q.cmdMR.SGE(i*capsule, n)}})
	err := q.post(posts...)
	if err != nil {
		q.mu.Lock()
		q.slots[i].abandoned = true // the queue failed: the slot stays taken
		q.mu.Unlock()
		return wire.Completion{}, err
	}
	select {
	case err = <-q.slots[i].done:
	case <-ctx.Done():
		q.mu.Lock()
		select {
		case err = <-q.slots[i].done: // it finished meanwhile
		default:
			q.slots[i].abandoned = true
			q.mu.Unlock()
			return wire.Completion{}, ctx.Err()
		}
		q.mu.Unlock()
	}
	q.mu.Lock()
	comp := q.slots[i].comp
	if err == nil && dir == toHost {
		copy(in, data)
	}
	if err == nil {
		q.releaseLocked(i)
	}
	q.mu.Unlock()
	if err != nil {
		return wire.Completion{}, err
	}
	if !comp.OK() {
		return comp, &wire.StatusError{Opcode: cmd.Opcode, Status: comp.Status}
	}
	return comp, nil
}
