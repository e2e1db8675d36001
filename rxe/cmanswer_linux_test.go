package rxe

import (
	"net/netip"
	"testing"

	"github.com/rdmago/rdmago/rdmacm/mad"
	"github.com/rdmago/rdmago/rxe/link"
	"github.com/rdmago/rdmago/verbs"
)

// Shared.OwnerHeld finds the owner numbers the processes sharing an address
// hold, and only those, and taking a look holds nothing: a process can
// claim a number right after.
func TestOwnerHeldSeesWhoSharesAnAddress(t *testing.T) {
	port := udpPort()
	at := netip.AddrPortFrom(netip.MustParseAddr("127.0.0.1"), port)
	a, err := link.ListenShared(at, 0, link.UDPOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close()
	b, err := link.ListenShared(at, 5, link.UDPOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		owner uint8
		held  bool
	}{{0, true}, {5, true}, {6, false}, {255, false}} {
		if got := a.OwnerHeld(c.owner); got != c.held {
			t.Errorf("owner %d: held %v, want %v", c.owner, got, c.held)
		}
	}
	c, err := link.ListenShared(at, 6, link.UDPOptions{})
	if err != nil {
		t.Fatalf("claiming owner 6 after looking at it: %v", err)
	}
	defer c.Close()
	if !a.OwnerHeld(6) {
		t.Error("owner 6, claimed since, is not held")
	}
	b.Close()
	if a.OwnerHeld(5) {
		t.Error("owner 5 is held after its process went")
	}
}

// sharedUp opens a device on 127.0.0.1:port and brings it onto the
// network, as its first QP would.
func sharedUp(t *testing.T, name string, port uint16) *hw {
	t.Helper()
	dev := sharedDevice(t, name, port)
	ctx, err := dev.Open()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ctx.Close() })
	h := verbs.DeviceDriverOf(dev).(*device).hw
	if err := h.up(); err != nil {
		t.Fatal(err)
	}
	return h
}

// On a shared address, a DREQ or REP for a connection of an owner number
// no process holds (its process ended) is answered by the leader, and one
// for a process that holds its number but has no connection manager by
// that process, each from its device.
func TestSharedAddressAnswersForConnectionsNobodyHas(t *testing.T) {
	port := udpPort()
	leader := sharedUp(t, "rxe_cmans_a", port)
	follower := sharedUp(t, "rxe_cmans_b", port)
	if !leader.links[0].(*link.Shared).Leading() || follower.owner == leader.owner {
		t.Fatalf("owners %d and %d, leader leading %v", leader.owner, follower.owner, leader.links[0].(*link.Shared).Leading())
	}
	raw, err := link.ListenUDP(netip.AddrPortFrom(netip.MustParseAddr("127.0.0.2"), port), link.UDPOptions{})
	if err != nil {
		t.Fatal(err)
	}
	got := collect(t, raw)
	send := func(m mad.Message) {
		t.Helper()
		if err := raw.Send([]link.Packet{{Buf: cmPacket(t, mad.Header{TransactionID: testTID}, m), Addr: netip.MustParseAddr("127.0.0.1")}}); err != nil {
			t.Fatal(err)
		}
	}
	const gone = 0x77
	cases := []struct {
		name string
		to   *hw
		in   mad.Message
		want mad.Message
	}{
		{"DREQ to an owner nobody holds", leader, &mad.DREQ{LocalCommID: 0x10, RemoteCommID: gone<<24 | 1},
			&mad.DREP{LocalCommID: gone<<24 | 1, RemoteCommID: 0x10}},
		{"REP to an owner nobody holds", leader, &mad.REP{LocalCommID: 0x11, RemoteCommID: gone<<24 | 2},
			&mad.REJ{LocalCommID: gone<<24 | 2, RemoteCommID: 0x11, MessageRejected: mad.MsgCodeREP, Reason: mad.RejectInvalidCommID}},
		{"DREQ to a follower without CM", follower, &mad.DREQ{LocalCommID: 0x12, RemoteCommID: uint32(follower.owner)<<24 | 3},
			&mad.DREP{LocalCommID: uint32(follower.owner)<<24 | 3, RemoteCommID: 0x12}},
		{"DREQ to the leader without CM", leader, &mad.DREQ{LocalCommID: 0x13, RemoteCommID: uint32(leader.owner)<<24 | 4},
			&mad.DREP{LocalCommID: uint32(leader.owner)<<24 | 4, RemoteCommID: 0x13}},
	}
	for _, c := range cases {
		before, _ := c.to.cmCounts()
		send(c.in)
		_, m := decodeAnswer(t, receive(t, got))
		if a, b := mustMarshal(t, m), mustMarshal(t, c.want); m.AttrID() != c.want.AttrID() || string(a) != string(b) {
			t.Errorf("%s: answer %s %+v, want %s %+v", c.name, m.AttrID(), m, c.want.AttrID(), c.want)
		}
		if after, _ := c.to.cmCounts(); after != before+1 {
			t.Errorf("%s: the device meant to answer answered %d", c.name, after-before)
		}
	}
}

// The leader answers a DREQ for an owner number nobody holds, and trusts
// that for a while; but a process that joins the address takes the first
// free number, maybe that one, and its connection manager's messages go
// to it from its first: the leader looks again once someone has joined.
// (Otherwise, for up to ownerSeenFor, it took the REP to a newcomer's
// first REQ for an ended process's and refused it.)
func TestSharedAddressForwardsToANewcomerWithAnEndedProcessNumber(t *testing.T) {
	port := udpPort()
	leader := sharedUp(t, "rxe_cmnew_a", port)
	dev := sharedDevice(t, "rxe_cmnew_b", port)
	ctx, err := dev.Open()
	if err != nil {
		t.Fatal(err)
	}
	ended := verbs.DeviceDriverOf(dev).(*device).hw
	if err := ended.up(); err != nil {
		t.Fatal(err)
	}
	owner := ended.owner
	ctx.Close() // its process ends
	raw, err := link.ListenUDP(netip.AddrPortFrom(netip.MustParseAddr("127.0.0.2"), port), link.UDPOptions{})
	if err != nil {
		t.Fatal(err)
	}
	got := collect(t, raw)
	dreq := func(to *hw, id uint32) {
		t.Helper()
		before, _ := to.cmCounts()
		m := &mad.DREQ{LocalCommID: 0x20 + id, RemoteCommID: uint32(owner)<<24 | id}
		if err := raw.Send([]link.Packet{{Buf: cmPacket(t, mad.Header{TransactionID: testTID}, m), Addr: netip.MustParseAddr("127.0.0.1")}}); err != nil {
			t.Fatal(err)
		}
		_, ans := decodeAnswer(t, receive(t, got))
		if drep, ok := ans.(*mad.DREP); !ok || drep.LocalCommID != m.RemoteCommID {
			t.Fatalf("answer %s %+v, want a DREP from %#x", ans.AttrID(), ans, m.RemoteCommID)
		}
		if after, _ := to.cmCounts(); after != before+1 {
			t.Errorf("DREQ to %#x: the device meant to answer answered %d", m.RemoteCommID, after-before)
		}
	}
	dreq(leader, 1) // nobody holds the number: the leader answers
	next := sharedUp(t, "rxe_cmnew_c", port)
	if next.owner != owner {
		t.Fatalf("the newcomer took owner %d, not the free %d", next.owner, owner)
	}
	dreq(next, 2) // the newcomer's, though the leader looked a moment ago
}
