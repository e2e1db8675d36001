package link

import (
	"bufio"
	"encoding/binary"
	"errors"
	"io"
	"net"
	"net/netip"
	"sync"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// Forwarding: the leader of a shared address passes each packet for
// another process (its owner) over a Unix stream socket to that process.

// fwdPacket is a packet forwarded by the leader, on its way to Recv.
type fwdPacket struct {
	buf         []byte
	n           int
	addr        netip.Addr
	tclass, hop uint8
}

// Forwarding goes over a stream socket from the leader to each owner
// (datagram sockets queue at most net.unix.max_dgram_qlen packets, 10 by
// default, far fewer than a burst). Each packet is framed as its length
// (2 bytes), the header and the packet.
const (
	fwdQueue       = 1024                   // forwarded packets waiting for Recv
	maxForwarded   = 65535                  // the longest packet a frame carries
	smallForwarded = 4096 + 256             // a packet of the largest path MTU, with room for its headers
	fwdSendBuffer  = 1 << 20                // the leader's socket buffer towards each owner
	fwdRedial      = 100 * time.Millisecond // how long after a failure before trying an owner again
)

// acceptLeaders takes the connections of the leaders (one at a time, a
// new one after a takeover) and reads their packets into inq.
func (s *Shared) acceptLeaders() {
	defer s.wg.Done()
	for {
		c, err := s.fwd.AcceptUnix()
		if err != nil {
			return
		}
		if !s.trusted(c) {
			// Another user's process, offering packets it made up.
			s.refused.Add(1)
			c.Close()
			continue
		}
		s.svcMu.Lock()
		if s.closed.Load() {
			s.svcMu.Unlock()
			c.Close()
			return
		}
		s.conns[c] = struct{}{}
		s.svcMu.Unlock()
		s.wg.Add(1)
		go s.readLeader(c)
	}
}

// readLeader reads framed packets from a leader's connection until it
// closes. A packet that finds inq full is dropped, as a full socket
// buffer drops it.
func (s *Shared) readLeader(c *net.UnixConn) {
	defer s.wg.Done()
	defer func() {
		s.svcMu.Lock()
		delete(s.conns, c)
		s.svcMu.Unlock()
		c.Close()
	}()
	r := bufio.NewReaderSize(c, 256<<10)
	var head [2 + fwdHeaderLen]byte
	for {
		if _, err := io.ReadFull(r, head[:]); err != nil {
			return
		}
		n := int(binary.BigEndian.Uint16(head[:2]))
		h := head[2:]
		fp := s.getFwd(n)
		if _, err := io.ReadFull(r, fp.buf[:n]); err != nil {
			s.putFwd(fp)
			return
		}
		if h[0] != 1 || n < MinPacket {
			s.putFwd(fp)
			continue
		}
		fp.n, fp.tclass, fp.hop = n, h[1], h[2]
		fp.addr = netip.AddrFrom16([16]byte(h[8:24])).Unmap()
		select {
		case s.inq <- fp:
		default:
			s.putFwd(fp)
			s.forwardDrops.Add(1)
		}
	}
}

// getFwd returns a buffer for a forwarded packet of n bytes: from the pool
// for the packets of any path MTU, made to measure for longer ones.
func (s *Shared) getFwd(n int) *fwdPacket {
	if n > smallForwarded {
		return &fwdPacket{buf: make([]byte, n)}
	}
	return s.bufs.Get().(*fwdPacket)
}

// putFwd gives a buffer from getFwd back.
func (s *Shared) putFwd(fp *fwdPacket) {
	if len(fp.buf) == smallForwarded {
		s.bufs.Put(fp)
	}
}

// outConn is the leader's connection to one owner.
type outConn struct {
	mu      sync.Mutex
	c       *net.UnixConn
	raw     syscall.RawConn
	frame   []byte    // frames queued by Forward
	ends    []int     // where each queued frame ends in frame
	pending []byte    // the unwritten rest of a frame partly written
	retryAt time.Time // after a failure, no new connection before this
}

// Forward queues a packet this process received as leader for the
// process that owns it; Flush sends what is queued. A packet for an owner
// that has gone, or that does not keep up, is dropped and counted, as a
// network drops it.
func (s *Shared) Forward(owner uint8, p *Packet) error {
	if owner == s.owner {
		return errors.New("rxe/link: Forward of a packet to its own process")
	}
	if len(p.Buf) > maxForwarded || s.closed.Load() {
		s.forwardDrops.Add(1)
		return ErrPacketTooLarge
	}
	o := &s.outs[owner]
	o.mu.Lock()
	defer o.mu.Unlock()
	f := binary.BigEndian.AppendUint16(o.frame, uint16(len(p.Buf)))
	a16 := p.Addr.As16()
	f = append(f, 1, p.TClass, p.HopLimit, 0, 0, 0, 0, 0)
	f = append(f, a16[:]...)
	o.frame = append(f, p.Buf...)
	o.ends = append(o.ends, len(o.frame))
	if len(o.frame) >= 256<<10 {
		s.flush(owner, o)
	}
	return nil
}

// Flush sends the packets Forward queued, one write per owner.
func (s *Shared) Flush() {
	for i := range s.outs {
		o := &s.outs[i]
		o.mu.Lock()
		if len(o.ends) > 0 {
			s.flush(uint8(i), o)
		}
		o.mu.Unlock()
	}
}

// flush writes o's queued frames to owner without waiting (o.mu held).
// The leader never blocks on a follower: what does not fit in the socket
// buffer is dropped, whole frames only, so that the stream stays whole;
// the rest of a frame partly written is kept and goes first next time.
//
// There is one connection per owner. One that fails, having worked, was
// to a process that has ended or closed its link, and the owner number
// may be another process's already (the first free number is the one a
// process takes): the frames go to a new connection at once, or the
// newcomer's first packets would be lost, and with them, say, a
// connection request it sent itself, which its connection manager
// resends only seconds later. A dial that fails means nobody holds the
// number: the next one is tried only after fwdRedial, or after another
// process joined the address (admit).
func (s *Shared) flush(owner uint8, o *outConn) {
	frames, ends := o.frame, o.ends
	n := uint64(len(ends))
	o.frame, o.ends = o.frame[:0], o.ends[:0]
	if s.closed.Load() {
		s.forwardDrops.Add(n)
		return
	}
	dialed := false
	if o.c == nil {
		if time.Now().Before(o.retryAt) || !s.dialOut(owner, o) {
			s.forwardDrops.Add(n)
			return
		}
		dialed = true
	}
	k, err := s.writeOut(o, frames)
	if err != nil && !dialed {
		s.closeOut(o)
		if !s.dialOut(owner, o) {
			s.forwardDrops.Add(n)
			return
		}
		k, err = s.writeOut(o, frames)
	}
	if err != nil {
		s.closeOut(o)
		o.retryAt = time.Now().Add(fwdRedial)
		s.forwardDrops.Add(n)
		return
	}
	var whole uint64
	start := 0
	for _, e := range ends {
		if e > k {
			if k > start { // this frame went out in part: finish it next time
				o.pending = append(o.pending[:0], frames[k:e]...)
				whole++
			}
			break
		}
		whole++
		start = e
	}
	s.forwarded.Add(whole)
	s.forwardDrops.Add(n - whole)
}

// dialOut connects o to owner's process, reporting whether it did; if it
// did not, the next try waits for o.retryAt.
func (s *Shared) dialOut(owner uint8, o *outConn) bool {
	c, err := net.DialUnix("unix", nil, &net.UnixAddr{Name: s.fwdName(owner), Net: "unix"})
	if err != nil {
		o.retryAt = time.Now().Add(fwdRedial)
		return false
	}
	if !s.trusted(c) {
		// Another user's process took the owner's name: its
		// packets are not for it.
		c.Close()
		s.refused.Add(1)
		o.retryAt = time.Now().Add(fwdRedial)
		return false
	}
	c.SetWriteBuffer(fwdSendBuffer)
	raw, err := c.SyscallConn()
	if err != nil {
		c.Close()
		o.retryAt = time.Now().Add(fwdRedial)
		return false
	}
	o.c, o.raw, o.pending = c, raw, o.pending[:0]
	return true
}

// writeOut writes, on o's connection, the rest of a frame partly written
// before, and then what of frames the socket takes at once, returning
// how much of frames it wrote: nothing while the rest of that frame does
// not all fit. An error means the connection is broken.
func (s *Shared) writeOut(o *outConn, frames []byte) (int, error) {
	if len(o.pending) > 0 {
		k, err := writeNow(o.raw, o.pending)
		if err != nil {
			return 0, err
		}
		o.pending = append(o.pending[:0], o.pending[k:]...)
		if len(o.pending) > 0 {
			return 0, nil // the owner is not reading: drop, do not queue
		}
	}
	return writeNow(o.raw, frames)
}

// closeOut closes o's connection, with the rest of a frame partly
// written on it.
func (s *Shared) closeOut(o *outConn) {
	o.c.Close()
	o.c, o.raw, o.pending = nil, nil, o.pending[:0]
}

// forgetAbsent lets the next packet for any owner number try a
// connection at once, even one a dial found nobody at within fwdRedial:
// a process that joins the address has just taken one (admit).
func (s *Shared) forgetAbsent() {
	for i := range s.outs {
		o := &s.outs[i]
		o.mu.Lock()
		o.retryAt = time.Time{}
		o.mu.Unlock()
	}
}

// writeNow writes what the socket takes of b at once.
func writeNow(raw syscall.RawConn, b []byte) (int, error) {
	var n int
	var werr error
	err := raw.Write(func(fd uintptr) bool {
		for n < len(b) {
			k, err := unix.Write(int(fd), b[n:])
			if err == unix.EINTR {
				continue
			}
			if err == unix.EAGAIN {
				return true
			}
			if err != nil {
				werr = err
				return true
			}
			n += k
		}
		return true
	})
	if err == nil {
		err = werr
	}
	return n, err
}
