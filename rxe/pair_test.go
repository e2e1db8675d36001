package rxe

import (
	"context"
	"fmt"
	"math/rand/v2"
	"net/netip"
	"testing"
	"time"

	"github.com/rdmago/rdmago/rxe/link"
	"github.com/rdmago/rdmago/verbs"
)

// end is one side of a connected pair of RC QPs in a test.
type end struct {
	t   testing.TB
	ctx *verbs.Context
	pd  *verbs.PD
	cq  *verbs.CQ
	cqx *verbs.CQEx // with pairOpts.wcFlags: the CQ as CreateCQEx made it
	qp  *verbs.QP
	buf []byte
	mr  *verbs.MR
}

type pairOpts struct {
	typ      verbs.QPType
	bufSize  int
	mtu      verbs.MTU
	timeout  uint8 // QP timeout code; 0 picks a fast one for tests
	retry    uint8
	rnrRetry uint8
	minRNR   uint8
	access   verbs.AccessFlags
	sendWR   uint32
	recvWR   uint32
	rdAtomic uint8
	// wcFlags makes each end's CQ with CreateCQEx, asking for these
	// fields; sendOps makes its QP with CreateQPEx and these
	// send_ops_flags.
	wcFlags verbs.CreateCQWCFlags
	sendOps verbs.QPCreateSendOpsFlags
	// clock, if set, is the devices' time (fakeClock).
	clock clock
}

func (o *pairOpts) defaults() {
	if o.typ == 0 {
		o.typ = verbs.QPTRC
	}
	if o.bufSize == 0 {
		o.bufSize = 1 << 20
	}
	if o.mtu == 0 {
		o.mtu = verbs.MTU1024
	}
	if o.timeout == 0 {
		o.timeout = 12 // 16.8 ms
	}
	if o.retry == 0 {
		o.retry = 7
	}
	if o.rnrRetry == 0 {
		o.rnrRetry = 7
	}
	if o.minRNR == 0 {
		o.minRNR = 1 // 10 µs
	}
	if o.access == 0 {
		o.access = verbs.AccessLocalWrite | verbs.AccessRemoteWrite | verbs.AccessRemoteRead | verbs.AccessRemoteAtomic
	}
	if o.sendWR == 0 {
		o.sendWR = 256
	}
	if o.recvWR == 0 {
		o.recvWR = 256
	}
	if o.rdAtomic == 0 {
		o.rdAtomic = 16
	}
}

// udpPort picks a port for a test's UDP links, so that parallel test
// binaries rarely collide.
func udpPort() uint16 { return uint16(20000 + rand.IntN(20000)) }

// udpLinks opens UDP links on 127.0.0.1 and 127.0.0.2.
func udpLinks(t testing.TB) (link.Link, link.Link) {
	t.Helper()
	for try := 0; ; try++ {
		port := udpPort()
		a, err := link.ListenUDP(netip.AddrPortFrom(netip.MustParseAddr("127.0.0.1"), port), link.UDPOptions{})
		if err != nil {
			if try < 20 {
				continue
			}
			t.Fatal(err)
		}
		b, err := link.ListenUDP(netip.AddrPortFrom(netip.MustParseAddr("127.0.0.2"), port), link.UDPOptions{})
		if err != nil {
			a.Close()
			if try < 20 {
				continue
			}
			t.Fatal(err)
		}
		return a, b
	}
}

// newEnd opens a device on l and makes a QP (not yet connected).
func newEnd(t testing.TB, name string, l link.Link, o *pairOpts) *end {
	t.Helper()
	dev, err := NewDevice(Config{Name: name, Links: []link.Link{l}, NetdevMTU: 9000, clock: o.clock})
	if err != nil {
		t.Fatal(err)
	}
	return newEndOn(t, dev, o)
}

// openDevice makes a device of cfg and opens a context on it, closed when
// the test ends.
func openDevice(t testing.TB, cfg Config) *verbs.Context {
	t.Helper()
	dev, err := NewDevice(cfg)
	if err != nil {
		t.Fatal(err)
	}
	ctx, err := dev.Open()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ctx.Close() })
	return ctx
}

// newEndOn opens a context on dev and makes a QP (not yet connected).
func newEndOn(t testing.TB, dev *verbs.Device, o *pairOpts) *end {
	t.Helper()
	ctx, err := dev.Open()
	if err != nil {
		t.Fatal(err)
	}
	e := &end{t: t, ctx: ctx}
	if e.pd, err = ctx.AllocPD(); err != nil {
		t.Fatal(err)
	}
	if o.wcFlags != 0 {
		if e.cqx, err = ctx.CreateCQEx(&verbs.CQInitAttrEx{CQE: 4096, WCFlags: o.wcFlags}); err != nil {
			t.Fatal(err)
		}
		e.cq = e.cqx.CQ
	} else if e.cq, err = ctx.CreateCQ(4096, nil, 0); err != nil {
		t.Fatal(err)
	}
	attr := verbs.QPInitAttr{SendCQ: e.cq, RecvCQ: e.cq, QPType: o.typ,
		Cap: verbs.QPCap{MaxSendWR: o.sendWR, MaxRecvWR: o.recvWR, MaxSendSGE: 4, MaxRecvSGE: 4, MaxInlineData: 64}}
	if o.sendOps != 0 {
		e.qp, err = ctx.CreateQPEx(&verbs.QPInitAttrEx{QPInitAttr: attr, CompMask: verbs.QPInitAttrPD | verbs.QPInitAttrSendOpsFlags, PD: e.pd, SendOpsFlags: o.sendOps})
	} else {
		e.qp, err = e.pd.CreateQP(&attr)
	}
	if err != nil {
		t.Fatal(err)
	}
	e.buf = make([]byte, o.bufSize)
	if e.mr, err = e.pd.RegMR(e.buf, o.access); err != nil {
		t.Fatal(err)
	}
	return e
}

// close tears the end down, checking every step succeeds.
func (e *end) close() {
	for _, f := range []func() error{e.qp.Destroy, e.mr.Dereg, e.cq.Destroy, e.pd.Dealloc, e.ctx.Close} {
		if err := f(); err != nil {
			e.t.Error(err)
		}
	}
}

// connect moves both QPs to RTS, each pointing at the other.
func connect(t testing.TB, a, b *end, o *pairOpts) {
	t.Helper()
	psnA, psnB := rand.Uint32()&0xffffff, rand.Uint32()&0xffffff
	gidA, _ := a.ctx.QueryGID(1, 0)
	gidB, _ := b.ctx.QueryGID(1, 0)
	connectQP(t, a, gidB, b.qp.Num(), psnB, psnA, o)
	connectQP(t, b, gidA, a.qp.Num(), psnA, psnB, o)
}

// connectQP moves e's QP to RTS towards QP peerQPN at peerGID, expecting
// PSN rq and sending from PSN sq.
func connectQP(t testing.TB, e *end, peerGID verbs.GID, peerQPN, rq, sq uint32, o *pairOpts) {
	t.Helper()
	init := verbs.QPAttr{QPState: verbs.QPSInit, PortNum: 1, QPAccessFlags: o.access &^ verbs.AccessLocalWrite}
	mask := verbs.QPAttrState | verbs.QPAttrPKeyIndex | verbs.QPAttrPort | verbs.QPAttrAccessFlags
	if o.typ == verbs.QPTUD {
		mask = verbs.QPAttrState | verbs.QPAttrPKeyIndex | verbs.QPAttrPort | verbs.QPAttrQKey
	}
	if err := e.qp.Modify(&init, mask); err != nil {
		t.Fatal(err)
	}
	rtr := verbs.QPAttr{QPState: verbs.QPSRTR, PathMTU: o.mtu, DestQPNum: peerQPN, RQPSN: rq,
		MaxDestRdAtomic: o.rdAtomic, MinRNRTimer: o.minRNR,
		AHAttr: verbs.AHAttr{IsGlobal: true, PortNum: 1, GRH: verbs.GlobalRoute{DGID: peerGID, HopLimit: 64}}}
	mask = verbs.QPAttrState | verbs.QPAttrAV | verbs.QPAttrPathMTU | verbs.QPAttrDestQPN | verbs.QPAttrRQPSN
	if o.typ == verbs.QPTRC {
		mask |= verbs.QPAttrMaxDestRdAtomic | verbs.QPAttrMinRNRTimer
	}
	if err := e.qp.Modify(&rtr, mask); err != nil {
		t.Fatal(err)
	}
	rts := verbs.QPAttr{QPState: verbs.QPSRTS, SQPSN: sq, Timeout: o.timeout, RetryCnt: o.retry, RNRRetry: o.rnrRetry, MaxRdAtomic: o.rdAtomic}
	mask = verbs.QPAttrState | verbs.QPAttrSQPSN
	if o.typ == verbs.QPTRC {
		mask |= verbs.QPAttrTimeout | verbs.QPAttrRetryCnt | verbs.QPAttrRNRRetry | verbs.QPAttrMaxQPRdAtomic
	}
	if err := e.qp.Modify(&rts, mask); err != nil {
		t.Fatal(err)
	}
}

// newPair builds two connected ends over the given links.
func newPair(t testing.TB, la, lb link.Link, o pairOpts) (*end, *end) {
	t.Helper()
	o.defaults()
	a := newEnd(t, "rxe_a", la, &o)
	b := newEnd(t, "rxe_b", lb, &o)
	connect(t, a, b, &o)
	t.Cleanup(func() { a.close(); b.close() })
	return a, b
}

// setManualProgress puts the ends' contexts under manual progress
// (verbs.ProgressManual).
func setManualProgress(t testing.TB, ends ...*end) {
	t.Helper()
	for _, e := range ends {
		if err := e.ctx.SetProgress(verbs.ProgressManual); err != nil {
			t.Fatal(err)
		}
	}
}

// wait polls the end's CQ until n completions arrived or the deadline.
func (e *end) wait(n int, d time.Duration) []verbs.WC {
	e.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), d)
	defer cancel()
	var out []verbs.WC
	buf := make([]verbs.WC, 64)
	for len(out) < n {
		k, err := e.cq.Poll(buf[:min(len(buf), n-len(out))])
		if err != nil {
			e.t.Fatal(err)
		}
		out = append(out, buf[:k]...)
		if k == 0 {
			if err := e.cq.Wait(ctx); err != nil {
				e.t.Fatalf("waiting for %d completions, got %d: %v %s", n, len(out), err, describe(out))
			}
		}
	}
	return out
}

func describe(wcs []verbs.WC) string {
	s := ""
	for _, w := range wcs {
		s += fmt.Sprintf("\n  wr_id %d %s %s len %d", w.WRID, w.Opcode, w.Status, w.ByteLen)
	}
	return s
}

func fill(b []byte, seed byte) {
	for i := range b {
		b[i] = byte(i*7) + seed
	}
}
