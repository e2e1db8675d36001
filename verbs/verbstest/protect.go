package verbstest

import (
	"bytes"
	"encoding/binary"
	"testing"

	"github.com/rdmago/rdmago/verbs"
)

// The region the protection cases aim at: regionLen bytes registered in
// the middle of a buffer, with guard bytes on both sides that no key
// grants. regionLen is not a multiple of 8, so that an aligned atomic can
// cross the region's end.
const (
	guardLen  = 64
	regionLen = 4096 + 4
)

// target is the responder's memory of a protection case: the whole
// buffer, its contents before the operation, and the region registered
// over its middle.
type target struct {
	buf, before []byte
	mr          *verbs.MR
}

// newTarget registers a region with access on pd (b's own, or another
// one) and fills the buffer, guards included, with a pattern.
func newTarget(t *testing.T, pd *verbs.PD, access verbs.AccessFlags) *target {
	t.Helper()
	tg := &target{buf: make([]byte, guardLen+regionLen+guardLen)}
	for i := range tg.buf {
		tg.buf[i] = byte(i*13 + 5)
	}
	tg.before = bytes.Clone(tg.buf)
	mr, err := pd.RegMR(tg.buf[guardLen:guardLen+regionLen], access)
	if err != nil {
		t.Fatal(err)
	}
	tg.mr = mr
	t.Cleanup(func() { tg.mr.Dereg() })
	return tg
}

// changed reports the first byte of the buffer that differs from want, as
// an offset from the region's start (negative: in the leading guard).
func (tg *target) changed(want []byte) (int, bool) {
	for i := range tg.buf {
		if tg.buf[i] != want[i] {
			return i - guardLen, true
		}
	}
	return 0, false
}

// keyKind is what rkey a protection case presents.
type keyKind int

const (
	keyValid   keyKind = iota // the region's own
	keyOtherPD                // a region over the same bytes, of another PD of the responder's
	keyDereged                // the region's, after ibv_dereg_mr
)

// outcome is what a protection case must end in.
type outcome int

const (
	granted outcome = iota // success, and exactly the named bytes touched
	denied                 // IBV_WC_REM_ACCESS_ERR, both QPs in ERR, memory untouched
	// zeroLength: a zero-length RDMA names no memory, and IBTA (vol. 1
	// §9.4.1.1.2) lets the responder skip its checks: success or
	// IBV_WC_REM_ACCESS_ERR, memory untouched either way.
	zeroLength
)

// accessCase is one remote access at an edge of what a key grants.
type accessCase struct {
	name string
	op   verbs.WROpcode
	// off is the remote address as an offset from the region's start,
	// unless va is set (an absolute address).
	off    int64
	va     uint64
	length uint32
	access verbs.AccessFlags // the region's rights; 0 means all
	key    keyKind
	want   outcome
}

// remoteAccessCases are the protection cases: for each remote operation,
// the first and last bytes of the region (granted), one byte (or word)
// past either end, lengths crossing the end and addresses wrapping past
// 2^64 (denied), zero lengths in and out of the region, and keys that
// grant nothing: a region without the operation's right, of another PD,
// or deregistered.
func remoteAccessCases() []accessCase {
	const all = verbs.AccessLocalWrite | verbs.AccessRemoteWrite | verbs.AccessRemoteRead | verbs.AccessRemoteAtomic
	var cs []accessCase
	for _, o := range []struct {
		name  string
		op    verbs.WROpcode
		n     uint32 // length of an ordinary access
		right verbs.AccessFlags
	}{
		{"WRITE", verbs.WRRDMAWrite, 64, verbs.AccessRemoteWrite},
		{"READ", verbs.WRRDMARead, 64, verbs.AccessRemoteRead},
		{"CMP_AND_SWP", verbs.WRAtomicCmpAndSwp, 8, verbs.AccessRemoteAtomic},
		{"FETCH_AND_ADD", verbs.WRAtomicFetchAndAdd, 8, verbs.AccessRemoteAtomic},
	} {
		n := int64(o.n)
		step := int64(1) // how far "one past" is: a byte, or an aligned word
		if o.n == 8 {
			step = 8
		}
		lastAligned := int64(regionLen) &^ 7 // the last whole word starts 8 before
		last := int64(regionLen) - n
		if o.n == 8 {
			last = lastAligned - 8
		}
		add := func(name string, off int64, length uint32, want outcome) {
			cs = append(cs, accessCase{name: o.name + "/" + name, op: o.op, off: off, length: length, want: want})
		}
		add("first_bytes", 0, o.n, granted)
		add("last_bytes", last, o.n, granted)
		add("one_before_the_start", -step, o.n, denied)
		if o.n == 8 {
			add("crossing_the_end", lastAligned, o.n, denied) // 4 bytes in, 4 out
			add("one_past_the_end", lastAligned+8, o.n, denied)
		} else {
			add("one_past_the_end", regionLen, o.n, denied)
			add("crossing_the_end", regionLen-n/2, o.n, denied)
			add("ending_one_byte_past_the_end", regionLen-n+1, o.n, denied)
			add("one_byte_too_long", 0, regionLen+1, denied)
			add("whole_region", 0, regionLen, granted)
			add("zero_length_at_the_start", 0, 0, granted)
			add("zero_length_at_the_end", regionLen, 0, granted)
			add("zero_length_past_the_end", regionLen+1, 0, zeroLength)
			add("zero_length_before_the_start", -1, 0, zeroLength)
		}
		// va + length wraps past 2^64 to below the region.
		cs = append(cs, accessCase{name: o.name + "/address_wrapping_past_2^64", op: o.op, va: ^uint64(0) - 7, length: o.n, want: denied})
		cs = append(cs, accessCase{name: o.name + "/without_the_right", op: o.op, length: o.n, access: all &^ o.right, want: denied})
		cs = append(cs, accessCase{name: o.name + "/region_of_another_PD", op: o.op, length: o.n, key: keyOtherPD, want: denied})
		cs = append(cs, accessCase{name: o.name + "/deregistered_region", op: o.op, length: o.n, key: keyDereged, want: denied})
	}
	return cs
}

// testRemoteAccessEdges runs each protection case on a fresh pair of
// QPs: the requester's completion and both QPs' states say whether the
// access was granted, and the responder's memory, guard bytes included,
// changed exactly where a granted access wrote.
func testRemoteAccessEdges(t *testing.T, tg *Target) {
	for _, c := range remoteAccessCases() {
		t.Run(c.name, func(t *testing.T) {
			a, b := pair(t, tg, opts{})
			if c.op == verbs.WRAtomicCmpAndSwp || c.op == verbs.WRAtomicFetchAndAdd {
				da, err := a.ctx.QueryDevice()
				if err != nil {
					t.Fatal(err)
				}
				if da.AtomicCap == verbs.AtomicNone {
					t.Skip("the device has no atomics (IBV_ATOMIC_NONE)")
				}
			}
			runAccessCase(t, a, b, c)
		})
	}
}

func runAccessCase(t *testing.T, a, b *side, c accessCase) {
	t.Helper()
	access := c.access
	if access == 0 {
		access = verbs.AccessLocalWrite | verbs.AccessRemoteWrite | verbs.AccessRemoteRead | verbs.AccessRemoteAtomic
	}
	tgt := newTarget(t, b.pd, access)
	rkey := tgt.mr.RKey()
	switch c.key {
	case keyOtherPD:
		pd2, err := b.ctx.AllocPD()
		if err != nil {
			t.Fatal(err)
		}
		mr2, err := pd2.RegMR(tgt.buf[guardLen:guardLen+regionLen], access)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() {
			mr2.Dereg()
			pd2.Dealloc()
		})
		rkey = mr2.RKey()
	case keyDereged:
		if err := tgt.mr.Dereg(); err != nil {
			t.Fatal(err)
		}
	}
	va := tgt.mr.Addr() + uint64(c.off)
	if c.va != 0 {
		va = c.va
	}

	// The requester's buffers: the data a WRITE sends, where a READ or
	// an atomic lands.
	const src, dst, atom = 0, 16384, 32768
	fill(a.buf[src:src+regionLen+1], 0x40)
	for i := dst; i < dst+regionLen+1; i++ {
		a.buf[i] = 0xa5
	}
	const cmp, swapAdd = 0x1122334455667788, 0x0101010101010101
	wr := verbs.SendWR{WRID: 77, Opcode: c.op, SendFlags: verbs.SendSignaled, RemoteAddr: va, RKey: rkey}
	switch c.op {
	case verbs.WRRDMAWrite:
		if c.length > 0 {
			wr.SGList = []verbs.SGE{a.mr.SGE(src, int(c.length))}
		}
	case verbs.WRRDMARead:
		if c.length > 0 {
			wr.SGList = []verbs.SGE{a.mr.SGE(dst, int(c.length))}
		}
	case verbs.WRAtomicCmpAndSwp:
		wr.SGList = []verbs.SGE{a.mr.SGE(atom, 8)}
		wr.CompareAdd, wr.Swap = cmp, swapAdd
		if c.want == granted {
			// Make the compare succeed, so that the swap shows.
			binary.NativeEndian.PutUint64(tgt.buf[guardLen+c.off:], cmp)
			tgt.before = bytes.Clone(tgt.buf)
		}
	case verbs.WRAtomicFetchAndAdd:
		wr.SGList = []verbs.SGE{a.mr.SGE(atom, 8)}
		wr.CompareAdd = swapAdd
	}
	a.send(wr)
	wc := a.wait(1)[0]

	want := bytes.Clone(tgt.before)
	switch {
	case c.want == granted || c.want == zeroLength && wc.Status == verbs.WCSuccess:
		wantOp := map[verbs.WROpcode]verbs.WCOpcode{verbs.WRRDMAWrite: verbs.WCRDMAWrite, verbs.WRRDMARead: verbs.WCRDMARead,
			verbs.WRAtomicCmpAndSwp: verbs.WCCompSwap, verbs.WRAtomicFetchAndAdd: verbs.WCFetchAdd}[c.op]
		if wc.Status != verbs.WCSuccess || wc.Opcode != wantOp || wc.WRID != 77 {
			t.Fatalf("completion %s %s (wr_id %d), want %s %s", wc.Opcode, wc.Status, wc.WRID, wantOp, verbs.WCSuccess)
		}
		at := guardLen + int(c.off)
		switch c.op {
		case verbs.WRRDMAWrite:
			copy(want[at:at+int(c.length)], a.buf[src:src+int(c.length)])
		case verbs.WRRDMARead:
			if !bytes.Equal(a.buf[dst:dst+int(c.length)], tgt.before[at:at+int(c.length)]) {
				t.Fatal("the READ returned other bytes than the region's")
			}
			if a.buf[dst+int(c.length)] != 0xa5 {
				t.Fatal("the READ wrote past its local buffer")
			}
		case verbs.WRAtomicCmpAndSwp, verbs.WRAtomicFetchAndAdd:
			orig := binary.NativeEndian.Uint64(tgt.before[at:])
			if got := binary.NativeEndian.Uint64(a.buf[atom:]); got != orig {
				t.Fatalf("the atomic returned %#x, want the original %#x", got, orig)
			}
			next := uint64(swapAdd)
			if c.op == verbs.WRAtomicFetchAndAdd {
				next = orig + swapAdd
			}
			binary.NativeEndian.PutUint64(want[at:], next)
		}
		if st := queryState(t, a.qp); st != verbs.QPSRTS {
			t.Errorf("requester QP in %s after a granted access, want RTS", st)
		}
		if st := queryState(t, b.qp); st != verbs.QPSRTS {
			t.Errorf("responder QP in %s after a granted access, want RTS", st)
		}
	case c.want == denied || c.want == zeroLength:
		if wc.Status != verbs.WCRemAccessErr || wc.WRID != 77 {
			t.Fatalf("completion %s (wr_id %d), want %s", wc.Status, wc.WRID, verbs.WCRemAccessErr)
		}
		if st := a.qp.State(); st != verbs.QPSErr {
			t.Errorf("requester QP in %s after a remote access error, want ERR", st)
		}
		if st := queryState(t, b.qp); st != verbs.QPSErr {
			t.Errorf("responder QP in %s after refusing an access, want ERR", st)
		}
	}
	if off, bad := tgt.changed(want); bad {
		t.Fatalf("the responder's byte at region offset %d is %#x, want %#x (region of %d bytes, %d-byte guards)",
			off, tgt.buf[guardLen+off], want[guardLen+off], regionLen, guardLen)
	}
	if n, _ := b.cq.Poll(make([]verbs.WC, 1)); n != 0 {
		t.Error("a remote access completed at the responder")
	}
}

// queryState asks the device for the QP's state (ibv_query_qp), which a
// responder's error changes without the program's doing.
func queryState(t *testing.T, qp *verbs.QP) verbs.QPState {
	t.Helper()
	attr, _, err := qp.Query()
	if err != nil {
		t.Fatal(err)
	}
	return attr.QPState
}

// testSendInvEdges: SEND_WITH_INV invalidates a type 2 window bound to the
// receiving QP, after which the key grants nothing; a key that names no
// window of the QP (a region's key, a key of nothing) is refused: the
// requester's SEND fails, the receive does not succeed, and memory is
// untouched.
func testSendInvEdges(t *testing.T, tg *Target) {
	for _, c := range []struct {
		name string
		key  func(b *side, tgt *target, win uint32) uint32
		ok   bool
	}{
		{"bound_type2_window", func(_ *side, _ *target, win uint32) uint32 { return win }, true},
		{"region_key", func(_ *side, tgt *target, _ uint32) uint32 { return tgt.mr.RKey() }, false},
		{"window_key_of_another_generation", func(_ *side, _ *target, win uint32) uint32 { return verbs.IncRKey(win) }, false},
	} {
		t.Run(c.name, func(t *testing.T) {
			a, b := pair(t, tg, opts{})
			tgt := newTarget(t, b.pd, verbs.AccessLocalWrite|verbs.AccessRemoteWrite|verbs.AccessRemoteRead|verbs.AccessMWBind)
			mw, err := b.pd.AllocMW(verbs.MWType2)
			if err != nil {
				t.Skipf("no type 2 memory windows: %v", err)
			}
			t.Cleanup(func() { mw.Dealloc() })
			win := verbs.IncRKey(mw.RKey())
			b.send(verbs.SendWR{WRID: 6, Opcode: verbs.WRBindMW, SendFlags: verbs.SendSignaled, BindMW: verbs.BindMWWR{MW: mw, RKey: win,
				BindInfo: verbs.MWBindInfo{MR: tgt.mr, Addr: tgt.mr.Addr(), Length: regionLen, AccessFlags: verbs.AccessRemoteWrite | verbs.AccessRemoteRead}}})
			b.one(verbs.WCSuccess, verbs.WCBindMW)
			key := c.key(b, tgt, win)
			b.recv(1, 0, 64)
			a.send(verbs.SendWR{WRID: 2, Opcode: verbs.WRSendWithInv, InvalidateRKey: key, SendFlags: verbs.SendSignaled, SGList: []verbs.SGE{a.mr.SGE(0, 8)}})
			if !c.ok {
				// The receive completes with IBV_WC_REM_INV_REQ_ERR and
				// the responder's QP goes to ERR (Linux rxe's "class J").
				// What the requester then sees varies between devices
				// (rdmago's rxe NAKs the request as invalid, which
				// completes it with IBV_WC_REM_INV_REQ_ERR), but it is
				// not success.
				rwc := b.wait(1)[0]
				if rwc.Status != verbs.WCRemInvReqErr || rwc.WRID != 1 {
					t.Fatalf("receive of a SEND_WITH_INV of key %#x: %s (wr_id %d), want %s", key, rwc.Status, rwc.WRID, verbs.WCRemInvReqErr)
				}
				if st := queryState(t, b.qp); st != verbs.QPSErr {
					t.Errorf("responder QP in %s after a refused invalidation, want ERR", st)
				}
				if swc := a.wait(1)[0]; swc.Status == verbs.WCSuccess {
					t.Fatalf("SEND_WITH_INV of key %#x succeeded", key)
				}
				if off, bad := tgt.changed(tgt.before); bad {
					t.Fatalf("the responder's memory changed at region offset %d", off)
				}
				return
			}
			swc := a.wait(1)[0]
			if swc.Status != verbs.WCSuccess {
				t.Fatalf("SEND_WITH_INV completed with %s", swc.Status)
			}
			rwc := b.one(verbs.WCSuccess, verbs.WCRecv)
			if rwc.WCFlags&verbs.WCWithInv == 0 || rwc.InvalidatedRKey() != key {
				t.Fatalf("receive completion flags %#x key %#x, want IBV_WC_WITH_INV and %#x", rwc.WCFlags, rwc.InvalidatedRKey(), key)
			}
			fill(a.buf[:64], 0x33)
			a.send(verbs.SendWR{WRID: 3, Opcode: verbs.WRRDMAWrite, SendFlags: verbs.SendSignaled, SGList: []verbs.SGE{a.mr.SGE(0, 64)},
				RemoteAddr: tgt.mr.Addr(), RKey: key})
			if st := a.wait(1)[0].Status; st != verbs.WCRemAccessErr {
				t.Fatalf("a WRITE through the invalidated window completed with %s, want %s", st, verbs.WCRemAccessErr)
			}
			if off, bad := tgt.changed(tgt.before); bad {
				t.Fatalf("the responder's memory changed at region offset %d", off)
			}
		})
	}
}
