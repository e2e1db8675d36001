package link_test

import (
	"errors"
	"fmt"
	"net/netip"
	"os"
	"os/exec"
	"runtime"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/rdmago/rdmago/rxe/link"
	"github.com/rdmago/rdmago/rxe/wire"
)

// These tests look at the IP headers the kernel writes for the UDP link's
// datagrams, to check that the ICRC the link computes holds for them: the
// pseudo header's IPv4 ID 0 and DF flag (and ID k for the k-th packet of a
// GSO send) are reasoning about Linux, and only a capture shows it right.

// needRoot skips the test unless the process runs as root.
func needRoot(t *testing.T, why string) {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skipf("%s needs root; skipping", why)
	}
}

// openCapture opens a raw IPv4 socket, in the calling thread's network
// namespace, that sees every UDP datagram to addr, IP header and all.
func openCapture(addr netip.Addr) (int, error) {
	fd, err := unix.Socket(unix.AF_INET, unix.SOCK_RAW|unix.SOCK_CLOEXEC, unix.IPPROTO_UDP)
	if err != nil {
		return -1, fmt.Errorf("raw socket: %w", err)
	}
	tv := unix.NsecToTimeval(int64(5 * time.Second))
	if err := unix.SetsockoptTimeval(fd, unix.SOL_SOCKET, unix.SO_RCVTIMEO, &tv); err != nil {
		unix.Close(fd)
		return -1, err
	}
	if err := unix.Bind(fd, &unix.SockaddrInet4{Addr: addr.As4()}); err != nil {
		unix.Close(fd)
		return -1, fmt.Errorf("bind raw socket to %v: %w", addr, err)
	}
	return fd, nil
}

// captureDatagrams reads from a raw socket the next count datagrams to UDP
// port port.
func captureDatagrams(t *testing.T, fd int, port uint16, count int) []wire.Datagram {
	t.Helper()
	var ds []wire.Datagram
	for len(ds) < count {
		buf := make([]byte, 1<<17)
		n, _, err := unix.Recvfrom(fd, buf, 0)
		if err == unix.EINTR {
			continue // the runtime's preemption signal came
		}
		if err != nil {
			t.Fatalf("raw recvfrom after %d of %d datagrams: %v", len(ds), count, err)
		}
		d, err := wire.ParseDatagram(buf[:n])
		if err != nil || d.DstPort() != port {
			continue
		}
		ds = append(ds, d)
	}
	return ds
}

// checkDatagrams checks that the captured datagrams carry the link's ports
// and an ICRC that holds for their real headers, that they were sent with DF
// and that their IPv4 IDs are ids.
func checkDatagrams(t *testing.T, ds []wire.Datagram, port uint16, ids []uint16) {
	t.Helper()
	for i, d := range ds {
		if d.IPv4ID() != ids[i] || d.IPv4Flags() != wire.IPv4DontFragment {
			t.Errorf("datagram %d: IPv4 ID %d flags %#04x, want ID %d and DF", i, d.IPv4ID(), d.IPv4Flags(), ids[i])
		}
		if d.SrcPort() != port || d.DstPort() != port {
			t.Errorf("datagram %d: ports %d > %d, want %d > %d", i, d.SrcPort(), d.DstPort(), port, port)
		}
		if !d.CheckICRC() {
			t.Errorf("datagram %d (%d bytes): the ICRC does not hold for the real IP and UDP headers", i, len(d.Payload))
		}
	}
}

func TestUDPSendsExactPseudoHeader(t *testing.T) {
	needRoot(t, "capturing IP headers with a raw socket")
	fd, err := openCapture(addr2)
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Close(fd)
	// Loopback carries a GSO send whole, so capture sends without GSO.
	a, b := listenPair(t, addr1, addr2, link.UDPOptions{DisableGSO: true})
	pkts := mixedPackets(t, 11, 30, addr2)
	if err := a.Send(pkts); err != nil {
		t.Fatal(err)
	}
	ds := captureDatagrams(t, fd, b.Port(), len(pkts))
	checkDatagrams(t, ds, a.Port(), make([]uint16, len(pkts)))
	recvAll(t, b, len(pkts), 10*time.Second)
}

// vethNamespaces creates two network namespaces joined by a veth pair,
// 10.99.0.1/24 in the first and 10.99.0.2/24 in the second, with an MTU of
// 1500. The sending end takes GSO sends of one segment at most
// (gso_max_segs 1), so the kernel cuts every GSO send into datagrams in
// software, as it would for a NIC without UDP segmentation offload, and the
// capture sees the datagrams a peer would. It skips the test without root
// or the ip tool.
func vethNamespaces(t *testing.T) (a, b string) {
	t.Helper()
	needRoot(t, "creating network namespaces")
	if _, err := exec.LookPath("ip"); err != nil {
		t.Skip("no ip tool to create network namespaces")
	}
	a = fmt.Sprintf("rdmago-link-%d-a", os.Getpid())
	b = fmt.Sprintf("rdmago-link-%d-b", os.Getpid())
	ip := func(args ...string) error {
		out, err := exec.Command("ip", args...).CombinedOutput()
		if err != nil {
			return fmt.Errorf("ip %v: %v: %s", args, err, out)
		}
		return nil
	}
	for _, ns := range []string{a, b} {
		if err := ip("netns", "add", ns); err != nil {
			t.Skip(err)
		}
		t.Cleanup(func() { ip("netns", "del", ns) })
	}
	for _, args := range [][]string{
		{"link", "add", "v0", "netns", a, "mtu", "1500", "gso_max_segs", "1", "type", "veth", "peer", "name", "v1", "netns", b},
		{"-n", a, "addr", "add", "10.99.0.1/24", "dev", "v0"},
		{"-n", b, "addr", "add", "10.99.0.2/24", "dev", "v1"},
		{"-n", a, "link", "set", "v0", "up"},
		{"-n", b, "link", "set", "v1", "up"},
	} {
		if err := ip(args...); err != nil {
			t.Skip(err)
		}
	}
	return a, b
}

// inNamespace runs f on an OS thread moved into network namespace ns, so
// that the sockets f opens live there. The thread is never unlocked, and so
// dies with the goroutine instead of returning to the pool in ns.
func inNamespace(ns string, f func() error) error {
	errc := make(chan error, 1)
	go func() {
		runtime.LockOSThread()
		fd, err := unix.Open("/var/run/netns/"+ns, unix.O_RDONLY|unix.O_CLOEXEC, 0)
		if err != nil {
			errc <- err
			return
		}
		defer unix.Close(fd)
		if err := unix.Setns(fd, unix.CLONE_NEWNET); err != nil {
			errc <- fmt.Errorf("setns %s: %w", ns, err)
			return
		}
		errc <- f()
	}()
	return <-errc
}

func TestUDPGSOSendsExactPseudoHeader(t *testing.T) {
	nsA, nsB := vethNamespaces(t)
	addrA, addrB := netip.MustParseAddr("10.99.0.1"), netip.MustParseAddr("10.99.0.2")
	var a, b *link.UDP
	if err := inNamespace(nsA, func() (err error) {
		a, err = link.ListenUDP(netip.AddrPortFrom(addrA, wire.UDPPort), link.UDPOptions{})
		return err
	}); err != nil {
		t.Fatal(err)
	}
	defer a.Close()
	if !link.GSOEnabled(a) {
		t.Skip("GSO is off (the kernel has none, or RDMAGO_DISABLE_GSO=1)")
	}
	fd := -1
	if err := inNamespace(nsB, func() (err error) {
		if b, err = link.ListenUDP(netip.AddrPortFrom(addrB, wire.UDPPort), link.UDPOptions{}); err != nil {
			return err
		}
		fd, err = openCapture(addrB)
		return err
	}); err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	defer unix.Close(fd)

	// A run of twenty 1 KiB packets and a short one (one GSO send), five
	// of 512 bytes (another), and two that exceed the MTU: their GSO send
	// fails, and so do they one by one.
	rng := newRand(12)
	var pkts []link.Packet
	var ids []uint16
	add := func(n, payload int) {
		for k := range n {
			pkts = append(pkts, link.Packet{Buf: newPacket(t, rng, wire.RCSendMiddle, payload, uint32(len(pkts))), Addr: addrB})
			ids = append(ids, uint16(k))
		}
	}
	add(20, 1024)
	add(1, 100)
	ids[20] = 20 // the short packet ends the first run
	add(5, 512)
	good := len(pkts)
	add(2, 2000)

	err := a.Send(pkts)
	if !errors.Is(err, syscall.EMSGSIZE) {
		t.Errorf("Send error %v, want EMSGSIZE for the packets beyond the MTU", err)
	}
	if s := a.Stats(); s.Sent != uint64(good) || s.SendErrors != 2 {
		t.Errorf("sender stats %+v, want Sent %d, SendErrors 2", s, good)
	}
	ds := captureDatagrams(t, fd, wire.UDPPort, good)
	checkDatagrams(t, ds, wire.UDPPort, ids[:good])
	checkSamePackets(t, recvAll(t, b, good, 10*time.Second), pkts[:good], addrA)
}
