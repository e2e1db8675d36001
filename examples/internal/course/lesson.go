package course

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"syscall"

	"github.com/rdmago/rdmago/rdmacm"
)

// Lesson describes one of the course's programs by what it does that the
// first, ping-sr-0, does not. The client, the listener and the agent run
// the course's flow (Run), taking each step the lesson's way.
type Lesson struct {
	Name string // the program's name: "ping-sr-3"
	Kind Kind   // a ping-pong or a blast

	// ConnectInfo: the client sends its count and message size in the
	// private data of its connection request, and the agent uses them
	// (ping-sr-1 on).
	ConnectInfo bool
	// EventChannel: each ID is on an event channel, so the connection
	// manager calls are asynchronous and each is followed by
	// our_await_cm_event; the agent migrates the request's ID to a
	// channel of its own (ping-sr-2e on).
	EventChannel bool
	// CMEventThread: once connected, a goroutine takes the connection's
	// events and records the latest, for the await to look at
	// (ping-sr-2, ping-sr-3, blast-sr-2).
	CMEventThread bool
	// Keepalive: the await sends keepalives, so that a killed peer is
	// noticed (the lessons that notice a peer gone: ping-sr-2 on).
	Keepalive bool
	// CompChannel: the CQ is on a completion channel, armed, and the
	// program reports its poll statistics (ping-sr-3 on).
	CompChannel bool

	// Await makes the lesson's our_await_completion for a connection.
	Await func(c *Control) AwaitFunc
	// WaitEvent, if set, makes the lesson's rdma_get_cm_event for a
	// connection (ping-sr-4's, on a non-blocking channel); unset, the
	// event channel's GetEvent blocks.
	WaitEvent func(c *Control) func(context.Context) (*rdmacm.Event, error)
}

// Run runs the lesson's program: it parses the command line, runs the
// client or the server, and exits with 0 if that succeeded and 1
// (EXIT_FAILURE) if not, or 2 for a bad command line. SIGINT and SIGTERM
// end the run's context, so that the program disconnects before it exits,
// as the kernel disconnects a C program that is interrupted.
func (l *Lesson) Run() {
	o, err := ParseOptions(l.Name, l.Kind, os.Args[1:], os.Stdout, os.Stderr)
	if errors.Is(err, flag.ErrHelp) {
		os.Exit(0)
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(2)
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	run := l.client
	if o.Role == Server {
		run = l.server
	}
	err = run(ctx, o)
	stop()
	if err != nil {
		o.Printf("failed: %v", err)
		os.Exit(1)
	}
}

// control makes the control structure for one side, with the lesson's
// channel and keepalive.
func (l *Lesson) control(o *Options) (*Control, error) {
	c := NewControl(o)
	c.Keepalive = l.Keepalive
	if l.WaitEvent != nil {
		c.WaitEvent = l.WaitEvent(c)
	}
	if l.EventChannel && o.Role == Client {
		return c, c.CreateEventChannel()
	}
	return c, nil
}

// client is the client's main: set up and connect, run the operation,
// disconnect, tear down.
func (l *Lesson) client(ctx context.Context, o *Options) error {
	c, err := l.control(o)
	defer c.Teardown()
	if err != nil {
		return err
	}
	var privateData []byte
	if l.ConnectInfo {
		privateData = ConnectInfo{RemoteLimit: c.Limit, RemoteDataSize: c.DataSize}.Marshal()
	}
	if err := c.Client(ctx, l.CompChannel, privateData); err != nil {
		return err
	}
	return l.operate(ctx, c, c.PingClient, c.BlastClient)
}

// server is the server's main: the listener waits for one client's
// request and hands it to an agent.
func (l *Lesson) server(ctx context.Context, o *Options) error {
	listener := NewControl(o)
	defer listener.DestroyID()
	if l.WaitEvent != nil {
		listener.WaitEvent = l.WaitEvent(listener)
	}
	if l.EventChannel {
		if err := listener.CreateEventChannel(); err != nil {
			return err
		}
	}
	id, privateData, err := listener.Listen(ctx)
	if err != nil {
		return err
	}
	return l.agent(ctx, o, id, privateData)
}

// agent serves the connection the listener hands it (our_agent).
func (l *Lesson) agent(ctx context.Context, o *Options, id *rdmacm.ID, privateData []byte) error {
	c, _ := l.control(o)
	defer c.Teardown()
	if l.EventChannel {
		if err := c.MigrateID(id); err != nil {
			return err
		}
	} else {
		c.AdoptID(id)
	}
	if l.ConnectInfo {
		if err := c.UseConnectInfoFrom(privateData); err != nil {
			return err
		}
	}
	if err := c.Accept(ctx, l.CompChannel); err != nil {
		return err
	}
	return l.operate(ctx, c, c.PingAgent, c.BlastAgent)
}

// operate runs the side's operation with the lesson's await, from the CM
// event goroutine's start to the disconnect.
func (l *Lesson) operate(ctx context.Context, c *Control, ping, blast func(context.Context, AwaitFunc) error) error {
	if l.CMEventThread {
		c.StartCMEventThread()
	}
	op := ping
	if l.Kind == Blast {
		op = blast
	}
	err := op(ctx, l.Await(c))
	if l.CompChannel {
		c.ReportStats()
	}
	// An asynchronous ID then awaits DISCONNECTED, unless the connection
	// failed: its peer may be gone.
	c.Disconnect(ctx, err == nil)
	return err
}
