package mad_test

import (
	"fmt"
	"net/netip"

	"github.com/rdmago/rdmago/rdmacm/mad"
)

// Build the REQ an rdma_cm client sends to connect to 10.77.0.11 port
// 7174 (rping's default), then decode it as the server would.
func ExampleMarshal() {
	client := netip.MustParseAddr("10.77.0.12")
	server := netip.MustParseAddr("10.77.0.11")
	req := mad.REQ{
		LocalCommID:             0xf437abc0,
		ServiceID:               mad.MakeServiceID(mad.PortSpaceTCP, 7174),
		LocalCAGUID:             0x505400fffe77000c,
		LocalQPN:                0x19,
		ResponderResources:      1,
		InitiatorDepth:          1,
		RemoteCMResponseTimeout: 20,
		TransportServiceType:    mad.TransportRC,
		StartingPSN:             0x2084e5,
		LocalCMResponseTimeout:  20,
		RetryCount:              7,
		PKey:                    0xffff,
		PathMTU:                 mad.MTU1024,
		RNRRetryCount:           7,
		MaxCMRetries:            15,
		Primary: mad.Path{
			LocalLID: 0xffff, RemoteLID: 0xffff,
			LocalGID: mad.GIDFromAddr(client), RemoteGID: mad.GIDFromAddr(server),
			FlowLabel: 0x86df0, HopLimit: 64, LocalACKTimeout: 19,
		},
	}
	cma := mad.CMAHeader{Port: 51414, Src: client, Dst: server}
	if err := req.SetCMAPrivateData(&cma, []byte("hello")); err != nil {
		panic(err)
	}
	b, err := mad.Marshal(mad.Header{TransactionID: 0x2c0ab37f4}, &req)
	if err != nil {
		panic(err)
	}

	h, m, err := mad.Decode(b)
	if err != nil {
		panic(err)
	}
	got := m.(*mad.REQ)
	hdr, user, _ := got.CMAHeader()
	fmt.Printf("%d-byte %v, method %v, TID %#x\n", len(b), h.AttrID, h.Method, h.TransactionID)
	fmt.Printf("service %v, QPN %#x, PSN %#x, MTU %v\n", got.ServiceID, got.LocalQPN, got.StartingPSN, got.PathMTU)
	fmt.Printf("path %v -> %v, flow label %#x\n", got.Primary.LocalGID, got.Primary.RemoteGID, got.Primary.FlowLabel)
	fmt.Printf("rdma_cm: %v:%d -> %v, user data %q\n", hdr.Src, hdr.Port, hdr.Dst, user[:5])
	// Output:
	// 256-byte REQ (0x0010), method Send, TID 0x2c0ab37f4
	// service TCP:7174, QPN 0x19, PSN 0x2084e5, MTU 1024
	// path 10.77.0.12 -> 10.77.0.11, flow label 0x86df0
	// rdma_cm: 10.77.0.12:51414 -> 10.77.0.11, user data "hello"
}

// Answer a connection request with a REJ, as a server does when nothing
// listens on the service ID.
func ExampleREJ() {
	rej := mad.REJ{
		RemoteCommID:    0xf437abc0, // the REQ's LocalCommID
		MessageRejected: mad.MsgCodeREQ,
		Reason:          mad.RejectInvalidServiceID,
	}
	b, err := mad.Marshal(mad.Header{TransactionID: 0x2c0ab37f4}, &rej)
	if err != nil {
		panic(err)
	}
	_, m, err := mad.Decode(b)
	if err != nil {
		panic(err)
	}
	r := m.(*mad.REJ)
	fmt.Printf("%v of %v: %v (%d)\n", r.AttrID(), r.MessageRejected, r.Reason, r.Reason)
	// Output: REJ (0x0012) of REQ: invalid service ID (8)
}
