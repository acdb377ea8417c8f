/* What raw UDP on loopback can do, the ceilings oxrdma's data path sits under:
 *   udp_ceiling gso SEGMENT PER SECONDS   bytes/s with PER segments of SEGMENT bytes per
 *                                         send (UDP_SEGMENT) and a GRO receiver; PER 1 is
 *                                         one datagram per system call
 *   udp_ceiling pps LENGTH BATCH SECONDS  datagrams/s of LENGTH bytes, BATCH per sendmmsg
 *                                         and per recvmmsg
 * A forked child sends to 127.0.0.1 for SECONDS; the parent counts what arrives and prints
 * one number: MB/s (10^6 bytes) for gso, Mpps for pps.
 */
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <netinet/in.h>
#include <netinet/udp.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#ifndef UDP_SEGMENT
#define UDP_SEGMENT 103
#endif
#ifndef UDP_GRO
#define UDP_GRO 104
#endif
#define MAX_BATCH 64

static double now(void)
{
	struct timespec t;
	clock_gettime(CLOCK_MONOTONIC, &t);
	return t.tv_sec + t.tv_nsec / 1e9;
}

static void sender(struct sockaddr_in *to, int gso, int len, int per, double secs)
{
	int s = socket(AF_INET, SOCK_DGRAM, 0), big = 16 << 20;
	setsockopt(s, SOL_SOCKET, SO_SNDBUFFORCE, &big, sizeof big);
	int df = IP_PMTUDISC_DO;
	setsockopt(s, IPPROTO_IP, IP_MTU_DISCOVER, &df, sizeof df);
	char *buf = calloc((size_t)len, per);
	struct iovec iov[MAX_BATCH];
	struct mmsghdr m[MAX_BATCH];
	char control[CMSG_SPACE(sizeof(uint16_t))] = { 0 };
	memset(m, 0, sizeof m);
	int n = gso ? 1 : per;
	for (int i = 0; i < n; i++) {
		iov[i] = (struct iovec){ buf + (size_t)i * len, gso ? (size_t)len * per : (size_t)len };
		m[i].msg_hdr = (struct msghdr){ .msg_name = to, .msg_namelen = sizeof *to,
						.msg_iov = &iov[i], .msg_iovlen = 1 };
	}
	if (gso && per > 1) {
		m[0].msg_hdr.msg_control = control;
		m[0].msg_hdr.msg_controllen = sizeof control;
		struct cmsghdr *c = CMSG_FIRSTHDR(&m[0].msg_hdr);
		c->cmsg_level = SOL_UDP;
		c->cmsg_type = UDP_SEGMENT;
		c->cmsg_len = CMSG_LEN(sizeof(uint16_t));
		*(uint16_t *)CMSG_DATA(c) = (uint16_t)len;
	}
	double t0 = now();
	while (now() - t0 < secs)
		sendmmsg(s, m, n, 0); /* a full receive buffer drops: the receiver counts */
	_exit(0);
}

int main(int argc, char **argv)
{
	if (argc != 5 || (strcmp(argv[1], "gso") && strcmp(argv[1], "pps"))) {
		fprintf(stderr, "usage: %s gso|pps SIZE COUNT SECONDS\n", argv[0]);
		return 2;
	}
	int gso = !strcmp(argv[1], "gso"), len = atoi(argv[2]), per = atoi(argv[3]);
	double secs = atof(argv[4]);
	if (len < 1 || len > 65000 || per < 1 || per > MAX_BATCH || (gso && len * per > 65000)) {
		fprintf(stderr, "bad size or count\n");
		return 2;
	}
	struct sockaddr_in a = { .sin_family = AF_INET };
	inet_pton(AF_INET, "127.0.0.1", &a.sin_addr);
	int r = socket(AF_INET, SOCK_DGRAM, 0), one = 1, big = 64 << 20;
	setsockopt(r, SOL_SOCKET, SO_RCVBUFFORCE, &big, sizeof big);
	if (gso)
		setsockopt(r, IPPROTO_UDP, UDP_GRO, &one, sizeof one);
	socklen_t al = sizeof a;
	if (bind(r, (void *)&a, sizeof a) || getsockname(r, (void *)&a, &al)) {
		perror("bind");
		return 1;
	}
	pid_t child = fork();
	if (child == 0)
		sender(&a, gso, len, per, secs);
	struct timeval tv = { .tv_sec = 0, .tv_usec = 300000 };
	setsockopt(r, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
	enum { SLOT = 1 << 16 };
	char *rb = malloc((size_t)SLOT * MAX_BATCH);
	struct iovec iov[MAX_BATCH];
	struct mmsghdr m[MAX_BATCH];
	memset(m, 0, sizeof m);
	for (int i = 0; i < MAX_BATCH; i++) {
		iov[i] = (struct iovec){ rb + (size_t)i * SLOT, SLOT };
		m[i].msg_hdr = (struct msghdr){ .msg_iov = &iov[i], .msg_iovlen = 1 };
	}
	double bytes = 0, packets = 0, t0 = 0, t1 = 0;
	for (;;) {
		int k = recvmmsg(r, m, gso ? 1 : per, 0, NULL);
		if (k <= 0)
			break;
		if (!t0)
			t0 = now();
		t1 = now();
		for (int i = 0; i < k; i++) {
			bytes += m[i].msg_len;
			packets += gso ? (m[i].msg_len + len - 1) / len : 1;
		}
	}
	waitpid(child, NULL, 0);
	if (t1 <= t0) {
		fprintf(stderr, "nothing arrived\n");
		return 1;
	}
	printf("%.3f\n", gso ? bytes / (t1 - t0) / 1e6 : packets / (t1 - t0) / 1e6);
	return 0;
}
