/* fork() and verbs, as rdma-core promises them on rxe: a program that calls ibv_fork_init
 * keeps working in the parent while a child shares its pages copy-on-write, and after the
 * child exits; a child can exec, and no descriptor of the library (socket, eventfd)
 * survives into the new program. Two contexts of one process, an RC pair, RDMA WRITEs
 * checked byte for byte. Prints "PASS <case>" per case; exits 1 at the first failure.
 */
#include "common.h"
#include <errno.h>
#include <sys/wait.h>
#include <unistd.h>

#define LEN 65536

/* Set in a child that leaves by exit(): it still holds its parent's objects, which
 * LeakSanitizer (under tests/asan) would report as leaks; its hook asks it not to. */
static int in_child;
#ifdef __SANITIZE_ADDRESS__
int __lsan_is_turned_off(void)
{
	return in_child;
}
#endif

struct side {
	struct ibv_context *ctx;
	struct ibv_pd *pd;
	struct ibv_cq *cq;
	struct ibv_qp *qp;
	struct ibv_mr *mr;
	char *buf;
	union ibv_gid gid;
};

static void open_side(struct ibv_device *dev, struct side *s)
{
	s->ctx = ibv_open_device(dev);
	CHECK(s->ctx, "ibv_open_device");
	s->pd = ibv_alloc_pd(s->ctx);
	s->cq = ibv_create_cq(s->ctx, 16, NULL, NULL, 0);
	CHECK(s->pd && s->cq, "PD and CQ");
	CHECK(posix_memalign((void **)&s->buf, 4096, LEN) == 0, "posix_memalign");
	memset(s->buf, 0, LEN);
	s->mr = ibv_reg_mr(s->pd, s->buf, LEN, IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE);
	CHECK(s->mr, "ibv_reg_mr");
	struct ibv_qp_init_attr ia = { .send_cq = s->cq, .recv_cq = s->cq,
				       .cap = { .max_send_wr = 8, .max_recv_wr = 8,
						.max_send_sge = 1, .max_recv_sge = 1 },
				       .qp_type = IBV_QPT_RC };
	s->qp = ibv_create_qp(s->pd, &ia);
	CHECK(s->qp, "ibv_create_qp");
	CHECK(ibv_query_gid(s->ctx, 1, 0, &s->gid) == 0, "ibv_query_gid");
}

/* A writes LEN bytes of pattern `seed` into B's buffer; B's bytes are checked. */
static void write_and_check(struct side *a, struct side *b, int seed)
{
	for (int i = 0; i < LEN; i++)
		a->buf[i] = (char)(i * 31 + seed);
	struct ibv_sge sge = { (uintptr_t)a->buf, LEN, a->mr->lkey };
	struct ibv_send_wr w = { .wr_id = seed, .sg_list = &sge, .num_sge = 1,
				 .opcode = IBV_WR_RDMA_WRITE, .send_flags = IBV_SEND_SIGNALED,
				 .wr.rdma = { (uintptr_t)b->buf, b->mr->rkey } },
			   *bad;
	CHECK(ibv_post_send(a->qp, &w, &bad) == 0, "ibv_post_send");
	struct ibv_wc wc;
	double t0 = now();
	int n;
	while ((n = ibv_poll_cq(a->cq, 1, &wc)) == 0)
		CHECK(now() - t0 < 5, "no completion for WRITE %d", seed);
	CHECK(n == 1 && wc.status == IBV_WC_SUCCESS && wc.wr_id == (uint64_t)seed,
	      "WRITE %d: status %d", seed, wc.status);
	CHECK(memcmp(a->buf, b->buf, LEN) == 0, "WRITE %d: the bytes differ", seed);
}

/* Forks a child that waits `delay_ms` and then execs `ls /proc/self/fd` (the descriptors
 * the new program holds); returns the child's pid, its output on `*out_fd`. */
static pid_t spawn_listing(int delay_ms, int *out_fd)
{
	int p[2];
	CHECK(pipe(p) == 0, "pipe");
	fflush(stdout);
	pid_t pid = fork();
	CHECK(pid >= 0, "fork: %s", strerror(errno));
	if (pid == 0) {
		usleep(delay_ms * 1000);
		dup2(p[1], 1);
		close(p[0]);
		close(p[1]);
		execl("/bin/ls", "ls", "/proc/self/fd", (char *)NULL);
		_exit(127);
	}
	close(p[1]);
	*out_fd = p[0];
	return pid;
}

/* Reads the child's listing and reaps it; exits 1 unless it exited 0. */
static void finish_listing(pid_t pid, int fd, char *out, size_t cap)
{
	size_t n = 0;
	ssize_t r;
	while (n + 1 < cap && (r = read(fd, out + n, cap - 1 - n)) > 0)
		n += r;
	out[n] = 0;
	close(fd);
	int status;
	CHECK(waitpid(pid, &status, 0) == pid, "waitpid");
	CHECK(WIFEXITED(status) && WEXITSTATUS(status) == 0, "the child's exec failed: %d",
	      status);
}

int main(void)
{
	CHECK(ibv_fork_init() == 0, "ibv_fork_init");
	CHECK(ibv_is_fork_initialized() == IBV_FORK_UNNEEDED, "ibv_is_fork_initialized: %d",
	      ibv_is_fork_initialized());
	printf("PASS ibv_fork_init 0; ibv_is_fork_initialized IBV_FORK_UNNEEDED\n");

	/* What an exec'd program holds when the library holds nothing. */
	char before[256], after[256];
	int fd;
	pid_t pid = spawn_listing(0, &fd);
	finish_listing(pid, fd, before, sizeof(before));

	int n;
	struct ibv_device **list = ibv_get_device_list(&n);
	CHECK(list && n > 0, "no RDMA device");
	struct side a, b;
	open_side(list[0], &a);
	open_side(list[0], &b);
	connect_rc(a.qp, b.qp->qp_num, b.gid);
	connect_rc(b.qp, a.qp->qp_num, a.gid);
	write_and_check(&a, &b, 1);

	/* The child lives 300 ms sharing every page copy-on-write while the parent writes its
	 * buffers (breaking the sharing page by page) and moves data; then it execs. */
	pid = spawn_listing(300, &fd);
	double t0 = now();
	int seed = 2;
	while (now() - t0 < 0.3)
		write_and_check(&a, &b, seed++);
	CHECK(seed > 3, "only %d WRITEs while the child lived", seed - 2);
	finish_listing(pid, fd, after, sizeof(after));
	printf("PASS %d WRITEs in the parent while a child shares its pages\n", seed - 2);
	CHECK(strcmp(before, after) == 0, "descriptors crossed exec:\nbefore: %s\nafter: %s",
	      before, after);
	printf("PASS the child execs; no descriptor of the library crosses exec\n");

	for (int i = 0; i < 2; i++) {
		fflush(stdout); /* or the child's exit() prints the parent's lines again */
		pid = fork();
		CHECK(pid >= 0, "fork");
		if (pid == 0) {
			/* exit() runs atexit handlers and flushes stdio; _exit() runs nothing. */
			in_child = 1;
			if (i == 0)
				exit(0);
			_exit(0);
		}
		int status;
		CHECK(waitpid(pid, &status, 0) == pid && WIFEXITED(status) &&
			      WEXITSTATUS(status) == 0,
		      "child %d", i);
	}
	for (int i = 0; i < 20; i++)
		write_and_check(&b, &a, 100 + i);
	printf("PASS the parent keeps working after children exit (exit and _exit)\n");

	for (struct side *s = &a; s; s = s == &a ? &b : NULL) {
		CHECK(ibv_destroy_qp(s->qp) == 0 && ibv_dereg_mr(s->mr) == 0 &&
			      ibv_destroy_cq(s->cq) == 0 && ibv_dealloc_pd(s->pd) == 0 &&
			      ibv_close_device(s->ctx) == 0,
		      "teardown");
		free(s->buf);
	}
	ibv_free_device_list(list);
	return 0;
}
