/* Asynchronous events from C: the context's async_fd is a real descriptor, readable
 * exactly while events wait; ibv_get_async_event answers EAGAIN on it made non-blocking
 * while none waits, and names the object of each event: an SRQ that falls below its armed
 * limit (IBV_EVENT_SRQ_LIMIT_REACHED), a QP on an SRQ moved to ERR
 * (IBV_EVENT_QP_LAST_WQE_REACHED). Prints "PASS <case>" per case; exits 1 at the first
 * failure.
 */
#include "common.h"
#include <errno.h>
#include <fcntl.h>
#include <poll.h>

#define LEN 4096

static int readable(int fd, int ms)
{
	struct pollfd p = { .fd = fd, .events = POLLIN };
	return poll(&p, 1, ms) == 1 && (p.revents & POLLIN);
}

int main(void)
{
	int n;
	struct ibv_device **list = ibv_get_device_list(&n);
	CHECK(list && n > 0, "no RDMA device");
	struct ibv_context *ca = ibv_open_device(list[0]), *cb = ibv_open_device(list[0]);
	CHECK(ca && cb, "ibv_open_device");
	struct ibv_pd *pa = ibv_alloc_pd(ca), *pb = ibv_alloc_pd(cb);
	struct ibv_cq *qa = ibv_create_cq(ca, 16, NULL, NULL, 0), *qb = ibv_create_cq(cb, 16, NULL, NULL, 0);
	CHECK(pa && pb && qa && qb, "PD and CQ");
	char *buf;
	CHECK(posix_memalign((void **)&buf, 4096, LEN) == 0, "posix_memalign");
	memset(buf, 7, LEN);
	struct ibv_mr *ma = ibv_reg_mr(pa, buf, LEN / 2, IBV_ACCESS_LOCAL_WRITE);
	struct ibv_mr *mb = ibv_reg_mr(pb, buf + LEN / 2, LEN / 2, IBV_ACCESS_LOCAL_WRITE);
	CHECK(ma && mb, "ibv_reg_mr");
	struct ibv_srq_init_attr sa = { .attr = { .max_wr = 16, .max_sge = 1 } };
	struct ibv_srq *srq = ibv_create_srq(pb, &sa);
	CHECK(srq, "ibv_create_srq");
	struct ibv_qp_init_attr ia = { .send_cq = qa, .recv_cq = qa,
				       .cap = { .max_send_wr = 8, .max_recv_wr = 8,
						.max_send_sge = 1, .max_recv_sge = 1 },
				       .qp_type = IBV_QPT_RC };
	struct ibv_qp *a = ibv_create_qp(pa, &ia);
	ia.send_cq = ia.recv_cq = qb;
	ia.srq = srq;
	struct ibv_qp *b = ibv_create_qp(pb, &ia);
	CHECK(a && b, "ibv_create_qp");
	union ibv_gid ga, gb;
	CHECK(ibv_query_gid(ca, 1, 0, &ga) == 0 && ibv_query_gid(cb, 1, 0, &gb) == 0, "GIDs");
	connect_rc(a, b->qp_num, gb);
	connect_rc(b, a->qp_num, ga);

	int fd = cb->async_fd;
	CHECK(fd >= 0 && !readable(fd, 0), "async_fd %d: a descriptor with nothing to read", fd);
	int fl = fcntl(fd, F_GETFL);
	CHECK(fcntl(fd, F_SETFL, fl | O_NONBLOCK) == 0, "O_NONBLOCK");
	struct ibv_async_event ev;
	errno = 0;
	CHECK(ibv_get_async_event(cb, &ev) == -1 && errno == EAGAIN, "EAGAIN: errno %d", errno);
	CHECK(fcntl(fd, F_SETFL, fl) == 0, "blocking again");
	printf("PASS async_fd is a descriptor; non-blocking with no event: EAGAIN\n");

	/* Four receives on the SRQ, the limit armed at 3, two SENDs: the SRQ has 2 left. */
	for (int i = 0; i < 4; i++) {
		struct ibv_sge s = { (uintptr_t)buf + LEN / 2 + 64 * i, 64, mb->lkey };
		struct ibv_recv_wr w = { .wr_id = i, .sg_list = &s, .num_sge = 1 }, *bad;
		CHECK(ibv_post_srq_recv(srq, &w, &bad) == 0, "ibv_post_srq_recv");
	}
	struct ibv_srq_attr lim = { .srq_limit = 3 };
	CHECK(ibv_modify_srq(srq, &lim, IBV_SRQ_LIMIT) == 0, "arm the limit");
	CHECK(!readable(fd, 0), "an event before any was due");
	for (int i = 0; i < 2; i++) {
		struct ibv_sge s = { (uintptr_t)buf, 16, ma->lkey };
		struct ibv_send_wr w = { .wr_id = i, .sg_list = &s, .num_sge = 1,
					 .opcode = IBV_WR_SEND, .send_flags = IBV_SEND_SIGNALED },
				   *bad;
		CHECK(ibv_post_send(a, &w, &bad) == 0, "ibv_post_send");
	}
	struct ibv_wc wc;
	int got = 0;
	double t0 = now();
	while (got < 2 && now() - t0 < 3) {
		int k = ibv_poll_cq(qb, 1, &wc);
		CHECK(k >= 0 && (k == 0 || wc.status == IBV_WC_SUCCESS), "receive");
		got += k;
		while (ibv_poll_cq(qa, 1, &wc) > 0)
			;
	}
	CHECK(got == 2, "two receives, got %d", got);
	CHECK(readable(fd, 2000), "async_fd readable after the SRQ fell below its limit");
	CHECK(ibv_get_async_event(cb, &ev) == 0, "ibv_get_async_event");
	CHECK(ev.event_type == IBV_EVENT_SRQ_LIMIT_REACHED && ev.element.srq == srq,
	      "event %d (%s) for %p", ev.event_type, ibv_event_type_str(ev.event_type),
	      (void *)ev.element.srq);
	ibv_ack_async_event(&ev);
	CHECK(!readable(fd, 0), "async_fd still readable with no event waiting");
	printf("PASS IBV_EVENT_SRQ_LIMIT_REACHED names the SRQ; the descriptor clears\n");

	/* The QP on the SRQ to ERR: the last WQE it will take from the SRQ is reached. */
	struct ibv_qp_attr err = { .qp_state = IBV_QPS_ERR };
	CHECK(ibv_modify_qp(b, &err, IBV_QP_STATE) == 0, "modify to ERR");
	CHECK(readable(fd, 2000), "async_fd readable after ERR");
	CHECK(ibv_get_async_event(cb, &ev) == 0, "ibv_get_async_event");
	CHECK(ev.event_type == IBV_EVENT_QP_LAST_WQE_REACHED && ev.element.qp == b,
	      "event %d (%s) for %p", ev.event_type, ibv_event_type_str(ev.event_type),
	      (void *)ev.element.qp);
	ibv_ack_async_event(&ev);
	printf("PASS IBV_EVENT_QP_LAST_WQE_REACHED names the QP\n");

	CHECK(ibv_destroy_qp(a) == 0 && ibv_destroy_qp(b) == 0 && ibv_destroy_srq(srq) == 0 &&
		      ibv_dereg_mr(ma) == 0 && ibv_dereg_mr(mb) == 0 && ibv_destroy_cq(qa) == 0 &&
		      ibv_destroy_cq(qb) == 0 && ibv_dealloc_pd(pa) == 0 &&
		      ibv_dealloc_pd(pb) == 0 && ibv_close_device(ca) == 0 &&
		      ibv_close_device(cb) == 0,
	      "teardown");
	free(buf);
	ibv_free_device_list(list);
	printf("PASS teardown\n");
	return 0;
}
