// Package riostream is `rdmago riostream`: rdma-core's riostream
// (librdmacm/examples/riostream.c), flag for flag and line for line,
// over package rsocket's iomaps, so that it runs against riostream on
// Linux. Each side maps its transfer buffer for the peer (riomap) and
// writes into the peer's (riowrite); the last byte of a transfer is a
// marker the receiver watches for, as no message announces the data.
// It prints rstream's table.
package riostream

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/netip"
	"runtime"
	"strings"
	"time"

	"github.com/rdmago/rdmago/internal/getopt"
	"github.com/rdmago/rdmago/internal/racesync"
	"github.com/rdmago/rdmago/internal/rsperf"
	"github.com/rdmago/rdmago/internal/tool"
	"github.com/rdmago/rdmago/rsocket"
)

// Options are riostream's settings.
type Options struct {
	rsperf.Flags
	Verify bool // -T v
}

// Defaults returns riostream's defaults.
func Defaults() Options {
	return Options{Flags: rsperf.Defaults()}
}

// Usage prints riostream's usage text.
func Usage(w io.Writer) {
	fmt.Fprint(w, `usage: rdmago riostream
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
	[-T test_option]
	    a|async - asynchronous operation (use poll)
	    b|blocking - use blocking calls
	    n|nonblocking - use nonblocking calls
	    v|verify - verify data
`)
}

// The largest values of the numeric options (rsperf's).
const (
	MaxTransfer = rsperf.MaxTransfer
	MaxBuffer   = rsperf.MaxBuffer
	MaxInline   = rsperf.MaxInline
)

// ParseArgs parses riostream's command line: getopt "s:b:f:B:i:I:C:S:p:T:".
// A bad option or -T value prints the usage, and the error exits 1 as
// riostream does.
func ParseArgs(args []string, stdout, stderr io.Writer) (Options, error) {
	o := Defaults()
	p := rsperf.Parser{Tool: "riostream", Optstring: "s:b:f:B:i:I:C:S:p:T:", Usage: Usage,
		Other: func(op getopt.Option, _ func(getopt.Option) (int, error)) (bool, error) {
			return setTestOpt(&o, op.Arg), nil // -T
		}}
	if err := p.Parse(&o.Flags, args, stdout, stderr); err != nil {
		return o, err
	}
	switch {
	case o.Custom && o.Size == 0:
		fmt.Fprintln(stderr, "rdmago riostream: -S 0: a transfer needs at least one byte (its last byte is the marker)")
		return o, &tool.ExitError{Status: 1, Msg: "bad size"}
	case o.Custom && o.Count == 0:
		// riostream's first transfer of each round is its last.
		fmt.Fprintln(stderr, "rdmago riostream: -C 0: a round needs at least one transfer")
		return o, &tool.ExitError{Status: 1, Msg: "bad count"}
	}
	return o, nil
}

// setTestOpt takes one -T value (set_test_opt): a letter or a word.
func setTestOpt(o *Options, arg string) bool {
	c := byte(0)
	if len(arg) == 1 {
		c = arg[0]
	} else {
		for _, w := range []string{"async", "block", "nonblock", "verify"} {
			if len(arg) >= len(w) && strings.EqualFold(arg[:len(w)], w) {
				c = w[0]
			}
		}
	}
	switch c {
	case 'v':
		o.Verify = true
	case 'a', 'b', 'n':
		// Go's calls block their goroutine without holding a thread,
		// so async, blocking and nonblocking runs are one.
	default:
		return false
	}
	return true
}

// optimization is which way riostream tunes inline sends for a run.
type optimization int

const (
	optMixed optimization = iota
	optLatency
	optBandwidth
)

type session struct {
	ctx    context.Context
	o      Options
	out    io.Writer
	errw   io.Writer
	ln     *rsocket.Listener
	buf    []byte
	txData byte // format_buf's running byte
	rxData byte // verify_buf's running byte
	rxSeen int64
}

// Run runs riostream with o: as the client if o.Dst is set, else as the
// server. It returns a *tool.ExitError with riostream's status on failure.
func Run(ctx context.Context, o Options, stdout, stderr io.Writer) error {
	s := &session{ctx: ctx, o: o, out: stdout, errw: stderr}
	n := rsperf.MaxSize()
	if o.Custom {
		n = o.Size
	}
	// The start exchange moves 16 bytes of the buffer, more than a
	// custom run's transfers of 1 to 15 bytes.
	s.buf = make([]byte, max(n, syncSize))
	if o.Dst == "" {
		lc := rsocket.ListenConfig{Config: s.config(optLatency)}
		ln, err := lc.Listen(ctx, "tcp", net.JoinHostPort(o.Src, o.Port))
		if err != nil {
			fmt.Fprintf(stderr, "rlisten: %v\n", err)
			return &tool.ExitError{Status: 255, Msg: "listen"}
		}
		s.ln = ln
		defer ln.Close()
	}
	rsperf.Heading(stdout)
	if o.Custom {
		c, err := s.connect(optMixed)
		if err != nil {
			return err
		}
		defer c.Close()
		return s.runTest(c, rsperf.Test{Name: "custom", Size: o.Size, Count: o.Count, Iter: o.Iterations})
	}
	for _, opt := range []optimization{optLatency, optBandwidth} {
		c, err := s.connect(opt)
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
			if err := s.runTest(c, t); err != nil {
				// riostream goes on after a failed size, but a lost
				// marker leaves the two sides out of step for good.
				c.Close()
				return err
			}
		}
		c.Close() // rshutdown(SHUT_RDWR), rclose
	}
	return nil
}

// config is set_options: 512 KiB buffers unless -B, a one-entry iomap
// (RDMA_IOMAPSIZE 1), and inline sends by optimization.
func (s *session) config(opt optimization) rsocket.Config {
	b := s.o.Buffer
	if b == 0 {
		b = 1 << 19
	}
	cfg := rsocket.Config{RecvBuffer: b << 1, SendBuffer: b << 1, KeepAlive: -1, IOMapSize: 1}
	switch opt {
	case optLatency:
		cfg.InlineSize = s.o.Inline
		if cfg.InlineSize == 0 {
			cfg.InlineSize = -1
		}
	case optBandwidth:
		cfg.InlineSize = -1
	}
	return cfg
}

// connect makes the run's connection (server_connect, client_connect).
func (s *session) connect(opt optimization) (*rsocket.Conn, error) {
	if s.o.Dst == "" {
		s.ln.SetConfig(s.config(opt))
		c, err := s.ln.AcceptRsocket(s.ctx)
		if err != nil {
			fmt.Fprintf(s.errw, "raccept: %v\n", err)
			return nil, &tool.ExitError{Status: 255, Msg: "accept"}
		}
		return c, nil
	}
	d := rsocket.Dialer{Config: s.config(opt)}
	if s.o.Src != "" {
		a, err := netip.ParseAddr(s.o.Src)
		if err != nil {
			fmt.Fprintf(s.out, "getaddrinfo src_addr: %v\n", err)
			return nil, &tool.ExitError{Status: 255, Msg: "src_addr"}
		}
		d.LocalAddr = netip.AddrPortFrom(a, 0)
	}
	c, err := d.Dial(s.ctx, "tcp", net.JoinHostPort(s.o.Dst, s.o.Port))
	if err != nil {
		fmt.Fprintf(s.errw, "rconnect: %v\n", err)
		return nil, &tool.ExitError{Status: 255, Msg: "connect"}
	}
	return c, nil
}

// syncSize is the size of run_test's start exchange (sync_test).
const syncSize = 16

// runTest is run_test: map the transfer buffer, exchange 16 bytes to
// start together, then iter rounds: the client writes count transfers
// into the server's buffer, the last with a new marker in its last
// byte, and the server, once it sees the marker, writes count back.
func (s *session) runTest(c *rsocket.Conn, t rsperf.Test) error {
	client := s.o.Dst != ""
	buf := s.buf[:t.Size]
	poll := t.Size - 1
	buf[poll] = 0xff
	if _, err := c.IOMap(buf, rsocket.ProtWrite, 0); err != nil {
		fmt.Fprintf(s.errw, "riomap: %v\n", err)
		return &tool.ExitError{Status: 255, Msg: "riomap"}
	}
	defer c.IOUnmap(buf)
	if err := s.syncTest(c, client); err != nil {
		return err
	}
	var marker byte
	start := time.Now()
	for range t.Iter {
		if !client {
			if err := s.recvXfer(c, buf, marker); err != nil {
				return err
			}
			marker++
		}
		for range t.Count - 1 {
			if err := s.sendXfer(c, buf); err != nil {
				return err
			}
		}
		buf[poll] = marker
		marker++
		if s.o.Verify {
			s.format(buf[:poll])
		}
		if err := s.sendXfer(c, buf); err != nil {
			return err
		}
		if client {
			if err := s.recvXfer(c, buf, marker); err != nil {
				return err
			}
			marker++
		}
	}
	usec := float64(time.Since(start).Microseconds())
	rsperf.Row(s.out, t, usec)
	return nil
}

// syncTest is sync_test: the client sends 16 bytes of the buffer and
// reads 16 back; the server the other way round.
func (s *session) syncTest(c *rsocket.Conn, client bool) error {
	b := s.buf[:syncSize]
	for _, send := range []bool{client, !client} {
		if send {
			if _, err := c.Write(b); err != nil {
				fmt.Fprintf(s.errw, "rsend: %v\n", err)
				return &tool.ExitError{Status: 255, Msg: "send"}
			}
			continue
		}
		if _, err := io.ReadFull(c, b); err != nil {
			fmt.Fprintf(s.errw, "rrecv: %v\n", err)
			return &tool.ExitError{Status: 255, Msg: "recv"}
		}
	}
	return nil
}

// sendXfer is send_xfer: buf into the peer's buffer at offset 0.
func (s *session) sendXfer(c *rsocket.Conn, buf []byte) error {
	if _, err := c.IOWrite(buf, 0); err != nil {
		fmt.Fprintf(s.errw, "riowrite: %v\n", err)
		return &tool.ExitError{Status: 255, Msg: "riowrite"}
	}
	return nil
}

// recvXfer is recv_xfer: it waits until the peer's writes put marker in
// the buffer's last byte, then with -T v checks the rest. riostream
// spins on the byte; this spins a little, then sleeps between looks, and
// gives up if the run is canceled.
func (s *session) recvXfer(c *rsocket.Conn, buf []byte, marker byte) error {
	last := &buf[len(buf)-1]
	for spins := 0; loadByte(last) != marker; spins++ {
		if spins < 100 {
			runtime.Gosched()
			continue
		}
		// Spinning longer would keep the processor from the device's
		// goroutines, and, on a small machine, from the peer.
		if err := s.ctx.Err(); err != nil {
			fmt.Fprintf(s.errw, "riostream: waiting for the peer's data: %v\n", err)
			return &tool.ExitError{Status: 255, Msg: "canceled"}
		}
		time.Sleep(10 * time.Microsecond)
	}
	if racesync.Enabled {
		// The device's goroutine tells the race detector of its write
		// just after making it; let it, before reading the buffer.
		time.Sleep(2 * time.Millisecond)
		racesync.Sync()
	}
	if s.o.Verify {
		for i, b := range buf[:len(buf)-1] {
			if b != s.rxData {
				fmt.Fprintf(s.out, "data verification failed byte %d\n", s.rxSeen+int64(i))
				return &tool.ExitError{Status: 255, Msg: "verify"}
			}
			s.rxData++
		}
		s.rxSeen += int64(len(buf) - 1)
	}
	return nil
}

// loadByte reads *p, which the peer's RDMA WRITEs change from the
// device's goroutines with nothing else to say when. It is kept from the
// race detector, which cannot see that ordering (what follows the
// marker is ordered by racesync), and from inlining, so that each look
// loads the byte anew.
//
//go:norace
//go:noinline
func loadByte(p *byte) byte { return *p }

// format is format_buf: the running byte pattern the peer's verify_buf
// checks.
func (s *session) format(b []byte) {
	for i := range b {
		b[i] = s.txData
		s.txData++
	}
}
