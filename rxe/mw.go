package rxe

import (
	"crypto/rand"
	"encoding/binary"
	"sync/atomic"

	"github.com/rdmago/rdmago/verbs"
)

// mw implements verbs.MWDriver. Its key's upper 24 bits (the index) name
// it for life; a bind sets the low 8 bits. The binding is replaced whole,
// so the owners of other QPs read it without locks.
type mw struct {
	pd    *pd
	typ   verbs.MWType
	index uint32
	rkey0 uint32 // the key it was allocated with
	bound atomic.Pointer[mwBinding]
	dead  atomic.Bool // deallocated
}

// mwBinding is what a bound window gives remote peers.
type mwBinding struct {
	rkey   uint32
	mr     *mr
	addr   uint64
	length uint64
	access verbs.AccessFlags
	qp     *qp // type 2: the QP it was bound through, the only one it serves
}

// AllocMW implements verbs.PDDriver (ibv_alloc_mw).
func (p *pd) AllocMW(t verbs.MWType) (verbs.MWDriver, error) {
	h := p.ctx.hw
	h.mu.Lock()
	defer h.mu.Unlock()
	if len(h.mws) >= maxMR {
		return nil, verbs.Errorf("ibv_alloc_mw", verbs.ErrNoMemory, "too many memory windows")
	}
	k := h.newKey()
	w := &mw{pd: p, typ: t, index: k >> 8, rkey0: k}
	h.mws[w.index] = w
	return w, nil
}

// RKey implements verbs.MWDriver.
func (w *mw) RKey() uint32 { return w.rkey0 }

// Dealloc implements verbs.MWDriver (ibv_dealloc_mw): a bound window is
// invalidated first.
func (w *mw) Dealloc() error {
	w.dead.Store(true)
	w.unbind()
	h := w.pd.ctx.hw
	h.mu.Lock()
	delete(h.mws, w.index)
	h.mu.Unlock()
	return nil
}

// unbind invalidates the window, releasing its region.
func (w *mw) unbind() {
	if b := w.bound.Swap(nil); b != nil {
		b.mr.windows.Add(-1)
	}
}

// window returns the window a key names, if any.
func (h *hw) window(rkey uint32) *mw {
	h.mu.RLock()
	defer h.mu.RUnlock()
	return h.mws[rkey>>8]
}

// localOp implements engineHost: a BIND_MW or LOCAL_INV work request,
// carried out in the send queue's order.
func (q *qp) localOp(wr *verbs.SendWR) verbs.WCStatus {
	if wr.Opcode == verbs.WRBindMW {
		return q.bindMW(&wr.BindMW)
	}
	if !q.invalidate(wr.InvalidateRKey) {
		return verbs.WCLocQPOpErr
	}
	return verbs.WCSuccess
}

// bindMW carries out a BIND_MW work request (the requester, in order). It
// returns the completion status: IBV_WC_MW_BIND_ERR for a bind the IBTA
// forbids (IBTA vol. 1 §10.6.7.2).
func (q *qp) bindMW(b *verbs.BindMWWR) verbs.WCStatus {
	if b.MW == nil {
		return verbs.WCMWBindErr
	}
	w, ok := verbs.MWDriverOf(b.MW).(*mw)
	if !ok || w.pd != q.pd || b.RKey>>8 != w.index {
		return verbs.WCMWBindErr // another device's or PD's window, or a key of another window
	}
	if w.dead.Load() {
		return verbs.WCMWBindErr // deallocated since the bind was posted
	}
	info := &b.BindInfo
	if w.typ == verbs.MWType2 && w.bound.Load() != nil {
		return verbs.WCMWBindErr // a type 2 window must be invalidated before it is bound again
	}
	if info.Length == 0 {
		if w.typ == verbs.MWType2 {
			return verbs.WCMWBindErr // type 2 windows are unbound by invalidation
		}
		w.unbind()
		return verbs.WCSuccess
	}
	if info.MR == nil {
		return verbs.WCMWBindErr
	}
	m, ok := verbs.MRDriverOf(info.MR).(*mr)
	switch {
	case !ok || m.pd != q.pd || !m.valid.Load():
		return verbs.WCMWBindErr
	case m.access&verbs.AccessMWBind == 0:
		return verbs.WCMWBindErr // the region does not allow windows
	case info.AccessFlags&(verbs.AccessRemoteWrite|verbs.AccessRemoteAtomic) != 0 && m.access&verbs.AccessLocalWrite == 0:
		return verbs.WCMWBindErr
	case info.AccessFlags&^(verbs.AccessRemoteWrite|verbs.AccessRemoteRead|verbs.AccessRemoteAtomic) != 0:
		return verbs.WCMWBindErr
	}
	if _, ok := m.span(info.Addr, info.Length); !ok {
		return verbs.WCMWBindErr
	}
	nb := &mwBinding{rkey: b.RKey, mr: m, addr: info.Addr, length: info.Length, access: info.AccessFlags}
	if w.typ == verbs.MWType2 {
		nb.qp = q
	}
	// Count the binding on the region before publishing it, and give up
	// if a deregistration got in between.
	m.windows.Add(1)
	if !m.valid.Load() {
		m.windows.Add(-1)
		return verbs.WCMWBindErr
	}
	if w.typ == verbs.MWType2 {
		// Two QPs may bind one free type 2 window at once: one wins.
		if !w.bound.CompareAndSwap(nil, nb) {
			m.windows.Add(-1)
			return verbs.WCMWBindErr
		}
	} else if old := w.bound.Swap(nb); old != nil {
		old.mr.windows.Add(-1)
	}
	if w.dead.Load() {
		w.unbind() // a dealloc got in: it may not have seen this binding
		return verbs.WCMWBindErr
	}
	return verbs.WCSuccess
}

// invalidate invalidates the type 2 window rkey names, for LOCAL_INV (by
// this QP) or a peer's SEND_WITH_INV arriving on it. It reports whether
// the key named such a window, bound through this QP.
func (q *qp) invalidate(rkey uint32) bool {
	w := q.hw.window(rkey)
	if w == nil || w.typ != verbs.MWType2 || w.pd != q.pd {
		return false
	}
	b := w.bound.Load()
	if b == nil || b.rkey != rkey || b.qp != q {
		return false
	}
	if w.bound.CompareAndSwap(b, nil) {
		b.mr.windows.Add(-1)
	}
	return true
}

// windowMemory resolves [va, va+n) of the window rkey names for a remote
// access that needs right, through this QP, if the window is of PD p.
func (q *qp) windowMemory(p *pd, rkey uint32, va, n uint64, right verbs.AccessFlags) ([]byte, bool) {
	w := q.hw.window(rkey)
	if w == nil || w.pd != p {
		return nil, false
	}
	b := w.bound.Load()
	if b == nil || b.rkey != rkey || b.access&right == 0 || b.qp != nil && b.qp != q || !b.mr.valid.Load() {
		return nil, false
	}
	if va < b.addr || n > b.length || va-b.addr > b.length-n {
		return nil, false
	}
	return b.mr.span(va, n)
}

// randomKey returns 32 random bits.
func randomKey() uint32 {
	var b [4]byte
	rand.Read(b[:])
	return binary.LittleEndian.Uint32(b[:])
}

var _ verbs.MWDriver = (*mw)(nil)
