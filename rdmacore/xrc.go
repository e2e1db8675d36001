//go:build rdmacore && linux && cgo

package rdmacore

/*
#include "shim.h"
*/
import "C"

import "github.com/rdmago/rdmago/verbs"

// XRC through libibverbs: domains, XRC SRQs and both kinds of XRC QPs map
// one to one onto ibv_open_xrcd, ibv_create_srq_ex, ibv_create_qp_ex and
// ibv_open_qp, and the device does the protocol. A domain opened through
// a file is shared, through the kernel, with other processes that open
// the same file.

// xrcd is an open XRC domain.
type xrcd struct {
	life
	c *ctx
	x *C.struct_ibv_xrcd
}

// OpenXRCD implements verbs.XRCDriver (ibv_open_xrcd).
func (c *ctx) OpenXRCD(attr *verbs.XRCDInitAttr) (verbs.XRCDDriver, error) {
	var a C.struct_ibv_xrcd_init_attr
	a.comp_mask = C.uint32_t(attr.CompMask)
	a.fd = C.int(attr.FD)
	a.oflags = C.int(attr.OFlags)
	x, err := C.ibv_open_xrcd(c.s.c, &a)
	if x == nil {
		return nil, fail("ibv_open_xrcd", err)
	}
	r := &xrcd{c: c, x: x}
	c.track(kindXRCD, r, true)
	return r, nil
}

// Close implements verbs.XRCDDriver (ibv_close_xrcd).
func (x *xrcd) Close() error {
	return x.end(x.c, kindXRCD, x, "ibv_close_xrcd", func() C.int { return C.ibv_close_xrcd(x.x) })
}

func (x *xrcd) release() { x.Close() }

// CreateSRQ implements verbs.XRCDDriver (ibv_create_srq_ex with
// IBV_SRQT_XRC).
func (x *xrcd) CreateSRQ(attr *verbs.SRQInitAttrEx) (verbs.XRCSRQDriver, error) {
	p, ok1 := verbs.PDDriverOf(attr.PD).(*pd)
	q, ok2 := verbs.CQDriverOf(attr.CQ).(*cq)
	if !ok1 || !ok2 {
		return nil, verbs.Errorf("ibv_create_srq_ex", verbs.ErrInvalidArgument, "PD or CQ of another provider")
	}
	var a C.struct_ibv_srq_init_attr_ex
	a.attr.max_wr = C.uint32_t(attr.Attr.MaxWR)
	a.attr.max_sge = C.uint32_t(max(attr.Attr.MaxSGE, 1))
	a.attr.srq_limit = C.uint32_t(attr.Attr.SRQLimit)
	a.comp_mask = C.IBV_SRQ_INIT_ATTR_TYPE | C.IBV_SRQ_INIT_ATTR_PD | C.IBV_SRQ_INIT_ATTR_XRCD | C.IBV_SRQ_INIT_ATTR_CQ
	a.srq_type = C.IBV_SRQT_XRC
	a.pd, a.xrcd, a.cq = p.pd, x.x, q.cq
	s, err := C.ibv_create_srq_ex(x.c.s.c, &a)
	if s == nil {
		return nil, fail("ibv_create_srq_ex", err)
	}
	var n C.uint32_t
	if rc := C.ibv_get_srq_num(s, &n); rc != 0 {
		C.ibv_destroy_srq(s)
		return nil, failRC("ibv_get_srq_num", rc)
	}
	attr.Attr.MaxWR, attr.Attr.MaxSGE = uint32(a.attr.max_wr), uint32(a.attr.max_sge)
	r := &srq{c: x.c, srq: s}
	x.c.s.mu.Lock()
	x.c.s.bySRQ[s] = r
	x.c.s.mu.Unlock()
	x.c.track(kindSRQ, r, true)
	return r, nil
}

// Num implements verbs.XRCSRQDriver (ibv_get_srq_num); CreateSRQ checked
// that the SRQ has one.
func (s *srq) Num() uint32 {
	var n C.uint32_t
	C.ibv_get_srq_num(s.srq, &n)
	return uint32(n)
}

// CreateQP implements verbs.XRCDDriver (ibv_create_qp_ex of an
// IBV_QPT_XRC_RECV QP).
func (x *xrcd) CreateQP(attr *verbs.QPInitAttr) (verbs.QPDriver, error) {
	var a C.struct_ibv_qp_init_attr_ex
	a.qp_type = C.IBV_QPT_XRC_RECV
	a.comp_mask = C.IBV_QP_INIT_ATTR_XRCD
	a.xrcd = x.x
	q, err := C.ibv_create_qp_ex(x.c.s.c, &a)
	if q == nil {
		return nil, fail("ibv_create_qp_ex", err)
	}
	return x.c.addQP(q, verbs.QPTXRCRecv), nil
}

// OpenQP implements verbs.XRCDDriver (ibv_open_qp).
func (x *xrcd) OpenQP(num uint32) (verbs.QPDriver, error) {
	var a C.struct_ibv_qp_open_attr
	a.comp_mask = C.IBV_QP_OPEN_ATTR_NUM | C.IBV_QP_OPEN_ATTR_XRCD | C.IBV_QP_OPEN_ATTR_TYPE
	a.qp_num = C.uint32_t(num)
	a.xrcd = x.x
	a.qp_type = C.IBV_QPT_XRC_RECV
	q, err := C.ibv_open_qp(x.c.s.c, &a)
	if q == nil {
		return nil, fail("ibv_open_qp", err)
	}
	return x.c.addQP(q, verbs.QPTXRCRecv), nil
}

// createXRCSendQP makes an XRC_SEND QP (ibv_create_qp_ex with
// IBV_QP_INIT_ATTR_PD): a send queue and its CQ only.
func (p *pd) createXRCSendQP(attr *verbs.QPInitAttr) (verbs.QPDriver, error) {
	scq, ok := verbs.CQDriverOf(attr.SendCQ).(*cq)
	if !ok {
		return nil, verbs.Errorf("ibv_create_qp_ex", verbs.ErrInvalidArgument, "CQ of another provider")
	}
	var a C.struct_ibv_qp_init_attr_ex
	a.qp_type = C.IBV_QPT_XRC_SEND
	a.comp_mask = C.IBV_QP_INIT_ATTR_PD
	a.pd = p.pd
	a.send_cq = scq.cq
	a.cap.max_send_wr = C.uint32_t(attr.Cap.MaxSendWR)
	a.cap.max_send_sge = C.uint32_t(attr.Cap.MaxSendSGE)
	a.cap.max_inline_data = C.uint32_t(attr.Cap.MaxInlineData)
	if attr.SQSigAll {
		a.sq_sig_all = 1
	}
	q, err := C.ibv_create_qp_ex(p.c.s.c, &a)
	if q == nil {
		return nil, fail("ibv_create_qp_ex", err)
	}
	attr.Cap = verbs.QPCap{
		MaxSendWR:     uint32(a.cap.max_send_wr),
		MaxSendSGE:    uint32(a.cap.max_send_sge),
		MaxInlineData: uint32(a.cap.max_inline_data),
	}
	return p.c.addQP(q, verbs.QPTXRCSend), nil
}

// addQP wraps a QP libibverbs made and enters it in the context's books.
func (c *ctx) addQP(q *C.struct_ibv_qp, typ verbs.QPType) *qp {
	r := &qp{c: c, qp: q, typ: typ, num: uint32(q.qp_num)}
	c.s.mu.Lock()
	c.s.byQPN[r.num] = append(c.s.byQPN[r.num], c)
	c.s.mu.Unlock()
	c.track(kindQP, r, true)
	return r
}

var (
	_ verbs.XRCDriver    = (*ctx)(nil)
	_ verbs.XRCDDriver   = (*xrcd)(nil)
	_ verbs.XRCSRQDriver = (*srq)(nil)
)
