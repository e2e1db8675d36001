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
