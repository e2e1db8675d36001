// Package sockets is the fabric provider "sockets": libfabric 1.17's
// sockets provider, the one the libfabric study notes' call flows use
// ("使用TCP/IP网络协议"), over TCP and speaking its wire format, so that a
// Go program and a C program (fi_pingpong -p sockets) talk to each other.
//
// It offers the C provider's three endpoint types on one transport (see
// wire.go): FI_EP_MSG, connected through a passive endpoint with private
// data, FI_SHUTDOWN and rejection; FI_EP_RDM and FI_EP_DGRAM, which
// reach each peer in their AV by a TCP connection made on the first
// operation, as C's do (so a sockets "datagram" is reliable, as C's is).
// On each: messages (send, senddata with remote CQ data, inject,
// sendmsg), tagged messages with directed receives; and on MSG and RDM
// endpoints RMA (write, writedata, inject_write, read) and atomics
// (fi_atomic, fi_fetch_atomic, fi_compare_atomic on the integer and
// floating-point datatypes, up to 4096 bytes of elements) to regions
// named by key and offset (mr_mode is basic scalable, as C's: no
// FI_MR_VIRT_ADDR); FI_SOURCE gives
// the sender's AV handle with each receive (fi_cq_readfrom). A send
// completes once its message is written to the connection, unless it
// asks for FI_TRANSMIT_COMPLETE or FI_DELIVERY_COMPLETE: then when the
// peer acknowledges it, as C's. Messages nobody has posted a receive for
// yet are kept until one comes (C's buffered receives). Progress is
// automatic: a goroutine reads each connection and another writes it,
// so no call waits for the network. A connection to the host itself asks
// for the reno congestion control, as the tcp provider's do (see
// fabric/internal/hostcc; RDMAGO_LOCAL_TCP_CC=system keeps the
// system's).
//
// Importing the package registers the provider. Its fi_info entries are
// the C provider's (FI_EP_DGRAM, then FI_EP_RDM, then FI_EP_MSG, one per
// address of each interface), with the caps it offers. Not offered, and
// left out of the caps: FI_MULTI_RECV, triggered operations
// (FI_TRIGGER), FI_FENCE, shared and named contexts (FI_SHARED_AV,
// FI_NAMED_RX_CTX), FI_RMA_PMEM, and atomics on the complex datatypes
// and long double.
package sockets

import (
	"net/netip"

	"github.com/rdmago/rdmago/fabric"
	"github.com/rdmago/rdmago/fabric/internal/ipif"
)

func init() { fabric.RegisterProvider(provider{}) }

// Name is the provider's name.
const Name = "sockets"

// Sizes of C's provider.
const (
	queueSize  = 256                // tx and rx size
	maxMsgSize = ^uint64(0) - 4096  // SOCK_EP_MAX_MSG_SZ
	maxBuffer  = 1 << 26            // SOCK_EP_MAX_BUFF_RECV: the most an unexpected message may hold
	tagFormat  = 0xaaaaaaaaaaaaaaaa // FI_TAG_GENERIC
	ctxCnt     = 16                 // SOCK_EP_MAX_TX_CNT, SOCK_EP_MAX_RX_CNT
	mrCnt      = 65535              // SOCK_DOMAIN_MR_CNT
	errDataLen = maxCMData          // SOCK_MAX_ERR_CQ_EQ_DATA_SZ
	cqCnt      = 32                 // SOCK_EP_MAX_CQ_CNT
	epCnt      = 128                // SOCK_EP_MAX_EP_CNT
	cntrCnt    = 128                // SOCK_EP_MAX_CNTR_CNT
	msgCaps    = fabric.CapMsg | fabric.CapTagged
	rmaCaps    = fabric.CapRMA | fabric.CapRead | fabric.CapWrite
)

type provider struct{}

func (provider) Name() string            { return Name }
func (provider) Version() fabric.Version { return fabric.MakeVersion(117, 0) }

// template is the fi_info of the C provider's entry of type t on address
// x, with the caps this one offers.
func template(t fabric.EPType, x ipif.Iface) *fabric.Info {
	order := fabric.OrderRAR | fabric.OrderRAW | fabric.OrderRAS | fabric.OrderWAR | fabric.OrderWAW | fabric.OrderWAS |
		fabric.OrderSAR | fabric.OrderSAW | fabric.OrderSAS | fabric.OrderRMARAR | fabric.OrderRMARAW | fabric.OrderRMAWAR |
		fabric.OrderRMAWAW | fabric.OrderAtomicRAR | fabric.OrderAtomicRAW | fabric.OrderAtomicWAR | fabric.OrderAtomicWAW
	txCaps := msgCaps | fabric.CapSend
	rxCaps := msgCaps | fabric.CapRecv | fabric.CapSource | fabric.CapDirectedRecv
	rmaIOV := 0
	if t != fabric.EPDgram {
		txCaps |= rmaCaps | fabric.CapAtomic
		rxCaps |= fabric.CapRMA | fabric.CapAtomic | fabric.CapRemoteRead | fabric.CapRemoteWrite | fabric.CapRMAEvent
		rmaIOV = maxIOV
	}
	i := &fabric.Info{
		Caps:       txCaps | rxCaps | fabric.CapLocalComm | fabric.CapRemoteComm,
		AddrFormat: fabric.FormatSockaddrIn,
		SrcAddr:    netip.AddrPortFrom(x.Addr, 0),
		TxAttr: &fabric.TxAttr{Caps: txCaps, MsgOrder: order, CompOrder: 0 /* FI_ORDER_NONE */, InjectSize: maxInject,
			Size: queueSize, IOVLimit: maxIOV, RMAIOVLimit: rmaIOV},
		RxAttr: &fabric.RxAttr{Caps: rxCaps, MsgOrder: order, CompOrder: fabric.OrderStrict | fabric.OrderData,
			Size: queueSize, IOVLimit: maxIOV},
		EPAttr: &fabric.EPAttr{Type: t, Protocol: fabric.ProtoSockTCP, ProtocolVersion: wireVersion, MaxMsgSize: maxMsgSize,
			MaxOrderRAWSize: maxMsgSize, MaxOrderWARSize: maxMsgSize, MaxOrderWAWSize: maxMsgSize, MemTagFormat: tagFormat,
			TxCtxCnt: ctxCnt, RxCtxCnt: ctxCnt},
		DomainAttr: &fabric.DomainAttr{Name: x.Name, Threading: fabric.ThreadSafe, ControlProgress: fabric.ProgressAuto,
			DataProgress: fabric.ProgressAuto, ResourceMgmt: fabric.RMEnabled, AVType: fabric.AVUnspec, MRKeySize: 8,
			CQDataSize: 8, CQCnt: cqCnt, EPCnt: epCnt, TxCtxCnt: ctxCnt, RxCtxCnt: ctxCnt, MaxEPTxCtx: ctxCnt, MaxEPRxCtx: ctxCnt,
			MaxEPStxCtx: epCnt, MaxEPSrxCtx: epCnt, CntrCnt: cntrCnt, MRIOVLimit: maxIOV,
			Caps: fabric.CapLocalComm | fabric.CapRemoteComm, MaxErrData: errDataLen, MRCnt: mrCnt},
		FabricAttr: &fabric.FabricAttr{Name: x.Prefix.String(), ProvName: Name, ProvVersion: fabric.MakeVersion(117, 0), APIVersion: fabric.APIVersion},
	}
	if x.Addr.Is6() {
		i.AddrFormat = fabric.FormatSockaddrIn6
	}
	return i
}

// Infos lists, as C does, every FI_EP_DGRAM entry, then the FI_EP_RDM
// ones, then the FI_EP_MSG ones, one per address. With FlagSource, node
// and service name the local address; otherwise they name the peer, and
// each entry of its family gets it as DestAddr.
func (provider) Infos(node, service string, flags uint64, hints *fabric.Info) ([]*fabric.Info, error) {
	var out []*fabric.Info
	for _, t := range []fabric.EPType{fabric.EPDgram, fabric.EPRDM, fabric.EPMsg} {
		if hints != nil && hints.EPAttr != nil && hints.EPAttr.Type != fabric.EPUnspec && hints.EPAttr.Type != t {
			continue
		}
		infos, err := ipif.Infos(node, service, flags, hints, func(x ipif.Iface) *fabric.Info { return template(t, x) })
		if err != nil {
			return nil, err
		}
		out = append(out, infos...)
	}
	return out, nil
}
