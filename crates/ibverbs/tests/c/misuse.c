/* Misuse of the verbs that the library can detect: each case must get the return value
 * and errno (or completion status) that rdma-core on rxe gives, and the process must
 * live on. One line per case, "PASS name" or "FAIL name: why"; exit 1 if any failed.
 * Built and run by tests/c_misuse.rs. */
#include <errno.h>
#include <infiniband/verbs.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

static int failed;
static struct ibv_context *ctx;
static struct ibv_pd *pd;
static struct ibv_cq *cq;
static char buf[4096] __attribute__((aligned(4096)));

static void verdict(const char *name, int ok, const char *why)
{
	printf("%s %s%s%s\n", ok ? "PASS" : "FAIL", name, ok ? "" : ": ", ok ? "" : why);
	failed |= !ok;
}

static char why[256];
#define EXPECT(name, cond, ...)                                                                \
	do {                                                                                   \
		snprintf(why, sizeof(why), __VA_ARGS__);                                       \
		verdict(name, (cond), why);                                                    \
	} while (0)

static struct ibv_qp *new_qp(void)
{
	struct ibv_qp_init_attr init = {
		.send_cq = cq, .recv_cq = cq, .qp_type = IBV_QPT_RC,
		.cap = { .max_send_wr = 4, .max_recv_wr = 4, .max_send_sge = 1, .max_recv_sge = 1 },
	};
	return ibv_create_qp(pd, &init);
}

static int to_init(struct ibv_qp *qp)
{
	struct ibv_qp_attr a = { .qp_state = IBV_QPS_INIT, .port_num = 1 };
	return ibv_modify_qp(qp, &a, IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT |
					     IBV_QP_ACCESS_FLAGS);
}

static int post_write(struct ibv_qp *qp, struct ibv_mr *mr)
{
	struct ibv_sge sge = { .addr = (uintptr_t)buf, .length = 8, .lkey = mr->lkey };
	struct ibv_send_wr wr = { .wr_id = 9, .sg_list = &sge, .num_sge = 1,
				  .opcode = IBV_WR_RDMA_WRITE, .send_flags = IBV_SEND_SIGNALED },
			   *bad = NULL;
	int r = ibv_post_send(qp, &wr, &bad);
	return r == 0 ? 0 : (bad == &wr ? r : -1000);
}

int main(void)
{
	struct ibv_device **list = ibv_get_device_list(NULL);
	if (!list || !list[0] || !(ctx = ibv_open_device(list[0]))) {
		printf("FAIL setup: no device\n");
		return 1;
	}
	pd = ibv_alloc_pd(ctx);
	cq = ibv_create_cq(ctx, 16, NULL, NULL, 0);
	struct ibv_mr *mr = ibv_reg_mr(pd, buf, sizeof(buf), IBV_ACCESS_LOCAL_WRITE);
	if (!pd || !cq || !mr) {
		printf("FAIL setup: pd/cq/mr\n");
		return 1;
	}

	/* Transitions and masks. */
	struct ibv_qp *qp = new_qp();
	struct ibv_qp_attr a = { .qp_state = IBV_QPS_RTR };
	int r = ibv_modify_qp(qp, &a, IBV_QP_STATE);
	EXPECT("modify RESET->RTR (no such transition) is EINVAL", r == EINVAL, "got %d", r);
	a = (struct ibv_qp_attr){ .qp_state = IBV_QPS_INIT };
	r = ibv_modify_qp(qp, &a, IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_ACCESS_FLAGS);
	EXPECT("modify RESET->INIT without IBV_QP_PORT is EINVAL", r == EINVAL, "got %d", r);
	a = (struct ibv_qp_attr){ .qp_state = IBV_QPS_INIT, .port_num = 1 };
	r = ibv_modify_qp(qp, &a, IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT |
					  IBV_QP_ACCESS_FLAGS | IBV_QP_SQ_PSN);
	EXPECT("modify RESET->INIT with an attribute it does not take (SQ_PSN) is EINVAL",
	       r == EINVAL, "got %d", r);
	r = ibv_modify_qp(qp, &a, IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT |
					  IBV_QP_ACCESS_FLAGS | IBV_QP_CAP);
	EXPECT("modify with IBV_QP_CAP (not modifiable) is EINVAL", r == EINVAL, "got %d", r);
	EXPECT("a refused modify leaves the QP in RESET", qp->state == IBV_QPS_RESET, "state %d",
	       qp->state);

	/* Posting in RESET and INIT: refused at once, nothing queued. */
	r = post_write(qp, mr);
	EXPECT("post_send in RESET is EINVAL and names the WR", r == EINVAL, "got %d", r);
	r = to_init(qp);
	EXPECT("modify RESET->INIT with the right mask succeeds", r == 0, "got %d", r);
	r = post_write(qp, mr);
	EXPECT("post_send in INIT is EINVAL", r == EINVAL, "got %d", r);

	/* Posting in ERR: accepted and completed with IBV_WC_WR_FLUSH_ERR. */
	a = (struct ibv_qp_attr){ .qp_state = IBV_QPS_ERR };
	r = ibv_modify_qp(qp, &a, IBV_QP_STATE);
	EXPECT("modify INIT->ERR succeeds", r == 0 && qp->state == IBV_QPS_ERR, "got %d", r);
	r = post_write(qp, mr);
	EXPECT("post_send in ERR is accepted", r == 0, "got %d", r);
	struct ibv_wc wc = { 0 };
	int n = 0;
	for (int i = 0; i < 2000000 && n == 0; i++)
		n = ibv_poll_cq(cq, 1, &wc);
	EXPECT("a WR posted in ERR completes with WR_FLUSH_ERR",
	       n == 1 && wc.wr_id == 9 && wc.status == IBV_WC_WR_FLUSH_ERR, "n %d status %d", n,
	       wc.status);
	EXPECT("ibv_destroy_qp succeeds", ibv_destroy_qp(qp) == 0, "-");

	/* Registrations. */
	errno = 0;
	struct ibv_mr *m = ibv_reg_mr(pd, buf, 0, IBV_ACCESS_LOCAL_WRITE);
	EXPECT("ibv_reg_mr of 0 bytes is NULL with EINVAL", !m && errno == EINVAL, "errno %d", errno);
	struct ibv_device_attr da;
	ibv_query_device(ctx, &da);
	errno = 0;
	m = ibv_reg_mr(pd, buf, da.max_mr_size + 1, IBV_ACCESS_LOCAL_WRITE);
	EXPECT("ibv_reg_mr above max_mr_size is NULL with EINVAL", !m && errno == EINVAL,
	       "errno %d", errno);
	errno = 0;
	m = ibv_reg_mr(pd, buf, sizeof(buf), IBV_ACCESS_REMOTE_WRITE);
	EXPECT("REMOTE_WRITE without LOCAL_WRITE is NULL with EINVAL", !m && errno == EINVAL,
	       "errno %d", errno);
	errno = 0;
	m = ibv_reg_mr(pd, buf, sizeof(buf), IBV_ACCESS_ON_DEMAND | IBV_ACCESS_LOCAL_WRITE);
	EXPECT("ODP registration is NULL with EOPNOTSUPP", !m && errno == EOPNOTSUPP, "errno %d",
	       errno);

	/* CQs. */
	errno = 0;
	struct ibv_cq *c = ibv_create_cq(ctx, 0, NULL, NULL, 0);
	EXPECT("ibv_create_cq with 0 entries is NULL with EINVAL", !c && errno == EINVAL,
	       "errno %d", errno);
	errno = 0;
	c = ibv_create_cq(ctx, da.max_cqe + 1, NULL, NULL, 0);
	EXPECT("ibv_create_cq above max_cqe is NULL with EINVAL", !c && errno == EINVAL,
	       "errno %d", errno);
	qp = new_qp();
	r = ibv_destroy_cq(cq);
	EXPECT("ibv_destroy_cq of a CQ a QP uses is EBUSY", r == EBUSY, "got %d", r);
	r = ibv_dealloc_pd(pd);
	EXPECT("ibv_dealloc_pd of a PD with a QP and an MR is EBUSY", r == EBUSY, "got %d", r);
	ibv_destroy_qp(qp);

	/* NULL handles, where rdma-core's entry points look at them. */
	EXPECT("ibv_dealloc_pd(NULL) is EINVAL", ibv_dealloc_pd(NULL) == EINVAL, "-");
	EXPECT("ibv_destroy_cq(NULL) is EINVAL", ibv_destroy_cq(NULL) == EINVAL, "-");
	EXPECT("ibv_destroy_qp(NULL) is EINVAL", ibv_destroy_qp(NULL) == EINVAL, "-");
	errno = 0;
	EXPECT("ibv_open_device of a foreign pointer is NULL with ENODEV",
	       !ibv_open_device((struct ibv_device *)buf) && errno == ENODEV, "errno %d", errno);

	/* A completion channel of another context: the kernel finds no such channel in the
	 * CQ's context and answers EBADF. */
	struct ibv_context *other = ibv_open_device(list[0]);
	struct ibv_comp_channel *och = other ? ibv_create_comp_channel(other) : NULL;
	errno = 0;
	struct ibv_cq *xcq = och ? ibv_create_cq(ctx, 4, NULL, och, 0) : NULL;
	EXPECT("ibv_create_cq on another context's channel is NULL with EBADF",
	       och && !xcq && errno == EBADF, "channel %p cq %p errno %d", (void *)och,
	       (void *)xcq, errno);
	if (och)
		ibv_destroy_comp_channel(och);
	if (other)
		ibv_close_device(other);

	/* GID and port indexes. */
	union ibv_gid gid;
	errno = 0;
	/* rdma-core reads an empty entry of the table as the zero GID; past its end is EINVAL. */
	memset(&gid, 0xff, sizeof(gid));
	r = ibv_query_gid(ctx, 1, 5, &gid);
	static const union ibv_gid zero;
	EXPECT("ibv_query_gid of an empty index is the zero GID",
	       r == 0 && memcmp(&gid, &zero, sizeof(gid)) == 0, "got %d errno %d", r, errno);
	struct ibv_port_attr tbl;
	EXPECT("ibv_query_port of port 1", ibv_query_port(ctx, 1, &tbl) == 0, "-");
	errno = 0;
	r = ibv_query_gid(ctx, 1, tbl.gid_tbl_len, &gid);
	EXPECT("ibv_query_gid past the table is -1 with EINVAL", r == -1 && errno == EINVAL,
	       "got %d errno %d", r, errno);
	struct ibv_port_attr pa;
	r = ibv_query_port(ctx, 2, &pa);
	EXPECT("ibv_query_port of port 2 (there is one) is EINVAL", r == EINVAL, "got %d", r);
	struct ibv_ah_attr aa = { .is_global = 0, .port_num = 1 };
	errno = 0;
	EXPECT("ibv_create_ah without a GRH (RoCE needs one) is NULL with EINVAL",
	       !ibv_create_ah(pd, &aa) && errno == EINVAL, "errno %d", errno);

	/* What rxe (Linux 6.1) does not offer, answered as it answers. */
	errno = 0;
	r = ibv_rereg_mr(mr, IBV_REREG_MR_CHANGE_ACCESS, NULL, NULL, 0, IBV_ACCESS_LOCAL_WRITE);
	EXPECT("ibv_rereg_mr is IBV_REREG_MR_ERR_CMD with EOPNOTSUPP",
	       r == IBV_REREG_MR_ERR_CMD && errno == EOPNOTSUPP, "got %d errno %d", r, errno);
	errno = 0;
	r = ibv_rereg_mr(mr, 0, NULL, NULL, 0, IBV_ACCESS_LOCAL_WRITE);
	EXPECT("ibv_rereg_mr with access but no CHANGE_ACCESS is ERR_INPUT with EINVAL",
	       r == IBV_REREG_MR_ERR_INPUT && errno == EINVAL, "got %d errno %d", r, errno);
	struct ibv_qp_init_attr raw = {
		.send_cq = cq, .recv_cq = cq, .qp_type = IBV_QPT_RAW_PACKET,
		.cap = { .max_send_wr = 4, .max_recv_wr = 4, .max_send_sge = 1, .max_recv_sge = 1 },
	};
	errno = 0;
	EXPECT("a raw packet QP is NULL with EOPNOTSUPP",
	       !ibv_create_qp(pd, &raw) && errno == EOPNOTSUPP, "errno %d", errno);
	int dup_fd = dup(ctx->cmd_fd);
	EXPECT("cmd_fd is a descriptor a program can dup", dup_fd >= 0, "errno %d", errno);
	errno = 0;
	EXPECT("ibv_import_device is NULL with EOPNOTSUPP",
	       !ibv_import_device(dup_fd) && errno == EOPNOTSUPP, "errno %d", errno);
	close(dup_fd);

	EXPECT("teardown", ibv_dereg_mr(mr) == 0 && ibv_destroy_cq(cq) == 0 &&
				   ibv_dealloc_pd(pd) == 0 && ibv_close_device(ctx) == 0,
	       "-");
	ibv_free_device_list(list);
	return failed;
}
