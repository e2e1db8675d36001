package nvmeof

import (
	"fmt"
	"sync"
	"time"

	"github.com/rdmago/rdmago/nvmeof/wire"
	"github.com/rdmago/rdmago/rdmacm"
	"github.com/rdmago/rdmago/verbs"
)

// targetQueue is one queue of a host at the target (struct
// nvmet_rdma_queue): a receive per submission queue entry, each with
// room for a command and its in-capsule data, and data buffers for what
// moves by RDMA READ and WRITE. Each command runs in a goroutine of its
// own from its receive to its response; its receive is posted again just
// before the response goes, so the host always finds one.
type targetQueue struct {
	*rdmaQueue
	t      *Target
	qid    uint16
	depth  int
	inline int

	recvMR *verbs.MR // depth receives of CommandLen+inline bytes
	respMR *verbs.MR // depth responses, sent inline
	dataMR *verbs.MR // data buffers of targetMaxData bytes

	dataFree chan int
	readDone []chan struct{} // per receive: its command's RDMA READ completed
	down     chan struct{}   // closed once the queue is shut down

	respMu sync.Mutex // held from a response's buffer to its post

	jobs    chan job // commands for the workers; closed once the poller is gone
	poolMu  sync.Mutex
	workers int // workers started
	idle    int // workers waiting for a command

	mu         sync.Mutex
	ctrl       *targetCtrl
	connecting bool // a Connect is running
	aers       int  // Asynchronous Event Requests held
}

func newTargetQueue(t *Target, c *rdmacm.Conn, qid uint16, depth int) (*targetQueue, error) {
	q := &targetQueue{rdmaQueue: newRDMAQueue(c), t: t, qid: qid, depth: depth, inline: targetInline,
		readDone: make([]chan struct{}, depth), down: make(chan struct{}), jobs: make(chan job, depth)}
	q.stopWork = func() { close(q.jobs) }
	nData := min(depth, targetDataBufs)
	if qid == 0 {
		nData = min(depth, 4)
	}
	q.dataFree = make(chan int, nData)
	rsz := wire.CommandLen + q.inline
	var err error
	if q.recvMR, err = q.register(depth*rsz, verbs.AccessLocalWrite); err != nil {
		return nil, err
	}
	if q.respMR, err = q.register(depth*wire.CompletionLen, verbs.AccessLocalWrite); err != nil {
		return nil, err
	}
	if q.dataMR, err = q.register(nData*targetMaxData, verbs.AccessLocalWrite); err != nil {
		return nil, err
	}
	for i := range nData {
		q.dataFree <- i
	}
	for i := range depth {
		q.readDone[i] = make(chan struct{}, 1)
		if err := q.postRecv(wrRecv|uint64(i), q.recvMR, i*rsz, rsz); err != nil {
			return nil, err
		}
	}
	return q, nil
}

func (q *targetQueue) controller() *targetCtrl {
	q.mu.Lock()
	defer q.mu.Unlock()
	return q.ctrl
}

// completed handles one completion of the queue's CQ (in the poller).
func (q *targetQueue) completed(wc *verbs.WC) {
	i := int(wc.WRID &^ wrKind)
	switch wc.WRID & wrKind {
	case wrRecv:
		q.dispatch(job{i, int(wc.ByteLen)})
	case wrRead:
		q.readDone[i] <- struct{}{}
	case wrSend:
		if i > 0 {
			q.dataFree <- i - 1 // the response went, and the data before it
		}
	}
}

// gone is the queue's end: its controller forgets it (the admin queue's
// end ends the controller) and it shuts down.
func (q *targetQueue) gone(err error) {
	if c := q.controller(); c != nil {
		if q.qid == 0 {
			go c.teardown()
		} else {
			c.mu.Lock()
			if c.io[q.qid] == q {
				delete(c.io, q.qid)
			}
			c.mu.Unlock()
		}
	}
	go func() {
		q.close()
		q.t.mu.Lock()
		delete(q.t.queues, q)
		q.t.mu.Unlock()
		close(q.down)
	}()
}

// shutdownNow shuts down a queue that was never started.
func (q *targetQueue) shutdownNow() {
	q.close()
	close(q.down)
}

// reply is what a command answers: its status and result, and the data
// it returns to the host (in data buffer idx, -1 for none). A held
// command (an Asynchronous Event Request) is not answered.
type reply struct {
	status uint16
	result uint64
	in     []byte
	idx    int
	hold   bool
}

func replyErr(sct, sc uint8) reply { return reply{status: wire.Status(sct, sc, true), idx: -1} }

var (
	replyOK          = reply{idx: -1}
	replyInvalidOp   = replyErr(wire.SCTGeneric, wire.SCInvalidOpcode)
	replyInvalid     = replyErr(wire.SCTGeneric, wire.SCInvalidField)
	replySequence    = replyErr(wire.SCTGeneric, wire.SCCommandSeqError)
	replyNamespace   = replyErr(wire.SCTGeneric, wire.SCInvalidNamespace)
	replyInternal    = replyErr(wire.SCTGeneric, wire.SCInternal)
	replyXferError   = replyErr(wire.SCTGeneric, wire.SCDataXferError)
	replySGLType     = replyErr(wire.SCTGeneric, wire.SCSGLInvalidType)
	replyLBARange    = replyErr(wire.SCTGeneric, wire.SCLBARange)
	replyWriteFault  = replyErr(wire.SCTMedia, wire.SCWriteFault)
	replyReadFailure = replyErr(wire.SCTMedia, wire.SCUnrecoveredRead)
)

// job is a command to run: the receive it came in, and its length.
type job struct{ recv, n int }

// dispatch hands a command to an idle worker, or to a new one while the
// queue has fewer workers than entries: each command runs on a goroutine
// of its own from its receive to its response, but the goroutines stay,
// so that their stacks are grown once and not for every command.
func (q *targetQueue) dispatch(j job) {
	q.poolMu.Lock()
	if q.idle > 0 {
		q.idle--
	} else if q.workers < q.depth {
		q.workers++
		q.work.Add(1)
		go q.worker()
	}
	q.poolMu.Unlock()
	q.jobs <- j // room for every entry: the host sends no more
}

func (q *targetQueue) worker() {
	defer q.work.Done()
	for j := range q.jobs {
		q.exec(j.recv, j.n)
		q.poolMu.Lock()
		q.idle++
		q.poolMu.Unlock()
	}
}

// exec runs the command in receive i, of n bytes.
func (q *targetQueue) exec(i, n int) {
	rsz := wire.CommandLen + q.inline
	if n < wire.CommandLen {
		q.fail(fmt.Errorf("%w: a command capsule of %d bytes", ErrDisconnected, n))
		return
	}
	b := q.recvMR.Buf()[i*rsz : i*rsz+n]
	cmd, _ := wire.ParseCommand(b)
	r := q.handle(i, &cmd, b[wire.CommandLen:])
	if r.hold {
		return
	}
	q.respond(i, &cmd, r)
}

func (q *targetQueue) handle(i int, cmd *wire.Command, capsule []byte) reply {
	ctrl := q.controller()
	if cmd.Opcode == wire.OpFabrics {
		switch cmd.FCType {
		case wire.FCTypeConnect:
			return q.connect(i, cmd, capsule)
		case wire.FCTypePropertyGet, wire.FCTypePropertySet:
			if ctrl == nil {
				return replySequence
			}
			if q.qid != 0 {
				return replyInvalidOp
			}
			ctrl.touch()
			return q.property(ctrl, cmd)
		case wire.FCTypeDisconnect:
			if ctrl == nil {
				return replySequence
			}
			return replyOK // the host disconnects the connection next
		}
		return replyInvalid
	}
	if ctrl == nil {
		return replySequence
	}
	if q.qid == 0 {
		ctrl.touch()
		if !ctrl.enabled() {
			return replySequence
		}
		return q.admin(i, ctrl, cmd, capsule)
	}
	return q.io(i, ctrl, cmd, capsule)
}

// acquire takes a data buffer, waiting for one if all are in use.
func (q *targetQueue) acquire() (int, []byte, bool) {
	select {
	case d := <-q.dataFree:
		return d, q.dataMR.Buf()[d*targetMaxData : (d+1)*targetMaxData], true
	case <-q.ctx.Done():
		return -1, nil, false
	}
}

// dataOut fetches n bytes (at most) of the host's data for the command
// in receive i: from the capsule, or by RDMA READ of its keyed SGL into
// a data buffer (idx, released with the response).
func (q *targetQueue) dataOut(i int, cmd *wire.Command, capsule []byte, n int) ([]byte, int, reply, bool) {
	s := cmd.SGL
	switch {
	case s.Type == wire.SGLDataBlock && s.Subtype == wire.SGLOffset:
		if s.Addr > uint64(len(capsule)) || uint64(s.Length) > uint64(len(capsule))-s.Addr || int(s.Length) < n {
			return nil, -1, replyErr(wire.SCTGeneric, wire.SCSGLInvalidOffset), false
		}
		return capsule[s.Addr : s.Addr+uint64(n)], -1, replyOK, true
	case s.Type == wire.SGLKeyedBlock:
		if int(s.Length) < n || n > targetMaxData {
			return nil, -1, replyInvalid, false
		}
		idx, buf, ok := q.acquire()
		if !ok {
			return nil, -1, replyInternal, false
		}
		if n == 0 {
			return buf[:0], idx, replyOK, true
		}
		err := q.post(verbs.SendWR{WRID: wrRead | uint64(i), Opcode: verbs.WRRDMARead, SendFlags: verbs.SendSignaled,
			SGList: []verbs.SGE{q.dataMR.SGE(idx*targetMaxData, n)}, RemoteAddr: s.Addr, RKey: s.Key})
		if err == nil {
			select {
			case <-q.readDone[i]:
				return buf[:n], idx, replyOK, true
			case <-q.ctx.Done():
			}
		}
		r := replyXferError
		r.idx = idx
		return nil, idx, r, false
	}
	return nil, -1, replySGLType, false
}

// dataIn returns a reply carrying data to the host, if its SGL can take
// it: the data goes by RDMA WRITE before the response.
func dataIn(cmd *wire.Command, data []byte, idx int, result uint64) reply {
	if cmd.SGL.Type != wire.SGLKeyedBlock {
		return reply{status: replySGLType.status, idx: idx}
	}
	return reply{in: data[:min(len(data), int(cmd.SGL.Length))], idx: idx, result: result}
}

// respond sends the command's response, after its data if it returns
// any, and posts its receive again first.
func (q *targetQueue) respond(i int, cmd *wire.Command, r reply) {
	// From the moment receive i is posted again, a new command may land
	// in it and reach its own response, which reuses response buffer i:
	// the buffer is filled and sent (inline: copied at the post) before
	// that response may start.
	q.respMu.Lock()
	defer q.respMu.Unlock()
	comp := wire.Completion{Result: r.result, SQID: q.qid, CID: cmd.CID, Status: r.status}
	comp.Put(q.respMR.Buf()[i*wire.CompletionLen:])
	rsz := wire.CommandLen + q.inline
	if q.postRecv(wrRecv|uint64(i), q.recvMR, i*rsz, rsz) != nil {
		return
	}
	wrs := make([]verbs.SendWR, 0, 2)
	if len(r.in) > 0 && r.status == 0 {
		wrs = append(wrs, verbs.SendWR{WRID: wrWrite | uint64(i), Opcode: verbs.WRRDMAWrite,
			SGList: []verbs.SGE{q.dataMR.SGE(r.idx*targetMaxData, len(r.in))}, RemoteAddr: cmd.SGL.Addr, RKey: cmd.SGL.Key})
	}
	send := verbs.SendWR{WRID: wrSend | uint64(r.idx+1), Opcode: verbs.WRSend, SendFlags: verbs.SendSignaled | verbs.SendInline,
		SGList: []verbs.SGE{q.respMR.SGE(i*wire.CompletionLen, wire.CompletionLen)}}
	if cmd.SGL.Type == wire.SGLKeyedBlock && cmd.SGL.Subtype == wire.SGLInvalidate && cmd.SGL.Key != 0 {
		// The host asked for its key to go with the response
		// (SEND_WITH_INVALIDATE), sparing it a local invalidation.
		send.Opcode, send.InvalidateRKey = verbs.WRSendWithInv, cmd.SGL.Key
	}
	q.post(append(wrs, send)...)
}

// connect binds the queue to a controller (Fabrics Connect): a new one
// for an admin queue, the host's own for an I/O queue.
func (q *targetQueue) connect(i int, cmd *wire.Command, capsule []byte) reply {
	// One Connect per queue: a second, even one sent alongside the
	// first, is out of sequence.
	q.mu.Lock()
	if q.ctrl != nil || q.connecting {
		q.mu.Unlock()
		return replySequence
	}
	q.connecting = true
	q.mu.Unlock()
	r := q.connectOnce(i, cmd, capsule)
	q.mu.Lock()
	q.connecting = false
	q.mu.Unlock()
	return r
}

func (q *targetQueue) connectOnce(i int, cmd *wire.Command, capsule []byte) reply {
	data, idx, r, ok := q.dataOut(i, cmd, capsule, wire.ConnectDataLen)
	if !ok {
		return r
	}
	d, err := wire.ParseConnectData(data)
	if err != nil {
		return reply{status: replyInvalid.status, idx: idx}
	}
	// Invalid parameters name the offending field: bit 16 says whether it
	// is in the data (1) or the command (0), the low bits its offset.
	invalid := func(inData bool, off int) reply {
		r := reply{status: wire.Status(wire.SCTCommandSpecific, wire.SCConnectInvalidParam, true), result: uint64(off), idx: idx}
		if inData {
			r.result |= 1 << 16
		}
		return r
	}
	t := q.t
	switch {
	case cmd.ConnectQID() != q.qid:
		return invalid(false, 42)
	case int(cmd.ConnectSQSize())+1 > q.depth || cmd.ConnectSQSize() == 0:
		return invalid(false, 44)
	case !t.hostAllowed(d.HostNQN):
		t.logf("nvmeof: host %s is not allowed", d.HostNQN)
		return reply{status: wire.Status(wire.SCTCommandSpecific, wire.SCConnectInvalidHost, true), idx: idx}
	}
	if q.qid == 0 {
		var sub *subsystem
		if d.SubNQN != wire.DiscoveryNQN {
			if sub = t.subsystem(d.SubNQN); sub == nil {
				t.logf("nvmeof: host %s asked for subsystem %q, which is not here", d.HostNQN, d.SubNQN)
				return invalid(true, 256)
			}
		}
		c, err := t.newController(q, sub, d, time.Duration(cmd.ConnectKATO())*time.Millisecond)
		if err != nil {
			return reply{status: wire.Status(wire.SCTCommandSpecific, wire.SCConnectControllerBusy, true), idx: idx}
		}
		q.mu.Lock()
		q.ctrl = c
		q.mu.Unlock()
		t.logf("nvmeof: controller %d of %s for %s from %v", c.id, c.subNQN(), c.hostNQN, q.conn.RemoteAddr())
		return reply{result: uint64(c.id), idx: idx}
	}
	c := t.controller(d.CNTLID)
	if c == nil || c.hostNQN != d.HostNQN || c.subNQN() != d.SubNQN || c.discovery() {
		return invalid(true, 16)
	}
	c.mu.Lock()
	switch {
	case c.gone || int(q.qid) > c.nIO || c.io[q.qid] != nil:
		c.mu.Unlock()
		return invalid(false, 42)
	case c.cc&wire.CCEnable == 0:
		c.mu.Unlock()
		return reply{status: replySequence.status, idx: idx}
	}
	c.io[q.qid] = q
	c.mu.Unlock()
	q.mu.Lock()
	q.ctrl = c
	q.mu.Unlock()
	return reply{result: uint64(c.id), idx: idx}
}

// property reads or writes a controller register (Property Get, Set).
func (q *targetQueue) property(c *targetCtrl, cmd *wire.Command) reply {
	off := cmd.PropertyOffset()
	if cmd.FCType == wire.FCTypePropertySet {
		if off != wire.PropCC || cmd.PropertySize() != 4 {
			return replyInvalid
		}
		c.setCC(uint32(cmd.PropertyValue()))
		return replyOK
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	var v uint64
	switch off {
	case wire.PropCAP:
		v = wire.CAP(maxQueueSize-1, 15)
	case wire.PropVS:
		v = uint64(wire.Version(1, 3, 0))
	case wire.PropCC:
		v = uint64(c.cc)
	case wire.PropCSTS:
		v = uint64(c.csts)
	default:
		return replyInvalid
	}
	return reply{result: v, idx: -1}
}

// admin runs an admin command.
func (q *targetQueue) admin(i int, c *targetCtrl, cmd *wire.Command, capsule []byte) reply {
	switch cmd.Opcode {
	case wire.AdminIdentify:
		return q.identify(c, cmd)
	case wire.AdminGetLogPage:
		return q.logPage(c, cmd)
	case wire.AdminSetFeature:
		return q.setFeature(c, cmd)
	case wire.AdminGetFeature:
		return q.getFeature(c, cmd)
	case wire.AdminKeepAlive:
		return replyOK
	case wire.AdminAbort:
		return reply{result: 1, idx: -1} // not aborted: commands here finish on their own
	case wire.AdminAsyncEvent:
		q.mu.Lock()
		defer q.mu.Unlock()
		if q.aers > int(c.identify().AERL) {
			return replyErr(wire.SCTCommandSpecific, 0x05) // Asynchronous Event Request Limit Exceeded
		}
		q.aers++
		return reply{hold: true} // answered only by an event; none is raised here
	}
	return replyInvalidOp
}

// withData runs fill on a data buffer and returns what it made for the
// host.
func (q *targetQueue) withData(cmd *wire.Command, n int, fill func([]byte) reply) reply {
	if n > targetMaxData {
		return replyInvalid
	}
	if cmd.SGL.Type != wire.SGLKeyedBlock {
		return replySGLType
	}
	idx, buf, ok := q.acquire()
	if !ok {
		return replyInternal
	}
	r := fill(buf[:n])
	if r.status != 0 {
		r.idx, r.in = idx, nil
		return r
	}
	return dataIn(cmd, buf[:n], idx, r.result)
}

func (q *targetQueue) identify(c *targetCtrl, cmd *wire.Command) reply {
	csi := uint8(cmd.CDW[1] >> 24)
	return q.withData(cmd, wire.IdentifyLen, func(b []byte) reply {
		clear(b)
		switch cmd.CNS() {
		case wire.CNSController:
			id := c.identify()
			id.Put(b)
		case wire.CNSNamespace:
			if c.discovery() || cmd.NSID == 0 || cmd.NSID > uint32(len(c.sub.ns)) {
				return replyNamespace // (every ID up to NN is active here)
			}
			if ns := c.namespace(cmd.NSID); ns != nil {
				info := wire.Namespace{Size: ns.blocks, Capacity: ns.blocks, Used: ns.blocks, NGUID: ns.nguid, LBAShift: q.t.shift}
				info.Put(b)
			} // an inactive namespace: zeros
		case wire.CNSActiveNSList:
			if c.sub != nil {
				k := 0
				for _, ns := range c.sub.ns {
					if ns.id > cmd.NSID && k < wire.IdentifyLen/4 {
						b[4*k], b[4*k+1], b[4*k+2], b[4*k+3] = byte(ns.id), byte(ns.id>>8), byte(ns.id>>16), byte(ns.id>>24)
						k++
					}
				}
			}
		case wire.CNSNSDescList:
			ns := c.namespace(cmd.NSID)
			if ns == nil {
				return replyNamespace
			}
			wire.PutNSDescriptors(b, ns.nguid)
		case wire.CNSNamespaceCSI, wire.CNSControllerCSI:
			if csi != 0 {
				return replyInvalid
			}
			// The NVM command set's own structures: no limits beyond MDTS.
		default:
			return replyInvalid
		}
		return replyOK
	})
}

func (q *targetQueue) logPage(c *targetCtrl, cmd *wire.Command) reply {
	lid, n, off := cmd.LogPage()
	return q.withData(cmd, n, func(b []byte) reply {
		clear(b)
		switch lid {
		case wire.LogDiscovery:
			if !c.discovery() {
				return replyInvalid
			}
			page := q.t.discoveryLog(c.hostNQN, q.conn.LocalAddr())
			if off < uint64(len(page)) {
				copy(b, page[off:])
			}
		case wire.LogError, wire.LogSMART, wire.LogFirmware, wire.LogChangedNS:
			// Nothing to report: no errors, no health events, no changes.
		default:
			return replyInvalid
		}
		return replyOK
	})
}

func (q *targetQueue) setFeature(c *targetCtrl, cmd *wire.Command) reply {
	v := cmd.CDW[1]
	switch cmd.FeatureID() {
	case wire.FeatNumQueues:
		if v&0xffff == 0xffff || v>>16 == 0xffff {
			return replyInvalid
		}
		n := min(int(v&0xffff), int(v>>16)) + 1
		c.mu.Lock()
		c.nIO = min(n, q.t.opts.MaxIOQueues)
		n = c.nIO
		c.mu.Unlock()
		return reply{result: uint64(n-1) | uint64(n-1)<<16, idx: -1}
	case wire.FeatKeepAliveTimer:
		c.mu.Lock()
		c.kato = time.Duration(v) * time.Millisecond
		c.mu.Unlock()
		return replyOK
	case wire.FeatAsyncEventCfg, wire.FeatVolatileWC, wire.FeatArbitration, wire.FeatPowerMgmt,
		wire.FeatIRQCoalesce, wire.FeatWriteAtomicNorm, wire.FeatHostIdentifier:
		return replyOK
	}
	return replyInvalid
}

func (q *targetQueue) getFeature(c *targetCtrl, cmd *wire.Command) reply {
	c.mu.Lock()
	defer c.mu.Unlock()
	switch cmd.FeatureID() {
	case wire.FeatNumQueues:
		return reply{result: uint64(c.nIO-1) | uint64(c.nIO-1)<<16, idx: -1}
	case wire.FeatVolatileWC:
		return reply{result: 1, idx: -1}
	case wire.FeatKeepAliveTimer:
		return reply{result: uint64(c.kato.Milliseconds()), idx: -1}
	case wire.FeatAsyncEventCfg, wire.FeatArbitration, wire.FeatPowerMgmt, wire.FeatIRQCoalesce, wire.FeatWriteAtomicNorm:
		return replyOK
	}
	return replyInvalid
}

// io runs an NVM command: Read, Write, Flush.
func (q *targetQueue) io(i int, c *targetCtrl, cmd *wire.Command, capsule []byte) reply {
	if cmd.Opcode == wire.NVMFlush {
		if cmd.NSID == 0xffffffff && c.sub != nil {
			for _, ns := range c.sub.ns {
				if ns.st.Sync() != nil {
					return replyWriteFault
				}
			}
			return replyOK
		}
		ns := c.namespace(cmd.NSID)
		if ns == nil {
			return replyNamespace
		}
		if ns.st.Sync() != nil {
			return replyWriteFault
		}
		return replyOK
	}
	if cmd.Opcode != wire.NVMRead && cmd.Opcode != wire.NVMWrite {
		return replyInvalidOp
	}
	ns := c.namespace(cmd.NSID)
	if ns == nil {
		return replyNamespace
	}
	shift := q.t.shift
	slba, nlb := cmd.SLBA(), uint64(cmd.NLB())
	if slba >= ns.blocks || nlb > ns.blocks-slba {
		return replyLBARange
	}
	n := int(nlb << shift)
	if n > targetMaxData {
		return replyInvalid
	}
	off := int64(slba << shift)
	if cmd.Opcode == wire.NVMRead {
		return q.withData(cmd, n, func(b []byte) reply {
			if int(cmd.SGL.Length) < n {
				return replyInvalid
			}
			if _, err := ns.st.ReadAt(b, off); err != nil {
				q.t.logf("nvmeof: namespace %d: read %d bytes at %d: %v", ns.id, n, off, err)
				return replyReadFailure
			}
			return replyOK
		})
	}
	data, idx, r, ok := q.dataOut(i, cmd, capsule, n)
	if !ok {
		return r
	}
	if _, err := ns.st.WriteAt(data, off); err != nil {
		q.t.logf("nvmeof: namespace %d: write %d bytes at %d: %v", ns.id, n, off, err)
		r = replyWriteFault
		r.idx = idx
		return r
	}
	return reply{idx: idx}
}
