// Package grpcrdma runs gRPC over RDMA: its connections are rsockets
// (package rsocket), byte streams over RC queue pairs that the
// connection manager (package rdmacm) sets up, instead of TCP
// connections. gRPC's HTTP/2 framing, TLS, flow control and keepalives
// run unchanged on top.
//
// A server serves on the listener Listen returns; a client connects with
// the dial option WithRDMA:
//
//	l, err := grpcrdma.Listen("10.0.0.2:7471")  // rsocket, rbind, rlisten
//	s := grpc.NewServer()
//	pb.RegisterEchoServer(s, ...)
//	go s.Serve(l)                                 // raccept per connection
//
//	cc, err := grpc.NewClient("10.0.0.2:7471",
//		grpcrdma.WithRDMA(),                      // rsocket, rconnect
//		grpc.WithTransportCredentials(insecure.NewCredentials()))
//
// The address is an IP address or host name of an RDMA device (the
// software RoCE device of package rxe, or hardware through package
// rdmacore) and an rdma_cm port in the TCP port space: an rsocket port,
// not a kernel TCP port. The program must import a provider, as
//
//	import _ "github.com/rdmago/rdmago/rxe"
//
// does for the software device. On the wire a connection is librdmacm's
// rsockets protocol carrying HTTP/2, as package rsocket describes.
//
// Package grpcrdma is a module of its own, so that gRPC is no
// dependency of the rest of rdmago.
package grpcrdma

import (
	"context"
	"net"

	"google.golang.org/grpc"

	"github.com/rdmago/rdmago/rsocket"
)

// Listen listens for gRPC connections over rsockets on addr
// ("host:port"; an empty host means every address of every RDMA device,
// port 0 a free one), for grpc.Server.Serve. It is rsocket.Listen on
// rdma_cm's TCP port space: rsocket, rbind and rlisten in librdmacm
// (rdma_create_id with RDMA_PS_TCP, rdma_bind_addr, rdma_listen); the
// server's Accept is raccept (rdma_get_request, rdma_accept).
//
// Close the listener by stopping the server (grpc.Server.Stop or
// GracefulStop), or with its Close.
func Listen(addr string) (net.Listener, error) {
	return ListenConfig(addr, rsocket.Config{})
}

// ListenConfig is Listen with cfg (buffer and queue sizes, keepalive)
// for the connections it accepts: rsetsockopt on the listening rsocket.
func ListenConfig(addr string, cfg rsocket.Config) (net.Listener, error) {
	lc := rsocket.ListenConfig{Config: cfg}
	l, err := lc.Listen(context.Background(), "rsocket", addr)
	if err != nil {
		return nil, err
	}
	return l, nil
}

// Dial connects an rsocket to addr ("host:port"), bounded by ctx: rsocket
// and rconnect in librdmacm (rdma_resolve_addr, rdma_resolve_route,
// rdma_connect). Its signature is the one grpc.WithContextDialer takes;
// WithRDMA is that option.
func Dial(ctx context.Context, addr string) (net.Conn, error) {
	var d rsocket.Dialer
	return d.DialContext(ctx, "rsocket", addr)
}

// WithRDMA is the grpc.DialOption that makes a ClientConn connect over
// rsockets with the default rsocket.Config: grpc.WithContextDialer(Dial).
// The addresses the ClientConn's resolver gives (for a host name, those
// of the dns resolver) are dialed as rsocket addresses.
func WithRDMA() grpc.DialOption {
	return grpc.WithContextDialer(Dial)
}

// WithDialer is WithRDMA dialing with d: its Config, and the local
// address to connect from (rbind before rconnect). d must not change
// while the ClientConn uses it.
func WithDialer(d *rsocket.Dialer) grpc.DialOption {
	return grpc.WithContextDialer(func(ctx context.Context, addr string) (net.Conn, error) {
		return d.DialContext(ctx, "rsocket", addr)
	})
}
