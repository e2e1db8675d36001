package rxe

import (
	"bytes"
	"syscall"
	"testing"
	"time"

	"github.com/rdmago/rdmago/internal/linktest"
	"github.com/rdmago/rdmago/rxe/link"
	"github.com/rdmago/rdmago/rxe/wire"
	"github.com/rdmago/rdmago/verbs"
)

// cpuTime returns the CPU time the process has used.
func cpuTime(t *testing.T) time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		t.Fatal(err)
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// TestQPsWaitForRoomOnTheLink posts 64 RDMA WRITEs of 64 KiB while the
// link has no room (its send queue holds packets) and checks what the
// requester queues meanwhile:
//   - "new requests": the queue held a packet before the posts, and the
//     requester builds nothing until the link says the queue emptied;
//     then everything completes at once (no timer is running to wake
//     it: nothing was sent).
//   - "retransmissions": the requester sent one out batch before it saw
//     the link fill; the retransmit timer (67 ms) falls due three times
//     while the link stays full, resends nothing into the queue and
//     spends none of its 3 retries: a request that could not go was not
//     lost.
//   - "READ responses": the peer READs the memory instead, and the
//     responder sends no response until the queue empties.
//
// Nothing spins meanwhile, and the data lands byte exact.
func TestQPsWaitForRoomOnTheLink(t *testing.T) {
	const size, count = 64 << 10, 64
	for _, tc := range []struct {
		name      string
		read      bool // b READs a's memory; otherwise a WRITEs it to b
		queued    bool // a packet waits in the queue before the posts
		timeout   uint8
		retry     uint8
		wantFirst int // requests or responses queued while the link is full, at most
	}{
		{"new requests", false, true, 20, 7, 0},
		{"retransmissions", false, false, 14, 3, sendBatch},
		{"READ responses", true, true, 20, 7, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, la, lb := memLinks(t, 7)
			ql := linktest.NewShut(la)
			a, b := newPair(t, ql, lb, pairOpts{bufSize: 2 * size * count, mtu: verbs.MTU4096, sendWR: count, recvWR: count, timeout: tc.timeout, retry: tc.retry, rdAtomic: 16})
			for i := range a.buf {
				a.buf[i] = byte(i * 7)
			}
			ql.Shut()
			if tc.queued {
				dummy := make([]byte, link.MinPacket)
				ql.Send([]link.Packet{{Buf: dummy, Addr: lb.LocalAddr()}})
			}
			poster := a // the data goes from a's first half to b's second
			for i := range count {
				wr := verbs.SendWR{WRID: uint64(i), Opcode: verbs.WRRDMAWrite, SendFlags: verbs.SendSignaled,
					SGList: []verbs.SGE{a.mr.SGE(i*size, size)}, RemoteAddr: b.mr.Addr() + uint64(count*size+i*size), RKey: b.mr.RKey()}
				if tc.read {
					poster = b
					wr.Opcode = verbs.WRRDMARead
					wr.SGList = []verbs.SGE{b.mr.SGE(count*size+i*size, size)}
					wr.RemoteAddr, wr.RKey = a.mr.Addr()+uint64(i*size), a.mr.RKey()
				}
				if err := poster.qp.PostSend([]verbs.SendWR{wr}); err != nil {
					t.Fatal(err)
				}
			}
			time.Sleep(20 * time.Millisecond)
			cpu0 := cpuTime(t)
			time.Sleep(200 * time.Millisecond)
			if used := cpuTime(t) - cpu0; used > 100*time.Millisecond {
				t.Errorf("the process used %v of CPU in 200 ms while the link had no room: something spins", used)
			}
			requests := 0
			for _, p := range ql.Queue() {
				if pk, err := wire.Parse(p.Buf); err == nil && pk.BTH.DestQP() == b.qp.Num() && pk.OpCode() != wire.RCAcknowledge {
					requests++
				}
			}
			if requests > tc.wantFirst {
				t.Fatalf("%d requests queued while the link had no room; want at most %d", requests, tc.wantFirst)
			}
			ql.Open()
			for _, wc := range poster.wait(count, 2*time.Second) {
				if wc.Status != verbs.WCSuccess {
					t.Fatalf("completion %d: %s", wc.WRID, wc.Status)
				}
			}
			if !bytes.Equal(b.buf[count*size:], a.buf[:count*size]) {
				t.Fatal("the written memory differs from the source")
			}
		})
	}
}
