// Package tcp is the fabric provider "tcp": reliable connected endpoints
// (FI_EP_MSG) over TCP, speaking the wire format of libfabric 1.17's tcp
// provider, so that a Go program and a C libfabric program (fi_pingpong
// -p tcp) talk to each other.
//
// Importing the package registers the provider. Its fi_info entries are
// those of the C provider: one per IP address of each interface, the
// fabric named after the address's network ("192.0.2.0/24",
// "127.0.0.1/32") and the domain after the interface ("eth0", "lo").
//
// The goroutine that reads a CQ moves the data of the endpoints bound to
// it (reading the socket, writing what is queued) with no goroutine in
// between, as libfabric's manual progress does inside fi_cq_read. The
// sockets stay out of the Go runtime's network poller, which would wake
// a thread for every segment even while the program polls; one goroutine
// per connection, woken by a process-wide epoll instance only when the
// program has not polled for a millisecond, moves the data in the
// background, so the provider's progress is automatic, as C's reports.
// Messages sent with FlagTransmitComplete or FlagDeliveryComplete
// complete when the peer acknowledges them, as in C. A peer that closes
// raises FI_SHUTDOWN; one that sends a malformed frame or touches memory
// it may not fails the connection: the operations outstanding complete
// with an error, and the event queue gets an error entry and FI_SHUTDOWN.
// Close ends a connect in progress at once. A connection to the host
// itself asks for the reno congestion control, where C keeps the
// system's: a pacing one (bbr) slows large messages on loopback to about
// a third (RDMAGO_LOCAL_TCP_CC=system keeps the system's; see
// fabric/internal/hostcc).
//
// Offered: FI_EP_MSG with FI_MSG (send, senddata, inject, sendmsg) and
// FI_RMA (write, writedata, inject_write, read), over IPv4 and IPv6, with
// the option FI_OPT_CM_DATA_SIZE; FI_EP_RDM as C's "tcp;ofi_rxm" with
// FI_MSG, FI_TAGGED and FI_RMA (rxm's connect data and packet header,
// connections made on the first operation, eager messages up to 16 KiB,
// read-based rendezvous above, raw tagged frames, RMA passed to the
// connection), which pairs with C's rxm. Not offered: rxm's write-based
// rendezvous (FI_OFI_RXM_USE_RNDV_WRITE, off by default in C) and
// FI_EP_DGRAM, which C's tcp provider does not offer either.
package tcp

import (
	"net/netip"

	"github.com/rdmago/rdmago/fabric"
	"github.com/rdmago/rdmago/fabric/internal/ipif"
)

func init() { fabric.RegisterProvider(provider{}) }

// Name is the provider's name.
const Name = "tcp"

type provider struct{}

func (provider) Name() string            { return Name }
func (provider) Version() fabric.Version { return fabric.MakeVersion(117, 0) }

// template is the fi_info of the C provider's MSG endpoint.
func template(x ipif.Iface) *fabric.Info {
	order := fabric.OrderRAR | fabric.OrderRAW | fabric.OrderRAS | fabric.OrderWAW | fabric.OrderWAS | fabric.OrderSAW |
		fabric.OrderSAS | fabric.OrderRMARAR | fabric.OrderRMARAW | fabric.OrderRMAWAW | fabric.OrderAtomicRAR |
		fabric.OrderAtomicRAW | fabric.OrderAtomicWAW // as C's provider reports
	i := &fabric.Info{
		Caps: fabric.CapMsg | fabric.CapRMA | fabric.CapRead | fabric.CapWrite | fabric.CapRecv | fabric.CapSend |
			fabric.CapRemoteRead | fabric.CapRemoteWrite | fabric.CapRMAPmem | fabric.CapLocalComm | fabric.CapRemoteComm | fabric.CapRMAEvent,
		AddrFormat: fabric.FormatSockaddrIn,
		SrcAddr:    netip.AddrPortFrom(x.Addr, 0),
		TxAttr: &fabric.TxAttr{Caps: fabric.CapMsg | fabric.CapRMA | fabric.CapRead | fabric.CapWrite | fabric.CapSend | fabric.CapRMAPmem,
			MsgOrder: order, CompOrder: fabric.OrderStrict, InjectSize: injectSize, Size: 256, IOVLimit: maxIOV, RMAIOVLimit: maxIOV},
		RxAttr: &fabric.RxAttr{Caps: fabric.CapMsg | fabric.CapRMA | fabric.CapRecv | fabric.CapRemoteRead | fabric.CapRemoteWrite | fabric.CapRMAPmem | fabric.CapRMAEvent,
			MsgOrder: order, CompOrder: fabric.OrderStrict, Size: 256, IOVLimit: maxIOV},
		EPAttr: &fabric.EPAttr{Type: fabric.EPMsg, Protocol: fabric.ProtoSockTCP, MaxMsgSize: ^uint64(0),
			MaxOrderRAWSize: ^uint64(0), MaxOrderWAWSize: ^uint64(0), TxCtxCnt: 1, RxCtxCnt: 1},
		DomainAttr: &fabric.DomainAttr{Name: x.Name, Threading: fabric.ThreadSafe, ControlProgress: fabric.ProgressAuto,
			DataProgress: fabric.ProgressAuto, ResourceMgmt: fabric.RMEnabled, AVType: fabric.AVUnspec, MRKeySize: 8,
			CQDataSize: 8, CQCnt: 256, EPCnt: 8192, TxCtxCnt: 8192, RxCtxCnt: 8192, MaxEPTxCtx: 1, MaxEPRxCtx: 1,
			MaxEPSrxCtx: 8192, MRIOVLimit: 1, Caps: fabric.CapLocalComm | fabric.CapRemoteComm},
		FabricAttr: &fabric.FabricAttr{Name: x.Prefix.String(), ProvName: Name, ProvVersion: fabric.MakeVersion(117, 0), APIVersion: fabric.APIVersion},
	}
	if x.Addr.Is6() {
		i.AddrFormat = fabric.FormatSockaddrIn6
	}
	return i
}

// rdmTemplate is the fi_info of an FI_EP_RDM endpoint, as C's
// tcp;ofi_rxm offers it (messages, tagged messages and RMA).
func rdmTemplate(x ipif.Iface) *fabric.Info {
	i := template(x)
	caps := fabric.CapMsg | fabric.CapTagged | fabric.CapRMA | fabric.CapRead | fabric.CapWrite | fabric.CapRecv | fabric.CapSend |
		fabric.CapRemoteRead | fabric.CapRemoteWrite | fabric.CapLocalComm | fabric.CapRemoteComm
	i.Caps = caps
	i.TxAttr.Caps = fabric.CapMsg | fabric.CapTagged | fabric.CapRMA | fabric.CapRead | fabric.CapWrite | fabric.CapSend
	i.RxAttr.Caps = fabric.CapMsg | fabric.CapTagged | fabric.CapRMA | fabric.CapRecv | fabric.CapRemoteRead | fabric.CapRemoteWrite
	i.TxAttr.InjectSize = rxmInjectSize
	i.TxAttr.Size, i.RxAttr.Size = 2048, 2048
	i.EPAttr.Type = fabric.EPRDM
	i.EPAttr.Protocol = fabric.ProtoRXM
	i.EPAttr.ProtocolVersion = 1
	i.EPAttr.MemTagFormat = 0xaaaaaaaaaaaaaaaa
	i.DomainAttr.AVType = fabric.AVUnspec
	i.FabricAttr.ProvName = RDMName
	return i
}

// RDMName is the provider name of the FI_EP_RDM entries, as C names its
// layering of rxm over tcp.
const RDMName = "tcp;ofi_rxm"

// Infos lists one entry per address. With FlagSource, node and service
// name the local address (only its interface's entry is listed);
// otherwise they name the peer, and each entry gets it as DestAddr.
func (p provider) Infos(node, service string, flags uint64, hints *fabric.Info) ([]*fabric.Info, error) {
	ad, err := fabric.ResolveAddressing(node, service, flags, hints)
	if err != nil {
		return nil, err
	}
	nodeAddr, dst, routeSrc := ad.Node, ad.Dest, ad.RouteSrc
	var out, rdms []*fabric.Info
	for _, x := range ipif.List() {
		if routeSrc.IsValid() && x.Addr.WithZone("") != routeSrc.WithZone("") {
			continue
		}
		if flags&fabric.FlagSource != 0 && node != "" && x.Addr.WithZone("") != nodeAddr.WithZone("") {
			continue
		}
		if flags&fabric.FlagSource == 0 && nodeAddr.IsValid() && nodeAddr.Is4() != x.Addr.Is4() {
			continue
		}
		if hints != nil && hints.SrcAddr.IsValid() && hints.SrcAddr.Addr().WithZone("") != x.Addr.WithZone("") {
			continue
		}
		if hints != nil && hints.DestAddr.IsValid() && hints.DestAddr.Addr().Is4() != x.Addr.Is4() {
			continue
		}
		// Addresses, as the node, service and hints give them.
		shape := func(i *fabric.Info) *fabric.Info {
			ad.Place(i, x.Addr)
			return i
		}
		if hints == nil || hints.EPAttr == nil || hints.EPAttr.Type == fabric.EPUnspec || hints.EPAttr.Type == fabric.EPRDM {
			rdms = append(rdms, shape(rdmTemplate(x)))
		}
		i := template(x)
		if !dst.IsValid() && node == "" && service == "" && x.Addr.IsLoopback() {
			i.Caps &^= fabric.CapRemoteComm // as C lists loopback
		}
		out = append(out, shape(i))
	}
	// C lists the RDM entries (tcp;ofi_rxm) before the MSG ones.
	return append(rdms, out...), nil
}
