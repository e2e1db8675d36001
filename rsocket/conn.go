package rsocket

import (
	"context"
	"encoding/binary"
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

// Config holds rsockets' tunables: the files of rsocket's configuration
// directory and the socket options that override them. The zero value
// means librdmacm's defaults, so both sides agree with a C peer's.
type Config struct {
	// RecvBuffer is the size of the receive ring the peer writes into
	// (mem_default; SO_RCVBUF sets twice the value it is given). Default
	// 128 KiB, at least 4 KiB.
	RecvBuffer int
	// SendBuffer is the size of the registered buffer sends are copied
	// into (wmem_default; SO_SNDBUF). Default 128 KiB, at least 4 KiB.
	SendBuffer int
	// QueueSize is the number of send and of receive work requests
	// (sqsize_default, rqsize_default): 384 by default, within [16,
	// 65534]. The receive queue size is the credit the peer is given.
	QueueSize int
	// InlineSize is the largest send posted inline (inline_default,
	// RDMA_INLINE): 64 by default; negative means none.
	InlineSize int
	// KeepAlive is the period of keepalive messages (SO_KEEPALIVE with
	// TCP_KEEPIDLE): DefaultKeepAlive if zero, none if negative. A
	// keepalive is a zero-length RDMA WRITE, which the peer's device
	// acknowledges without its application (C's rsockets send theirs
	// with an immediate, which takes a receive at the peer; either
	// side takes either). Keepalives or not, a Read or Write that waits
	// on a peer with nothing outstanding sends the same probe every
	// 2 s, and a peer that acknowledges nothing for three looks in a
	// row (every 2 s, or every KeepAlive if shorter) is given up on:
	// reads and writes fail with an error wrapping syscall.ETIMEDOUT,
	// within 8 s. (Software RoCE retries for ever with rsockets' retry
	// count of 7, so the QP alone would never give up.)
	KeepAlive time.Duration
	// ACKTimeout is the QP's local ACK timeout code (4.096 µs << code;
	// rdma_set_option RDMA_OPTION_ID_ACK_TIMEOUT); 0 means rdma_cm's
	// default, 19 (about 2.1 s). A peer that vanishes is given up on
	// after 8 such timeouts.
	ACKTimeout uint8
	// PollTime is how long a Read or Write that must wait for the peer
	// polls for it before it sleeps (rsockets' polling_time):
	// DefaultPollTime if zero, no polling if negative. Polls run on
	// the waiting goroutine and, on the software device, read the
	// network themselves, so an answer that comes within it costs no
	// wake-up; at most GOMAXPROCS goroutines of a process poll at
	// once, and an idle connection polls for no longer than this once
	// before it sleeps.
	PollTime time.Duration
	// IOMapSize is the number of entries of this side's target iomap
	// (RDMA_IOMAPSIZE): how many buffers the peer may map with riomap
	// for this side to riowrite into (see IOMap and IOWrite). 0, the
	// default, means none; the value is rounded as rsockets rounds it
	// and bounded by 32512.
	IOMapSize int
}

func (c *Config) pollTime() time.Duration {
	switch {
	case c.PollTime == 0:
		return DefaultPollTime
	case c.PollTime < 0:
		return 0
	}
	return c.PollTime
}

func (c *Config) sizes() (rbuf, sbuf, qsize, inline int) {
	rbuf, sbuf, qsize, inline = c.RecvBuffer, c.SendBuffer, c.QueueSize, c.InlineSize
	if rbuf == 0 {
		rbuf = defaultBuffer
	}
	if sbuf == 0 {
		sbuf = defaultBuffer
	}
	rbuf = max(rbuf, 2*sndLowat) &^ 1 // two equal halves
	sbuf = max(sbuf, 2*sndLowat)
	if qsize == 0 {
		qsize = defaultQueueSize
	}
	qsize = min(max(qsize, qpMinSize), qpMaxSize)
	switch {
	case inline == 0:
		inline = defaultInline
	case inline < 0:
		inline = 0
	}
	return
}

func (c *Config) keepAlive() time.Duration {
	switch {
	case c.KeepAlive == 0:
		return DefaultKeepAlive
	case c.KeepAlive < 0:
		return 0
	}
	return c.KeepAlive
}

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

// poll takes one batch of completions, reposts the receives they used
// and returns credits; it returns how many it took, or -1 if the CQ
// failed. It runs under c.mu, so that no completion is ever taken and
// not yet accounted for when another goroutine looks at the state.
func (c *Conn) poll(wcs []verbs.WC) int {
	n, err := c.cq.Poll(wcs)
	if err != nil {
		c.fail(fmt.Errorf("polling the CQ: %w", err))
		return -1
	}
	if n == 0 {
		return 0
	}
	recvs := 0
	for i := range wcs[:n] {
		if c.complete(&wcs[i]) {
			recvs++
		}
	}
	if recvs > 0 && c.connected {
		c.repost(recvs)
	}
	c.updateCredits()
	c.broadcast()
	return n
}

// complete takes one completion and reports whether it consumed a
// receive to repost.
func (c *Conn) complete(wc *verbs.WC) bool {
	if wc.WRID&recvFlag != 0 {
		if wc.Status != verbs.WCSuccess {
			return false
		}
		if wc.WCFlags&verbs.WCWithImm == 0 {
			return true // a SEND: rsockets over RoCE sends none
		}
		c.message(wc.ImmData, wc.ByteLen)
		return true
	}
	m := uint32(wc.WRID)
	c.sendsDone++
	switch msgOp(m) {
	case opSGL:
		c.ctrlMax++
	case opCtrl:
		c.ctrlMax++
		if msgData(m) == ctrlDisconnect {
			c.connected, c.readable, c.writable = false, false, false
		}
	default:
		c.sqeAvail++
		c.sbufAvail += int(msgData(m))
	}
	if wc.Status != verbs.WCSuccess && c.connected {
		c.fail(fmt.Errorf("a send failed (%v): %w", wc.Status, statusErr(wc.Status)))
	}
	return false
}

func statusErr(s verbs.WCStatus) error {
	switch s {
	case verbs.WCRetryExcErr, verbs.WCRNRRetryExcErr:
		return syscall.ETIMEDOUT
	}
	return syscall.EIO
}

// message takes one message from the peer: an immediate and the length
// its RDMA WRITE carried.
func (c *Conn) message(imm, n uint32) {
	switch msgOp(imm) {
	case opSGL:
		c.sseqComp = uint16(msgData(imm))
		if n == sgeLen {
			// RC ordering put the peer's new receive buffer in the
			// target SGL array before this completion.
			c.tgt[c.tgtNext] = getSGE(binary.LittleEndian, c.tmr.Buf()[c.tgtNext*sgeLen:])
			c.tgtNext = (c.tgtNext + 1) % sglSize
		}
	case opIOMap:
		c.iomapWritten(msgData(imm), n)
	case opWrite:
		// Never on the wire: riowrite's writes carry no immediate.
	case opCtrl:
		switch msgData(imm) {
		case ctrlDisconnect:
			c.connected, c.readable, c.writable = false, false, false
		case ctrlShutdown:
			if c.writable {
				c.readable = false
			} else {
				c.connected, c.readable = false, false
			}
		}
	default: // opData and the reserved data operations
		d := msgData(imm)
		if c.rmsgLen == len(c.rmsg) || int(d) > c.rgiven {
			c.fail(fmt.Errorf("the peer sent %d bytes beyond the %d of the ring it was given: %w", d, c.rgiven, syscall.EPROTO))
			return
		}
		c.rgiven -= int(d)
		if d == 0 {
			c.rseqNo++ // nothing to read, but it used a credit
			return
		}
		c.rmsg[(c.rmsgHead+c.rmsgLen)%len(c.rmsg)] = d
		c.rmsgLen++
		c.rqueued += int(d)
	}
}

// repost posts n receives again (rs_post_recv).
func (c *Conn) repost(n int) {
	wrs := c.recvBuf[:n]
	for i := range wrs {
		wrs[i] = verbs.RecvWR{WRID: recvFlag}
	}
	if err := c.qp.PostRecv(wrs); err != nil {
		c.fail(fmt.Errorf("reposting receives: %w", err))
	}
}

// fail ends the connection with err, unless it already failed.
func (c *Conn) fail(err error) {
	if c.err == nil {
		c.err = err
	}
	c.connected, c.readable, c.writable = false, false, false
	c.broadcast()
}

// broadcast wakes the goroutines waiting for the state to move.
func (c *Conn) broadcast() {
	c.moves++
	if c.cqWaiter != nil {
		c.cqWaiter()
	}
	if c.waiting > 0 {
		close(c.wake)
		c.wake = make(chan struct{})
		c.waiting = 0
	}
}

// wait lets go of c.mu until the state moves, dl passes or c is closed,
// and takes it again; since is the calling Read's or Write's poll start
// (spin). Like rsockets, the connection has no goroutine of
// its own taking completions: the calls that wait take them. A wait first
// polls the CQ itself for pollTime (spin), as rsockets do for
// polling_time, so that a peer that answers within it is heard without a
// wake-up; then one waiting goroutine sleeps on the CQ (waitCQ), and any
// other on the connection's state.
func (c *Conn) wait(dl *deadline, since *time.Time) error {
	if c.spin(dl, since) {
		return nil
	}
	if c.cqWaiter == nil {
		return c.waitCQ(dl)
	}
	w := c.wake
	c.waiting++
	c.mu.Unlock()
	var err error
	select {
	case <-w:
	case <-dl.done():
		err = os.ErrDeadlineExceeded
	case <-c.ctx.Done():
		err = net.ErrClosed
	}
	c.mu.Lock()
	return err
}

// waitCQ sleeps until the CQ has a completion, dl passes or c is closed
// (c.mu held, let go of meanwhile), and takes what came.
func (c *Conn) waitCQ(dl *deadline) error {
	expired := dl.done()
	ctx, cancel := context.WithCancel(c.ctx)
	defer cancel()
	c.cqWaiter = cancel // broadcast wakes it: the state moved under another goroutine
	c.mu.Unlock()
	go func() {
		select {
		case <-expired:
			cancel()
		case <-ctx.Done():
		}
	}()
	werr := c.cq.Wait(ctx)
	c.mu.Lock()
	c.cqWaiter = nil
	if c.poll(c.wcs[:]) == 0 {
		// Nothing came (or the CQ failed): let another waiter take the
		// CQ over.
		c.broadcast()
	}
	switch {
	case werr == nil || ctx.Err() == nil:
		return werr
	case c.ctx.Err() != nil:
		return net.ErrClosed
	case isClosed(expired):
		return os.ErrDeadlineExceeded
	}
	return nil // woken by broadcast: look again
}

// watchCM waits for the connection manager's DISCONNECTED event: the
// peer's rdma_disconnect, or a connection the CM gave up on.
func (c *Conn) watchCM() {
	defer c.wg.Done()
	if c.rc.WaitDisconnect(c.ctx) != nil {
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	// The peer disconnects once its last messages were acknowledged,
	// and their completions were queued before those acknowledgements
	// went: take them all before the stream ends.
	for c.poll(c.wcs[:]) > 0 {
	}
	if c.readable {
		// No shutdown or disconnect message came first: the peer went
		// away in the middle of the stream, which may be cut short.
		c.fail(errReset)
		return
	}
	c.connected, c.writable = false, false
	c.broadcast()
}

// keepAlive looks at the peer every look(): it gives up on a peer that
// has acknowledged nothing for keepAliveMisses looks with sends
// outstanding, and sends a zero-length RDMA WRITE (rsocket's keepalive,
// which needs no answer from the peer's application) when a keepalive
// is due, or as a probe when a Read or Write waits and nothing is
// outstanding to tell whether the peer is still there.
func (c *Conn) keepAlive() {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.closing || !c.connected {
		return
	}
	// Nobody may be reading or writing: take what completed first.
	c.poll(c.wcs[:])
	idle := c.allSendsDone()
	if c.sendsDone == c.doneAtKA && !idle {
		c.kaMisses++
	} else {
		c.kaMisses = 0
	}
	c.doneAtKA = c.sendsDone
	if c.kaMisses >= keepAliveMisses {
		c.fail(fmt.Errorf("the peer is gone: it acknowledged nothing for %v: %w", keepAliveMisses*c.look(), syscall.ETIMEDOUT))
		return
	}
	c.sinceKA += c.look()
	due := c.ka0 > 0 && c.sinceKA >= c.ka0
	if (due || (c.waiting > 0 || c.cqWaiter != nil) && idle) && c.ctrlSeq != c.ctrlMax {
		c.sinceKA = 0
		c.ctrlSeq++
		c.post(verbs.SendWR{WRID: uint64(msg(opCtrl, ctrlKeepAlive)), Opcode: verbs.WRRDMAWrite})
	}
	c.ka.Reset(c.look())
}

// post posts one send, failing the connection if the QP refuses it.
func (c *Conn) post(wr verbs.SendWR) {
	c.wrBuf[0] = wr
	err := c.qp.PostSend(c.wrBuf[:])
	c.wrBuf[0] = verbs.SendWR{} // let go of the SGE list
	if err != nil {
		c.fail(fmt.Errorf("posting a send: %w", err))
	}
}

// updateCredits returns credits to the peer when enough of the ring is
// free or its messages run short (rs_update_credits).
func (c *Conn) updateCredits() {
	if !c.connected || c.ctrlSeq == c.ctrlMax {
		return
	}
	if c.rbufAvail < c.rbufSize/2 && int16(c.rseqNo-c.rseqComp) < 0 {
		return
	}
	c.ctrlSeq++
	limit := msg(opSGL, uint32(c.rseqNo)+uint32(c.qsize))
	c.rseqComp = c.rseqNo + uint16(c.qsize/2)
	if c.rbufAvail < c.rbufSize/2 {
		// Credits alone: a zero-length write with immediate.
		c.post(verbs.SendWR{WRID: uint64(limit), Opcode: verbs.WRRDMAWriteWithImm, ImmData: limit})
		return
	}
	// Half the ring is free: name it in the peer's target SGL array, in
	// the peer's byte order, in the same write.
	var o binary.ByteOrder = binary.LittleEndian
	if c.peerBE {
		o = binary.BigEndian
	}
	slot := int(c.ctrlSeq%ctrlSlots) * sgeLen
	c.sgeBuf[0] = c.cmr.SGE(slot, sgeLen)
	putSGE(o, c.cmr.Buf()[slot:], SGE{Addr: c.rmr.Addr() + uint64(c.rbufFree), Key: c.rmr.RKey(), Length: uint32(c.rbufSize / 2)})
	wr := verbs.SendWR{
		WRID: uint64(limit), Opcode: verbs.WRRDMAWriteWithImm, ImmData: limit,
		SGList:     c.sgeBuf[:1],
		RemoteAddr: c.remoteSGL.Addr + uint64(c.remoteSGE*sgeLen), RKey: c.remoteSGL.Key,
	}
	if c.inline >= sgeLen {
		wr.SendFlags = verbs.SendInline
	}
	c.post(wr)
	c.rbufAvail -= c.rbufSize / 2
	c.rgiven += c.rbufSize / 2
	c.rbufFree = (c.rbufFree + c.rbufSize/2) % c.rbufSize
	c.remoteSGE = (c.remoteSGE + 1) % int(c.remoteSGL.Length)
}

// allSendsDone reports whether no send is outstanding
// (rs_conn_all_sends_done).
func (c *Conn) allSendsDone() bool {
	return int(c.ctrlMax-c.ctrlSeq)+c.sqeAvail == c.qsize
}

// canSend reports whether a data message may go now (rs_can_send).
func (c *Conn) canSend() bool {
	return c.sqeAvail > 0 && c.sbufAvail >= sndLowat && c.sseqNo != c.sseqComp && c.tgt[c.tgtIdx].Length != 0
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
	for c.rmsgLen == 0 {
		if c.closing {
			return 0, c.opError("read", net.ErrClosed)
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
