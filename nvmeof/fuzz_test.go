package nvmeof_test

import (
	"bytes"
	"context"
	"encoding/binary"
	"fmt"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/rdmago/rdmago/nvmeof"
	"github.com/rdmago/rdmago/nvmeof/wire"
	"github.com/rdmago/rdmago/rdmacm"
	"github.com/rdmago/rdmago/verbs"
)

// FuzzTargetCommands plays a hostile host against a Target on loopback:
// it opens a queue with a bare RC connection and sends it whatever
// capsules the input makes, well formed or not, then checks that the
// target is still whole. The queue must answer each command or be
// disconnected (a held Asynchronous Event Request excepted), answer
// well-formed commands sent after the input's, let go of everything it
// had for the queue once the connection is closed (its goroutines and
// controllers), and serve a well-behaved host a write and read back.
//
// An input is a flags byte and then records. The flags:
//
//	bit 0  the queue is I/O queue 1 (else the admin queue)
//	bit 1  connect it first as a host does: Fabrics Connect on the admin
//	       queue, or for queue 1 an admin queue of its own connected
//	       (and enabled if bit 2) and the I/O queue's Connect naming it
//	bit 2  enable the controller (Property Set CC.EN) after the Connect
//	bit 3  send every command at once, then collect the responses
//	bit 4  close the connection right after the last command is sent
//	bit 5  post no receives for the responses
//	bit 6  the Connect's data goes in the capsule (else by RDMA READ)
//	bit 7  the Connect asks for a keep-alive timeout of 30 s (else none)
//
// A record is a control byte, a 64-byte command and its data. The
// control byte's low two bits say what happens to the command's SGL:
// fuzzMode* below. Its upper six bits s give the data's length: s×128
// bytes for s up to 61, 8192 (all the in-capsule data the target takes)
// for 62 and 8193 (one byte too many) for 63. The data is the record's
// next bytes, zeros past the input's end; it goes in the capsule, or
// for fuzzModeKeyed into the host's buffer where the SGL points. Each
// command's CID is its index.
func FuzzTargetCommands(f *testing.F) {
	for _, s := range fuzzSeeds() {
		f.Add(s)
	}
	var (
		once sync.Once
		fx   *fuzzFixture
	)
	f.Cleanup(func() {
		if fx != nil {
			fx.tg.Close()
		}
	})
	f.Fuzz(func(t *testing.T, data []byte) {
		once.Do(func() { fx = newFuzzFixture(t) })
		if fx == nil {
			t.Fatal("the target could not be set up (see the first input)")
		}
		// A hang anywhere (the test's own calls into the target's
		// package included) ends the process with every goroutine's
		// stack, for the fuzzer to keep the input.
		watchdog := time.AfterFunc(fuzzHang, func() {
			panic(fmt.Sprintf("FuzzTargetCommands: an input ran for %v\n\n%s", fuzzHang, strings.Join(goroutineStacks(), "\n\n")))
		})
		defer watchdog.Stop()
		in := parseFuzzInput(data)
		fx.play(t, in)
		fx.settle(t)
		fx.checkServes(t, data)
	})
}

const (
	fuzzNQN      = "nqn.2026-11.io.rdmago:fuzz"
	fuzzNSSize   = 1 << 20
	fuzzMaxCmds  = 16        // records played, at most
	fuzzBufLen   = 512 << 10 // the hostile host's data buffer
	fuzzSlotLen  = wire.CommandLen + 8192 + 64
	fuzzSlots    = fuzzMaxCmds + 8 // capsule slots: the records, the preamble, the follow-ups
	fuzzRecvs    = 16              // receives for responses
	fuzzRecvLen  = 64              // room for more than a response, to see one too long
	fuzzWait     = 2 * time.Second // for an answer
	fuzzSettle   = 10 * time.Second
	fuzzHang     = 60 * time.Second // an input's whole run, at most
	fuzzInlineOK = 62               // the length selector of 8192 bytes of in-capsule data
)

// What a record does with its command's SGL.
const (
	fuzzModeAsIs      = 0 // left as the input has it
	fuzzModeKeyed     = 1 // a keyed block in the host's buffer: at the input's address mod 64 KiB, of its length mod 256 KiB
	fuzzModeInCapsule = 2 // the record's in-capsule data, all of it
	fuzzModeBadKeyed  = 3 // the buffer's key, but the input's length and address (an offset from the buffer's)
)

// Flags of an input.
const (
	fuzzIOQueue = 1 << iota
	fuzzConnect
	fuzzEnable
	fuzzPipeline
	fuzzVanish
	fuzzNoRecvs
	fuzzConnectInCapsule
	fuzzKATO
)

type fuzzInput struct {
	flags byte
	recs  []fuzzRecord
}

type fuzzRecord struct {
	mode   byte
	cmd    [wire.CommandLen]byte
	inline []byte
}

func parseFuzzInput(b []byte) fuzzInput {
	var in fuzzInput
	if len(b) == 0 {
		return in
	}
	in.flags, b = b[0], b[1:]
	for len(b) > 0 && len(in.recs) < fuzzMaxCmds {
		ctl := b[0]
		b = b[1:]
		var r fuzzRecord
		r.mode = ctl & 3
		n := copy(r.cmd[:], b)
		b = b[n:]
		r.inline = make([]byte, inlineLen(ctl>>2))
		n = copy(r.inline, b)
		b = b[n:]
		in.recs = append(in.recs, r)
	}
	return in
}

func inlineLen(sel byte) int {
	switch sel {
	case fuzzInlineOK:
		return 8192
	case fuzzInlineOK + 1:
		return 8193
	}
	return int(sel) * 128
}

// appendRecord appends a record of cmd with its SGL in mode and inline
// as its in-capsule data (rounded up to what a length selector gives).
func appendRecord(b []byte, mode byte, cmd wire.Command, inline []byte) []byte {
	sel := byte((len(inline) + 127) / 128)
	if len(inline) > 61*128 {
		sel = fuzzInlineOK
	}
	if len(inline) > 8192 {
		sel = fuzzInlineOK + 1
	}
	var c [wire.CommandLen]byte
	cmd.Put(c[:])
	b = append(b, mode|sel<<2)
	b = append(b, c[:]...)
	b = append(b, inline...)
	return append(b, make([]byte, inlineLen(sel)-len(inline))...)
}

// fuzzSeeds are inputs a host could send and a few it should not.
func fuzzSeeds() [][]byte {
	keyed := wire.Keyed(0, 4096, 0, false)
	none := wire.Keyed(0, 0, 0, false)
	var cd [wire.ConnectDataLen]byte
	d := wire.ConnectData{CNTLID: 0xffff, SubNQN: fuzzNQN, HostNQN: "nqn.2026-11.io.rdmago:fuzzer"}
	d.Put(cd[:])
	var disc [wire.ConnectDataLen]byte
	d.SubNQN = wire.DiscoveryNQN
	d.Put(disc[:])
	withSGL := func(c wire.Command, s wire.SGL) wire.Command { c.SGL = s; return c }
	getFeature := wire.NewSetFeatures(0, wire.FeatNumQueues, 0)
	getFeature.Opcode = wire.AdminGetFeature
	aer := wire.Command{Opcode: wire.AdminAsyncEvent, Flags: wire.PSDTSGLMeta, SGL: none}
	abort := wire.Command{Opcode: wire.AdminAbort, Flags: wire.PSDTSGLMeta, SGL: none}
	data := bytes.Repeat([]byte("rdmago fuzz"), 4096/11+1)[:4096]

	var seeds [][]byte
	// The admin commands of a host's controller, enabled.
	b := []byte{fuzzConnect | fuzzEnable}
	for _, c := range []wire.Command{
		wire.NewIdentify(0, wire.CNSController, 0, keyed),
		wire.NewIdentify(0, wire.CNSNamespace, 1, keyed),
		wire.NewIdentify(0, wire.CNSActiveNSList, 0, keyed),
		wire.NewIdentify(0, wire.CNSNSDescList, 1, keyed),
		wire.NewGetLogPage(0, wire.LogSMART, 0xffffffff, 0, 512, keyed),
		wire.NewGetLogPage(0, wire.LogError, 0, 0, 4096, keyed),
	} {
		b = appendRecord(b, fuzzModeKeyed, c, nil)
	}
	for _, c := range []wire.Command{
		wire.NewPropertyGet(0, wire.PropCAP, 8), wire.NewPropertyGet(0, wire.PropVS, 4),
		wire.NewPropertyGet(0, wire.PropCSTS, 4), wire.NewPropertySet(0, wire.PropCC, 4, wire.CCEnable),
		wire.NewKeepAlive(0), wire.NewSetFeatures(0, wire.FeatNumQueues, 3<<16|3),
		wire.NewSetFeatures(0, wire.FeatKeepAliveTimer, 5000), getFeature, aer, aer, abort,
	} {
		b = appendRecord(b, fuzzModeAsIs, withSGL(c, none), nil)
	}
	seeds = append(seeds, b)

	// A controller with a keep-alive timeout, told another.
	b = []byte{fuzzConnect | fuzzEnable | fuzzKATO}
	for _, c := range []wire.Command{wire.NewKeepAlive(0), wire.NewSetFeatures(0, wire.FeatKeepAliveTimer, 1000), wire.NewKeepAlive(0)} {
		b = appendRecord(b, fuzzModeAsIs, withSGL(c, none), nil)
	}
	seeds = append(seeds, b)

	// Reads and writes on an I/O queue: keyed and in the capsule.
	b = []byte{fuzzIOQueue | fuzzConnect | fuzzEnable}
	b = appendRecord(b, fuzzModeKeyed, wire.NewIO(wire.NVMWrite, 0, 1, 8, 8, keyed), nil)
	b = appendRecord(b, fuzzModeKeyed, wire.NewIO(wire.NVMRead, 0, 1, 8, 8, keyed), nil)
	b = appendRecord(b, fuzzModeInCapsule, wire.NewIO(wire.NVMWrite, 0, 1, 16, 8, wire.SGL{}), data)
	b = appendRecord(b, fuzzModeAsIs, withSGL(wire.NewFlush(0, 1), none), nil)
	b = appendRecord(b, fuzzModeKeyed, wire.NewIO(wire.NVMRead, 0, 1, 16, 8, wire.Keyed(4096, 4096, 0, false)), nil)
	b = appendRecord(b, fuzzModeKeyed, wire.NewIO(wire.NVMRead, 0, 1, 0, 256, wire.Keyed(0, 128<<10, 0, false)), nil)
	seeds = append(seeds, b)

	// The same, all at once, and on a connection that then goes away.
	seeds = append(seeds, append([]byte{b[0] | fuzzPipeline}, b[1:]...))
	seeds = append(seeds, append([]byte{b[0] | fuzzPipeline | fuzzVanish}, b[1:]...))
	seeds = append(seeds, append([]byte{b[0] | fuzzNoRecvs}, b[1:]...))
	seeds = append(seeds, append([]byte{b[0] | fuzzConnectInCapsule}, b[1:]...))

	// A Connect of the input's own, in the capsule and by RDMA READ, then
	// what an admin queue takes before and after CC.EN.
	b = []byte{0}
	b = appendRecord(b, fuzzModeKeyed, wire.NewIdentify(0, wire.CNSController, 0, keyed), nil)
	b = appendRecord(b, fuzzModeInCapsule, wire.NewConnect(0, 0, 7, 0, wire.SGL{}), cd[:])
	b = appendRecord(b, fuzzModeInCapsule, wire.NewConnect(0, 0, 7, 0, wire.SGL{}), cd[:])
	b = appendRecord(b, fuzzModeKeyed, wire.NewIdentify(0, wire.CNSController, 0, keyed), nil)
	b = appendRecord(b, fuzzModeAsIs, withSGL(wire.NewPropertySet(0, wire.PropCC, 4, wire.CCEnable), none), nil)
	b = appendRecord(b, fuzzModeKeyed, wire.NewIdentify(0, wire.CNSController, 0, keyed), nil)
	b = appendRecord(b, fuzzModeAsIs, withSGL(wire.NewPropertySet(0, wire.PropCC, 4, wire.CCShutdownMask&(1<<14)), none), nil)
	b = appendRecord(b, fuzzModeAsIs, withSGL(wire.NewDisconnect(0), none), nil)
	seeds = append(seeds, b)
	b = []byte{0}
	b = appendRecord(b, fuzzModeKeyed, wire.NewConnect(0, 0, 7, 0, wire.Keyed(0, wire.ConnectDataLen, 0, false)), cd[:])
	seeds = append(seeds, b)

	// The discovery controller and its log page.
	b = []byte{0}
	b = appendRecord(b, fuzzModeInCapsule, wire.NewConnect(0, 0, 7, 0, wire.SGL{}), disc[:])
	b = appendRecord(b, fuzzModeAsIs, withSGL(wire.NewPropertySet(0, wire.PropCC, 4, wire.CCEnable), none), nil)
	b = appendRecord(b, fuzzModeKeyed, wire.NewGetLogPage(0, wire.LogDiscovery, 0, 0, 4096, keyed), nil)
	b = appendRecord(b, fuzzModeKeyed, wire.NewGetLogPage(0, wire.LogDiscovery, 0, 1024, 1024, keyed), nil)
	seeds = append(seeds, b)

	// What a host should not send: keys and offsets that are not its,
	// data past the capsule, a capsule too large.
	b = []byte{fuzzIOQueue | fuzzConnect | fuzzEnable}
	b = appendRecord(b, fuzzModeAsIs, wire.NewIO(wire.NVMRead, 0, 1, 0, 1, wire.Keyed(0x1000, 512, 0x1234, false)), nil)
	seeds = append(seeds, b)
	b = []byte{fuzzIOQueue | fuzzConnect | fuzzEnable}
	b = appendRecord(b, fuzzModeBadKeyed, wire.NewIO(wire.NVMWrite, 0, 1, 0, 8, wire.Keyed(fuzzBufLen-100, 4096, 0, false)), nil)
	seeds = append(seeds, b)
	b = []byte{fuzzIOQueue | fuzzConnect | fuzzEnable}
	b = appendRecord(b, fuzzModeAsIs, wire.NewIO(wire.NVMWrite, 0, 1, 0, 8, wire.InCapsule(100, 4096)), data)
	b = appendRecord(b, fuzzModeAsIs, wire.NewIO(wire.NVMWrite, 0, 1, 0, 8, wire.InCapsule(0, 4096)), data[:512])
	b = appendRecord(b, fuzzModeAsIs, wire.NewIO(wire.NVMWrite, 0, 1, 4000, 8, wire.InCapsule(0, 4096)), data)
	b = appendRecord(b, fuzzModeAsIs, wire.NewIO(0x55, 0, 1, 0, 8, wire.InCapsule(0, 4096)), data)
	b = appendRecord(b, fuzzModeInCapsule, wire.NewIO(wire.NVMWrite, 0, 1, 0, 1, wire.SGL{}), make([]byte, 8193))
	seeds = append(seeds, b)
	return seeds
}

// fuzzFixture is the target the inputs of a process play against, and
// what it told of its controllers.
type fuzzFixture struct {
	tg       *nvmeof.Target
	addr     string
	baseline int // the process's goroutines in package nvmeof with the target idle

	mu   sync.Mutex
	live map[uint16]bool // controllers made and not yet ended
	logs []string        // the target's last messages
}

func newFuzzFixture(t *testing.T) *fuzzFixture {
	fx := &fuzzFixture{live: map[uint16]bool{}}
	tg, err := nvmeof.NewTarget(&nvmeof.TargetOptions{Logf: fx.logf})
	if err != nil {
		t.Fatal(err)
	}
	if err := tg.AddSubsystem(fuzzNQN, nvmeof.NewMemory(fuzzNSSize)); err != nil {
		t.Fatal(err)
	}
	a, err := tg.Listen("127.0.0.1:0")
	if err != nil {
		tg.Close()
		t.Fatal(err)
	}
	fx.tg, fx.addr = tg, a.String()
	// What other tests left may still be ending: the baseline is taken
	// once the count holds still.
	fx.baseline = nvmeofGoroutines()
	for deadline := time.Now().Add(2 * time.Second); time.Now().Before(deadline); {
		time.Sleep(50 * time.Millisecond)
		n := nvmeofGoroutines()
		if n == fx.baseline {
			break
		}
		fx.baseline = min(fx.baseline, n)
	}
	return fx
}

// logf records the target's messages, and from them the controllers it
// makes and ends (the messages' formats are Target's).
func (fx *fuzzFixture) logf(format string, args ...any) {
	fx.mu.Lock()
	defer fx.mu.Unlock()
	if len(args) > 0 {
		if id, ok := args[0].(uint16); ok && strings.HasPrefix(format, "nvmeof: controller %d ") {
			switch {
			case strings.HasSuffix(format, " from %v"):
				fx.live[id] = true
			case strings.HasSuffix(format, " ended"):
				delete(fx.live, id)
			}
		}
	}
	fx.logs = append(fx.logs, fmt.Sprintf(format, args...))
	if len(fx.logs) > 40 {
		fx.logs = fx.logs[len(fx.logs)-40:]
	}
}

func (fx *fuzzFixture) state() (live []uint16, logs string) {
	fx.mu.Lock()
	defer fx.mu.Unlock()
	for id := range fx.live {
		live = append(live, id)
	}
	return live, strings.Join(fx.logs, "\n")
}

// nvmeofGoroutines counts the goroutines running, or started by, package
// nvmeof's code.
func nvmeofGoroutines() int {
	n := 0
	for _, g := range goroutineStacks() {
		if strings.Contains(g, "/rdmago/nvmeof.") {
			n++
		}
	}
	return n
}

func goroutineStacks() []string {
	buf := make([]byte, 1<<20)
	for {
		n := runtime.Stack(buf, true)
		if n < len(buf) {
			return strings.Split(string(buf[:n]), "\n\n")
		}
		buf = make([]byte, 2*len(buf))
	}
}

// settle waits until the target let go of what the input's host and the
// last well-behaved one had: its goroutines for their queues end, and
// their controllers.
func (fx *fuzzFixture) settle(t *testing.T) {
	t.Helper()
	deadline := time.Now().Add(fuzzSettle)
	for {
		n := nvmeofGoroutines()
		live, logs := fx.state()
		if n <= fx.baseline && len(live) == 0 {
			return
		}
		if time.Now().After(deadline) {
			var gs []string
			for _, g := range goroutineStacks() {
				if strings.Contains(g, "/rdmago/nvmeof.") {
					gs = append(gs, g)
				}
			}
			t.Fatalf("%v after the hosts closed their connections, the target still has %d goroutines (%d when idle) and controllers %v\ntarget log:\n%s\ngoroutines:\n%s",
				fuzzSettle, n, fx.baseline, live, logs, strings.Join(gs, "\n\n"))
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// checkServes checks that a well-behaved host still connects to the
// target and writes and reads back a block.
func (fx *fuzzFixture) checkServes(t *testing.T, input []byte) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	c, err := nvmeof.Dial(ctx, fx.addr, fuzzNQN, &nvmeof.Options{IOQueues: 1, QueueDepth: 4, CommandTimeout: 5 * time.Second})
	if err != nil {
		_, logs := fx.state()
		t.Fatalf("after the input, a well-behaved host cannot connect: %v\ntarget log:\n%s", err, logs)
	}
	defer c.Close()
	ns, err := c.Namespace(ctx, 1)
	if err != nil {
		t.Fatalf("after the input, a well-behaved host cannot open namespace 1: %v", err)
	}
	p := make([]byte, 4096)
	for i := range p {
		p[i] = byte(i) ^ byte(len(input))
	}
	const off = fuzzNSSize - 8192
	if _, err := ns.WriteAtContext(ctx, p, off); err != nil {
		t.Fatalf("after the input, a well-behaved host's write fails: %v", err)
	}
	got := make([]byte, len(p))
	if _, err := ns.ReadAtContext(ctx, got, off); err != nil {
		t.Fatalf("after the input, a well-behaved host's read fails: %v", err)
	}
	if !bytes.Equal(got, p) {
		t.Fatal("after the input, a well-behaved host reads back something else than it wrote")
	}
}

// play connects the input's queue and sends it the input's commands.
func (fx *fuzzFixture) play(t *testing.T, in fuzzInput) {
	t.Helper()
	recvs := in.flags&fuzzNoRecvs == 0
	qid := uint16(in.flags & fuzzIOQueue)
	connect := in.flags&fuzzConnect != 0
	var cntlid uint16 = 0xffff
	if qid != 0 && connect {
		// The I/O queue's controller: an admin queue of its own.
		admin := dialRaw(t, fx.addr, 0, true)
		defer admin.close()
		id, ok := admin.connect(t, 0xffff, in.flags, in.flags&fuzzEnable != 0)
		if !ok {
			return // the admin queue was disconnected
		}
		cntlid = id
	}
	q := dialRaw(t, fx.addr, qid, recvs)
	defer q.close()
	if connect && recvs {
		if _, ok := q.connect(t, cntlid, in.flags, qid == 0 && in.flags&fuzzEnable != 0); !ok {
			return
		}
	}
	var waitFor []uint16
	for i, r := range in.recs {
		cid := uint16(i)
		var c [wire.CommandLen]byte
		copy(c[:], r.cmd[:])
		binary.LittleEndian.PutUint16(c[2:], cid)
		inline := r.inline
		if r.mode == fuzzModeKeyed {
			// The data goes where the SGL points, for the target to read.
			s := q.patchSGL(c[24:40], r.mode, 0)
			copy(q.bufMR.Buf()[s.Addr-q.bufMR.Addr():], inline)
			inline = nil
		} else {
			q.patchSGL(c[24:40], r.mode, len(inline))
		}
		if q.send(c[:], inline) != nil {
			return // the connection failed
		}
		// An Asynchronous Event Request on the admin queue may be held
		// for good: it is not waited for.
		if !recvs || qid == 0 && c[0] == wire.AdminAsyncEvent {
			continue
		}
		if in.flags&fuzzPipeline != 0 {
			waitFor = append(waitFor, cid)
			continue
		}
		switch q.await(cid) {
		case awaitFailed:
			return
		case awaitTimeout:
			q.followUp(t, fmt.Sprintf("command %d (% x) went unanswered for %v", i, c[:], fuzzWait))
			return
		}
	}
	if in.flags&fuzzVanish != 0 || !recvs {
		return // the connection closes with commands outstanding
	}
	for _, cid := range waitFor {
		switch q.await(cid) {
		case awaitFailed:
			return
		case awaitTimeout:
			q.followUp(t, fmt.Sprintf("command %d went unanswered for %v", cid, fuzzWait))
			return
		}
	}
	q.followUp(t, "")
}

// rawQueue is the hostile host's queue: an RC connection on which
// capsules go as the test makes them, a data buffer the target may
// read and write by its key, and receives for the responses.
type rawQueue struct {
	t     *testing.T
	qid   uint16
	conn  *rdmacm.Conn
	recvs bool

	cmdMR  *verbs.MR // fuzzSlots capsules of fuzzSlotLen bytes
	bufMR  *verbs.MR // the data buffer
	respMR *verbs.MR // fuzzRecvs receives of fuzzRecvLen bytes
	mrs    []*verbs.MR
	slot   int // next capsule slot

	down      context.Context // done once the connection is disconnected
	gone      context.CancelFunc
	stopWatch context.CancelFunc
	watched   chan struct{}

	sent    map[uint16]bool // the CIDs of the capsules sent
	answers map[uint16]wire.Completion
	err     error // why the connection failed, as its completions say
	closed  bool
}

func dialRaw(t *testing.T, addr string, qid uint16, recvs bool) *rawQueue {
	t.Helper()
	q := &rawQueue{t: t, qid: qid, recvs: recvs, sent: map[uint16]bool{}, answers: map[uint16]wire.Completion{}, watched: make(chan struct{})}
	reg := func(c *rdmacm.Conn, n int, access verbs.AccessFlags) (*verbs.MR, error) {
		mr, err := c.PD.RegMR(make([]byte, n), access)
		if err == nil {
			q.mrs = append(q.mrs, mr)
		}
		return mr, err
	}
	opts := &rdmacm.Options{
		Cap:         verbs.QPCap{MaxSendWR: 2 * fuzzSlots, MaxRecvWR: fuzzRecvs, MaxSendSGE: 1, MaxRecvSGE: 1},
		SharedCQ:    true,
		PrivateData: wire.CMReq{QID: qid, HRQSize: 8, HSQSize: 7}.Bytes(),
		Setup: func(c *rdmacm.Conn) error {
			var err error
			if q.cmdMR, err = reg(c, fuzzSlots*fuzzSlotLen, verbs.AccessLocalWrite); err != nil {
				return err
			}
			if q.bufMR, err = reg(c, fuzzBufLen, verbs.AccessLocalWrite|verbs.AccessRemoteRead|verbs.AccessRemoteWrite); err != nil {
				return err
			}
			if q.respMR, err = reg(c, fuzzRecvs*fuzzRecvLen, verbs.AccessLocalWrite); err != nil {
				return err
			}
			if !recvs {
				return nil
			}
			for i := range fuzzRecvs {
				if err := c.QP.PostRecv([]verbs.RecvWR{{WRID: uint64(i), SGList: []verbs.SGE{q.respMR.SGE(i*fuzzRecvLen, fuzzRecvLen)}}}); err != nil {
					return err
				}
			}
			return nil
		},
		Undo: func(*rdmacm.Conn) { q.dereg() },
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	c, err := rdmacm.Dial(ctx, addr, opts)
	if err != nil {
		t.Fatalf("the target refuses a well-formed connection request for queue %d: %v", qid, err)
	}
	q.conn = c
	for i := range q.bufMR.Buf() {
		q.bufMR.Buf()[i] = byte(i * 13)
	}
	down, gone := context.WithCancel(context.Background())
	watch, stop := context.WithCancel(context.Background())
	q.down, q.gone, q.stopWatch = down, gone, stop
	go func() {
		defer close(q.watched)
		if c.WaitDisconnect(watch) == nil {
			gone()
		}
	}()
	return q
}

func (q *rawQueue) dereg() {
	for _, mr := range q.mrs {
		mr.Dereg()
	}
	q.mrs = nil
}

// close disconnects and frees the connection.
func (q *rawQueue) close() {
	if q.closed {
		return
	}
	q.closed = true
	q.conn.ID.Disconnect()
	q.stopWatch()
	<-q.watched
	q.gone()
	q.dereg()
	q.conn.Close()
}

// patchSGL rewrites the SGL descriptor b as mode says, for inline bytes
// of in-capsule data, and returns it.
func (q *rawQueue) patchSGL(b []byte, mode byte, inline int) wire.SGL {
	s := wire.ParseSGL(b)
	switch mode {
	case fuzzModeKeyed:
		s = wire.SGL{Addr: q.bufMR.Addr() + s.Addr&0xffff, Length: s.Length & 0x3ffff, Key: q.bufMR.RKey(),
			Type: wire.SGLKeyedBlock, Subtype: s.Subtype}
	case fuzzModeInCapsule:
		s = wire.InCapsule(0, uint32(inline))
	case fuzzModeBadKeyed:
		s = wire.SGL{Addr: q.bufMR.Addr() + s.Addr, Length: s.Length & 0xffffff, Key: q.bufMR.RKey(),
			Type: wire.SGLKeyedBlock, Subtype: s.Subtype}
	default:
		return s
	}
	s.Put(b)
	return s
}

// send sends a capsule: cmd and inline data after it. It fails once the
// connection did.
func (q *rawQueue) send(cmd, inline []byte) error {
	q.poll()
	if q.err != nil {
		return q.err
	}
	i := q.slot % fuzzSlots
	q.slot++
	b := q.cmdMR.Buf()[i*fuzzSlotLen : (i+1)*fuzzSlotLen]
	n := copy(b, cmd)
	n += copy(b[n:], inline)
	q.sent[binary.LittleEndian.Uint16(cmd[2:])] = true
	err := q.conn.QP.PostSend([]verbs.SendWR{{WRID: 1 << 32, Opcode: verbs.WRSend, SendFlags: verbs.SendSignaled,
		SGList: []verbs.SGE{q.cmdMR.SGE(i*fuzzSlotLen, n)}}})
	if err != nil {
		q.err = fmt.Errorf("ibv_post_send: %w", err)
	}
	return q.err
}

// poll takes what the CQ holds: responses, and failures.
func (q *rawQueue) poll() {
	var wcs [16]verbs.WC
	for {
		n, err := q.conn.RecvCQ.Poll(wcs[:])
		if err != nil {
			if q.err == nil {
				q.err = err
			}
			return
		}
		for _, wc := range wcs[:n] {
			if wc.Status != verbs.WCSuccess {
				if q.err == nil {
					q.err = fmt.Errorf("a %v completion: %v", wc.Opcode, wc.Status)
				}
				continue
			}
			if wc.WRID >= fuzzRecvs {
				continue // a capsule's send
			}
			i := int(wc.WRID)
			comp, _ := wire.ParseCompletion(q.respMR.Buf()[i*fuzzRecvLen:])
			if wc.ByteLen != wire.CompletionLen {
				q.t.Errorf("queue %d: a response of %d bytes", q.qid, wc.ByteLen)
			}
			if !q.sent[comp.CID] {
				q.t.Errorf("queue %d: a response for command %d, which was not sent: %+v", q.qid, comp.CID, comp)
			}
			if _, dup := q.answers[comp.CID]; dup {
				q.t.Errorf("queue %d: command %d answered twice: %+v", q.qid, comp.CID, comp)
			}
			if comp.SQID != q.qid {
				q.t.Errorf("queue %d: a response for queue %d", q.qid, comp.SQID)
			}
			q.answers[comp.CID] = comp
			if err := q.conn.QP.PostRecv([]verbs.RecvWR{{WRID: wc.WRID, SGList: []verbs.SGE{q.respMR.SGE(i*fuzzRecvLen, fuzzRecvLen)}}}); err != nil && q.err == nil {
				q.err = fmt.Errorf("ibv_post_recv: %w", err)
			}
		}
		if n < len(wcs) {
			return
		}
	}
}

// What await saw.
const (
	awaitAnswered = iota
	awaitFailed   // the connection failed or was disconnected
	awaitTimeout
)

// await waits for command cid's response, for the connection's failure
// or for fuzzWait to pass.
func (q *rawQueue) await(cid uint16) int {
	ctx, cancel := context.WithTimeout(q.down, fuzzWait)
	defer cancel()
	for {
		q.poll()
		switch {
		case q.hasAnswer(cid):
			return awaitAnswered
		case q.err != nil || q.down.Err() != nil:
			return awaitFailed
		}
		if q.conn.RecvCQ.Wait(ctx) != nil {
			q.poll()
			switch {
			case q.hasAnswer(cid):
				return awaitAnswered
			case q.err != nil || q.down.Err() != nil:
				return awaitFailed
			}
			return awaitTimeout
		}
	}
}

func (q *rawQueue) hasAnswer(cid uint16) bool {
	_, ok := q.answers[cid]
	return ok
}

// exec sends a well-formed command and waits for its response; ok is
// false if the connection failed first. A target that neither answers
// nor disconnects fails the test.
func (q *rawQueue) exec(t *testing.T, cmd wire.Command, inline []byte) (comp wire.Completion, ok bool) {
	t.Helper()
	cmd.CID = 0x8000 + uint16(q.slot)
	var c [wire.CommandLen]byte
	cmd.Put(c[:])
	if q.send(c[:], inline) != nil {
		return wire.Completion{}, false
	}
	switch q.await(cmd.CID) {
	case awaitFailed:
		return wire.Completion{}, false
	case awaitTimeout:
		t.Fatalf("queue %d: the target stopped answering: a well-formed command (% x) went unanswered for %v", q.qid, c[:], fuzzWait)
	}
	return q.answers[cmd.CID], true
}

// connect sends the queue's Fabrics Connect for controller cntlid (0xffff
// on the admin queue), its data in the capsule or by RDMA READ and with
// a keep-alive timeout or none as the input's flags say, and enables the
// controller if asked. It returns the controller's ID.
func (q *rawQueue) connect(t *testing.T, cntlid uint16, flags byte, enable bool) (uint16, bool) {
	t.Helper()
	d := wire.ConnectData{HostID: [16]byte{1}, CNTLID: cntlid, SubNQN: fuzzNQN, HostNQN: "nqn.2026-11.io.rdmago:fuzzer"}
	var b [wire.ConnectDataLen]byte
	d.Put(b[:])
	var kato uint32
	if flags&fuzzKATO != 0 {
		kato = 30000
	}
	cmd := wire.NewConnect(0, q.qid, 7, kato, wire.InCapsule(0, wire.ConnectDataLen))
	inline := b[:]
	if flags&fuzzConnectInCapsule == 0 {
		copy(q.bufMR.Buf(), b[:])
		cmd.SGL = wire.Keyed(q.bufMR.Addr(), wire.ConnectDataLen, q.bufMR.RKey(), false)
		inline = nil
	}
	comp, ok := q.exec(t, cmd, inline)
	if !ok {
		return 0, false
	}
	if !comp.OK() {
		// For an I/O queue, the controller may not be enabled: the input
		// goes on with a queue that has none.
		if q.qid == 0 {
			t.Fatalf("a well-formed Connect of the admin queue failed: %s", wire.StatusString(comp.Status))
		}
		return 0, true
	}
	if enable {
		en, ok := q.exec(t, wire.NewPropertySet(0, wire.PropCC, 4, wire.CCEnable), nil)
		if !ok {
			return 0, false
		}
		if !en.OK() {
			t.Fatalf("a well-formed Property Set of CC.EN failed: %s", wire.StatusString(en.Status))
		}
	}
	return uint16(comp.Result), true
}

// followUp sends the queue well-formed commands after the input's: they
// must be answered (with an error, if the input left the queue so) or
// the connection must end. why, if not empty, says what the input's
// commands went through.
func (q *rawQueue) followUp(t *testing.T, why string) {
	t.Helper()
	var cmds []wire.Command
	keyed := wire.Keyed(q.bufMR.Addr(), 4096, q.bufMR.RKey(), false)
	if q.qid == 0 {
		k := wire.NewKeepAlive(0)
		k.SGL = wire.Keyed(0, 0, 0, false)
		cmds = []wire.Command{k, wire.NewIdentify(0, wire.CNSController, 0, keyed)}
	} else {
		cmds = []wire.Command{wire.NewIO(wire.NVMRead, 0, 1, 0, 8, keyed), wire.NewIO(wire.NVMWrite, 0, 1, 0, 8, keyed)}
	}
	for _, cmd := range cmds {
		var c [wire.CommandLen]byte
		cmd.CID = 0x8000 + uint16(q.slot)
		cmd.Put(c[:])
		if q.send(c[:], nil) != nil {
			return
		}
		switch q.await(cmd.CID) {
		case awaitFailed:
			return
		case awaitTimeout:
			if why != "" {
				why = ", after " + why
			}
			t.Fatalf("queue %d: the target stopped answering: a well-formed command (% x) went unanswered for %v%s",
				q.qid, c[:], fuzzWait, why)
		}
	}
	if why != "" {
		// The queue answers, but left a command of the input without an
		// answer: a host would time it out.
		t.Logf("queue %d: %s, but the queue still answers", q.qid, why)
	}
}
