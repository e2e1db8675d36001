//go:build unix

package perftest

import (
	"bytes"
	"context"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/rdmago/rdmago/internal/vmtest"
)

// Every tool as two programs, the way a person runs them: `rdmago ib_*`
// serving on a software device at 127.0.0.2, the client's at 127.0.0.1,
// both on a UDP port picked for the test. Both must exit 0 and print
// their rows.
func TestToolsAsTwoProcesses(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and runs programs")
	}
	bin := vmtest.BuildRdmago(t)
	type run struct {
		tool  Tool
		extra string
	}
	var runs []run
	for _, tool := range Tools {
		runs = append(runs, run{tool, ""})
	}
	runs = append(runs, run{Tool{Write, false}, " -R"}, run{Tool{Send, false}, " -c UD -q 2"}, run{Tool{Write, true}, " -D 2"})
	for _, rn := range runs {
		t.Run(rn.tool.Name()+strings.ReplaceAll(rn.extra, " ", "_"), func(t *testing.T) {
			rxePort := vmtest.FreeUDPPort(t, "127.0.0.2", "127.0.0.1")
			args := strings.Fields("-n 50 -s 1024 -p " + itoa(freePort(t)) + rn.extra)
			ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
			defer cancel()
			cmd := func(addr string, args ...string) (*exec.Cmd, *bytes.Buffer) {
				c := exec.CommandContext(ctx, bin, append([]string{rn.tool.Name()}, args...)...)
				c.Env = append(os.Environ(), "RDMAGO_RXE_ADDR="+addr, "RDMAGO_RXE_PORT="+rxePort)
				var out bytes.Buffer
				c.Stdout, c.Stderr = &out, &out
				return c, &out
			}
			srv, sout := cmd("127.0.0.2", args...)
			if err := srv.Start(); err != nil {
				t.Fatal(err)
			}
			time.Sleep(300 * time.Millisecond)
			cli, cout := cmd("127.0.0.1", append(args, "127.0.0.2")...)
			cerr := cli.Run()
			serr := srv.Wait()
			if cerr != nil || serr != nil {
				t.Fatalf("client: %v, server: %v\nclient:\n%s\nserver:\n%s", cerr, serr, cout, sout)
			}
			size := "1024"
			if rn.tool.Verb == Atomic {
				size = "8"
			}
			for side, out := range map[string]string{"client": cout.String(), "server": sout.String()} {
				if rn.tool.Lat && (rn.tool.Verb == Read || rn.tool.Verb == Atomic) && side == "server" {
					continue // no row on these servers
				}
				if !strings.Contains(out, "\n "+size+" ") {
					t.Errorf("%s printed no row:\n%s", side, out)
				}
			}
		})
	}
}
