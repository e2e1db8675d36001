// Package udp is the fabric provider "udp": unreliable datagram endpoints
// (FI_EP_DGRAM) over UDP sockets, as libfabric 1.17's udp provider offers
// them, so that a Go program and a C libfabric program (fi_pingpong -p
// udp) exchange datagrams.
//
// On the wire a message is one UDP datagram holding the message's bytes
// and nothing else: the C provider adds no header, and neither does this
// one. An endpoint's name (fi_getname) is its socket's address, a struct
// sockaddr_in or sockaddr_in6 (FI_SOCKADDR_IN, FI_SOCKADDR_IN6); the
// endpoint is bound to the entry's source address when it is opened, or
// when it is enabled to the address the host's name resolves to (as C,
// 127.0.0.1 failing that), on a port the system picks.
//
// Importing the package registers the provider. Its fi_info entries are
// those of the C provider's FI_EP_DGRAM: one per IP address of each
// interface, the fabric named after the address's network, the domain
// after the interface; messages of up to 1472 bytes (max_msg_size, also
// the inject size), 1024 receives and sends queued, FI_SOURCE (the
// sender's AV handle in each receive completion: fi_cq_readfrom). A
// send completes as soon as the socket takes the datagram, as in C; a
// datagram longer than the receive buffer it lands in completes that
// receive with FI_ETRUNC, where C would hand over its first bytes as if
// whole. Progress is automatic: the goroutine that reads a bound CQ
// takes in datagrams with no goroutine in between, and while the program
// does not poll, one goroutine per endpoint, woken by the process's
// socket waker, does.
//
// Not offered: C's FI_MULTICAST (fi_join of an IPv4 group), and the
// FI_EP_RDM entries C lists as "udp;ofi_rxd" (the rxd reliability layer
// over these endpoints).
package udp

import (
	"net/netip"

	"github.com/rdmago/rdmago/fabric"
	"github.com/rdmago/rdmago/fabric/internal/ipif"
)

func init() { fabric.RegisterProvider(provider{}) }

// Name is the provider's name.
const Name = "udp"

// Sizes of C's provider.
const (
	maxMsg    = 1472 // max_msg_size and inject_size: an Ethernet frame's UDP payload
	queueSize = 1024 // tx and rx size
	maxIOV    = 4
)

type provider struct{}

func (provider) Name() string            { return Name }
func (provider) Version() fabric.Version { return fabric.MakeVersion(117, 0) }

// template is the fi_info of the C provider's FI_EP_DGRAM entry on
// address x.
func template(x ipif.Iface) *fabric.Info {
	i := &fabric.Info{
		Caps:       fabric.CapMsg | fabric.CapRecv | fabric.CapSend | fabric.CapLocalComm | fabric.CapRemoteComm | fabric.CapSource,
		AddrFormat: fabric.FormatSockaddrIn,
		SrcAddr:    netip.AddrPortFrom(x.Addr, 0),
		TxAttr: &fabric.TxAttr{Caps: fabric.CapMsg | fabric.CapSend, CompOrder: fabric.OrderStrict,
			InjectSize: maxMsg, Size: queueSize, IOVLimit: maxIOV},
		RxAttr: &fabric.RxAttr{Caps: fabric.CapMsg | fabric.CapRecv | fabric.CapSource, CompOrder: fabric.OrderStrict,
			Size: queueSize, IOVLimit: maxIOV},
		EPAttr: &fabric.EPAttr{Type: fabric.EPDgram, Protocol: fabric.ProtoUDP, MaxMsgSize: maxMsg, TxCtxCnt: 1, RxCtxCnt: 1},
		DomainAttr: &fabric.DomainAttr{Name: x.Name, Threading: fabric.ThreadSafe, ControlProgress: fabric.ProgressAuto,
			DataProgress: fabric.ProgressAuto, ResourceMgmt: fabric.RMEnabled, AVType: fabric.AVUnspec, MRKeySize: 8,
			CQCnt: 256, EPCnt: 256, TxCtxCnt: 256, RxCtxCnt: 256, MaxEPTxCtx: 1, MaxEPRxCtx: 1,
			Caps: fabric.CapLocalComm | fabric.CapRemoteComm},
		FabricAttr: &fabric.FabricAttr{Name: x.Prefix.String(), ProvName: Name, ProvVersion: fabric.MakeVersion(117, 0), APIVersion: fabric.APIVersion},
	}
	if x.Addr.Is6() {
		i.AddrFormat = fabric.FormatSockaddrIn6
	}
	return i
}

// Infos lists one FI_EP_DGRAM entry per address. With FlagSource, node
// and service name the local address (only its interface's entry is
// listed); otherwise they name the peer, and each entry of its family
// gets it as DestAddr.
func (provider) Infos(node, service string, flags uint64, hints *fabric.Info) ([]*fabric.Info, error) {
	if hints != nil && hints.EPAttr != nil && hints.EPAttr.Type != fabric.EPUnspec && hints.EPAttr.Type != fabric.EPDgram {
		return nil, nil
	}
	return ipif.Infos(node, service, flags, hints, template)
}

// PassiveEndpoint refuses: datagram endpoints listen for nothing.
func (provider) PassiveEndpoint(*fabric.Fabric, *fabric.Info, any) (fabric.PassiveEndpointDriver, error) {
	return nil, fabric.Errorf("fi_passive_ep", fabric.ErrNoSys, "the udp provider has no passive endpoints (FI_EP_DGRAM only)")
}
