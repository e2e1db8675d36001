package rdmacm

import (
	"context"
	"errors"
	"strconv"

	"github.com/rdmago/rdmago/verbs"
)

// This file holds the data-path helpers of librdmacm's rdma_verbs.h: memory
// registration on an ID's protection domain, single-request posts on its
// QP, and blocking completion reads on its CQs. Each is a thin layer over
// one verbs call, and anything they do not cover is done with the verbs
// objects the ID exposes (QP, PD, SendCQ, RecvCQ).
//
// C passes a buffer as an address and a length inside a registered region;
// Go passes the region and an offset and length inside it, which are
// checked against the region before anything is posted.

// RegMsgs registers buf on the ID's protection domain for sends and
// receives (rdma_reg_msgs: IBV_ACCESS_LOCAL_WRITE). Deregister it with
// DeregMR before the ID is destroyed.
func (id *ID) RegMsgs(buf []byte) (*verbs.MR, error) {
	return id.regMR("rdma_reg_msgs", buf, verbs.AccessLocalWrite)
}

// RegRead registers buf as a target the peer may RDMA READ from
// (rdma_reg_read: IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_READ).
func (id *ID) RegRead(buf []byte) (*verbs.MR, error) {
	return id.regMR("rdma_reg_read", buf, verbs.AccessLocalWrite|verbs.AccessRemoteRead)
}

// RegWrite registers buf as a target the peer may RDMA WRITE to
// (rdma_reg_write: IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE).
func (id *ID) RegWrite(buf []byte) (*verbs.MR, error) {
	return id.regMR("rdma_reg_write", buf, verbs.AccessLocalWrite|verbs.AccessRemoteWrite)
}

func (id *ID) regMR(op string, buf []byte, access verbs.AccessFlags) (*verbs.MR, error) {
	pd := id.PD()
	if pd == nil {
		return nil, verbs.Errorf(op, verbs.ErrInvalidArgument, "the ID has no protection domain yet: create its QP first (rdma_create_qp, rdma_create_ep)")
	}
	return pd.RegMR(buf, access)
}

// DeregMR deregisters a region registered with RegMsgs, RegRead or
// RegWrite (rdma_dereg_mr). It is the same as mr.Dereg and exists so that
// code ported from C reads the same.
func (id *ID) DeregMR(mr *verbs.MR) error {
	if mr == nil {
		return verbs.Errorf("rdma_dereg_mr", verbs.ErrInvalidArgument, "nil memory region")
	}
	return mr.Dereg()
}

// PostRecv posts one receive of up to length bytes into mr at offset off
// on the ID's QP (rdma_post_recv). wrID comes back in the completion
// (the C call's context argument). The span must lie inside mr, which C
// only asserts.
func (id *ID) PostRecv(wrID uint64, mr *verbs.MR, off, length int) error {
	sge, err := span("rdma_post_recv", mr, off, length)
	if err != nil {
		return err
	}
	return id.PostRecvv(wrID, []verbs.SGE{sge})
}

// PostRecvv posts one receive scattered over the elements of sgl on the
// ID's SRQ if it has one (CreateSRQ), else on its QP (rdma_post_recvv).
func (id *ID) PostRecvv(wrID uint64, sgl []verbs.SGE) error {
	if srq := id.SRQ(); srq != nil {
		return unwrapWR(srq.PostRecv([]verbs.RecvWR{{WRID: wrID, SGList: sgl}}))
	}
	qp, err := id.dataQP("rdma_post_recvv")
	if err != nil {
		return err
	}
	return unwrapWR(qp.PostRecv([]verbs.RecvWR{{WRID: wrID, SGList: sgl}}))
}

// PostSend posts one SEND of length bytes from mr at offset off on the
// ID's QP (rdma_post_send). flags are IBV_SEND_* flags: a send completes
// with a work completion only if it is SendSignaled or the QP was created
// with SQSigAll.
//
// Unlike C, mr is required with SendInline as well: Go cannot read memory
// through a bare address, so the data is named by its region (see
// verbs.SendWR).
func (id *ID) PostSend(wrID uint64, mr *verbs.MR, off, length int, flags verbs.SendFlags) error {
	sge, err := span("rdma_post_send", mr, off, length)
	if err != nil {
		return err
	}
	return id.PostSendv(wrID, []verbs.SGE{sge}, flags)
}

// PostSendv posts one SEND gathered from the elements of sgl on the ID's
// QP (rdma_post_sendv).
func (id *ID) PostSendv(wrID uint64, sgl []verbs.SGE, flags verbs.SendFlags) error {
	return id.postSend("rdma_post_sendv", verbs.SendWR{WRID: wrID, SGList: sgl, Opcode: verbs.WRSend, SendFlags: flags})
}

// PostRead posts an RDMA READ of length bytes from the peer's memory at
// remoteAddr (in the region whose remote key is rkey) into mr at offset
// off (rdma_post_read).
func (id *ID) PostRead(wrID uint64, mr *verbs.MR, off, length int, flags verbs.SendFlags, remoteAddr uint64, rkey uint32) error {
	sge, err := span("rdma_post_read", mr, off, length)
	if err != nil {
		return err
	}
	return id.PostReadv(wrID, []verbs.SGE{sge}, flags, remoteAddr, rkey)
}

// PostReadv posts an RDMA READ from the peer's memory at remoteAddr,
// scattered into the elements of sgl (rdma_post_readv).
func (id *ID) PostReadv(wrID uint64, sgl []verbs.SGE, flags verbs.SendFlags, remoteAddr uint64, rkey uint32) error {
	return id.postSend("rdma_post_readv", verbs.SendWR{WRID: wrID, SGList: sgl, Opcode: verbs.WRRDMARead,
		SendFlags: flags, RemoteAddr: remoteAddr, RKey: rkey})
}

// PostWrite posts an RDMA WRITE of length bytes from mr at offset off to
// the peer's memory at remoteAddr, in the region whose remote key is rkey
// (rdma_post_write).
func (id *ID) PostWrite(wrID uint64, mr *verbs.MR, off, length int, flags verbs.SendFlags, remoteAddr uint64, rkey uint32) error {
	sge, err := span("rdma_post_write", mr, off, length)
	if err != nil {
		return err
	}
	return id.PostWritev(wrID, []verbs.SGE{sge}, flags, remoteAddr, rkey)
}

// PostWritev posts an RDMA WRITE gathered from the elements of sgl to the
// peer's memory at remoteAddr (rdma_post_writev).
func (id *ID) PostWritev(wrID uint64, sgl []verbs.SGE, flags verbs.SendFlags, remoteAddr uint64, rkey uint32) error {
	return id.postSend("rdma_post_writev", verbs.SendWR{WRID: wrID, SGList: sgl, Opcode: verbs.WRRDMAWrite,
		SendFlags: flags, RemoteAddr: remoteAddr, RKey: rkey})
}

// PostUDSend posts one datagram SEND of length bytes from mr at offset off
// on the ID's UD QP to QP remoteQPN behind ah, with rdma_cm's Q_Key
// UDPQKey (rdma_post_ud_send). The address handle and QP number are those
// an ESTABLISHED event's UD parameters give.
func (id *ID) PostUDSend(wrID uint64, mr *verbs.MR, off, length int, flags verbs.SendFlags, ah *verbs.AH, remoteQPN uint32) error {
	sge, err := span("rdma_post_ud_send", mr, off, length)
	if err != nil {
		return err
	}
	if ah == nil {
		return verbs.Errorf("rdma_post_ud_send", verbs.ErrInvalidArgument, "nil address handle")
	}
	return id.postSend("rdma_post_ud_send", verbs.SendWR{WRID: wrID, SGList: []verbs.SGE{sge}, Opcode: verbs.WRSend,
		SendFlags: flags, AH: ah, RemoteQPN: remoteQPN, RemoteQKey: UDPQKey})
}

func (id *ID) postSend(op string, wr verbs.SendWR) error {
	qp, err := id.dataQP(op)
	if err != nil {
		return err
	}
	return unwrapWR(qp.PostSend([]verbs.SendWR{wr}))
}

// dataQP returns the ID's QP, or an error naming op if it has none.
func (id *ID) dataQP(op string) (*verbs.QP, error) {
	qp := id.QP()
	if qp == nil {
		return nil, verbs.Errorf(op, verbs.ErrInvalidArgument, "the ID has no QP (rdma_create_qp)")
	}
	return qp, nil
}

// span returns the element for length bytes at offset off of mr, or an
// error naming op if they do not lie inside it.
func span(op string, mr *verbs.MR, off, length int) (verbs.SGE, error) {
	if mr == nil {
		return verbs.SGE{}, verbs.Errorf(op, verbs.ErrInvalidArgument, "nil memory region")
	}
	if off < 0 || length < 0 || off > mr.Len() || length > mr.Len()-off || uint64(length) > 1<<32-1 {
		return verbs.SGE{}, verbs.Errorf(op, verbs.ErrInvalidArgument, "span ["+strconv.Itoa(off)+", +"+
			strconv.Itoa(length)+") is outside the "+strconv.Itoa(mr.Len())+"-byte memory region")
	}
	return mr.SGE(off, length), nil
}

// unwrapWR drops the *verbs.WRError around the error of a one-request
// post: with one request it names nothing the caller does not know.
func unwrapWR(err error) error {
	var we *verbs.WRError
	if errors.As(err, &we) && we.Err != nil {
		return we.Err
	}
	return err
}

// GetSendComp waits for the next completion on the ID's send CQ and
// returns it (rdma_get_send_comp). As in librdmacm it polls the CQ; if the
// CQ is empty it arms it (ibv_req_notify_cq), polls once more to catch a
// completion that raced the arming, then waits for the CQ's completion
// event, acknowledges it and starts over. A completion with an error
// status is returned as a completion, not an error: check wc.Status. The
// error is ctx's, or that of a failed verbs call.
//
// If the send CQ was supplied by the caller without a completion channel,
// GetSendComp waits with CQ.Wait instead.
func (id *ID) GetSendComp(ctx context.Context) (verbs.WC, error) {
	return getComp(ctx, "rdma_get_send_comp", id.SendCQ(), id.SendCompChannel())
}

// GetRecvComp waits for the next completion on the ID's receive CQ and
// returns it (rdma_get_recv_comp), as GetSendComp does for sends. The
// number of bytes received is wc.ByteLen.
func (id *ID) GetRecvComp(ctx context.Context) (verbs.WC, error) {
	return getComp(ctx, "rdma_get_recv_comp", id.RecvCQ(), id.RecvCompChannel())
}

func getComp(ctx context.Context, op string, cq *verbs.CQ, ch *verbs.CompChannel) (verbs.WC, error) {
	if cq == nil {
		return verbs.WC{}, verbs.Errorf(op, verbs.ErrInvalidArgument, "the ID has no CQ (rdma_create_qp)")
	}
	var wc [1]verbs.WC
	for {
		if n, err := cq.Poll(wc[:]); err != nil || n > 0 {
			return wc[0], err
		}
		if ch == nil {
			if err := cq.Wait(ctx); err != nil {
				return verbs.WC{}, err
			}
			continue
		}
		if err := cq.ReqNotify(false); err != nil {
			return verbs.WC{}, err
		}
		if n, err := cq.Poll(wc[:]); err != nil || n > 0 {
			return wc[0], err
		}
		got, err := ch.GetCQEvent(ctx)
		if err != nil {
			return verbs.WC{}, err
		}
		// The event may be for another CQ sharing the channel: it is
		// acknowledged to the CQ it names, and polling starts over.
		got.AckEvents(1)
	}
}
