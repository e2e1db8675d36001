package rsocket

import (
	"context"
	"encoding/binary"
	"fmt"
	"net"
	"os"
	"syscall"
	"time"

	"github.com/rdmago/rdmago/verbs"
)

// How a Conn makes progress: its completions (data, credits, control
// messages), the waits of its calls, which poll the CQ themselves before
// they sleep, the CM's events and the keepalive.

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
