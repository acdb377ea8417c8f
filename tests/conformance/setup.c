/* Making each case's two ends: a CQ, a registered buffer and a QP per end, on contexts
 * opened once per run; their numbers and keys exchanged; the QPs connected (RC, UC) or
 * given an address handle (UD), each toward the other end's GID. */
#include "conf.h"
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#define ALL_ACCESS                                                                             \
	(IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ |           \
	 IBV_ACCESS_REMOTE_ATOMIC | IBV_ACCESS_MW_BIND)

int open_side(struct side *s, const struct config *cfg)
{
	int n = 0;
	struct ibv_device **list = ibv_get_device_list(&n);
	memset(s, 0, sizeof(*s));
	for (int i = 0; list && i < n; i++)
		if (!strcmp(ibv_get_device_name(list[i]), cfg->dev))
			s->ctx = ibv_open_device(list[i]);
	if (list)
		ibv_free_device_list(list);
	if (!s->ctx) {
		fprintf(stderr, "conformance: cannot open %s\n", cfg->dev);
		return -1;
	}
	s->pd = ibv_alloc_pd(s->ctx);
	return s->pd ? 0 : -1;
}

void close_side(struct side *s)
{
	if (s->pd)
		ibv_dealloc_pd(s->pd);
	if (s->ctx)
		ibv_close_device(s->ctx);
}

static uint64_t send_ops(enum ibv_qp_type t)
{
	uint64_t send = IBV_QP_EX_WITH_SEND | IBV_QP_EX_WITH_SEND_WITH_IMM;
	uint64_t write = IBV_QP_EX_WITH_RDMA_WRITE | IBV_QP_EX_WITH_RDMA_WRITE_WITH_IMM;
	switch (t) {
	case IBV_QPT_RC:
		return send | write | IBV_QP_EX_WITH_RDMA_READ | IBV_QP_EX_WITH_ATOMIC_CMP_AND_SWP |
		       IBV_QP_EX_WITH_ATOMIC_FETCH_AND_ADD | IBV_QP_EX_WITH_LOCAL_INV |
		       IBV_QP_EX_WITH_BIND_MW | IBV_QP_EX_WITH_SEND_WITH_INV;
	case IBV_QPT_UC:
		return send | write;
	default:
		return send;
	}
}

static int make_side(struct pair *p, struct side *s, const struct side *proto, int is_b)
{
	const struct config *cfg = p->cfg;
	s->ctx = proto->ctx;
	s->pd = proto->pd;
	if (cfg->events || (is_b && (p->needs & NEED_CHANNEL))) {
		s->ch = ibv_create_comp_channel(s->ctx);
		if (!s->ch)
			return fail(p, "ibv_create_comp_channel: errno %d", errno);
	}
	if (is_b && (p->needs & NEED_SRQ)) {
		struct ibv_srq_init_attr sa = { .attr = { .max_wr = 16, .max_sge = 2 } };
		s->srq = ibv_create_srq(s->pd, &sa);
		if (!s->srq)
			return fail(p, "ibv_create_srq: errno %d", errno);
	}
	int cqe = is_b && (p->needs & NEED_TINY_CQ) ? 2 : 64;
	if (cfg->api == EXT) {
		struct ibv_cq_init_attr_ex ca = {
			.cqe = cqe,
			.channel = s->ch,
			.wc_flags = IBV_WC_EX_WITH_BYTE_LEN | IBV_WC_EX_WITH_IMM |
				    IBV_WC_EX_WITH_QP_NUM | IBV_WC_EX_WITH_SRC_QP,
		};
		s->cqx = ibv_create_cq_ex(s->ctx, &ca);
		if (!s->cqx)
			return fail(p, "ibv_create_cq_ex: errno %d", errno);
		s->cq = ibv_cq_ex_to_cq(s->cqx);
	} else {
		s->cq = ibv_create_cq(s->ctx, cqe, NULL, s->ch, 0);
		if (!s->cq)
			return fail(p, "ibv_create_cq: errno %d", errno);
	}
	/* Events mode: armed from the start, as perftest -e arms its CQs before the test. */
	if (cfg->events && ibv_req_notify_cq(s->cq, 0))
		return fail(p, "ibv_req_notify_cq");
	if (posix_memalign((void **)&s->buf, 4096, BUF_LEN))
		return fail(p, "no memory");
	memset(s->buf, 0, BUF_LEN);
	s->mr = ibv_reg_mr(s->pd, s->buf, BUF_LEN, ALL_ACCESS);
	if (!s->mr)
		return fail(p, "ibv_reg_mr: errno %d", errno);
	struct ibv_qp_init_attr_ex ia = {
		.send_cq = s->cq,
		.recv_cq = s->cq,
		.srq = s->srq,
		.cap = { .max_send_wr = 32, .max_recv_wr = 32, .max_send_sge = 4,
			 .max_recv_sge = 4, .max_inline_data = 64 },
		.qp_type = cfg->type,
		.comp_mask = IBV_QP_INIT_ATTR_PD,
		.pd = s->pd,
	};
	if (cfg->api == EXT) {
		ia.comp_mask |= IBV_QP_INIT_ATTR_SEND_OPS_FLAGS;
		ia.send_ops_flags = send_ops(cfg->type);
		s->qp = ibv_create_qp_ex(s->ctx, &ia);
		if (s->qp)
			s->qpx = ibv_qp_to_qp_ex(s->qp);
	} else {
		struct ibv_qp_init_attr pa = {
			.send_cq = ia.send_cq, .recv_cq = ia.recv_cq, .srq = ia.srq,
			.cap = ia.cap, .qp_type = ia.qp_type,
		};
		s->qp = ibv_create_qp(s->pd, &pa);
	}
	if (!s->qp)
		return fail(p, "create QP: errno %d", errno);
	return 0;
}

/* RESET -> INIT -> RTR -> RTS toward `peer`, as rdma-core's tests and perftest move a QP. */
static int connect_side(struct pair *p, struct side *s, const struct info *peer, int my_psn,
			int peer_psn)
{
	const struct config *cfg = p->cfg;
	enum ibv_qp_type t = cfg->type;
	struct ibv_qp_attr a = {
		.qp_state = IBV_QPS_INIT,
		.port_num = 1,
		.qp_access_flags = IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ |
				   IBV_ACCESS_REMOTE_ATOMIC,
		.qkey = 0x11111111,
	};
	int mask = IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT;
	mask |= t == IBV_QPT_UD ? IBV_QP_QKEY : IBV_QP_ACCESS_FLAGS;
	if (ibv_modify_qp(s->qp, &a, mask))
		return fail(p, "modify to INIT");
	memset(&a, 0, sizeof(a));
	a.qp_state = IBV_QPS_RTR;
	mask = IBV_QP_STATE;
	if (t != IBV_QPT_UD) {
		a.path_mtu = IBV_MTU_1024;
		a.dest_qp_num = peer->qpn;
		a.rq_psn = (uint32_t)peer_psn;
		a.ah_attr.is_global = 1;
		a.ah_attr.grh.dgid = peer->gid;
		a.ah_attr.grh.sgid_index = (uint8_t)cfg->gid_index;
		a.ah_attr.grh.hop_limit = 64;
		a.ah_attr.port_num = 1;
		mask |= IBV_QP_AV | IBV_QP_PATH_MTU | IBV_QP_DEST_QPN | IBV_QP_RQ_PSN;
		if (t == IBV_QPT_RC) {
			a.max_dest_rd_atomic = 4;
			a.min_rnr_timer = 12;
			mask |= IBV_QP_MAX_DEST_RD_ATOMIC | IBV_QP_MIN_RNR_TIMER;
		}
	}
	if (ibv_modify_qp(s->qp, &a, mask))
		return fail(p, "modify to RTR");
	memset(&a, 0, sizeof(a));
	a.qp_state = IBV_QPS_RTS;
	a.sq_psn = (uint32_t)my_psn;
	mask = IBV_QP_STATE | IBV_QP_SQ_PSN;
	if (t == IBV_QPT_RC) {
		a.timeout = 14;
		a.retry_cnt = 7;
		a.rnr_retry = 7;
		a.max_rd_atomic = 4;
		mask |= IBV_QP_TIMEOUT | IBV_QP_RETRY_CNT | IBV_QP_RNR_RETRY |
			IBV_QP_MAX_QP_RD_ATOMIC;
	}
	if (ibv_modify_qp(s->qp, &a, mask))
		return fail(p, "modify to RTS");
	if (t == IBV_QPT_UD) {
		struct ibv_ah_attr aa = { .is_global = 1, .port_num = 1 };
		aa.grh.dgid = peer->gid;
		aa.grh.sgid_index = (uint8_t)cfg->gid_index;
		aa.grh.hop_limit = 64;
		s->ah = ibv_create_ah(s->pd, &aa);
		if (!s->ah)
			return fail(p, "ibv_create_ah: errno %d", errno);
	}
	return 0;
}

static void info_of(struct pair *p, enum role r)
{
	struct side *s = &p->s[r];
	struct info *i = &p->info[r];
	i->qpn = s->qp->qp_num;
	i->rkey = s->mr->rkey;
	i->addr = (uintptr_t)s->buf;
	ibv_query_gid(s->ctx, 1, p->cfg->gid_index, &i->gid);
}

int make_pair(struct pair *p, const struct config *cfg, struct side *proto)
{
	p->cfg = cfg;
	for (int r = A; r <= B; r++)
		if (here(p, r)) {
			const struct side *pr = cfg->topo == ONE_CTX ? &proto[A] : &proto[r];
			if (make_side(p, &p->s[r], pr, r == B))
				return -1;
			info_of(p, r);
		}
	if (cfg->topo == TWO_PROC) {
		int me = here(p, A) ? A : B;
		exchange(p, &p->info[me], &p->info[!me], sizeof(struct info));
	}
	for (int r = A; r <= B; r++)
		if (here(p, r) && connect_side(p, &p->s[r], &p->info[!r], 100 + 100 * r, 200 - 100 * r))
			return -1;
	return sync_ends(p);
}

void free_pair(struct pair *p)
{
	for (int r = A; r <= B; r++) {
		struct side *s = &p->s[r];
		if (!here(p, r))
			continue;
		if (s->ah)
			ibv_destroy_ah(s->ah);
		if (s->qp)
			ibv_destroy_qp(s->qp);
		if (s->srq)
			ibv_destroy_srq(s->srq);
		if (s->mr)
			ibv_dereg_mr(s->mr);
		if (s->cq)
			ibv_destroy_cq(s->cq);
		if (s->ch)
			ibv_destroy_comp_channel(s->ch);
		free(s->buf);
		memset(s, 0, sizeof(*s));
	}
}
