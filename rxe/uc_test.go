package rxe

import (
	"bytes"
	"fmt"
	"testing"
	"time"

	"github.com/rdmago/rdmago/rxe/link"
	"github.com/rdmago/rdmago/verbs"
)

// TestUCLostPacketDropsOnlyItsMessage sends numbered multi-packet SENDs
// and WRITE_WITH_IMMs over UC through a lossy, reordering network. A
// message that lost a packet is dropped whole (its receive WQE serves the
// next message); every completion that does come holds one message, byte
// for byte, never pieces of two, and messages complete in order.
func TestUCLostPacketDropsOnlyItsMessage(t *testing.T) {
	const (
		mtu   = 1024
		size  = 3*mtu + 17 // four packets
		count = 200
		slot  = 4096
	)
	for _, op := range []verbs.WROpcode{verbs.WRSend, verbs.WRRDMAWriteWithImm} {
		for _, c := range []struct {
			name   string
			faults link.Faults
		}{
			{"clean", link.Faults{}},
			{"loss 5%", link.Faults{Drop: 0.05}},
			{"loss 5% reorder 5% duplicate 2%", link.Faults{Drop: 0.05, Reorder: 0.05, Duplicate: 0.02}},
		} {
			t.Run(fmt.Sprintf("%s/%s", op, c.name), func(t *testing.T) {
				a, b, _ := memPair(t, 11, c.faults, pairOpts{typ: verbs.QPTUC, bufSize: 2 * count * slot, mtu: verbs.MTU1024, sendWR: count, recvWR: count})
				for i := 0; i < count; i++ {
					if err := b.qp.PostRecv([]verbs.RecvWR{{WRID: uint64(i), SGList: []verbs.SGE{b.mr.SGE(i*slot, slot)}}}); err != nil {
						t.Fatal(err)
					}
				}
				const dstBase = count * slot // WRITE targets, one slot per message
				for k := 0; k < count; k++ {
					msg := a.buf[k*slot : k*slot+size]
					stamp(msg, k)
					wr := verbs.SendWR{WRID: uint64(k), Opcode: op, SendFlags: verbs.SendSignaled, ImmData: uint32(k),
						SGList: []verbs.SGE{a.mr.SGE(k*slot, size)}, RemoteAddr: b.mr.Addr() + dstBase + uint64(k*slot), RKey: b.mr.RKey()}
					if err := a.qp.PostSend([]verbs.SendWR{wr}); err != nil {
						t.Fatal(err)
					}
				}
				for _, wc := range a.wait(count, 10*time.Second) {
					if wc.Status != verbs.WCSuccess {
						t.Fatalf("UC send completion %+v", wc)
					}
				}
				time.Sleep(100 * time.Millisecond) // reordered packets drain
				var got []verbs.WC
				buf := make([]verbs.WC, 64)
				for {
					k, _ := b.cq.Poll(buf)
					if k == 0 {
						break
					}
					got = append(got, buf[:k]...)
				}
				if c.faults.Drop == 0 && c.faults.Reorder == 0 && len(got) != count {
					t.Fatalf("clean network: %d of %d messages", len(got), count)
				}
				if len(got) == 0 {
					t.Fatal("nothing arrived")
				}
				want := make([]byte, size)
				last := -1
				for i, wc := range got {
					if wc.Status != verbs.WCSuccess || wc.ByteLen != size && op == verbs.WRSend {
						t.Fatalf("completion %d: %+v", i, wc)
					}
					if int(wc.WRID) != i {
						t.Fatalf("completion %d used receive WQE %d: WQEs must be consumed in order", i, wc.WRID)
					}
					var k int
					var data []byte
					if op == verbs.WRSend {
						data = b.buf[i*slot : i*slot+size]
						k = -1
						for j := last + 1; j < count; j++ {
							stamp(want, j)
							if bytes.Equal(data, want) {
								k = j
								break
							}
						}
						if k < 0 {
							t.Fatalf("receive %d holds no message sent after %d (pieces of several?)", i, last)
						}
					} else {
						if wc.WCFlags&verbs.WCWithImm == 0 || wc.Opcode != verbs.WCRecvRDMAWithImm {
							t.Fatalf("completion %d: %+v", i, wc)
						}
						k = int(wc.ImmData)
						if k <= last {
							t.Fatalf("message %d completed after %d", k, last)
						}
						stamp(want, k)
						data = b.buf[dstBase+k*slot : dstBase+k*slot+size]
						if !bytes.Equal(data, want) {
							t.Fatalf("WRITE %d completed but its memory differs", k)
						}
					}
					last = k
				}
				t.Logf("%d of %d messages arrived", len(got), count)
			})
		}
	}
}
