package verbs_test

import (
	"context"
	"fmt"
	"net/netip"
	"time"

	"github.com/rdmago/rdmago/rxe"
	"github.com/rdmago/rdmago/rxe/link"
	"github.com/rdmago/rdmago/verbs"
)

// xrcMust panics on an error, to keep the example short.
func xrcMust[T any](v T, err error) T {
	if err != nil {
		panic(err)
	}
	return v
}

// xrcPoll waits for one completion on cq.
func xrcPoll(cq *verbs.CQ) verbs.WC {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	wc := make([]verbs.WC, 1)
	for {
		if n := xrcMust(cq.Poll(wc)); n == 1 { // ibv_poll_cq
			return wc[0]
		}
		if err := cq.Wait(ctx); err != nil {
			panic(err)
		}
	}
}

// One XRC_SEND QP reaches two receive queues through one XRC_RECV QP: the
// receiver's XRC domain has an XRC SRQ per consumer, each with its own
// CQ, and each send names the SRQ it is for, as the example program
// ibv_xsrq_pingpong does.
func ExampleContext_OpenXRCD() {
	network := link.NewNetwork(1)
	open := func(addr string) *verbs.Context {
		l := xrcMust(network.Attach(netip.MustParseAddr(addr)))
		dev := xrcMust(rxe.NewDevice(rxe.Config{Name: "xrc_" + addr, Links: []link.Link{l}}))
		return xrcMust(dev.Open()) // ibv_open_device
	}
	sctx, rctx := open("192.0.2.31"), open("192.0.2.32")
	defer sctx.Close()
	defer rctx.Close()

	// The receiver: a domain, two XRC SRQs with a CQ each, one XRC_RECV QP.
	xrcd := xrcMust(rctx.OpenXRCD(nil)) // ibv_open_xrcd
	rpd := xrcMust(rctx.AllocPD())
	rmr := xrcMust(rpd.RegMR(make([]byte, 4096), verbs.AccessLocalWrite))
	var srqs [2]*verbs.SRQ
	var cqs [2]*verbs.CQ
	for i := range srqs {
		cqs[i] = xrcMust(rctx.CreateCQ(16, nil, 0))
		srqs[i] = xrcMust(rctx.CreateSRQEx(&verbs.SRQInitAttrEx{ // ibv_create_srq_ex
			Attr:     verbs.SRQAttr{MaxWR: 16, MaxSGE: 1},
			CompMask: verbs.SRQInitAttrType | verbs.SRQInitAttrPD | verbs.SRQInitAttrXRCD | verbs.SRQInitAttrCQ,
			SRQType:  verbs.SRQTXRC, PD: rpd, XRCD: xrcd, CQ: cqs[i],
		}))
		err := srqs[i].PostRecv([]verbs.RecvWR{{WRID: uint64(i), SGList: []verbs.SGE{rmr.SGE(64*i, 64)}}}) // ibv_post_srq_recv
		if err != nil {
			panic(err)
		}
	}
	recv := xrcMust(xrcd.CreateQP(&verbs.QPInitAttr{QPType: verbs.QPTXRCRecv})) // ibv_create_qp_ex

	// The sender: an XRC_SEND QP, with a send CQ only.
	spd := xrcMust(sctx.AllocPD())
	smr := xrcMust(spd.RegMR(make([]byte, 4096), verbs.AccessLocalWrite))
	scq := xrcMust(sctx.CreateCQ(16, nil, 0))
	send := xrcMust(spd.CreateQP(&verbs.QPInitAttr{QPType: verbs.QPTXRCSend, SendCQ: scq,
		Cap: verbs.QPCap{MaxSendWR: 16, MaxSendSGE: 1}}))

	// Connect them as RC QPs, each with its side's attributes.
	sgid, rgid := xrcMust(sctx.QueryGID(1, 0)), xrcMust(rctx.QueryGID(1, 0))
	av := func(g verbs.GID) verbs.AHAttr {
		return verbs.AHAttr{IsGlobal: true, PortNum: 1, GRH: verbs.GlobalRoute{DGID: g, HopLimit: 64}}
	}
	const initMask = verbs.QPAttrState | verbs.QPAttrPKeyIndex | verbs.QPAttrPort | verbs.QPAttrAccessFlags
	const rtrMask = verbs.QPAttrState | verbs.QPAttrAV | verbs.QPAttrPathMTU | verbs.QPAttrDestQPN | verbs.QPAttrRQPSN
	for _, step := range []struct {
		qp   *verbs.QP
		attr verbs.QPAttr
		mask verbs.QPAttrMask
	}{
		{send, verbs.QPAttr{QPState: verbs.QPSInit, PortNum: 1}, initMask},
		{send, verbs.QPAttr{QPState: verbs.QPSRTR, PathMTU: verbs.MTU1024, DestQPNum: recv.Num(), AHAttr: av(rgid)}, rtrMask},
		{send, verbs.QPAttr{QPState: verbs.QPSRTS, Timeout: 14, RetryCnt: 7, RNRRetry: 7, MaxRdAtomic: 1},
			verbs.QPAttrState | verbs.QPAttrSQPSN | verbs.QPAttrTimeout | verbs.QPAttrRetryCnt | verbs.QPAttrRNRRetry | verbs.QPAttrMaxQPRdAtomic},
		{recv, verbs.QPAttr{QPState: verbs.QPSInit, PortNum: 1}, initMask},
		{recv, verbs.QPAttr{QPState: verbs.QPSRTR, PathMTU: verbs.MTU1024, DestQPNum: send.Num(), MinRNRTimer: 12, MaxDestRdAtomic: 1, AHAttr: av(sgid)},
			rtrMask | verbs.QPAttrMaxDestRdAtomic | verbs.QPAttrMinRNRTimer},
		{recv, verbs.QPAttr{QPState: verbs.QPSRTS, Timeout: 14}, verbs.QPAttrState | verbs.QPAttrSQPSN | verbs.QPAttrTimeout},
	} {
		if err := step.qp.Modify(&step.attr, step.mask); err != nil { // ibv_modify_qp
			panic(err)
		}
	}

	// One send to each SRQ, by number (ibv_get_srq_num).
	for i, msg := range []string{"for the first", "for the second"} {
		copy(smr.Buf()[64*i:], msg)
		err := send.PostSend([]verbs.SendWR{{WRID: uint64(10 + i), Opcode: verbs.WRSend, SendFlags: verbs.SendSignaled,
			SGList: []verbs.SGE{smr.SGE(64*i, len(msg))}, RemoteSRQN: xrcMust(srqs[i].Num())}}) // ibv_post_send
		if err != nil {
			panic(err)
		}
		wc := xrcPoll(scq)
		fmt.Printf("sent wr_id %d: %s\n", wc.WRID, wc.Status)
	}
	for i, cq := range cqs {
		wc := xrcPoll(cq)
		fmt.Printf("SRQ %d's CQ: wr_id %d %s %q, through the XRC_RECV QP: %v\n",
			i, wc.WRID, wc.Status, rmr.Buf()[64*i:64*i+int(wc.ByteLen)], wc.QPNum == recv.Num())
	}
	// Output:
	// sent wr_id 10: success
	// sent wr_id 11: success
	// SRQ 0's CQ: wr_id 0 success "for the first", through the XRC_RECV QP: true
	// SRQ 1's CQ: wr_id 1 success "for the second", through the XRC_RECV QP: true
}
