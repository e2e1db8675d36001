package riostream

import (
	"bytes"
	"context"
	"math/rand/v2"
	"os"
	"os/exec"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/rdmago/rdmago/internal/tool"
	"github.com/rdmago/rdmago/internal/vmtest"
	_ "github.com/rdmago/rdmago/rxe"
)

func TestParseArgs(t *testing.T) {
	tests := []struct {
		name   string
		args   []string
		status int // -1: parses
		out    string
		check  func(t *testing.T, o Options)
	}{
		{name: "defaults", status: -1, check: func(t *testing.T, o Options) {
			if o != Defaults() {
				t.Errorf("defaults %+v", o)
			}
		}},
		{name: "custom run", args: []string{"-s", "10.0.0.1", "-S", "4096", "-C", "200", "-I", "3", "-T", "v", "-p", "7480", "-B", "65536", "-i", "0"}, status: -1, check: func(t *testing.T, o Options) {
			if !o.Custom || o.Dst != "10.0.0.1" || o.Size != 4096 || o.Count != 200 || o.Iterations != 3 || !o.Verify || o.Port != "7480" || o.Buffer != 65536 || o.Inline != 0 {
				t.Errorf("parsed %+v", o)
			}
		}},
		{name: "all sizes is not custom", args: []string{"-S", "all"}, status: -1, check: func(t *testing.T, o Options) {
			if o.Custom || !o.AllSizes {
				t.Errorf("parsed %+v", o)
			}
		}},
		{name: "test option words", args: []string{"-T", "async", "-T", "block", "-T", "nonblock", "-T", "verify"}, status: -1, check: func(t *testing.T, o Options) {
			if !o.Verify {
				t.Errorf("parsed %+v", o)
			}
		}},
		{name: "no sockets option", args: []string{"-T", "s"}, status: 1, out: "v|verify - verify data"},
		{name: "no keepalive option", args: []string{"-k", "1"}, status: 1, out: "usage: rdmago riostream"},
		{name: "missing argument", args: []string{"-S"}, status: 1, out: "[-S transfer_size or all]"},
		{name: "bad number", args: []string{"-C", "many"}, status: 1},
		{name: "zero size", args: []string{"-S", "0"}, status: 1},
		{name: "zero count", args: []string{"-C", "0"}, status: 1},
		{name: "size too large", args: []string{"-S", "2147483648"}, status: 1},
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

// row matches one line of the table.
var row = regexp.MustCompile(`(?m)^(\S+)\s+(\S+)\s+(\S+)\s+(\S+)\s+(\S+)\s+\d+\.\d\ds\s+\d+\.\d\d\s+\d+\.\d\d$`)

// TestServerAndClientAgree runs a server and a client in this process,
// over the software device on 127.0.0.1, with -T v: every transfer's
// bytes are checked, and both sides print the same row.
func TestServerAndClientAgree(t *testing.T) {
	for _, flags := range []string{"-S 1 -C 20 -T v", "-S 15 -C 3 -I 2 -T v", "-S 4096 -C 50 -T v", "-S 100001 -C 5 -I 2 -T v -B 8192 -i 0"} {
		t.Run(flags, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
			defer cancel()
			port := strconv.Itoa(30000 + rand.IntN(30000))
			args := append(strings.Fields(flags), "-p", port)
			so, co := vmtest.NewReadyBuffer("usec/xfer"), vmtest.NewReadyBuffer("usec/xfer")
			o, err := ParseArgs(append(args, "-b", "127.0.0.1"), so, so)
			if err != nil {
				t.Fatal(err)
			}
			srvErr := make(chan error, 1)
			go func() { srvErr <- Run(ctx, o, so, so) }()
			select {
			case <-so.Ready:
			case err := <-srvErr:
				t.Fatalf("server: %v\n%s", err, so.String())
			}
			o, err = ParseArgs(append(args, "-s", "127.0.0.1"), co, co)
			if err != nil {
				t.Fatal(err)
			}
			if err := Run(ctx, o, co, co); err != nil {
				t.Fatalf("client: %v\n%s", err, co.String())
			}
			if err := <-srvErr; err != nil {
				t.Fatalf("server: %v\n%s", err, so.String())
			}
			sr, cr := row.FindAllStringSubmatch(so.String(), -1), row.FindAllStringSubmatch(co.String(), -1)
			if len(sr) != 1 || len(cr) != 1 || sr[0][1] != "custom" || strings.Join(sr[0][1:6], " ") != strings.Join(cr[0][1:6], " ") {
				t.Fatalf("rows differ or are missing:\nserver:\n%s\nclient:\n%s", so.String(), co.String())
			}
		})
	}
}

func TestVerifyNamesTheFirstWrongByte(t *testing.T) {
	s := &session{o: Options{Verify: true}, ctx: context.Background()}
	var out bytes.Buffer
	s.out = &out
	buf := []byte{0, 1, 2, 9, 4, 7}
	if err := s.recvXfer(nil, buf, 7); tool.Status(err) != 255 || !strings.Contains(out.String(), "data verification failed byte 3") {
		t.Fatalf("recvXfer = %v, printed %q", err, out.String())
	}
}

// TestTwoProcesses runs `rdmago riostream` as server (127.0.0.2) and
// client (127.0.0.1), each a process with its own software device, and
// checks that both print the same row.
func TestTwoProcesses(t *testing.T) {
	bin := vmtest.BuildRdmago(t)
	rxePort := vmtest.FreeUDPPort(t, "127.0.0.2", "127.0.0.1")
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	flags := []string{"-S", "65537", "-C", "20", "-I", "2", "-T", "v", "-p", strconv.Itoa(30000 + rand.IntN(30000))}
	runTool := func(addr string, args ...string) (*exec.Cmd, *vmtest.ReadyBuffer) {
		c := exec.CommandContext(ctx, bin, append(append([]string{"riostream"}, flags...), args...)...)
		c.Env = append(os.Environ(), "RDMAGO_RXE_ADDR="+addr, "RDMAGO_RXE_PORT="+rxePort)
		out := vmtest.NewReadyBuffer("usec/xfer")
		c.Stdout, c.Stderr = out, out
		return c, out
	}
	srv, so := runTool("127.0.0.2", "-b", "127.0.0.2")
	if err := srv.Start(); err != nil {
		t.Fatal(err)
	}
	defer srv.Process.Kill()
	select {
	case <-so.Ready:
	case <-ctx.Done():
		t.Fatalf("the server never listened:\n%s", so.String())
	}
	cli, co := runTool("127.0.0.1", "-s", "127.0.0.2")
	cerr := cli.Run()
	serr := srv.Wait()
	if cerr != nil || serr != nil {
		t.Fatalf("server %v, client %v\nserver:\n%s\nclient:\n%s", serr, cerr, so.String(), co.String())
	}
	sr, cr := row.FindAllStringSubmatch(so.String(), -1), row.FindAllStringSubmatch(co.String(), -1)
	if len(sr) != 1 || len(cr) != 1 || strings.Join(sr[0][1:6], " ") != strings.Join(cr[0][1:6], " ") {
		t.Fatalf("rows differ or are missing:\nserver:\n%s\nclient:\n%s", so.String(), co.String())
	}
}
