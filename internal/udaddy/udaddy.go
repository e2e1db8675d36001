// Package udaddy is the engine of `rdmago udaddy`, a port of rdma-core's
// udaddy (librdmacm/examples/udaddy.c): datagrams over UD QPs whose peers
// find each other through the connection manager's UDP port space, so that
// either side may be rdma-core's program.
//
// The server binds port 7174 (on -b's address, or every address) in
// RDMA_PS_UDP and listens. A client resolves the server's address and
// route and connects, which sends a SIDR_REQ; the server answers each
// CONNECT_REQUEST by creating a UD QP, posting Count receives of Size
// bytes plus the 40-byte GRH area, and accepting with its QP number (a
// SIDR_REP). The client's ESTABLISHED event carries the server's QP
// number, Q_Key and address, from which it makes an address handle; it
// then sends Count SEND_WITH_IMM datagrams of Size bytes, the immediate
// holding its own QP number. The server takes Count receive completions,
// makes its reply address handle from the first (ibv_create_ah_from_wc),
// and sends Count replies back, which the client receives. Both print
// udaddy's lines:
//
//	udaddy: starting server            udaddy: starting client
//	receiving data transfers           udaddy: connecting
//	sending replies                    initiating data transfers
//	data transfers complete            receiving data transfers
//	test complete                      data transfers complete
//	return status 0                    test complete
//	                                   return status 0
//
// What differs from udaddy.c, none of it on the wire: where the C program
// would wait for ever for datagrams that were lost or a peer that died,
// this one gives up after Options.Idle without a completion, saying how
// many arrived; an interrupt ends a run with status 130; -h prints the
// usage with status 0.
package udaddy

import (
	"context"
	"fmt"
	"io"
	"net/netip"
	"strings"
	"time"

	"github.com/rdmago/rdmago/internal/cmatest"
	"github.com/rdmago/rdmago/internal/getopt"
	"github.com/rdmago/rdmago/internal/tool"
	"github.com/rdmago/rdmago/rdmacm"
	"github.com/rdmago/rdmago/verbs"
)

// grhLen is the room a UD receive buffer keeps for the GRH (struct ibv_grh).
const grhLen = 40

// Options are udaddy's settings.
type Options struct {
	Server      string // -s: the server to connect to; empty runs a server
	Bind        string // -b: the local address to bind
	Connections int    // -c
	Count       int    // -C: datagrams each way per connection
	Size        int    // -S: bytes per datagram
	TOS         int    // -t: type of service, or -1
	Port        string // udaddy's port, 7174
	PortSpace   rdmacm.PortSpace
	// Idle is how long a side waits without any completion or connection
	// event before it gives up (udaddy.c waits for ever).
	Idle time.Duration

	listening func() // tests: called once the server listens
}

// Defaults returns udaddy's defaults.
func Defaults() Options {
	return Options{Connections: 1, Count: 10, Size: 100, TOS: -1, Port: "7174", PortSpace: rdmacm.PSUDP, Idle: 10 * time.Second}
}

// Usage prints udaddy's usage.
func Usage(w io.Writer) {
	fmt.Fprint(w, `usage: udaddy
	[-s server_address]
	[-b bind_address]
	[-f address_format]
	    name, ip, ipv6, or gid
	[-P port_space]
	    udp or ipoib
	[-c connections]
	[-C message_count]
	[-S message_size]
	[-t type_of_service]
	[-p port_space - 0x111 for UDP (default), 0x2 for IPOIB]
`)
}

// ParseArgs parses udaddy's flags ("s:b:c:C:S:t:p:P:f:"). Unlike the C
// program, which reads numbers with atoi, a number that does not parse or
// is out of range is an error naming the flag.
func ParseArgs(args []string, stdout, stderr io.Writer) (Options, error) {
	o := Defaults()
	f, opts, err := cmatest.Parse("udaddy", args, "s:b:c:C:S:t:p:P:f:", Usage, stdout, stderr)
	if err != nil {
		return o, err
	}
	num := func(op getopt.Option, min, max int) (int, error) { return cmatest.Number(op.Arg, min, max) }
	for _, op := range opts {
		var err error
		switch op.Name {
		case 's':
			o.Server = op.Arg
		case 'b':
			o.Bind = op.Arg
		case 'c':
			o.Connections, err = num(op, 1, 1024)
		case 'C':
			o.Count, err = num(op, 0, 1<<16)
		case 'S':
			o.Size, err = num(op, 0, 1<<20)
		case 't':
			o.TOS, err = num(op, 0, 255)
		case 'p':
			var n int
			n, err = num(op, 0, 0xffff)
			o.PortSpace = rdmacm.PortSpace(n)
		case 'P':
			switch {
			case strings.HasPrefix(strings.ToLower(op.Arg), "ipoib"):
				o.PortSpace = rdmacm.PSIPoIB
			case !strings.HasPrefix(strings.ToLower(op.Arg), "udp"):
				fmt.Fprintln(stderr, "Warning: unknown port space format")
			}
		case 'f':
			a := strings.ToLower(op.Arg)
			switch {
			case strings.HasPrefix(a, "gid"):
				return o, f.Bad("f", op.Arg, "GID addresses (AF_IB) need InfiniBand; RoCE uses IP addresses")
			case !strings.HasPrefix(a, "ip") && !strings.HasPrefix(a, "name"):
				fmt.Fprintln(stderr, "Warning: unknown address format")
			}
		}
		if err != nil {
			return o, f.Bad(string(op.Name), op.Arg, err.Error())
		}
	}
	if o.PortSpace != rdmacm.PSUDP && o.PortSpace != rdmacm.PSIPoIB {
		return o, f.Bad("p", fmt.Sprintf("%#x", uint16(o.PortSpace)), "udaddy needs a datagram port space: 0x111 (UDP) or 0x2 (IPoIB)")
	}
	if o.Size == 0 {
		o.Count = 0
	}
	return o, nil
}

// node is one connection (struct cmatest_node).
type node = cmatest.Node

type runner struct {
	o      Options
	out    io.Writer
	ch     *rdmacm.EventChannel
	nodes  []*node
	left   int // connects_left
	failed bool
}

// Run runs udaddy: a client if o.Server is set, a server otherwise.
// Its lines go to stdout; the status line is printed last.
func Run(ctx context.Context, o Options, stdout, stderr io.Writer) error {
	r := &runner{o: o, out: stdout, left: o.Connections}
	ch, err := rdmacm.CreateEventChannel()
	if err != nil {
		fmt.Fprintf(stderr, "udaddy: failed to create event channel: %v\n", err)
		return tool.Failf("%v", err)
	}
	r.ch = ch
	if o.Server != "" {
		err = r.client(ctx)
	} else {
		err = r.server(ctx)
	}
	return cmatest.Finish(ctx, "udaddy", err, stdout, stderr, func() {
		r.destroy()
		ch.Close()
	})
}

func (r *runner) addrInfo(passive bool) (*rdmacm.AddrInfo, error) {
	hints := rdmacm.AddrInfo{PortSpace: r.o.PortSpace, QPType: verbs.QPTUD}
	node := r.o.Server
	if passive {
		hints.Flags = rdmacm.RAIPassive
		node = r.o.Bind
	} else if r.o.Bind != "" {
		src, err := netip.ParseAddr(r.o.Bind)
		if err != nil {
			return nil, fmt.Errorf("-b %s: %w", r.o.Bind, err)
		}
		hints.SrcAddr = netip.AddrPortFrom(src, 0)
	}
	res, err := rdmacm.GetAddrInfo(node, r.o.Port, &hints)
	if err != nil {
		return nil, fmt.Errorf("getaddrinfo error: %w", err)
	}
	return res[0], nil
}

func (r *runner) server(ctx context.Context) error {
	fmt.Fprintln(r.out, "udaddy: starting server")
	listen, err := rdmacm.CreateID(r.ch, nil, r.o.PortSpace)
	if err != nil {
		return fmt.Errorf("listen request failed: %w", err)
	}
	defer listen.Destroy()
	ai, err := r.addrInfo(true)
	if err != nil {
		return err
	}
	if err := listen.BindAddr(ai.SrcAddr); err != nil {
		return fmt.Errorf("bind address failed: %w", err)
	}
	if err := listen.Listen(0); err != nil {
		return fmt.Errorf("failure trying to listen: %w", err)
	}
	if r.o.listening != nil {
		r.o.listening()
	}
	if err := r.connectEvents(ctx); err != nil {
		return err
	}
	if r.o.Count == 0 {
		return nil
	}
	fmt.Fprintln(r.out, "receiving data transfers")
	if err := r.pollCQs(ctx, "datagrams received"); err != nil {
		return err
	}
	fmt.Fprintln(r.out, "sending replies")
	for _, n := range r.nodes {
		if err := r.postSends(n, verbs.SendSignaled); err != nil {
			return err
		}
	}
	if err := r.pollCQs(ctx, "replies sent"); err != nil {
		return err
	}
	fmt.Fprintln(r.out, "data transfers complete")
	return nil
}

func (r *runner) client(ctx context.Context) error {
	fmt.Fprintln(r.out, "udaddy: starting client")
	ai, err := r.addrInfo(false)
	if err != nil {
		return err
	}
	fmt.Fprintln(r.out, "udaddy: connecting")
	for range r.o.Connections {
		id, err := rdmacm.CreateID(r.ch, nil, r.o.PortSpace)
		if err != nil {
			return fmt.Errorf("unable to create ID: %w", err)
		}
		n := &node{ID: id}
		id.SetContext(n)
		r.nodes = append(r.nodes, n)
		if err := id.ResolveAddr(ai.SrcAddr, ai.DstAddr, 2*time.Second); err != nil {
			return fmt.Errorf("failure getting addr: %w", err)
		}
	}
	if err := r.connectEvents(ctx); err != nil {
		return err
	}
	if r.failed {
		return tool.Failf("connecting failed")
	}
	if r.o.Count == 0 {
		return nil
	}
	fmt.Fprintln(r.out, "initiating data transfers")
	for _, n := range r.nodes {
		if err := r.postSends(n, 0); err != nil {
			return err
		}
	}
	fmt.Fprintln(r.out, "receiving data transfers")
	if err := r.pollCQs(ctx, "replies received"); err != nil {
		return err
	}
	fmt.Fprintln(r.out, "data transfers complete")
	return nil
}

// connectEvents handles connection manager events until every connection
// is made or has failed (connect_events).
func (r *runner) connectEvents(ctx context.Context) error {
	return cmatest.ConnectEvents(ctx, r.ch, r.o.Idle, &r.left, r.handle, func() error {
		if r.o.Server == "" && len(r.nodes) == 0 {
			return nil // a server waits for its clients as long as it is left running, as udaddy's does
		}
		return fmt.Errorf("no connection manager event in %v: %d of %d connections made", r.o.Idle, r.o.Connections-r.left, r.o.Connections)
	})
}

// handle is cma_handler.
func (r *runner) handle(ev *rdmacm.Event) error {
	n, _ := ev.ID.Context().(*node)
	switch ev.Type {
	case rdmacm.EventAddrResolved:
		if r.o.TOS >= 0 {
			if err := ev.ID.SetTOS(uint8(r.o.TOS)); err != nil {
				fmt.Fprintf(r.out, "udaddy: set TOS option failed: %v\n", err)
			}
		}
		if err := ev.ID.ResolveRoute(2 * time.Second); err != nil {
			r.connectError()
			return fmt.Errorf("resolve route failed: %w", err)
		}
	case rdmacm.EventRouteResolved:
		if err := r.initNode(n); err != nil {
			r.connectError()
			return err
		}
		if err := n.ID.Connect(&rdmacm.ConnParam{}); err != nil {
			r.connectError()
			return fmt.Errorf("failure connecting: %w", err)
		}
	case rdmacm.EventConnectRequest:
		return r.connectHandler(ev.ID)
	case rdmacm.EventEstablished:
		ah, err := n.PD.CreateAH(&ev.UD.AHAttr)
		if err != nil {
			r.connectError()
			return fmt.Errorf("failure creating address handle: %w", err)
		}
		n.AH, n.RemoteQPN, n.QKey = ah, ev.UD.QPNum, ev.UD.QKey
		n.Connected = true
		r.left--
	case rdmacm.EventAddrError, rdmacm.EventRouteError, rdmacm.EventConnectError, rdmacm.EventUnreachable, rdmacm.EventRejected:
		fmt.Fprintf(r.out, "udaddy: event: %s, error: %d\n", ev.Type, ev.Status)
		r.connectError()
		r.failed = true
		if err := ev.Err(); err != nil {
			return err
		}
	}
	return nil
}

func (r *runner) connectError() { r.left-- }

// connectHandler accepts a request (connect_handler).
func (r *runner) connectHandler(id *rdmacm.ID) error {
	if len(r.nodes) == r.o.Connections {
		fmt.Fprintln(r.out, "udaddy: failing connection request")
		id.Reject(nil)
		return nil
	}
	n := &node{ID: id}
	id.SetContext(n)
	r.nodes = append(r.nodes, n)
	if err := r.initNode(n); err != nil {
		r.connectError()
		fmt.Fprintln(r.out, "udaddy: failing connection request")
		id.Reject(nil)
		return err
	}
	if err := id.Accept(&rdmacm.ConnParam{QPNum: id.QP().Num()}); err != nil {
		r.connectError()
		return fmt.Errorf("failure accepting: %w", err)
	}
	n.Connected = true
	r.left--
	return nil
}

// initNode checks the message size against the path MTU and creates the
// node's PD, CQ, QP and buffer, and posts its receives (verify_test_params,
// init_node, post_recvs).
func (r *runner) initNode(n *node) error {
	if err := n.InitUD(r.o.Count, r.o.Size); err != nil {
		return err
	}
	if r.o.Count == 0 {
		return nil
	}
	// Each receive has a slot of its own, where udaddy.c lets them all
	// land on one buffer: the reply address handle is made from the first
	// datagram's GRH while later ones may still arrive.
	slot := r.o.Size + grhLen
	var err error
	if n.MR, err = n.PD.RegMR(make([]byte, slot*r.o.Count), verbs.AccessLocalWrite); err != nil {
		return fmt.Errorf("failed to reg MR: %w", err)
	}
	for i := range r.o.Count {
		recv := []verbs.RecvWR{{WRID: uint64(i), SGList: []verbs.SGE{n.MR.SGE(i*slot, slot)}}}
		if err := n.ID.QP().PostRecv(recv); err != nil {
			return fmt.Errorf("failed to post receives: %w", err)
		}
	}
	return nil
}

// postSends posts Count SEND_WITH_IMM datagrams carrying the local QP
// number (post_sends).
func (r *runner) postSends(n *node, flags verbs.SendFlags) error {
	if !n.Connected || r.o.Count == 0 {
		return nil
	}
	wr := []verbs.SendWR{n.SendWR(r.o.Size, flags)}
	for range r.o.Count {
		if err := n.ID.QP().PostSend(wr); err != nil {
			return fmt.Errorf("failed to post sends: %w", err)
		}
	}
	return nil
}

// pollCQs takes Count completions from each connected node's CQ, making
// the reply address handle from the first one where there is none yet
// (poll_cqs, create_reply_ah). It gives up after Idle without one.
func (r *runner) pollCQs(ctx context.Context, what string) error {
	wc := make([]verbs.WC, 8)
	for _, n := range r.nodes {
		if !n.Connected {
			continue
		}
		last := time.Now()
		for done := 0; done < r.o.Count; {
			k, err := n.CQ.Poll(wc)
			if err != nil {
				return fmt.Errorf("failed polling CQ: %w", err)
			}
			if k == 0 {
				if err := ctx.Err(); err != nil {
					return err
				}
				if time.Since(last) > r.o.Idle {
					return fmt.Errorf("no completion in %v: %d of %d %s", r.o.Idle, done, r.o.Count, what)
				}
				time.Sleep(20 * time.Microsecond)
				continue
			}
			last = time.Now()
			for _, c := range wc[:k] {
				if c.Status != verbs.WCSuccess {
					return fmt.Errorf("completion with status %s (%d)", c.Status, int(c.Status))
				}
			}
			if n.AH == nil {
				if err := r.replyAH(n, &wc[0]); err != nil {
					return fmt.Errorf("failed to create reply AH: %w", err)
				}
			}
			done += k
		}
	}
	return nil
}

func (r *runner) replyAH(n *node, wc *verbs.WC) error {
	off := int(wc.WRID) * (r.o.Size + grhLen)
	ah, err := n.PD.CreateAHFromWC(wc, n.MR.Buf()[off:off+grhLen], n.ID.PortNum())
	if err != nil {
		return err
	}
	attr, _, err := n.ID.QP().Query()
	if err != nil {
		return err
	}
	n.AH, n.RemoteQPN, n.QKey = ah, wc.ImmData, attr.QKey
	return nil
}

// destroy releases every node's resources (destroy_nodes).
func (r *runner) destroy() {
	for _, n := range r.nodes {
		n.Destroy()
	}
}
