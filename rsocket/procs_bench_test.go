package rsocket_test

import (
	"bufio"
	"context"
	"encoding/binary"
	"fmt"
	"io"
	"net"
	"net/netip"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/rdmago/rdmago/rsocket"
)

// The Procs benchmarks run the server in a process of its own, as two
// programs would: the test binary runs itself again as the server, on
// 127.0.0.2 with a software device of its own (RDMAGO_RXE_ADDR), and the
// benchmark is its client from 127.0.0.1; TCP runs the same way beside
// it. Each transport gets default settings (rsocket.Config's zero value):
//
//	go test -run '^$' -bench Procs ./rsocket

// procServerEnv names the transport and the job of a server process:
// "rsocket echo", "tcp sink" and so on.
const procServerEnv = "RSOCKET_BENCH_SERVER"

// procServerAddr is where the server process listens.
var procServerAddr = netip.MustParseAddrPort("127.0.0.2:7480")

// TestProcServer is the server process of the Procs benchmarks; it skips
// unless the benchmark started it. It accepts one connection, serves it,
// and ends.
func TestProcServer(t *testing.T) {
	role := os.Getenv(procServerEnv)
	if role == "" {
		t.Skip("runs as the server process of the Procs benchmarks")
	}
	transport, job, _ := strings.Cut(role, " ")
	var l net.Listener
	var err error
	if transport == "tcp" {
		l, err = net.Listen("tcp", procServerAddr.String())
	} else {
		l, err = rsocket.Listen("tcp", procServerAddr.String())
	}
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	fmt.Println("listening")
	c, err := l.Accept()
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	switch job {
	case "echo":
		// A plain loop: io.Copy would splice a TCP connection into
		// itself through a pipe, which is slower for small messages.
		buf := make([]byte, 64<<10)
		for {
			n, err := c.Read(buf)
			if err != nil {
				return
			}
			if _, err := c.Write(buf[:n]); err != nil {
				return
			}
		}
	case "sink":
		// Read to the end, then say how much came.
		n, err := io.Copy(io.Discard, c)
		if err != nil {
			t.Fatal(err)
		}
		binary.Write(c, binary.LittleEndian, n)
	}
}

// procPair starts a server process for transport and job and returns a
// connection to it.
func procPair(b *testing.B, transport, job string) net.Conn {
	b.Helper()
	args := []string{"-test.run=^TestProcServer$", "-test.v"}
	if p := os.Getenv("RSOCKET_BENCH_SERVER_PROFILE"); p != "" {
		// A CPU profile of the server process: where its side spends.
		args = append(args, "-test.cpuprofile="+p)
	}
	cmd := exec.Command(os.Args[0], args...)
	cmd.Env = append(os.Environ(), procServerEnv+"="+transport+" "+job, "RDMAGO_RXE_ADDR="+procServerAddr.Addr().String())
	cmd.Stderr = os.Stderr
	out, err := cmd.StdoutPipe()
	if err != nil {
		b.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() {
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
	for lines.Scan() && lines.Text() != "listening" {
	}
	go io.Copy(io.Discard, out)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	var c net.Conn
	if transport == "tcp" {
		var d net.Dialer
		c, err = d.DialContext(ctx, "tcp", procServerAddr.String())
	} else {
		d := rsocket.Dialer{LocalAddr: netip.MustParseAddrPort("127.0.0.1:0")}
		c, err = d.Dial(ctx, "tcp", procServerAddr.String())
	}
	if err != nil {
		cmd.Process.Kill()
		b.Skip("no connection to the server process: ", err)
	}
	b.Cleanup(func() { c.Close() })
	return c
}

func procTransports(b *testing.B, f func(b *testing.B, transport string)) {
	for _, tr := range []string{"rsocket", "tcp"} {
		b.Run(tr, func(b *testing.B) { f(b, tr) })
	}
}

// BenchmarkProcsRoundTrip64B times a 64-byte echo between two processes:
// one op is one round trip.
func BenchmarkProcsRoundTrip64B(b *testing.B) {
	procTransports(b, func(b *testing.B, transport string) {
		c := procPair(b, transport, "echo")
		buf := make([]byte, 64)
		b.ResetTimer()
		for range b.N {
			if _, err := c.Write(buf); err != nil {
				b.Fatal(err)
			}
			if _, err := io.ReadFull(c, buf); err != nil {
				b.Fatal(err)
			}
		}
	})
}

// BenchmarkProcsWrite64KiB streams 64 KiB writes to another process,
// until it has read them all.
func BenchmarkProcsWrite64KiB(b *testing.B) {
	procTransports(b, func(b *testing.B, transport string) {
		c := procPair(b, transport, "sink")
		buf := make([]byte, 64<<10)
		b.SetBytes(int64(len(buf)))
		b.ResetTimer()
		for range b.N {
			if _, err := c.Write(buf); err != nil {
				b.Fatal(err)
			}
		}
		c.(interface{ CloseWrite() error }).CloseWrite()
		var n int64
		if err := binary.Read(c, binary.LittleEndian, &n); err != nil {
			b.Fatal(err)
		}
		if want := int64(b.N) * int64(len(buf)); n != want {
			b.Fatalf("the server read %d bytes, want %d", n, want)
		}
	})
}
