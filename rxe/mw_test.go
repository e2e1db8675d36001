package rxe

import (
	"encoding/binary"
	"errors"
	"fmt"
	"net/netip"
	"testing"
	"time"

	"github.com/rdmago/rdmago/rxe/link"
	"github.com/rdmago/rdmago/verbs"
)

// mwRig is a connected pair whose responder b has a region for memory
// windows, win, registered with local write and MW_BIND but no remote
// rights: only a window opens it to the peer.
type mwRig struct {
	a, b *end
	net  *link.Network
	win  []byte
	wmr  *verbs.MR
	// Torn down in this order, before the pair: windows, regions
	// (extra ones, then wmr), PDs.
	mws []*verbs.MW
	mrs []*verbs.MR
	pds []*verbs.PD
}

const mwWinAccess = verbs.AccessLocalWrite | verbs.AccessMWBind

// mwAll is every remote right a window grants.
const mwAll = verbs.AccessRemoteWrite | verbs.AccessRemoteRead | verbs.AccessRemoteAtomic

func newMWRig(t *testing.T, seed uint64, f link.Faults, winSize int, o pairOpts) *mwRig {
	t.Helper()
	a, b, n := memPair(t, seed, f, o)
	r := &mwRig{a: a, b: b, net: n, win: make([]byte, winSize)}
	var err error
	if r.wmr, err = b.pd.RegMR(r.win, mwWinAccess); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		for _, mw := range r.mws {
			if err := mw.Dealloc(); err != nil {
				t.Error(err)
			}
		}
		for _, mr := range append(r.mrs, r.wmr) {
			if err := mr.Dereg(); err != nil {
				t.Error(err)
			}
		}
		for _, pd := range r.pds {
			if err := pd.Dealloc(); err != nil {
				t.Error(err)
			}
		}
	})
	return r
}

// regMR registers a region of n bytes in pd (b's, if nil), deregistered
// when the test ends.
func (r *mwRig) regMR(t *testing.T, pd *verbs.PD, n int, access verbs.AccessFlags) *verbs.MR {
	t.Helper()
	if pd == nil {
		pd = r.b.pd
	}
	mr, err := pd.RegMR(make([]byte, n), access)
	if err != nil {
		t.Fatal(err)
	}
	r.mrs = append(r.mrs, mr)
	return mr
}

// allocPD allocates another PD on b's device, deallocated when the test
// ends.
func (r *mwRig) allocPD(t *testing.T) *verbs.PD {
	t.Helper()
	pd, err := r.b.ctx.AllocPD()
	if err != nil {
		t.Fatal(err)
	}
	r.pds = append(r.pds, pd)
	return pd
}

// alloc allocates a window of b's PD (or pd, if given).
func (r *mwRig) alloc(t *testing.T, typ verbs.MWType, pd *verbs.PD) *verbs.MW {
	t.Helper()
	if pd == nil {
		pd = r.b.pd
	}
	mw, err := pd.AllocMW(typ)
	if err != nil {
		t.Fatal(err)
	}
	r.mws = append([]*verbs.MW{mw}, r.mws...) // deallocated before their PD
	return mw
}

// winAddr is the address of offset off of the window region.
func (r *mwRig) winAddr(off int) uint64 { return r.wmr.Addr() + uint64(off) }

// mwPostBind posts a signaled bind of mw through e's QP: with ibv_bind_mw
// for type 1, a BIND_MW work request with the window's next key for type
// 2. It returns the key the bind gives.
func mwPostBind(t *testing.T, e *end, mw *verbs.MW, info verbs.MWBindInfo) uint32 {
	t.Helper()
	if mw.Type() == verbs.MWType1 {
		rkey, err := e.qp.BindMW(mw, &verbs.MWBind{WRID: 0xb1, SendFlags: verbs.SendSignaled, BindInfo: info})
		if err != nil {
			t.Fatalf("ibv_bind_mw: %v", err)
		}
		return rkey
	}
	rkey := verbs.IncRKey(mw.RKey())
	mwPostBind2(t, e, mw, rkey, info)
	return rkey
}

// mwPostBind2 posts a BIND_MW work request with the given key.
func mwPostBind2(t *testing.T, e *end, mw *verbs.MW, rkey uint32, info verbs.MWBindInfo) {
	t.Helper()
	wr := verbs.SendWR{WRID: 0xb2, Opcode: verbs.WRBindMW, SendFlags: verbs.SendSignaled, BindMW: verbs.BindMWWR{MW: mw, RKey: rkey, BindInfo: info}}
	if err := e.qp.PostSend([]verbs.SendWR{wr}); err != nil {
		t.Fatalf("posting BIND_MW: %v", err)
	}
}

// bind binds mw through e's QP and checks it completes: the window then
// serves [addr, addr+n) of mr with access, under the key returned.
func (r *mwRig) bind(t *testing.T, e *end, mw *verbs.MW, mr *verbs.MR, addr uint64, n int, access verbs.AccessFlags) uint32 {
	t.Helper()
	rkey := mwPostBind(t, e, mw, verbs.MWBindInfo{MR: mr, Addr: addr, Length: uint64(n), AccessFlags: access})
	wc := e.wait(1, 5*time.Second)[0]
	if wc.Status != verbs.WCSuccess || wc.Opcode != verbs.WCBindMW || wc.WRID != 0xb0|uint64(mw.Type()) {
		t.Fatalf("bind of a %s window: %+v, want a successful BIND_MW completion", mw.Type(), wc)
	}
	if got := mw.RKey(); got != rkey {
		t.Fatalf("MW.RKey %#x after the bind, want %#x", got, rkey)
	}
	return rkey
}

// mwOp is a remote operation through a window, from a.
type mwOp struct {
	op   verbs.WROpcode
	n    int    // bytes (8 for atomics)
	add  uint64 // FETCH_ADD addend, CMP_SWP compare
	swap uint64
}

// do runs op from a against raddr under rkey, with a's local memory at
// offset loc, and returns its completion.
func (r *mwRig) do(t *testing.T, a *end, op mwOp, rkey uint32, raddr uint64, loc int) verbs.WC {
	t.Helper()
	wr := verbs.SendWR{WRID: 0xd0, Opcode: op.op, SendFlags: verbs.SendSignaled, SGList: []verbs.SGE{a.mr.SGE(loc, op.n)},
		RemoteAddr: raddr, RKey: rkey, CompareAdd: op.add, Swap: op.swap, ImmData: 0x1234}
	if err := a.qp.PostSend([]verbs.SendWR{wr}); err != nil {
		t.Fatalf("posting %s: %v", op.op, err)
	}
	return a.wait(1, 10*time.Second)[0]
}

// mustDo runs op and checks it succeeds.
func (r *mwRig) mustDo(t *testing.T, a *end, op mwOp, rkey uint32, raddr uint64, loc int) {
	t.Helper()
	if wc := r.do(t, a, op, rkey, raddr, loc); wc.Status != verbs.WCSuccess || wc.WRID != 0xd0 {
		t.Fatalf("%s of %d bytes at %#x under %#x: %+v, want success", op.op, op.n, raddr, rkey, wc)
	}
}

// refused runs a WRITE of 64 bytes at raddr under rkey, which must fail
// with REM_ACCESS_ERR and leave the window region untouched.
func (r *mwRig) refused(t *testing.T, rkey uint32, raddr uint64, what string) {
	t.Helper()
	before := append([]byte(nil), r.win...)
	fill(r.a.buf[:64], 0x5c)
	wc := r.do(t, r.a, mwOp{op: verbs.WRRDMAWrite, n: 64}, rkey, raddr, 0)
	if wc.Status != verbs.WCRemAccessErr {
		t.Fatalf("%s: WRITE under %#x completed %+v, want REM_ACCESS_ERR", what, rkey, wc)
	}
	if string(r.win) != string(before) {
		t.Fatalf("%s: the refused WRITE changed the region", what)
	}
}

// otherPair connects a second QP of a's device to a second QP of b's, in
// the same PDs and on the same registered buffers.
func (r *mwRig) otherPair(t *testing.T) (*end, *end) {
	t.Helper()
	return r.otherPairIn(t, r.b.pd)
}

// otherPairIn is otherPair with b's QP in PD pd.
func (r *mwRig) otherPairIn(t *testing.T, pd *verbs.PD) (*end, *end) {
	t.Helper()
	o := pairOpts{}
	o.defaults()
	mk := func(e *end, pd *verbs.PD) *end {
		x := &end{t: t, ctx: e.ctx, pd: pd, buf: e.buf, mr: e.mr}
		var err error
		if x.cq, err = e.ctx.CreateCQ(256, nil, 0); err != nil {
			t.Fatal(err)
		}
		x.qp, err = pd.CreateQP(&verbs.QPInitAttr{SendCQ: x.cq, RecvCQ: x.cq, QPType: verbs.QPTRC,
			Cap: verbs.QPCap{MaxSendWR: 64, MaxRecvWR: 64, MaxSendSGE: 4, MaxRecvSGE: 4}})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() {
			if err := x.qp.Destroy(); err != nil {
				t.Error(err)
			}
			if err := x.cq.Destroy(); err != nil {
				t.Error(err)
			}
		})
		return x
	}
	a2, b2 := mk(r.a, r.a.pd), mk(r.b, pd)
	connect(t, a2, b2, &o)
	return a2, b2
}

// mwTypes are the two window types, for tables run with each.
var mwTypes = []verbs.MWType{verbs.MWType1, verbs.MWType2}

// TestMWKeysFollowBinds pins down window keys: a window starts with a key
// of its own index; each bind gives the next key of that index
// (ibv_inc_rkey, wrapping in the low 8 bits), which MW.RKey reports from
// the post on.
func TestMWKeysFollowBinds(t *testing.T) {
	r := newMWRig(t, 1, link.Faults{}, 1<<16, pairOpts{})
	for _, typ := range mwTypes {
		t.Run(typ.String(), func(t *testing.T) {
			mw := r.alloc(t, typ, nil)
			if mw.Type() != typ || mw.PD() != r.b.pd {
				t.Fatalf("Type %s PD %p, want %s and b's PD", mw.Type(), mw.PD(), typ)
			}
			k0 := mw.RKey()
			if k0>>8 == 0 {
				t.Fatalf("key %#x has index 0", k0)
			}
			key := k0
			for i := 0; i < 260; i++ {
				if typ == verbs.MWType2 && i > 0 {
					// A type 2 window is invalidated before it is
					// bound again.
					if wc := mwLocalInv(t, r.b, key); wc.Status != verbs.WCSuccess {
						t.Fatalf("LOCAL_INV %d: %+v", i, wc)
					}
				}
				rkey := r.bind(t, r.b, mw, r.wmr, r.winAddr(0), 64, verbs.AccessRemoteRead)
				if rkey != verbs.IncRKey(key) || rkey>>8 != k0>>8 {
					t.Fatalf("bind %d gave key %#x after %#x, want %#x", i, rkey, key, verbs.IncRKey(key))
				}
				key = rkey
			}
			if key != k0&^0xff|(k0+260)&0xff {
				t.Fatalf("after 260 binds the key is %#x, want %#x", key, k0&^0xff|(k0+260)&0xff)
			}
			// The last key works.
			fill(r.win[:64], 3)
			r.mustDo(t, r.a, mwOp{op: verbs.WRRDMARead, n: 64}, key, r.winAddr(0), 4096)
			if string(r.a.buf[4096:4096+64]) != string(r.win[:64]) {
				t.Fatal("READ through the window read other data")
			}
			if err := mw.Dealloc(); err != nil {
				t.Fatal(err)
			}
		})
	}
	if got := verbs.IncRKey(0x123456ff); got != 0x12345600 {
		t.Fatalf("IncRKey(0x123456ff) = %#x, want 0x12345600", got)
	}
}

// TestMWBoundWindowEnforcesRangeAndRights runs each remote operation
// through a window of 8 KiB at offset 4 KiB of a region that grants no
// remote rights itself: inside the window and within its rights it works,
// byte for byte; outside its range, without the right, or under another
// key it fails with REM_ACCESS_ERR and the memory stays as it was.
func TestMWBoundWindowEnforcesRangeAndRights(t *testing.T) {
	const wOff, wLen = 4096, 8192
	next := func(rkey uint32, r *mwRig) uint32 { return verbs.IncRKey(rkey) }
	region := func(rkey uint32, r *mwRig) uint32 { return r.wmr.RKey() }
	tests := []struct {
		name   string
		access verbs.AccessFlags // the window's; 0 for all
		op     mwOp
		off    int // from the window's start
		key    func(rkey uint32, r *mwRig) uint32
		ok     bool
	}{
		{"WRITE of the whole window", 0, mwOp{op: verbs.WRRDMAWrite, n: wLen}, 0, nil, true},
		{"WRITE_WITH_IMM inside", 0, mwOp{op: verbs.WRRDMAWriteWithImm, n: 1500}, 512, nil, true},
		{"READ inside", 0, mwOp{op: verbs.WRRDMARead, n: 3000}, 100, nil, true},
		{"READ of the whole window", 0, mwOp{op: verbs.WRRDMARead, n: wLen}, 0, nil, true},
		{"FETCH_ADD on the last 8 bytes", 0, mwOp{op: verbs.WRAtomicFetchAndAdd, n: 8, add: 5}, wLen - 8, nil, true},
		{"CMP_SWP on the first 8 bytes", 0, mwOp{op: verbs.WRAtomicCmpAndSwp, n: 8, swap: 77}, 0, nil, true},
		{"atomic with the atomic right alone", verbs.AccessRemoteAtomic, mwOp{op: verbs.WRAtomicFetchAndAdd, n: 8, add: 1}, 64, nil, true},
		{"WRITE straddling the end", 0, mwOp{op: verbs.WRRDMAWrite, n: 64}, wLen - 32, nil, false},
		{"WRITE just past the end", 0, mwOp{op: verbs.WRRDMAWrite, n: 1}, wLen, nil, false},
		{"READ starting before the window", 0, mwOp{op: verbs.WRRDMARead, n: 64}, -8, nil, false},
		{"READ one byte longer than the window", 0, mwOp{op: verbs.WRRDMARead, n: wLen + 1}, 0, nil, false},
		{"FETCH_ADD just past the end", 0, mwOp{op: verbs.WRAtomicFetchAndAdd, n: 8, add: 1}, wLen, nil, false},
		{"CMP_SWP just before the start", 0, mwOp{op: verbs.WRAtomicCmpAndSwp, n: 8, swap: 1}, -8, nil, false},
		{"WRITE to a read-only window", verbs.AccessRemoteRead, mwOp{op: verbs.WRRDMAWrite, n: 64}, 0, nil, false},
		{"WRITE_WITH_IMM to a read-only window", verbs.AccessRemoteRead | verbs.AccessRemoteAtomic, mwOp{op: verbs.WRRDMAWriteWithImm, n: 64}, 0, nil, false},
		{"READ from a write-only window", verbs.AccessRemoteWrite, mwOp{op: verbs.WRRDMARead, n: 64}, 0, nil, false},
		{"READ with the atomic right alone", verbs.AccessRemoteAtomic, mwOp{op: verbs.WRRDMARead, n: 8}, 0, nil, false},
		{"atomic without the atomic right", verbs.AccessRemoteWrite | verbs.AccessRemoteRead, mwOp{op: verbs.WRAtomicFetchAndAdd, n: 8, add: 1}, 0, nil, false},
		{"WRITE under the window's next key", 0, mwOp{op: verbs.WRRDMAWrite, n: 64}, 0, next, false},
		{"WRITE under the region's own key", 0, mwOp{op: verbs.WRRDMAWrite, n: 64}, 0, region, false},
		{"READ under the region's own key", 0, mwOp{op: verbs.WRRDMARead, n: 64}, 0, region, false},
	}
	for _, typ := range mwTypes {
		for _, tt := range tests {
			t.Run(fmt.Sprintf("%s/%s", typ, tt.name), func(t *testing.T) {
				r := newMWRig(t, 2, link.Faults{}, 1<<16, pairOpts{})
				access := tt.access
				if access == 0 {
					access = mwAll
				}
				mw := r.alloc(t, typ, nil)
				rkey := r.bind(t, r.b, mw, r.wmr, r.winAddr(wOff), wLen, access)
				if tt.key != nil {
					rkey = tt.key(rkey, r)
				}
				fill(r.win, 0x21)
				binary.NativeEndian.PutUint64(r.win[wOff:], 0) // CMP_SWP compares with 0
				before := append([]byte(nil), r.win...)
				const loc = 64 << 10 // a's local memory
				fill(r.a.buf[loc:loc+wLen+64], 0x42)
				if tt.op.op == verbs.WRRDMAWriteWithImm {
					if err := r.b.qp.PostRecv([]verbs.RecvWR{{WRID: 0xe0}}); err != nil {
						t.Fatal(err)
					}
				}
				raddr := uint64(int64(r.winAddr(wOff)) + int64(tt.off))
				wc := r.do(t, r.a, tt.op, rkey, raddr, loc)
				if !tt.ok {
					if wc.Status != verbs.WCRemAccessErr || wc.WRID != 0xd0 {
						t.Fatalf("completion %+v, want REM_ACCESS_ERR", wc)
					}
					if string(r.win) != string(before) {
						t.Fatal("a refused operation changed the region")
					}
					return
				}
				if wc.Status != verbs.WCSuccess || wc.WRID != 0xd0 {
					t.Fatalf("completion %+v, want success", wc)
				}
				at := wOff + tt.off
				switch tt.op.op {
				case verbs.WRRDMAWrite, verbs.WRRDMAWriteWithImm:
					if string(r.win[at:at+tt.op.n]) != string(r.a.buf[loc:loc+tt.op.n]) {
						t.Fatal("the WRITE did not land in the window")
					}
					copy(before[at:], r.a.buf[loc:loc+tt.op.n])
					if tt.op.op == verbs.WRRDMAWriteWithImm {
						rc := r.b.wait(1, 5*time.Second)[0]
						if rc.Status != verbs.WCSuccess || rc.WRID != 0xe0 || rc.Opcode != verbs.WCRecvRDMAWithImm || rc.ImmData != 0x1234 || int(rc.ByteLen) != tt.op.n {
							t.Fatalf("receive completion %+v", rc)
						}
					}
				case verbs.WRRDMARead:
					if string(r.a.buf[loc:loc+tt.op.n]) != string(r.win[at:at+tt.op.n]) {
						t.Fatal("the READ returned other data")
					}
				case verbs.WRAtomicFetchAndAdd, verbs.WRAtomicCmpAndSwp:
					orig := binary.NativeEndian.Uint64(before[at:])
					if got := binary.NativeEndian.Uint64(r.a.buf[loc:]); got != orig {
						t.Fatalf("atomic returned %#x, want %#x", got, orig)
					}
					want := orig + tt.op.add
					if tt.op.op == verbs.WRAtomicCmpAndSwp {
						want = tt.op.swap
					}
					if got := binary.NativeEndian.Uint64(r.win[at:]); got != want {
						t.Fatalf("window holds %#x after the atomic, want %#x", got, want)
					}
					binary.NativeEndian.PutUint64(before[at:], want)
				}
				if string(r.win) != string(before) {
					t.Fatal("the operation changed the region outside its target")
				}
			})
		}
	}
}

// TestMWType2ServesOnlyTheQPItWasBoundThrough: a type 2 window bound
// through one QP refuses requests arriving on another QP of the same PD;
// a type 1 window serves every QP of its PD.
func TestMWType2ServesOnlyTheQPItWasBoundThrough(t *testing.T) {
	tests := []struct {
		name  string
		typ   verbs.MWType
		other bool // the request comes through the second pair
		op    verbs.WROpcode
		ok    bool
	}{
		{"type 1 through the binding QP", verbs.MWType1, false, verbs.WRRDMAWrite, true},
		{"type 1 through another QP", verbs.MWType1, true, verbs.WRRDMAWrite, true},
		{"type 1 READ through another QP", verbs.MWType1, true, verbs.WRRDMARead, true},
		{"type 2 through the binding QP", verbs.MWType2, false, verbs.WRRDMAWrite, true},
		{"type 2 WRITE through another QP", verbs.MWType2, true, verbs.WRRDMAWrite, false},
		{"type 2 READ through another QP", verbs.MWType2, true, verbs.WRRDMARead, false},
		{"type 2 atomic through another QP", verbs.MWType2, true, verbs.WRAtomicFetchAndAdd, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := newMWRig(t, 3, link.Faults{}, 1<<16, pairOpts{})
			a2, _ := r.otherPair(t)
			mw := r.alloc(t, tt.typ, nil)
			rkey := r.bind(t, r.b, mw, r.wmr, r.winAddr(0), 4096, mwAll)
			from := r.a
			if tt.other {
				from = a2
			}
			fill(r.win, 1)
			fill(from.buf[:64], 2)
			before := append([]byte(nil), r.win...)
			n := 64
			if tt.op == verbs.WRAtomicFetchAndAdd {
				n = 8
			}
			wc := r.do(t, from, mwOp{op: tt.op, n: n, add: 1}, rkey, r.winAddr(128), 0)
			if !tt.ok {
				if wc.Status != verbs.WCRemAccessErr {
					t.Fatalf("completion %+v, want REM_ACCESS_ERR", wc)
				}
				if string(r.win) != string(before) {
					t.Fatal("a refused operation changed the region")
				}
				// The window still serves its own QP.
				r.mustDo(t, r.a, mwOp{op: verbs.WRRDMAWrite, n: 64}, rkey, r.winAddr(128), 0)
				return
			}
			if wc.Status != verbs.WCSuccess {
				t.Fatalf("completion %+v, want success", wc)
			}
			if tt.op == verbs.WRRDMAWrite && string(r.win[128:128+64]) != string(from.buf[:64]) {
				t.Fatal("the WRITE did not land")
			}
			if tt.op == verbs.WRRDMARead && string(from.buf[:64]) != string(r.win[128:128+64]) {
				t.Fatal("the READ returned other data")
			}
		})
	}
}

// TestMWBindRefusesInvalidBinds: a bind the IBTA forbids completes with
// MW_BIND_ERR (opcode BIND_MW), moves the QP to ERR (what follows is
// flushed) and binds nothing (the region it named is not held). The
// controls show the same binds succeed when the fault is removed.
func TestMWBindRefusesInvalidBinds(t *testing.T) {
	type bind struct {
		mw   *verbs.MW
		info verbs.MWBindInfo
		rkey uint32 // type 2: 0 for the window's next key
	}
	regMR := func(t *testing.T, r *mwRig, pd *verbs.PD, access verbs.AccessFlags) *verbs.MR {
		return r.regMR(t, pd, 8192, access)
	}
	otherPD := func(t *testing.T, r *mwRig) *verbs.PD { return r.allocPD(t) }
	whole := func(mr *verbs.MR, access verbs.AccessFlags) verbs.MWBindInfo {
		return verbs.MWBindInfo{MR: mr, Addr: mr.Addr(), Length: uint64(mr.Len()), AccessFlags: access}
	}
	tests := []struct {
		name  string
		types []verbs.MWType
		prep  func(t *testing.T, r *mwRig, typ verbs.MWType) bind
		ok    bool
		// after checks more once the bind completed.
		after func(t *testing.T, r *mwRig, b bind)
	}{
		{"region without MW_BIND", mwTypes, func(t *testing.T, r *mwRig, typ verbs.MWType) bind {
			mr := regMR(t, r, nil, verbs.AccessLocalWrite|verbs.AccessRemoteWrite|verbs.AccessRemoteRead)
			return bind{mw: r.alloc(t, typ, nil), info: whole(mr, verbs.AccessRemoteRead)}
		}, false, nil},
		{"range past the region's end", mwTypes, func(t *testing.T, r *mwRig, typ verbs.MWType) bind {
			return bind{mw: r.alloc(t, typ, nil), info: verbs.MWBindInfo{MR: r.wmr, Addr: r.winAddr(len(r.win) - 100), Length: 101, AccessFlags: verbs.AccessRemoteRead}}
		}, false, nil},
		{"range ending at the region's end (control)", mwTypes, func(t *testing.T, r *mwRig, typ verbs.MWType) bind {
			return bind{mw: r.alloc(t, typ, nil), info: verbs.MWBindInfo{MR: r.wmr, Addr: r.winAddr(len(r.win) - 100), Length: 100, AccessFlags: verbs.AccessRemoteRead}}
		}, true, nil},
		{"range before the region's start", mwTypes, func(t *testing.T, r *mwRig, typ verbs.MWType) bind {
			return bind{mw: r.alloc(t, typ, nil), info: verbs.MWBindInfo{MR: r.wmr, Addr: r.winAddr(0) - 8, Length: 64, AccessFlags: verbs.AccessRemoteRead}}
		}, false, nil},
		{"region of another PD", mwTypes, func(t *testing.T, r *mwRig, typ verbs.MWType) bind {
			mr := regMR(t, r, otherPD(t, r), mwWinAccess)
			return bind{mw: r.alloc(t, typ, nil), info: whole(mr, verbs.AccessRemoteRead)}
		}, false, nil},
		{"window of another PD", mwTypes, func(t *testing.T, r *mwRig, typ verbs.MWType) bind {
			return bind{mw: r.alloc(t, typ, otherPD(t, r)), info: whole(r.wmr, verbs.AccessRemoteRead)}
		}, false, nil},
		{"window and region of another PD than the QP's", mwTypes, func(t *testing.T, r *mwRig, typ verbs.MWType) bind {
			pd := otherPD(t, r)
			mr := regMR(t, r, pd, mwWinAccess)
			return bind{mw: r.alloc(t, typ, pd), info: whole(mr, verbs.AccessRemoteRead)}
		}, false, nil},
		{"remote write on a region without local write", mwTypes, func(t *testing.T, r *mwRig, typ verbs.MWType) bind {
			mr := regMR(t, r, nil, verbs.AccessMWBind|verbs.AccessRemoteRead)
			return bind{mw: r.alloc(t, typ, nil), info: whole(mr, verbs.AccessRemoteWrite)}
		}, false, nil},
		{"remote atomic on a region without local write", mwTypes, func(t *testing.T, r *mwRig, typ verbs.MWType) bind {
			mr := regMR(t, r, nil, verbs.AccessMWBind)
			return bind{mw: r.alloc(t, typ, nil), info: whole(mr, verbs.AccessRemoteAtomic|verbs.AccessRemoteRead)}
		}, false, nil},
		{"remote read on a region without local write (control)", mwTypes, func(t *testing.T, r *mwRig, typ verbs.MWType) bind {
			mr := regMR(t, r, nil, verbs.AccessMWBind)
			return bind{mw: r.alloc(t, typ, nil), info: whole(mr, verbs.AccessRemoteRead)}
		}, true, func(t *testing.T, r *mwRig, b bind) {
			fill(b.info.MR.Buf()[:64], 9)
			r.mustDo(t, r.a, mwOp{op: verbs.WRRDMARead, n: 64}, b.mw.RKey(), b.info.Addr, 0)
			if string(r.a.buf[:64]) != string(b.info.MR.Buf()[:64]) {
				t.Fatal("READ through the window returned other data")
			}
		}},
		{"deregistered region", mwTypes, func(t *testing.T, r *mwRig, typ verbs.MWType) bind {
			mr := regMR(t, r, nil, mwWinAccess)
			info := whole(mr, verbs.AccessRemoteRead)
			if err := mr.Dereg(); err != nil {
				t.Fatal(err)
			}
			return bind{mw: r.alloc(t, typ, nil), info: info}
		}, false, nil},
		{"length 0 unbinds a type 1 window (control)", []verbs.MWType{verbs.MWType1}, func(t *testing.T, r *mwRig, typ verbs.MWType) bind {
			mw := r.alloc(t, typ, nil)
			r.bind(t, r.b, mw, r.wmr, r.winAddr(0), 64, verbs.AccessRemoteRead)
			return bind{mw: mw, info: verbs.MWBindInfo{}}
		}, true, func(t *testing.T, r *mwRig, b bind) {
			if err := r.wmr.Dereg(); err != nil {
				t.Fatalf("the unbound window still holds its region: %v", err)
			}
		}},
		{"length 0 on a type 2 window", []verbs.MWType{verbs.MWType2}, func(t *testing.T, r *mwRig, typ verbs.MWType) bind {
			return bind{mw: r.alloc(t, typ, nil), info: verbs.MWBindInfo{MR: r.wmr, Addr: r.winAddr(0), AccessFlags: verbs.AccessRemoteRead}}
		}, false, nil},
		{"key of another window", []verbs.MWType{verbs.MWType2}, func(t *testing.T, r *mwRig, typ verbs.MWType) bind {
			other := r.alloc(t, typ, nil)
			return bind{mw: r.alloc(t, typ, nil), info: whole(r.wmr, verbs.AccessRemoteRead), rkey: verbs.IncRKey(other.RKey())}
		}, false, nil},
		{"rebind of a bound type 2 window", []verbs.MWType{verbs.MWType2}, func(t *testing.T, r *mwRig, typ verbs.MWType) bind {
			mw := r.alloc(t, typ, nil)
			r.bind(t, r.b, mw, r.wmr, r.winAddr(0), 64, verbs.AccessRemoteRead)
			mr := regMR(t, r, nil, mwWinAccess)
			return bind{mw: mw, info: whole(mr, verbs.AccessRemoteRead)}
		}, false, func(t *testing.T, r *mwRig, b bind) {
			// The first binding stands.
			if err := r.wmr.Dereg(); !errors.Is(err, verbs.ErrBusy) {
				t.Fatalf("Dereg of the region of the first binding: %v, want EBUSY", err)
			}
		}},
		{"rebind of a type 1 window (control)", []verbs.MWType{verbs.MWType1}, func(t *testing.T, r *mwRig, typ verbs.MWType) bind {
			mw := r.alloc(t, typ, nil)
			r.bind(t, r.b, mw, r.wmr, r.winAddr(0), 64, verbs.AccessRemoteRead)
			mr := regMR(t, r, nil, mwWinAccess)
			return bind{mw: mw, info: whole(mr, verbs.AccessRemoteRead)}
		}, true, func(t *testing.T, r *mwRig, b bind) {
			if err := r.wmr.Dereg(); err != nil {
				t.Fatalf("the rebound window still holds its old region: %v", err)
			}
			if err := b.info.MR.Dereg(); !errors.Is(err, verbs.ErrBusy) {
				t.Fatalf("Dereg of the new region: %v, want EBUSY", err)
			}
		}},
	}
	for _, tt := range tests {
		for _, typ := range tt.types {
			t.Run(fmt.Sprintf("%s/%s", typ, tt.name), func(t *testing.T) {
				r := newMWRig(t, 4, link.Faults{}, 1<<16, pairOpts{})
				b := tt.prep(t, r, typ)
				if typ == verbs.MWType2 && b.rkey != 0 {
					mwPostBind2(t, r.b, b.mw, b.rkey, b.info)
				} else {
					b.rkey = mwPostBind(t, r.b, b.mw, b.info)
				}
				wc := r.b.wait(1, 5*time.Second)[0]
				if wc.Opcode != verbs.WCBindMW || wc.WRID != 0xb0|uint64(typ) {
					t.Fatalf("completion %+v, want one for the BIND_MW", wc)
				}
				if tt.ok {
					if wc.Status != verbs.WCSuccess {
						t.Fatalf("control: bind completed %s, want success", wc.Status)
					}
					if tt.after != nil {
						tt.after(t, r, b)
					}
					return
				}
				if wc.Status != verbs.WCMWBindErr {
					t.Fatalf("bind completed %s, want MW_BIND_ERR", wc.Status)
				}
				waitState(t, r.b.qp, verbs.QPSErr)
				if err := r.b.qp.PostSend([]verbs.SendWR{{WRID: 0xf1, Opcode: verbs.WRSend, SendFlags: verbs.SendSignaled}}); err != nil {
					t.Fatal(err)
				}
				if wc := r.b.wait(1, 5*time.Second)[0]; wc.WRID != 0xf1 || wc.Status != verbs.WCWRFlushErr {
					t.Fatalf("after the failed bind: %+v, want FLUSH_ERR", wc)
				}
				if mr := b.info.MR; mr != nil && mr != r.wmr {
					if err := mr.Dereg(); err != nil {
						t.Fatalf("the failed bind holds its region: %v", err)
					}
				}
				if tt.after != nil {
					tt.after(t, r, b)
				}
			})
		}
	}
}

// TestMWPostTimeChecks covers what the verbs calls refuse at once.
func TestMWPostTimeChecks(t *testing.T) {
	r := newMWRig(t, 5, link.Faults{}, 1<<16, pairOpts{})
	mw1 := r.alloc(t, verbs.MWType1, nil)
	mw2 := r.alloc(t, verbs.MWType2, nil)
	info := verbs.MWBindInfo{MR: r.wmr, Addr: r.winAddr(0), Length: 64, AccessFlags: verbs.AccessRemoteRead}
	ud := newUDEnd(t, "mw_ud", mustAttach(t, r.net, "10.0.0.9"), testQKey)
	udMW, err := ud.pd.AllocMW(verbs.MWType2)
	if err != nil {
		t.Fatal(err)
	}
	defer udMW.Dealloc()
	tests := []struct {
		name string
		call func() error
		want verbs.Errno
	}{
		{"ibv_alloc_mw of type 0", func() error { _, err := r.b.pd.AllocMW(0); return err }, verbs.ErrInvalidArgument},
		{"ibv_alloc_mw of type 3", func() error { _, err := r.b.pd.AllocMW(3); return err }, verbs.ErrInvalidArgument},
		{"ibv_bind_mw of a type 2 window", func() error {
			_, err := r.b.qp.BindMW(mw2, &verbs.MWBind{BindInfo: info})
			return err
		}, verbs.ErrInvalidArgument},
		{"BIND_MW without a window", func() error {
			return r.b.qp.PostSend([]verbs.SendWR{{Opcode: verbs.WRBindMW, BindMW: verbs.BindMWWR{BindInfo: info}}})
		}, verbs.ErrInvalidArgument},
		{"BIND_MW with data", func() error {
			return r.b.qp.PostSend([]verbs.SendWR{{Opcode: verbs.WRBindMW, SGList: []verbs.SGE{r.b.mr.SGE(0, 8)},
				BindMW: verbs.BindMWWR{MW: mw2, RKey: verbs.IncRKey(mw2.RKey()), BindInfo: info}}})
		}, verbs.ErrInvalidArgument},
		{"LOCAL_INV with data", func() error {
			return r.b.qp.PostSend([]verbs.SendWR{{Opcode: verbs.WRLocalInv, SGList: []verbs.SGE{r.b.mr.SGE(0, 8)}, InvalidateRKey: mw2.RKey()}})
		}, verbs.ErrInvalidArgument},
		{"BIND_MW on a UD QP", func() error {
			return ud.qp.PostSend([]verbs.SendWR{{Opcode: verbs.WRBindMW, BindMW: verbs.BindMWWR{MW: udMW, RKey: verbs.IncRKey(udMW.RKey()),
				BindInfo: verbs.MWBindInfo{MR: ud.mr, Addr: ud.mr.Addr(), Length: 64, AccessFlags: verbs.AccessRemoteRead}}}})
		}, verbs.ErrInvalidArgument},
		{"LOCAL_INV on a UD QP", func() error {
			return ud.qp.PostSend([]verbs.SendWR{{Opcode: verbs.WRLocalInv, InvalidateRKey: udMW.RKey()}})
		}, verbs.ErrInvalidArgument},
		{"SEND_WITH_INV on a UD QP", func() error {
			return ud.qp.PostSend([]verbs.SendWR{{Opcode: verbs.WRSendWithInv, InvalidateRKey: udMW.RKey(), AH: nil}})
		}, verbs.ErrInvalidArgument},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			key1, key2 := mw1.RKey(), mw2.RKey()
			if err := tt.call(); !errors.Is(err, tt.want) {
				t.Fatalf("got %v, want %v", err, tt.want)
			}
			if mw1.RKey() != key1 || mw2.RKey() != key2 {
				t.Fatal("a refused post changed a window's key")
			}
			if n := r.b.cq.Len(); n != 0 {
				t.Fatalf("a refused post completed: %s", describe(r.b.wait(n, time.Second)))
			}
		})
	}
	// Nothing was posted: the QP still binds.
	r.bind(t, r.b, mw2, r.wmr, r.winAddr(0), 64, verbs.AccessRemoteRead)
}

// mustAttach attaches a link at addr to the network.
func mustAttach(t *testing.T, n *link.Network, addr string) link.Link {
	t.Helper()
	l, err := n.Attach(netip.MustParseAddr(addr))
	if err != nil {
		t.Fatal(err)
	}
	return l
}

// mwLocalInv posts a signaled LOCAL_INV of rkey on e's QP and returns its
// completion.
func mwLocalInv(t *testing.T, e *end, rkey uint32) verbs.WC {
	t.Helper()
	if err := e.qp.PostSend([]verbs.SendWR{{WRID: 0x1e, Opcode: verbs.WRLocalInv, SendFlags: verbs.SendSignaled, InvalidateRKey: rkey}}); err != nil {
		t.Fatalf("posting LOCAL_INV: %v", err)
	}
	wc := e.wait(1, 5*time.Second)[0]
	if wc.WRID != 0x1e || wc.Opcode != verbs.WCLocalInv {
		t.Fatalf("completion %+v, want the LOCAL_INV's", wc)
	}
	return wc
}

// TestMWLocalInvalidate: LOCAL_INV of the key a type 2 window is bound
// with invalidates it (the key stops working, the region is released, the
// window may be bound again); LOCAL_INV of any other key, or of a type 1
// window, completes with LOC_QP_OP_ERR and invalidates nothing.
func TestMWLocalInvalidate(t *testing.T) {
	tests := []struct {
		name string
		run  func(t *testing.T, r *mwRig)
	}{
		{"the bound key invalidates the window", func(t *testing.T, r *mwRig) {
			mw := r.alloc(t, verbs.MWType2, nil)
			k1 := r.bind(t, r.b, mw, r.wmr, r.winAddr(0), 4096, mwAll)
			r.mustDo(t, r.a, mwOp{op: verbs.WRRDMAWrite, n: 64}, k1, r.winAddr(0), 0)
			if err := r.wmr.Dereg(); !errors.Is(err, verbs.ErrBusy) {
				t.Fatalf("Dereg while bound: %v, want EBUSY", err)
			}
			if wc := mwLocalInv(t, r.b, k1); wc.Status != verbs.WCSuccess {
				t.Fatalf("LOCAL_INV: %+v", wc)
			}
			// Invalid, it can be bound again, with the next key only
			// working.
			k2 := r.bind(t, r.b, mw, r.wmr, r.winAddr(8192), 4096, mwAll)
			fill(r.a.buf[:64], 4)
			r.mustDo(t, r.a, mwOp{op: verbs.WRRDMAWrite, n: 64}, k2, r.winAddr(8192), 0)
			if string(r.win[8192:8192+64]) != string(r.a.buf[:64]) {
				t.Fatal("WRITE under the new key did not land")
			}
			r.refused(t, k1, r.winAddr(0), "the invalidated key")
		}},
		{"an unknown key", func(t *testing.T, r *mwRig) {
			mw := r.alloc(t, verbs.MWType2, nil)
			k := r.bind(t, r.b, mw, r.wmr, r.winAddr(0), 4096, mwAll)
			if wc := mwLocalInv(t, r.b, k^0x5a5a00); wc.Status != verbs.WCLocQPOpErr {
				t.Fatalf("LOCAL_INV of an unknown key: %+v, want LOC_QP_OP_ERR", wc)
			}
			waitState(t, r.b.qp, verbs.QPSErr)
			if err := r.wmr.Dereg(); !errors.Is(err, verbs.ErrBusy) {
				t.Fatalf("the window was invalidated: Dereg %v, want EBUSY", err)
			}
		}},
		{"a type 1 window", func(t *testing.T, r *mwRig) {
			mw := r.alloc(t, verbs.MWType1, nil)
			k := r.bind(t, r.b, mw, r.wmr, r.winAddr(0), 4096, mwAll)
			if wc := mwLocalInv(t, r.b, k); wc.Status != verbs.WCLocQPOpErr {
				t.Fatalf("LOCAL_INV of a type 1 window: %+v, want LOC_QP_OP_ERR", wc)
			}
			if err := r.wmr.Dereg(); !errors.Is(err, verbs.ErrBusy) {
				t.Fatalf("the type 1 window was invalidated: Dereg %v, want EBUSY", err)
			}
			// It still serves the peer through another QP.
			a2, _ := r.otherPair(t)
			r.mustDo(t, a2, mwOp{op: verbs.WRRDMARead, n: 64}, k, r.winAddr(0), 0)
		}},
		{"a key invalidated already", func(t *testing.T, r *mwRig) {
			mw := r.alloc(t, verbs.MWType2, nil)
			k := r.bind(t, r.b, mw, r.wmr, r.winAddr(0), 4096, mwAll)
			if wc := mwLocalInv(t, r.b, k); wc.Status != verbs.WCSuccess {
				t.Fatalf("first LOCAL_INV: %+v", wc)
			}
			if wc := mwLocalInv(t, r.b, k); wc.Status != verbs.WCLocQPOpErr {
				t.Fatalf("second LOCAL_INV: %+v, want LOC_QP_OP_ERR", wc)
			}
		}},
		{"an older key of the window", func(t *testing.T, r *mwRig) {
			mw := r.alloc(t, verbs.MWType2, nil)
			k1 := r.bind(t, r.b, mw, r.wmr, r.winAddr(0), 4096, mwAll)
			mwLocalInv(t, r.b, k1)
			r.bind(t, r.b, mw, r.wmr, r.winAddr(0), 4096, mwAll)
			if wc := mwLocalInv(t, r.b, k1); wc.Status != verbs.WCLocQPOpErr {
				t.Fatalf("LOCAL_INV of the old key: %+v, want LOC_QP_OP_ERR", wc)
			}
			if err := r.wmr.Dereg(); !errors.Is(err, verbs.ErrBusy) {
				t.Fatalf("the current binding was invalidated: Dereg %v, want EBUSY", err)
			}
		}},
		{"a memory region's key", func(t *testing.T, r *mwRig) {
			if wc := mwLocalInv(t, r.b, r.b.mr.RKey()); wc.Status != verbs.WCLocQPOpErr {
				t.Fatalf("LOCAL_INV of a region's key: %+v, want LOC_QP_OP_ERR", wc)
			}
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			tt.run(t, newMWRig(t, 6, link.Faults{}, 1<<16, pairOpts{}))
		})
	}
}

// mwSendInv posts a signaled SEND_WITH_INV of n bytes from a, invalidating
// rkey at the peer.
func mwSendInv(t *testing.T, a *end, wrid uint64, rkey uint32, loc, n int, flags verbs.SendFlags) {
	t.Helper()
	wr := verbs.SendWR{WRID: wrid, Opcode: verbs.WRSendWithInv, SendFlags: verbs.SendSignaled | flags, InvalidateRKey: rkey,
		SGList: []verbs.SGE{a.mr.SGE(loc, n)}}
	if n == 0 {
		wr.SGList = nil
	}
	if err := a.qp.PostSend([]verbs.SendWR{wr}); err != nil {
		t.Fatalf("posting SEND_WITH_INV: %v", err)
	}
}

// TestMWSendWithInvalidate: a peer's SEND_WITH_INV naming the key of a
// type 2 window bound through the receiving QP delivers its data and
// invalidates the window, and the receive completion says so (WITH_INV
// and the key); naming any other key it fails with REM_INV_REQ_ERR at the
// sender, and invalidates nothing.
func TestMWSendWithInvalidate(t *testing.T) {
	tests := []struct {
		name string
		size int
		// key binds what the test needs and returns the key to send,
		// and whether the SEND_WITH_INV must succeed.
		key func(t *testing.T, r *mwRig) (uint32, bool)
	}{
		{"the key of a type 2 window bound through the QP", 100, func(t *testing.T, r *mwRig) (uint32, bool) {
			return r.bind(t, r.b, r.alloc(t, verbs.MWType2, nil), r.wmr, r.winAddr(0), 4096, mwAll), true
		}},
		{"a multi-packet SEND_WITH_INV", 3000, func(t *testing.T, r *mwRig) (uint32, bool) {
			return r.bind(t, r.b, r.alloc(t, verbs.MWType2, nil), r.wmr, r.winAddr(0), 4096, mwAll), true
		}},
		{"an empty SEND_WITH_INV", 0, func(t *testing.T, r *mwRig) (uint32, bool) {
			return r.bind(t, r.b, r.alloc(t, verbs.MWType2, nil), r.wmr, r.winAddr(0), 4096, mwAll), true
		}},
		{"an unknown key", 100, func(t *testing.T, r *mwRig) (uint32, bool) {
			k := r.bind(t, r.b, r.alloc(t, verbs.MWType2, nil), r.wmr, r.winAddr(0), 4096, mwAll)
			return k ^ 0x777700, false
		}},
		{"the key of a type 1 window", 100, func(t *testing.T, r *mwRig) (uint32, bool) {
			return r.bind(t, r.b, r.alloc(t, verbs.MWType1, nil), r.wmr, r.winAddr(0), 4096, mwAll), false
		}},
		{"a type 2 window bound through another QP", 100, func(t *testing.T, r *mwRig) (uint32, bool) {
			_, b2 := r.otherPair(t)
			return r.bind(t, b2, r.alloc(t, verbs.MWType2, nil), r.wmr, r.winAddr(0), 4096, mwAll), false
		}},
		{"an older key of the window", 100, func(t *testing.T, r *mwRig) (uint32, bool) {
			mw := r.alloc(t, verbs.MWType2, nil)
			k1 := r.bind(t, r.b, mw, r.wmr, r.winAddr(0), 4096, mwAll)
			mwLocalInv(t, r.b, k1)
			r.bind(t, r.b, mw, r.wmr, r.winAddr(0), 4096, mwAll)
			return k1, false
		}},
		{"a memory region's key", 100, func(t *testing.T, r *mwRig) (uint32, bool) {
			r.bind(t, r.b, r.alloc(t, verbs.MWType2, nil), r.wmr, r.winAddr(0), 4096, mwAll)
			return r.b.mr.RKey(), false
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := newMWRig(t, 7, link.Faults{}, 1<<16, pairOpts{})
			rkey, ok := tt.key(t, r)
			if err := r.b.qp.PostRecv([]verbs.RecvWR{{WRID: 0x5e, SGList: []verbs.SGE{r.b.mr.SGE(0, 4096)}}}); err != nil {
				t.Fatal(err)
			}
			fill(r.a.buf[:tt.size], 0x33)
			mwSendInv(t, r.a, 0x51, rkey, 0, tt.size, 0)
			wc := r.a.wait(1, 5*time.Second)[0]
			rc := r.b.wait(1, 5*time.Second)[0]
			if !ok {
				if wc.Status != verbs.WCRemInvReqErr || wc.WRID != 0x51 {
					t.Fatalf("sender completion %+v, want REM_INV_REQ_ERR", wc)
				}
				if rc.Status == verbs.WCSuccess {
					t.Fatalf("receive completion %+v, want an error", rc)
				}
				if err := r.wmr.Dereg(); !errors.Is(err, verbs.ErrBusy) {
					t.Fatalf("the bound window was invalidated: Dereg %v, want EBUSY", err)
				}
				return
			}
			if wc.Status != verbs.WCSuccess || wc.WRID != 0x51 || wc.Opcode != verbs.WCSend {
				t.Fatalf("sender completion %+v", wc)
			}
			if rc.Status != verbs.WCSuccess || rc.WRID != 0x5e || rc.Opcode != verbs.WCRecv || int(rc.ByteLen) != tt.size ||
				rc.WCFlags&verbs.WCWithInv == 0 || rc.WCFlags&verbs.WCWithImm != 0 || rc.InvalidatedRKey() != rkey {
				t.Fatalf("receive completion %+v, want WITH_INV of %#x and %d bytes", rc, rkey, tt.size)
			}
			if string(r.b.buf[:tt.size]) != string(r.a.buf[:tt.size]) {
				t.Fatal("data differs")
			}
			// Invalidated: the region is released and the key refused.
			r.refused(t, rkey, r.winAddr(0), "the invalidated key")
			if err := r.wmr.Dereg(); err != nil {
				t.Fatalf("the invalidated window still holds its region: %v", err)
			}
		})
	}
}

// TestMWRevokedWindowRefusesAccess: each way of revoking a window (unbind,
// rebind elsewhere, LOCAL_INV, a peer's SEND_WITH_INV, dealloc) makes the
// key it had refuse every access from then on.
func TestMWRevokedWindowRefusesAccess(t *testing.T) {
	tests := []struct {
		name string
		typ  verbs.MWType
		// revoke revokes mw (bound with rkey over [0, 4096) of the
		// region) and returns the key and address to try.
		revoke func(t *testing.T, r *mwRig, mw *verbs.MW, rkey uint32) (uint32, uint64)
	}{
		{"type 1 unbound", verbs.MWType1, func(t *testing.T, r *mwRig, mw *verbs.MW, rkey uint32) (uint32, uint64) {
			r.bind(t, r.b, mw, nil, 0, 0, 0)
			return rkey, r.winAddr(0)
		}},
		{"type 1 rebound elsewhere: the old key", verbs.MWType1, func(t *testing.T, r *mwRig, mw *verbs.MW, rkey uint32) (uint32, uint64) {
			k2 := r.bind(t, r.b, mw, r.wmr, r.winAddr(8192), 4096, mwAll)
			r.mustDo(t, r.a, mwOp{op: verbs.WRRDMAWrite, n: 64}, k2, r.winAddr(8192), 0)
			return rkey, r.winAddr(0)
		}},
		{"type 1 rebound elsewhere: the new key at the old range", verbs.MWType1, func(t *testing.T, r *mwRig, mw *verbs.MW, rkey uint32) (uint32, uint64) {
			k2 := r.bind(t, r.b, mw, r.wmr, r.winAddr(8192), 4096, mwAll)
			return k2, r.winAddr(0)
		}},
		{"type 1 rebound read-only: WRITE", verbs.MWType1, func(t *testing.T, r *mwRig, mw *verbs.MW, rkey uint32) (uint32, uint64) {
			k2 := r.bind(t, r.b, mw, r.wmr, r.winAddr(0), 4096, verbs.AccessRemoteRead)
			r.mustDo(t, r.a, mwOp{op: verbs.WRRDMARead, n: 64}, k2, r.winAddr(0), 0)
			return k2, r.winAddr(0)
		}},
		{"type 1 deallocated", verbs.MWType1, func(t *testing.T, r *mwRig, mw *verbs.MW, rkey uint32) (uint32, uint64) {
			if err := mw.Dealloc(); err != nil {
				t.Fatal(err)
			}
			return rkey, r.winAddr(0)
		}},
		{"type 2 LOCAL_INV", verbs.MWType2, func(t *testing.T, r *mwRig, mw *verbs.MW, rkey uint32) (uint32, uint64) {
			if wc := mwLocalInv(t, r.b, rkey); wc.Status != verbs.WCSuccess {
				t.Fatalf("LOCAL_INV: %+v", wc)
			}
			return rkey, r.winAddr(0)
		}},
		{"type 2 SEND_WITH_INV", verbs.MWType2, func(t *testing.T, r *mwRig, mw *verbs.MW, rkey uint32) (uint32, uint64) {
			if err := r.b.qp.PostRecv([]verbs.RecvWR{{WRID: 1}}); err != nil {
				t.Fatal(err)
			}
			mwSendInv(t, r.a, 2, rkey, 0, 0, 0)
			if wc := r.a.wait(1, 5*time.Second)[0]; wc.Status != verbs.WCSuccess {
				t.Fatalf("SEND_WITH_INV: %+v", wc)
			}
			if wc := r.b.wait(1, 5*time.Second)[0]; wc.Status != verbs.WCSuccess || wc.WCFlags&verbs.WCWithInv == 0 {
				t.Fatalf("receive: %+v", wc)
			}
			return rkey, r.winAddr(0)
		}},
		{"type 2 invalidated and bound again: the old key", verbs.MWType2, func(t *testing.T, r *mwRig, mw *verbs.MW, rkey uint32) (uint32, uint64) {
			mwLocalInv(t, r.b, rkey)
			k2 := r.bind(t, r.b, mw, r.wmr, r.winAddr(0), 4096, mwAll)
			r.mustDo(t, r.a, mwOp{op: verbs.WRRDMAWrite, n: 64}, k2, r.winAddr(0), 0)
			return rkey, r.winAddr(0)
		}},
		{"type 2 deallocated", verbs.MWType2, func(t *testing.T, r *mwRig, mw *verbs.MW, rkey uint32) (uint32, uint64) {
			if err := mw.Dealloc(); err != nil {
				t.Fatal(err)
			}
			return rkey, r.winAddr(0)
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := newMWRig(t, 8, link.Faults{}, 1<<16, pairOpts{})
			mw := r.alloc(t, tt.typ, nil)
			rkey := r.bind(t, r.b, mw, r.wmr, r.winAddr(0), 4096, mwAll)
			r.mustDo(t, r.a, mwOp{op: verbs.WRRDMAWrite, n: 64}, rkey, r.winAddr(0), 0)
			key, addr := tt.revoke(t, r, mw, rkey)
			r.refused(t, key, addr, tt.name)
		})
	}
}

// TestMWDeregIsBusyWhileWindowsAreBound: a region cannot be deregistered
// while a window is bound to it (EBUSY, and it keeps working), and can
// once every window on it was unbound, invalidated, moved or deallocated;
// a PD cannot be deallocated while it has windows.
func TestMWDeregIsBusyWhileWindowsAreBound(t *testing.T) {
	tests := []struct {
		name    string
		windows []verbs.MWType
		// release lets go of the windows, bound with keys rkeys.
		release func(t *testing.T, r *mwRig, mws []*verbs.MW, rkeys []uint32)
	}{
		{"type 1 unbound", []verbs.MWType{verbs.MWType1}, func(t *testing.T, r *mwRig, mws []*verbs.MW, rkeys []uint32) {
			r.bind(t, r.b, mws[0], nil, 0, 0, 0)
		}},
		{"type 1 moved to another region", []verbs.MWType{verbs.MWType1}, func(t *testing.T, r *mwRig, mws []*verbs.MW, rkeys []uint32) {
			mr := r.regMR(t, nil, 4096, mwWinAccess)
			r.bind(t, r.b, mws[0], mr, mr.Addr(), 4096, verbs.AccessRemoteRead)
			if err := mr.Dereg(); !errors.Is(err, verbs.ErrBusy) {
				t.Fatalf("Dereg of the region the window moved to: %v, want EBUSY", err)
			}
			r.bind(t, r.b, mws[0], nil, 0, 0, 0)
			if err := mr.Dereg(); err != nil {
				t.Fatal(err)
			}
		}},
		{"type 1 deallocated", []verbs.MWType{verbs.MWType1}, func(t *testing.T, r *mwRig, mws []*verbs.MW, rkeys []uint32) {
			if err := mws[0].Dealloc(); err != nil {
				t.Fatal(err)
			}
		}},
		{"type 2 LOCAL_INV", []verbs.MWType{verbs.MWType2}, func(t *testing.T, r *mwRig, mws []*verbs.MW, rkeys []uint32) {
			if wc := mwLocalInv(t, r.b, rkeys[0]); wc.Status != verbs.WCSuccess {
				t.Fatalf("LOCAL_INV: %+v", wc)
			}
		}},
		{"type 2 SEND_WITH_INV", []verbs.MWType{verbs.MWType2}, func(t *testing.T, r *mwRig, mws []*verbs.MW, rkeys []uint32) {
			r.b.qp.PostRecv([]verbs.RecvWR{{WRID: 1}})
			mwSendInv(t, r.a, 2, rkeys[0], 0, 0, 0)
			r.a.wait(1, 5*time.Second)
			if wc := r.b.wait(1, 5*time.Second)[0]; wc.Status != verbs.WCSuccess {
				t.Fatalf("receive: %+v", wc)
			}
		}},
		{"type 2 deallocated", []verbs.MWType{verbs.MWType2}, func(t *testing.T, r *mwRig, mws []*verbs.MW, rkeys []uint32) {
			if err := mws[0].Dealloc(); err != nil {
				t.Fatal(err)
			}
		}},
		{"two windows, released one by one", []verbs.MWType{verbs.MWType1, verbs.MWType2}, func(t *testing.T, r *mwRig, mws []*verbs.MW, rkeys []uint32) {
			r.bind(t, r.b, mws[0], nil, 0, 0, 0)
			if err := r.wmr.Dereg(); !errors.Is(err, verbs.ErrBusy) {
				t.Fatalf("Dereg with one window left: %v, want EBUSY", err)
			}
			mwLocalInv(t, r.b, rkeys[1])
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := newMWRig(t, 9, link.Faults{}, 1<<16, pairOpts{})
			var mws []*verbs.MW
			var rkeys []uint32
			for i, typ := range tt.windows {
				mw := r.alloc(t, typ, nil)
				mws = append(mws, mw)
				rkeys = append(rkeys, r.bind(t, r.b, mw, r.wmr, r.winAddr(i*4096), 4096, mwAll))
			}
			if err := r.wmr.Dereg(); !errors.Is(err, verbs.ErrBusy) {
				t.Fatalf("Dereg while bound: %v, want EBUSY", err)
			}
			// The failed Dereg left the region working.
			fill(r.a.buf[:64], 6)
			r.mustDo(t, r.a, mwOp{op: verbs.WRRDMAWrite, n: 64}, rkeys[0], r.winAddr(0), 0)
			if string(r.win[:64]) != string(r.a.buf[:64]) {
				t.Fatal("WRITE after the refused Dereg did not land")
			}
			tt.release(t, r, mws, rkeys)
			if err := r.wmr.Dereg(); err != nil {
				t.Fatalf("Dereg once released: %v", err)
			}
		})
	}
	t.Run("a PD with windows cannot be deallocated", func(t *testing.T) {
		r := newMWRig(t, 9, link.Faults{}, 1<<16, pairOpts{})
		pd, err := r.b.ctx.AllocPD()
		if err != nil {
			t.Fatal(err)
		}
		mw, err := pd.AllocMW(verbs.MWType1)
		if err != nil {
			t.Fatal(err)
		}
		if err := pd.Dealloc(); !errors.Is(err, verbs.ErrBusy) {
			t.Fatalf("Dealloc of a PD with a window: %v, want EBUSY", err)
		}
		if err := mw.Dealloc(); err != nil {
			t.Fatal(err)
		}
		if err := mw.Dealloc(); err != nil {
			t.Fatalf("second Dealloc: %v", err)
		}
		if err := pd.Dealloc(); err != nil {
			t.Fatalf("Dealloc once the window is gone: %v", err)
		}
	})
}

// mwLossyCases are the network conditions of the lossy window tests.
var mwLossyCases = []struct {
	name   string
	faults link.Faults
}{
	{"clean", link.Faults{}},
	{"loss 5% reorder 5% duplicate 5%", link.Faults{Drop: 0.05, Reorder: 0.05, Duplicate: 0.05}},
	{"loss 10%", link.Faults{Drop: 0.10}},
	{"loss 3% reorder 3% duplicate 3% corrupt 1%", link.Faults{Drop: 0.03, Reorder: 0.03, Duplicate: 0.03, Corrupt: 0.01}},
}

// TestMWDataPathsUnderLoss runs WRITEs and READs of sizes around the MTU
// up to 64 KiB, and FETCH_ADDs and a COMPARE_SWAP chain, through a type
// 1 and a type 2 window over a lossy, reordering, duplicating network:
// data must arrive byte for byte and each atomic execute exactly once.
func TestMWDataPathsUnderLoss(t *testing.T) {
	const (
		wOff  = 64 << 10  // the window's offset in the region
		wLen  = 256 << 10 // and length
		reads = 128 << 10 // READ sources, from this offset of the window
		ctr   = wLen - 8  // the atomics' counter
		natom = 48
	)
	sizes := []int{1, 1023, 1024, 1025, 4096, 3*1024 + 5, 64 << 10}
	for ci, c := range mwLossyCases {
		for _, typ := range mwTypes {
			t.Run(fmt.Sprintf("%s/%s", c.name, typ), func(t *testing.T) {
				r := newMWRig(t, uint64(60+ci), c.faults, 512<<10, pairOpts{bufSize: 1 << 20, mtu: verbs.MTU1024, timeout: 14})
				mw := r.alloc(t, typ, nil)
				rkey := r.bind(t, r.b, mw, r.wmr, r.winAddr(wOff), wLen, mwAll)
				base := r.winAddr(wOff)
				woff, roff := 0, reads // offsets in the window
				for i, n := range sizes {
					// WRITE a's bytes into the window.
					src := a2off(i)
					for j := range n {
						r.a.buf[src+j] = byte(j*3 + i*17 + 1)
					}
					r.mustDo(t, r.a, mwOp{op: verbs.WRRDMAWrite, n: n}, rkey, base+uint64(woff), src)
					if got := r.win[wOff+woff : wOff+woff+n]; string(got) != string(r.a.buf[src:src+n]) {
						t.Fatalf("WRITE of %d bytes through the window: data differs", n)
					}
					// READ a fresh part of the window back.
					fill(r.win[wOff+roff:wOff+roff+n], byte(i*5+3))
					dst := 512 << 10
					clear(r.a.buf[dst : dst+n+64])
					r.mustDo(t, r.a, mwOp{op: verbs.WRRDMARead, n: n}, rkey, base+uint64(roff), dst)
					if string(r.a.buf[dst:dst+n]) != string(r.win[wOff+roff:wOff+roff+n]) {
						t.Fatalf("READ of %d bytes through the window: data differs", n)
					}
					for _, v := range r.a.buf[dst+n : dst+n+64] {
						if v != 0 {
							t.Fatalf("READ of %d bytes wrote past its end", n)
						}
					}
					woff += n
					roff += n
				}
				// Atomics, all posted at once: each executes once.
				binary.NativeEndian.PutUint64(r.win[wOff+ctr:], 0)
				var wrs []verbs.SendWR
				for i := 0; i < natom; i++ {
					wrs = append(wrs, verbs.SendWR{WRID: uint64(i), Opcode: verbs.WRAtomicFetchAndAdd, SendFlags: verbs.SendSignaled,
						SGList: []verbs.SGE{r.a.mr.SGE(8*i, 8)}, RemoteAddr: base + ctr, RKey: rkey, CompareAdd: 1})
				}
				for i := 0; i < natom; i++ {
					wrs = append(wrs, verbs.SendWR{WRID: uint64(natom + i), Opcode: verbs.WRAtomicCmpAndSwp, SendFlags: verbs.SendSignaled,
						SGList: []verbs.SGE{r.a.mr.SGE(8*(natom+i), 8)}, RemoteAddr: base + ctr, RKey: rkey,
						CompareAdd: uint64(natom + i), Swap: uint64(natom + i + 1)})
				}
				if err := r.a.qp.PostSend(wrs); err != nil {
					t.Fatal(err)
				}
				for _, wc := range r.a.wait(2*natom, 20*time.Second) {
					if wc.Status != verbs.WCSuccess {
						t.Fatalf("atomic %d: %+v", wc.WRID, wc)
					}
				}
				seen := make([]bool, natom)
				for i := 0; i < natom; i++ {
					v := binary.NativeEndian.Uint64(r.a.buf[8*i:])
					if v >= natom || seen[v] {
						t.Fatalf("FETCH_ADD %d returned %d: some executed twice or not at all", i, v)
					}
					seen[v] = true
				}
				for i := 0; i < natom; i++ {
					if v := binary.NativeEndian.Uint64(r.a.buf[8*(natom+i):]); v != uint64(natom+i) {
						t.Fatalf("COMPARE_SWAP %d returned %d, want %d", i, v, natom+i)
					}
				}
				if v := binary.NativeEndian.Uint64(r.win[wOff+ctr:]); v != 2*natom {
					t.Fatalf("counter %d, want %d", v, 2*natom)
				}
				time.Sleep(5 * time.Millisecond)
				if n := r.a.cq.Len() + r.b.cq.Len(); n != 0 {
					t.Fatalf("%d extra completions", n)
				}
			})
		}
	}
}

// a2off is where the WRITE source of step i lies in a's buffer (apart
// from the READ destination at 512 KiB).
func a2off(i int) int { return 8192 + i*1024 }

// TestMWSendWithInvUnderLossInvalidatesExactlyOnce binds a type 2 window,
// WRITEs through it and invalidates it with a SEND_WITH_INV, round after
// round, over a lossy, reordering, duplicating network. Each round's bind
// succeeds only if the previous SEND_WITH_INV invalidated the window; a
// repeated SEND_WITH_INV executed again would invalidate the new binding
// or fail; each receive completes once, with WITH_INV and that round's
// key; and the region's window count stays exact (a type 1 window bound
// throughout keeps it busy to the end).
func TestMWSendWithInvUnderLossInvalidatesExactlyOnce(t *testing.T) {
	const rounds = 40
	for ci, c := range mwLossyCases {
		t.Run(c.name, func(t *testing.T) {
			r := newMWRig(t, uint64(80+ci), c.faults, 1<<20, pairOpts{bufSize: 1 << 20, mtu: verbs.MTU1024, timeout: 14})
			keep := r.alloc(t, verbs.MWType1, nil)
			r.bind(t, r.b, keep, r.wmr, r.winAddr(0), 4096, verbs.AccessRemoteRead)
			mw := r.alloc(t, verbs.MWType2, nil)
			const slot = 8192
			var rkey uint32
			for k := 0; k < rounds; k++ {
				size := []int{0, 64, 1024, 3000, 5000}[k%5]
				wsize := 1 + k*97
				if err := r.b.qp.PostRecv([]verbs.RecvWR{{WRID: uint64(k), SGList: []verbs.SGE{r.b.mr.SGE(k*slot, slot)}}}); err != nil {
					t.Fatal(err)
				}
				at := 8192 + k*slot // in the region
				rkey = r.bind(t, r.b, mw, r.wmr, r.winAddr(at), slot, verbs.AccessRemoteWrite|verbs.AccessRemoteRead)
				for j := 0; j < wsize; j++ {
					r.a.buf[k*slot+j] = byte(j + k)
				}
				msg := r.a.buf[(rounds+k)*slot : (rounds+k)*slot+size]
				for j := range msg {
					msg[j] = byte(j*5 + k)
				}
				// The WRITE through the window and the SEND_WITH_INV
				// that closes it, posted together.
				err := r.a.qp.PostSend([]verbs.SendWR{
					{WRID: uint64(1000 + k), Opcode: verbs.WRRDMAWrite, SendFlags: verbs.SendSignaled, SGList: []verbs.SGE{r.a.mr.SGE(k*slot, wsize)},
						RemoteAddr: r.winAddr(at), RKey: rkey},
					{WRID: uint64(2000 + k), Opcode: verbs.WRSendWithInv, SendFlags: verbs.SendSignaled, InvalidateRKey: rkey,
						SGList: []verbs.SGE{r.a.mr.SGE((rounds+k)*slot, size)}},
				})
				if err != nil {
					t.Fatal(err)
				}
				for i, wc := range r.a.wait(2, 20*time.Second) {
					if wc.Status != verbs.WCSuccess || wc.WRID != uint64(1000*(i+1)+k) {
						t.Fatalf("round %d: sender completion %+v", k, wc)
					}
				}
				rc := r.b.wait(1, 20*time.Second)[0]
				if rc.Status != verbs.WCSuccess || rc.WRID != uint64(k) || int(rc.ByteLen) != size ||
					rc.WCFlags&verbs.WCWithInv == 0 || rc.InvalidatedRKey() != rkey {
					t.Fatalf("round %d: receive completion %+v, want WITH_INV of %#x, %d bytes", k, rc, rkey, size)
				}
				if string(r.b.buf[k*slot:k*slot+size]) != string(msg) {
					t.Fatalf("round %d: SEND data differs", k)
				}
				if string(r.win[at:at+wsize]) != string(r.a.buf[k*slot:k*slot+wsize]) {
					t.Fatalf("round %d: WRITE data differs", k)
				}
			}
			time.Sleep(20 * time.Millisecond) // late duplicates arrive
			if n := r.a.cq.Len() + r.b.cq.Len(); n != 0 {
				t.Fatalf("%d extra completions: %s", n, describe(append(r.a.wait(r.a.cq.Len(), time.Second), r.b.wait(r.b.cq.Len(), time.Second)...)))
			}
			// Exactly the type 1 window holds the region.
			if err := r.wmr.Dereg(); !errors.Is(err, verbs.ErrBusy) {
				t.Fatalf("Dereg with the type 1 window bound: %v, want EBUSY (window count off)", err)
			}
			r.bind(t, r.b, keep, nil, 0, 0, 0)
			if err := r.wmr.Dereg(); err != nil {
				t.Fatalf("Dereg with no window bound: %v (window count off)", err)
			}
			// The last key is invalid.
			if wc := mwLocalInv(t, r.b, rkey); wc.Status != verbs.WCLocQPOpErr {
				t.Fatalf("LOCAL_INV of the last invalidated key: %+v, want LOC_QP_OP_ERR", wc)
			}
			t.Logf("network: %+v", r.net.Stats())
		})
	}
}

// TestMWDeallocatedWindowCannotBeBound: a deallocated window must not be
// bound again (refused when posted, or MW_BIND_ERR), or it would hold its
// region with no way to release it.
func TestMWDeallocatedWindowCannotBeBound(t *testing.T) {
	for _, typ := range mwTypes {
		t.Run(typ.String(), func(t *testing.T) {
			r := newMWRig(t, 11, link.Faults{}, 1<<16, pairOpts{})
			// A PD of its own, left allocated if the region stays
			// held, so that the rest of the test tears down cleanly.
			pd, err := r.b.ctx.AllocPD()
			if err != nil {
				t.Fatal(err)
			}
			a2, b2 := r.otherPairIn(t, pd)
			mr, err := pd.RegMR(make([]byte, 4096), mwWinAccess)
			if err != nil {
				t.Fatal(err)
			}
			mw, err := pd.AllocMW(typ)
			if err != nil {
				t.Fatal(err)
			}
			if err := mw.Dealloc(); err != nil {
				t.Fatal(err)
			}
			info := verbs.MWBindInfo{MR: mr, Addr: mr.Addr(), Length: 4096, AccessFlags: verbs.AccessRemoteRead}
			rkey := verbs.IncRKey(mw.RKey())
			if typ == verbs.MWType1 {
				rkey, err = b2.qp.BindMW(mw, &verbs.MWBind{WRID: 0xb1, SendFlags: verbs.SendSignaled, BindInfo: info})
			} else {
				err = b2.qp.PostSend([]verbs.SendWR{{WRID: 0xb2, Opcode: verbs.WRBindMW, SendFlags: verbs.SendSignaled,
					BindMW: verbs.BindMWWR{MW: mw, RKey: rkey, BindInfo: info}}})
			}
			status := verbs.WCMWBindErr
			if err == nil {
				status = b2.wait(1, 5*time.Second)[0].Status
			}
			derr := mr.Dereg()
			if status == verbs.WCMWBindErr && derr == nil {
				return
			}
			read := verbs.WCSuccess
			if status == verbs.WCSuccess {
				read = r.do(t, a2, mwOp{op: verbs.WRRDMARead, n: 8}, rkey, mr.Addr(), 0).Status
			}
			t.Fatalf("binding a deallocated %s window: completed %s; the region stays held (Dereg: %v) though the key serves nothing (peer READ: %s); want an error at post or MW_BIND_ERR",
				typ, status, derr, read)
		})
	}
}

// TestMWBindWithoutRegionIsRefusedAtPost: a bind of a non-empty range
// names no memory region; rdma-core refuses it at post time, and so do we.
func TestMWBindWithoutRegionIsRefusedAtPost(t *testing.T) {
	r := newMWRig(t, 9, link.Faults{}, 1<<16, pairOpts{})
	info := verbs.MWBindInfo{Addr: r.winAddr(0), Length: 64, AccessFlags: verbs.AccessRemoteRead}
	mw1 := r.alloc(t, verbs.MWType1, nil)
	if _, err := r.b.qp.BindMW(mw1, &verbs.MWBind{BindInfo: info}); !errors.Is(err, verbs.ErrInvalidArgument) {
		t.Errorf("type 1: %v, want EINVAL", err)
	}
	mw2 := r.alloc(t, verbs.MWType2, nil)
	err := r.b.qp.PostSend([]verbs.SendWR{{Opcode: verbs.WRBindMW, BindMW: verbs.BindMWWR{MW: mw2, RKey: verbs.IncRKey(mw2.RKey()), BindInfo: info}}})
	if !errors.Is(err, verbs.ErrInvalidArgument) {
		t.Errorf("type 2: %v, want EINVAL", err)
	}
	if _, err := r.b.qp.BindMW(nil, &verbs.MWBind{}); !errors.Is(err, verbs.ErrInvalidArgument) {
		t.Errorf("no window: %v, want EINVAL", err)
	}
}
