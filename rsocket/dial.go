package rsocket

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"os"
	"sync"
	"time"

	"github.com/rdmago/rdmago/rdmacm"
	"github.com/rdmago/rdmago/verbs"
)

// newConn makes the Conn a connection attempt under cfg fills in.
func newConn(cfg *Config) *Conn {
	c := &Conn{ka0: cfg.keepAlive(), pollTime: cfg.pollTime()}
	c.rbufSize, c.sbufSize, c.qsize, c.inline = cfg.sizes()
	c.iomapSize = cfg.iomapSize()
	return c
}

// cmOptions are the connection manager options of an rsocket under cfg
// (rs_create_ep's QP, rs_do_connect's connection parameters).
func cmOptions(cfg *Config) *rdmacm.Options {
	_, _, qsize, inline := cfg.sizes()
	return &rdmacm.Options{
		Cap: verbs.QPCap{
			MaxSendWR: uint32(qsize), MaxRecvWR: uint32(qsize),
			MaxSendSGE: 2, MaxRecvSGE: 1, MaxInlineData: uint32(max(inline, sgeLen)),
		},
		SQSigAll: true,
		SharedCQ: true,
		Param:    &rdmacm.ConnParam{FlowControl: 1, RetryCount: 7, RNRRetryCount: 7},
	}
}

// setupOn prepares c on a new connection: the ACK timeout, then memory
// and receives.
func (c *Conn) setupOn(rc *rdmacm.Conn, cfg *Config) error {
	if cfg.ACKTimeout != 0 {
		if err := rc.ID.SetACKTimeout(cfg.ACKTimeout); err != nil {
			return err
		}
	}
	c.release() // what an earlier address's attempt made
	if err := c.setup(rc); err != nil {
		c.release()
		return err
	}
	return nil
}

func checkNetwork(network string) error {
	switch network {
	case "rsocket", "tcp", "tcp4", "tcp6":
		return nil
	}
	return net.UnknownNetworkError(network)
}

// A Dialer connects rsockets with its Config, from LocalAddr if set.
type Dialer struct {
	Config
	// LocalAddr is the address to connect from (rbind before
	// rconnect); the zero value lets address resolution choose.
	LocalAddr netip.AddrPort
}

// Dial connects to address ("host:port") with the default Config: an
// rsocket connection (rsocket, rconnect) over the RDMA device that
// reaches the host. network is "rsocket", or "tcp", "tcp4" or "tcp6" as
// the rsocket port space is rdma_cm's TCP space; an rsocket port is not
// a kernel TCP port.
func Dial(ctx context.Context, network, address string) (*Conn, error) {
	var d Dialer
	return d.Dial(ctx, network, address)
}

// Dial connects to address as the package's Dial does, with d's Config.
func (d *Dialer) Dial(ctx context.Context, network, address string) (*Conn, error) {
	fail := func(err error) (*Conn, error) {
		return nil, &net.OpError{Op: "dial", Net: "rsocket", Err: err}
	}
	if err := checkNetwork(network); err != nil {
		return fail(err)
	}
	c := newConn(&d.Config)
	opts := cmOptions(&d.Config)
	opts.LocalAddr = d.LocalAddr
	opts.Setup = func(rc *rdmacm.Conn) error { return c.setupOn(rc, &d.Config) }
	opts.ConnData = func(*rdmacm.Conn) ([]byte, error) { return c.connData(), nil }
	opts.Undo = func(*rdmacm.Conn) { c.release() }
	rc, err := rdmacm.Dial(ctx, address, opts)
	if err != nil {
		return fail(err)
	}
	peer, err := ParseConnData(rc.PrivateData)
	if err != nil {
		rc.Close()
		c.release()
		return fail(fmt.Errorf("connecting to %v: %w", rc.RemoteAddr(), err))
	}
	c.start(peer)
	return c, nil
}

// DialContext is Dial returning a net.Conn, the signature of
// net/http.Transport's DialContext.
func (d *Dialer) DialContext(ctx context.Context, network, address string) (net.Conn, error) {
	c, err := d.Dial(ctx, network, address)
	if err != nil {
		return nil, err
	}
	return c, nil
}

// Listener accepts rsocket connections (rlisten, raccept). It
// implements net.Listener.
type Listener struct {
	l    *rdmacm.Listener
	base Config        // Listen's, whose sizes the QPs have
	done chan struct{} // closed by Close

	mu      sync.Mutex
	cfg     Config
	pending map[*rdmacm.Conn]*Conn // accepted and not yet established
	closed  bool
}

// A ListenConfig listens with its Config, which the accepted
// connections take.
type ListenConfig struct {
	Config
}

// Listen listens for rsocket connections on address ("host:port"; an
// empty host means every address, port 0 a free one) with the default
// Config. network is as for Dial.
func Listen(network, address string) (*Listener, error) {
	var lc ListenConfig
	return lc.Listen(context.Background(), network, address)
}

// Listen listens as the package's Listen does, with lc's Config. ctx is
// not used once Listen returns.
func (lc *ListenConfig) Listen(ctx context.Context, network, address string) (*Listener, error) {
	if err := checkNetwork(network); err != nil {
		return nil, &net.OpError{Op: "listen", Net: "rsocket", Err: err}
	}
	if err := ctx.Err(); err != nil {
		return nil, &net.OpError{Op: "listen", Net: "rsocket", Err: err}
	}
	l := &Listener{base: lc.Config, cfg: lc.Config, pending: map[*rdmacm.Conn]*Conn{}, done: make(chan struct{})}
	opts := cmOptions(&l.cfg)
	opts.Setup = l.setup
	opts.ConnData = func(rc *rdmacm.Conn) ([]byte, error) { return l.conn(rc, false).connData(), nil }
	opts.Undo = func(rc *rdmacm.Conn) { l.conn(rc, true).release() }
	rl, err := rdmacm.Listen(address, opts)
	if err != nil {
		return nil, &net.OpError{Op: "listen", Net: "rsocket", Err: err}
	}
	l.l = rl
	return l, nil
}

// setup checks a connection request's data (rs_accept rejects any
// version but 1) and prepares its Conn.
func (l *Listener) setup(rc *rdmacm.Conn) error {
	if _, err := ParseConnData(rc.PrivateData); err != nil {
		return err
	}
	cfg := l.config()
	c := newConn(&cfg)
	if err := c.setupOn(rc, &cfg); err != nil {
		return err
	}
	l.mu.Lock()
	l.pending[rc] = c
	l.mu.Unlock()
	return nil
}

// config returns the Config new connections take.
func (l *Listener) config() Config {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.cfg
}

// SetConfig changes the Config of the connections accepted from now on
// (rsetsockopt on a listening rsocket, whose options its accepted
// sockets inherit). The queue size stays the one Listen had, and the
// inline size may only shrink: the QPs are made with Listen's.
func (l *Listener) SetConfig(cfg Config) {
	l.mu.Lock()
	defer l.mu.Unlock()
	_, _, _, had := l.base.sizes()
	cfg.QueueSize = l.base.QueueSize
	if _, _, _, want := cfg.sizes(); want > had {
		cfg.InlineSize = l.base.InlineSize
	}
	l.cfg = cfg
}

// conn returns the Conn set up for rc, and forgets it if done.
func (l *Listener) conn(rc *rdmacm.Conn, done bool) *Conn {
	l.mu.Lock()
	defer l.mu.Unlock()
	c := l.pending[rc]
	if done {
		delete(l.pending, rc)
	}
	return c
}

// Accept waits for the next connection (raccept). Requests that fail to
// connect are dropped, as rsockets drops them; Accept returns an error
// only once the listener is closed.
func (l *Listener) Accept() (net.Conn, error) {
	return l.AcceptRsocket(context.Background())
}

// AcceptRsocket is Accept returning the *Conn, bounded by ctx.
func (l *Listener) AcceptRsocket(ctx context.Context) (*Conn, error) {
	backoff := 5 * time.Millisecond
	for {
		rc, err := l.l.Accept(ctx)
		if err == nil {
			c := l.conn(rc, true)
			peer, _ := ParseConnData(rc.PrivateData) // setup checked it
			c.start(peer)
			return c, nil
		}
		if errors.Is(err, verbs.ErrClosed) {
			return nil, &net.OpError{Op: "accept", Net: "rsocket", Addr: l.Addr(), Err: net.ErrClosed}
		}
		if ctx.Err() != nil {
			return nil, &net.OpError{Op: "accept", Net: "rsocket", Addr: l.Addr(), Err: ctx.Err()}
		}
		// One request failed: wait a little, in case the cause is not
		// the request's, and take the next.
		t := time.NewTimer(backoff)
		select {
		case <-t.C:
		case <-ctx.Done():
		case <-l.done:
		}
		t.Stop()
		backoff = min(2*backoff, time.Second)
	}
}

// Close stops listening. Connections already accepted stay open. Close of
// a nil Listener, or of one that Listen did not make, returns an error
// wrapping os.ErrInvalid.
func (l *Listener) Close() error {
	if l == nil || l.l == nil {
		return &net.OpError{Op: "close", Net: "rdma", Err: os.ErrInvalid}
	}
	l.mu.Lock()
	if !l.closed {
		l.closed = true
		close(l.done)
	}
	l.mu.Unlock()
	return l.l.Close()
}

// Addr returns the address the listener is bound to.
func (l *Listener) Addr() net.Addr { return Addr{l.l.Addr()} }

var _ net.Listener = (*Listener)(nil)
