// Package rstream is `rdmago rstream`: rdma-core's rstream
// (librdmacm/examples/rstream.c), flag for flag and line for line, over
// package rsocket, so that it streams to and from rstream on Linux. It
// times ping-pongs and one-way bursts over one connection and prints
// rstream's table.
package rstream

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/netip"
	"strings"
	"time"

	"github.com/rdmago/rdmago/internal/getopt"
	"github.com/rdmago/rdmago/internal/rsperf"
	"github.com/rdmago/rdmago/internal/tool"
	"github.com/rdmago/rdmago/rsocket"
	"github.com/rdmago/rdmago/verbs"
)

// Options are rstream's settings.
type Options struct {
	rsperf.Flags
	KeepAlive int  // -k seconds
	Sockets   bool // -T s (and f): TCP sockets instead of rsockets
	Verify    bool // -T v
}

// Defaults returns rstream's defaults.
func Defaults() Options {
	return Options{Flags: rsperf.Defaults()}
}

// Usage prints rstream's usage text.
func Usage(w io.Writer) {
	fmt.Fprint(w, `usage: rdmago rstream
	[-s server_address]
	[-b bind_address]
	[-f address_format]
	    name, ip, ipv6, or gid
	[-B buffer_size]
	[-i inline_size]
	[-I iterations]
	[-C transfer_count]
	[-S transfer_size or all]
	[-p port_number]
	[-k keepalive_time]
	[-T test_option]
	    s|sockets - use standard tcp/ip sockets
	    a|async - asynchronous operation (use poll)
	    b|blocking - use blocking calls
	    f|fork - fork server processing
	    n|nonblocking - use nonblocking calls
	    r|resolve - use rdma cm to resolve address
	    v|verify - verify data
`)
}

// The largest values of the numeric options (rsperf's).
const (
	MaxTransfer = rsperf.MaxTransfer
	MaxBuffer   = rsperf.MaxBuffer
	MaxInline   = rsperf.MaxInline
)

// ParseArgs parses rstream's command line: getopt "s:b:f:B:i:I:C:S:p:k:T:".
// A bad option or -T value prints the usage, and the error exits 1 as
// rstream does.
func ParseArgs(args []string, stdout, stderr io.Writer) (Options, error) {
	o := Defaults()
	p := rsperf.Parser{Tool: "rstream", Optstring: "s:b:f:B:i:I:C:S:p:k:T:", Usage: Usage,
		Other: func(op getopt.Option, num func(getopt.Option) (int, error)) (ok bool, err error) {
			if op.Name == 'k' {
				o.KeepAlive, err = num(op)
				return true, err
			}
			return setTestOpt(&o, op.Arg), nil // -T
		}}
	if err := p.Parse(&o.Flags, args, stdout, stderr); err != nil {
		return o, err
	}
	if o.Custom && o.Size == 0 {
		fmt.Fprintln(stderr, "rdmago rstream: -S 0: a transfer needs at least one byte")
		return o, &tool.ExitError{Status: 1, Msg: "bad size"}
	}
	return o, nil
}

// setTestOpt takes one -T value (set_test_opt): a letter or a word.
func setTestOpt(o *Options, arg string) bool {
	words := map[string]byte{"socket": 's', "async": 'a', "block": 'b', "fork": 'f', "nonblock": 'n', "resolve": 'r', "verify": 'v'}
	c := byte(0)
	if len(arg) == 1 {
		c = arg[0]
	} else {
		// rstream matches each word by its prefix of the word's length;
		// "nonblock" before "block" is irrelevant since neither is a
		// prefix of the other at that length.
		for w, l := range words {
			if len(arg) >= len(w) && strings.EqualFold(arg[:len(w)], w) {
				c = l
			}
		}
	}
	switch c {
	case 's', 'f':
		// -T f forks a server per connection in C; a Go process does
		// not fork, and serves its one connection itself over sockets.
		o.Sockets = true
	case 'v':
		o.Verify = true
	case 'a', 'b', 'n', 'r':
		// Go's calls block their goroutine without holding a thread,
		// so async, blocking and nonblocking runs are one; rsocket
		// resolves addresses with rdma_getaddrinfo always.
	default:
		return false
	}
	return true
}

// optimization is which way rstream tunes inline sends for a run.
type optimization int

const (
	optMixed optimization = iota
	optLatency
	optBandwidth
)

// session is one side of a run.
type session struct {
	o      Options
	out    io.Writer
	errw   io.Writer
	ln     net.Listener
	buf    []byte
	txData byte // format_buf's running byte
	rxData byte // verify_buf's running byte
	rxSeen int64
}

// Run runs rstream with o: as the client if o.Dst is set, else as the
// server. It returns a *tool.ExitError with rstream's status on failure.
func Run(ctx context.Context, o Options, stdout, stderr io.Writer) error {
	s := &session{o: o, out: stdout, errw: stderr}
	if err := checkInlineFor(o, stderr); err != nil {
		return err
	}
	n := rsperf.MaxSize()
	if o.Custom {
		n = o.Size
	}
	// The buffer also carries run_test's 16-byte start exchange, larger
	// than a custom run's transfers of 1 to 15 bytes.
	s.buf = make([]byte, max(n, syncSize))
	if o.Dst == "" {
		if err := s.listen(ctx); err != nil {
			return err
		}
		defer s.ln.Close()
	}
	rsperf.Heading(stdout)
	if o.Custom {
		c, err := s.connect(ctx, optMixed)
		if err != nil {
			return err
		}
		defer c.Close()
		return s.runTest(c, rsperf.Test{Name: "custom", Size: o.Size, Count: o.Count, Iter: o.Iterations})
	}
	for _, opt := range []optimization{optLatency, optBandwidth} {
		c, err := s.connect(ctx, opt)
		if err != nil {
			return err
		}
		for _, ts := range rsperf.Sizes {
			if ts.All && !o.AllSizes {
				continue
			}
			t := rsperf.Latency(ts.Bytes)
			if opt == optBandwidth {
				t = rsperf.Bandwidth(ts.Bytes)
			}
			s.runTest(c, t) // rstream goes on after a failed size
		}
		c.Close() // rshutdown(SHUT_RDWR), rclose
	}
	return nil
}

// checkInlineFor refuses an -i larger than a device can post inline: the
// QPs of the connections would not be made, and a server would reject
// every client (rs_create_ep's rdma_create_qp fails on the device's
// max_inline_data). The bound is the smallest of the devices', as
// either side may run on any of them.
func checkInlineFor(o Options, stderr io.Writer) error {
	inline := o.Inline
	if o.Sockets || inline <= 64 { // TCP sockets; rsockets' own default
		return nil
	}
	devs, err := verbs.Devices()
	if err != nil {
		return nil // rsocket says why when it connects
	}
	limit, name := -1, ""
	for _, d := range devs {
		ctx, err := d.Open()
		if err != nil {
			continue
		}
		attr, err := ctx.QueryDevice()
		ctx.Close()
		if err == nil && attr.MaxInlineData > 0 && (limit < 0 || attr.MaxInlineData < limit) {
			limit, name = attr.MaxInlineData, d.Name()
		}
	}
	if limit >= 0 && inline > limit {
		fmt.Fprintf(stderr, "rdmago rstream: -i %d: device %s sends at most %d bytes inline (its max_inline_data)\n", inline, name, limit)
		return &tool.ExitError{Status: 1, Msg: "inline size"}
	}
	return nil
}

func (s *session) config(opt optimization) rsocket.Config {
	b := s.o.Buffer
	if b == 0 {
		b = 1 << 19
	}
	cfg := rsocket.Config{RecvBuffer: b << 1, SendBuffer: b << 1, KeepAlive: -1}
	switch opt {
	case optLatency:
		cfg.InlineSize = s.o.Inline
		if cfg.InlineSize == 0 {
			cfg.InlineSize = -1
		}
	case optBandwidth:
		cfg.InlineSize = -1
	}
	if s.o.KeepAlive > 0 {
		cfg.KeepAlive = time.Duration(s.o.KeepAlive) * time.Second
	}
	return cfg
}

func (s *session) network() string { return "tcp" }

func (s *session) listen(ctx context.Context) error {
	addr := net.JoinHostPort(s.o.Src, s.o.Port)
	var err error
	if s.o.Sockets {
		var lc net.ListenConfig
		s.ln, err = lc.Listen(ctx, s.network(), addr)
	} else {
		lc := rsocket.ListenConfig{Config: s.config(optLatency)} // its QPs take -i inline bytes
		s.ln, err = lc.Listen(ctx, s.network(), addr)
	}
	if err != nil {
		fmt.Fprintf(s.errw, "rlisten: %v\n", err)
		return &tool.ExitError{Status: 255, Msg: "listen"}
	}
	return nil
}

// connect makes the run's connection: the server accepts, the client
// dials (server_connect, client_connect).
func (s *session) connect(ctx context.Context, opt optimization) (net.Conn, error) {
	var c net.Conn
	var err error
	if s.o.Dst == "" {
		if l, ok := s.ln.(*rsocket.Listener); ok {
			l.SetConfig(s.config(opt)) // set_options on the listening rsocket
		}
		c, err = s.accept(ctx)
		if err != nil {
			fmt.Fprintf(s.errw, "raccept: %v\n", err)
			return nil, &tool.ExitError{Status: 255, Msg: "accept"}
		}
	} else {
		addr := net.JoinHostPort(s.o.Dst, s.o.Port)
		if s.o.Sockets {
			d := net.Dialer{}
			if s.o.Src != "" {
				d.LocalAddr = &net.TCPAddr{IP: net.ParseIP(s.o.Src)}
			}
			c, err = d.DialContext(ctx, s.network(), addr)
		} else {
			d := rsocket.Dialer{Config: s.config(opt)}
			if s.o.Src != "" {
				a, perr := netip.ParseAddr(s.o.Src)
				if perr != nil {
					fmt.Fprintf(s.out, "getaddrinfo src_addr: %v\n", perr)
					return nil, &tool.ExitError{Status: 255, Msg: "src_addr"}
				}
				d.LocalAddr = netip.AddrPortFrom(a, 0)
			}
			c, err = d.Dial(ctx, s.network(), addr)
		}
		if err != nil {
			fmt.Fprintf(s.errw, "rconnect: %v\n", err)
			return nil, &tool.ExitError{Status: 255, Msg: "connect"}
		}
	}
	if s.o.KeepAlive > 0 && !s.o.Sockets {
		fmt.Fprintf(s.out, "Keepalive: ON\n  time: %d\n", s.o.KeepAlive)
	}
	return c, nil
}

// accept takes the next connection. Accepted rsockets take the
// listener's Config, as raccept's take the listening rsocket's options.
func (s *session) accept(ctx context.Context) (net.Conn, error) {
	if l, ok := s.ln.(*rsocket.Listener); ok {
		return l.AcceptRsocket(ctx)
	}
	type result struct {
		c   net.Conn
		err error
	}
	done := make(chan result, 1)
	go func() {
		c, err := s.ln.Accept()
		done <- result{c, err}
	}()
	select {
	case r := <-done:
		return r.c, r.err
	case <-ctx.Done():
		s.ln.Close()
		r := <-done
		if r.c != nil {
			r.c.Close()
		}
		return nil, ctx.Err()
	}
}

// syncSize is the size of run_test's start exchange (sync_test).
const syncSize = 16

// runTest is run_test: a 16-byte exchange to start together, then
// iter rounds of count transfers each way, timed.
func (s *session) runTest(c net.Conn, t rsperf.Test) error {
	client := s.o.Dst != ""
	if err := s.xfer(c, syncSize, client); err != nil {
		return err
	}
	if err := s.xfer(c, syncSize, !client); err != nil {
		return err
	}
	start := time.Now()
	for range t.Iter {
		for range t.Count {
			if err := s.xfer(c, t.Size, client); err != nil {
				return err
			}
		}
		for range t.Count {
			if err := s.xfer(c, t.Size, !client); err != nil {
				return err
			}
		}
	}
	usec := float64(time.Since(start).Microseconds())
	rsperf.Row(s.out, t, usec)
	return nil
}

// xfer sends or receives one transfer of size bytes (send_xfer,
// recv_xfer), with -T v filling and checking the bytes.
func (s *session) xfer(c net.Conn, size int, send bool) error {
	b := s.buf[:size]
	if send {
		if s.o.Verify {
			for i := range b {
				b[i] = s.txData
				s.txData++
			}
		}
		if _, err := c.Write(b); err != nil {
			fmt.Fprintf(s.errw, "rsend: %v\n", err)
			return &tool.ExitError{Status: 255, Msg: "send"}
		}
		return nil
	}
	if _, err := io.ReadFull(c, b); err != nil {
		fmt.Fprintf(s.errw, "rrecv: %v\n", err)
		return &tool.ExitError{Status: 255, Msg: "recv"}
	}
	if s.o.Verify {
		for i := range b {
			if b[i] != s.rxData {
				fmt.Fprintf(s.out, "data verification failed byte %d\n", s.rxSeen)
				return &tool.ExitError{Status: 255, Msg: "verify"}
			}
			s.rxData++
			s.rxSeen++
		}
	}
	return nil
}
