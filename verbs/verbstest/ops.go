package verbstest

import (
	"bytes"
	"encoding/binary"
	"errors"
	"testing"

	"github.com/rdmago/rdmago/verbs"
)

// The cases of the operations: queries, SEND, WRITE, READ, atomics,
// fences, and the UC and UD transports.

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
