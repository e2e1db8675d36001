package rdmacm

import (
	"context"
	"encoding/binary"
	"net/netip"
	"runtime"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/rdmago/rdmago/internal/linktest"
	"github.com/rdmago/rdmago/rdmacm/mad"
	"github.com/rdmago/rdmago/rxe"
	"github.com/rdmago/rdmago/rxe/link"
	"github.com/rdmago/rdmago/verbs"
)

// TestAgentStopsWithItsLastID: a device's connection manager (QP1 and its
// receive loop) runs while IDs use the device, stays through a destroyed
// connection's timewait (on the CM's clock), and stops after that.
func TestAgentStopsWithItsLastID(t *testing.T) {
	clk := useFakeClock(t)
	n := link.NewNetwork(1)
	cliAddr, srvAddr := netip.MustParseAddr("10.7.0.1"), netip.MustParseAddr("10.7.0.2")
	devs := map[netip.Addr]*verbs.Device{}
	for _, a := range []netip.Addr{cliAddr, srvAddr} {
		l, _ := n.Attach(a)
		dev, err := rxe.NewDevice(rxe.Config{Links: []link.Link{l}})
		if err != nil {
			t.Fatal(err)
		}
		devs[a] = dev
		defer RegisterDevice(dev)()
	}
	agentOf := func(a netip.Addr) *agent {
		cm.mu.Lock()
		defer cmUnlock()
		return cm.agents[devs[a]]
	}
	caps := &verbs.QPInitAttr{Cap: verbs.QPCap{MaxSendWR: 4, MaxRecvWR: 4, MaxSendSGE: 1, MaxRecvSGE: 1}}
	lis, _ := CreateID(nil, nil, PSTCP)
	lis.BindAddr(netip.AddrPortFrom(srvAddr, 7491))
	lis.Listen(1)
	lis.SetEndpointQP(nil, caps)
	srvCh := make(chan *ID, 1)
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		id, err := lis.GetRequest(ctx)
		if err != nil {
			t.Error(err)
			srvCh <- nil
			return
		}
		if err := id.Accept(nil); err != nil {
			t.Error(err)
		}
		srvCh <- id
	}()
	cli, _ := CreateID(nil, nil, PSTCP)
	cli.SetACKTimeout(8)
	if err := cli.ResolveAddr(netip.AddrPortFrom(cliAddr, 0), netip.AddrPortFrom(srvAddr, 7491), time.Second); err != nil {
		t.Fatal(err)
	}
	cli.ResolveRoute(time.Second)
	cli.CreateQP(nil, caps)
	if err := cli.Connect(nil); err != nil {
		t.Fatal(err)
	}
	srv := <-srvCh
	if srv == nil {
		t.FailNow()
	}
	ca, sa := agentOf(cliAddr), agentOf(srvAddr)
	if ca == nil || sa == nil {
		t.Fatal("no agents while connected")
	}
	cli.Destroy() // sends the DREQ; the connection lingers
	srv.Destroy() // answers it
	lis.Destroy()
	// Both sides enter timewait: the client on the DREP, the server on
	// the DREQ. Their agents stay until it ends.
	for deadline := time.Now().Add(10 * time.Second); clk.armed() != 2 || !timewaiting(ca) || !timewaiting(sa); {
		if time.Now().After(deadline) {
			t.Fatalf("%d timers armed; client in timewait %v, server %v", clk.armed(), timewaiting(ca), timewaiting(sa))
		}
		runtime.Gosched()
	}
	d, _ := clk.pending()
	clk.advance(d - time.Microsecond)
	if agentOf(cliAddr) == nil || agentOf(srvAddr) == nil {
		t.Fatal("an agent stopped before its connection's timewait ended")
	}
	clk.advance(time.Hour)
	for _, a := range []*agent{ca, sa} {
		select {
		case <-a.done:
		case <-time.After(10 * time.Second):
			t.Fatal("an agent's receive loop still runs after its IDs are gone")
		}
	}
	if agentOf(cliAddr) != nil || agentOf(srvAddr) != nil {
		t.Fatal("agents still registered")
	}
}

// TestAgentSendsMADsBeyondItsSendSlotsInOrder: while the link has no
// room, QP1 sends nothing and its send slots fill; the MADs beyond them
// wait in the agent's queue, and a goroutine waits for send completions
// (reapLoop). Once the link has room again, every MAD leaves, in the order
// given, and that goroutine ends.
func TestAgentSendsMADsBeyondItsSendSlotsInOrder(t *testing.T) {
	n := link.NewNetwork(3)
	var mu sync.Mutex
	var tids []uint64
	n.SetFaults(link.Faults{Filter: func(p []byte, from, to netip.Addr) bool {
		const tidAt = 12 + 8 + 8 // BTH, DETH, then the MAD header's TransactionID
		if len(p) >= tidAt+8 && binary.BigEndian.Uint32(p[4:8])&0xffffff == 1 {
			mu.Lock()
			tids = append(tids, binary.BigEndian.Uint64(p[tidAt:]))
			mu.Unlock()
		}
		return true
	}})
	inner, err := n.Attach(netip.MustParseAddr("10.8.0.1"))
	if err != nil {
		t.Fatal(err)
	}
	l := linktest.NewShut(inner)
	l.Shut()
	dev, err := rxe.NewDevice(rxe.Config{Links: []link.Link{l}})
	if err != nil {
		t.Fatal(err)
	}
	defer RegisterDevice(dev)()

	const total = 3*agentSends + 5
	dst := netip.MustParseAddr("10.8.0.2") // nobody there: the network drops them after the filter
	cm.mu.Lock()
	a, err := agentFor(dev)
	if err != nil {
		cmUnlock()
		t.Fatal(err)
	}
	for i := range total {
		a.send(marshal(uint64(i+1), &mad.DREQ{LocalCommID: uint32(i + 1), RemoteCommID: 7}), dst, 0)
	}
	cmUnlock() // posts them, after letting go of cm.mu
	cm.mu.Lock()
	queued, reaping := len(a.sendQueue), a.reaping
	cm.mu.Unlock()
	// The first MAD went into the link's queue, which QP1 then saw full:
	// it holds the next agentSends, and the agent the rest.
	if queued != total-agentSends-1 || !reaping {
		t.Fatalf("with no room on the link: %d MADs queued (want %d), reapLoop running %v", queued, total-agentSends-1, reaping)
	}

	l.Open()
	deadline := time.Now().Add(10 * time.Second)
	for {
		cm.mu.Lock()
		a.reap() // completions stay in the CQ until a post or flush needs them
		done := a.finished == a.issued && len(a.sendQueue) == 0 && !a.reaping
		finished, issued := a.finished, a.issued
		cmUnlock()
		if done {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d of %d MADs sent after the link had room again", finished, issued)
		}
		time.Sleep(time.Millisecond)
	}
	mu.Lock()
	got := slices.Clone(tids)
	mu.Unlock()
	if len(got) != total {
		t.Fatalf("%d MADs reached the network, want %d", len(got), total)
	}
	for i, tid := range got {
		if tid != uint64(i+1) {
			t.Fatalf("MAD %d on the network has transaction ID %d: out of order", i, tid)
		}
	}
	cm.mu.Lock()
	a.release()
	cmUnlock()
	select {
	case <-a.done:
	case <-time.After(10 * time.Second):
		t.Fatal("the agent did not stop")
	}
}

// timewaiting reports whether one of a's connections is in timewait.
func timewaiting(a *agent) bool {
	cm.mu.Lock()
	defer cm.mu.Unlock()
	for _, id := range a.conns {
		if id.c.state == cmTimewait {
			return true
		}
	}
	return false
}

// TestOneAtATimeDoesTheJobAgainForWhoAskedMeanwhile: of the goroutines
// asking for the job (serve's MADs), one does it; one that asks meanwhile
// does not, and the first does the job again before it stops; stop
// waits for it, and nobody does the job after.
func TestOneAtATimeDoesTheJobAgainForWhoAskedMeanwhile(t *testing.T) {
	var turn oneAtATime
	if !turn.enter() {
		t.Fatal("nobody at the job, and the first to ask may not do it")
	}
	if turn.enter() {
		t.Fatal("a second goroutine does the job at once")
	}
	if !turn.leave(false) {
		t.Fatal("the job was asked for meanwhile, and the one at it stops without doing it again")
	}
	if turn.leave(false) {
		t.Fatal("the job is done again with nobody asking")
	}
	if !turn.enter() {
		t.Fatal("the job is free again, and the next to ask may not do it")
	}
	turn.enter() // asked meanwhile, but quit ends it
	if turn.leave(true) {
		t.Fatal("the job goes on after quit")
	}
	if !turn.enter() {
		t.Fatal("the job is free after quit, and the next to ask may not do it")
	}
	stopped := make(chan struct{})
	go func() {
		turn.stop()
		close(stopped)
	}()
	select {
	case <-stopped:
		t.Fatal("stop returned while a goroutine was at the job")
	case <-time.After(20 * time.Millisecond):
	}
	turn.enter() // asked meanwhile: the stop wins
	if turn.leave(false) {
		t.Fatal("the job goes on after stop")
	}
	select {
	case <-stopped:
	case <-time.After(5 * time.Second):
		t.Fatal("stop still waits after the goroutine at the job left")
	}
	if turn.enter() {
		t.Fatal("the job is done after stop")
	}
}
