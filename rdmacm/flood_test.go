package rdmacm_test

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"math/rand/v2"
	"net"
	"net/netip"
	"runtime"
	"runtime/metrics"
	"sync"
	"testing"
	"time"

	"github.com/rdmago/rdmago/rdmacm"
	"github.com/rdmago/rdmago/rdmacm/mad"
	"github.com/rdmago/rdmago/rxe"
	"github.com/rdmago/rdmago/rxe/wire"
	"github.com/rdmago/rdmago/verbs"
)

// The addresses of the flood test: the listening device, the device of
// the established connection's other end, and the flooder, which has no
// RoCE device (so that nothing answers what the listener sends it).
var (
	floodSrv    = netip.MustParseAddr("127.0.0.2")
	floodCli    = netip.MustParseAddr("127.0.0.3")
	floodSource = netip.MustParseAddr("127.0.0.4")
)

// floodUDPPort finds a UDP port free on both devices' addresses, so that
// the test's devices have a RoCE port of their own beside the shared 4791.
func floodUDPPort(t *testing.T) uint16 {
	t.Helper()
	for range 20 {
		a, err := net.ListenUDP("udp4", net.UDPAddrFromAddrPort(netip.AddrPortFrom(floodSrv, 0)))
		if err != nil {
			t.Fatal(err)
		}
		port := uint16(a.LocalAddr().(*net.UDPAddr).Port)
		b, err := net.ListenUDP("udp4", net.UDPAddrFromAddrPort(netip.AddrPortFrom(floodCli, port)))
		a.Close()
		if err == nil {
			b.Close()
			return port
		}
	}
	t.Fatal("no UDP port free on both addresses")
	return 0
}

// flooder sends RoCEv2 packets to the listener's device from plain UDP
// sockets, each packet sealed with the ICRC its socket's source port
// makes.
type flooder struct {
	dst   *net.UDPAddr
	socks []*net.UDPConn
	rng   *rand.Rand
	buf   []byte
	sent  int
}

func newFlooder(t *testing.T, port uint16, nsocks int) *flooder {
	t.Helper()
	f := &flooder{dst: net.UDPAddrFromAddrPort(netip.AddrPortFrom(floodSrv, port)), rng: rand.New(rand.NewPCG(1, 2))}
	for range nsocks {
		c, err := net.ListenUDP("udp4", net.UDPAddrFromAddrPort(netip.AddrPortFrom(floodSource, 0)))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { c.Close() })
		f.socks = append(f.socks, c)
	}
	return f
}

// send seals pkt with its ICRC (unless raw) and sends it from socket i.
// A full socket buffer is the point of a flood: errors are ignored, but
// the flooder yields now and then so that the receiver runs.
func (f *flooder) send(i int, pkt []byte, raw bool) {
	c := f.socks[i%len(f.socks)]
	if !raw {
		ph := wire.PseudoHeader{Src: floodSource, Dst: floodSrv, SrcPort: uint16(c.LocalAddr().(*net.UDPAddr).Port),
			DstPort: uint16(f.dst.Port), IPv4Flags: wire.IPv4DontFragment}
		ph.SetICRC(pkt)
	}
	c.WriteToUDP(pkt, f.dst)
	f.sent++
	if f.sent%64 == 0 {
		// Let the device's receive loop keep up: a flood the kernel
		// drops at the socket tests nothing of ours.
		time.Sleep(50 * time.Microsecond)
	}
}

// req builds the i-th connection request to the listener: a UD SEND to
// QP1 carrying a CM REQ for the TCP port space, with a communication
// ID, QPN and source port of its own.
func (f *flooder) req(i int, service uint16) []byte {
	r := mad.REQ{
		LocalCommID:             0x5e000000 | uint32(i),
		ServiceID:               mad.MakeServiceID(mad.PortSpaceTCP, service),
		LocalCAGUID:             0x0200feedfacecafe,
		LocalQPN:                uint32(0x100000 + i),
		ResponderResources:      1,
		InitiatorDepth:          1,
		RemoteCMResponseTimeout: 20,
		TransportServiceType:    mad.TransportRC,
		StartingPSN:             uint32(i) & 0xffffff,
		LocalCMResponseTimeout:  20,
		RetryCount:              7,
		PKey:                    0xffff,
		PathMTU:                 mad.MTU1024,
		RNRRetryCount:           7,
		MaxCMRetries:            15,
		Primary: mad.Path{
			LocalLID: 0xffff, RemoteLID: 0xffff,
			LocalGID: mad.GIDFromAddr(floodSource), RemoteGID: mad.GIDFromAddr(floodSrv),
			HopLimit: 64, LocalACKTimeout: 19,
		},
	}
	hdr := mad.CMAHeader{Port: uint16(1024 + i%60000), Src: floodSource, Dst: floodSrv}
	if err := r.SetCMAPrivateData(&hdr, nil); err != nil {
		panic(err)
	}
	b, err := mad.Marshal(mad.Header{BaseVersion: mad.BaseVersion, MgmtClass: mad.MgmtClassCM, ClassVersion: mad.CMClassVersion,
		Method: mad.MethodSend, TransactionID: uint64(i) << 8, AttrID: r.AttrID()}, &r)
	if err != nil {
		panic(err)
	}
	h := wire.Headers{
		BTH:  wire.BTHFields{OpCode: wire.UDSendOnly, PKey: wire.DefaultPKey, DestQP: 1, PSN: wire.PSN(i & 0xffffff)},
		DETH: wire.DETHFields{QKey: mad.QP1QKey, SrcQP: 1},
	}
	pkt, err := wire.AppendPacket(f.buf[:0], &h, b)
	if err != nil {
		panic(err)
	}
	f.buf = pkt
	return pkt
}

// unknownQP builds a request for a QP the device does not have: SENDs,
// RDMA WRITEs, READs and atomics of RC, and UD SENDs.
func (f *flooder) unknownQP(i int) []byte {
	qpn := uint32(0xa00000 + i%0x100000)
	var h wire.Headers
	payload := []byte("unknown QP")
	switch i % 5 {
	case 0:
		h.BTH = wire.BTHFields{OpCode: wire.RCSendOnly, DestQP: qpn}
	case 1:
		h.BTH = wire.BTHFields{OpCode: wire.RCWriteOnly, DestQP: qpn}
		h.RETH = wire.RETHFields{VA: 0x1000, RKey: uint32(i), DMALen: uint32(len(payload))}
	case 2:
		h.BTH = wire.BTHFields{OpCode: wire.RCReadRequest, DestQP: qpn}
		h.RETH = wire.RETHFields{VA: 0x1000, RKey: uint32(i), DMALen: 4096}
		payload = nil
	case 3:
		h.BTH = wire.BTHFields{OpCode: wire.RCFetchAdd, DestQP: qpn}
		h.AtomicETH = wire.AtomicETHFields{VA: 0x1000, RKey: uint32(i), SwapAdd: 1}
		payload = nil
	case 4:
		h.BTH = wire.BTHFields{OpCode: wire.UDSendOnly, DestQP: qpn}
		h.DETH = wire.DETHFields{QKey: 0x11111111, SrcQP: 7}
	}
	h.BTH.PKey = wire.DefaultPKey
	h.BTH.PSN = wire.PSN(i & 0xffffff)
	h.BTH.AckReq = true
	pkt, err := wire.AppendPacket(f.buf[:0], &h, payload)
	if err != nil {
		panic(err)
	}
	f.buf = pkt
	return pkt
}

// malformed builds a bad packet; raw reports that it must be sent as it
// is (its ICRC, if any, wrong). The kinds: random bytes of random length,
// a connection request cut short, one with a flipped bit, and well-sealed
// packets whose headers or MAD make no sense.
func (f *flooder) malformed(i int, service uint16) (pkt []byte, raw bool) {
	switch i % 6 {
	case 0:
		n := f.rng.IntN(400)
		pkt = append(f.buf[:0], make([]byte, n)...)
		for j := range pkt {
			pkt[j] = byte(f.rng.Uint32())
		}
		f.buf = pkt
		return pkt, true
	case 1:
		pkt = f.req(i, service)
		return pkt[:f.rng.IntN(len(pkt))], true
	case 2:
		pkt = f.req(i, service)
		f.send(i, pkt, false) // seal first, then damage one bit
		f.sent--
		pkt[f.rng.IntN(len(pkt))] ^= 1 << f.rng.IntN(8)
		return pkt, true
	case 3:
		// A sealed UD SEND to QP1 whose MAD is garbage.
		h := wire.Headers{
			BTH:  wire.BTHFields{OpCode: wire.UDSendOnly, PKey: wire.DefaultPKey, DestQP: 1},
			DETH: wire.DETHFields{QKey: mad.QP1QKey, SrcQP: 1},
		}
		junk := make([]byte, mad.MADLen)
		for j := range junk {
			junk[j] = byte(f.rng.Uint32())
		}
		junk[1] = byte(mad.MgmtClassCM) // mostly a CM MAD, so the decoder sees it
		pkt, _ = wire.AppendPacket(f.buf[:0], &h, junk)
	case 4:
		// A sealed REQ with a wrong Q_Key.
		pkt = f.req(i, service)
		binary.BigEndian.PutUint32(pkt[wire.BTHLen:], 0xdeadbeef)
	case 5:
		// A sealed packet with an opcode no transport defines.
		h := wire.Headers{BTH: wire.BTHFields{OpCode: wire.RCSendOnly, PKey: wire.DefaultPKey, DestQP: 1}}
		pkt, _ = wire.AppendPacket(f.buf[:0], &h, []byte("bad opcode"))
		pkt[0] = 0x1f
	}
	f.buf = pkt
	return pkt, false
}

// streamMsgLen is the size of the established connection's messages: a
// sequence number, then bytes derived from it.
const streamMsgLen = 64

func fillMsg(b []byte, seq uint64) {
	binary.BigEndian.PutUint64(b, seq)
	for i := 8; i < len(b); i++ {
		b[i] = byte(seq*31 + uint64(i))
	}
}

// checkMsg reports what is wrong with a received message, or "".
func checkMsg(b []byte, want uint64) string {
	if got := binary.BigEndian.Uint64(b); got != want {
		return fmt.Sprintf("sequence %d, want %d", got, want)
	}
	for i := 8; i < len(b); i++ {
		if b[i] != byte(want*31+uint64(i)) {
			return fmt.Sprintf("message %d: byte %d is %#x", want, i, b[i])
		}
	}
	return ""
}

// streamEnd is the sequence number of the message that ends the stream.
const streamEnd = ^uint64(0)

// A listener flooded with connection requests, packets for QPs it does
// not have and malformed packets keeps its heap and goroutines bounded,
// holds no more pending requests than its backlog (the rest are dropped
// without an answer, as the kernel's rdma_cm does when a listener's
// backlog is used up, so that the peer's CM resends them), and an
// established connection beside it loses nothing.
func TestListenerFloodBoundedMemoryAndBacklog(t *testing.T) {
	if testing.Short() {
		t.Skip("floods the loopback interface")
	}
	const backlog = 8
	port := floodUDPPort(t)
	for _, a := range []netip.Addr{floodSrv, floodCli} {
		dev, err := rxe.NewDevice(rxe.Config{Name: "rxe_flood_" + a.String(), Addrs: []netip.Addr{a}, Port: port})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(rdmacm.RegisterDevice(dev))
	}
	const service = 7999
	srvAddr := netip.AddrPortFrom(floodSrv, service).String()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()

	// The established connection: the client SENDs numbered messages,
	// the server checks each as it arrives.
	const window = 16
	recvBuf := make([]byte, window*streamMsgLen)
	var recvMR *verbs.MR
	l, err := rdmacm.Listen(srvAddr, &rdmacm.Options{Backlog: backlog, Setup: func(c *rdmacm.Conn) error {
		mr, err := c.ID.RegMsgs(recvBuf)
		if err != nil {
			return err
		}
		recvMR = mr
		for i := range window {
			if err := c.ID.PostRecv(uint64(i), mr, i*streamMsgLen, streamMsgLen); err != nil {
				return err
			}
		}
		return nil
	}})
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	accepted := make(chan *rdmacm.Conn, 1)
	acceptErr := make(chan error, 1)
	go func() {
		c, err := l.Accept(ctx)
		if err != nil {
			acceptErr <- err
			return
		}
		accepted <- c
	}()
	cli, err := rdmacm.Dial(ctx, srvAddr, &rdmacm.Options{LocalAddr: netip.AddrPortFrom(floodCli, 0)})
	if err != nil {
		t.Fatal(err)
	}
	defer cli.Close()
	var srv *rdmacm.Conn
	select {
	case srv = <-accepted:
	case err := <-acceptErr:
		t.Fatal(err)
	}
	defer srv.Close()
	defer srv.ID.DeregMR(recvMR)
	sendBuf := make([]byte, streamMsgLen)
	sendMR, err := cli.ID.RegMsgs(sendBuf)
	if err != nil {
		t.Fatal(err)
	}
	defer cli.ID.DeregMR(sendMR)

	runtime.GC()
	var before runtime.MemStats
	runtime.ReadMemStats(&before)
	goroutinesBefore := runtime.NumGoroutine()
	srvDev := srv.ID.Device()
	countersBefore, _ := srvDev.QueryCounters()

	var wg sync.WaitGroup
	floodDone := make(chan struct{})
	var received, sent uint64
	var recvErr, sendErr error
	wg.Add(2)
	go func() { // the server's side of the stream
		defer wg.Done()
		for want := uint64(0); ; want++ {
			wc, err := srv.ID.GetRecvComp(ctx)
			if err == nil && wc.Status != verbs.WCSuccess {
				err = fmt.Errorf("receive completion %v", wc.Status)
			}
			if err == nil && wc.ByteLen != streamMsgLen {
				err = fmt.Errorf("receive of %d bytes, want %d", wc.ByteLen, streamMsgLen)
			}
			if err != nil {
				recvErr = err
				return
			}
			slot := int(wc.WRID)
			msg := recvBuf[slot*streamMsgLen : (slot+1)*streamMsgLen]
			if binary.BigEndian.Uint64(msg) == streamEnd {
				received = want
				return
			}
			if bad := checkMsg(msg, want); bad != "" {
				recvErr = errors.New(bad)
				return
			}
			if err := srv.ID.PostRecv(uint64(slot), recvMR, slot*streamMsgLen, streamMsgLen); err != nil {
				recvErr = err
				return
			}
		}
	}()
	go func() { // the client's: until the flood is over, then the end
		defer wg.Done()
		for seq := uint64(0); ; seq++ {
			end := false
			select {
			case <-floodDone:
				end = seq >= 100
			default:
			}
			if end {
				sent = seq
				seq = streamEnd
			}
			fillMsg(sendBuf, seq)
			err := cli.ID.PostSend(seq, sendMR, 0, streamMsgLen, verbs.SendSignaled)
			var wc verbs.WC
			if err == nil {
				wc, err = cli.ID.GetSendComp(ctx)
			}
			if err == nil && wc.Status != verbs.WCSuccess {
				err = fmt.Errorf("send completion %v", wc.Status)
			}
			if err != nil {
				sendErr = fmt.Errorf("message %d: %w", seq, err)
				return
			}
			if end {
				return
			}
		}
	}()

	// The peak matters as much as what is left: sample the heap while
	// the flood lasts, both in use (garbage included, which depends on
	// when the collector runs) and live as of each collection.
	var peak, peakLive uint64
	live := []metrics.Sample{{Name: "/gc/heap/live:bytes"}}
	metrics.Read(live)
	liveBefore := live[0].Value.Uint64()
	sampled := make(chan struct{})
	go func() {
		defer close(sampled)
		tick := time.NewTicker(20 * time.Millisecond)
		defer tick.Stop()
		for {
			var m runtime.MemStats
			runtime.ReadMemStats(&m)
			peak = max(peak, m.HeapInuse)
			metrics.Read(live)
			peakLive = max(peakLive, live[0].Value.Uint64())
			select {
			case <-floodDone:
				return
			case <-tick.C:
			}
		}
	}()

	f := newFlooder(t, port, 32)
	n := floodCount
	start := time.Now()
	for i := range n {
		// One in four asks for a service nobody listens at, which the
		// listener's CM answers with a REJ; one in eight repeats one of
		// the first requests, which the listener holds (if they came
		// through) and answers with an MRA.
		svc, j := uint16(service), i
		switch {
		case i%4 == 3:
			svc++
		case i%8 == 1 && i > backlog:
			j = i / 8 % backlog
		}
		f.send(i, f.req(j, svc), false)
	}
	for i := range n {
		f.send(i, f.unknownQP(i), false)
	}
	for i := range n {
		pkt, raw := f.malformed(i, service)
		f.send(i, pkt, raw)
	}
	floodTook := time.Since(start)
	// Let the device take what the socket still holds.
	time.Sleep(200 * time.Millisecond)

	runtime.GC()
	var after runtime.MemStats
	runtime.ReadMemStats(&after)
	goroutinesAfter := runtime.NumGoroutine()
	countersAfter, _ := srvDev.QueryCounters()
	close(floodDone)
	wg.Wait()
	<-sampled
	if recvErr != nil || sendErr != nil {
		t.Fatalf("the established connection failed: receiving: %v; sending: %v", recvErr, sendErr)
	}
	if received != sent {
		t.Errorf("the server received %d messages, the client sent %d", received, sent)
	}

	growth := int64(after.HeapInuse) - int64(before.HeapInuse)
	allocGrowth := int64(after.HeapAlloc) - int64(before.HeapAlloc)
	t.Logf("flood of %d REQs, %d packets to unknown QPs and %d malformed packets sent in %v; the device counted %d received packets",
		n, n, n, floodTook.Round(time.Millisecond), countersAfter[verbs.CounterRcvdPkts]-countersBefore[verbs.CounterRcvdPkts])
	t.Logf("live heap at most %d bytes during the flood, %d before (%+d)", peakLive, liveBefore, int64(peakLive)-int64(liveBefore))
	t.Logf("heap in use %d -> %d bytes (%+d), at most %d during the flood (%+d); heap allocated %d -> %d (%+d); goroutines %d -> %d; %d messages on the established connection",
		before.HeapInuse, after.HeapInuse, growth, peak, int64(peak)-int64(before.HeapInuse), before.HeapAlloc, after.HeapAlloc, allocGrowth,
		goroutinesBefore, goroutinesAfter, sent)
	const limit = 64 << 20
	if growth > limit {
		t.Errorf("heap in use grew by %d bytes, more than %d", growth, limit)
	}
	if int64(peakLive)-int64(liveBefore) > limit {
		t.Errorf("the live heap reached %d bytes during the flood, %d more than before, over %d", peakLive, int64(peakLive)-int64(liveBefore), limit)
	}
	if goroutinesAfter > goroutinesBefore+16 {
		t.Errorf("goroutines grew from %d to %d", goroutinesBefore, goroutinesAfter)
	}

	// The requests the listener holds: as many as its backlog.
	lch := l.ID().Channel()
	var pending []*rdmacm.Event
	for {
		ev, ok := lch.PollEvent()
		if !ok {
			break
		}
		if ev.Type == rdmacm.EventConnectRequest {
			pending = append(pending, ev)
		}
	}
	t.Logf("%d connection requests pending on a listener of backlog %d", len(pending), backlog)
	if len(pending) != backlog {
		t.Errorf("%d connection requests pending, want the backlog, %d", len(pending), backlog)
	}
	for _, ev := range pending {
		ev.Ack()
		if err := ev.ID.Reject(nil); err != nil {
			t.Errorf("rejecting a flooded request: %v", err)
		}
		if err := ev.ID.Destroy(); err != nil {
			t.Errorf("destroying a flooded request's ID: %v", err)
		}
	}
}
