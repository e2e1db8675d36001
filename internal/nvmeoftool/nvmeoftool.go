// Package nvmeoftool is `rdmago nvmeof`: an NVMe over Fabrics host and
// target on RDMA (package nvmeof), with nvme-cli's flag names where it
// has them (-a traddr, -s trsvcid, -n nqn, -q hostnqn).
package nvmeoftool

import (
	"bufio"
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"math"
	"math/rand/v2"
	"net"
	"os"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/rdmago/rdmago/internal/tool"
	"github.com/rdmago/rdmago/internal/units"
	"github.com/rdmago/rdmago/nvmeof"
	"github.com/rdmago/rdmago/nvmeof/wire"
	_ "github.com/rdmago/rdmago/rdmacore" // rdma-core devices, with -tags rdmacore
	_ "github.com/rdmago/rdmago/rxe"      // the software RoCE device
)

const usageText = `usage: rdmago nvmeof <command> [flags]

NVMe over Fabrics on RDMA: a host (discover, identify, read, write, flush,
bench) and a target (serve). Port 4420 unless -s says otherwise.

  discover -a ADDR [-s PORT]                     the discovery log: one subsystem per line
  identify -a ADDR -n NQN [-s PORT]              the controller and its namespaces
  read     -a ADDR -n NQN -o OFFSET -l BYTES     namespace bytes to standard output
  write    -a ADDR -n NQN -o OFFSET              standard input to the namespace, then a flush
  flush    -a ADDR -n NQN                        make the namespace's writes durable
  bench    -a ADDR -n NQN [-rw randread] [-bs 4096] [-qd 32] [-t 5s]
                                                 IOPS and throughput of reads or writes
  serve    -a ADDR -n NQN -f FILE [-f FILE ...] [-s PORT]
                                                 serve files (or -m SIZE of memory) as namespaces
                                                 until interrupted

Run 'rdmago nvmeof <command> -h' for a command's flags.
`

// Main is `rdmago nvmeof`.
func Main(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	return mainWith(ctx, &common{stdin: os.Stdin}, args, stdout, stderr)
}

// mainWith is Main with c's standard input.
func mainWith(ctx context.Context, c *common, args []string, stdout, stderr io.Writer) int {
	if len(args) == 0 || args[0] == "-h" || args[0] == "--help" || args[0] == "help" {
		if len(args) == 0 {
			fmt.Fprint(stderr, usageText)
			return 2
		}
		fmt.Fprint(stdout, usageText)
		return 0
	}
	run, ok := map[string]func(context.Context, *common, []string, io.Writer, io.Writer) error{
		"discover": discover, "identify": identify, "read": read, "write": write, "flush": flush,
		"bench": bench, "serve": serve,
	}[args[0]]
	if !ok {
		fmt.Fprintf(stderr, "rdmago nvmeof: unknown command %q\n%s", args[0], usageText)
		return 2
	}
	c.name = args[0]
	err := run(ctx, c, args[1:], stdout, stderr)
	var ee *tool.ExitError
	if err != nil && !errors.As(err, &ee) {
		fmt.Fprintf(stderr, "rdmago nvmeof %s: %v\n", args[0], err)
	}
	return tool.Status(err)
}

// common holds the flags every command shares.
type common struct {
	name     string
	fs       *flag.FlagSet
	addr     string
	port     string
	nqn      string
	nsid     uint
	hostNQN  string
	queues   int
	depth    int
	needsNQN bool
	stdin    io.Reader
}

func (c *common) flags(stderr io.Writer, needsNQN bool) *flag.FlagSet {
	fs := flag.NewFlagSet("nvmeof "+c.name, flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.StringVar(&c.addr, "a", "", "the target's address (traddr)")
	fs.StringVar(&c.port, "s", nvmeof.DefaultPort, "the target's port (trsvcid)")
	c.needsNQN = needsNQN
	if needsNQN {
		fs.StringVar(&c.nqn, "n", "", "the subsystem's NQN (nqn)")
		fs.UintVar(&c.nsid, "N", 1, "the namespace ID")
		fs.IntVar(&c.queues, "Q", 0, "I/O queues to ask for (nr_io_queues; 0: one per CPU, at most 4)")
		fs.IntVar(&c.depth, "D", 0, "entries of each I/O queue (queue_size; 0: 32)")
	}
	fs.StringVar(&c.hostNQN, "q", "", "this host's NQN (hostnqn; default: /etc/nvme/hostnqn, or one derived from /etc/machine-id)")
	c.fs = fs
	return fs
}

// parse parses args and checks the address and port.
func (c *common) parse(args []string) error {
	rest, err := tool.ParseInterspersed(c.fs, args)
	if err != nil {
		return &tool.ExitError{Status: tool.FlagStatus(err), Msg: err.Error()}
	}
	switch {
	case len(rest) > 0:
		return c.usageError("unexpected argument %q", rest[0])
	case c.addr == "":
		return c.usageError("-a ADDR is needed")
	case c.needsNQN && c.nqn == "":
		return c.usageError("-n NQN is needed")
	case c.needsNQN && (c.nsid == 0 || c.nsid > 0xfffffffe):
		return c.usageError("-N %d is not a namespace ID", c.nsid)
	}
	if p, err := strconv.Atoi(c.port); err != nil || p <= 0 || p > 65535 {
		return c.usageError("-s %q is not a port", c.port)
	}
	return nil
}

func (c *common) usageError(format string, args ...any) error {
	msg := fmt.Sprintf(format, args...)
	fmt.Fprintf(c.fs.Output(), "rdmago nvmeof %s: %s\n", c.name, msg)
	c.fs.Usage()
	return &tool.ExitError{Status: 2, Msg: msg}
}

func (c *common) target() string { return net.JoinHostPort(c.addr, c.port) }

func (c *common) options() *nvmeof.Options {
	return &nvmeof.Options{HostNQN: c.hostNQN, IOQueues: c.queues, QueueDepth: c.depth}
}

func dialCtx(ctx context.Context) (context.Context, context.CancelFunc) {
	return context.WithTimeout(ctx, 30*time.Second)
}

func (c *common) dial(ctx context.Context) (*nvmeof.Controller, *nvmeof.Namespace, error) {
	dctx, cancel := dialCtx(ctx)
	defer cancel()
	ctrl, err := nvmeof.Dial(dctx, c.target(), c.nqn, c.options())
	if err != nil {
		return nil, nil, err
	}
	ns, err := ctrl.Namespace(dctx, uint32(c.nsid))
	if err != nil {
		ctrl.Close()
		return nil, nil, err
	}
	return ctrl, ns, nil
}

func discover(ctx context.Context, c *common, args []string, stdout, stderr io.Writer) error {
	c.flags(stderr, false)
	if err := c.parse(args); err != nil {
		return err
	}
	dctx, cancel := dialCtx(ctx)
	defer cancel()
	entries, err := nvmeof.Discover(dctx, c.target(), c.options())
	if err != nil {
		return err
	}
	for _, e := range entries {
		fmt.Fprintf(stdout, "subnqn=%s trtype=%s adrfam=%s traddr=%s trsvcid=%s subtype=%s portid=%d\n",
			e.SubNQN, trType(e.TrType), adrFam(e.AdrFam), e.TrAddr, e.TrSvcID, subType(e.SubType), e.PortID)
	}
	return nil
}

func trType(t uint8) string {
	switch t {
	case wire.TrTypeRDMA:
		return "rdma"
	case wire.TrTypeTCP:
		return "tcp"
	}
	return strconv.Itoa(int(t))
}

func adrFam(f uint8) string {
	switch f {
	case wire.AdrFamIPv4:
		return "ipv4"
	case wire.AdrFamIPv6:
		return "ipv6"
	}
	return strconv.Itoa(int(f))
}

func subType(s uint8) string {
	switch s {
	case wire.SubTypeNVMe:
		return "nvme"
	case wire.SubTypeDiscovery:
		return "discovery"
	case 3:
		return "current-discovery"
	}
	return strconv.Itoa(int(s))
}

func identify(ctx context.Context, c *common, args []string, stdout, stderr io.Writer) error {
	c.flags(stderr, true)
	if err := c.parse(args); err != nil {
		return err
	}
	dctx, cancel := dialCtx(ctx)
	defer cancel()
	ctrl, err := nvmeof.Dial(dctx, c.target(), c.nqn, c.options())
	if err != nil {
		return err
	}
	defer ctrl.Close()
	id := ctrl.Info()
	fmt.Fprintf(stdout, "subnqn    %s\nmodel     %s\nserial    %s\nfirmware  %s\ncntlid    %d\nversion   %d.%d.%d\n",
		id.SubNQN, id.Model, id.Serial, id.Firmware, id.CNTLID, id.Version>>16, id.Version>>8&0xff, id.Version&0xff)
	mdts := "no limit"
	if id.MDTS != 0 {
		mdts = units.Size(4096 << id.MDTS)
	}
	fmt.Fprintf(stdout, "mdts      %s\nmaxcmd    %d\nioccsz    %d (in-capsule data %d bytes)\nsgls      0x%x\nkas       %d\nio queues %d\n",
		mdts, id.MaxCmd, id.IOCCSZ, id.InlineDataSize(), id.SGLS, id.KAS, ctrl.IOQueues())
	ids, err := ctrl.Namespaces(dctx)
	if err != nil {
		return err
	}
	for _, nsid := range ids {
		ns, err := ctrl.Namespace(dctx, nsid)
		if err != nil {
			return err
		}
		fmt.Fprintf(stdout, "namespace %d: %d bytes (%s), %d blocks of %d bytes, nguid %x\n",
			nsid, ns.Size(), units.Size(ns.Size()), ns.Info().Size, ns.BlockSize(), ns.Info().NGUID)
	}
	return nil
}

func read(ctx context.Context, c *common, args []string, stdout, stderr io.Writer) error {
	fs := c.flags(stderr, true)
	off := fs.Int64("o", 0, "the offset to read from, in bytes")
	n := fs.Int64("l", 0, "how many bytes to read")
	if err := c.parse(args); err != nil {
		return err
	}
	if *off < 0 || *n <= 0 {
		return c.usageError("-o %d -l %d: the offset must be >= 0 and the length > 0", *off, *n)
	}
	ctrl, ns, err := c.dial(ctx)
	if err != nil {
		return err
	}
	defer ctrl.Close()
	if *off+*n > ns.Size() {
		return fmt.Errorf("%d bytes at %d: namespace %d holds %d bytes", *n, *off, c.nsid, ns.Size())
	}
	w := bufio.NewWriterSize(stdout, 1<<20)
	buf := make([]byte, min(*n, 4<<20))
	for done := int64(0); done < *n; {
		p := buf[:min(int64(len(buf)), *n-done)]
		if _, err := ns.ReadAtContext(ctx, p, *off+done); err != nil {
			return err
		}
		if _, err := w.Write(p); err != nil {
			return err
		}
		done += int64(len(p))
	}
	return w.Flush()
}

func write(ctx context.Context, c *common, args []string, stdout, stderr io.Writer) error {
	fs := c.flags(stderr, true)
	off := fs.Int64("o", 0, "the offset to write at, in bytes")
	if err := c.parse(args); err != nil {
		return err
	}
	if *off < 0 {
		return c.usageError("-o %d: the offset must be >= 0", *off)
	}
	ctrl, ns, err := c.dial(ctx)
	if err != nil {
		return err
	}
	defer ctrl.Close()
	buf := make([]byte, 4<<20)
	total := int64(0)
	for {
		k, rerr := io.ReadFull(c.stdin, buf)
		if k > 0 {
			if *off+total+int64(k) > ns.Size() {
				return fmt.Errorf("the input runs past the end of namespace %d (%d bytes) after %d bytes", c.nsid, ns.Size(), total)
			}
			if _, err := ns.WriteAtContext(ctx, buf[:k], *off+total); err != nil {
				return err
			}
			total += int64(k)
		}
		if rerr == io.EOF || rerr == io.ErrUnexpectedEOF {
			break
		}
		if rerr != nil {
			return fmt.Errorf("standard input: %w", rerr)
		}
	}
	if err := ns.FlushContext(ctx); err != nil {
		return err
	}
	fmt.Fprintf(stderr, "wrote %d bytes at %d of namespace %d\n", total, *off, c.nsid)
	return nil
}

func flush(ctx context.Context, c *common, args []string, stdout, stderr io.Writer) error {
	c.flags(stderr, true)
	if err := c.parse(args); err != nil {
		return err
	}
	ctrl, ns, err := c.dial(ctx)
	if err != nil {
		return err
	}
	defer ctrl.Close()
	return ns.FlushContext(ctx)
}

func bench(ctx context.Context, c *common, args []string, stdout, stderr io.Writer) error {
	fs := c.flags(stderr, true)
	rw := fs.String("rw", "randread", "the pattern: randread, randwrite, read (sequential) or write")
	bsFlag := fs.String("bs", "4k", "the size of each I/O (512, 4k, 128k, 1m ...)")
	qd := fs.Int("qd", 32, "I/Os in flight")
	dur := seconds(5 * time.Second)
	fs.Var(&dur, "t", "how long to run: seconds (as fio's runtime=) or a Go duration (500ms, 1m)")
	span := fs.String("size", "", "the part of the namespace to use, from its start (default all of it)")
	if err := c.parse(args); err != nil {
		return err
	}
	bs, err := parseSize(*bsFlag)
	if err != nil || bs <= 0 {
		return c.usageError("-bs %q is not a size", *bsFlag)
	}
	random, writes := false, false
	switch *rw {
	case "randread":
		random = true
	case "randwrite":
		random, writes = true, true
	case "read":
	case "write":
		writes = true
	default:
		return c.usageError("-rw %q: randread, randwrite, read or write", *rw)
	}
	if *qd <= 0 || *qd > 1024 || dur <= 0 {
		return c.usageError("-qd %d -t %v: the depth must be 1 to 1024 and the time > 0", *qd, time.Duration(dur))
	}
	ctrl, ns, err := c.dial(ctx)
	if err != nil {
		return err
	}
	defer ctrl.Close()
	size := ns.Size()
	if *span != "" {
		s, err := parseSize(*span)
		if err != nil || s <= 0 {
			return c.usageError("-size %q is not a size", *span)
		}
		size = min(size, s)
	}
	if bs%int64(ns.BlockSize()) != 0 || bs > size {
		return fmt.Errorf("-bs %d: a multiple of the block size (%d) no larger than %d", bs, ns.BlockSize(), size)
	}
	slots := size / bs
	ctx, cancel := context.WithTimeout(ctx, time.Duration(dur))
	defer cancel()
	var ios, seq atomic.Int64
	var wg sync.WaitGroup
	var first error
	var once sync.Once
	start := time.Now()
	for w := range *qd {
		wg.Add(1)
		go func() {
			defer wg.Done()
			r := rand.New(rand.NewPCG(uint64(w), uint64(start.UnixNano())))
			buf := make([]byte, bs)
			for ctx.Err() == nil {
				slot := seq.Add(1) % slots
				if random {
					slot = r.Int64N(slots)
				}
				var err error
				if writes {
					_, err = ns.WriteAtContext(ctx, buf, slot*bs)
				} else {
					_, err = ns.ReadAtContext(ctx, buf, slot*bs)
				}
				if err != nil {
					if ctx.Err() == nil {
						once.Do(func() { first = err })
						cancel()
					}
					return
				}
				ios.Add(1)
			}
		}()
	}
	wg.Wait()
	elapsed := time.Since(start)
	if first != nil {
		return first
	}
	if err := context.Cause(ctx); err != nil && !errors.Is(err, context.DeadlineExceeded) {
		return err
	}
	n := ios.Load()
	fmt.Fprintf(stdout, "%s bs=%d qd=%d queues=%d: %d I/Os in %.2fs, %.0f IOPS, %.1f MB/s, %.1f us average\n",
		*rw, bs, *qd, ctrl.IOQueues(), n, elapsed.Seconds(), float64(n)/elapsed.Seconds(),
		float64(n*bs)/elapsed.Seconds()/1e6, elapsed.Seconds()*1e6*float64(*qd)/float64(max(n, 1)))
	return nil
}

// multi is a flag that may be given more than once.
type multi []string

func (m *multi) String() string     { return strings.Join(*m, ",") }
func (m *multi) Set(s string) error { *m = append(*m, s); return nil }

func serve(ctx context.Context, c *common, args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("nvmeof serve", flag.ContinueOnError)
	fs.SetOutput(stderr)
	c.fs = fs
	fs.StringVar(&c.addr, "a", "", "the address to listen on (traddr)")
	fs.StringVar(&c.port, "s", nvmeof.DefaultPort, "the port to listen on (trsvcid)")
	fs.StringVar(&c.nqn, "n", "", "the subsystem's NQN")
	var files, hosts multi
	fs.Var(&files, "f", "a file or block device to serve as the next namespace (repeatable)")
	fs.Var(&hosts, "host", "a host NQN allowed to connect (repeatable; default: any host)")
	mem := fs.String("m", "", "serve SIZE bytes of memory as a namespace (after the files)")
	bsz := fs.Int("B", 512, "the logical block size: 512 or 4096")
	quiet := fs.Bool("quiet", false, "do not log hosts coming and going")
	if err := c.parse(args); err != nil {
		return err
	}
	if c.nqn == "" {
		return c.usageError("-n NQN is needed")
	}
	if len(files) == 0 && *mem == "" {
		return c.usageError("at least one -f FILE or -m SIZE is needed")
	}
	opts := &nvmeof.TargetOptions{BlockSize: *bsz, Hosts: hosts}
	if !*quiet {
		var mu sync.Mutex
		opts.Logf = func(format string, args ...any) {
			mu.Lock()
			defer mu.Unlock()
			fmt.Fprintf(stderr, format+"\n", args...)
		}
	}
	t, err := nvmeof.NewTarget(opts)
	if err != nil {
		return c.usageError("%v", err)
	}
	var storage []nvmeof.Storage
	var desc []string
	for _, f := range files {
		st, err := nvmeof.OpenFile(f, 0)
		if err != nil {
			return err
		}
		defer st.Close()
		storage = append(storage, st)
		desc = append(desc, fmt.Sprintf("%s (%s)", f, units.Size(st.Size())))
	}
	if *mem != "" {
		size, err := parseSize(*mem)
		if err != nil || size <= 0 {
			return c.usageError("-m %q is not a size", *mem)
		}
		storage = append(storage, nvmeof.NewMemory(size))
		desc = append(desc, fmt.Sprintf("memory (%s)", units.Size(size)))
	}
	if err := t.AddSubsystem(c.nqn, storage...); err != nil {
		return err
	}
	defer t.Close()
	at, err := t.Listen(c.target())
	if err != nil {
		return err
	}
	fmt.Fprintf(stdout, "serving %s on %v:", c.nqn, at)
	for i, d := range desc {
		fmt.Fprintf(stdout, " namespace %d %s", i+1, d)
	}
	fmt.Fprintln(stdout)
	if f, ok := stdout.(interface{ Sync() error }); ok {
		f.Sync()
	}
	<-ctx.Done()
	return nil
}

// parseSize reads a size in bytes, with an optional k, m, g or t suffix
// (powers of 1024, any case, an optional trailing "b" or "ib").
func parseSize(s string) (int64, error) {
	t := strings.ToLower(strings.TrimSpace(s))
	t = strings.TrimSuffix(strings.TrimSuffix(t, "b"), "i")
	shift := 0
	if t != "" {
		switch t[len(t)-1] {
		case 'k':
			shift = 10
		case 'm':
			shift = 20
		case 'g':
			shift = 30
		case 't':
			shift = 40
		}
		if shift != 0 {
			t = t[:len(t)-1]
		}
	}
	n, err := strconv.ParseInt(t, 10, 64)
	if err != nil || n < 0 || n > (1<<62)>>shift {
		return 0, fmt.Errorf("%q is not a size", s)
	}
	return n << shift, nil
}

// seconds is a duration flag that also takes a plain number of seconds.
type seconds time.Duration

func (s *seconds) String() string { return time.Duration(*s).String() }

func (s *seconds) Set(v string) error {
	if n, err := strconv.ParseFloat(v, 64); err == nil {
		if math.IsNaN(n) || math.Abs(n) > math.MaxInt64/float64(time.Second) {
			return fmt.Errorf("%q seconds is out of range", v)
		}
		*s = seconds(n * float64(time.Second))
		return nil
	}
	d, err := time.ParseDuration(v)
	if err != nil {
		return fmt.Errorf("%q is neither seconds nor a duration (5, 1.5, 500ms, 1m)", v)
	}
	*s = seconds(d)
	return nil
}
