package rxm

import (
	"encoding/binary"
	"testing"

	"github.com/rdmago/rdmago/fabric"
)

// noWire is a Transport that sends nothing, for feeding packets to an
// endpoint's receive path.
type noWire struct{ ctrl []Pkt }

func (*noWire) Listen(*fabric.Info, *fabric.EQ) (fabric.PassiveEndpointDriver, error) {
	return nil, fabric.ErrNotSupported
}
func (*noWire) Open(*fabric.Info) (fabric.EndpointDriver, error) { return nil, fabric.ErrNotSupported }
func (*noWire) Attach(*Conn) error                               { return nil }
func (*noWire) Detach(*Conn)                                     {}
func (*noWire) Send(*Conn, Out) error                            { return fabric.ErrNotSupported }
func (w *noWire) SendCtrl(_ *Conn, p *Pkt)                       { w.ctrl = append(w.ctrl, *p) }
func (*noWire) Completion(fabric.CQEntry) bool                   { return false }
func (*noWire) Failure(fabric.CQErrEntry) bool                   { return false }
func (*noWire) Close()                                           {}

// hostile is an RDM endpoint with one connection (no endpoint under it)
// and a receive CQ, for feeding packets to received.
func hostile() (*Endpoint, *Conn, *fabric.CQ, *noWire) {
	d := &fabric.Domain{}
	rxcq, _ := d.OpenCQ(nil)
	w := &noWire{}
	r := &Endpoint{T: w, Binds: Binds{Comp: fabric.Completions{RxCQ: rxcq}}, sar: map[sarKey]*Msg[*Conn]{}, rndv: map[uint64]*RndvSend{},
		byEP: map[fabric.EndpointDriver]*Conn{}}
	return r, &Conn{Addr: fabric.AddrNotAvail}, rxcq, w
}

func seg(id uint64, no uint32, typ uint64, total uint64, body []byte) []byte {
	b := make([]byte, PktLen+len(body))
	(&Pkt{Ctrl: CtrlSeg, SegSize: uint16(len(body)), SegNo: no, MsgID: id, CtrlData: typ, Size: total}).Marshal(b)
	copy(b[PktLen:], body)
	return b
}

// Segments that do not make a message a C peer would send are dropped,
// not delivered and not kept: a middle with no first, a message above
// the SAR limit, segments past the announced size; a well-formed one
// (with ctrl_data's upper bits set, as C leaves them) is delivered.
func TestHostileSegmentsAreDropped(t *testing.T) {
	r, c, _, _ := hostile()
	in := func(b []byte) { r.received(&RxBuf{C: c}, fabric.CQEntry{Buf: b}) }
	in(seg(1, 1, SegMiddle, 40000, make([]byte, 100)))
	in(seg(2, 0, SegFirst, sarLimit+1, make([]byte, 100)))
	in(seg(3, 0, SegFirst, 10, make([]byte, 100)))
	if r.q.Held() != 0 || len(r.sar) != 0 {
		t.Fatalf("kept %d messages, %d reassemblies", r.q.Held(), len(r.sar))
	}
	body := make([]byte, 20000)
	in(seg(4, 0, 0x7c|SegFirst, 20000, body[:16384]))
	in(seg(4, 1, 0x7c|SegLast, 20000, body[16384:]))
	if r.q.Held() != 1 || r.q.Unexpected()[0].Size != 20000 || len(r.q.Unexpected()[0].Body) != 20000 || len(r.sar) != 0 {
		t.Fatalf("a good SAR message: %d kept, %d reassemblies", r.q.Held(), len(r.sar))
	}
}

// A peer's rendezvous requests that lie must fail the receive, not panic,
// and tell the sender its buffer is free.
func TestHostileRendezvousRequestsAreRefused(t *testing.T) {
	r, c, rxcq, w := hostile()
	pkt := func(bodyLen int, size, iovLen uint64) []byte {
		b := make([]byte, PktLen+bodyLen)
		(&Pkt{Ctrl: CtrlRndvReq, Size: size, MsgID: 9}).Marshal(b)
		if bodyLen >= 97 {
			binary.LittleEndian.PutUint64(b[PktLen+8:], iovLen)
			b[PktLen+96] = 1
		}
		return b
	}
	// A header cut one byte short of the iov count.
	r.received(&RxBuf{C: c}, fabric.CQEntry{Buf: pkt(96, 8, 0)})
	if r.q.Held() != 0 {
		t.Fatal("a truncated rendezvous header was taken")
	}
	// An iov longer than the message it announces, into a small buffer.
	buf := make([]byte, 8)
	r.q.Post(Recv{Buf: buf, Src: fabric.AddrNotAvail, Ctx: "rx"})
	r.received(&RxBuf{C: c}, fabric.CQEntry{Buf: pkt(104, 8, 1<<20)})
	ee, err := rxcq.ReadErr()
	if err != nil || ee.Err != fabric.ErrTrunc || ee.Context != "rx" {
		t.Fatalf("lying rendezvous: %+v %v", ee, err)
	}
	if len(w.ctrl) != 1 || w.ctrl[0].Ctrl != CtrlRndvRdDone || w.ctrl[0].MsgID != 9 {
		t.Fatalf("the sender was told %+v, want one read-done of message 9", w.ctrl)
	}
}

// FuzzRDMReceived: whatever a peer sends, received neither panics nor
// keeps more than the message it announced.
func FuzzRDMReceived(f *testing.F) {
	f.Add(seg(1, 0, SegFirst, 30000, make([]byte, 16384)))
	eager := make([]byte, PktLen+5)
	(&Pkt{Ctrl: CtrlEager, Size: 5}).Marshal(eager)
	f.Add(eager)
	rndv := append(make([]byte, PktLen), RndvHdr([]IOV{{Addr: 1, Len: 2, Key: 3}})...)
	(&Pkt{Ctrl: CtrlRndvReq, Size: 2}).Marshal(rndv)
	f.Add(rndv)
	f.Fuzz(func(t *testing.T, b []byte) {
		r, c, _, _ := hostile()
		r.received(&RxBuf{C: c}, fabric.CQEntry{Buf: b})
		r.received(&RxBuf{C: c}, fabric.CQEntry{Buf: b})
		for _, m := range r.q.Unexpected() {
			if m.Rndv == nil && uint64(len(m.Body)) != m.Size {
				t.Fatalf("kept %d bytes of a %d-byte message", len(m.Body), m.Size)
			}
		}
		for _, a := range r.sar {
			if a.Size > sarLimit || uint64(len(a.Body)) > a.Size {
				t.Fatalf("reassembly of %d bytes, %d in", a.Size, len(a.Body))
			}
		}
	})
}
