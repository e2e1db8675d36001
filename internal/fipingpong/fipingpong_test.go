package fipingpong

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/rdmago/rdmago/fabric"
	_ "github.com/rdmago/rdmago/fabric/tcp"
	_ "github.com/rdmago/rdmago/fabric/vrb"
	"github.com/rdmago/rdmago/internal/vmtest"
	_ "github.com/rdmago/rdmago/rxe" // the software device the verbs provider runs on
)

func TestRowsPrintAsFiPingpongPrintsThem(t *testing.T) {
	for _, c := range []struct {
		size, iters, ack int
		usec             int64
		want             string
	}{
		// A real fi_pingpong row.
		{64, 10, 10, 1126, "64      10      =10      1.2k        0.00s      1.14      56.30       0.02\n"},
		{1048576, 100, 100, 550000, "1m      100     =100     200m        0.55s    381.30    2750.00       0.00\n"},
		{4096, 1000, 998, 20000, "4k      1k      +2       7.8m        0.02s    409.60      10.00       0.10\n"},
		{0, 10, 12, 100, "0       10      -2       0           0.00s      0.00       5.00       0.20\n"},
	} {
		if got := Row(c.size, c.iters, c.ack, time.Duration(c.usec)*time.Microsecond); got != c.want {
			t.Errorf("Row(%d, %d, %d, %dµs)\n got %q\nwant %q", c.size, c.iters, c.ack, c.usec, got, c.want)
		}
	}
}

func TestSizeAllHas46SizesUpTo6MiB(t *testing.T) {
	s := allSizes()
	if len(s) != 46 || s[0] != 0 || s[1] != 1 || s[2] != 2 || s[3] != 3 || s[45] != 6<<20 {
		t.Fatalf("-S all: %d sizes %v", len(s), s)
	}
}

func TestBadFlagsAreRefused(t *testing.T) {
	for _, args := range [][]string{
		{"-e", "stream"},
		{"-I", "0"},
		{"-I", "x"},
		{"-S", "7000000"},
		{"-P", "70000"},
		{"-h"},
		{"-Z"},
		{"a", "b"},
		{"-m", "bogus"},
		{"-m", ""},
		{"-p", "bogus"},
		{"-p", "verbs", "-d", "nosuch"},
		{"-d", "nosuch"},
		{"-B", "0"},
	} {
		var errb bytes.Buffer
		if _, err := ParseArgs(args, &errb); err == nil {
			t.Errorf("%v: accepted", args)
		}
	}
	o, err := ParseArgs([]string{"-p", "tcp", "-e", "MSG", "-S", "all", "-c", "-B", "0", "host"}, &bytes.Buffer{})
	if err != nil || o.EPType.String() != "FI_EP_MSG" || len(o.Sizes) != 46 || !o.Check || o.Server != "host" || o.SrcPort != 0 {
		t.Fatalf("parsed %+v, %v", o, err)
	}
	if o, _ := ParseArgs(nil, &bytes.Buffer{}); o.SrcPort != DefaultPort || o.EPType.String() != "FI_EP_DGRAM" || o.Iters != 10 {
		t.Fatalf("defaults %+v", o)
	}
}

func TestTransferModeIsMsgOrTagged(t *testing.T) {
	for _, c := range []struct {
		arg    string
		tagged bool
	}{{"msg", false}, {"tagged", true}, {"TAGGED", true}, {"Msg", false}} {
		o, err := ParseArgs([]string{"-m", c.arg}, &bytes.Buffer{})
		if err != nil || o.Tagged != c.tagged {
			t.Errorf("-m %s: %+v, %v; want tagged %v", c.arg, o, err, c.tagged)
		}
	}
	var errb bytes.Buffer
	if _, err := ParseArgs([]string{"-m", "bogus"}, &errb); err != ErrUsage || !strings.Contains(errb.String(), `unknown transfer mode "bogus"`) {
		t.Errorf("-m bogus: %v, stderr %q", err, errb.String())
	}
}

// TestUnknownProviderOrDomainFailsAtOnce: a -p or -d no fi_getinfo entry
// has fails in ParseArgs, before any control channel, with -FI_ENODATA.
func TestUnknownProviderOrDomainFailsAtOnce(t *testing.T) {
	for _, args := range [][]string{{"-p", "bogus"}, {"-p", "verbs", "-d", "nosuch"}, {"-d", "nosuch"}, {"-p", "bogus", "127.0.0.1"}} {
		_, err := ParseArgs(args, &bytes.Buffer{})
		if ExitStatus(err) != 61 || !strings.Contains(fmt.Sprint(err), "ret=-61") {
			t.Errorf("%v: %v (exit %d), want fi_getinfo's -61", args, err, ExitStatus(err))
		}
	}
	if _, err := ParseArgs([]string{"-p", "tcp", "-e", "msg"}, &bytes.Buffer{}); err != nil {
		t.Errorf("-p tcp: %v", err)
	}
}

func TestExitStatusIsNeverZeroOnError(t *testing.T) {
	for _, c := range []struct {
		err  error
		want int
	}{
		{nil, 0},
		{fabric.ErrNoData, 61},
		{fmt.Errorf("fi_getinfo: %w", fabric.ErrNoData), 61},
		{fabric.ErrOther, 255},
		{fabric.ErrTrunc, 255},
		{fabric.Errno(512), 255},
		{fabric.Errno(0), 1},
		{fabric.Errno(-5), 1},
		{fmt.Errorf("ctrl/read: %w", io.EOF), 1},
		{ErrUsage, 1},
	} {
		if got := ExitStatus(c.err); got != c.want {
			t.Errorf("ExitStatus(%v) = %d, want %d", c.err, got, c.want)
		}
	}
}

// TestClientFailsWhenServerDropsTheChannel: a server that closes the
// control channel at once (one that failed in fi_getinfo) leaves the
// client with an error whose exit status is not 0.
func TestClientFailsWhenServerDropsTheChannel(t *testing.T) {
	ln, err := net.Listen("tcp4", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	go func() {
		if c, err := ln.Accept(); err == nil {
			c.Close()
		}
	}()
	port := strconv.Itoa(ln.Addr().(*net.TCPAddr).Port)
	cli := runGo([]string{"-p", "tcp", "-e", "msg", "-P", port, "127.0.0.1"})
	err = <-cli.done
	if st := ExitStatus(err); st == 0 || !strings.Contains(cli.errw.String(), "ctrl/read") {
		t.Fatalf("client: %v, exit %d, stderr %q", err, st, cli.errw.String())
	}
}

// freePort returns a TCP port nothing listens on now.
func freePort(t *testing.T) int {
	ln, err := net.Listen("tcp4", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().(*net.TCPAddr).Port
}

// syncBuffer is a bytes.Buffer for concurrent use.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}
func (s *syncBuffer) String() string { s.mu.Lock(); defer s.mu.Unlock(); return s.b.String() }

// side runs one side as a goroutine (rdmago) or a process (the C
// program, when cmd is set).
type side struct {
	out, errw syncBuffer
	done      chan error
	err       error // what came on done, once pingpongOnce took it
	ended     bool
}

// status is the exit status the side ended with, -1 if it did not end.
func (s *side) status() int {
	var ee *exec.ExitError
	switch {
	case !s.ended:
		return -1
	case errors.As(s.err, &ee):
		return ee.ExitCode()
	}
	return ExitStatus(s.err)
}

func runGo(args []string) *side {
	s := &side{done: make(chan error, 1)}
	o, err := ParseArgs(args, &s.errw)
	if err != nil {
		s.done <- err
		return s
	}
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
		defer cancel()
		s.done <- Run(ctx, o, &s.out, &s.errw)
	}()
	return s
}

func runC(t *testing.T, args []string) *side {
	s := &side{done: make(chan error, 1)}
	cmd := exec.Command("fi_pingpong", args...)
	cmd.Stdout, cmd.Stderr = &s.out, &s.errw
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	// A C program left waiting (a failed test) must not outlive it.
	t.Cleanup(func() { cmd.Process.Kill() })
	go func() { s.done <- cmd.Wait() }()
	return s
}

// rows returns the result rows of a table: size, #sent and #ack.
func rows(out string) []string {
	var r []string
	for _, l := range strings.Split(out, "\n") {
		f := strings.Fields(l)
		if len(f) == 8 && f[0] != "bytes" {
			r = append(r, f[0]+" "+f[1]+" "+f[2])
		}
	}
	return r
}

func pingpong(t *testing.T, goServes, withC bool, flags string, wantRows int) {
	t.Helper()
	// A port found free can be taken before the server binds it (another
	// test's listener, a connection's ephemeral port): then the run is
	// made again on another.
	for try := 1; ; try++ {
		srv, cli, err := pingpongOnce(t, goServes, withC, flags)
		if err != nil && try < 3 && portTaken(srv.errw.String()) {
			t.Logf("try %d: the server's port was taken; again on another", try)
			continue
		}
		if err != nil {
			t.Fatalf("%v\nserver:\n%s%s\nclient:\n%s%s", err, srv.out.String(), srv.errw.String(), cli.out.String(), cli.errw.String())
		}
		sr, cr := rows(srv.out.String()), rows(cli.out.String())
		if len(sr) != wantRows || fmt.Sprint(sr) != fmt.Sprint(cr) {
			t.Fatalf("rows differ or are missing (want %d)\nserver: %v\nclient: %v", wantRows, sr, cr)
		}
		for _, r := range sr {
			f := strings.Fields(r)
			if f[2] != "="+f[1] {
				t.Fatalf("row %q: counts differ", r)
			}
		}
		return
	}
}

// pingpongOnce runs a server and a client of fi_pingpong with flags on a
// free port and waits for both.
func pingpongOnce(t *testing.T, goServes, withC bool, flags string) (srv, cli *side, err error) {
	t.Helper()
	port := strconv.Itoa(freePort(t))
	srvArgs := append(strings.Fields(flags), "-B", port)
	cliArgs := append(strings.Fields(flags), "-P", port, "127.0.0.1")
	start := func(goSide bool, args []string) *side {
		if goSide || !withC {
			return runGo(args)
		}
		return runC(t, args)
	}
	srv = start(goServes, srvArgs)
	if !waitListening(t, port, srv.errw.String) { // the server's control listener
		<-srv.done
		return srv, &side{}, errors.New("the server's port was taken")
	}
	cli = start(!goServes, cliArgs)
	for _, s := range []*side{cli, srv} {
		wait := 90 * time.Second
		if err != nil {
			wait = 2 * time.Second // the client failed: the server may wait for ever
		}
		select {
		case e := <-s.done:
			s.err, s.ended = e, true
			if e != nil && err == nil {
				err = e
			}
		case <-time.After(wait):
			if err != nil {
				return srv, cli, err
			}
			t.Fatalf("timed out\nserver:\n%s%s\nclient:\n%s%s", srv.out.String(), srv.errw.String(), cli.out.String(), cli.errw.String())
		}
	}
	return srv, cli, err
}

// waitListening waits, for 10 s at most, until a TCP socket listens on
// port (a state 0A line in /proc/net/tcp): the server's control
// listener, which a probing connection would take for its client's.
// Without /proc it waits 300 ms.
//
// out is the server's output so far. It returns false, at once, when the
// server says its port is taken (a port found free can be taken before
// the server binds it: another test's listener, a connection's ephemeral
// port), for the caller to try another; and fails the test, with that
// output, if nothing listens after 10 s.
func waitListening(t *testing.T, port string, out func() string) bool {
	t.Helper()
	p, _ := strconv.Atoi(port)
	want := fmt.Sprintf(":%04X ", p)
	deadline := time.Now().Add(10 * time.Second)
	for time.Now().Before(deadline) {
		if portTaken(out()) {
			return false
		}
		b, err := os.ReadFile("/proc/net/tcp")
		if err != nil {
			time.Sleep(300 * time.Millisecond)
			return true
		}
		for _, line := range strings.Split(string(b), "\n") {
			f := strings.Fields(line)
			if len(f) > 3 && strings.HasSuffix(f[1]+" ", want) && f[3] == "0A" {
				return true
			}
		}
		time.Sleep(20 * time.Millisecond)
	}
	t.Fatalf("nothing listens on port %s after 10 s; the server said:\n%s", port, out())
	return false
}

// portTaken reports whether a server's output says its port was taken.
func portTaken(out string) bool { return strings.Contains(out, "address already in use") }

func TestGoPingpongOverTCP(t *testing.T) {
	pingpong(t, true, false, "-p tcp -e msg -I 50 -c", 6)
	pingpong(t, true, false, "-p tcp -e msg -I 5 -c -S all", 46)
	pingpong(t, true, false, "-p tcp -e rdm -I 50 -c", 6)
	pingpong(t, true, false, "-p tcp -e rdm -m tagged -I 50 -c", 6)
}

// The verbs provider on the software device, rdmago against rdmago: the
// sizes around the inject size (256) and the largest of -S all.
func TestGoPingpongOverVerbs(t *testing.T) {
	pingpong(t, true, false, "-p verbs -e msg -I 20 -c", 6)
	pingpong(t, true, false, "-p verbs -e msg -I 10 -c -S 255", 1)
	pingpong(t, true, false, "-p verbs -e msg -I 10 -c -S 256", 1)
	pingpong(t, true, false, "-p verbs -e msg -I 2 -c -S 6291456", 1)
}

// TestGoPingpongOverVerbsDatagrams: the default endpoint type, FI_EP_DGRAM,
// rdmago against rdmago as two processes on software devices of their
// own (127.0.0.2 serving, 127.0.0.1, MTU 4096) at a RoCE port of their
// own: the default sizes up to the MTU; and, as in C, a -S above it
// finds no entry (the hints ask for max_msg_size -S), the server exiting
// with ENODATA and the client with ECONNABORTED. (Datagrams are not
// retransmitted: devices of other tests sharing a port, whose leader may
// come and go, would lose some.)
func TestGoPingpongOverVerbsDatagrams(t *testing.T) {
	bin := vmtest.BuildRdmago(t)
	rxePort := vmtest.FreeUDPPort(t, "127.0.0.2", "127.0.0.1")
	for _, c := range []struct {
		flags        string
		rows         int
		sexit, cexit int
	}{
		{"-I 20 -c", 4, 0, 0},
		{"-I 5 -c -S 4097", 0, 61, 103},
	} {
		for try := 1; ; try++ {
			if dgramRun(t, bin, rxePort, c.flags, c.rows, c.sexit, c.cexit) || try == 3 {
				break
			}
			t.Logf("%s, try %d: the server's port was taken; again on another", c.flags, try)
		}
	}
}

// dgramRun is one run of TestGoPingpongOverVerbsDatagrams; false if the
// server's port was taken.
func dgramRun(t *testing.T, bin, rxePort, flagList string, wantRows, sexit, cexit int) bool {
	t.Helper()
	ctrl := strconv.Itoa(freePort(t))
	cmd := func(addr string, args ...string) (*exec.Cmd, *syncBuffer) {
		ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
		t.Cleanup(cancel)
		c := exec.CommandContext(ctx, bin, append([]string{"fi_pingpong", "-p", "verbs", "-d", "rxe_lo-dgram"}, args...)...)
		c.Env = append(os.Environ(), "RDMAGO_RXE_ADDR="+addr, "RDMAGO_RXE_PORT="+rxePort)
		var out syncBuffer
		c.Stdout, c.Stderr = &out, &out
		return c, &out
	}
	flags := strings.Fields(flagList)
	srv, sout := cmd("127.0.0.2", append(flags, "-B", ctrl)...)
	cli, cout := cmd("127.0.0.1", append(flags, "-P", ctrl, "127.0.0.2")...)
	if err := srv.Start(); err != nil {
		t.Fatal(err)
	}
	if !waitListening(t, ctrl, sout.String) { // the server's control listener
		srv.Wait()
		return false
	}
	cerr := cli.Run()
	serr := srv.Wait()
	if srv.ProcessState.ExitCode() != sexit || cli.ProcessState.ExitCode() != cexit {
		t.Fatalf("%s: server %v, client %v; want exit statuses %d and %d\nserver:\n%s\nclient:\n%s",
			flagList, serr, cerr, sexit, cexit, sout.String(), cout.String())
	}
	sr, cr := rows(sout.String()), rows(cout.String())
	if len(sr) != wantRows || fmt.Sprint(sr) != fmt.Sprint(cr) {
		t.Fatalf("%s: rows differ or are missing (want %d)\nserver: %v\nclient: %v", flagList, wantRows, sr, cr)
	}
	return true
}

// TestDatagramEndpointsAreNotOffered: fi_pingpong's default endpoint
// type, FI_EP_DGRAM, has no tcp provider; as in C, the server takes the
// client's control connection, then fails in fi_getinfo with -61, and the
// client sees the control channel close.
func TestDatagramEndpointsAreNotOffered(t *testing.T) {
	port := strconv.Itoa(freePort(t))
	srv := runGo([]string{"-p", "tcp", "-B", port})
	if !waitListening(t, port, srv.errw.String) {
		t.Skip("the server's port was taken by another test")
	}
	cli := runGo([]string{"-p", "tcp", "-P", port, "127.0.0.1"})
	if err := <-srv.done; ExitStatus(err) != 61 || !strings.Contains(srv.errw.String(), "ret=-61") {
		t.Fatalf("server: exit %d, stderr %q", ExitStatus(err), srv.errw.String())
	}
	if err := <-cli.done; err == nil || !strings.Contains(cli.errw.String(), "ctrl/read") {
		t.Fatalf("client: %v, stderr %q", err, cli.errw.String())
	}
}

// TestInteropWithCFiPingpong runs rdmago's fi_pingpong against
// libfabric's (Debian: apt-get install libfabric-bin), both ways.
func TestInteropWithCFiPingpong(t *testing.T) {
	if _, err := exec.LookPath("fi_pingpong"); err != nil {
		t.Skip("libfabric's fi_pingpong is not installed (apt-get install libfabric-bin)")
	}
	for _, c := range []struct {
		flags string
		rows  int
	}{
		{"-p tcp -e msg -S 64 -I 1000 -c", 1},
		{"-p tcp -e msg -S 4096 -I 1000 -c", 1},
		{"-p tcp -e msg -S 1048576 -I 100 -c", 1},
		{"-p tcp -e msg -S all -I 10 -c", 46},
		{"-p tcp -e rdm -S 64 -I 1000 -c", 1},
		{"-p tcp -e rdm -S 65536 -I 200 -c", 1},
		{"-p tcp -e rdm -m tagged -I 100 -c", 6},
		// udp: datagrams up to 1472 bytes; the default sizes stop at 1 KiB.
		{"-p udp -S 64 -I 1000 -c", 1},
		{"-p udp -S 1472 -I 1000 -c", 1},
		{"-p udp -I 100 -c", 3},
		{"-p udp -S all -I 10 -c", 21},
		// sockets: C's provider takes milliseconds a message, so few.
		{"-p sockets -e msg -S 64 -I 50 -c", 1},
		{"-p sockets -e msg -I 4 -c", 6},
		{"-p sockets -e rdm -S 4096 -I 50 -c", 1},
		{"-p sockets -e rdm -I 4 -c", 6},
		{"-p sockets -e rdm -m tagged -S 65536 -I 20 -c", 1},
		{"-p sockets -e rdm -m tagged -I 4 -c", 6},
		{"-p sockets -S 64 -I 50 -c", 1},
		{"-p sockets -I 4 -c", 6},
	} {
		for _, goServes := range []bool{true, false} {
			name := "C server, rdmago client"
			if goServes {
				name = "rdmago server, C client"
			}
			t.Run(name+" "+c.flags, func(t *testing.T) { pingpong(t, goServes, true, c.flags, c.rows) })
		}
	}
}

// TestDatagramTooLargeFailsAsC: -S over a datagram's 1472 bytes finds no
// udp entry, on either side, and both programs exit as C's do: the server
// with ENODATA (61) from fi_getinfo, the client with ECONNABORTED (103)
// when the server's control connection closes.
func TestDatagramTooLargeFailsAsC(t *testing.T) {
	for _, goServes := range []bool{true, false} {
		srv, cli, err := pingpongOnce(t, goServes, true, "-p udp -S 4096 -I 10")
		if err == nil {
			t.Fatalf("a 4096-byte udp run succeeded")
		}
		if got := []int{srv.status(), cli.status()}; got[0] != 61 || got[1] != 103 {
			t.Errorf("Go serves %v: exit statuses %v, want [61 103]\nserver: %s\nclient: %s", goServes, got, srv.errw.String(), cli.errw.String())
		}
	}
}

func TestDataCheckCatchesACorruptByte(t *testing.T) {
	var tx, rx session
	for _, n := range []int{0, 1, 61, 62, 63, 200, 5000} {
		b := make([]byte, n)
		tx.fill(b)
		if err := rx.check(b); err != nil {
			t.Fatalf("%d bytes: %v", n, err)
		}
	}
	b := make([]byte, 300)
	tx.fill(b)
	b[250] ^= 1
	if err := rx.check(b); err == nil || !strings.Contains(err.Error(), "byte 250") {
		t.Fatalf("corrupt byte: %v", err)
	}
	// The pattern is the C program's: buffer k starts at (k*7) % 62.
	var s session
	s.filled = 2
	b = make([]byte, 4)
	s.fill(b)
	if string(b) != "efgh" {
		t.Fatalf("third buffer starts %q, want efgh", b)
	}
}

// FuzzParseArgs: any command line is either refused (an error, or the
// usage printed) or parsed into options Run takes: no panic, and every
// port, count and size within range.
func FuzzParseArgs(f *testing.F) {
	for _, s := range []string{
		"", "-h", "-p\x00tcp\x00-e\x00msg", "-p\x00bogus", "-d\x00nosuch", "-m\x00tagged", "-m\x00bogus", "-S\x00all", "-S\x000", "-S\x001",
		"-S\x0015", "-S\x0016", "-S\x002147483648", "-S\x009223372036854775808", "-S\x00-1", "-S\x00x", "-I\x001", "-I\x00-1", "-B\x000\x00host",
		"-P\x0065535", "-6\x00::1", "-cv", "-e\x00RDM", "a\x00b", "-p\x00verbs\x00-d\x00rxe_lo",
	} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, line string) {
		var args []string
		if line != "" {
			args = strings.Split(line, "\x00")
		}
		o, err := ParseArgs(args, io.Discard)
		if err != nil {
			if ExitStatus(err) == 0 {
				t.Fatalf("%q: %v exits 0", args, err)
			}
			return
		}
		switch {
		case o.SrcPort < 0 || o.SrcPort > 65535 || o.DstPort < 1 || o.DstPort > 65535:
			t.Fatalf("%q: ports %d, %d", args, o.SrcPort, o.DstPort)
		case o.Iters < 1 || len(o.Sizes) == 0:
			t.Fatalf("%q: %d iterations, sizes %v", args, o.Iters, o.Sizes)
		}
		for _, n := range o.Sizes {
			if n < 0 || n > maxDataMsg {
				t.Fatalf("%q: size %d", args, n)
			}
		}
	})
}
