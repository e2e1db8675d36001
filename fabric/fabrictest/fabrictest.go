// Package fabrictest runs fabric's API on a provider, as verbstest does
// for a verbs provider: every provider's tests call Run with what the
// provider documents it refuses, so that the calls behave the same on
// each. It also has the helpers those tests share.
package fabrictest

import (
	"bytes"
	"context"
	"errors"
	"testing"
	"time"

	"github.com/rdmago/rdmago/fabric"
)

// Timeout bounds each wait for an event or a completion.
const Timeout = 10 * time.Second

// Provider describes the provider under test: its name for the hints and
// what it documents.
type Provider struct {
	Name string
	// CMDataSize is its FI_OPT_CM_DATA_SIZE.
	CMDataSize int
	// Atomics says whether its FI_EP_MSG endpoints have FI_ATOMIC
	// (a fetching FI_UINT64 FI_SUM, at least); without, the atomic calls fail with
	// FI_ENOSYS.
	Atomics bool
	// Tagged says whether its FI_EP_MSG endpoints have FI_TAGGED;
	// without, the tagged calls fail with FI_EOPNOTSUPP.
	Tagged bool
}

// Must fails t on an error.
func Must(t testing.TB, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

// Event waits for the next event of eq and fails t unless it is want.
func Event(t testing.TB, eq *fabric.EQ, want fabric.EventType) fabric.EQEntry {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), Timeout)
	defer cancel()
	e, err := eq.SRead(ctx)
	if errors.Is(err, fabric.ErrAvail) {
		ee, _ := eq.ReadErr()
		t.Fatalf("waiting for %s: error entry %v", want, ee.Err)
	}
	if err != nil {
		t.Fatalf("waiting for %s: %v", want, err)
	}
	if e.Event != want {
		t.Fatalf("event %s, want %s", e.Event, want)
	}
	return e
}

// Next waits for the next completion or error entry of cq (fi_cq_sread,
// fi_cq_readerr).
func Next(t testing.TB, cq *fabric.CQ) (fabric.CQEntry, *fabric.CQErrEntry) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), Timeout)
	defer cancel()
	var e [1]fabric.CQEntry
	_, err := cq.SRead(ctx, e[:])
	if errors.Is(err, fabric.ErrAvail) {
		ee, _ := cq.ReadErr()
		return fabric.CQEntry{}, &ee
	}
	if err != nil {
		t.Fatalf("no completion: %v", err)
	}
	return e[0], nil
}

// Completion waits for the next completion of cq and fails t on an error
// completion.
func Completion(t testing.TB, cq *fabric.CQ) fabric.CQEntry {
	t.Helper()
	e, ee := Next(t, cq)
	if ee != nil {
		t.Fatalf("error completion %v (%+v)", ee.Err, ee)
	}
	return e
}

// RDM is an FI_EP_RDM endpoint on loopback with its domain, CQ (both
// directions) and AV bound, not yet enabled.
type RDM struct {
	Info *fabric.Info
	Dom  *fabric.Domain
	EP   *fabric.Endpoint
	CQ   *fabric.CQ
	AV   *fabric.AV
}

// OpenRDM opens provider prov's RDM endpoint on 127.0.0.1, whose
// fi_getinfo entry must be named entry ("tcp;ofi_rxm").
func OpenRDM(t testing.TB, prov, entry string) *RDM {
	t.Helper()
	hints := fabric.AllocInfo()
	hints.FabricAttr.ProvName = prov
	hints.EPAttr.Type = fabric.EPRDM
	infos, err := fabric.GetInfo("127.0.0.1", "0", fabric.FlagSource, hints)
	Must(t, err)
	info := infos[0]
	if info.FabricAttr.ProvName != entry {
		t.Fatalf("RDM entry of provider %q, want %q", info.FabricAttr.ProvName, entry)
	}
	fab, err := fabric.OpenFabric(info)
	Must(t, err)
	s := &RDM{Info: info}
	s.Dom, err = fab.OpenDomain(info)
	Must(t, err)
	s.CQ, _ = s.Dom.OpenCQ(nil)
	s.AV, _ = s.Dom.OpenAV(nil)
	s.EP, err = s.Dom.OpenEndpoint(info, nil)
	Must(t, err)
	Must(t, s.EP.BindAV(s.AV))
	Must(t, s.EP.BindCQ(s.CQ, fabric.BindTransmit|fabric.BindRecv))
	return s
}

// Peer puts the name of the enabled endpoint o in av, and returns its
// handle.
func Peer(t testing.TB, av *fabric.AV, o *fabric.Endpoint) fabric.Addr {
	t.Helper()
	name, err := o.Name()
	Must(t, err)
	h, err := av.Insert(name)
	Must(t, err)
	return h[0]
}

// Side is one end of a connection with its objects and a registered
// buffer.
type Side struct {
	Info *fabric.Info
	EQ   *fabric.EQ
	Dom  *fabric.Domain
	CQ   *fabric.CQ
	EP   *fabric.Endpoint
	Buf  []byte
	MR   *fabric.MR
}

func open(t testing.TB, fab *fabric.Fabric, eq *fabric.EQ, info *fabric.Info) *Side {
	t.Helper()
	s := &Side{Info: info, EQ: eq}
	var err error
	s.Dom, err = fab.OpenDomain(info)
	Must(t, err)
	s.CQ, err = s.Dom.OpenCQ(&fabric.CQAttr{Format: fabric.CQFormatData})
	Must(t, err)
	s.EP, err = s.Dom.OpenEndpoint(info, nil)
	Must(t, err)
	Must(t, s.EP.BindEQ(eq))
	Must(t, s.EP.BindCQ(s.CQ, fabric.BindTransmit|fabric.BindRecv))
	Must(t, s.EP.Enable())
	s.Buf = make([]byte, 1<<16)
	s.MR, err = s.Dom.RegMR(s.Buf, fabric.AccessSend|fabric.AccessRecv|fabric.AccessRead|fabric.AccessWrite|fabric.AccessRemoteRead|fabric.AccessRemoteWrite, 7)
	Must(t, err)
	CloseAtEnd(t, s.EP, s.MR, s.Dom)
	return s
}

// CloseAtEnd closes ep, mr and dom, in that order, when the test ends,
// and fails it if the domain does not close (a region or endpoint still
// holds it).
func CloseAtEnd(t testing.TB, ep *fabric.Endpoint, mr *fabric.MR, dom *fabric.Domain) {
	t.Cleanup(func() {
		ep.Close()
		mr.Close()
		if err := dom.Close(); err != nil {
			t.Errorf("domain close: %v", err)
		}
	})
}

func msgHints(prov string) *fabric.Info {
	h := fabric.AllocInfo()
	h.FabricAttr.ProvName = prov
	h.EPAttr.Type = fabric.EPMsg
	h.Caps = fabric.CapMsg | fabric.CapRMA
	return h
}

// Connect connects a client and a server FI_EP_MSG endpoint of prov
// over 127.0.0.1, the client sending data and the server answering
// "welcome", and checks the events: both name the program's endpoint,
// and each side gets the other's data.
func Connect(t testing.TB, prov string, data []byte) (cli, srv *Side) {
	t.Helper()
	infos, err := fabric.GetInfo("127.0.0.1", "0", fabric.FlagSource, msgHints(prov))
	Must(t, err)
	sinfo := infos[0]
	fab, err := fabric.OpenFabric(sinfo)
	Must(t, err)
	eq, err := fab.OpenEQ()
	Must(t, err)
	pep, err := fab.OpenPassiveEndpoint(sinfo, nil)
	Must(t, err)
	t.Cleanup(func() { pep.Close() })
	Must(t, pep.Bind(eq))
	Must(t, pep.Listen())
	name, err := pep.Name()
	Must(t, err)

	h := msgHints(prov)
	h.DestAddr = name
	infos, err = fabric.GetInfo("", "", 0, h)
	Must(t, err)
	cfab, err := fabric.OpenFabric(infos[0])
	Must(t, err)
	ceq, err := cfab.OpenEQ()
	Must(t, err)
	cli = open(t, cfab, ceq, infos[0])
	Must(t, cli.EP.Connect(name, data))
	req := Event(t, eq, fabric.EventConnReq)
	if !bytes.Equal(req.Data, data) {
		t.Fatalf("FI_CONNREQ's data %q", req.Data)
	}
	srv = open(t, fab, eq, req.Info)
	Must(t, srv.EP.Accept([]byte("welcome")))
	if e := Event(t, eq, fabric.EventConnected); e.FID != srv.EP {
		t.Fatalf("the server's FI_CONNECTED names %T, not its endpoint", e.FID)
	}
	e := Event(t, ceq, fabric.EventConnected)
	if string(e.Data) != "welcome" || e.FID != cli.EP {
		t.Fatalf("the client's FI_CONNECTED: data %q, FID %T", e.Data, e.FID)
	}
	return cli, srv
}

// Run runs fabric's calls on connected FI_EP_MSG endpoints of p.
func Run(t *testing.T, p Provider) {
	cli, srv := Connect(t, p.Name, []byte("hello"))
	any := fabric.AddrNotAvail

	t.Run("SendRecv", func(t *testing.T) {
		copy(cli.Buf, "ping")
		Must(t, srv.EP.Recv(srv.Buf[:100], srv.MR.Desc(), any, "rx"))
		Must(t, cli.EP.SendData(cli.Buf[:4], cli.MR.Desc(), 9, any, "tx"))
		if c := Completion(t, cli.CQ); c.Context != "tx" || c.Flags&fabric.CompSend == 0 {
			t.Fatalf("send completion %+v", c)
		}
		c := Completion(t, srv.CQ)
		if c.Context != "rx" || c.Len != 4 || string(srv.Buf[:4]) != "ping" || c.Flags&fabric.CompRemoteCQData == 0 || c.Data != 9 {
			t.Fatalf("receive completion %+v, bytes %q", c, srv.Buf[:4])
		}
	})

	t.Run("InjectSize", func(t *testing.T) {
		n := cli.Info.TxAttr.InjectSize
		if n <= 0 || n >= len(cli.Buf) {
			t.Fatalf("inject size %d", n)
		}
		if err := cli.EP.Inject(cli.Buf[:n+1], any); !errors.Is(err, fabric.ErrMsgSize) {
			t.Fatalf("fi_inject of %d bytes: %v, want FI_EMSGSIZE", n+1, err)
		}
		if err := cli.EP.SendMsg(&fabric.Msg{Buf: cli.Buf[:n+1], Desc: cli.MR.Desc()}, fabric.FlagInject); !errors.Is(err, fabric.ErrMsgSize) {
			t.Fatalf("fi_sendmsg FI_INJECT of %d bytes: %v, want FI_EMSGSIZE", n+1, err)
		}
		if err := cli.EP.InjectWrite(cli.Buf[:n+1], any, srv.MR.Addr(), srv.MR.Key()); !errors.Is(err, fabric.ErrMsgSize) {
			t.Fatalf("fi_inject_write of %d bytes: %v, want FI_EMSGSIZE", n+1, err)
		}
		copy(cli.Buf, bytes.Repeat([]byte{'i'}, n))
		Must(t, srv.EP.Recv(srv.Buf[:n], srv.MR.Desc(), any, "rx"))
		Must(t, cli.EP.Inject(cli.Buf[:n], any))
		if c := Completion(t, srv.CQ); c.Len != uint64(n) || !bytes.Equal(srv.Buf[:n], cli.Buf[:n]) {
			t.Fatalf("injected message: %+v", c)
		}
	})

	t.Run("RMA", func(t *testing.T) {
		copy(cli.Buf[100:], "written")
		Must(t, cli.EP.Write(cli.Buf[100:107], cli.MR.Desc(), any, srv.MR.Addr()+200, srv.MR.Key(), "w"))
		if c := Completion(t, cli.CQ); c.Context != "w" || c.Flags&fabric.CompWrite == 0 {
			t.Fatalf("write completion %+v", c)
		}
		Must(t, cli.EP.Read(cli.Buf[300:307], cli.MR.Desc(), any, srv.MR.Addr()+200, srv.MR.Key(), "r"))
		if c := Completion(t, cli.CQ); c.Context != "r" || string(cli.Buf[300:307]) != "written" {
			t.Fatalf("read completion %+v, bytes %q", c, cli.Buf[300:307])
		}
	})

	if p.Tagged {
		t.Run("Tagged", func(t *testing.T) {
			copy(cli.Buf[400:], "tagged")
			Must(t, srv.EP.TRecv(srv.Buf[400:500], srv.MR.Desc(), any, 0x50, 0x0f, "trx"))
			Must(t, cli.EP.TSend(cli.Buf[400:406], cli.MR.Desc(), any, 0x5a, "ttx"))
			if c := Completion(t, cli.CQ); c.Context != "ttx" || c.Flags&fabric.CompTagged == 0 {
				t.Fatalf("tagged send completion %+v", c)
			}
			c := Completion(t, srv.CQ)
			if c.Context != "trx" || c.Tag != 0x5a || c.Len != 6 || string(srv.Buf[400:406]) != "tagged" {
				t.Fatalf("tagged receive completion %+v, bytes %q", c, srv.Buf[400:406])
			}
		})
	}

	t.Run("Refusals", func(t *testing.T) {
		m := &fabric.Msg{Buf: cli.Buf[:1], Desc: cli.MR.Desc()}
		type refusal = struct {
			name string
			err  error
			want fabric.Errno
		}
		var tagged []refusal
		if !p.Tagged {
			tagged = []refusal{
				{"fi_trecv", cli.EP.TRecv(cli.Buf[:1], cli.MR.Desc(), any, 0, 0, nil), fabric.ErrNotSupported},
				{"fi_tsend", cli.EP.TSend(cli.Buf[:1], cli.MR.Desc(), any, 0, nil), fabric.ErrNotSupported},
				{"fi_tinject", cli.EP.TInject(cli.Buf[:1], any, 0), fabric.ErrNotSupported},
				{"fi_tsendmsg", cli.EP.TSendMsg(m, 0, 0), fabric.ErrNotSupported},
			}
		}
		for _, c := range append(tagged, []refusal{
			{"fi_sendmsg without a message", cli.EP.SendMsg(nil, 0), fabric.ErrInvalid},
			{"fi_ep_bind without a CQ", cli.EP.BindCQ(nil, fabric.BindRecv), fabric.ErrInvalid},
			{"fi_setopt", cli.EP.SetOpt(fabric.OptCMDataSize, 1), fabric.ErrNoProtoOpt},
		}...) {
			if !errors.Is(c.err, c.want) {
				t.Errorf("%s: %v, want %v", c.name, c.err, c.want)
			}
		}
		if n, err := cli.EP.GetOpt(fabric.OptCMDataSize); err != nil || n != p.CMDataSize {
			t.Errorf("FI_OPT_CM_DATA_SIZE: %d, %v; want %d", n, err, p.CMDataSize)
		}
		if _, err := cli.EP.GetOpt(fabric.OptRxSize); !errors.Is(err, fabric.ErrNoProtoOpt) {
			t.Errorf("fi_getopt(FI_OPT_RX_SIZE): %v, want FI_ENOPROTOOPT", err)
		}
		_, err := cli.EP.FetchAtomicValid(fabric.Uint64, fabric.OpSum)
		switch {
		case p.Atomics && err != nil:
			t.Errorf("fi_fetch_atomicvalid(FI_UINT64, FI_SUM): %v", err)
		case !p.Atomics && !errors.Is(err, fabric.ErrNoSys):
			t.Errorf("fi_fetch_atomicvalid without FI_ATOMIC: %v, want FI_ENOSYS", err)
		}
	})

	t.Run("Closed", func(t *testing.T) {
		Must(t, cli.EP.Close())
		Must(t, cli.EP.Close())
		if err := cli.EP.Send(cli.Buf[:1], cli.MR.Desc(), any, nil); !errors.Is(err, fabric.ErrBadFD) {
			t.Fatalf("fi_send after fi_close: %v, want FI_EBADF", err)
		}
		if _, err := cli.EP.Name(); !errors.Is(err, fabric.ErrBadFD) {
			t.Fatalf("fi_getname after fi_close: %v, want FI_EBADF", err)
		}
	})
}

// Connectionless describes a provider's FI_EP_RDM or FI_EP_DGRAM
// endpoints for RunConnectionless: its name for the hints, the entry's
// name ("tcp;ofi_rxm"), the endpoint type, and what it documents.
type Connectionless struct {
	Name, Entry string
	Type        fabric.EPType
	// Tagged says whether the endpoints have FI_TAGGED; without, the
	// tagged calls fail with FI_EOPNOTSUPP.
	Tagged bool
	// Source says whether receive completions name their sender
	// (FI_SOURCE: CQEntry.Source, CQ.ReadFrom).
	Source bool
}

// openConnectionless opens and enables an endpoint of p on 127.0.0.1.
func openConnectionless(t *testing.T, p Connectionless) *RDM {
	t.Helper()
	hints := fabric.AllocInfo()
	hints.FabricAttr.ProvName = p.Name
	hints.EPAttr.Type = p.Type
	infos, err := fabric.GetInfo("127.0.0.1", "0", fabric.FlagSource, hints)
	Must(t, err)
	info := infos[0]
	if info.FabricAttr.ProvName != p.Entry {
		t.Fatalf("%v entry of provider %q, want %q", p.Type, info.FabricAttr.ProvName, p.Entry)
	}
	fab, err := fabric.OpenFabric(info)
	Must(t, err)
	s := &RDM{Info: info}
	s.Dom, err = fab.OpenDomain(info)
	Must(t, err)
	s.CQ, _ = s.Dom.OpenCQ(nil)
	s.AV, _ = s.Dom.OpenAV(nil)
	s.EP, err = s.Dom.OpenEndpoint(info, nil)
	Must(t, err)
	Must(t, s.EP.BindAV(s.AV))
	Must(t, s.EP.BindCQ(s.CQ, fabric.BindTransmit|fabric.BindRecv))
	Must(t, s.EP.Enable())
	t.Cleanup(func() {
		s.EP.Close()
		s.Dom.Close()
	})
	return s
}

// RunConnectionless runs fabric's calls on two connectionless endpoints
// of p on 127.0.0.1, each with the other in its AV: sends each way,
// injects up to the inject size, tagged messages or their refusal, the
// sender's name with each receive where the provider gives it, and the
// calls after Close.
func RunConnectionless(t *testing.T, p Connectionless) {
	a, b := openConnectionless(t, p), openConnectionless(t, p)
	aToB, bToA := Peer(t, a.AV, b.EP), Peer(t, b.AV, a.EP)
	any := fabric.AddrNotAvail
	abuf, bbuf := make([]byte, 4096), make([]byte, 4096)

	t.Run("SendRecvBothWays", func(t *testing.T) {
		for _, dir := range []struct {
			from, to *RDM
			dest     fabric.Addr
			back     fabric.Addr // the receiver's handle of the sender
			buf      []byte
		}{{a, b, aToB, bToA, bbuf}, {b, a, bToA, aToB, abuf}} {
			Must(t, dir.to.EP.Recv(dir.buf[:100], nil, any, "rx"))
			Must(t, dir.from.EP.Send([]byte("over the AV"), nil, dir.dest, "tx"))
			if c := Completion(t, dir.from.CQ); c.Context != "tx" || c.Flags&fabric.CompSend == 0 {
				t.Fatalf("send completion %+v", c)
			}
			var e [1]fabric.CQEntry
			var src [1]fabric.Addr
			ctx, cancel := context.WithTimeout(context.Background(), Timeout)
			for {
				n, err := dir.to.CQ.ReadFrom(e[:], src[:])
				if n == 1 {
					break
				}
				if !errors.Is(err, fabric.ErrAgain) || ctx.Err() != nil {
					cancel()
					t.Fatalf("no receive completion: %v", err)
				}
			}
			cancel()
			if e[0].Context != "rx" || string(e[0].Buf) != "over the AV" || e[0].Flags&fabric.CompRecv == 0 {
				t.Fatalf("receive completion %+v", e[0])
			}
			if p.Source && src[0] != dir.back {
				t.Fatalf("the receive names sender %v, want %v", src[0], dir.back)
			}
		}
	})

	t.Run("InjectSize", func(t *testing.T) {
		n := a.Info.TxAttr.InjectSize
		if n <= 0 || n >= len(abuf) {
			t.Fatalf("inject size %d", n)
		}
		if err := a.EP.Inject(abuf[:n+1], aToB); !errors.Is(err, fabric.ErrMsgSize) {
			t.Fatalf("fi_inject of %d bytes: %v, want FI_EMSGSIZE", n+1, err)
		}
		Must(t, b.EP.Recv(bbuf[:n], nil, any, "rx"))
		Must(t, a.EP.Inject(bytes.Repeat([]byte{'i'}, n), aToB))
		if c := Completion(t, b.CQ); c.Len != uint64(n) {
			t.Fatalf("injected message: %+v", c)
		}
	})

	t.Run("Tagged", func(t *testing.T) {
		if !p.Tagged {
			if err := a.EP.TSend(abuf[:1], nil, aToB, 1, nil); !errors.Is(err, fabric.ErrNotSupported) {
				t.Fatalf("fi_tsend without FI_TAGGED: %v, want FI_EOPNOTSUPP", err)
			}
			return
		}
		Must(t, b.EP.TRecv(bbuf[:100], nil, any, 0x70, 0x0f, "trx"))
		Must(t, a.EP.TSend([]byte("tagged"), nil, aToB, 0x7a, "ttx"))
		Completion(t, a.CQ)
		if c := Completion(t, b.CQ); c.Context != "trx" || c.Tag != 0x7a || string(c.Buf) != "tagged" {
			t.Fatalf("tagged receive %+v", c)
		}
	})

	t.Run("Closed", func(t *testing.T) {
		Must(t, a.EP.Close())
		Must(t, a.EP.Close())
		if err := a.EP.Send(abuf[:1], nil, aToB, nil); !errors.Is(err, fabric.ErrBadFD) {
			t.Fatalf("fi_send after fi_close: %v, want FI_EBADF", err)
		}
		if err := a.EP.Recv(abuf[:1], nil, any, nil); !errors.Is(err, fabric.ErrBadFD) {
			t.Fatalf("fi_recv after fi_close: %v, want FI_EBADF", err)
		}
	})
}
