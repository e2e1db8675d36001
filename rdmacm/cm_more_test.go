package rdmacm_test

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"net/netip"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/rdmago/rdmago/rdmacm"
	"github.com/rdmago/rdmago/rdmacm/mad"
	"github.com/rdmago/rdmago/rxe/link"
	"github.com/rdmago/rdmago/verbs"
)

// madAttr returns the CM attribute of a RoCE packet to QP1 (BTH, DETH,
// MAD), or 0.
func madAttr(pkt []byte) mad.AttrID {
	if len(pkt) < 12+8+mad.HeaderLen || binary.BigEndian.Uint32(pkt[4:8])&0xffffff != 1 {
		return 0
	}
	return mad.AttrID(binary.BigEndian.Uint16(pkt[20+16:]))
}

// filter installs a packet filter: drop reports whether to drop a packet.
func (n *cmNet) filter(drop func(pkt []byte, from, to netip.Addr) bool) {
	n.net.SetFaults(link.Faults{Filter: func(pkt []byte, from, to netip.Addr) bool { return !drop(pkt, from, to) }})
}

// connect makes an established connection: client and server IDs with
// QPs, both ESTABLISHED events taken.
func (n *cmNet) connect(t *testing.T, sch, cch *rdmacm.EventChannel, port uint16, setup func(cli *rdmacm.ID)) (cli, srv *rdmacm.ID) {
	return n.connectWith(t, sch, cch, port, setup, nil)
}

func (n *cmNet) connectWith(t *testing.T, sch, cch *rdmacm.EventChannel, port uint16, setup func(cli *rdmacm.ID), p *rdmacm.ConnParam) (cli, srv *rdmacm.ID) {
	t.Helper()
	n.listen(t, sch, rdmacm.PSTCP, port)
	cli = n.resolve(t, cch, rdmacm.PSTCP, port)
	if setup != nil {
		setup(cli)
	}
	if err := cli.CreateQP(nil, qpCaps()); err != nil {
		t.Fatal(err)
	}
	if err := cli.Connect(p); err != nil {
		t.Fatal(err)
	}
	srv = mustEvent(t, sch, rdmacm.EventConnectRequest, 0).ID
	t.Cleanup(func() { srv.Destroy() })
	if err := srv.CreateQP(nil, qpCaps()); err != nil {
		t.Fatal(err)
	}
	if err := srv.Accept(nil); err != nil {
		t.Fatal(err)
	}
	mustEvent(t, cch, rdmacm.EventEstablished, 0)
	mustEvent(t, sch, rdmacm.EventEstablished, 0)
	return cli, srv
}

// TestPrivateDataOfMaximumLength: the largest private data each message
// carries arrives whole (56 bytes in a REQ after rdma_cm's header, 196 in
// a REP, 148 in a REJ), and one byte more is refused at the call.
func TestPrivateDataOfMaximumLength(t *testing.T) {
	pattern := func(n int, seed byte) []byte {
		b := make([]byte, n)
		for i := range b {
			b[i] = seed + byte(i)
		}
		return b
	}
	n := newCMNet(t, 3)
	sch, cch := mustChannel(t), mustChannel(t)
	n.listen(t, sch, rdmacm.PSTCP, 7473)

	for _, tc := range []struct {
		name   string
		accept bool
	}{{"REQ and REP", true}, {"REQ and REJ", false}} {
		t.Run(tc.name, func(t *testing.T) {
			cli := n.resolve(t, cch, rdmacm.PSTCP, 7473)
			if err := cli.CreateQP(nil, qpCaps()); err != nil {
				t.Fatal(err)
			}
			if err := cli.Connect(&rdmacm.ConnParam{PrivateData: pattern(mad.REQUserPrivateDataLen+1, 1)}); !errors.Is(err, verbs.ErrInvalidArgument) {
				t.Fatalf("Connect with 57 bytes: %v, want EINVAL", err)
			}
			reqData := pattern(mad.REQUserPrivateDataLen, 1)
			if err := cli.Connect(&rdmacm.ConnParam{PrivateData: reqData, RetryCount: 7, RNRRetryCount: 7}); err != nil {
				t.Fatal(err)
			}
			req := mustEvent(t, sch, rdmacm.EventConnectRequest, 0)
			srv := req.ID
			defer srv.Destroy()
			if !bytes.Equal(req.Param.PrivateData, reqData) {
				t.Fatalf("REQ private data\n got %x\nwant %x", req.Param.PrivateData, reqData)
			}
			if tc.accept {
				if err := srv.CreateQP(nil, qpCaps()); err != nil {
					t.Fatal(err)
				}
				if err := srv.Accept(&rdmacm.ConnParam{PrivateData: pattern(mad.REPPrivateDataLen+1, 9)}); !errors.Is(err, verbs.ErrInvalidArgument) {
					t.Fatalf("Accept with 197 bytes: %v, want EINVAL", err)
				}
				repData := pattern(mad.REPPrivateDataLen, 9)
				if err := srv.Accept(&rdmacm.ConnParam{PrivateData: repData}); err != nil {
					t.Fatal(err)
				}
				est := mustEvent(t, cch, rdmacm.EventEstablished, 0)
				if !bytes.Equal(est.Param.PrivateData, repData) {
					t.Fatalf("REP private data\n got %x\nwant %x", est.Param.PrivateData, repData)
				}
				mustEvent(t, sch, rdmacm.EventEstablished, 0)
				return
			}
			if err := srv.Reject(pattern(mad.REJPrivateDataLen+1, 5)); !errors.Is(err, verbs.ErrInvalidArgument) {
				t.Fatalf("Reject with 149 bytes: %v, want EINVAL", err)
			}
			rejData := pattern(mad.REJPrivateDataLen, 5)
			if err := srv.Reject(rejData); err != nil {
				t.Fatal(err)
			}
			ev := mustEvent(t, cch, rdmacm.EventRejected, int(mad.RejectConsumerDefined))
			if !bytes.Equal(ev.Param.PrivateData, rejData) {
				t.Fatalf("REJ private data\n got %x\nwant %x", ev.Param.PrivateData, rejData)
			}
		})
	}
}

// TestPeerDiesMidConnection: once the peer is gone, the survivor's work
// requests fail with RETRY_EXC_ERR, its DREQ goes unanswered, and it still
// gets DISCONNECTED (status -ETIMEDOUT) and then TIMEWAIT_EXIT.
func TestPeerDiesMidConnection(t *testing.T) {
	n := newCMNet(t, 4)
	sch, cch := mustChannel(t), mustChannel(t)
	cli, _ := n.connectWith(t, sch, cch, 7474, func(cli *rdmacm.ID) {
		cli.SetACKTimeout(8)     // 1 ms
		cli.SetCMTimeouts(10, 2) // 4 ms, 2 retries
	}, &rdmacm.ConnParam{ResponderResources: 1, InitiatorDepth: 1, RetryCount: 2, RNRRetryCount: 2})
	var dead atomic.Bool
	dead.Store(true)
	n.filter(func(pkt []byte, from, to netip.Addr) bool { return dead.Load() && (from == n.srv || to == n.srv) })

	buf := make([]byte, 16)
	mr, err := cli.PD().RegMR(buf, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer mr.Dereg()
	if err := cli.QP().PostSend([]verbs.SendWR{{WRID: 7, Opcode: verbs.WRSend, SendFlags: verbs.SendSignaled, SGList: []verbs.SGE{mr.SGE(0, 16)}}}); err != nil {
		t.Fatal(err)
	}
	if wc := pollOne(t, cli.SendCQ()); wc.Status != verbs.WCRetryExcErr || wc.WRID != 7 {
		t.Fatalf("send to a dead peer completed %+v, want RETRY_EXC_ERR", wc)
	}
	if err := cli.Disconnect(); err != nil {
		t.Fatal(err)
	}
	mustEvent(t, cch, rdmacm.EventDisconnected, -110)
	mustEvent(t, cch, rdmacm.EventTimewaitExit, 0)
}

// TestUnansweredREQIsUnreachable: a peer that never answers makes the
// connection attempt fail with UNREACHABLE (-ETIMEDOUT) after the REQ's
// retries.
func TestUnansweredREQIsUnreachable(t *testing.T) {
	n := newCMNet(t, 5)
	sch, cch := mustChannel(t), mustChannel(t)
	n.listen(t, sch, rdmacm.PSTCP, 7475)
	var reqs atomic.Int32
	n.filter(func(pkt []byte, from, to netip.Addr) bool {
		if madAttr(pkt) == mad.AttrREQ {
			reqs.Add(1)
			return true
		}
		return false
	})
	cli := n.resolve(t, cch, rdmacm.PSTCP, 7475)
	cli.SetACKTimeout(8)
	cli.SetCMTimeouts(10, 3)
	if err := cli.CreateQP(nil, qpCaps()); err != nil {
		t.Fatal(err)
	}
	if err := cli.Connect(nil); err != nil {
		t.Fatal(err)
	}
	mustEvent(t, cch, rdmacm.EventUnreachable, -110)
	if got := reqs.Load(); got != 4 {
		t.Errorf("%d REQs sent, want 4 (one and 3 retries)", got)
	}
	if s := cli.QP().State(); s != verbs.QPSErr {
		t.Errorf("QP %v after the failed attempt, want ERR", s)
	}
}

// TestLostHandshakeMessagesAreResent: with the first REP or the first RTU
// lost, the REP is resent and answered again, and both sides establish.
func TestLostHandshakeMessagesAreResent(t *testing.T) {
	for _, lost := range []mad.AttrID{mad.AttrREP, mad.AttrRTU} {
		t.Run(lost.String(), func(t *testing.T) {
			n := newCMNet(t, 6)
			var seen atomic.Int32
			n.filter(func(pkt []byte, from, to netip.Addr) bool {
				return madAttr(pkt) == lost && seen.Add(1) == 1
			})
			sch, cch := mustChannel(t), mustChannel(t)
			n.connect(t, sch, cch, 7476, func(cli *rdmacm.ID) {
				cli.SetACKTimeout(8)
				cli.SetCMTimeouts(12, 5)
			})
			if seen.Load() < 2 {
				t.Errorf("%v sent %d times, want a resend", lost, seen.Load())
			}
		})
	}
}

// TestREQFromConnectedQPIsStale: a second REQ naming a QP that is still
// connected is refused with reason 10 (stale connection).
func TestREQFromConnectedQPIsStale(t *testing.T) {
	n := newCMNet(t, 8)
	sch, cch := mustChannel(t), mustChannel(t)
	cli, _ := n.connect(t, sch, cch, 7478, nil)
	again := n.resolve(t, cch, rdmacm.PSTCP, 7478)
	if err := again.Connect(&rdmacm.ConnParam{QPNum: cli.QP().Num(), RetryCount: 7}); err != nil {
		t.Fatal(err)
	}
	mustEvent(t, cch, rdmacm.EventRejected, int(mad.RejectStaleConn))
}

// TestREPFromConnectedQPIsStale: a REP naming a peer QP that is still
// connected to another ID here (a peer restarted, its new QP numbered as
// an old one in timewait) is refused with reason 10, and the connecting
// ID hears it as a rejection for a stale connection, not as an
// unreachable peer.
func TestREPFromConnectedQPIsStale(t *testing.T) {
	n := newCMNet(t, 10)
	sch, cch := mustChannel(t), mustChannel(t)
	_, srv := n.connect(t, sch, cch, 7480, nil)
	again := n.resolve(t, cch, rdmacm.PSTCP, 7480)
	if err := again.CreateQP(nil, qpCaps()); err != nil {
		t.Fatal(err)
	}
	if err := again.Connect(nil); err != nil {
		t.Fatal(err)
	}
	req := mustEvent(t, sch, rdmacm.EventConnectRequest, 0).ID
	t.Cleanup(func() { req.Destroy() })
	if err := req.Accept(&rdmacm.ConnParam{QPNum: srv.QP().Num(), RetryCount: 7}); err != nil {
		t.Fatal(err)
	}
	mustEvent(t, cch, rdmacm.EventRejected, int(mad.RejectStaleConn))
}

// TestDisconnectFromEitherSide: the server may close as well as the
// client, and destroying a connected ID disconnects its peer.
func TestDisconnectFromEitherSide(t *testing.T) {
	for _, how := range []string{"server disconnects", "client destroyed"} {
		t.Run(how, func(t *testing.T) {
			n := newCMNet(t, 9)
			sch, cch := mustChannel(t), mustChannel(t)
			cli, srv := n.connect(t, sch, cch, 7479, func(cli *rdmacm.ID) { cli.SetACKTimeout(10) })
			if how == "server disconnects" {
				if err := srv.Disconnect(); err != nil {
					t.Fatal(err)
				}
				mustEvent(t, cch, rdmacm.EventDisconnected, 0)
				if err := cli.Disconnect(); err != nil {
					t.Fatal(err)
				}
				mustEvent(t, sch, rdmacm.EventDisconnected, 0)
				mustEvent(t, cch, rdmacm.EventTimewaitExit, 0)
				mustEvent(t, sch, rdmacm.EventTimewaitExit, 0)
				return
			}
			cli.Destroy()
			mustEvent(t, sch, rdmacm.EventDisconnected, 0)
			if err := srv.Disconnect(); err != nil {
				t.Fatal(err)
			}
		})
	}
}

// TestSynchronousIDs: without event channels, the calls wait for their
// outcome, as librdmacm's synchronous mode does.
func TestSynchronousIDs(t *testing.T) {
	n := newCMNet(t, 10)
	lis, err := rdmacm.CreateID(nil, nil, rdmacm.PSTCP)
	if err != nil {
		t.Fatal(err)
	}
	defer lis.Destroy()
	if err := lis.BindAddr(netip.AddrPortFrom(n.srv, 7480)); err != nil {
		t.Fatal(err)
	}
	if err := lis.Listen(1); err != nil {
		t.Fatal(err)
	}
	lis.SetEndpointQP(nil, qpCaps())
	var wg sync.WaitGroup
	wg.Add(1)
	var srvErr error
	var srv *rdmacm.ID
	go func() {
		defer wg.Done()
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if srv, srvErr = lis.GetRequest(ctx); srvErr != nil {
			return
		}
		if got := srv.RequestEvent().Param.PrivateData[:3]; string(got) != "abc" {
			t.Errorf("request private data %q", got)
		}
		srvErr = srv.Accept(nil)
	}()
	cli, err := rdmacm.CreateID(nil, nil, rdmacm.PSTCP)
	if err != nil {
		t.Fatal(err)
	}
	defer cli.Destroy()
	if err := cli.ResolveAddr(netip.AddrPortFrom(n.cli, 0), netip.AddrPortFrom(n.srv, 7480), time.Second); err != nil {
		t.Fatal(err)
	}
	if err := cli.ResolveRoute(time.Second); err != nil {
		t.Fatal(err)
	}
	if err := cli.CreateQP(nil, qpCaps()); err != nil {
		t.Fatal(err)
	}
	if err := cli.Connect(&rdmacm.ConnParam{PrivateData: []byte("abc"), RetryCount: 7}); err != nil {
		t.Fatal(err)
	}
	wg.Wait()
	if srvErr != nil {
		t.Fatal(srvErr)
	}
	defer srv.Destroy()
	if srv.QP() == nil || srv.QP().State() != verbs.QPSRTS {
		t.Fatalf("the request's ID has no QP in RTS")
	}
	// A refused synchronous connect returns the REJECTED event as an error.
	other, _ := rdmacm.CreateID(nil, nil, rdmacm.PSTCP)
	defer other.Destroy()
	other.ResolveAddr(netip.AddrPortFrom(n.cli, 0), netip.AddrPortFrom(n.srv, 9), time.Second)
	other.ResolveRoute(time.Second)
	other.CreateQP(nil, qpCaps())
	err = other.Connect(nil)
	var ee *rdmacm.EventError
	if !errors.As(err, &ee) || ee.Type != rdmacm.EventRejected || ee.Status != 8 {
		t.Fatalf("connect to no listener: %v", err)
	}
}

// TestMigrateMovesTheIDAndItsEvents: events queued for an ID follow it to
// its new channel; the old channel can then be closed.
func TestMigrateMovesTheIDAndItsEvents(t *testing.T) {
	n := newCMNet(t, 11)
	old, err := rdmacm.CreateEventChannel()
	if err != nil {
		t.Fatal(err)
	}
	id, _ := rdmacm.CreateID(old, nil, rdmacm.PSTCP)
	defer id.Destroy()
	if err := id.ResolveAddr(netip.AddrPortFrom(n.cli, 0), netip.AddrPortFrom(n.srv, 1), time.Second); err != nil {
		t.Fatal(err)
	}
	if err := old.Close(); !errors.Is(err, verbs.ErrBusy) {
		t.Fatalf("closing a channel with IDs: %v, want EBUSY", err)
	}
	nch := mustChannel(t)
	if err := id.Migrate(nch); err != nil {
		t.Fatal(err)
	}
	if err := old.Close(); err != nil {
		t.Fatal(err)
	}
	if ev := mustEvent(t, nch, rdmacm.EventAddrResolved, 0); ev.ID != id {
		t.Fatal("event for another ID")
	}
	if id.Channel() != nch {
		t.Fatal("Channel() is not the new channel")
	}
}

// TestUserMovesTheQP: with a QP the CM does not own (rping -q), the client
// gets CONNECT_RESPONSE, moves its QP with InitQPAttr and calls Establish.
func TestUserMovesTheQP(t *testing.T) {
	n := newCMNet(t, 12)
	sch, cch := mustChannel(t), mustChannel(t)
	n.listen(t, sch, rdmacm.PSTCP, 7482)
	cli := n.resolve(t, cch, rdmacm.PSTCP, 7482)
	ctx := cli.Verbs()
	pd, _ := ctx.AllocPD()
	defer pd.Dealloc()
	cq, _ := ctx.CreateCQ(8, nil, 0)
	defer cq.Destroy()
	qp, err := pd.CreateQP(&verbs.QPInitAttr{SendCQ: cq, RecvCQ: cq, QPType: verbs.QPTRC, Cap: qpCaps().Cap})
	if err != nil {
		t.Fatal(err)
	}
	defer qp.Destroy()
	move := func(s verbs.QPState) {
		attr, mask, err := cli.InitQPAttr(s)
		if err != nil {
			t.Fatal(err)
		}
		if err := qp.Modify(&attr, mask); err != nil {
			t.Fatalf("to %v: %v", s, err)
		}
	}
	move(verbs.QPSInit)
	if err := cli.Connect(&rdmacm.ConnParam{QPNum: qp.Num(), ResponderResources: 1, InitiatorDepth: 1, RetryCount: 7, RNRRetryCount: 7}); err != nil {
		t.Fatal(err)
	}
	srv := mustEvent(t, sch, rdmacm.EventConnectRequest, 0).ID
	defer srv.Destroy()
	srv.CreateQP(nil, qpCaps())
	if err := srv.Accept(nil); err != nil {
		t.Fatal(err)
	}
	mustEvent(t, cch, rdmacm.EventConnectResponse, 0)
	move(verbs.QPSRTR)
	move(verbs.QPSRTS)
	if err := cli.Establish(); err != nil {
		t.Fatal(err)
	}
	mustEvent(t, sch, rdmacm.EventEstablished, 0)
}

// TestBindAddrConflicts: a port is bound once per address and port space.
func TestBindAddrConflicts(t *testing.T) {
	n := newCMNet(t, 13)
	a, _ := rdmacm.CreateID(nil, nil, rdmacm.PSTCP)
	defer a.Destroy()
	if err := a.BindAddr(netip.AddrPortFrom(n.srv, 7483)); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		ps   rdmacm.PortSpace
		addr netip.AddrPort
		want error
	}{
		{rdmacm.PSTCP, netip.AddrPortFrom(n.srv, 7483), verbs.ErrAddrInUse},
		{rdmacm.PSUDP, netip.AddrPortFrom(n.srv, 7483), nil},
		{rdmacm.PSTCP, netip.AddrPortFrom(n.cli, 7483), nil},
		{rdmacm.PSTCP, netip.MustParseAddrPort("192.0.2.1:7483"), verbs.ErrAddrNotAvail},
	} {
		b, _ := rdmacm.CreateID(nil, nil, tc.ps)
		err := b.BindAddr(tc.addr)
		b.Destroy()
		if tc.want == nil && err != nil || tc.want != nil && !errors.Is(err, tc.want) {
			t.Errorf("bind %v %v: %v, want %v", tc.ps, tc.addr, err, tc.want)
		}
	}
}

// TestDatagramServiceResolution: in the UDP port space, Connect resolves
// the service to the server's UD QP with SIDR, and a datagram sent with
// what ESTABLISHED carries arrives; a port nobody serves is UNREACHABLE
// with SIDR status 1.
func TestDatagramServiceResolution(t *testing.T) {
	n := newCMNet(t, 14)
	sch, cch := mustChannel(t), mustChannel(t)
	n.listen(t, sch, rdmacm.PSUDP, 7484)
	cli := n.resolve(t, cch, rdmacm.PSUDP, 7484)
	if err := cli.CreateQP(nil, qpCaps()); err != nil {
		t.Fatal(err)
	}
	if err := cli.Connect(&rdmacm.ConnParam{PrivateData: []byte("sidr")}); err != nil {
		t.Fatal(err)
	}
	req := mustEvent(t, sch, rdmacm.EventConnectRequest, 0)
	if !bytes.HasPrefix(req.Param.PrivateData, []byte("sidr")) || len(req.Param.PrivateData) != mad.SIDRREQUserPrivateDataLen {
		t.Fatalf("SIDR private data %q (%d bytes)", req.Param.PrivateData[:4], len(req.Param.PrivateData))
	}
	srv := req.ID
	defer srv.Destroy()
	if err := srv.CreateQP(nil, qpCaps()); err != nil {
		t.Fatal(err)
	}
	rbuf := make([]byte, verbs.GRHLen+64)
	rmr, _ := srv.PD().RegMR(rbuf, verbs.AccessLocalWrite)
	defer rmr.Dereg()
	srv.QP().PostRecv([]verbs.RecvWR{{WRID: 1, SGList: []verbs.SGE{rmr.SGE(0, len(rbuf))}}})
	if err := srv.Accept(nil); err != nil {
		t.Fatal(err)
	}
	est := mustEvent(t, cch, rdmacm.EventEstablished, 0)
	if est.UD.QPNum != srv.QP().Num() || est.UD.QKey != rdmacm.UDPQKey {
		t.Fatalf("ESTABLISHED UD %+v, server QP %d", est.UD, srv.QP().Num())
	}
	ah, err := cli.PD().CreateAH(&est.UD.AHAttr)
	if err != nil {
		t.Fatal(err)
	}
	defer ah.Destroy()
	msg := []byte("a datagram")
	smr, _ := cli.PD().RegMR(msg, 0)
	defer smr.Dereg()
	if err := cli.QP().PostSend([]verbs.SendWR{{Opcode: verbs.WRSend, SendFlags: verbs.SendSignaled, SGList: []verbs.SGE{smr.SGE(0, len(msg))},
		AH: ah, RemoteQPN: est.UD.QPNum, RemoteQKey: est.UD.QKey}}); err != nil {
		t.Fatal(err)
	}
	wc := pollOne(t, srv.RecvCQ())
	if wc.Status != verbs.WCSuccess || !bytes.Equal(rbuf[verbs.GRHLen:verbs.GRHLen+len(msg)], msg) || wc.SrcQP != cli.QP().Num() {
		t.Fatalf("datagram %+v %q", wc, rbuf[verbs.GRHLen:])
	}

	none := n.resolve(t, cch, rdmacm.PSUDP, 7485)
	none.CreateQP(nil, qpCaps())
	if err := none.Connect(nil); err != nil {
		t.Fatal(err)
	}
	mustEvent(t, cch, rdmacm.EventUnreachable, int(mad.SIDRUnsupported))
}

// TestEventChannelReadyInASelect: a program waits on the connection
// manager's events and a CQ's completion events in one select, then
// takes the events without blocking.
func TestEventChannelReadyInASelect(t *testing.T) {
	vbNoLeaks(t)
	ca, sa := vbDevices(t)
	ch, err := rdmacm.CreateEventChannel()
	vbMust(t, err)
	defer ch.Close()
	id, err := rdmacm.CreateID(ch, nil, rdmacm.PSTCP)
	vbMust(t, err)
	defer id.Destroy()
	if ev, ok := ch.PollEvent(); ok {
		t.Fatalf("PollEvent on an empty channel: %v", ev.Type)
	}
	vbMust(t, id.ResolveAddr(netip.AddrPortFrom(ca, 0), netip.AddrPortFrom(sa, 7000), time.Second))
	cc, err := id.Verbs().CreateCompChannel()
	vbMust(t, err)
	defer cc.Close()
	for _, want := range []rdmacm.EventType{rdmacm.EventAddrResolved, rdmacm.EventRouteResolved} {
		select {
		case <-ch.Ready():
			ev, ok := ch.PollEvent()
			if !ok || ev.Type != want || ev.ID != id {
				t.Fatalf("after Ready: %v %v, want %v", ok, ev, want)
			}
			ev.Ack()
		case <-cc.C():
			t.Fatal("a completion event from an idle channel")
		case <-time.After(10 * time.Second):
			t.Fatalf("Ready never held a value for %v", want)
		}
		if want == rdmacm.EventAddrResolved {
			vbMust(t, id.ResolveRoute(time.Second))
		}
	}
}

// TestSyncListenerRequestsArriveOnItsOwnChannel: a synchronous ID has a
// channel of its own, as in librdmacm, and a synchronous listener's
// connection requests arrive there for rdma_get_cm_event, as the OFA
// course takes them; the request's ID is synchronous, on a channel of its
// own, and its Accept waits for the connection.
func TestSyncListenerRequestsArriveOnItsOwnChannel(t *testing.T) {
	n := newCMNet(t, 21)
	lis := n.listen(t, nil, rdmacm.PSTCP, 7490)
	lch := lis.Channel()
	if lch == nil {
		t.Fatal("a synchronous ID has no channel")
	}
	cli, err := rdmacm.CreateID(nil, nil, rdmacm.PSTCP)
	if err != nil {
		t.Fatal(err)
	}
	defer cli.Destroy()
	if err := cli.ResolveAddr(netip.AddrPortFrom(n.cli, 0), netip.AddrPortFrom(n.srv, 7490), time.Second); err != nil {
		t.Fatal(err)
	}
	if err := cli.ResolveRoute(time.Second); err != nil {
		t.Fatal(err)
	}
	if err := cli.CreateQP(nil, qpCaps()); err != nil {
		t.Fatal(err)
	}
	connected := make(chan error, 1)
	go func() {
		connected <- cli.Connect(&rdmacm.ConnParam{PrivateData: []byte("course"), RetryCount: 7, RNRRetryCount: 7})
	}()

	ev := mustEvent(t, lch, rdmacm.EventConnectRequest, 0) // rdma_get_cm_event(listen_id->channel)
	srv := ev.ID
	defer srv.Destroy()
	if ch := srv.Channel(); ch == nil || ch == lch {
		t.Fatalf("the request's ID has channel %p, the listener's is %p: want one of its own", ch, lch)
	}
	if !bytes.HasPrefix(ev.Param.PrivateData, []byte("course")) {
		t.Fatalf("private data %q", ev.Param.PrivateData)
	}
	if err := srv.CreateQP(nil, qpCaps()); err != nil {
		t.Fatal(err)
	}
	if err := srv.Accept(nil); err != nil { // synchronous: returns on ESTABLISHED
		t.Fatalf("rdma_accept: %v", err)
	}
	if err := <-connected; err != nil {
		t.Fatalf("rdma_connect: %v", err)
	}
	if _, ok := lch.PollEvent(); ok {
		t.Error("the listener's channel has an event left: the request's ESTABLISHED went astray")
	}
}
