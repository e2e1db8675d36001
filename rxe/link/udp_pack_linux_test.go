package link

import (
	"errors"
	"net/netip"
	"slices"
	"testing"
)

// These white-box tests check how the UDP link groups packets into sendmmsg
// messages and GSO runs; the black-box tests check that they arrive.

func testLink(t *testing.T, opt UDPOptions) *UDP {
	t.Helper()
	u, err := ListenUDP(netip.MustParseAddrPort("127.0.0.1:0"), opt)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { u.Close() })
	return u
}

func TestUDPPackGroupsRunsForGSO(t *testing.T) {
	p1, p2 := netip.MustParseAddr("127.0.0.2"), netip.MustParseAddr("127.0.0.3")
	// pk describes a packet by size and peer; size 0 is a bad packet.
	type pk struct {
		size int
		to   netip.Addr
	}
	run := func(n, size int) []pk { return slices.Repeat([]pk{{size, p1}}, n) }
	cat := func(ps ...[]pk) []pk { return slices.Concat(ps...) }
	for _, tc := range []struct {
		name   string
		pkts   []pk
		noGSO  bool
		counts []int // packets per message
		next   int   // packets packed (0: all)
	}{
		{"one packet", run(1, 100), false, []int{1}, 0},
		{"equal sizes", run(10, 1040), false, []int{10}, 0},
		{"short last packet ends the run", cat(run(10, 1040), run(2, 100)), false, []int{11, 1}, 0},
		{"longer packet starts a run", cat(run(3, 100), run(3, 1040)), false, []int{3, 3}, 0},
		{"peers alternate", []pk{{100, p1}, {100, p2}, {100, p1}, {100, p2}}, false, []int{1, 1, 1, 1}, 0},
		{"runs per peer", []pk{{100, p1}, {100, p1}, {100, p2}, {100, p2}}, false, []int{2, 2}, 0},
		{"GSO off", run(5, 100), true, []int{1, 1, 1, 1, 1}, 0},
		{"run capped at the UDP maximum", run(20, 4000), false, []int{16, 4}, 0},
		{"batch capped at 64 packets", run(70, 100), false, []int{64}, 64},
		{"bad packet skipped", cat(run(2, 100), []pk{{0, p1}}, run(2, 100)), false, []int{4}, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			u := testLink(t, UDPOptions{DisableGSO: tc.noGSO})
			if !tc.noGSO && !u.sender.gso {
				t.Skip("the kernel has no UDP GSO")
			}
			var pkts []Packet
			for _, p := range tc.pkts {
				b := make([]byte, p.size)
				if p.size == 0 {
					b = make([]byte, 3)
				}
				pkts = append(pkts, Packet{Buf: b, Addr: p.to})
			}
			var err error
			checked := 0
			next := u.pack(&u.sender, pkts, 0, 0, &checked, &err)
			if want := cmpOr(tc.next, len(pkts)); next != want {
				t.Errorf("pack took %d packets, want %d", next, want)
			}
			if got := u.sender.count[:u.sender.n]; !slices.Equal(got, tc.counts) {
				t.Errorf("packets per message %v, want %v", got, tc.counts)
			}
			bad := slices.ContainsFunc(tc.pkts, func(p pk) bool { return p.size == 0 })
			if bad != errors.Is(err, ErrShortPacket) {
				t.Errorf("pack error %v, want ErrShortPacket: %v", err, bad)
			}
			// Packing again from the start, as the GSO fallback does,
			// counts no bad packet twice.
			u.pack(&u.sender, pkts, 0, len(pkts), &checked, &err)
			want := uint64(0)
			if bad {
				want = 1
			}
			if got := u.stats.sendErrors.Load(); got != want {
				t.Errorf("SendErrors %d after packing twice, want %d", got, want)
			}
		})
	}
}

func cmpOr(a, b int) int {
	if a != 0 {
		return a
	}
	return b
}

func TestUDPGSOCanBeDisabledByEnvironment(t *testing.T) {
	if !testLink(t, UDPOptions{}).sender.gso {
		t.Skip("the kernel has no UDP GSO")
	}
	t.Setenv(disableGSOEnv, "1")
	if testLink(t, UDPOptions{}).sender.gso {
		t.Errorf("GSO on with %s=1", disableGSOEnv)
	}
}

func TestUDPGROCanBeDisabled(t *testing.T) {
	if !testLink(t, UDPOptions{}).receiver.gro {
		t.Skip("the kernel has no UDP GRO")
	}
	if u := testLink(t, UDPOptions{DisableGRO: true}); u.receiver.gro || u.receiver.scratch != nil {
		t.Errorf("GRO on with DisableGRO")
	}
	t.Setenv(disableGROEnv, "1")
	if u := testLink(t, UDPOptions{}); u.receiver.gro || u.receiver.scratch != nil {
		t.Errorf("GRO on with %s=1", disableGROEnv)
	}
}
