package rdmacm

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"strconv"
	"time"

	"github.com/rdmago/rdmago/verbs"
)

// AIFlags are the flags of an AddrInfo (the RAI_* values of
// rdma_addrinfo.ai_flags).
type AIFlags int

// Address information flags, with librdmacm's values.
const (
	// RAIPassive asks for an address to listen on (RAI_PASSIVE): the
	// result's SrcAddr is set, and no node means every address.
	RAIPassive AIFlags = 0x1
	// RAINumericHost says the node is a numeric address and must not be
	// looked up (RAI_NUMERICHOST).
	RAINumericHost AIFlags = 0x2
	// RAINoRoute asks for no route information (RAI_NOROUTE). On RoCE
	// routes are never looked up here, so it changes nothing.
	RAINoRoute AIFlags = 0x4
	// RAIFamily says the hints' Family is to be used (RAI_FAMILY).
	RAIFamily AIFlags = 0x8
)

// Address families of AddrInfo.Family (the AF_* values of Linux).
const (
	AFUnspec = 0  // AF_UNSPEC: any family
	AFInet   = 2  // AF_INET: IPv4
	AFInet6  = 10 // AF_INET6: IPv6
	AFIB     = 27 // AF_IB: native InfiniBand addresses, not used on RoCE
)

// AddrInfo is address information for the connection manager (struct
// rdma_addrinfo): where to connect or listen, and with which QP type and
// port space.
type AddrInfo struct {
	Flags     AIFlags      // ai_flags: RAIPassive etc.
	Family    int          // ai_family: AFInet or AFInet6 in results; a filter in hints
	QPType    verbs.QPType // ai_qp_type: RC unless hints ask for another
	PortSpace PortSpace    // ai_port_space: PSTCP for RC and UC, PSUDP for UD
	// SrcAddr is the local address (ai_src_addr): the address to listen on
	// for a passive result, and the source hints asked for otherwise
	// (zero: chosen by address resolution).
	SrcAddr netip.AddrPort
	// DstAddr is the peer's address (ai_dst_addr) for an active result.
	DstAddr netip.AddrPort
	// SrcCanonName and DstCanonName are the names the addresses were
	// looked up under (ai_src_canonname, ai_dst_canonname), if any.
	SrcCanonName string
	DstCanonName string
}

// String formats the address information for a person.
func (ai *AddrInfo) String() string {
	s := fmt.Sprintf("flags %#x family %d %v %v", int(ai.Flags), ai.Family, ai.QPType, ai.PortSpace)
	if ai.SrcAddr.IsValid() {
		s += " src " + ai.SrcAddr.String()
	}
	if ai.DstAddr.IsValid() {
		s += " dst " + ai.DstAddr.String()
	}
	return s
}

// resolveTimeout bounds a name lookup of GetAddrInfo.
const resolveTimeout = 10 * time.Second

// GetAddrInfo resolves node and service into address information for the
// connection manager (rdma_getaddrinfo).
//
// node is a host name or a numeric IPv4 or IPv6 address (names are looked
// up with net.DefaultResolver unless hints have RAINumericHost); service is
// a port number or a service name. With RAIPassive in hints the results
// are addresses to listen on (SrcAddr), and an empty node means every
// address; otherwise they are addresses to connect to (DstAddr), an empty
// node means the loopback address, and hints' SrcAddr is copied into each
// result. If node and service are both empty, the result is built from
// hints alone, as in C.
//
// hints may be nil. Its QPType and PortSpace default to RC and PSTCP (UD
// and PSUDP go together), and its Family, with RAIFamily or on its own,
// keeps only addresses of that family.
//
// librdmacm returns only the first address getaddrinfo finds; GetAddrInfo
// returns them all, in the resolver's order. rdma_freeaddrinfo has no
// counterpart: the results are ordinary Go values.
func GetAddrInfo(node, service string, hints *AddrInfo) ([]*AddrInfo, error) {
	if node == "" && service == "" && hints == nil {
		return nil, verbs.Errorf("rdma_getaddrinfo", verbs.ErrInvalidArgument, "no node, service or hints")
	}
	var h AddrInfo
	if hints != nil {
		h = *hints
	}
	if h.Family != AFUnspec && h.Family != AFInet && h.Family != AFInet6 {
		if h.Family == AFIB {
			return nil, verbs.Errorf("rdma_getaddrinfo", verbs.ErrNotSupported, "AF_IB addresses do not exist on RoCE")
		}
		return nil, verbs.Errorf("rdma_getaddrinfo", verbs.ErrInvalidArgument, "address family "+strconv.Itoa(h.Family))
	}
	qpType, ps, err := qpTypeAndPortSpace(h.QPType, h.PortSpace)
	if err != nil {
		return nil, err
	}
	base := AddrInfo{QPType: qpType, PortSpace: ps, SrcAddr: h.SrcAddr}
	if node == "" && service == "" {
		// Hints only: librdmacm copies them.
		r := base
		r.Flags, r.Family, r.DstAddr = h.Flags, h.Family, h.DstAddr
		if r.Family == AFUnspec {
			r.Family = familyOf(r.DstAddr.Addr())
			if r.Flags&RAIPassive != 0 {
				r.Family = familyOf(r.SrcAddr.Addr())
			}
		}
		return []*AddrInfo{&r}, nil
	}

	port, err := lookupPort(service, qpType)
	if err != nil {
		return nil, err
	}
	addrs, canon, err := lookupNode(node, h.Flags, h.Family)
	if err != nil {
		return nil, err
	}
	out := make([]*AddrInfo, 0, len(addrs))
	for _, a := range addrs {
		r := base
		r.Family = familyOf(a)
		ap := netip.AddrPortFrom(a, port)
		if h.Flags&RAIPassive != 0 {
			r.Flags = RAIPassive
			r.SrcAddr, r.SrcCanonName = ap, canon
		} else {
			r.DstAddr, r.DstCanonName = ap, canon
		}
		out = append(out, &r)
	}
	return out, nil
}

// qpTypeAndPortSpace fills in the QP type and port space hints leave open,
// and rejects pairs that do not go together.
func qpTypeAndPortSpace(t verbs.QPType, ps PortSpace) (verbs.QPType, PortSpace, error) {
	if t == 0 {
		t = verbs.QPTRC
		if ps == PSUDP || ps == PSIPoIB {
			t = verbs.QPTUD
		}
	}
	switch t {
	case verbs.QPTRC, verbs.QPTUC, verbs.QPTUD:
	default:
		return 0, 0, verbs.Errorf("rdma_getaddrinfo", verbs.ErrNotSupported, "QP type "+t.String())
	}
	if ps == 0 {
		ps = PSTCP
		if t == verbs.QPTUD {
			ps = PSUDP
		}
	}
	ok := false
	switch ps {
	case PSTCP:
		ok = t != verbs.QPTUD
	case PSUDP, PSIPoIB:
		ok = t == verbs.QPTUD
	case PSIB:
		ok = true
	}
	if !ok {
		return 0, 0, verbs.Errorf("rdma_getaddrinfo", verbs.ErrInvalidArgument, t.String()+" QPs do not go with "+ps.String())
	}
	return t, ps, nil
}

func familyOf(a netip.Addr) int {
	switch {
	case !a.IsValid():
		return AFUnspec
	case a.Is4():
		return AFInet
	}
	return AFInet6
}

// lookupPort turns a service into a port: a number, or a name looked up
// for TCP (connected QPs) or UDP (datagrams).
func lookupPort(service string, t verbs.QPType) (uint16, error) {
	if service == "" {
		return 0, nil
	}
	if n, err := strconv.ParseUint(service, 10, 16); err == nil {
		return uint16(n), nil
	}
	network := "tcp"
	if t == verbs.QPTUD {
		network = "udp"
	}
	ctx, cancel := context.WithTimeout(context.Background(), resolveTimeout)
	defer cancel()
	p, err := net.DefaultResolver.LookupPort(ctx, network, service)
	if err != nil {
		return 0, fmt.Errorf("rdma_getaddrinfo: service %q: %w: %w", service, verbs.ErrNoEntry, err)
	}
	return uint16(p), nil
}

// lookupNode turns a node into addresses of the wanted family, and returns
// the name they were looked up under.
func lookupNode(node string, flags AIFlags, family int) ([]netip.Addr, string, error) {
	var addrs []netip.Addr
	canon := ""
	switch {
	case node == "" && flags&RAIPassive != 0:
		addrs = []netip.Addr{netip.IPv4Unspecified(), netip.IPv6Unspecified()}
	case node == "":
		addrs = []netip.Addr{netip.AddrFrom4([4]byte{127, 0, 0, 1}), netip.IPv6Loopback()}
	default:
		if a, err := netip.ParseAddr(node); err == nil {
			addrs = []netip.Addr{a.Unmap()}
			break
		}
		if flags&RAINumericHost != 0 {
			return nil, "", verbs.Errorf("rdma_getaddrinfo", verbs.ErrInvalidArgument, "RAI_NUMERICHOST and "+strconv.Quote(node)+" is not a numeric address")
		}
		network := "ip"
		switch family {
		case AFInet:
			network = "ip4"
		case AFInet6:
			network = "ip6"
		}
		ctx, cancel := context.WithTimeout(context.Background(), resolveTimeout)
		defer cancel()
		found, err := net.DefaultResolver.LookupNetIP(ctx, network, node)
		if err != nil {
			return nil, "", fmt.Errorf("rdma_getaddrinfo: %q: %w: %w", node, verbs.ErrNoEntry, err)
		}
		for _, a := range found {
			addrs = append(addrs, a.Unmap())
		}
		canon = node
	}
	kept := addrs[:0]
	for _, a := range addrs {
		if family == AFUnspec || familyOf(a) == family {
			kept = append(kept, a)
		}
	}
	if len(kept) == 0 {
		return nil, "", verbs.Errorf("rdma_getaddrinfo", verbs.ErrNoEntry, "no address of family "+strconv.Itoa(family)+" for "+strconv.Quote(node))
	}
	return kept, canon, nil
}

// epTimeout is how long CreateEP waits for address and route resolution,
// librdmacm's 2000 ms.
const epTimeout = 2 * time.Second

// CreateEP creates a synchronous ID for res and, optionally, its QP
// (rdma_create_ep).
//
// For an active res (no RAIPassive) the ID resolves res.DstAddr from
// res.SrcAddr (if valid) and its route, waiting up to 2 s for each, and
// if qpAttr is not nil gets a QP of res.QPType on pd (nil: the ID's
// default PD) with qpAttr, which is updated with the capabilities given as
// for CreateQP. The ID is then ready for Connect.
//
// For a passive res the ID is bound to res.SrcAddr, and pd and a copy of
// qpAttr are kept: after Listen, each ID GetRequest returns gets a QP made
// with them before it is returned. The ID is then ready for Listen.
//
// The ID is synchronous: its calls block until they complete. Migrate it
// to an event channel to use it asynchronously. Destroy it with
// DestroyEP.
func CreateEP(res *AddrInfo, pd *verbs.PD, qpAttr *verbs.QPInitAttr) (*ID, error) {
	if res == nil {
		return nil, verbs.Errorf("rdma_create_ep", verbs.ErrInvalidArgument, "nil address information")
	}
	qpType, ps, err := qpTypeAndPortSpace(res.QPType, res.PortSpace)
	if err != nil {
		return nil, err
	}
	id, err := CreateID(nil, nil, ps)
	if err != nil {
		return nil, err
	}
	if res.Flags&RAIPassive != 0 {
		if err := id.BindAddr(res.SrcAddr); err != nil {
			id.Destroy()
			return nil, err
		}
		if qpAttr != nil {
			a := *qpAttr
			a.QPType = qpType
			id.SetEndpointQP(pd, &a)
		}
		return id, nil
	}
	if !res.DstAddr.IsValid() {
		id.Destroy()
		return nil, verbs.Errorf("rdma_create_ep", verbs.ErrInvalidArgument, "active address information without a destination")
	}
	if err := id.ResolveAddr(res.SrcAddr, res.DstAddr, epTimeout); err != nil {
		id.Destroy()
		return nil, err
	}
	if err := id.ResolveRoute(epTimeout); err != nil {
		id.Destroy()
		return nil, err
	}
	if qpAttr != nil {
		qpAttr.QPType = qpType
		if err := id.CreateQP(pd, qpAttr); err != nil {
			id.Destroy()
			return nil, err
		}
	}
	return id, nil
}

// DestroyEP destroys the ID's QP, if it has one, and the ID
// (rdma_destroy_ep). Memory regions registered on the ID must be
// deregistered first.
func (id *ID) DestroyEP() error {
	var errs []error
	if id.QP() != nil {
		errs = append(errs, id.DestroyQP())
	}
	errs = append(errs, id.Destroy())
	return errors.Join(errs...)
}
