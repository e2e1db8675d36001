//go:build unix

package examples_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"runtime"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

// The OFA course's programs (seed 003) run as a person runs them: the
// server on 127.0.0.2, the client on 127.0.0.1, each its own process.

var (
	listening   = regexp.MustCompile(`: rdma_listen listening on `)
	accepted    = regexp.MustCompile(`: rdma_accept accepted `)
	connectedTo = regexp.MustCompile(`: rdma_connect connected to `)
)

// coursePair starts prog's server, waits until it listens, and starts its
// client, both with the given flags after the role and the server's
// address.
func coursePair(t *testing.T, ctx context.Context, prog string, srvArgs, cliArgs string) (srv, cli *proc) {
	t.Helper()
	dir := binaries(t)
	port := freeRXEPort(t)
	bin := filepath.Join(dir, prog)
	srv = start(t, ctx, bin, serverAddr, port, append([]string{"server", "-a", serverAddr}, strings.Fields(srvArgs)...)...)
	srv.waitFor(t, listening)
	cli = start(t, ctx, bin, clientAddr, port, append([]string{"client", "-a", serverAddr}, strings.Fields(cliArgs)...)...)
	return srv, cli
}

// TestCoursePingPongsRunAsTwoProcesses runs each ping-pong lesson with the
// same count and size on both sides and every pong checked: both sides
// count the round trips and exit 0, and the lessons with a completion
// channel report their poll statistics.
func TestCoursePingPongsRunAsTwoProcesses(t *testing.T) {
	for _, tc := range []struct {
		prog  string
		stats bool
	}{
		{"ping-sr-0", false},
		{"ping-sr-1", false},
		{"ping-sr-2e", false},
		{"ping-sr-2", false},
		{"ping-sr-3", true},
		{"ping-sr-4", true},
	} {
		t.Run(tc.prog, func(t *testing.T) {
			ctx := testCtx(t)
			srv, cli := coursePair(t, ctx, tc.prog, "-c 40 -s 200", "-c 40 -s 200 -V")
			want := []string{"40 round trips of 200 bytes in "}
			if tc.stats {
				want = append(want, "n_1st_poll_zero ", "n_2nd_poll_non_zero ", "cq events ")
			}
			cli.check(t, append(want, tc.prog+" client: rdma_connect connected to "+serverAddr)...)
			srv.check(t, append(want, tc.prog+" server: rdma_accept accepted "+clientAddr)...)
		})
	}
}

// TestCoursePingSR1ServerTakesTheClientsCountAndSize: from ping-sr-1 on,
// the agent runs the client's count and size, sent in the connect info,
// not its own options.
func TestCoursePingSR1ServerTakesTheClientsCountAndSize(t *testing.T) {
	ctx := testCtx(t)
	srv, cli := coursePair(t, ctx, "ping-sr-1", "-c 3 -s 10", "-c 7 -s 300 -V")
	cli.check(t, "7 round trips of 300 bytes")
	srv.check(t, "ping-sr-1 server: client count 7", "ping-sr-1 server: client data_size 300", "7 round trips of 300 bytes")
}

// TestCourseBlastsStreamOneWay runs both blasts with a window of SENDs in
// flight (the client's window larger than the server's, so that the
// client outruns the reposted receives) and every message's pattern
// checked; each side reports the throughput it saw.
func TestCourseBlastsStreamOneWay(t *testing.T) {
	for _, prog := range []string{"blast-sr-2e", "blast-sr-2"} {
		t.Run(prog, func(t *testing.T) {
			ctx := testCtx(t)
			srv, cli := coursePair(t, ctx, prog, "-w 8", "-c 2000 -s 4096 -w 32 -V")
			cli.check(t, prog+" client: sent 2000 messages of 4096 bytes (8.192 MB) in ", " MB/s")
			srv.check(t, prog+" server: client count 2000", prog+" server: received 2000 messages of 4096 bytes (8.192 MB) in ", " MB/s")
		})
	}
}

// exitsFailingWithin waits up to d for p to end, and checks that it ended
// with status 1 after printing every string of want.
func exitsFailingWithin(t *testing.T, p *proc, d time.Duration, want ...string) {
	t.Helper()
	ended := make(chan error, 1)
	go func() { ended <- p.wait() }()
	var err error
	select {
	case err = <-ended:
	case <-time.After(d):
		t.Fatalf("%s still runs %v after its peer went away:\n%s", p.name, d, p.output())
	}
	var exit *exec.ExitError
	if !errors.As(err, &exit) || exit.ExitCode() != 1 {
		t.Errorf("%s ended with %v, want exit status 1:\n%s", p.name, err, p.output())
	}
	for _, w := range want {
		if !strings.Contains(p.output(), w) {
			t.Errorf("%s printed no %q:\n%s", p.name, w, p.output())
		}
	}
}

// TestCourseSurvivorReportsAKilledPeer: from ping-sr-2 on, a side whose
// peer is killed mid-run (SIGKILL: no disconnect request leaves it) says
// so, ECONNRESET, and exits with status 1 within a few seconds, whether
// it was waiting for a pong or sending one.
func TestCourseSurvivorReportsAKilledPeer(t *testing.T) {
	for _, prog := range []string{"ping-sr-2", "ping-sr-3", "ping-sr-4"} {
		for _, victim := range []string{"client", "server"} {
			t.Run(prog+"/"+victim+" killed", func(t *testing.T) {
				ctx := testCtx(t)
				srv, cli := coursePair(t, ctx, prog, "", "-c 100000000 -s 64")
				srv.waitFor(t, accepted)
				cli.waitFor(t, connectedTo)
				time.Sleep(300 * time.Millisecond) // ping-ponging
				dead, survivor := cli, srv
				if victim == "server" {
					dead, survivor = srv, cli
				}
				dead.cmd.Process.Kill()
				exitsFailingWithin(t, survivor, 15*time.Second, "connection reset by peer")
			})
		}
	}
}

// TestCourseInterruptedClientDisconnects: a client interrupted with
// SIGTERM disconnects before it exits, as the kernel would for a C
// program, and ping-sr-2's CM event goroutine hands the agent the
// DISCONNECTED event at once.
func TestCourseInterruptedClientDisconnects(t *testing.T) {
	ctx := testCtx(t)
	srv, cli := coursePair(t, ctx, "ping-sr-2", "", "-c 100000000 -s 64")
	srv.waitFor(t, accepted)
	cli.waitFor(t, connectedTo)
	time.Sleep(200 * time.Millisecond)
	cli.cmd.Process.Signal(syscall.SIGTERM)
	exitsFailingWithin(t, srv, 10*time.Second, "RDMA_CM_EVENT_DISCONNECTED", "connection reset by peer")
	exitsFailingWithin(t, cli, 10*time.Second, "interrupted")
}

// cpuTime returns the user and system time the process has used, from
// /proc/<pid>/stat (utime and stime, in clock ticks of 1/100 s).
func cpuTime(t *testing.T, pid int) time.Duration {
	t.Helper()
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		t.Fatal(err)
	}
	// The fields after the command's name, which is in parentheses:
	// state is field 3, utime 14 and stime 15.
	f := strings.Fields(string(b[strings.LastIndexByte(string(b), ')')+1:]))
	utime, err1 := strconv.ParseInt(f[11], 10, 64)
	stime, err2 := strconv.ParseInt(f[12], 10, 64)
	if err1 != nil || err2 != nil {
		t.Fatalf("/proc/%d/stat: %q", pid, b)
	}
	return time.Duration(utime+stime) * 10 * time.Millisecond
}

// idleShare measures the share of one CPU that p uses over a second in
// which it waits for its peer.
func idleShare(t *testing.T, p *proc) float64 {
	t.Helper()
	time.Sleep(100 * time.Millisecond)
	start, cpu0 := time.Now(), cpuTime(t, p.cmd.Process.Pid)
	time.Sleep(time.Second)
	cpu1, wall := cpuTime(t, p.cmd.Process.Pid), time.Since(start)
	return float64(cpu1-cpu0) / float64(wall)
}

// TestCourseWaitingSideSleeps: from ping-sr-3 on, a side that waits — the
// server for a client that pauses before its ping, the client for a
// server that pauses before its pong — sleeps in the completion channel
// (or, in ping-sr-4, in one select on both channels) and uses a small
// share of a CPU. ping-sr-2's busy poll is the contrast, logged only.
func TestCourseWaitingSideSleeps(t *testing.T) {
	if runtime.GOOS != "linux" {
		t.Skip("reads /proc/<pid>/stat")
	}
	for _, tc := range []struct {
		prog, waiter string
		busy         bool
	}{
		{"ping-sr-2", "server", true},
		{"ping-sr-3", "server", false},
		{"ping-sr-3", "client", false},
		{"ping-sr-4", "server", false},
		{"ping-sr-4", "client", false},
	} {
		t.Run(tc.prog+"/"+tc.waiter+" waits", func(t *testing.T) {
			ctx := testCtx(t)
			srvArgs, cliArgs := "", "-c 1 -P 2s"
			if tc.waiter == "client" {
				srvArgs, cliArgs = "-P 2s", "-c 1"
			}
			srv, cli := coursePair(t, ctx, tc.prog, srvArgs, cliArgs)
			waiter := srv
			if tc.waiter == "server" {
				srv.waitFor(t, accepted)
			} else {
				cli.waitFor(t, connectedTo)
				waiter = cli
			}
			share := idleShare(t, waiter)
			t.Logf("%s's waiting %s used %.1f%% of a CPU", tc.prog, tc.waiter, share*100)
			if !tc.busy && share > 0.2 {
				t.Errorf("%s's waiting %s used %.1f%% of a CPU, want < 20%%", tc.prog, tc.waiter, share*100)
			}
			cli.check(t, "1 round trips of 100 bytes")
			srv.check(t, "1 round trips of 100 bytes")
		})
	}
}

// TestCourseProgramsRejectBadCommandLines: a bad command line gets a
// usage message and exit status 2, before any device is touched.
func TestCourseProgramsRejectBadCommandLines(t *testing.T) {
	dir := binaries(t)
	for _, tc := range []struct {
		args []string
		want string
	}{
		{nil, "say client or server"},
		{[]string{"both"}, `"both" is neither client nor server`},
		{[]string{"client"}, "needs the server's address (-a)"},
		{[]string{"server", "-c", "0"}, "-c must be at least 1"},
		{[]string{"server", "-s", "2000000"}, "messages are 1 to 1048576 bytes"},
		{[]string{"server", "-p", "http"}, `-p "http" is not a port number`},
		{[]string{"server", "extra"}, `unexpected argument "extra"`},
	} {
		out, err := exec.Command(filepath.Join(dir, "ping-sr-0"), tc.args...).CombinedOutput()
		var exit *exec.ExitError
		if !errors.As(err, &exit) || exit.ExitCode() != 2 || !strings.Contains(string(out), tc.want) {
			t.Errorf("ping-sr-0 %q: %v, want exit status 2 and %q:\n%s", tc.args, err, tc.want, out)
		}
	}
}

// TestRDMADevicesListsTheSoftwareDevice runs the course's device list
// program: rdma_get_devices finds the software device on loopback, and
// ibv_query_device's attributes are printed for it.
func TestRDMADevicesListsTheSoftwareDevice(t *testing.T) {
	out, err := exec.Command(filepath.Join(binaries(t), "rdma_devices")).CombinedOutput()
	if err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
	for _, re := range []string{
		`(?m)^\d+ RDMA device\(s\)$`,
		`(?m)^device \d+: rxe_lo$`,
		`(?m)^  node type InfiniBand channel adapter, transport InfiniBand$`,
		`(?m)^  ports 1, max QPs \d+ \(\d+ WRs, \d+ SGEs\)`,
	} {
		if !regexp.MustCompile(re).Match(out) {
			t.Errorf("output lacks %s:\n%s", re, out)
		}
	}
}
