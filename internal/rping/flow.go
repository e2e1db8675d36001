package rping

import (
	"bytes"
	"context"
	"errors"
	"net/netip"
	"strconv"
	"sync"

	"github.com/rdmago/rdmago/verbs"
)

// quiet reports whether err ends the run without rping's message for the
// step that failed: rping would have exited from its CM thread, or the
// run was interrupted.
func quiet(err error) bool {
	return err == errFatal || errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded)
}

// bindServer is rping_bind_server: bind the address and port, and listen.
func (r *runner) bindServer() error {
	if err := r.cmID.BindAddr(netip.AddrPortFrom(r.o.Addr, r.o.Port)); err != nil {
		r.perror("rdma_bind_addr", err)
		return cmFailed(err)
	}
	r.debugf("rdma_bind_addr successful\n")
	r.debugf("rdma_listen\n")
	if err := r.cmID.Listen(3); err != nil {
		r.perror("rdma_listen", err)
		return cmFailed(err)
	}
	return nil
}

// runServer is rping_run_server: serve the first client.
func (r *runner) runServer(ctx context.Context, c *cb) error {
	if err := r.bindServer(); err != nil {
		return err
	}
	if err := c.wait(ctx); err != nil {
		return err
	}
	if s := c.getState(); s != stateConnectRequest {
		r.errorf("wait for CONNECT_REQUEST state %d\n", s)
		return errFailed
	}
	return r.serve(ctx, c, false)
}

// runPersistentServer is rping_run_persistent_server: serve every client
// in a goroutine of its own, until ctx ends.
func (r *runner) runPersistentServer(ctx context.Context, lc *cb) error {
	if err := r.bindServer(); err != nil {
		return err
	}
	var wg sync.WaitGroup
	defer wg.Wait()
	for {
		select {
		case c := <-r.requests:
			wg.Add(1)
			go func() {
				defer wg.Done()
				r.serve(ctx, c, true)
			}()
		case <-r.fatal:
			return errFatal
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}

// serve is the rest of rping_run_server, and rping_persistent_server_thread
// (persistent): set up, accept, ping, disconnect, free.
func (r *runner) serve(ctx context.Context, c *cb, persistent bool) error {
	defer func() {
		r.unregister(c.id)
		c.id.Destroy()
	}()
	release, err := r.prepare(c)
	if err != nil {
		return err
	}
	defer release()
	if err := c.accept(ctx); err != nil {
		if !quiet(err) {
			r.errorf("connect error %d\n", retval(err))
		}
		return err
	}
	err = c.testServer(ctx)
	if err != nil && !persistent && !quiet(err) {
		r.errorf("rping server failed: %d\n", retval(err))
	}
	c.disconnect()
	return err
}

// accept is rping_accept.
func (c *cb) accept(ctx context.Context) error {
	r := c.r
	r.debugf("accepting client connection request\n")
	var err error
	if c.selfQP {
		if err := c.selfModifyQP(c.id); err != nil {
			return err
		}
		p := c.connParam()
		err = c.id.Accept(&p)
	} else {
		err = c.id.Accept(nil)
	}
	if err != nil {
		r.perror("rdma_accept", err)
		return cmFailed(err)
	}
	if err := c.wait(ctx); err != nil {
		return err
	}
	if s := c.getState(); s == stateError {
		r.errorf("wait for CONNECTED state %d\n", s)
		return errFailed
	}
	return nil
}

// testServer is rping_test_server: answer pings until the client
// disconnects, which ends it without error.
func (c *cb) testServer(ctx context.Context) error {
	r := c.r
	// step waits for the next wake-up and checks the state it finds.
	step := func(want state, name string) error {
		if err := c.waitPeer(ctx, "client"); err != nil {
			return err
		}
		if s := c.getState(); s != want {
			r.errorf("wait for %s state %d\n", name, s)
			return errFailed
		}
		return nil
	}
	var err error
	for {
		// The client's start buffer.
		if err = step(stateReadAdv, "RDMA_READ_ADV"); err != nil {
			break
		}
		r.debugf("server received sink adv\n")
		_, _, length := c.remote()
		if err = c.rdma(verbs.WRRDMARead, length); err != nil {
			r.errorf("post send error %d\n", retval(err))
			break
		}
		r.debugf("server posted rdma read req \n")
		if err = step(stateReadComplete, "RDMA_READ_COMPLETE"); err != nil {
			break
		}
		r.debugf("server received read complete\n")
		data := cString(c.rdmaMR.Buf())
		if r.o.Verbose {
			r.printf("server ping data: %s\n", data)
		}
		if err = c.goAhead(); err != nil {
			r.errorf("post send error %d\n", retval(err))
			break
		}
		r.debugf("server posted go ahead\n")

		// The client's sink buffer.
		if err = step(stateWriteAdv, "RDMA_WRITE_ADV"); err != nil {
			break
		}
		r.debugf("server received sink adv\n")
		if err = c.rdma(verbs.WRRDMAWrite, uint32(min(len(data)+1, len(c.rdmaMR.Buf())))); err != nil {
			r.errorf("post send error %d\n", retval(err))
			break
		}
		if err = step(stateWriteComplete, "RDMA_WRITE_COMPLETE"); err != nil {
			break
		}
		r.debugf("server rdma write complete \n")
		if err = c.goAhead(); err != nil {
			r.errorf("post send error %d\n", retval(err))
			break
		}
		r.debugf("server posted go ahead\n")
	}
	if !quiet(err) && c.getState() == stateDisconnected {
		return nil
	}
	return err
}

// prepare is what client and server do before connecting: the QP and its
// CQ (rping_setup_qp), the buffers, the first receive, and the CQ thread.
// release undoes it.
func (r *runner) prepare(c *cb) (release func(), err error) {
	var undo []func()
	release = func() {
		for i := len(undo) - 1; i >= 0; i-- {
			undo[i]()
		}
	}
	if err := c.setupQP(c.id); err != nil {
		r.errorf("setup_qp failed: %d\n", retval(err))
		return nil, err
	}
	undo = append(undo, c.freeQP)
	if err := c.setupBuffers(); err != nil {
		r.errorf("rping_setup_buffers failed: %d\n", retval(err))
		release()
		return nil, err
	}
	undo = append(undo, c.freeBuffers)
	if err := c.postRecv(); err != nil {
		r.errorf("ibv_post_recv failed: %d\n", retval(err))
		release()
		return nil, err
	}
	c.startCQ()
	undo = append(undo, c.stopCQ)
	return release, nil
}

// runClient is rping_run_client.
func (r *runner) runClient(ctx context.Context, c *cb) error {
	if err := c.bindClient(ctx); err != nil {
		return err
	}
	release, err := r.prepare(c)
	if err != nil {
		return err
	}
	defer release()
	if err := c.connectClient(ctx); err != nil {
		if !quiet(err) {
			r.errorf("connect error %d\n", retval(err))
		}
		return err
	}
	err = c.testClient(ctx)
	if err != nil && !quiet(err) {
		r.errorf("rping client failed: %d\n", retval(err))
	}
	if c.disconnect() == nil && !quiet(err) {
		c.awaitDisconnected(ctx)
	}
	return err
}

// bindClient is rping_bind_client: resolve the server's address and the
// route to it.
func (c *cb) bindClient(ctx context.Context) error {
	r := c.r
	var src netip.AddrPort
	if r.o.Source.IsValid() {
		src = netip.AddrPortFrom(r.o.Source, 0)
	}
	if err := c.id.ResolveAddr(src, netip.AddrPortFrom(r.o.Addr, r.o.Port), resolveWait); err != nil {
		r.perror("rdma_resolve_addr", err)
		return cmFailed(err)
	}
	if err := c.wait(ctx); err != nil {
		return err
	}
	if s := c.getState(); s != stateRouteResolved {
		r.errorf("waiting for addr/route resolution state %d\n", s)
		return errFailed
	}
	r.debugf("rdma_resolve_addr - rdma_resolve_route successful\n")
	return nil
}

// connectClient is rping_connect_client.
func (c *cb) connectClient(ctx context.Context) error {
	r := c.r
	p := c.connParam()
	if err := c.id.Connect(&p); err != nil {
		r.perror("rdma_connect", err)
		return cmFailed(err)
	}
	if err := c.wait(ctx); err != nil {
		return err
	}
	if s := c.getState(); s != stateConnected {
		r.errorf("wait for CONNECTED state %d\n", s)
		return errFailed
	}
	if c.selfQP {
		if err := c.selfModifyQP(c.id); err != nil {
			r.perror("rping_modify_qp", err)
			return err
		}
		if err := c.id.Establish(); err != nil {
			r.perror("rdma_establish", err)
			return cmFailed(err)
		}
	}
	r.debugf("rdma_connect successful\n")
	return nil
}

// testClient is rping_test_client: Count pings (for ever if 0).
func (c *cb) testClient(ctx context.Context) error {
	r := c.r
	step := func(want state, name string) error {
		if err := c.waitPeer(ctx, "server"); err != nil {
			return err
		}
		if s := c.getState(); s != want {
			r.errorf("wait for %s state %d\n", name, s)
			return errFailed
		}
		return nil
	}
	start := byte(65)
	startBuf, rdmaBuf := c.startMR.Buf(), c.rdmaMR.Buf()
	var err error
	for ping := 0; r.o.Count == 0 || ping < r.o.Count; ping++ {
		c.setState(stateReadAdv)
		fillPing(startBuf, ping, start)
		if start++; start > 122 {
			start = 65
		}
		if err = c.sendInfo(c.startMR); err != nil {
			r.errorf("post send error %d\n", retval(err))
			break
		}
		// Wait for the server's go ahead after its READ.
		if err = step(stateWriteAdv, "RDMA_WRITE_ADV"); err != nil {
			break
		}
		if err = c.sendInfo(c.rdmaMR); err != nil {
			r.errorf("post send error %d\n", retval(err))
			break
		}
		// Wait for the server's go ahead after its WRITE.
		if err = step(stateWriteComplete, "RDMA_WRITE_COMPLETE"); err != nil {
			break
		}
		if r.o.Validate && !bytes.Equal(startBuf, rdmaBuf) {
			r.errorf("data mismatch!\n")
			err = errFailed
			break
		}
		if r.o.Verbose {
			r.printf("ping data: %s\n", cString(rdmaBuf))
		}
	}
	if !quiet(err) && c.getState() == stateDisconnected {
		return nil
	}
	return err
}

// fillPing writes ping number n into buf as rping does: "rdma-ping-n: ",
// then the letters from first on, cycling through ASCII 65 to 122, and a
// NUL in the last byte.
func fillPing(buf []byte, n int, first byte) {
	i := copy(buf, "rdma-ping-")
	i += copy(buf[i:], strconv.Itoa(n))
	i += copy(buf[i:], ": ")
	for ch := first; i < len(buf); i++ {
		buf[i] = ch
		if ch++; ch > 122 {
			ch = 65
		}
	}
	buf[len(buf)-1] = 0
}
