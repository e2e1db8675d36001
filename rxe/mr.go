package rxe

import (
	"fmt"
	"sync/atomic"
	"unsafe"

	"github.com/rdmago/rdmago/internal/racesync"

	"github.com/rdmago/rdmago/verbs"
)

// pd implements verbs.PDDriver.
type pd struct {
	ctx *devctx
}

// mr is a registered memory region: the memory, its virtual address (that
// of buf[0], as peers see it in RETHs) and its key, used both as lkey and
// rkey as in rxe.
type mr struct {
	pd      *pd
	buf     []byte
	addr    uint64
	key     uint32
	access  verbs.AccessFlags
	valid   atomic.Bool
	windows atomic.Int32 // memory windows bound to it
}

// RegMR implements verbs.PDDriver (ibv_reg_mr).
func (p *pd) RegMR(buf []byte, access verbs.AccessFlags) (verbs.MRDriver, error) {
	h := p.ctx.hw
	m := &mr{pd: p, buf: buf, addr: uint64(uintptr(unsafe.Pointer(unsafe.SliceData(buf)))), access: access}
	h.mu.Lock()
	if len(h.keys) >= maxMR {
		h.mu.Unlock()
		return nil, verbs.Errorf("ibv_reg_mr", verbs.ErrNoMemory, "too many memory regions")
	}
	m.key = h.newKey()
	h.keys[m.key] = m
	h.keyIdx[m.key>>8] = struct{}{}
	h.mu.Unlock()
	m.valid.Store(true)
	return m, nil
}

// Keys implements verbs.MRDriver.
func (m *mr) Keys() (lkey, rkey uint32) { return m.key, m.key }

// Addr implements verbs.MRDriver.
func (m *mr) Addr() uint64 { return m.addr }

// Dereg implements verbs.MRDriver (ibv_dereg_mr): the key stops working at
// once for packets not yet processed. It is refused while memory windows
// are bound to the region.
func (m *mr) Dereg() error {
	h := m.pd.ctx.hw
	busy := func() error {
		return verbs.Errorf("ibv_dereg_mr", verbs.ErrBusy, "memory windows are bound to the region")
	}
	if m.windows.Load() > 0 {
		return busy()
	}
	m.valid.Store(false)
	if m.windows.Load() > 0 { // a bind got in: it saw the region valid
		m.valid.Store(true)
		return busy()
	}
	h.mu.Lock()
	delete(h.keys, m.key)
	delete(h.keyIdx, m.key>>8)
	h.mu.Unlock()
	return nil
}

// lookup returns the region a key names, if it is valid and of pd p.
func (h *hw) lookup(key uint32, p *pd) *mr {
	h.mu.RLock()
	m := h.keys[key]
	h.mu.RUnlock()
	if m == nil || m.pd != p || !m.valid.Load() {
		return nil
	}
	return m
}

// span returns the bytes [va, va+n) of the region, or nil if they are not
// all inside it.
func (m *mr) span(va uint64, n uint64) ([]byte, bool) {
	if va < m.addr || n > uint64(len(m.buf)) || va-m.addr > uint64(len(m.buf))-n {
		return nil, false
	}
	off := va - m.addr
	return m.buf[off : off+n : off+n], true
}

// resolveSGEs maps a scatter/gather list to the memory it names, checking
// keys, PD, bounds and (if write) local write access. It returns the total
// length, and false if any element is bad (LOC_PROT_ERR).
func (h *hw) resolveSGEs(p *pd, sges []verbs.SGE, write bool, segs [][]byte) ([][]byte, uint64, bool) {
	var total uint64
	for _, s := range sges {
		if s.Length == 0 {
			continue
		}
		m := h.lookup(s.LKey, p)
		if m == nil || write && m.access&verbs.AccessLocalWrite == 0 {
			return segs, 0, false
		}
		b, ok := m.span(s.Addr, uint64(s.Length))
		if !ok {
			return segs, 0, false
		}
		segs = append(segs, b)
		total += uint64(s.Length)
	}
	return segs, total, true
}

// gather copies into dst the bytes of segs starting at offset off.
func gather(dst []byte, segs [][]byte, off uint64) {
	racesync.Sync()
	for _, s := range segs {
		if len(dst) == 0 {
			return
		}
		if off >= uint64(len(s)) {
			off -= uint64(len(s))
			continue
		}
		n := copy(dst, s[off:])
		dst = dst[n:]
		off = 0
	}
}

// scatter copies src into segs starting at offset off.
func scatter(segs [][]byte, off uint64, src []byte) {
	racesync.Sync()
	defer racesync.Sync()
	for _, s := range segs {
		if len(src) == 0 {
			return
		}
		if off >= uint64(len(s)) {
			off -= uint64(len(s))
			continue
		}
		n := copy(s[off:], src)
		src = src[n:]
		off = 0
	}
}

// ah implements verbs.AHDriver.
type ah struct {
	pd   *pd
	attr verbs.AHAttr
}

// CreateAH implements verbs.PDDriver (ibv_create_ah).
func (p *pd) CreateAH(attr *verbs.AHAttr) (verbs.AHDriver, error) {
	h := p.ctx.hw
	if int(attr.GRH.SGIDIndex) >= len(h.gids) {
		return nil, verbs.Errorf("ibv_create_ah", verbs.ErrInvalidArgument, fmt.Sprintf("sgid_index %d: the GID table has %d entries", attr.GRH.SGIDIndex, len(h.gids)))
	}
	dst := attr.GRH.DGID.Addr()
	if attr.GRH.DGID.IsZero() || dst.Is4() != h.gids[attr.GRH.SGIDIndex].Addr().Is4() {
		return nil, verbs.Errorf("ibv_create_ah", verbs.ErrInvalidArgument, fmt.Sprintf("destination GID %s and source GID %s are of different IP versions", attr.GRH.DGID, h.gids[attr.GRH.SGIDIndex]))
	}
	return &ah{pd: p, attr: *attr}, nil
}

// Destroy implements verbs.AHDriver (ibv_destroy_ah).
func (a *ah) Destroy() error { return nil }

// Dealloc implements verbs.PDDriver (ibv_dealloc_pd).
func (p *pd) Dealloc() error { return nil }

var (
	_ verbs.PDDriver = (*pd)(nil)
	_ verbs.MRDriver = (*mr)(nil)
	_ verbs.AHDriver = (*ah)(nil)
)
