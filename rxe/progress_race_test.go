package rxe

import (
	"net/netip"
	"testing"
	"time"

	"github.com/rdmago/rdmago/rxe/link"
	"github.com/rdmago/rdmago/rxe/wire"
	"github.com/rdmago/rdmago/verbs"
)

// The receive loop runs the QPs it delivers to on its own goroutine, so a
// QP must be whole when it enters the device's table: a packet for its
// number that arrives as it is being created (a peer still sending to the
// QP that had the number before, say) must find its timer made. Under the
// race detector, a timer made after the QP is published is a data race
// with the receive loop's step (nothing else is done between the two that
// would order them); without it, a nil pointer if the packet wins.
func TestAPacketForAQPBeingCreatedFindsItWhole(t *testing.T) {
	network := link.NewNetwork(41)
	devAddr := netip.MustParseAddr("10.41.0.1")
	ld, err := network.Attach(devAddr)
	if err != nil {
		t.Fatal(err)
	}
	lp, err := network.Attach(netip.MustParseAddr("10.41.0.2"))
	if err != nil {
		t.Fatal(err)
	}
	defer lp.Close()
	ctx := openDevice(t, Config{Name: "rxe_newqp", Links: []link.Link{ld}})
	pd, err := ctx.AllocPD()
	if err != nil {
		t.Fatal(err)
	}
	cq, err := ctx.CreateCQ(16, nil, 0)
	if err != nil {
		t.Fatal(err)
	}
	// The device's first QP gets the first number of its range.
	h := wire.Headers{BTH: wire.BTHFields{OpCode: wire.UDSendOnly, PKey: wire.DefaultPKey, DestQP: minQPN}, DETH: wire.DETHFields{QKey: 1, SrcQP: 7}}
	pkt, err := wire.AppendPacket(nil, &h, make([]byte, 8))
	if err != nil {
		t.Fatal(err)
	}
	stop, stopped := make(chan struct{}), make(chan struct{})
	go func() { // the peer, sending to the number all along
		defer close(stopped)
		for {
			select {
			case <-stop:
				return
			default:
			}
			lp.Send([]link.Packet{{Buf: append([]byte(nil), pkt...), Addr: devAddr}})
			time.Sleep(10 * time.Microsecond)
		}
	}()
	defer func() { close(stop); <-stopped }()
	qp, err := pd.CreateQP(&verbs.QPInitAttr{SendCQ: cq, RecvCQ: cq, QPType: verbs.QPTUD,
		Cap: verbs.QPCap{MaxSendWR: 1, MaxRecvWR: 1, MaxSendSGE: 1, MaxRecvSGE: 1}})
	if err != nil {
		t.Fatal(err)
	}
	if qp.Num() != minQPN {
		t.Fatalf("QP number %#x, want %#x", qp.Num(), minQPN)
	}
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(time.Millisecond) {
		if c, _ := qp.QueryCounters(); c[verbs.CounterRcvdPkts] > 0 {
			return // the receive loop ran the new QP
		}
		if time.Now().After(deadline) {
			t.Fatal("no packet reached the new QP in 10 s")
		}
	}
}
