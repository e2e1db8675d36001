package link_test

import (
	"bytes"
	"encoding/binary"
	"errors"
	"net"
	"net/netip"
	"os/exec"
	"slices"
	"testing"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/rdmago/rdmago/rxe/link"
	"github.com/rdmago/rdmago/rxe/wire"
)

// groModes are the receive modes the GRO tests run in.
var groModes = []struct {
	name string
	gro  bool
}{{"GRO", true}, {"no GRO", false}}

// checkGRO skips the test if the link was to read with GRO but the kernel
// has none, and fails it if GRO is on against the options.
func checkGRO(t *testing.T, l *link.UDP, want bool) {
	t.Helper()
	switch got := link.GROEnabled(l); {
	case want && !got:
		t.Skip("the kernel has no UDP GRO")
	case !want && got:
		t.Fatal("GRO on with DisableGRO set")
	}
}

// recvInSlices receives want packets from l, asking for at most per at a
// time into buffers of capacity size, and returns copies of them.
func recvInSlices(t *testing.T, l link.Link, want, per, size int) []link.Packet {
	t.Helper()
	watchdog := time.AfterFunc(10*time.Second, func() { l.Close() })
	defer watchdog.Stop()
	bufs := recvBuffers(per, size)
	var got []link.Packet
	for len(got) < want {
		n, err := l.Recv(bufs)
		if err != nil {
			t.Fatalf("Recv after %d of %d packets: %v", len(got), want, err)
		}
		if n < 1 || n > per {
			t.Fatalf("Recv returned %d packets into %d buffers", n, per)
		}
		for _, p := range bufs[:n] {
			p.Buf = bytes.Clone(p.Buf)
			got = append(got, p)
		}
	}
	return got
}

func TestUDPGRORunsArriveWholeAndInOrder(t *testing.T) {
	for _, mode := range groModes {
		for _, tc := range []struct {
			name     string
			payloads []int
		}{
			{"64 of 4096", slices.Repeat([]int{4096}, 64)},
			// Runs end at a shorter packet, and at 15 packets of 4096
			// (the largest UDP payload).
			{"mixed runs", slices.Concat(
				slices.Repeat([]int{4096}, 20), []int{100},
				slices.Repeat([]int{1024}, 10), []int{0},
				slices.Repeat([]int{2048}, 30), []int{13, 13, 4096, 1})},
		} {
			t.Run(mode.name+"/"+tc.name, func(t *testing.T) {
				checkNoLeaks(t)
				a, b := listenPair(t, addr1, addr2, link.UDPOptions{DisableGRO: !mode.gro})
				checkGRO(t, b, mode.gro)
				rng := newRand(11)
				pkts := make([]link.Packet, len(tc.payloads))
				for i, n := range tc.payloads {
					pkts[i] = link.Packet{Buf: newPacket(t, rng, wire.RCWriteMiddle, n, uint32(i)), Addr: addr2}
				}
				if err := a.Send(pkts); err != nil {
					t.Fatal(err)
				}
				got := recvInSlices(t, b, len(pkts), 5, 4096+64)
				checkSamePackets(t, got, pkts, addr1)
				for i, p := range got {
					if p.HopLimit != 64 {
						t.Errorf("packet %d: HopLimit %d, want 64", i, p.HopLimit)
					}
				}
				s := b.Stats()
				if s.Received != uint64(len(pkts)) || s.BadICRC != 0 || s.Short != 0 || s.Truncated != 0 {
					t.Errorf("receiver stats %+v, want Received %d and no drops", s, len(pkts))
				}
				d := link.DatagramsRead(b)
				if mode.gro {
					t.Logf("%d packets in %d datagrams", len(pkts), d)
				}
				if mode.gro && link.GSOEnabled(a) && d > uint64(len(pkts))/4 {
					t.Errorf("%d packets sent with GSO came in %d datagrams; want them coalesced", len(pkts), d)
				}
			})
		}
	}
}

func TestUDPGROOverIPv6(t *testing.T) {
	for _, mode := range groModes {
		t.Run(mode.name, func(t *testing.T) {
			// There is one IPv6 loopback address, so the link talks to
			// itself.
			lo := netip.IPv6Loopback()
			l := listenOne(t, lo, link.UDPOptions{DisableGRO: !mode.gro})
			checkGRO(t, l, mode.gro)
			rng := newRand(15)
			pkts := make([]link.Packet, 64)
			for i := range pkts {
				pkts[i] = link.Packet{Buf: newPacket(t, rng, wire.RCWriteMiddle, 4096, uint32(i)), Addr: lo}
			}
			pkts[63].Buf = newPacket(t, rng, wire.RCWriteLast, 5, 63)
			if err := l.Send(pkts); err != nil {
				t.Fatal(err)
			}
			got := recvInSlices(t, l, len(pkts), 5, 4096+64)
			checkSamePackets(t, got, pkts, lo)
			if d := link.DatagramsRead(l); mode.gro && link.GSOEnabled(l) && d > uint64(len(pkts))/4 {
				t.Errorf("%d packets sent with GSO came in %d datagrams; want them coalesced", len(pkts), d)
			}
		})
	}
}

// gsoSend sends pkts from c to dst as one UDP GSO send of segments of seg
// bytes, or skips the test if the kernel refuses it.
func gsoSend(t *testing.T, c *net.UDPConn, pkts [][]byte, seg int, dst netip.AddrPort) {
	t.Helper()
	oob := make([]byte, unix.CmsgSpace(2))
	h := (*unix.Cmsghdr)(unsafe.Pointer(&oob[0]))
	h.Level, h.Type = unix.IPPROTO_UDP, unix.UDP_SEGMENT
	h.SetLen(unix.CmsgLen(2))
	binary.NativeEndian.PutUint16(oob[unix.CmsgLen(0):], uint16(seg))
	if _, _, err := c.WriteMsgUDPAddrPort(slices.Concat(pkts...), oob, dst); err != nil {
		if errors.Is(err, unix.EINVAL) || errors.Is(err, unix.ENOPROTOOPT) || errors.Is(err, unix.EIO) {
			t.Skipf("the kernel refuses a UDP GSO send: %v", err)
		}
		t.Fatal(err)
	}
}

func TestUDPGRODropsACorruptPacketAndKeepsItsNeighbours(t *testing.T) {
	for _, mode := range groModes {
		t.Run(mode.name, func(t *testing.T) {
			l := listenOne(t, addr2, link.UDPOptions{DisableGRO: !mode.gro})
			checkGRO(t, l, mode.gro)
			c := plainConn(t, addr3)
			const tclass, hops = 0xb8, 9
			raw, err := c.SyscallConn()
			if err != nil {
				t.Fatal(err)
			}
			raw.Control(func(fd uintptr) {
				if err := unix.SetsockoptInt(int(fd), unix.IPPROTO_IP, unix.IP_TOS, tclass); err != nil {
					t.Error(err)
				}
				if err := unix.SetsockoptInt(int(fd), unix.IPPROTO_IP, unix.IP_TTL, hops); err != nil {
					t.Error(err)
				}
			})
			src := c.LocalAddr().(*net.UDPAddr).AddrPort()
			// Ten packets of one size, the k-th with its ICRC for IPv4
			// ID k as the kernel numbers a GSO send's datagrams, then a
			// bit flipped in the payload of the fourth.
			const count, bad = 10, 3
			rng := newRand(12)
			var pkts [][]byte
			var want []link.Packet
			for k := range count {
				p := newPacket(t, rng, wire.RCWriteMiddle, 1024, uint32(k))
				ph := wire.PseudoHeader{Src: addr3, Dst: addr2, SrcPort: src.Port(), DstPort: l.Port(), IPv4ID: uint16(k)}
				ph.SetICRC(p)
				if k == bad {
					p[100] ^= 4
				} else {
					want = append(want, link.Packet{Buf: p})
				}
				pkts = append(pkts, p)
			}
			gsoSend(t, c, pkts, len(pkts[0]), netip.AddrPortFrom(addr2, l.Port()))
			got := recvInSlices(t, l, len(want), 3, 4096)
			checkSamePackets(t, got, want, addr3)
			for i, p := range got {
				if p.TClass != tclass || p.HopLimit != hops {
					t.Errorf("packet %d: TClass %#x, HopLimit %d; want %#x, %d", i, p.TClass, p.HopLimit, tclass, hops)
				}
			}
			if s := l.Stats(); s.BadICRC != 1 || s.Received != uint64(len(want)) {
				t.Errorf("stats %+v, want BadICRC 1, Received %d", s, len(want))
			}
			if d := link.DatagramsRead(l); mode.gro && d != 1 {
				t.Errorf("%d packets sent with GSO came in %d datagrams, want 1", count, d)
			}
		})
	}
}

func TestUDPGROHoldsAPacketForABufferLongEnough(t *testing.T) {
	// A packet of a coalesced run that is too long for the buffer it
	// would go to takes a later buffer, or waits for the next call, rather
	// than being dropped; one longer than every buffer is dropped.
	a, b := listenPair(t, addr1, addr2, link.UDPOptions{})
	checkGRO(t, b, true)
	rng := newRand(13)
	var pkts []link.Packet
	for i := range 7 {
		pkts = append(pkts, link.Packet{Buf: newPacket(t, rng, wire.RCWriteMiddle, 1000, uint32(i)), Addr: addr2})
	}
	pkts = append(pkts, link.Packet{Buf: newPacket(t, rng, wire.RCWriteMiddle, 10, 7), Addr: addr2})
	if err := a.Send(pkts); err != nil {
		t.Fatal(err)
	}
	bufs := []link.Packet{{Buf: make([]byte, 0, 2000)}, {Buf: make([]byte, 0, 100)}, {Buf: make([]byte, 0, 2000)}}
	var got []link.Packet
	for len(got) < len(pkts) {
		n, err := b.Recv(bufs)
		if err != nil {
			t.Fatal(err)
		}
		for _, p := range bufs[:n] {
			got = append(got, link.Packet{Buf: bytes.Clone(p.Buf), Addr: p.Addr})
		}
		var caps []int
		for _, p := range bufs {
			caps = append(caps, cap(p.Buf))
		}
		if slices.Sort(caps); !slices.Equal(caps, []int{100, 2000, 2000}) {
			t.Fatalf("buffers of capacities %v after Recv, want those given: 100, 2000, 2000", caps)
		}
	}
	checkSamePackets(t, got, pkts, addr1)
	if s := b.Stats(); s.Truncated != 0 {
		t.Errorf("Truncated = %d, want 0", s.Truncated)
	}
	if d := link.DatagramsRead(b); link.GSOEnabled(a) && d != 1 {
		t.Errorf("%d packets sent with GSO came in %d datagrams, want 1", len(pkts), d)
	}

	last := []link.Packet{pkts[0], pkts[1], pkts[2], pkts[7]}
	if err := a.Send(last); err != nil {
		t.Fatal(err)
	}
	small := []link.Packet{{Buf: make([]byte, 0, 100)}, {Buf: make([]byte, 0, 100)}}
	n, err := b.Recv(small)
	if err != nil || n != 1 {
		t.Fatalf("Recv = %d, %v; want 1 packet", n, err)
	}
	checkSamePackets(t, small[:1], last[3:], addr1)
	if s := b.Stats(); s.Truncated != 3 {
		t.Errorf("Truncated = %d, want 3", s.Truncated)
	}
}

func TestUDPGROCloseUnblocksRecvWithPacketsPending(t *testing.T) {
	a, b := listenPair(t, addr1, addr2, link.UDPOptions{})
	checkGRO(t, b, true)
	pkts := mixedPackets(t, 14, 30, addr2)
	if err := a.Send(pkts); err != nil {
		t.Fatal(err)
	}
	bufs := recvBuffers(2, 4200)
	if n, err := b.Recv(bufs); err != nil || n == 0 {
		t.Fatalf("Recv = %d, %v", n, err)
	}
	b.Close()
	if _, err := b.Recv(bufs); !errors.Is(err, net.ErrClosed) {
		t.Errorf("Recv after Close: %v, want net.ErrClosed", err)
	}
}

func TestUDPGROCoalescesDatagramsCutBySoftwareGSO(t *testing.T) {
	// The sending end of the veth pair cuts GSO sends into datagrams with
	// real headers and IPv4 IDs 0, 1, 2, ...; the receiving end, with GRO
	// on, coalesces them again, as a NIC's driver does. (A veth runs GRO
	// only with NAPI, which "gro on" turns on, and, when the sending end
	// has TSO, only for packets it may also forward:
	// rx-udp-gro-forwarding.)
	for _, mode := range groModes {
		t.Run(mode.name, func(t *testing.T) {
			nsA, nsB := vethNamespaces(t)
			if _, err := exec.LookPath("ethtool"); err != nil {
				t.Skip("no ethtool to turn GRO on on a veth")
			}
			if out, err := exec.Command("ip", "netns", "exec", nsB, "ethtool", "-K", "v1", "gro", "on", "rx-udp-gro-forwarding", "on").CombinedOutput(); err != nil {
				t.Skipf("ethtool -K v1 gro on rx-udp-gro-forwarding on: %v: %s", err, out)
			}
			addrA, addrB := netip.MustParseAddr("10.99.0.1"), netip.MustParseAddr("10.99.0.2")
			var a, b *link.UDP
			if err := inNamespace(nsA, func() (err error) {
				a, err = link.ListenUDP(netip.AddrPortFrom(addrA, wire.UDPPort), link.UDPOptions{})
				return err
			}); err != nil {
				t.Fatal(err)
			}
			defer a.Close()
			if err := inNamespace(nsB, func() (err error) {
				b, err = link.ListenUDP(netip.AddrPortFrom(addrB, wire.UDPPort), link.UDPOptions{DisableGRO: !mode.gro})
				return err
			}); err != nil {
				t.Fatal(err)
			}
			defer b.Close()
			checkGRO(t, b, mode.gro)
			if !link.GSOEnabled(a) {
				t.Skip("the kernel has no UDP GSO")
			}
			rng := newRand(16)
			var pkts []link.Packet
			for round := range 4 {
				for i := range 40 {
					pkts = append(pkts, link.Packet{Buf: newPacket(t, rng, wire.RCSendMiddle, 1024, uint32(len(pkts))), Addr: addrB})
					if i == 39 {
						pkts[len(pkts)-1].Buf = newPacket(t, rng, wire.RCSendLast, 10*round, uint32(len(pkts)-1))
					}
				}
			}
			if err := a.Send(pkts); err != nil {
				t.Fatal(err)
			}
			got := recvInSlices(t, b, len(pkts), 5, 4096+64)
			checkSamePackets(t, got, pkts, addrA)
			if s := b.Stats(); s.BadICRC != 0 || s.Received != uint64(len(pkts)) {
				t.Errorf("receiver stats %+v, want Received %d, BadICRC 0", s, len(pkts))
			}
			if mode.gro {
				d := link.DatagramsRead(b)
				t.Logf("%d packets in %d datagrams", len(pkts), d)
				if d >= uint64(len(pkts)) {
					t.Errorf("%d packets came in %d datagrams; want GRO to coalesce some", len(pkts), d)
				}
			}
		})
	}
}
