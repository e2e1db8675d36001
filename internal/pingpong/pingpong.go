// Package pingpong is the engine of `rdmago rc_pingpong`: the ping-pong of
// rdma-core's ibv_rc_pingpong, wire-compatible with it. The two sides meet
// over TCP (port 18515), exchange "LID:QPN:PSN:GID" strings, connect RC QPs
// and bounce SENDs of a given size back and forth, then print the same two
// result lines. Either side may be rdma-core's program on Linux Soft-RoCE
// or a real RoCE NIC, or another rdmago.
package pingpong

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"net/netip"
	"os"
	"strconv"
	"time"

	"github.com/rdmago/rdmago/verbs"
)

// Options are ibv_rc_pingpong's flags.
type Options struct {
	Server   string // -: empty for the server side; the server's host name for the client
	Port     int    // -p: TCP port of the exchange (18515)
	Device   string // -d: device name (default: the first device)
	IBPort   uint8  // -i: device port (1)
	Size     int    // -s: message size (4096)
	MTU      verbs.MTU
	RxDepth  int   // -r: receives posted at a time (500)
	Iters    int   // -n: exchanges (1000)
	SL       uint8 // -l: service level
	Events   bool  // -e: sleep on CQ events instead of polling
	GIDIndex int   // -g: local GID index (-1: none, as on InfiniBand; RoCE needs one)
	Check    bool  // -c: check the data received
	// Dev, if set, is the device to use instead of looking Device up
	// among verbs.Devices (for programs that made their own with
	// rxe.NewDevice).
	Dev *verbs.Device
}

// Defaults returns ibv_rc_pingpong's defaults.
func Defaults() Options {
	return Options{Port: 18515, IBPort: 1, Size: 4096, MTU: verbs.MTU1024, RxDepth: 500, Iters: 1000, GIDIndex: -1}
}

// Result is what the run measured.
type Result struct {
	Bytes   int64
	Elapsed time.Duration
}

const (
	recvWRID = 1 // PINGPONG_RECV_WRID
	sendWRID = 2 // PINGPONG_SEND_WRID
	fill     = 0x7b
)

// dest is one side's address (struct pingpong_dest).
type dest struct {
	lid, qpn, psn uint32
	gid           verbs.GID
}

// exchangeLen is the size of the exchange string with its NUL:
// sizeof "0000:000000:000000:00000000000000000000000000000000".
const exchangeLen = 4 + 1 + 6 + 1 + 6 + 1 + 32 + 1

func (d *dest) marshal() []byte {
	b := make([]byte, 0, exchangeLen)
	b = fmt.Appendf(b, "%04x:%06x:%06x:%s", d.lid, d.qpn, d.psn, d.gid.Hex())
	return append(b, 0)
}

// parseDest parses the peer's exchange string, strictly: four fields, hex.
func parseDest(b []byte) (dest, error) {
	var d dest
	if i := bytes.IndexByte(b, 0); i >= 0 {
		b = b[:i]
	}
	f := bytes.Split(b, []byte(":"))
	if len(f) != 4 {
		return d, fmt.Errorf("pingpong: malformed address %q: want LID:QPN:PSN:GID", b)
	}
	var v [3]uint64
	for i := 0; i < 3; i++ {
		n, err := strconv.ParseUint(string(f[i]), 16, 32)
		if err != nil {
			return d, fmt.Errorf("pingpong: malformed address %q: %v", b, err)
		}
		v[i] = n
	}
	if v[1] > 0xffffff || v[2] > 0xffffff || v[0] > 0xffff {
		return d, fmt.Errorf("pingpong: malformed address %q: field out of range", b)
	}
	gid, err := verbs.ParseGIDHex(string(f[3]))
	if err != nil {
		return d, fmt.Errorf("pingpong: malformed address %q: %v", b, err)
	}
	d.lid, d.qpn, d.psn, d.gid = uint32(v[0]), uint32(v[1]), uint32(v[2]), gid
	return d, nil
}

// Run plays one side of ibv_rc_pingpong, writing its lines to out.
func Run(ctx context.Context, out io.Writer, o Options) (Result, error) {
	var res Result
	dev := o.Dev
	if dev == nil {
		var err error
		if dev, err = pickDevice(o.Device); err != nil {
			return res, err
		}
	}
	pp, err := newContext(dev, o)
	if err != nil {
		return res, err
	}
	defer pp.close()

	port, err := pp.ctx.QueryPort(o.IBPort)
	if err != nil {
		return res, err
	}
	my := dest{lid: uint32(port.LID), qpn: pp.qp.Num(), psn: rand.Uint32() & 0xffffff}
	if port.LinkLayer != verbs.LinkLayerEthernet && my.lid == 0 {
		return res, errors.New("couldn't get local LID")
	}
	if o.GIDIndex >= 0 {
		if my.gid, err = pp.ctx.QueryGID(o.IBPort, o.GIDIndex); err != nil {
			return res, fmt.Errorf("can't read sgid of index %d: %w", o.GIDIndex, err)
		}
	}
	fmt.Fprintf(out, "  local address:  LID 0x%04x, QPN 0x%06x, PSN 0x%06x, GID %s\n", my.lid, my.qpn, my.psn, gidString(my.gid))

	// Post the receives and arm the CQ before the exchange, as
	// ibv_rc_pingpong does: the peer may send as soon as it knows us, and a
	// completion that lands before the CQ is armed raises no event.
	routs, err := pp.prepare(o)
	if err != nil {
		return res, err
	}
	var rem dest
	if o.Server != "" {
		rem, err = clientExchange(ctx, o, &my)
	} else {
		rem, err = serverExchange(ctx, o, pp, &my)
	}
	if err != nil {
		return res, err
	}
	fmt.Fprintf(out, "  remote address: LID 0x%04x, QPN 0x%06x, PSN 0x%06x, GID %s\n", rem.lid, rem.qpn, rem.psn, gidString(rem.gid))
	if o.Server != "" {
		if err := pp.connect(o, &my, &rem); err != nil {
			return res, err
		}
	}
	elapsed, err := pp.loop(ctx, o, routs)
	if err != nil {
		return res, err
	}
	res = Result{Bytes: int64(o.Size) * int64(o.Iters) * 2, Elapsed: elapsed}
	usec := float64(elapsed.Microseconds())
	if usec == 0 {
		usec = 1
	}
	fmt.Fprintf(out, "%d bytes in %.2f seconds = %.2f Mbit/sec\n", res.Bytes, usec/1e6, float64(res.Bytes)*8/usec)
	fmt.Fprintf(out, "%d iters in %.2f seconds = %.2f usec/iter\n", o.Iters, usec/1e6, usec/float64(o.Iters))
	return res, nil
}

// gidString prints a GID as inet_ntop(AF_INET6) does.
func gidString(g verbs.GID) string {
	return netip.AddrFrom16(g).String()
}

func pickDevice(name string) (*verbs.Device, error) {
	if name != "" {
		d, err := verbs.DeviceByName(name)
		if err != nil {
			return nil, fmt.Errorf("IB device %s not found", name)
		}
		return d, nil
	}
	devs, err := verbs.Devices()
	if err != nil {
		return nil, err
	}
	if len(devs) == 0 {
		return nil, errors.New("no IB devices found")
	}
	return devs[0], nil
}

// ppContext holds one side's verbs objects (struct pingpong_context).
type ppContext struct {
	ctx       *verbs.Context
	channel   *verbs.CompChannel
	pd        *verbs.PD
	mr        *verbs.MR
	cq        *verbs.CQ
	qp        *verbs.QP
	buf       []byte
	sendFlags verbs.SendFlags
	pending   int
}

func newContext(dev *verbs.Device, o Options) (*ppContext, error) {
	pp := &ppContext{buf: bytes.Repeat([]byte{fill}, o.Size), sendFlags: verbs.SendSignaled}
	if o.Check {
		markPages(pp.buf)
	}
	var err error
	if pp.ctx, err = dev.Open(); err != nil {
		return nil, fmt.Errorf("couldn't get context for %s: %w", dev.Name(), err)
	}
	fail := func(err error) (*ppContext, error) { pp.close(); return nil, err }
	if o.Events {
		if pp.channel, err = pp.ctx.CreateCompChannel(); err != nil {
			return fail(err)
		}
	}
	if pp.pd, err = pp.ctx.AllocPD(); err != nil {
		return fail(err)
	}
	if pp.mr, err = pp.pd.RegMR(pp.buf, verbs.AccessLocalWrite); err != nil {
		return fail(err)
	}
	if pp.cq, err = pp.ctx.CreateCQ(o.RxDepth+1, pp.channel, 0); err != nil {
		return fail(err)
	}
	init := &verbs.QPInitAttr{SendCQ: pp.cq, RecvCQ: pp.cq, QPType: verbs.QPTRC,
		Cap: verbs.QPCap{MaxSendWR: 1, MaxRecvWR: uint32(o.RxDepth), MaxSendSGE: 1, MaxRecvSGE: 1}}
	if pp.qp, err = pp.pd.CreateQP(init); err != nil {
		return fail(err)
	}
	if _, got, err := pp.qp.Query(); err == nil && int(got.Cap.MaxInlineData) >= o.Size {
		pp.sendFlags |= verbs.SendInline
	}
	err = pp.qp.Modify(&verbs.QPAttr{QPState: verbs.QPSInit, PortNum: o.IBPort},
		verbs.QPAttrState|verbs.QPAttrPKeyIndex|verbs.QPAttrPort|verbs.QPAttrAccessFlags)
	if err != nil {
		return fail(err)
	}
	return pp, nil
}

func (pp *ppContext) close() {
	if pp.qp != nil {
		pp.qp.Destroy()
	}
	if pp.cq != nil {
		pp.cq.Destroy()
	}
	if pp.mr != nil {
		pp.mr.Dereg()
	}
	if pp.pd != nil {
		pp.pd.Dealloc()
	}
	if pp.channel != nil {
		pp.channel.Close()
	}
	if pp.ctx != nil {
		pp.ctx.Close()
	}
}

// connect brings the QP to RTS towards rem, with ibv_rc_pingpong's
// attributes (pp_connect_ctx).
func (pp *ppContext) connect(o Options, my, rem *dest) error {
	attr := verbs.QPAttr{QPState: verbs.QPSRTR, PathMTU: o.MTU, DestQPNum: rem.qpn, RQPSN: rem.psn,
		MaxDestRdAtomic: 1, MinRNRTimer: 12,
		AHAttr: verbs.AHAttr{DLID: uint16(rem.lid), SL: o.SL, PortNum: o.IBPort}}
	if binary64(rem.gid[8:]) != 0 { // the GID's interface ID
		attr.AHAttr.IsGlobal = true
		attr.AHAttr.GRH = verbs.GlobalRoute{HopLimit: 1, DGID: rem.gid, SGIDIndex: uint8(max(o.GIDIndex, 0))}
	}
	err := pp.qp.Modify(&attr, verbs.QPAttrState|verbs.QPAttrAV|verbs.QPAttrPathMTU|verbs.QPAttrDestQPN|
		verbs.QPAttrRQPSN|verbs.QPAttrMaxDestRdAtomic|verbs.QPAttrMinRNRTimer)
	if err != nil {
		return fmt.Errorf("failed to modify QP to RTR: %w", err)
	}
	attr = verbs.QPAttr{QPState: verbs.QPSRTS, Timeout: 14, RetryCnt: 7, RNRRetry: 7, SQPSN: my.psn, MaxRdAtomic: 1}
	err = pp.qp.Modify(&attr, verbs.QPAttrState|verbs.QPAttrTimeout|verbs.QPAttrRetryCnt|verbs.QPAttrRNRRetry|
		verbs.QPAttrSQPSN|verbs.QPAttrMaxQPRdAtomic)
	if err != nil {
		return fmt.Errorf("failed to modify QP to RTS: %w", err)
	}
	return nil
}

func binary64(b []byte) uint64 {
	var v uint64
	for _, x := range b[:8] {
		v = v<<8 | uint64(x)
	}
	return v
}

func clientExchange(ctx context.Context, o Options, my *dest) (dest, error) {
	var d net.Dialer
	conn, err := d.DialContext(ctx, "tcp", net.JoinHostPort(o.Server, strconv.Itoa(o.Port)))
	if err != nil {
		return dest{}, fmt.Errorf("couldn't connect to %s:%d: %w", o.Server, o.Port, err)
	}
	defer conn.Close()
	conn.SetDeadline(time.Now().Add(60 * time.Second))
	if _, err := conn.Write(my.marshal()); err != nil {
		return dest{}, fmt.Errorf("couldn't send local address: %w", err)
	}
	msg := make([]byte, exchangeLen)
	if _, err := io.ReadFull(conn, msg); err != nil {
		return dest{}, fmt.Errorf("couldn't read remote address: %w", err)
	}
	if _, err := conn.Write([]byte("done\x00")); err != nil {
		return dest{}, fmt.Errorf("couldn't write done: %w", err)
	}
	return parseDest(msg)
}

func serverExchange(ctx context.Context, o Options, pp *ppContext, my *dest) (dest, error) {
	var lc net.ListenConfig
	ln, err := lc.Listen(ctx, "tcp", net.JoinHostPort("", strconv.Itoa(o.Port)))
	if err != nil {
		return dest{}, fmt.Errorf("couldn't listen to port %d: %w", o.Port, err)
	}
	stop := context.AfterFunc(ctx, func() { ln.Close() })
	conn, err := ln.Accept()
	stop()
	ln.Close()
	if err != nil {
		return dest{}, fmt.Errorf("accept() failed: %w", err)
	}
	defer conn.Close()
	conn.SetDeadline(time.Now().Add(60 * time.Second))
	msg := make([]byte, exchangeLen)
	if _, err := io.ReadFull(conn, msg); err != nil {
		return dest{}, fmt.Errorf("couldn't read remote address: %w", err)
	}
	rem, err := parseDest(msg)
	if err != nil {
		return dest{}, err
	}
	if err := pp.connect(o, my, &rem); err != nil {
		return dest{}, fmt.Errorf("couldn't connect to remote QP: %w", err)
	}
	if _, err := conn.Write(my.marshal()); err != nil {
		return dest{}, fmt.Errorf("couldn't send local address: %w", err)
	}
	// The client answers "done"; its closing the connection ends it too.
	io.ReadAtLeast(conn, msg, 1)
	return rem, nil
}

func (pp *ppContext) postRecv(n int) int {
	wr := []verbs.RecvWR{{WRID: recvWRID, SGList: []verbs.SGE{pp.mr.SGE(0, len(pp.buf))}}}
	for i := 0; i < n; i++ {
		if pp.qp.PostRecv(wr) != nil {
			return i
		}
	}
	return n
}

func (pp *ppContext) postSend() error {
	return pp.qp.PostSend([]verbs.SendWR{{WRID: sendWRID, Opcode: verbs.WRSend, SendFlags: pp.sendFlags,
		SGList: []verbs.SGE{pp.mr.SGE(0, len(pp.buf))}}})
}

// loop bounces the messages (the main loop of ibv_rc_pingpong).
// prepare posts rx_depth receives and, with -e, arms the CQ.
func (pp *ppContext) prepare(o Options) (int, error) {
	routs := pp.postRecv(o.RxDepth)
	if routs < o.RxDepth {
		return 0, fmt.Errorf("couldn't post receive (%d)", routs)
	}
	if o.Events {
		if err := pp.cq.ReqNotify(false); err != nil {
			return 0, err
		}
	}
	return routs, nil
}

func (pp *ppContext) loop(ctx context.Context, o Options, routs int) (time.Duration, error) {
	pp.pending = recvWRID
	if o.Server != "" {
		if err := pp.postSend(); err != nil {
			return 0, fmt.Errorf("couldn't post send: %w", err)
		}
		pp.pending |= sendWRID
	}
	start := time.Now()
	rcnt, scnt, events := 0, 0, 0
	wcs := make([]verbs.WC, 2)
	for rcnt < o.Iters || scnt < o.Iters {
		if o.Events {
			cq, err := pp.channel.GetCQEvent(ctx)
			if err != nil {
				return 0, fmt.Errorf("failed to get cq_event: %w", err)
			}
			events++
			if cq != pp.cq {
				return 0, errors.New("CQ event for unknown CQ")
			}
			if err := pp.cq.ReqNotify(false); err != nil {
				return 0, err
			}
		}
		ne, err := pp.cq.Poll(wcs)
		if err != nil {
			return 0, fmt.Errorf("poll CQ failed: %w", err)
		}
		if ne == 0 && !o.Events {
			if err := pp.cq.Wait(ctx); err != nil {
				return 0, err
			}
			continue
		}
		for _, wc := range wcs[:ne] {
			if wc.Status != verbs.WCSuccess {
				return 0, fmt.Errorf("failed status %s (%d) for wr_id %d", wc.Status, wc.Status, wc.WRID)
			}
			switch wc.WRID {
			case sendWRID:
				scnt++
			case recvWRID:
				if o.Check {
					if err := checkData(pp.buf[:wc.ByteLen], o.Size); err != nil {
						return 0, err
					}
				}
				routs--
				if routs <= 1 {
					routs += pp.postRecv(o.RxDepth - routs)
					if routs < o.RxDepth {
						return 0, fmt.Errorf("couldn't post receive (%d)", routs)
					}
				}
				rcnt++
			default:
				return 0, fmt.Errorf("completion for unknown wr_id %d", wc.WRID)
			}
			pp.pending &^= int(wc.WRID)
			if scnt < o.Iters && pp.pending == 0 {
				if err := pp.postSend(); err != nil {
					return 0, fmt.Errorf("couldn't post send: %w", err)
				}
				pp.pending = recvWRID | sendWRID
			}
		}
	}
	elapsed := time.Since(start)
	if o.Events {
		pp.cq.AckEvents(events)
	}
	return elapsed, nil
}

// pageSize is the unit of ibv_rc_pingpong's -c marks.
var pageSize = os.Getpagesize()

// markPages writes ibv_rc_pingpong's -c pattern: the first byte of every
// page holds the page number modulo sizeof(char), which is to say 0, over
// the 0x7b every buffer starts with.
func markPages(b []byte) {
	for i := 0; i < len(b); i += pageSize {
		b[i] = 0
	}
}

// checkData verifies a received message against the -c pattern.
func checkData(b []byte, size int) error {
	if len(b) != size {
		return fmt.Errorf("received %d bytes, expected %d", len(b), size)
	}
	for i, v := range b {
		want := byte(fill)
		if i%pageSize == 0 {
			want = 0
		}
		if v != want {
			return fmt.Errorf("invalid data in page %d: byte %d is 0x%02x, expected 0x%02x", i/pageSize, i, v, want)
		}
	}
	return nil
}
