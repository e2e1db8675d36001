// Package vmtest is what the interop tests share: finding the Soft-RoCE
// VM harness (shared/interop/vm), building the rdmago binary to run on its
// host side, and waiting for a server's "ready" line.
package vmtest

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"testing"
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
