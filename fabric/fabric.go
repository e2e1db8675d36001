package fabric

import (
	"context"
	"slices"
	"sync"
	"sync/atomic"
)

// Fabric is an open fabric (fi_fabric): the provider's network.
type Fabric struct {
	Attr FabricAttr
	prov Provider
}

// OpenFabric opens the fabric of info (fi_fabric).
func OpenFabric(info *Info) (*Fabric, error) {
	if info == nil || info.prov == nil || info.FabricAttr == nil {
		return nil, Errorf("fi_fabric", ErrInvalid, "the info does not come from GetInfo")
	}
	return &Fabric{Attr: *info.FabricAttr, prov: info.prov}, nil
}

// Provider returns the fabric's provider.
func (f *Fabric) Provider() Provider { return f.prov }

// Close closes the fabric (fi_close).
func (f *Fabric) Close() error { return nil }

// Domain is an open domain (fi_domain): an interface of the fabric,
// which owns memory registrations.
type Domain struct {
	Fabric *Fabric
	Attr   DomainAttr
	info   *Info

	drv DomainDriver // the provider's side, or nil

	mu      sync.Mutex
	mrs     map[uint64]*MR
	nextKey uint64
	closed  bool
}

// DomainDriver is the provider's side of a domain, for a provider whose
// domains own resources (a device context, a protection domain) and
// register memory themselves. Such a provider implements DomainOpener.
type DomainDriver interface {
	// RegMR registers buf for access: it returns the key peers name the
	// region by (requestedKey unless the provider picks keys), the
	// address they name its first byte by (0 when they name offsets) and
	// the provider's handle of the registration (MR.Driver).
	RegMR(buf []byte, access, requestedKey uint64) (key, addr uint64, handle any, err error)
	// DeregMR undoes RegMR.
	DeregMR(handle any) error
	// Close frees the domain's resources.
	Close() error
}

// DomainOpener is implemented by providers whose domains have a
// DomainDriver: OpenDomain calls it.
type DomainOpener interface {
	OpenDomain(d *Domain) (DomainDriver, error)
}

// DomainRef is a provider's view of a domain, given to its Endpoint
// call: the domain, the domain's driver (nil for a provider without
// DomainOpener) and the table of its memory regions, which the
// provider checks a peer's RMA against.
type DomainRef struct {
	*Domain
	Driver DomainDriver
	MRs    MRTable
}

func (d *Domain) ref() DomainRef { return DomainRef{Domain: d, Driver: d.drv, MRs: MRTable{d}} }

// MRTable is a domain's memory regions by key, as a provider sees them.
type MRTable struct{ d *Domain }

// OpenDomain opens the domain of info (fi_domain).
func (f *Fabric) OpenDomain(info *Info) (*Domain, error) {
	if info == nil || info.DomainAttr == nil {
		return nil, Errorf("fi_domain", ErrInvalid, "no domain attributes")
	}
	d := &Domain{Fabric: f, Attr: *info.DomainAttr, info: info.Dup(), mrs: map[uint64]*MR{}, nextKey: 1}
	if o, ok := f.prov.(DomainOpener); ok {
		drv, err := o.OpenDomain(d)
		if err != nil {
			return nil, err
		}
		d.drv = drv
	}
	return d, nil
}

// Close closes the domain (fi_close); it fails with ErrBusy while memory
// regions are registered.
func (d *Domain) Close() error {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.closed {
		return nil
	}
	if len(d.mrs) > 0 {
		return Errorf("fi_close", ErrBusy, "memory regions still registered")
	}
	d.closed = true
	if d.drv != nil {
		return d.drv.Close()
	}
	return nil
}

// MR is a registered memory region (fi_mr_reg).
type MR struct {
	d      *Domain
	Buf    []byte
	Access uint64
	key    uint64
	addr   uint64
	handle any
}

// MR access flags (fi_mr_reg's access).
const (
	AccessSend        = uint64(CapSend)
	AccessRecv        = uint64(CapRecv)
	AccessRead        = uint64(CapRead)
	AccessWrite       = uint64(CapWrite)
	AccessRemoteRead  = uint64(CapRemoteRead)
	AccessRemoteWrite = uint64(CapRemoteWrite)
)

// RegMR registers buf (fi_mr_reg). requestedKey is the key peers use
// unless the domain's mode has MRProvKey (then the domain picks it).
func (d *Domain) RegMR(buf []byte, access uint64, requestedKey uint64) (*MR, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.closed {
		return nil, Errorf("fi_mr_reg", ErrBadFD, "domain closed")
	}
	if d.drv != nil {
		key, addr, h, err := d.drv.RegMR(buf, access, requestedKey)
		if err != nil {
			return nil, err
		}
		m := &MR{d: d, Buf: buf, Access: access, key: key, addr: addr, handle: h}
		d.mrs[key] = m
		return m, nil
	}
	key := requestedKey
	if d.Attr.MRMode&MRProvKey != 0 {
		for d.mrs[d.nextKey] != nil {
			d.nextKey++
		}
		key = d.nextKey
		d.nextKey++
	} else if d.mrs[key] != nil {
		return nil, Errorf("fi_mr_reg", ErrNoKey, "key in use")
	}
	m := &MR{d: d, Buf: buf, Access: access, key: key}
	d.mrs[key] = m
	return m, nil
}

// Key returns the key peers name the region by (fi_mr_key).
func (m *MR) Key() uint64 { return m.key }

// Desc returns the region's local descriptor (fi_mr_desc).
func (m *MR) Desc() any { return m }

// Addr is the address peers name the region's first byte by in RMA
// operations: its virtual address on a domain in FI_MR_VIRT_ADDR mode
// (the verbs provider's), 0 where peers name offsets (the tcp
// provider's).
func (m *MR) Addr() uint64 { return m.addr }

// MRDriverOf returns the provider's handle of the region a local
// descriptor names (the handle its DomainDriver's RegMR returned), or
// nil when desc is not an MR's descriptor (MR.Desc). Providers use it on
// the desc arguments of the calls they are given.
func MRDriverOf(desc any) any {
	if m, ok := desc.(*MR); ok {
		return m.handle
	}
	return nil
}

// Close deregisters the region (fi_close).
func (m *MR) Close() error {
	m.d.mu.Lock()
	defer m.d.mu.Unlock()
	if m.d.mrs[m.key] != m {
		return nil
	}
	delete(m.d.mrs, m.key)
	if m.d.drv != nil {
		return m.d.drv.DeregMR(m.handle)
	}
	return nil
}

// Lookup returns the bytes [addr, addr+n) of the region with key if it
// grants access, addr an offset into the region (or a virtual address
// with MRVirtAddr, which this package does not offer).
func (t MRTable) Lookup(key, addr, n uint64, access uint64) ([]byte, bool) {
	d := t.d
	if d == nil {
		return nil, false
	}
	d.mu.Lock()
	m := d.mrs[key]
	d.mu.Unlock()
	if m == nil || m.Access&access != access || addr > uint64(len(m.Buf)) || n > uint64(len(m.Buf))-addr {
		return nil, false
	}
	return m.Buf[addr : addr+n], true
}

func (d *Domain) isClosed() bool {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.closed
}

// Info returns the info the domain was opened with.
func (d *Domain) Info() *Info { return d.info }

// Event types of an event queue (fi_eq_read's event).
type EventType uint32

// Events.
const (
	EventNotify     EventType = 0 // FI_NOTIFY
	EventConnReq    EventType = 1 // FI_CONNREQ: info describes the request
	EventConnected  EventType = 2 // FI_CONNECTED
	EventShutdown   EventType = 3 // FI_SHUTDOWN
	EventMRComplete EventType = 4 // FI_MR_COMPLETE
	EventAVComplete EventType = 5 // FI_AV_COMPLETE
)

var eventNames = [...]string{"FI_NOTIFY", "FI_CONNREQ", "FI_CONNECTED", "FI_SHUTDOWN", "FI_MR_COMPLETE", "FI_AV_COMPLETE"}

func (e EventType) String() string {
	if int(e) < len(eventNames) {
		return eventNames[e]
	}
	return "Unknown"
}

// EQEntry is a connection management event (struct fi_eq_cm_entry).
type EQEntry struct {
	Event EventType
	// FID is the endpoint (or passive endpoint) the event is about.
	FID any
	// Info is, for FI_CONNREQ, the request: pass it to Endpoint and
	// Accept or Reject it.
	Info *Info
	// Data is the peer's private data.
	Data []byte
}

// EQErrEntry is an event queue error (struct fi_eq_err_entry).
type EQErrEntry struct {
	FID     any
	Err     Errno
	ErrData []byte // the peer's private data of a rejection, say
}

// EQ is an event queue (fi_eq_open): connection management events.
type EQ struct {
	q queue[EQEntry, EQErrEntry]
}

// OpenEQ opens an event queue (fi_eq_open).
func (f *Fabric) OpenEQ() (*EQ, error) {
	return &EQ{q: newQueue[EQEntry, EQErrEntry]()}, nil
}

// Write queues an event (fi_eq_write); providers use it.
func (q *EQ) Write(e EQEntry) { q.q.push(e) }

// WriteErr queues an error entry; providers use it.
func (q *EQ) WriteErr(e EQErrEntry) { q.q.pushErr(e) }

// Read takes the next event without waiting (fi_eq_read). It fails with
// ErrAgain when there is none and ErrAvail when an error entry is
// waiting for ReadErr.
func (q *EQ) Read() (EQEntry, error) {
	var e [1]EQEntry
	_, err := q.q.take("fi_eq_read", e[:])
	return e[0], err
}

// SRead waits for the next event (fi_eq_sread), until ctx is done
// (fi_eq_sread's timeout: use context.WithTimeout).
func (q *EQ) SRead(ctx context.Context) (EQEntry, error) {
	for {
		e, err := q.Read()
		if err != ErrAgain {
			return e, err
		}
		if q.q.wait(ctx) != nil {
			return EQEntry{}, ErrAgain
		}
	}
}

// Wait blocks until the queue holds an event or an error entry, or ctx is
// done; it takes nothing.
func (q *EQ) Wait(ctx context.Context) error { return q.q.wait(ctx) }

// ReadErr takes the next error entry (fi_eq_readerr).
func (q *EQ) ReadErr() (EQErrEntry, error) { return q.q.takeErr() }

// Close closes the queue (fi_close).
func (q *EQ) Close() error {
	q.q.close()
	return nil
}

// CQFormat is a completion queue's entry format (enum fi_cq_format). Go
// completions carry every field; the format says which ones count.
type CQFormat int

// Formats.
const (
	CQFormatUnspec  CQFormat = iota // FI_CQ_FORMAT_UNSPEC
	CQFormatContext                 // FI_CQ_FORMAT_CONTEXT
	CQFormatMsg                     // FI_CQ_FORMAT_MSG
	CQFormatData                    // FI_CQ_FORMAT_DATA
	CQFormatTagged                  // FI_CQ_FORMAT_TAGGED
)

// CQEntry is a completion (struct fi_cq_tagged_entry, which holds the
// other formats' fields).
type CQEntry struct {
	Context any    // op_context: the context given with the operation
	Flags   uint64 // CompSend, CompRecv|CompMsg, ...
	Len     uint64 // bytes received
	Buf     []byte // where they were placed
	Data    uint64 // remote CQ data, with CompRemoteCQData
	Tag     uint64

	src Addr // the sender's handle plus one, or 0: see Source
}

// Source is the handle in the endpoint's AV of the sender of a received
// message, on an endpoint with FI_SOURCE (what fi_cq_readfrom returns
// beside the entry); AddrNotAvail if the provider does not say or the
// sender is not in the AV.
func (e CQEntry) Source() Addr { return e.src - 1 }

// WithSource returns e naming src as its sender (see Source). Providers
// with FI_SOURCE use it.
func (e CQEntry) WithSource(src Addr) CQEntry {
	e.src = src + 1
	return e
}

// CQErrEntry is a failed operation (struct fi_cq_err_entry).
type CQErrEntry struct {
	CQEntry
	OLen      uint64 // bytes that did not fit (ErrTrunc)
	Err       Errno
	ProvErrno int
	ErrData   []byte
}

// CQAttr describes a CQ to open (struct fi_cq_attr).
type CQAttr struct {
	Size   int
	Format CQFormat
}

// Progressor is what a provider's endpoint offers the CQs it is bound
// to: Progress moves its data without blocking (reading what the socket
// holds, sending what is queued). CQ.Read calls it first, so the
// goroutine that polls a CQ drives the endpoint with no goroutine in
// between, as libfabric's manual progress does; a provider with
// automatic progress moves data in the background too.
type Progressor interface {
	Progress()
}

// CQ is a completion queue (fi_cq_open).
type CQ struct {
	Attr CQAttr
	q    queue[CQEntry, CQErrEntry]

	mu  sync.Mutex                   // serializes attach and detach
	eps atomic.Pointer[[]Progressor] // never changed in place: Read takes it without mu
}

// OpenCQ opens a completion queue (fi_cq_open).
func (d *Domain) OpenCQ(attr *CQAttr) (*CQ, error) {
	cq := &CQ{q: newQueue[CQEntry, CQErrEntry]()}
	if attr != nil {
		cq.Attr = *attr
	}
	if cq.Attr.Format == CQFormatUnspec {
		cq.Attr.Format = CQFormatContext
	}
	return cq, nil
}

// attach has Read progress p; detach undoes it when the endpoint closes
// or is bound to another CQ.
func (cq *CQ) attach(p Progressor) {
	cq.mu.Lock()
	defer cq.mu.Unlock()
	eps := cq.progressors()
	if !slices.Contains(eps, p) {
		eps = append(slices.Clip(eps), p)
		cq.eps.Store(&eps)
	}
}

func (cq *CQ) detach(p Progressor) {
	cq.mu.Lock()
	defer cq.mu.Unlock()
	eps := cq.progressors()
	if i := slices.Index(eps, p); i >= 0 {
		eps = slices.Delete(slices.Clone(eps), i, i+1)
		cq.eps.Store(&eps)
	}
}

// progressors returns the endpoints Read drives.
func (cq *CQ) progressors() []Progressor {
	if eps := cq.eps.Load(); eps != nil {
		return *eps
	}
	return nil
}

func (cq *CQ) push(e CQEntry) { cq.q.push(e) }

func (cq *CQ) pushErr(e CQErrEntry) { cq.q.pushErr(e) }

// Read moves up to len(buf) completions into buf (fi_cq_read), driving
// the bound endpoints' progress first. It fails with ErrAgain when there
// are none and ErrAvail when an error completion waits for ReadErr.
func (cq *CQ) Read(buf []CQEntry) (int, error) {
	for _, p := range cq.progressors() {
		p.Progress()
	}
	return cq.q.take("fi_cq_read", buf)
}

// ReadFrom is Read that also gives each completion's sender
// (fi_cq_readfrom): src[i] is the AV handle of the sender of buf[i] (see
// CQEntry.Source). src must be as long as buf.
func (cq *CQ) ReadFrom(buf []CQEntry, src []Addr) (int, error) {
	if len(src) < len(buf) {
		return 0, Errorf("fi_cq_readfrom", ErrInvalid, "fewer source slots than entries")
	}
	n, err := cq.Read(buf)
	for i := range buf[:n] {
		src[i] = buf[i].Source()
	}
	return n, err
}

// SRead waits for at least one completion (fi_cq_sread) until ctx is done
// (then ErrAgain, as fi_cq_sread's timeout). The endpoints' automatic
// progress fills the queue meanwhile.
func (cq *CQ) SRead(ctx context.Context, buf []CQEntry) (int, error) {
	for {
		w := cq.q.waiter()
		n, err := cq.Read(buf)
		if err != ErrAgain {
			return n, err
		}
		select {
		case <-w:
		case <-ctx.Done():
			return 0, ErrAgain
		}
	}
}

// Wait blocks until the CQ holds a completion or an error entry, or ctx
// is done (fi_cq_sread with a count of 0); it takes nothing.
func (cq *CQ) Wait(ctx context.Context) error { return cq.q.wait(ctx) }

// ReadErr takes the next error completion (fi_cq_readerr).
func (cq *CQ) ReadErr() (CQErrEntry, error) { return cq.q.takeErr() }

// Close closes the queue (fi_close).
func (cq *CQ) Close() error {
	cq.q.close()
	return nil
}

// Bind flags (fi_ep_bind).
const (
	BindTransmit = uint64(CapSend) // FI_TRANSMIT
	BindRecv     = uint64(CapRecv) // FI_RECV
)

// Msg is a message for SendMsg (struct fi_msg, one iov).
type Msg struct {
	Buf     []byte
	Desc    any    // the region's descriptor (MR.Desc), or nil
	Addr    Addr   // the destination (connectionless endpoints)
	Context any    // returned in the completion
	Data    uint64 // remote CQ data, with FlagRemoteCQData
}

// FlagRemoteCQData (FI_REMOTE_CQ_DATA) sends Msg.Data with the message.
const FlagRemoteCQData = uint64(CapRemoteCQData)

// Opt names an endpoint option (fi_getopt, fi_setopt), with libfabric's
// values.
type Opt int

// Endpoint options.
const (
	OptMinMultiRecv  Opt = 0 // FI_OPT_MIN_MULTI_RECV
	OptCMDataSize    Opt = 1 // FI_OPT_CM_DATA_SIZE: the most private data Connect, Accept and Reject carry
	OptBufferedMin   Opt = 2 // FI_OPT_BUFFERED_MIN
	OptBufferedLimit Opt = 3 // FI_OPT_BUFFERED_LIMIT
	OptSendBufSize   Opt = 4 // FI_OPT_SEND_BUF_SIZE
	OptRecvBufSize   Opt = 5 // FI_OPT_RECV_BUF_SIZE
	OptTxSize        Opt = 6 // FI_OPT_TX_SIZE
	OptRxSize        Opt = 7 // FI_OPT_RX_SIZE
)
