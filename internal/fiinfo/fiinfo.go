// Package fiinfo is libfabric's fi_info (util/info.c in 1.17) on the
// fabric API: the same options and the same output, so that scripts that
// read fi_info read `rdmago fi_info`.
package fiinfo

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strings"

	"github.com/rdmago/rdmago/fabric"
	_ "github.com/rdmago/rdmago/fabric/sockets" // the sockets provider
	_ "github.com/rdmago/rdmago/fabric/tcp"     // the tcp provider
	_ "github.com/rdmago/rdmago/fabric/udp"     // the udp provider
	_ "github.com/rdmago/rdmago/fabric/vrb"     // the verbs provider
	"github.com/rdmago/rdmago/internal/getopt"
)

var specs = []getopt.Spec{
	{Short: 'h', Long: "help", Usage: "display this help and exit"},
	{Short: 's', Long: "src_addr", Arg: "ADDR", Usage: "source name or address"},
	{Short: 'n', Long: "node", Arg: "NAME", Usage: "dest node name or address"},
	{Short: 'P', Long: "port", Arg: "PNUM", Usage: "port number"},
	{Short: 'c', Long: "caps", Arg: "CAP1|CAP2..", Usage: "one or more capabilities: FI_MSG|FI_RMA..."},
	{Short: 'm', Long: "mode", Arg: "MOD1|MOD2..", Usage: "one or more modes, default all modes"},
	{Short: 't', Long: "ep_type", Arg: "EPTYPE", Usage: "specify single endpoint type: FI_EP_MSG, FI_EP_DGRAM..."},
	{Short: 'd', Long: "domain", Arg: "DOMAIN", Usage: "specify the domain name"},
	{Short: 'f', Long: "fabric", Arg: "FABRIC", Usage: "specify the fabric name"},
	{Short: 'a', Long: "addr_format", Arg: "FMT", Usage: "specify accepted address format: FI_FORMAT_UNSPEC, FI_SOCKADDR..."},
	{Short: 'p', Long: "provider", Arg: "PROV", Usage: "specify provider explicitly"},
	{Short: 'e', Long: "env", Usage: "print libfabric environment variables"},
	{Short: 'g', Long: "getenv", Arg: "SUBSTR", Usage: "print libfabric environment variables with substr"},
	{Short: 'i', Long: "info", Arg: "SUBSTR", Usage: "print fi_info structures containing substr"},
	{Short: 'l', Long: "list", Usage: "list available libfabric providers"},
	{Short: 'v', Long: "verbose", Usage: "verbose output"},
	{Long: "version", Usage: "print version info and exit"},
}

// ErrNoData is the failure when nothing matches: fi_info prints
// "fi_getinfo: -61" and exits with 61.
var ErrNoData = fabric.ErrNoData

// Main is `rdmago fi_info`: libfabric's fi_info with args; it returns the
// exit status.
func Main(_ context.Context, args []string, stdout, stderr io.Writer) int {
	opts, operands, err := getopt.ParseSpecs(args, specs)
	if err != nil || len(operands) > 0 {
		if err == nil {
			err = fmt.Errorf("unexpected operand %q", operands[0])
		}
		fmt.Fprintf(stderr, "fi_info: %v\n", err)
		usage(stderr)
		return 1
	}
	hints := fabric.AllocInfo()
	useHints := false
	var node, service, infoFilter string
	var flags uint64
	var list, verbose bool
	for _, o := range opts {
		switch o.Key() {
		case "h":
			usage(stdout)
			return 0
		case "version":
			fmt.Fprintf(stdout, "fi_info: %s\nlibfabric: %s\nlibfabric api: %s\n", "1.17.0", "1.17.0", "1.17")
			return 0
		case "s":
			node = o.Arg
			flags |= fabric.FlagSource
		case "n":
			node = o.Arg
		case "P":
			service = o.Arg
		case "c":
			c, err := fabric.ParseCaps(o.Arg)
			if err != nil {
				fmt.Fprintf(stderr, "fi_info: %v\n", err)
				return 1
			}
			hints.Caps, useHints = c, true
		case "m":
			m, err := fabric.ParseMode(o.Arg)
			if err != nil {
				fmt.Fprintf(stderr, "fi_info: %v\n", err)
				return 1
			}
			hints.Mode, useHints = m, true
		case "t":
			t, ok := fabric.ParseEPType(o.Arg)
			if !ok {
				fmt.Fprintf(stderr, "fi_info: unknown endpoint type %q\n", o.Arg)
				return 1
			}
			hints.EPAttr.Type, useHints = t, true
		case "a":
			f, err := fabric.ParseAddrFormat(o.Arg)
			if err != nil {
				fmt.Fprintf(stderr, "fi_info: %v\n", err)
				return 1
			}
			hints.AddrFormat, useHints = f, true
		case "p":
			hints.FabricAttr.ProvName, useHints = o.Arg, true
		case "d":
			hints.DomainAttr.Name, useHints = o.Arg, true
		case "f":
			hints.FabricAttr.Name, useHints = o.Arg, true
		case "e", "g":
			// No provider here reads FI_* environment variables: there
			// is nothing to print.
			return 0
		case "i":
			infoFilter, verbose = o.Arg, true
		case "l":
			list = true
		case "v":
			verbose = true
		}
	}
	if list {
		seen := map[string]bool{}
		for _, p := range fabric.Providers() {
			if hints.FabricAttr.ProvName != "" && !strings.EqualFold(p.Name(), hints.FabricAttr.ProvName) || seen[p.Name()] {
				continue
			}
			seen[p.Name()] = true
			fmt.Fprintf(stdout, "%s:\n    version: %d.%d\n", p.Name(), p.Version().Major(), p.Version().Minor())
		}
		if len(seen) == 0 {
			fmt.Fprintf(stderr, "fi_getinfo: -%d\n", int(fabric.ErrNoData))
			return int(fabric.ErrNoData)
		}
		return 0
	}
	var h *fabric.Info
	if useHints {
		h = hints
	}
	infos, err := fabric.GetInfo(node, service, flags, h)
	if err != nil {
		var e fabric.Errno
		if !errors.As(err, &e) {
			e = fabric.ErrNoData
		}
		fmt.Fprintf(stderr, "fi_getinfo: -%d\n", int(e))
		return int(e)
	}
	for _, i := range infos {
		if verbose {
			s := i.String()
			if infoFilter != "" && !strings.Contains(s, infoFilter) {
				continue
			}
			fmt.Fprintf(stdout, "---\n%s", s)
			continue
		}
		fmt.Fprintf(stdout, "provider: %s\n    fabric: %s\n    domain: %s\n    version: %d.%d\n    type: %s\n    protocol: %s\n",
			i.FabricAttr.ProvName, i.FabricAttr.Name, i.DomainAttr.Name, i.FabricAttr.ProvVersion.Major(),
			i.FabricAttr.ProvVersion.Minor(), i.EPAttr.Type, i.EPAttr.Protocol)
	}
	return 0
}

func usage(w io.Writer) {
	fmt.Fprintln(w, "Usage: fi_info")
	getopt.PrintUsage(w, specs)
}
