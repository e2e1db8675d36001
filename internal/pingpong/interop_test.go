package pingpong

import (
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"
)

// interopTimeout bounds each side of one interop run (the guest is
// emulated, without KVM, and slow).
const interopTimeout = "300"

// interopVM returns the harness script after checking that vm1 is up.
func interopVM(t *testing.T) string {
	vm := os.Getenv("RDMAGO_INTEROP_VM")
	if vm == "" {
		t.Skip("interop with Linux Soft-RoCE skipped: set RDMAGO_INTEROP_VM to the path of shared/interop/vm after `vm up 1`")
	}
	if out, err := exec.Command(vm, "exec", "1", "ibv_devices").CombinedOutput(); err != nil || !bytes.Contains(out, []byte("rxe0")) {
		t.Fatalf("vm1 is not up with rxe0: %v\n%s", err, out)
	}
	return vm
}

// interopRun runs one ping-pong between `rdmago <transport>_pingpong` on
// the host side of the harness (GID index 0 = 10.77.0.1) and rdma-core's
// ibv_<transport>_pingpong in vm1 (GID index 1 = 10.77.0.11), with the
// flags in common; the client side adds -e, so that each implementation
// is run both polling and sleeping on events.
func interopRun(t *testing.T, vm, bin string, tr Transport, common string, rdmagoServes bool) {
	t.Helper()
	tool := tr.Tool()
	host := func(args string) *exec.Cmd {
		return exec.Command(vm, append([]string{"host", "env", "RDMAGO_RXE_ADDR=10.77.0.1", "timeout", interopTimeout,
			bin, tr.String() + "_pingpong", "-g", "0"}, strings.Fields(args)...)...)
	}
	guest := func(args string) *exec.Cmd {
		// comm names are cut to 15 characters: ibv_srq_pingpon. stdbuf
		// makes the C program's stdout line-buffered, so that its lines
		// come as printed and survive a kill by timeout.
		return exec.Command(vm, "exec", "1", fmt.Sprintf("pkill -x %s; timeout %s stdbuf -oL %s -d rxe0 -g 1 %s", tool[:min(15, len(tool))], interopTimeout, tool, args))
	}
	var srv, cli *exec.Cmd
	if rdmagoServes {
		srv, cli = host(common), guest(common+" -e 10.77.0.1")
	} else {
		srv, cli = guest(common), host(common+" -e 10.77.0.11")
	}
	srvOut := &readyBuffer{marker: []byte("  local address:"), ready: make(chan struct{})}
	srv.Stdout, srv.Stderr = srvOut, srvOut
	if err := srv.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan error, 1)
	go func() { exited <- srv.Wait() }()
	// Both servers print their local address just before they listen;
	// ssh to the emulated guest and its start take seconds.
	var srvErr error
	select {
	case <-srvOut.ready:
		time.Sleep(time.Second)
	case srvErr = <-exited:
		t.Errorf("the server exited before listening: %v\n%s", srvErr, srvOut)
		return
	case <-time.After(2 * time.Minute):
		srv.Process.Kill()
		t.Errorf("the server did not start listening in 2 minutes: %v\n%s", <-exited, srvOut)
		return
	}
	cliOut, cliErr := cli.CombinedOutput()
	srvErr = <-exited
	srvName, cliName := "rdmago", tool
	if !rdmagoServes {
		srvName, cliName = tool, "rdmago"
	}
	t.Logf("%s %s\n--- server (%s):\n%s--- client (%s):\n%s", tool, common, srvName, srvOut.String(), cliName, cliOut)
	if srvErr != nil || cliErr != nil {
		t.Errorf("server %v, client %v", srvErr, cliErr)
		return
	}
	iters := "1000"
	if f := strings.Fields(common); len(f) > 1 && f[0] == "-n" {
		iters = f[1]
	}
	for _, out := range []string{srvOut.String(), string(cliOut)} {
		if !strings.Contains(out, iters+" iters in ") {
			t.Errorf("no result line")
		}
		if strings.Contains(out, "invalid data") {
			t.Errorf("the C program found invalid data")
		}
	}
}

// readyBuffer collects a server's output and closes ready when marker
// first appears.
type readyBuffer struct {
	mu     sync.Mutex
	buf    bytes.Buffer
	marker []byte
	ready  chan struct{}
	seen   bool
}

func (b *readyBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.buf.Write(p)
	if !b.seen && bytes.Contains(b.buf.Bytes(), b.marker) {
		b.seen = true
		close(b.ready)
	}
	return len(p), nil
}

func (b *readyBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

func buildRdmago(t *testing.T) string {
	bin := filepath.Join(t.TempDir(), "rdmago")
	if out, err := exec.Command("go", "build", "-o", bin, "github.com/rdmago/rdmago/cmd/rdmago").CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	return bin
}

// TestInteropWithLinuxSoftRoCE runs `rdmago rc_pingpong`, uc_pingpong,
// ud_pingpong and srq_pingpong against rdma-core's ibv_*_pingpong on Linux
// Soft-RoCE in vm1 of the interop harness, in both directions, 1000
// iterations with -c, at sizes 1, 1024, 4096 and 65536 (UD: only up to the
// guest's port MTU of 1024, at its default 1500-byte Ethernet MTU). It runs
// only when RDMAGO_INTEROP_VM names the harness's vm script and `vm up 1`
// has been run; otherwise it says so and skips.
func TestInteropWithLinuxSoftRoCE(t *testing.T) {
	vm := interopVM(t)
	bin := buildRdmago(t)
	for _, tr := range []Transport{RC, UC, UD, SRQ} {
		sizes := []int{1, 1024, 4096, 65536}
		if tr == UD {
			sizes = []int{1, 1024}
		}
		for _, size := range sizes {
			for _, rdmagoServes := range []bool{true, false} {
				dir := "ibv client to rdmago server"
				if !rdmagoServes {
					dir = "rdmago client to ibv server"
				}
				t.Run(fmt.Sprintf("%s size %d %s", tr, size, dir), func(t *testing.T) {
					interopRun(t, vm, bin, tr, fmt.Sprintf("-n 1000 -s %d -c", size), rdmagoServes)
				})
			}
		}
	}
}

// TestInteropRCWithLoss runs rc_pingpong in both directions while the
// guest drops 1% of the packets it sends (netem on its eth0), so that
// rdmago's retransmission and duplicate detection meet Linux's.
func TestInteropRCWithLoss(t *testing.T) {
	vm := interopVM(t)
	bin := buildRdmago(t)
	if out, err := exec.Command(vm, "exec", "1", "tc qdisc add dev eth0 root netem loss 1%").CombinedOutput(); err != nil {
		t.Fatalf("netem: %v\n%s", err, out)
	}
	defer func() {
		if out, err := exec.Command(vm, "exec", "1", "tc qdisc del dev eth0 root").CombinedOutput(); err != nil {
			t.Errorf("removing netem: %v\n%s", err, out)
		}
	}()
	for _, rdmagoServes := range []bool{true, false} {
		interopRun(t, vm, bin, RC, "-n 1000 -s 4096 -c", rdmagoServes)
	}
}
