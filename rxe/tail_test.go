package rxe

import (
	"bytes"
	"net/netip"
	"sync/atomic"
	"testing"
	"time"

	"github.com/rdmago/rdmago/rxe/link"
	"github.com/rdmago/rdmago/rxe/wire"
	"github.com/rdmago/rdmago/verbs"
)

// dropOnce is a link.Faults filter that, while armed, loses the first
// packet with opcode op and disarms.
type dropOnce struct {
	op    wire.OpCode
	armed atomic.Bool
}

func (d *dropOnce) filter(p []byte, from, to netip.Addr) bool {
	var pkt wire.Packet
	if pkt.Decode(p) != nil || pkt.OpCode() != d.op {
		return true
	}
	return !d.armed.CompareAndSwap(true, false)
}

// A WRITE whose last packet is lost, with nothing after it: no NAK
// comes, and the retransmit timer is 2.1 s (code 19, rdma_cm's for
// RoCE). The tail probe sends the last packet again well before: the
// WRITE completes with its data, and the timer never fired (it would have
// spent a retry).
func TestALostLastPacketGoesAgainBeforeTheTimer(t *testing.T) {
	const size = 4 * 1024
	drop := &dropOnce{op: wire.RCWriteLast}
	a, b, _ := memPair(t, 21, link.Faults{Filter: drop.filter}, pairOpts{mtu: verbs.MTU1024, timeout: 19, retry: 3, bufSize: size})
	write := func(fillWith byte) {
		fill(a.buf, fillWith)
		err := a.qp.PostSend([]verbs.SendWR{{Opcode: verbs.WRRDMAWrite, SendFlags: verbs.SendSignaled,
			SGList: []verbs.SGE{a.mr.SGE(0, size)}, RemoteAddr: b.mr.Addr(), RKey: b.mr.RKey()}})
		if err != nil {
			t.Fatal(err)
		}
		if wc := a.wait(1, 10*time.Second); wc[0].Status != verbs.WCSuccess {
			t.Fatalf("completion %+v", wc[0])
		}
		if !bytes.Equal(a.buf, b.buf) {
			t.Fatal("the data differ")
		}
	}
	// The first WRITE measures the round trip the probe waits by (with
	// none measured, only the timer goes back); the second loses its
	// last packet.
	write(1)
	drop.armed.Store(true)
	write(2)
	if drop.armed.Load() {
		t.Fatal("no packet was lost")
	}
	q := verbs.QPDriverOf(a.qp).(*qp)
	var retries int
	onOwner(q, func() { retries = q.comp.retries })
	c, _ := a.qp.QueryCounters()
	if retries != 3 || c[verbs.CounterCompleterRetryErr] == 0 {
		t.Fatalf("retries left %d, completer_retry_err %d; want 3 (no timeout) and the probes", retries, c[verbs.CounterCompleterRetryErr])
	}
}

// BenchmarkLostLastPacket is the time an 8-byte WRITE takes whose only
// packet is lost once, the QP's timeout code 14 (67 ms, the timer Linux
// rxe would wait): the tail probe's wait and a round trip. Lossless
// WRITEs, not timed, first measure the round trip the probe waits by: a
// lost packet brings no sample (Karn's rule), so the first WRITE alone,
// slow with the goroutines starting, set the wait for the whole run, and
// runs differed threefold and more.
func BenchmarkLostLastPacket(b *testing.B) {
	drop := &dropOnce{op: wire.RCWriteOnly}
	a, peer, _ := memPair(b, 22, link.Faults{Filter: drop.filter}, pairOpts{mtu: verbs.MTU1024, timeout: 14, bufSize: 64})
	wr := verbs.SendWR{Opcode: verbs.WRRDMAWrite, SendFlags: verbs.SendSignaled, SGList: []verbs.SGE{a.mr.SGE(0, 8)},
		RemoteAddr: peer.mr.Addr(), RKey: peer.mr.RKey()}
	op := func() {
		if err := a.qp.PostSend([]verbs.SendWR{wr}); err != nil {
			b.Fatal(err)
		}
		if wc := a.wait(1, 10*time.Second); wc[0].Status != verbs.WCSuccess {
			b.Fatalf("completion %+v", wc[0])
		}
	}
	for range 64 {
		op()
	}
	b.ResetTimer()
	for range b.N {
		drop.armed.Store(true)
		op()
	}
}
