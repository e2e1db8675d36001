package perftest

import (
	"context"
	"fmt"
	"sync/atomic"
	"time"
	"unsafe"

	"github.com/rdmago/rdmago/verbs"
)

// The latency tests' loops: ib_send_lat, ib_read_lat and ib_write_lat.

// runSendLat is ib_send_lat: per size a handshake, then the ping-pong
// (the client sends first, the server answers each message); each side
// prints its own row.
func runSendLat(ctx context.Context, c *ctrl, r *res, out *output) error {
	o := r.o
	out.latHeader()
	for _, size := range o.sizes() {
		if err := r.fillRecvs(0, o.RxDepth); err != nil {
			return err
		}
		if _, err := c.handshake(&r.my[0]); err != nil {
			return err
		}
		err := c.during(ctx, func(ctx context.Context) error {
			return r.latLoop(ctx, out, size, 2, func(ctx context.Context, i int, mark func()) error {
				if c.server {
					if err := r.waitRecv(ctx); err != nil {
						return err
					}
				}
				mark()
				if err := r.postOne(size); err != nil {
					return fmt.Errorf("couldn't post send: %w", err)
				}
				if !c.server {
					return r.waitRecv(ctx)
				}
				return nil
			})
		})
		if err != nil {
			return err
		}
	}
	fmt.Fprint(out.table, resultLine)
	return c.closeConn(&r.my[0])
}

// waitRecv waits for one receive (passing over send completions) and
// keeps the receive queue full.
func (r *res) waitRecv(ctx context.Context) error {
	for {
		n, err := r.cq.Poll(r.wc[:1])
		if err != nil {
			return err
		}
		if n == 0 {
			if err := r.waitCQ(ctx); err != nil {
				return fmt.Errorf("waiting for a receive: %w", err)
			}
			continue
		}
		r.spins, r.yielding = 0, false
		wc := r.wc[0]
		if wc.Status != verbs.WCSuccess {
			return fmt.Errorf("completion with error: %s", wc.Status)
		}
		if wc.Opcode&verbs.WCRecv == 0 {
			continue
		}
		r.rxPosted[0]--
		return r.fillRecvs(0, r.o.RxDepth)
	}
}

// runReadLat is ib_read_lat and ib_atomic_lat: the client reads (or
// operates atomically on) the server's memory, one operation at a time,
// and prints; the server only waits for it to finish.
func runReadLat(ctx context.Context, c *ctrl, r *res, out *output) error {
	o := r.o
	if !c.server {
		out.latHeader()
		err := c.during(ctx, func(ctx context.Context) error {
			for _, size := range o.sizes() {
				err := r.latLoop(ctx, out, size, 1, func(ctx context.Context, i int, mark func()) error {
					mark()
					if err := r.postOne(size); err != nil {
						return fmt.Errorf("couldn't post read: %w", err)
					}
					_, err := r.poll(ctx)
					return err
				})
				if err != nil {
					return err
				}
			}
			return nil
		})
		if err != nil {
			return err
		}
	}
	fmt.Fprint(out.table, resultLine)
	return c.closeConn(&r.my[0])
}

// runWriteLat is ib_write_lat: each side RDMA-writes size bytes into the
// other's memory, the last byte a counter, and watches its own memory for
// the peer's counter to come; the server writes first. Each side prints
// its own row; there is no closing exchange.
func runWriteLat(ctx context.Context, c *ctrl, r *res, out *output) error {
	return c.during(ctx, func(ctx context.Context) error { return writeLat(ctx, r, out) })
}

func writeLat(ctx context.Context, r *res, out *output) error {
	o := r.o
	out.latHeader()
	server := o.Server == ""
	for _, size := range o.sizes() {
		post := r.buf[size-1 : size]
		watch := r.half + size - 1
		// The client's n-th write answers the server's n-th; the server's
		// first goes unprompted and it waits last for the client's last.
		err := r.latLoop(ctx, out, size, 2, func(ctx context.Context, i int, mark func()) error {
			switch {
			case !server:
				if err := r.watchByte(ctx, watch, byte(i+1)); err != nil {
					return err
				}
			case i > 0:
				if err := r.watchByte(ctx, watch, byte(i)); err != nil {
					return err
				}
			}
			mark()
			post[0] = byte(i + 1)
			if err := r.postOne(size); err != nil {
				return fmt.Errorf("couldn't post send: scnt=%d: %w", i+1, err)
			}
			if _, err := r.poll(ctx); err != nil {
				return err
			}
			if server && i == o.Iters-1 && o.Duration == 0 {
				return r.watchByte(ctx, watch, byte(o.Iters))
			}
			return nil
		})
		if err != nil {
			return err
		}
		if o.Duration > 0 {
			r.linger(ctx, watch)
		}
	}
	fmt.Fprint(out.table, resultLine)
	return nil
}

// linger keeps a -D write_lat run's QP while the peer, whose clock
// started a moment apart, still writes into byte i: a write that finds
// the QP gone is retried by the peer, and perftest waits for its
// completion without end. It returns once the byte has stood still for
// lingerQuiet, or after lingerMax.
func (r *res) linger(ctx context.Context, i int) {
	const lingerQuiet, lingerMax = 300 * time.Millisecond, 5 * time.Second
	last, since, start := loadByte(r.buf, i), time.Now(), time.Now()
	for ctx.Err() == nil && time.Since(start) < lingerMax && time.Since(since) < lingerQuiet {
		time.Sleep(time.Millisecond)
		if v := loadByte(r.buf, i); v != last {
			last, since = v, time.Now()
		}
	}
}

// latLoop runs one size of a latency test: step o.Iters times, then the
// row of the times step marked (see latStats); with -D, step for
// o.Duration seconds instead, and the row of the marks in the sample
// window (perftest's duration report: the average and the rate).
func (r *res) latLoop(ctx context.Context, out *output, size int, factor float64, step func(ctx context.Context, i int, mark func()) error) error {
	o := r.o
	if o.Duration == 0 {
		stamps := newStamps(o.Iters)
		for i := range o.Iters {
			if err := step(ctx, i, func() { stamps[i] = stampNow() }); err != nil {
				return err
			}
		}
		out.latRow(size, o.Iters, stamps, factor)
		return nil
	}
	start := time.Now()
	from := start.Add(time.Duration(o.Margin) * time.Second)
	to := start.Add(time.Duration(o.Duration-o.Margin) * time.Second)
	end := start.Add(time.Duration(o.Duration) * time.Second)
	run, cancel := context.WithDeadline(ctx, end)
	defer cancel()
	count := 0
	mark := func() {
		if now := time.Now(); !now.Before(from) && now.Before(to) {
			count++
		}
	}
	for i := 0; time.Now().Before(end); i++ {
		if err := step(run, i, mark); err != nil {
			if run.Err() != nil && ctx.Err() == nil {
				break // the time is up
			}
			return err
		}
	}
	out.latDurRow(size, count, to.Sub(from), factor)
	return nil
}

// watchByte waits until byte i of the buffer, which the peer writes by
// RDMA, holds want. Busy-polling (manual progress), it polls the CQ with
// no room between looks, which lands the write on the software device as
// a NIC would on its own. Otherwise it spins a while, then sleeps a little
// between looks: the write lands by goroutines of this process, which a
// spinning goroutine would keep waiting.
func (r *res) watchByte(ctx context.Context, i int, want byte) error {
	for spins := 0; ; spins++ {
		if loadByte(r.buf, i) == want {
			r.spins, r.yielding = 0, false
			return nil
		}
		if r.ch == nil {
			if _, err := r.cq.Poll(nil); err != nil {
				return fmt.Errorf("poll CQ failed: %w", err)
			}
			if err := r.waitCQ(ctx); err != nil {
				return fmt.Errorf("waiting for the peer's write: %w", err)
			}
			continue
		}
		if spins < 256 {
			continue
		}
		if spins%1024 == 0 && ctx.Err() != nil {
			return fmt.Errorf("waiting for the peer's write: %w", ctx.Err())
		}
		time.Sleep(time.Microsecond)
	}
}

// loadByte reads b[i], which the device writes concurrently, as one
// atomic load of the aligned word that holds it (b's array is
// word-aligned, as the Go allocator aligns large arrays).
func loadByte(b []byte, i int) byte {
	base := unsafe.Pointer(unsafe.SliceData(b))
	word := (*uint32)(unsafe.Add(base, i&^3))
	v := atomic.LoadUint32(word)
	var bytes [4]byte
	*(*uint32)(unsafe.Pointer(&bytes)) = v
	return bytes[i&3]
}
