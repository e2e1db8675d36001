package fipingpong

import (
	"fmt"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/rdmago/rdmago/internal/vmtest"
)

// TestInteropVerbsWithLinuxSoftRoCE runs `rdmago fi_pingpong -p verbs` on
// the host side of the VM harness (the software device on 10.77.0.1)
// against libfabric's fi_pingpong with its verbs provider on the kernel's
// Soft-RoCE in vm1, both ways, with the data check on.
func TestInteropVerbsWithLinuxSoftRoCE(t *testing.T) {
	vm := vmtest.VM(t, "libfabric's verbs provider")
	bin := vmtest.BuildRdmago(t)
	for _, c := range []struct{ flags string }{
		{"-e msg -S 64 -I 200"},
		{"-e msg -S 4096 -I 100"},
		{"-e msg -S 65536 -I 50"},
	} {
		for _, goServes := range []bool{true, false} {
			name := fmt.Sprintf("%s/go-serves=%v", c.flags, goServes)
			t.Run(name, func(t *testing.T) {
				flags := "-p verbs -c " + c.flags
				host := func(args string) *exec.Cmd { return vmtest.Host(vm, bin, "fi_pingpong", strings.Fields(args)...) }
				guest := func(args string) *exec.Cmd { return vmtest.Guest(vm, "fi_pingpong", "fi_pingpong "+args) }
				srv, cli := host(flags), guest(flags+" 10.77.0.1")
				if !goServes {
					srv, cli = guest(flags), host(flags+" 10.77.0.11")
				}
				// (The guest is emulated and slow to start listening.)
				srvOut, cliOut := vmtest.RunPair(t, srv, cli, 3*time.Second)
				sr, cr := rows(srvOut), rows(cliOut)
				if len(sr) != 1 || fmt.Sprint(sr) != fmt.Sprint(cr) {
					t.Fatalf("rows differ\nserver:\n%s\nclient:\n%s", srvOut, cliOut)
				}
				t.Logf("server: %s", strings.TrimSpace(srvOut))
				t.Logf("client: %s", strings.TrimSpace(cliOut))
			})
		}
	}
}
