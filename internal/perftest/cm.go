package perftest

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"net/netip"
	"os"
	"strconv"
	"time"

	"github.com/rdmago/rdmago/rdmacm"
	"github.com/rdmago/rdmago/verbs"
)

// perftest's -z and -R: the out-of-band channel is an rdma_cm RC
// connection (RDMA_PS_TCP, on the test's port) whose QP is one deep each
// way, every exchange a signaled SEND into the one receive the peer keeps
// posted; with -R the test's QPs are connected by rdma_cm too, by a
// second listen and connect on the same port once the channel is up.

// cmSlot is the size of each of the channel's two buffers: the largest
// message is the key (struct pingpong_dest, 56 bytes).
const cmSlot = 64

// rawKeyLen is the size of struct pingpong_dest as perftest sends it
// over rdma_cm.
const rawKeyLen = 56

// cmComm is the rdma_cm out-of-band channel.
type cmComm struct {
	conn *rdmacm.Conn
	mr   *verbs.MR
	buf  []byte // the receive slot, then the send slot
	// ctx ends, with errPeerGone as its cause, when the peer disconnects.
	ctx    context.Context
	cancel context.CancelCauseFunc
	done   chan struct{} // the disconnect watcher has returned
	// deadline, if set, bounds each wait for a completion.
	deadline time.Time
}

// cmRetries is how often a client tries to reach a server that may not
// listen yet (perftest's rdma_cm client tries 10 times, 100 ms apart; the
// out-of-band channel gets the patience of the TCP one).
const cmRetries = 20

// dialCMCtrl makes the rdma_cm channel: the server accepts one connection
// on the port and stops listening; the client connects to it.
func dialCMCtrl(ctx context.Context, o *Options) (*ctrl, error) {
	m := &cmComm{buf: make([]byte, 2*cmSlot)}
	opts := &rdmacm.Options{
		Cap:   verbs.QPCap{MaxSendWR: 1, MaxRecvWR: 1, MaxSendSGE: 1, MaxRecvSGE: 1},
		Param: &rdmacm.ConnParam{RetryCount: 7, RNRRetryCount: 7},
		Setup: func(c *rdmacm.Conn) error {
			mr, err := c.PD.RegMR(m.buf, verbs.AccessLocalWrite)
			if err != nil {
				return err
			}
			m.mr = mr
			// The first message may come as soon as the connection is.
			return c.ID.PostRecv(0, mr, 0, cmSlot)
		},
	}
	port := strconv.Itoa(o.Port)
	var err error
	if o.Server == "" {
		var ln *rdmacm.Listener
		ln, err = rdmacm.Listen(":"+port, opts)
		if err != nil {
			return nil, fmt.Errorf("rdma_cm: couldn't listen to port %d: %w", o.Port, err)
		}
		m.conn, err = ln.Accept(ctx)
		ln.Close() // perftest takes one client
		if err != nil {
			if m.mr != nil {
				m.mr.Dereg()
			}
			return nil, fmt.Errorf("rdma_cm: accept: %w", err)
		}
	} else {
		addr := o.Server + ":" + port
		if a, perr := netip.ParseAddr(o.Server); perr == nil {
			addr = netip.AddrPortFrom(a, uint16(o.Port)).String()
		}
		for try := 0; ; try++ {
			m.conn, err = rdmacm.Dial(ctx, addr, opts)
			if err == nil || try == cmRetries || ctx.Err() != nil {
				break
			}
			if m.mr != nil {
				m.mr.Dereg()
				m.mr = nil
			}
			time.Sleep(100 * time.Millisecond)
		}
		if err != nil {
			if m.mr != nil {
				m.mr.Dereg()
			}
			return nil, fmt.Errorf("rdma_cm: couldn't connect to %s: %w", addr, err)
		}
	}
	m.ctx, m.cancel = context.WithCancelCause(context.Background())
	m.done = make(chan struct{})
	go func() {
		defer close(m.done)
		if m.conn.WaitDisconnect(m.ctx) == nil {
			m.cancel(errPeerGone)
		}
	}()
	return &ctrl{cm: m, server: o.Server == ""}, nil
}

// ctxErr is why m's channel can no longer be used.
func (m *cmComm) ctxErr(err error) error {
	if cause := context.Cause(m.ctx); cause != nil {
		return cause
	}
	return err
}

// write sends b (at most cmSlot bytes) and waits for its completion.
func (m *cmComm) write(b []byte) error {
	if len(b) > cmSlot {
		return fmt.Errorf("rdma_cm message of %d bytes", len(b))
	}
	copy(m.buf[cmSlot:], b)
	if err := m.conn.ID.PostSend(1, m.mr, cmSlot, len(b), verbs.SendSignaled); err != nil {
		return m.ctxErr(fmt.Errorf("rdma_cm send: %w", err))
	}
	wc, err := m.comp(m.conn.ID.GetSendComp)
	if err != nil {
		return m.ctxErr(fmt.Errorf("rdma_cm send: %w", err))
	}
	if wc.Status != verbs.WCSuccess {
		return m.ctxErr(fmt.Errorf("rdma_cm send: %s", wc.Status))
	}
	return nil
}

// read takes the peer's next message, which must be len(b) bytes, and
// posts the receive for the one after.
func (m *cmComm) read(b []byte) error {
	wc, err := m.comp(m.conn.ID.GetRecvComp)
	if err != nil {
		return m.ctxErr(fmt.Errorf("rdma_cm receive: %w", err))
	}
	if wc.Status != verbs.WCSuccess {
		return m.ctxErr(fmt.Errorf("rdma_cm receive: %s", wc.Status))
	}
	if int(wc.ByteLen) != len(b) {
		return fmt.Errorf("rdma_cm receive: %d bytes where %d belong: the peer is at another step of the exchange", wc.ByteLen, len(b))
	}
	copy(b, m.buf[:len(b)])
	if err := m.conn.ID.PostRecv(0, m.mr, 0, cmSlot); err != nil {
		return m.ctxErr(fmt.Errorf("rdma_cm receive: %w", err))
	}
	return nil
}

// comp waits for a completion with get. The peer may disconnect as soon
// as it has the last message, and its disconnection may be seen before
// the completion of what it did receive or send: so once it has gone,
// what is on its way still gets a moment.
func (m *cmComm) comp(get func(context.Context) (verbs.WC, error)) (verbs.WC, error) {
	ctx := m.ctx
	if !m.deadline.IsZero() {
		var cancel context.CancelFunc
		ctx, cancel = context.WithDeadline(ctx, m.deadline)
		defer cancel()
	}
	wc, err := get(ctx)
	if err != nil && errors.Is(err, context.DeadlineExceeded) && m.ctx.Err() == nil {
		return wc, os.ErrDeadlineExceeded
	}
	if err != nil && context.Cause(m.ctx) == errPeerGone {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		defer cancel()
		if wc, err2 := get(ctx); err2 == nil {
			return wc, nil
		}
	}
	return wc, err
}

func (m *cmComm) close() error {
	m.cancel(nil)
	<-m.done
	err := m.conn.Close()
	m.mr.Dereg()
	return err
}

// watch is ctrl.watch on the rdma_cm channel: the peer's next message
// (it finished) or its disconnection (it went away) ends the run after
// peerGrace.
func (m *cmComm) watch(ctx context.Context) (context.Context, func()) {
	run, cancel := context.WithCancelCause(ctx)
	done := make(chan struct{})
	go func() {
		defer close(done)
		var cause error
		if err := m.conn.RecvCQ.Wait(run); err == nil {
			cause = errPeerDone
		} else if m.ctx.Err() != nil && run.Err() == nil {
			cause = errPeerGone
		} else {
			return // stopped
		}
		t := time.AfterFunc(peerGrace, func() { cancel(cause) })
		<-run.Done()
		t.Stop()
	}()
	stopGone := context.AfterFunc(m.ctx, func() { cancel(errPeerGone) })
	return run, func() {
		stopGone()
		cancel(nil)
		<-done
	}
}

// marshalRaw is struct pingpong_dest as perftest sends it over rdma_cm:
// lid, out_reads, qpn, psn and rkey as big-endian 32-bit words, 4 bytes
// of padding, vaddr big-endian, the GID, srqn and gid_index.
func (d *dest) marshalRaw() []byte {
	b := make([]byte, rawKeyLen)
	for i, v := range []uint32{uint32(d.lid), uint32(d.outReads), d.qpn, d.psn, d.rkey} {
		binary.BigEndian.PutUint32(b[4*i:], v)
	}
	binary.BigEndian.PutUint64(b[24:], d.vaddr)
	copy(b[32:48], d.gid[:])
	binary.BigEndian.PutUint32(b[48:], d.srqn)
	binary.BigEndian.PutUint32(b[52:], uint32(d.gidIndex))
	return b
}

var errRawKey = errors.New("malformed key message (rdma_cm)")

// parseRawDest reads marshalRaw's form; as perftest, it takes lid through
// the GID and leaves srqn and gid_index.
func parseRawDest(b []byte) (dest, error) {
	var d dest
	if len(b) != rawKeyLen {
		return d, errRawKey
	}
	u := func(i int) uint32 { return binary.BigEndian.Uint32(b[4*i:]) }
	if u(0) > 0xffff || u(2) > 0xffffff || u(3) > 0xffffff {
		return d, errRawKey
	}
	d.lid, d.outReads, d.qpn, d.psn, d.rkey = uint16(u(0)), int(u(1)), u(2), u(3), u(4)
	d.vaddr = binary.BigEndian.Uint64(b[24:])
	copy(d.gid[:], b[32:48])
	return d, nil
}

// cmConnectQPs is -R's create_rdma_cm_connection: a handshake, then the
// test's QPs made and connected by rdma_cm (the server listening on the
// port again, the client connecting one ID per QP), then a handshake.
func (r *res) cmConnectQPs(ctx context.Context, c *ctrl) error {
	o := r.o
	if _, err := c.handshake(&dest{}); err != nil {
		return err
	}
	param := &rdmacm.ConnParam{RetryCount: 7, RNRRetryCount: 7}
	if o.Tool.Verb == Read || o.Tool.Verb == Atomic {
		param.ResponderResources, param.InitiatorDepth = uint8(o.OutReads), uint8(o.OutReads)
	}
	n := o.NumQPs
	var err error
	if c.server {
		ln, err := rdmacm.CreateID(nil, nil, rdmacm.PSTCP)
		if err != nil {
			return err
		}
		defer ln.Destroy()
		if err := ln.BindAddr(netip.AddrPortFrom(netip.IPv4Unspecified(), uint16(o.Port))); err != nil {
			return fmt.Errorf("rdma_cm: couldn't bind port %d for the test's QPs: %w", o.Port, err)
		}
		if err := ln.Listen(n); err != nil {
			return fmt.Errorf("rdma_cm: listen: %w", err)
		}
		// A peer with a smaller -q sends its next message while this
		// side still waits for connections: the watch ends the wait.
		run, stop := c.watch(ctx)
		for i := range n {
			id, err := ln.GetRequest(run)
			if err != nil {
				stop()
				if errors.Is(context.Cause(run), errPeerDone) {
					return fmt.Errorf("parameters mismatch: the peer uses -q %d, this side -q %d (use the same -q on both sides)", i, n)
				}
				return fmt.Errorf("rdma_cm: waiting for the connection of QP %d: %w", i, runErr(run, err))
			}
			if err := r.cmQP(i, id); err != nil {
				id.Reject(nil)
				id.Destroy()
				stop()
				return err
			}
			if err := id.Accept(param); err != nil {
				stop()
				return fmt.Errorf("rdma_cm: accepting QP %d: %w", i, err)
			}
		}
		stop()
		// One with a larger -q goes on connecting: until its next
		// message, a request is refused, and ends the exchange.
		more := fmt.Errorf("parameters mismatch: the peer connects more QPs than this side's -q %d (use the same -q on both sides)", n)
		lctx, cancel := context.WithCancel(ctx)
		done := make(chan struct{})
		go func() {
			defer close(done)
			if id, err := ln.GetRequest(lctx); err == nil {
				id.Reject(nil)
				id.Destroy()
				c.cm.cancel(more)
			}
		}()
		_, err = c.handshake(&dest{})
		cancel()
		<-done
		return err
	} else {
		peer := c.cm.conn.RemoteAddr().Addr()
		dst := netip.AddrPortFrom(peer, uint16(o.Port))
		for i := range n {
			var err error
			// The server may not listen yet: it is rejected, and
			// tried again, as perftest does.
			for try := 0; ; try++ {
				if err = r.cmDial(i, dst, param); err == nil || try == cmRetries || ctx.Err() != nil || c.cm.ctx.Err() != nil {
					break
				}
				time.Sleep(100 * time.Millisecond)
			}
			if err != nil && c.cm.ctx.Err() != nil {
				return fmt.Errorf("parameters mismatch: the server refused QP %d and went away: it uses -q %d, this side -q %d (use the same -q on both sides)", i, i, n)
			}
			if err != nil {
				return fmt.Errorf("rdma_cm: couldn't connect QP %d to %s: %w", i, dst, err)
			}
		}
	}
	_, err = c.handshake(&dest{})
	if errors.Is(err, errPeerGone) {
		return fmt.Errorf("parameters mismatch: the server went away once this side's -q %d QPs had connected: it uses a larger -q (use the same -q on both sides)", n)
	}
	return err
}

// cmDial connects QP i to dst, with an ID of its own.
func (r *res) cmDial(i int, dst netip.AddrPort, param *rdmacm.ConnParam) error {
	id, err := rdmacm.CreateID(nil, nil, rdmacm.PSTCP)
	if err != nil {
		return err
	}
	err = id.ResolveAddr(netip.AddrPort{}, dst, 2*time.Second)
	if err == nil {
		err = id.ResolveRoute(2 * time.Second)
	}
	if err == nil {
		err = r.cmQP(i, id)
	}
	if err == nil {
		if err = id.Connect(param); err != nil {
			r.cmIDs, r.qps = r.cmIDs[:i], r.qps[:i]
			delete(r.qpIndex, id.QP().Num())
			r.my = r.my[:i]
			id.DestroyQP()
		}
	}
	if err != nil {
		id.Destroy()
	}
	return err
}

// cmQP makes QP i on id, on the run's PD and CQ.
func (r *res) cmQP(i int, id *rdmacm.ID) error {
	if id.Device() != r.ctx.Device() {
		return fmt.Errorf("rdma_cm: QP %d's connection is on device %s, the test's on %s", i, id.Device().Name(), r.ctx.Device().Name())
	}
	init := r.qpInit()
	if err := id.CreateQP(r.pd, &init); err != nil {
		return fmt.Errorf("couldn't create QP[%d]: %w", i, err)
	}
	r.cmIDs = append(r.cmIDs, id)
	r.addQP(id.QP(), int(init.Cap.MaxInlineData))
	return nil
}
