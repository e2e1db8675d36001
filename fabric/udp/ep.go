package udp

import (
	"errors"
	"net"
	"net/netip"
	"os"
	"strconv"
	"sync"
	"sync/atomic"
	"syscall"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/rdmago/rdmago/fabric"
	"github.com/rdmago/rdmago/fabric/internal/sockpoll"
)

// rxEntry is a posted receive.
type rxEntry struct {
	buf []byte
	ctx any
}

// ep is an FI_EP_DGRAM endpoint: a non-blocking UDP socket, the receives
// posted on it, and the goroutine that takes in datagrams while the
// program does not poll.
type ep struct {
	d    fabric.DomainRef
	info *fabric.Info
	ctx  any

	mu sync.Mutex
	fabric.EndpointBinds
	fd      int // the socket; -1 once closed
	bound   bool
	enabled bool
	closed  bool
	av      *fabric.AV
	rxq     []rxEntry
	wt      *sockpoll.Watch
	wg      sync.WaitGroup
	kick    chan struct{} // signalled when a receive is posted to an empty queue
	done    chan struct{} // closed by Close
	// polls counts the program's progress calls: while it keeps
	// changing, the program polls and the background loop stays out of
	// its way.
	polls atomic.Uint64

	from    unix.RawSockaddrAny // recvfrom's source, reused
	fromLen uint32
}

func (provider) Endpoint(d fabric.DomainRef, info *fabric.Info, context any) (fabric.EndpointDriver, error) {
	if info == nil || info.EPAttr == nil || info.EPAttr.Type != fabric.EPDgram {
		return nil, fabric.Errorf("fi_endpoint", fabric.ErrInvalid, "the udp provider's endpoints are FI_EP_DGRAM")
	}
	family := unix.AF_INET
	if info.AddrFormat == fabric.FormatSockaddrIn6 || info.SrcAddr.Addr().Is6() && !info.SrcAddr.Addr().Is4In6() {
		family = unix.AF_INET6
	}
	fd, err := unix.Socket(family, unix.SOCK_DGRAM|unix.SOCK_NONBLOCK|unix.SOCK_CLOEXEC, unix.IPPROTO_UDP)
	if err != nil {
		return nil, fabric.Errorf("fi_endpoint", sockpoll.Errno(err, fabric.ErrNoMemory), "socket: "+err.Error())
	}
	e := &ep{d: d, info: info.Dup(), ctx: context, fd: fd, kick: make(chan struct{}, 1), done: make(chan struct{})}
	e.Lock, e.Self = &e.mu, e
	if info.SrcAddr.IsValid() && !info.SrcAddr.Addr().IsUnspecified() {
		if err := e.bind(info.SrcAddr); err != nil {
			unix.Close(fd)
			return nil, fabric.Errorf("fi_endpoint", sockpoll.Errno(err, fabric.ErrAddrNotAvail), "binding "+info.SrcAddr.String()+": "+err.Error())
		}
	}
	return e, nil
}

// bind binds the socket to a. Called with e.mu held, or before the
// endpoint is shared.
func (e *ep) bind(a netip.AddrPort) error {
	sa, err := sockaddr(a)
	if err != nil {
		return err
	}
	if err := unix.Bind(e.fd, sa); err != nil {
		return err
	}
	e.bound = true
	return nil
}

// sockaddr is a as the socket calls take it.
func sockaddr(a netip.AddrPort) (unix.Sockaddr, error) {
	ip := a.Addr()
	switch {
	case ip.Is4() || ip.Is4In6():
		return &unix.SockaddrInet4{Port: int(a.Port()), Addr: ip.Unmap().As4()}, nil
	case ip.Is6():
		sa := &unix.SockaddrInet6{Port: int(a.Port()), Addr: ip.As16()}
		if z := ip.Zone(); z != "" {
			if ifi, err := net.InterfaceByName(z); err == nil {
				sa.ZoneId = uint32(ifi.Index)
			}
		}
		return sa, nil
	}
	return nil, errors.New("no address")
}

// hostAddr is what C's provider binds an endpoint enabled without a
// source address to: the host name's first IPv4 address, or 127.0.0.1.
func hostAddr() netip.Addr {
	if h, err := os.Hostname(); err == nil {
		if ips, err := net.LookupIP(h); err == nil {
			for _, ip := range ips {
				if a, ok := netip.AddrFromSlice(ip); ok && a.Unmap().Is4() {
					return a.Unmap()
				}
			}
		}
	}
	return netip.AddrFrom4([4]byte{127, 0, 0, 1})
}

// BindAV binds the address vector sends name their destinations in.
func (e *ep) BindAV(av *fabric.AV) error {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.av = av
	return nil
}

// Enable checks the bindings, binds the socket if nothing did yet, and
// starts the background progress.
func (e *ep) Enable() error {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.closed {
		return fabric.Errorf("fi_enable", fabric.ErrBadFD, "endpoint closed")
	}
	if e.enabled {
		return nil
	}
	if e.Comp.TxCQ == nil || e.Comp.RxCQ == nil {
		return fabric.Errorf("fi_enable", fabric.ErrNoCQ, "bind CQs for transmit and receive first")
	}
	if e.av == nil {
		return fabric.Errorf("fi_enable", fabric.ErrNoAV, "bind an AV first")
	}
	if !e.bound {
		a := netip.AddrPortFrom(hostAddr(), 0)
		if e.info.AddrFormat == fabric.FormatSockaddrIn6 {
			a = netip.AddrPortFrom(netip.IPv6Loopback(), 0)
		}
		if err := e.bind(a); err != nil {
			return fabric.Errorf("fi_enable", sockpoll.Errno(err, fabric.ErrAddrNotAvail), "binding "+a.String()+": "+err.Error())
		}
	}
	wt, err := sockpoll.Add(e.fd)
	if err != nil {
		return fabric.Errorf("fi_enable", sockpoll.Errno(err, fabric.ErrNoMemory), err.Error())
	}
	e.wt = wt
	e.enabled = true
	e.wg.Add(1)
	go e.background()
	return nil
}

// Name returns the socket's address (fi_getname): before Enable, the
// unspecified address and port 0 unless the entry named a source.
func (e *ep) Name() (netip.AddrPort, error) {
	e.mu.Lock()
	defer e.mu.Unlock()
	sa, err := unix.Getsockname(e.fd)
	if err != nil {
		return netip.AddrPort{}, fabric.Errorf("fi_getname", sockpoll.Errno(err, fabric.ErrInvalid), err.Error())
	}
	return fromSockaddr(sa), nil
}

func fromSockaddr(sa unix.Sockaddr) netip.AddrPort {
	switch s := sa.(type) {
	case *unix.SockaddrInet4:
		return netip.AddrPortFrom(netip.AddrFrom4(s.Addr), uint16(s.Port))
	case *unix.SockaddrInet6:
		return netip.AddrPortFrom(netip.AddrFrom16(s.Addr), uint16(s.Port))
	}
	return netip.AddrPort{}
}

// The connection calls: a datagram endpoint has none (C's fi_no_*).

func (e *ep) Connect(netip.AddrPort, []byte) error {
	return fabric.Errorf("fi_connect", fabric.ErrNoSys, "FI_EP_DGRAM endpoints do not connect")
}
func (e *ep) Accept([]byte) error {
	return fabric.Errorf("fi_accept", fabric.ErrNoSys, "FI_EP_DGRAM endpoints do not connect")
}
func (e *ep) Shutdown() error {
	return fabric.Errorf("fi_shutdown", fabric.ErrNoSys, "FI_EP_DGRAM endpoints do not connect")
}
func (e *ep) Peer() (netip.AddrPort, error) {
	return netip.AddrPort{}, fabric.Errorf("fi_getpeer", fabric.ErrNoSys, "FI_EP_DGRAM endpoints have no peer")
}

// RMA: not offered (C's provider has no FI_RMA).

func noRMA(op string) error {
	return fabric.Errorf(op, fabric.ErrNoSys, "the udp provider has no FI_RMA")
}
func (e *ep) Write([]byte, any, fabric.Addr, uint64, uint64, any) error { return noRMA("fi_write") }
func (e *ep) WriteData([]byte, any, uint64, fabric.Addr, uint64, uint64, any) error {
	return noRMA("fi_writedata")
}
func (e *ep) Read([]byte, any, fabric.Addr, uint64, uint64, any) error { return noRMA("fi_read") }
func (e *ep) InjectWrite([]byte, fabric.Addr, uint64, uint64) error    { return noRMA("fi_inject_write") }

// Recv posts a receive buffer (fi_recv); the next datagram to arrive
// lands in it. src is ignored, as in C: FI_DIRECTED_RECV is not offered.
func (e *ep) Recv(buf []byte, _ any, _ fabric.Addr, context any) error {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.closed {
		return fabric.Errorf("fi_recv", fabric.ErrBadFD, "endpoint closed")
	}
	if len(e.rxq) >= queueSize {
		return fabric.ErrAgain
	}
	e.rxq = append(e.rxq, rxEntry{buf: buf, ctx: context})
	if len(e.rxq) == 1 {
		select {
		case e.kick <- struct{}{}:
		default:
		}
	}
	return nil
}

func (e *ep) Send(buf []byte, _ any, dest fabric.Addr, context any) error {
	return e.send("fi_send", buf, dest, context, fabric.FlagCompletion)
}

// SendData is not offered: a datagram has no room for CQ data (C's
// fi_no_msg_senddata).
func (e *ep) SendData([]byte, any, uint64, fabric.Addr, any) error {
	return fabric.Errorf("fi_senddata", fabric.ErrNoSys, "the udp provider carries no remote CQ data")
}

func (e *ep) Inject(buf []byte, dest fabric.Addr) error {
	return e.send("fi_inject", buf, dest, nil, fabric.FlagInject)
}

func (e *ep) SendMsg(msg *fabric.Msg, flags uint64) error {
	if flags&fabric.FlagRemoteCQData != 0 {
		return fabric.Errorf("fi_sendmsg", fabric.ErrNoSys, "the udp provider carries no remote CQ data")
	}
	return e.send("fi_sendmsg", msg.Buf, msg.Addr, msg.Context, flags)
}

// send sends buf to dest as one datagram. It completes at once, as C's
// does: the socket has taken the datagram, or the call fails (FI_EAGAIN
// when the socket's buffer is full).
func (e *ep) send(op string, buf []byte, dest fabric.Addr, context any, flags uint64) error {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.closed {
		return fabric.Errorf(op, fabric.ErrBadFD, "endpoint closed")
	}
	if !e.enabled {
		return fabric.Errorf(op, fabric.ErrOpBadState, "endpoint not enabled")
	}
	if len(buf) > maxMsg {
		return fabric.Errorf(op, fabric.ErrMsgSize, "a datagram carries at most 1472 bytes (max_msg_size)")
	}
	to, err := e.av.Lookup(dest)
	if err != nil {
		return fabric.Errorf(op, fabric.ErrInvalid, "no address at handle "+strconv.FormatUint(uint64(dest), 10))
	}
	if err := sendTo(e.fd, buf, to); err != nil {
		if err == syscall.EAGAIN || err == syscall.ENOBUFS {
			return fabric.ErrAgain
		}
		return fabric.Errorf(op, sockpoll.Errno(err, fabric.ErrIO), "sendto "+to.String()+": "+err.Error())
	}
	if flags&fabric.FlagInject != 0 {
		e.Comp.Count(fabric.CompSend) // an inject completes with no entry
		return nil
	}
	e.Comp.Done(fabric.CQEntry{Context: context, Flags: fabric.CompSend | fabric.CompMsg})
	return nil
}

// sendTo sends one datagram with a raw sendto: the socket is
// non-blocking, so the call cannot block, and the runtime need not hear
// of it.
func sendTo(fd int, b []byte, to netip.AddrPort) error {
	var p unsafe.Pointer
	if len(b) > 0 {
		p = unsafe.Pointer(&b[0])
	}
	var sa4 unix.RawSockaddrInet4
	var sa6 unix.RawSockaddrInet6
	var sa unsafe.Pointer
	var salen uintptr
	port := [2]byte{byte(to.Port() >> 8), byte(to.Port())}
	if ip := to.Addr(); ip.Is4() || ip.Is4In6() {
		sa4.Family = unix.AF_INET
		sa4.Port = *(*uint16)(unsafe.Pointer(&port[0]))
		sa4.Addr = ip.Unmap().As4()
		sa, salen = unsafe.Pointer(&sa4), unsafe.Sizeof(sa4)
	} else {
		sa6.Family = unix.AF_INET6
		sa6.Port = *(*uint16)(unsafe.Pointer(&port[0]))
		sa6.Addr = ip.As16()
		if z := ip.Zone(); z != "" {
			if ifi, err := net.InterfaceByName(z); err == nil {
				sa6.Scope_id = uint32(ifi.Index)
			}
		}
		sa, salen = unsafe.Pointer(&sa6), unsafe.Sizeof(sa6)
	}
	_, _, errno := unix.RawSyscall6(unix.SYS_SENDTO, uintptr(fd), uintptr(p), uintptr(len(b)), 0, uintptr(sa), salen)
	if errno != 0 {
		return errno
	}
	return nil
}

// Progress takes in the datagrams that wait, for the receives posted: what
// a read of a bound CQ does first.
func (e *ep) Progress() {
	e.polls.Add(1)
	e.mu.Lock()
	e.receive()
	e.mu.Unlock()
}

// receive takes datagrams from the socket into the posted receives until
// either runs out. Called with e.mu held.
func (e *ep) receive() {
	for e.enabled && !e.closed && len(e.rxq) > 0 {
		rx := &e.rxq[0]
		n, errno := e.recvFrom(rx.buf)
		if errno == syscall.EINTR {
			continue
		}
		if errno != 0 {
			return // EAGAIN: nothing waits (a socket error is left for the next send to report)
		}
		r := *rx
		e.rxq[0] = rxEntry{}
		e.rxq = e.rxq[1:]
		src := fabric.AddrNotAvail
		if e.av != nil {
			src = e.av.Find(e.source())
		}
		if n > len(r.buf) {
			e.Comp.Failed(fabric.CQErrEntry{CQEntry: fabric.CQEntry{Context: r.ctx, Flags: fabric.CompRecv | fabric.CompMsg,
				Len: uint64(len(r.buf)), Buf: r.buf}.WithSource(src), OLen: uint64(n - len(r.buf)), Err: fabric.ErrTrunc})
			continue
		}
		e.Comp.Done(fabric.CQEntry{Context: r.ctx, Flags: fabric.CompRecv | fabric.CompMsg, Len: uint64(n), Buf: r.buf[:n]}.WithSource(src))
	}
}

// recvFrom takes one datagram into b with a raw recvfrom, returning its
// whole length (MSG_TRUNC: more than len(b) if it did not fit) and
// keeping its source in e.from. Called with e.mu held.
func (e *ep) recvFrom(b []byte) (int, syscall.Errno) {
	var p unsafe.Pointer
	if len(b) > 0 {
		p = unsafe.Pointer(&b[0])
	}
	e.fromLen = uint32(unsafe.Sizeof(e.from))
	n, _, errno := unix.RawSyscall6(unix.SYS_RECVFROM, uintptr(e.fd), uintptr(p), uintptr(len(b)), unix.MSG_TRUNC,
		uintptr(unsafe.Pointer(&e.from)), uintptr(unsafe.Pointer(&e.fromLen)))
	return int(n), errno
}

// source is the address of the datagram recvFrom took last.
func (e *ep) source() netip.AddrPort {
	switch e.from.Addr.Family {
	case unix.AF_INET:
		sa := (*unix.RawSockaddrInet4)(unsafe.Pointer(&e.from))
		p := (*[2]byte)(unsafe.Pointer(&sa.Port))
		return netip.AddrPortFrom(netip.AddrFrom4(sa.Addr), uint16(p[0])<<8|uint16(p[1]))
	case unix.AF_INET6:
		sa := (*unix.RawSockaddrInet6)(unsafe.Pointer(&e.from))
		p := (*[2]byte)(unsafe.Pointer(&sa.Port))
		return netip.AddrPortFrom(netip.AddrFrom16(sa.Addr).Unmap(), uint16(p[0])<<8|uint16(p[1]))
	}
	return netip.AddrPort{}
}

// pollGrace is how long the background loop stays away after the program
// last progressed the endpoint: a program that polls takes its datagrams
// itself, at no cost of a wake-up.
const pollGrace = time.Millisecond

// background takes in datagrams while the program does not poll: it arms
// the socket with the waker when receives are posted, and takes in what
// arrives.
func (e *ep) background() {
	defer e.wg.Done()
	var seen uint64
	for {
		if n := e.polls.Load(); n != seen {
			seen = n
			select {
			case <-time.After(pollGrace):
				continue
			case <-e.done:
				return
			}
		}
		e.mu.Lock()
		if e.closed {
			e.mu.Unlock()
			return
		}
		e.receive()
		waiting := len(e.rxq) > 0
		if waiting {
			e.wt.Arm(unix.EPOLLIN)
		}
		e.mu.Unlock()
		var ready <-chan struct{}
		if waiting {
			ready = e.wt.C
		}
		select {
		case <-ready:
		case <-e.kick:
		case <-e.done:
			return
		}
	}
}

// Close closes the socket and stops the background loop; the receives
// still posted complete with FI_ECANCELED.
func (e *ep) Close() error {
	e.mu.Lock()
	if e.closed {
		e.mu.Unlock()
		return nil
	}
	e.closed = true
	close(e.done)
	rxq := e.rxq
	e.rxq = nil
	e.mu.Unlock()
	e.wg.Wait()
	e.mu.Lock()
	if e.wt != nil {
		e.wt.Close()
	}
	unix.Close(e.fd)
	e.fd = -1
	for _, r := range rxq {
		e.Comp.Failed(fabric.CQErrEntry{CQEntry: fabric.CQEntry{Context: r.ctx, Flags: fabric.CompRecv | fabric.CompMsg}, Err: fabric.ErrCanceled})
	}
	e.mu.Unlock()
	e.Comp.Detach(e)
	return nil
}
