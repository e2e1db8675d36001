package mad_test

import (
	"bytes"
	"io"
	"net/netip"
	"os"
	"testing"

	"github.com/rdmago/rdmago/internal/pcap"
	"github.com/rdmago/rdmago/rdmacm/mad"
	"github.com/rdmago/rdmago/rxe/wire"
)

// capturedPacket is one RoCEv2 packet of the golden capture.
type capturedPacket struct {
	index    int
	srcMAC   [6]byte
	datagram wire.Datagram
	packet   wire.Packet
}

// rpingPackets returns the RoCEv2 packets of testdata/captures/rping.pcapng, a real
// rdma_cm connection between two Linux rdma_rxe hosts (see rping.txt).
func rpingPackets(tb testing.TB) []capturedPacket {
	tb.Helper()
	f, err := os.Open("../../testdata/captures/rping.pcapng")
	if err != nil {
		tb.Fatal(err)
	}
	defer f.Close()
	r, err := pcap.NewReader(f)
	if err != nil {
		tb.Fatal(err)
	}
	var out []capturedPacket
	for {
		p, err := r.Next()
		if err == io.EOF {
			break
		}
		if err != nil {
			tb.Fatal(err)
		}
		frame := bytes.Clone(p.Data) // the Reader reuses its buffer
		proto, ip, err := pcap.Decode(p.LinkType, frame)
		if err != nil || proto != pcap.EtherTypeIPv4 {
			continue
		}
		d, err := wire.ParseDatagram(ip)
		if err != nil || d.DstPort() != wire.UDPPort {
			continue
		}
		pkt, err := wire.Parse(d.Payload)
		if err != nil {
			tb.Fatalf("packet %d: %v", p.Index, err)
		}
		out = append(out, capturedPacket{p.Index, [6]byte(frame[6:12]), d, pkt})
	}
	return out
}

// cmMADs returns the CM MADs of the capture: the payloads of the UD
// SEND_ONLY packets to QP 1.
func cmMADs(tb testing.TB, pkts []capturedPacket) []capturedPacket {
	var out []capturedPacket
	for _, p := range pkts {
		if p.packet.OpCode() == wire.UDSendOnly && p.packet.BTH.DestQP() == 1 {
			out = append(out, p)
		}
	}
	return out
}

// guidFromMAC returns the EUI-64 a RoCE device derives from its MAC.
func guidFromMAC(mac [6]byte) uint64 {
	eui := [8]byte{mac[0] ^ 2, mac[1], mac[2], 0xff, 0xfe, mac[3], mac[4], mac[5]}
	var g uint64
	for _, b := range eui {
		g = g<<8 | uint64(b)
	}
	return g
}

// flowLabelToUDPSport is how Linux derives the UDP source port of a RoCEv2
// connection from its flow label (rdma_flow_label_to_udp_sport).
func flowLabelToUDPSport(fl uint32) uint16 {
	low := fl & 0x3fff
	high := fl & 0xfc000
	low ^= high >> 14
	return uint16(low | 0xc000)
}

func TestGoldenRping(t *testing.T) {
	pkts := rpingPackets(t)
	mads := cmMADs(t, pkts)
	if len(mads) != 5 {
		t.Fatalf("%d CM MADs in the capture, want 5 (REQ REP RTU DREQ DREP)", len(mads))
	}
	client := netip.MustParseAddr("10.77.0.12")
	server := netip.MustParseAddr("10.77.0.11")

	// What the RC data packets say about each side: the QPN its peer
	// addresses, the PSN of its first request, the UDP source port.
	type side struct {
		qpn      uint32 // the side's own QPN: DestQP of packets to it
		firstPSN uint32 // PSN of its first RC request
		sport    uint16
	}
	var sides = map[netip.Addr]*side{client: {}, server: {}}
	for _, p := range pkts {
		op := p.packet.OpCode()
		if op.Transport() != wire.TransportRC {
			continue
		}
		from, to := sides[p.datagram.Src], sides[p.datagram.Dst]
		to.qpn = p.packet.BTH.DestQP()
		if op.IsRequest() && from.sport == 0 {
			from.firstPSN = uint32(p.packet.BTH.PSN())
			from.sport = p.datagram.SrcPort()
		}
	}

	decoded := make([]mad.Message, len(mads))
	headers := make([]mad.Header, len(mads))
	for i, c := range mads {
		if k := c.packet.DETH.QKey(); k != mad.QP1QKey {
			t.Errorf("packet %d: Q_Key %#x, want %#x", c.index, k, mad.QP1QKey)
		}
		if q := c.packet.DETH.SrcQP(); q != 1 {
			t.Errorf("packet %d: source QP %d, want 1", c.index, q)
		}
		raw := c.packet.Payload
		h, m, err := mad.Decode(raw)
		if err != nil {
			t.Fatalf("packet %d: %v", c.index, err)
		}
		headers[i], decoded[i] = h, m
		if h.BaseVersion != 1 || h.MgmtClass != 0x07 || h.ClassVersion != 2 || h.Method != mad.MethodSend ||
			h.Status != 0 || h.ClassSpecific != 0 || h.AttrMod != 0 {
			t.Errorf("packet %d: header %+v", c.index, h)
		}
		// Linux: high TID of the MAD agent, then the active side's
		// local comm ID in memory order; every message of the
		// exchange carries it.
		if h.TransactionID != 0x00000002c0ab37f4 {
			t.Errorf("packet %d: TID %#x", c.index, h.TransactionID)
		}
		again, err := mad.Marshal(h, m)
		if err != nil {
			t.Fatalf("packet %d: re-encode: %v", c.index, err)
		}
		if !bytes.Equal(again, raw) {
			t.Errorf("packet %d %s: re-encoded MAD differs\n got %x\nwant %x", c.index, h.AttrID, again, raw)
		}
	}

	req, ok1 := decoded[0].(*mad.REQ)
	rep, ok2 := decoded[1].(*mad.REP)
	rtu, ok3 := decoded[2].(*mad.RTU)
	dreq, ok4 := decoded[3].(*mad.DREQ)
	drep, ok5 := decoded[4].(*mad.DREP)
	if !ok1 || !ok2 || !ok3 || !ok4 || !ok5 {
		t.Fatalf("messages %T %T %T %T %T, want REQ REP RTU DREQ DREP", decoded[0], decoded[1], decoded[2], decoded[3], decoded[4])
	}
	for i, want := range []struct {
		src, dst netip.Addr
	}{{client, server}, {server, client}, {client, server}, {client, server}, {server, client}} {
		if d := mads[i].datagram; d.Src != want.src || d.Dst != want.dst {
			t.Errorf("%s from %v to %v, want %v to %v", headers[i].AttrID, d.Src, d.Dst, want.src, want.dst)
		}
	}
	cs, ss := sides[client], sides[server]

	// REQ, from the client (the active side).
	wantREQ := mad.REQ{
		LocalCommID:             0xf437abc0,
		ServiceID:               mad.MakeServiceID(mad.PortSpaceTCP, 7174),
		LocalCAGUID:             guidFromMAC(mads[0].srcMAC),
		LocalQPN:                cs.qpn,
		ResponderResources:      1,
		InitiatorDepth:          1,
		RemoteCMResponseTimeout: 20,
		TransportServiceType:    mad.TransportRC,
		StartingPSN:             ss.firstPSN, // the server sends from it
		LocalCMResponseTimeout:  20,
		RetryCount:              7,
		PKey:                    0xffff,
		PathMTU:                 mad.MTU1024,
		RNRRetryCount:           7,
		MaxCMRetries:            15,
		Primary: mad.Path{
			LocalLID:        0xffff,
			RemoteLID:       0xffff,
			LocalGID:        mad.GIDFromAddr(client),
			RemoteGID:       mad.GIDFromAddr(server),
			FlowLabel:       req.Primary.FlowLabel, // checked against the UDP port below
			HopLimit:        64,
			LocalACKTimeout: 19,
		},
		PrivateData: req.PrivateData, // checked below
	}
	if *req != wantREQ {
		t.Errorf("REQ\n got %+v\nwant %+v", *req, wantREQ)
	}
	if req.LocalCAGUID != 0x505400fffe77000c || req.LocalQPN != 0x19 || req.StartingPSN != 0x2084e5 {
		t.Errorf("REQ GUID %#x QPN %#x PSN %#x", req.LocalCAGUID, req.LocalQPN, req.StartingPSN)
	}
	if uint64(req.ServiceID) != 0x0106<<16|7174 || req.ServiceID.String() != "TCP:7174" {
		t.Errorf("REQ service ID %#x (%v)", uint64(req.ServiceID), req.ServiceID)
	}
	if ps, port, ok := req.ServiceID.Split(); !ok || ps != mad.PortSpaceTCP || port != 7174 {
		t.Errorf("REQ service ID splits into %v %d %v", ps, port, ok)
	}
	if req.PathMTU.Bytes() != 1024 {
		t.Errorf("REQ path MTU %v", req.PathMTU)
	}
	if req.Primary.FlowLabel != 0x86df0 || flowLabelToUDPSport(req.Primary.FlowLabel) != cs.sport || cs.sport != ss.sport {
		t.Errorf("REQ flow label %#x gives UDP source port %d; RC packets use %d and %d",
			req.Primary.FlowLabel, flowLabelToUDPSport(req.Primary.FlowLabel), cs.sport, ss.sport)
	}
	if req.Primary.LocalGID.String() != "10.77.0.12" || req.Primary.RemoteGID.Addr() != server {
		t.Errorf("REQ GIDs %v -> %v", req.Primary.LocalGID, req.Primary.RemoteGID)
	}
	cma, user, err := req.CMAHeader()
	if err != nil {
		t.Fatal(err)
	}
	if cma.IPVersion() != 4 || cma.Src != client || cma.Dst != server || cma.Port != 51414 {
		t.Errorf("cma_hdr %+v (IPv%d)", cma, cma.IPVersion())
	}
	if len(user) != mad.REQUserPrivateDataLen || !bytes.Equal(user, make([]byte, 56)) {
		t.Errorf("REQ user private data %x", user)
	}
	rebuilt := *req
	if err := rebuilt.SetCMAPrivateData(&cma, nil); err != nil || rebuilt.PrivateData != req.PrivateData {
		t.Errorf("SetCMAPrivateData: %v\n got %x\nwant %x", err, rebuilt.PrivateData, req.PrivateData)
	}

	// REP, from the server.
	wantREP := mad.REP{
		LocalCommID:        0x9b11dee1,
		RemoteCommID:       req.LocalCommID,
		LocalQPN:           ss.qpn,
		StartingPSN:        cs.firstPSN, // the client sends from it
		ResponderResources: 1,
		InitiatorDepth:     1,
		TargetACKDelay:     15,
		RNRRetryCount:      7,
		LocalCAGUID:        guidFromMAC(mads[1].srcMAC),
	}
	if *rep != wantREP {
		t.Errorf("REP\n got %+v\nwant %+v", *rep, wantREP)
	}
	if rep.StartingPSN != 0xc5666e || rep.LocalCAGUID != 0x505400fffe77000b {
		t.Errorf("REP PSN %#x GUID %#x", rep.StartingPSN, rep.LocalCAGUID)
	}

	if want := (mad.RTU{LocalCommID: req.LocalCommID, RemoteCommID: rep.LocalCommID}); *rtu != want {
		t.Errorf("RTU %+v, want %+v", *rtu, want)
	}
	if want := (mad.DREQ{LocalCommID: req.LocalCommID, RemoteCommID: rep.LocalCommID, RemoteQPN: rep.LocalQPN}); *dreq != want {
		t.Errorf("DREQ %+v, want %+v", *dreq, want)
	}
	if want := (mad.DREP{LocalCommID: rep.LocalCommID, RemoteCommID: req.LocalCommID}); *drep != want {
		t.Errorf("DREP %+v, want %+v", *drep, want)
	}
}
