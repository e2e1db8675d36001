package rsocket_test

import (
	"context"
	"io"
	"net"
	"testing"
	"time"

	"github.com/rdmago/rdmago/rsocket"
)

// The benchmarks run rsockets on the host's software RoCE device over
// loopback (127.0.0.1) beside TCP over the same loopback, so that one run
// gives the ratio:
//
//	go test -run '^$' -bench . ./rsocket

// benchPair returns two connected net.Conns: rsockets, or TCP.
func benchPair(b *testing.B, useTCP bool) (cli, srv net.Conn) {
	b.Helper()
	var l net.Listener
	var err error
	if useTCP {
		l, err = net.Listen("tcp", "127.0.0.1:0")
	} else {
		l, err = rsocket.Listen("tcp", "127.0.0.1:0")
	}
	if err != nil {
		b.Skip("no listener: ", err)
	}
	defer l.Close()
	acc := make(chan net.Conn, 1)
	go func() {
		c, err := l.Accept()
		if err != nil {
			b.Error(err)
		}
		acc <- c
	}()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if useTCP {
		var d net.Dialer
		cli, err = d.DialContext(ctx, "tcp", l.Addr().String())
	} else {
		cli, err = rsocket.Dial(ctx, "tcp", l.Addr().String())
	}
	srv = <-acc
	if err != nil || srv == nil {
		b.Fatal("dial: ", err)
	}
	b.Cleanup(func() { cli.Close(); srv.Close() })
	return cli, srv
}

func transports(b *testing.B, f func(b *testing.B, useTCP bool)) {
	b.Run("rsocket", func(b *testing.B) { f(b, false) })
	b.Run("tcp", func(b *testing.B) { f(b, true) })
}

// BenchmarkWrite64KiB streams 64 KiB writes one way.
func BenchmarkWrite64KiB(b *testing.B) {
	transports(b, func(b *testing.B, useTCP bool) {
		cli, srv := benchPair(b, useTCP)
		buf := make([]byte, 64<<10)
		done := make(chan error, 1)
		go func() {
			_, err := io.CopyN(io.Discard, srv, int64(b.N)*int64(len(buf)))
			done <- err
		}()
		b.SetBytes(int64(len(buf)))
		b.ResetTimer()
		for range b.N {
			if _, err := cli.Write(buf); err != nil {
				b.Fatal(err)
			}
		}
		if err := <-done; err != nil {
			b.Fatal(err)
		}
	})
}

// BenchmarkRoundTrip64B times a 64-byte ping-pong: one op is one round
// trip.
func BenchmarkRoundTrip64B(b *testing.B) {
	transports(b, func(b *testing.B, useTCP bool) {
		cli, srv := benchPair(b, useTCP)
		go func() {
			buf := make([]byte, 64)
			for {
				if _, err := io.ReadFull(srv, buf); err != nil {
					return
				}
				if _, err := srv.Write(buf); err != nil {
					return
				}
			}
		}()
		buf := make([]byte, 64)
		b.ResetTimer()
		for range b.N {
			if _, err := cli.Write(buf); err != nil {
				b.Fatal(err)
			}
			if _, err := io.ReadFull(cli, buf); err != nil {
				b.Fatal(err)
			}
		}
	})
}
