package verbs

import (
	"sync"

	"github.com/rdmago/rdmago/internal/racesync"
)

// QP is a queue pair (struct ibv_qp).
type QP struct {
	ctx    *Context
	pd     *PD   // nil for XRC_RECV
	xrcd   *XRCD // XRC_RECV: the domain the handle was made or opened in
	drv    QPDriver
	num    uint32
	typ    QPType
	sendCQ *CQ
	recvCQ *CQ
	srq    *SRQ
	// userCtx is QPInitAttr.QPContext.
	userCtx any
	// ex is the work request builder of a QP made by CreateQPEx with
	// send_ops_flags.
	ex *QPEx

	mu        sync.Mutex
	destroyed bool
}

// CreateQP creates a queue pair (ibv_create_qp). On return attr.Cap holds
// the sizes the device gave, which may exceed those asked for.
//
// An XRC_SEND QP (ibv_create_qp_ex with IBV_QP_INIT_ATTR_PD) is made here
// too: it has a send queue only, so it takes SendCQ and ignores RecvCQ and
// SRQ, as the kernel does. Its peer is an XRC_RECV QP, which belongs to an
// XRC domain rather than a PD: XRCD.CreateQP makes it.
func (pd *PD) CreateQP(attr *QPInitAttr) (*QP, error) {
	const op = "ibv_create_qp"
	if attr == nil {
		return nil, Errorf(op, ErrInvalidArgument, "no attributes")
	}
	xrc := attr.QPType == QPTXRCSend
	recvCQ, srq := attr.RecvCQ, attr.SRQ
	if xrc {
		recvCQ, srq = nil, nil
	}
	if attr.SendCQ == nil || recvCQ == nil && !xrc {
		return nil, Errorf(op, ErrInvalidArgument, "send_cq and recv_cq are required")
	}
	if attr.SendCQ.ctx != pd.ctx || recvCQ != nil && recvCQ.ctx != pd.ctx {
		return nil, Errorf(op, ErrInvalidArgument, "CQ belongs to another device context")
	}
	switch attr.QPType {
	case QPTRC, QPTUC, QPTUD:
	case QPTRawPacket:
		// Ethernet frames as they are (IBV_QPT_RAW_PACKET): for a
		// provider whose device has it (a NIC through rdmacore, which
		// the kernel lets a process with CAP_NET_RAW use). The software
		// device refuses it, as Linux's rxe does.
	case QPTGSI:
		// QP1 of the device, for a connection manager: one per device.
	case QPTXRCSend:
		if _, ok := pd.ctx.drv.(XRCDriver); !ok {
			return nil, Errorf(op, ErrNotSupported, pd.ctx.dev.name+" does not do XRC")
		}
	case QPTXRCRecv:
		return nil, Errorf(op, ErrInvalidArgument, "an XRC_RECV QP belongs to an XRC domain, not a PD: use XRCD.CreateQP")
	default:
		return nil, Errorf(op, ErrNotSupported, "QP type "+attr.QPType.String())
	}
	if srq != nil && srq.pd.ctx != pd.ctx {
		return nil, Errorf(op, ErrInvalidArgument, "SRQ belongs to another device context")
	}
	if err := pd.acquire(op); err != nil {
		return nil, err
	}
	if srq != nil {
		if err := srq.attach(); err != nil {
			pd.release()
			return nil, err
		}
	}
	a := attr
	if xrc && (attr.RecvCQ != nil || attr.SRQ != nil) {
		// The provider sees what the QP has: no receive side.
		c := *attr
		c.RecvCQ, c.SRQ = nil, nil
		a = &c
	}
	drv, err := pd.drv.CreateQP(a)
	if err != nil {
		if srq != nil {
			srq.detach()
		}
		pd.release()
		return nil, err
	}
	attr.Cap = a.Cap
	qp := &QP{ctx: pd.ctx, pd: pd, drv: drv, num: drv.Num(), typ: attr.QPType, sendCQ: attr.SendCQ, recvCQ: recvCQ, srq: srq, userCtx: attr.QPContext}
	qp.sendCQ.use()
	if qp.recvCQ != nil {
		qp.recvCQ.use()
	}
	c := pd.ctx
	c.mu.Lock()
	c.qps[qp.num] = qp
	c.mu.Unlock()
	return qp, nil
}

// Num returns the QP number (ibv_qp.qp_num).
func (qp *QP) Num() uint32 { return qp.num }

// Type returns the QP's transport service (ibv_qp.qp_type).
func (qp *QP) Type() QPType { return qp.typ }

// PD returns the QP's protection domain, or nil for an XRC_RECV QP.
func (qp *QP) PD() *PD { return qp.pd }

// Context returns the context the QP was created or opened on
// (qp->context).
func (qp *QP) Context() *Context { return qp.ctx }

// XRCD returns the XRC domain an XRC_RECV QP handle was made or opened
// in, or nil.
func (qp *QP) XRCD() *XRCD { return qp.xrcd }

// SendCQ returns the CQ send completions go to (nil for XRC_RECV).
func (qp *QP) SendCQ() *CQ { return qp.sendCQ }

// RecvCQ returns the CQ receive completions go to (nil for XRC QPs: an
// XRC SRQ's receives complete to the SRQ's CQ).
func (qp *QP) RecvCQ() *CQ { return qp.recvCQ }

// SRQ returns the shared receive queue the QP receives from, or nil.
func (qp *QP) SRQ() *SRQ { return qp.srq }

// QPContext returns the QPContext of the QP's init attributes
// (qp->qp_context).
func (qp *QP) QPContext() any { return qp.userCtx }

// Modify changes the attributes mask names (ibv_modify_qp), moving the QP
// through its states RESET → INIT → RTR → RTS, and to SQD, SQE, ERR or
// back to RESET. Each transition requires and allows the attributes of
// IBTA vol. 1 §10.3.1 (see CheckModify); the error names any that are
// missing or not allowed.
func (qp *QP) Modify(attr *QPAttr, mask QPAttrMask) error {
	if err := qp.live("ibv_modify_qp"); err != nil {
		return err
	}
	return qp.drv.Modify(attr, mask)
}

// Query returns the QP's attributes and creation attributes (ibv_query_qp).
func (qp *QP) Query() (QPAttr, QPInitAttr, error) {
	if err := qp.live("ibv_query_qp"); err != nil {
		return QPAttr{}, QPInitAttr{}, err
	}
	a, init, err := qp.drv.Query()
	init.SRQ, init.QPContext = qp.srq, qp.userCtx
	return a, init, err
}

// State returns the QP's current state.
func (qp *QP) State() QPState {
	a, _, err := qp.drv.Query()
	if err != nil {
		return QPSUnknown
	}
	return a.QPState
}

// PostSend posts send work requests in order (ibv_post_send). If one is
// invalid, the error is a *WRError naming it; those before it were posted
// and those from it on were not. On an XRC_SEND QP each request names the
// remote XRC SRQ it is for in RemoteSRQN; an XRC_RECV QP has no send
// queue.
func (qp *QP) PostSend(wrs []SendWR) error {
	return qp.postSend("ibv_post_send", wrs, false)
}

// postSend is PostSend for the call op; with all, it posts through the
// provider's BatchPoster if it has one, so that all of wrs are posted or
// none.
func (qp *QP) postSend(op string, wrs []SendWR, all bool) error {
	if err := qp.live(op); err != nil {
		return &WRError{Err: err}
	}
	if qp.typ == QPTXRCRecv && len(wrs) > 0 {
		return &WRError{WRID: wrs[0].WRID, Err: Errorf(op, ErrInvalidArgument, "an XRC_RECV QP has no send queue")}
	}
	for i := range wrs {
		if w := &wrs[i]; w.Opcode == WRBindMW && w.BindMW.MW != nil && w.BindMW.MW.gone() {
			return &WRError{Index: i, WRID: w.WRID, Err: Errorf(op, ErrClosed, "BIND_MW of a deallocated memory window")}
		}
	}
	racesync.Sync()
	var err error
	posted := wrs
	if b, ok := qp.drv.(BatchPoster); all && ok {
		if err = b.PostSendBatch(wrs); err != nil {
			posted = nil
		}
	} else if err = qp.drv.PostSend(wrs); err != nil {
		if we, ok := err.(*WRError); ok {
			posted = wrs[:we.Index]
		}
	}
	for i := range posted {
		if w := &posted[i]; w.Opcode == WRBindMW && w.BindMW.MW != nil {
			w.BindMW.MW.setRKey(w.BindMW.RKey)
		}
	}
	return err
}

// PostRecv posts receive work requests in order (ibv_post_recv), with the
// same error convention as PostSend. A QP created with an SRQ takes none:
// post to the SRQ. Neither do XRC QPs: post to the XRC SRQs.
func (qp *QP) PostRecv(wrs []RecvWR) error {
	if err := qp.live("ibv_post_recv"); err != nil {
		return &WRError{Err: err}
	}
	if (qp.typ == QPTXRCSend || qp.typ == QPTXRCRecv) && len(wrs) > 0 {
		return &WRError{WRID: wrs[0].WRID, Err: Errorf("ibv_post_recv", ErrInvalidArgument, "an "+qp.typ.String()+" QP has no receive queue: post to an XRC SRQ")}
	}
	racesync.Sync()
	return qp.drv.PostRecv(wrs)
}

// AttachMcast adds the UD QP to the multicast group gid (ibv_attach_mcast):
// it receives what is sent to the group. On RoCEv2 the group is an IP
// multicast address (IPv4 as ::ffff:224.0.0.0/100 and up); lid is unused
// and must be 0.
func (qp *QP) AttachMcast(gid GID, lid uint16) error {
	if err := qp.mcastCheck("ibv_attach_mcast", gid, lid); err != nil {
		return err
	}
	return qp.drv.AttachMcast(gid)
}

// DetachMcast takes the QP out of a multicast group (ibv_detach_mcast).
func (qp *QP) DetachMcast(gid GID, lid uint16) error {
	if err := qp.mcastCheck("ibv_detach_mcast", gid, lid); err != nil {
		return err
	}
	return qp.drv.DetachMcast(gid)
}

func (qp *QP) mcastCheck(op string, gid GID, lid uint16) error {
	if err := qp.live(op); err != nil {
		return err
	}
	switch {
	case qp.typ != QPTUD:
		return Errorf(op, ErrInvalidArgument, "multicast needs a UD QP, this is "+qp.typ.String())
	case !gid.Addr().IsMulticast():
		return Errorf(op, ErrInvalidArgument, gid.String()+" is not a multicast GID")
	case lid != 0:
		return Errorf(op, ErrInvalidArgument, "RoCE multicast takes no LID")
	}
	return nil
}

func (qp *QP) live(op string) error {
	qp.mu.Lock()
	defer qp.mu.Unlock()
	if qp.destroyed {
		return Errorf(op, ErrClosed, "QP destroyed")
	}
	return nil
}

// Destroy destroys the QP (ibv_destroy_qp). Outstanding work requests are
// dropped without completions, as in libibverbs. For an XRC_RECV QP it
// destroys this handle; the QP itself goes with its last handle.
func (qp *QP) Destroy() error {
	qp.mu.Lock()
	defer qp.mu.Unlock()
	if qp.destroyed {
		return nil
	}
	if err := qp.drv.Destroy(); err != nil {
		return err
	}
	qp.destroyed = true
	if qp.ex != nil {
		qp.ex.release()
	}
	if qp.xrcd != nil {
		qp.xrcd.dropRecvQP(qp)
		return nil
	}
	c := qp.ctx
	c.mu.Lock()
	if c.qps[qp.num] == qp {
		delete(c.qps, qp.num)
	}
	c.mu.Unlock()
	qp.sendCQ.release()
	if qp.recvCQ != nil {
		qp.recvCQ.release()
	}
	if qp.srq != nil {
		qp.srq.detach()
	}
	qp.pd.release()
	return nil
}
