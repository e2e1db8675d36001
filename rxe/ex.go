package rxe

import (
	"github.com/rdmago/rdmago/verbs"
	"github.com/rdmago/rdmago/verbs/swcq"
)

// The extended verbs: ibv_query_device_ex, ibv_create_cq_ex with
// completion timestamps, and the all-or-none post that ibv_wr_complete
// needs.

// supWCFlags are the completion fields the device's extended CQs
// provide: struct ibv_wc's and the two timestamps.
const supWCFlags = verbs.WCStandardFlags | verbs.WCExWithCompletionTimestamp | verbs.WCExWithCompletionTimestampWallclock

// QueryDeviceEx implements verbs.DeviceExDriver (ibv_query_device_ex).
// Completions are stamped with swcq's clock, which counts nanoseconds:
// hca_core_clock is 1 GHz and every bit of the timestamp counts. The
// device pages nothing on demand, has no device memory and none of the
// offloads of raw packet QPs.
func (c *devctx) QueryDeviceEx() (verbs.DeviceAttrEx, error) {
	a, err := c.QueryDevice()
	if err != nil {
		return verbs.DeviceAttrEx{}, err
	}
	return verbs.DeviceAttrEx{
		OrigAttr:                a,
		CompletionTimestampMask: swcq.TimestampMask,
		HCACoreClock:            swcq.ClockKHz,
		DeviceCapFlagsEx:        uint64(a.DeviceCapFlags),
		PhysPortCntEx:           uint32(a.PhysPortCnt),
	}, nil
}

// CreateCQEx implements verbs.CQExCreator (ibv_create_cq_ex): a software
// CQ, which stamps its completions only when asked for timestamps.
func (c *devctx) CreateCQEx(attr *verbs.CQInitAttrEx, notify func()) (verbs.CQExDriver, error) {
	if attr.WCFlags&^supWCFlags != 0 {
		return nil, verbs.Errorf("ibv_create_cq_ex", verbs.ErrNotSupported, "rxe provides the standard completion fields and the timestamps, not CVLAN, flow tag or tag matching")
	}
	if attr.Flags&verbs.CreateCQAttrIgnoreOverrun != 0 {
		return nil, verbs.Errorf("ibv_create_cq_ex", verbs.ErrNotSupported, "rxe CQs fail on overrun (IBV_CREATE_CQ_ATTR_IGNORE_OVERRUN)")
	}
	cq := swcq.New(attr.CQE, notify)
	if attr.WCFlags&(verbs.WCExWithCompletionTimestamp|verbs.WCExWithCompletionTimestampWallclock) != 0 {
		cq = swcq.NewStamped(attr.CQE, notify)
	}
	return c.hookCQ(cq), nil
}

// PostSendBatch implements verbs.BatchPoster: it checks every request as
// PostSend does and queues them all, or, if one is refused, none.
func (q *qp) PostSendBatch(wrs []verbs.SendWR) error {
	err := q.postSendBatch(wrs)
	q.poke()
	return err
}

func (q *qp) postSendBatch(wrs []verbs.SendWR) error {
	q.mu.Lock()
	defer q.mu.Unlock()
	if q.destroyed {
		return &verbs.WRError{Err: verbs.Errorf("ibv_post_send", verbs.ErrClosed, "QP destroyed")}
	}
	n, depth := len(q.posted), q.sqDepth
	for i := range wrs {
		w, err := q.checkSend(&wrs[i])
		if err != nil {
			clear(q.posted[n:])
			q.posted, q.sqDepth = q.posted[:n], depth
			return &verbs.WRError{Index: i, WRID: wrs[i].WRID, Err: err}
		}
		q.posted = append(q.posted, w)
		q.sqDepth++
	}
	return nil
}

var (
	_ verbs.DeviceExDriver = (*devctx)(nil)
	_ verbs.CQExCreator    = (*devctx)(nil)
	_ verbs.BatchPoster    = (*qp)(nil)
)
