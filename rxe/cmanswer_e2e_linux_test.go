package rxe_test

import (
	"context"
	"errors"
	"math/rand/v2"
	"net/netip"
	"testing"
	"time"

	"github.com/rdmago/rdmago/rdmacm"
	"github.com/rdmago/rdmago/rdmacm/mad"
	"github.com/rdmago/rdmago/rxe"
	"github.com/rdmago/rdmago/rxe/link"
	"github.com/rdmago/rdmago/rxe/wire"
	"github.com/rdmago/rdmago/verbs"
)

// noCMServer is a process on 127.0.0.1 that uses the device without a
// connection manager, as rc_pingpong does: its first QP brings the device
// onto the network, and it leads the address's port. The client's device
// is on 127.0.0.2 at the same port, registered with rdmacm.
func noCMServer(t *testing.T) (client *verbs.Device) {
	t.Helper()
	port := uint16(20000 + rand.IntN(20000))
	srv, err := rxe.NewDevice(rxe.Config{Name: "rxe_nocm_srv", Addrs: []netip.Addr{netip.MustParseAddr("127.0.0.1")}, Port: port})
	if err != nil {
		t.Fatal(err)
	}
	ctx, err := srv.Open()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ctx.Close() })
	pd, err := ctx.AllocPD()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { pd.Dealloc() })
	cq, err := ctx.CreateCQ(16, nil, 0)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cq.Destroy() })
	qp, err := pd.CreateQP(&verbs.QPInitAttr{SendCQ: cq, RecvCQ: cq, QPType: verbs.QPTRC, Cap: verbs.QPCap{MaxSendWR: 4, MaxRecvWR: 4, MaxSendSGE: 1, MaxRecvSGE: 1}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { qp.Destroy() })
	client, err = rxe.NewDevice(rxe.Config{Name: "rxe_nocm_cli", Addrs: []netip.Addr{netip.MustParseAddr("127.0.0.2")}, Port: port})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(rdmacm.RegisterDevice(client))
	return client
}

// A connection to a host whose process on the address runs no connection
// manager is refused at once, as Linux's IB CM refuses it: REJECTED with
// reason 8 (invalid service ID), not UNREACHABLE after the REQ's retries.
func TestConnectToAProcessWithoutCMIsRejected(t *testing.T) {
	noCMServer(t)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	start := time.Now()
	c, err := rdmacm.Dial(ctx, "127.0.0.1:7471", &rdmacm.Options{LocalAddr: netip.AddrPortFrom(netip.MustParseAddr("127.0.0.2"), 0)})
	took := time.Since(start)
	if err == nil {
		c.Close()
		t.Fatal("Dial succeeded")
	}
	var ee *rdmacm.EventError
	if !errors.As(err, &ee) || ee.Type != rdmacm.EventRejected || ee.Status != int(mad.RejectInvalidServiceID) {
		t.Fatalf("Dial: %v, want REJECTED with status 8", err)
	}
	if !errors.Is(err, verbs.ErrConnRefused) {
		t.Errorf("errors.Is(%v, verbs.ErrConnRefused) = false", err)
	}
	// The REQ would be resent for seconds if nobody answered.
	if took > 5*time.Second {
		t.Errorf("rejected after %v", took)
	}
	t.Logf("rejected in %v: %v", took, err)
}

// A SIDR request (the UDP port space) to such a process gets a SIDR_REP
// saying the service is not supported: UNREACHABLE with status 1, at once.
func TestSIDRToAProcessWithoutCMIsAnswered(t *testing.T) {
	noCMServer(t)
	ch, err := rdmacm.CreateEventChannel()
	if err != nil {
		t.Fatal(err)
	}
	defer ch.Close()
	id, err := rdmacm.CreateID(ch, nil, rdmacm.PSUDP)
	if err != nil {
		t.Fatal(err)
	}
	defer id.Destroy()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	next := func(want rdmacm.EventType) *rdmacm.Event {
		t.Helper()
		ev, err := ch.GetEvent(ctx)
		if err != nil {
			t.Fatal(err)
		}
		ev.Ack()
		if ev.Type != want {
			t.Fatalf("event %s status %d, want %s", ev.Type, ev.Status, want)
		}
		return ev
	}
	if err := id.ResolveAddr(netip.AddrPortFrom(netip.MustParseAddr("127.0.0.2"), 0), netip.MustParseAddrPort("127.0.0.1:7472"), 2*time.Second); err != nil {
		t.Fatal(err)
	}
	next(rdmacm.EventAddrResolved)
	if err := id.ResolveRoute(2 * time.Second); err != nil {
		t.Fatal(err)
	}
	next(rdmacm.EventRouteResolved)
	if err := id.CreateQP(nil, &verbs.QPInitAttr{QPType: verbs.QPTUD, Cap: verbs.QPCap{MaxSendWR: 4, MaxRecvWR: 4, MaxSendSGE: 1, MaxRecvSGE: 1}}); err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	if err := id.Connect(nil); err != nil {
		t.Fatal(err)
	}
	ev := next(rdmacm.EventUnreachable)
	took := time.Since(start)
	if ev.Status != int(mad.SIDRUnsupported) {
		t.Errorf("UNREACHABLE with status %d, want %d (service ID not supported)", ev.Status, mad.SIDRUnsupported)
	}
	if took > 5*time.Second {
		t.Errorf("answered after %v", took)
	}
	t.Logf("answered in %v", took)
}

// The leader of an address whose process has a connection manager hands
// it a DREQ for an owner number no process holds, rather than forwarding
// it into the void, and the connection manager answers it with a DREP.
func TestLeaderCMAnswersForAnOwnerNobodyHolds(t *testing.T) {
	port := uint16(20000 + rand.IntN(20000))
	srv, err := rxe.NewDevice(rxe.Config{Name: "rxe_cm_leader", Addrs: []netip.Addr{netip.MustParseAddr("127.0.0.1")}, Port: port})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(rdmacm.RegisterDevice(srv))
	l, err := rdmacm.Listen("127.0.0.1:7473", nil) // starts the connection manager on the device
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	raw, err := link.ListenUDP(netip.AddrPortFrom(netip.MustParseAddr("127.0.0.2"), port), link.UDPOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer raw.Close()
	body, err := mad.Marshal(mad.Header{TransactionID: 0x42}, &mad.DREQ{LocalCommID: 0x10, RemoteCommID: 0x77000001, RemoteQPN: 0x770011})
	if err != nil {
		t.Fatal(err)
	}
	pkt, err := wire.AppendPacket(nil, &wire.Headers{
		BTH:  wire.BTHFields{OpCode: wire.UDSendOnly, PKey: wire.DefaultPKey, DestQP: 1},
		DETH: wire.DETHFields{QKey: wire.GSIQKey, SrcQP: 1},
	}, body)
	if err != nil {
		t.Fatal(err)
	}
	if err := raw.Send([]link.Packet{{Buf: pkt, Addr: netip.MustParseAddr("127.0.0.1")}}); err != nil {
		t.Fatal(err)
	}
	got := make(chan []byte, 16)
	go func() {
		pkts := []link.Packet{{Buf: make([]byte, raw.MaxPacket())}}
		for {
			n, err := raw.Recv(pkts)
			if err != nil {
				close(got)
				return
			}
			if n > 0 {
				got <- append([]byte(nil), pkts[0].Buf...)
			}
		}
	}()
	select {
	case b := <-got:
		p, err := wire.Parse(b)
		if err != nil {
			t.Fatal(err)
		}
		h, m, err := mad.Decode(p.Payload)
		if err != nil {
			t.Fatal(err)
		}
		drep, ok := m.(*mad.DREP)
		if !ok || h.TransactionID != 0x42 || drep.LocalCommID != 0x77000001 || drep.RemoteCommID != 0x10 {
			t.Errorf("answer %s %+v, TID %#x", h.AttrID, m, h.TransactionID)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("no answer")
	}
	raw.Close()
	for range got {
	}
}
