package rsperf

import (
	"fmt"
	"io"
	"math"
	"strconv"
	"strings"

	"github.com/rdmago/rdmago/internal/getopt"
	"github.com/rdmago/rdmago/internal/tool"
)

// Flags are the options rstream and riostream share, with their
// defaults (Defaults).
type Flags struct {
	Dst, Src   string // -s, -b
	Port       string // -p (default 7471)
	Buffer     int    // -B: SO_SNDBUF and SO_RCVBUF (0: 512 KiB)
	Inline     int    // -i (64)
	Iterations int    // -I
	Count      int    // -C
	Size       int    // -S n
	AllSizes   bool   // -S all
	Custom     bool   // -I, -C or -S n was given
}

// Defaults are the C programs' defaults.
func Defaults() Flags {
	return Flags{Port: "7471", Inline: 64, Iterations: 1, Count: 1000, Size: 1000}
}

// The largest values of the numeric options. The C programs keep them in
// ints; here they are bounded so that what they size can be allocated.
const (
	// MaxTransfer is the largest -S: the run's buffer is this large.
	MaxTransfer = 1 << 30
	// MaxBuffer is the largest -B: each ring is twice this (SO_SNDBUF
	// and SO_RCVBUF double the value they are given).
	MaxBuffer = 1 << 29
	// MaxInline is the largest -i (RDMA_INLINE; rsockets bounds it by
	// its largest queue, RS_QP_MAX_SIZE); the device bounds it further,
	// which the runs check.
	MaxInline = 0xfffe
)

var maxArg = map[byte]int{
	'B': MaxBuffer,
	'i': MaxInline,
	'I': math.MaxInt32,
	'C': math.MaxInt32,
	'S': MaxTransfer,
	'k': math.MaxInt32, // seconds, as TCP_KEEPIDLE takes them
}

var maxArgWhy = map[byte]string{
	'B': " (each ring is twice -B bytes)",
	'S': " (the transfer buffer is -S bytes)",
}

// Parser parses a command line of one of the two programs.
type Parser struct {
	Tool      string // "rstream"
	Optstring string // the program's getopt string
	Usage     func(io.Writer)
	// Other takes the options the two do not share (-k, -T): it returns
	// false, with nothing printed, for a -T value the program refuses,
	// which prints the usage; num reads a number option within its
	// bound.
	Other func(op getopt.Option, num func(getopt.Option) (int, error)) (ok bool, err error)
}

// Parse parses args into f (the program's defaults) as its getopt loop
// does. A bad option or -T value prints the usage; every refusal is a
// *tool.ExitError with status 1, as the C programs exit.
func (p Parser) Parse(f *Flags, args []string, stdout, stderr io.Writer) error {
	usage := func() error {
		p.Usage(stdout)
		return &tool.ExitError{Status: 1, Msg: "usage"}
	}
	num := func(op getopt.Option) (int, error) {
		limit := maxArg[op.Name]
		n, err := strconv.Atoi(strings.TrimSpace(op.Arg))
		if err != nil || n < 0 || n > limit {
			fmt.Fprintf(stderr, "rdmago %s: -%c %q: want a number from 0 to %d%s\n", p.Tool, op.Name, op.Arg, limit, maxArgWhy[op.Name])
			return 0, &tool.ExitError{Status: 1, Msg: "bad number"}
		}
		return n, nil
	}
	opts, _, err := getopt.Parse(args, p.Optstring, nil) // the programs ignore operands
	if err != nil {
		fmt.Fprintf(stderr, "rdmago %s: %v\n", p.Tool, err)
		return usage()
	}
	for _, op := range opts {
		var err error
		switch op.Name {
		case 's':
			f.Dst = op.Arg
		case 'b':
			f.Src = op.Arg
		case 'f':
			switch v := strings.ToLower(op.Arg); {
			case strings.HasPrefix(v, "gid"):
				fmt.Fprintf(stderr, "rdmago %s: -f gid: AF_IB addresses are not supported\n", p.Tool)
				return &tool.ExitError{Status: 1, Msg: "AF_IB"}
			case strings.HasPrefix(v, "ip"), strings.HasPrefix(v, "name"):
				// Addresses are numeric or names either way.
			default:
				fmt.Fprintln(stderr, "Warning: unknown address format")
			}
		case 'B':
			f.Buffer, err = num(op)
		case 'i':
			f.Inline, err = num(op)
		case 'I':
			f.Custom = true
			f.Iterations, err = num(op)
		case 'C':
			f.Custom = true
			f.Count, err = num(op)
		case 'S':
			if strings.HasPrefix(strings.ToLower(op.Arg), "all") {
				f.AllSizes = true
			} else {
				f.Custom = true
				f.Size, err = num(op)
			}
		case 'p':
			f.Port = op.Arg
		default:
			var ok bool
			if ok, err = p.Other(op, num); !ok {
				return usage()
			}
		}
		if err != nil {
			return err
		}
	}
	return nil
}
