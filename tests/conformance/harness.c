/* What every case leans on: failing with a reason, knowing which end runs here, meeting the
 * other process between steps, and the byte patterns data is checked against. */
#include "conf.h"
#include <poll.h>
#include <stdarg.h>
#include <string.h>
#include <unistd.h>

int fail(struct pair *p, const char *fmt, ...)
{
	if (!p->failed) {
		va_list ap;
		va_start(ap, fmt);
		vsnprintf(p->why, sizeof(p->why), fmt, ap);
		va_end(ap);
	}
	p->failed = 1;
	return -1;
}

int here(const struct pair *p, enum role r)
{
	return p->local[r];
}

/* Reads or writes all of `len` bytes within 60 s; -1 if the other process is gone. */
static int io_all(int fd, void *buf, size_t len, int out)
{
	uint8_t *b = buf;
	while (len) {
		struct pollfd pf = { .fd = fd, .events = out ? POLLOUT : POLLIN };
		if (poll(&pf, 1, 60000) != 1)
			return -1;
		ssize_t n = out ? write(fd, b, len) : read(fd, b, len);
		if (n <= 0)
			return -1;
		b += n;
		len -= (size_t)n;
	}
	return 0;
}

void exchange(struct pair *p, void *mine, void *theirs, size_t len)
{
	if (io_all(p->sock, mine, len, 1) || io_all(p->sock, theirs, len, 0)) {
		fprintf(stderr, "conformance: the other process is gone\n");
		_exit(2);
	}
}

/* Between two steps of a case: both ends have done theirs. With two processes each tells
 * the other whether it failed, so both leave a failed case at the same step. */
int sync_ends(struct pair *p)
{
	if (p->cfg->topo == TWO_PROC) {
		uint8_t mine = (uint8_t)p->failed, theirs = 0;
		exchange(p, &mine, &theirs, 1);
		if (theirs && !p->failed)
			fail(p, "(the other process failed)");
	}
	return p->failed ? -1 : 0;
}

uint64_t share_u64(struct pair *p, enum role from, uint64_t v)
{
	if (p->cfg->topo != TWO_PROC)
		return v;
	uint64_t theirs = 0;
	exchange(p, &v, &theirs, sizeof(v));
	return here(p, from) ? v : theirs;
}

void fill(uint8_t *b, size_t len, unsigned seed)
{
	for (size_t i = 0; i < len; i++)
		b[i] = (uint8_t)(i * 31 + seed * 7 + 1);
}

int check_bytes(struct pair *p, const uint8_t *b, size_t len, unsigned seed, const char *what)
{
	for (size_t i = 0; i < len; i++)
		if (b[i] != (uint8_t)(i * 31 + seed * 7 + 1))
			return fail(p, "%s: byte %zu of %zu is %#x, not %#x", what, i, len, b[i],
				    (uint8_t)(i * 31 + seed * 7 + 1));
	return 0;
}

struct ibv_sge sge_of(struct side *s, size_t off, uint32_t len)
{
	struct ibv_sge g = { (uintptr_t)(s->buf + off), len, s->mr->lkey };
	return g;
}
