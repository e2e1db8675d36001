package link

import (
	"encoding/binary"
	"fmt"
	"net"
	"net/netip"
	"os"
	"syscall"
	"unsafe"

	"golang.org/x/sys/unix"
)

// oobSize is the room for the control messages of one received datagram:
// its traffic class, its hop limit, the socket's drop count and, with GRO,
// its segment size, each an aligned cmsghdr and an int (24 bytes on 64-bit
// systems), with room to spare.
const oobSize = 128

// receiver holds what recvmmsg needs, allocated once with the link.
//
// Without GRO the iovecs point into the caller's packet buffers, so
// datagrams land where Recv returns them, without a copy. With GRO a
// datagram may hold a run of packets, up to 64 KiB, so the iovecs point into
// scratch buffers of that size, and Recv copies the packets out (see
// recvGRO).
type receiver struct {
	raw    syscall.RawConn
	pfd    *pollFD               // raw, for WaitReadable
	readFn func(fd uintptr) bool // r.read, bound once
	tryFn  func(fd uintptr)      // one r.read, not waiting (TryRecv), bound once
	drain  func(fd uintptr) int  // reads the error queue, returning how many it read
	want   int                   // messages to ask for
	got    int                   // messages received
	err    syscall.Errno         // the error recvmmsg failed with
	hdrs   [batchSize]mmsghdr
	iovs   [batchSize]unix.Iovec
	names  [batchSize]unix.RawSockaddrInet6 // large enough for either family
	oob    [batchSize][oobSize / 8]uint64   // uint64 for cmsghdr alignment

	// With GRO: whether it is on, the scratch buffers (groBuffers of
	// groBufSize bytes, one per message), the datagrams the last
	// recvmmsg brought, dgrams[next:ndgrams] still holding packets to
	// hand out, and the number of datagrams read (for tests).
	gro           bool
	scratch       []byte
	dgrams        [groBuffers]groDatagram
	next, ndgrams int
	datagramsRead uint64
}

func (r *receiver) init(raw *pollFD, gro bool) {
	r.raw, r.pfd = raw, raw
	r.readFn = r.read
	r.tryFn = func(fd uintptr) { r.read(fd) }
	if gro {
		r.gro = true
		r.scratch = make([]byte, groBuffers*groBufSize)
		for i := range groBuffers {
			r.iovs[i].Base = &r.scratch[i*groBufSize]
			r.iovs[i].SetLen(groBufSize)
		}
	}
}

// read is the RawConn.Read callback: one recvmmsg, retried on EINTR. It
// returns false to wait for the socket to become readable.
//
// The socket does not block (the runtime made it so, and its duplicate
// shares that), so the call is made without telling the scheduler
// (RawSyscall6), as a memmove of what is queued would be: the scheduler's
// bookkeeping around a system call costs a busy poll, which makes this
// call over and over, a few hundred nanoseconds each time.
func (r *receiver) read(fd uintptr) bool {
	for {
		n, _, e := unix.RawSyscall6(unix.SYS_RECVMMSG, fd, uintptr(unsafe.Pointer(&r.hdrs[0])), uintptr(r.want), 0, 0, 0)
		switch {
		case e == 0:
			r.got = int(n)
			return true
		case e == unix.EAGAIN:
			return false
		case r.again(fd, e):
			continue
		}
		r.err = e
		return true
	}
}

// again reports whether a receive call that failed with e is to be made
// again: it was interrupted, or the socket's error was an ICMP error for
// something we sent (IP_RECVERR), which it reports from the error queue.
func (r *receiver) again(fd uintptr, e syscall.Errno) bool {
	return e == unix.EINTR || netError(e) && r.drain != nil && r.drain(fd) > 0
}

// recv implements Recv with recvmmsg. Called with recvMu held.
func (u *UDP) recv(pkts []Packet) (int, error) { return u.recvWith(pkts, true) }

// TryRecv implements TryReceiver: Recv that returns 0 at once when no
// packet is waiting, neither in the link (Held) nor on the socket. It must
// not be called while a Recv waits (it would return 0).
func (u *UDP) TryRecv(pkts []Packet) (int, error) {
	if u.closed.Load() {
		return 0, net.ErrClosed
	}
	if len(pkts) == 0 || !u.recvMu.TryLock() {
		return 0, nil
	}
	defer u.recvMu.Unlock()
	return u.recvWith(pkts, false)
}

// Held implements TryReceiver: with GRO, a read brings up to a few
// datagrams of up to 64 packets each, and those that did not fit in the
// caller's buffers wait in the link for the next Recv or TryRecv.
func (u *UDP) Held() bool {
	u.recvMu.Lock()
	defer u.recvMu.Unlock()
	r := &u.receiver
	return r.next < r.ndgrams
}

// WaitReadable implements TryReceiver: it blocks until the socket has a
// datagram (or an error) to read, or packets are held, reading nothing. An
// ICMP error pending on the socket (IP_RECVERR) is reported from the error
// queue on the way.
func (u *UDP) WaitReadable() error {
	if u.Held() {
		return nil
	}
	sockErr, err := u.receiver.pfd.waitReadable()
	if err != nil {
		return closedError(err)
	}
	if sockErr && u.receiver.drain != nil {
		u.receiver.raw.Control(func(fd uintptr) { u.receiver.drain(fd) })
	}
	return nil
}

// recvWith reads packets through the receiver, waiting for one if wait.
func (u *UDP) recvWith(pkts []Packet, wait bool) (int, error) {
	r := &u.receiver
	if r.gro {
		return u.recvGRO(pkts, wait)
	}
	want := min(len(pkts), batchSize)
	for i := range want {
		b := pkts[i].Buf[:cap(pkts[i].Buf)]
		if len(b) == 0 {
			return 0, noCapacity(i)
		}
		r.iovs[i].Base = &b[0]
		r.iovs[i].SetLen(len(b))
	}
	for {
		if err := r.readBatch(want, wait); err != nil {
			return 0, err
		}
		if r.got == 0 {
			return 0, nil // not waiting, found nothing
		}
		k := 0
		for i := range r.got {
			h := &r.hdrs[i]
			if h.Hdr.Flags&unix.MSG_TRUNC != 0 {
				u.stats.truncated.Add(1)
				continue
			}
			from := sockaddrAddrPort(&r.names[i])
			p := &pkts[i]
			p.Buf = p.Buf[:h.Len]
			if !u.accept(p.Buf, from) {
				continue
			}
			c := r.control(i)
			if c.hasDrops {
				u.stats.overflow.Store(uint64(c.drops))
			}
			if k != i {
				// Move the packet down over a dropped one, swapping
				// buffers so that the caller keeps every buffer it gave.
				pkts[k].Buf, p.Buf = p.Buf, pkts[k].Buf[:0]
			}
			q := &pkts[k]
			q.Addr, q.TClass, q.HopLimit = from.Addr(), c.tclass, c.hop
			k++
		}
		if k > 0 {
			u.stats.received.Add(uint64(k))
			return k, nil
		}
	}
}

// sockaddrAddrPort returns the address and port of a sockaddr_in or
// sockaddr_in6, IPv4 in plain form. The IPv6 scope is left out: a GID has
// none.
func sockaddrAddrPort(sa *unix.RawSockaddrInet6) netip.AddrPort {
	if sa.Family == unix.AF_INET {
		sa4 := (*unix.RawSockaddrInet4)(unsafe.Pointer(sa))
		port := (*[2]byte)(unsafe.Pointer(&sa4.Port))
		return netip.AddrPortFrom(netip.AddrFrom4(sa4.Addr), binary.BigEndian.Uint16(port[:]))
	}
	port := (*[2]byte)(unsafe.Pointer(&sa.Port))
	return netip.AddrPortFrom(netip.AddrFrom16(sa.Addr).Unmap(), binary.BigEndian.Uint16(port[:]))
}

// putSockaddr fills sa with dst and port as a sockaddr_in or sockaddr_in6
// (with scope for link-local IPv6) and returns its length.
func putSockaddr(sa *unix.RawSockaddrInet6, dst netip.Addr, port uint16, scope uint32) uint32 {
	if dst.Is4() {
		sa4 := (*unix.RawSockaddrInet4)(unsafe.Pointer(sa))
		*sa4 = unix.RawSockaddrInet4{Family: unix.AF_INET, Addr: dst.As4()}
		binary.BigEndian.PutUint16((*[2]byte)(unsafe.Pointer(&sa4.Port))[:], port)
		return unix.SizeofSockaddrInet4
	}
	*sa = unix.RawSockaddrInet6{Family: unix.AF_INET6, Addr: dst.As16()}
	if dst.IsLinkLocalUnicast() {
		sa.Scope_id = scope
	}
	binary.BigEndian.PutUint16((*[2]byte)(unsafe.Pointer(&sa.Port))[:], port)
	return unix.SizeofSockaddrInet6
}

// noCapacity is the error of Recv given a buffer it cannot fill.
func noCapacity(i int) error {
	return fmt.Errorf("rxe/link: Recv: packet %d has a buffer of no capacity", i)
}

// control is what the control messages of a received datagram say.
type control struct {
	tclass, hop uint8  // traffic class and hop limit
	drops       uint32 // the socket's drop count, if hasDrops
	hasDrops    bool
	seg         int // with GRO, the size of the packets the datagram holds (0: one packet)
}

// control parses the control messages of message i of the last recvmmsg.
func (r *receiver) control(i int) control {
	oob := unsafe.Slice((*byte)(unsafe.Pointer(&r.oob[i][0])), oobSize)
	return parseControl(oob[:min(int(r.hdrs[i].Hdr.Controllen), oobSize)])
}

// parseControl reads the control messages of a received datagram: its
// traffic class and hop limit (IP_TOS and IP_TTL, or IPV6_TCLASS and
// IPV6_HOPLIMIT), the socket's drop count (SO_RXQ_OVFL, present once the
// socket has dropped something) and, for a datagram coalesced from several
// (UDP_GRO), their size.
func parseControl(b []byte) control {
	var c control
	hdrLen := unix.CmsgLen(0)
	for len(b) >= hdrLen {
		h := (*unix.Cmsghdr)(unsafe.Pointer(&b[0]))
		n := int(h.Len)
		if n < hdrLen || n > len(b) {
			break
		}
		data := b[hdrLen:n]
		switch {
		case h.Level == unix.IPPROTO_IP && h.Type == unix.IP_TOS && len(data) >= 1:
			c.tclass = data[0]
		case h.Level == unix.IPPROTO_IP && h.Type == unix.IP_TTL && len(data) >= 4:
			c.hop = uint8(binary.NativeEndian.Uint32(data))
		case h.Level == unix.IPPROTO_IPV6 && h.Type == unix.IPV6_TCLASS && len(data) >= 4:
			c.tclass = uint8(binary.NativeEndian.Uint32(data))
		case h.Level == unix.IPPROTO_IPV6 && h.Type == unix.IPV6_HOPLIMIT && len(data) >= 4:
			c.hop = uint8(binary.NativeEndian.Uint32(data))
		case h.Level == unix.SOL_SOCKET && h.Type == unix.SO_RXQ_OVFL && len(data) >= 4:
			c.drops, c.hasDrops = binary.NativeEndian.Uint32(data), true
		case h.Level == unix.SOL_UDP && h.Type == unix.UDP_GRO && len(data) >= 4:
			c.seg = int(int32(binary.NativeEndian.Uint32(data)))
		}
		b = b[min(unix.CmsgSpace(n-hdrLen), len(b)):]
	}
	return c
}

// readBatch reads up to want datagrams with one recvmmsg into the first
// want slots (whose iovecs the caller has set), leaving the count in r.got;
// unless wait, it leaves 0 there rather than wait for one.
func (r *receiver) readBatch(want int, wait bool) error {
	for i := range want {
		h := &r.hdrs[i].Hdr
		h.Name = (*byte)(unsafe.Pointer(&r.names[i]))
		h.Namelen = unix.SizeofSockaddrInet6
		h.Iov = &r.iovs[i]
		h.SetIovlen(1)
		h.Control = (*byte)(unsafe.Pointer(&r.oob[i][0]))
		h.SetControllen(oobSize)
		h.Flags = 0
	}
	r.want, r.got, r.err = want, 0, 0
	var err error
	if wait {
		err = r.raw.Read(r.readFn)
	} else {
		err = r.raw.Control(r.tryFn) // EAGAIN leaves r.got at 0
	}
	if err != nil {
		return closedError(err)
	}
	if r.err != 0 {
		return os.NewSyscallError("recvmmsg", r.err)
	}
	return nil
}
