package vrb_test

import (
	"bytes"
	"errors"
	"net/netip"
	"testing"

	"github.com/rdmago/rdmago/fabric"
	"github.com/rdmago/rdmago/fabric/fabrictest"
)

// dgramSide opens an FI_EP_DGRAM endpoint on the software device's
// loopback entry, with an AV, a CQ and a registered buffer.
func dgramSide(t *testing.T) (*side, *fabric.AV) {
	t.Helper()
	hints := fabric.AllocInfo()
	hints.FabricAttr.ProvName = "verbs"
	hints.EPAttr.Type = fabric.EPDgram
	hints.DomainAttr.Name = "rxe_lo-dgram"
	infos, err := fabric.GetInfo("", "", 0, hints)
	if err != nil {
		t.Fatalf("no verbs datagram entry for rxe_lo: %v", err)
	}
	info := infos[0]
	if info.AddrFormat != fabric.FormatIBUD || info.EPAttr.MsgPrefixSize != 40 || info.RxAttr.Mode&fabric.ModeMsgPrefix == 0 {
		t.Fatalf("entry: format %v, prefix %d, rx mode %#x", info.AddrFormat, info.EPAttr.MsgPrefixSize, info.RxAttr.Mode)
	}
	fab, err := fabric.OpenFabric(info)
	must(t, err)
	eq, err := fab.OpenEQ()
	must(t, err)
	s := &side{t: t, fab: fab, eq: eq}
	s.dom, err = fab.OpenDomain(info)
	must(t, err)
	av, err := s.dom.OpenAV(nil)
	must(t, err)
	s.cq, err = s.dom.OpenCQ(&fabric.CQAttr{Format: fabric.CQFormatData})
	must(t, err)
	s.ep, err = s.dom.OpenEndpoint(info, nil)
	must(t, err)
	if _, _, err := fabric.GetName(s.ep); !errors.Is(err, fabric.ErrOpBadState) {
		t.Fatalf("name before fi_enable: %v", err)
	}
	must(t, s.ep.BindAV(av))
	must(t, s.ep.BindCQ(s.cq, fabric.BindTransmit|fabric.BindRecv))
	must(t, s.ep.Enable())
	s.register(1<<14, fabric.AccessSend|fabric.AccessRecv)
	return s, av
}

// Datagram endpoints as C's verbs provider has them: named by a UD name
// (FI_ADDR_IB_UD) that the peer puts in its AV, sends of at most the MTU
// with the GRH in the first 40 bytes of the receive buffer
// (FI_MSG_PREFIX), CQ data in the immediate, inject, and clear refusals.
func TestDgramEndpointSendsByUDName(t *testing.T) {
	a, aav := dgramSide(t)
	b, bav := dgramSide(t)

	f, name, err := fabric.GetName(b.ep)
	must(t, err)
	n, err := fabric.ParseUDName(name)
	if err != nil || f != fabric.FormatIBUD || n.QPN == 0 || n.PKey != 0xffff {
		t.Fatalf("b's name: %v %x (%+v) %v", f, name, n, err)
	}
	if _, err := b.ep.Name(); !errors.Is(err, fabric.ErrAddrNotAvail) {
		t.Fatalf("Name of a datagram endpoint: %v", err)
	}
	toB, err := aav.InsertName(f, name)
	must(t, err)
	af, aname, err := fabric.GetName(a.ep)
	must(t, err)
	toA, err := bav.InsertName(af, aname)
	must(t, err)

	// A send: the receiver's buffer holds the GRH, then the message.
	must(t, b.ep.Recv(b.buf[:40+100], b.mr.Desc(), fabric.AddrNotAvail, "r1"))
	copy(a.buf, "datagram")
	must(t, a.ep.Send(a.buf[:8], a.mr.Desc(), toB, "s1"))
	if e := fabrictest.Completion(a.t, a.cq); e.Context != "s1" || e.Flags&fabric.CompSend == 0 {
		t.Fatalf("send completion %+v", e)
	}
	e := fabrictest.Completion(b.t, b.cq)
	if e.Context != "r1" || e.Len != 48 || !bytes.Equal(e.Buf[40:], []byte("datagram")) {
		t.Fatalf("receive completion %+v", e)
	}

	// fi_senddata's data arrives in the completion; fi_inject and a
	// reply the other way.
	must(t, b.ep.Recv(b.buf[:40+100], b.mr.Desc(), fabric.AddrNotAvail, "r2"))
	must(t, a.ep.SendData(a.buf[:8], a.mr.Desc(), 0xfeedf00d, toB, "s2"))
	fabrictest.Completion(a.t, a.cq)
	if e := fabrictest.Completion(b.t, b.cq); e.Flags&fabric.CompRemoteCQData == 0 || e.Data != 0xfeedf00d {
		t.Fatalf("senddata at the receiver %+v", e)
	}
	must(t, a.ep.Recv(a.buf[1000:1200], a.mr.Desc(), fabric.AddrNotAvail, "ra"))
	must(t, b.ep.Inject([]byte("reply"), toA))
	if e := fabrictest.Completion(a.t, a.cq); string(e.Buf[40:]) != "reply" {
		t.Fatalf("inject arrived as %q", e.Buf)
	}

	// Refusals.
	mtu := 4096 // rxe_lo's
	cases := []struct {
		name string
		err  error
		want fabric.Errno
	}{
		{"over the MTU", a.ep.Send(a.buf[:mtu+1], a.mr.Desc(), toB, nil), fabric.ErrMsgSize},
		{"unknown handle", a.ep.Send(a.buf[:8], a.mr.Desc(), toB+7, nil), fabric.ErrNoEntry},
		{"RMA write", a.ep.Write(a.buf[:8], a.mr.Desc(), toB, 0, 0, nil), fabric.ErrNotSupported},
		{"connect", a.ep.Connect(netip.MustParseAddrPort("127.0.0.1:7"), nil), fabric.ErrNotSupported},
	}
	for _, c := range cases {
		if !errors.Is(c.err, c.want) {
			t.Errorf("%s: %v, want %v", c.name, c.err, c.want)
		}
	}
	sock, err := aav.Insert(netip.MustParseAddrPort("127.0.0.1:7"))
	must(t, err)
	if err := a.ep.Send(a.buf[:8], a.mr.Desc(), sock[0], nil); !errors.Is(err, fabric.ErrInvalid) {
		t.Errorf("send to a socket address: %v", err)
	}

	// Close completes the receive still posted with ErrCanceled.
	must(t, b.ep.Recv(b.buf[:100], b.mr.Desc(), fabric.AddrNotAvail, "left"))
	must(t, b.ep.Close())
	var buf [1]fabric.CQEntry
	if _, err := b.cq.Read(buf[:]); !errors.Is(err, fabric.ErrAvail) {
		t.Fatalf("after close: %v, want an error entry", err)
	}
	if ee, _ := b.cq.ReadErr(); ee.Context != "left" || ee.Err != fabric.ErrCanceled {
		t.Fatalf("error entry %+v", ee)
	}
}
