// Package sockpoll watches the sockets of the socket-based fabric
// providers (tcp, udp) for the moments their endpoints must progress in
// the background.
//
// The providers' sockets are not in the Go runtime's network poller: a
// socket registered there makes the runtime wake a thread for every
// segment that arrives, even while the program busy-polls its CQ and
// takes the data itself, and on a small machine those wake-ups cost more
// than the message. Instead each socket is a plain non-blocking
// descriptor, read and written with direct system calls, and a waker (one
// per process, alive while any socket is watched) watches the sockets
// whose endpoints want background progress.
//
// A socket is in the waker's epoll set disarmed (EPOLLONESHOT); an
// endpoint arms it with the events it waits for, and the waker signals
// the endpoint's channel once when one of them happens.
package sockpoll

import (
	"errors"
	"sync"
	"syscall"

	"github.com/rdmago/rdmago/fabric"
	"golang.org/x/sys/unix"
)

// waker is one epoll instance and the goroutine that waits on it.
type waker struct {
	epfd int
	evfd int // written to stop the goroutine
	mu   sync.Mutex
	subs map[uint64]chan struct{} // by registration id
	next uint64
	done chan struct{} // closed when the goroutine has returned
}

var wakers struct {
	mu   sync.Mutex
	cur  *waker
	refs int
}

// Watch is one socket's registration with the waker.
type Watch struct {
	w  *waker
	fd int
	id uint64
	C  chan struct{} // signalled (buffered, 1) when an armed event happens
}

// Add registers fd with the process's waker, starting it if it is
// not running.
func Add(fd int) (*Watch, error) {
	wakers.mu.Lock()
	defer wakers.mu.Unlock()
	if wakers.cur == nil {
		w, err := startWaker()
		if err != nil {
			return nil, err
		}
		wakers.cur = w
	}
	w := wakers.cur
	w.mu.Lock()
	w.next++
	id := w.next
	ch := make(chan struct{}, 1)
	w.subs[id] = ch
	w.mu.Unlock()
	ev := unix.EpollEvent{Events: unix.EPOLLONESHOT, Fd: int32(uint32(id)), Pad: int32(uint32(id >> 32))}
	if err := unix.EpollCtl(w.epfd, unix.EPOLL_CTL_ADD, fd, &ev); err != nil {
		w.mu.Lock()
		delete(w.subs, id)
		w.mu.Unlock()
		if wakers.refs == 0 {
			wakers.cur = nil
			w.stop()
		}
		return nil, err
	}
	wakers.refs++
	return &Watch{w: w, fd: fd, id: id, C: ch}, nil
}

// Arm asks for one signal when any of events (EPOLLIN, EPOLLOUT) happens
// on the socket; events that already hold signal at once. The caller
// keeps the socket open while it arms.
func (x *Watch) Arm(events uint32) {
	ev := unix.EpollEvent{Events: events | unix.EPOLLONESHOT, Fd: int32(uint32(x.id)), Pad: int32(uint32(x.id >> 32))}
	unix.EpollCtl(x.w.epfd, unix.EPOLL_CTL_MOD, x.fd, &ev)
}

// Close removes the socket from the waker, which stops once it watches
// nothing. Call it before closing the socket.
func (x *Watch) Close() {
	unix.EpollCtl(x.w.epfd, unix.EPOLL_CTL_DEL, x.fd, nil)
	x.w.mu.Lock()
	delete(x.w.subs, x.id)
	x.w.mu.Unlock()
	wakers.mu.Lock()
	defer wakers.mu.Unlock()
	wakers.refs--
	if wakers.refs == 0 && wakers.cur == x.w {
		wakers.cur = nil
		x.w.stop()
	}
}

func startWaker() (*waker, error) {
	epfd, err := unix.EpollCreate1(unix.EPOLL_CLOEXEC)
	if err != nil {
		return nil, err
	}
	evfd, err := unix.Eventfd(0, unix.EFD_CLOEXEC|unix.EFD_NONBLOCK)
	if err != nil {
		unix.Close(epfd)
		return nil, err
	}
	// The eventfd's registration carries id 0, which no socket gets.
	ev := unix.EpollEvent{Events: unix.EPOLLIN}
	if err := unix.EpollCtl(epfd, unix.EPOLL_CTL_ADD, evfd, &ev); err != nil {
		unix.Close(evfd)
		unix.Close(epfd)
		return nil, err
	}
	w := &waker{epfd: epfd, evfd: evfd, subs: map[uint64]chan struct{}{}, done: make(chan struct{})}
	go w.run()
	return w, nil
}

func (w *waker) run() {
	defer close(w.done)
	evs := make([]unix.EpollEvent, 64)
	for {
		n, err := unix.EpollWait(w.epfd, evs, -1)
		if err == unix.EINTR {
			continue
		}
		if err != nil {
			return
		}
		for _, ev := range evs[:n] {
			id := uint64(uint32(ev.Fd)) | uint64(uint32(ev.Pad))<<32
			if id == 0 {
				return // stop
			}
			w.mu.Lock()
			ch := w.subs[id]
			w.mu.Unlock()
			select {
			case ch <- struct{}{}:
			default: // already signalled (or gone: a nil channel)
			}
		}
	}
}

// stop ends the goroutine, waits for it and closes the descriptors.
func (w *waker) stop() {
	one := []byte{1, 0, 0, 0, 0, 0, 0, 0}
	unix.Write(w.evfd, one)
	<-w.done
	unix.Close(w.evfd)
	unix.Close(w.epfd)
}

// Ready reports whether fd has one of events (or an error): whether a
// read or write would not block. It is the spin of a polling program, so
// it makes the system call raw: a poll with a zero timeout returns at
// once, and the runtime need not hear of it.
func Ready(fd int, events int16) bool {
	fds := [1]unix.PollFd{{Fd: int32(fd), Events: events}}
	n, errno := pollNow(&fds[0])
	return errno != 0 || n != 0
}

// Errno is the system errno err carries, as a fabric error number
// (libfabric's FI_E* numbers are the system's), or def if it carries
// none.
func Errno(err error, def fabric.Errno) fabric.Errno {
	var se syscall.Errno
	if errors.As(err, &se) {
		return fabric.Errno(se)
	}
	return def
}
