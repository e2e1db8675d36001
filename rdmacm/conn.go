package rdmacm

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"sync"
	"time"

	"github.com/rdmago/rdmago/verbs"
)

// This file holds Go helpers over the connection manager: Listen and
// Dial set up a connected RC QP the way a C program does with an event
// channel (rdma_create_id, rdma_resolve_addr, rdma_resolve_route,
// rdma_create_qp, rdma_connect; rdma_bind_addr, rdma_listen,
// rdma_get_cm_event, rdma_accept), and hand back a Conn ready for data.
// Each connection has its own event channel, so that its events (the
// peer's disconnect) are its own.

// Options configure Dial and Listen. The zero value (or nil) is usable.
type Options struct {
	// Cap sizes the QP (struct ibv_qp_cap). Zero fields default to 16
	// send and 16 receive work requests of one SGE each.
	Cap verbs.QPCap
	// SQSigAll makes every send work request signaled.
	SQSigAll bool
	// SharedCQ gives the QP one completion queue for its send and receive
	// queues (Conn.SendCQ == Conn.RecvCQ), sized for both, as programs
	// that poll one CQ make it (rsocket does). Otherwise each queue has
	// its own. With one CQ, GetSendComp and GetRecvComp each take
	// whichever completion comes next, and the CQ's completion channel
	// is the send side's.
	SharedCQ bool
	// Param is what Connect or Accept offer (struct rdma_conn_param); nil
	// means rdma_cm's defaults.
	Param *ConnParam
	// PrivateData is sent with the connection request (Dial: at most 56
	// bytes) or its reply (Accept: at most 196 bytes). It replaces
	// Param.PrivateData.
	PrivateData []byte
	// LocalAddr is the address Dial connects from; zero means the one
	// address resolution picks. Listen ignores it.
	LocalAddr netip.AddrPort
	// Timeout bounds address and route resolution in Dial (default 2 s,
	// rdma_create_ep's).
	Timeout time.Duration
	// Backlog bounds the connection requests not yet accepted
	// (rdma_listen's backlog); 0 means rdma_cm's default.
	Backlog int
	// Setup, if set, is called with the connection once its QP exists and
	// before it is connected or accepted: the place to register memory
	// and post receives, so that the peer's first message finds one.
	// If it fails, Dial gives up and Accept rejects the request.
	Setup func(*Conn) error
	// ConnData, if set, is called after Setup and returns the private
	// data for this connection's request (Dial) or reply (Accept),
	// replacing PrivateData: the place for data that names what Setup
	// registered, such as an address and rkey. On Accept the request's
	// private data is in c.PrivateData. If it fails, Dial gives up and
	// Accept rejects the request.
	ConnData func(c *Conn) ([]byte, error)
	// Undo, if set, is called when Dial or Accept fails after Setup
	// succeeded, with the same connection and before its QP is
	// destroyed: the place to free what Setup made.
	Undo func(c *Conn)
}

// privateData returns the private data to offer on c: ConnData's, or
// nil to keep PrivateData.
func (o *Options) privateData(c *Conn) ([]byte, error) {
	if o.ConnData == nil {
		return nil, nil
	}
	pd, err := o.ConnData(c)
	if err == nil && pd == nil {
		pd = []byte{}
	}
	return pd, err
}

func (o *Options) qpAttr() *verbs.QPInitAttr {
	c := o.Cap
	if c.MaxSendWR == 0 {
		c.MaxSendWR = 16
	}
	if c.MaxRecvWR == 0 {
		c.MaxRecvWR = 16
	}
	if c.MaxSendSGE == 0 {
		c.MaxSendSGE = 1
	}
	if c.MaxRecvSGE == 0 {
		c.MaxRecvSGE = 1
	}
	return &verbs.QPInitAttr{QPType: verbs.QPTRC, Cap: c, SQSigAll: o.SQSigAll}
}

// connectParam is what Dial passes to Connect for id: nil for rdma_cm's
// defaults, unless private data must go with them. data, if not nil,
// replaces o.PrivateData.
func (o *Options) connectParam(id *ID, data []byte) *ConnParam {
	if data == nil {
		data = o.PrivateData
	}
	if o.Param == nil && data == nil {
		return nil
	}
	var p ConnParam
	if o.Param != nil {
		p = *o.Param
	} else {
		// Connect's defaults for a nil rdma_conn_param: the device's
		// limits, 7 retries, infinite RNR retries.
		if ctx := id.Verbs(); ctx != nil {
			if da, err := ctx.QueryDevice(); err == nil {
				p.ResponderResources = uint8(min(da.MaxQPRdAtom, 255))
				p.InitiatorDepth = uint8(min(da.MaxQPInitRdAtom, 255))
			}
		}
		p.RetryCount, p.RNRRetryCount = 7, 7
	}
	if data != nil {
		p.PrivateData = data
	}
	return &p
}

// acceptParam is what Accept passes to Accept for a request offering
// req. data, if not nil, replaces o.PrivateData.
func (o *Options) acceptParam(req ConnParam, data []byte) *ConnParam {
	if data == nil {
		data = o.PrivateData
	}
	if o.Param == nil && data == nil {
		return nil
	}
	var p ConnParam
	if o.Param != nil {
		p = *o.Param
	} else {
		// Accept's defaults for a nil rdma_conn_param: the peer's
		// resources mirrored, infinite RNR retries. The request's
		// parameters are already seen from this side (its
		// ResponderResources is the peer's initiator depth, as the
		// kernel's CONNECT_REQUEST event gives them), so they go back
		// as they are.
		p = ConnParam{ResponderResources: req.ResponderResources, InitiatorDepth: req.InitiatorDepth, RNRRetryCount: 7}
	}
	if data != nil {
		p.PrivateData = data
	}
	return &p
}

func (o *Options) timeout() time.Duration {
	if o.Timeout > 0 {
		return o.Timeout
	}
	return epTimeout
}

// Conn is an established RC connection: its ID and the verbs objects of
// its QP, ready for data. Post with the ID's helpers (PostSend,
// PostRecv, GetRecvComp, ...) or with the QP itself.
type Conn struct {
	ID     *ID
	PD     *verbs.PD // the QP's protection domain: register memory here
	QP     *verbs.QP
	SendCQ *verbs.CQ
	RecvCQ *verbs.CQ
	// PrivateData is what the peer sent with its connection request (on
	// a Conn from Accept) or its reply (from Dial). The connection
	// manager carries a fixed-size area, so it may end in zeros beyond
	// what the peer gave.
	PrivateData []byte

	ch *EventChannel

	evMu         sync.Mutex // one reader of ch at a time
	disconnected bool       // a DISCONNECTED event was read; guarded by evMu

	mu     sync.Mutex
	closed bool
}

func newConn(id *ID, ch *EventChannel) *Conn {
	return &Conn{ID: id, PD: id.PD(), QP: id.QP(), SendCQ: id.SendCQ(), RecvCQ: id.RecvCQ(), ch: ch}
}

// LocalAddr returns the connection's local address and port.
func (c *Conn) LocalAddr() netip.AddrPort { return c.ID.LocalAddr() }

// RemoteAddr returns the peer's address and port.
func (c *Conn) RemoteAddr() netip.AddrPort { return c.ID.PeerAddr() }

// String describes the connection: "10.0.0.1:40000->10.0.0.2:7471 qp 17".
func (c *Conn) String() string {
	return fmt.Sprintf("%v->%v qp %d", c.LocalAddr(), c.RemoteAddr(), c.QP.Num())
}

// WaitDisconnect waits until the connection is disconnected (an
// RDMA_CM_EVENT_DISCONNECTED): by the peer, or from this side once the
// peer has answered the disconnect. It returns ctx's error if ctx ends
// first, and an error wrapping verbs.ErrClosed once the Conn is closed.
func (c *Conn) WaitDisconnect(ctx context.Context) error {
	c.evMu.Lock()
	defer c.evMu.Unlock()
	for !c.disconnected {
		ev, err := c.ch.GetEvent(ctx) // rdma_get_cm_event
		if err != nil {
			return err
		}
		ev.Ack() // rdma_ack_cm_event
		if ev.Type == EventDisconnected {
			c.disconnected = true
		}
	}
	return nil
}

// Close disconnects (rdma_disconnect) and destroys the QP, its CQs, the
// ID and the event channel (rdma_destroy_qp, rdma_destroy_id,
// rdma_destroy_event_channel). It does not wait for the peer: the
// connection manager finishes the disconnection on its own. Memory the
// caller registered on PD must be deregistered first. Closing twice is
// harmless; Close of a nil Conn, or of one Dial or Accept did not make,
// returns an error wrapping verbs.ErrInvalidArgument.
func (c *Conn) Close() error {
	if c == nil || c.ID == nil {
		return verbs.Errorf("rdma_disconnect", verbs.ErrInvalidArgument, "Close of a Conn that Dial or Accept did not make")
	}
	c.mu.Lock()
	if c.closed {
		c.mu.Unlock()
		return nil
	}
	c.closed = true
	c.mu.Unlock()
	c.ID.Disconnect() // fails harmlessly if already disconnected
	return destroyConn(c.ID, c.ch)
}

// newChannelID makes an event channel and an ID on it, the start of every
// asynchronous rdma_cm flow.
func newChannelID(ps PortSpace) (*ID, *EventChannel, error) {
	ch, err := CreateEventChannel() // rdma_create_event_channel
	if err != nil {
		return nil, nil, err
	}
	id, err := CreateID(ch, nil, ps) // rdma_create_id
	if err != nil {
		ch.Close()
		return nil, nil, err
	}
	return id, ch, nil
}

// destroyConn destroys an ID with its QP, then its event channel.
func destroyConn(id *ID, ch *EventChannel) error {
	var errs [3]error // errors.Join leaves out the nil ones
	if id.QP() != nil {
		errs[0] = id.DestroyQP() // rdma_destroy_qp
	}
	errs[1] = id.Destroy() // rdma_destroy_id
	if ch != nil {
		errs[2] = ch.Close() // rdma_destroy_event_channel
	}
	return errors.Join(errs[:]...)
}

// waitEvent reads ch's next event, acknowledges it, and returns it if it
// is of type want; any other event is an error.
func waitEvent(ctx context.Context, ch *EventChannel, want EventType) (*Event, error) {
	ev, err := ch.GetEvent(ctx) // rdma_get_cm_event
	if err != nil {
		return nil, err
	}
	ev.Ack() // rdma_ack_cm_event
	if ev.Type == want && ev.Status == 0 {
		return ev, nil
	}
	if err := ev.Err(); err != nil {
		return nil, err
	}
	return nil, &EventError{Type: ev.Type, Status: -int(verbs.ErrIO)}
}

// Dial connects to addr ("host:port") and returns the established
// connection. It follows rdma_cm's active side: rdma_getaddrinfo,
// rdma_create_event_channel, rdma_create_id, rdma_resolve_addr,
// rdma_resolve_route, rdma_create_qp (and opts.Setup), rdma_connect, each
// step waiting for its event. If the name has several addresses they are
// tried in turn. ctx bounds the whole; opts may be nil.
func Dial(ctx context.Context, addr string, opts *Options) (*Conn, error) {
	if opts == nil {
		opts = &Options{}
	}
	host, port, err := net.SplitHostPort(addr)
	if err != nil {
		return nil, fmt.Errorf("rdmacm: dial %s: %w", addr, err)
	}
	ais, err := GetAddrInfo(host, port, &AddrInfo{QPType: verbs.QPTRC, PortSpace: PSTCP, SrcAddr: opts.LocalAddr})
	if err != nil {
		return nil, fmt.Errorf("rdmacm: dial %s: %w", addr, err)
	}
	var first error
	for _, ai := range ais {
		c, err := dial(ctx, ai, opts)
		if err == nil {
			return c, nil
		}
		if first == nil {
			first = err
		}
		if ctx.Err() != nil {
			break
		}
	}
	return nil, fmt.Errorf("rdmacm: dial %s: %w", addr, first)
}

// providerHint is what to add to an address error when the program
// registered no RDMA provider (it imported none), else "".
func providerHint() string {
	if h := verbs.NoProviderHint(); h != "" {
		return " (" + h + ")"
	}
	return ""
}

func dial(ctx context.Context, ai *AddrInfo, opts *Options) (c *Conn, err error) {
	// A context already done ends the dial before anything is sent, as
	// net.Dialer's does: the address and route events come at once, and
	// a REJ from a device nearby can come before a wait sees ctx.
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	id, ch, err := newChannelID(ai.PortSpace)
	if err != nil {
		return nil, err
	}
	defer func() {
		if err != nil {
			destroyConn(id, ch)
		}
	}()
	if err := id.ResolveAddr(ai.SrcAddr, ai.DstAddr, opts.timeout()); err != nil { // rdma_resolve_addr
		return nil, fmt.Errorf("resolving address %v: %w%s", ai.DstAddr.Addr(), err, providerHint())
	}
	if _, err := waitEvent(ctx, ch, EventAddrResolved); err != nil {
		return nil, fmt.Errorf("resolving address %v: %w%s", ai.DstAddr.Addr(), err, providerHint())
	}
	if err := id.ResolveRoute(opts.timeout()); err != nil { // rdma_resolve_route
		return nil, fmt.Errorf("resolving route to %v: %w", ai.DstAddr.Addr(), err)
	}
	if _, err := waitEvent(ctx, ch, EventRouteResolved); err != nil {
		return nil, fmt.Errorf("resolving route to %v: %w", ai.DstAddr.Addr(), err)
	}
	if err := id.createQPShared(opts.qpAttr(), opts.SharedCQ); err != nil { // rdma_create_qp
		return nil, fmt.Errorf("creating the QP: %w", err)
	}
	c = newConn(id, ch)
	if opts.Setup != nil {
		if err := opts.Setup(c); err != nil {
			return nil, err
		}
		if opts.Undo != nil {
			made := c // c is nil once an error is returned
			defer func() {
				if err != nil {
					opts.Undo(made)
				}
			}()
		}
	}
	data, err := opts.privateData(c)
	if err != nil {
		return nil, err
	}
	if err := id.Connect(opts.connectParam(id, data)); err != nil { // rdma_connect
		return nil, fmt.Errorf("connecting: %w", err)
	}
	ev, err := waitEvent(ctx, ch, EventEstablished)
	if err != nil {
		var ee *EventError
		if errors.As(err, &ee) && ee.Type == EventUnreachable && ee.Status == -int(verbs.ErrConnRefused) {
			return nil, fmt.Errorf("connecting: no RoCE device answered at %v (port %d unreachable): %w", ai.DstAddr.Addr(), wireUDPPort(id), err)
		}
		return nil, fmt.Errorf("connecting: %w", err)
	}
	c.PrivateData = ev.Param.PrivateData
	return c, nil
}

// Listener accepts RC connections on an address, as net.Listener does
// for TCP.
type Listener struct {
	id   *ID
	ch   *EventChannel
	opts Options

	closing  context.Context // canceled by Close, ending Accept calls
	close    context.CancelFunc
	accepts  sync.WaitGroup // Accept calls in progress
	mu       sync.Mutex     // guards closed and accepts.Add
	closed   bool
	closeErr error
}

// Listen listens for connections on addr ("host:port"; an empty host
// means every address, port 0 a free port). It follows rdma_cm's passive
// side: rdma_getaddrinfo (RAI_PASSIVE), rdma_create_event_channel,
// rdma_create_id, rdma_bind_addr, rdma_listen. opts, which may be nil,
// apply to the accepted connections.
func Listen(addr string, opts *Options) (*Listener, error) {
	var o Options
	if opts != nil {
		o = *opts
	}
	host, port, err := net.SplitHostPort(addr)
	if err != nil {
		return nil, fmt.Errorf("rdmacm: listen %s: %w", addr, err)
	}
	ais, err := GetAddrInfo(host, port, &AddrInfo{Flags: RAIPassive, QPType: verbs.QPTRC, PortSpace: PSTCP})
	if err != nil {
		return nil, fmt.Errorf("rdmacm: listen %s: %w", addr, err)
	}
	ai := ais[0]
	id, ch, err := newChannelID(ai.PortSpace)
	if err != nil {
		return nil, err
	}
	if err := id.BindAddr(ai.SrcAddr); err != nil { // rdma_bind_addr
		destroyConn(id, ch)
		return nil, fmt.Errorf("rdmacm: listen %s: %w", addr, err)
	}
	if err := id.Listen(o.Backlog); err != nil { // rdma_listen
		destroyConn(id, ch)
		return nil, fmt.Errorf("rdmacm: listen %s: %w", addr, err)
	}
	l := &Listener{id: id, ch: ch, opts: o}
	l.closing, l.close = context.WithCancel(context.Background())
	return l, nil
}

// Addr returns the address and port the listener is bound to.
func (l *Listener) Addr() netip.AddrPort { return l.id.LocalAddr() }

// ID returns the listening ID.
func (l *Listener) ID() *ID { return l.id }

// errListenerClosed is what Accept returns once the listener is closed.
var errListenerClosed = verbs.Errorf("rdma_get_cm_event", verbs.ErrClosed, "listener closed")

// Accept waits for a connection request and accepts it: on the
// CONNECT_REQUEST event it moves the new ID to an event channel of its
// own (rdma_migrate_id), creates its QP (rdma_create_qp, then
// opts.Setup), accepts (rdma_accept) and waits for ESTABLISHED. If
// accepting fails the request is rejected or dropped and the error
// returned; the listener stays open. Once the listener is closed Accept
// returns an error wrapping verbs.ErrClosed.
func (l *Listener) Accept(ctx context.Context) (*Conn, error) {
	l.mu.Lock()
	if l.closed {
		l.mu.Unlock()
		return nil, errListenerClosed
	}
	l.accepts.Add(1)
	l.mu.Unlock()
	defer l.accepts.Done()

	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	stop := context.AfterFunc(l.closing, cancel)
	defer stop()
	for {
		ev, err := l.ch.GetEvent(ctx) // rdma_get_cm_event
		if err != nil {
			if l.closing.Err() != nil {
				return nil, errListenerClosed
			}
			return nil, err
		}
		if ev.Type != EventConnectRequest {
			ev.Ack() // an event for an ID no longer here
			continue
		}
		return l.accept(ctx, ev)
	}
}

func (l *Listener) accept(ctx context.Context, ev *Event) (c *Conn, err error) {
	id := ev.ID
	req := ev.Param
	ev.Ack() // rdma_ack_cm_event
	accepted := false
	var ch *EventChannel
	defer func() {
		if err != nil {
			if !accepted {
				id.Reject(nil) // rdma_reject
			}
			destroyConn(id, ch)
			err = fmt.Errorf("rdmacm: accept from %v: %w", id.PeerAddr(), err)
		}
	}()
	if ch, err = CreateEventChannel(); err != nil {
		return nil, err
	}
	if err := id.Migrate(ch); err != nil { // rdma_migrate_id
		return nil, err
	}
	if err := id.createQPShared(l.opts.qpAttr(), l.opts.SharedCQ); err != nil { // rdma_create_qp
		return nil, err
	}
	c = newConn(id, ch)
	c.PrivateData = req.PrivateData
	if l.opts.Setup != nil {
		if err := l.opts.Setup(c); err != nil {
			return nil, err
		}
		if l.opts.Undo != nil {
			made := c // c is nil once an error is returned
			defer func() {
				if err != nil {
					l.opts.Undo(made)
				}
			}()
		}
	}
	data, err := l.opts.privateData(c)
	if err != nil {
		return nil, err
	}
	if err := id.Accept(l.opts.acceptParam(req, data)); err != nil { // rdma_accept
		return nil, err
	}
	accepted = true
	if _, err := waitEvent(ctx, ch, EventEstablished); err != nil {
		return nil, err
	}
	return c, nil
}

// Close stops listening: it ends the Accept calls in progress, then
// destroys the listening ID and its event channel. Connections already
// accepted are not affected. Close of a nil Listener, or of one Listen
// did not make, returns an error wrapping verbs.ErrInvalidArgument.
func (l *Listener) Close() error {
	if l == nil || l.id == nil {
		return verbs.Errorf("rdma_destroy_id", verbs.ErrInvalidArgument, "Close of a Listener that Listen did not make")
	}
	l.mu.Lock()
	if l.closed {
		l.mu.Unlock()
		return l.closeErr
	}
	l.closed = true
	l.mu.Unlock()
	l.close()
	l.accepts.Wait()
	// Requests that arrived and were never accepted still hold IDs on
	// the channel: reject and destroy them.
	for {
		ev, err := l.ch.GetEvent(canceledCtx)
		if err != nil {
			break
		}
		if ev.Type == EventConnectRequest {
			ev.ID.Reject(nil)
			ev.ID.Destroy()
		}
	}
	l.closeErr = destroyConn(l.id, l.ch)
	return l.closeErr
}

// canceledCtx makes GetEvent return at once when no event is queued.
var canceledCtx = func() context.Context {
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	return ctx
}()

// wireUDPPort is the UDP port the ID's device speaks RoCEv2 on.
func wireUDPPort(id *ID) int {
	if p, ok := verbs.DeviceDriverOf(id.Device()).(UDPPorter); ok {
		return int(p.UDPPort())
	}
	return 4791
}
