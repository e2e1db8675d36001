package rping

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"sync"
	"time"

	"github.com/rdmago/rdmago/rdmacm"
	"github.com/rdmago/rdmago/verbs"
)

// state is where a connection is (rping's enum test_state, same numbers:
// they appear in its messages, as in "wait for RDMA_READ_ADV state 10").
type state int

const (
	stateIdle           state = iota + 1 // IDLE
	stateConnectRequest                  // CONNECT_REQUEST
	stateAddrResolved                    // ADDR_RESOLVED
	stateRouteResolved                   // ROUTE_RESOLVED
	stateConnected                       // CONNECTED
	stateReadAdv                         // RDMA_READ_ADV
	stateReadComplete                    // RDMA_READ_COMPLETE
	stateWriteAdv                        // RDMA_WRITE_ADV
	stateWriteComplete                   // RDMA_WRITE_COMPLETE
	stateDisconnected                    // DISCONNECTED
	stateError                           // ERROR
)

// cb is one connection's control block (struct rping_cb): its state, the
// semaphore its CM and CQ handlers wake the main flow with, and its verbs
// resources. A server without -P has one, as rping does, that is first the
// listener's and then its connection's.
type cb struct {
	r  *runner
	id *rdmacm.ID // the connection: the client's ID or the server's child

	mu     sync.Mutex
	st     state  // guarded by mu
	rAddr  uint64 // the peer's last advertised buffer; guarded by mu
	rKey   uint32
	rLen   uint32
	taken  bool          // listener: a connect request was taken; guarded by mu
	sem    chan struct{} // sem_t sem: one token per sem_post
	selfQP bool

	pd      *verbs.PD
	channel *verbs.CompChannel
	cq      *verbs.CQ
	qp      *verbs.QP
	recvMR  *verbs.MR // one rping_rdma_info received
	sendMR  *verbs.MR // sqDepth slots of rping_rdma_info to send
	rdmaMR  *verbs.MR // rdma_buf: the server's READ target and WRITE source; the client's sink
	startMR *verbs.MR // start_buf: the client's ping data
	nsend   int       // SENDs posted: picks the next slot of sendMR

	cqStop context.CancelFunc
	cqDone chan struct{}
}

func (r *runner) newCB() *cb {
	return &cb{r: r, st: stateIdle, sem: make(chan struct{}, 64), selfQP: r.o.SelfCreateQP}
}

func (c *cb) getState() state {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.st
}

func (c *cb) setState(s state) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.st = s
}

// ended reports whether st is DISCONNECTED or ERROR (c.mu held).
func (c *cb) ended() bool { return c.st == stateDisconnected || c.st == stateError }

// completed moves to s on a work completion, unless the connection has
// ended: the CQ handler and the CM event handler run apart, and a
// completion handled just after the DISCONNECTED event must not hide it
// (the main flow, woken by both, would find the completion's state where
// it waits for the next step, and fail instead of ending).
func (c *cb) completed(s state) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if !c.ended() {
		c.st = s
	}
}

// post is sem_post.
func (c *cb) post() {
	select {
	case c.sem <- struct{}{}:
	default: // cannot happen: rping posts at most a few times ahead
	}
}

// wait is sem_wait. It returns ctx's error if ctx ends, and errFatal once
// the CM event handler of another connection has failed, as rping's
// threads end when its CM thread exits the program. A failure of this
// connection's own events wakes it as rping's handler does, with a post,
// so that it prints what rping's main thread prints before the exit.
func (c *cb) wait(ctx context.Context) error {
	select {
	case <-c.sem:
		return nil
	case <-c.r.fatal:
		// The failing handler posts before it marks the run failed.
		select {
		case <-c.sem:
			return nil
		default:
			return errFatal
		}
	case <-ctx.Done():
		return ctx.Err()
	}
}

// waitPeer is wait during the ping-pong, bounded by Options.Idle: a peer
// that was killed sends no DREQ (on Linux the kernel sends one for a dead
// process; here nobody can), so without a bound the survivor would wait
// for ever.
func (c *cb) waitPeer(ctx context.Context, peer string) error {
	if c.r.o.Idle <= 0 {
		return c.wait(ctx)
	}
	wctx, cancel := context.WithTimeout(ctx, c.r.o.Idle)
	defer cancel()
	err := c.wait(wctx)
	if err != nil && ctx.Err() == nil && errors.Is(err, context.DeadlineExceeded) {
		c.r.errorf("rping: no word from the %s for %v: it has stopped answering\n", peer, c.r.o.Idle)
		return errFailed
	}
	return err
}

// cmLoop is rping's cm_thread: it hands each event to the handler until
// ctx ends or the handler fails.
func (r *runner) cmLoop(ctx context.Context) {
	for {
		ev, err := r.ch.GetEvent(ctx)
		if err != nil {
			return
		}
		ok, after := r.handleEvent(ctx, ev)
		ev.Ack()
		if after != nil {
			after()
		}
		if !ok {
			return
		}
	}
}

// handleEvent is rping_cma_event_handler. It returns false where rping's
// handler fails (and rping exits), and what to do once the event is
// acknowledged.
func (r *runner) handleEvent(ctx context.Context, ev *rdmacm.Event) (bool, func()) {
	c := r.cbFor(ev)
	kind := "child"
	if ev.ID == r.cmID {
		kind = "parent"
	}
	r.debugf("cma_event type %s cma_id %p (%s)\n", ev.Type, ev.ID, kind)
	switch ev.Type {
	case rdmacm.EventAddrResolved:
		c.setState(stateAddrResolved)
		if err := ev.ID.ResolveRoute(resolveWait); err != nil {
			c.setState(stateError)
			r.perror("rdma_resolve_route", err)
			c.post()
		}
	case rdmacm.EventRouteResolved:
		c.setState(stateRouteResolved)
		c.post()
	case rdmacm.EventConnectRequest:
		return true, r.connectRequest(ctx, c, ev.ID)
	case rdmacm.EventConnectResponse:
		r.debugf("CONNECT_RESPONSE\n")
		c.setState(stateConnected)
		c.post()
	case rdmacm.EventEstablished:
		r.debugf("ESTABLISHED\n")
		// The server wakes up when the first RECV completes.
		if !r.o.Server {
			c.setState(stateConnected)
		}
		c.post()
	case rdmacm.EventAddrError, rdmacm.EventRouteError, rdmacm.EventConnectError,
		rdmacm.EventUnreachable, rdmacm.EventRejected:
		r.errorf("cma event %s, error %d\n", ev.Type, ev.Status)
		if ev.Type == rdmacm.EventUnreachable && ev.Status == -int(verbs.ErrConnRefused) {
			// rping stops at the line above; say what it means.
			r.errorf("rping: no RoCE device answered at %v (UDP port unreachable): is the server's device up?\n", r.o.Addr)
		}
		c.post()
		r.setFatal()
		return false, nil
	case rdmacm.EventDisconnected:
		side := "client"
		if r.o.Server {
			side = "server"
		}
		r.errorf("%s DISCONNECT EVENT...\n", side)
		c.setState(stateDisconnected)
		c.post()
	case rdmacm.EventDeviceRemoval:
		r.errorf("cma detected device removal!!!!\n")
		c.setState(stateError)
		c.post()
		r.setFatal()
		return false, nil
	default:
		r.errorf("unhandled event: %s, ignoring\n", ev.Type)
	}
	return true, nil
}

// connectRequest takes a CONNECT_REQUEST for the listener lc: without -P
// the listener's control block becomes the connection's, as in rping, and
// later requests are rejected; with -P each request gets a control block
// of its own, which the listener starts serving.
func (r *runner) connectRequest(ctx context.Context, lc *cb, id *rdmacm.ID) func() {
	drop := func() {
		id.Reject(nil)
		id.Destroy()
	}
	if r.o.Persistent {
		c := r.newCB()
		c.id = id
		c.st = stateConnectRequest
		r.register(id, c)
		r.debugf("child cma %p\n", id)
		select {
		case r.requests <- c:
			return nil
		case <-ctx.Done():
			r.unregister(id)
			return drop
		}
	}
	lc.mu.Lock()
	taken := lc.taken
	lc.taken = true
	lc.mu.Unlock()
	if taken {
		r.debugf("rejecting another connection request %p\n", id)
		return drop
	}
	lc.id = id
	r.register(id, lc)
	lc.setState(stateConnectRequest)
	r.debugf("child cma %p\n", id)
	lc.post()
	return nil
}

// cqLoop is rping's cq_thread: it sleeps on the completion channel and
// handles the completions, until ctx ends, a receive is flushed or a
// completion fails.
func (c *cb) cqLoop(ctx context.Context) {
	defer close(c.cqDone)
	c.r.debugf("cq_thread started.\n")
	for {
		cq, err := c.channel.GetCQEvent(ctx)
		if err != nil {
			if ctx.Err() == nil {
				c.r.errorf("Failed to get cq event!\n")
			}
			return
		}
		if cq != c.cq {
			c.r.errorf("Unknown CQ!\n")
			cq.AckEvents(1)
			return
		}
		if err := c.cq.ReqNotify(false); err != nil {
			c.r.errorf("Failed to set notify!\n")
			c.cq.AckEvents(1)
			return
		}
		stop := c.handleCompletions()
		c.cq.AckEvents(1)
		if stop {
			return
		}
	}
}

// handleCompletions is rping_cq_event_handler: it polls the CQ dry and
// reports whether the CQ loop should end.
func (c *cb) handleCompletions() bool {
	r := c.r
	var wcs [1]verbs.WC
	flushed := false
	for {
		n, err := c.cq.Poll(wcs[:])
		if err != nil {
			r.errorf("poll error %d\n", -retval(err))
			return c.fail()
		}
		if n == 0 {
			return flushed
		}
		wc := &wcs[0]
		if wc.Status != verbs.WCSuccess {
			if wc.Status == verbs.WCWRFlushErr {
				flushed = true
				continue
			}
			r.errorf("cq completion failed status %d\n", wc.Status)
			return c.fail()
		}
		switch wc.Opcode {
		case verbs.WCSend:
			r.debugf("send completion\n")
		case verbs.WCRDMAWrite:
			r.debugf("rdma write completion\n")
			c.completed(stateWriteComplete)
			c.post()
		case verbs.WCRDMARead:
			r.debugf("rdma read completion\n")
			c.completed(stateReadComplete)
			c.post()
		case verbs.WCRecv:
			r.debugf("recv completion\n")
			if !c.recv(wc) {
				r.errorf("recv wc error: %d\n", -1)
				return c.fail()
			}
			if err := c.postRecv(); err != nil {
				r.errorf("post recv error: %d\n", retval(err))
				return c.fail()
			}
			c.post()
		default:
			r.debugf("unknown!!!!! completion\n")
			return c.fail()
		}
	}
}

// fail puts the connection in the ERROR state and wakes the main flow.
func (c *cb) fail() bool {
	c.setState(stateError)
	c.post()
	return true
}

// recv is rping's server_recv and client_recv: the server takes the
// peer's buffer and moves to the READ or WRITE advertisement; the client
// moves on a "go ahead".
func (c *cb) recv(wc *verbs.WC) bool {
	if wc.ByteLen != infoLen {
		c.r.errorf("Received bogus data, size %d\n", wc.ByteLen)
		return false
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.ended() {
		return true // (see completed)
	}
	if !c.r.o.Server {
		if c.st == stateReadAdv {
			c.st = stateWriteAdv
		} else {
			c.st = stateWriteComplete
		}
		return true
	}
	b := c.recvMR.Buf()
	c.rAddr = binary.BigEndian.Uint64(b[0:])
	c.rKey = binary.BigEndian.Uint32(b[8:])
	c.rLen = binary.BigEndian.Uint32(b[12:])
	c.r.debugf("Received rkey %x addr %x len %d from peer\n", c.rKey, c.rAddr, c.rLen)
	if c.st <= stateConnected || c.st == stateWriteComplete {
		c.st = stateReadAdv
	} else {
		c.st = stateWriteAdv
	}
	return true
}

// remote returns the peer's last advertised buffer.
func (c *cb) remote() (addr uint64, rkey, length uint32) {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.rAddr, c.rKey, c.rLen
}

func (c *cb) startCQ() {
	ctx, cancel := context.WithCancel(context.Background())
	c.cqStop, c.cqDone = cancel, make(chan struct{})
	go c.cqLoop(ctx)
}

func (c *cb) stopCQ() {
	c.cqStop()
	<-c.cqDone
}

// setupQP is rping_setup_qp: a PD, a completion channel, an armed CQ and
// the QP, on the device id was resolved or bound to.
func (c *cb) setupQP(id *rdmacm.ID) error {
	r := c.r
	vctx := id.Verbs()
	pd, err := vctx.AllocPD()
	if err != nil {
		r.errorf("ibv_alloc_pd failed\n")
		return err
	}
	r.debugf("created pd %p\n", pd)
	ch, err := vctx.CreateCompChannel()
	if err != nil {
		r.errorf("ibv_create_comp_channel failed\n")
		pd.Dealloc()
		return err
	}
	r.debugf("created channel %p\n", ch)
	cq, err := vctx.CreateCQ(cqDepth, ch, 0)
	if err == nil {
		r.debugf("created cq %p\n", cq)
		if err = cq.ReqNotify(false); err != nil {
			cq.Destroy()
		}
	}
	if err != nil {
		r.errorf("ibv_create_cq failed\n")
		ch.Close()
		pd.Dealloc()
		return err
	}
	c.pd, c.channel, c.cq = pd, ch, cq
	if err := c.createQP(id); err != nil {
		cq.Destroy()
		ch.Close()
		pd.Dealloc()
		return err
	}
	r.debugf("created qp %p\n", c.qp)
	return nil
}

// createQP is rping_create_qp: with -q the QP is made with verbs and moved
// to INIT on id's port; otherwise rdma_create_qp makes it.
func (c *cb) createQP(id *rdmacm.ID) error {
	attr := verbs.QPInitAttr{
		SendCQ: c.cq,
		RecvCQ: c.cq,
		QPType: verbs.QPTRC,
		Cap:    verbs.QPCap{MaxSendWR: sqDepth, MaxRecvWR: rqDepth, MaxSendSGE: 1, MaxRecvSGE: 1},
	}
	if !c.selfQP {
		if err := id.CreateQP(c.pd, &attr); err != nil {
			c.r.perror("rdma_create_qp", err)
			return cmFailed(err)
		}
		c.qp = id.QP()
		return nil
	}
	qp, err := c.pd.CreateQP(&attr)
	if err != nil {
		c.r.perror("ibv_create_qp", err)
		return errFailed
	}
	init := verbs.QPAttr{QPState: verbs.QPSInit, PKeyIndex: 0, PortNum: id.PortNum(), QPAccessFlags: 0}
	if err := qp.Modify(&init, verbs.QPAttrState|verbs.QPAttrPKeyIndex|verbs.QPAttrPort|verbs.QPAttrAccessFlags); err != nil {
		c.r.perror("ibv_modify_qp", err)
		qp.Destroy()
		return errFailed
	}
	c.qp = qp
	return nil
}

// selfModifyQP is rping_self_modify_qp: INIT, RTR and RTS with the
// attributes rdma_init_qp_attr gives for id.
func (c *cb) selfModifyQP(id *rdmacm.ID) error {
	for _, s := range []verbs.QPState{verbs.QPSInit, verbs.QPSRTR, verbs.QPSRTS} {
		attr, mask, err := id.InitQPAttr(s)
		if err != nil {
			return cmFailed(err)
		}
		if err := c.qp.Modify(&attr, mask); err != nil {
			return err
		}
	}
	return nil
}

// freeQP is rping_free_qp.
func (c *cb) freeQP() {
	if c.selfQP {
		c.qp.Destroy()
	} else {
		c.id.DestroyQP()
	}
	c.cq.Destroy()
	c.channel.Close()
	c.pd.Dealloc()
}

// setupBuffers is rping_setup_buffers: the receive and send buffers of the
// control messages, rdma_buf and, on the client, start_buf.
func (c *cb) setupBuffers() error {
	r := c.r
	r.debugf("rping_setup_buffers called on cb %p\n", c)
	remote := verbs.AccessLocalWrite | verbs.AccessRemoteRead | verbs.AccessRemoteWrite
	regs := []struct {
		mr     **verbs.MR
		size   int
		access verbs.AccessFlags
		name   string
	}{
		{&c.recvMR, infoLen, verbs.AccessLocalWrite, "recv_buf"},
		{&c.sendMR, infoLen * sqDepth, 0, "send_buf"},
		{&c.rdmaMR, r.o.Size, remote, "rdma_buf"},
		{&c.startMR, r.o.Size, remote, "start_buf"},
	}
	if r.o.Server {
		regs = regs[:3]
	}
	for i, reg := range regs {
		mr, err := c.pd.RegMR(make([]byte, reg.size), reg.access)
		if err != nil {
			r.errorf("%s reg_mr failed\n", reg.name)
			for _, done := range regs[:i] {
				(*done.mr).Dereg()
				*done.mr = nil
			}
			return err
		}
		*reg.mr = mr
	}
	r.debugf("allocated & registered buffers...\n")
	return nil
}

// freeBuffers is rping_free_buffers.
func (c *cb) freeBuffers() {
	c.r.debugf("rping_free_buffers called on cb %p\n", c)
	for _, mr := range []*verbs.MR{c.recvMR, c.sendMR, c.rdmaMR, c.startMR} {
		if mr != nil {
			mr.Dereg()
		}
	}
}

// postRecv posts the one receive of a control message.
func (c *cb) postRecv() error {
	return c.qp.PostRecv([]verbs.RecvWR{{SGList: []verbs.SGE{c.recvMR.SGE(0, infoLen)}}})
}

// sendInfo is rping_format_send and the SEND of it: it advertises mr
// (address, rkey, and the ping size). Each SEND uses the next of sqDepth
// slots, so that no slot is rewritten while a SEND of it may still be read.
func (c *cb) sendInfo(mr *verbs.MR) error {
	slot := c.nsend % sqDepth
	c.nsend++
	b := c.sendMR.Buf()[slot*infoLen : (slot+1)*infoLen]
	binary.BigEndian.PutUint64(b[0:], mr.Addr())
	binary.BigEndian.PutUint32(b[8:], mr.RKey())
	binary.BigEndian.PutUint32(b[12:], uint32(c.r.o.Size))
	c.r.debugf("RDMA addr %x rkey %x len %d\n", mr.Addr(), mr.RKey(), c.r.o.Size)
	return c.send(c.sendMR.SGE(slot*infoLen, infoLen))
}

// goAhead sends the server's "go ahead": a control message it never fills
// in, all zeros.
func (c *cb) goAhead() error { return c.send(c.sendMR.SGE(0, infoLen)) }

func (c *cb) send(sge verbs.SGE) error {
	return c.qp.PostSend([]verbs.SendWR{{Opcode: verbs.WRSend, SendFlags: verbs.SendSignaled, SGList: []verbs.SGE{sge}}})
}

// rdma posts an RDMA READ or WRITE of length bytes between rdma_buf and
// the peer's advertised buffer.
func (c *cb) rdma(op verbs.WROpcode, length uint32) error {
	addr, rkey, _ := c.remote()
	sge := verbs.SGE{Addr: c.rdmaMR.Addr(), Length: length, LKey: c.rdmaMR.LKey()}
	if op == verbs.WRRDMAWrite {
		c.r.debugf("rdma write from lkey %x laddr %x len %d\n", sge.LKey, sge.Addr, sge.Length)
	}
	return c.qp.PostSend([]verbs.SendWR{{Opcode: op, SendFlags: verbs.SendSignaled, SGList: []verbs.SGE{sge},
		RemoteAddr: addr, RKey: rkey}})
}

// disconnect is rping_disconnect: with -q the QP goes to ERROR first.
func (c *cb) disconnect() error {
	if c.selfQP {
		if err := c.qp.Modify(&verbs.QPAttr{QPState: verbs.QPSErr}, verbs.QPAttrState); err != nil {
			return err
		}
	}
	return c.id.Disconnect()
}

// awaitDisconnected waits, for a while, for the DISCONNECTED event that
// follows the client's own rdma_disconnect.
func (c *cb) awaitDisconnected(ctx context.Context) {
	t := time.NewTimer(disconnectWait)
	defer t.Stop()
	for c.getState() != stateDisconnected {
		select {
		case <-c.sem:
		case <-t.C:
			return
		case <-ctx.Done():
			return
		case <-c.r.fatal:
			return
		}
	}
}

// cString returns b up to its first NUL, as printf's %s reads a C string.
func cString(b []byte) []byte {
	if i := bytes.IndexByte(b, 0); i >= 0 {
		return b[:i]
	}
	return b
}

// connParam is rping_init_conn_param.
func (c *cb) connParam() rdmacm.ConnParam {
	p := rdmacm.ConnParam{ResponderResources: 1, InitiatorDepth: 1, RetryCount: 7, RNRRetryCount: 7}
	if c.selfQP {
		p.QPNum = c.qp.Num()
	}
	return p
}
