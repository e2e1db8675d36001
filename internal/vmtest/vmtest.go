// Package vmtest is what the interop tests share: finding the Soft-RoCE
// VM harness (shared/interop/vm), building the rdmago binary to run on its
// host side, and waiting for a server's "ready" line.
package vmtest

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

// Timeout bounds each side of one interop run, in seconds as timeout(1)
// takes it (the guest is emulated, without KVM, and slow).
const Timeout = "300"

// VM returns the harness script named by RDMAGO_INTEROP_VM after checking
// that vm1 is up with rxe0. Without the variable it skips the test, saying
// how to enable it; peer names what the test runs against.
func VM(t *testing.T, peer string) string {
	t.Helper()
	vm := os.Getenv("RDMAGO_INTEROP_VM")
	if vm == "" {
		t.Skip("interop with " + peer + " skipped: set RDMAGO_INTEROP_VM to the path of shared/interop/vm after `vm up 1`")
	}
	if out, err := exec.Command(vm, "exec", "1", "ibv_devices").CombinedOutput(); err != nil || !bytes.Contains(out, []byte("rxe0")) {
		t.Fatalf("vm1 is not up with rxe0: %v\n%s", err, out)
	}
	return vm
}

// BuildRdmago builds cmd/rdmago into the test's temporary directory.
func BuildRdmago(t *testing.T) string {
	t.Helper()
	bin := filepath.Join(t.TempDir(), "rdmago")
	if out, err := exec.Command("go", "build", "-o", bin, "github.com/rdmago/rdmago/cmd/rdmago").CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	return bin
}

// ReadyBuffer collects a server's output and closes Ready when its marker
// first appears.
type ReadyBuffer struct {
	Ready  chan struct{}
	mu     sync.Mutex
	buf    bytes.Buffer
	marker []byte
	seen   bool
}

// NewReadyBuffer returns a ReadyBuffer waiting for marker.
func NewReadyBuffer(marker string) *ReadyBuffer {
	return &ReadyBuffer{Ready: make(chan struct{}), marker: []byte(marker)}
}

func (b *ReadyBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.buf.Write(p)
	if !b.seen && bytes.Contains(b.buf.Bytes(), b.marker) {
		b.seen = true
		close(b.Ready)
	}
	return len(p), nil
}

func (b *ReadyBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

// Host is a command on the harness's host side: rdmago's bin running
// tool with args, its software device on 10.77.0.1.
func Host(vm, bin, tool string, args ...string) *exec.Cmd {
	return exec.Command(vm, append([]string{"host", "env", "RDMAGO_RXE_ADDR=10.77.0.1", "timeout", Timeout, bin, tool}, args...)...)
}

// Guest is a shell command line run in vm1, after killing any leftover
// process named prog, bounded by Timeout.
func Guest(vm, prog, cmdline string) *exec.Cmd {
	return exec.Command(vm, "exec", "1", "pkill -x "+prog+"; timeout "+Timeout+" "+cmdline)
}

// RunPair starts srv, gives it settle to listen, runs cli, waits for
// srv, and returns both outputs; it fails the test if either fails.
func RunPair(t *testing.T, srv, cli *exec.Cmd, settle time.Duration) (srvOut, cliOut string) {
	t.Helper()
	return RunPairAfter(t, srv, cli, func() { time.Sleep(settle) })
}

// GuestListening waits up to within for a TCP listener on port in vm1
// (the guest is emulated: a server there may take seconds to start
// listening), then a moment more for it to reach accept.
func GuestListening(vm string, port int, within time.Duration) func() {
	return func() {
		deadline := time.Now().Add(within)
		for time.Now().Before(deadline) {
			out, _ := exec.Command(vm, "exec", "1", fmt.Sprintf("ss -Hltn 'sport = :%d'", port)).Output()
			if strings.Contains(string(out), "LISTEN") {
				break
			}
			time.Sleep(300 * time.Millisecond)
		}
		time.Sleep(300 * time.Millisecond)
	}
}

// RunPairAfter is RunPair with ready, which returns once srv may be
// connected to, in place of a fixed settle time.
func RunPairAfter(t *testing.T, srv, cli *exec.Cmd, ready func()) (srvOut, cliOut string) {
	t.Helper()
	var so, co strings.Builder
	srv.Stdout, srv.Stderr = &so, &so
	cli.Stdout, cli.Stderr = &co, &co
	if err := srv.Start(); err != nil {
		t.Fatal(err)
	}
	defer srv.Process.Kill()
	ready()
	cliErr := cli.Run()
	srvErr := srv.Wait()
	if cliErr != nil || srvErr != nil {
		t.Fatalf("client %v, server %v\nserver:\n%s\nclient:\n%s", cliErr, srvErr, so.String(), co.String())
	}
	return so.String(), co.String()
}

// LinuxNVMeTarget sets up (once per boot) Linux's NVMe/RDMA target in VM
// n through nvmet's configfs: subsystem nqn, open to any host, with
// namespace 1 on null_blk and namespace 2 a 64 MiB file
// (/tmp/nvmet-ns2.img, buffered: the guest's /tmp takes no O_DIRECT),
// served on addr port 4420.
func LinuxNVMeTarget(t *testing.T, vm string, n int, addr, nqn string) {
	t.Helper()
	script := `set -e
modprobe nvmet-rdma; modprobe null_blk nr_devices=1
mountpoint -q /sys/kernel/config || mount -t configfs none /sys/kernel/config
cd /sys/kernel/config/nvmet
S=subsystems/` + nqn + `
if [ ! -d $S ]; then
  mkdir $S; echo 1 > $S/attr_allow_any_host
  mkdir $S/namespaces/1; echo -n /dev/nullb0 > $S/namespaces/1/device_path; echo 1 > $S/namespaces/1/enable
  truncate -s 64M /tmp/nvmet-ns2.img
  mkdir $S/namespaces/2; echo -n /tmp/nvmet-ns2.img > $S/namespaces/2/device_path
  echo 1 > $S/namespaces/2/buffered_io; echo 1 > $S/namespaces/2/enable
fi
if [ ! -d ports/1 ]; then
  mkdir ports/1; echo ` + addr + ` > ports/1/addr_traddr; echo rdma > ports/1/addr_trtype
  echo 4420 > ports/1/addr_trsvcid; echo ipv4 > ports/1/addr_adrfam
fi
[ -e ports/1/subsystems/` + nqn + ` ] || ln -s /sys/kernel/config/nvmet/$S ports/1/subsystems/` + nqn
	if out, err := exec.Command(vm, "exec", fmt.Sprint(n), script).CombinedOutput(); err != nil {
		t.Fatalf("setting up nvmet in vm%d: %v\n%s", n, err, out)
	}
}

// GuestNetem makes vm1 mistreat the packets it sends (netem on its eth0,
// qdisc arguments such as "loss 1%") until the test ends.
func GuestNetem(t *testing.T, vm, args string) {
	t.Helper()
	if out, err := exec.Command(vm, "exec", "1", "tc qdisc add dev eth0 root netem "+args).CombinedOutput(); err != nil {
		t.Fatalf("netem: %v\n%s", err, out)
	}
	t.Cleanup(func() {
		if out, err := exec.Command(vm, "exec", "1", "tc qdisc del dev eth0 root").CombinedOutput(); err != nil {
			t.Errorf("removing netem: %v\n%s", err, out)
		}
	})
}
