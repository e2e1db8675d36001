package tcp_test

import (
	"testing"
	"time"

	"github.com/rdmago/rdmago/fabric"
	"github.com/rdmago/rdmago/internal/racesync"
)

// BenchmarkPingPong64 is a 64-byte message round trip between two
// connected endpoints on loopback, each side busy-polling its CQ as
// fi_pingpong does (run with -cpu 2 or more: each side needs a core).
func BenchmarkPingPong64(b *testing.B) {
	t := &testing.T{}
	cli, srv := connected(t, nil)
	msg := make([]byte, 64)
	rbuf, cbuf := make([]byte, 64), make([]byte, 64)
	poll := func(cq *fabric.CQ) {
		var e [1]fabric.CQEntry
		for {
			if n, _ := cq.Read(e[:]); n == 1 {
				return
			}
		}
	}
	done := make(chan struct{})
	srv.ep.Recv(rbuf, nil, fabric.AddrNotAvail, nil)
	cli.ep.Recv(cbuf, nil, fabric.AddrNotAvail, nil)
	go func() {
		defer close(done)
		for i := 0; i < b.N; i++ {
			poll(srv.cq)
			srv.ep.Recv(rbuf, nil, fabric.AddrNotAvail, nil)
			srv.ep.Inject(msg, fabric.AddrNotAvail)
		}
	}()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		cli.ep.Inject(msg, fabric.AddrNotAvail)
		poll(cli.cq)
		cli.ep.Recv(cbuf, nil, fabric.AddrNotAvail, nil)
	}
	<-done
	b.StopTimer()
	cli.ep.Close()
	srv.ep.Close()
}

// TestPingPongAllocatesNothing pins the cost of a small message's round
// trip once the endpoints are warm: a message received, its completion
// read, a receive posted again and an inject sent back allocate nothing
// (a header that moved to the heap on every received frame cost two
// allocations a round trip).
func TestPingPongAllocatesNothing(t *testing.T) {
	if racesync.Enabled {
		t.Skip("the race detector allocates")
	}
	cli, srv := connected(t, nil)
	msg := make([]byte, 64)
	rbuf, cbuf := make([]byte, 64), make([]byte, 64)
	poll := func(cq *fabric.CQ) {
		var e [1]fabric.CQEntry
		deadline := time.Now().Add(10 * time.Second)
		for {
			n, err := cq.Read(e[:])
			if n == 1 {
				return
			}
			if err != fabric.ErrAgain || time.Now().After(deadline) {
				t.Fatalf("fi_cq_read: %v", err)
			}
		}
	}
	for _, r := range []struct {
		ep  *fabric.Endpoint
		buf []byte
	}{{srv.ep, rbuf}, {cli.ep, cbuf}} {
		if err := r.ep.Recv(r.buf, nil, fabric.AddrNotAvail, nil); err != nil {
			t.Fatal(err)
		}
	}
	// One goroutine plays both sides, so that nothing else runs.
	round := func() {
		if err := cli.ep.Inject(msg, fabric.AddrNotAvail); err != nil {
			t.Fatal(err)
		}
		poll(srv.cq)
		if err := srv.ep.Recv(rbuf, nil, fabric.AddrNotAvail, nil); err != nil {
			t.Fatal(err)
		}
		if err := srv.ep.Inject(msg, fabric.AddrNotAvail); err != nil {
			t.Fatal(err)
		}
		poll(cli.cq)
		if err := cli.ep.Recv(cbuf, nil, fabric.AddrNotAvail, nil); err != nil {
			t.Fatal(err)
		}
	}
	for range 100 {
		round() // warm up: frames, queues and staging buffers at their size
	}
	if avg := testing.AllocsPerRun(500, round); avg != 0 { // (a whole number: allocations over rounds, truncated)
		t.Errorf("%.2f allocations per round trip, want none", avg)
	}
}
