package rdmacm_test

import (
	"bytes"
	"context"
	"errors"
	"net/netip"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/rdmago/rdmago/internal/memnet"
	"github.com/rdmago/rdmago/rdmacm"
	"github.com/rdmago/rdmago/rxe"
	"github.com/rdmago/rdmago/rxe/link"
	"github.com/rdmago/rdmago/verbs"
)

// vbSubnet numbers the in-memory networks of these tests, so that no two
// register devices with the same addresses.
var vbSubnet atomic.Uint32

// vbDevices makes two rxe devices on an in-memory network, registered
// with the connection manager until the test ends, and returns their
// addresses (client first).
func vbDevices(t testing.TB) (cli, srv netip.Addr) {
	t.Helper()
	n := vbSubnet.Add(1)
	network := link.NewNetwork(uint64(n))
	cli = netip.AddrFrom4([4]byte{10, 77, byte(n), 1})
	srv = netip.AddrFrom4([4]byte{10, 77, byte(n), 2})
	for _, a := range []netip.Addr{cli, srv} {
		l, err := network.Attach(a)
		if err != nil {
			t.Fatal(err)
		}
		dev, err := rxe.NewDevice(rxe.Config{Name: "vb_" + a.String(), Links: []link.Link{l}})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(rdmacm.RegisterDevice(dev))
		// A device closes its links with its last context; tests that
		// listen, close and listen again need it kept open.
		ctx, err := dev.Open()
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { ctx.Close() })
	}
	return cli, srv
}

// vbNoLeaks fails the test if, once its cleanups have run, goroutines it
// started are still running. Call it first, so that its check runs last.
func vbNoLeaks(t *testing.T) { t.Helper(); memnet.NoLeaks(t) }

func vbCtx(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	t.Cleanup(cancel)
	return ctx
}

func vbAttr() *verbs.QPInitAttr {
	return &verbs.QPInitAttr{Cap: verbs.QPCap{MaxSendWR: 8, MaxRecvWR: 8, MaxSendSGE: 2, MaxRecvSGE: 2, MaxInlineData: 16}, SQSigAll: true}
}

// vbConnect connects a client endpoint to a server endpoint as
// rdma_client and rdma_server do (rdma_getaddrinfo, rdma_create_ep,
// rdma_listen, rdma_get_request, rdma_connect, rdma_accept), calling
// beforeAccept (if not nil) on the server's new ID before it accepts.
// Both IDs are destroyed when the test ends.
func vbConnect(t *testing.T, attr *verbs.QPInitAttr, beforeAccept func(*rdmacm.ID)) (cli, srv *rdmacm.ID) {
	t.Helper()
	ctx := vbCtx(t)
	ca, sa := vbDevices(t)
	res, err := rdmacm.GetAddrInfo(sa.String(), "0", &rdmacm.AddrInfo{Flags: rdmacm.RAIPassive})
	if err != nil {
		t.Fatal(err)
	}
	listen, err := rdmacm.CreateEP(res[0], nil, attr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { listen.DestroyEP() })
	if err := listen.Listen(0); err != nil {
		t.Fatal(err)
	}
	port := strconv.Itoa(int(listen.LocalAddr().Port()))

	type result struct {
		id  *rdmacm.ID
		err error
	}
	done := make(chan result, 1)
	go func() {
		id, err := listen.GetRequest(ctx)
		if err != nil {
			done <- result{nil, err}
			return
		}
		if beforeAccept != nil {
			beforeAccept(id)
		}
		err = id.Accept(nil)
		done <- result{id, err}
	}()

	res, err = rdmacm.GetAddrInfo(sa.String(), port, &rdmacm.AddrInfo{SrcAddr: netip.AddrPortFrom(ca, 0)})
	if err != nil {
		t.Fatal(err)
	}
	a := *attr
	cli, err = rdmacm.CreateEP(res[0], nil, &a)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cli.DestroyEP() })
	connectErr := cli.Connect(nil)
	r := <-done
	if r.id != nil {
		t.Cleanup(func() { r.id.DestroyEP() })
	}
	if connectErr != nil || r.err != nil {
		t.Fatalf("connect: %v; accept: %v", connectErr, r.err)
	}
	return cli, r.id
}

func vbMust(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

func vbComp(t *testing.T, get func(context.Context) (verbs.WC, error), want verbs.WCOpcode) verbs.WC {
	t.Helper()
	wc, err := get(vbCtx(t))
	if err != nil {
		t.Fatal(err)
	}
	if wc.Status != verbs.WCSuccess || wc.Opcode != want {
		t.Fatalf("completion %v %v, want %v success", wc.Opcode, wc.Status, want)
	}
	return wc
}

// TestVerbsSendRecv runs rdma_client's and rdma_server's exchange: each
// side posts a receive, one sends, the other answers.
func TestVerbsSendRecv(t *testing.T) {
	vbNoLeaks(t)
	srvBuf := make([]byte, 64)
	var srvMR *verbs.MR
	cli, srv := vbConnect(t, vbAttr(), func(id *rdmacm.ID) {
		var err error
		if srvMR, err = id.RegMsgs(srvBuf); err != nil {
			t.Error(err)
			return
		}
		if err := id.PostRecv(7, srvMR, 0, 32); err != nil {
			t.Error(err)
		}
	})
	if srvMR == nil {
		t.FailNow()
	}
	defer srv.DeregMR(srvMR)
	cliBuf := make([]byte, 64)
	cliMR, err := cli.RegMsgs(cliBuf)
	vbMust(t, err)
	defer cli.DeregMR(cliMR)

	vbMust(t, cli.PostRecv(8, cliMR, 32, 32))
	copy(cliBuf, "ping from the client")
	vbMust(t, cli.PostSend(9, cliMR, 0, 20, verbs.SendSignaled))
	if wc := vbComp(t, cli.GetSendComp, verbs.WCSend); wc.WRID != 9 {
		t.Errorf("send completion wr_id %d, want 9", wc.WRID)
	}
	wc := vbComp(t, srv.GetRecvComp, verbs.WCRecv)
	if wc.WRID != 7 || wc.ByteLen != 20 || string(srvBuf[:20]) != "ping from the client" {
		t.Errorf("server received wr_id %d, %d bytes %q", wc.WRID, wc.ByteLen, srvBuf[:wc.ByteLen])
	}

	// The answer goes out gathered from two pieces, into two pieces.
	copy(srvBuf[32:], "pong ")
	copy(srvBuf[48:], "from the server")
	vbMust(t, srv.PostSendv(10, []verbs.SGE{srvMR.SGE(32, 5), srvMR.SGE(48, 15)}, 0))
	vbComp(t, srv.GetSendComp, verbs.WCSend)
	wc = vbComp(t, cli.GetRecvComp, verbs.WCRecv)
	if wc.WRID != 8 || string(cliBuf[32:32+wc.ByteLen]) != "pong from the server" {
		t.Errorf("client received wr_id %d: %q", wc.WRID, cliBuf[32:32+wc.ByteLen])
	}

	vbMust(t, srv.PostRecvv(11, []verbs.SGE{srvMR.SGE(0, 4), srvMR.SGE(8, 8)}))
	copy(cliBuf, "0123456789AB")
	vbMust(t, cli.PostSend(12, cliMR, 0, 12, verbs.SendInline))
	vbComp(t, cli.GetSendComp, verbs.WCSend)
	wc = vbComp(t, srv.GetRecvComp, verbs.WCRecv)
	if got := string(srvBuf[:4]) + string(srvBuf[8:16]); wc.WRID != 11 || got != "0123456789AB" {
		t.Errorf("scattered receive wr_id %d: %q", wc.WRID, got)
	}
}

// TestVerbsReadWrite moves data with RDMA WRITE and READ into and out of
// regions registered with RegWrite and RegRead, and checks that a region
// registered with RegMsgs refuses the peer.
func TestVerbsReadWrite(t *testing.T) {
	vbNoLeaks(t)
	cli, srv := vbConnect(t, vbAttr(), nil)

	target := make([]byte, 32)
	wmr, err := srv.RegWrite(target)
	vbMust(t, err)
	defer srv.DeregMR(wmr)
	source := []byte("the server's readable bytes.....")
	rmr, err := srv.RegRead(source)
	vbMust(t, err)
	defer srv.DeregMR(rmr)
	private := make([]byte, 32)
	pmr, err := srv.RegMsgs(private)
	vbMust(t, err)
	defer srv.DeregMR(pmr)
	if wmr.Access() != verbs.AccessLocalWrite|verbs.AccessRemoteWrite ||
		rmr.Access() != verbs.AccessLocalWrite|verbs.AccessRemoteRead ||
		pmr.Access() != verbs.AccessLocalWrite {
		t.Errorf("access flags %v %v %v", wmr.Access(), rmr.Access(), pmr.Access())
	}

	local := make([]byte, 64)
	lmr, err := cli.RegMsgs(local)
	vbMust(t, err)
	defer cli.DeregMR(lmr)

	copy(local, "written by the client")
	vbMust(t, cli.PostWrite(1, lmr, 0, 21, 0, wmr.Addr()+4, wmr.RKey()))
	vbComp(t, cli.GetSendComp, verbs.WCRDMAWrite)
	if !bytes.Equal(target[4:25], []byte("written by the client")) {
		t.Errorf("RDMA WRITE left %q", target)
	}

	vbMust(t, cli.PostReadv(2, []verbs.SGE{lmr.SGE(32, 10), lmr.SGE(50, 12)}, 0, rmr.Addr(), rmr.RKey()))
	vbComp(t, cli.GetSendComp, verbs.WCRDMARead)
	if got := string(local[32:42]) + string(local[50:62]); got != string(source[:22]) {
		t.Errorf("RDMA READ got %q, want %q", got, source[:22])
	}
	vbMust(t, cli.PostWritev(3, []verbs.SGE{lmr.SGE(0, 3), lmr.SGE(8, 2)}, 0, wmr.Addr(), wmr.RKey()))
	vbComp(t, cli.GetSendComp, verbs.WCRDMAWrite)
	if string(target[:5]) != "wriby" {
		t.Errorf("gathered RDMA WRITE left %q", target[:5])
	}
	vbMust(t, cli.PostRead(4, lmr, 0, 8, 0, rmr.Addr()+4, rmr.RKey()))
	vbComp(t, cli.GetSendComp, verbs.WCRDMARead)
	if string(local[:8]) != "server's" {
		t.Errorf("RDMA READ got %q", local[:8])
	}

	// A failed operation is a completion with an error status, not an
	// error of GetSendComp.
	vbMust(t, cli.PostWrite(5, lmr, 0, 8, 0, pmr.Addr(), pmr.RKey()))
	wc, err := cli.GetSendComp(vbCtx(t))
	if err != nil {
		t.Fatal(err)
	}
	if wc.WRID != 5 || wc.Status != verbs.WCRemAccessErr {
		t.Errorf("RDMA WRITE to a RegMsgs region: wr_id %d %v, want %v", wc.WRID, wc.Status, verbs.WCRemAccessErr)
	}
}

// TestVerbsBadArguments checks that the helpers refuse what C only
// asserts or leaves to crash.
func TestVerbsBadArguments(t *testing.T) {
	vbNoLeaks(t)
	cli, _ := vbConnect(t, vbAttr(), nil)
	buf := make([]byte, 16)
	mr, err := cli.RegMsgs(buf)
	vbMust(t, err)
	defer cli.DeregMR(mr)

	tests := []struct {
		name string
		call func() error
	}{
		{"recv nil MR", func() error { return cli.PostRecv(1, nil, 0, 1) }},
		{"recv negative offset", func() error { return cli.PostRecv(1, mr, -1, 1) }},
		{"recv negative length", func() error { return cli.PostRecv(1, mr, 0, -1) }},
		{"recv past the end", func() error { return cli.PostRecv(1, mr, 8, 9) }},
		{"recv offset past the end", func() error { return cli.PostRecv(1, mr, 17, 0) }},
		{"send past the end", func() error { return cli.PostSend(1, mr, 0, 17, 0) }},
		{"send nil MR inline", func() error { return cli.PostSend(1, nil, 0, 4, verbs.SendInline) }},
		{"read past the end", func() error { return cli.PostRead(1, mr, 15, 2, 0, 0, 0) }},
		{"write past the end", func() error { return cli.PostWrite(1, mr, 16, 1, 0, 0, 0) }},
		{"UD send without AH", func() error { return cli.PostUDSend(1, mr, 0, 4, 0, nil, 1) }},
		{"dereg nil", func() error { return cli.DeregMR(nil) }},
		{"too many SGEs", func() error { return cli.PostSendv(1, []verbs.SGE{mr.SGE(0, 1), mr.SGE(1, 1), mr.SGE(2, 1)}, 0) }},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			err := tc.call()
			if !errors.Is(err, verbs.ErrInvalidArgument) {
				t.Fatalf("got %v, want an error wrapping ErrInvalidArgument", err)
			}
			var we *verbs.WRError
			if errors.As(err, &we) {
				t.Errorf("one-request post returned a *WRError: %v", err)
			}
		})
	}
}

// TestVerbsWithoutQP checks the helpers on an ID that has no QP yet.
func TestVerbsWithoutQP(t *testing.T) {
	vbNoLeaks(t)
	ca, sa := vbDevices(t)
	res, err := rdmacm.GetAddrInfo(sa.String(), "7471", &rdmacm.AddrInfo{SrcAddr: netip.AddrPortFrom(ca, 0)})
	vbMust(t, err)
	id, err := rdmacm.CreateEP(res[0], nil, nil)
	vbMust(t, err)
	defer id.DestroyEP()
	if id.QP() != nil {
		t.Fatal("CreateEP without QP attributes made a QP")
	}
	if _, err := id.RegMsgs(make([]byte, 8)); !errors.Is(err, verbs.ErrInvalidArgument) {
		t.Errorf("RegMsgs: %v", err)
	}
	if err := id.PostRecvv(1, nil); !errors.Is(err, verbs.ErrInvalidArgument) || !strings.Contains(err.Error(), "rdma_post_recvv") {
		t.Errorf("PostRecvv: %v", err)
	}
	if err := id.PostSendv(1, nil, 0); !errors.Is(err, verbs.ErrInvalidArgument) {
		t.Errorf("PostSendv: %v", err)
	}
	if _, err := id.GetSendComp(vbCtx(t)); !errors.Is(err, verbs.ErrInvalidArgument) {
		t.Errorf("GetSendComp: %v", err)
	}
	if _, err := id.GetRecvComp(vbCtx(t)); !errors.Is(err, verbs.ErrInvalidArgument) {
		t.Errorf("GetRecvComp: %v", err)
	}
}

// TestVerbsGetCompContext checks that a completion wait ends with its
// context and that the next one still finds the completion that came
// later.
func TestVerbsGetCompContext(t *testing.T) {
	vbNoLeaks(t)
	cli, srv := vbConnect(t, vbAttr(), nil)
	buf := make([]byte, 16)
	mr, err := srv.RegMsgs(buf)
	vbMust(t, err)
	defer srv.DeregMR(mr)
	vbMust(t, srv.PostRecv(1, mr, 0, 16))

	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	if _, err := srv.GetRecvComp(ctx); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("GetRecvComp with nothing to receive: %v", err)
	}

	cbuf := []byte("late")
	cmr, err := cli.RegMsgs(cbuf)
	vbMust(t, err)
	defer cli.DeregMR(cmr)
	vbMust(t, cli.PostSend(2, cmr, 0, 4, 0))
	vbComp(t, cli.GetSendComp, verbs.WCSend)
	if wc := vbComp(t, srv.GetRecvComp, verbs.WCRecv); string(buf[:wc.ByteLen]) != "late" {
		t.Errorf("received %q", buf[:wc.ByteLen])
	}
}

// TestVerbsUserCQ checks the completion helpers on CQs the caller made
// without a completion channel: they wait with CQ.Wait.
func TestVerbsUserCQ(t *testing.T) {
	vbNoLeaks(t)
	ca, sa := vbDevices(t)
	ctx := vbCtx(t)
	res, err := rdmacm.GetAddrInfo(sa.String(), "0", &rdmacm.AddrInfo{Flags: rdmacm.RAIPassive})
	vbMust(t, err)
	listen, err := rdmacm.CreateEP(res[0], nil, vbAttr())
	vbMust(t, err)
	defer listen.DestroyEP()
	vbMust(t, listen.Listen(0))
	accepted := make(chan *rdmacm.ID, 1)
	go func() {
		id, err := listen.GetRequest(ctx)
		if err == nil {
			err = id.Accept(nil)
		}
		if err != nil {
			t.Error(err)
		}
		accepted <- id
	}()

	res, err = rdmacm.GetAddrInfo(sa.String(), strconv.Itoa(int(listen.LocalAddr().Port())),
		&rdmacm.AddrInfo{SrcAddr: netip.AddrPortFrom(ca, 0)})
	vbMust(t, err)
	cli, err := rdmacm.CreateEP(res[0], nil, nil)
	vbMust(t, err)
	defer cli.DestroyEP()
	pd, err := cli.Verbs().AllocPD()
	vbMust(t, err)
	defer pd.Dealloc()
	cq, err := cli.Verbs().CreateCQ(8, nil, 0)
	vbMust(t, err)
	defer cq.Destroy()
	attr := &verbs.QPInitAttr{SendCQ: cq, RecvCQ: cq, Cap: verbs.QPCap{MaxSendWR: 4, MaxRecvWR: 4, MaxSendSGE: 1, MaxRecvSGE: 1}}
	vbMust(t, cli.CreateQP(pd, attr))
	defer cli.DestroyQP()
	if cli.SendCompChannel() != nil || cli.SendCQ() != cq || cli.PD() != pd {
		t.Fatal("the ID does not use the caller's PD and CQ")
	}
	vbMust(t, cli.Connect(nil))
	srv := <-accepted
	if srv == nil {
		t.FailNow()
	}
	defer srv.DestroyEP()

	buf := []byte("on a user CQ")
	mr, err := cli.RegMsgs(buf)
	vbMust(t, err)
	defer cli.DeregMR(mr)
	sbuf := make([]byte, 16)
	smr, err := srv.RegMsgs(sbuf)
	vbMust(t, err)
	defer srv.DeregMR(smr)
	vbMust(t, srv.PostRecv(1, smr, 0, 16))
	vbMust(t, cli.PostSend(2, mr, 0, len(buf), verbs.SendSignaled))
	vbComp(t, cli.GetSendComp, verbs.WCSend)
	wc := vbComp(t, srv.GetRecvComp, verbs.WCRecv)
	if string(sbuf[:wc.ByteLen]) != "on a user CQ" {
		t.Errorf("received %q", sbuf[:wc.ByteLen])
	}
}

// TestVerbsUDSend sends datagrams with PostUDSend over the UDP port space:
// the client learns the server's QP from the ESTABLISHED event of its
// SIDR exchange.
func TestVerbsUDSend(t *testing.T) {
	vbNoLeaks(t)
	ca, sa := vbDevices(t)
	ctx := vbCtx(t)
	attr := &verbs.QPInitAttr{Cap: verbs.QPCap{MaxSendWR: 4, MaxRecvWR: 4, MaxSendSGE: 1, MaxRecvSGE: 1}}
	res, err := rdmacm.GetAddrInfo(sa.String(), "0", &rdmacm.AddrInfo{Flags: rdmacm.RAIPassive, QPType: verbs.QPTUD})
	vbMust(t, err)
	if res[0].PortSpace != rdmacm.PSUDP {
		t.Fatalf("UD address information in %v", res[0].PortSpace)
	}
	listen, err := rdmacm.CreateEP(res[0], nil, attr)
	vbMust(t, err)
	defer listen.DestroyEP()
	vbMust(t, listen.Listen(0))

	rbuf := make([]byte, verbs.GRHLen+64)
	var srv *rdmacm.ID
	var rmr *verbs.MR
	ready := make(chan error, 1)
	go func() {
		id, err := listen.GetRequest(ctx)
		if err != nil {
			ready <- err
			return
		}
		srv = id
		if rmr, err = id.RegMsgs(rbuf); err == nil {
			if err = id.PostRecv(1, rmr, 0, len(rbuf)); err == nil {
				err = id.Accept(nil)
			}
		}
		ready <- err
	}()

	res, err = rdmacm.GetAddrInfo(sa.String(), strconv.Itoa(int(listen.LocalAddr().Port())),
		&rdmacm.AddrInfo{QPType: verbs.QPTUD, SrcAddr: netip.AddrPortFrom(ca, 0)})
	vbMust(t, err)
	a := *attr
	cli, err := rdmacm.CreateEP(res[0], nil, &a)
	vbMust(t, err)
	defer cli.DestroyEP()
	connectErr := cli.Connect(nil)
	acceptErr := <-ready
	if srv != nil {
		defer srv.DestroyEP()
		if rmr != nil {
			defer srv.DeregMR(rmr)
		}
	}
	if connectErr != nil || acceptErr != nil {
		t.Fatalf("connect: %v; accept: %v", connectErr, acceptErr)
	}
	ev := cli.LastEvent()
	if ev == nil || ev.Type != rdmacm.EventEstablished || ev.UD.QKey != rdmacm.UDPQKey || ev.UD.QPNum != srv.QP().Num() {
		t.Fatalf("ESTABLISHED event %+v; server QP %d", ev, srv.QP().Num())
	}
	ah, err := cli.PD().CreateAH(&ev.UD.AHAttr)
	vbMust(t, err)
	defer ah.Destroy()

	sbuf := []byte("a datagram")
	smr, err := cli.RegMsgs(sbuf)
	vbMust(t, err)
	defer cli.DeregMR(smr)
	vbMust(t, cli.PostUDSend(2, smr, 0, len(sbuf), verbs.SendSignaled, ah, ev.UD.QPNum))
	vbComp(t, cli.GetSendComp, verbs.WCSend)
	wc := vbComp(t, srv.GetRecvComp, verbs.WCRecv)
	if got := rbuf[verbs.GRHLen:wc.ByteLen]; wc.SrcQP != cli.QP().Num() || string(got) != "a datagram" {
		t.Errorf("received %q from QP %d; client QP %d", got, wc.SrcQP, cli.QP().Num())
	}
}

// TestSRQOnAnID: the server makes an SRQ on the request's ID
// (rdma_create_srq) before its QP; the QP takes its receives from it, and
// PostRecv on the ID posts there.
func TestSRQOnAnID(t *testing.T) {
	vbNoLeaks(t)
	ca, sa := vbDevices(t)
	ctx := vbCtx(t)
	lid, err := rdmacm.CreateID(nil, nil, rdmacm.PSTCP)
	vbMust(t, err)
	defer lid.Destroy()
	vbMust(t, lid.BindAddr(netip.AddrPortFrom(sa, 0)))
	vbMust(t, lid.Listen(1))
	type served struct {
		id  *rdmacm.ID
		buf []byte
		err error
	}
	done := make(chan served, 1)
	go func() {
		id, err := lid.GetRequest(ctx)
		if err != nil {
			done <- served{err: err}
			return
		}
		s := served{id: id, buf: make([]byte, 64)}
		s.err = func() error {
			if err := id.CreateSRQ(nil, &verbs.SRQInitAttr{Attr: verbs.SRQAttr{MaxWR: 4, MaxSGE: 1}}); err != nil {
				return err
			}
			if err := id.CreateQP(nil, &verbs.QPInitAttr{Cap: verbs.QPCap{MaxSendWR: 4, MaxSendSGE: 1}}); err != nil {
				return err
			}
			if id.QP().SRQ() != id.SRQ() || id.SRQ() == nil {
				return errors.New("the ID's QP does not use the ID's SRQ")
			}
			mr, err := id.RegMsgs(s.buf)
			if err != nil {
				return err
			}
			for i := range 2 {
				if err := id.PostRecv(uint64(i), mr, i*32, 32); err != nil {
					return err
				}
			}
			return id.Accept(nil)
		}()
		done <- s
	}()
	cli, err := rdmacm.Dial(ctx, netip.AddrPortFrom(sa, lid.LocalAddr().Port()).String(), &rdmacm.Options{LocalAddr: netip.AddrPortFrom(ca, 0)})
	vbMust(t, err)
	defer cli.Close()
	s := <-done
	vbMust(t, s.err)
	defer s.id.Destroy() // destroys the QP, then the SRQ
	buf := []byte("through the SRQ")
	mr, err := cli.ID.RegMsgs(buf)
	vbMust(t, err)
	defer mr.Dereg()
	// Two messages: the QP's receive CQ is sized for its SRQ's
	// receives, though the QP has no receive queue of its own.
	for range 2 {
		vbMust(t, cli.ID.PostSend(1, mr, 0, len(buf), verbs.SendSignaled))
		vbComp(t, cli.ID.GetSendComp, verbs.WCSend)
	}
	for i := range 2 {
		wc := vbComp(t, s.id.GetRecvComp, verbs.WCRecv)
		if got := string(s.buf[32*i : 32*i+int(wc.ByteLen)]); got != string(buf) {
			t.Errorf("received %q", got)
		}
	}
}

// TestGetDevicesSharesTheIDsContexts: rdma_get_devices lists the
// contexts the connection manager's IDs use, so memory registered on
// them serves the IDs.
func TestGetDevicesSharesTheIDsContexts(t *testing.T) {
	vbNoLeaks(t)
	t.Setenv("RDMAGO_PROVIDER", "none") // only the devices registered here
	ca, sa := vbDevices(t)
	list, err := rdmacm.GetDevices()
	vbMust(t, err)
	defer list.Free()
	id, err := rdmacm.CreateID(nil, nil, rdmacm.PSTCP)
	vbMust(t, err)
	defer id.Destroy()
	vbMust(t, id.ResolveAddr(netip.AddrPortFrom(ca, 0), netip.AddrPortFrom(sa, 7000), time.Second))
	found := false
	for _, c := range list.Contexts {
		found = found || c == id.Verbs()
	}
	if len(list.Contexts) < 2 || !found {
		t.Fatalf("%d contexts; the ID's %p among them: %v", len(list.Contexts), id.Verbs(), found)
	}
	list.Free()
	list.Free() // harmless
	if len(list.Contexts) != 0 {
		t.Error("Free left contexts in the list")
	}
}
