package rdmacm

import (
	"cmp"
	"math/rand/v2"
	"net"
	"net/netip"
	"sync"

	"github.com/rdmago/rdmago/verbs"
)

// registered holds the devices made outside the provider registries (with
// rxe.NewDevice, say) that address resolution also searches.
var registered struct {
	mu   sync.Mutex
	devs []*verbs.Device
}

// RegisterDevice makes a device that verbs.Devices does not list (one made
// with rxe.NewDevice) known to address resolution: BindAddr, ResolveAddr
// and Listen then find it by its addresses. It returns a function that
// removes it again. Registered devices are searched before the listed
// ones.
func RegisterDevice(d *verbs.Device) (unregister func()) {
	registered.mu.Lock()
	registered.devs = append(registered.devs, d)
	registered.mu.Unlock()
	var once sync.Once
	return func() {
		once.Do(func() {
			registered.mu.Lock()
			defer registered.mu.Unlock()
			for i, x := range registered.devs {
				if x == d {
					registered.devs = append(registered.devs[:i:i], registered.devs[i+1:]...)
					break
				}
			}
		})
	}
}

// candidates lists the devices address resolution searches.
func candidates() []*verbs.Device {
	registered.mu.Lock()
	out := append([]*verbs.Device(nil), registered.devs...)
	registered.mu.Unlock()
	if devs, err := verbs.Devices(); err == nil {
		out = append(out, devs...)
	}
	return out
}

// deviceAddrs returns a device's GIDs as addresses. Devices whose driver
// cannot list them are opened and queried.
func deviceAddrs(d *verbs.Device) []netip.Addr {
	if l, ok := verbs.DeviceDriverOf(d).(verbs.AddrLister); ok {
		return l.Addrs()
	}
	ctx, err := d.Open()
	if err != nil {
		return nil
	}
	defer ctx.Close()
	pa, err := ctx.QueryPort(1)
	if err != nil {
		return nil
	}
	var out []netip.Addr
	for i := 0; i < pa.GIDTblLen; i++ {
		g, err := ctx.QueryGID(1, i)
		if err != nil || g.IsZero() {
			break
		}
		out = append(out, g.Addr())
	}
	return out
}

// deviceFor returns the device that serves addr.
//
// When a device with a connection manager backend (rdma-core's) and a
// software device both serve the address, the backend's device wins: the
// kernel owns that address's RoCE traffic.
func deviceFor(addr netip.Addr) *verbs.Device {
	addr = addr.Unmap().WithZone("")
	var first *verbs.Device
	for _, d := range candidates() {
		for _, a := range deviceAddrs(d) {
			if a.Unmap().WithZone("") != addr {
				continue
			}
			if backendFor(d) != builtin {
				return d
			}
			if first == nil {
				first = d
			}
		}
	}
	return first
}

// loopbackDevice returns a device serving a loopback address of src's
// family, and that address: on one host, a process whose device serves
// 127.0.0.2 reaches 127.0.0.1 through it, although the routing table
// names 127.0.0.1 as the source.
func loopbackDevice(src netip.Addr) (*verbs.Device, netip.Addr) {
	for _, d := range candidates() {
		for _, a := range deviceAddrs(d) {
			if a = a.Unmap(); a.IsLoopback() && a.Is4() == src.Is4() {
				return d, a
			}
		}
	}
	return nil, netip.Addr{}
}

// routeSourceNet is routeSource through the net package.
func routeSourceNet(dst netip.Addr) (netip.Addr, error) {
	c, err := net.DialUDP("udp", nil, net.UDPAddrFromAddrPort(netip.AddrPortFrom(dst, 4791)))
	if err != nil {
		return netip.Addr{}, err
	}
	defer c.Close()
	return c.LocalAddr().(*net.UDPAddr).AddrPort().Addr().Unmap(), nil
}

// Ephemeral ports, as Linux's default ip_local_port_range.
const (
	ephemeralLow  = 32768
	ephemeralHigh = 60999
)

// bindPort reserves port (0: an ephemeral one) for id at addr in its port
// space. Called with cm.mu held.
func bindPort(id *cmID, addr netip.Addr, port uint16) (uint16, error) {
	if port == 0 {
		for range 1000 {
			p := uint16(ephemeralLow + rand.IntN(ephemeralHigh-ephemeralLow+1))
			if portFree(id.ps, addr, p) {
				port = p
				break
			}
		}
		if port == 0 {
			return 0, verbs.Errorf("rdma_bind_addr", verbs.ErrAddrInUse, "no free ephemeral port")
		}
	} else if !portFree(id.ps, addr, port) {
		return 0, verbs.Errorf("rdma_bind_addr", verbs.ErrAddrInUse,
			netip.AddrPortFrom(addr, port).String()+" is bound in "+id.ps.String())
	}
	if cm.ports == nil {
		cm.ports = map[portKey][]*cmID{}
	}
	k := portKey{id.ps, port}
	cm.ports[k] = append(cm.ports[k], id)
	return port, nil
}

func portFree(ps PortSpace, addr netip.Addr, port uint16) bool {
	for _, o := range cm.ports[portKey{ps, port}] {
		oa := o.local.Addr()
		if !oa.IsValid() || oa.IsUnspecified() || !addr.IsValid() || addr.IsUnspecified() || oa == addr {
			return false
		}
	}
	return true
}

// unbindPort releases id's port. Called with cm.mu held.
func unbindPort(id *cmID) {
	if !id.portBound {
		return
	}
	id.portBound = false
	k := portKey{id.ps, id.local.Port()}
	l := cm.ports[k]
	for i, o := range l {
		if o == id {
			l = append(l[:i:i], l[i+1:]...)
			break
		}
	}
	if len(l) == 0 {
		delete(cm.ports, k)
	} else {
		cm.ports[k] = l
	}
}

// listenerFor finds the listening ID of a service on agent a for a
// request to dst. Called with cm.mu held.
func listenerFor(a *agent, ps PortSpace, port uint16, dst netip.Addr) *cmID {
	var wild *cmID
	for _, id := range cm.ports[portKey{ps, port}] {
		if id.state != stateListen {
			continue
		}
		la := id.local.Addr()
		if la.IsUnspecified() {
			if id.listensOn(a) && (wild == nil) {
				wild = id
			}
			continue
		}
		if id.agent == a && (!dst.IsValid() || la.WithZone("") == dst.WithZone("")) {
			return id
		}
	}
	return wild
}

// DeviceList holds the contexts GetDevices returned until Free.
type DeviceList struct {
	// Contexts are the open devices, one per device the connection
	// manager serves: the same contexts its IDs' Verbs return, so that
	// a PD allocated on one serves the IDs bound to that device.
	Contexts []*verbs.Context

	mu   sync.Mutex
	refs []func() // each releases one device; called with idMu held
}

// GetDevices opens every device the connection manager serves, or
// shares it with the IDs that already use it (rdma_get_devices). The
// list holds them open until Free. A device that cannot be opened is
// left out; GetDevices fails only if none can be.
func GetDevices() (*DeviceList, error) {
	l := &DeviceList{}
	seen := map[*verbs.Device]bool{}
	devs := candidates()
	idMu.Lock()
	defer idMu.Unlock()
	var first error
	for _, dev := range devs {
		if seen[dev] {
			continue
		}
		seen[dev] = true
		k, err := kdeviceFor(dev)
		if err != nil {
			first = cmp.Or(first, err)
			continue
		}
		l.Contexts = append(l.Contexts, k.ctx)
		l.refs = append(l.refs, k.release)
	}
	if len(l.Contexts) == 0 && first != nil {
		return nil, first
	}
	return l, nil
}

// Free lets go of the list's devices (rdma_free_devices); each stays
// open for as long as IDs use it. Unlike librdmacm, which keeps its
// contexts open for the life of the process, a context here closes once
// neither a list nor an ID uses it: keep the list until its contexts
// and what was made on them are no longer needed. Calling Free twice is
// harmless.
func (l *DeviceList) Free() {
	idMu.Lock()
	defer idMu.Unlock()
	l.freeLocked()
}

func (l *DeviceList) freeLocked() {
	l.mu.Lock()
	defer l.mu.Unlock()
	for _, release := range l.refs {
		release()
	}
	l.refs, l.Contexts = nil, nil
}
