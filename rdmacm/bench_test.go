package rdmacm_test

import (
	"context"
	"net"
	"net/netip"
	"runtime"
	"sync"
	"testing"

	"github.com/rdmago/rdmago/rdmacm"
	"github.com/rdmago/rdmago/rxe"
)

// BenchmarkDialAccept measures connection setup over UDP loopback: REQ,
// REP and RTU between two devices (127.0.0.1 and 127.0.0.2), the QPs
// created and moved to RTS, then the connection closed. Dial names no
// local address, as net.Dial in BenchmarkTCPDialAccept, the anchor run
// alongside: address resolution asks the routing table for one (it finds
// 127.0.0.1).
func BenchmarkDialAccept(b *testing.B) {
	startBenchDevices(b)
	ln, err := rdmacm.Listen("127.0.0.2:7499", &rdmacm.Options{Backlog: 64})
	if err != nil {
		b.Skip("no loopback device:", err)
	}
	defer ln.Close()
	ctx := context.Background()
	done := make(chan error, 1)
	go func() {
		for {
			c, err := ln.Accept(ctx)
			if err != nil {
				done <- err
				return
			}
			go func() { c.WaitDisconnect(ctx); c.Close() }()
		}
	}()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		c, err := rdmacm.Dial(ctx, "127.0.0.2:7499", nil)
		if err != nil {
			b.Fatal(err)
		}
		c.Close()
	}
	b.StopTimer()
}

var benchDevices sync.Once

// startBenchDevices registers the two loopback devices the benchmarks
// connect, once: they outlive one run of a benchmark function, as closed
// connections keep them open for their timewait.
func startBenchDevices(b *testing.B) {
	benchDevices.Do(func() {
		for _, a := range []string{"127.0.0.1", "127.0.0.2"} {
			dev, err := rxe.NewDevice(rxe.Config{Addrs: []netip.Addr{netip.MustParseAddr(a)}, Port: 14791})
			if err != nil {
				b.Fatal(err)
			}
			rdmacm.RegisterDevice(dev)
		}
	})
}

// BenchmarkClosedConnMemory reports the heap a connection still holds
// once both sides have closed it (B/conn): the connection manager keeps
// each side in timewait for about 2 s (the QP's ACK timeout, as the IB CM
// does), to answer a late DREQ and to keep its communication ID from
// being reused, so a server that accepts and closes connections fast
// holds this much per connection of the last 2 s. The 300 connections
// measured must close well within those 2 s, or the first of them leave
// before the count.
func BenchmarkClosedConnMemory(b *testing.B) {
	startBenchDevices(b)
	const conns = 300
	ln, err := rdmacm.Listen("127.0.0.2:7498", &rdmacm.Options{Backlog: 64})
	if err != nil {
		b.Skip("no loopback device:", err)
	}
	defer ln.Close()
	ctx := context.Background()
	var closed sync.WaitGroup
	go func() {
		for {
			c, err := ln.Accept(ctx)
			if err != nil {
				return
			}
			go func() { c.WaitDisconnect(ctx); c.Close(); closed.Done() }()
		}
	}()
	opts := &rdmacm.Options{LocalAddr: netip.MustParseAddrPort("127.0.0.1:0")}
	dialClose := func(n int) {
		closed.Add(n)
		for range n {
			c, err := rdmacm.Dial(ctx, "127.0.0.2:7498", opts)
			if err != nil {
				b.Fatal(err)
			}
			c.Close()
		}
		closed.Wait()
	}
	dialClose(conns) // the agents, buffer pools and tables grown first
	var before, after runtime.MemStats
	for range b.N {
		runtime.GC()
		runtime.ReadMemStats(&before)
		dialClose(conns)
		runtime.GC()
		runtime.ReadMemStats(&after)
		b.ReportMetric((float64(after.HeapInuse)-float64(before.HeapInuse))/conns, "B/conn")
	}
}

// BenchmarkTCPDialAccept is the anchor: a TCP connection set up and closed
// over loopback.
func BenchmarkTCPDialAccept(b *testing.B) {
	ln, err := net.Listen("tcp", "127.0.0.2:0")
	if err != nil {
		b.Skip(err)
	}
	defer ln.Close()
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func() { c.Read(make([]byte, 1)); c.Close() }()
		}
	}()
	for i := 0; i < b.N; i++ {
		c, err := net.Dial("tcp", ln.Addr().String())
		if err != nil {
			b.Fatal(err)
		}
		c.Close()
	}
}
