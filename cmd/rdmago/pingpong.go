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
	o := pingpong.Defaults()
	fs := flag.NewFlagSet("rc_pingpong", flag.ContinueOnError)
	fs.SetOutput(stderr)
	var (
		port, ibPort, size, mtu, rx, iters, sl, gid int
	)
	intFlag := func(p *int, short, long string, def int, usage string) {
		fs.IntVar(p, short, def, usage)
		fs.IntVar(p, long, def, usage+" (same as -"+short+")")
	}
	intFlag(&port, "p", "port", o.Port, "listen on/connect to TCP port")
	fs.StringVar(&o.Device, "d", "", "use IB device (default first device found)")
	fs.StringVar(&o.Device, "ib-dev", "", "same as -d")
	intFlag(&ibPort, "i", "ib-port", int(o.IBPort), "use port of IB device")
	intFlag(&size, "s", "size", o.Size, "size of message to exchange")
	intFlag(&mtu, "m", "mtu", 1024, "path MTU")
	intFlag(&rx, "r", "rx-depth", o.RxDepth, "number of receives to post at a time")
	intFlag(&iters, "n", "iters", o.Iters, "number of exchanges")
	intFlag(&sl, "l", "sl", 0, "service level value")
	fs.BoolVar(&o.Events, "e", false, "sleep on CQ events (default poll)")
	fs.BoolVar(&o.Events, "events", false, "same as -e")
	intFlag(&gid, "g", "gid-idx", -1, "local port gid index (RoCE needs one)")
	fs.BoolVar(&o.Check, "c", false, "validate the data received")
	fs.BoolVar(&o.Check, "chk", false, "same as -c")
	fs.Usage = func() {
		fmt.Fprintln(stderr, "usage:")
		fmt.Fprintln(stderr, "  rdmago rc_pingpong [flags]         start a server and wait for connection")
		fmt.Fprintln(stderr, "  rdmago rc_pingpong [flags] <host>  connect to server at <host>")
		fmt.Fprintln(stderr, "\nflags (those of ibv_rc_pingpong):")
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
	case iters < 1:
		bad = "-n must be positive"
	case sl < 0 || sl > 15:
		bad = "-l must be 0-15"
	case gid < -1 || gid > 255:
		bad = "-g must be a GID index"
	}
	if bad != "" {
		fmt.Fprintln(stderr, "rdmago rc_pingpong: "+bad)
		return 2
	}
	o.Port, o.IBPort, o.Size, o.RxDepth, o.Iters, o.SL, o.GIDIndex = port, uint8(ibPort), size, rx, iters, uint8(sl), gid
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	if _, err := pingpong.Run(ctx, stdout, o); err != nil {
		fmt.Fprintf(stderr, "rdmago rc_pingpong: %v\n", err)
		return 1
	}
	return 0
}
