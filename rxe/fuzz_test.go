package rxe

import (
	"bytes"
	"encoding/binary"
	"net/netip"
	"testing"

	"github.com/rdmago/rdmago/rxe/link"
	"github.com/rdmago/rdmago/rxe/wire"
	"github.com/rdmago/rdmago/verbs"
)

// onOwner runs fn in q's step (holding its stepMu, on whichever goroutine
// steps it) after every packet delivered before it, and waits for it.
func onOwner(q *qp, fn func()) {
	done := make(chan struct{})
	if !q.deliver(inPacket{fn: func() { fn(); close(done) }}, true) {
		return
	}
	<-done
}

// FuzzReceive feeds arbitrary packets to a live RC QP through the device's
// receive entry point (the links' own checks are fuzzed in package wire).
// Whatever arrives, nothing may crash, no memory outside the registered
// region may change, and a QP driven into ERR is brought back for the next
// input.
func FuzzReceive(f *testing.F) {
	const rqPSN = 0x100
	a, b, _ := memPair(f, 7, link.Faults{}, pairOpts{bufSize: 4096})
	q := verbs.QPDriverOf(b.qp).(*qp)
	// Guard memory around a registered window: only the window may change.
	arena := bytes.Repeat([]byte{0xa5}, 3*4096)
	window := arena[4096 : 2*4096]
	mr, err := b.pd.RegMR(window, verbs.AccessLocalWrite|verbs.AccessRemoteWrite|verbs.AccessRemoteRead|verbs.AccessRemoteAtomic)
	if err != nil {
		f.Fatal(err)
	}
	f.Cleanup(func() { mr.Dereg() })
	gidA, _ := a.ctx.QueryGID(1, 0)
	reconnect := func() {
		steps := []struct {
			attr verbs.QPAttr
			mask verbs.QPAttrMask
		}{
			{verbs.QPAttr{QPState: verbs.QPSReset}, verbs.QPAttrState},
			{verbs.QPAttr{QPState: verbs.QPSInit, PortNum: 1, QPAccessFlags: verbs.AccessRemoteWrite | verbs.AccessRemoteRead | verbs.AccessRemoteAtomic},
				verbs.QPAttrState | verbs.QPAttrPKeyIndex | verbs.QPAttrPort | verbs.QPAttrAccessFlags},
			{verbs.QPAttr{QPState: verbs.QPSRTR, PathMTU: verbs.MTU1024, DestQPNum: a.qp.Num(), RQPSN: rqPSN, MaxDestRdAtomic: 4, MinRNRTimer: 1,
				AHAttr: verbs.AHAttr{IsGlobal: true, PortNum: 1, GRH: verbs.GlobalRoute{DGID: gidA}}},
				verbs.QPAttrState | verbs.QPAttrAV | verbs.QPAttrPathMTU | verbs.QPAttrDestQPN | verbs.QPAttrRQPSN | verbs.QPAttrMaxDestRdAtomic | verbs.QPAttrMinRNRTimer},
			{verbs.QPAttr{QPState: verbs.QPSRTS, SQPSN: 0x200, Timeout: 1, RetryCnt: 1, RNRRetry: 1, MaxRdAtomic: 4},
				verbs.QPAttrState | verbs.QPAttrSQPSN | verbs.QPAttrTimeout | verbs.QPAttrRetryCnt | verbs.QPAttrRNRRetry | verbs.QPAttrMaxQPRdAtomic},
		}
		for _, s := range steps {
			if err := b.qp.Modify(&s.attr, s.mask); err != nil {
				f.Fatal(err)
			}
		}
		err := b.qp.PostRecv([]verbs.RecvWR{{WRID: 1, SGList: []verbs.SGE{mr.SGE(0, 2048)}}, {WRID: 2, SGList: []verbs.SGE{mr.SGE(2048, 2048)}}})
		if err != nil {
			f.Fatal(err)
		}
		onOwner(q, func() {})
	}
	reconnect()
	// Seeds: a valid packet of each kind, aimed at the window.
	for _, op := range []wire.OpCode{wire.RCSendOnly, wire.RCSendFirst, wire.RCWriteOnly, wire.RCWriteFirst, wire.RCWriteOnlyWithImmediate,
		wire.RCReadRequest, wire.RCCompareSwap, wire.RCFetchAdd, wire.RCSendLastWithImmediate, wire.RCAcknowledge, wire.RCReadResponseOnly,
		wire.UCSendOnly, wire.UDSendOnly} {
		addFuzzSeed(f, wire.Headers{BTH: wire.BTHFields{OpCode: op, PKey: 0xffff, PSN: rqPSN, AckReq: true}}, mr, true)
	}
	// Past a gap, where the responder holds SENDs and WRITEs.
	for _, op := range []wire.OpCode{wire.RCSendOnly, wire.RCWriteOnly, wire.RCWriteFirst, wire.RCSendMiddle} {
		addFuzzSeed(f, wire.Headers{BTH: wire.BTHFields{OpCode: op, PKey: 0xffff, PSN: rqPSN + 1}}, mr, false)
	}
	wcs := make([]verbs.WC, 64)
	f.Fuzz(func(t *testing.T, pkt []byte, atEPSN bool) {
		if !deliverFuzzed(t, q, pkt, atEPSN, arena) {
			return
		}
		b.cq.Poll(wcs)
		a.cq.Poll(wcs)
		if b.qp.State() == verbs.QPSErr {
			reconnect()
		}
	})
}

// addFuzzSeed adds to f the packet of h, its RETH and AtomicETH aimed at
// the start of mr and a payload of 1024 bytes if the opcode carries one,
// delivered at the expected PSN if atEPSN.
func addFuzzSeed(f *testing.F, h wire.Headers, mr *verbs.MR, atEPSN bool) {
	f.Helper()
	h.RETH = wire.RETHFields{VA: mr.Addr() + 64, RKey: mr.RKey(), DMALen: 1024}
	h.AtomicETH = wire.AtomicETHFields{VA: mr.Addr() + 8, RKey: mr.RKey(), SwapAdd: 1}
	n := 0
	if h.BTH.OpCode.HasPayload() {
		n = 1024
	}
	pkt, err := wire.AppendPacket(nil, &h, make([]byte, n))
	if err != nil {
		f.Fatal(err)
	}
	f.Add(pkt, atEPSN)
}

// deliverFuzzed hands pkt to q as the device's receive loop would,
// addressed to q and, if atEPSN, at the PSN its responder expects, and
// waits until q has handled it. The arena's middle 4 KiB are registered
// memory: it fails t if a byte of the 0xa5 guard pages around them
// changed. It reports false, doing nothing, for a length no link passes.
func deliverFuzzed(t *testing.T, q *qp, pkt []byte, atEPSN bool, arena []byte) bool {
	t.Helper()
	if len(pkt) < wire.BTHLen+wire.ICRCLen || len(pkt) > maxPacket {
		return false
	}
	buf := q.hw.getBuf()[:len(pkt)]
	copy(buf, pkt)
	binary.BigEndian.PutUint32(buf[4:], uint32(buf[4])<<24|q.num) // to the QP under test
	if atEPSN {
		var epsn wire.PSN
		onOwner(q, func() { epsn = q.resp.epsn })
		binary.BigEndian.PutUint32(buf[8:], uint32(buf[8])<<24|uint32(epsn))
	}
	if !q.deliver(inPacket{buf: buf, src: peerAddr(q)}, true) {
		t.Fatal("QP refused the packet")
	}
	onOwner(q, func() {})
	if !bytes.Equal(arena[:4096], fuzzGuard) || !bytes.Equal(arena[2*4096:], fuzzGuard) {
		t.Fatal("memory outside the registered region changed")
	}
	return true
}

// fuzzGuard is what a guard page of deliverFuzzed's arena holds.
var fuzzGuard = bytes.Repeat([]byte{0xa5}, 4096)

// peerAddr returns the address q's packets come from (its AV's DGID).
func peerAddr(q *qp) (a netip.Addr) {
	onOwner(q, func() { a = q.st.dest })
	return a
}

// FuzzReceiveUD feeds arbitrary packets to a UD QP whose receive WQEs lie
// in a guarded window: nothing may crash, and nothing outside the window
// may change, whatever the opcode, Q_Key and length.
func FuzzReceiveUD(f *testing.F) {
	n := link.NewNetwork(1)
	l, _ := n.Attach(netip.MustParseAddr("10.9.0.1"))
	u := newUDEnd(f, "fuzz_ud", l, testQKey)
	q := verbs.QPDriverOf(u.qp).(*qp)
	arena := bytes.Repeat([]byte{0xa5}, 3*4096)
	guard := bytes.Repeat([]byte{0xa5}, 4096)
	mr, err := u.pd.RegMR(arena[4096:2*4096], verbs.AccessLocalWrite)
	if err != nil {
		f.Fatal(err)
	}
	f.Cleanup(func() { mr.Dereg() })
	post := func() {
		// Small and large receive buffers, so both LOC_LEN_ERR and
		// success occur.
		u.qp.PostRecv([]verbs.RecvWR{{WRID: 1, SGList: []verbs.SGE{mr.SGE(0, 100)}}, {WRID: 2, SGList: []verbs.SGE{mr.SGE(100, 4096-100)}}})
	}
	for _, op := range []wire.OpCode{wire.UDSendOnly, wire.UDSendOnlyWithImmediate, wire.RCSendOnly} {
		h := wire.Headers{BTH: wire.BTHFields{OpCode: op, PKey: 0xffff}, DETH: wire.DETHFields{QKey: testQKey, SrcQP: 0x42}, Imm: 7}
		for _, size := range []int{0, 60, 1024} {
			pkt, err := wire.AppendPacket(nil, &h, make([]byte, size))
			if err != nil {
				f.Fatal(err)
			}
			f.Add(pkt, true)
		}
	}
	wcs := make([]verbs.WC, 64)
	f.Fuzz(func(t *testing.T, pkt []byte, rightQKey bool) {
		if len(pkt) < wire.BTHLen+wire.ICRCLen || len(pkt) > maxPacket {
			return
		}
		buf := q.hw.getBuf()[:len(pkt)]
		copy(buf, pkt)
		binary.BigEndian.PutUint32(buf[4:], uint32(buf[4])<<24|q.num)
		if rightQKey && len(buf) >= wire.BTHLen+wire.DETHLen {
			binary.BigEndian.PutUint32(buf[wire.BTHLen:], testQKey)
		}
		post()
		if !q.deliver(inPacket{buf: buf, src: netip.MustParseAddr("10.9.0.2")}, true) {
			t.Fatal("QP refused the packet")
		}
		onOwner(q, func() {})
		if !bytes.Equal(arena[:4096], guard) || !bytes.Equal(arena[2*4096:], guard) {
			t.Fatal("memory outside the registered region changed")
		}
		for {
			if k, _ := u.cq.Poll(wcs); k == 0 {
				break
			}
		}
		if u.qp.State() != verbs.QPSRTS {
			t.Fatalf("UD QP left RTS: %s", u.qp.State())
		}
	})
}
