/* The extended verbs from C: a CQ from ibv_create_cq_ex polled with ibv_start_poll /
 * ibv_next_poll / ibv_wc_read_*, and RC QPs from ibv_create_qp_ex posting through
 * ibv_wr_start ... ibv_wr_complete (WRITE, WRITE with immediate, READ, both atomics, SEND
 * with immediate from inline data), between two contexts of one process. Then what must
 * fail: a batch with too much inline data (ENOSPC, nothing posted), an aborted batch
 * (nothing posted), a plain QP's ibv_qp_to_qp_ex (NULL), and the options rxe does not
 * offer (EOPNOTSUPP). Prints "PASS <case>" per case; exits 1 at the first failure.
 */
#include "common.h"
#include <errno.h>
#include <inttypes.h>

#define LEN 4096

struct side {
	struct ibv_context *ctx;
	struct ibv_pd *pd;
	struct ibv_cq_ex *cq;
	struct ibv_qp *qp;
	struct ibv_qp_ex *qpx;
	struct ibv_mr *mr;
	char *buf;
	union ibv_gid gid;
};

static void open_side(struct ibv_device *dev, struct side *s)
{
	s->ctx = ibv_open_device(dev);
	CHECK(s->ctx, "ibv_open_device");
	s->pd = ibv_alloc_pd(s->ctx);
	CHECK(s->pd, "ibv_alloc_pd");
	struct ibv_cq_init_attr_ex ca = {
		.cqe = 32,
		.wc_flags = IBV_WC_EX_WITH_BYTE_LEN | IBV_WC_EX_WITH_IMM | IBV_WC_EX_WITH_QP_NUM |
			    IBV_WC_EX_WITH_SRC_QP,
		.comp_mask = IBV_CQ_INIT_ATTR_MASK_FLAGS,
		.flags = IBV_CREATE_CQ_ATTR_SINGLE_THREADED,
	};
	s->cq = ibv_create_cq_ex(s->ctx, &ca);
	CHECK(s->cq, "ibv_create_cq_ex: %s", strerror(errno));
	CHECK(posix_memalign((void **)&s->buf, 4096, LEN) == 0, "posix_memalign");
	memset(s->buf, 0, LEN);
	s->mr = ibv_reg_mr(s->pd, s->buf, LEN,
			   IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE |
				   IBV_ACCESS_REMOTE_READ | IBV_ACCESS_REMOTE_ATOMIC);
	CHECK(s->mr, "ibv_reg_mr");
	struct ibv_qp_init_attr_ex qa = {
		.send_cq = ibv_cq_ex_to_cq(s->cq),
		.recv_cq = ibv_cq_ex_to_cq(s->cq),
		.cap = { .max_send_wr = 16, .max_recv_wr = 8, .max_send_sge = 2, .max_recv_sge = 1,
			 .max_inline_data = 64 },
		.qp_type = IBV_QPT_RC,
		.comp_mask = IBV_QP_INIT_ATTR_PD | IBV_QP_INIT_ATTR_SEND_OPS_FLAGS,
		.pd = s->pd,
		.send_ops_flags = IBV_QP_EX_WITH_RDMA_WRITE | IBV_QP_EX_WITH_RDMA_WRITE_WITH_IMM |
				  IBV_QP_EX_WITH_RDMA_READ | IBV_QP_EX_WITH_SEND_WITH_IMM |
				  IBV_QP_EX_WITH_ATOMIC_CMP_AND_SWP |
				  IBV_QP_EX_WITH_ATOMIC_FETCH_AND_ADD,
	};
	s->qp = ibv_create_qp_ex(s->ctx, &qa);
	CHECK(s->qp, "ibv_create_qp_ex: %s", strerror(errno));
	CHECK(qa.cap.max_inline_data >= 64, "max_inline_data written back");
	s->qpx = ibv_qp_to_qp_ex(s->qp);
	CHECK(s->qpx, "ibv_qp_to_qp_ex");
	CHECK(ibv_query_gid(s->ctx, 1, 0, &s->gid) == 0, "ibv_query_gid");
}

static void connect_to(struct side *s, struct side *peer)
{
	connect_rc(s->qp, peer->qp->qp_num, peer->gid);
}

/* What one completion said, read with the extended polling API. */
struct done {
	uint64_t wr_id;
	enum ibv_wc_status status;
	enum ibv_wc_opcode opcode;
	uint32_t byte_len, qp_num, imm;
	unsigned int flags;
};

/* Up to `max` completions of `cq` within `secs` seconds; how many. */
static int poll_ex(struct ibv_cq_ex *cq, struct done *out, int max, double secs)
{
	int n = 0;
	double t0 = now();
	struct ibv_poll_cq_attr attr = { 0 };
	while (n < max && now() - t0 < secs) {
		int r = ibv_start_poll(cq, &attr);
		if (r == ENOENT)
			continue;
		CHECK(r == 0, "ibv_start_poll: %d", r);
		do {
			struct done d = { cq->wr_id, cq->status, ibv_wc_read_opcode(cq),
					  ibv_wc_read_byte_len(cq), ibv_wc_read_qp_num(cq),
					  be32toh(ibv_wc_read_imm_data(cq)), ibv_wc_read_wc_flags(cq) };
			out[n++] = d;
		} while (n < max && (r = ibv_next_poll(cq)) == 0);
		CHECK(n == max || r == ENOENT, "ibv_next_poll: %d", r);
		ibv_end_poll(cq);
	}
	return n;
}

int main(void)
{
	int n;
	struct ibv_device **list = ibv_get_device_list(&n);
	CHECK(list && n > 0, "no RDMA device");
	struct side a, b;
	open_side(list[0], &a);
	open_side(list[0], &b);
	connect_to(&a, &b);
	connect_to(&b, &a);
	uint64_t bbase = (uintptr_t)b.buf;
	uint64_t *batom = (uint64_t *)(b.buf + LEN - 8);
	printf("PASS ibv_create_cq_ex, ibv_create_qp_ex, ibv_qp_to_qp_ex\n");

	/* One batch of six WRs. */
	for (int i = 0; i < 1024; i++)
		a.buf[i] = (char)(i * 7 + 1);
	for (int i = 0; i < 512; i++)
		b.buf[2048 + i] = (char)(i * 13 + 5);
	*batom = 41;
	struct ibv_recv_wr rwr[2], *rbad;
	struct ibv_sge rsge[2];
	for (int i = 0; i < 2; i++) {
		rsge[i] = (struct ibv_sge){ .addr = bbase + 3072 + 256 * i, .length = 256,
					    .lkey = b.mr->lkey };
		rwr[i] = (struct ibv_recv_wr){ .wr_id = 100 + i, .sg_list = &rsge[i], .num_sge = 1,
					       .next = i == 0 ? &rwr[1] : NULL };
	}
	CHECK(ibv_post_recv(b.qp, &rwr[0], &rbad) == 0, "ibv_post_recv");
	struct ibv_qp_ex *q = a.qpx;
	const char inline_msg[] = "inline through ibv_wr_set_inline_data";
	ibv_wr_start(q);
	q->wr_id = 1;
	q->wr_flags = IBV_SEND_SIGNALED;
	ibv_wr_rdma_write(q, b.mr->rkey, bbase);
	ibv_wr_set_sge(q, a.mr->lkey, (uintptr_t)a.buf, 1024);
	q->wr_id = 2;
	ibv_wr_rdma_write_imm(q, b.mr->rkey, bbase + 1024, htobe32(0xabcd0001));
	ibv_wr_set_sge(q, a.mr->lkey, (uintptr_t)a.buf + 512, 256);
	q->wr_id = 3;
	ibv_wr_rdma_read(q, b.mr->rkey, bbase + 2048);
	struct ibv_sge two[2] = { { (uintptr_t)a.buf + 2048, 256, a.mr->lkey },
				  { (uintptr_t)a.buf + 2304, 256, a.mr->lkey } };
	ibv_wr_set_sge_list(q, 2, two);
	q->wr_id = 4;
	ibv_wr_atomic_cmp_swp(q, b.mr->rkey, bbase + LEN - 8, 41, 1000);
	ibv_wr_set_sge(q, a.mr->lkey, (uintptr_t)a.buf + 2560, 8);
	q->wr_id = 5;
	ibv_wr_atomic_fetch_add(q, b.mr->rkey, bbase + LEN - 8, 24);
	ibv_wr_set_sge(q, a.mr->lkey, (uintptr_t)a.buf + 2568, 8);
	q->wr_id = 6;
	q->wr_flags = IBV_SEND_SIGNALED | IBV_SEND_INLINE;
	ibv_wr_send_imm(q, htobe32(0xabcd0002));
	ibv_wr_set_inline_data(q, (void *)inline_msg, sizeof(inline_msg));
	CHECK(ibv_wr_complete(q) == 0, "ibv_wr_complete");

	struct done d[8];
	CHECK(poll_ex(a.cq, d, 6, 3) == 6, "six send completions");
	enum ibv_wc_opcode want[] = { IBV_WC_RDMA_WRITE, IBV_WC_RDMA_WRITE, IBV_WC_RDMA_READ,
				      IBV_WC_COMP_SWAP, IBV_WC_FETCH_ADD, IBV_WC_SEND };
	for (int i = 0; i < 6; i++) {
		CHECK(d[i].wr_id == (uint64_t)i + 1 && d[i].status == IBV_WC_SUCCESS &&
			      d[i].opcode == want[i] && d[i].qp_num == a.qp->qp_num,
		      "send completion %d: wr_id %" PRIu64 " status %s opcode %d", i, d[i].wr_id,
		      ibv_wc_status_str(d[i].status), d[i].opcode);
	}
	CHECK(poll_ex(b.cq, d, 2, 3) == 2, "two receive completions");
	CHECK(d[0].wr_id == 100 && d[0].opcode == IBV_WC_RECV_RDMA_WITH_IMM &&
		      (d[0].flags & IBV_WC_WITH_IMM) && d[0].imm == 0xabcd0001 &&
		      d[0].byte_len == 256 && d[0].qp_num == b.qp->qp_num,
	      "WRITE with immediate's receive completion");
	CHECK(d[1].wr_id == 101 && d[1].opcode == IBV_WC_RECV && (d[1].flags & IBV_WC_WITH_IMM) &&
		      d[1].imm == 0xabcd0002 && d[1].byte_len == sizeof(inline_msg),
	      "SEND with immediate's receive completion");
	CHECK(memcmp(b.buf, a.buf, 1024) == 0, "WRITE: bytes differ");
	CHECK(memcmp(b.buf + 1024, a.buf + 512, 256) == 0, "WRITE with immediate: bytes differ");
	CHECK(memcmp(a.buf + 2048, b.buf + 2048, 512) == 0, "READ into two SGEs: bytes differ");
	CHECK(*(uint64_t *)(a.buf + 2560) == 41 && *(uint64_t *)(a.buf + 2568) == 1000 &&
		      *batom == 1024,
	      "atomics: %" PRIu64, *batom);
	CHECK(memcmp(b.buf + 3328, inline_msg, sizeof(inline_msg)) == 0, "inline SEND: bytes");
	printf("PASS one batch: WRITE, WRITE with imm, READ, CAS, FAA, inline SEND with imm\n");

	/* Too much inline data: the batch fails with ENOSPC and posts nothing. */
	char big[512] = { 0 };
	ibv_wr_start(q);
	q->wr_id = 7;
	q->wr_flags = IBV_SEND_SIGNALED;
	ibv_wr_rdma_write(q, b.mr->rkey, bbase);
	ibv_wr_set_sge(q, a.mr->lkey, (uintptr_t)a.buf, 8);
	q->wr_id = 8;
	ibv_wr_rdma_write(q, b.mr->rkey, bbase);
	ibv_wr_set_inline_data(q, big, sizeof(big));
	int r = ibv_wr_complete(q);
	CHECK(r == ENOSPC, "oversized inline: %d", r);
	CHECK(poll_ex(a.cq, d, 1, 0.2) == 0, "a failed batch completed something");
	printf("PASS inline data over max_inline_data: ENOSPC, nothing posted\n");

	/* An aborted batch posts nothing; the next one works. */
	ibv_wr_start(q);
	q->wr_id = 9;
	ibv_wr_rdma_write(q, b.mr->rkey, bbase);
	ibv_wr_set_sge(q, a.mr->lkey, (uintptr_t)a.buf, 8);
	ibv_wr_abort(q);
	CHECK(poll_ex(a.cq, d, 1, 0.2) == 0, "an aborted batch completed something");
	ibv_wr_start(q);
	q->wr_id = 10;
	ibv_wr_rdma_write(q, b.mr->rkey, bbase);
	ibv_wr_set_sge(q, a.mr->lkey, (uintptr_t)a.buf, 8);
	CHECK(ibv_wr_complete(q) == 0, "batch after abort");
	CHECK(poll_ex(a.cq, d, 2, 0.5) == 1 && d[0].wr_id == 10 && d[0].status == IBV_WC_SUCCESS,
	      "only the batch after the abort completes");
	printf("PASS ibv_wr_abort posts nothing\n");

	/* A QP from ibv_create_qp has no extended send API. */
	struct ibv_qp_init_attr pa = { .send_cq = ibv_cq_ex_to_cq(a.cq),
				       .recv_cq = ibv_cq_ex_to_cq(a.cq),
				       .cap = { .max_send_wr = 1, .max_recv_wr = 1,
						.max_send_sge = 1, .max_recv_sge = 1 },
				       .qp_type = IBV_QPT_RC };
	struct ibv_qp *plain = ibv_create_qp(a.pd, &pa);
	CHECK(plain && ibv_qp_to_qp_ex(plain) == NULL, "plain QP's ibv_qp_to_qp_ex");
	CHECK(ibv_destroy_qp(plain) == 0, "destroy plain QP");
	printf("PASS ibv_qp_to_qp_ex of a plain QP is NULL\n");

	/* What rxe does not offer. */
	struct ibv_cq_init_attr_ex ts = { .cqe = 4,
					  .wc_flags = IBV_WC_EX_WITH_COMPLETION_TIMESTAMP };
	errno = 0;
	CHECK(ibv_create_cq_ex(a.ctx, &ts) == NULL && errno == EOPNOTSUPP,
	      "timestamped CQ: errno %d", errno);
	struct ibv_qp_init_attr_ex ud = {
		.send_cq = ibv_cq_ex_to_cq(a.cq), .recv_cq = ibv_cq_ex_to_cq(a.cq),
		.cap = { .max_send_wr = 1, .max_recv_wr = 1, .max_send_sge = 1, .max_recv_sge = 1 },
		.qp_type = IBV_QPT_UD, .pd = a.pd,
		.comp_mask = IBV_QP_INIT_ATTR_PD | IBV_QP_INIT_ATTR_SEND_OPS_FLAGS,
		.send_ops_flags = IBV_QP_EX_WITH_RDMA_WRITE,
	};
	errno = 0;
	CHECK(ibv_create_qp_ex(a.ctx, &ud) == NULL && errno == EOPNOTSUPP,
	      "UD QP with RDMA WRITE: errno %d", errno);
	ud.qp_type = IBV_QPT_RC;
	ud.send_ops_flags = IBV_QP_EX_WITH_ATOMIC_WRITE;
	errno = 0;
	CHECK(ibv_create_qp_ex(a.ctx, &ud) == NULL && errno == EOPNOTSUPP,
	      "RC QP with atomic write: errno %d", errno);
	ud.send_ops_flags = IBV_QP_EX_WITH_SEND;
	ud.comp_mask |= IBV_QP_INIT_ATTR_CREATE_FLAGS;
	ud.create_flags = IBV_QP_CREATE_SCATTER_FCS;
	errno = 0;
	CHECK(ibv_create_qp_ex(a.ctx, &ud) == NULL && errno == EOPNOTSUPP,
	      "creation flags: errno %d", errno);
	printf("PASS timestamps, ops a QP type lacks, atomic write, creation flags: EOPNOTSUPP\n");

	struct side *sides[] = { &a, &b };
	for (int i = 0; i < 2; i++) {
		struct side *s = sides[i];
		CHECK(ibv_destroy_qp(s->qp) == 0 && ibv_dereg_mr(s->mr) == 0 &&
			      ibv_destroy_cq(ibv_cq_ex_to_cq(s->cq)) == 0 &&
			      ibv_dealloc_pd(s->pd) == 0 && ibv_close_device(s->ctx) == 0,
		      "teardown");
		free(s->buf);
	}
	ibv_free_device_list(list);
	printf("PASS teardown\n");
	return 0;
}
