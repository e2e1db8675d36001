package rdmacm

import (
	"context"
	"encoding/binary"
	"net/netip"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/rdmago/rdmago/rxe"
	"github.com/rdmago/rdmago/rxe/link"
)

// netOfTwo registers a client and a server device on an in-memory network
// of their own, filtered by filter, until the test ends.
func netOfTwo(t *testing.T, seed uint64, cli, srv netip.Addr, filter func(p []byte, from, to netip.Addr) bool) {
	t.Helper()
	n := link.NewNetwork(seed)
	n.SetFaults(link.Faults{Filter: filter})
	for _, a := range []netip.Addr{cli, srv} {
		l, err := n.Attach(a)
		if err != nil {
			t.Fatal(err)
		}
		dev, err := rxe.NewDevice(rxe.Config{Links: []link.Link{l}})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(RegisterDevice(dev))
	}
}

// TestNoCMLockIsHeldWhileAMADIsPosted: a device whose send of a MAD
// blocks (its link does) holds up that connection only. While one
// client's REQ is stuck in QP1's post, a client of another device
// connects: no lock of the connection manager was held across the post.
func TestNoCMLockIsHeldWhileAMADIsPosted(t *testing.T) {
	stuckCli, stuckSrv := netip.MustParseAddr("10.61.0.1"), netip.MustParseAddr("10.61.0.2")
	freeCli, freeSrv := netip.MustParseAddr("10.62.0.1"), netip.MustParseAddr("10.62.0.2")
	var blocking atomic.Bool
	stuck := make(chan struct{})
	release := make(chan struct{})
	var once sync.Once
	netOfTwo(t, 61, stuckCli, stuckSrv, func(p []byte, from, to netip.Addr) bool {
		// The client's MADs (to QP1) wait until released.
		if blocking.Load() && from == stuckCli && len(p) >= 8 && binary.BigEndian.Uint32(p[4:8])&0xffffff == 1 {
			once.Do(func() { close(stuck) })
			<-release
		}
		return true
	})
	netOfTwo(t, 62, freeCli, freeSrv, nil)
	var released sync.Once
	defer released.Do(func() { close(release) })

	accept := func(l *Listener) {
		go func() {
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			if c, err := l.Accept(ctx); err == nil {
				t.Cleanup(func() { c.Close() })
			}
		}()
	}
	for _, a := range []netip.Addr{stuckSrv, freeSrv} {
		l, err := Listen(netip.AddrPortFrom(a, 7471).String(), nil)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { l.Close() })
		accept(l)
	}

	blocking.Store(true)
	stuckDone := make(chan error, 1)
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		c, err := Dial(ctx, netip.AddrPortFrom(stuckSrv, 7471).String(), &Options{LocalAddr: netip.AddrPortFrom(stuckCli, 0)})
		if err == nil {
			c.Close()
		}
		stuckDone <- err
	}()
	select {
	case <-stuck:
	case err := <-stuckDone:
		t.Fatalf("the first client's Dial ended before its MAD was held: %v", err)
	case <-time.After(20 * time.Second):
		t.Fatal("the first client's MAD never reached its link")
	}

	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
	defer cancel()
	c, err := Dial(ctx, netip.AddrPortFrom(freeSrv, 7471).String(), &Options{LocalAddr: netip.AddrPortFrom(freeCli, 0)})
	if err != nil {
		t.Fatalf("a client of another device could not connect while a MAD was being posted: %v", err)
	}
	c.Close()

	released.Do(func() { close(release) })
	if err := <-stuckDone; err != nil {
		t.Fatalf("the held-up client, once its link moved: %v", err)
	}
}
