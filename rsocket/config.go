package rsocket

import (
	"time"
)

// A Conn's options and the sizes they come to.

// Config holds rsockets' tunables: the files of rsocket's configuration
// directory and the socket options that override them. The zero value
// means librdmacm's defaults, so both sides agree with a C peer's.
type Config struct {
	// RecvBuffer is the size of the receive ring the peer writes into
	// (mem_default; SO_RCVBUF sets twice the value it is given). Default
	// 128 KiB, at least 4 KiB.
	RecvBuffer int
	// SendBuffer is the size of the registered buffer sends are copied
	// into (wmem_default; SO_SNDBUF). Default 128 KiB, at least 4 KiB.
	SendBuffer int
	// QueueSize is the number of send and of receive work requests
	// (sqsize_default, rqsize_default): 384 by default, within [16,
	// 65534]. The receive queue size is the credit the peer is given.
	QueueSize int
	// InlineSize is the largest send posted inline (inline_default,
	// RDMA_INLINE): 64 by default; negative means none.
	InlineSize int
	// KeepAlive is the period of keepalive messages (SO_KEEPALIVE with
	// TCP_KEEPIDLE): DefaultKeepAlive if zero, none if negative. A
	// keepalive is a zero-length RDMA WRITE, which the peer's device
	// acknowledges without its application (C's rsockets send theirs
	// with an immediate, which takes a receive at the peer; either
	// side takes either). Keepalives or not, a Read or Write that waits
	// on a peer with nothing outstanding sends the same probe every
	// 2 s, and a peer that acknowledges nothing for three looks in a
	// row (every 2 s, or every KeepAlive if shorter) is given up on:
	// reads and writes fail with an error wrapping syscall.ETIMEDOUT,
	// within 8 s. (Software RoCE retries for ever with rsockets' retry
	// count of 7, so the QP alone would never give up.)
	KeepAlive time.Duration
	// ACKTimeout is the QP's local ACK timeout code (4.096 µs << code;
	// rdma_set_option RDMA_OPTION_ID_ACK_TIMEOUT); 0 means rdma_cm's
	// default, 19 (about 2.1 s). A peer that vanishes is given up on
	// after 8 such timeouts.
	ACKTimeout uint8
	// PollTime is how long a Read or Write that must wait for the peer
	// polls for it before it sleeps (rsockets' polling_time):
	// DefaultPollTime if zero, no polling if negative. Polls run on
	// the waiting goroutine and, on the software device, read the
	// network themselves, so an answer that comes within it costs no
	// wake-up; at most GOMAXPROCS goroutines of a process poll at
	// once, and an idle connection polls for no longer than this once
	// before it sleeps.
	PollTime time.Duration
	// IOMapSize is the number of entries of this side's target iomap
	// (RDMA_IOMAPSIZE): how many buffers the peer may map with riomap
	// for this side to riowrite into (see IOMap and IOWrite). 0, the
	// default, means none; the value is rounded as rsockets rounds it
	// and bounded by 32512.
	IOMapSize int
}

func (c *Config) pollTime() time.Duration {
	switch {
	case c.PollTime == 0:
		return DefaultPollTime
	case c.PollTime < 0:
		return 0
	}
	return c.PollTime
}

func (c *Config) sizes() (rbuf, sbuf, qsize, inline int) {
	rbuf, sbuf, qsize, inline = c.RecvBuffer, c.SendBuffer, c.QueueSize, c.InlineSize
	if rbuf == 0 {
		rbuf = defaultBuffer
	}
	if sbuf == 0 {
		sbuf = defaultBuffer
	}
	rbuf = max(rbuf, 2*sndLowat) &^ 1 // two equal halves
	sbuf = max(sbuf, 2*sndLowat)
	if qsize == 0 {
		qsize = defaultQueueSize
	}
	qsize = min(max(qsize, qpMinSize), qpMaxSize)
	switch {
	case inline == 0:
		inline = defaultInline
	case inline < 0:
		inline = 0
	}
	return
}

func (c *Config) keepAlive() time.Duration {
	switch {
	case c.KeepAlive == 0:
		return DefaultKeepAlive
	case c.KeepAlive < 0:
		return 0
	}
	return c.KeepAlive
}
