package fabric

import (
	"bytes"
	"net"
	"net/netip"
	"strconv"
	"strings"
	"sync"
)

// Provider is a libfabric provider: what it offers (its fi_info entries)
// and how it opens endpoints. Programs do not call it; they call GetInfo,
// OpenFabric and the objects' methods.
type Provider interface {
	// Name is the provider's name ("tcp").
	Name() string
	// Version is the provider's version (prov_version).
	Version() Version
	// Infos lists what the provider offers for node, service and flags
	// (FI_SOURCE), most preferred first. The hints are given so that a
	// provider can leave out what cannot match (an address family it
	// does not serve); GetInfo matches every field itself.
	Infos(node, service string, flags uint64, hints *Info) ([]*Info, error)
	// PassiveEndpoint opens a listening endpoint (fi_passive_ep).
	PassiveEndpoint(f *Fabric, info *Info, context any) (PassiveEndpointDriver, error)
	// Endpoint opens an endpoint (fi_endpoint).
	Endpoint(d DomainRef, info *Info, context any) (EndpointDriver, error)
}

var registry struct {
	mu    sync.Mutex
	provs []Provider
}

// RegisterProvider makes p's entries appear in GetInfo. Providers call it
// from an init function, as verbs providers do.
func RegisterProvider(p Provider) {
	registry.mu.Lock()
	defer registry.mu.Unlock()
	registry.provs = append(registry.provs, p)
}

// Providers lists the registered providers in preference order (what
// fi_info -l lists).
func Providers() []Provider {
	registry.mu.Lock()
	defer registry.mu.Unlock()
	return append([]Provider(nil), registry.provs...)
}

// GetInfo returns the ways to reach node:service that match hints, best
// first (fi_getinfo). node and service may be empty; with FlagSource they
// name the local address to use. A nil hints matches everything. It
// fails with ErrNoData when nothing matches, as fi_getinfo returns
// -FI_ENODATA.
//
// Matching follows libfabric: the provider name (a "tcp;ofi_rxm" stack
// matches "tcp;ofi_rxm" or its first element), endpoint type, caps (the
// entry must have every hinted cap), mode (the entry may ask only for
// modes the hints allow, when the hints give any), address format,
// domain and fabric names, and the MR mode bits the hints allow.
func GetInfo(node, service string, flags uint64, hints *Info) ([]*Info, error) {
	var out []*Info
	for _, p := range Providers() {
		if hints != nil && hints.FabricAttr != nil && hints.FabricAttr.ProvName != "" && !provMatch(p.Name(), hints.FabricAttr.ProvName) {
			continue
		}
		infos, err := p.Infos(node, service, flags, hints)
		if err != nil {
			continue
		}
		for _, i := range infos {
			if hints != nil && hints.FabricAttr != nil && hints.FabricAttr.ProvName != "" && !provMatch(i.FabricAttr.ProvName, hints.FabricAttr.ProvName) {
				continue
			}
			if hints == nil || matches(i, hints) {
				i.prov = p
				out = append(out, applyHints(i, hints))
			}
		}
	}
	if len(out) == 0 {
		return nil, Errorf("fi_getinfo", ErrNoData, "")
	}
	return out, nil
}

// provMatch compares a provider name with the hint's, case-insensitively:
// the hint "tcp" matches "tcp" and the layered "tcp;ofi_rxm", as in
// libfabric; "tcp;ofi_rxm" matches only itself.
func provMatch(name, hint string) bool {
	if strings.EqualFold(name, hint) {
		return true
	}
	if strings.Contains(hint, ";") {
		return false
	}
	for _, layer := range strings.Split(name, ";") {
		if strings.EqualFold(layer, hint) {
			return true
		}
	}
	return false
}

func matches(i, h *Info) bool {
	if h.Caps != 0 && i.Caps&h.Caps != h.Caps {
		return false
	}
	if h.Mode != 0 {
		need := i.Mode
		if h.Caps&CapRemoteCQData == 0 {
			// FI_RX_CQ_DATA (remote CQ data consumes a receive) matters
			// only to a program that asks for remote CQ data, and
			// libfabric waives it for the others.
			need &^= ModeRxCQData
		}
		if need&^h.Mode != 0 {
			return false
		}
	}
	if h.AddrFormat != FormatUnspec && h.AddrFormat != i.AddrFormat {
		return false
	}
	if h.EPAttr != nil && h.EPAttr.Type != EPUnspec && h.EPAttr.Type != i.EPAttr.Type {
		return false
	}
	if h.EPAttr != nil && i.EPAttr != nil && h.EPAttr.MaxMsgSize > i.EPAttr.MaxMsgSize {
		return false // a message larger than the endpoint carries (as ofi_check_ep_attr)
	}
	if h.DomainAttr != nil {
		if h.DomainAttr.Name != "" && h.DomainAttr.Name != i.DomainAttr.Name {
			return false
		}
		// The entry's MR modes must all be allowed by the hints (when
		// the hints say anything about MR modes).
		if h.DomainAttr.MRMode != 0 && i.DomainAttr.MRMode&^h.DomainAttr.MRMode != 0 {
			return false
		}
	}
	if h.FabricAttr != nil && h.FabricAttr.Name != "" && h.FabricAttr.Name != i.FabricAttr.Name {
		return false
	}
	if h.SrcAddr.IsValid() && i.SrcAddr.IsValid() && h.SrcAddr.Addr() != i.SrcAddr.Addr() {
		return false
	}
	return true
}

// applyHints narrows an entry to what the hints ask, as libfabric does:
// the primary caps asked for and the directions they imply, and all the
// secondary caps the provider has; the destination address.
func applyHints(i, h *Info) *Info {
	if h == nil {
		return i
	}
	if h.Caps != 0 {
		mask := h.Caps&primaryCaps | impliedCaps(h.Caps) | secondaryCaps
		i.Caps &= mask
		if i.TxAttr != nil {
			i.TxAttr.Caps &= mask
		}
		if i.RxAttr != nil {
			i.RxAttr.Caps &= mask
		}
		if i.DomainAttr != nil {
			i.DomainAttr.Caps &= h.Caps
		}
	}
	if h.DestAddr.IsValid() {
		i.DestAddr = h.DestAddr
	}
	if h.DestName != nil && h.AddrFormat == i.AddrFormat {
		i.DestName = bytes.Clone(h.DestName)
	}
	return i
}

const (
	primaryCaps = CapMsg | CapRMA | CapTagged | CapAtomic | CapMulticast | CapCollective | CapRead | CapWrite |
		CapRecv | CapSend | CapRemoteRead | CapRemoteWrite | CapDirectedRecv | CapNamedRxCtx
	secondaryCaps = CapMultiRecv | CapSource | CapRMAEvent | CapSharedAV | CapLocalComm | CapRemoteComm |
		CapSourceErr | CapRMAPmem
)

// impliedCaps are the directions a primary cap given without any implies.
func impliedCaps(c Caps) Caps {
	dirs := CapSend | CapRecv | CapRead | CapWrite | CapRemoteRead | CapRemoteWrite
	if c&dirs != 0 {
		return 0
	}
	var out Caps
	if c&(CapMsg|CapTagged|CapMulticast|CapCollective) != 0 {
		out |= CapSend | CapRecv
	}
	if c&(CapRMA|CapAtomic) != 0 {
		out |= CapRead | CapWrite | CapRemoteRead | CapRemoteWrite
	}
	return out
}

// Addressing is what node, service, flags and hints of a GetInfo call
// name, resolved, for providers' Infos.
type Addressing struct {
	Port uint16     // the service's port (0 if none)
	Node netip.Addr // node, resolved (invalid if none)
	// Dest is the peer: node and port without FlagSource, or the hints'
	// DestAddr.
	Dest netip.AddrPort
	// RouteSrc is the local address the host's routing table picks to
	// reach Dest (invalid if there is no Dest or no route).
	RouteSrc netip.Addr

	source     bool // FlagSource with a node or service: they name the local address
	nodeIsDest bool // no FlagSource, and a node: Dest is node and service
	hintSrc    netip.AddrPort
}

// Place gives an entry of the provider's local address local the
// addresses the call names: the source address (local and the service's
// port) with FlagSource, the peer's as DestAddr otherwise, and the
// hints' source port.
func (a Addressing) Place(i *Info, local netip.Addr) {
	if a.source {
		i.SrcAddr = netip.AddrPortFrom(local, a.Port)
	} else if a.nodeIsDest {
		i.DestAddr = a.Dest
	}
	if a.hintSrc.IsValid() {
		i.SrcAddr = netip.AddrPortFrom(local, a.hintSrc.Port())
	}
}

// ResolveAddressing resolves a GetInfo call's node and service (names
// looked up, as getaddrinfo does) for a provider's Infos.
func ResolveAddressing(node, service string, flags uint64, hints *Info) (Addressing, error) {
	a := Addressing{source: flags&FlagSource != 0 && (node != "" || service != "")}
	if hints != nil {
		a.hintSrc = hints.SrcAddr
	}
	if service != "" {
		n, err := strconv.ParseUint(service, 10, 16)
		if err != nil {
			sp, err := net.LookupPort("tcp", service)
			if err != nil {
				return a, Errorf("fi_getinfo", ErrInvalid, "service "+service)
			}
			n = uint64(sp)
		}
		a.Port = uint16(n)
	}
	if node != "" {
		ip, err := netip.ParseAddr(node)
		if err != nil {
			ips, lerr := net.LookupIP(node)
			if lerr != nil || len(ips) == 0 {
				return a, Errorf("fi_getinfo", ErrNoData, "node "+node)
			}
			ip, _ = netip.AddrFromSlice(ips[0])
		}
		a.Node = ip.Unmap()
	}
	if flags&FlagSource == 0 && a.Node.IsValid() {
		a.Dest, a.nodeIsDest = netip.AddrPortFrom(a.Node, a.Port), true
	} else if hints != nil && hints.DestAddr.IsValid() {
		a.Dest = hints.DestAddr
	}
	if a.Dest.IsValid() {
		a.RouteSrc = routeSource(a.Dest.Addr())
	}
	return a, nil
}

// routeSource is the local address the host's routing table picks to
// reach dst (it sends nothing); invalid if there is no route.
func routeSource(dst netip.Addr) netip.Addr {
	c, err := net.DialUDP("udp", nil, net.UDPAddrFromAddrPort(netip.AddrPortFrom(dst, 9)))
	if err != nil {
		return netip.Addr{}
	}
	defer c.Close()
	return c.LocalAddr().(*net.UDPAddr).AddrPort().Addr().Unmap()
}
