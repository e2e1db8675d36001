package grpcrdma_test

import (
	"bytes"
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"io"
	"math/big"
	"net"
	"net/netip"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"
	testpb "google.golang.org/grpc/interop/grpc_testing"
	"google.golang.org/grpc/peer"
	"google.golang.org/grpc/status"

	"github.com/rdmago/rdmago/grpcrdma"
	"github.com/rdmago/rdmago/internal/memnet"
	"github.com/rdmago/rdmago/rsocket"
)

// testServer is gRPC's interop TestService, echoing: UnaryCall and
// FullDuplexCall return the payloads they are sent, StreamingInputCall
// counts them. UnaryCall names the peer in the response's Hostname.
type testServer struct {
	testpb.UnimplementedTestServiceServer
}

func (testServer) UnaryCall(ctx context.Context, req *testpb.SimpleRequest) (*testpb.SimpleResponse, error) {
	resp := &testpb.SimpleResponse{Payload: req.GetPayload()}
	if p, ok := peer.FromContext(ctx); ok {
		resp.Hostname = p.Addr.String()
	}
	return resp, nil
}

func (testServer) FullDuplexCall(stream testpb.TestService_FullDuplexCallServer) error {
	for {
		req, err := stream.Recv()
		if err == io.EOF {
			return nil
		}
		if err != nil {
			return err
		}
		if err := stream.Send(&testpb.StreamingOutputCallResponse{Payload: req.GetPayload()}); err != nil {
			return err
		}
	}
}

func (testServer) StreamingInputCall(stream testpb.TestService_StreamingInputCallServer) error {
	var n int32
	for {
		req, err := stream.Recv()
		if err == io.EOF {
			return stream.SendAndClose(&testpb.StreamingInputCallResponse{AggregatedPayloadSize: n})
		}
		if err != nil {
			return err
		}
		n += int32(len(req.GetPayload().GetBody()))
	}
}

// setup serves testServer over rsockets between two software RoCE
// devices on an in-memory network, with TLS or without, and returns a
// client of it, the server, and the client device's address. Cleanup
// closes the client, then stops the server.
func setup(t *testing.T, useTLS bool) (testpb.TestServiceClient, *grpc.Server, netip.Addr) {
	t.Helper()
	sa, ca, _ := memnet.Pair(t, 79, false)
	l, err := grpcrdma.Listen(netip.AddrPortFrom(sa, 0).String())
	if err != nil {
		t.Fatal(err)
	}
	srvCreds, cliCreds := insecure.NewCredentials(), insecure.NewCredentials()
	if useTLS {
		cert, pool := selfSigned(t, "grpcrdma.test")
		srvCreds = credentials.NewTLS(&tls.Config{Certificates: []tls.Certificate{cert}})
		cliCreds = credentials.NewTLS(&tls.Config{RootCAs: pool, ServerName: "grpcrdma.test"})
	}
	srv := grpc.NewServer(grpc.Creds(srvCreds))
	testpb.RegisterTestServiceServer(srv, testServer{})
	served := make(chan error, 1)
	go func() { served <- srv.Serve(l) }()

	d := &rsocket.Dialer{LocalAddr: netip.AddrPortFrom(ca, 0)}
	cc, err := grpc.NewClient(l.Addr().String(), grpcrdma.WithDialer(d), grpc.WithTransportCredentials(cliCreds))
	if err != nil {
		srv.Stop()
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := cc.Close(); err != nil {
			t.Errorf("ClientConn.Close: %v", err)
		}
		srv.Stop()
		if err := <-served; err != nil {
			t.Errorf("Serve: %v", err)
		}
	})
	return testpb.NewTestServiceClient(cc), srv, ca
}

// selfSigned makes a certificate for name and a pool that trusts it.
func selfSigned(t testing.TB, name string) (tls.Certificate, *x509.CertPool) {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: name}, DNSNames: []string{name},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		KeyUsage: x509.KeyUsageDigitalSignature, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	c, err := x509.ParseCertificate(der)
	if err != nil {
		t.Fatal(err)
	}
	pool := x509.NewCertPool()
	pool.AddCert(c)
	return tls.Certificate{Certificate: [][]byte{der}, PrivateKey: key}, pool
}

// pattern returns n bytes that differ from one offset to the next, so
// that a misplaced or lost chunk shows.
func pattern(n int) []byte {
	b := make([]byte, n)
	for i := range b {
		b[i] = byte(i*7 + i>>8)
	}
	return b
}

func forEachSecurity(t *testing.T, f func(t *testing.T, useTLS bool)) {
	t.Run("insecure", func(t *testing.T) { f(t, false) })
	t.Run("tls", func(t *testing.T) { f(t, true) })
}

func TestUnaryCallOverRsockets(t *testing.T) {
	forEachSecurity(t, func(t *testing.T, useTLS bool) {
		memnet.NoLeaks(t)
		client, _, ca := setup(t, useTLS)
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		// From empty to past the rsocket ring and an HTTP/2 window.
		for _, n := range []int{0, 1, 64, 2 << 10, 64 << 10, 1 << 20} {
			body := pattern(n)
			resp, err := client.UnaryCall(ctx, &testpb.SimpleRequest{Payload: &testpb.Payload{Body: body}})
			if err != nil {
				t.Fatalf("UnaryCall of %d bytes: %v", n, err)
			}
			if !bytes.Equal(resp.GetPayload().GetBody(), body) {
				t.Fatalf("UnaryCall of %d bytes came back as %d different bytes", n, len(resp.GetPayload().GetBody()))
			}
			// The server saw the client device's address: the call went
			// over the rsocket, not a TCP connection.
			if !strings.HasPrefix(resp.GetHostname(), ca.String()+":") {
				t.Fatalf("server saw the call from %q; want %v", resp.GetHostname(), ca)
			}
		}
	})
}

func TestBidirectionalStreamOverRsockets(t *testing.T) {
	forEachSecurity(t, func(t *testing.T, useTLS bool) {
		memnet.NoLeaks(t)
		client, _, _ := setup(t, useTLS)
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		stream, err := client.FullDuplexCall(ctx)
		if err != nil {
			t.Fatal(err)
		}
		sizes := []int{1, 100, 4 << 10, 64 << 10, 300 << 10, 0, 17}
		// Send everything from one goroutine while this one receives, so
		// that both directions carry data at once.
		sent := make(chan error, 1)
		go func() {
			for _, n := range sizes {
				if err := stream.Send(&testpb.StreamingOutputCallRequest{Payload: &testpb.Payload{Body: pattern(n)}}); err != nil {
					sent <- err
					return
				}
			}
			sent <- stream.CloseSend()
		}()
		for i, n := range sizes {
			resp, err := stream.Recv()
			if err != nil {
				t.Fatalf("Recv %d: %v", i, err)
			}
			if !bytes.Equal(resp.GetPayload().GetBody(), pattern(n)) {
				t.Fatalf("message %d: got %d bytes back, want the %d sent", i, len(resp.GetPayload().GetBody()), n)
			}
		}
		if err := <-sent; err != nil {
			t.Fatalf("Send: %v", err)
		}
		if _, err := stream.Recv(); err != io.EOF {
			t.Fatalf("Recv after the server's end: %v; want io.EOF", err)
		}
	})
}

func TestClientStreamOverRsockets(t *testing.T) {
	forEachSecurity(t, func(t *testing.T, useTLS bool) {
		memnet.NoLeaks(t)
		client, _, _ := setup(t, useTLS)
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		stream, err := client.StreamingInputCall(ctx)
		if err != nil {
			t.Fatal(err)
		}
		const msgs, size = 64, 64 << 10
		req := &testpb.StreamingInputCallRequest{Payload: &testpb.Payload{Body: pattern(size)}}
		for i := range msgs {
			if err := stream.Send(req); err != nil {
				t.Fatalf("Send %d: %v", i, err)
			}
		}
		resp, err := stream.CloseAndRecv()
		if err != nil {
			t.Fatal(err)
		}
		if got := resp.GetAggregatedPayloadSize(); got != msgs*size {
			t.Fatalf("server counted %d bytes; want %d", got, msgs*size)
		}
	})
}

// A server that stops while a stream is open ends the stream with
// codes.Unavailable, not a hang until the deadline.
func TestServerStopMidStreamEndsTheStreamUnavailable(t *testing.T) {
	forEachSecurity(t, func(t *testing.T, useTLS bool) {
		memnet.NoLeaks(t)
		client, srv, _ := setup(t, useTLS)
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		stream, err := client.FullDuplexCall(ctx)
		if err != nil {
			t.Fatal(err)
		}
		req := &testpb.StreamingOutputCallRequest{Payload: &testpb.Payload{Body: pattern(1000)}}
		if err := stream.Send(req); err != nil {
			t.Fatal(err)
		}
		if _, err := stream.Recv(); err != nil {
			t.Fatal(err)
		}
		srv.Stop() // closes the rsockets under the open stream
		_, err = stream.Recv()
		if status.Code(err) != codes.Unavailable {
			t.Fatalf("Recv after the server stopped: %v; want code Unavailable", err)
		}
		t.Logf("the client sees: %v", err)
		// And the ClientConn cannot reach the server again.
		_, err = client.UnaryCall(ctx, &testpb.SimpleRequest{})
		if status.Code(err) != codes.Unavailable {
			t.Fatalf("UnaryCall after the server stopped: %v; want code Unavailable", err)
		}
	})
}

// A call to an address where no server listens fails at once with
// codes.Unavailable, saying the connection was refused (the connection
// manager's REJ, invalid service ID). It runs on the host's software RoCE
// device on 127.0.0.1.
func TestCallWithoutServerIsRefused(t *testing.T) {
	memnet.NoLeaks(t)
	l, err := grpcrdma.Listen("127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	l.Close() // a port nobody listens on
	cc, err := grpc.NewClient(addr, grpcrdma.WithRDMA(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer cc.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	_, err = testpb.NewTestServiceClient(cc).UnaryCall(ctx, &testpb.SimpleRequest{})
	if status.Code(err) != codes.Unavailable || !strings.Contains(err.Error(), "refused") {
		t.Fatalf("UnaryCall: %v; want code Unavailable, connection refused", err)
	}
	t.Logf("the client sees: %v", err)
}

// Dial's conns are rsockets; Listen's listener is rsocket's. This one
// runs on the host's software RoCE device on 127.0.0.1, the device Dial
// with no local address finds.
func TestDialAndListenAreRsockets(t *testing.T) {
	memnet.NoLeaks(t)
	l, err := grpcrdma.Listen("127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	if _, ok := l.(*rsocket.Listener); !ok {
		t.Fatalf("Listen returned a %T", l)
	}
	accepted := make(chan net.Conn, 1)
	go func() {
		c, _ := l.Accept()
		accepted <- c
	}()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	c, err := grpcrdma.Dial(ctx, l.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	s := <-accepted
	if s == nil {
		t.Fatal("Accept failed")
	}
	defer s.Close()
	if _, ok := c.(*rsocket.Conn); !ok {
		t.Fatalf("Dial returned a %T", c)
	}
	if got := c.RemoteAddr().String(); got != l.Addr().String() {
		t.Errorf("client's peer is %s; want %s", got, l.Addr())
	}
	if _, err := grpcrdma.Listen("not an address"); err == nil {
		t.Error("Listen of a malformed address succeeded")
	}
	if _, err := grpcrdma.Dial(ctx, "not an address"); err == nil {
		t.Error("Dial of a malformed address succeeded")
	}
}
