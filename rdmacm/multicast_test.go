package rdmacm_test

import (
	"errors"
	"net/netip"
	"testing"
	"time"

	"github.com/rdmago/rdmago/rdmacm"
	"github.com/rdmago/rdmago/verbs"
)

var group = netip.MustParseAddr("239.5.6.7")

// mcEnd is a datagram ID with a UD QP and a buffer of n messages.
type mcEnd struct {
	id  *rdmacm.ID
	mr  *verbs.MR
	buf []byte
}

const mcMsg = 64

func newMCEnd(t *testing.T, id *rdmacm.ID) *mcEnd {
	t.Helper()
	if err := id.CreateQP(nil, qpCaps()); err != nil {
		t.Fatal(err)
	}
	e := &mcEnd{id: id, buf: make([]byte, 8*(verbs.GRHLen+mcMsg))}
	var err error
	if e.mr, err = id.PD().RegMR(e.buf, verbs.AccessLocalWrite); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { e.mr.Dereg() })
	return e
}

func (e *mcEnd) postRecvs(t *testing.T, n int) {
	t.Helper()
	for i := range n {
		off := i * (verbs.GRHLen + mcMsg)
		if err := e.id.QP().PostRecv([]verbs.RecvWR{{WRID: uint64(i), SGList: []verbs.SGE{e.mr.SGE(off, verbs.GRHLen+mcMsg)}}}); err != nil {
			t.Fatal(err)
		}
	}
}

func (e *mcEnd) send(t *testing.T, ah *verbs.AH, ud rdmacm.UDParam, payload string) {
	t.Helper()
	copy(e.buf, payload)
	if err := e.id.QP().PostSend([]verbs.SendWR{{Opcode: verbs.WRSendWithImm, SendFlags: verbs.SendSignaled, ImmData: e.id.QP().Num(),
		SGList: []verbs.SGE{e.mr.SGE(0, len(payload))}, AH: ah, RemoteQPN: ud.QPNum, RemoteQKey: ud.QKey}}); err != nil {
		t.Fatal(err)
	}
	if wc := pollOne(t, e.id.SendCQ()); wc.Status != verbs.WCSuccess {
		t.Fatalf("send completion %+v", wc)
	}
}

// TestJoinMulticastCarriesDatagramsUntilLeave walks mckey's flow on two
// devices: a receiver binds its address, makes a UD QP, posts receives and
// joins; a sender resolves the group's address, joins as a send-only
// member and sends to the address vector its MULTICAST_JOIN event gave.
// The receiver gets each datagram until it leaves the group.
func TestJoinMulticastCarriesDatagramsUntilLeave(t *testing.T) {
	n := newCMNet(t, 41)
	rch, sch := mustChannel(t), mustChannel(t)

	rid, err := rdmacm.CreateID(rch, nil, rdmacm.PSUDP)
	if err != nil {
		t.Fatal(err)
	}
	defer rid.Destroy()
	if err := rid.BindAddr(netip.AddrPortFrom(n.srv, 0)); err != nil {
		t.Fatal(err)
	}
	recv := newMCEnd(t, rid)
	recv.postRecvs(t, 4)
	if err := rid.JoinMulticast(group, "receiver's group"); err != nil {
		t.Fatal(err)
	}
	ev := mustEvent(t, rch, rdmacm.EventMulticastJoin, 0)
	if ev.ID != rid || ev.UD.Context != "receiver's group" || ev.UD.QPNum != rdmacm.MulticastQPN || ev.UD.QKey != rdmacm.UDPQKey ||
		ev.UD.AHAttr.GRH.DGID != verbs.GIDFromAddr(netip.MustParseAddr("::ffff:239.5.6.7")) || !ev.UD.AHAttr.IsGlobal {
		t.Fatalf("MULTICAST_JOIN %+v", ev.UD)
	}

	sid, err := rdmacm.CreateID(sch, nil, rdmacm.PSUDP)
	if err != nil {
		t.Fatal(err)
	}
	defer sid.Destroy()
	if err := sid.ResolveAddr(netip.AddrPortFrom(n.cli, 0), netip.AddrPortFrom(group, 0), time.Second); err != nil {
		t.Fatal(err)
	}
	mustEvent(t, sch, rdmacm.EventAddrResolved, 0)
	send := newMCEnd(t, sid)
	if err := sid.JoinMulticastEx(group, rdmacm.JoinSendOnlyFullMember, nil); err != nil {
		t.Fatal(err)
	}
	sev := mustEvent(t, sch, rdmacm.EventMulticastJoin, 0)
	ah, err := sid.PD().CreateAH(&sev.UD.AHAttr)
	if err != nil {
		t.Fatal(err)
	}
	defer ah.Destroy()

	send.send(t, ah, sev.UD, "first")
	send.send(t, ah, sev.UD, "second")
	for _, want := range []string{"first", "second"} {
		wc := pollOne(t, rid.RecvCQ())
		off := int(wc.WRID) * (verbs.GRHLen + mcMsg)
		got := recv.buf[off+verbs.GRHLen : off+verbs.GRHLen+int(wc.ByteLen)-verbs.GRHLen]
		if wc.Status != verbs.WCSuccess || string(got) != want || wc.ImmData != sid.QP().Num() || wc.SrcQP != sid.QP().Num() {
			t.Fatalf("received %+v %q, want %q from QP %#x", wc, got, want, sid.QP().Num())
		}
	}

	if err := rid.LeaveMulticast(group); err != nil {
		t.Fatal(err)
	}
	send.send(t, ah, sev.UD, "after leaving")
	time.Sleep(50 * time.Millisecond)
	var wc [1]verbs.WC
	if got, _ := rid.RecvCQ().Poll(wc[:]); got != 0 {
		t.Fatalf("a datagram reached the QP after it left the group: %+v", wc[0])
	}
	if err := rid.LeaveMulticast(group); !errors.Is(err, verbs.ErrAddrNotAvail) {
		t.Fatalf("leaving twice: %v, want EADDRNOTAVAIL", err)
	}
}

// TestJoinMulticastRefusesWhatLinuxRefuses: a connected port space, an ID
// bound to no device, a unicast address, a group of the other IP version,
// and a group joined twice are refused at once.
func TestJoinMulticastRefusesWhatLinuxRefuses(t *testing.T) {
	n := newCMNet(t, 42)
	ch := mustChannel(t)
	mk := func(ps rdmacm.PortSpace, bind bool) *rdmacm.ID {
		id, err := rdmacm.CreateID(ch, nil, ps)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { id.Destroy() })
		if bind {
			if err := id.BindAddr(netip.AddrPortFrom(n.srv, 0)); err != nil {
				t.Fatal(err)
			}
		}
		return id
	}
	joined := mk(rdmacm.PSUDP, true)
	if err := joined.JoinMulticast(group, nil); err != nil {
		t.Fatal(err)
	}
	mustEvent(t, ch, rdmacm.EventMulticastJoin, 0)
	for _, tc := range []struct {
		name  string
		id    *rdmacm.ID
		addr  string
		flags rdmacm.MulticastJoinFlags
		want  error
	}{
		{"TCP port space", mk(rdmacm.PSTCP, true), "239.5.6.7", 0, verbs.ErrInvalidArgument},
		{"unbound", mk(rdmacm.PSUDP, false), "239.5.6.7", 0, verbs.ErrInvalidArgument},
		{"unicast", mk(rdmacm.PSUDP, true), "10.5.0.9", 0, verbs.ErrInvalidArgument},
		{"IPv6 group on an IPv4 ID", mk(rdmacm.PSUDP, true), "ff0e::1", 0, verbs.ErrInvalidArgument},
		{"bad flags", mk(rdmacm.PSUDP, true), "239.5.6.7", 7, verbs.ErrInvalidArgument},
		{"joined twice", joined, "239.5.6.7", 0, verbs.ErrAddrInUse},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := tc.id.JoinMulticastEx(netip.MustParseAddr(tc.addr), tc.flags, nil)
			if !errors.Is(err, tc.want) {
				t.Fatalf("got %v, want %v", err, tc.want)
			}
		})
	}
	if ev, ok := ch.PollEvent(); ok {
		t.Fatalf("a refused join queued %v", ev.Type)
	}
}

// TestSynchronousJoinMulticastReturnsWithTheEvent: on an ID without a
// channel the call waits for MULTICAST_JOIN, which LastEvent holds, and
// a joined ID destroys cleanly, twice over on one device.
func TestSynchronousJoinMulticastReturnsWithTheEvent(t *testing.T) {
	n := newCMNet(t, 43)
	// An ID that holds the device open: closing its last context closes
	// a software device for good.
	keep, err := rdmacm.CreateID(nil, nil, rdmacm.PSUDP)
	if err != nil {
		t.Fatal(err)
	}
	defer keep.Destroy()
	if err := keep.BindAddr(netip.AddrPortFrom(n.srv, 0)); err != nil {
		t.Fatal(err)
	}
	for range 2 {
		id, err := rdmacm.CreateID(nil, nil, rdmacm.PSUDP)
		if err != nil {
			t.Fatal(err)
		}
		if err := id.BindAddr(netip.AddrPortFrom(n.srv, 0)); err != nil {
			t.Fatal(err)
		}
		newMCEnd(t, id)
		if err := id.JoinMulticast(group, 7); err != nil {
			t.Fatal(err)
		}
		ev := id.LastEvent()
		if ev == nil || ev.Type != rdmacm.EventMulticastJoin || ev.UD.Context != 7 || ev.UD.AHAttr.GRH.DGID != rdmacm.MulticastGID(group) {
			t.Fatalf("last event %+v", ev)
		}
		if err := id.Destroy(); err != nil {
			t.Fatal(err)
		}
	}
}
