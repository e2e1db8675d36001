// Package pingpong is the engine of rdmago's ping-pong tools, ports of the
// example programs of rdma-core's libibverbs (as of rdma-core 44) that are
// flag- and wire-compatible with them:
//
//	rdmago rc_pingpong   ibv_rc_pingpong   one RC QP
//	rdmago uc_pingpong   ibv_uc_pingpong   one UC QP
//	rdmago ud_pingpong   ibv_ud_pingpong   one UD QP, Q_Key 0x11111111, an address handle
//	rdmago srq_pingpong  ibv_srq_pingpong  -q RC QPs (16) whose receives come from one SRQ
//
// The transport is Options.Transport. All four tools run the same way. The
// server listens on TCP port 18515; the client connects and the two swap
// their addresses as 52-byte "LID:QPN:PSN:GID" strings (NUL included),
// client first: one string each way, except srq_pingpong, which always
// sends 256, one per possible QP, all-zero past the QPs it uses. The server
// brings its QPs up towards the client's before answering, the client after
// reading the answer; then the client sends a message of Size bytes on each
// QP, each side answers every message it receives on the QP it came in on
// once its previous send there has completed, until Iters messages have
// gone each way (in total, over all QPs), and each prints the lines the C
// programs print:
//
//	  local address:  LID 0x0000, QPN 0x000011, PSN 0x3c62a1, GID ::ffff:10.77.0.1
//	  remote address: LID 0x0000, QPN 0x000011, PSN 0x8a0c1e, GID ::ffff:10.77.0.11
//	8192000 bytes in 1.23 seconds = 53.28 Mbit/sec
//	1000 iters in 1.23 seconds = 1230.00 usec/iter
//
// (ibv_ud_pingpong writes "PSN 0x3c62a1: GID" in its local line, and so
// does rdmago ud_pingpong.) Either side may be the rdma-core program on
// Linux Soft-RoCE or on a RoCE NIC, or another rdmago.
//
// With Check (-c) the message buffer is filled with 0x7b (zeros for SRQ,
// whose C version zeroes it) with a 0 in the first byte of every page, as
// the C client writes it before its first send, and every message received
// is checked against that pattern: a mismatch ends the run with an error.
// The C programs check only the first byte of each page, once, on the server
// after the run, and print "invalid data in page N" without failing;
// rdmago's check is stricter but accepts exactly what they send, so -c on
// both sides interoperates.
//
// Unlike the C programs, which send from and receive into one buffer, Run
// keeps the message it sends apart from the memory it receives into, and
// srq_pingpong gives each posted receive memory of its own (RxDepth × Size
// bytes), so that no two QPs write the same memory at once: what the peer
// sees is the same.
package pingpong

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"net/netip"
	"time"

	"github.com/rdmago/rdmago/internal/tool"
	"github.com/rdmago/rdmago/verbs"
)

// Transport chooses which of the four tools Run plays.
type Transport int

const (
	RC  Transport = iota // ibv_rc_pingpong: one reliable-connected QP
	UC                   // ibv_uc_pingpong: one unreliable-connected QP
	UD                   // ibv_ud_pingpong: one unreliable-datagram QP
	SRQ                  // ibv_srq_pingpong: NumQP RC QPs sharing a receive queue
)

// String returns the transport's short name: "rc", "uc", "ud" or "srq".
func (t Transport) String() string {
	switch t {
	case RC:
		return "rc"
	case UC:
		return "uc"
	case UD:
		return "ud"
	case SRQ:
		return "srq"
	}
	return fmt.Sprintf("Transport(%d)", int(t))
}

// Tool returns the name of the rdma-core program the transport mirrors,
// such as "ibv_ud_pingpong".
func (t Transport) Tool() string { return "ibv_" + t.String() + "_pingpong" }

// Options are the flags of the ibv_*_pingpong programs.
type Options struct {
	Transport Transport // which program: RC (the zero value), UC, UD or SRQ
	Server    string    // the server's host name for the client; empty for the server side
	Port      int       // -p: TCP port of the exchange (18515; a server's 0: any, told to Notice)
	Device    string    // -d: device name (default: the first device)
	IBPort    uint8     // -i: device port (1)
	Size      int       // -s: message size (4096; UD: 1024, at most the port's active MTU)
	MTU       verbs.MTU // -m: path MTU of RC, UC and SRQ QPs (1024; UD has no -m)
	NumQP     int       // -q: QPs of SRQ (16, at most 255 and RxDepth); the others use one
	RxDepth   int       // -r: receives posted at a time (500)
	Iters     int       // -n: messages each way (1000)
	SL        uint8     // -l: service level
	Events    bool      // -e: sleep on CQ events instead of polling
	GIDIndex  int       // -g: local GID index (-1: none, as on InfiniBand; RoCE needs one)
	Check     bool      // -c: check the data received
	// Dev, if set, is the device to use instead of looking Device up
	// among verbs.Devices (for programs that made their own with
	// rxe.NewDevice).
	Dev *verbs.Device
	// Notice, if set, is told what Run chose for the user (the GID index
	// when none was given, the port a server listens on for Port 0).
	Notice io.Writer
	// Idle is how long a side waits for a completion before it decides
	// that the peer has stopped answering and fails (0: for ever, as the
	// C programs wait). DefaultsFor sets DefaultIdle.
	Idle time.Duration
	// Listener, if set, is where the server accepts the exchange
	// connection instead of listening on Port (Run closes it). The
	// client ignores it.
	Listener net.Listener
}

// linger is how long an RC side keeps its QPs after its last completion.
const linger = 300 * time.Millisecond

// DefaultIdle is how long a side waits for a completion before it gives
// up on its peer: long beside any round trip, even over an emulated link
// with losses, short beside a person's patience.
const DefaultIdle = 10 * time.Second

// Defaults returns ibv_rc_pingpong's defaults.
func Defaults() Options { return DefaultsFor(RC) }

// DefaultsFor returns the defaults of t's program: those of
// ibv_rc_pingpong, with a size of 1024 for UD (ibv_ud_pingpong's usage
// text says 2048, its code 1024) and 16 QPs for SRQ.
func DefaultsFor(t Transport) Options {
	o := Options{Transport: t, Port: 18515, IBPort: 1, Size: 4096, MTU: verbs.MTU1024, NumQP: 1,
		RxDepth: 500, Iters: 1000, GIDIndex: -1, Idle: DefaultIdle}
	switch t {
	case UD:
		o.Size = 1024
	case SRQ:
		o.NumQP = 16
	}
	return o
}

// Result is what the run measured.
type Result struct {
	Bytes   int64 // Size × Iters × 2: both directions
	Elapsed time.Duration
}

// maxQP is MAX_QP of ibv_srq_pingpong: it handles fewer QPs than this and
// always exchanges this many addresses.
const maxQP = 256

// numQP returns how many QPs the run uses.
func (o *Options) numQP() int {
	if o.Transport == SRQ {
		return o.NumQP
	}
	return 1
}

// exchangeCount returns how many address strings each side sends.
func (o *Options) exchangeCount() int {
	if o.Transport == SRQ {
		return maxQP
	}
	return 1
}

func (o *Options) validate() error {
	switch {
	case o.Transport < RC || o.Transport > SRQ:
		return fmt.Errorf("unknown transport %d", int(o.Transport))
	case o.Size < 1:
		return fmt.Errorf("message size %d: must be at least 1", o.Size)
	case o.RxDepth < 1:
		return fmt.Errorf("rx depth %d: must be at least 1", o.RxDepth)
	case o.Iters < 1:
		return fmt.Errorf("iters %d: must be at least 1", o.Iters)
	case o.IBPort < 1:
		return errors.New("IB port 0: ports start at 1")
	case o.Port < 0 || o.Port > 65535:
		return fmt.Errorf("TCP port %d: must be 0 to 65535", o.Port)
	case o.Port == 0 && o.Server != "":
		return errors.New("TCP port 0: the client needs the port the server listens on")
	}
	if o.Transport == SRQ {
		if o.NumQP < 1 || o.NumQP >= maxQP {
			return fmt.Errorf("num_qp %d must be 1 to %d", o.NumQP, maxQP-1)
		}
		if o.NumQP > o.RxDepth {
			return fmt.Errorf("rx_depth %d is too small for %d QPs -- must have at least one receive per QP", o.RxDepth, o.NumQP)
		}
	}
	if o.Transport != UD && o.MTU.Bytes() == 0 {
		return fmt.Errorf("path MTU %d: must be 256, 512, 1024, 2048 or 4096", o.MTU)
	}
	return nil
}

// Run plays one side of the ibv_*_pingpong program o.Transport names,
// writing its lines to out.
func Run(ctx context.Context, out io.Writer, o Options) (Result, error) {
	var res Result
	if o.Listener != nil && o.Server == "" {
		defer o.Listener.Close()
	}
	if err := o.validate(); err != nil {
		return res, err
	}
	dev := o.Dev
	if dev == nil {
		var err error
		if dev, err = tool.Device(o.Device); err != nil {
			return res, err
		}
	}
	pp, err := newContext(dev, &o)
	if err != nil {
		return res, err
	}
	defer pp.close()

	// Post the receives and arm the CQ before the exchange, as the C
	// programs do: the peer may send as soon as it knows us, and a
	// completion that lands before the CQ is armed raises no event.
	routs, err := pp.prepare()
	if err != nil {
		return res, err
	}
	port, err := pp.ctx.QueryPort(o.IBPort)
	if err != nil {
		return res, err
	}
	if o.GIDIndex < 0 && port.LinkLayer == verbs.LinkLayerEthernet {
		// RoCE needs a GID, and the C programs fail without -g. Take the
		// device's IPv4 address, as the out-of-band exchange usually
		// runs over IPv4, or else its first GID, and say so.
		if o.GIDIndex, err = pickGID(pp.ctx, o.IBPort, port.GIDTblLen); err != nil {
			return res, err
		}
		if o.Notice != nil {
			g, _ := pp.ctx.QueryGID(o.IBPort, o.GIDIndex)
			fmt.Fprintf(o.Notice, "no -g given: using GID index %d (%s) of this RoCE port\n", o.GIDIndex, gidString(g))
		}
	}
	my := make([]dest, len(pp.qps))
	for i, qp := range pp.qps {
		my[i] = dest{lid: uint32(port.LID), qpn: qp.Num(), psn: rand.Uint32() & 0xffffff}
		if o.Transport != UD && port.LinkLayer != verbs.LinkLayerEthernet && my[i].lid == 0 {
			return res, errors.New("couldn't get local LID")
		}
		if o.GIDIndex >= 0 {
			if my[i].gid, err = pp.ctx.QueryGID(o.IBPort, o.GIDIndex); err != nil {
				return res, fmt.Errorf("could not get local gid for gid index %d: %w", o.GIDIndex, err)
			}
		}
		sep := ","
		if o.Transport == UD {
			sep = ":" // sic, as ibv_ud_pingpong prints it
		}
		fmt.Fprintf(out, "  local address:  LID 0x%04x, QPN 0x%06x, PSN 0x%06x%s GID %s\n",
			my[i].lid, my[i].qpn, my[i].psn, sep, gidString(my[i].gid))
	}

	var rem []dest
	if o.Server != "" {
		rem, err = clientExchange(ctx, &o, my)
	} else {
		rem, err = serverExchange(ctx, &o, my, func(rem []dest) error { return pp.connect(my, rem) })
	}
	if err != nil {
		return res, err
	}
	for _, r := range rem {
		fmt.Fprintf(out, "  remote address: LID 0x%04x, QPN 0x%06x, PSN 0x%06x, GID %s\n", r.lid, r.qpn, r.psn, gidString(r.gid))
	}
	if o.Server != "" {
		if err := pp.connect(my, rem); err != nil {
			return res, err
		}
	}
	elapsed, err := pp.loop(ctx, routs, rem)
	if err != nil {
		return res, err
	}
	if o.Transport == RC || o.Transport == SRQ {
		// Keep the QPs a moment before destroying them, as TCP keeps a
		// closed connection in TIME_WAIT: if our last ACK was lost, the
		// peer resends its last message, and a QP that still exists
		// acknowledges it again. Without this the peer, retrying for ever
		// (retry_cnt 7), never finishes.
		select {
		case <-time.After(linger):
		case <-ctx.Done():
		}
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

// pickGID returns the index of the port's first IPv4 GID, or 0.
func pickGID(ctx *verbs.Context, port uint8, n int) (int, error) {
	for i := range n {
		g, err := ctx.QueryGID(port, i)
		if err != nil {
			return 0, fmt.Errorf("could not get local gid for gid index %d: %w", i, err)
		}
		if g.Addr().Is4() {
			return i, nil
		}
	}
	if n == 0 {
		return 0, errors.New("the port has no GID: RoCE needs one")
	}
	return 0, nil
}
