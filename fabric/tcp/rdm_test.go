package tcp_test

import (
	"bytes"
	"context"
	"errors"
	"testing"
	"time"

	"github.com/rdmago/rdmago/fabric"
)

// rdmSide is an FI_EP_RDM endpoint with its CQ and AV.
type rdmSide struct {
	dom *fabric.Domain
	ep  *fabric.Endpoint
	cq  *fabric.CQ
	av  *fabric.AV
}

func newRDM(t *testing.T, opts ...func(*rdmSide)) *rdmSide {
	t.Helper()
	hints := fabric.AllocInfo()
	hints.FabricAttr.ProvName = "tcp"
	hints.EPAttr.Type = fabric.EPRDM
	infos, err := fabric.GetInfo("127.0.0.1", "0", fabric.FlagSource, hints)
	must(t, err)
	if infos[0].FabricAttr.ProvName != "tcp;ofi_rxm" {
		t.Fatalf("RDM entry of provider %q", infos[0].FabricAttr.ProvName)
	}
	fab, err := fabric.OpenFabric(infos[0])
	must(t, err)
	dom, err := fab.OpenDomain(infos[0])
	must(t, err)
	s := &rdmSide{dom: dom}
	s.cq, _ = dom.OpenCQ(nil)
	s.av, _ = dom.OpenAV(nil)
	s.ep, err = dom.OpenEndpoint(infos[0], nil)
	must(t, err)
	must(t, s.ep.BindAV(s.av))
	must(t, s.ep.BindCQ(s.cq, fabric.BindTransmit|fabric.BindRecv))
	for _, o := range opts {
		o(s)
	}
	must(t, s.ep.Enable())
	t.Cleanup(func() { s.ep.Close() })
	return s
}

// peer puts o's name in s's AV.
func (s *rdmSide) peer(t *testing.T, o *rdmSide) fabric.Addr {
	name, err := o.ep.Name()
	must(t, err)
	h, err := s.av.Insert(name)
	must(t, err)
	return h[0]
}

func (s *rdmSide) next(t *testing.T) (fabric.CQEntry, *fabric.CQErrEntry) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	var e [1]fabric.CQEntry
	_, err := s.cq.SRead(ctx, e[:])
	if errors.Is(err, fabric.ErrAvail) {
		ee, _ := s.cq.ReadErr()
		return fabric.CQEntry{}, &ee
	}
	if err != nil {
		t.Fatalf("no completion: %v", err)
	}
	return e[0], nil
}

func (s *rdmSide) ok(t *testing.T) fabric.CQEntry {
	t.Helper()
	e, ee := s.next(t)
	if ee != nil {
		t.Fatalf("error completion %v (%+v)", ee.Err, ee)
	}
	return e
}

func TestRDMEagerRendezvousAndUnexpected(t *testing.T) {
	a, b := newRDM(t), newRDM(t)
	toB := a.peer(t, b)
	for _, n := range []int{0, 10, 16384, 16385, 1 << 20} {
		msg := bytes.Repeat([]byte{byte(n % 251)}, n)
		// Sent before the receive is posted: the message waits.
		must(t, a.ep.Send(msg, nil, toB, "tx"))
		time.Sleep(10 * time.Millisecond)
		buf := make([]byte, n)
		must(t, b.ep.Recv(buf, nil, fabric.AddrNotAvail, "rx"))
		r := b.ok(t)
		if r.Context != "rx" || r.Len != uint64(n) || !bytes.Equal(buf, msg) {
			t.Fatalf("%d bytes: receive %+v", n, r)
		}
		if s := a.ok(t); s.Context != "tx" {
			t.Fatalf("%d bytes: send completion %+v", n, s)
		}
	}
}

func TestRDMTaggedMatchingAndReplies(t *testing.T) {
	a, b := newRDM(t), newRDM(t)
	toB, toA := a.peer(t, b), b.peer(t, a)
	bufs := [2][]byte{make([]byte, 64), make([]byte, 64)}
	must(t, b.ep.TRecv(bufs[0], nil, fabric.AddrNotAvail, 0x100, 0, "exact"))
	must(t, b.ep.TRecv(bufs[1], nil, fabric.AddrNotAvail, 0x200, 0xff, "any low byte"))
	must(t, a.ep.TSend([]byte("two"), nil, toB, 0x2ab, "t2"))
	must(t, a.ep.TSend([]byte("one"), nil, toB, 0x100, "t1"))
	got := map[any]string{}
	for range 2 {
		e := b.ok(t)
		got[e.Context] = string(e.Buf)
		if e.Flags&fabric.CompTagged == 0 {
			t.Fatalf("tagged receive without FI_TAGGED: %+v", e)
		}
	}
	if got["exact"] != "one" || got["any low byte"] != "two" {
		t.Fatalf("matched %v", got)
	}
	a.ok(t)
	a.ok(t)
	// The reply goes back over the connection a made.
	must(t, a.ep.Recv(bufs[0], nil, fabric.AddrNotAvail, "reply"))
	must(t, b.ep.SendData([]byte("back"), nil, 9, toA, nil))
	if e := a.ok(t); string(e.Buf) != "back" || e.Data != 9 || e.Flags&fabric.CompRemoteCQData == 0 {
		t.Fatalf("reply %+v", e)
	}
}

func TestRDMTruncationAndClose(t *testing.T) {
	a, b := newRDM(t), newRDM(t)
	toB := a.peer(t, b)
	must(t, b.ep.Recv(make([]byte, 4), nil, fabric.AddrNotAvail, "small"))
	must(t, a.ep.Send([]byte("too long"), nil, toB, nil))
	if _, ee := b.next(t); ee == nil || ee.Err != fabric.ErrTrunc || ee.OLen != 4 {
		t.Fatalf("truncation: %+v", ee)
	}
	must(t, b.ep.Recv(make([]byte, 4), nil, fabric.AddrNotAvail, "pending"))
	b.ep.Close()
	if _, ee := b.next(t); ee == nil || ee.Err != fabric.ErrCanceled || ee.Context != "pending" {
		t.Fatalf("after close: %+v", ee)
	}
	if err := a.ep.Send(nil, nil, fabric.Addr(7), nil); err == nil {
		t.Fatal("sent to an address not in the AV")
	}
}

// RMA on RDM endpoints goes over the connection the first operation
// makes: write, write with CQ data, inject write and read, each completed
// (or counted) as on a MSG endpoint, and the target's remote counter
// counting them.
func TestRDMRMAWriteReadAndRemoteCounter(t *testing.T) {
	var remote, wrote *fabric.Counter
	b := newRDM(t, func(s *rdmSide) {
		remote, _ = s.dom.OpenCounter()
		must(t, s.ep.BindCounter(remote, fabric.BindRemoteWrite|fabric.BindRemoteRead))
	})
	a := newRDM(t, func(s *rdmSide) {
		wrote, _ = s.dom.OpenCounter()
		must(t, s.ep.BindCounter(wrote, fabric.BindWrite))
	})
	toB := a.peer(t, b)
	region := make([]byte, 256)
	mr, err := b.dom.RegMR(region, fabric.AccessRemoteRead|fabric.AccessRemoteWrite, 7)
	must(t, err)

	must(t, a.ep.Write([]byte("written"), nil, toB, 10, mr.Key(), "w"))
	if e := a.ok(t); e.Context != "w" || e.Flags&fabric.CompWrite == 0 {
		t.Fatalf("write completion %+v", e)
	}
	must(t, a.ep.WriteData([]byte("data"), nil, 0xabc, toB, 20, mr.Key(), "wd"))
	if e := a.ok(t); e.Context != "wd" {
		t.Fatalf("writedata completion %+v", e)
	}
	if e := b.ok(t); e.Flags&fabric.CompRemoteCQData == 0 || e.Data != 0xabc {
		t.Fatalf("target's completion %+v, want remote CQ data 0xabc", e)
	}
	must(t, a.ep.InjectWrite([]byte("inj"), toB, 30, mr.Key()))
	if err := a.ep.InjectWrite(make([]byte, 65), toB, 30, mr.Key()); !errors.Is(err, fabric.ErrMsgSize) {
		t.Fatalf("65-byte inject write: %v, want ErrMsgSize", err)
	}
	got := make([]byte, 23)
	must(t, a.ep.Read(got, nil, toB, 10, mr.Key(), "r"))
	if e := a.ok(t); e.Context != "r" || e.Flags&fabric.CompRead == 0 {
		t.Fatalf("read completion %+v", e)
	}
	if want := "written\x00\x00\x00data\x00\x00\x00\x00\x00\x00inj"; string(got) != want {
		t.Fatalf("read %q, want %q", got, want)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	must(t, wrote.Wait(ctx, 3))
	// Two writes, an inject write and a read reached b.
	for remote.Read() < 4 && ctx.Err() == nil {
		b.cq.Read(nil)
		time.Sleep(time.Millisecond)
	}
	if n := remote.Read(); n != 4 {
		t.Fatalf("remote counter %d, want 4", n)
	}
	if _, err := a.ep.GetOpt(fabric.OptMinMultiRecv); !errors.Is(err, fabric.ErrNoProtoOpt) {
		t.Fatalf("GetOpt(FI_OPT_MIN_MULTI_RECV): %v, want ErrNoProtoOpt", err)
	}
}

// A rendezvous send lets the peer read the sender's memory; that is the
// provider's doing, not the program's, so the sender's FI_REMOTE_READ
// counter stays at zero.
func TestRDMRendezvousIsNotARemoteRead(t *testing.T) {
	var remote *fabric.Counter
	a := newRDM(t, func(s *rdmSide) {
		remote, _ = s.dom.OpenCounter()
		must(t, s.ep.BindCounter(remote, fabric.BindRemoteRead))
	})
	b := newRDM(t)
	must(t, b.ep.Recv(make([]byte, 1<<20), nil, fabric.AddrNotAvail, "r"))
	must(t, a.ep.Send(make([]byte, 1<<20), nil, a.peer(t, b), "s"))
	b.ok(t)
	a.ok(t)
	if n := remote.Read(); n != 0 {
		t.Fatalf("FI_REMOTE_READ counter %d after a rendezvous send", n)
	}
}

// Both sides sending first at once: as in C's rxm, the lower address
// gives way (its request is refused with EALREADY) and what waited on it
// goes over the other connection; a send to oneself goes over a loopback
// connection.
func TestRDMSimultaneousFirstSendsAndSendsToSelf(t *testing.T) {
	for round := range 5 {
		a, b := newRDM(t), newRDM(t)
		toB, toA := a.peer(t, b), b.peer(t, a)
		must(t, a.ep.Recv(make([]byte, 100), nil, fabric.AddrNotAvail, "ra"))
		must(t, b.ep.Recv(make([]byte, 100), nil, fabric.AddrNotAvail, "rb"))
		errs := make(chan error, 2)
		go func() { errs <- a.ep.Send([]byte("to b"), nil, toB, "sa") }()
		go func() { errs <- b.ep.Send([]byte("to a"), nil, toA, "sb") }()
		must(t, <-errs)
		must(t, <-errs)
		got := map[any]bool{}
		for _, s := range []*rdmSide{a, a, b, b} {
			got[s.ok(t).Context] = true
		}
		if len(got) != 4 {
			t.Fatalf("round %d: completions %v", round, got)
		}
	}
	a := newRDM(t)
	me := a.peer(t, a)
	must(t, a.ep.Recv(make([]byte, 100), nil, fabric.AddrNotAvail, "r"))
	must(t, a.ep.Send([]byte("to me"), nil, me, "s"))
	got := map[any]bool{}
	for range 2 {
		got[a.ok(t).Context] = true
	}
	if !got["r"] || !got["s"] {
		t.Fatalf("send to self: completions %v", got)
	}
}
