package link

import (
	"errors"
	"fmt"
	"net"
	"sync"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// Services: which process of a shared address answers a CM service ID,
// claimed with a Unix socket each.

type svcEntry struct {
	owner uint8
	ok    bool
	until time.Time
}

// RegisterService claims the connection manager service id for this
// owner on the address; release gives it up. If another process has
// claimed it, the error wraps ErrServiceTaken.
func (s *Shared) RegisterService(id uint64) (release func(), err error) {
	s.svcMu.Lock()
	defer s.svcMu.Unlock()
	if s.closed.Load() {
		return nil, net.ErrClosed
	}
	if _, ok := s.services[id]; ok {
		return nil, fmt.Errorf("%w: service %#x", ErrServiceTaken, id)
	}
	ln, err := net.ListenUnix("unix", &net.UnixAddr{Name: s.svcName(id), Net: "unix"})
	if err != nil {
		if errors.Is(err, syscall.EADDRINUSE) {
			if uid, ok := s.holder(s.svcName(id)); ok && !s.allowed(uid) {
				return nil, fmt.Errorf("%w: service %#x on %v is claimed by another user's process (uid %d), which gets none of this address's requests", ErrServiceTaken, id, s.local, uid)
			}
			return nil, fmt.Errorf("%w: service %#x on %v", ErrServiceTaken, id, s.local)
		}
		return nil, fmt.Errorf("rxe/link: claiming service %#x: %w", id, err)
	}
	s.services[id] = ln
	s.wg.Add(1)
	go s.answer(ln)
	var once sync.Once
	return func() {
		once.Do(func() {
			s.svcMu.Lock()
			if s.services[id] == ln {
				delete(s.services, id)
			}
			s.svcMu.Unlock()
			ln.Close()
		})
	}, nil
}

// answer tells whoever of the group connects to a claimed service's
// socket the owner number, until the socket is closed.
func (s *Shared) answer(ln *net.UnixListener) {
	defer s.wg.Done()
	for {
		c, err := ln.AcceptUnix()
		if err != nil {
			return
		}
		if !s.trusted(c) {
			s.refused.Add(1)
			c.Close()
			continue
		}
		c.SetWriteDeadline(time.Now().Add(time.Second))
		c.Write([]byte{s.owner})
		c.Close()
	}
}

// ServiceOwner returns the owner of service id on the address: ok is
// true if a process of the group has claimed it, and unknown true if the
// claimant did not answer in time (a stopped process; the caller should
// drop the request, which its sender resends, rather than refuse it). A
// claim by another user's process counts as none: its requests are not
// for it. Answers are cached for 250 ms, a miss for 100 ms, so that a
// burst asks once.
func (s *Shared) ServiceOwner(id uint64) (owner uint8, ok, unknown bool) {
	now := time.Now()
	s.svcMu.Lock()
	if _, mine := s.services[id]; mine {
		s.svcMu.Unlock()
		return s.owner, true, false
	}
	if e, hit := s.svcCache[id]; hit && now.Before(e.until) {
		s.svcMu.Unlock()
		return e.owner, e.ok, false
	}
	s.svcMu.Unlock()
	e := svcEntry{until: now.Add(100 * time.Millisecond)}
	c, err := net.DialTimeout("unix", s.svcName(id), 20*time.Millisecond)
	if err == nil && !s.trusted(c.(*net.UnixConn)) {
		s.refused.Add(1)
		c.Close()
	} else if err == nil {
		// Claimed: the claimant's goroutine answers at once unless its
		// process is stopped.
		c.SetReadDeadline(now.Add(50 * time.Millisecond))
		var b [1]byte
		_, err = c.Read(b[:])
		c.Close()
		if err != nil {
			return 0, false, true
		}
		e = svcEntry{owner: b[0], ok: true, until: now.Add(250 * time.Millisecond)}
	}
	s.svcMu.Lock()
	if len(s.svcCache) > 4096 {
		clear(s.svcCache)
	}
	s.svcCache[id] = e
	s.svcMu.Unlock()
	return e.owner, e.ok, false
}

// OwnerHeld reports whether a process holds owner number owner on the
// address, by trying to bind the owner's name (which the kernel frees
// when its process ends, however it ends). The socket is never listened
// on, so nobody can connect to it in the instant it exists; a process
// that claims the number in that instant finds it taken and takes the
// next, as when another process holds it. Any error but the name being
// free counts as held.
func (s *Shared) OwnerHeld(owner uint8) bool {
	if owner == s.owner {
		return true
	}
	fd, err := unix.Socket(unix.AF_UNIX, unix.SOCK_STREAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return true
	}
	defer unix.Close(fd)
	return unix.Bind(fd, &unix.SockaddrUnix{Name: s.fwdName(owner)}) != nil
}
