/* A thread blocked in rdma_get_cm_event while the program destroys the channel, as
 * rping's event thread is at the end of every run: the call stays blocked (librdmacm's
 * thread stays in read(2) on the descriptor it had) and touches nothing freed, and the
 * process exits cleanly with it still waiting. Then what rping's event thread also
 * does, once in a while, as its main thread exits: call rdma_get_cm_event on a channel
 * already destroyed; it gets EINVAL (librdmacm reads the freed struct's stale fd and gets
 * EBADF) and reads no freed memory (this crashed rping's server in CI once). Run under
 * AddressSanitizer too (tests/asan/run.sh), which sees any read of freed memory. */
#include <errno.h>
#include <pthread.h>
#include <rdma/rdma_cma.h>
#include <stdio.h>
#include <unistd.h>

static volatile int returned;

static void *waiter(void *ch)
{
	struct rdma_cm_event *ev;
	returned = rdma_get_cm_event(ch, &ev) == 0 ? 1 : 2;
	return NULL;
}

int main(void)
{
	struct rdma_event_channel *ch = rdma_create_event_channel();
	pthread_t t;

	if (!ch) {
		perror("FAIL: rdma_create_event_channel");
		return 1;
	}
	if (pthread_create(&t, NULL, waiter, ch)) {
		printf("FAIL: pthread_create\n");
		return 1;
	}
	usleep(100000);
	rdma_destroy_event_channel(ch);
	usleep(300000);
	if (returned) {
		printf("FAIL: rdma_get_cm_event returned (%s) after its channel was destroyed\n",
		       returned == 1 ? "an event" : "an error");
		return 1;
	}
	printf("ok: the waiter is still blocked\n");

	struct rdma_event_channel *gone = rdma_create_event_channel();
	struct rdma_cm_event *ev;

	if (!gone) {
		perror("FAIL: rdma_create_event_channel");
		return 1;
	}
	rdma_destroy_event_channel(gone);
	errno = 0;
	if (rdma_get_cm_event(gone, &ev) != -1 || errno != EINVAL) {
		printf("FAIL: rdma_get_cm_event on a destroyed channel: errno %d\n", errno);
		return 1;
	}
	rdma_destroy_event_channel(gone); /* twice: left alone */
	printf("ok: a destroyed channel gives EINVAL\n");
	return 0;
}
