package rdmacm

import (
	"context"
	"encoding/binary"
	"net/netip"
	"runtime"
	"sync/atomic"
	"testing"
	"time"

	"github.com/rdmago/rdmago/rdmacm/mad"
	"github.com/rdmago/rdmago/rxe/link"
	"github.com/rdmago/rdmago/verbs"
)

// useFakeClock runs the timers of the IB CM agents started from now on
// a clock the test moves. When the test ends, new agents go back to the
// wall clock, and this clock is run on until its timers are done, so
// that the test's connections leave their timewait and free their
// agents.
func useFakeClock(t *testing.T) *fakeClock {
	c := &fakeClock{}
	cm.mu.Lock()
	old := cmClock
	cmClock = c
	cm.mu.Unlock()
	t.Cleanup(func() {
		cm.mu.Lock()
		cmClock = old
		cm.mu.Unlock()
		for range 100 {
			if c.advance(time.Hour) == 0 {
				break
			}
		}
	})
	return c
}

// reqs returns a filter that drops every REQ to srv, after telling each on
// the channel it returns.
func reqs(srv netip.Addr) (func(p []byte, from, to netip.Addr) bool, chan struct{}) {
	ch := make(chan struct{}, 64)
	return func(p []byte, from, to netip.Addr) bool {
		if to == srv && len(p) >= 20+16+2 && binary.BigEndian.Uint32(p[4:8])&0xffffff == 1 &&
			mad.AttrID(binary.BigEndian.Uint16(p[20+16:])) == mad.AttrREQ {
			ch <- struct{}{}
			return false
		}
		return true
	}, ch
}

// connecting starts a connection to a server that never hears it, with
// response timeout code 10 (about 4 ms) and the given retries, and returns
// its event channel once the first REQ left.
func connecting(t *testing.T, n *regressNet, port uint16, retries uint8, sent chan struct{}) (*ID, *EventChannel) {
	t.Helper()
	ch := newChannel()
	id, _ := CreateID(ch, nil, PSTCP)
	t.Cleanup(func() { id.Destroy() })
	if err := id.ResolveAddr(netip.AddrPortFrom(n.cli, 0), netip.AddrPortFrom(n.srv, port), time.Second); err != nil {
		t.Fatal(err)
	}
	id.ResolveRoute(time.Second)
	id.SetACKTimeout(8)
	id.SetCMTimeouts(10, retries)
	if err := id.CreateQP(nil, &verbs.QPInitAttr{Cap: verbs.QPCap{MaxSendWR: 4, MaxRecvWR: 4, MaxSendSGE: 1, MaxRecvSGE: 1}}); err != nil {
		t.Fatal(err)
	}
	for range 2 { // ADDR_RESOLVED, ROUTE_RESOLVED
		ch.GetEvent(context.Background())
	}
	if err := id.Connect(nil); err != nil {
		t.Fatal(err)
	}
	waitSent(t, sent, "the first REQ")
	return id, ch
}

func waitSent(t *testing.T, sent chan struct{}, what string) {
	t.Helper()
	select {
	case <-sent:
	case <-time.After(10 * time.Second):
		t.Fatalf("%s never reached the network", what)
	}
}

func noneSent(t *testing.T, sent chan struct{}, when string) {
	t.Helper()
	select {
	case <-sent:
		t.Fatalf("a REQ was resent %s", when)
	default:
	}
}

// TestREQIsResentOnItsTimeoutAndGivesUpAfterItsRetries: on the CM's
// clock, a REQ nobody answers is sent again exactly when its response
// timeout ends, as many times as its retries say, and then the
// connection fails with RDMA_CM_EVENT_UNREACHABLE (ETIMEDOUT).
func TestREQIsResentOnItsTimeoutAndGivesUpAfterItsRetries(t *testing.T) {
	clk := useFakeClock(t)
	n := newRegressNet(t, 41, nil)
	filter, sent := reqs(n.srv)
	n.net.SetFaults(link.Faults{Filter: filter})
	_, ch := connecting(t, n, 7641, 2, sent)

	for try := 1; try <= 2; try++ {
		d, ok := clk.pending()
		if !ok || d <= 0 {
			t.Fatalf("try %d: no retransmission timer armed", try)
		}
		if clk.advance(d-time.Microsecond) != 0 {
			t.Fatalf("try %d: a timer fired before the response timeout", try)
		}
		noneSent(t, sent, "before its timeout")
		if clk.advance(time.Microsecond) != 1 {
			t.Fatalf("try %d: the retransmission timer did not fire at its deadline", try)
		}
		waitSent(t, sent, "the resent REQ")
	}
	d, _ := clk.pending()
	clk.advance(d)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	ev, err := ch.GetEvent(ctx)
	if err != nil || ev.Type != EventUnreachable || ev.Status != -int(verbs.ErrTimedOut) {
		t.Fatalf("after the last retry: %v %v, want UNREACHABLE ETIMEDOUT", ev, err)
	}
	noneSent(t, sent, "after the retries ran out")
}

// TestMRAWinsOverAFiredRetransmitTimer: an MRA handled while the REQ's
// retransmit timer has fired and waits for cm.mu. The MRA sets the
// retries left to 0 and rearms the timer; the fire that was waiting then
// must not fail the connection at once: the peer asked for about 4 s.
func TestMRAWinsOverAFiredRetransmitTimer(t *testing.T) {
	clk := useFakeClock(t)
	n := newRegressNet(t, 2, nil)
	filter, sent := reqs(n.srv)
	n.net.SetFaults(link.Faults{Filter: filter})
	id, ch := connecting(t, n, 7601, 5, sent)

	d, _ := clk.pending()
	k := ibcmOf(id)
	cm.mu.Lock()
	fired := make(chan int)
	go func() { fired <- clk.advance(d) }() // the timer's function waits for cm.mu
	for {
		if _, armed := clk.pending(); !armed {
			break // taken from the clock: its function runs
		}
		runtime.Gosched()
	}
	// The peer's MRA (service timeout 20: about 4 s) arrives now.
	k.agent.handleMRA(&inMAD{src: n.srv}, &mad.MRA{LocalCommID: 99, RemoteCommID: k.c.localID, MessageMRAed: mad.MsgCodeREQ, ServiceTimeout: 20})
	cmUnlock()
	if <-fired != 1 {
		t.Fatal("the retransmit timer did not fire")
	}
	if ev, err := ch.GetEvent(ctxDone()); err == nil {
		t.Fatalf("%v (status %d) right after the MRA; the peer asked for about 4 s", ev.Type, ev.Status)
	}
	wait, armed := clk.pending()
	if !armed || wait < 4*time.Second {
		t.Fatalf("after the MRA the next deadline is %v away (armed %v), want about 4 s or more", wait, armed)
	}
}

// ctxDone is a context already ended: GetEvent with it reports only an
// event already queued.
func ctxDone() context.Context {
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	return ctx
}

// TestSlowAcceptGetsMRA: while the server's application takes its time,
// the client's resent REQ is answered with an MRA (service timeout 24,
// about 69 s), and on the CM's clock the client then waits well past the
// point where its own retries (2, about 5 ms apart) would have run out.
func TestSlowAcceptGetsMRA(t *testing.T) {
	clk := useFakeClock(t)
	n := newRegressNet(t, 42, nil)
	var mras, reqs atomic.Int32
	n.net.SetFaults(link.Faults{Filter: func(p []byte, from, to netip.Addr) bool {
		if len(p) >= 20+16+2 && binary.BigEndian.Uint32(p[4:8])&0xffffff == 1 {
			switch mad.AttrID(binary.BigEndian.Uint16(p[20+16:])) {
			case mad.AttrMRA:
				mras.Add(1)
			case mad.AttrREQ:
				reqs.Add(1)
			}
		}
		return true
	}})
	caps := &verbs.QPInitAttr{Cap: verbs.QPCap{MaxSendWR: 4, MaxRecvWR: 4, MaxSendSGE: 1, MaxRecvSGE: 1}}
	sch := newChannel()
	lis, _ := CreateID(sch, nil, PSTCP)
	defer lis.Destroy()
	if err := lis.BindAddr(netip.AddrPortFrom(n.srv, 7642)); err != nil {
		t.Fatal(err)
	}
	if err := lis.Listen(4); err != nil {
		t.Fatal(err)
	}
	cch := newChannel()
	cli, _ := CreateID(cch, nil, PSTCP)
	defer cli.Destroy()
	if err := cli.ResolveAddr(netip.AddrPortFrom(n.cli, 0), netip.AddrPortFrom(n.srv, 7642), time.Second); err != nil {
		t.Fatal(err)
	}
	cli.ResolveRoute(time.Second)
	cli.SetACKTimeout(8)
	cli.SetCMTimeouts(10, 2)
	if err := cli.CreateQP(nil, caps); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	for range 2 { // ADDR_RESOLVED, ROUTE_RESOLVED
		cch.GetEvent(ctx)
	}
	if err := cli.Connect(nil); err != nil {
		t.Fatal(err)
	}
	ev, err := sch.GetEvent(ctx)
	if err != nil || ev.Type != EventConnectRequest {
		t.Fatalf("%v %v, want CONNECT_REQUEST", ev, err)
	}
	srv := ev.ID
	defer srv.Destroy()

	// The REQ's timeout ends: it goes again, and the server, still
	// deciding, answers the duplicate with an MRA.
	d, _ := clk.pending()
	if clk.advance(d) != 1 {
		t.Fatal("the REQ's retransmission timer did not fire")
	}
	for deadline := time.Now().Add(10 * time.Second); mras.Load() == 0; {
		if time.Now().After(deadline) {
			t.Fatalf("no MRA answered the resent REQ (%d REQs sent)", reqs.Load())
		}
		time.Sleep(time.Millisecond)
	}
	// The MRA reaches the client and lengthens its wait.
	for deadline := time.Now().Add(10 * time.Second); ; {
		if d, ok := clk.pending(); ok && d > time.Minute {
			break
		}
		if time.Now().After(deadline) {
			d, ok := clk.pending()
			t.Fatalf("after the MRA the client's next deadline is %v away (armed %v), want above a minute", d, ok)
		}
		time.Sleep(time.Millisecond)
	}
	clk.advance(time.Second) // 200 times the REQ's timeout
	if ev, err := cch.GetEvent(ctxDone()); err == nil {
		t.Fatalf("%v (status %d) while the server decides; its MRA asked for about 69 s", ev.Type, ev.Status)
	}

	if err := srv.CreateQP(nil, caps); err != nil {
		t.Fatal(err)
	}
	if err := srv.Accept(nil); err != nil {
		t.Fatal(err)
	}
	for _, ch := range []*EventChannel{cch, sch} {
		if ev, err := ch.GetEvent(ctx); err != nil || ev.Type != EventEstablished {
			t.Fatalf("%v %v, want ESTABLISHED", ev, err)
		}
	}
	if n := reqs.Load(); n != 2 {
		t.Errorf("%d REQs sent, want 2: the first, and the one the MRA answered", n)
	}
}
