/* Posting and polling through the API a run tests: ibv_post_send and ibv_poll_cq, or the
 * extended ibv_wr_* builders and ibv_start_poll/ibv_next_poll. */
#include "conf.h"
#include <errno.h>
#include <poll.h>
#include <string.h>
#include <time.h>

static int post_plain(struct side *s, const struct op *op, int ud, const struct info *peer)
{
	struct ibv_send_wr wr = {
		.wr_id = op->wr_id,
		.sg_list = (struct ibv_sge *)op->sge,
		.num_sge = op->nsge,
		.opcode = op->opcode,
		.send_flags = op->flags,
	}, *bad = NULL;
	switch (op->opcode) {
	case IBV_WR_SEND_WITH_IMM:
	case IBV_WR_RDMA_WRITE_WITH_IMM:
		wr.imm_data = htobe32(op->imm);
		break;
	case IBV_WR_SEND_WITH_INV:
	case IBV_WR_LOCAL_INV:
		wr.invalidate_rkey = op->inv_rkey;
		break;
	default:
		break;
	}
	switch (op->opcode) {
	case IBV_WR_RDMA_WRITE:
	case IBV_WR_RDMA_WRITE_WITH_IMM:
	case IBV_WR_RDMA_READ:
		wr.wr.rdma.remote_addr = op->raddr;
		wr.wr.rdma.rkey = op->rkey;
		break;
	case IBV_WR_ATOMIC_CMP_AND_SWP:
	case IBV_WR_ATOMIC_FETCH_AND_ADD:
		wr.wr.atomic.remote_addr = op->raddr;
		wr.wr.atomic.rkey = op->rkey;
		wr.wr.atomic.compare_add = op->compare_add;
		wr.wr.atomic.swap = op->swap;
		break;
	default:
		break;
	}
	if (ud) {
		wr.wr.ud.ah = s->ah;
		wr.wr.ud.remote_qpn = peer->qpn;
		wr.wr.ud.remote_qkey = 0x11111111;
	}
	return ibv_post_send(s->qp, &wr, &bad);
}

static int post_ext(struct side *s, const struct op *op, int ud, const struct info *peer)
{
	struct ibv_qp_ex *q = s->qpx;
	ibv_wr_start(q);
	q->wr_id = op->wr_id;
	q->wr_flags = op->flags & ~IBV_SEND_INLINE;
	switch (op->opcode) {
	case IBV_WR_SEND:
		ibv_wr_send(q);
		break;
	case IBV_WR_SEND_WITH_IMM:
		ibv_wr_send_imm(q, htobe32(op->imm));
		break;
	case IBV_WR_SEND_WITH_INV:
		ibv_wr_send_inv(q, op->inv_rkey);
		break;
	case IBV_WR_RDMA_WRITE:
		ibv_wr_rdma_write(q, op->rkey, op->raddr);
		break;
	case IBV_WR_RDMA_WRITE_WITH_IMM:
		ibv_wr_rdma_write_imm(q, op->rkey, op->raddr, htobe32(op->imm));
		break;
	case IBV_WR_RDMA_READ:
		ibv_wr_rdma_read(q, op->rkey, op->raddr);
		break;
	case IBV_WR_ATOMIC_CMP_AND_SWP:
		ibv_wr_atomic_cmp_swp(q, op->rkey, op->raddr, op->compare_add, op->swap);
		break;
	case IBV_WR_ATOMIC_FETCH_AND_ADD:
		ibv_wr_atomic_fetch_add(q, op->rkey, op->raddr, op->compare_add);
		break;
	case IBV_WR_LOCAL_INV:
		ibv_wr_local_inv(q, op->inv_rkey);
		break;
	default:
		ibv_wr_abort(q);
		return EINVAL;
	}
	if (ud)
		ibv_wr_set_ud_addr(q, s->ah, peer->qpn, 0x11111111);
	if (op->opcode != IBV_WR_LOCAL_INV) {
		if (op->flags & IBV_SEND_INLINE) {
			struct ibv_data_buf d[4];
			for (int i = 0; i < op->nsge; i++) {
				d[i].addr = (void *)(uintptr_t)op->sge[i].addr;
				d[i].length = op->sge[i].length;
			}
			ibv_wr_set_inline_data_list(q, (size_t)op->nsge, d);
		} else {
			ibv_wr_set_sge_list(q, (size_t)op->nsge, op->sge);
		}
	}
	return ibv_wr_complete(q);
}

/* Posts `op` on end `r`; the return value of ibv_post_send or ibv_wr_complete. */
int post(struct pair *p, enum role r, const struct op *op)
{
	struct side *s = &p->s[r];
	int ud = p->cfg->type == IBV_QPT_UD;
	const struct info *peer = &p->info[!r];
	return p->cfg->api == EXT ? post_ext(s, op, ud, peer) : post_plain(s, op, ud, peer);
}

int post_recv(struct pair *p, enum role r, uint64_t wr_id, struct ibv_sge *sge, int n)
{
	struct ibv_recv_wr wr = { .wr_id = wr_id, .sg_list = sge, .num_sge = n }, *bad = NULL;
	struct side *s = &p->s[r];
	return s->srq ? ibv_post_srq_recv(s->srq, &wr, &bad) : ibv_post_recv(s->qp, &wr, &bad);
}

unsigned wakeups, empty_wakeups;

static double now(void)
{
	struct timespec t;
	clock_gettime(CLOCK_MONOTONIC, &t);
	return (double)t.tv_sec + (double)t.tv_nsec / 1e9;
}

/* Events mode, the CQ found empty: sleeps on the channel for up to `left` seconds; an
 * event is taken, acknowledged and the CQ re-armed before it is polled again (perftest
 * -e's order, so the completion the event was for is in the CQ when it is re-armed). */
static int sleep_for_event(struct pair *p, struct side *s, double left)
{
	struct pollfd pf = { .fd = s->ch->fd, .events = POLLIN };
	int rc = poll(&pf, 1, (int)(left * 1000) + 1);
	if (rc < 0)
		return errno == EINTR ? 0 : fail(p, "poll on the completion channel: errno %d", errno);
	if (rc == 0)
		return 0;
	struct ibv_cq *cq = NULL;
	void *ctx = NULL;
	if (ibv_get_cq_event(s->ch, &cq, &ctx))
		return fail(p, "ibv_get_cq_event: errno %d", errno);
	if (cq != s->cq)
		return fail(p, "ibv_get_cq_event: an event for another CQ");
	ibv_ack_cq_events(cq, 1);
	if (ibv_req_notify_cq(cq, 0))
		return fail(p, "ibv_req_notify_cq");
	wakeups++;
	s->woke = 1;
	return 0;
}

/* One completion of end `r`, or 0 after `ms` with none: 1 if one was read. In events mode
 * the end sleeps on its channel while its CQ is empty. */
static int poll_one(struct pair *p, enum role r, struct wc *out, int ms)
{
	struct side *s = &p->s[r];
	double end = now() + ms / 1000.0;
	memset(out, 0, sizeof(*out));
	for (;;) {
		if (p->cfg->api == EXT) {
			struct ibv_poll_cq_attr attr = {};
			int rc = ibv_start_poll(s->cqx, &attr);
			if (rc == 0) {
				struct ibv_cq_ex *c = s->cqx;
				out->wr_id = c->wr_id;
				out->status = c->status;
				out->opcode = ibv_wc_read_opcode(c);
				out->byte_len = ibv_wc_read_byte_len(c);
				out->flags = ibv_wc_read_wc_flags(c);
				if (out->flags & IBV_WC_WITH_IMM)
					out->imm = be32toh(ibv_wc_read_imm_data(c));
				else if (out->flags & IBV_WC_WITH_INV)
					out->imm = ibv_wc_read_invalidated_rkey(c);
				out->qp_num = ibv_wc_read_qp_num(c);
				out->src_qp = ibv_wc_read_src_qp(c);
				ibv_end_poll(c);
				s->woke = 0;
				return 1;
			}
			if (rc != ENOENT)
				return fail(p, "ibv_start_poll: %d", rc);
		} else {
			struct ibv_wc w;
			int n = ibv_poll_cq(s->cq, 1, &w);
			if (n < 0)
				return fail(p, "ibv_poll_cq: %d", n);
			if (n == 1) {
				out->wr_id = w.wr_id;
				out->status = w.status;
				out->opcode = w.opcode;
				out->byte_len = w.byte_len;
				out->flags = w.wc_flags;
				if (w.wc_flags & IBV_WC_WITH_IMM)
					out->imm = be32toh(w.imm_data);
				else if (w.wc_flags & IBV_WC_WITH_INV)
					out->imm = w.invalidated_rkey;
				out->qp_num = w.qp_num;
				out->src_qp = w.src_qp;
				s->woke = 0;
				return 1;
			}
		}
		/* The CQ was empty. After an event that is allowed (a completion added after the
		 * arm may have been polled before its event was read), but not expected. */
		if (s->woke) {
			empty_wakeups++;
			s->woke = 0;
		}
		double left = end - now();
		if (left <= 0)
			return 0;
		if (p->cfg->events && sleep_for_event(p, s, left) < 0)
			return -1;
	}
}

/* The next completion of end `r` (within 10 s). */
int wait_wc(struct pair *p, enum role r, struct wc *out)
{
	int n = poll_one(p, r, out, 10000);
	if (n < 0)
		return -1;
	if (n == 0)
		return fail(p, "%c: no completion within 10 s", "AB"[r]);
	return 0;
}

int expect_wc(struct pair *p, enum role r, enum ibv_wc_status st, const char *what,
	      struct wc *out)
{
	struct wc w;
	if (wait_wc(p, r, &w))
		return -1;
	if (out)
		*out = w;
	if (w.status != st)
		return fail(p, "%s: status %s, not %s", what, ibv_wc_status_str(w.status),
			    ibv_wc_status_str(st));
	return 0;
}

/* Posts `op` on end `r` and takes its completion, which must have status `st` (`what`
 * names the WR in a failure); `out`, if not NULL, gets the completion. */
int post_wait(struct pair *p, enum role r, const struct op *op, enum ibv_wc_status st,
	      const char *what, struct wc *out)
{
	int rc = post(p, r, op);
	if (rc)
		return fail(p, "post %s: %d", what, rc);
	return expect_wc(p, r, st, what, out);
}

/* End `r` completes nothing within `ms`. */
int expect_nothing(struct pair *p, enum role r, int ms)
{
	struct wc w;
	int n = poll_one(p, r, &w, ms);
	if (n < 0)
		return -1;
	if (n)
		return fail(p, "%c: an unexpected completion (wr_id %llu, %s)", "AB"[r],
			    (unsigned long long)w.wr_id, ibv_wc_status_str(w.status));
	return 0;
}
