package perftest

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/netip"
	"os"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	_ "github.com/rdmago/rdmago/rxe" // the software device
	"github.com/rdmago/rdmago/verbs"
)

// The key message is perftest's KEY_PRINT_FMT_GID: 107 characters and a
// NUL, lowercase hex, a colon after every field.
func TestKeyMessageIsPerftests(t *testing.T) {
	d := dest{lid: 0, outReads: 1, qpn: 0x14, psn: 0x73fabd, rkey: 0x584, vaddr: 0x563ef4397000,
		gid: verbs.GIDFromAddr(netipMust("10.77.0.11"))}
	b := d.marshal()
	want := "0000:0001:000014:73fabd:00000584:0000563ef4397000:00:00:00:00:00:00:00:00:00:00:ff:ff:0a:4d:00:0b:00000000:\x00"
	if string(b) != want || len(b) != keyLen {
		t.Fatalf("key message\n%q (%d bytes)\nwant\n%q", b, len(b), want)
	}
	got, err := parseDest(b)
	if err != nil || got != d {
		t.Fatalf("parsed back %+v, %v", got, err)
	}
	for _, bad := range [][]byte{b[:keyLen-1], append(bytes.Clone(b[:keyLen-1]), 'x'), bytes.Replace(b, []byte("73fabd"), []byte("73fabg"), 1)} {
		if _, err := parseDest(bad); err == nil {
			t.Errorf("accepted %q", bad)
		}
	}
}

// Over rdma_cm the key is perftest's struct pingpong_dest, big-endian:
// five 32-bit fields, 4 bytes of padding, the address, the GID, srqn and
// gid_index (56 bytes).
func TestRawKeyMessageIsPerftests(t *testing.T) {
	d := dest{outReads: 1, qpn: 0x14, psn: 0x73fabd, rkey: 0x584, vaddr: 0x563ef4397000,
		gid: verbs.GIDFromAddr(netipMust("10.77.0.11")), gidIndex: 1}
	b := d.marshalRaw()
	want := "00000000" + "00000001" + "00000014" + "0073fabd" + "00000584" + "00000000" + "0000563ef4397000" +
		"00000000000000000000ffff0a4d000b" + "00000000" + "00000001"
	if got := fmt.Sprintf("%x", b); got != want {
		t.Fatalf("raw key\n%s\nwant\n%s", got, want)
	}
	got, err := parseRawDest(b)
	d.gidIndex = 0 // not read back, as perftest does not
	if err != nil || got != d {
		t.Fatalf("parsed back %+v, %v", got, err)
	}
	if _, err := parseRawDest(b[:55]); err == nil {
		t.Error("accepted 55 bytes")
	}
}

// Latency statistics as perftest's: deltas of successive stamps, sorted,
// the two largest left out of the average; the median as the typical
// figure; send latencies halved.
func TestLatencyStatistics(t *testing.T) {
	var stamps []stamp
	var at stamp
	for _, d := range []int{10, 20, 30, 40, 1000, 2000} { // µs of round trip
		stamps = append(stamps, at)
		at += stamp(time.Duration(d) * time.Microsecond)
	}
	stamps = append(stamps, at)
	l := latStats(stamps, 2)
	// Deltas 5 10 15 20 500 1000 (halved); four counted.
	if l.min != 5 || l.max != 500 || l.typical != 12.5 || l.avg != 12.5 {
		t.Fatalf("stats %+v", l)
	}
	// perftest truncates each deviation (7.5, 2.5) to whole µs: √((49+4+4+49)/4).
	if l.stdev < 5.147 || l.stdev > 5.148 {
		t.Fatalf("stdev %v, want √26.5", l.stdev)
	}
}

func TestArgsDefaultsAndRefusals(t *testing.T) {
	o, err := ParseArgs(Tool{Write, false}, nil)
	// Over 8 KiB a completion for each message, unless -a, -e or -Q.
	if err != nil || o.Iters != 5000 || o.Size != 65536 || o.TxDepth != 128 || o.CQMod != 1 || o.Port != DefaultPort {
		t.Fatalf("ib_write_bw defaults %+v, %v", o, err)
	}
	if o, _ := ParseArgs(Tool{Write, false}, []string{"-a"}); o.CQMod != 100 {
		t.Fatalf("ib_write_bw -a: CQ moderation %d, want 100", o.CQMod)
	}
	if o, _ := ParseArgs(Tool{Send, true}, []string{"-n", "5"}); o.RxDepth != 6 {
		t.Fatalf("ib_send_lat -n 5: rx depth %d, want 6 (perftest makes an odd depth even)", o.RxDepth)
	}
	if o, _ := ParseArgs(Tool{Write, false}, []string{"-n", "30000"}); !o.NoPeak {
		t.Fatal("ib_write_bw -n 30000 computes a peak")
	}
	o, err = ParseArgs(Tool{Send, true}, []string{"-n", "50", "-s", "8", "host"})
	if err != nil || o.Iters != 50 || o.Size != 8 || o.Server != "host" || o.TxDepth != 1 {
		t.Fatalf("ib_send_lat %+v, %v", o, err)
	}
	if o, err := ParseArgs(Tool{Send, false}, []string{"-c", "UD", "-I", "900"}); err != nil || o.Conn != UD || o.CQMod != 100 || o.Inline != maxInlineUD || o.RxDepth != 1000 {
		t.Errorf("ib_send_bw -c UD: %+v, %v; want UD, CQ moderation 100, inline 884, rx depth 1000", o, err)
	}
	for _, args := range [][]string{{"-n", "4"}, {"-c", "UD"}, {"-c", "XRC"}, {"-q", "0"}, {"-m", "300"}, {"-s", "9000000"}, {"a", "b"}, {"--bogus"},
		{"-q", "1024", "-a"}, {"-q", "128", "-s", "8388608"}} {
		if _, err := ParseArgs(Tool{Write, false}, args); err == nil {
			t.Errorf("accepted %q", args)
		}
	}
	if o, err := ParseArgs(Tool{Write, false}, []string{"-l", "8"}); err != nil || o.CQMod != 8 || o.PostList != 8 {
		t.Errorf("-l 8: CQ moderation %d, post list %d, %v; want 8, 8", o.CQMod, o.PostList, err)
	}
	if o, err := ParseArgs(Tool{Write, false}, []string{"--run_infinitely"}); err != nil || o.Duration != 5 || o.Margin != 0 || !o.NoPeak {
		t.Errorf("--run_infinitely: %+v, %v; want a row every 5 s, no margin, no peak", o, err)
	}
	for _, args := range [][]string{{"-D", "4", "-a"}, {"-D", "2", "-f", "1"}, {"-D", "4", "-b"},
		{"-l", "3", "-n", "1000"}, {"-l", "4", "-Q", "3"}, {"-l", "256", "-t", "128"}, {"--run_infinitely", "-e"}, {"-U"}, {"-u", "32"}, {"-u", "0"}} {
		if _, err := ParseArgs(Tool{Write, false}, args); err == nil {
			t.Errorf("ib_write_bw took %q", args)
		}
	}
	if o, err := ParseArgs(Tool{Write, false}, []string{"-D", "8"}); err != nil || o.Margin != 2 || !o.NoPeak {
		t.Errorf("-D 8: margin %d, no peak %v, %v; want 2, true", o.Margin, o.NoPeak, err)
	}
	for _, args := range [][]string{{"-q", "2"}, {"-l", "2"}, {"--run_infinitely"}, {"-D", "2", "-a"}} {
		if _, err := ParseArgs(Tool{Send, true}, args); err == nil {
			t.Errorf("ib_send_lat took %q", args)
		}
	}
	for _, args := range [][]string{{"-D", "2", "-b"}, {"-c", "UD", "-R"}, {"--run_infinitely", "-b"}, {"--perform_warm_up"}} {
		if _, err := ParseArgs(Tool{Send, false}, args); err == nil {
			t.Errorf("ib_send_bw took %q", args)
		}
	}
	if _, err := ParseArgs(Tool{Read, true}, []string{"-h"}); err != ErrHelp {
		t.Errorf("-h: %v", err)
	}
}

// freePort returns a TCP port nothing listens on now, on either family:
// the server listens on both.
func freePort(t *testing.T) int {
	ln, err := net.Listen("tcp", ":0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().(*net.TCPAddr).Port
}

type syncBuf struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuf) Write(p []byte) (int, error) { s.mu.Lock(); defer s.mu.Unlock(); return s.b.Write(p) }
func (s *syncBuf) String() string              { s.mu.Lock(); defer s.mu.Unlock(); return s.b.String() }

// Every tool, server and client in one process over the software device
// on 127.0.0.1: both finish and print their rows.
func TestToolsRunAgainstThemselves(t *testing.T) {
	for _, tool := range Tools {
		t.Run(tool.Name(), func(t *testing.T) { runBoth(t, tool) })
	}
	// And on a completion channel (-e), and with several QPs (-q).
	t.Run("events", func(t *testing.T) { runBoth(t, Tool{Send, true}, "-e") })
	t.Run("write_bw-q4", func(t *testing.T) { runBoth(t, Tool{Write, false}, "-q", "4") })
	t.Run("send_bw-q3", func(t *testing.T) { runBoth(t, Tool{Send, false}, "-q", "3") })
	t.Run("read_bw-q2", func(t *testing.T) { runBoth(t, Tool{Read, false}, "-q", "2") })
	t.Run("write_bw-b", func(t *testing.T) { runBoth(t, Tool{Write, false}, "-b") })
	t.Run("send_bw-b-q2", func(t *testing.T) { runBoth(t, Tool{Send, false}, "-b", "-q", "2") })
	t.Run("write_bw-warm-up-q2", func(t *testing.T) { runBoth(t, Tool{Write, false}, "--perform_warm_up", "-q", "2") })
	t.Run("atomic_bw-warm-up-b", func(t *testing.T) { runBoth(t, Tool{Atomic, false}, "--perform_warm_up", "-b") })
	t.Run("read_bw-D", func(t *testing.T) { runBoth(t, Tool{Read, false}, "-D", "2", "-q", "2") })
	t.Run("send_bw-D", func(t *testing.T) { runBoth(t, Tool{Send, false}, "-D", "2") })
	for _, tool := range []Tool{{Send, true}, {Read, true}, {Atomic, true}} {
		t.Run(tool.Name()+"-D", func(t *testing.T) { runBoth(t, tool, "-D", "2") })
	}
	t.Run("send_bw-UD", func(t *testing.T) { runBoth(t, Tool{Send, false}, "-c", "UD", "-q", "2") })
	t.Run("send_lat-UD", func(t *testing.T) { runBoth(t, Tool{Send, true}, "-c", "UD") })
	// Post lists, and every latency listed.
	t.Run("write_bw-l4", func(t *testing.T) { runBoth(t, Tool{Write, false}, "-l", "4", "-q", "2") })
	t.Run("send_bw-l5", func(t *testing.T) { runBoth(t, Tool{Send, false}, "-l", "5") })
	t.Run("read_lat-U", func(t *testing.T) {
		_, cout := runBoth(t, Tool{Read, true}, "-U")
		if !strings.Contains(cout, "#, usec\n1, ") || !strings.Contains(cout, "\n19, ") {
			t.Errorf("-U listed no latencies:\n%s", cout)
		}
	})
	// rdma_cm: the exchange (-z), and the QPs too (-R).
	t.Run("read_bw-z", func(t *testing.T) { runBoth(t, Tool{Read, false}, "-z") })
	t.Run("write_bw-R-q2", func(t *testing.T) { runBoth(t, Tool{Write, false}, "-R", "-q", "2") })
	t.Run("send_lat-R", func(t *testing.T) { runBoth(t, Tool{Send, true}, "-R") })
	t.Run("atomic_lat-R", func(t *testing.T) { runBoth(t, Tool{Atomic, true}, "-R") })
}

func runBoth(t *testing.T, tool Tool, extra ...string) (server, client string) {
	return runBothTo(t, tool, "127.0.0.1", extra...)
}

// runBothTo is runBoth with the client connecting to addr.
func runBothTo(t *testing.T, tool Tool, addr string, extra ...string) (server, client string) {
	if tool == (Tool{Write, true}) && raceEnabled {
		t.Skip("ib_write_lat watches memory the device writes by RDMA, which the race detector reports; run without -race")
	}
	args := append(append([]string{}, extra...), "-d", "rxe_lo", "-n", "20", "-s", "1024", "-p", "")
	port := freePort(t)
	args[len(args)-1] = itoa(port)
	so, err := ParseArgs(tool, args)
	if err != nil {
		t.Fatal(err)
	}
	co, _ := ParseArgs(tool, append(args, addr))
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	var sout, cout syncBuf
	done := make(chan error, 1)
	go func() { done <- Run(ctx, so, &sout, &sout) }()
	if err := runClient(ctx, co, &cout); err != nil {
		cancel()
		t.Fatalf("client: %v\n%s\nserver: %v\n%s", err, cout.String(), <-done, sout.String())
	}
	if err := <-done; err != nil {
		t.Fatalf("server: %v\n%s", err, sout.String())
	}
	for side, out := range map[string]string{"client": cout.String(), "server": sout.String()} {
		if tool.Lat && (tool.Verb == Read || tool.Verb == Atomic) && side == "server" {
			continue
		}
		size := "1024"
		if tool.Verb == Atomic {
			size = "8"
		}
		if !strings.Contains(out, "\n "+size+" ") {
			t.Errorf("%s printed no row:\n%s", side, out)
		}
	}
	return sout.String(), cout.String()
}

// --run_infinitely prints a row every -D seconds, on the ib_send_bw
// client and server both, until stopped.
func TestRunInfinitelyPrintsARowEachPeriod(t *testing.T) {
	port := itoa(freePort(t))
	args := []string{"-d", "rxe_lo", "-s", "512", "--run_infinitely", "-D", "1", "-p", port}
	so, _ := ParseArgs(Tool{Send, false}, args)
	co, _ := ParseArgs(Tool{Send, false}, append(args, "127.0.0.1"))
	var sout, cout syncBuf
	ctx, cancel := context.WithTimeout(context.Background(), 3500*time.Millisecond)
	defer cancel()
	done := make(chan error, 1)
	go func() { done <- Run(ctx, so, &sout, &sout) }()
	if err := runClient(ctx, co, &cout); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("client: %v, want the deadline's error\n%s", err, cout.String())
	}
	<-done
	for side, out := range map[string]string{"client": cout.String(), "server": sout.String()} {
		if n := strings.Count(out, "\n 512 "); n < 2 {
			t.Errorf("%s printed %d rows in 3 s of -D 1:\n%s", side, n, out)
		}
	}
}

func itoa(n int) string { return strconv.Itoa(n) }

// runClient runs the client of a pair whose server was just started in
// another goroutine, trying again while the server is not yet listening
// (a loaded host may take it a while).
func runClient(ctx context.Context, co *Options, out io.Writer) error {
	for {
		err := Run(ctx, co, out, out)
		if !errors.Is(err, syscall.ECONNREFUSED) || ctx.Err() != nil {
			return err
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func netipMust(s string) netip.Addr { return netip.MustParseAddr(s) }

// A peer that goes away mid-test ends the other side's run with an error
// within the grace the watch gives, instead of a wait for ever.
func TestPeerGoneEndsTheRun(t *testing.T) {
	port := itoa(freePort(t))
	args := []string{"-d", "rxe_lo", "-n", "10000000", "-s", "64", "-p", port}
	so, _ := ParseArgs(Tool{Send, false}, args)
	co, _ := ParseArgs(Tool{Send, false}, append(args, "127.0.0.1"))
	var sout, cout syncBuf
	done := make(chan error, 1)
	go func() { done <- Run(context.Background(), so, &sout, &sout) }()
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	if err := runClient(ctx, co, &cout); err == nil {
		t.Fatal("the client finished ten million sends in a second")
	}
	select {
	case err := <-done:
		if !errors.Is(err, errPeerGone) {
			t.Fatalf("server: %v, want %v", err, errPeerGone)
		}
	case <-time.After(peerGrace + 10*time.Second):
		t.Fatal("the server still waits for a client that is gone")
	}
}

// A peer that is not perftest is refused with a clear message: one that
// answers something else at once, and one that answers nothing within
// the time allowed.
func TestNotPerftestPeerIsRefused(t *testing.T) {
	defer func(d time.Duration) { helloTimeout = d }(helloTimeout)
	helloTimeout = 500 * time.Millisecond
	for _, tc := range []struct {
		name, says, want string
	}{
		{"http", "HTTP/1.1 200 OK\r\n\r\n", "not compatible with the peer's perftest version"},
		{"silent", "", "sent no perftest version"},
		{"old", "5.60\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00", "not compatible with the peer's perftest version \"5.60\""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ln, err := net.Listen("tcp4", "127.0.0.1:0")
			if err != nil {
				t.Fatal(err)
			}
			defer ln.Close()
			go func() {
				c, err := ln.Accept()
				if err != nil {
					return
				}
				defer c.Close()
				c.Write([]byte(tc.says))
				time.Sleep(2 * time.Second)
			}()
			o, _ := ParseArgs(Tool{Write, false}, []string{"-d", "rxe_lo", "-p", itoa(ln.Addr().(*net.TCPAddr).Port), "127.0.0.1"})
			var out syncBuf
			start := time.Now()
			err = Run(context.Background(), o, &out, &out)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("Run: %v, want an error saying %q", err, tc.want)
			}
			if d := time.Since(start); d > 1900*time.Millisecond {
				t.Errorf("refused after %v", d)
			}
		})
	}
}

// The out-of-band exchange runs over IPv6 too: the server listens on
// both families, the client dials what the name resolves to.
func TestExchangeOverIPv6(t *testing.T) {
	ln, err := net.Listen("tcp6", "[::1]:0")
	if err != nil {
		t.Skipf("no IPv6 loopback: %v", err)
	}
	ln.Close()
	runBothTo(t, Tool{Send, false}, "::1")
	runBothTo(t, Tool{Read, false}, "::1", "-z")
	runBothTo(t, Tool{Write, true}, "::1") // last: skipped under -race
}

// perftest sends no QP count, but each side finds out, from the keys,
// that the other uses another -q, and both fail at once with a clear
// error instead of reading a key as a report (or waiting for ever).
func TestMismatchedQPCountsFailOnBothSides(t *testing.T) {
	for _, c := range []struct {
		tool           Tool
		server, client string
		extra          []string
	}{
		{Tool{Write, false}, "2", "4", nil},
		{Tool{Write, false}, "4", "2", nil},
		{Tool{Send, false}, "2", "1", nil},
		{Tool{Send, false}, "1", "3", nil},
		{Tool{Read, false}, "1", "2", nil},
		{Tool{Send, false}, "2", "3", []string{"-z"}},
		{Tool{Send, false}, "2", "1", []string{"-c", "UD"}},
		{Tool{Write, false}, "2", "1", []string{"-R"}},
		{Tool{Write, false}, "1", "2", []string{"-R"}},
	} {
		name := fmt.Sprintf("%s-q%s-vs-q%s%s", c.tool.Name(), c.server, c.client, strings.Join(c.extra, ""))
		t.Run(name, func(t *testing.T) {
			port := itoa(freePort(t))
			args := append([]string{"-d", "rxe_lo", "-n", "20", "-s", "1024", "-p", port}, c.extra...)
			so, err := ParseArgs(c.tool, append(args, "-q", c.server))
			if err != nil {
				t.Fatal(err)
			}
			co, err := ParseArgs(c.tool, append(args, "-q", c.client, "127.0.0.1"))
			if err != nil {
				t.Fatal(err)
			}
			ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
			defer cancel()
			var sout, cout syncBuf
			done := make(chan error, 1)
			go func() { done <- Run(ctx, so, &sout, &sout) }()
			cerr := runClient(ctx, co, &cout)
			serr := <-done
			for side, err := range map[string]error{"server": serr, "client": cerr} {
				if err == nil || !strings.Contains(err.Error(), "parameters mismatch") || ctx.Err() != nil {
					t.Errorf("%s: %v, want a parameters mismatch\nserver:\n%s\nclient:\n%s", side, err, sout.String(), cout.String())
				}
			}
		})
	}
}

// As perftest, a server checks its device, port and GID index before it
// listens: a wrong one fails at once, with no client to wait for.
func TestBadDeviceFailsBeforeListening(t *testing.T) {
	for _, c := range []struct {
		args []string
		says string
	}{
		{[]string{"-d", "nosuch"}, "IB device nosuch not found"},
		{[]string{"-d", "rxe_lo", "-i", "2"}, "unable to query port 2"},
		{[]string{"-d", "rxe_lo", "-x", "99"}, "GID index 99"},
		{[]string{"-d", "nosuch", "-R"}, "IB device nosuch not found"},
	} {
		for _, tool := range []Tool{{Send, false}, {Write, true}} {
			o, err := ParseArgs(tool, append(c.args, "-p", itoa(freePort(t))))
			if err != nil {
				t.Fatal(err)
			}
			ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
			var out syncBuf
			err = Run(ctx, o, &out, &out)
			cancel()
			if err == nil || !strings.Contains(err.Error(), c.says) || strings.Contains(out.String(), "Waiting for client") {
				t.Errorf("%s %q: %v, want %q before listening\n%s", tool.Name(), c.args, err, c.says, out.String())
			}
		}
	}
}

// --plot needs -a (a chart of sizes) and a path it can write, both
// checked before the run; a path that is fine is left as it was.
func TestPlotIsCheckedBeforeTheRun(t *testing.T) {
	for _, c := range []struct {
		tool Tool
		args []string
	}{
		{Tool{Write, false}, []string{"--plot", "x.svg"}},
		{Tool{Send, true}, []string{"--plot", "x.svg", "-s", "8"}},
		{Tool{Atomic, false}, []string{"--plot", "x.svg", "-a"}},
	} {
		if _, err := ParseArgs(c.tool, c.args); err == nil || !strings.Contains(err.Error(), "--plot") {
			t.Errorf("%s %q: %v, want a --plot error", c.tool.Name(), c.args, err)
		}
	}
	dir := t.TempDir()
	o, err := ParseArgs(Tool{Write, false}, []string{"-d", "rxe_lo", "-a", "--plot", dir + "/no/such/dir/x.svg", "-p", itoa(freePort(t))})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
	defer cancel()
	var out syncBuf
	if err := Run(ctx, o, &out, &out); err == nil || !strings.HasPrefix(err.Error(), "--plot: ") || strings.Contains(out.String(), "Waiting for client") {
		t.Errorf("unwritable --plot: %v\n%s", err, out.String())
	}
	fresh, old := dir+"/fresh.svg", dir+"/old.svg"
	if err := os.WriteFile(old, []byte("kept"), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, p := range []string{fresh, old} {
		// A server with no client: the check passes, and the run
		// waits until it is stopped.
		o, err := ParseArgs(Tool{Write, false}, []string{"-d", "rxe_lo", "-a", "--plot", p, "-p", itoa(freePort(t))})
		if err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
		var out syncBuf
		err = Run(ctx, o, &out, &out)
		cancel()
		if err == nil || strings.Contains(err.Error(), "--plot") || !strings.Contains(out.String(), "Waiting for client") {
			t.Errorf("--plot %s: %v\n%s", p, err, out.String())
		}
	}
	if _, err := os.Stat(fresh); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("the check left %s behind: %v", fresh, err)
	}
	if b, _ := os.ReadFile(old); string(b) != "kept" {
		t.Errorf("the check changed %s: %q", old, b)
	}
}
