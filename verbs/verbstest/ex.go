package verbstest

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"testing"
	"time"

	"github.com/rdmago/rdmago/verbs"
)

// The extended verbs: ibv_query_device_ex, ibv_create_cq_ex with its
// start/next/end polling, and ibv_create_qp_ex with the ibv_wr_* builder.

// exWC is a completion as a CQEx reads it.
type exWC struct {
	wc       verbs.WC
	ts, wall uint64
}

// pollEx takes n completions from the side's CQEx with StartPoll,
// NextPoll and EndPoll, failing the test after the target's timeout.
func (s *side) pollEx(n int) []exWC {
	s.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), s.tg.Timeout)
	defer cancel()
	var out []exWC
	for len(out) < n {
		err := s.cqx.StartPoll(nil)
		if errors.Is(err, verbs.ErrNoEntry) {
			if err := s.cq.Wait(ctx); err != nil {
				s.t.Fatalf("waiting for %d completion(s), have %d: %v", n, len(out), err)
			}
			continue
		}
		if err != nil {
			s.t.Fatal(err)
		}
		for {
			out = append(out, s.readEx())
			if len(out) == n {
				break
			}
			if err := s.cqx.NextPoll(); err != nil {
				if !errors.Is(err, verbs.ErrNoEntry) {
					s.t.Fatal(err)
				}
				break
			}
		}
		s.cqx.EndPoll()
	}
	return out
}

// readEx reads the current completion with the ibv_wc_read_* calls.
func (s *side) readEx() exWC {
	x := s.cqx
	return exWC{
		wc: verbs.WC{WRID: x.WRID, Status: x.Status, Opcode: x.ReadOpcode(), VendorErr: x.ReadVendorErr(),
			ByteLen: x.ReadByteLen(), ImmData: x.ReadImmData(), QPNum: x.ReadQPNum(), SrcQP: x.ReadSrcQP(),
			WCFlags: x.ReadWCFlags(), SLID: uint16(x.ReadSLID()), SL: x.ReadSL(), DLIDPathBits: x.ReadDLIDPathBits()},
		ts: x.ReadCompletionTS(), wall: x.ReadCompletionWallclockNS(),
	}
}

func queryEx(t *testing.T, dev *verbs.Device) verbs.DeviceAttrEx {
	t.Helper()
	ctx, err := dev.Open()
	if err != nil {
		t.Fatal(err)
	}
	defer ctx.Close()
	x, err := ctx.QueryDeviceEx(nil)
	if err != nil {
		t.Fatal(err)
	}
	return x
}

func testQueryDeviceEx(t *testing.T, tg *Target) {
	ctx, err := tg.A.Open()
	if err != nil {
		t.Fatal(err)
	}
	defer ctx.Close()
	a, err := ctx.QueryDevice()
	if err != nil {
		t.Fatal(err)
	}
	x, err := ctx.QueryDeviceEx(nil)
	if err != nil {
		t.Fatal(err)
	}
	if x.OrigAttr != a {
		t.Errorf("orig_attr %+v\ndiffers from ibv_query_device's %+v", x.OrigAttr, a)
	}
	if x.DeviceCapFlagsEx != 0 && uint32(x.DeviceCapFlagsEx) != a.DeviceCapFlags {
		t.Errorf("device_cap_flags_ex %#x: its low 32 bits are not device_cap_flags %#x", x.DeviceCapFlagsEx, a.DeviceCapFlags)
	}
	if (x.CompletionTimestampMask == 0) != (x.HCACoreClock == 0) {
		t.Errorf("completion_timestamp_mask %#x with hca_core_clock %d kHz: timestamps need both", x.CompletionTimestampMask, x.HCACoreClock)
	}
	if _, err := ctx.QueryDeviceEx(&verbs.QueryDeviceExInput{CompMask: 1}); !errors.Is(err, verbs.ErrInvalidArgument) {
		t.Errorf("input comp_mask 1: %v, want EINVAL", err)
	}
}

// exTraffic runs one round of traffic whose completions both polling
// styles read: a SEND_WITH_IMM, a WRITE_WITH_IMM, a READ and an empty
// SEND from a to b.
func exTraffic(a, b *side) {
	for i := range 3 {
		b.recv(uint64(10+i), 8192+1024*i, 1024)
	}
	fill(a.buf[:1024], 5)
	a.send(verbs.SendWR{WRID: 1, Opcode: verbs.WRSendWithImm, ImmData: 0xfeed, SendFlags: verbs.SendSignaled, SGList: []verbs.SGE{a.mr.SGE(0, 100)}})
	a.send(verbs.SendWR{WRID: 2, Opcode: verbs.WRRDMAWriteWithImm, ImmData: 0xbeef, SendFlags: verbs.SendSignaled, SGList: []verbs.SGE{a.mr.SGE(0, 200)},
		RemoteAddr: b.mr.Addr() + 16384, RKey: b.mr.RKey()})
	a.send(verbs.SendWR{WRID: 3, Opcode: verbs.WRRDMARead, SendFlags: verbs.SendSignaled, SGList: []verbs.SGE{a.mr.SGE(4096, 300)},
		RemoteAddr: b.mr.Addr() + 16384, RKey: b.mr.RKey()})
	a.send(verbs.SendWR{WRID: 4, Opcode: verbs.WRSend, SendFlags: verbs.SendSignaled})
}

// testCQExMatchesPoll: a CQEx's Read calls give what ibv_poll_cq gives
// for the same traffic, and an empty CQEx reports ENOENT.
func testCQExMatchesPoll(t *testing.T, tg *Target) {
	a, b := pair(t, tg, opts{cqEx: true, wcFlags: verbs.WCStandardFlags})
	exTraffic(a, b)
	exA, exB := a.pollEx(4), b.pollEx(3)
	exTraffic(a, b)
	plA, plB := a.wait(4), b.wait(3)
	for _, c := range []struct {
		who string
		ex  []exWC
		pl  []verbs.WC
	}{{"requester", exA, plA}, {"responder", exB, plB}} {
		for i, p := range c.pl {
			p.PKeyIndex = 0 // not among an extended CQ's fields
			if got := c.ex[i].wc; got != p || p.Status != verbs.WCSuccess {
				t.Errorf("%s completion %d: CQEx read %+v\nibv_poll_cq gave %+v", c.who, i, got, p)
			}
		}
	}
	if exB[0].wc.ImmData != 0xfeed || exB[1].wc.Opcode != verbs.WCRecvRDMAWithImm || exA[2].wc.Opcode != verbs.WCRDMARead {
		t.Errorf("unexpected completions %+v %+v", exA, exB)
	}
	if err := a.cqx.StartPoll(nil); !errors.Is(err, verbs.ErrNoEntry) {
		t.Errorf("StartPoll on an empty CQ: %v, want ENOENT", err)
	}
	if err := a.cqx.NextPoll(); !errors.Is(err, verbs.ErrInvalidArgument) {
		t.Errorf("NextPoll outside a batch: %v, want EINVAL", err)
	}
	if err := a.cqx.StartPoll(&verbs.PollCQAttr{CompMask: 1}); !errors.Is(err, verbs.ErrInvalidArgument) {
		t.Errorf("StartPoll with comp_mask 1: %v, want EINVAL", err)
	}
}

// testCQExTimestamps: a device that reports a completion clock stamps
// completions in order, within the run's wall-clock window; one that does
// not refuses a CQ that asks for timestamps.
func testCQExTimestamps(t *testing.T, tg *Target) {
	x := queryEx(t, tg.A)
	flags := verbs.WCStandardFlags | verbs.WCExWithCompletionTimestamp | verbs.WCExWithCompletionTimestampWallclock
	if x.HCACoreClock == 0 {
		ctx, err := tg.A.Open()
		if err != nil {
			t.Fatal(err)
		}
		defer ctx.Close()
		if cq, err := ctx.CreateCQEx(&verbs.CQInitAttrEx{CQE: 16, WCFlags: flags}); !errors.Is(err, verbs.ErrNotSupported) {
			if cq != nil {
				cq.Destroy()
			}
			t.Fatalf("a device without a completion clock made a CQ with timestamps: %v", err)
		}
		t.Skip("the device has no completion clock (hca_core_clock 0); it refuses timestamps as it should")
	}
	a, b := pair(t, tg, opts{cqEx: true, wcFlags: flags})
	// The device's clock is converted to wall-clock time by its driver;
	// allow that conversion some error.
	const slack = 50 * time.Millisecond
	before := time.Now().Add(-slack)
	const n = 8
	for i := range n {
		b.recv(uint64(i), 64*i, 64)
		a.send(verbs.SendWR{WRID: uint64(i), Opcode: verbs.WRSend, SendFlags: verbs.SendSignaled, SGList: []verbs.SGE{a.mr.SGE(0, 64)}})
	}
	ea, eb := a.pollEx(n), b.pollEx(n)
	after := time.Now().Add(slack)
	for _, l := range [][]exWC{ea, eb} {
		for i, e := range l {
			if e.ts == 0 || e.ts&^x.CompletionTimestampMask != 0 {
				t.Errorf("completion %d: timestamp %#x (mask %#x)", i, e.ts, x.CompletionTimestampMask)
			}
			if i > 0 && e.ts < l[i-1].ts {
				t.Errorf("completion %d stamped %d, before the one ahead of it (%d)", i, e.ts, l[i-1].ts)
			}
			if w := time.Unix(0, int64(e.wall)); w.Before(before) || w.After(after) {
				t.Errorf("completion %d: wall clock %s outside the run [%s, %s]", i, w, before, after)
			}
		}
	}
}

// testCQExRefuses: fields, flags and comp_mask bits nobody defines fail
// with EOPNOTSUPP, as ibv_create_cq_ex does.
func testCQExRefuses(t *testing.T, tg *Target) {
	ctx, err := tg.A.Open()
	if err != nil {
		t.Fatal(err)
	}
	defer ctx.Close()
	for _, c := range []struct {
		name string
		attr verbs.CQInitAttrEx
		want verbs.Errno
	}{
		{"unknown wc_flags bit", verbs.CQInitAttrEx{CQE: 16, WCFlags: 1 << 20}, verbs.ErrNotSupported},
		{"parent domain", verbs.CQInitAttrEx{CQE: 16, CompMask: verbs.CQInitAttrMaskPD}, verbs.ErrNotSupported},
		{"unknown comp_mask bit", verbs.CQInitAttrEx{CQE: 16, CompMask: 1 << 5}, verbs.ErrNotSupported},
		{"unknown flag", verbs.CQInitAttrEx{CQE: 16, CompMask: verbs.CQInitAttrMaskFlags, Flags: 1 << 7}, verbs.ErrNotSupported},
		{"no entries", verbs.CQInitAttrEx{CQE: 0}, verbs.ErrInvalidArgument},
		{"comp_vector out of range", verbs.CQInitAttrEx{CQE: 16, CompVector: ctx.NumCompVectors()}, verbs.ErrInvalidArgument},
	} {
		cq, err := ctx.CreateCQEx(&c.attr)
		if !errors.Is(err, c.want) {
			if cq != nil {
				cq.Destroy()
			}
			t.Errorf("%s: %v, want %s", c.name, err, c.want)
		}
	}
}

// rcSendOps are the RC operations the device has.
func rcSendOps(t *testing.T, dev *verbs.Device) verbs.QPCreateSendOpsFlags {
	ops := verbs.QPExWithSend | verbs.QPExWithSendWithImm | verbs.QPExWithRDMAWrite | verbs.QPExWithRDMAWriteWithImm | verbs.QPExWithRDMARead
	if queryEx(t, dev).OrigAttr.AtomicCap != verbs.AtomicNone {
		ops |= verbs.QPExWithAtomicCmpAndSwp | verbs.QPExWithAtomicFetchAndAdd
	}
	return ops
}

// complete posts the batch and fails the test if WRComplete does.
func complete(t *testing.T, qx *verbs.QPEx) {
	t.Helper()
	if err := qx.WRComplete(); err != nil {
		t.Fatal(err)
	}
}

// testQPExEveryOp builds one batch of every operation the device has,
// with each kind of data setter, and checks the data and completions.
func testQPExEveryOp(t *testing.T, tg *Target) {
	ops := rcSendOps(t, tg.A)
	a, b := pair(t, tg, opts{inline: 64, sendOps: ops})
	_, init, err := a.qp.Query()
	if err != nil {
		t.Fatal(err)
	}
	inline := init.Cap.MaxInlineData >= 16
	atomics := ops&verbs.QPExWithAtomicFetchAndAdd != 0
	fill(a.buf[:8192], 3)
	binary.NativeEndian.PutUint64(b.buf[24576:], 100)
	binary.NativeEndian.PutUint64(b.buf[24584:], 9)
	for i := range 3 {
		b.recv(uint64(100+i), 30000+1024*i, 1024)
	}
	qx := a.qp.QPEx()
	if qx == nil {
		t.Fatal("a QP made with send_ops_flags has no QPEx")
	}
	msg, parts := []byte("inline send imm!"), [][]byte{[]byte("abc"), []byte("defg")}
	qx.WRStart()
	qx.WRID, qx.WRFlags = 1, verbs.SendSignaled
	qx.WRSend()
	qx.WRSetSGE(a.mr.LKey(), a.mr.Addr(), 1000)
	qx.WRID = 2
	qx.WRSendImm(0x1234)
	if inline {
		qx.WRSetInlineData(msg)
		copy(msg, "overwritten now!") // copied at the call, as IBV_SEND_INLINE
	} else {
		copy(a.buf[6000:], msg)
		qx.WRSetSGE(a.mr.LKey(), a.mr.Addr()+6000, uint32(len(msg)))
	}
	qx.WRID = 3
	qx.WRRDMAWrite(b.mr.RKey(), b.mr.Addr()+8192)
	qx.WRSetSGEList([]verbs.SGE{a.mr.SGE(1000, 500), a.mr.SGE(2000, 300)})
	qx.WRID = 4
	qx.WRRDMAWriteImm(b.mr.RKey(), b.mr.Addr()+12288, 0x5678)
	if inline {
		qx.WRSetInlineDataList(parts)
		copy(parts[1], "XXXX")
	} else {
		copy(a.buf[7000:], "abcdefg")
		qx.WRSetSGE(a.mr.LKey(), a.mr.Addr()+7000, 7)
	}
	qx.WRID = 5
	qx.WRRDMARead(b.mr.RKey(), b.mr.Addr()+16384)
	qx.WRSetSGE(a.mr.LKey(), a.mr.Addr()+20000, 256)
	if atomics {
		qx.WRID = 6
		qx.WRAtomicFetchAdd(b.mr.RKey(), b.mr.Addr()+24576, 5)
		qx.WRSetSGE(a.mr.LKey(), a.mr.Addr()+24576, 8)
		qx.WRID = 7
		qx.WRAtomicCmpSwp(b.mr.RKey(), b.mr.Addr()+24584, 9, 10)
		qx.WRSetSGE(a.mr.LKey(), a.mr.Addr()+24584, 8)
	}
	complete(t, qx)
	want := []verbs.WCOpcode{verbs.WCSend, verbs.WCSend, verbs.WCRDMAWrite, verbs.WCRDMAWrite, verbs.WCRDMARead}
	if atomics {
		want = append(want, verbs.WCFetchAdd, verbs.WCCompSwap)
	}
	for i, wc := range a.wait(len(want)) {
		if wc.Status != verbs.WCSuccess || wc.Opcode != want[i] || wc.WRID != uint64(i+1) {
			t.Errorf("requester completion %d: wr_id %d %s %s, want wr_id %d %s", i, wc.WRID, wc.Opcode, wc.Status, i+1, want[i])
		}
	}
	rs := b.wait(3)
	for i, c := range []struct {
		op   verbs.WCOpcode
		n    uint32
		imm  uint32
		data string
	}{
		{verbs.WCRecv, 1000, 0, string(a.buf[:1000])},
		{verbs.WCRecv, 16, 0x1234, "inline send imm!"},
		{verbs.WCRecvRDMAWithImm, 7, 0x5678, ""},
	} {
		wc := rs[i]
		if wc.Status != verbs.WCSuccess || wc.Opcode != c.op || wc.ByteLen != c.n || wc.WRID != uint64(100+i) ||
			c.imm != 0 && (wc.WCFlags&verbs.WCWithImm == 0 || wc.ImmData != c.imm) {
			t.Errorf("responder completion %d: %+v, want %s of %d bytes, immediate %#x", i, wc, c.op, c.n, c.imm)
		}
		if got := string(b.buf[30000+1024*i : 30000+1024*i+len(c.data)]); got != c.data {
			t.Errorf("message %d arrived as %q", i, got)
		}
	}
	if got, want := b.buf[8192:8992], append(append([]byte(nil), a.buf[1000:1500]...), a.buf[2000:2300]...); !bytes.Equal(got, want) {
		t.Error("RDMA WRITE of an SGE list: the data differs")
	}
	if got := string(b.buf[12288:12295]); got != "abcdefg" {
		t.Errorf("RDMA WRITE WITH IMMEDIATE wrote %q", got)
	}
	if !bytes.Equal(a.buf[20000:20256], b.buf[16384:16640]) {
		t.Error("RDMA READ: the data differs")
	}
	if atomics {
		if got, old := binary.NativeEndian.Uint64(b.buf[24576:]), binary.NativeEndian.Uint64(a.buf[24576:]); got != 105 || old != 100 {
			t.Errorf("FETCH_AND_ADD: target %d, returned %d; want 105 and 100", got, old)
		}
		if got, old := binary.NativeEndian.Uint64(b.buf[24584:]), binary.NativeEndian.Uint64(a.buf[24584:]); got != 10 || old != 9 {
			t.Errorf("CMP_AND_SWP: target %d, returned %d; want 10 and 9", got, old)
		}
	}
}

// testQPExMW: BIND_MW, SEND_WITH_INV and LOCAL_INV built with the
// ibv_wr_* calls.
func testQPExMW(t *testing.T, tg *Target) {
	x := queryEx(t, tg.A).OrigAttr
	if x.DeviceCapFlags&(verbs.DeviceMemWindowType2A|verbs.DeviceMemWindowType2B) == 0 || x.DeviceCapFlags&verbs.DeviceMemMgtExtensions == 0 {
		t.Skip("the device has no type 2 memory windows or no memory management extensions")
	}
	a, b := pair(t, tg, opts{sendOps: verbs.QPExWithSend | verbs.QPExWithSendWithInv | verbs.QPExWithBindMW | verbs.QPExWithLocalInv})
	qx := a.qp.QPEx()
	mw, err := a.pd.AllocMW(verbs.MWType2)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { mw.Dealloc() })
	rkey := verbs.IncRKey(mw.RKey())
	qx.WRStart()
	qx.WRID, qx.WRFlags = 1, verbs.SendSignaled
	qx.WRBindMW(mw, rkey, &verbs.MWBindInfo{MR: a.mr, Addr: a.mr.Addr() + 4096, Length: 4096, AccessFlags: verbs.AccessRemoteWrite})
	complete(t, qx)
	a.one(verbs.WCSuccess, verbs.WCBindMW)
	if mw.RKey() != rkey {
		t.Fatalf("window key %#x after the bind, want %#x", mw.RKey(), rkey)
	}
	copy(b.buf, "through the window")
	b.send(verbs.SendWR{WRID: 2, Opcode: verbs.WRRDMAWrite, SendFlags: verbs.SendSignaled, SGList: []verbs.SGE{b.mr.SGE(0, 18)},
		RemoteAddr: a.mr.Addr() + 4096, RKey: rkey})
	b.one(verbs.WCSuccess, verbs.WCRDMAWrite)
	if got := string(a.buf[4096:4114]); got != "through the window" {
		t.Fatalf("write through the window landed as %q", got)
	}

	peerKey := bindType2(t, b)
	b.recv(3, 8192, 64)
	qx.WRStart()
	qx.WRID = 4
	qx.WRSendInv(peerKey)
	qx.WRSetSGE(a.mr.LKey(), a.mr.Addr(), 8)
	complete(t, qx)
	a.one(verbs.WCSuccess, verbs.WCSend)
	if wc := b.one(verbs.WCSuccess, verbs.WCRecv); wc.InvalidatedRKey() != peerKey {
		t.Fatalf("receive completion names key %#x, want the invalidated %#x", wc.InvalidatedRKey(), peerKey)
	}

	qx.WRStart()
	qx.WRID = 5
	qx.WRLocalInv(rkey)
	complete(t, qx)
	a.one(verbs.WCSuccess, verbs.WCLocalInv)
	b.send(verbs.SendWR{WRID: 6, Opcode: verbs.WRRDMAWrite, SendFlags: verbs.SendSignaled, SGList: []verbs.SGE{b.mr.SGE(0, 18)},
		RemoteAddr: a.mr.Addr() + 4096, RKey: rkey})
	if st := b.wait(1)[0].Status; st != verbs.WCRemAccessErr {
		t.Fatalf("a write through the invalidated window completed with %s, want %s", st, verbs.WCRemAccessErr)
	}
}

// testQPExRefusesOps: an operation the QP was not created for, and other
// misuse, fail WRComplete and post nothing; creation refuses operations
// the QP type lacks.
func testQPExRefusesOps(t *testing.T, tg *Target) {
	a, b := pair(t, tg, opts{sendOps: verbs.QPExWithSend})
	qx := a.qp.QPEx()
	sge := func() { qx.WRSetSGE(a.mr.LKey(), a.mr.Addr(), 8) }
	for i, c := range []struct {
		name  string
		build func()
		want  verbs.Errno
	}{
		{"RDMA WRITE", func() { qx.WRRDMAWrite(b.mr.RKey(), b.mr.Addr()); sge() }, verbs.ErrNotSupported},
		{"SEND WITH IMMEDIATE", func() { qx.WRSendImm(1); sge() }, verbs.ErrNotSupported},
		{"RDMA READ after a SEND", func() { qx.WRSend(); sge(); qx.WRRDMARead(b.mr.RKey(), b.mr.Addr()); sge() }, verbs.ErrNotSupported},
		{"setter without a builder", sge, verbs.ErrInvalidArgument},
		{"UD address on an RC QP's request without AH", func() { qx.WRSend(); qx.WRSetUDAddr(nil, 1, 1) }, verbs.ErrInvalidArgument},
		{"inline data beyond max_inline_data", func() { qx.WRSend(); qx.WRSetInlineData(make([]byte, 1<<20)) }, verbs.ErrInvalidArgument},
		{"more SGEs than max_send_sge", func() { qx.WRSend(); qx.WRSetSGEList(make([]verbs.SGE, 1000)) }, verbs.ErrInvalidArgument},
	} {
		qx.WRStart()
		qx.WRID, qx.WRFlags = uint64(100+i), verbs.SendSignaled
		c.build()
		if err := qx.WRComplete(); !errors.Is(err, c.want) {
			t.Errorf("%s: WRComplete returned %v, want %s", c.name, err, c.want)
		}
	}
	if err := qx.WRComplete(); !errors.Is(err, verbs.ErrInvalidArgument) {
		t.Errorf("WRComplete without WRStart: %v, want EINVAL", err)
	}
	// Nothing of the above was posted: the first completion is this
	// SEND's.
	b.recv(1, 0, 64)
	qx.WRStart()
	qx.WRID = 7
	qx.WRSend()
	sge()
	complete(t, qx)
	if wc := a.one(verbs.WCSuccess, verbs.WCSend); wc.WRID != 7 {
		t.Errorf("first completion has wr_id %d: a refused batch was posted", wc.WRID)
	}
	b.one(verbs.WCSuccess, verbs.WCRecv)

	ctx, pd, cq := a.ctx, a.pd, a.cq
	for _, c := range []struct {
		name string
		typ  verbs.QPType
		ops  verbs.QPCreateSendOpsFlags
	}{
		{"RDMA WRITE on UD", verbs.QPTUD, verbs.QPExWithRDMAWrite},
		{"RDMA READ on UC", verbs.QPTUC, verbs.QPExWithRDMARead},
		{"TSO on RC", verbs.QPTRC, verbs.QPExWithTSO},
	} {
		qp, err := ctx.CreateQPEx(&verbs.QPInitAttrEx{QPInitAttr: verbs.QPInitAttr{SendCQ: cq, RecvCQ: cq, QPType: c.typ, Cap: verbs.QPCap{MaxSendWR: 4, MaxRecvWR: 4, MaxSendSGE: 1, MaxRecvSGE: 1}},
			CompMask: verbs.QPInitAttrPD | verbs.QPInitAttrSendOpsFlags, PD: pd, SendOpsFlags: c.ops})
		if !errors.Is(err, verbs.ErrNotSupported) {
			if qp != nil {
				qp.Destroy()
			}
			t.Errorf("%s: %v, want EOPNOTSUPP", c.name, err)
		}
	}
	qp, err := ctx.CreateQPEx(&verbs.QPInitAttrEx{QPInitAttr: verbs.QPInitAttr{SendCQ: cq, RecvCQ: cq, QPType: verbs.QPTRC, Cap: verbs.QPCap{MaxSendWR: 4, MaxRecvWR: 4, MaxSendSGE: 1, MaxRecvSGE: 1}},
		CompMask: verbs.QPInitAttrPD, PD: pd})
	if err != nil {
		t.Fatal(err)
	}
	defer qp.Destroy()
	if qp.QPEx() != nil {
		t.Error("a QP made without send_ops_flags has a QPEx")
	}
}

// testQPExAbort: WRAbort drops the batch; the next one posts alone.
func testQPExAbort(t *testing.T, tg *Target) {
	a, b := pair(t, tg, opts{sendOps: verbs.QPExWithSend})
	qx := a.qp.QPEx()
	copy(a.buf, "first second")
	b.recv(1, 1024, 64)
	qx.WRStart()
	qx.WRID, qx.WRFlags = 10, verbs.SendSignaled
	qx.WRSend()
	qx.WRSetSGE(a.mr.LKey(), a.mr.Addr(), 5)
	qx.WRAbort()
	qx.WRStart()
	qx.WRID = 11
	qx.WRSend()
	qx.WRSetSGE(a.mr.LKey(), a.mr.Addr()+6, 6)
	complete(t, qx)
	if wc := a.one(verbs.WCSuccess, verbs.WCSend); wc.WRID != 11 {
		t.Fatalf("completion of wr_id %d, want 11: the aborted request was posted", wc.WRID)
	}
	if wc := b.one(verbs.WCSuccess, verbs.WCRecv); wc.ByteLen != 6 || string(b.buf[1024:1030]) != "second" {
		t.Fatalf("received %d bytes %q, want the second request's", wc.ByteLen, b.buf[1024:1030])
	}
}

// testQPExUD: a UD send built with ibv_wr_set_ud_addr; without the
// address WRComplete fails.
func testQPExUD(t *testing.T, tg *Target) {
	a, b := pair(t, tg, opts{typ: verbs.QPTUD, sendOps: verbs.QPExWithSend | verbs.QPExWithSendWithImm})
	ah, err := a.pd.CreateAH(&verbs.AHAttr{IsGlobal: true, PortNum: tg.Port, GRH: verbs.GlobalRoute{DGID: b.gid, SGIDIndex: uint8(a.gi), HopLimit: 64}})
	if err != nil {
		t.Fatal(err)
	}
	defer ah.Destroy()
	qx := a.qp.QPEx()
	qx.WRStart()
	qx.WRID, qx.WRFlags = 1, verbs.SendSignaled
	qx.WRSend()
	qx.WRSetSGE(a.mr.LKey(), a.mr.Addr(), 8)
	if err := qx.WRComplete(); !errors.Is(err, verbs.ErrInvalidArgument) {
		t.Errorf("a UD send without ibv_wr_set_ud_addr: %v, want EINVAL", err)
	}
	copy(a.buf, "datagram")
	b.recv(2, 0, 40+64)
	qx.WRStart()
	qx.WRID = 3
	qx.WRSendImm(77)
	qx.WRSetUDAddr(ah, b.qp.Num(), 0x11111111)
	qx.WRSetSGE(a.mr.LKey(), a.mr.Addr(), 8)
	complete(t, qx)
	if wc := a.one(verbs.WCSuccess, verbs.WCSend); wc.WRID != 3 {
		t.Fatalf("completion of wr_id %d, want 3", wc.WRID)
	}
	wc := b.one(verbs.WCSuccess, verbs.WCRecv)
	if wc.ByteLen != 48 || wc.SrcQP != a.qp.Num() || wc.ImmData != 77 || string(b.buf[40:48]) != "datagram" {
		t.Fatalf("UD receive %+v with %q", wc, b.buf[40:48])
	}
}
