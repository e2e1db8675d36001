package rdmacm_test

import (
	"bytes"
	"context"
	"errors"
	"net/netip"
	"testing"
	"time"

	"github.com/rdmago/rdmago/rdmacm"
	"github.com/rdmago/rdmago/rxe"
	"github.com/rdmago/rdmago/rxe/link"
	"github.com/rdmago/rdmago/verbs"
)

// cmNet is two rxe devices on an in-memory network, registered with the
// connection manager.
type cmNet struct {
	net      *link.Network
	cli, srv netip.Addr
}

func newCMNet(t *testing.T, seed uint64) *cmNet {
	t.Helper()
	n := &cmNet{net: link.NewNetwork(seed), cli: netip.MustParseAddr("10.5.0.1"), srv: netip.MustParseAddr("10.5.0.2")}
	for _, a := range []netip.Addr{n.cli, n.srv} {
		l, err := n.net.Attach(a)
		if err != nil {
			t.Fatal(err)
		}
		dev, err := rxe.NewDevice(rxe.Config{Name: "cm_" + a.String(), Links: []link.Link{l}})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(rdmacm.RegisterDevice(dev))
	}
	return n
}

func mustChannel(t *testing.T) *rdmacm.EventChannel {
	t.Helper()
	ch, err := rdmacm.CreateEventChannel()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := ch.Close(); err != nil {
			t.Errorf("closing the event channel: %v", err)
		}
	})
	return ch
}

// mustEvent waits for the next event and checks its type and status.
func mustEvent(t *testing.T, ch *rdmacm.EventChannel, want rdmacm.EventType, status int) *rdmacm.Event {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	ev, err := ch.GetEvent(ctx)
	if err != nil {
		t.Fatalf("waiting for %v: %v", want, err)
	}
	if ev.Type != want || ev.Status != status {
		t.Fatalf("event %v status %d, want %v status %d", ev.Type, ev.Status, want, status)
	}
	ev.Ack()
	return ev
}

func qpCaps() *verbs.QPInitAttr {
	return &verbs.QPInitAttr{Cap: verbs.QPCap{MaxSendWR: 8, MaxRecvWR: 8, MaxSendSGE: 1, MaxRecvSGE: 1}}
}

// listen makes a listening ID on the server address.
func (n *cmNet) listen(t *testing.T, ch *rdmacm.EventChannel, ps rdmacm.PortSpace, port uint16) *rdmacm.ID {
	t.Helper()
	lis, err := rdmacm.CreateID(ch, nil, ps)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { lis.Destroy() })
	if err := lis.BindAddr(netip.AddrPortFrom(n.srv, port)); err != nil {
		t.Fatal(err)
	}
	if err := lis.Listen(4); err != nil {
		t.Fatal(err)
	}
	return lis
}

// resolve makes a client ID with its route resolved to the server.
func (n *cmNet) resolve(t *testing.T, ch *rdmacm.EventChannel, ps rdmacm.PortSpace, port uint16) *rdmacm.ID {
	t.Helper()
	id, err := rdmacm.CreateID(ch, "client", ps)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { id.Destroy() })
	if err := id.ResolveAddr(netip.AddrPortFrom(n.cli, 0), netip.AddrPortFrom(n.srv, port), time.Second); err != nil {
		t.Fatal(err)
	}
	mustEvent(t, ch, rdmacm.EventAddrResolved, 0)
	if err := id.ResolveRoute(time.Second); err != nil {
		t.Fatal(err)
	}
	mustEvent(t, ch, rdmacm.EventRouteResolved, 0)
	return id
}

// TestConnectSendDisconnect walks seed 004's client and server flows
// with events: connect with private data both ways, a SEND each way over
// the QPs the CM moved, then a disconnect seen by both sides.
func TestConnectSendDisconnect(t *testing.T) {
	n := newCMNet(t, 1)
	sch, cch := mustChannel(t), mustChannel(t)
	lis := n.listen(t, sch, rdmacm.PSTCP, 7471)
	cli := n.resolve(t, cch, rdmacm.PSTCP, 7471)
	if err := cli.CreateQP(nil, qpCaps()); err != nil {
		t.Fatal(err)
	}
	if err := cli.Connect(&rdmacm.ConnParam{PrivateData: []byte("hello"), ResponderResources: 1, InitiatorDepth: 1, RetryCount: 7, RNRRetryCount: 7}); err != nil {
		t.Fatal(err)
	}
	req := mustEvent(t, sch, rdmacm.EventConnectRequest, 0)
	if req.ListenID != lis || !bytes.HasPrefix(req.Param.PrivateData, []byte("hello")) || len(req.Param.PrivateData) != 56 {
		t.Fatalf("request %+v", req)
	}
	srv := req.ID
	defer srv.Destroy()
	if got := srv.PeerAddr(); got != cli.LocalAddr() {
		t.Errorf("server sees the peer at %v, client is at %v", got, cli.LocalAddr())
	}
	if err := srv.CreateQP(nil, qpCaps()); err != nil {
		t.Fatal(err)
	}
	if err := srv.Accept(&rdmacm.ConnParam{PrivateData: []byte("welcome"), ResponderResources: 1, InitiatorDepth: 1, RNRRetryCount: 7}); err != nil {
		t.Fatal(err)
	}
	est := mustEvent(t, cch, rdmacm.EventEstablished, 0)
	if !bytes.HasPrefix(est.Param.PrivateData, []byte("welcome")) {
		t.Errorf("ESTABLISHED private data %q", est.Param.PrivateData[:8])
	}
	mustEvent(t, sch, rdmacm.EventEstablished, 0)
	if s := cli.QP().State(); s != verbs.QPSRTS {
		t.Fatalf("client QP %v", s)
	}

	// A SEND each way.
	for _, d := range []struct{ from, to *rdmacm.ID }{{cli, srv}, {srv, cli}} {
		rbuf, sbuf := make([]byte, 64), []byte("ping from "+d.from.LocalAddr().String())
		rmr, err := d.to.PD().RegMR(rbuf, verbs.AccessLocalWrite)
		if err != nil {
			t.Fatal(err)
		}
		smr, err := d.from.PD().RegMR(sbuf, 0)
		if err != nil {
			t.Fatal(err)
		}
		if err := d.to.QP().PostRecv([]verbs.RecvWR{{WRID: 1, SGList: []verbs.SGE{rmr.SGE(0, 64)}}}); err != nil {
			t.Fatal(err)
		}
		if err := d.from.QP().PostSend([]verbs.SendWR{{WRID: 2, Opcode: verbs.WRSend, SendFlags: verbs.SendSignaled, SGList: []verbs.SGE{smr.SGE(0, len(sbuf))}}}); err != nil {
			t.Fatal(err)
		}
		wc := pollOne(t, d.to.RecvCQ())
		if wc.Status != verbs.WCSuccess || !bytes.Equal(rbuf[:wc.ByteLen], sbuf) {
			t.Fatalf("receive %+v %q", wc, rbuf)
		}
		if wc := pollOne(t, d.from.SendCQ()); wc.Status != verbs.WCSuccess {
			t.Fatalf("send %+v", wc)
		}
		rmr.Dereg()
		smr.Dereg()
	}

	if err := cli.Disconnect(); err != nil {
		t.Fatal(err)
	}
	mustEvent(t, sch, rdmacm.EventDisconnected, 0)
	if err := srv.Disconnect(); err != nil {
		t.Fatal(err)
	}
	mustEvent(t, cch, rdmacm.EventDisconnected, 0)
	if s := srv.QP().State(); s != verbs.QPSErr {
		t.Errorf("server QP %v after disconnect, want ERR", s)
	}
}

func pollOne(t *testing.T, cq *verbs.CQ) verbs.WC {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	wc := make([]verbs.WC, 1)
	for {
		if err := cq.Wait(ctx); err != nil {
			t.Fatal(err)
		}
		if n, _ := cq.Poll(wc); n == 1 {
			return wc[0]
		}
	}
}

// TestConnectWithoutListenerIsRejected: a REQ to a port nobody listens on
// is refused with reason 8 (invalid service ID), as Linux refuses it.
func TestConnectWithoutListenerIsRejected(t *testing.T) {
	n := newCMNet(t, 2)
	cch := mustChannel(t)
	// The server's device must be up to answer: a listener on another port.
	n.listen(t, mustChannel(t), rdmacm.PSTCP, 1)
	cli := n.resolve(t, cch, rdmacm.PSTCP, 7472)
	if err := cli.CreateQP(nil, qpCaps()); err != nil {
		t.Fatal(err)
	}
	if err := cli.Connect(nil); err != nil {
		t.Fatal(err)
	}
	ev := mustEvent(t, cch, rdmacm.EventRejected, 8)
	if err := ev.Err(); err == nil || err.Error() != "rdmacm: RDMA_CM_EVENT_REJECTED, error 8 (connection refused: invalid service ID)" {
		t.Errorf("Err() = %v", err)
	}
	if err := ev.Err(); !errors.Is(err, verbs.ErrConnRefused) {
		t.Errorf("errors.Is(%v, verbs.ErrConnRefused) = false", err)
	}
	if !errors.Is(cli.Disconnect(), verbs.ErrInvalidArgument) {
		t.Error("Disconnect after a rejection should fail: not connected")
	}
}
