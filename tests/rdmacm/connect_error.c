/* After a REP, a QP the CM cannot move (the program put it in ERR before the REP came)
 * gives the active side CONNECT_ERROR with status -EINVAL, leaves its QP in ERR, and puts
 * nothing on the wire until the id is destroyed; then the passive side gets REJECTED
 * (reason 28). librdmacm's behaviour, which oxrdma's Rust API shares (one set of
 * decisions: crates/oxrdma/src/cm/steps.rs). One process, both sides on 127.0.0.1.
 * Usage: connect_error [PORT] (default: one picked from the process ID). */
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <rdma/rdma_cma.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define CHECK(c, ...)                                                                     \
	do {                                                                              \
		if (!(c)) {                                                               \
			printf("FAIL: " __VA_ARGS__);                                     \
			printf("\n");                                                     \
			exit(1);                                                          \
		}                                                                         \
	} while (0)

/* The next event on `ch` within `ms`; NULL if none came. */
static struct rdma_cm_event *next(struct rdma_event_channel *ch, int ms)
{
	struct pollfd p = {.fd = ch->fd, .events = POLLIN};
	struct rdma_cm_event *ev;

	if (poll(&p, 1, ms) <= 0)
		return NULL;
	return rdma_get_cm_event(ch, &ev) ? NULL : ev;
}

static struct rdma_cm_event *expect(struct rdma_event_channel *ch, enum rdma_cm_event_type t)
{
	struct rdma_cm_event *ev = next(ch, 5000);

	CHECK(ev, "no %s in 5 s", rdma_event_str(t));
	CHECK(ev->event == t, "%s (status %d) where %s was due", rdma_event_str(ev->event),
	      ev->status, rdma_event_str(t));
	return ev;
}

int main(int argc, char **argv)
{
	struct rdma_event_channel *chs = rdma_create_event_channel();
	struct rdma_event_channel *chc = rdma_create_event_channel();
	struct rdma_cm_id *listener, *cli, *conn;
	struct sockaddr_in sin = {.sin_family = AF_INET};
	struct ibv_qp_init_attr qa = {
		.cap = {.max_send_wr = 4, .max_recv_wr = 4, .max_send_sge = 1, .max_recv_sge = 1},
		.qp_type = IBV_QPT_RC,
	};
	struct rdma_conn_param cp = {
		.responder_resources = 1, .initiator_depth = 1, .retry_count = 7, .rnr_retry_count = 7,
	};
	struct ibv_qp_attr err = {.qp_state = IBV_QPS_ERR};
	struct rdma_cm_event *ev;

	CHECK(argc <= 2 && chs && chc, "usage: connect_error [PORT] (and two channels)");
	sin.sin_port = htons(argc == 2 ? atoi(argv[1]) : 20000 + getpid() % 20000);
	sin.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
	fcntl(chs->fd, F_SETFL, O_NONBLOCK);
	fcntl(chc->fd, F_SETFL, O_NONBLOCK);
	CHECK(!rdma_create_id(chs, &listener, NULL, RDMA_PS_TCP), "rdma_create_id: %m");
	CHECK(!rdma_bind_addr(listener, (struct sockaddr *)&sin), "rdma_bind_addr: %m");
	CHECK(!rdma_listen(listener, 1), "rdma_listen: %m");
	CHECK(!rdma_create_id(chc, &cli, NULL, RDMA_PS_TCP), "rdma_create_id: %m");
	CHECK(!rdma_resolve_addr(cli, NULL, (struct sockaddr *)&sin, 2000), "resolve_addr: %m");
	rdma_ack_cm_event(expect(chc, RDMA_CM_EVENT_ADDR_RESOLVED));
	CHECK(!rdma_resolve_route(cli, 2000), "rdma_resolve_route: %m");
	rdma_ack_cm_event(expect(chc, RDMA_CM_EVENT_ROUTE_RESOLVED));
	CHECK(!rdma_create_qp(cli, NULL, &qa), "rdma_create_qp: %m");
	CHECK(cli->qp->state == IBV_QPS_INIT, "the new QP is in state %d", cli->qp->state);
	CHECK(!rdma_connect(cli, &cp), "rdma_connect: %m");
	ev = expect(chs, RDMA_CM_EVENT_CONNECT_REQUEST);
	conn = ev->id;
	rdma_ack_cm_event(ev);
	CHECK(!rdma_create_qp(conn, NULL, &qa), "rdma_create_qp (server): %m");
	/* The client's QP fails before the REP comes: ERR cannot go to RTR. */
	CHECK(!ibv_modify_qp(cli->qp, &err, IBV_QP_STATE), "ibv_modify_qp: %m");
	CHECK(!rdma_accept(conn, &cp), "rdma_accept: %m");
	ev = expect(chc, RDMA_CM_EVENT_CONNECT_ERROR);
	CHECK(ev->status == -EINVAL, "CONNECT_ERROR's status %d, not -EINVAL", ev->status);
	rdma_ack_cm_event(ev);
	CHECK(cli->qp->state == IBV_QPS_ERR, "the client's QP in state %d", cli->qp->state);
	/* Nothing on the wire while the client's id lives... */
	ev = next(chs, 300);
	CHECK(!ev, "the server got %s while the client's id lived", rdma_event_str(ev->event));
	/* ...and REJECTED once it is destroyed. */
	rdma_destroy_qp(cli);
	CHECK(!rdma_destroy_id(cli), "rdma_destroy_id: %m");
	ev = expect(chs, RDMA_CM_EVENT_REJECTED);
	CHECK(ev->status == 28, "REJECTED's status %d, not 28", ev->status);
	rdma_ack_cm_event(ev);
	CHECK(conn->qp->state == IBV_QPS_ERR, "the server's QP in state %d", conn->qp->state);
	rdma_destroy_qp(conn);
	rdma_destroy_id(conn);
	rdma_destroy_id(listener);
	rdma_destroy_event_channel(chs);
	rdma_destroy_event_channel(chc);
	printf("ok: CONNECT_ERROR (-EINVAL), QP in ERR, REJ 28 only at destroy\n");
	return 0;
}
