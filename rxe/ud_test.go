package rxe

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"net/netip"
	"testing"
	"time"

	"github.com/rdmago/rdmago/rxe/link"
	"github.com/rdmago/rdmago/verbs"
)

const testQKey = 0x11111111

// udEnd is a UD QP ready to send and receive, with a buffer of slots of
// slot bytes each.
type udEnd struct {
	*end
	slot int
}

// newUDEnd opens a device on l with a UD QP in RTS.
func newUDEnd(t testing.TB, name string, l link.Link, qkey uint32) *udEnd {
	t.Helper()
	o := pairOpts{typ: verbs.QPTUD, bufSize: 1 << 20, access: verbs.AccessLocalWrite}
	o.defaults()
	e := newEnd(t, name, l, &o)
	udToRTS(t, e.qp, qkey)
	t.Cleanup(e.close)
	return &udEnd{end: e, slot: 8192}
}

func udToRTS(t testing.TB, qp *verbs.QP, qkey uint32) {
	t.Helper()
	steps := []struct {
		a verbs.QPAttr
		m verbs.QPAttrMask
	}{
		{verbs.QPAttr{QPState: verbs.QPSInit, PortNum: 1, QKey: qkey}, verbs.QPAttrState | verbs.QPAttrPKeyIndex | verbs.QPAttrPort | verbs.QPAttrQKey},
		{verbs.QPAttr{QPState: verbs.QPSRTR}, verbs.QPAttrState},
		{verbs.QPAttr{QPState: verbs.QPSRTS, SQPSN: 0x123}, verbs.QPAttrState | verbs.QPAttrSQPSN},
	}
	for _, s := range steps {
		if err := qp.Modify(&s.a, s.m); err != nil {
			t.Fatal(err)
		}
	}
}

// ah returns an address handle from e to peer.
func (e *udEnd) ah(t testing.TB, peer *udEnd) *verbs.AH {
	t.Helper()
	g, _ := peer.ctx.QueryGID(1, 0)
	ah, err := e.pd.CreateAH(&verbs.AHAttr{IsGlobal: true, PortNum: 1, GRH: verbs.GlobalRoute{DGID: g, HopLimit: 64}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ah.Destroy() })
	return ah
}

// postRecvs posts n receives, slot i into slot i of the buffer.
func (e *udEnd) postRecvs(t testing.TB, first, n int) {
	t.Helper()
	for i := first; i < first+n; i++ {
		if err := e.qp.PostRecv([]verbs.RecvWR{{WRID: uint64(i), SGList: []verbs.SGE{e.mr.SGE(i*e.slot, e.slot)}}}); err != nil {
			t.Fatal(err)
		}
	}
}

// send posts a signaled UD send of n bytes from slot i.
func (e *udEnd) send(t testing.TB, ah *verbs.AH, qpn, qkey uint32, i, n int) {
	t.Helper()
	wr := verbs.SendWR{WRID: uint64(i), Opcode: verbs.WRSend, SendFlags: verbs.SendSignaled, SGList: []verbs.SGE{e.mr.SGE(i*e.slot, n)},
		AH: ah, RemoteQPN: qpn, RemoteQKey: qkey}
	if err := e.qp.PostSend([]verbs.SendWR{wr}); err != nil {
		t.Fatal(err)
	}
}

// stamp fills b with a pattern that names message k in every byte block.
func stamp(b []byte, k int) {
	for i := range b {
		b[i] = byte(k*31 + i*7)
	}
}

// TestUDMessagesArriveWholeOrNotAtAll sends numbered UD messages of sizes
// up to the path MTU over a lossy, reordering, duplicating network: each
// completion must hold exactly one message sent, byte for byte, behind a
// GRH naming the sender, with the sender's QPN.
func TestUDMessagesArriveWholeOrNotAtAll(t *testing.T) {
	for _, c := range []struct {
		name   string
		faults link.Faults
	}{
		{"clean", link.Faults{}},
		{"loss 10% reorder 5% duplicate 5%", link.Faults{Drop: 0.1, Reorder: 0.05, Duplicate: 0.05}},
	} {
		t.Run(c.name, func(t *testing.T) {
			n := link.NewNetwork(7)
			la, _ := n.Attach(netip.MustParseAddr("10.1.0.1"))
			lb, _ := n.Attach(netip.MustParseAddr("10.1.0.2"))
			n.SetFaults(c.faults)
			a := newUDEnd(t, "ud_a", la, testQKey)
			b := newUDEnd(t, "ud_b", lb, testQKey)
			mtu := a.end.ctxMTU(t)
			sizes := []int{0, 1, 100, mtu - 1, mtu}
			const count = 100
			b.postRecvs(t, 0, count)
			ah := a.ah(t, b)
			sent := map[int][]byte{}
			for k := 0; k < count; k++ {
				size := sizes[k%len(sizes)]
				msg := a.buf[k*a.slot : k*a.slot+size]
				stamp(msg, k)
				sent[k] = append([]byte(nil), msg...)
				a.send(t, ah, b.qp.Num(), testQKey, k, size)
			}
			for _, wc := range a.wait(count, 10*time.Second) {
				if wc.Status != verbs.WCSuccess || wc.Opcode != verbs.WCSend {
					t.Fatalf("send completion %+v", wc)
				}
			}
			time.Sleep(50 * time.Millisecond) // let the network drain
			got := b.drain()
			if c.faults.Drop == 0 && len(got) != count {
				t.Fatalf("clean network: %d of %d messages", len(got), count)
			}
			if len(got) == 0 {
				t.Fatal("nothing arrived")
			}
			ga, _ := a.ctx.QueryGID(1, 0)
			gb, _ := b.ctx.QueryGID(1, 0)
			for _, wc := range got {
				if wc.Status != verbs.WCSuccess || wc.Opcode != verbs.WCRecv || wc.WCFlags&verbs.WCWithGRH == 0 || wc.SrcQP != a.qp.Num() {
					t.Fatalf("receive completion %+v", wc)
				}
				slot := b.buf[int(wc.WRID)*b.slot:]
				payload := slot[verbs.GRHLen:wc.ByteLen]
				src, dst, _, _, ok := verbs.GRHAddrs(slot[:verbs.GRHLen])
				if !ok || verbs.GIDFromAddr(src) != ga || verbs.GIDFromAddr(dst) != gb {
					t.Fatalf("GRH %x: source %v, destination %v; want %v, %v", slot[:verbs.GRHLen], src, dst, ga, gb)
				}
				match := false
				for _, m := range sent {
					if bytes.Equal(m, payload) {
						match = true
						break
					}
				}
				if !match {
					t.Fatalf("message of %d bytes in receive %d is none of those sent", len(payload), wc.WRID)
				}
			}
			t.Logf("%d of %d messages arrived", len(got), count)
		})
	}
}

// drain polls everything the CQ has.
func (e *udEnd) drain() []verbs.WC {
	var out []verbs.WC
	buf := make([]verbs.WC, 64)
	for {
		k, _ := e.cq.Poll(buf)
		if k == 0 {
			return out
		}
		out = append(out, buf[:k]...)
	}
}

func (e *end) ctxMTU(t testing.TB) int {
	pa, err := e.ctx.QueryPort(1)
	if err != nil {
		t.Fatal(err)
	}
	return pa.ActiveMTU.Bytes()
}

// TestUDQKeyRules checks that a message with the wrong Q_Key is dropped,
// and that a Q_Key with the high bit set sends with the QP's own.
func TestUDQKeyRules(t *testing.T) {
	n := link.NewNetwork(1)
	la, _ := n.Attach(netip.MustParseAddr("10.1.0.1"))
	lb, _ := n.Attach(netip.MustParseAddr("10.1.0.2"))
	a := newUDEnd(t, "ud_a", la, testQKey)
	b := newUDEnd(t, "ud_b", lb, testQKey)
	ah := a.ah(t, b)
	b.postRecvs(t, 0, 2)
	a.send(t, ah, b.qp.Num(), testQKey+1, 0, 10) // wrong key: dropped
	a.send(t, ah, b.qp.Num(), 0x80000000, 1, 11) // privileged bit: the QP's own key
	a.wait(2, 5*time.Second)
	wcs := b.wait(1, 5*time.Second)
	if wcs[0].WRID != 0 || wcs[0].ByteLen != verbs.GRHLen+11 {
		t.Fatalf("got %+v, want the 11-byte message in the first receive", wcs[0])
	}
	time.Sleep(20 * time.Millisecond)
	if more := b.drain(); len(more) != 0 {
		t.Fatalf("the wrong-Q_Key message arrived: %+v", more)
	}
}

// TestUDRejectsAndFailsClearly covers UD's local errors: a message above
// the MTU or without an address handle is refused at post time; a receive
// buffer too small for GRH and message completes with LOC_LEN_ERR and the
// QP goes on.
func TestUDRejectsAndFailsClearly(t *testing.T) {
	n := link.NewNetwork(1)
	la, _ := n.Attach(netip.MustParseAddr("10.1.0.1"))
	lb, _ := n.Attach(netip.MustParseAddr("10.1.0.2"))
	a := newUDEnd(t, "ud_a", la, testQKey)
	b := newUDEnd(t, "ud_b", lb, testQKey)
	ah := a.ah(t, b)
	mtu := a.ctxMTU(t)
	for _, wr := range []verbs.SendWR{
		{Opcode: verbs.WRSend, SGList: []verbs.SGE{a.mr.SGE(0, mtu+1)}, AH: ah, RemoteQPN: b.qp.Num(), RemoteQKey: testQKey},
		{Opcode: verbs.WRSend, SGList: []verbs.SGE{a.mr.SGE(0, 1)}, RemoteQPN: b.qp.Num(), RemoteQKey: testQKey},
		{Opcode: verbs.WRRDMAWrite, SGList: []verbs.SGE{a.mr.SGE(0, 1)}, AH: ah, RemoteQPN: b.qp.Num(), RemoteQKey: testQKey},
	} {
		err := a.qp.PostSend([]verbs.SendWR{wr})
		if !errors.Is(err, verbs.ErrInvalidArgument) {
			t.Errorf("%s of %d bytes: %v, want EINVAL", wr.Opcode, wr.SGList[0].Length, err)
		}
	}
	pd2, err := a.ctx.AllocPD()
	if err != nil {
		t.Fatal(err)
	}
	gb, _ := b.ctx.QueryGID(1, 0)
	ah2, err := pd2.CreateAH(&verbs.AHAttr{IsGlobal: true, PortNum: 1, GRH: verbs.GlobalRoute{DGID: gb}})
	if err != nil {
		t.Fatal(err)
	}
	err = a.qp.PostSend([]verbs.SendWR{{Opcode: verbs.WRSend, SGList: []verbs.SGE{a.mr.SGE(0, 1)}, AH: ah2, RemoteQPN: b.qp.Num(), RemoteQKey: testQKey}})
	if !errors.Is(err, verbs.ErrInvalidArgument) {
		t.Errorf("address handle of another PD: %v, want EINVAL", err)
	}
	ah2.Destroy()
	pd2.Dealloc()
	// A receive of GRHLen+9 bytes cannot hold 10.
	if err := b.qp.PostRecv([]verbs.RecvWR{{WRID: 1, SGList: []verbs.SGE{b.mr.SGE(0, verbs.GRHLen+9)}}}); err != nil {
		t.Fatal(err)
	}
	b.postRecvs(t, 2, 1)
	a.send(t, ah, b.qp.Num(), testQKey, 0, 10)
	a.send(t, ah, b.qp.Num(), testQKey, 1, 10)
	a.wait(2, 5*time.Second)
	wcs := b.wait(2, 5*time.Second)
	if wcs[0].WRID != 1 || wcs[0].Status != verbs.WCLocLenErr {
		t.Errorf("short receive: %+v, want LOC_LEN_ERR", wcs[0])
	}
	if wcs[1].WRID != 2 || wcs[1].Status != verbs.WCSuccess {
		t.Errorf("next receive: %+v, want success", wcs[1])
	}
}

// TestUDAnswersThroughAHFromWC has the receiver answer each message
// through an address handle made from its completion and GRH, as
// ibv_ud_pingpong's peers and rdma_cm's UD users do, for IPv4 and IPv6.
func TestUDAnswersThroughAHFromWC(t *testing.T) {
	for _, addrs := range [][2]string{{"10.1.0.1", "10.1.0.2"}, {"fd00::1", "fd00::2"}} {
		t.Run(addrs[0], func(t *testing.T) {
			n := link.NewNetwork(1)
			la, _ := n.Attach(netip.MustParseAddr(addrs[0]))
			lb, _ := n.Attach(netip.MustParseAddr(addrs[1]))
			a := newUDEnd(t, "ud_a", la, testQKey)
			b := newUDEnd(t, "ud_b", lb, testQKey)
			a.postRecvs(t, 10, 1)
			b.postRecvs(t, 0, 1)
			a.send(t, a.ah(t, b), b.qp.Num(), testQKey, 1, 5)
			a.wait(1, 5*time.Second)
			wc := b.wait(1, 5*time.Second)[0]
			ah, err := b.pd.CreateAHFromWC(&wc, b.buf[:verbs.GRHLen], 1)
			if err != nil {
				t.Fatal(err)
			}
			defer ah.Destroy()
			if got, want := ah.Attr().GRH.DGID.Addr(), netip.MustParseAddr(addrs[0]); got != want {
				t.Fatalf("AH from WC goes to %v, want %v", got, want)
			}
			if hop := ah.Attr().GRH.HopLimit; hop != 64 {
				t.Fatalf("AH from WC has hop limit %d, want the 64 the message came with", hop)
			}
			binary.BigEndian.PutUint32(b.buf[b.slot:], 0xfeedf00d)
			b.send(t, ah, wc.SrcQP, testQKey, 1, 4)
			b.wait(1, 5*time.Second)
			back := a.wait(1, 5*time.Second)[0]
			if back.Status != verbs.WCSuccess || back.SrcQP != b.qp.Num() {
				t.Fatalf("answer %+v", back)
			}
			if v := binary.BigEndian.Uint32(a.buf[10*a.slot+verbs.GRHLen:]); v != 0xfeedf00d {
				t.Fatalf("answer holds %#x", v)
			}
		})
	}
}

// TestGSIQPIsQP1AndTakesTheWellKnownQKey: the general services QP is QP
// number 1, one per device, and accepts MADs sent with Q_Key 0x80010000
// only, as a connection manager needs.
func TestGSIQPIsQP1AndTakesTheWellKnownQKey(t *testing.T) {
	n := link.NewNetwork(1)
	var ends [2]*udEnd
	var gsis [2]*verbs.QP
	for i, a := range []string{"10.1.0.1", "10.1.0.2"} {
		l, _ := n.Attach(netip.MustParseAddr(a))
		u := newUDEnd(t, "gsi"+a, l, testQKey)
		gsi, err := u.pd.CreateQP(&verbs.QPInitAttr{SendCQ: u.cq, RecvCQ: u.cq, QPType: verbs.QPTGSI,
			Cap: verbs.QPCap{MaxSendWR: 4, MaxRecvWR: 4, MaxSendSGE: 1, MaxRecvSGE: 1}})
		if err != nil {
			t.Fatal(err)
		}
		if gsi.Num() != 1 {
			t.Fatalf("GSI QP number %d, want 1", gsi.Num())
		}
		if _, err := u.pd.CreateQP(&verbs.QPInitAttr{SendCQ: u.cq, RecvCQ: u.cq, QPType: verbs.QPTGSI}); !errors.Is(err, verbs.ErrBusy) {
			t.Fatalf("second GSI QP: %v, want EBUSY", err)
		}
		udToRTS(t, gsi, 0x80010000)
		t.Cleanup(func() { gsi.Destroy() })
		gsis[i] = gsi
		ends[i] = u
	}
	a, b := ends[0], ends[1]
	// Receives go to QP1; the ordinary UD QP sends with a wrong Q_Key,
	// QP1 with the well-known one whatever the work request says.
	for i := 0; i < 2; i++ {
		if err := gsis[1].PostRecv([]verbs.RecvWR{{WRID: uint64(i), SGList: []verbs.SGE{b.mr.SGE(i*b.slot, b.slot)}}}); err != nil {
			t.Fatal(err)
		}
	}
	ah := a.ah(t, b)
	a.send(t, ah, 1, testQKey, 0, 256) // not the GSI Q_Key: dropped
	a.wait(1, 5*time.Second)
	wr := verbs.SendWR{WRID: 1, Opcode: verbs.WRSend, SendFlags: verbs.SendSignaled, SGList: []verbs.SGE{a.mr.SGE(a.slot, 256)},
		AH: ah, RemoteQPN: 1, RemoteQKey: testQKey}
	if err := gsis[0].PostSend([]verbs.SendWR{wr}); err != nil {
		t.Fatal(err)
	}
	// QP1 sends on the posting goroutine, under the default progress too:
	// the MAD has left by the time PostSend returns.
	if n := a.cq.Len(); n != 1 {
		t.Fatalf("%d completions right after QP1's PostSend, want 1", n)
	}
	a.wait(1, 5*time.Second)
	wc := b.wait(1, 5*time.Second)[0]
	if wc.Status != verbs.WCSuccess || wc.SrcQP != 1 || wc.QPNum != 1 || wc.ByteLen != verbs.GRHLen+256 {
		t.Fatalf("MAD receive %+v", wc)
	}
	time.Sleep(10 * time.Millisecond)
	if more := b.drain(); len(more) != 0 {
		t.Fatalf("the wrong-Q_Key MAD arrived: %+v", more)
	}
}

// gsiEnds makes two devices on an in-memory network, each with a UD QP
// and QP1 (its sends completing into a CQ of their own, its receives into
// the UD end's CQ), both in RTS.
func gsiEnds(t *testing.T, name string, base byte) (ends [2]*udEnd, gsis [2]*verbs.QP, scqs [2]*verbs.CQ) {
	t.Helper()
	n := link.NewNetwork(uint64(base))
	for i := range 2 {
		l, _ := n.Attach(netip.AddrFrom4([4]byte{10, 1, base, byte(i + 1)}))
		u := newUDEnd(t, fmt.Sprintf("%s%d", name, i), l, testQKey)
		scq, err := u.ctx.CreateCQ(8, nil, 0)
		if err != nil {
			t.Fatal(err)
		}
		gsi, err := u.pd.CreateQP(&verbs.QPInitAttr{SendCQ: scq, RecvCQ: u.cq, QPType: verbs.QPTGSI,
			Cap: verbs.QPCap{MaxSendWR: 4, MaxRecvWR: 4, MaxSendSGE: 1, MaxRecvSGE: 1}})
		if err != nil {
			t.Fatal(err)
		}
		udToRTS(t, gsi, 0x80010000)
		t.Cleanup(func() {
			gsi.Destroy()
			scq.Destroy()
		})
		if err := gsi.PostRecv([]verbs.RecvWR{{WRID: 1, SGList: []verbs.SGE{u.mr.SGE(2*u.slot, u.slot)}}}); err != nil {
			t.Fatal(err)
		}
		ends[i], gsis[i], scqs[i] = u, gsi, scq
	}
	return ends, gsis, scqs
}

// sendMAD sends a 256-byte MAD from e's QP1 to QP1 at ah.
func sendMAD(t *testing.T, e *udEnd, gsi *verbs.QP, ah *verbs.AH) {
	t.Helper()
	mad := verbs.SendWR{WRID: 2, Opcode: verbs.WRSend, SGList: []verbs.SGE{e.mr.SGE(0, 256)},
		AH: ah, RemoteQPN: 1, RemoteQKey: 0x80010000}
	if err := gsi.PostSend([]verbs.SendWR{mad}); err != nil {
		t.Fatal(err)
	}
}

// TestQP1ReceiveIsToldOnceTheStepHoldsNoLock: the function OnQP1Receive
// sets runs when QP1 completes a receive, and not for another QP's, on a
// goroutine that holds none of QP1's locks: a send it posts on QP1 leaves
// at once, as QP1's sends do when nobody else steps it, rather than
// waiting for a goroutine of QP1's to take it.
func TestQP1ReceiveIsToldOnceTheStepHoldsNoLock(t *testing.T) {
	ends, gsis, scqs := gsiEnds(t, "qp1tell", 41)
	a, b := ends[0], ends[1]
	toA, toB := b.ah(t, a), a.ah(t, b)
	type told struct{ received, sentAtOnce int }
	tells := make(chan told, 4)
	dev := verbs.DeviceDriverOf(b.ctx.Device()).(*device)
	dev.OnQP1Receive(func() {
		var wc [4]verbs.WC
		k, _ := b.cq.Poll(wc[:])
		answer := verbs.SendWR{WRID: 9, Opcode: verbs.WRSend, SendFlags: verbs.SendSignaled, SGList: []verbs.SGE{b.mr.SGE(3*b.slot, 64)},
			AH: toA, RemoteQPN: 1, RemoteQKey: 0x80010000}
		if err := gsis[1].PostSend([]verbs.SendWR{answer}); err != nil {
			t.Error(err)
		}
		tells <- told{k, scqs[1].Len()}
	})
	t.Cleanup(func() { dev.OnQP1Receive(nil) })

	// A datagram for b's ordinary UD QP: nothing to tell.
	b.postRecvs(t, 0, 1)
	a.send(t, toB, b.qp.Num(), testQKey, 0, 64)
	b.wait(1, 5*time.Second)
	a.wait(1, 5*time.Second)
	// A MAD for QP1: told, once QP1's step let go of it.
	sendMAD(t, a, gsis[0], toB)
	select {
	case got := <-tells:
		if got.received != 1 {
			t.Fatalf("told with %d receives on QP1's CQ, want 1", got.received)
		}
		if got.sentAtOnce != 1 {
			t.Fatalf("a send posted on QP1 while told left %d completions at once, want 1: QP1 was still locked", got.sentAtOnce)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("QP1 received a MAD and nobody was told")
	}
	// The answer reaches a's QP1; a's device has nobody to tell.
	if wc := a.wait(1, 5*time.Second)[0]; wc.QPNum != 1 || wc.Status != verbs.WCSuccess {
		t.Fatalf("answer %+v", wc)
	}
	select {
	case got := <-tells:
		t.Fatalf("told again: %+v", got)
	default:
	}
}

// TestQP1ReceiveToldForItsOwnerHoldsNothingUp: when QP1's own goroutine
// takes a MAD in (the receive loop found QP1 being stepped by another
// goroutine), the connection manager is told on another goroutine, which
// may block while QP1 is destroyed: destroying QP1 waits for its own
// goroutine, which must not be the one told.
func TestQP1ReceiveToldForItsOwnerHoldsNothingUp(t *testing.T) {
	ends, gsis, _ := gsiEnds(t, "qp1owner", 42)
	a, b := ends[0], ends[1]
	dev := verbs.DeviceDriverOf(b.ctx.Device()).(*device)
	told, unblock := make(chan struct{}, 4), make(chan struct{})
	dev.OnQP1Receive(func() {
		told <- struct{}{}
		<-unblock
	})
	t.Cleanup(func() { dev.OnQP1Receive(nil) })
	defer close(unblock)
	q := verbs.QPDriverOf(gsis[1]).(*qp)
	// While this goroutine holds QP1's step, the receive loop leaves the
	// MAD to QP1's own goroutine.
	q.stepMu.Lock()
	sendMAD(t, a, gsis[0], a.ah(t, b))
	for deadline := time.Now().Add(5 * time.Second); ; {
		q.mu.Lock()
		waiting := len(q.inbox)
		q.mu.Unlock()
		if waiting > 0 {
			break
		}
		if time.Now().After(deadline) {
			q.stepMu.Unlock()
			t.Fatal("the MAD never reached QP1")
		}
		time.Sleep(time.Millisecond)
	}
	q.stepMu.Unlock()
	select {
	case <-told:
	case <-time.After(5 * time.Second):
		t.Fatal("QP1 received a MAD and nobody was told")
	}
	destroyed := make(chan error, 1)
	go func() { destroyed <- gsis[1].Destroy() }()
	select {
	case err := <-destroyed:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("destroying QP1 waits for the goroutine told of its MAD")
	}
}
