/* Data cases: every opcode the transport offers, zero-length, single- and multi-packet,
 * inline, with immediate data, and gathered from a list of SGEs; each checks the statuses,
 * opcodes, lengths and immediates of both ends' completions and every byte moved. */
#include "conf.h"
#include <string.h>

struct msg {
	uint32_t len;
	int nsge;   /* the message is gathered from this many pieces (0: none, len 0) */
	int inl;    /* IBV_SEND_INLINE */
	int imm;    /* with immediate data */
	unsigned seed;
};

/* Lays `m`'s bytes (the pattern of its seed) out in A's send half, in `nsge` pieces 4 KiB
 * apart, and fills `op`'s SGE list with them. */
static void gather_list(struct pair *p, const struct msg *m, struct op *op)
{
	struct side *a = &p->s[A];
	uint8_t whole[RECV_OFF];
	fill(whole, m->len, m->seed);
	op->nsge = m->nsge;
	uint32_t done = 0;
	for (int i = 0; i < m->nsge; i++) {
		uint32_t piece = i == m->nsge - 1 ? m->len - done : m->len / (uint32_t)m->nsge;
		size_t at = (size_t)i * 4096 + (size_t)i * 13; /* gaps, and odd alignment */
		memcpy(a->buf + at, whole + done, piece);
		op->sge[i] = sge_of(a, at, piece);
		done += piece;
	}
	if (m->inl)
		op->flags |= IBV_SEND_INLINE;
}

/* B sees the bytes of `m` at `off` of its buffer within 5 s (a WRITE without immediate
 * completes nothing there); B's CQ is polled meanwhile and must stay empty. */
static int await_bytes(struct pair *p, size_t off, const struct msg *m)
{
	struct side *b = &p->s[B];
	uint8_t want[RECV_OFF];
	fill(want, m->len, m->seed);
	for (int i = 0; i < 500; i++) {
		if (!memcmp(b->buf + off, want, m->len))
			return expect_nothing(p, B, 1);
		if (expect_nothing(p, B, 10))
			return -1;
	}
	return check_bytes(p, b->buf + off, m->len, m->seed, "B's bytes");
}

static int send_case(struct pair *p, const void *arg)
{
	const struct msg *m = arg;
	int ud = p->cfg->type == IBV_QPT_UD;
	uint32_t grh = ud ? GRH : 0;
	if (here(p, B)) {
		struct ibv_sge rs = sge_of(&p->s[B], RECV_OFF, m->len + grh + 64);
		if (post_recv(p, B, 7, &rs, 1))
			fail(p, "ibv_post_recv");
	}
	if (sync_ends(p))
		return -1;
	if (here(p, A)) {
		struct op op = { .wr_id = 9, .opcode = m->imm ? IBV_WR_SEND_WITH_IMM : IBV_WR_SEND,
				 .flags = IBV_SEND_SIGNALED, .imm = 0xc0ffee00u + m->len };
		gather_list(p, m, &op);
		struct wc w;
		if (!post_wait(p, A, &op, IBV_WC_SUCCESS, "A's SEND", &w) &&
		    (w.wr_id != 9 || w.opcode != IBV_WC_SEND))
			fail(p, "A's SEND completion: wr_id %llu opcode %d",
			     (unsigned long long)w.wr_id, w.opcode);
	}
	if (sync_ends(p))
		return -1;
	if (here(p, B)) {
		struct wc w;
		if (expect_wc(p, B, IBV_WC_SUCCESS, "B's RECV", &w))
			return sync_ends(p);
		/* rxe flags every receive GRH (RoCEv2 packets carry one), not only UD's. */
		unsigned want_flags = (m->imm ? IBV_WC_WITH_IMM : 0) | IBV_WC_GRH;
		if (w.wr_id != 7 || w.opcode != IBV_WC_RECV || w.byte_len != m->len + grh)
			fail(p, "B's RECV: wr_id %llu opcode %d byte_len %u (want %u)",
			     (unsigned long long)w.wr_id, w.opcode, w.byte_len, m->len + grh);
		else if ((w.flags & (IBV_WC_WITH_IMM | IBV_WC_GRH)) != want_flags)
			fail(p, "B's RECV: wc_flags %#x", w.flags);
		else if (m->imm && w.imm != 0xc0ffee00u + m->len)
			fail(p, "B's RECV: imm %#x", w.imm);
		else if (ud && w.src_qp != p->info[A].qpn)
			fail(p, "B's RECV: src_qp %#x, not A's %#x", w.src_qp, p->info[A].qpn);
		else if (w.qp_num != p->info[B].qpn)
			fail(p, "B's RECV: qp_num %#x", w.qp_num);
		else
			check_bytes(p, p->s[B].buf + RECV_OFF + grh, m->len, m->seed, "B's RECV bytes");
	}
	return sync_ends(p);
}

static int write_case(struct pair *p, const void *arg)
{
	const struct msg *m = arg;
	if (here(p, B) && m->imm) {
		if (post_recv(p, B, 8, NULL, 0))
			fail(p, "ibv_post_recv");
	}
	if (sync_ends(p))
		return -1;
	if (here(p, A)) {
		struct op op = { .wr_id = 10,
				 .opcode = m->imm ? IBV_WR_RDMA_WRITE_WITH_IMM : IBV_WR_RDMA_WRITE,
				 .flags = IBV_SEND_SIGNALED, .imm = 0xfeed0000u + m->len,
				 .raddr = p->info[B].addr + RECV_OFF + 5, .rkey = p->info[B].rkey };
		gather_list(p, m, &op);
		struct wc w;
		if (!post_wait(p, A, &op, IBV_WC_SUCCESS, "A's WRITE", &w) &&
		    (w.wr_id != 10 || w.opcode != IBV_WC_RDMA_WRITE))
			fail(p, "A's WRITE completion: wr_id %llu opcode %d",
			     (unsigned long long)w.wr_id, w.opcode);
	}
	if (sync_ends(p))
		return -1;
	if (here(p, B)) {
		if (m->imm) {
			struct wc w;
			if (!expect_wc(p, B, IBV_WC_SUCCESS, "B's WRITE_WITH_IMM", &w)) {
				if (w.opcode != IBV_WC_RECV_RDMA_WITH_IMM || w.byte_len != m->len ||
				    !(w.flags & IBV_WC_WITH_IMM) || w.imm != 0xfeed0000u + m->len)
					fail(p, "B's completion: opcode %d byte_len %u flags %#x imm %#x",
					     w.opcode, w.byte_len, w.flags, w.imm);
				else
					check_bytes(p, p->s[B].buf + RECV_OFF + 5, m->len, m->seed,
						    "B's bytes");
			}
		} else {
			await_bytes(p, RECV_OFF + 5, m);
		}
	}
	return sync_ends(p);
}

static int read_case(struct pair *p, const void *arg)
{
	const struct msg *m = arg;
	if (here(p, B))
		fill(p->s[B].buf + 3, m->len, m->seed);
	if (sync_ends(p))
		return -1;
	if (here(p, A)) {
		struct side *a = &p->s[A];
		struct op op = { .wr_id = 11, .opcode = IBV_WR_RDMA_READ, .flags = IBV_SEND_SIGNALED,
				 .raddr = p->info[B].addr + 3, .rkey = p->info[B].rkey };
		/* Scattered into `nsge` pieces of A's receive half. */
		op.nsge = m->nsge;
		uint32_t done = 0;
		for (int i = 0; i < m->nsge; i++) {
			uint32_t piece = i == m->nsge - 1 ? m->len - done : m->len / (uint32_t)m->nsge;
			op.sge[i] = sge_of(a, RECV_OFF + (size_t)i * 4096, piece);
			done += piece;
		}
		struct wc w;
		if (!post_wait(p, A, &op, IBV_WC_SUCCESS, "A's READ", &w)) {
			if (w.opcode != IBV_WC_RDMA_READ || w.byte_len != m->len)
				fail(p, "A's READ: opcode %d byte_len %u", w.opcode, w.byte_len);
			uint8_t got[RECV_OFF];
			done = 0;
			for (int i = 0; i < m->nsge; i++) {
				memcpy(got + done, (void *)(uintptr_t)op.sge[i].addr, op.sge[i].length);
				done += op.sge[i].length;
			}
			if (!p->failed)
				check_bytes(p, got, m->len, m->seed, "A's READ bytes");
		}
	}
	return sync_ends(p);
}

/* FETCH_AND_ADD, then a COMPARE_AND_SWAP that matches and one that does not: the value
 * each returns to A and what B's memory holds after each. */
static int atomics_case(struct pair *p, const void *arg)
{
	(void)arg;
	const struct { enum ibv_wr_opcode op; uint64_t ca, swap, old, after; } steps[] = {
		{ IBV_WR_ATOMIC_FETCH_AND_ADD, 5, 0, 0x1000, 0x1005 },
		{ IBV_WR_ATOMIC_CMP_AND_SWP, 0x1005, 0x77, 0x1005, 0x77 },
		{ IBV_WR_ATOMIC_CMP_AND_SWP, 0x1005, 0x99, 0x77, 0x77 },
	};
	if (here(p, B))
		*(uint64_t *)(p->s[B].buf + 64) = 0x1000;
	if (sync_ends(p))
		return -1;
	for (unsigned i = 0; i < 3; i++) {
		if (here(p, A)) {
			struct op op = { .wr_id = 20 + i, .opcode = steps[i].op,
					 .flags = IBV_SEND_SIGNALED,
					 .raddr = p->info[B].addr + 64, .rkey = p->info[B].rkey,
					 .compare_add = steps[i].ca, .swap = steps[i].swap, .nsge = 1 };
			op.sge[0] = sge_of(&p->s[A], RECV_OFF, 8);
			struct wc w;
			uint64_t *old = (uint64_t *)(p->s[A].buf + RECV_OFF);
			if (!post_wait(p, A, &op, IBV_WC_SUCCESS, "A's atomic", &w)) {
				enum ibv_wc_opcode want = steps[i].op == IBV_WR_ATOMIC_FETCH_AND_ADD
								  ? IBV_WC_FETCH_ADD
								  : IBV_WC_COMP_SWAP;
				if (w.opcode != want || w.byte_len != 8 || *old != steps[i].old)
					fail(p, "atomic %u: opcode %d byte_len %u returned %#llx", i,
					     w.opcode, w.byte_len, (unsigned long long)*old);
			}
		}
		if (sync_ends(p))
			return -1;
		if (here(p, B) && *(uint64_t *)(p->s[B].buf + 64) != steps[i].after)
			fail(p, "after atomic %u B holds %#llx", i,
			     (unsigned long long)*(uint64_t *)(p->s[B].buf + 64));
		if (sync_ends(p))
			return -1;
	}
	return 0;
}

#define MSG(...) (&(const struct msg){ __VA_ARGS__ })
#define ALL (T_RC | T_UC | T_UD)
#define CONN (T_RC | T_UC)

const struct kase data_cases[] = {
	{ "send-0", send_case, MSG(0, 0, 0, 0, 1), ALL, 0 },
	{ "send-1", send_case, MSG(1, 1, 0, 0, 2), ALL, 0 },
	{ "send-1024", send_case, MSG(1024, 1, 0, 0, 3), ALL, 0 },
	{ "send-4103", send_case, MSG(4103, 1, 0, 0, 4), CONN, 0 },
	{ "send-30000", send_case, MSG(30000, 1, 0, 0, 5), CONN, 0 },
	{ "send-sge3", send_case, MSG(900, 3, 0, 0, 6), ALL, 0 },
	{ "send-sge4-multipacket", send_case, MSG(9000, 4, 0, 0, 7), CONN, 0 },
	{ "send-inline-64", send_case, MSG(64, 1, 1, 0, 8), ALL, 0 },
	{ "send-inline-sge2", send_case, MSG(40, 2, 1, 0, 9), ALL, 0 },
	{ "send-imm-0", send_case, MSG(0, 0, 0, 1, 10), ALL, 0 },
	{ "send-imm-100", send_case, MSG(100, 1, 0, 1, 11), ALL, 0 },
	{ "send-imm-4103", send_case, MSG(4103, 1, 0, 1, 12), CONN, 0 },
	{ "write-0", write_case, MSG(0, 0, 0, 0, 13), CONN, 0 },
	{ "write-1", write_case, MSG(1, 1, 0, 0, 14), CONN, 0 },
	{ "write-4103", write_case, MSG(4103, 1, 0, 0, 15), CONN, 0 },
	{ "write-30000", write_case, MSG(30000, 1, 0, 0, 16), CONN, 0 },
	{ "write-sge3", write_case, MSG(5000, 3, 0, 0, 17), CONN, 0 },
	{ "write-inline-64", write_case, MSG(64, 1, 1, 0, 18), CONN, 0 },
	{ "write-imm-0", write_case, MSG(0, 0, 0, 1, 19), CONN, 0 },
	{ "write-imm-100", write_case, MSG(100, 1, 0, 1, 20), CONN, 0 },
	{ "write-imm-4103", write_case, MSG(4103, 2, 0, 1, 21), CONN, 0 },
	{ "read-0", read_case, MSG(0, 0, 0, 0, 22), T_RC, 0 },
	{ "read-1", read_case, MSG(1, 1, 0, 0, 23), T_RC, 0 },
	{ "read-4103", read_case, MSG(4103, 1, 0, 0, 24), T_RC, 0 },
	{ "read-30000", read_case, MSG(30000, 1, 0, 0, 25), T_RC, 0 },
	{ "read-sge3", read_case, MSG(7000, 3, 0, 0, 26), T_RC, 0 },
	{ "atomics", atomics_case, NULL, T_RC, 0 },
};
const int n_data_cases = sizeof(data_cases) / sizeof(data_cases[0]);
