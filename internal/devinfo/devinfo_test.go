package devinfo

import (
	"bytes"
	"fmt"
	"strings"
	"testing"

	"github.com/rdmago/rdmago/verbs"
)

// The expected texts below are written by hand from rdma-core's
// libibverbs/examples/device_list.c and devinfo.c (v64): each line is the C
// format string with the test's values filled in.

func TestWriteDevicesPrintsIBVDevicesTable(t *testing.T) {
	const header = "    device          \t   node GUID\n" +
		"    ------          \t----------------\n"
	tests := []struct {
		name string
		devs []deviceEntry
		want string
	}{
		{"no devices prints only the header", nil, header},
		{"one device", []deviceEntry{{"rxe_lo", 0x022980a016c8ee7b}},
			header + "    rxe_lo          \t022980a016c8ee7b\n"},
		{"small GUID is zero-padded to 16 digits", []deviceEntry{{"mlx5_0", 0x1a2b}},
			header + "    mlx5_0          \t0000000000001a2b\n"},
		{"name longer than 16 columns is not cut", []deviceEntry{{"rxe_enp0s31f6_long", 0xffffffffffffffff}},
			header + "    rxe_enp0s31f6_long\tffffffffffffffff\n"},
		{"devices in the order given", []deviceEntry{{"rxe_eth0", 1}, {"rxe_lo", 2}},
			header + "    rxe_eth0        \t0000000000000001\n" +
				"    rxe_lo          \t0000000000000002\n"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var b bytes.Buffer
			writeDevices(&b, tt.devs)
			if got := b.String(); got != tt.want {
				t.Errorf("got\n%q\nwant\n%q", got, tt.want)
			}
		})
	}
}

func TestWriteDeviceListPrintsIBVDevinfoList(t *testing.T) {
	tests := []struct {
		name  string
		names []string
		want  string
	}{
		{"no devices is plural", nil, "0 HCAs found:\n\n"},
		{"one device is singular", []string{"rxe_lo"}, "1 HCA found:\n\trxe_lo\n\n"},
		{"two devices", []string{"rxe_eth0", "rxe_lo"}, "2 HCAs found:\n\trxe_eth0\n\trxe_lo\n\n"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var b bytes.Buffer
			writeDeviceList(&b, tt.names)
			if got := b.String(); got != tt.want {
				t.Errorf("got %q, want %q", got, tt.want)
			}
		})
	}
}

// rxeAttr is a device as rdmago's rxe reports it.
var rxeAttr = verbs.DeviceAttr{
	FWVer: "0.0.0", NodeGUID: 0x022980a016c8ee7b, SysImageGUID: 0x022980a016c8ee7b,
	MaxMRSize: 1 << 40, PageSizeCap: 0xfffff000, VendorID: 0xffffff,
	MaxQP: 65536, MaxQPWR: 16384, DeviceCapFlags: 0x01223c76,
	MaxSGE: 32, MaxSGERD: 32, MaxCQ: 16384, MaxCQE: 32767, MaxMR: 65536, MaxPD: 32752,
	MaxQPRdAtom: 128, MaxResRdAtom: 258048, MaxQPInitRdAtom: 128, AtomicCap: verbs.AtomicHCA,
	MaxMW: 65536, MaxMcastGrp: 8192, MaxMcastQPAttach: 56, MaxTotalMcastQPAttach: 458752,
	MaxAH: 32767, MaxSRQ: 960, MaxSRQWR: 16384, MaxSRQSGE: 32, MaxPKeys: 64,
	LocalCADelayAck: 15, PhysPortCnt: 1, MaxInlineData: 400,
}

// rxePort is a port as rdmago's rxe reports it on a 1500-byte Ethernet.
var rxePort = verbs.PortAttr{
	State: verbs.PortActive, MaxMTU: verbs.MTU4096, ActiveMTU: verbs.MTU1024, GIDTblLen: 4,
	PortCapFlags: 0x04010000, MaxMsgSz: 0x800000, PKeyTblLen: 1, MaxVLNum: 1,
	ActiveWidth: 2, ActiveSpeed: 32, PhysState: 5, LinkLayer: verbs.LinkLayerEthernet,
}

// gid builds a GID from its sixteen bytes written as 32 hex digits.
func gid(t *testing.T, hex string) verbs.GID {
	t.Helper()
	g, err := verbs.ParseGIDHex(hex)
	if err != nil {
		t.Fatal(err)
	}
	return g
}

func TestWriteHCAPrintsIBVDevinfoLayout(t *testing.T) {
	// The port lines common to the brief and the verbose listing of rxe.
	const rxePortBrief = "\t\tport:\t1\n" +
		"\t\t\tstate:\t\t\tPORT_ACTIVE (4)\n" +
		"\t\t\tmax_mtu:\t\t4096 (5)\n" +
		"\t\t\tactive_mtu:\t\t1024 (3)\n" +
		"\t\t\tsm_lid:\t\t\t0\n" +
		"\t\t\tport_lid:\t\t0\n" +
		"\t\t\tport_lmc:\t\t0x00\n" +
		"\t\t\tlink_layer:\t\tEthernet\n"
	const rxeHeader = "hca_id:\trxe_eth0\n" +
		"\ttransport:\t\t\tInfiniBand (0)\n" +
		"\tfw_ver:\t\t\t\t0.0.0\n" +
		"\tnode_guid:\t\t\t0229:80a0:16c8:ee7b\n" +
		"\tsys_image_guid:\t\t\t0229:80a0:16c8:ee7b\n" +
		"\tvendor_id:\t\t\t0xffffff\n" +
		"\tvendor_part_id:\t\t\t0\n" +
		"\thw_ver:\t\t\t\t0x0\n" +
		"\tphys_port_cnt:\t\t\t1\n"
	rxeGIDs := []gidEntry{
		{0, gid(t, "fe800000000000000000000000000000"), gidTypeRoCEv2}, // null: interface ID zero
		{1, gid(t, "fe8000000000000000fc00fffe000001"), gidTypeRoCEv2},
		{2, gid(t, "00000000000000000000ffffc0000202"), gidTypeRoCEv2},
		{3, gid(t, "fd000000000000000000000000000002"), gidTypeInvalid}, // type unknown: not printed
	}

	hwAttr := verbs.DeviceAttr{
		NodeGUID: 0x0002c90300a1b2c3, SysImageGUID: 0x0002c90300a1b2c6,
		VendorID: 0x02c9, VendorPartID: 4099, HWVer: 0xb0, PhysPortCnt: 2,
	}
	ibPort := func(n uint8, s verbs.PortState) portInfo {
		return portInfo{Num: n, Attr: verbs.PortAttr{
			State: s, MaxMTU: verbs.MTU4096, ActiveMTU: verbs.MTU2048,
			LID: 7, SMLID: 1, LMC: 2, LinkLayer: verbs.LinkLayerInfiniBand,
		}}
	}

	tests := []struct {
		name    string
		hca     hcaInfo
		verbose bool
		want    string
	}{
		{
			name:    "rxe device brief",
			hca:     hcaInfo{"rxe_eth0", verbs.TransportIB, rxeAttr, 1, []portInfo{{Num: 1, Attr: rxePort}}},
			verbose: false,
			want:    rxeHeader + rxePortBrief + "\n",
		},
		{
			name: "device without firmware version and two ports brief",
			hca: hcaInfo{"mlx4_0", verbs.TransportIB, hwAttr, 1, []portInfo{
				ibPort(1, verbs.PortActive), ibPort(2, verbs.PortDown),
			}},
			want: "hca_id:\tmlx4_0\n" +
				"\ttransport:\t\t\tInfiniBand (0)\n" +
				"\tnode_guid:\t\t\t0002:c903:00a1:b2c3\n" +
				"\tsys_image_guid:\t\t\t0002:c903:00a1:b2c6\n" +
				"\tvendor_id:\t\t\t0x02c9\n" +
				"\tvendor_part_id:\t\t\t4099\n" +
				"\thw_ver:\t\t\t\t0xB0\n" +
				"\tphys_port_cnt:\t\t\t2\n" +
				"\t\tport:\t1\n" +
				"\t\t\tstate:\t\t\tPORT_ACTIVE (4)\n" +
				"\t\t\tmax_mtu:\t\t4096 (5)\n" +
				"\t\t\tactive_mtu:\t\t2048 (4)\n" +
				"\t\t\tsm_lid:\t\t\t1\n" +
				"\t\t\tport_lid:\t\t7\n" +
				"\t\t\tport_lmc:\t\t0x02\n" +
				"\t\t\tlink_layer:\t\tInfiniBand\n" +
				"\n" +
				"\t\tport:\t2\n" +
				"\t\t\tstate:\t\t\tPORT_DOWN (1)\n" +
				"\t\t\tmax_mtu:\t\t4096 (5)\n" +
				"\t\t\tactive_mtu:\t\t2048 (4)\n" +
				"\t\t\tsm_lid:\t\t\t1\n" +
				"\t\t\tport_lid:\t\t7\n" +
				"\t\t\tport_lmc:\t\t0x02\n" +
				"\t\t\tlink_layer:\t\tInfiniBand\n" +
				"\n",
		},
		{
			name:    "rxe device verbose",
			hca:     hcaInfo{"rxe_eth0", verbs.TransportIB, rxeAttr, 1, []portInfo{{Num: 1, Attr: rxePort, GIDs: rxeGIDs}}},
			verbose: true,
			want: rxeHeader +
				"\tmax_mr_size:\t\t\t0x10000000000\n" +
				"\tpage_size_cap:\t\t\t0xfffff000\n" +
				"\tmax_qp:\t\t\t\t65536\n" +
				"\tmax_qp_wr:\t\t\t16384\n" +
				"\tdevice_cap_flags:\t\t0x01223c76\n" +
				"\t\t\t\t\tBAD_PKEY_CNTR\n" +
				"\t\t\t\t\tBAD_QKEY_CNTR\n" +
				"\t\t\t\t\tAUTO_PATH_MIG\n" +
				"\t\t\t\t\tCHANGE_PHY_PORT\n" +
				"\t\t\t\t\tUD_AV_PORT_ENFORCE\n" +
				"\t\t\t\t\tPORT_ACTIVE_EVENT\n" +
				"\t\t\t\t\tSYS_IMAGE_GUID\n" +
				"\t\t\t\t\tRC_RNR_NAK_GEN\n" +
				"\t\t\t\t\tSRQ_RESIZE\n" +
				"\t\t\t\t\tMEM_WINDOW\n" +
				"\t\t\t\t\tMEM_MGT_EXTENSIONS\n" +
				"\t\t\t\t\tMEM_WINDOW_TYPE_2B\n" +
				"\tmax_sge:\t\t\t32\n" +
				"\tmax_sge_rd:\t\t\t32\n" +
				"\tmax_cq:\t\t\t\t16384\n" +
				"\tmax_cqe:\t\t\t32767\n" +
				"\tmax_mr:\t\t\t\t65536\n" +
				"\tmax_pd:\t\t\t\t32752\n" +
				"\tmax_qp_rd_atom:\t\t\t128\n" +
				"\tmax_ee_rd_atom:\t\t\t0\n" +
				"\tmax_res_rd_atom:\t\t258048\n" +
				"\tmax_qp_init_rd_atom:\t\t128\n" +
				"\tmax_ee_init_rd_atom:\t\t0\n" +
				"\tatomic_cap:\t\t\tATOMIC_HCA (1)\n" +
				"\tmax_ee:\t\t\t\t0\n" +
				"\tmax_rdd:\t\t\t0\n" +
				"\tmax_mw:\t\t\t\t65536\n" +
				"\tmax_raw_ipv6_qp:\t\t0\n" +
				"\tmax_raw_ethy_qp:\t\t0\n" +
				"\tmax_mcast_grp:\t\t\t8192\n" +
				"\tmax_mcast_qp_attach:\t\t56\n" +
				"\tmax_total_mcast_qp_attach:\t458752\n" +
				"\tmax_ah:\t\t\t\t32767\n" +
				"\tmax_fmr:\t\t\t0\n" +
				"\tmax_srq:\t\t\t960\n" +
				"\tmax_srq_wr:\t\t\t16384\n" +
				"\tmax_srq_sge:\t\t\t32\n" +
				"\tmax_pkeys:\t\t\t64\n" +
				"\tlocal_ca_ack_delay:\t\t15\n" +
				"\tgeneral_odp_caps:\n" +
				"\trc_odp_caps:\n" +
				"\t\t\t\t\tNO SUPPORT\n" +
				"\tuc_odp_caps:\n" +
				"\t\t\t\t\tNO SUPPORT\n" +
				"\tud_odp_caps:\n" +
				"\t\t\t\t\tNO SUPPORT\n" +
				"\txrc_odp_caps:\n" +
				"\t\t\t\t\tNO SUPPORT\n" +
				"\tcompletion_timestamp_mask not supported\n" +
				"\tcore clock not supported\n" +
				"\tdevice_cap_flags_ex:\t\t0x1223C76\n" +
				"\ttso_caps:\n" +
				"\t\tmax_tso:\t\t\t0\n" +
				"\trss_caps:\n" +
				"\t\tmax_rwq_indirection_tables:\t\t\t0\n" +
				"\t\tmax_rwq_indirection_table_size:\t\t\t0\n" +
				"\t\trx_hash_function:\t\t\t\t0x0\n" +
				"\t\trx_hash_fields_mask:\t\t\t\t0x0\n" +
				"\tmax_wq_type_rq:\t\t\t0\n" +
				"\tpacket_pacing_caps:\n" +
				"\t\tqp_rate_limit_min:\t0kbps\n" +
				"\t\tqp_rate_limit_max:\t0kbps\n" +
				"\ttag matching not supported\n" +
				"\tnum_comp_vectors:\t\t1\n" +
				rxePortBrief +
				"\t\t\tmax_msg_sz:\t\t0x800000\n" +
				"\t\t\tport_cap_flags:\t\t0x04010000\n" +
				"\t\t\tport_cap_flags2:\t0x0000\n" +
				"\t\t\tmax_vl_num:\t\t1 (1)\n" +
				"\t\t\tbad_pkey_cntr:\t\t0x0\n" +
				"\t\t\tqkey_viol_cntr:\t\t0x0\n" +
				"\t\t\tsm_sl:\t\t\t0\n" +
				"\t\t\tpkey_tbl_len:\t\t1\n" +
				"\t\t\tgid_tbl_len:\t\t4\n" +
				"\t\t\tsubnet_timeout:\t\t0\n" +
				"\t\t\tinit_type_reply:\t0\n" +
				"\t\t\tactive_width:\t\t4X (2)\n" +
				"\t\t\tactive_speed:\t\t25.0 Gbps (32)\n" +
				"\t\t\tphys_state:\t\tLINK_UP (5)\n" +
				"\t\t\tGID[  1]:\t\tfe80::fc:ff:fe00:1, RoCE v2\n" +
				"\t\t\tGID[  2]:\t\t::ffff:192.0.2.2, RoCE v2\n" +
				"\n",
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var b bytes.Buffer
			writeHCA(&b, &tt.hca, tt.verbose)
			if got := b.String(); got != tt.want {
				t.Errorf("output differs from ibv_devinfo's\n%s", lineDiff(got, tt.want))
			}
		})
	}
}

func TestWriteDeviceAttrVerboseConditionalLines(t *testing.T) {
	a := rxeAttr
	a.MaxFMR, a.MaxMapPerFMR = 256, 32
	a.MaxSRQ = 0
	var b bytes.Buffer
	writeDeviceAttr(&b, "x", verbs.TransportIB, &a, 1, true)
	got := b.String()
	tests := []struct {
		name    string
		line    string
		present bool
	}{
		{"max_map_per_fmr follows a nonzero max_fmr",
			"\tmax_fmr:\t\t\t256\n\tmax_map_per_fmr:\t\t32\n\tmax_srq:\t\t\t0\n\tmax_pkeys:", true},
		{"no max_srq_wr without SRQs", "max_srq_wr", false},
		{"no max_srq_sge without SRQs", "max_srq_sge", false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if strings.Contains(got, tt.line) != tt.present {
				t.Errorf("output has %q: %v, want %v\n%s", tt.line, !tt.present, tt.present, got)
			}
		})
	}
}

func TestWriteDeviceCapFlagsNamesEachFlagInDevinfoOrder(t *testing.T) {
	tests := []struct {
		name  string
		flags uint32
		want  string
	}{
		{"no flags prints nothing", 0, ""},
		{"low and high named flags in bit order", 1<<0 | 1<<14 | 1<<29,
			"\t\t\t\t\tRESIZE_MAX_WR\n\t\t\t\t\tN_NOTIFY_CQ\n\t\t\t\t\tMANAGED_FLOW_STEERING\n"},
		{"type 2A before type 2B", 1<<24 | 1<<23,
			"\t\t\t\t\tMEM_WINDOW_TYPE_2A\n\t\t\t\t\tMEM_WINDOW_TYPE_2B\n"},
		{"unnamed bits gathered in upper-case hex", 1<<15 | 1<<16 | 1<<19 | 1<<22 | 1<<31,
			"\t\t\t\t\tUnknown flags: 0x80498000\n"},
		{"named flags then unknown ones", 1<<1 | 1<<27,
			"\t\t\t\t\tBAD_PKEY_CNTR\n\t\t\t\t\tUnknown flags: 0x8000000\n"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var b bytes.Buffer
			writeDeviceCapFlags(&b, tt.flags)
			if got := b.String(); got != tt.want {
				t.Errorf("got %q, want %q", got, tt.want)
			}
		})
	}
}

func TestWritePortVerboseFollowsTransportAndLinkLayer(t *testing.T) {
	const ibBrief = "\t\tport:\t1\n" +
		"\t\t\tstate:\t\t\tPORT_INIT (2)\n" +
		"\t\t\tmax_mtu:\t\t4096 (5)\n" +
		"\t\t\tactive_mtu:\t\t256 (1)\n" +
		"\t\t\tsm_lid:\t\t\t1\n" +
		"\t\t\tport_lid:\t\t3\n" +
		"\t\t\tport_lmc:\t\t0x00\n" +
		"\t\t\tlink_layer:\t\tInfiniBand\n" +
		"\t\t\tmax_msg_sz:\t\t0x40000000\n" +
		"\t\t\tport_cap_flags:\t\t0x02514868\n" +
		"\t\t\tport_cap_flags2:\t0x0000\n" +
		"\t\t\tmax_vl_num:\t\t8 (4)\n" +
		"\t\t\tbad_pkey_cntr:\t\t0x2\n" +
		"\t\t\tqkey_viol_cntr:\t\t0x1f\n" +
		"\t\t\tsm_sl:\t\t\t0\n" +
		"\t\t\tpkey_tbl_len:\t\t128\n" +
		"\t\t\tgid_tbl_len:\t\t8\n" +
		"\t\t\tsubnet_timeout:\t\t18\n" +
		"\t\t\tinit_type_reply:\t0\n" +
		"\t\t\tactive_width:\t\t4X (2)\n" +
		"\t\t\tactive_speed:\t\t25.0 Gbps (32)\n"
	ib := portInfo{Num: 1, Attr: verbs.PortAttr{
		State: verbs.PortInit, MaxMTU: verbs.MTU4096, ActiveMTU: verbs.MTU256, GIDTblLen: 8,
		PortCapFlags: 0x02514868, MaxMsgSz: 0x40000000, BadPKeyCntr: 2, QKeyViolCntr: 0x1f,
		PKeyTblLen: 128, LID: 3, SMLID: 1, MaxVLNum: 4, SubnetTimeout: 18,
		ActiveWidth: 2, ActiveSpeed: 32, PhysState: 2, LinkLayer: verbs.LinkLayerInfiniBand,
	}, GIDs: []gidEntry{
		{0, gid(t, "fe800000000000000002c90300a1b2c3"), gidTypeIBRoCEv1},
		{1, gid(t, "fe800000000000000000000000000000"), gidTypeIBRoCEv1},
	}}
	tests := []struct {
		name string
		tr   verbs.TransportType
		want string
	}{
		{"InfiniBand port prints phys_state and hex GIDs without a type", verbs.TransportIB, ibBrief +
			"\t\t\tphys_state:\t\tPOLLING (2)\n" +
			"\t\t\tGID[  0]:\t\tfe80:0000:0000:0000:0002:c903:00a1:b2c3\n" +
			"\n"},
		{"iWARP device prints no phys_state", verbs.TransportIWARP, ibBrief +
			"\t\t\tGID[  0]:\t\tfe80:0000:0000:0000:0002:c903:00a1:b2c3\n" +
			"\n"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var b bytes.Buffer
			writePort(&b, tt.tr, &ib, true)
			if got := b.String(); got != tt.want {
				t.Errorf("output differs from ibv_devinfo's\n%s", lineDiff(got, tt.want))
			}
		})
	}
}

func TestWriteGIDFormatsByType(t *testing.T) {
	mapped := gid(t, "00000000000000000000ffff7f000001")
	tests := []struct {
		name string
		e    gidEntry
		ll   verbs.LinkLayer
		want string
	}{
		{"RoCE v2 GID in inet_ntop form with its type", gidEntry{0, mapped, gidTypeRoCEv2}, verbs.LinkLayerEthernet,
			"\t\t\tGID[  0]:\t\t::ffff:127.0.0.1, RoCE v2\n"},
		{"RoCE v1 GID in hex groups with its type", gidEntry{12, mapped, gidTypeIBRoCEv1}, verbs.LinkLayerEthernet,
			"\t\t\tGID[ 12]:\t\t0000:0000:0000:0000:0000:ffff:7f00:0001, RoCE v1\n"},
		{"three-digit index", gidEntry{255, mapped, gidTypeRoCEv2}, verbs.LinkLayerEthernet,
			"\t\t\tGID[255]:\t\t::ffff:127.0.0.1, RoCE v2\n"},
		{"no type on an InfiniBand port", gidEntry{1, mapped, gidTypeIBRoCEv1}, verbs.LinkLayerInfiniBand,
			"\t\t\tGID[  1]:\t\t0000:0000:0000:0000:0000:ffff:7f00:0001\n"},
		{"invalid type is not printed", gidEntry{0, mapped, gidTypeInvalid}, verbs.LinkLayerEthernet, ""},
		{"null interface ID is not printed", gidEntry{0, gid(t, "20010db8000000010000000000000000"), gidTypeRoCEv2}, verbs.LinkLayerEthernet, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var b bytes.Buffer
			writeGID(&b, tt.e, tt.ll)
			if got := b.String(); got != tt.want {
				t.Errorf("got %q, want %q", got, tt.want)
			}
		})
	}
}

func TestInetNtop6MatchesGlibc(t *testing.T) {
	tests := []struct {
		name string
		hex  string
		want string
	}{
		{"IPv4-mapped in dotted decimal", "00000000000000000000ffff7f000001", "::ffff:127.0.0.1"},
		{"IPv4-compatible in dotted decimal", "0000000000000000000000000a000001", "::10.0.0.1"},
		{"loopback", "00000000000000000000000000000001", "::1"},
		{"unspecified", "00000000000000000000000000000000", "::"},
		{"trailing zeros", "fd000000000000000000000000000000", "fd00::"},
		{"link-local without leading zeros in groups", "fe8000000000000000fc00fffe000001", "fe80::fc:ff:fe00:1"},
		{"longest zero run is compressed", "00010000000000010000000000000001", "1:0:0:1::1"},
		{"first of equal zero runs is compressed", "00010000000000010000000000010001", "1::1:0:0:1:1"},
		{"single zero group is not compressed", "00010000000100010001000100010001", "1:0:1:1:1:1:1:1"},
		{"five zero groups then not ffff is not IPv4-mapped", "00000000000000000000000101020304", "::1:102:304"},
		{"ffff then zero is not IPv4-mapped", "0000000000000000ffff000001020304", "::ffff:0:102:304"},
		{"lower-case hex", "2001ABCD00000000000000000000BEEF", "2001:abcd::beef"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := inetNtop6(gid(t, tt.hex)); got != tt.want {
				t.Errorf("got %q, want %q", got, tt.want)
			}
		})
	}
}

func TestValueNamesFollowDevinfoTables(t *testing.T) {
	tests := []struct {
		name, got, want string
	}{
		{"GUID in four groups", guidStr(0x0002c90300a1b2c3), "0002:c903:00a1:b2c3"},
		{"port state NOP is invalid", portStateStr(verbs.PortNOP), "invalid state"},
		{"port state ACTIVE_DEFER is invalid", portStateStr(verbs.PortActiveDefer), "invalid state"},
		{"port state ARMED", portStateStr(verbs.PortArmed), "PORT_ARMED"},
		{"unspecified link layer", linkLayerStr(verbs.LinkLayerUnspecified), "Unspecified"},
		{"unknown link layer", linkLayerStr(9), "Unknown"},
		{"unknown transport", transportStr(verbs.TransportUnknown), "invalid transport"},
		{"unspecified transport", transportStr(4), "unspecified"},
		{"unknown atomic capability", atomicCapStr(7), "invalid atomic capability"},
		{"width 12X", widthStr(8), "12"},
		{"unknown width", widthStr(3), "invalid width"},
		{"SDR speed", speedStr(1), "2.5 Gbps"},
		{"QDR and FDR10 speeds are both 10 Gbps", speedStr(4) + "|" + speedStr(8), "10.0 Gbps|10.0 Gbps"},
		{"HDR speed", speedStr(64), "50.0 Gbps"},
		{"unknown speed", speedStr(3), "invalid speed"},
		{"15 virtual lanes", vlStr(5), "15"},
		{"unknown virtual lanes", vlStr(0), "invalid value"},
		{"physical state training keeps its spelling", physStateStr(4), "PORT_CONFIGURATION TRAINNING"},
		{"unknown physical state", physStateStr(0), "invalid physical state"},
		{"invalid MTU", verbs.MTU(0).String(), "invalid MTU"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if tt.got != tt.want {
				t.Errorf("got %q, want %q", tt.got, tt.want)
			}
		})
	}
}

// lineDiff shows the first line where got and want differ.
func lineDiff(got, want string) string {
	g, w := strings.SplitAfter(got, "\n"), strings.SplitAfter(want, "\n")
	for i := 0; i < len(g) || i < len(w); i++ {
		var gl, wl string
		if i < len(g) {
			gl = g[i]
		}
		if i < len(w) {
			wl = w[i]
		}
		if gl != wl {
			return fmt.Sprintf("line %d:\n got  %q\n want %q", i+1, gl, wl)
		}
	}
	return "(no difference)"
}
