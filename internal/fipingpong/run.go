package fipingpong

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"runtime"
	"syscall"
	"time"

	"github.com/rdmago/rdmago/fabric"
	"github.com/rdmago/rdmago/internal/units"
	"golang.org/x/sys/unix"
)

// session is one side's fabric objects.
type session struct {
	o      *Options
	out    io.Writer
	errw   io.Writer
	c      *ctrl
	server bool

	fab  *fabric.Fabric
	eq   *fabric.EQ
	dom  *fabric.Domain
	txcq *fabric.CQ
	rxcq *fabric.CQ
	ep   *fabric.Endpoint
	pep  *fabric.PassiveEndpoint
	av   *fabric.AV
	peer fabric.Addr // the peer's AV handle (FI_EP_RDM)

	sizes      []int  // the sizes that fit the endpoint's max_msg_size
	tx, rx     []byte // the buffers, prefixes included
	txPrefix   int    // FI_MSG_PREFIX room before the data
	rxPrefix   int
	mr         *fabric.MR // the buffers' registration (FI_MR_LOCAL providers)
	desc       any
	injectSize int
	filled     int // buffers filled with the -c pattern
	checked    int // buffers checked
	received   int

	nextCheck time.Time // when peerAlive looks next
	ctrlEOF   time.Time // when the control connection was seen closed
}

// Run runs fi_pingpong: a server without o.Server, a client with it.
func Run(ctx context.Context, o *Options, stdout, stderr io.Writer) error {
	if runtime.GOMAXPROCS(0) < 2 {
		// fi_pingpong spins on fi_cq_read; the software device's
		// goroutines need a P of their own beside the spinning one.
		runtime.GOMAXPROCS(2)
	}
	c, err := openCtrl(ctx, o)
	if err != nil {
		fmt.Fprintf(stderr, "[error] %v\n", err)
		return fabric.ErrConnRefused
	}
	defer c.c.Close()
	stop := context.AfterFunc(ctx, func() { c.c.Close() })
	defer stop()
	s := &session{o: o, out: stdout, errw: stderr, c: c, server: o.Server == ""}
	defer s.close()
	if err := s.setup(ctx); err != nil {
		return s.fail(err)
	}
	fmt.Fprintf(stdout, "%-8s%-8s%-9s%-8s%8s %10s%13s%13s\n", "bytes", "#sent", "#ack", "total", "time", "MB/sec", "usec/xfer", "Mxfers/sec")
	for _, size := range s.sizes {
		if err := s.pingpong(ctx, size); err != nil {
			return s.fail(err)
		}
	}
	if err := s.finalize(ctx); err != nil {
		return s.fail(err)
	}
	return nil
}

// fail reports err on stderr and returns the errno to exit with.
func (s *session) fail(err error) error {
	fmt.Fprintf(s.errw, "[error] %v\n", err)
	var e fabric.Errno
	if errors.As(err, &e) {
		return e
	}
	return fabric.ErrOther
}

func (s *session) hints() *fabric.Info {
	h := fabric.AllocInfo()
	h.Caps = fabric.CapMsg
	if s.o.Tagged {
		h.Caps = fabric.CapTagged
	}
	h.Mode = fabric.ModeContext | fabric.ModeContext2 | fabric.ModeMsgPrefix
	h.DomainAttr.MRMode = fabric.MRLocal | fabric.MRAllocated | fabric.MRProvKey | fabric.MRVirtAddr
	h.EPAttr.Type = s.o.EPType
	if s.o.EPType == fabric.EPDgram && s.o.OneSize {
		// As the C program: a datagram endpoint must carry the size
		// asked for whole, or fi_getinfo finds none.
		h.EPAttr.MaxMsgSize = uint64(s.o.Sizes[0])
	}
	h.FabricAttr.ProvName = s.o.Provider
	h.DomainAttr.Name = s.o.Domain
	return h
}

// setup makes the connection: the server listens and sends its passive
// endpoint's name, the client connects to it.
func (s *session) setup(ctx context.Context) error {
	hints := s.hints()
	var serverName []byte
	if !s.server {
		f, name, err := s.c.recvName()
		if err != nil {
			return err
		}
		hints.AddrFormat, serverName = f, name
		if a, err := fabric.ParseSockaddr(f, name); err == nil {
			hints.DestAddr = a
		} else {
			hints.DestName = name
		}
	}
	infos, err := fabric.GetInfo("", "", 0, hints)
	if err != nil {
		return fmt.Errorf("fi_getinfo(): ret=-%d (%w)", int(fabric.ErrNoData), err)
	}
	info := infos[0]
	// As the C program: the sizes run up to the largest message the
	// endpoint takes (a datagram's is the MTU); a -S over it runs none.
	for _, n := range s.o.Sizes {
		if info.EPAttr == nil || info.EPAttr.MaxMsgSize == 0 || uint64(n) <= info.EPAttr.MaxMsgSize {
			s.sizes = append(s.sizes, n)
		}
	}
	if s.fab, err = fabric.OpenFabric(info); err != nil {
		return err
	}
	if s.eq, err = s.fab.OpenEQ(); err != nil {
		return err
	}
	if s.o.EPType != fabric.EPMsg {
		return s.setupConnectionless(info, serverName)
	}
	if s.server {
		if s.pep, err = s.fab.OpenPassiveEndpoint(info, nil); err != nil {
			return err
		}
		if err := s.pep.Bind(s.eq); err != nil {
			return err
		}
		if err := s.pep.Listen(); err != nil {
			return err
		}
		f, name, err := fabric.GetName(s.pep)
		if err != nil {
			return err
		}
		if err := s.c.sendName(f, name); err != nil {
			return err
		}
		ev, err := s.event(ctx, fabric.EventConnReq)
		if err != nil {
			return err
		}
		info = ev.Info
	}
	if err := s.open(info); err != nil {
		return err
	}
	if s.server {
		if err := s.ep.Accept(nil); err != nil {
			return err
		}
	} else if err := s.ep.Connect(info.DestAddr, nil); err != nil {
		return err
	}
	_, err = s.event(ctx, fabric.EventConnected)
	return err
}

// setupConnectionless trades names as fi_pingpong does for FI_EP_RDM and
// FI_EP_DGRAM: the server sends its endpoint's name first, then takes the
// client's; both put the peer in their AV.
func (s *session) setupConnectionless(info *fabric.Info, serverName []byte) error {
	if err := s.open(info); err != nil {
		return err
	}
	f, name, err := fabric.GetName(s.ep)
	if err != nil {
		return err
	}
	peerFormat, peer := f, serverName
	if s.server {
		if err := s.c.sendName(f, name); err != nil {
			return err
		}
		if peerFormat, peer, err = s.c.recvName(); err != nil {
			return err
		}
	} else if err := s.c.sendName(f, name); err != nil {
		return err
	}
	if s.peer, err = s.av.InsertName(peerFormat, peer); err != nil {
		return fmt.Errorf("fi_av_insert(): %w", err)
	}
	if s.o.EPType == fabric.EPDgram {
		// As the C program: one receive more, so that one is posted for
		// the peer's "fin" however the last exchange went.
		return s.postRecv()
	}
	return nil
}

// open opens the domain, CQs and endpoint, and posts the first receive.
func (s *session) open(info *fabric.Info) error {
	var err error
	if s.dom, err = s.fab.OpenDomain(info); err != nil {
		return err
	}
	if s.av, err = s.dom.OpenAV(nil); err != nil {
		return err
	}
	s.peer = fabric.AddrNotAvail
	if s.txcq, err = s.dom.OpenCQ(&fabric.CQAttr{Format: fabric.CQFormatContext}); err != nil {
		return err
	}
	if s.rxcq, err = s.dom.OpenCQ(&fabric.CQAttr{Format: fabric.CQFormatContext}); err != nil {
		return err
	}
	if s.ep, err = s.dom.OpenEndpoint(info, nil); err != nil {
		return err
	}
	for _, b := range []error{s.ep.BindEQ(s.eq), s.ep.BindAV(s.av), s.ep.BindCQ(s.txcq, fabric.BindTransmit), s.ep.BindCQ(s.rxcq, fabric.BindRecv), s.ep.Enable()} {
		if b != nil {
			return b
		}
	}
	maxSize := 0
	for _, n := range s.sizes {
		maxSize = max(maxSize, n)
	}
	if info.Mode&fabric.ModeMsgPrefix != 0 && info.EPAttr != nil {
		// As the C program: the provider's prefix goes in front of the
		// data in the buffers of the directions whose mode asks for it.
		if info.TxAttr != nil && info.TxAttr.Mode&fabric.ModeMsgPrefix != 0 {
			s.txPrefix = info.EPAttr.MsgPrefixSize
		}
		if info.RxAttr != nil && info.RxAttr.Mode&fabric.ModeMsgPrefix != 0 {
			s.rxPrefix = info.EPAttr.MsgPrefixSize
		}
	}
	n := max(maxSize, 64)
	buf := make([]byte, 2*n+s.txPrefix+s.rxPrefix)
	s.tx, s.rx = buf[:n+s.txPrefix:n+s.txPrefix], buf[n+s.txPrefix:]
	if info.DomainAttr != nil && info.DomainAttr.MRMode&fabric.MRLocal != 0 {
		// As fi_pingpong: the whole buffer registered once, key 0xC0DE
		// asked for (the provider's key is used).
		mr, err := s.dom.RegMR(buf, fabric.AccessSend|fabric.AccessRecv, 0xC0DE)
		if err != nil {
			return fmt.Errorf("fi_mr_reg(): %w", err)
		}
		s.mr, s.desc = mr, mr.Desc()
	}
	s.injectSize = info.TxAttr.InjectSize
	return s.postRecv()
}

// pingpongTag is the tag fi_pingpong's tagged mode uses.
const pingpongTag = 1234

func (s *session) postRecv() error {
	if s.o.Tagged {
		return s.ep.TRecv(s.rx, s.desc, fabric.AddrNotAvail, pingpongTag, 0, nil)
	}
	return s.ep.Recv(s.rx, s.desc, fabric.AddrNotAvail, nil)
}

// event waits for an event of type want.
func (s *session) event(ctx context.Context, want fabric.EventType) (fabric.EQEntry, error) {
	for {
		e, err := s.eq.SRead(ctx)
		if errors.Is(err, fabric.ErrAvail) {
			ee, _ := s.eq.ReadErr()
			return e, fmt.Errorf("fi_eq_sread(): %w", ee.Err)
		}
		if err != nil {
			if ctx.Err() != nil {
				return e, ctx.Err()
			}
			continue
		}
		if e.Event != want {
			return e, fmt.Errorf("unexpected CM event %s", e.Event)
		}
		return e, nil
	}
}

// wait polls cq for one completion, as fi_pingpong busy-polls fi_cq_read.
// Every peerCheckEvery it also looks for signs of a dead peer (see
// peerAlive), so that a killed peer ends the run instead of leaving it
// spinning.
func (s *session) wait(ctx context.Context, cq *fabric.CQ) error {
	var e [1]fabric.CQEntry
	for spins := 0; ; spins++ {
		n, err := cq.Read(e[:])
		if n == 1 {
			s.ctrlEOF = time.Time{}
			return nil
		}
		switch {
		case err == fabric.ErrAgain:
			// Nothing yet: the usual answer, told apart without
			// errors.Is's walk on every turn of the spin.
		case errors.Is(err, fabric.ErrAvail):
			return s.cqErr(cq)
		case err != nil && !errors.Is(err, fabric.ErrAgain):
			return err
		}
		if spins%1024 == 1023 {
			if ctx.Err() != nil {
				return ctx.Err()
			}
			if err := s.peerAlive(); err != nil {
				return err
			}
		}
	}
}

// Dead-peer detection while spinning. A connected endpoint reports its
// peer's end on the EQ (FI_SHUTDOWN: the tcp provider as soon as the
// kernel closes the connection, the verbs provider when its probes go
// unanswered). The control connection covers every endpoint type: the
// kernel closes it when the peer's process dies. Its end is a dead peer
// only after ctrlGrace with no completion, since a peer that finished
// may close it while its last message is still on the way.
const (
	peerCheckEvery = 100 * time.Millisecond
	ctrlGrace      = 2 * time.Second
)

// peerAlive returns an error when the peer is known to be gone.
func (s *session) peerAlive() error {
	now := time.Now()
	if now.Before(s.nextCheck) {
		return nil
	}
	s.nextCheck = now.Add(peerCheckEvery)
	if s.o.EPType == fabric.EPMsg && s.eq != nil {
		ev, err := s.eq.Read()
		switch {
		case errors.Is(err, fabric.ErrAvail):
			ee, _ := s.eq.ReadErr()
			return fmt.Errorf("fi_eq_read(): the connection failed: %w", ee.Err)
		case err == nil && ev.Event == fabric.EventShutdown:
			return peerGone{"fi_eq_read(): FI_SHUTDOWN: the peer closed the connection", fabric.ErrShutdown}
		}
	}
	if s.ctrlEOF.IsZero() {
		if peerClosed(s.c.c) {
			s.ctrlEOF = now
		}
	} else if now.Sub(s.ctrlEOF) >= ctrlGrace {
		return peerGone{"ctrl/read: the peer closed the control connection: the peer is gone", fabric.ErrConnReset}
	}
	return nil
}

// peerGone is the error of a run whose peer went away.
type peerGone struct {
	msg   string
	errno fabric.Errno
}

func (e peerGone) Error() string { return e.msg }
func (e peerGone) Unwrap() error { return e.errno }

// peerClosed reports whether c's peer has closed it (or reset it),
// without taking data that may be waiting: a non-blocking MSG_PEEK.
func peerClosed(c net.Conn) bool {
	sc, ok := c.(syscall.Conn)
	if !ok {
		return false
	}
	rc, err := sc.SyscallConn()
	if err != nil {
		return false
	}
	gone := false
	rc.Control(func(fd uintptr) {
		var b [1]byte
		n, _, err := unix.Recvfrom(int(fd), b[:], unix.MSG_PEEK|unix.MSG_DONTWAIT)
		gone = err == nil && n == 0 || err != nil && err != unix.EAGAIN && err != unix.EINTR
	})
	return gone
}

const alphabet = "0123456789abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ"

// fill writes the -c pattern: the alphabet, cyclically, from where the
// count of filled buffers puts it.
func (s *session) fill(b []byte) {
	start := s.filled * 7 % len(alphabet)
	s.filled++
	n := copy(b, alphabet[start:])
	for n < len(b) {
		n += copy(b[n:], alphabet)
	}
}

// check verifies a received buffer against the pattern its sender filled.
func (s *session) check(b []byte) error {
	start := s.checked * 7 % len(alphabet)
	s.checked++
	want := alphabet[start:]
	for off := 0; off < len(b); {
		n := min(len(want), len(b)-off)
		if string(b[off:off+n]) != want[:n] {
			for i := 0; i < n; i++ {
				if b[off+i] != want[i] {
					return fmt.Errorf("data check error at byte %d of %d", off+i, len(b))
				}
			}
		}
		off += n
		want = alphabet
	}
	return nil
}

func (s *session) send(ctx context.Context, size int) error {
	b := s.tx[:s.txPrefix+size]
	if s.o.Check {
		s.fill(b[s.txPrefix:])
	}
	if size < s.injectSize {
		for {
			var err error
			if s.o.Tagged {
				err = s.ep.TInject(b, s.peer, pingpongTag)
			} else {
				err = s.ep.Inject(b, s.peer)
			}
			if !errors.Is(err, fabric.ErrAgain) {
				return err
			}
			if err := s.drainTx(); err != nil {
				return err
			}
		}
	}
	for {
		var err error
		if s.o.Tagged {
			err = s.ep.TSend(b, s.desc, s.peer, pingpongTag, nil)
		} else {
			err = s.ep.Send(b, s.desc, s.peer, nil)
		}
		if err == nil {
			break
		}
		if !errors.Is(err, fabric.ErrAgain) {
			return err
		}
		if err := s.drainTx(); err != nil {
			return err
		}
	}
	return s.wait(ctx, s.txcq)
}

// drainTx progresses the transmit CQ while a post finds the queue full
// (as fi_pingpong does), and ends the run on a dead peer.
func (s *session) drainTx() error {
	var e [1]fabric.CQEntry
	if _, err := s.txcq.Read(e[:0]); errors.Is(err, fabric.ErrAvail) {
		return s.cqErr(s.txcq)
	}
	return s.peerAlive()
}

// cqErr takes cq's error entry. An operation that failed because the
// connection ended says so: the EQ tells why.
func (s *session) cqErr(cq *fabric.CQ) error {
	ee, _ := cq.ReadErr()
	return s.why(fmt.Errorf("fi_cq_read(): %w", ee.Err))
}

func (s *session) recv(ctx context.Context, size int) error {
	if err := s.wait(ctx, s.rxcq); err != nil {
		return err
	}
	s.received++
	if s.o.Check {
		if err := s.check(s.rx[s.rxPrefix : s.rxPrefix+size]); err != nil {
			return err
		}
	}
	if err := s.postRecv(); err != nil {
		return s.why(err)
	}
	return nil
}

// why adds to err, when the peer is known to be gone, that it is.
func (s *session) why(err error) error {
	s.nextCheck = time.Time{}
	if perr := s.peerAlive(); perr != nil {
		return fmt.Errorf("%w (%v)", err, perr)
	}
	return err
}

// pingpong runs one size: sync, the iterations, the count exchange, the
// row.
func (s *session) pingpong(ctx context.Context, size int) error {
	if err := s.c.sync(s.server); err != nil {
		return err
	}
	s.received = 0
	start := time.Now()
	for i := 0; i < s.o.Iters; i++ {
		if s.server {
			if err := s.recv(ctx, size); err != nil {
				return err
			}
			if err := s.send(ctx, size); err != nil {
				return err
			}
		} else {
			if err := s.send(ctx, size); err != nil {
				return err
			}
			if err := s.recv(ctx, size); err != nil {
				return err
			}
		}
	}
	elapsed := time.Since(start)
	ack, err := s.c.exchangeCount(s.server, s.received)
	if err != nil {
		return err
	}
	fmt.Fprint(s.out, Row(size, s.o.Iters, ack, elapsed))
	return nil
}

// finalize sends "fin" with FI_TRANSMIT_COMPLETE, waits for the peer's,
// and shuts the connection down.
func (s *session) finalize(ctx context.Context) error {
	fin := s.tx[:s.txPrefix+4]
	copy(fin[s.txPrefix:], "fin\x00")
	msg := &fabric.Msg{Buf: fin, Desc: s.desc, Addr: s.peer}
	flags := fabric.FlagTransmitComplete | fabric.FlagCompletion
	var err error
	if s.o.Tagged {
		err = s.ep.TSendMsg(msg, pingpongTag, flags)
	} else {
		err = s.ep.SendMsg(msg, flags)
	}
	if err != nil {
		return err
	}
	if err := s.wait(ctx, s.txcq); err != nil {
		return err
	}
	if err := s.wait(ctx, s.rxcq); err != nil {
		return err
	}
	if s.o.EPType != fabric.EPMsg {
		return nil
	}
	return s.ep.Shutdown()
}

func (s *session) close() {
	if s.ep != nil {
		s.ep.Close()
	}
	if s.pep != nil {
		s.pep.Close()
	}
	for _, cq := range []*fabric.CQ{s.txcq, s.rxcq} {
		if cq != nil {
			cq.Close()
		}
	}
	if s.eq != nil {
		s.eq.Close()
	}
	if s.mr != nil {
		s.mr.Close()
	}
	if s.av != nil {
		s.av.Close()
	}
	if s.dom != nil {
		s.dom.Close()
	}
}

// Row formats one result line as fi_pingpong's show_perf does.
func Row(size, iters, ack int, elapsed time.Duration) string {
	usec := float64(elapsed.Microseconds())
	total := int64(iters) * int64(size) * 2
	ackCol := "=" + units.Count(int64(ack))
	switch {
	case iters > ack:
		ackCol = "+" + units.Count(int64(iters-ack))
	case iters < ack:
		ackCol = "-" + units.Count(int64(ack-iters))
	}
	mbps, perXfer, rate := 0.0, 0.0, 0.0
	if usec > 0 {
		mbps = float64(total) / usec
		perXfer = usec / float64(iters) / 2
		rate = 1 / perXfer
	}
	return fmt.Sprintf("%-8s%-8s%-9s%-8s%8.2fs%10.2f%11.2f%11.2f\n",
		units.Size(int64(size)), units.Count(int64(iters)), ackCol, units.Size(total), usec/1e6, mbps, perXfer, rate)
}
