package link_test

import (
	"bytes"
	"sync/atomic"
	"testing"
	"time"

	"github.com/rdmago/rdmago/rxe/link"
)

// gate lets through the messages it is given room for, and refuses the
// rest (EAGAIN), as a socket whose send buffer is full does: room for
// Send's own system calls, drain for the drainer's.
type gate struct {
	room, drain atomic.Int64 // messages that may still go; negative: all
	tries       atomic.Int64 // the drainer's system calls
}

func (g *gate) allow(drainer bool, n int) int {
	c := &g.room
	if drainer {
		g.tries.Add(1)
		c = &g.drain
	}
	for {
		r := c.Load()
		if r < 0 {
			return n
		}
		k := min(int64(n), r)
		if c.CompareAndSwap(r, r-k) {
			return int(k)
		}
	}
}

// sendNow calls Send and fails the test if it does not return at once.
func sendNow(t *testing.T, l link.Link, pkts []link.Packet) {
	t.Helper()
	done := make(chan error, 1)
	go func() { done <- l.Send(pkts) }()
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("Send: %v", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("Send waited for the network")
	}
}

// sameButICRC checks got against want, in order, byte for byte but for
// the ICRC: a queued packet may go in another GSO message than it was
// first packed in, with another IPv4 ID, and so another ICRC (which the
// receiver checked).
func sameButICRC(t *testing.T, got, want []link.Packet) {
	t.Helper()
	if len(got) != len(want) {
		t.Fatalf("got %d packets, want %d", len(got), len(want))
	}
	for i := range want {
		g, w := got[i].Buf, want[i].Buf
		if len(g) != len(w) || !bytes.Equal(g[:len(g)-4], w[:len(w)-4]) {
			t.Fatalf("packet %d: got %d bytes %x..., want %d bytes %x...", i, len(g), head(g), len(w), head(w))
		}
	}
}

func TestUDPSendQueuesWhatTheNetworkHasNoRoomForAndSendsItInOrder(t *testing.T) {
	for _, tc := range []struct {
		name string
		room int64 // messages the socket takes before it is full
		opt  link.UDPOptions
	}{
		{"full from the start", 0, link.UDPOptions{}},
		{"full after a few messages", 3, link.UDPOptions{}},
		{"full after a few packets without GSO", 40, link.UDPOptions{DisableGSO: true}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			checkNoLeaks(t)
			a, b := listenPair(t, addr1, addr2, tc.opt)
			var g gate
			g.room.Store(tc.room)
			link.PushBack(a, g.allow)
			emptied := make(chan struct{}, 16)
			a.OnQueueEmpty(func() { emptied <- struct{}{} })

			first := mixedPackets(t, 1, 300, b.LocalAddr())
			second := mixedPackets(t, 2, 100, b.LocalAddr())
			sendNow(t, a, first)
			if a.Queued() == 0 {
				t.Fatal("Queued() = 0 after the socket pushed back")
			}
			sent := a.Stats().Sent
			// The socket has room again, but the queue has not gone
			// yet: what comes now must wait behind it.
			g.room.Store(-1)
			sendNow(t, a, second)
			s := a.Stats()
			if s.Sent != sent || s.Queued == 0 || s.Sent+s.Queued != 400 {
				t.Fatalf("stats %+v after the second Send: want Sent still %d, Sent+Queued = 400", s, sent)
			}
			select {
			case <-emptied:
				t.Fatal("the queue emptied while the drainer had no room")
			default:
			}

			g.drain.Store(-1) // room for the drainer too
			got := recvAll(t, b, 400, 10*time.Second)
			sameButICRC(t, got, append(first, second...))
			select {
			case <-emptied:
			case <-time.After(5 * time.Second):
				t.Fatal("OnQueueEmpty's function was not called")
			}
			if q := a.Queued(); q != 0 {
				t.Errorf("Queued() = %d once everything went", q)
			}
			if s := a.Stats(); s.Sent != 400 || s.Dropped != 0 || s.SendErrors != 0 {
				t.Errorf("stats %+v: want Sent 400", s)
			}
		})
	}
}

// A queue that never quite empties keeps in its slice what waits, not
// everything that went through it since it last emptied.
func TestUDPSendQueueLetsGoOfWhatWent(t *testing.T) {
	checkNoLeaks(t)
	a, b := listenPair(t, addr1, addr2, link.UDPOptions{DisableGSO: true}) // a message a packet
	var g gate
	link.PushBack(a, g.allow)
	sendNow(t, a, mixedPackets(t, 6, 200, b.LocalAddr()))
	g.drain.Store(150)
	recvAll(t, b, 150, 10*time.Second)
	// The drainer sends a batch at a time and lets go of what went once
	// that is half the slice: at least a batch of it by now.
	most := 200 - link.BatchSize
	deadline := time.Now().Add(5 * time.Second)
	for link.QueueSlots(a) > most && time.Now().Before(deadline) {
		time.Sleep(time.Millisecond)
	}
	if n := link.QueueSlots(a); n > most {
		t.Fatalf("the queue's slice holds %d packets with 50 waiting; want at most %d", n, most)
	}
	g.drain.Store(-1)
	recvAll(t, b, 50, 10*time.Second)
}

func TestUDPSendQueueDropsWhatGoesPastItsLimit(t *testing.T) {
	checkNoLeaks(t)
	a, b := listenPair(t, addr1, addr2, link.UDPOptions{})
	var g gate
	link.PushBack(a, g.allow)
	const n = 6000 // of 1.1 KiB on average: more than the 4 MiB the queue holds
	pkts := mixedPackets(t, 3, n, b.LocalAddr())
	sendNow(t, a, pkts)
	s := a.Stats()
	if s.Dropped == 0 || s.Queued+s.Dropped != n {
		t.Fatalf("stats %+v: want Queued+Dropped = %d, Dropped > 0", s, n)
	}
	if q := a.Queued(); q > link.DefaultSocketBuffer {
		t.Errorf("Queued() = %d, above the %d-byte limit", q, link.DefaultSocketBuffer)
	}
	g.room.Store(-1)
	g.drain.Store(-1)
	got := recvAll(t, b, int(s.Queued), 10*time.Second)
	// What went is in order, the dropped packets missing.
	j := 0
	for i, p := range got {
		for j < len(pkts) && !bytes.Equal(p.Buf[:len(p.Buf)-4], pkts[j].Buf[:len(pkts[j].Buf)-4]) {
			j++
		}
		if j == len(pkts) {
			t.Fatalf("packet %d received (%x...) was not sent, or not in order", i, head(p.Buf))
		}
		j++
	}
}

func TestUDPCloseStopsTheDrainerWaitingForRoom(t *testing.T) {
	checkNoLeaks(t)
	a, b := listenPair(t, addr1, addr2, link.UDPOptions{})
	var g gate
	link.PushBack(a, g.allow)
	sendNow(t, a, mixedPackets(t, 4, 50, b.LocalAddr()))
	// The drainer tries, finds no room and waits; Close must end it
	// (checkNoLeaks).
	deadline := time.Now().Add(5 * time.Second)
	for g.tries.Load() < 3 && time.Now().Before(deadline) {
		time.Sleep(time.Millisecond)
	}
	if err := a.Close(); err != nil {
		t.Fatal(err)
	}
	if err := a.Send(mixedPackets(t, 5, 1, b.LocalAddr())); err == nil {
		t.Error("Send after Close succeeded")
	}
}
