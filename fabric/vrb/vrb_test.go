package vrb_test

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"testing"
	"time"

	"github.com/rdmago/rdmago/fabric"
	"github.com/rdmago/rdmago/fabric/fabrictest"
	_ "github.com/rdmago/rdmago/fabric/vrb"
	_ "github.com/rdmago/rdmago/rxe" // the software device
)

func must(t testing.TB, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

// side is one endpoint with its fabric objects and a registered buffer.
type side struct {
	t   testing.TB
	fab *fabric.Fabric
	eq  *fabric.EQ
	dom *fabric.Domain
	cq  *fabric.CQ
	ep  *fabric.Endpoint
	buf []byte
	mr  *fabric.MR
}

// loopback is the verbs entry for 127.0.0.1 (the software device on lo).
func loopback(t testing.TB, flags uint64, node string) *fabric.Info {
	t.Helper()
	hints := fabric.AllocInfo()
	hints.FabricAttr.ProvName = "verbs"
	hints.EPAttr.Type = fabric.EPMsg
	infos, err := fabric.GetInfo(node, "0", flags, hints)
	if err != nil {
		t.Fatalf("no verbs entry for %s: %v", node, err)
	}
	return infos[0]
}

func (s *side) open(info *fabric.Info) {
	t := s.t
	var err error
	s.dom, err = s.fab.OpenDomain(info)
	must(t, err)
	s.cq, err = s.dom.OpenCQ(&fabric.CQAttr{Format: fabric.CQFormatData})
	must(t, err)
	s.ep, err = s.dom.OpenEndpoint(info, nil)
	must(t, err)
	must(t, s.ep.BindEQ(s.eq))
	must(t, s.ep.BindCQ(s.cq, fabric.BindTransmit|fabric.BindRecv))
	must(t, s.ep.Enable())
	s.register(1<<16, fabric.AccessSend|fabric.AccessRecv|fabric.AccessRemoteRead|fabric.AccessRemoteWrite)
}

// register registers a buffer of n bytes and closes the endpoint, the
// region and the domain when the test ends.
func (s *side) register(n int, access uint64) {
	t := s.t
	s.buf = make([]byte, n)
	var err error
	s.mr, err = s.dom.RegMR(s.buf, access, 0)
	must(t, err)
	fabrictest.CloseAtEnd(t, s.ep, s.mr, s.dom)
}

// connected returns a client and a server connected over 127.0.0.1, the
// client's private data checked at the server and the server's at the
// client.
func connected(t testing.TB) (cli, srv *side) {
	c, s := fabrictest.Connect(t, "verbs", []byte("hello"))
	wrap := func(s *fabrictest.Side) *side {
		return &side{t: t, eq: s.EQ, dom: s.Dom, cq: s.CQ, ep: s.EP, buf: s.Buf, mr: s.MR}
	}
	return wrap(c), wrap(s)
}

// Every data operation of the MSG endpoint, as C's verbs provider maps
// them: send and receive, CQ data in the immediate, RDMA write (with
// immediate: it consumes a receive), read, inject and inject write.
func TestMsgEndpointOperations(t *testing.T) {
	cli, srv := connected(t)

	// Send / receive, and senddata with its data.
	must(t, srv.ep.Recv(srv.buf[:100], srv.mr.Desc(), fabric.AddrNotAvail, "r1"))
	copy(cli.buf, "ping")
	must(t, cli.ep.Send(cli.buf[:4], cli.mr.Desc(), fabric.AddrNotAvail, "s1"))
	if e := fabrictest.Completion(cli.t, cli.cq); e.Context != "s1" || e.Flags&fabric.CompSend == 0 {
		t.Fatalf("send completion %+v", e)
	}
	if e := fabrictest.Completion(srv.t, srv.cq); e.Context != "r1" || string(e.Buf) != "ping" || e.Flags&fabric.CompRecv == 0 {
		t.Fatalf("receive completion %+v", e)
	}
	must(t, srv.ep.Recv(srv.buf[:100], srv.mr.Desc(), fabric.AddrNotAvail, "r2"))
	must(t, cli.ep.SendData(cli.buf[:4], cli.mr.Desc(), 0xdeadbeef, fabric.AddrNotAvail, "s2"))
	fabrictest.Completion(cli.t, cli.cq)
	if e := fabrictest.Completion(srv.t, srv.cq); e.Flags&fabric.CompRemoteCQData == 0 || e.Data != 0xdeadbeef {
		t.Fatalf("senddata at the receiver %+v", e)
	}

	// Inject: no completion, the data arrives.
	must(t, srv.ep.Recv(srv.buf[:100], srv.mr.Desc(), fabric.AddrNotAvail, "r3"))
	must(t, cli.ep.Inject([]byte("injected"), fabric.AddrNotAvail))
	if e := fabrictest.Completion(srv.t, srv.cq); string(e.Buf) != "injected" {
		t.Fatalf("inject arrived as %q", e.Buf)
	}
	if err := cli.ep.Inject(make([]byte, 300), fabric.AddrNotAvail); !errors.Is(err, fabric.ErrMsgSize) {
		t.Fatalf("300-byte inject: %v, want ErrMsgSize", err)
	}

	// RDMA write and read against the server's region, by its virtual
	// address and key.
	copy(cli.buf[100:], "written by RDMA")
	must(t, cli.ep.Write(cli.buf[100:115], cli.mr.Desc(), fabric.AddrNotAvail, srv.mr.Addr()+1000, srv.mr.Key(), "w"))
	if e := fabrictest.Completion(cli.t, cli.cq); e.Context != "w" || e.Flags&fabric.CompWrite == 0 {
		t.Fatalf("write completion %+v", e)
	}
	if got := string(srv.buf[1000:1015]); got != "written by RDMA" {
		t.Fatalf("server memory %q after the write", got)
	}
	must(t, cli.ep.InjectWrite([]byte("!"), fabric.AddrNotAvail, srv.mr.Addr()+1015, srv.mr.Key()))
	must(t, cli.ep.Read(cli.buf[200:216], cli.mr.Desc(), fabric.AddrNotAvail, srv.mr.Addr()+1000, srv.mr.Key(), "rd"))
	if e := fabrictest.Completion(cli.t, cli.cq); e.Context != "rd" || e.Flags&fabric.CompRead == 0 {
		t.Fatalf("read completion %+v", e)
	}
	if got := string(cli.buf[200:216]); got != "written by RDMA!" {
		t.Fatalf("read %q", got)
	}

	// Write with CQ data: the server's posted receive completes with it.
	must(t, srv.ep.Recv(srv.buf[:100], srv.mr.Desc(), fabric.AddrNotAvail, "r4"))
	must(t, cli.ep.WriteData(cli.buf[100:103], cli.mr.Desc(), 77, fabric.AddrNotAvail, srv.mr.Addr()+2000, srv.mr.Key(), "wd"))
	fabrictest.Completion(cli.t, cli.cq)
	if e := fabrictest.Completion(srv.t, srv.cq); e.Context != "r4" || e.Data != 77 || e.Flags&(fabric.CompRemoteWrite|fabric.CompRemoteCQData) != fabric.CompRemoteWrite|fabric.CompRemoteCQData {
		t.Fatalf("writedata at the target %+v", e)
	}
	if !bytes.Equal(srv.buf[2000:2003], []byte("wri")) {
		t.Fatalf("writedata's bytes %q", srv.buf[2000:2003])
	}
}

// The atomics C's verbs provider has, on one 64-bit element of the
// peer's region: write, read, fetch-and-add and compare-and-swap, each
// result and the target's memory as the operation says; the ones it has
// not are ErrNoSys.
func TestMsgEndpointAtomics(t *testing.T) {
	cli, srv := connected(t)
	target := srv.mr.Addr() + 512
	word := func(b []byte) uint64 { return binary.NativeEndian.Uint64(b) }
	put := func(b []byte, v uint64) []byte { binary.NativeEndian.PutUint64(b, v); return b }
	op, res, cmp := cli.buf[0:8], cli.buf[8:16], cli.buf[16:24]
	done := func(ctx string, flags uint64) {
		t.Helper()
		if e := fabrictest.Completion(cli.t, cli.cq); e.Context != ctx || e.Flags != fabric.CompAtomic|flags {
			t.Fatalf("%s completion %+v, want flags FI_ATOMIC|%#x", ctx, e, flags)
		}
	}

	must(t, cli.ep.Atomic(put(op, 40), cli.mr.Desc(), fabric.AddrNotAvail, target, srv.mr.Key(), fabric.Uint64, fabric.OpAtomicWrite, "write"))
	done("write", fabric.CompWrite)
	if v := word(srv.buf[512:]); v != 40 {
		t.Fatalf("target %d after FI_ATOMIC_WRITE of 40", v)
	}
	must(t, cli.ep.FetchAtomic(put(op, 2), cli.mr.Desc(), res, cli.mr.Desc(), fabric.AddrNotAvail, target, srv.mr.Key(), fabric.Int64, fabric.OpSum, "sum"))
	done("sum", fabric.CompRead)
	if word(res) != 40 || word(srv.buf[512:]) != 42 {
		t.Fatalf("FI_SUM of 2: fetched %d, target %d; want 40, 42", word(res), word(srv.buf[512:]))
	}
	must(t, cli.ep.CompareAtomic(put(op, 7), cli.mr.Desc(), put(cmp, 1), cli.mr.Desc(), res, cli.mr.Desc(), fabric.AddrNotAvail, target, srv.mr.Key(), fabric.Uint64, fabric.OpCSwap, "cswap-miss"))
	done("cswap-miss", fabric.CompRead)
	if word(res) != 42 || word(srv.buf[512:]) != 42 {
		t.Fatalf("FI_CSWAP against 1: fetched %d, target %d; want 42, 42 (no swap)", word(res), word(srv.buf[512:]))
	}
	must(t, cli.ep.CompareAtomic(put(op, 7), cli.mr.Desc(), put(cmp, 42), cli.mr.Desc(), res, cli.mr.Desc(), fabric.AddrNotAvail, target, srv.mr.Key(), fabric.Uint64, fabric.OpCSwap, "cswap-hit"))
	done("cswap-hit", fabric.CompRead)
	if word(res) != 42 || word(srv.buf[512:]) != 7 {
		t.Fatalf("FI_CSWAP against 42: fetched %d, target %d; want 42, 7", word(res), word(srv.buf[512:]))
	}
	must(t, cli.ep.FetchAtomic(nil, nil, res, cli.mr.Desc(), fabric.AddrNotAvail, target, srv.mr.Key(), fabric.Uint64, fabric.OpAtomicRead, "read"))
	done("read", fabric.CompRead)
	if word(res) != 7 {
		t.Fatalf("FI_ATOMIC_READ fetched %d, want 7", word(res))
	}

	for _, tc := range []struct {
		name string
		err  error
		want error
	}{
		{"fi_atomic FI_SUM", cli.ep.Atomic(op, cli.mr.Desc(), fabric.AddrNotAvail, target, srv.mr.Key(), fabric.Uint64, fabric.OpSum, nil), fabric.ErrNoSys},
		{"fi_fetch_atomic FI_MIN", cli.ep.FetchAtomic(op, cli.mr.Desc(), res, cli.mr.Desc(), fabric.AddrNotAvail, target, srv.mr.Key(), fabric.Uint64, fabric.OpMin, nil), fabric.ErrNoSys},
		{"fi_compare_atomic FI_MSWAP", cli.ep.CompareAtomic(op, nil, cmp, nil, res, cli.mr.Desc(), fabric.AddrNotAvail, target, srv.mr.Key(), fabric.Uint64, fabric.OpMSwap, nil), fabric.ErrNoSys},
		{"FI_UINT32", cli.ep.Atomic(op[:4], cli.mr.Desc(), fabric.AddrNotAvail, target, srv.mr.Key(), fabric.Uint32, fabric.OpAtomicWrite, nil), fabric.ErrInvalid},
		{"two elements", cli.ep.Atomic(cli.buf[:16], cli.mr.Desc(), fabric.AddrNotAvail, target, srv.mr.Key(), fabric.Uint64, fabric.OpAtomicWrite, nil), fabric.ErrTooBig},
	} {
		if !errors.Is(tc.err, tc.want) {
			t.Errorf("%s: %v, want %v", tc.name, tc.err, tc.want)
		}
	}
	if n, err := cli.ep.FetchAtomicValid(fabric.Int64, fabric.OpSum); n != 1 || err != nil {
		t.Errorf("fi_fetch_atomicvalid(FI_INT64, FI_SUM) = %d, %v; want 1", n, err)
	}
	if _, err := cli.ep.AtomicValid(fabric.Uint64, fabric.OpBXor); !errors.Is(err, fabric.ErrNoSys) {
		t.Errorf("fi_atomicvalid(FI_UINT64, FI_BXOR): %v, want ErrNoSys", err)
	}
}

// Bad work requests fail at the call: no descriptor for a non-inject
// send, a buffer outside its region, private data over 55 bytes.
func TestMsgEndpointRefusesBadRequests(t *testing.T) {
	cli, _ := connected(t)
	if err := cli.ep.Send(cli.buf[:4], nil, fabric.AddrNotAvail, nil); !errors.Is(err, fabric.ErrInvalid) {
		t.Fatalf("send without a descriptor: %v", err)
	}
	if err := cli.ep.Send(make([]byte, 4), cli.mr.Desc(), fabric.AddrNotAvail, nil); !errors.Is(err, fabric.ErrInvalid) {
		t.Fatalf("send of a buffer outside the region: %v", err)
	}
	if n, err := cli.ep.GetOpt(fabric.OptCMDataSize); err != nil || n != 55 {
		t.Fatalf("FI_OPT_CM_DATA_SIZE = %d, %v; want 55", n, err)
	}
}

// A disconnect reaches the peer as FI_SHUTDOWN; closing an endpoint
// cancels its posted receives.
func TestShutdownAndCloseCancel(t *testing.T) {
	cli, srv := connected(t)
	must(t, srv.ep.Recv(srv.buf[:100], srv.mr.Desc(), fabric.AddrNotAvail, "pending"))
	must(t, cli.ep.Shutdown())
	fabrictest.Event(srv.t, srv.eq, fabric.EventShutdown)
	must(t, srv.ep.Close())
	var e [1]fabric.CQEntry
	if _, err := srv.cq.Read(e[:]); !errors.Is(err, fabric.ErrAvail) {
		t.Fatalf("after close: %v, want an error entry", err)
	}
	ee, _ := srv.cq.ReadErr()
	if ee.Context != "pending" || (ee.Err != fabric.ErrCanceled) {
		t.Fatalf("error entry %+v, want the receive canceled", ee)
	}
}

// A rejected request reaches the client as an error entry carrying the
// server's private data.
func TestRejectCarriesPrivateData(t *testing.T) {
	pep, req, ceq := pendingRequest(t)
	defer pep.Close()
	must(t, pep.Reject(req.Info.Handle, []byte("go away")))
	if err := pep.Reject(req.Info.Handle, nil); err == nil {
		t.Fatal("a request rejected twice")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if _, err := ceq.SRead(ctx); !errors.Is(err, fabric.ErrAvail) {
		t.Fatalf("client's event: %v, want an error entry", err)
	}
	ee, _ := ceq.ReadErr()
	if ee.Err != fabric.ErrConnRefused || string(ee.ErrData) != "go away" {
		t.Fatalf("error entry %v %q, want ECONNREFUSED with the server's data", ee.Err, ee.ErrData)
	}
}

// A connection request nobody answered is rejected when its passive
// endpoint closes: the client hears of it, and Close frees everything.
func TestPassiveCloseRejectsPendingRequests(t *testing.T) {
	pep, _, ceq := pendingRequest(t)
	if err := pep.Close(); err != nil {
		t.Fatalf("Close with a request pending: %v", err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if _, err := ceq.SRead(ctx); !errors.Is(err, fabric.ErrAvail) {
		t.Fatalf("client: %v, want a rejection", err)
	}
	if ee, _ := ceq.ReadErr(); ee.Err != fabric.ErrConnRefused {
		t.Fatalf("client's error %v, want ECONNREFUSED", ee.Err)
	}
}

// pendingRequest makes a listener and a client connecting to it, and
// returns the listener, the request's FI_CONNREQ event, unanswered, and
// the client's EQ.
func pendingRequest(t *testing.T) (*fabric.PassiveEndpoint, fabric.EQEntry, *fabric.EQ) {
	sinfo := loopback(t, fabric.FlagSource, "127.0.0.1")
	fab, err := fabric.OpenFabric(sinfo)
	must(t, err)
	eq, _ := fab.OpenEQ()
	pep, err := fab.OpenPassiveEndpoint(sinfo, nil)
	must(t, err)
	must(t, pep.Bind(eq))
	must(t, pep.Listen())
	name, _ := pep.Name()
	hints := fabric.AllocInfo()
	hints.FabricAttr.ProvName = "verbs"
	hints.DestAddr = name
	infos, err := fabric.GetInfo("", "", 0, hints)
	must(t, err)
	cfab, _ := fabric.OpenFabric(infos[0])
	ceq, _ := cfab.OpenEQ()
	cli := &side{t: t, fab: cfab, eq: ceq}
	cli.open(infos[0])
	must(t, cli.ep.Connect(name, nil))
	req := fabrictest.Event(t, eq, fabric.EventConnReq)
	return pep, req, ceq
}

func TestConformance(t *testing.T) {
	fabrictest.Run(t, fabrictest.Provider{Name: "verbs", CMDataSize: 55, Atomics: true})
}
