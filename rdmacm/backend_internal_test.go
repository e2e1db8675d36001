package rdmacm

import (
	"context"
	"net/netip"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/rdmago/rdmago/verbs"
)

// recBackend is a registered Backend for a set of devices that passes
// every call on to the built-in IB CM and writes down its name: what an
// ID does through the seam, and nothing else, reaches it.
type recBackend struct {
	devs map[*verbs.Device]bool
	mu   sync.Mutex
	log  []string
}

func (r *recBackend) note(op string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.log = append(r.log, op)
}

func (r *recBackend) calls() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return slices.Clone(r.log)
}

func (r *recBackend) Serves(d *verbs.Device) bool { return r.devs[d] }

func (r *recBackend) CreateID(ps PortSpace, handle func(BackendEvent)) (BackendID, error) {
	r.note("CreateID")
	id := &recID{r: r}
	inner, err := builtin.CreateID(ps, id.wrap(handle))
	if err != nil {
		return nil, err
	}
	id.BackendID = inner
	return id, nil
}

// recID is a recBackend's ID: the built-in's, with its calls noted and
// the new IDs of its requests wrapped in turn.
type recID struct {
	BackendID
	r *recBackend
}

func (k *recID) wrap(handle func(BackendEvent)) func(BackendEvent) {
	return func(be BackendEvent) {
		if be.Child != nil {
			be.Child = &recID{BackendID: be.Child, r: k.r}
		}
		k.r.note("event " + be.Type.String())
		handle(be)
	}
}

func (k *recID) SetHandler(h func(BackendEvent)) { k.BackendID.SetHandler(k.wrap(h)) }
func (k *recID) BindAddr(a netip.AddrPort) error {
	k.r.note("BindAddr")
	return k.BackendID.BindAddr(a)
}
func (k *recID) ResolveAddr(src, dst netip.AddrPort, d time.Duration) error {
	k.r.note("ResolveAddr")
	return k.BackendID.ResolveAddr(src, dst, d)
}
func (k *recID) ResolveRoute(d time.Duration) error {
	k.r.note("ResolveRoute")
	return k.BackendID.ResolveRoute(d)
}
func (k *recID) Listen(n int) error                { k.r.note("Listen"); return k.BackendID.Listen(n) }
func (k *recID) Connect(p *ConnParam) error        { k.r.note("Connect"); return k.BackendID.Connect(p) }
func (k *recID) Accept(p *ConnParam) error         { k.r.note("Accept"); return k.BackendID.Accept(p) }
func (k *recID) Disconnect() error                 { k.r.note("Disconnect"); return k.BackendID.Disconnect() }
func (k *recID) AttachQP(qp *verbs.QP) error       { k.r.note("AttachQP"); return k.BackendID.AttachQP(qp) }
func (k *recID) DetachQP()                         { k.r.note("DetachQP"); k.BackendID.DetachQP() }
func (k *recID) Destroy() error                    { k.r.note("Destroy"); return k.BackendID.Destroy() }
func (k *recID) Reject(pdata []byte) error         { k.r.note("Reject"); return k.BackendID.Reject(pdata) }
func (k *recID) Establish() error                  { k.r.note("Establish"); return k.BackendID.Establish() }
func (k *recID) LeaveMulticast(a netip.Addr) error { return k.BackendID.LeaveMulticast(a) }

// TestAnIDCallsOnlyItsBackend: with a backend registered for the software
// devices of a test, a connection made and closed through the public API
// goes through that backend alone, call by call, and its IDs hold no
// built-in IB CM ID of their own: the built-in CM is a backend like any
// other, and the ID layer is the API alone.
func TestAnIDCallsOnlyItsBackend(t *testing.T) {
	n := newRegressNet(t, 40, nil)
	rec := &recBackend{devs: map[*verbs.Device]bool{n.cliDev: true, n.srvDev: true}}
	RegisterBackend(rec)
	defer func() { rec.devs = nil }() // serves nothing once the test ends

	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	l, err := Listen(netip.AddrPortFrom(n.srv, 7640).String(), nil)
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	accepted := make(chan *Conn, 1)
	go func() {
		c, err := l.Accept(ctx)
		if err != nil {
			t.Error(err)
		}
		accepted <- c
	}()
	c, err := Dial(ctx, netip.AddrPortFrom(n.srv, 7640).String(), &Options{LocalAddr: netip.AddrPortFrom(n.cli, 0)})
	if err != nil {
		t.Fatal(err)
	}
	s := <-accepted
	if s == nil {
		t.FailNow()
	}
	for _, id := range []*ID{l.ID(), c.ID, s.ID} {
		if _, ok := id.backend().(*recID); !ok {
			t.Errorf("ID at %v is served by %T, not the registered backend", id.LocalAddr(), id.backend())
		}
	}
	c.Close()
	s.Close()
	l.Close()

	got := rec.calls()
	for _, want := range []string{"CreateID", "BindAddr", "Listen", "ResolveAddr", "event RDMA_CM_EVENT_ADDR_RESOLVED",
		"ResolveRoute", "event RDMA_CM_EVENT_ROUTE_RESOLVED", "AttachQP", "Connect", "event RDMA_CM_EVENT_CONNECT_REQUEST", "Accept",
		"event RDMA_CM_EVENT_ESTABLISHED", "Disconnect", "DetachQP", "Destroy"} {
		if !slices.Contains(got, want) {
			t.Errorf("the backend never saw %s; it saw %v", want, got)
		}
	}
	if i, j := slices.Index(got, "Connect"), slices.Index(got, "event RDMA_CM_EVENT_CONNECT_REQUEST"); i < 0 || j < i {
		t.Errorf("CONNECT_REQUEST (at %d) came before Connect (at %d): %v", j, i, got)
	}
}
