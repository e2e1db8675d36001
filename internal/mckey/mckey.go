// Package mckey is the engine of `rdmago mckey`, a port of rdma-core's
// mckey (librdmacm/examples/mckey.c): UD datagrams to a multicast group
// that every side joins through the connection manager
// (rdma_join_multicast), so that either side may be rdma-core's program.
//
// Each side makes -c IDs in RDMA_PS_UDP, binds them to -b's address if
// given, and resolves the group's address (-m), which picks the device.
// On ADDR_RESOLVED it makes a UD QP (and a receiver posts -C receives of
// -S bytes plus the 40-byte GRH area), then joins the group, as a
// send-only full member with -o. The MULTICAST_JOIN event gives the
// address vector, QP number (0xFFFFFF) and Q_Key to send to the group
// with. After a pause of three seconds, which mckey leaves for a subnet
// manager to program switches, a sender (-s) sends -C SEND_WITH_IMM
// datagrams of -S bytes on each ID, the immediate holding its QP number,
// and a receiver takes -C completions on each. Both then leave the
// group. The lines printed are mckey's:
//
//	mckey: starting server                           mckey: starting client
//	mckey: joining                                   mckey: joining
//	mckey: joined dgid: ::ffff:239.1.1.1 mlid 0x0 sl 0   (likewise)
//	receiving data transfers                         initiating data transfers
//	data transfers complete                          data transfers complete
//	test complete                                    test complete
//	return status 0                                  return status 0
//
// What differs from mckey.c, none of it on the wire: a receiver gives up
// after Options.Idle without a datagram, saying how many arrived, where
// mckey waits for ever (a datagram to a group can be lost); the sender's
// last datagram is signaled and waited for, so that destroying the QP
// cannot discard datagrams still queued; -M (an AF_IB group) is refused,
// as RoCE uses IP addresses; numbers that do not parse are errors; an
// interrupt ends a run with status 130.
package mckey

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/netip"
	"time"

	"github.com/rdmago/rdmago/internal/cmatest"
	"github.com/rdmago/rdmago/internal/getopt"
	"github.com/rdmago/rdmago/internal/tool"
	"github.com/rdmago/rdmago/rdmacm"
	"github.com/rdmago/rdmago/verbs"
)

// grhLen is the room a UD receive buffer keeps for the GRH.
const grhLen = verbs.GRHLen

// Options are mckey's settings.
type Options struct {
	Group       string // -m: the multicast group's address
	Sender      bool   // -s
	Bind        string // -b: the local address to bind
	Connections int    // -c
	Count       int    // -C: datagrams per connection
	Size        int    // -S: bytes per datagram
	PortSpace   rdmacm.PortSpace
	SendOnly    bool // -o: join as a send-only full member
	NoLoopback  bool // -l: IBV_QP_CREATE_BLOCK_SELF_MCAST_LB
	// Pause is how long a side waits after joining before it sends or
	// receives (mckey.c sleeps 3 s for the subnet manager).
	Pause time.Duration
	// Idle is how long a receiver waits without a datagram before it
	// gives up (mckey.c waits for ever).
	Idle time.Duration

	joined func() // tests: called once every ID has joined
}

// Defaults returns mckey's defaults.
func Defaults() Options {
	return Options{Connections: 1, Count: 10, Size: 100, PortSpace: rdmacm.PSUDP, Pause: 3 * time.Second, Idle: 10 * time.Second}
}

// Usage prints mckey's usage.
func Usage(w io.Writer) {
	fmt.Fprint(w, `usage: mckey
	-m multicast_address
	[-M unmapped_multicast_address]
	 replaces -m and requires -b
	[-s(ender)]
	[-b bind_address]
	[-c connections]
	[-C message_count]
	[-S message_size]
	[-p port_space - 0x111 for UDP (default), 0x2 for IPOIB]
	[-o join as a send-only full-member]
	[-l join without multicast loopback]
`)
}

// ParseArgs parses mckey's flags ("m:M:sb:c:C:S:p:ol").
func ParseArgs(args []string, stdout, stderr io.Writer) (Options, error) {
	o := Defaults()
	f, opts, err := cmatest.Parse("mckey", args, "m:M:sb:c:C:S:p:ol", Usage, stdout, stderr)
	if err != nil {
		return o, err
	}
	num := func(op getopt.Option, min, max int) (int, error) { return cmatest.Number(op.Arg, min, max) }
	for _, op := range opts {
		var err error
		switch op.Name {
		case 'm':
			o.Group = op.Arg
		case 'M':
			return o, f.Bad("M", op.Arg, "unmapped (AF_IB) multicast addresses need InfiniBand; RoCE uses IP groups (-m)")
		case 's':
			o.Sender = true
		case 'b':
			o.Bind = op.Arg
		case 'c':
			o.Connections, err = num(op, 1, 1024)
		case 'C':
			o.Count, err = num(op, 0, 1<<16)
		case 'S':
			o.Size, err = num(op, 0, 1<<20)
		case 'p':
			var n int
			n, err = num(op, 0, 0xffff)
			o.PortSpace = rdmacm.PortSpace(n)
		case 'o':
			o.SendOnly = true
		case 'l':
			o.NoLoopback = true
		}
		if err != nil {
			return o, f.Bad(string(op.Name), op.Arg, err.Error())
		}
	}
	if o.Group == "" {
		fmt.Fprintln(stderr, "mckey: -m multicast_address is required")
		Usage(stdout)
		return o, tool.Failf("no multicast address")
	}
	if o.PortSpace != rdmacm.PSUDP && o.PortSpace != rdmacm.PSIPoIB {
		return o, f.Bad("p", fmt.Sprintf("%#x", uint16(o.PortSpace)), "mckey needs a datagram port space: 0x111 (UDP) or 0x2 (IPoIB)")
	}
	if o.Size == 0 {
		o.Count = 0
	}
	return o, nil
}

// node is one ID and its resources (struct cmatest_node).
type node = cmatest.Node

type runner struct {
	o     Options
	out   io.Writer
	ch    *rdmacm.EventChannel
	group netip.Addr
	nodes []*node
	left  int // connects_left
}

// Run runs mckey: a sender with o.Sender, a receiver otherwise. Its
// lines go to stdout; the status line is printed last.
func Run(ctx context.Context, o Options, stdout, stderr io.Writer) error {
	r := &runner{o: o, out: stdout, left: o.Connections}
	ch, err := rdmacm.CreateEventChannel()
	if err != nil {
		fmt.Fprintf(stderr, "mckey: failed to create event channel: %v\n", err)
		return tool.Failf("%v", err)
	}
	r.ch = ch
	err = r.run(ctx)
	if ctx.Err() == nil {
		r.leave() // before "test complete", as mckey's run() ends
	}
	return cmatest.Finish(ctx, "mckey", err, stdout, stderr, func() {
		r.destroy()
		ch.Close()
	})
}

// resolve turns a name or address into an IP address, as getaddrinfo.
func resolve(s string) (netip.Addr, error) {
	if a, err := netip.ParseAddr(s); err == nil {
		return a.Unmap(), nil
	}
	ips, err := net.DefaultResolver.LookupNetIP(context.Background(), "ip", s)
	if err != nil || len(ips) == 0 {
		return netip.Addr{}, fmt.Errorf("getaddrinfo failed (%v) - invalid hostname or IP address", err)
	}
	return ips[0].Unmap(), nil
}

func (r *runner) run(ctx context.Context) error {
	role := "server"
	if r.o.Sender {
		role = "client"
	}
	fmt.Fprintf(r.out, "mckey: starting %s\n", role)
	var src netip.AddrPort
	if r.o.Bind != "" {
		a, err := resolve(r.o.Bind)
		if err != nil {
			return err
		}
		src = netip.AddrPortFrom(a, 0)
	}
	g, err := resolve(r.o.Group)
	if err != nil {
		return err
	}
	if !g.IsMulticast() {
		return tool.Failf("%v is not a multicast address", g)
	}
	r.group = g
	fmt.Fprintln(r.out, "mckey: joining")
	for range r.o.Connections {
		id, err := rdmacm.CreateID(r.ch, nil, r.o.PortSpace)
		if err != nil {
			return fmt.Errorf("unable to create ID: %w", err)
		}
		n := &node{ID: id}
		id.SetContext(n)
		r.nodes = append(r.nodes, n)
		if src.IsValid() {
			if err := id.BindAddr(src); err != nil {
				return fmt.Errorf("addr bind failure: %w", err)
			}
		}
		if err := id.ResolveAddr(src, netip.AddrPortFrom(g, 0), 2*time.Second); err != nil {
			return fmt.Errorf("resolve addr failure: %w", err)
		}
	}
	if err := r.connectEvents(ctx); err != nil {
		return err
	}
	if r.o.joined != nil {
		r.o.joined()
	}
	// mckey pauses for a subnet manager to program the switches.
	select {
	case <-time.After(r.o.Pause):
	case <-ctx.Done():
		return ctx.Err()
	}
	if r.o.Count == 0 {
		return nil
	}
	if r.o.Sender {
		fmt.Fprintln(r.out, "initiating data transfers")
		for _, n := range r.nodes {
			if err := r.postSends(ctx, n); err != nil {
				return err
			}
		}
	} else {
		fmt.Fprintln(r.out, "receiving data transfers")
		if err := r.pollCQs(ctx); err != nil {
			return err
		}
	}
	fmt.Fprintln(r.out, "data transfers complete")
	return nil
}

// connectEvents handles events until every ID has joined or failed
// (connect_events). A failed join ends the run, as in mckey.
func (r *runner) connectEvents(ctx context.Context) error {
	return cmatest.ConnectEvents(ctx, r.ch, r.o.Idle, &r.left, r.handle, func() error {
		return fmt.Errorf("no connection manager event in %v: %d of %d joins done", r.o.Idle, r.o.Connections-r.left, r.o.Connections)
	})
}

// handle is cma_handler.
func (r *runner) handle(ev *rdmacm.Event) error {
	n, _ := ev.ID.Context().(*node)
	switch ev.Type {
	case rdmacm.EventAddrResolved:
		if err := r.addrHandler(n); err != nil {
			r.left--
			return err
		}
	case rdmacm.EventMulticastJoin:
		fmt.Fprintf(r.out, "mckey: joined dgid: %s mlid 0x%x sl %d\n", netip.AddrFrom16(ev.UD.AHAttr.GRH.DGID), ev.UD.AHAttr.DLID, ev.UD.AHAttr.SL)
		ah, err := n.PD.CreateAH(&ev.UD.AHAttr)
		if err != nil {
			r.left--
			return fmt.Errorf("failure creating address handle: %w", err)
		}
		n.AH, n.RemoteQPN, n.QKey, n.Connected = ah, ev.UD.QPNum, ev.UD.QKey, true
		r.left--
	case rdmacm.EventAddrError, rdmacm.EventRouteError, rdmacm.EventMulticastError:
		fmt.Fprintf(r.out, "mckey: event: %s, error: %d\n", ev.Type, ev.Status)
		r.left--
		return ev.Err()
	}
	return nil
}

// addrHandler checks the message size against the MTU, makes the node's
// resources, posts a receiver's receives and joins the group
// (addr_handler).
func (r *runner) addrHandler(n *node) error {
	if r.o.NoLoopback {
		// IBV_QP_CREATE_BLOCK_SELF_MCAST_LB: neither this device nor
		// Linux's rxe offers it, and mckey fails the same way there.
		return fmt.Errorf("unable to create QP: %w", verbs.Errorf("rdma_create_qp_ex", verbs.ErrNotSupported, "blocking multicast loopback (-l)"))
	}
	if err := n.InitUD(r.o.Count, r.o.Size); err != nil {
		return err
	}
	var err error
	if r.o.Count > 0 {
		if n.MR, err = n.PD.RegMR(make([]byte, r.o.Size+grhLen), verbs.AccessLocalWrite); err != nil {
			return fmt.Errorf("failed to reg MR: %w", err)
		}
		if !r.o.Sender {
			recv := []verbs.RecvWR{{SGList: []verbs.SGE{n.MR.SGE(0, r.o.Size+grhLen)}}}
			for range r.o.Count {
				if err := n.ID.QP().PostRecv(recv); err != nil {
					return fmt.Errorf("failed to post receives: %w", err)
				}
			}
		}
	}
	flags := rdmacm.JoinFullMember
	if r.o.SendOnly {
		flags = rdmacm.JoinSendOnlyFullMember
	}
	if err := n.ID.JoinMulticastEx(r.group, flags, n); err != nil {
		return fmt.Errorf("failure joining: %w", err)
	}
	return nil
}

// postSends sends Count SEND_WITH_IMM datagrams to the group carrying
// the local QP number (post_sends), and waits for the last to leave.
func (r *runner) postSends(ctx context.Context, n *node) error {
	if !n.Connected {
		return nil
	}
	wr := []verbs.SendWR{n.SendWR(r.o.Size, 0)}
	for i := range r.o.Count {
		if i == r.o.Count-1 {
			wr[0].SendFlags = verbs.SendSignaled
		}
		if err := n.ID.QP().PostSend(wr); err != nil {
			return fmt.Errorf("failed to post sends: %w", err)
		}
	}
	_, err := r.await(ctx, n, 1, "datagrams sent")
	return err
}

// pollCQs takes Count completions from each joined node's CQ (poll_cqs).
func (r *runner) pollCQs(ctx context.Context) error {
	for _, n := range r.nodes {
		if !n.Connected {
			continue
		}
		if _, err := r.await(ctx, n, r.o.Count, "datagrams received"); err != nil {
			return err
		}
	}
	return nil
}

// await takes want successful completions from n's CQ. It prints the
// MULTICAST_ERROR and ADDR_CHANGE events that arrive meanwhile, as
// mckey's event thread does, and gives up after Idle without a
// completion.
func (r *runner) await(ctx context.Context, n *node, want int, what string) (int, error) {
	wc := make([]verbs.WC, 8)
	last := time.Now()
	done := 0
	for done < want {
		if ev, ok := r.ch.PollEvent(); ok {
			if ev.Type == rdmacm.EventMulticastError || ev.Type == rdmacm.EventAddrChange {
				fmt.Fprintf(r.out, "mckey: event: %s, status: %d\n", ev.Type, ev.Status)
			}
			ev.Ack()
		}
		k, err := n.CQ.Poll(wc)
		if err != nil {
			return done, fmt.Errorf("failed polling CQ: %w", err)
		}
		if k == 0 {
			if err := ctx.Err(); err != nil {
				return done, err
			}
			if time.Since(last) > r.o.Idle {
				return done, fmt.Errorf("no completion in %v: %d of %d %s", r.o.Idle, done, want, what)
			}
			time.Sleep(50 * time.Microsecond)
			continue
		}
		last = time.Now()
		for _, c := range wc[:k] {
			if c.Status != verbs.WCSuccess {
				return done, fmt.Errorf("completion with status %s (%d)", c.Status, int(c.Status))
			}
		}
		done += k
	}
	return done, nil
}

// leave takes each joined ID out of the group (rdma_leave_multicast).
func (r *runner) leave() {
	for _, n := range r.nodes {
		if n.Connected {
			n.Connected = false
			if err := n.ID.LeaveMulticast(r.group); err != nil {
				fmt.Fprintf(r.out, "mckey: failure leaving: %v\n", err)
			}
		}
	}
}

// destroy releases every node's resources (destroy_nodes); destroying
// an ID also leaves its groups.
func (r *runner) destroy() {
	for _, n := range r.nodes {
		n.Destroy()
	}
}
