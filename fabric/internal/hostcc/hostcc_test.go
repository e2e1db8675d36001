package hostcc

import (
	"net"
	"net/netip"
	"os"
	"testing"

	"golang.org/x/sys/unix"
)

func TestIsLocalIsTheHostItself(t *testing.T) {
	for _, c := range []struct {
		local, peer string
		want        bool
	}{
		{"127.0.0.1", "127.0.0.1", true},
		{"127.0.0.1", "127.0.0.2", true},
		{"::1", "::1", true},
		{"::ffff:127.0.0.1", "::ffff:127.0.0.1", true},
		{"198.51.100.5", "198.51.100.5", true},  // the connection's own address
		{"127.0.0.1", "198.51.100.6", true},     // from loopback: only this host answers
		{"10.0.0.5", "::ffff:10.0.0.5", true},   // mapped
		{"fe80::1%eth0", "fe80::1%eth0", true},  // the same link-local address
		{"198.51.100.5", "198.51.100.6", false}, // another host
		{"2001:db8::1", "2001:db8::2", false},   // another host
		{"fe80::1%eth0", "fe80::2%eth0", false}, // another host on the link
		{"203.0.113.7", "::ffff:203.0.113.8", false},
	} {
		local, peer := netip.MustParseAddr(c.local), netip.MustParseAddr(c.peer)
		if !c.want && isHostAddr(peer.Unmap()) {
			continue // this host happens to have the documentation address
		}
		if got := IsLocal(local, peer); got != c.want {
			t.Errorf("IsLocal(%s, %s) = %v, want %v", c.local, c.peer, got, c.want)
		}
	}
}

func TestIsLocalKnowsTheHostsOwnAddresses(t *testing.T) {
	addrs, _ := net.InterfaceAddrs()
	for _, x := range addrs {
		ipn, ok := x.(*net.IPNet)
		if !ok {
			continue
		}
		a, _ := netip.AddrFromSlice(ipn.IP)
		// From an address of another network to one of this host's.
		if !IsLocal(netip.MustParseAddr("198.51.100.5"), a) {
			t.Errorf("IsLocal(198.51.100.5, %s) = false, but %s is this host's", a, a)
		}
	}
}

func TestWantFollowsTheEnvironment(t *testing.T) {
	for _, c := range []struct {
		set       bool
		env, want string
	}{
		{false, "", Local},
		{true, "", Local},
		{true, "system", ""},
		{true, "cubic", "cubic"},
	} {
		if c.set {
			t.Setenv(Env, c.env)
		} else {
			t.Setenv(Env, "x")
			unsetenv(t)
		}
		if got := Want(); got != c.want {
			t.Errorf("%s set %v to %q: Want() = %q, want %q", Env, c.set, c.env, got, c.want)
		}
	}
}

// TestSetChoosesRenoOnALoopbackConnectionOnly connects over loopback and
// reads the socket's congestion control back.
func TestSetChoosesRenoOnALoopbackConnectionOnly(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Skip("no loopback:", err)
	}
	defer ln.Close()
	go func() {
		if c, err := ln.Accept(); err == nil {
			defer c.Close()
			c.Read(make([]byte, 1))
		}
	}()
	c, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	raw, err := c.(*net.TCPConn).SyscallConn()
	if err != nil {
		t.Fatal(err)
	}
	local := c.LocalAddr().(*net.TCPAddr).AddrPort().Addr()
	peer := c.RemoteAddr().(*net.TCPAddr).AddrPort().Addr()
	var set bool
	var cc string
	raw.Control(func(fd uintptr) {
		if other := netip.MustParseAddr("198.51.100.6"); !isHostAddr(other) && Set(int(fd), netip.MustParseAddr("198.51.100.5"), other) {
			t.Error("Set changed a connection to another host")
		}
		before, _ := unix.GetsockoptString(int(fd), unix.IPPROTO_TCP, unix.TCP_CONGESTION)
		set = Set(int(fd), local, peer)
		cc, err = unix.GetsockoptString(int(fd), unix.IPPROTO_TCP, unix.TCP_CONGESTION)
		t.Logf("congestion control %s, then %s", before, cc)
	})
	if !set {
		t.Skip("the kernel refused reno")
	}
	if err != nil || cc != Local {
		t.Errorf("TCP_CONGESTION = %q, %v; want %q", cc, err, Local)
	}
}

// unsetenv removes Env for the rest of the test (t.Setenv restores it).
func unsetenv(t *testing.T) {
	t.Helper()
	if err := os.Unsetenv(Env); err != nil {
		t.Fatal(err)
	}
}
