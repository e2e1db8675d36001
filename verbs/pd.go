package verbs

import (
	"sync"
)

// PD is a protection domain (struct ibv_pd): memory regions, queue pairs
// and address handles of one PD work only with each other.
type PD struct {
	ctx *Context
	drv PDDriver

	mu    sync.Mutex
	users int // MRs, QPs and AHs allocated from it
	freed bool
}

// Context returns the context the PD was allocated on.
func (pd *PD) Context() *Context { return pd.ctx }

func (pd *PD) acquire(op string) error {
	pd.mu.Lock()
	defer pd.mu.Unlock()
	if pd.freed {
		return Errorf(op, ErrClosed, "protection domain deallocated")
	}
	pd.users++
	return nil
}

func (pd *PD) release() {
	pd.mu.Lock()
	pd.users--
	pd.mu.Unlock()
}

// Dealloc deallocates the PD (ibv_dealloc_pd). It fails with ErrBusy while
// memory regions, queue pairs or address handles of the PD exist.
func (pd *PD) Dealloc() error {
	pd.mu.Lock()
	defer pd.mu.Unlock()
	if pd.freed {
		return nil
	}
	if pd.users > 0 {
		return Errorf("ibv_dealloc_pd", ErrBusy, itoa(pd.users)+" MR/QP/AH object(s) still use the PD")
	}
	if err := pd.drv.Dealloc(); err != nil {
		return err
	}
	pd.freed = true
	return nil
}

// MR is a registered memory region (struct ibv_mr).
type MR struct {
	pd         *PD
	drv        MRDriver
	buf        []byte
	lkey, rkey uint32
	addr       uint64
	access     AccessFlags

	mu      sync.Mutex
	dereged bool
}

// RegMR registers buf for RDMA with the given access rights (ibv_reg_mr).
// The region's virtual address is that of buf[0]; buf must stay untouched
// by the garbage collector's view of the program, which it does as long as
// the MR holds it. Remote write or atomic access needs local write too, as
// the IBTA requires.
func (pd *PD) RegMR(buf []byte, access AccessFlags) (*MR, error) {
	if len(buf) == 0 {
		return nil, Errorf("ibv_reg_mr", ErrInvalidArgument, "empty buffer")
	}
	if access&(AccessRemoteWrite|AccessRemoteAtomic) != 0 && access&AccessLocalWrite == 0 {
		return nil, Errorf("ibv_reg_mr", ErrInvalidArgument, "remote write or atomic access needs IBV_ACCESS_LOCAL_WRITE")
	}
	if err := pd.acquire("ibv_reg_mr"); err != nil {
		return nil, err
	}
	drv, err := pd.drv.RegMR(buf, access)
	if err != nil {
		pd.release()
		return nil, err
	}
	lkey, rkey := drv.Keys()
	return &MR{pd: pd, drv: drv, buf: buf, lkey: lkey, rkey: rkey, addr: drv.Addr(), access: access}, nil
}

// LKey returns the local key SGEs name the region by (ibv_mr.lkey).
func (mr *MR) LKey() uint32 { return mr.lkey }

// RKey returns the remote key peers name the region by (ibv_mr.rkey).
func (mr *MR) RKey() uint32 { return mr.rkey }

// Addr returns the virtual address of the region's first byte (ibv_mr.addr).
func (mr *MR) Addr() uint64 { return mr.addr }

// Len returns the region's length (ibv_mr.length).
func (mr *MR) Len() int { return len(mr.buf) }

// Buf returns the registered memory.
func (mr *MR) Buf() []byte { return mr.buf }

// Access returns the access rights the region was registered with.
func (mr *MR) Access() AccessFlags { return mr.access }

// PD returns the region's protection domain.
func (mr *MR) PD() *PD { return mr.pd }

// SGE returns a scatter/gather element for n bytes at offset off of the
// region.
func (mr *MR) SGE(off, n int) SGE {
	return SGE{Addr: mr.addr + uint64(off), Length: uint32(n), LKey: mr.lkey}
}

// Dereg deregisters the region (ibv_dereg_mr): its keys stop working at
// once, for local and remote access. It fails with ErrBusy while memory
// windows are bound to the region.
func (mr *MR) Dereg() error {
	mr.mu.Lock()
	defer mr.mu.Unlock()
	if mr.dereged {
		return nil
	}
	if err := mr.drv.Dereg(); err != nil {
		return err // for instance ErrBusy while memory windows are bound
	}
	mr.dereged = true
	mr.pd.release()
	return nil
}

// AH is an address handle (struct ibv_ah): a UD destination.
type AH struct {
	pd   *PD
	drv  AHDriver
	attr AHAttr

	mu        sync.Mutex
	destroyed bool
}

// CreateAH creates an address handle (ibv_create_ah). On RoCE the address
// must be global (attr.IsGlobal, with the peer's GID).
func (pd *PD) CreateAH(attr *AHAttr) (*AH, error) {
	if !attr.IsGlobal {
		return nil, Errorf("ibv_create_ah", ErrInvalidArgument, "RoCE address handles need a GRH (IsGlobal and a DGID)")
	}
	if err := pd.acquire("ibv_create_ah"); err != nil {
		return nil, err
	}
	drv, err := pd.drv.CreateAH(attr)
	if err != nil {
		pd.release()
		return nil, err
	}
	return &AH{pd: pd, drv: drv, attr: *attr}, nil
}

// Attr returns the address the handle was created with.
func (ah *AH) Attr() AHAttr { return ah.attr }

// Destroy destroys the address handle (ibv_destroy_ah).
func (ah *AH) Destroy() error {
	ah.mu.Lock()
	defer ah.mu.Unlock()
	if ah.destroyed {
		return nil
	}
	if err := ah.drv.Destroy(); err != nil {
		return err
	}
	ah.destroyed = true
	ah.pd.release()
	return nil
}
