/* RC verbs from C on oxrdma's libibverbs.so.1: two contexts in one process (each takes a
 * loopback address of its own), one queue pair each, connected to each other. A runs
 * RDMA WRITE, RDMA READ, SEND with immediate, compare-and-swap and fetch-and-add against
 * B, and every result is checked byte for byte.
 *
 *   cc examples/rc_verbs.c -o rc_verbs -libverbs
 *   LD_LIBRARY_PATH=target/release ./rc_verbs
 */
#include <infiniband/verbs.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define LEN 4096

struct side {
	struct ibv_context *ctx;
	struct ibv_pd *pd;
	struct ibv_cq *cq;
	struct ibv_qp *qp;
	struct ibv_mr *mr;
	uint64_t *atom; /* 8-byte aligned, inside buf */
	char *buf;
	union ibv_gid gid;
};

#define CHECK(cond, ...)                                                               \
	do {                                                                           \
		if (!(cond)) {                                                         \
			fprintf(stderr, "FAIL: " __VA_ARGS__);                         \
			fprintf(stderr, "\n");                                         \
			exit(1);                                                       \
		}                                                                      \
	} while (0)

static void open_side(struct ibv_device *dev, struct side *s)
{
	s->ctx = ibv_open_device(dev);
	CHECK(s->ctx, "ibv_open_device");
	s->pd = ibv_alloc_pd(s->ctx);
	CHECK(s->pd, "ibv_alloc_pd");
	s->cq = ibv_create_cq(s->ctx, 16, NULL, NULL, 0);
	CHECK(s->cq, "ibv_create_cq");
	CHECK(posix_memalign((void **)&s->buf, 4096, LEN) == 0, "posix_memalign");
	memset(s->buf, 0, LEN);
	s->atom = (uint64_t *)(s->buf + LEN - 8);
	s->mr = ibv_reg_mr(s->pd, s->buf, LEN,
			   IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE |
				   IBV_ACCESS_REMOTE_READ | IBV_ACCESS_REMOTE_ATOMIC);
	CHECK(s->mr, "ibv_reg_mr");
	struct ibv_qp_init_attr init = {
		.send_cq = s->cq,
		.recv_cq = s->cq,
		.cap = { .max_send_wr = 8, .max_recv_wr = 8, .max_send_sge = 1, .max_recv_sge = 1 },
		.qp_type = IBV_QPT_RC,
	};
	s->qp = ibv_create_qp(s->pd, &init);
	CHECK(s->qp, "ibv_create_qp");
	CHECK(ibv_query_gid(s->ctx, 1, 0, &s->gid) == 0, "ibv_query_gid");
}

/* RESET -> INIT -> RTR -> RTS towards `peer`. */
static void connect_to(struct side *s, struct side *peer)
{
	struct ibv_qp_attr a = {
		.qp_state = IBV_QPS_INIT,
		.port_num = 1,
		.qp_access_flags = IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ |
				   IBV_ACCESS_REMOTE_ATOMIC,
	};
	CHECK(ibv_modify_qp(s->qp, &a,
			    IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_ACCESS_FLAGS) == 0,
	      "modify to INIT");
	memset(&a, 0, sizeof(a));
	a.qp_state = IBV_QPS_RTR;
	a.path_mtu = IBV_MTU_1024;
	a.dest_qp_num = peer->qp->qp_num;
	a.rq_psn = 0;
	a.max_dest_rd_atomic = 1;
	a.min_rnr_timer = 12;
	a.ah_attr.is_global = 1;
	a.ah_attr.grh.dgid = peer->gid;
	a.ah_attr.grh.hop_limit = 1;
	a.ah_attr.port_num = 1;
	CHECK(ibv_modify_qp(s->qp, &a,
			    IBV_QP_STATE | IBV_QP_AV | IBV_QP_PATH_MTU | IBV_QP_DEST_QPN |
				    IBV_QP_RQ_PSN | IBV_QP_MAX_DEST_RD_ATOMIC |
				    IBV_QP_MIN_RNR_TIMER) == 0,
	      "modify to RTR");
	memset(&a, 0, sizeof(a));
	a.qp_state = IBV_QPS_RTS;
	a.timeout = 14;
	a.retry_cnt = 7;
	a.rnr_retry = 7;
	a.sq_psn = 0;
	a.max_rd_atomic = 1;
	CHECK(ibv_modify_qp(s->qp, &a,
			    IBV_QP_STATE | IBV_QP_TIMEOUT | IBV_QP_RETRY_CNT | IBV_QP_RNR_RETRY |
				    IBV_QP_SQ_PSN | IBV_QP_MAX_QP_RD_ATOMIC) == 0,
	      "modify to RTS");
}

/* One completion of `cq`, within two seconds. */
static struct ibv_wc wait_one(struct ibv_cq *cq, const char *what)
{
	struct ibv_wc wc;
	struct timespec t0, t;
	clock_gettime(CLOCK_MONOTONIC, &t0);
	for (;;) {
		int n = ibv_poll_cq(cq, 1, &wc);
		CHECK(n >= 0, "%s: ibv_poll_cq", what);
		if (n == 1)
			break;
		clock_gettime(CLOCK_MONOTONIC, &t);
		CHECK(t.tv_sec - t0.tv_sec < 2, "%s: no completion", what);
	}
	CHECK(wc.status == IBV_WC_SUCCESS, "%s: %s", what, ibv_wc_status_str(wc.status));
	return wc;
}

/* Posts one signaled WR of `op` on A with the SGE [off, off+len) of A's buffer. */
static void post(struct side *a, struct side *b, enum ibv_wr_opcode op, size_t off, uint32_t len,
		 uint64_t remote, uint64_t compare_add, uint64_t swap)
{
	struct ibv_sge sge = { .addr = (uintptr_t)a->buf + off, .length = len, .lkey = a->mr->lkey };
	struct ibv_send_wr wr = { .wr_id = op, .sg_list = &sge, .num_sge = 1, .opcode = op,
				  .send_flags = IBV_SEND_SIGNALED }, *bad;
	if (op == IBV_WR_ATOMIC_CMP_AND_SWP || op == IBV_WR_ATOMIC_FETCH_AND_ADD) {
		wr.wr.atomic.remote_addr = remote;
		wr.wr.atomic.rkey = b->mr->rkey;
		wr.wr.atomic.compare_add = compare_add;
		wr.wr.atomic.swap = swap;
	} else {
		wr.wr.rdma.remote_addr = remote;
		wr.wr.rdma.rkey = b->mr->rkey;
	}
	if (op == IBV_WR_SEND_WITH_IMM)
		wr.imm_data = htobe32(0x1234abcd);
	CHECK(ibv_post_send(a->qp, &wr, &bad) == 0, "ibv_post_send");
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

	/* RDMA WRITE: A's bytes 0..1024 land at B's 0..1024. */
	for (int i = 0; i < 1024; i++)
		a.buf[i] = (char)(i * 7 + 1);
	post(&a, &b, IBV_WR_RDMA_WRITE, 0, 1024, bbase, 0, 0);
	wait_one(a.cq, "RDMA WRITE");
	CHECK(memcmp(a.buf, b.buf, 1024) == 0, "RDMA WRITE: bytes differ");
	printf("RDMA WRITE 1024 B: ok\n");

	/* RDMA READ: B's bytes 2048..3072 into A's 1024..2048. */
	for (int i = 0; i < 1024; i++)
		b.buf[2048 + i] = (char)(i * 13 + 5);
	post(&a, &b, IBV_WR_RDMA_READ, 1024, 1024, bbase + 2048, 0, 0);
	wait_one(a.cq, "RDMA READ");
	CHECK(memcmp(a.buf + 1024, b.buf + 2048, 1024) == 0, "RDMA READ: bytes differ");
	printf("RDMA READ 1024 B: ok\n");

	/* SEND with immediate: A's 0..512 into B's receive at 3072. */
	struct ibv_sge rsge = { .addr = bbase + 3072, .length = 512, .lkey = b.mr->lkey };
	struct ibv_recv_wr rwr = { .wr_id = 77, .sg_list = &rsge, .num_sge = 1 }, *rbad;
	CHECK(ibv_post_recv(b.qp, &rwr, &rbad) == 0, "ibv_post_recv");
	post(&a, &b, IBV_WR_SEND_WITH_IMM, 0, 512, 0, 0, 0);
	wait_one(a.cq, "SEND");
	struct ibv_wc wc = wait_one(b.cq, "RECV");
	CHECK(wc.wr_id == 77 && wc.opcode == IBV_WC_RECV && wc.byte_len == 512, "RECV completion");
	CHECK((wc.wc_flags & IBV_WC_WITH_IMM) && be32toh(wc.imm_data) == 0x1234abcd, "immediate");
	CHECK(memcmp(a.buf, b.buf + 3072, 512) == 0, "SEND: bytes differ");
	printf("SEND with immediate 512 B: ok\n");

	/* Compare-and-swap, then fetch-and-add, on B's last 8 bytes; old values land in A. */
	*b.atom = 41;
	post(&a, &b, IBV_WR_ATOMIC_CMP_AND_SWP, 2048, 8, bbase + LEN - 8, 41, 1000);
	wait_one(a.cq, "CMP_AND_SWP");
	CHECK(*(uint64_t *)(a.buf + 2048) == 41 && *b.atom == 1000, "CMP_AND_SWP: %" PRIu64,
	      *b.atom);
	post(&a, &b, IBV_WR_ATOMIC_FETCH_AND_ADD, 2056, 8, bbase + LEN - 8, 24, 0);
	wait_one(a.cq, "FETCH_AND_ADD");
	CHECK(*(uint64_t *)(a.buf + 2056) == 1000 && *b.atom == 1024, "FETCH_AND_ADD: %" PRIu64,
	      *b.atom);
	printf("atomics: ok\n");

	struct side *sides[] = { &a, &b };
	for (int i = 0; i < 2; i++) {
		struct side *s = sides[i];
		CHECK(ibv_destroy_qp(s->qp) == 0 && ibv_dereg_mr(s->mr) == 0 &&
			      ibv_destroy_cq(s->cq) == 0 && ibv_dealloc_pd(s->pd) == 0 &&
			      ibv_close_device(s->ctx) == 0,
		      "teardown");
		free(s->buf);
	}
	ibv_free_device_list(list);
	printf("all checks passed\n");
	return 0;
}
