package pingpong

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math"
	"strconv"

	"github.com/rdmago/rdmago/internal/getopt"
	"github.com/rdmago/rdmago/internal/tool"
	"github.com/rdmago/rdmago/verbs"
)

// specs are the options of t's C program, with its long names.
func specs(t Transport) []getopt.Spec {
	o := DefaultsFor(t)
	size := "size of message to exchange"
	if t == UD {
		size += ", at most the port's active MTU"
	}
	iters := "number of exchanges"
	if t == SRQ {
		iters += " (in total over all QPs)"
	}
	specs := []getopt.Spec{
		{Short: 'p', Long: "port", Arg: "PORT", Usage: "listen on/connect to TCP port", Default: strconv.Itoa(o.Port)},
		{Short: 'd', Long: "ib-dev", Arg: "DEV", Usage: "use IB device", Default: "first device found"},
		{Short: 'i', Long: "ib-port", Arg: "PORT", Usage: "use port of IB device", Default: "1"},
		{Short: 's', Long: "size", Arg: "SIZE", Usage: size, Default: strconv.Itoa(o.Size)},
	}
	if t != UD {
		specs = append(specs, getopt.Spec{Short: 'm', Long: "mtu", Arg: "MTU", Usage: "path MTU", Default: strconv.Itoa(o.MTU.Bytes())})
	}
	if t == SRQ {
		specs = append(specs, getopt.Spec{Short: 'q', Long: "num-qp", Arg: "NUM", Usage: "number of QPs to use", Default: strconv.Itoa(o.NumQP)})
	}
	return append(specs,
		getopt.Spec{Short: 'r', Long: "rx-depth", Arg: "DEP", Usage: "number of receives to post at a time", Default: strconv.Itoa(o.RxDepth)},
		getopt.Spec{Short: 'n', Long: "iters", Arg: "ITERS", Usage: iters, Default: strconv.Itoa(o.Iters)},
		getopt.Spec{Short: 'l', Long: "sl", Arg: "SL", Usage: "service level value", Default: "0"},
		getopt.Spec{Short: 'e', Long: "events", Usage: "sleep on CQ events", Default: "poll"},
		getopt.Spec{Short: 'g', Long: "gid-idx", Arg: "IDX", Usage: "local port gid index", Default: "the GID of the device's IPv4 address on RoCE"},
		getopt.Spec{Short: 'c', Long: "chk", Usage: "validate received buffer"},
		getopt.Spec{Short: 'h', Long: "help", Usage: "print this help"},
	)
}

// errHelp is ParseArgs' answer to -h.
var errHelp = errors.New("help requested")

// ParseArgs parses the options of t's C program, as its getopt_long
// does, into the options of a run: an error says what is wrong with them,
// in one line, or is errHelp.
func ParseArgs(t Transport, args []string) (Options, error) {
	o := DefaultsFor(t)
	opts, rest, err := getopt.ParseSpecs(args, specs(t))
	if err != nil {
		return o, err
	}
	mtu := o.MTU.Bytes()
	for _, op := range opts {
		var err error
		switch op.Name {
		case 'h':
			return o, errHelp
		case 'p':
			o.Port, err = op.Int(0, 65535)
		case 'd':
			o.Device = op.Arg
		case 'i':
			var n int
			n, err = op.Int(1, 255)
			o.IBPort = uint8(n)
		case 's':
			o.Size, err = op.Int(1, 1<<30)
		case 'm':
			mtu, err = op.Int(256, 4096)
			if err == nil && verbs.MTUFromBytes(mtu).Bytes() != mtu {
				err = fmt.Errorf("%s %q: must be 256, 512, 1024, 2048 or 4096", op, op.Arg)
			}
		case 'q':
			o.NumQP, err = op.Int(1, 255)
		case 'r':
			o.RxDepth, err = op.Int(1, 1<<20)
		case 'n':
			o.Iters, err = op.Int(1, math.MaxInt32)
		case 'l':
			var n int
			n, err = op.Int(0, 15)
			o.SL = uint8(n)
		case 'e':
			o.Events = true
		case 'g':
			o.GIDIndex, err = op.Int(0, 255)
		case 'c':
			o.Check = true
		}
		if err != nil {
			return o, err
		}
	}
	switch {
	case len(rest) > 1:
		return o, fmt.Errorf("one server host at most, got %q", rest)
	case len(rest) == 1:
		o.Server = rest[0]
	}
	o.MTU = verbs.MTUFromBytes(mtu)
	if t == SRQ && o.NumQP > o.RxDepth {
		return o, fmt.Errorf("rx_depth %d is too small for %d QPs -- must have at least one receive per QP (-r >= -q)", o.RxDepth, o.NumQP)
	}
	if o.Server != "" && o.Port == 0 {
		return o, errors.New("-p 0: the client needs the port the server listens on")
	}
	return o, nil
}

// Main is the command of t's C program (rdmago rc_pingpong, uc_pingpong,
// ud_pingpong, srq_pingpong): flag for flag ibv_rc_pingpong and its
// siblings (srq_pingpong less -o, on-demand paging, which the software
// device does not offer; ud_pingpong has no -m).
func Main(t Transport) tool.Main {
	return func(ctx context.Context, args []string, stdout, stderr io.Writer) int {
		return run(ctx, t, args, stdout, stderr)
	}
}

func run(ctx context.Context, t Transport, args []string, stdout, stderr io.Writer) int {
	name := t.String() + "_pingpong"
	usage := func(w io.Writer) {
		fmt.Fprintln(w, "usage:")
		fmt.Fprintf(w, "  rdmago %s [options]         start a server and wait for connection\n", name)
		fmt.Fprintf(w, "  rdmago %s [options] <host>  connect to server at <host>\n", name)
		fmt.Fprintf(w, "\n%s\n\noptions (those of %s):\n", about(t), t.Tool())
		getopt.PrintUsage(w, specs(t))
	}
	o, err := ParseArgs(t, args)
	if errors.Is(err, errHelp) {
		usage(stdout)
		return 0
	}
	if err != nil {
		fmt.Fprintf(stderr, "rdmago %s: %s\n", name, err)
		fmt.Fprintf(stderr, "run 'rdmago %s --help' for the options\n", name)
		return 2
	}
	o.Notice = stderr
	if _, err := Run(ctx, stdout, o); err != nil {
		if ctx.Err() != nil {
			return tool.Interrupted // Ctrl-C: quietly, as after SIGINT
		}
		fmt.Fprintf(stderr, "rdmago %s: %v\n", name, err)
		return 1
	}
	return 0
}

// about is the line of usage text that says what t's tool does.
func about(t Transport) string {
	switch t {
	case UC:
		return "Ping-pong of SENDs over a UC QP; interoperates with ibv_uc_pingpong."
	case UD:
		return "Ping-pong of SENDs over a UD QP (Q_Key 0x11111111); interoperates with ibv_ud_pingpong."
	case SRQ:
		return "Ping-pong of SENDs over -q RC QPs receiving from one SRQ; interoperates with ibv_srq_pingpong\n(use the same -q on both sides)."
	}
	return "Ping-pong of SENDs over an RC QP; interoperates with ibv_rc_pingpong."
}
