package rsocket

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/netip"
	"os"
	"sync"
	"syscall"
	"time"

	"github.com/rdmago/rdmago/rdmacm"
	"github.com/rdmago/rdmago/verbs"
)

// Limits and defaults of librdmacm's rsocket.c.
const (
	maxTransfer = 65536 // RS_MAX_TRANSFER: the largest chunk
	sndLowat    = 2048  // RS_SNDLOWAT: send-buffer room a chunk waits for
	qpMinSize   = 16    // RS_QP_MIN_SIZE
	qpMaxSize   = 0xfffe
	ctrlSlots   = 4 // RS_QP_CTRL_SIZE: control messages in flight

	defaultBuffer    = 128 << 10 // mem_default, wmem_default
	defaultQueueSize = 384       // sqsize_default, rqsize_default
	defaultInline    = 64        // inline_default
	// DefaultKeepAlive is the keepalive period of a Config that sets
	// none, the period Go's net package gives TCP.
	DefaultKeepAlive = 15 * time.Second
	// closeWait bounds how long Close and CloseWrite wait for their
	// last messages to be acknowledged.
	closeWait = 2 * time.Second
	// keepAliveMisses is how many looks in a row (see probeEvery) may
	// find sends outstanding and none completed before the peer is
	// given up on.
	keepAliveMisses = 3
	// probeEvery is how often a connection looks at its peer: whether
	// what it sent was acknowledged, and, while a Read or Write waits
	// with nothing outstanding, to send a probe (the keepalive message,
	// whether or not keepalives are on). A dead peer is given up on
	// within (keepAliveMisses+1) × probeEvery, 8 s, of a call starting
	// to wait on it, or of the send it did not acknowledge. (A shorter
	// KeepAlive shortens both.)
	probeEvery = 2 * time.Second
)

// recvFlag marks a receive's work request ID (RS_WR_ID_FLAG_RECV); a
// send's ID is its immediate.
const recvFlag = 1 << 63

// Addr is the address of an rsocket endpoint: an IP address and an
// rdma_cm port in the TCP port space. It prints as a TCP address does.
type Addr struct{ netip.AddrPort }

// Network returns "rsocket".
func (Addr) Network() string { return "rsocket" }

// Conn is a connected rsocket: a byte stream over an RC QP, wire-
// compatible with librdmacm's rsockets (rsocket, rconnect, raccept,
// rsend, rrecv, rshutdown, rclose). It implements net.Conn; reads and
// writes may run at once, from different goroutines.
type Conn struct {
	rc     *rdmacm.Conn
	qp     *verbs.QP
	cq     *verbs.CQ
	smr    *verbs.MR // the send buffer
	cmr    *verbs.MR // ctrlSlots control-message slots (the SGEs credit updates carry)
	rmr    *verbs.MR // the receive ring
	tmr    *verbs.MR // the target SGL array the peer writes receive buffers into, then the target iomap
	local  Addr
	remote Addr

	rbufSize, sbufSize, qsize, inline int
	pollTime                          time.Duration // how long a wait polls before it sleeps (spin)
	iomapSize                         int           // entries of this side's target iomap

	rmu, wmu sync.Mutex // one Read, one Write at a time
	rdl, wdl *deadline

	ctx    context.Context // canceled by Close: ends the goroutines
	cancel context.CancelFunc
	wg     sync.WaitGroup
	ka     *time.Timer

	mu sync.Mutex
	// Scratch for posting under mu, so that a post allocates nothing
	// (the providers copy what they keep).
	wrBuf    [1]verbs.SendWR
	sgeBuf   [2]verbs.SGE
	recvBuf  [32]verbs.RecvWR
	wcs      [32]verbs.WC  // completions a spinning wait polls into
	wake     chan struct{} // closed and replaced when the state moves
	waiting  int           // goroutines waiting on wake
	moves    uint64        // broadcasts so far: how a spinning wait sees the state move
	cqWaiter func()        // wakes the goroutine sleeping on the CQ (waitCQ), if one does
	closing  bool          // Close has begun

	connected, readable, writable bool
	err                           error // the connection's failure

	// Sending (librdmacm's sseq_no, sseq_comp, sqe_avail, sbuf_bytes_avail,
	// target_sgl, target_sge, ctrl_seqno, ctrl_max_seqno, remote_sgl,
	// remote_sge).
	sseqNo, sseqComp uint16
	sqeAvail         int
	sbufAvail        int
	sbufHead         int // where the next send is copied to
	tgt              [sglSize]SGE
	tgtIdx           int // the entry sends go to
	tgtNext          int // the entry the peer writes next
	ctrlSeq, ctrlMax uint32
	remoteSGL        SGE
	remoteSGE        int
	peerBE           bool // the peer's SGL array is big-endian

	// Receiving (rmsg, rbuf_offset, rbuf_bytes_avail, rbuf_free_offset,
	// rseq_no, rseq_comp).
	rmsg      []uint32 // lengths of the data messages received, in order
	rmsgHead  int
	rmsgLen   int
	rbufOff   int
	rbufAvail int // free ring not yet given to the peer
	rbufFree  int // where the next half given to the peer starts
	rqueued   int // bytes received and not yet read
	rgiven    int // ring given to the peer and not yet written
	rseqNo    uint16
	rseqComp  uint16

	// Keepalive and dead-peer probes: the keepalive period, sends
	// completed so far, that count at the last look, the looks in a row
	// that saw none complete, and the time since the last keepalive.
	ka0       time.Duration
	sendsDone uint64
	doneAtKA  uint64
	kaMisses  int
	sinceKA   time.Duration

	iom iomaps // riomap's mappings, both ways (iomap.go)
}

// errReset and errShutdown are the causes writes report after the peer
// disconnected or after CloseWrite.
var (
	errReset    = fmt.Errorf("the peer disconnected: %w", syscall.ECONNRESET)
	errShutdown = fmt.Errorf("write after CloseWrite: %w", syscall.EPIPE)
)

// setup registers a new connection's memory and posts its receives,
// before it is connected (rs_create_ep, rs_init_bufs). It runs as
// rdmacm's Setup.
func (c *Conn) setup(rc *rdmacm.Conn) error {
	c.rc, c.qp, c.cq = rc, rc.QP, rc.RecvCQ
	pd := rc.PD
	var err error
	if c.pollTime > 0 {
		// Polls drive a software device (its manual progress); waits
		// work as before. A hardware device ignores it.
		if err = pd.Context().SetProgress(verbs.ProgressManual); err != nil {
			return err
		}
	}
	// The control slots have memory of their own, so that the send
	// buffer's is exactly the size configured: a power of two stays
	// one, wasting no page, and the ring wraps where chunks end.
	if c.smr, err = pd.RegMR(make([]byte, c.sbufSize), verbs.AccessLocalWrite); err != nil {
		return err
	}
	if c.cmr, err = pd.RegMR(make([]byte, ctrlSlots*sgeLen), verbs.AccessLocalWrite); err != nil {
		return err
	}
	rw := verbs.AccessLocalWrite | verbs.AccessRemoteWrite
	if c.tmr, err = pd.RegMR(make([]byte, sglSize*sgeLen+c.iomapSize*iomapLen), rw); err != nil {
		return err
	}
	if c.rmr, err = pd.RegMR(make([]byte, c.rbufSize), rw); err != nil {
		return err
	}
	recvs := make([]verbs.RecvWR, c.qsize)
	for i := range recvs {
		recvs[i].WRID = recvFlag
	}
	return c.qp.PostRecv(recvs)
}

// connData is this side's rs_conn_data (rs_format_conn_data).
func (c *Conn) connData() []byte {
	d := ConnData{
		Version:   Version,
		Flags:     connFlagIOMap, // the SGL array and the iomap after it are little-endian
		Credits:   uint16(c.qsize),
		IOMapSize: valueToScale(c.iomapSize),
		TargetSGL: SGE{Addr: c.tmr.Addr(), Key: c.tmr.RKey(), Length: sglSize},
		DataBuf:   SGE{Addr: c.rmr.Addr(), Key: c.rmr.RKey(), Length: uint32(c.rbufSize / 2)},
	}
	return d.Marshal()
}

// start takes the peer's connection data and starts the connection's
// goroutines.
func (c *Conn) start(peer ConnData) {
	c.init(peer)
	c.wg.Add(1)
	go c.watchCM()
	c.mu.Lock()
	c.ka = time.AfterFunc(c.look(), c.keepAlive)
	c.mu.Unlock()
}

// look is the period of keepAlive's looks at the peer.
func (c *Conn) look() time.Duration {
	if c.ka0 > 0 && c.ka0 < probeEvery {
		return c.ka0
	}
	return probeEvery
}

// init sets the connection's state from the peer's connection data
// (rs_save_conn_data, and rs_init_bufs for this side's counters).
func (c *Conn) init(peer ConnData) {
	c.remoteSGL = peer.TargetSGL
	c.remoteSGE = 1
	c.peerBE = peer.BigEndian()
	c.tgt[0] = peer.DataBuf
	c.tgtNext = 1
	c.sseqComp = peer.Credits
	c.sqeAvail = c.qsize - ctrlSlots
	c.ctrlMax = ctrlSlots
	c.sbufAvail = c.sbufSize
	c.rbufFree, c.rbufAvail, c.rgiven = c.rbufSize/2, c.rbufSize/2, c.rbufSize/2
	c.rseqComp = uint16(c.qsize / 2)
	c.rmsg = make([]uint32, c.qsize+1)
	c.connected, c.readable, c.writable = true, true, true
	if c.rc != nil {
		c.local = Addr{c.rc.LocalAddr()}
		c.remote = Addr{c.rc.RemoteAddr()}
	}
	c.wake = make(chan struct{})
	c.rdl, c.wdl = newDeadline(), newDeadline()
	c.initIOMaps(peer)
	c.ctx, c.cancel = context.WithCancel(context.Background())
}

// release frees what setup made, on a connection that never started.
func (c *Conn) release() {
	for _, mr := range []*verbs.MR{c.smr, c.cmr, c.tmr, c.rmr} {
		if mr != nil {
			mr.Dereg()
		}
	}
	c.smr, c.cmr, c.tmr, c.rmr = nil, nil, nil, nil
	c.releaseIOMaps()
}

// Read reads data the peer sent (rrecv). It returns io.EOF once the peer
// has shut down its side or disconnected and every byte before that was
// read.
func (c *Conn) Read(b []byte) (int, error) {
	c.rmu.Lock()
	defer c.rmu.Unlock()
	c.mu.Lock()
	defer c.mu.Unlock()
	if err := c.usable(c.rdl); err != nil {
		return 0, c.opError("read", err)
	}
	if len(b) == 0 {
		return 0, nil
	}
	var since time.Time // when this call first polled (spin)
	for {
		// Closing first: a Close while this call waited frees the
		// ring, even if data came meanwhile.
		if c.closing {
			return 0, c.opError("read", net.ErrClosed)
		}
		if c.rmsgLen > 0 {
			break
		}
		if !c.readable {
			if c.err != nil {
				return 0, c.opError("read", c.err)
			}
			return 0, io.EOF
		}
		if err := c.wait(c.rdl, &since); err != nil {
			return 0, c.opError("read", err)
		}
	}
	n, ring, want := 0, c.rmr.Buf(), min(len(b), c.rqueued)
	for n < want {
		n += copy(b[n:want], ring[(c.rbufOff+n)%c.rbufSize:])
	}
	c.consume(n)
	c.updateCredits()
	return n, nil
}

// consume takes n bytes the program has read off the queue of received
// messages, and frees their part of the ring.
func (c *Conn) consume(n int) {
	for n > 0 {
		d := int(c.rmsg[c.rmsgHead])
		take := min(d, n)
		c.rbufOff = (c.rbufOff + take) % c.rbufSize
		c.rbufAvail += take
		c.rqueued -= take
		n -= take
		if take == d {
			c.rseqNo++
			c.rmsgHead = (c.rmsgHead + 1) % len(c.rmsg)
			c.rmsgLen--
		} else {
			c.rmsg[c.rmsgHead] -= uint32(take)
		}
	}
}

// Write sends b (rsend): it copies b into the registered send buffer in
// chunks, each an RDMA WRITE WITH IMMEDIATE into the peer's ring, and
// returns once all of b is posted or the connection or a deadline ends
// it.
func (c *Conn) Write(b []byte) (int, error) {
	c.wmu.Lock()
	defer c.wmu.Unlock()
	c.mu.Lock()
	defer c.mu.Unlock()
	if err := c.usable(c.wdl); err != nil {
		return 0, c.opError("write", err)
	}
	n := 0
	var since time.Time // when the call first polled since it last sent (spin)
	for n < len(b) {
		if c.closing {
			return n, c.opError("write", net.ErrClosed)
		}
		if !c.writable {
			return n, c.opError("write", c.writeErr())
		}
		if !c.canSend() {
			if err := c.wait(c.wdl, &since); err != nil {
				return n, c.opError("write", err)
			}
			continue
		}
		// rsockets' first chunk is 2 KiB (RS_OLAP_START_SIZE), doubling
		// up to maxTransfer, so that the NIC sends one chunk while the
		// next is copied. A software device's post sends at once, on
		// this goroutine: there is nothing to overlap, and each chunk
		// costs a post, so every chunk is as large as it may be.
		size := min(len(b)-n, maxTransfer, c.sbufAvail, int(c.tgt[c.tgtIdx].Length))
		c.writeData(b[n : n+size])
		n += size
		since = time.Time{}
	}
	return n, nil
}

// writeData copies p into the send buffer and posts it to the current
// target entry (rs_write_data).
func (c *Conn) writeData(p []byte) {
	buf := c.smr.Buf()[:c.sbufSize]
	if k := copy(buf[c.sbufHead:], p); k < len(p) {
		copy(buf, p[k:])
	}
	c.postData(len(p))
}

// postData posts the n bytes at the head of the send buffer, wrapping
// around its end, as one data message to the current target entry.
func (c *Conn) postData(n int) {
	sges := &c.sgeBuf
	sgl := sges[:1]
	if k := c.sbufSize - c.sbufHead; k < n {
		sges[0] = c.smr.SGE(c.sbufHead, k)
		sges[1] = c.smr.SGE(0, n-k)
		sgl = sges[:2]
	} else {
		sges[0] = c.smr.SGE(c.sbufHead, n)
	}
	c.sbufHead = (c.sbufHead + n) % c.sbufSize
	c.sseqNo++
	c.sqeAvail--
	c.sbufAvail -= n
	t := &c.tgt[c.tgtIdx]
	m := msg(opData, uint32(n))
	wr := verbs.SendWR{WRID: uint64(m), Opcode: verbs.WRRDMAWriteWithImm, ImmData: m, SGList: sgl, RemoteAddr: t.Addr, RKey: t.Key}
	if n <= c.inline {
		wr.SendFlags = verbs.SendInline
	}
	t.Addr += uint64(n)
	t.Length -= uint32(n)
	if t.Length == 0 {
		c.tgtIdx = (c.tgtIdx + 1) % sglSize
	}
	c.post(wr)
}

// usable is the error a read or write meets before it starts: the Conn
// closed or the deadline passed.
func (c *Conn) usable(dl *deadline) error {
	if c.closing {
		return net.ErrClosed
	}
	select {
	case <-dl.done():
		return os.ErrDeadlineExceeded
	default:
		return nil
	}
}

func (c *Conn) writeErr() error {
	switch {
	case c.err != nil:
		return c.err
	case c.connected:
		return errShutdown
	}
	return errReset
}

func (c *Conn) opError(op string, err error) error {
	return &net.OpError{Op: op, Net: "rsocket", Source: c.local, Addr: c.remote, Err: err}
}

// CloseWrite shuts down the sending side (rshutdown SHUT_WR): the peer
// reads io.EOF after the data already written. It waits, a short while
// at most, for that data to be acknowledged. A Write blocked meanwhile
// returns an error wrapping syscall.EPIPE.
func (c *Conn) CloseWrite() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.closing {
		return c.opError("close", net.ErrClosed)
	}
	if !c.connected || !c.writable {
		return nil
	}
	c.writable = false
	ctrl := uint32(ctrlShutdown)
	if !c.readable {
		ctrl = ctrlDisconnect
	}
	c.shutdown(ctrl)
	return nil
}

// shutdown sends a control message and waits for every send to be
// acknowledged, for closeWait at most.
func (c *Conn) shutdown(ctrl uint32) {
	dl := newDeadline()
	dl.set(time.Now().Add(closeWait))
	defer dl.stop()
	var since time.Time
	for c.connected && c.ctrlSeq == c.ctrlMax {
		if c.wait(dl, &since) != nil {
			return
		}
	}
	if !c.connected {
		return
	}
	c.ctrlSeq++
	c.post(verbs.SendWR{WRID: uint64(msg(opCtrl, ctrl)), Opcode: verbs.WRRDMAWriteWithImm, ImmData: msg(opCtrl, ctrl)})
	for c.err == nil && !c.allSendsDone() {
		if c.wait(dl, &since) != nil {
			return
		}
	}
}

// Close sends rsockets' disconnect message, waits a short while for the
// data written to be acknowledged, disconnects (rdma_disconnect), and
// frees the QP, its memory and the connection's goroutines (rclose).
// Blocked reads and writes return net.ErrClosed. Close of a nil or zero
// Conn returns an error wrapping os.ErrInvalid.
func (c *Conn) Close() error {
	if c == nil || c.rc == nil {
		return &net.OpError{Op: "close", Net: "rdma", Err: os.ErrInvalid}
	}
	c.mu.Lock()
	if c.closing {
		c.mu.Unlock()
		return c.opError("close", net.ErrClosed)
	}
	c.closing = true
	c.broadcast()
	if c.connected {
		c.readable, c.writable = false, false
		c.shutdown(ctrlDisconnect)
	}
	c.mu.Unlock()
	if c.ka != nil {
		c.ka.Stop() // keepAlive sees closed and does not rearm it
	}
	c.cancel()
	c.wg.Wait()
	c.rdl.stop()
	c.wdl.stop()
	// Free the memory, then the QP and the connection (rdmacm's order).
	// A ReadFrom or WriteTo may still be in its reader or writer with a
	// slice of that memory; it stays Go memory, and the call finds the
	// Conn closing before it touches anything else.
	c.mu.Lock()
	c.release()
	c.mu.Unlock()
	return c.rc.Close()
}

// LocalAddr returns the local address.
func (c *Conn) LocalAddr() net.Addr { return c.local }

// RemoteAddr returns the peer's address.
func (c *Conn) RemoteAddr() net.Addr { return c.remote }

// SetDeadline sets the read and write deadlines.
func (c *Conn) SetDeadline(t time.Time) error {
	if err := c.SetReadDeadline(t); err != nil {
		return err
	}
	return c.SetWriteDeadline(t)
}

// SetReadDeadline sets the time after which reads fail with an error
// wrapping os.ErrDeadlineExceeded; the zero time means none.
func (c *Conn) SetReadDeadline(t time.Time) error { return c.setDeadline(c.rdl, t) }

// SetWriteDeadline sets the time after which writes fail with an error
// wrapping os.ErrDeadlineExceeded; the zero time means none.
func (c *Conn) SetWriteDeadline(t time.Time) error { return c.setDeadline(c.wdl, t) }

func (c *Conn) setDeadline(dl *deadline, t time.Time) error {
	c.mu.Lock()
	closing := c.closing
	c.mu.Unlock()
	if closing {
		return c.opError("set", net.ErrClosed)
	}
	dl.set(t)
	return nil
}

// QPNum returns the number of the connection's QP.
func (c *Conn) QPNum() uint32 { return c.qp.Num() }

// String describes the connection: "10.0.0.1:40000->10.0.0.2:7471".
func (c *Conn) String() string { return c.local.String() + "->" + c.remote.String() }

var _ net.Conn = (*Conn)(nil)
