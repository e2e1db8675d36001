// Package selfserver runs a test binary again as the server process of a
// benchmark, as two programs would meet: a test function of the binary,
// which skips unless the benchmark started it, serves until its standard
// input closes.
package selfserver

import (
	"bufio"
	"fmt"
	"io"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"
)

// Ready is what the server process prints, on a line of its own, once it
// listens.
const Ready = "listening"

// Start runs the test binary again with only the test function test
// (-test.run=^test$), env added to its environment and args after its
// own flags, and waits until it prints Ready. When tb ends, the server's
// standard input is closed, and the server is killed if it has not ended
// 10 s later. What the server prints after Ready, other than go test's
// own lines, goes to standard error: its failure, if any. A server that
// ends without printing Ready fails tb with what it printed.
func Start(tb testing.TB, test string, env []string, args ...string) {
	tb.Helper()
	cmd := exec.Command(os.Args[0], append([]string{"-test.run=^" + test + "$", "-test.v"}, args...)...)
	cmd.Env = append(os.Environ(), env...)
	cmd.Stderr = os.Stderr
	out, err := cmd.StdoutPipe()
	if err != nil {
		tb.Fatal(err)
	}
	in, err := cmd.StdinPipe()
	if err != nil {
		tb.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() {
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
	for lines.Scan() && lines.Text() != Ready {
		said = append(said, lines.Text())
	}
	if lines.Text() != Ready {
		tb.Fatalf("the server process ended without listening: %q", said)
	}
	go func() {
		for lines.Scan() {
			if t := lines.Text(); !strings.HasPrefix(t, "---") && !strings.HasPrefix(t, "PASS") && t != "" {
				fmt.Fprintln(os.Stderr, "server process:", t)
			}
		}
	}()
}

// Serving is what a server that serves until the benchmark ends calls
// once it listens: it prints Ready, and calls stop (which closes the
// listener) when the benchmark ends the server.
func Serving(stop func()) {
	fmt.Println(Ready)
	go func() {
		io.Copy(io.Discard, os.Stdin)
		stop()
	}()
}
