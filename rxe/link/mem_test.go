package link_test

import (
	"bytes"
	"encoding/binary"
	"errors"
	"net/netip"
	"slices"
	"syscall"
	"testing"
	"time"

	"github.com/rdmago/rdmago/rxe/link"
	"github.com/rdmago/rdmago/rxe/wire"
)

// memPair returns links at addr1 and addr2 on a new network seeded with
// seed, closed when the test ends.
func memPair(t testing.TB, seed uint64) (*link.Network, *link.Mem, *link.Mem) {
	t.Helper()
	n := link.NewNetwork(seed)
	a, err := n.Attach(addr1)
	if err != nil {
		t.Fatal(err)
	}
	b, err := n.Attach(addr2)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { a.Close(); b.Close() })
	return n, a, b
}

// numbered returns count small packets to dst whose PSNs count from 0.
func numbered(t testing.TB, count int, dst netip.Addr) []link.Packet {
	t.Helper()
	rng := newRand(uint64(count))
	pkts := make([]link.Packet, count)
	for i := range pkts {
		pkts[i] = link.Packet{Buf: newPacket(t, rng, wire.RCSendMiddle, 32, uint32(i)), Addr: dst}
	}
	return pkts
}

// sendAll sends pkts in batches of 64.
func sendAll(t testing.TB, l link.Link, pkts []link.Packet) {
	t.Helper()
	for b := range slices.Chunk(pkts, 64) {
		if err := l.Send(b); err != nil {
			t.Fatal(err)
		}
	}
}

// psn returns the PSN of a packet.
func psn(p []byte) int { return int(binary.BigEndian.Uint32(p[8:]) & 0xffffff) }

func TestMemDeliversPackets(t *testing.T) {
	checkNoLeaks(t)
	_, a, b := memPair(t, 1)
	if a.Port() != wire.UDPPort || a.MaxPacket() != link.DefaultMemMaxPacket || a.LocalAddr() != addr1 {
		t.Errorf("Port %d MaxPacket %d LocalAddr %v; want %d, %d, %v", a.Port(), a.MaxPacket(), a.LocalAddr(), wire.UDPPort, link.DefaultMemMaxPacket, addr1)
	}
	for _, dir := range []struct {
		from, to *link.Mem
		dst      netip.Addr
	}{{a, b, addr2}, {b, a, netip.AddrFrom16(addr1.As16())}} {
		pkts := mixedPackets(t, 2, 100, dir.dst)
		sendAll(t, dir.from, pkts)
		got := recvAll(t, dir.to, len(pkts), 10*time.Second)
		checkSamePackets(t, got, pkts, dir.from.LocalAddr())
		for i, p := range pkts {
			ph := wire.PseudoHeader{Src: dir.from.LocalAddr(), Dst: dir.to.LocalAddr(), SrcPort: wire.UDPPort, DstPort: wire.UDPPort,
				IPv4Flags: wire.IPv4DontFragment}
			if !ph.CheckICRC(p.Buf) {
				t.Fatalf("packet %d: ICRC is not that of IPv4 ID 0 and DF, as the UDP link sends", i)
			}
		}
		if got[0].HopLimit != 64 || got[0].TClass != 0 {
			t.Errorf("TClass %d HopLimit %d, want 0, 64", got[0].TClass, got[0].HopLimit)
		}
		if s := dir.from.Stats(); s.Sent != 100 {
			t.Errorf("Sent = %d, want 100", s.Sent)
		}
		if s := dir.to.Stats(); s.Received != 100 {
			t.Errorf("Received = %d, want 100", s.Received)
		}
	}
}

func TestMemFaultsHappenAtTheirRate(t *testing.T) {
	const total = 10000
	for _, tc := range []struct {
		name   string
		faults link.Faults
		count  func(link.NetworkStats) uint64 // packets the fault befell
		check  func(t *testing.T, sent, got []link.Packet, s link.NetworkStats, a, b link.Stats)
	}{
		{
			name:   "drop",
			faults: link.Faults{Drop: 0.1},
			count:  func(s link.NetworkStats) uint64 { return s.Lost },
			check: func(t *testing.T, sent, got []link.Packet, s link.NetworkStats, a, b link.Stats) {
				if len(got) != total-int(s.Lost) || a.Dropped != s.Lost {
					t.Errorf("%d received, sender Dropped %d, Lost %d", len(got), a.Dropped, s.Lost)
				}
				checkInOrder(t, got, false)
			},
		},
		{
			name:   "duplicate",
			faults: link.Faults{Duplicate: 0.1},
			count:  func(s link.NetworkStats) uint64 { return s.Duplicated },
			check: func(t *testing.T, sent, got []link.Packet, s link.NetworkStats, a, b link.Stats) {
				if len(got) != total+int(s.Duplicated) {
					t.Errorf("%d received, want %d", len(got), total+int(s.Duplicated))
				}
				checkInOrder(t, got, true)
			},
		},
		{
			name:   "reorder",
			faults: link.Faults{Reorder: 0.1},
			count:  func(s link.NetworkStats) uint64 { return s.Reordered },
			check: func(t *testing.T, sent, got []link.Packet, s link.NetworkStats, a, b link.Stats) {
				psns := make([]int, len(got))
				late := 0
				for i, p := range got {
					psns[i] = psn(p.Buf)
					if i > 0 && psns[i] < psns[i-1] {
						late++
					}
				}
				if late == 0 || late > int(s.Reordered) {
					t.Errorf("%d packets arrived after a later one, %d reordered", late, s.Reordered)
				}
				slices.Sort(psns)
				if len(psns) != total || psns[0] != 0 || psns[total-1] != total-1 || slices.Compact(psns) == nil || len(slices.Compact(psns)) != total {
					t.Errorf("reordering lost or added packets: %d received", len(got))
				}
			},
		},
		{
			name:   "corrupt",
			faults: link.Faults{Corrupt: 0.1},
			count:  func(s link.NetworkStats) uint64 { return s.Corrupted },
			check: func(t *testing.T, sent, got []link.Packet, s link.NetworkStats, a, b link.Stats) {
				if b.BadICRC != s.Corrupted || len(got) != total-int(s.Corrupted) {
					t.Errorf("BadICRC %d, %d received; %d corrupted", b.BadICRC, len(got), s.Corrupted)
				}
				checkInOrder(t, got, false)
				for _, p := range got {
					if !bytes.Equal(p.Buf, sent[psn(p.Buf)].Buf) {
						t.Fatalf("packet %d arrived changed", psn(p.Buf))
					}
				}
			},
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			checkNoLeaks(t)
			n, a, b := memPair(t, 42)
			n.SetQueueLen(2 * total)
			n.SetFaults(tc.faults)
			sent := numbered(t, total, addr2)
			sendAll(t, a, sent)
			s := n.Stats()
			if c := tc.count(s); c < 800 || c > 1200 {
				t.Errorf("fault befell %d of %d packets, want 800-1200", c, total)
			}
			got := recvAll(t, b, arrivals(total, s), 10*time.Second)
			tc.check(t, sent, got, n.Stats(), a.Stats(), b.Stats())
			expectNothing(t, b, 2*link.ReorderHold)
		})
	}
}

// arrivals returns how many of sent packets a receiver gets, given the
// network's counts of what befell them.
func arrivals(sent int, s link.NetworkStats) int {
	return sent - int(s.Lost+s.Filtered+s.NoRoute+s.Overflow+s.Corrupted) + int(s.Duplicated)
}

// checkInOrder checks that packets arrived in PSN order, each once (or, with
// dups, at most twice).
func checkInOrder(t *testing.T, got []link.Packet, dups bool) {
	t.Helper()
	for i := 1; i < len(got); i++ {
		prev, cur := psn(got[i-1].Buf), psn(got[i].Buf)
		if cur < prev || cur == prev && (!dups || i > 1 && psn(got[i-2].Buf) == cur) {
			t.Fatalf("packet %d (PSN %d) arrived after PSN %d", i, cur, prev)
		}
	}
}

func TestMemICRCCatchesEveryCorruption(t *testing.T) {
	checkNoLeaks(t)
	n, a, b := memPair(t, 7)
	n.SetFaults(link.Faults{Corrupt: 1})
	pkts := mixedPackets(t, 3, 3000, addr2)
	sendAll(t, a, pkts)
	if s := n.Stats(); s.Corrupted != 3000 {
		t.Fatalf("Corrupted = %d, want 3000", s.Corrupted)
	}
	n.SetFaults(link.Faults{})
	last := mixedPackets(t, 4, 1, addr2)
	sendAll(t, a, last)
	got := recvAll(t, b, 1, 10*time.Second)
	checkSamePackets(t, got, last, addr1)
	if s := b.Stats(); s.BadICRC != 3000 || s.Received != 1 {
		t.Errorf("BadICRC %d Received %d, want 3000, 1", s.BadICRC, s.Received)
	}
}

func TestMemFilterDropsChosenPackets(t *testing.T) {
	checkNoLeaks(t)
	n, a, b := memPair(t, 1)
	n.SetFaults(link.Faults{Filter: func(p []byte, from, to netip.Addr) bool {
		return !(from == addr1 && to == addr2 && psn(p)%2 == 0)
	}})
	pkts := numbered(t, 100, addr2)
	sendAll(t, a, pkts)
	got := recvAll(t, b, 50, 10*time.Second)
	for i, p := range got {
		if psn(p.Buf) != 2*i+1 {
			t.Fatalf("packet %d has PSN %d, want %d", i, psn(p.Buf), 2*i+1)
		}
	}
	if s := n.Stats(); s.Filtered != 50 {
		t.Errorf("Filtered = %d, want 50", s.Filtered)
	}
	if s := a.Stats(); s.Dropped != 50 || s.Sent != 100 {
		t.Errorf("sender Dropped %d Sent %d, want 50, 100", s.Dropped, s.Sent)
	}
	back := numbered(t, 10, addr1) // the other way passes
	sendAll(t, b, back)
	checkSamePackets(t, recvAll(t, a, 10, 10*time.Second), back, addr2)
}

func TestMemIsDeterministic(t *testing.T) {
	run := func(seed uint64) ([]int, link.NetworkStats) {
		n, a, b := memPair(t, seed)
		defer a.Close()
		defer b.Close()
		n.SetFaults(link.Faults{Drop: 0.05, Duplicate: 0.05, Reorder: 0.05, Corrupt: 0.05})
		sendAll(t, a, numbered(t, 2000, addr2))
		s := n.Stats()
		var psns []int
		for _, p := range recvAll(t, b, arrivals(2000, s), 10*time.Second) {
			psns = append(psns, psn(p.Buf))
		}
		return psns, s
	}
	psns1, stats1 := run(99)
	psns2, stats2 := run(99)
	if !slices.Equal(psns1, psns2) || stats1 != stats2 {
		t.Errorf("two runs with seed 99 differ:\n%v\n%+v\n%v\n%+v", psns1, stats1, psns2, stats2)
	}
	if psns3, _ := run(100); slices.Equal(psns1, psns3) {
		t.Error("seeds 99 and 100 gave the same deliveries")
	}
}

func TestMemDropsWhenQueueIsFull(t *testing.T) {
	checkNoLeaks(t)
	n, a, b := memPair(t, 1)
	n.SetQueueLen(10)
	pkts := numbered(t, 15, addr2)
	sendAll(t, a, pkts) // never blocks
	if s := b.Stats(); s.Overflow != 5 {
		t.Errorf("receiver Overflow = %d, want 5", s.Overflow)
	}
	if s := n.Stats(); s.Overflow != 5 || s.Delivered != 10 {
		t.Errorf("network Overflow %d Delivered %d, want 5, 10", s.Overflow, s.Delivered)
	}
	checkSamePackets(t, recvAll(t, b, 10, 10*time.Second), pkts[:10], addr1)
	expectNothing(t, b, 20*time.Millisecond)
}

func TestMemDelaysPackets(t *testing.T) {
	checkNoLeaks(t)
	const delay = 30 * time.Millisecond
	n, a, b := memPair(t, 1)
	n.SetFaults(link.Faults{Delay: delay})
	pkts := numbered(t, 20, addr2)
	start := time.Now()
	sendAll(t, a, pkts)
	got := recvAll(t, b, len(pkts), 10*time.Second)
	if d := time.Since(start); d < delay {
		t.Errorf("packets arrived after %v, want at least %v", d, delay)
	}
	checkSamePackets(t, got, pkts, addr1)

	// Packets sent with a delay queue behind those sent without.
	n.SetFaults(link.Faults{})
	sendAll(t, a, pkts[:3])
	n.SetFaults(link.Faults{Delay: delay})
	sendAll(t, a, pkts[3:6])
	checkSamePackets(t, recvAll(t, b, 6, 10*time.Second), pkts[:6], addr1)
}

func TestMemDeliversHeldPacketsWithoutLaterOnes(t *testing.T) {
	checkNoLeaks(t)
	n, a, b := memPair(t, 1)
	n.SetFaults(link.Faults{Reorder: 1})
	pkts := numbered(t, 5, addr2)
	start := time.Now()
	sendAll(t, a, pkts)
	got := recvAll(t, b, len(pkts), 10*time.Second)
	if d := time.Since(start); d < link.ReorderHold {
		t.Errorf("held packets arrived after %v, want at least ReorderHold (%v)", d, link.ReorderHold)
	}
	checkSamePackets(t, got, pkts, addr1)
}

func TestMemCloseUnblocksRecvAndDetaches(t *testing.T) {
	checkNoLeaks(t)
	n, a, b := memPair(t, 1)
	checkCloseUnblocksRecv(t, b, numbered(t, 1, addr1))
	sendAll(t, a, numbered(t, 3, addr2)) // nobody there now
	if s := n.Stats(); s.NoRoute != 3 {
		t.Errorf("NoRoute = %d, want 3", s.NoRoute)
	}
	if s := a.Stats(); s.Dropped != 3 {
		t.Errorf("sender Dropped = %d, want 3", s.Dropped)
	}
	b2, err := n.Attach(addr2)
	if err != nil {
		t.Fatalf("Attach after Close: %v", err)
	}
	defer b2.Close()
	pkts := numbered(t, 2, addr2)
	sendAll(t, a, pkts)
	checkSamePackets(t, recvAll(t, b2, 2, 10*time.Second), pkts, addr1)
}

func TestMemAttachRejectsTakenAddress(t *testing.T) {
	n, _, _ := memPair(t, 1)
	for _, addr := range []netip.Addr{addr1, netip.AddrFrom16(addr1.As16())} {
		l, err := n.Attach(addr)
		if err == nil {
			l.Close()
			t.Fatalf("Attach(%v) succeeded twice", addr)
		}
		if !errors.Is(err, syscall.EADDRINUSE) || !bytes.Contains([]byte(err.Error()), []byte("127.0.0.1")) {
			t.Errorf("Attach(%v) error %v, want EADDRINUSE naming the address", addr, err)
		}
	}
	for _, addr := range []netip.Addr{{}, netip.IPv4Unspecified(), netip.MustParseAddr("224.0.0.1")} {
		if _, err := n.Attach(addr); err == nil {
			t.Errorf("Attach(%v) succeeded", addr)
		}
	}
}

func TestMemSendReportsBadPacketsAndSendsTheRest(t *testing.T) {
	n, a, b := memPair(t, 1)
	n.SetMaxPacket(1000)
	if a.MaxPacket() != 1000 {
		t.Errorf("MaxPacket() = %d after SetMaxPacket(1000)", a.MaxPacket())
	}
	ok := numbered(t, 2, addr2)
	for _, tc := range []struct {
		name string
		bad  link.Packet
		want error
	}{
		{"short", link.Packet{Buf: make([]byte, link.MinPacket-1), Addr: addr2}, link.ErrShortPacket},
		{"too long", link.Packet{Buf: make([]byte, 1001), Addr: addr2}, link.ErrPacketTooLarge},
		{"IPv6 peer", link.Packet{Buf: make([]byte, 100), Addr: netip.IPv6Loopback()}, link.ErrAddr},
		{"no address", link.Packet{Buf: make([]byte, 100)}, link.ErrAddr},
	} {
		t.Run(tc.name, func(t *testing.T) {
			before := a.Stats()
			if err := a.Send([]link.Packet{ok[0], tc.bad, ok[1]}); !errors.Is(err, tc.want) {
				t.Errorf("Send error %v, want %v", err, tc.want)
			}
			checkSamePackets(t, recvAll(t, b, 2, 10*time.Second), ok, addr1)
			if s := a.Stats(); s.SendErrors-before.SendErrors != 1 || s.Sent-before.Sent != 2 {
				t.Errorf("SendErrors +%d, Sent +%d; want +1, +2", s.SendErrors-before.SendErrors, s.Sent-before.Sent)
			}
		})
	}
}

func TestMemReceiveDropsBadPackets(t *testing.T) {
	checkNoLeaks(t)
	n, a, b := memPair(t, 1)
	rng := newRand(2)
	good := newPacket(t, rng, wire.RCSendOnly, 100, 1)
	ph := wire.PseudoHeader{Src: addr3, Dst: addr2, SrcPort: wire.UDPPort, DstPort: wire.UDPPort, IPv4Flags: wire.IPv4DontFragment}
	ph.SetICRC(good)
	otherID := bytes.Clone(good)
	ph.IPv4ID = 1 // the mem link checks exactly: ID 0 only
	ph.SetICRC(otherID)
	badICRC := bytes.Clone(good)
	badICRC[len(badICRC)-2] ^= 1
	long := link.Packet{Buf: newPacket(t, rng, wire.RCSendOnly, 1000, 2), Addr: addr2}
	for _, p := range [][]byte{badICRC, good[:link.MinPacket-1], otherID, good} {
		if err := n.Inject(addr3, addr2, p); err != nil {
			t.Fatal(err)
		}
	}
	if err := n.Inject(addr3, netip.MustParseAddr("127.0.0.9"), good); err == nil {
		t.Error("Inject to an address nobody is attached at succeeded")
	}
	sendAll(t, a, []link.Packet{long})
	// A buffer too small for the long packet: it is dropped.
	bufs := recvBuffers(8, 200)
	k, err := b.Recv(bufs)
	if err != nil || k != 1 {
		t.Fatalf("Recv = %d, %v; want 1 packet", k, err)
	}
	checkSamePackets(t, bufs[:1], []link.Packet{{Buf: good}}, addr3)
	expectNothing(t, b, 20*time.Millisecond)
	if s := b.Stats(); s.BadICRC != 2 || s.Short != 1 || s.Truncated != 1 || s.Received != 1 {
		t.Errorf("stats %+v, want BadICRC 2, Short 1, Truncated 1, Received 1", s)
	}
}
