package pingpong

import (
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// TestInteropWithLinuxSoftRoCE runs `rdmago rc_pingpong` against rdma-core's
// ibv_rc_pingpong on Linux Soft-RoCE in vm1 of the interop harness, in both
// directions. It runs only when RDMAGO_INTEROP_VM names the harness's vm
// script and `vm up 1` has been run; otherwise it says so and skips.
func TestInteropWithLinuxSoftRoCE(t *testing.T) {
	vm := os.Getenv("RDMAGO_INTEROP_VM")
	if vm == "" {
		t.Skip("interop with Linux Soft-RoCE skipped: set RDMAGO_INTEROP_VM to the path of shared/interop/vm after `vm up 1`")
	}
	if out, err := exec.Command(vm, "exec", "1", "ibv_devices").CombinedOutput(); err != nil || !bytes.Contains(out, []byte("rxe0")) {
		t.Fatalf("vm1 is not up with rxe0: %v\n%s", err, out)
	}
	bin := filepath.Join(t.TempDir(), "rdmago")
	if out, err := exec.Command("go", "build", "-o", bin, "github.com/rdmago/rdmago/cmd/rdmago").CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	host := func(args ...string) *exec.Cmd {
		return exec.Command(vm, append([]string{"host", "env", "RDMAGO_RXE_ADDR=10.77.0.1", "timeout", "120", bin, "rc_pingpong", "-g", "0"}, args...)...)
	}
	guest := func(args string) *exec.Cmd {
		return exec.Command(vm, "exec", "1", "pkill ibv_rc_pingpong; timeout 120 ibv_rc_pingpong -d rxe0 -g 1 "+args)
	}
	for _, size := range []int{1, 1024, 4096, 65536} {
		common := fmt.Sprintf("-n 1000 -s %d", size)
		if size >= 4096 {
			common += " -c"
		}
		for _, rdmagoServes := range []bool{true, false} {
			name := fmt.Sprintf("size %d, rdmago serves: %v", size, rdmagoServes)
			var srv, cli *exec.Cmd
			if rdmagoServes {
				srv = host(strings.Fields(common)...)
				cli = guest(common + " -e 10.77.0.1")
			} else {
				srv = guest(common)
				cli = host(append(strings.Fields(common), "-e", "10.77.0.11")...)
			}
			var srvOut bytes.Buffer
			srv.Stdout, srv.Stderr = &srvOut, &srvOut
			if err := srv.Start(); err != nil {
				t.Fatal(err)
			}
			time.Sleep(3 * time.Second) // the guest is slow to start a server under emulation
			cliOut, cliErr := cli.CombinedOutput()
			srvErr := srv.Wait()
			t.Logf("%s\n--- server:\n%s--- client:\n%s", name, srvOut.String(), cliOut)
			if srvErr != nil || cliErr != nil {
				t.Errorf("%s: server %v, client %v", name, srvErr, cliErr)
				continue
			}
			for _, out := range []string{srvOut.String(), string(cliOut)} {
				if !strings.Contains(out, "1000 iters in ") {
					t.Errorf("%s: no result line", name)
				}
			}
		}
	}
}
