package verbs

import (
	"sync"

	"github.com/rdmago/rdmago/internal/racesync"
)

// QP is a queue pair (struct ibv_qp).
type QP struct {
	pd     *PD
	drv    QPDriver
	num    uint32
	typ    QPType
	sendCQ *CQ
	recvCQ *CQ

	mu        sync.Mutex
	destroyed bool
}

// CreateQP creates a queue pair (ibv_create_qp). On return attr.Cap holds
// the sizes the device gave, which may exceed those asked for.
func (pd *PD) CreateQP(attr *QPInitAttr) (*QP, error) {
	if attr.SendCQ == nil || attr.RecvCQ == nil {
		return nil, Errorf("ibv_create_qp", ErrInvalidArgument, "send_cq and recv_cq are required")
	}
	if attr.SendCQ.ctx != pd.ctx || attr.RecvCQ.ctx != pd.ctx {
		return nil, Errorf("ibv_create_qp", ErrInvalidArgument, "CQ belongs to another device context")
	}
	switch attr.QPType {
	case QPTRC, QPTUC, QPTUD:
	default:
		return nil, Errorf("ibv_create_qp", ErrNotSupported, "QP type "+attr.QPType.String())
	}
	if err := pd.acquire("ibv_create_qp"); err != nil {
		return nil, err
	}
	drv, err := pd.drv.CreateQP(attr)
	if err != nil {
		pd.release()
		return nil, err
	}
	qp := &QP{pd: pd, drv: drv, num: drv.Num(), typ: attr.QPType, sendCQ: attr.SendCQ, recvCQ: attr.RecvCQ}
	qp.sendCQ.use()
	qp.recvCQ.use()
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

// PD returns the QP's protection domain.
func (qp *QP) PD() *PD { return qp.pd }

// SendCQ returns the CQ send completions go to.
func (qp *QP) SendCQ() *CQ { return qp.sendCQ }

// RecvCQ returns the CQ receive completions go to.
func (qp *QP) RecvCQ() *CQ { return qp.recvCQ }

// Driver returns the provider's side of the QP, for providers.
func (qp *QP) Driver() QPDriver { return qp.drv }

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
	return qp.drv.Query()
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
// and those from it on were not.
func (qp *QP) PostSend(wrs []SendWR) error {
	if err := qp.live("ibv_post_send"); err != nil {
		return &WRError{Err: err}
	}
	racesync.Sync()
	return qp.drv.PostSend(wrs)
}

// PostRecv posts receive work requests in order (ibv_post_recv), with the
// same error convention as PostSend.
func (qp *QP) PostRecv(wrs []RecvWR) error {
	if err := qp.live("ibv_post_recv"); err != nil {
		return &WRError{Err: err}
	}
	racesync.Sync()
	return qp.drv.PostRecv(wrs)
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
// dropped without completions, as in libibverbs.
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
	c := qp.pd.ctx
	c.mu.Lock()
	delete(c.qps, qp.num)
	c.mu.Unlock()
	qp.sendCQ.release()
	qp.recvCQ.release()
	qp.pd.release()
	return nil
}
