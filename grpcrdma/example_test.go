package grpcrdma_test

import (
	"context"
	"fmt"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"

	"github.com/rdmago/rdmago/grpcrdma"
	_ "github.com/rdmago/rdmago/rxe" // the software RoCE device: all a real program needs
)

// A gRPC server and client talking over RDMA, both on 127.0.0.1 in one
// process: here gRPC's own health service, but any generated service
// registers the same way.
func ExampleWithRDMA() {
	l, err := grpcrdma.Listen("127.0.0.1:0") // rsocket, rbind, rlisten
	if err != nil {
		fmt.Println(err)
		return
	}
	srv := grpc.NewServer()
	healthpb.RegisterHealthServer(srv, health.NewServer())
	go srv.Serve(l) // each connection is raccept
	defer srv.Stop()

	cc, err := grpc.NewClient(l.Addr().String(),
		grpcrdma.WithRDMA(), // each connection is rsocket, rconnect
		grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		fmt.Println(err)
		return
	}
	defer cc.Close()
	resp, err := healthpb.NewHealthClient(cc).Check(context.Background(), &healthpb.HealthCheckRequest{})
	if err != nil {
		fmt.Println(err)
		return
	}
	fmt.Println(resp.GetStatus())
	// Output:
	// SERVING
}
