package rxe

import (
	"bytes"
	"net/netip"
	"sync"
	"testing"
	"time"

	"github.com/rdmago/rdmago/rdmacm/mad"
	"github.com/rdmago/rdmago/rxe/link"
	"github.com/rdmago/rdmago/rxe/wire"
	"github.com/rdmago/rdmago/verbs"
)

// cmPacket is a CM message as a connection manager sends it: a UD
// SEND_ONLY from QP1 to QP1 with QP1's Q_Key, carrying the MAD (ICRC
// left zero, for the link to fill in).
func cmPacket(t testing.TB, h mad.Header, m mad.Message) []byte {
	t.Helper()
	b, err := mad.Marshal(h, m)
	if err != nil {
		t.Fatal(err)
	}
	pkt, err := wire.AppendPacket(nil, &wire.Headers{
		BTH:  wire.BTHFields{OpCode: wire.UDSendOnly, PKey: wire.DefaultPKey, DestQP: gsiQPN, PSN: 0x1234},
		DETH: wire.DETHFields{QKey: wire.GSIQKey, SrcQP: gsiQPN},
	}, b)
	if err != nil {
		t.Fatal(err)
	}
	return pkt
}

const testTID = 0x0102030405060708

// decodeAnswer checks the transport headers of an answer from QP1 to QP1
// and returns its MAD, decoded.
func decodeAnswer(t *testing.T, pkt []byte) (mad.Header, mad.Message) {
	t.Helper()
	p, err := wire.Parse(pkt)
	if err != nil {
		t.Fatalf("the answer does not parse: %v", err)
	}
	if p.OpCode() != wire.UDSendOnly || p.BTH.DestQP() != gsiQPN || p.BTH.PKey() != wire.DefaultPKey {
		t.Errorf("answer BTH: %s to QP %d P_Key %#x, want UD SEND_ONLY to QP 1 P_Key 0xffff", p.OpCode(), p.BTH.DestQP(), p.BTH.PKey())
	}
	if p.DETH.QKey() != wire.GSIQKey || p.DETH.SrcQP() != gsiQPN {
		t.Errorf("answer DETH: Q_Key %#x source QP %d, want 0x80010000 and 1", p.DETH.QKey(), p.DETH.SrcQP())
	}
	if len(p.Payload) != mad.MADLen {
		t.Fatalf("answer carries %d bytes, want a %d-byte MAD", len(p.Payload), mad.MADLen)
	}
	h, m, err := mad.Decode(p.Payload)
	if err != nil {
		t.Fatalf("the answer's MAD does not decode: %v", err)
	}
	if h.BaseVersion != 1 || h.MgmtClass != 7 || h.ClassVersion != 2 || h.Method != mad.MethodSend || h.Status != 0 || h.AttrMod != 0 {
		t.Errorf("answer MAD header %+v", h)
	}
	if h.TransactionID != testTID {
		t.Errorf("answer transaction ID %#x, want the request's %#x", h.TransactionID, uint64(testTID))
	}
	return h, m
}

// The device answers what the IB CM answers for connections and services
// it does not know: each request and its expected answer, field by field.
func TestCMAnswerIsTheIBCMsAnswer(t *testing.T) {
	svc := mad.ServiceID(0x0106000000001c8e)
	req := &mad.REQ{LocalCommID: 0x11223344, VendorID: 0x00abcd, ServiceID: svc, LocalQPN: 0x11, PathMTU: mad.MTU1024, PKey: 0xffff}
	cases := []struct {
		name string
		in   mad.Message
		want mad.Message
	}{
		{"REQ for a service nobody listens on", req,
			&mad.REJ{LocalCommID: 0, RemoteCommID: 0x11223344, MessageRejected: mad.MsgCodeREQ, Reason: mad.RejectInvalidServiceID}},
		{"REP for no connection", &mad.REP{LocalCommID: 0x55667788, RemoteCommID: 0x0700aabb, LocalQPN: 0x12},
			&mad.REJ{LocalCommID: 0x0700aabb, RemoteCommID: 0x55667788, MessageRejected: mad.MsgCodeREP, Reason: mad.RejectInvalidCommID}},
		{"DREQ for no connection", &mad.DREQ{LocalCommID: 0x55667788, RemoteCommID: 0x0700aabb, RemoteQPN: 0x12},
			&mad.DREP{LocalCommID: 0x0700aabb, RemoteCommID: 0x55667788}},
		{"SIDR_REQ for a service nobody listens on", &mad.SIDRREQ{RequestID: 0x99887766, PKey: 0xffff, ServiceID: svc},
			&mad.SIDRREP{RequestID: 0x99887766, Status: mad.SIDRUnsupported, ServiceID: svc}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			var out [cmAnswerLen]byte
			n := cmAnswer(&out, cmPacket(t, mad.Header{TransactionID: testTID}, c.in), 77)
			if n != cmAnswerLen {
				t.Fatalf("answer of %d bytes, want %d", n, cmAnswerLen)
			}
			if psn := wire.BTH(out[:]).PSN(); psn != 77 {
				t.Errorf("PSN %d, want 77", psn)
			}
			h, m := decodeAnswer(t, out[:n])
			if h.AttrID != c.want.AttrID() {
				t.Fatalf("answered with %s, want %s", h.AttrID, c.want.AttrID())
			}
			if got, want := mustMarshal(t, m), mustMarshal(t, c.want); !bytes.Equal(got, want) {
				t.Errorf("answer %+v\nwant %+v", m, c.want)
			}
		})
	}
}

func mustMarshal(t *testing.T, m mad.Message) []byte {
	t.Helper()
	b, err := m.Append(nil)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// What the IB CM drops, or what is no CM message to QP1, gets no answer.
func TestCMAnswerLeavesOtherPacketsUnanswered(t *testing.T) {
	rtu := cmPacket(t, mad.Header{TransactionID: testTID}, &mad.RTU{LocalCommID: 1, RemoteCommID: 2})
	req := cmPacket(t, mad.Header{TransactionID: testTID}, &mad.REQ{LocalCommID: 1, PathMTU: mad.MTU1024})
	edit := func(kv ...int) []byte {
		b := bytes.Clone(req)
		for i := 0; i < len(kv); i += 2 {
			b[kv[i]] = byte(kv[i+1])
		}
		return b
	}
	cases := map[string][]byte{
		"RTU":                 rtu,
		"REJ":                 cmPacket(t, mad.Header{}, &mad.REJ{Reason: mad.RejectInvalidServiceID}),
		"DREP":                cmPacket(t, mad.Header{}, &mad.DREP{}),
		"MRA":                 cmPacket(t, mad.Header{}, &mad.MRA{}),
		"SIDR_REP":            cmPacket(t, mad.Header{}, &mad.SIDRREP{}),
		"another QP":          edit(7, 2),
		"another Q_Key":       edit(wire.BTHLen+3, 0x02),
		"another opcode":      edit(0, int(wire.RCSendOnly)),
		"transport version 1": edit(1, 1),
		"MAD base version 2":  edit(madOffset, 2),
		"another class":       edit(madOffset+1, 0x04),
		"class version 1":     edit(madOffset+2, 1),
		"a response method":   edit(madOffset+3, 0x83),
		"ClassPortInfo Get":   edit(madOffset+3, 0x01, madOffset+17, 0x01),
		"shorter than a MAD":  req[:cmAnswerLen-1],
		"BTH only":            req[:wire.BTHLen],
		"empty":               nil,
	}
	for name, pkt := range cases {
		var out [cmAnswerLen]byte
		if n := cmAnswer(&out, pkt, 0); n != 0 {
			t.Errorf("%s: answered with %d bytes", name, n)
		}
	}
}

// oneService is a host where one process, owner 9, listens on one
// service.
type oneService struct{}

func (oneService) ServiceOwner(id uint64) (uint8, bool, bool) {
	return 9, id == 0x0106000000004242, false
}

// cmPeer is a device on an in-memory network with a raw link beside it,
// from which a test sends the device CM messages and reads its answers.
type cmPeer struct {
	dev *verbs.Device
	ctx *verbs.Context
	hw  *hw
	raw *link.Mem
	got chan []byte
}

// cmPeerDevAddr is the device's address on the network of memLinks.
var cmPeerDevAddr = netip.MustParseAddr("10.0.0.1")

func newCMPeer(t *testing.T, clk clock) *cmPeer {
	t.Helper()
	_, la, lb := memLinks(t, 1)
	dev, err := NewDevice(Config{Name: "rxe_cmanswer", Links: []link.Link{la}, clock: clk})
	if err != nil {
		t.Fatal(err)
	}
	ctx, err := dev.Open()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ctx.Close() })
	p := &cmPeer{dev: dev, ctx: ctx, raw: lb, got: collect(t, lb)}
	p.hw = verbs.DeviceDriverOf(dev).(*device).hw
	return p
}

// collect gathers what l receives until the test ends, when it closes l.
func collect(t *testing.T, l link.Link) chan []byte {
	got := make(chan []byte, 1024)
	var done sync.WaitGroup
	done.Add(1)
	go func() {
		defer done.Done()
		pkts := []link.Packet{{Buf: make([]byte, l.MaxPacket())}}
		for {
			n, err := l.Recv(pkts)
			if err != nil {
				return
			}
			for _, pk := range pkts[:n] {
				got <- bytes.Clone(pk.Buf)
			}
		}
	}()
	t.Cleanup(func() {
		l.Close()
		done.Wait()
	})
	return got
}

func (p *cmPeer) send(t *testing.T, pkt []byte) {
	t.Helper()
	if err := p.raw.Send([]link.Packet{{Buf: bytes.Clone(pkt), Addr: cmPeerDevAddr}}); err != nil {
		t.Fatal(err)
	}
}

func (p *cmPeer) answer(t *testing.T) []byte {
	t.Helper()
	return receive(t, p.got)
}

// receive returns the next packet got receives.
func receive(t *testing.T, got chan []byte) []byte {
	t.Helper()
	select {
	case b := <-got:
		return b
	case <-time.After(10 * time.Second):
		t.Fatal("no answer")
		return nil
	}
}

func (p *cmPeer) counts() (answered, limited uint64) { return p.hw.cmCounts() }

// cmCounts returns how many CM messages the device answered, and how many
// it left unanswered over the bound.
func (h *hw) cmCounts() (answered, limited uint64) {
	h.cmAns.mu.Lock()
	defer h.cmAns.mu.Unlock()
	return h.cmAns.answered, h.cmAns.limited
}

// A device that runs no connection manager refuses a connection request
// at once, as a Linux host's IB CM does, with a REJ whose ICRC is valid
// (the network would drop it otherwise).
func TestDeviceWithoutCMRejectsAConnectionRequest(t *testing.T) {
	p := newCMPeer(t, nil)
	p.send(t, cmPacket(t, mad.Header{TransactionID: testTID},
		&mad.REQ{LocalCommID: 0x0a0b0c0d, ServiceID: 0x0106000000004242, LocalQPN: 0x11, PathMTU: mad.MTU1024, PKey: 0xffff}))
	h, m := decodeAnswer(t, p.answer(t))
	rej, ok := m.(*mad.REJ)
	if !ok {
		t.Fatalf("answered with %s, want a REJ", h.AttrID)
	}
	want := mad.REJ{RemoteCommID: 0x0a0b0c0d, MessageRejected: mad.MsgCodeREQ, Reason: mad.RejectInvalidServiceID}
	if *rej != want {
		t.Errorf("REJ %+v, want %+v", *rej, want)
	}
}

// A process whose connection manager has QP1 gets the requests on QP1, as
// before: the device does not answer for it.
func TestDeviceWithQP1LeavesRequestsToIt(t *testing.T) {
	p := newCMPeer(t, nil)
	pd, err := p.ctx.AllocPD()
	if err != nil {
		t.Fatal(err)
	}
	defer pd.Dealloc()
	cq, err := p.ctx.CreateCQ(16, nil, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer cq.Destroy()
	qp1, err := pd.CreateQP(&verbs.QPInitAttr{SendCQ: cq, RecvCQ: cq, QPType: verbs.QPTGSI, Cap: verbs.QPCap{MaxSendWR: 4, MaxRecvWR: 4, MaxSendSGE: 1, MaxRecvSGE: 1}})
	if err != nil {
		t.Fatal(err)
	}
	defer qp1.Destroy()
	for _, s := range []struct {
		attr verbs.QPAttr
		mask verbs.QPAttrMask
	}{
		{verbs.QPAttr{QPState: verbs.QPSInit, PortNum: 1, QKey: wire.GSIQKey}, verbs.QPAttrState | verbs.QPAttrPKeyIndex | verbs.QPAttrPort | verbs.QPAttrQKey},
		{verbs.QPAttr{QPState: verbs.QPSRTR}, verbs.QPAttrState},
		{verbs.QPAttr{QPState: verbs.QPSRTS}, verbs.QPAttrState | verbs.QPAttrSQPSN},
	} {
		if err := qp1.Modify(&s.attr, s.mask); err != nil {
			t.Fatal(err)
		}
	}
	buf := make([]byte, verbs.GRHLen+mad.MADLen)
	mr, err := pd.RegMR(buf, verbs.AccessLocalWrite)
	if err != nil {
		t.Fatal(err)
	}
	defer mr.Dereg()
	if err := qp1.PostRecv([]verbs.RecvWR{{WRID: 1, SGList: []verbs.SGE{mr.SGE(0, len(buf))}}}); err != nil {
		t.Fatal(err)
	}
	p.send(t, cmPacket(t, mad.Header{TransactionID: testTID}, &mad.REQ{LocalCommID: 1, ServiceID: 0x0106000000004242, PathMTU: mad.MTU1024}))
	wcs := make([]verbs.WC, 1)
	deadline := time.Now().Add(10 * time.Second)
	for {
		n, err := cq.Poll(wcs)
		if err != nil {
			t.Fatal(err)
		}
		if n == 1 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("QP1 received nothing")
		}
		time.Sleep(time.Millisecond)
	}
	if wcs[0].Status != verbs.WCSuccess || wcs[0].Opcode != verbs.WCRecv {
		t.Fatalf("QP1's completion: %+v", wcs[0])
	}
	if a, _ := p.counts(); a != 0 {
		t.Errorf("the device answered %d requests for QP1's owner", a)
	}
	select {
	case b := <-p.got:
		t.Errorf("the device sent a packet of %d bytes", len(b))
	default:
	}
}

// A flood of requests costs at most cmAnswersPerMs answers a millisecond:
// the rest are dropped.
func TestCMAnswersAreBounded(t *testing.T) {
	clk := newFakeClock()
	p := newCMPeer(t, clk)
	const burst = 3 * cmAnswersPerMs
	for i := 0; i < burst; i++ {
		p.send(t, cmPacket(t, mad.Header{TransactionID: testTID}, &mad.DREQ{LocalCommID: uint32(i), RemoteCommID: 5}))
	}
	for i := 0; i < cmAnswersPerMs; i++ {
		p.answer(t)
	}
	deadline := time.Now().Add(10 * time.Second)
	for {
		a, l := p.counts()
		if a+l == burst {
			if a != cmAnswersPerMs {
				t.Fatalf("%d answers in one millisecond, want %d", a, cmAnswersPerMs)
			}
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d answered and %d dropped of %d", a, l, burst)
		}
		time.Sleep(time.Millisecond)
	}
	// The next millisecond has room again.
	clk.set(clk.now().Add(time.Millisecond))
	p.send(t, cmPacket(t, mad.Header{TransactionID: testTID}, &mad.DREQ{LocalCommID: 1, RemoteCommID: 5}))
	if _, m := decodeAnswer(t, p.answer(t)); m.AttrID() != mad.AttrDREP {
		t.Errorf("answered with %s, want DREP", m.AttrID())
	}
}

// Answering allocates nothing.
func TestCMAnswerAllocatesNothing(t *testing.T) {
	req := cmPacket(t, mad.Header{TransactionID: testTID}, &mad.DREQ{LocalCommID: 1, RemoteCommID: 5})
	var out [cmAnswerLen]byte
	if n := testing.AllocsPerRun(100, func() { cmAnswer(&out, req, 1) }); n != 0 {
		t.Errorf("%v allocations per answer", n)
	}
}

// FuzzCMAnswer feeds arbitrary packets to what reads QP1's packets on the
// way in (route, cmOwnerGone's checks, cmAnswer): nothing may panic, and
// every answer is a well-formed CM MAD from QP1 to QP1.
func FuzzCMAnswer(f *testing.F) {
	for _, m := range []mad.Message{
		&mad.REQ{LocalCommID: 1, ServiceID: 0x0106000000004242, PathMTU: mad.MTU1024},
		&mad.REP{LocalCommID: 2, RemoteCommID: 0x05000001},
		&mad.DREQ{LocalCommID: 2, RemoteCommID: 0x05000001},
		&mad.SIDRREQ{RequestID: 3, ServiceID: 0x0111000000004242},
		&mad.RTU{LocalCommID: 2, RemoteCommID: 0x05000001},
	} {
		f.Add(cmPacket(f, mad.Header{TransactionID: testTID}, m))
	}
	f.Add([]byte{0x64, 0, 0xff, 0xff, 0, 0, 0, 1})
	h := &hw{owner: 3, clock: wallClock{}}
	f.Fuzz(func(t *testing.T, pkt []byte) {
		if len(pkt) >= 8 {
			h.route(oneService{}, pkt)
		}
		answersByCommID(pkt)
		var out [cmAnswerLen]byte
		n := cmAnswer(&out, pkt, 9)
		if n == 0 {
			return
		}
		if n != cmAnswerLen {
			t.Fatalf("answer of %d bytes", n)
		}
		p, err := wire.Parse(out[:n])
		if err != nil {
			t.Fatalf("the answer does not parse: %v", err)
		}
		if p.BTH.DestQP() != gsiQPN || p.DETH.SrcQP() != gsiQPN || p.DETH.QKey() != wire.GSIQKey {
			t.Fatalf("answer not from QP1 to QP1: %s", p.String())
		}
		mh, m, err := mad.Decode(p.Payload)
		if err != nil {
			t.Fatalf("the answer's MAD does not decode: %v", err)
		}
		switch mh.AttrID {
		case mad.AttrREJ, mad.AttrDREP, mad.AttrSIDRREP:
		default:
			t.Fatalf("answered with %s", mh.AttrID)
		}
		if mh.TransactionID != uint64(pkt[madOffset+8])<<56|uint64(pkt[madOffset+9])<<48|uint64(pkt[madOffset+10])<<40|
			uint64(pkt[madOffset+11])<<32|uint64(pkt[madOffset+12])<<24|uint64(pkt[madOffset+13])<<16|uint64(pkt[madOffset+14])<<8|uint64(pkt[madOffset+15]) {
			t.Fatalf("transaction ID %#x is not the request's", mh.TransactionID)
		}
		if m.AttrID() != mh.AttrID {
			t.Fatalf("decoded %s as %s", mh.AttrID, m.AttrID())
		}
	})
}

// A service ID in rdma_cm's port spaces is named by its port, as the
// programs that listen on it know it.
func TestServiceNameIsThePort(t *testing.T) {
	for _, c := range []struct {
		id   uint64
		want string
	}{
		{0x01061c06, "port 7174 of rdma_cm's TCP port space (service 0x1061c06)"},
		{0x01110007, "port 7 of rdma_cm's UDP port space (service 0x1110007)"},
		{0x013f0000, "port 0 of rdma_cm's IB port space (service 0x13f0000)"},
		{0x1234, "service 0x1234"},
		{0x1_01061c06, "service 0x101061c06"},
	} {
		if got := serviceName(c.id); got != c.want {
			t.Errorf("serviceName(%#x) = %q, want %q", c.id, got, c.want)
		}
	}
}
