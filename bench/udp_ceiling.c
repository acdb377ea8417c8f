/* What raw UDP on loopback can do, the ceilings oxrdma's data path sits under:
 *   udp_ceiling gso SEGMENT PER SECONDS   bytes/s with PER segments of SEGMENT bytes per
 *                                         send (UDP_SEGMENT) and a GRO receiver; PER 1 is
 *                                         one datagram per system call
 *   udp_ceiling pps LENGTH BATCH SECONDS  datagrams/s of LENGTH bytes, BATCH per sendmmsg
 *                                         and per recvmmsg
 * A forked child sends to 127.0.0.1 for SECONDS; the parent counts what arrives and prints
 * one number: MB/s (10^6 bytes) for gso, Mpps for pps.
 *   udp_ceiling pingpong ITERATIONS       p50 half round trip in us of a two-thread ping-pong
 *                                         of 24-byte datagrams (an 8 B SEND) that both spin
 *                                         on the system calls oxrdma's UDP driver makes:
 *                                         recvmsg with room for the GRO control message, and
 *                                         sendmmsg to an address; the kernel's floor under
 *                                         oxrdma's 8 B latency (sockperf uses recvfrom/sendto)
 *   udp_ceiling pingpong ITERATIONS pair  the same, each answer a 40-byte WRITE and a
 *                                         20-byte ACK in one GSO message from a socket
 *                                         connected to the peer, as oxrdma answers in a
 *                                         WRITE ping-pong (its floor there)
 *   ... SECONDS ADDRESS NETNS            the parent receives on ADDRESS (an IPv4 address of
 *                                         the namespace it runs in) and the child sends from
 *                                         network namespace NETNS (`ip netns` name; root): a
 *                                         path between namespaces, such as a veth pair
 */
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <netinet/in.h>
#include <netinet/udp.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <fcntl.h>
#include <sched.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "udp_bench.h"

#define MAX_BATCH 64

static double now(void)
{
	return seconds(CLOCK_MONOTONIC);
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

static int bound(const char *ip, struct sockaddr_in *a)
{
	int s = socket(AF_INET, SOCK_DGRAM, 0), one = 1, df = IP_PMTUDISC_DO;
	*a = (struct sockaddr_in){ .sin_family = AF_INET };
	inet_pton(AF_INET, ip, &a->sin_addr);
	socklen_t al = sizeof *a;
	setsockopt(s, IPPROTO_UDP, UDP_GRO, &one, sizeof one);
	setsockopt(s, IPPROTO_IP, IP_MTU_DISCOVER, &df, sizeof df);
	if (bind(s, (void *)a, sizeof *a) || getsockname(s, (void *)a, &al)) {
		perror("bind");
		exit(1);
	}
	return s;
}

/* With `pair`: each answer is an 8 B WRITE (40 bytes) and the held ACK of the peer's
 * (20 bytes) in one GSO message, from a socket connected to the peer, as oxrdma answers
 * in a WRITE ping-pong. */
static int ping_pair;

/* Sends the pair from `s`, connected to the peer. */
static void send_pair(int s)
{
	char out[60] = { 0 }, control[CMSG_SPACE(sizeof(uint16_t))] = { 0 };
	struct iovec o = { out, sizeof out };
	struct mmsghdr m = { .msg_hdr = { .msg_iov = &o, .msg_iovlen = 1, .msg_control = control,
					  .msg_controllen = sizeof control } };
	struct cmsghdr *c = CMSG_FIRSTHDR(&m.msg_hdr);
	c->cmsg_level = SOL_UDP;
	c->cmsg_type = UDP_SEGMENT;
	c->cmsg_len = CMSG_LEN(sizeof(uint16_t));
	*(uint16_t *)CMSG_DATA(c) = 40;
	sendmmsg(s, &m, 1, MSG_DONTWAIT);
}

/* One spinning receive on `s` and one send from `out_s`, as oxrdma makes them. */
static void bounce(int s, int out_s, struct sockaddr_in *to)
{
	char buf[4200], name[128], control[64], out[24] = { 0 };
	struct iovec iov = { buf, sizeof buf };
	struct msghdr h;
	do
		h = (struct msghdr){ .msg_name = name, .msg_namelen = sizeof name, .msg_iov = &iov,
				     .msg_iovlen = 1, .msg_control = control,
				     .msg_controllen = sizeof control };
	while (recvmsg(s, &h, MSG_DONTWAIT) < 0);
	if (ping_pair) {
		send_pair(out_s);
		return;
	}
	struct iovec o = { out, sizeof out };
	struct mmsghdr m = { .msg_hdr = { .msg_name = to, .msg_namelen = sizeof *to, .msg_iov = &o,
					  .msg_iovlen = 1 } };
	sendmmsg(out_s, &m, 1, MSG_DONTWAIT);
}

static struct sockaddr_in ping_a, ping_b;
static int ping_n;

/* A socket on 127.0.0.1 connected to `peer`. */
static int connected_to(struct sockaddr_in *peer)
{
	struct sockaddr_in me;
	int s = bound("127.0.0.1", &me);
	if (connect(s, (void *)peer, sizeof *peer)) {
		perror("connect");
		exit(1);
	}
	return s;
}

static void *ponger(void *x)
{
	int *s = x;
	for (int i = 0; i <= ping_n; i++)
		bounce(s[0], s[1], &ping_a);
	return NULL;
}

static int cmp(const void *x, const void *y)
{
	double d = *(const double *)x - *(const double *)y;
	return (d > 0) - (d < 0);
}

static int pingpong(int n, int pair)
{
	int a = bound("127.0.0.1", &ping_a), b[2];
	b[0] = bound("127.0.0.1", &ping_b);
	int a_out = pair ? connected_to(&ping_b) : a;
	b[1] = pair ? connected_to(&ping_a) : b[0];
	ping_n = n;
	ping_pair = pair;
	pthread_t t;
	pthread_create(&t, NULL, ponger, b);
	double *lat = calloc((size_t)n, sizeof *lat);
	char out[24] = { 0 };
	sendto(a, out, sizeof out, 0, (void *)&ping_b, sizeof ping_b);
	for (int i = 0; i < n; i++) {
		double t0 = now();
		bounce(a, a_out, &ping_b);
		lat[i] = now() - t0;
	}
	bounce(a, a_out, &ping_b); /* the ponger's last */
	pthread_join(t, NULL);
	qsort(lat, (size_t)n, sizeof *lat, cmp);
	printf("%.3f\n", lat[n / 2] / 2 * 1e6);
	return 0;
}

int main(int argc, char **argv)
{
	if ((argc == 3 || (argc == 4 && !strcmp(argv[3], "pair"))) &&
	    !strcmp(argv[1], "pingpong") && atoi(argv[2]) > 0)
		return pingpong(atoi(argv[2]), argc == 4);
	if ((argc != 5 && argc != 7) || (strcmp(argv[1], "gso") && strcmp(argv[1], "pps"))) {
		fprintf(stderr, "usage: %s gso|pps SIZE COUNT SECONDS [ADDRESS NETNS]\n"
				"       %s pingpong ITERATIONS [pair]\n", argv[0], argv[0]);
		return 2;
	}
	int gso = !strcmp(argv[1], "gso"), len = atoi(argv[2]), per = atoi(argv[3]);
	double secs = atof(argv[4]);
	if (len < 1 || len > 65000 || per < 1 || per > MAX_BATCH || (gso && len * per > 65000)) {
		fprintf(stderr, "bad size or count\n");
		return 2;
	}
	struct sockaddr_in a = { .sin_family = AF_INET };
	if (inet_pton(AF_INET, argc == 7 ? argv[5] : "127.0.0.1", &a.sin_addr) != 1) {
		fprintf(stderr, "bad address\n");
		return 2;
	}
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
	if (child == 0) {
		if (argc == 7) {
			char path[256];
			snprintf(path, sizeof path, "/var/run/netns/%s", argv[6]);
			int fd = open(path, O_RDONLY);
			if (fd < 0 || setns(fd, CLONE_NEWNET)) {
				perror(path);
				_exit(1);
			}
		}
		sender(&a, gso, len, per, secs);
	}
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
