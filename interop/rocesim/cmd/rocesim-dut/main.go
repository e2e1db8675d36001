// Command rocesim-dut serves roce-sim's Side service (src/proto/side.proto
// of github.com/datenlord/roce-sim) over rdmago's verbs: the device under
// test that roce-sim's manager drives while its scapy simulator plays the
// peer. It is the counterpart of roce-sim's src/sanity_side.rs.
//
//	rocesim-dut -listen 198.18.0.1:9000
//
// It links the software RoCEv2 device (package rxe), whose devices
// RDMAGO_RXE_ADDR limits to the addresses it names; built with -tags
// rdmacore it links rdma-core's devices too, and OpenDevice takes the
// first device or the one the case configuration names.
//
// The Go code for side.proto is generated from roce-sim's files into
// internal/sidepb by run.sh, which builds this program.
package main

import (
	"context"
	"flag"
	"fmt"
	"log"
	"net"
	"os"
	"os/signal"
	"syscall"
	"time"

	"google.golang.org/grpc"

	"github.com/rdmago/rdmago/interop/rocesim/dut"
	"github.com/rdmago/rdmago/interop/rocesim/internal/sidepb"
	_ "github.com/rdmago/rdmago/rxe" // the software device
)

func main() {
	listen := flag.String("listen", "0.0.0.0:9000", "address and port to serve gRPC on")
	flag.Parse()
	log.SetPrefix("rocesim-dut: ")
	log.SetFlags(log.Lmicroseconds)

	ln, err := net.Listen("tcp", *listen)
	if err != nil {
		log.Fatal(err)
	}
	side := &dut.Side{Logf: log.Printf}
	srv := grpc.NewServer(grpc.UnaryInterceptor(logCalls))
	sidepb.RegisterSideServer(srv, &server{side: side})

	stop := make(chan os.Signal, 1)
	signal.Notify(stop, syscall.SIGINT, syscall.SIGTERM)
	served := make(chan error, 1)
	go func() { served <- srv.Serve(ln) }()
	log.Printf("serving on %s", ln.Addr())
	select {
	case err = <-served:
	case s := <-stop:
		log.Printf("%s: stopping", s)
		graceful := make(chan struct{})
		go func() { srv.GracefulStop(); close(graceful) }()
		select {
		case <-graceful:
		case <-time.After(2 * time.Second):
			srv.Stop()
		}
	}
	if cerr := side.Close(); cerr != nil {
		log.Printf("close: %v", cerr)
	}
	if f := side.Failures(); len(f) > 0 {
		log.Printf("%d failed checks", len(f))
	}
	if err != nil {
		log.Fatal(err)
	}
}

// logCalls logs every call and how it ended.
func logCalls(ctx context.Context, req any, info *grpc.UnaryServerInfo, h grpc.UnaryHandler) (any, error) {
	log.Printf("%s %v", info.FullMethod, req)
	resp, err := h(ctx, req)
	if err != nil {
		log.Printf("%s failed: %v", info.FullMethod, err)
	} else {
		log.Printf("%s -> %v", info.FullMethod, resp)
	}
	return resp, err
}

func init() {
	flag.Usage = func() {
		fmt.Fprintf(flag.CommandLine.Output(), "usage: %s [-listen addr:port]\n", os.Args[0])
		flag.PrintDefaults()
	}
}
