//go:build unix

package examples_test

import (
	"net"
	"path/filepath"
	"regexp"
	"strconv"
	"testing"
	"time"
)

// freeTCPPort returns a TCP port free on every address.
func freeTCPPort(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", ":0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return strconv.Itoa(ln.Addr().(*net.TCPAddr).Port)
}

// TestRDMARCExampleRunsAsTwoProcesses runs RDMA_RC_example's server and
// client: TCP exchange, the server's SEND, the client's RDMA READ of the
// server's buffer and RDMA WRITE into it; both pass.
func TestRDMARCExampleRunsAsTwoProcesses(t *testing.T) {
	dir := binaries(t)
	port := freeRXEPort(t)
	ctx := testCtx(t)
	tcpPort := freeTCPPort(t)
	bin := filepath.Join(dir, "rdma_rc_example")
	srv := start(t, ctx, bin, serverAddr, port, "-p", tcpPort)
	srv.waitFor(t, regexp.MustCompile(`^waiting on port \d+ for TCP connection`))
	cli := start(t, ctx, bin, clientAddr, port, "--port="+tcpPort, serverAddr, "-g0")
	cli.check(t,
		" IP : "+serverAddr,
		" GID index : 0",
		"TCP connection was established",
		"Remote GID =00:00:00:00:00:00:00:00:00:00:ff:ff:7f:00:00:02",
		"QP state was change to RTS",
		"Message is: 'SEND operation '",
		"Contents of server's buffer: 'RDMA read operation '",
		"Now replacing it with: 'RDMA write operation'",
		"test result is 0")
	srv.check(t,
		"going to send the message: 'SEND operation '",
		"no GID index given: using GID index 0 (127.0.0.2) of this RoCE port",
		"Remote GID =00:00:00:00:00:00:00:00:00:00:ff:ff:7f:00:00:01",
		"Send Request was posted",
		"Contents of server buffer: 'RDMA write operation'",
		"test result is 0")
}

// TestRDMARCExampleFailsCleanly: without a server, or with a device that
// does not exist, the client says why and ends with "test result is 1"
// and exit status 1.
func TestRDMARCExampleFailsCleanly(t *testing.T) {
	dir := binaries(t)
	port := freeRXEPort(t)
	bin := filepath.Join(dir, "rdma_rc_example")
	ctx := testCtx(t)
	noServer := start(t, ctx, bin, clientAddr, port, "-p", freeTCPPort(t), serverAddr)
	exitsFailingWithin(t, noServer, 20*time.Second, "failed to establish TCP connection to server "+serverAddr, "test result is 1")

	tcpPort := freeTCPPort(t)
	srv := start(t, ctx, bin, serverAddr, port, "-p", tcpPort, "-d", "mlx5_9")
	srv.waitFor(t, regexp.MustCompile(`^waiting on port`))
	cli := start(t, ctx, bin, clientAddr, port, "-p", tcpPort, serverAddr)
	exitsFailingWithin(t, srv, 20*time.Second, "IB device mlx5_9 wasn't found", "test result is 1")
	exitsFailingWithin(t, cli, 20*time.Second, "failed to exchange connection data", "test result is 1")
}
