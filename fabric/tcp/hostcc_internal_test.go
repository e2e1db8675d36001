package tcp

import (
	"testing"

	"github.com/rdmago/rdmago/fabric/fabrictest"
	"github.com/rdmago/rdmago/fabric/internal/hostcc"
	"github.com/rdmago/rdmago/fabric/internal/unwrap"
	"golang.org/x/sys/unix"
)

// Both ends of a connection to the host itself ask for reno (see package
// hostcc): a pacing congestion control slowed 1 MiB messages on loopback
// to a third.
func TestLoopbackConnectionAsksForReno(t *testing.T) {
	t.Setenv(hostcc.Env, "") // the default, whatever the environment says
	if !renoAllowed() {
		t.Skip("this system does not let a process choose reno")
	}
	cli, srv := fabrictest.Connect(t, "tcp", nil)
	for _, s := range []*fabrictest.Side{cli, srv} {
		e := unwrap.Endpoint(s.EP).(*ep)
		e.mu.Lock()
		cc, err := unix.GetsockoptString(e.fd, unix.IPPROTO_TCP, unix.TCP_CONGESTION)
		e.mu.Unlock()
		if err != nil {
			t.Skip("no TCP_CONGESTION here:", err)
		}
		if cc != hostcc.Local {
			t.Errorf("congestion control %q, want %q", cc, hostcc.Local)
		}
	}
}

// renoAllowed reports whether a loopback socket may choose reno here.
func renoAllowed() bool {
	fd, err := unix.Socket(unix.AF_INET, unix.SOCK_STREAM, 0)
	if err != nil {
		return false
	}
	defer unix.Close(fd)
	return unix.SetsockoptString(fd, unix.IPPROTO_TCP, unix.TCP_CONGESTION, hostcc.Local) == nil
}
