package fabric

import (
	"bytes"
	"net/netip"
	"strings"
)

// Caps are capability bits (FI_MSG, FI_RMA, ...), with libfabric's values.
type Caps uint64

// Capabilities.
const (
	CapMsg          Caps = 1 << 1  // FI_MSG
	CapRMA          Caps = 1 << 2  // FI_RMA
	CapTagged       Caps = 1 << 3  // FI_TAGGED
	CapAtomic       Caps = 1 << 4  // FI_ATOMIC
	CapMulticast    Caps = 1 << 5  // FI_MULTICAST
	CapCollective   Caps = 1 << 6  // FI_COLLECTIVE
	CapRead         Caps = 1 << 8  // FI_READ
	CapWrite        Caps = 1 << 9  // FI_WRITE
	CapRecv         Caps = 1 << 10 // FI_RECV
	CapSend         Caps = 1 << 11 // FI_SEND
	CapRemoteRead   Caps = 1 << 12 // FI_REMOTE_READ
	CapRemoteWrite  Caps = 1 << 13 // FI_REMOTE_WRITE
	CapMultiRecv    Caps = 1 << 16 // FI_MULTI_RECV
	CapRemoteCQData Caps = 1 << 17 // FI_REMOTE_CQ_DATA (also an operation flag)
	CapRMAPmem      Caps = 1 << 22 // FI_RMA_PMEM
	CapSourceErr    Caps = 1 << 23 // FI_SOURCE_ERR
	CapLocalComm    Caps = 1 << 32 // FI_LOCAL_COMM
	CapRemoteComm   Caps = 1 << 33 // FI_REMOTE_COMM
	CapSharedAV     Caps = 1 << 34 // FI_SHARED_AV
	CapRMAEvent     Caps = 1 << 56 // FI_RMA_EVENT
	CapSource       Caps = 1 << 57 // FI_SOURCE
	CapNamedRxCtx   Caps = 1 << 58 // FI_NAMED_RX_CTX
	CapDirectedRecv Caps = 1 << 59 // FI_DIRECTED_RECV
)

// Operation flags (fi_sendmsg's flags, completion flags).
const (
	FlagInject           uint64 = 1 << 20 // FI_INJECT
	FlagCompletion       uint64 = 1 << 24 // FI_COMPLETION
	FlagInjectComplete   uint64 = 1 << 25 // FI_INJECT_COMPLETE
	FlagTransmitComplete uint64 = 1 << 27 // FI_TRANSMIT_COMPLETE
	FlagDeliveryComplete uint64 = 1 << 28 // FI_DELIVERY_COMPLETE
	FlagCommitComplete   uint64 = 1 << 30 // FI_COMMIT_COMPLETE
	FlagSource           uint64 = 1 << 57 // FI_SOURCE (as an fi_getinfo flag)
	FlagProvAttrOnly     uint64 = 1 << 62 // FI_PROV_ATTR_ONLY (fi_getinfo)
)

// Completion flags say what a completion is for (fi_cq_entry flags).
const (
	CompMsg          = uint64(CapMsg)
	CompRMA          = uint64(CapRMA)
	CompTagged       = uint64(CapTagged)
	CompRead         = uint64(CapRead)
	CompWrite        = uint64(CapWrite)
	CompRecv         = uint64(CapRecv)
	CompSend         = uint64(CapSend)
	CompRemoteRead   = uint64(CapRemoteRead)
	CompRemoteWrite  = uint64(CapRemoteWrite)
	CompRemoteCQData = uint64(CapRemoteCQData)
)

// Mode bits a provider asks of the application (FI_CONTEXT, ...).
type Mode uint64

// Modes.
const (
	ModeContext   Mode = 1 << 59 // FI_CONTEXT
	ModeMsgPrefix Mode = 1 << 58 // FI_MSG_PREFIX
	ModeAsyncIOV  Mode = 1 << 57 // FI_ASYNC_IOV
	ModeRxCQData  Mode = 1 << 56 // FI_RX_CQ_DATA
	ModeLocalMR   Mode = 1 << 55 // FI_LOCAL_MR
	ModeContext2  Mode = 1 << 52 // FI_CONTEXT2
)

// EPType is an endpoint type (enum fi_ep_type).
type EPType int

// Endpoint types.
const (
	EPUnspec     EPType = iota // FI_EP_UNSPEC
	EPMsg                      // FI_EP_MSG: connected, reliable
	EPDgram                    // FI_EP_DGRAM: unconnected, unreliable
	EPRDM                      // FI_EP_RDM: unconnected, reliable
	EPSockStream               // FI_EP_SOCK_STREAM
	EPSockDgram                // FI_EP_SOCK_DGRAM
)

var epTypeNames = [...]string{"FI_EP_UNSPEC", "FI_EP_MSG", "FI_EP_DGRAM", "FI_EP_RDM", "FI_EP_SOCK_STREAM", "FI_EP_SOCK_DGRAM"}

func (t EPType) String() string {
	if t >= 0 && int(t) < len(epTypeNames) {
		return epTypeNames[t]
	}
	return "Unknown"
}

// ParseEPType parses "FI_EP_MSG" (or "msg"), case-insensitively.
func ParseEPType(s string) (EPType, bool) {
	u := strings.ToUpper(s)
	for i, n := range epTypeNames {
		if u == n || "FI_EP_"+u == n {
			return EPType(i), true
		}
	}
	return 0, false
}

// AddrFormat is an address format (FI_SOCKADDR_IN, ...).
type AddrFormat uint32

// Address formats.
const (
	FormatUnspec      AddrFormat = 0  // FI_FORMAT_UNSPEC
	FormatSockaddr    AddrFormat = 1  // FI_SOCKADDR
	FormatSockaddrIn  AddrFormat = 2  // FI_SOCKADDR_IN
	FormatSockaddrIn6 AddrFormat = 3  // FI_SOCKADDR_IN6
	FormatSockaddrIB  AddrFormat = 4  // FI_SOCKADDR_IB
	FormatAddrStr     AddrFormat = 9  // FI_ADDR_STR
	FormatIBUD        AddrFormat = 11 // FI_ADDR_IB_UD: a UDName
)

var addrFormatNames = map[AddrFormat]string{FormatUnspec: "FI_FORMAT_UNSPEC", FormatSockaddr: "FI_SOCKADDR",
	FormatSockaddrIn: "FI_SOCKADDR_IN", FormatSockaddrIn6: "FI_SOCKADDR_IN6", FormatSockaddrIB: "FI_SOCKADDR_IB", FormatAddrStr: "FI_ADDR_STR",
	FormatIBUD: "FI_ADDR_IB_UD"}

func (f AddrFormat) String() string {
	if s, ok := addrFormatNames[f]; ok {
		return s
	}
	return "Unknown"
}

// Protocol is an endpoint protocol (FI_PROTO_*).
type Protocol uint32

// Protocols.
const (
	ProtoUnspec     Protocol = 0  // FI_PROTO_UNSPEC
	ProtoRDMACMIBRC Protocol = 1  // FI_PROTO_RDMA_CM_IB_RC
	ProtoIBUD       Protocol = 3  // FI_PROTO_IB_UD
	ProtoUDP        Protocol = 5  // FI_PROTO_UDP
	ProtoSockTCP    Protocol = 6  // FI_PROTO_SOCK_TCP
	ProtoRXM        Protocol = 11 // FI_PROTO_RXM
)

var protoNames = map[Protocol]string{ProtoUnspec: "FI_PROTO_UNSPEC", ProtoRDMACMIBRC: "FI_PROTO_RDMA_CM_IB_RC", ProtoIBUD: "FI_PROTO_IB_UD",
	ProtoUDP: "FI_PROTO_UDP", ProtoSockTCP: "FI_PROTO_SOCK_TCP", ProtoRXM: "FI_PROTO_RXM"}

func (p Protocol) String() string {
	if s, ok := protoNames[p]; ok {
		return s
	}
	return "Unknown"
}

// MRMode are the memory registration mode bits (FI_MR_*).
type MRMode uint32

// MR modes.
const (
	MRLocal     MRMode = 1 << 2  // FI_MR_LOCAL
	MRRaw       MRMode = 1 << 3  // FI_MR_RAW
	MRVirtAddr  MRMode = 1 << 4  // FI_MR_VIRT_ADDR
	MRAllocated MRMode = 1 << 5  // FI_MR_ALLOCATED
	MRProvKey   MRMode = 1 << 6  // FI_MR_PROV_KEY
	MRMMUNotify MRMode = 1 << 7  // FI_MR_MMU_NOTIFY
	MRRMAEvent  MRMode = 1 << 8  // FI_MR_RMA_EVENT
	MREndpoint  MRMode = 1 << 9  // FI_MR_ENDPOINT
	MRHmem      MRMode = 1 << 10 // FI_MR_HMEM
)

// Threading, Progress, ResourceMgmt and AVType are domain attributes.
type (
	Threading    int
	Progress     int
	ResourceMgmt int
	AVType       int
)

// Domain attribute values.
const (
	ThreadUnspec Threading = iota
	ThreadSafe
	ThreadFID
	ThreadDomain
	ThreadCompletion
	ThreadEndpoint
)

const (
	ProgressUnspec Progress = iota
	ProgressAuto
	ProgressManual
)

const (
	RMUnspec ResourceMgmt = iota
	RMDisabled
	RMEnabled
)

const (
	AVUnspec AVType = iota
	AVMap
	AVTable
)

// Version is a libfabric version (FI_VERSION(major, minor)).
type Version uint32

// MakeVersion is FI_VERSION.
func MakeVersion(major, minor int) Version { return Version(major<<16 | minor) }

// Major and Minor are FI_MAJOR and FI_MINOR.
func (v Version) Major() int { return int(v >> 16) }
func (v Version) Minor() int { return int(v & 0xffff) }

// APIVersion is the libfabric API this package follows.
var APIVersion = MakeVersion(1, 17)

// TxAttr are transmit context attributes (struct fi_tx_attr).
type TxAttr struct {
	Caps        Caps
	Mode        Mode
	OpFlags     uint64
	MsgOrder    uint64
	CompOrder   uint64
	InjectSize  int
	Size        int
	IOVLimit    int
	RMAIOVLimit int
	TClass      uint32
}

// RxAttr are receive context attributes (struct fi_rx_attr).
type RxAttr struct {
	Caps              Caps
	Mode              Mode
	OpFlags           uint64
	MsgOrder          uint64
	CompOrder         uint64
	TotalBufferedRecv int
	Size              int
	IOVLimit          int
}

// EPAttr are endpoint attributes (struct fi_ep_attr).
type EPAttr struct {
	Type            EPType
	Protocol        Protocol
	ProtocolVersion uint32
	MaxMsgSize      uint64
	MsgPrefixSize   int
	MaxOrderRAWSize uint64
	MaxOrderWARSize uint64
	MaxOrderWAWSize uint64
	MemTagFormat    uint64
	TxCtxCnt        int
	RxCtxCnt        int
}

// DomainAttr are domain attributes (struct fi_domain_attr).
type DomainAttr struct {
	Name            string
	Threading       Threading
	ControlProgress Progress
	DataProgress    Progress
	ResourceMgmt    ResourceMgmt
	AVType          AVType
	MRMode          MRMode
	MRKeySize       int
	CQDataSize      int
	CQCnt           int
	EPCnt           int
	TxCtxCnt        int
	RxCtxCnt        int
	MaxEPTxCtx      int
	MaxEPRxCtx      int
	MaxEPStxCtx     int
	MaxEPSrxCtx     int
	CntrCnt         int
	MRIOVLimit      int
	Caps            Caps
	Mode            Mode
	MaxErrData      int
	MRCnt           int
}

// FabricAttr are fabric attributes (struct fi_fabric_attr).
type FabricAttr struct {
	Name        string
	ProvName    string
	ProvVersion Version
	APIVersion  Version
}

// Info describes one way to reach the network (struct fi_info): what
// fi_getinfo returns, and what the hints to it ask for. Addresses of the
// sockaddr formats are IP addresses and ports.
type Info struct {
	Caps       Caps
	Mode       Mode
	AddrFormat AddrFormat
	SrcAddr    netip.AddrPort // zero: none
	DestAddr   netip.AddrPort // zero: none
	// SrcName and DestName hold addresses of a format that is not a
	// socket address (FI_ADDR_IB_UD: a UDName's bytes), as fi_getname
	// gives them; nil: none.
	SrcName  []byte
	DestName []byte
	// Handle is, in a CONNREQ event's info, the connection request that
	// fi_endpoint and Accept answer (info->handle).
	Handle any

	TxAttr     *TxAttr
	RxAttr     *RxAttr
	EPAttr     *EPAttr
	DomainAttr *DomainAttr
	FabricAttr *FabricAttr

	prov Provider
}

// AllocInfo returns an Info with every attribute structure allocated
// (fi_allocinfo), for hints.
func AllocInfo() *Info {
	return &Info{TxAttr: &TxAttr{}, RxAttr: &RxAttr{}, EPAttr: &EPAttr{}, DomainAttr: &DomainAttr{}, FabricAttr: &FabricAttr{}}
}

// Dup returns a deep copy (fi_dupinfo). There is no fi_freeinfo: the
// garbage collector frees Infos.
func (i *Info) Dup() *Info {
	if i == nil {
		return nil
	}
	d := *i
	d.SrcName, d.DestName = bytes.Clone(i.SrcName), bytes.Clone(i.DestName)
	if i.TxAttr != nil {
		x := *i.TxAttr
		d.TxAttr = &x
	}
	if i.RxAttr != nil {
		x := *i.RxAttr
		d.RxAttr = &x
	}
	if i.EPAttr != nil {
		x := *i.EPAttr
		d.EPAttr = &x
	}
	if i.DomainAttr != nil {
		x := *i.DomainAttr
		d.DomainAttr = &x
	}
	if i.FabricAttr != nil {
		x := *i.FabricAttr
		d.FabricAttr = &x
	}
	return &d
}

// Provider returns the provider the Info came from.
func (i *Info) Provider() Provider { return i.prov }

// SetProvider is for providers: it marks an Info as theirs.
func (i *Info) SetProvider(p Provider) { i.prov = p }
