package rxe

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"math/rand/v2"
	"net/netip"
	"os"
	"path/filepath"
	"runtime"
	"testing"
	"time"

	"github.com/rdmago/rdmago/rxe/link"
	"github.com/rdmago/rdmago/rxe/wire"
	"github.com/rdmago/rdmago/verbs"
)

// xrcRig is an XRC_SEND QP on device A connected to an XRC_RECV QP on
// device B, whose domain has two XRC SRQs: srq[0] with PD pd[0] and CQ
// cq[0], srq[1] with PD pd[1] and CQ cq[1]. B's memory region mr[i] is
// registered in pd[i]; A's in its own PD.
type xrcRig struct {
	t   testing.TB
	net *link.Network
	a   *end // the sender: its qp is the XRC_SEND QP
	b   struct {
		dev  *verbs.Device
		ctx  *verbs.Context
		xrcd *verbs.XRCD
		qp   *verbs.QP // XRC_RECV
		pd   [2]*verbs.PD
		cq   [2]*verbs.CQ
		srq  [2]*verbs.SRQ
		srqn [2]uint32
		buf  [2][]byte
		mr   [2]*verbs.MR
	}
	o pairOpts
}

const xrcAccess = verbs.AccessLocalWrite | verbs.AccessRemoteWrite | verbs.AccessRemoteRead | verbs.AccessRemoteAtomic

func newXRCRig(t testing.TB, seed uint64, f link.Faults, o pairOpts) *xrcRig {
	t.Helper()
	o.defaults()
	r := &xrcRig{t: t, net: link.NewNetwork(seed), o: o}
	la, err := r.net.Attach(netip.MustParseAddr("10.5.0.1"))
	if err != nil {
		t.Fatal(err)
	}
	lb, err := r.net.Attach(netip.MustParseAddr("10.5.0.2"))
	if err != nil {
		t.Fatal(err)
	}
	devA, err := NewDevice(Config{Name: "xrc_a", Links: []link.Link{la}, NetdevMTU: 9000})
	if err != nil {
		t.Fatal(err)
	}
	a := &end{t: t}
	if a.ctx, err = devA.Open(); err != nil {
		t.Fatal(err)
	}
	if a.pd, err = a.ctx.AllocPD(); err != nil {
		t.Fatal(err)
	}
	if a.cq, err = a.ctx.CreateCQ(4096, nil, 0); err != nil {
		t.Fatal(err)
	}
	a.qp, err = a.pd.CreateQP(&verbs.QPInitAttr{QPType: verbs.QPTXRCSend, SendCQ: a.cq,
		Cap: verbs.QPCap{MaxSendWR: o.sendWR, MaxSendSGE: 4, MaxInlineData: 64}})
	if err != nil {
		t.Fatal(err)
	}
	a.buf = make([]byte, o.bufSize)
	if a.mr, err = a.pd.RegMR(a.buf, xrcAccess); err != nil {
		t.Fatal(err)
	}
	r.a = a
	t.Cleanup(a.close)

	devB, err := NewDevice(Config{Name: "xrc_b", Links: []link.Link{lb}, NetdevMTU: 9000})
	if err != nil {
		t.Fatal(err)
	}
	b := &r.b
	b.dev = devB
	if b.ctx, err = devB.Open(); err != nil {
		t.Fatal(err)
	}
	if b.xrcd, err = b.ctx.OpenXRCD(nil); err != nil {
		t.Fatal(err)
	}
	for i := range 2 {
		if b.pd[i], err = b.ctx.AllocPD(); err != nil {
			t.Fatal(err)
		}
		if b.cq[i], err = b.ctx.CreateCQ(4096, nil, 0); err != nil {
			t.Fatal(err)
		}
		b.srq[i], b.srqn[i] = newXRCSRQ(t, b.pd[i], b.xrcd, b.cq[i], 1024)
		b.buf[i] = make([]byte, o.bufSize)
		if b.mr[i], err = b.pd[i].RegMR(b.buf[i], xrcAccess); err != nil {
			t.Fatal(err)
		}
	}
	if b.qp, err = b.xrcd.CreateQP(&verbs.QPInitAttr{QPType: verbs.QPTXRCRecv}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(r.closeB)
	r.connect()
	r.net.SetFaults(f)
	return r
}

// newXRCSRQ makes an XRC SRQ of x holding maxWR receives, with pd's
// memory, completing to cq, and returns it and its number.
func newXRCSRQ(t testing.TB, pd *verbs.PD, x *verbs.XRCD, cq *verbs.CQ, maxWR uint32) (*verbs.SRQ, uint32) {
	t.Helper()
	s, err := pd.Context().CreateSRQEx(&verbs.SRQInitAttrEx{Attr: verbs.SRQAttr{MaxWR: maxWR, MaxSGE: 2},
		CompMask: verbs.SRQInitAttrType | verbs.SRQInitAttrPD | verbs.SRQInitAttrXRCD | verbs.SRQInitAttrCQ,
		SRQType:  verbs.SRQTXRC, PD: pd, XRCD: x, CQ: cq})
	if err != nil {
		t.Fatal(err)
	}
	n, err := s.Num()
	if err != nil {
		t.Fatal(err)
	}
	return s, n
}

// closeB tears B down in order, checking every step.
func (r *xrcRig) closeB() {
	b := &r.b
	steps := []func() error{b.qp.Destroy}
	for i := range 2 {
		steps = append(steps, b.srq[i].Destroy, b.mr[i].Dereg, b.cq[i].Destroy, b.pd[i].Dealloc)
	}
	steps = append(steps, b.xrcd.Close, b.ctx.Close)
	for _, f := range steps {
		if err := f(); err != nil {
			r.t.Error(err)
		}
	}
}

// connect brings the XRC_SEND QP and the XRC_RECV QP to RTS, aimed at
// each other, each with the attributes its side of the table takes.
func (r *xrcRig) connect() {
	t, o := r.t, r.o
	gidA, _ := r.a.ctx.QueryGID(1, 0)
	gidB, _ := r.b.ctx.QueryGID(1, 0)
	psnA, psnB := rand.Uint32()&0xffffff, rand.Uint32()&0xffffff
	av := func(g verbs.GID) verbs.AHAttr {
		return verbs.AHAttr{IsGlobal: true, PortNum: 1, GRH: verbs.GlobalRoute{DGID: g, HopLimit: 64}}
	}
	init := verbs.QPAttr{QPState: verbs.QPSInit, PortNum: 1, QPAccessFlags: xrcAccess &^ verbs.AccessLocalWrite}
	initMask := verbs.QPAttrState | verbs.QPAttrPKeyIndex | verbs.QPAttrPort | verbs.QPAttrAccessFlags
	rtrMask := verbs.QPAttrState | verbs.QPAttrAV | verbs.QPAttrPathMTU | verbs.QPAttrDestQPN | verbs.QPAttrRQPSN
	steps := []struct {
		qp   *verbs.QP
		attr verbs.QPAttr
		mask verbs.QPAttrMask
	}{
		{r.a.qp, init, initMask},
		{r.a.qp, verbs.QPAttr{QPState: verbs.QPSRTR, PathMTU: o.mtu, DestQPNum: r.b.qp.Num(), RQPSN: psnB, AHAttr: av(gidB)}, rtrMask},
		{r.a.qp, verbs.QPAttr{QPState: verbs.QPSRTS, SQPSN: psnA, Timeout: o.timeout, RetryCnt: o.retry, RNRRetry: o.rnrRetry, MaxRdAtomic: o.rdAtomic},
			verbs.QPAttrState | verbs.QPAttrSQPSN | verbs.QPAttrTimeout | verbs.QPAttrRetryCnt | verbs.QPAttrRNRRetry | verbs.QPAttrMaxQPRdAtomic},
		{r.b.qp, init, initMask},
		{r.b.qp, verbs.QPAttr{QPState: verbs.QPSRTR, PathMTU: o.mtu, DestQPNum: r.a.qp.Num(), RQPSN: psnA, MaxDestRdAtomic: o.rdAtomic, MinRNRTimer: o.minRNR, AHAttr: av(gidA)},
			rtrMask | verbs.QPAttrMaxDestRdAtomic | verbs.QPAttrMinRNRTimer},
		{r.b.qp, verbs.QPAttr{QPState: verbs.QPSRTS, SQPSN: psnB, Timeout: o.timeout}, verbs.QPAttrState | verbs.QPAttrSQPSN | verbs.QPAttrTimeout},
	}
	for _, s := range steps {
		if err := s.qp.Modify(&s.attr, s.mask); err != nil {
			t.Fatal(err)
		}
	}
}

// waitCQ polls cq until n completions arrived or the deadline.
func waitCQ(t testing.TB, cq *verbs.CQ, n int, d time.Duration) []verbs.WC {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), d)
	defer cancel()
	var out []verbs.WC
	buf := make([]verbs.WC, 64)
	for len(out) < n {
		k, err := cq.Poll(buf[:min(len(buf), n-len(out))])
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, buf[:k]...)
		if k == 0 {
			if err := cq.Wait(ctx); err != nil {
				t.Fatalf("waiting for %d completions, got %d: %v %s", n, len(out), err, describe(out))
			}
		}
	}
	return out
}

// xrcTransfer runs one operation from A through SRQ i of B, as
// checkTransfer does for RC: data byte for byte, one completion each, the
// receive on SRQ i's CQ naming the XRC_RECV QP.
func (r *xrcRig) xrcTransfer(name string, op verbs.WROpcode, size, i, src int) {
	t := r.t
	t.Helper()
	const dst = region
	a, b := r.a, &r.b
	seed := byte(size*31 + int(op) + i)
	from, to := a.buf, b.buf[i]
	if op == verbs.WRRDMARead {
		from, to = b.buf[i], a.buf
	}
	fill(from[src:src+size], seed)
	clear(to[dst : dst+size+64])
	wantRecv := op == verbs.WRSend || op == verbs.WRSendWithImm || op == verbs.WRRDMAWriteWithImm
	if wantRecv {
		if err := b.srq[i].PostRecv([]verbs.RecvWR{{WRID: 77, SGList: []verbs.SGE{b.mr[i].SGE(dst, size+64)}}}); err != nil {
			t.Fatalf("%s: %v", name, err)
		}
	}
	wr := transferWR(op, a.mr, b.mr[i], size, src, dst)
	wr.RemoteSRQN = b.srqn[i]
	if err := a.qp.PostSend([]verbs.SendWR{wr}); err != nil {
		t.Fatalf("%s: %v", name, err)
	}
	if wc := a.wait(1, 20*time.Second)[0]; wc.Status != verbs.WCSuccess || wc.WRID != 88 {
		t.Fatalf("%s: requester completion %+v", name, wc)
	}
	if wantRecv {
		rc := waitCQ(t, b.cq[i], 1, 20*time.Second)[0]
		if rc.Status != verbs.WCSuccess || rc.WRID != 77 || rc.QPNum != b.qp.Num() || int(rc.ByteLen) != size {
			t.Fatalf("%s: responder completion %+v", name, rc)
		}
		if op != verbs.WRSend && (rc.WCFlags&verbs.WCWithImm == 0 || rc.ImmData != wr.ImmData) {
			t.Fatalf("%s: immediate %#x flags %#x", name, rc.ImmData, rc.WCFlags)
		}
	}
	if !bytes.Equal(to[dst:dst+size], from[src:src+size]) {
		t.Fatalf("%s: data differs", name)
	}
	if bytes.ContainsFunc(to[dst+size:dst+size+64], func(r rune) bool { return r != 0 }) {
		t.Fatalf("%s: written past the end", name)
	}
	time.Sleep(time.Millisecond)
	if n := a.cq.Len() + b.cq[0].Len() + b.cq[1].Len(); n != 0 {
		t.Fatalf("%s: %d extra completions", name, n)
	}
}

// TestXRCDeliversEveryOperationExactlyOnce runs every operation XRC has
// through both SRQs of the domain, at the sizes around the path MTU and
// up to a megabyte, under loss, reordering, duplication and corruption:
// data arrives byte for byte, receives complete on the named SRQ's CQ,
// each request completes once and atomics execute once.
func TestXRCDeliversEveryOperationExactlyOnce(t *testing.T) {
	const mtu = 1024
	sizes := []int{0, 1, mtu - 1, mtu, mtu + 1, 64 << 10, 1 << 20}
	ops := []verbs.WROpcode{verbs.WRSend, verbs.WRSendWithImm, verbs.WRRDMAWrite, verbs.WRRDMAWriteWithImm, verbs.WRRDMARead}
	for ci, c := range lossyCases {
		t.Run(c.name, func(t *testing.T) {
			r := newXRCRig(t, uint64(500+ci), c.faults, pairOpts{bufSize: 2*region + 8192, mtu: verbs.MTU1024, timeout: 13})
			k := 0
			for _, op := range ops {
				for _, size := range sizes {
					if size == 1<<20 && testing.Short() {
						continue
					}
					i := k % 2
					r.xrcTransfer(fmt.Sprintf("%s/%d/SRQ%d", op, size, i), op, size, i, k/2%2*4096)
					k++
				}
			}
			// Atomics through SRQ 1, whose PD's region holds the
			// counter.
			b := &end{t: t, buf: r.b.buf[1], mr: r.b.mr[1]}
			checkAtomicsExactlyOnce(t, r.a, b, 100, func(wr *verbs.SendWR) { wr.RemoteSRQN = r.b.srqn[1] })
		})
	}
}

// TestXRCOneSendQPReachesTwoSRQs is the point of XRC: one send QP and one
// receive QP serve two receive queues (two processes' worth, with their
// own PDs and CQs); each SEND lands in the SRQ it names, in order.
func TestXRCOneSendQPReachesTwoSRQs(t *testing.T) {
	r := newXRCRig(t, 21, link.Faults{}, pairOpts{})
	a, b := r.a, &r.b
	const n = 40
	for i := range 2 {
		var rwrs []verbs.RecvWR
		for k := range n / 2 {
			rwrs = append(rwrs, verbs.RecvWR{WRID: uint64(100*i + k), SGList: []verbs.SGE{b.mr[i].SGE(64*k, 64)}})
		}
		if err := b.srq[i].PostRecv(rwrs); err != nil {
			t.Fatal(err)
		}
	}
	var wrs []verbs.SendWR
	for k := range n {
		i := k % 2
		off := 64 * k
		copy(a.buf[off:], fmt.Sprintf("message %2d for SRQ %d", k, i))
		wrs = append(wrs, verbs.SendWR{WRID: uint64(k), Opcode: verbs.WRSend, SendFlags: verbs.SendSignaled,
			SGList: []verbs.SGE{a.mr.SGE(off, 20)}, RemoteSRQN: b.srqn[i]})
	}
	if err := a.qp.PostSend(wrs); err != nil {
		t.Fatal(err)
	}
	a.wait(n, 10*time.Second)
	for i := range 2 {
		wcs := waitCQ(t, b.cq[i], n/2, 10*time.Second)
		for k, wc := range wcs {
			if wc.Status != verbs.WCSuccess || wc.WRID != uint64(100*i+k) || wc.QPNum != b.qp.Num() || wc.ByteLen != 20 {
				t.Fatalf("SRQ %d completion %d: %+v", i, k, wc)
			}
			want := fmt.Sprintf("message %2d for SRQ %d", 2*k+i, i)
			if got := string(b.buf[i][64*k : 64*k+20]); got != want {
				t.Fatalf("SRQ %d buffer %d holds %q, want %q", i, k, got, want)
			}
		}
	}
}

// TestXRCRemoteAccessIsCheckedAgainstTheNamedSRQsPD: the responder checks
// an RDMA or atomic against the PD of the SRQ the request names, so an
// R_Key of the other SRQ's PD is a remote access error.
func TestXRCRemoteAccessIsCheckedAgainstTheNamedSRQsPD(t *testing.T) {
	ops := []verbs.WROpcode{verbs.WRRDMAWrite, verbs.WRRDMARead, verbs.WRAtomicFetchAndAdd}
	for _, op := range ops {
		t.Run(op.String(), func(t *testing.T) {
			r := newXRCRig(t, 22, link.Faults{}, pairOpts{})
			a, b := r.a, &r.b
			wr := verbs.SendWR{WRID: 5, Opcode: op, SendFlags: verbs.SendSignaled, SGList: []verbs.SGE{a.mr.SGE(0, 8)},
				RemoteAddr: b.mr[0].Addr(), RKey: b.mr[0].RKey(), CompareAdd: 1, RemoteSRQN: b.srqn[1]}
			if err := a.qp.PostSend([]verbs.SendWR{wr}); err != nil {
				t.Fatal(err)
			}
			if wc := a.wait(1, 10*time.Second)[0]; wc.Status != verbs.WCRemAccessErr {
				t.Fatalf("requester completion %s, want REM_ACCESS_ERR", wc.Status)
			}
			if binary.NativeEndian.Uint64(b.buf[0]) != 0 {
				t.Fatal("memory of the other SRQ's PD changed")
			}
		})
	}
}

// TestXRCRejectsAnSRQOutsideTheDomain: a request naming no SRQ of the
// receive QP's domain (no such number, or an SRQ of another domain) is an
// invalid request: NAKed, the sender's request fails with
// REM_INV_REQ_ERR, both QPs go to ERR, the receive side reports
// IBV_EVENT_QP_REQ_ERR on its QP, and nothing is received.
func TestXRCRejectsAnSRQOutsideTheDomain(t *testing.T) {
	tests := []struct {
		name string
		srqn func(r *xrcRig, foreign uint32) uint32
	}{
		{"no such SRQ", func(r *xrcRig, foreign uint32) uint32 { return max(r.b.srqn[0], r.b.srqn[1], foreign) + 1000 }},
		{"SRQ of another domain", func(_ *xrcRig, foreign uint32) uint32 { return foreign }},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := newXRCRig(t, 23, link.Faults{}, pairOpts{})
			a, b := r.a, &r.b
			other, err := b.ctx.OpenXRCD(nil)
			if err != nil {
				t.Fatal(err)
			}
			foreign, foreignN := newXRCSRQ(t, b.pd[0], other, b.cq[0], 4)
			t.Cleanup(func() {
				if err := foreign.Destroy(); err != nil {
					t.Error(err)
				}
				if err := other.Close(); err != nil {
					t.Error(err)
				}
			})
			for _, s := range []*verbs.SRQ{foreign, b.srq[0], b.srq[1]} {
				if err := s.PostRecv([]verbs.RecvWR{{WRID: 9, SGList: []verbs.SGE{b.mr[0].SGE(0, 64)}}}); err != nil {
					t.Fatal(err)
				}
			}
			wr := verbs.SendWR{WRID: 6, Opcode: verbs.WRSend, SendFlags: verbs.SendSignaled, SGList: []verbs.SGE{a.mr.SGE(0, 16)}, RemoteSRQN: tt.srqn(r, foreignN)}
			if err := a.qp.PostSend([]verbs.SendWR{wr}); err != nil {
				t.Fatal(err)
			}
			if wc := a.wait(1, 10*time.Second)[0]; wc.Status != verbs.WCRemInvReqErr || wc.WRID != 6 {
				t.Fatalf("requester completion %+v, want REM_INV_REQ_ERR", wc)
			}
			waitState(t, a.qp, verbs.QPSErr)
			waitState(t, b.qp, verbs.QPSErr)
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			defer cancel()
			for {
				ev, err := b.ctx.GetAsyncEvent(ctx)
				if err != nil {
					t.Fatalf("no IBV_EVENT_QP_REQ_ERR: %v", err)
				}
				if ev.Type == verbs.EventQPReqErr {
					if ev.QP != b.qp {
						t.Fatalf("the event names QP %p, want the XRC_RECV QP %p", ev.QP, b.qp)
					}
					break
				}
			}
			for i := range 2 {
				if n := b.cq[i].Len(); n != 0 {
					t.Fatalf("%d completions on SRQ %d's CQ", n, i)
				}
			}
		})
	}
}

// TestXRCEmptySRQIsRNRAndRetried: a SEND to an SRQ with no receive WQE is
// refused with an RNR NAK and retried until one is posted; once the RNR
// retries run out it fails with RNR_RETRY_EXC_ERR.
func TestXRCEmptySRQIsRNRAndRetried(t *testing.T) {
	t.Run("retried", func(t *testing.T) {
		r := newXRCRig(t, 24, link.Faults{}, pairOpts{})
		a, b := r.a, &r.b
		copy(a.buf, "late receiver")
		if err := a.qp.PostSend([]verbs.SendWR{{WRID: 1, Opcode: verbs.WRSend, SendFlags: verbs.SendSignaled,
			SGList: []verbs.SGE{a.mr.SGE(0, 13)}, RemoteSRQN: b.srqn[1]}}); err != nil {
			t.Fatal(err)
		}
		deadline := time.Now().Add(10 * time.Second)
		for c, _ := a.qp.QueryCounters(); c[verbs.CounterRcvdRNRErr] == 0; c, _ = a.qp.QueryCounters() {
			if time.Now().After(deadline) {
				t.Fatal("no RNR NAK came back")
			}
			time.Sleep(time.Millisecond)
		}
		if a.cq.Len() != 0 {
			t.Fatal("the SEND completed before a receive was posted")
		}
		if err := b.srq[1].PostRecv([]verbs.RecvWR{{WRID: 2, SGList: []verbs.SGE{b.mr[1].SGE(0, 64)}}}); err != nil {
			t.Fatal(err)
		}
		if wc := a.wait(1, 10*time.Second)[0]; wc.Status != verbs.WCSuccess {
			t.Fatalf("requester completion %s", wc.Status)
		}
		if wc := waitCQ(t, b.cq[1], 1, 10*time.Second)[0]; wc.Status != verbs.WCSuccess || wc.WRID != 2 || string(b.buf[1][:13]) != "late receiver" {
			t.Fatalf("receive %+v %q", wc, b.buf[1][:13])
		}
	})
	t.Run("rnr_retry 1 gives up", func(t *testing.T) {
		r := newXRCRig(t, 25, link.Faults{}, pairOpts{rnrRetry: 1})
		a, b := r.a, &r.b
		if err := a.qp.PostSend([]verbs.SendWR{{WRID: 1, Opcode: verbs.WRSend, SendFlags: verbs.SendSignaled,
			SGList: []verbs.SGE{a.mr.SGE(0, 8)}, RemoteSRQN: b.srqn[0]}}); err != nil {
			t.Fatal(err)
		}
		if wc := a.wait(1, 10*time.Second)[0]; wc.Status != verbs.WCRNRRetryExcErr {
			t.Fatalf("requester completion %s, want RNR_RETRY_EXC_ERR", wc.Status)
		}
	})
}

// TestXRCSharedDomainAndOpenQP: contexts of one process that open a
// domain through the same file share it, so the second can open the
// first's XRC_RECV QP by number and receive through it; the QP serves
// until its last handle is destroyed. A domain of its own cannot open
// the QP, and O_EXCL refuses a file whose domain exists.
func TestXRCSharedDomainAndOpenQP(t *testing.T) {
	r := newXRCRig(t, 26, link.Faults{}, pairOpts{})
	b := &r.b
	f, err := os.Create(filepath.Join(t.TempDir(), "xrc_domain"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	fileAttr := func(oflags int) *verbs.XRCDInitAttr {
		return &verbs.XRCDInitAttr{CompMask: verbs.XRCDInitAttrFD | verbs.XRCDInitAttrOFlags, FD: int(f.Fd()), OFlags: oflags}
	}
	// A second context of B's device: the same hardware, another open.
	ctx2, err := b.dev.Open()
	if err != nil {
		t.Fatal(err)
	}
	defer ctx2.Close()
	if _, err := ctx2.OpenXRCD(fileAttr(0)); !errors.Is(err, verbs.ErrInvalidArgument) {
		t.Fatalf("opening a file's domain that does not exist without O_CREAT: %v", err)
	}
	x1, err := b.ctx.OpenXRCD(fileAttr(os.O_CREATE))
	if err != nil {
		t.Fatal(err)
	}
	defer x1.Close()
	x2, err := ctx2.OpenXRCD(fileAttr(os.O_CREATE))
	if err != nil {
		t.Fatal(err)
	}
	defer x2.Close()
	if _, err := ctx2.OpenXRCD(fileAttr(os.O_CREATE | os.O_EXCL)); !errors.Is(err, verbs.ErrInvalidArgument) {
		t.Fatalf("O_EXCL on a file whose domain exists: %v", err)
	}
	// The XRC_RECV QP and an SRQ in x1; the SRQ's PD and CQ are ctx's.
	recv, err := x1.CreateQP(&verbs.QPInitAttr{QPType: verbs.QPTXRCRecv})
	if err != nil {
		t.Fatal(err)
	}
	srq, srqn := newXRCSRQ(t, b.pd[0], x1, b.cq[0], 8)
	defer srq.Destroy()
	mine, err := ctx2.OpenXRCD(nil)
	if err != nil {
		t.Fatal(err)
	}
	defer mine.Close()
	openAttr := func(x *verbs.XRCD) *verbs.QPOpenAttr {
		return &verbs.QPOpenAttr{CompMask: verbs.QPOpenAttrNum | verbs.QPOpenAttrXRCD | verbs.QPOpenAttrType, QPNum: recv.Num(), XRCD: x, QPType: verbs.QPTXRCRecv}
	}
	if _, err := ctx2.OpenQP(openAttr(mine)); !errors.Is(err, verbs.ErrNoEntry) {
		t.Fatalf("opening the QP through another domain: %v, want ErrNoEntry", err)
	}
	opened, err := ctx2.OpenQP(openAttr(x2))
	if err != nil {
		t.Fatal(err)
	}
	// Aim the sender at the shared QP; bring that QP up through the
	// opened handle, after destroying the creator's.
	if err := recv.Destroy(); err != nil {
		t.Fatal(err)
	}
	r.retarget(opened)
	wc := r.sendThrough(srq, srqn, b.cq[0], "through the opened QP")
	if wc.QPNum != opened.Num() {
		t.Fatalf("receive through QP %#x, want %#x", wc.QPNum, opened.Num())
	}
	// The last handle takes the QP with it: the device forgets the
	// number.
	num := opened.Num()
	if err := opened.Destroy(); err != nil {
		t.Fatal(err)
	}
	if _, err := ctx2.OpenQP(openAttr(x2)); !errors.Is(err, verbs.ErrNoEntry) {
		t.Fatalf("opening QP %#x after its last handle: %v, want ErrNoEntry", num, err)
	}
}

// retarget connects the sender anew, to the XRC_RECV QP (handle) qp.
func (r *xrcRig) retarget(qp *verbs.QP) {
	r.t.Helper()
	if err := r.a.qp.Modify(&verbs.QPAttr{QPState: verbs.QPSReset}, verbs.QPAttrState); err != nil {
		r.t.Fatal(err)
	}
	keep := r.b.qp // connect aims at the rig's; the cleanup destroys it
	r.b.qp = qp
	r.connect()
	r.b.qp = keep
}

// sendThrough posts a receive of 64 bytes at the start of B's first
// region to srq, SENDs msg to it by number, and returns the receive's
// completion on cq, having checked it and the data.
func (r *xrcRig) sendThrough(srq *verbs.SRQ, srqn uint32, cq *verbs.CQ, msg string) verbs.WC {
	t, a, b := r.t, r.a, &r.b
	t.Helper()
	clear(b.buf[0][:64])
	if err := srq.PostRecv([]verbs.RecvWR{{WRID: 3, SGList: []verbs.SGE{b.mr[0].SGE(0, 64)}}}); err != nil {
		t.Fatal(err)
	}
	copy(a.buf, msg)
	if err := a.qp.PostSend([]verbs.SendWR{{WRID: 4, Opcode: verbs.WRSend, SendFlags: verbs.SendSignaled,
		SGList: []verbs.SGE{a.mr.SGE(0, len(msg))}, RemoteSRQN: srqn}}); err != nil {
		t.Fatal(err)
	}
	if wc := a.wait(1, 10*time.Second)[0]; wc.Status != verbs.WCSuccess {
		t.Fatalf("requester completion %s", wc.Status)
	}
	wc := waitCQ(t, cq, 1, 10*time.Second)[0]
	if wc.Status != verbs.WCSuccess || wc.WRID != 3 || string(b.buf[0][:len(msg)]) != msg {
		t.Fatalf("receive %+v %q", wc, b.buf[0][:len(msg)])
	}
	return wc
}

// TestXRCContextCloseLeavesOtherContextsHandles: closing a context closes
// its handles on XRC_RECV QPs, its XRC SRQs and its opens of domains; a
// QP another context holds a handle on keeps serving, and goes with the
// last context that held one, as does a domain shared through a file.
func TestXRCContextCloseLeavesOtherContextsHandles(t *testing.T) {
	r := newXRCRig(t, 29, link.Faults{}, pairOpts{})
	b := &r.b
	f, err := os.Create(filepath.Join(t.TempDir(), "xrc_domain"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	attr := &verbs.XRCDInitAttr{CompMask: verbs.XRCDInitAttrFD | verbs.XRCDInitAttrOFlags, FD: int(f.Fd()), OFlags: os.O_CREATE}
	var ctx [2]*verbs.Context
	var x [2]*verbs.XRCD
	for i := range ctx {
		if ctx[i], err = b.dev.Open(); err != nil {
			t.Fatal(err)
		}
		defer ctx[i].Close()
		if x[i], err = ctx[i].OpenXRCD(attr); err != nil {
			t.Fatal(err)
		}
	}
	h := verbs.QPDriverOf(b.qp).(*xrcHandle).hw
	key, err := fileIdentity(int(f.Fd()))
	if err != nil {
		t.Fatal(err)
	}
	// Context 0 makes the QP; context 1 opens it and has the SRQ.
	recv, err := x[0].CreateQP(&verbs.QPInitAttr{QPType: verbs.QPTXRCRecv})
	if err != nil {
		t.Fatal(err)
	}
	num := recv.Num()
	opened, err := ctx[1].OpenQP(&verbs.QPOpenAttr{CompMask: verbs.QPOpenAttrNum | verbs.QPOpenAttrXRCD | verbs.QPOpenAttrType,
		QPNum: num, XRCD: x[1], QPType: verbs.QPTXRCRecv})
	if err != nil {
		t.Fatal(err)
	}
	pd, err := ctx[1].AllocPD()
	if err != nil {
		t.Fatal(err)
	}
	cq, err := ctx[1].CreateCQ(16, nil, 0)
	if err != nil {
		t.Fatal(err)
	}
	srq, srqn := newXRCSRQ(t, pd, x[1], cq, 8)
	// The receive buffer must be in the SRQ's PD.
	mr, err := pd.RegMR(b.buf[0], xrcAccess)
	if err != nil {
		t.Fatal(err)
	}
	b.mr[0], mr = mr, b.mr[0]
	defer func() { b.mr[0] = mr }()
	r.retarget(opened)
	r.sendThrough(srq, srqn, cq, "before the close")
	if err := ctx[0].Close(); err != nil {
		t.Fatal(err)
	}
	r.sendThrough(srq, srqn, cq, "after the creator's close")
	h.mu.RLock()
	_, shared := h.xrcds[key]
	h.mu.RUnlock()
	if !shared {
		t.Fatal("the file's domain went with one of the two contexts that opened it")
	}
	if err := ctx[1].Close(); err != nil {
		t.Fatal(err)
	}
	h.mu.RLock()
	_, qpLeft := h.qps[num]
	_, domainLeft := h.xrcds[key]
	_, srqLeft := h.srqs[srqn]
	h.mu.RUnlock()
	if qpLeft || domainLeft || srqLeft {
		t.Fatalf("after the last context: QP left %v, domain left %v, SRQ left %v", qpLeft, domainLeft, srqLeft)
	}
}

// TestXRCPostChecks: the requests an XRC_SEND QP refuses at post time.
func TestXRCPostChecks(t *testing.T) {
	r := newXRCRig(t, 27, link.Faults{}, pairOpts{})
	a := r.a
	tests := []struct {
		name string
		wr   verbs.SendWR
	}{
		{"SEND_WITH_INV", verbs.SendWR{Opcode: verbs.WRSendWithInv, SGList: []verbs.SGE{a.mr.SGE(0, 8)}}},
		{"remote_srqn above 24 bits", verbs.SendWR{Opcode: verbs.WRSend, SGList: []verbs.SGE{a.mr.SGE(0, 8)}, RemoteSRQN: 1 << 24}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if err := a.qp.PostSend([]verbs.SendWR{tt.wr}); !errors.Is(err, verbs.ErrInvalidArgument) {
				t.Fatalf("PostSend: %v, want ErrInvalidArgument", err)
			}
		})
	}
}

// TestXRCDeviceAdvertisesXRC: the device reports IBV_DEVICE_XRC.
func TestXRCDeviceAdvertisesXRC(t *testing.T) {
	r := newXRCRig(t, 28, link.Faults{}, pairOpts{})
	attr, err := r.a.ctx.QueryDevice()
	if err != nil {
		t.Fatal(err)
	}
	if attr.DeviceCapFlags&verbs.DeviceXRC == 0 {
		t.Fatalf("device_cap_flags %#x lack IBV_DEVICE_XRC", attr.DeviceCapFlags)
	}
}

// FuzzReceiveXRC feeds arbitrary packets to a live XRC_RECV QP through
// the device's receive entry point, their XRCETH naming either SRQ of the
// domain, an SRQ of another domain or none. Whatever arrives, nothing may
// crash, no memory outside the registered window may change (the window
// is in SRQ 0's PD, so a request through SRQ 1 must not reach it either),
// and a QP driven into ERR is brought back for the next input.
func FuzzReceiveXRC(f *testing.F) {
	const rqPSN = 0x100
	r := newXRCRig(f, 8, link.Faults{}, pairOpts{bufSize: 8192})
	b := &r.b
	q := verbs.QPDriverOf(b.qp).(*xrcHandle).qp
	arena := bytes.Repeat([]byte{0xa5}, 3*4096)
	mr, err := b.pd[0].RegMR(arena[4096:2*4096], xrcAccess)
	if err != nil {
		f.Fatal(err)
	}
	f.Cleanup(func() { mr.Dereg() })
	other, err := b.ctx.OpenXRCD(nil)
	if err != nil {
		f.Fatal(err)
	}
	foreign, foreignN := newXRCSRQ(f, b.pd[0], other, b.cq[0], 4)
	f.Cleanup(func() { foreign.Destroy(); other.Close() })
	gidA, _ := r.a.ctx.QueryGID(1, 0)
	reconnect := func() {
		steps := []struct {
			attr verbs.QPAttr
			mask verbs.QPAttrMask
		}{
			{verbs.QPAttr{QPState: verbs.QPSReset}, verbs.QPAttrState},
			{verbs.QPAttr{QPState: verbs.QPSInit, PortNum: 1, QPAccessFlags: xrcAccess &^ verbs.AccessLocalWrite},
				verbs.QPAttrState | verbs.QPAttrPKeyIndex | verbs.QPAttrPort | verbs.QPAttrAccessFlags},
			{verbs.QPAttr{QPState: verbs.QPSRTR, PathMTU: verbs.MTU1024, DestQPNum: r.a.qp.Num(), RQPSN: rqPSN, MaxDestRdAtomic: 4, MinRNRTimer: 1,
				AHAttr: verbs.AHAttr{IsGlobal: true, PortNum: 1, GRH: verbs.GlobalRoute{DGID: gidA}}},
				verbs.QPAttrState | verbs.QPAttrAV | verbs.QPAttrPathMTU | verbs.QPAttrDestQPN | verbs.QPAttrRQPSN | verbs.QPAttrMaxDestRdAtomic | verbs.QPAttrMinRNRTimer},
			{verbs.QPAttr{QPState: verbs.QPSRTS, SQPSN: 0x200, Timeout: 1}, verbs.QPAttrState | verbs.QPAttrSQPSN | verbs.QPAttrTimeout},
		}
		for _, s := range steps {
			if err := b.qp.Modify(&s.attr, s.mask); err != nil {
				f.Fatal(err)
			}
		}
		// Keep a receive WQE in each SRQ (a full one has plenty).
		for i, s := range []*verbs.SRQ{b.srq[0], b.srq[1], foreign} {
			err := s.PostRecv([]verbs.RecvWR{{WRID: uint64(i), SGList: []verbs.SGE{mr.SGE(2048*(i%2), 2048)}}})
			if err != nil && !errors.Is(err, verbs.ErrNoMemory) {
				panic(err)
			}
		}
		onOwner(q, func() {})
	}
	reconnect()
	for _, srqn := range []uint32{b.srqn[0], b.srqn[1], foreignN, 0xffffff} {
		for _, op := range []wire.OpCode{wire.XRCSendOnly, wire.XRCSendFirst, wire.XRCWriteOnly, wire.XRCWriteFirst, wire.XRCWriteOnlyWithImmediate,
			wire.XRCReadRequest, wire.XRCCompareSwap, wire.XRCFetchAdd, wire.XRCSendLastWithImmediate, wire.XRCSendOnlyWithInvalidate,
			wire.XRCAcknowledge, wire.RCSendOnly} {
			addFuzzSeed(f, wire.Headers{BTH: wire.BTHFields{OpCode: op, PKey: 0xffff, PSN: rqPSN, AckReq: true}, XRCSRQN: srqn}, mr, true)
		}
	}
	wcs := make([]verbs.WC, 64)
	f.Fuzz(func(t *testing.T, pkt []byte, atEPSN bool) {
		if !deliverFuzzed(t, q, pkt, atEPSN, arena) {
			return
		}
		for _, cq := range []*verbs.CQ{b.cq[0], b.cq[1], r.a.cq} {
			cq.Poll(wcs)
		}
		if b.qp.State() == verbs.QPSErr {
			reconnect()
		}
	})
}

// fileDomains opens, on n new contexts of B's device, the XRC domain of
// one new file; the contexts close at the end of the test.
func (r *xrcRig) fileDomains(n int) ([]*verbs.Context, []*verbs.XRCD) {
	t := r.t
	t.Helper()
	f, err := os.Create(filepath.Join(t.TempDir(), "xrc_domain"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { f.Close() })
	attr := &verbs.XRCDInitAttr{CompMask: verbs.XRCDInitAttrFD | verbs.XRCDInitAttrOFlags, FD: int(f.Fd()), OFlags: os.O_CREATE}
	ctx, x := make([]*verbs.Context, n), make([]*verbs.XRCD, n)
	for i := range n {
		if ctx[i], err = r.b.dev.Open(); err != nil {
			t.Fatal(err)
		}
		c := ctx[i]
		t.Cleanup(func() { c.Close() })
		if x[i], err = ctx[i].OpenXRCD(attr); err != nil {
			t.Fatal(err)
		}
	}
	return ctx, x
}

// TestXRCHandleOfAClosedContextFails: once the context that holds a
// handle on an XRC_RECV QP is closed, the handle fails with ErrClosed, as
// every object of a closed context does, and leaves the QP, which another
// context still holds, as it was.
func TestXRCHandleOfAClosedContextFails(t *testing.T) {
	r := newXRCRig(t, 30, link.Faults{}, pairOpts{})
	ctx, x := r.fileDomains(2)
	created, err := x[0].CreateQP(&verbs.QPInitAttr{QPType: verbs.QPTXRCRecv})
	if err != nil {
		t.Fatal(err)
	}
	opened, err := ctx[1].OpenQP(&verbs.QPOpenAttr{CompMask: verbs.QPOpenAttrNum | verbs.QPOpenAttrXRCD | verbs.QPOpenAttrType,
		QPNum: created.Num(), XRCD: x[1], QPType: verbs.QPTXRCRecv})
	if err != nil {
		t.Fatal(err)
	}
	if err := ctx[0].Close(); err != nil {
		t.Fatal(err)
	}
	init := verbs.QPAttr{QPState: verbs.QPSInit, PortNum: 1, QPAccessFlags: verbs.AccessRemoteWrite}
	if err := created.Modify(&init, verbs.QPAttrState|verbs.QPAttrPKeyIndex|verbs.QPAttrPort|verbs.QPAttrAccessFlags); !errors.Is(err, verbs.ErrClosed) {
		t.Errorf("modifying through the closed context's handle: %v, want ErrClosed", err)
	}
	if _, _, err := created.Query(); !errors.Is(err, verbs.ErrClosed) {
		t.Errorf("querying through the closed context's handle: %v, want ErrClosed", err)
	}
	if a, _, err := opened.Query(); err != nil || a.QPState != verbs.QPSReset {
		t.Errorf("the QP through the other context's handle: %s %v, want RESET", a.QPState, err)
	}
	if err := opened.Destroy(); err != nil {
		t.Fatal(err)
	}
}

// TestXRCCQOverrunIsReportedToTheCQsContext: when the CQ of an XRC SRQ
// overruns, IBV_EVENT_CQ_ERR naming that CQ goes to the context the CQ
// belongs to, even when another context made the XRC_RECV QP.
func TestXRCCQOverrunIsReportedToTheCQsContext(t *testing.T) {
	r := newXRCRig(t, 31, link.Faults{}, pairOpts{})
	ctx, x := r.fileDomains(2)
	recv, err := x[0].CreateQP(&verbs.QPInitAttr{QPType: verbs.QPTXRCRecv})
	if err != nil {
		t.Fatal(err)
	}
	defer recv.Destroy()
	pd, err := ctx[1].AllocPD()
	if err != nil {
		t.Fatal(err)
	}
	cq, err := ctx[1].CreateCQ(1, nil, 0)
	if err != nil {
		t.Fatal(err)
	}
	srq, srqn := newXRCSRQ(t, pd, x[1], cq, 64)
	buf := make([]byte, 4096)
	mr, err := pd.RegMR(buf, verbs.AccessLocalWrite)
	if err != nil {
		t.Fatal(err)
	}
	n := cq.Cap() + 1
	for i := range n {
		if err := srq.PostRecv([]verbs.RecvWR{{WRID: uint64(i), SGList: []verbs.SGE{mr.SGE(64*i, 64)}}}); err != nil {
			t.Fatal(err)
		}
	}
	r.retarget(recv)
	for i := range n {
		if err := r.a.qp.PostSend([]verbs.SendWR{{WRID: uint64(i), Opcode: verbs.WRSend, SGList: []verbs.SGE{r.a.mr.SGE(0, 8)}, RemoteSRQN: srqn}}); err != nil {
			t.Fatal(err)
		}
	}
	wait, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	for {
		ev, err := ctx[1].GetAsyncEvent(wait)
		if err != nil {
			t.Fatalf("no IBV_EVENT_CQ_ERR on the CQ's context: %v", err)
		}
		if ev.Type == verbs.EventCQErr {
			if ev.CQ != cq {
				t.Fatalf("IBV_EVENT_CQ_ERR names CQ %p, want the SRQ's %p", ev.CQ, cq)
			}
			break
		}
	}
}

// TestXRCOpenQPWhileTheLastHandlesContextCloses: ibv_open_qp coming
// while the context that holds a QP's last handle closes either fails
// with ErrNoEntry or gives a handle on a live QP, never one on a QP the
// close then destroys under it.
func TestXRCOpenQPWhileTheLastHandlesContextCloses(t *testing.T) {
	r := newXRCRig(t, 32, link.Faults{}, pairOpts{})
	ctx, x := r.fileDomains(2)
	created, err := x[0].CreateQP(&verbs.QPInitAttr{QPType: verbs.QPTXRCRecv})
	if err != nil {
		t.Fatal(err)
	}
	// The closing context has an XRC SRQ too: holding the SRQ's lock
	// stops its close after it has let go of its QP handles and before
	// it destroys what they held.
	pd, err := ctx[0].AllocPD()
	if err != nil {
		t.Fatal(err)
	}
	cq, err := ctx[0].CreateCQ(4, nil, 0)
	if err != nil {
		t.Fatal(err)
	}
	held, _ := newXRCSRQ(t, pd, x[0], cq, 4)
	s := verbs.SRQDriverOf(held).(*srq)
	q := verbs.QPDriverOf(created).(*xrcHandle).qp
	s.mu.Lock()
	closed := make(chan error)
	go func() { closed <- ctx[0].Close() }()
	for {
		q.mu.Lock()
		n := len(q.handles)
		q.mu.Unlock()
		if n == 0 {
			break
		}
		runtime.Gosched()
	}
	opened, err := ctx[1].OpenQP(&verbs.QPOpenAttr{CompMask: verbs.QPOpenAttrNum | verbs.QPOpenAttrXRCD | verbs.QPOpenAttrType,
		QPNum: created.Num(), XRCD: x[1], QPType: verbs.QPTXRCRecv})
	s.mu.Unlock()
	if err := <-closed; err != nil {
		t.Fatal(err)
	}
	switch {
	case errors.Is(err, verbs.ErrNoEntry):
		// The QP went with its last handle.
	case err != nil:
		t.Fatal(err)
	default:
		init := verbs.QPAttr{QPState: verbs.QPSInit, PortNum: 1, QPAccessFlags: verbs.AccessRemoteWrite}
		if err := opened.Modify(&init, verbs.QPAttrState|verbs.QPAttrPKeyIndex|verbs.QPAttrPort|verbs.QPAttrAccessFlags); err != nil {
			t.Fatalf("the handle opened during the close: %v", err)
		}
		if err := opened.Destroy(); err != nil {
			t.Fatal(err)
		}
	}
}
