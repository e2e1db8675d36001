// Package perftest is the engine of `rdmago ib_send_bw`, `ib_send_lat`,
// `ib_write_bw`, `ib_write_lat`, `ib_read_bw`, `ib_read_lat`, `ib_atomic_bw` and
// `ib_atomic_lat` (-A CMP_AND_SWAP|FETCH_AND_ADD): perftest 4.5's tools
// (version string "6.06") on the verbs API, with perftest's flags, its
// out-of-band TCP exchange (version, system data, MTU, the key messages
// and their handshakes, the bandwidth reports), its banner, table header
// and rows, so that either side may be perftest's C program and scripts
// that parse perftest parse these.
//
// Offered: RC, UC for send and write, UD for send; -q QPs, -b, -l post
// lists, --run_infinitely and --perform_warm_up for the bandwidth tests,
// -D for all, -U for the latency tests; the TCP exchange with GIDs
// (RoCE), or with -z an rdma_cm one, and with -R the test's QPs
// connected by rdma_cm. Not offered: XRC, DC and SRD, -R with UD
// (rdma_cm's UDP port space), multicast, per-port reports and rate
// limits.
package perftest

import (
	"fmt"
	"io"
	"strconv"
	"strings"

	"github.com/rdmago/rdmago/internal/getopt"
	"github.com/rdmago/rdmago/verbs"
)

// Verb is the operation a tool measures.
type Verb int

// Verbs, in perftest's order.
const (
	Send Verb = iota
	Write
	Read
	Atomic
)

var verbNames = [...]string{"Send", "RDMA_Write", "RDMA_Read", "Atomic"}

// AtomicType is -A's operation.
type AtomicType int

// Atomic operations, perftest's names.
const (
	CmpAndSwap AtomicType = iota
	FetchAndAdd
)

var atomicNames = [...]string{"CMP_AND_SWAP", "FETCH_AND_ADD"}

// Conn is -c's connection type.
type Conn int

// Connection types, perftest's names.
const (
	RC Conn = iota
	UC      // unreliable connected: SEND and RDMA WRITE
	UD      // unreliable datagram: SEND only, a message at most the MTU
)

func (c Conn) String() string { return [...]string{"RC", "UC", "UD"}[c] }

// Tool is one perftest program.
type Tool struct {
	Verb Verb
	Lat  bool
}

// Name is the program's name ("ib_write_bw").
func (t Tool) Name() string {
	v := [...]string{"send", "write", "read", "atomic"}[t.Verb]
	if t.Lat {
		return "ib_" + v + "_lat"
	}
	return "ib_" + v + "_bw"
}

// Tools are the programs offered.
var Tools = []Tool{{Send, false}, {Send, true}, {Write, false}, {Write, true}, {Read, false}, {Read, true}, {Atomic, false}, {Atomic, true}}

// ToolByName finds a program by name.
func ToolByName(name string) (Tool, bool) {
	for _, t := range Tools {
		if t.Name() == name {
			return t, true
		}
	}
	return Tool{}, false
}

// Options are a run's parameters, perftest's user_param.
type Options struct {
	Tool        Tool
	Server      string // the server to connect to; empty: be the server
	Port        int
	Device      string
	IBPort      uint8
	GIDIndex    int // -1: the port's first RoCEv2 IPv4 GID, as perftest picks for RoCE
	Size        int
	Iters       int
	All         bool // -a: sizes 2 … 2^23
	TxDepth     int
	RxDepth     int
	Inline      int // -1: the tool's default
	CQMod       int
	OutReads    int // -o; 0: the device's maximum
	MTU         verbs.MTU
	ReportGbits bool
	NoPeak      bool
	AtomicType  AtomicType
	Events      bool   // -e: wait on a completion channel
	Conn        Conn   // -c: RC, UC (send, write) or UD (send)
	NumQPs      int    // -q: QPs (bandwidth tests)
	Duplex      bool   // -b: both sides move data (bandwidth tests)
	Duration    int    // -D: seconds to run instead of -n iterations (RDMA bandwidth tests)
	Margin      int    // -f: seconds left out at each end of a -D run (default -D/4)
	PostList    int    // -l: work requests per post (bandwidth tests)
	QPTimeout   uint8  // -u: the QPs' local ACK timeout (4.096 µs · 2^n)
	Unsorted    bool   // -U: print every latency, unsorted (latency tests)
	WarmUp      bool   // --perform_warm_up: a tx depth of operations before each size (RDMA and atomic bandwidth tests)
	Infinitely  bool   // --run_infinitely: a row every -D seconds until stopped (bandwidth tests)
	sizeSet     bool   // -s given
	RdmaCM      bool   // -R: connect the test's QPs with rdma_cm (implies CMComm)
	CMComm      bool   // -z: the out-of-band exchange over an rdma_cm connection
	Out         string // --out: "text" (perftest's table) or "json"
	Plot        string // --plot: an SVG file to draw the rows in
}

// maxInlineUD is perftest's largest inline size on UD (MAX_INLINE_UD).
const maxInlineUD = 884

// MaxSize is perftest's largest message (-a's last size).
const MaxSize = 1 << 23

// DefaultPort is perftest's TCP port.
const DefaultPort = 18515

// Defaults returns t's defaults.
func Defaults(t Tool) Options {
	o := Options{Tool: t, NumQPs: 1, PostList: 1, QPTimeout: 14, Port: DefaultPort, IBPort: 1, GIDIndex: -1, Iters: 1000, Inline: -1, CQMod: 100, TxDepth: 128, RxDepth: 512}
	if t.Verb == Write && !t.Lat {
		o.Iters = 5000
	}
	o.Size = 65536
	if t.Lat {
		o.Size, o.TxDepth = 2, 1
	}
	if t.Verb == Atomic {
		o.Size, o.AtomicType = 8, FetchAndAdd // an atomic is 8 bytes
	}
	return o
}

func specs(t Tool) []getopt.Spec {
	d := Defaults(t)
	s := []getopt.Spec{
		{Short: 'a', Long: "all", Usage: "run sizes from 2 till 2^23"},
		{Short: 'c', Long: "connection", Arg: "TYPE", Usage: "connection type: RC, UC (send and write) or UD (send)", Default: "RC"},
		{Short: 'd', Long: "ib-dev", Arg: "DEV", Usage: "use IB device", Default: "first device found"},
		{Short: 'e', Long: "events", Usage: "sleep on CQ events"},
		{Short: 'F', Long: "CPU-freq", Usage: "do not fail on CPU frequency differences (accepted, no effect)"},
		{Short: 'h', Long: "help", Usage: "show this help"},
		{Short: 'i', Long: "ib-port", Arg: "PORT", Usage: "use port of IB device", Default: "1"},
		{Short: 'm', Long: "mtu", Arg: "MTU", Usage: "MTU size: 256 - 4096", Default: "port's active MTU"},
		{Short: 'n', Long: "iters", Arg: "ITERS", Usage: "number of exchanges (at least 5)", Default: strconv.Itoa(d.Iters)},
		{Short: 'p', Long: "port", Arg: "PORT", Usage: "listen on/connect to TCP port", Default: strconv.Itoa(DefaultPort)},
		{Short: 'q', Long: "qp", Arg: "NUM", Usage: "number of QPs (bandwidth tests)", Default: "1"},
		{Short: 's', Long: "size", Arg: "SIZE", Usage: "size of message to exchange", Default: strconv.Itoa(d.Size)},
		{Short: 'u', Long: "qp-timeout", Arg: "TIMEOUT", Usage: "QP timeout: 4.096 usec * 2^TIMEOUT (1 to 31)", Default: "14"},
		{Short: 'R', Long: "rdma_cm", Usage: "connect QPs with rdma_cm and run the test on those QPs"},
		{Short: 'z', Long: "comm_rdma_cm", Usage: "communicate with rdma_cm module to exchange data - use regular QPs"},
		{Short: 'x', Long: "gid-index", Arg: "INDEX", Usage: "GID index", Default: "the port's RoCEv2 IPv4 GID"},
		{Long: "report_gbits", Usage: "report bandwidth in Gb/sec (1e9 bits) instead of MB/sec (2^20 bytes)"},
		{Long: "out", Arg: "FORMAT", Usage: "text (perftest's table) or json (one object per size on stdout, the banner on stderr)", Default: "text"},
		{Long: "plot", Arg: "FILE.svg", Usage: "draw bandwidth (or latency) against message size (with -a; checked writable before the run)"},
	}
	if t.Verb == Atomic {
		s = append(s, getopt.Spec{Short: 'A', Long: "atomic_type", Arg: "TYPE", Usage: "type of atomic operation from {CMP_AND_SWAP,FETCH_AND_ADD}", Default: "FETCH_AND_ADD"})
	}
	if t.Verb != Read && t.Verb != Atomic {
		s = append(s, getopt.Spec{Short: 'I', Long: "inline_size", Arg: "SIZE", Usage: "max size of message to be sent inline"})
	} else {
		s = append(s, getopt.Spec{Short: 'o', Long: "outs", Arg: "NUM", Usage: "outstanding reads/atomics", Default: "device's maximum"})
	}
	if !t.Lat {
		s = append(s,
			getopt.Spec{Short: 't', Long: "tx-depth", Arg: "DEPTH", Usage: "size of tx queue", Default: strconv.Itoa(d.TxDepth)},
			getopt.Spec{Short: 'Q', Long: "cq-mod", Arg: "NUM", Usage: "generate a completion every NUM sends", Default: "100"},
			getopt.Spec{Short: 'N', Long: "noPeak", Usage: "skip the peak bandwidth calculation"},
			getopt.Spec{Short: 'l', Long: "post_list", Arg: "SIZE", Usage: "post lists of SIZE work requests (CQ moderation follows)", Default: "1"},
			getopt.Spec{Long: "run_infinitely", Usage: "run until stopped, printing a row every -D seconds (default 5)"},
		)
		if t.Verb != Send {
			s = append(s, getopt.Spec{Long: "perform_warm_up", Usage: "perform some iterations before the test to warm up the device"})
		}
		s = append(s,
			getopt.Spec{Short: 'b', Long: "bidirectional", Usage: "measure bidirectional bandwidth"},
			getopt.Spec{Short: 'D', Long: "duration", Arg: "SECONDS", Usage: "run for a time instead of a number of iterations (with --run_infinitely, the time between rows)"},
			getopt.Spec{Short: 'f', Long: "margin", Arg: "SECONDS", Usage: "leave out this much at each end of a -D run", Default: "-D/4"},
		)
	} else {
		s = append(s,
			getopt.Spec{Short: 'U', Long: "report-unsorted", Usage: "print out unsorted results (default sorted)"},
			getopt.Spec{Short: 'D', Long: "duration", Arg: "SECONDS", Usage: "run for a time instead of a number of iterations"},
			getopt.Spec{Short: 'f', Long: "margin", Arg: "SECONDS", Usage: "leave out this much at each end of a -D run", Default: "-D/4"},
		)
	}
	if t.Verb == Send {
		s = append(s, getopt.Spec{Short: 'r', Long: "rx-depth", Arg: "DEPTH", Usage: "size of rx queue", Default: strconv.Itoa(d.RxDepth)})
	}
	return s
}

// Usage prints t's options.
func Usage(t Tool, w io.Writer) {
	fmt.Fprintf(w, " Usage:\n   %s            start a server and wait for connection\n   %s <host>     connect to server at <host>\n\n Options:\n", t.Name(), t.Name())
	getopt.PrintUsage(w, specs(t))
}

// ErrHelp is returned by ParseArgs for -h.
var ErrHelp = fmt.Errorf("help requested")

// ParseArgs parses t's command line.
func ParseArgs(t Tool, args []string) (*Options, error) {
	o := Defaults(t)
	opts, operands, err := getopt.ParseSpecs(args, specs(t))
	if err != nil {
		return nil, err
	}
	rxSet, cqSet, marginSet := false, false, false
	for _, op := range opts {
		var err error
		switch op.Key() {
		case "a":
			o.All = true
		case "c":
			switch strings.ToUpper(op.Arg) {
			case "RC":
				o.Conn = RC
			case "UC":
				if t.Verb == Read || t.Verb == Atomic {
					return nil, fmt.Errorf("connection type UC has no RDMA READ or atomics: RC only for %s", t.Name())
				}
				o.Conn = UC
			case "UD":
				if t.Verb != Send {
					return nil, fmt.Errorf("UD connection only possible in SEND verb")
				}
				o.Conn = UD
			case "XRC", "DC", "SRD":
				return nil, fmt.Errorf("connection type %s is not offered (RC, UC, UD)", op.Arg)
			default:
				return nil, fmt.Errorf("invalid connection type %q (RC, UC, UD)", op.Arg)
			}
		case "d":
			o.Device = op.Arg
		case "e":
			o.Events = true
		case "b":
			o.Duplex = true
		case "D":
			o.Duration, err = op.Int(1, 1<<20)
		case "f":
			o.Margin, err = op.Int(0, 1<<20)
			marginSet = true
		case "F", "N":
			o.NoPeak = o.NoPeak || op.Key() == "N"
		case "h":
			return nil, ErrHelp
		case "i":
			var n int
			n, err = op.Int(1, 254)
			o.IBPort = uint8(n)
		case "m":
			var n int
			if n, err = op.Int(256, 4096); err == nil {
				if o.MTU = verbs.MTUFromBytes(n); o.MTU.Bytes() != n {
					err = fmt.Errorf("invalid MTU %d (256, 512, 1024, 2048 or 4096)", n)
				}
			}
		case "n":
			o.Iters, err = op.Int(5, 100000000)
		case "p":
			o.Port, err = op.Int(1, 65535)
		case "q":
			if o.NumQPs, err = op.Int(1, 1024); err == nil && t.Lat && o.NumQPs > 1 {
				err = fmt.Errorf("the latency tests use one QP")
			}
		case "s":
			o.Size, err = op.Int(1, MaxSize)
			o.sizeSet = true
		case "x":
			o.GIDIndex, err = op.Int(0, 255)
		case "A":
			switch op.Arg {
			case atomicNames[CmpAndSwap]:
				o.AtomicType = CmpAndSwap
			case atomicNames[FetchAndAdd]:
				o.AtomicType = FetchAndAdd
			default:
				err = fmt.Errorf("unknown atomic type %q (CMP_AND_SWAP or FETCH_AND_ADD)", op.Arg)
			}
		case "l":
			o.PostList, err = op.Int(1, 2048)
		case "u":
			var n int
			if n, err = op.Int(0, 31); err == nil && n == 0 {
				// IBTA's 0 is no timeout at all: a packet the software
				// device's UDP loses would never be sent again, and
				// the run would wait for ever.
				err = fmt.Errorf("0 (no retransmission timeout) is not offered: a lost packet would stall the run for ever; use 1 to 31")
			}
			o.QPTimeout = uint8(n)
		case "U":
			o.Unsorted = true
		case "run_infinitely":
			o.Infinitely = true
		case "perform_warm_up":
			o.WarmUp = true
		case "R":
			o.RdmaCM, o.CMComm = true, true
		case "z":
			o.CMComm = true
		case "report_gbits":
			o.ReportGbits = true
		case "out":
			if op.Arg != "text" && op.Arg != "json" {
				err = fmt.Errorf("want text or json")
			}
			o.Out = op.Arg
		case "plot":
			o.Plot = op.Arg
		case "I":
			o.Inline, err = op.Int(0, 912)
		case "o":
			o.OutReads, err = op.Int(1, 256)
		case "t":
			o.TxDepth, err = op.Int(1, 15000)
		case "Q":
			o.CQMod, err = op.Int(1, 1024)
			cqSet = true
		case "r":
			o.RxDepth, err = op.Int(1, 16384)
			rxSet = true
		}
		if err != nil {
			if strings.HasPrefix(err.Error(), op.String()+" ") {
				return nil, err // it names the option already
			}
			return nil, fmt.Errorf("%s: %w", op, err)
		}
	}
	if o.Infinitely {
		switch {
		case o.Events:
			return nil, fmt.Errorf("run_infinitely does not support events feature yet")
		case o.Duplex && t.Verb == Send:
			return nil, fmt.Errorf("run_infinitely mode is not supported in SEND Bidirectional BW test")
		case o.All:
			return nil, fmt.Errorf("--run_infinitely and -a do not go together")
		}
		if o.Duration == 0 {
			o.Duration = 5 // perftest's default duration
		}
		if !marginSet {
			o.Margin = 0
		}
		marginSet = true
		o.NoPeak = true
	}
	if o.Duration > 0 {
		switch {
		case o.All:
			return nil, fmt.Errorf("-D and -a do not go together")
		case o.Duplex:
			return nil, fmt.Errorf("-D with -b is not offered yet")
		}
		if !marginSet {
			o.Margin = o.Duration / 4
		}
		if o.Duration <= 2*o.Margin {
			return nil, fmt.Errorf("-D %d must be longer than twice the margin -f %d", o.Duration, o.Margin)
		}
		o.NoPeak = true // as perftest: no peak in duration mode
	}
	if o.Plot != "" {
		switch {
		case t.Verb == Atomic:
			return nil, fmt.Errorf("--plot draws one point per message size: the atomic tests have one size (8)")
		case !o.All:
			return nil, fmt.Errorf("--plot draws one point per message size: it needs -a")
		}
	}
	if o.RdmaCM && o.Conn == UD {
		return nil, fmt.Errorf("-R with -c UD is not offered (rdma_cm's UDP port space): use -R with RC or UC, or UD without -R")
	}
	if t.Verb == Atomic {
		// perftest's atomic tests move 8 bytes whatever -s and -a say.
		o.Size, o.All = 8, false
	}
	switch len(operands) {
	case 0:
	case 1:
		o.Server = operands[0]
	default:
		return nil, fmt.Errorf("too many arguments: %q", operands[1:])
	}
	// perftest's adjustments (force_dependecies and after).
	if o.PostList > 1 {
		if o.Duration == 0 && o.Iters%o.PostList != 0 {
			return nil, fmt.Errorf("number of iterations must be a multiple of post list size")
		}
		if !cqSet {
			o.CQMod = o.PostList // CQ moderation will be the size of the post list
		} else if o.PostList%o.CQMod != 0 {
			return nil, fmt.Errorf("post list size must be a multiple of CQ moderation")
		}
		if o.TxDepth < o.PostList {
			return nil, fmt.Errorf("the tx depth (%d) must hold a post list (%d)", o.TxDepth, o.PostList)
		}
	}
	if !t.Lat {
		o.TxDepth = min(o.TxDepth, o.Iters)
		if o.Size > 8192 && o.Conn != UD && !o.All && !o.Events && !cqSet && o.PostList == 1 {
			o.CQMod = 1 // large messages: a completion for each
		}
		if o.PostList == 1 {
			o.CQMod = min(o.CQMod, o.TxDepth)
		}
		if o.Iters > 20000 {
			o.NoPeak = true // the peak search is quadratic
		}
	}
	if o.Conn == UD && o.Inline > maxInlineUD {
		o.Inline = maxInlineUD
	}
	if t.Verb == Send {
		o.RxDepth = min(o.RxDepth, o.Iters)
		if o.Conn != RC && !rxSet {
			o.RxDepth = min(o.Iters, 16000) // every receive posted: UC and UD may lose some
		}
		if o.RxDepth%2 == 1 && !o.All {
			o.RxDepth++ // as perftest does for an odd depth
		}
	}
	if need := o.bufferSize(); need > maxBuffer {
		return nil, fmt.Errorf("-q %d with messages of up to %d bytes needs a %d-byte buffer, over the %d allowed (use a smaller -q or -s, or no -a)", o.NumQPs, o.maxSize(), need, maxBuffer)
	}
	return &o, nil
}

// maxSize is the run's largest message.
func (o *Options) maxSize() int {
	if o.All {
		return MaxSize
	}
	return o.Size
}

// bufferSize is the size of the run's buffer: for each QP, a half to send
// from and a half for the peer to reach, each at least the cycle buffer.
func (o *Options) bufferSize() int {
	return 2 * o.NumQPs * max(o.maxSize(), cycleBuffer)
}
