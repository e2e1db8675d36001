package verbstest

import (
	"testing"

	"github.com/rdmago/rdmago/verbs"
)

// The cases of memory windows: binding type 1 and type 2 windows, their
// bounds, and SEND_WITH_INV.

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
