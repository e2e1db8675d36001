package verbs

import "sync"

// MWType is a memory window's type (enum ibv_mw_type).
type MWType uint8

const (
	// MWType1 windows are bound with (*QP).BindMW and may be used
	// through any QP of their PD; only another bind changes them.
	MWType1 MWType = 1 // IBV_MW_TYPE_1
	// MWType2 windows are bound with a BIND_MW work request, belong to
	// the QP that bound them, and are invalidated by LOCAL_INV or a
	// peer's SEND_WITH_INV.
	MWType2 MWType = 2 // IBV_MW_TYPE_2
)

func (t MWType) String() string {
	switch t {
	case MWType1:
		return "type 1"
	case MWType2:
		return "type 2"
	}
	return "type " + itoa(int(t))
}

// MWBindInfo is what a bind gives a window (struct ibv_mw_bind_info): a
// part of a memory region registered with IBV_ACCESS_MW_BIND, and the
// remote rights the window grants. A Length of 0 unbinds.
type MWBindInfo struct {
	MR          *MR
	Addr        uint64
	Length      uint64
	AccessFlags AccessFlags
}

// BindMWWR is the bind part of a BIND_MW send work request (wr.bind_mw).
type BindMWWR struct {
	MW *MW
	// RKey is the key the window has once bound: its index (upper 24
	// bits) must be the window's, the low 8 bits are the caller's
	// choice (IncRKey picks the next).
	RKey     uint32
	BindInfo MWBindInfo
}

// MWBind is a type 1 bind request (struct ibv_mw_bind).
type MWBind struct {
	WRID      uint64
	SendFlags SendFlags
	BindInfo  MWBindInfo
}

// IncRKey returns rkey with its low 8 bits incremented (ibv_inc_rkey): the
// next key of the same memory window.
func IncRKey(rkey uint32) uint32 {
	return rkey&^0xff | (rkey+1)&0xff
}

// MW is a memory window (struct ibv_mw): a view of part of a memory region
// under its own remote key and rights, that can be moved and revoked
// without re-registering the memory.
type MW struct {
	pd  *PD
	drv MWDriver
	typ MWType

	mu       sync.Mutex
	rkey     uint32
	dealloct bool
}

// AllocMW allocates a memory window (ibv_alloc_mw). It starts unbound.
func (pd *PD) AllocMW(t MWType) (*MW, error) {
	if t != MWType1 && t != MWType2 {
		return nil, Errorf("ibv_alloc_mw", ErrInvalidArgument, "memory window "+t.String())
	}
	if err := pd.acquire("ibv_alloc_mw"); err != nil {
		return nil, err
	}
	drv, err := pd.drv.AllocMW(t)
	if err != nil {
		pd.release()
		return nil, err
	}
	return &MW{pd: pd, drv: drv, typ: t, rkey: drv.RKey()}, nil
}

// RKey returns the window's remote key (ibv_mw.rkey): the one the last
// bind posted gave it.
func (mw *MW) RKey() uint32 {
	mw.mu.Lock()
	defer mw.mu.Unlock()
	return mw.rkey
}

// Type returns the window's type.
func (mw *MW) Type() MWType { return mw.typ }

// PD returns the window's protection domain.
func (mw *MW) PD() *PD { return mw.pd }

func (mw *MW) gone() bool {
	mw.mu.Lock()
	defer mw.mu.Unlock()
	return mw.dealloct
}

func (mw *MW) setRKey(k uint32) {
	mw.mu.Lock()
	mw.rkey = k
	mw.mu.Unlock()
}

// BindMW binds a type 1 window (ibv_bind_mw) by posting a BIND_MW work
// request to qp: the window gets a new key, returned and from now on given
// by RKey, which works once the bind executes. The completion, if asked
// for with IBV_SEND_SIGNALED, has opcode IBV_WC_BIND_MW.
func (qp *QP) BindMW(mw *MW, b *MWBind) (uint32, error) {
	if mw == nil || b == nil {
		return 0, Errorf("ibv_bind_mw", ErrInvalidArgument, "no memory window or bind request")
	}
	if mw.typ != MWType1 {
		return 0, Errorf("ibv_bind_mw", ErrInvalidArgument, "ibv_bind_mw binds type 1 windows; type 2 takes a BIND_MW work request")
	}
	rkey := IncRKey(mw.RKey())
	wr := SendWR{WRID: b.WRID, Opcode: WRBindMW, SendFlags: b.SendFlags, BindMW: BindMWWR{MW: mw, RKey: rkey, BindInfo: b.BindInfo}}
	if err := qp.PostSend([]SendWR{wr}); err != nil {
		if we, ok := err.(*WRError); ok {
			return 0, we.Err
		}
		return 0, err
	}
	return rkey, nil
}

// Dealloc frees the window (ibv_dealloc_mw); a bound window is
// invalidated first.
func (mw *MW) Dealloc() error {
	mw.mu.Lock()
	defer mw.mu.Unlock()
	if mw.dealloct {
		return nil
	}
	if err := mw.drv.Dealloc(); err != nil {
		return err
	}
	mw.dealloct = true
	mw.pd.release()
	return nil
}
