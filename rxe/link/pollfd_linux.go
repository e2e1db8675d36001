package link

import (
	"net"
	"os"
	"sync"
	"sync/atomic"
	"syscall"

	"golang.org/x/sys/unix"
)

// pollFD is a link's UDP socket kept off the Go runtime's network poller,
// as a syscall.RawConn whose waits still go through it, but only when
// someone waits.
//
// The runtime's poller watches a socket for every change of state, edge
// triggered: each datagram that arrives and each send the kernel finishes
// with wakes whichever thread sleeps in the poller, even when no goroutine
// waits on the socket. A program that busy-polls its CQ (manual progress)
// reads the socket itself, so those wake-ups are all waste, and on a
// machine with few cores each one takes a CPU from a poll: they cost a
// round trip on loopback several microseconds.
//
// So the runtime's poller watches two epoll instances of our own instead,
// one for reading and one for writing, each holding the socket one-shot
// (EPOLLONESHOT): a goroutine about to wait arms its direction, and the
// first event disarms it again. Datagrams that come while nobody waits
// wake nobody. (Waiting in poll(2) instead would hold a scheduler P in the
// system call, keeping goroutines from running until the runtime takes it
// back, up to milliseconds later.)
type pollFD struct {
	mu     sync.RWMutex // held shared while fd is in use; by Close, exclusively
	fd     int
	closed atomic.Bool
	in     waiter
	out    waiter
}

// waiter is an epoll instance holding the socket for one direction, and
// the runtime poller's handle on it.
type waiter struct {
	// mu makes waiters of one direction take turns: the one-shot event
	// wakes one of them, and a second, parked meanwhile, would sleep
	// through the data the first left unread (WaitReadable reads
	// nothing). In its turn each arms again and finds it.
	mu     sync.Mutex
	ep     int
	events uint32
	file   *os.File
	raw    syscall.RawConn
	drain  func(fd uintptr) bool // takes the event, bound once
	evs    [1]unix.EpollEvent
}

var _ syscall.RawConn = (*pollFD)(nil)

// offPoller takes c's socket off the runtime's poller: it duplicates the
// descriptor, and closes c, which takes the original off the poller. The
// socket keeps its options and binding.
func offPoller(c *net.UDPConn) (*pollFD, error) {
	raw, err := c.SyscallConn()
	if err != nil {
		return nil, err
	}
	fd := -1
	var derr error
	if err := raw.Control(func(f uintptr) { fd, derr = unix.FcntlInt(f, unix.F_DUPFD_CLOEXEC, 0) }); err != nil {
		return nil, err
	}
	if derr != nil {
		return nil, derr
	}
	// The runtime made the socket non-blocking, and the duplicate shares
	// that; the reads and writes count on it (see receiver.read).
	if err := unix.SetNonblock(fd, true); err != nil {
		unix.Close(fd)
		return nil, err
	}
	p := &pollFD{fd: fd}
	if err := p.in.open(fd, unix.EPOLLIN); err != nil {
		unix.Close(fd)
		return nil, err
	}
	if err := p.out.open(fd, unix.EPOLLOUT); err != nil {
		p.in.file.Close()
		unix.Close(fd)
		return nil, err
	}
	c.Close()
	return p, nil
}

// open makes the epoll instance, with fd in it disarmed, and hands it to
// the runtime's poller.
func (w *waiter) open(fd int, events uint32) error {
	ep, err := unix.EpollCreate1(unix.EPOLL_CLOEXEC)
	if err != nil {
		return err
	}
	w.ep, w.events = ep, events
	ev := unix.EpollEvent{Events: unix.EPOLLONESHOT, Fd: int32(fd)}
	if err := unix.EpollCtl(ep, unix.EPOLL_CTL_ADD, fd, &ev); err != nil {
		unix.Close(ep)
		return err
	}
	if err := unix.SetNonblock(ep, true); err != nil {
		unix.Close(ep)
		return err
	}
	w.file = os.NewFile(uintptr(ep), "rxe-link-epoll") // non-blocking: the runtime polls it
	if w.raw, err = w.file.SyscallConn(); err != nil {
		w.file.Close()
		return err
	}
	w.drain = func(uintptr) bool {
		n, err := unix.EpollWait(w.ep, w.evs[:], 0)
		return n > 0 || err != nil && err != unix.EINTR
	}
	return nil
}

// wait arms the direction and parks until the socket is ready for it, or
// f succeeds on the way (what it waits for came before the arming).
func (w *waiter) wait(fd int, f func(fd uintptr) bool) (bool, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	ev := unix.EpollEvent{Events: w.events | unix.EPOLLONESHOT, Fd: int32(fd)}
	if err := unix.EpollCtl(w.ep, unix.EPOLL_CTL_MOD, fd, &ev); err != nil {
		return false, err
	}
	if f(uintptr(fd)) {
		return true, nil
	}
	return false, w.raw.Read(w.drain)
}

// waitReadable arms the reading direction and parks until the socket is
// readable or has an error, reading nothing, and reports whether it had
// an error (EPOLLERR). Arming finds data (or an error) already there at
// once, as the socket stays in the epoll instance level-triggered, so
// there is no need to look at the socket before waiting, and none after:
// a reader that wakes for nothing finds nothing and waits again. It must
// look at the epoll instance once, though (below).
func (p *pollFD) waitReadable() (sockErr bool, err error) {
	p.mu.RLock()
	defer p.mu.RUnlock()
	if p.closed.Load() {
		return false, net.ErrClosed
	}
	w := &p.in
	w.mu.Lock()
	defer w.mu.Unlock()
	ev := unix.EpollEvent{Events: w.events | unix.EPOLLONESHOT, Fd: int32(p.fd)}
	if err := unix.EpollCtl(w.ep, unix.EPOLL_CTL_MOD, p.fd, &ev); err != nil {
		return false, err
	}
	w.evs[0].Events = 0
	// Read takes the event before it parks. When arming found data
	// already there, the runtime's poller may have seen the instance
	// readable before Read began, and Read forgets that (it resets the
	// file's readiness before its first try): a wait that parked first
	// would sleep until the next packet.
	if err := w.raw.Read(w.drain); err != nil {
		if p.closed.Load() {
			return false, net.ErrClosed // Close closed the epoll file under the wait
		}
		return false, err
	}
	return w.evs[0].Events&unix.EPOLLERR != 0, nil
}

// Control implements syscall.RawConn.
func (p *pollFD) Control(f func(fd uintptr)) error {
	p.mu.RLock()
	defer p.mu.RUnlock()
	if p.closed.Load() {
		return net.ErrClosed
	}
	f(uintptr(p.fd))
	return nil
}

// Read implements syscall.RawConn: f until it reports done, waiting for
// the socket to be readable in between.
func (p *pollFD) Read(f func(fd uintptr) bool) error { return p.io(f, &p.in) }

// Write implements syscall.RawConn: f until it reports done, waiting for
// the socket to be writable in between.
func (p *pollFD) Write(f func(fd uintptr) bool) error { return p.io(f, &p.out) }

func (p *pollFD) io(f func(fd uintptr) bool, w *waiter) error {
	p.mu.RLock()
	defer p.mu.RUnlock()
	for {
		if p.closed.Load() {
			return net.ErrClosed
		}
		if f(uintptr(p.fd)) {
			return nil
		}
		done, err := w.wait(p.fd, f)
		switch {
		case done:
			return nil
		case p.closed.Load():
			return net.ErrClosed // Close closed the epoll file under the wait
		case err != nil:
			return err
		}
	}
}

// Close wakes the waiters, waits for every user to let go, and closes the
// socket.
func (p *pollFD) Close() error {
	if p.closed.Swap(true) {
		return nil
	}
	p.in.file.Close() // wakes a waiter with os.ErrClosed
	p.out.file.Close()
	p.mu.Lock()
	defer p.mu.Unlock()
	return unix.Close(p.fd)
}
