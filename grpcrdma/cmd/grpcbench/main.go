// Command grpcbench measures gRPC over rsockets, or over TCP for
// comparison, between two processes: a server serving gRPC's interop
// TestService, and a client that times unary calls or streams messages
// one way for a while.
//
//	grpcbench -s -a 127.0.0.1:7471 &           # serve over rsockets
//	grpcbench -a 127.0.0.1:7471 -op unary      # unary round trips
//	grpcbench -a 127.0.0.1:7471 -op stream     # 64 KiB messages one way
//
// With -tcp both sides use TCP instead (the ports are separate spaces:
// an rsocket port is an rdma_cm port, not a kernel TCP port). Both sides
// run on the software RoCE device of package rxe.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"os"
	"os/signal"
	"runtime/pprof"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	testpb "google.golang.org/grpc/interop/grpc_testing"

	"github.com/rdmago/rdmago/grpcrdma"
	_ "github.com/rdmago/rdmago/rxe" // the software RoCE device
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	if err := run(ctx, os.Args[1:], os.Stdout); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return // -h: the synopsis is printed
		}
		fmt.Fprintln(os.Stderr, "grpcbench:", err)
		os.Exit(2)
	}
}

// run is grpcbench with args, writing its report to out. A server runs
// until ctx ends.
func run(ctx context.Context, args []string, out io.Writer) error {
	fs := flag.NewFlagSet("grpcbench", flag.ContinueOnError)
	fs.SetOutput(out)
	serve := fs.Bool("s", false, "serve, rather than measure")
	addr := fs.String("a", "127.0.0.1:7471", "`address` to listen on or connect to")
	useTCP := fs.Bool("tcp", false, "use TCP instead of rsockets")
	op := fs.String("op", "unary", "what to measure: `unary` calls or a one-way stream")
	size := fs.Int("size", 0, "message `bytes` (default 64 for unary, 65536 for stream)")
	dur := fs.Duration("d", 2*time.Second, "how long to measure")
	profile := fs.String("cpuprofile", "", "write a CPU profile of this side to `file`")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if *profile != "" {
		f, err := os.Create(*profile)
		if err != nil {
			return err
		}
		defer f.Close()
		if err := pprof.StartCPUProfile(f); err != nil {
			return err
		}
		defer pprof.StopCPUProfile()
	}
	if fs.NArg() != 0 {
		return fmt.Errorf("unexpected argument %q", fs.Arg(0))
	}
	transport := "rsocket"
	if *useTCP {
		transport = "tcp"
	}
	if *serve {
		return runServer(ctx, *addr, *useTCP, out)
	}
	if *size == 0 {
		*size = 64
		if *op == "stream" {
			*size = 64 << 10
		}
	}
	if *size < 0 || *size > 4<<20-1024 {
		return fmt.Errorf("-size %d: want 0 to %d (gRPC's default message limit)", *size, 4<<20-1024)
	}
	if *dur <= 0 {
		return fmt.Errorf("-d %v: want a positive duration", *dur)
	}
	if *op != "unary" && *op != "stream" {
		return fmt.Errorf("-op %q: want unary or stream", *op)
	}
	opts := []grpc.DialOption{grpc.WithTransportCredentials(insecure.NewCredentials())}
	if !*useTCP {
		opts = append(opts, grpcrdma.WithRDMA())
	}
	cc, err := grpc.NewClient(*addr, opts...)
	if err != nil {
		return err
	}
	defer cc.Close()
	client := testpb.NewTestServiceClient(cc)
	cctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	if _, err := client.UnaryCall(cctx, &testpb.SimpleRequest{}); err != nil {
		return fmt.Errorf("connecting to %s over %s: %w", *addr, transport, err)
	}
	body := make([]byte, *size)
	if *op == "unary" {
		n, took, err := unary(ctx, client, body, *dur)
		if err != nil {
			return err
		}
		fmt.Fprintf(out, "unary over %s: %d calls of %d bytes in %v, %.1f µs/call\n",
			transport, n, *size, took.Round(time.Millisecond), float64(took.Microseconds())/float64(n))
		return nil
	}
	n, took, err := stream(ctx, client, body, *dur)
	if err != nil {
		return err
	}
	fmt.Fprintf(out, "stream over %s: %d messages of %d bytes in %v, %.1f MB/s\n",
		transport, n, *size, took.Round(time.Millisecond), float64(n)*float64(*size)/took.Seconds()/1e6)
	return nil
}

// unary makes calls of body until dur has passed.
func unary(ctx context.Context, client testpb.TestServiceClient, body []byte, dur time.Duration) (int, time.Duration, error) {
	req := &testpb.SimpleRequest{Payload: &testpb.Payload{Body: body}}
	start := time.Now()
	n := 0
	for time.Since(start) < dur {
		if _, err := client.UnaryCall(ctx, req); err != nil {
			return n, 0, err
		}
		n++
	}
	return n, time.Since(start), nil
}

// stream sends body on one stream until dur has passed, and waits for the
// server's count.
func stream(ctx context.Context, client testpb.TestServiceClient, body []byte, dur time.Duration) (int, time.Duration, error) {
	req := &testpb.StreamingInputCallRequest{Payload: &testpb.Payload{Body: body}}
	start := time.Now()
	s, err := client.StreamingInputCall(ctx)
	if err != nil {
		return 0, 0, err
	}
	n := 0
	for time.Since(start) < dur {
		if err := s.Send(req); err != nil {
			return n, 0, err
		}
		n++
	}
	resp, err := s.CloseAndRecv()
	if err != nil {
		return n, 0, err
	}
	if got, want := resp.GetAggregatedPayloadSize(), int32(n*len(body)); got != want {
		return n, 0, fmt.Errorf("the server counted %d bytes; %d were sent", got, want)
	}
	return n, time.Since(start), nil
}

// runServer serves on addr until ctx ends.
func runServer(ctx context.Context, addr string, useTCP bool, out io.Writer) error {
	var l net.Listener
	var err error
	transport := "rsocket"
	if useTCP {
		transport = "tcp"
		l, err = net.Listen("tcp", addr)
	} else {
		l, err = grpcrdma.Listen(addr)
	}
	if err != nil {
		return err
	}
	srv := grpc.NewServer()
	testpb.RegisterTestServiceServer(srv, server{})
	fmt.Fprintf(out, "serving over %s on %s\n", transport, l.Addr())
	done := make(chan error, 1)
	go func() { done <- srv.Serve(l) }()
	select {
	case err := <-done:
		return err
	case <-ctx.Done():
		srv.Stop()
		<-done
		return nil
	}
}

// server answers UnaryCall with the payload it is sent, and counts what
// StreamingInputCall brings.
type server struct {
	testpb.UnimplementedTestServiceServer
}

func (server) UnaryCall(ctx context.Context, req *testpb.SimpleRequest) (*testpb.SimpleResponse, error) {
	return &testpb.SimpleResponse{Payload: req.GetPayload()}, nil
}

func (server) StreamingInputCall(s testpb.TestService_StreamingInputCallServer) error {
	var n int32
	for {
		req, err := s.Recv()
		if err == io.EOF {
			return s.SendAndClose(&testpb.StreamingInputCallResponse{AggregatedPayloadSize: n})
		}
		if err != nil {
			return err
		}
		n += int32(len(req.GetPayload().GetBody()))
	}
}
