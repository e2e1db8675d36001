package pingpong

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"net/netip"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/rdmago/rdmago/rxe"
	"github.com/rdmago/rdmago/verbs"
)

func TestExchangeStringMatchesIbvRcPingpong(t *testing.T) {
	gid := verbs.GIDFromAddr(netip.MustParseAddr("10.77.0.11"))
	d := dest{lid: 0, qpn: 0x11, psn: 0x71324c, gid: gid}
	got := d.marshal()
	want := "0000:000011:71324c:00000000000000000000ffff0a4d000b\x00"
	if string(got) != want || len(got) != exchangeLen || exchangeLen != 52 {
		t.Fatalf("got %q (%d bytes), want %q (52)", got, len(got), want)
	}
	back, err := parseDest(got)
	if err != nil || back != d {
		t.Fatalf("parse: %+v %v", back, err)
	}
}

func TestParseDestRejectsMalformedStrings(t *testing.T) {
	for _, s := range []string{
		"",
		"0000:000011:71324c",
		"0000:000011:71324c:00000000000000000000ffff0a4d000b:extra",
		"zzzz:000011:71324c:00000000000000000000ffff0a4d000b",
		"0000:1000000:71324c:00000000000000000000ffff0a4d000b",
		"0000:000011:71324c:00000000000000000000ffff0a4d00",
		"0000:000011:71324c:00000000000000000000ffff0a4d00zz",
	} {
		if _, err := parseDest([]byte(s)); err == nil {
			t.Errorf("%q accepted", s)
		}
	}
}

func FuzzParseDest(f *testing.F) {
	f.Add([]byte("0000:000011:71324c:00000000000000000000ffff0a4d000b\x00"))
	f.Add([]byte("ffff:ffffff:ffffff:fe800000000000000000000000000001"))
	f.Fuzz(func(t *testing.T, b []byte) {
		d, err := parseDest(b)
		if err != nil {
			return
		}
		if again, err := parseDest(d.marshal()); err != nil || again != d {
			t.Fatalf("round trip of %q: %+v %v", b, again, err)
		}
	})
}

// TestTwoRdmagoSidesPingPong runs a server and a client in one process on
// two devices over UDP loopback, at the sizes the interop tests use.
func TestTwoRdmagoSidesPingPong(t *testing.T) {
	for _, tc := range []struct {
		size          int
		events, check bool
	}{{1, true, false}, {1024, false, false}, {4096, true, true}, {65536, false, true}} {
		port := uint16(20000 + rand.IntN(20000))
		tcp := freeTCPPort(t)
		dev := func(a string) *verbs.Device {
			d, err := rxe.NewDevice(rxe.Config{Addrs: []netip.Addr{netip.MustParseAddr(a)}, Port: port})
			if err != nil {
				t.Fatal(err)
			}
			return d
		}
		o := Defaults()
		o.Port, o.Size, o.Iters, o.GIDIndex, o.Check = tcp, tc.size, 200, 0, tc.check
		srv, cli := o, o
		srv.Dev, cli.Dev = dev("127.0.0.1"), dev("127.0.0.2")
		srv.Events = tc.events
		cli.Server = "127.0.0.1"
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		var wg sync.WaitGroup
		var srvOut, cliOut bytes.Buffer
		var srvErr, cliErr error
		wg.Add(1)
		go func() { defer wg.Done(); _, srvErr = Run(ctx, &srvOut, srv) }()
		time.Sleep(100 * time.Millisecond) // let the server listen
		_, cliErr = Run(ctx, &cliOut, cli)
		wg.Wait()
		cancel()
		if srvErr != nil || cliErr != nil {
			t.Fatalf("size %d: server %v, client %v\n%s\n%s", tc.size, srvErr, cliErr, srvOut.String(), cliOut.String())
		}
		for _, out := range []string{srvOut.String(), cliOut.String()} {
			if !strings.Contains(out, "  remote address: LID 0x0000, QPN 0x") || !strings.Contains(out, " iters in ") {
				t.Errorf("size %d output:\n%s", tc.size, out)
			}
		}
	}
}

func TestCheckDataFindsCorruption(t *testing.T) {
	b := bytes.Repeat([]byte{fill}, 3*pageSize)
	markPages(b)
	if err := checkData(b, len(b)); err != nil {
		t.Fatal(err)
	}
	b[pageSize+5] = 0
	if err := checkData(b, len(b)); err == nil || !strings.Contains(err.Error(), "page 1") {
		t.Fatalf("corruption not reported: %v", err)
	}
	if err := checkData(b[:10], len(b)); err == nil {
		t.Fatal("short message not reported")
	}
}

// freeTCPPort returns a port nothing listens on now: one the kernel just
// gave out (a random one could be an ephemeral port in use).
func freeTCPPort(t *testing.T) int {
	t.Helper()
	ln, err := net.Listen("tcp", ":0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().(*net.TCPAddr).Port
}

// noticeLines passes each line written to it down a channel.
type noticeLines chan string

func (n noticeLines) Write(p []byte) (int, error) {
	for _, l := range strings.Split(strings.TrimRight(string(p), "\n"), "\n") {
		n <- l
	}
	return len(p), nil
}

// TestServerOnPortZeroSaysWhichPort: -p 0 makes the server listen on an
// ephemeral port, which it tells Notice; a client reaches it there. A
// client cannot connect to port 0, and says so.
func TestServerOnPortZeroSaysWhichPort(t *testing.T) {
	port := uint16(20000 + rand.IntN(20000))
	dev := func(a string) *verbs.Device {
		d, err := rxe.NewDevice(rxe.Config{Addrs: []netip.Addr{netip.MustParseAddr(a)}, Port: port})
		if err != nil {
			t.Fatal(err)
		}
		return d
	}
	o := Defaults()
	o.Port, o.Iters, o.GIDIndex = 0, 20, 0
	srv, cli := o, o
	srv.Dev, cli.Dev = dev("127.0.0.1"), dev("127.0.0.2")
	notices := make(noticeLines, 4)
	srv.Notice = notices
	cli.Server = "127.0.0.1"
	if _, err := Run(context.Background(), io.Discard, cli); err == nil || !strings.Contains(err.Error(), "TCP port 0") {
		t.Fatalf("client with port 0: %v", err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	srvErr := make(chan error, 1)
	go func() { _, err := Run(ctx, io.Discard, srv); srvErr <- err }()
	var line string
	select {
	case line = <-notices:
	case err := <-srvErr:
		t.Fatalf("server ended: %v", err)
	case <-ctx.Done():
		t.Fatal("the server never said its port")
	}
	if _, err := fmt.Sscanf(line, "listening on port %d", &cli.Port); err != nil || cli.Port == 0 {
		t.Fatalf("notice %q: %v", line, err)
	}
	if _, err := Run(ctx, io.Discard, cli); err != nil {
		t.Fatalf("client on port %d: %v", cli.Port, err)
	}
	if err := <-srvErr; err != nil {
		t.Fatalf("server: %v", err)
	}
}
