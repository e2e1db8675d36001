package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"

	"github.com/rdmago/rdmago/internal/pingpong"
	"github.com/rdmago/rdmago/verbs"
)

// runRCPingpong is `rdmago rc_pingpong`, flag for flag ibv_rc_pingpong.
func runRCPingpong(args []string, stdout, stderr io.Writer) int {
	return runPingpong(pingpong.RC, args, stdout, stderr)
}

// runUCPingpong is `rdmago uc_pingpong`, flag for flag ibv_uc_pingpong.
func runUCPingpong(args []string, stdout, stderr io.Writer) int {
	return runPingpong(pingpong.UC, args, stdout, stderr)
}

// runUDPingpong is `rdmago ud_pingpong`, flag for flag ibv_ud_pingpong
// (which has no -m: a UD message is one packet of at most the port's MTU).
func runUDPingpong(args []string, stdout, stderr io.Writer) int {
	return runPingpong(pingpong.UD, args, stdout, stderr)
}

// runSRQPingpong is `rdmago srq_pingpong`, flag for flag ibv_srq_pingpong
// (less its -o, on-demand paging, which rdmago's device does not offer).
func runSRQPingpong(args []string, stdout, stderr io.Writer) int {
	return runPingpong(pingpong.SRQ, args, stdout, stderr)
}

// runPingpong parses the flags of t's C program and runs it.
func runPingpong(t pingpong.Transport, args []string, stdout, stderr io.Writer) int {
	name := t.String() + "_pingpong"
	o := pingpong.DefaultsFor(t)
	fs := flag.NewFlagSet(name, flag.ContinueOnError)
	fs.SetOutput(stderr)
	var (
		port, ibPort, size, mtu, numQP, rx, iters, sl, gid int
	)
	intFlag := func(p *int, short, long string, def int, usage string) {
		fs.IntVar(p, short, def, usage)
		fs.IntVar(p, long, def, usage+" (same as -"+short+")")
	}
	intFlag(&port, "p", "port", o.Port, "listen on/connect to TCP port")
	fs.StringVar(&o.Device, "d", "", "use IB device (default first device found)")
	fs.StringVar(&o.Device, "ib-dev", "", "same as -d")
	intFlag(&ibPort, "i", "ib-port", int(o.IBPort), "use port of IB device")
	sizeUsage := "size of message to exchange"
	if t == pingpong.UD {
		sizeUsage += ", at most the port's active MTU"
	}
	intFlag(&size, "s", "size", o.Size, sizeUsage)
	mtu = o.MTU.Bytes()
	if t != pingpong.UD {
		intFlag(&mtu, "m", "mtu", mtu, "path MTU")
	}
	if t == pingpong.SRQ {
		intFlag(&numQP, "q", "num-qp", o.NumQP, "number of QPs to use")
	}
	intFlag(&rx, "r", "rx-depth", o.RxDepth, "number of receives to post at a time")
	itersUsage := "number of exchanges"
	if t == pingpong.SRQ {
		itersUsage += " (in total over all QPs)"
	}
	intFlag(&iters, "n", "iters", o.Iters, itersUsage)
	intFlag(&sl, "l", "sl", 0, "service level value")
	fs.BoolVar(&o.Events, "e", false, "sleep on CQ events (default poll)")
	fs.BoolVar(&o.Events, "events", false, "same as -e")
	intFlag(&gid, "g", "gid-idx", -1, "local port gid index (RoCE needs one)")
	fs.BoolVar(&o.Check, "c", false, "validate the data received")
	fs.BoolVar(&o.Check, "chk", false, "same as -c")
	fs.Usage = func() {
		fmt.Fprintln(stderr, "usage:")
		fmt.Fprintf(stderr, "  rdmago %s [flags]         start a server and wait for connection\n", name)
		fmt.Fprintf(stderr, "  rdmago %s [flags] <host>  connect to server at <host>\n", name)
		fmt.Fprintf(stderr, "\n%s\n\nflags (those of %s):\n", pingpongAbout(t), t.Tool())
		fs.PrintDefaults()
	}
	rest, err := parseInterspersed(fs, args)
	if err != nil {
		return flagError(err)
	}
	switch {
	case len(rest) > 1:
		fs.Usage()
		return 2
	case len(rest) == 1:
		o.Server = rest[0]
	}
	o.MTU = verbs.MTUFromBytes(mtu)
	bad := ""
	switch {
	case port < 0 || port > 65535:
		bad = "-p must be a TCP port"
	case ibPort < 1 || ibPort > 255:
		bad = "-i must be 1-255"
	case size < 1 || size > 1<<30:
		bad = "-s must be 1 to 2^30"
	case o.MTU == 0 || o.MTU.Bytes() != mtu:
		bad = "-m must be 256, 512, 1024, 2048 or 4096"
	case rx < 1 || rx > 16384:
		bad = "-r must be 1-16384"
	case t == pingpong.SRQ && (numQP < 1 || numQP > 255):
		bad = "-q must be 1-255"
	case t == pingpong.SRQ && numQP > rx:
		bad = fmt.Sprintf("rx_depth %d is too small for %d QPs -- must have at least one receive per QP (-r >= -q)", rx, numQP)
	case iters < 1:
		bad = "-n must be positive"
	case sl < 0 || sl > 15:
		bad = "-l must be 0-15"
	case gid < -1 || gid > 255:
		bad = "-g must be a GID index"
	}
	if bad != "" {
		fmt.Fprintf(stderr, "rdmago %s: %s\n", name, bad)
		return 2
	}
	o.Port, o.IBPort, o.Size, o.RxDepth, o.Iters, o.SL, o.GIDIndex = port, uint8(ibPort), size, rx, iters, uint8(sl), gid
	if t == pingpong.SRQ {
		o.NumQP = numQP
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	if _, err := pingpong.Run(ctx, stdout, o); err != nil {
		if ctx.Err() != nil {
			return exitInterrupted // Ctrl-C: quietly, as after SIGINT
		}
		fmt.Fprintf(stderr, "rdmago %s: %v\n", name, err)
		return 1
	}
	return 0
}

// exitInterrupted is the status of a tool stopped by Ctrl-C: 128 + SIGINT,
// what a shell reports for a C program the signal killed.
const exitInterrupted = 130

// pingpongAbout is the line of usage text that says what t's tool does.
func pingpongAbout(t pingpong.Transport) string {
	switch t {
	case pingpong.UC:
		return "Ping-pong of SENDs over a UC QP; interoperates with ibv_uc_pingpong."
	case pingpong.UD:
		return "Ping-pong of SENDs over a UD QP (Q_Key 0x11111111); interoperates with ibv_ud_pingpong."
	case pingpong.SRQ:
		return "Ping-pong of SENDs over -q RC QPs receiving from one SRQ; interoperates with ibv_srq_pingpong\n(use the same -q on both sides)."
	}
	return "Ping-pong of SENDs over an RC QP; interoperates with ibv_rc_pingpong."
}
