//go:build rdmacore && linux && cgo

package rdmacore

/*
#cgo noescape rg_poll_cq_ex
#cgo nocallback rg_poll_cq_ex
#include "shim.h"

// rg_wc_ex has verbs.WCEx's layout: a completion and its timestamps.
struct rg_wc_ex {
	struct ibv_wc wc;
	uint64_t ts;
	uint64_t wallclock_ns;
};

// rg_poll_cq_ex reads up to n completions of an extended CQ, each field
// flags asks for read with its ibv_wc_read_* (immediate data in host
// order, as rg_poll_cq gives it), and returns how many or a negative
// errno. Each completion is a polling batch of its own (ibv_start_poll,
// then ibv_end_poll): ibv_next_poll is never called,
// because Linux's rxe provider before rdma-core 55 (Debian 12 ships 44)
// moves its consumer index past the producer when ibv_next_poll finds the
// queue empty and ibv_end_poll follows, as the man page asks, after which
// the CQ hands out stale entries (rdma-core commit b78b414e0).
static int rg_poll_cq_ex(struct ibv_cq_ex *cq, uint64_t flags, int n, struct rg_wc_ex *out) {
	struct ibv_poll_cq_attr attr = {0};
	int k = 0;
	while (k < n) {
		int rc = ibv_start_poll(cq, &attr);
		if (rc == ENOENT)
			break;
		if (rc)
			return k > 0 ? k : -rc;
		struct rg_wc_ex *e = &out[k++];
		memset(e, 0, sizeof *e);
		e->wc.wr_id = cq->wr_id;
		e->wc.status = cq->status;
		if (flags & IBV_WC_EX_WITH_QP_NUM)
			e->wc.qp_num = ibv_wc_read_qp_num(cq);
		if (flags & IBV_WC_EX_WITH_COMPLETION_TIMESTAMP)
			e->ts = ibv_wc_read_completion_ts(cq);
		if (flags & IBV_WC_EX_WITH_COMPLETION_TIMESTAMP_WALLCLOCK)
			e->wallclock_ns = ibv_wc_read_completion_wallclock_ns(cq);
		if (cq->status != IBV_WC_SUCCESS) {
			e->wc.vendor_err = ibv_wc_read_vendor_err(cq);
		} else {
			e->wc.opcode = ibv_wc_read_opcode(cq);
			e->wc.wc_flags = ibv_wc_read_wc_flags(cq);
			if (flags & IBV_WC_EX_WITH_BYTE_LEN)
				e->wc.byte_len = ibv_wc_read_byte_len(cq);
			if (flags & IBV_WC_EX_WITH_IMM) {
				e->wc.imm_data = ibv_wc_read_imm_data(cq);
				if (e->wc.wc_flags & IBV_WC_WITH_IMM)
					e->wc.imm_data = be32toh(e->wc.imm_data);
			}
			if (flags & IBV_WC_EX_WITH_SRC_QP)
				e->wc.src_qp = ibv_wc_read_src_qp(cq);
			if (flags & IBV_WC_EX_WITH_SLID)
				e->wc.slid = ibv_wc_read_slid(cq);
			if (flags & IBV_WC_EX_WITH_SL)
				e->wc.sl = ibv_wc_read_sl(cq);
			if (flags & IBV_WC_EX_WITH_DLID_PATH_BITS)
				e->wc.dlid_path_bits = ibv_wc_read_dlid_path_bits(cq);
		}
		ibv_end_poll(cq);
	}
	return k;
}

static struct ibv_cq_ex *rg_create_cq_ex(struct ibv_context *c, int cqe, struct ibv_comp_channel *ch, int vector, uint64_t wc_flags, uint32_t comp_mask, uint32_t flags) {
	struct ibv_cq_init_attr_ex a;
	memset(&a, 0, sizeof a);
	a.cqe = cqe;
	a.channel = ch;
	a.comp_vector = vector;
	a.wc_flags = wc_flags;
	a.comp_mask = comp_mask;
	a.flags = flags;
	return ibv_create_cq_ex(c, &a);
}

static struct ibv_cq *rg_cq_ex_to_cq(struct ibv_cq_ex *cq) { return ibv_cq_ex_to_cq(cq); }

static int rg_query_device_ex(struct ibv_context *c, struct ibv_device_attr_ex *a) {
	memset(a, 0, sizeof *a);
	return ibv_query_device_ex(c, NULL, a);
}
*/
import "C"

import (
	"unsafe"

	"github.com/rdmago/rdmago/verbs"
)

// verbs.WCEx is struct rg_wc_ex.
var (
	_ [unsafe.Sizeof(verbs.WCEx{}) - C.sizeof_struct_rg_wc_ex]byte
	_ [C.sizeof_struct_rg_wc_ex - unsafe.Sizeof(verbs.WCEx{})]byte
	_ [unsafe.Offsetof(verbs.WCEx{}.CompletionTS) - unsafe.Offsetof(C.struct_rg_wc_ex{}.ts)]byte
	_ [unsafe.Offsetof(C.struct_rg_wc_ex{}.ts) - unsafe.Offsetof(verbs.WCEx{}.CompletionTS)]byte
)

// QueryDeviceEx implements verbs.DeviceExDriver with libibverbs'
// ibv_query_device_ex.
func (c *ctx) QueryDeviceEx() (verbs.DeviceAttrEx, error) {
	var a C.struct_ibv_device_attr_ex
	if rc := C.rg_query_device_ex(c.s.c, &a); rc != 0 {
		return verbs.DeviceAttrEx{}, failRC("ibv_query_device_ex", rc)
	}
	o := &a.odp_caps
	return verbs.DeviceAttrEx{
		OrigAttr: goDeviceAttr(&a.orig_attr),
		CompMask: uint32(a.comp_mask),
		ODPCaps: verbs.ODPCaps{
			GeneralCaps: uint64(o.general_caps),
			PerTransportCaps: verbs.ODPPerTransportCaps{
				RCODPCaps: uint32(o.per_transport_caps.rc_odp_caps),
				UCODPCaps: uint32(o.per_transport_caps.uc_odp_caps),
				UDODPCaps: uint32(o.per_transport_caps.ud_odp_caps),
			},
		},
		CompletionTimestampMask: uint64(a.completion_timestamp_mask),
		HCACoreClock:            uint64(a.hca_core_clock),
		DeviceCapFlagsEx:        uint64(a.device_cap_flags_ex),
		TSOCaps:                 verbs.TSOCaps{MaxTSO: uint32(a.tso_caps.max_tso), SupportedQPTs: uint32(a.tso_caps.supported_qpts)},
		RSSCaps: verbs.RSSCaps{
			SupportedQPTs:              uint32(a.rss_caps.supported_qpts),
			MaxRWQIndirectionTables:    uint32(a.rss_caps.max_rwq_indirection_tables),
			MaxRWQIndirectionTableSize: uint32(a.rss_caps.max_rwq_indirection_table_size),
			RXHashFieldsMask:           uint64(a.rss_caps.rx_hash_fields_mask),
			RXHashFunction:             uint8(a.rss_caps.rx_hash_function),
		},
		MaxWQTypeRQ: uint32(a.max_wq_type_rq),
		PacketPacingCaps: verbs.PacketPacingCaps{
			QPRateLimitMin: uint32(a.packet_pacing_caps.qp_rate_limit_min),
			QPRateLimitMax: uint32(a.packet_pacing_caps.qp_rate_limit_max),
			SupportedQPTs:  uint32(a.packet_pacing_caps.supported_qpts),
		},
		RawPacketCaps: uint32(a.raw_packet_caps),
		TMCaps: verbs.TMCaps{
			MaxRndvHdrSize: uint32(a.tm_caps.max_rndv_hdr_size),
			MaxNumTags:     uint32(a.tm_caps.max_num_tags),
			Flags:          uint32(a.tm_caps.flags),
			MaxOps:         uint32(a.tm_caps.max_ops),
			MaxSGE:         uint32(a.tm_caps.max_sge),
		},
		CQModCaps: verbs.CQModerationCaps{MaxCQCount: uint16(a.cq_mod_caps.max_cq_count), MaxCQPeriod: uint16(a.cq_mod_caps.max_cq_period)},
		MaxDMSize: uint64(a.max_dm_size),
		PCIAtomicCaps: verbs.PCIAtomicCaps{
			FetchAdd:    uint16(a.pci_atomic_caps.fetch_add),
			Swap:        uint16(a.pci_atomic_caps.swap),
			CompareSwap: uint16(a.pci_atomic_caps.compare_swap),
		},
		XRCODPCaps:    uint32(a.xrc_odp_caps),
		PhysPortCntEx: uint32(a.phys_port_cnt_ex),
	}, nil
}

// CreateCQEx implements verbs.CQExCreator with libibverbs'
// ibv_create_cq_ex: the device decides which fields and flags it has
// (Linux's Soft-RoCE, for one, has no timestamps and fails them with
// EOPNOTSUPP). Completions are read with ibv_start_poll, ibv_next_poll
// and ibv_end_poll, in batches of up to 64 per cgo call, into the same
// queue that Len and Wait take completions into ahead of the program.
func (c *ctx) CreateCQEx(attr *verbs.CQInitAttrEx, notify func()) (verbs.CQExDriver, error) {
	var ex *C.struct_ibv_cq_ex
	q, err := c.newCQ("ibv_create_cq_ex", notify, func(ch *C.struct_ibv_comp_channel) (*C.struct_ibv_cq, error) {
		x, err := C.rg_create_cq_ex(c.s.c, C.int(attr.CQE), ch, C.int(attr.CompVector), C.uint64_t(attr.WCFlags), C.uint32_t(attr.CompMask), C.uint32_t(attr.Flags))
		if x == nil {
			return nil, fail("ibv_create_cq_ex", err)
		}
		ex = x
		return C.rg_cq_ex_to_cq(x), nil
	})
	if err != nil {
		return nil, err
	}
	q.ex, q.wcFlags = ex, C.uint64_t(attr.WCFlags)
	return q, nil
}

// pollEx reads completions of an extended CQ into buf.
func (q *cq) pollEx(buf []verbs.WCEx) (int, error) {
	got := C.rg_poll_cq_ex(q.ex, q.wcFlags, C.int(len(buf)), (*C.struct_rg_wc_ex)(unsafe.Pointer(&buf[0])))
	if got < 0 {
		return 0, failRC("ibv_start_poll", -got)
	}
	return int(got), nil
}

// StartPoll implements verbs.CQExDriver: the oldest completion the stash
// holds, or else the device's, goes to cur.
func (q *cq) StartPoll(cur *verbs.WCEx) error { return q.take(cur) }

// NextPoll implements verbs.CQExDriver, as StartPoll.
func (q *cq) NextPoll(cur *verbs.WCEx) error { return q.take(cur) }

// EndPoll implements verbs.CQExDriver: the completions handed out were
// taken off the device's queue already.
func (q *cq) EndPoll() {}

func (q *cq) take(cur *verbs.WCEx) error {
	q.mu.Lock()
	defer q.mu.Unlock()
	if q.closed {
		return verbs.Errorf("ibv_start_poll", verbs.ErrClosed, "CQ destroyed")
	}
	if len(q.stash) == 0 {
		if err := q.fill(); err != nil {
			return err
		}
		if len(q.stash) == 0 {
			return verbs.ErrNoEntry
		}
	}
	*cur = q.stash[0]
	q.unstash(1)
	return nil
}

var (
	_ verbs.DeviceExDriver = (*ctx)(nil)
	_ verbs.CQExCreator    = (*ctx)(nil)
	_ verbs.CQExDriver     = (*cq)(nil)
)
