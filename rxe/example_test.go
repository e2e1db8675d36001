package rxe_test

import (
	"context"
	"fmt"
	"net/netip"
	"time"

	"github.com/rdmago/rdmago/rxe"
	"github.com/rdmago/rdmago/rxe/link"
	"github.com/rdmago/rdmago/verbs"
)

// side is one end of the example: what an RC program sets up.
type side struct {
	ctx *verbs.Context
	pd  *verbs.PD
	cq  *verbs.CQ
	mr  *verbs.MR
	qp  *verbs.QP
	gid verbs.GID
}

func setUp(l link.Link, name string) *side {
	dev, err := rxe.NewDevice(rxe.Config{Name: name, Links: []link.Link{l}})
	check(err)
	s := &side{}
	s.ctx, err = dev.Open() // ibv_open_device
	check(err)
	s.gid, err = s.ctx.QueryGID(1, 0) // ibv_query_gid
	check(err)
	s.pd, err = s.ctx.AllocPD() // ibv_alloc_pd
	check(err)
	s.cq, err = s.ctx.CreateCQ(16, nil, 0) // ibv_create_cq
	check(err)
	s.mr, err = s.pd.RegMR(make([]byte, 4096), verbs.AccessLocalWrite|verbs.AccessRemoteWrite|verbs.AccessRemoteRead) // ibv_reg_mr
	check(err)
	s.qp, err = s.pd.CreateQP(&verbs.QPInitAttr{SendCQ: s.cq, RecvCQ: s.cq, QPType: verbs.QPTRC,
		Cap: verbs.QPCap{MaxSendWR: 16, MaxRecvWR: 16, MaxSendSGE: 1, MaxRecvSGE: 1}}) // ibv_create_qp
	check(err)
	return s
}

// connect moves the QP through INIT, RTR and RTS towards the peer, whose
// QP number, GID and starting PSN an application would learn out of band.
func (s *side) connect(peer *side) {
	check(s.qp.Modify(&verbs.QPAttr{QPState: verbs.QPSInit, PortNum: 1,
		QPAccessFlags: verbs.AccessRemoteWrite | verbs.AccessRemoteRead},
		verbs.QPAttrState|verbs.QPAttrPKeyIndex|verbs.QPAttrPort|verbs.QPAttrAccessFlags))
	check(s.qp.Modify(&verbs.QPAttr{QPState: verbs.QPSRTR, PathMTU: verbs.MTU1024, DestQPNum: peer.qp.Num(), RQPSN: 0,
		MaxDestRdAtomic: 1, MinRNRTimer: 12,
		AHAttr: verbs.AHAttr{IsGlobal: true, PortNum: 1, GRH: verbs.GlobalRoute{DGID: peer.gid, HopLimit: 64}}},
		verbs.QPAttrState|verbs.QPAttrAV|verbs.QPAttrPathMTU|verbs.QPAttrDestQPN|verbs.QPAttrRQPSN|
			verbs.QPAttrMaxDestRdAtomic|verbs.QPAttrMinRNRTimer))
	check(s.qp.Modify(&verbs.QPAttr{QPState: verbs.QPSRTS, SQPSN: 0, Timeout: 14, RetryCnt: 7, RNRRetry: 7, MaxRdAtomic: 1},
		verbs.QPAttrState|verbs.QPAttrSQPSN|verbs.QPAttrTimeout|verbs.QPAttrRetryCnt|verbs.QPAttrRNRRetry|verbs.QPAttrMaxQPRdAtomic))
}

func check(err error) {
	if err != nil {
		panic(err)
	}
}

// Two software RoCE devices on an in-memory network: one RDMA WRITEs into
// the other's registered memory. With
// rxe.Config{Addrs: ...} instead of Links, the same code runs over UDP.
func Example() {
	network := link.NewNetwork(1)
	la, err := network.Attach(netip.MustParseAddr("192.0.2.1"))
	check(err)
	lb, err := network.Attach(netip.MustParseAddr("192.0.2.2"))
	check(err)
	a, b := setUp(la, "rxe_a"), setUp(lb, "rxe_b")
	a.connect(b)
	b.connect(a)

	copy(a.mr.Buf(), "hello, RDMA")
	err = a.qp.PostSend([]verbs.SendWR{{ // ibv_post_send
		WRID: 1, Opcode: verbs.WRRDMAWrite, SendFlags: verbs.SendSignaled,
		SGList:     []verbs.SGE{a.mr.SGE(0, 11)},
		RemoteAddr: b.mr.Addr() + 100, RKey: b.mr.RKey(),
	}})
	check(err)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	wc := make([]verbs.WC, 1)
	for {
		n, err := a.cq.Poll(wc) // ibv_poll_cq
		check(err)
		if n == 1 {
			break
		}
		check(a.cq.Wait(ctx))
	}
	fmt.Printf("wr_id %d: %s, %s\n", wc[0].WRID, wc[0].Opcode, wc[0].Status)
	fmt.Printf("peer memory: %q\n", b.mr.Buf()[100:111])
	// Output:
	// wr_id 1: RDMA_WRITE, success
	// peer memory: "hello, RDMA"
}
