package rping

import (
	"context"
	"fmt"
	"net"
	"net/netip"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/rdmago/rdmago/internal/memnet"
	"github.com/rdmago/rdmago/rdmacm"
	"github.com/rdmago/rdmago/rxe"
	"github.com/rdmago/rdmago/rxe/link"
)

// memDevices makes two software RoCE devices on an in-memory network,
// registered with the connection manager, and returns the server's
// address and the client's.
func memDevices(t *testing.T) (srv, cli netip.Addr) {
	srv, cli, _ = memnet.Pair(t, 74, false)
	return srv, cli
}

type syncBuffer = memnet.Buffer

type side struct {
	out, errs syncBuffer
	err       error
}

// pair runs a server and a client with the given flags (the server's
// address and the client's source address added) and returns both sides
// once both have ended.
func pair(t *testing.T, srvAddr, cliAddr netip.Addr, srvArgs, cliArgs string) (srv, cli *side) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	srv, cli = &side{}, &side{}
	parse := func(s *side, args string) Options {
		o, err := ParseArgs(strings.Fields(args), &s.out, &s.errs)
		if err != nil {
			t.Fatalf("%s: %v\n%s%s", args, err, s.out.String(), s.errs.String())
		}
		return o
	}
	so := parse(srv, fmt.Sprintf("-s -a %s %s", srvAddr, srvArgs))
	co := parse(cli, fmt.Sprintf("-c -I %s -a %s %s", cliAddr, srvAddr, cliArgs))
	done := make(chan struct{})
	go func() {
		defer close(done)
		srv.err = Run(ctx, so, &srv.out, &srv.errs)
	}()
	// The server listens at once; a client that comes too early is
	// rejected, so wait until the listener is there.
	time.Sleep(50 * time.Millisecond)
	cli.err = Run(ctx, co, &cli.out, &cli.errs)
	<-done
	return srv, cli
}

// wantPings returns the lines -v prints for count pings of size bytes,
// with prefix "ping data: " (client) or "server ping data: ".
func wantPings(prefix string, count, size int) string {
	var b strings.Builder
	buf := make([]byte, size)
	first := byte(65)
	for i := range count {
		fillPing(buf, i, first)
		if first++; first > 122 {
			first = 65
		}
		b.WriteString(prefix)
		b.Write(cString(buf))
		b.WriteByte('\n')
	}
	return b.String()
}

func TestPingData(t *testing.T) {
	buf := make([]byte, 64)
	fillPing(buf, 0, 65)
	if got, want := string(cString(buf)), "rdma-ping-0: ABCDEFGHIJKLMNOPQRSTUVWXYZ[\\]^_`abcdefghijklmnopqr"; got != want {
		t.Errorf("ping 0:\n got %q\nwant %q", got, want)
	}
	// The capture of rping -C 3 -S 64 -v in testdata/captures/rping.txt.
	want := "ping data: rdma-ping-0: ABCDEFGHIJKLMNOPQRSTUVWXYZ[\\]^_`abcdefghijklmnopqr\n" +
		"ping data: rdma-ping-1: BCDEFGHIJKLMNOPQRSTUVWXYZ[\\]^_`abcdefghijklmnopqrs\n" +
		"ping data: rdma-ping-2: CDEFGHIJKLMNOPQRSTUVWXYZ[\\]^_`abcdefghijklmnopqrst\n"
	if got := wantPings("ping data: ", 3, 64); got != want {
		t.Errorf("pings:\n%s\nwant\n%s", got, want)
	}
	// The letters wrap from 'z' (122) to 'A' (65), and the first letter
	// of ping 58 is 'A' again.
	fillPing(buf, 58, 65)
	if got := string(cString(buf)); !strings.HasPrefix(got, "rdma-ping-58: ABC") {
		t.Errorf("ping 58: %q", got)
	}
	// The smallest buffer holds the longest ping number and its NUL.
	small := make([]byte, MinSize)
	fillPing(small, 2147483647, 65)
	if got := string(small); got != "rdma-ping-2147483647: \x00" {
		t.Errorf("ping 2147483647 in %d bytes: %q", MinSize, got)
	}
	fillPing(buf, 57, 122)
	if got := string(cString(buf)); !strings.HasPrefix(got, "rdma-ping-57: zABC") {
		t.Errorf("ping 57: %q", got)
	}
}

func TestPingsOverMemoryNetwork(t *testing.T) {
	for _, tc := range []struct {
		name  string
		flags string
		size  int
	}{
		{"size 64", "-C 10 -S 64 -v -V", 64},
		{"size 65535", "-C 10 -S 65535 -v -V", 65535},
		{"minimum size", "-C 10 -S 23 -v -V", 23},
		{"self-created QP", "-C 10 -S 64 -v -V -q", 64},
	} {
		t.Run(tc.name, func(t *testing.T) {
			srvAddr, cliAddr := memDevices(t)
			srv, cli := pair(t, srvAddr, cliAddr, tc.flags, tc.flags)
			if srv.err != nil || cli.err != nil {
				t.Fatalf("server: %v\n%s%s\nclient: %v\n%s%s", srv.err, srv.out.String(), srv.errs.String(), cli.err, cli.out.String(), cli.errs.String())
			}
			if got, want := cli.out.String(), wantPings("ping data: ", 10, tc.size); got != want {
				t.Errorf("client stdout:\n%s\nwant\n%s", got, want)
			}
			if got, want := srv.out.String(), wantPings("server ping data: ", 10, tc.size); got != want {
				t.Errorf("server stdout:\n%s\nwant\n%s", got, want)
			}
			if got, want := cli.errs.String(), "client DISCONNECT EVENT...\n"; got != want {
				t.Errorf("client stderr %q, want %q", got, want)
			}
			if got, want := srv.errs.String(), "server DISCONNECT EVENT...\nwait for RDMA_READ_ADV state 10\n"; got != want {
				t.Errorf("server stderr %q, want %q", got, want)
			}
		})
	}
}

// udpDevices makes two software RoCE devices on UDP loopback sockets,
// 127.0.0.2 (the server's) and 127.0.0.1, on a free UDP port, registered
// with the connection manager.
func udpDevices(t *testing.T) (srv, cli netip.Addr) {
	t.Helper()
	c, err := net.ListenUDP("udp4", &net.UDPAddr{IP: net.IPv4(127, 0, 0, 2)})
	if err != nil {
		t.Skipf("no 127.0.0.2: %v", err)
	}
	port := uint16(c.LocalAddr().(*net.UDPAddr).Port)
	c.Close()
	srv, cli = netip.MustParseAddr("127.0.0.2"), netip.MustParseAddr("127.0.0.1")
	for _, a := range []netip.Addr{srv, cli} {
		dev, err := rxe.NewDevice(rxe.Config{Name: "rping_udp_" + a.String(), Addrs: []netip.Addr{a}, Port: port})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(rdmacm.RegisterDevice(dev))
	}
	return srv, cli
}

// TestPingsOverUDPLoopback runs rping's two sides over real UDP sockets
// on loopback, as two processes on one host would.
func TestPingsOverUDPLoopback(t *testing.T) {
	srvAddr, cliAddr := udpDevices(t)
	for _, size := range []int{64, 65535} {
		t.Run(fmt.Sprintf("size %d", size), func(t *testing.T) {
			flags := fmt.Sprintf("-C 10 -S %d -v -V -p %d", size, 7174+size%100)
			srv, cli := pair(t, srvAddr, cliAddr, flags, flags)
			if srv.err != nil || cli.err != nil {
				t.Fatalf("server: %v\n%s%s\nclient: %v\n%s%s", srv.err, srv.out.String(), srv.errs.String(), cli.err, cli.out.String(), cli.errs.String())
			}
			if got, want := cli.out.String(), wantPings("ping data: ", 10, size); got != want {
				t.Errorf("client stdout:\n%s\nwant\n%s", got, want)
			}
			if got, want := srv.out.String(), wantPings("server ping data: ", 10, size); got != want {
				t.Errorf("server stdout:\n%s\nwant\n%s", got, want)
			}
			if got, want := cli.errs.String(), "client DISCONNECT EVENT...\n"; got != want {
				t.Errorf("client stderr %q, want %q", got, want)
			}
			if got, want := srv.errs.String(), "server DISCONNECT EVENT...\nwait for RDMA_READ_ADV state 10\n"; got != want {
				t.Errorf("server stderr %q, want %q", got, want)
			}
		})
	}
	checkNoLeaks(t)
}

// TestClientWithoutServerIsRejected: the peer's connection manager
// answers a REQ for a port nobody listens on with REJ reason 8 (invalid
// service ID), and rping reports the event and exits with -1.
func TestClientWithoutServerIsRejected(t *testing.T) {
	srvAddr, cliAddr := memDevices(t)
	// The server's connection manager answers once its device is in use,
	// as the kernel's always is: an ID bound to another port there.
	other, err := rdmacm.CreateID(nil, nil, rdmacm.PSTCP)
	if err != nil {
		t.Fatal(err)
	}
	defer other.Destroy()
	if err := other.BindAddr(netip.AddrPortFrom(srvAddr, 1)); err != nil {
		t.Fatal(err)
	}
	var out, errs syncBuffer
	o, err := ParseArgs(strings.Fields(fmt.Sprintf("-c -I %s -a %s -C 1", cliAddr, srvAddr)), &out, &errs)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	err = Run(ctx, o, &out, &errs)
	if got := ExitStatus(err); got != 255 {
		t.Errorf("exit status %d (%v), want 255", got, err)
	}
	if got, want := errs.String(), "cma event RDMA_CM_EVENT_REJECTED, error 8\nwait for CONNECTED state 4\nconnect error -1\n"; got != want {
		t.Errorf("stderr %q, want %q", got, want)
	}
	if out.String() != "" {
		t.Errorf("stdout %q", out.String())
	}
	checkNoLeaks(t)
}

// TestPersistentServer serves two clients one after the other and two at
// once, then is interrupted.
func TestPersistentServer(t *testing.T) {
	srvAddr, cliAddr := memDevices(t)
	var sout, serrs syncBuffer
	so, err := ParseArgs(strings.Fields(fmt.Sprintf("-s -P -a %s -v", srvAddr)), &sout, &serrs)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	srvCtx, stopSrv := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- Run(srvCtx, so, &sout, &serrs) }()
	time.Sleep(50 * time.Millisecond)
	client := func(count int) (string, error) {
		var out, errs syncBuffer
		o, err := ParseArgs(strings.Fields(fmt.Sprintf("-c -I %s -a %s -C %d -v -V", cliAddr, srvAddr, count)), &out, &errs)
		if err != nil {
			return "", err
		}
		err = Run(ctx, o, &out, &errs)
		return out.String() + errs.String(), err
	}
	for i := range 2 {
		out, err := client(3)
		if err != nil || out != wantPings("ping data: ", 3, 64)+"client DISCONNECT EVENT...\n" {
			t.Errorf("client %d: %v\n%s", i, err, out)
		}
	}
	var wg sync.WaitGroup
	for i := range 2 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			out, err := client(5)
			if err != nil || out != wantPings("ping data: ", 5, 64)+"client DISCONNECT EVENT...\n" {
				t.Errorf("concurrent client %d: %v\n%s", i, err, out)
			}
		}()
	}
	wg.Wait()
	stopSrv()
	if err := <-done; ExitStatus(err) != 130 {
		t.Errorf("server: %v (status %d)", err, ExitStatus(err))
	}
	if n := strings.Count(sout.String(), "server ping data: rdma-ping-"); n != 3+3+5+5 {
		t.Errorf("server printed %d pings:\n%s", n, sout.String())
	}
	// The lines of concurrent connections interleave.
	if e := serrs.String(); strings.Count(e, "\n") != 8 || strings.Count(e, "server DISCONNECT EVENT...\n") != 4 ||
		strings.Count(e, "wait for RDMA_READ_ADV state 10\n") != 4 {
		t.Errorf("server stderr:\n%s", serrs.String())
	}
	checkNoLeaks(t)
}

// TestSecondClientOfASingleServerIsRejected: a server without -P serves
// one client; another is turned away while it does.
func TestSecondClientOfASingleServerIsRejected(t *testing.T) {
	srvAddr, cliAddr := memDevices(t)
	var sout, serrs, c1out, c1errs, c2out, c2errs syncBuffer
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	so, _ := ParseArgs(strings.Fields(fmt.Sprintf("-s -a %s", srvAddr)), &sout, &serrs)
	srvDone := make(chan error, 1)
	go func() { srvDone <- Run(ctx, so, &sout, &serrs) }()
	time.Sleep(50 * time.Millisecond)
	// The first client pings for ever (-C 0) until interrupted.
	c1ctx, stopC1 := context.WithCancel(ctx)
	c1o, _ := ParseArgs(strings.Fields(fmt.Sprintf("-c -I %s -a %s -C 0", cliAddr, srvAddr)), &c1out, &c1errs)
	c1Done := make(chan error, 1)
	go func() { c1Done <- Run(c1ctx, c1o, &c1out, &c1errs) }()
	time.Sleep(100 * time.Millisecond)
	c2o, _ := ParseArgs(strings.Fields(fmt.Sprintf("-c -I %s -a %s -C 1", cliAddr, srvAddr)), &c2out, &c2errs)
	err := Run(ctx, c2o, &c2out, &c2errs)
	if ExitStatus(err) != 255 || c2errs.String() != "cma event RDMA_CM_EVENT_REJECTED, error 28\nwait for CONNECTED state 4\nconnect error -1\n" {
		t.Errorf("second client: %v\n%s", err, c2errs.String())
	}
	stopC1()
	if err := <-c1Done; ExitStatus(err) != 130 {
		t.Errorf("first client: %v\n%s", err, c1errs.String())
	}
	if err := <-srvDone; err != nil {
		t.Errorf("server: %v\n%s", err, serrs.String())
	}
	checkNoLeaks(t)
}

// checkNoLeaks fails if a goroutine of this package is still running.
func checkNoLeaks(t *testing.T) {
	t.Helper()
	var stacks string
	for range 100 {
		buf := make([]byte, 1<<20)
		stacks = string(buf[:runtime.Stack(buf, true)])
		if !strings.Contains(stacks, "internal/rping.(*") {
			return
		}
		time.Sleep(10 * time.Millisecond)
	}
	t.Errorf("goroutines of rping left running:\n%s", stacks)
}

// TestDebugOutput: -d prints rping's DEBUG_LOG lines on stdout.
func TestDebugOutput(t *testing.T) {
	srvAddr, cliAddr := memDevices(t)
	srv, cli := pair(t, srvAddr, cliAddr, "-d -C 2", "-d -C 2")
	if srv.err != nil || cli.err != nil {
		t.Fatalf("server: %v\n%s%s\nclient: %v\n%s%s", srv.err, srv.out.String(), srv.errs.String(), cli.err, cli.out.String(), cli.errs.String())
	}
	for _, want := range []string{"count 2\n", "rdma_bind_addr successful\n", "rdma_listen\n", "child cma 0x", "cq_thread started.\n",
		"accepting client connection request\n", "Received rkey ", "server posted rdma read req \n", "rdma read completion\n",
		"server posted go ahead\n", "rdma write from lkey ", "server rdma write complete \n", "(child)\n", "rping_free_buffers called on cb 0x"} {
		if !strings.Contains(srv.out.String(), want) {
			t.Errorf("server stdout lacks %q:\n%s", want, srv.out.String())
		}
	}
	for _, want := range []string{"count 2\n", "created cm_id 0x", "cma_event type RDMA_CM_EVENT_ADDR_RESOLVED cma_id 0x", "(parent)\n",
		"rdma_resolve_addr - rdma_resolve_route successful\n", "created qp 0x", "allocated & registered buffers...\n",
		"ESTABLISHED\n", "rdma_connect successful\n", "RDMA addr ", "send completion\n", "recv completion\n", "destroy cm_id 0x"} {
		if !strings.Contains(cli.out.String(), want) {
			t.Errorf("client stdout lacks %q:\n%s", want, cli.out.String())
		}
	}
}

// A peer that vanishes without a DREQ (killed: no kernel sends one for it
// here) is given up on after Idle, with a line saying so, instead of
// being waited for for ever. The network going silent stands in for the
// dead peer.
func TestServerGivesUpOnASilentClient(t *testing.T) {
	srvAddr, cliAddr, network := memnet.Pair(t, 74, false)
	var srvOut, srvErrs, cliOut, cliErrs syncBuffer
	so, err := ParseArgs(strings.Fields("-s -a "+srvAddr.String()+" -C 0 -S 64"), &srvOut, &srvErrs)
	if err != nil {
		t.Fatal(err)
	}
	so.Idle = 300 * time.Millisecond
	co, err := ParseArgs(strings.Fields("-c -I "+cliAddr.String()+" -a "+srvAddr.String()+" -C 0 -S 64"), &cliOut, &cliErrs)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	srvDone := make(chan error, 1)
	go func() { srvDone <- Run(ctx, so, &srvOut, &srvErrs) }()
	time.Sleep(50 * time.Millisecond)
	cliCtx, stopClient := context.WithCancel(ctx)
	cliDone := make(chan error, 1)
	go func() { cliDone <- Run(cliCtx, co, &cliOut, &cliErrs) }()
	time.Sleep(300 * time.Millisecond) // pinging
	network.SetFaults(link.Faults{Drop: 1})
	select {
	case err := <-srvDone:
		if err == nil || !strings.Contains(srvErrs.String(), "no word from the client for 300ms") {
			t.Errorf("server: %v, stderr %q", err, srvErrs.String())
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the server still waits for its silent client")
	}
	stopClient()
	<-cliDone
}
