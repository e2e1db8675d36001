// Package fabrictest has what the providers' tests share: waiting for an
// event or a completion, and an RDM endpoint on loopback.
package fabrictest

import (
	"context"
	"errors"
	"net/netip"
	"testing"
	"time"

	"github.com/rdmago/rdmago/fabric"
)

// Event waits up to d for eq's next event, which must be want (fi_eq_sread).
func Event(t testing.TB, eq *fabric.EQ, want fabric.EventType, d time.Duration) fabric.EQEntry {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), d)
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

// Next waits up to d for cq's next completion or error entry
// (fi_cq_sread, fi_cq_readerr).
func Next(t testing.TB, cq *fabric.CQ, d time.Duration) (fabric.CQEntry, *fabric.CQErrEntry) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), d)
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

// Comp waits up to d for cq's next completion, which must not be an
// error.
func Comp(t testing.TB, cq *fabric.CQ, d time.Duration) fabric.CQEntry {
	t.Helper()
	e, ee := Next(t, cq, d)
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
	EP   fabric.Endpoint
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
	if err != nil {
		t.Fatal(err)
	}
	info := infos[0]
	if info.FabricAttr.ProvName != entry {
		t.Fatalf("RDM entry of provider %q, want %q", info.FabricAttr.ProvName, entry)
	}
	fab, err := fabric.OpenFabric(info)
	if err != nil {
		t.Fatal(err)
	}
	s := &RDM{Info: info}
	if s.Dom, err = fab.OpenDomain(info); err != nil {
		t.Fatal(err)
	}
	s.CQ, _ = s.Dom.OpenCQ(nil)
	s.AV, _ = s.Dom.OpenAV(nil)
	if s.EP, err = s.Dom.OpenEndpoint(info, nil); err != nil {
		t.Fatal(err)
	}
	if err := s.EP.BindAV(s.AV); err != nil {
		t.Fatal(err)
	}
	if err := s.EP.BindCQ(s.CQ, fabric.BindTransmit|fabric.BindRecv); err != nil {
		t.Fatal(err)
	}
	return s
}

// Peer puts the name of the enabled endpoint o in av, and returns its
// handle.
func Peer(t testing.TB, av *fabric.AV, o fabric.Endpoint) fabric.Addr {
	t.Helper()
	name, err := o.Name()
	if err != nil {
		t.Fatal(err)
	}
	h, err := av.Insert(name)
	if err != nil {
		t.Fatal(err)
	}
	return h[0]
}

// Listener is a passive endpoint with its fabric and an EQ of its own.
type Listener struct {
	Fab  *fabric.Fabric
	PEP  fabric.PassiveEndpoint
	EQ   *fabric.EQ
	Name netip.AddrPort // the address it listens on
}

// Listen opens a passive endpoint for info, bound and listening
// (fi_passive_ep, fi_pep_bind, fi_listen), closed when the test ends.
func Listen(t testing.TB, info *fabric.Info) *Listener {
	t.Helper()
	l := &Listener{}
	var err error
	if l.Fab, err = fabric.OpenFabric(info); err != nil {
		t.Fatal(err)
	}
	if l.EQ, err = l.Fab.OpenEQ(); err != nil {
		t.Fatal(err)
	}
	if l.PEP, err = l.Fab.OpenPassiveEndpoint(info, nil); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.PEP.Close() })
	if err := l.PEP.Bind(l.EQ); err != nil {
		t.Fatal(err)
	}
	if err := l.PEP.Listen(); err != nil {
		t.Fatal(err)
	}
	if l.Name, err = l.PEP.Name(); err != nil {
		t.Fatal(err)
	}
	return l
}
