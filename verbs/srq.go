package verbs

import (
	"sync"

	"github.com/rdmago/rdmago/internal/racesync"
)

// SRQAttr holds a shared receive queue's sizes and limit (struct
// ibv_srq_attr).
type SRQAttr struct {
	MaxWR  uint32 // receive work requests the SRQ holds
	MaxSGE uint32 // scatter/gather elements per work request
	// SRQLimit arms IBV_EVENT_SRQ_LIMIT_REACHED: once fewer than this
	// many work requests are left, the event fires once and the limit
	// drops back to 0 (disarmed). 0 leaves it disarmed.
	SRQLimit uint32
}

// SRQInitAttr describes a shared receive queue to create (struct
// ibv_srq_init_attr).
type SRQInitAttr struct {
	Attr SRQAttr
	// SRQContext is the program's value that comes with the SRQ
	// (srq_context): SRQ.SRQContext returns it.
	SRQContext any
}

// SRQAttrMask names the fields ModifySRQ changes (enum ibv_srq_attr_mask).
type SRQAttrMask uint32

const (
	SRQAttrMaxWR SRQAttrMask = 1 << 0 // IBV_SRQ_MAX_WR: resize the queue
	SRQAttrLimit SRQAttrMask = 1 << 1 // IBV_SRQ_LIMIT: arm the limit event
)

// SRQ is a shared receive queue (struct ibv_srq): receive work requests
// that any queue pair created with it consumes, in the order posted. An
// XRC SRQ (CreateSRQEx) is consumed instead by the XRC requests that name
// its number, through any XRC_RECV QP of its domain.
type SRQ struct {
	pd      *PD
	drv     SRQDriver
	userCtx any
	typ     SRQType
	xrcd    *XRCD  // XRC SRQs: the domain
	cq      *CQ    // XRC SRQs: where receives complete
	num     uint32 // XRC SRQs: the number senders name

	mu        sync.Mutex
	users     int // QPs attached
	destroyed bool
}

// CreateSRQ creates a shared receive queue (ibv_create_srq). On return
// attr.Attr holds the sizes the device gave.
func (pd *PD) CreateSRQ(attr *SRQInitAttr) (*SRQ, error) {
	if attr.Attr.MaxWR == 0 {
		return nil, Errorf("ibv_create_srq", ErrInvalidArgument, "max_wr is 0")
	}
	if err := pd.acquire("ibv_create_srq"); err != nil {
		return nil, err
	}
	drv, err := pd.drv.CreateSRQ(attr)
	if err != nil {
		pd.release()
		return nil, err
	}
	s := &SRQ{pd: pd, drv: drv}
	if attr != nil {
		s.userCtx = attr.SRQContext
	}
	c := pd.ctx
	c.mu.Lock()
	c.srqs[drv] = s
	c.mu.Unlock()
	return s, nil
}

// PD returns the SRQ's protection domain.
func (s *SRQ) PD() *PD { return s.pd }

// Type returns the SRQ's kind (srq_type of ibv_create_srq_ex).
func (s *SRQ) Type() SRQType { return s.typ }

// XRCD returns an XRC SRQ's domain, or nil.
func (s *SRQ) XRCD() *XRCD { return s.xrcd }

// CQ returns the completion queue an XRC SRQ's receives complete to, or
// nil for a basic SRQ (whose receives complete to their QP's receive CQ).
func (s *SRQ) CQ() *CQ { return s.cq }

// Num returns the number of an XRC SRQ (ibv_get_srq_num): what an XRC
// sender puts in SendWR.RemoteSRQN to reach it. A basic SRQ has none
// that anyone could use, and the call fails with ErrInvalidArgument.
func (s *SRQ) Num() (uint32, error) {
	if err := s.live("ibv_get_srq_num"); err != nil {
		return 0, err
	}
	if s.typ != SRQTXRC {
		return 0, Errorf("ibv_get_srq_num", ErrInvalidArgument, "only XRC SRQs have a number senders name")
	}
	return s.num, nil
}

// SRQContext returns the SRQContext of the SRQ's init attributes
// (srq->srq_context).
func (s *SRQ) SRQContext() any { return s.userCtx }

// Modify resizes the SRQ or arms its limit (ibv_modify_srq).
func (s *SRQ) Modify(attr *SRQAttr, mask SRQAttrMask) error {
	if err := s.live("ibv_modify_srq"); err != nil {
		return err
	}
	if mask&^(SRQAttrMaxWR|SRQAttrLimit) != 0 {
		return Errorf("ibv_modify_srq", ErrInvalidArgument, "unknown bits in the attribute mask")
	}
	return s.drv.Modify(attr, mask)
}

// Query returns the SRQ's attributes (ibv_query_srq).
func (s *SRQ) Query() (SRQAttr, error) {
	if err := s.live("ibv_query_srq"); err != nil {
		return SRQAttr{}, err
	}
	return s.drv.Query()
}

// PostRecv posts receive work requests to the SRQ (ibv_post_srq_recv),
// with PostSend's error convention.
func (s *SRQ) PostRecv(wrs []RecvWR) error {
	if err := s.live("ibv_post_srq_recv"); err != nil {
		return &WRError{Err: err}
	}
	racesync.Sync()
	return s.drv.PostRecv(wrs)
}

func (s *SRQ) live(op string) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.destroyed {
		return Errorf(op, ErrClosed, "SRQ destroyed")
	}
	return nil
}

func (s *SRQ) attach() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.destroyed {
		return Errorf("ibv_create_qp", ErrClosed, "SRQ destroyed")
	}
	if s.typ != SRQTBasic {
		return Errorf("ibv_create_qp", ErrInvalidArgument, "a QP takes its receives from a basic SRQ, not an "+s.typ.String()+" one")
	}
	s.users++
	return nil
}

func (s *SRQ) detach() {
	s.mu.Lock()
	s.users--
	s.mu.Unlock()
}

// Destroy destroys the SRQ (ibv_destroy_srq). It fails with ErrBusy while
// queue pairs use it. Work requests still posted are dropped.
func (s *SRQ) Destroy() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.destroyed {
		return nil
	}
	if s.users > 0 {
		return Errorf("ibv_destroy_srq", ErrBusy, itoa(s.users)+" QP(s) still use the SRQ")
	}
	if err := s.drv.Destroy(); err != nil {
		return err
	}
	s.destroyed = true
	c := s.pd.ctx
	c.mu.Lock()
	delete(c.srqs, s.drv)
	c.mu.Unlock()
	if s.xrcd != nil {
		s.cq.release()
		s.xrcd.release()
	}
	s.pd.release()
	return nil
}
