package dump

import (
	"bufio"
	"context"
	"flag"
	"fmt"
	"io"
	"os"

	"github.com/rdmago/rdmago/internal/tool"
)

// Main is `rdmago dump`: it decodes the files its arguments name.
func Main(_ context.Context, args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("dump", flag.ContinueOnError)
	fs.SetOutput(stderr)
	var opt Options
	check := fs.Bool("check", false, "exit with status 1 if any RoCEv2 packet is malformed or has a bad ICRC (a file that cannot be read always fails)")
	fs.BoolVar(&opt.All, "a", false, "print packets that are not RoCEv2 too (they are always counted)")
	fs.BoolVar(&opt.AbsTime, "abs", false, "print absolute timestamps instead of seconds since the file's first packet")
	fs.BoolVar(&opt.Quiet, "q", false, "print only each file's summary line")
	port := fs.Uint("port", 4791, "UDP destination port of RoCEv2 packets (for devices set to another port)")
	fs.Usage = func() {
		fmt.Fprintln(stderr, "usage: rdmago dump [-check] [-a] [-abs] [-q] [-port N] FILE...")
		fmt.Fprintln(stderr, "\nA FILE of - is standard input: tcpdump -i any -w - udp port 4791 | rdmago dump -")
		fmt.Fprintln(stderr, "\nDecodes the RoCEv2 packets (UDP to port 4791) in pcap and pcapng files, one line")
		fmt.Fprintln(stderr, "each, verifying every ICRC, then prints a summary line per file.")
		fmt.Fprintln(stderr, "Link types: Ethernet, Linux cooked v1/v2, raw IP, BSD loopback; IPv4 and IPv6.")
		fmt.Fprintln(stderr, "\nflags:")
		fs.PrintDefaults()
	}
	files, err := tool.ParseInterspersed(fs, args)
	if err != nil {
		return tool.FlagStatus(err)
	}
	if *port == 0 || *port > 65535 {
		fmt.Fprintf(stderr, "rdmago dump: -port %d is not a UDP port\n", *port)
		return 2
	}
	opt.Port = uint16(*port)
	if len(files) == 0 {
		fs.Usage()
		return 2
	}
	out := bufio.NewWriter(stdout)
	defer out.Flush()
	readFailed, badPackets := false, false
	for _, name := range files {
		if len(files) > 1 && !opt.Quiet {
			fmt.Fprintf(out, "== %s\n", name)
		}
		var f io.ReadCloser = io.NopCloser(os.Stdin) // read to its end, not closed
		var err error
		if name == "-" {
			name = "(stdin)"
		} else {
			f, err = os.Open(name)
		}
		if err != nil {
			out.Flush()
			fmt.Fprintf(stderr, "rdmago dump: %v\n", err)
			readFailed = true
			continue
		}
		st, err := File(out, f, opt)
		f.Close()
		if err != nil {
			out.Flush()
			fmt.Fprintf(stderr, "rdmago dump: %s: %v\n", name, err)
			readFailed = true
		}
		fmt.Fprintf(out, "%s: %s\n", name, st)
		if !st.OK() {
			badPackets = true
		}
	}
	if readFailed || *check && badPackets {
		return 1
	}
	return 0
}
