package vrb

import (
	"context"
	"errors"
	"time"

	"github.com/rdmago/rdmago/fabric"
	"github.com/rdmago/rdmago/verbs"
)

// Progress moves the verbs CQ's completions to the fabric CQs and
// counters (fabric.Progressor).
func (e *ep) Progress() {
	e.polls.Add(1)
	e.mu.Lock()
	if e.state != stClosed {
		e.progressLocked()
	}
	e.mu.Unlock()
}

// progressLocked reports the verbs CQ's completions and returns how many
// there were. Called with e.mu held.
func (e *ep) progressLocked() int {
	if e.cq == nil {
		return 0
	}
	total := 0
	for {
		n, err := e.cq.Poll(e.wc[:])
		if err != nil || n == 0 {
			return total
		}
		total += n
		for i := range e.wc[:n] {
			e.complete(&e.wc[i])
		}
		if n < len(e.wc) {
			return total
		}
	}
}

// probe posts a dead-peer probe every probeEvery while the endpoint is
// connected and has no send outstanding.
func (e *ep) probe(ctx context.Context) {
	defer e.wg.Done()
	t := time.NewTicker(probeEvery)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		e.mu.Lock()
		if e.state != stConnected {
			e.mu.Unlock()
			return
		}
		switch {
		case e.probing:
			e.probeAge++
			if e.probeAge >= probeMisses {
				// The QP would retry for ever: end it here. Its
				// queues flush as after IBV_WC_RETRY_EXC_ERR.
				e.qp.Modify(&verbs.QPAttr{QPState: verbs.QPSErr}, verbs.QPAttrState)
				e.peerLost()
			}
		case e.txOut == 0:
			err := e.qp.PostSend([]verbs.SendWR{{WRID: probeWRID, Opcode: verbs.WRRDMAWrite, SendFlags: verbs.SendSignaled}})
			e.probing, e.probeAge = err == nil, 0
		}
		e.mu.Unlock()
	}
}

// peerLost ends a connection whose peer stopped acknowledging: the QP,
// in the error state, flushes what is posted, and the EQ gets an error
// entry (FI_ETIMEDOUT) and FI_SHUTDOWN. Called with e.mu held.
func (e *ep) peerLost() {
	if e.lost || (e.state != stConnected && e.state != stShutdown) {
		return
	}
	e.lost = true
	e.state = stShutdown
	if e.EQ != nil {
		e.EQ.WriteErr(fabric.EQErrEntry{FID: e.FID(), Err: fabric.ErrTimedOut})
		e.EQ.Write(fabric.EQEntry{Event: fabric.EventShutdown, FID: e.FID()})
	}
}

// complete reports one work completion. Called with e.mu held.
func (e *ep) complete(wc *verbs.WC) {
	if wc.Status == verbs.WCRetryExcErr && e.ud == nil {
		e.peerLost()
	}
	if wc.WRID == probeWRID && e.ud == nil {
		e.probing = false
		return
	}
	o, ok := e.ops[wc.WRID]
	if !ok {
		return
	}
	delete(e.ops, wc.WRID)
	// (Not wc.Opcode: an error completion's opcode is undefined.)
	recv := o.flags&fabric.CompRecv != 0
	if recv {
		e.rxOut--
	} else {
		e.txOut--
	}
	if wc.Status != verbs.WCSuccess {
		errno := fabric.ErrIO
		if wc.Status == verbs.WCWRFlushErr {
			errno = fabric.ErrCanceled
		}
		if o.comp {
			e.Comp.Failed(fabric.CQErrEntry{CQEntry: fabric.CQEntry{Context: o.ctx, Flags: o.flags}, Err: errno, ProvErrno: int(wc.Status)})
		}
		return
	}
	if !recv {
		if o.comp {
			e.Comp.Done(fabric.CQEntry{Context: o.ctx, Flags: o.flags, Len: o.len})
		} else {
			e.Comp.Count(o.flags)
		}
		return
	}
	entry := fabric.CQEntry{Context: o.ctx, Flags: o.flags, Len: uint64(wc.ByteLen)}
	if wc.Opcode == verbs.WCRecvRDMAWithImm {
		// A peer's fi_writedata: the receive carries only the data.
		entry.Flags, entry.Len = fabric.CompRMA|fabric.CompRemoteWrite, 0
	} else if int(wc.ByteLen) <= len(o.buf) {
		entry.Buf = o.buf[:wc.ByteLen]
	}
	if wc.WCFlags&verbs.WCWithImm != 0 {
		entry.Flags |= fabric.CompRemoteCQData
		entry.Data = uint64(wc.ImmData)
	}
	e.Comp.Done(entry)
}

// pollGrace is how long the program must not poll before the background
// goroutine takes completions.
const pollGrace = time.Millisecond

// background takes the completions while the program does not poll: the
// provider's progress is automatic.
func (e *ep) background(ctx context.Context) {
	defer e.wg.Done()
	var seen uint64
	for {
		if n := e.polls.Load(); n != seen {
			seen = n
			select {
			case <-time.After(pollGrace):
				continue
			case <-ctx.Done():
				return
			}
		}
		if err := e.cq.Wait(ctx); err != nil {
			return
		}
		if e.polls.Load() != seen {
			continue
		}
		e.mu.Lock()
		e.progressLocked()
		e.mu.Unlock()
	}
}

// errnoOf maps a verbs or CM error to an errno, or def.
func errnoOf(err error, def fabric.Errno) fabric.Errno {
	switch {
	case errors.Is(err, verbs.ErrAddrInUse):
		return fabric.ErrAddrInUse
	case errors.Is(err, verbs.ErrTimedOut):
		return fabric.ErrTimedOut
	}
	return def
}
