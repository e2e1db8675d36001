package link_test

import (
	"encoding/binary"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"runtime"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/rdmago/rdmago/rxe/link"
	"github.com/rdmago/rdmago/rxe/wire"
)

func TestUDPExchangesPacketsByteExact(t *testing.T) {
	for _, tc := range []struct {
		name  string
		count int
		opt   link.UDPOptions
	}{
		{"one", 1, link.UDPOptions{}},
		{"batch", 64, link.UDPOptions{}},
		{"several batches", 300, link.UDPOptions{}},
		{"several batches without GSO", 300, link.UDPOptions{DisableGSO: true}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			checkNoLeaks(t)
			a, b := listenPair(t, addr1, addr2, tc.opt)
			for _, dir := range []struct{ from, to *link.UDP }{{a, b}, {b, a}} {
				pkts := mixedPackets(t, uint64(tc.count), tc.count, dir.to.LocalAddr())
				if err := dir.from.Send(pkts); err != nil {
					t.Fatalf("Send: %v", err)
				}
				got := recvAll(t, dir.to, tc.count, 10*time.Second)
				checkSamePackets(t, got, pkts, dir.from.LocalAddr())
				if runtime.GOOS == "linux" && got[0].HopLimit != 64 {
					t.Errorf("HopLimit = %d, want 64", got[0].HopLimit)
				}
				if s := dir.from.Stats(); s.Sent != uint64(tc.count) || s.SendErrors != 0 {
					t.Errorf("sender stats %+v, want Sent %d", s, tc.count)
				}
				if s := dir.to.Stats(); s.Received != uint64(tc.count) || s.BadICRC != 0 || s.Short != 0 {
					t.Errorf("receiver stats %+v, want Received %d", s, tc.count)
				}
			}
		})
	}
}

func TestUDPSendSetsICRCOfIPv4ID0AndDF(t *testing.T) {
	a, b := listenPair(t, addr1, addr2, link.UDPOptions{})
	pkts := mixedPackets(t, 1, 20, b.LocalAddr())
	if err := a.Send(pkts); err != nil {
		t.Fatal(err)
	}
	for i, p := range pkts {
		ph := wire.PseudoHeader{Src: addr1, Dst: addr2, SrcPort: a.Port(), DstPort: a.Port(),
			IPv4Flags: wire.IPv4DontFragment}
		// The k-th packet of a GSO run goes out with IPv4 ID k; without
		// GSO every ID is 0. Either way some small ID matches.
		ok := false
		for id := range uint16(64) {
			ph.IPv4ID = id
			ok = ok || ph.CheckICRC(p.Buf)
		}
		if !ok {
			t.Errorf("packet %d: ICRC matches no pseudo header with DF and a small ID", i)
		}
	}
	recvAll(t, b, len(pkts), 10*time.Second)
}

func TestUDPReceiveDropsBadPackets(t *testing.T) {
	checkNoLeaks(t)
	l := listenOne(t, addr2, link.UDPOptions{})
	c := plainConn(t, addr3)
	to := net.UDPAddrFromAddrPort(netip.AddrPortFrom(addr2, l.Port()))
	srcPort := uint16(c.LocalAddr().(*net.UDPAddr).Port)
	rng := newRand(7)

	good := newPacket(t, rng, wire.RCSendOnly, 100, 1)
	ph := wire.PseudoHeader{Src: addr3, Dst: addr2, SrcPort: srcPort, DstPort: l.Port()}
	ph.SetICRC(good) // ID 0, no DF: the receiver cannot tell, and accepts it
	badICRC := append([]byte(nil), good...)
	badICRC[len(badICRC)-1] ^= 0x80
	badPayload := append([]byte(nil), good...)
	badPayload[30] ^= 1
	wrongPort := newPacket(t, rng, wire.RCSendOnly, 100, 2)
	wph := ph
	wph.SrcPort++ // the ICRC covers the source port
	wph.SetICRC(wrongPort)
	short := good[:link.MinPacket-1]

	for _, b := range [][]byte{badICRC, short, badPayload, wrongPort, good} {
		if _, err := c.WriteToUDP(b, to); err != nil {
			t.Fatal(err)
		}
	}
	got := recvAll(t, l, 1, 10*time.Second)
	checkSamePackets(t, got, []link.Packet{{Buf: good}}, addr3)
	s := l.Stats()
	if s.BadICRC != 3 || s.Short != 1 || s.Received != 1 {
		t.Errorf("stats %+v, want BadICRC 3, Short 1, Received 1", s)
	}
}

func TestUDPReceiveDropsPacketsLongerThanTheBuffer(t *testing.T) {
	for _, opt := range []link.UDPOptions{{}, {DisableGRO: true}} {
		t.Run(fmt.Sprintf("DisableGRO=%v", opt.DisableGRO), func(t *testing.T) {
			a, b := listenPair(t, addr1, addr2, opt)
			rng := newRand(8)
			long := link.Packet{Buf: newPacket(t, rng, wire.RCSendOnly, 1000, 1), Addr: addr2}
			fits := link.Packet{Buf: newPacket(t, rng, wire.RCSendOnly, 8, 2), Addr: addr2}
			if err := a.Send([]link.Packet{long, fits}); err != nil {
				t.Fatal(err)
			}
			bufs := recvBuffers(4, 64)
			n, err := b.Recv(bufs)
			if err != nil || n != 1 {
				t.Fatalf("Recv = %d, %v; want 1 packet", n, err)
			}
			checkSamePackets(t, bufs[:1], []link.Packet{fits}, addr1)
			if s := b.Stats(); runtime.GOOS == "linux" && s.Truncated != 1 {
				t.Errorf("Truncated = %d, want 1", s.Truncated)
			}
		})
	}
}

func TestUDPSendReportsBadPacketsAndSendsTheRest(t *testing.T) {
	a, b := listenPair(t, addr1, addr2, link.UDPOptions{})
	rng := newRand(9)
	ok1 := link.Packet{Buf: newPacket(t, rng, wire.RCSendOnly, 10, 1), Addr: addr2}
	ok2 := link.Packet{Buf: newPacket(t, rng, wire.RCSendOnly, 10, 2), Addr: netip.AddrFrom16(addr2.As16())}
	for _, tc := range []struct {
		name string
		bad  link.Packet
		want error
	}{
		{"short", link.Packet{Buf: make([]byte, link.MinPacket-1), Addr: addr2}, link.ErrShortPacket},
		{"too long", link.Packet{Buf: make([]byte, a.MaxPacket()+1), Addr: addr2}, link.ErrPacketTooLarge},
		{"IPv6 peer", link.Packet{Buf: make([]byte, 100), Addr: netip.IPv6Loopback()}, link.ErrAddr},
		{"no address", link.Packet{Buf: make([]byte, 100)}, link.ErrAddr},
		{"unspecified", link.Packet{Buf: make([]byte, 100), Addr: netip.IPv4Unspecified()}, link.ErrAddr},
	} {
		t.Run(tc.name, func(t *testing.T) {
			before := a.Stats()
			err := a.Send([]link.Packet{ok1, tc.bad, ok2})
			if !errors.Is(err, tc.want) {
				t.Errorf("Send error %v, want %v", err, tc.want)
			}
			got := recvAll(t, b, 2, 10*time.Second)
			checkSamePackets(t, got, []link.Packet{ok1, ok2}, addr1)
			s := a.Stats()
			if s.SendErrors-before.SendErrors != 1 || s.Sent-before.Sent != 2 {
				t.Errorf("SendErrors +%d, Sent +%d; want +1, +2", s.SendErrors-before.SendErrors, s.Sent-before.Sent)
			}
		})
	}
}

func TestUDPListenNamesTheAddressInUse(t *testing.T) {
	l := listenOne(t, addr1, link.UDPOptions{})
	ap := netip.AddrPortFrom(addr1, l.Port())
	for _, addr := range []netip.AddrPort{ap, netip.AddrPortFrom(netip.AddrFrom16(addr1.As16()), l.Port())} {
		l2, err := link.ListenUDP(addr, link.UDPOptions{})
		if err == nil {
			l2.Close()
			t.Fatalf("ListenUDP(%v) succeeded on a port in use", addr)
		}
		if !errors.Is(err, syscall.EADDRINUSE) {
			t.Errorf("ListenUDP(%v) error %v does not wrap EADDRINUSE", addr, err)
		}
		if msg := err.Error(); !strings.Contains(msg, ap.String()+" is already in use") {
			t.Errorf("ListenUDP(%v) error %q does not name %v as in use", addr, msg, ap)
		}
	}
}

func TestUDPListenRejectsAddressesItCannotUse(t *testing.T) {
	for _, tc := range []struct {
		addr string
		want string
	}{
		{"0.0.0.0:0", "one unicast address"},
		{"[::]:0", "one unicast address"},
		{"224.0.0.1:0", "one unicast address"},
		{"192.0.2.123:0", "not an address of this host"}, // TEST-NET-1, on no host
	} {
		l, err := link.ListenUDP(netip.MustParseAddrPort(tc.addr), link.UDPOptions{})
		if err == nil {
			l.Close()
			t.Errorf("ListenUDP(%s) succeeded", tc.addr)
			continue
		}
		if !strings.Contains(err.Error(), tc.want) {
			t.Errorf("ListenUDP(%s) error %q, want it to say %q", tc.addr, err, tc.want)
		}
	}
	if _, err := link.ListenUDP(netip.AddrPort{}, link.UDPOptions{}); err == nil {
		t.Error("ListenUDP of the zero AddrPort succeeded")
	}
}

func TestUDPMappedAddressBindsAsIPv4(t *testing.T) {
	mapped := netip.AddrFrom16(addr1.As16())
	l := listenOne(t, mapped, link.UDPOptions{})
	if got := l.LocalAddr(); got != addr1 {
		t.Errorf("LocalAddr() = %v, want %v", got, addr1)
	}
	if got := l.MaxPacket(); got != 65507 {
		t.Errorf("MaxPacket() = %d, want 65507", got)
	}
	pkt := link.Packet{Buf: newPacket(t, newRand(3), wire.RCSendOnly, 64, 1), Addr: mapped}
	if err := l.Send([]link.Packet{pkt}); err != nil { // to itself
		t.Fatal(err)
	}
	checkSamePackets(t, recvAll(t, l, 1, 10*time.Second), []link.Packet{pkt}, addr1)
}

func TestUDPOverIPv6(t *testing.T) {
	checkNoLeaks(t)
	l := listenOne(t, netip.IPv6Loopback(), link.UDPOptions{})
	if got := l.MaxPacket(); got != 65527 {
		t.Errorf("MaxPacket() = %d, want 65527", got)
	}
	// There is one IPv6 loopback address, so the link talks to itself.
	pkts := mixedPackets(t, 6, 100, netip.IPv6Loopback())
	if err := l.Send(pkts); err != nil {
		t.Fatal(err)
	}
	got := recvAll(t, l, len(pkts), 10*time.Second)
	checkSamePackets(t, got, pkts, netip.IPv6Loopback())
	for i, p := range pkts {
		ph := wire.PseudoHeader{Src: netip.IPv6Loopback(), Dst: netip.IPv6Loopback(), SrcPort: l.Port(), DstPort: l.Port()}
		if !ph.CheckICRC(p.Buf) {
			t.Errorf("packet %d: ICRC does not match the IPv6 pseudo header", i)
		}
	}
	if runtime.GOOS == "linux" && got[0].HopLimit != 64 {
		t.Errorf("HopLimit = %d, want 64", got[0].HopLimit)
	}
}

func TestUDPCloseUnblocksRecv(t *testing.T) {
	for _, opt := range []link.UDPOptions{{}, {DisableGRO: true}} {
		t.Run(fmt.Sprintf("DisableGRO=%v", opt.DisableGRO), func(t *testing.T) {
			checkNoLeaks(t)
			l := listenOne(t, addr1, opt)
			checkCloseUnblocksRecv(t, l, mixedPackets(t, 1, 1, addr1))
		})
	}
}

func TestUDPSendFromManyGoroutines(t *testing.T) {
	checkNoLeaks(t)
	a, b := listenPair(t, addr1, addr2, link.UDPOptions{})
	const senders, each = 8, 50
	done := make(chan error, senders)
	for g := range senders {
		go func() {
			pkts := mixedPackets(t, uint64(g), each, addr2)
			for i := range pkts {
				binary.BigEndian.PutUint32(pkts[i].Buf[4:], uint32(g)) // dest QP names the sender
			}
			done <- a.Send(pkts)
		}()
	}
	for range senders {
		if err := <-done; err != nil {
			t.Fatal(err)
		}
	}
	got := recvAll(t, b, senders*each, 10*time.Second)
	perSender := make(map[uint32]int)
	for _, p := range got {
		perSender[binary.BigEndian.Uint32(p.Buf[4:])]++
	}
	for g := range uint32(senders) {
		if perSender[g] != each {
			t.Errorf("sender %d: %d packets arrived, want %d", g, perSender[g], each)
		}
	}
}
