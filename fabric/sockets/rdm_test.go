package sockets_test

import (
	"bytes"
	"encoding/binary"
	"errors"
	"io"
	"math"
	"net"
	"net/netip"
	"runtime"
	"testing"
	"time"

	"github.com/rdmago/rdmago/fabric"
	"github.com/rdmago/rdmago/fabric/fabrictest"
)

// end is an enabled RDM (or datagram) endpoint on 127.0.0.1 with a
// registered buffer.
type end struct {
	*fabrictest.RDM
	buf []byte
	mr  *fabric.MR
}

func openEnd(t testing.TB, typ fabric.EPType) *end {
	t.Helper()
	hints := fabric.AllocInfo()
	hints.FabricAttr.ProvName = "sockets"
	hints.EPAttr.Type = typ
	infos, err := fabric.GetInfo("127.0.0.1", "0", fabric.FlagSource, hints)
	fabrictest.Must(t, err)
	fab, err := fabric.OpenFabric(infos[0])
	fabrictest.Must(t, err)
	e := &end{RDM: &fabrictest.RDM{Info: infos[0]}, buf: make([]byte, 1<<16)}
	e.Dom, err = fab.OpenDomain(infos[0])
	fabrictest.Must(t, err)
	e.CQ, _ = e.Dom.OpenCQ(nil)
	e.AV, _ = e.Dom.OpenAV(nil)
	e.EP, err = e.Dom.OpenEndpoint(infos[0], nil)
	fabrictest.Must(t, err)
	fabrictest.Must(t, e.EP.BindAV(e.AV))
	fabrictest.Must(t, e.EP.BindCQ(e.CQ, fabric.BindTransmit|fabric.BindRecv))
	fabrictest.Must(t, e.EP.Enable())
	e.mr, err = e.Dom.RegMR(e.buf, fabric.AccessRemoteRead|fabric.AccessRemoteWrite|fabric.AccessSend|fabric.AccessRecv, 0)
	fabrictest.Must(t, err)
	fabrictest.CloseAtEnd(t, e.EP, e.mr, e.Dom)
	return e
}

const any = fabric.AddrNotAvail

// Messages that come before their receive wait for it; tags match in the
// bits not ignored; a directed receive takes only its source's messages;
// each receive names its sender (FI_SOURCE).
func TestRDMMatching(t *testing.T) {
	a, b, c := openEnd(t, fabric.EPRDM), openEnd(t, fabric.EPRDM), openEnd(t, fabric.EPRDM)
	aToB, cToB := fabrictest.Peer(t, a.AV, b.EP), fabrictest.Peer(t, c.AV, b.EP)
	bA, bC := fabrictest.Peer(t, b.AV, a.EP), fabrictest.Peer(t, b.AV, c.EP)

	// Unexpected, then received.
	fabrictest.Must(t, a.EP.Send([]byte("early"), nil, aToB, "s1"))
	fabrictest.Completion(t, a.CQ)
	time.Sleep(20 * time.Millisecond) // it reaches b before the receive is posted
	fabrictest.Must(t, b.EP.Recv(b.buf[:100], nil, any, "r1"))
	if e := fabrictest.Completion(t, b.CQ); string(e.Buf) != "early" || e.Context != "r1" || e.Source() != bA {
		t.Fatalf("%+v from %v, want \"early\" from %v", e, e.Source(), bA)
	}

	// Tags: 0x17 waits, 0x27 matches the receive for 0x07 ignoring 0x30.
	fabrictest.Must(t, b.EP.TRecv(b.buf[:100], nil, any, 0x07, 0x30, "t1"))
	fabrictest.Must(t, a.EP.TSend([]byte("x17"), nil, aToB, 0x47, nil))
	fabrictest.Must(t, a.EP.TSend([]byte("x27"), nil, aToB, 0x27, nil))
	if e := fabrictest.Completion(t, b.CQ); string(e.Buf) != "x27" || e.Tag != 0x27 || e.Flags&fabric.CompTagged == 0 {
		t.Fatalf("%+v, want the message tagged 0x27", e)
	}
	fabrictest.Must(t, b.EP.TRecv(b.buf[:100], nil, any, 0x47, 0, "t2"))
	if e := fabrictest.Completion(t, b.CQ); string(e.Buf) != "x17" || e.Context != "t2" {
		t.Fatalf("%+v, want the waiting message tagged 0x47", e)
	}
	for range 2 {
		fabrictest.Completion(t, a.CQ)
	}

	// Directed: a receive from a does not take c's message.
	fabrictest.Must(t, b.EP.Recv(b.buf[:100], nil, bA, "from a"))
	fabrictest.Must(t, c.EP.Send([]byte("from c"), nil, cToB, nil))
	fabrictest.Completion(t, c.CQ)
	fabrictest.Must(t, b.EP.Recv(b.buf[200:300], nil, bC, "from c"))
	if e := fabrictest.Completion(t, b.CQ); e.Context != "from c" || string(e.Buf) != "from c" || e.Source() != bC {
		t.Fatalf("%+v from %v: c's message went to %v", e, e.Source(), e.Context)
	}
	fabrictest.Must(t, a.EP.Send([]byte("from a"), nil, aToB, nil))
	if e := fabrictest.Completion(t, b.CQ); e.Context != "from a" || string(e.Buf) != "from a" {
		t.Fatalf("%+v", e)
	}
}

// A message longer than its receive fails it with FI_ETRUNC; remote CQ
// data arrives with its message; FI_TRANSMIT_COMPLETE completes when the
// peer acknowledges.
func TestRDMTruncationDataAndTransmitComplete(t *testing.T) {
	a, b := openEnd(t, fabric.EPRDM), openEnd(t, fabric.EPRDM)
	aToB := fabrictest.Peer(t, a.AV, b.EP)
	fabrictest.Must(t, b.EP.Recv(b.buf[:4], nil, any, "short"))
	fabrictest.Must(t, a.EP.Send([]byte("too long"), nil, aToB, nil))
	if _, ee := fabrictest.Next(t, b.CQ); ee == nil || !errors.Is(ee.Err, fabric.ErrTrunc) || ee.Len != 4 || ee.OLen != 4 {
		t.Fatalf("%+v, want FI_ETRUNC with 4 bytes in and 4 over", ee)
	}
	fabrictest.Must(t, b.EP.Recv(b.buf[:100], nil, any, "data"))
	fabrictest.Must(t, a.EP.SendMsg(&fabric.Msg{Buf: []byte("acked"), Addr: aToB, Context: "tc", Data: 0xfeed},
		fabric.FlagRemoteCQData|fabric.FlagTransmitComplete))
	if e := fabrictest.Completion(t, b.CQ); string(e.Buf) != "acked" || e.Data != 0xfeed || e.Flags&fabric.CompRemoteCQData == 0 {
		t.Fatalf("%+v", e)
	}
	fabrictest.Completion(t, a.CQ) // the first send's
	if e := fabrictest.Completion(t, a.CQ); e.Context != "tc" {
		t.Fatalf("%+v, want the acknowledged send", e)
	}
}

// RMA: a write and a read of a peer's region by key and offset; a key
// the peer does not have, or a range past its region, fails with
// FI_EACCES, and the connection goes on.
func TestRDMRMA(t *testing.T) {
	a, b := openEnd(t, fabric.EPRDM), openEnd(t, fabric.EPRDM)
	aToB := fabrictest.Peer(t, a.AV, b.EP)
	key := b.mr.Key()
	fabrictest.Must(t, a.EP.Write([]byte("remote"), nil, aToB, 100, key, "w"))
	if e := fabrictest.Completion(t, a.CQ); e.Context != "w" || e.Flags&fabric.CompWrite == 0 {
		t.Fatalf("%+v", e)
	}
	if string(b.buf[100:106]) != "remote" {
		t.Fatalf("the peer's region holds %q", b.buf[100:106])
	}
	fabrictest.Must(t, a.EP.Read(a.buf[:6], nil, aToB, 100, key, "r"))
	if e := fabrictest.Completion(t, a.CQ); e.Context != "r" || string(a.buf[:6]) != "remote" {
		t.Fatalf("%+v, read %q", e, a.buf[:6])
	}
	for _, c := range []struct {
		name      string
		addr, key uint64
	}{{"an unknown key", 0, key + 99}, {"a range past the region", uint64(len(b.buf)) - 2, key}} {
		fabrictest.Must(t, a.EP.Write([]byte("xxxx"), nil, aToB, c.addr, c.key, c.name))
		if _, ee := fabrictest.Next(t, a.CQ); ee == nil || !errors.Is(ee.Err, fabric.ErrAccess) || ee.Context != c.name {
			t.Fatalf("write to %s: %+v, want FI_EACCES", c.name, ee)
		}
		fabrictest.Must(t, a.EP.Read(a.buf[:4], nil, aToB, c.addr, c.key, c.name))
		if _, ee := fabrictest.Next(t, a.CQ); ee == nil || !errors.Is(ee.Err, fabric.ErrAccess) {
			t.Fatalf("read of %s: %+v, want FI_EACCES", c.name, ee)
		}
	}
	fabrictest.Must(t, a.EP.WriteData([]byte("d"), nil, 7, aToB, 0, key, "wd"))
	if e := fabrictest.Completion(t, b.CQ); e.Data != 7 || e.Flags&fabric.CompRemoteWrite == 0 {
		t.Fatalf("the target's completion of a write with data: %+v", e)
	}
	fabrictest.Completion(t, a.CQ)
}

// Datagram endpoints send as RDM ones do (on a connection, as C's), and
// have no RMA.
func TestDgramSendsAndRefusesRMA(t *testing.T) {
	a, b := openEnd(t, fabric.EPDgram), openEnd(t, fabric.EPDgram)
	aToB := fabrictest.Peer(t, a.AV, b.EP)
	fabrictest.Must(t, b.EP.Recv(b.buf[:10], nil, any, nil))
	fabrictest.Must(t, a.EP.Inject([]byte("dg"), aToB))
	if e := fabrictest.Completion(t, b.CQ); string(e.Buf) != "dg" {
		t.Fatalf("%+v", e)
	}
	if err := a.EP.Write([]byte("x"), nil, aToB, 0, 0, nil); !errors.Is(err, fabric.ErrNoSys) {
		t.Fatalf("fi_write on a datagram endpoint: %v, want FI_ENOSYS", err)
	}
}

// rawPeer is a TCP listener that plays a C sockets provider by hand.
func rawPeer(t *testing.T) (net.Listener, netip.AddrPort) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	fabrictest.Must(t, err)
	t.Cleanup(func() { ln.Close() })
	return ln, ln.Addr().(*net.TCPAddr).AddrPort()
}

func readFull(t *testing.T, c net.Conn, n int) []byte {
	t.Helper()
	b := make([]byte, n)
	c.SetReadDeadline(time.Now().Add(10 * time.Second))
	if _, err := io.ReadFull(c, b); err != nil {
		t.Fatal(err)
	}
	return b
}

// The bytes on the wire are C's: the connection opens with CONN_MSG
// naming the sender's listener; a tagged send is its 24-byte header
// (version 2, op 1, big-endian flags and length), the tag and the data;
// and a message the peer sends with FI_TRANSMIT_COMPLETE is answered with
// a 40-byte SEND_COMPLETE carrying the peer's pe_entry_id.
func TestWireMatchesCs(t *testing.T) {
	e := openEnd(t, fabric.EPRDM)
	ln, peer := rawPeer(t)
	h, err := e.AV.Insert(peer)
	fabrictest.Must(t, err)
	fabrictest.Must(t, e.EP.TSend([]byte("hi"), nil, h[0], 0x1122334455667788, nil))
	c, err := ln.Accept()
	fabrictest.Must(t, err)
	defer c.Close()
	name, _ := e.EP.Name()

	m := readFull(t, c, 72)
	if m[0] != 2 || m[1] != 12 || binary.BigEndian.Uint64(m[16:]) != 72 {
		t.Fatalf("CONN_MSG header % x", m[:24])
	}
	if fam, port := binary.LittleEndian.Uint16(m[24:]), binary.BigEndian.Uint16(m[26:]); fam != 2 || port != name.Port() ||
		netip.AddrFrom4([4]byte(m[28:32])) != name.Addr() || !bytes.Equal(m[32:72], make([]byte, 40)) {
		t.Fatalf("CONN_MSG's address % x, want %v as a sockaddr_in in 48 bytes", m[24:], name)
	}
	m = readFull(t, c, 24+8+2)
	if m[0] != 2 || m[1] != 1 || binary.BigEndian.Uint64(m[16:]) != 34 || binary.BigEndian.Uint64(m[8:])&(1<<26) == 0 {
		t.Fatalf("TSEND header % x", m[:24])
	}
	if binary.LittleEndian.Uint64(m[24:]) != 0x1122334455667788 || string(m[32:]) != "hi" {
		t.Fatalf("TSEND tag and data % x", m[24:])
	}
	if ce := fabrictest.Completion(t, e.CQ); ce.Flags&fabric.CompSend == 0 {
		t.Fatalf("%+v, want the tagged send's completion", ce)
	}

	fabrictest.Must(t, e.EP.Recv(e.buf[:10], nil, any, "rx"))
	msg := make([]byte, 24+3)
	msg[0], msg[1] = 2, 0
	binary.BigEndian.PutUint16(msg[4:], 0x0042)
	binary.BigEndian.PutUint64(msg[8:], 1<<27) // FI_TRANSMIT_COMPLETE
	binary.BigEndian.PutUint64(msg[16:], uint64(len(msg)))
	copy(msg[24:], "ack")
	if _, err := c.Write(msg); err != nil {
		t.Fatal(err)
	}
	if ce := fabrictest.Completion(t, e.CQ); string(ce.Buf) != "ack" {
		t.Fatalf("%+v", ce)
	}
	r := readFull(t, c, 40)
	if r[0] != 2 || r[1] != 2 || binary.BigEndian.Uint64(r[16:]) != 40 || binary.BigEndian.Uint16(r[24:]) != 0x42 || binary.BigEndian.Uint32(r[28:]) != 0 {
		t.Fatalf("SEND_COMPLETE % x", r)
	}

	// A malformed header drops the connection; the endpoint goes on.
	c.Write(bytes.Repeat([]byte{0xff}, 24))
	c.SetReadDeadline(time.Now().Add(10 * time.Second))
	if _, err := c.Read(make([]byte, 1)); err == nil {
		t.Fatal("the connection survived a malformed header")
	}
}

// A connection request refused with private data reaches the client as
// FI_ECONNREFUSED with that data; fi_shutdown raises FI_SHUTDOWN on both
// sides.
func TestMSGRejectAndShutdown(t *testing.T) {
	hints := fabric.AllocInfo()
	hints.FabricAttr.ProvName = "sockets"
	hints.EPAttr.Type = fabric.EPMsg
	infos, err := fabric.GetInfo("127.0.0.1", "0", fabric.FlagSource, hints)
	fabrictest.Must(t, err)
	fab, _ := fabric.OpenFabric(infos[0])
	eq, _ := fab.OpenEQ()
	pep, err := fab.OpenPassiveEndpoint(infos[0], nil)
	fabrictest.Must(t, err)
	defer pep.Close()
	fabrictest.Must(t, pep.Bind(eq))
	fabrictest.Must(t, pep.Listen())
	name, _ := pep.Name()

	dial := func() (*fabric.Endpoint, *fabric.EQ) {
		dom, _ := fab.OpenDomain(infos[0])
		t.Cleanup(func() { dom.Close() })
		cq, _ := dom.OpenCQ(nil)
		ep, err := dom.OpenEndpoint(infos[0], nil)
		fabrictest.Must(t, err)
		t.Cleanup(func() { ep.Close() })
		ceq, _ := fab.OpenEQ()
		fabrictest.Must(t, ep.BindEQ(ceq))
		fabrictest.Must(t, ep.BindCQ(cq, fabric.BindTransmit|fabric.BindRecv))
		fabrictest.Must(t, ep.Enable())
		fabrictest.Must(t, ep.Connect(name, []byte("let me in")))
		return ep, ceq
	}
	_, ceq := dial()
	req := fabrictest.Event(t, eq, fabric.EventConnReq)
	if string(req.Data) != "let me in" {
		t.Fatalf("request data %q", req.Data)
	}
	fabrictest.Must(t, pep.Reject(req.Info.Handle, []byte("no")))
	ctx, cancel := contextTimeout()
	defer cancel()
	if _, err := ceq.SRead(ctx); !errors.Is(err, fabric.ErrAvail) {
		t.Fatalf("after the reject: %v, want an error entry", err)
	}
	if ee, _ := ceq.ReadErr(); !errors.Is(ee.Err, fabric.ErrConnRefused) || string(ee.ErrData) != "no" {
		t.Fatalf("error entry %+v, want FI_ECONNREFUSED with \"no\"", ee)
	}

	cli, ceq := dial()
	req = fabrictest.Event(t, eq, fabric.EventConnReq)
	dom, _ := fab.OpenDomain(req.Info)
	defer dom.Close()
	cq, _ := dom.OpenCQ(nil)
	srv, err := dom.OpenEndpoint(req.Info, nil)
	fabrictest.Must(t, err)
	defer srv.Close()
	fabrictest.Must(t, srv.BindEQ(eq))
	fabrictest.Must(t, srv.BindCQ(cq, fabric.BindTransmit|fabric.BindRecv))
	fabrictest.Must(t, srv.Accept(nil))
	fabrictest.Event(t, eq, fabric.EventConnected)
	fabrictest.Event(t, ceq, fabric.EventConnected)
	fabrictest.Must(t, cli.Shutdown())
	fabrictest.Event(t, ceq, fabric.EventShutdown)
	fabrictest.Event(t, eq, fabric.EventShutdown)
}

// Close completes what is posted with FI_ECANCELED and stops every
// goroutine the endpoint started.
func TestCloseCancelsAndStops(t *testing.T) {
	before := runtime.NumGoroutine()
	func() {
		a, b := openEnd(t, fabric.EPRDM), openEnd(t, fabric.EPRDM)
		aToB := fabrictest.Peer(t, a.AV, b.EP)
		fabrictest.Must(t, a.EP.Send([]byte("x"), nil, aToB, nil)) // a connection
		fabrictest.Completion(t, a.CQ)
		fabrictest.Must(t, b.EP.Recv(b.buf[:1], nil, any, nil))
		fabrictest.Completion(t, b.CQ)
		fabrictest.Must(t, b.EP.Recv(b.buf[:1], nil, any, "pending"))
		fabrictest.Must(t, b.EP.Close())
		if _, ee := fabrictest.Next(t, b.CQ); ee == nil || !errors.Is(ee.Err, fabric.ErrCanceled) || ee.Context != "pending" {
			t.Fatalf("%+v, want FI_ECANCELED for the pending receive", ee)
		}
		fabrictest.Must(t, a.EP.Close())
	}()
	deadline := time.Now().Add(5 * time.Second)
	for runtime.NumGoroutine() > before {
		if time.Now().After(deadline) {
			buf := make([]byte, 1<<16)
			t.Fatalf("%d goroutines after close, %d before:\n%s", runtime.NumGoroutine(), before, buf[:runtime.Stack(buf, true)])
		}
		time.Sleep(time.Millisecond)
	}
}

// Atomics on a peer's region: each operation leaves the target as libfabric
// defines it and fetches its prior elements; what is not offered is
// refused before it is sent, and a key the peer lacks fails with
// FI_EACCES.
func TestRDMAtomics(t *testing.T) {
	a, b := openEnd(t, fabric.EPRDM), openEnd(t, fabric.EPRDM)
	aToB := fabrictest.Peer(t, a.AV, b.EP)
	le := binary.LittleEndian
	u64 := func(v uint64) []byte { return le.AppendUint64(nil, v) }
	i32 := func(v int32) []byte { return le.AppendUint32(nil, uint32(v)) }
	f64 := func(v float64) []byte { return le.AppendUint64(nil, math.Float64bits(v)) }
	for i, c := range []struct {
		name             string
		dt               fabric.Datatype
		op               fabric.AtomicOp
		target, src, cmp []byte
		want             []byte // the target after
	}{
		{"uint64 sum", fabric.Uint64, fabric.OpSum, u64(5), u64(3), nil, u64(8)},
		{"int32 min", fabric.Int32, fabric.OpMin, i32(-2), i32(-7), nil, i32(-7)},
		{"int32 max keeps the larger", fabric.Int32, fabric.OpMax, i32(-2), i32(-7), nil, i32(-2)},
		{"uint8 bxor, two elements", fabric.Uint8, fabric.OpBXor, []byte{0xf0, 0x0f}, []byte{0xff, 0xff}, nil, []byte{0x0f, 0xf0}},
		{"double prod", fabric.Double, fabric.OpProd, f64(1.5), f64(4), nil, f64(6)},
		{"write", fabric.Uint64, fabric.OpAtomicWrite, u64(1), u64(99), nil, u64(99)},
		{"read", fabric.Uint64, fabric.OpAtomicRead, u64(42), nil, nil, u64(42)},
		{"cswap equal", fabric.Uint64, fabric.OpCSwap, u64(7), u64(70), u64(7), u64(70)},
		{"cswap unequal", fabric.Uint64, fabric.OpCSwap, u64(7), u64(70), u64(8), u64(7)},
		{"cswap_lt: compare below target", fabric.Int32, fabric.OpCSwapLT, i32(5), i32(50), i32(1), i32(50)},
		{"cswap_gt: compare below target", fabric.Int32, fabric.OpCSwapGT, i32(5), i32(50), i32(1), i32(5)},
		{"mswap", fabric.Uint64, fabric.OpMSwap, u64(0xff00), u64(0x0ff0), u64(0x00ff), u64(0xfff0)},
	} {
		off := uint64(64 * i)
		copy(b.buf[off:], c.target)
		result := make([]byte, len(c.target))
		var err error
		switch {
		case c.cmp != nil:
			err = a.EP.CompareAtomic(c.src, nil, c.cmp, nil, result, nil, aToB, off, b.mr.Key(), c.dt, c.op, c.name)
		case c.op == fabric.OpAtomicRead:
			err = a.EP.FetchAtomic(nil, nil, result, nil, aToB, off, b.mr.Key(), c.dt, c.op, c.name)
		default:
			err = a.EP.FetchAtomic(c.src, nil, result, nil, aToB, off, b.mr.Key(), c.dt, c.op, c.name)
		}
		fabrictest.Must(t, err)
		if e := fabrictest.Completion(t, a.CQ); e.Context != c.name || e.Flags&fabric.CompAtomic == 0 {
			t.Fatalf("%s: completion %+v", c.name, e)
		}
		if !bytes.Equal(result, c.target) {
			t.Errorf("%s: fetched % x, want the prior % x", c.name, result, c.target)
		}
		if got := b.buf[off : off+uint64(len(c.want))]; !bytes.Equal(got, c.want) {
			t.Errorf("%s: target % x, want % x", c.name, got, c.want)
		}
	}
	// A plain atomic, which fetches nothing.
	copy(b.buf[2000:], u64(1))
	fabrictest.Must(t, a.EP.Atomic(u64(2), nil, aToB, 2000, b.mr.Key(), fabric.Uint64, fabric.OpSum, "plain"))
	if e := fabrictest.Completion(t, a.CQ); e.Flags&(fabric.CompAtomic|fabric.CompWrite) != fabric.CompAtomic|fabric.CompWrite {
		t.Fatalf("plain atomic: %+v", e)
	}
	if le.Uint64(b.buf[2000:]) != 3 {
		t.Fatalf("plain atomic left %d", le.Uint64(b.buf[2000:]))
	}

	for _, c := range []struct {
		name string
		err  error
		want fabric.Errno
	}{
		{"a complex datatype", a.EP.Atomic(make([]byte, 8), nil, aToB, 0, b.mr.Key(), fabric.FloatComplex, fabric.OpSum, nil), fabric.ErrNotSupported},
		{"a bitwise op on doubles", a.EP.Atomic(f64(1), nil, aToB, 0, b.mr.Key(), fabric.Double, fabric.OpBOr, nil), fabric.ErrNotSupported},
		{"a compare op without compare", a.EP.Atomic(u64(1), nil, aToB, 0, b.mr.Key(), fabric.Uint64, fabric.OpCSwap, nil), fabric.ErrNotSupported},
		{"half an element", a.EP.Atomic(make([]byte, 5), nil, aToB, 0, b.mr.Key(), fabric.Uint64, fabric.OpSum, nil), fabric.ErrInvalid},
		{"over 4096 bytes", a.EP.Atomic(make([]byte, 4104), nil, aToB, 0, b.mr.Key(), fabric.Uint64, fabric.OpSum, nil), fabric.ErrInvalid},
	} {
		if !errors.Is(c.err, c.want) {
			t.Errorf("%s: %v, want %v", c.name, c.err, c.want)
		}
	}
	fabrictest.Must(t, a.EP.Atomic(u64(1), nil, aToB, 0, b.mr.Key()+5, fabric.Uint64, fabric.OpSum, "bad key"))
	if _, ee := fabrictest.Next(t, a.CQ); ee == nil || !errors.Is(ee.Err, fabric.ErrAccess) || ee.Context != "bad key" {
		t.Fatalf("an atomic to a key the peer lacks: %+v, want FI_EACCES", ee)
	}
}
