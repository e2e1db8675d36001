package tcp_test

import (
	"bytes"
	"context"
	"errors"
	"net"
	"testing"
	"time"

	"github.com/rdmago/rdmago/fabric"
	"github.com/rdmago/rdmago/fabric/fabrictest"
	_ "github.com/rdmago/rdmago/fabric/tcp"
)

// side is one end of a connection in a test.
type side struct {
	t    *testing.T
	info *fabric.Info
	fab  *fabric.Fabric
	dom  *fabric.Domain
	eq   *fabric.EQ
	cq   *fabric.CQ
	ep   *fabric.Endpoint
}

func loopbackInfo(t *testing.T, flags uint64, node string) *fabric.Info {
	t.Helper()
	hints := fabric.AllocInfo()
	hints.FabricAttr.ProvName = "tcp"
	hints.EPAttr.Type = fabric.EPMsg
	hints.Caps = fabric.CapMsg | fabric.CapRMA
	infos, err := fabric.GetInfo(node, "0", flags, hints)
	if err != nil {
		t.Fatal(err)
	}
	for _, i := range infos {
		if i.SrcAddr.Addr().IsLoopback() && i.SrcAddr.Addr().Is4() || i.DestAddr.Addr().IsLoopback() {
			return i
		}
	}
	t.Fatal("no loopback entry")
	return nil
}

func (s *side) open(info *fabric.Info) {
	var err error
	if s.dom, err = s.fab.OpenDomain(info); err != nil {
		s.t.Fatal(err)
	}
	if s.cq, err = s.dom.OpenCQ(&fabric.CQAttr{Size: 64, Format: fabric.CQFormatData}); err != nil {
		s.t.Fatal(err)
	}
	if s.ep, err = s.dom.OpenEndpoint(info, nil); err != nil {
		s.t.Fatal(err)
	}
	must(s.t, s.ep.BindEQ(s.eq))
	must(s.t, s.ep.BindCQ(s.cq, fabric.BindTransmit|fabric.BindRecv))
	must(s.t, s.ep.Enable())
	s.t.Cleanup(func() { s.ep.Close() })
}

func must(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

// pair takes one completion from each of a and b, driving both: with
// manual progress a large message moves only while both sides poll.
func pair(t *testing.T, a, b *side) (fabric.CQEntry, fabric.CQEntry) {
	t.Helper()
	var got [2]*fabric.CQEntry
	deadline := time.Now().Add(5 * time.Second)
	for (got[0] == nil || got[1] == nil) && time.Now().Before(deadline) {
		for i, s := range []*side{a, b} {
			if got[i] != nil {
				continue
			}
			var e [1]fabric.CQEntry
			n, err := s.cq.Read(e[:])
			if errors.Is(err, fabric.ErrAvail) {
				ee, _ := s.cq.ReadErr()
				t.Fatalf("error completion %v (%+v)", ee.Err, ee)
			}
			if n == 1 {
				got[i] = &e[0]
			}
		}
	}
	if got[0] == nil || got[1] == nil {
		t.Fatalf("completions missing: %v %v", got[0], got[1])
	}
	return *got[0], *got[1]
}

// connected returns a connected client and server over 127.0.0.1, the
// client sending pdata.
func connected(t *testing.T, pdata []byte) (cli, srv *side) {
	c, s := fabrictest.Connect(t, "tcp", pdata)
	wrap := func(s *fabrictest.Side) *side {
		return &side{t: t, info: s.Info, dom: s.Dom, eq: s.EQ, cq: s.CQ, ep: s.EP}
	}
	return wrap(c), wrap(s)
}

func TestSendRecvBothWays(t *testing.T) {
	cli, srv := connected(t, []byte("hello"))
	for _, n := range []int{0, 1, 64, 128, 4096, 70000, 1 << 20} {
		msg := bytes.Repeat([]byte{byte(n)}, n)
		buf := make([]byte, n+10)
		must(t, srv.ep.Recv(buf, nil, fabric.AddrNotAvail, "rx"))
		must(t, cli.ep.Send(msg, nil, fabric.AddrNotAvail, "tx"))
		sc, c := pair(t, cli, srv)
		if sc.Context != "tx" || sc.Flags&fabric.CompSend == 0 {
			t.Fatalf("send completion %+v", sc)
		}
		if c.Context != "rx" || c.Len != uint64(n) || !bytes.Equal(buf[:n], msg) {
			t.Fatalf("%d bytes: receive completion %+v", n, c)
		}
		// and back, with CQ data and delivery-complete
		must(t, cli.ep.Recv(buf, nil, fabric.AddrNotAvail, "rx2"))
		must(t, srv.ep.SendMsg(&fabric.Msg{Buf: msg, Data: 77, Context: "tx2"}, fabric.FlagDeliveryComplete|fabric.FlagRemoteCQData))
		c, sc = pair(t, cli, srv)
		if c.Context != "rx2" || c.Data != 77 || c.Flags&fabric.CompRemoteCQData == 0 || c.Len != uint64(n) {
			t.Fatalf("receive with data %+v", c)
		}
		if sc.Context != "tx2" {
			t.Fatalf("delivery-complete send %+v", sc)
		}
	}
}

func TestRMAWriteAndRead(t *testing.T) {
	cli, srv := connected(t, nil)
	region := make([]byte, 8192)
	mr, err := srv.dom.RegMR(region, fabric.AccessRemoteRead|fabric.AccessRemoteWrite, 42)
	must(t, err)
	defer mr.Close()
	data := bytes.Repeat([]byte("abcdefgh"), 100)
	must(t, cli.ep.Write(data, nil, fabric.AddrNotAvail, 100, mr.Key(), "w"))
	if c := fabrictest.Completion(cli.t, cli.cq); c.Context != "w" || c.Flags&fabric.CompWrite == 0 {
		t.Fatalf("write completion %+v", c)
	}
	got := make([]byte, len(data))
	must(t, cli.ep.Read(got, nil, fabric.AddrNotAvail, 100, mr.Key(), "r"))
	if c := fabrictest.Completion(cli.t, cli.cq); c.Context != "r" || c.Flags&fabric.CompRead == 0 || !bytes.Equal(got, data) {
		t.Fatalf("read completion %+v, data equal %v", c, bytes.Equal(got, data))
	}
	// A zero-length read: a response with no data (a fuzzer found it
	// once looping for ever).
	must(t, cli.ep.Read([]byte{}, nil, fabric.AddrNotAvail, 0, mr.Key(), "r0"))
	if c := fabrictest.Completion(cli.t, cli.cq); c.Context != "r0" || c.Len != 0 {
		t.Fatalf("zero-length read %+v", c)
	}
	must(t, cli.ep.WriteData([]byte("xyz"), nil, 5, fabric.AddrNotAvail, 0, mr.Key(), "wd"))
	fabrictest.Completion(cli.t, cli.cq)
	if c := fabrictest.Completion(srv.t, srv.cq); c.Data != 5 || c.Flags&fabric.CompRemoteWrite == 0 || string(region[:3]) != "xyz" {
		t.Fatalf("remote write completion %+v", c)
	}
}

func TestTruncatedReceiveIsAnError(t *testing.T) {
	cli, srv := connected(t, nil)
	buf := make([]byte, 10)
	must(t, srv.ep.Recv(buf, nil, fabric.AddrNotAvail, "small"))
	must(t, cli.ep.Send(make([]byte, 100), nil, fabric.AddrNotAvail, nil))
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	var e [1]fabric.CQEntry
	if _, err := srv.cq.SRead(ctx, e[:]); !errors.Is(err, fabric.ErrAvail) {
		t.Fatalf("SRead: %v, want ErrAvail", err)
	}
	ee, err := srv.cq.ReadErr()
	if err != nil || ee.Err != fabric.ErrTrunc || ee.OLen != 90 || ee.Context != "small" {
		t.Fatalf("error entry %+v %v", ee, err)
	}
	// The connection goes on.
	must(t, srv.ep.Recv(buf, nil, fabric.AddrNotAvail, "next"))
	must(t, cli.ep.Send([]byte("ok"), nil, fabric.AddrNotAvail, nil))
	if c := fabrictest.Completion(srv.t, srv.cq); c.Context != "next" {
		t.Fatalf("after truncation: %+v", c)
	}
}

// deadPeerBound is how soon a side must notice that its peer is gone.
const deadPeerBound = 15 * time.Second

// TestPeerGoneFailsPostedReceiveAndRaisesShutdown closes the client's
// socket with nothing said first, as the kernel does when its process is
// killed: the server, which only waits on its CQ, gets its posted receive
// back as an FI_ECANCELED error completion and FI_SHUTDOWN on its EQ,
// without closing its endpoint.
func TestPeerGoneFailsPostedReceiveAndRaisesShutdown(t *testing.T) {
	cli, srv := connected(t, nil)
	must(t, srv.ep.Recv(make([]byte, 10), nil, fabric.AddrNotAvail, "pending"))
	cli.ep.Close()
	ctx, cancel := context.WithTimeout(context.Background(), deadPeerBound)
	defer cancel()
	var e [1]fabric.CQEntry
	if _, err := srv.cq.SRead(ctx, e[:]); !errors.Is(err, fabric.ErrAvail) {
		t.Fatalf("fi_cq_sread on a dead peer: %v, want an error completion", err)
	}
	if ee, err := srv.cq.ReadErr(); err != nil || ee.Err != fabric.ErrCanceled || ee.Context != "pending" {
		t.Fatalf("pending receive: %+v %v", ee, err)
	}
	ev, err := srv.eq.SRead(ctx)
	if err != nil || ev.Event != fabric.EventShutdown {
		t.Fatalf("EQ: %s %v, want FI_SHUTDOWN", ev.Event, err)
	}
	if err := srv.ep.Recv(make([]byte, 10), nil, fabric.AddrNotAvail, nil); !errors.Is(err, fabric.ErrShutdown) {
		t.Fatalf("fi_recv after the peer went: %v, want FI_ESHUTDOWN", err)
	}
}

func TestRejectCarriesPrivateData(t *testing.T) {
	srvInfo := loopbackInfo(t, fabric.FlagSource, "127.0.0.1")
	fab, _ := fabric.OpenFabric(srvInfo)
	eq, _ := fab.OpenEQ()
	pep, _ := fab.OpenPassiveEndpoint(srvInfo, nil)
	defer pep.Close()
	must(t, pep.Bind(eq))
	must(t, pep.Listen())
	name, _ := pep.Name()
	cliInfo := loopbackInfo(t, 0, "127.0.0.1")
	cfab, _ := fabric.OpenFabric(cliInfo)
	ceq, _ := cfab.OpenEQ()
	cli := &side{t: t, fab: cfab, eq: ceq}
	cli.open(cliInfo)
	must(t, cli.ep.Connect(name, nil))
	srv := &side{t: t, eq: eq}
	req := fabrictest.Event(srv.t, srv.eq, fabric.EventConnReq)
	must(t, pep.Reject(req.Info.Handle, []byte("go away")))
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if _, err := ceq.SRead(ctx); !errors.Is(err, fabric.ErrAvail) {
		t.Fatalf("SRead after reject: %v", err)
	}
	ee, _ := ceq.ReadErr()
	if ee.Err != fabric.ErrConnRefused || string(ee.ErrData) != "go away" {
		t.Fatalf("error entry %+v", ee)
	}
}

func TestCountersCountEachKindOfOperation(t *testing.T) {
	cli, srv := connected(t, nil)
	region := make([]byte, 4096)
	mr, err := srv.dom.RegMR(region, fabric.AccessRemoteRead|fabric.AccessRemoteWrite, 5)
	must(t, err)
	defer mr.Close()
	open := func(d *fabric.Domain) *fabric.Counter {
		c, err := d.OpenCounter()
		must(t, err)
		return c
	}
	sent, read, wrote := open(cli.dom), open(cli.dom), open(cli.dom)
	recvd, remote := open(srv.dom), open(srv.dom)
	must(t, cli.ep.BindCounter(sent, fabric.BindSend))
	must(t, cli.ep.BindCounter(read, fabric.BindRead))
	must(t, cli.ep.BindCounter(wrote, fabric.BindWrite))
	must(t, srv.ep.BindCounter(recvd, fabric.BindRecvCount))
	must(t, srv.ep.BindCounter(remote, fabric.BindRemoteRead|fabric.BindRemoteWrite))
	if err := srv.ep.BindCounter(recvd, 0); err == nil {
		t.Fatal("bound a counter for nothing")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	for i := range 3 {
		must(t, srv.ep.Recv(make([]byte, 8), nil, fabric.AddrNotAvail, i))
	}
	must(t, cli.ep.Send([]byte("a"), nil, fabric.AddrNotAvail, nil))
	must(t, cli.ep.Inject([]byte("b"), fabric.AddrNotAvail)) // counted, not completed
	must(t, cli.ep.Write([]byte("c"), nil, fabric.AddrNotAvail, 0, 5, nil))
	must(t, cli.ep.InjectWrite([]byte("d"), fabric.AddrNotAvail, 1, 5)) // counted, not completed
	must(t, cli.ep.Read(make([]byte, 2), nil, fabric.AddrNotAvail, 0, 5, nil))
	must(t, sent.Wait(ctx, 2))
	must(t, wrote.Wait(ctx, 2))
	must(t, read.Wait(ctx, 1))
	must(t, recvd.Wait(ctx, 2))
	must(t, remote.Wait(ctx, 3))
	if string(region[:2]) != "cd" {
		t.Fatalf("region %q, want the write and the inject write", region[:2])
	}
	if sent.Read() != 2 || wrote.Read() != 2 || recvd.Read() != 2 || remote.Read() != 3 || sent.ReadErr() != 0 {
		t.Fatalf("counts: sent %d, wrote %d, received %d, remote %d, errors %d", sent.Read(), wrote.Read(), recvd.Read(), remote.Read(), sent.ReadErr())
	}
	short, cancel2 := context.WithTimeout(context.Background(), 20*time.Millisecond)
	defer cancel2()
	if err := sent.Wait(short, 3); !errors.Is(err, fabric.ErrTimedOut) {
		t.Fatalf("waiting past the count: %v", err)
	}
	// A failed operation counts as an error and ends a wait.
	srv.ep.Close()
	if recvd.ReadErr() != 1 {
		t.Fatalf("canceled receive: error count %d, want 1", recvd.ReadErr())
	}
	recvd.Set(10)
	recvd.SetErr(0)
	recvd.Add(1)
	if recvd.Read() != 11 || recvd.ReadErr() != 0 {
		t.Fatalf("set/add: %d %d", recvd.Read(), recvd.ReadErr())
	}
}

// FI_OPT_CM_DATA_SIZE is the one option a tcp MSG endpoint has, as in C.
func TestOptionsCMDataSizeOnly(t *testing.T) {
	cli, _ := connected(t, nil)
	if n, err := cli.ep.GetOpt(fabric.OptCMDataSize); err != nil || n != 256 {
		t.Fatalf("GetOpt(FI_OPT_CM_DATA_SIZE) = %d, %v; want 256", n, err)
	}
	if _, err := cli.ep.GetOpt(fabric.OptMinMultiRecv); !errors.Is(err, fabric.ErrNoProtoOpt) {
		t.Fatalf("GetOpt(FI_OPT_MIN_MULTI_RECV): %v, want ErrNoProtoOpt", err)
	}
	if err := cli.ep.SetOpt(fabric.OptCMDataSize, 10); !errors.Is(err, fabric.ErrNoProtoOpt) {
		t.Fatalf("SetOpt: %v, want ErrNoProtoOpt", err)
	}
}

// Closing an endpoint whose connect waits on a silent peer (one that
// accepts the TCP connection and never answers CONNREQ) returns at once,
// not at the handshake's timeout.
func TestCloseEndsAHandshakeInProgress(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	must(t, err)
	defer ln.Close()
	accepted := make(chan net.Conn, 1)
	go func() {
		c, err := ln.Accept()
		if err == nil {
			accepted <- c
		}
	}()
	info := loopbackInfo(t, 0, "127.0.0.1")
	fab, err := fabric.OpenFabric(info)
	must(t, err)
	eq, err := fab.OpenEQ()
	must(t, err)
	cli := &side{t: t, info: info, fab: fab, eq: eq}
	cli.open(info)
	must(t, cli.ep.Connect(ln.Addr().(*net.TCPAddr).AddrPort(), nil))
	c := <-accepted
	defer c.Close()
	start := time.Now()
	must(t, cli.ep.Close())
	if d := time.Since(start); d > 2*time.Second {
		t.Fatalf("Close took %v during the handshake", d)
	}
}

func TestConformance(t *testing.T) {
	fabrictest.Run(t, fabrictest.Provider{Name: "tcp", CMDataSize: 256})
}

// rdmSide is an FI_EP_RDM endpoint with its CQ and AV.
type rdmSide struct {
	dom *fabric.Domain
	ep  *fabric.Endpoint
	cq  *fabric.CQ
	av  *fabric.AV
}

func newRDM(t *testing.T, opts ...func(*rdmSide)) *rdmSide {
	t.Helper()
	r := fabrictest.OpenRDM(t, "tcp", "tcp;ofi_rxm")
	s := &rdmSide{dom: r.Dom, ep: r.EP, cq: r.CQ, av: r.AV}
	for _, o := range opts {
		o(s)
	}
	must(t, s.ep.Enable())
	t.Cleanup(func() { s.ep.Close() })
	return s
}

// peer puts o's name in s's AV.
func (s *rdmSide) peer(t *testing.T, o *rdmSide) fabric.Addr { return fabrictest.Peer(t, s.av, o.ep) }

func (s *rdmSide) next(t *testing.T) (fabric.CQEntry, *fabric.CQErrEntry) {
	t.Helper()
	return fabrictest.Next(t, s.cq)
}

func (s *rdmSide) ok(t *testing.T) fabric.CQEntry {
	t.Helper()
	return fabrictest.Completion(t, s.cq)
}

// The API's calls on RDM endpoints, as every provider runs them.
func TestFabricAPIConnectionless(t *testing.T) {
	fabrictest.RunConnectionless(t, fabrictest.Connectionless{Name: "tcp", Entry: "tcp;ofi_rxm", Type: fabric.EPRDM, Tagged: true})
}

// A message that came before any receive was posted waits in the socket
// (its header read); once the program posts receives and takes it in with
// one CQ read, the message behind it must still arrive with no further
// polling: the background loop, which watched nothing while the first
// waited, watches the socket again, and the program's early completion
// does not trust the read that found the socket empty long ago.
func TestMessagesBehindAWaitingOneArriveWithoutPolling(t *testing.T) {
	cli, srv := connected(t, nil)
	for _, m := range []string{"first", "second"} {
		if err := cli.ep.Inject([]byte(m), fabric.AddrNotAvail); err != nil {
			t.Fatal(err)
		}
		// Let the server's background loop read the first header and
		// find no receive posted; the second comes after that read.
		time.Sleep(100 * time.Millisecond)
	}
	bufs := [][]byte{make([]byte, 16), make([]byte, 16)}
	for _, b := range bufs {
		if err := srv.ep.Recv(b, nil, fabric.AddrNotAvail, nil); err != nil {
			t.Fatal(err)
		}
	}
	// Let the background loop look again (the posts kicked it) and go
	// back to waiting, before the program takes the first message in.
	time.Sleep(100 * time.Millisecond)
	var e [1]fabric.CQEntry
	got := 0
	deadline := time.Now().Add(5 * time.Second)
	for got == 0 && time.Now().Before(deadline) {
		n, err := srv.cq.Read(e[:])
		if err != nil && err != fabric.ErrAgain {
			t.Fatal(err)
		}
		got += n
	}
	if got == 0 {
		t.Fatal("the first message never completed")
	}
	// From here on the program only waits, as fi_cq_sread does.
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
	defer cancel()
	if err := srv.cq.Wait(ctx); err != nil {
		t.Fatalf("the second message did not arrive without polling: %v", err)
	}
	if n, _ := srv.cq.Read(e[:]); n != 1 || string(bufs[1][:e[0].Len]) != "second" {
		t.Fatalf("got %d completions, %q", n, bufs[1][:e[0].Len])
	}
}

// A message that came before any receive was posted is taken in by the
// background loop once one is posted, for a program that only waits
// (fi_cq_sread), as rxm's loop does.
func TestAWaitingMessageArrivesForAProgramThatOnlyWaits(t *testing.T) {
	cli, srv := connected(t, nil)
	if err := cli.ep.Inject([]byte("early"), fabric.AddrNotAvail); err != nil {
		t.Fatal(err)
	}
	time.Sleep(100 * time.Millisecond) // its header read, no receive posted
	buf := make([]byte, 16)
	if err := srv.ep.Recv(buf, nil, fabric.AddrNotAvail, nil); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
	defer cancel()
	if err := srv.cq.Wait(ctx); err != nil {
		t.Fatalf("the waiting message did not arrive: %v", err)
	}
	var e [1]fabric.CQEntry
	if n, _ := srv.cq.Read(e[:]); n != 1 || string(buf[:e[0].Len]) != "early" {
		t.Fatalf("got %d completions, %q", n, buf[:e[0].Len])
	}
}
