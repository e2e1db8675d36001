// Package vrb is the fabric provider "verbs" on any verbs device —
// rdmago's software RoCEv2 device, or an rdma-core device with the
// rdmacore build tag: reliable connected endpoints (FI_EP_MSG) with
// connections made by rdma_cm, and unreliable datagram endpoints
// (FI_EP_DGRAM) on UD queue pairs, as libfabric 1.17's verbs provider
// makes them, and reliable unconnected ones (FI_EP_RDM) as its
// verbs;ofi_rxm stack makes them, so that a Go program and a C program using libfabric's
// verbs provider (fi_pingpong -p verbs) talk to each other.
//
// Importing the package registers the provider. Its fi_info entries are
// those of the C provider: an FI_EP_MSG entry per IP address of each
// device's GID table, the fabric named after the GID subnet prefix
// ("IB-0xfe80000000000000"), the domain after the device ("rxe_eth0",
// "rxe0"); and an FI_EP_DGRAM entry per device, its domain the device's
// name with "-dgram" after it.
//
// On the wire it is what C's provider does. FI_EP_MSG: the rdma_cm TCP
// port space, a one-byte length in front of the private data of connect,
// accept and reject (C's struct vrb_cm_data_hdr; at most 55 bytes of the
// program's own), SEND for fi_send, SEND_WITH_IMM for fi_senddata, RDMA
// WRITE (with immediate for fi_writedata) and RDMA READ, the 32-bit CQ
// data carried in the immediate, IB atomics for FI_ATOMIC. FI_EP_DGRAM:
// endpoints named by an FI_ADDR_IB_UD name (fabric.UDName: GID, QP
// number, P_Key) that fabric.GetName returns and AV.InsertName takes; UD
// SENDs with Q_Key 0x11111111 of at most the MTU; FI_MSG_PREFIX on
// receive, whose first 40 bytes take the GRH. The GID is the one at index
// FI_VERBS_GID_IDX (0 unless the variable is set), as in C: to talk to a
// C program on the kernel's rxe over IPv4, run it with the index of its
// IPv4 GID (FI_VERBS_GID_IDX=1 there), as perftest takes -x 1.
//
// The domain's mr_mode is C's: FI_MR_LOCAL, FI_MR_VIRT_ADDR,
// FI_MR_ALLOCATED and FI_MR_PROV_KEY. Buffers of sends and receives must
// lie in a registered region whose descriptor (MR.Desc) the call is
// given; peers name a region by its key and virtual address (MR.Key,
// MR.Addr). fi_inject and fi_inject_write copy into a registered buffer
// of the endpoint's and post inline. An fi_writedata consumes a posted
// receive at the peer, which completes with the data (FI_RX_CQ_DATA, as
// C's provider asks).
//
// Progress: a CQ read polls the endpoints' verbs CQs with no goroutine in
// between; one goroutine per endpoint waits on its verbs CQ and takes the
// completions when the program does not poll, so progress is automatic,
// as C's reports. On rdmago's software device the data moves on the
// device's goroutines in the program's own process: a program that spins
// on CQ.Read (fi_cq_read) needs a second P (GOMAXPROCS ≥ 2) for them,
// while CQ.SRead (fi_cq_sread) waits without spinning and needs none.
//
// FI_EP_RDM is C's verbs;ofi_rxm: rxm's protocol (fabric/internal/rxm)
// over RC connections this provider makes to each peer on the first
// send: eager messages up to 16 KiB, SAR segments up to 128 KiB,
// rendezvous by RDMA READ above; see rdm.go. Its fi_info entries follow
// the MSG and DGRAM ones, provider name "verbs;ofi_rxm".
//
// Not offered: shared receive contexts, XRC, rxm's credit-based flow
// control (the connection data says so, and C's rxm does without).
package vrb

import (
	"net/netip"
	"strings"

	"github.com/rdmago/rdmago/fabric"
	"github.com/rdmago/rdmago/verbs"
)

// Name is the provider's name.
const Name = "verbs"

func init() { fabric.RegisterProvider(provider{}) }

type provider struct{}

func (provider) Name() string            { return Name }
func (provider) Version() fabric.Version { return fabric.MakeVersion(117, 0) }

// Limits, as C's provider reports them by default.
const (
	defaultSize = 384 // tx and rx queue sizes
	maxIOV      = 4
	injectSize  = 256 // FI_VERBS_INLINE_SIZE's default
	maxCMData   = 55  // private data after the length byte
	maxMsgSize  = 8 << 20
)

// devAddr is one IP address of a device's GID table.
type devAddr struct {
	dev    *verbs.Device
	addr   netip.Addr
	fabric string // "IB-0x…", from the GID subnet prefix
	mtu    verbs.MTU
}

// deviceAddrs lists the devices' addresses: IPv4 first, then IPv6 (not
// link-local), device by device.
func deviceAddrs() []devAddr {
	devs, err := verbs.Devices()
	if err != nil {
		return nil
	}
	var out []devAddr
	for _, d := range devs {
		ctx, err := d.Open()
		if err != nil {
			continue
		}
		pa, err := ctx.QueryPort(1)
		if err != nil {
			ctx.Close()
			continue
		}
		var v4, v6 []devAddr
		var prefix verbs.GID
		seen := map[netip.Addr]bool{}
		for i := 0; i < pa.GIDTblLen; i++ {
			g, err := ctx.QueryGID(1, i)
			if err != nil || g.IsZero() {
				continue
			}
			if prefix.IsZero() {
				prefix = g
			}
			a := g.Addr()
			if a.IsLinkLocalUnicast() || seen[a] {
				continue
			}
			seen[a] = true
			x := devAddr{dev: d, addr: a, mtu: pa.ActiveMTU}
			if a.Is4() {
				v4 = append(v4, x)
			} else {
				v6 = append(v6, x)
			}
		}
		ctx.Close()
		if prefix.IsZero() {
			prefix[0], prefix[1] = 0xfe, 0x80
		}
		for _, x := range append(v4, v6...) {
			x.fabric = fabricName(prefix)
			out = append(out, x)
		}
	}
	return out
}

// template is the fi_info of the C provider's MSG endpoint.
func template(x devAddr) *fabric.Info {
	order := fabric.OrderRAR | fabric.OrderRAW | fabric.OrderRAS | fabric.OrderWAW | fabric.OrderWAS | fabric.OrderSAW |
		fabric.OrderSAS | fabric.OrderRMARAR | fabric.OrderRMARAW | fabric.OrderRMAWAW | fabric.OrderAtomicRAR |
		fabric.OrderAtomicRAW | fabric.OrderAtomicWAW
	i := &fabric.Info{
		Caps: fabric.CapMsg | fabric.CapRMA | fabric.CapAtomic | fabric.CapRead | fabric.CapWrite | fabric.CapRecv | fabric.CapSend |
			fabric.CapRemoteRead | fabric.CapRemoteWrite | fabric.CapLocalComm | fabric.CapRemoteComm,
		Mode:       fabric.ModeRxCQData,
		AddrFormat: fabric.FormatSockaddrIn,
		SrcAddr:    netip.AddrPortFrom(x.addr, 0),
		TxAttr: &fabric.TxAttr{Caps: fabric.CapMsg | fabric.CapRMA | fabric.CapAtomic | fabric.CapRead | fabric.CapWrite | fabric.CapSend,
			MsgOrder: order, CompOrder: fabric.OrderStrict, InjectSize: injectSize, Size: defaultSize, IOVLimit: maxIOV, RMAIOVLimit: 1},
		RxAttr: &fabric.RxAttr{Caps: fabric.CapMsg | fabric.CapRMA | fabric.CapAtomic | fabric.CapRecv | fabric.CapRemoteRead | fabric.CapRemoteWrite,
			Mode: fabric.ModeRxCQData, MsgOrder: order, CompOrder: fabric.OrderStrict | fabric.OrderData, Size: defaultSize, IOVLimit: maxIOV},
		EPAttr: &fabric.EPAttr{Type: fabric.EPMsg, Protocol: fabric.ProtoRDMACMIBRC, ProtocolVersion: 1, MaxMsgSize: maxMsgSize,
			MaxOrderRAWSize: maxMsgSize, MaxOrderWAWSize: maxMsgSize, TxCtxCnt: 1, RxCtxCnt: 1},
		DomainAttr: &fabric.DomainAttr{Name: x.dev.Name(), Threading: fabric.ThreadSafe, ControlProgress: fabric.ProgressAuto,
			DataProgress: fabric.ProgressAuto, ResourceMgmt: fabric.RMEnabled, AVType: fabric.AVUnspec,
			MRMode: fabric.MRLocal | fabric.MRVirtAddr | fabric.MRAllocated | fabric.MRProvKey, MRKeySize: 4,
			CQDataSize: 4, CQCnt: 1 << 20, EPCnt: 1 << 20, TxCtxCnt: 1024, RxCtxCnt: 1024, MaxEPTxCtx: 1024, MaxEPRxCtx: 1024,
			MRIOVLimit: 1, Caps: fabric.CapLocalComm | fabric.CapRemoteComm},
		FabricAttr: &fabric.FabricAttr{Name: x.fabric, ProvName: Name, ProvVersion: fabric.MakeVersion(117, 0), APIVersion: fabric.APIVersion},
	}
	if x.addr.Is6() {
		i.AddrFormat = fabric.FormatSockaddrIn6
	}
	return i
}

// Infos lists one FI_EP_MSG entry per device address. With FlagSource,
// node and service name the local address; otherwise they name the peer,
// which each entry gets as DestAddr, and only the address the host routes
// to it from is listed.
func (provider) Infos(node, service string, flags uint64, hints *fabric.Info) ([]*fabric.Info, error) {
	typ := fabric.EPUnspec
	if hints != nil && hints.EPAttr != nil {
		typ = hints.EPAttr.Type
	}
	switch typ {
	case fabric.EPDgram:
		return dgramInfos(), nil
	case fabric.EPUnspec, fabric.EPMsg, fabric.EPRDM:
	default:
		return nil, nil
	}
	ad, err := fabric.ResolveAddressing(node, service, flags, hints)
	if err != nil {
		return nil, err
	}
	nodeAddr, dst, routeSrc := ad.Node, ad.Dest, ad.RouteSrc
	var xs []devAddr
	for _, x := range deviceAddrs() {
		switch {
		case routeSrc.IsValid() && x.addr != routeSrc.WithZone(""):
			continue
		case flags&fabric.FlagSource != 0 && nodeAddr.IsValid() && x.addr != nodeAddr.WithZone(""):
			continue
		case hints != nil && hints.SrcAddr.IsValid() && hints.SrcAddr.Addr().Unmap().WithZone("") != x.addr:
			continue
		case dst.IsValid() && dst.Addr().Is4() != x.addr.Is4():
			continue
		}
		xs = append(xs, x)
	}
	var out []*fabric.Info
	add := func(mk func(devAddr) *fabric.Info) {
		for _, x := range xs {
			i := mk(x)
			ad.Place(i, x.addr)
			out = append(out, i)
		}
	}
	// In C's order: MSG, DGRAM, then verbs;ofi_rxm's RDM.
	if typ != fabric.EPRDM {
		add(template)
	}
	if typ == fabric.EPUnspec {
		out = append(out, dgramInfos()...)
	}
	if typ != fabric.EPMsg {
		add(rdmTemplate)
	}
	return out, nil
}

// ---- Domain ----

// domain is the provider's side of a fabric domain: the device's context
// and a protection domain, which registers memory.
type domain struct {
	ctx *verbs.Context
	pd  *verbs.PD
}

func (provider) OpenDomain(d *fabric.Domain) (fabric.DomainDriver, error) {
	dev, err := verbs.DeviceByName(strings.TrimSuffix(d.Attr.Name, dgramTag))
	if err != nil {
		return nil, fabric.Errorf("fi_domain", fabric.ErrNoDevice, err.Error())
	}
	ctx, err := dev.Open()
	if err != nil {
		return nil, fabric.Errorf("fi_domain", fabric.ErrNoDevice, err.Error())
	}
	pd, err := ctx.AllocPD()
	if err != nil {
		ctx.Close()
		return nil, fabric.Errorf("fi_domain", fabric.ErrNoMemory, err.Error())
	}
	return &domain{ctx: ctx, pd: pd}, nil
}

// RegMR registers buf with the device (ibv_reg_mr): the key is the
// region's rkey, the address its virtual address.
func (d *domain) RegMR(buf []byte, access, _ uint64) (uint64, uint64, any, error) {
	acc := verbs.AccessLocalWrite
	if access&fabric.AccessRemoteWrite != 0 {
		acc |= verbs.AccessRemoteWrite | verbs.AccessRemoteAtomic // an atomic's target is written
	}
	if access&fabric.AccessRemoteRead != 0 {
		acc |= verbs.AccessRemoteRead
	}
	mr, err := d.pd.RegMR(buf, acc)
	if err != nil {
		return 0, 0, nil, fabric.Errorf("fi_mr_reg", fabric.ErrInvalid, err.Error())
	}
	return uint64(mr.RKey()), mr.Addr(), mr, nil
}

func (d *domain) DeregMR(h any) error { return h.(*verbs.MR).Dereg() }

func (d *domain) Close() error {
	d.pd.Dealloc()
	return d.ctx.Close()
}

// driverOf returns the provider's side of a domain of this provider.
func driverOf(d fabric.DomainRef) (*domain, error) {
	dd, ok := d.Driver.(*domain)
	if !ok {
		return nil, fabric.Errorf("fi_endpoint", fabric.ErrDomain, "not a verbs domain")
	}
	return dd, nil
}
