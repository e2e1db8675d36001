package sockets

import (
	"bufio"
	"context"
	"errors"
	"io"
	"net"
	"net/netip"
	"sync"
	"time"

	"github.com/rdmago/rdmago/fabric"
	"github.com/rdmago/rdmago/fabric/internal/hostcc"
)

// conn is one TCP connection of an endpoint's to a peer: a goroutine
// reads it (reader), another writes what is queued on it (writer), so
// that no call of the program, and no reader, waits for the network.
type conn struct {
	e    *ep
	peer netip.AddrPort // the peer's data listener: dialed, or named by its CONN_MSG

	mu     sync.Mutex
	nc     net.Conn // nil while it is being dialed
	q      []*txReq
	wake   chan struct{} // signalled when q grows
	dead   bool          // failed or closed: nothing more is written
	closed chan struct{} // closed when the connection ends
	once   sync.Once
}

// txReq is a message to write: its bytes, and what to report once it is
// written.
type txReq struct {
	bufs   [][]byte
	report bool   // complete the operation when written (no response awaited)
	ctx    any    // the operation's context
	flags  uint64 // its completion flags
	count  bool   // count it on its counter (an inject: no CQ entry)
	peID   uint16 // the waiter to fail if the write does not happen
	waits  bool   // a waiter awaits the peer's response
	// internal marks the provider's own messages (responses), which the
	// program's queue limit does not count.
	internal bool
}

func newConn(e *ep, peer netip.AddrPort, nc net.Conn) *conn {
	return &conn{e: e, peer: peer, nc: nc, wake: make(chan struct{}, 1), closed: make(chan struct{})}
}

// dialTimeout bounds a connection attempt (C's sock_conn_timeout is
// shorter, but retries).
const dialTimeout = 10 * time.Second

// start runs the connection's goroutines: for one this side opens, the
// writer dials it and sends CONN_MSG with self first.
func (c *conn) start(self netip.AddrPort) {
	c.e.wg.Add(1)
	go c.writer(self)
}

// send queues r; false if the connection is dead.
func (c *conn) send(r *txReq) bool {
	c.mu.Lock()
	if c.dead {
		c.mu.Unlock()
		return false
	}
	c.q = append(c.q, r)
	c.mu.Unlock()
	select {
	case c.wake <- struct{}{}:
	default:
	}
	return true
}

// writer dials the connection if this side opens it, then writes what is
// queued until the connection ends.
func (c *conn) writer(self netip.AddrPort) {
	defer c.e.wg.Done()
	c.mu.Lock()
	nc := c.nc
	c.mu.Unlock()
	if nc == nil {
		ctx, cancel := context.WithTimeout(context.Background(), dialTimeout)
		stop := context.AfterFunc(c.e.closing, cancel)
		var d net.Dialer
		x, err := d.DialContext(ctx, "tcp", c.peer.String())
		stop()
		cancel()
		if err != nil {
			c.fail(fabric.ErrConnRefused)
			return
		}
		x.(*net.TCPConn).SetNoDelay(true)
		hostcc.SetConn(x.(*net.TCPConn)) // see package hostcc
		c.mu.Lock()
		if c.dead {
			c.mu.Unlock()
			x.Close()
			return
		}
		c.nc, nc = x, x
		c.mu.Unlock()
		var m [hdrLen + addrLen]byte
		(&header{op: opConnMsg, msgLen: hdrLen + addrLen}).put(m[:])
		putAddr(m[hdrLen:], self)
		if _, err := nc.Write(m[:]); err != nil {
			c.fail(fabric.ErrIO)
			return
		}
	}
	c.e.wg.Add(1)
	go c.reader(nc)
	w := bufio.NewWriterSize(nc, 64<<10)
	for {
		c.mu.Lock()
		q := c.q
		c.q = nil
		dead := c.dead
		c.mu.Unlock()
		if dead {
			return
		}
		if len(q) == 0 {
			select {
			case <-c.wake:
				continue
			case <-c.closed:
				return
			}
		}
		var err error
		for _, r := range q {
			if err = writeAll(w, r.bufs); err != nil {
				break
			}
		}
		if err == nil {
			err = w.Flush()
		}
		if err != nil {
			c.failReqs(q, fabric.ErrIO)
			c.fail(fabric.ErrIO)
			return
		}
		for _, r := range q {
			c.e.written(r)
		}
	}
}

func writeAll(w *bufio.Writer, bufs [][]byte) error {
	for _, b := range bufs {
		if _, err := w.Write(b); err != nil {
			return err
		}
	}
	return nil
}

// failReqs fails operations that were not written.
func (c *conn) failReqs(q []*txReq, errno fabric.Errno) {
	for _, r := range q {
		c.e.unwritten(r, errno)
	}
}

// fail ends the connection: what is queued fails with errno, the socket
// closes, and the endpoint forgets it.
func (c *conn) fail(errno fabric.Errno) {
	c.once.Do(func() {
		c.mu.Lock()
		c.dead = true
		q := c.q
		c.q = nil
		nc := c.nc
		c.mu.Unlock()
		close(c.closed)
		if nc != nil {
			nc.Close()
		}
		c.failReqs(q, errno)
		c.e.connGone(c, errno)
	})
}

// reader takes in the peer's messages until the connection ends.
func (c *conn) reader(nc net.Conn) {
	defer c.e.wg.Done()
	r := bufio.NewReaderSize(nc, 64<<10)
	for {
		if err := c.e.receive(c, r); err != nil {
			errno := fabric.ErrIO
			if errors.Is(err, io.EOF) || errors.Is(err, net.ErrClosed) {
				errno = fabric.ErrConnReset
			}
			c.fail(errno)
			return
		}
	}
}
