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
	"context"
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
