package rsocket

import (
	"io"
	"net"
	"time"
)

// ReadFrom reads from r straight into the registered send buffer and
// sends what it reads, until r returns io.EOF: io.Copy to a Conn uses
// it, and saves the copy Write makes. It returns the bytes sent.
func (c *Conn) ReadFrom(r io.Reader) (int64, error) {
	c.wmu.Lock()
	defer c.wmu.Unlock()
	c.mu.Lock()
	defer c.mu.Unlock()
	if err := c.usable(c.wdl); err != nil {
		return 0, c.opError("readfrom", err)
	}
	var sent int64
	var since time.Time // when the call first polled since it last sent (spin)
	for {
		switch {
		case c.closing:
			return sent, c.opError("readfrom", net.ErrClosed)
		case !c.writable:
			return sent, c.opError("readfrom", c.writeErr())
		case !c.canSend():
			if err := c.wait(c.wdl, &since); err != nil {
				return sent, c.opError("readfrom", err)
			}
			continue
		}
		// The free space at the buffer's head, in one piece, as much as
		// the target entry takes: no one else touches it while wmu is
		// held, and the peer's credits only ever grow.
		size := min(maxTransfer, c.sbufAvail, c.sbufSize-c.sbufHead, int(c.tgt[c.tgtIdx].Length))
		region := c.smr.Buf()[c.sbufHead : c.sbufHead+size]
		c.mu.Unlock()
		n, err := r.Read(region)
		c.mu.Lock()
		if c.closing {
			return sent, c.opError("readfrom", net.ErrClosed)
		}
		if n > 0 {
			if !c.writable {
				return sent, c.opError("readfrom", c.writeErr())
			}
			c.postData(n)
			sent += int64(n)
			since = time.Time{}
		}
		if err == io.EOF {
			return sent, nil
		}
		if err != nil {
			return sent, err
		}
	}
}

// WriteTo writes what the peer sends to w, straight from the receive
// ring, until the peer shuts down its side (then it returns nil) or the
// connection fails: io.Copy from a Conn uses it, and saves the copy
// Read makes. It returns the bytes written.
func (c *Conn) WriteTo(w io.Writer) (int64, error) {
	c.rmu.Lock()
	defer c.rmu.Unlock()
	c.mu.Lock()
	defer c.mu.Unlock()
	if err := c.usable(c.rdl); err != nil {
		return 0, c.opError("writeto", err)
	}
	var written int64
	var since time.Time // when the call first polled since it last wrote (spin)
	ring := c.rmr.Buf()
	for {
		if c.closing {
			return written, c.opError("writeto", net.ErrClosed)
		}
		for c.rmsgLen == 0 {
			switch {
			case c.closing:
				return written, c.opError("writeto", net.ErrClosed)
			case !c.readable && c.err != nil:
				return written, c.opError("writeto", c.err)
			case !c.readable:
				return written, nil
			}
			if err := c.wait(c.rdl, &since); err != nil {
				return written, c.opError("writeto", err)
			}
		}
		// The data received, in one piece up to the ring's end: the peer
		// writes there again only once it is consumed and given back.
		size := 0
		for i := 0; i < c.rmsgLen && c.rbufOff+size < c.rbufSize; i++ {
			size += int(c.rmsg[(c.rmsgHead+i)%len(c.rmsg)])
		}
		size = min(size, c.rbufSize-c.rbufOff)
		data := ring[c.rbufOff : c.rbufOff+size]
		c.mu.Unlock()
		n, err := w.Write(data)
		c.mu.Lock()
		if c.closing {
			return written + int64(n), c.opError("writeto", net.ErrClosed)
		}
		c.consume(n)
		written += int64(n)
		since = time.Time{}
		c.updateCredits()
		if err != nil {
			return written, err
		}
		if n < size {
			return written, io.ErrShortWrite
		}
	}
}
