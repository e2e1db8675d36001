package rxe

import (
	"bytes"
	"context"
	"testing"
	"time"

	"github.com/rdmago/rdmago/verbs"
)

// edgeTarget is the responder's memory of a protection edge case: a
// region registered in the middle of a buffer whose guard bytes no key
// grants, and the buffer's contents before the operation.
type edgeTarget struct {
	buf, before []byte
	mr          *verbs.MR
}

const (
	edgeGuard  = 64
	edgeRegion = 8192
	edgeAll    = verbs.AccessLocalWrite | verbs.AccessRemoteWrite | verbs.AccessRemoteRead | verbs.AccessRemoteAtomic | verbs.AccessMWBind
)

func newEdgeTarget(t *testing.T, pd *verbs.PD, access verbs.AccessFlags) *edgeTarget {
	t.Helper()
	tg := &edgeTarget{buf: make([]byte, edgeGuard+edgeRegion+edgeGuard)}
	for i := range tg.buf {
		tg.buf[i] = byte(i*11 + 3)
	}
	tg.before = bytes.Clone(tg.buf)
	mr, err := pd.RegMR(tg.buf[edgeGuard:edgeGuard+edgeRegion], access)
	if err != nil {
		t.Fatal(err)
	}
	tg.mr = mr
	t.Cleanup(func() { tg.mr.Dereg() })
	return tg
}

// bindWindow binds a memory window of typ over [off, off+n) of the
// region with rights, on b's QP, and returns its key.
func bindWindow(t *testing.T, b *end, tg *edgeTarget, typ verbs.MWType, off, n uint64, rights verbs.AccessFlags) uint32 {
	t.Helper()
	mw, err := b.pd.AllocMW(typ)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { mw.Dealloc() })
	info := verbs.MWBindInfo{MR: tg.mr, Addr: tg.mr.Addr() + off, Length: n, AccessFlags: rights}
	var rkey uint32
	if typ == verbs.MWType1 {
		if rkey, err = b.qp.BindMW(mw, &verbs.MWBind{WRID: 900, SendFlags: verbs.SendSignaled, BindInfo: info}); err != nil {
			t.Fatal(err)
		}
	} else {
		rkey = verbs.IncRKey(mw.RKey())
		if err := b.qp.PostSend([]verbs.SendWR{{WRID: 900, Opcode: verbs.WRBindMW, SendFlags: verbs.SendSignaled,
			BindMW: verbs.BindMWWR{MW: mw, RKey: rkey, BindInfo: info}}}); err != nil {
			t.Fatal(err)
		}
	}
	if wc := b.wait(1, 5*time.Second)[0]; wc.Status != verbs.WCSuccess || wc.Opcode != verbs.WCBindMW {
		t.Fatalf("bind completion %+v", wc)
	}
	return rkey
}

// TestRemoteAccessEdgesAsRxeDoes pins down, beyond the conformance suite's
// cases, what this device does at the edges of remote access: zero-length
// RDMA is not checked at all, neither key, bounds, the region's rights nor
// the QP's (IBTA vol. 1 §9.4.1.1.2 lets a responder skip the key; Linux
// rxe skips key and bounds, but refuses an operation the QP does not
// enable, whatever its length, with a NAK "invalid request"), and touches
// nothing; the QP's own access flags bound what any key grants, a refusal
// being IBV_WC_REM_ACCESS_ERR as for a key; a memory window grants its own range and rights
// only; SEND_WITH_INV of a key that names no type 2 window bound to the
// receiving QP fails on both sides with IBV_WC_REM_INV_REQ_ERR. Every
// refusal leaves both QPs in ERR with the responder's asynchronous event,
// and the responder's memory, guard bytes included, unchanged.
func TestRemoteAccessEdgesAsRxeDoes(t *testing.T) {
	const src, dst = 0, 65536
	// write is an RDMA WRITE; the test adds its SGE (none for zero
	// length).
	write := func(va uint64, rkey uint32) verbs.SendWR {
		return verbs.SendWR{Opcode: verbs.WRRDMAWrite, RemoteAddr: va, RKey: rkey}
	}
	for _, tc := range []struct {
		name string
		// access is the region's rights (0: all); qpAccess, if not 0,
		// replaces the responder QP's remote access flags.
		access, qpAccess verbs.AccessFlags
		// wr builds the request; it may bind windows on b.
		wr func(t *testing.T, a, b *end, tg *edgeTarget) verbs.SendWR
		// n is the request's length from a's buffer (src for writes,
		// dst for reads).
		n int
		// wrote is where a granted WRITE lands, as a region offset.
		wrote int
		// want is the requester's status; event the responder's
		// asynchronous event on a refusal; recv the responder's receive
		// status for a SEND.
		want  verbs.WCStatus
		event verbs.EventType
		recv  verbs.WCStatus
	}{
		{name: "zero-length WRITE with a key that names nothing", want: verbs.WCSuccess,
			wr: func(_ *testing.T, _, _ *end, tg *edgeTarget) verbs.SendWR {
				return write(tg.mr.Addr(), tg.mr.RKey()^0xff00)
			}},
		{name: "zero-length READ with a key that names nothing", want: verbs.WCSuccess,
			wr: func(_ *testing.T, _, _ *end, tg *edgeTarget) verbs.SendWR {
				return verbs.SendWR{Opcode: verbs.WRRDMARead, RemoteAddr: tg.mr.Addr(), RKey: tg.mr.RKey() ^ 0xff00}
			}},
		{name: "zero-length WRITE far past the region", want: verbs.WCSuccess,
			wr: func(_ *testing.T, _, _ *end, tg *edgeTarget) verbs.SendWR {
				return write(tg.mr.Addr()+1<<40, tg.mr.RKey())
			}},
		{name: "zero-length WRITE at address 0", want: verbs.WCSuccess,
			wr: func(_ *testing.T, _, _ *end, tg *edgeTarget) verbs.SendWR { return write(0, tg.mr.RKey()) }},
		{name: "zero-length WRITE to a region without remote write", access: edgeAll &^ verbs.AccessRemoteWrite, want: verbs.WCSuccess,
			wr: func(_ *testing.T, _, _ *end, tg *edgeTarget) verbs.SendWR { return write(tg.mr.Addr(), tg.mr.RKey()) }},
		{name: "zero-length WRITE with a deregistered region's key", want: verbs.WCSuccess,
			wr: func(t *testing.T, _, _ *end, tg *edgeTarget) verbs.SendWR {
				if err := tg.mr.Dereg(); err != nil {
					t.Fatal(err)
				}
				return write(tg.mr.Addr(), tg.mr.RKey())
			}},
		{name: "zero-length WRITE to a QP without remote write", qpAccess: verbs.AccessRemoteRead, want: verbs.WCSuccess,
			wr: func(_ *testing.T, _, _ *end, tg *edgeTarget) verbs.SendWR { return write(tg.mr.Addr(), tg.mr.RKey()) }},
		{name: "WRITE to a QP without remote write", qpAccess: verbs.AccessRemoteRead | verbs.AccessRemoteAtomic, n: 16,
			want: verbs.WCRemAccessErr, event: verbs.EventQPAccessErr,
			wr: func(_ *testing.T, _, _ *end, tg *edgeTarget) verbs.SendWR { return write(tg.mr.Addr(), tg.mr.RKey()) }},
		{name: "READ from a QP without remote read", qpAccess: verbs.AccessRemoteWrite, n: 16,
			want: verbs.WCRemAccessErr, event: verbs.EventQPAccessErr,
			wr: func(_ *testing.T, _, _ *end, tg *edgeTarget) verbs.SendWR {
				return verbs.SendWR{Opcode: verbs.WRRDMARead, RemoteAddr: tg.mr.Addr(), RKey: tg.mr.RKey()}
			}},
		{name: "atomic on a QP without remote atomic", qpAccess: verbs.AccessRemoteWrite | verbs.AccessRemoteRead, n: 8,
			want: verbs.WCRemAccessErr, event: verbs.EventQPAccessErr,
			wr: func(_ *testing.T, _, _ *end, tg *edgeTarget) verbs.SendWR {
				return verbs.SendWR{Opcode: verbs.WRAtomicFetchAndAdd, RemoteAddr: tg.mr.Addr(), RKey: tg.mr.RKey(), CompareAdd: 1}
			}},
		{name: "WRITE wrapping past 2^64", n: 64, want: verbs.WCRemAccessErr, event: verbs.EventQPAccessErr,
			wr: func(_ *testing.T, _, _ *end, tg *edgeTarget) verbs.SendWR { return write(^uint64(0)-31, tg.mr.RKey()) }},
		{name: "WRITE to a region of another PD", n: 16, want: verbs.WCRemAccessErr, event: verbs.EventQPAccessErr,
			wr: func(t *testing.T, _, b *end, tg *edgeTarget) verbs.SendWR {
				pd2, err := b.ctx.AllocPD()
				if err != nil {
					t.Fatal(err)
				}
				mr2, err := pd2.RegMR(tg.buf[edgeGuard:edgeGuard+edgeRegion], edgeAll)
				if err != nil {
					t.Fatal(err)
				}
				t.Cleanup(func() { mr2.Dereg(); pd2.Dealloc() })
				return write(mr2.Addr(), mr2.RKey())
			}},
		{name: "WRITE to the last bytes of a type 1 window", n: 16, want: verbs.WCSuccess, wrote: 4096 + 1024 - 16,
			wr: func(t *testing.T, _, b *end, tg *edgeTarget) verbs.SendWR {
				rkey := bindWindow(t, b, tg, verbs.MWType1, 4096, 1024, verbs.AccessRemoteWrite)
				return write(tg.mr.Addr()+4096+1024-16, rkey)
			}},
		{name: "WRITE one byte past a type 1 window", n: 16, want: verbs.WCRemAccessErr, event: verbs.EventQPAccessErr,
			wr: func(t *testing.T, _, b *end, tg *edgeTarget) verbs.SendWR {
				rkey := bindWindow(t, b, tg, verbs.MWType1, 4096, 1024, verbs.AccessRemoteWrite)
				return write(tg.mr.Addr()+4096+1024-15, rkey)
			}},
		{name: "WRITE one byte before a type 2 window", n: 16, want: verbs.WCRemAccessErr, event: verbs.EventQPAccessErr,
			wr: func(t *testing.T, _, b *end, tg *edgeTarget) verbs.SendWR {
				rkey := bindWindow(t, b, tg, verbs.MWType2, 4096, 1024, verbs.AccessRemoteWrite)
				return write(tg.mr.Addr()+4095, rkey)
			}},
		{name: "WRITE through a window that grants only READ", n: 16, want: verbs.WCRemAccessErr, event: verbs.EventQPAccessErr,
			wr: func(t *testing.T, _, b *end, tg *edgeTarget) verbs.SendWR {
				rkey := bindWindow(t, b, tg, verbs.MWType2, 0, edgeRegion, verbs.AccessRemoteRead)
				return write(tg.mr.Addr(), rkey)
			}},
		{name: "SEND_WITH_INV of a region's key", n: 8, want: verbs.WCRemInvReqErr, event: verbs.EventQPReqErr, recv: verbs.WCRemInvReqErr,
			wr: func(_ *testing.T, _, _ *end, tg *edgeTarget) verbs.SendWR {
				return verbs.SendWR{Opcode: verbs.WRSendWithInv, InvalidateRKey: tg.mr.RKey()}
			}},
		{name: "SEND_WITH_INV of a type 1 window's key", n: 8, want: verbs.WCRemInvReqErr, event: verbs.EventQPReqErr, recv: verbs.WCRemInvReqErr,
			wr: func(t *testing.T, _, b *end, tg *edgeTarget) verbs.SendWR {
				rkey := bindWindow(t, b, tg, verbs.MWType1, 0, 64, verbs.AccessRemoteWrite)
				return verbs.SendWR{Opcode: verbs.WRSendWithInv, InvalidateRKey: rkey}
			}},
		{name: "SEND_WITH_INV of a key that names nothing", n: 8, want: verbs.WCRemInvReqErr, event: verbs.EventQPReqErr, recv: verbs.WCRemInvReqErr,
			wr: func(_ *testing.T, _, _ *end, _ *edgeTarget) verbs.SendWR {
				return verbs.SendWR{Opcode: verbs.WRSendWithInv, InvalidateRKey: 0xdead00}
			}},
		{name: "SEND_WITH_INV of a bound type 2 window", n: 8, want: verbs.WCSuccess, recv: verbs.WCSuccess,
			wr: func(t *testing.T, _, b *end, tg *edgeTarget) verbs.SendWR {
				rkey := bindWindow(t, b, tg, verbs.MWType2, 0, 64, verbs.AccessRemoteWrite)
				return verbs.SendWR{Opcode: verbs.WRSendWithInv, InvalidateRKey: rkey}
			}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, la, lb := memLinks(t, 41)
			a, b := newPair(t, la, lb, pairOpts{})
			access := tc.access
			if access == 0 {
				access = edgeAll
			}
			tg := newEdgeTarget(t, b.pd, access)
			if tc.qpAccess != 0 {
				if err := b.qp.Modify(&verbs.QPAttr{QPAccessFlags: tc.qpAccess}, verbs.QPAttrAccessFlags); err != nil {
					t.Fatal(err)
				}
			}
			fill(a.buf[src:src+4096], 0x21)
			wr := tc.wr(t, a, b, tg)
			wr.WRID, wr.SendFlags = 31, verbs.SendSignaled
			if wr.SGList == nil && tc.n > 0 {
				switch wr.Opcode {
				case verbs.WRRDMARead, verbs.WRAtomicFetchAndAdd, verbs.WRAtomicCmpAndSwp:
					wr.SGList = []verbs.SGE{a.mr.SGE(dst, tc.n)}
				default:
					wr.SGList = []verbs.SGE{a.mr.SGE(src, tc.n)}
				}
			}
			if wr.Opcode == verbs.WRSendWithInv {
				if err := b.qp.PostRecv([]verbs.RecvWR{{WRID: 32, SGList: []verbs.SGE{b.mr.SGE(0, 64)}}}); err != nil {
					t.Fatal(err)
				}
			}
			if err := a.qp.PostSend([]verbs.SendWR{wr}); err != nil {
				t.Fatal(err)
			}
			wc := a.wait(1, 5*time.Second)[0]
			if wc.Status != tc.want || wc.WRID != 31 {
				t.Fatalf("requester completion %s (wr_id %d), want %s", wc.Status, wc.WRID, tc.want)
			}
			if wr.Opcode == verbs.WRSendWithInv {
				rwc := b.wait(1, 5*time.Second)[0]
				if rwc.Status != tc.recv || rwc.WRID != 32 {
					t.Fatalf("responder receive %s (wr_id %d), want %s", rwc.Status, rwc.WRID, tc.recv)
				}
				if tc.recv == verbs.WCSuccess && (rwc.WCFlags&verbs.WCWithInv == 0 || rwc.InvalidatedRKey() != wr.InvalidateRKey) {
					t.Fatalf("responder receive flags %#x key %#x, want IBV_WC_WITH_INV of %#x", rwc.WCFlags, rwc.InvalidatedRKey(), wr.InvalidateRKey)
				}
			} else if n, _ := b.cq.Poll(make([]verbs.WC, 1)); n != 0 {
				t.Fatal("a remote access completed at the responder")
			}

			want := bytes.Clone(tg.before)
			if tc.want == verbs.WCSuccess && wr.Opcode == verbs.WRRDMAWrite && tc.n > 0 {
				copy(want[edgeGuard+tc.wrote:], a.buf[src:src+tc.n])
			}
			for i := range tg.buf {
				if tg.buf[i] != want[i] {
					t.Fatalf("responder byte at region offset %d is %#x, want %#x", i-edgeGuard, tg.buf[i], want[i])
				}
			}

			if tc.want == verbs.WCSuccess {
				for _, e := range []*end{a, b} {
					if attr, _, err := e.qp.Query(); err != nil || attr.QPState != verbs.QPSRTS {
						t.Fatalf("QP %#x in %s (%v) after a granted access, want RTS", e.qp.Num(), attr.QPState, err)
					}
				}
				return
			}
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			defer cancel()
			ev, err := b.ctx.GetAsyncEvent(ctx)
			for err == nil && ev.Type == verbs.EventPortActive {
				ev, err = b.ctx.GetAsyncEvent(ctx)
			}
			if err != nil || ev.Type != tc.event || ev.QP != b.qp {
				t.Fatalf("responder async event %+v %v, want %s on its QP", ev, err, tc.event)
			}
			waitState(t, a.qp, verbs.QPSErr)
			waitState(t, b.qp, verbs.QPSErr)
		})
	}
}

// A type 2 window is bound to a QP: its key grants nothing through another
// QP of the same PD, and SEND_WITH_INV through that other QP does not
// invalidate it.
func TestType2WindowGrantsOnlyThroughItsQP(t *testing.T) {
	_, la, lb := memLinks(t, 43)
	o := pairOpts{}
	a, b := newPair(t, la, lb, o)
	o.defaults()
	tg := newEdgeTarget(t, b.pd, edgeAll)
	rkey := bindWindow(t, b, tg, verbs.MWType2, 0, 1024, verbs.AccessRemoteWrite)

	// A second connection between the same PDs.
	other := func(e *end) *end {
		qp, err := e.pd.CreateQP(&verbs.QPInitAttr{SendCQ: e.cq, RecvCQ: e.cq, QPType: verbs.QPTRC,
			Cap: verbs.QPCap{MaxSendWR: 16, MaxRecvWR: 16, MaxSendSGE: 1, MaxRecvSGE: 1}})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { qp.Destroy() })
		return &end{t: t, ctx: e.ctx, pd: e.pd, cq: e.cq, qp: qp, buf: e.buf, mr: e.mr}
	}
	a2, b2 := other(a), other(b)
	gidA, _ := a.ctx.QueryGID(1, 0)
	gidB, _ := b.ctx.QueryGID(1, 0)
	connectQP(t, a2, gidB, b2.qp.Num(), 100, 200, &o)
	connectQP(t, b2, gidA, a2.qp.Num(), 200, 100, &o)

	fill(a.buf[:64], 0x61)
	post := func(e *end, wr verbs.SendWR) verbs.WC {
		t.Helper()
		wr.SendFlags = verbs.SendSignaled
		if err := e.qp.PostSend([]verbs.SendWR{wr}); err != nil {
			t.Fatal(err)
		}
		return e.wait(1, 5*time.Second)[0]
	}
	if err := b2.qp.PostRecv([]verbs.RecvWR{{WRID: 1, SGList: []verbs.SGE{b.mr.SGE(0, 64)}}}); err != nil {
		t.Fatal(err)
	}
	if wc := post(a2, verbs.SendWR{WRID: 1, Opcode: verbs.WRSendWithInv, InvalidateRKey: rkey, SGList: []verbs.SGE{a.mr.SGE(0, 8)}}); wc.Status != verbs.WCRemInvReqErr {
		t.Fatalf("SEND_WITH_INV of another QP's window: %s, want %s", wc.Status, verbs.WCRemInvReqErr)
	}
	if wc := b.wait(1, 5*time.Second)[0]; wc.Status != verbs.WCRemInvReqErr || wc.QPNum != b2.qp.Num() {
		t.Fatalf("the other QP's receive: %s on QP %#x, want %s on %#x", wc.Status, wc.QPNum, verbs.WCRemInvReqErr, b2.qp.Num())
	}
	// The window survived, and still grants through its own QP only.
	if wc := post(a, verbs.SendWR{WRID: 2, Opcode: verbs.WRRDMAWrite, SGList: []verbs.SGE{a.mr.SGE(0, 64)}, RemoteAddr: tg.mr.Addr(), RKey: rkey}); wc.Status != verbs.WCSuccess {
		t.Fatalf("WRITE through the window's own QP: %s", wc.Status)
	}
	want := bytes.Clone(tg.before)
	copy(want[edgeGuard:], a.buf[:64])
	if !bytes.Equal(tg.buf, want) {
		t.Fatal("the WRITE through the window's QP did not land exactly in place")
	}

	// A third connection, as the second is in ERR now.
	a3, b3 := other(a), other(b)
	connectQP(t, a3, gidB, b3.qp.Num(), 300, 400, &o)
	connectQP(t, b3, gidA, a3.qp.Num(), 400, 300, &o)
	fill(a.buf[:64], 0x7c)
	if wc := post(a3, verbs.SendWR{WRID: 3, Opcode: verbs.WRRDMAWrite, SGList: []verbs.SGE{a.mr.SGE(0, 64)}, RemoteAddr: tg.mr.Addr(), RKey: rkey}); wc.Status != verbs.WCRemAccessErr {
		t.Fatalf("WRITE through another QP of the window's PD: %s, want %s", wc.Status, verbs.WCRemAccessErr)
	}
	if !bytes.Equal(tg.buf, want) {
		t.Fatal("a WRITE through another QP changed the window's memory")
	}
}
