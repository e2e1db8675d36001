package rxm

import (
	"net/netip"
	"strconv"
	"sync"

	"github.com/rdmago/rdmago/fabric"
)

// SendFunc is an RDM endpoint's one way of sending a message: op names
// the call for errors; tagged, tag, data and flags (FlagInject,
// FlagRemoteCQData, completion flags) are the call's.
type SendFunc func(op string, buf []byte, dest fabric.Addr, tagged bool, tag, data uint64, ctx any, flags uint64) error

// Sends gives an RDM endpoint fabric.EndpointDriver's send calls (fi_send,
// fi_senddata, fi_inject, fi_sendmsg and their tagged forms), each a call
// of To; an inject longer than InjectSize fails with ErrMsgSize. It also
// answers the calls of connected endpoints, which an RDM endpoint does
// not have. Providers embed it.
type Sends struct {
	To         SendFunc
	InjectSize int
}

func (s *Sends) Send(buf []byte, desc any, dest fabric.Addr, context any) error {
	return s.To("fi_send", buf, dest, false, 0, 0, context, 0)
}

func (s *Sends) SendData(buf []byte, desc any, data uint64, dest fabric.Addr, context any) error {
	return s.To("fi_senddata", buf, dest, false, 0, data, context, fabric.FlagRemoteCQData)
}

func (s *Sends) Inject(buf []byte, dest fabric.Addr) error {
	if err := s.injectFits("fi_inject", buf); err != nil {
		return err
	}
	return s.To("fi_inject", buf, dest, false, 0, 0, nil, fabric.FlagInject)
}

func (s *Sends) SendMsg(m *fabric.Msg, flags uint64) error {
	return s.To("fi_sendmsg", m.Buf, m.Addr, false, 0, m.Data, m.Context, flags)
}

func (s *Sends) TSend(buf []byte, desc any, dest fabric.Addr, tag uint64, context any) error {
	return s.To("fi_tsend", buf, dest, true, tag, 0, context, 0)
}

func (s *Sends) TSendMsg(m *fabric.Msg, tag uint64, flags uint64) error {
	return s.To("fi_tsendmsg", m.Buf, m.Addr, true, tag, m.Data, m.Context, flags)
}

func (s *Sends) TInject(buf []byte, dest fabric.Addr, tag uint64) error {
	if err := s.injectFits("fi_tinject", buf); err != nil {
		return err
	}
	return s.To("fi_tinject", buf, dest, true, tag, 0, nil, fabric.FlagInject)
}

func (s *Sends) injectFits(op string, buf []byte) error {
	if len(buf) > s.InjectSize {
		return fabric.Errorf(op, fabric.ErrMsgSize, "inject of more than "+strconv.Itoa(s.InjectSize)+" bytes")
	}
	return nil
}

// Connect, Accept, Shutdown and Peer: an RDM endpoint connects to its
// peers by itself.
func (s *Sends) Connect(netip.AddrPort, []byte) error {
	return fabric.Errorf("fi_connect", fabric.ErrNotSupported, "an FI_EP_RDM endpoint connects to its peers by itself")
}

func (s *Sends) Accept([]byte) error {
	return fabric.Errorf("fi_accept", fabric.ErrNotSupported, "an FI_EP_RDM endpoint accepts its peers by itself")
}

func (s *Sends) Shutdown() error { return nil }

func (s *Sends) Peer() (netip.AddrPort, error) {
	return netip.AddrPort{}, fabric.Errorf("fi_getpeer", fabric.ErrNotConn, "an FI_EP_RDM endpoint has no one peer")
}

// GetOpt and SetOpt: no options.
func (s *Sends) GetOpt(fabric.Opt) (int, error) {
	return 0, fabric.Errorf("fi_getopt", fabric.ErrNoProtoOpt, "")
}

func (s *Sends) SetOpt(fabric.Opt, int) error {
	return fabric.Errorf("fi_setopt", fabric.ErrNoProtoOpt, "")
}

// Binds gives an RDM endpoint its bind calls (fi_ep_bind with an EQ, an
// AV, a CQ or a counter) and fi_enable's check that they were made.
// Providers embed it, hold Mu whenever they use AV or Comp, and set Self
// to the endpoint, which the bound CQs and counters then progress.
type Binds struct {
	Mu   sync.Mutex
	AV   *fabric.AV
	Comp fabric.Completions
	Self fabric.Progressor
}

// BindEQ accepts an EQ: an RDM endpoint reports no connection events.
func (b *Binds) BindEQ(*fabric.EQ) error { return nil }

func (b *Binds) BindAV(av *fabric.AV) error {
	b.Mu.Lock()
	defer b.Mu.Unlock()
	b.AV = av
	return nil
}

func (b *Binds) BindCQ(cq *fabric.CQ, flags uint64) error {
	b.Mu.Lock()
	defer b.Mu.Unlock()
	return b.Comp.BindCQ(cq, flags, b.Self)
}

// BindCounter binds a counter for the operations flags names.
func (b *Binds) BindCounter(c *fabric.Counter, flags uint64) error {
	b.Mu.Lock()
	defer b.Mu.Unlock()
	return b.Comp.BindCounter(c, flags, b.Self)
}

// Bound checks, with Mu held, that an AV and CQs for both directions are
// bound, as fi_enable requires of an RDM endpoint.
func (b *Binds) Bound() error {
	if b.AV == nil || b.Comp.TxCQ == nil || b.Comp.RxCQ == nil {
		return fabric.Errorf("fi_enable", fabric.ErrNoAV, "bind an AV and CQs first")
	}
	return nil
}
