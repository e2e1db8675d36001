package link

import (
	"net"
	"sync"
	"sync/atomic"
	"syscall"

	"golang.org/x/sys/unix"
)

// pollFD is a link's UDP socket taken off the Go runtime's network poller,
// as a syscall.RawConn that waits with poll(2) instead.
//
// The runtime's poller watches a socket for every change of state, edge
// triggered: each datagram that arrives and each send the kernel finishes
// with wakes whichever thread sleeps in the poller, even when no goroutine
// waits on the socket. A program that busy-polls its CQ (manual progress)
// reads the socket itself, so those wake-ups are all waste, and on a
// machine with few cores each one takes a CPU from a poll: they cost a
// round trip on loopback several microseconds. Off the poller, the socket
// wakes only a thread that asked to wait on it.
//
// A goroutine waiting in poll(2) holds its thread, which the runtime
// replaces for the others (one per link and waiter). Close wakes the
// waiters through an eventfd and closes the socket once they have let go.
type pollFD struct {
	mu     sync.RWMutex // held shared while fd is in use; by close, exclusively
	fd     int
	wake   int // an eventfd, readable once closing
	closed atomic.Bool
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
	wake, err := unix.Eventfd(0, unix.EFD_CLOEXEC|unix.EFD_NONBLOCK)
	if err != nil {
		unix.Close(fd)
		return nil, err
	}
	c.Close()
	if err := unix.SetNonblock(fd, true); err != nil {
		unix.Close(fd)
		unix.Close(wake)
		return nil, err
	}
	return &pollFD{fd: fd, wake: wake}, nil
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
func (p *pollFD) Read(f func(fd uintptr) bool) error { return p.io(f, unix.POLLIN) }

// Write implements syscall.RawConn: f until it reports done, waiting for
// the socket to be writable in between.
func (p *pollFD) Write(f func(fd uintptr) bool) error { return p.io(f, unix.POLLOUT) }

func (p *pollFD) io(f func(fd uintptr) bool, events int16) error {
	p.mu.RLock()
	defer p.mu.RUnlock()
	if p.closed.Load() {
		return net.ErrClosed
	}
	if f(uintptr(p.fd)) {
		return nil
	}
	fds := []unix.PollFd{{Fd: int32(p.fd), Events: events}, {Fd: int32(p.wake), Events: unix.POLLIN}}
	for {
		fds[0].Revents, fds[1].Revents = 0, 0
		if _, err := unix.Poll(fds, -1); err != nil && err != unix.EINTR {
			return err
		}
		if p.closed.Load() {
			return net.ErrClosed
		}
		if f(uintptr(p.fd)) {
			return nil
		}
	}
}

// Close wakes the waiters, waits for every user to let go, and closes the
// socket.
func (p *pollFD) Close() error {
	if p.closed.Swap(true) {
		return nil
	}
	one := [8]byte{1}
	unix.Write(p.wake, one[:])
	p.mu.Lock()
	defer p.mu.Unlock()
	err := unix.Close(p.fd)
	unix.Close(p.wake)
	return err
}
