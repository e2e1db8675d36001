package pingpong

import (
	"bytes"
	"context"
	"io"
	"net"
	"net/netip"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/rdmago/rdmago/rxe"
	"github.com/rdmago/rdmago/verbs"
)

// freeUDPPort returns a UDP port that was free on 127.0.0.1 a moment ago,
// for the two devices of a test to share.
func freeUDPPort(t *testing.T) uint16 {
	t.Helper()
	c, err := net.ListenPacket("udp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	return uint16(c.LocalAddr().(*net.UDPAddr).Port)
}

// loopbackDevice makes a software RoCE device on addr; netdevMTU 0 means
// loopback's 65536, which gives an active MTU of 4096.
func loopbackDevice(t *testing.T, addr string, port uint16, netdevMTU int) *verbs.Device {
	t.Helper()
	d, err := rxe.NewDevice(rxe.Config{Addrs: []netip.Addr{netip.MustParseAddr(addr)}, Port: port, NetdevMTU: netdevMTU})
	if err != nil {
		t.Fatal(err)
	}
	return d
}

type sideResult struct {
	out string
	res Result
	err error
}

// runPair runs srv and cli against each other on two loopback devices
// (127.0.0.1 and 127.0.0.2), the server accepting on a fresh TCP port.
// When one side fails the other is cancelled.
func runPair(t *testing.T, srv, cli Options, netdevMTU int) (s, c sideResult) {
	t.Helper()
	port := freeUDPPort(t)
	srv.Dev = loopbackDevice(t, "127.0.0.1", port, netdevMTU)
	cli.Dev = loopbackDevice(t, "127.0.0.2", port, netdevMTU)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv.Server, srv.Listener = "", ln
	cli.Server, cli.Port = "127.0.0.1", ln.Addr().(*net.TCPAddr).Port
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	var wg sync.WaitGroup
	run := func(r *sideResult, o Options) {
		defer wg.Done()
		var out bytes.Buffer
		r.res, r.err = Run(ctx, &out, o)
		r.out = out.String()
		if r.err != nil {
			cancel()
		}
	}
	wg.Add(2)
	go run(&s, srv)
	go run(&c, cli)
	wg.Wait()
	return s, c
}

func TestPingPongBetweenTwoRdmagoSides(t *testing.T) {
	tests := []struct {
		name              string
		transport         Transport
		size, iters       int
		numQP, rxDepth    int // 0: the default
		netdevMTU         int // 0: loopback (active MTU 4096)
		srvEvents, cliEvt bool
	}{
		{name: "rc sends 1 byte, server sleeping on events", transport: RC, size: 1, iters: 300, srvEvents: true},
		{name: "rc sends 64 KiB in 16 packets, client on events", transport: RC, size: 65536, iters: 100, cliEvt: true},
		{name: "uc sends 1 byte, server on events", transport: UC, size: 1, iters: 300, srvEvents: true},
		{name: "uc sends 4096 bytes as four 1024-byte packets", transport: UC, size: 4096, iters: 300, netdevMTU: 1500},
		{name: "uc sends 64 KiB, client on events", transport: UC, size: 65536, iters: 100, cliEvt: true},
		{name: "ud sends 1 byte, server on events", transport: UD, size: 1, iters: 300, srvEvents: true},
		{name: "ud sends the 1024-byte port MTU of a 1500-byte netdev", transport: UD, size: 1024, iters: 300, netdevMTU: 1500},
		{name: "ud sends the 4096-byte port MTU of loopback, client on events", transport: UD, size: 4096, iters: 300, cliEvt: true},
		{name: "ud inline-sized message under the 400-byte inline limit", transport: UD, size: 400, iters: 300},
		{name: "srq spreads 1 byte over 16 QPs, server on events", transport: SRQ, size: 1, iters: 1000, srvEvents: true},
		{name: "srq sends 4096 bytes over 16 QPs", transport: SRQ, size: 4096, iters: 500},
		{name: "srq sends 64 KiB over 4 QPs, client on events", transport: SRQ, size: 65536, iters: 100, numQP: 4, cliEvt: true},
		{name: "srq with one QP", transport: SRQ, size: 1024, iters: 300, numQP: 1},
		{name: "srq replenishes the SRQ at every receive when rx depth equals the QPs", transport: SRQ, size: 100, iters: 400, numQP: 8, rxDepth: 8},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			o := DefaultsFor(tc.transport)
			o.Size, o.Iters, o.GIDIndex, o.Check = tc.size, tc.iters, 0, true
			if tc.numQP > 0 {
				o.NumQP = tc.numQP
			}
			if tc.rxDepth > 0 {
				o.RxDepth = tc.rxDepth
			}
			srv, cli := o, o
			srv.Events, cli.Events = tc.srvEvents, tc.cliEvt
			s, c := runPair(t, srv, cli, tc.netdevMTU)
			if s.err != nil || c.err != nil {
				t.Fatalf("server: %v\n%s\nclient: %v\n%s", s.err, s.out, c.err, c.out)
			}
			want := int64(tc.size) * int64(tc.iters) * 2
			nqp := 1
			if tc.transport == SRQ {
				nqp = o.NumQP
			}
			for _, side := range []sideResult{s, c} {
				if side.res.Bytes != want {
					t.Errorf("result %d bytes, want %d", side.res.Bytes, want)
				}
				if n := strings.Count(side.out, "  local address:  LID 0x0000, QPN 0x"); n != nqp {
					t.Errorf("%d local address lines, want %d:\n%s", n, nqp, side.out)
				}
				if n := strings.Count(side.out, "  remote address: LID 0x0000, QPN 0x"); n != nqp {
					t.Errorf("%d remote address lines, want %d:\n%s", n, nqp, side.out)
				}
				if tc.transport == UD && !strings.Contains(side.out, ": GID ::ffff:127.0.0.") {
					t.Errorf("ud local address line unlike ibv_ud_pingpong's:\n%s", side.out)
				}
				if !strings.Contains(side.out, " bytes in ") || !strings.Contains(side.out, " iters in ") {
					t.Errorf("no result lines:\n%s", side.out)
				}
			}
		})
	}
}

func TestUDSizeAboveTheActiveMTUFails(t *testing.T) {
	o := DefaultsFor(UD)
	o.Size, o.GIDIndex = 1025, 0
	o.Dev = loopbackDevice(t, "127.0.0.1", freeUDPPort(t), 1500)
	_, err := Run(context.Background(), &bytes.Buffer{}, o)
	if err == nil || !strings.Contains(err.Error(), "requested size 1025 larger than port MTU (1024)") {
		t.Fatalf("got %v", err)
	}
}

func TestSRQSidesWithDifferentQPCountsFail(t *testing.T) {
	srv, cli := DefaultsFor(SRQ), DefaultsFor(SRQ)
	srv.GIDIndex, cli.GIDIndex = 0, 0
	srv.NumQP, cli.NumQP = 4, 2
	s, c := runPair(t, srv, cli, 0)
	if s.err == nil || !strings.Contains(s.err.Error(), "fewer QPs") {
		t.Errorf("server: %v", s.err)
	}
	if c.err == nil {
		t.Errorf("client succeeded")
	}
	srv.NumQP, cli.NumQP = 2, 4
	s, c = runPair(t, srv, cli, 0)
	if s.err == nil || !strings.Contains(s.err.Error(), "more QPs") {
		t.Errorf("server: %v", s.err)
	}
	if c.err == nil {
		t.Errorf("client succeeded")
	}
}

func TestCheckRejectsAPeerThatDoesNotMarkItsPages(t *testing.T) {
	for _, tr := range []Transport{RC, UC, UD} {
		t.Run(tr.String(), func(t *testing.T) {
			srv, cli := DefaultsFor(tr), DefaultsFor(tr)
			srv.GIDIndex, cli.GIDIndex, srv.Size, cli.Size = 0, 0, 1024, 1024
			srv.Check = true // the client sends 0x7b everywhere
			s, _ := runPair(t, srv, cli, 0)
			if s.err == nil || !strings.Contains(s.err.Error(), "invalid data in page 0: byte 0 is 0x7b, expected 0x00") {
				t.Fatalf("server: %v", s.err)
			}
		})
	}
}

func TestSRQExchangeSends256Addresses(t *testing.T) {
	my := []dest{{qpn: 0x11, psn: 0x123456}, {qpn: 0x12, psn: 0xabcdef}}
	b := marshalDests(my, maxQP)
	if len(b) != 256*52 {
		t.Fatalf("%d bytes", len(b))
	}
	if got := string(b[2*52 : 3*52]); got != "0000:000000:000000:00000000000000000000000000000000\x00" {
		t.Errorf("padding entry %q", got)
	}
	rem, err := parseDests(b, 2)
	if err != nil || len(rem) != 2 || rem[0] != my[0] || rem[1] != my[1] {
		t.Fatalf("%+v %v", rem, err)
	}
	if _, err := parseDests(b, 3); err == nil {
		t.Error("a third QP was found in the padding")
	}
	if _, err := parseDests(b, 1); err == nil {
		t.Error("the peer's second QP went unnoticed")
	}
}

func TestOptionsValidation(t *testing.T) {
	tests := []struct {
		name string
		edit func(*Options)
		want string
	}{
		{"srq needs a receive per QP", func(o *Options) { o.Transport, o.NumQP, o.RxDepth = SRQ, 16, 15 }, "rx_depth 15 is too small for 16 QPs"},
		{"srq has at most 255 QPs", func(o *Options) { o.Transport, o.NumQP, o.RxDepth = SRQ, 256, 1000 }, "num_qp 256 must be 1 to 255"},
		{"size 0", func(o *Options) { o.Size = 0 }, "message size 0"},
		{"no iterations", func(o *Options) { o.Iters = 0 }, "iters 0"},
		{"bad path MTU", func(o *Options) { o.MTU = 9 }, "path MTU"},
		{"unknown transport", func(o *Options) { o.Transport = 7 }, "unknown transport 7"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			o := Defaults()
			tc.edit(&o)
			_, err := Run(context.Background(), &bytes.Buffer{}, o)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("got %v, want %q", err, tc.want)
			}
		})
	}
}

func TestCheckOfSRQZeroBuffer(t *testing.T) {
	b := make([]byte, 2*pageSize+3)
	if err := checkFilled(b, len(b), 0); err != nil {
		t.Fatal(err)
	}
	b[pageSize+1] = fill
	if err := checkFilled(b, len(b), 0); err == nil || !strings.Contains(err.Error(), "page 1") {
		t.Fatalf("got %v", err)
	}
}

func TestTransportNames(t *testing.T) {
	for tr, want := range map[Transport]string{RC: "ibv_rc_pingpong", UC: "ibv_uc_pingpong", UD: "ibv_ud_pingpong", SRQ: "ibv_srq_pingpong"} {
		if tr.Tool() != want {
			t.Errorf("%v: %s", tr, tr.Tool())
		}
	}
}

// A side whose peer vanishes mid-run (here: its client is stopped, which
// destroys its QP) fails once Idle passes without a completion, saying
// so, instead of waiting for ever as the C programs do.
func TestServerWhosePeerVanishesFails(t *testing.T) {
	port := freeUDPPort(t)
	srv := DefaultsFor(RC)
	srv.GIDIndex, srv.Iters, srv.Size, srv.Idle = 0, 1<<30, 64, 500*time.Millisecond
	cli := srv
	srv.Dev = loopbackDevice(t, "127.0.0.1", port, 0)
	cli.Dev = loopbackDevice(t, "127.0.0.2", port, 0)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv.Listener = ln
	cli.Server, cli.Port = "127.0.0.1", ln.Addr().(*net.TCPAddr).Port
	cliCtx, stopClient := context.WithCancel(context.Background())
	go func() {
		time.Sleep(300 * time.Millisecond) // mid-run
		stopClient()
	}()
	done := make(chan error, 1)
	go func() { _, err := Run(context.Background(), io.Discard, srv); done <- err }()
	Run(cliCtx, io.Discard, cli)
	select {
	case err := <-done:
		if err == nil || !strings.Contains(err.Error(), "the peer has stopped answering") {
			t.Errorf("server: %v", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the server still waits 10 s after its client stopped")
	}
}

// Sizes beyond what the device takes are refused before anything is
// allocated, naming the limit.
func TestSizesAboveTheDeviceLimitsAreRefused(t *testing.T) {
	port := freeUDPPort(t)
	for _, tc := range []struct {
		set  func(*Options)
		want string
	}{
		{func(o *Options) { o.Size = 1 << 30 }, "message size 1073741824 above the port's max_msg_sz 8388608"},
		{func(o *Options) { o.RxDepth = 1 << 20 }, "rx depth 1048576 above the device's max_qp_wr"},
	} {
		o := DefaultsFor(RC)
		o.GIDIndex, o.Dev, o.Server = 0, loopbackDevice(t, "127.0.0.1", port, 0), "127.0.0.1"
		tc.set(&o)
		_, err := Run(context.Background(), io.Discard, o)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("error %v, want %q", err, tc.want)
		}
	}
}
