package verbstest

import (
	"context"
	"testing"
	"time"

	"github.com/rdmago/rdmago/verbs"
)

// The cases of queues: SRQs and their limit, CQ overrun, waiting on a CQ,
// completion channels and solicited events.

func testSRQ(t *testing.T, tg *Target) {
	srvCtx := newSide(t, tg, tg.B, opts{}) // only for its context and PD
	s, err := srvCtx.pd.CreateSRQ(&verbs.SRQInitAttr{Attr: verbs.SRQAttr{MaxWR: 16, MaxSGE: 1}})
	if err != nil {
		t.Fatal(err)
	}
	mk := func() *side {
		x := *srvCtx
		qp, err := srvCtx.pd.CreateQP(&verbs.QPInitAttr{SendCQ: srvCtx.cq, RecvCQ: srvCtx.cq, QPType: verbs.QPTRC, SRQ: s,
			Cap: verbs.QPCap{MaxSendWR: 16, MaxSendSGE: 1}})
		if err != nil {
			t.Fatal(err)
		}
		x.qp = qp
		return &x
	}
	b1, b2 := mk(), mk()
	a1, a2 := newSide(t, tg, tg.A, opts{}), newSide(t, tg, tg.A, opts{})
	connect(t, a1, b1, opts{})
	connect(t, a2, b2, opts{})
	var rwrs []verbs.RecvWR
	for i := range 4 {
		rwrs = append(rwrs, verbs.RecvWR{WRID: uint64(100 + i), SGList: []verbs.SGE{srvCtx.mr.SGE(i*256, 256)}})
	}
	if err := s.PostRecv(rwrs); err != nil {
		t.Fatal(err)
	}
	copy(a1.buf, "from one")
	copy(a2.buf, "from two")
	a1.send(verbs.SendWR{WRID: 1, Opcode: verbs.WRSend, SendFlags: verbs.SendSignaled, SGList: []verbs.SGE{a1.mr.SGE(0, 8)}})
	a1.one(verbs.WCSuccess, verbs.WCSend)
	a2.send(verbs.SendWR{WRID: 1, Opcode: verbs.WRSend, SendFlags: verbs.SendSignaled, SGList: []verbs.SGE{a2.mr.SGE(0, 8)}})
	a2.one(verbs.WCSuccess, verbs.WCSend)
	wcs := srvCtx.wait(2)
	got := map[uint32]string{}
	for _, wc := range wcs {
		if wc.Status != verbs.WCSuccess || wc.Opcode != verbs.WCRecv {
			t.Fatalf("SRQ completions%s", describe(wcs))
		}
		off := int(wc.WRID-100) * 256
		got[wc.QPNum] = string(srvCtx.buf[off : off+8])
	}
	if got[b1.qp.Num()] != "from one" || got[b2.qp.Num()] != "from two" {
		t.Fatalf("SRQ receives by QP: %v", got)
	}
	attr, err := s.Query()
	if err != nil || attr.MaxWR < 16 {
		t.Fatalf("SRQ query %+v %v", attr, err)
	}
	if err := s.Destroy(); err == nil {
		t.Fatal("destroying an SRQ that QPs use succeeded")
	}
	b1.qp.Destroy()
	b2.qp.Destroy()
	if err := s.Destroy(); err != nil {
		t.Fatal(err)
	}
}

func testSRQLimit(t *testing.T, tg *Target) {
	b := newSide(t, tg, tg.B, opts{})
	s, err := b.pd.CreateSRQ(&verbs.SRQInitAttr{Attr: verbs.SRQAttr{MaxWR: 16, MaxSGE: 1}})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Destroy()
	qp, err := b.pd.CreateQP(&verbs.QPInitAttr{SendCQ: b.cq, RecvCQ: b.cq, QPType: verbs.QPTRC, SRQ: s, Cap: verbs.QPCap{MaxSendWR: 4, MaxSendSGE: 1}})
	if err != nil {
		t.Fatal(err)
	}
	defer qp.Destroy()
	b.qp = qp
	a := newSide(t, tg, tg.A, opts{})
	connect(t, a, b, opts{})
	var rwrs []verbs.RecvWR
	for i := range 4 {
		rwrs = append(rwrs, verbs.RecvWR{WRID: uint64(i), SGList: []verbs.SGE{b.mr.SGE(i*64, 64)}})
	}
	if err := s.PostRecv(rwrs); err != nil {
		t.Fatal(err)
	}
	if err := s.Modify(&verbs.SRQAttr{SRQLimit: 2}, verbs.SRQAttrLimit); err != nil {
		t.Fatal(err)
	}
	for i := range 3 {
		a.send(verbs.SendWR{WRID: uint64(i), Opcode: verbs.WRSend, SendFlags: verbs.SendSignaled, SGList: []verbs.SGE{a.mr.SGE(0, 8)}})
	}
	a.wait(3)
	b.wait(3)
	ctx, cancel := context.WithTimeout(context.Background(), tg.Timeout)
	defer cancel()
	for {
		ev, err := b.ctx.GetAsyncEvent(ctx)
		if err != nil {
			t.Fatalf("no SRQ_LIMIT_REACHED event: %v", err)
		}
		b.ctx.AckAsyncEvent(ev)
		if ev.Type == verbs.EventSRQLimitReached {
			if ev.SRQ != s {
				t.Fatalf("SRQ_LIMIT_REACHED for %p, want %p", ev.SRQ, s)
			}
			return
		}
	}
}

// testCQOverrun: a receive CQ that nobody polls overflows; the device
// reports IBV_EVENT_CQ_ERR naming that CQ.
func testCQOverrun(t *testing.T, tg *Target) {
	b := newSide(t, tg, tg.B, opts{})
	small, err := b.ctx.CreateCQ(1, nil, 0)
	if err != nil {
		t.Fatal(err)
	}
	b.qp.Destroy()
	n := small.Cap() + 1 // one more than the CQ holds (providers round sizes up)
	if n*64 > bufSize {
		t.Skipf("the smallest CQ holds %d completions", n-1)
	}
	qp, err := b.pd.CreateQP(&verbs.QPInitAttr{SendCQ: b.cq, RecvCQ: small, QPType: verbs.QPTRC,
		Cap: verbs.QPCap{MaxSendWR: uint32(n), MaxRecvWR: uint32(n), MaxSendSGE: 1, MaxRecvSGE: 1}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { qp.Destroy(); small.Destroy() })
	b.qp = qp
	a := newSide(t, tg, tg.A, opts{})
	connect(t, a, b, opts{})
	for i := range n {
		b.recv(uint64(i), i*64, 64)
	}
	for i := range n {
		a.send(verbs.SendWR{WRID: uint64(i), Opcode: verbs.WRSend, SendFlags: verbs.SendSignaled, SGList: []verbs.SGE{a.mr.SGE(0, 8)}})
	}
	ctx, cancel := context.WithTimeout(context.Background(), tg.Timeout)
	defer cancel()
	for {
		ev, err := b.ctx.GetAsyncEvent(ctx)
		if err != nil {
			t.Fatalf("no CQ_ERR event after %d receives into a CQ of %d: %v", n, small.Cap(), err)
		}
		b.ctx.AckAsyncEvent(ev)
		if ev.Type == verbs.EventCQErr {
			if ev.CQ != small {
				t.Fatalf("CQ_ERR for %p, want the overrun CQ %p", ev.CQ, small)
			}
			return
		}
	}
}

func testCQWait(t *testing.T, tg *Target) {
	a, b := pair(t, tg, opts{})
	done := make(chan error, 1)
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), tg.Timeout)
		defer cancel()
		done <- b.cq.Wait(ctx)
	}()
	b.recv(1, 0, 64)
	a.send(verbs.SendWR{WRID: 1, Opcode: verbs.WRSend, SGList: []verbs.SGE{a.mr.SGE(0, 8)}})
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if n, _ := b.cq.Poll(make([]verbs.WC, 2)); n != 1 {
		t.Fatalf("Wait returned with %d completions queued", n)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Millisecond)
	defer cancel()
	if err := b.cq.Wait(ctx); err != context.DeadlineExceeded {
		t.Fatalf("Wait on an empty CQ returned %v, want the context's deadline", err)
	}
}

func (s *side) cqEvent() {
	s.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), s.tg.Timeout)
	defer cancel()
	cq, err := s.ch.GetCQEvent(ctx)
	if err != nil {
		s.t.Fatalf("no completion event: %v", err)
	}
	if cq != s.cq {
		s.t.Fatal("event for another CQ")
	}
	cq.AckEvents(1)
}

func testCompChannel(t *testing.T, tg *Target) {
	a, b := pair(t, tg, opts{})
	for i := range 3 {
		if err := b.cq.ReqNotify(false); err != nil {
			t.Fatal(err)
		}
		b.recv(uint64(i), 0, 64)
		a.send(verbs.SendWR{WRID: uint64(i), Opcode: verbs.WRSend, SGList: []verbs.SGE{a.mr.SGE(0, 8)}})
		b.cqEvent()
		if wc := b.one(verbs.WCSuccess, verbs.WCRecv); wc.WRID != uint64(i) {
			t.Fatalf("completion %d after event %d", wc.WRID, i)
		}
	}
}

func testSolicited(t *testing.T, tg *Target) {
	a, b := pair(t, tg, opts{})
	if err := b.cq.ReqNotify(true); err != nil {
		t.Fatal(err)
	}
	b.recv(1, 0, 64)
	b.recv(2, 64, 64)
	a.send(verbs.SendWR{WRID: 1, Opcode: verbs.WRSend, SendFlags: verbs.SendSignaled, SGList: []verbs.SGE{a.mr.SGE(0, 8)}})
	a.one(verbs.WCSuccess, verbs.WCSend)
	select {
	case <-b.ch.C():
		t.Fatal("an unsolicited message fired a CQ armed for solicited ones")
	case <-time.After(50 * time.Millisecond):
	}
	a.send(verbs.SendWR{WRID: 2, Opcode: verbs.WRSend, SendFlags: verbs.SendSolicited, SGList: []verbs.SGE{a.mr.SGE(0, 8)}})
	b.cqEvent()
	if wcs := b.wait(2); wcs[1].WRID != 2 {
		t.Fatalf("completions%s", describe(wcs))
	}
}
