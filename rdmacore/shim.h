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
	uint32_t bind_access, bind_rkey, sge_off, num_sge, remote_srqn;
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
		if (qp->qp_type == IBV_QPT_XRC_SEND)
			x->qp_type.xrc.remote_srqn = w[i].remote_srqn;
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
	struct ibv_cq *cq;
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
	case IBV_EVENT_CQ_ERR:
		out->cq = ev.element.cq;
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
static inline int rg_dev_node_type(struct ibv_device *d) { return d->node_type; }
static inline int rg_dev_transport_type(struct ibv_device *d) { return d->transport_type; }
static inline const char *rg_dev_kname(struct ibv_device *d) { return d->dev_name; }
static inline const char *rg_dev_path(struct ibv_device *d) { return d->dev_path; }
static inline const char *rg_ibdev_path(struct ibv_device *d) { return d->ibdev_path; }
static inline struct ibv_context *rg_ctx(struct ibv_context **l, int i) { return l[i]; }


// ---- librdmacm ----

#include <netinet/in.h>
#include <sys/socket.h>

static inline void rg_set_context(struct rdma_cm_id *id, uintptr_t h) { id->context = (void *)h; }
static inline uintptr_t rg_context(struct rdma_cm_id *id) { return (uintptr_t)id->context; }

// rg_sockaddr fills ss with an IPv4 (v6 == 0, a[12:16]) or IPv6 address.
static inline struct sockaddr *rg_sockaddr(struct sockaddr_storage *ss, int v6, const uint8_t *a, uint16_t port, uint32_t scope) {
	memset(ss, 0, sizeof *ss);
	if (v6) {
		struct sockaddr_in6 *s = (struct sockaddr_in6 *)ss;
		s->sin6_family = AF_INET6;
		memcpy(&s->sin6_addr, a, 16);
		s->sin6_port = htons(port);
		s->sin6_scope_id = scope;
	} else {
		struct sockaddr_in *s = (struct sockaddr_in *)ss;
		s->sin_family = AF_INET;
		memcpy(&s->sin_addr, a + 12, 4);
		s->sin_port = htons(port);
	}
	return (struct sockaddr *)ss;
}

// rg_addr reads a socket address into a (16 bytes, IPv4 mapped), port and
// family (4 or 6; 0 for none).
static inline int rg_addr(struct sockaddr *sa, uint8_t *a, uint16_t *port) {
	memset(a, 0, 16);
	*port = 0;
	if (sa == NULL)
		return 0;
	if (sa->sa_family == AF_INET) {
		struct sockaddr_in *s = (struct sockaddr_in *)sa;
		a[10] = a[11] = 0xff;
		memcpy(a + 12, &s->sin_addr, 4);
		*port = ntohs(s->sin_port);
		return 4;
	}
	if (sa->sa_family == AF_INET6) {
		struct sockaddr_in6 *s = (struct sockaddr_in6 *)sa;
		memcpy(a, &s->sin6_addr, 16);
		*port = ntohs(s->sin6_port);
		return 6;
	}
	return 0;
}

static inline int rg_local_addr(struct rdma_cm_id *id, uint8_t *a, uint16_t *port) { return rg_addr(rdma_get_local_addr(id), a, port); }
static inline int rg_peer_addr(struct rdma_cm_id *id, uint8_t *a, uint16_t *port) { return rg_addr(rdma_get_peer_addr(id), a, port); }

static inline int rg_bind_addr(struct rdma_cm_id *id, int v6, const uint8_t *a, uint16_t port, uint32_t scope) {
	struct sockaddr_storage ss;
	return rdma_bind_addr(id, rg_sockaddr(&ss, v6, a, port, scope)) ? errno : 0;
}

static inline int rg_resolve_addr(struct rdma_cm_id *id, int has_src, int sv6, const uint8_t *src, uint16_t sport, uint32_t sscope,
		int dv6, const uint8_t *dst, uint16_t dport, uint32_t dscope, int ms) {
	struct sockaddr_storage s, d;
	struct sockaddr *sp = has_src ? rg_sockaddr(&s, sv6, src, sport, sscope) : NULL;
	return rdma_resolve_addr(id, sp, rg_sockaddr(&d, dv6, dst, dport, dscope), ms) ? errno : 0;
}

// rg_conn is struct rdma_conn_param without pointers.
struct rg_conn {
	uint8_t pdata[256];
	uint32_t pdata_len;
	uint8_t responder_resources, initiator_depth, flow_control, retry_count, rnr_retry_count, srq;
	uint32_t qp_num;
};

static inline void rg_conn_param(struct rdma_conn_param *p, struct rg_conn *c) {
	memset(p, 0, sizeof *p);
	p->private_data = c->pdata_len ? c->pdata : NULL;
	p->private_data_len = c->pdata_len;
	p->responder_resources = c->responder_resources;
	p->initiator_depth = c->initiator_depth;
	p->flow_control = c->flow_control;
	p->retry_count = c->retry_count;
	p->rnr_retry_count = c->rnr_retry_count;
	p->srq = c->srq;
	p->qp_num = c->qp_num;
}

static inline int rg_connect(struct rdma_cm_id *id, struct rg_conn *c) {
	struct rdma_conn_param p;
	rg_conn_param(&p, c);
	return rdma_connect(id, &p) ? errno : 0;
}

static inline int rg_accept(struct rdma_cm_id *id, struct rg_conn *c) {
	struct rdma_conn_param p;
	rg_conn_param(&p, c);
	return rdma_accept(id, &p) ? errno : 0;
}

// rg_cm_event is an rdma_cm event copied out, so that it can be
// acknowledged at once.
struct rg_cm_event {
	uint32_t type;
	int32_t status;
	struct rdma_cm_id *id, *listen_id;
	struct rg_conn conn;
	struct ibv_ah_attr ah_attr;
	uint32_t ud_qp_num, ud_qkey;
	uintptr_t mc_uid; // MULTICAST_JOIN/ERROR: the join's context
};

static inline int rg_get_cm_event(struct rdma_event_channel *ch, struct rg_cm_event *out) {
	struct rdma_cm_event *ev;
	const void *pd;
	uint8_t len;
	if (rdma_get_cm_event(ch, &ev))
		return errno;
	memset(out, 0, sizeof *out);
	out->type = ev->event;
	out->status = ev->status;
	out->id = ev->id;
	out->listen_id = ev->listen_id;
	if (ev->event == RDMA_CM_EVENT_MULTICAST_JOIN || ev->event == RDMA_CM_EVENT_MULTICAST_ERROR) {
		out->mc_uid = (uintptr_t)ev->param.ud.private_data;
		out->ah_attr = ev->param.ud.ah_attr;
		out->ud_qp_num = ev->param.ud.qp_num;
		out->ud_qkey = ev->param.ud.qkey;
		rdma_ack_cm_event(ev);
		return 0;
	}
	if (ev->id->ps == RDMA_PS_UDP || ev->id->ps == RDMA_PS_IPOIB) {
		pd = ev->param.ud.private_data;
		len = ev->param.ud.private_data_len;
		out->ah_attr = ev->param.ud.ah_attr;
		out->ud_qp_num = ev->param.ud.qp_num;
		out->ud_qkey = ev->param.ud.qkey;
	} else {
		pd = ev->param.conn.private_data;
		len = ev->param.conn.private_data_len;
		out->conn.responder_resources = ev->param.conn.responder_resources;
		out->conn.initiator_depth = ev->param.conn.initiator_depth;
		out->conn.flow_control = ev->param.conn.flow_control;
		out->conn.retry_count = ev->param.conn.retry_count;
		out->conn.rnr_retry_count = ev->param.conn.rnr_retry_count;
		out->conn.srq = ev->param.conn.srq;
		out->conn.qp_num = ev->param.conn.qp_num;
	}
	if (pd && len) {
		memcpy(out->conn.pdata, pd, len);
		out->conn.pdata_len = len;
	}
	rdma_ack_cm_event(ev);
	return 0;
}

// rg_attach_qp makes qp the ID's QP and moves it to INIT (a UD QP on to
// RTS), as rdma_create_qp does for the QPs it creates.
static inline int rg_attach_qp(struct rdma_cm_id *id, struct ibv_qp *qp) {
	struct ibv_qp_attr a;
	int mask, rc;
	id->qp = qp;
	memset(&a, 0, sizeof a);
	a.qp_state = IBV_QPS_INIT;
	if (rdma_init_qp_attr(id, &a, &mask))
		return errno;
	if ((rc = ibv_modify_qp(qp, &a, mask)))
		return rc;
	if (qp->qp_type != IBV_QPT_UD)
		return 0;
	memset(&a, 0, sizeof a);
	a.qp_state = IBV_QPS_RTR;
	if ((rc = ibv_modify_qp(qp, &a, IBV_QP_STATE)))
		return rc;
	a.qp_state = IBV_QPS_RTS;
	a.sq_psn = 0;
	return ibv_modify_qp(qp, &a, IBV_QP_STATE | IBV_QP_SQ_PSN);
}

// rg_join_multicast joins a group with uid as the join's context; the
// group's address is a port-less sockaddr.
static inline int rg_join_multicast(struct rdma_cm_id *id, int v6, const uint8_t *a, uint32_t scope, uint16_t flags, uintptr_t uid) {
	struct sockaddr_storage ss;
	struct rdma_cm_join_mc_attr_ex attr;
	memset(&attr, 0, sizeof attr);
	attr.comp_mask = RDMA_CM_JOIN_MC_ATTR_ADDRESS | RDMA_CM_JOIN_MC_ATTR_JOIN_FLAGS;
	attr.addr = rg_sockaddr(&ss, v6, a, 0, scope);
	attr.join_flags = flags;
	return rdma_join_multicast_ex(id, &attr, (void *)uid) ? errno : 0;
}

static inline int rg_leave_multicast(struct rdma_cm_id *id, int v6, const uint8_t *a, uint32_t scope) {
	struct sockaddr_storage ss;
	return rdma_leave_multicast(id, rg_sockaddr(&ss, v6, a, 0, scope)) ? errno : 0;
}

static inline void rg_detach_qp(struct rdma_cm_id *id) { id->qp = NULL; }

static inline int rg_init_qp_attr(struct rdma_cm_id *id, int state, struct ibv_qp_attr *a, int *mask) {
	memset(a, 0, sizeof *a);
	a->qp_state = state;
	return rdma_init_qp_attr(id, a, mask) ? errno : 0;
}

static inline int rg_set_u8(struct rdma_cm_id *id, int level, int name, uint8_t v) {
	return rdma_set_option(id, level, name, &v, sizeof v) ? errno : 0;
}

static inline int rg_set_int(struct rdma_cm_id *id, int level, int name, int v) {
	return rdma_set_option(id, level, name, &v, sizeof v) ? errno : 0;
}

// rg_route reads the resolved path (RoCE: one path record).
static inline int rg_route(struct rdma_cm_id *id, uint8_t *sgid, uint8_t *dgid, uint32_t *mtu, uint32_t *hop, uint32_t *tclass, uint32_t *flow) {
	struct ibv_sa_path_rec *p;
	if (id->route.num_paths < 1 || id->route.path_rec == NULL)
		return 0;
	p = id->route.path_rec;
	memcpy(sgid, &p->sgid, 16);
	memcpy(dgid, &p->dgid, 16);
	*mtu = p->mtu;
	*hop = p->hop_limit;
	*tclass = p->traffic_class;
	*flow = be32toh(p->flow_label);
	return 1;
}

static inline const char *rg_id_dev_name(struct rdma_cm_id *id) {
	return id->verbs ? ibv_get_device_name(id->verbs->device) : NULL;
}

#endif
