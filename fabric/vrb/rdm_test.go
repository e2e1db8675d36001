package vrb_test

import (
	"bytes"
	"errors"
	"testing"
	"time"

	"github.com/rdmago/rdmago/fabric"
	"github.com/rdmago/rdmago/fabric/fabrictest"
)

// rdmSide is an FI_EP_RDM endpoint (verbs;ofi_rxm) on the software
// device's loopback, with its CQ, AV and a registered buffer.
type rdmSide struct {
	t   *testing.T
	dom *fabric.Domain
	ep  *fabric.Endpoint
	cq  *fabric.CQ
	av  *fabric.AV
	buf []byte
	mr  *fabric.MR
}

func newRDMSide(t *testing.T) *rdmSide {
	t.Helper()
	r := fabrictest.OpenRDM(t, "verbs", "verbs;ofi_rxm")
	if r.Info.EPAttr.Protocol != fabric.ProtoRXM {
		t.Fatalf("RDM entry of protocol %v", r.Info.EPAttr.Protocol)
	}
	s := &rdmSide{t: t, dom: r.Dom, ep: r.EP, cq: r.CQ, av: r.AV}
	must(t, s.ep.Enable())
	var err error
	s.buf = make([]byte, 2<<20)
	s.mr, err = s.dom.RegMR(s.buf, fabric.AccessSend|fabric.AccessRecv|fabric.AccessRemoteRead|fabric.AccessRemoteWrite, 0)
	must(t, err)
	t.Cleanup(func() {
		s.ep.Close()
		s.mr.Close()
		if err := s.dom.Close(); err != nil {
			t.Errorf("domain close: %v", err)
		}
	})
	return s
}

// peer puts o's name in s's AV.
func (s *rdmSide) peer(o *rdmSide) fabric.Addr { return fabrictest.Peer(s.t, s.av, o.ep) }

// next waits for a completion or an error entry.
func (s *rdmSide) next() (fabric.CQEntry, *fabric.CQErrEntry) {
	s.t.Helper()
	return fabrictest.Next(s.t, s.cq)
}

func (s *rdmSide) comp() fabric.CQEntry {
	s.t.Helper()
	return fabrictest.Completion(s.t, s.cq)
}

func pattern(n, seed int) []byte {
	b := make([]byte, n)
	for i := range b {
		b[i] = byte(i*7 + seed)
	}
	return b
}

// Messages of each of rxm's protocols arrive whole: eager (up to 16
// KiB), SAR segments (up to 128 KiB) and the rendezvous, where the
// receiver reads the sender's memory; tagged ones match by tag, with the
// ignore mask; CQ data comes with the message; a message that came before
// its receive waits for it.
func TestRDMEndpointCarriesEveryProtocol(t *testing.T) {
	a, b := newRDMSide(t), newRDMSide(t)
	toB, toA := a.peer(b), b.peer(a)

	for _, n := range []int{0, 1, 16384, 16385, 65536, 131072, 131073, 1 << 20} {
		want := pattern(n, n)
		must(t, b.ep.Recv(b.buf[:n+10], b.mr.Desc(), fabric.AddrNotAvail, n))
		copy(a.buf, want)
		must(t, a.ep.Send(a.buf[:n], a.mr.Desc(), toB, "s"))
		if e := a.comp(); e.Context != "s" || e.Len != uint64(n) {
			t.Fatalf("%d bytes: send completion %+v", n, e)
		}
		e := b.comp()
		if e.Context != n || e.Len != uint64(n) || !bytes.Equal(b.buf[:n], want) {
			t.Fatalf("%d bytes: receive %+v, data equal %v", n, e, bytes.Equal(b.buf[:n], want))
		}
	}

	// Tagged, out of order, and unexpected (sent before the receive).
	copy(b.buf, "tag seven")
	must(t, b.ep.TSend(b.buf[:9], b.mr.Desc(), toA, 7, nil))
	b.comp()
	must(t, a.ep.TRecv(a.buf[100:200], a.mr.Desc(), fabric.AddrNotAvail, 0x0f, 0x08, "t")) // 7 matches 15 with bit 3 ignored
	e := a.comp()
	if e.Context != "t" || e.Tag != 7 || string(a.buf[100:109]) != "tag seven" || e.Flags&fabric.CompTagged == 0 {
		t.Fatalf("tagged receive %+v %q", e, a.buf[100:109])
	}

	// fi_senddata and fi_inject.
	must(t, b.ep.Recv(b.buf[:64], b.mr.Desc(), fabric.AddrNotAvail, nil))
	must(t, a.ep.SendData(a.buf[:8], a.mr.Desc(), 0xfeed, toB, nil))
	a.comp()
	if e := b.comp(); e.Flags&fabric.CompRemoteCQData == 0 || e.Data != 0xfeed {
		t.Fatalf("senddata %+v", e)
	}
	must(t, b.ep.Recv(b.buf[:64], b.mr.Desc(), fabric.AddrNotAvail, nil))
	must(t, a.ep.Inject([]byte("injected"), toB))
	if e := b.comp(); string(e.Buf) != "injected" {
		t.Fatalf("inject arrived as %q", e.Buf)
	}
	if err := a.ep.Inject(make([]byte, 193), toB); !errors.Is(err, fabric.ErrMsgSize) {
		t.Fatalf("193-byte inject: %v", err)
	}

	// A message longer than its receive is truncated, of each protocol.
	for _, n := range []int{100, 40000, 200000} {
		must(t, b.ep.Recv(b.buf[:50], b.mr.Desc(), fabric.AddrNotAvail, "short"))
		must(t, a.ep.Send(a.buf[:n], a.mr.Desc(), toB, nil))
		_, ee := b.next()
		if ee == nil || ee.Err != fabric.ErrTrunc || ee.Context != "short" {
			t.Fatalf("%d bytes into 50: %+v", n, ee)
		}
		a.comp() // (a refused rendezvous is done too: the receiver says so)
	}
}

// RMA on an RDM endpoint goes over the connection to the peer: a write
// into, and a read from, the peer's registered region by address and
// key.
func TestRDMEndpointRMA(t *testing.T) {
	a, b := newRDMSide(t), newRDMSide(t)
	toB := a.peer(b)
	copy(a.buf, "written over rxm's connection")
	must(t, a.ep.Write(a.buf[:29], a.mr.Desc(), toB, b.mr.Addr()+4096, b.mr.Key(), "w"))
	if e := a.comp(); e.Context != "w" {
		t.Fatalf("write completion %+v", e)
	}
	if got := string(b.buf[4096 : 4096+29]); got != "written over rxm's connection" {
		t.Fatalf("peer memory %q", got)
	}
	must(t, a.ep.Read(a.buf[1000:1029], a.mr.Desc(), toB, b.mr.Addr()+4096, b.mr.Key(), "r"))
	a.comp()
	if got := string(a.buf[1000:1029]); got != "written over rxm's connection" {
		t.Fatalf("read %q", got)
	}
}

// Close completes the receives still posted with ErrCanceled, and an
// operation after it fails.
func TestRDMEndpointCloseCancelsReceives(t *testing.T) {
	a := newRDMSide(t)
	must(t, a.ep.Recv(a.buf[:10], a.mr.Desc(), fabric.AddrNotAvail, "left"))
	must(t, a.ep.Close())
	_, ee := a.next()
	if ee == nil || ee.Err != fabric.ErrCanceled || ee.Context != "left" {
		t.Fatalf("after close: %+v", ee)
	}
	if err := a.ep.Recv(a.buf[:10], a.mr.Desc(), fabric.AddrNotAvail, nil); err == nil {
		t.Fatal("receive posted on a closed endpoint")
	}
}

// Both sides sending first at once: as in C's rxm, the request from the
// higher address goes on and the lower one's gives way (refused with
// EALREADY), and the sends waiting on it go over the other; every send
// and receive completes.
func TestRDMSimultaneousFirstSends(t *testing.T) {
	for round := range 5 {
		a, b := newRDMSide(t), newRDMSide(t)
		toB, toA := a.peer(b), b.peer(a)
		must(t, a.ep.Recv(a.buf[1000:2000], a.mr.Desc(), fabric.AddrNotAvail, "ra"))
		must(t, b.ep.Recv(b.buf[1000:2000], b.mr.Desc(), fabric.AddrNotAvail, "rb"))
		errs := make(chan error, 2)
		go func() { errs <- a.ep.Send(a.buf[:10], a.mr.Desc(), toB, "sa") }()
		go func() { errs <- b.ep.Send(b.buf[:10], b.mr.Desc(), toA, "sb") }()
		must(t, <-errs)
		must(t, <-errs)
		got := map[any]bool{}
		for _, s := range []*rdmSide{a, a, b, b} {
			e, ee := s.next()
			if ee != nil {
				t.Fatalf("round %d: error completion %v for %v", round, ee.Err, ee.Context)
			}
			got[e.Context] = true
		}
		if len(got) != 4 {
			t.Fatalf("round %d: completions %v", round, got)
		}
	}
}

// A message to oneself goes over a loopback connection (C's rxm makes
// one), of each protocol.
func TestRDMSendToSelf(t *testing.T) {
	a := newRDMSide(t)
	me := a.peer(a)
	for _, n := range []int{10, 40000, 300000} {
		must(t, a.ep.Recv(a.buf[1<<20:1<<20+n], a.mr.Desc(), fabric.AddrNotAvail, "r"))
		must(t, a.ep.Send(a.buf[:n], a.mr.Desc(), me, "s"))
		got := map[any]bool{}
		for range 2 {
			e, ee := a.next()
			if ee != nil {
				t.Fatalf("%d bytes to self: error completion %v for %v", n, ee.Err, ee.Context)
			}
			got[e.Context] = true
		}
		if !got["r"] || !got["s"] {
			t.Fatalf("%d bytes to self: completions %v", n, got)
		}
	}
}

// A peer's fi_writedata delivers its data to the target's receive CQ.
func TestRDMWriteDataReachesThePeersCQ(t *testing.T) {
	a, b := newRDMSide(t), newRDMSide(t)
	toB := a.peer(b)
	must(t, a.ep.WriteData(a.buf[:8], a.mr.Desc(), 0xbeef, toB, b.mr.Addr(), b.mr.Key(), "w"))
	a.comp()
	if e := b.comp(); e.Data != 0xbeef || e.Flags&fabric.CompRemoteCQData == 0 {
		t.Fatalf("target's completion %+v", e)
	}
}

// A rendezvous send whose peer goes away before reading fails, rather
// than waiting for ever with its memory registered.
func TestRDMRendezvousFailsWhenThePeerGoes(t *testing.T) {
	a, b := newRDMSide(t), newRDMSide(t)
	toB := a.peer(b)
	must(t, b.ep.Recv(b.buf[:10], b.mr.Desc(), fabric.AddrNotAvail, nil))
	must(t, a.ep.Send(a.buf[:1], a.mr.Desc(), toB, "first"))
	a.comp()
	b.comp()
	must(t, a.ep.Send(a.buf[:1<<20], a.mr.Desc(), toB, "big")) // no receive at b: it waits
	time.Sleep(100 * time.Millisecond)
	b.ep.Close()
	_, ee := a.next()
	if ee == nil || ee.Context != "big" {
		t.Fatalf("rendezvous to a closed peer: %+v", ee)
	}
}

// The API's calls on RDM endpoints, as every provider runs them.
func TestFabricAPIConnectionless(t *testing.T) {
	fabrictest.RunConnectionless(t, fabrictest.Connectionless{Name: "verbs", Entry: "verbs;ofi_rxm", Type: fabric.EPRDM, Tagged: true})
}
