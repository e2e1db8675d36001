//go:build rdmacore && linux && cgo

package rdmacore

/*
#include "shim.h"
*/
import "C"

import (
	"net"
	"net/netip"
	"os"
	"sync"
	"sync/atomic"
	"syscall"
	"time"
	"unsafe"

	"github.com/rdmago/rdmago/rdmacm"
	"github.com/rdmago/rdmago/verbs"
)

func init() { rdmacm.RegisterBackend(backend{}) }

// backend is the kernel's connection manager, through librdmacm, for
// rdma-core devices.
type backend struct{}

func (backend) Serves(dev *verbs.Device) bool {
	_, ok := verbs.DeviceDriverOf(dev).(*device)
	return ok
}

// channel is the process's one rdma_cm event channel, open while any ID
// is; a goroutine reads it and hands each event to its ID.
var channel struct {
	mu   sync.Mutex
	ch   *C.struct_rdma_event_channel
	f    *os.File
	done chan struct{}
	ids  map[uintptr]*cmID
	next uintptr
}

// cmID is a kernel rdma_cm ID (struct rdma_cm_id).
type cmID struct {
	id     *C.struct_rdma_cm_id
	h      uintptr // its key in channel.ids, kept in id->context
	ps     rdmacm.PortSpace
	mu     sync.Mutex
	handle func(rdmacm.BackendEvent)
	gone   bool
	groups map[uintptr]netip.Addr // multicast joins by their uid
	nextMC uintptr
}

// register adds a C ID to the channel's table. Called with channel.mu
// held.
func register(c *C.struct_rdma_cm_id, ps rdmacm.PortSpace) *cmID {
	channel.next++
	k := &cmID{id: c, h: channel.next, ps: ps}
	channel.ids[k.h] = k
	C.rg_set_context(c, C.uintptr_t(k.h))
	return k
}

// openChannel creates the event channel and its reader. Called with
// channel.mu held.
func openChannel() error {
	if channel.ch != nil {
		return nil
	}
	ch, err := C.rdma_create_event_channel()
	if ch == nil {
		return fail("rdma_create_event_channel", err)
	}
	fd, err := syscall.Dup(int(ch.fd))
	if err == nil {
		err = syscall.SetNonblock(fd, true)
	}
	if err != nil {
		C.rdma_destroy_event_channel(ch)
		return fail("rdma_create_event_channel", err)
	}
	channel.ch = ch
	channel.f = os.NewFile(uintptr(fd), "rdma_cm")
	channel.done = make(chan struct{})
	channel.ids = map[uintptr]*cmID{}
	go readCMEvents(ch, channel.f, channel.done)
	return nil
}

// closeChannelIfIdle stops the channel's reader once no ID is left, and
// returns what to wait on for it to be gone (nil if it stays). Called with
// channel.mu held.
func closeChannelIfIdle() chan struct{} {
	if channel.ch == nil || len(channel.ids) > 0 {
		return nil
	}
	channel.f.Close()
	done := channel.done
	channel.ch, channel.f, channel.done = nil, nil, nil
	return done
}

// dispatching is set while the reader runs a handler: an ID destroyed from
// a handler must not wait for the reader to end.
var dispatching atomic.Bool

// readCMEvents takes each event (rdma_get_cm_event), copies it out,
// acknowledges it and hands it to its ID's handler. It destroys the
// channel when it ends.
func readCMEvents(ch *C.struct_rdma_event_channel, f *os.File, done chan struct{}) {
	defer close(done)
	defer C.rdma_destroy_event_channel(ch)
	var ev C.struct_rg_cm_event
	eachEvent(f, func() C.int { return C.rg_get_cm_event(ch, &ev) }, func() {
		dispatching.Store(true)
		defer dispatching.Store(false)
		dispatch(&ev)
	})
}

func dispatch(ev *C.struct_rg_cm_event) {
	be := rdmacm.BackendEvent{Type: rdmacm.EventType(ev._type), Status: int(ev.status)}
	pdata := C.GoBytes(unsafe.Pointer(&ev.conn.pdata[0]), C.int(ev.conn.pdata_len))
	be.Param = rdmacm.ConnParam{PrivateData: pdata,
		ResponderResources: uint8(ev.conn.responder_resources), InitiatorDepth: uint8(ev.conn.initiator_depth),
		FlowControl: uint8(ev.conn.flow_control), RetryCount: uint8(ev.conn.retry_count),
		RNRRetryCount: uint8(ev.conn.rnr_retry_count), SRQ: uint8(ev.conn.srq), QPNum: uint32(ev.conn.qp_num)}
	be.UD = rdmacm.UDParam{PrivateData: pdata, AHAttr: goAHAttr(&ev.ah_attr), QPNum: uint32(ev.ud_qp_num), QKey: uint32(ev.ud_qkey)}
	channel.mu.Lock()
	var k *cmID
	if be.Type == rdmacm.EventConnectRequest {
		// The request's new ID carries its listener's context.
		k = channel.ids[uintptr(C.rg_context(ev.listen_id))]
		child := register(ev.id, rdmacm.PortSpace(ev.id.ps))
		be.Child = child
	} else {
		k = channel.ids[uintptr(C.rg_context(ev.id))]
	}
	channel.mu.Unlock()
	var handle func(rdmacm.BackendEvent)
	if k != nil {
		k.mu.Lock()
		handle = k.handle
		if be.Type == rdmacm.EventMulticastJoin || be.Type == rdmacm.EventMulticastError {
			be.Group = k.groups[uintptr(ev.mc_uid)]
		}
		k.mu.Unlock()
	}
	if handle == nil {
		if be.Child != nil {
			be.Child.Reject(nil)
			be.Child.Destroy()
		}
		return
	}
	handle(be)
}

func (backend) CreateID(ps rdmacm.PortSpace, handle func(rdmacm.BackendEvent)) (rdmacm.BackendID, error) {
	channel.mu.Lock()
	defer channel.mu.Unlock()
	if err := openChannel(); err != nil {
		return nil, err
	}
	var c *C.struct_rdma_cm_id
	if _, err := C.rdma_create_id(channel.ch, &c, nil, C.enum_rdma_port_space(ps)); c == nil {
		closeChannelIfIdle() // the reader ends by itself
		return nil, fail("rdma_create_id", err)
	}
	k := register(c, ps)
	k.handle = handle
	return k, nil
}

func (k *cmID) SetHandler(handle func(rdmacm.BackendEvent)) {
	k.mu.Lock()
	k.handle = handle
	k.mu.Unlock()
}

// cAddr splits an address for the C helpers.
func cAddr(a netip.AddrPort) (v6 C.int, b [16]byte, port C.uint16_t, scope C.uint32_t) {
	ip := a.Addr()
	if !ip.Unmap().Is4() {
		v6 = 1
		if z := ip.Zone(); z != "" {
			if ifi, err := netInterfaceIndex(z); err == nil {
				scope = C.uint32_t(ifi)
			}
		}
	}
	return v6, ip.As16(), C.uint16_t(a.Port()), scope
}

func errnoRC(op string, e C.int) error {
	if e == 0 {
		return nil
	}
	return verbs.Errorf(op, verbs.Errno(e), "")
}

func (k *cmID) BindAddr(addr netip.AddrPort) error {
	v6, b, port, scope := cAddr(addr)
	return errnoRC("rdma_bind_addr", C.rg_bind_addr(k.id, v6, (*C.uint8_t)(&b[0]), port, scope))
}

func (k *cmID) ResolveAddr(src, dst netip.AddrPort, timeout time.Duration) error {
	if timeout <= 0 {
		timeout = 2 * time.Second
	}
	hasSrc := C.int(0)
	if src.Addr().IsValid() {
		hasSrc = 1
	}
	sv6, sb, sport, sscope := cAddr(src)
	dv6, db, dport, dscope := cAddr(dst)
	return errnoRC("rdma_resolve_addr", C.rg_resolve_addr(k.id, hasSrc, sv6, (*C.uint8_t)(&sb[0]), sport, sscope,
		dv6, (*C.uint8_t)(&db[0]), dport, dscope, C.int(timeout.Milliseconds())))
}

func (k *cmID) ResolveRoute(timeout time.Duration) error {
	if timeout <= 0 {
		timeout = 2 * time.Second
	}
	if rc, err := C.rdma_resolve_route(k.id, C.int(timeout.Milliseconds())); rc != 0 {
		return fail("rdma_resolve_route", err)
	}
	return nil
}

func (k *cmID) Listen(backlog int) error {
	if rc, err := C.rdma_listen(k.id, C.int(backlog)); rc != 0 {
		return fail("rdma_listen", err)
	}
	return nil
}

// conn converts connection parameters; a nil p asks for the device's
// limits and retries for ever on RNR, as the software connection manager
// does.
func (k *cmID) conn(op string, p *rdmacm.ConnParam) (C.struct_rg_conn, error) {
	var c C.struct_rg_conn
	if p == nil {
		q := rdmacm.ConnParam{RetryCount: 7, RNRRetryCount: 7}
		if k.id.verbs != nil {
			var a C.struct_ibv_device_attr
			if C.ibv_query_device(k.id.verbs, &a) == 0 {
				q.ResponderResources = uint8(min(a.max_qp_rd_atom, 255))
				q.InitiatorDepth = uint8(min(a.max_qp_init_rd_atom, 255))
			}
		}
		p = &q
	}
	if len(p.PrivateData) > len(c.pdata) {
		return c, verbs.Errorf(op, verbs.ErrInvalidArgument, "private data too long")
	}
	for i, b := range p.PrivateData {
		c.pdata[i] = C.uint8_t(b)
	}
	c.pdata_len = C.uint32_t(len(p.PrivateData))
	c.responder_resources = C.uint8_t(p.ResponderResources)
	c.initiator_depth = C.uint8_t(p.InitiatorDepth)
	c.flow_control = C.uint8_t(p.FlowControl)
	c.retry_count = C.uint8_t(min(p.RetryCount, 7))
	c.rnr_retry_count = C.uint8_t(min(p.RNRRetryCount, 7))
	c.srq = C.uint8_t(p.SRQ)
	c.qp_num = C.uint32_t(p.QPNum)
	return c, nil
}

func (k *cmID) Connect(p *rdmacm.ConnParam) error {
	c, err := k.conn("rdma_connect", p)
	if err != nil {
		return err
	}
	return errnoRC("rdma_connect", C.rg_connect(k.id, &c))
}

func (k *cmID) Accept(p *rdmacm.ConnParam) error {
	if p == nil && k.ps != rdmacm.PSUDP {
		// The peer's resources, as the software connection manager
		// takes them: rdma_accept needs them given.
		q := rdmacm.ConnParam{RNRRetryCount: 7, ResponderResources: 1, InitiatorDepth: 1}
		p = &q
	}
	c, err := k.conn("rdma_accept", p)
	if err != nil {
		return err
	}
	return errnoRC("rdma_accept", C.rg_accept(k.id, &c))
}

func (k *cmID) Reject(pdata []byte) error {
	var p unsafe.Pointer
	if len(pdata) > 0 {
		p = C.CBytes(pdata)
		defer C.free(p)
	}
	if rc, err := C.rdma_reject(k.id, p, C.uint8_t(len(pdata))); rc != 0 {
		return fail("rdma_reject", err)
	}
	return nil
}

func (k *cmID) Establish() error {
	if rc, err := C.rdma_establish(k.id); rc != 0 {
		return fail("rdma_establish", err)
	}
	return nil
}

func (k *cmID) Disconnect() error {
	if rc, err := C.rdma_disconnect(k.id); rc != 0 {
		return fail("rdma_disconnect", err)
	}
	return nil
}

func (k *cmID) AttachQP(q *verbs.QP) error {
	d, ok := verbs.QPDriverOf(q).(*qp)
	if !ok {
		return verbs.Errorf("rdma_create_qp", verbs.ErrInvalidArgument, "the QP is not on an rdma-core device")
	}
	if d.c.s.c != k.id.verbs {
		return verbs.Errorf("rdma_create_qp", verbs.ErrInvalidArgument, "the QP is on another device than the ID")
	}
	if e := C.rg_attach_qp(k.id, d.qp); e != 0 {
		C.rg_detach_qp(k.id)
		return verbs.Errorf("rdma_create_qp", verbs.Errno(e), "moving the QP to INIT")
	}
	return nil
}

func (k *cmID) DetachQP() { C.rg_detach_qp(k.id) }

func (k *cmID) InitQPAttr(s verbs.QPState) (verbs.QPAttr, verbs.QPAttrMask, error) {
	var a C.struct_ibv_qp_attr
	var mask C.int
	if e := C.rg_init_qp_attr(k.id, C.int(s), &a, &mask); e != 0 {
		return verbs.QPAttr{}, 0, verbs.Errorf("rdma_init_qp_attr", verbs.Errno(e), "")
	}
	return goQPAttr(&a), verbs.QPAttrMask(mask), nil
}

func (k *cmID) SetTOS(tos uint8) error {
	return errnoRC("rdma_set_option", C.rg_set_u8(k.id, C.RDMA_OPTION_ID, C.RDMA_OPTION_ID_TOS, C.uint8_t(tos)))
}

func (k *cmID) SetReuseAddr(on bool) error {
	v := 0
	if on {
		v = 1
	}
	return errnoRC("rdma_set_option", C.rg_set_int(k.id, C.RDMA_OPTION_ID, C.RDMA_OPTION_ID_REUSEADDR, C.int(v)))
}

func (k *cmID) SetACKTimeout(code uint8) error {
	return errnoRC("rdma_set_option", C.rg_set_u8(k.id, C.RDMA_OPTION_ID, C.RDMA_OPTION_ID_ACK_TIMEOUT, C.uint8_t(code)))
}

func (k *cmID) JoinMulticast(addr netip.Addr, flags rdmacm.MulticastJoinFlags) error {
	k.mu.Lock()
	if k.groups == nil {
		k.groups = map[uintptr]netip.Addr{}
	}
	k.nextMC++
	uid := k.nextMC
	k.groups[uid] = addr
	k.mu.Unlock()
	v6, a, _, scope := cAddr(netip.AddrPortFrom(addr, 0))
	if err := errnoRC("rdma_join_multicast_ex", C.rg_join_multicast(k.id, v6, (*C.uint8_t)(&a[0]), scope, C.uint16_t(flags), C.uintptr_t(uid))); err != nil {
		k.mu.Lock()
		delete(k.groups, uid)
		k.mu.Unlock()
		return err
	}
	return nil
}

func (k *cmID) LeaveMulticast(addr netip.Addr) error {
	v6, a, _, scope := cAddr(netip.AddrPortFrom(addr, 0))
	err := errnoRC("rdma_leave_multicast", C.rg_leave_multicast(k.id, v6, (*C.uint8_t)(&a[0]), scope))
	k.mu.Lock()
	for uid, g := range k.groups {
		if g == addr {
			delete(k.groups, uid)
		}
	}
	k.mu.Unlock()
	return err
}

func (k *cmID) Device() *verbs.Device {
	name := C.rg_id_dev_name(k.id)
	if name == nil {
		return nil
	}
	devs, _ := provider{}.Devices()
	n := C.GoString(name)
	for _, d := range devs {
		if d.Name() == n {
			return d
		}
	}
	return nil
}

func goAddr(f func(*C.uint8_t, *C.uint16_t) C.int) netip.AddrPort {
	var b [16]byte
	var port C.uint16_t
	switch f((*C.uint8_t)(&b[0]), &port) {
	case 4:
		return netip.AddrPortFrom(netip.AddrFrom16(b).Unmap(), uint16(port))
	case 6:
		return netip.AddrPortFrom(netip.AddrFrom16(b), uint16(port))
	}
	return netip.AddrPort{}
}

func (k *cmID) LocalAddr() netip.AddrPort {
	return goAddr(func(b *C.uint8_t, p *C.uint16_t) C.int { return C.rg_local_addr(k.id, b, p) })
}

func (k *cmID) PeerAddr() netip.AddrPort {
	return goAddr(func(b *C.uint8_t, p *C.uint16_t) C.int { return C.rg_peer_addr(k.id, b, p) })
}

func (k *cmID) Route() rdmacm.Route {
	var sgid, dgid [16]byte
	var mtu, hop, tclass, flow C.uint32_t
	if C.rg_route(k.id, (*C.uint8_t)(&sgid[0]), (*C.uint8_t)(&dgid[0]), &mtu, &hop, &tclass, &flow) == 0 {
		return rdmacm.Route{}
	}
	r := rdmacm.Route{SGID: verbs.GID(sgid), DGID: verbs.GID(dgid), PathMTU: verbs.MTU(mtu),
		HopLimit: uint8(hop), TrafficClass: uint8(tclass), FlowLabel: uint32(flow)}
	// The source GID's index, as the GID table has it.
	if k.id.verbs != nil {
		for i := 0; i < 256; i++ {
			var g C.union_ibv_gid
			if C.ibv_query_gid(k.id.verbs, C.uint8_t(max(k.id.port_num, 1)), C.int(i), &g) != 0 {
				break
			}
			if *(*[16]byte)(unsafe.Pointer(&g)) == sgid {
				r.SGIDIndex = uint8(i)
				break
			}
		}
	}
	return r
}

// Destroy destroys the ID (rdma_destroy_id); the channel closes with its
// last ID.
func (k *cmID) Destroy() error {
	k.mu.Lock()
	if k.gone {
		k.mu.Unlock()
		return nil
	}
	k.gone = true
	k.handle = nil
	k.mu.Unlock()
	rc, err := C.rdma_destroy_id(k.id)
	channel.mu.Lock()
	delete(channel.ids, k.h)
	done := closeChannelIfIdle()
	channel.mu.Unlock()
	if done != nil && !dispatching.Load() {
		<-done
	}
	if rc != 0 {
		return fail("rdma_destroy_id", err)
	}
	return nil
}

func netInterfaceIndex(name string) (int, error) {
	ifi, err := net.InterfaceByName(name)
	if err != nil {
		return 0, err
	}
	return ifi.Index, nil
}
