// Command rdmago is the command-line face of rdmago, an RDMA stack for Go:
// tools named and flagged like the rdma-core, perftest and libfabric tools
// RDMA programmers know.
//
// Usage:
//
//	rdmago <command> [flags] [args]
//
// Commands:
//
//	demo          the RDMA_RC_example flow on two software RoCE devices over loopback
//	devices       list RDMA devices and their node GUIDs, as ibv_devices does
//	devinfo       print RDMA device and port attributes, as ibv_devinfo does
//	fi_info       list the fabric API's providers and endpoints, as libfabric's fi_info
//	fi_pingpong   ping-pong over the fabric API, as libfabric's fi_pingpong (interoperates with it)
//	ib_send_bw, ib_send_lat, ib_write_bw, ib_write_lat, ib_read_bw, ib_read_lat,
//	ib_atomic_bw, ib_atomic_lat
//	              perftest's tools over an RC QP (interoperate with perftest 4.5)
//	nvmeof        NVMe over Fabrics on RDMA: discover, identify, read, write, bench a target, or serve files as one
//	mckey         UD datagrams to a multicast group joined through rdma_cm, as rdma-core's mckey (interoperates with it)
//	rc_pingpong   ping-pong over an RC QP, as ibv_rc_pingpong (interoperates with it)
//	uc_pingpong   ping-pong over a UC QP, as ibv_uc_pingpong (interoperates with it)
//	ud_pingpong   ping-pong over a UD QP, as ibv_ud_pingpong (interoperates with it)
//	srq_pingpong  ping-pong over RC QPs sharing an SRQ, as ibv_srq_pingpong (interoperates with it)
//	rping         RDMA READ/WRITE ping-pong over rdma_cm, as rdma-core's rping (interoperates with it)
//	riostream     transfers written into the peer's mapped buffer over rsockets' iomaps, as rdma-core's riostream (interoperates with it)
//	rstream       byte streams over rsockets (package rsocket), as rdma-core's rstream (interoperates with it)
//	udaddy        UD datagrams over rdma_cm's UDP port space, as rdma-core's udaddy (interoperates with it)
//	version       print the module version and VCS revision this binary was built from
//	dump          decode RoCEv2 packets in pcap and pcapng files, checking each ICRC
//
// Run `rdmago <command> -h` for a command's flags. Every command also
// takes --stats: at exit it prints the counters of the RDMA devices it
// used, one "name value" line each, to standard error; and
// --cpuprofile=FILE, which writes a Go CPU profile of the run to FILE (for
// `go tool pprof`).
package main

import (
	"context"
	"fmt"
	"io"
	"os"
	"os/signal"
	"runtime/pprof"
	"sort"
	"strings"
	"sync"

	"github.com/rdmago/rdmago/internal/demo"
	"github.com/rdmago/rdmago/internal/devinfo"
	"github.com/rdmago/rdmago/internal/dump"
	"github.com/rdmago/rdmago/internal/fiinfo"
	"github.com/rdmago/rdmago/internal/fipingpong"
	"github.com/rdmago/rdmago/internal/mckey"
	"github.com/rdmago/rdmago/internal/nvmeoftool"
	"github.com/rdmago/rdmago/internal/perftest"
	"github.com/rdmago/rdmago/internal/pingpong"
	"github.com/rdmago/rdmago/internal/riostream"
	"github.com/rdmago/rdmago/internal/rping"
	"github.com/rdmago/rdmago/internal/rstream"
	"github.com/rdmago/rdmago/internal/tool"
	"github.com/rdmago/rdmago/internal/udaddy"
	"github.com/rdmago/rdmago/verbs"
)

// command is one subcommand: its line in the usage text and its Main,
// which gets the arguments after the command's name.
type command struct {
	summary string
	main    tool.Main
}

// commands maps each name to its tool. cmd parses nothing of a tool's
// own: each tool's package parses its flags, runs and says its exit
// status (internal/tool), and only --stats and --cpuprofile, which every
// tool takes, are handled here.
var commands = map[string]command{
	"demo":         {"the RDMA_RC_example flow on two software RoCE devices over loopback", demo.Main(noteDevice)},
	"devices":      {"list RDMA devices and their node GUIDs, as ibv_devices does", devinfo.Devices},
	"devinfo":      {"print RDMA device and port attributes, as ibv_devinfo does", devinfo.Devinfo},
	"dump":         {"decode RoCEv2 packets in pcap and pcapng files, checking each ICRC", dump.Main},
	"nvmeof":       {"NVMe over Fabrics on RDMA: discover, identify, read, write, bench a target, or serve files as one", nvmeoftool.Main},
	"fi_info":      {"list the fabric API's providers and endpoints, as libfabric's fi_info", fiinfo.Main},
	"fi_pingpong":  {"ping-pong over the fabric API, as libfabric's fi_pingpong (interoperates with it)", fipingpong.Main},
	"mckey":        {"UD datagrams to a multicast group joined through rdma_cm, as rdma-core's mckey (interoperates with it)", tool.Of(mckey.ParseArgs, mckey.Run, tool.Status)},
	"rc_pingpong":  {"ping-pong over an RC QP, as ibv_rc_pingpong (interoperates with it)", pingpong.Main(pingpong.RC)},
	"rping":        {"RDMA READ/WRITE ping-pong over rdma_cm, as rdma-core's rping (interoperates with it)", tool.Of(rping.ParseArgs, rping.Run, rping.ExitStatus)},
	"riostream":    {"transfers written into the peer's mapped buffer over rsockets' iomaps, as rdma-core's riostream (interoperates with it)", tool.Of(riostream.ParseArgs, riostream.Run, tool.Status)},
	"rstream":      {"byte streams over rsockets (package rsocket), as rdma-core's rstream (interoperates with it)", tool.Of(rstream.ParseArgs, rstream.Run, tool.Status)},
	"srq_pingpong": {"ping-pong over RC QPs sharing an SRQ, as ibv_srq_pingpong (interoperates with it)", pingpong.Main(pingpong.SRQ)},
	"uc_pingpong":  {"ping-pong over a UC QP, as ibv_uc_pingpong (interoperates with it)", pingpong.Main(pingpong.UC)},
	"ud_pingpong":  {"ping-pong over a UD QP, as ibv_ud_pingpong (interoperates with it)", pingpong.Main(pingpong.UD)},
	"version":      {"print the module version and VCS revision this binary was built from", runVersion},
	"udaddy":       {"UD datagrams over rdma_cm's UDP port space, as rdma-core's udaddy (interoperates with it)", tool.Of(udaddy.ParseArgs, udaddy.Run, tool.Status)},
}

func init() {
	for _, t := range perftest.Tools {
		commands[t.Name()] = command{t.Summary(), perftest.Main(t)}
	}
}

func main() {
	os.Exit(run(os.Args[1:], os.Stdout, os.Stderr))
}

func run(args []string, stdout, stderr io.Writer) int {
	if len(args) == 0 {
		usage(stderr)
		return 2
	}
	switch args[0] {
	case "help", "-h", "-help", "--help":
		usage(stdout)
		return 0
	case "--version", "-version":
		args[0] = "version"
	}
	c, ok := commands[args[0]]
	if !ok {
		fmt.Fprintf(stderr, "rdmago: unknown command %q\n", args[0])
		usage(stderr)
		return 2
	}
	rest, common, err := commonFlags(args[1:])
	if err != nil {
		fmt.Fprintf(stderr, "rdmago %s: %v\n", args[0], err)
		return 2
	}
	if common.cpuProfile != "" {
		f, err := os.Create(common.cpuProfile)
		if err == nil {
			err = pprof.StartCPUProfile(f)
		}
		if err != nil {
			fmt.Fprintf(stderr, "rdmago %s: --cpuprofile: %v\n", args[0], err)
			return 1
		}
		defer func() {
			pprof.StopCPUProfile()
			f.Close()
		}()
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	status := c.main(ctx, rest, stdout, stderr)
	if common.stats {
		printStats(stderr)
	}
	return status
}

// common are the flags every tool takes.
type common struct {
	stats      bool   // --stats: print the devices' counters at exit
	cpuProfile string // --cpuprofile=FILE: write a Go CPU profile of the run
}

// commonFlags takes the flags every tool takes out of a command's
// arguments (before any "--").
func commonFlags(args []string) ([]string, common, error) {
	out := make([]string, 0, len(args))
	var c common
	for i := 0; i < len(args); i++ {
		a := args[i]
		switch {
		case a == "--":
			return append(out, args[i:]...), c, nil
		case a == "--stats":
			c.stats = true
		case a == "--cpuprofile":
			if i+1 == len(args) {
				return nil, c, fmt.Errorf("--cpuprofile needs a file name")
			}
			i++
			c.cpuProfile = args[i]
		case strings.HasPrefix(a, "--cpuprofile="):
			c.cpuProfile = strings.TrimPrefix(a, "--cpuprofile=")
			if c.cpuProfile == "" {
				return nil, c, fmt.Errorf("--cpuprofile needs a file name")
			}
		default:
			out = append(out, a)
		}
	}
	return out, c, nil
}

// printStats prints, for each device the run used, its counters as
// `rdma statistic` names them, one "name value" line each after a
// "# device" line.
// made are the devices a command made for itself, outside every
// provider's list (the demo's), for printStats.
var made struct {
	sync.Mutex
	devs []*verbs.Device
}

// noteDevice adds a device a command made to those printStats reads.
func noteDevice(d *verbs.Device) {
	made.Lock()
	made.devs = append(made.devs, d)
	made.Unlock()
}

func printStats(w io.Writer) {
	devs, err := verbs.Devices()
	if err != nil {
		fmt.Fprintf(w, "# counters: %v\n", err)
	}
	made.Lock()
	devs = append(devs, made.devs...)
	made.Unlock()
	for _, d := range devs {
		c, err := d.QueryCounters()
		if err != nil || c[verbs.CounterSentPkts]+c[verbs.CounterRcvdPkts] == 0 {
			continue
		}
		fmt.Fprintf(w, "# %s\n", d.Name())
		c.WriteTo(w)
	}
}

func usage(w io.Writer) {
	fmt.Fprintln(w, "usage: rdmago <command> [flags] [args]")
	fmt.Fprintln(w, "\ncommands:")
	names := make([]string, 0, len(commands))
	for n := range commands {
		names = append(names, n)
	}
	sort.Strings(names)
	for _, n := range names {
		fmt.Fprintf(w, "  %-13s %s\n", n, commands[n].summary)
	}
	fmt.Fprintln(w, "\nrun 'rdmago <command> -h' for a command's flags; every command takes --stats,")
	fmt.Fprintln(w, "which prints the counters of the devices it used at exit")
}
