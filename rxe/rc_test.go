package rxe

import (
	"bytes"
	"encoding/binary"
	"testing"
	"time"

	"github.com/rdmago/rdmago/verbs"
)

func TestRCOperationsOverUDPLoopback(t *testing.T) {
	la, lb := udpLinks(t)
	a, b := newPair(t, la, lb, pairOpts{})
	exerciseRC(t, a, b)
}

// exerciseRC runs SEND with immediate, RDMA WRITE, RDMA READ and both
// atomics from a to b, checking data and completions.
func exerciseRC(t *testing.T, a, b *end) {
	t.Helper()
	// SEND with immediate, 3000 bytes (three packets at MTU 1024).
	fill(a.buf[:3000], 1)
	if err := b.qp.PostRecv([]verbs.RecvWR{{WRID: 7, SGList: []verbs.SGE{b.mr.SGE(0, 4096)}}}); err != nil {
		t.Fatal(err)
	}
	if err := a.qp.PostSend([]verbs.SendWR{{WRID: 1, Opcode: verbs.WRSendWithImm, ImmData: 0x1234, SendFlags: verbs.SendSignaled,
		SGList: []verbs.SGE{a.mr.SGE(0, 3000)}}}); err != nil {
		t.Fatal(err)
	}
	wc := a.wait(1, 5*time.Second)
	if wc[0].Status != verbs.WCSuccess || wc[0].Opcode != verbs.WCSend || wc[0].WRID != 1 {
		t.Fatalf("send completion %+v", wc[0])
	}
	wc = b.wait(1, 5*time.Second)
	if wc[0].Status != verbs.WCSuccess || wc[0].Opcode != verbs.WCRecv || wc[0].ByteLen != 3000 || wc[0].ImmData != 0x1234 || wc[0].WCFlags&verbs.WCWithImm == 0 {
		t.Fatalf("recv completion %+v", wc[0])
	}
	if !bytes.Equal(b.buf[:3000], a.buf[:3000]) {
		t.Fatal("SEND data differs")
	}
	// RDMA WRITE 100 KiB into b at offset 8192.
	fill(a.buf[:100<<10], 2)
	if err := a.qp.PostSend([]verbs.SendWR{{WRID: 2, Opcode: verbs.WRRDMAWrite, SendFlags: verbs.SendSignaled,
		SGList: []verbs.SGE{a.mr.SGE(0, 100<<10)}, RemoteAddr: b.mr.Addr() + 8192, RKey: b.mr.RKey()}}); err != nil {
		t.Fatal(err)
	}
	if wc := a.wait(1, 5*time.Second); wc[0].Status != verbs.WCSuccess {
		t.Fatalf("write completion %+v", wc[0])
	}
	if !bytes.Equal(b.buf[8192:8192+100<<10], a.buf[:100<<10]) {
		t.Fatal("WRITE data differs")
	}
	// RDMA READ 70000 bytes from b.
	fill(b.buf[200000:270000], 3)
	if err := a.qp.PostSend([]verbs.SendWR{{WRID: 3, Opcode: verbs.WRRDMARead, SendFlags: verbs.SendSignaled,
		SGList: []verbs.SGE{a.mr.SGE(300000, 70000)}, RemoteAddr: b.mr.Addr() + 200000, RKey: b.mr.RKey()}}); err != nil {
		t.Fatal(err)
	}
	if wc := a.wait(1, 5*time.Second); wc[0].Status != verbs.WCSuccess || wc[0].Opcode != verbs.WCRDMARead {
		t.Fatalf("read completion %+v", wc[0])
	}
	if !bytes.Equal(a.buf[300000:370000], b.buf[200000:270000]) {
		t.Fatal("READ data differs")
	}
	// Atomics on b.buf[0:8].
	binary.NativeEndian.PutUint64(b.buf[0:], 100)
	if err := a.qp.PostSend([]verbs.SendWR{
		{WRID: 4, Opcode: verbs.WRAtomicFetchAndAdd, SendFlags: verbs.SendSignaled, SGList: []verbs.SGE{a.mr.SGE(0, 8)},
			RemoteAddr: b.mr.Addr(), RKey: b.mr.RKey(), CompareAdd: 5},
		{WRID: 5, Opcode: verbs.WRAtomicCmpAndSwp, SendFlags: verbs.SendSignaled, SGList: []verbs.SGE{a.mr.SGE(8, 8)},
			RemoteAddr: b.mr.Addr(), RKey: b.mr.RKey(), CompareAdd: 105, Swap: 7},
	}); err != nil {
		t.Fatal(err)
	}
	for _, w := range a.wait(2, 5*time.Second) {
		if w.Status != verbs.WCSuccess {
			t.Fatalf("atomic completion %+v", w)
		}
	}
	if got := binary.NativeEndian.Uint64(a.buf[0:]); got != 100 {
		t.Errorf("FETCH_ADD returned %d, want 100", got)
	}
	if got := binary.NativeEndian.Uint64(a.buf[8:]); got != 105 {
		t.Errorf("CMP_SWAP returned %d, want 105", got)
	}
	if got := binary.NativeEndian.Uint64(b.buf[0:]); got != 7 {
		t.Errorf("remote value %d, want 7", got)
	}
}
