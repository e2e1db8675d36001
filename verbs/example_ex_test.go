package verbs_test

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"time"

	"github.com/rdmago/rdmago/rxe"
	"github.com/rdmago/rdmago/rxe/link"
	"github.com/rdmago/rdmago/verbs"
)

// exEnd is one RC QP of the extended examples, with an extended CQ.
type exEnd struct {
	cq *verbs.CQEx
	qp *verbs.QP
	mr *verbs.MR
}

// exampleEnds opens a software RoCE device and makes two RC QPs on it,
// connected to each other, whose CQs are extended ones asking for flags.
func exampleEnds(flags verbs.CreateCQWCFlags) (*verbs.Context, [2]exEnd) {
	l, err := link.NewNetwork(1).Attach(netip.MustParseAddr("192.0.2.9"))
	must(err)
	dev, err := rxe.NewDevice(rxe.Config{Name: "rxe_ex", Links: []link.Link{l}})
	must(err)
	ctx, err := dev.Open()
	must(err)
	gid, err := ctx.QueryGID(1, 0)
	must(err)
	pd, err := ctx.AllocPD()
	must(err)
	var e [2]exEnd
	for i := range e {
		e[i].cq, err = ctx.CreateCQEx(&verbs.CQInitAttrEx{CQE: 16, WCFlags: flags}) // ibv_create_cq_ex
		must(err)
		e[i].qp, err = ctx.CreateQPEx(&verbs.QPInitAttrEx{ // ibv_create_qp_ex
			QPInitAttr: verbs.QPInitAttr{SendCQ: e[i].cq.CQ, RecvCQ: e[i].cq.CQ, QPType: verbs.QPTRC, // ibv_cq_ex_to_cq
				Cap: verbs.QPCap{MaxSendWR: 16, MaxRecvWR: 16, MaxSendSGE: 1, MaxRecvSGE: 1, MaxInlineData: 64}},
			CompMask:     verbs.QPInitAttrPD | verbs.QPInitAttrSendOpsFlags,
			PD:           pd,
			SendOpsFlags: verbs.QPExWithRDMAWrite | verbs.QPExWithRDMAWriteWithImm | verbs.QPExWithSendWithImm,
		})
		must(err)
		e[i].mr, err = pd.RegMR(make([]byte, 4096), verbs.AccessLocalWrite|verbs.AccessRemoteWrite)
		must(err)
	}
	for i := range e {
		qp, peer := e[i].qp, e[1-i].qp
		must(qp.Modify(&verbs.QPAttr{QPState: verbs.QPSInit, PortNum: 1, QPAccessFlags: verbs.AccessRemoteWrite},
			verbs.QPAttrState|verbs.QPAttrPKeyIndex|verbs.QPAttrPort|verbs.QPAttrAccessFlags))
		must(qp.Modify(&verbs.QPAttr{QPState: verbs.QPSRTR, PathMTU: verbs.MTU1024, DestQPNum: peer.Num(), MaxDestRdAtomic: 1, MinRNRTimer: 12,
			AHAttr: verbs.AHAttr{IsGlobal: true, PortNum: 1, GRH: verbs.GlobalRoute{DGID: gid, HopLimit: 64}}},
			verbs.QPAttrState|verbs.QPAttrAV|verbs.QPAttrPathMTU|verbs.QPAttrDestQPN|verbs.QPAttrRQPSN|verbs.QPAttrMaxDestRdAtomic|verbs.QPAttrMinRNRTimer))
		must(qp.Modify(&verbs.QPAttr{QPState: verbs.QPSRTS, Timeout: 14, RetryCnt: 7, RNRRetry: 7, MaxRdAtomic: 1},
			verbs.QPAttrState|verbs.QPAttrSQPSN|verbs.QPAttrTimeout|verbs.QPAttrRetryCnt|verbs.QPAttrRNRRetry|verbs.QPAttrMaxQPRdAtomic))
	}
	return ctx, e
}

func must(err error) {
	if err != nil {
		panic(err)
	}
}

// waitPoll starts a batch of completions, waiting for the first.
func waitPoll(cq *verbs.CQEx) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	for {
		err := cq.StartPoll(nil) // ibv_start_poll
		if !errors.Is(err, verbs.ErrNoEntry) {
			must(err)
			return
		}
		must(cq.Wait(ctx))
	}
}

// An extended CQ: completions are read in place, one field at a time,
// here with the time the device completed them.
func ExampleCQEx() {
	ctx, e := exampleEnds(verbs.WCStandardFlags | verbs.WCExWithCompletionTimestampWallclock)
	defer ctx.Close()
	before := time.Now()
	r := e[1].mr
	must(e[1].qp.PostRecv([]verbs.RecvWR{{WRID: 7, SGList: []verbs.SGE{r.SGE(0, 64)}}}))
	s := e[0].mr
	copy(s.Buf(), "ping")
	must(e[0].qp.PostSend([]verbs.SendWR{{WRID: 1, Opcode: verbs.WRSendWithImm, ImmData: 42, SGList: []verbs.SGE{s.SGE(0, 4)}}}))

	cq := e[1].cq
	waitPoll(cq)
	for {
		at := time.Unix(0, int64(cq.ReadCompletionWallclockNS())) // ibv_wc_read_completion_wallclock_ns
		fmt.Println("wr_id", cq.WRID, cq.Status, cq.ReadOpcode(), "bytes", cq.ReadByteLen(), "imm", cq.ReadImmData())
		fmt.Println("completed during the example:", !at.Before(before) && !at.After(time.Now()))
		if cq.NextPoll() != nil { // ibv_next_poll: ENOENT when there are no more
			break
		}
	}
	cq.EndPoll() // ibv_end_poll
	// Output:
	// wr_id 7 success RECV bytes 4 imm 42
	// completed during the example: true
}

// The work request builder: two requests built with the ibv_wr_* calls
// and posted together by WRComplete.
func ExampleQPEx() {
	ctx, e := exampleEnds(verbs.WCStandardFlags)
	defer ctx.Close()
	peer := e[1].mr
	must(e[1].qp.PostRecv([]verbs.RecvWR{{WRID: 9}}))

	qx := e[0].qp.QPEx() // ibv_qp_to_qp_ex
	qx.WRStart()         // ibv_wr_start
	qx.WRID, qx.WRFlags = 1, 0
	qx.WRRDMAWrite(peer.RKey(), peer.Addr()) // ibv_wr_rdma_write
	qx.WRSetInlineData([]byte("hello, "))    // ibv_wr_set_inline_data
	qx.WRID, qx.WRFlags = 2, verbs.SendSignaled
	qx.WRRDMAWriteImm(peer.RKey(), peer.Addr()+7, 0x1234) // ibv_wr_rdma_write_imm
	src := e[0].mr
	copy(src.Buf(), "world")
	qx.WRSetSGE(src.LKey(), src.Addr(), 5) // ibv_wr_set_sge
	must(qx.WRComplete())                  // ibv_wr_complete: both are posted now

	waitPoll(e[0].cq)
	fmt.Println("sender: wr_id", e[0].cq.WRID, e[0].cq.ReadOpcode(), e[0].cq.Status)
	e[0].cq.EndPoll()
	waitPoll(e[1].cq)
	fmt.Printf("receiver: %s imm %#x, memory %q\n", e[1].cq.ReadOpcode(), e[1].cq.ReadImmData(), peer.Buf()[:12])
	e[1].cq.EndPoll()
	// Output:
	// sender: wr_id 2 RDMA_WRITE success
	// receiver: RECV_RDMA_WITH_IMM imm 0x1234, memory "hello, world"
}
