//go:build unix

package examples_test

import (
	"fmt"
	"net"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"
)

// TestFabricServerAndClient runs seed 000's libfabric flow as two
// processes over each provider, chosen at run time: connect with private
// data, send, RDMA WRITE into the server's registered region, shut down.
func TestFabricServerAndClient(t *testing.T) {
	dir := binaries(t)
	for _, prov := range []string{"tcp", "sockets", "verbs"} {
		t.Run(prov, func(t *testing.T) { fabricPair(t, dir, prov) })
	}
}

func fabricPair(t *testing.T, dir, prov string) {
	ln, err := net.Listen("tcp4", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	port := strconv.Itoa(ln.Addr().(*net.TCPAddr).Port)
	ln.Close()
	srv := exec.Command(filepath.Join(dir, "fabric_server"), "-a", "127.0.0.1", "-port", port, "-p", prov)
	var srvOut strings.Builder
	srv.Stdout, srv.Stderr = &srvOut, &srvOut
	if err := srv.Start(); err != nil {
		t.Fatal(err)
	}
	defer srv.Process.Kill()
	var cliOut []byte
	for try := 0; try < 50; try++ {
		time.Sleep(100 * time.Millisecond)
		cliOut, err = exec.Command(filepath.Join(dir, "fabric_client"), "-a", "127.0.0.1", "-port", port, "-p", prov).CombinedOutput()
		if err == nil || !strings.Contains(string(cliOut), "refused") && !strings.Contains(string(cliOut), "Connection refused") {
			break
		}
	}
	if err != nil {
		t.Fatalf("client: %v\n%s\nserver:\n%s", err, cliOut, srvOut.String())
	}
	if err := srv.Wait(); err != nil {
		t.Fatalf("server: %v\n%s", err, srvOut.String())
	}
	atomics, counter := "", ""
	if prov != "tcp" { // FI_ATOMIC: C's verbs and sockets providers have it, its tcp provider not
		atomics, counter = "fetch-and-add 5: 0 before, 5 after\n", ", counter 5"
	}
	wantCli := fmt.Sprintf("FI_CONNECTED with \"accepted\"\nserver region: 4096 bytes\nwrote %d bytes\n%sFI_SHUTDOWN\n", len("RDMA WRITE over "+prov), atomics)
	if string(cliOut) != wantCli {
		t.Errorf("client printed\n%s\nwant\n%s", cliOut, wantCli)
	}
	for _, line := range []string{
		"connection request with \"hello from fabric_client\"",
		"received \"hello over the fabric\"",
		"region holds \"RDMA WRITE over " + prov + "\"" + counter + "\n",
	} {
		if !strings.Contains(srvOut.String(), line) {
			t.Errorf("server output lacks %q:\n%s", line, srvOut.String())
		}
	}
}
