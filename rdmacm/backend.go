package rdmacm

import (
	"net/netip"
	"sync"
	"time"

	"github.com/rdmago/rdmago/verbs"
)

// A Backend is a connection manager this package hands an ID to when the
// ID's device is served by it: the kernel's rdma_cm through librdmacm for
// rdma-core devices (package rdmacore registers it). The software devices
// have none; for them this package is the connection manager itself,
// speaking the IB CM over their QP1. Programs see no difference: the same
// ID, events and calls.
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

// backendFor returns the backend that serves dev, or nil.
func backendFor(dev *verbs.Device) Backend {
	if dev == nil {
		return nil
	}
	backends.mu.Lock()
	defer backends.mu.Unlock()
	for _, b := range backends.list {
		if b.Serves(dev) {
			return b
		}
	}
	return nil
}

// wildcardBackend returns the backend a wildcard bind of the family of ip
// goes to: one that serves every device of that family, or nil if any of
// them is this package's to serve.
func wildcardBackend(ip netip.Addr) Backend {
	var b Backend
	for _, d := range candidates() {
		ok := false
		for _, a := range deviceAddrs(d) {
			if a.Is4() == ip.Is4() {
				ok = true
			}
		}
		if !ok {
			continue
		}
		db := backendFor(d)
		if db == nil || b != nil && db != b {
			return nil
		}
		b = db
	}
	return b
}

// kdevice is a device context the IDs of a backend share, as librdmacm's
// IDs share id->verbs.
type kdevice struct {
	dev  *verbs.Device
	ctx  *verbs.Context
	pd   *verbs.PD
	refs int
}

var kdevices = map[*verbs.Device]*kdevice{} // guarded by cm.mu

// kdeviceFor opens, or shares, the context of dev. Called with cm.mu held.
func kdeviceFor(dev *verbs.Device) (*kdevice, error) {
	if k := kdevices[dev]; k != nil {
		k.refs++
		return k, nil
	}
	ctx, err := dev.Open()
	if err != nil {
		return nil, err
	}
	pd, err := ctx.AllocPD()
	if err != nil {
		ctx.Close()
		return nil, err
	}
	k := &kdevice{dev: dev, ctx: ctx, pd: pd, refs: 1}
	kdevices[dev] = k
	return k, nil
}

// release drops a reference. Called with cm.mu held.
func (k *kdevice) release() {
	if k.refs--; k.refs == 0 {
		delete(kdevices, k.dev)
		k.pd.Dealloc()
		k.ctx.Close()
	}
}

// kernel returns the ID's backend ID, or nil for an ID this package
// serves.
func (id *ID) kernel() BackendID {
	cm.mu.Lock()
	defer cmUnlock()
	return id.k
}

// startBackend hands the ID to backend b. Called with cm.mu held.
func (id *ID) startBackend(b Backend) error {
	k, err := b.CreateID(id.ps, id.backendEvent)
	if err != nil {
		return err
	}
	if id.opts.tos != 0 {
		k.SetTOS(id.opts.tos)
	}
	if id.opts.reuseAddr {
		k.SetReuseAddr(true)
	}
	if id.opts.ackTimeout != 0 {
		k.SetACKTimeout(id.opts.ackTimeout)
	}
	id.k = k
	return nil
}

// bindDevice attaches the ID to the context of its backend ID's device,
// once it has one. Called with cm.mu held.
func (id *ID) bindDevice() {
	if id.kdev != nil {
		return
	}
	if dev := id.k.Device(); dev != nil {
		if kd, err := kdeviceFor(dev); err == nil {
			id.kdev = kd
		}
	}
}

// backendEvent turns a backend event into the ID's event.
func (id *ID) backendEvent(be BackendEvent) {
	cm.mu.Lock()
	defer cmUnlock()
	if id.state == stateDestroying {
		if be.Child != nil {
			be.Child.SetHandler(func(BackendEvent) {})
			be.Child.Reject(nil)
			be.Child.Destroy()
		}
		return
	}
	ev := &Event{Type: be.Type, Status: be.Status, Param: be.Param, UD: be.UD}
	k := id.k
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
			qpType: id.qpType, parent: id, opts: id.opts, k: be.Child}
		be.Child.SetHandler(child.backendEvent)
		child.local, child.peer, child.route = be.Child.LocalAddr(), be.Child.PeerAddr(), be.Child.Route()
		child.bindDevice()
		id.ch.ids++
		id.ch.push(&Event{Type: EventConnectRequest, ID: child, ListenID: id, Param: be.Param, UD: be.UD})
		return
	case EventEstablished:
		id.state = stateConnect
		id.peer = k.PeerAddr()
	case EventDisconnected:
		id.state = stateDisconnect
	case EventMulticastJoin, EventMulticastError:
		ev.UD.Context = id.groupContext(be.Group)
	}
	id.event(ev)
}

// The ID's calls on a backend.

func (id *ID) kbind(b Backend, dev *verbs.Device, addr netip.AddrPort) error {
	if err := id.startBackend(b); err != nil {
		return err
	}
	if err := id.k.BindAddr(addr); err != nil {
		id.k.Destroy()
		id.k = nil
		return err
	}
	id.local = id.k.LocalAddr()
	id.state = stateAddrBound
	if dev != nil {
		id.bindDevice()
	}
	return nil
}

func (id *ID) kdestroy(k BackendID) {
	cm.mu.Lock()
	for _, ev := range id.destroyLocked() {
		if child := ev.ID; child != nil && child != id && child.state != stateDestroying {
			child.destroyLocked()
			if child.k != nil {
				child.k.Reject(nil)
				child.k.Destroy()
			}
			if child.kdev != nil {
				child.kdev.release()
				child.kdev = nil
			}
		}
	}
	cmUnlock()
	id.leaveAll()
	id.freeQP()
	id.DestroySRQ()
	k.Destroy()
	cm.mu.Lock()
	if id.kdev != nil {
		id.kdev.release()
		id.kdev = nil
	}
	cmUnlock()
}

func (id *ID) kwait(op string, err error, want EventType) error {
	if err != nil {
		return err
	}
	return id.wait(op, want)
}

// routeBackend returns the backend serving the device the host's route to
// dst leaves from, or nil.
func routeBackend(dst netip.Addr) Backend {
	src, err := routeSource(dst)
	if err != nil {
		return nil
	}
	return backendFor(deviceFor(src))
}
