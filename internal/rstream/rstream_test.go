package rstream

import (
	"bytes"
	"context"
	"os"
	"os/exec"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/rdmago/rdmago/internal/tool"
	"github.com/rdmago/rdmago/internal/vmtest"
)

func TestParseArgs(t *testing.T) {
	tests := []struct {
		name   string
		args   []string
		status int // -1: parses
		out    string
		check  func(t *testing.T, o Options)
	}{
		{name: "defaults", args: nil, status: -1, check: func(t *testing.T, o Options) {
			if o.Custom || o.Port != "7471" || o.Inline != 64 || o.Count != 1000 || o.Size != 1000 || o.Iterations != 1 {
				t.Errorf("defaults %+v", o)
			}
		}},
		{name: "custom run", args: []string{"-s", "10.0.0.1", "-S", "4096", "-C", "200", "-T", "v", "-p", "7480"}, status: -1, check: func(t *testing.T, o Options) {
			if !o.Custom || o.Dst != "10.0.0.1" || o.Size != 4096 || o.Count != 200 || !o.Verify || o.Port != "7480" {
				t.Errorf("parsed %+v", o)
			}
		}},
		{name: "all sizes is not custom", args: []string{"-S", "all", "-Tsockets"}, status: -1, check: func(t *testing.T, o Options) {
			if o.Custom || !o.AllSizes || !o.Sockets {
				t.Errorf("parsed %+v", o)
			}
		}},
		{name: "test option words", args: []string{"-T", "async", "-T", "verify", "-T", "resolve", "-T", "nonblock", "-T", "block"}, status: -1, check: func(t *testing.T, o Options) {
			if !o.Verify {
				t.Errorf("parsed %+v", o)
			}
		}},
		{name: "fork runs over sockets", args: []string{"-T", "f"}, status: -1, check: func(t *testing.T, o Options) {
			if !o.Sockets {
				t.Errorf("parsed %+v", o)
			}
		}},
		{name: "unknown option", args: []string{"-z"}, status: 1, out: "usage: rdmago rstream"},
		{name: "unknown test option", args: []string{"-T", "x"}, status: 1, out: "v|verify - verify data"},
		{name: "missing argument", args: []string{"-S"}, status: 1, out: "[-S transfer_size or all]"},
		{name: "bad number", args: []string{"-C", "many"}, status: 1},
		{name: "zero size", args: []string{"-S", "0"}, status: 1},
		{name: "gid addresses", args: []string{"-f", "gid"}, status: 1},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			var out, errw bytes.Buffer
			o, err := ParseArgs(tc.args, &out, &errw)
			if tc.status < 0 {
				if err != nil {
					t.Fatalf("ParseArgs: %v", err)
				}
				tc.check(t, o)
				return
			}
			if got := tool.Status(err); got != tc.status {
				t.Errorf("exit status %d, want %d (stderr %q)", got, tc.status, errw.String())
			}
			if !strings.Contains(out.String(), tc.out) {
				t.Errorf("stdout %q lacks %q", out.String(), tc.out)
			}
		})
	}
}

// row matches one line of rstream's table.
var row = regexp.MustCompile(`(?m)^(\S+)\s+(\S+)\s+(\S+)\s+(\S+)\s+(\S+)\s+\d+\.\d\ds\s+\d+\.\d\d\s+\d+\.\d\d$`)

// tool runs the rdmago binary's rstream on the software device of
// addr, at the RoCE port rxePort.
func runTool(ctx context.Context, bin, addr, rxePort string, args ...string) *exec.Cmd {
	c := exec.CommandContext(ctx, bin, append([]string{"rstream"}, args...)...)
	c.Env = append(os.Environ(), "RDMAGO_RXE_ADDR="+addr, "RDMAGO_RXE_PORT="+rxePort)
	return c
}

// startServer starts `rdmago rstream` serving on 127.0.0.2 with flags
// and waits until it listens; it returns the command and its output.
func startServer(t *testing.T, ctx context.Context, bin, rxePort string, flags []string) (*exec.Cmd, *vmtest.ReadyBuffer) {
	t.Helper()
	srv := runTool(ctx, bin, "127.0.0.2", rxePort, append(flags, "-b", "127.0.0.2")...)
	out := vmtest.NewReadyBuffer("usec/xfer") // the header, printed once it listens
	srv.Stdout, srv.Stderr = out, out
	if err := srv.Start(); err != nil {
		t.Fatal(err)
	}
	select {
	case <-out.Ready:
	case <-ctx.Done():
		t.Fatalf("the server never listened:\n%s", out.String())
	}
	return srv, out
}

// client is `rdmago rstream` with flags on 127.0.0.1, to the server.
func client(ctx context.Context, bin, rxePort string, flags []string) (*exec.Cmd, *vmtest.ReadyBuffer) {
	cli := runTool(ctx, bin, "127.0.0.1", rxePort, append(flags, "-s", "127.0.0.2")...)
	out := vmtest.NewReadyBuffer("usec/xfer")
	cli.Stdout, cli.Stderr = out, out
	return cli, out
}

// TestTwoProcesses runs `rdmago rstream` as server (127.0.0.2) and client
// (127.0.0.1), each on its own software device, over rsockets and over
// TCP sockets (-T s), and checks that both print the same rows.
func TestTwoProcesses(t *testing.T) {
	bin := vmtest.BuildRdmago(t)
	rxePort := vmtest.FreeUDPPort(t, "127.0.0.2", "127.0.0.1")
	for i, tc := range []struct {
		flags string
		rows  []string // names
	}{
		{"-S 4096 -C 200 -T v", []string{"custom"}},
		{"-S 100000 -C 20 -I 2 -T v -B 8192", []string{"custom"}},
		{"-S 4096 -C 200 -T v -T s", []string{"custom"}},
	} {
		t.Run(tc.flags, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
			defer cancel()
			port := []string{"-p", []string{"7491", "7492", "7493"}[i]}
			flags := append(strings.Fields(tc.flags), port...)
			srv, so := startServer(t, ctx, bin, rxePort, flags)
			cli, co := client(ctx, bin, rxePort, flags)
			cerr := cli.Run()
			serr := srv.Wait()
			if cerr != nil || serr != nil {
				t.Fatalf("server %v, client %v\nserver:\n%s\nclient:\n%s", serr, cerr, so.String(), co.String())
			}
			for _, out := range []string{so.String(), co.String()} {
				if !strings.HasPrefix(out, "name      bytes   xfers   iters   total       time     Gb/sec    usec/xfer\n") {
					t.Errorf("no header in\n%s", out)
				}
				m := row.FindAllStringSubmatch(out, -1)
				if len(m) != len(tc.rows) {
					t.Fatalf("%d rows, want %d, in\n%s", len(m), len(tc.rows), out)
				}
				for i, r := range m {
					if r[1] != tc.rows[i] {
						t.Errorf("row %d named %q, want %q", i, r[1], tc.rows[i])
					}
				}
			}
		})
	}
}

// TestKilledPeerEndsTheRun kills one side with SIGKILL mid-run: the
// other, with keepalives (-k 1) or without, reports the lost connection
// and exits non-zero within 15 s instead of waiting for ever.
func TestKilledPeerEndsTheRun(t *testing.T) {
	bin := vmtest.BuildRdmago(t)
	rxePort := vmtest.FreeUDPPort(t, "127.0.0.2", "127.0.0.1")
	for _, tc := range []struct {
		flags  string
		victim string
	}{
		{"-k 1 -p 7494", "server"},
		{"-p 7495", "server"},
		{"-p 7496", "client"},
	} {
		t.Run(tc.flags+"/kill-"+tc.victim, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
			defer cancel()
			flags := append([]string{"-S", "65536", "-C", "1000000"}, strings.Fields(tc.flags)...)
			srv, so := startServer(t, ctx, bin, rxePort, flags)
			cli, co := client(ctx, bin, rxePort, flags)
			if err := cli.Start(); err != nil {
				t.Fatal(err)
			}
			time.Sleep(time.Second) // well into the run
			victim, survivor, out := srv, cli, co
			if tc.victim == "client" {
				victim, survivor, out = cli, srv, so
			}
			victim.Process.Signal(syscall.SIGKILL)
			victim.Wait()
			killed := time.Now()
			done := make(chan error, 1)
			go func() { done <- survivor.Wait() }()
			select {
			case err := <-done:
				if err == nil {
					t.Fatalf("the survivor exited 0 after its peer was killed\n%s", out.String())
				}
				if !strings.Contains(out.String(), "rsend: ") && !strings.Contains(out.String(), "rrecv: ") {
					t.Errorf("the survivor did not say what failed:\n%s", out.String())
				}
				t.Logf("exited %v %v after the kill: %s", err, time.Since(killed).Round(time.Millisecond), strings.TrimSpace(out.String()))
			case <-time.After(15 * time.Second):
				t.Fatalf("the survivor still runs 15 s after its peer was killed\n%s", out.String())
			}
		})
	}
}
