package rdmacm

import (
	"net/netip"
	"sync"
	"time"

	"github.com/rdmago/rdmago/verbs"
)

// A Backend is a connection manager, which an ID hands itself to once its
// device is known, and which then carries out each of its calls: the
// kernel's rdma_cm through librdmacm for rdma-core devices (package
// rdmacore registers it). A device no registered Backend serves (the
// software device) gets this package's own IB CM, itself a Backend,
// speaking the IB CM over the device's QP1. Programs see no difference:
// the same ID, events and calls.
//
// The ID layer never holds a lock of its own while it calls a
// BackendID's operations (BindAddr through Destroy), and a backend must
// not hold one of its own while it calls a handler, which takes the ID
// layer's lock; the getters (Device, LocalAddr, PeerAddr, Route,
// InitQPAttr, SetHandler and the Set options) may be called with the ID
// layer's lock held, so they must not wait for a handler.
//
// Backends are for providers; programs do not use these interfaces.
type Backend interface {
	// Serves reports whether the backend is the connection manager of
	// dev.
	Serves(dev *verbs.Device) bool
	// CreateID creates an ID in port space ps (rdma_create_id); handle
	// receives its events, one at a time, from a goroutine of the
	// backend.
	CreateID(ps PortSpace, handle func(BackendEvent)) (BackendID, error)
}

// BackendEvent is an event of a backend ID.
type BackendEvent struct {
	Type   EventType
	Status int
	Param  ConnParam
	UD     UDParam
	// Group is, for MULTICAST_JOIN and MULTICAST_ERROR, the group.
	Group netip.Addr
	// Child is, for CONNECT_REQUEST, the backend ID of the new
	// connection; the handler must call its SetHandler before returning.
	Child BackendID
}

// BackendID is a backend's ID. Its calls are librdmacm's; the outcome of
// the asynchronous ones comes as an event.
type BackendID interface {
	SetHandler(handle func(BackendEvent))
	BindAddr(addr netip.AddrPort) error
	ResolveAddr(src, dst netip.AddrPort, timeout time.Duration) error
	ResolveRoute(timeout time.Duration) error
	Listen(backlog int) error
	Connect(p *ConnParam) error
	Accept(p *ConnParam) error
	Reject(privateData []byte) error
	Establish() error
	Disconnect() error
	// AttachQP makes qp, made on the ID's device, the ID's QP (what
	// rdma_create_qp does after ibv_create_qp) and moves it to INIT; the
	// backend moves it on with the connection. DetachQP undoes it before
	// the QP is destroyed.
	AttachQP(qp *verbs.QP) error
	DetachQP()
	InitQPAttr(s verbs.QPState) (verbs.QPAttr, verbs.QPAttrMask, error)
	SetTOS(tos uint8) error
	SetReuseAddr(on bool) error
	SetACKTimeout(code uint8) error
	// JoinMulticast joins group addr (rdma_join_multicast_ex); the
	// outcome is a MULTICAST_JOIN or MULTICAST_ERROR event whose Group is
	// addr. The backend attaches the ID's QP to the group, as librdmacm
	// does. LeaveMulticast leaves it (rdma_leave_multicast).
	JoinMulticast(addr netip.Addr, flags MulticastJoinFlags) error
	LeaveMulticast(addr netip.Addr) error
	// Device is the device the ID is bound to, or nil.
	Device() *verbs.Device
	LocalAddr() netip.AddrPort
	PeerAddr() netip.AddrPort
	Route() Route
	Destroy() error
}

var backends struct {
	mu   sync.Mutex
	list []Backend
}

// RegisterBackend makes b the connection manager of the devices it
// serves. Providers call it from an init function.
func RegisterBackend(b Backend) {
	backends.mu.Lock()
	defer backends.mu.Unlock()
	backends.list = append(backends.list, b)
}

// backendFor returns the backend that serves dev: a registered one, or
// the built-in IB CM.
func backendFor(dev *verbs.Device) Backend {
	if dev == nil {
		return builtin
	}
	backends.mu.Lock()
	defer backends.mu.Unlock()
	for _, b := range backends.list {
		if b.Serves(dev) {
			return b
		}
	}
	return builtin
}

// registeredBackends reports whether any backend is registered: if none
// is, every ID is the built-in IB CM's, and no device need be looked up
// to say so.
func registeredBackends() bool {
	backends.mu.Lock()
	defer backends.mu.Unlock()
	return len(backends.list) > 0
}

// wildcardBackend returns the backend a wildcard bind of the family of ip
// goes to: one registered backend that serves every device of that
// family, or else the built-in IB CM, which listens on each device itself.
func wildcardBackend(ip netip.Addr) Backend {
	if !registeredBackends() {
		return builtin
	}
	var b Backend
	for _, d := range candidates() {
		if !hasFamily(d, ip) {
			continue
		}
		db := backendFor(d)
		if db == builtin || b != nil && db != b {
			return builtin
		}
		b = db
	}
	if b == nil {
		return builtin
	}
	return b
}

// routeBackend returns the backend serving the device the host's route to
// dst leaves from; the built-in IB CM if there is none.
func routeBackend(dst netip.Addr) Backend {
	if !registeredBackends() {
		return builtin
	}
	src, err := routeSource(dst)
	if err != nil {
		return builtin
	}
	return backendFor(deviceFor(src))
}

// kdevice is a device context the IDs on a device share, as librdmacm's
// IDs share id->verbs: what their QPs are made on.
type kdevice struct {
	dev   *verbs.Device
	ctx   *verbs.Context
	pd    *verbs.PD
	refs  int
	close func()
}

var kdevices = map[*verbs.Device]*kdevice{} // guarded by idMu

// contextSharer is a backend with a context of its own on each device it
// serves, which the IDs there share rather than open another: the
// built-in IB CM's agent's. release lets go of it. Called with idMu held.
type contextSharer interface {
	sharedContext(dev *verbs.Device) (ctx *verbs.Context, pd *verbs.PD, release func(), err error)
}

// kdeviceFor opens, or shares, the context of dev. Called with idMu held.
func kdeviceFor(dev *verbs.Device) (*kdevice, error) {
	if k := kdevices[dev]; k != nil {
		k.refs++
		return k, nil
	}
	k := &kdevice{dev: dev, refs: 1}
	if s, ok := backendFor(dev).(contextSharer); ok {
		ctx, pd, release, err := s.sharedContext(dev)
		if err != nil {
			return nil, err
		}
		k.ctx, k.pd, k.close = ctx, pd, release
	} else {
		ctx, err := dev.Open()
		if err != nil {
			return nil, err
		}
		pd, err := ctx.AllocPD()
		if err != nil {
			ctx.Close()
			return nil, err
		}
		k.ctx, k.pd = ctx, pd
		k.close = func() {
			pd.Dealloc()
			ctx.Close()
		}
	}
	kdevices[dev] = k
	return k, nil
}

// release drops a reference. Called with idMu held.
func (k *kdevice) release() {
	if k.refs--; k.refs == 0 {
		delete(kdevices, k.dev)
		k.close()
	}
}

// newBackendID makes the ID's backend ID on b, with the options set so
// far. Called without idMu.
func (id *ID) newBackendID(b Backend) (BackendID, error) {
	k, err := b.CreateID(id.ps, id.backendEvent)
	if err != nil {
		return nil, err
	}
	idMu.Lock()
	o := id.opts
	idMu.Unlock()
	if o.tos != 0 {
		k.SetTOS(o.tos)
	}
	if o.reuseAddr {
		k.SetReuseAddr(true)
	}
	if o.ackTimeout != 0 {
		k.SetACKTimeout(o.ackTimeout)
	}
	if s, ok := k.(cmTimeoutSetter); ok && o.cmSet {
		s.SetCMTimeouts(o.cmTimeout, o.cmRetries)
	}
	return k, nil
}

// bindDevice attaches the ID to the shared context of its backend ID's
// device, once it has one. Called with idMu held.
func (id *ID) bindDevice() {
	if id.kdev != nil || id.b == nil {
		return
	}
	if dev := id.b.Device(); dev != nil {
		if kd, err := kdeviceFor(dev); err == nil {
			id.kdev = kd
		}
	}
}

// releaseDevice lets go of the ID's device context.
func (id *ID) releaseDevice() {
	idMu.Lock()
	defer idMu.Unlock()
	if id.kdev != nil {
		id.kdev.release()
		id.kdev = nil
	}
}

// backendEvent turns a backend event into the ID's event.
func (id *ID) backendEvent(be BackendEvent) {
	idMu.Lock()
	k := id.b
	if id.state == stateDestroying || k == nil {
		idMu.Unlock()
		if be.Child != nil {
			// A request to a listener being destroyed.
			be.Child.SetHandler(func(BackendEvent) {})
			be.Child.Reject(nil)
			be.Child.Destroy()
		}
		return
	}
	defer idMu.Unlock()
	ud := be.UD
	switch be.Type {
	case EventAddrResolved:
		id.state = stateAddrResolved
		id.local, id.peer = k.LocalAddr(), k.PeerAddr()
		id.bindDevice()
	case EventRouteResolved:
		id.state = stateRouteResolved
		id.route = k.Route()
	case EventConnectRequest:
		child := &ID{ps: id.ps, ch: id.ch, sync: id.sync, context: id.context, state: stateConnect,
			qpType: id.qpType, opts: id.opts, b: be.Child}
		if id.sync {
			// As librdmacm: a synchronous listener's requests are
			// synchronous IDs, each with a channel of its own.
			child.ch = newChannel()
		}
		if be.UD.AHAttr.IsGlobal {
			child.qpType = verbs.QPTUD // a SIDR request
		}
		be.Child.SetHandler(child.backendEvent)
		child.local, child.peer, child.route = be.Child.LocalAddr(), be.Child.PeerAddr(), be.Child.Route()
		child.bindDevice()
		child.ch.ids++
		id.ch.push(&Event{Type: EventConnectRequest, ID: child, ListenID: id, Param: be.Param, UD: be.UD})
		return
	case EventConnectResponse:
		id.route = k.Route()
	case EventEstablished:
		id.state = stateConnect
		id.peer, id.route = k.PeerAddr(), k.Route()
	case EventDisconnected:
		id.state = stateDisconnect
	case EventMulticastJoin, EventMulticastError:
		ud.Context = id.groupContext(be.Group)
	}
	// Made here, not before the switch: a request's event is another.
	id.event(&Event{Type: be.Type, Status: be.Status, Param: be.Param, UD: ud})
}

// kwait waits, on a synchronous ID, for the outcome of a backend call
// that err says was made.
func (id *ID) kwait(op string, err error, want EventType) error {
	if err != nil {
		return err
	}
	return id.wait(op, want)
}
