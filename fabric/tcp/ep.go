package tcp

import (
	"context"
	"errors"
	"io"
	"net"
	"net/netip"
	"sync"
	"sync/atomic"
	"syscall"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/rdmago/rdmago/fabric"
)

// cmTimeout bounds each step of connection setup.
const cmTimeout = 10 * time.Second

// ---- Passive endpoint ----

type pep struct {
	info *fabric.Info
	ctx  any

	mu     sync.Mutex
	eq     *fabric.EQ
	ln     *net.TCPListener
	closed bool
	wg     sync.WaitGroup
	conns  map[*connReq]bool // requests not yet accepted or rejected
}

// connReq is a connection request: the socket and what its CONNREQ
// carried. It is the Handle of the FI_CONNREQ event's info.
type connReq struct {
	pep  *pep
	conn *net.TCPConn
	data []byte
}

func (provider) PassiveEndpoint(f *fabric.Fabric, info *fabric.Info, context any) (fabric.PassiveEndpointDriver, error) {
	if info == nil || info.EPAttr == nil || info.EPAttr.Type != fabric.EPMsg {
		return nil, fabric.Errorf("fi_passive_ep", fabric.ErrInvalid, "the tcp provider's passive endpoints are FI_EP_MSG")
	}
	return &pep{info: info.Dup(), ctx: context, conns: map[*connReq]bool{}}, nil
}

func (p *pep) Bind(eq *fabric.EQ) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.eq = eq
	return nil
}

// Listen binds the info's source address (port 0: any) and starts taking
// connection requests.
func (p *pep) Listen() error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.eq == nil {
		return fabric.Errorf("fi_listen", fabric.ErrNoEQ, "bind an event queue first")
	}
	if p.ln != nil {
		return fabric.Errorf("fi_listen", fabric.ErrAlready, "")
	}
	src := p.info.SrcAddr
	if !src.IsValid() {
		src = netip.AddrPortFrom(netip.IPv4Unspecified(), 0)
	}
	ln, err := net.ListenTCP("tcp", net.TCPAddrFromAddrPort(src))
	if err != nil {
		return fabric.Errorf("fi_listen", errnoOf(err, fabric.ErrAddrInUse), err.Error())
	}
	p.ln = ln
	p.wg.Add(1)
	go p.accept(ln)
	return nil
}

// accept takes each connection, reads its CONNREQ and raises FI_CONNREQ.
func (p *pep) accept(ln *net.TCPListener) {
	defer p.wg.Done()
	for {
		c, err := ln.AcceptTCP()
		if err != nil {
			return
		}
		p.wg.Add(1)
		go func() {
			defer p.wg.Done()
			c.SetNoDelay(true)
			c.SetDeadline(time.Now().Add(cmTimeout))
			typ, data, err := readCM(c)
			c.SetDeadline(time.Time{})
			if err != nil || typ != cmConnReq {
				c.Close()
				return
			}
			r := &connReq{pep: p, conn: c, data: data}
			p.mu.Lock()
			if p.closed {
				p.mu.Unlock()
				c.Close()
				return
			}
			p.conns[r] = true
			eq := p.eq
			p.mu.Unlock()
			info := p.info.Dup()
			info.SetProvider(provider{})
			info.Handle = r
			info.DestAddr = c.RemoteAddr().(*net.TCPAddr).AddrPort()
			info.SrcAddr = c.LocalAddr().(*net.TCPAddr).AddrPort()
			eq.Write(fabric.EQEntry{Event: fabric.EventConnReq, FID: p, Info: info, Data: data})
		}()
	}
}

// readCM reads one connection management message.
func readCM(c net.Conn) (uint8, []byte, error) {
	var h [cmHeaderLen]byte
	if _, err := io.ReadFull(c, h[:]); err != nil {
		return 0, nil, err
	}
	typ, n, err := parseCMHeader(h[:])
	if err != nil {
		return 0, nil, err
	}
	data := make([]byte, n)
	if _, err := io.ReadFull(c, data); err != nil {
		return 0, nil, err
	}
	return typ, data, nil
}

func (p *pep) Name() (netip.AddrPort, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.ln == nil {
		return p.info.SrcAddr, nil
	}
	return p.ln.Addr().(*net.TCPAddr).AddrPort(), nil
}

// take removes a request from the pending ones.
func (p *pep) take(r *connReq) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	if !p.conns[r] {
		return false
	}
	delete(p.conns, r)
	return true
}

// Reject answers a request with a NACK carrying param (fi_reject).
func (p *pep) Reject(handle any, param []byte) error {
	r, ok := handle.(*connReq)
	if !ok || r.pep != p || !p.take(r) {
		return fabric.Errorf("fi_reject", fabric.ErrInvalid, "not a pending request of this endpoint")
	}
	if len(param) > maxCMData {
		return fabric.Errorf("fi_reject", fabric.ErrInvalid, "private data over 256 bytes")
	}
	r.conn.SetWriteDeadline(time.Now().Add(cmTimeout))
	_, err := r.conn.Write(marshalCM(cmNack, param))
	r.conn.Close()
	if err != nil {
		return fabric.Errorf("fi_reject", fabric.ErrConnReset, err.Error())
	}
	return nil
}

func (p *pep) Close() error {
	p.mu.Lock()
	if p.closed {
		p.mu.Unlock()
		return nil
	}
	p.closed = true
	ln := p.ln
	reqs := p.conns
	p.conns = map[*connReq]bool{}
	p.mu.Unlock()
	if ln != nil {
		ln.Close()
	}
	for r := range reqs {
		r.conn.Close()
	}
	p.wg.Wait()
	return nil
}

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
	eq    *fabric.EQ
	comp  fabric.Completions // the CQs and counters operations report to
	req   *connReq
	fd    int    // the connection's socket, -1 before it is made and after it is closed
	up    bool   // the socket carries frames (false after the stream ended or broke)
	wt    *watch // the socket's registration with the waker
	local netip.AddrPort
	peer  netip.AddrPort
	wg    sync.WaitGroup

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
	full     bool // the last write found the socket's buffer full (or filled it)
	cur      *rxFrame
	pend     *header // a message header waiting for a receive buffer
	scratch  []byte
	free     []*txEntry // sent entries, for reuse by the program's sends
	msgFrame rxFrame    // the receipt of a message, reused
	msgDone  func()     // e.finishMsg, made once
	msgFail  func(fabric.Errno)
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
	e.closing, e.cancel = newClosing()
	if r, ok := info.Handle.(*connReq); ok {
		if !r.pep.take(r) {
			return nil, fabric.Errorf("fi_endpoint", fabric.ErrInvalid, "the connection request was already answered")
		}
		e.req = r
		e.state = stAccepting
	}
	return e, nil
}

func (e *ep) BindEQ(eq *fabric.EQ) error {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.eq = eq
	return nil
}

func (e *ep) BindCQ(cq *fabric.CQ, flags uint64) error {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.comp.BindCQ(cq, flags, e)
}

// BindCounter binds a counter for the operations flags names (fi_ep_bind
// with a counter).
func (e *ep) BindCounter(c *fabric.Counter, flags uint64) error {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.comp.BindCounter(c, flags, e)
}

func (e *ep) Enable() error {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.comp.TxCQ == nil || e.comp.RxCQ == nil {
		return fabric.Errorf("fi_enable", fabric.ErrNoCQ, "bind CQs for transmit and receive first")
	}
	if e.eq == nil {
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
	case e.eq == nil || e.comp.TxCQ == nil || e.comp.RxCQ == nil:
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
			e.eq.WriteErr(fabric.EQErrEntry{FID: e, Err: errno, ErrData: data})
			return
		}
		e.state = stConnected
		e.eq.Write(fabric.EQEntry{Event: fabric.EventConnected, FID: e, Data: data})
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
		return nil, fabric.Errorf("fi_connect", errnoOf(err, fabric.ErrConnRefused), err.Error())
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
	wt, err := watchSocket(fd)
	if err != nil {
		unix.Close(fd)
		return fabric.Errorf("fi_connect", fabric.ErrIO, err.Error())
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.state == stClosed {
		wt.close()
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
	e.wt.close()
	unix.Close(e.fd)
	e.fd = -1
}

// The provider reports FI_PROGRESS_AUTO, as C's does: data moves even
// while the program reads no CQ (a peer's RMA read is answered, a large
// send drains). One goroutine per connection does it, and only when the
// program is not polling: it waits until the socket is readable (or, with
// frames queued, writable), then progresses under the endpoint's lock. A
// program that polls its CQ moves the data itself and never waits for it.

// background progresses the endpoint while the program does not poll.
func (e *ep) background() {
	defer e.wg.Done()
	var seen uint64
	// polling reports whether the program progressed the endpoint since
	// the last look.
	polling := func() bool {
		n := e.polls.Load()
		p := n != seen
		seen = n
		return p
	}
	for {
		if polling() {
			// The program polls and will take the data itself.
			select {
			case <-time.After(pollGrace):
			case <-e.done:
				return
			}
			continue
		}
		e.mu.Lock()
		if e.state == stClosed {
			e.mu.Unlock()
			return
		}
		var events uint32
		if e.up {
			if e.pend == nil {
				// (With a message waiting for a receive buffer, nothing
				// can be taken until the program posts one.)
				events |= unix.EPOLLIN | unix.EPOLLRDHUP
			}
			if len(e.txq) > 0 {
				events |= unix.EPOLLOUT
			}
		}
		if events != 0 {
			e.wt.arm(events)
		}
		kick := e.kick
		e.mu.Unlock()
		var ready <-chan struct{}
		if events != 0 {
			ready = e.wt.C
		}
		select {
		case <-ready:
		case <-kick:
			continue
		case <-e.done:
			return
		}
		if polling() {
			select {
			case <-time.After(pollGrace):
			case <-e.done:
				return
			}
			continue
		}
		e.mu.Lock()
		if e.state == stClosed {
			e.mu.Unlock()
			return
		}
		e.progressLocked()
		e.mu.Unlock()
	}
}

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
	if e.eq == nil || e.comp.TxCQ == nil || e.comp.RxCQ == nil {
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
	e.eq.Write(fabric.EQEntry{Event: fabric.EventConnected, FID: e})
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
	e.comp.Detach(e)
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
		e.comp.Failed(fabric.CQErrEntry{CQEntry: fabric.CQEntry{Context: r.ctx, Flags: fabric.CompRecv | fabric.CompMsg, Buf: r.buf}, Err: errno})
	}
	e.rxq = nil
	for _, t := range append(e.txq, e.ackq...) {
		if t.comp {
			e.comp.Failed(fabric.CQErrEntry{CQEntry: fabric.CQEntry{Context: t.ctx, Flags: t.flags}, Err: errno})
		}
	}
	e.txq, e.ackq = nil, nil
	for _, r := range e.readq {
		e.comp.Failed(fabric.CQErrEntry{CQEntry: fabric.CQEntry{Context: r.ctx, Flags: fabric.CompRMA | fabric.CompRead}, Err: errno})
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

// popFront removes q's first element, keeping the slice's storage when
// it empties (so that a queue that never holds more than a few entries
// does not reallocate).
func popFront[T any](q []T) []T {
	var zero T
	q[0] = zero
	if len(q) == 1 {
		return q[:0]
	}
	return q[1:]
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

// GetOpt has FI_OPT_CM_DATA_SIZE, as C's tcp endpoints do.
func (e *ep) GetOpt(opt fabric.Opt) (int, error) {
	if opt == fabric.OptCMDataSize {
		return maxCMData, nil
	}
	return 0, fabric.Errorf("fi_getopt", fabric.ErrNoProtoOpt, "")
}

// SetOpt has no options to set, as C's tcp endpoints have none.
func (e *ep) SetOpt(fabric.Opt, int) error {
	return fabric.Errorf("fi_setopt", fabric.ErrNoProtoOpt, "")
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

// ---- Progress ----

// Progress sends what is queued and takes in what the socket holds
// (fabric.Progressor): the program's CQ reads drive it, with the
// background loops filling in when it does not poll.
func (e *ep) Progress() {
	e.polls.Add(1)
	e.mu.Lock()
	e.progressLocked()
	e.mu.Unlock()
}

func (e *ep) progressLocked() {
	if e.state != stConnected && e.state != stShutdown {
		return
	}
	e.flushTx()
	e.receive()
	e.flushTx() // the ACKs and read responses receiving queued
}

// flushTx writes queued frames until the socket would block. Called with
// e.mu held.
func (e *ep) flushTx() {
	for len(e.txq) > 0 && e.up {
		t := e.txq[0]
		for len(t.bufs) > 0 {
			if len(t.bufs[0]) == 0 {
				t.bufs = t.bufs[1:] // nothing to write (an empty range)
				continue
			}
			if e.full && !ready(e.fd, unix.POLLOUT) {
				// The socket's buffer was full and still is (asked
				// without taking the socket's lock, as for reads).
				return
			}
			var n int
			var err error
			if len(t.bufs) == 1 {
				n, err = rawIO(unix.SYS_WRITE, e.fd, t.bufs[0])
			} else {
				n, err = unix.Writev(e.fd, t.bufs)
			}
			if err == syscall.EAGAIN || err == syscall.EINTR {
				e.full = true
				return
			}
			if err != nil {
				e.broken(fabric.ErrConnReset)
				return
			}
			e.full = n < totalLen(t.bufs)
			if n > 0 {
				t.partial = true
			}
			for n > 0 && len(t.bufs) > 0 {
				if n >= len(t.bufs[0]) {
					n -= len(t.bufs[0])
					t.bufs = t.bufs[1:]
				} else {
					t.bufs[0] = t.bufs[0][n:]
					n = 0
				}
			}
		}
		e.txq = popFront(e.txq)
		switch {
		case t.ack:
			e.ackq = append(e.ackq, t)
			continue
		case t.comp:
			e.comp.Done(fabric.CQEntry{Context: t.ctx, Flags: t.flags, Len: t.length})
		case t.flags != 0:
			e.comp.Count(t.flags) // an inject: counted, not completed
		}
		e.freeTx(t)
	}
}

// readSome reads into b without blocking; n == 0 with no error means
// nothing was there.
//
// Small reads go through a staging buffer, so that a header and a small
// payload cost one system call between them; large ones go straight into
// their destination.
func (e *ep) readSome(b []byte) (int, error) {
	if e.rlo < e.rhi {
		n := copy(b, e.rbuf[e.rlo:e.rhi])
		e.rlo += n
		return n, nil
	}
	if len(b) < stageLen/2 {
		if e.rbuf == nil {
			e.rbuf = make([]byte, stageLen)
		}
		n, err := e.readRaw(e.rbuf)
		if n == 0 || err != nil {
			return n, err
		}
		e.rlo, e.rhi = 0, n
		m := copy(b, e.rbuf[:n])
		e.rlo = m
		return m, nil
	}
	return e.readRaw(b)
}

// ready reports whether fd has one of events (or an error): whether a
// read or write would not block. It is the spin of a polling program, so
// it makes the system call raw: ppoll with a zero timeout returns at
// once, and the runtime need not hear of it.
func ready(fd int, events int16) bool {
	fds := [1]unix.PollFd{{Fd: int32(fd), Events: events}}
	var ts unix.Timespec
	n, _, errno := unix.RawSyscall6(unix.SYS_PPOLL, uintptr(unsafe.Pointer(&fds[0])), 1, uintptr(unsafe.Pointer(&ts)), 0, 0, 0)
	return errno != 0 || n != 0
}

// rawIO reads or writes the non-blocking socket fd. Up to a staging
// buffer's worth it makes the system call raw, which costs the runtime
// nothing and cannot block; more goes the usual way, so that a long copy
// does not hold up the runtime.
func rawIO(trap uintptr, fd int, b []byte) (int, error) {
	if len(b) == 0 {
		return 0, nil
	}
	var r uintptr
	var errno syscall.Errno
	if len(b) <= stageLen {
		r, _, errno = syscall.RawSyscall(trap, uintptr(fd), uintptr(unsafe.Pointer(&b[0])), uintptr(len(b)))
	} else {
		r, _, errno = syscall.Syscall(trap, uintptr(fd), uintptr(unsafe.Pointer(&b[0])), uintptr(len(b)))
	}
	if errno != 0 {
		return 0, errno
	}
	return int(r), nil
}

// stageLen is the staging buffer's size.
const stageLen = 16 << 10

func (e *ep) readRaw(b []byte) (int, error) {
	if e.drained {
		// The last read emptied the socket. Ask whether more came with
		// poll, which does not take the socket's lock as read does: a
		// program spinning on an empty socket would otherwise contend
		// with the kernel delivering the very segment it waits for.
		if !ready(e.fd, unix.POLLIN|unix.POLLRDHUP) {
			return 0, nil
		}
	}
	n, err := rawIO(unix.SYS_READ, e.fd, b)
	e.drained = n < len(b)
	if err == syscall.EAGAIN || err == syscall.EINTR {
		return 0, nil
	}
	if err != nil {
		return 0, err
	}
	if n == 0 && len(b) > 0 {
		return 0, io.EOF
	}
	return n, nil
}

// receive takes in frames until the socket is empty or a message waits
// for a receive buffer. Called with e.mu held.
func (e *ep) receive() {
	for e.up && (e.state == stConnected || e.state == stShutdown) {
		if e.cur == nil && e.pend != nil {
			// A message waits for a receive buffer.
			if len(e.rxq) == 0 {
				return
			}
			h := *e.pend
			e.pend = nil
			if !e.start(h) {
				return
			}
			continue
		}
		if e.cur == nil {
			n, err := e.readSome(e.hdr[e.hdrHave:e.hdrNeed])
			if err != nil {
				e.peerGone(err)
				return
			}
			if n == 0 {
				return
			}
			e.hdrHave += n
			if e.hdrHave < e.hdrNeed {
				continue
			}
			if e.hdrNeed == baseHdrLen {
				hs, err := parseBase(e.hdr[:baseHdrLen])
				if err != nil {
					e.broken(fabric.ErrIO)
					return
				}
				if hs > baseHdrLen {
					e.hdrNeed = hs
					continue
				}
			}
			h, err := parseHeader(e.hdr[:e.hdrNeed])
			e.hdrHave, e.hdrNeed = 0, baseHdrLen
			if err != nil {
				e.broken(fabric.ErrIO)
				return
			}
			if !e.start(h) {
				return
			}
			continue
		}
		f := e.cur
		for len(f.dst) > 0 && len(f.dst[0]) == 0 {
			f.dst = f.dst[1:]
		}
		if len(f.dst) == 0 && f.discard == 0 {
			e.cur = nil
			f.done()
			continue
		}
		var b []byte
		if len(f.dst) > 0 {
			b = f.dst[0]
		} else {
			if e.scratch == nil {
				e.scratch = make([]byte, 64<<10)
			}
			b = e.scratch[:min(uint64(len(e.scratch)), f.discard)]
		}
		n, err := e.readSome(b)
		if err != nil {
			e.peerGone(err)
			return
		}
		if n == 0 {
			return
		}
		if len(f.dst) > 0 {
			f.dst[0] = f.dst[0][n:]
		} else {
			f.discard -= uint64(n)
		}
	}
}

// finishMsg completes the receipt of a message (e.msgFrame's). Called
// with e.mu held.
func (e *ep) finishMsg() {
	f := &e.msgFrame
	h, r, got, n := &f.h, f.rx, f.got, f.n
	flags := fabric.CompRecv | fabric.CompMsg
	if h.op == opTagged || h.flags&flagTagged != 0 {
		flags = fabric.CompRecv | fabric.CompTagged
	}
	if h.flags&flagRemoteCQData != 0 {
		flags |= fabric.CompRemoteCQData
	}
	entry := fabric.CQEntry{Context: r.ctx, Flags: flags, Len: got, Buf: r.buf[:got], Data: h.cqData, Tag: h.tag}
	ack := h.flags&(flagDeliveryComplete|flagCommitComplete) != 0
	*f = rxFrame{}
	if n > got {
		e.comp.Failed(fabric.CQErrEntry{CQEntry: entry, OLen: n - got, Err: fabric.ErrTrunc})
	} else {
		e.comp.Done(entry)
	}
	if ack {
		e.queueFirst(&txEntry{bufs: [][]byte{ackFrame}})
	}
}

// failMsg fails the receive e.msgFrame was filling. Called with e.mu
// held.
func (e *ep) failMsg(errno fabric.Errno) {
	f := &e.msgFrame
	e.comp.Failed(fabric.CQErrEntry{CQEntry: fabric.CQEntry{Context: f.rx.ctx, Flags: fabric.CompRecv | fabric.CompMsg, Buf: f.rx.buf}, Err: errno})
	*f = rxFrame{}
}

// start sets up the receipt of the frame h heads. It returns false when
// the endpoint broke. Called with e.mu held.
func (e *ep) start(h header) bool {
	n := h.payload()
	switch h.op {
	case opMsg, opTagged:
		if h.opData == opDataAck {
			if len(e.ackq) == 0 {
				e.broken(fabric.ErrIO)
				return false
			}
			t := e.ackq[0]
			e.ackq = popFront(e.ackq)
			if t.comp {
				e.comp.Done(fabric.CQEntry{Context: t.ctx, Flags: t.flags, Len: t.length})
			} else if t.flags != 0 {
				e.comp.Count(t.flags)
			}
			e.freeTx(t)
			return true
		}
		if len(e.rxq) == 0 {
			e.pend = &h // the rest stays in the socket until a buffer comes
			return true
		}
		r := e.rxq[0]
		e.rxq = popFront(e.rxq)
		got := min(n, uint64(len(r.buf)))
		f := &e.msgFrame
		*f = rxFrame{h: h, discard: n - got, rx: r, got: got, n: n}
		f.one[0] = r.buf[:got]
		f.dst = f.one[:]
		if e.msgDone == nil {
			e.msgDone, e.msgFail = e.finishMsg, e.failMsg
		}
		f.done, f.fail = e.msgDone, e.msgFail
		e.cur = f
	case opWrite:
		f := &rxFrame{h: h}
		for _, v := range h.iov {
			b, ok := e.d.MRs.Lookup(v.key, v.addr, v.len, fabric.AccessRemoteWrite)
			if !ok {
				e.broken(fabric.ErrAccess)
				return false
			}
			f.dst = append(f.dst, b)
		}
		f.done = func() {
			if h.flags&flagRemoteCQData != 0 {
				e.comp.Done(fabric.CQEntry{Flags: fabric.CompRMA | fabric.CompRemoteWrite | fabric.CompRemoteCQData, Len: n, Data: h.cqData})
			} else {
				e.comp.Count(fabric.CompRMA | fabric.CompRemoteWrite)
			}
			if h.flags&(flagDeliveryComplete|flagCommitComplete) != 0 {
				e.queueFirst(&txEntry{bufs: [][]byte{ackFrame}})
			}
		}
		e.cur = f
	case opReadReq:
		rsp := header{op: opReadRsp}
		var total uint64
		bufs := [][]byte{nil}
		for _, v := range h.iov {
			b, ok := e.d.MRs.Lookup(v.key, v.addr, v.len, fabric.AccessRemoteRead)
			if !ok {
				e.broken(fabric.ErrAccess)
				return false
			}
			bufs = append(bufs, b)
			total += v.len
		}
		hb := make([]byte, maxHdrLen)
		bufs[0] = hb[:marshalHeader(hb, &rsp, total)]
		if e.internalKey == nil || len(h.iov) == 0 || !e.internalKey(h.iov[0].key) {
			e.comp.Count(fabric.CompRMA | fabric.CompRemoteRead)
		}
		e.queueFirst(&txEntry{bufs: bufs})
		e.flushTx()
	case opReadRsp:
		if len(e.readq) == 0 {
			e.broken(fabric.ErrIO)
			return false
		}
		r := e.readq[0]
		e.readq = e.readq[1:]
		if n != uint64(len(r.buf)) {
			e.broken(fabric.ErrIO)
			return false
		}
		f := &rxFrame{h: h, dst: [][]byte{r.buf}}
		f.done = func() {
			e.comp.Done(fabric.CQEntry{Context: r.ctx, Flags: fabric.CompRMA | fabric.CompRead, Len: n})
		}
		f.fail = func(errno fabric.Errno) {
			e.comp.Failed(fabric.CQErrEntry{CQEntry: fabric.CQEntry{Context: r.ctx, Flags: fabric.CompRMA | fabric.CompRead}, Err: errno})
		}
		e.cur = f
	default:
		e.broken(fabric.ErrIO)
		return false
	}
	return true
}

// queueFirst queues an internal frame (ACK, read response) ahead of the
// program's frames not yet started. Called with e.mu held.
func (e *ep) queueFirst(t *txEntry) {
	t.internal = true
	i := 0
	if len(e.txq) > 0 && e.txq[0].started() {
		i = 1 // never cut into a frame half written
	}
	for i < len(e.txq) && e.txq[i].internal {
		i++ // after the internal frames already queued: their order is the peer's
	}
	e.txq = append(e.txq, nil)
	copy(e.txq[i+1:], e.txq[i:])
	e.txq[i] = t
}

func (t *txEntry) started() bool { return t.partial }

// peerGone handles the end of the stream, which is also what a peer
// whose process died leaves (the kernel closes its socket): what is still
// posted can never complete, so it fails with FI_ECANCELED, and the EQ
// gets FI_SHUTDOWN, as libfabric's tcp provider flushes its queues when
// the connection ends. Called with e.mu held.
func (e *ep) peerGone(err error) {
	if e.state != stConnected && e.state != stShutdown {
		return
	}
	if e.cur != nil || e.hdrHave > 0 || e.pend != nil || len(e.ackq) > 0 || len(e.readq) > 0 {
		// Cut off in the middle of something: an error, then the end.
		e.broken(fabric.ErrConnReset)
		return
	}
	e.state = stShutdown
	e.up = false
	e.failAll(fabric.ErrCanceled)
	if e.eq != nil {
		e.eq.Write(fabric.EQEntry{Event: fabric.EventShutdown, FID: e})
	}
}

// broken ends the connection after a protocol or socket error: the
// operations outstanding fail, and the EQ gets an error and FI_SHUTDOWN.
// Called with e.mu held.
func (e *ep) broken(errno fabric.Errno) {
	if e.state != stConnected && e.state != stShutdown {
		return
	}
	e.state = stShutdown
	e.closeSocket()
	e.pend = nil
	e.failAll(errno) // (and the frame under way, e.cur)
	if e.eq != nil {
		e.eq.WriteErr(fabric.EQErrEntry{FID: e, Err: errno})
		e.eq.Write(fabric.EQEntry{Event: fabric.EventShutdown, FID: e})
	}
}

// errnoOf maps a socket error to an errno, or def.
func errnoOf(err error, def fabric.Errno) fabric.Errno {
	var se syscall.Errno
	if errors.As(err, &se) {
		return fabric.Errno(se)
	}
	return def
}
