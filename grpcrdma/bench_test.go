package grpcrdma_test

import (
	"context"
	"net"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	testpb "google.golang.org/grpc/interop/grpc_testing"

	"github.com/rdmago/rdmago/grpcrdma"
)

// The benchmarks run gRPC over rsockets on the host's software RoCE
// device on 127.0.0.1 beside gRPC over TCP on the same loopback, so that
// one run gives the ratio:
//
//	cd grpcrdma && go test -run '^$' -bench .

// benchClient serves testServer over rsockets or TCP on 127.0.0.1, and
// returns a connected client.
func benchClient(b *testing.B, useTCP bool) testpb.TestServiceClient {
	b.Helper()
	var l net.Listener
	var err error
	opts := []grpc.DialOption{grpc.WithTransportCredentials(insecure.NewCredentials())}
	if useTCP {
		l, err = net.Listen("tcp", "127.0.0.1:0")
	} else {
		l, err = grpcrdma.Listen("127.0.0.1:0")
		opts = append(opts, grpcrdma.WithRDMA())
	}
	if err != nil {
		b.Skip("no listener: ", err)
	}
	srv := grpc.NewServer()
	testpb.RegisterTestServiceServer(srv, testServer{})
	go srv.Serve(l)
	cc, err := grpc.NewClient(l.Addr().String(), opts...)
	if err != nil {
		srv.Stop()
		b.Fatal(err)
	}
	b.Cleanup(func() { cc.Close(); srv.Stop() })
	client := testpb.NewTestServiceClient(cc)
	// Connect before the clock starts.
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if _, err := client.UnaryCall(ctx, &testpb.SimpleRequest{}, grpc.WaitForReady(true)); err != nil {
		b.Fatal(err)
	}
	return client
}

func transports(b *testing.B, f func(b *testing.B, client testpb.TestServiceClient)) {
	b.Run("rsocket", func(b *testing.B) { f(b, benchClient(b, false)) })
	b.Run("tcp", func(b *testing.B) { f(b, benchClient(b, true)) })
}

// BenchmarkUnary64B times a unary call of 64 bytes each way: one op is
// one round trip.
func BenchmarkUnary64B(b *testing.B) {
	transports(b, func(b *testing.B, client testpb.TestServiceClient) {
		req := &testpb.SimpleRequest{Payload: &testpb.Payload{Body: make([]byte, 64)}}
		ctx := context.Background()
		b.ReportAllocs()
		b.ResetTimer()
		for range b.N {
			if _, err := client.UnaryCall(ctx, req); err != nil {
				b.Fatal(err)
			}
		}
	})
}

// BenchmarkStreamRoundTrip64B times a 64-byte ping-pong on one open
// bidirectional stream: one op is one message each way.
func BenchmarkStreamRoundTrip64B(b *testing.B) {
	transports(b, func(b *testing.B, client testpb.TestServiceClient) {
		ctx, cancel := context.WithCancel(context.Background())
		defer cancel()
		stream, err := client.FullDuplexCall(ctx)
		if err != nil {
			b.Fatal(err)
		}
		req := &testpb.StreamingOutputCallRequest{Payload: &testpb.Payload{Body: make([]byte, 64)}}
		b.ResetTimer()
		for range b.N {
			if err := stream.Send(req); err != nil {
				b.Fatal(err)
			}
			if _, err := stream.Recv(); err != nil {
				b.Fatal(err)
			}
		}
		b.StopTimer()
		if err := stream.CloseSend(); err != nil {
			b.Fatal(err)
		}
	})
}

// BenchmarkStream64KiB streams 64 KiB messages one way, client to
// server, on one stream; the op ends when the server has counted them all.
func BenchmarkStream64KiB(b *testing.B) {
	transports(b, func(b *testing.B, client testpb.TestServiceClient) {
		const size = 64 << 10
		req := &testpb.StreamingInputCallRequest{Payload: &testpb.Payload{Body: make([]byte, size)}}
		b.SetBytes(size)
		b.ResetTimer()
		stream, err := client.StreamingInputCall(context.Background())
		if err != nil {
			b.Fatal(err)
		}
		for range b.N {
			if err := stream.Send(req); err != nil {
				b.Fatal(err)
			}
		}
		resp, err := stream.CloseAndRecv()
		if err != nil {
			b.Fatal(err)
		}
		// The count is an int32, which wraps past 2 GiB on either side.
		if got, want := resp.GetAggregatedPayloadSize(), int32(b.N*size); got != want {
			b.Fatalf("server counted %d bytes; want %d", got, want)
		}
	})
}
