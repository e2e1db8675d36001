package link

import (
	"net/netip"
	"syscall"
	"unsafe"

	"golang.org/x/sys/unix"
)

// netError reports whether e is an error the kernel sets on a UDP socket
// with IP_RECVERR when an ICMP error comes back for something it sent.
func netError(e syscall.Errno) bool {
	switch e {
	case unix.ECONNREFUSED, unix.EHOSTUNREACH, unix.ENETUNREACH, unix.EHOSTDOWN, unix.ENOPROTOOPT, unix.EPROTO:
		return true
	}
	return false
}

// drainErrors reads the socket's error queue and hands each ICMP error to
// the link's reporter goroutine, returning how many it read. Called from a
// RawConn callback, so it calls nothing of the caller's: a report that
// finds the reporter's queue full is dropped (and counted).
func (u *UDP) drainErrors(fd uintptr) int {
	var buf [256]byte
	var oob [256]byte
	read := 0
	for {
		n, oobn, _, from, err := unix.Recvmsg(int(fd), buf[:], oob[:], unix.MSG_ERRQUEUE|unix.MSG_DONTWAIT)
		if err == unix.EINTR {
			continue
		}
		if err != nil {
			return read
		}
		read++
		u.stats.unreachable.Add(1)
		errno := extendedErrno(oob[:oobn])
		if u.reports == nil || errno == 0 || n < MinPacket-4 {
			continue
		}
		var dst netip.Addr
		switch sa := from.(type) {
		case *unix.SockaddrInet4:
			dst = netip.AddrFrom4(sa.Addr)
		case *unix.SockaddrInet6:
			dst = netip.AddrFrom16(sa.Addr).Unmap()
		default:
			continue
		}
		select {
		case u.reports <- report{dst: dst, errno: errno, pkt: append([]byte(nil), buf[:n]...)}:
		default:
		}
	}
}

// startReporter starts the goroutine that calls the Unreachable function
// outside the socket's callbacks, where it may take any lock. Close stops
// it.
func (u *UDP) startReporter() {
	u.reports = make(chan report, 64)
	u.done = make(chan struct{})
	u.reporter.Add(1)
	go func() {
		defer u.reporter.Done()
		for {
			select {
			case r := <-u.reports:
				if fn := u.unreachable.Load(); fn != nil {
					(*fn)(r.dst, r.errno, r.pkt)
				}
			case <-u.done:
				return
			}
		}
	}()
}

// extendedErrno returns the errno of the IP_RECVERR or IPV6_RECVERR control
// message in oob (struct sock_extended_err), or 0.
func extendedErrno(oob []byte) syscall.Errno {
	msgs, err := unix.ParseSocketControlMessage(oob)
	if err != nil {
		return 0
	}
	for _, m := range msgs {
		if (m.Header.Level == unix.IPPROTO_IP && m.Header.Type == unix.IP_RECVERR ||
			m.Header.Level == unix.IPPROTO_IPV6 && m.Header.Type == unix.IPV6_RECVERR) &&
			len(m.Data) >= int(unsafe.Sizeof(unix.SockExtendedErr{})) {
			ee := (*unix.SockExtendedErr)(unsafe.Pointer(&m.Data[0]))
			if ee.Origin == unix.SO_EE_ORIGIN_ICMP || ee.Origin == unix.SO_EE_ORIGIN_ICMP6 {
				return syscall.Errno(ee.Errno)
			}
		}
	}
	return 0
}

// watchErrors reads what a socket that only sends is told (ICMP errors,
// and any datagram a peer sends back to its port, which is dropped) until
// the link closes.
func (u *UDP) watchErrors() {
	raw := u.receiver.raw
	var buf [64]byte
	for {
		err := raw.Read(func(fd uintptr) bool {
			for {
				_, _, e := unix.Recvfrom(int(fd), buf[:], unix.MSG_DONTWAIT)
				switch {
				case e == unix.EAGAIN:
					return false
				case e == unix.EINTR || e == nil:
					continue
				case netError(e.(syscall.Errno)) && u.drainErrors(fd) > 0:
					continue
				}
				return true
			}
		})
		if err != nil || u.closed.Load() {
			return
		}
	}
}
