package nvmeof

import (
	"context"
	"testing"
	"time"

	_ "github.com/rdmago/rdmago/rxe"
)

// With windows, each command's data is reached through a window the
// target invalidates with its response; with StaticKeys, through the
// data region's own key. Both move the same bytes.
func TestWindowsAreInvalidatedByTheTargetsResponse(t *testing.T) {
	tg, err := NewTarget(nil)
	if err != nil {
		t.Fatal(err)
	}
	defer tg.Close()
	if err := tg.AddSubsystem("nqn.2026-11.io.rdmago:windows", NewMemory(1<<20)); err != nil {
		t.Fatal(err)
	}
	addr, err := tg.Listen("127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	for _, static := range []bool{false, true} {
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		c, err := Dial(ctx, addr.String(), "nqn.2026-11.io.rdmago:windows", &Options{IOQueues: 1, QueueDepth: 4, StaticKeys: static})
		cancel()
		if err != nil {
			t.Fatal(err)
		}
		q := c.io[0]
		if q.windows == static {
			t.Fatalf("StaticKeys %v: windows %v", static, q.windows)
		}
		ns, err := c.Namespace(context.Background(), 1)
		if err != nil {
			t.Fatal(err)
		}
		p := []byte("through a window, or not")
		for range 10 { // each slot's window is bound, invalidated, bound again
			if _, err := ns.WriteAt(p, 512*9); err != nil {
				t.Fatal(err)
			}
			got := make([]byte, len(p))
			if _, err := ns.ReadAt(got, 512*9); err != nil || string(got) != string(p) {
				t.Fatalf("StaticKeys %v: read %q, %v", static, got, err)
			}
		}
		q.mu.Lock()
		for i, s := range q.slots {
			if s.bound {
				t.Errorf("slot %d's window is still bound after its response", i)
			}
			if static != (s.mw == nil) {
				t.Errorf("StaticKeys %v: slot %d has window %v", static, i, s.mw)
			}
		}
		q.mu.Unlock()
		c.Close()
	}
}

func TestParseUUID(t *testing.T) {
	if u, ok := parseUUID("974fdd8d-fba9-494d-956e-c016208252f6"); !ok || u[0] != 0x97 || u[15] != 0xf6 {
		t.Errorf("parseUUID: %x %v", u, ok)
	}
	for _, bad := range []string{"", "974fdd8dfba9494d956ec016208252f6", "974fdd8d-fba9-494d-956e-c016208252fz"} {
		if _, ok := parseUUID(bad); ok {
			t.Errorf("parseUUID(%q) took it", bad)
		}
	}
}

func TestTheDefaultHostNQNStaysTheSame(t *testing.T) {
	a, ida := processHost()
	if len(a) < len("nqn.2014-08.org.nvmexpress:uuid:") || ida == [16]byte{} {
		t.Fatalf("default host %q %x", a, ida)
	}
	o := (*Options)(nil).orDefault()
	if o.HostNQN != a || o.HostID != ida {
		t.Fatalf("defaults %q %x, want %q %x", o.HostNQN, o.HostID, a, ida)
	}
}
