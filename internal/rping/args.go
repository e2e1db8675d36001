package rping

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/netip"
	"strconv"
	"strings"
	"time"

	"github.com/rdmago/rdmago/internal/tool"
)

// optstring is rping's getopt option string: a letter followed by ':'
// takes an argument. -t takes one and is then refused, as in rping.
const optstring = "a:I:Pp:C:S:t:scvVdq"

// optKind reports whether opt is one of rping's options and whether it
// takes an argument.
func optKind(opt byte) (known, hasArg bool) {
	for i := 0; i < len(optstring); i++ {
		if optstring[i] == opt && opt != ':' {
			return true, i+1 < len(optstring) && optstring[i+1] == ':'
		}
	}
	return false, false
}

// ParseArgs parses rping's flags as its getopt loop does: options may be
// grouped (-vV) and take their argument attached (-S64) or as the next
// word, words that are not options are skipped, and "--" ends the options.
// -a and -I take a host name or address and are resolved at once. On bad
// flags it prints what rping prints (the usage goes to stdout) and returns
// a *tool.ExitError with rping's status: EINVAL (22) for usage errors, and
// 256 plus getaddrinfo's negative error code (254 for EAI_NONAME) for an
// address that does not resolve. -h, -help and --help print the usage and
// return a *tool.ExitError with status 0.
func ParseArgs(args []string, stdout, stderr io.Writer) (Options, error) {
	o := Defaults()
	role := -1 // rping's cb->server: -1 until -s or -c
	status := 0
	debugf := func(format string, a ...any) {
		if o.Debug {
			fmt.Fprintf(stdout, format, a...)
		}
	}
	usageErr := func() (Options, error) {
		Usage(stdout)
		return o, &tool.ExitError{Status: einval, Msg: "rping: usage"}
	}
	if len(args) == 1 {
		switch args[0] {
		case "-h", "-help", "--help":
			Usage(stdout)
			return o, &tool.ExitError{Status: 0, Msg: "rping: help"}
		}
	}
	for i := 0; i < len(args); i++ {
		arg := args[i]
		if arg == "--" {
			break
		}
		if len(arg) < 2 || arg[0] != '-' {
			continue // GNU getopt moves operands to the end; rping has none
		}
		for j := 1; j < len(arg); j++ {
			opt := arg[j]
			known, hasArg := optKind(opt)
			if !known {
				fmt.Fprintf(stderr, "rdmago rping: invalid option -- '%c'\n", opt)
				return usageErr()
			}
			var val string
			if hasArg {
				switch {
				case j+1 < len(arg):
					val = arg[j+1:]
				case i+1 < len(args):
					i++
					val = args[i]
				default:
					fmt.Fprintf(stderr, "rdmago rping: option requires an argument -- '%c'\n", opt)
					return usageErr()
				}
				j = len(arg)
			}
			switch opt {
			case 'a', 'I':
				a, code, msg := resolve(val)
				if code != 0 {
					fmt.Fprintf(stdout, "getaddrinfo failed (%s) - invalid hostname or IP address\n", msg)
					if status == 0 {
						status = code & 0xff
					}
					continue
				}
				if opt == 'a' {
					o.Addr = a
				} else {
					o.Source = a
				}
			case 'P':
				o.Persistent = true
			case 'p':
				// rping reads the port with atoi, so "-p abc" is port
				// 0 and a rejection later; refuse it here instead.
				n, err := strconv.Atoi(strings.TrimSpace(val))
				if err != nil || n < 1 || n > 65535 {
					fmt.Fprintf(stderr, "Invalid port %q: -p takes a port number from 1 to 65535\n", val)
					if status == 0 {
						status = einval
					}
					continue
				}
				o.Port = uint16(n)
				debugf("port %d\n", n)
			case 's':
				role = 1
				debugf("server\n")
			case 'c':
				role = 0
				debugf("client\n")
			case 'S':
				o.Size = atoi(val)
				if o.Size < MinSize || o.Size > MaxSize {
					fmt.Fprintf(stderr, "Invalid size %d (valid range is %d to %d)\n", o.Size, MinSize, bufSize)
					if status == 0 {
						status = einval
					}
				} else {
					debugf("size %d\n", o.Size)
				}
			case 'C':
				o.Count = atoi(val)
				if o.Count < 0 {
					fmt.Fprintf(stderr, "Invalid count %d\n", o.Count)
					if status == 0 {
						status = einval
					}
				} else {
					debugf("count %d\n", o.Count)
				}
			case 'v':
				o.Verbose = true
				debugf("verbose\n")
			case 'V':
				o.Validate = true
				debugf("validate data\n")
			case 'd':
				o.Debug = true
			case 'q':
				o.SelfCreateQP = true
			default: // -t
				return usageErr()
			}
		}
	}
	if status != 0 {
		return o, &tool.ExitError{Status: status, Msg: "rping: bad flags"}
	}
	if role == -1 {
		return usageErr()
	}
	o.Server = role == 1
	if !o.Server {
		// rping's client ignores -P.
		o.Persistent = false
	}
	return o, nil
}

// Usage prints rping's usage text, naming the command `rdmago rping`.
func Usage(w io.Writer) {
	fmt.Fprint(w, `rdmago rping -s [-vVd] [-S size] [-C count] [-a addr] [-p port]
rdmago rping -c [-vVd] [-S size] [-C count] [-I addr] -a addr [-p port]
	-c		client side
	-I		Source address to bind to for client.
	-s		server side.  To bind to any address with IPv6 use -a ::0
	-v		display ping data to stdout
	-V		validate ping data
	-d		debug printfs
	-S size 	ping data size
	-C count	ping count times
	-a addr		address
	-p port		port
	-P		persistent server mode allowing multiple connections
	-q		use self-created, self-modified QP
`)
}

// atoi converts as C's atoi does: leading blanks, a sign, then digits up to
// the first other character; no digits give 0.
func atoi(s string) int {
	i := 0
	for i < len(s) && (s[i] == ' ' || (s[i] >= '\t' && s[i] <= '\r')) {
		i++
	}
	neg := false
	if i < len(s) && (s[i] == '+' || s[i] == '-') {
		neg = s[i] == '-'
		i++
	}
	n := int64(0)
	for ; i < len(s) && s[i] >= '0' && s[i] <= '9'; i++ {
		n = n*10 + int64(s[i]-'0')
		if n > 1<<32 {
			n = 1 << 32 // atoi's overflow is undefined; keep it out of range
		}
	}
	if neg {
		n = -n
	}
	return int(int32(max(min(n, 1<<31-1), -1<<31)))
}

// getaddrinfo's error codes and gai_strerror's texts for them.
const (
	eaiNoName = -2 // EAI_NONAME
	eaiAgain  = -3 // EAI_AGAIN
	eaiFail   = -4 // EAI_FAIL
)

var gaiText = map[int]string{
	eaiNoName: "Name or service not known",
	eaiAgain:  "Temporary failure in name resolution",
	eaiFail:   "Non-recoverable failure in name resolution",
}

// lookupNetIP resolves host names; tests replace it.
var lookupNetIP = net.DefaultResolver.LookupNetIP

// resolve turns -a's or -I's argument into an address as rping's get_addr
// does with getaddrinfo: the first address found. On failure it returns
// getaddrinfo's error code and gai_strerror's text.
func resolve(s string) (netip.Addr, int, string) {
	if a, err := netip.ParseAddr(s); err == nil {
		return a.Unmap(), 0, ""
	}
	code := eaiNoName
	if s != "" {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		addrs, err := lookupNetIP(ctx, "ip", s)
		if err == nil && len(addrs) > 0 {
			return addrs[0].Unmap(), 0, ""
		}
		var de *net.DNSError
		switch {
		case err == nil, errors.As(err, &de) && de.IsNotFound:
		case errors.As(err, &de) && (de.IsTemporary || de.IsTimeout):
			code = eaiAgain
		default:
			code = eaiFail
		}
	}
	return netip.Addr{}, code, gaiText[code]
}
