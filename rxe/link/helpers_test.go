package link_test

import (
	"bytes"
	"errors"
	"math/rand/v2"
	"net"
	"net/netip"
	"runtime"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/rdmago/rdmago/rxe/link"
	"github.com/rdmago/rdmago/rxe/wire"
)

// Loopback addresses the tests put links on.
var (
	addr1 = netip.MustParseAddr("127.0.0.1")
	addr2 = netip.MustParseAddr("127.0.0.2")
	addr3 = netip.MustParseAddr("127.0.0.3")
)

// packetShapes is a mix of opcodes and payload sizes up to a 4096-byte MTU.
var packetShapes = []struct {
	op      wire.OpCode
	payload int
}{
	{wire.RCSendOnly, 0},
	{wire.RCSendFirst, 4096},
	{wire.RCSendMiddle, 4096},
	{wire.RCSendLastWithImmediate, 13},
	{wire.RCWriteFirst, 1024},
	{wire.RCWriteOnlyWithImmediate, 1},
	{wire.RCReadRequest, 0},
	{wire.RCReadResponseOnly, 255},
	{wire.RCAcknowledge, 0},
	{wire.RCCompareSwap, 0},
	{wire.RCAtomicAcknowledge, 0},
	{wire.UCWriteLast, 2048},
	{wire.UDSendOnly, 256},
	{wire.UDSendOnlyWithImmediate, 4096},
	{wire.RCSendOnlyWithInvalidate, 3},
}

// newPacket builds a packet of opcode op with n payload bytes drawn from
// rng and a PSN of psn, its ICRC left zero.
func newPacket(t testing.TB, rng *rand.Rand, op wire.OpCode, n int, psn uint32) []byte {
	t.Helper()
	h := &wire.Headers{
		BTH:       wire.BTHFields{OpCode: op, PKey: wire.DefaultPKey, DestQP: 0x11, AckReq: true, PSN: wire.PSN(psn & 0xffffff)},
		DETH:      wire.DETHFields{QKey: 0x1234, SrcQP: 0x22},
		RETH:      wire.RETHFields{VA: 0x1000, RKey: 0xabc, DMALen: uint32(n)},
		AtomicETH: wire.AtomicETHFields{VA: 0x2000, RKey: 0xdef, SwapAdd: 1, Compare: 2},
		Imm:       0xfeed,
		IETHRKey:  0x55,
		Syndrome:  wire.ACKSyndrome(31),
		MSN:       psn & 0xffffff,
	}
	payload := make([]byte, n)
	for i := range payload {
		payload[i] = byte(rng.Uint32())
	}
	b, err := wire.AppendPacket(nil, h, payload)
	if err != nil {
		t.Fatalf("AppendPacket(%v, %d bytes): %v", op, n, err)
	}
	return b
}

// mixedPackets returns count packets to dst cycling through packetShapes,
// with PSNs from 0.
func mixedPackets(t testing.TB, seed uint64, count int, dst netip.Addr) []link.Packet {
	t.Helper()
	rng := rand.New(rand.NewPCG(seed, 0))
	pkts := make([]link.Packet, count)
	for i := range pkts {
		s := packetShapes[i%len(packetShapes)]
		pkts[i] = link.Packet{Buf: newPacket(t, rng, s.op, s.payload, uint32(i)), Addr: dst}
	}
	return pkts
}

// recvBuffers returns count packets with empty buffers of capacity size.
func recvBuffers(count, size int) []link.Packet {
	pkts := make([]link.Packet, count)
	for i := range pkts {
		pkts[i].Buf = make([]byte, 0, size)
	}
	return pkts
}

// recvAll receives packets from l until it has want of them, and fails the
// test if that takes longer than timeout (then it closes l to unblock Recv).
// It returns copies of the packets.
func recvAll(t testing.TB, l link.Link, want int, timeout time.Duration) []link.Packet {
	t.Helper()
	watchdog := time.AfterFunc(timeout, func() { l.Close() })
	defer watchdog.Stop()
	bufs := recvBuffers(16, l.MaxPacket())
	var got []link.Packet
	for len(got) < want {
		n, err := l.Recv(bufs)
		if err != nil {
			t.Fatalf("Recv after %d of %d packets: %v", len(got), want, err)
		}
		for _, p := range bufs[:n] {
			p.Buf = bytes.Clone(p.Buf)
			got = append(got, p)
		}
	}
	return got
}

// expectNothing checks that l receives nothing within d.
func expectNothing(t testing.TB, l link.Link, d time.Duration) {
	t.Helper()
	done := make(chan struct{})
	var n int
	var err error
	go func() {
		defer close(done)
		n, err = l.Recv(recvBuffers(4, l.MaxPacket()))
	}()
	select {
	case <-done:
		t.Fatalf("Recv returned %d packets, error %v; want nothing", n, err)
	case <-time.After(d):
	}
	l.Close()
	<-done
}

// checkSamePackets checks that got holds the packets of want, in order, byte
// for byte, from addr from.
func checkSamePackets(t testing.TB, got, want []link.Packet, from netip.Addr) {
	t.Helper()
	if len(got) != len(want) {
		t.Fatalf("got %d packets, want %d", len(got), len(want))
	}
	for i := range want {
		if !bytes.Equal(got[i].Buf, want[i].Buf) {
			t.Fatalf("packet %d: got %d bytes %x..., want %d bytes %x...", i, len(got[i].Buf), head(got[i].Buf), len(want[i].Buf), head(want[i].Buf))
		}
		if got[i].Addr != from {
			t.Errorf("packet %d: from %v, want %v", i, got[i].Addr, from)
		}
		if _, err := wire.Parse(got[i].Buf); err != nil {
			t.Errorf("packet %d: %v", i, err)
		}
	}
}

func head(b []byte) []byte { return b[:min(len(b), 16)] }

// checkNoLeaks fails the test if, once it and its cleanups are over, more
// goroutines run than when it started.
func checkNoLeaks(t testing.TB) {
	t.Helper()
	before := runtime.NumGoroutine()
	t.Cleanup(func() {
		deadline := time.Now().Add(5 * time.Second)
		for runtime.NumGoroutine() > before {
			if time.Now().After(deadline) {
				buf := make([]byte, 1<<16)
				t.Errorf("%d goroutines left running, %d before the test:\n%s", runtime.NumGoroutine(), before, buf[:runtime.Stack(buf, true)])
				return
			}
			time.Sleep(10 * time.Millisecond)
		}
	})
}

// listenPair returns UDP links on a and b sharing one free port, closed when
// the test ends.
func listenPair(t testing.TB, a, b netip.Addr, opt link.UDPOptions) (*link.UDP, *link.UDP) {
	t.Helper()
	for range 20 {
		la, err := link.ListenUDP(netip.AddrPortFrom(a, 0), opt)
		if err != nil {
			t.Fatal(err)
		}
		lb, err := link.ListenUDP(netip.AddrPortFrom(b, la.Port()), opt)
		if errors.Is(err, syscall.EADDRNOTAVAIL) {
			la.Close()
			t.Skipf("%v is not configured (on macOS: sudo ifconfig lo0 alias %v): %v", b, b, err)
		}
		if errors.Is(err, syscall.EADDRINUSE) {
			la.Close()
			continue // another test took the port on b; try another
		}
		if err != nil {
			la.Close()
			t.Fatal(err)
		}
		t.Cleanup(func() { la.Close(); lb.Close() })
		return la, lb
	}
	t.Fatalf("found no port free on both %v and %v", a, b)
	return nil, nil
}

// listenOne returns a UDP link on a free port of a, closed when the test
// ends, or skips the test if a is not an address of this host.
func listenOne(t testing.TB, a netip.Addr, opt link.UDPOptions) *link.UDP {
	t.Helper()
	l, err := link.ListenUDP(netip.AddrPortFrom(a, 0), opt)
	if errors.Is(err, syscall.EADDRNOTAVAIL) || err != nil && strings.Contains(err.Error(), "address family not supported") {
		t.Skipf("%v unavailable: %v", a, err)
	}
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.Close() })
	return l
}

// plainConn returns a plain UDP socket on a, closed when the test ends.
func plainConn(t testing.TB, a netip.Addr) *net.UDPConn {
	t.Helper()
	c, err := net.ListenUDP("udp", net.UDPAddrFromAddrPort(netip.AddrPortFrom(a, 0)))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

// newRand returns a deterministic generator.
func newRand(seed uint64) *rand.Rand { return rand.New(rand.NewPCG(seed, seed)) }

// checkCloseUnblocksRecv checks the Close contract of a Link: a blocked
// Recv returns net.ErrClosed, a second Close is harmless, and Send and Recv
// afterwards fail with net.ErrClosed.
func checkCloseUnblocksRecv(t *testing.T, l link.Link, pkts []link.Packet) {
	t.Helper()
	errc := make(chan error, 1)
	go func() {
		_, err := l.Recv(recvBuffers(4, l.MaxPacket()))
		errc <- err
	}()
	time.Sleep(20 * time.Millisecond) // let Recv block (it returns the same if not)
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-errc:
		if !errors.Is(err, net.ErrClosed) {
			t.Errorf("Recv after Close: %v, want net.ErrClosed", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("Recv still blocked 10s after Close")
	}
	if err := l.Close(); err != nil {
		t.Errorf("second Close: %v", err)
	}
	if err := l.Send(pkts); !errors.Is(err, net.ErrClosed) {
		t.Errorf("Send after Close: %v, want net.ErrClosed", err)
	}
	if _, err := l.Recv(recvBuffers(1, 100)); !errors.Is(err, net.ErrClosed) {
		t.Errorf("Recv after Close: %v, want net.ErrClosed", err)
	}
}
