package wire_test

import (
	"fmt"
	"net/netip"

	"github.com/rdmago/rdmago/rxe/wire"
)

// Build an RDMA WRITE packet, seal it with its ICRC as a userspace sender
// on a UDP socket does, and parse it back as a receiver would.
func ExampleAppendPacket() {
	h := wire.Headers{
		BTH:  wire.BTHFields{OpCode: wire.RCWriteOnly, PKey: wire.DefaultPKey, DestQP: 0x11, AckReq: true, PSN: 0x71324c},
		RETH: wire.RETHFields{VA: 0x7f0000001000, RKey: 0x1234, DMALen: 5},
	}
	pkt, err := wire.AppendPacket(make([]byte, 0, 64), &h, []byte("hello"))
	if err != nil {
		panic(err)
	}
	// The ICRC covers the IP and UDP headers the kernel will write.
	ph := wire.PseudoHeader{
		Src: netip.MustParseAddr("10.77.0.1"), Dst: netip.MustParseAddr("10.77.0.11"),
		SrcPort: wire.UDPPort, DstPort: wire.UDPPort, IPv4Flags: wire.IPv4DontFragment,
	}
	ph.SetICRC(pkt)

	p, err := wire.Parse(pkt)
	if err != nil {
		panic(err)
	}
	fmt.Println(len(pkt), "bytes:", p.String())
	fmt.Printf("payload %q, icrc ok: %v\n", p.Payload, ph.CheckICRC(pkt))
	// Output:
	// 40 bytes: RC_RDMA_WRITE_ONLY qp=0x000011 psn=0x71324c ackreq va=0x7f0000001000 rkey=0x00001234 dmalen=5 len=5
	// payload "hello", icrc ok: true
}

// A receiver on a UDP socket cannot see the sender's IPv4 identification
// field, which the ICRC covers; CheckICRCAnyIPv4ID solves for it.
func ExamplePseudoHeader_CheckICRCAnyIPv4ID() {
	h := wire.Headers{BTH: wire.BTHFields{OpCode: wire.RCSendOnly, PKey: wire.DefaultPKey, DestQP: 0x11}}
	pkt, _ := wire.AppendPacket(nil, &h, []byte("ping"))
	sender := wire.PseudoHeader{
		Src: netip.MustParseAddr("10.77.0.12"), Dst: netip.MustParseAddr("10.77.0.11"),
		SrcPort: 0xc123, DstPort: wire.UDPPort, IPv4ID: 0x5a5a, IPv4Flags: wire.IPv4DontFragment,
	}
	sender.SetICRC(pkt)

	receiver := wire.PseudoHeader{Src: sender.Src, Dst: sender.Dst, SrcPort: sender.SrcPort, DstPort: wire.UDPPort}
	id, flags, ok := receiver.CheckICRCAnyIPv4ID(pkt)
	fmt.Printf("ok=%v id=%#x df=%v\n", ok, id, flags == wire.IPv4DontFragment)
	// Output: ok=true id=0x5a5a df=true
}
