package vrb_test

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/rdmago/rdmago/fabric"
	"github.com/rdmago/rdmago/fabric/fabrictest"
	"github.com/rdmago/rdmago/fabric/vrb"
)

// deadPeerBound is how soon an endpoint must report that its peer
// vanished.
const deadPeerBound = 15 * time.Second

// TestVanishedPeerFailsAWaitingReceive: a peer whose QP disappears
// without a word (its process killed) is noticed by an endpoint that only
// waits for a receive, with nothing of its own to send: the receive fails
// (FI_ECANCELED) and the EQ reports FI_ETIMEDOUT and FI_SHUTDOWN, within
// the bound, whichever side vanishes.
//
// With a retry count of 7, which C's provider asks for and software RoCE
// takes as "for ever", the probe never fails on its own: the endpoint
// gives up on it.
func TestVanishedPeerFailsAWaitingReceive(t *testing.T) {
	for _, c := range []struct {
		victim string
		retry  uint8
	}{
		{"server", 3},
		{"client", 3},
		{"server", 7},
	} {
		t.Run(fmt.Sprintf("vanish-%s/retry-%d", c.victim, c.retry), func(t *testing.T) {
			victim := c.victim
			defer vrb.SetConnRetryCount(c.retry)()
			cli, srv := connected(t)
			gone, waiting := srv, cli
			if victim == "client" {
				gone, waiting = cli, srv
			}
			must(t, waiting.ep.Recv(waiting.buf[:64], waiting.mr.Desc(), fabric.AddrNotAvail, "pending"))
			vrb.Vanish(gone.ep)
			ctx, cancel := context.WithTimeout(context.Background(), deadPeerBound)
			defer cancel()
			var e [1]fabric.CQEntry
			if _, err := waiting.cq.SRead(ctx, e[:]); !errors.Is(err, fabric.ErrAvail) {
				t.Fatalf("fi_cq_sread with a vanished peer: %v, want an error completion", err)
			}
			if ee, err := waiting.cq.ReadErr(); err != nil || ee.Context != "pending" || ee.Err != fabric.ErrCanceled {
				t.Fatalf("the waiting receive: %+v %v", ee, err)
			}
			if _, err := waiting.eq.SRead(ctx); !errors.Is(err, fabric.ErrAvail) {
				t.Fatalf("fi_eq_sread: %v, want an error entry", err)
			}
			if ee, _ := waiting.eq.ReadErr(); ee.Err != fabric.ErrTimedOut {
				t.Fatalf("EQ error entry %+v, want FI_ETIMEDOUT", ee)
			}
			if ev, err := waiting.eq.SRead(ctx); err != nil || ev.Event != fabric.EventShutdown {
				t.Fatalf("EQ: %s %v, want FI_SHUTDOWN", ev.Event, err)
			}
		})
	}
}

// TestLivePeerIsNotGivenUpOn: an idle connection whose peer is alive
// stays up across several probes.
func TestLivePeerIsNotGivenUpOn(t *testing.T) {
	cli, srv := connected(t)
	must(t, srv.ep.Recv(srv.buf[:64], srv.mr.Desc(), fabric.AddrNotAvail, "later"))
	time.Sleep(7 * time.Second) // two probes
	if ev, err := cli.eq.Read(); err == nil || errors.Is(err, fabric.ErrAvail) {
		t.Fatalf("client EQ: %s %v", ev.Event, err)
	}
	if ev, err := srv.eq.Read(); err == nil || errors.Is(err, fabric.ErrAvail) {
		t.Fatalf("server EQ: %s %v", ev.Event, err)
	}
	copy(cli.buf, "still here")
	must(t, cli.ep.Send(cli.buf[:10], cli.mr.Desc(), fabric.AddrNotAvail, nil))
	fabrictest.Completion(cli.t, cli.cq)
	if c := fabrictest.Completion(srv.t, srv.cq); c.Context != "later" || c.Len != 10 {
		t.Fatalf("receive after idling %+v", c)
	}
}
