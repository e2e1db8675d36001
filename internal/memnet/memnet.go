// Package memnet is what the tests of the connection manager's users
// share: pairs of software RoCE devices on an in-memory network,
// registered with the connection manager, and a buffer a tool writes to
// while a test reads it.
package memnet

import (
	"bytes"
	"net/netip"
	"runtime"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/rdmago/rdmago/rdmacm"
	"github.com/rdmago/rdmago/rxe"
	"github.com/rdmago/rdmago/rxe/link"
)

// subnet numbers the networks of a test binary, so that each gets
// addresses of its own (the connection manager's device list is global).
var subnet atomic.Uint32

// Pair makes a server and a client device on a new in-memory network over
// IPv4 (10.<net>.<n>.2 and .1) or IPv6 (fd<net>:<n>::2 and ::1),
// registered with the connection manager until the test ends, and returns
// their addresses and the network (to inject faults). net tells one
// package's addresses from another's.
func Pair(t testing.TB, net byte, v6 bool) (srv, cli netip.Addr, network *link.Network) {
	t.Helper()
	n := byte(subnet.Add(1))
	network = link.NewNetwork(uint64(n))
	if v6 {
		srv = netip.AddrFrom16([16]byte{0: 0xfd, 1: net, 2: n, 15: 2})
		cli = netip.AddrFrom16([16]byte{0: 0xfd, 1: net, 2: n, 15: 1})
	} else {
		srv = netip.AddrFrom4([4]byte{10, net, n, 2})
		cli = netip.AddrFrom4([4]byte{10, net, n, 1})
	}
	for _, a := range []netip.Addr{srv, cli} {
		l, err := network.Attach(a)
		if err != nil {
			t.Fatal(err)
		}
		dev, err := rxe.NewDevice(rxe.Config{Name: "mem_" + a.String(), Links: []link.Link{l}})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(rdmacm.RegisterDevice(dev))
	}
	return srv, cli, network
}

// Buffer is a bytes.Buffer safe for one writer and concurrent readers.
type Buffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *Buffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *Buffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

// NoLeaks fails the test if it leaves goroutines behind: at its end it
// waits up to 15 s (the connection manager's timewait) for the count of
// goroutines to fall back to what it was when NoLeaks was called.
func NoLeaks(t *testing.T) {
	t.Helper()
	before := runtime.NumGoroutine()
	t.Cleanup(func() {
		deadline := time.Now().Add(15 * time.Second)
		for runtime.NumGoroutine() > before && time.Now().Before(deadline) {
			time.Sleep(20 * time.Millisecond)
		}
		if n := runtime.NumGoroutine(); n > before {
			buf := make([]byte, 1<<20)
			buf = buf[:runtime.Stack(buf, true)]
			t.Errorf("%d goroutines before the test, %d after:\n%s", before, n, buf)
		}
	})
}
