package link

import (
	"errors"
	"fmt"
	"net"
	"net/netip"
	"strconv"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// Shared is a Link on an address and UDP port that several processes of
// the host use at once, as every process on a Linux host shares the
// kernel's Soft-RoCE device. RoCEv2 peers send every packet to one port
// (4791), so one process, the leader, holds that port; the others, the
// followers, send from ports of their own and get their packets from the
// leader:
//
//   - Each process sharing an address has an owner number, 0 to 255,
//     claimed by binding the abstract Unix socket
//     "@rdmago/<port>/<address>/fwd/<owner>", which the kernel releases when
//     the process ends, however it ends. The device gives its QPs numbers
//     in its owner's range (owner<<16 | n), so the destination QP of a
//     packet names the process that owns it.
//   - The first process to bind the UDP port leads, having first claimed
//     "@rdmago/<port>/<address>/leader": a port in use while nobody has that
//     name is held by a program that is not rdmago (Linux Soft-RoCE, say),
//     and ListenShared fails, saying so. Its device reads every
//     packet that arrives and hands those of other owners to them with
//     Forward, through their Unix sockets, with the packet's source address,
//     traffic class and hop limit in a header of 24 bytes.
//   - A process that joins gets, from the leader, the port's socket itself
//     (and the leader name's), which it holds without reading. When the
//     leader ends, the socket stays bound, as every process of the group
//     holds it, and the packets that arrive wait in it; within
//     TakeoverInterval a follower takes the group's lock, which the leader
//     held, and reads them and the rest, leading from then on.
//   - Connection requests name a service rather than a QP: a process that
//     listens on one claims it with RegisterService (the abstract stream
//     socket "@rdmago/<port>/<address>/svc/<id>", which answers whoever
//     connects with the owner's number), and the leader finds the owner
//     with ServiceOwner.
//
// Abstract Unix sockets belong to the network namespace, as the address
// does, and need no privilege; nor have they permissions: any process of
// the host may claim a free name or connect to a claimed one. So the
// processes sharing an address are those of one effective user, the
// first leader's, as the kernel lets only sockets of one user share a UDP
// port with SO_REUSEPORT; root, who can read any process's memory anyway,
// may join any user's (and then passes its packets through that user's
// processes, as any member does). The group checks the credentials of every Unix
// connection made with it (SO_PEERCRED) and deals with no other user's
// process: such a process is refused at ListenShared, with an error that
// wraps syscall.EADDRINUSE and names the group's user; a follower closes,
// unread, a connection from it that offers packets; the leader forwards
// nothing to an owner's name it has taken, and ServiceOwner ignores a
// service it has claimed (RegisterService then says who has it); Refused
// counts them all. Nor is the port ever free between two leaders for it
// to bind. Another user can still take names nobody holds (owner
// numbers, services, the leader name before any group has it), which
// denies them to the group as binding the port first would, and send the
// port packets as any host of the network can; it can neither read the
// group's packets nor pass it any as if they had come to the port. Within
// the group, processes trust each other as processes of one user do.
type Shared struct {
	local netip.Addr
	port  uint16
	owner uint8
	opt   UDPOptions
	base  string // "@rdmago/<port>/<address>/"

	send *UDP                // sends: the port's socket if this process led from the start, else one of its own
	lead atomic.Pointer[UDP] // the port's socket while this process leads

	// The group: the user whose processes share the address (the first
	// leader's effective user), this process's effective user, and the
	// descriptors every member holds (see shared_group_linux.go): the
	// port's socket, the leader name's listening socket, the lock file
	// shared by all and this process's own open description of it.
	groupUID, euid                uint32
	portFD, nameFD, memFD, lockFD int
	// leaderLn accepts the processes that join, while this process
	// leads (guarded by svcMu).
	leaderLn *net.UnixListener

	// fwd listens for the leader's connection; the packets it forwards
	// come through inq, in buffers from bufs.
	fwd  *net.UnixListener
	inq  chan *fwdPacket
	held atomic.Pointer[fwdPacket] // taken from inq by WaitReadable, for TryRecv
	bufs sync.Pool
	wake chan struct{} // closed when this process takes the port over

	// outs are the leader's connections to the other owners.
	outs [256]outConn

	closed atomic.Bool
	stop   chan struct{}
	wg     sync.WaitGroup

	// leadIdle is true while the device waits in Recv or WaitReadable on the port's
	// socket (it has handled what it read before); leadReads counts the
	// reads that returned packets. Close uses them to let the device
	// forward what reached the port before it goes.
	leadIdle  atomic.Bool
	leadReads atomic.Uint64

	forwarded, forwardDrops, received atomic.Uint64
	refused                           atomic.Uint64 // connections from other users, closed unheard
	admitted                          atomic.Uint64 // processes admitted while leading
	unreachable                       atomic.Pointer[Unreachable]

	conns    map[*net.UnixConn]struct{} // accepted from leaders, to close; guarded by svcMu
	svcMu    sync.Mutex
	services map[uint64]*net.UnixListener
	svcCache map[uint64]svcEntry
}

// fwdHeaderLen is the length of the header before a forwarded packet:
// version (1), traffic class, hop limit, 5 reserved bytes, and the source
// address as 16 bytes (IPv4-mapped for IPv4).
const fwdHeaderLen = 24

// TakeoverInterval is how often a follower tries to take the port over.
var TakeoverInterval = 200 * time.Millisecond

// ErrOwnerTaken means another process of the host has the owner number
// asked for on the address.
var ErrOwnerTaken = errors.New("rxe/link: owner number in use on this address")

// ErrServiceTaken means another process of the host has claimed the
// service.
var ErrServiceTaken = errors.New("rxe/link: service claimed by another process on this address")

// ListenShared joins the processes sharing addr (a unicast address of the
// host and the RoCEv2 port) as owner. If another process has that owner
// number on the address, the error wraps ErrOwnerTaken; the caller tries
// another. If processes of another user share the address, the error
// wraps syscall.EADDRINUSE and names that user: a process joins only the
// processes of its own effective user, but root joins any.
func ListenShared(addr netip.AddrPort, owner uint8, opt UDPOptions) (*Shared, error) {
	ip := addr.Addr().Unmap()
	if !ip.IsValid() || ip.IsUnspecified() || ip.IsMulticast() || addr.Port() == 0 {
		return nil, fmt.Errorf("rxe/link: cannot share %v: a shared link needs one unicast address and a port", addr)
	}
	s := &Shared{
		local: ip, port: addr.Port(), owner: owner, opt: opt,
		base:   "@rdmago/" + strconv.Itoa(int(addr.Port())) + "/" + ip.String() + "/",
		euid:   uint32(unix.Geteuid()),
		portFD: -1, nameFD: -1, memFD: -1, lockFD: -1,
		stop:     make(chan struct{}),
		services: map[uint64]*net.UnixListener{},
		svcCache: map[uint64]svcEntry{},
	}
	fwd, err := net.ListenUnix("unix", &net.UnixAddr{Name: s.fwdName(owner), Net: "unix"})
	if err != nil {
		if errors.Is(err, syscall.EADDRINUSE) {
			return nil, fmt.Errorf("%w: %v owner %d", ErrOwnerTaken, ip, owner)
		}
		return nil, fmt.Errorf("rxe/link: sharing %v: %w", addr, err)
	}
	s.fwd = fwd
	s.inq = make(chan *fwdPacket, fwdQueue)
	s.wake = make(chan struct{})
	s.conns = map[*net.UnixConn]struct{}{}
	s.bufs.New = func() any { return &fwdPacket{buf: make([]byte, smallForwarded)} }
	err = s.found()
	if errors.Is(err, errFollow) {
		err = s.join()
	}
	for try := 0; errors.Is(err, errAgain) && try < 10; try++ {
		// A group that is ending may have let go of its name before its
		// port, or closed its name under our request: look again before
		// blaming another program.
		time.Sleep(20 * time.Millisecond)
		if err = s.found(); errors.Is(err, errFollow) {
			err = s.join()
		}
	}
	if err != nil {
		fwd.Close()
		s.closeGroup()
		if errors.Is(err, errForeign) {
			return nil, fmt.Errorf("rxe/link: %v is already in use by a program that is not rdmago (Linux Soft-RoCE, or another RoCE stack): %w", addr, syscall.EADDRINUSE)
		}
		return nil, err
	}
	s.wg.Add(1)
	go s.acceptLeaders()
	if s.lead.Load() != nil {
		return s, nil
	}
	// Another process leads: send from a port of our own.
	so := opt
	so.DisableGRO, so.RecvBuffer = true, 64<<10
	if s.send, err = listenUDP(netip.AddrPortFrom(ip, 0), s.port, so); err != nil {
		s.fwd.Close()
		s.wg.Wait()
		s.closeGroup()
		return nil, err
	}
	s.wg.Add(1)
	go func() {
		defer s.wg.Done()
		s.send.watchErrors()
	}()
	s.wg.Add(1)
	go s.takeover()
	return s, nil
}

func (s *Shared) fwdName(owner uint8) string { return s.base + "fwd/" + strconv.Itoa(int(owner)) }

func (s *Shared) svcName(id uint64) string { return s.base + "svc/" + strconv.FormatUint(id, 16) }

// takeover waits for the group's lock, which the leader holds until it
// closes the port's socket, and then leads: it reads the port's socket,
// which has stayed bound all along (every process of the group holds it),
// and admits the processes that join.
func (s *Shared) takeover() {
	defer s.wg.Done()
	t := time.NewTicker(TakeoverInterval)
	defer t.Stop()
	for {
		select {
		case <-s.stop:
			return
		case <-t.C:
		}
		if unix.Flock(s.lockFD, unix.LOCK_EX|unix.LOCK_NB) != nil {
			continue // the leader lives
		}
		l, ln, err := s.adopt()
		if err != nil {
			// Out of descriptors, say: let another member lead.
			unix.Flock(s.lockFD, unix.LOCK_UN)
			continue
		}
		if fn := s.unreachable.Load(); fn != nil {
			l.SetUnreachable(*fn)
		}
		s.svcMu.Lock()
		if s.closed.Load() {
			s.svcMu.Unlock()
			ln.Close()
			l.Close()
			return // Close lets the lock go
		}
		s.leaderLn = ln
		s.wg.Add(1)
		go s.admit(ln)
		s.svcMu.Unlock()
		s.lead.Store(l)
		close(s.wake) // Recv reads the port from now on
		return
	}
}

// SetUnreachable implements Notifier, for the port's socket and the one
// this process sends from.
func (s *Shared) SetUnreachable(fn Unreachable) {
	s.unreachable.Store(&fn)
	s.send.SetUnreachable(fn)
	if l := s.lead.Load(); l != nil {
		l.SetUnreachable(fn)
	}
}

// Owner returns the process's owner number on the address.
func (s *Shared) Owner() uint8 { return s.owner }

// Leading reports whether this process holds the port, and so receives
// every packet to the address, its own and others'.
func (s *Shared) Leading() bool { return s.lead.Load() != nil }

// LocalAddr implements Link.LocalAddr.
func (s *Shared) LocalAddr() netip.Addr { return s.local }

// Port implements Link.Port.
func (s *Shared) Port() uint16 { return s.port }

// MaxPacket implements Link.MaxPacket.
func (s *Shared) MaxPacket() int { return s.send.MaxPacket() }

// Send implements Link.Send.
func (s *Shared) Send(pkts []Packet) error {
	if s.closed.Load() {
		return net.ErrClosed
	}
	return s.send.Send(pkts)
}

// Queued implements SendQueue: what waits to be sent on the socket Send
// uses.
func (s *Shared) Queued() int { return s.send.Queued() }

// OnQueueEmpty implements SendQueue.
func (s *Shared) OnQueueEmpty(f func()) { s.send.OnQueueEmpty(f) }

// Recv implements Link.Recv: the port's packets while this process leads,
// those the leader forwards to it otherwise.
func (s *Shared) Recv(pkts []Packet) (int, error) {
	// (TryRecv below is the same without the waits.)
	if len(pkts) == 0 {
		return 0, nil
	}
	for {
		if s.closed.Load() {
			return 0, net.ErrClosed
		}
		if l := s.lead.Load(); l != nil {
			select {
			case fp := <-s.inq: // forwarded before this process took the port over
				if n := s.takeQueued(pkts, fp); n > 0 {
					return n, nil
				}
				continue
			default:
			}
			s.leadIdle.Store(true)
			n, err := l.Recv(pkts)
			s.leadIdle.Store(false)
			if n > 0 {
				s.leadReads.Add(1)
			}
			return n, err
		}
		select {
		case fp := <-s.inq:
			if n := s.takeQueued(pkts, fp); n > 0 {
				return n, nil
			}
		case <-s.wake:
		case <-s.stop:
			return 0, net.ErrClosed
		}
	}
}

// takeQueued moves fp and the forwarded packets queued after it, up to
// len(pkts), into pkts and returns how many it moved.
func (s *Shared) takeQueued(pkts []Packet, fp *fwdPacket) int {
	n := 0
	for {
		if s.take(&pkts[n], fp) {
			n++
		}
		if n == len(pkts) {
			break
		}
		select {
		case fp = <-s.inq:
			continue
		default:
		}
		break
	}
	s.received.Add(uint64(n))
	return n
}

// WaitReadable implements TryReceiver: while this process leads, the
// port's socket's; else it waits for a packet the leader forwards (kept
// for TryRecv) or for this process to take the port over.
func (s *Shared) WaitReadable() error {
	for {
		if s.closed.Load() {
			return net.ErrClosed
		}
		if s.held.Load() != nil || len(s.inq) > 0 {
			return nil // forwarded packets, maybe from before a takeover
		}
		if l := s.lead.Load(); l != nil {
			s.leadIdle.Store(true)
			err := l.WaitReadable()
			s.leadIdle.Store(false)
			return err
		}
		select {
		case fp := <-s.inq:
			s.held.Store(fp)
			return nil
		case <-s.wake:
		case <-s.stop:
			return net.ErrClosed
		}
	}
}

// TryRecv implements TryReceiver: while this process leads, the port's
// socket read without waiting; else the packets the leader has forwarded
// so far.
func (s *Shared) TryRecv(pkts []Packet) (int, error) {
	if s.closed.Load() {
		return 0, net.ErrClosed
	}
	if len(pkts) == 0 {
		return 0, nil
	}
	if fp := s.held.Swap(nil); fp != nil {
		return s.takeQueued(pkts, fp), nil
	}
	select {
	case fp := <-s.inq: // a leader's, or from before a takeover
		return s.takeQueued(pkts, fp), nil
	default:
	}
	if l := s.lead.Load(); l != nil {
		n, err := l.TryRecv(pkts)
		if n > 0 {
			s.leadReads.Add(1)
		}
		return n, err
	}
	return 0, nil
}

// Held implements TryReceiver.
func (s *Shared) Held() bool {
	if s.held.Load() != nil || len(s.inq) > 0 {
		return true
	}
	if l := s.lead.Load(); l != nil {
		return l.Held()
	}
	return false
}

// take moves a forwarded packet into p, reporting whether it fit.
func (s *Shared) take(p *Packet, fp *fwdPacket) bool {
	defer s.putFwd(fp)
	buf := p.Buf[:cap(p.Buf)]
	if len(buf) < fp.n {
		return false
	}
	p.Buf = buf[:copy(buf, fp.buf[:fp.n])]
	p.Addr, p.TClass, p.HopLimit = fp.addr, fp.tclass, fp.hop
	return true
}

// Stats implements Link.Stats: the counters of the sockets in use, and
// the packets forwarded to or by this process.
func (s *Shared) Stats() Stats {
	st := s.send.Stats()
	if l := s.lead.Load(); l != nil && l != s.send {
		st = st.add(l.Stats())
	}
	st.Forwarded = s.forwarded.Load()
	st.ForwardDrops = s.forwardDrops.Load()
	st.ForwardedIn = s.received.Load()
	return st
}

// JoinGroup implements Joiner through the link's own address.
func (s *Shared) JoinGroup(group netip.Addr) (Link, error) {
	return s.send.JoinGroup(group)
}

// Close implements Link.Close: it leaves the address, giving up the port
// if this process leads (a follower takes it over) and every claim.
func (s *Shared) Close() error {
	if s.closed.Load() {
		return nil
	}
	s.settle()
	if s.closed.Swap(true) {
		return nil
	}
	close(s.stop)
	s.svcMu.Lock()
	for id, ln := range s.services {
		ln.Close()
		delete(s.services, id)
	}
	s.svcMu.Unlock()
	if l := s.lead.Load(); l != nil && l != s.send {
		l.Close()
	}
	s.send.Close()
	s.fwd.Close()
	s.svcMu.Lock()
	for c := range s.conns {
		c.Close()
	}
	if s.leaderLn != nil {
		s.leaderLn.Close() // the name stays bound while another member holds it
	}
	s.svcMu.Unlock()
	for i := range s.outs {
		o := &s.outs[i]
		o.mu.Lock()
		if o.c != nil {
			o.c.Close()
			o.c = nil
		}
		o.mu.Unlock()
	}
	s.wg.Wait()
	if l := s.lead.Load(); l != nil && l != s.send { // taken over while closing
		l.Close()
	}
	// The group's descriptors go last: closing this process's description
	// of the lock lets the next leader read the port, which this process
	// no longer does.
	s.closeGroup()
	return nil
}

// settleMax bounds how long a closing leader waits for its device to
// forward what reached the port.
const settleMax = 200 * time.Millisecond

// settle, in a leader with followers, waits until the port's socket has
// nothing queued and the device has handled all it read: the last
// packets of a process that exits are often for a follower (the answer
// to its last request, a final datagram), and a leader that closed
// before forwarding them would lose them, which a UD peer never
// recovers from.
func (s *Shared) settle() {
	l := s.lead.Load()
	if l == nil || !s.hasFollowers() {
		return
	}
	deadline := time.Now().Add(settleMax)
	for time.Now().Before(deadline) {
		reads := s.leadReads.Load()
		if l.queued() == 0 && s.leadIdle.Load() {
			time.Sleep(time.Millisecond)
			if s.leadReads.Load() == reads && l.queued() == 0 && s.leadIdle.Load() {
				return
			}
			continue
		}
		time.Sleep(time.Millisecond)
	}
}

// hasFollowers reports whether the leader has forwarded to anyone.
func (s *Shared) hasFollowers() bool {
	for i := range s.outs {
		o := &s.outs[i]
		o.mu.Lock()
		c := o.c
		o.mu.Unlock()
		if c != nil {
			return true
		}
	}
	return false
}

var (
	_ Link      = (*Shared)(nil)
	_ SendQueue = (*Shared)(nil)
)
