package vrb_test

import (
	"context"
	"runtime"
	"testing"
	"time"

	"github.com/rdmago/rdmago/fabric"
	"github.com/rdmago/rdmago/rdmacm"
	"github.com/rdmago/rdmago/verbs"
)

// The verbs provider against raw verbs on the same software device over
// 127.0.0.1: an 8-byte ping-pong (ns/op is one round trip) and 1 MiB RDMA
// WRITEs, 16 in flight. The difference per operation is the provider's
// overhead. The pollers yield when they find nothing: the device's
// goroutines run in this process too.

// BenchmarkFabricPingPong8 is the ping-pong through the fabric API
// (fi_inject, fi_cq_read), each side busy-polling its CQ.
func BenchmarkFabricPingPong8(b *testing.B) {
	cli, srv := connected(b)
	poll := func(s *side) {
		var e [1]fabric.CQEntry
		for {
			if n, _ := s.cq.Read(e[:]); n == 1 && e[0].Flags&fabric.CompRecv != 0 {
				return
			}
			runtime.Gosched() // the device's goroutines share this process
		}
	}
	msg := make([]byte, 8)
	must(b, srv.ep.Recv(srv.buf[:8], srv.mr.Desc(), fabric.AddrNotAvail, nil))
	must(b, cli.ep.Recv(cli.buf[:8], cli.mr.Desc(), fabric.AddrNotAvail, nil))
	done := make(chan struct{})
	go func() {
		defer close(done)
		for i := 0; i < b.N; i++ {
			poll(srv)
			srv.ep.Recv(srv.buf[:8], srv.mr.Desc(), fabric.AddrNotAvail, nil)
			for srv.ep.Inject(msg, fabric.AddrNotAvail) == fabric.ErrAgain {
			}
		}
	}()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		for cli.ep.Inject(msg, fabric.AddrNotAvail) == fabric.ErrAgain {
		}
		poll(cli)
		cli.ep.Recv(cli.buf[:8], cli.mr.Desc(), fabric.AddrNotAvail, nil)
	}
	<-done
}

// BenchmarkFabricWrite1MiB writes 1 MiB at a time through the fabric API.
func BenchmarkFabricWrite1MiB(b *testing.B) {
	cli, srv := connected(b)
	const size, depth = 1 << 20, 16
	src := make([]byte, size)
	mr, err := cli.dom.RegMR(src, fabric.AccessWrite, 0)
	must(b, err)
	defer mr.Close()
	dst := make([]byte, size)
	dmr, err := srv.dom.RegMR(dst, fabric.AccessRemoteWrite, 0)
	must(b, err)
	defer dmr.Close()
	b.SetBytes(size)
	var e [16]fabric.CQEntry
	posted, done := 0, 0
	b.ResetTimer()
	for done < b.N {
		for posted < b.N && posted-done < depth {
			if err := cli.ep.Write(src, mr.Desc(), fabric.AddrNotAvail, dmr.Addr(), dmr.Key(), nil); err == fabric.ErrAgain {
				break
			} else if err != nil {
				b.Fatal(err)
			}
			posted++
		}
		n, _ := cli.cq.Read(e[:])
		done += n
	}
}

// rawPair is an RC connection over 127.0.0.1 made with rdmacm's Dial and
// Listen: raw verbs on the device the fabric benchmarks use.
func rawPair(b *testing.B, size int) (cli, srv *rdmacm.Conn, cmr, smr *verbs.MR) {
	ln, err := rdmacm.Listen("127.0.0.1:0", &rdmacm.Options{Cap: verbs.QPCap{MaxSendWR: 64, MaxRecvWR: 64, MaxSendSGE: 1, MaxRecvSGE: 1, MaxInlineData: 64}})
	must(b, err)
	b.Cleanup(func() { ln.Close() })
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	accepted := make(chan *rdmacm.Conn, 1)
	go func() {
		c, err := ln.Accept(ctx)
		if err != nil {
			close(accepted)
			return
		}
		accepted <- c
	}()
	cli, err = rdmacm.Dial(ctx, ln.Addr().String(), &rdmacm.Options{Cap: verbs.QPCap{MaxSendWR: 64, MaxRecvWR: 64, MaxSendSGE: 1, MaxRecvSGE: 1, MaxInlineData: 64}})
	must(b, err)
	srv = <-accepted
	if srv == nil {
		b.Fatal("accept failed")
	}
	b.Cleanup(func() { cli.Close(); srv.Close() })
	cmr, err = cli.PD.RegMR(make([]byte, size), verbs.AccessLocalWrite)
	must(b, err)
	smr, err = srv.PD.RegMR(make([]byte, size), verbs.AccessLocalWrite|verbs.AccessRemoteWrite)
	must(b, err)
	b.Cleanup(func() { cmr.Dereg(); smr.Dereg() })
	return cli, srv, cmr, smr
}

// BenchmarkRawVerbsPingPong8 is BenchmarkFabricPingPong8 in raw verbs
// (ibv_post_send inline, ibv_poll_cq).
func BenchmarkRawVerbsPingPong8(b *testing.B) {
	cli, srv, cmr, smr := rawPair(b, 64)
	post := func(c *rdmacm.Conn, mr *verbs.MR) {
		must(b, c.QP.PostRecv([]verbs.RecvWR{{SGList: []verbs.SGE{mr.SGE(0, 8)}}}))
	}
	send := func(c *rdmacm.Conn, mr *verbs.MR) {
		must(b, c.QP.PostSend([]verbs.SendWR{{Opcode: verbs.WRSend, SendFlags: verbs.SendInline | verbs.SendSignaled, SGList: []verbs.SGE{mr.SGE(32, 8)}}}))
	}
	wait := func(c *rdmacm.Conn) {
		var wc [4]verbs.WC
		for {
			n, _ := c.RecvCQ.Poll(wc[:])
			if c.SendCQ != c.RecvCQ {
				c.SendCQ.Poll(wc[n:])
			}
			for _, w := range wc[:n] {
				if w.Opcode&verbs.WCRecv != 0 {
					return
				}
			}
			runtime.Gosched() // the device's goroutines share this process
		}
	}
	post(cli, cmr)
	post(srv, smr)
	done := make(chan struct{})
	go func() {
		defer close(done)
		for i := 0; i < b.N; i++ {
			wait(srv)
			post(srv, smr)
			send(srv, smr)
		}
	}()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		send(cli, cmr)
		wait(cli)
		post(cli, cmr)
	}
	<-done
}

// BenchmarkRawVerbsWrite1MiB is BenchmarkFabricWrite1MiB in raw verbs.
func BenchmarkRawVerbsWrite1MiB(b *testing.B) {
	const size, depth = 1 << 20, 16
	cli, _, cmr, smr := rawPair(b, size)
	wr := verbs.SendWR{Opcode: verbs.WRRDMAWrite, SendFlags: verbs.SendSignaled, SGList: []verbs.SGE{cmr.SGE(0, size)},
		RemoteAddr: smr.Addr(), RKey: smr.RKey()}
	b.SetBytes(size)
	var wc [16]verbs.WC
	posted, done := 0, 0
	b.ResetTimer()
	for done < b.N {
		for posted < b.N && posted-done < depth {
			must(b, cli.QP.PostSend([]verbs.SendWR{wr}))
			posted++
		}
		n, _ := cli.SendCQ.Poll(wc[:])
		done += n
	}
}
