// Package cmatest holds what the ports of librdmacm's datagram example
// programs (udaddy, mckey) share, as their C sources share common.c and
// struct cmatest_node: the command line's rules, the exit status, and a
// node, one rdma_cm ID with the verbs objects its UD traffic needs.
package cmatest

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strconv"
	"time"

	"github.com/rdmago/rdmago/internal/getopt"
	"github.com/rdmago/rdmago/internal/tool"
	"github.com/rdmago/rdmago/rdmacm"
	"github.com/rdmago/rdmago/verbs"
)

// Finish ends a run that ended with err (nil for success) as the C
// programs end theirs: "test complete", the resources released by
// cleanup, the error on stderr, and "return status N"; it returns err.
// An interrupted run (ctx cancelled) only cleans up, as the C programs
// die on SIGINT.
func Finish(ctx context.Context, name string, err error, stdout, stderr io.Writer, cleanup func()) error {
	if ctx.Err() != nil && errors.Is(err, ctx.Err()) {
		cleanup()
		return err
	}
	fmt.Fprintln(stdout, "test complete")
	cleanup()
	if err != nil {
		fmt.Fprintf(stderr, "%s: %v\n", name, err)
	}
	fmt.Fprintf(stdout, "return status %d\n", tool.Status(err))
	return err
}

// ConnectEvents hands each event of ch to handle, acknowledged after,
// until *left (connects_left, which handle counts down) reaches 0
// (connect_events). When idle passes without an event, stalled says why
// the run ends, or returns nil to go on waiting.
func ConnectEvents(ctx context.Context, ch *rdmacm.EventChannel, idle time.Duration, left *int, handle func(*rdmacm.Event) error, stalled func() error) error {
	for *left > 0 {
		ectx, cancel := context.WithTimeout(ctx, idle)
		ev, err := ch.GetEvent(ectx)
		cancel()
		if err != nil {
			if ctx.Err() != nil {
				return ctx.Err()
			}
			if err := stalled(); err != nil {
				return err
			}
			continue
		}
		err = handle(ev)
		ev.Ack()
		if err != nil {
			return err
		}
	}
	return nil
}

// Flags is a tool's command line being parsed.
type Flags struct {
	tool   string
	stderr io.Writer
}

// Parse parses args with getopt's optstring for the tool name. -h alone prints
// usage to stdout and ends with status 0; an unknown flag or a missing
// argument prints the message and the usage and ends with status 1, as
// the C programs do; operands are refused.
func Parse(name string, args []string, optstring string, usage func(io.Writer), stdout, stderr io.Writer) (*Flags, []getopt.Option, error) {
	f := &Flags{tool: name, stderr: stderr}
	if len(args) == 1 && (args[0] == "-h" || args[0] == "-help" || args[0] == "--help") {
		usage(stdout)
		return f, nil, &tool.ExitError{Status: 0, Msg: "help"}
	}
	opts, operands, err := getopt.Parse(args, optstring, nil)
	if err != nil {
		fmt.Fprintf(stderr, "%s: %v\n", name, err)
		usage(stdout)
		return f, nil, &tool.ExitError{Status: 1, Msg: err.Error()}
	}
	if len(operands) > 0 {
		msg := fmt.Sprintf("%q: %s takes no operands", operands[0], name)
		fmt.Fprintf(stderr, "%s: %s\n", name, msg)
		return f, nil, &tool.ExitError{Status: 1, Msg: msg}
	}
	return f, opts, nil
}

// Bad reports flag's bad value val, saying why, and returns the error
// that ends the run with status 1.
func (f *Flags) Bad(flag, val, why string) error {
	msg := fmt.Sprintf("-%s %q: %s", flag, val, why)
	fmt.Fprintf(f.stderr, "%s: %s\n", f.tool, msg)
	return &tool.ExitError{Status: 1, Msg: msg}
}

// Number parses a flag's number (decimal, 0x hex or 0 octal, as strtol
// with base 0) within [min, max]. The C programs read numbers with atoi
// and take garbage as 0; here it is an error naming the range.
func Number(arg string, min, max int) (int, error) {
	n, err := strconv.ParseInt(arg, 0, 64)
	if err != nil || n < int64(min) || n > int64(max) {
		return 0, fmt.Errorf("want a number from %d to %d", min, max)
	}
	return int(n), nil
}

// Node is one ID and what its datagrams need (struct cmatest_node).
type Node struct {
	ID        *rdmacm.ID
	PD        *verbs.PD
	CQ        *verbs.CQ
	MR        *verbs.MR
	AH        *verbs.AH
	RemoteQPN uint32
	QKey      uint32
	Connected bool
}

// InitUD checks that datagrams of size bytes fit the port's MTU when
// count are to be sent (verify_test_params), and makes the node's PD, a
// CQ of 2*count entries and a UD QP with room for count work requests each
// way (init_node), as the C programs size them.
func (n *Node) InitUD(count, size int) error {
	ctx := n.ID.Verbs()
	pa, err := ctx.QueryPort(n.ID.PortNum())
	if err != nil {
		return err
	}
	if mtu := pa.ActiveMTU.Bytes(); count > 0 && size > mtu {
		return tool.Failf("message_size %d is larger than active mtu %d", size, mtu)
	}
	if n.PD, err = ctx.AllocPD(); err != nil {
		return fmt.Errorf("unable to allocate PD: %w", err)
	}
	cqe := 2
	if count > 0 {
		cqe = 2 * count
	}
	if n.CQ, err = ctx.CreateCQ(cqe, nil, 0); err != nil {
		return fmt.Errorf("unable to create CQ: %w", err)
	}
	wr := uint32(max(count, 1))
	err = n.ID.CreateQP(n.PD, &verbs.QPInitAttr{
		SendCQ: n.CQ, RecvCQ: n.CQ, QPType: verbs.QPTUD,
		Cap: verbs.QPCap{MaxSendWR: wr, MaxRecvWR: wr, MaxSendSGE: 1, MaxRecvSGE: 1},
	})
	if err != nil {
		return fmt.Errorf("unable to create QP: %w", err)
	}
	return nil
}

// SendWR is the datagram the C programs send: SEND_WITH_IMM of size bytes
// from the start of the node's buffer to its peer (or group), the
// immediate holding the sender's QP number.
func (n *Node) SendWR(size int, flags verbs.SendFlags) verbs.SendWR {
	return verbs.SendWR{
		Opcode: verbs.WRSendWithImm, SendFlags: flags, ImmData: n.ID.QP().Num(),
		SGList: []verbs.SGE{n.MR.SGE(0, size)},
		AH:     n.AH, RemoteQPN: n.RemoteQPN, RemoteQKey: n.QKey,
	}
}

// Destroy releases the node's resources and its ID (destroy_node).
func (n *Node) Destroy() {
	if n.AH != nil {
		n.AH.Destroy()
	}
	if n.ID.QP() != nil {
		n.ID.DestroyQP()
	}
	if n.CQ != nil {
		n.CQ.Destroy()
	}
	if n.MR != nil {
		n.MR.Dereg()
	}
	if n.PD != nil {
		n.PD.Dealloc()
	}
	n.ID.Destroy()
}
