package rdmacm

import (
	"fmt"

	"github.com/rdmago/rdmago/rdmacm/mad"
	"github.com/rdmago/rdmago/verbs"
)

// CreateQP creates the ID's QP (rdma_create_qp) on the ID's device and
// moves it to INIT; the connection manager moves it on to RTR and RTS when
// the connection is made (a UD QP of the UDP port space goes to RTS at
// once, with Q_Key UDPQKey). A nil pd uses a protection domain shared by
// the device's IDs. If attr names no send or receive CQ, CreateQP makes
// one, with a completion channel (SendCQ, SendCompChannel, ...), as
// librdmacm does; DestroyQP frees them. attr.Cap gets the sizes the device
// gave.
func (id *ID) CreateQP(pd *verbs.PD, attr *verbs.QPInitAttr) error {
	return id.createQPOn(pd, attr, false)
}

// createQPShared is CreateQP on the device's PD; with shared, the QP's
// send and receive queues share the CQ made for it.
func (id *ID) createQPShared(attr *verbs.QPInitAttr, shared bool) error {
	return id.createQPOn(nil, attr, shared)
}

func (id *ID) createQPOn(pd *verbs.PD, attr *verbs.QPInitAttr, shareCQ bool) error {
	const op = "rdma_create_qp"
	devCtx, devPD, b := id.device()
	idMu.Lock()
	has, srq := id.qp != nil, id.srq
	idMu.Unlock()
	if devCtx == nil {
		return verbs.Errorf(op, verbs.ErrInvalidArgument, "the ID is not bound to a device (resolve the address first)")
	}
	if has {
		return verbs.Errorf(op, verbs.ErrExist, "the ID already has a QP")
	}
	if attr != nil && attr.SRQ == nil && srq != nil {
		a := *attr
		a.SRQ = srq // the ID's own, as rdma_create_qp takes id->srq
		err := id.createQP(op, devCtx, devPD, pd, &a, b, shareCQ)
		attr.Cap = a.Cap
		return err
	}
	return id.createQP(op, devCtx, devPD, pd, attr, b, shareCQ)
}

// device returns the context and PD of the ID's device, and the backend
// whose AttachQP brings its QPs to INIT: nil if the ID is not bound to a
// device yet.
func (id *ID) device() (*verbs.Context, *verbs.PD, BackendID) {
	idMu.Lock()
	defer idMu.Unlock()
	if id.b == nil || id.kdev == nil {
		return nil, nil, nil
	}
	return id.kdev.ctx, id.kdev.pd, id.b
}

// CreateSRQ makes a shared receive queue on the ID's device, with pd or,
// if nil, the device's PD (rdma_create_srq). The QP CreateQP then makes
// for the ID takes its receives from it unless its attributes name
// another, and PostRecv on the ID posts to it. The ID keeps the SRQ
// until DestroySRQ or Destroy.
func (id *ID) CreateSRQ(pd *verbs.PD, attr *verbs.SRQInitAttr) error {
	const op = "rdma_create_srq"
	devCtx, devPD, _ := id.device()
	if devCtx == nil {
		return verbs.Errorf(op, verbs.ErrInvalidArgument, "the ID is not bound to a device (resolve the address first)")
	}
	if pd == nil {
		pd = devPD
	} else if pd.Context() != devCtx && pd.Context().Device() != devCtx.Device() {
		return verbs.Errorf(op, verbs.ErrInvalidArgument, "the PD is on another device")
	}
	if attr == nil {
		return verbs.Errorf(op, verbs.ErrInvalidArgument, "no SRQ attributes")
	}
	srq, err := pd.CreateSRQ(attr)
	if err != nil {
		return err
	}
	idMu.Lock()
	defer idMu.Unlock()
	if id.srq != nil || id.state == stateDestroying {
		srq.Destroy()
		return verbs.Errorf(op, verbs.ErrExist, "the ID already has an SRQ or was destroyed")
	}
	id.srq = srq
	return nil
}

// SRQ returns the SRQ CreateSRQ made (id->srq), or nil.
func (id *ID) SRQ() *verbs.SRQ {
	idMu.Lock()
	defer idMu.Unlock()
	return id.srq
}

// DestroySRQ destroys the ID's SRQ (rdma_destroy_srq); the ID's QP, which
// uses it, must be destroyed first. Without an SRQ it does nothing.
func (id *ID) DestroySRQ() error {
	idMu.Lock()
	srq := id.srq
	id.srq = nil
	idMu.Unlock()
	if srq == nil {
		return nil
	}
	if err := srq.Destroy(); err != nil {
		idMu.Lock()
		if id.srq == nil {
			id.srq = srq
		}
		idMu.Unlock()
		return err
	}
	return nil
}

// createQP makes the ID's QP on devCtx, with pd or the device's devPD, and
// moves it on with b's AttachQP. With shareCQ, a QP given no CQs gets one for
// both queues.
func (id *ID) createQP(op string, devCtx *verbs.Context, devPD, pd *verbs.PD, attr *verbs.QPInitAttr, b BackendID, shareCQ bool) error {
	if attr == nil {
		return verbs.Errorf(op, verbs.ErrInvalidArgument, "no QP attributes")
	}
	init := *attr
	if init.QPType == 0 {
		init.QPType = id.defaultQPType()
	}
	switch {
	case id.ps == PSTCP && init.QPType != verbs.QPTRC && init.QPType != verbs.QPTUC,
		id.ps == PSUDP && init.QPType != verbs.QPTUD:
		return verbs.Errorf(op, verbs.ErrInvalidArgument, fmt.Sprintf("%v QP in %v", init.QPType, id.ps))
	}
	if pd == nil {
		pd = devPD // the device's PD, shared by its IDs
	} else if pd.Context() != devCtx && pd.Context().Device() != devCtx.Device() {
		return verbs.Errorf(op, verbs.ErrInvalidArgument, "the PD is on another device")
	}
	ctx := pd.Context()
	var sendCh, recvCh *verbs.CompChannel
	var made [2]*verbs.CQ
	madeCQs := made[:0]
	fail := func(err error) error {
		for _, cq := range madeCQs {
			cq.Destroy()
		}
		if sendCh != nil {
			sendCh.Close()
		}
		if recvCh != nil {
			recvCh.Close()
		}
		return err
	}
	if init.SendCQ == nil {
		ch, err := ctx.CreateCompChannel()
		if err != nil {
			return fail(err)
		}
		sendCh = ch
		n := int(max(init.Cap.MaxSendWR, 1))
		if shareCQ && init.RecvCQ == nil {
			n += recvDepth(&init)
		}
		cq, err := ctx.CreateCQ(n, ch, 0)
		if err != nil {
			return fail(err)
		}
		madeCQs = append(madeCQs, cq)
		init.SendCQ = cq
		if shareCQ && init.RecvCQ == nil {
			init.RecvCQ = cq // freeQP destroys it once, with sendCh
		}
	}
	if init.RecvCQ == nil {
		ch, err := ctx.CreateCompChannel()
		if err != nil {
			return fail(err)
		}
		recvCh = ch
		cq, err := ctx.CreateCQ(recvDepth(&init), ch, 0)
		if err != nil {
			return fail(err)
		}
		madeCQs = append(madeCQs, cq)
		init.RecvCQ = cq
	}
	qp, err := pd.CreateQP(&init)
	if err != nil {
		return fail(err)
	}
	if err := b.AttachQP(qp); err != nil {
		qp.Destroy()
		return fail(err)
	}
	idMu.Lock()
	defer idMu.Unlock()
	if id.qp != nil || id.state == stateDestroying {
		qp.Destroy()
		return fail(verbs.Errorf(op, verbs.ErrExist, "the ID already has a QP or was destroyed"))
	}
	id.qp, id.pd = qp, pd
	id.sendCQ, id.recvCQ = init.SendCQ, init.RecvCQ
	id.sendCh, id.recvCh = sendCh, recvCh
	id.ownCQs = len(madeCQs) > 0
	id.qpType = init.QPType
	attr.Cap = init.Cap
	return nil
}

// recvDepth is how many receive completions the QP may have queued at
// once: its receive queue's, or its SRQ's.
func recvDepth(init *verbs.QPInitAttr) int {
	n := int(max(init.Cap.MaxRecvWR, 1))
	if init.SRQ != nil {
		if a, err := init.SRQ.Query(); err == nil {
			n = max(n, int(a.MaxWR))
		}
	}
	return n
}

func (id *ID) defaultQPType() verbs.QPType {
	if id.ps == PSUDP {
		return verbs.QPTUD
	}
	return verbs.QPTRC
}

// DestroyQP destroys the ID's QP (rdma_destroy_qp), and the CQs and
// completion channels CreateQP made for it.
func (id *ID) DestroyQP() error {
	id.freeQP()
	return nil
}

// freeQP destroys what CreateQP made.
func (id *ID) freeQP() {
	idMu.Lock()
	qp, sendCQ, recvCQ, sendCh, recvCh, own := id.qp, id.sendCQ, id.recvCQ, id.sendCh, id.recvCh, id.ownCQs
	id.qp, id.sendCQ, id.recvCQ, id.sendCh, id.recvCh, id.ownCQs, id.pd = nil, nil, nil, nil, nil, false, nil
	k := id.b
	idMu.Unlock()
	if qp != nil && k != nil {
		k.DetachQP()
	}
	if qp != nil {
		qp.Destroy()
	}
	if own {
		if sendCh != nil {
			sendCQ.Destroy()
			sendCh.Close()
		}
		if recvCh != nil {
			recvCQ.Destroy()
			recvCh.Close()
		}
	}
}

// InitQPAttr returns the attributes and mask that move a QP the user made
// for this ID to state s (rdma_init_qp_attr): INIT any time, RTR and RTS
// once the peer's answer is known (after CONNECT_REQUEST on the passive
// side, CONNECT_RESPONSE on the active side).
func (id *ID) InitQPAttr(s verbs.QPState) (verbs.QPAttr, verbs.QPAttrMask, error) {
	k := id.backend()
	if k == nil {
		return verbs.QPAttr{}, 0, verbs.Errorf("rdma_init_qp_attr", verbs.ErrInvalidArgument, "the ID is not bound to a device")
	}
	return k.InitQPAttr(s)
}

func errf(format string, args ...any) error { return fmt.Errorf(format, args...) }

func rejectReasonString(status int) string {
	return mad.RejectReason(status).String()
}
