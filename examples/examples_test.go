//go:build unix

package examples_test

import (
	"bufio"
	"bytes"
	"context"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/rdmago/rdmago/internal/vmtest"
)

// The client/server pairs run as separate processes over loopback, as a
// person runs them: the server's software RDMA device serves 127.0.0.2,
// the client's 127.0.0.1. Both use a UDP port picked for the test instead
// of 4791, so that nothing else on the host gets in the way.

const (
	serverAddr = "127.0.0.2"
	clientAddr = "127.0.0.1"
)

var build struct {
	once sync.Once
	dir  string
	err  error
	out  []byte
}

// binaries builds the example programs once and returns their directory.
func binaries(t *testing.T) string {
	t.Helper()
	if testing.Short() {
		t.Skip("builds and runs programs")
	}
	build.once.Do(func() {
		goTool, err := exec.LookPath("go")
		if err != nil {
			goTool = filepath.Join(os.Getenv("GOROOT"), "bin", "go")
		}
		build.dir, build.err = os.MkdirTemp("", "rdmago-examples-")
		if build.err != nil {
			return
		}
		cmd := exec.Command(goTool, "build", "-o", build.dir+string(filepath.Separator),
			"./rdma_client", "./rdma_server", "./rdmacm_client", "./rdmacm_server", "./fabric_client", "./fabric_server",
			"./ping-sr-0", "./ping-sr-1", "./ping-sr-2e", "./ping-sr-2", "./ping-sr-3", "./ping-sr-4",
			"./blast-sr-2e", "./blast-sr-2", "./rdma_rc_example", "./rdma_devices")
		build.out, build.err = cmd.CombinedOutput()
	})
	if build.err != nil {
		t.Fatalf("go build: %v\n%s", build.err, build.out)
	}
	return build.dir
}

func TestMain(m *testing.M) {
	code := m.Run()
	if build.dir != "" {
		os.RemoveAll(build.dir)
	}
	os.Exit(code)
}

// freeRXEPort returns a UDP port free on both loopback addresses.
func freeRXEPort(t *testing.T) string { return vmtest.FreeUDPPort(t, serverAddr, clientAddr) }

// proc is a running example program.
type proc struct {
	name string
	cmd  *exec.Cmd
	mu   sync.Mutex
	out  bytes.Buffer
	line chan string // stdout, line by line
	done chan struct{}

	waitOnce sync.Once
	waitErr  error
}

func start(t *testing.T, ctx context.Context, bin, rxeAddr, rxePort string, args ...string) *proc {
	t.Helper()
	p := &proc{name: filepath.Base(bin), line: make(chan string, 100), done: make(chan struct{})}
	p.cmd = exec.CommandContext(ctx, bin, args...)
	// A program still running at the deadline dumps its goroutines.
	p.cmd.Cancel = func() error { return p.cmd.Process.Signal(syscall.SIGQUIT) }
	p.cmd.WaitDelay = 5 * time.Second
	p.cmd.Env = append(os.Environ(), "RDMAGO_RXE_ADDR="+rxeAddr, "RDMAGO_RXE_PORT="+rxePort)
	stdout, err := p.cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	p.cmd.Stderr = &lockedWriter{p: p}
	if err := p.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() {
		defer close(p.done)
		defer close(p.line)
		s := bufio.NewScanner(stdout)
		for s.Scan() {
			p.mu.Lock()
			p.out.WriteString(s.Text() + "\n")
			p.mu.Unlock()
			select {
			case p.line <- s.Text():
			default:
			}
		}
		io.Copy(io.Discard, stdout)
	}()
	t.Cleanup(func() {
		p.cmd.Process.Kill()
		p.wait()
	})
	return p
}

type lockedWriter struct{ p *proc }

func (w *lockedWriter) Write(b []byte) (int, error) {
	w.p.mu.Lock()
	defer w.p.mu.Unlock()
	return w.p.out.Write(b)
}

// waitFor returns the first line of output matching re.
func (p *proc) waitFor(t *testing.T, re *regexp.Regexp) []string {
	t.Helper()
	for l := range p.line {
		if m := re.FindStringSubmatch(l); m != nil {
			return m
		}
	}
	t.Fatalf("%s ended without printing a line matching %q:\n%s", p.name, re, p.output())
	return nil
}

// wait waits for the program to end and returns its error. Any number
// of goroutines may call it.
func (p *proc) wait() error {
	<-p.done
	p.waitOnce.Do(func() { p.waitErr = p.cmd.Wait() })
	return p.waitErr
}

func (p *proc) output() string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.out.String()
}

// check waits for the program and checks that it succeeded and printed
// every line of want.
func (p *proc) check(t *testing.T, want ...string) {
	t.Helper()
	err := p.wait()
	out := p.output()
	if err != nil {
		t.Errorf("%s: %v\n%s", p.name, err, out)
		return
	}
	for _, w := range want {
		if !strings.Contains(out, w) {
			t.Errorf("%s printed no %q:\n%s", p.name, w, out)
		}
	}
}

func testCtx(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	t.Cleanup(cancel)
	return ctx
}

// TestRDMAClientServer runs librdmacm's rdma_server and rdma_client pair.
func TestRDMAClientServer(t *testing.T) {
	dir := binaries(t)
	port := freeRXEPort(t)
	ctx := testCtx(t)
	srv := start(t, ctx, filepath.Join(dir, "rdma_server"), serverAddr, port, "-p", "7471")
	srv.waitFor(t, regexp.MustCompile(`^rdma_server: listening on`))
	cli := start(t, ctx, filepath.Join(dir, "rdma_client"), clientAddr, port, "-s", serverAddr, "-p", "7471")
	cli.check(t, "rdma_client: start", `rdma_client: received "rdma_server pong"`, "rdma_client: end 0")
	srv.check(t, "rdma_server: start", `rdma_server: received "rdma_client ping"`, "rdma_server: end 0")
}

// TestRDMAClientNoServer checks that rdma_client fails cleanly when
// nothing listens.
func TestRDMAClientNoServer(t *testing.T) {
	dir := binaries(t)
	port := freeRXEPort(t)
	ctx := testCtx(t)
	// A server on another port keeps the peer's connection manager up,
	// so the connection is refused at once.
	srv := start(t, ctx, filepath.Join(dir, "rdma_server"), serverAddr, port, "-p", "7000")
	srv.waitFor(t, regexp.MustCompile(`^rdma_server: listening on`))
	cli := start(t, ctx, filepath.Join(dir, "rdma_client"), clientAddr, port, "-s", serverAddr, "-p", "7471")
	err := cli.wait()
	out := cli.output()
	if err == nil || !strings.Contains(out, "rdma_connect") || !strings.Contains(out, "rdma_client: end -1") {
		t.Errorf("rdma_client without a server: %v\n%s", err, out)
	}
}

// TestRDMACMClientServer runs the seed's event-driven client against its
// server, which serves one connection and exits.
func TestRDMACMClientServer(t *testing.T) {
	dir := binaries(t)
	port := freeRXEPort(t)
	ctx := testCtx(t)
	srv := start(t, ctx, filepath.Join(dir, "rdmacm_server"), serverAddr, port, "-a", serverAddr, "-p", "0", "-n", "1")
	listenPort := srv.waitFor(t, regexp.MustCompile(`^listening on port (\d+)\.$`))[1]
	cli := start(t, ctx, filepath.Join(dir, "rdmacm_client"), clientAddr, port, serverAddr, listenPort)
	cli.check(t,
		"address resolved.",
		"route resolved.",
		"connected. posting send...",
		"received message: message from passive/server side with pid "+strconv.Itoa(srv.cmd.Process.Pid),
		"send completed successfully.",
		"disconnected.")
	// The server's own send completes only if the client's ACK beats its
	// disconnect request, so it is not looked for.
	srv.check(t,
		"received connection request.",
		"connected. posting send...",
		"received message: message from active/client side with pid "+strconv.Itoa(cli.cmd.Process.Pid),
		"peer disconnected.")
}
