package rxe

import (
	"errors"
	"net/netip"
	"strings"
	"testing"

	"github.com/rdmago/rdmago/rxe/link"
	"github.com/rdmago/rdmago/verbs"
)

// The software device has no raw Ethernet QPs: IBV_QPT_RAW_PACKET, which
// the verbs layer passes to every provider (a NIC through rdmacore may
// have it), is refused by the device with EOPNOTSUPP, as Linux's rxe
// refuses it, and nothing is left made.
func TestRawPacketQPIsRefused(t *testing.T) {
	l, err := link.NewNetwork(90).Attach(netip.MustParseAddr("10.90.0.1"))
	if err != nil {
		t.Fatal(err)
	}
	ctx := openDevice(t, Config{Name: "raw_test", Links: []link.Link{l}})
	pd, err := ctx.AllocPD()
	if err != nil {
		t.Fatal(err)
	}
	cq, err := ctx.CreateCQ(16, nil, 0)
	if err != nil {
		t.Fatal(err)
	}
	_, err = pd.CreateQP(&verbs.QPInitAttr{SendCQ: cq, RecvCQ: cq, QPType: verbs.QPTRawPacket,
		Cap: verbs.QPCap{MaxSendWR: 4, MaxRecvWR: 4, MaxSendSGE: 1, MaxRecvSGE: 1}})
	if !errors.Is(err, verbs.ErrNotSupported) || !strings.Contains(err.Error(), "RAW_PACKET (rxe does") {
		t.Fatalf("creating a raw packet QP: %v, want the device's EOPNOTSUPP naming RAW_PACKET", err)
	}
	if err := cq.Destroy(); err != nil {
		t.Fatalf("the CQ is still held after the refusal: %v", err)
	}
	if err := pd.Dealloc(); err != nil {
		t.Fatalf("the PD is still held after the refusal: %v", err)
	}
}
