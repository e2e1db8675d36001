package perftest

import (
	"context"
	"fmt"
	"io"
	"time"

	"github.com/rdmago/rdmago/internal/yield"
	"github.com/rdmago/rdmago/verbs"
)

// sizes is the list of message sizes of the run.
func (o *Options) sizes() []int {
	if !o.All {
		return []int{o.Size}
	}
	largest := MaxSize
	if o.Conn == UD {
		largest = o.MTU.Bytes() // a datagram is one packet
	}
	var s []int
	for n := 2; n <= largest; n *= 2 {
		s = append(s, n)
	}
	return s
}

// sendWR is QP q's work request of one iteration of size bytes: from
// its local half to the peer's QP's target half.
// The SGE lives in r.sges[j]: each request of a list built at once needs
// its own j.
func (r *res) sendWR(q, size int, signaled bool, j int) verbs.SendWR {
	if j >= len(r.sges) {
		r.sges = make([]verbs.SGE, j+1)
	}
	r.sges[j] = r.mr.SGE(q*r.half, size)
	wr := verbs.SendWR{SGList: r.sges[j : j+1 : j+1]}
	rem := &r.rem[q]
	switch r.o.Tool.Verb {
	case Send:
		wr.Opcode = verbs.WRSend
		if r.o.Conn == UD {
			wr.AH, wr.RemoteQPN, wr.RemoteQKey = r.ahs[q], rem.qpn, udQKey
		}
	case Write:
		wr.Opcode, wr.RemoteAddr, wr.RKey = verbs.WRRDMAWrite, rem.vaddr, rem.rkey
	case Read:
		wr.Opcode, wr.RemoteAddr, wr.RKey = verbs.WRRDMARead, rem.vaddr, rem.rkey
	case Atomic:
		// perftest's operands: add 1, or compare with 1 and swap in 0.
		wr.Opcode, wr.RemoteAddr, wr.RKey, wr.CompareAdd = verbs.WRAtomicFetchAndAdd, rem.vaddr, rem.rkey, 1
		if r.o.AtomicType == CmpAndSwap {
			wr.Opcode, wr.Swap = verbs.WRAtomicCmpAndSwp, 0
		}
	}
	if signaled {
		wr.SendFlags |= verbs.SendSignaled
	}
	if size <= r.inline && (r.o.Tool.Verb == Send || r.o.Tool.Verb == Write) {
		wr.SendFlags |= verbs.SendInline
	}
	return wr
}

// postOne posts one signaled request of size bytes on the first QP.
func (r *res) postOne(size int) error {
	r.one[0] = r.sendWR(0, size, true, 0)
	return r.qp.PostSend(r.one[:])
}

// Run runs the tool: a server without o.Server, a client with it.
func Run(ctx context.Context, o *Options, stdout, stderr io.Writer) error {
	out, err := newOutput(o, stdout, stderr)
	if err != nil {
		return err
	}
	// As perftest (ctx_find_dev, check_link before it connects): a
	// wrong -d, -i or -x fails at once, not once a peer has come.
	if err := checkDevice(o); err != nil {
		return err
	}
	if err := checkPlot(o.Plot); err != nil {
		return err
	}
	if o.Server == "" {
		fmt.Fprint(out.table, "\n************************************\n* Waiting for client to connect... *\n************************************\n")
	}
	c, err := dialCtrl(ctx, o)
	if err != nil {
		return err
	}
	defer c.Close()
	stop := context.AfterFunc(ctx, func() { c.Close() })
	defer stop()
	if o.RdmaCM {
		// The test's QPs are on the device rdma_cm reaches the peer by.
		o.Device = c.cm.conn.ID.Device().Name()
	}
	r, err := setup(o)
	if err != nil {
		return err
	}
	defer r.close()
	var peerCycle int
	if r.mtu, peerCycle, err = c.hello(r.mtu); err != nil {
		return err
	}
	if o.Conn == UD {
		// A datagram is one packet: the size is at most the MTU, as
		// perftest makes it (or refuses a larger -s).
		o.MTU = r.mtu
		if o.Size > r.mtu.Bytes() {
			if o.sizeSet && !o.All {
				return fmt.Errorf("max message size in UD cannot be greater than MTU (%d)", r.mtu.Bytes())
			}
			fmt.Fprintf(stderr, " Max msg size in UD is MTU %d\n Changing to this MTU\n", r.mtu.Bytes())
			o.Size = r.mtu.Bytes()
		}
	}
	if peerCycle > r.half {
		return fmt.Errorf("the peer's cycle buffer (%d bytes) is larger than this side's %d", peerCycle, r.half)
	}
	if o.RdmaCM {
		if err := r.cmConnectQPs(ctx, c); err != nil {
			return err
		}
	}
	t := o.Tool
	printBanner(out.table, o, r)
	// Before the test: perftest's handshakes, in its order and number
	// for N QPs: each QP's keys, ctx_connect, each QP's again and one
	// more with the first QP's (send_bw has the one before the N).
	for i := range r.qps {
		if r.rem[i], err = c.firstKey(r, i); err != nil {
			return err
		}
	}
	if t.Lat && t.Verb != Send {
		// write_lat, read_lat, atomic_lat (one QP) have a handshake
		// before the keys; the key message is the same every time, so
		// the second carries what the first did.
		if err := c.againKey(r, 0); err != nil {
			return err
		}
	}
	printAddrs(out.table, o, r.my, r.rem)
	if !o.RdmaCM {
		if err := r.connect(); err != nil {
			return err
		}
	}
	if t.Verb == Send && !t.Lat {
		if err := c.againKey(r, 0); err != nil {
			return err
		}
	}
	for i := range r.qps {
		if err := c.againKey(r, i); err != nil {
			return err
		}
	}
	if t.Verb != Send || t.Lat {
		if err := c.againKey(r, 0); err != nil {
			return err
		}
	}
	switch {
	case !t.Lat && t.Verb != Send:
		err = runRDMABW(ctx, c, r, out)
	case !t.Lat:
		err = runSendBW(ctx, c, r, out)
	case t.Verb == Send:
		err = runSendLat(ctx, c, r, out)
	case t.Verb == Write:
		err = runWriteLat(ctx, c, r, out)
	default:
		err = runReadLat(ctx, c, r, out)
	}
	if err != nil {
		return err
	}
	return out.plot()
}

// serveWhile runs wait, the passive side's wait for the peer to finish,
// meanwhile driving the software device as a NIC's engine runs on its own:
// busy-polling, a goroutine polls the CQ with no room until wait returns,
// so that the peer's WRITEs and READs are answered at once, not each time
// the device's goroutines wake. With -e, or on a device that moves the
// data itself (hardware), it leaves that to the device.
func (r *res) serveWhile(wait func() error) error {
	if r.ch != nil || !r.drives {
		return wait()
	}
	stop, done := make(chan struct{}), make(chan error, 1)
	go func() {
		for {
			select {
			case <-stop:
				done <- nil
				return
			default:
			}
			if _, err := r.cq.Poll(nil); err != nil {
				done <- fmt.Errorf("poll CQ failed: %w", err)
				return
			}
			yield.CPU()
		}
	}()
	err := wait()
	close(stop)
	if perr := <-done; err == nil {
		err = perr
	}
	return err
}

// during runs a test with a context that ends if the peer goes away, or
// finishes while this side has not (see ctrl.watch); the error then says
// which.
func (c *ctrl) during(ctx context.Context, test func(context.Context) error) error {
	run, stop := c.watch(ctx)
	err := test(run)
	stop()
	if err != nil {
		return runErr(run, err)
	}
	return nil
}

// idleBeforeYield is how long a busy poll finds nothing before it starts
// yielding the CPU to other threads.
const idleBeforeYield = 200 * time.Microsecond
