package tcp

import (
	"context"
	"errors"
	"net/netip"
	"testing"
	"time"

	"github.com/rdmago/rdmago/fabric"
	"github.com/rdmago/rdmago/fabric/internal/unwrap"
)

// Closing an endpoint whose receive is half in (its frame under way)
// completes that receive with ErrCanceled.
func TestCloseMidFrameCancelsTheReceive(t *testing.T) {
	hints := fabric.AllocInfo()
	hints.FabricAttr.ProvName = "tcp"
	hints.EPAttr.Type = fabric.EPMsg
	infos, err := fabric.GetInfo("127.0.0.1", "0", fabric.FlagSource, hints)
	if err != nil {
		t.Fatal(err)
	}
	info := infos[len(infos)-1]
	fab, _ := fabric.OpenFabric(info)
	eq, _ := fab.OpenEQ()
	pep, err := fab.OpenPassiveEndpoint(info, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer pep.Close()
	pep.Bind(eq)
	if err := pep.Listen(); err != nil {
		t.Fatal(err)
	}
	name, _ := pep.Name()
	// (A bound for a loaded machine running the race detector, not a
	// speed: the transfer is 64 MiB.)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	open := func(info *fabric.Info) (*fabric.Endpoint, *fabric.CQ, *fabric.EQ) {
		dom, _ := fab.OpenDomain(info)
		cq, _ := dom.OpenCQ(nil)
		q, _ := fab.OpenEQ()
		ep, err := dom.OpenEndpoint(info, nil)
		if err != nil {
			t.Fatal(err)
		}
		ep.BindEQ(q)
		ep.BindCQ(cq, fabric.BindTransmit|fabric.BindRecv)
		ep.Enable()
		t.Cleanup(func() { ep.Close() })
		return ep, cq, q
	}
	cinfo := info.Dup()
	cinfo.SrcAddr, cinfo.DestAddr = netipZero(), name
	cli, ccq, ceq := open(cinfo)
	if err := cli.Connect(name, nil); err != nil {
		t.Fatal(err)
	}
	req, err := eq.SRead(ctx)
	if err != nil {
		t.Fatal(err)
	}
	srv, scq, seq := open(req.Info)
	if err := srv.Accept(nil); err != nil {
		t.Fatal(err)
	}
	if _, err := seq.SRead(ctx); err != nil {
		t.Fatalf("server's FI_CONNECTED: %v", err)
	}
	if _, err := ceq.SRead(ctx); err != nil {
		t.Fatalf("client's FI_CONNECTED: %v", err)
	}
	const n = 64 << 20
	srv.Recv(make([]byte, n), nil, fabric.AddrNotAvail, "big")
	cli.Send(make([]byte, n), nil, fabric.AddrNotAvail, nil)
	e := unwrap.Endpoint(srv).(*ep)
	for started := false; !started; {
		ccq.Read(nil)
		var got [1]fabric.CQEntry
		if n, _ := scq.Read(got[:]); n > 0 && got[0].Context == "big" {
			// The polls missed the frame in flight: on a loaded machine
			// the whole 64 MiB can land between two of them.
			t.Skip("the receive completed before a poll saw it in progress")
		}
		e.mu.Lock()
		started = e.cur != nil
		e.mu.Unlock()
		if ctx.Err() != nil {
			t.Fatal("the receive never started")
		}
	}
	srv.Close()
	var c [1]fabric.CQEntry
	if _, err := scq.Read(c[:]); !errors.Is(err, fabric.ErrAvail) {
		t.Fatalf("after Close: %v, want the receive's error entry", err)
	}
	if ee, _ := scq.ReadErr(); ee.Context != "big" || ee.Err != fabric.ErrCanceled {
		t.Fatalf("error entry %+v, want the receive canceled", ee)
	}
}

func netipZero() (z netip.AddrPort) { return }
