package course

import (
	"context"
	"fmt"
	"net"
	"net/netip"
	"strconv"
	"sync"
	"time"

	"github.com/rdmago/rdmago/rdmacm"
	"github.com/rdmago/rdmago/verbs"
)

// The course's connection manager steps. With no event channel (ping-sr-0
// and 1) the ID is synchronous and each call returns when it is done;
// with one (ping-sr-2e on) each call starts the operation and the step
// waits for its event with AwaitCMEvent, as the course's version of each
// step does.

// resolveTimeout is the timeout the course gives rdma_resolve_addr and
// rdma_resolve_route, 2000 ms.
const resolveTimeout = 2000 * time.Millisecond

// disconnectWait bounds the wait for DISCONNECTED after rdma_disconnect: a
// peer that is alive answers at once; one that died leaves the disconnect
// request to the connection manager's retries, which take a minute.
const disconnectWait = 5 * time.Second

// backlog is the listener's backlog (OUR_BACKLOG).
const backlog = 3

// CreateEventChannel creates the connection's own event channel
// (rdma_create_event_channel), which makes the connection manager calls on
// its ID asynchronous (ping-sr-2e on).
func (c *Control) CreateEventChannel() error {
	ch, err := rdmacm.CreateEventChannel() // rdma_create_event_channel
	if err != nil {
		c.o.ReportError("rdma_create_event_channel", err)
		return err
	}
	c.Channel = ch
	c.o.Trace("rdma_create_event_channel", "created channel", fmt.Sprintf("%p", ch))
	return nil
}

// CreateID creates the ID on the connection's event channel, or a
// synchronous one if it has none (our_create_id).
func (c *Control) CreateID() error {
	id, err := rdmacm.CreateID(c.Channel, c, rdmacm.PSTCP) // rdma_create_id
	if err != nil {
		c.o.ReportError("rdma_create_id", err)
		return err
	}
	c.ID = id
	c.o.Trace("rdma_create_id", "created cm_id", fmt.Sprintf("%p", id))
	c.o.Trace("rdma_create_id", "returned cm_id->channel", fmt.Sprintf("%p", id.Channel()))
	return nil
}

// DestroyID destroys the ID (our_destroy_id: rdma_destroy_id) and the
// connection's event channel, if it has one (rdma_destroy_event_channel).
func (c *Control) DestroyID() {
	c.StopCMEventThread()
	if c.ID != nil {
		if err := c.ID.Destroy(); err != nil { // rdma_destroy_id
			c.o.ReportError("rdma_destroy_id", err)
		}
		c.ID = nil
	}
	if c.Channel != nil {
		if err := c.Channel.Close(); err != nil { // rdma_destroy_event_channel
			c.o.ReportError("rdma_destroy_event_channel", err)
		}
		c.Channel = nil
	}
}

// serverAddr resolves the options' server name and port (getaddrinfo);
// passive, an empty name is every IPv4 address (AI_PASSIVE).
func (c *Control) serverAddr(ctx context.Context, passive bool) (netip.AddrPort, error) {
	port, err := strconv.ParseUint(c.o.ServerPort, 10, 16)
	if err != nil {
		return netip.AddrPort{}, fmt.Errorf("getaddrinfo: port %q: %w", c.o.ServerPort, err)
	}
	name := c.o.ServerName
	if name == "" && passive {
		return netip.AddrPortFrom(netip.IPv4Unspecified(), uint16(port)), nil
	}
	ip, err := netip.ParseAddr(name)
	if err != nil {
		ips, lerr := net.DefaultResolver.LookupNetIP(ctx, "ip", name)
		if lerr != nil {
			return netip.AddrPort{}, fmt.Errorf("getaddrinfo server_name %s port %s: %w", name, c.o.ServerPort, lerr)
		}
		ip = ips[0]
	}
	return netip.AddrPortFrom(ip.Unmap(), uint16(port)), nil
}

// ClientBind binds the client's ID to the local device that reaches the
// server and resolves the route to it (our_client_bind): getaddrinfo,
// rdma_resolve_addr, rdma_resolve_route, each awaited if the ID is
// asynchronous.
func (c *Control) ClientBind(ctx context.Context) error {
	dst, err := c.serverAddr(ctx, false)
	if err != nil {
		c.o.ReportError("getaddrinfo", err)
		return err
	}
	if err := c.ID.ResolveAddr(netip.AddrPort{}, dst, resolveTimeout); err != nil { // rdma_resolve_addr
		c.o.ReportError("rdma_resolve_addr", err)
		return err
	}
	if _, err := c.awaitIfAsync(ctx, rdmacm.EventAddrResolved, "client"); err != nil {
		return err
	}
	if err := c.ID.ResolveRoute(resolveTimeout); err != nil { // rdma_resolve_route
		c.o.ReportError("rdma_resolve_route", err)
		return err
	}
	_, err = c.awaitIfAsync(ctx, rdmacm.EventRouteResolved, "client")
	return err
}

// ListenerBind binds the listener's ID to the server's address and port
// and listens (our_listener_bind: getaddrinfo with AI_PASSIVE,
// rdma_bind_addr, rdma_listen).
func (c *Control) ListenerBind(ctx context.Context) error {
	addr, err := c.serverAddr(ctx, true)
	if err != nil {
		c.o.ReportError("getaddrinfo", err)
		return err
	}
	if err := c.ID.BindAddr(addr); err != nil { // rdma_bind_addr
		c.o.ReportError("rdma_bind_addr", err)
		return err
	}
	c.o.Trace("rdma_bind_addr", "bound", addr)
	if err := c.ID.Listen(backlog); err != nil { // rdma_listen
		c.o.ReportError("rdma_listen", err)
		return err
	}
	c.o.Report("rdma_listen", "listening on", c.ID.LocalAddr())
	return nil
}

// AwaitConnectRequest waits for a client's connection request on the
// listener and returns the request's new ID and its private data (the
// listener's our_await_cm_event for RDMA_CM_EVENT_CONNECT_REQUEST): from
// the connection's event channel, or, for a synchronous listening ID,
// from the ID's own channel (rdma_get_cm_event(conn->cm_id->channel)).
func (c *Control) AwaitConnectRequest(ctx context.Context) (*rdmacm.ID, []byte, error) {
	ev, err := c.AwaitCMEvent(ctx, rdmacm.EventConnectRequest, "listener")
	if err != nil {
		return nil, nil, err
	}
	return ev.ID, ev.Param.PrivateData, nil
}

// AdoptID makes the request's ID the agent's (ping-sr-0's our_migrate_id,
// simple when the agent has no channel of its own).
func (c *Control) AdoptID(id *rdmacm.ID) {
	c.ID = id
	id.SetContext(c) // new_cm_id->context = conn
	c.o.Trace("our_migrate_id", "migrated cm_id", fmt.Sprintf("%p", id))
}

// MigrateID gives the agent an event channel of its own and moves the
// request's ID, with the events not yet taken, onto it (ping-sr-2e's
// our_migrate_id: rdma_create_event_channel, rdma_migrate_id), so that the
// listener's channel carries only its own events. If it cannot, it
// rejects the request and destroys its ID.
func (c *Control) MigrateID(id *rdmacm.ID) error {
	err := c.CreateEventChannel()
	if err == nil {
		if err = id.Migrate(c.Channel); err != nil { // rdma_migrate_id
			c.o.ReportError("rdma_migrate_id", err)
		}
	}
	if err != nil {
		id.Reject(nil) // rdma_reject
		id.Destroy()   // rdma_destroy_id
		return err
	}
	c.AdoptID(id)
	return nil
}

// UseConnectInfoFrom reads the client's connect info from the private data
// of its request (ping-sr-1 on) and makes the agent use it; connect info
// it cannot serve is reported, and the request rejected.
func (c *Control) UseConnectInfoFrom(privateData []byte) error {
	info, err := ParseConnectInfo(privateData) // ntohll
	if err != nil {
		c.o.ReportError("our_migrate_id", err)
		c.Reject()
		return err
	}
	c.UseConnectInfo(info)
	return nil
}

// UseConnectInfo replaces the agent's count and message size with the
// client's (ping-sr-1 on), reporting both.
func (c *Control) UseConnectInfo(ci ConnectInfo) {
	c.o.Trace("option", "count", c.Limit)
	c.Limit = ci.RemoteLimit
	c.o.Report("client", "count", c.Limit)
	c.o.Trace("option", "data_size", c.DataSize)
	c.DataSize = ci.RemoteDataSize
	c.o.Report("client", "data_size", c.DataSize)
}

// Reject refuses the connection request whose ID the agent holds
// (rdma_reject), for an agent that cannot serve it.
func (c *Control) Reject() {
	if err := c.ID.Reject(nil); err != nil { // rdma_reject
		c.o.ReportError("rdma_reject", err)
	}
}

// RetryCount is the transport retry count the programs ask for (the
// course's retry_count).
const RetryCount = 5

// ConnParams returns the connection parameters (our_setup_conn_params),
// with privateData. The ping-pongs ask for the course's 5 RNR retries;
// the blasts, whose client may SEND before the agent has reposted a
// receive, for RNR retries without end (7).
func (c *Control) ConnParams(privateData []byte) *rdmacm.ConnParam {
	p := &rdmacm.ConnParam{
		PrivateData:        privateData,
		ResponderResources: 2,
		InitiatorDepth:     2,
		RetryCount:         RetryCount,
		RNRRetryCount:      5,
	}
	if c.o.Kind == Blast {
		p.RNRRetryCount = 7
	}
	return p
}

// ClientConnect connects to the server with privateData, the connect info
// from ping-sr-1 on (our_client_connect: rdma_connect, awaited if the ID
// is asynchronous).
func (c *Control) ClientConnect(ctx context.Context, privateData []byte) error {
	if err := c.ID.Connect(c.ConnParams(privateData)); err != nil { // rdma_connect
		c.o.ReportError("rdma_connect", err)
		return err
	}
	if _, err := c.awaitIfAsync(ctx, rdmacm.EventEstablished, "client"); err != nil {
		return err
	}
	c.noteEstablished()
	c.o.Report("rdma_connect", "connected to", c.ID.PeerAddr())
	return nil
}

// AgentConnect accepts the client's request (our_agent_connect:
// rdma_accept, awaited if the ID is asynchronous).
func (c *Control) AgentConnect(ctx context.Context) error {
	if err := c.ID.Accept(c.ConnParams(nil)); err != nil { // rdma_accept
		c.o.ReportError("rdma_accept", err)
		return err
	}
	if _, err := c.awaitIfAsync(ctx, rdmacm.EventEstablished, "agent"); err != nil {
		return err
	}
	c.noteEstablished()
	c.o.Report("rdma_accept", "accepted", c.ID.PeerAddr())
	return nil
}

// Disconnect closes the connection (our_disconnect: rdma_disconnect).
// With await, an asynchronous ID then waits for DISCONNECTED, which the
// peer's answer brings (or brought, if the peer disconnected first); a
// program whose connection failed does not wait for a peer that may be
// gone.
func (c *Control) Disconnect(ctx context.Context, await bool) error {
	if err := c.ID.Disconnect(); err != nil { // rdma_disconnect
		c.o.ReportError("rdma_disconnect", err)
		return err
	}
	if !await || c.Channel == nil {
		return nil
	}
	wctx, cancel := context.WithTimeout(ctx, disconnectWait)
	defer cancel()
	_, err := c.AwaitCMEvent(wctx, rdmacm.EventDisconnected, "disconnect")
	return err
}

// Listen is the listener's part of the server (the server's main):
// our_create_id on the control's event channel (none: synchronous),
// our_listener_bind, and the wait for a client's request. It returns the
// request's ID and private data, for the agent. DestroyID undoes it.
func (c *Control) Listen(ctx context.Context) (*rdmacm.ID, []byte, error) {
	if err := c.CreateID(); err != nil {
		return nil, nil, err
	}
	if err := c.ListenerBind(ctx); err != nil {
		return nil, nil, err
	}
	return c.AwaitConnectRequest(ctx)
}

// Client makes the client's connection (the client's main up to its
// operation): our_create_id on the control's event channel (none:
// synchronous), our_client_bind, our_setup_qp (with a completion channel
// if withCompChannel), our_setup_client_buffers and our_client_connect
// with privateData. With Keepalive set it enables keepalives before it
// connects. Teardown undoes it, also after a failure.
func (c *Control) Client(ctx context.Context, withCompChannel bool, privateData []byte) error {
	if err := c.CreateID(); err != nil {
		return err
	}
	if err := c.ClientBind(ctx); err != nil {
		return err
	}
	if c.Keepalive {
		if err := c.EnableKeepalive(); err != nil {
			return err
		}
	}
	if err := c.SetupClient(withCompChannel); err != nil {
		return err
	}
	return c.ClientConnect(ctx, privateData)
}

// Accept makes the agent's side of the connection whose ID it holds (the
// agent up to its operation): our_setup_qp (with a completion channel if
// withCompChannel), our_setup_agent_buffers, the first receives, and
// our_agent_connect. With Keepalive set it enables keepalives first.
// Teardown undoes it, also after a failure.
func (c *Control) Accept(ctx context.Context, withCompChannel bool) error {
	if c.Keepalive {
		if err := c.EnableKeepalive(); err != nil {
			c.Reject()
			return err
		}
	}
	if err := c.SetupAgent(withCompChannel); err != nil {
		return err
	}
	return c.AgentConnect(ctx)
}

// Teardown frees all the control holds, in the course's order:
// our_unsetup_buffers, our_unsetup_qp, our_destroy_id (and the event
// channel).
func (c *Control) Teardown() {
	c.Unsetup()
	c.DestroyID()
}

// awaitIfAsync awaits typ if the ID has an event channel; a synchronous
// ID's call has already waited.
func (c *Control) awaitIfAsync(ctx context.Context, typ rdmacm.EventType, name string) (*rdmacm.Event, error) {
	if c.Channel == nil {
		return nil, nil
	}
	return c.AwaitCMEvent(ctx, typ, name)
}

// noteEstablished records ESTABLISHED for a synchronous ID, whose event
// nobody takes, so that LatestCMEvent says the same for every ID.
func (c *Control) noteEstablished() {
	if c.Channel == nil {
		c.RecordCMEvent(rdmacm.EventEstablished, 0)
	}
}

// AwaitCMEvent waits for the connection's next event, which must be of
// type typ, and acknowledges it (our_await_cm_event: rdma_get_cm_event,
// rdma_ack_cm_event). name says who waits, in traces. While the CM event
// goroutine runs (ping-sr-2 on) it takes the events, and AwaitCMEvent
// waits until it has recorded one of type typ. An event of type typ that
// was already recorded (a DISCONNECTED a wait loop took) ends the wait at
// once, with a nil event.
func (c *Control) AwaitCMEvent(ctx context.Context, typ rdmacm.EventType, name string) (*rdmacm.Event, error) {
	o := c.o
	o.Trace(name, "awaiting next cm event", fmt.Sprintf("%d (%s)", typ, typ))
	if c.cm.threadRunning() || c.cm.seenType(typ) {
		if err := c.cm.awaitRecorded(ctx, typ); err != nil {
			o.ReportError("our_await_cm_event", err)
			return nil, err
		}
		return nil, nil
	}
	next := c.WaitEvent
	if next == nil {
		ch := c.Channel
		if ch == nil {
			ch = c.ID.Channel() // a synchronous ID's own (conn->cm_id->channel)
		}
		next = ch.GetEvent
	}
	ev, err := next(ctx) // rdma_get_cm_event
	if err != nil {
		o.ReportError("rdma_get_cm_event", err)
		return nil, err
	}
	o.Trace(name, "got cm event", fmt.Sprintf("%d (%s) status %d", ev.Type, ev.Type, ev.Status))
	c.RecordCMEvent(ev.Type, ev.Status)
	ev.Ack() // rdma_ack_cm_event: every event must be acknowledged
	if ev.Type != typ {
		err := fmt.Errorf("%s expected cm event %d (%s), got %d (%s) status %d: %w",
			name, typ, typ, ev.Type, ev.Type, ev.Status, errUnexpectedEvent)
		o.ReportError("our_await_cm_event", err)
		return nil, err
	}
	return ev, nil
}

// errUnexpectedEvent is the error of an event other than the one awaited.
var errUnexpectedEvent = verbs.Errorf("rdma_get_cm_event", verbs.ErrIO, "unexpected event")

// cmState is what the connection's events said: the latest one, the types
// seen, and, from ping-sr-2 on, the goroutine that takes them.
type cmState struct {
	mu         sync.Mutex
	have       bool
	latest     rdmacm.EventType
	status     int
	seen       uint64        // a bit per event type
	changed    chan struct{} // closed and replaced when an event is recorded
	connCtx    context.Context
	connCancel context.CancelFunc // ends connCtx when the connection leaves ESTABLISHED

	stop context.CancelFunc // ends the goroutine
	done chan struct{}      // closed when it has ended
}

func (s *cmState) init() {
	s.changed = make(chan struct{})
	s.connCtx, s.connCancel = context.WithCancel(context.Background())
}

// RecordCMEvent records an event of the connection as the latest
// (latest_cm_event_type, latest_status). The CM event goroutine records
// every event it takes, and so does AwaitCMEvent; ping-sr-4's wait loop
// records the events it takes.
func (c *Control) RecordCMEvent(typ rdmacm.EventType, status int) {
	s := &c.cm
	s.mu.Lock()
	defer s.mu.Unlock()
	s.have, s.latest, s.status = true, typ, status
	if typ >= 0 && typ < 64 {
		s.seen |= 1 << typ
	}
	close(s.changed)
	s.changed = make(chan struct{})
	if typ != rdmacm.EventEstablished && s.seen&(1<<rdmacm.EventEstablished) != 0 {
		s.connCancel()
	}
}

// LatestCMEvent returns the latest event recorded and its status.
func (c *Control) LatestCMEvent() (rdmacm.EventType, int, bool) {
	s := &c.cm
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.latest, s.status, s.have
}

// LatestCMEventErr returns nil while the connection is ESTABLISHED (or
// not yet made), and once a later event has been recorded an error that
// names it and wraps ErrPeerGone: ECONNRESET, or the event's own error.
func (c *Control) LatestCMEventErr() error {
	typ, status, have := c.LatestCMEvent()
	if !have || typ == rdmacm.EventEstablished || !c.cm.seenType(rdmacm.EventEstablished) {
		return nil
	}
	detail := fmt.Sprintf("the connection left ESTABLISHED: %s, status %d", typ, status)
	return verbs.Errorf("our_await_completion", ErrPeerGone, detail)
}

// ConnContext returns a context that ends when the connection leaves
// ESTABLISHED, for a wait that must end then (ping-sr-3's
// ibv_get_cq_event).
func (c *Control) ConnContext() context.Context { return c.cm.connCtx }

func (s *cmState) seenType(typ rdmacm.EventType) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return typ >= 0 && typ < 64 && s.seen&(1<<typ) != 0
}

func (s *cmState) threadRunning() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.done != nil
}

// awaitRecorded waits until an event of type typ has been recorded.
func (s *cmState) awaitRecorded(ctx context.Context, typ rdmacm.EventType) error {
	for {
		s.mu.Lock()
		seen, changed, done := typ >= 0 && typ < 64 && s.seen&(1<<typ) != 0, s.changed, s.done
		s.mu.Unlock()
		if seen {
			return nil
		}
		select {
		case <-changed:
		case <-done:
			return fmt.Errorf("the CM event goroutine ended before %s", typ)
		case <-ctx.Done():
			return fmt.Errorf("awaiting %s: %w", typ, context.Cause(ctx))
		}
	}
}

// StartCMEventThread starts the goroutine that takes the connection's
// events from its channel as they come and records each
// (our_create_cm_event_thread, ping-sr-2 on): the course's answer to a
// peer that goes away while the program only polls its CQ. Start it once
// the connection is ESTABLISHED; DestroyID stops it.
func (c *Control) StartCMEventThread() {
	s := &c.cm
	ctx, stop := context.WithCancel(context.Background())
	s.mu.Lock()
	s.stop, s.done = stop, make(chan struct{})
	done := s.done
	s.mu.Unlock()
	go c.cmEventThread(ctx, done) // pthread_create(..., our_cm_event_thread, conn)
}

// cmEventThread is our_cm_event_thread.
func (c *Control) cmEventThread(ctx context.Context, done chan struct{}) {
	defer close(done)
	for {
		ev, err := c.Channel.GetEvent(ctx) // rdma_get_cm_event
		if err != nil {
			if ctx.Err() == nil {
				c.o.ReportError("rdma_get_cm_event", err)
			}
			return
		}
		c.o.Trace("cm event thread", "got cm event", fmt.Sprintf("%d (%s) status %d", ev.Type, ev.Type, ev.Status))
		c.RecordCMEvent(ev.Type, ev.Status)
		ev.Ack() // rdma_ack_cm_event
	}
}

// StopCMEventThread ends the CM event goroutine and waits for it.
func (c *Control) StopCMEventThread() {
	s := &c.cm
	s.mu.Lock()
	stop, done := s.stop, s.done
	s.mu.Unlock()
	if stop == nil {
		return
	}
	stop()
	<-done
	s.mu.Lock()
	s.stop = nil
	s.mu.Unlock()
}
