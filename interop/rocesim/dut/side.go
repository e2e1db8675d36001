// Package dut is the device-under-test side of roce-sim
// (github.com/datenlord/roce-sim), a RoCEv2 conformance framework whose
// manager drives two "sides" over gRPC: a scapy simulator that can
// misbehave on purpose, and a real RDMA device. This package is that real
// device, written over the verbs API only, so it drives whatever provider
// the program links in: the software device (rxe) or rdma-core's.
//
// Each method of Side is one RPC of roce-sim's side.proto and behaves as
// roce-sim's own device side (src/sanity_side.rs over libibverbs) does,
// with the differences its doc comment names. Objects are numbered as
// the manager expects: OpenDevice starts the side afresh, and the PD,
// CQ and QP it makes are number 0.
//
// Operations wait for their completion, as the Rust side's do, and fail
// with the completion's status unless the request allowed an error. One
// thing is checked apart from the RPCs' replies: that a receive posted
// with LocalRecv completes successfully, with the immediate data it names
// if any. A failed check is logged through Side.Logf (with the prefix
// CheckFailedPrefix) and kept for Failures, since the manager never asks.
package dut

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/rdmago/rdmago/verbs"
)

// CheckFailedPrefix starts every log line of a check that failed outside
// an RPC's reply, so that a runner can find it in the log.
const CheckFailedPrefix = "CHECK FAILED: "

// OpWait bounds how long an operation waits for its completion. With a
// finite retry count the device's own timers end it well before.
const OpWait = 60 * time.Second

// PollWait bounds how long PollComplete waits for a completion.
const PollWait = 5 * time.Second

// Side is one device-under-test side: the objects the manager's RPCs
// have created. Its methods are safe for concurrent use.
type Side struct {
	// Devices lists the devices OpenDevice chooses from; nil means
	// verbs.Devices (ibv_get_device_list).
	Devices func() ([]*verbs.Device, error)
	// Logf, if not nil, receives what the side did and every failed
	// check.
	Logf func(format string, args ...any)

	wrid atomic.Uint64

	mu       sync.Mutex
	dev      *device
	pds      []*verbs.PD
	cqs      []*cq
	qps      []*qp
	mrs      []*verbs.MR
	failures []string
}

// device is the open device and what OpenDevice said about connecting.
type device struct {
	name string
	ctx  *verbs.Context
	conn ConnAttr
}

// qp is a queue pair and the attributes it connects with.
type qp struct {
	qp   *verbs.QP
	cq   *cq
	conn *ConnAttr // nil: ConnectQP's own attributes
}

// ConnAttr are the attributes a QP is connected with (the fields
// OpenDevice and ConnectQp share with struct ibv_qp_attr).
type ConnAttr struct {
	Access          verbs.AccessFlags // qp_access_flags
	Port            uint8             // port_num
	GIDIndex        uint8             // ah_attr.grh.sgid_index
	Timeout         uint8             // local ACK timeout, 4.096 µs × 2^Timeout
	Retry           uint8             // retry_cnt
	RNRRetry        uint8             // rnr_retry
	MTU             int               // path MTU in bytes (256 … 4096)
	SQPSN           uint32            // sq_psn
	RQPSN           uint32            // rq_psn
	MaxRdAtomic     uint8             // max_rd_atomic
	MaxDestRdAtomic uint8             // max_dest_rd_atomic
	MinRNRTimer     uint8             // min_rnr_timer
}

// OpenParams is OpenDevice's request.
type OpenParams struct {
	DevName string // "" for the first device
	Conn    ConnAttr
	CQSize  int // entries of the CQ made for the QP (at least 1)
	// MaxCQE is how many completions one poll takes (at least 1).
	MaxCQE int
	// ManualPoll: completions are taken only while an RPC waits for one,
	// never in the background, so a CQ can fill up (roce-sim's
	// cq_poll_trigger "manual").
	ManualPoll bool
}

// OpenResult is OpenDevice's reply.
type OpenResult struct {
	DevName string
	QPNum   uint32
	LID     uint16
	GID     verbs.GID
}

// MRInfo describes a memory region CreateMR made.
type MRInfo struct {
	ID   uint32
	Addr uint64
	Len  uint64
	LKey uint32
	RKey uint32
}

// Remote is the peer a QP connects to.
type Remote struct {
	QPNum uint32
	LID   uint16
	GID   verbs.GID
}

func (s *Side) logf(format string, args ...any) {
	if s.Logf != nil {
		s.Logf(format, args...)
	}
}

// fail records a check that failed outside any reply.
func (s *Side) fail(format string, args ...any) {
	msg := fmt.Sprintf(format, args...)
	s.mu.Lock()
	s.failures = append(s.failures, msg)
	s.mu.Unlock()
	s.logf("%s%s", CheckFailedPrefix, msg)
}

// Failures returns the checks that failed outside any reply so far.
func (s *Side) Failures() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]string(nil), s.failures...)
}

// OpenDevice opens the device named p.DevName (the first device if
// empty) and makes PD 0, CQ 0 and an RC QP 0 in INIT, which ConnectQP
// later connects with p.Conn, as roce-sim's Rust side builds its one
// connection from this request. Whatever the side held before is
// released first.
func (s *Side) OpenDevice(p OpenParams) (OpenResult, error) {
	if err := s.Close(); err != nil {
		return OpenResult{}, err
	}
	list := s.Devices
	if list == nil {
		list = verbs.Devices
	}
	devs, err := list()
	if err != nil {
		return OpenResult{}, err
	}
	var d *verbs.Device
	for _, x := range devs {
		if p.DevName == "" || x.Name() == p.DevName {
			d = x
			break
		}
	}
	if d == nil {
		return OpenResult{}, fmt.Errorf("no RDMA device %q (have %d)", p.DevName, len(devs))
	}
	ctx, err := d.Open()
	if err != nil {
		return OpenResult{}, err
	}
	s.mu.Lock()
	s.dev = &device{name: d.Name(), ctx: ctx, conn: p.Conn}
	s.mu.Unlock()
	res, err := s.openObjects(p)
	if err != nil {
		s.Close()
		return OpenResult{}, err
	}
	s.logf("opened %s: QP %#x, GID %s", res.DevName, res.QPNum, res.GID)
	return res, nil
}

// openObjects makes OpenDevice's PD, CQ and QP.
func (s *Side) openObjects(p OpenParams) (OpenResult, error) {
	pd, err := s.CreatePD("")
	if err != nil {
		return OpenResult{}, err
	}
	c, err := s.createCQ("", p.CQSize, p.MaxCQE, p.ManualPoll)
	if err != nil {
		return OpenResult{}, err
	}
	s.mu.Lock()
	vpd, dev := s.pds[pd], s.dev
	s.mu.Unlock()
	_, num, err := s.createQP(vpd, verbs.QPTRC, c, true)
	if err != nil {
		return OpenResult{}, err
	}
	port, err := dev.ctx.QueryPort(p.Conn.Port)
	if err != nil {
		return OpenResult{}, err
	}
	gid, err := dev.ctx.QueryGID(p.Conn.Port, int(p.Conn.GIDIndex))
	if err != nil {
		return OpenResult{}, err
	}
	return OpenResult{DevName: dev.name, QPNum: num, LID: port.LID, GID: gid}, nil
}

// Close releases everything the side holds: QPs, CQs (and their
// goroutines), memory regions, PDs and the device context.
func (s *Side) Close() error {
	s.mu.Lock()
	qps, cqs, mrs, pds, dev := s.qps, s.cqs, s.mrs, s.pds, s.dev
	s.qps, s.cqs, s.mrs, s.pds, s.dev = nil, nil, nil, nil, nil
	s.mu.Unlock()
	var errs []error
	for _, q := range qps {
		errs = append(errs, q.qp.Destroy())
	}
	for _, c := range cqs {
		c.stop()
		errs = append(errs, c.cq.Destroy())
	}
	for _, m := range mrs {
		errs = append(errs, m.Dereg())
	}
	for _, pd := range pds {
		errs = append(errs, pd.Dealloc())
	}
	if dev != nil {
		errs = append(errs, dev.ctx.Close())
	}
	return errors.Join(errs...)
}

// context returns the open device if name is empty or names it.
func (s *Side) context(name string) (*device, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.dev == nil {
		return nil, errors.New("no device is open: OpenDevice first")
	}
	if name != "" && name != s.dev.name {
		return nil, fmt.Errorf("device %q is not open (%q is)", name, s.dev.name)
	}
	return s.dev, nil
}

// CreatePD allocates a protection domain (ibv_alloc_pd) and returns its
// number. roce-sim's Rust side leaves this RPC unimplemented.
func (s *Side) CreatePD(dev string) (uint32, error) {
	d, err := s.context(dev)
	if err != nil {
		return 0, err
	}
	pd, err := d.ctx.AllocPD()
	if err != nil {
		return 0, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	s.pds = append(s.pds, pd)
	return uint32(len(s.pds) - 1), nil
}

// CreateCQ creates a completion queue of size entries (ibv_create_cq)
// whose completions are taken in the background, and returns its number.
// roce-sim's Rust side leaves this RPC unimplemented.
func (s *Side) CreateCQ(dev string, size int) (uint32, error) {
	c, err := s.createCQ(dev, size, 1, false)
	if err != nil {
		return 0, err
	}
	return c.id, nil
}

func (s *Side) createCQ(dev string, size, maxCQE int, manual bool) (*cq, error) {
	d, err := s.context(dev)
	if err != nil {
		return nil, err
	}
	vcq, err := d.ctx.CreateCQ(max(size, 1), nil, 0)
	if err != nil {
		return nil, err
	}
	c := newCQ(s, vcq, maxCQE, manual)
	s.mu.Lock()
	c.id = uint32(len(s.cqs))
	s.cqs = append(s.cqs, c)
	s.mu.Unlock()
	return c, nil
}

// CreateQP creates a QP of type t (RC or UC) in PD pdID whose send and
// receive completions go to CQ cqID (ibv_create_qp), moves it to INIT
// and returns its number and QP number. ConnectQP connects it with its
// own request's attributes. roce-sim's Rust side leaves this RPC
// unimplemented.
func (s *Side) CreateQP(pdID uint32, t verbs.QPType, cqID uint32) (id, qpNum uint32, err error) {
	if t != verbs.QPTRC && t != verbs.QPTUC {
		return 0, 0, fmt.Errorf("QP type %s: roce-sim asks for RC or UC", t)
	}
	s.mu.Lock()
	pd, perr := index(s.pds, pdID, "PD")
	c, cerr := index(s.cqs, cqID, "CQ")
	s.mu.Unlock()
	if err := errors.Join(perr, cerr); err != nil {
		return 0, 0, err
	}
	return s.createQP(pd, t, c, false)
}

func (s *Side) createQP(pd *verbs.PD, t verbs.QPType, c *cq, opened bool) (id, qpNum uint32, err error) {
	s.mu.Lock()
	dev := s.dev
	s.mu.Unlock()
	if dev == nil {
		return 0, 0, errors.New("no device is open: OpenDevice first")
	}
	vqp, err := pd.CreateQP(&verbs.QPInitAttr{
		SendCQ: c.cq, RecvCQ: c.cq, QPType: t,
		Cap: verbs.QPCap{MaxSendWR: 64, MaxRecvWR: 64, MaxSendSGE: 1, MaxRecvSGE: 1},
	})
	if err != nil {
		return 0, 0, err
	}
	q := &qp{qp: vqp, cq: c}
	if opened {
		q.conn = &dev.conn
	}
	port := dev.conn.Port
	if err := vqp.Modify(&verbs.QPAttr{QPState: verbs.QPSInit, PortNum: port, QPAccessFlags: dev.conn.Access},
		verbs.QPAttrState|verbs.QPAttrPKeyIndex|verbs.QPAttrPort|verbs.QPAttrAccessFlags); err != nil {
		vqp.Destroy()
		return 0, 0, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	s.qps = append(s.qps, q)
	return uint32(len(s.qps) - 1), vqp.Num(), nil
}

// index returns list[i], or an error naming what is missing.
func index[T any](list []T, i uint32, what string) (T, error) {
	if int64(i) >= int64(len(list)) {
		var zero T
		return zero, fmt.Errorf("no %s %d (have %d)", what, i, len(list))
	}
	return list[i], nil
}

// CreateMR registers a zeroed buffer of length bytes in PD pdID with the
// given access (ibv_reg_mr). The Rust side registers it in its one PD
// whatever pdID says; here pdID counts.
func (s *Side) CreateMR(pdID uint32, access verbs.AccessFlags, length uint64) (MRInfo, error) {
	if length == 0 || length > 1<<30 {
		return MRInfo{}, fmt.Errorf("memory region of %d bytes: want 1 byte to 1 GiB", length)
	}
	s.mu.Lock()
	pd, err := index(s.pds, pdID, "PD")
	s.mu.Unlock()
	if err != nil {
		return MRInfo{}, err
	}
	mr, err := pd.RegMR(make([]byte, length), access)
	if err != nil {
		return MRInfo{}, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	s.mrs = append(s.mrs, mr)
	return MRInfo{ID: uint32(len(s.mrs) - 1), Addr: mr.Addr(), Len: uint64(mr.Len()), LKey: mr.LKey(), RKey: mr.RKey()}, nil
}

// QueryPort returns the port's LID (ibv_query_port; 0 on RoCE).
func (s *Side) QueryPort(dev string, port uint8) (uint16, error) {
	d, err := s.context(dev)
	if err != nil {
		return 0, err
	}
	a, err := d.ctx.QueryPort(port)
	return a.LID, err
}

// QueryGID returns GID index of port (ibv_query_gid).
func (s *Side) QueryGID(dev string, port uint8, index int) (verbs.GID, error) {
	d, err := s.context(dev)
	if err != nil {
		return verbs.GID{}, err
	}
	return d.ctx.QueryGID(port, index)
}

// ConnectQP moves QP qpID through RTR to RTS towards r. OpenDevice's QP
// connects with OpenDevice's attributes, as the Rust side's does (the
// manager passes a case's attributes there); a QP of CreateQP with attr.
func (s *Side) ConnectQP(dev string, qpID uint32, r Remote, attr ConnAttr) error {
	if _, err := s.context(dev); err != nil {
		return err
	}
	s.mu.Lock()
	q, err := index(s.qps, qpID, "QP")
	s.mu.Unlock()
	if err != nil {
		return err
	}
	if q.conn != nil {
		attr = *q.conn
	}
	mtu := verbs.MTUFromBytes(attr.MTU)
	if mtu == 0 || mtu.Bytes() != attr.MTU {
		return fmt.Errorf("path MTU %d: want 256, 512, 1024, 2048 or 4096", attr.MTU)
	}
	rtr := verbs.QPAttr{
		QPState: verbs.QPSRTR, PathMTU: mtu, DestQPNum: r.QPNum, RQPSN: attr.RQPSN,
		MaxDestRdAtomic: attr.MaxDestRdAtomic, MinRNRTimer: attr.MinRNRTimer,
		AHAttr: verbs.AHAttr{IsGlobal: true, DLID: r.LID, PortNum: attr.Port,
			GRH: verbs.GlobalRoute{DGID: r.GID, SGIDIndex: attr.GIDIndex, HopLimit: 64}},
	}
	if err := q.qp.Modify(&rtr, verbs.QPAttrState|verbs.QPAttrAV|verbs.QPAttrPathMTU|verbs.QPAttrDestQPN|
		verbs.QPAttrRQPSN|verbs.QPAttrMaxDestRdAtomic|verbs.QPAttrMinRNRTimer); err != nil {
		return err
	}
	rts := verbs.QPAttr{
		QPState: verbs.QPSRTS, Timeout: attr.Timeout, RetryCnt: attr.Retry, RNRRetry: attr.RNRRetry,
		SQPSN: attr.SQPSN, MaxRdAtomic: attr.MaxRdAtomic,
	}
	if err := q.qp.Modify(&rts, verbs.QPAttrState|verbs.QPAttrTimeout|verbs.QPAttrRetryCnt|
		verbs.QPAttrRNRRetry|verbs.QPAttrSQPSN|verbs.QPAttrMaxQPRdAtomic); err != nil {
		return err
	}
	s.logf("QP %#x connected to QP %#x at %s (mtu %d, timeout %d, retry %d, rnr_retry %d, sq_psn %d, rq_psn %d)",
		q.qp.Num(), r.QPNum, r.GID, attr.MTU, attr.Timeout, attr.Retry, attr.RNRRetry, attr.SQPSN, attr.RQPSN)
	return nil
}

// CImm converts between the immediate data of roce-sim's messages and
// rdmago's. roce-sim passes C's imm_data field, a big-endian value, as
// the integer its bytes make in the host's order; rdmago's SendWR.ImmData
// and WC.ImmData hold the value itself. The conversion is its own
// inverse.
func CImm(v uint32) uint32 {
	return binary.BigEndian.Uint32(binary.NativeEndian.AppendUint32(nil, v))
}

// Op is an operation one of the Remote* RPCs posts.
type Op struct {
	Opcode     verbs.WROpcode
	MR         uint32 // the local memory region (ignored by atomics, found by LKey)
	Addr       uint64 // local address: in the region
	Len        uint32
	LKey       uint32
	RemoteAddr uint64
	RKey       uint32
	Imm        uint32 // roce-sim's (C's) form: see CImm
	Compare    uint64
	Swap       uint64
	Solicited  bool
	// AllowErr: an operation that fails is logged and not an error, as
	// with the Rust side's allow_err.
	AllowErr bool
}

// RemoteOp posts op on QP qpID, signaled, and waits for its completion
// (ibv_post_send, then ibv_poll_cq). It fails if the post or the
// operation does, unless op.AllowErr. The Rust side always reads into or
// writes from the start of the region; here op.Addr counts.
func (s *Side) RemoteOp(ctx context.Context, qpID uint32, op Op) error {
	err := s.remoteOp(ctx, qpID, op)
	if err != nil && op.AllowErr {
		s.logf("%s failed as the case allows: %v", op.Opcode, err)
		return nil
	}
	return err
}

func (s *Side) remoteOp(ctx context.Context, qpID uint32, op Op) error {
	s.mu.Lock()
	q, err := index(s.qps, qpID, "QP")
	var mr *verbs.MR
	if err == nil {
		mr, err = s.localMR(op)
	}
	s.mu.Unlock()
	if err != nil {
		return err
	}
	length := op.Len
	if op.Opcode == verbs.WRAtomicCmpAndSwp || op.Opcode == verbs.WRAtomicFetchAndAdd {
		length = 8
	}
	off := op.Addr - mr.Addr()
	if op.Addr < mr.Addr() || off+uint64(length) > uint64(mr.Len()) {
		return fmt.Errorf("local range %#x+%d is outside memory region %#x+%d", op.Addr, length, mr.Addr(), mr.Len())
	}
	wr := verbs.SendWR{
		WRID: s.wrid.Add(1), Opcode: op.Opcode, SendFlags: verbs.SendSignaled,
		RemoteAddr: op.RemoteAddr, RKey: op.RKey, ImmData: CImm(op.Imm), CompareAdd: op.Compare, Swap: op.Swap,
	}
	if op.Solicited {
		wr.SendFlags |= verbs.SendSolicited
	}
	if length > 0 {
		wr.SGList = []verbs.SGE{mr.SGE(int(off), int(length))}
	}
	q.cq.expectSend(wr.WRID)
	defer q.cq.forget(wr.WRID)
	if err := q.qp.PostSend([]verbs.SendWR{wr}); err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(ctx, OpWait)
	defer cancel()
	wc, err := q.cq.take(ctx, func(wc *verbs.WC) bool { return wc.WRID == wr.WRID })
	if err != nil {
		return fmt.Errorf("%s on QP %#x: no completion: %w", op.Opcode, q.qp.Num(), err)
	}
	if wc.Status != verbs.WCSuccess {
		return fmt.Errorf("%s on QP %#x completed with %s", op.Opcode, q.qp.Num(), wc.Status)
	}
	return nil
}

// localMR finds the region op names: by number, or for atomics (whose
// request names none) by local key (s.mu held).
func (s *Side) localMR(op Op) (*verbs.MR, error) {
	if op.Opcode != verbs.WRAtomicCmpAndSwp && op.Opcode != verbs.WRAtomicFetchAndAdd {
		mr, err := index(s.mrs, op.MR, "memory region")
		if err == nil && mr.LKey() != op.LKey {
			err = fmt.Errorf("memory region %d has lkey %#x, not %#x", op.MR, mr.LKey(), op.LKey)
		}
		return mr, err
	}
	for _, mr := range s.mrs {
		if mr.LKey() == op.LKey {
			return mr, nil
		}
	}
	return nil, fmt.Errorf("no memory region with lkey %#x", op.LKey)
}

// LocalWrite writes content into memory region mrID at off.
func (s *Side) LocalWrite(mrID, off uint32, content []byte) error {
	buf, err := s.span(mrID, off, len(content))
	if err != nil {
		return err
	}
	copy(buf, content)
	return nil
}

// LocalCheckMem reports whether memory region mrID holds expected[i] at
// offs[i] for every i.
func (s *Side) LocalCheckMem(mrID uint32, offs []uint32, expected [][]byte) (bool, error) {
	if len(offs) != len(expected) {
		return false, fmt.Errorf("%d offsets for %d expected values", len(offs), len(expected))
	}
	same := true
	for i, off := range offs {
		buf, err := s.span(mrID, off, len(expected[i]))
		if err != nil {
			return false, err
		}
		if string(buf) != string(expected[i]) {
			s.logf("memory region %d at %d holds %x, expected %x", mrID, off, buf, expected[i])
			same = false
		}
	}
	return same, nil
}

// span returns n bytes of memory region mrID at off.
func (s *Side) span(mrID, off uint32, n int) ([]byte, error) {
	s.mu.Lock()
	mr, err := index(s.mrs, mrID, "memory region")
	s.mu.Unlock()
	if err != nil {
		return nil, err
	}
	buf := mr.Buf()
	if uint64(off)+uint64(n) > uint64(len(buf)) {
		return nil, fmt.Errorf("%d bytes at %d are outside memory region %d of %d bytes", n, off, mrID, len(buf))
	}
	return buf[off : int(off)+n], nil
}

// LocalRecv posts a receive of length bytes at addr in memory region
// mrID on QP qpID (ibv_post_recv) and returns at once, as the Rust side
// does. The receive must complete successfully and, if imm is not 0, carry
// imm (roce-sim's form: see CImm); a failure is logged and kept for
// Failures. The Rust side receives into a buffer of its own and copies it
// to the start of the region; here the data lands at addr.
func (s *Side) LocalRecv(qpID, mrID uint32, addr uint64, length, lkey, imm uint32) error {
	s.mu.Lock()
	q, err := index(s.qps, qpID, "QP")
	var mr *verbs.MR
	if err == nil {
		mr, err = s.localMR(Op{Opcode: verbs.WRSend, MR: mrID, LKey: lkey})
	}
	s.mu.Unlock()
	if err != nil {
		return err
	}
	off := addr - mr.Addr()
	if addr < mr.Addr() || off+uint64(length) > uint64(mr.Len()) {
		return fmt.Errorf("receive range %#x+%d is outside memory region %#x+%d", addr, length, mr.Addr(), mr.Len())
	}
	wr := verbs.RecvWR{WRID: s.wrid.Add(1)}
	if length > 0 {
		wr.SGList = []verbs.SGE{mr.SGE(int(off), int(length))}
	}
	q.cq.expectRecv(wr.WRID, imm)
	if err := q.qp.PostRecv([]verbs.RecvWR{wr}); err != nil {
		q.cq.forget(wr.WRID)
		return err
	}
	return nil
}

// WCMatch names the fields PollComplete compares; nil fields are not
// compared. Numbers are libibverbs' (enum ibv_wc_opcode, ibv_wc_status).
type WCMatch struct {
	SrcQP, QPNum, Len, Opcode, Status *uint32
	Imm                               *uint32 // imm_data (roce-sim's form: see CImm) or invalidated rkey
}

// PollComplete takes the next completion of CQ cqID that no operation
// waits for (ibv_poll_cq), waiting up to PollWait, and reports whether
// it matches want. The Rust side leaves polling to async-rdma and always
// answers true; here the completion is compared, and none is a mismatch.
func (s *Side) PollComplete(ctx context.Context, cqID uint32, want WCMatch) (bool, error) {
	s.mu.Lock()
	c, err := index(s.cqs, cqID, "CQ")
	s.mu.Unlock()
	if err != nil {
		return false, err
	}
	ctx, cancel := context.WithTimeout(ctx, PollWait)
	defer cancel()
	wc, err := c.take(ctx, func(wc *verbs.WC) bool { return !c.sends[wc.WRID] })
	if err != nil {
		s.logf("poll CQ %d: no completion: %v", cqID, err)
		return false, nil
	}
	imm := wc.ImmData
	if wc.WCFlags&verbs.WCWithImm != 0 {
		imm = CImm(imm)
	}
	same := true
	for _, f := range []struct {
		name string
		want *uint32
		got  uint32
	}{
		{"src_qp", want.SrcQP, wc.SrcQP},
		{"qp_num", want.QPNum, wc.QPNum},
		{"byte_len", want.Len, wc.ByteLen},
		{"opcode", want.Opcode, uint32(wc.Opcode)},
		{"status", want.Status, uint32(wc.Status)},
		{"imm_data", want.Imm, imm},
	} {
		if f.want != nil && *f.want != f.got {
			s.logf("poll CQ %d: %s is %d, expected %d (%s %s)", cqID, f.name, f.got, *f.want, wc.Opcode, wc.Status)
			same = false
		}
	}
	return same, nil
}

// CheckQPState reports whether QP qpID is in state want (ibv_query_qp).
func (s *Side) CheckQPState(qpID uint32, want verbs.QPState) (bool, error) {
	s.mu.Lock()
	q, err := index(s.qps, qpID, "QP")
	s.mu.Unlock()
	if err != nil {
		return false, err
	}
	a, _, err := q.qp.Query()
	if err != nil {
		return false, err
	}
	if a.QPState != want {
		s.logf("QP %#x is in %s, expected %s", q.qp.Num(), a.QPState, want)
	}
	return a.QPState == want, nil
}

// ModifyQP sets QP qpID's send PSN (ibv_modify_qp with IBV_QP_SQ_PSN in
// its current state; the verbs refuse it where the IBTA's state table
// does, in RTS among others). The Rust side leaves this unimplemented.
func (s *Side) ModifyQP(qpID, sqPSN uint32) error {
	s.mu.Lock()
	q, err := index(s.qps, qpID, "QP")
	s.mu.Unlock()
	if err != nil {
		return err
	}
	st := q.qp.State()
	return q.qp.Modify(&verbs.QPAttr{QPState: st, SQPSN: sqPSN}, verbs.QPAttrState|verbs.QPAttrSQPSN)
}

// NotifyCQ arms CQ cqID (ibv_req_notify_cq). The Rust side does nothing.
func (s *Side) NotifyCQ(cqID uint32, solicitedOnly bool) error {
	s.mu.Lock()
	c, err := index(s.cqs, cqID, "CQ")
	s.mu.Unlock()
	if err != nil {
		return err
	}
	return c.cq.ReqNotify(solicitedOnly)
}
