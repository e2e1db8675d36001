package link

import (
	"errors"
	"fmt"
	"net"
	"net/netip"
	"os"
	"strconv"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// The processes sharing an address form a group, of one user. Abstract
// Unix sockets, which the group names its parts with, have no
// permissions: any process of the host may bind a free name or connect to
// a bound one. So the group checks the credentials the kernel attaches to
// every Unix stream connection (SO_PEERCRED: the peer's effective user at
// connect(2), or at listen(2) for the listening side) and deals only with
// processes of its user, or root's; and it never lets the port go while
// one of its processes lives, so that no other user can bind it between
// two leaders:
//
//   - The first process claims the leader name (a listening stream
//     socket), binds the port, and makes the group's lock, a memfd on
//     which the leader holds an exclusive flock(2) while it reads the
//     port.
//   - A process that finds the name claimed connects to it. The listening
//     socket's credentials are the first leader's: a process of another
//     user (not root) stops there, with an error. The leader, on its
//     side, checks the newcomer's, and hands it, over SCM_RIGHTS, the
//     port's socket, the name's listening socket and the lock's memfd.
//   - Every process of the group thus holds the port's socket and the
//     name's; the kernel frees them only when the last one has gone. A
//     follower does not read the port: it tries the lock every
//     TakeoverInterval, through an open description of the memfd of its
//     own (flock locks belong to an open description). The leader lets
//     the lock go when it has closed its copy of the port's socket, after
//     which one follower gets it, reads the same socket, where the packets
//     that came meanwhile wait, and admits newcomers on the same name.

// errFollow, errForeign and errAgain are why found did not lead: another
// rdmago process leads, or a program that is not rdmago holds the port, or
// the group on the address ended while this process was joining it.
var (
	errFollow  = errors.New("another process leads")
	errForeign = errors.New("the port is held by another program")
	errAgain   = errors.New("the group on the address ended while joining it")
)

// handoffVersion is the byte a leader sends with the group's descriptors.
const handoffVersion = 1

// joinWait bounds how long a process that joins waits for the leader to
// admit it (a takeover takes up to TakeoverInterval).
const joinWait = 5 * time.Second

// found makes this process the first of a group on the address, and its
// leader: it claims the leader name and then binds the port. The name
// says that an rdmago process holds the port; a port in use while nobody
// has the name is held by another program.
func (s *Shared) found() error {
	name, err := net.ListenUnix("unix", &net.UnixAddr{Name: s.base + "leader", Net: "unix"})
	if err != nil {
		if errors.Is(err, syscall.EADDRINUSE) {
			return errFollow
		}
		return fmt.Errorf("rxe/link: sharing %v: %w", s.local, err)
	}
	l, err := listenUDP(netip.AddrPortFrom(s.local, s.port), 0, s.opt)
	if err != nil {
		name.Close()
		if errors.Is(err, syscall.EADDRINUSE) {
			return errAgainOr(errForeign)
		}
		return err
	}
	fail := func(err error) error {
		l.Close()
		name.Close()
		s.closeGroup()
		return fmt.Errorf("rxe/link: sharing %v: %w", s.local, err)
	}
	if s.portFD, err = dupOf(l.receiver.raw); err != nil {
		return fail(err)
	}
	raw, err := name.SyscallConn()
	if err != nil {
		return fail(err)
	}
	if s.nameFD, err = dupOf(raw); err != nil {
		return fail(err)
	}
	if s.memFD, err = unix.MemfdCreate("rdmago-lead", unix.MFD_CLOEXEC); err != nil {
		return fail(os.NewSyscallError("memfd_create", err))
	}
	if s.lockFD, err = reopen(s.memFD); err != nil {
		return fail(err)
	}
	if err := unix.Flock(s.lockFD, unix.LOCK_EX|unix.LOCK_NB); err != nil {
		return fail(os.NewSyscallError("flock", err))
	}
	s.groupUID = s.euid
	s.send = l
	s.lead.Store(l)
	s.leaderLn = name
	s.wg.Add(1)
	go s.admit(name)
	return nil
}

// againError is an error to try again after a while (errAgain):
// ListenShared tries a few times, and then reports err.
type againError struct{ err error }

func (e againError) Error() string        { return e.err.Error() }
func (e againError) Is(target error) bool { return target == errAgain || target == e.err }

// errAgainOr marks err as one to try again after a while.
func errAgainOr(err error) error { return againError{err} }

// join joins the group that has the leader name, if it is of this
// process's user or this process is root, and takes the group's
// descriptors from its leader.
func (s *Shared) join() error {
	addr := netip.AddrPortFrom(s.local, s.port)
	c, err := net.DialUnix("unix", nil, &net.UnixAddr{Name: s.base + "leader", Net: "unix"})
	if err != nil {
		if errors.Is(err, syscall.ECONNREFUSED) || errors.Is(err, syscall.ENOENT) {
			// The name went, or its backlog is full: look again.
			return errAgainOr(fmt.Errorf("rxe/link: %v is in use, and its leader does not answer: %w", addr, syscall.EADDRINUSE))
		}
		if errors.Is(err, syscall.EPROTOTYPE) {
			return fmt.Errorf("rxe/link: %v is in use by a program that holds %q, not an rdmago of this version: %w", addr, s.base+"leader", syscall.EADDRINUSE)
		}
		return fmt.Errorf("rxe/link: joining %v: %w", addr, err)
	}
	defer c.Close()
	uid, err := peerUID(c)
	if err != nil {
		return fmt.Errorf("rxe/link: joining %v: %w", addr, err)
	}
	if uid != s.euid && s.euid != 0 {
		return fmt.Errorf("rxe/link: %v is in use by another user's rdmago (uid %d): %w", addr, uid, syscall.EADDRINUSE)
	}
	s.groupUID = uid
	c.SetReadDeadline(time.Now().Add(joinWait))
	var b [1]byte
	oob := make([]byte, unix.CmsgSpace(3*4))
	n, oobn, _, _, err := c.ReadMsgUnix(b[:], oob)
	var fds []int
	if err == nil {
		if msgs, perr := unix.ParseSocketControlMessage(oob[:oobn]); perr == nil {
			for _, m := range msgs {
				if f, ferr := unix.ParseUnixRights(&m); ferr == nil {
					fds = append(fds, f...)
				}
			}
		}
	}
	if err != nil || n != 1 || b[0] != handoffVersion || len(fds) != 3 {
		for _, fd := range fds {
			unix.Close(fd)
		}
		if err != nil && !errors.Is(err, os.ErrDeadlineExceeded) || err == nil && n == 0 {
			// The leader went before it admitted us.
			return errAgainOr(fmt.Errorf("rxe/link: %v is in use, and its leader did not admit this process: %w", addr, syscall.EADDRINUSE))
		}
		return fmt.Errorf("rxe/link: %v is in use, and its leader did not admit this process: %w", addr, syscall.EADDRINUSE)
	}
	s.portFD, s.nameFD, s.memFD = fds[0], fds[1], fds[2]
	if s.lockFD, err = reopen(s.memFD); err != nil {
		s.closeGroup()
		return fmt.Errorf("rxe/link: joining %v: %w", addr, err)
	}
	return nil
}

// admit hands the group's descriptors to the processes that connect to
// the leader name, if they are of the group's user or root, until ln is
// closed.
func (s *Shared) admit(ln *net.UnixListener) {
	defer s.wg.Done()
	rights := unix.UnixRights(s.portFD, s.nameFD, s.memFD)
	for {
		c, err := ln.AcceptUnix()
		if err != nil {
			return
		}
		if !s.trusted(c) {
			s.refused.Add(1) // it knows why: it has our credentials too
			c.Close()
			continue
		}
		// The newcomer holds an owner number already, maybe one that a
		// packet found nobody at a moment ago: its packets go to it
		// from now on.
		s.forgetAbsent()
		s.admitted.Add(1)
		c.SetWriteDeadline(time.Now().Add(time.Second))
		c.WriteMsgUnix([]byte{handoffVersion}, rights, nil)
		c.Close()
	}
}

// adopt makes a link of the port's socket and a listener of the leader
// name's, for this process to lead with.
func (s *Shared) adopt() (*UDP, *net.UnixListener, error) {
	pfd, err := unix.FcntlInt(uintptr(s.portFD), unix.F_DUPFD_CLOEXEC, 0)
	if err != nil {
		return nil, nil, err
	}
	// The last leader may have asked for GRO and this process not:
	// init asks again if it wants it.
	unix.SetsockoptInt(pfd, unix.SOL_UDP, unix.UDP_GRO, 0)
	f := os.NewFile(uintptr(pfd), "rdmago-port")
	pc, err := net.FilePacketConn(f)
	f.Close()
	if err != nil {
		return nil, nil, err
	}
	uc, ok := pc.(*net.UDPConn)
	if !ok {
		pc.Close()
		return nil, nil, errors.New("the port's descriptor is not a UDP socket")
	}
	l, err := newUDP(uc, s.local, 0, s.opt)
	if err != nil {
		return nil, nil, err
	}
	nfd, err := unix.FcntlInt(uintptr(s.nameFD), unix.F_DUPFD_CLOEXEC, 0)
	if err != nil {
		l.Close()
		return nil, nil, err
	}
	f = os.NewFile(uintptr(nfd), "rdmago-leader")
	fl, err := net.FileListener(f)
	f.Close()
	if err != nil {
		l.Close()
		return nil, nil, err
	}
	ln, ok := fl.(*net.UnixListener)
	if !ok {
		fl.Close()
		l.Close()
		return nil, nil, errors.New("the leader name's descriptor is not a Unix listener")
	}
	return l, ln, nil
}

// closeGroup closes this process's copies of the group's descriptors;
// closing its own description of the lock lets the lock go.
func (s *Shared) closeGroup() {
	for _, fd := range []*int{&s.lockFD, &s.portFD, &s.nameFD, &s.memFD} {
		if *fd >= 0 {
			unix.Close(*fd)
			*fd = -1
		}
	}
}

// allowed reports whether a process of effective user uid may share the
// address with this group: the group's user and root.
func (s *Shared) allowed(uid uint32) bool { return uid == s.groupUID || uid == 0 }

// trusted reports whether c's peer is a process the group deals with.
func (s *Shared) trusted(c *net.UnixConn) bool {
	uid, err := peerUID(c)
	return err == nil && s.allowed(uid)
}

// holder returns the effective user of the process that holds the
// abstract stream socket name, if it answers.
func (s *Shared) holder(name string) (uid uint32, ok bool) {
	c, err := net.DialTimeout("unix", name, 20*time.Millisecond)
	if err != nil {
		return 0, false
	}
	defer c.Close()
	uid, err = peerUID(c.(*net.UnixConn))
	return uid, err == nil
}

// Admitted returns how many processes this process has admitted to the
// address's group while leading it. Each holds an owner number when it
// is admitted, maybe one that OwnerHeld found free before: what a caller
// learned of owner numbers before the count changed may be out of date.
func (s *Shared) Admitted() uint64 { return s.admitted.Load() }

// Refused returns how many connections of other users' processes to the
// group's sockets (or from the group to sockets they took) this process
// has closed without a word.
func (s *Shared) Refused() uint64 { return s.refused.Load() }

// peerUID returns the effective user of c's peer, as the kernel recorded
// it when the connection was made (SO_PEERCRED).
func peerUID(c *net.UnixConn) (uint32, error) {
	raw, err := c.SyscallConn()
	if err != nil {
		return 0, err
	}
	var cred *unix.Ucred
	var gerr error
	if err := raw.Control(func(fd uintptr) {
		cred, gerr = unix.GetsockoptUcred(int(fd), unix.SOL_SOCKET, unix.SO_PEERCRED)
	}); err != nil {
		return 0, err
	}
	if gerr != nil {
		return 0, os.NewSyscallError("getsockopt SO_PEERCRED", gerr)
	}
	return cred.Uid, nil
}

// dupOf duplicates the descriptor of a socket.
func dupOf(raw syscall.RawConn) (int, error) {
	fd := -1
	var derr error
	if err := raw.Control(func(f uintptr) { fd, derr = unix.FcntlInt(f, unix.F_DUPFD_CLOEXEC, 0) }); err != nil {
		return -1, err
	}
	if derr != nil {
		return -1, os.NewSyscallError("fcntl F_DUPFD_CLOEXEC", derr)
	}
	return fd, nil
}

// reopen opens a description of the file fd refers to of this process's
// own (through /proc), for a flock of its own.
func reopen(fd int) (int, error) {
	nfd, err := unix.Open("/proc/self/fd/"+strconv.Itoa(fd), unix.O_RDONLY|unix.O_CLOEXEC, 0)
	if err != nil {
		return -1, os.NewSyscallError("open /proc/self/fd", err)
	}
	return nfd, nil
}
