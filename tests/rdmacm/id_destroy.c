/* Calls on an id the program has already destroyed, as Debian's perftest (4.5-0.17) makes
 * them: when the server rejects its connection, its retry loop destroys the ids and then
 * calls rdma_resolve_addr on the same pointers again. librdmacm reads the freed structs
 * and fails the call; this library crashed there (perftest's client died of SIGSEGV in
 * rdma_resolve_addr). Each call must fail with EINVAL and read no freed memory (run under
 * AddressSanitizer too, tests/asan/run.sh), a second rdma_destroy_id too, and a new id
 * must work as before. One line per case; exit 1 if any failed. */
#include <arpa/inet.h>
#include <errno.h>
#include <rdma/rdma_cma.h>
#include <stdio.h>
#include <string.h>

static int failed;

static void expect_einval(const char *call, int rc)
{
	int ok = rc == -1 && errno == EINVAL;
	printf("%s %s on a destroyed id: rc %d errno %d (%s)\n", ok ? "ok" : "FAIL", call, rc,
	       errno, strerror(errno));
	failed |= !ok;
}

/* rdma_resolve_addr on `id`, and its ADDR_RESOLVED taken from `ch`. */
static int resolve(struct rdma_event_channel *ch, struct rdma_cm_id *id, struct sockaddr_in *dst)
{
	struct rdma_cm_event *ev;
	int resolved;

	if (rdma_resolve_addr(id, NULL, (struct sockaddr *)dst, 2000))
		return 0;
	if (rdma_get_cm_event(ch, &ev))
		return 0;
	resolved = ev->event == RDMA_CM_EVENT_ADDR_RESOLVED && ev->id == id;
	rdma_ack_cm_event(ev);
	return resolved;
}

int main(void)
{
	struct rdma_event_channel *ch = rdma_create_event_channel();
	struct sockaddr_in dst = { .sin_family = AF_INET, .sin_port = htons(7471) };
	struct rdma_cm_id *id, *again;

	inet_pton(AF_INET, "127.0.0.1", &dst.sin_addr);
	if (!ch || rdma_create_id(ch, &id, NULL, RDMA_PS_TCP)) {
		perror("FAIL: rdma_create_event_channel or rdma_create_id");
		return 1;
	}
	if (!resolve(ch, id, &dst)) {
		perror("FAIL: the first id's address did not resolve");
		return 1;
	}
	if (rdma_destroy_id(id)) {
		perror("FAIL: rdma_destroy_id");
		return 1;
	}
	errno = 0;
	expect_einval("rdma_resolve_addr", rdma_resolve_addr(id, NULL, (struct sockaddr *)&dst, 2000));
	errno = 0;
	expect_einval("rdma_resolve_route", rdma_resolve_route(id, 2000));
	errno = 0;
	expect_einval("rdma_connect", rdma_connect(id, NULL));
	errno = 0;
	expect_einval("rdma_destroy_id", rdma_destroy_id(id));

	if (rdma_create_id(ch, &again, NULL, RDMA_PS_TCP) || !resolve(ch, again, &dst)) {
		perror("FAIL: a new id after the misuse");
		failed = 1;
	} else {
		printf("ok a new id resolves as before\n");
		rdma_destroy_id(again);
	}
	rdma_destroy_event_channel(ch);
	return failed;
}
