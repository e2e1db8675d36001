package rxm

import "net/netip"

// Clash is what an RDM endpoint does with a connection request from a
// peer it already has a connection, or a request of its own, to
// (rxm_process_connreq).
type Clash int

const (
	// Replace: drop ours and accept theirs; what waited on ours goes
	// over theirs.
	Replace Clash = iota
	// RefuseAlready: refuse theirs with RejectAlready; ours goes on.
	RefuseAlready
	// Loopback: the request is our own, to ourselves: accept it as the
	// far end of a loopback connection, beside ours.
	Loopback
)

// ResolveClash decides as C's rxm does. ready and oldPID describe our
// existing connection to the peer (up, and the peer's process id it
// announced); reqPID is the request's; peer and self are the peer's name
// (its address and listening port) and ours. Requests that cross are
// settled by address: the lower one gives way.
func ResolveClash(ready bool, oldPID, reqPID uint64, peer, self netip.AddrPort) Clash {
	peer = netip.AddrPortFrom(peer.Addr().Unmap(), peer.Port())
	self = netip.AddrPortFrom(self.Addr().Unmap(), self.Port())
	switch cmp := peer.Compare(self); {
	case ready && oldPID != reqPID:
		return Replace // a new process at the peer's address
	case ready, cmp < 0:
		return RefuseAlready
	case cmp > 0:
		return Replace
	}
	return Loopback
}
