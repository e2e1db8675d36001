package rdmacm_test

import (
	"bytes"
	"context"
	"errors"
	"net/netip"
	"sync/atomic"
	"testing"
	"time"

	"github.com/rdmago/rdmago/rdmacm"
	"github.com/rdmago/rdmago/verbs"
)

// connPeer is one side's buffers for the exchange of TestDialListen.
type connPeer struct {
	buf []byte
	mr  *verbs.MR
}

// setup is an Options.Setup that registers a buffer and posts a
// receive into it before the connection is made.
func (p *connPeer) setup(c *rdmacm.Conn) error {
	p.buf = make([]byte, 256)
	var err error
	if p.mr, err = c.ID.RegMsgs(p.buf); err != nil {
		return err
	}
	return c.ID.PostRecv(1, p.mr, 0, 128)
}

func TestDialListen(t *testing.T) {
	tests := []struct {
		name       string
		dial, lis  rdmacm.Options
		check      func(t *testing.T, cli, srv *rdmacm.Conn)
		wantAccept error // nil: the connection is made
	}{
		{name: "defaults"},
		{
			name: "private data both ways",
			dial: rdmacm.Options{PrivateData: []byte("hello from Dial")},
			lis:  rdmacm.Options{PrivateData: []byte("hello from Accept")},
			check: func(t *testing.T, cli, srv *rdmacm.Conn) {
				if !bytes.HasPrefix(srv.PrivateData, []byte("hello from Dial")) {
					t.Errorf("server got private data %q", srv.PrivateData)
				}
				if !bytes.HasPrefix(cli.PrivateData, []byte("hello from Accept")) {
					t.Errorf("client got private data %q", cli.PrivateData)
				}
			},
		},
		{
			name: "QP capabilities",
			dial: rdmacm.Options{Cap: verbs.QPCap{MaxSendWR: 4, MaxRecvWR: 32, MaxSendSGE: 2, MaxRecvSGE: 3}},
			lis:  rdmacm.Options{Cap: verbs.QPCap{MaxSendWR: 40, MaxRecvWR: 4}},
			check: func(t *testing.T, cli, srv *rdmacm.Conn) {
				_, ci, err := cli.QP.Query()
				vbMust(t, err)
				_, si, err := srv.QP.Query()
				vbMust(t, err)
				if ci.Cap.MaxSendWR < 4 || ci.Cap.MaxRecvWR < 32 || ci.Cap.MaxSendSGE < 2 || ci.Cap.MaxRecvSGE < 3 {
					t.Errorf("client QP capabilities %+v", ci.Cap)
				}
				if si.Cap.MaxSendWR < 40 || si.Cap.MaxRecvWR < 4 || si.Cap.MaxRecvSGE < 1 {
					t.Errorf("server QP capabilities %+v", si.Cap)
				}
			},
		},
		{
			name: "connection parameters",
			dial: rdmacm.Options{Param: &rdmacm.ConnParam{ResponderResources: 1, InitiatorDepth: 1, RetryCount: 7, RNRRetryCount: 7},
				PrivateData: []byte("p")},
			lis: rdmacm.Options{Param: &rdmacm.ConnParam{ResponderResources: 1, InitiatorDepth: 1, RNRRetryCount: 7}},
			check: func(t *testing.T, cli, srv *rdmacm.Conn) {
				a, _, err := cli.QP.Query()
				vbMust(t, err)
				if a.QPState != verbs.QPSRTS || a.MaxRdAtomic != 1 {
					t.Errorf("client QP %v with max_rd_atomic %d", a.QPState, a.MaxRdAtomic)
				}
				if srv.PrivateData[0] != 'p' {
					t.Errorf("server got private data %q", srv.PrivateData)
				}
			},
		},
		{
			name:       "server setup fails",
			lis:        rdmacm.Options{Setup: func(*rdmacm.Conn) error { return errors.New("no buffers today") }},
			wantAccept: errors.New("no buffers today"),
		},
	}
	vbNoLeaks(t)
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			ca, sa := vbDevices(t)
			ctx := vbCtx(t)
			var cp, sp connPeer
			if tc.dial.Setup == nil {
				tc.dial.Setup = cp.setup
			}
			if tc.lis.Setup == nil {
				tc.lis.Setup = sp.setup
			}
			tc.dial.LocalAddr = netip.AddrPortFrom(ca, 0)
			l, err := rdmacm.Listen(netip.AddrPortFrom(sa, 0).String(), &tc.lis)
			vbMust(t, err)
			defer l.Close()
			if l.Addr().Addr() != sa || l.Addr().Port() == 0 {
				t.Fatalf("listening on %v", l.Addr())
			}

			type accepted struct {
				c   *rdmacm.Conn
				err error
			}
			acc := make(chan accepted, 1)
			go func() {
				c, err := l.Accept(ctx)
				acc <- accepted{c, err}
			}()
			cli, dialErr := rdmacm.Dial(ctx, l.Addr().String(), &tc.dial)
			a := <-acc
			if tc.wantAccept != nil {
				if a.err == nil || !bytes.Contains([]byte(a.err.Error()), []byte(tc.wantAccept.Error())) {
					t.Errorf("Accept: %v, want %v", a.err, tc.wantAccept)
				}
				var ee *rdmacm.EventError
				if !errors.As(dialErr, &ee) || ee.Type != rdmacm.EventRejected {
					t.Errorf("Dial: %v, want a REJECTED event", dialErr)
				}
				if cli != nil {
					cli.Close()
				}
				if a.c != nil {
					a.c.Close()
				}
				return
			}
			if dialErr != nil || a.err != nil {
				t.Fatalf("Dial: %v; Accept: %v", dialErr, a.err)
			}
			srv := a.c
			defer func() {
				vbMust(t, cli.Close())
				vbMust(t, srv.Close())
				vbMust(t, cli.Close()) // a second Close is harmless
				if cp.mr != nil {
					vbMust(t, cp.mr.Dereg())
				}
				if sp.mr != nil {
					vbMust(t, sp.mr.Dereg())
				}
			}()
			if cli.RemoteAddr() != l.Addr() || srv.LocalAddr() != l.Addr() || cli.LocalAddr() != srv.RemoteAddr() ||
				cli.LocalAddr().Addr() != ca {
				t.Errorf("client %v, server %v, listener %v", cli, srv, l.Addr())
			}
			if cli.QP.Type() != verbs.QPTRC || cli.PD != cli.ID.PD() || cli.SendCQ != cli.ID.SendCQ() || srv.RecvCQ != srv.ID.RecvCQ() {
				t.Error("Conn fields do not match the ID's")
			}
			if tc.check != nil {
				tc.check(t, cli, srv)
			}

			// The receives posted by Setup take one message each way.
			copy(cp.buf[128:], "to the server")
			vbMust(t, cli.ID.PostSend(2, cp.mr, 128, 13, verbs.SendSignaled))
			copy(sp.buf[128:], "to the client")
			vbMust(t, srv.ID.PostSend(2, sp.mr, 128, 13, verbs.SendSignaled))
			for _, c := range []*rdmacm.Conn{cli, srv} {
				vbComp(t, c.ID.GetSendComp, verbs.WCSend)
				vbComp(t, c.ID.GetRecvComp, verbs.WCRecv)
			}
			if string(sp.buf[:13]) != "to the server" || string(cp.buf[:13]) != "to the client" {
				t.Errorf("server got %q, client got %q", sp.buf[:13], cp.buf[:13])
			}

			// The client hangs up; the server notices.
			vbMust(t, cli.Close())
			vbMust(t, srv.WaitDisconnect(ctx))
			vbMust(t, srv.WaitDisconnect(ctx)) // already disconnected: at once
		})
	}
}

func TestDialErrors(t *testing.T) {
	vbNoLeaks(t)
	ca, sa := vbDevices(t)
	local := &rdmacm.Options{LocalAddr: netip.AddrPortFrom(ca, 0)}

	t.Run("no port", func(t *testing.T) {
		if _, err := rdmacm.Dial(vbCtx(t), sa.String(), local); err == nil {
			t.Error("Dial without a port succeeded")
		}
	})
	t.Run("bad address", func(t *testing.T) {
		_, err := rdmacm.Dial(vbCtx(t), "300.1.2.3:7471", &rdmacm.Options{LocalAddr: local.LocalAddr, Timeout: time.Second})
		if err == nil {
			t.Error("Dial to 300.1.2.3 succeeded")
		}
	})
	t.Run("no listener", func(t *testing.T) {
		// The server's device runs a connection manager only while an
		// ID uses it: listen on another port to have it answer.
		l, err := rdmacm.Listen(netip.AddrPortFrom(sa, 0).String(), nil)
		vbMust(t, err)
		defer l.Close()
		_, err = rdmacm.Dial(vbCtx(t), netip.AddrPortFrom(sa, 7).String(), local)
		var ee *rdmacm.EventError
		if !errors.As(err, &ee) || ee.Type != rdmacm.EventRejected {
			t.Errorf("Dial with no listener: %v, want a REJECTED event", err)
		}
	})
	t.Run("context canceled", func(t *testing.T) {
		ctx, cancel := context.WithCancel(context.Background())
		cancel()
		if _, err := rdmacm.Dial(ctx, netip.AddrPortFrom(sa, 7).String(), local); !errors.Is(err, context.Canceled) {
			t.Errorf("Dial with a canceled context: %v", err)
		}
	})
	t.Run("setup fails", func(t *testing.T) {
		l, err := rdmacm.Listen(netip.AddrPortFrom(sa, 0).String(), nil)
		vbMust(t, err)
		defer l.Close()
		boom := errors.New("boom")
		_, err = rdmacm.Dial(vbCtx(t), l.Addr().String(), &rdmacm.Options{LocalAddr: local.LocalAddr,
			Setup: func(*rdmacm.Conn) error { return boom }})
		if !errors.Is(err, boom) {
			t.Errorf("Dial: %v, want the Setup error", err)
		}
	})
}

func TestListenErrors(t *testing.T) {
	vbNoLeaks(t)
	_, sa := vbDevices(t)
	l, err := rdmacm.Listen(netip.AddrPortFrom(sa, 0).String(), nil)
	vbMust(t, err)
	defer l.Close()
	if _, err := rdmacm.Listen(l.Addr().String(), nil); !errors.Is(err, verbs.ErrAddrInUse) {
		t.Errorf("second Listen on %v: %v, want ErrAddrInUse", l.Addr(), err)
	}
	if _, err := rdmacm.Listen("192.0.2.77:7471", nil); err == nil {
		t.Error("Listen on an address no device serves succeeded")
	}
	if _, err := rdmacm.Listen("no-port", nil); err == nil {
		t.Error("Listen without a port succeeded")
	}
}

// TestListenerClose checks that Close ends the Accept calls waiting and
// that later ones fail, and that the port can be bound again.
func TestListenerClose(t *testing.T) {
	vbNoLeaks(t)
	_, sa := vbDevices(t)
	l, err := rdmacm.Listen(netip.AddrPortFrom(sa, 0).String(), nil)
	vbMust(t, err)
	errs := make(chan error, 2)
	for range 2 {
		go func() {
			_, err := l.Accept(context.Background())
			errs <- err
		}()
	}
	time.Sleep(10 * time.Millisecond) // let them wait (the test passes either way)
	vbMust(t, l.Close())
	for range 2 {
		if err := <-errs; !errors.Is(err, verbs.ErrClosed) {
			t.Errorf("Accept during Close: %v, want ErrClosed", err)
		}
	}
	if _, err := l.Accept(context.Background()); !errors.Is(err, verbs.ErrClosed) {
		t.Errorf("Accept after Close: %v, want ErrClosed", err)
	}
	vbMust(t, l.Close())
	l2, err := rdmacm.Listen(l.Addr().String(), nil)
	vbMust(t, err)
	vbMust(t, l2.Close())

	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Millisecond)
	defer cancel()
	l3, err := rdmacm.Listen(netip.AddrPortFrom(sa, 0).String(), nil)
	vbMust(t, err)
	defer l3.Close()
	if _, err := l3.Accept(ctx); !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("Accept past its deadline: %v", err)
	}
}

// TestListenerCloseWithPendingRequest closes a listener that has a
// connection request nobody accepted: the request is rejected.
func TestListenerCloseWithPendingRequest(t *testing.T) {
	vbNoLeaks(t)
	ca, sa := vbDevices(t)
	l, err := rdmacm.Listen(netip.AddrPortFrom(sa, 0).String(), nil)
	vbMust(t, err)
	dialed := make(chan error, 1)
	go func() {
		c, err := rdmacm.Dial(vbCtx(t), l.Addr().String(), &rdmacm.Options{LocalAddr: netip.AddrPortFrom(ca, 0)})
		if c != nil {
			c.Close()
		}
		dialed <- err
	}()
	// Give the REQ time to arrive and queue. If it comes after Close
	// instead, nothing listens and the client is refused all the same.
	time.Sleep(100 * time.Millisecond)
	vbMust(t, l.Close())
	err = <-dialed
	if err == nil {
		t.Fatal("Dial to a listener closed with its request pending succeeded")
	}
	var ee *rdmacm.EventError
	if !errors.As(err, &ee) || ee.Type != rdmacm.EventRejected {
		t.Errorf("Dial: %v, want a REJECTED event", err)
	}
}

// TestDialListenHooks: SharedCQ gives each side one CQ; ConnData's
// private data, made per connection after Setup, goes with the request
// and the reply; Undo frees what Setup made when the connection fails
// after it.
func TestDialListenHooks(t *testing.T) {
	vbNoLeaks(t)
	ca, sa := vbDevices(t)
	ctx := vbCtx(t)
	var undone atomic.Int32
	lis := &rdmacm.Options{
		SharedCQ: true,
		Setup:    func(*rdmacm.Conn) error { return nil },
		ConnData: func(c *rdmacm.Conn) ([]byte, error) {
			if bytes.HasPrefix(c.PrivateData, []byte("fail")) {
				return nil, errors.New("no reply for you")
			}
			return append([]byte("reply to "), c.PrivateData[:3]...), nil
		},
		Undo: func(*rdmacm.Conn) { undone.Add(1) },
	}
	l, err := rdmacm.Listen(netip.AddrPortFrom(sa, 0).String(), lis)
	vbMust(t, err)
	defer l.Close()
	dial := func(data string) (cli, srv *rdmacm.Conn, dialErr, accErr error) {
		acc := make(chan error, 1)
		go func() {
			var err error
			srv, err = l.Accept(ctx)
			acc <- err
		}()
		cli, dialErr = rdmacm.Dial(ctx, l.Addr().String(), &rdmacm.Options{
			LocalAddr: netip.AddrPortFrom(ca, 0), SharedCQ: true,
			ConnData: func(*rdmacm.Conn) ([]byte, error) { return []byte(data), nil },
		})
		return cli, srv, dialErr, <-acc
	}

	cli, srv, dErr, aErr := dial("req")
	if dErr != nil || aErr != nil {
		t.Fatalf("Dial: %v; Accept: %v", dErr, aErr)
	}
	if !bytes.HasPrefix(srv.PrivateData, []byte("req")) || !bytes.HasPrefix(cli.PrivateData, []byte("reply to req")) {
		t.Errorf("request %q, reply %q", srv.PrivateData[:8], cli.PrivateData[:16])
	}
	for _, c := range []*rdmacm.Conn{cli, srv} {
		if c.SendCQ != c.RecvCQ || c.SendCQ == nil {
			t.Errorf("%v: send CQ %p, receive CQ %p; want one shared", c, c.SendCQ, c.RecvCQ)
		}
	}
	vbMust(t, cli.Close())
	vbMust(t, srv.Close())
	if undone.Load() != 0 {
		t.Errorf("Undo ran %d times for a connection that was made", undone.Load())
	}

	if _, _, dErr, aErr = dial("fail"); dErr == nil || aErr == nil {
		t.Fatalf("a reply that could not be made: Dial %v, Accept %v", dErr, aErr)
	}
	if undone.Load() != 1 {
		t.Errorf("Undo ran %d times for the failed accept, want 1", undone.Load())
	}
}

// An Accept with private data and no ConnParam of its own mirrors the
// request's resources: the accepting QP issues as many RDMA READs as the
// dialer accepts, and accepts as many as the dialer issues. (Linux's
// NVMe/RDMA host asks for reads to be accepted and issues none.)
func TestAcceptMirrorsTheRequestsReadResources(t *testing.T) {
	for _, c := range []struct{ resp, init uint8 }{{16, 0}, {4, 2}, {0, 8}} {
		l, err := rdmacm.Listen("127.0.0.1:0", &rdmacm.Options{
			ConnData: func(*rdmacm.Conn) ([]byte, error) { return []byte("ok"), nil },
		})
		if err != nil {
			t.Fatal(err)
		}
		accepted := make(chan *rdmacm.Conn, 1)
		go func() {
			c, err := l.Accept(context.Background())
			if err != nil {
				t.Error(err)
			}
			accepted <- c
		}()
		cli, err := rdmacm.Dial(context.Background(), l.Addr().String(), &rdmacm.Options{
			Param: &rdmacm.ConnParam{ResponderResources: c.resp, InitiatorDepth: c.init, RetryCount: 7, RNRRetryCount: 7}})
		if err != nil {
			t.Fatal(err)
		}
		srv := <-accepted
		if srv == nil {
			t.FailNow()
		}
		attr, _, err := srv.QP.Query()
		if err != nil || attr.MaxRdAtomic != c.resp || attr.MaxDestRdAtomic != c.init {
			t.Errorf("dialer accepting %d reads, issuing %d: the accepting QP issues %d, accepts %d (%v)",
				c.resp, c.init, attr.MaxRdAtomic, attr.MaxDestRdAtomic, err)
		}
		cli.Close()
		srv.Close()
		l.Close()
	}
}
