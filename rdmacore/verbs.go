//go:build rdmacore && linux && cgo

package rdmacore

/*
#cgo LDFLAGS: -libverbs -lrdmacm
#include "shim.h"
*/
import "C"

import (
	"errors"
	"os"
	"runtime"
	"slices"
	"sync"
	"syscall"
	"unsafe"

	"github.com/rdmago/rdmago/verbs"
)

// The completion and scatter/gather layouts are shared with C as they
// are: verbs.WC is struct ibv_wc and verbs.SGE is struct ibv_sge.
var (
	_ [unsafe.Sizeof(verbs.WC{}) - C.sizeof_struct_ibv_wc]byte
	_ [C.sizeof_struct_ibv_wc - unsafe.Sizeof(verbs.WC{})]byte
	_ [unsafe.Sizeof(verbs.SGE{}) - C.sizeof_struct_ibv_sge]byte
	_ [C.sizeof_struct_ibv_sge - unsafe.Sizeof(verbs.SGE{})]byte
	_ [unsafe.Offsetof(verbs.WC{}.DLIDPathBits) - unsafe.Offsetof(C.struct_ibv_wc{}.dlid_path_bits)]byte
	_ [unsafe.Offsetof(C.struct_ibv_wc{}.dlid_path_bits) - unsafe.Offsetof(verbs.WC{}.DLIDPathBits)]byte
)

func init() { verbs.RegisterProvider(provider{}) }

// ForkInit is ibv_fork_init: registered memory is then kept from the
// pages a forked child shares (madvise MADV_DONTFORK).
func (provider) ForkInit() error {
	if rc := C.ibv_fork_init(); rc != 0 {
		return failRC("ibv_fork_init", -rc)
	}
	return nil
}

// forkUnneeded reports whether the kernel copies DMA pages on fork, so
// that ibv_fork_init has nothing to do and always succeeds
// (ibv_is_fork_initialized returns IBV_FORK_UNNEEDED).
func forkUnneeded() bool { return C.ibv_is_fork_initialized() == C.IBV_FORK_UNNEEDED }

// ProviderName is the name RDMAGO_PROVIDER selects this provider by.
const ProviderName = "rdmacore"

type provider struct{}

func (provider) Name() string { return ProviderName }

var devList struct {
	once sync.Once
	devs []*verbs.Device
	err  error
}

// Devices lists rdma-core's devices (ibv_get_device_list). The list is
// read once per process.
func (provider) Devices() ([]*verbs.Device, error) {
	devList.once.Do(func() {
		var n C.int
		l, err := C.ibv_get_device_list(&n)
		if l == nil {
			if errors.Is(err, syscall.ENOSYS) || errors.Is(err, syscall.ENOENT) {
				return // no RDMA subsystem: no devices
			}
			devList.err = verbs.Errorf("ibv_get_device_list", errnoOf(err), "")
			return
		}
		// The list stays allocated: its devices live as long as the
		// process.
		for i := C.int(0); i < n; i++ {
			name := C.GoString(C.rg_dev_name(l, i))
			d := &device{name: name, dev: C.rg_dev(l, i)}
			devList.devs = append(devList.devs, verbs.NewDevice(name, uint64(C.rg_dev_guid(l, i)), d))
		}
	})
	return devList.devs, devList.err
}

// device is an rdma-core device.
type device struct {
	name string
	dev  *C.struct_ibv_device
}

// NodeType implements verbs.NodeTyper: struct ibv_device's node_type.
func (d *device) NodeType() verbs.NodeType { return verbs.NodeType(C.rg_dev_node_type(d.dev)) }

// TransportType implements verbs.NodeTyper: its transport_type.
func (d *device) TransportType() verbs.TransportType {
	return verbs.TransportType(C.rg_dev_transport_type(d.dev))
}

// DevName implements verbs.DevicePather: its dev_name.
func (d *device) DevName() string { return C.GoString(C.rg_dev_kname(d.dev)) }

// DevPath implements verbs.DevicePather: its dev_path.
func (d *device) DevPath() string { return C.GoString(C.rg_dev_path(d.dev)) }

// IBDevPath implements verbs.DevicePather: its ibdev_path.
func (d *device) IBDevPath() string { return C.GoString(C.rg_ibdev_path(d.dev)) }

// errnoOf turns a cgo error into a verbs errno.
func errnoOf(err error) verbs.Errno {
	var e syscall.Errno
	if errors.As(err, &e) && e != 0 {
		return verbs.Errno(e)
	}
	return verbs.ErrIO
}

// fail builds the error of a failed call that set errno (or returned it).
func fail(op string, err error) error {
	if err == nil {
		err = syscall.EIO
	}
	return verbs.Errorf(op, errnoOf(err), "")
}

// failRC is fail for calls that return the errno.
func failRC(op string, rc C.int) error {
	if rc < 0 {
		rc = -rc
	}
	return verbs.Errorf(op, verbs.Errno(rc), "")
}

// shared is one ibv_context with the async-event reader all the
// contexts opened on it share.
type shared struct {
	c       *C.struct_ibv_context
	rdmacm  bool // the context is librdmacm's: rdma_free_devices releases it
	list    **C.struct_ibv_context
	refs    int
	f       *os.File // a dup of the async fd, for the poller
	done    chan struct{}
	mu      sync.Mutex
	sinks   map[*ctx]verbs.EventSink
	byQPN   map[uint32][]*ctx // the contexts holding a handle on each QP (several for an XRC_RECV QP)
	bySRQ   map[*C.struct_ibv_srq]*srq
	byCQ    map[*C.struct_ibv_cq]*cq
	byMRKey map[uint32]*mr
}

var opened struct {
	mu sync.Mutex
	m  map[*C.struct_ibv_device]*shared
}

// Open opens the device (ibv_open_device). If librdmacm serves the device,
// the context is librdmacm's own, so that the kernel connection manager's
// IDs (whose id->verbs is that context) and this context's PDs and QPs
// belong together, as in a C program.
func (d *device) Open(events verbs.EventSink) (verbs.ContextDriver, error) {
	opened.mu.Lock()
	defer opened.mu.Unlock()
	if opened.m == nil {
		opened.m = map[*C.struct_ibv_device]*shared{}
	}
	s := opened.m[d.dev]
	if s == nil {
		var err error
		if s, err = d.openShared(); err != nil {
			return nil, err
		}
		opened.m[d.dev] = s
	}
	s.refs++
	c := &ctx{s: s, dev: d, events: events}
	s.mu.Lock()
	s.sinks[c] = events
	s.mu.Unlock()
	return c, nil
}

func (d *device) openShared() (*shared, error) {
	s := &shared{sinks: map[*ctx]verbs.EventSink{}, byQPN: map[uint32][]*ctx{}, bySRQ: map[*C.struct_ibv_srq]*srq{}, byCQ: map[*C.struct_ibv_cq]*cq{}, byMRKey: map[uint32]*mr{}, done: make(chan struct{})}
	var n C.int
	if l := C.rdma_get_devices(&n); l != nil {
		for i := C.int(0); i < n; i++ {
			if c := C.rg_ctx(l, i); c.device == d.dev || C.GoString(C.ibv_get_device_name(c.device)) == d.name {
				s.c, s.rdmacm, s.list = c, true, l
				break
			}
		}
		if s.c == nil {
			C.rdma_free_devices(l)
		}
	}
	if s.c == nil {
		c, err := C.ibv_open_device(d.dev)
		if c == nil {
			return nil, fail("ibv_open_device", err)
		}
		s.c = c
	}
	fd, err := syscall.Dup(int(s.c.async_fd))
	if err == nil {
		err = syscall.SetNonblock(fd, true)
	}
	if err != nil {
		s.close()
		return nil, fail("ibv_open_device", err)
	}
	s.f = os.NewFile(uintptr(fd), "ibv-async")
	go s.readEvents()
	return s, nil
}

func (s *shared) close() {
	if s.f != nil {
		s.f.Close()
		<-s.done
	}
	if s.rdmacm {
		C.rdma_free_devices(s.list)
	} else {
		C.ibv_close_device(s.c)
	}
}

// readEvents takes the context's asynchronous events (ibv_get_async_event)
// and reports each to the contexts it concerns.
func (s *shared) readEvents() {
	defer close(s.done)
	var ev C.struct_rg_async_event
	eachEvent(s.f, func() C.int { return C.rg_get_async_event(s.c, &ev) }, func() {
		typ := verbs.EventType(ev._type)
		s.mu.Lock()
		switch {
		case ev.srq != nil:
			if q := s.bySRQ[ev.srq]; q != nil {
				q.c.events.SRQEvent(typ, q)
			}
		case ev.cq != nil:
			if q := s.byCQ[ev.cq]; q != nil {
				q.c.events.CQEvent(typ, q)
			}
		case ev.qp_num != 0:
			for i, c := range s.byQPN[uint32(ev.qp_num)] {
				if !slices.Contains(s.byQPN[uint32(ev.qp_num)][:i], c) {
					c.events.Event(typ, uint32(ev.qp_num), 0)
				}
			}
		default:
			for _, sink := range s.sinks {
				sink.Event(typ, 0, uint8(ev.port))
			}
		}
		s.mu.Unlock()
	})
}

// eachEvent waits for f, a dup of a C event file, to be readable and calls
// take, which reads from the original (the two share the file's
// non-blocking flag), until f is closed; handle follows each take that
// returned 0. take returns an errno, EAGAIN when nothing was there.
func eachEvent(f *os.File, take func() C.int, handle func()) {
	rc, err := f.SyscallConn()
	if err != nil {
		return
	}
	for {
		var e C.int
		if err := rc.Read(func(uintptr) bool { e = take(); return e != C.EAGAIN }); err != nil {
			return
		}
		if e == 0 {
			handle()
		}
	}
}

// ctx is an open device.
type ctx struct {
	s      *shared
	dev    *device
	events verbs.EventSink

	mu     sync.Mutex
	objs   [numKinds]map[releaser]bool // what Close releases, by kind
	closed bool
}

// releaser is an object Context.Close releases if the program did not.
type releaser interface{ release() }

// The kinds of objects, in the order Close releases them: QPs before the
// SRQs, windows and regions they use, CQs after QPs, PDs last.
const (
	kindQP = iota
	kindSRQ
	kindXRCD
	kindAH
	kindMW
	kindMR
	kindCQ
	kindPD
	numKinds
)

// Verbs returns the context's struct ibv_context, for the connection
// manager backend.
func (c *ctx) ibv() *C.struct_ibv_context { return c.s.c }

func (c *ctx) QueryDevice() (verbs.DeviceAttr, error) {
	var a C.struct_ibv_device_attr
	if rc := C.ibv_query_device(c.s.c, &a); rc != 0 {
		return verbs.DeviceAttr{}, failRC("ibv_query_device", rc)
	}
	return goDeviceAttr(&a), nil
}

// goDeviceAttr converts struct ibv_device_attr.
func goDeviceAttr(a *C.struct_ibv_device_attr) verbs.DeviceAttr {
	return verbs.DeviceAttr{
		FWVer:                 C.GoString(&a.fw_ver[0]),
		NodeGUID:              be64(uint64(a.node_guid)),
		SysImageGUID:          be64(uint64(a.sys_image_guid)),
		MaxMRSize:             uint64(a.max_mr_size),
		PageSizeCap:           uint64(a.page_size_cap),
		VendorID:              uint32(a.vendor_id),
		VendorPartID:          uint32(a.vendor_part_id),
		HWVer:                 uint32(a.hw_ver),
		MaxQP:                 int(a.max_qp),
		MaxQPWR:               int(a.max_qp_wr),
		DeviceCapFlags:        uint32(a.device_cap_flags),
		MaxSGE:                int(a.max_sge),
		MaxSGERD:              int(a.max_sge_rd),
		MaxCQ:                 int(a.max_cq),
		MaxCQE:                int(a.max_cqe),
		MaxMR:                 int(a.max_mr),
		MaxPD:                 int(a.max_pd),
		MaxQPRdAtom:           int(a.max_qp_rd_atom),
		MaxEECRdAtom:          int(a.max_ee_rd_atom),
		MaxResRdAtom:          int(a.max_res_rd_atom),
		MaxQPInitRdAtom:       int(a.max_qp_init_rd_atom),
		MaxEECInitRdAtom:      int(a.max_ee_init_rd_atom),
		AtomicCap:             verbs.AtomicCap(a.atomic_cap),
		MaxEE:                 int(a.max_ee),
		MaxRDD:                int(a.max_rdd),
		MaxMW:                 int(a.max_mw),
		MaxRawIPv6QP:          int(a.max_raw_ipv6_qp),
		MaxRawEthyQP:          int(a.max_raw_ethy_qp),
		MaxMcastGrp:           int(a.max_mcast_grp),
		MaxMcastQPAttach:      int(a.max_mcast_qp_attach),
		MaxTotalMcastQPAttach: int(a.max_total_mcast_qp_attach),
		MaxAH:                 int(a.max_ah),
		MaxFMR:                int(a.max_fmr),
		MaxMapPerFMR:          int(a.max_map_per_fmr),
		MaxSRQ:                int(a.max_srq),
		MaxSRQWR:              int(a.max_srq_wr),
		MaxSRQSGE:             int(a.max_srq_sge),
		MaxPKeys:              int(a.max_pkeys),
		LocalCADelayAck:       uint8(a.local_ca_ack_delay),
		PhysPortCnt:           uint8(a.phys_port_cnt),
	}
}

// be64 converts a big-endian value as C stores it to the host's order.
func be64(v uint64) uint64 {
	var b [8]byte
	*(*uint64)(unsafe.Pointer(&b)) = v
	var r uint64
	for _, x := range b {
		r = r<<8 | uint64(x)
	}
	return r
}

func (c *ctx) QueryPort(port uint8) (verbs.PortAttr, error) {
	var a C.struct_ibv_port_attr
	if rc := C.rg_query_port(c.s.c, C.uint8_t(port), &a); rc != 0 {
		return verbs.PortAttr{}, failRC("ibv_query_port", rc)
	}
	return verbs.PortAttr{
		State:         verbs.PortState(a.state),
		MaxMTU:        verbs.MTU(a.max_mtu),
		ActiveMTU:     verbs.MTU(a.active_mtu),
		GIDTblLen:     int(a.gid_tbl_len),
		PortCapFlags:  uint32(a.port_cap_flags),
		MaxMsgSz:      uint32(a.max_msg_sz),
		BadPKeyCntr:   uint32(a.bad_pkey_cntr),
		QKeyViolCntr:  uint32(a.qkey_viol_cntr),
		PKeyTblLen:    int(a.pkey_tbl_len),
		LID:           uint16(a.lid),
		SMLID:         uint16(a.sm_lid),
		LMC:           uint8(a.lmc),
		MaxVLNum:      uint8(a.max_vl_num),
		SMSL:          uint8(a.sm_sl),
		SubnetTimeout: uint8(a.subnet_timeout),
		InitTypeReply: uint8(a.init_type_reply),
		ActiveWidth:   uint8(a.active_width),
		ActiveSpeed:   uint8(a.active_speed),
		PhysState:     uint8(a.phys_state),
		LinkLayer:     verbs.LinkLayer(a.link_layer),
	}, nil
}

func (c *ctx) QueryGID(port uint8, index int) (verbs.GID, error) {
	var g C.union_ibv_gid
	if rc := C.ibv_query_gid(c.s.c, C.uint8_t(port), C.int(index), &g); rc != 0 {
		return verbs.GID{}, failRC("ibv_query_gid", rc)
	}
	return verbs.GID(*(*[16]byte)(unsafe.Pointer(&g))), nil
}

func (c *ctx) QueryPKey(port uint8, index int) (uint16, error) {
	var k C.__be16
	if rc := C.ibv_query_pkey(c.s.c, C.uint8_t(port), C.int(index), &k); rc != 0 {
		return 0, failRC("ibv_query_pkey", rc)
	}
	return uint16(k)>>8 | uint16(k)<<8, nil
}

func (c *ctx) AllocPD() (verbs.PDDriver, error) {
	p, err := C.ibv_alloc_pd(c.s.c)
	if p == nil {
		return nil, fail("ibv_alloc_pd", err)
	}
	r := &pd{c: c, pd: p}
	c.track(kindPD, r, true)
	return r, nil
}

// Close releases what the program left (QPs first, then memory regions, so
// that no peer reaches the memory afterwards) and closes the context.
func (c *ctx) Close() error {
	c.mu.Lock()
	if c.closed {
		c.mu.Unlock()
		return nil
	}
	c.closed = true
	objs := c.objs
	c.mu.Unlock()
	for _, m := range objs {
		for o := range m {
			o.release()
		}
	}
	s := c.s
	s.mu.Lock()
	delete(s.sinks, c)
	s.mu.Unlock()
	opened.mu.Lock()
	defer opened.mu.Unlock()
	if s.refs--; s.refs == 0 {
		delete(opened.m, c.dev.dev)
		s.close()
	}
	return nil
}

// track adds o to the objects Close releases, or with add false removes
// it.
func (c *ctx) track(kind int, o releaser, add bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.closed {
		return
	}
	if c.objs[kind] == nil {
		c.objs[kind] = map[releaser]bool{}
	}
	if add {
		c.objs[kind][o] = true
	} else {
		delete(c.objs[kind], o)
	}
}

// life is what the provider's objects share: each is destroyed once, by
// the program or by Context.Close, whichever comes first.
type life struct {
	mu   sync.Mutex
	gone bool
}

// end destroys the object o of context c with destroy, the C call op.
func (l *life) end(c *ctx, kind int, o releaser, op string, destroy func() C.int) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.gone {
		return nil
	}
	if rc := destroy(); rc != 0 {
		return failRC(op, rc)
	}
	l.gone = true
	c.track(kind, o, false)
	return nil
}

// pd is a protection domain.
type pd struct {
	life
	c  *ctx
	pd *C.struct_ibv_pd
}

func (p *pd) Dealloc() error {
	return p.end(p.c, kindPD, p, "ibv_dealloc_pd", func() C.int { return C.ibv_dealloc_pd(p.pd) })
}

// mr is a memory region; its buffer is pinned until Dereg.
type mr struct {
	life
	c      *ctx
	mr     *C.struct_ibv_mr
	buf    []byte
	pin    runtime.Pinner
	lo, hi uint64
}

// RegMR registers buf (ibv_reg_mr), pinning it for the region's life.
func (p *pd) RegMR(buf []byte, access verbs.AccessFlags) (verbs.MRDriver, error) {
	m := &mr{c: p.c, buf: buf}
	base := unsafe.Pointer(unsafe.SliceData(buf))
	m.pin.Pin(base)
	r, err := C.ibv_reg_mr(p.pd, base, C.size_t(len(buf)), C.int(access))
	if r == nil {
		m.pin.Unpin()
		return nil, fail("ibv_reg_mr", err)
	}
	m.mr = r
	m.lo = uint64(uintptr(base))
	m.hi = m.lo + uint64(len(buf))
	p.c.s.mu.Lock()
	p.c.s.byMRKey[uint32(r.lkey)] = m
	p.c.s.mu.Unlock()
	p.c.track(kindMR, m, true)
	return m, nil
}

func (m *mr) Keys() (uint32, uint32) { return uint32(m.mr.lkey), uint32(m.mr.rkey) }
func (m *mr) Addr() uint64           { return m.lo }

// Dereg deregisters the region (ibv_dereg_mr) and unpins its buffer.
func (m *mr) Dereg() error {
	lkey := uint32(m.mr.lkey)
	return m.end(m.c, kindMR, m, "ibv_dereg_mr", func() C.int {
		if rc := C.ibv_dereg_mr(m.mr); rc != 0 {
			return rc
		}
		m.c.s.mu.Lock()
		delete(m.c.s.byMRKey, lkey)
		m.c.s.mu.Unlock()
		m.pin.Unpin()
		return 0
	})
}

// mw is a memory window.
type mw struct {
	life
	c  *ctx
	mw *C.struct_ibv_mw
}

func (p *pd) AllocMW(t verbs.MWType) (verbs.MWDriver, error) {
	w, err := C.ibv_alloc_mw(p.pd, C.enum_ibv_mw_type(t))
	if w == nil {
		return nil, fail("ibv_alloc_mw", err)
	}
	r := &mw{c: p.c, mw: w}
	p.c.track(kindMW, r, true)
	return r, nil
}

func (w *mw) RKey() uint32 { return uint32(w.mw.rkey) }

func (w *mw) Dealloc() error {
	return w.end(w.c, kindMW, w, "ibv_dealloc_mw", func() C.int { return C.ibv_dealloc_mw(w.mw) })
}

// ah is an address handle.
type ah struct {
	life
	c  *ctx
	ah *C.struct_ibv_ah
}

func cAHAttr(a *verbs.AHAttr) C.struct_ibv_ah_attr {
	var c C.struct_ibv_ah_attr
	*(*[16]byte)(unsafe.Pointer(&c.grh.dgid)) = a.GRH.DGID
	c.grh.flow_label = C.uint32_t(a.GRH.FlowLabel)
	c.grh.sgid_index = C.uint8_t(a.GRH.SGIDIndex)
	c.grh.hop_limit = C.uint8_t(a.GRH.HopLimit)
	c.grh.traffic_class = C.uint8_t(a.GRH.TrafficClass)
	c.dlid = C.uint16_t(a.DLID)
	c.sl = C.uint8_t(a.SL)
	c.src_path_bits = C.uint8_t(a.SrcPathBits)
	c.static_rate = C.uint8_t(a.StaticRate)
	if a.IsGlobal {
		c.is_global = 1
	}
	c.port_num = C.uint8_t(a.PortNum)
	return c
}

func goAHAttr(c *C.struct_ibv_ah_attr) verbs.AHAttr {
	return verbs.AHAttr{
		GRH: verbs.GlobalRoute{
			DGID:         verbs.GID(*(*[16]byte)(unsafe.Pointer(&c.grh.dgid))),
			FlowLabel:    uint32(c.grh.flow_label),
			SGIDIndex:    uint8(c.grh.sgid_index),
			HopLimit:     uint8(c.grh.hop_limit),
			TrafficClass: uint8(c.grh.traffic_class),
		},
		DLID:        uint16(c.dlid),
		SL:          uint8(c.sl),
		SrcPathBits: uint8(c.src_path_bits),
		StaticRate:  uint8(c.static_rate),
		IsGlobal:    c.is_global != 0,
		PortNum:     uint8(c.port_num),
	}
}

func (p *pd) CreateAH(attr *verbs.AHAttr) (verbs.AHDriver, error) {
	a := cAHAttr(attr)
	if a.port_num == 0 {
		a.port_num = 1
	}
	h, err := C.ibv_create_ah(p.pd, &a)
	if h == nil {
		return nil, fail("ibv_create_ah", err)
	}
	r := &ah{c: p.c, ah: h}
	p.c.track(kindAH, r, true)
	return r, nil
}

func (h *ah) Destroy() error {
	return h.end(h.c, kindAH, h, "ibv_destroy_ah", func() C.int { return C.ibv_destroy_ah(h.ah) })
}

func (c *ctx) CreateCQ(cqe int, notify func()) (verbs.CQDriver, error) {
	return c.CreateCQOnVector(cqe, notify, 0)
}

// NumCompVectors implements verbs.CompVectors: the context's
// num_comp_vectors.
func (c *ctx) NumCompVectors() int { return int(c.s.c.num_comp_vectors) }

// CreateCQOnVector implements verbs.CompVectors (ibv_create_cq's
// comp_vector).
func (c *ctx) CreateCQOnVector(cqe int, notify func(), vector int) (verbs.CQDriver, error) {
	return c.newCQ("ibv_create_cq", notify, func(ch *C.struct_ibv_comp_channel) (*C.struct_ibv_cq, error) {
		q, err := C.ibv_create_cq(c.s.c, C.int(cqe), nil, ch, C.int(vector))
		if q == nil {
			return nil, fail("ibv_create_cq", err)
		}
		return q, nil
	})
}

// newCQ makes a CQ with create, on a completion channel of its own.
func (c *ctx) newCQ(op string, notify func(), create func(*C.struct_ibv_comp_channel) (*C.struct_ibv_cq, error)) (*cq, error) {
	ch, err := C.ibv_create_comp_channel(c.s.c)
	if ch == nil {
		return nil, fail("ibv_create_comp_channel", err)
	}
	q, err := create(ch)
	if err != nil {
		C.ibv_destroy_comp_channel(ch)
		return nil, err
	}
	fd, err := syscall.Dup(int(ch.fd))
	if err == nil {
		err = syscall.SetNonblock(fd, true)
	}
	if err != nil {
		C.ibv_destroy_cq(q)
		C.ibv_destroy_comp_channel(ch)
		return nil, fail(op, err)
	}
	r := &cq{c: c, cq: q, ch: ch, f: os.NewFile(uintptr(fd), "ibv-cq"), notify: notify, done: make(chan struct{}), wake: make(chan struct{})}
	if notify != nil {
		r.start()
	}
	c.s.mu.Lock()
	c.s.byCQ[q] = r
	c.s.mu.Unlock()
	c.track(kindCQ, r, true)
	return r, nil
}

func (p *pd) CreateSRQ(attr *verbs.SRQInitAttr) (verbs.SRQDriver, error) {
	var a C.struct_ibv_srq_init_attr
	a.attr.max_wr = C.uint32_t(attr.Attr.MaxWR)
	a.attr.max_sge = C.uint32_t(max(attr.Attr.MaxSGE, 1))
	a.attr.srq_limit = C.uint32_t(attr.Attr.SRQLimit)
	s, err := C.ibv_create_srq(p.pd, &a)
	if s == nil {
		return nil, fail("ibv_create_srq", err)
	}
	attr.Attr.MaxWR, attr.Attr.MaxSGE = uint32(a.attr.max_wr), uint32(a.attr.max_sge)
	r := &srq{c: p.c, srq: s}
	p.c.s.mu.Lock()
	p.c.s.bySRQ[s] = r
	p.c.s.mu.Unlock()
	p.c.track(kindSRQ, r, true)
	return r, nil
}

func (p *pd) CreateQP(attr *verbs.QPInitAttr) (verbs.QPDriver, error) {
	if attr.QPType == verbs.QPTGSI {
		return nil, verbs.Errorf("ibv_create_qp", verbs.ErrNotSupported, "the kernel owns QP1 on rdma-core devices")
	}
	if attr.QPType == verbs.QPTXRCSend {
		return p.createXRCSendQP(attr) // see xrc.go
	}
	scq, ok1 := verbs.CQDriverOf(attr.SendCQ).(*cq)
	rcq, ok2 := verbs.CQDriverOf(attr.RecvCQ).(*cq)
	if !ok1 || !ok2 {
		return nil, verbs.Errorf("ibv_create_qp", verbs.ErrInvalidArgument, "CQ of another provider")
	}
	var a C.struct_ibv_qp_init_attr
	a.send_cq, a.recv_cq = scq.cq, rcq.cq
	if attr.SRQ != nil {
		s, ok := verbs.SRQDriverOf(attr.SRQ).(*srq)
		if !ok {
			return nil, verbs.Errorf("ibv_create_qp", verbs.ErrInvalidArgument, "SRQ of another provider")
		}
		a.srq = s.srq
	}
	a.cap.max_send_wr = C.uint32_t(attr.Cap.MaxSendWR)
	a.cap.max_recv_wr = C.uint32_t(attr.Cap.MaxRecvWR)
	a.cap.max_send_sge = C.uint32_t(attr.Cap.MaxSendSGE)
	a.cap.max_recv_sge = C.uint32_t(attr.Cap.MaxRecvSGE)
	a.cap.max_inline_data = C.uint32_t(attr.Cap.MaxInlineData)
	a.qp_type = C.enum_ibv_qp_type(attr.QPType)
	if attr.SQSigAll {
		a.sq_sig_all = 1
	}
	q, err := C.ibv_create_qp(p.pd, &a)
	if q == nil {
		return nil, fail("ibv_create_qp", err)
	}
	attr.Cap = verbs.QPCap{
		MaxSendWR:     uint32(a.cap.max_send_wr),
		MaxRecvWR:     uint32(a.cap.max_recv_wr),
		MaxSendSGE:    uint32(a.cap.max_send_sge),
		MaxRecvSGE:    uint32(a.cap.max_recv_sge),
		MaxInlineData: uint32(a.cap.max_inline_data),
	}
	r := &qp{c: p.c, qp: q, typ: attr.QPType, num: uint32(q.qp_num)}
	p.c.s.mu.Lock()
	p.c.s.byQPN[r.num] = append(p.c.s.byQPN[r.num], p.c)
	p.c.s.mu.Unlock()
	p.c.track(kindQP, r, true)
	return r, nil
}

func (m *mr) release() { m.Dereg() }
func (h *ah) release() { h.Destroy() }
func (w *mw) release() { w.Dealloc() }
func (p *pd) release() { p.Dealloc() }
