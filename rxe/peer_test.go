package rxe

import (
	"fmt"
	"net/netip"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/rdmago/rdmago/rxe/link"
	"github.com/rdmago/rdmago/rxe/wire"
	"github.com/rdmago/rdmago/verbs"
)

// peer plays, packet by packet, the far end of an RC connection with a
// device's QP on an in-memory network: a test builds what it sends,
// rewrites it as a faulty or hostile peer would, and reads what the device
// answers. Both sides start at PSN 0.
type peer struct {
	t    testing.TB
	l    link.Link
	addr netip.Addr // the peer's
	dev  netip.Addr // the device's
	qpn  uint32     // the QP number the peer claims
	e    *end       // the device's side
	in   chan []byte
	net  *link.Network
}

// newPeer makes a device QP connected to a peer. adjust, if any, changes
// the options after the defaults are filled in (where 0 means "default").
func newPeer(t testing.TB, seed uint64, o pairOpts, adjust ...func(*pairOpts)) *peer {
	t.Helper()
	o.defaults()
	for _, f := range adjust {
		f(&o)
	}
	n := link.NewNetwork(seed)
	p := &peer{t: t, addr: netip.MustParseAddr("10.60.0.2"), dev: netip.MustParseAddr("10.60.0.1"), qpn: 0x4242, in: make(chan []byte, 256), net: n}
	ld, err := n.Attach(p.dev)
	if err != nil {
		t.Fatal(err)
	}
	pl, err := n.Attach(p.addr)
	if err != nil {
		t.Fatal(err)
	}
	p.l = pl
	p.e = newEnd(t, "rxe_peer", ld, &o)
	connectQP(t, p.e, verbs.GIDFromAddr(p.addr), p.qpn, 0, 0, &o)
	done := make(chan struct{})
	go func() {
		defer close(done)
		bufs := make([]link.Packet, 16)
		for {
			for i := range bufs {
				bufs[i].Buf = make([]byte, maxPacket)
			}
			k, err := pl.Recv(bufs)
			if err != nil {
				return
			}
			for _, b := range bufs[:k] {
				p.in <- b.Buf
			}
		}
	}()
	t.Cleanup(func() {
		p.e.close()
		pl.Close()
		<-done
	})
	return p
}

// send builds a packet of h, addressed to the device's QP, with payload,
// lets rewrite change its bytes (the ICRC excepted, which the link adds)
// if not nil, and sends it.
func (p *peer) send(h wire.Headers, payload []byte, rewrite func(pkt []byte) []byte) {
	p.t.Helper()
	h.BTH.DestQP, h.BTH.PKey = p.e.qp.Num(), wire.DefaultPKey
	pkt, err := wire.AppendPacket(nil, &h, payload)
	if err != nil {
		p.t.Fatal(err)
	}
	if rewrite != nil {
		pkt = rewrite(pkt)
	}
	if err := p.l.Send([]link.Packet{{Buf: pkt, Addr: p.dev}}); err != nil {
		p.t.Fatal(err)
	}
}

// recv returns the next packet the device sends the peer.
func (p *peer) recv(d time.Duration) *wire.Packet {
	p.t.Helper()
	select {
	case b := <-p.in:
		var pkt wire.Packet
		if err := pkt.Decode(b); err != nil {
			p.t.Fatalf("the device sent a malformed packet: %v", err)
		}
		return &pkt
	case <-time.After(d):
		p.t.Fatalf("the device sent nothing in %v", d)
		return nil
	}
}

// expectAck reads the next packet and checks it is an acknowledgement of
// psn with syndrome syn.
func (p *peer) expectAck(psn wire.PSN, syn wire.Syndrome) {
	p.t.Helper()
	pkt := p.recv(5 * time.Second)
	if pkt.OpCode() != wire.RCAcknowledge || pkt.BTH.PSN() != psn || pkt.AETH.Syndrome() != syn {
		p.t.Fatalf("device sent %s PSN %d, want an acknowledgement of PSN %d with syndrome %#x", pkt.OpCode(), pkt.BTH.PSN(), psn, uint8(syn))
	}
}

// withOpCode returns a rewrite that replaces a packet's opcode, leaving
// the rest of its bytes as they were built.
func withOpCode(op wire.OpCode) func([]byte) []byte {
	return func(pkt []byte) []byte {
		pkt[0] = byte(op)
		return pkt
	}
}

// A request whose length does not fit its opcode — a READ request
// carrying a payload, a WRITE FIRST too short for its RETH — is, at the
// expected PSN, an invalid request (IBTA vol. 1 §9.7.5.1.3, responder class
// C): the responder NAKs it and the QP goes to ERR, as for any other
// malformed request. Not silently dropped: roce-sim's unexpected-opcode
// case (a WRITE's LAST rewritten into a READ request) waits for the NAK.
func TestRequestInconsistentWithItsOpCodeIsAnInvalidRequest(t *testing.T) {
	page := make([]byte, 256)
	tests := []struct {
		name string
		send func(p *peer) wire.PSN // returns the bad request's PSN
	}{
		{"a WRITE's LAST rewritten into a READ request", func(p *peer) wire.PSN {
			reth := wire.RETHFields{VA: p.e.mr.Addr(), RKey: p.e.mr.RKey(), DMALen: 1024}
			p.send(wire.Headers{BTH: wire.BTHFields{OpCode: wire.RCWriteFirst, PSN: 0}, RETH: reth}, page, nil)
			p.send(wire.Headers{BTH: wire.BTHFields{OpCode: wire.RCWriteMiddle, PSN: 1}}, page, nil)
			p.send(wire.Headers{BTH: wire.BTHFields{OpCode: wire.RCWriteMiddle, PSN: 2}}, page, nil)
			p.send(wire.Headers{BTH: wire.BTHFields{OpCode: wire.RCWriteLast, PSN: 3, AckReq: true}}, page, withOpCode(wire.RCReadRequest))
			return 3
		}},
		{"a READ request with a payload", func(p *peer) wire.PSN {
			reth := wire.RETHFields{VA: p.e.mr.Addr(), RKey: p.e.mr.RKey(), DMALen: 8}
			p.send(wire.Headers{BTH: wire.BTHFields{OpCode: wire.RCWriteOnly, AckReq: true}, RETH: reth}, page[:8], withOpCode(wire.RCReadRequest))
			return 0
		}},
		{"a WRITE FIRST without room for its RETH", func(p *peer) wire.PSN {
			p.send(wire.Headers{BTH: wire.BTHFields{OpCode: wire.RCSendOnly, AckReq: true}}, nil, withOpCode(wire.RCWriteFirst))
			return 0
		}},
		{"a compare and swap with a payload", func(p *peer) wire.PSN {
			reth := wire.RETHFields{VA: p.e.mr.Addr(), RKey: p.e.mr.RKey(), DMALen: 24}
			p.send(wire.Headers{BTH: wire.BTHFields{OpCode: wire.RCWriteOnly, AckReq: true}, RETH: reth}, page[:24], withOpCode(wire.RCCompareSwap))
			return 0
		}},
	}
	for i, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			p := newPeer(t, uint64(40+i), pairOpts{mtu: verbs.MTU256})
			psn := tc.send(p)
			p.expectAck(psn, wire.NAKInvalidRequest)
			if s := p.e.qp.State(); s != verbs.QPSErr {
				t.Fatalf("responder in %s after an invalid request, want ERR", s)
			}
		})
	}
}

// A malformed request at another PSN than the expected one is not
// executed, nor does it disturb the connection: the request at the
// expected PSN that follows is carried out.
func TestMalformedRequestOffSequenceIsDropped(t *testing.T) {
	p := newPeer(t, 50, pairOpts{})
	reth := wire.RETHFields{VA: p.e.mr.Addr(), RKey: p.e.mr.RKey(), DMALen: 4}
	p.send(wire.Headers{BTH: wire.BTHFields{OpCode: wire.RCWriteOnly, PSN: 5, AckReq: true}, RETH: reth}, []byte{1, 2, 3, 4}, withOpCode(wire.RCReadRequest))
	p.send(wire.Headers{BTH: wire.BTHFields{OpCode: wire.RCWriteOnly, PSN: 0, AckReq: true}, RETH: reth}, []byte{5, 6, 7, 8}, nil)
	p.expectAck(0, wire.SyndromeACKUnlimited)
	if s := p.e.qp.State(); s != verbs.QPSRTS {
		t.Fatalf("responder in %s, want RTS", s)
	}
	if got := p.e.buf[:4]; string(got) != "\x05\x06\x07\x08" {
		t.Fatalf("memory holds %x after the WRITE", got)
	}
}

// An ACK past an RDMA READ whose response has not come is an implied NAK
// (IBTA vol. 1 chapter 9, the requester's response checks): the response
// was lost and the READ is asked for again. It is a PSN sequence error as
// an explicit NAK is, so it spends a transport retry, and with retry_cnt 0
// the READ fails with RETRY_EXC_ERR at once, as in Linux rxe. roce-sim's
// rxe_implied_nak_sequence_error_retry_limit_* cases are about this. The
// transport timer here is hours long: whatever is resent, the implied NAK
// resent it.
func TestImpliedNAKSpendsATransportRetry(t *testing.T) {
	for _, retry := range []uint8{0, 1} {
		t.Run(fmt.Sprintf("retry_cnt %d", retry), func(t *testing.T) {
			p := newPeer(t, 60+uint64(retry), pairOpts{}, func(o *pairOpts) { o.retry, o.timeout = retry, 31 })
			e := p.e
			if err := e.qp.PostSend([]verbs.SendWR{
				{WRID: 1, Opcode: verbs.WRRDMARead, SendFlags: verbs.SendSignaled, SGList: []verbs.SGE{e.mr.SGE(0, 8)}, RemoteAddr: 0x1000, RKey: 0x77},
				{WRID: 2, Opcode: verbs.WRSend, SendFlags: verbs.SendSignaled, SGList: []verbs.SGE{e.mr.SGE(64, 8)}},
			}); err != nil {
				t.Fatal(err)
			}
			for _, want := range []wire.OpCode{wire.RCReadRequest, wire.RCSendOnly} {
				if pkt := p.recv(5 * time.Second); pkt.OpCode() != want {
					t.Fatalf("device sent %s, want %s", pkt.OpCode(), want)
				}
			}
			// The SEND's ACK, as if the READ's response were lost.
			p.send(wire.Headers{BTH: wire.BTHFields{OpCode: wire.RCAcknowledge, PSN: 1}, Syndrome: wire.SyndromeACKUnlimited, MSN: 2}, nil, nil)
			if retry == 0 {
				wcs := e.wait(2, 5*time.Second)
				if wcs[0].WRID != 1 || wcs[0].Status != verbs.WCRetryExcErr || wcs[1].Status != verbs.WCWRFlushErr {
					t.Fatalf("completions %s, want the READ failed with RETRY_EXC_ERR and the SEND flushed", describe(wcs))
				}
				select {
				case b := <-p.in:
					t.Fatalf("device sent % x after its retries ran out", b[:12])
				default:
				}
				return
			}
			// One retry: the READ goes again, and the SEND after it.
			for _, want := range []struct {
				op  wire.OpCode
				psn wire.PSN
			}{{wire.RCReadRequest, 0}, {wire.RCSendOnly, 1}} {
				if pkt := p.recv(5 * time.Second); pkt.OpCode() != want.op || pkt.BTH.PSN() != want.psn {
					t.Fatalf("device sent %s PSN %d, want %s PSN %d again", pkt.OpCode(), pkt.BTH.PSN(), want.op, want.psn)
				}
			}
			p.send(wire.Headers{BTH: wire.BTHFields{OpCode: wire.RCReadResponseOnly, PSN: 0}, Syndrome: wire.SyndromeACKUnlimited, MSN: 1}, []byte("8 bytes!"), nil)
			p.send(wire.Headers{BTH: wire.BTHFields{OpCode: wire.RCAcknowledge, PSN: 1}, Syndrome: wire.SyndromeACKUnlimited, MSN: 2}, nil, nil)
			for _, wc := range e.wait(2, 5*time.Second) {
				if wc.Status != verbs.WCSuccess {
					t.Fatalf("completion %s after the retry", describe([]verbs.WC{wc}))
				}
			}
			if got := string(e.buf[:8]); got != "8 bytes!" {
				t.Fatalf("READ brought %q", got)
			}
		})
	}
}

// A duplicate READ request means the requester went back to its PSN and
// will ask again for everything after it: the responder answers it before
// the responses it still had queued for later READs, and drops those.
// Queued behind them, the repeated response would reach the requester only
// after the later packets, which it ignores and counts as evidence the
// request was lost, asking again and again.
//
// The device's 16th response waits in the network until the duplicate is
// on its way, so that the device cannot have sent everything before it
// hears of it, however fast it runs.
func TestDuplicateReadIsAnsweredBeforeLaterReads(t *testing.T) {
	p := newPeer(t, 60, pairOpts{bufSize: 8 << 20})
	p.net.SetQueueLen(1 << 14)
	dupSent := make(chan struct{})
	var closeOnce sync.Once
	letGo := func() { closeOnce.Do(func() { close(dupSent) }) }
	defer letGo()
	var fromDev atomic.Int32
	p.net.SetFaults(link.Faults{Filter: func(_ []byte, from, _ netip.Addr) bool {
		if from == p.dev && fromDev.Add(1) == 16 {
			<-dupSent
		}
		return true
	}})
	const aPkts, bPkts, from = 128, 4096, 64
	va := p.e.mr.Addr()
	read := func(psn wire.PSN, off, n uint64) {
		p.send(wire.Headers{BTH: wire.BTHFields{OpCode: wire.RCReadRequest, PSN: psn},
			RETH: wire.RETHFields{VA: va + off, RKey: p.e.mr.RKey(), DMALen: uint32(n)}}, nil, nil)
	}
	read(0, 0, aPkts*1024)
	read(aPkts, 0, bPkts*1024)
	p.recv(5 * time.Second) // the device is answering
	read(from, from*1024, (aPkts-from)*1024)
	letGo()
	bLast := wire.PSN(aPkts + bPkts - 1)
	for {
		pkt := p.recv(5 * time.Second)
		if pkt.BTH.PSN() == bLast {
			t.Fatal("the later READ's response was sent in full before the repeated one")
		}
		if pkt.BTH.PSN() == from && pkt.OpCode() == wire.RCReadResponseFirst {
			break
		}
	}
	for want := wire.PSN(from + 1); want < aPkts; want++ {
		if pkt := p.recv(5 * time.Second); pkt.BTH.PSN() != want {
			t.Fatalf("after the repeated response's first packet came %s PSN %d, want PSN %d", pkt.OpCode(), pkt.BTH.PSN(), want)
		}
	}
	select {
	case b := <-p.in:
		var pkt wire.Packet
		_ = pkt.Decode(b)
		t.Fatalf("the device went on with %s PSN %d, a response the requester will ask for again", pkt.OpCode(), pkt.BTH.PSN())
	case <-time.After(50 * time.Millisecond):
	}
}
