package rxe

import (
	"errors"
	"net/netip"
	"testing"
	"time"

	"github.com/rdmago/rdmago/rxe/link"
	"github.com/rdmago/rdmago/verbs"
)

// TestMulticastReachesEveryAttachedQP attaches UD QPs of two devices to a
// group and sends to it from a third: both get each message until one
// detaches; a QP never attached gets nothing.
func TestMulticastReachesEveryAttachedQP(t *testing.T) {
	n := link.NewNetwork(3)
	var ends []*udEnd
	for i, a := range []string{"10.2.0.1", "10.2.0.2", "10.2.0.3", "10.2.0.4"} {
		l, _ := n.Attach(netip.MustParseAddr(a))
		ends = append(ends, newUDEnd(t, "mc"+string(rune('a'+i)), l, testQKey))
	}
	sender, r1, r2, outsider := ends[0], ends[1], ends[2], ends[3]
	grp := verbs.GIDFromAddr(netip.MustParseAddr("239.1.2.3"))
	for _, r := range []*udEnd{r1, r2} {
		if err := r.qp.AttachMcast(grp, 0); err != nil {
			t.Fatal(err)
		}
		r.postRecvs(t, 0, 4)
	}
	outsider.postRecvs(t, 0, 4)
	ah, err := sender.pd.CreateAH(&verbs.AHAttr{IsGlobal: true, PortNum: 1, GRH: verbs.GlobalRoute{DGID: grp, HopLimit: 1}})
	if err != nil {
		t.Fatal(err)
	}
	defer ah.Destroy()
	stamp(sender.buf[:100], 1)
	sender.send(t, ah, 0, testQKey, 0, 100) // the QPN is ignored for a group
	sender.wait(1, 5*time.Second)
	for i, r := range []*udEnd{r1, r2} {
		wc := r.wait(1, 5*time.Second)[0]
		if wc.Status != verbs.WCSuccess || wc.SrcQP != sender.qp.Num() || wc.ByteLen != verbs.GRHLen+100 {
			t.Fatalf("receiver %d: %+v", i, wc)
		}
		_, dst, _, _, ok := verbs.GRHAddrs(r.buf[:verbs.GRHLen])
		if !ok || dst != netip.MustParseAddr("239.1.2.3") {
			t.Fatalf("receiver %d: GRH destination %v, want the group", i, dst)
		}
		// As in libibverbs, a message to a group cannot be answered
		// through an AH made from its completion.
		if _, err := r.ctx.InitAHFromWC(1, &wc, r.buf[:verbs.GRHLen]); !errors.Is(err, verbs.ErrInvalidArgument) {
			t.Fatalf("receiver %d: InitAHFromWC of a multicast message: %v, want EINVAL", i, err)
		}
	}
	if err := r2.qp.DetachMcast(grp, 0); err != nil {
		t.Fatal(err)
	}
	if err := r2.qp.DetachMcast(grp, 0); !errors.Is(err, verbs.ErrInvalidArgument) {
		t.Fatalf("second detach: %v, want EINVAL", err)
	}
	sender.send(t, ah, 0, testQKey, 1, 10)
	sender.wait(1, 5*time.Second)
	r1.wait(1, 5*time.Second)
	time.Sleep(20 * time.Millisecond)
	if got := r2.drain(); len(got) != 0 {
		t.Fatalf("detached QP got %d messages", len(got))
	}
	if got := outsider.drain(); len(got) != 0 {
		t.Fatalf("QP never attached got %d messages", len(got))
	}
}

// TestMulticastAttachChecks covers the refusals of ibv_attach_mcast.
func TestMulticastAttachChecks(t *testing.T) {
	n := link.NewNetwork(1)
	l, _ := n.Attach(netip.MustParseAddr("10.2.0.1"))
	u := newUDEnd(t, "mc", l, testQKey)
	o := pairOpts{}
	o.defaults()
	rc, err := u.pd.CreateQP(&verbs.QPInitAttr{SendCQ: u.cq, RecvCQ: u.cq, QPType: verbs.QPTRC})
	if err != nil {
		t.Fatal(err)
	}
	defer rc.Destroy()
	grp := verbs.GIDFromAddr(netip.MustParseAddr("239.1.2.3"))
	for _, c := range []struct {
		name string
		qp   *verbs.QP
		gid  verbs.GID
		lid  uint16
	}{
		{"RC QP", rc, grp, 0},
		{"unicast GID", u.qp, verbs.GIDFromAddr(netip.MustParseAddr("10.2.0.9")), 0},
		{"a LID on RoCE", u.qp, grp, 5},
		{"IPv6 group on an IPv4-only device", u.qp, verbs.GIDFromAddr(netip.MustParseAddr("ff0e::1")), 0},
	} {
		if err := c.qp.AttachMcast(c.gid, c.lid); !errors.Is(err, verbs.ErrInvalidArgument) {
			t.Errorf("%s: %v, want EINVAL", c.name, err)
		}
	}
}

// TestMulticastOverUDP joins a group over real sockets on the loopback
// interface, when the host routes multicast there.
func TestMulticastOverUDP(t *testing.T) {
	la, lb := udpLinks(t)
	a := newUDEnd(t, "mcu_a", la, testQKey)
	b := newUDEnd(t, "mcu_b", lb, testQKey)
	grp := verbs.GIDFromAddr(netip.MustParseAddr("239.77.1.1"))
	if err := b.qp.AttachMcast(grp, 0); err != nil {
		t.Skipf("this host cannot join a multicast group on loopback: %v", err)
	}
	b.postRecvs(t, 0, 1)
	ah, err := a.pd.CreateAH(&verbs.AHAttr{IsGlobal: true, PortNum: 1, GRH: verbs.GlobalRoute{DGID: grp, HopLimit: 1}})
	if err != nil {
		t.Fatal(err)
	}
	defer ah.Destroy()
	a.send(t, ah, 0, testQKey, 0, 33)
	if wc := a.wait(1, 5*time.Second)[0]; wc.Status != verbs.WCSuccess {
		t.Fatalf("send: %+v", wc)
	}
	wcs := b.waitOrNone(1, 2*time.Second)
	if len(wcs) == 0 {
		t.Skip("the host did not loop the multicast datagram back on loopback")
	}
	if wcs[0].Status != verbs.WCSuccess || wcs[0].ByteLen != verbs.GRHLen+33 {
		t.Fatalf("receive: %+v", wcs[0])
	}
}

// waitOrNone polls for up to d for n completions and returns what came.
func (e *udEnd) waitOrNone(n int, d time.Duration) []verbs.WC {
	deadline := time.Now().Add(d)
	var out []verbs.WC
	for len(out) < n && time.Now().Before(deadline) {
		out = append(out, e.drain()...)
		time.Sleep(time.Millisecond)
	}
	return out
}
