package riostream

import (
	"fmt"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/rdmago/rdmago/internal/vmtest"
)

// TestInteropWithLinuxRiostream runs `rdmago riostream` on the host side
// of the harness (10.77.0.1) against rdma-core's riostream on Linux
// Soft-RoCE in vm1 (10.77.0.11), each side serving in turn, with -T v so
// that the last transfer of every round is checked byte for byte, and
// compares the rows both print. It runs only when RDMAGO_INTEROP_VM
// names the harness's vm script.
func TestInteropWithLinuxRiostream(t *testing.T) {
	vm := vmtest.VM(t, "Linux riostream")
	bin := vmtest.BuildRdmago(t)
	for _, flags := range []string{"-S 1 -C 100 -T v", "-S 64 -C 500 -T v", "-S 4096 -C 500 -T v", "-S 65536 -C 100 -T v", "-S 100001 -C 20 -I 3 -T v -B 65536"} {
		for _, rdmagoServes := range []bool{true, false} {
			name := flags + " riostream client to rdmago server"
			if !rdmagoServes {
				name = flags + " rdmago client to riostream server"
			}
			t.Run(name, func(t *testing.T) {
				srv, cli := vmtest.Host(vm, bin, "riostream", strings.Fields("-b 10.77.0.1 "+flags)...),
					vmtest.Guest(vm, "riostream", "stdbuf -oL riostream -s 10.77.0.1 "+flags)
				if !rdmagoServes {
					srv = vmtest.Guest(vm, "riostream", "stdbuf -oL riostream -b 10.77.0.11 "+flags)
					cli = vmtest.Host(vm, bin, "riostream", strings.Fields("-s 10.77.0.11 "+flags)...)
				}
				so, co := runPair(t, srv, cli)
				t.Logf("server:\n%sclient:\n%s", so, co)
				sr, cr := row.FindAllStringSubmatch(so, -1), row.FindAllStringSubmatch(co, -1)
				if len(sr) != 1 || len(cr) != 1 {
					t.Fatalf("rows: server %d, client %d, want 1 each", len(sr), len(cr))
				}
				if fmt.Sprint(sr[0][1:6]) != fmt.Sprint(cr[0][1:6]) {
					t.Errorf("the rows differ: server %v, client %v", sr[0][1:6], cr[0][1:6])
				}
			})
		}
	}
}

// runPair starts srv, waits for its table's header (printed once it
// listens), runs cli, waits for srv, and returns both outputs; it fails
// the test if either fails.
func runPair(t *testing.T, srv, cli *exec.Cmd) (srvOut, cliOut string) {
	t.Helper()
	so := vmtest.NewReadyBuffer("usec/xfer")
	var co strings.Builder
	srv.Stdout, srv.Stderr = so, so
	cli.Stdout, cli.Stderr = &co, &co
	if err := srv.Start(); err != nil {
		t.Fatal(err)
	}
	defer srv.Process.Kill()
	select {
	case <-so.Ready:
	case <-time.After(2 * time.Minute):
		t.Fatalf("the server never listened:\n%s", so.String())
	}
	time.Sleep(500 * time.Millisecond) // from printing the header to accepting
	cliErr := cli.Run()
	srvErr := srv.Wait()
	if cliErr != nil || srvErr != nil {
		t.Fatalf("client %v, server %v\nserver:\n%s\nclient:\n%s", cliErr, srvErr, so.String(), co.String())
	}
	return so.String(), co.String()
}
