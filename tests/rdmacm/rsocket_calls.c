/* librdmacm's rsocket calls, one process, checked against what rsockets and TCP sockets
 * answer: errors for bad descriptors and unsupported sockets, a non-blocking connect that
 * is refused (EINPROGRESS, then POLLERR and SO_ERROR), one that connects, names, options,
 * rpoll over an rsocket and a pipe together, rselect, MSG_PEEK, scatter/gather with
 * rsendmsg/rrecvmsg, and a half close; with RCVBUF, that new rsockets' SO_RCVBUF is that
 * (from a configuration file in $OXRDMA_RSOCKET_CONF, as rdma-core's /etc/rdma/rsocket/).
 * Usage: rsocket_calls PORT [RCVBUF]. Exits 1 on a failure. */
#include <rdma/rsocket.h>
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/select.h>
#include <unistd.h>

static int fails;
#define CHECK(cond, ...) do { if (cond) { printf("ok   "); } else { printf("FAIL "); fails++; } \
	printf(__VA_ARGS__); printf("\n"); } while (0)

static struct sockaddr_in at(int port)
{
	struct sockaddr_in a = { .sin_family = AF_INET, .sin_port = htons(port) };
	inet_pton(AF_INET, "127.0.0.1", &a.sin_addr);
	return a;
}

int main(int argc, char **argv)
{
	int port = argc > 1 ? atoi(argv[1]) : 7600;
	struct sockaddr_in a = at(port), none = at(port + 1), got;
	socklen_t len;
	char buf[64];
	int r, err, one = 1;

	r = rsocket(AF_INET, SOCK_DGRAM, 0);
	CHECK(r < 0 && errno == ENOTSUP, "datagram rsocket: ENOTSUP (errno %d)", errno);
	r = rsocket(AF_UNIX, SOCK_STREAM, 0);
	CHECK(r < 0 && errno == ENOTSUP, "AF_UNIX rsocket: ENOTSUP");
	r = rsend(9999, "x", 1, 0);
	CHECK(r < 0 && errno == EBADF, "rsend on no rsocket: EBADF");
	CHECK(rclose(9999) != 0, "rclose on no rsocket fails");

	/* Refused, non-blocking: EINPROGRESS, then POLLOUT|POLLERR and SO_ERROR once. */
	int c = rsocket(AF_INET, SOCK_STREAM, 0);
	CHECK(c >= 0, "rsocket: %d", c);
	if (argc > 2) {
		len = sizeof err;
		CHECK(rgetsockopt(c, SOL_SOCKET, SO_RCVBUF, &err, &len) == 0 && err == atoi(argv[2]),
		      "SO_RCVBUF from the configuration: %d", err);
	}
	CHECK(rfcntl(c, F_SETFL, O_NONBLOCK) == 0 && (rfcntl(c, F_GETFL) & O_NONBLOCK),
	      "O_NONBLOCK set and read back");
	r = rconnect(c, (struct sockaddr *)&none, sizeof none);
	CHECK(r < 0 && (errno == EINPROGRESS || errno == ECONNREFUSED),
	      "non-blocking rconnect: EINPROGRESS (errno %d)", errno);
	struct pollfd p = { .fd = c, .events = POLLOUT };
	r = rpoll(&p, 1, 10000);
	CHECK(r == 1 && (p.revents & POLLERR), "refused: rpoll says POLLERR (revents %#x)", p.revents);
	len = sizeof err;
	CHECK(rgetsockopt(c, SOL_SOCKET, SO_ERROR, &err, &len) == 0 && err == ECONNREFUSED,
	      "SO_ERROR: ECONNREFUSED (%d)", err);
	rclose(c);

	/* A listener and a connection in this process. */
	int l = rsocket(AF_INET, SOCK_STREAM, 0);
	CHECK(rsetsockopt(l, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one) == 0, "SO_REUSEADDR");
	CHECK(rbind(l, (struct sockaddr *)&a, sizeof a) == 0, "rbind");
	CHECK(rlisten(l, 4) == 0, "rlisten");
	len = sizeof got;
	CHECK(rgetsockname(l, (struct sockaddr *)&got, &len) == 0 && ntohs(got.sin_port) == port,
	      "rgetsockname: the bound port");
	c = rsocket(AF_INET, SOCK_STREAM, 0);
	rfcntl(c, F_SETFL, O_NONBLOCK);
	r = rconnect(c, (struct sockaddr *)&a, sizeof a);
	CHECK(r == 0 || errno == EINPROGRESS, "rconnect to the listener (errno %d)", errno);
	p.fd = l; p.events = POLLIN; p.revents = 0;
	CHECK(rpoll(&p, 1, 10000) == 1 && (p.revents & POLLIN), "the listener polls readable");
	len = sizeof got;
	int s = raccept(l, (struct sockaddr *)&got, &len);
	CHECK(s >= 0 && got.sin_family == AF_INET, "raccept, with the peer's address");
	p.fd = c; p.events = POLLOUT; p.revents = 0;
	CHECK(rpoll(&p, 1, 10000) == 1 && p.revents == POLLOUT, "connected: POLLOUT only (%#x)", p.revents);
	len = sizeof err;
	CHECK(rgetsockopt(c, SOL_SOCKET, SO_ERROR, &err, &len) == 0 && err == 0, "SO_ERROR: 0");
	rfcntl(c, F_SETFL, 0);
	len = sizeof got;
	CHECK(rgetpeername(c, (struct sockaddr *)&got, &len) == 0 && ntohs(got.sin_port) == port,
	      "rgetpeername: the listener's port");

	/* Options. */
	CHECK(rsetsockopt(c, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one) == 0, "TCP_NODELAY set");
	len = sizeof err;
	CHECK(rgetsockopt(c, IPPROTO_TCP, TCP_NODELAY, &err, &len) == 0 && err == 1, "TCP_NODELAY reads 1");
	int q = 64;
	CHECK(rsetsockopt(c, SOL_RDMA, RDMA_SQSIZE, &q, sizeof q) < 0 && errno == EINVAL,
	      "RDMA_SQSIZE after connecting: EINVAL");
	CHECK(rsetsockopt(c, SOL_SOCKET, SO_BROADCAST, &one, sizeof one) < 0 && errno == ENOTSUP,
	      "an option rsockets lacks: ENOTSUP");

	/* rpoll over an rsocket and a pipe. */
	int pp[2];
	if (pipe(pp)) return 1;
	if (write(pp[1], "p", 1) != 1) return 1;
	struct pollfd two[2] = { { .fd = s, .events = POLLIN }, { .fd = pp[0], .events = POLLIN } };
	r = rpoll(two, 2, 1000);
	CHECK(r == 1 && two[0].revents == 0 && two[1].revents == POLLIN,
	      "rpoll: the pipe is readable, the idle rsocket not (%d, %#x, %#x)", r, two[0].revents, two[1].revents);

	/* Gather on send, scatter on receive, MSG_PEEK, rselect. */
	struct iovec out[3] = { { "ab", 2 }, { "cd", 2 }, { "ef", 2 } };
	struct msghdr m = { .msg_iov = out, .msg_iovlen = 3 };
	CHECK(rsendmsg(c, &m, 0) == 6, "rsendmsg of 3 iovecs: 6 bytes");
	fd_set rd;
	FD_ZERO(&rd);
	FD_SET(s, &rd);
	struct timeval tv = { 5, 0 };
	CHECK(rselect(s + 1, &rd, NULL, NULL, &tv) == 1 && FD_ISSET(s, &rd), "rselect: readable");
	CHECK(rrecv(s, buf, 2, MSG_PEEK) == 2 && !memcmp(buf, "ab", 2), "MSG_PEEK");
	/* A stream: the 6 bytes may come in more than one piece (as over TCP); wait for all
	 * of them before asking for them in one call. */
	for (int i = 0; i < 5000 && rrecv(s, buf, 6, MSG_PEEK | MSG_DONTWAIT) < 6; i++)
		usleep(1000);
	char x[3], y[3];
	struct iovec in[2] = { { x, 3 }, { y, 3 } };
	struct msghdr mi = { .msg_iov = in, .msg_iovlen = 2 };
	r = rrecvmsg(s, &mi, 0);
	CHECK(r == 6 && !memcmp(x, "abc", 3) && !memcmp(y, "def", 3), "rrecvmsg into 2 iovecs: %d", r);
	r = rrecv(s, buf, 1, MSG_DONTWAIT);
	CHECK(r < 0 && (errno == EAGAIN || errno == EWOULDBLOCK), "nothing left: EAGAIN");
	r = rrecv(s, NULL, 10, MSG_DONTWAIT);
	CHECK(r < 0 && errno == EFAULT, "a NULL buffer: EFAULT, not EOF");

	/* Half close: EOF one way, data still the other way. */
	CHECK(rshutdown(c, SHUT_WR) == 0, "rshutdown SHUT_WR");
	CHECK(rrecv(s, buf, sizeof buf, 0) == 0, "the peer reads EOF");
	CHECK(rsend(s, "back", 4, 0) == 4 && rrecv(c, buf, sizeof buf, 0) == 4, "the other way still works");
	r = rsend(c, "x", 1, 0);
	CHECK(r < 0, "sending after SHUT_WR fails (errno %d)", errno);

	CHECK(rclose(s) == 0 && rclose(c) == 0 && rclose(l) == 0, "rclose all");
	printf("%s\n", fails ? "rsocket_calls: FAILED" : "rsocket_calls: all passed");
	return fails ? 1 : 0;
}
