package tcp

import (
	"encoding/binary"
	"testing"

	"github.com/rdmago/rdmago/fabric"
	"github.com/rdmago/rdmago/fabric/internal/rxm"
)

// A peer's rendezvous requests that lie must fail the receive, not panic.
func TestHostileRendezvousRequestsAreRefused(t *testing.T) {
	d := &fabric.Domain{}
	rxcq, _ := d.OpenCQ(nil)
	r := &rdm{Binds: rxm.Binds{Comp: fabric.Completions{RxCQ: rxcq}}, rndv: map[uint64]*rndvSend{}, byEP: map[*ep]*rconn{}}
	c := &rconn{addr: fabric.AddrNotAvail}
	pkt := func(bodyLen int, size, iovLen uint64) []byte {
		b := make([]byte, rxmPktLen+bodyLen)
		(&rxm.Pkt{Ctrl: rxm.CtrlRndvReq, Size: size}).Marshal(b)
		if bodyLen >= 97 {
			binary.LittleEndian.PutUint64(b[rxmPktLen+8:], iovLen)
			b[rxmPktLen+96] = 1
		}
		return b
	}
	// A header cut one byte short of the iov count.
	r.received(&rxBuf{c: c}, fabric.CQEntry{Buf: pkt(96, 8, 0)})
	if r.q.Held() != 0 {
		t.Fatal("a truncated rendezvous header was taken")
	}
	// An iov longer than the message it announces, into a small buffer.
	buf := make([]byte, 8)
	r.q.Post(urecv{Buf: buf, Src: fabric.AddrNotAvail, Ctx: "rx"})
	r.received(&rxBuf{c: c}, fabric.CQEntry{Buf: pkt(104, 8, 1<<20)})
	ee, err := rxcq.ReadErr()
	if err != nil || ee.Err != fabric.ErrTrunc || ee.Context != "rx" {
		t.Fatalf("lying rendezvous: %+v %v", ee, err)
	}
}

// Internal frames (read responses, ACKs) go ahead of the program's frames
// but in the order they were queued: the peer matches read responses in
// order.
func TestInternalFramesKeepTheirOrder(t *testing.T) {
	e := &ep{}
	user := &txEntry{bufs: [][]byte{{1}}, partial: true}
	later := &txEntry{bufs: [][]byte{{2}}}
	e.txq = []*txEntry{user, later}
	a, b := &txEntry{}, &txEntry{}
	e.queueFirst(a)
	e.queueFirst(b)
	if len(e.txq) != 4 || e.txq[0] != user || e.txq[1] != a || e.txq[2] != b || e.txq[3] != later {
		t.Fatalf("queue order wrong: %v", e.txq)
	}
}
