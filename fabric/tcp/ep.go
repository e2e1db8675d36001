package tcp

import (
	"context"
	"errors"
	"net"
	"net/netip"
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/sys/unix"

	"github.com/rdmago/rdmago/fabric"
	"github.com/rdmago/rdmago/fabric/internal/hostcc"
	"github.com/rdmago/rdmago/fabric/internal/sockpoll"
)

// cmTimeout bounds each step of connection setup.
const cmTimeout = 10 * time.Second

// ---- Endpoint ----

type epState int

const (
	stIdle epState = iota
	stConnecting
	stAccepting // opened on a request, Accept not yet called
	stConnected
	stShutdown
	stClosed
)

// rxEntry is a posted receive.
type rxEntry struct {
	buf []byte
	ctx any
}

// txEntry is a frame being sent, or waiting for its ACK.
type txEntry struct {
	bufs     [][]byte  // what is left to write
	one      [2][]byte // bufs' storage for a frame of one or two ranges
	frame    []byte    // a small frame's bytes (kept when the entry is reused)
	partial  bool      // part of it was written
	internal bool      // an ACK or read response, sent ahead of the program's
	reuse    bool      // the entry came from newTx and goes back with freeTx
	ctx      any
	flags    uint64 // completion flags
	comp     bool   // report a completion
	ack      bool   // complete on the peer's ACK
	length   uint64
}

// rdEntry is an RMA read waiting for its response.
type rdEntry struct {
	buf []byte
	ctx any
}

type ep struct {
	d    fabric.DomainRef
	info *fabric.Info
	ctx  any

	mu    sync.Mutex
	state epState
	// Its one option is FI_OPT_CM_DATA_SIZE, as C's tcp endpoints have.
	fabric.CMDataSize
	fabric.EndpointBinds // the EQ, and the CQs and counters operations report to (under mu)
	req                  *connReq
	fd                   int             // the connection's socket, -1 before it is made and after it is closed
	up                   bool            // the socket carries frames (false after the stream ended or broke)
	wt                   *sockpoll.Watch // the socket's registration with the waker
	local                netip.AddrPort
	peer                 netip.AddrPort
	wg                   sync.WaitGroup

	kick chan struct{} // closed when a receive is posted or frames are queued
	done chan struct{} // closed by Close
	// closing is canceled by Close, which so ends a dial or handshake in
	// progress.
	closing context.Context
	cancel  context.CancelFunc
	// polls counts the program's progress calls: while it keeps
	// changing, the program polls and the background loop stays out of
	// its way. (A counter, not a clock: reading one costs nothing.)
	polls atomic.Uint64

	rxq   []rxEntry
	txq   []*txEntry // frames to write, in order; acks and read responses first
	ackq  []*txEntry // sent, waiting for their ACK
	readq []rdEntry  // reads waiting for their response

	// The frame being received.
	hdr      [maxHdrLen]byte
	hdrHave  int
	hdrNeed  int
	rbuf     []byte // staged bytes read from the socket: rbuf[rlo:rhi]
	rlo, rhi int
	drained  bool // the last read found the socket empty (or emptied it)
	// receives counts the calls of receive; drainedIn is the one in which
	// a read last found the socket empty.
	receives, drainedIn uint64
	full                bool // the last write found the socket's buffer full (or filled it)
	cur                 *rxFrame
	pend                *header // a message header waiting for a receive buffer (pendHdr)
	pendHdr             header
	scratch             []byte
	free                []*txEntry // sent entries, for reuse by the program's sends
	msgFrame            rxFrame    // the receipt of a message, reused
	msgDone             func()     // e.finishMsg, made once
	msgFail             func(fabric.Errno)
	// internalKey, if set, tells the keys of a layered provider's own
	// regions, whose remote reads are not counted as the program's.
	internalKey func(key uint64) bool
}

// rxFrame is where the payload of the frame being received goes.
type rxFrame struct {
	h       header
	dst     [][]byte // target ranges, in order
	discard uint64   // bytes to read and drop after dst (truncation)
	done    func()   // called when the whole payload is in
	// fail, if set, reports the program's operation the frame completes
	// (a receive, a read) as failed, when the connection ends mid-frame.
	fail func(fabric.Errno)

	// For a message (ep.msgFrame):
	one    [1][]byte
	rx     rxEntry
	got, n uint64 // bytes delivered, bytes sent
}

func (provider) Endpoint(d fabric.DomainRef, info *fabric.Info, context any) (fabric.EndpointDriver, error) {
	if info != nil && info.EPAttr != nil && info.EPAttr.Type == fabric.EPRDM {
		return newRDM(d, info, context)
	}
	if info == nil || info.EPAttr == nil || info.EPAttr.Type != fabric.EPMsg {
		return nil, fabric.Errorf("fi_endpoint", fabric.ErrInvalid, "the tcp provider's endpoints are FI_EP_MSG and FI_EP_RDM")
	}
	e := &ep{d: d, info: info.Dup(), ctx: context, fd: -1, hdrNeed: baseHdrLen, kick: make(chan struct{}), done: make(chan struct{})}
	e.Lock, e.Self, e.CMDataSize = &e.mu, e, maxCMData
	e.closing, e.cancel = newClosing()
	if r, ok := info.Handle.(*connReq); ok {
		if !r.pep.Take(r) {
			return nil, fabric.Errorf("fi_endpoint", fabric.ErrInvalid, "the connection request was already answered")
		}
		e.req = r
		e.state = stAccepting
	}
	return e, nil
}

func (e *ep) Enable() error {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.Comp.TxCQ == nil || e.Comp.RxCQ == nil {
		return fabric.Errorf("fi_enable", fabric.ErrNoCQ, "bind CQs for transmit and receive first")
	}
	if e.EQ == nil {
		return fabric.Errorf("fi_enable", fabric.ErrNoEQ, "bind an event queue first")
	}
	return nil
}

// Connect dials addr and sends CONNREQ; FI_CONNECTED (or an error entry,
// ErrConnRefused with the peer's data for a rejection) follows on the EQ.
func (e *ep) Connect(addr netip.AddrPort, param []byte) error {
	e.mu.Lock()
	defer e.mu.Unlock()
	switch {
	case e.EQ == nil || e.Comp.TxCQ == nil || e.Comp.RxCQ == nil:
		return fabric.Errorf("fi_connect", fabric.ErrOpBadState, "bind an EQ and CQs and enable the endpoint first")
	case e.state != stIdle:
		return fabric.Errorf("fi_connect", fabric.ErrIsConn, "the endpoint is connecting or connected")
	case len(param) > maxCMData:
		return fabric.Errorf("fi_connect", fabric.ErrInvalid, "private data over 256 bytes")
	case !addr.IsValid():
		return fabric.Errorf("fi_connect", fabric.ErrInvalid, "no address")
	}
	e.state = stConnecting
	req := marshalCM(cmConnReq, param)
	e.wg.Add(1)
	go func() {
		defer e.wg.Done()
		data, err := e.dial(e.closing, addr, req) // Close cancels it
		e.mu.Lock()
		defer e.mu.Unlock()
		if e.state != stConnecting {
			return // closed meanwhile
		}
		if err != nil {
			e.state = stShutdown
			var fe *fabric.Error
			errno := fabric.ErrConnRefused
			if errors.As(err, &fe) {
				errno = fe.Errno
			}
			e.EQ.WriteErr(fabric.EQErrEntry{FID: e.FID(), Err: errno, ErrData: data})
			return
		}
		e.state = stConnected
		e.EQ.Write(fabric.EQEntry{Event: fabric.EventConnected, FID: e.FID(), Data: data})
	}()
	return nil
}

// dial connects and exchanges CONNREQ and CONNRESP.
func (e *ep) dial(ctx context.Context, addr netip.AddrPort, req []byte) ([]byte, error) {
	d := net.Dialer{Timeout: cmTimeout}
	if src := e.info.SrcAddr; src.IsValid() && !src.Addr().IsUnspecified() {
		d.LocalAddr = net.TCPAddrFromAddrPort(netip.AddrPortFrom(src.Addr(), 0))
	}
	c, err := d.DialContext(ctx, "tcp", addr.String())
	if err != nil {
		return nil, fabric.Errorf("fi_connect", sockpoll.Errno(err, fabric.ErrConnRefused), err.Error())
	}
	tc := c.(*net.TCPConn)
	tc.SetNoDelay(true)
	tc.SetDeadline(time.Now().Add(cmTimeout))
	stop := context.AfterFunc(ctx, func() { tc.SetDeadline(time.Now()) })
	defer stop()
	if _, err := tc.Write(req); err != nil {
		tc.Close()
		return nil, fabric.Errorf("fi_connect", fabric.ErrConnReset, err.Error())
	}
	typ, data, err := readCM(tc)
	if err != nil {
		tc.Close()
		return nil, fabric.Errorf("fi_connect", fabric.ErrConnReset, err.Error())
	}
	if typ != cmConnResp {
		tc.Close()
		return data, fabric.Errorf("fi_connect", fabric.ErrConnRefused, "rejected")
	}
	tc.SetDeadline(time.Time{})
	if err := e.attach(tc); err != nil {
		tc.Close()
		return nil, err
	}
	return data, nil
}

// attach makes c the endpoint's connection and starts its background
// progress. Called without e.mu. The socket leaves the Go runtime's
// poller (see waker.go): c is closed and a duplicate of its descriptor
// kept.
func (e *ep) attach(c *net.TCPConn) error {
	local := c.LocalAddr().(*net.TCPAddr).AddrPort()
	peer := c.RemoteAddr().(*net.TCPAddr).AddrPort()
	rc, err := c.SyscallConn()
	if err != nil {
		return fabric.Errorf("fi_connect", fabric.ErrIO, err.Error())
	}
	fd := -1
	rc.Control(func(s uintptr) { fd, err = unix.FcntlInt(s, unix.F_DUPFD_CLOEXEC, 0) })
	if err != nil {
		return fabric.Errorf("fi_connect", fabric.ErrIO, err.Error())
	}
	c.Close()
	if err := unix.SetNonblock(fd, true); err != nil {
		unix.Close(fd)
		return fabric.Errorf("fi_connect", fabric.ErrIO, err.Error())
	}
	hostcc.Set(fd, local.Addr(), peer.Addr()) // see package hostcc
	wt, err := sockpoll.Add(fd)
	if err != nil {
		unix.Close(fd)
		return fabric.Errorf("fi_connect", fabric.ErrIO, err.Error())
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.state == stClosed {
		wt.Close()
		unix.Close(fd)
		return fabric.Errorf("fi_connect", fabric.ErrBadFD, "endpoint closed")
	}
	e.fd, e.up, e.wt = fd, true, wt
	e.local, e.peer = local, peer
	e.wg.Add(1)
	go e.background()
	return nil
}

func newClosing() (context.Context, context.CancelFunc) {
	return context.WithCancel(context.Background())
}

// closeSocket closes the connection's socket. Called with e.mu held.
func (e *ep) closeSocket() {
	e.up = false
	if e.fd < 0 {
		return
	}
	e.wt.Close()
	unix.Close(e.fd)
	e.fd = -1
}

// The provider reports FI_PROGRESS_AUTO, as C's does: data moves even
// while the program reads no CQ (a peer's RMA read is answered, a large
// send drains). One goroutine per connection does it, and only when the
// program is not polling: it waits until the socket is readable (or, with
// frames queued, writable), then progresses under the endpoint's lock. A
// program that polls its CQ moves the data itself and never waits for it.

// pollGrace is how long the program must not poll before the background
// loop takes over.
const pollGrace = time.Millisecond

// kickLoops wakes the background loops. Called with e.mu held.
func (e *ep) kickLoops() {
	close(e.kick)
	e.kick = make(chan struct{})
}

// Accept answers the request with CONNRESP; FI_CONNECTED follows.
func (e *ep) Accept(param []byte) error {
	e.mu.Lock()
	if e.state != stAccepting || e.req == nil {
		e.mu.Unlock()
		return fabric.Errorf("fi_accept", fabric.ErrOpBadState, "the endpoint was not opened on a connection request")
	}
	if e.EQ == nil || e.Comp.TxCQ == nil || e.Comp.RxCQ == nil {
		e.mu.Unlock()
		return fabric.Errorf("fi_accept", fabric.ErrOpBadState, "bind an EQ and CQs and enable the endpoint first")
	}
	if len(param) > maxCMData {
		e.mu.Unlock()
		return fabric.Errorf("fi_accept", fabric.ErrInvalid, "private data over 256 bytes")
	}
	c := e.req.conn
	e.state = stConnecting // accepting: a second Accept is refused
	e.mu.Unlock()
	c.SetWriteDeadline(time.Now().Add(cmTimeout))
	_, err := c.Write(marshalCM(cmConnResp, param))
	c.SetWriteDeadline(time.Time{})
	if err != nil {
		c.Close()
		return fabric.Errorf("fi_accept", fabric.ErrConnReset, err.Error())
	}
	if err := e.attach(c); err != nil {
		c.Close()
		return err
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.state != stConnecting {
		return fabric.Errorf("fi_accept", fabric.ErrBadFD, "endpoint closed")
	}
	e.state = stConnected
	e.EQ.Write(fabric.EQEntry{Event: fabric.EventConnected, FID: e.FID()})
	return nil
}

func (e *ep) Name() (netip.AddrPort, error) {
	e.mu.Lock()
	defer e.mu.Unlock()
	if !e.local.IsValid() {
		return e.info.SrcAddr, nil
	}
	return e.local, nil
}

func (e *ep) Peer() (netip.AddrPort, error) {
	e.mu.Lock()
	defer e.mu.Unlock()
	if !e.peer.IsValid() {
		return netip.AddrPort{}, fabric.Errorf("fi_getpeer", fabric.ErrNotConn, "")
	}
	return e.peer, nil
}

// Shutdown closes the connection (fi_shutdown); the peer sees
// FI_SHUTDOWN.
func (e *ep) Shutdown() error {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.state != stConnected {
		return nil
	}
	e.flushTx()
	e.state = stShutdown
	if e.fd >= 0 {
		unix.Shutdown(e.fd, unix.SHUT_WR)
	}
	return nil
}

// Close cancels what is outstanding (ErrCanceled completions) and closes
// the connection.
func (e *ep) Close() error {
	e.mu.Lock()
	if e.state == stClosed {
		e.mu.Unlock()
		return nil
	}
	e.state = stClosed
	close(e.done)
	e.cancel()
	if e.fd >= 0 {
		e.closeSocket()
	} else if e.req != nil {
		e.req.conn.Close()
	}
	e.cancelAll()
	e.mu.Unlock()
	e.wg.Wait()
	e.Comp.Detach(e)
	return nil
}

// cancelAll completes every outstanding operation with ErrCanceled.
// Called with e.mu held.
func (e *ep) cancelAll() { e.failAll(fabric.ErrCanceled) }

// failAll completes every outstanding operation with errno. Called with
// e.mu held.
func (e *ep) failAll(errno fabric.Errno) {
	if f := e.cur; f != nil {
		e.cur = nil
		if f.fail != nil {
			f.fail(errno) // the operation the frame was completing
		}
	}
	for _, r := range e.rxq {
		e.Comp.Failed(fabric.CQErrEntry{CQEntry: fabric.CQEntry{Context: r.ctx, Flags: fabric.CompRecv | fabric.CompMsg, Buf: r.buf}, Err: errno})
	}
	e.rxq = nil
	for _, t := range append(e.txq, e.ackq...) {
		if t.comp {
			e.Comp.Failed(fabric.CQErrEntry{CQEntry: fabric.CQEntry{Context: t.ctx, Flags: t.flags}, Err: errno})
		}
	}
	e.txq, e.ackq = nil, nil
	for _, r := range e.readq {
		e.Comp.Failed(fabric.CQErrEntry{CQEntry: fabric.CQEntry{Context: r.ctx, Flags: fabric.CompRMA | fabric.CompRead}, Err: errno})
	}
	e.readq = nil
}

// ---- Posting ----

func totalLen(bufs [][]byte) int {
	n := 0
	for _, b := range bufs {
		n += len(b)
	}
	return n
}

// smallFrame is the largest payload copied into its frame's buffer (and
// so written with its header in one system call).
const smallFrame = 4096

// newTx returns an unused entry. Called with e.mu held.
func (e *ep) newTx() *txEntry {
	if n := len(e.free); n > 0 {
		t := e.free[n-1]
		e.free = e.free[:n-1]
		return t
	}
	return new(txEntry)
}

// freeTx takes back an entry the connection is done with. Called with
// e.mu held.
func (e *ep) freeTx(t *txEntry) {
	if !t.reuse || len(e.free) >= 64 {
		return
	}
	*t = txEntry{frame: t.frame[:0], reuse: true}
	e.free = append(e.free, t)
}

func (e *ep) live(op string) error {
	switch e.state {
	case stConnected:
		return nil
	case stClosed:
		return fabric.Errorf(op, fabric.ErrBadFD, "endpoint closed")
	case stShutdown:
		return fabric.Errorf(op, fabric.ErrShutdown, "")
	}
	return fabric.Errorf(op, fabric.ErrOpBadState, "not connected")
}

func (e *ep) Recv(buf []byte, desc any, _ fabric.Addr, context any) error {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.state == stClosed {
		return fabric.Errorf("fi_recv", fabric.ErrBadFD, "endpoint closed")
	}
	if e.state == stShutdown && !e.up {
		// The peer is gone: nothing more can come.
		return fabric.Errorf("fi_recv", fabric.ErrShutdown, "the connection ended")
	}
	if e.info.RxAttr != nil && e.info.RxAttr.Size > 0 && len(e.rxq) >= e.info.RxAttr.Size {
		return fabric.ErrAgain
	}
	e.rxq = append(e.rxq, rxEntry{buf: buf, ctx: context})
	if e.pend != nil {
		e.kickLoops()
	}
	return nil
}

func (e *ep) Send(buf []byte, desc any, _ fabric.Addr, context any) error {
	return e.send(buf, 0, context, fabric.FlagCompletion)
}

func (e *ep) SendData(buf []byte, desc any, data uint64, _ fabric.Addr, context any) error {
	return e.send(buf, data, context, fabric.FlagCompletion|fabric.FlagRemoteCQData)
}

func (e *ep) Inject(buf []byte, _ fabric.Addr) error {
	return e.send(buf, 0, nil, fabric.FlagInject)
}

// SendMsg queues a message (fi_sendmsg). With FlagInject the buffer is
// copied at once and no completion is reported.
func (e *ep) SendMsg(m *fabric.Msg, flags uint64) error {
	return e.send(m.Buf, m.Data, m.Context, flags)
}

// BindAV is accepted and ignored: connected endpoints need no AV.
func (e *ep) BindAV(*fabric.AV) error { return nil }

func (e *ep) send(buf []byte, data uint64, context any, flags uint64) error {
	return e.sendFrame(buf, data, context, flags, false, 0)
}

// sendFrame queues a message; tagged frames carry the tagged flag and a
// tag (what rxm sends for tagged messages).
func (e *ep) sendFrame(buf []byte, data uint64, context any, flags uint64, tagged bool, tag uint64) error {
	h := header{op: opMsg}
	if tagged {
		h.flags |= flagTagged
		h.tag = tag
	}
	if flags&fabric.FlagRemoteCQData != 0 {
		h.flags |= flagRemoteCQData
		h.cqData = data
	}
	if flags&(fabric.FlagTransmitComplete|fabric.FlagDeliveryComplete) != 0 {
		h.flags |= flagDeliveryComplete
	}
	if flags&fabric.FlagInject != 0 && len(buf) > smallFrame {
		// (post copies a small payload into the frame.)
		buf = append([]byte(nil), buf...)
	}
	return e.post("fi_send", &h, buf, nil, txEntry{ctx: context, flags: fabric.CompSend | fabric.CompMsg, comp: flags&fabric.FlagInject == 0, length: uint64(len(buf))})
}

// post frames h and payload and queues them, writing at once what the
// socket takes.
func (e *ep) post(op string, h *header, payload []byte, read *rdEntry, te txEntry) error {
	e.mu.Lock()
	defer e.mu.Unlock()
	if err := e.live(op); err != nil {
		return err
	}
	if e.info.TxAttr != nil && e.info.TxAttr.Size > 0 && len(e.txq)+len(e.ackq) >= e.info.TxAttr.Size {
		e.progressLocked()
		if len(e.txq)+len(e.ackq) >= e.info.TxAttr.Size {
			return fabric.ErrAgain
		}
	}
	t := e.newTx()
	frame := t.frame
	*t = te
	if len(payload) <= smallFrame {
		// Header and payload in one buffer, one write.
		if cap(frame) < maxHdrLen+len(payload) {
			frame = make([]byte, maxHdrLen+max(len(payload), 64))
		}
		b := frame[:cap(frame)]
		n := marshalHeader(b, h, uint64(len(payload)))
		t.one[0] = b[:n+copy(b[n:], payload)]
		t.bufs = t.one[:1]
	} else {
		if cap(frame) < maxHdrLen {
			frame = make([]byte, maxHdrLen+64)
		}
		b := frame[:cap(frame)]
		t.one[0], t.one[1] = b[:marshalHeader(b, h, uint64(len(payload)))], payload
		t.bufs = t.one[:2]
	}
	t.frame = frame
	t.reuse = true
	t.ack = h.flags&(flagDeliveryComplete|flagCommitComplete) != 0
	if read != nil {
		e.readq = append(e.readq, *read)
	}
	e.txq = append(e.txq, t)
	e.flushTx()
	if len(e.txq) > 0 {
		e.kickLoops()
	}
	return nil
}

func (e *ep) Write(buf []byte, desc any, _ fabric.Addr, addr, key uint64, context any) error {
	h := header{op: opWrite, iov: []rmaIOV{{addr, uint64(len(buf)), key}}}
	return e.post("fi_write", &h, buf, nil, txEntry{ctx: context, flags: fabric.CompRMA | fabric.CompWrite, comp: true})
}

// InjectWrite writes buf, which is copied into the frame at once, with
// no completion (fi_inject_write).
func (e *ep) InjectWrite(buf []byte, _ fabric.Addr, addr, key uint64) error {
	h := header{op: opWrite, iov: []rmaIOV{{addr, uint64(len(buf)), key}}}
	return e.post("fi_inject_write", &h, buf, nil, txEntry{flags: fabric.CompRMA | fabric.CompWrite})
}

func (e *ep) WriteData(buf []byte, desc any, data uint64, _ fabric.Addr, addr, key uint64, context any) error {
	h := header{op: opWrite, flags: flagRemoteCQData, cqData: data, iov: []rmaIOV{{addr, uint64(len(buf)), key}}}
	return e.post("fi_writedata", &h, buf, nil, txEntry{ctx: context, flags: fabric.CompRMA | fabric.CompWrite, comp: true})
}

func (e *ep) Read(buf []byte, desc any, _ fabric.Addr, addr, key uint64, context any) error {
	h := header{op: opReadReq, iov: []rmaIOV{{addr, uint64(len(buf)), key}}}
	// The request completes with its response, not when written.
	return e.post("fi_read", &h, nil, &rdEntry{buf: buf, ctx: context}, txEntry{})
}

// Progress sends what is queued and takes in what the socket holds
// (fabric.Progressor): the program's CQ reads drive it, with the
// background loops filling in when it does not poll.
func (e *ep) Progress() {
	e.polls.Add(1)
	e.mu.Lock()
	e.progressLocked()
	e.mu.Unlock()
}
