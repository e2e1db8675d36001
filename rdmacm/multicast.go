package rdmacm

import (
	"errors"
	"net/netip"
	"slices"

	"github.com/rdmago/rdmago/verbs"
)

// MulticastJoinFlags say how an ID joins a group (enum
// rdma_cm_mc_join_flags).
type MulticastJoinFlags int

// Join flags, with librdmacm's values.
const (
	// JoinFullMember sends to and receives from the group
	// (RDMA_MC_JOIN_FLAG_FULLMEMBER).
	JoinFullMember MulticastJoinFlags = 0
	// JoinSendOnlyFullMember only sends to it: the ID's QP is not
	// attached, so it receives nothing
	// (RDMA_MC_JOIN_FLAG_SENDONLY_FULLMEMBER).
	JoinSendOnlyFullMember MulticastJoinFlags = 1
)

// mcastHopLimit is the hop limit of a RoCEv2 group's address vector, as
// Linux's rdma_cm gives it (IPV6_DEFAULT_HOPLIMIT).
const mcastHopLimit = 64

// MulticastQPN is the destination QP number of datagrams to a multicast
// group (0xFFFFFF), the QPNum of a MULTICAST_JOIN event.
const MulticastQPN = 0xFFFFFF

// mcGroup is a group an ID joined.
type mcGroup struct {
	addr    netip.Addr
	context any
}

// MulticastGID is the GID of multicast group addr on RoCEv2, what a
// MULTICAST_JOIN event's address vector names as DGID and what QPs attach
// to: the IPv6 group itself, or an IPv4 group mapped into IPv6
// (::ffff:239.1.1.1), as Linux's rdma_cm makes it.
func MulticastGID(addr netip.Addr) verbs.GID {
	return verbs.GIDFromAddr(addr.Unmap())
}

// JoinMulticast joins the ID to the multicast group addr as a full member
// (rdma_join_multicast): JoinMulticastEx with JoinFullMember.
func (id *ID) JoinMulticast(addr netip.Addr, context any) error {
	return id.JoinMulticastEx(addr, JoinFullMember, context)
}

// JoinMulticastEx joins the ID to the multicast group addr
// (rdma_join_multicast_ex). The ID must be in the UDP (or IPoIB) port
// space, and bound to a device: after BindAddr to a local address, or
// after ResolveAddr (which accepts a multicast destination for this). The
// outcome comes as an event whose UD.Context is context: MULTICAST_JOIN,
// whose UD holds the address vector to the group (DGID MulticastGID(addr)),
// QP number MulticastQPN and the Q_Key (UDPQKey) to send to it with; or
// MULTICAST_ERROR with a negative errno. A synchronous ID waits for it.
//
// If the ID has a QP when the join completes, and flags is not
// JoinSendOnlyFullMember, the QP is attached to the group
// (ibv_attach_mcast), as librdmacm does when it delivers the event;
// failing to attach turns the event into MULTICAST_ERROR. Joining a group
// the ID has joined already fails with EADDRINUSE, where librdmacm would
// keep two joins that one leave could not tell apart. On RoCE there is
// no subnet manager to ask: the join completes at once, and the device
// joins the IP multicast group when its first QP attaches.
func (id *ID) JoinMulticastEx(addr netip.Addr, flags MulticastJoinFlags, context any) error {
	const op = "rdma_join_multicast"
	ip := addr.Unmap()
	if !ip.IsMulticast() {
		return verbs.Errorf(op, verbs.ErrInvalidArgument, addr.String()+" is not a multicast address")
	}
	if flags != JoinFullMember && flags != JoinSendOnlyFullMember {
		return verbs.Errorf(op, verbs.ErrInvalidArgument, "bad join flags")
	}
	if id.ps != PSUDP && id.ps != PSIPoIB {
		return verbs.Errorf(op, verbs.ErrInvalidArgument, "multicast needs a datagram ID (RDMA_PS_UDP), not "+id.ps.String())
	}
	idMu.Lock()
	if id.state != stateAddrBound && id.state != stateAddrResolved {
		idMu.Unlock()
		return verbs.Errorf(op, verbs.ErrInvalidArgument, "the ID is not bound to an address (bind or resolve it first)")
	}
	k := id.b
	if k == nil || id.kdev == nil {
		idMu.Unlock()
		return verbs.Errorf(op, verbs.ErrInvalidArgument, "the ID is bound to no device (bind a local address)")
	}
	if id.local.Addr().Is4() != ip.Is4() {
		idMu.Unlock()
		return verbs.Errorf(op, verbs.ErrInvalidArgument, "group "+ip.String()+" is not of the IP version of the ID's address "+id.local.Addr().String())
	}
	if slices.ContainsFunc(id.groups, func(g *mcGroup) bool { return g.addr == ip }) {
		idMu.Unlock()
		return verbs.Errorf(op, verbs.ErrAddrInUse, "the ID has joined "+ip.String()+" already")
	}
	g := &mcGroup{addr: ip, context: context}
	id.groups = append(id.groups, g)
	idMu.Unlock()
	if err := k.JoinMulticast(ip, flags); err != nil {
		idMu.Lock()
		id.dropGroup(g)
		idMu.Unlock()
		return err
	}
	return id.wait(op, EventMulticastJoin)
}

// LeaveMulticast leaves the multicast group addr (rdma_leave_multicast),
// detaching the ID's QP from it if the join attached it. It fails with
// EADDRNOTAVAIL if the ID has not joined addr. Destroy leaves every group.
func (id *ID) LeaveMulticast(addr netip.Addr) error {
	const op = "rdma_leave_multicast"
	ip := addr.Unmap()
	idMu.Lock()
	i := slices.IndexFunc(id.groups, func(g *mcGroup) bool { return g.addr == ip })
	if i < 0 {
		idMu.Unlock()
		return verbs.Errorf(op, verbs.ErrAddrNotAvail, "the ID has not joined "+ip.String())
	}
	id.dropGroup(id.groups[i])
	k := id.b
	idMu.Unlock()
	return k.LeaveMulticast(ip)
}

// dropGroup forgets g. Called with idMu held.
func (id *ID) dropGroup(g *mcGroup) {
	id.groups = slices.DeleteFunc(id.groups, func(x *mcGroup) bool { return x == g })
}

// leaveAll leaves every group the ID joined, before it is destroyed.
func (id *ID) leaveAll() {
	idMu.Lock()
	groups := id.groups
	id.groups = nil
	k := id.b
	idMu.Unlock()
	for _, g := range groups {
		k.LeaveMulticast(g.addr)
	}
}

// groupContext returns the context of the group an ID joined, for its
// multicast events. Called with idMu held.
func (id *ID) groupContext(addr netip.Addr) any {
	for _, g := range id.groups {
		if g.addr == addr {
			return g.context
		}
	}
	return nil
}

// errnoOf is err's errno, for an event's status.
func errnoOf(err error) verbs.Errno {
	var e verbs.Errno
	if errors.As(err, &e) {
		return e
	}
	return verbs.ErrInvalidArgument
}
