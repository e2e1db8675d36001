package fabric

import (
	"fmt"
	"net/netip"
	"strings"
)

// Order bits (FI_ORDER_*) as this package numbers them; the names are
// libfabric's.
const (
	OrderRAR       uint64 = 1 << iota // FI_ORDER_RAR
	OrderRAW                          // FI_ORDER_RAW
	OrderRAS                          // FI_ORDER_RAS
	OrderWAR                          // FI_ORDER_WAR
	OrderWAW                          // FI_ORDER_WAW
	OrderWAS                          // FI_ORDER_WAS
	OrderSAR                          // FI_ORDER_SAR
	OrderSAW                          // FI_ORDER_SAW
	OrderSAS                          // FI_ORDER_SAS
	OrderRMARAR                       // FI_ORDER_RMA_RAR
	OrderRMARAW                       // FI_ORDER_RMA_RAW
	OrderRMAWAR                       // FI_ORDER_RMA_WAR
	OrderRMAWAW                       // FI_ORDER_RMA_WAW
	OrderAtomicRAR                    // FI_ORDER_ATOMIC_RAR
	OrderAtomicRAW                    // FI_ORDER_ATOMIC_RAW
	OrderAtomicWAR                    // FI_ORDER_ATOMIC_WAR
	OrderAtomicWAW                    // FI_ORDER_ATOMIC_WAW
	// OrderData is FI_ORDER_DATA: data lands in the order sent.
	OrderData uint64 = 1 << 62
	// OrderStrict is FI_ORDER_STRICT, the completion order of a provider
	// that completes in order.
	OrderStrict uint64 = 1 << 63
)

type flagName struct {
	bit  uint64
	name string
}

var capNames = []flagName{
	{uint64(CapMsg), "FI_MSG"}, {uint64(CapRMA), "FI_RMA"}, {uint64(CapTagged), "FI_TAGGED"}, {uint64(CapAtomic), "FI_ATOMIC"},
	{uint64(CapMulticast), "FI_MULTICAST"}, {uint64(CapCollective), "FI_COLLECTIVE"}, {uint64(CapRead), "FI_READ"},
	{uint64(CapWrite), "FI_WRITE"}, {uint64(CapRecv), "FI_RECV"}, {uint64(CapSend), "FI_SEND"},
	{uint64(CapRemoteRead), "FI_REMOTE_READ"}, {uint64(CapRemoteWrite), "FI_REMOTE_WRITE"}, {uint64(CapMultiRecv), "FI_MULTI_RECV"},
	{uint64(CapRemoteCQData), "FI_REMOTE_CQ_DATA"}, {uint64(CapRMAPmem), "FI_RMA_PMEM"}, {uint64(CapSourceErr), "FI_SOURCE_ERR"},
	{uint64(CapLocalComm), "FI_LOCAL_COMM"}, {uint64(CapRemoteComm), "FI_REMOTE_COMM"}, {uint64(CapSharedAV), "FI_SHARED_AV"},
	{uint64(CapRMAEvent), "FI_RMA_EVENT"}, {uint64(CapSource), "FI_SOURCE"}, {uint64(CapNamedRxCtx), "FI_NAMED_RX_CTX"},
	{uint64(CapDirectedRecv), "FI_DIRECTED_RECV"},
}

var modeNames = []flagName{
	// In fi_tostr's order.
	{uint64(ModeContext), "FI_CONTEXT"}, {uint64(ModeMsgPrefix), "FI_MSG_PREFIX"}, {uint64(ModeAsyncIOV), "FI_ASYNC_IOV"},
	{uint64(ModeRxCQData), "FI_RX_CQ_DATA"}, {uint64(ModeLocalMR), "FI_LOCAL_MR"}, {uint64(ModeContext2), "FI_CONTEXT2"},
}

var mrModeNames = []flagName{
	{uint64(MRLocal), "FI_MR_LOCAL"}, {uint64(MRRaw), "FI_MR_RAW"}, {uint64(MRVirtAddr), "FI_MR_VIRT_ADDR"},
	{uint64(MRAllocated), "FI_MR_ALLOCATED"}, {uint64(MRProvKey), "FI_MR_PROV_KEY"}, {uint64(MRMMUNotify), "FI_MR_MMU_NOTIFY"},
	{uint64(MRRMAEvent), "FI_MR_RMA_EVENT"}, {uint64(MREndpoint), "FI_MR_ENDPOINT"}, {uint64(MRHmem), "FI_MR_HMEM"},
}

var orderNames = []flagName{
	{OrderRAR, "FI_ORDER_RAR"}, {OrderRAW, "FI_ORDER_RAW"}, {OrderRAS, "FI_ORDER_RAS"}, {OrderWAR, "FI_ORDER_WAR"},
	{OrderWAW, "FI_ORDER_WAW"}, {OrderWAS, "FI_ORDER_WAS"}, {OrderSAR, "FI_ORDER_SAR"}, {OrderSAW, "FI_ORDER_SAW"},
	{OrderSAS, "FI_ORDER_SAS"}, {OrderRMARAR, "FI_ORDER_RMA_RAR"}, {OrderRMARAW, "FI_ORDER_RMA_RAW"},
	{OrderRMAWAR, "FI_ORDER_RMA_WAR"}, {OrderRMAWAW, "FI_ORDER_RMA_WAW"}, {OrderAtomicRAR, "FI_ORDER_ATOMIC_RAR"},
	{OrderAtomicRAW, "FI_ORDER_ATOMIC_RAW"}, {OrderAtomicWAR, "FI_ORDER_ATOMIC_WAR"}, {OrderAtomicWAW, "FI_ORDER_ATOMIC_WAW"},
	{OrderStrict, "FI_ORDER_STRICT"}, {OrderData, "FI_ORDER_DATA"},
}

var opFlagNames = []flagName{
	{FlagInject, "FI_INJECT"}, {FlagCompletion, "FI_COMPLETION"}, {FlagInjectComplete, "FI_INJECT_COMPLETE"},
	{FlagTransmitComplete, "FI_TRANSMIT_COMPLETE"}, {FlagDeliveryComplete, "FI_DELIVERY_COMPLETE"}, {FlagCommitComplete, "FI_COMMIT_COMPLETE"},
}

// compOrderList prints a completion order as fi_tostr does: FI_ORDER_NONE
// or FI_ORDER_STRICT, then FI_ORDER_DATA if set.
func compOrderList(v uint64) string {
	s := "[ FI_ORDER_NONE"
	if v&OrderStrict != 0 {
		s = "[ FI_ORDER_STRICT"
	}
	if v&OrderData != 0 {
		s += ", FI_ORDER_DATA"
	}
	return s + " ]"
}

// flagList prints bits as fi_tostr does: "[ FI_MSG, FI_RMA ]", "[  ]".
func flagList(v uint64, names []flagName) string {
	var s []string
	for _, n := range names {
		if v&n.bit != 0 {
			s = append(s, n.name)
		}
	}
	return "[ " + strings.Join(s, ", ") + " ]"
}

// CapsString prints caps as fi_tostr(FI_TYPE_CAPS).
func CapsString(c Caps) string { return flagList(uint64(c), capNames) }

// ParseCaps parses "FI_MSG|FI_RMA" (case-insensitive, the FI_ prefix
// optional).
func ParseCaps(s string) (Caps, error) {
	v, err := parseFlags(s, capNames)
	return Caps(v), err
}

// ParseMode parses "FI_CONTEXT|FI_MSG_PREFIX".
func ParseMode(s string) (Mode, error) {
	v, err := parseFlags(s, modeNames)
	return Mode(v), err
}

// ParseAddrFormat parses "FI_SOCKADDR_IN".
func ParseAddrFormat(s string) (AddrFormat, error) {
	u := strings.ToUpper(strings.TrimSpace(s))
	for f, n := range addrFormatNames {
		if u == n || "FI_"+u == n {
			return f, nil
		}
	}
	return 0, fmt.Errorf("unknown address format %q", s)
}

func parseFlags(s string, names []flagName) (uint64, error) {
	var v uint64
	for _, w := range strings.Split(s, "|") {
		w = strings.ToUpper(strings.TrimSpace(w))
		if w == "" {
			continue
		}
		found := false
		for _, n := range names {
			if w == n.name || "FI_"+w == n.name {
				v |= n.bit
				found = true
			}
		}
		if !found {
			return 0, fmt.Errorf("unknown flag %q", w)
		}
	}
	return v, nil
}

var threadingNames = []string{"FI_THREAD_UNSPEC", "FI_THREAD_SAFE", "FI_THREAD_FID", "FI_THREAD_DOMAIN", "FI_THREAD_COMPLETION", "FI_THREAD_ENDPOINT"}
var progressNames = []string{"FI_PROGRESS_UNSPEC", "FI_PROGRESS_AUTO", "FI_PROGRESS_MANUAL"}
var rmNames = []string{"FI_RM_UNSPEC", "FI_RM_DISABLED", "FI_RM_ENABLED"}
var avNames = []string{"FI_AV_UNSPEC", "FI_AV_MAP", "FI_AV_TABLE"}

func pick(names []string, i int) string {
	if i >= 0 && i < len(names) {
		return names[i]
	}
	return "Unknown"
}

// addrString prints an address as fi_tostr: "fi_sockaddr_in://127.0.0.1:0".
func addrString(f AddrFormat, a netip.AddrPort, name []byte) string {
	if name != nil && f == FormatIBUD {
		if n, err := ParseUDName(name); err == nil {
			return n.String()
		}
	}
	if !a.IsValid() {
		return "(null)"
	}
	if a.Addr().Is4() || a.Addr().Is4In6() {
		return fmt.Sprintf("fi_sockaddr_in://%s:%d", a.Addr().Unmap(), a.Port())
	}
	return fmt.Sprintf("fi_sockaddr_in6://[%s]:%d", a.Addr().WithZone(""), a.Port())
}

func addrLen(a netip.AddrPort, name []byte) int {
	switch {
	case name != nil:
		return len(name)
	case !a.IsValid():
		return 0
	case a.Addr().Is4():
		return 16
	}
	return 28
}

func verString(v Version) string { return fmt.Sprintf("%d.%d", v.Major(), v.Minor()) }

// String prints the info as fi_tostr(FI_TYPE_INFO) does, which `fi_info
// -v` shows.
func (i *Info) String() string {
	var b strings.Builder
	p := func(indent int, format string, args ...any) {
		b.WriteString(strings.Repeat(" ", indent))
		fmt.Fprintf(&b, format, args...)
		b.WriteByte('\n')
	}
	p(0, "fi_info:")
	p(4, "caps: %s", CapsString(i.Caps))
	p(4, "mode: %s", flagList(uint64(i.Mode), modeNames))
	p(4, "addr_format: %s", i.AddrFormat)
	p(4, "src_addrlen: %d", addrLen(i.SrcAddr, i.SrcName))
	p(4, "dest_addrlen: %d", addrLen(i.DestAddr, i.DestName))
	p(4, "src_addr: %s", addrString(i.AddrFormat, i.SrcAddr, i.SrcName))
	p(4, "dest_addr: %s", addrString(i.AddrFormat, i.DestAddr, i.DestName))
	p(4, "handle: (nil)")
	if t := i.TxAttr; t != nil {
		p(4, "fi_tx_attr:")
		p(8, "caps: %s", CapsString(t.Caps))
		p(8, "mode: %s", flagList(uint64(t.Mode), modeNames))
		p(8, "op_flags: %s", flagList(t.OpFlags, opFlagNames))
		p(8, "msg_order: %s", flagList(t.MsgOrder, orderNames))
		p(8, "comp_order: %s", compOrderList(t.CompOrder))
		p(8, "inject_size: %d", t.InjectSize)
		p(8, "size: %d", t.Size)
		p(8, "iov_limit: %d", t.IOVLimit)
		p(8, "rma_iov_limit: %d", t.RMAIOVLimit)
		p(8, "tclass: 0x%x", t.TClass)
	}
	if r := i.RxAttr; r != nil {
		p(4, "fi_rx_attr:")
		p(8, "caps: %s", CapsString(r.Caps))
		p(8, "mode: %s", flagList(uint64(r.Mode), modeNames))
		p(8, "op_flags: %s", flagList(r.OpFlags, opFlagNames))
		p(8, "msg_order: %s", flagList(r.MsgOrder, orderNames))
		p(8, "comp_order: %s", compOrderList(r.CompOrder))
		p(8, "total_buffered_recv: %d", r.TotalBufferedRecv)
		p(8, "size: %d", r.Size)
		p(8, "iov_limit: %d", r.IOVLimit)
	}
	if e := i.EPAttr; e != nil {
		p(4, "fi_ep_attr:")
		p(8, "type: %s", e.Type)
		p(8, "protocol: %s", e.Protocol)
		p(8, "protocol_version: %d", e.ProtocolVersion)
		p(8, "max_msg_size: %d", e.MaxMsgSize)
		p(8, "msg_prefix_size: %d", e.MsgPrefixSize)
		p(8, "max_order_raw_size: %d", e.MaxOrderRAWSize)
		p(8, "max_order_war_size: %d", e.MaxOrderWARSize)
		p(8, "max_order_waw_size: %d", e.MaxOrderWAWSize)
		p(8, "mem_tag_format: 0x%016x", e.MemTagFormat)
		p(8, "tx_ctx_cnt: %d", e.TxCtxCnt)
		p(8, "rx_ctx_cnt: %d", e.RxCtxCnt)
		p(8, "auth_key_size: 0")
	}
	if d := i.DomainAttr; d != nil {
		p(4, "fi_domain_attr:")
		p(8, "domain: 0x0")
		p(8, "name: %s", d.Name)
		p(8, "threading: %s", pick(threadingNames, int(d.Threading)))
		p(8, "control_progress: %s", pick(progressNames, int(d.ControlProgress)))
		p(8, "data_progress: %s", pick(progressNames, int(d.DataProgress)))
		p(8, "resource_mgmt: %s", pick(rmNames, int(d.ResourceMgmt)))
		p(8, "av_type: %s", pick(avNames, int(d.AVType)))
		p(8, "mr_mode: %s", flagList(uint64(d.MRMode), mrModeNames))
		p(8, "mr_key_size: %d", d.MRKeySize)
		p(8, "cq_data_size: %d", d.CQDataSize)
		p(8, "cq_cnt: %d", d.CQCnt)
		p(8, "ep_cnt: %d", d.EPCnt)
		p(8, "tx_ctx_cnt: %d", d.TxCtxCnt)
		p(8, "rx_ctx_cnt: %d", d.RxCtxCnt)
		p(8, "max_ep_tx_ctx: %d", d.MaxEPTxCtx)
		p(8, "max_ep_rx_ctx: %d", d.MaxEPRxCtx)
		p(8, "max_ep_stx_ctx: %d", d.MaxEPStxCtx)
		p(8, "max_ep_srx_ctx: %d", d.MaxEPSrxCtx)
		p(8, "cntr_cnt: %d", d.CntrCnt)
		p(8, "mr_iov_limit: %d", d.MRIOVLimit)
		p(8, "caps: %s", CapsString(d.Caps))
		p(8, "mode: %s", flagList(uint64(d.Mode), modeNames))
		p(8, "auth_key_size: 0")
		p(8, "max_err_data: %d", d.MaxErrData)
		p(8, "mr_cnt: %d", d.MRCnt)
		p(8, "tclass: 0x0")
	}
	if f := i.FabricAttr; f != nil {
		p(4, "fi_fabric_attr:")
		p(8, "name: %s", f.Name)
		p(8, "prov_name: %s", f.ProvName)
		p(8, "prov_version: %s", verString(f.ProvVersion))
		p(8, "api_version: %s", verString(f.APIVersion))
	}
	p(4, "nic: (nil)")
	return b.String()
}
