package udp_test

import (
	"bytes"
	"context"
	"errors"
	"net"
	"net/netip"
	"runtime"
	"testing"
	"time"

	"github.com/rdmago/rdmago/fabric"
	"github.com/rdmago/rdmago/fabric/fabrictest"
	_ "github.com/rdmago/rdmago/fabric/udp"
)

// end is one datagram endpoint on 127.0.0.1 with its objects.
type end struct {
	info *fabric.Info
	dom  *fabric.Domain
	ep   *fabric.Endpoint
	cq   *fabric.CQ
	av   *fabric.AV
	buf  []byte
}

func open(t testing.TB) *end {
	t.Helper()
	hints := fabric.AllocInfo()
	hints.FabricAttr.ProvName = "udp"
	hints.EPAttr.Type = fabric.EPDgram
	infos, err := fabric.GetInfo("127.0.0.1", "0", fabric.FlagSource, hints)
	fabrictest.Must(t, err)
	e := &end{info: infos[0], buf: make([]byte, 4096)}
	fab, err := fabric.OpenFabric(e.info)
	fabrictest.Must(t, err)
	e.dom, err = fab.OpenDomain(e.info)
	fabrictest.Must(t, err)
	e.cq, _ = e.dom.OpenCQ(nil)
	e.av, _ = e.dom.OpenAV(nil)
	e.ep, err = e.dom.OpenEndpoint(e.info, nil)
	fabrictest.Must(t, err)
	fabrictest.Must(t, e.ep.BindAV(e.av))
	fabrictest.Must(t, e.ep.BindCQ(e.cq, fabric.BindTransmit|fabric.BindRecv))
	fabrictest.Must(t, e.ep.Enable())
	t.Cleanup(func() { e.ep.Close() })
	return e
}

// pair opens two endpoints, each with the other in its AV.
func pair(t *testing.T) (a, b *end, aToB, bToA fabric.Addr) {
	a, b = open(t), open(t)
	return a, b, fabrictest.Peer(t, a.av, b.ep), fabrictest.Peer(t, b.av, a.ep)
}

func TestInfoIsCsDatagramEntry(t *testing.T) {
	e := open(t)
	i := e.info
	for _, c := range []struct {
		name      string
		got, want any
	}{
		{"type", i.EPAttr.Type, fabric.EPDgram},
		{"protocol", i.EPAttr.Protocol, fabric.ProtoUDP},
		{"max_msg_size", i.EPAttr.MaxMsgSize, uint64(1472)},
		{"inject_size", i.TxAttr.InjectSize, 1472},
		{"tx size", i.TxAttr.Size, 1024},
		{"rx size", i.RxAttr.Size, 1024},
		{"addr_format", i.AddrFormat, fabric.FormatSockaddrIn},
		{"domain", i.DomainAttr.Name, "lo"},
		{"fabric", i.FabricAttr.Name, "127.0.0.1/32"},
		{"FI_SOURCE", i.Caps&fabric.CapSource != 0, true},
	} {
		if c.got != c.want {
			t.Errorf("%s: %v, want %v", c.name, c.got, c.want)
		}
	}
	name, err := e.ep.Name()
	if err != nil || name.Addr() != netip.MustParseAddr("127.0.0.1") || name.Port() == 0 {
		t.Errorf("fi_getname: %v %v, want 127.0.0.1 and a port", name, err)
	}
}

// A message is one datagram with the message's bytes and nothing else,
// as C's provider sends it: a plain UDP socket sees exactly them, and
// what it sends arrives whole, its sender known (FI_SOURCE).
func TestADatagramIsTheMessageAlone(t *testing.T) {
	e := open(t)
	sock, err := net.ListenUDP("udp", &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1)})
	fabrictest.Must(t, err)
	defer sock.Close()
	h, err := e.av.Insert(sock.LocalAddr().(*net.UDPAddr).AddrPort())
	fabrictest.Must(t, err)
	copy(e.buf, "hello, C")
	fabrictest.Must(t, e.ep.Send(e.buf[:8], nil, h[0], "tx"))
	if c := fabrictest.Completion(t, e.cq); c.Context != "tx" || c.Flags != fabric.CompSend|fabric.CompMsg {
		t.Fatalf("send completion %+v", c)
	}
	got := make([]byte, 100)
	sock.SetReadDeadline(time.Now().Add(5 * time.Second))
	n, from, err := sock.ReadFromUDPAddrPort(got)
	fabrictest.Must(t, err)
	name, _ := e.ep.Name()
	if string(got[:n]) != "hello, C" || from != name {
		t.Fatalf("the socket got %q from %v, want %q from %v", got[:n], from, "hello, C", name)
	}

	fabrictest.Must(t, e.ep.Recv(e.buf[100:200], nil, fabric.AddrNotAvail, "rx"))
	if _, err := sock.WriteToUDPAddrPort([]byte("from C"), name); err != nil {
		t.Fatal(err)
	}
	c := fabrictest.Completion(t, e.cq)
	if c.Context != "rx" || c.Len != 6 || string(c.Buf) != "from C" || c.Flags != fabric.CompRecv|fabric.CompMsg {
		t.Fatalf("receive completion %+v (%q)", c, c.Buf)
	}
	if c.Source() != h[0] {
		t.Fatalf("source %v, want the AV handle %v of the sender", c.Source(), h[0])
	}
}

func TestSendRecvBothWaysWithReadFrom(t *testing.T) {
	a, b, aToB, bToA := pair(t)
	for i := range 3 {
		fabrictest.Must(t, b.ep.Recv(b.buf[:1472], nil, fabric.AddrNotAvail, i))
	}
	for i, n := range []int{0, 1, 1472} {
		msg := bytes.Repeat([]byte{byte('a' + i)}, n)
		fabrictest.Must(t, a.ep.Send(msg, nil, aToB, nil))
		fabrictest.Completion(t, a.cq)
		var e [1]fabric.CQEntry
		var src [1]fabric.Addr
		deadline := time.Now().Add(5 * time.Second)
		for {
			got, err := b.cq.ReadFrom(e[:], src[:])
			if got == 1 {
				break
			}
			if !errors.Is(err, fabric.ErrAgain) || time.Now().After(deadline) {
				t.Fatalf("message %d: %v", i, err)
			}
		}
		if e[0].Context != i || int(e[0].Len) != n || !bytes.Equal(e[0].Buf, msg) || src[0] != bToA {
			t.Fatalf("message %d: %+v from %v, want %d bytes from %v", i, e[0], src[0], n, bToA)
		}
	}
	// And back, the sender unknown to the receiver's AV.
	fabrictest.Must(t, a.av.Remove(aToB))
	fabrictest.Must(t, a.ep.Recv(a.buf[:10], nil, fabric.AddrNotAvail, "back"))
	fabrictest.Must(t, b.ep.Inject([]byte("back"), bToA))
	if c := fabrictest.Completion(t, a.cq); string(c.Buf) != "back" || c.Source() != fabric.AddrNotAvail {
		t.Fatalf("%+v from %v, want \"back\" from FI_ADDR_NOTAVAIL", c, c.Source())
	}
}

// A datagram longer than the buffer it lands in fails that receive with
// FI_ETRUNC, saying how much did not fit; the next receive is unharmed.
func TestLongDatagramTruncatesItsReceive(t *testing.T) {
	a, b, aToB, _ := pair(t)
	fabrictest.Must(t, b.ep.Recv(b.buf[:10], nil, fabric.AddrNotAvail, "short"))
	fabrictest.Must(t, b.ep.Recv(b.buf[100:200], nil, fabric.AddrNotAvail, "next"))
	fabrictest.Must(t, a.ep.Inject(bytes.Repeat([]byte{'x'}, 30), aToB))
	fabrictest.Must(t, a.ep.Inject([]byte("fine"), aToB))
	_, ee := fabrictest.Next(t, b.cq)
	if ee == nil || !errors.Is(ee.Err, fabric.ErrTrunc) || ee.Context != "short" || ee.Len != 10 || ee.OLen != 20 {
		t.Fatalf("error entry %+v, want FI_ETRUNC for \"short\", 10 bytes in and 20 over", ee)
	}
	if c := fabrictest.Completion(t, b.cq); c.Context != "next" || string(c.Buf) != "fine" {
		t.Fatalf("%+v, want \"fine\" in \"next\"", c)
	}
}

func TestRefusals(t *testing.T) {
	e := open(t)
	h, _ := e.av.Insert(netip.MustParseAddrPort("127.0.0.1:9"))
	big := make([]byte, 1473)
	for _, c := range []struct {
		name string
		err  error
		want fabric.Errno
	}{
		{"fi_send over max_msg_size", e.ep.Send(big, nil, h[0], nil), fabric.ErrMsgSize},
		{"fi_inject over inject_size", e.ep.Inject(big, h[0]), fabric.ErrMsgSize},
		{"fi_send to no handle", e.ep.Send(big[:1], nil, h[0]+7, nil), fabric.ErrInvalid},
		{"fi_senddata", e.ep.SendData(big[:1], nil, 1, h[0], nil), fabric.ErrNoSys},
		{"fi_sendmsg FI_REMOTE_CQ_DATA", e.ep.SendMsg(&fabric.Msg{Buf: big[:1], Addr: h[0]}, fabric.FlagRemoteCQData), fabric.ErrNoSys},
		{"fi_write", e.ep.Write(big[:1], nil, h[0], 0, 0, nil), fabric.ErrNoSys},
		{"fi_read", e.ep.Read(big[:1], nil, h[0], 0, 0, nil), fabric.ErrNoSys},
		{"fi_connect", e.ep.Connect(netip.MustParseAddrPort("127.0.0.1:9"), nil), fabric.ErrNoSys},
		{"fi_tsend", e.ep.TSend(big[:1], nil, h[0], 0, nil), fabric.ErrNotSupported},
	} {
		if !errors.Is(c.err, c.want) {
			t.Errorf("%s: %v, want %v", c.name, c.err, c.want)
		}
	}
	if _, err := fabric.OpenFabric(e.info); err != nil {
		t.Fatal(err)
	}
	hints := fabric.AllocInfo()
	hints.FabricAttr.ProvName = "udp"
	hints.EPAttr.MaxMsgSize = 4096
	if infos, err := fabric.GetInfo("127.0.0.1", "0", fabric.FlagSource, hints); err == nil {
		t.Errorf("fi_getinfo for 4096-byte messages found %d entries; a datagram carries 1472", len(infos))
	}
	fab, _ := fabric.OpenFabric(e.info)
	if _, err := fab.OpenPassiveEndpoint(e.info, nil); !errors.Is(err, fabric.ErrNoSys) {
		t.Errorf("fi_passive_ep: %v, want FI_ENOSYS", err)
	}
}

// A program that waits (fi_cq_sread) and never polls gets its datagrams:
// progress is automatic.
func TestAWaitingReaderGetsItsDatagrams(t *testing.T) {
	a, b, aToB, _ := pair(t)
	fabrictest.Must(t, b.ep.Recv(b.buf[:100], nil, fabric.AddrNotAvail, "rx"))
	time.Sleep(5 * time.Millisecond) // past the grace the background loop gives a polling program
	go func() {
		time.Sleep(20 * time.Millisecond)
		a.ep.Inject([]byte("late"), aToB)
	}()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	fabrictest.Must(t, b.cq.Wait(ctx))
	var e [1]fabric.CQEntry
	if n, err := b.cq.Read(e[:]); n != 1 || string(e[0].Buf) != "late" {
		t.Fatalf("%d %v %+v", n, err, e[0])
	}
}

// Close completes the receives still posted with FI_ECANCELED, stops
// the endpoint's goroutines, and the calls after it fail with FI_EBADF.
func TestCloseCancelsAndStops(t *testing.T) {
	before := runtime.NumGoroutine()
	e := open(t)
	fabrictest.Must(t, e.ep.Recv(e.buf[:10], nil, fabric.AddrNotAvail, "pending"))
	fabrictest.Must(t, e.ep.Close())
	if _, ee := fabrictest.Next(t, e.cq); ee == nil || !errors.Is(ee.Err, fabric.ErrCanceled) || ee.Context != "pending" {
		t.Fatalf("after close: %+v, want FI_ECANCELED for the pending receive", ee)
	}
	if err := e.ep.Recv(e.buf[:10], nil, fabric.AddrNotAvail, nil); !errors.Is(err, fabric.ErrBadFD) {
		t.Errorf("fi_recv after close: %v, want FI_EBADF", err)
	}
	deadline := time.Now().Add(5 * time.Second)
	for runtime.NumGoroutine() > before {
		if time.Now().After(deadline) {
			buf := make([]byte, 1<<16)
			t.Fatalf("%d goroutines after close, %d before:\n%s", runtime.NumGoroutine(), before, buf[:runtime.Stack(buf, true)])
		}
		time.Sleep(time.Millisecond)
	}
}

// BenchmarkPingPong64 is fi_pingpong's exchange of 64-byte datagrams,
// both endpoints polled on one goroutine: ns/op is a round trip.
func BenchmarkPingPong64(b *testing.B) {
	x, y := open(b), open(b)
	xy, yx := fabrictest.Peer(b, x.av, y.ep), fabrictest.Peer(b, y.av, x.ep)
	const size = 64
	msg := make([]byte, size)
	var e [1]fabric.CQEntry
	wait := func(cq *fabric.CQ) {
		for {
			if n, _ := cq.Read(e[:]); n == 1 {
				return
			}
		}
	}
	y.ep.Recv(y.buf[:size], nil, fabric.AddrNotAvail, nil)
	x.ep.Recv(x.buf[:size], nil, fabric.AddrNotAvail, nil)
	b.ResetTimer()
	for range b.N {
		x.ep.Inject(msg, xy)
		wait(y.cq)
		y.ep.Recv(y.buf[:size], nil, fabric.AddrNotAvail, nil)
		y.ep.Inject(msg, yx)
		wait(x.cq)
		x.ep.Recv(x.buf[:size], nil, fabric.AddrNotAvail, nil)
	}
}

// The API's calls on datagram endpoints, as every provider runs them.
func TestFabricAPIConnectionless(t *testing.T) {
	fabrictest.RunConnectionless(t, fabrictest.Connectionless{Name: "udp", Entry: "udp", Type: fabric.EPDgram, Source: true})
}
