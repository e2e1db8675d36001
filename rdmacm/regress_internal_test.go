package rdmacm

// Regression tests: each pins down a connection manager behaviour that once
// went wrong.

import (
	"context"
	"net/netip"
	"runtime"
	"sync"
	"testing"
	"time"

	"syscall"

	"github.com/rdmago/rdmago/rdmacm/mad"
	"github.com/rdmago/rdmago/rxe"
	"github.com/rdmago/rdmago/rxe/link"
	"github.com/rdmago/rdmago/verbs"
)

// gatedDriver wraps a device driver so that listing its addresses (what
// deviceFor does while bind and resolveAddr have dropped cm.mu) blocks
// while the gate is armed.
type gatedDriver struct {
	verbs.DeviceDriver
	mu      sync.Mutex
	armed   bool
	entered chan struct{}
	release chan struct{}
}

func (g *gatedDriver) Addrs() []netip.Addr {
	g.mu.Lock()
	armed := g.armed
	g.armed = false
	g.mu.Unlock()
	if armed {
		close(g.entered)
		<-g.release
	}
	return g.DeviceDriver.(verbs.AddrLister).Addrs()
}

type regressNet struct {
	cli, srv       netip.Addr
	cliDev, srvDev *verbs.Device
	net            *link.Network
}

// newRegressNet makes two rxe devices on an in-memory network; the server
// device's driver is wrapped in gate if gate is not nil.
func newRegressNet(t *testing.T, base byte, gate *gatedDriver) *regressNet {
	t.Helper()
	n := &regressNet{net: link.NewNetwork(uint64(base)),
		cli: netip.AddrFrom4([4]byte{10, 99, base, 1}), srv: netip.AddrFrom4([4]byte{10, 99, base, 2})}
	for i, a := range []netip.Addr{n.cli, n.srv} {
		l, err := n.net.Attach(a)
		if err != nil {
			t.Fatal(err)
		}
		dev, err := rxe.NewDevice(rxe.Config{Name: "regress_" + a.String(), Links: []link.Link{l}})
		if err != nil {
			t.Fatal(err)
		}
		if i == 1 && gate != nil {
			gate.DeviceDriver = verbs.DeviceDriverOf(dev)
			dev = verbs.NewDevice(dev.Name(), dev.GUID(), gate)
		}
		if i == 0 {
			n.cliDev = dev
		} else {
			n.srvDev = dev
		}
		t.Cleanup(RegisterDevice(dev))
	}
	return n
}

func agentOfDev(d *verbs.Device) *agent {
	cm.mu.Lock()
	defer cmUnlock()
	return cm.agents[d]
}

// waitAgentGone waits for a device's agent to stop.
func waitAgentGone(t *testing.T, d *verbs.Device, within time.Duration) bool {
	t.Helper()
	deadline := time.Now().Add(within)
	for time.Now().Before(deadline) {
		if agentOfDev(d) == nil {
			return true
		}
		time.Sleep(10 * time.Millisecond)
	}
	return false
}

// TestDestroyDuringBindFreesPortAndAgent: bind drops cm.mu to look the device up.
// An ID destroyed in that window comes back "bound": its agent reference
// and its port are never given back.
func TestDestroyDuringBindFreesPortAndAgent(t *testing.T) {
	g := &gatedDriver{armed: true, entered: make(chan struct{}), release: make(chan struct{})}
	n := newRegressNet(t, 1, g)
	id, err := CreateID(nil, nil, PSTCP)
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- id.BindAddr(netip.AddrPortFrom(n.srv, 7600)) }()
	<-g.entered
	id.Destroy() // cm.mu is free: bind is looking the device up
	close(g.release)
	<-done

	other, _ := CreateID(nil, nil, PSTCP)
	defer other.Destroy()
	if err := other.BindAddr(netip.AddrPortFrom(n.srv, 7600)); err != nil {
		t.Errorf("binding the port of a destroyed ID: %v", err)
	}
	other.Destroy()
	idMu.Lock()
	st := id.state
	idMu.Unlock()
	if st != stateDestroying {
		t.Errorf("destroyed ID is in state %d, want stateDestroying", st)
	}
	if !waitAgentGone(t, n.srvDev, 3*time.Second) {
		t.Errorf("the device's agent still runs after every ID was destroyed")
	}
}

// TestDestroyedSyncListenerFreesItsRequests: a request queued on a
// synchronous listener that nobody took with GetRequest outlives the
// listener: its ID keeps the device's agent (QP1, its goroutine) for ever.
// Linux's ucma destroys the IDs of unreported requests with the listener.
func TestDestroyedSyncListenerFreesItsRequests(t *testing.T) {
	n := newRegressNet(t, 3, nil)
	lis, _ := CreateID(nil, nil, PSTCP)
	if err := lis.BindAddr(netip.AddrPortFrom(n.srv, 7602)); err != nil {
		t.Fatal(err)
	}
	if err := lis.Listen(4); err != nil {
		t.Fatal(err)
	}
	cch := newChannel()
	cli, _ := CreateID(cch, nil, PSTCP)
	cli.ResolveAddr(netip.AddrPortFrom(n.cli, 0), netip.AddrPortFrom(n.srv, 7602), time.Second)
	cli.ResolveRoute(time.Second)
	cli.SetACKTimeout(8)
	cli.SetCMTimeouts(10, 1)
	cli.CreateQP(nil, &verbs.QPInitAttr{Cap: verbs.QPCap{MaxSendWR: 4, MaxRecvWR: 4, MaxSendSGE: 1, MaxRecvSGE: 1}})
	if err := cli.Connect(nil); err != nil {
		t.Fatal(err)
	}
	// Wait until the request is queued on the listener.
	for deadline := time.Now().Add(5 * time.Second); ; {
		cm.mu.Lock()
		p := ibcmOf(lis).pending
		cmUnlock()
		if p > 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("no request reached the listener")
		}
		time.Sleep(5 * time.Millisecond)
	}
	lis.Destroy()
	cli.Destroy()
	if !waitAgentGone(t, n.cliDev, 5*time.Second) {
		t.Fatal("client agent still runs")
	}
	if !waitAgentGone(t, n.srvDev, 5*time.Second) {
		a := agentOfDev(n.srvDev)
		cm.mu.Lock()
		refs, conns := a.refs, len(a.conns)
		cmUnlock()
		t.Fatalf("server agent still runs with %d reference(s) and %d connection(s) after every ID the user saw was destroyed", refs, conns)
	}
}

// TestREJOfOtherConnectionLeavesEstablishedAlone: a REJ is matched by
// its Remote Communication ID alone; its Local Communication ID is not
// checked against the connection's peer (Linux's cm_acquire_rejected_id
// looks the ID up by both), so a REJ from another, stale exchange ends an
// established connection.
func TestREJOfOtherConnectionLeavesEstablishedAlone(t *testing.T) {
	n := newRegressNet(t, 4, nil)
	sch, cch := newChannel(), newChannel()
	lis, _ := CreateID(sch, nil, PSTCP)
	defer lis.Destroy()
	lis.BindAddr(netip.AddrPortFrom(n.srv, 7603))
	lis.Listen(4)
	cli, _ := CreateID(cch, nil, PSTCP)
	defer cli.Destroy()
	cli.ResolveAddr(netip.AddrPortFrom(n.cli, 0), netip.AddrPortFrom(n.srv, 7603), time.Second)
	cli.ResolveRoute(time.Second)
	for range 2 { // ADDR_RESOLVED, ROUTE_RESOLVED
		cch.GetEvent(context.Background())
	}
	caps := &verbs.QPInitAttr{Cap: verbs.QPCap{MaxSendWR: 4, MaxRecvWR: 4, MaxSendSGE: 1, MaxRecvSGE: 1}}
	cli.CreateQP(nil, caps)
	cli.Connect(nil)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	ev, err := sch.GetEvent(ctx)
	if err != nil || ev.Type != EventConnectRequest {
		t.Fatalf("%v %v", ev, err)
	}
	srv := ev.ID
	defer srv.Destroy()
	srv.CreateQP(nil, caps)
	srv.Accept(nil)
	for _, ch := range []*EventChannel{sch, cch} {
		if ev, err := ch.GetEvent(ctx); err != nil || ev.Type != EventEstablished {
			t.Fatalf("%v %v", ev, err)
		}
	}
	k := ibcmOf(cli)
	cm.mu.Lock()
	a, local, remote := k.agent, k.c.localID, k.c.remoteID
	cmUnlock()
	cm.mu.Lock()
	a.handleREJ(&inMAD{src: n.srv}, &mad.REJ{LocalCommID: remote ^ 0x5a5a5a5a, RemoteCommID: local, MessageRejected: mad.MsgCodeREP, Reason: mad.RejectInvalidCommID})
	st := k.c.state
	cmUnlock()
	if st != cmEstablished {
		t.Fatalf("a REJ from communication ID %#x (the peer is %#x) moved the connection to state %d", remote^0x5a5a5a5a, remote, st)
	}
}

// The unreachable report carries whatever the network sent back: the
// agent reads it without running past its end, and ignores what is not
// one of its own requests.
func FuzzAgentUnreachable(f *testing.F) {
	req := make([]byte, 20+256)
	req[20+1] = mad.MgmtClassCM
	req[20+17] = byte(mad.AttrREQ)
	f.Add(req)
	f.Add([]byte{1, 2, 3})
	a := &agent{conns: map[uint32]*cmID{}}
	f.Fuzz(func(t *testing.T, pkt []byte) {
		a.unreachable(netip.MustParseAddr("192.0.2.1"), syscall.ECONNREFUSED, pkt)
	})
}

// ibcmOf is the built-in IB CM's ID under id. Called without cm.mu.
func ibcmOf(id *ID) *cmID {
	return id.backend().(*cmID)
}

// TestAgentServesMADsOneGoroutineAtATime: on a device that tells the
// connection manager of QP1's receives (QP1Notifier, as rxe does), the
// agent runs no receive loop and handles MADs on the goroutines that call
// serve, one at a time: connections made while other goroutines call
// serve without pause all complete, and the race detector sees no two
// goroutines handle MADs at once.
func TestAgentServesMADsOneGoroutineAtATime(t *testing.T) {
	n := newRegressNet(t, 61, nil)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	ln, err := Listen(netip.AddrPortFrom(n.srv, 7481).String(), &Options{Backlog: 16})
	if err != nil {
		t.Fatal(err)
	}
	var conns sync.WaitGroup
	accepting := make(chan struct{})
	defer func() {
		// The listener goes first, so that no connection is added
		// while the wait for them runs.
		ln.Close()
		<-accepting
		conns.Wait()
	}()
	go func() {
		defer close(accepting)
		for {
			c, err := ln.Accept(ctx)
			if err != nil {
				return
			}
			conns.Add(1)
			go func() {
				defer conns.Done()
				c.WaitDisconnect(ctx)
				c.Close()
			}()
		}
	}()
	dial := func() {
		t.Helper()
		c, err := Dial(ctx, netip.AddrPortFrom(n.srv, 7481).String(), &Options{LocalAddr: netip.AddrPortFrom(n.cli, 0)})
		if err != nil {
			t.Fatal(err)
		}
		c.Close()
	}
	dial() // starts both agents
	agents := []*agent{agentOfDev(n.cliDev), agentOfDev(n.srvDev)}
	for _, a := range agents {
		if a == nil || !a.inline {
			t.Fatal("the agent of an rxe device runs a receive loop")
		}
	}
	stop := make(chan struct{})
	var callers sync.WaitGroup
	for _, a := range agents {
		for range 2 {
			callers.Add(1)
			go func() {
				defer callers.Done()
				for {
					select {
					case <-stop:
						return
					default:
						a.serve()
						runtime.Gosched()
					}
				}
			}()
		}
	}
	for range 40 {
		dial()
	}
	close(stop)
	callers.Wait()
}
