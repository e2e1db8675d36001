//go:build rdmacore && linux && cgo

package rdmacore

/*
#cgo noescape rg_post_send
#cgo nocallback rg_post_send
#cgo noescape rg_post_recv
#cgo nocallback rg_post_recv
#include "shim.h"
*/
import "C"

import (
	"slices"
	"unsafe"

	"github.com/rdmago/rdmago/verbs"
)

// srq is a shared receive queue.
type srq struct {
	life
	c   *ctx
	srq *C.struct_ibv_srq
}

func (s *srq) Modify(attr *verbs.SRQAttr, mask verbs.SRQAttrMask) error {
	var a C.struct_ibv_srq_attr
	a.max_wr = C.uint32_t(attr.MaxWR)
	a.max_sge = C.uint32_t(attr.MaxSGE)
	a.srq_limit = C.uint32_t(attr.SRQLimit)
	if rc := C.ibv_modify_srq(s.srq, &a, C.int(mask)); rc != 0 {
		return failRC("ibv_modify_srq", rc)
	}
	return nil
}

func (s *srq) Query() (verbs.SRQAttr, error) {
	var a C.struct_ibv_srq_attr
	if rc := C.ibv_query_srq(s.srq, &a); rc != 0 {
		return verbs.SRQAttr{}, failRC("ibv_query_srq", rc)
	}
	return verbs.SRQAttr{MaxWR: uint32(a.max_wr), MaxSGE: uint32(a.max_sge), SRQLimit: uint32(a.srq_limit)}, nil
}

func (s *srq) PostRecv(wrs []verbs.RecvWR) error { return postRecv(nil, s.srq, wrs) }

func (s *srq) Destroy() error {
	return s.end(s.c, kindSRQ, s, "ibv_destroy_srq", func() C.int {
		if rc := C.ibv_destroy_srq(s.srq); rc != 0 {
			return rc
		}
		s.c.s.mu.Lock()
		delete(s.c.s.bySRQ, s.srq)
		s.c.s.mu.Unlock()
		return 0
	})
}

// qp is a queue pair.
type qp struct {
	life
	c   *ctx
	qp  *C.struct_ibv_qp
	typ verbs.QPType
	num uint32
}

func (q *qp) Num() uint32 { return q.num }

func (q *qp) Modify(attr *verbs.QPAttr, mask verbs.QPAttrMask) error {
	a := cQPAttr(attr)
	if rc := C.ibv_modify_qp(q.qp, &a, C.int(mask)); rc != 0 {
		return failRC("ibv_modify_qp", rc)
	}
	return nil
}

func cQPAttr(attr *verbs.QPAttr) C.struct_ibv_qp_attr {
	var a C.struct_ibv_qp_attr
	a.qp_state = C.enum_ibv_qp_state(attr.QPState)
	a.cur_qp_state = C.enum_ibv_qp_state(attr.CurQPState)
	a.path_mtu = C.enum_ibv_mtu(attr.PathMTU)
	a.path_mig_state = C.enum_ibv_mig_state(attr.PathMigState)
	a.qkey = C.uint32_t(attr.QKey)
	a.rq_psn = C.uint32_t(attr.RQPSN)
	a.sq_psn = C.uint32_t(attr.SQPSN)
	a.dest_qp_num = C.uint32_t(attr.DestQPNum)
	a.qp_access_flags = C.uint(attr.QPAccessFlags)
	a.cap.max_send_wr = C.uint32_t(attr.Cap.MaxSendWR)
	a.cap.max_recv_wr = C.uint32_t(attr.Cap.MaxRecvWR)
	a.cap.max_send_sge = C.uint32_t(attr.Cap.MaxSendSGE)
	a.cap.max_recv_sge = C.uint32_t(attr.Cap.MaxRecvSGE)
	a.cap.max_inline_data = C.uint32_t(attr.Cap.MaxInlineData)
	a.ah_attr = cAHAttr(&attr.AHAttr)
	a.alt_ah_attr = cAHAttr(&attr.AltAHAttr)
	a.pkey_index = C.uint16_t(attr.PKeyIndex)
	a.alt_pkey_index = C.uint16_t(attr.AltPKeyIndex)
	a.en_sqd_async_notify = C.uint8_t(attr.EnSQDAsyncNotify)
	a.max_rd_atomic = C.uint8_t(attr.MaxRdAtomic)
	a.max_dest_rd_atomic = C.uint8_t(attr.MaxDestRdAtomic)
	a.min_rnr_timer = C.uint8_t(attr.MinRNRTimer)
	a.port_num = C.uint8_t(attr.PortNum)
	a.timeout = C.uint8_t(attr.Timeout)
	a.retry_cnt = C.uint8_t(attr.RetryCnt)
	a.rnr_retry = C.uint8_t(attr.RNRRetry)
	a.alt_port_num = C.uint8_t(attr.AltPortNum)
	a.alt_timeout = C.uint8_t(attr.AltTimeout)
	a.rate_limit = C.uint32_t(attr.RateLimit)
	return a
}

func goQPAttr(a *C.struct_ibv_qp_attr) verbs.QPAttr {
	return verbs.QPAttr{
		QPState:       verbs.QPState(a.qp_state),
		CurQPState:    verbs.QPState(a.cur_qp_state),
		PathMTU:       verbs.MTU(a.path_mtu),
		PathMigState:  verbs.MigState(a.path_mig_state),
		QKey:          uint32(a.qkey),
		RQPSN:         uint32(a.rq_psn),
		SQPSN:         uint32(a.sq_psn),
		DestQPNum:     uint32(a.dest_qp_num),
		QPAccessFlags: verbs.AccessFlags(a.qp_access_flags),
		Cap: verbs.QPCap{
			MaxSendWR:     uint32(a.cap.max_send_wr),
			MaxRecvWR:     uint32(a.cap.max_recv_wr),
			MaxSendSGE:    uint32(a.cap.max_send_sge),
			MaxRecvSGE:    uint32(a.cap.max_recv_sge),
			MaxInlineData: uint32(a.cap.max_inline_data),
		},
		AHAttr:           goAHAttr(&a.ah_attr),
		AltAHAttr:        goAHAttr(&a.alt_ah_attr),
		PKeyIndex:        uint16(a.pkey_index),
		AltPKeyIndex:     uint16(a.alt_pkey_index),
		EnSQDAsyncNotify: uint8(a.en_sqd_async_notify),
		SQDraining:       uint8(a.sq_draining),
		MaxRdAtomic:      uint8(a.max_rd_atomic),
		MaxDestRdAtomic:  uint8(a.max_dest_rd_atomic),
		MinRNRTimer:      uint8(a.min_rnr_timer),
		PortNum:          uint8(a.port_num),
		Timeout:          uint8(a.timeout),
		RetryCnt:         uint8(a.retry_cnt),
		RNRRetry:         uint8(a.rnr_retry),
		AltPortNum:       uint8(a.alt_port_num),
		AltTimeout:       uint8(a.alt_timeout),
		RateLimit:        uint32(a.rate_limit),
	}
}

// allQPAttrs is the mask ibv_query_qp is asked for.
const allQPAttrs = (1 << 21) - 1

func (q *qp) Query() (verbs.QPAttr, verbs.QPInitAttr, error) {
	var a C.struct_ibv_qp_attr
	var ia C.struct_ibv_qp_init_attr
	if rc := C.ibv_query_qp(q.qp, &a, allQPAttrs, &ia); rc != 0 {
		return verbs.QPAttr{}, verbs.QPInitAttr{}, failRC("ibv_query_qp", rc)
	}
	init := verbs.QPInitAttr{
		QPType:   verbs.QPType(ia.qp_type),
		SQSigAll: ia.sq_sig_all != 0,
		Cap: verbs.QPCap{
			MaxSendWR:     uint32(ia.cap.max_send_wr),
			MaxRecvWR:     uint32(ia.cap.max_recv_wr),
			MaxSendSGE:    uint32(ia.cap.max_send_sge),
			MaxRecvSGE:    uint32(ia.cap.max_recv_sge),
			MaxInlineData: uint32(ia.cap.max_inline_data),
		},
	}
	return goQPAttr(&a), init, nil
}

// sgeCount is the number of SGEs of a request list.
func sgeCount[W verbs.SendWR | verbs.RecvWR](wrs []W, sg func(*W) []verbs.SGE) int {
	n := 0
	for i := range wrs {
		n += len(sg(&wrs[i]))
	}
	return n
}

// checkInline makes sure an inline request's SGEs lie inside registered
// regions of this device, which libibverbs reads from without checking.
func (q *qp) checkInline(w *verbs.SendWR) error {
	s := q.c.s
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, g := range w.SGList {
		m := s.byMRKey[g.LKey]
		if m == nil || g.Addr < m.lo || g.Addr+uint64(g.Length) > m.hi || g.Addr+uint64(g.Length) < g.Addr {
			return verbs.Errorf("ibv_post_send", verbs.ErrInvalidArgument, "inline SGE outside the registered region of its lkey")
		}
	}
	return nil
}

// PostSend posts the requests as one list (ibv_post_send); a type 1
// window's bind goes through ibv_bind_mw in its place in the list.
func (q *qp) PostSend(wrs []verbs.SendWR) error {
	start := 0
	for i := range wrs {
		w := &wrs[i]
		if w.SendFlags&verbs.SendInline != 0 {
			if err := q.checkInline(w); err != nil {
				if err := q.postSend(wrs[start:i], start); err != nil {
					return err
				}
				return &verbs.WRError{Index: i, WRID: w.WRID, Err: err}
			}
		}
		if w.Opcode == verbs.WRBindMW && w.BindMW.MW != nil && w.BindMW.MW.Type() == verbs.MWType1 {
			if err := q.postSend(wrs[start:i], start); err != nil {
				return err
			}
			var cw C.struct_rg_send_wr
			if err := fillSend(&cw, w); err != nil {
				return &verbs.WRError{Index: i, WRID: w.WRID, Err: err}
			}
			var rkey C.uint32_t
			if rc := C.rg_bind_mw(q.qp, &cw, &rkey); rc != 0 {
				return &verbs.WRError{Index: i, WRID: w.WRID, Err: failRC("ibv_bind_mw", rc)}
			}
			w.BindMW.RKey = uint32(rkey)
			start = i + 1
		}
	}
	return q.postSend(wrs[start:], start)
}

func fillSend(cw *C.struct_rg_send_wr, w *verbs.SendWR) error {
	cw.wr_id = C.uint64_t(w.WRID)
	cw.opcode = C.uint32_t(w.Opcode)
	cw.flags = C.uint32_t(w.SendFlags)
	cw.imm = C.uint32_t(w.ImmData)
	cw.inv_rkey = C.uint32_t(w.InvalidateRKey)
	cw.remote_addr = C.uint64_t(w.RemoteAddr)
	cw.rkey = C.uint32_t(w.RKey)
	cw.compare_add = C.uint64_t(w.CompareAdd)
	cw.swap_ = C.uint64_t(w.Swap)
	if w.AH != nil {
		h, ok := verbs.AHDriverOf(w.AH).(*ah)
		if !ok {
			return verbs.Errorf("ibv_post_send", verbs.ErrInvalidArgument, "address handle of another provider")
		}
		cw.ah = h.ah
	}
	cw.remote_qpn = C.uint32_t(w.RemoteQPN)
	cw.remote_qkey = C.uint32_t(w.RemoteQKey)
	cw.remote_srqn = C.uint32_t(w.RemoteSRQN)
	if w.Opcode == verbs.WRBindMW {
		b := &w.BindMW
		win, ok := verbs.MWDriverOf(b.MW).(*mw)
		if !ok {
			return verbs.Errorf("ibv_post_send", verbs.ErrInvalidArgument, "memory window of another provider")
		}
		cw.mw = win.mw
		cw.bind_rkey = C.uint32_t(b.RKey)
		if b.BindInfo.MR != nil {
			m, ok := verbs.MRDriverOf(b.BindInfo.MR).(*mr)
			if !ok {
				return verbs.Errorf("ibv_post_send", verbs.ErrInvalidArgument, "memory region of another provider")
			}
			cw.bind_mr = m.mr
		}
		cw.bind_addr = C.uint64_t(b.BindInfo.Addr)
		cw.bind_length = C.uint64_t(b.BindInfo.Length)
		cw.bind_access = C.uint32_t(b.BindInfo.AccessFlags)
	}
	return nil
}

// postSend posts wrs, which start at index base of the caller's list.
func (q *qp) postSend(wrs []verbs.SendWR, base int) error {
	if len(wrs) == 0 {
		return nil
	}
	var wbuf [8]C.struct_rg_send_wr
	var sbuf [16]verbs.SGE
	cws := wbuf[:0]
	if len(wrs) > len(wbuf) {
		cws = make([]C.struct_rg_send_wr, 0, len(wrs))
	}
	sges := sbuf[:0]
	if n := sgeCount(wrs, func(w *verbs.SendWR) []verbs.SGE { return w.SGList }); n > len(sbuf) {
		sges = make([]verbs.SGE, 0, n)
	}
	for i := range wrs {
		w := &wrs[i]
		var cw C.struct_rg_send_wr
		if err := fillSend(&cw, w); err != nil {
			if err := q.postSend(wrs[:i], base); err != nil {
				return err
			}
			return &verbs.WRError{Index: base + i, WRID: w.WRID, Err: err}
		}
		cw.sge_off = C.uint32_t(len(sges))
		cw.num_sge = C.uint32_t(len(w.SGList))
		sges = append(sges, w.SGList...)
		cws = append(cws, cw)
	}
	if len(sges) == 0 {
		sges = sbuf[:1]
	}
	var bad C.int
	rc := C.rg_post_send(q.qp, &cws[0], C.int(len(cws)), (*C.struct_rg_sge)(unsafe.Pointer(&sges[0])), &bad)
	if rc != 0 {
		i := max(int(bad), 0)
		return &verbs.WRError{Index: base + i, WRID: wrs[i].WRID, Err: failRC("ibv_post_send", rc)}
	}
	return nil
}

func (q *qp) PostRecv(wrs []verbs.RecvWR) error { return postRecv(q.qp, nil, wrs) }

func postRecv(q *C.struct_ibv_qp, s *C.struct_ibv_srq, wrs []verbs.RecvWR) error {
	if len(wrs) == 0 {
		return nil
	}
	op := "ibv_post_recv"
	if s != nil {
		op = "ibv_post_srq_recv"
	}
	var wbuf [16]C.struct_rg_recv_wr
	var sbuf [16]verbs.SGE
	cws := wbuf[:0]
	if len(wrs) > len(wbuf) {
		cws = make([]C.struct_rg_recv_wr, 0, len(wrs))
	}
	sges := sbuf[:0]
	if n := sgeCount(wrs, func(w *verbs.RecvWR) []verbs.SGE { return w.SGList }); n > len(sbuf) {
		sges = make([]verbs.SGE, 0, n)
	}
	for i := range wrs {
		w := &wrs[i]
		cws = append(cws, C.struct_rg_recv_wr{wr_id: C.uint64_t(w.WRID), sge_off: C.uint32_t(len(sges)), num_sge: C.uint32_t(len(w.SGList))})
		sges = append(sges, w.SGList...)
	}
	if len(sges) == 0 {
		sges = sbuf[:1]
	}
	var bad C.int
	rc := C.rg_post_recv(q, s, &cws[0], C.int(len(cws)), (*C.struct_rg_sge)(unsafe.Pointer(&sges[0])), &bad)
	if rc != 0 {
		i := max(int(bad), 0)
		return &verbs.WRError{Index: i, WRID: wrs[i].WRID, Err: failRC(op, rc)}
	}
	return nil
}

func (q *qp) AttachMcast(gid verbs.GID) error {
	var g C.union_ibv_gid
	*(*[16]byte)(unsafe.Pointer(&g)) = gid
	if rc := C.ibv_attach_mcast(q.qp, &g, 0); rc != 0 {
		return failRC("ibv_attach_mcast", rc)
	}
	return nil
}

func (q *qp) DetachMcast(gid verbs.GID) error {
	var g C.union_ibv_gid
	*(*[16]byte)(unsafe.Pointer(&g)) = gid
	if rc := C.ibv_detach_mcast(q.qp, &g, 0); rc != 0 {
		return failRC("ibv_detach_mcast", rc)
	}
	return nil
}

// dropQPN forgets one handle of c on QP num (mu held).
func (s *shared) dropQPN(num uint32, c *ctx) {
	l := s.byQPN[num]
	if i := slices.Index(l, c); i >= 0 {
		l = slices.Delete(l, i, i+1)
	}
	if len(l) == 0 {
		delete(s.byQPN, num)
	} else {
		s.byQPN[num] = l
	}
}

func (q *qp) Destroy() error {
	return q.end(q.c, kindQP, q, "ibv_destroy_qp", func() C.int {
		if rc := C.ibv_destroy_qp(q.qp); rc != 0 {
			return rc
		}
		q.c.s.mu.Lock()
		q.c.s.dropQPN(q.num, q.c)
		q.c.s.mu.Unlock()
		return 0
	})
}

func (q *qp) release() { q.Destroy() }

func (s *srq) release() { s.Destroy() }
