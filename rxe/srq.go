package rxe

import (
	"fmt"
	"sync"

	"github.com/rdmago/rdmago/verbs"
	"github.com/rdmago/rdmago/verbs/swcq"
)

// srq implements verbs.SRQDriver: a receive queue QPs share. Its WQEs are
// taken by the owners of the QPs attached to it, under mu. An XRC SRQ is
// shared instead by the XRC_RECV QPs of its domain, for the requests that
// name its number; it has its own PD and CQ.
type srq struct {
	ctx *devctx
	// XRC SRQs only.
	xrcd *xrcd
	pd   *pd
	cq   *swcq.CQ
	num  uint32

	mu        sync.Mutex
	attr      verbs.SRQAttr
	rq        recvQueue
	destroyed bool
}

// CreateSRQ implements verbs.PDDriver (ibv_create_srq).
func (p *pd) CreateSRQ(attr *verbs.SRQInitAttr) (verbs.SRQDriver, error) {
	a, err := checkSRQAttr("ibv_create_srq", attr.Attr)
	if err != nil {
		return nil, err
	}
	h := p.ctx.hw
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.nsrq >= maxSRQ {
		return nil, verbs.Errorf("ibv_create_srq", verbs.ErrNoMemory, "too many SRQs")
	}
	h.nsrq++
	attr.Attr = a
	return &srq{ctx: p.ctx, attr: a}, nil
}

// checkSRQAttr checks an SRQ's sizes against the device's and returns
// them as the device gives them.
func checkSRQAttr(op string, a verbs.SRQAttr) (verbs.SRQAttr, error) {
	switch {
	case a.MaxWR > maxSRQWR:
		return a, verbs.Errorf(op, verbs.ErrInvalidArgument, fmt.Sprintf("max_wr %d above the device's %d", a.MaxWR, maxSRQWR))
	case a.MaxSGE > maxSGE:
		return a, verbs.Errorf(op, verbs.ErrInvalidArgument, fmt.Sprintf("max_sge %d above the device's %d", a.MaxSGE, maxSGE))
	case a.SRQLimit > a.MaxWR:
		return a, verbs.Errorf(op, verbs.ErrInvalidArgument, fmt.Sprintf("srq_limit %d above max_wr %d", a.SRQLimit, a.MaxWR))
	}
	a.MaxSGE = max(a.MaxSGE, 1)
	return a, nil
}

// Modify implements verbs.SRQDriver (ibv_modify_srq).
func (s *srq) Modify(attr *verbs.SRQAttr, mask verbs.SRQAttrMask) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	bad := func(format string, args ...any) error {
		return verbs.Errorf("ibv_modify_srq", verbs.ErrInvalidArgument, fmt.Sprintf(format, args...))
	}
	maxWR := s.attr.MaxWR
	if mask&verbs.SRQAttrMaxWR != 0 {
		switch {
		case attr.MaxWR == 0 || attr.MaxWR > maxSRQWR:
			return bad("max_wr %d: the device takes 1 to %d", attr.MaxWR, maxSRQWR)
		case int(attr.MaxWR) < s.rq.len():
			return bad("max_wr %d below the %d work requests posted", attr.MaxWR, s.rq.len())
		}
		maxWR = attr.MaxWR
	}
	limit := s.attr.SRQLimit
	if mask&verbs.SRQAttrLimit != 0 {
		limit = attr.SRQLimit
	}
	if limit > maxWR {
		return bad("srq_limit %d above max_wr %d", limit, maxWR)
	}
	s.attr.MaxWR = maxWR
	if mask&verbs.SRQAttrLimit != 0 {
		s.attr.SRQLimit = attr.SRQLimit
	}
	return nil
}

// Query implements verbs.SRQDriver (ibv_query_srq).
func (s *srq) Query() (verbs.SRQAttr, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.attr, nil
}

// PostRecv implements verbs.SRQDriver (ibv_post_srq_recv).
func (s *srq) PostRecv(wrs []verbs.RecvWR) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	for i := range wrs {
		wr := &wrs[i]
		var err error
		switch {
		case len(wr.SGList) > int(s.attr.MaxSGE):
			err = verbs.Errorf("ibv_post_srq_recv", verbs.ErrInvalidArgument, fmt.Sprintf("%d SGEs, the SRQ takes %d", len(wr.SGList), s.attr.MaxSGE))
		case s.rq.len() >= int(s.attr.MaxWR):
			err = verbs.Errorf("ibv_post_srq_recv", verbs.ErrNoMemory, fmt.Sprintf("SRQ full (%d WRs)", s.attr.MaxWR))
		}
		if err != nil {
			return &verbs.WRError{Index: i, WRID: wr.WRID, Err: err}
		}
		s.rq.push(wr.WRID, wr.SGList)
	}
	return nil
}

// pop takes the oldest WQE, if any, and raises IBV_EVENT_SRQ_LIMIT_REACHED
// (once: the limit disarms) when fewer than srq_limit are left.
func (s *srq) pop(w *recvWQE) bool {
	s.mu.Lock()
	if !s.rq.pop(w) {
		s.mu.Unlock()
		return false
	}
	fire := s.attr.SRQLimit > 0 && s.rq.len() < int(s.attr.SRQLimit)
	if fire {
		s.attr.SRQLimit = 0
	}
	s.mu.Unlock()
	if fire && s.ctx.events != nil {
		s.ctx.events.SRQEvent(verbs.EventSRQLimitReached, s)
	}
	return true
}

// unpop puts back a WQE taken for a message that did not arrive whole.
func (s *srq) unpop(w *recvWQE) {
	s.mu.Lock()
	s.rq.unpop(w)
	s.mu.Unlock()
}

// Destroy implements verbs.SRQDriver (ibv_destroy_srq).
func (s *srq) Destroy() error {
	s.mu.Lock()
	if s.destroyed {
		s.mu.Unlock()
		return nil
	}
	s.destroyed = true
	s.rq.takeAll(nil)
	s.mu.Unlock()
	h := s.ctx.hw
	h.mu.Lock()
	h.nsrq--
	if s.xrcd != nil && h.srqs[s.num] == s {
		delete(h.srqs, s.num)
	}
	h.mu.Unlock()
	return nil
}

var _ verbs.SRQDriver = (*srq)(nil)
