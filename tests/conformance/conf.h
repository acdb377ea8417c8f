/* The verbs conformance suite: one program, built against Debian's <infiniband/verbs.h>
 * and run on any provider (oxrdma's libibverbs.so.1, or rdma-core on Linux rxe), that
 * checks each verb's results, completion statuses and bytes, per transport (RC, UC, UD),
 * per API (plain ibv_post_send/ibv_poll_cq, or the extended ibv_wr_* and ibv_start_poll),
 * and per topology: two QPs of one context, two contexts of one device in one process, or
 * two processes. Each case prints one line, "PASS <topology>/<transport>/<api>/<case>" or
 * "FAIL ...: <why>", so two providers' outputs compare line by line. */
#ifndef CONF_H
#define CONF_H

#include <infiniband/verbs.h>
#include <stdint.h>
#include <stdio.h>

enum topo { ONE_CTX, TWO_CTX, TWO_PROC };
enum api { PLAIN, EXT };

/* The two ends of every case: A mostly requests, B mostly responds. */
enum role { A = 0, B = 1 };

/* Each end's registered buffer: sends gather from the low half, receives land in the
 * high half. */
#define BUF_LEN (1 << 16)
#define RECV_OFF (BUF_LEN / 2)
#define GRH 40

struct config {
	const char *dev;
	int gid_index;
	enum topo topo;
	enum ibv_qp_type type;
	enum api api;
	const char *only; /* run only cases whose name contains this */
	int events;       /* every end sleeps on a completion channel while its CQ is empty */
};

/* One end: its context and objects. */
struct side {
	struct ibv_context *ctx;
	struct ibv_pd *pd;
	struct ibv_comp_channel *ch;
	struct ibv_cq *cq; /* the plain CQ, or ibv_cq_ex_to_cq of the extended one */
	struct ibv_cq_ex *cqx;
	struct ibv_qp *qp;
	struct ibv_qp_ex *qpx;
	struct ibv_mr *mr;
	uint8_t *buf;
	struct ibv_ah *ah; /* UD: to the other end */
	struct ibv_srq *srq;
	int woke; /* events mode: an event was taken and the CQ not yet found holding anything */
};

/* What one end tells the other. */
struct info {
	uint32_t qpn;
	uint32_t rkey;
	uint64_t addr;
	union ibv_gid gid;
};

/* A case's two ends; in two processes only `me`'s side is here. */
struct pair {
	const struct config *cfg;
	struct side s[2];
	struct info info[2];
	int local[2]; /* which roles this process plays */
	int sock;     /* two processes: the socket to the other */
	int failed;
	char why[256];
	unsigned needs; /* what the case asks of make_pair (NEED_*) */
};

/* What a case needs its ends made with. */
#define NEED_SRQ 1u     /* B receives from a shared receive queue */
#define NEED_CHANNEL 2u /* B's CQ reports to a completion channel */
#define NEED_TINY_CQ 4u /* B's CQ is as small as the device makes one of 2 entries */

/* A completion, as either API reports it. */
struct wc {
	uint64_t wr_id;
	enum ibv_wc_status status;
	enum ibv_wc_opcode opcode;
	uint32_t byte_len;
	uint32_t imm; /* host order */
	unsigned int flags;
	uint32_t qp_num, src_qp;
};

/* A send work request, for either API. */
struct op {
	uint64_t wr_id;
	enum ibv_wr_opcode opcode;
	struct ibv_sge sge[4];
	int nsge;
	unsigned int flags;
	uint32_t imm; /* host order */
	uint64_t raddr;
	uint32_t rkey;
	uint64_t compare_add, swap;
	uint32_t inv_rkey;
};

/* harness.c */
int fail(struct pair *p, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
int here(const struct pair *p, enum role r);
int sync_ends(struct pair *p);
void fill(uint8_t *b, size_t len, unsigned seed);
int check_bytes(struct pair *p, const uint8_t *b, size_t len, unsigned seed, const char *what);
struct ibv_sge sge_of(struct side *s, size_t off, uint32_t len);
void exchange(struct pair *p, void *mine, void *theirs, size_t len);
uint64_t share_u64(struct pair *p, enum role from, uint64_t v);

/* verbs.c: posting and polling through the configured API */
extern unsigned wakeups, empty_wakeups; /* events mode, this process: events taken, and
					  * those after which the CQ held nothing */
int post(struct pair *p, enum role r, const struct op *op);
int post_recv(struct pair *p, enum role r, uint64_t wr_id, struct ibv_sge *sge, int n);
int wait_wc(struct pair *p, enum role r, struct wc *out);
int expect_wc(struct pair *p, enum role r, enum ibv_wc_status st, const char *what,
	      struct wc *out);
int expect_nothing(struct pair *p, enum role r, int ms);
int post_wait(struct pair *p, enum role r, const struct op *op, enum ibv_wc_status st,
	      const char *what, struct wc *out);

/* setup.c */
int make_pair(struct pair *p, const struct config *cfg, struct side *proto);
void free_pair(struct pair *p);
int open_side(struct side *s, const struct config *cfg);
void close_side(struct side *s);

/* Cases: each returns 0 when it passed. */
struct kase {
	const char *name;
	int (*run)(struct pair *p, const void *arg);
	const void *arg;
	unsigned types; /* bit (1 << IBV_QPT_*) for each transport it applies to */
	unsigned needs; /* NEED_* */
};
extern const struct kase data_cases[];
extern const int n_data_cases;
extern const struct kase bad_cases[];
extern const int n_bad_cases;
extern const struct kase more_cases[];
extern const int n_more_cases;

#define T_RC (1u << IBV_QPT_RC)
#define T_UC (1u << IBV_QPT_UC)
#define T_UD (1u << IBV_QPT_UD)

#endif
