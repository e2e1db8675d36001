//go:build linux

package main

import (
	"bytes"
	"os"
	"os/exec"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/rdmago/rdmago/internal/vmtest"
)

// proc is an rdmago process of a test.
type proc struct {
	cmd *exec.Cmd
	out bytes.Buffer
}

func start(t *testing.T, bin string, args ...string) *proc {
	t.Helper()
	p := &proc{cmd: exec.Command(bin, args...)}
	p.cmd.Stdout, p.cmd.Stderr = &p.out, &p.out
	if err := p.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { p.cmd.Process.Kill(); p.cmd.Wait() })
	return p
}

// wait waits for the process, failing the test if it takes longer than d.
func (p *proc) wait(t *testing.T, d time.Duration) error {
	t.Helper()
	done := make(chan error, 1)
	go func() { done <- p.cmd.Wait() }()
	select {
	case err := <-done:
		return err
	case <-time.After(d):
		p.cmd.Process.Kill()
		<-done
		t.Fatalf("%v still running after %v:\n%s", p.cmd.Args, d, p.out.String())
		return nil
	}
}

// Processes share the loopback device as they share Linux's rxe0: an
// rc_pingpong pair, an rping pair and devinfo all on 127.0.0.1 at once;
// then the process holding the port is killed with SIGKILL in the middle
// of the rping run, which carries on once another process has taken the
// port over.
func TestProcessesShareTheLoopbackDevice(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and runs rdmago")
	}
	useLoopbackDevice(t)
	bin := vmtest.BuildRdmago(t)
	t.Setenv("RDMAGO_RXE_ADDR", "127.0.0.1")

	// The first process on the address holds the port: the rc_pingpong
	// server, waiting for a client that comes later.
	leader := start(t, bin, "rc_pingpong", "-g", "0", "-p", "18601", "-n", "1000000", "-s", "4096")
	time.Sleep(300 * time.Millisecond)
	client := start(t, bin, "rc_pingpong", "-g", "0", "-p", "18601", "-n", "1000000", "-s", "4096", "127.0.0.1")
	rsrv := start(t, bin, "rping", "-s", "-a", "127.0.0.1", "-p", "18602", "-C", "10000", "-V")
	time.Sleep(300 * time.Millisecond)
	rcli := start(t, bin, "rping", "-c", "-a", "127.0.0.1", "-p", "18602", "-C", "10000", "-V")

	var dev bytes.Buffer
	cmd := exec.Command(bin, "devinfo", "-d", "rxe_lo")
	cmd.Stdout, cmd.Stderr = &dev, &dev
	if err := cmd.Run(); err != nil || !strings.Contains(dev.String(), "PORT_ACTIVE") {
		t.Errorf("devinfo beside them: %v\n%s", err, dev.String())
	}

	time.Sleep(500 * time.Millisecond) // mid-transfer for both pairs
	if err := leader.cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	if err := rcli.wait(t, 60*time.Second); err != nil {
		t.Errorf("rping client after the port holder was killed: %v\n%s", err, rcli.out.String())
	}
	if err := rsrv.wait(t, 10*time.Second); err != nil {
		t.Errorf("rping server: %v\n%s", err, rsrv.out.String())
	}
	if s := rcli.out.String(); strings.Contains(s, "mismatch") {
		t.Errorf("rping client: %s", s)
	}
	client.cmd.Process.Signal(os.Interrupt) // its peer is gone
}
