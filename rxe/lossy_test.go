package rxe

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"net/netip"
	"sort"
	"sync/atomic"
	"testing"
	"time"

	"github.com/rdmago/rdmago/rxe/link"
	"github.com/rdmago/rdmago/rxe/wire"
	"github.com/rdmago/rdmago/verbs"
)

// memPair connects two devices over an in-memory network with faults.
func memPair(t testing.TB, seed uint64, f link.Faults, o pairOpts) (*end, *end, *link.Network) {
	t.Helper()
	n, la, lb := memLinks(t, seed)
	n.SetFaults(f)
	a, b := newPair(t, la, lb, o)
	return a, b, n
}

// memLinks returns an in-memory network and two links on it, at 10.0.0.1
// and 10.0.0.2.
func memLinks(t testing.TB, seed uint64) (*link.Network, *link.Mem, *link.Mem) {
	t.Helper()
	n := link.NewNetwork(seed)
	la, err := n.Attach(netip.MustParseAddr("10.0.0.1"))
	if err != nil {
		t.Fatal(err)
	}
	lb, err := n.Attach(netip.MustParseAddr("10.0.0.2"))
	if err != nil {
		t.Fatal(err)
	}
	return n, la, lb
}

// lossyCase is one network condition of the reliability tests.
type lossyCase struct {
	name   string
	faults link.Faults
	big    bool // run the 8 MiB messages too
}

var lossyCases = []lossyCase{
	{"clean", link.Faults{}, true},
	{"loss 1%", link.Faults{Drop: 0.01}, true},
	{"loss 10%", link.Faults{Drop: 0.10}, true},
	{"reorder 5% duplicate 5%", link.Faults{Reorder: 0.05, Duplicate: 0.05}, false},
	{"loss 3% reorder 3% duplicate 3% corrupt 1%", link.Faults{Drop: 0.03, Reorder: 0.03, Duplicate: 0.03, Corrupt: 0.01}, false},
}

// TestRCDeliversEveryOperationExactlyOnce runs every RC operation at the
// sizes around the path MTU and up to 8 MiB, under loss, reordering,
// duplication and corruption: data must arrive byte for byte and each
// signaled request must complete exactly once.
func TestRCDeliversEveryOperationExactlyOnce(t *testing.T) {
	const mtu = 1024
	sizes := []int{0, 1, mtu - 1, mtu, mtu + 1, 1 << 20, 8 << 20}
	ops := []verbs.WROpcode{verbs.WRSend, verbs.WRSendWithImm, verbs.WRRDMAWrite, verbs.WRRDMAWriteWithImm, verbs.WRRDMARead}
	for ci, c := range lossyCases {
		t.Run(c.name, func(t *testing.T) {
			a, b, _ := memPair(t, uint64(100+ci), c.faults, pairOpts{bufSize: 3*region + 8192, mtu: verbs.MTU1024, timeout: 13, retry: 7})
			k := 0
			for _, op := range ops {
				for _, size := range sizes {
					if size == 8<<20 && (!c.big || testing.Short()) {
						continue
					}
					name := fmt.Sprintf("%s/%d", op, size)
					checkTransfer(t, name, a, b, op, size, k%2*2*region)
					k++
				}
			}
			checkAtomicsExactlyOnce(t, a, b, 200)
		})
	}
}

// region is the size of the buffer regions the transfers use.
const region = 8<<20 + 4096

// checkTransfer moves size bytes from a to b (or, for READ, b to a) and
// checks data and completions. Successive calls alternate the source
// region src: a responder may still be replaying a READ from its memory
// after the requester completed it (when a duplicate request reached it),
// as RDMA devices may, so the next transfer must not rewrite that memory.
func checkTransfer(t *testing.T, name string, a, b *end, op verbs.WROpcode, size, src int) {
	t.Helper()
	const dst = region // the destination region inside each end's buffer
	seed := byte(size*31 + int(op))
	from, to := a, b
	if op == verbs.WRRDMARead {
		from, to = b, a
	}
	fill(from.buf[src:src+size], seed)
	clear(to.buf[dst : dst+size+64])
	wantRecv := op == verbs.WRSend || op == verbs.WRSendWithImm || op == verbs.WRRDMAWriteWithImm
	if wantRecv {
		if err := b.qp.PostRecv([]verbs.RecvWR{{WRID: 77, SGList: []verbs.SGE{b.mr.SGE(dst, size+64)}}}); err != nil {
			t.Fatalf("%s: %v", name, err)
		}
	}
	wr := transferWR(op, a.mr, b.mr, size, src, dst)
	if err := a.qp.PostSend([]verbs.SendWR{wr}); err != nil {
		t.Fatalf("%s: %v", name, err)
	}
	timeout := 20 * time.Second
	wc := a.wait(1, timeout)[0]
	if wc.Status != verbs.WCSuccess || wc.WRID != 88 {
		t.Fatalf("%s: requester completion %+v", name, wc)
	}
	if wantRecv {
		rc := b.wait(1, timeout)[0]
		if rc.Status != verbs.WCSuccess || rc.WRID != 77 {
			t.Fatalf("%s: responder completion %+v", name, rc)
		}
		if op == verbs.WRSendWithImm || op == verbs.WRRDMAWriteWithImm {
			if rc.WCFlags&verbs.WCWithImm == 0 || rc.ImmData != wr.ImmData {
				t.Fatalf("%s: immediate %#x flags %#x", name, rc.ImmData, rc.WCFlags)
			}
		}
		if int(rc.ByteLen) != size {
			t.Fatalf("%s: byte_len %d", name, rc.ByteLen)
		}
	}
	if !bytes.Equal(to.buf[dst:dst+size], from.buf[src:src+size]) {
		t.Fatalf("%s: data differs", name)
	}
	for i, v := range to.buf[dst+size : dst+size+64] {
		if v != 0 {
			t.Fatalf("%s: byte %d past the end written", name, i)
		}
	}
	// Exactly one completion each: nothing else may be queued.
	time.Sleep(time.Millisecond)
	if n := a.cq.Len() + b.cq.Len(); n != 0 {
		t.Fatalf("%s: %d extra completions", name, n)
	}
}

// transferWR is the signaled work request (wr_id 88) of checkTransfer:
// size bytes between offset src of one side's region and dst of the
// other's, local the requester's region and remote the responder's.
func transferWR(op verbs.WROpcode, local, remote *verbs.MR, size, src, dst int) verbs.SendWR {
	wr := verbs.SendWR{WRID: 88, Opcode: op, SendFlags: verbs.SendSignaled, ImmData: 0xabcd0000 | uint32(size&0xffff),
		RKey: remote.RKey()}
	switch op {
	case verbs.WRRDMARead:
		wr.SGList = []verbs.SGE{local.SGE(dst, size)}
		wr.RemoteAddr = remote.Addr() + uint64(src)
	case verbs.WRRDMAWrite, verbs.WRRDMAWriteWithImm:
		wr.SGList = []verbs.SGE{local.SGE(src, size)}
		wr.RemoteAddr = remote.Addr() + uint64(dst)
	default:
		wr.SGList = []verbs.SGE{local.SGE(src, size)}
	}
	if size == 0 {
		wr.SGList = nil
	}
	return wr
}

// checkAtomicsExactlyOnce runs n FETCH_ADDs of 1 and checks that each was
// executed once: the results are 0..n-1 and the counter ends at n; then a
// COMPARE_SWAP chain of n steps. Each work request goes through adjust,
// if given, before it is posted.
func checkAtomicsExactlyOnce(t *testing.T, a, b *end, n int, adjust ...func(*verbs.SendWR)) {
	t.Helper()
	target := len(b.buf) - 4096 // outside the transfer regions
	binary.NativeEndian.PutUint64(b.buf[target:], 0)
	for i := 0; i < n; i++ {
		wr := verbs.SendWR{WRID: uint64(i), Opcode: verbs.WRAtomicFetchAndAdd, SendFlags: verbs.SendSignaled,
			SGList: []verbs.SGE{a.mr.SGE(8*i, 8)}, RemoteAddr: b.mr.Addr() + uint64(target), RKey: b.mr.RKey(), CompareAdd: 1}
		for _, f := range adjust {
			f(&wr)
		}
		if err := a.qp.PostSend([]verbs.SendWR{wr}); err != nil {
			t.Fatal(err)
		}
	}
	wcs := a.wait(n, 30*time.Second)
	for _, wc := range wcs {
		if wc.Status != verbs.WCSuccess {
			var bad []verbs.WC
			for _, w := range wcs {
				if w.Status != verbs.WCSuccess && w.Status != verbs.WCWRFlushErr {
					bad = append(bad, w)
				}
			}
			t.Fatalf("FETCH_ADD %d: %s; the failure: %s", wc.WRID, wc.Status, describe(bad))
		}
	}
	got := make([]int, n)
	for i := range got {
		got[i] = int(binary.NativeEndian.Uint64(a.buf[8*i:]))
	}
	sort.Ints(got)
	for i, v := range got {
		if v != i {
			t.Fatalf("FETCH_ADD results %v: some executed twice or not at all", got)
		}
	}
	if v := binary.NativeEndian.Uint64(b.buf[target:]); v != uint64(n) {
		t.Fatalf("counter %d after %d FETCH_ADDs", v, n)
	}
	// COMPARE_SWAP k -> k+1, in order: each succeeds only if all before did,
	// once.
	for i := 0; i < n; i++ {
		wr := verbs.SendWR{WRID: uint64(i), Opcode: verbs.WRAtomicCmpAndSwp, SendFlags: verbs.SendSignaled,
			SGList: []verbs.SGE{a.mr.SGE(8*i, 8)}, RemoteAddr: b.mr.Addr() + uint64(target), RKey: b.mr.RKey(),
			CompareAdd: uint64(n + i), Swap: uint64(n + i + 1)}
		for _, f := range adjust {
			f(&wr)
		}
		if err := a.qp.PostSend([]verbs.SendWR{wr}); err != nil {
			t.Fatal(err)
		}
	}
	a.wait(n, 30*time.Second)
	for i := 0; i < n; i++ {
		if v := binary.NativeEndian.Uint64(a.buf[8*i:]); v != uint64(n+i) {
			t.Fatalf("COMPARE_SWAP %d returned %d, want %d", i, v, n+i)
		}
	}
	if v := binary.NativeEndian.Uint64(b.buf[target:]); v != uint64(2*n) {
		t.Fatalf("counter %d after the swaps, want %d", v, 2*n)
	}
}

// TestManyLongReadsUnderLossComplete keeps sixteen 512 KiB READs in flight
// at once through a lossy network. A lost response packet makes the
// requester ask for the rest of that READ again while the responder still
// has the later READs' responses queued; the repeated request must be
// answered before them (the requester asks for those again too), or the
// requester, seeing only later packets, asks again and again and no READ
// after the first ever completes.
func TestManyLongReadsUnderLossComplete(t *testing.T) {
	const n, size = 16, 512 << 10
	for ci, drop := range []float64{0.002, 0.01} {
		t.Run(fmt.Sprintf("loss %.1f%%", drop*100), func(t *testing.T) {
			a, b, _ := memPair(t, uint64(300+ci), link.Faults{Drop: drop}, pairOpts{bufSize: n * size, mtu: verbs.MTU1024, timeout: 13})
			fill(b.buf, 9)
			wrs := make([]verbs.SendWR, n)
			for i := range wrs {
				wrs[i] = transferWR(verbs.WRRDMARead, a.mr, b.mr, size, i*size, i*size)
				wrs[i].WRID = uint64(i)
			}
			if err := a.qp.PostSend(wrs); err != nil {
				t.Fatal(err)
			}
			for i, wc := range a.wait(n, 30*time.Second) {
				if wc.Status != verbs.WCSuccess || wc.WRID != uint64(i) {
					t.Fatalf("completion %d: %+v", i, wc)
				}
			}
			if !bytes.Equal(a.buf, b.buf) {
				t.Fatal("data differs")
			}
		})
	}
}

// Under manual progress the goroutines that post and poll drive the
// device: a ping-pong over UDP whose two sides only ever busy-poll
// delivers every message, and so does one where a side waits instead of
// polling (the device's goroutines then do its work).
func TestManualProgressPingPong(t *testing.T) {
	for _, tc := range []struct {
		name    string
		waitOne bool // one side waits in CQ.Wait
	}{{"both poll", false}, {"one side waits", true}} {
		t.Run(tc.name, func(t *testing.T) {
			la, lb := udpLinks(t)
			a, b := newPair(t, la, lb, pairOpts{})
			setManualProgress(t, a, b)
			spin := func(e *end) verbs.WC {
				wcs := make([]verbs.WC, 1)
				deadline := time.Now().Add(10 * time.Second)
				for time.Now().Before(deadline) {
					n, err := e.cq.Poll(wcs)
					if err != nil {
						t.Fatal(err)
					}
					if n == 1 {
						return wcs[0]
					}
				}
				t.Fatal("no completion in 10 s of polling")
				return verbs.WC{}
			}
			const rounds = 500
			errc := make(chan error, 1)
			go func() {
				for i := range rounds {
					var wc verbs.WC
					if tc.waitOne {
						wc = b.wait(1, 10*time.Second)[0]
					} else {
						wc = spin(b)
					}
					if wc.Status != verbs.WCSuccess || wc.ByteLen != 8 || binary.NativeEndian.Uint64(b.buf) != uint64(i) {
						errc <- fmt.Errorf("round %d: echo side got %+v, %d", i, wc, binary.NativeEndian.Uint64(b.buf))
						return
					}
					if err := b.qp.PostRecv([]verbs.RecvWR{{SGList: []verbs.SGE{b.mr.SGE(0, 8)}}}); err != nil {
						errc <- err
						return
					}
					copy(b.buf[64:72], b.buf[:8])
					if err := b.qp.PostSend([]verbs.SendWR{{Opcode: verbs.WRSend, SGList: []verbs.SGE{b.mr.SGE(64, 8)}}}); err != nil {
						errc <- err
						return
					}
				}
				errc <- nil
			}()
			for _, e := range []*end{a, b} {
				if err := e.qp.PostRecv([]verbs.RecvWR{{SGList: []verbs.SGE{e.mr.SGE(0, 8)}}}); err != nil {
					t.Fatal(err)
				}
			}
			for i := range rounds {
				binary.NativeEndian.PutUint64(a.buf[64:], uint64(i))
				if err := a.qp.PostSend([]verbs.SendWR{{Opcode: verbs.WRSend, SGList: []verbs.SGE{a.mr.SGE(64, 8)}}}); err != nil {
					t.Fatal(err)
				}
				if wc := spin(a); wc.Status != verbs.WCSuccess || binary.NativeEndian.Uint64(a.buf) != uint64(i) {
					t.Fatalf("round %d: got %+v, %d", i, wc, binary.NativeEndian.Uint64(a.buf))
				}
				if err := a.qp.PostRecv([]verbs.RecvWR{{SGList: []verbs.SGE{a.mr.SGE(0, 8)}}}); err != nil {
					t.Fatal(err)
				}
			}
			if err := <-errc; err != nil {
				t.Fatal(err)
			}
		})
	}
}

func TestSetProgressRefusesUnknownModes(t *testing.T) {
	la, lb := udpLinks(t)
	a, _ := newPair(t, la, lb, pairOpts{})
	if err := a.ctx.SetProgress(verbs.Progress(9)); !errors.Is(err, verbs.ErrInvalidArgument) {
		t.Fatalf("SetProgress(9) = %v, want EINVAL", err)
	}
	for _, p := range []verbs.Progress{verbs.ProgressManual, verbs.ProgressAuto} {
		if err := a.ctx.SetProgress(p); err != nil {
			t.Fatalf("SetProgress(%s) = %v", p, err)
		}
	}
}

// One request lost in a long WRITE: the responder NAKs the gap once, then
// again after every renakAfter requests out of sequence, while the rest of
// the window arrives and is held. The requester goes back once, for the
// first NAK: the later NAKs answer the window it had already sent. A
// one-way delay makes sure the whole window goes before the first NAK is
// back, and that the requester sends all of it again before the ACK of
// the held requests is back: those resends are the only duplicates.
func TestOneLossCostsOneGoBack(t *testing.T) {
	const lose = 10 // which packet of the WRITE is lost
	ca, cb := writeLosing(t, lose)
	// The whole window went: maxUnackedPSN-lose-1 requests out of sequence.
	want := 1 + (maxUnackedPSN-lose-2)/renakAfter
	if got := ca[verbs.CounterRcvdSeqErr]; got != uint64(want) {
		t.Errorf("rcvd_seq_err %d, want %d", got, want)
	}
	if got := ca[verbs.CounterCompleterRetryErr]; got != 1 {
		t.Errorf("completer_retry_err %d, want 1", got)
	}
	if got, held := cb[verbs.CounterDuplicateRequest], uint64(maxUnackedPSN-lose-1); got > held {
		t.Errorf("duplicate_request %d, want at most the %d requests held", got, held)
	}
}

// Two requests lost in the first window of a long WRITE. The requester
// goes back once, for the first NAK, and its pass sends the second lost
// one again too. The responder, once the first gap fills, acknowledges
// what it holds up to the second, rather than NAK the second while its
// resend is on the way, which would make the requester go back again.
func TestTwoLossesInAWindowCostOneGoBack(t *testing.T) {
	ca, cb := writeLosing(t, 10, 50)
	t.Logf("requester: completer_retry_err %d rcvd_seq_err %d; responder: duplicate_request %d out_of_seq %d",
		ca[verbs.CounterCompleterRetryErr], ca[verbs.CounterRcvdSeqErr], cb[verbs.CounterDuplicateRequest], cb[verbs.CounterOutOfSeqRequest])
	if got := ca[verbs.CounterCompleterRetryErr]; got != 1 {
		t.Errorf("completer_retry_err %d, want 1", got)
	}
}

// writeLosing sends a 1 MiB RDMA WRITE (4 KiB MTU) over an in-memory
// network with a one-way delay of 2 ms, losing the first copy of each of
// its packets numbered in lose (from 0), and checks that it completes
// with the data. It returns the requester's and the responder's QP
// counters. The delay makes the whole window go before the first NAK is
// back; a long retransmit timeout keeps the timer out of it, even on a
// loaded machine.
func writeLosing(t *testing.T, lose ...uint32) (ca, cb verbs.Counters) {
	t.Helper()
	var first atomic.Int64 // PSN of the WRITE's first packet, plus 1
	dropped := make([]atomic.Bool, len(lose))
	f := link.Faults{Delay: 2 * time.Millisecond, Filter: func(p []byte, from, to netip.Addr) bool {
		var pkt wire.Packet
		if pkt.Decode(p) != nil {
			return true
		}
		psn := pkt.BTH.PSN()
		if pkt.OpCode() == wire.RCWriteFirst {
			first.CompareAndSwap(0, int64(psn)+1)
		}
		at := first.Load()
		for i, l := range lose {
			if at != 0 && psn == wire.PSN(at-1).Add(l) && dropped[i].CompareAndSwap(false, true) {
				return false
			}
		}
		return true
	}}
	const size = 1 << 20
	a, b, _ := memPair(t, 17, f, pairOpts{mtu: verbs.MTU4096, timeout: 18, bufSize: size})
	fill(a.buf, 3)
	err := a.qp.PostSend([]verbs.SendWR{{Opcode: verbs.WRRDMAWrite, SendFlags: verbs.SendSignaled,
		SGList: []verbs.SGE{a.mr.SGE(0, size)}, RemoteAddr: b.mr.Addr(), RKey: b.mr.RKey()}})
	if err != nil {
		t.Fatal(err)
	}
	if wc := a.wait(1, 5*time.Second); wc[0].Status != verbs.WCSuccess {
		t.Fatalf("completion %+v", wc[0])
	}
	for i := range dropped {
		if !dropped[i].Load() {
			t.Fatalf("packet %d was never lost", lose[i])
		}
	}
	if !bytes.Equal(a.buf, b.buf) {
		t.Fatal("the data differ")
	}
	ca, _ = a.qp.QueryCounters()
	cb, _ = b.qp.QueryCounters()
	return ca, cb
}
