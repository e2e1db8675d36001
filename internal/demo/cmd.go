package demo

import (
	"context"
	"flag"
	"fmt"
	"io"
	"net/netip"
	"time"

	"github.com/rdmago/rdmago/internal/tool"
	"github.com/rdmago/rdmago/verbs"
)

// Main is `rdmago demo`: its flags, then Run. devices, if not nil, is
// given each device the demo makes (for --stats).
func Main(devices func(*verbs.Device)) tool.Main {
	return func(ctx context.Context, args []string, stdout, stderr io.Writer) int {
		return command(ctx, devices, args, stdout, stderr)
	}
}

func command(ctx context.Context, devices func(*verbs.Device), args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("demo", flag.ContinueOnError)
	fs.SetOutput(stderr)
	server := fs.String("server", "127.0.0.1", "IP address of the server's device")
	client := fs.String("client", "127.0.0.2", "IP address of the client's device")
	port := fs.Uint("port", 4791, "RoCEv2 UDP port both devices use")
	size := fs.Int("size", 1<<20, "RDMA WRITE size of the bandwidth run, in bytes")
	dur := fs.Duration("time", time.Second, "how long the bandwidth run lasts")
	fs.Usage = func() {
		fmt.Fprintln(stderr, "usage: rdmago demo [-server addr] [-client addr] [-port n] [-size bytes] [-time d]")
		fmt.Fprintln(stderr, "\nRuns the RDMA_RC_example flow in one process: two software RoCE devices on")
		fmt.Fprintln(stderr, "loopback exchange addresses over TCP, then SEND, RDMA READ, RDMA WRITE and both")
		fmt.Fprintln(stderr, "atomics, and a 1 MiB RDMA WRITE bandwidth run.")
		fmt.Fprintln(stderr, "\nflags:")
		fs.PrintDefaults()
	}
	rest, err := tool.ParseInterspersed(fs, args)
	if err != nil {
		return tool.FlagStatus(err)
	}
	if len(rest) > 0 {
		fmt.Fprintf(stderr, "rdmago demo: unexpected argument %q: demo takes flags only (rdmago demo -h)\n", rest[0])
		return 2
	}
	opt := Options{Port: uint16(*port), BWSize: *size, BWTime: *dur, Devices: devices}
	if opt.ServerAddr, err = netip.ParseAddr(*server); err != nil {
		fmt.Fprintf(stderr, "rdmago demo: -server: %v\n", err)
		return 2
	}
	if opt.ClientAddr, err = netip.ParseAddr(*client); err != nil {
		fmt.Fprintf(stderr, "rdmago demo: -client: %v\n", err)
		return 2
	}
	if *port == 0 || *port > 65535 || *size < 1 || *size > 8<<20 || *dur <= 0 {
		fmt.Fprintln(stderr, "rdmago demo: -port must be 1-65535, -size 1 to 8388608 bytes, -time positive")
		return 2
	}
	if err := Run(ctx, stdout, opt); err != nil {
		fmt.Fprintf(stderr, "rdmago demo: %v\n", err)
		return 1
	}
	return 0
}
