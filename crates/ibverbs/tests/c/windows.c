/* Memory windows from C, between two contexts of one process: side A owns a region and
 * opens windows on it, side B reaches A's memory only through them. Type 1 windows bound
 * with ibv_bind_mw (and unbound), type 2 windows bound with an IBV_WR_BIND_MW work request
 * and invalidated by the peer's SEND with invalidate and by a local invalidate; access
 * outside a window, or through a dead key, fails remotely (IBV_WC_REM_ACCESS_ERR) and
 * changes no byte; the header's and rxe's argument checks; a region with a bound window
 * cannot be deregistered (EBUSY) until the window goes. Prints "PASS <case>" per case;
 * exits 1 at the first failure.
 */
#include "common.h"
#include <errno.h>
#include <inttypes.h>

#define LEN 8192

static struct ibv_context *ctx[2];
static struct ibv_pd *pd[2];
static struct ibv_cq *cq[2];
static struct ibv_qp *qp[2];
static union ibv_gid gid[2];
static char *buf[2];
static struct ibv_mr *mr[2];

/* A fresh connected RC pair (the last one may be in ERR), with both CQs drained. */
static void new_pair(void)
{
	for (int s = 0; s < 2; s++) {
		if (qp[s])
			CHECK(ibv_destroy_qp(qp[s]) == 0, "ibv_destroy_qp");
		struct ibv_qp_init_attr ia = { .send_cq = cq[s], .recv_cq = cq[s],
					       .cap = { .max_send_wr = 16, .max_recv_wr = 16,
							.max_send_sge = 1, .max_recv_sge = 1 },
					       .qp_type = IBV_QPT_RC };
		qp[s] = ibv_create_qp(pd[s], &ia);
		CHECK(qp[s], "ibv_create_qp");
		struct ibv_wc wc;
		while (ibv_poll_cq(cq[s], 1, &wc) > 0)
			;
	}
	connect_rc(qp[0], qp[1]->qp_num, gid[1]);
	connect_rc(qp[1], qp[0]->qp_num, gid[0]);
}

/* The next completion of side `s` (fails after 5 s). */
static struct ibv_wc next_wc(int s)
{
	struct ibv_wc wc;
	double t0 = now();
	int n;
	while ((n = ibv_poll_cq(cq[s], 1, &wc)) == 0)
		CHECK(now() - t0 < 5, "no completion on side %d", s);
	CHECK(n == 1, "ibv_poll_cq: %d", n);
	return wc;
}

/* Posts one WR on side `s` and returns its completion. */
static struct ibv_wc post_wait(int s, struct ibv_send_wr *w)
{
	struct ibv_send_wr *bad;
	w->send_flags |= IBV_SEND_SIGNALED;
	CHECK(ibv_post_send(qp[s], w, &bad) == 0, "ibv_post_send");
	return next_wc(s);
}

/* B's RDMA WRITE (or READ) of `len` bytes at A's `addr` under `rkey`: the status. */
static enum ibv_wc_status remote(enum ibv_wr_opcode op, uint64_t addr, uint32_t len,
				 uint32_t rkey)
{
	struct ibv_sge sge = { (uintptr_t)buf[1], len, mr[1]->lkey };
	struct ibv_send_wr w = { .wr_id = 9, .sg_list = &sge, .num_sge = 1, .opcode = op,
				 .wr.rdma = { addr, rkey } };
	struct ibv_wc wc = post_wait(1, &w);
	CHECK(wc.wr_id == 9, "wr_id %" PRIu64, wc.wr_id);
	return wc.status;
}

/* Binds type 2 window `mw` to A's [off, off+len) with the next key by a work request. */
static uint32_t bind2(struct ibv_mw *mw, uint32_t rkey, size_t off, size_t len)
{
	struct ibv_send_wr w = { .wr_id = 5, .opcode = IBV_WR_BIND_MW };
	w.bind_mw.mw = mw;
	w.bind_mw.rkey = ibv_inc_rkey(rkey);
	w.bind_mw.bind_info = (struct ibv_mw_bind_info){ mr[0], (uintptr_t)buf[0] + off, len,
							 IBV_ACCESS_REMOTE_WRITE |
								 IBV_ACCESS_REMOTE_READ };
	struct ibv_wc wc = post_wait(0, &w);
	CHECK(wc.status == IBV_WC_SUCCESS && wc.opcode == IBV_WC_BIND_MW && wc.wr_id == 5,
	      "type 2 bind: status %d opcode %d", wc.status, wc.opcode);
	return w.bind_mw.rkey;
}

int main(void)
{
	int n;
	struct ibv_device **list = ibv_get_device_list(&n);
	CHECK(list && n > 0, "no RDMA device");
	for (int s = 0; s < 2; s++) {
		ctx[s] = ibv_open_device(list[0]);
		CHECK(ctx[s], "ibv_open_device");
		pd[s] = ibv_alloc_pd(ctx[s]);
		cq[s] = ibv_create_cq(ctx[s], 64, NULL, NULL, 0);
		CHECK(pd[s] && cq[s], "PD and CQ");
		CHECK(posix_memalign((void **)&buf[s], 4096, LEN) == 0, "posix_memalign");
		memset(buf[s], 's', LEN);
		mr[s] = ibv_reg_mr(pd[s], buf[s], LEN,
				   IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_MW_BIND);
		CHECK(mr[s], "ibv_reg_mr: %s", strerror(errno));
		CHECK(ibv_query_gid(ctx[s], 1, 0, &gid[s]) == 0, "ibv_query_gid");
	}
	new_pair();
	uint64_t base = (uintptr_t)buf[0];

	struct ibv_mw *mw1 = ibv_alloc_mw(pd[0], IBV_MW_TYPE_1);
	struct ibv_mw *mw2 = ibv_alloc_mw(pd[0], IBV_MW_TYPE_2);
	CHECK(mw1 && mw2, "ibv_alloc_mw: %s", strerror(errno));
	CHECK(mw1->context == ctx[0] && mw1->pd == pd[0] && mw1->type == IBV_MW_TYPE_1 &&
		      mw2->type == IBV_MW_TYPE_2 && mw1->rkey != mw2->rkey,
	      "the windows' fields");
	errno = 0;
	CHECK(!ibv_alloc_mw(pd[0], 3) && errno == EINVAL, "type 3: errno %d", errno);
	printf("PASS ibv_alloc_mw: types 1 and 2, each its own rkey; an unknown type EINVAL\n");

	/* A type 1 window on [1024, 2048), the region itself has no remote rights. */
	CHECK(remote(IBV_WR_RDMA_WRITE, base + 1024, 64, mr[0]->rkey) == IBV_WC_REM_ACCESS_ERR,
	      "the region's own rkey gives no remote write");
	new_pair();
	uint32_t old = mw1->rkey;
	struct ibv_mw_bind b = { .wr_id = 7, .send_flags = IBV_SEND_SIGNALED,
				 .bind_info = { mr[0], base + 1024, 1024,
						IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ } };
	CHECK(ibv_bind_mw(qp[0], mw1, &b) == 0, "ibv_bind_mw");
	CHECK(mw1->rkey == ibv_inc_rkey(old), "mw->rkey is the next key");
	struct ibv_wc wc = next_wc(0);
	CHECK(wc.status == IBV_WC_SUCCESS && wc.opcode == IBV_WC_BIND_MW && wc.wr_id == 7,
	      "bind completion: status %d opcode %d", wc.status, wc.opcode);
	memset(buf[1], 'w', 64);
	CHECK(remote(IBV_WR_RDMA_WRITE, base + 1024, 64, mw1->rkey) == IBV_WC_SUCCESS,
	      "WRITE through the window");
	CHECK(memcmp(buf[0] + 1024, buf[1], 64) == 0 && buf[0][1023] == 's', "written bytes");
	memset(buf[0] + 1536, 'r', 512);
	CHECK(remote(IBV_WR_RDMA_READ, base + 1536, 512, mw1->rkey) == IBV_WC_SUCCESS,
	      "READ through the window");
	CHECK(memcmp(buf[1], buf[0] + 1536, 512) == 0, "read bytes");
	CHECK(remote(IBV_WR_RDMA_WRITE, base + 1024, 64, old) == IBV_WC_REM_ACCESS_ERR,
	      "the window's old key");
	printf("PASS type 1: ibv_bind_mw moves mw->rkey on; WRITE and READ through it\n");

	new_pair();
	memset(buf[1], 'x', 64);
	CHECK(remote(IBV_WR_RDMA_WRITE, base + 2048 - 32, 64, mw1->rkey) == IBV_WC_REM_ACCESS_ERR,
	      "a WRITE past the window's end");
	CHECK(buf[0][2048 - 32] == 'r' && buf[0][2048] == 's', "no byte changed");
	printf("PASS type 1: past the window's end IBV_WC_REM_ACCESS_ERR, no byte written\n");

	new_pair();
	b.bind_info = (struct ibv_mw_bind_info){ NULL, 0, 0, 0 };
	CHECK(ibv_bind_mw(qp[0], mw1, &b) == 0, "ibv_bind_mw to unbind");
	wc = next_wc(0);
	CHECK(wc.status == IBV_WC_SUCCESS && wc.opcode == IBV_WC_BIND_MW, "unbind completion");
	CHECK(remote(IBV_WR_RDMA_WRITE, base + 1024, 8, mw1->rkey) == IBV_WC_REM_ACCESS_ERR,
	      "WRITE through an unbound window");
	printf("PASS type 1: a zero-length bind unbinds\n");

	new_pair();
	uint32_t k = bind2(mw2, mw2->rkey, 4096, 1024);
	memset(buf[1], 'v', 64);
	CHECK(remote(IBV_WR_RDMA_WRITE, base + 4096, 64, k) == IBV_WC_SUCCESS,
	      "WRITE through a type 2 window");
	CHECK(memcmp(buf[0] + 4096, buf[1], 64) == 0, "written bytes");
	struct ibv_sge rs = { base, 64, mr[0]->lkey };
	struct ibv_recv_wr r = { .wr_id = 3, .sg_list = &rs, .num_sge = 1 }, *rbad;
	CHECK(ibv_post_recv(qp[0], &r, &rbad) == 0, "ibv_post_recv");
	struct ibv_sge ss = { (uintptr_t)buf[1], 16, mr[1]->lkey };
	struct ibv_send_wr si = { .wr_id = 4, .sg_list = &ss, .num_sge = 1,
				  .opcode = IBV_WR_SEND_WITH_INV, .invalidate_rkey = k };
	wc = post_wait(1, &si);
	CHECK(wc.status == IBV_WC_SUCCESS, "SEND with invalidate: status %d", wc.status);
	wc = next_wc(0);
	CHECK(wc.status == IBV_WC_SUCCESS && wc.wr_id == 3 && (wc.wc_flags & IBV_WC_WITH_INV) &&
		      wc.invalidated_rkey == k,
	      "the receive names the invalidated key: status %d flags %x", wc.status,
	      wc.wc_flags);
	CHECK(remote(IBV_WR_RDMA_WRITE, base + 4096, 8, k) == IBV_WC_REM_ACCESS_ERR,
	      "WRITE through an invalidated window");
	printf("PASS type 2: bound by a work request, invalidated by the peer's SEND\n");

	new_pair();
	k = bind2(mw2, k, 4096, 1024);
	struct ibv_send_wr li = { .wr_id = 6, .opcode = IBV_WR_LOCAL_INV, .invalidate_rkey = k };
	wc = post_wait(0, &li);
	CHECK(wc.status == IBV_WC_SUCCESS && wc.opcode == IBV_WC_LOCAL_INV, "local invalidate");
	CHECK(remote(IBV_WR_RDMA_WRITE, base + 4096, 8, k) == IBV_WC_REM_ACCESS_ERR,
	      "WRITE after a local invalidate");
	printf("PASS type 2: rebound, then invalidated locally\n");

	new_pair();
	b.bind_info = (struct ibv_mw_bind_info){ mr[0], base, 64, IBV_ACCESS_REMOTE_WRITE };
	CHECK(ibv_bind_mw(qp[0], mw2, &b) == EINVAL, "ibv_bind_mw of a type 2 window");
	b.bind_info.mr = NULL;
	CHECK(ibv_bind_mw(qp[0], mw1, &b) == EINVAL, "a range without a region");
	b.bind_info.mr = mr[1];
	CHECK(ibv_bind_mw(qp[0], mw1, &b) == EPERM, "a region of another PD");
	b.bind_info.mr = mr[0];
	b.bind_info.mw_access_flags |= IBV_ACCESS_ZERO_BASED;
	CHECK(ibv_bind_mw(qp[0], mw1, &b) == EINVAL, "a zero-based window");
	CHECK(ibv_poll_cq(cq[0], 1, &wc) == 0, "a refused bind posts nothing");
	struct ibv_mr *plain = ibv_reg_mr(pd[0], buf[0] + 4096, 4096, IBV_ACCESS_LOCAL_WRITE);
	CHECK(plain, "ibv_reg_mr without MW_BIND");
	b.bind_info = (struct ibv_mw_bind_info){ plain, base + 4096, 64, IBV_ACCESS_REMOTE_READ };
	CHECK(ibv_bind_mw(qp[0], mw1, &b) == 0, "ibv_bind_mw on a region without MW_BIND");
	wc = next_wc(0);
	CHECK(wc.status == IBV_WC_MW_BIND_ERR, "bind on a region without MW_BIND: status %d",
	      wc.status);
	CHECK(ibv_dereg_mr(plain) == 0, "ibv_dereg_mr");
	printf("PASS refused binds: EINVAL, EPERM, IBV_WC_MW_BIND_ERR\n");

	new_pair();
	b.bind_info = (struct ibv_mw_bind_info){ mr[0], base, 64, IBV_ACCESS_REMOTE_READ };
	CHECK(ibv_bind_mw(qp[0], mw1, &b) == 0, "ibv_bind_mw");
	CHECK(next_wc(0).status == IBV_WC_SUCCESS, "bind completion");
	CHECK(ibv_dereg_mr(mr[0]) == EBUSY, "ibv_dereg_mr with a bound window");
	uint32_t dead = mw1->rkey;
	CHECK(ibv_dealloc_mw(mw1) == 0 && ibv_dealloc_mw(mw2) == 0, "ibv_dealloc_mw");
	CHECK(remote(IBV_WR_RDMA_READ, base, 8, dead) == IBV_WC_REM_ACCESS_ERR,
	      "READ through a deallocated window");
	CHECK(ibv_dereg_mr(mr[0]) == 0, "ibv_dereg_mr once the window is gone");
	printf("PASS a region with a bound window is busy until ibv_dealloc_mw\n");

	for (int s = 0; s < 2; s++) {
		CHECK(ibv_destroy_qp(qp[s]) == 0, "ibv_destroy_qp");
		if (s == 1)
			CHECK(ibv_dereg_mr(mr[s]) == 0, "ibv_dereg_mr");
		CHECK(ibv_destroy_cq(cq[s]) == 0 && ibv_dealloc_pd(pd[s]) == 0 &&
			      ibv_close_device(ctx[s]) == 0,
		      "teardown");
		free(buf[s]);
	}
	ibv_free_device_list(list);
	return 0;
}
