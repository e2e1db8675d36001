// Package demo is the engine of `rdmago demo`: the RDMA_RC_example flow of
// the Mellanox RDMA Aware Networks Programming User Manual (§7), played by a
// server and a client in one process, each on its own software RoCE device
// over loopback. They meet over TCP as the C example does (sock_connect,
// sock_sync_data), exchange their QP addresses, and then the server SENDs,
// the client RDMA READs and RDMA WRITEs the server's buffer and runs both
// atomics on it; finally the client measures RDMA WRITE bandwidth.
package demo

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"net/netip"
	"sync"
	"syscall"
	"time"

	"github.com/rdmago/rdmago/internal/racesync"
	"github.com/rdmago/rdmago/internal/rcexample"
	"github.com/rdmago/rdmago/rxe"
	"github.com/rdmago/rdmago/verbs"
)

// Options tunes the demo.
type Options struct {
	ServerAddr, ClientAddr netip.Addr // device addresses (127.0.0.1, 127.0.0.2)
	Port                   uint16     // RoCE UDP port (4791)
	BWSize                 int        // RDMA WRITE size of the bandwidth run (1 MiB)
	BWTime                 time.Duration
	// Devices, if set, is told of each device the demo makes, so that
	// the caller can read its counters (rdmago's --stats).
	Devices func(*verbs.Device)
}

func (o *Options) defaults() {
	if !o.ServerAddr.IsValid() {
		o.ServerAddr = netip.MustParseAddr("127.0.0.1")
	}
	if !o.ClientAddr.IsValid() {
		o.ClientAddr = netip.MustParseAddr("127.0.0.2")
	}
	if o.Port == 0 {
		o.Port = 4791
	}
	if o.BWSize == 0 {
		o.BWSize = 1 << 20
	}
	if o.BWTime == 0 {
		o.BWTime = time.Second
	}
}

const (
	msgSize    = 64 // the C example's MSG_SIZE is the buffer size
	serverMsg  = "SEND operation "
	readMsg    = "RDMA read operation "
	writeMsg   = "RDMA write operation"
	counterOff = 64 // where the atomics' target lives in the server's buffer
)

// Run plays the whole flow, writing what each side does and sees to w.
func Run(ctx context.Context, w io.Writer, opt Options) error {
	opt.defaults()
	out := &printer{w: w}
	ln, err := net.Listen("tcp", net.JoinHostPort(opt.ServerAddr.String(), "0"))
	if err != nil {
		return err
	}
	defer ln.Close()
	out.printf("demo", "RDMA_RC_example: server on %s, client on %s, RoCEv2 UDP port %d", opt.ServerAddr, opt.ClientAddr, opt.Port)
	var wg sync.WaitGroup
	errs := make([]error, 2)
	wg.Add(2)
	go func() {
		defer wg.Done()
		errs[0] = runServer(ctx, out, ln, opt)
	}()
	go func() {
		defer wg.Done()
		errs[1] = runClient(ctx, out, ln.Addr().String(), opt)
	}()
	wg.Wait()
	switch {
	case errs[0] != nil && errs[1] != nil:
		// One side's failure ends the other's exchange: name the cause
		// first.
		srv, cli := fmt.Errorf("server: %w", errs[0]), fmt.Errorf("client: %w", errs[1])
		if peerGone(errs[0]) && !peerGone(errs[1]) {
			return fmt.Errorf("%w (and so the %v)", cli, srv)
		}
		return fmt.Errorf("%w (and so the %v)", srv, cli)
	case errs[0] != nil:
		return fmt.Errorf("server: %w", errs[0])
	case errs[1] != nil:
		return fmt.Errorf("client: %w", errs[1])
	}
	return nil
}

// peerGone reports whether err is one side seeing the other go.
func peerGone(err error) bool {
	return errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) ||
		errors.Is(err, syscall.ECONNRESET) || errors.Is(err, syscall.EPIPE)
}

// printer serialises the two sides' lines.
type printer struct {
	mu sync.Mutex
	w  io.Writer
}

func (p *printer) printf(who, format string, args ...any) {
	p.mu.Lock()
	defer p.mu.Unlock()
	fmt.Fprintf(p.w, "[%s] %s\n", who, fmt.Sprintf(format, args...))
}

// resources are one side's verbs objects (struct resources of the C example).
type resources struct {
	who  string
	out  *printer
	conn net.Conn
	ctx  *verbs.Context
	port verbs.PortAttr
	pd   *verbs.PD
	cq   *verbs.CQ
	buf  []byte
	mr   *verbs.MR
	qp   *verbs.QP
	gid  verbs.GID
	peer rcexample.ConData
}

// syncData writes local to the peer and reads as much back (sock_sync_data).
//
// The two sides share a process, and the TCP exchange orders their use of
// registered memory in a way the race detector cannot see; racesync.Sync
// on both sides of it shows it that order.
func (r *resources) syncData(local []byte) ([]byte, error) {
	racesync.Sync()
	defer racesync.Sync()
	return rcexample.SyncData(r.conn, local)
}

// barrier is sock_sync_data with one dummy byte each way.
func (r *resources) barrier(tag byte) error {
	got, err := r.syncData([]byte{tag})
	if err == nil && got[0] != tag {
		err = fmt.Errorf("out of step: expected %q, peer at %q", tag, got[0])
	}
	return err
}

// create makes the device and verbs objects (resources_create).
func (r *resources) create(addr netip.Addr, opt Options, bufSize int) error {
	dev, err := rxe.NewDevice(rxe.Config{Name: "rxe_" + r.who, Addrs: []netip.Addr{addr}, Port: opt.Port})
	if err != nil {
		return err
	}
	if opt.Devices != nil {
		opt.Devices(dev)
	}
	if r.ctx, err = dev.Open(); err != nil {
		return err
	}
	if r.port, err = r.ctx.QueryPort(1); err != nil {
		return err
	}
	if r.gid, err = r.ctx.QueryGID(1, 0); err != nil {
		return err
	}
	if r.pd, err = r.ctx.AllocPD(); err != nil {
		return err
	}
	if r.cq, err = r.ctx.CreateCQ(256, nil, 0); err != nil {
		return err
	}
	r.buf = make([]byte, bufSize)
	access := verbs.AccessLocalWrite | verbs.AccessRemoteRead | verbs.AccessRemoteWrite | verbs.AccessRemoteAtomic
	if r.mr, err = r.pd.RegMR(r.buf, access); err != nil {
		return err
	}
	r.qp, err = r.pd.CreateQP(&verbs.QPInitAttr{SendCQ: r.cq, RecvCQ: r.cq, QPType: verbs.QPTRC,
		Cap: verbs.QPCap{MaxSendWR: 128, MaxRecvWR: 16, MaxSendSGE: 1, MaxRecvSGE: 1}})
	if err != nil {
		return err
	}
	r.out.printf(r.who, "device %s: GID %s, active MTU %s, QP 0x%06x, MR addr 0x%x rkey 0x%08x",
		dev.Name(), r.gid.Addr(), r.port.ActiveMTU, r.qp.Num(), r.mr.Addr(), r.mr.RKey())
	return nil
}

// destroy releases everything (resources_destroy).
func (r *resources) destroy() {
	if r.qp != nil {
		r.qp.Destroy()
	}
	if r.mr != nil {
		r.mr.Dereg()
	}
	if r.cq != nil {
		r.cq.Destroy()
	}
	if r.pd != nil {
		r.pd.Dealloc()
	}
	if r.ctx != nil {
		r.ctx.Close()
	}
	if r.conn != nil {
		r.conn.Close()
	}
}

// connectQP exchanges addresses and brings the QP to RTS (connect_qp).
func (r *resources) connectQP(postRecv bool) error {
	local := rcexample.ConData{Addr: r.mr.Addr(), RKey: r.mr.RKey(), QPNum: r.qp.Num(), GID: r.gid}
	remote, err := r.syncData(local.Marshal())
	if err != nil {
		return err
	}
	if r.peer, err = rcexample.ParseConData(remote); err != nil {
		return err
	}
	r.out.printf(r.who, "remote address 0x%x, rkey 0x%08x, QP 0x%06x, GID %s",
		r.peer.Addr, r.peer.RKey, r.peer.QPNum, verbs.GID(r.peer.GID).Addr())
	err = r.qp.Modify(&verbs.QPAttr{QPState: verbs.QPSInit, PortNum: 1,
		QPAccessFlags: verbs.AccessRemoteRead | verbs.AccessRemoteWrite | verbs.AccessRemoteAtomic},
		verbs.QPAttrState|verbs.QPAttrPKeyIndex|verbs.QPAttrPort|verbs.QPAttrAccessFlags)
	if err != nil {
		return err
	}
	if postRecv {
		if err := r.qp.PostRecv([]verbs.RecvWR{{WRID: 0, SGList: []verbs.SGE{r.mr.SGE(0, msgSize)}}}); err != nil {
			return err
		}
	}
	err = r.qp.Modify(&verbs.QPAttr{QPState: verbs.QPSRTR, PathMTU: r.port.ActiveMTU, DestQPNum: r.peer.QPNum, RQPSN: 0,
		MaxDestRdAtomic: 16, MinRNRTimer: 12,
		AHAttr: verbs.AHAttr{IsGlobal: true, PortNum: 1, GRH: verbs.GlobalRoute{DGID: r.peer.GID, HopLimit: 64}}},
		verbs.QPAttrState|verbs.QPAttrAV|verbs.QPAttrPathMTU|verbs.QPAttrDestQPN|verbs.QPAttrRQPSN|verbs.QPAttrMaxDestRdAtomic|verbs.QPAttrMinRNRTimer)
	if err != nil {
		return err
	}
	err = r.qp.Modify(&verbs.QPAttr{QPState: verbs.QPSRTS, SQPSN: 0, Timeout: 14, RetryCnt: 7, RNRRetry: 7, MaxRdAtomic: 16},
		verbs.QPAttrState|verbs.QPAttrSQPSN|verbs.QPAttrTimeout|verbs.QPAttrRetryCnt|verbs.QPAttrRNRRetry|verbs.QPAttrMaxQPRdAtomic)
	if err != nil {
		return err
	}
	r.out.printf(r.who, "QP state RTS")
	return r.barrier('Q')
}

// postSend posts one signaled work request on the local buffer
// (post_send).
func (r *resources) postSend(op verbs.WROpcode, off, n int, remote uint64, cmp, swap uint64) error {
	return r.qp.PostSend([]verbs.SendWR{{Opcode: op, SendFlags: verbs.SendSignaled,
		SGList: []verbs.SGE{r.mr.SGE(off, n)}, RemoteAddr: remote, RKey: r.peer.RKey, CompareAdd: cmp, Swap: swap}})
}

// pollCompletion waits for one completion and checks it (poll_completion).
func (r *resources) pollCompletion(ctx context.Context) (verbs.WC, error) {
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	wc := make([]verbs.WC, 1)
	for {
		n, err := r.cq.Poll(wc)
		if err != nil {
			return verbs.WC{}, err
		}
		if n == 1 {
			if wc[0].Status != verbs.WCSuccess {
				return wc[0], fmt.Errorf("completion with status %s (vendor error 0x%x)", wc[0].Status, wc[0].VendorErr)
			}
			return wc[0], nil
		}
		if err := r.cq.Wait(ctx); err != nil {
			return verbs.WC{}, fmt.Errorf("poll_completion: %w", err)
		}
	}
}

func cstr(b []byte) string {
	if i := bytes.IndexByte(b, 0); i >= 0 {
		b = b[:i]
	}
	return string(b)
}

func runServer(ctx context.Context, out *printer, ln net.Listener, opt Options) error {
	r := &resources{who: "server", out: out}
	defer r.destroy()
	conn, err := ln.Accept()
	if err != nil {
		return err
	}
	r.conn = conn
	out.printf("server", "TCP connection from %s", conn.RemoteAddr())
	if err := r.create(opt.ServerAddr, opt, max(opt.BWSize, 4096)); err != nil {
		return err
	}
	copy(r.buf, serverMsg)
	if err := r.connectQP(false); err != nil {
		return err
	}
	// 5. The server SENDs its buffer.
	if err := r.postSend(verbs.WRSend, 0, msgSize, 0, 0, 0); err != nil {
		return err
	}
	if _, err := r.pollCompletion(ctx); err != nil {
		return err
	}
	out.printf("server", "SEND of %q completed", serverMsg)
	// 8. New message for the client to read.
	clear(r.buf[:msgSize])
	copy(r.buf, readMsg)
	binary.NativeEndian.PutUint64(r.buf[counterOff:], 40)
	if err := r.barrier('R'); err != nil {
		return err
	}
	// 10-12. The client reads, writes and runs atomics; wait.
	if err := r.barrier('W'); err != nil {
		return err
	}
	out.printf("server", "buffer after the client's RDMA WRITE: %q", cstr(r.buf[:msgSize]))
	if err := r.barrier('A'); err != nil {
		return err
	}
	out.printf("server", "counter after the client's atomics: %d", binary.NativeEndian.Uint64(r.buf[counterOff:]))
	if err := r.barrier('C'); err != nil {
		return err
	}
	return r.barrier('B') // the bandwidth run writes into our buffer
}

func runClient(ctx context.Context, out *printer, server string, opt Options) error {
	r := &resources{who: "client", out: out}
	defer r.destroy()
	conn, err := net.Dial("tcp", server)
	if err != nil {
		return err
	}
	r.conn = conn
	if err := r.create(opt.ClientAddr, opt, max(opt.BWSize, 4096)); err != nil {
		return err
	}
	if err := r.connectQP(true); err != nil {
		return err
	}
	wc, err := r.pollCompletion(ctx)
	if err != nil {
		return err
	}
	out.printf("client", "received %d bytes by SEND: %q", wc.ByteLen, cstr(r.buf[:msgSize]))
	if err := r.barrier('R'); err != nil {
		return err
	}
	// RDMA READ the server's buffer.
	if err := r.postSend(verbs.WRRDMARead, 0, msgSize, r.peer.Addr, 0, 0); err != nil {
		return err
	}
	if _, err := r.pollCompletion(ctx); err != nil {
		return err
	}
	out.printf("client", "RDMA READ of the server's buffer: %q", cstr(r.buf[:msgSize]))
	// RDMA WRITE a new message into it.
	clear(r.buf[:msgSize])
	copy(r.buf, writeMsg)
	if err := r.postSend(verbs.WRRDMAWrite, 0, msgSize, r.peer.Addr, 0, 0); err != nil {
		return err
	}
	if _, err := r.pollCompletion(ctx); err != nil {
		return err
	}
	out.printf("client", "RDMA WRITE of %q completed", writeMsg)
	if err := r.barrier('W'); err != nil {
		return err
	}
	// Both atomics on the server's counter (40).
	if err := r.postSend(verbs.WRAtomicFetchAndAdd, 128, 8, r.peer.Addr+counterOff, 2, 0); err != nil {
		return err
	}
	if _, err := r.pollCompletion(ctx); err != nil {
		return err
	}
	out.printf("client", "ATOMIC FETCH_AND_ADD +2: the counter was %d", binary.NativeEndian.Uint64(r.buf[128:]))
	if err := r.postSend(verbs.WRAtomicCmpAndSwp, 136, 8, r.peer.Addr+counterOff, 42, 1000); err != nil {
		return err
	}
	if _, err := r.pollCompletion(ctx); err != nil {
		return err
	}
	out.printf("client", "ATOMIC CMP_AND_SWP 42 -> 1000: the counter was %d", binary.NativeEndian.Uint64(r.buf[136:]))
	if err := r.barrier('A'); err != nil {
		return err
	}
	if err := r.barrier('C'); err != nil {
		return err
	}
	if err := r.bandwidth(ctx, opt); err != nil {
		return err
	}
	return r.barrier('B')
}

// bandwidth runs RDMA WRITEs of opt.BWSize for opt.BWTime, keeping a few
// in flight, and prints the rate.
func (r *resources) bandwidth(ctx context.Context, opt Options) error {
	const depth = 4
	wr := verbs.SendWR{Opcode: verbs.WRRDMAWrite, SendFlags: verbs.SendSignaled,
		SGList: []verbs.SGE{r.mr.SGE(0, opt.BWSize)}, RemoteAddr: r.peer.Addr, RKey: r.peer.RKey}
	start := time.Now()
	posted, done := 0, 0
	wcs := make([]verbs.WC, depth)
	for {
		for posted-done < depth && time.Since(start) < opt.BWTime {
			wr.WRID = uint64(posted)
			if err := r.qp.PostSend([]verbs.SendWR{wr}); err != nil {
				return err
			}
			posted++
		}
		if done == posted {
			break
		}
		n, err := r.cq.Poll(wcs)
		if err != nil {
			return err
		}
		for _, wc := range wcs[:n] {
			if wc.Status != verbs.WCSuccess {
				return fmt.Errorf("RDMA WRITE completion: %s", wc.Status)
			}
		}
		done += n
		if n == 0 {
			wctx, cancel := context.WithTimeout(ctx, 5*time.Second)
			err := r.cq.Wait(wctx)
			cancel()
			if err != nil {
				return err
			}
		}
	}
	el := time.Since(start)
	bytes := float64(done) * float64(opt.BWSize)
	r.out.printf("client", "RDMA WRITE bandwidth: %d x %d bytes in %.2f s = %.1f MB/s (%.2f Gbit/s)",
		done, opt.BWSize, el.Seconds(), bytes/el.Seconds()/1e6, bytes*8/el.Seconds()/1e9)
	return nil
}
