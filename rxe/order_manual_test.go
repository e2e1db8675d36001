package rxe

import (
	"testing"
	"time"

	"github.com/rdmago/rdmago/verbs"
)

// Two goroutines read a UDP link under manual progress, the receive loop
// and a polling program, and each delivers what it read to the QPs. The
// packets of one message must still reach its QP in the order they
// arrived: UC drops a message whose packets come out of order, so over a
// clean loopback link, one message at a time, not one may be lost.
func TestManualProgressLosesNoUCMessageOnACleanLink(t *testing.T) {
	const count, size = 300, 16 << 10 // 16 packets at path MTU 1024
	la, lb := udpLinks(t)
	a, b := newPair(t, la, lb, pairOpts{typ: verbs.QPTUC, bufSize: count * size, sendWR: count, recvWR: count})
	setManualProgress(t, b)
	for i := range count {
		if err := b.qp.PostRecv([]verbs.RecvWR{{WRID: uint64(i)}}); err != nil {
			t.Fatal(err)
		}
	}
	wc := make([]verbs.WC, 1)
	lost := 0
	for k := range count {
		if err := a.qp.PostSend([]verbs.SendWR{{WRID: uint64(k), Opcode: verbs.WRRDMAWriteWithImm, ImmData: uint32(k), SendFlags: verbs.SendSignaled,
			SGList: []verbs.SGE{a.mr.SGE(k*size, size)}, RemoteAddr: b.mr.Addr() + uint64(k*size), RKey: b.mr.RKey()}}); err != nil {
			t.Fatal(err)
		}
		a.wait(1, 5*time.Second)
		// Busy-poll the receiver, as a program under manual progress
		// does, until the message is in (or surely lost).
		for deadline := time.Now().Add(time.Second); ; {
			n, err := b.cq.Poll(wc)
			if err != nil {
				t.Fatal(err)
			}
			if n == 1 {
				if wc[0].Status != verbs.WCSuccess || wc[0].ImmData != uint32(k) {
					t.Fatalf("message %d: %+v", k, wc[0])
				}
				break
			}
			if time.Now().After(deadline) {
				lost++
				break
			}
		}
	}
	if s := lb.Stats(); lost > 0 {
		t.Fatalf("%d of %d UC messages lost on a clean link (receiver's link: %d packets received, %d socket overflows)", lost, count, s.Received, s.Overflow)
	}
}
