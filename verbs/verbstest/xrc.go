package verbstest

import (
	"encoding/binary"
	"errors"
	"testing"
	"time"

	"github.com/rdmago/rdmago/verbs"
)

// XRC: an XRC_SEND QP on A connected to an XRC_RECV QP on B, whose domain
// has two XRC SRQs, each with its own CQ. Devices without IBV_DEVICE_XRC
// skip these cases.

// xrcEnds is the XRC setup of a case.
type xrcEnds struct {
	a, b *side // a.qp is the XRC_SEND QP, b.qp the XRC_RECV QP
	xrcd *verbs.XRCD
	srq  [2]*verbs.SRQ
	srqn [2]uint32
	cq   [2]*verbs.CQ // srq[i]'s CQ; cq[0] is b.cq
}

const xrcSRQMask = verbs.SRQInitAttrType | verbs.SRQInitAttrPD | verbs.SRQInitAttrXRCD | verbs.SRQInitAttrCQ

// xrcSetUp makes the XRC ends of a case and connects them, or skips the
// case on a device without XRC.
func xrcSetUp(t *testing.T, tg *Target, rnrRetry uint8) *xrcEnds {
	t.Helper()
	e := &xrcEnds{a: newSide(t, tg, tg.A, opts{}), b: newSide(t, tg, tg.B, opts{})}
	for _, s := range []*side{e.a, e.b} {
		attr, err := s.ctx.QueryDevice()
		if err != nil {
			t.Fatal(err)
		}
		if attr.DeviceCapFlags&verbs.DeviceXRC == 0 {
			t.Skip("the device has no XRC (IBV_DEVICE_XRC)")
		}
		if err := s.qp.Destroy(); err != nil { // the side's RC QP: not used here
			t.Fatal(err)
		}
	}
	var err error
	e.a.qp, err = e.a.pd.CreateQP(&verbs.QPInitAttr{QPType: verbs.QPTXRCSend, SendCQ: e.a.cq,
		Cap: verbs.QPCap{MaxSendWR: 64, MaxSendSGE: 2}})
	if err != nil {
		t.Fatal(err)
	}
	if e.xrcd, err = e.b.ctx.OpenXRCD(nil); err != nil {
		t.Fatal(err)
	}
	e.cq[0] = e.b.cq
	if e.cq[1], err = e.b.ctx.CreateCQ(64, nil, 0); err != nil {
		t.Fatal(err)
	}
	for i := range e.srq {
		e.srq[i], e.srqn[i] = xrcSRQ(t, e.b, e.xrcd, e.cq[i])
	}
	if e.b.qp, err = e.xrcd.CreateQP(&verbs.QPInitAttr{QPType: verbs.QPTXRCRecv}); err != nil {
		t.Fatal(err)
	}
	xrcConnect(t, e.a, e.b, rnrRetry)
	return e
}

// xrcSRQ makes an XRC SRQ of x with b's PD, completing to cq.
func xrcSRQ(t *testing.T, b *side, x *verbs.XRCD, cq *verbs.CQ) (*verbs.SRQ, uint32) {
	t.Helper()
	s, err := b.ctx.CreateSRQEx(&verbs.SRQInitAttrEx{Attr: verbs.SRQAttr{MaxWR: 16, MaxSGE: 1}, CompMask: xrcSRQMask,
		SRQType: verbs.SRQTXRC, PD: b.pd, XRCD: x, CQ: cq})
	if err != nil {
		t.Fatal(err)
	}
	n, err := s.Num()
	if err != nil {
		t.Fatal(err)
	}
	return s, n
}

// xrcConnect brings a's XRC_SEND QP and b's XRC_RECV QP to RTS, aimed at
// each other, each with what its side of the state table takes.
func xrcConnect(t *testing.T, a, b *side, rnrRetry uint8) {
	t.Helper()
	av := func(peer *side, s *side) verbs.AHAttr {
		return verbs.AHAttr{IsGlobal: true, PortNum: s.tg.Port, GRH: verbs.GlobalRoute{DGID: peer.gid, SGIDIndex: uint8(s.gi), HopLimit: 64}}
	}
	init := verbs.QPAttr{QPState: verbs.QPSInit, PortNum: a.tg.Port, QPAccessFlags: verbs.AccessRemoteWrite | verbs.AccessRemoteRead | verbs.AccessRemoteAtomic}
	initMask := verbs.QPAttrState | verbs.QPAttrPKeyIndex | verbs.QPAttrPort | verbs.QPAttrAccessFlags
	rtrMask := verbs.QPAttrState | verbs.QPAttrAV | verbs.QPAttrPathMTU | verbs.QPAttrDestQPN | verbs.QPAttrRQPSN
	const psnA, psnB = 0x1234, 0xabcdef
	steps := []struct {
		qp   *verbs.QP
		attr verbs.QPAttr
		mask verbs.QPAttrMask
	}{
		{a.qp, init, initMask},
		{a.qp, verbs.QPAttr{QPState: verbs.QPSRTR, PathMTU: verbs.MTU1024, DestQPNum: b.qp.Num(), RQPSN: psnB, AHAttr: av(b, a)}, rtrMask},
		{a.qp, verbs.QPAttr{QPState: verbs.QPSRTS, SQPSN: psnA, Timeout: 14, RetryCnt: 7, RNRRetry: rnrRetry, MaxRdAtomic: 4},
			verbs.QPAttrState | verbs.QPAttrSQPSN | verbs.QPAttrTimeout | verbs.QPAttrRetryCnt | verbs.QPAttrRNRRetry | verbs.QPAttrMaxQPRdAtomic},
		{b.qp, init, initMask},
		{b.qp, verbs.QPAttr{QPState: verbs.QPSRTR, PathMTU: verbs.MTU1024, DestQPNum: a.qp.Num(), RQPSN: psnA, MaxDestRdAtomic: 4, MinRNRTimer: 1, AHAttr: av(a, b)},
			rtrMask | verbs.QPAttrMaxDestRdAtomic | verbs.QPAttrMinRNRTimer},
		{b.qp, verbs.QPAttr{QPState: verbs.QPSRTS, SQPSN: psnB, Timeout: 14}, verbs.QPAttrState | verbs.QPAttrSQPSN | verbs.QPAttrTimeout},
	}
	for _, s := range steps {
		if err := s.qp.Modify(&s.attr, s.mask); err != nil {
			t.Fatal(err)
		}
	}
}

// waitOn takes n completions from cq, as side.wait does from the side's.
func (s *side) waitOn(cq *verbs.CQ, n int) []verbs.WC {
	s.t.Helper()
	x := *s
	x.cq = cq
	return x.wait(n)
}

// testXRCTwoSRQs: one XRC_SEND QP reaches both SRQs behind one XRC_RECV
// QP; each SEND lands in the SRQ it names and completes to that SRQ's CQ,
// naming the XRC_RECV QP.
func testXRCTwoSRQs(t *testing.T, tg *Target) {
	e := xrcSetUp(t, tg, 7)
	for i := range 2 {
		if err := e.srq[i].PostRecv([]verbs.RecvWR{{WRID: uint64(10 + i), SGList: []verbs.SGE{e.b.mr.SGE(256*i, 256)}}}); err != nil {
			t.Fatal(err)
		}
	}
	copy(e.a.buf, "to SRQ one")
	copy(e.a.buf[64:], "to SRQ two")
	e.a.send(verbs.SendWR{WRID: 1, Opcode: verbs.WRSend, SendFlags: verbs.SendSignaled, SGList: []verbs.SGE{e.a.mr.SGE(0, 10)}, RemoteSRQN: e.srqn[0]})
	e.a.send(verbs.SendWR{WRID: 2, Opcode: verbs.WRSendWithImm, SendFlags: verbs.SendSignaled, SGList: []verbs.SGE{e.a.mr.SGE(64, 10)},
		ImmData: 0x5eed, RemoteSRQN: e.srqn[1]})
	for _, wc := range e.a.wait(2) {
		if wc.Status != verbs.WCSuccess {
			t.Fatalf("send completion %+v", wc)
		}
	}
	for i, want := range []string{"to SRQ one", "to SRQ two"} {
		wc := e.b.waitOn(e.cq[i], 1)[0]
		if wc.Status != verbs.WCSuccess || wc.Opcode != verbs.WCRecv || wc.WRID != uint64(10+i) || wc.QPNum != e.b.qp.Num() || wc.ByteLen != 10 {
			t.Fatalf("SRQ %d completion %+v", i, wc)
		}
		if i == 1 && (wc.WCFlags&verbs.WCWithImm == 0 || wc.ImmData != 0x5eed) {
			t.Fatalf("immediate %#x flags %#x", wc.ImmData, wc.WCFlags)
		}
		if got := string(e.b.buf[256*i : 256*i+10]); got != want {
			t.Fatalf("SRQ %d received %q, want %q", i, got, want)
		}
	}
}

// testXRCRDMA: RDMA WRITE with immediate (which takes a receive WQE from
// the named SRQ), READ and both atomics over XRC.
func testXRCRDMA(t *testing.T, tg *Target) {
	e := xrcSetUp(t, tg, 7)
	a, b := e.a, e.b
	fill(a.buf[:512], 3)
	if err := e.srq[1].PostRecv([]verbs.RecvWR{{WRID: 20}}); err != nil {
		t.Fatal(err)
	}
	a.send(verbs.SendWR{WRID: 1, Opcode: verbs.WRRDMAWriteWithImm, SendFlags: verbs.SendSignaled, SGList: []verbs.SGE{a.mr.SGE(0, 512)},
		RemoteAddr: b.mr.Addr() + 1024, RKey: b.mr.RKey(), ImmData: 7, RemoteSRQN: e.srqn[1]})
	a.one(verbs.WCSuccess, verbs.WCRDMAWrite)
	if wc := b.waitOn(e.cq[1], 1)[0]; wc.Status != verbs.WCSuccess || wc.Opcode != verbs.WCRecvRDMAWithImm || wc.WRID != 20 || wc.ImmData != 7 {
		t.Fatalf("WRITE_WITH_IMM receive %+v", wc)
	}
	if string(b.buf[1024:1536]) != string(a.buf[:512]) {
		t.Fatal("WRITE data differs")
	}
	fill(b.buf[4096:4096+300], 9)
	a.send(verbs.SendWR{WRID: 2, Opcode: verbs.WRRDMARead, SendFlags: verbs.SendSignaled, SGList: []verbs.SGE{a.mr.SGE(2048, 300)},
		RemoteAddr: b.mr.Addr() + 4096, RKey: b.mr.RKey(), RemoteSRQN: e.srqn[0]})
	a.one(verbs.WCSuccess, verbs.WCRDMARead)
	if string(a.buf[2048:2348]) != string(b.buf[4096:4396]) {
		t.Fatal("READ data differs")
	}
	binary.NativeEndian.PutUint64(b.buf[8192:], 40)
	a.send(verbs.SendWR{WRID: 3, Opcode: verbs.WRAtomicFetchAndAdd, SendFlags: verbs.SendSignaled, SGList: []verbs.SGE{a.mr.SGE(3072, 8)},
		RemoteAddr: b.mr.Addr() + 8192, RKey: b.mr.RKey(), CompareAdd: 2, RemoteSRQN: e.srqn[0]})
	a.one(verbs.WCSuccess, verbs.WCFetchAdd)
	a.send(verbs.SendWR{WRID: 4, Opcode: verbs.WRAtomicCmpAndSwp, SendFlags: verbs.SendSignaled, SGList: []verbs.SGE{a.mr.SGE(3080, 8)},
		RemoteAddr: b.mr.Addr() + 8192, RKey: b.mr.RKey(), CompareAdd: 42, Swap: 99, RemoteSRQN: e.srqn[1]})
	a.one(verbs.WCSuccess, verbs.WCCompSwap)
	if add, cas, now := binary.NativeEndian.Uint64(a.buf[3072:]), binary.NativeEndian.Uint64(a.buf[3080:]), binary.NativeEndian.Uint64(b.buf[8192:]); add != 40 || cas != 42 || now != 99 {
		t.Fatalf("atomics returned %d and %d, left %d; want 40, 42, 99", add, cas, now)
	}
}

// testXRCForeignSRQ: a request naming an SRQ of another XRC domain is an
// invalid request: the sender's request fails with REM_INV_REQ_ERR and
// the SRQ receives nothing.
func testXRCForeignSRQ(t *testing.T, tg *Target) {
	e := xrcSetUp(t, tg, 7)
	other, err := e.b.ctx.OpenXRCD(nil)
	if err != nil {
		t.Fatal(err)
	}
	foreign, n := xrcSRQ(t, e.b, other, e.cq[0])
	t.Cleanup(func() { foreign.Destroy(); other.Close() })
	if err := foreign.PostRecv([]verbs.RecvWR{{WRID: 30, SGList: []verbs.SGE{e.b.mr.SGE(0, 64)}}}); err != nil {
		t.Fatal(err)
	}
	e.a.send(verbs.SendWR{WRID: 5, Opcode: verbs.WRSend, SendFlags: verbs.SendSignaled, SGList: []verbs.SGE{e.a.mr.SGE(0, 8)}, RemoteSRQN: n})
	e.a.one(verbs.WCRemInvReqErr, verbs.WCSend)
	if k := e.cq[0].Len(); k != 0 {
		t.Fatalf("%d completion(s) on the foreign SRQ's CQ", k)
	}
}

// testXRCEmptySRQ: a SEND to an SRQ with nothing posted is refused with
// an RNR NAK and retried (rnr_retry 7) until a receive is posted.
func testXRCEmptySRQ(t *testing.T, tg *Target) {
	e := xrcSetUp(t, tg, 7)
	copy(e.a.buf, "waited")
	e.a.send(verbs.SendWR{WRID: 6, Opcode: verbs.WRSend, SendFlags: verbs.SendSignaled, SGList: []verbs.SGE{e.a.mr.SGE(0, 6)}, RemoteSRQN: e.srqn[1]})
	time.Sleep(20 * time.Millisecond) // let an RNR NAK or two go by
	if err := e.srq[1].PostRecv([]verbs.RecvWR{{WRID: 31, SGList: []verbs.SGE{e.b.mr.SGE(0, 64)}}}); err != nil {
		t.Fatal(err)
	}
	e.a.one(verbs.WCSuccess, verbs.WCSend)
	if wc := e.b.waitOn(e.cq[1], 1)[0]; wc.Status != verbs.WCSuccess || wc.WRID != 31 || string(e.b.buf[:6]) != "waited" {
		t.Fatalf("receive %+v %q", wc, e.b.buf[:6])
	}
}

// testXRCOpenQP: a second handle on the XRC_RECV QP (ibv_open_qp) keeps
// it serving after the creator's handle is destroyed.
func testXRCOpenQP(t *testing.T, tg *Target) {
	e := xrcSetUp(t, tg, 7)
	h, err := e.b.ctx.OpenQP(&verbs.QPOpenAttr{CompMask: verbs.QPOpenAttrNum | verbs.QPOpenAttrXRCD | verbs.QPOpenAttrType,
		QPNum: e.b.qp.Num(), XRCD: e.xrcd, QPType: verbs.QPTXRCRecv})
	if err != nil {
		t.Fatal(err)
	}
	if h.Num() != e.b.qp.Num() {
		t.Fatalf("opened QP %#x, want %#x", h.Num(), e.b.qp.Num())
	}
	if err := e.b.qp.Destroy(); err != nil {
		t.Fatal(err)
	}
	if a, _, err := h.Query(); err != nil || a.QPState != verbs.QPSRTS {
		t.Fatalf("the opened handle's QP: %s %v", a.QPState, err)
	}
	if err := e.srq[0].PostRecv([]verbs.RecvWR{{WRID: 32, SGList: []verbs.SGE{e.b.mr.SGE(0, 64)}}}); err != nil {
		t.Fatal(err)
	}
	e.a.send(verbs.SendWR{WRID: 7, Opcode: verbs.WRSend, SendFlags: verbs.SendSignaled, SGList: []verbs.SGE{e.a.mr.SGE(0, 8)}, RemoteSRQN: e.srqn[0]})
	e.a.one(verbs.WCSuccess, verbs.WCSend)
	if wc := e.b.waitOn(e.cq[0], 1)[0]; wc.Status != verbs.WCSuccess || wc.QPNum != h.Num() {
		t.Fatalf("receive %+v", wc)
	}
	if err := e.xrcd.Close(); !errors.Is(err, verbs.ErrBusy) {
		t.Fatalf("closing the domain while a QP handle and SRQs remain: %v, want ErrBusy", err)
	}
	if err := h.Destroy(); err != nil {
		t.Fatal(err)
	}
}
