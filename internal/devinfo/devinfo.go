// Package devinfo is rdma-core's ibv_devices and ibv_devinfo (libibverbs/examples/device_list.c and devinfo.c): the same options and, line for line, the same output, for every provider's devices.
package devinfo

// The devices and devinfo commands print what rdma-core's ibv_devices and
// ibv_devinfo print (libibverbs/examples/device_list.c and devinfo.c,
// rdma-core v64), byte for byte, for the devices verbs.Devices lists. The
// output code takes plain values and an io.Writer so that it can be tested
// against fixed attributes.

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"strconv"
	"strings"

	"github.com/rdmago/rdmago/internal/getopt"
	_ "github.com/rdmago/rdmago/rdmacore" // rdma-core devices, with -tags rdmacore
	_ "github.com/rdmago/rdmago/rxe"      // registers the software RoCE devices
	"github.com/rdmago/rdmago/verbs"
)

// Devices implements `rdmago devices`, the counterpart of ibv_devices.
func Devices(_ context.Context, args []string, stdout, stderr io.Writer) int {
	opts, rest, err := getopt.ParseSpecs(args, []getopt.Spec{{Short: 'h', Long: "help"}})
	switch {
	case err != nil:
		fmt.Fprintf(stderr, "rdmago devices: %v\nusage: rdmago devices\n", err)
		return 2
	case len(opts) > 0:
		fmt.Fprintln(stdout, "usage: rdmago devices\n\nLists the RDMA devices and their node GUIDs, as ibv_devices does.")
		return 0
	case len(rest) > 0:
		fmt.Fprintf(stderr, "rdmago devices: unexpected argument %q\nusage: rdmago devices\n", rest[0])
		return 2
	}
	devs, err := verbs.Devices()
	if err != nil {
		fmt.Fprintf(stderr, "rdmago devices: Failed to get IB devices list: %v\n", err)
		return 1
	}
	entries := make([]deviceEntry, len(devs))
	for i, d := range devs {
		entries[i] = deviceEntry{Name: d.Name(), GUID: d.GUID()}
	}
	out := bufio.NewWriter(stdout)
	writeDevices(out, entries)
	if err := out.Flush(); err != nil {
		fmt.Fprintf(stderr, "rdmago devices: %v\n", err)
		return 1
	}
	return 0
}

// deviceEntry is one line of the devices table: a device's name and node
// GUID (in host byte order, as ibv_devices prints it after be64toh).
type deviceEntry struct {
	Name string
	GUID uint64
}

// writeDevices writes the table ibv_devices prints: a header, then one line
// per device with its name padded to 16 columns and its node GUID as 16 hex
// digits.
func writeDevices(w io.Writer, devs []deviceEntry) {
	fmt.Fprintf(w, "    %-16s\t   node GUID\n", "device")
	fmt.Fprintf(w, "    %-16s\t----------------\n", "------")
	for _, d := range devs {
		fmt.Fprintf(w, "    %-16s\t%016x\n", d.Name, d.GUID)
	}
}

// writeDeviceList writes what ibv_devinfo -l prints: the number of devices,
// then one name a line indented by a tab, then a blank line.
func writeDeviceList(w io.Writer, names []string) {
	s := "s"
	if len(names) == 1 {
		s = ""
	}
	fmt.Fprintf(w, "%d HCA%s found:\n", len(names), s)
	for _, n := range names {
		fmt.Fprintf(w, "\t%s\n", n)
	}
	fmt.Fprintln(w)
}

// Devinfo implements `rdmago devinfo`, the counterpart of ibv_devinfo:
// it opens each device (or the one -d names), queries it, prints its
// attributes and closes it again.
func Devinfo(_ context.Context, args []string, stdout, stderr io.Writer) int {
	var (
		devName       string
		port          int
		list, verbose bool
	)
	specs := []getopt.Spec{
		{Short: 'd', Long: "ib-dev", Arg: "DEV", Usage: "use IB device DEV", Default: "all devices"},
		{Short: 'i', Long: "ib-port", Arg: "PORT", Usage: "use port PORT of IB device", Default: "all ports"},
		{Short: 'l', Long: "list", Usage: "print only the IB devices names"},
		{Short: 'v', Long: "verbose", Usage: "print all the attributes of the IB device(s)"},
		{Short: 'h', Long: "help", Usage: "print this help"},
	}
	usage := func(w io.Writer) {
		fmt.Fprintln(w, "usage: rdmago devinfo [options]")
		fmt.Fprintln(w, "\nPrints the attributes of RDMA devices and their ports, as ibv_devinfo does.")
		fmt.Fprintln(w, "\noptions (those of ibv_devinfo):")
		getopt.PrintUsage(w, specs)
	}
	fail := func(msg string) int {
		fmt.Fprintf(stderr, "rdmago devinfo: %s\n", msg)
		fmt.Fprintln(stderr, "run 'rdmago devinfo --help' for the options")
		return 2
	}
	opts, rest, err := getopt.ParseSpecs(args, specs)
	if err != nil {
		return fail(err.Error())
	}
	for _, op := range opts {
		switch op.Name {
		case 'h':
			usage(stdout)
			return 0
		case 'd':
			devName = op.Arg
		case 'i':
			if port, err = op.Int(1, 255); err != nil {
				return fail(err.Error() + ": ports are numbered from 1")
			}
		case 'l':
			list = true
		case 'v':
			verbose = true
		}
	}
	if len(rest) > 0 {
		return fail(fmt.Sprintf("unexpected argument %q", rest[0]))
	}

	devs, err := verbs.Devices()
	if err != nil {
		fmt.Fprintf(stderr, "rdmago devinfo: Failed to get IB devices list: %v\n", err)
		return 1
	}
	names := make([]string, len(devs))
	for i, d := range devs {
		names[i] = d.Name()
	}
	out := bufio.NewWriter(stdout)
	defer out.Flush()
	if list {
		writeDeviceList(out, names)
		return 0
	}
	if devName != "" {
		var found *verbs.Device
		for _, d := range devs {
			if d.Name() == devName {
				found = d
			}
		}
		if found == nil {
			have := "none"
			if len(names) > 0 {
				have = strings.Join(names, ", ")
			}
			fmt.Fprintf(stderr, "rdmago devinfo: IB device '%s' wasn't found (devices: %s)\n", devName, have)
			return 1
		}
		devs = []*verbs.Device{found}
	}
	if len(devs) == 0 {
		fmt.Fprintln(stderr, "rdmago devinfo: No IB devices found")
		return 1
	}
	status := 0
	for _, d := range devs {
		hca, err := queryHCA(d, uint8(port), verbose)
		if err != nil {
			out.Flush()
			fmt.Fprintf(stderr, "rdmago devinfo: %v\n", err)
			status = 1
			continue
		}
		writeHCA(out, hca, verbose)
	}
	if err := out.Flush(); err != nil {
		fmt.Fprintf(stderr, "rdmago devinfo: %v\n", err)
		return 1
	}
	return status
}

// hcaInfo is everything devinfo prints about one device.
type hcaInfo struct {
	Name      string
	Transport verbs.TransportType
	Attr      verbs.DeviceAttr
	// NumCompVectors is the context's number of completion vectors
	// (ibv_context.num_comp_vectors), printed with -v.
	NumCompVectors int
	// Ports are the ports to print, in order.
	Ports []portInfo
}

// portInfo is what devinfo prints about one port.
type portInfo struct {
	Num  uint8
	Attr verbs.PortAttr
	// GIDs is the port's GID table, queried for -v only. Null entries are
	// kept here and skipped when printing, as ibv_devinfo skips them.
	GIDs []gidEntry
}

// gidType is the type of a GID table entry (enum ibv_gid_type_sysfs).
type gidType int

// GID types, numbered as in libibverbs; gidTypeInvalid is what ibv_devinfo
// uses when ibv_query_gid_type fails.
const (
	gidTypeIBRoCEv1 gidType = 0 // IBV_GID_TYPE_SYSFS_IB_ROCE_V1
	gidTypeRoCEv2   gidType = 1 // IBV_GID_TYPE_SYSFS_ROCE_V2
	gidTypeInvalid  gidType = 2 // DEVINFO_INVALID_GID_TYPE
)

// gidEntry is one entry of a port's GID table.
type gidEntry struct {
	Index int
	GID   verbs.GID
	Type  gidType
}

// defaultNumCompVectors is the number of completion vectors devinfo reports:
// verbs.Context has no num_comp_vectors, and CreateCQ ignores the vector it
// is given, so every CQ effectively shares one.
const defaultNumCompVectors = 1

// queryHCA opens dev, queries what devinfo prints (every port, or only
// port if it is not 0; GID tables only if verbose) and closes it again.
func queryHCA(dev *verbs.Device, port uint8, verbose bool) (hca *hcaInfo, err error) {
	ctx, err := dev.Open()
	if err != nil {
		return nil, fmt.Errorf("failed to open device %s: %w", dev.Name(), err)
	}
	defer func() {
		if cerr := ctx.Close(); cerr != nil && err == nil {
			hca, err = nil, fmt.Errorf("failed to close device %s: %w", dev.Name(), cerr)
		}
	}()
	attr, err := ctx.QueryDevice()
	if err != nil {
		return nil, fmt.Errorf("failed to query device props of %s: %w", dev.Name(), err)
	}
	if port != 0 && port > attr.PhysPortCnt {
		return nil, fmt.Errorf("invalid port requested for device %s: port %d, device has %d", dev.Name(), port, attr.PhysPortCnt)
	}
	hca = &hcaInfo{Name: dev.Name(), Transport: dev.TransportType(), Attr: attr, NumCompVectors: defaultNumCompVectors}
	for p := 1; p <= int(attr.PhysPortCnt); p++ {
		if port != 0 && p != int(port) {
			continue
		}
		pa, err := ctx.QueryPort(uint8(p))
		if err != nil {
			return nil, fmt.Errorf("failed to query port %d props of %s: %w", p, dev.Name(), err)
		}
		pi := portInfo{Num: uint8(p), Attr: pa}
		if verbose {
			// verbs has no ibv_query_gid_type: an Ethernet port's GIDs
			// are RoCEv2 (the only kind rxe has), others are IB GIDs.
			typ := gidTypeIBRoCEv1
			if pa.LinkLayer == verbs.LinkLayerEthernet {
				typ = gidTypeRoCEv2
			}
			for i := 0; i < pa.GIDTblLen; i++ {
				g, err := ctx.QueryGID(uint8(p), i)
				if err != nil {
					return nil, fmt.Errorf("failed to query gid to port %d, index %d of %s: %w", p, i, dev.Name(), err)
				}
				pi.GIDs = append(pi.GIDs, gidEntry{Index: i, GID: g, Type: typ})
			}
		}
		hca.Ports = append(hca.Ports, pi)
	}
	return hca, nil
}

// writeHCA writes what ibv_devinfo prints for one device: its attributes,
// then each port's.
func writeHCA(w io.Writer, h *hcaInfo, verbose bool) {
	writeDeviceAttr(w, h.Name, h.Transport, &h.Attr, h.NumCompVectors, verbose)
	for i := range h.Ports {
		writePort(w, h.Transport, &h.Ports[i], verbose)
	}
}

// writeDeviceAttr writes the device part of ibv_devinfo's output: from
// hca_id to phys_port_cnt, and with verbose the limits, capability flags
// and extended attributes. The extended attributes (ibv_device_attr_ex)
// that verbs.DeviceAttr lacks are printed as a device without ODP,
// timestamps, TSO, RSS, packet pacing or tag matching reports them, which
// is what rxe reports.
func writeDeviceAttr(w io.Writer, name string, tr verbs.TransportType, a *verbs.DeviceAttr, numCompVectors int, verbose bool) {
	fmt.Fprintf(w, "hca_id:\t%s\n", name)
	fmt.Fprintf(w, "\ttransport:\t\t\t%s (%d)\n", transportStr(tr), tr)
	if a.FWVer != "" {
		fmt.Fprintf(w, "\tfw_ver:\t\t\t\t%s\n", a.FWVer)
	}
	fmt.Fprintf(w, "\tnode_guid:\t\t\t%s\n", guidStr(a.NodeGUID))
	fmt.Fprintf(w, "\tsys_image_guid:\t\t\t%s\n", guidStr(a.SysImageGUID))
	fmt.Fprintf(w, "\tvendor_id:\t\t\t0x%04x\n", a.VendorID)
	fmt.Fprintf(w, "\tvendor_part_id:\t\t\t%d\n", a.VendorPartID)
	fmt.Fprintf(w, "\thw_ver:\t\t\t\t0x%X\n", a.HWVer)
	fmt.Fprintf(w, "\tphys_port_cnt:\t\t\t%d\n", a.PhysPortCnt)
	if !verbose {
		return
	}
	fmt.Fprintf(w, "\tmax_mr_size:\t\t\t0x%x\n", a.MaxMRSize)
	fmt.Fprintf(w, "\tpage_size_cap:\t\t\t0x%x\n", a.PageSizeCap)
	fmt.Fprintf(w, "\tmax_qp:\t\t\t\t%d\n", a.MaxQP)
	fmt.Fprintf(w, "\tmax_qp_wr:\t\t\t%d\n", a.MaxQPWR)
	fmt.Fprintf(w, "\tdevice_cap_flags:\t\t0x%08x\n", a.DeviceCapFlags)
	writeDeviceCapFlags(w, a.DeviceCapFlags)
	fmt.Fprintf(w, "\tmax_sge:\t\t\t%d\n", a.MaxSGE)
	fmt.Fprintf(w, "\tmax_sge_rd:\t\t\t%d\n", a.MaxSGERD)
	fmt.Fprintf(w, "\tmax_cq:\t\t\t\t%d\n", a.MaxCQ)
	fmt.Fprintf(w, "\tmax_cqe:\t\t\t%d\n", a.MaxCQE)
	fmt.Fprintf(w, "\tmax_mr:\t\t\t\t%d\n", a.MaxMR)
	fmt.Fprintf(w, "\tmax_pd:\t\t\t\t%d\n", a.MaxPD)
	fmt.Fprintf(w, "\tmax_qp_rd_atom:\t\t\t%d\n", a.MaxQPRdAtom)
	fmt.Fprintf(w, "\tmax_ee_rd_atom:\t\t\t%d\n", a.MaxEECRdAtom)
	fmt.Fprintf(w, "\tmax_res_rd_atom:\t\t%d\n", a.MaxResRdAtom)
	fmt.Fprintf(w, "\tmax_qp_init_rd_atom:\t\t%d\n", a.MaxQPInitRdAtom)
	fmt.Fprintf(w, "\tmax_ee_init_rd_atom:\t\t%d\n", a.MaxEECInitRdAtom)
	fmt.Fprintf(w, "\tatomic_cap:\t\t\t%s (%d)\n", atomicCapStr(a.AtomicCap), a.AtomicCap)
	fmt.Fprintf(w, "\tmax_ee:\t\t\t\t%d\n", a.MaxEE)
	fmt.Fprintf(w, "\tmax_rdd:\t\t\t%d\n", a.MaxRDD)
	fmt.Fprintf(w, "\tmax_mw:\t\t\t\t%d\n", a.MaxMW)
	fmt.Fprintf(w, "\tmax_raw_ipv6_qp:\t\t%d\n", a.MaxRawIPv6QP)
	fmt.Fprintf(w, "\tmax_raw_ethy_qp:\t\t%d\n", a.MaxRawEthyQP)
	fmt.Fprintf(w, "\tmax_mcast_grp:\t\t\t%d\n", a.MaxMcastGrp)
	fmt.Fprintf(w, "\tmax_mcast_qp_attach:\t\t%d\n", a.MaxMcastQPAttach)
	fmt.Fprintf(w, "\tmax_total_mcast_qp_attach:\t%d\n", a.MaxTotalMcastQPAttach)
	fmt.Fprintf(w, "\tmax_ah:\t\t\t\t%d\n", a.MaxAH)
	fmt.Fprintf(w, "\tmax_fmr:\t\t\t%d\n", a.MaxFMR)
	if a.MaxFMR != 0 {
		fmt.Fprintf(w, "\tmax_map_per_fmr:\t\t%d\n", a.MaxMapPerFMR)
	}
	fmt.Fprintf(w, "\tmax_srq:\t\t\t%d\n", a.MaxSRQ)
	if a.MaxSRQ != 0 {
		fmt.Fprintf(w, "\tmax_srq_wr:\t\t\t%d\n", a.MaxSRQWR)
		fmt.Fprintf(w, "\tmax_srq_sge:\t\t\t%d\n", a.MaxSRQSGE)
	}
	fmt.Fprintf(w, "\tmax_pkeys:\t\t\t%d\n", a.MaxPKeys)
	// No completion counters: ibv_query_comp_cntr_caps fails, and
	// ibv_devinfo prints neither max_comp_cntr nor comp_cntr_caps.
	fmt.Fprintf(w, "\tlocal_ca_ack_delay:\t\t%d\n", a.LocalCADelayAck)
	// print_odp_caps with all capabilities zero.
	fmt.Fprint(w, "\tgeneral_odp_caps:\n")
	for _, t := range []string{"rc", "uc", "ud", "xrc"} {
		fmt.Fprintf(w, "\t%s_odp_caps:\n\t\t\t\t\tNO SUPPORT\n", t)
	}
	fmt.Fprint(w, "\tcompletion_timestamp_mask not supported\n")
	fmt.Fprint(w, "\tcore clock not supported\n")
	// device_cap_flags_ex holds device_cap_flags in its low 32 bits and
	// nothing above, so print_device_cap_flags_ex names no flag.
	fmt.Fprintf(w, "\tdevice_cap_flags_ex:\t\t0x%X\n", uint64(a.DeviceCapFlags))
	fmt.Fprint(w, "\ttso_caps:\n\t\tmax_tso:\t\t\t0\n")
	fmt.Fprint(w, "\trss_caps:\n"+
		"\t\tmax_rwq_indirection_tables:\t\t\t0\n"+
		"\t\tmax_rwq_indirection_table_size:\t\t\t0\n"+
		"\t\trx_hash_function:\t\t\t\t0x0\n"+
		"\t\trx_hash_fields_mask:\t\t\t\t0x0\n")
	fmt.Fprint(w, "\tmax_wq_type_rq:\t\t\t0\n")
	fmt.Fprint(w, "\tpacket_pacing_caps:\n"+
		"\t\tqp_rate_limit_min:\t0kbps\n"+
		"\t\tqp_rate_limit_max:\t0kbps\n")
	fmt.Fprint(w, "\ttag matching not supported\n")
	fmt.Fprintf(w, "\tnum_comp_vectors:\t\t%d\n", numCompVectors)
}

// deviceCapFlagNames are the enum ibv_device_cap_flags bits ibv_devinfo
// names, in the order it prints them.
var deviceCapFlagNames = []struct {
	bit  uint32
	name string
}{
	{1 << 0, "RESIZE_MAX_WR"},
	{1 << 1, "BAD_PKEY_CNTR"},
	{1 << 2, "BAD_QKEY_CNTR"},
	{1 << 3, "RAW_MULTI"},
	{1 << 4, "AUTO_PATH_MIG"},
	{1 << 5, "CHANGE_PHY_PORT"},
	{1 << 6, "UD_AV_PORT_ENFORCE"},
	{1 << 7, "CURR_QP_STATE_MOD"},
	{1 << 8, "SHUTDOWN_PORT"},
	{1 << 9, "INIT_TYPE"},
	{1 << 10, "PORT_ACTIVE_EVENT"},
	{1 << 11, "SYS_IMAGE_GUID"},
	{1 << 12, "RC_RNR_NAK_GEN"},
	{1 << 13, "SRQ_RESIZE"},
	{1 << 14, "N_NOTIFY_CQ"},
	{1 << 17, "MEM_WINDOW"},
	{1 << 18, "UD_IP_CSUM"},
	{1 << 20, "XRC"},
	{1 << 21, "MEM_MGT_EXTENSIONS"},
	{1 << 23, "MEM_WINDOW_TYPE_2A"},
	{1 << 24, "MEM_WINDOW_TYPE_2B"},
	{1 << 25, "RC_IP_CSUM"},
	{1 << 26, "RAW_IP_CSUM"},
	{1 << 29, "MANAGED_FLOW_STEERING"},
}

// writeDeviceCapFlags writes one line per device capability flag, as
// ibv_devinfo's print_device_cap_flags does, then the bits it has no name
// for.
func writeDeviceCapFlags(w io.Writer, flags uint32) {
	unknown := flags
	for _, f := range deviceCapFlagNames {
		if flags&f.bit != 0 {
			fmt.Fprintf(w, "\t\t\t\t\t%s\n", f.name)
		}
		unknown &^= f.bit
	}
	if unknown != 0 {
		fmt.Fprintf(w, "\t\t\t\t\tUnknown flags: 0x%X\n", unknown)
	}
}

// writePort writes the port part of ibv_devinfo's output: from port: to
// link_layer, with verbose the port's limits and GID table, then a blank
// line.
func writePort(w io.Writer, tr verbs.TransportType, p *portInfo, verbose bool) {
	a := &p.Attr
	fmt.Fprintf(w, "\t\tport:\t%d\n", p.Num)
	fmt.Fprintf(w, "\t\t\tstate:\t\t\t%s (%d)\n", portStateStr(a.State), a.State)
	fmt.Fprintf(w, "\t\t\tmax_mtu:\t\t%s (%d)\n", a.MaxMTU, a.MaxMTU)
	fmt.Fprintf(w, "\t\t\tactive_mtu:\t\t%s (%d)\n", a.ActiveMTU, a.ActiveMTU)
	fmt.Fprintf(w, "\t\t\tsm_lid:\t\t\t%d\n", a.SMLID)
	fmt.Fprintf(w, "\t\t\tport_lid:\t\t%d\n", a.LID)
	fmt.Fprintf(w, "\t\t\tport_lmc:\t\t0x%02x\n", a.LMC)
	fmt.Fprintf(w, "\t\t\tlink_layer:\t\t%s\n", linkLayerStr(a.LinkLayer))
	if verbose {
		fmt.Fprintf(w, "\t\t\tmax_msg_sz:\t\t0x%x\n", a.MaxMsgSz)
		fmt.Fprintf(w, "\t\t\tport_cap_flags:\t\t0x%08x\n", a.PortCapFlags)
		fmt.Fprintf(w, "\t\t\tport_cap_flags2:\t0x%04x\n", 0) // not in verbs.PortAttr
		fmt.Fprintf(w, "\t\t\tmax_vl_num:\t\t%s (%d)\n", vlStr(a.MaxVLNum), a.MaxVLNum)
		fmt.Fprintf(w, "\t\t\tbad_pkey_cntr:\t\t0x%x\n", a.BadPKeyCntr)
		fmt.Fprintf(w, "\t\t\tqkey_viol_cntr:\t\t0x%x\n", a.QKeyViolCntr)
		fmt.Fprintf(w, "\t\t\tsm_sl:\t\t\t%d\n", a.SMSL)
		fmt.Fprintf(w, "\t\t\tpkey_tbl_len:\t\t%d\n", a.PKeyTblLen)
		fmt.Fprintf(w, "\t\t\tgid_tbl_len:\t\t%d\n", a.GIDTblLen)
		fmt.Fprintf(w, "\t\t\tsubnet_timeout:\t\t%d\n", a.SubnetTimeout)
		fmt.Fprintf(w, "\t\t\tinit_type_reply:\t%d\n", a.InitTypeReply)
		fmt.Fprintf(w, "\t\t\tactive_width:\t\t%sX (%d)\n", widthStr(a.ActiveWidth), a.ActiveWidth)
		fmt.Fprintf(w, "\t\t\tactive_speed:\t\t%s (%d)\n", speedStr(a.ActiveSpeed), a.ActiveSpeed)
		if tr == verbs.TransportIB {
			fmt.Fprintf(w, "\t\t\tphys_state:\t\t%s (%d)\n", physStateStr(a.PhysState), a.PhysState)
		}
		for _, g := range p.GIDs {
			writeGID(w, g, a.LinkLayer)
		}
	}
	fmt.Fprintln(w)
}

// writeGID writes a GID table line as ibv_devinfo's print_formated_gid
// does: nothing for a null GID (one whose interface ID, the last 8 bytes,
// is zero) or a GID of unknown type; IB and RoCE v1 GIDs as eight groups of
// four hex digits; RoCE v2 GIDs as inet_ntop writes IPv6 addresses; on
// Ethernet ports followed by the GID type.
func writeGID(w io.Writer, g gidEntry, ll verbs.LinkLayer) {
	if [8]byte(g.GID[8:]) == [8]byte{} {
		return
	}
	suffix := ""
	if ll == verbs.LinkLayerEthernet {
		suffix = ", " + gidTypeStr(g.Type)
	}
	switch g.Type {
	case gidTypeIBRoCEv1:
		fmt.Fprintf(w, "\t\t\tGID[%3d]:\t\t%s%s\n", g.Index, g.GID, suffix)
	case gidTypeRoCEv2:
		fmt.Fprintf(w, "\t\t\tGID[%3d]:\t\t%s%s\n", g.Index, inetNtop6(g.GID), suffix)
	}
}

// inetNtop6 formats a 16-byte address exactly as glibc's inet_ntop(AF_INET6)
// does: hex groups without leading zeros, the first longest run of two or
// more zero groups as "::", and the last 32 bits in dotted decimal for
// IPv4-mapped (::ffff:a.b.c.d) and IPv4-compatible (::a.b.c.d) addresses.
func inetNtop6(a [16]byte) string {
	var words [8]int
	for i := range words {
		words[i] = int(a[2*i])<<8 | int(a[2*i+1])
	}
	bestBase, bestLen, curBase, curLen := -1, 0, -1, 0
	for i, v := range words {
		if v == 0 {
			if curBase == -1 {
				curBase, curLen = i, 1
			} else {
				curLen++
			}
			continue
		}
		if curBase != -1 {
			if bestBase == -1 || curLen > bestLen {
				bestBase, bestLen = curBase, curLen
			}
			curBase = -1
		}
	}
	if curBase != -1 && (bestBase == -1 || curLen > bestLen) {
		bestBase, bestLen = curBase, curLen
	}
	if bestBase != -1 && bestLen < 2 {
		bestBase = -1
	}
	var b []byte
	for i := 0; i < len(words); i++ {
		if bestBase != -1 && i >= bestBase && i < bestBase+bestLen {
			if i == bestBase {
				b = append(b, ':')
			}
			continue
		}
		if i != 0 {
			b = append(b, ':')
		}
		if i == 6 && bestBase == 0 && (bestLen == 6 || bestLen == 5 && words[5] == 0xffff) {
			b = fmt.Appendf(b, "%d.%d.%d.%d", a[12], a[13], a[14], a[15])
			break
		}
		b = strconv.AppendUint(b, uint64(words[i]), 16)
	}
	if bestBase != -1 && bestBase+bestLen == len(words) {
		b = append(b, ':')
	}
	return string(b)
}

// guidStr formats a GUID as ibv_devinfo does: four groups of four hex
// digits separated by colons.
func guidStr(g uint64) string {
	return fmt.Sprintf("%04x:%04x:%04x:%04x", g>>48&0xffff, g>>32&0xffff, g>>16&0xffff, g&0xffff)
}

// The functions below name values as ibv_devinfo's own tables do, which
// differ in places from libibverbs' *_str functions and from the String
// methods of package verbs.

// transportStr names a transport as ibv_devinfo's transport_str does.
func transportStr(t verbs.TransportType) string {
	switch t {
	case 0:
		return "InfiniBand"
	case 1:
		return "iWARP"
	case 2:
		return "usNIC"
	case 3:
		return "usNIC UDP"
	case 4:
		return "unspecified"
	}
	return "invalid transport"
}

// portStateStr names a port state as ibv_devinfo's port_state_str does.
func portStateStr(s verbs.PortState) string {
	switch s {
	case verbs.PortDown:
		return "PORT_DOWN"
	case verbs.PortInit:
		return "PORT_INIT"
	case verbs.PortArmed:
		return "PORT_ARMED"
	case verbs.PortActive:
		return "PORT_ACTIVE"
	}
	return "invalid state"
}

// physStateStr names a physical port state as ibv_devinfo's
// port_phy_state_str does (including its spelling of TRAINNING).
func physStateStr(s uint8) string {
	switch s {
	case 1:
		return "SLEEP"
	case 2:
		return "POLLING"
	case 3:
		return "DISABLED"
	case 4:
		return "PORT_CONFIGURATION TRAINNING"
	case 5:
		return "LINK_UP"
	case 6:
		return "LINK_ERROR_RECOVERY"
	case 7:
		return "PHY TEST"
	}
	return "invalid physical state"
}

// atomicCapStr names an atomic capability as ibv_devinfo's atomic_cap_str
// does.
func atomicCapStr(a verbs.AtomicCap) string {
	switch a {
	case verbs.AtomicNone:
		return "ATOMIC_NONE"
	case verbs.AtomicHCA:
		return "ATOMIC_HCA"
	case verbs.AtomicGlob:
		return "ATOMIC_GLOB"
	}
	return "invalid atomic capability"
}

// widthStr gives a port width code's lane count as ibv_devinfo's width_str
// does.
func widthStr(w uint8) string {
	switch w {
	case 1:
		return "1"
	case 2:
		return "4"
	case 4:
		return "8"
	case 8:
		return "12"
	case 16:
		return "2"
	}
	return "invalid width"
}

// speedStr gives a port speed code's per-lane rate as ibv_devinfo's
// speed_str does.
func speedStr(s uint8) string {
	switch s {
	case 1:
		return "2.5 Gbps"
	case 2:
		return "5.0 Gbps"
	case 4, 8:
		return "10.0 Gbps"
	case 16:
		return "14.0 Gbps"
	case 32:
		return "25.0 Gbps"
	case 64:
		return "50.0 Gbps"
	case 128:
		return "100.0 Gbps"
	}
	return "invalid speed"
}

// vlStr gives a max_vl_num code's number of virtual lanes as ibv_devinfo's
// vl_str does.
func vlStr(v uint8) string {
	switch v {
	case 1:
		return "1"
	case 2:
		return "2"
	case 3:
		return "4"
	case 4:
		return "8"
	case 5:
		return "15"
	}
	return "invalid value"
}

// linkLayerStr names a link layer as ibv_devinfo's link_layer_str does.
func linkLayerStr(l verbs.LinkLayer) string {
	switch l {
	case verbs.LinkLayerUnspecified:
		return "Unspecified"
	case verbs.LinkLayerInfiniBand:
		return "InfiniBand"
	case verbs.LinkLayerEthernet:
		return "Ethernet"
	}
	return "Unknown"
}

// gidTypeStr names a GID type as ibv_devinfo's gid_type_str does.
func gidTypeStr(t gidType) string {
	switch t {
	case gidTypeIBRoCEv1:
		return "RoCE v1"
	case gidTypeRoCEv2:
		return "RoCE v2"
	}
	return "Invalid gid type"
}
