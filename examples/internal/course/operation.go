package course

import (
	"bytes"
	"context"
	"fmt"
	"time"

	"github.com/rdmago/rdmago/verbs"
)

// Fill writes message seq's pattern into b, for Check to recognise.
func Fill(b []byte, seq uint64) {
	for i := range b {
		b[i] = byte(seq>>(8*(i%8))) ^ byte(i*7)
	}
}

// Check says whether b holds message seq's pattern.
func Check(b []byte, seq uint64) bool {
	for i := range b {
		if b[i] != byte(seq>>(8*(i%8)))^byte(i*7) {
			return false
		}
	}
	return true
}

// pause waits the options' pause before a message, or until ctx ends.
func (c *Control) pause(ctx context.Context) error {
	if c.o.Pause <= 0 {
		return nil
	}
	t := time.NewTimer(c.o.Pause)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return interrupted(ctx)
	}
}

// expect awaits a completion of the given opcode and returns it.
func (c *Control) expect(ctx context.Context, await AwaitFunc, op verbs.WCOpcode) (verbs.WC, error) {
	var wc verbs.WC
	if err := await(ctx, &wc); err != nil {
		return wc, err
	}
	if wc.Opcode != op {
		err := fmt.Errorf("our_await_completion: got a %s completion (wr_id %d), want %s", wc.Opcode, wc.WRID, op)
		c.o.ReportError("our_await_completion", err)
		return wc, err
	}
	return wc, nil
}

// checkLen checks that a receive brought a whole message.
func (c *Control) checkLen(wc *verbs.WC) error {
	if uint64(wc.ByteLen) != c.DataSize {
		err := fmt.Errorf("received %d bytes, want %d", wc.ByteLen, c.DataSize)
		c.o.ReportError("ibv_poll_cq", err)
		return err
	}
	return nil
}

// PingClient is the client's ping-pong (our_client_operation): for each
// message it posts the receive for the pong, SENDs the ping and awaits
// both completions, until Limit pongs have come back; with -V it checks
// that each pong is its ping.
func (c *Control) PingClient(ctx context.Context, await AwaitFunc) error {
	o := c.o
	ping, pong := c.userData[0], c.userData[1]
	Fill(ping, 0)
	c.WCRecv, c.WCSend = 0, 0
	start := time.Now()
	for c.WCRecv < c.Limit {
		if err := c.pause(ctx); err != nil {
			return err
		}
		if o.Verify {
			Fill(ping, c.WCRecv)
		}
		if err := c.PostRecv(0); err != nil {
			return err
		}
		if err := c.PostSend(0); err != nil {
			return err
		}
		// The SEND's completion comes first unless the peer's
		// acknowledgement trails its pong.
		for got := 0; got < 2; got++ {
			var wc verbs.WC
			if err := await(ctx, &wc); err != nil {
				return err
			}
			switch {
			case wc.Opcode == verbs.WCSend:
				c.WCSend++
			case wc.Opcode == verbs.WCRecv:
				if err := c.checkLen(&wc); err != nil {
					return err
				}
				if o.Verify && !bytes.Equal(pong, ping) {
					err := fmt.Errorf("pong %d differs from its ping", c.WCRecv)
					o.ReportError("our_verify_data", err)
					return err
				}
				c.WCRecv++
			default:
				return fmt.Errorf("our_await_completion: unexpected %s completion", wc.Opcode)
			}
		}
		if o.Verbose {
			o.Printf("round trip %d of %d bytes", c.WCRecv, c.DataSize)
		}
	}
	c.reportRoundTrips(time.Since(start))
	return nil
}

// PingAgent is the agent's ping-pong (our_agent_operation): with the first
// receive posted before the connection was accepted, for each ping it
// posts the next receive and SENDs the same buffer back as the pong,
// until Limit pongs have completed. The next ping may complete before the
// pong's SEND does (the client's acknowledgement can trail its next
// ping), so it takes the completions in whatever order they come.
func (c *Control) PingAgent(ctx context.Context, await AwaitFunc) error {
	o := c.o
	c.WCRecv, c.WCSend = 0, 0
	var start time.Time
	pings, sending := 0, false // pings received and not yet answered; a pong in flight
	for c.WCSend < c.Limit {
		var wc verbs.WC
		if err := await(ctx, &wc); err != nil {
			return err
		}
		switch wc.Opcode {
		case verbs.WCRecv:
			if err := c.checkLen(&wc); err != nil {
				return err
			}
			if c.WCRecv == 0 {
				start = time.Now()
			}
			c.WCRecv++
			pings++
		case verbs.WCSend:
			c.WCSend++
			sending = false
			if o.Verbose {
				o.Printf("round trip %d of %d bytes", c.WCSend, c.DataSize)
			}
		default:
			return fmt.Errorf("our_await_completion: unexpected %s completion", wc.Opcode)
		}
		if pings == 0 || sending {
			continue
		}
		if err := c.pause(ctx); err != nil {
			return err
		}
		if c.WCRecv < c.Limit { // the next ping's receive; none is left over at the end
			if err := c.PostRecv(0); err != nil {
				return err
			}
		}
		if err := c.PostSend(0); err != nil {
			return err
		}
		pings--
		sending = true
	}
	c.reportRoundTrips(time.Since(start))
	return nil
}

func (c *Control) reportRoundTrips(d time.Duration) {
	n := c.WCSend
	s := max(d.Seconds(), 1e-9)
	c.o.Printf("%d round trips of %d bytes in %.3f s: %.0f round trips/s, %.1f µs each",
		n, c.DataSize, d.Seconds(), float64(n)/s, d.Seconds()*1e6/float64(max(n, 1)))
}

// BlastClient streams Limit SENDs to the agent (the blast client's
// operation): it keeps up to Window SENDs in flight, each from the next
// buffer of the window, filled with its message's pattern when -V asks
// the agent to check them, and awaits their completions.
func (c *Control) BlastClient(ctx context.Context, await AwaitFunc) error {
	o := c.o
	window := uint64(len(c.sendWR))
	start := time.Now()
	posted := uint64(0)
	c.WCSend = 0
	for c.WCSend < c.Limit {
		for posted < c.Limit && posted-c.WCSend < window {
			if err := c.pause(ctx); err != nil {
				return err
			}
			slot := int(posted % window)
			if o.Verify {
				Fill(c.userData[slot], posted)
			}
			if err := c.PostSend(slot); err != nil {
				return err
			}
			posted++
		}
		if _, err := c.expect(ctx, await, verbs.WCSend); err != nil {
			return err
		}
		c.WCSend++
		if o.Verbose {
			o.Printf("message %d of %d bytes sent", c.WCSend, c.DataSize)
		}
	}
	c.reportThroughput("sent", c.WCSend, time.Since(start))
	return nil
}

// PostBlastReceives posts the agent's first receives, one per buffer of
// the window (but no more than Limit), before it accepts the connection.
func (c *Control) PostBlastReceives() error {
	for i := 0; i < len(c.recvWR) && uint64(i) < c.Limit; i++ {
		if err := c.PostRecv(i); err != nil {
			return err
		}
	}
	return nil
}

// BlastAgent receives Limit messages (the blast agent's operation): as
// each receive completes it checks the message's length (and with -V its
// pattern: RC delivers in order) and posts the buffer's receive again
// while more messages are due.
func (c *Control) BlastAgent(ctx context.Context, await AwaitFunc) error {
	o := c.o
	window := uint64(len(c.recvWR))
	posted := min(window, c.Limit)
	start := time.Now()
	c.WCRecv = 0
	for c.WCRecv < c.Limit {
		wc, err := c.expect(ctx, await, verbs.WCRecv)
		if err != nil {
			return err
		}
		if err := c.checkLen(&wc); err != nil {
			return err
		}
		slot := int(wc.WRID - RecvWRIDBase)
		if o.Verify && !Check(c.userData[slot], c.WCRecv) {
			err := fmt.Errorf("message %d does not hold its pattern", c.WCRecv)
			o.ReportError("our_verify_data", err)
			return err
		}
		c.WCRecv++
		if o.Verbose {
			o.Printf("message %d of %d bytes received", c.WCRecv, c.DataSize)
		}
		if posted < c.Limit {
			if err := c.pause(ctx); err != nil {
				return err
			}
			if err := c.PostRecv(slot); err != nil {
				return err
			}
			posted++
		}
	}
	c.reportThroughput("received", c.WCRecv, time.Since(start))
	return nil
}

func (c *Control) reportThroughput(what string, n uint64, d time.Duration) {
	s := max(d.Seconds(), 1e-9)
	bytes := float64(n) * float64(c.DataSize)
	c.o.Printf("%s %d messages of %d bytes (%.3f MB) in %.3f s: %.2f MB/s, %.1f Mbit/s, %.0f messages/s",
		what, n, c.DataSize, bytes/1e6, d.Seconds(), bytes/1e6/s, bytes*8/1e6/s, float64(n)/s)
}
