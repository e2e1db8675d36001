// Package prov holds what fabric's providers (tcp, verbs) do the same
// way: the bind calls of their endpoints, and the addresses fi_getinfo
// gives the entries it returns.
package prov

import (
	"net/netip"
	"sync"

	"github.com/rdmago/rdmago/fabric"
)

// BindEQ binds eq into *dst under mu (fi_ep_bind or fi_pep_bind with an
// EQ).
func BindEQ(mu sync.Locker, dst **fabric.EQ, eq *fabric.EQ) error {
	mu.Lock()
	defer mu.Unlock()
	*dst = eq
	return nil
}

// BindCQ binds cq for the directions flags names into c under mu
// (fi_ep_bind with a CQ); p is the endpoint the CQ progresses.
func BindCQ(mu sync.Locker, c *fabric.Completions, cq *fabric.CQ, flags uint64, p fabric.Progressor) error {
	mu.Lock()
	defer mu.Unlock()
	return c.BindCQ(cq, flags, p)
}

// BindCounter binds a counter for the operations flags names into c
// under mu (fi_ep_bind with a counter).
func BindCounter(mu sync.Locker, c *fabric.Completions, cn *fabric.Counter, flags uint64, p fabric.Progressor) error {
	mu.Lock()
	defer mu.Unlock()
	return c.BindCounter(cn, flags, p)
}

// Addrs gives an fi_getinfo entry of a local address its addresses, as
// fi_getinfo's node, service, flags and hints ask: with FI_SOURCE the
// node and service are the source (local at port); without, a node
// names the destination (nodeAddr at port); a source address in the
// hints keeps its port on the local address.
func Addrs(i *fabric.Info, local netip.Addr, node, service string, nodeAddr netip.Addr, port uint16, flags uint64, hints *fabric.Info) *fabric.Info {
	if flags&fabric.FlagSource != 0 && (node != "" || service != "") {
		i.SrcAddr = netip.AddrPortFrom(local, port)
	} else if flags&fabric.FlagSource == 0 && nodeAddr.IsValid() {
		i.DestAddr = netip.AddrPortFrom(nodeAddr, port)
	}
	if hints != nil && hints.SrcAddr.IsValid() {
		i.SrcAddr = netip.AddrPortFrom(local, hints.SrcAddr.Port())
	}
	return i
}

// NoTagged gives a connected (FI_EP_MSG) endpoint the tagged calls, which
// the tcp and verbs providers' MSG endpoints do not have, as in C: each
// fails with ErrNotSupported. Providers embed it.
type NoTagged struct{}

func noTagged(op string) error {
	return fabric.Errorf(op, fabric.ErrNotSupported, "FI_EP_MSG endpoints have no tagged messages (FI_TAGGED); FI_EP_RDM endpoints do")
}

func (NoTagged) TRecv([]byte, any, fabric.Addr, uint64, uint64, any) error {
	return noTagged("fi_trecv")
}
func (NoTagged) TSend([]byte, any, fabric.Addr, uint64, any) error { return noTagged("fi_tsend") }
func (NoTagged) TSendMsg(*fabric.Msg, uint64, uint64) error        { return noTagged("fi_tsendmsg") }
func (NoTagged) TInject([]byte, fabric.Addr, uint64) error         { return noTagged("fi_tinject") }

// Closing marks *closed under mu and reports whether this call is the
// one that closed it: the first of an object's Close calls.
func Closing(mu sync.Locker, closed *bool) bool {
	mu.Lock()
	defer mu.Unlock()
	if *closed {
		return false
	}
	*closed = true
	return true
}

// GetOpt answers fi_getopt for a connected endpoint whose connection
// data holds up to cmDataSize bytes: FI_OPT_CM_DATA_SIZE is the one
// option, as in C's tcp and verbs providers.
func GetOpt(opt fabric.Opt, cmDataSize int) (int, error) {
	if opt == fabric.OptCMDataSize {
		return cmDataSize, nil
	}
	return 0, fabric.Errorf("fi_getopt", fabric.ErrNoProtoOpt, "")
}

// SetOpt answers fi_setopt: there is nothing to set.
func SetOpt(fabric.Opt, int) error { return fabric.Errorf("fi_setopt", fabric.ErrNoProtoOpt, "") }
