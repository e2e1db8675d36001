package nvmeof

import (
	"bytes"
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"net"
	"net/netip"
	"os"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/rdmago/rdmago/nvmeof/wire"
)

// DefaultPort is NVMe over Fabrics' port (trsvcid), the kernel's
// default.
const DefaultPort = "4420"

// Options configure a host's connection to a controller (the options
// of /dev/nvme-fabrics and nvme connect). The zero value, or nil, is
// usable.
type Options struct {
	// HostNQN names the host (hostnqn); empty means the one in
	// /etc/nvme/hostnqn, as nvme-cli and the kernel's tools take it, or
	// else a UUID-based NQN derived from /etc/machine-id (random if
	// neither is there), so that a host keeps its name across runs.
	HostNQN string
	// HostID identifies the host (hostid); zero means /etc/nvme/hostid,
	// or else the UUID of the default host NQN.
	HostID [16]byte
	// IOQueues is how many I/O queues to ask for (nr_io_queues); 0 means
	// as many as CPUs, at most 4. The controller may grant fewer.
	IOQueues int
	// QueueDepth is the entries of each I/O queue (queue_size); 0 means
	// 32. It is capped by what the controller supports.
	QueueDepth int
	// KeepAlive is the keep-alive timeout asked of the controller (kato):
	// the host sends a Keep Alive every half of it, and a Keep Alive
	// unanswered for the whole of it fails the controller (the target is
	// gone). 0 means 5 s, Linux's default; a negative value asks for none.
	KeepAlive time.Duration
	// CommandTimeout bounds each command (the kernel's io_timeout); 0
	// means 30 s. A command that overruns it fails its queue, and with
	// it the controller, as a target that stops answering must.
	CommandTimeout time.Duration
	// LocalAddr is the address to connect from; zero means the one
	// address resolution picks.
	LocalAddr netip.AddrPort
	// StaticKeys makes every command name its data with its queue's one
	// remote key, valid for the life of the queue. By default, on devices
	// with type 2 memory windows, each command's data is named by a window
	// bound for it alone, with only the access the command needs, and the
	// target invalidates it with its response (SEND_WITH_INVALIDATE), as
	// Linux's host does with its per-command registrations: the target
	// can reach no other memory, and no memory after the command.
	StaticKeys bool
}

func (o *Options) orDefault() Options {
	var d Options
	if o != nil {
		d = *o
	}
	if d.HostNQN == "" || d.HostID == [16]byte{} {
		nqn, id := processHost()
		if d.HostNQN == "" {
			d.HostNQN = nqn
		}
		if d.HostID == [16]byte{} {
			d.HostID = id
		}
	}
	if d.IOQueues <= 0 {
		d.IOQueues = min(runtime.NumCPU(), 4)
	}
	if d.QueueDepth <= 0 {
		d.QueueDepth = 32
	}
	if d.KeepAlive == 0 {
		d.KeepAlive = 5 * time.Second
	}
	if d.CommandTimeout <= 0 {
		d.CommandTimeout = 30 * time.Second
	}
	return d
}

// processHost is the host's default NQN and ID, found once.
var processHost = sync.OnceValues(func() (string, [16]byte) {
	var id [16]byte
	if m, err := os.ReadFile("/etc/machine-id"); err == nil && len(bytes.TrimSpace(m)) > 0 {
		sum := sha256.Sum256(append([]byte("rdmago nvmeof host "), bytes.TrimSpace(m)...))
		copy(id[:], sum[:])
	} else {
		rand.Read(id[:])
	}
	id[6] = id[6]&0x0f | 0x40 // a version 4 UUID's bits
	id[8] = id[8]&0x3f | 0x80
	nqn := fmt.Sprintf("nqn.2014-08.org.nvmexpress:uuid:%x-%x-%x-%x-%x", id[:4], id[4:6], id[6:8], id[8:10], id[10:])
	if b, err := os.ReadFile("/etc/nvme/hostnqn"); err == nil {
		if s := strings.TrimSpace(string(b)); s != "" && len(s) < wire.NQNLen {
			nqn = s
		}
	}
	if b, err := os.ReadFile("/etc/nvme/hostid"); err == nil {
		if u, ok := parseUUID(strings.TrimSpace(string(b))); ok {
			id = u
		}
	}
	return nqn, id
})

// parseUUID reads a UUID in its 8-4-4-4-12 form.
func parseUUID(s string) ([16]byte, bool) {
	var u [16]byte
	h := strings.ReplaceAll(s, "-", "")
	if len(s) != 36 || len(h) != 32 {
		return u, false
	}
	if _, err := hex.Decode(u[:], []byte(h)); err != nil {
		return u, false
	}
	return u, true
}

// Limits of the host's queues.
const (
	adminDepth   = 16
	adminMaxData = 16 << 10
	ioMaxData    = 128 << 10 // what one command moves, at most
	maxQueueSize = 128
)

// Controller is a host's connection to an NVMe controller over RDMA:
// its admin queue and I/O queues (struct nvme_ctrl of Linux's
// nvme-rdma). Its methods may be called from several goroutines.
type Controller struct {
	admin  *hostQueue
	io     []*hostQueue
	info   wire.Controller
	subnqn string
	opts   Options
	next   atomic.Uint32

	stopKA    context.CancelFunc // ends keepAlive, and the Keep Alive it waits for
	kaCtx     context.Context
	kaDone    chan struct{}
	closeOnce sync.Once
}

// withPort adds NVMe over Fabrics' port to an address that has none.
func withPort(addr string) string {
	if _, _, err := net.SplitHostPort(addr); err == nil {
		return addr
	}
	if a, err := netip.ParseAddr(addr); err == nil && a.Is6() {
		return "[" + addr + "]:" + DefaultPort
	}
	return net.JoinHostPort(addr, DefaultPort)
}

// Dial connects to the subsystem subnqn at addr ("host:port", or a host
// alone for port 4420) as Linux's host does when /dev/nvme-fabrics is
// written transport=rdma,traddr=...,nqn=...: it connects the admin
// queue, enables the controller, identifies it, asks for I/O queues and
// connects them. opts may be nil.
func Dial(ctx context.Context, addr, subnqn string, opts *Options) (*Controller, error) {
	if subnqn == "" || len(subnqn) > wire.NQNLen-1 {
		return nil, fmt.Errorf("nvmeof: subsystem NQN %q: must be 1 to %d bytes", subnqn, wire.NQNLen-1)
	}
	o := opts.orDefault()
	addr = withPort(addr)
	c := &Controller{subnqn: subnqn, opts: o}
	kato := uint32(0)
	if o.KeepAlive > 0 {
		kato = uint32(o.KeepAlive.Milliseconds())
	}
	var err error
	if c.admin, err = dialQueue(ctx, addr, 0, adminDepth, adminMaxData, &o); err != nil {
		return nil, err
	}
	fail := func(err error) (*Controller, error) {
		c.closeQueues()
		return nil, err
	}
	res, err := c.connect(ctx, c.admin, 0xffff, kato)
	if err != nil {
		return fail(err)
	}
	cntlid := uint16(res)
	if err := c.enable(ctx); err != nil {
		return fail(err)
	}
	if c.info, err = c.identifyController(ctx); err != nil {
		return fail(err)
	}
	if c.info.CNTLID != cntlid {
		return fail(fmt.Errorf("nvmeof: Connect gave controller %d, Identify says %d", cntlid, c.info.CNTLID))
	}
	if subnqn != wire.DiscoveryNQN {
		if err := c.connectIO(ctx, addr, cntlid); err != nil {
			return fail(err)
		}
	}
	c.kaCtx, c.stopKA = context.WithCancel(context.Background())
	c.kaDone = make(chan struct{})
	go c.keepAlive()
	return c, nil
}

// connect sends the Fabrics Connect that binds q to the controller
// (cntlid 0xffff on the admin queue: any) and returns its result.
func (c *Controller) connect(ctx context.Context, q *hostQueue, cntlid uint16, kato uint32) (uint64, error) {
	d := wire.ConnectData{HostID: c.opts.HostID, CNTLID: cntlid, SubNQN: c.subnqn, HostNQN: c.opts.HostNQN}
	var b [wire.ConnectDataLen]byte
	d.Put(b[:])
	comp, err := c.execOn(ctx, q, wire.NewConnect(0, q.qid, uint16(q.depth-1), kato, wire.SGL{}), toController, b[:], nil)
	if err != nil {
		return 0, fmt.Errorf("nvmeof: connect queue %d to %s: %w", q.qid, c.subnqn, err)
	}
	return comp.Result, nil
}

var errCommandTimeout = errors.New("nvmeof: command timeout")

func (c *Controller) execOn(ctx context.Context, q *hostQueue, cmd wire.Command, dir int, out, in []byte) (wire.Completion, error) {
	tctx, cancel := context.WithTimeoutCause(ctx, c.opts.CommandTimeout, errCommandTimeout)
	defer cancel()
	comp, err := q.exec(tctx, cmd, dir, out, in)
	if err != nil && ctx.Err() == nil && errors.Is(context.Cause(tctx), errCommandTimeout) {
		// Not the caller's deadline but the command's own: the target
		// stopped answering.
		err = fmt.Errorf("%w: a command went unanswered for %v", ErrDisconnected, c.opts.CommandTimeout)
		q.fail(err)
	}
	return comp, err
}

func (c *Controller) adminCmd(ctx context.Context, cmd wire.Command, dir int, out, in []byte) (wire.Completion, error) {
	return c.execOn(ctx, c.admin, cmd, dir, out, in)
}

// Property returns the controller register at off (wire.PropCAP, ...)
// of size 4 or 8 bytes (Fabrics Property Get).
func (c *Controller) Property(ctx context.Context, off uint32, size int) (uint64, error) {
	comp, err := c.adminCmd(ctx, wire.NewPropertyGet(0, off, size), noData, nil, nil)
	return comp.Result, err
}

func (c *Controller) setProperty(ctx context.Context, off uint32, v uint32) error {
	_, err := c.adminCmd(ctx, wire.NewPropertySet(0, off, 4, uint64(v)), noData, nil, nil)
	return err
}

// enable sets CC.EN with 64-byte submission and 16-byte completion
// queue entries, and waits for CSTS.RDY for as long as CAP.TO allows.
func (c *Controller) enable(ctx context.Context) error {
	capr, err := c.Property(ctx, wire.PropCAP, 8)
	if err != nil {
		return fmt.Errorf("nvmeof: read CAP: %w", err)
	}
	if err := c.setProperty(ctx, wire.PropCC, wire.CCEnable|6<<16|4<<20); err != nil {
		return fmt.Errorf("nvmeof: enable the controller: %w", err)
	}
	to := time.Duration(max(capr>>24&0xff, 1)) * 500 * time.Millisecond
	return c.waitStatus(ctx, to, wire.CSTSReady, wire.CSTSReady, "ready")
}

func (c *Controller) waitStatus(ctx context.Context, to time.Duration, mask, want uint64, what string) error {
	deadline := time.Now().Add(to)
	for {
		csts, err := c.Property(ctx, wire.PropCSTS, 4)
		if err != nil {
			return fmt.Errorf("nvmeof: read CSTS: %w", err)
		}
		if csts&wire.CSTSFatal != 0 {
			return fmt.Errorf("nvmeof: the controller reports a fatal status (CSTS 0x%x)", csts)
		}
		if csts&mask == want {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("nvmeof: the controller is not %s after %v (CSTS 0x%x)", what, to, csts)
		}
		select {
		case <-time.After(10 * time.Millisecond):
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}

func (c *Controller) identifyController(ctx context.Context) (wire.Controller, error) {
	var b [wire.IdentifyLen]byte
	if _, err := c.adminCmd(ctx, wire.NewIdentify(0, wire.CNSController, 0, wire.SGL{}), toHost, nil, b[:]); err != nil {
		return wire.Controller{}, fmt.Errorf("nvmeof: identify controller: %w", err)
	}
	return wire.ParseController(b[:])
}

// connectIO asks for I/O queues (Set Features, Number of Queues) and
// connects those granted.
func (c *Controller) connectIO(ctx context.Context, addr string, cntlid uint16) error {
	n := c.opts.IOQueues
	comp, err := c.adminCmd(ctx, wire.NewSetFeatures(0, wire.FeatNumQueues, uint32(n-1)|uint32(n-1)<<16), noData, nil, nil)
	if err != nil {
		return fmt.Errorf("nvmeof: ask for %d I/O queues: %w", n, err)
	}
	n = min(n, int(uint16(comp.Result))+1, int(uint16(comp.Result>>16))+1)
	capr, err := c.Property(ctx, wire.PropCAP, 8)
	if err != nil {
		return err
	}
	depth := min(c.opts.QueueDepth, int(wire.CAPMQES(capr))+1, maxQueueSize)
	if c.info.MaxCmd != 0 {
		depth = min(depth, int(c.info.MaxCmd))
	}
	depth = max(depth, 2)
	maxData := ioMaxData
	if c.info.MDTS != 0 && 4096<<c.info.MDTS < maxData {
		maxData = 4096 << c.info.MDTS
	}
	inline := 0
	if c.info.SGLS&wire.SGLSOffset != 0 && c.info.ICDOFF == 0 {
		inline = min(c.info.InlineDataSize(), maxInline)
	}
	for qid := 1; qid <= n; qid++ {
		q, err := dialQueue(ctx, addr, uint16(qid), depth, maxData, &c.opts)
		if err != nil {
			return fmt.Errorf("nvmeof: I/O queue %d: %w", qid, err)
		}
		c.io = append(c.io, q)
		q.inline = inline
		if _, err := c.connect(ctx, q, cntlid, 0); err != nil {
			return err
		}
	}
	return nil
}

// keepAlive sends a Keep Alive every half of the keep-alive timeout; a
// Keep Alive that fails fails the controller.
func (c *Controller) keepAlive() {
	defer close(c.kaDone)
	if c.opts.KeepAlive <= 0 {
		<-c.kaCtx.Done()
		return
	}
	t := time.NewTicker(c.opts.KeepAlive / 2)
	defer t.Stop()
	for {
		select {
		case <-c.kaCtx.Done():
			return
		case <-c.admin.ctx.Done():
			return
		case <-t.C:
		}
		ctx, cancel := context.WithTimeout(c.kaCtx, c.opts.KeepAlive)
		_, err := c.adminCmd(ctx, wire.NewKeepAlive(0), noData, nil, nil)
		cancel()
		if c.kaCtx.Err() != nil {
			return // Close
		}
		if err != nil {
			if errors.Is(err, context.DeadlineExceeded) {
				err = fmt.Errorf("unanswered for %v", c.opts.KeepAlive)
			}
			c.admin.fail(fmt.Errorf("%w: keep alive: %v", ErrDisconnected, err))
			for _, q := range c.io {
				q.fail(fmt.Errorf("%w: keep alive: %v", ErrDisconnected, err))
			}
			return
		}
	}
}

// Info returns what Identify Controller said of the controller.
func (c *Controller) Info() wire.Controller { return c.info }

// IOQueues is the number of I/O queues connected.
func (c *Controller) IOQueues() int { return len(c.io) }

// Close shuts the controller down (CC.SHN, as the kernel's host does
// when the controller is deleted), then disconnects its queues. Commands
// still outstanding end with ErrClosed.
func (c *Controller) Close() error {
	c.closeOnce.Do(func() {
		c.stopKA()
		<-c.kaDone
		if c.admin.failed() == nil {
			ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
			if c.setProperty(ctx, wire.PropCC, wire.CCEnable|6<<16|4<<20|1<<14) == nil {
				c.waitStatus(ctx, time.Second, 3<<2, wire.CSTSShutdown, "shut down")
			}
			cancel()
		}
		c.closeQueues()
	})
	return nil
}

func (c *Controller) closeQueues() {
	for _, q := range c.io {
		q.close()
	}
	c.admin.close()
}

// Namespaces lists the controller's active namespace IDs (Identify, CNS
// 02h).
func (c *Controller) Namespaces(ctx context.Context) ([]uint32, error) {
	var ids []uint32
	var b [wire.IdentifyLen]byte
	for after := uint32(0); ; {
		if _, err := c.adminCmd(ctx, wire.NewIdentify(0, wire.CNSActiveNSList, after, wire.SGL{}), toHost, nil, b[:]); err != nil {
			return nil, fmt.Errorf("nvmeof: list namespaces: %w", err)
		}
		page := wire.ParseNSList(b[:])
		ids = append(ids, page...)
		if len(page) < wire.IdentifyLen/4 {
			return ids, nil
		}
		after = page[len(page)-1]
	}
}

// Namespace opens namespace nsid for I/O (Identify, CNS 00h).
func (c *Controller) Namespace(ctx context.Context, nsid uint32) (*Namespace, error) {
	var b [wire.IdentifyLen]byte
	if _, err := c.adminCmd(ctx, wire.NewIdentify(0, wire.CNSNamespace, nsid, wire.SGL{}), toHost, nil, b[:]); err != nil {
		return nil, fmt.Errorf("nvmeof: identify namespace %d: %w", nsid, err)
	}
	info, err := wire.ParseNamespace(b[:])
	if err != nil {
		return nil, err
	}
	if info.Size == 0 {
		return nil, fmt.Errorf("nvmeof: namespace %d is not active", nsid)
	}
	if info.LBAShift < 9 || info.LBAShift > 16 {
		return nil, fmt.Errorf("nvmeof: namespace %d has blocks of 2^%d bytes, which this host does not take", nsid, info.LBAShift)
	}
	if len(c.io) == 0 {
		return nil, fmt.Errorf("nvmeof: %s has no I/O queues", c.subnqn)
	}
	return &Namespace{c: c, id: nsid, info: info}, nil
}

// Namespace is a namespace of a controller: a block device, read and
// written at any offset through ReadAt and WriteAt. Its methods may be
// called from several goroutines.
type Namespace struct {
	c    *Controller
	id   uint32
	info wire.Namespace
}

// ID is the namespace's ID.
func (n *Namespace) ID() uint32 { return n.id }

// Info returns what Identify Namespace said of it.
func (n *Namespace) Info() wire.Namespace { return n.info }

// BlockSize is the size of a logical block in bytes.
func (n *Namespace) BlockSize() int { return n.info.BlockSize() }

// Size is the namespace's size in bytes.
func (n *Namespace) Size() int64 { return int64(n.info.Size) << n.info.LBAShift }

// ReadAt reads len(p) bytes from offset off (io.ReaderAt), in Read
// commands of at most the controller's transfer size, several at once.
// Near the end it reads what is there and returns io.EOF.
func (n *Namespace) ReadAt(p []byte, off int64) (int, error) {
	return n.ReadAtContext(context.Background(), p, off)
}

// ReadAtContext is ReadAt bounded by ctx.
func (n *Namespace) ReadAtContext(ctx context.Context, p []byte, off int64) (int, error) {
	if off < 0 {
		return 0, fmt.Errorf("nvmeof: read at negative offset %d", off)
	}
	size := n.Size()
	if off >= size {
		return 0, io.EOF
	}
	want := len(p)
	if int64(len(p)) > size-off {
		p = p[:size-off]
	}
	bs := int64(n.BlockSize())
	if off%bs == 0 && int64(len(p))%bs == 0 {
		if err := n.blocks(ctx, wire.NVMRead, p, off); err != nil {
			return 0, err
		}
	} else {
		start := off / bs * bs
		end := (off + int64(len(p)) + bs - 1) / bs * bs
		tmp := make([]byte, end-start)
		if err := n.blocks(ctx, wire.NVMRead, tmp, start); err != nil {
			return 0, err
		}
		copy(p, tmp[off-start:])
	}
	if len(p) < want {
		return len(p), io.EOF
	}
	return len(p), nil
}

// WriteAt writes p at offset off (io.WriterAt). Writes of whole blocks
// go straight out; a write that starts or ends inside a block reads that
// block first and writes it back whole, which another writer of the same
// block may race with. A write past the end is refused.
func (n *Namespace) WriteAt(p []byte, off int64) (int, error) {
	return n.WriteAtContext(context.Background(), p, off)
}

// WriteAtContext is WriteAt bounded by ctx.
func (n *Namespace) WriteAtContext(ctx context.Context, p []byte, off int64) (int, error) {
	if off < 0 || off+int64(len(p)) > n.Size() {
		return 0, fmt.Errorf("nvmeof: write of %d bytes at %d: namespace %d holds %d bytes", len(p), off, n.id, n.Size())
	}
	bs := int64(n.BlockSize())
	if off%bs == 0 && int64(len(p))%bs == 0 {
		if err := n.blocks(ctx, wire.NVMWrite, p, off); err != nil {
			return 0, err
		}
		return len(p), nil
	}
	start := off / bs * bs
	end := (off + int64(len(p)) + bs - 1) / bs * bs
	tmp := make([]byte, end-start)
	if err := n.blocks(ctx, wire.NVMRead, tmp[:bs], start); err != nil {
		return 0, err
	}
	if end-bs > start {
		if err := n.blocks(ctx, wire.NVMRead, tmp[len(tmp)-int(bs):], end-bs); err != nil {
			return 0, err
		}
	}
	copy(tmp[off-start:], p)
	if err := n.blocks(ctx, wire.NVMWrite, tmp, start); err != nil {
		return 0, err
	}
	return len(p), nil
}

// Flush makes what was written durable (the Flush command).
func (n *Namespace) Flush() error { return n.FlushContext(context.Background()) }

// FlushContext is Flush bounded by ctx.
func (n *Namespace) FlushContext(ctx context.Context) error {
	q := n.c.pick()
	if _, err := n.c.execOn(ctx, q, wire.NewFlush(0, n.id), noData, nil, nil); err != nil {
		return fmt.Errorf("nvmeof: flush namespace %d: %w", n.id, err)
	}
	return nil
}

// pick returns the next I/O queue, round robin.
func (c *Controller) pick() *hostQueue {
	return c.io[int(c.next.Add(1))%len(c.io)]
}

// blocks reads or writes the whole blocks of p at off, in commands of
// at most a slot's data buffer, as many at once as the queues take.
func (n *Namespace) blocks(ctx context.Context, op uint8, p []byte, off int64) error {
	shift := n.info.LBAShift
	q := n.c.pick()
	chunk := q.maxData >> shift << shift
	if len(p) <= chunk {
		return n.one(ctx, q, op, p, off)
	}
	var wg sync.WaitGroup
	var mu sync.Mutex
	var first error
	for done := 0; done < len(p); done += chunk {
		part := p[done:min(done+chunk, len(p))]
		wg.Add(1)
		go func(q *hostQueue) {
			defer wg.Done()
			if err := n.one(ctx, q, op, part, off+int64(done)); err != nil {
				mu.Lock()
				if first == nil {
					first = err
				}
				mu.Unlock()
			}
		}(q)
		q = n.c.pick()
	}
	wg.Wait()
	return first
}

func (n *Namespace) one(ctx context.Context, q *hostQueue, op uint8, p []byte, off int64) error {
	shift := n.info.LBAShift
	cmd := wire.NewIO(op, 0, n.id, uint64(off)>>shift, len(p)>>shift, wire.SGL{})
	var err error
	if op == wire.NVMRead {
		_, err = n.c.execOn(ctx, q, cmd, toHost, nil, p)
	} else {
		_, err = n.c.execOn(ctx, q, cmd, toController, p, nil)
	}
	if err != nil {
		what := "read"
		if op == wire.NVMWrite {
			what = "write"
		}
		return fmt.Errorf("nvmeof: %s %d bytes at %d of namespace %d: %w", what, len(p), off, n.id, err)
	}
	return nil
}

// Discover reads the discovery log page of the discovery controller at
// addr (nvme discover): the subsystems it names, and how to reach them.
// opts may be nil.
func Discover(ctx context.Context, addr string, opts *Options) ([]wire.DiscoveryEntry, error) {
	o := opts.orDefault()
	o.KeepAlive = -1
	c, err := Dial(ctx, addr, wire.DiscoveryNQN, &o)
	if err != nil {
		return nil, err
	}
	defer c.Close()
	return c.DiscoveryLog(ctx)
}

// DiscoveryLog reads the discovery log page (Get Log Page 70h) of a
// discovery controller.
func (c *Controller) DiscoveryLog(ctx context.Context) ([]wire.DiscoveryEntry, error) {
	var hb [wire.DiscoveryHeaderLen]byte
	if err := c.logPage(ctx, wire.LogDiscovery, 0, hb[:]); err != nil {
		return nil, err
	}
	h, _ := wire.ParseDiscoveryHeader(hb[:])
	if h.NumRec > 1024 {
		return nil, fmt.Errorf("nvmeof: the discovery log claims %d entries", h.NumRec)
	}
	entries := make([]wire.DiscoveryEntry, 0, h.NumRec)
	per := adminMaxData / wire.DiscoveryEntryLen
	buf := make([]byte, per*wire.DiscoveryEntryLen)
	for i := 0; i < int(h.NumRec); i += per {
		k := min(per, int(h.NumRec)-i)
		b := buf[:k*wire.DiscoveryEntryLen]
		if err := c.logPage(ctx, wire.LogDiscovery, uint64(wire.DiscoveryHeaderLen+i*wire.DiscoveryEntryLen), b); err != nil {
			return nil, err
		}
		for j := range k {
			e, _ := wire.ParseDiscoveryEntry(b[j*wire.DiscoveryEntryLen:])
			entries = append(entries, e)
		}
	}
	return entries, nil
}

func (c *Controller) logPage(ctx context.Context, lid uint8, off uint64, b []byte) error {
	if _, err := c.adminCmd(ctx, wire.NewGetLogPage(0, lid, 0, off, len(b), wire.SGL{}), toHost, nil, b); err != nil {
		return fmt.Errorf("nvmeof: get log page 0x%02x: %w", lid, err)
	}
	return nil
}
