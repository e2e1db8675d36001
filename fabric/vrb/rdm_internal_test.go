package vrb

import (
	"testing"

	"github.com/rdmago/rdmago/fabric"
	"github.com/rdmago/rdmago/fabric/internal/rxm"
)

// hostile is an RDM endpoint with one connection (no endpoint under it)
// and a receive CQ, for feeding packets to received.
func hostile() (*rdm, *rconn, *fabric.CQ) {
	d := &fabric.Domain{}
	rxcq, _ := d.OpenCQ(nil)
	r := &rdm{Binds: rxm.Binds{Comp: fabric.Completions{RxCQ: rxcq}}, sar: map[sarKey]*umsg{}, rndv: map[uint64]*rndvSend{}, byEP: map[*ep]*rconn{}}
	return r, &rconn{addr: fabric.AddrNotAvail}, rxcq
}

func seg(id uint64, no uint32, typ uint64, total uint64, body []byte) []byte {
	b := make([]byte, rxm.PktLen+len(body))
	(&rxm.Pkt{Ctrl: rxm.CtrlSeg, SegSize: uint16(len(body)), SegNo: no, MsgID: id, CtrlData: typ, Size: total}).Marshal(b)
	copy(b[rxm.PktLen:], body)
	return b
}

// Segments that do not make a message a C peer would send are dropped,
// not delivered and not kept: a middle with no first, a message above
// the SAR limit, segments past the announced size; a well-formed one
// (with ctrl_data's upper bits set, as C leaves them) is delivered.
func TestHostileSegmentsAreDropped(t *testing.T) {
	r, c, _ := hostile()
	in := func(b []byte) { r.received(&rxBuf{c: c}, fabric.CQEntry{Buf: b}) }
	in(seg(1, 1, rxm.SegMiddle, 40000, make([]byte, 100)))
	in(seg(2, 0, rxm.SegFirst, sarLimit+1, make([]byte, 100)))
	in(seg(3, 0, rxm.SegFirst, 10, make([]byte, 100)))
	if r.q.Held() != 0 || len(r.sar) != 0 {
		t.Fatalf("kept %d messages, %d reassemblies", r.q.Held(), len(r.sar))
	}
	body := make([]byte, 20000)
	in(seg(4, 0, 0x7c|rxm.SegFirst, 20000, body[:16384]))
	in(seg(4, 1, 0x7c|rxm.SegLast, 20000, body[16384:]))
	if r.q.Held() != 1 || r.q.Unexpected()[0].Size != 20000 || len(r.q.Unexpected()[0].Body) != 20000 || len(r.sar) != 0 {
		t.Fatalf("a good SAR message: %d kept, %d reassemblies", r.q.Held(), len(r.sar))
	}
}

// FuzzRDMReceived: whatever a peer sends, received neither panics nor
// keeps more than the message it announced.
func FuzzRDMReceived(f *testing.F) {
	f.Add(seg(1, 0, rxm.SegFirst, 30000, make([]byte, 16384)))
	eager := make([]byte, rxm.PktLen+5)
	(&rxm.Pkt{Ctrl: rxm.CtrlEager, Size: 5}).Marshal(eager)
	f.Add(eager)
	rndv := append(make([]byte, rxm.PktLen), rxm.RndvHdr([]rxm.IOV{{Addr: 1, Len: 2, Key: 3}})...)
	(&rxm.Pkt{Ctrl: rxm.CtrlRndvReq, Size: 2}).Marshal(rndv)
	f.Add(rndv)
	f.Fuzz(func(t *testing.T, b []byte) {
		r, c, _ := hostile()
		r.received(&rxBuf{c: c}, fabric.CQEntry{Buf: b})
		r.received(&rxBuf{c: c}, fabric.CQEntry{Buf: b})
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
