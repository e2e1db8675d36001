package udaddy

import (
	"fmt"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/rdmago/rdmago/internal/vmtest"
)

// TestInteropWithLinuxUdaddy runs `rdmago udaddy` against rdma-core's
// udaddy on Linux Soft-RoCE in vm1 of the interop harness, both ways,
// over IPv4 and IPv6, with several connections: SIDR over QP1, then UD
// datagrams each way. It runs only when RDMAGO_INTEROP_VM names the
// harness's vm script and `vm up 1` has been run.
func TestInteropWithLinuxUdaddy(t *testing.T) {
	vm := vmtest.VM(t, "Linux udaddy")
	bin := vmtest.BuildRdmago(t)
	for _, tc := range []struct{ name, host, guest string }{
		{"IPv4", "10.77.0.1", "10.77.0.11"},
		{"IPv6", "fd77::1", "fd77::11"},
	} {
		for _, rdmagoServes := range []bool{true, false} {
			dir := "udaddy client to rdmago server"
			if !rdmagoServes {
				dir = "rdmago client to udaddy server"
			}
			t.Run(tc.name+" "+dir, func(t *testing.T) {
				const flags = "-c 2 -C 50 -S 512"
				host := func(args string) *exec.Cmd {
					return exec.Command(vm, append([]string{"host", "env", "RDMAGO_RXE_ADDR=" + tc.host, "timeout", vmtest.Timeout, bin, "udaddy"},
						strings.Fields(args+" "+flags)...)...)
				}
				guest := func(args string) *exec.Cmd {
					return exec.Command(vm, "exec", "1", fmt.Sprintf("pkill -x udaddy; timeout %s stdbuf -oL udaddy %s %s", vmtest.Timeout, args, flags))
				}
				srv, cli := host("-b "+tc.host), guest("-s "+tc.host)
				if !rdmagoServes {
					srv, cli = guest("-b "+tc.guest), host("-s "+tc.guest)
				}
				srvOut := vmtest.NewReadyBuffer("udaddy: starting server\n")
				srv.Stdout, srv.Stderr = srvOut, srvOut
				if err := srv.Start(); err != nil {
					t.Fatal(err)
				}
				exited := make(chan error, 1)
				go func() { exited <- srv.Wait() }()
				select {
				case <-srvOut.Ready:
					time.Sleep(time.Second)
				case err := <-exited:
					t.Fatalf("the server exited before listening: %v\n%s", err, srvOut)
				}
				cliOut, cliErr := cli.CombinedOutput()
				srvErr := <-exited
				t.Logf("--- server:\n%s--- client:\n%s", srvOut, cliOut)
				if srvErr != nil || cliErr != nil {
					t.Fatalf("server %v, client %v", srvErr, cliErr)
				}
				for _, out := range []string{srvOut.String(), string(cliOut)} {
					if !strings.Contains(out, "data transfers complete\ntest complete\nreturn status 0\n") {
						t.Errorf("a side did not complete")
					}
				}
			})
		}
	}
}
