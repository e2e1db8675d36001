package rstream

import (
	"bytes"
	"context"
	"net"
	"net/netip"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/rdmago/rdmago/internal/memnet"
	"github.com/rdmago/rdmago/internal/rsperf"
	"github.com/rdmago/rdmago/internal/tool"
	"github.com/rdmago/rdmago/rsocket"
)

// runSides runs rstream's server and client with o in one process, the
// server on srv and the client from cli, and returns their outputs.
func runSides(t *testing.T, srv, cli netip.Addr, o Options) (srvOut, cliOut string, srvErr, cliErr error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	so := &readyWriter{ready: make(chan struct{})}
	var se bytes.Buffer
	sopt := o
	sopt.Src = srv.String()
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		srvErr = Run(ctx, sopt, so, &se)
		so.once.Do(func() { close(so.ready) })
	}()
	select {
	case <-so.ready:
	case <-ctx.Done():
	}
	var co, ce bytes.Buffer
	copt := o
	copt.Dst, copt.Src = srv.String(), cli.String()
	if o.Sockets {
		copt.Src = "" // a TCP socket from loopback
	}
	cliErr = Run(ctx, copt, &co, &ce)
	if cliErr != nil {
		cancel() // the server would wait for ever
	}
	wg.Wait()
	return so.String() + se.String(), co.String() + ce.String(), srvErr, cliErr
}

// readyWriter closes ready once the table's header, printed after
// listening, is written.
type readyWriter struct {
	memnet.Buffer
	ready chan struct{}
	once  sync.Once
}

func (w *readyWriter) Write(p []byte) (int, error) {
	n, err := w.Buffer.Write(p)
	if strings.Contains(w.Buffer.String(), "usec/xfer") {
		w.once.Do(func() { close(w.ready) })
	}
	return n, err
}

// freeTCPPort returns a TCP port free on 127.0.0.1.
func freeTCPPort(t *testing.T) string {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return strconv.Itoa(l.Addr().(*net.TCPAddr).Port)
}

// TestCustomRunsOfEverySize runs rstream's custom test (-S n -C 3 -T v)
// with client and server in one process, over rsockets and over TCP
// sockets (-T s), for sizes below the 16-byte start exchange, around it,
// and around the rings' sizes and halves with -B 4096 (rings of 8 KiB)
// and the default -B (1 MiB rings).
func TestCustomRunsOfEverySize(t *testing.T) {
	memnet.NoLeaks(t)
	srv, cli, _ := memnet.Pair(t, 81, false)
	type run struct {
		size    int
		buffer  int
		sockets bool
	}
	var runs []run
	for _, n := range []int{1, 2, 7, 15, 16, 17, 31, 64, 1000, 2047, 2048, 2049, 4095, 4096, 4097, 8191, 8192, 8193, 16385} {
		runs = append(runs, run{n, 4096, false})
	}
	for _, n := range []int{1, 15, 16, 1<<19 - 1, 1 << 19, 1<<20 + 1} {
		runs = append(runs, run{n, 0, false})
	}
	for _, n := range []int{1, 15, 16, 17, 4096} {
		runs = append(runs, run{n, 0, true})
	}
	for i, r := range runs {
		name := strconv.Itoa(r.size) + "B"
		if r.buffer != 0 {
			name += "/B" + strconv.Itoa(r.buffer)
		}
		if r.sockets {
			name += "/sockets"
		}
		t.Run(name, func(t *testing.T) {
			o := Defaults()
			o.Custom, o.Size, o.Count, o.Verify, o.Buffer, o.Sockets = true, r.size, 3, true, r.buffer, r.sockets
			o.Port = strconv.Itoa(7600 + i)
			at := srv
			if r.sockets {
				o.Port = freeTCPPort(t)
				at = netip.MustParseAddr("127.0.0.1")
			}
			so, co, serr, cerr := runSides(t, at, cli, o)
			if serr != nil || cerr != nil {
				t.Fatalf("server %v, client %v\nserver:\n%s\nclient:\n%s", serr, cerr, so, co)
			}
			for _, out := range []string{so, co} {
				if m := row.FindAllStringSubmatch(out, -1); len(m) != 1 || m[0][1] != "custom" {
					t.Errorf("no custom row in\n%s", out)
				}
			}
		})
	}
}

// TestEverySizeOverOneConnection sends every size from 1 byte to 5 KiB
// each way over one rsocket with 8 KiB rings, as run_test does (with its
// 16-byte start exchange before each), checking every byte.
func TestEverySizeOverOneConnection(t *testing.T) {
	memnet.NoLeaks(t)
	srv, cli, _ := memnet.Pair(t, 81, false)
	const top = 5 << 10
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	cfg := rsocket.Config{RecvBuffer: 8192, SendBuffer: 8192}
	lc := rsocket.ListenConfig{Config: cfg}
	l, err := lc.Listen(ctx, "tcp", netip.AddrPortFrom(srv, 0).String())
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	accepted := make(chan net.Conn, 1)
	go func() {
		c, err := l.AcceptRsocket(ctx)
		if err != nil {
			accepted <- nil
			return
		}
		accepted <- c
	}()
	d := rsocket.Dialer{Config: cfg, LocalAddr: netip.AddrPortFrom(cli, 0)}
	cc, err := d.Dial(ctx, "tcp", l.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer cc.Close()
	sc := <-accepted
	if sc == nil {
		t.Fatal("accept failed")
	}
	defer sc.Close()
	side := func(dst string) *session {
		o := Defaults()
		o.Dst, o.Custom, o.Verify, o.Size = dst, true, true, top
		return &session{o: o, out: &bytes.Buffer{}, errw: &bytes.Buffer{}, buf: make([]byte, max(top, syncSize))}
	}
	server, client := side(""), side(srv.String())
	errc := make(chan error, 1)
	go func() {
		for n := 1; n <= top; n++ {
			if err := server.runTest(sc, rsperf.Test{Name: "custom", Size: n, Count: 1, Iter: 1}); err != nil {
				errc <- err
				return
			}
		}
		errc <- nil
	}()
	for n := 1; n <= top; n++ {
		if err := client.runTest(cc, rsperf.Test{Name: "custom", Size: n, Count: 1, Iter: 1}); err != nil {
			t.Fatalf("size %d: %v: %s", n, err, client.errw)
		}
	}
	if err := <-errc; err != nil {
		t.Fatalf("server: %v: %s", err, server.errw)
	}
}

// TestSizeLimits: sizes from 1 byte parse; 0 and sizes beyond
// MaxTransfer are refused with a message naming the bound, before any
// memory is sized by them.
func TestSizeLimits(t *testing.T) {
	for _, tc := range []struct {
		args []string
		ok   bool
		msg  string
	}{
		{[]string{"-S", "1"}, true, ""},
		{[]string{"-S", "15", "-T", "s"}, true, ""},
		{[]string{"-S", strconv.Itoa(MaxTransfer)}, true, ""},
		{[]string{"-S", "0"}, false, "at least one byte"},
		{[]string{"-S", strconv.Itoa(MaxTransfer + 1)}, false, "from 0 to 1073741824"},
		{[]string{"-S", "2147483648"}, false, "from 0 to 1073741824"},
		{[]string{"-S", "9223372036854775807"}, false, "from 0 to 1073741824"},
		{[]string{"-S", "9223372036854775808"}, false, "from 0 to 1073741824"},
		{[]string{"-B", "9223372036854775807"}, false, "-B"},
		{[]string{"-k", "9223372036854775807"}, false, "-k"},
		{[]string{"-i", "4294967360"}, false, "-i"},
		{[]string{"-C", "-1"}, false, "-C"},
	} {
		var out, errw bytes.Buffer
		_, err := ParseArgs(tc.args, &out, &errw)
		if tc.ok != (err == nil) {
			t.Errorf("ParseArgs(%q): %v, stderr %q", tc.args, err, errw.String())
			continue
		}
		if !tc.ok && (tool.Status(err) == 0 || !strings.Contains(errw.String(), tc.msg) || strings.Count(errw.String(), "\n") != 1) {
			t.Errorf("ParseArgs(%q): status %d, stderr %q, want one line with %q", tc.args, tool.Status(err), errw.String(), tc.msg)
		}
	}
}

// TestInlineBeyondTheDeviceIsRefused: -i larger than the devices'
// max_inline_data ends the run at once with the bound named, instead of
// a server that rejects every client.
func TestInlineBeyondTheDeviceIsRefused(t *testing.T) {
	t.Setenv("RDMAGO_PROVIDER", "rxe")
	t.Setenv("RDMAGO_RXE_ADDR", "127.0.0.1")
	o := Defaults()
	o.Inline = 1000
	o.Port = "1" // never reached
	var out, errw bytes.Buffer
	err := Run(context.Background(), o, &out, &errw)
	if tool.Status(err) != 1 || !strings.Contains(errw.String(), "-i 1000: device rxe_lo sends at most 400 bytes inline") {
		t.Fatalf("Run with -i 1000: status %d, stderr %q, stdout %q", tool.Status(err), errw.String(), out.String())
	}
	if out.Len() != 0 {
		t.Errorf("it printed %q before refusing", out.String())
	}
	o.Sockets = true // TCP sockets have no inline sends: -i is ignored
	if err := checkInlineFor(o, &errw); err != nil {
		t.Errorf("-T s -i 1000: %v", err)
	}
}
