package link

import (
	"encoding/binary"
	"fmt"
	"net/netip"
	"os"
	"syscall"
	"unsafe"

	"golang.org/x/sys/unix"
)

// maxGSOSegments is the most packets the link puts in one UDP GSO send
// (UDP_MAX_SEGMENTS is 64 in Linux before 6.2 and 128 since).
const maxGSOSegments = 64

// sender holds what sendmmsg needs, allocated once with the link. A message
// is a single packet or, with GSO, a run of packets to one peer, all of one
// size but the last, which may be shorter: the kernel cuts the message into
// one datagram per packet. Each packet has its own iovec, so packets are
// sent from the caller's buffers without a copy.
type sender struct {
	raw     syscall.RawConn
	writeFn func(fd uintptr) bool // s.write, bound once
	drain   func(fd uintptr) int  // reads the error queue, returning how many it read
	gso     bool                  // whether to build GSO messages
	drained bool                  // the error queue was read during this write
	wait    bool                  // write waits for room; otherwise it stops, setting full
	full    bool                  // the socket had no room for message off

	// sendmmsg is the system call (a seam: tests push back with it).
	sendmmsg func(fd uintptr, hdrs *mmsghdr, n int) (int, syscall.Errno)

	n    int           // messages packed
	off  int           // messages sent
	sent int           // packets sent by the last Write
	err  syscall.Errno // the error sendmmsg failed with on message off

	hdrs  [batchSize]mmsghdr
	iovs  [batchSize]unix.Iovec
	names [batchSize]unix.RawSockaddrInet6
	oob   [batchSize][4]uint64 // a UDP_SEGMENT cmsg per message (24 bytes on 64-bit systems)

	// Per message: the index in pkts of its first packet and one past
	// its last, its packet count, its segment (first packet) size, its
	// total size and its destination.
	first, end, count, seg, bytes [batchSize]int
	dst                           [batchSize]netip.Addr
}

func (s *sender) init(raw syscall.RawConn, gso, wait bool) {
	s.raw = raw
	s.writeFn = s.write
	s.gso = gso
	s.wait = wait
	s.sendmmsg = sendmmsg
}

// sendmmsg sends up to n messages from hdrs, without blocking.
func sendmmsg(fd uintptr, hdrs *mmsghdr, n int) (int, syscall.Errno) {
	r, _, e := unix.RawSyscall6(unix.SYS_SENDMMSG, fd, uintptr(unsafe.Pointer(hdrs)), uintptr(n), 0, 0, 0)
	return int(r), e
}

// write is the RawConn.Write callback: sendmmsg until every packed message is
// sent, an error stops it (left in s.err, at message s.off) or the socket
// buffer is full (it returns false to wait for room if s.wait, and sets
// s.full otherwise). Like receiver.read it does not tell the scheduler:
// the socket does not block.
func (s *sender) write(fd uintptr) bool {
	s.drained = false
	for s.off < s.n {
		n, e := s.sendmmsg(fd, &s.hdrs[s.off], s.n-s.off)
		switch {
		case e == unix.EINTR:
			continue
		case e == unix.EAGAIN || e == 0 && n == 0:
			if !s.wait {
				s.full = true
				return true
			}
			return false
		case netError(e) && s.drain != nil && !s.drained && s.drain(fd) > 0:
			// The error was an earlier packet's ICMP error, pending on
			// the socket (IP_RECVERR): reported; send again, once. An
			// error with nothing queued is this send's own (no route).
			s.drained = true
			continue
		case e != 0:
			s.err = e
			return true
		}
		for range n {
			s.sent += s.count[s.off]
			s.off++
		}
	}
	return true
}

// send sends pkts with sendmmsg through s. If the socket has no room and
// s does not wait, it returns the index of the first packet left unsent
// and the index of the first packet not yet checked (those between were,
// and the bad ones among them counted); otherwise both are len(pkts).
// Called with s's lock held: sendMu for u.sender, the drainer alone for
// u.drainer.
func (u *UDP) send(s *sender, pkts []Packet) (rest, checked int, err error) {
	var firstErr error
	next := 0  // the first packet not yet packed
	plain := 0 // packets before this index go one per message
	// Let go of the caller's buffers once sent.
	defer clear(s.iovs[:])
	for next < len(pkts) {
		next = u.pack(s, pkts, next, plain, &checked, &firstErr)
		for s.off < s.n {
			s.sent, s.err, s.full = 0, 0, false
			err := s.raw.Write(s.writeFn)
			u.stats.sent.Add(uint64(s.sent))
			if err != nil {
				return len(pkts), len(pkts), closedError(err)
			}
			if s.full {
				return s.first[s.off], checked, firstErr
			}
			if s.err == 0 {
				continue
			}
			m := s.off
			if s.count[m] > 1 {
				// The kernel refused a GSO message. Send its packets
				// again one by one, with their ICRCs recomputed for
				// ID 0: an error that is theirs (EMSGSIZE beyond the
				// MTU) meets each alone. EIO means the device cannot
				// checksum GSO sends: give GSO up for good, as
				// quic-go does.
				if s.err == unix.EIO {
					u.noGSO.Store(true) // for the drainer too
				}
				next, plain = s.first[m], s.end[m]
				break
			}
			u.stats.sendErrors.Add(1)
			if firstErr == nil {
				firstErr = fmt.Errorf("rxe/link: send to %v: %w", s.dst[m], os.NewSyscallError("sendmmsg", s.err))
			}
			s.off++
		}
	}
	return len(pkts), len(pkts), firstErr
}

// pack fills s's batch with messages for pkts[next:], computing each
// packet's ICRC, and returns the index of the first packet left for the next
// batch. Packets before plain are sent one per message; the others are
// grouped into GSO messages when s.gso allows, and the device has not
// refused one (noGSO). Bad packets are skipped, and
// those from index checked on are counted and reported in firstErr.
func (u *UDP) pack(s *sender, pkts []Packet, next, plain int, checked *int, firstErr *error) int {
	s.n, s.off = 0, 0
	iov := 0
	open := -1 // the message a packet of the same size may join, or -1
	i := next
	for ; i < len(pkts) && iov < batchSize; i++ {
		p := &pkts[i]
		dst, err := u.peer(p)
		if err != nil {
			if i >= *checked {
				u.stats.sendErrors.Add(1)
				if *firstErr == nil {
					*firstErr = err
				}
			}
			continue
		}
		size := len(p.Buf)
		s.iovs[iov].Base = &p.Buf[0]
		s.iovs[iov].SetLen(size)
		if m := open; m >= 0 && s.dst[m] == dst && !dst.IsMulticast() && size <= s.seg[m] &&
			s.count[m] < maxGSOSegments && s.bytes[m]+size <= u.maxPacket {
			// The kernel sends the k-th segment of a GSO message with
			// IPv4 ID k (see the package doc).
			ph := pseudoHeader(u.local, dst, u.srcPort, u.port, uint16(s.count[m]))
			ph.SetICRC(p.Buf)
			s.count[m]++
			s.bytes[m] += size
			s.end[m] = i + 1
			s.hdrs[m].Hdr.SetIovlen(s.count[m])
			if size < s.seg[m] {
				open = -1 // a short packet ends the run
			}
			iov++
			continue
		}
		ph := pseudoHeader(u.local, dst, u.srcPort, u.port, 0)
		ph.SetICRC(p.Buf)
		m := s.n
		s.n++
		s.first[m], s.end[m], s.count[m], s.seg[m], s.bytes[m], s.dst[m] = i, i+1, 1, size, size, dst
		h := &s.hdrs[m].Hdr
		h.Name = (*byte)(unsafe.Pointer(&s.names[m]))
		h.Namelen = putSockaddr(&s.names[m], dst, u.port, u.scope)
		h.Iov = &s.iovs[iov]
		h.SetIovlen(1)
		h.Control = nil
		h.SetControllen(0)
		h.Flags = 0
		iov++
		open = -1
		if s.gso && i >= plain && !u.noGSO.Load() {
			open = m
		}
	}
	*checked = max(*checked, i)
	for m := range s.n {
		if s.count[m] > 1 {
			putSegmentSize(&s.hdrs[m].Hdr, s.oob[m][:], s.seg[m])
		}
	}
	return i
}

// putSegmentSize attaches to h a UDP_SEGMENT control message, built in oob,
// asking the kernel to cut the message into datagrams of size bytes.
func putSegmentSize(h *unix.Msghdr, oob []uint64, size int) {
	b := unsafe.Slice((*byte)(unsafe.Pointer(&oob[0])), len(oob)*8)
	c := (*unix.Cmsghdr)(unsafe.Pointer(&b[0]))
	c.Level = unix.IPPROTO_UDP
	c.Type = unix.UDP_SEGMENT
	c.SetLen(unix.CmsgLen(2))
	binary.NativeEndian.PutUint16(b[unix.CmsgLen(0):], uint16(size))
	h.Control = &b[0]
	h.SetControllen(unix.CmsgSpace(2))
}
