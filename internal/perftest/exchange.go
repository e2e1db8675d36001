package perftest

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"math"
	"net"
	"os"
	"strconv"
	"strings"
	"time"

	"golang.org/x/sys/unix"

	"github.com/rdmago/rdmago/verbs"
)

// Version is the perftest version this engine speaks, as perftest 4.5's
// tools send it.
const Version = "6.06"

// minVersion is the oldest peer perftest accepts.
const (
	minVersion       = 5.70
	minVersionString = "5.70"
)

// helloTimeout bounds the wait for the peer's version.
var helloTimeout = 15 * time.Second

// setDeadline bounds the exchanges until it is called again with the
// zero time.
func (c *ctrl) setDeadline(t time.Time) {
	if c.cm != nil {
		c.cm.deadline = t
		return
	}
	c.c.SetDeadline(t)
}

// ctrl is the out-of-band channel: perftest's TCP connection, or with -R
// (and -z) an rdma_cm connection whose messages are SENDs. Every exchange
// is one write and one read of the same fixed size; the client writes
// first, the server reads first.
type ctrl struct {
	c      net.Conn // TCP
	cm     *cmComm  // rdma_cm; c is nil
	server bool
}

// dialCtrl connects to the server, or listens for one client.
func dialCtrl(ctx context.Context, o *Options) (*ctrl, error) {
	if o.CMComm {
		return dialCMCtrl(ctx, o)
	}
	addr := net.JoinHostPort(o.Server, strconv.Itoa(o.Port))
	if o.Server == "" {
		// perftest listens on IPv4 only; this server takes IPv6 clients
		// too (the socket is dual-stack where the host has IPv6).
		var lc net.ListenConfig
		ln, err := lc.Listen(ctx, "tcp", ":"+strconv.Itoa(o.Port))
		if err != nil {
			return nil, fmt.Errorf("couldn't listen to port %d: %w", o.Port, err)
		}
		stop := context.AfterFunc(ctx, func() { ln.Close() })
		defer stop()
		c, err := ln.Accept()
		ln.Close() // perftest takes one client
		if err != nil {
			return nil, fmt.Errorf("accept: %w", err)
		}
		return &ctrl{c: c, server: true}, nil
	}
	var d net.Dialer
	var c net.Conn
	var err error
	// perftest's client gives up at once; retrying briefly spares scripts
	// that start both sides together.
	for try := 0; ; try++ {
		c, err = d.DialContext(ctx, "tcp", addr) // whatever the name resolves to
		if err == nil || try == 20 || ctx.Err() != nil {
			break
		}
		time.Sleep(100 * time.Millisecond)
	}
	if err != nil {
		return nil, fmt.Errorf("couldn't connect to %s: %w", addr, err)
	}
	return &ctrl{c: c}, nil
}

func (c *ctrl) Close() error {
	if c.cm != nil {
		return c.cm.close()
	}
	return c.c.Close()
}

// xchg sends mine and returns the peer's message of the same size.
func (c *ctrl) xchg(mine []byte) ([]byte, error) {
	peer := make([]byte, len(mine))
	write := func() error {
		if c.cm != nil {
			return c.cm.write(mine)
		}
		_, err := c.c.Write(mine)
		return err
	}
	read := func() error {
		if c.cm != nil {
			return c.cm.read(peer)
		}
		_, err := io.ReadFull(c.c, peer)
		return err
	}
	first, second := write, read
	if c.server {
		first, second = read, write
	}
	if err := first(); err != nil {
		return nil, fmt.Errorf("out-of-band exchange: %w", err)
	}
	if err := second(); err != nil {
		return nil, fmt.Errorf("out-of-band exchange: %w", err)
	}
	return peer, nil
}

// cycleBuffer is the cycle buffer this side announces: the span of
// remote memory a bandwidth test's posts move through. perftest announces
// its page size; this side offers 64 KiB, the largest page size Linux
// has, so that it holds any peer's.
const cycleBuffer = 64 << 10

// hello exchanges the version, the system data and the MTU, as perftest
// does before the keys; it returns the MTU both use and the peer's cycle
// buffer.
func (c *ctrl) hello(mtu verbs.MTU) (verbs.MTU, int, error) {
	v := make([]byte, 16)
	copy(v, Version)
	// A peer that is not perftest may never answer: the first exchange
	// has a time limit.
	c.setDeadline(time.Now().Add(helloTimeout))
	peer, err := c.xchg(v)
	c.setDeadline(time.Time{})
	if errors.Is(err, os.ErrDeadlineExceeded) {
		return 0, 0, fmt.Errorf("the peer sent no perftest version within %v: is it perftest (%s or later)?", helloTimeout, minVersionString)
	}
	if err != nil {
		return 0, 0, err
	}
	pv, _ := strconv.ParseFloat(strings.TrimRight(string(peer), "\x00"), 64)
	if pv < minVersion {
		return 0, 0, fmt.Errorf("current implementation is not compatible with the peer's perftest version %q", strings.TrimRight(string(peer), "\x00"))
	}
	// System data: the cycle buffer and the cache line size, big-endian.
	var sys [2]uint32
	for i, v := range []uint32{cycleBuffer, 64} {
		var b [4]byte
		binary.BigEndian.PutUint32(b[:], v)
		p, err := c.xchg(b[:])
		if err != nil {
			return 0, 0, err
		}
		sys[i] = binary.BigEndian.Uint32(p)
	}
	m := []byte(strconv.Itoa(int(mtu)))
	m = append(m, 0)
	if len(m) != 2 {
		return 0, 0, fmt.Errorf("MTU enum %d", mtu)
	}
	pm, err := c.xchg(m)
	if err != nil {
		return 0, 0, err
	}
	n, err := strconv.Atoi(strings.TrimRight(string(pm), "\x00"))
	if err != nil || n < 1 || n > 5 {
		return 0, 0, fmt.Errorf("the peer sent MTU %q", pm)
	}
	return min(mtu, verbs.MTU(n)), int(sys[0]), nil
}

// dest is perftest's pingpong_dest: what a side tells the other of its QP
// and memory.
type dest struct {
	lid      uint16
	outReads int
	qpn      uint32
	psn      uint32
	rkey     uint32
	vaddr    uint64
	gid      verbs.GID
	srqn     uint32
	gidIndex int // sent over rdma_cm only
}

// keyLen is the key message's size with a GID (KEY_MSG_SIZE_GID).
const keyLen = 108

// marshal formats the key message: lowercase hex fields, the GID's bytes
// each as two hex digits, each followed by a colon but the sixth's is
// the GID's first, NUL-terminated: 107 characters and the NUL.
func (d *dest) marshal() []byte {
	var b strings.Builder
	fmt.Fprintf(&b, "%04x:%04x:%06x:%06x:%08x:%016x:", d.lid, d.outReads, d.qpn, d.psn, d.rkey, d.vaddr)
	for _, x := range d.gid {
		fmt.Fprintf(&b, "%02x:", x)
	}
	fmt.Fprintf(&b, "%08x:", d.srqn)
	out := append([]byte(b.String()), 0)
	return out
}

var errKey = errors.New("malformed key message")

// parseDest reads a key message.
func parseDest(b []byte) (dest, error) {
	var d dest
	if len(b) != keyLen || b[keyLen-1] != 0 {
		return d, errKey
	}
	f := strings.Split(string(b[:keyLen-1]), ":")
	if len(f) != 6+16+2 || f[23] != "" {
		return d, errKey
	}
	// Each field has its fixed width of hex digits.
	hex := func(s string, digits int) (uint64, error) {
		if len(s) != digits {
			return 0, errKey
		}
		v, err := strconv.ParseUint(s, 16, 64)
		if err != nil {
			return 0, errKey
		}
		return v, nil
	}
	var vals [6]uint64
	for i, digits := range []int{4, 4, 6, 6, 8, 16} {
		v, err := hex(f[i], digits)
		if err != nil {
			return d, err
		}
		vals[i] = v
	}
	d.lid, d.outReads, d.qpn, d.psn, d.rkey, d.vaddr = uint16(vals[0]), int(vals[1]), uint32(vals[2]), uint32(vals[3]), uint32(vals[4]), vals[5]
	for i := range d.gid {
		v, err := hex(f[6+i], 2)
		if err != nil {
			return d, err
		}
		d.gid[i] = byte(v)
	}
	v, err := hex(f[22], 8)
	if err != nil {
		return d, err
	}
	d.srqn = uint32(v)
	return d, nil
}

// handshake exchanges the key message (every synchronization point of
// perftest is one): as text over TCP, as perftest's struct over rdma_cm.
func (c *ctrl) handshake(my *dest) (dest, error) {
	if c.cm != nil {
		b, err := c.xchg(my.marshalRaw())
		if err != nil {
			return dest{}, err
		}
		return parseRawDest(b)
	}
	b, err := c.xchg(my.marshal())
	if err != nil {
		return dest{}, err
	}
	return parseDest(b)
}

// firstKey is the first handshake with QP i's key, which brings the
// peer's key for its QP i. perftest sends no QP count: a peer with fewer
// QPs shows itself here by a key already received, its QP 0's, sent again
// at a later step of its exchange; this side's answer has gone out by
// then, so the peer, too, finds the count differs (see againKey).
func (c *ctrl) firstKey(r *res, i int) (dest, error) {
	d, err := c.handshake(&r.my[i])
	if err != nil {
		return d, err
	}
	for j := range i {
		if d == r.rem[j] {
			if j == 0 {
				return d, fmt.Errorf("parameters mismatch: the peer uses -q %d, this side -q %d (use the same -q on both sides)", i, len(r.qps))
			}
			return d, fmt.Errorf("parameters mismatch: the peer sent QP %d's key again for QP %d (use the same -q and test on both sides)", j, i)
		}
	}
	return d, nil
}

// againKey is a later handshake with QP i's key: perftest sends each key
// unchanged every time, so the peer's answer must be the key it sent for
// its QP i. A key never seen comes from a peer with more QPs.
func (c *ctrl) againKey(r *res, i int) error {
	d, err := c.handshake(&r.my[i])
	if err != nil || d == r.rem[i] {
		return err
	}
	for j := range r.rem {
		if d == r.rem[j] {
			return fmt.Errorf("parameters mismatch: the peer sent QP %d's key where QP %d's belongs (use the same -q and test on both sides)", j, i)
		}
	}
	return fmt.Errorf("parameters mismatch: the peer uses a larger -q than this side's %d (use the same -q on both sides)", len(r.qps))
}

// bwReport is what xchg_bw_reports carries.
type bwReport struct {
	size    uint64
	iters   uint64
	peak    float64
	avg     float64
	msgRate float64
}

// xchgReport exchanges bandwidth reports, each value on its own:
// big-endian integers and IEEE-754 doubles.
func (c *ctrl) xchgReport(r bwReport) (bwReport, error) {
	var out bwReport
	u := func(v uint64) (uint64, error) {
		var b [8]byte
		binary.BigEndian.PutUint64(b[:], v)
		p, err := c.xchg(b[:])
		if err != nil {
			return 0, err
		}
		return binary.BigEndian.Uint64(p), nil
	}
	var err error
	if out.size, err = u(r.size); err != nil {
		return out, err
	}
	if out.iters, err = u(r.iters); err != nil {
		return out, err
	}
	for _, p := range []struct {
		v   float64
		dst *float64
	}{{r.peak, &out.peak}, {r.avg, &out.avg}, {r.msgRate, &out.msgRate}} {
		v, err := u(math.Float64bits(p.v))
		if err != nil {
			return out, err
		}
		*p.dst = math.Float64frombits(v)
	}
	return out, nil
}

// closeConn is ctx_close_connection: a last handshake, then over TCP
// "done" (never read) and close.
func (c *ctrl) closeConn(my *dest) error {
	if _, err := c.handshake(my); err != nil {
		return err
	}
	if c.cm != nil {
		return nil // closed with the run
	}
	c.c.Write([]byte("done\x00"))
	return c.c.Close()
}

// Why a run ended early.
var (
	errPeerGone = errors.New("the peer closed the connection before the test ended")
	errPeerDone = errors.New("the peer finished, but what it sent did not all arrive (UC loses messages)")
)

// peerGrace is how long a run may go on after the peer finished (its
// next out-of-band message came) or went away (the connection closed).
const peerGrace = 3 * time.Second

// watch returns a context for a test run that ends, with a cause, if the
// peer goes away or finishes and this side does not within peerGrace;
// stop ends the watch (before the next exchange). It reads nothing from
// the connection: it only peeks at it.
func (c *ctrl) watch(ctx context.Context) (context.Context, func()) {
	if c.cm != nil {
		return c.cm.watch(ctx)
	}
	run, cancel := context.WithCancelCause(ctx)
	tc, ok := c.c.(*net.TCPConn)
	if !ok {
		return run, func() { cancel(nil) }
	}
	rc, err := tc.SyscallConn()
	if err != nil {
		return run, func() { cancel(nil) }
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		var b [1]byte
		var gone bool
		err := rc.Read(func(fd uintptr) bool {
			n, _, err := unix.Recvfrom(int(fd), b[:], unix.MSG_PEEK|unix.MSG_DONTWAIT)
			if err == unix.EAGAIN {
				return false
			}
			gone = n == 0 || err != nil
			return true
		})
		if err != nil {
			return // stopped
		}
		cause := errPeerDone
		if gone {
			cause = errPeerGone
		}
		t := time.AfterFunc(peerGrace, func() { cancel(cause) })
		<-run.Done()
		t.Stop()
	}()
	return run, func() {
		cancel(nil)
		tc.SetReadDeadline(time.Now()) // ends a peek in progress
		<-done
		tc.SetReadDeadline(time.Time{})
	}
}

// runErr is err, or why the run's context ended when it did.
func runErr(ctx context.Context, err error) error {
	if cause := context.Cause(ctx); cause != nil && cause != context.Canceled {
		return cause
	}
	return err
}
