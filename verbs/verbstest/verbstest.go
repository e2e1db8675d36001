// Package verbstest is the verbs conformance suite: one set of behaviour
// tests that any provider must pass, written against the public verbs API
// only. The software device runs it in its own tests; the rdma-core
// provider runs it on whatever device the host has (kernel Soft-RoCE's
// rxe0, a real NIC); a provider of your own can run it the same way:
//
//	func TestConformance(t *testing.T) {
//		dev, _ := verbs.DeviceByName("mydev0")
//		verbstest.Run(t, verbstest.Target{A: dev, B: dev})
//	}
//
// Each case is a subtest named after the behaviour it pins down
// ("RC/WRITE_WITH_IMM", "UD/GRH", "Errors/RemoteAccess" ...), so a run
// lists what a device does and does not do.
package verbstest

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/rdmago/rdmago/verbs"
)

// Target is what the suite runs against: two devices that reach each other
// over RoCE, or one device twice (its QPs then talk over loopback).
type Target struct {
	A, B *verbs.Device
	// Port is the port both sides use; 0 means 1.
	Port uint8
	// Skip names cases this target cannot run, each with the reason,
	// which the run reports (t.Skip) instead of failing.
	Skip map[string]string
	// Timeout bounds each wait for a completion or event; 0 means 10 s.
	Timeout time.Duration
}

// Cases lists the names of the suite's cases, in the order Run runs them.
func Cases() []string {
	names := make([]string, len(cases))
	for i, c := range cases {
		names[i] = c.name
	}
	return names
}

type testCase struct {
	name string
	run  func(*testing.T, *Target)
}

var cases = []testCase{
	{"Device/Query", testQuery},
	{"RC/SEND", testSend},
	{"RC/SEND_WITH_IMM", testSendImm},
	{"RC/SEND_INLINE", testInline},
	{"RC/SEND_unsignaled", testUnsignaled},
	{"RC/post_list", testPostList},
	{"RC/WRITE", testWrite},
	{"RC/WRITE_WITH_IMM", testWriteImm},
	{"RC/READ", testRead},
	{"RC/ATOMIC_CMP_AND_SWP", testCmpSwap},
	{"RC/ATOMIC_FETCH_AND_ADD", testFetchAdd},
	{"RC/fence", testFence},
	{"RC/query_qp", testQueryQP},
	{"UC/WRITE_and_SEND", testUC},
	{"UD/GRH", testUD},
	{"SRQ/shared_by_two_QPs", testSRQ},
	{"SRQ/limit_event", testSRQLimit},
	{"XRC/SEND_to_two_SRQs", testXRCTwoSRQs},
	{"XRC/RDMA_and_atomics", testXRCRDMA},
	{"XRC/SRQ_of_another_domain", testXRCForeignSRQ},
	{"XRC/empty_SRQ_RNR_retried", testXRCEmptySRQ},
	{"XRC/open_qp", testXRCOpenQP},
	{"MW/type1_bind", testMWType1},
	{"MW/window_bounds", testMWBounds},
	{"MW/type2_bind", testMWType2},
	{"MW/send_with_invalidate", testSendInv},
	{"Contexts/user_values_and_comp_vectors", testUserContexts},
	{"CQ/Wait", testCQWait},
	{"CQ/completion_channel", testCompChannel},
	{"CQ/solicited_only", testSolicited},
	{"CQ/overrun_reports_CQ_ERR", testCQOverrun},
	{"Errors/RemoteAccess", testRemoteAccess},
	{"Protection/remote_access_edges", testRemoteAccessEdges},
	{"Protection/send_with_invalidate_edges", testSendInvEdges},
	{"Errors/LocalLength", testLocalLength},
	{"Errors/RNRRetryExceeded", testRNR},
	{"Errors/FlushAfterError", testFlush},
	{"Errors/BadWorkRequest", testBadWR},
	{"Extended/query_device_ex", testQueryDeviceEx},
	{"Extended/CQEx_reads_what_poll_reads", testCQExMatchesPoll},
	{"Extended/CQEx_completion_timestamps", testCQExTimestamps},
	{"Extended/CQEx_refuses_unknown_fields", testCQExRefuses},
	{"Extended/QPEx_every_operation", testQPExEveryOp},
	{"Extended/QPEx_memory_windows", testQPExMW},
	{"Extended/QPEx_refuses_ops_outside_send_ops_flags", testQPExRefusesOps},
	{"Extended/QPEx_abort_posts_nothing", testQPExAbort},
	{"Extended/QPEx_UD", testQPExUD},
}

// Run runs every case against tg, each as a subtest.
func Run(t *testing.T, tg Target) {
	if tg.A == nil || tg.B == nil {
		t.Fatal("verbstest: Target needs devices A and B")
	}
	if tg.Port == 0 {
		tg.Port = 1
	}
	if tg.Timeout == 0 {
		tg.Timeout = 10 * time.Second
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			if why, ok := tg.Skip[c.name]; ok {
				t.Skip(why)
			}
			c.run(t, &tg)
		})
	}
}

// side is one end of a test: a context, PD, CQ (with a completion
// channel), a QP and a registered buffer.
type side struct {
	t   *testing.T
	tg  *Target
	ctx *verbs.Context
	pd  *verbs.PD
	ch  *verbs.CompChannel
	cq  *verbs.CQ
	cqx *verbs.CQEx // with opts.cqEx: the CQ as CreateCQEx made it
	qp  *verbs.QP
	buf []byte
	mr  *verbs.MR
	gid verbs.GID
	gi  int
}

type opts struct {
	typ      verbs.QPType
	srq      *verbs.SRQ
	rnrRetry uint8
	access   verbs.AccessFlags
	inline   uint32
	// cqEx makes the CQ with CreateCQEx, asking for wcFlags; sendOps
	// makes the QP with CreateQPEx and these send_ops_flags.
	cqEx    bool
	wcFlags verbs.CreateCQWCFlags
	sendOps verbs.QPCreateSendOpsFlags
}

const bufSize = 1 << 16

const allAccess = verbs.AccessLocalWrite | verbs.AccessRemoteWrite | verbs.AccessRemoteRead | verbs.AccessRemoteAtomic | verbs.AccessMWBind

// newSide opens dev and makes the side's objects; the test's cleanup
// releases them.
func newSide(t *testing.T, tg *Target, dev *verbs.Device, o opts) *side {
	t.Helper()
	ctx, err := dev.Open()
	if err != nil {
		t.Fatal(err)
	}
	s := &side{t: t, tg: tg, ctx: ctx}
	t.Cleanup(func() {
		if err := ctx.Close(); err != nil {
			t.Error(err)
		}
	})
	if s.pd, err = ctx.AllocPD(); err != nil {
		t.Fatal(err)
	}
	if s.ch, err = ctx.CreateCompChannel(); err != nil {
		t.Fatal(err)
	}
	if o.cqEx {
		if s.cqx, err = ctx.CreateCQEx(&verbs.CQInitAttrEx{CQE: 256, Channel: s.ch, WCFlags: o.wcFlags}); err != nil {
			t.Fatal(err)
		}
		s.cq = s.cqx.CQ
	} else if s.cq, err = ctx.CreateCQ(256, s.ch, 0); err != nil {
		t.Fatal(err)
	}
	if o.typ == 0 {
		o.typ = verbs.QPTRC
	}
	attr := &verbs.QPInitAttr{SendCQ: s.cq, RecvCQ: s.cq, QPType: o.typ, SRQ: o.srq,
		Cap: verbs.QPCap{MaxSendWR: 64, MaxRecvWR: 64, MaxSendSGE: 2, MaxRecvSGE: 2, MaxInlineData: o.inline}}
	if o.sendOps != 0 {
		s.qp, err = ctx.CreateQPEx(&verbs.QPInitAttrEx{QPInitAttr: *attr, CompMask: verbs.QPInitAttrPD | verbs.QPInitAttrSendOpsFlags,
			PD: s.pd, SendOpsFlags: o.sendOps})
	} else {
		s.qp, err = s.pd.CreateQP(attr)
	}
	if err != nil {
		t.Fatal(err)
	}
	s.buf = make([]byte, bufSize)
	if o.access == 0 {
		o.access = allAccess
	}
	if s.mr, err = s.pd.RegMR(s.buf, o.access); err != nil {
		t.Fatal(err)
	}
	s.gi, s.gid = pickGID(t, ctx, tg.Port)
	return s
}

// pickGID picks the port's first GID that is an IPv4 address, or failing
// that its first global one.
func pickGID(t *testing.T, ctx *verbs.Context, port uint8) (int, verbs.GID) {
	t.Helper()
	pa, err := ctx.QueryPort(port)
	if err != nil {
		t.Fatal(err)
	}
	best, bestGID := -1, verbs.GID{}
	for i := 0; i < min(pa.GIDTblLen, 64); i++ {
		g, err := ctx.QueryGID(port, i)
		if err != nil || g == (verbs.GID{}) {
			continue
		}
		a := g.Addr()
		if a.Is4In6() {
			return i, g
		}
		if best < 0 && !a.IsLinkLocalUnicast() {
			best, bestGID = i, g
		}
	}
	if best < 0 {
		t.Fatal("no usable GID on port ", port)
	}
	return best, bestGID
}

// pair makes two sides on the target's devices and connects their QPs.
func pair(t *testing.T, tg *Target, o opts) (*side, *side) {
	t.Helper()
	a := newSide(t, tg, tg.A, o)
	b := newSide(t, tg, tg.B, o)
	connect(t, a, b, o)
	return a, b
}

// connect moves both QPs to RTS, each aimed at the other.
func connect(t *testing.T, a, b *side, o opts) {
	t.Helper()
	if o.typ == 0 {
		o.typ = verbs.QPTRC
	}
	if o.rnrRetry == 0 {
		o.rnrRetry = 7
	}
	psnA, psnB := rand.Uint32()&0xffffff, rand.Uint32()&0xffffff
	for _, x := range []struct {
		s, peer *side
		rq, sq  uint32
	}{{a, b, psnB, psnA}, {b, a, psnA, psnB}} {
		s := x.s
		init := verbs.QPAttr{QPState: verbs.QPSInit, PortNum: s.tg.Port, QKey: 0x11111111,
			QPAccessFlags: verbs.AccessRemoteWrite | verbs.AccessRemoteRead | verbs.AccessRemoteAtomic}
		mask := verbs.QPAttrState | verbs.QPAttrPKeyIndex | verbs.QPAttrPort
		switch o.typ {
		case verbs.QPTUD:
			mask |= verbs.QPAttrQKey
		case verbs.QPTUC:
			init.QPAccessFlags = verbs.AccessRemoteWrite
			mask |= verbs.QPAttrAccessFlags
		default:
			mask |= verbs.QPAttrAccessFlags
		}
		if err := s.qp.Modify(&init, mask); err != nil {
			t.Fatal(err)
		}
		rtr := verbs.QPAttr{QPState: verbs.QPSRTR, PathMTU: verbs.MTU1024, DestQPNum: x.peer.qp.Num(), RQPSN: x.rq,
			MaxDestRdAtomic: 4, MinRNRTimer: 1,
			AHAttr: verbs.AHAttr{IsGlobal: true, PortNum: s.tg.Port, GRH: verbs.GlobalRoute{DGID: x.peer.gid, SGIDIndex: uint8(s.gi), HopLimit: 64}}}
		mask = verbs.QPAttrState
		switch o.typ {
		case verbs.QPTRC:
			mask |= verbs.QPAttrAV | verbs.QPAttrPathMTU | verbs.QPAttrDestQPN | verbs.QPAttrRQPSN | verbs.QPAttrMaxDestRdAtomic | verbs.QPAttrMinRNRTimer
		case verbs.QPTUC:
			mask |= verbs.QPAttrAV | verbs.QPAttrPathMTU | verbs.QPAttrDestQPN | verbs.QPAttrRQPSN
		}
		if err := s.qp.Modify(&rtr, mask); err != nil {
			t.Fatal(err)
		}
		rts := verbs.QPAttr{QPState: verbs.QPSRTS, SQPSN: x.sq, Timeout: 14, RetryCnt: 7, RNRRetry: o.rnrRetry, MaxRdAtomic: 4}
		mask = verbs.QPAttrState | verbs.QPAttrSQPSN
		if o.typ == verbs.QPTRC {
			mask |= verbs.QPAttrTimeout | verbs.QPAttrRetryCnt | verbs.QPAttrRNRRetry | verbs.QPAttrMaxQPRdAtomic
		}
		if err := s.qp.Modify(&rts, mask); err != nil {
			t.Fatal(err)
		}
	}
}

// wait takes n completions from the side's CQ, failing the test after the
// target's timeout.
func (s *side) wait(n int) []verbs.WC {
	s.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), s.tg.Timeout)
	defer cancel()
	var out []verbs.WC
	buf := make([]verbs.WC, 16)
	for len(out) < n {
		k, err := s.cq.Poll(buf[:min(len(buf), n-len(out))])
		if err != nil {
			s.t.Fatal(err)
		}
		out = append(out, buf[:k]...)
		if k == 0 {
			if err := s.cq.Wait(ctx); err != nil {
				s.t.Fatalf("waiting for %d completion(s), have %d: %v%s", n, len(out), err, describe(out))
			}
		}
	}
	return out
}

// one takes one completion and checks its status and opcode.
func (s *side) one(st verbs.WCStatus, op verbs.WCOpcode) verbs.WC {
	s.t.Helper()
	wc := s.wait(1)[0]
	if wc.Status != st || (st == verbs.WCSuccess && wc.Opcode != op) {
		s.t.Fatalf("completion %s %s (wr_id %d), want %s %s", wc.Opcode, wc.Status, wc.WRID, op, st)
	}
	return wc
}

func describe(wcs []verbs.WC) string {
	s := ""
	for _, w := range wcs {
		s += fmt.Sprintf("\n  wr_id %d %s %s len %d", w.WRID, w.Opcode, w.Status, w.ByteLen)
	}
	return s
}

func (s *side) recv(wrid uint64, off, n int) {
	s.t.Helper()
	if err := s.qp.PostRecv([]verbs.RecvWR{{WRID: wrid, SGList: []verbs.SGE{s.mr.SGE(off, n)}}}); err != nil {
		s.t.Fatal(err)
	}
}

func (s *side) send(wr verbs.SendWR) {
	s.t.Helper()
	if err := s.qp.PostSend([]verbs.SendWR{wr}); err != nil {
		s.t.Fatal(err)
	}
}

func fill(b []byte, seed byte) {
	for i := range b {
		b[i] = byte(i*7) + seed
	}
}

func testQuery(t *testing.T, tg *Target) {
	ctx, err := tg.A.Open()
	if err != nil {
		t.Fatal(err)
	}
	defer ctx.Close()
	da, err := ctx.QueryDevice()
	if err != nil {
		t.Fatal(err)
	}
	if da.MaxQP < 2 || da.MaxQPWR < 64 || da.MaxCQE < 256 || da.MaxSGE < 1 || da.PhysPortCnt < 1 || da.MaxMR < 1 {
		t.Fatalf("implausible device attributes %+v", da)
	}
	pa, err := ctx.QueryPort(tg.Port)
	if err != nil {
		t.Fatal(err)
	}
	if pa.State != verbs.PortActive {
		t.Fatalf("port %d is %s", tg.Port, pa.State)
	}
	if pa.LinkLayer != verbs.LinkLayerEthernet {
		t.Fatalf("link layer %s, want Ethernet (RoCE)", pa.LinkLayer)
	}
	if pa.GIDTblLen < 1 || pa.ActiveMTU < verbs.MTU256 || pa.ActiveMTU > pa.MaxMTU {
		t.Fatalf("implausible port attributes %+v", pa)
	}
	if _, err := ctx.QueryPKey(tg.Port, 0); err != nil {
		t.Fatal(err)
	}
	pickGID(t, ctx, tg.Port)
	if _, err := ctx.QueryPort(99); err == nil {
		t.Fatal("QueryPort(99) succeeded")
	}
}

// testUserContexts: the program's values of a QP, an SRQ and a CQ
// (qp_context, srq_context, cq_context) come back from them and from
// ibv_query_qp; comp_vector is checked against num_comp_vectors.
func testUserContexts(t *testing.T, tg *Target) {
	ctx, err := tg.A.Open()
	if err != nil {
		t.Fatal(err)
	}
	defer ctx.Close()
	n := ctx.NumCompVectors()
	if n < 1 {
		t.Fatalf("num_comp_vectors %d", n)
	}
	cq, err := ctx.CreateCQ(16, nil, n-1)
	if err != nil {
		t.Fatalf("CreateCQ on vector %d of %d: %v", n-1, n, err)
	}
	defer cq.Destroy()
	for _, v := range []int{-1, n} {
		if _, err := ctx.CreateCQ(16, nil, v); !errors.Is(err, verbs.ErrInvalidArgument) {
			t.Errorf("CreateCQ on vector %d of %d: %v, want EINVAL", v, n, err)
		}
	}
	cq.SetCQContext("the CQ's")
	pd, err := ctx.AllocPD()
	if err != nil {
		t.Fatal(err)
	}
	defer pd.Dealloc()
	srq, err := pd.CreateSRQ(&verbs.SRQInitAttr{Attr: verbs.SRQAttr{MaxWR: 4, MaxSGE: 1}, SRQContext: "the SRQ's"})
	if err != nil {
		t.Fatal(err)
	}
	defer srq.Destroy()
	qp, err := pd.CreateQP(&verbs.QPInitAttr{SendCQ: cq, RecvCQ: cq, QPType: verbs.QPTRC, SRQ: srq, QPContext: 42,
		Cap: verbs.QPCap{MaxSendWR: 4, MaxSendSGE: 1}})
	if err != nil {
		t.Fatal(err)
	}
	defer qp.Destroy()
	_, init, err := qp.Query()
	if err != nil {
		t.Fatal(err)
	}
	if cq.CQContext() != "the CQ's" || srq.SRQContext() != "the SRQ's" || qp.QPContext() != 42 || init.QPContext != 42 {
		t.Fatalf("contexts: CQ %v, SRQ %v, QP %v, queried QP %v", cq.CQContext(), srq.SRQContext(), qp.QPContext(), init.QPContext)
	}
}

func testSend(t *testing.T, tg *Target) {
	a, b := pair(t, tg, opts{})
	fill(a.buf[:4000], 1)
	b.recv(7, 100, 4096)
	a.send(verbs.SendWR{WRID: 9, Opcode: verbs.WRSend, SendFlags: verbs.SendSignaled, SGList: []verbs.SGE{a.mr.SGE(0, 4000)}})
	if wc := a.one(verbs.WCSuccess, verbs.WCSend); wc.WRID != 9 {
		t.Fatalf("send wr_id %d", wc.WRID)
	}
	wc := b.one(verbs.WCSuccess, verbs.WCRecv)
	if wc.WRID != 7 || wc.ByteLen != 4000 || wc.QPNum != b.qp.Num() || wc.WCFlags&verbs.WCWithImm != 0 {
		t.Fatalf("receive completion %+v", wc)
	}
	if !bytes.Equal(b.buf[100:4100], a.buf[:4000]) {
		t.Fatal("received data differs")
	}
}

func testSendImm(t *testing.T, tg *Target) {
	a, b := pair(t, tg, opts{})
	b.recv(1, 0, 64)
	a.send(verbs.SendWR{WRID: 2, Opcode: verbs.WRSendWithImm, ImmData: 0xdeadbeef, SendFlags: verbs.SendSignaled, SGList: []verbs.SGE{a.mr.SGE(0, 16)}})
	a.one(verbs.WCSuccess, verbs.WCSend)
	wc := b.one(verbs.WCSuccess, verbs.WCRecv)
	if wc.WCFlags&verbs.WCWithImm == 0 || wc.ImmData != 0xdeadbeef || wc.ByteLen != 16 {
		t.Fatalf("receive completion %+v, want immediate 0xdeadbeef", wc)
	}
}

func testInline(t *testing.T, tg *Target) {
	a, b := pair(t, tg, opts{inline: 64})
	_, init, err := a.qp.Query()
	if err != nil {
		t.Fatal(err)
	}
	if init.Cap.MaxInlineData < 32 {
		t.Skipf("the device gives %d bytes of inline data", init.Cap.MaxInlineData)
	}
	copy(a.buf, "inline payload!!")
	b.recv(1, 0, 64)
	a.send(verbs.SendWR{WRID: 3, Opcode: verbs.WRSend, SendFlags: verbs.SendSignaled | verbs.SendInline, SGList: []verbs.SGE{a.mr.SGE(0, 16)}})
	copy(a.buf, "overwritten at once") // inline data was copied at post time
	a.one(verbs.WCSuccess, verbs.WCSend)
	b.one(verbs.WCSuccess, verbs.WCRecv)
	if string(b.buf[:16]) != "inline payload!!" {
		t.Fatalf("received %q", b.buf[:16])
	}
}

func testUnsignaled(t *testing.T, tg *Target) {
	a, b := pair(t, tg, opts{})
	for i := range 4 {
		b.recv(uint64(i), i*64, 64)
	}
	wrs := make([]verbs.SendWR, 4)
	for i := range wrs {
		wrs[i] = verbs.SendWR{WRID: uint64(10 + i), Opcode: verbs.WRSend, SGList: []verbs.SGE{a.mr.SGE(0, 8)}}
	}
	wrs[3].SendFlags = verbs.SendSignaled
	if err := a.qp.PostSend(wrs); err != nil {
		t.Fatal(err)
	}
	b.wait(4)
	if wc := a.one(verbs.WCSuccess, verbs.WCSend); wc.WRID != 13 {
		t.Fatalf("the only send completion is wr_id %d, want 13", wc.WRID)
	}
	if n, _ := a.cq.Poll(make([]verbs.WC, 4)); n != 0 {
		t.Fatalf("%d more completions for unsignaled sends", n)
	}
}

func testPostList(t *testing.T, tg *Target) {
	a, b := pair(t, tg, opts{})
	const n = 32
	rwrs := make([]verbs.RecvWR, n)
	wrs := make([]verbs.SendWR, n)
	for i := range n {
		rwrs[i] = verbs.RecvWR{WRID: uint64(i), SGList: []verbs.SGE{b.mr.SGE(i*16, 16)}}
		a.buf[i*16] = byte(i)
		wrs[i] = verbs.SendWR{WRID: uint64(i), Opcode: verbs.WRSend, SendFlags: verbs.SendSignaled,
			SGList: []verbs.SGE{a.mr.SGE(i*16, 8), a.mr.SGE(i*16+8, 8)}}
	}
	if err := b.qp.PostRecv(rwrs); err != nil {
		t.Fatal(err)
	}
	if err := a.qp.PostSend(wrs); err != nil {
		t.Fatal(err)
	}
	for i, wc := range b.wait(n) {
		if wc.Status != verbs.WCSuccess || wc.WRID != uint64(i) || wc.ByteLen != 16 {
			t.Fatalf("receive %d: %+v", i, wc)
		}
	}
	for i, wc := range a.wait(n) {
		if wc.Status != verbs.WCSuccess || wc.WRID != uint64(i) {
			t.Fatalf("send %d: %+v", i, wc)
		}
	}
	if !bytes.Equal(a.buf[:n*16], b.buf[:n*16]) {
		t.Fatal("gathered data differs")
	}
}

func testWrite(t *testing.T, tg *Target) {
	a, b := pair(t, tg, opts{})
	fill(a.buf, 3)
	a.send(verbs.SendWR{WRID: 1, Opcode: verbs.WRRDMAWrite, SendFlags: verbs.SendSignaled,
		SGList: []verbs.SGE{a.mr.SGE(0, 10000)}, RemoteAddr: b.mr.Addr() + 5, RKey: b.mr.RKey()})
	a.one(verbs.WCSuccess, verbs.WCRDMAWrite)
	if !bytes.Equal(b.buf[5:10005], a.buf[:10000]) {
		t.Fatal("written data differs")
	}
	if n, _ := b.cq.Poll(make([]verbs.WC, 1)); n != 0 {
		t.Fatal("an RDMA WRITE completed at the responder")
	}
}

func testWriteImm(t *testing.T, tg *Target) {
	a, b := pair(t, tg, opts{})
	fill(a.buf[:256], 5)
	b.recv(4, 0, 0)
	a.send(verbs.SendWR{WRID: 1, Opcode: verbs.WRRDMAWriteWithImm, ImmData: 0x01020304, SendFlags: verbs.SendSignaled,
		SGList: []verbs.SGE{a.mr.SGE(0, 256)}, RemoteAddr: b.mr.Addr() + 1024, RKey: b.mr.RKey()})
	a.one(verbs.WCSuccess, verbs.WCRDMAWrite)
	wc := b.one(verbs.WCSuccess, verbs.WCRecvRDMAWithImm)
	if wc.ImmData != 0x01020304 || wc.WCFlags&verbs.WCWithImm == 0 || wc.WRID != 4 || wc.ByteLen != 256 {
		t.Fatalf("responder completion %+v", wc)
	}
	if !bytes.Equal(b.buf[1024:1280], a.buf[:256]) {
		t.Fatal("written data differs")
	}
}

func testRead(t *testing.T, tg *Target) {
	a, b := pair(t, tg, opts{})
	fill(b.buf, 9)
	a.send(verbs.SendWR{WRID: 1, Opcode: verbs.WRRDMARead, SendFlags: verbs.SendSignaled,
		SGList: []verbs.SGE{a.mr.SGE(0, 3000), a.mr.SGE(8192, 3000)}, RemoteAddr: b.mr.Addr() + 7, RKey: b.mr.RKey()})
	wc := a.one(verbs.WCSuccess, verbs.WCRDMARead)
	if wc.ByteLen != 6000 {
		t.Fatalf("READ completed %d bytes, want 6000", wc.ByteLen)
	}
	if !bytes.Equal(a.buf[:3000], b.buf[7:3007]) || !bytes.Equal(a.buf[8192:11192], b.buf[3007:6007]) {
		t.Fatal("read data differs")
	}
}

func atomics(t *testing.T, tg *Target) (*side, *side) {
	a, b := pair(t, tg, opts{})
	da, err := a.ctx.QueryDevice()
	if err != nil {
		t.Fatal(err)
	}
	if da.AtomicCap == verbs.AtomicNone {
		t.Skip("the device has no atomics (IBV_ATOMIC_NONE)")
	}
	return a, b
}

func testCmpSwap(t *testing.T, tg *Target) {
	a, b := atomics(t, tg)
	binary.NativeEndian.PutUint64(b.buf[64:], 42)
	for i, c := range []struct{ cmp, swap, old, after uint64 }{{41, 7, 42, 42}, {42, 7, 42, 7}} {
		a.send(verbs.SendWR{WRID: uint64(i), Opcode: verbs.WRAtomicCmpAndSwp, SendFlags: verbs.SendSignaled,
			SGList: []verbs.SGE{a.mr.SGE(0, 8)}, RemoteAddr: b.mr.Addr() + 64, RKey: b.mr.RKey(), CompareAdd: c.cmp, Swap: c.swap})
		a.one(verbs.WCSuccess, verbs.WCCompSwap)
		if got := binary.NativeEndian.Uint64(a.buf); got != c.old {
			t.Fatalf("CMP_AND_SWP %d returned %d, want %d", i, got, c.old)
		}
		if got := binary.NativeEndian.Uint64(b.buf[64:]); got != c.after {
			t.Fatalf("after CMP_AND_SWP %d memory holds %d, want %d", i, got, c.after)
		}
	}
}

func testFetchAdd(t *testing.T, tg *Target) {
	a, b := atomics(t, tg)
	binary.NativeEndian.PutUint64(b.buf[128:], 1000)
	a.send(verbs.SendWR{WRID: 1, Opcode: verbs.WRAtomicFetchAndAdd, SendFlags: verbs.SendSignaled,
		SGList: []verbs.SGE{a.mr.SGE(8, 8)}, RemoteAddr: b.mr.Addr() + 128, RKey: b.mr.RKey(), CompareAdd: 23})
	a.one(verbs.WCSuccess, verbs.WCFetchAdd)
	if got := binary.NativeEndian.Uint64(a.buf[8:]); got != 1000 {
		t.Fatalf("FETCH_AND_ADD returned %d, want 1000", got)
	}
	if got := binary.NativeEndian.Uint64(b.buf[128:]); got != 1023 {
		t.Fatalf("memory holds %d, want 1023", got)
	}
}

// testFence: a fenced WRITE after a READ of the same remote bytes must not
// overtake it, so the READ returns the old contents.
func testFence(t *testing.T, tg *Target) {
	a, b := pair(t, tg, opts{})
	fill(b.buf[:512], 1)
	old := append([]byte(nil), b.buf[:512]...)
	fill(a.buf[4096:4608], 77)
	wrs := []verbs.SendWR{
		{WRID: 1, Opcode: verbs.WRRDMARead, SendFlags: verbs.SendSignaled, SGList: []verbs.SGE{a.mr.SGE(0, 512)}, RemoteAddr: b.mr.Addr(), RKey: b.mr.RKey()},
		{WRID: 2, Opcode: verbs.WRRDMAWrite, SendFlags: verbs.SendSignaled | verbs.SendFence, SGList: []verbs.SGE{a.mr.SGE(4096, 512)}, RemoteAddr: b.mr.Addr(), RKey: b.mr.RKey()},
	}
	if err := a.qp.PostSend(wrs); err != nil {
		t.Fatal(err)
	}
	wcs := a.wait(2)
	if wcs[0].WRID != 1 || wcs[1].WRID != 2 || wcs[0].Status != verbs.WCSuccess || wcs[1].Status != verbs.WCSuccess {
		t.Fatalf("completions%s", describe(wcs))
	}
	if !bytes.Equal(a.buf[:512], old) {
		t.Fatal("the READ saw the fenced WRITE's data")
	}
	if !bytes.Equal(b.buf[:512], a.buf[4096:4608]) {
		t.Fatal("the WRITE did not land")
	}
}

func testQueryQP(t *testing.T, tg *Target) {
	a, b := pair(t, tg, opts{})
	attr, init, err := a.qp.Query()
	if err != nil {
		t.Fatal(err)
	}
	if attr.QPState != verbs.QPSRTS || attr.DestQPNum != b.qp.Num() || attr.PathMTU != verbs.MTU1024 || attr.AHAttr.GRH.DGID != b.gid {
		t.Fatalf("query: state %s dest %d mtu %s dgid %s", attr.QPState, attr.DestQPNum, attr.PathMTU, attr.AHAttr.GRH.DGID)
	}
	if init.QPType != verbs.QPTRC || init.Cap.MaxSendWR < 64 || init.Cap.MaxRecvWR < 64 {
		t.Fatalf("init attributes %+v", init)
	}
	if err := a.qp.Modify(&verbs.QPAttr{QPState: verbs.QPSRTR}, verbs.QPAttrState); err == nil {
		t.Fatal("RTS -> RTR succeeded")
	}
	if err := a.qp.Modify(&verbs.QPAttr{QPState: verbs.QPSErr}, verbs.QPAttrState); err != nil {
		t.Fatal(err)
	}
	if a.qp.State() != verbs.QPSErr {
		t.Fatalf("state %s after modify to ERR", a.qp.State())
	}
}

func testUC(t *testing.T, tg *Target) {
	a, b := pair(t, tg, opts{typ: verbs.QPTUC})
	fill(a.buf[:2048], 4)
	b.recv(1, 8192, 2048)
	wrs := []verbs.SendWR{
		{WRID: 1, Opcode: verbs.WRRDMAWrite, SendFlags: verbs.SendSignaled, SGList: []verbs.SGE{a.mr.SGE(0, 2048)}, RemoteAddr: b.mr.Addr(), RKey: b.mr.RKey()},
		{WRID: 2, Opcode: verbs.WRSend, SendFlags: verbs.SendSignaled, SGList: []verbs.SGE{a.mr.SGE(0, 2048)}},
	}
	if err := a.qp.PostSend(wrs); err != nil {
		t.Fatal(err)
	}
	a.wait(2)
	b.one(verbs.WCSuccess, verbs.WCRecv)
	if !bytes.Equal(b.buf[:2048], a.buf[:2048]) || !bytes.Equal(b.buf[8192:10240], a.buf[:2048]) {
		t.Fatal("UC data differs")
	}
}

func testUD(t *testing.T, tg *Target) {
	a, b := pair(t, tg, opts{typ: verbs.QPTUD})
	copy(a.buf, "datagram")
	b.recv(1, 0, 40+64)
	ah, err := a.pd.CreateAH(&verbs.AHAttr{IsGlobal: true, PortNum: tg.Port, GRH: verbs.GlobalRoute{DGID: b.gid, SGIDIndex: uint8(a.gi), HopLimit: 64}})
	if err != nil {
		t.Fatal(err)
	}
	defer ah.Destroy()
	a.send(verbs.SendWR{WRID: 1, Opcode: verbs.WRSendWithImm, ImmData: 77, SendFlags: verbs.SendSignaled,
		SGList: []verbs.SGE{a.mr.SGE(0, 8)}, AH: ah, RemoteQPN: b.qp.Num(), RemoteQKey: 0x11111111})
	a.one(verbs.WCSuccess, verbs.WCSend)
	wc := b.one(verbs.WCSuccess, verbs.WCRecv)
	if wc.ByteLen != 48 || wc.WCFlags&verbs.WCWithGRH == 0 || wc.SrcQP != a.qp.Num() || wc.ImmData != 77 {
		t.Fatalf("UD receive %+v: want 40+8 bytes with a GRH from QP %d", wc, a.qp.Num())
	}
	if string(b.buf[40:48]) != "datagram" {
		t.Fatalf("payload %q after the GRH", b.buf[40:48])
	}
	// A datagram with the wrong Q_Key is dropped.
	b.recv(2, 0, 40+64)
	a.send(verbs.SendWR{WRID: 2, Opcode: verbs.WRSend, SendFlags: verbs.SendSignaled,
		SGList: []verbs.SGE{a.mr.SGE(0, 8)}, AH: ah, RemoteQPN: b.qp.Num(), RemoteQKey: 0x22222222})
	a.one(verbs.WCSuccess, verbs.WCSend)
	a.send(verbs.SendWR{WRID: 3, Opcode: verbs.WRSend, SendFlags: verbs.SendSignaled,
		SGList: []verbs.SGE{a.mr.SGE(0, 8)}, AH: ah, RemoteQPN: b.qp.Num(), RemoteQKey: 0x11111111})
	a.one(verbs.WCSuccess, verbs.WCSend)
	if wc := b.one(verbs.WCSuccess, verbs.WCRecv); wc.WRID != 2 || wc.ImmData != 0 && wc.WCFlags&verbs.WCWithImm != 0 {
		t.Fatalf("receive %+v", wc)
	}
}

func testSRQ(t *testing.T, tg *Target) {
	srvCtx := newSide(t, tg, tg.B, opts{}) // only for its context and PD
	s, err := srvCtx.pd.CreateSRQ(&verbs.SRQInitAttr{Attr: verbs.SRQAttr{MaxWR: 16, MaxSGE: 1}})
	if err != nil {
		t.Fatal(err)
	}
	mk := func() *side {
		x := *srvCtx
		qp, err := srvCtx.pd.CreateQP(&verbs.QPInitAttr{SendCQ: srvCtx.cq, RecvCQ: srvCtx.cq, QPType: verbs.QPTRC, SRQ: s,
			Cap: verbs.QPCap{MaxSendWR: 16, MaxSendSGE: 1}})
		if err != nil {
			t.Fatal(err)
		}
		x.qp = qp
		return &x
	}
	b1, b2 := mk(), mk()
	a1, a2 := newSide(t, tg, tg.A, opts{}), newSide(t, tg, tg.A, opts{})
	connect(t, a1, b1, opts{})
	connect(t, a2, b2, opts{})
	var rwrs []verbs.RecvWR
	for i := range 4 {
		rwrs = append(rwrs, verbs.RecvWR{WRID: uint64(100 + i), SGList: []verbs.SGE{srvCtx.mr.SGE(i*256, 256)}})
	}
	if err := s.PostRecv(rwrs); err != nil {
		t.Fatal(err)
	}
	copy(a1.buf, "from one")
	copy(a2.buf, "from two")
	a1.send(verbs.SendWR{WRID: 1, Opcode: verbs.WRSend, SendFlags: verbs.SendSignaled, SGList: []verbs.SGE{a1.mr.SGE(0, 8)}})
	a1.one(verbs.WCSuccess, verbs.WCSend)
	a2.send(verbs.SendWR{WRID: 1, Opcode: verbs.WRSend, SendFlags: verbs.SendSignaled, SGList: []verbs.SGE{a2.mr.SGE(0, 8)}})
	a2.one(verbs.WCSuccess, verbs.WCSend)
	wcs := srvCtx.wait(2)
	got := map[uint32]string{}
	for _, wc := range wcs {
		if wc.Status != verbs.WCSuccess || wc.Opcode != verbs.WCRecv {
			t.Fatalf("SRQ completions%s", describe(wcs))
		}
		off := int(wc.WRID-100) * 256
		got[wc.QPNum] = string(srvCtx.buf[off : off+8])
	}
	if got[b1.qp.Num()] != "from one" || got[b2.qp.Num()] != "from two" {
		t.Fatalf("SRQ receives by QP: %v", got)
	}
	attr, err := s.Query()
	if err != nil || attr.MaxWR < 16 {
		t.Fatalf("SRQ query %+v %v", attr, err)
	}
	if err := s.Destroy(); err == nil {
		t.Fatal("destroying an SRQ that QPs use succeeded")
	}
	b1.qp.Destroy()
	b2.qp.Destroy()
	if err := s.Destroy(); err != nil {
		t.Fatal(err)
	}
}

func testSRQLimit(t *testing.T, tg *Target) {
	b := newSide(t, tg, tg.B, opts{})
	s, err := b.pd.CreateSRQ(&verbs.SRQInitAttr{Attr: verbs.SRQAttr{MaxWR: 16, MaxSGE: 1}})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Destroy()
	qp, err := b.pd.CreateQP(&verbs.QPInitAttr{SendCQ: b.cq, RecvCQ: b.cq, QPType: verbs.QPTRC, SRQ: s, Cap: verbs.QPCap{MaxSendWR: 4, MaxSendSGE: 1}})
	if err != nil {
		t.Fatal(err)
	}
	defer qp.Destroy()
	b.qp = qp
	a := newSide(t, tg, tg.A, opts{})
	connect(t, a, b, opts{})
	var rwrs []verbs.RecvWR
	for i := range 4 {
		rwrs = append(rwrs, verbs.RecvWR{WRID: uint64(i), SGList: []verbs.SGE{b.mr.SGE(i*64, 64)}})
	}
	if err := s.PostRecv(rwrs); err != nil {
		t.Fatal(err)
	}
	if err := s.Modify(&verbs.SRQAttr{SRQLimit: 2}, verbs.SRQAttrLimit); err != nil {
		t.Fatal(err)
	}
	for i := range 3 {
		a.send(verbs.SendWR{WRID: uint64(i), Opcode: verbs.WRSend, SendFlags: verbs.SendSignaled, SGList: []verbs.SGE{a.mr.SGE(0, 8)}})
	}
	a.wait(3)
	b.wait(3)
	ctx, cancel := context.WithTimeout(context.Background(), tg.Timeout)
	defer cancel()
	for {
		ev, err := b.ctx.GetAsyncEvent(ctx)
		if err != nil {
			t.Fatalf("no SRQ_LIMIT_REACHED event: %v", err)
		}
		b.ctx.AckAsyncEvent(ev)
		if ev.Type == verbs.EventSRQLimitReached {
			if ev.SRQ != s {
				t.Fatalf("SRQ_LIMIT_REACHED for %p, want %p", ev.SRQ, s)
			}
			return
		}
	}
}

// testCQOverrun: a receive CQ that nobody polls overflows; the device
// reports IBV_EVENT_CQ_ERR naming that CQ.
func testCQOverrun(t *testing.T, tg *Target) {
	b := newSide(t, tg, tg.B, opts{})
	small, err := b.ctx.CreateCQ(1, nil, 0)
	if err != nil {
		t.Fatal(err)
	}
	b.qp.Destroy()
	n := small.Cap() + 1 // one more than the CQ holds (providers round sizes up)
	if n*64 > bufSize {
		t.Skipf("the smallest CQ holds %d completions", n-1)
	}
	qp, err := b.pd.CreateQP(&verbs.QPInitAttr{SendCQ: b.cq, RecvCQ: small, QPType: verbs.QPTRC,
		Cap: verbs.QPCap{MaxSendWR: uint32(n), MaxRecvWR: uint32(n), MaxSendSGE: 1, MaxRecvSGE: 1}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { qp.Destroy(); small.Destroy() })
	b.qp = qp
	a := newSide(t, tg, tg.A, opts{})
	connect(t, a, b, opts{})
	for i := range n {
		b.recv(uint64(i), i*64, 64)
	}
	for i := range n {
		a.send(verbs.SendWR{WRID: uint64(i), Opcode: verbs.WRSend, SendFlags: verbs.SendSignaled, SGList: []verbs.SGE{a.mr.SGE(0, 8)}})
	}
	ctx, cancel := context.WithTimeout(context.Background(), tg.Timeout)
	defer cancel()
	for {
		ev, err := b.ctx.GetAsyncEvent(ctx)
		if err != nil {
			t.Fatalf("no CQ_ERR event after %d receives into a CQ of %d: %v", n, small.Cap(), err)
		}
		b.ctx.AckAsyncEvent(ev)
		if ev.Type == verbs.EventCQErr {
			if ev.CQ != small {
				t.Fatalf("CQ_ERR for %p, want the overrun CQ %p", ev.CQ, small)
			}
			return
		}
	}
}

// bindType1 binds a type 1 window over 4 KiB at offset 4096 of b's buffer
// and returns it and its key.
func bindType1(t *testing.T, b *side) (*verbs.MW, uint32) {
	t.Helper()
	mw, err := b.pd.AllocMW(verbs.MWType1)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { mw.Dealloc() })
	rkey, err := b.qp.BindMW(mw, &verbs.MWBind{WRID: 5, SendFlags: verbs.SendSignaled,
		BindInfo: verbs.MWBindInfo{MR: b.mr, Addr: b.mr.Addr() + 4096, Length: 4096, AccessFlags: verbs.AccessRemoteWrite | verbs.AccessRemoteRead}})
	if err != nil {
		t.Fatal(err)
	}
	b.one(verbs.WCSuccess, verbs.WCBindMW)
	if mw.RKey() != rkey {
		t.Fatalf("window key %#x after bind, bind returned %#x", mw.RKey(), rkey)
	}
	return mw, rkey
}

func testMWType1(t *testing.T, tg *Target) {
	a, b := pair(t, tg, opts{})
	_, rkey := bindType1(t, b)
	copy(a.buf, "through the window")
	a.send(verbs.SendWR{WRID: 1, Opcode: verbs.WRRDMAWrite, SendFlags: verbs.SendSignaled, SGList: []verbs.SGE{a.mr.SGE(0, 18)},
		RemoteAddr: b.mr.Addr() + 4096, RKey: rkey})
	a.one(verbs.WCSuccess, verbs.WCRDMAWrite)
	if string(b.buf[4096:4114]) != "through the window" {
		t.Fatalf("window write landed as %q", b.buf[4096:4114])
	}
}

// testMWBounds: a window grants access to its own range only, not to the
// rest of its region.
func testMWBounds(t *testing.T, tg *Target) {
	a, b := pair(t, tg, opts{})
	_, rkey := bindType1(t, b)
	a.send(verbs.SendWR{WRID: 2, Opcode: verbs.WRRDMAWrite, SendFlags: verbs.SendSignaled, SGList: []verbs.SGE{a.mr.SGE(0, 18)},
		RemoteAddr: b.mr.Addr(), RKey: rkey})
	if wc := a.wait(1)[0]; wc.Status != verbs.WCRemAccessErr {
		t.Fatalf("a WRITE below the window completed with %s, want %s", wc.Status, verbs.WCRemAccessErr)
	}
}

// bindType2 binds a type 2 window over b's first KiB with a BIND_MW work
// request and returns its key.
func bindType2(t *testing.T, b *side) uint32 {
	t.Helper()
	mw, err := b.pd.AllocMW(verbs.MWType2)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { mw.Dealloc() })
	rkey := verbs.IncRKey(mw.RKey())
	b.send(verbs.SendWR{WRID: 6, Opcode: verbs.WRBindMW, SendFlags: verbs.SendSignaled, BindMW: verbs.BindMWWR{MW: mw, RKey: rkey,
		BindInfo: verbs.MWBindInfo{MR: b.mr, Addr: b.mr.Addr(), Length: 1024, AccessFlags: verbs.AccessRemoteRead}}})
	b.one(verbs.WCSuccess, verbs.WCBindMW)
	return rkey
}

func testMWType2(t *testing.T, tg *Target) {
	a, b := pair(t, tg, opts{})
	rkey := bindType2(t, b)
	copy(b.buf, "readable")
	a.send(verbs.SendWR{WRID: 1, Opcode: verbs.WRRDMARead, SendFlags: verbs.SendSignaled, SGList: []verbs.SGE{a.mr.SGE(0, 8)},
		RemoteAddr: b.mr.Addr(), RKey: rkey})
	a.one(verbs.WCSuccess, verbs.WCRDMARead)
	if string(a.buf[:8]) != "readable" {
		t.Fatalf("read %q through the window", a.buf[:8])
	}
}

// testSendInv: SEND_WITH_INV invalidates the peer's window, whose
// receive completion says so (IBV_WC_WITH_INV and the key).
func testSendInv(t *testing.T, tg *Target) {
	a, b := pair(t, tg, opts{})
	rkey := bindType2(t, b)
	b.recv(1, 8192, 64)
	a.send(verbs.SendWR{WRID: 2, Opcode: verbs.WRSendWithInv, InvalidateRKey: rkey, SendFlags: verbs.SendSignaled, SGList: []verbs.SGE{a.mr.SGE(0, 8)}})
	a.one(verbs.WCSuccess, verbs.WCSend)
	wc := b.one(verbs.WCSuccess, verbs.WCRecv)
	a.send(verbs.SendWR{WRID: 3, Opcode: verbs.WRRDMARead, SendFlags: verbs.SendSignaled, SGList: []verbs.SGE{a.mr.SGE(0, 8)},
		RemoteAddr: b.mr.Addr(), RKey: rkey})
	if st := a.wait(1)[0].Status; st != verbs.WCRemAccessErr {
		t.Fatalf("a READ through the invalidated window completed with %s, want %s", st, verbs.WCRemAccessErr)
	}
	if wc.InvalidatedRKey() != rkey {
		t.Fatalf("receive completion names key %#x, want %#x", wc.InvalidatedRKey(), rkey)
	}
	if wc.WCFlags&verbs.WCWithInv == 0 {
		t.Fatalf("receive completion flags %#x lack IBV_WC_WITH_INV (%#x)", wc.WCFlags, verbs.WCWithInv)
	}
}

func testCQWait(t *testing.T, tg *Target) {
	a, b := pair(t, tg, opts{})
	done := make(chan error, 1)
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), tg.Timeout)
		defer cancel()
		done <- b.cq.Wait(ctx)
	}()
	b.recv(1, 0, 64)
	a.send(verbs.SendWR{WRID: 1, Opcode: verbs.WRSend, SGList: []verbs.SGE{a.mr.SGE(0, 8)}})
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if n, _ := b.cq.Poll(make([]verbs.WC, 2)); n != 1 {
		t.Fatalf("Wait returned with %d completions queued", n)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Millisecond)
	defer cancel()
	if err := b.cq.Wait(ctx); err != context.DeadlineExceeded {
		t.Fatalf("Wait on an empty CQ returned %v, want the context's deadline", err)
	}
}

func (s *side) cqEvent() {
	s.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), s.tg.Timeout)
	defer cancel()
	cq, err := s.ch.GetCQEvent(ctx)
	if err != nil {
		s.t.Fatalf("no completion event: %v", err)
	}
	if cq != s.cq {
		s.t.Fatal("event for another CQ")
	}
	cq.AckEvents(1)
}

func testCompChannel(t *testing.T, tg *Target) {
	a, b := pair(t, tg, opts{})
	for i := range 3 {
		if err := b.cq.ReqNotify(false); err != nil {
			t.Fatal(err)
		}
		b.recv(uint64(i), 0, 64)
		a.send(verbs.SendWR{WRID: uint64(i), Opcode: verbs.WRSend, SGList: []verbs.SGE{a.mr.SGE(0, 8)}})
		b.cqEvent()
		if wc := b.one(verbs.WCSuccess, verbs.WCRecv); wc.WRID != uint64(i) {
			t.Fatalf("completion %d after event %d", wc.WRID, i)
		}
	}
}

func testSolicited(t *testing.T, tg *Target) {
	a, b := pair(t, tg, opts{})
	if err := b.cq.ReqNotify(true); err != nil {
		t.Fatal(err)
	}
	b.recv(1, 0, 64)
	b.recv(2, 64, 64)
	a.send(verbs.SendWR{WRID: 1, Opcode: verbs.WRSend, SendFlags: verbs.SendSignaled, SGList: []verbs.SGE{a.mr.SGE(0, 8)}})
	a.one(verbs.WCSuccess, verbs.WCSend)
	select {
	case <-b.ch.C():
		t.Fatal("an unsolicited message fired a CQ armed for solicited ones")
	case <-time.After(50 * time.Millisecond):
	}
	a.send(verbs.SendWR{WRID: 2, Opcode: verbs.WRSend, SendFlags: verbs.SendSolicited, SGList: []verbs.SGE{a.mr.SGE(0, 8)}})
	b.cqEvent()
	if wcs := b.wait(2); wcs[1].WRID != 2 {
		t.Fatalf("completions%s", describe(wcs))
	}
}

func testRemoteAccess(t *testing.T, tg *Target) {
	for _, c := range []struct {
		name string
		key  func(*verbs.MR) uint32
		off  uint64
	}{
		{"bad rkey", func(m *verbs.MR) uint32 { return m.RKey() ^ 0x80 }, 0},
		{"past the region", (*verbs.MR).RKey, bufSize - 4},
	} {
		a, b := pair(t, tg, opts{})
		a.send(verbs.SendWR{WRID: 1, Opcode: verbs.WRRDMAWrite, SendFlags: verbs.SendSignaled, SGList: []verbs.SGE{a.mr.SGE(0, 64)},
			RKey: c.key(b.mr), RemoteAddr: b.mr.Addr() + c.off})
		if wc := a.wait(1)[0]; wc.Status != verbs.WCRemAccessErr {
			t.Fatalf("%s: completion %s, want %s", c.name, wc.Status, verbs.WCRemAccessErr)
		}
		if a.qp.State() != verbs.QPSErr {
			t.Fatalf("%s: requester QP in %s after a remote access error, want ERR", c.name, a.qp.State())
		}
	}
}

func testLocalLength(t *testing.T, tg *Target) {
	a, b := pair(t, tg, opts{})
	b.recv(1, 0, 8)
	a.send(verbs.SendWR{WRID: 1, Opcode: verbs.WRSend, SendFlags: verbs.SendSignaled, SGList: []verbs.SGE{a.mr.SGE(0, 64)}})
	b.one(verbs.WCLocLenErr, verbs.WCRecv)
	if wc := a.wait(1)[0]; wc.Status == verbs.WCSuccess {
		t.Fatal("a SEND too big for the receive buffer succeeded")
	}
}

func testRNR(t *testing.T, tg *Target) {
	a, _ := pair(t, tg, opts{rnrRetry: 1})
	a.send(verbs.SendWR{WRID: 1, Opcode: verbs.WRSend, SendFlags: verbs.SendSignaled, SGList: []verbs.SGE{a.mr.SGE(0, 8)}})
	a.one(verbs.WCRNRRetryExcErr, verbs.WCSend)
}

func testFlush(t *testing.T, tg *Target) {
	_, b := pair(t, tg, opts{})
	b.recv(1, 0, 64)
	b.recv(2, 64, 64)
	if err := b.qp.Modify(&verbs.QPAttr{QPState: verbs.QPSErr}, verbs.QPAttrState); err != nil {
		t.Fatal(err)
	}
	for i, wc := range b.wait(2) {
		if wc.Status != verbs.WCWRFlushErr || wc.WRID != uint64(i+1) {
			t.Fatalf("flushed receive %d: %+v", i, wc)
		}
	}
}

func testBadWR(t *testing.T, tg *Target) {
	a, _ := pair(t, tg, opts{})
	wrs := make([]verbs.SendWR, 2)
	wrs[0] = verbs.SendWR{WRID: 1, Opcode: verbs.WRSend, SGList: []verbs.SGE{a.mr.SGE(0, 8)}}
	wrs[1] = verbs.SendWR{WRID: 2, Opcode: verbs.WRSend, SGList: make([]verbs.SGE, 64)}
	err := a.qp.PostSend(wrs)
	we, ok := err.(*verbs.WRError)
	if !ok || we.Index != 1 || we.WRID != 2 {
		t.Fatalf("posting 64 SGEs to a QP of 2: %v, want a *WRError at index 1", err)
	}
}
