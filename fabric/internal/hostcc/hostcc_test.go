package hostcc

import (
	"net"
	"net/netip"
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
		{"10.0.0.5", "10.0.0.5", true},  // the host's own address
		{"10.0.0.5", "10.0.0.6", false}, // another host
		{"fe80::1", "fe80::2", false},   // another host on the link
		{"10.0.0.5", "::ffff:10.0.0.5", true},
	} {
		if got := IsLocal(netip.MustParseAddr(c.local), netip.MustParseAddr(c.peer)); got != c.want {
			t.Errorf("IsLocal(%s, %s) = %v, want %v", c.local, c.peer, got, c.want)
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
		if Set(int(fd), local, netip.MustParseAddr("192.0.2.1")) {
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
