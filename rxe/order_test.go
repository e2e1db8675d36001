package rxe

import (
	"net/netip"
	"sync/atomic"
	"testing"
	"time"

	"github.com/rdmago/rdmago/rxe/link"
	"github.com/rdmago/rdmago/rxe/wire"
	"github.com/rdmago/rdmago/verbs"
)

// TestAcknowledgementsDoNotOvertakeReadResponses posts a READ longer than
// the responder's burst followed by SENDs: on a clean network that must
// cost exactly one READ request. An ACK for a SEND that overtook the rest
// of the READ's response would make the requester ask again. (Whether an
// ACK can overtake depends on scheduling, so this guards the behaviour
// rather than forcing the race.)
func TestAcknowledgementsDoNotOvertakeReadResponses(t *testing.T) {
	var reads atomic.Int64
	f := link.Faults{Filter: func(p []byte, from, to netip.Addr) bool {
		var pkt wire.Packet
		if pkt.Decode(p) == nil && pkt.OpCode() == wire.RCReadRequest {
			reads.Add(1)
		}
		return true
	}}
	// A long retransmit timeout: a timer expiring on a loaded machine
	// would also ask again, which is not what this test is about.
	a, b, _ := memPair(t, 16, f, pairOpts{mtu: verbs.MTU1024, timeout: 18})
	for i := 0; i < 4; i++ {
		b.qp.PostRecv([]verbs.RecvWR{{WRID: uint64(i), SGList: []verbs.SGE{b.mr.SGE(0, 64)}}})
	}
	wrs := []verbs.SendWR{{WRID: 100, Opcode: verbs.WRRDMARead, SendFlags: verbs.SendSignaled,
		SGList: []verbs.SGE{a.mr.SGE(0, 300<<10)}, RemoteAddr: b.mr.Addr() + 4096, RKey: b.mr.RKey()}}
	for i := 0; i < 4; i++ {
		wrs = append(wrs, verbs.SendWR{WRID: uint64(i), Opcode: verbs.WRSend, SendFlags: verbs.SendSignaled, SGList: []verbs.SGE{a.mr.SGE(400<<10, 64)}})
	}
	if err := a.qp.PostSend(wrs); err != nil {
		t.Fatal(err)
	}
	for _, wc := range a.wait(5, 5*time.Second) {
		if wc.Status != verbs.WCSuccess {
			t.Fatalf("completion %+v", wc)
		}
	}
	if n := reads.Load(); n != 1 {
		t.Fatalf("%d READ requests on a clean network, want 1", n)
	}
}
