package rdmacm

import (
	"context"
	"crypto/rand"
	"encoding/binary"
	"fmt"
	"net/netip"
	"sync"
	"syscall"
	"time"

	"github.com/rdmago/rdmago/internal/fifo"
	"github.com/rdmago/rdmago/rdmacm/mad"
	"github.com/rdmago/rdmago/verbs"
)

// The built-in IB CM's state: its IDs, listeners, connections and
// agents. One mutex guards all of it; the connection manager handles a
// few messages per connection, so a single lock costs little and leaves
// no lock order to get wrong within it. It is never held while a MAD is
// posted or an event is delivered: both wait in queues for whoever lets
// go of the lock (cmUnlock).
var cm struct {
	mu     sync.Mutex
	agents map[*verbs.Device]*agent
	// ports holds the bound IDs of each port space and port.
	ports map[portKey][]*cmID
	// pending are the agents with MADs queued to post: whoever lets go
	// of mu posts them (unlock), so that no lock of the connection
	// manager is held while a device sends.
	pending []*agent
	// events wait for delivery to their IDs' handlers (deliverEvents);
	// delivering is set while a goroutine delivers them.
	events     []queuedEvent
	delivering bool
}

// cmUnlock lets go of cm.mu, then posts the MADs queued meanwhile, then
// delivers the events queued meanwhile unless another goroutine delivers
// them. Whoever queued a MAD or an event under cm.mu lets go of it here;
// a holder that queued nothing (a getter, called with the ID layer's lock
// held) may let go with a plain Unlock, and must, for delivering would
// take that lock again.
func cmUnlock() {
	// The agents to drain are copied out, so that cm.pending keeps its
	// array for the next holder; one agent, the usual count, needs no heap.
	var one [1]*agent
	p := append(one[:0], cm.pending...)
	clear(cm.pending)
	cm.pending = cm.pending[:0]
	deliver := len(cm.events) > 0 && !cm.delivering
	cm.mu.Unlock()
	for _, a := range p {
		a.drain()
	}
	if deliver {
		deliverEvents()
	}
}

type portKey struct {
	ps   PortSpace
	port uint16
}

// Sizes of QP1's queues and buffers.
const (
	agentRecvs  = 64
	agentSends  = 64
	recvSlotLen = verbs.GRHLen + mad.MADLen
)

// agent is the connection manager of one device (the kernel's ib_cm agent
// on a port): it owns QP1, sends and resends MADs, and hands each MAD it
// receives to the connection or listener it is for.
//
// Its receive loop waits on QP1's receive CQ only. Send completions go to
// a CQ of their own, which whoever needs them reaps under cm.mu: a MAD
// that finds no free send slot, and flush. The software device sends a
// MAD on the goroutine that posts it, so its completion is mostly there
// by then and nobody waits; a goroutine waits for send completions only
// while MADs are queued for a slot or a flush waits (reapLoop).
type agent struct {
	dev  *verbs.Device
	ctx  *verbs.Context
	pd   *verbs.PD
	cq   *verbs.CQ // QP1's receives
	scq  *verbs.CQ // QP1's sends
	qp   *verbs.QP
	mr   *verbs.MR
	guid uint64
	mtu  verbs.MTU
	gids []netip.Addr // the port's GID table, as addresses
	// clock is what the agent's timers run on: cmClock when it started.
	clock clock
	// owner is the upper 8 bits of the agent's communication IDs: on a
	// device that several processes share, what routes the answers to our
	// messages to this process (see CommIDOwner).
	owner uint8

	// Guarded by cm.mu.
	refs      int
	sendFree  []int       // free send slots
	sendQueue []queuedMAD // MADs waiting for a send slot
	ahs       map[ahKey]*verbs.AH
	conns     map[uint32]*cmID    // by local communication ID
	remotes   map[remoteKey]*cmID // by the peer's communication ID and CA GUID
	qpns      map[remoteKey]*cmID // connected IDs by the peer's QPN and CA GUID
	stats     agentStats
	issued    uint64        // MADs handed to send
	finished  uint64        // of those, sent (or dropped)
	sentCh    chan struct{} // made by flush to wait on, closed when finished grows
	awaited   uint64        // the finished count the flushes wait for
	reaping   bool          // a reapLoop runs
	queued    bool          // in cm.pending
	draining  bool          // a drain posts (the one that may use sendWR)
	drainers  sync.WaitGroup
	// stopReaper ends the reapLoop's wait, set while it waits.
	stopReaper context.CancelFunc
	sendWR     [1]verbs.SendWR
	sendSGE    [1]verbs.SGE
	sendWCs    [8]verbs.WC
	reapers    sync.WaitGroup

	// The serving goroutine's or the receive loop's (and startAgent's,
	// before either runs).
	recvWR  [1]verbs.RecvWR
	recvSGE [1]verbs.SGE

	dead   bool // released: the receive loop must not use QP1 any more
	rctx   context.Context
	cancel context.CancelFunc
	done   chan struct{} // closed once nothing receives MADs for the agent (waitReceiver)

	// inline says the device calls serve when QP1 received MADs
	// (QP1Notifier), and no receive loop runs.
	inline bool
	turn   oneAtATime
	wcs    [16]verbs.WC // the serving goroutine's
}

// oneAtATime lets one goroutine at a time do a job that several may ask
// for: one that asks while another is at it leaves the job to it, and
// that one does it again before it stops, for what came after it looked.
type oneAtATime struct {
	mu      sync.Mutex
	busy    bool          // a goroutine does the job
	again   bool          // it must do it again before it stops
	stopped bool          // nobody does it any more
	idle    chan struct{} // closed when the busy goroutine stops, if stop waits
}

// enter reports whether the caller is to do the job: false when another
// goroutine does it (it will do it again) or after stop.
func (t *oneAtATime) enter() bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.busy || t.stopped {
		t.again = t.busy
		return false
	}
	t.busy, t.again = true, false
	return true
}

// leave is what the goroutine doing the job calls when it has done it:
// it reports whether to do it again (someone asked meanwhile, and neither
// quit nor stop says to end); when it returns false, the goroutine is done.
func (t *oneAtATime) leave(quit bool) bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.again && !quit && !t.stopped {
		t.again = false
		return true
	}
	t.busy = false
	if t.idle != nil {
		close(t.idle)
		t.idle = nil
	}
	return false
}

// stop refuses every enter from now on and waits until the goroutine
// doing the job, if any, is done.
func (t *oneAtATime) stop() {
	t.mu.Lock()
	t.stopped = true
	var idle chan struct{}
	if t.busy {
		t.idle = make(chan struct{})
		idle = t.idle
	}
	t.mu.Unlock()
	if idle != nil {
		<-idle
	}
}

// agentStats counts what a device's connection manager received and sent.
type agentStats struct {
	Received, Sent, Resent, Dropped uint64
}

type ahKey struct {
	dst  netip.Addr
	sgid int
}

type remoteKey struct {
	id   uint32 // communication ID or QPN
	guid uint64
}

// queuedMAD is a MAD waiting for a send slot.
type queuedMAD struct {
	b    []byte
	dst  netip.Addr
	sgid int
}

// agentFor returns the device's agent, starting it if needed, with one
// more reference. Called with cm.mu held.
func agentFor(dev *verbs.Device) (*agent, error) {
	if a := cm.agents[dev]; a != nil {
		a.refs++
		return a, nil
	}
	a, err := startAgent(dev)
	if err != nil {
		return nil, err
	}
	if cm.agents == nil {
		cm.agents = map[*verbs.Device]*agent{}
	}
	cm.agents[dev] = a
	a.refs = 1
	return a, nil
}

// release drops a reference; the last one stops the agent. Called with
// cm.mu held; it does not wait for the receive loop, which ends on its own
// once the QP is gone.
func (a *agent) release() {
	a.refs--
	if a.refs > 0 {
		return
	}
	delete(cm.agents, a.dev)
	a.dead = true
	if n, ok := verbs.DeviceDriverOf(a.dev).(UnreachableNotifier); ok {
		n.OnCMUnreachable(nil)
	}
	if n, ok := verbs.DeviceDriverOf(a.dev).(QP1Notifier); ok && a.inline {
		n.OnQP1Receive(nil)
	}
	a.cancel()
	// QP1 goes now, so that the device may have a new one at once; a
	// drain posting on it meanwhile (without cm.mu) gets an error.
	a.qp.Destroy()
	ahs := a.ahs
	a.ahs = map[ahKey]*verbs.AH{}
	go func() {
		// The receive loop may be inside a handler waiting for cm.mu,
		// and a drain may be posting with one of the AHs: let them
		// finish before freeing what they use.
		a.drainers.Wait()
		for _, ah := range ahs {
			ah.Destroy()
		}
		a.waitReceiver()
		a.reapers.Wait()
		a.mr.Dereg()
		a.cq.Destroy()
		a.scq.Destroy()
		a.pd.Dealloc()
		a.ctx.Close()
	}()
}

func startAgent(dev *verbs.Device) (a *agent, err error) {
	ctx, err := dev.Open()
	if err != nil {
		return nil, err
	}
	a = &agent{dev: dev, ctx: ctx, clock: cmClock, ahs: map[ahKey]*verbs.AH{}, conns: map[uint32]*cmID{},
		remotes: map[remoteKey]*cmID{}, qpns: map[remoteKey]*cmID{}, done: make(chan struct{})}
	made := a // the failures below return a nil agent
	defer func() {
		if err != nil {
			made.free()
		}
	}()
	da, err := ctx.QueryDevice()
	if err != nil {
		return nil, err
	}
	a.guid = da.NodeGUID
	pa, err := ctx.QueryPort(1)
	if err != nil {
		return nil, err
	}
	a.mtu = pa.ActiveMTU
	if o, ok := verbs.DeviceDriverOf(dev).(CommIDOwner); ok {
		a.owner, _ = o.CommIDOwner()
	}
	if n, ok := verbs.DeviceDriverOf(dev).(UnreachableNotifier); ok {
		n.OnCMUnreachable(a.unreachable)
	}
	for i := 0; i < pa.GIDTblLen; i++ {
		g, err := ctx.QueryGID(1, i)
		if err != nil || g.IsZero() {
			break
		}
		a.gids = append(a.gids, g.Addr())
	}
	a.rctx, a.cancel = context.WithCancel(context.Background())
	if a.pd, err = ctx.AllocPD(); err != nil {
		return nil, err
	}
	if a.cq, err = ctx.CreateCQ(agentRecvs, nil, 0); err != nil {
		return nil, err
	}
	if a.scq, err = ctx.CreateCQ(agentSends, nil, 0); err != nil {
		return nil, err
	}
	a.qp, err = a.pd.CreateQP(&verbs.QPInitAttr{SendCQ: a.scq, RecvCQ: a.cq, QPType: verbs.QPTGSI,
		Cap: verbs.QPCap{MaxSendWR: agentSends, MaxRecvWR: agentRecvs, MaxSendSGE: 1, MaxRecvSGE: 1}})
	if err != nil {
		return nil, fmt.Errorf("rdmacm: %s: creating QP1: %w", dev.Name(), err)
	}
	steps := []struct {
		a verbs.QPAttr
		m verbs.QPAttrMask
	}{
		{verbs.QPAttr{QPState: verbs.QPSInit, PortNum: 1, QKey: mad.QP1QKey}, verbs.QPAttrState | verbs.QPAttrPKeyIndex | verbs.QPAttrPort | verbs.QPAttrQKey},
		{verbs.QPAttr{QPState: verbs.QPSRTR}, verbs.QPAttrState},
		{verbs.QPAttr{QPState: verbs.QPSRTS}, verbs.QPAttrState | verbs.QPAttrSQPSN},
	}
	for _, s := range steps {
		if err := a.qp.Modify(&s.a, s.m); err != nil {
			return nil, err
		}
	}
	buf := make([]byte, agentRecvs*recvSlotLen+agentSends*mad.MADLen)
	if a.mr, err = a.pd.RegMR(buf, verbs.AccessLocalWrite); err != nil {
		return nil, err
	}
	for i := 0; i < agentRecvs; i++ {
		if err := a.postRecv(i); err != nil {
			return nil, err
		}
	}
	for i := agentSends - 1; i >= 0; i-- {
		a.sendFree = append(a.sendFree, i)
	}
	if n, ok := verbs.DeviceDriverOf(dev).(QP1Notifier); ok {
		a.inline = true
		n.OnQP1Receive(a.serve)
		// What came while the receives were posted, before the device
		// had anyone to tell (the caller holds cm.mu, which serve
		// waits for).
		go a.serve()
	} else {
		go a.loop(a.rctx)
	}
	return a, nil
}

// free releases what startAgent made, after a failure.
func (a *agent) free() {
	if a.cancel != nil {
		a.cancel()
	}
	if a.qp != nil {
		a.qp.Destroy()
	}
	if a.mr != nil {
		a.mr.Dereg()
	}
	if a.cq != nil {
		a.cq.Destroy()
	}
	if a.scq != nil {
		a.scq.Destroy()
	}
	if a.pd != nil {
		a.pd.Dealloc()
	}
	a.ctx.Close()
}

// Work request IDs of QP1: receives are their slot number, sends have
// this bit set.
const sendWRBit = 1 << 32

func (a *agent) postRecv(slot int) error {
	a.recvSGE[0] = a.mr.SGE(slot*recvSlotLen, recvSlotLen)
	a.recvWR[0] = verbs.RecvWR{WRID: uint64(slot), SGList: a.recvSGE[:]}
	return a.qp.PostRecv(a.recvWR[:])
}

func (a *agent) sendSlot(i int) []byte {
	off := agentRecvs*recvSlotLen + i*mad.MADLen
	return a.mr.Buf()[off : off+mad.MADLen]
}

// loop receives MADs until the agent stops, on a device that does not
// call serve.
func (a *agent) loop(ctx context.Context) {
	defer close(a.done)
	wcs := make([]verbs.WC, 16)
	for {
		if err := a.cq.Wait(ctx); err != nil {
			return
		}
		n, err := a.cq.Poll(wcs)
		if err != nil || !a.take(ctx, wcs[:n]) {
			return
		}
	}
}

// take handles the MADs of QP1's receive completions wcs and posts their
// slots again. It returns false once the agent stopped or QP1 is gone.
func (a *agent) take(ctx context.Context, wcs []verbs.WC) bool {
	for _, wc := range wcs {
		slot := int(wc.WRID)
		if wc.Status == verbs.WCSuccess {
			b := a.mr.Buf()[slot*recvSlotLen:]
			a.receive(b[:min(int(wc.ByteLen), recvSlotLen)])
		}
		if ctx.Err() != nil {
			return false
		}
		if err := a.postRecv(slot); err != nil {
			return false
		}
	}
	return true
}

// serve is what the device calls when QP1 received MADs (QP1Notifier):
// it handles them on the calling goroutine, in the order they came. One
// goroutine serves at a time; another that calls meanwhile (a second
// link's receive loop, or a goroutine the device started) leaves the new
// MADs to it.
func (a *agent) serve() {
	if !a.turn.enter() {
		return
	}
	for {
		for {
			n, err := a.cq.Poll(a.wcs[:])
			if err != nil || !a.take(a.rctx, a.wcs[:n]) || n < len(a.wcs) {
				break
			}
		}
		if !a.turn.leave(a.rctx.Err() != nil) {
			return
		}
	}
}

// waitReceiver waits until nothing receives MADs for the agent any more:
// the receive loop has ended, or no goroutine serves (then it closes
// done). Called once, without cm.mu, after release.
func (a *agent) waitReceiver() {
	if !a.inline {
		<-a.done
		return
	}
	a.turn.stop()
	close(a.done)
}

// reap takes QP1's send completions, freeing their slots and counting
// their MADs as sent, and sends the MADs queued for those slots (the
// reapLoop may be waiting for completions taken here). Called with cm.mu
// held.
func (a *agent) reap() {
	a.takeSent()
	a.pump()
}

// takeSent is reap without sending what is queued. Taking the
// completions a waiting reapLoop was woken for would leave it waiting for
// the next: if nothing is left for it to wait for, it is told to end.
func (a *agent) takeSent() {
	for {
		n, err := a.scq.Poll(a.sendWCs[:])
		for _, wc := range a.sendWCs[:n] {
			a.sendFree = append(a.sendFree, int(wc.WRID&^sendWRBit))
			a.sent()
		}
		if err != nil || n < len(a.sendWCs) {
			break
		}
	}
	if a.stopReaper != nil && !a.reaperNeeded() {
		a.stopReaper()
		a.stopReaper = nil
	}
}

// reaperNeeded reports whether MADs wait for a send slot or a flush waits
// for MADs to leave. Called with cm.mu held.
func (a *agent) reaperNeeded() bool {
	return len(a.sendQueue) > 0 || a.finished < a.awaited
}

// pump has the queued MADs posted when cm.mu is let go (drain). Called
// with cm.mu held.
func (a *agent) pump() {
	if len(a.sendQueue) > 0 && !a.queued {
		a.queued = true
		cm.pending = append(cm.pending, a)
	}
}

// startReaper starts reapLoop unless it runs. Called with cm.mu held.
func (a *agent) startReaper() {
	if a.reaping || a.dead {
		return
	}
	a.reaping = true
	a.reapers.Add(1)
	go a.reapLoop()
}

// reapLoop waits for send completions while MADs are queued for a slot
// or a flush waits for MADs to leave, and ends when none are.
func (a *agent) reapLoop() {
	defer a.reapers.Done()
	cm.mu.Lock()
	for !a.dead && a.rctx.Err() == nil && a.reaperNeeded() {
		ctx, cancel := context.WithCancel(a.rctx)
		a.stopReaper = cancel // by takeSent, when another took what it waits for
		cmUnlock()
		err := a.scq.Wait(ctx)
		cancel()
		cm.mu.Lock()
		a.stopReaper = nil
		if err == nil && !a.dead {
			a.reap()
		}
	}
	a.reaping = false
	cmUnlock()
}

// receive handles one MAD from QP1's receive buffer (GRH area first).
func (a *agent) receive(b []byte) {
	if len(b) < verbs.GRHLen {
		return
	}
	src, dst, _, _, ok := verbs.GRHAddrs(b[:verbs.GRHLen])
	cm.mu.Lock()
	defer cmUnlock()
	if a.dead {
		return
	}
	a.stats.Received++
	if !ok {
		a.stats.Dropped++
		return
	}
	h, msg, err := mad.Decode(b[verbs.GRHLen:])
	if err != nil || h.MgmtClass != mad.MgmtClassCM || h.Method != mad.MethodSend {
		a.stats.Dropped++
		return
	}
	in := &inMAD{hdr: h, src: src, sgid: a.gidIndex(dst)}
	if in.sgid < 0 {
		a.stats.Dropped++
		return
	}
	switch m := msg.(type) {
	case *mad.REQ:
		a.handleREQ(in, m)
	case *mad.MRA:
		a.handleMRA(in, m)
	case *mad.REJ:
		a.handleREJ(in, m)
	case *mad.REP:
		a.handleREP(in, m)
	case *mad.RTU:
		a.handleRTU(in, m)
	case *mad.DREQ:
		a.handleDREQ(in, m)
	case *mad.DREP:
		a.handleDREP(in, m)
	case *mad.SIDRREQ:
		a.handleSIDRREQ(in, m)
	case *mad.SIDRREP:
		a.handleSIDRREP(in, m)
	default:
		a.stats.Dropped++ // LAP and APR: path migration is not supported
	}
}

// inMAD is a received MAD's header and where it came from.
type inMAD struct {
	hdr  mad.Header
	src  netip.Addr // the sender's GID
	sgid int        // our GID index it arrived at
}

func (a *agent) gidIndex(addr netip.Addr) int {
	for i, g := range a.gids {
		if g.WithZone("") == addr.WithZone("") {
			return i
		}
	}
	return -1
}

// marshal encodes a CM MAD with the given transaction ID.
func marshal(tid uint64, m mad.Message) []byte {
	h := mad.Header{BaseVersion: mad.BaseVersion, MgmtClass: mad.MgmtClassCM, ClassVersion: mad.CMClassVersion, Method: mad.MethodSend,
		TransactionID: tid, AttrID: m.AttrID()}
	b, err := mad.Marshal(h, m)
	if err != nil {
		// Every message is built here from checked values.
		panic("rdmacm: encoding " + m.AttrID().String() + ": " + err.Error())
	}
	return b
}

// send sends an encoded MAD to dst's QP1 from our GID sgid, or queues it
// until a send slot is free. Called with cm.mu held.
func (a *agent) send(b []byte, dst netip.Addr, sgid int) {
	a.issued++
	a.post(b, dst, sgid)
}

// post is send for a MAD already counted in issued: it queues the MAD,
// which the holder of cm.mu posts when it lets go (cmUnlock), after
// the MADs queued before it. Called with cm.mu held.
func (a *agent) post(b []byte, dst netip.Addr, sgid int) {
	if a.dead {
		a.sent()
		return
	}
	a.sendQueue = append(a.sendQueue, queuedMAD{b, dst, sgid})
	a.pump()
}

// drain posts the queued MADs in order, each without cm.mu held while
// QP1 sends it (the software device runs the send on the poster's
// goroutine). One drain posts at a time; one that finds another at work
// leaves the queue to it. MADs that find no free slot wait for reapLoop.
// Called without cm.mu.
func (a *agent) drain() {
	cm.mu.Lock()
	a.queued = false
	if a.draining {
		cm.mu.Unlock()
		return
	}
	for !a.dead && len(a.sendQueue) > 0 {
		if len(a.sendFree) == 0 {
			a.takeSent()
			if len(a.sendFree) == 0 {
				a.startReaper()
				break
			}
		}
		q := a.sendQueue[0]
		a.sendQueue = fifo.PopFront(a.sendQueue)
		ah, err := a.ah(q.dst, q.sgid)
		if err != nil {
			a.stats.Dropped++
			a.sent()
			continue
		}
		slot := a.sendFree[len(a.sendFree)-1]
		a.sendFree = a.sendFree[:len(a.sendFree)-1]
		copy(a.sendSlot(slot), q.b)
		a.sendSGE[0] = a.mr.SGE(agentRecvs*recvSlotLen+slot*mad.MADLen, mad.MADLen)
		a.sendWR[0] = verbs.SendWR{WRID: sendWRBit | uint64(slot), Opcode: verbs.WRSend, SendFlags: verbs.SendSignaled,
			SGList: a.sendSGE[:], AH: ah, RemoteQPN: 1, RemoteQKey: mad.QP1QKey}
		a.draining = true
		a.drainers.Add(1)
		cm.mu.Unlock()
		err = a.qp.PostSend(a.sendWR[:])
		cm.mu.Lock()
		a.draining = false
		a.drainers.Done()
		if err != nil {
			a.sendFree = append(a.sendFree, slot)
			a.stats.Dropped++
			a.sent()
			continue
		}
		a.stats.Sent++
	}
	cm.mu.Unlock()
}

// sent counts a MAD that left (or was dropped) and wakes flush. Called
// with cm.mu held.
func (a *agent) sent() {
	a.finished++
	if a.sentCh != nil {
		close(a.sentCh)
		a.sentCh = nil
	}
}

// flush waits, at most d, until the first n MADs handed to send have
// left: so that a program that exits right after Disconnect or Destroy
// still tells its peer. Called without cm.mu.
func (a *agent) flush(n uint64, d time.Duration) {
	var timeout <-chan time.Time // made when there is something to wait for: mostly the MADs left already
	for {
		cm.mu.Lock()
		if a.finished < n && !a.dead {
			a.reap()
		}
		done := a.finished >= n
		if !done {
			a.awaited = max(a.awaited, n)
			a.startReaper()
			if a.sentCh == nil {
				a.sentCh = make(chan struct{})
			}
		}
		ch := a.sentCh
		cmUnlock()
		if done {
			return
		}
		if timeout == nil {
			t := time.NewTimer(d)
			defer t.Stop()
			timeout = t.C
		}
		select {
		case <-ch:
		case <-timeout:
			return
		}
	}
}

func (a *agent) ah(dst netip.Addr, sgid int) (*verbs.AH, error) {
	k := ahKey{dst, sgid}
	if ah := a.ahs[k]; ah != nil {
		return ah, nil
	}
	ah, err := a.pd.CreateAH(&verbs.AHAttr{IsGlobal: true, PortNum: 1,
		GRH: verbs.GlobalRoute{DGID: verbs.GIDFromAddr(dst), SGIDIndex: uint8(sgid), HopLimit: 64}})
	if err != nil {
		return nil, err
	}
	a.ahs[k] = ah
	return ah, nil
}

// reply answers a received MAD with msg, in the same transaction.
func (a *agent) reply(in *inMAD, msg mad.Message) {
	if a.answersFull() {
		return
	}
	a.send(marshal(in.hdr.TransactionID, msg), in.src, in.sgid)
}

// maxQueuedAnswers bounds the MADs waiting for a send slot when the next
// is only an answer to the peer's message: a REJ or DREP for a message
// about no connection of ours, or our last MAD again for a duplicate.
// The peer resends what goes unanswered, as it does when a MAD is lost,
// so under a flood of requests the answers beyond the bound are dropped
// rather than queued without end. What the agent sends on its own
// account (a request, a reply the user made, a retransmission) is
// always queued.
const maxQueuedAnswers = 4 * agentSends

// answersFull reports whether an answer must be dropped, counting it.
// Called with cm.mu held.
func (a *agent) answersFull() bool {
	if len(a.sendQueue) < maxQueuedAnswers {
		return false
	}
	a.stats.Dropped++
	return true
}

// answer sends our last MAD again for a peer's duplicate, unless
// maxQueuedAnswers MADs already wait. Called with cm.mu held.
func (a *agent) answer(b []byte, dst netip.Addr, sgid int) {
	if !a.answersFull() {
		a.send(b, dst, sgid)
	}
}

// unreachable fails at once the connection request or SIDR request whose
// MAD the network could not deliver: nothing listens for RoCE at the
// destination (as when the host has no RDMA device, or the device there
// is not up), or there is no such host. The status is the negative errno,
// ECONNREFUSED for a port unreachable.
func (a *agent) unreachable(dst netip.Addr, errno syscall.Errno, pkt []byte) {
	const madAt = 12 + 8 // after the BTH and DETH
	if len(pkt) < madAt+mad.HeaderLen+4 {
		return
	}
	m := pkt[madAt:]
	attr := binary.BigEndian.Uint16(m[16:18])
	if m[1] != mad.MgmtClassCM || attr != uint16(mad.AttrREQ) && attr != uint16(mad.AttrSIDRREQ) {
		return
	}
	commID := binary.BigEndian.Uint32(m[mad.HeaderLen:])
	cm.mu.Lock()
	defer cmUnlock()
	id := a.conns[commID]
	if id == nil || a.dead || id.c.peerGID.WithZone("") != dst.WithZone("") {
		return
	}
	switch id.c.state {
	case cmReqSent:
		if id.c.retr != nil {
			id.c.retr.stop()
		}
		id.c.retr = nil
		id.toIdle()
		id.qpToError()
		id.event(BackendEvent{Type: EventUnreachable, Status: -int(errno)})
	case cmSIDRReqSent:
		if id.c.retr != nil {
			id.c.retr.stop()
		}
		id.c.retr = nil
		id.toIdle()
		id.event(BackendEvent{Type: EventUnreachable, Status: -int(errno)})
	}
}

// newCommID returns an unused local communication ID, nonzero, its upper 8
// bits the agent's owner.
func (a *agent) newCommID() uint32 {
	for {
		id := uint32(a.owner)<<24 | randUint32()&0xffffff
		if id != 0 && a.conns[id] == nil {
			return id
		}
	}
}

func randUint32() uint32 {
	var b [4]byte
	if _, err := rand.Read(b[:]); err != nil {
		panic(err)
	}
	return binary.BigEndian.Uint32(b[:])
}

// retrier resends one MAD until it is answered or its retries run out
// (the ib_cm's MAD agent retries). Its timer callbacks take cm.mu; each
// arming has its own generation, so a callback that fired while the timer
// was being rearmed does nothing.
type retrier struct {
	a       *agent
	b       []byte
	dst     netip.Addr
	sgid    int
	timeout time.Duration
	left    int
	gen     int
	stopped bool
	timer   stopper
	id      *cmID
	expired func(*cmID) // called with id and cm.mu held when the retries run out
}

// startRetrier sends b and arms its retransmissions; when they run out it
// calls expired(id). (A method expression, not a method value bound to id,
// so that each MAD resent costs no closure.) Called with cm.mu held.
func (a *agent) startRetrier(b []byte, dst netip.Addr, sgid int, timeout time.Duration, retries int, id *cmID, expired func(*cmID)) *retrier {
	r := &retrier{a: a, b: b, dst: dst, sgid: sgid, timeout: timeout, left: retries, id: id, expired: expired}
	a.send(b, dst, sgid)
	r.arm(timeout)
	return r
}

// arm (re)starts the timer for d. Called with cm.mu held.
func (r *retrier) arm(d time.Duration) {
	if r.timer != nil {
		r.timer.Stop()
	}
	r.gen++
	gen := r.gen
	r.timer = r.a.clock.afterFunc(d, func() { r.fire(gen) })
}

func (r *retrier) fire(gen int) {
	cm.mu.Lock()
	defer cmUnlock()
	if r.stopped || gen != r.gen {
		return
	}
	if r.left <= 0 {
		r.stopped = true
		r.expired(r.id)
		return
	}
	r.left--
	r.a.stats.Resent++
	r.a.send(r.b, r.dst, r.sgid)
	r.arm(r.timeout)
}

// extend waits d for the answer before resending, for a peer that sent an
// MRA. Called with cm.mu held.
func (r *retrier) extend(d time.Duration) {
	if r != nil && !r.stopped {
		r.arm(d)
	}
}

// stop cancels the retransmissions. Called with cm.mu held; safe on nil.
func (r *retrier) stop() {
	if r == nil || r.stopped {
		return
	}
	r.stopped = true
	r.timer.Stop()
}
