package nvmeof

import (
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"net/netip"
	"slices"
	"strconv"
	"sync"
	"time"

	"github.com/rdmago/rdmago/nvmeof/wire"
	"github.com/rdmago/rdmago/rdmacm"
	"github.com/rdmago/rdmago/verbs"
)

// TargetOptions configure a Target. The zero value, or nil, is usable.
type TargetOptions struct {
	// BlockSize is the namespaces' logical block size: 512 (the default)
	// or 4096.
	BlockSize int
	// MaxIOQueues bounds the I/O queues of each controller; 0 means 8.
	MaxIOQueues int
	// Hosts lists the host NQNs allowed to connect; empty means any host
	// (nvmet's attr_allow_any_host).
	Hosts []string
	// Logf, if set, is told of each host's controller coming and going
	// and of connections refused.
	Logf func(format string, args ...any)
}

// Target is an NVMe over Fabrics target on RDMA (Linux's nvmet-rdma):
// subsystems of namespaces served to hosts on the addresses it listens
// on, with a discovery controller naming them. Each host that connects
// gets a controller of its own (the dynamic controller model).
type Target struct {
	opts  TargetOptions
	shift uint8

	mu        sync.Mutex
	closed    bool
	subs      map[string]*subsystem
	ctrls     map[uint16]*targetCtrl
	nextID    uint16
	listeners []*rdmacm.Listener
	queues    map[*targetQueue]bool
	pending   map[*rdmacm.Conn]*targetQueue // set up, not yet accepted
	wg        sync.WaitGroup
}

type subsystem struct {
	nqn    string
	serial string
	ns     []*namespace
}

type namespace struct {
	id     uint32
	st     Storage
	blocks uint64
	nguid  [16]byte
}

// NewTarget returns a target with no subsystems; opts may be nil.
func NewTarget(opts *TargetOptions) (*Target, error) {
	t := &Target{subs: map[string]*subsystem{}, ctrls: map[uint16]*targetCtrl{}, queues: map[*targetQueue]bool{},
		pending: map[*rdmacm.Conn]*targetQueue{}, nextID: 1}
	if opts != nil {
		t.opts = *opts
	}
	switch t.opts.BlockSize {
	case 0, 512:
		t.shift = 9
	case 4096:
		t.shift = 12
	default:
		return nil, fmt.Errorf("nvmeof: block size %d: 512 or 4096", t.opts.BlockSize)
	}
	if t.opts.MaxIOQueues <= 0 {
		t.opts.MaxIOQueues = 8
	}
	return t, nil
}

// AddSubsystem adds subsystem nqn with a namespace for each storage, in
// order from namespace 1 (nvmet's subsystems/NQN/namespaces/N).
func (t *Target) AddSubsystem(nqn string, storage ...Storage) error {
	if nqn == "" || len(nqn) > wire.NQNLen-1 {
		return fmt.Errorf("nvmeof: subsystem NQN %q: must be 1 to %d bytes", nqn, wire.NQNLen-1)
	}
	if nqn == wire.DiscoveryNQN {
		return fmt.Errorf("nvmeof: %s is the discovery subsystem's NQN", nqn)
	}
	sum := sha256.Sum256([]byte(nqn))
	s := &subsystem{nqn: nqn, serial: fmt.Sprintf("%x", sum[:10])}
	for i, st := range storage {
		blocks := uint64(st.Size()) >> t.shift
		if blocks == 0 {
			return fmt.Errorf("nvmeof: namespace %d of %s is smaller than a block", i+1, nqn)
		}
		ns := &namespace{id: uint32(i + 1), st: st, blocks: blocks}
		h := sha256.Sum256([]byte(nqn + "/" + strconv.Itoa(i+1)))
		copy(ns.nguid[:], h[:])
		s.ns = append(s.ns, ns)
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.subs[nqn] != nil {
		return fmt.Errorf("nvmeof: subsystem %s exists", nqn)
	}
	t.subs[nqn] = s
	return nil
}

func (t *Target) logf(format string, args ...any) {
	if t.opts.Logf != nil {
		t.opts.Logf(format, args...)
	}
}

// Limits of the target's queues.
const (
	targetInline   = 8192      // in-capsule data of an I/O command
	targetMaxData  = 128 << 10 // what one command moves (MDTS 5: 32 pages of 4 KiB)
	targetMDTS     = 5
	targetDataBufs = 32 // data buffers of an I/O queue
	adminQueueMax  = 32 // the admin queue's entries, at most
	acceptors      = 4  // connection requests accepted at once
)

// Listen listens for hosts on addr ("host:port"; a host alone means port
// 4420) and serves them in the background until Close. It returns the
// address listened on.
func (t *Target) Listen(addr string) (netip.AddrPort, error) {
	t.mu.Lock()
	if t.closed {
		t.mu.Unlock()
		return netip.AddrPort{}, ErrClosed
	}
	t.mu.Unlock()
	opts := &rdmacm.Options{
		// Each command has at most two sends outstanding: an RDMA WRITE
		// or READ of its data, and its response (inline).
		Cap: verbs.QPCap{MaxSendWR: 2*maxQueueSize + 8, MaxRecvWR: maxQueueSize + 1, MaxSendSGE: 1, MaxRecvSGE: 1,
			MaxInlineData: wire.CompletionLen},
		SharedCQ: true,
		Setup:    t.setupQueue,
		ConnData: func(c *rdmacm.Conn) ([]byte, error) {
			return wire.CMRep{CRQSize: uint16(t.pendingQueue(c).depth)}.Bytes(), nil
		},
		Undo: t.undoQueue,
	}
	l, err := rdmacm.Listen(withPort(addr), opts)
	if err != nil {
		return netip.AddrPort{}, fmt.Errorf("nvmeof: listen: %w", err)
	}
	t.mu.Lock()
	if t.closed {
		t.mu.Unlock()
		l.Close()
		return netip.AddrPort{}, ErrClosed
	}
	t.listeners = append(t.listeners, l)
	// Accept waits for each connection to be established: several at
	// once, so that a host that dies halfway holds up no other.
	t.wg.Add(acceptors)
	t.mu.Unlock()
	for range acceptors {
		go t.serve(l)
	}
	return l.Addr(), nil
}

func (t *Target) serve(l *rdmacm.Listener) {
	defer t.wg.Done()
	for {
		c, err := l.Accept(context.Background())
		if err != nil {
			if errors.Is(err, verbs.ErrClosed) || t.isClosed() {
				return
			}
			t.logf("nvmeof: %v", err)
			continue
		}
		t.mu.Lock()
		q := t.pending[c]
		delete(t.pending, c)
		if t.closed {
			t.mu.Unlock()
			q.shutdownNow()
			continue
		}
		t.queues[q] = true
		t.mu.Unlock()
		q.start(q.completed, q.gone)
	}
}

func (t *Target) isClosed() bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.closed
}

func (t *Target) pendingQueue(c *rdmacm.Conn) *targetQueue {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.pending[c]
}

// setupQueue makes the queue a connection request asks for, as its
// private data describes it, before the request is accepted.
func (t *Target) setupQueue(c *rdmacm.Conn) error {
	req, err := wire.ParseCMReq(c.PrivateData)
	if err != nil {
		t.logf("nvmeof: refused %v: %v", c.RemoteAddr(), err)
		return err
	}
	depth := int(req.HSQSize) + 1
	switch {
	case req.RecFmt != 0:
		err = fmt.Errorf("record format %d", req.RecFmt)
	case req.QID == 0 && depth > adminQueueMax, depth > maxQueueSize, depth < 2:
		err = fmt.Errorf("a submission queue of %d entries", depth)
	}
	if err != nil {
		t.logf("nvmeof: refused queue %d from %v: %v", req.QID, c.RemoteAddr(), err)
		return err
	}
	q, err := newTargetQueue(t, c, req.QID, depth)
	if err != nil {
		return err
	}
	t.mu.Lock()
	t.pending[c] = q
	t.mu.Unlock()
	return nil
}

func (t *Target) undoQueue(c *rdmacm.Conn) {
	t.mu.Lock()
	q := t.pending[c]
	delete(t.pending, c)
	t.mu.Unlock()
	if q != nil {
		for _, mr := range q.mrs {
			mr.Dereg()
		}
	}
}

// Close stops listening, disconnects every host and waits until all is
// stopped. The storage is the caller's to close.
func (t *Target) Close() error {
	t.mu.Lock()
	if t.closed {
		t.mu.Unlock()
		return nil
	}
	t.closed = true
	ls := t.listeners
	qs := make([]*targetQueue, 0, len(t.queues))
	for q := range t.queues {
		qs = append(qs, q)
	}
	t.mu.Unlock()
	for _, l := range ls {
		l.Close()
	}
	for _, q := range qs {
		q.fail(ErrClosed)
	}
	t.wg.Wait()
	return nil
}

// newController makes the controller of a host's admin queue.
func (t *Target) newController(q *targetQueue, sub *subsystem, d wire.ConnectData, kato time.Duration) (*targetCtrl, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.closed {
		return nil, ErrClosed
	}
	// Controller IDs run from 1 to 0xffef (0xfff0 and up are reserved);
	// the next free one after the last given.
	id, free := t.nextID, false
	for range 0xffef {
		if id == 0 || id >= 0xfff0 {
			id = 1
		}
		if t.ctrls[id] == nil {
			free = true
			break
		}
		id++
	}
	if !free {
		return nil, errors.New("nvmeof: every controller ID is in use")
	}
	t.nextID = id + 1
	c := &targetCtrl{t: t, id: id, sub: sub, hostNQN: d.HostNQN, hostID: d.HostID, admin: q, kato: kato,
		io: map[uint16]*targetQueue{}, nIO: t.opts.MaxIOQueues}
	t.ctrls[id] = c
	if kato > 0 {
		// The host has kato to send a Keep Alive (or any admin command);
		// the grace beyond it is nvmet's.
		c.kaTimer = time.AfterFunc(kato+5*time.Second, func() {
			t.logf("nvmeof: controller %d of %s: keep-alive timeout, the host is gone", id, c.hostNQN)
			c.admin.fail(fmt.Errorf("%w: keep-alive timeout", ErrDisconnected))
		})
	}
	return c, nil
}

func (t *Target) controller(id uint16) *targetCtrl {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.ctrls[id]
}

func (t *Target) subsystem(nqn string) *subsystem {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.subs[nqn]
}

func (t *Target) hostAllowed(nqn string) bool {
	return len(t.opts.Hosts) == 0 || slices.Contains(t.opts.Hosts, nqn)
}

// discoveryLog builds the discovery log page for a host that asked on
// local: one entry per subsystem it may connect to, at that address.
func (t *Target) discoveryLog(hostNQN string, local netip.AddrPort) []byte {
	t.mu.Lock()
	nqns := make([]string, 0, len(t.subs))
	for nqn := range t.subs {
		nqns = append(nqns, nqn)
	}
	t.mu.Unlock()
	if !t.hostAllowed(hostNQN) {
		nqns = nil
	}
	slices.Sort(nqns)
	b := make([]byte, wire.DiscoveryHeaderLen+len(nqns)*wire.DiscoveryEntryLen)
	h := wire.DiscoveryHeader{GenCtr: 1, NumRec: uint64(len(nqns))}
	h.Put(b)
	fam := uint8(wire.AdrFamIPv4)
	if local.Addr().Is6() && !local.Addr().Is4In6() {
		fam = wire.AdrFamIPv6
	}
	for i, nqn := range nqns {
		e := wire.DiscoveryEntry{TrType: wire.TrTypeRDMA, AdrFam: fam, SubType: wire.SubTypeNVMe, TReq: wire.TReqNotSpecified,
			PortID: 1, CNTLID: 0xffff, ASQSZ: adminQueueMax, TrSvcID: strconv.Itoa(int(local.Port())), SubNQN: nqn,
			TrAddr: local.Addr().Unmap().WithZone("").String(), QPType: wire.RDMAQPTypeConnected,
			PRType: wire.RDMAPRTypeNotSpecfied, CMS: wire.RDMACMSRdmaCM}
		e.Put(b[wire.DiscoveryHeaderLen+i*wire.DiscoveryEntryLen:])
	}
	return b
}

// targetCtrl is a host's controller: its registers, its queues, its
// keep-alive timer.
type targetCtrl struct {
	t       *Target
	id      uint16
	sub     *subsystem // nil: the discovery controller
	hostNQN string
	hostID  [16]byte
	admin   *targetQueue
	kato    time.Duration
	kaTimer *time.Timer

	mu   sync.Mutex
	cc   uint32
	csts uint32
	nIO  int // I/O queues granted
	io   map[uint16]*targetQueue
	gone bool
}

func (c *targetCtrl) discovery() bool { return c.sub == nil }

// touch restarts the keep-alive timer.
func (c *targetCtrl) touch() {
	if c.kaTimer != nil {
		c.mu.Lock()
		kato := c.kato
		c.mu.Unlock()
		c.kaTimer.Reset(kato + 5*time.Second)
	}
}

// teardown ends the controller once its admin queue is gone: its I/O
// queues go too.
func (c *targetCtrl) teardown() {
	c.mu.Lock()
	if c.gone {
		c.mu.Unlock()
		return
	}
	c.gone = true
	qs := make([]*targetQueue, 0, len(c.io))
	for _, q := range c.io {
		qs = append(qs, q)
	}
	c.mu.Unlock()
	if c.kaTimer != nil {
		c.kaTimer.Stop()
	}
	for _, q := range qs {
		q.fail(fmt.Errorf("%w: the controller's admin queue went away", ErrDisconnected))
	}
	c.t.mu.Lock()
	delete(c.t.ctrls, c.id)
	c.t.mu.Unlock()
	c.t.logf("nvmeof: controller %d of %s for %s ended", c.id, c.subNQN(), c.hostNQN)
}

func (c *targetCtrl) subNQN() string {
	if c.sub == nil {
		return wire.DiscoveryNQN
	}
	return c.sub.nqn
}

// setCC writes the Controller Configuration register: enabling makes
// the controller ready, a shutdown request completes at once, and
// disabling resets it.
func (c *targetCtrl) setCC(v uint32) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.cc = v
	switch {
	case v&wire.CCShutdownMask != 0:
		c.csts = c.csts&^(3<<2) | wire.CSTSShutdown
	case v&wire.CCEnable != 0:
		c.csts = wire.CSTSReady
	default:
		c.csts = 0
	}
}

func (c *targetCtrl) enabled() bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.cc&wire.CCEnable != 0 && c.csts&wire.CSTSReady != 0
}

func (c *targetCtrl) identify() wire.Controller {
	id := wire.Controller{
		Serial: "", Model: "rdmago", Firmware: "1.0", MDTS: targetMDTS, CNTLID: c.id, Version: wire.Version(1, 3, 0),
		CtrlType: wire.ControllerIO, ACL: 3, AERL: 3, LPA: 1 << 2, KAS: 10, SQES: 0x66, CQES: 0x44, MaxCmd: maxQueueSize,
		VWC: 1, SGLS: wire.SGLSSupported | wire.SGLSKeyed | wire.SGLSOffset, SubNQN: c.subNQN(),
		IOCCSZ: (wire.CommandLen + targetInline) / 16, IORCSZ: wire.CompletionLen / 16, MSDBD: 1,
	}
	if c.sub != nil {
		id.Serial = c.sub.serial
		id.NN = uint32(len(c.sub.ns))
		id.MaxNSAttach = id.NN
	} else {
		id.CtrlType = wire.ControllerDiscovery
		id.Serial = "discovery"
	}
	return id
}

func (c *targetCtrl) namespace(nsid uint32) *namespace {
	if c.sub == nil || nsid == 0 || int(nsid) > len(c.sub.ns) {
		return nil
	}
	return c.sub.ns[nsid-1]
}
