package rdmacm_test

import (
	"context"
	"net"
	"os"
	"testing"
	"time"

	"github.com/rdmago/rdmago/internal/selfserver"
	"github.com/rdmago/rdmago/rdmacm"
)

// BenchmarkProcsDialAccept is BenchmarkDialAccept with the listener in a
// process of its own, as two programs would have it: the test binary
// runs itself again as the server, on 127.0.0.3 with a software device of
// its own (RDMAGO_RXE_ADDR), and the benchmark dials it from its device
// at 127.0.0.1; TCP runs the same way beside it. Connection setup then
// waits on the other process's wake-ups, which TCP's does not: the
// kernel completes TCP's handshake without the listening program, while
// rdma_cm's REP leaves only once the program has accepted (rdma_accept).
// The udp case times what one such answer costs at least: a datagram to
// a server process that waits for it in a read and sends it back.
//
//	go test -run '^$' -bench ProcsDialAccept ./rdmacm
func BenchmarkProcsDialAccept(b *testing.B) {
	for _, tr := range []string{"rdmacm", "tcp", "udp"} {
		b.Run(tr, func(b *testing.B) {
			startBenchDevices(b)
			startDialServer(b, tr)
			ctx := context.Background()
			if tr == "udp" {
				c, err := net.Dial("udp", dialServerAddr)
				if err != nil {
					b.Fatal(err)
				}
				defer c.Close()
				buf := make([]byte, 256) // a MAD's size
				b.ResetTimer()
				for range b.N {
					if _, err := c.Write(buf); err != nil {
						b.Fatal(err)
					}
					c.SetReadDeadline(time.Now().Add(5 * time.Second))
					if _, err := c.Read(buf); err != nil {
						b.Fatal(err)
					}
				}
				return
			}
			b.ResetTimer()
			for range b.N {
				if tr == "tcp" {
					c, err := net.Dial("tcp", dialServerAddr)
					if err != nil {
						b.Fatal(err)
					}
					c.Close()
					continue
				}
				c, err := rdmacm.Dial(ctx, dialServerAddr, nil)
				if err != nil {
					b.Fatal(err)
				}
				c.Close()
			}
		})
	}
}

// dialServerEnv names the transport of the server process.
const dialServerEnv = "RDMACM_BENCH_DIAL_SERVER"

// dialServerAddr is where the server process listens. Its device speaks
// RoCEv2 on the port of startBenchDevices's, which the benchmark dials
// from.
const dialServerAddr = "127.0.0.3:7496"

// TestProcsDialServer is the server process of BenchmarkProcsDialAccept;
// it skips unless the benchmark started it. It accepts connections and
// closes each once its peer disconnects, as BenchmarkDialAccept's
// listener does (or, for udp, echoes datagrams), until the benchmark ends.
func TestProcsDialServer(t *testing.T) {
	tr := os.Getenv(dialServerEnv)
	if tr == "" {
		t.Skip("runs as the server process of BenchmarkProcsDialAccept")
	}
	ctx := context.Background()
	switch tr {
	case "udp":
		u, err := net.ListenPacket("udp", dialServerAddr)
		if err != nil {
			t.Fatal(err)
		}
		selfserver.Serving(func() { u.Close() })
		buf := make([]byte, 512)
		for {
			n, from, err := u.ReadFrom(buf)
			if err != nil {
				return
			}
			u.WriteTo(buf[:n], from)
		}
	case "tcp":
		l, err := net.Listen("tcp", dialServerAddr)
		if err != nil {
			t.Fatal(err)
		}
		selfserver.Serving(func() { l.Close() })
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			go func() { c.Read(make([]byte, 1)); c.Close() }()
		}
	default:
		l, err := rdmacm.Listen(dialServerAddr, &rdmacm.Options{Backlog: 64})
		if err != nil {
			t.Fatal(err)
		}
		selfserver.Serving(func() { l.Close() })
		for {
			c, err := l.Accept(ctx)
			if err != nil {
				return
			}
			go func() { c.WaitDisconnect(ctx); c.Close() }()
		}
	}
}

// startDialServer starts the server process for transport tr and waits
// until it listens; it ends with the benchmark.
func startDialServer(b *testing.B, tr string) {
	b.Helper()
	selfserver.Start(b, "TestProcsDialServer", []string{dialServerEnv + "=" + tr, "RDMAGO_RXE_ADDR=127.0.0.3", "RDMAGO_RXE_PORT=14791"})
}
