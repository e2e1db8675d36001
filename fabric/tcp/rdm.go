package tcp

import (
	"github.com/rdmago/rdmago/fabric"
	"github.com/rdmago/rdmago/fabric/internal/rxm"
	"github.com/rdmago/rdmago/fabric/internal/sockpep"
)

// FI_EP_RDM as libfabric 1.17's tcp;ofi_rxm: reliable messages to any
// peer of the AV over tcp connections made on the first send, each
// message framed with rxm's 64-byte packet header; up to 16 KiB sent at
// once (eager), larger ones by rendezvous: the receiver reads the data
// from the sender's memory with an RMA read and tells it when done.
// Tagged messages up to the eager limit go as raw tagged tcp frames, as
// C's rxm sends them. The endpoint is rxm.Endpoint; what is tcp's is
// here: how a message goes on the wire, and a connection's receive
// buffers, which need no registration.

const (
	rxmRxSize     = 4096
	rxmInjectSize = 64
	rxmBufs       = 16 // receive buffers posted per connection
	rxmKeyBase    = 0x80000000

	rxmPktLen  = rxm.PktLen
	eagerLimit = rxm.EagerLimit
)

// Internal contexts of the connections' operations.
type (
	txUser struct { // an eager send the program made
		ctx    any
		flags  uint64
		length uint64
		comp   bool
	}
	txInternal struct{} // a control packet or a rendezvous request
)

// rdmWire is the tcp provider's part of an RDM endpoint (rxm.Transport).
type rdmWire struct {
	r       *rxm.Endpoint
	nextKey uint64
}

func newRDM(d fabric.DomainRef, info *fabric.Info, _ any) (*rxm.Endpoint, error) {
	w := &rdmWire{}
	w.r = rxm.New(w, rxm.Config{InjectSize: rxmInjectSize, RxSize: rxmRxSize}, d, info)
	return w.r, nil
}

func (w *rdmWire) Listen(info *fabric.Info, eq *fabric.EQ) (fabric.PassiveEndpointDriver, error) {
	p := &pep{info: info, Listener: sockpep.New(info)}
	if err := p.Bind(eq); err != nil {
		return nil, err
	}
	if err := p.Listen(); err != nil {
		return nil, err
	}
	return p, nil
}

func (w *rdmWire) Open(info *fabric.Info) (fabric.EndpointDriver, error) {
	return provider{}.Endpoint(w.r.D, info, nil)
}

// Attach posts the connection's receive buffers. The peer's reads of
// rendezvous regions are rxm's, not the program's: the remote-read
// counter leaves them out.
func (w *rdmWire) Attach(c *rxm.Conn) error {
	e := c.EP.(*ep)
	e.internalKey = func(key uint64) bool { return key&rxmKeyBase == rxmKeyBase }
	for _, b := range []uint64{fabric.BindRemoteRead, fabric.BindRemoteWrite} {
		if cn := w.r.Comp.Counter(b); cn != nil {
			e.BindCounter(cn, b)
		}
	}
	for range rxmBufs {
		b := &rxm.RxBuf{C: c, Buf: make([]byte, rxmPktLen+eagerLimit)}
		e.Recv(b.Buf, nil, fabric.AddrNotAvail, b)
	}
	return nil
}

func (w *rdmWire) Detach(*rxm.Conn) {}
func (w *rdmWire) Close()           {}

// SendCtrl sends a control packet over c.
func (w *rdmWire) SendCtrl(c *rxm.Conn, p *rxm.Pkt) {
	if !w.r.Live(c) {
		return
	}
	var b [rxmPktLen]byte
	p.ConnID = c.PeerIdx
	p.Marshal(b[:])
	c.EP.(*ep).send(b[:], 0, &txInternal{}, fabric.FlagCompletion)
}

func (w *rdmWire) Completion(e fabric.CQEntry) bool {
	switch x := e.Context.(type) {
	case *txUser:
		if x.comp {
			w.r.Comp.Done(fabric.CQEntry{Context: x.ctx, Flags: x.flags, Len: x.length})
		} else {
			w.r.Comp.Count(x.flags) // an inject
		}
	case *txInternal:
	default:
		return false
	}
	return true
}

func (w *rdmWire) Failure(ee fabric.CQErrEntry) bool {
	switch x := ee.Context.(type) {
	case *txUser:
		if x.comp {
			w.r.Comp.Failed(fabric.CQErrEntry{CQEntry: fabric.CQEntry{Context: x.ctx, Flags: x.flags}, Err: ee.Err})
		}
	case *txInternal:
	default:
		return false
	}
	return true
}

// Send sends a message over c: eager, raw tagged or rendezvous.
func (w *rdmWire) Send(c *rxm.Conn, m rxm.Out) error {
	r := w.r
	buf, tag, data, flags, context, cflags := m.Buf, m.Tag, m.Data, m.Flags, m.Ctx, m.CompFlags
	if m.Inject {
		buf = append([]byte(nil), buf...)
	}
	t := &txUser{ctx: context, flags: cflags, length: uint64(len(buf)), comp: !m.Inject}
	// failed reports a send that never went.
	failed := func(errno fabric.Errno) {
		if t.comp {
			r.Comp.Failed(fabric.CQErrEntry{CQEntry: fabric.CQEntry{Context: context, Flags: cflags}, Err: errno})
		}
	}
	switch {
	case len(buf) <= eagerLimit && m.Tagged:
		fl := fabric.FlagCompletion | flags&(fabric.FlagRemoteCQData|fabric.FlagTransmitComplete|fabric.FlagDeliveryComplete)
		c.Queue(func(c *rxm.Conn, errno fabric.Errno) {
			if c == nil {
				failed(errno)
				return
			}
			c.EP.(*ep).sendFrame(buf, data, t, fl, true, tag)
		})
	case len(buf) <= eagerLimit:
		pkt := make([]byte, rxmPktLen+len(buf))
		h := rxm.Pkt{Ctrl: rxm.CtrlEager, Size: uint64(len(buf)), Data: data}
		if flags&fabric.FlagRemoteCQData != 0 {
			h.Flags = rxm.FlagRemoteCQData
		}
		copy(pkt[rxmPktLen:], buf)
		fl := fabric.FlagCompletion | flags&(fabric.FlagTransmitComplete|fabric.FlagDeliveryComplete)
		c.Queue(func(c *rxm.Conn, errno fabric.Errno) {
			if c == nil {
				failed(errno)
				return
			}
			h.ConnID = c.PeerIdx // known once connected
			h.Marshal(pkt)
			c.EP.(*ep).send(pkt, 0, t, fl)
		})
	default:
		// Rendezvous: the peer reads buf through a region of our own.
		w.nextKey++
		mr, err := r.D.RegMR(buf, fabric.AccessRemoteRead, rxmKeyBase|w.nextKey)
		if err != nil {
			return err
		}
		id := r.NextMsgID()
		r.AddRndv(id, &rxm.RndvSend{C: c, Ctx: context, Flags: cflags, Length: uint64(len(buf)), MR: mr})
		// addr 0: the region is named by offset.
		pkt := append(make([]byte, rxmPktLen), rxm.RndvHdr([]rxm.IOV{{Addr: 0, Len: uint64(len(buf)), Key: mr.Key()}})...)
		h := rxm.Pkt{Ctrl: rxm.CtrlRndvReq, MsgID: id, Size: uint64(len(buf)), Data: data, Tag: tag}
		if m.Tagged {
			h.Op = rxm.OpTagged
		}
		if flags&fabric.FlagRemoteCQData != 0 {
			h.Flags = rxm.FlagRemoteCQData
		}
		c.Queue(func(c *rxm.Conn, errno fabric.Errno) {
			if c == nil {
				r.FailRndv(id, errno)
				return
			}
			if s := r.Rndv(id); s != nil {
				s.C = c // (the connection it goes over may be the peer's)
			}
			h.ConnID = c.PeerIdx
			h.Marshal(pkt)
			c.EP.(*ep).send(pkt, 0, &txInternal{}, fabric.FlagCompletion)
		})
	}
	return nil
}
