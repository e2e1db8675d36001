package fipingpong

import (
	"context"
	"net"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/rdmago/rdmago/internal/vmtest"
)

// deadPeerBound is how soon a side must end its run after its peer's
// process is killed.
const deadPeerBound = 15 * time.Second

// TestKilledPeerEndsTheRunWithAnError runs rdmago fi_pingpong as two
// processes with more iterations than they can finish, kills one with
// SIGKILL (no goodbye on any channel), and requires the other to exit
// with an error, and a message that says the peer went, within the
// bound: over tcp (msg and rdm) and verbs on the software device (msg).
func TestKilledPeerEndsTheRunWithAnError(t *testing.T) {
	bin := vmtest.BuildRdmago(t)
	pc, err := net.ListenPacket("udp4", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	rxePort := strconv.Itoa(pc.LocalAddr().(*net.UDPAddr).Port) // a RoCE port of their own
	pc.Close()
	for _, c := range []struct {
		flags  string
		victim string
	}{
		{"-p tcp -e msg", "server"},
		{"-p tcp -e msg", "client"},
		{"-p tcp -e rdm", "server"},
		{"-p verbs -e msg", "server"},
		{"-p verbs -e msg", "client"},
	} {
		t.Run(strings.ReplaceAll(c.flags, " ", "")+"/kill-"+c.victim, func(t *testing.T) {
			ctrl := strconv.Itoa(freePort(t))
			cmd := func(args ...string) (*exec.Cmd, *syncBuffer) {
				all := append([]string{"fi_pingpong"}, strings.Fields(c.flags)...)
				c := exec.Command(bin, append(append(all, "-I", "100000000", "-S", "64"), args...)...)
				c.Env = append(os.Environ(), "RDMAGO_RXE_PORT="+rxePort)
				var out syncBuffer
				c.Stdout, c.Stderr = &out, &out
				return c, &out
			}
			srv, sout := cmd("-B", ctrl)
			cli, cout := cmd("-P", ctrl, "127.0.0.1")
			if err := srv.Start(); err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { srv.Process.Kill(); srv.Wait() })
			if !waitListening(t, ctrl, sout.String) {
				t.Skip("the server's port was taken by another test")
			}
			if err := cli.Start(); err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { cli.Process.Kill(); cli.Wait() })
			// Kill once both run the ping-pong (both printed the header).
			deadline := time.Now().Add(30 * time.Second)
			for !strings.Contains(sout.String(), "bytes") || !strings.Contains(cout.String(), "bytes") {
				if time.Now().After(deadline) {
					t.Fatalf("the run did not start\nserver:\n%s\nclient:\n%s", sout.String(), cout.String())
				}
				time.Sleep(20 * time.Millisecond)
			}
			time.Sleep(200 * time.Millisecond)
			victim, survivor, out := srv, cli, cout
			if c.victim == "client" {
				victim, survivor, out = cli, srv, sout
			}
			victim.Process.Kill()
			done := make(chan error, 1)
			go func() { done <- survivor.Wait() }()
			ctx, cancel := context.WithTimeout(context.Background(), deadPeerBound)
			defer cancel()
			select {
			case err := <-done:
				if err == nil {
					t.Fatalf("the survivor exited 0\n%s", out.String())
				}
				if !strings.Contains(out.String(), "[error]") || !strings.Contains(out.String(), "peer") {
					t.Fatalf("the survivor's message does not name the peer\n%s", out.String())
				}
			case <-ctx.Done():
				t.Fatalf("still running %v after the peer was killed\n%s", deadPeerBound, out.String())
			}
		})
	}
}
