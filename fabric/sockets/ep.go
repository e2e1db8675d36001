package sockets

import (
	"bufio"
	"bytes"
	"context"
	"encoding/binary"
	"fmt"
	"io"
	"net"
	"net/netip"
	"slices"
	"sync"

	"github.com/rdmago/rdmago/fabric"
	"github.com/rdmago/rdmago/fabric/internal/hostcc"
	"github.com/rdmago/rdmago/fabric/internal/sockpoll"
	"github.com/rdmago/rdmago/internal/yield"
)

// rxEntry is a posted receive.
type rxEntry struct {
	buf    []byte
	ctx    any
	tagged bool
	tag    uint64
	ignore uint64
	src    fabric.Addr // a directed receive's source, or AddrNotAvail
}

// unexpMsg is a message that came before a receive for it was posted.
type unexpMsg struct {
	from   *conn
	tagged bool
	tag    uint64
	data   []byte
	cqData uint64
	hasCQ  bool
}

// waiter is an operation waiting for the peer's response: a send with
// FI_TRANSMIT_COMPLETE, a write, a read.
type waiter struct {
	c      *conn
	ctx    any
	flags  uint64 // completion flags
	report bool   // a CQ entry (not for inject_write: a count only)
	buf    []byte // a read's destination
}

// ep is an endpoint of any of the three types: its data listener, its
// connections, its posted receives and the messages that wait for one.
type ep struct {
	d    fabric.DomainRef
	info *fabric.Info
	typ  fabric.EPType
	ctx  any

	mu sync.Mutex
	fabric.EndpointBinds
	// Its one option is FI_OPT_CM_DATA_SIZE, 256, as C's.
	fabric.CMDataSize
	av      *fabric.AV
	enabled bool
	closed  bool
	ln      *net.TCPListener
	self    netip.AddrPort           // the data listener's address: the endpoint's name
	conns   map[netip.AddrPort]*conn // by the peer's listener
	all     map[*conn]bool           // every connection, to close
	rxq     []*rxEntry               // posted receives, in order
	unexp   []*unexpMsg              // messages no receive was posted for
	waiting map[uint16]*waiter       // by the pe_entry_id their request carried
	nextID  uint16
	queued  int // operations queued on connections, not yet written
	wg      sync.WaitGroup
	closing context.Context
	cancel  context.CancelFunc

	cm *msgCM // FI_EP_MSG: the connection management state
}

func (provider) Endpoint(d fabric.DomainRef, info *fabric.Info, context any) (fabric.EndpointDriver, error) {
	if info == nil || info.EPAttr == nil {
		return nil, fabric.Errorf("fi_endpoint", fabric.ErrInvalid, "no endpoint attributes")
	}
	t := info.EPAttr.Type
	if t != fabric.EPMsg && t != fabric.EPRDM && t != fabric.EPDgram {
		return nil, fabric.Errorf("fi_endpoint", fabric.ErrInvalid, "the sockets provider's endpoints are FI_EP_MSG, FI_EP_RDM and FI_EP_DGRAM")
	}
	e := &ep{d: d, info: info.Dup(), typ: t, ctx: context, conns: map[netip.AddrPort]*conn{}, all: map[*conn]bool{},
		waiting: map[uint16]*waiter{}}
	e.closing, e.cancel = contextWithCancel()
	e.Lock, e.Self, e.CMDataSize = &e.mu, e, maxCMData
	if t == fabric.EPMsg {
		e.cm = &msgCM{}
		if r, ok := info.Handle.(*connReq); ok {
			if !r.pep.Take(r) {
				return nil, fabric.Errorf("fi_endpoint", fabric.ErrInvalid, "the connection request was already answered")
			}
			e.cm.req = r
		}
	}
	return e, nil
}

func contextWithCancel() (context.Context, context.CancelFunc) {
	return context.WithCancel(context.Background())
}

// BindAV binds the address vector RDM and datagram endpoints name their
// peers in.
func (e *ep) BindAV(av *fabric.AV) error {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.av = av
	return nil
}

// Enable checks the bindings and, for RDM and datagram endpoints, starts
// the data listener.
func (e *ep) Enable() error {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.closed {
		return fabric.Errorf("fi_enable", fabric.ErrBadFD, "endpoint closed")
	}
	if e.enabled {
		return nil
	}
	if e.Comp.TxCQ == nil || e.Comp.RxCQ == nil {
		return fabric.Errorf("fi_enable", fabric.ErrNoCQ, "bind CQs for transmit and receive first")
	}
	if e.typ != fabric.EPMsg {
		if e.av == nil {
			return fabric.Errorf("fi_enable", fabric.ErrNoAV, "bind an AV first")
		}
		if err := e.listen(); err != nil {
			return fabric.Errorf("fi_enable", sockpoll.Errno(err, fabric.ErrAddrInUse), err.Error())
		}
	}
	e.enabled = true
	return nil
}

// listen starts the data listener on the entry's source address (its
// port, or one the system picks) and the goroutine that accepts on it.
// Called with e.mu held.
func (e *ep) listen() error {
	if e.ln != nil {
		return nil
	}
	src := e.info.SrcAddr
	if !src.IsValid() {
		src = netip.AddrPortFrom(netip.IPv4Unspecified(), 0)
		if e.info.AddrFormat == fabric.FormatSockaddrIn6 {
			src = netip.AddrPortFrom(netip.IPv6Unspecified(), 0)
		}
	}
	if e.typ == fabric.EPMsg {
		src = netip.AddrPortFrom(src.Addr(), 0) // as C: a MSG endpoint's data port is its own
	}
	ln, err := net.ListenTCP("tcp", net.TCPAddrFromAddrPort(src))
	if err != nil {
		return err
	}
	e.ln = ln
	e.self = ln.Addr().(*net.TCPAddr).AddrPort()
	if e.self.Addr().IsUnspecified() {
		e.self = netip.AddrPortFrom(netip.AddrFrom4([4]byte{127, 0, 0, 1}), e.self.Port())
	}
	e.wg.Add(1)
	go e.accept(ln)
	return nil
}

// accept takes the peers' connections; each names its sender with its
// first message (CONN_MSG).
func (e *ep) accept(ln *net.TCPListener) {
	defer e.wg.Done()
	for {
		nc, err := ln.AcceptTCP()
		if err != nil {
			return
		}
		nc.SetNoDelay(true)
		hostcc.SetConn(nc) // see package hostcc
		e.mu.Lock()
		if e.closed {
			e.mu.Unlock()
			nc.Close()
			return
		}
		c := newConn(e, netip.AddrPort{}, nc)
		e.all[c] = true
		e.mu.Unlock()
		c.start(netip.AddrPort{})
	}
}

// Name returns the endpoint's address (fi_getname): its data listener's,
// or before it listens the entry's source address.
func (e *ep) Name() (netip.AddrPort, error) {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.ln == nil {
		return e.info.SrcAddr, nil
	}
	return e.self, nil
}

// connTo returns the connection operations to dest go on, opening one if
// there is none. Called with e.mu held.
func (e *ep) connTo(op string, dest fabric.Addr) (*conn, error) {
	var peer netip.AddrPort
	if e.typ == fabric.EPMsg {
		if e.cm.state != cmConnected {
			return nil, fabric.Errorf(op, fabric.ErrNotConn, "the endpoint is not connected")
		}
		peer = e.cm.peer
	} else {
		if e.av == nil {
			return nil, fabric.Errorf(op, fabric.ErrNoAV, "no AV bound")
		}
		a, err := e.av.Lookup(dest)
		if err != nil {
			return nil, fabric.Errorf(op, fabric.ErrInvalid, fmt.Sprintf("no address at handle %d", dest))
		}
		peer = a
	}
	if c := e.conns[peer]; c != nil {
		return c, nil
	}
	if e.typ == fabric.EPMsg {
		// The peer's own connection, if it made one, serves both ways.
		for c := range e.all {
			return c, nil
		}
	}
	c := newConn(e, peer, nil)
	e.conns[peer] = c
	e.all[c] = true
	c.start(e.self)
	return c, nil
}

// connGone forgets a connection that ended, failing the operations that
// wait for a response on it.
func (e *ep) connGone(c *conn, errno fabric.Errno) {
	e.mu.Lock()
	delete(e.all, c)
	if e.conns[c.peer] == c {
		delete(e.conns, c.peer)
	}
	var failed []*waiter
	for id, w := range e.waiting {
		if w.c == c {
			failed = append(failed, w)
			delete(e.waiting, id)
		}
	}
	e.mu.Unlock()
	for _, w := range failed {
		if w.report {
			e.Comp.Failed(fabric.CQErrEntry{CQEntry: fabric.CQEntry{Context: w.ctx, Flags: w.flags}, Err: errno})
		}
	}
}

// ---- Sending ----

// post queues a message on the connection to dest. A waiter, if w is not
// nil, awaits the peer's response under a pe_entry_id of its own, which
// h gets.
func (e *ep) post(op string, dest fabric.Addr, h header, parts [][]byte, r *txReq, w *waiter) error {
	e.mu.Lock()
	if e.closed {
		e.mu.Unlock()
		return fabric.Errorf(op, fabric.ErrBadFD, "endpoint closed")
	}
	if !e.enabled {
		e.mu.Unlock()
		return fabric.Errorf(op, fabric.ErrOpBadState, "endpoint not enabled")
	}
	if e.queued >= queueSize {
		e.mu.Unlock()
		return fabric.ErrAgain
	}
	c, err := e.connTo(op, dest)
	if err != nil {
		e.mu.Unlock()
		return err
	}
	if w != nil {
		w.c = c
		h.peID = e.newID()
		e.waiting[h.peID] = w
		r.peID, r.waits = h.peID, true
	}
	n := 0
	for _, p := range parts {
		n += len(p)
	}
	h.msgLen = uint64(hdrLen + n)
	var hb [hdrLen]byte
	h.put(hb[:])
	r.bufs = append([][]byte{hb[:]}, parts...)
	e.queued++
	e.mu.Unlock()
	if !c.send(r) {
		e.unwritten(r, fabric.ErrConnReset)
	}
	return nil
}

// newID returns a pe_entry_id no waiter has. Called with e.mu held.
func (e *ep) newID() uint16 {
	for {
		e.nextID++
		if e.waiting[e.nextID] == nil {
			return e.nextID
		}
	}
}

// written reports an operation its connection wrote.
func (e *ep) written(r *txReq) {
	if !r.internal {
		e.mu.Lock()
		e.queued--
		e.mu.Unlock()
	}
	switch {
	case r.report:
		e.Comp.Done(fabric.CQEntry{Context: r.ctx, Flags: r.flags})
	case r.count:
		e.Comp.Count(r.flags)
	}
}

// unwritten fails an operation its connection could not write.
func (e *ep) unwritten(r *txReq, errno fabric.Errno) {
	e.mu.Lock()
	if !r.internal {
		e.queued--
	}
	var w *waiter
	if r.waits {
		w = e.waiting[r.peID]
		delete(e.waiting, r.peID)
	}
	e.mu.Unlock()
	switch {
	case w != nil && w.report, r.report:
		e.Comp.Failed(fabric.CQErrEntry{CQEntry: fabric.CQEntry{Context: r.ctx, Flags: r.flags}, Err: errno})
	}
}

// sendFlags is what a send's header says of it: FI_TRANSMIT_COMPLETE
// when the program waits for the peer (then the peer acknowledges it),
// FI_INJECT_COMPLETE otherwise (as C marks its injects), and
// FI_REMOTE_CQ_DATA.
func sendFlags(flags uint64, withData bool) (wire uint64, ack bool) {
	ack = flags&(fabric.FlagTransmitComplete|fabric.FlagDeliveryComplete) != 0
	if ack {
		wire = flagTransmitComplete
	} else {
		wire = flagInjectComplete
	}
	if withData {
		wire |= flagRemoteCQData
	}
	return wire, ack
}

// send sends a message: tagged with tag if tagged, with CQ data if
// withData, injected (copied now, no completion) with FlagInject.
func (e *ep) send(op string, buf []byte, dest fabric.Addr, context any, flags uint64, tagged bool, tag uint64, withData bool, data uint64) error {
	h := header{op: opSend}
	var extra []byte
	if tagged {
		h.op = opTSend
		extra = binary.LittleEndian.AppendUint64(extra, tag)
	}
	if withData {
		extra = binary.LittleEndian.AppendUint64(extra, data)
	}
	var ack bool
	h.flags, ack = sendFlags(flags, withData)
	comp := fabric.CompSend | fabric.CompMsg
	if tagged {
		comp = fabric.CompSend | fabric.CompTagged
	}
	r := &txReq{ctx: context, flags: comp}
	payload := buf
	if flags&fabric.FlagInject != 0 {
		payload = slices.Clone(buf)
		r.count = true
		ack = false
		h.flags = h.flags&^flagTransmitComplete | flagInjectComplete
	} else if !ack {
		r.report = true
	}
	var w *waiter
	if ack {
		w = &waiter{ctx: context, flags: comp, report: true}
	}
	return e.post(op, dest, h, [][]byte{extra, payload}, r, w)
}

func (e *ep) Send(buf []byte, _ any, dest fabric.Addr, context any) error {
	return e.send("fi_send", buf, dest, context, 0, false, 0, false, 0)
}

func (e *ep) SendData(buf []byte, _ any, data uint64, dest fabric.Addr, context any) error {
	return e.send("fi_senddata", buf, dest, context, 0, false, 0, true, data)
}

func (e *ep) Inject(buf []byte, dest fabric.Addr) error {
	return e.send("fi_inject", buf, dest, nil, fabric.FlagInject, false, 0, false, 0)
}

func (e *ep) SendMsg(m *fabric.Msg, flags uint64) error {
	return e.send("fi_sendmsg", m.Buf, m.Addr, m.Context, flags, false, 0, flags&fabric.FlagRemoteCQData != 0, m.Data)
}

func (e *ep) TSend(buf []byte, _ any, dest fabric.Addr, tag uint64, context any) error {
	return e.send("fi_tsend", buf, dest, context, 0, true, tag, false, 0)
}

func (e *ep) TInject(buf []byte, dest fabric.Addr, tag uint64) error {
	return e.send("fi_tinject", buf, dest, nil, fabric.FlagInject, true, tag, false, 0)
}

func (e *ep) TSendMsg(m *fabric.Msg, tag uint64, flags uint64) error {
	return e.send("fi_tsendmsg", m.Buf, m.Addr, m.Context, flags, true, tag, flags&fabric.FlagRemoteCQData != 0, m.Data)
}

// ---- RMA ----

// noRMA refuses RMA on a datagram endpoint, which has no FI_RMA.
func (e *ep) noRMA(op string) error {
	if e.typ == fabric.EPDgram {
		return fabric.Errorf(op, fabric.ErrNoSys, "FI_EP_DGRAM endpoints have no FI_RMA")
	}
	return nil
}

func (e *ep) write(op string, buf []byte, dest fabric.Addr, addr, key uint64, context any, withData bool, data uint64, inject bool) error {
	if err := e.noRMA(op); err != nil {
		return err
	}
	h := header{op: opWrite, destIOVLen: 1}
	var extra []byte
	if withData {
		h.flags |= flagRemoteCQData
		extra = binary.LittleEndian.AppendUint64(extra, data)
	}
	var iov [iovLen]byte
	rmaIOV{addr, uint64(len(buf)), key}.put(iov[:])
	extra = append(extra, iov[:]...)
	payload := buf
	w := &waiter{ctx: context, flags: fabric.CompRMA | fabric.CompWrite, report: true}
	if inject {
		payload = slices.Clone(buf)
		w.report = false
	}
	return e.post(op, dest, h, [][]byte{extra, payload}, &txReq{ctx: context, flags: w.flags}, w)
}

func (e *ep) Write(buf []byte, _ any, dest fabric.Addr, addr, key uint64, context any) error {
	return e.write("fi_write", buf, dest, addr, key, context, false, 0, false)
}

func (e *ep) WriteData(buf []byte, _ any, data uint64, dest fabric.Addr, addr, key uint64, context any) error {
	return e.write("fi_writedata", buf, dest, addr, key, context, true, data, false)
}

func (e *ep) InjectWrite(buf []byte, dest fabric.Addr, addr, key uint64) error {
	return e.write("fi_inject_write", buf, dest, addr, key, nil, false, 0, true)
}

func (e *ep) Read(buf []byte, _ any, src fabric.Addr, addr, key uint64, context any) error {
	if err := e.noRMA("fi_read"); err != nil {
		return err
	}
	h := header{op: opRead, destIOVLen: 1}
	var iov [iovLen]byte
	rmaIOV{addr, uint64(len(buf)), key}.put(iov[:])
	w := &waiter{ctx: context, flags: fabric.CompRMA | fabric.CompRead, report: true, buf: buf}
	return e.post("fi_read", src, h, [][]byte{iov[:]}, &txReq{ctx: context, flags: w.flags}, w)
}

// ---- Receiving ----

// Recv posts a receive buffer (fi_recv); src, if not FI_ADDR_NOTAVAIL,
// takes only messages from that AV entry (FI_DIRECTED_RECV).
func (e *ep) Recv(buf []byte, _ any, src fabric.Addr, context any) error {
	return e.postRecv("fi_recv", &rxEntry{buf: buf, ctx: context, src: src})
}

// TRecv posts a receive for a tagged message whose tag matches tag in
// the bits ignore leaves (fi_trecv).
func (e *ep) TRecv(buf []byte, _ any, src fabric.Addr, tag, ignore uint64, context any) error {
	return e.postRecv("fi_trecv", &rxEntry{buf: buf, ctx: context, tagged: true, tag: tag, ignore: ignore, src: src})
}

func (e *ep) postRecv(op string, rx *rxEntry) error {
	e.mu.Lock()
	if e.closed {
		e.mu.Unlock()
		return fabric.Errorf(op, fabric.ErrBadFD, "endpoint closed")
	}
	for i, m := range e.unexp {
		if e.matches(rx, m.from, m.tagged, m.tag) {
			e.unexp = slices.Delete(e.unexp, i, i+1)
			src := e.source(m.from)
			e.mu.Unlock()
			n := copy(rx.buf, m.data)
			e.received(rx, src, n, len(m.data), m.tagged, m.tag, m.hasCQ, m.cqData)
			return nil
		}
	}
	if len(e.rxq) >= queueSize {
		e.mu.Unlock()
		return fabric.ErrAgain
	}
	e.rxq = append(e.rxq, rx)
	e.mu.Unlock()
	return nil
}

// matches reports whether receive rx takes a message from c. Called with
// e.mu held.
func (e *ep) matches(rx *rxEntry, c *conn, tagged bool, tag uint64) bool {
	if rx.tagged != tagged || tagged && (rx.tag^tag)&^rx.ignore != 0 {
		return false
	}
	return rx.src == fabric.AddrNotAvail || e.typ == fabric.EPMsg || rx.src == e.source(c)
}

// source is the AV handle of the peer on c, or AddrNotAvail. Called with
// e.mu held.
func (e *ep) source(c *conn) fabric.Addr {
	if e.av == nil || !c.peer.IsValid() || e.typ == fabric.EPMsg {
		return fabric.AddrNotAvail
	}
	return e.av.Find(c.peer)
}

// take removes and returns the first receive that takes a message from
// c, or nil. Called with e.mu held.
func (e *ep) take(c *conn, tagged bool, tag uint64) *rxEntry {
	for i, rx := range e.rxq {
		if e.matches(rx, c, tagged, tag) {
			e.rxq = slices.Delete(e.rxq, i, i+1)
			return rx
		}
	}
	return nil
}

// received completes receive rx with a message of total bytes, n of which
// it holds.
func (e *ep) received(rx *rxEntry, src fabric.Addr, n, total int, tagged bool, tag uint64, hasCQ bool, cqData uint64) {
	flags := fabric.CompRecv | fabric.CompMsg
	if tagged {
		flags = fabric.CompRecv | fabric.CompTagged
	}
	ce := fabric.CQEntry{Context: rx.ctx, Flags: flags, Len: uint64(n), Buf: rx.buf[:n], Tag: tag}
	if hasCQ {
		ce.Flags |= fabric.CompRemoteCQData
		ce.Data = cqData
	}
	ce = ce.WithSource(src)
	if total > n {
		e.Comp.Failed(fabric.CQErrEntry{CQEntry: ce, OLen: uint64(total - n), Err: fabric.ErrTrunc})
		return
	}
	e.Comp.Done(ce)
}

// receive reads one message from c's connection and acts on it.
func (e *ep) receive(c *conn, r *bufio.Reader) error {
	var hb [respLen]byte
	if _, err := io.ReadFull(r, hb[:hdrLen]); err != nil {
		return err
	}
	h, err := parseHeader(hb[:])
	if err != nil {
		return err
	}
	switch h.op {
	case opConnMsg:
		var a [addrLen]byte
		if _, err := io.ReadFull(r, a[:]); err != nil {
			return err
		}
		peer, err := parseAddr(a[:])
		if err != nil {
			return err
		}
		e.named(c, peer)
		return discard(r, h.msgLen-hdrLen-addrLen)
	case opSend, opTSend:
		return e.receiveMsg(c, r, h)
	case opWrite:
		return e.receiveWrite(c, r, h)
	case opRead:
		return e.receiveRead(c, r, h)
	case opAtomic:
		return e.receiveAtomic(c, r, h)
	}
	// A response.
	if _, err := io.ReadFull(r, hb[hdrLen:respLen]); err != nil {
		return err
	}
	resp := parseResponse(hb[:])
	e.mu.Lock()
	w := e.waiting[resp.peID]
	if w != nil && w.c == c {
		delete(e.waiting, resp.peID)
	} else {
		w = nil
	}
	e.mu.Unlock()
	rest := h.msgLen - respLen
	if w == nil {
		return discard(r, rest) // a response to nothing of ours: dropped
	}
	switch h.op {
	case opReadComplete:
		n := min(rest, uint64(len(w.buf)))
		if _, err := io.ReadFull(r, w.buf[:n]); err != nil {
			return err
		}
		if err := discard(r, rest-n); err != nil {
			return err
		}
		e.Comp.Done(fabric.CQEntry{Context: w.ctx, Flags: w.flags})
		return nil
	case opAtomicDone:
		if w.buf != nil { // a fetch: the target's prior elements
			n := min(rest, uint64(len(w.buf)))
			if _, err := io.ReadFull(r, w.buf[:n]); err != nil {
				return err
			}
			rest -= n
		}
		e.Comp.Done(fabric.CQEntry{Context: w.ctx, Flags: w.flags})
	case opSendComplete, opWriteComplete:
		if w.report {
			e.Comp.Done(fabric.CQEntry{Context: w.ctx, Flags: w.flags})
		} else {
			e.Comp.Count(w.flags)
		}
	default: // an _ERROR
		errno := fabric.Errno(resp.err)
		if errno == 0 {
			errno = fabric.ErrIO
		}
		e.Comp.Failed(fabric.CQErrEntry{CQEntry: fabric.CQEntry{Context: w.ctx, Flags: w.flags}, Err: errno})
	}
	return discard(r, rest)
}

// named records the peer a connection's CONN_MSG names: the connection
// serves the endpoint's operations to that peer unless it has one.
func (e *ep) named(c *conn, peer netip.AddrPort) {
	e.mu.Lock()
	defer e.mu.Unlock()
	if c.peer.IsValid() {
		return
	}
	c.peer = peer
	if e.conns[peer] == nil {
		e.conns[peer] = c
	}
}

func (e *ep) receiveMsg(c *conn, r *bufio.Reader, h header) error {
	var b [16]byte
	var tag, cqData uint64
	tagged, hasCQ := h.op == opTSend, h.flags&flagRemoteCQData != 0
	if tagged {
		if _, err := io.ReadFull(r, b[:8]); err != nil {
			return err
		}
		tag = binary.LittleEndian.Uint64(b[:8])
	}
	if hasCQ {
		if _, err := io.ReadFull(r, b[8:]); err != nil {
			return err
		}
		cqData = binary.LittleEndian.Uint64(b[8:])
	}
	total := h.msgLen - uint64(h.fixedLen())
	e.mu.Lock()
	rx := e.take(c, tagged, tag)
	src := e.source(c)
	e.mu.Unlock()
	if rx == nil {
		if total > maxBuffer {
			return fmt.Errorf("%w: a %d-byte message with no receive posted", errWire, total)
		}
		data, err := readN(r, total)
		if err != nil {
			return err
		}
		e.mu.Lock()
		rx = e.take(c, tagged, tag)
		if rx == nil {
			e.unexp = append(e.unexp, &unexpMsg{from: c, tagged: tagged, tag: tag, data: data, cqData: cqData, hasCQ: hasCQ})
		}
		src = e.source(c)
		e.mu.Unlock()
		if rx != nil {
			e.received(rx, src, copy(rx.buf, data), len(data), tagged, tag, hasCQ, cqData)
		}
	} else {
		n := min(total, uint64(len(rx.buf)))
		if _, err := io.ReadFull(r, rx.buf[:n]); err != nil {
			e.Comp.Failed(fabric.CQErrEntry{CQEntry: fabric.CQEntry{Context: rx.ctx, Flags: fabric.CompRecv}, Err: fabric.ErrIO})
			return err
		}
		if err := discard(r, total-n); err != nil {
			return err
		}
		e.received(rx, src, int(n), int(total), tagged, tag, hasCQ, cqData)
	}
	if h.flags&(flagTransmitComplete|flagDeliveryComplete) != 0 {
		e.respond(c, opSendComplete, h, 0, nil)
	}
	return nil
}

// readIOVs reads a request's target ranges.
func readIOVs(r *bufio.Reader, n int) ([]rmaIOV, error) {
	b := make([]byte, n*iovLen)
	if _, err := io.ReadFull(r, b); err != nil {
		return nil, err
	}
	v := make([]rmaIOV, n)
	for i := range v {
		v[i] = parseIOV(b[i*iovLen:])
	}
	return v, nil
}

// regions returns the bytes of ranges v, if the domain's regions grant
// access to every one.
func (e *ep) regions(v []rmaIOV, access uint64) ([][]byte, bool) {
	out := make([][]byte, len(v))
	for i, x := range v {
		b, ok := e.d.MRs.Lookup(x.key, x.addr, x.len, access)
		if !ok {
			return nil, false
		}
		out[i] = b
	}
	return out, true
}

func (e *ep) receiveWrite(c *conn, r *bufio.Reader, h header) error {
	var cqData uint64
	hasCQ := h.flags&flagRemoteCQData != 0
	if hasCQ {
		var b [8]byte
		if _, err := io.ReadFull(r, b[:]); err != nil {
			return err
		}
		cqData = binary.LittleEndian.Uint64(b[:])
	}
	v, err := readIOVs(r, int(h.destIOVLen))
	if err != nil {
		return err
	}
	total := h.msgLen - uint64(h.fixedLen())
	dst, ok := e.regions(v, fabric.AccessRemoteWrite)
	if !ok {
		if err := discard(r, total); err != nil {
			return err
		}
		e.respond(c, opWriteError, h, fabric.ErrAccess, nil)
		return nil
	}
	for _, b := range dst {
		n := min(uint64(len(b)), total)
		if _, err := io.ReadFull(r, b[:n]); err != nil {
			return err
		}
		total -= n
	}
	if err := discard(r, total); err != nil {
		return err
	}
	if hasCQ {
		e.Comp.Done(fabric.CQEntry{Flags: fabric.CompRMA | fabric.CompRemoteWrite | fabric.CompRemoteCQData, Data: cqData})
	} else {
		e.Comp.Count(fabric.CompRemoteWrite)
	}
	e.respond(c, opWriteComplete, h, 0, nil)
	return nil
}

func (e *ep) receiveRead(c *conn, r *bufio.Reader, h header) error {
	v, err := readIOVs(r, int(h.destIOVLen))
	if err != nil {
		return err
	}
	if err := discard(r, h.msgLen-uint64(h.fixedLen())); err != nil {
		return err
	}
	src, ok := e.regions(v, fabric.AccessRemoteRead)
	if !ok {
		e.respond(c, opReadError, h, fabric.ErrAccess, nil)
		return nil
	}
	e.Comp.Count(fabric.CompRemoteRead)
	e.respond(c, opReadComplete, h, 0, src)
	return nil
}

// respond queues a response to request h on c, with data after it.
func (e *ep) respond(c *conn, op uint8, h header, errno fabric.Errno, data [][]byte) {
	n := 0
	for _, b := range data {
		n += len(b)
	}
	b := make([]byte, respLen)
	putResponse(b, op, h.rxID, h.peID, int32(errno), n)
	c.send(&txReq{bufs: append([][]byte{b}, data...), internal: true})
}

// readN reads n bytes, growing the buffer as they come: a peer that
// announces a long message and sends little makes the endpoint hold
// only what it sent.
func readN(r *bufio.Reader, n uint64) ([]byte, error) {
	const chunk = 64 << 10
	if n <= chunk {
		b := make([]byte, n)
		_, err := io.ReadFull(r, b)
		return b, err
	}
	var buf bytes.Buffer
	_, err := io.CopyN(&buf, r, int64(n))
	if err == io.EOF {
		err = io.ErrUnexpectedEOF
	}
	return buf.Bytes(), err
}

// discard reads and drops n bytes.
func discard(r *bufio.Reader, n uint64) error {
	for n > 0 {
		k, err := r.Discard(int(min(n, 1<<30)))
		n -= uint64(k)
		if err != nil {
			return err
		}
	}
	return nil
}

// Progress lets the connections' goroutines, which progress the
// endpoint, run: a program that polls its CQ in a loop would otherwise
// keep the CPU they need (sched_yield returns at once when nothing else
// is runnable).
func (e *ep) Progress() { yield.CPU() }

// Close closes the connections and the listener and waits for their
// goroutines; what is still outstanding completes with FI_ECANCELED.
func (e *ep) Close() error {
	e.mu.Lock()
	if e.closed {
		e.mu.Unlock()
		return nil
	}
	e.closed = true
	e.cancel()
	if e.ln != nil {
		e.ln.Close()
	}
	conns := make([]*conn, 0, len(e.all))
	for c := range e.all {
		conns = append(conns, c)
	}
	e.mu.Unlock()
	e.closeCM()
	for _, c := range conns {
		c.fail(fabric.ErrCanceled)
	}
	e.wg.Wait()
	e.mu.Lock()
	rxq, waiting := e.rxq, e.waiting
	e.rxq, e.waiting, e.unexp = nil, map[uint16]*waiter{}, nil
	e.mu.Unlock()
	for _, rx := range rxq {
		e.Comp.Failed(fabric.CQErrEntry{CQEntry: fabric.CQEntry{Context: rx.ctx, Flags: fabric.CompRecv}, Err: fabric.ErrCanceled})
	}
	for _, w := range waiting {
		if w.report {
			e.Comp.Failed(fabric.CQErrEntry{CQEntry: fabric.CQEntry{Context: w.ctx, Flags: w.flags}, Err: fabric.ErrCanceled})
		}
	}
	e.Comp.Detach(e)
	return nil
}
