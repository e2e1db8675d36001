package verbstest

import (
	"testing"

	"github.com/rdmago/rdmago/verbs"
)

// The cases of errors: remote access, local length, RNR, flushing after
// an error and bad work requests.

func testRemoteAccess(t *testing.T, tg *Target) {
	for _, c := range []struct {
		name string
		key  func(*verbs.MR) uint32
		off  uint64
	}{
		{"bad rkey", func(m *verbs.MR) uint32 { return m.RKey() ^ 0x80 }, 0},
		{"past the region", (*verbs.MR).RKey, bufSize - 4},
	} {
		a, b := pair(t, tg, opts{})
		a.send(verbs.SendWR{WRID: 1, Opcode: verbs.WRRDMAWrite, SendFlags: verbs.SendSignaled, SGList: []verbs.SGE{a.mr.SGE(0, 64)},
			RKey: c.key(b.mr), RemoteAddr: b.mr.Addr() + c.off})
		if wc := a.wait(1)[0]; wc.Status != verbs.WCRemAccessErr {
			t.Fatalf("%s: completion %s, want %s", c.name, wc.Status, verbs.WCRemAccessErr)
		}
		if a.qp.State() != verbs.QPSErr {
			t.Fatalf("%s: requester QP in %s after a remote access error, want ERR", c.name, a.qp.State())
		}
	}
}

func testLocalLength(t *testing.T, tg *Target) {
	a, b := pair(t, tg, opts{})
	b.recv(1, 0, 8)
	a.send(verbs.SendWR{WRID: 1, Opcode: verbs.WRSend, SendFlags: verbs.SendSignaled, SGList: []verbs.SGE{a.mr.SGE(0, 64)}})
	b.one(verbs.WCLocLenErr, verbs.WCRecv)
	if wc := a.wait(1)[0]; wc.Status == verbs.WCSuccess {
		t.Fatal("a SEND too big for the receive buffer succeeded")
	}
}

func testRNR(t *testing.T, tg *Target) {
	a, _ := pair(t, tg, opts{rnrRetry: 1})
	a.send(verbs.SendWR{WRID: 1, Opcode: verbs.WRSend, SendFlags: verbs.SendSignaled, SGList: []verbs.SGE{a.mr.SGE(0, 8)}})
	a.one(verbs.WCRNRRetryExcErr, verbs.WCSend)
}

func testFlush(t *testing.T, tg *Target) {
	_, b := pair(t, tg, opts{})
	b.recv(1, 0, 64)
	b.recv(2, 64, 64)
	if err := b.qp.Modify(&verbs.QPAttr{QPState: verbs.QPSErr}, verbs.QPAttrState); err != nil {
		t.Fatal(err)
	}
	for i, wc := range b.wait(2) {
		if wc.Status != verbs.WCWRFlushErr || wc.WRID != uint64(i+1) {
			t.Fatalf("flushed receive %d: %+v", i, wc)
		}
	}
}

func testBadWR(t *testing.T, tg *Target) {
	a, _ := pair(t, tg, opts{})
	wrs := make([]verbs.SendWR, 2)
	wrs[0] = verbs.SendWR{WRID: 1, Opcode: verbs.WRSend, SGList: []verbs.SGE{a.mr.SGE(0, 8)}}
	wrs[1] = verbs.SendWR{WRID: 2, Opcode: verbs.WRSend, SGList: make([]verbs.SGE, 64)}
	err := a.qp.PostSend(wrs)
	we, ok := err.(*verbs.WRError)
	if !ok || we.Index != 1 || we.WRID != 2 {
		t.Fatalf("posting 64 SGEs to a QP of 2: %v, want a *WRError at index 1", err)
	}
}
