package rsocket_test

import (
	"context"
	"encoding/binary"
	"fmt"
	"io"
	"net"
	"net/netip"
	"os"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/rdmago/rdmago/internal/selfserver"
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
	job, bufs, _ := strings.Cut(job, " ")
	var l net.Listener
	var err error
	if transport == "tcp" {
		l, err = net.Listen("tcp", procServerAddr.String())
	} else {
		var lc rsocket.ListenConfig
		if bufs != "" {
			n, _ := strconv.Atoi(bufs)
			lc.Config = rsocket.Config{RecvBuffer: n, SendBuffer: n}
		}
		l, err = lc.Listen(context.Background(), "tcp", procServerAddr.String())
	}
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	if job == "echo-many" {
		// Echo on every connection, until the benchmark ends this
		// process.
		selfserver.Serving(func() { l.Close() })
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				buf := make([]byte, 64)
				for {
					n, err := c.Read(buf)
					if err != nil {
						return
					}
					if _, err := c.Write(buf[:n]); err != nil {
						return
					}
				}
			}()
		}
	}
	fmt.Println(selfserver.Ready)
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
	startServer(b, transport, job)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	c, err := procDial(ctx, transport, rsocket.Config{})
	if err != nil {
		b.Skip("no connection to the server process: ", err)
	}
	b.Cleanup(func() { c.Close() })
	return c
}

// procDial connects to the server process.
func procDial(ctx context.Context, transport string, cfg rsocket.Config) (net.Conn, error) {
	if transport == "tcp" {
		var d net.Dialer
		return d.DialContext(ctx, "tcp", procServerAddr.String())
	}
	d := rsocket.Dialer{Config: cfg, LocalAddr: netip.MustParseAddrPort("127.0.0.1:0")}
	return d.Dial(ctx, "tcp", procServerAddr.String())
}

// startServer starts a server process for transport and job, and waits
// until it listens; it ends with the benchmark.
func startServer(b *testing.B, transport, job string) {
	b.Helper()
	var args []string
	if p := os.Getenv("RSOCKET_BENCH_SERVER_PROFILE"); p != "" {
		// A CPU profile of the server process: where its side spends.
		args = append(args, "-test.cpuprofile="+p)
	}
	selfserver.Start(b, "TestProcServer", []string{procServerEnv + "=" + transport + " " + job, "RDMAGO_RXE_ADDR=" + procServerAddr.Addr().String()}, args...)
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

// BenchmarkProcsManyConns holds 1,000 connections from this process to
// a server process, each echoing 64 bytes at once, and reports what
// each costs this process (Go heap and stacks, which hold the
// registered buffers of a software device) beside the buffers it was
// configured with. One op is one round of echoes on every connection.
func BenchmarkProcsManyConns(b *testing.B) {
	const conns = 1000
	for _, size := range []int{0, 16 << 10} {
		name := "default-buffers"
		if size != 0 {
			name = fmt.Sprintf("%dKiB-buffers", size>>10)
		}
		b.Run(name, func(b *testing.B) {
			job := "echo-many"
			if size != 0 {
				job += " " + strconv.Itoa(size)
			}
			startServer(b, "rsocket", job)
			before := liveBytes()
			cfg := rsocket.Config{RecvBuffer: size, SendBuffer: size}
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
			defer cancel()
			cs := make([]net.Conn, 0, conns)
			b.Cleanup(func() {
				for _, c := range cs {
					c.Close()
				}
			})
			for range conns {
				c, err := procDial(ctx, "rsocket", cfg)
				if err != nil {
					b.Fatalf("connection %d: %v", len(cs)+1, err)
				}
				cs = append(cs, c)
			}
			echo := func() {
				var wg sync.WaitGroup
				for _, c := range cs {
					wg.Add(1)
					go func() {
						defer wg.Done()
						buf := make([]byte, 64)
						if _, err := c.Write(buf); err != nil {
							b.Error(err)
							return
						}
						if _, err := io.ReadFull(c, buf); err != nil {
							b.Error(err)
						}
					}()
				}
				wg.Wait()
			}
			echo()
			per := float64(liveBytes()-before) / conns
			rbuf, sbuf := size, size
			if size == 0 {
				rbuf, sbuf = 128<<10, 128<<10
			}
			b.ResetTimer()
			for range b.N {
				echo()
			}
			b.ReportMetric(per, "B/conn")
			b.ReportMetric(per-float64(rbuf+sbuf), "B/conn-over-buffers")
			// What the connections cost while idle: this process's CPU
			// time over a few seconds of nobody reading or writing.
			b.StopTimer()
			const idle = 3 * time.Second
			cpu0 := cpuTime()
			time.Sleep(idle)
			b.ReportMetric(100*float64(cpuTime()-cpu0)/float64(idle), "idle-CPU-%")
		})
	}
}

// liveBytes is what the process holds in Go memory after a collection:
// heap objects and goroutine stacks.
func liveBytes() int64 {
	runtime.GC()
	var m runtime.MemStats
	runtime.ReadMemStats(&m)
	return int64(m.HeapAlloc + m.StackInuse)
}

// cpuTime is the CPU time this process has used, user and system.
func cpuTime() time.Duration {
	var ru syscall.Rusage
	syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// BenchmarkProcsCopyFile sends a 64 MiB file to another process with
// io.Copy (rsocket's ReadFrom reads the file straight into the send
// buffer; TCP's uses sendfile), until that process has read it all.
func BenchmarkProcsCopyFile(b *testing.B) {
	procTransports(b, func(b *testing.B, transport string) {
		const size = 64 << 20
		name := b.TempDir() + "/data"
		if err := os.WriteFile(name, make([]byte, size), 0o600); err != nil {
			b.Fatal(err)
		}
		f, err := os.Open(name)
		if err != nil {
			b.Fatal(err)
		}
		defer f.Close()
		c := procPair(b, transport, "sink")
		b.SetBytes(size)
		b.ResetTimer()
		for range b.N {
			if _, err := f.Seek(0, io.SeekStart); err != nil {
				b.Fatal(err)
			}
			if n, err := io.Copy(c, f); err != nil || n != size {
				b.Fatalf("io.Copy: %d bytes, %v", n, err)
			}
		}
		c.(interface{ CloseWrite() error }).CloseWrite()
		var n int64
		if err := binary.Read(c, binary.LittleEndian, &n); err != nil {
			b.Fatal(err)
		}
		if want := int64(b.N) * size; n != want {
			b.Fatalf("the server read %d bytes, want %d", n, want)
		}
	})
}
