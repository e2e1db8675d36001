package verbs

import (
	"context"
	"os"
	"slices"
	"strings"
	"sync"
)

var providers struct {
	mu   sync.Mutex
	list []Provider
}

// RegisterProvider makes a provider's devices appear in Devices. Providers
// call it from an init function, so importing the provider's package is
// enough (the software device registers itself when package rxe is
// imported).
func RegisterProvider(p Provider) {
	providers.mu.Lock()
	defer providers.mu.Unlock()
	providers.list = append(providers.list, p)
}

// Device is an RDMA device (struct ibv_device).
type Device struct {
	name     string
	guid     uint64
	nodeType NodeType
	drv      DeviceDriver
}

// NewDevice is for providers: it wraps a driver as a Device.
func NewDevice(name string, guid uint64, drv DeviceDriver) *Device {
	return &Device{name: name, guid: guid, nodeType: NodeCA, drv: drv}
}

// Devices returns the RDMA devices of every registered provider, sorted by
// name (ibv_get_device_list).
//
// The environment variable RDMAGO_PROVIDER, if set, is a comma-separated
// list of the providers to use ("rdmacore", "rxe", "rdmacore,rxe"); the
// devices of the others are left out. Set it to "rdmacore" on a machine
// whose kernel already runs RoCE, so that the software device does not
// compete with it.
func Devices() ([]*Device, error) {
	providers.mu.Lock()
	list := append([]Provider(nil), providers.list...)
	providers.mu.Unlock()
	want := os.Getenv("RDMAGO_PROVIDER")
	if want != "" && !slices.ContainsFunc(list, func(p Provider) bool { return slices.Contains(strings.Split(want, ","), p.Name()) }) {
		return nil, Errorf("ibv_get_device_list", ErrNoDevice, "RDMAGO_PROVIDER="+want+" names no registered provider "+registered(list))
	}
	var devs []*Device
	for _, p := range list {
		if want != "" && !slices.Contains(strings.Split(want, ","), p.Name()) {
			continue
		}
		d, err := p.Devices()
		if err != nil {
			return nil, err
		}
		devs = append(devs, d...)
	}
	slices.SortStableFunc(devs, func(a, b *Device) int { return strings.Compare(a.name, b.name) })
	return devs, nil
}

// Providers returns the names of the registered providers, in the order
// they registered.
func Providers() []string {
	providers.mu.Lock()
	defer providers.mu.Unlock()
	names := make([]string, len(providers.list))
	for i, p := range providers.list {
		names[i] = p.Name()
	}
	return names
}

// registered says which providers there are, for an error message, with
// the imports that register the others.
func registered(list []Provider) string {
	names := make([]string, len(list))
	for i, p := range list {
		names[i] = p.Name()
	}
	why := "(registered: " + strings.Join(names, ", ")
	if len(list) == 0 {
		why = "(none is registered"
	}
	if !slices.Contains(names, "rxe") {
		why += `; the software device registers with import _ "github.com/rdmago/rdmago/rxe"`
	}
	if !slices.Contains(names, "rdmacore") {
		why += "; rdma-core's, with the rdmacore package in a build with -tags rdmacore"
	}
	return why + ")"
}

// NoProviderHint is what to add to a "no device" error when no provider
// is registered at all: the program imported none. It is "" otherwise.
func NoProviderHint() string {
	providers.mu.Lock()
	defer providers.mu.Unlock()
	if len(providers.list) > 0 {
		return ""
	}
	return "no RDMA provider is registered: import one, as import _ \"github.com/rdmago/rdmago/rxe\" does for the software device"
}

// ForkInit prepares every registered provider for the program's fork
// (ibv_fork_init): call it before registering memory if a child process
// may be forked while the parent keeps using RDMA. For the rdma-core
// provider it is libibverbs' ibv_fork_init, which marks registered
// memory so that the child does not share its pages with the device. The
// software device needs nothing: its memory is Go memory that a forked
// child never shares with the device's goroutines, and Go programs fork
// only to exec. An error from any provider is returned.
func ForkInit() error {
	providers.mu.Lock()
	list := append([]Provider(nil), providers.list...)
	providers.mu.Unlock()
	for _, p := range list {
		if f, ok := p.(ForkIniter); ok {
			if err := f.ForkInit(); err != nil {
				return err
			}
		}
	}
	return nil
}

// DeviceByName returns the device with that name, or an error wrapping
// ErrNoDevice that lists the devices there are.
func DeviceByName(name string) (*Device, error) {
	devs, err := Devices()
	if err != nil {
		return nil, err
	}
	var names []string
	for _, d := range devs {
		if d.name == name {
			return d, nil
		}
		names = append(names, d.name)
	}
	return nil, Errorf("ibv_get_device_list", ErrNoDevice, "no device "+quote(name)+"; have "+joinNames(names))
}

func joinNames(n []string) string {
	if len(n) == 0 {
		return "none"
	}
	s := n[0]
	for _, x := range n[1:] {
		s += ", " + x
	}
	return s
}

// Name returns the device's name (ibv_get_device_name), such as "rxe_lo".
func (d *Device) Name() string { return d.name }

// GUID returns the device's node GUID (ibv_get_device_guid).
func (d *Device) GUID() uint64 { return d.guid }

// NodeType returns the device's node type (a channel adapter unless the
// provider says otherwise, see NodeTyper).
func (d *Device) NodeType() NodeType {
	if t, ok := d.drv.(NodeTyper); ok {
		return t.NodeType()
	}
	return d.nodeType
}

// TransportType returns the device's transport: InfiniBand for RoCE, unless
// the provider says otherwise (NodeTyper).
func (d *Device) TransportType() TransportType {
	if t, ok := d.drv.(NodeTyper); ok {
		return t.TransportType()
	}
	return TransportIB
}

// DevName returns the name of the kernel's uverbs device behind the
// device ("uverbs0": struct ibv_device's dev_name), or "" for a device
// the kernel has no part in, the software device's.
func (d *Device) DevName() string {
	if p, ok := d.drv.(DevicePather); ok {
		return p.DevName()
	}
	return ""
}

// DevPath returns the sysfs path of the uverbs device
// ("/sys/class/infiniband_verbs/uverbs0": dev_path), or "".
func (d *Device) DevPath() string {
	if p, ok := d.drv.(DevicePather); ok {
		return p.DevPath()
	}
	return ""
}

// IBDevPath returns the sysfs path of the device
// ("/sys/class/infiniband/rxe0": ibdev_path), or "".
func (d *Device) IBDevPath() string {
	if p, ok := d.drv.(DevicePather); ok {
		return p.IBDevPath()
	}
	return ""
}

// Open opens the device (ibv_open_device).
func (d *Device) Open() (*Context, error) {
	c := &Context{dev: d, qps: map[uint32]*QP{}, srqs: map[SRQDriver]*SRQ{}, cqs: map[CQDriver]*CQ{}, async: make(chan AsyncEvent, asyncQueueLen)}
	drv, err := d.drv.Open(eventSink{c})
	if err != nil {
		return nil, err
	}
	c.drv = drv
	return c, nil
}

// asyncQueueLen bounds the asynchronous events a context holds before
// dropping new ones (an unread event queue must never stall the device).
const asyncQueueLen = 1024

// AsyncEvent is an asynchronous event (struct ibv_async_event): for a QP,
// a CQ, a port or the device.
type AsyncEvent struct {
	Type EventType
	QP   *QP   // for QP events
	SRQ  *SRQ  // for SRQ events
	CQ   *CQ   // for CQ events (IBV_EVENT_CQ_ERR)
	Port uint8 // for port events
}

// Context is an open device (struct ibv_context).
type Context struct {
	dev   *Device
	drv   ContextDriver
	async chan AsyncEvent

	mu   sync.Mutex
	qps  map[uint32]*QP
	srqs map[SRQDriver]*SRQ
	cqs  map[CQDriver]*CQ
	// recvQPs holds the XRC_RECV QP handles made or opened here, by QP
	// number, through any open of a domain: qps names one of them, and
	// the next when that one is destroyed.
	recvQPs map[uint32][]*QP
	closed  bool
}

// eventSink is the EventSink a provider gets with Open: the context's
// async event queue, kept off the Context type programs use.
type eventSink struct{ c *Context }

func (s eventSink) Event(typ EventType, qpNum uint32, port uint8) { s.c.event(typ, qpNum, port) }
func (s eventSink) SRQEvent(typ EventType, srq SRQDriver)         { s.c.srqEvent(typ, srq) }
func (s eventSink) CQEvent(typ EventType, cq CQDriver)            { s.c.cqEvent(typ, cq) }

// event queues an async event for GetAsyncEvent, dropping it if the queue
// is full.
func (c *Context) event(typ EventType, qpNum uint32, port uint8) {
	ev := AsyncEvent{Type: typ, Port: port}
	if qpNum != 0 || typ <= EventPathMigErr || typ == EventQPLastWQEReached {
		c.mu.Lock()
		ev.QP = c.qps[qpNum]
		c.mu.Unlock()
	}
	select {
	case c.async <- ev:
	default:
	}
}

// srqEvent is event for SRQs.
func (c *Context) srqEvent(typ EventType, srq SRQDriver) {
	c.mu.Lock()
	ev := AsyncEvent{Type: typ, SRQ: c.srqs[srq]}
	c.mu.Unlock()
	select {
	case c.async <- ev:
	default:
	}
}

// cqEvent is event for CQs.
func (c *Context) cqEvent(typ EventType, cq CQDriver) {
	c.mu.Lock()
	ev := AsyncEvent{Type: typ, CQ: c.cqs[cq]}
	c.mu.Unlock()
	select {
	case c.async <- ev:
	default:
	}
}

// Device returns the device the context was opened on.
func (c *Context) Device() *Device { return c.dev }

// Close closes the device context (ibv_close_device). Like closing the
// verbs file on Linux, it succeeds whatever the program left allocated:
// the provider destroys the context's QPs and releases its memory regions
// and windows, so no peer reaches that memory afterwards. Objects of the
// context fail with ErrClosed from then on.
func (c *Context) Close() error {
	c.mu.Lock()
	if c.closed {
		c.mu.Unlock()
		return nil
	}
	c.closed = true
	c.mu.Unlock()
	return c.drv.Close()
}

func (c *Context) check(op string) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.closed {
		return Errorf(op, ErrClosed, "device context closed")
	}
	return nil
}

// QueryDevice returns the device's attributes (ibv_query_device).
func (c *Context) QueryDevice() (DeviceAttr, error) {
	if err := c.check("ibv_query_device"); err != nil {
		return DeviceAttr{}, err
	}
	return c.drv.QueryDevice()
}

// QueryPort returns a port's attributes (ibv_query_port). Ports are
// numbered from 1.
func (c *Context) QueryPort(port uint8) (PortAttr, error) {
	if err := c.check("ibv_query_port"); err != nil {
		return PortAttr{}, err
	}
	return c.drv.QueryPort(port)
}

// QueryGID returns entry index of a port's GID table (ibv_query_gid).
func (c *Context) QueryGID(port uint8, index int) (GID, error) {
	if err := c.check("ibv_query_gid"); err != nil {
		return GID{}, err
	}
	return c.drv.QueryGID(port, index)
}

// QueryPKey returns entry index of a port's P_Key table (ibv_query_pkey).
func (c *Context) QueryPKey(port uint8, index int) (uint16, error) {
	if err := c.check("ibv_query_pkey"); err != nil {
		return 0, err
	}
	return c.drv.QueryPKey(port, index)
}

// GetAsyncEvent waits for the next asynchronous event (ibv_get_async_event).
func (c *Context) GetAsyncEvent(ctx context.Context) (AsyncEvent, error) {
	select {
	case ev := <-c.async:
		return ev, nil
	case <-ctx.Done():
		return AsyncEvent{}, ctx.Err()
	}
}

// AsyncEvents returns the channel GetAsyncEvent reads, for use in select.
func (c *Context) AsyncEvents() <-chan AsyncEvent { return c.async }

// AckAsyncEvent acknowledges an event (ibv_ack_async_event). Events need
// no acknowledgement here; it exists so code ported from C reads the same.
func (c *Context) AckAsyncEvent(AsyncEvent) {}

// AllocPD allocates a protection domain (ibv_alloc_pd).
func (c *Context) AllocPD() (*PD, error) {
	if err := c.check("ibv_alloc_pd"); err != nil {
		return nil, err
	}
	drv, err := c.drv.AllocPD()
	if err != nil {
		return nil, err
	}
	return &PD{ctx: c, drv: drv}, nil
}
