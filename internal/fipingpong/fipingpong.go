// Package fipingpong is libfabric's fi_pingpong (util/pingpong.c in
// libfabric 1.17) on the fabric API: the same flags, the same TCP control
// channel on port 47592 byte for byte, the same per-size sync and count
// exchange, and the same table, so that either side of a pair may be the
// C program.
package fipingpong

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"strconv"
	"strings"
	"time"

	"github.com/rdmago/rdmago/fabric"
	"github.com/rdmago/rdmago/internal/getopt"
)

// Options are fi_pingpong's flags.
type Options struct {
	SrcPort  int    // -B: control port the server binds (47592)
	DstPort  int    // -P: control port the client connects to (47592)
	Domain   string // -d
	Provider string // -p
	EPType   fabric.EPType
	Iters    int    // -I
	Sizes    []int  // -S
	OneSize  bool   // -S gave one size (not "all")
	Check    bool   // -c
	Tagged   bool   // -m tagged
	Verbose  bool   // -v
	IPv6     bool   // -6
	Server   string // the operand: the server's address (client mode)
}

// DefaultPort is the control channel's port.
const DefaultPort = 47592

// maxDataMsg is the largest message (PP_MAX_DATA_MSG).
const maxDataMsg = 1<<22 + 1<<21

var specs = []getopt.Spec{
	{Short: 'B', Arg: "port", Usage: "source control port number (server: 47592, client: auto)"},
	{Short: 'P', Arg: "port", Usage: "destination control port number (client: 47592)"},
	{Short: 'd', Arg: "domain", Usage: "domain name"},
	{Short: 'p', Arg: "provider", Usage: "specific provider name eg sockets, verbs"},
	{Short: 'e', Arg: "ep_type", Usage: "endpoint type: msg|rdm|dgram (dgram)"},
	{Short: 'I', Arg: "number", Usage: "number of iterations (10)"},
	{Short: 'S', Arg: "size", Usage: "specific transfer size or 'all' (all)"},
	{Short: 'c', Usage: "enables data_integrity checks"},
	{Short: 'm', Arg: "transfer mode", Usage: "transfer mode: msg|tagged (msg)"},
	{Short: 'v', Usage: "enables debugging output"},
	{Short: '6', Usage: "use IPv6 address"},
	{Short: 'h', Usage: "display this help output"},
}

// ErrUsage is ParseArgs' error when it has printed the usage (-h, or a
// flag it does not know): the exit status is 1 and there is nothing more
// to say.
var ErrUsage = errors.New("usage")

var errUsage = ErrUsage

// ParseArgs parses fi_pingpong's command line.
func ParseArgs(args []string, stderr io.Writer) (*Options, error) {
	o := &Options{SrcPort: -1, DstPort: DefaultPort, EPType: fabric.EPDgram, Iters: 10}
	opts, operands, err := getopt.ParseSpecs(args, specs)
	if err != nil {
		fmt.Fprintf(stderr, "fi_pingpong: %v\n", err)
		usage(stderr)
		return nil, errUsage
	}
	for _, opt := range opts {
		switch opt.Name {
		case 'B':
			if o.SrcPort, err = opt.Int(0, 65535); err != nil {
				return nil, err
			}
		case 'P':
			if o.DstPort, err = opt.Int(1, 65535); err != nil {
				return nil, err
			}
		case 'd':
			o.Domain = opt.Arg
		case 'p':
			o.Provider = opt.Arg
		case 'e':
			t, ok := map[string]fabric.EPType{"msg": fabric.EPMsg, "rdm": fabric.EPRDM, "dgram": fabric.EPDgram}[strings.ToLower(opt.Arg)]
			if !ok {
				fmt.Fprintf(stderr, "fi_pingpong: unknown endpoint type %q (msg, rdm or dgram)\n", opt.Arg)
				usage(stderr)
				return nil, errUsage
			}
			o.EPType = t
		case 'I':
			if o.Iters, err = opt.Int(1, 1<<30); err != nil {
				return nil, err
			}
		case 'S':
			if strings.EqualFold(opt.Arg, "all") {
				o.Sizes = allSizes()
			} else {
				n, err := opt.Int(0, maxDataMsg)
				if err != nil {
					return nil, err
				}
				o.Sizes, o.OneSize = []int{n}, true
			}
		case 'c':
			o.Check = true
		case 'm':
			// fi_pingpong's -m takes "msg" or "tagged".
			switch strings.ToLower(opt.Arg) {
			case "msg":
				o.Tagged = false
			case "tagged":
				o.Tagged = true
			default:
				fmt.Fprintf(stderr, "fi_pingpong: unknown transfer mode %q (msg or tagged)\n", opt.Arg)
				usage(stderr)
				return nil, errUsage
			}
		case 'v':
			o.Verbose = true
		case '6':
			o.IPv6 = true
		case 'h':
			usage(stderr)
			return nil, errUsage
		}
	}
	if len(operands) > 1 {
		return nil, fmt.Errorf("one server address, not %d operands", len(operands))
	}
	if len(operands) == 1 {
		o.Server = operands[0]
	}
	if o.SrcPort < 0 {
		o.SrcPort = 0
		if o.Server == "" {
			o.SrcPort = DefaultPort
		}
	}
	if o.SrcPort == 0 && o.Server == "" {
		// The C server binds whatever port 0 gets and never says which.
		return nil, errors.New("-B 0: a server needs a port its client can be given with -P")
	}
	if o.Sizes == nil {
		o.Sizes = []int{64, 256, 1024, 4096, 65536, 1048576}
	}
	if err := checkNames(o); err != nil {
		return nil, err
	}
	return o, nil
}

// checkNames fails at once, with fi_getinfo's -FI_ENODATA, when -p or -d
// names a provider or domain that no fi_getinfo entry has, whatever the
// endpoint type: the C program finds out only after its control channel
// is up, and its peer then sees nothing but the channel closing.
func checkNames(o *Options) error {
	if o.Provider == "" && o.Domain == "" {
		return nil
	}
	h := fabric.AllocInfo()
	h.FabricAttr.ProvName = o.Provider
	h.DomainAttr.Name = o.Domain
	if _, err := fabric.GetInfo("", "", 0, h); err != nil {
		var names []string
		for _, p := range fabric.Providers() {
			names = append(names, p.Name())
		}
		what := fmt.Sprintf("provider %q", o.Provider)
		switch {
		case o.Provider == "":
			what = fmt.Sprintf("domain %q", o.Domain)
		case o.Domain != "":
			what = fmt.Sprintf("domain %q of provider %q", o.Domain, o.Provider)
		}
		return fmt.Errorf("fi_getinfo(): ret=-%d: no %s (providers: %s): %w", int(fabric.ErrNoData), what, strings.Join(names, ", "), err)
	}
	return nil
}

func usage(w io.Writer) {
	fmt.Fprintf(w, "\nUsage:\n  fi_pingpong [OPTIONS]\t\tstart server\n  fi_pingpong [OPTIONS] <srv_addr>\tconnect to server\n\nOptions:\n")
	getopt.PrintUsage(w, specs)
}

// allSizes is -S all: 0, 1, then 2^i and 2^i + 2^(i-1) up to the largest
// message.
func allSizes() []int {
	s := []int{0, 1}
	for i := 1; 1<<i <= maxDataMsg; i++ {
		s = append(s, 1<<i)
		if n := 1<<i + 1<<(i-1); n <= maxDataMsg {
			s = append(s, n)
		}
	}
	return s
}

// ExitStatus is the process's exit status for Run's error: fi_pingpong
// exits with the negated libfabric return code, which an exit status
// holds only up to 255. libfabric's own codes (FI_EOTHER, 256, and up)
// would wrap to success, or to an unrelated errno, so every error gives
// at least 1 and those above 255 give 255.
func ExitStatus(err error) int {
	if err == nil {
		return 0
	}
	if errors.Is(err, errUsage) {
		return 1
	}
	var e fabric.Errno
	if errors.As(err, &e) {
		return min(max(int(e), 1), 255)
	}
	return 1
}

// ---- The control channel ----

// ctrl is the out-of-band TCP connection.
type ctrl struct {
	c net.Conn
}

const ctrlTimeout = 5 * time.Second

// send writes one control message in one write, as the C program's reader
// takes each with a single read.
func (c *ctrl) send(b []byte) error {
	c.c.SetWriteDeadline(time.Now().Add(ctrlTimeout))
	_, err := c.c.Write(b)
	return err
}

func (c *ctrl) recv(n int) ([]byte, error) {
	b := make([]byte, n)
	c.c.SetReadDeadline(time.Now().Add(ctrlTimeout))
	if _, err := io.ReadFull(c.c, b); err != nil {
		if errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) {
			// As the C program: the peer closed the control
			// connection (it failed, say): ECONNABORTED.
			return nil, fmt.Errorf("ctrl/read: no data or remote connection closed: %w (%w)", err, fabric.ErrConnAborted)
		}
		return nil, fmt.Errorf("ctrl/read: no data or remote connection closed: %w", err)
	}
	return b, nil
}

// sendName sends an endpoint name: its length (big-endian), the address
// format (host order) and fi_getname's bytes.
func (c *ctrl) sendName(f fabric.AddrFormat, name []byte) error {
	var n [4]byte
	binary.BigEndian.PutUint32(n[:], uint32(len(name)))
	if err := c.send(n[:]); err != nil {
		return err
	}
	binary.LittleEndian.PutUint32(n[:], uint32(f))
	if err := c.send(n[:]); err != nil {
		return err
	}
	return c.send(name)
}

// maxAddrLen is the longest name the C program takes (PP_MAX_ADDRLEN).
const maxAddrLen = 1024

func (c *ctrl) recvName() (fabric.AddrFormat, []byte, error) {
	b, err := c.recv(4)
	if err != nil {
		return 0, nil, err
	}
	n := binary.BigEndian.Uint32(b)
	if n == 0 || n > maxAddrLen {
		return 0, nil, fmt.Errorf("the peer sent a name of %d bytes (1 to %d)", n, maxAddrLen)
	}
	if b, err = c.recv(4); err != nil {
		return 0, nil, err
	}
	f := fabric.AddrFormat(binary.LittleEndian.Uint32(b))
	if b, err = c.recv(int(n)); err != nil {
		return 0, nil, err
	}
	return f, b, nil
}

// sync is the per-size handshake: the client asks "q", the server
// answers "a".
func (c *ctrl) sync(server bool) error {
	if server {
		if _, err := c.recv(2); err != nil {
			return err
		}
		return c.send([]byte("a\x00"))
	}
	if err := c.send([]byte("q\x00")); err != nil {
		return err
	}
	_, err := c.recv(2)
	return err
}

// exchangeCount sends the client's receive count (10 bytes, decimal, NUL
// padded) and takes "cnt ok"; the server returns the count as its #ack.
func (c *ctrl) exchangeCount(server bool, received int) (int, error) {
	if server {
		b, err := c.recv(10)
		if err != nil {
			return 0, err
		}
		n, err := strconv.Atoi(strings.TrimRight(string(b), "\x00"))
		if err != nil {
			return 0, fmt.Errorf("count message %q", b)
		}
		return n, c.send([]byte("cnt ok\x00"))
	}
	b := make([]byte, 10)
	copy(b, strconv.Itoa(received))
	if err := c.send(b); err != nil {
		return 0, err
	}
	_, err := c.recv(7)
	return received, err
}

// openCtrl opens the control channel: the server accepts one connection
// on -B, the client connects to the server's -P.
func openCtrl(ctx context.Context, o *Options) (*ctrl, error) {
	if o.Server == "" {
		network := "tcp4"
		if o.IPv6 {
			network = "tcp6"
		}
		var lc net.ListenConfig
		ln, err := lc.Listen(ctx, network, ":"+strconv.Itoa(o.SrcPort))
		if err != nil {
			return nil, fmt.Errorf("ctrl/bind: %w", err)
		}
		defer ln.Close()
		stop := context.AfterFunc(ctx, func() { ln.Close() })
		defer stop()
		c, err := ln.Accept()
		if err != nil {
			return nil, fmt.Errorf("ctrl/accept: %w", err)
		}
		return &ctrl{c: c}, nil
	}
	d := net.Dialer{Timeout: ctrlTimeout}
	if o.SrcPort != 0 {
		d.LocalAddr = &net.TCPAddr{Port: o.SrcPort}
	}
	network := "tcp4"
	if o.IPv6 {
		network = "tcp6"
	}
	c, err := d.DialContext(ctx, network, net.JoinHostPort(o.Server, strconv.Itoa(o.DstPort)))
	if err != nil {
		return nil, fmt.Errorf("ctrl/connect: %w", err)
	}
	return &ctrl{c: c}, nil
}
