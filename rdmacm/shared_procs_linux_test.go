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
	"github.com/rdmago/rdmago/rxe"
)

// The processes of a host share the software device's address, as they
// share Linux's rxe0: the first leads its port and hands the others
// their packets, by the owner number in each packet's QP number or
// communication ID, which a process takes when it starts and the next
// one takes again when it has ended. The tests below run each process as
// the test binary (TestSharedAddressProcess) on a port of their own.

// sharedProcEnv tells the test binary which process of the address to
// be: "serve", "dial <address>" or "self".
const sharedProcEnv = "RDMAGO_RDMACM_SHARED_PROC"

// A long-lived server leads the address while clients come and go; each
// new process takes the owner number of the one that ended before it,
// and its first connection needs no resent message (every connection
// below gives up on the first lost one): neither a connection it makes
// to itself, whose request reaches it through the server's process, nor
// one to the server, whose reply does. (The leader kept its connection
// to the ended process and lost the newcomer's first packet on it: the
// newcomer's Dial waited 6.4 s for its request's retry.)
func TestEachProcessOfASharedAddressConnectsAtOnce(t *testing.T) {
	if testing.Short() {
		t.Skip("starts processes")
	}
	c, err := net.ListenUDP("udp4", &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1)})
	if err != nil {
		t.Fatal(err)
	}
	port := c.LocalAddr().(*net.UDPAddr).Port
	c.Close()
	env := []string{rxe.EnvAddr + "=127.0.0.1", fmt.Sprintf("%s=%d", rxe.EnvPort, port)}

	server := startSharedProc(t, env, "serve")
	addr, ok := strings.CutPrefix(server.line(t), "listening ")
	if !ok {
		t.Fatalf("the server says %q", addr)
	}
	for i, role := range []string{"dial " + addr, "self", "dial " + addr, "self", "self"} {
		p := startSharedProc(t, env, role)
		if got := p.line(t); got != "connected" {
			t.Fatalf("process %d (%s): %s", i+1, role, got)
		}
		p.end(t)
	}
	server.end(t)
}

// TestSharedAddressProcess is a process of the test above, when the
// environment says which; in the test binary's own run it does nothing.
func TestSharedAddressProcess(t *testing.T) {
	role := os.Getenv(sharedProcEnv)
	if role == "" {
		t.Skip("a process of TestEachProcessOfASharedAddressConnectsAtOnce")
	}
	say := func(s string) { fmt.Println("proc:", s) }
	ctx := context.Background()
	// A connection that would need a resent message fails instead.
	once := &rdmacm.Options{Setup: func(c *rdmacm.Conn) error { return c.ID.SetCMTimeouts(rdmacm.CMResponseTimeout, 0) }}
	switch verb, arg, _ := strings.Cut(role, " "); verb {
	case "serve": // accept until the test closes our input
		l, err := rdmacm.Listen("127.0.0.1:0", nil)
		if err != nil {
			say(err.Error())
			return
		}
		go func() {
			for {
				c, err := l.Accept(ctx)
				if err != nil {
					return
				}
				go func() {
					c.WaitDisconnect(ctx)
					c.Close()
				}()
			}
		}()
		say("listening " + l.Addr().String())
		io.Copy(io.Discard, os.Stdin)
		l.Close()
	case "dial": // a client of the server: a few connections, as nvme connect makes
		var conns []*rdmacm.Conn
		for range 3 {
			c, err := rdmacm.Dial(ctx, arg, once)
			if err != nil {
				say(err.Error())
				return
			}
			conns = append(conns, c)
		}
		for _, c := range conns {
			c.Close()
		}
		say("connected")
	case "self": // Listen and Dial in this process, as ExampleListen does
		l, err := rdmacm.Listen("127.0.0.1:0", nil)
		if err != nil {
			say(err.Error())
			return
		}
		defer l.Close()
		accepted := make(chan error, 1)
		go func() {
			c, err := l.Accept(ctx)
			if err == nil {
				c.WaitDisconnect(ctx)
				c.Close()
			}
			accepted <- err
		}()
		c, err := rdmacm.Dial(ctx, l.Addr().String(), once)
		if err != nil {
			say(err.Error())
			return
		}
		c.Close()
		if err := <-accepted; err != nil {
			say("accept: " + err.Error())
			return
		}
		say("connected")
	default:
		say("unknown role " + role)
	}
}

// sharedProc is a process of the test binary running
// TestSharedAddressProcess.
type sharedProc struct {
	cmd   *exec.Cmd
	in    io.WriteCloser
	lines chan string
	errb  strings.Builder
}

// startSharedProc starts a process in role with env added to the test's.
func startSharedProc(t *testing.T, env []string, role string) *sharedProc {
	t.Helper()
	p := &sharedProc{cmd: exec.Command(os.Args[0], "-test.run=^TestSharedAddressProcess$", "-test.count=1"), lines: make(chan string, 16)}
	p.cmd.Env = append(append(os.Environ(), env...), sharedProcEnv+"="+role)
	p.cmd.Stderr = &p.errb
	var err error
	if p.in, err = p.cmd.StdinPipe(); err != nil {
		t.Fatal(err)
	}
	out, err := p.cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := p.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() {
		sc := bufio.NewScanner(out)
		for sc.Scan() {
			if l, ok := strings.CutPrefix(sc.Text(), "proc: "); ok {
				p.lines <- l
			}
		}
		close(p.lines)
	}()
	t.Cleanup(func() { p.in.Close(); p.cmd.Process.Kill(); p.cmd.Wait() })
	return p
}

// line returns what the process says next.
func (p *sharedProc) line(t *testing.T) string {
	t.Helper()
	select {
	case l, ok := <-p.lines:
		if !ok {
			p.cmd.Wait()
			t.Fatalf("the process ended without a word: %s", p.errb.String())
		}
		return l
	case <-time.After(60 * time.Second):
		t.Fatalf("the process said nothing for 60 s: %s", p.errb.String())
	}
	return ""
}

// end closes the process's input and waits for it to end.
func (p *sharedProc) end(t *testing.T) {
	t.Helper()
	p.in.Close()
	if err := p.cmd.Wait(); err != nil {
		t.Fatalf("%v: %s", err, p.errb.String())
	}
}
