package link

import (
	"bufio"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
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

type svcEntry struct {
	owner uint8
	ok    bool
	until time.Time
}

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

// fwdPacket is a packet forwarded by the leader, on its way to Recv.
type fwdPacket struct {
	buf         []byte
	n           int
	addr        netip.Addr
	tclass, hop uint8
}

// Forwarding goes over a stream socket from the leader to each owner
// (datagram sockets queue at most net.unix.max_dgram_qlen packets, 10 by
// default, far fewer than a burst). Each packet is framed as its length
// (2 bytes), the header and the packet.
const (
	fwdQueue       = 1024                   // forwarded packets waiting for Recv
	maxForwarded   = 65535                  // the longest packet a frame carries
	smallForwarded = 4096 + 256             // a packet of the largest path MTU, with room for its headers
	fwdSendBuffer  = 1 << 20                // the leader's socket buffer towards each owner
	fwdRedial      = 100 * time.Millisecond // how long after a failure before trying an owner again
)

// acceptLeaders takes the connections of the leaders (one at a time, a
// new one after a takeover) and reads their packets into inq.
func (s *Shared) acceptLeaders() {
	defer s.wg.Done()
	for {
		c, err := s.fwd.AcceptUnix()
		if err != nil {
			return
		}
		if !s.trusted(c) {
			// Another user's process, offering packets it made up.
			s.refused.Add(1)
			c.Close()
			continue
		}
		s.svcMu.Lock()
		if s.closed.Load() {
			s.svcMu.Unlock()
			c.Close()
			return
		}
		s.conns[c] = struct{}{}
		s.svcMu.Unlock()
		s.wg.Add(1)
		go s.readLeader(c)
	}
}

// readLeader reads framed packets from a leader's connection until it
// closes. A packet that finds inq full is dropped, as a full socket
// buffer drops it.
func (s *Shared) readLeader(c *net.UnixConn) {
	defer s.wg.Done()
	defer func() {
		s.svcMu.Lock()
		delete(s.conns, c)
		s.svcMu.Unlock()
		c.Close()
	}()
	r := bufio.NewReaderSize(c, 256<<10)
	var head [2 + fwdHeaderLen]byte
	for {
		if _, err := io.ReadFull(r, head[:]); err != nil {
			return
		}
		n := int(binary.BigEndian.Uint16(head[:2]))
		h := head[2:]
		fp := s.getFwd(n)
		if _, err := io.ReadFull(r, fp.buf[:n]); err != nil {
			s.putFwd(fp)
			return
		}
		if h[0] != 1 || n < MinPacket {
			s.putFwd(fp)
			continue
		}
		fp.n, fp.tclass, fp.hop = n, h[1], h[2]
		fp.addr = netip.AddrFrom16([16]byte(h[8:24])).Unmap()
		select {
		case s.inq <- fp:
		default:
			s.putFwd(fp)
			s.forwardDrops.Add(1)
		}
	}
}

// getFwd returns a buffer for a forwarded packet of n bytes: from the pool
// for the packets of any path MTU, made to measure for longer ones.
func (s *Shared) getFwd(n int) *fwdPacket {
	if n > smallForwarded {
		return &fwdPacket{buf: make([]byte, n)}
	}
	return s.bufs.Get().(*fwdPacket)
}

// putFwd gives a buffer from getFwd back.
func (s *Shared) putFwd(fp *fwdPacket) {
	if len(fp.buf) == smallForwarded {
		s.bufs.Put(fp)
	}
}

// outConn is the leader's connection to one owner.
type outConn struct {
	mu      sync.Mutex
	c       *net.UnixConn
	raw     syscall.RawConn
	frame   []byte    // frames queued by Forward
	ends    []int     // where each queued frame ends in frame
	pending []byte    // the unwritten rest of a frame partly written
	retryAt time.Time // after a failure, no new connection before this
}

// Forward queues a packet this process received as leader for the
// process that owns it; Flush sends what is queued. A packet for an owner
// that has gone, or that does not keep up, is dropped and counted, as a
// network drops it.
func (s *Shared) Forward(owner uint8, p *Packet) error {
	if owner == s.owner {
		return errors.New("rxe/link: Forward of a packet to its own process")
	}
	if len(p.Buf) > maxForwarded || s.closed.Load() {
		s.forwardDrops.Add(1)
		return ErrPacketTooLarge
	}
	o := &s.outs[owner]
	o.mu.Lock()
	defer o.mu.Unlock()
	f := binary.BigEndian.AppendUint16(o.frame, uint16(len(p.Buf)))
	a16 := p.Addr.As16()
	f = append(f, 1, p.TClass, p.HopLimit, 0, 0, 0, 0, 0)
	f = append(f, a16[:]...)
	o.frame = append(f, p.Buf...)
	o.ends = append(o.ends, len(o.frame))
	if len(o.frame) >= 256<<10 {
		s.flush(owner, o)
	}
	return nil
}

// Flush sends the packets Forward queued, one write per owner.
func (s *Shared) Flush() {
	for i := range s.outs {
		o := &s.outs[i]
		o.mu.Lock()
		if len(o.ends) > 0 {
			s.flush(uint8(i), o)
		}
		o.mu.Unlock()
	}
}

// flush writes o's queued frames to owner without waiting (o.mu held).
// The leader never blocks on a follower: what does not fit in the socket
// buffer is dropped, whole frames only, so that the stream stays whole;
// the rest of a frame partly written is kept and goes first next time.
// There is one connection per owner: after a failure, a new one is tried
// only after fwdRedial.
func (s *Shared) flush(owner uint8, o *outConn) {
	frames, ends := o.frame, o.ends
	n := uint64(len(ends))
	o.frame, o.ends = o.frame[:0], o.ends[:0]
	if s.closed.Load() {
		s.forwardDrops.Add(n)
		return
	}
	if o.c == nil {
		if time.Now().Before(o.retryAt) {
			s.forwardDrops.Add(n)
			return
		}
		c, err := net.DialUnix("unix", nil, &net.UnixAddr{Name: s.fwdName(owner), Net: "unix"})
		if err != nil {
			o.retryAt = time.Now().Add(fwdRedial)
			s.forwardDrops.Add(n)
			return
		}
		if !s.trusted(c) {
			// Another user's process took the owner's name: its
			// packets are not for it.
			c.Close()
			s.refused.Add(1)
			o.retryAt = time.Now().Add(fwdRedial)
			s.forwardDrops.Add(n)
			return
		}
		c.SetWriteBuffer(fwdSendBuffer)
		raw, err := c.SyscallConn()
		if err != nil {
			c.Close()
			o.retryAt = time.Now().Add(fwdRedial)
			s.forwardDrops.Add(n)
			return
		}
		o.c, o.raw, o.pending = c, raw, o.pending[:0]
	}
	if len(o.pending) > 0 {
		k, err := writeNow(o.raw, o.pending)
		if err != nil {
			s.dropOut(o, n)
			return
		}
		o.pending = append(o.pending[:0], o.pending[k:]...)
		if len(o.pending) > 0 {
			s.forwardDrops.Add(n) // the owner is not reading: drop, do not queue
			return
		}
	}
	k, err := writeNow(o.raw, frames)
	if err != nil {
		s.dropOut(o, n)
		return
	}
	var whole uint64
	start := 0
	for _, e := range ends {
		if e > k {
			if k > start { // this frame went out in part: finish it next time
				o.pending = append(o.pending[:0], frames[k:e]...)
				whole++
			}
			break
		}
		whole++
		start = e
	}
	s.forwarded.Add(whole)
	s.forwardDrops.Add(n - whole)
}

// dropOut closes o's connection after an error, dropping n packets.
func (s *Shared) dropOut(o *outConn, n uint64) {
	o.c.Close()
	o.c, o.raw, o.pending = nil, nil, o.pending[:0]
	o.retryAt = time.Now().Add(fwdRedial)
	s.forwardDrops.Add(n)
}

// writeNow writes what the socket takes of b at once.
func writeNow(raw syscall.RawConn, b []byte) (int, error) {
	var n int
	var werr error
	err := raw.Write(func(fd uintptr) bool {
		for n < len(b) {
			k, err := unix.Write(int(fd), b[n:])
			if err == unix.EINTR {
				continue
			}
			if err == unix.EAGAIN {
				return true
			}
			if err != nil {
				werr = err
				return true
			}
			n += k
		}
		return true
	})
	if err == nil {
		err = werr
	}
	return n, err
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
