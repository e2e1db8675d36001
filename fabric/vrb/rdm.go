package vrb

import (
	"errors"

	"github.com/rdmago/rdmago/fabric"
	"github.com/rdmago/rdmago/fabric/internal/rxm"
)

// FI_EP_RDM as libfabric 1.17's verbs;ofi_rxm: reliable messages to any
// peer of the AV over RC connections this provider makes through
// rdma_cm on the first send to a peer, each message a SEND with rxm's
// 64-byte header in front:
//   - up to 16 KiB at once (eager);
//   - up to 128 KiB in segments of 16 KiB (SAR: each segment a SEND with
//     its number, the message's id and FIRST, MIDDLE or LAST);
//   - larger by rendezvous: the sender registers the message for remote
//     read and sends its virtual address and key; the receiver reads it
//     with RDMA READ and says so with a "read done".
//
// The connection data is rxm's (port, connection index, eager limit)
// behind the verbs provider's one-byte length. This endpoint offers its
// peers no credit-based flow control (rxm's FLOW_CTRL_PEER_OFF), which
// rxm accepts by not counting credits either; receive buffers stay
// posted, and a sender that outruns them is held back by RC's RNR
// retries.

const (
	rdmRxBufs   = 32                          // receive buffers posted per connection
	rdmTxSlots  = 64                          // registered send buffers of the endpoint
	rdmSlotLen  = rxm.PktLen + rxm.EagerLimit // a packet of the largest eager message
	rdmInject   = 192                         // C's inject_size
	rdmSize     = 2048                        // C's tx and rx size
	rdmRxSizeCM = rdmRxBufs                   // the rx_size the connection data announces
	rdmTagBits  = uint64(0xaaaaaaaaaaaaaaaa)  // mem_tag_format, as C's
)

// rdmTemplate is the fi_info of C's verbs;ofi_rxm entry for a device
// address.
func rdmTemplate(x devAddr) *fabric.Info {
	i := template(x)
	caps := fabric.CapMsg | fabric.CapRMA | fabric.CapTagged | fabric.CapRead | fabric.CapWrite | fabric.CapRecv | fabric.CapSend |
		fabric.CapRemoteRead | fabric.CapRemoteWrite | fabric.CapLocalComm | fabric.CapRemoteComm
	i.Caps, i.Mode = caps, 0
	i.TxAttr.Caps = fabric.CapMsg | fabric.CapRMA | fabric.CapTagged | fabric.CapRead | fabric.CapWrite | fabric.CapSend
	i.TxAttr.CompOrder, i.TxAttr.InjectSize, i.TxAttr.Size = 0, rdmInject, rdmSize
	i.RxAttr.Caps = fabric.CapMsg | fabric.CapRMA | fabric.CapTagged | fabric.CapRecv | fabric.CapRemoteRead | fabric.CapRemoteWrite
	i.RxAttr.Mode, i.RxAttr.CompOrder, i.RxAttr.Size = 0, 0, rdmSize
	i.EPAttr.Type, i.EPAttr.Protocol, i.EPAttr.MemTagFormat = fabric.EPRDM, fabric.ProtoRXM, rdmTagBits
	i.DomainAttr.DataProgress = fabric.ProgressManual
	i.DomainAttr.CQCnt, i.DomainAttr.EPCnt, i.DomainAttr.TxCtxCnt, i.DomainAttr.RxCtxCnt = 65536, 32768, 1, 1
	i.DomainAttr.MaxEPTxCtx, i.DomainAttr.MaxEPRxCtx = 1, 1
	i.FabricAttr.ProvName = Name + ";ofi_rxm"
	return i
}

// sarLimit is C's default FI_OFI_RXM_SAR_LIMIT: messages up to it go in
// segments, larger ones by rendezvous.
const sarLimit = 8 * rxm.EagerLimit

// Contexts of the connections' operations.
type (
	txOp struct { // a packet this endpoint sent
		slot int
		user *userSend // the program's send it is part of, or nil
		rndv uint64    // the rendezvous it asks for, or 0
	}
	userSend struct {
		ctx    any
		flags  uint64
		length uint64
		comp   bool
		left   int // packets not yet completed
	}
)

// rdmWire is the verbs provider's part of an RDM endpoint
// (rxm.Transport): registered send buffers (slots) and receive buffers,
// and how a message goes: eager, in segments or by rendezvous.
type rdmWire struct {
	r    *rxm.Endpoint
	tx   []byte
	txMR *fabric.MR
	free []int
}

func newRDM(d fabric.DomainRef, info *fabric.Info, _ any) (*rxm.Endpoint, error) {
	w := &rdmWire{}
	w.r = rxm.New(w, rxm.Config{InjectSize: rdmInject, RxSize: rdmRxSizeCM, RegisterReads: true}, d, info)
	return w.r, nil
}

// Listen registers the send buffers and starts the listener peers
// connect to.
func (w *rdmWire) Listen(info *fabric.Info, eq *fabric.EQ) (fabric.PassiveEndpointDriver, error) {
	tx := make([]byte, rdmTxSlots*rdmSlotLen)
	mr, err := w.r.D.RegMR(tx, fabric.AccessSend, 0)
	if err != nil {
		return nil, err
	}
	pe, err := provider{}.PassiveEndpoint(w.r.D.Fabric, info, nil)
	if err != nil {
		mr.Close()
		return nil, err
	}
	p := pe.(*pep)
	err = p.Bind(eq)
	if err == nil {
		err = p.Listen()
	}
	if err != nil {
		p.Close()
		mr.Close()
		return nil, err
	}
	w.tx, w.txMR, w.free = tx, mr, nil
	for i := rdmTxSlots - 1; i >= 0; i-- {
		w.free = append(w.free, i)
	}
	return p, nil
}

func (w *rdmWire) Open(info *fabric.Info) (fabric.EndpointDriver, error) {
	return provider{}.Endpoint(w.r.D, info, nil)
}

// Attach enables a connection's endpoint and posts its receive buffers,
// registered together.
func (w *rdmWire) Attach(c *rxm.Conn) error {
	if err := c.EP.Enable(); err != nil {
		return err
	}
	bufs := make([]byte, rdmRxBufs*rdmSlotLen)
	mr, err := w.r.D.RegMR(bufs, fabric.AccessRecv, 0)
	if err != nil {
		return err
	}
	c.Ext = mr
	for i := range rdmRxBufs {
		b := &rxm.RxBuf{C: c, Buf: bufs[i*rdmSlotLen : (i+1)*rdmSlotLen : (i+1)*rdmSlotLen], Desc: mr.Desc()}
		c.EP.Recv(b.Buf, b.Desc, fabric.AddrNotAvail, b)
	}
	return nil
}

// Detach releases the receive buffers' registration.
func (w *rdmWire) Detach(c *rxm.Conn) {
	if mr, ok := c.Ext.(*fabric.MR); ok {
		mr.Close()
	}
}

func (w *rdmWire) Close() {
	if w.txMR != nil {
		w.txMR.Close()
	}
}

func (w *rdmWire) Completion(e fabric.CQEntry) bool {
	x, ok := e.Context.(*txOp)
	if !ok {
		return false
	}
	w.free = append(w.free, x.slot)
	if u := x.user; u != nil {
		if u.left--; u.left == 0 {
			if u.comp {
				w.r.Comp.Done(fabric.CQEntry{Context: u.ctx, Flags: u.flags, Len: u.length})
			} else {
				w.r.Comp.Count(u.flags)
			}
		}
	}
	return true
}

func (w *rdmWire) Failure(ee fabric.CQErrEntry) bool {
	x, ok := ee.Context.(*txOp)
	if !ok {
		return false
	}
	w.free = append(w.free, x.slot)
	if x.rndv != 0 {
		w.r.FailRndv(x.rndv, ee.Err)
	}
	if u := x.user; u != nil && u.left > 0 {
		u.left = 0 // the first failure reports; the rest are quiet
		if u.comp {
			w.r.Comp.Failed(fabric.CQErrEntry{CQEntry: fabric.CQEntry{Context: u.ctx, Flags: u.flags}, Err: ee.Err})
		}
	}
	return true
}

// slot is a registered send buffer taken for one packet.
type slot struct {
	i   int
	pkt []byte
}

// take reserves n send buffers; false if there are not so many free.
// Called with Mu held.
func (w *rdmWire) take(n int) ([]slot, bool) {
	if len(w.free) < n {
		return nil, false
	}
	out := make([]slot, n)
	for k := range out {
		i := w.free[len(w.free)-1]
		w.free = w.free[:len(w.free)-1]
		out[k] = slot{i: i, pkt: w.tx[i*rdmSlotLen : (i+1)*rdmSlotLen]}
	}
	return out, true
}

// fill writes a packet into s.
func (s *slot) fill(p *rxm.Pkt, body []byte) {
	p.Marshal(s.pkt)
	n := copy(s.pkt[rxm.PktLen:], body)
	s.pkt = s.pkt[:rxm.PktLen+n]
}

// postSlot sends the packet in s over c, its connection index set; user
// is the program's send it is part of, rndv the rendezvous it asks for.
// A packet the connection's queue has no room for waits (rxm's Later);
// one that cannot go (no connection, a broken one) gives its slot back
// and fails what it was part of. Called with Mu held.
func (w *rdmWire) postSlot(c *rxm.Conn, s slot, user *userSend, rndv uint64) {
	w.r.Later(func() bool {
		if w.r.Live(c) {
			rxm.SetConnID(s.pkt, c.PeerIdx)
			err := c.EP.Send(s.pkt, w.txMR.Desc(), fabric.AddrNotAvail, &txOp{slot: s.i, user: user, rndv: rndv})
			if err == nil {
				return true
			}
			if errors.Is(err, fabric.ErrAgain) {
				return false
			}
		}
		w.free = append(w.free, s.i)
		if rndv != 0 {
			w.r.FailRndv(rndv, fabric.ErrConnRefused)
		}
		if user != nil && user.left > 0 {
			user.left = 0
			if user.comp {
				w.r.Comp.Failed(fabric.CQErrEntry{CQEntry: fabric.CQEntry{Context: user.ctx, Flags: user.flags}, Err: fabric.ErrConnRefused})
			}
		}
		return true
	})
}

// SendCtrl sends a control packet with no body of the program's, when a
// send slot is free. Called with Mu held.
func (w *rdmWire) SendCtrl(c *rxm.Conn, p *rxm.Pkt) {
	w.r.Later(func() bool {
		s, ok := w.take(1)
		if !ok {
			return false
		}
		s[0].fill(p, nil)
		w.postSlot(c, s[0], nil, 0)
		return true
	})
}

// Send sends a message over c: eager, in segments, or by rendezvous.
// The data is copied into registered send buffers before it returns.
func (w *rdmWire) Send(c *rxm.Conn, m rxm.Out) error {
	r := w.r
	buf, data, tag, cflags := m.Buf, m.Data, m.Tag, m.CompFlags
	h := rxm.Pkt{Size: uint64(len(buf)), Data: data, Tag: tag}
	if m.Tagged {
		h.Op = rxm.OpTagged
	}
	if m.Flags&fabric.FlagRemoteCQData != 0 {
		h.Flags = rxm.FlagRemoteCQData
	}
	u := &userSend{ctx: m.Ctx, flags: cflags, length: uint64(len(buf)), comp: !m.Inject}
	switch {
	case len(buf) <= sarLimit:
		n := max(1, (len(buf)+rxm.EagerLimit-1)/rxm.EagerLimit)
		slots, ok := w.take(n)
		if !ok {
			r.PumpLocked()
			if slots, ok = w.take(n); !ok {
				return fabric.ErrAgain
			}
		}
		u.left = n
		if n == 1 {
			h.Ctrl = rxm.CtrlEager
			slots[0].fill(&h, buf)
		} else {
			h.Ctrl, h.MsgID = rxm.CtrlSeg, r.NextMsgID()
			for i := range slots {
				seg := buf[i*rxm.EagerLimit : min(len(buf), (i+1)*rxm.EagerLimit)]
				p := h
				p.SegSize, p.SegNo, p.CtrlData = uint16(len(seg)), uint32(i), rxm.SegMiddle
				switch i {
				case 0:
					p.CtrlData = rxm.SegFirst
				case n - 1:
					p.CtrlData = rxm.SegLast
				}
				slots[i].fill(&p, seg)
			}
		}
		c.Queue(func(c *rxm.Conn, _ fabric.Errno) {
			for _, s := range slots {
				w.postSlot(c, s, u, 0)
			}
		})
		return nil
	case m.Inject:
		return fabric.Errorf(m.Op, fabric.ErrMsgSize, "inject over the inject size")
	}
	// Rendezvous: the peer reads buf through a registration of ours.
	slots, ok := w.take(1)
	if !ok {
		return fabric.ErrAgain
	}
	mr, err := r.D.RegMR(buf, fabric.AccessRemoteRead, 0)
	if err != nil {
		w.free = append(w.free, slots[0].i)
		return err
	}
	id := r.NextMsgID()
	r.AddRndv(id, &rxm.RndvSend{C: c, Ctx: m.Ctx, Flags: cflags, Length: uint64(len(buf)), MR: mr})
	h.Ctrl, h.MsgID = rxm.CtrlRndvReq, id
	slots[0].fill(&h, rxm.RndvHdr([]rxm.IOV{{Addr: mr.Addr(), Len: uint64(len(buf)), Key: mr.Key()}}))
	c.Queue(func(c *rxm.Conn, _ fabric.Errno) {
		if s := r.Rndv(id); s != nil && c != nil {
			s.C = c // (the connection it goes over may be the peer's)
		}
		w.postSlot(c, slots[0], nil, id)
	})
	return nil
}
