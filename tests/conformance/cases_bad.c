/* Bad flows the verbs API defines: posting in a state that cannot, bad keys, bad lengths,
 * missing rights. Each checks the return value or the completion status of both ends, and
 * that nothing was written where nothing may be. */
#include "conf.h"
#include <errno.h>
#include <stdlib.h>
#include <string.h>

/* A second QP of end `r` like its first, left in RESET. */
static struct ibv_qp *reset_qp(struct pair *p, enum role r)
{
	struct side *s = &p->s[r];
	struct ibv_qp_init_attr_ex ia = {
		.send_cq = s->cq, .recv_cq = s->cq,
		.cap = { .max_send_wr = 4, .max_recv_wr = 4, .max_send_sge = 1, .max_recv_sge = 1 },
		.qp_type = p->cfg->type, .comp_mask = IBV_QP_INIT_ATTR_PD, .pd = s->pd,
	};
	if (p->cfg->api == EXT) {
		ia.comp_mask |= IBV_QP_INIT_ATTR_SEND_OPS_FLAGS;
		ia.send_ops_flags = IBV_QP_EX_WITH_SEND;
	}
	struct ibv_qp *qp = ibv_create_qp_ex(s->ctx, &ia);
	if (!qp)
		fail(p, "create a second QP: errno %d", errno);
	return qp;
}

static int post_in_reset(struct pair *p, const void *arg)
{
	(void)arg;
	if (!here(p, A))
		return sync_ends(p);
	struct ibv_qp *qp = reset_qp(p, A);
	if (!qp)
		return sync_ends(p);
	struct side *a = &p->s[A];
	struct ibv_qp *first = a->qp;
	struct ibv_qp_ex *firstx = a->qpx;
	a->qp = qp;
	a->qpx = p->cfg->api == EXT ? ibv_qp_to_qp_ex(qp) : NULL;
	struct op op = { .wr_id = 1, .opcode = IBV_WR_SEND, .flags = IBV_SEND_SIGNALED, .nsge = 1 };
	op.sge[0] = sge_of(a, 0, 8);
	int rc = post(p, A, &op);
	if (rc != EINVAL)
		fail(p, "posting a send in RESET returned %d, not EINVAL", rc);
	struct ibv_sge rs = sge_of(a, RECV_OFF, 8);
	struct ibv_recv_wr rwr = { .wr_id = 2, .sg_list = &rs, .num_sge = 1 }, *bad = NULL;
	rc = ibv_post_recv(qp, &rwr, &bad);
	if (rc != EINVAL && !p->failed)
		fail(p, "ibv_post_recv in RESET returned %d, not EINVAL", rc);
	a->qp = first;
	a->qpx = firstx;
	ibv_destroy_qp(qp);
	if (!p->failed)
		expect_nothing(p, A, 50);
	return sync_ends(p);
}

/* A SEND whose SGE names a key that is no region: A's WR fails locally, B sees nothing. */
static int send_bad_lkey(struct pair *p, const void *arg)
{
	(void)arg;
	int ud = p->cfg->type == IBV_QPT_UD;
	if (here(p, B)) {
		struct ibv_sge rs = sge_of(&p->s[B], RECV_OFF, 256);
		if (post_recv(p, B, 3, &rs, 1))
			fail(p, "ibv_post_recv");
	}
	if (sync_ends(p))
		return -1;
	if (here(p, A)) {
		struct op op = { .wr_id = 4, .opcode = IBV_WR_SEND, .flags = IBV_SEND_SIGNALED,
				 .nsge = 1 };
		op.sge[0] = sge_of(&p->s[A], 0, 64);
		op.sge[0].lkey ^= 0x5a5a00;
		/* rxe's requester fails what it cannot gather so (IBA would say a local
		 * protection error). */
		post_wait(p, A, &op, IBV_WC_LOC_QP_OP_ERR, "A's SEND with a bad lkey", NULL);
	}
	if (sync_ends(p))
		return -1;
	if (here(p, B))
		expect_nothing(p, B, ud ? 100 : 50);
	return sync_ends(p);
}

/* A WRITE through a key that is no region, or past the end of B's region: RC fails A's WR
 * with a remote access error; UC completes it (no acknowledgement) and B drops it. B's
 * bytes stay as they were either way. */
static int write_refused(struct pair *p, const void *arg)
{
	int past_end = arg != NULL;
	if (sync_ends(p))
		return -1;
	if (here(p, A)) {
		fill(p->s[A].buf, 256, 42);
		struct op op = { .wr_id = 5, .opcode = IBV_WR_RDMA_WRITE, .flags = IBV_SEND_SIGNALED,
				 .nsge = 1, .rkey = p->info[B].rkey,
				 .raddr = p->info[B].addr + RECV_OFF };
		op.sge[0] = sge_of(&p->s[A], 0, 256);
		if (past_end)
			op.raddr = p->info[B].addr + BUF_LEN - 128;
		else
			op.rkey ^= 0x5a5a00;
		enum ibv_wc_status want =
			p->cfg->type == IBV_QPT_RC ? IBV_WC_REM_ACCESS_ERR : IBV_WC_SUCCESS;
		post_wait(p, A, &op, want, "A's refused WRITE", NULL);
	}
	if (sync_ends(p))
		return -1;
	if (here(p, B)) {
		expect_nothing(p, B, 50);
		static const uint8_t zero[256];
		const uint8_t *at = p->s[B].buf + (past_end ? BUF_LEN - 128 : RECV_OFF);
		if (!p->failed && memcmp(at, zero, past_end ? 128 : 256))
			fail(p, "the refused WRITE changed B's bytes");
	}
	return sync_ends(p);
}

/* A READ into a local SGE whose key is no region: A's WR fails with a local protection
 * error (where rxe checks it: placing the response). */
static int read_bad_lkey(struct pair *p, const void *arg)
{
	(void)arg;
	if (here(p, A)) {
		struct op op = { .wr_id = 15, .opcode = IBV_WR_RDMA_READ, .flags = IBV_SEND_SIGNALED,
				 .nsge = 1, .rkey = p->info[B].rkey, .raddr = p->info[B].addr };
		op.sge[0] = sge_of(&p->s[A], RECV_OFF, 64);
		op.sge[0].lkey ^= 0x5a5a00;
		post_wait(p, A, &op, IBV_WC_LOC_PROT_ERR, "A's READ into a bad lkey", NULL);
	}
	return sync_ends(p);
}

/* A READ of a region B registered without REMOTE_READ. */
static int read_without_rights(struct pair *p, const void *arg)
{
	(void)arg;
	uint64_t rkey = 0, addr = 0;
	struct ibv_mr *mr = NULL;
	if (here(p, B)) {
		mr = ibv_reg_mr(p->s[B].pd, p->s[B].buf + RECV_OFF, 4096,
				IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE);
		if (!mr)
			fail(p, "ibv_reg_mr: errno %d", errno);
		else
			rkey = mr->rkey, addr = (uintptr_t)mr->addr;
	}
	rkey = share_u64(p, B, rkey);
	addr = share_u64(p, B, addr);
	if (sync_ends(p))
		goto out;
	if (here(p, A)) {
		struct op op = { .wr_id = 6, .opcode = IBV_WR_RDMA_READ, .flags = IBV_SEND_SIGNALED,
				 .nsge = 1, .rkey = (uint32_t)rkey, .raddr = addr };
		op.sge[0] = sge_of(&p->s[A], RECV_OFF, 64);
		post_wait(p, A, &op, IBV_WC_REM_ACCESS_ERR, "A's READ without rights", NULL);
	}
	sync_ends(p);
out:
	if (mr)
		ibv_dereg_mr(mr);
	return p->failed ? -1 : 0;
}

/* A SEND longer than B's receive buffer: RC fails both ends' WRs (A: remote operational
 * error, as rxe NAKs it; B: a local QP operation error, as rxe says, not IBA's length
 * error); UC and UD complete A's WR (nothing acknowledges it), and B's receive fails so. */
static int send_too_long(struct pair *p, const void *arg)
{
	(void)arg;
	enum ibv_qp_type t = p->cfg->type;
	if (here(p, B)) {
		struct ibv_sge rs = sge_of(&p->s[B], RECV_OFF, t == IBV_QPT_UD ? GRH + 16 : 16);
		if (post_recv(p, B, 12, &rs, 1))
			fail(p, "ibv_post_recv");
	}
	if (sync_ends(p))
		return -1;
	if (here(p, A)) {
		struct op op = { .wr_id = 13, .opcode = IBV_WR_SEND, .flags = IBV_SEND_SIGNALED,
				 .nsge = 1 };
		op.sge[0] = sge_of(&p->s[A], 0, 100);
		post_wait(p, A, &op, t == IBV_QPT_RC ? IBV_WC_REM_OP_ERR : IBV_WC_SUCCESS,
			  "A's SEND too long", NULL);
	}
	if (sync_ends(p))
		return -1;
	if (here(p, B))
		expect_wc(p, B, IBV_WC_LOC_QP_OP_ERR, "B's receive too short", NULL);
	return sync_ends(p);
}

/* More SGEs than the QP was made with, and inline data beyond its max_inline_data: the
 * post itself fails with EINVAL (plain API) and nothing completes. */
static int post_beyond_caps(struct pair *p, const void *arg)
{
	int inl = arg != NULL;
	if (!here(p, A))
		return sync_ends(p);
	struct side *a = &p->s[A];
	struct ibv_qp_attr qa;
	struct ibv_qp_init_attr qi;
	if (ibv_query_qp(a->qp, &qa, IBV_QP_CAP, &qi))
		return fail(p, "ibv_query_qp"), sync_ends(p);
	struct op op = { .wr_id = 14, .opcode = IBV_WR_SEND, .flags = IBV_SEND_SIGNALED };
	if (inl) {
		uint32_t n = qi.cap.max_inline_data + 1;
		op.flags |= IBV_SEND_INLINE;
		op.nsge = 1;
		op.sge[0] = sge_of(a, 0, n);
	} else {
		op.nsge = 4;
		for (int i = 0; i < 4; i++)
			op.sge[i] = sge_of(a, (size_t)i * 64, 8);
		if (qi.cap.max_send_sge >= 4) {
			/* The QP got 4 or more: ask for one more than it has, through the plain
			 * API (the op holds 4). */
			struct ibv_sge *many = calloc(qi.cap.max_send_sge + 1, sizeof(*many));
			for (uint32_t i = 0; i <= qi.cap.max_send_sge; i++)
				many[i] = sge_of(a, i * 8, 8);
			struct ibv_send_wr wr = { .wr_id = 14, .sg_list = many,
						  .num_sge = (int)qi.cap.max_send_sge + 1,
						  .opcode = IBV_WR_SEND,
						  .send_flags = IBV_SEND_SIGNALED }, *bad = NULL;
			if (p->cfg->type == IBV_QPT_UD) {
				wr.wr.ud.ah = a->ah;
				wr.wr.ud.remote_qpn = p->info[B].qpn;
				wr.wr.ud.remote_qkey = 0x11111111;
			}
			int rc = ibv_post_send(a->qp, &wr, &bad);
			free(many);
			if (rc == 0 || bad != &wr)
				fail(p, "%u SGEs on a QP of %u: %d", qi.cap.max_send_sge + 1,
				     qi.cap.max_send_sge, rc);
			if (!p->failed)
				expect_nothing(p, A, 50);
			return sync_ends(p);
		}
	}
	int rc = post(p, A, &op);
	if (rc == 0)
		fail(p, "the post beyond the QP's capacities was taken");
	else if (p->cfg->api == PLAIN && rc != EINVAL)
		fail(p, "the post beyond the QP's capacities returned %d, not EINVAL", rc);
	if (!p->failed)
		expect_nothing(p, A, 50);
	return sync_ends(p);
}

/* ibv_rereg_mr of A's region: rxe (Linux 6.1) offers none, IBV_REREG_MR_ERR_CMD with
 * EOPNOTSUPP, and the region keeps its keys: a WRITE from it still moves the bytes. */
static int rereg_refused(struct pair *p, const void *arg)
{
	(void)arg;
	if (here(p, A)) {
		struct side *a = &p->s[A];
		errno = 0;
		int rc = ibv_rereg_mr(a->mr, IBV_REREG_MR_CHANGE_ACCESS, NULL, NULL, 0,
				      IBV_ACCESS_LOCAL_WRITE);
		if (rc != IBV_REREG_MR_ERR_CMD || errno != EOPNOTSUPP)
			fail(p, "ibv_rereg_mr: %d errno %d, not IBV_REREG_MR_ERR_CMD and EOPNOTSUPP",
			     rc, errno);
		fill(a->buf, 128, 77);
		struct op op = { .wr_id = 16, .opcode = IBV_WR_RDMA_WRITE, .flags = IBV_SEND_SIGNALED,
				 .nsge = 1, .rkey = p->info[B].rkey,
				 .raddr = p->info[B].addr + RECV_OFF };
		op.sge[0] = sge_of(a, 0, 128);
		if (!p->failed)
			post_wait(p, A, &op, IBV_WC_SUCCESS, "A's WRITE with the region's keys",
				  NULL);
	}
	if (sync_ends(p))
		return -1;
	if (here(p, B)) {
		/* UC completes at A before B may have the bytes: wait for them (5 s at most). */
		uint8_t want[128];
		fill(want, sizeof(want), 77);
		for (int i = 0; i < 500 && memcmp(p->s[B].buf + RECV_OFF, want, sizeof(want)); i++)
			expect_nothing(p, B, 10);
		check_bytes(p, p->s[B].buf + RECV_OFF, 128, 77, "B's bytes");
	}
	return sync_ends(p);
}

#define ALL (T_RC | T_UC | T_UD)

const struct kase bad_cases[] = {
	{ "bad-post-in-reset", post_in_reset, NULL, ALL, 0 },
	{ "bad-send-lkey", send_bad_lkey, NULL, ALL, 0 },
	{ "bad-write-rkey", write_refused, NULL, T_RC | T_UC, 0 },
	{ "bad-write-past-end", write_refused, "past end", T_RC | T_UC, 0 },
	{ "bad-read-without-rights", read_without_rights, NULL, T_RC, 0 },
	{ "bad-read-lkey", read_bad_lkey, NULL, T_RC, 0 },
	{ "bad-send-too-long", send_too_long, NULL, ALL, 0 },
	{ "bad-too-many-sges", post_beyond_caps, NULL, ALL, 0 },
	{ "bad-inline-too-long", post_beyond_caps, "inline", ALL, 0 },
	{ "rereg-mr-refused", rereg_refused, NULL, T_RC | T_UC, 0 },
};
const int n_bad_cases = sizeof(bad_cases) / sizeof(bad_cases[0]);
