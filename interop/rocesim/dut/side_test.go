package dut

import (
	"context"
	"encoding/binary"
	"net/netip"
	"strings"
	"testing"
	"time"

	"github.com/rdmago/rdmago/rxe"
	"github.com/rdmago/rdmago/rxe/link"
	"github.com/rdmago/rdmago/verbs"
)

// defaultConn is what roce-sim's manager sends when a case says nothing.
var defaultConn = ConnAttr{
	Access: 15, Port: 1, Timeout: 14, Retry: 3, RNRRetry: 3, MTU: 1024,
	MaxRdAtomic: 2, MaxDestRdAtomic: 2, MinRNRTimer: 0x12,
}

// end is one side of a test and what OpenDevice and CreateMR gave it.
type end struct {
	*Side
	open OpenResult
	mr   MRInfo
}

// pair opens two sides on software devices of an in-memory network, each
// with a 1 KiB region, and connects their QPs.
func pair(t *testing.T, seed uint64, pa, pb OpenParams) (a, b *end) {
	t.Helper()
	network := link.NewNetwork(seed)
	mk := func(addr string, p OpenParams) *end {
		l, err := network.Attach(netip.MustParseAddr(addr))
		if err != nil {
			t.Fatal(err)
		}
		d, err := rxe.NewDevice(rxe.Config{Name: "rxe_" + addr, Links: []link.Link{l}})
		if err != nil {
			t.Fatal(err)
		}
		e := &end{Side: &Side{Devices: func() ([]*verbs.Device, error) { return []*verbs.Device{d}, nil }, Logf: t.Logf}}
		t.Cleanup(func() {
			if err := e.Close(); err != nil {
				t.Errorf("Close: %v", err)
			}
		})
		if e.open, err = e.OpenDevice(p); err != nil {
			t.Fatal(err)
		}
		if e.mr, err = e.CreateMR(0, 15, 1024); err != nil {
			t.Fatal(err)
		}
		return e
	}
	a, b = mk("10.77.0.1", pa), mk("10.77.0.2", pb)
	for _, c := range []struct{ from, to *end }{{a, b}, {b, a}} {
		r := Remote{QPNum: c.to.open.QPNum, LID: c.to.open.LID, GID: c.to.open.GID}
		if err := c.from.ConnectQP("", 0, r, ConnAttr{}); err != nil {
			t.Fatal(err)
		}
	}
	return a, b
}

func params(conn ConnAttr) OpenParams { return OpenParams{Conn: conn, CQSize: 128, MaxCQE: 1} }

// op returns an operation of a on b's region.
func (a *end) op(code verbs.WROpcode, n uint32, b *end) Op {
	return Op{Opcode: code, MR: a.mr.ID, Addr: a.mr.Addr, Len: n, LKey: a.mr.LKey, RemoteAddr: b.mr.Addr, RKey: b.mr.RKey}
}

func (a *end) mustCheck(t *testing.T, off uint32, want []byte) {
	t.Helper()
	same, err := a.LocalCheckMem(a.mr.ID, []uint32{off}, [][]byte{want})
	if err != nil || !same {
		t.Fatalf("memory at %d: want %x (%v)", off, want, err)
	}
}

func u32(v uint32) *uint32 { return &v }

func TestOperationsMoveDataBetweenSides(t *testing.T) {
	ctx := context.Background()
	tests := []struct {
		name string
		run  func(t *testing.T, a, b *end)
	}{
		{"RDMA WRITE lands in the peer's region", func(t *testing.T, a, b *end) {
			a.LocalWrite(a.mr.ID, 0, []byte{0xff, 0xee})
			if err := a.RemoteOp(ctx, 0, a.op(verbs.WRRDMAWrite, 2, b)); err != nil {
				t.Fatal(err)
			}
			b.mustCheck(t, 0, []byte{0xff, 0xee})
		}},
		{"RDMA READ fetches the peer's region", func(t *testing.T, a, b *end) {
			b.LocalWrite(b.mr.ID, 0, []byte{0xab})
			if err := a.RemoteOp(ctx, 0, a.op(verbs.WRRDMARead, 1, b)); err != nil {
				t.Fatal(err)
			}
			a.mustCheck(t, 0, []byte{0xab})
		}},
		{"SEND fills the receive LocalRecv posted", func(t *testing.T, a, b *end) {
			if err := b.LocalRecv(0, b.mr.ID, b.mr.Addr+4, 16, b.mr.LKey, 0); err != nil {
				t.Fatal(err)
			}
			a.LocalWrite(a.mr.ID, 0, []byte{1, 2, 3})
			if err := a.RemoteOp(ctx, 0, a.op(verbs.WRSend, 3, b)); err != nil {
				t.Fatal(err)
			}
			same, err := b.PollComplete(ctx, 0, WCMatch{Len: u32(3), Opcode: u32(uint32(verbs.WCRecv)), Status: u32(0), SrcQP: u32(a.open.QPNum)})
			if err != nil || !same {
				t.Fatalf("receive completion does not match (%v)", err)
			}
			b.mustCheck(t, 4, []byte{1, 2, 3})
		}},
		{"WRITE with immediate carries roce-sim's immediate", func(t *testing.T, a, b *end) {
			if err := b.LocalRecv(0, b.mr.ID, b.mr.Addr, 0, b.mr.LKey, 0x34120000); err != nil {
				t.Fatal(err)
			}
			a.LocalWrite(a.mr.ID, 0, []byte{0x5a})
			o := a.op(verbs.WRRDMAWriteWithImm, 1, b)
			o.Imm = 0x34120000
			if err := a.RemoteOp(ctx, 0, o); err != nil {
				t.Fatal(err)
			}
			same, err := b.PollComplete(ctx, 0, WCMatch{Opcode: u32(uint32(verbs.WCRecvRDMAWithImm)), Imm: u32(0x34120000)})
			if err != nil || !same {
				t.Fatalf("receive completion does not match (%v)", err)
			}
			b.mustCheck(t, 0, []byte{0x5a})
			if f := b.Failures(); len(f) != 0 {
				t.Fatalf("failures: %q", f)
			}
		}},
		{"compare and swap swaps and returns the old value", func(t *testing.T, a, b *end) {
			var one [8]byte
			binary.NativeEndian.PutUint64(one[:], 1)
			b.LocalWrite(b.mr.ID, 0, one[:])
			o := a.op(verbs.WRAtomicCmpAndSwp, 0, b)
			o.Compare, o.Swap = 1, 2
			if err := a.RemoteOp(ctx, 0, o); err != nil {
				t.Fatal(err)
			}
			b.mustCheck(t, 0, []byte{2, 0, 0, 0})
			a.mustCheck(t, 0, []byte{1, 0, 0, 0})
		}},
	}
	for i, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			a, b := pair(t, uint64(i+1), params(defaultConn), params(defaultConn))
			tc.run(t, a, b)
			for _, e := range []*end{a, b} {
				if ok, err := e.CheckQPState(0, verbs.QPSRTS); err != nil || !ok {
					t.Fatalf("QP not in RTS after the operation (%v)", err)
				}
			}
		})
	}
}

func TestFailedOperationIsAnErrorUnlessAllowed(t *testing.T) {
	for _, allow := range []bool{false, true} {
		a, b := pair(t, 10, params(defaultConn), params(defaultConn))
		o := a.op(verbs.WRRDMARead, 1, b)
		o.RKey ^= 0x5a5a00
		o.AllowErr = allow
		err := a.RemoteOp(context.Background(), 0, o)
		switch {
		case allow && err != nil:
			t.Fatalf("allow_err: %v", err)
		case !allow && (err == nil || !strings.Contains(err.Error(), verbs.WCRemAccessErr.String())):
			t.Fatalf("bad rkey: error %v, want one naming %s", err, verbs.WCRemAccessErr)
		}
		if ok, err := a.CheckQPState(0, verbs.QPSErr); err != nil || !ok {
			t.Fatalf("requester not in ERR after the remote access error (%v)", err)
		}
	}
}

func TestReceiveWithWrongImmediateIsAFailure(t *testing.T) {
	a, b := pair(t, 11, params(defaultConn), params(defaultConn))
	if err := b.LocalRecv(0, b.mr.ID, b.mr.Addr, 0, b.mr.LKey, 0x11111111); err != nil {
		t.Fatal(err)
	}
	o := a.op(verbs.WRRDMAWriteWithImm, 1, b)
	o.Imm = 0x22222222
	if err := a.RemoteOp(context.Background(), 0, o); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(5 * time.Second)
	for len(b.Failures()) == 0 {
		if time.Now().After(deadline) {
			t.Fatal("the wrong immediate went unnoticed")
		}
		time.Sleep(5 * time.Millisecond)
	}
	if f := b.Failures()[0]; !strings.Contains(f, "0x22222222") || !strings.Contains(f, "0x11111111") {
		t.Fatalf("failure %q does not name both immediates", f)
	}
}

func TestPollCompleteReportsAMismatchOrNoCompletion(t *testing.T) {
	a, b := pair(t, 12, params(defaultConn), params(defaultConn))
	ctx := context.Background()
	if same, err := b.PollComplete(ctx, 0, WCMatch{}); err != nil || same {
		t.Fatalf("PollComplete on an empty CQ: same %v, err %v", same, err)
	}
	b.LocalRecv(0, b.mr.ID, b.mr.Addr, 8, b.mr.LKey, 0)
	if err := a.RemoteOp(ctx, 0, a.op(verbs.WRSend, 8, b)); err != nil {
		t.Fatal(err)
	}
	if same, err := b.PollComplete(ctx, 0, WCMatch{Opcode: u32(uint32(verbs.WCRDMARead))}); err != nil || same {
		t.Fatalf("PollComplete of a receive as a READ: same %v, err %v", same, err)
	}
}

func TestManualPollLeavesCompletionsInTheCQ(t *testing.T) {
	p := params(defaultConn)
	p.ManualPoll, p.CQSize = true, 4
	a, b := pair(t, 13, params(defaultConn), p)
	b.LocalRecv(0, b.mr.ID, b.mr.Addr, 8, b.mr.LKey, 0)
	if err := a.RemoteOp(context.Background(), 0, a.op(verbs.WRSend, 8, b)); err != nil {
		t.Fatal(err)
	}
	b.mu.Lock()
	c := b.cqs[0]
	b.mu.Unlock()
	time.Sleep(20 * time.Millisecond) // a background poller would take it by now
	if n := c.cq.Len(); n != 1 {
		t.Fatalf("manually polled CQ holds %d completions, want 1", n)
	}
	if same, err := b.PollComplete(context.Background(), 0, WCMatch{Len: u32(8)}); err != nil || !same {
		t.Fatalf("PollComplete: same %v, err %v", same, err)
	}
}

func TestBadRequestsAreErrors(t *testing.T) {
	a, b := pair(t, 14, params(defaultConn), params(defaultConn))
	ctx := context.Background()
	outside := a.op(verbs.WRRDMAWrite, 16, b)
	outside.Addr += 1020
	wrongKey := a.op(verbs.WRRDMAWrite, 1, b)
	wrongKey.LKey++
	tests := []struct {
		name string
		err  error
	}{
		{"region of 0 bytes", func() error { _, err := a.CreateMR(0, 15, 0); return err }()},
		{"region in a missing PD", func() error { _, err := a.CreateMR(7, 15, 64); return err }()},
		{"write from outside the region", a.RemoteOp(ctx, 0, outside)},
		{"write with another region's lkey", a.RemoteOp(ctx, 0, wrongKey)},
		{"operation on a missing QP", a.RemoteOp(ctx, 3, a.op(verbs.WRRDMAWrite, 1, b))},
		{"local write past the region", a.LocalWrite(a.mr.ID, 1020, make([]byte, 8))},
		{"receive past the region", a.LocalRecv(0, a.mr.ID, a.mr.Addr+1000, 64, a.mr.LKey, 0)},
		{"connect with a path MTU of 1000", a.ConnectQP("", 0, Remote{GID: b.open.GID}, ConnAttr{MTU: 1000})},
		{"a device that is not open", func() error { _, err := a.CreatePD("mlx5_9"); return err }()},
		{"a QP type other than RC or UC", func() error { _, _, err := a.CreateQP(0, verbs.QPTUD, 0); return err }()},
	}
	for _, tc := range tests {
		if tc.err == nil {
			t.Errorf("%s: no error", tc.name)
		}
	}
	// None of them broke the connection.
	if err := a.RemoteOp(ctx, 0, a.op(verbs.WRRDMAWrite, 1, b)); err != nil {
		t.Fatalf("write after the bad requests: %v", err)
	}
}

func TestCreatedQPConnectsWithItsOwnAttributes(t *testing.T) {
	a, b := pair(t, 15, params(defaultConn), params(defaultConn))
	ids := map[*end][2]uint32{}
	for _, e := range []*end{a, b} {
		cqID, err := e.CreateCQ("", 16)
		if err != nil {
			t.Fatal(err)
		}
		qpID, num, err := e.CreateQP(0, verbs.QPTRC, cqID)
		if err != nil {
			t.Fatal(err)
		}
		ids[e] = [2]uint32{qpID, num}
	}
	conn := defaultConn
	conn.MTU = 256
	for _, c := range []struct{ from, to *end }{{a, b}, {b, a}} {
		if err := c.from.ConnectQP("", ids[c.from][0], Remote{QPNum: ids[c.to][1], GID: c.to.open.GID}, conn); err != nil {
			t.Fatal(err)
		}
	}
	a.LocalWrite(a.mr.ID, 0, []byte{9, 9, 9})
	if err := a.RemoteOp(context.Background(), ids[a][0], a.op(verbs.WRRDMAWrite, 600, b)); err != nil {
		t.Fatal(err)
	}
	b.mustCheck(t, 0, []byte{9, 9, 9})
}

func TestCImmIsCsImmDataField(t *testing.T) {
	// C's imm_data holds the wire's bytes (00 00 12 34 for the value
	// 0x1234), which roce-sim passes as the integer the host reads there.
	if got, want := CImm(0x1234), binary.NativeEndian.Uint32([]byte{0, 0, 0x12, 0x34}); got != want {
		t.Fatalf("CImm(0x1234) = %#x, want %#x", got, want)
	}
	for _, v := range []uint32{0, 1, 0x1234, 0xdeadbeef} {
		if CImm(CImm(v)) != v {
			t.Errorf("CImm(CImm(%#x)) = %#x", v, CImm(CImm(v)))
		}
	}
}
