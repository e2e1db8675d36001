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

// pollOne waits for one completion on cq.
func pollOne(cq *verbs.CQ) verbs.WC {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	wc := make([]verbs.WC, 1)
	for {
		n, err := cq.Poll(wc)
		check(err)
		if n == 1 {
			return wc[0]
		}
		check(cq.Wait(ctx))
	}
}

// udSide is one end of the UD example.
type udSide struct {
	ctx *verbs.Context
	pd  *verbs.PD
	cq  *verbs.CQ
	mr  *verbs.MR
	qp  *verbs.QP
}

func udSetUp(l link.Link) *udSide {
	dev, err := rxe.NewDevice(rxe.Config{Links: []link.Link{l}})
	check(err)
	s := &udSide{}
	s.ctx, err = dev.Open()
	check(err)
	s.pd, err = s.ctx.AllocPD()
	check(err)
	s.cq, err = s.ctx.CreateCQ(16, nil, 0)
	check(err)
	s.mr, err = s.pd.RegMR(make([]byte, 4096), verbs.AccessLocalWrite)
	check(err)
	s.qp, err = s.pd.CreateQP(&verbs.QPInitAttr{SendCQ: s.cq, RecvCQ: s.cq, QPType: verbs.QPTUD,
		Cap: verbs.QPCap{MaxSendWR: 4, MaxRecvWR: 4, MaxSendSGE: 1, MaxRecvSGE: 1}})
	check(err)
	// A UD QP needs a Q_Key at INIT, nothing at RTR, a PSN at RTS.
	check(s.qp.Modify(&verbs.QPAttr{QPState: verbs.QPSInit, PortNum: 1, QKey: 0x11111111},
		verbs.QPAttrState|verbs.QPAttrPKeyIndex|verbs.QPAttrPort|verbs.QPAttrQKey))
	check(s.qp.Modify(&verbs.QPAttr{QPState: verbs.QPSRTR}, verbs.QPAttrState))
	check(s.qp.Modify(&verbs.QPAttr{QPState: verbs.QPSRTS}, verbs.QPAttrState|verbs.QPAttrSQPSN))
	return s
}

// A UD datagram and its answer: the receiver learns where to answer from
// the completion and the GRH area at the start of its receive buffer
// (ibv_create_ah_from_wc), as ibv_ud_pingpong's server does.
func Example_unreliableDatagram() {
	network := link.NewNetwork(1)
	la, _ := network.Attach(netip.MustParseAddr("192.0.2.1"))
	lb, _ := network.Attach(netip.MustParseAddr("192.0.2.2"))
	a, b := udSetUp(la), udSetUp(lb)

	// Every UD receive buffer starts with a 40-byte GRH area.
	check(b.qp.PostRecv([]verbs.RecvWR{{WRID: 1, SGList: []verbs.SGE{b.mr.SGE(0, verbs.GRHLen+100)}}}))
	check(a.qp.PostRecv([]verbs.RecvWR{{WRID: 2, SGList: []verbs.SGE{a.mr.SGE(0, verbs.GRHLen+100)}}}))

	bGID, _ := b.ctx.QueryGID(1, 0)
	ah, err := a.pd.CreateAH(&verbs.AHAttr{IsGlobal: true, PortNum: 1, GRH: verbs.GlobalRoute{DGID: bGID, HopLimit: 64}}) // ibv_create_ah
	check(err)
	copy(a.mr.Buf()[1000:], "ping")
	check(a.qp.PostSend([]verbs.SendWR{{WRID: 3, Opcode: verbs.WRSend, SendFlags: verbs.SendSignaled,
		SGList: []verbs.SGE{a.mr.SGE(1000, 4)}, AH: ah, RemoteQPN: b.qp.Num(), RemoteQKey: 0x11111111}}))
	pollOne(a.cq)

	wc := pollOne(b.cq)
	fmt.Printf("b got %q from a's QP (%v): %d bytes with the GRH\n", b.mr.Buf()[verbs.GRHLen:wc.ByteLen], wc.SrcQP == a.qp.Num(), wc.ByteLen)
	back, err := b.pd.CreateAHFromWC(&wc, b.mr.Buf()[:verbs.GRHLen], 1) // ibv_create_ah_from_wc
	check(err)
	copy(b.mr.Buf()[1000:], "pong")
	check(b.qp.PostSend([]verbs.SendWR{{WRID: 4, Opcode: verbs.WRSend, SendFlags: verbs.SendSignaled,
		SGList: []verbs.SGE{b.mr.SGE(1000, 4)}, AH: back, RemoteQPN: wc.SrcQP, RemoteQKey: 0x11111111}}))
	pollOne(b.cq)
	wc = pollOne(a.cq)
	fmt.Printf("a got %q\n", a.mr.Buf()[verbs.GRHLen:wc.ByteLen])
	// Output:
	// b got "ping" from a's QP (true): 44 bytes with the GRH
	// a got "pong"
}

// A type 2 memory window gives a peer access to 16 bytes of a larger
// region under its own key, and LOCAL_INV takes it back.
func Example_memoryWindow() {
	network := link.NewNetwork(1)
	la, _ := network.Attach(netip.MustParseAddr("192.0.2.1"))
	lb, _ := network.Attach(netip.MustParseAddr("192.0.2.2"))
	a, b := setUp(la, "rxe_a"), setUp(lb, "rxe_b")
	a.connect(b)
	b.connect(a)

	// b's region allows windows; the window grants remote write.
	region, err := b.pd.RegMR(make([]byte, 4096), verbs.AccessLocalWrite|verbs.AccessMWBind) // ibv_reg_mr
	check(err)
	mw, err := b.pd.AllocMW(verbs.MWType2) // ibv_alloc_mw
	check(err)
	rkey := verbs.IncRKey(mw.RKey())
	check(b.qp.PostSend([]verbs.SendWR{{WRID: 1, Opcode: verbs.WRBindMW, SendFlags: verbs.SendSignaled,
		BindMW: verbs.BindMWWR{MW: mw, RKey: rkey, BindInfo: verbs.MWBindInfo{
			MR: region, Addr: region.Addr() + 64, Length: 16, AccessFlags: verbs.AccessRemoteWrite}}}}))
	fmt.Println("bind:", pollOne(b.cq).Status)

	write := func(off uint64) verbs.WCStatus {
		check(a.qp.PostSend([]verbs.SendWR{{WRID: 2, Opcode: verbs.WRRDMAWrite, SendFlags: verbs.SendSignaled,
			SGList: []verbs.SGE{a.mr.SGE(0, 8)}, RemoteAddr: region.Addr() + off, RKey: rkey}}))
		return pollOne(a.cq).Status
	}
	copy(a.mr.Buf(), "windowed")
	fmt.Println("write inside:", write(64), string(region.Buf()[64:72]))
	fmt.Println("write outside:", write(128))
	// Output:
	// bind: success
	// write inside: success windowed
	// write outside: remote access error
}

// Manual progress for a busy-polling program, as perftest runs: the
// goroutine that posts sends at once, and a poll that finds the CQ empty
// takes the packets waiting on the device's UDP sockets and runs their QPs
// itself, with no goroutine switch per message. (On this example's
// in-memory network the device's goroutines deliver, as they do for a
// program that waits instead of polling.)
func Example_manualProgress() {
	network := link.NewNetwork(1)
	la, _ := network.Attach(netip.MustParseAddr("192.0.2.1"))
	lb, _ := network.Attach(netip.MustParseAddr("192.0.2.2"))
	a, b := udSetUp(la), udSetUp(lb)
	for _, s := range []*udSide{a, b} {
		check(s.ctx.SetProgress(verbs.ProgressManual)) // libfabric's FI_PROGRESS_MANUAL
	}
	check(b.qp.PostRecv([]verbs.RecvWR{{WRID: 1, SGList: []verbs.SGE{b.mr.SGE(0, verbs.GRHLen+100)}}}))
	bGID, _ := b.ctx.QueryGID(1, 0)
	ah, err := a.pd.CreateAH(&verbs.AHAttr{IsGlobal: true, PortNum: 1, GRH: verbs.GlobalRoute{DGID: bGID, HopLimit: 64}})
	check(err)
	copy(a.mr.Buf()[1000:], "polled")
	check(a.qp.PostSend([]verbs.SendWR{{WRID: 2, Opcode: verbs.WRSend, SendFlags: verbs.SendSignaled,
		SGList: []verbs.SGE{a.mr.SGE(1000, 6)}, AH: ah, RemoteQPN: b.qp.Num(), RemoteQKey: 0x11111111}}))

	wcs := make([]verbs.WC, 1)
	for { // busy-poll, as ibv_poll_cq loops do
		n, err := b.cq.Poll(wcs)
		check(err)
		if n == 1 {
			break
		}
	}
	fmt.Printf("%s: %q\n", wcs[0].Status, b.mr.Buf()[verbs.GRHLen:wcs[0].ByteLen])
	// Output:
	// success: "polled"
}
