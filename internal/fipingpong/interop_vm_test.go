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
				host := func(args string) *exec.Cmd {
					return exec.Command(vm, append([]string{"host", "env", "RDMAGO_RXE_ADDR=10.77.0.1", "timeout", vmtest.Timeout, bin, "fi_pingpong"}, strings.Fields(args)...)...)
				}
				guest := func(args string) *exec.Cmd {
					return exec.Command(vm, "exec", "1", "pkill -x fi_pingpong; timeout "+vmtest.Timeout+" fi_pingpong "+args)
				}
				var srv, cli *exec.Cmd
				if goServes {
					srv, cli = host(flags), guest(flags+" 10.77.0.1")
				} else {
					srv, cli = guest(flags), host(flags+" 10.77.0.11")
				}
				var srvOut, cliOut strings.Builder
				srv.Stdout, srv.Stderr = &srvOut, &srvOut
				cli.Stdout, cli.Stderr = &cliOut, &cliOut
				if err := srv.Start(); err != nil {
					t.Fatal(err)
				}
				defer srv.Process.Kill()
				time.Sleep(3 * time.Second) // the server's control listener (the guest is slow)
				cliErr := cli.Run()
				srvErr := srv.Wait()
				if cliErr != nil || srvErr != nil {
					t.Fatalf("client %v, server %v\nserver:\n%s\nclient:\n%s", cliErr, srvErr, srvOut.String(), cliOut.String())
				}
				sr, cr := rows(srvOut.String()), rows(cliOut.String())
				if len(sr) != 1 || fmt.Sprint(sr) != fmt.Sprint(cr) {
					t.Fatalf("rows differ\nserver:\n%s\nclient:\n%s", srvOut.String(), cliOut.String())
				}
				t.Logf("server: %s", strings.TrimSpace(srvOut.String()))
				t.Logf("client: %s", strings.TrimSpace(cliOut.String()))
			})
		}
	}
}
