// Helpers between Go and libibverbs/librdmacm: wrappers for the calls
// libibverbs defines as macros or inline functions, and the flat request
// layouts Go fills in without holding C pointers to Go memory.

#ifndef RDMAGO_SHIM_H
#define RDMAGO_SHIM_H

#include <endian.h>
#include <errno.h>
#include <fcntl.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <infiniband/verbs.h>
#include <rdma/rdma_cma.h>

static inline int rg_query_port(struct ibv_context *c, uint8_t port, struct ibv_port_attr *a) {
	memset(a, 0, sizeof *a);
	return ibv_query_port(c, port, a);
}

static inline int rg_nonblock(int fd) {
	int fl = fcntl(fd, F_GETFL);
	if (fl < 0 || fcntl(fd, F_SETFL, fl | O_NONBLOCK) < 0)
		return errno;
	return 0;
}

// rg_sge has struct ibv_sge's layout (and verbs.SGE's).
struct rg_sge {
	uint64_t addr;
	uint32_t length;
	uint32_t lkey;
};

// rg_send_wr is one send work request, its SGEs at sge_off in the
// request list's SGE array.
struct rg_send_wr {
	uint64_t wr_id, remote_addr, compare_add, swap_, bind_addr, bind_length;
	struct ibv_ah *ah;
	struct ibv_mw *mw;
	struct ibv_mr *bind_mr;
	uint32_t opcode, flags, imm, inv_rkey, rkey, remote_qpn, remote_qkey;
	uint32_t bind_access, bind_rkey, sge_off, num_sge;
};

// rg_post_send posts n requests as one list (ibv_post_send). On failure
// *bad is the index of the first request not posted.
static inline int rg_post_send(struct ibv_qp *qp, struct rg_send_wr *w, int n, struct rg_sge *sg, int *bad) {
	struct ibv_send_wr wr[n];
	struct ibv_send_wr *b = NULL;
	int i, rc;
	memset(wr, 0, sizeof wr);
	for (i = 0; i < n; i++) {
		struct ibv_send_wr *x = &wr[i];
		x->wr_id = w[i].wr_id;
		x->next = i + 1 < n ? &wr[i + 1] : NULL;
		x->sg_list = (struct ibv_sge *)&sg[w[i].sge_off];
		x->num_sge = w[i].num_sge;
		x->opcode = w[i].opcode;
		x->send_flags = w[i].flags;
		switch (w[i].opcode) {
		case IBV_WR_SEND_WITH_IMM:
		case IBV_WR_RDMA_WRITE_WITH_IMM:
			x->imm_data = htobe32(w[i].imm);
			break;
		case IBV_WR_SEND_WITH_INV:
		case IBV_WR_LOCAL_INV:
			x->invalidate_rkey = w[i].inv_rkey;
			break;
		}
		switch (w[i].opcode) {
		case IBV_WR_RDMA_WRITE:
		case IBV_WR_RDMA_WRITE_WITH_IMM:
		case IBV_WR_RDMA_READ:
			x->wr.rdma.remote_addr = w[i].remote_addr;
			x->wr.rdma.rkey = w[i].rkey;
			break;
		case IBV_WR_ATOMIC_CMP_AND_SWP:
		case IBV_WR_ATOMIC_FETCH_AND_ADD:
			x->wr.atomic.remote_addr = w[i].remote_addr;
			x->wr.atomic.compare_add = w[i].compare_add;
			x->wr.atomic.swap = w[i].swap_;
			x->wr.atomic.rkey = w[i].rkey;
			break;
		case IBV_WR_BIND_MW:
			x->bind_mw.mw = w[i].mw;
			x->bind_mw.rkey = w[i].bind_rkey;
			x->bind_mw.bind_info.mr = w[i].bind_mr;
			x->bind_mw.bind_info.addr = w[i].bind_addr;
			x->bind_mw.bind_info.length = w[i].bind_length;
			x->bind_mw.bind_info.mw_access_flags = w[i].bind_access;
			break;
		default:
			if (qp->qp_type == IBV_QPT_UD) {
				x->wr.ud.ah = w[i].ah;
				x->wr.ud.remote_qpn = w[i].remote_qpn;
				x->wr.ud.remote_qkey = w[i].remote_qkey;
			}
		}
	}
	rc = ibv_post_send(qp, wr, &b);
	*bad = b ? (int)(b - wr) : -1;
	return rc;
}

// rg_bind_mw binds a type 1 window (ibv_bind_mw); the window's new key is
// returned in *rkey.
static inline int rg_bind_mw(struct ibv_qp *qp, struct rg_send_wr *w, uint32_t *rkey) {
	struct ibv_mw_bind b;
	int rc;
	memset(&b, 0, sizeof b);
	b.wr_id = w->wr_id;
	b.send_flags = w->flags;
	b.bind_info.mr = w->bind_mr;
	b.bind_info.addr = w->bind_addr;
	b.bind_info.length = w->bind_length;
	b.bind_info.mw_access_flags = w->bind_access;
	rc = ibv_bind_mw(qp, w->mw, &b);
	*rkey = w->mw->rkey;
	return rc;
}

// rg_recv_wr is one receive work request.
struct rg_recv_wr {
	uint64_t wr_id;
	uint32_t sge_off, num_sge;
};

static inline int rg_post_recv(struct ibv_qp *qp, struct ibv_srq *srq, struct rg_recv_wr *w, int n, struct rg_sge *sg, int *bad) {
	struct ibv_recv_wr wr[n];
	struct ibv_recv_wr *b = NULL;
	int i, rc;
	for (i = 0; i < n; i++) {
		wr[i].wr_id = w[i].wr_id;
		wr[i].next = i + 1 < n ? &wr[i + 1] : NULL;
		wr[i].sg_list = (struct ibv_sge *)&sg[w[i].sge_off];
		wr[i].num_sge = w[i].num_sge;
	}
	rc = srq ? ibv_post_srq_recv(srq, wr, &b) : ibv_post_recv(qp, wr, &b);
	*bad = b ? (int)(b - wr) : -1;
	return rc;
}

// rg_poll_cq polls into wc, which has struct ibv_wc's layout, and puts
// immediate data in host order.
static inline int rg_poll_cq(struct ibv_cq *cq, int n, struct ibv_wc *wc) {
	int i, got = ibv_poll_cq(cq, n, wc);
	for (i = 0; i < got; i++)
		if (wc[i].wc_flags & IBV_WC_WITH_IMM)
			wc[i].imm_data = be32toh(wc[i].imm_data);
	return got;
}

static inline int rg_req_notify_cq(struct ibv_cq *cq, int solicited) {
	return ibv_req_notify_cq(cq, solicited);
}

// rg_get_cq_event takes one event from a non-blocking channel and
// acknowledges it; it returns 0 or an errno (EAGAIN: none yet).
static inline int rg_get_cq_event(struct ibv_comp_channel *ch) {
	struct ibv_cq *cq;
	void *ctx;
	if (ibv_get_cq_event(ch, &cq, &ctx))
		return errno;
	ibv_ack_cq_events(cq, 1);
	return 0;
}

// rg_async_event is an asynchronous event, taken and acknowledged.
struct rg_async_event {
	uint32_t type, qp_num, port;
	struct ibv_srq *srq;
};

static inline int rg_get_async_event(struct ibv_context *c, struct rg_async_event *out) {
	struct ibv_async_event ev;
	if (ibv_get_async_event(c, &ev))
		return errno;
	memset(out, 0, sizeof *out);
	out->type = ev.event_type;
	switch (ev.event_type) {
	case IBV_EVENT_QP_FATAL:
	case IBV_EVENT_QP_REQ_ERR:
	case IBV_EVENT_QP_ACCESS_ERR:
	case IBV_EVENT_COMM_EST:
	case IBV_EVENT_SQ_DRAINED:
	case IBV_EVENT_PATH_MIG:
	case IBV_EVENT_PATH_MIG_ERR:
	case IBV_EVENT_QP_LAST_WQE_REACHED:
		out->qp_num = ev.element.qp->qp_num;
		break;
	case IBV_EVENT_SRQ_ERR:
	case IBV_EVENT_SRQ_LIMIT_REACHED:
		out->srq = ev.element.srq;
		break;
	case IBV_EVENT_PORT_ACTIVE:
	case IBV_EVENT_PORT_ERR:
	case IBV_EVENT_LID_CHANGE:
	case IBV_EVENT_PKEY_CHANGE:
	case IBV_EVENT_SM_CHANGE:
	case IBV_EVENT_CLIENT_REREGISTER:
	case IBV_EVENT_GID_CHANGE:
		out->port = ev.element.port_num;
		break;
	default:
		break;
	}
	ibv_ack_async_event(&ev);
	return 0;
}

static inline const char *rg_dev_name(struct ibv_device **l, int i) { return ibv_get_device_name(l[i]); }
static inline uint64_t rg_dev_guid(struct ibv_device **l, int i) { return be64toh(ibv_get_device_guid(l[i])); }
static inline struct ibv_device *rg_dev(struct ibv_device **l, int i) { return l[i]; }
static inline struct ibv_context *rg_ctx(struct ibv_context **l, int i) { return l[i]; }

#endif
