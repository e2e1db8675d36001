package rxe

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/rdmago/rdmago/rxe/link"
	"github.com/rdmago/rdmago/verbs"
)

// exFlags are the completion fields the tests' extended CQs ask for: all
// the device has.
const exFlags = verbs.WCStandardFlags | verbs.WCExWithCompletionTimestamp | verbs.WCExWithCompletionTimestampWallclock

// exOps are the RC operations the tests' QPs build with QPEx.
const exOps = verbs.QPExWithSend | verbs.QPExWithSendWithImm | verbs.QPExWithRDMAWrite | verbs.QPExWithRDMAWriteWithImm |
	verbs.QPExWithRDMARead | verbs.QPExWithAtomicFetchAndAdd | verbs.QPExWithAtomicCmpAndSwp

// stampedWC is a completion read through a CQEx.
type stampedWC struct {
	verbs.WC
	ts, wall uint64
}

// pollEx reads n completions from the end's CQEx.
func (e *end) pollEx(n int, d time.Duration) []stampedWC {
	e.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), d)
	defer cancel()
	var out []stampedWC
	for len(out) < n {
		err := e.cqx.StartPoll(nil)
		if errors.Is(err, verbs.ErrNoEntry) {
			if err := e.cq.Wait(ctx); err != nil {
				e.t.Fatalf("waiting for %d completions, got %d: %v", n, len(out), err)
			}
			continue
		}
		for err == nil {
			x := e.cqx
			out = append(out, stampedWC{WC: verbs.WC{WRID: x.WRID, Status: x.Status, Opcode: x.ReadOpcode(), ByteLen: x.ReadByteLen(),
				ImmData: x.ReadImmData(), QPNum: x.ReadQPNum(), WCFlags: x.ReadWCFlags()},
				ts: x.ReadCompletionTS(), wall: x.ReadCompletionWallclockNS()})
			if len(out) == n {
				break
			}
			err = x.NextPoll()
		}
		e.cqx.EndPoll()
		if err != nil && !errors.Is(err, verbs.ErrNoEntry) {
			e.t.Fatal(err)
		}
	}
	return out
}

// exRound posts one batch of every operation from a to b with a's QPEx,
// round's data in it, and checks data and completions.
func exRound(t *testing.T, a, b *end, round int) ([]stampedWC, []stampedWC) {
	t.Helper()
	const (
		recvAt  = 0       // b: three 4 KiB receive buffers
		writeAt = 1 << 16 // b: the WRITE's target
		immAt   = 2 << 16 // b: the WRITE_WITH_IMM's target
		readAt  = 3 << 16 // b: what the READ reads; a: where it lands
		atomAt  = 4 << 16 // b: the atomics' targets; a: their results
		srcAt   = 5 << 16 // a: what is sent
	)
	seed := byte(round)
	fill(a.buf[srcAt:srcAt+8192], seed)
	// Each round reads from a part of its own: a copy of an earlier
	// round's READ that the network duplicated and delayed may still be
	// answered, from memory this round must not be writing (20 rounds of
	// 3000 bytes fit in the 64 KiB).
	readFrom := readAt + round%20*3000
	fill(b.buf[readFrom:readFrom+3000], seed+1)
	binary.NativeEndian.PutUint64(b.buf[atomAt:], uint64(1000*round))
	binary.NativeEndian.PutUint64(b.buf[atomAt+8:], uint64(round))
	for i := range 3 {
		if err := b.qp.PostRecv([]verbs.RecvWR{{WRID: uint64(100 + i), SGList: []verbs.SGE{b.mr.SGE(recvAt+4096*i, 4096)}}}); err != nil {
			t.Fatal(err)
		}
	}
	inline := []byte(fmt.Sprintf("round %03d inline", round))
	qx := a.qp.QPEx()
	qx.WRStart()
	qx.WRID, qx.WRFlags = 1, verbs.SendSignaled
	qx.WRSend()
	qx.WRSetSGE(a.mr.LKey(), a.mr.Addr()+srcAt, 3000)
	qx.WRID = 2
	qx.WRSendImm(uint32(round))
	qx.WRSetInlineData(inline)
	qx.WRID = 3
	qx.WRRDMAWrite(b.mr.RKey(), b.mr.Addr()+writeAt)
	qx.WRSetSGEList([]verbs.SGE{a.mr.SGE(srcAt, 1500), a.mr.SGE(srcAt+4096, 2500)})
	qx.WRID = 4
	qx.WRRDMAWriteImm(b.mr.RKey(), b.mr.Addr()+immAt, 0x10000+uint32(round))
	qx.WRSetInlineDataList([][]byte{inline[:5], inline[5:]})
	qx.WRID = 5
	qx.WRRDMARead(b.mr.RKey(), b.mr.Addr()+uint64(readFrom))
	qx.WRSetSGE(a.mr.LKey(), a.mr.Addr()+readAt, 3000)
	qx.WRID = 6
	qx.WRAtomicFetchAdd(b.mr.RKey(), b.mr.Addr()+atomAt, 7)
	qx.WRSetSGE(a.mr.LKey(), a.mr.Addr()+atomAt, 8)
	qx.WRID = 7
	qx.WRAtomicCmpSwp(b.mr.RKey(), b.mr.Addr()+atomAt+8, uint64(round), uint64(round+1))
	qx.WRSetSGE(a.mr.LKey(), a.mr.Addr()+atomAt+8, 8)
	copy(inline, "overwritten after the call")
	if err := qx.WRComplete(); err != nil {
		t.Fatal(err)
	}
	const timeout = 30 * time.Second
	ra, rb := a.pollEx(7, timeout), b.pollEx(3, timeout)
	wantA := []verbs.WCOpcode{verbs.WCSend, verbs.WCSend, verbs.WCRDMAWrite, verbs.WCRDMAWrite, verbs.WCRDMARead, verbs.WCFetchAdd, verbs.WCCompSwap}
	for i, wc := range ra {
		if wc.Status != verbs.WCSuccess || wc.WRID != uint64(i+1) || wc.Opcode != wantA[i] || wc.QPNum != a.qp.Num() {
			t.Fatalf("round %d: requester completion %d: %+v, want wr_id %d %s", round, i, wc.WC, i+1, wantA[i])
		}
	}
	sent := fmt.Sprintf("round %03d inline", round)
	for i, c := range []struct {
		op   verbs.WCOpcode
		n    int
		imm  uint32
		data []byte
	}{
		{verbs.WCRecv, 3000, 0, a.buf[srcAt : srcAt+3000]},
		{verbs.WCRecv, len(sent), uint32(round), []byte(sent)},
		{verbs.WCRecvRDMAWithImm, len(sent), 0x10000 + uint32(round), nil},
	} {
		wc := rb[i]
		if wc.Status != verbs.WCSuccess || wc.WRID != uint64(100+i) || wc.Opcode != c.op || int(wc.ByteLen) != c.n ||
			(i > 0) != (wc.WCFlags&verbs.WCWithImm != 0) || i > 0 && wc.ImmData != c.imm {
			t.Fatalf("round %d: responder completion %d: %+v, want %s of %d bytes", round, i, wc.WC, c.op, c.n)
		}
		if got := b.buf[recvAt+4096*i : recvAt+4096*i+len(c.data)]; !bytes.Equal(got, c.data) {
			t.Fatalf("round %d: message %d differs", round, i)
		}
	}
	wrote := append(append([]byte(nil), a.buf[srcAt:srcAt+1500]...), a.buf[srcAt+4096:srcAt+4096+2500]...)
	switch {
	case !bytes.Equal(b.buf[writeAt:writeAt+4000], wrote):
		t.Fatalf("round %d: RDMA WRITE of an SGE list differs", round)
	case string(b.buf[immAt:immAt+len(sent)]) != sent:
		t.Fatalf("round %d: inline RDMA WRITE WITH IMMEDIATE wrote %q", round, b.buf[immAt:immAt+len(sent)])
	case !bytes.Equal(a.buf[readAt:readAt+3000], b.buf[readFrom:readFrom+3000]):
		t.Fatalf("round %d: RDMA READ differs", round)
	case binary.NativeEndian.Uint64(a.buf[atomAt:]) != uint64(1000*round) || binary.NativeEndian.Uint64(b.buf[atomAt:]) != uint64(1000*round+7):
		t.Fatalf("round %d: FETCH_AND_ADD returned %d, left %d", round, binary.NativeEndian.Uint64(a.buf[atomAt:]), binary.NativeEndian.Uint64(b.buf[atomAt:]))
	case binary.NativeEndian.Uint64(a.buf[atomAt+8:]) != uint64(round) || binary.NativeEndian.Uint64(b.buf[atomAt+8:]) != uint64(round+1):
		t.Fatalf("round %d: CMP_AND_SWP executed other than once", round)
	}
	return ra, rb
}

// checkStamps checks that a CQ's completions are stamped in order and
// within [from, to] by the wall clock.
func checkStamps(t *testing.T, who string, wcs []stampedWC, from, to time.Time) {
	t.Helper()
	for i, wc := range wcs {
		if i > 0 && wc.ts < wcs[i-1].ts {
			t.Errorf("%s completion %d stamped %d, before the one ahead of it (%d)", who, i, wc.ts, wcs[i-1].ts)
		}
		if w := time.Unix(0, int64(wc.wall)); w.Before(from) || w.After(to) {
			t.Errorf("%s completion %d: wall clock %s outside [%s, %s]", who, i, w, from, to)
		}
	}
}

// TestQPExBatchesOverLossyNetwork posts batches of every RC operation
// built with the ibv_wr_* calls over a network that loses, reorders and
// duplicates packets: each executes once, its data arrives whole, and the
// completions, read through CQEx, come in order with timestamps that
// never go backwards and lie within the test's wall-clock window.
func TestQPExBatchesOverLossyNetwork(t *testing.T) {
	for ci, c := range []struct {
		name   string
		faults link.Faults
	}{
		{"clean", link.Faults{}},
		{"loss 10%", link.Faults{Drop: 0.10}},
		{"reorder 10% duplicate 10%", link.Faults{Reorder: 0.10, Duplicate: 0.10}},
		{"loss 10% reorder 10% duplicate 10%", link.Faults{Drop: 0.10, Reorder: 0.10, Duplicate: 0.10}},
	} {
		t.Run(c.name, func(t *testing.T) {
			a, b, _ := memPair(t, uint64(500+ci), c.faults, pairOpts{timeout: 13, wcFlags: exFlags, sendOps: exOps})
			start := time.Now()
			var sa, sb []stampedWC
			rounds := 20
			if testing.Short() {
				rounds = 5
			}
			for r := range rounds {
				ra, rb := exRound(t, a, b, r)
				sa, sb = append(sa, ra...), append(sb, rb...)
			}
			end := time.Now()
			checkStamps(t, "requester", sa, start, end)
			checkStamps(t, "responder", sb, start, end)
			if n := a.cq.Len() + b.cq.Len(); n != 0 {
				t.Errorf("%d completions beyond those of the requests", n)
			}
		})
	}
}

// The device reports the clock it stamps completions with.
func TestQueryDeviceExReportsTheCompletionClock(t *testing.T) {
	a, _, _ := memPair(t, 600, link.Faults{}, pairOpts{})
	x, err := a.ctx.QueryDeviceEx(nil)
	if err != nil {
		t.Fatal(err)
	}
	o, _ := a.ctx.QueryDevice()
	if x.HCACoreClock != 1_000_000 || x.CompletionTimestampMask != ^uint64(0) || x.DeviceCapFlagsEx != uint64(o.DeviceCapFlags) ||
		x.OrigAttr != o || x.PhysPortCntEx != 1 || x.MaxDMSize != 0 || x.ODPCaps != (verbs.ODPCaps{}) {
		t.Errorf("ibv_query_device_ex: %+v", x)
	}
}

// BenchmarkQPExRDMAWrite posts batches of 16 64-byte RDMA WRITEs built
// with QPEx and reads their completions through CQEx, on the in-memory
// network. The allocations it reports are the device's own per work
// request; the verbs layer's builder and poller add none
// (TestQPExPostDoesNotAllocate, TestCQExPollDoesNotAllocate).
func BenchmarkQPExRDMAWrite(b *testing.B) {
	x, y, _ := memPair(b, 700, link.Faults{}, pairOpts{wcFlags: verbs.WCStandardFlags, sendOps: verbs.QPExWithRDMAWrite})
	qx := x.qp.QPEx()
	const batch = 16
	b.ReportAllocs()
	b.SetBytes(batch * 64)
	for b.Loop() {
		qx.WRStart()
		for i := range batch {
			qx.WRID, qx.WRFlags = uint64(i), verbs.SendSignaled
			qx.WRRDMAWrite(y.mr.RKey(), y.mr.Addr()+uint64(64*i))
			qx.WRSetSGE(x.mr.LKey(), x.mr.Addr()+uint64(64*i), 64)
		}
		if err := qx.WRComplete(); err != nil {
			b.Fatal(err)
		}
		for got := 0; got < batch; {
			err := x.cqx.StartPoll(nil)
			if errors.Is(err, verbs.ErrNoEntry) {
				x.cq.Wait(context.Background())
				continue
			}
			for ; err == nil; err = x.cqx.NextPoll() {
				if x.cqx.Status != verbs.WCSuccess {
					b.Fatal(x.cqx.Status)
				}
				got++
			}
			x.cqx.EndPoll()
		}
	}
}
