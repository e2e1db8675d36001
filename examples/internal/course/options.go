package course

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"strconv"
	"sync"
	"time"
)

// Role says which side of a program runs.
type Role int

// The two sides: the client, and the server (a listener that hands the
// connection to an agent).
const (
	Client Role = iota
	Server
)

func (r Role) String() string {
	if r == Server {
		return "server"
	}
	return "client"
}

// Kind says which family a program belongs to, which decides its
// defaults and whether it takes -w.
type Kind int

// The course's two families of programs.
const (
	PingPong Kind = iota // ping-sr-*: one message each way per round trip
	Blast                // blast-sr-*: a stream of SENDs from client to server
)

// Limits on what the programs move, for the options and for what a client
// asks of a server in its connect info.
const (
	MaxDataSize  = 1 << 20 // the largest message, in bytes
	MaxWindow    = 1024    // the most SENDs in flight, and receives posted ahead
	maxBlastData = 64 << 20
)

// DefaultPort is the port the servers listen on and the clients connect
// to when -p is not given.
const DefaultPort = "7471"

// Options are the course's struct our_options: what the command line set.
type Options struct {
	// Message starts every line the program prints ("ping-sr-1 client"),
	// as options->message does.
	Message    string
	Role       Role
	Kind       Kind
	ServerName string        // -a: the server's name or address (server: the address to listen on)
	ServerPort string        // -p: the port (server_port)
	Limit      uint64        // -c: how many messages (limit)
	DataSize   uint64        // -s: how many bytes each (data_size)
	Window     int           // -w: blast only: SENDs in flight, receives posted ahead
	Pause      time.Duration // -P: wait this long before each message
	Verify     bool          // -V: check the data of every message (our_verify_data)
	Verbose    bool          // -v: a line per message
	Tracing    bool          // -t: trace every verb on stderr (the TRACING flag)

	p *printer
}

// printer writes the lines of a program, one at a time: the CM event
// goroutine prints too.
type printer struct {
	mu             sync.Mutex
	stdout, stderr io.Writer
}

// ParseOptions parses a program's command line (our_process_options):
// "client" or "server", then the flags. prog names the program in the
// usage and in every line printed. Asked for help (-h) it prints the
// usage and returns flag.ErrHelp.
func ParseOptions(prog string, kind Kind, args []string, stdout, stderr io.Writer) (*Options, error) {
	o := &Options{Kind: kind, p: &printer{stdout: stdout, stderr: stderr}, ServerPort: DefaultPort, Limit: 10, DataSize: 100, Window: 1}
	if kind == Blast {
		o.Limit, o.DataSize, o.Window = 1000, 4096, 16
	}
	usage := func() {
		w := ""
		if kind == Blast {
			w = " [-w window]"
		}
		fmt.Fprintf(stderr, "usage: %s server [-a address] [-p port] [-c count] [-s size]%s [-P pause] [-V] [-v] [-t]\n", prog, w)
		fmt.Fprintf(stderr, "       %s client -a server [-p port] [-c count] [-s size]%s [-P pause] [-V] [-v] [-t]\n", prog, w)
	}
	if len(args) == 0 {
		usage()
		return nil, errors.New(prog + ": say client or server")
	}
	switch args[0] {
	case "client":
		o.Role = Client
	case "server":
		o.Role = Server
	case "-h", "-help", "--help":
		usage()
		return nil, flag.ErrHelp
	default:
		usage()
		return nil, fmt.Errorf("%s: %q is neither client nor server", prog, args[0])
	}
	o.Message = prog + " " + o.Role.String()

	fs := flag.NewFlagSet(prog, flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() {
		usage()
		fs.PrintDefaults()
	}
	fs.StringVar(&o.ServerName, "a", "", "server address (client: required; server: the address to listen on, default all)")
	fs.StringVar(&o.ServerPort, "p", o.ServerPort, "port")
	fs.Uint64Var(&o.Limit, "c", o.Limit, "how many messages")
	fs.Uint64Var(&o.DataSize, "s", o.DataSize, "bytes per message (1 to "+strconv.Itoa(MaxDataSize)+")")
	if kind == Blast {
		fs.IntVar(&o.Window, "w", o.Window, "SENDs in flight and receives posted ahead (1 to "+strconv.Itoa(MaxWindow)+")")
	}
	fs.DurationVar(&o.Pause, "P", 0, "wait this long before each message (to watch a waiting side)")
	fs.BoolVar(&o.Verify, "V", false, "check the data of every message")
	fs.BoolVar(&o.Verbose, "v", false, "print a line per message")
	fs.BoolVar(&o.Tracing, "t", false, "trace every verb on stderr")
	if err := fs.Parse(args[1:]); err != nil {
		return nil, err
	}
	if fs.NArg() > 0 {
		usage()
		return nil, fmt.Errorf("%s: unexpected argument %q", prog, fs.Arg(0))
	}
	if err := o.check(); err != nil {
		usage()
		return nil, fmt.Errorf("%s: %w", prog, err)
	}
	return o, nil
}

// check rejects options the programs cannot run with.
func (o *Options) check() error {
	switch {
	case o.Role == Client && o.ServerName == "":
		return errors.New("the client needs the server's address (-a)")
	case o.Limit == 0:
		return errors.New("-c must be at least 1")
	case o.DataSize == 0 || o.DataSize > MaxDataSize:
		return fmt.Errorf("-s %d: messages are 1 to %d bytes", o.DataSize, MaxDataSize)
	case o.Window < 1 || o.Window > MaxWindow:
		return fmt.Errorf("-w %d: the window is 1 to %d", o.Window, MaxWindow)
	case uint64(o.Window)*o.DataSize > maxBlastData:
		return fmt.Errorf("-w %d -s %d: the window's buffers would take more than %d MiB", o.Window, o.DataSize, maxBlastData>>20)
	case o.Pause < 0:
		return errors.New("-P must not be negative")
	}
	if _, err := strconv.ParseUint(o.ServerPort, 10, 16); err != nil {
		return fmt.Errorf("-p %q is not a port number", o.ServerPort)
	}
	return nil
}

// Report prints what a verb did, always (our_report_*): "<message>: <verb>
// <what> <value>".
func (o *Options) Report(verb, what string, value any) {
	o.line(o.p.stdout, verb, what, value)
}

// Trace prints what a verb did when tracing is on (our_trace_*).
func (o *Options) Trace(verb, what string, value any) {
	if o.Tracing {
		o.line(o.p.stderr, verb, what, value)
	}
}

// ReportError says on stderr which verb failed and why
// (our_report_error).
func (o *Options) ReportError(verb string, err error) {
	o.p.mu.Lock()
	defer o.p.mu.Unlock()
	fmt.Fprintf(o.p.stderr, "%s: %s failed: %v\n", o.Message, verb, err)
}

// Printf prints a line of its own after the message prefix.
func (o *Options) Printf(format string, args ...any) {
	o.p.mu.Lock()
	defer o.p.mu.Unlock()
	fmt.Fprintf(o.p.stdout, "%s: %s\n", o.Message, fmt.Sprintf(format, args...))
}

func (o *Options) line(w io.Writer, verb, what string, value any) {
	o.p.mu.Lock()
	defer o.p.mu.Unlock()
	fmt.Fprintf(w, "%s: %s %s %v\n", o.Message, verb, what, value)
}
