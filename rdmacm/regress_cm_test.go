package rdmacm_test

// Regression tests: each pins down a connection manager behaviour that once
// went wrong.

import (
	"context"
	"net/netip"
	"testing"
	"time"

	"github.com/rdmago/rdmago/rdmacm"
	"github.com/rdmago/rdmago/rdmacm/mad"
)

// TestDestroyConnectingIDRejectsPassive: destroying an ID whose REQ
// is unanswered sends REJ(timeout) with Remote Communication ID 0 (the
// peer's ID is not known yet). The passive side must find its request by
// the REJ's Local Communication ID (Linux: cm_acquire_rejected_id, by the
// ARI's CA GUID), and report REJECTED. handleREJ only searches, by TID,
// IDs in the active states REQ_SENT and MRA_REQ_RCVD, so the server's
// request is never told.
func TestDestroyConnectingIDRejectsPassive(t *testing.T) {
	n := newCMNet(t, 101)
	sch, cch := mustChannel(t), mustChannel(t)
	n.listen(t, sch, rdmacm.PSTCP, 7610)
	cli := n.resolve(t, cch, rdmacm.PSTCP, 7610)
	if err := cli.CreateQP(nil, qpCaps()); err != nil {
		t.Fatal(err)
	}
	if err := cli.Connect(nil); err != nil {
		t.Fatal(err)
	}
	srv := mustEvent(t, sch, rdmacm.EventConnectRequest, 0).ID
	defer srv.Destroy()
	cli.Destroy()
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
	defer cancel()
	ev, err := sch.GetEvent(ctx)
	if err != nil {
		t.Fatalf("the server's request was not told the client gave up: %v", err)
	}
	if ev.ID != srv || ev.Type != rdmacm.EventRejected || ev.Status != int(mad.RejectTimeout) {
		t.Fatalf("event %v status %d, want REJECTED status 4 (timeout)", ev.Type, ev.Status)
	}
}

// TestDestroyUnblocksSyncConnect: a synchronous Connect waits on the
// ID's private channel; Destroy from another goroutine suppresses every
// later event of the ID and never closes that channel, so Connect never
// returns.
func TestDestroyUnblocksSyncConnect(t *testing.T) {
	n := newCMNet(t, 102)
	n.listen(t, mustChannel(t), rdmacm.PSTCP, 7611)
	n.filter(func(pkt []byte, from, to netip.Addr) bool { return madAttr(pkt) == mad.AttrREQ })
	id, err := rdmacm.CreateID(nil, nil, rdmacm.PSTCP)
	if err != nil {
		t.Fatal(err)
	}
	if err := id.ResolveAddr(netip.AddrPortFrom(n.cli, 0), netip.AddrPortFrom(n.srv, 7611), time.Second); err != nil {
		t.Fatal(err)
	}
	if err := id.ResolveRoute(time.Second); err != nil {
		t.Fatal(err)
	}
	if err := id.CreateQP(nil, qpCaps()); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- id.Connect(nil) }()
	time.Sleep(100 * time.Millisecond)
	id.Destroy()
	select {
	case err := <-done:
		if err == nil {
			t.Error("Connect of a destroyed ID succeeded")
		}
	case <-time.After(3 * time.Second):
		t.Fatal("synchronous Connect still blocked 3 s after Destroy (goroutine leaked)")
	}
}

// TestCloseWakesEveryGetEvent: Close puts one token in the
// channel's ready slot, so of several goroutines blocked in GetEvent only
// one returns.
func TestCloseWakesEveryGetEvent(t *testing.T) {
	ch, _ := rdmacm.CreateEventChannel()
	errs := make(chan error, 3)
	for range 3 {
		go func() {
			_, err := ch.GetEvent(context.Background())
			errs <- err
		}()
	}
	time.Sleep(50 * time.Millisecond)
	if err := ch.Close(); err != nil {
		t.Fatal(err)
	}
	for i := range 3 {
		select {
		case <-errs:
		case <-time.After(2 * time.Second):
			t.Fatalf("%d of 3 blocked GetEvent calls returned after Close", i)
		}
	}
}

// TestMigratedListenerTakesItsRequests: Migrate moves the events whose
// ID is the listener, but a CONNECT_REQUEST's ID is the new request's; it
// stays on the old channel with its ID counted there, so the old channel
// cannot be closed (Linux's ucma_migrate_id moves the listener's
// connection requests too).
func TestMigratedListenerTakesItsRequests(t *testing.T) {
	n := newCMNet(t, 103)
	old, _ := rdmacm.CreateEventChannel()
	lis, _ := rdmacm.CreateID(old, nil, rdmacm.PSTCP)
	defer lis.Destroy()
	if err := lis.BindAddr(netip.AddrPortFrom(n.srv, 7612)); err != nil {
		t.Fatal(err)
	}
	lis.Listen(4)
	cch := mustChannel(t)
	cli := n.resolve(t, cch, rdmacm.PSTCP, 7612)
	cli.CreateQP(nil, qpCaps())
	cli.Connect(nil)
	time.Sleep(200 * time.Millisecond) // the request is queued on old
	nch := mustChannel(t)
	if err := lis.Migrate(nch); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	ev, err := nch.GetEvent(ctx)
	if err != nil {
		old.Close()
		t.Fatalf("the listener's pending CONNECT_REQUEST did not move with it: %v", err)
	}
	ev.ID.Destroy()
	if err := old.Close(); err != nil {
		t.Fatalf("closing the old channel: %v", err)
	}
}

// TestREPToGoneIDIsRejected: a REP for a connection the active side
// no longer has (its REQ timed out) is answered with REJ "invalid
// communication ID" whose Local Communication ID is 0 (handleREP's
// reply). Since fecb390 handleREJ drops a REJ whose Local Communication
// ID is not the connection's peer ID, so the server never hears it: it
// resends the REP until its retries run out and reports UNREACHABLE
// instead of REJECTED (6). Linux's cm_issue_rej puts the REP's Remote
// Communication ID there, which passes the check.
func TestREPToGoneIDIsRejected(t *testing.T) {
	n := newCMNet(t, 104)
	sch, cch := mustChannel(t), mustChannel(t)
	n.listen(t, sch, rdmacm.PSTCP, 7613)
	cli := n.resolve(t, cch, rdmacm.PSTCP, 7613)
	cli.SetACKTimeout(8)
	cli.SetCMTimeouts(10, 0) // the REQ times out after about 5 ms, unanswered
	if err := cli.CreateQP(nil, qpCaps()); err != nil {
		t.Fatal(err)
	}
	if err := cli.Connect(nil); err != nil {
		t.Fatal(err)
	}
	srv := mustEvent(t, sch, rdmacm.EventConnectRequest, 0).ID
	defer srv.Destroy()
	mustEvent(t, cch, rdmacm.EventUnreachable, -110)
	if err := srv.CreateQP(nil, qpCaps()); err != nil {
		t.Fatal(err)
	}
	if err := srv.Accept(nil); err != nil {
		t.Fatal(err)
	}
	mustEvent(t, sch, rdmacm.EventRejected, int(mad.RejectInvalidCommID))
}

// TestDestroyedSIDRRequestIsNotRedelivered: destroying a SIDR
// request's ID sends nothing (abandon only goes idle), so the client's
// next SIDR_REQ retry is taken for a new request and the server's
// application gets a second CONNECT_REQUEST for the same request. Linux's
// cm_destroy_id answers with a SIDR_REP "rejected" (cm_reject_sidr_req).
func TestDestroyedSIDRRequestIsNotRedelivered(t *testing.T) {
	n := newCMNet(t, 105)
	sch, cch := mustChannel(t), mustChannel(t)
	n.listen(t, sch, rdmacm.PSUDP, 7614)
	cli := n.resolve(t, cch, rdmacm.PSUDP, 7614)
	cli.SetACKTimeout(8)
	cli.SetCMTimeouts(12, 5) // a SIDR_REQ retry every ~18 ms
	if err := cli.CreateQP(nil, qpCaps()); err != nil {
		t.Fatal(err)
	}
	if err := cli.Connect(nil); err != nil {
		t.Fatal(err)
	}
	mustEvent(t, sch, rdmacm.EventConnectRequest, 0).ID.Destroy()
	ctx, cancel := context.WithTimeout(context.Background(), 500*time.Millisecond)
	defer cancel()
	if ev, err := sch.GetEvent(ctx); err == nil {
		ev.ID.Destroy()
		t.Fatalf("a second %v for the SIDR request whose ID was destroyed", ev.Type)
	}
	mustEvent(t, cch, rdmacm.EventUnreachable, int(mad.SIDRReject))
}
