package rdmacm

import (
	"context"
	"net/netip"
	"testing"
	"time"

	"github.com/rdmago/rdmago/rxe"
	"github.com/rdmago/rdmago/rxe/link"
	"github.com/rdmago/rdmago/verbs"
)

// TestAgentStopsWithItsLastID: a device's connection manager (QP1 and its
// receive loop) runs while IDs use the device, stays through a destroyed
// connection's timewait, and stops after that.
func TestAgentStopsWithItsLastID(t *testing.T) {
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
		defer cm.mu.Unlock()
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
