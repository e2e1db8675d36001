//go:build unix

package examples_test

import (
	"fmt"
	"os"
	"os/exec"
	"strings"
	"sync"
	"testing"
	"time"
)

// TestInteropRDMAServerClientOverIPv6 runs the rdma_server and rdma_client
// examples against rdma-core's programs of the same names on Linux
// Soft-RoCE in vm1 of the interop harness, over IPv6 (fd77::1 and
// fd77::11), both ways. It runs only when RDMAGO_INTEROP_VM names the
// harness's vm script and `vm up 1` has been run.
func TestInteropRDMAServerClientOverIPv6(t *testing.T) {
	vm := os.Getenv("RDMAGO_INTEROP_VM")
	if vm == "" {
		t.Skip("interop with rdma-core's rdma_server/rdma_client skipped: set RDMAGO_INTEROP_VM to the path of shared/interop/vm after `vm up 1`")
	}
	dir := binaries(t)
	for _, rdmagoServes := range []bool{true, false} {
		name := "rdma_client to Go rdma_server"
		if !rdmagoServes {
			name = "Go rdma_client to rdma_server"
		}
		t.Run(name, func(t *testing.T) {
			host := func(prog, args string) *exec.Cmd {
				return exec.Command(vm, append([]string{"host", "env", "RDMAGO_RXE_ADDR=fd77::1", "timeout", "120", dir + "/" + prog}, strings.Fields(args)...)...)
			}
			guest := func(prog, args string) *exec.Cmd {
				return exec.Command(vm, "exec", "1", fmt.Sprintf("pkill -x %s; timeout 120 stdbuf -oL %s %s", prog, prog, args))
			}
			srv, cli := host("rdma_server", "-s fd77::1"), guest("rdma_client", "-s fd77::1")
			if !rdmagoServes {
				srv, cli = guest("rdma_server", "-s fd77::11"), host("rdma_client", "-s fd77::11")
			}
			var srvOut syncBuf
			srv.Stdout, srv.Stderr = &srvOut, &srvOut
			if err := srv.Start(); err != nil {
				t.Fatal(err)
			}
			exited := make(chan error, 1)
			go func() { exited <- srv.Wait() }()
			deadline := time.Now().Add(2 * time.Minute)
			for !strings.Contains(srvOut.String(), "rdma_server: ") && time.Now().Before(deadline) {
				time.Sleep(100 * time.Millisecond)
			}
			time.Sleep(2 * time.Second) // rdma_server prints "start" before it listens
			cliOut, cliErr := cli.CombinedOutput()
			srvErr := <-exited
			t.Logf("--- server:\n%s--- client:\n%s", srvOut.String(), cliOut)
			if srvErr != nil || cliErr != nil {
				t.Fatalf("server %v, client %v", srvErr, cliErr)
			}
			for _, out := range []string{srvOut.String(), string(cliOut)} {
				if !strings.Contains(out, "end 0") {
					t.Errorf("a side did not end with status 0")
				}
			}
		})
	}
}

// syncBuf is a strings.Builder safe for one writer and a concurrent reader.
type syncBuf struct {
	mu sync.Mutex
	b  strings.Builder
}

func (s *syncBuf) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuf) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}
