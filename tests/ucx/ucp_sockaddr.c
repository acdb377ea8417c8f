/* A UCP client and server that connect by IP address and port (ucp_listener and
 * ucp_ep_create with a socket address), as most UCX applications do: UCX sets the
 * connection up through a connection manager, here its rdmacm one on oxrdma's
 * librdmacm.so.1. The client sends COUNT tagged messages of SIZE bytes, the server checks
 * every byte and answers each; both print "ucp_sockaddr: N messages ok" and exit 0.
 *
 *   ucp_sockaddr -s PORT            server
 *   ucp_sockaddr -c HOST PORT       client
 */
#include <arpa/inet.h>
#include <netdb.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <ucp/api/ucp.h>

#define COUNT 100
#define SIZE 4096
#define TAG 0x1337

static ucp_context_h ctx;
static ucp_worker_h worker;
static ucp_ep_h server_ep;

static void die(const char *what, ucs_status_t s)
{
    fprintf(stderr, "ucp_sockaddr: %s: %s\n", what, ucs_status_string(s));
    exit(1);
}

/* Waits for a request (or an immediate status) to complete. */
static void wait_for(void *req, const char *what)
{
    if (req == NULL)
        return;
    if (UCS_PTR_IS_ERR(req))
        die(what, UCS_PTR_STATUS(req));
    while (ucp_request_check_status(req) == UCS_INPROGRESS)
        ucp_worker_progress(worker);
    ucs_status_t s = ucp_request_check_status(req);
    ucp_request_free(req);
    if (s != UCS_OK)
        die(what, s);
}

static void on_conn(ucp_conn_request_h req, void *arg)
{
    ucp_ep_params_t p = {
        .field_mask = UCP_EP_PARAM_FIELD_CONN_REQUEST,
        .conn_request = req,
    };
    ucs_status_t s = ucp_ep_create(worker, &p, &server_ep);
    if (s != UCS_OK)
        die("ucp_ep_create (server)", s);
}

static void fill(unsigned char *b, int i)
{
    for (int k = 0; k < SIZE; k++)
        b[k] = (unsigned char)(i * 31 + k);
}

static int check(const unsigned char *b, int i)
{
    for (int k = 0; k < SIZE; k++)
        if (b[k] != (unsigned char)(i * 31 + k))
            return 0;
    return 1;
}

static void send_msg(ucp_ep_h ep, unsigned char *b)
{
    ucp_request_param_t p = { 0 };
    wait_for(ucp_tag_send_nbx(ep, b, SIZE, TAG, &p), "ucp_tag_send_nbx");
}

static void recv_msg(unsigned char *b)
{
    ucp_request_param_t p = { 0 };
    wait_for(ucp_tag_recv_nbx(worker, b, SIZE, TAG, (ucp_tag_t)-1, &p), "ucp_tag_recv_nbx");
}

int main(int argc, char **argv)
{
    int server = argc == 3 && !strcmp(argv[1], "-s");
    if (!server && !(argc == 4 && !strcmp(argv[1], "-c"))) {
        fprintf(stderr, "usage: ucp_sockaddr -s PORT | -c HOST PORT\n");
        return 2;
    }
    ucp_params_t cp = { .field_mask = UCP_PARAM_FIELD_FEATURES, .features = UCP_FEATURE_TAG };
    ucs_status_t s = ucp_init(&cp, NULL, &ctx);
    if (s != UCS_OK)
        die("ucp_init", s);
    ucp_worker_params_t wp = { .field_mask = UCP_WORKER_PARAM_FIELD_THREAD_MODE,
                               .thread_mode = UCS_THREAD_MODE_SINGLE };
    if ((s = ucp_worker_create(ctx, &wp, &worker)) != UCS_OK)
        die("ucp_worker_create", s);

    struct sockaddr_in sa = { .sin_family = AF_INET };
    unsigned char *buf = malloc(SIZE);
    int ok = 0;
    if (server) {
        sa.sin_addr.s_addr = INADDR_ANY;
        sa.sin_port = htons(atoi(argv[2]));
        ucp_listener_params_t lp = {
            .field_mask = UCP_LISTENER_PARAM_FIELD_SOCK_ADDR | UCP_LISTENER_PARAM_FIELD_CONN_HANDLER,
            .sockaddr = { .addr = (struct sockaddr *)&sa, .addrlen = sizeof(sa) },
            .conn_handler = { .cb = on_conn, .arg = NULL },
        };
        ucp_listener_h l;
        if ((s = ucp_listener_create(worker, &lp, &l)) != UCS_OK)
            die("ucp_listener_create", s);
        printf("ucp_sockaddr: listening\n");
        fflush(stdout);
        while (server_ep == NULL)
            ucp_worker_progress(worker);
        for (int i = 0; i < COUNT; i++) {
            recv_msg(buf);
            ok += check(buf, i);
            send_msg(server_ep, buf);
        }
        /* The client closes first; wait for its last message to be out of our hands. */
        ucp_request_param_t cl = { .op_attr_mask = UCP_OP_ATTR_FIELD_FLAGS, .flags = UCP_EP_CLOSE_FLAG_FORCE };
        void *r = ucp_ep_close_nbx(server_ep, &cl);
        if (r != NULL && !UCS_PTR_IS_ERR(r)) {
            while (ucp_request_check_status(r) == UCS_INPROGRESS)
                ucp_worker_progress(worker);
            ucp_request_free(r);
        }
        ucp_listener_destroy(l);
    } else {
        struct addrinfo *ai;
        struct addrinfo hints = { .ai_family = AF_INET, .ai_socktype = SOCK_STREAM };
        if (getaddrinfo(argv[2], argv[3], &hints, &ai)) {
            fprintf(stderr, "ucp_sockaddr: cannot resolve %s\n", argv[2]);
            return 1;
        }
        memcpy(&sa, ai->ai_addr, sizeof(sa));
        freeaddrinfo(ai);
        ucp_ep_params_t ep = {
            .field_mask = UCP_EP_PARAM_FIELD_FLAGS | UCP_EP_PARAM_FIELD_SOCK_ADDR,
            .flags = UCP_EP_PARAMS_FLAGS_CLIENT_SERVER,
            .sockaddr = { .addr = (struct sockaddr *)&sa, .addrlen = sizeof(sa) },
        };
        ucp_ep_h e;
        if ((s = ucp_ep_create(worker, &ep, &e)) != UCS_OK)
            die("ucp_ep_create (client)", s);
        for (int i = 0; i < COUNT; i++) {
            fill(buf, i);
            send_msg(e, buf);
            memset(buf, 0, SIZE);
            recv_msg(buf);
            ok += check(buf, i);
        }
        ucp_request_param_t cl = { 0 };
        void *r = ucp_ep_close_nbx(e, &cl);
        if (r != NULL && !UCS_PTR_IS_ERR(r)) {
            while (ucp_request_check_status(r) == UCS_INPROGRESS)
                ucp_worker_progress(worker);
            ucp_request_free(r);
        }
    }
    printf("ucp_sockaddr: %d of %d messages ok\n", ok, COUNT);
    ucp_worker_destroy(worker);
    ucp_cleanup(ctx);
    free(buf);
    return ok == COUNT ? 0 : 1;
}
