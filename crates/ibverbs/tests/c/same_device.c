/* One device opened twice in one process, as rdma-core's test suite and pyverbs programs
 * do: the two contexts are one NIC, so each reports the same GID, and a QP of one context
 * reaches a QP of the other by connecting to its own GID (what such programs do). */
#include "common.h"

struct side {
	struct ibv_context *ctx;
	struct ibv_pd *pd;
	struct ibv_cq *cq;
	struct ibv_qp *qp;
	struct ibv_mr *mr;
	uint64_t *buf;
};

static struct ibv_context *open_oxr0(void)
{
	int n;
	struct ibv_device **list = ibv_get_device_list(&n);
	CHECK(list && n > 0, "no device");
	struct ibv_context *c = ibv_open_device(list[0]);
	CHECK(c, "open_device");
	ibv_free_device_list(list);
	return c;
}

static void make(struct side *s, enum ibv_qp_type t)
{
	s->ctx = open_oxr0();
	s->pd = ibv_alloc_pd(s->ctx);
	s->cq = ibv_create_cq(s->ctx, 16, NULL, NULL, 0);
	s->buf = calloc(1, 4096);
	s->mr = ibv_reg_mr(s->pd, s->buf, 4096,
			   IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE |
				   IBV_ACCESS_REMOTE_READ | IBV_ACCESS_REMOTE_ATOMIC);
	struct ibv_qp_init_attr ia = {
		.send_cq = s->cq,
		.recv_cq = s->cq,
		.cap = { .max_send_wr = 8, .max_recv_wr = 8, .max_send_sge = 1, .max_recv_sge = 1 },
		.qp_type = t,
	};
	s->qp = ibv_create_qp(s->pd, &ia);
	CHECK(s->pd && s->cq && s->mr && s->qp, "resources");
}

static void gone(struct side *s)
{
	ibv_destroy_qp(s->qp);
	ibv_dereg_mr(s->mr);
	ibv_destroy_cq(s->cq);
	ibv_dealloc_pd(s->pd);
	CHECK(ibv_close_device(s->ctx) == 0, "close");
	free(s->buf);
}

static union ibv_gid gid_of(struct ibv_context *c)
{
	union ibv_gid g;
	CHECK(ibv_query_gid(c, 1, 0, &g) == 0, "query_gid");
	return g;
}

static struct ibv_wc wait_wc(struct ibv_cq *cq)
{
	struct ibv_wc wc;
	double end = now() + 5;
	int n;
	while ((n = ibv_poll_cq(cq, 1, &wc)) == 0)
		CHECK(now() < end, "no completion within 5 s");
	CHECK(n == 1, "poll_cq");
	return wc;
}

static void rc_atomic_and_send(void)
{
	struct side a, b;
	/* A context opened and closed first, as a program reading capabilities does. */
	struct ibv_context *probe = open_oxr0();
	struct ibv_device_attr da;
	CHECK(ibv_query_device(probe, &da) == 0, "query_device");
	CHECK(ibv_close_device(probe) == 0, "close probe");
	make(&a, IBV_QPT_RC);
	make(&b, IBV_QPT_RC);
	union ibv_gid ga = gid_of(a.ctx), gb = gid_of(b.ctx);
	CHECK(memcmp(&ga, &gb, sizeof(ga)) == 0, "two contexts of one device differ in GID");
	CHECK(a.qp->qp_num != b.qp->qp_num, "two QPs of one device share a number");
	/* Each connects to its own GID, as rdma-core's tests do. */
	connect_rc(a.qp, b.qp->qp_num, ga);
	connect_rc(b.qp, a.qp->qp_num, gb);

	b.buf[0] = 40;
	struct ibv_sge sge = { (uintptr_t)a.buf, 8, a.mr->lkey };
	struct ibv_send_wr wr = { .wr_id = 1, .sg_list = &sge, .num_sge = 1,
				  .opcode = IBV_WR_ATOMIC_FETCH_AND_ADD,
				  .send_flags = IBV_SEND_SIGNALED }, *bad;
	wr.wr.atomic.remote_addr = (uintptr_t)b.buf;
	wr.wr.atomic.rkey = b.mr->rkey;
	wr.wr.atomic.compare_add = 2;
	CHECK(ibv_post_send(a.qp, &wr, &bad) == 0, "post FETCH_AND_ADD");
	struct ibv_wc wc = wait_wc(a.cq);
	CHECK(wc.status == IBV_WC_SUCCESS, "FETCH_AND_ADD: %s", ibv_wc_status_str(wc.status));
	CHECK(a.buf[0] == 40 && b.buf[0] == 42, "FETCH_AND_ADD bytes");

	struct ibv_sge rsge = { (uintptr_t)(b.buf + 8), 64, b.mr->lkey };
	struct ibv_recv_wr rwr = { .wr_id = 2, .sg_list = &rsge, .num_sge = 1 }, *rbad;
	CHECK(ibv_post_recv(b.qp, &rwr, &rbad) == 0, "post_recv");
	memset(a.buf, 0x5a, 64);
	sge.length = 64;
	wr.opcode = IBV_WR_SEND;
	CHECK(ibv_post_send(a.qp, &wr, &bad) == 0, "post SEND");
	wc = wait_wc(a.cq);
	CHECK(wc.status == IBV_WC_SUCCESS, "SEND: %s", ibv_wc_status_str(wc.status));
	wc = wait_wc(b.cq);
	CHECK(wc.status == IBV_WC_SUCCESS && wc.byte_len == 64 && wc.qp_num == b.qp->qp_num,
	      "RECV");
	for (int i = 0; i < 64; i++)
		CHECK(((uint8_t *)(b.buf + 8))[i] == 0x5a, "RECV byte %d", i);
	printf("PASS rc atomic and send between two contexts of one device\n");

	gone(&a);
	gone(&b);
}

static void ud_send(void)
{
	struct side a, b;
	make(&a, IBV_QPT_UD);
	make(&b, IBV_QPT_UD);
	struct ibv_qp_attr at = { .qp_state = IBV_QPS_INIT, .port_num = 1, .qkey = 0x11111111 };
	struct side *s[2] = { &a, &b };
	for (int i = 0; i < 2; i++) {
		at.qp_state = IBV_QPS_INIT;
		CHECK(ibv_modify_qp(s[i]->qp, &at, IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT |
							   IBV_QP_QKEY) == 0, "UD INIT");
		at.qp_state = IBV_QPS_RTR;
		CHECK(ibv_modify_qp(s[i]->qp, &at, IBV_QP_STATE) == 0, "UD RTR");
		at.qp_state = IBV_QPS_RTS;
		CHECK(ibv_modify_qp(s[i]->qp, &at, IBV_QP_STATE | IBV_QP_SQ_PSN) == 0, "UD RTS");
	}
	struct ibv_ah_attr aa = { .is_global = 1, .port_num = 1 };
	aa.grh.dgid = gid_of(a.ctx); /* a's own GID: b's too */
	aa.grh.hop_limit = 1;
	struct ibv_ah *ah = ibv_create_ah(a.pd, &aa);
	CHECK(ah, "create_ah");
	struct ibv_sge rsge = { (uintptr_t)b.buf, 40 + 1024, b.mr->lkey };
	struct ibv_recv_wr rwr = { .wr_id = 7, .sg_list = &rsge, .num_sge = 1 }, *rbad;
	CHECK(ibv_post_recv(b.qp, &rwr, &rbad) == 0, "post_recv");
	uint8_t *src = (uint8_t *)a.buf;
	for (int i = 0; i < 1024; i++)
		src[i] = (uint8_t)(i * 7);
	struct ibv_sge sge = { (uintptr_t)a.buf, 1024, a.mr->lkey };
	struct ibv_send_wr wr = { .wr_id = 8, .sg_list = &sge, .num_sge = 1, .opcode = IBV_WR_SEND,
				  .send_flags = IBV_SEND_SIGNALED }, *bad;
	wr.wr.ud.ah = ah;
	wr.wr.ud.remote_qpn = b.qp->qp_num;
	wr.wr.ud.remote_qkey = 0x11111111;
	CHECK(ibv_post_send(a.qp, &wr, &bad) == 0, "post UD SEND");
	struct ibv_wc wc = wait_wc(a.cq);
	CHECK(wc.status == IBV_WC_SUCCESS, "UD SEND: %s", ibv_wc_status_str(wc.status));
	wc = wait_wc(b.cq);
	CHECK(wc.status == IBV_WC_SUCCESS && wc.byte_len == 40 + 1024 && wc.src_qp == a.qp->qp_num,
	      "UD RECV: status %d len %u", wc.status, wc.byte_len);
	uint8_t *dst = (uint8_t *)b.buf + 40;
	for (int i = 0; i < 1024; i++)
		CHECK(dst[i] == (uint8_t)(i * 7), "UD byte %d", i);
	ibv_destroy_ah(ah);
	gone(&a);
	gone(&b);
	printf("PASS ud send between two contexts of one device\n");
}

int main(void)
{
	rc_atomic_and_send();
	ud_send();
	return 0;
}
