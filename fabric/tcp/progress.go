package tcp

import (
	"io"
	"syscall"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/rdmago/rdmago/fabric"
	"github.com/rdmago/rdmago/fabric/internal/sockpoll"
	"github.com/rdmago/rdmago/internal/fifo"
)

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
			if e.full && !sockpoll.Ready(e.fd, unix.POLLOUT) {
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
		e.txq = fifo.PopFront(e.txq)
		switch {
		case t.ack:
			e.ackq = append(e.ackq, t)
			continue
		case t.comp:
			e.Comp.Done(fabric.CQEntry{Context: t.ctx, Flags: t.flags, Len: t.length})
		case t.flags != 0:
			e.Comp.Count(t.flags) // an inject: counted, not completed
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
		if !sockpoll.Ready(e.fd, unix.POLLIN|unix.POLLRDHUP) {
			return 0, nil
		}
	}
	n, err := rawIO(unix.SYS_READ, e.fd, b)
	e.drained = n < len(b)
	if e.drained {
		e.drainedIn = e.receives
	}
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
	e.receives++
	for e.up && (e.state == stConnected || e.state == stShutdown) {
		if e.cur == nil && e.pend != nil {
			// A message waits for a receive buffer.
			if len(e.rxq) == 0 {
				return
			}
			h := *e.pend
			e.pend = nil
			// The background loop, which armed nothing while the
			// message waited, must watch the socket again.
			e.kickLoops()
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
			if e.drained && e.drainedIn == e.receives && e.rlo == e.rhi {
				// A read of this call found the socket empty: the
				// program gets the completion now, rather than after
				// a poll that would almost always find nothing
				// (about a quarter of a microsecond of a ping-pong's
				// turn). Data that comes later wakes the background
				// loop's epoll as ever, and the next Progress reads it.
				// (An older read proves nothing: a message that
				// waited for a buffer was read long ago.)
				return
			}
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
		e.Comp.Failed(fabric.CQErrEntry{CQEntry: entry, OLen: n - got, Err: fabric.ErrTrunc})
	} else {
		e.Comp.Done(entry)
	}
	if ack {
		e.queueFirst(&txEntry{bufs: [][]byte{ackFrame}})
	}
}

// failMsg fails the receive e.msgFrame was filling. Called with e.mu
// held.
func (e *ep) failMsg(errno fabric.Errno) {
	f := &e.msgFrame
	e.Comp.Failed(fabric.CQErrEntry{CQEntry: fabric.CQEntry{Context: f.rx.ctx, Flags: fabric.CompRecv | fabric.CompMsg, Buf: f.rx.buf}, Err: errno})
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
			e.ackq = fifo.PopFront(e.ackq)
			if t.comp {
				e.Comp.Done(fabric.CQEntry{Context: t.ctx, Flags: t.flags, Len: t.length})
			} else if t.flags != 0 {
				e.Comp.Count(t.flags)
			}
			e.freeTx(t)
			return true
		}
		if len(e.rxq) == 0 {
			// The rest stays in the socket until a buffer comes. (A
			// copy in the endpoint: &h would move h to the heap on
			// every call.)
			e.pendHdr = h
			e.pend = &e.pendHdr
			return true
		}
		r := e.rxq[0]
		e.rxq = fifo.PopFront(e.rxq)
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
		// The closure copies what it needs of h, which would otherwise
		// move to the heap on every call of start.
		flags, cqData := h.flags, h.cqData
		f.done = func() {
			if flags&flagRemoteCQData != 0 {
				e.Comp.Done(fabric.CQEntry{Flags: fabric.CompRMA | fabric.CompRemoteWrite | fabric.CompRemoteCQData, Len: n, Data: cqData})
			} else {
				e.Comp.Count(fabric.CompRMA | fabric.CompRemoteWrite)
			}
			if flags&(flagDeliveryComplete|flagCommitComplete) != 0 {
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
			e.Comp.Count(fabric.CompRMA | fabric.CompRemoteRead)
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
			e.Comp.Done(fabric.CQEntry{Context: r.ctx, Flags: fabric.CompRMA | fabric.CompRead, Len: n})
		}
		f.fail = func(errno fabric.Errno) {
			e.Comp.Failed(fabric.CQErrEntry{CQEntry: fabric.CQEntry{Context: r.ctx, Flags: fabric.CompRMA | fabric.CompRead}, Err: errno})
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
	if e.EQ != nil {
		e.EQ.Write(fabric.EQEntry{Event: fabric.EventShutdown, FID: e.FID()})
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
	if e.EQ != nil {
		e.EQ.WriteErr(fabric.EQErrEntry{FID: e.FID(), Err: errno})
		e.EQ.Write(fabric.EQEntry{Event: fabric.EventShutdown, FID: e.FID()})
	}
}

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
		held, stop := e.takeTurn(polling)
		if stop {
			return
		}
		if !held {
			continue
		}
		if e.pend != nil && len(e.rxq) > 0 {
			// A message waited for a receive buffer and one was
			// posted (Recv kicked the loop): take it in now, for a
			// program that only waits for its completion.
			e.progressLocked()
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
			e.wt.Arm(events)
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
		held, stop = e.takeTurn(polling)
		if stop {
			return
		}
		if !held {
			continue
		}
		e.progressLocked()
		e.mu.Unlock()
	}
}

// takeTurn returns with e.mu held (held) when the background loop is to
// act: not while the program polls and will take the data itself (it
// waits pollGrace then), and not once the endpoint is closed (stop).
func (e *ep) takeTurn(polling func() bool) (held, stop bool) {
	if polling() {
		return false, !e.graceOver()
	}
	if !e.lockOpen() {
		return false, true
	}
	return true, false
}

// graceOver waits pollGrace, while the program polls; false if the
// endpoint closed meanwhile.
func (e *ep) graceOver() bool {
	select {
	case <-time.After(pollGrace):
		return true
	case <-e.done:
		return false
	}
}

// lockOpen takes e.mu unless the endpoint is closed.
func (e *ep) lockOpen() bool {
	e.mu.Lock()
	if e.state == stClosed {
		e.mu.Unlock()
		return false
	}
	return true
}
