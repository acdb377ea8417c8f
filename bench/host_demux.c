/* What each way of sharing one host address among processes costs (issue: many processes
 * per host). RoCEv2 peers always send to UDP 4791, so arriving packets must reach the
 * process that owns their destination QPN:
 *   host_demux pps MEMBERS SECONDS   datagrams/s (Mpps) of 1,100 bytes (a 1 KiB WRITE's
 *                                    packet) taken by one socket; MEMBERS 0: a plain socket
 *                                    (today's), else one of a SO_REUSEPORT group of MEMBERS
 *                                    sockets steered by a classic BPF program on the BTH's
 *                                    destination QPN (the in-kernel demultiplexer)
 *   host_demux wake ITERATIONS       p50 round trip (us) of two processes waking each other
 *                                    through eventfds, each asleep in read(): what a
 *                                    per-host engine process adds for every hand-off to an
 *                                    application that sleeps, twice per round trip
 *   host_demux spin ITERATIONS       the same with both spinning on shared memory: the
 *                                    hand-off's floor when a core spins for it
 *   host_demux vmcopy LENGTH SECONDS GB/s of process_vm_writev of LENGTH bytes into another
 *                                    process, then of memcpy of the same in one: placing
 *                                    data from a per-host engine into an application
 * Build: gcc -O2 -o host_demux bench/host_demux.c */
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <linux/filter.h>
#include <netinet/in.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/uio.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#ifndef SO_ATTACH_REUSEPORT_CBPF
#define SO_ATTACH_REUSEPORT_CBPF 51
#endif
#define PORT 47911
#define LEN 1100
#define BATCH 32

static double now(void)
{
	struct timespec t;
	clock_gettime(CLOCK_MONOTONIC, &t);
	return t.tv_sec + t.tv_nsec * 1e-9;
}

static int cmp(const void *a, const void *b)
{
	double x = *(const double *)a, y = *(const double *)b;
	return x < y ? -1 : x > y;
}

static void die(const char *what)
{
	perror(what);
	exit(1);
}

/* The steering program: slot = QPN >> 16 (the BTH's destination QPN, bytes 5-7 of the
 * UDP payload), then a compare per member mapping its slot to its index in the group, as
 * a table rebuilt when members join or leave would. */
static void attach_steering(int fd, int members)
{
	struct sock_filter f[3 + 2 * 64 + 1];
	int n = 0;
	f[n++] = (struct sock_filter)BPF_STMT(BPF_LD | BPF_W | BPF_ABS, 4);
	f[n++] = (struct sock_filter)BPF_STMT(BPF_ALU | BPF_RSH | BPF_K, 16);
	/* What is left is resv8 and the QPN's top byte: keep the QPN's. */
	f[n++] = (struct sock_filter)BPF_STMT(BPF_ALU | BPF_AND | BPF_K, 0xff);
	for (int m = 0; m < members; m++) {
		f[n++] = (struct sock_filter)BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, (unsigned)m, 0, 1);
		f[n++] = (struct sock_filter)BPF_STMT(BPF_RET | BPF_K, (unsigned)(members - 1 - m));
	}
	f[n++] = (struct sock_filter)BPF_STMT(BPF_RET | BPF_K, 0);
	struct sock_fprog prog = { .len = (unsigned short)n, .filter = f };
	if (setsockopt(fd, SOL_SOCKET, SO_ATTACH_REUSEPORT_CBPF, &prog, sizeof(prog)))
		die("SO_ATTACH_REUSEPORT_CBPF");
}

static int bound(int reuse)
{
	int fd = socket(AF_INET, SOCK_DGRAM, 0), one = 1, big = 32 << 20;
	if (fd < 0)
		die("socket");
	if (reuse && setsockopt(fd, SOL_SOCKET, SO_REUSEPORT, &one, sizeof(one)))
		die("SO_REUSEPORT");
	setsockopt(fd, SOL_SOCKET, SO_RCVBUF, &big, sizeof(big));
	struct sockaddr_in a = { .sin_family = AF_INET, .sin_port = htons(PORT) };
	a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
	if (bind(fd, (struct sockaddr *)&a, sizeof(a)))
		die("bind");
	return fd;
}

static int pps(int members, double secs)
{
	int group[64], take;
	if (members < 0 || members > 64)
		return 2;
	if (members == 0) {
		take = bound(0);
	} else {
		for (int m = 0; m < members; m++)
			group[m] = bound(1);
		attach_steering(group[0], members);
		/* QPN top byte 0 maps to index members - 1: the last socket bound. */
		take = group[members - 1];
	}
	pid_t child = fork();
	if (child == 0) {
		int s = socket(AF_INET, SOCK_DGRAM, 0);
		struct sockaddr_in a = { .sin_family = AF_INET, .sin_port = htons(PORT) };
		a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
		static uint8_t buf[LEN];
		buf[0] = 0x0a; /* RDMA WRITE MIDDLE */
		buf[5] = 0x00; /* QPN 0x00xxxx */
		buf[6] = 0x12;
		buf[7] = 0x34;
		struct iovec iov = { buf, LEN };
		struct mmsghdr msgs[BATCH];
		for (int i = 0; i < BATCH; i++)
			msgs[i] = (struct mmsghdr){ .msg_hdr = { .msg_name = &a, .msg_namelen = sizeof(a),
								  .msg_iov = &iov, .msg_iovlen = 1 } };
		for (;;)
			sendmmsg(s, msgs, BATCH, 0);
	}
	static uint8_t rbuf[BATCH][LEN + 64];
	struct iovec riov[BATCH];
	struct mmsghdr rmsgs[BATCH];
	for (int i = 0; i < BATCH; i++) {
		riov[i] = (struct iovec){ rbuf[i], sizeof(rbuf[i]) };
		rmsgs[i] = (struct mmsghdr){ .msg_hdr = { .msg_iov = &riov[i], .msg_iovlen = 1 } };
	}
	/* Warm up, then count. */
	double start = now() + 0.2, end = start + secs;
	long got = 0;
	while (now() < start)
		recvmmsg(take, rmsgs, BATCH, 0, NULL);
	while (now() < end) {
		int n = recvmmsg(take, rmsgs, BATCH, 0, NULL);
		if (n > 0)
			got += n;
	}
	kill(child, SIGKILL);
	waitpid(child, NULL, 0);
	printf("%.3f\n", got / secs / 1e6);
	return 0;
}

static int wake(long iters, int spin)
{
	int to_child = eventfd(0, 0), to_parent = eventfd(0, 0);
	volatile uint64_t *shm = mmap(NULL, 4096, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS,
				      -1, 0);
	if (to_child < 0 || to_parent < 0 || shm == MAP_FAILED)
		die("eventfd/mmap");
	pid_t child = fork();
	uint64_t v = 1;
	if (child == 0) {
		for (long i = 0; i < iters; i++) {
			if (spin) {
				while (shm[0] != (uint64_t)i + 1)
					;
				shm[8] = (uint64_t)i + 1;
			} else {
				if (read(to_child, &v, 8) != 8 || write(to_parent, &v, 8) != 8)
					_exit(1);
			}
		}
		_exit(0);
	}
	double *t = malloc(sizeof(double) * (size_t)iters);
	for (long i = 0; i < iters; i++) {
		double s = now();
		if (spin) {
			shm[0] = (uint64_t)i + 1;
			while (shm[8] != (uint64_t)i + 1)
				;
		} else {
			if (write(to_child, &v, 8) != 8 || read(to_parent, &v, 8) != 8)
				die("eventfd");
		}
		t[i] = (now() - s) * 1e6;
	}
	waitpid(child, NULL, 0);
	qsort(t, (size_t)iters, sizeof(double), cmp);
	printf("%.2f\n", t[iters / 2]);
	return 0;
}

static int vmcopy(size_t len, double secs)
{
	uint8_t *dst = malloc(len), *src = malloc(len);
	memset(dst, 0, len);
	memset(src, 7, len);
	int p[2];
	if (pipe(p))
		die("pipe");
	pid_t child = fork();
	if (child == 0) {
		char c;
		/* Holds `dst` (the same address, copied at fork) until told to go. */
		if (read(p[0], &c, 1) < 0)
			_exit(1);
		_exit(0);
	}
	struct iovec l = { src, len }, r = { dst, len };
	long n = 0;
	double end = now() + secs, s = now();
	while (now() < end) {
		if (process_vm_writev(child, &l, 1, &r, 1, 0) != (ssize_t)len)
			die("process_vm_writev");
		n++;
	}
	double vm = (double)n * (double)len / (now() - s) / 1e9;
	if (write(p[1], "x", 1) < 0)
		die("pipe");
	waitpid(child, NULL, 0);
	n = 0;
	end = now() + secs;
	s = now();
	while (now() < end) {
		memcpy(dst, src, len);
		__asm__ volatile("" ::"r"(dst) : "memory");
		n++;
	}
	double mc = (double)n * (double)len / (now() - s) / 1e9;
	printf("process_vm_writev %.2f GB/s, memcpy %.2f GB/s\n", vm, mc);
	return 0;
}

int main(int argc, char **argv)
{
	if (argc == 4 && !strcmp(argv[1], "pps"))
		return pps(atoi(argv[2]), atof(argv[3]));
	if (argc == 3 && !strcmp(argv[1], "wake"))
		return wake(atol(argv[2]), 0);
	if (argc == 3 && !strcmp(argv[1], "spin"))
		return wake(atol(argv[2]), 1);
	if (argc == 4 && !strcmp(argv[1], "vmcopy"))
		return vmcopy((size_t)atol(argv[2]), atof(argv[3]));
	fprintf(stderr, "usage: host_demux pps MEMBERS SECONDS | wake N | spin N | vmcopy LEN SECONDS\n");
	return 2;
}
