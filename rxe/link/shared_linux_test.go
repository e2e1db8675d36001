package link_test

import (
	"errors"
	"net"
	"net/netip"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/rdmago/rdmago/rxe/link"
	"github.com/rdmago/rdmago/rxe/wire"
)

// sharedPair joins owners 0 and 1 on 127.0.0.1 at a free port: the first
// leads.
func sharedPair(t *testing.T) (lead, follow *link.Shared, port uint16) {
	t.Helper()
	for try := 0; try < 20; try++ {
		port = uint16(30000 + try*97 + int(time.Now().UnixNano()%1000))
		ap := netip.AddrPortFrom(addr1, port)
		l, err := link.ListenShared(ap, 0, link.UDPOptions{})
		if err != nil {
			continue
		}
		f, err := link.ListenShared(ap, 1, link.UDPOptions{})
		if err != nil {
			l.Close()
			t.Fatal(err)
		}
		t.Cleanup(func() { f.Close(); l.Close() })
		return l, f, port
	}
	t.Fatal("no free port")
	return nil, nil, 0
}

func TestSharedLeaderForwardsToTheOwner(t *testing.T) {
	checkNoLeaks(t)
	lead, follow, port := sharedPair(t)
	if !lead.Leading() || follow.Leading() {
		t.Fatalf("Leading: %v, %v", lead.Leading(), follow.Leading())
	}
	pkt := link.Packet{Buf: newPacket(t, newRand(1), wire.RCSendOnly, 100, 7), Addr: addr1}
	// A peer on another address, at the shared port (links send to the
	// port they have).
	p2, err := link.ListenUDP(netip.AddrPortFrom(addr2, port), link.UDPOptions{})
	if err != nil {
		t.Skipf("port %d taken on %v: %v", port, addr2, err)
	}
	defer p2.Close()
	if err := p2.Send([]link.Packet{pkt}); err != nil {
		t.Fatal(err)
	}
	got := recvAll(t, lead, 1, 5*time.Second)
	if err := lead.Forward(1, &got[0]); err != nil {
		t.Fatal(err)
	}
	lead.Flush()
	fwd := recvAll(t, follow, 1, 5*time.Second)
	checkSamePackets(t, fwd, []link.Packet{pkt}, addr2)
	if st := lead.Stats(); st.Forwarded != 1 {
		t.Errorf("leader's Forwarded = %d", st.Forwarded)
	}
	// An owner nobody has: dropped and counted.
	lead.Forward(9, &got[0])
	lead.Flush()
	if st := lead.Stats(); st.ForwardDrops != 1 {
		t.Errorf("ForwardDrops = %d", st.ForwardDrops)
	}
	// The follower sends from a port of its own to the peer's port.
	if err := follow.Send([]link.Packet{{Buf: newPacket(t, newRand(2), wire.RCSendOnly, 10, 8), Addr: addr2}}); err != nil {
		t.Fatal(err)
	}
	recvAll(t, p2, 1, 5*time.Second)
}

// forwardOne has the leader forward a UD packet made from seed to owner,
// as its device does with a packet for that owner's QP, and returns it.
func forwardOne(t *testing.T, lead *link.Shared, owner uint8, seed uint64) link.Packet {
	t.Helper()
	pkt := link.Packet{Buf: newPacket(t, newRand(seed), wire.UDSendOnly, 64, 5), Addr: addr2}
	if err := lead.Forward(owner, &pkt); err != nil {
		t.Fatal(err)
	}
	lead.Flush()
	return pkt
}

// An owner number is the next process's once its process has ended (each
// takes the first free one): the leader's connection to the old process
// is broken, and the first packet for the new one goes to it on a new
// connection rather than being lost with the old one. (It was lost, and
// when it was a connection request the newcomer made to itself through
// the leader, its Dial waited 6.4 s for the request's retry.)
func TestSharedLeaderForwardsToTheNextProcessOfAnOwnerNumber(t *testing.T) {
	lead, follow, port := sharedPair(t)
	first := forwardOne(t, lead, 1, 1)
	checkSamePackets(t, recvAll(t, follow, 1, 5*time.Second), []link.Packet{first}, addr2)
	follow.Close() // its process ends
	next, err := link.ListenShared(netip.AddrPortFrom(addr1, port), 1, link.UDPOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer next.Close()
	for seed := range uint64(3) {
		pkt := forwardOne(t, lead, 1, 10+seed)
		checkSamePackets(t, recvAll(t, next, 1, 5*time.Second), []link.Packet{pkt}, addr2)
	}
	if st := lead.Stats(); st.Forwarded != 4 || st.ForwardDrops != 0 {
		t.Errorf("leader's Forwarded %d, ForwardDrops %d; want 4 and 0", st.Forwarded, st.ForwardDrops)
	}
}

// A packet for an owner number nobody holds is dropped, and the leader
// then tries no connection to that owner for a while; but a process that
// joins the address meanwhile, having taken that number, gets its packets
// from the first.
func TestSharedLeaderForwardsToANewcomerAtOnce(t *testing.T) {
	lead, follow, port := sharedPair(t)
	follow.Close()
	forwardOne(t, lead, 1, 1) // nobody has owner 1
	if st := lead.Stats(); st.ForwardDrops != 1 {
		t.Fatalf("ForwardDrops = %d, want 1", st.ForwardDrops)
	}
	next, err := link.ListenShared(netip.AddrPortFrom(addr1, port), 1, link.UDPOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer next.Close()
	pkt := forwardOne(t, lead, 1, 2)
	checkSamePackets(t, recvAll(t, next, 1, 5*time.Second), []link.Packet{pkt}, addr2)
}

func TestSharedFollowerTakesThePortOver(t *testing.T) {
	checkNoLeaks(t)
	lead, follow, _ := sharedPair(t)
	lead.Close()
	waitLeading(t, follow)
}

// waitLeading waits until s leads, failing t after 5 s.
func waitLeading(t *testing.T, s *link.Shared) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for !s.Leading() {
		if time.Now().After(deadline) {
			t.Fatal("the follower did not take the port over")
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// Packets the leader forwarded that the follower had not read yet when it
// took the port over are still read, before the port's own.
func TestSharedFollowerReadsWhatWasForwardedBeforeItTookOver(t *testing.T) {
	for _, try := range []bool{false, true} {
		t.Run(map[bool]string{false: "Recv", true: "TryRecv"}[try], func(t *testing.T) {
			lead, follow, _ := sharedPair(t)
			var sent []link.Packet
			for i := range 3 {
				pkt := link.Packet{Buf: newPacket(t, newRand(uint64(10+i)), wire.RCSendOnly, 100, 7), Addr: addr2}
				if err := lead.Forward(1, &pkt); err != nil {
					t.Fatal(err)
				}
				sent = append(sent, pkt)
			}
			lead.Flush()
			lead.Close()
			waitLeading(t, follow)
			deadline := time.Now().Add(5 * time.Second)
			var got []link.Packet
			if try {
				for len(got) < len(sent) && time.Now().Before(deadline) {
					pkts := []link.Packet{{Buf: make([]byte, 9000)}}
					n, err := follow.TryRecv(pkts)
					if err != nil {
						t.Fatal(err)
					}
					got = append(got, pkts[:n]...)
				}
			} else {
				got = recvAll(t, follow, len(sent), 5*time.Second)
			}
			checkSamePackets(t, got, sent, addr2)
		})
	}
}

func TestSharedRefusesAPortAnotherProgramHolds(t *testing.T) {
	c, err := net.ListenUDP("udp4", &net.UDPAddr{IP: addr1.AsSlice()})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	port := uint16(c.LocalAddr().(*net.UDPAddr).Port)
	_, err = link.ListenShared(netip.AddrPortFrom(addr1, port), 0, link.UDPOptions{})
	if !errors.Is(err, syscall.EADDRINUSE) || !strings.Contains(err.Error(), "not rdmago") {
		t.Fatalf("error %v", err)
	}
}

func TestSharedOwnerNumbersAndServicesAreExclusive(t *testing.T) {
	lead, follow, port := sharedPair(t)
	if _, err := link.ListenShared(netip.AddrPortFrom(addr1, port), 1, link.UDPOptions{}); !errors.Is(err, link.ErrOwnerTaken) {
		t.Errorf("second owner 1: %v", err)
	}
	release, err := follow.RegisterService(0x106_1c8e)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := lead.RegisterService(0x106_1c8e); !errors.Is(err, link.ErrServiceTaken) {
		t.Errorf("second claim: %v", err)
	}
	if o, ok, _ := lead.ServiceOwner(0x106_1c8e); !ok || o != 1 {
		t.Errorf("ServiceOwner = %d, %v; want 1", o, ok)
	}
	if _, ok, _ := lead.ServiceOwner(0x106_0001); ok {
		t.Error("an unclaimed service has an owner")
	}
	release()
	if _, err := lead.RegisterService(0x106_1c8e); err != nil {
		t.Errorf("claim after release: %v", err)
	}
}

// A follower that does not read (stopped with Ctrl-Z, say) costs the
// leader neither time nor memory beyond one socket buffer: the leader
// never waits for it, keeps one connection, and drops what does not fit.
func TestSharedLeaderDoesNotWaitForAStoppedOwner(t *testing.T) {
	lead, _, port := sharedPair(t)
	name := "@rdmago/" + strconv.Itoa(int(port)) + "/" + addr1.String() + "/fwd/7"
	ln, err := net.ListenUnix("unix", &net.UnixAddr{Name: name, Net: "unix"}) // owner 7, never accepting
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	pkt := link.Packet{Buf: newPacket(t, newRand(1), wire.RCSendOnly, 1024, 1), Addr: addr2}
	start := time.Now()
	const n = 20000 // 20 MB, far beyond a socket buffer
	for range n {
		lead.Forward(7, &pkt)
		lead.Flush()
	}
	// A hang detector, not a speed bound: forwarding 20 MB to an owner
	// that reads nothing must drop, not wait for it (the loop took 7.6 s
	// on a loaded host, far under a minute, and an owner that made it
	// wait would hold it for ever).
	if d := time.Since(start); d > time.Minute {
		t.Errorf("forwarding to a stopped owner took %v: it waited for the owner", d)
	}
	st := lead.Stats()
	if st.ForwardDrops == 0 || st.Forwarded+st.ForwardDrops != n {
		t.Errorf("Forwarded %d, ForwardDrops %d; want drops, and %d in all", st.Forwarded, st.ForwardDrops, n)
	}
	if st.Forwarded > 4096 {
		t.Errorf("%d packets handed to an owner that reads nothing: more than a socket buffer holds", st.Forwarded)
	}
}

// A leader that closes right after a packet for a follower reached the
// port still forwards it: it lets its device read and forward what is
// queued before the socket goes (a UD datagram lost there is lost for
// good). Each round closes the leader the moment the packet is queued.
func TestSharedLeaderForwardsWhatCameBeforeItClosed(t *testing.T) {
	for round := range 10 {
		lead, follow, port := sharedPair(t)
		done := make(chan struct{})
		go func() { // the device: everything read goes to owner 1
			defer close(done)
			pkts := []link.Packet{{Buf: make([]byte, 9000)}}
			for {
				n, err := lead.Recv(pkts)
				if err != nil {
					return
				}
				for i := range pkts[:n] {
					lead.Forward(1, &pkts[i])
				}
				lead.Flush()
				pkts[0].Buf = pkts[0].Buf[:cap(pkts[0].Buf)]
			}
		}()
		p2, err := link.ListenUDP(netip.AddrPortFrom(addr2, port), link.UDPOptions{})
		if err != nil {
			t.Skipf("port %d taken on %v: %v", port, addr2, err)
		}
		send := func(seed uint64) {
			pkt := link.Packet{Buf: newPacket(t, newRand(seed), wire.UDSendOnly, 64, 5), Addr: addr1}
			if err := p2.Send([]link.Packet{pkt}); err != nil {
				t.Fatal(err)
			}
		}
		send(1) // the leader's connection to the follower is made
		recvAll(t, follow, 1, 5*time.Second)
		send(2) // queued at the port when Send returns (loopback)
		lead.Close()
		if got := recvAll(t, follow, 1, 5*time.Second); len(got) != 1 {
			t.Fatalf("round %d: the follower got %d packets", round, len(got))
		}
		<-done
		p2.Close()
		follow.Close() // (its owner name would clash with a later round's on the same port)
	}
}
