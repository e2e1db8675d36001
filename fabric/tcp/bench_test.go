package tcp_test

import (
	"testing"

	"github.com/rdmago/rdmago/fabric"
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
