/* Beyond plain data: a shared receive queue, memory windows of both types (bind, use,
 * invalidate locally and by the peer's SEND with invalidate, dealloc while bound), CQ events
 * through a completion channel, and an asynchronous event. */
#include "conf.h"
#include <errno.h>
#include <poll.h>
#include <string.h>
#include <unistd.h>

/* Two SENDs land in the two receives posted to B's SRQ, in order. */
static int srq_case(struct pair *p, const void *arg)
{
	(void)arg;
	uint32_t grh = p->cfg->type == IBV_QPT_UD ? GRH : 0;
	if (here(p, B))
		for (int i = 0; i < 2; i++) {
			struct ibv_sge rs = sge_of(&p->s[B], RECV_OFF + (size_t)i * 2048, 1024 + grh);
			if (post_recv(p, B, 30 + (uint64_t)i, &rs, 1))
				fail(p, "ibv_post_srq_recv");
		}
	if (sync_ends(p))
		return -1;
	if (here(p, A))
		for (int i = 0; i < 2 && !p->failed; i++) {
			fill(p->s[A].buf + (size_t)i * 1024, 500, 60 + (unsigned)i);
			struct op op = { .wr_id = 40 + (uint64_t)i, .opcode = IBV_WR_SEND,
					 .flags = IBV_SEND_SIGNALED, .nsge = 1 };
			op.sge[0] = sge_of(&p->s[A], (size_t)i * 1024, 500);
			post_wait(p, A, &op, IBV_WC_SUCCESS, "A's SEND", NULL);
		}
	if (sync_ends(p))
		return -1;
	if (here(p, B))
		for (int i = 0; i < 2 && !p->failed; i++) {
			struct wc w;
			if (expect_wc(p, B, IBV_WC_SUCCESS, "B's receive from the SRQ", &w))
				break;
			if (w.wr_id != 30 + (uint64_t)i || w.byte_len != 500 + grh ||
			    w.qp_num != p->info[B].qpn)
				fail(p, "B's receive %d: wr_id %llu byte_len %u qp_num %#x", i,
				     (unsigned long long)w.wr_id, w.byte_len, w.qp_num);
			else
				check_bytes(p, p->s[B].buf + RECV_OFF + (size_t)i * 2048 + grh, 500,
					    60 + (unsigned)i, "B's bytes");
		}
	return sync_ends(p);
}

/* A's WRITE of 64 bytes to B's receive half through `rkey`: the status A gets, and (on
 * success) the bytes B holds. */
static int write_through(struct pair *p, uint32_t rkey, enum ibv_wc_status want, unsigned seed)
{
	if (here(p, A)) {
		fill(p->s[A].buf, 64, seed);
		struct op op = { .wr_id = 50 + seed, .opcode = IBV_WR_RDMA_WRITE,
				 .flags = IBV_SEND_SIGNALED, .nsge = 1, .rkey = rkey,
				 .raddr = p->info[B].addr + RECV_OFF + 128 };
		op.sge[0] = sge_of(&p->s[A], 0, 64);
		post_wait(p, A, &op, want, "A's WRITE through the window", NULL);
	}
	if (sync_ends(p))
		return -1;
	if (here(p, B) && want == IBV_WC_SUCCESS)
		check_bytes(p, p->s[B].buf + RECV_OFF + 128, 64, seed, "B's bytes");
	return sync_ends(p);
}

/* B binds `mw` over its receive half with REMOTE_WRITE: type 1 with ibv_bind_mw, type 2
 * with a BIND_MW work request (or ibv_wr_bind_mw); returns the window's new rkey. */
static uint32_t bind(struct pair *p, struct ibv_mw *mw, uint32_t len)
{
	struct side *b = &p->s[B];
	struct ibv_mw_bind_info info = { .mr = b->mr, .addr = (uintptr_t)(b->buf + RECV_OFF),
					 .length = len, .mw_access_flags = IBV_ACCESS_REMOTE_WRITE };
	uint32_t rkey;
	int rc;
	if (mw->type == IBV_MW_TYPE_1) {
		struct ibv_mw_bind mb = { .wr_id = 60, .send_flags = IBV_SEND_SIGNALED,
					  .bind_info = info };
		rc = ibv_bind_mw(b->qp, mw, &mb);
		rkey = mw->rkey;
	} else if (p->cfg->api == EXT) {
		rkey = ibv_inc_rkey(mw->rkey);
		ibv_wr_start(b->qpx);
		b->qpx->wr_id = 60;
		b->qpx->wr_flags = IBV_SEND_SIGNALED;
		ibv_wr_bind_mw(b->qpx, mw, rkey, &info);
		rc = ibv_wr_complete(b->qpx);
	} else {
		rkey = ibv_inc_rkey(mw->rkey);
		struct ibv_send_wr wr = { .wr_id = 60, .opcode = IBV_WR_BIND_MW,
					  .send_flags = IBV_SEND_SIGNALED }, *bad = NULL;
		wr.bind_mw.mw = mw;
		wr.bind_mw.rkey = rkey;
		wr.bind_mw.bind_info = info;
		rc = ibv_post_send(b->qp, &wr, &bad);
	}
	struct wc w;
	if (rc)
		fail(p, "bind: %d", rc);
	else if (!expect_wc(p, B, IBV_WC_SUCCESS, "B's bind", &w) && w.opcode != IBV_WC_BIND_MW)
		fail(p, "B's bind completion: opcode %d", w.opcode);
	return rc ? 0 : (mw->type == IBV_MW_TYPE_1 ? mw->rkey : rkey);
}

enum mw_end { UNBIND, LOCAL_INV, REMOTE_INV, DEALLOC };
struct mw_arg {
	enum ibv_mw_type type;
	enum mw_end end;
};

/* A window opens B's memory to A's WRITE while bound, and not after it ends. */
static int window_case(struct pair *p, const void *arg)
{
	const struct mw_arg *m = arg;
	struct ibv_mw *mw = NULL;
	uint64_t rkey = 0;
	if (here(p, B)) {
		mw = ibv_alloc_mw(p->s[B].pd, m->type);
		if (!mw)
			fail(p, "ibv_alloc_mw: errno %d", errno);
		else
			rkey = bind(p, mw, 4096);
	}
	rkey = share_u64(p, B, rkey);
	if (sync_ends(p) || write_through(p, (uint32_t)rkey, IBV_WC_SUCCESS, 1))
		goto out;
	if (here(p, B) && m->end == REMOTE_INV) {
		if (post_recv(p, B, 61, NULL, 0))
			fail(p, "ibv_post_recv");
	}
	if (sync_ends(p))
		goto out;
	switch (m->end) {
	case UNBIND:
		if (here(p, B))
			bind(p, mw, 0);
		break;
	case LOCAL_INV:
		if (here(p, B)) {
			struct op op = { .wr_id = 62, .opcode = IBV_WR_LOCAL_INV,
					 .flags = IBV_SEND_SIGNALED, .inv_rkey = (uint32_t)rkey };
			struct wc w;
			if (!post_wait(p, B, &op, IBV_WC_SUCCESS, "B's LOCAL_INV", &w) &&
			    w.opcode != IBV_WC_LOCAL_INV)
				fail(p, "B's LOCAL_INV completion: opcode %d", w.opcode);
		}
		break;
	case REMOTE_INV:
		if (here(p, A)) {
			struct op op = { .wr_id = 63, .opcode = IBV_WR_SEND_WITH_INV,
					 .flags = IBV_SEND_SIGNALED, .inv_rkey = (uint32_t)rkey };
			post_wait(p, A, &op, IBV_WC_SUCCESS, "A's SEND_WITH_INV", NULL);
		}
		if (sync_ends(p))
			goto out;
		if (here(p, B)) {
			struct wc w;
			if (!expect_wc(p, B, IBV_WC_SUCCESS, "B's receive of SEND_WITH_INV", &w) &&
			    (w.opcode != IBV_WC_RECV || !(w.flags & IBV_WC_WITH_INV) ||
			     w.imm != (uint32_t)rkey))
				fail(p, "B's receive: opcode %d flags %#x invalidated %#x", w.opcode,
				     w.flags, w.imm);
		}
		break;
	case DEALLOC:
		if (here(p, B)) {
			if (ibv_dealloc_mw(mw))
				fail(p, "ibv_dealloc_mw while bound");
			mw = NULL;
		}
		break;
	}
	if (sync_ends(p))
		goto out;
	write_through(p, (uint32_t)rkey, IBV_WC_REM_ACCESS_ERR, 2);
out:
	if (mw && ibv_dealloc_mw(mw))
		fail(p, "ibv_dealloc_mw");
	return p->failed ? -1 : 0;
}

/* B arms its CQ and sleeps on the completion channel: A's SEND wakes it, the event names
 * B's CQ, and the completion is there to poll. */
static int cq_event_case(struct pair *p, const void *arg)
{
	(void)arg;
	uint32_t grh = p->cfg->type == IBV_QPT_UD ? GRH : 0;
	struct side *b = &p->s[B];
	if (here(p, B)) {
		struct ibv_sge rs = sge_of(b, RECV_OFF, 64 + grh);
		if (post_recv(p, B, 70, &rs, 1) || ibv_req_notify_cq(b->cq, 0))
			fail(p, "post_recv or ibv_req_notify_cq");
	}
	if (sync_ends(p))
		return -1;
	if (here(p, A)) {
		struct op op = { .wr_id = 71, .opcode = IBV_WR_SEND, .flags = IBV_SEND_SIGNALED,
				 .nsge = 1 };
		op.sge[0] = sge_of(&p->s[A], 0, 64);
		post_wait(p, A, &op, IBV_WC_SUCCESS, "A's SEND", NULL);
	}
	if (sync_ends(p))
		return -1;
	if (here(p, B)) {
		struct pollfd pf = { .fd = b->ch->fd, .events = POLLIN };
		struct ibv_cq *ev_cq = NULL;
		void *ev_ctx = NULL;
		if (poll(&pf, 1, 5000) != 1)
			fail(p, "the completion channel stayed quiet for 5 s");
		else if (ibv_get_cq_event(b->ch, &ev_cq, &ev_ctx) || ev_cq != b->cq)
			fail(p, "ibv_get_cq_event: no event, or another CQ");
		else {
			ibv_ack_cq_events(b->cq, 1);
			struct wc w;
			if (!expect_wc(p, B, IBV_WC_SUCCESS, "B's receive", &w) && w.wr_id != 70)
				fail(p, "B's receive: wr_id %llu", (unsigned long long)w.wr_id);
		}
	}
	return sync_ends(p);
}

/* B's channel has an event for B's CQ within `ms`; it is taken and acknowledged. */
static int take_event(struct pair *p, int ms, const char *what)
{
	struct side *b = &p->s[B];
	struct pollfd pf = { .fd = b->ch->fd, .events = POLLIN };
	struct ibv_cq *ev_cq = NULL;
	void *ev_ctx = NULL;
	if (poll(&pf, 1, ms) != 1)
		return fail(p, "%s: the completion channel stayed quiet for %d ms", what, ms);
	if (ibv_get_cq_event(b->ch, &ev_cq, &ev_ctx) || ev_cq != b->cq)
		return fail(p, "%s: ibv_get_cq_event: no event, or another CQ", what);
	ibv_ack_cq_events(b->cq, 1);
	return 0;
}

/* perftest -e's loop: take the event, re-arm the CQ, then poll the completion the event
 * was for. A CQ armed while it holds a completion reports the next one added, not that
 * one ("the next completion", as rxe and NICs): the channel must stay quiet until A sends
 * again. An event for the completion already there (oxrdma's, until this case) made
 * perftest's next wait return at once, its poll find nothing, and it post into a full
 * send queue: ib_send_lat -e, ib_read_lat -e and ib_atomic_lat -e failed every time. */
static int cq_rearm_case(struct pair *p, const void *arg)
{
	(void)arg;
	uint32_t grh = p->cfg->type == IBV_QPT_UD ? GRH : 0;
	struct side *b = &p->s[B];
	if (here(p, B)) {
		for (uint64_t id = 80; id < 83; id++) {
			struct ibv_sge rs = sge_of(b, RECV_OFF + 128 * (id - 80), 64 + grh);
			if (post_recv(p, B, id, &rs, 1))
				fail(p, "post_recv");
		}
		if (ibv_req_notify_cq(b->cq, 0))
			fail(p, "ibv_req_notify_cq");
	}
	if (sync_ends(p))
		return -1;
	for (uint64_t round = 0; round < 3; round++) {
		if (here(p, A)) {
			struct op op = { .wr_id = 90 + round, .opcode = IBV_WR_SEND,
					 .flags = IBV_SEND_SIGNALED, .nsge = 1 };
			op.sge[0] = sge_of(&p->s[A], 0, 64);
			post_wait(p, A, &op, IBV_WC_SUCCESS, "A's SEND", NULL);
		}
		if (sync_ends(p))
			return -1;
		if (here(p, B) && !take_event(p, 5000, "A's SEND")) {
			if (ibv_req_notify_cq(b->cq, 0))
				fail(p, "ibv_req_notify_cq");
			/* A program may do other work between the arm and the poll; the provider
			 * looks at the CQ meanwhile. */
			usleep(20000);
			struct wc w;
			if (!expect_wc(p, B, IBV_WC_SUCCESS, "B's receive", &w) && w.wr_id != 80 + round)
				fail(p, "B's receive: wr_id %llu", (unsigned long long)w.wr_id);
			struct pollfd pf = { .fd = b->ch->fd, .events = POLLIN };
			if (!p->failed && poll(&pf, 1, 100) != 0)
				fail(p, "round %llu: an event for the completion the CQ held when it "
					"was armed", (unsigned long long)round);
		}
		if (sync_ends(p))
			return -1;
	}
	return 0;
}

/* B's context reports the asynchronous event `type` for its object `element` within 5 s. */
static void expect_event(struct pair *p, enum ibv_event_type type, const void *element)
{
	struct ibv_context *ctx = p->s[B].ctx;
	struct pollfd pf = { .fd = ctx->async_fd, .events = POLLIN };
	struct ibv_async_event ev;
	if (poll(&pf, 1, 5000) != 1) {
		fail(p, "no asynchronous event within 5 s");
		return;
	}
	if (ibv_get_async_event(ctx, &ev)) {
		fail(p, "ibv_get_async_event: errno %d", errno);
		return;
	}
	/* Every member of the union is a pointer to the object. */
	if (ev.event_type != type || (const void *)ev.element.cq != element)
		fail(p, "event %s for %p, not %s for %p", ibv_event_type_str(ev.event_type),
		     (void *)ev.element.cq, ibv_event_type_str(type), element);
	ibv_ack_async_event(&ev);
}

/* A's WRITE through a bad rkey: besides A's remote access error, B's context gets the
 * asynchronous event IBV_EVENT_QP_ACCESS_ERR for B's QP. */
static int access_event_case(struct pair *p, const void *arg)
{
	(void)arg;
	if (write_through(p, p->info[B].rkey ^ 0x5a5a00, IBV_WC_REM_ACCESS_ERR, 3))
		return -1;
	if (here(p, B))
		expect_event(p, IBV_EVENT_QP_ACCESS_ERR, p->s[B].qp);
	return sync_ends(p);
}

/* More completions than B's CQ holds: B's context gets IBV_EVENT_CQ_ERR for that CQ. */
static int cq_overrun_case(struct pair *p, const void *arg)
{
	(void)arg;
	uint32_t grh = p->cfg->type == IBV_QPT_UD ? GRH : 0;
	int n = 0;
	if (here(p, B)) {
		n = p->s[B].cq->cqe + 2;
		if (n > 30)
			fail(p, "the device made a CQ of %d entries for 2", p->s[B].cq->cqe);
		for (int i = 0; i < n && !p->failed; i++) {
			struct ibv_sge rs = sge_of(&p->s[B], RECV_OFF + (size_t)i * 64, 8 + grh);
			if (post_recv(p, B, 80 + (uint64_t)i, &rs, 1))
				fail(p, "post_recv %d", i);
		}
	}
	n = (int)share_u64(p, B, (uint64_t)n);
	if (sync_ends(p))
		return -1;
	/* A's completions are not waited for: once B's CQ is full an RC responder stops
	 * acknowledging on rxe, and the QPs are destroyed with the case. */
	if (here(p, A))
		for (int i = 0; i < n && !p->failed; i++) {
			struct op op = { .wr_id = 90 + (uint64_t)i, .opcode = IBV_WR_SEND,
					 .nsge = 1 };
			op.sge[0] = sge_of(&p->s[A], 0, 8);
			if (post(p, A, &op))
				fail(p, "post SEND %d", i);
		}
	if (sync_ends(p))
		return -1;
	if (here(p, B))
		expect_event(p, IBV_EVENT_CQ_ERR, p->s[B].cq);
	return sync_ends(p);
}

/* ibv_resize_cq: larger, then smaller while empty, each giving at least the depth asked;
 * refused with EINVAL below the completions the CQ holds; those stay, in order. */
static int cq_resize_case(struct pair *p, const void *arg)
{
	(void)arg;
	struct side *b = &p->s[B];
	if (here(p, B)) {
		int rc = ibv_resize_cq(b->cq, 128);
		if (rc || b->cq->cqe < 128)
			fail(p, "resize to 128: %d, cqe %d", rc, b->cq->cqe);
		else if ((rc = ibv_resize_cq(b->cq, 8)) || b->cq->cqe < 8)
			fail(p, "resize to 8: %d, cqe %d", rc, b->cq->cqe);
		for (int i = 0; i < 5 && !p->failed; i++) {
			struct ibv_sge rs = sge_of(b, RECV_OFF + (size_t)i * 64, 64);
			if (post_recv(p, B, 100 + (uint64_t)i, &rs, 1))
				fail(p, "post_recv %d", i);
		}
	}
	if (sync_ends(p))
		return -1;
	/* RC: A's completions say B's have been made. */
	if (here(p, A))
		for (int i = 0; i < 5 && !p->failed; i++) {
			struct op op = { .wr_id = 110 + (uint64_t)i, .opcode = IBV_WR_SEND,
					 .flags = IBV_SEND_SIGNALED, .nsge = 1 };
			op.sge[0] = sge_of(&p->s[A], 0, 16);
			post_wait(p, A, &op, IBV_WC_SUCCESS, "A's SEND", NULL);
		}
	if (sync_ends(p))
		return -1;
	if (here(p, B)) {
		int rc = ibv_resize_cq(b->cq, 2);
		if (rc != EINVAL)
			fail(p, "resize to 2 under 5 completions: %d, not EINVAL", rc);
		for (int i = 0; i < 5 && !p->failed; i++) {
			struct wc w;
			if (!expect_wc(p, B, IBV_WC_SUCCESS, "B's receive", &w) &&
			    w.wr_id != 100 + (uint64_t)i)
				fail(p, "B's receive %d: wr_id %llu", i, (unsigned long long)w.wr_id);
		}
		if (!p->failed && ((rc = ibv_resize_cq(b->cq, 2)) || b->cq->cqe < 2))
			fail(p, "resize to 2 when empty: %d, cqe %d", rc, b->cq->cqe);
	}
	return sync_ends(p);
}

#define MW(t, e) (&(const struct mw_arg){ t, e })

const struct kase more_cases[] = {
	{ "srq-send", srq_case, NULL, T_RC | T_UD, NEED_SRQ },
	{ "mw1-bind-write-unbind", window_case, MW(IBV_MW_TYPE_1, UNBIND), T_RC, 0 },
	{ "mw1-dealloc-while-bound", window_case, MW(IBV_MW_TYPE_1, DEALLOC), T_RC, 0 },
	{ "mw2-bind-write-local-inv", window_case, MW(IBV_MW_TYPE_2, LOCAL_INV), T_RC, 0 },
	{ "mw2-send-with-inv", window_case, MW(IBV_MW_TYPE_2, REMOTE_INV), T_RC, 0 },
	{ "mw2-dealloc-while-bound", window_case, MW(IBV_MW_TYPE_2, DEALLOC), T_RC, 0 },
	{ "cq-event", cq_event_case, NULL, T_RC | T_UC | T_UD, NEED_CHANNEL },
	{ "cq-event-rearmed-before-poll", cq_rearm_case, NULL, T_RC | T_UC | T_UD, NEED_CHANNEL },
	{ "cq-resize", cq_resize_case, NULL, T_RC, 0 },
	{ "async-qp-access-error", access_event_case, NULL, T_RC, 0 },
	{ "async-cq-overrun", cq_overrun_case, NULL, T_RC | T_UC | T_UD, NEED_TINY_CQ },
};
const int n_more_cases = sizeof(more_cases) / sizeof(more_cases[0]);
