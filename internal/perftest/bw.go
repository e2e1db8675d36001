package perftest

import (
	"context"
	"fmt"
	"time"

	"github.com/rdmago/rdmago/verbs"
)

// The bandwidth tests' loops: ib_write_bw, ib_read_bw, ib_send_bw,
// bidirectional, by iterations or for a duration (-D), and -R's forever.

// runRDMABW is ib_write_bw and ib_read_bw: the client moves the data and
// reports; the server waits, then prints the client's report.
func runRDMABW(ctx context.Context, c *ctrl, r *res, out *output) error {
	o := r.o
	out.bwHeader()
	if o.Duplex {
		return runRDMABiBW(ctx, c, r, out)
	}
	var last bwReport
	if o.Infinitely && !c.server {
		// Until stopped; the server waits in the next exchange.
		return c.during(ctx, func(ctx context.Context) error { return r.bwInfinitely(ctx, o.Size, out) })
	}
	if !c.server {
		err := c.during(ctx, func(ctx context.Context) error {
			for _, size := range o.sizes() {
				if err := r.warmUp(ctx, size); err != nil {
					return err
				}
				var rep bwReport
				var err error
				if o.Duration > 0 {
					rep, err = r.bwDuration(ctx, size)
				} else {
					rep, err = r.bwIterations(ctx, size)
				}
				if err != nil {
					return err
				}
				out.bwRow(rep)
				last = rep
			}
			return nil
		})
		if err != nil {
			return err
		}
	}
	if err := r.serveWhile(func() error { _, err := c.handshake(&r.my[0]); return err }); err != nil {
		return err
	}
	peer, err := c.xchgReport(last)
	if err != nil {
		return err
	}
	if c.server {
		out.bwRow(peer)
	}
	fmt.Fprint(out.table, resultLine)
	return c.closeConn(&r.my[0])
}

// bwIterations posts o.Iters operations of size bytes on each QP,
// o.TxDepth at most outstanding per QP, every o.CQMod-th (and the last)
// signaled, and measures when each was posted and completed (in the
// order posted and completed over all QPs, as perftest counts them).
func (r *res) bwIterations(ctx context.Context, size int) (bwReport, error) {
	o := r.o
	n := o.Iters
	total := n * len(r.qps)
	posted, completed := newStamps(total), newStamps(total)
	scnt := make([]int, len(r.qps))
	ccnt := make([]int, len(r.qps))
	tposted, tdone := 0, 0
	list := make([]verbs.SendWR, o.PostList)
	// ib_send_bw -b also takes the peer's sends, as many as it sends,
	// reposting receives as they complete.
	recvs, rdone := 0, 0
	got := make([]int, len(r.qps))
	if o.Tool.Verb == Send && o.Duplex {
		recvs = total
	}
	for tdone < total || rdone < recvs {
		for q, qp := range r.qps {
			// -l: o.PostList requests at a time (the iterations are a
			// multiple of it), as one ibv_post_send of a chain.
			for scnt[q] < n && scnt[q]-ccnt[q]+o.PostList <= o.TxDepth {
				k := min(o.PostList, n-scnt[q])
				for j := range k {
					c := scnt[q] + j
					list[j] = r.sendWR(q, size, (c+1)%o.CQMod == 0 || c == n-1, j)
					list[j].WRID = uint64(q)<<32 | uint64(c)
				}
				now := stampNow()
				if err := qp.PostSend(list[:k]); err != nil {
					return bwReport{}, fmt.Errorf("couldn't post send: qp %d scnt=%d: %w", q, scnt[q], err)
				}
				for range k {
					posted[tposted] = now
					tposted++
				}
				scnt[q] += k
			}
		}
		wcs, err := r.poll(ctx)
		if err != nil {
			return bwReport{}, err
		}
		now := stampNow()
		for _, wc := range wcs {
			if wc.Opcode&verbs.WCRecv != 0 {
				if q, ok := r.qpIndex[wc.QPNum]; ok && recvs > 0 {
					got[q]++
					r.rxPosted[q]--
					rdone++
				}
				continue
			}
			// A signaled completion completes every request of its QP up
			// to it.
			q, last := int(wc.WRID>>32), int(uint32(wc.WRID))
			if q >= len(r.qps) {
				continue
			}
			for ; ccnt[q] <= last && ccnt[q] < n; ccnt[q]++ {
				completed[tdone] = now
				tdone++
			}
		}
		if recvs > 0 {
			for q := range r.qps {
				if err := r.fillRecvs(q, min(o.RxDepth, n-got[q])); err != nil {
					return bwReport{}, err
				}
			}
		}
	}
	return bwReportOf(o, size, posted, completed), nil
}

// runSendBW is ib_send_bw: per size, the server posts receives, a
// handshake starts the run, and each side prints its own row.
func runSendBW(ctx context.Context, c *ctrl, r *res, out *output) error {
	o := r.o
	out.bwHeader()
	sizes := o.sizes()
	if o.Infinitely {
		if c.server {
			for q := range r.qps {
				if err := r.fillRecvs(q, o.RxDepth); err != nil {
					return err
				}
			}
		}
		if _, err := c.handshake(&r.my[0]); err != nil {
			return err
		}
		return c.during(ctx, func(ctx context.Context) error { return r.bwInfinitely(ctx, o.Size, out) })
	}
	for _, size := range sizes {
		if c.server || o.Duplex {
			for q := range r.qps {
				if err := r.fillRecvs(q, min(o.RxDepth, o.Iters)); err != nil {
					return err
				}
			}
		}
		if _, err := c.handshake(&r.my[0]); err != nil {
			return err
		}
		var rep bwReport
		err := c.during(ctx, func(ctx context.Context) error {
			var err error
			switch {
			case o.Duration > 0:
				rep, err = r.bwDuration(ctx, size)
			case c.server && !o.Duplex:
				rep, err = r.recvIterations(ctx, size)
			default:
				rep, err = r.bwIterations(ctx, size)
			}
			return err
		})
		if err != nil {
			return err
		}
		rep.size = uint64(size)
		if o.Duplex {
			// -b: the sides trade reports, and each prints the sum.
			peer, err := c.xchgReport(rep)
			if err != nil {
				return err
			}
			rep.peak += peer.peak
			rep.avg += peer.avg
			rep.msgRate += peer.msgRate
		}
		out.bwRow(rep)
		if o.All { // after every size, the last too
			if _, err := c.handshake(&r.my[0]); err != nil {
				return err
			}
		}
	}
	fmt.Fprint(out.table, resultLine)
	return c.closeConn(&r.my[0])
}

// fillRecvs posts receives (each of the largest size, into QP q's
// target half) until n are outstanding on QP q.
func (r *res) fillRecvs(q, n int) error {
	for r.rxPosted[q] < n {
		r.rsge[0] = r.mr.SGE((len(r.qps)+q)*r.half, r.half)
		r.rwr[0] = verbs.RecvWR{WRID: uint64(r.rxPosted[q]), SGList: r.rsge[:]}
		if err := r.qps[q].PostRecv(r.rwr[:]); err != nil {
			return fmt.Errorf("couldn't post receive: %w", err)
		}
		r.rxPosted[q]++
	}
	return nil
}

// recvIterations takes o.Iters receives on each QP, reposting as they
// complete.
func (r *res) recvIterations(ctx context.Context, size int) (bwReport, error) {
	o := r.o
	n := o.Iters
	total := n * len(r.qps)
	posted, completed := newStamps(total), newStamps(total)
	got := make([]int, len(r.qps))
	done := 0
	// The clock starts when the run does (the handshake just returned):
	// the first completions may come back in one batch after a wait.
	start := stampNow()
	for i := range posted {
		posted[i] = start
	}
	for done < total {
		wcs, err := r.poll(ctx)
		if err != nil {
			return bwReport{}, err
		}
		now := stampNow()
		for _, wc := range wcs {
			q, ok := r.qpIndex[wc.QPNum]
			if !ok || wc.Opcode&verbs.WCRecv == 0 {
				continue
			}
			completed[done] = now
			done++
			got[q]++
			r.rxPosted[q]--
		}
		for q := range r.qps {
			if err := r.fillRecvs(q, min(o.RxDepth, n-got[q])); err != nil {
				return bwReport{}, err
			}
		}
	}
	noPeak := *o
	noPeak.NoPeak = true // perftest's server computes no peak for receives
	return bwReportOf(&noPeak, size, posted, completed), nil
}

// runRDMABiBW is -b: both sides move data at once, a handshake starting
// each size (and, with -a, ending it); the sides trade reports and each
// prints the sum.
func runRDMABiBW(ctx context.Context, c *ctrl, r *res, out *output) error {
	o := r.o
	for _, size := range o.sizes() {
		if _, err := c.handshake(&r.my[0]); err != nil {
			return err
		}
		var mine bwReport
		err := c.during(ctx, func(ctx context.Context) error {
			if err := r.warmUp(ctx, size); err != nil {
				return err
			}
			var err error
			mine, err = r.bwIterations(ctx, size)
			return err
		})
		if err != nil {
			return err
		}
		if o.All {
			if _, err := c.handshake(&r.my[0]); err != nil {
				return err
			}
		}
		peer, err := c.xchgReport(mine)
		if err != nil {
			return err
		}
		sum := mine
		sum.peak += peer.peak
		sum.avg += peer.avg
		sum.msgRate += peer.msgRate
		out.bwRow(sum)
	}
	fmt.Fprint(out.table, resultLine)
	return c.closeConn(&r.my[0])
}

// warmUp is --perform_warm_up: on each QP a tx depth of signaled
// operations of size bytes (a post list's worth with -l), all waited
// for, before the measured run.
func (r *res) warmUp(ctx context.Context, size int) error {
	o := r.o
	if !o.WarmUp {
		return nil
	}
	n := o.TxDepth
	if o.PostList > 1 {
		n = o.PostList
	}
	for q, qp := range r.qps {
		list := make([]verbs.SendWR, n)
		for j := range list {
			list[j] = r.sendWR(q, size, true, j)
			list[j].WRID = warmUpWRID
		}
		if err := qp.PostSend(list); err != nil {
			return fmt.Errorf("couldn't post send during warm up: qp %d: %w", q, err)
		}
		for done := 0; done < n; {
			wcs, err := r.poll(ctx)
			if err != nil {
				return fmt.Errorf("warm up: %w", err)
			}
			done += len(wcs)
		}
	}
	return nil
}

// warmUpWRID marks the warm-up's requests.
const warmUpWRID = ^uint64(0)

// bwDuration is -D: operations posted for o.Duration seconds, as many as
// the tx depth allows (on the ib_send_bw server, receives taken as they
// come); those that complete in the sample window (the run less o.Margin
// at each end) are counted, over the window's length. As perftest, the
// run ends when the time is up, not waiting for what is still in flight.
func (r *res) bwDuration(ctx context.Context, size int) (bwReport, error) {
	o := r.o
	recv := o.Tool.Verb == Send && o.Server == "" && !o.Duplex
	start := time.Now()
	sampleFrom := start.Add(time.Duration(o.Margin) * time.Second)
	sampleTo := start.Add(time.Duration(o.Duration-o.Margin) * time.Second)
	end := start.Add(time.Duration(o.Duration) * time.Second)
	run, cancel := context.WithDeadline(ctx, end)
	defer cancel()
	var counted uint64
	t := r.newTimed(recv)
	for time.Now().Before(end) {
		if err := t.fill(size); err != nil {
			return bwReport{}, err
		}
		wcs, err := r.poll(run)
		if err != nil {
			if run.Err() != nil && ctx.Err() == nil {
				break // the time is up
			}
			return bwReport{}, err
		}
		now := time.Now()
		if n := t.count(wcs); !now.Before(sampleFrom) && now.Before(sampleTo) {
			counted += n
		}
	}
	// Over the sample window, as perftest's alarms time it.
	return rateReport(o, size, counted, sampleTo.Sub(sampleFrom)), nil
}

// bwInfinitely is --run_infinitely: operations of size bytes posted (on
// the ib_send_bw server, receives taken) until ctx ends, and every
// o.Duration seconds a row of what completed in that time.
func (r *res) bwInfinitely(ctx context.Context, size int, out *output) error {
	o := r.o
	recv := o.Tool.Verb == Send && o.Server == ""
	period := time.Duration(o.Duration) * time.Second
	start := time.Now()
	next := start.Add(period)
	var done uint64 // completed in this period
	t := r.newTimed(recv)
	for {
		if err := t.fill(size); err != nil {
			return err
		}
		wcs, err := r.poll(ctx)
		if err != nil {
			return err
		}
		done += t.count(wcs)
		if now := time.Now(); !now.Before(next) {
			out.bwRow(rateReport(o, size, done, now.Sub(start)))
			start, next, done = now, now.Add(period), 0
		}
	}
}

// timed is the posting of a run that lasts a time (-D,
// --run_infinitely): on the ib_send_bw server its receive queues kept
// full, elsewhere its send queues, each request signaled every
// CQ-moderation count so that a completion stands for that many.
type timed struct {
	r          *res
	recv       bool
	scnt, ccnt []uint64
	list       []verbs.SendWR
}

func (r *res) newTimed(recv bool) *timed {
	return &timed{r: r, recv: recv, scnt: make([]uint64, len(r.qps)), ccnt: make([]uint64, len(r.qps)),
		list: make([]verbs.SendWR, r.o.PostList)}
}

// fill posts what the queues have room for.
func (t *timed) fill(size int) error {
	r, o := t.r, t.r.o
	for q, qp := range r.qps {
		if t.recv {
			if err := r.fillRecvs(q, o.RxDepth); err != nil {
				return err
			}
			continue
		}
		for t.scnt[q]-t.ccnt[q]+uint64(o.PostList) <= uint64(o.TxDepth) {
			for j := range t.list {
				c := t.scnt[q] + uint64(j)
				t.list[j] = r.sendWR(q, size, (c+1)%uint64(o.CQMod) == 0, j)
				t.list[j].WRID = uint64(q)<<32 | uint64(uint32(c))
			}
			if err := qp.PostSend(t.list); err != nil {
				return fmt.Errorf("couldn't post send: qp %d scnt=%d: %w", q, t.scnt[q], err)
			}
			t.scnt[q] += uint64(o.PostList)
		}
	}
	return nil
}

// count takes completions and returns how many operations they finish.
func (t *timed) count(wcs []verbs.WC) uint64 {
	r := t.r
	var n uint64
	for _, wc := range wcs {
		if t.recv {
			if q, ok := r.qpIndex[wc.QPNum]; ok && wc.Opcode&verbs.WCRecv != 0 {
				r.rxPosted[q]--
				n++
			}
			continue
		}
		if q := int(wc.WRID >> 32); q < len(r.qps) && wc.Opcode&verbs.WCRecv == 0 {
			t.ccnt[q] += uint64(r.o.CQMod)
			n += uint64(r.o.CQMod)
		}
	}
	return n
}

// rateReport is the row of n operations of size bytes in d, without a
// peak (the timed runs').
func rateReport(o *Options, size int, n uint64, d time.Duration) bwReport {
	rep := bwReport{size: uint64(size), iters: n}
	unit := float64(1 << 20)
	if o.ReportGbits {
		unit = 125e6
	}
	if s := d.Seconds(); s > 0 {
		rep.avg = float64(size) * float64(n) / s / unit
		rep.msgRate = float64(n) / s / 1e6
	}
	return rep
}
