package rxm

import (
	"errors"

	"github.com/rdmago/rdmago/fabric"
)

// An RDM endpoint's receive side: the completions of its connections,
// the packets that come over them (eager, in segments, rendezvous),
// matching them with the program's receives, and the rendezvous read.

func (r *Endpoint) completion(e fabric.CQEntry) {
	switch x := e.Context.(type) {
	case *RxBuf:
		if e.Flags&fabric.CompRemoteWrite != 0 {
			// A peer's fi_writedata whose data consumed this buffer.
			if e.Flags&fabric.CompRemoteCQData != 0 && r.Comp.RxCQ != nil {
				r.Comp.PostRx(fabric.CQEntry{Flags: e.Flags, Data: e.Data})
			}
		} else {
			r.received(x, e)
		}
		if r.Live(x.C) {
			x.C.EP.Recv(x.Buf, x.Desc, fabric.AddrNotAvail, x)
		}
	case nil:
		// A peer's RMA write with CQ data. (The connection counted it,
		// into the counter the provider bound, as it counts the others.)
		if e.Flags&fabric.CompRemoteCQData != 0 && r.Comp.RxCQ != nil {
			r.Comp.PostRx(e)
		}
	case *rdOp:
		// The rendezvous data is in: tell the sender, complete the receive.
		if x.local != nil {
			x.local.Close()
		}
		r.T.SendCtrl(x.m.Conn, &Pkt{Ctrl: CtrlRndvRdDone, MsgID: x.m.MsgID})
		r.Comp.Done(fabric.CQEntry{Context: x.r.Ctx, Flags: x.m.Flags(), Len: x.m.Size, Buf: x.r.Buf[:x.m.Size], Data: x.m.Data, Tag: x.m.Tag})
	case *rmaOp:
		e.Context = x.ctx
		if x.comp {
			r.Comp.Done(e)
		} else {
			r.Comp.Count(e.Flags)
		}
	default:
		r.T.Completion(e)
	}
}

func (r *Endpoint) opFailed(ee fabric.CQErrEntry) {
	switch x := ee.Context.(type) {
	case *RxBuf:
		// A frame too big for rxm's buffers: the buffer goes back.
		if ee.Err != fabric.ErrCanceled && r.Live(x.C) {
			x.C.EP.Recv(x.Buf, x.Desc, fabric.AddrNotAvail, x)
		}
	case *rdOp:
		if x.local != nil {
			x.local.Close()
		}
		r.Comp.Failed(fabric.CQErrEntry{CQEntry: fabric.CQEntry{Context: x.r.Ctx, Flags: x.m.Flags()}, Err: ee.Err})
	case *rmaOp:
		if x.comp {
			ee.Context = x.ctx
			r.Comp.Failed(ee)
		}
	default:
		r.T.Failure(ee)
	}
}

// received parses what came on a connection.
func (r *Endpoint) received(b *RxBuf, e fabric.CQEntry) {
	if e.Flags&fabric.CompTagged != 0 {
		// A raw tagged frame (tcp): no rxm header.
		r.deliver(Msg[*Conn]{Conn: b.C, From: b.C.Addr, Tagged: true, Tag: e.Tag, Body: e.Buf, Size: uint64(len(e.Buf)),
			Data: e.Data, HasCQ: e.Flags&fabric.CompRemoteCQData != 0})
		return
	}
	p, ok := ParsePkt(e.Buf)
	if !ok {
		return
	}
	body := e.Buf[PktLen:]
	m := Msg[*Conn]{Conn: b.C, From: b.C.Addr, Tagged: p.Op == OpTagged, Tag: p.Tag, Data: p.Data, HasCQ: p.Flags&FlagRemoteCQData != 0, Size: p.Size, MsgID: p.MsgID}
	switch p.Ctrl {
	case CtrlEager:
		if p.Size > uint64(len(body)) {
			return
		}
		m.Body = body[:p.Size]
		r.deliver(m)
	case CtrlSeg:
		r.segment(m, p, body)
	case CtrlRndvReq:
		iov, ok := ParseRndvHdr(body)
		if !ok {
			return
		}
		m.Rndv = iov
		r.deliver(m)
	case CtrlRndvRdDone:
		if s := r.rndv[p.MsgID]; s != nil && s.C == b.C {
			delete(r.rndv, p.MsgID)
			s.MR.Close()
			r.Comp.Done(fabric.CQEntry{Context: s.Ctx, Flags: s.Flags, Len: s.Length})
		}
	case CtrlCredit:
		// Credits for flow control this endpoint did not ask for.
	}
}

// segment adds one SAR segment to its message, and delivers the message
// when the last is in. Segments come in order (one connection).
func (r *Endpoint) segment(m Msg[*Conn], p Pkt, body []byte) {
	k := sarKey{m.Conn, p.MsgID}
	a := r.sar[k]
	if p.CtrlData&3 == SegFirst || a == nil {
		r.endSAR(k)
		if p.CtrlData&3 != SegFirst || p.Size <= EagerLimit || p.Size > sarLimit || m.Conn.sarOpen >= maxSAR {
			return // not a message C's rxm sends in segments
		}
		m.Body = make([]byte, 0, p.Size)
		a = &m
		r.sar[k] = a
		m.Conn.sarOpen++
	}
	n := int(p.SegSize)
	if n > len(body) || n > cap(a.Body)-len(a.Body) {
		r.endSAR(k) // a segment past the message it belongs to
		return
	}
	a.Body = append(a.Body, body[:n]...)
	if p.CtrlData&3 == SegLast || uint64(len(a.Body)) == a.Size {
		r.endSAR(k)
		if uint64(len(a.Body)) != a.Size {
			return // segments lost to a broken connection
		}
		r.deliver(*a)
	}
}

func (r *Endpoint) endSAR(k sarKey) {
	if _, ok := r.sar[k]; ok {
		delete(r.sar, k)
		k.c.sarOpen--
	}
}

// deliver matches a message with a posted receive, or keeps it.
func (r *Endpoint) deliver(m Msg[*Conn]) {
	u, ok, full := r.q.Arrive(m)
	switch {
	case full:
		r.dropConn(m.Conn) // the peer sends far ahead of the receives
	case ok:
		r.complete(u, m)
	}
}

// complete moves a message into a receive: at once when it is here, by
// an RMA read of the sender's memory for a rendezvous.
func (r *Endpoint) complete(u Recv, m Msg[*Conn]) {
	if m.Rndv == nil {
		n := copy(u.Buf, m.Body)
		if uint64(n) < m.Size {
			r.Comp.Failed(fabric.CQErrEntry{CQEntry: fabric.CQEntry{Context: u.Ctx, Flags: m.Flags(), Len: uint64(n), Buf: u.Buf[:n], Tag: m.Tag},
				OLen: m.Size - uint64(n), Err: fabric.ErrTrunc})
			return
		}
		r.Comp.Done(fabric.CQEntry{Context: u.Ctx, Flags: m.Flags(), Len: m.Size, Buf: u.Buf[:m.Size], Data: m.Data, Tag: m.Tag})
		return
	}
	if m.Size > uint64(len(u.Buf)) || len(m.Rndv) != 1 || m.Rndv[0].Len != m.Size {
		// Nothing is read; the sender hears it is done with its buffer.
		r.Comp.Failed(fabric.CQErrEntry{CQEntry: fabric.CQEntry{Context: u.Ctx, Flags: m.Flags(), Tag: m.Tag}, OLen: m.Size, Err: fabric.ErrTrunc})
		r.T.SendCtrl(m.Conn, &Pkt{Ctrl: CtrlRndvRdDone, MsgID: m.MsgID})
		return
	}
	v := m.Rndv[0]
	op := &rdOp{m: m, r: u}
	desc := u.Desc
	if _, ok := desc.(*fabric.MR); !ok && r.Cfg.RegisterReads {
		mr, err := r.D.RegMR(u.Buf[:v.Len], fabric.AccessRecv, 0)
		if err != nil {
			r.Comp.Failed(fabric.CQErrEntry{CQEntry: fabric.CQEntry{Context: u.Ctx, Flags: m.Flags()}, Err: fabric.ErrNoMemory})
			return
		}
		op.local, desc = mr, mr.Desc()
	}
	r.Later(func() bool {
		err := m.Conn.EP.Read(u.Buf[:v.Len], desc, fabric.AddrNotAvail, v.Addr, v.Key, op)
		if errors.Is(err, fabric.ErrAgain) {
			return false
		}
		if err != nil {
			if op.local != nil {
				op.local.Close()
			}
			r.Comp.Failed(fabric.CQErrEntry{CQEntry: fabric.CQEntry{Context: u.Ctx, Flags: m.Flags()}, Err: fabric.ErrIO})
		}
		return true
	})
}

func (r *Endpoint) post(u Recv) error {
	r.Mu.Lock()
	defer r.Mu.Unlock()
	if r.closed {
		return fabric.Errorf("fi_recv", fabric.ErrBadFD, "endpoint closed")
	}
	if m, ok := r.q.Post(u); ok {
		r.complete(u, m)
	}
	return nil
}

// Recv posts a receive (fi_recv).
func (r *Endpoint) Recv(buf []byte, desc any, src fabric.Addr, context any) error {
	return r.post(Recv{Buf: buf, Desc: desc, Src: src, Ctx: context})
}

// TRecv posts a tagged receive (fi_trecv).
func (r *Endpoint) TRecv(buf []byte, desc any, src fabric.Addr, tag, ignore uint64, context any) error {
	return r.post(Recv{Buf: buf, Desc: desc, Src: src, Tagged: true, Tag: tag, Ignore: ignore, Ctx: context})
}
