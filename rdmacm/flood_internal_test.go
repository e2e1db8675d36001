package rdmacm

import (
	"net/netip"
	"testing"

	"github.com/rdmago/rdmago/internal/linktest"
	"github.com/rdmago/rdmago/rdmacm/mad"
	"github.com/rdmago/rdmago/rxe"
	"github.com/rdmago/rdmago/rxe/link"
)

// floodREQ is the i-th connection request from peer to local's port.
func floodREQ(t *testing.T, local, peer netip.Addr, i int, port uint16) *mad.REQ {
	t.Helper()
	r := &mad.REQ{
		LocalCommID: 0x7000 + uint32(i), ServiceID: mad.MakeServiceID(mad.PortSpaceTCP, port),
		LocalCAGUID: 0x0200000000000abc, LocalQPN: 0x200 + uint32(i),
		TransportServiceType: mad.TransportRC, PathMTU: mad.MTU1024, MaxCMRetries: 15,
		Primary: mad.Path{LocalGID: mad.GIDFromAddr(peer), RemoteGID: mad.GIDFromAddr(local), LocalACKTimeout: 19},
	}
	if err := r.SetCMAPrivateData(&mad.CMAHeader{Port: 40000, Src: peer, Dst: local}, nil); err != nil {
		t.Fatal(err)
	}
	return r
}

// While QP1 cannot send (its link is full), a flood of messages that the
// connection manager only answers — connection requests for a service
// nobody listens at (each a REJ), duplicates of a request the user has
// not decided on (each an MRA) — leaves at most maxQueuedAnswers MADs
// waiting for a send slot: the peer resends what goes unanswered, and
// memory does not grow with the flood.
func TestFloodOfAnsweredMessagesQueuesBoundedAnswers(t *testing.T) {
	const flood = 20 * maxQueuedAnswers
	local := netip.MustParseAddr("10.8.1.1")
	peer := netip.MustParseAddr("10.8.1.2") // nobody there
	const service = 6100
	req := func(i int, port uint16) *mad.REQ { return floodREQ(t, local, peer, i, port) }
	for _, tc := range []struct {
		name string
		// next is the i-th message of the flood.
		next func(i int) *mad.REQ
	}{
		{"requests for no listener", func(i int) *mad.REQ { return req(i, service+1) }},
		{"duplicates of a pending request", func(int) *mad.REQ { return req(0, service) }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			inner, err := link.NewNetwork(5).Attach(local)
			if err != nil {
				t.Fatal(err)
			}
			l := linktest.NewShut(inner)
			l.Shut()
			dev, err := rxe.NewDevice(rxe.Config{Links: []link.Link{l}})
			if err != nil {
				t.Fatal(err)
			}
			defer RegisterDevice(dev)()
			ch, err := CreateEventChannel()
			if err != nil {
				t.Fatal(err)
			}
			defer ch.Close()
			lis, err := CreateID(ch, nil, PSTCP)
			if err != nil {
				t.Fatal(err)
			}
			defer lis.Destroy()
			if err := lis.BindAddr(netip.AddrPortFrom(local, service)); err != nil {
				t.Fatal(err)
			}
			if err := lis.Listen(4); err != nil {
				t.Fatal(err)
			}

			k := ibcmOf(lis)
			cm.mu.Lock()
			a := k.agent
			// The first copy of the duplicated request makes the
			// pending one.
			a.handleREQ(&inMAD{hdr: mad.Header{TransactionID: 1}, src: peer}, req(0, service))
			maxQueued := 0
			for i := range flood {
				a.handleREQ(&inMAD{hdr: mad.Header{TransactionID: uint64(i + 2)}, src: peer}, tc.next(i))
				maxQueued = max(maxQueued, len(a.sendQueue))
			}
			dropped := a.stats.Dropped
			pending := k.pending
			cmUnlock()
			if maxQueued > maxQueuedAnswers {
				t.Errorf("%d MADs queued for a send slot after %d answered messages, want at most %d", maxQueued, flood, maxQueuedAnswers)
			}
			if dropped == 0 {
				t.Errorf("no answer dropped")
			}
			if pending != 1 {
				t.Errorf("%d requests pending, want 1", pending)
			}
			ev, ok := ch.PollEvent()
			if !ok || ev.Type != EventConnectRequest {
				t.Fatalf("event %v, %v: want the pending request", ev, ok)
			}
			if err := ev.ID.Reject(nil); err != nil {
				t.Fatal(err)
			}
			if err := ev.ID.Destroy(); err != nil {
				t.Fatal(err)
			}
			l.Open()
		})
	}
}

// A listener holds at most its backlog of pending requests, and a backlog
// asked for above maxBacklog (or none) is maxBacklog, as Linux caps it with
// net.rdma_ucm.max_backlog: the requests beyond are dropped unanswered,
// without an ID or an event.
func TestListenBacklogIsCappedAtMaxBacklog(t *testing.T) {
	local := netip.MustParseAddr("10.8.2.1")
	peer := netip.MustParseAddr("10.8.2.2")
	for _, tc := range []struct {
		name          string
		backlog, want int
	}{
		{"as asked", 5, 5},
		{"none", 0, maxBacklog},
		{"above the cap", 1 << 20, maxBacklog},
	} {
		t.Run(tc.name, func(t *testing.T) {
			l, err := link.NewNetwork(6).Attach(local)
			if err != nil {
				t.Fatal(err)
			}
			dev, err := rxe.NewDevice(rxe.Config{Links: []link.Link{l}})
			if err != nil {
				t.Fatal(err)
			}
			defer RegisterDevice(dev)()
			ch, err := CreateEventChannel()
			if err != nil {
				t.Fatal(err)
			}
			defer ch.Close()
			lis, err := CreateID(ch, nil, PSTCP)
			if err != nil {
				t.Fatal(err)
			}
			defer lis.Destroy()
			const service = 6200
			if err := lis.BindAddr(netip.AddrPortFrom(local, service)); err != nil {
				t.Fatal(err)
			}
			if err := lis.Listen(tc.backlog); err != nil {
				t.Fatal(err)
			}
			sent := tc.want + 50
			k := ibcmOf(lis)
			cm.mu.Lock()
			a := k.agent
			dropped := a.stats.Dropped
			for i := range sent {
				a.handleREQ(&inMAD{hdr: mad.Header{TransactionID: uint64(i + 1)}, src: peer}, floodREQ(t, local, peer, i, service))
			}
			pending, held := k.pending, len(a.remotes)
			dropped = a.stats.Dropped - dropped
			cmUnlock()
			if pending != tc.want || held != tc.want {
				t.Errorf("after %d requests: %d pending, %d held by the CM; want the backlog, %d", sent, pending, held, tc.want)
			}
			if dropped != uint64(sent-tc.want) {
				t.Errorf("%d requests dropped, want %d", dropped, sent-tc.want)
			}
			events := 0
			for {
				ev, ok := ch.PollEvent()
				if !ok {
					break
				}
				events++
				if err := ev.ID.Reject(nil); err != nil {
					t.Fatal(err)
				}
				if err := ev.ID.Destroy(); err != nil {
					t.Fatal(err)
				}
			}
			if events != tc.want {
				t.Errorf("%d connection requests delivered, want %d", events, tc.want)
			}
		})
	}
}
