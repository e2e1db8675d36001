package rdmacm_test

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

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
// listener does, until the benchmark closes its standard input.
func TestProcsDialServer(t *testing.T) {
	tr := os.Getenv(dialServerEnv)
	if tr == "" {
		t.Skip("runs as the server process of BenchmarkProcsDialAccept")
	}
	ctx := context.Background()
	var accept func() (io.Closer, error)
	var l io.Closer
	switch tr {
	case "udp":
		u, err := net.ListenPacket("udp", dialServerAddr)
		if err != nil {
			t.Fatal(err)
		}
		l = u
		accept = func() (io.Closer, error) {
			buf := make([]byte, 512)
			for {
				n, from, err := u.ReadFrom(buf)
				if err != nil {
					return nil, err
				}
				u.WriteTo(buf[:n], from)
			}
		}
	case "tcp":
		tl, err := net.Listen("tcp", dialServerAddr)
		if err != nil {
			t.Fatal(err)
		}
		l = tl
		accept = func() (io.Closer, error) {
			c, err := tl.Accept()
			if err == nil {
				go func() { c.Read(make([]byte, 1)); c.Close() }()
			}
			return c, err
		}
	default:
		cl, err := rdmacm.Listen(dialServerAddr, &rdmacm.Options{Backlog: 64})
		if err != nil {
			t.Fatal(err)
		}
		l = cl
		accept = func() (io.Closer, error) {
			c, err := cl.Accept(ctx)
			if err == nil {
				go func() { c.WaitDisconnect(ctx); c.Close() }()
			}
			return c, err
		}
	}
	fmt.Println("listening")
	go func() {
		io.Copy(io.Discard, os.Stdin)
		l.Close()
	}()
	for {
		if _, err := accept(); err != nil {
			return
		}
	}
}

// startDialServer starts the server process for transport tr and waits
// until it listens; it ends with the benchmark.
func startDialServer(b *testing.B, tr string) {
	b.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^TestProcsDialServer$", "-test.v")
	cmd.Env = append(os.Environ(), dialServerEnv+"="+tr, "RDMAGO_RXE_ADDR=127.0.0.3", "RDMAGO_RXE_PORT=14791")
	cmd.Stderr = os.Stderr
	out, err := cmd.StdoutPipe()
	if err != nil {
		b.Fatal(err)
	}
	in, err := cmd.StdinPipe() // closed to end the server
	if err != nil {
		b.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() {
		in.Close()
		done := make(chan error, 1)
		go func() { done <- cmd.Wait() }()
		select {
		case <-done:
		case <-time.After(10 * time.Second):
			cmd.Process.Kill()
			<-done
		}
	})
	lines := bufio.NewScanner(out)
	var said []string
	for lines.Scan() && lines.Text() != "listening" {
		said = append(said, lines.Text())
	}
	if lines.Err() != nil || len(said) > 0 && !strings.Contains(strings.Join(said, ""), "RUN") {
		b.Fatalf("the server process did not listen: %q", said)
	}
	go func() {
		for lines.Scan() {
			if t := lines.Text(); !strings.HasPrefix(t, "---") && !strings.HasPrefix(t, "PASS") && t != "" {
				fmt.Fprintln(os.Stderr, "server process:", t)
			}
		}
	}()
}
