/* Does a sender save CPU by not copying payload in user space? The sender's CPU time per
 * GB of payload for four ways of handing GSO runs of RoCE-sized packets to the kernel:
 *   staged   the packets already lie back to back in one buffer: one iovec per run (the
 *            floor: no payload copy of ours at all)
 *   copy     each payload is first copied from a "registered region" next to its headers,
 *            then one iovec per run (what oxrdma's driver does)
 *   gather   headers from one buffer, payloads straight from the region: two iovecs per
 *            packet, no copy of ours (a zero-copy gather)
 *   zerocopy staged, sent with MSG_ZEROCOPY (SO_ZEROCOPY); says whether the kernel reported
 *            that it copied anyway (SO_EE_CODE_ZEROCOPY_COPIED, as for local delivery)
 *
 *   send_copy SEGMENT SECONDS                 loopback: a forked child receives with GRO
 *   send_copy SEGMENT SECONDS ADDRESS PORT    to a receiver started elsewhere (another
 *                                             network namespace: a veth pair), with
 *   send_copy recv ADDRESS PORT               that receiver
 * SEGMENT is one packet's UDP payload (4128: an RDMA WRITE ONLY of 4 KiB with its BTH,
 * RETH and ICRC, as oxrdma sends a WRITE's packets; 1060: of 1 KiB, an Ethernet MTU's). Prints, per way, the payload rate and the
 * sender's CPU milliseconds per GB (on loopback the kernel delivers in the sender's system
 * call, so that counts the receive path too).
 */
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <linux/errqueue.h>
#include <netinet/in.h>
#include <netinet/udp.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "udp_bench.h"

#ifndef SO_ZEROCOPY
#define SO_ZEROCOPY 60
#endif
#ifndef MSG_ZEROCOPY
#define MSG_ZEROCOPY 0x4000000
#endif

enum way { STAGED, COPY, GATHER, ZEROCOPY, WAYS };
static const char *names[WAYS] = { "staged", "copy", "gather", "zerocopy" };
/* Bytes of headers in front of each payload (BTH and RETH; the ICRC rides with them). */
enum { HDR = 32, MAX_RUN = 64 };

static int receiver(const char *ip, int port)
{
	int r = socket(AF_INET, SOCK_DGRAM, 0), one = 1, big = 64 << 20;
	struct sockaddr_in a = { .sin_family = AF_INET, .sin_port = htons(port) };
	inet_pton(AF_INET, ip, &a.sin_addr);
	setsockopt(r, SOL_SOCKET, SO_RCVBUFFORCE, &big, sizeof big);
	setsockopt(r, IPPROTO_UDP, UDP_GRO, &one, sizeof one);
	if (bind(r, (void *)&a, sizeof a)) {
		perror("bind");
		exit(1);
	}
	return r;
}

static void drain(int r)
{
	static char b[1 << 16];
	for (;;)
		recv(r, b, sizeof b, 0);
}

/* Sends runs the `way` way to the connected socket `s` for `secs`; prints the result. */
static void run(enum way way, int s, int seg, double secs)
{
	int pay = seg - HDR, per = 65000 / seg;
	if (per > MAX_RUN)
		per = MAX_RUN;
	char *region = aligned_alloc(4096, 1 << 20), *stage = aligned_alloc(4096, 1 << 20);
	memset(region, 7, 1 << 20);
	memset(stage, 9, 1 << 20);
	struct iovec iov[2 * MAX_RUN];
	size_t n = 0;
	if (way == GATHER)
		for (int i = 0; i < per; i++) {
			iov[n++] = (struct iovec){ stage + i * HDR, HDR };
			iov[n++] = (struct iovec){ region + (size_t)i * pay, (size_t)pay };
		}
	else
		iov[n++] = (struct iovec){ stage, (size_t)seg * per };
	char control[CMSG_SPACE(sizeof(uint16_t))] = { 0 };
	struct msghdr h = { .msg_iov = iov, .msg_iovlen = n, .msg_control = control,
			    .msg_controllen = sizeof control };
	struct cmsghdr *c = CMSG_FIRSTHDR(&h);
	c->cmsg_level = SOL_UDP;
	c->cmsg_type = UDP_SEGMENT;
	c->cmsg_len = CMSG_LEN(sizeof(uint16_t));
	*(uint16_t *)CMSG_DATA(c) = (uint16_t)seg;
	long sent = 0, copied = 0;
	double t0 = seconds(CLOCK_MONOTONIC), c0 = seconds(CLOCK_PROCESS_CPUTIME_ID);
	while (seconds(CLOCK_MONOTONIC) - t0 < secs) {
		if (way == COPY)
			for (int i = 0; i < per; i++)
				memcpy(stage + (size_t)i * seg + HDR, region + (size_t)i * pay, pay);
		if (sendmsg(s, &h, way == ZEROCOPY ? MSG_ZEROCOPY : 0) > 0)
			sent++;
		if (way != ZEROCOPY)
			continue;
		/* Completion notices (the pages may be reused): did the kernel copy anyway? */
		char cb[256];
		struct msghdr e = { .msg_control = cb, .msg_controllen = sizeof cb };
		while (recvmsg(s, &e, MSG_ERRQUEUE | MSG_DONTWAIT) >= 0) {
			struct cmsghdr *m = CMSG_FIRSTHDR(&e);
			if (m && ((struct sock_extended_err *)CMSG_DATA(m))->ee_code &
					 SO_EE_CODE_ZEROCOPY_COPIED)
				copied++;
			e.msg_controllen = sizeof cb;
		}
	}
	double t = seconds(CLOCK_MONOTONIC) - t0, cpu = seconds(CLOCK_PROCESS_CPUTIME_ID) - c0;
	double gb = sent * (double)per * pay / 1e9;
	printf("%-9s %2d x %4d B: %6.2f GB/s  sender %6.1f ms CPU per GB%s\n", names[way], per,
	       seg, gb / t, cpu * 1e3 / gb, copied ? "  (kernel: copied)" : "");
	free(region);
	free(stage);
}

int main(int argc, char **argv)
{
	if (argc == 4 && !strcmp(argv[1], "recv")) {
		drain(receiver(argv[2], atoi(argv[3])));
		return 0;
	}
	if (argc != 3 && argc != 5) {
		fprintf(stderr, "usage: %s SEGMENT SECONDS [ADDRESS PORT] | recv ADDRESS PORT\n",
			argv[0]);
		return 2;
	}
	int seg = atoi(argv[1]);
	double secs = atof(argv[2]);
	if (seg <= HDR || seg > 65000 || secs <= 0) {
		fprintf(stderr, "bad segment size or duration\n");
		return 2;
	}
	struct sockaddr_in to = { .sin_family = AF_INET };
	pid_t child = 0;
	if (argc == 5) {
		inet_pton(AF_INET, argv[3], &to.sin_addr);
		to.sin_port = htons(atoi(argv[4]));
	} else {
		int r = receiver("127.0.0.1", 0);
		socklen_t len = sizeof to;
		getsockname(r, (void *)&to, &len);
		child = fork();
		if (child == 0)
			drain(r);
		close(r);
	}
	int s = socket(AF_INET, SOCK_DGRAM, 0), one = 1, big = 64 << 20, df = IP_PMTUDISC_DO;
	setsockopt(s, SOL_SOCKET, SO_SNDBUFFORCE, &big, sizeof big);
	setsockopt(s, IPPROTO_IP, IP_MTU_DISCOVER, &df, sizeof df);
	if (setsockopt(s, SOL_SOCKET, SO_ZEROCOPY, &one, sizeof one))
		perror("SO_ZEROCOPY");
	if (connect(s, (void *)&to, sizeof to)) {
		perror("connect");
		return 1;
	}
	for (int w = 0; w < WAYS; w++)
		run((enum way)w, s, seg, secs);
	if (child > 0)
		kill(child, SIGKILL);
	return 0;
}
