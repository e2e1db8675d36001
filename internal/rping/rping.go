// Package rping is the engine of `rdmago rping`, a port of rping, the
// connection manager example of rdma-core's librdmacm
// (librdmacm/examples/rping.c), that takes its flags, prints its lines and
// speaks its protocol, so either side may be rdma-core's program.
//
// The client connects to the server through rdma_cm (RDMA_PS_TCP, port
// 7174 by default), over one RC QP (16 send and 2 receive work requests,
// one SGE each, one CQ of 32 entries for both) with responder resources
// and initiator depth 1 and retry and RNR retry counts 7. The two then
// ping: every control message is a 16-byte SEND of a buffer description
//
//	be64 address  be32 rkey  be32 size
//
// and each ping goes
//
//	client  SEND  its start buffer (the ping data)
//	server  RDMA READ  the start buffer into its own buffer; SEND "go ahead"
//	client  SEND  its sink buffer
//	server  RDMA WRITE  the data, up to and with its first NUL, into the sink; SEND "go ahead"
//
// The ping data of ping N (from 0) is "rdma-ping-N: " and then the
// letters of ASCII 65 to 122 in turn from the letter after the previous
// ping's first one, Size bytes in all, the last a NUL. With -V the client
// checks that the sink holds what the start buffer did ("data mismatch!"
// otherwise); with -v it prints "ping data: ..." after each ping and the
// server "server ping data: ..." after each READ. After Count pings (0:
// for ever) the client disconnects, and the server, on its DISCONNECTED
// event, ends too: both print
//
//	client DISCONNECT EVENT...
//	server DISCONNECT EVENT...
//	wait for RDMA_READ_ADV state 10
//
// on stderr, the last because rping's server loop wakes up in the
// DISCONNECTED state (10) where it expected a READ advertisement, and
// exit with status 0.
//
// A failing connection manager event is printed as rping prints it, with
// the complaint of the step that waited for it, and ends the run with
// status 255, as rping's event thread exits with -1. A client to a port
// nobody listens on (on a machine whose connection manager runs) gets
//
//	cma event RDMA_CM_EVENT_REJECTED, error 8
//	wait for CONNECTED state 4
//	connect error -1
//
// With -q the QP is created with verbs and moved through INIT, RTR and RTS
// by hand with the attributes rdma_init_qp_attr gives (the client then
// sends the RTU with rdma_establish); with -P the server serves any
// number of clients, each in its own goroutine, until interrupted.
//
// What differs from rping.c, none of it on the wire: an error in the flags
// stays an error even if a later -a succeeds; a second client of a server
// without -P is rejected at once (rping would stall its event thread);
// the client waits up to 5 seconds for its own DISCONNECTED event before
// it exits, so that its last line always appears; a completion handled
// after the DISCONNECTED event leaves the connection DISCONNECTED (rping's
// CQ thread would overwrite the state, and its server then fail with
// "wait for RDMA_READ_ADV state 9" when its client is interrupted just as
// an RDMA WRITE completes); -h prints the usage with
// status 0; the client's control messages go out of 16 send buffers in
// turn rather than one, so that none is rewritten while a SEND of it may
// still be in flight; and the advertised addresses are the memory
// regions' virtual addresses, which the peer only echoes back.
package rping

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/netip"
	"sync"
	"time"

	"github.com/rdmago/rdmago/rdmacm"
)

// Limits and defaults of rping.
const (
	// DefaultPort is the rdma_cm port rping listens on and connects to.
	DefaultPort = 7174
	// DefaultSize is the default ping data size.
	DefaultSize = 64
	// MinSize is RPING_MIN_BUFSIZE as rping is built: sizeof of
	// stringify(INT_MAX) plus sizeof of "rdma-ping-%d: ". rping.c does not
	// include <limits.h>, so INT_MAX stays the 7 letters "INT_MAX" and the
	// sum is 8 + 15 = 23, as Debian's rping 44.0 says ("valid range is 23
	// to 65536"). A ping number too long for the buffer is cut short.
	MinSize = 23
	// MaxSize is the largest size rping takes, RPING_BUFSIZE less one
	// (its usage error says 65536 all the same).
	MaxSize = bufSize - 1

	bufSize     = 64 * 1024               // RPING_BUFSIZE
	sqDepth     = 16                      // RPING_SQ_DEPTH: max_send_wr
	rqDepth     = 2                       // max_recv_wr
	cqDepth     = 2 * sqDepth             // entries of the one CQ
	infoLen     = 16                      // sizeof(struct rping_rdma_info)
	resolveWait = 2000 * time.Millisecond // rdma_resolve_addr and _route timeouts
	// disconnectWait bounds how long the client waits for the
	// DISCONNECTED event that follows its rdma_disconnect.
	disconnectWait = 5 * time.Second
)

// Options are rping's flags.
type Options struct {
	Server       bool       // -s (true) or -c (false)
	Addr         netip.Addr // -a: the server's address; the server binds it (default 0.0.0.0: any)
	Source       netip.Addr // -I: the client's source address (default: chosen by route)
	Port         uint16     // -p: rdma_cm port (7174)
	Count        int        // -C: pings the client makes (0: for ever; the server serves until disconnected)
	Size         int        // -S: ping data size, MinSize to MaxSize (64)
	Verbose      bool       // -v: print the ping data
	Validate     bool       // -V: check the ping data that comes back
	Debug        bool       // -d: print what happens, as rping's DEBUG_LOG does
	SelfCreateQP bool       // -q: create the QP with verbs and move it through its states by hand
	Persistent   bool       // -P: serve clients one after another and at once, until interrupted
	// Idle bounds each wait for the peer during the ping-pong (0: for
	// ever, as rping waits); Defaults sets DefaultIdle.
	Idle time.Duration
}

// DefaultIdle is how long a side waits for its peer's next step before
// it decides the peer has stopped answering.
const DefaultIdle = 10 * time.Second

// Defaults returns rping's defaults: a client of 0.0.0.0 port 7174 with
// 64-byte pings for ever.
func Defaults() Options {
	return Options{Addr: netip.IPv4Unspecified(), Port: DefaultPort, Size: DefaultSize, Idle: DefaultIdle}
}

func (o *Options) check() error {
	switch {
	case o.Size < MinSize || o.Size > MaxSize:
		return fmt.Errorf("rping: invalid size %d (valid range is %d to %d)", o.Size, MinSize, MaxSize)
	case o.Count < 0:
		return fmt.Errorf("rping: invalid count %d", o.Count)
	case o.Persistent && !o.Server:
		return errors.New("rping: -P is for the server")
	}
	return nil
}

// Run plays one side of rping: the server if o.Server, else the client.
// It writes rping's output lines to stdout and its diagnostics to stderr,
// and returns nil where rping exits with status 0; ExitStatus gives the
// status of an error. A server with o.Persistent runs until ctx ends.
func Run(ctx context.Context, o Options, stdout, stderr io.Writer) error {
	if err := o.check(); err != nil {
		return err
	}
	if !o.Addr.IsValid() {
		o.Addr = netip.IPv4Unspecified()
	}
	var outMu sync.Mutex
	r := &runner{
		o:     o,
		out:   &lockedWriter{mu: &outMu, w: stdout},
		errw:  &lockedWriter{mu: &outMu, w: stderr},
		cbs:   make(map[*rdmacm.ID]*cb),
		fatal: make(chan struct{}),
	}
	if o.Persistent {
		r.requests = make(chan *cb, 16)
	}
	ch, err := rdmacm.CreateEventChannel()
	if err != nil {
		r.perror("rdma_create_event_channel", err)
		return err
	}
	r.ch = ch
	defer ch.Close()
	main := r.newCB()
	id, err := rdmacm.CreateID(ch, main, rdmacm.PSTCP)
	if err != nil {
		r.perror("rdma_create_id", err)
		return cmFailed(err)
	}
	r.cmID = id
	if !o.Server {
		main.id = id
	}
	r.register(id, main)
	r.debugf("created cm_id %p\n", id)

	cmCtx, stopCM := context.WithCancel(context.Background())
	cmDone := make(chan struct{})
	go func() {
		defer close(cmDone)
		r.cmLoop(cmCtx)
	}()

	switch {
	case o.Server && o.Persistent:
		err = r.runPersistentServer(ctx, main)
	case o.Server:
		err = r.runServer(ctx, main)
	default:
		err = r.runClient(ctx, main)
	}

	select {
	case <-r.fatal:
		// rping's CM thread has exited the program with -1, whatever its
		// main thread was doing.
		err = errFatal
	default:
	}
	r.debugf("destroy cm_id %p\n", id)
	id.Destroy()
	stopCM()
	<-cmDone
	if o.Persistent {
		// Requests the listener did not get to.
		for {
			select {
			case c := <-r.requests:
				c.id.Reject(nil)
				c.id.Destroy()
				continue
			default:
			}
			break
		}
	}
	return err
}

// runner is what the sides of one Run share: the options, the output,
// the event channel and which control block each ID's events go to.
type runner struct {
	o    Options
	out  io.Writer // stdout
	errw io.Writer // stderr
	ch   *rdmacm.EventChannel
	cmID *rdmacm.ID // the listening ID (server) or the connection's (client)

	mu  sync.Mutex
	cbs map[*rdmacm.ID]*cb // guarded by mu

	// fatal is closed when the CM event handler fails, where rping's CM
	// thread exits the program.
	fatal     chan struct{}
	fatalOnce sync.Once

	// requests hands the connections of a persistent server from the CM
	// event handler to the listener.
	requests chan *cb
}

func (r *runner) register(id *rdmacm.ID, c *cb) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.cbs[id] = c
}

func (r *runner) unregister(id *rdmacm.ID) {
	r.mu.Lock()
	defer r.mu.Unlock()
	delete(r.cbs, id)
}

// cbFor returns the control block an event is for.
func (r *runner) cbFor(ev *rdmacm.Event) *cb {
	r.mu.Lock()
	defer r.mu.Unlock()
	if ev.Type == rdmacm.EventConnectRequest && ev.ListenID != nil {
		if c := r.cbs[ev.ListenID]; c != nil {
			return c
		}
	}
	if c := r.cbs[ev.ID]; c != nil {
		return c
	}
	return r.cbs[r.cmID]
}

func (r *runner) setFatal() { r.fatalOnce.Do(func() { close(r.fatal) }) }

func (r *runner) printf(format string, args ...any) { fmt.Fprintf(r.out, format, args...) }

func (r *runner) errorf(format string, args ...any) { fmt.Fprintf(r.errw, format, args...) }

// debugf prints as rping's DEBUG_LOG does: to stdout, with -d.
func (r *runner) debugf(format string, args ...any) {
	if r.o.Debug {
		fmt.Fprintf(r.out, format, args...)
	}
}

// perror prints "what: reason" as perror(3) does after a failed call.
func (r *runner) perror(what string, err error) {
	r.errorf("%s: %s\n", what, strerror(err))
}

// lockedWriter serializes the writes of the goroutines of a run (rping's
// threads share stdio's locks). fmt.Fprintf writes a line in one Write.
type lockedWriter struct {
	mu *sync.Mutex
	w  io.Writer
}

func (l *lockedWriter) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.w.Write(p)
}
