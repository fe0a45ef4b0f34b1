/* server/srv_http_int.h: the state shared by the HTTP front end's two
 * files: srv_http.c (requests: admission, dispatch, generation waits, SSE)
 * and srv_http_life.c (start/stop, the watchdog, connection notifications).
 * Private to server/: nothing outside includes it.
 */
#ifndef INFERD_SERVER_SRV_HTTP_INT_H
#define INFERD_SERVER_SRV_HTTP_INT_H

#include <microhttpd.h>
#include <poll.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>

#include "common/buf.h"
#include "common/list.h"
#include "server/srv_gen.h"
#include "server/srv_http.h"
#include "server/srv_http_guard.h"
#include "server/srv_http_limits.h"

#define PROBE_SSE ": \n\n" /* half-close probe in a stream: an SSE comment */

typedef struct route route;

typedef struct srv_conn srv_conn;

typedef struct {
    srv_http *h;
    srv_conn *c; /* under h->mu; NULL when free */
} srv_slot;

struct srv_conn {
    srv_http *h;
    struct MHD_Connection *conn;
    const route *rt;
    char method[16];
    char path[128];
    double t_recv;
    inferd_buf body;
    uint64_t body_seen;
    bool started;     /* dispatched */
    bool aborted;     /* generation aborted for shutdown */
    int status;       /* HTTP status queued, 0 = none yet */
    const char *note; /* for the access log */
    srv_gen *gen;
    srv_slot *slot;
    int fd;
    srv_peer *peer;   /* deadlines (srv_http_limits), NULL when unknown */
    size_t reserved;  /* body bytes reserved from the budget */
    bool busy;        /* the body did not fit the budget */
    bool http11;      /* may be sent an interim 1xx */
    char cors[256];   /* allowed cross-origin Origin to echo, "" none */
    atomic_int refs; /* MHD request + streaming response */
    /* under h->mu */
    bool suspended, signaled, client_gone;
    bool stream, probed, probe_sse; /* half-close probe (watchdog_scan) */
    inferd_list_node link; /* in h->conns while it has a generation */
};

#define CONN_OF(node) INFERD_LIST_ENTRY(node, srv_conn, link)

struct srv_http {
    srv_server *s;
    struct MHD_Daemon *d;
    srv_guard *guard;
    srv_limits *limits;
    int port;
    atomic_int open; /* open requests */
    pthread_mutex_t mu;
    bool closing;      /* under mu: never suspend again */
    inferd_list conns; /* under mu: of srv_conn, requests with a generation */
    srv_slot **chunks; /* under mu */
    int n_chunks;
    srv_slot **free_slots;
    int n_free, cap_free;
    pthread_t watchdog;
    bool watchdog_started;
    atomic_bool stop_watchdog;
    struct pollfd *pfds; /* watchdog scratch */
    srv_conn **pconns;
    size_t pcap;
};

/* Resume c if suspended and mark it signaled (caller holds h->mu). */
void srv_http_wake_locked(srv_conn *c);
/* Wake every request with a generation (caller holds h->mu). */
void srv_http_wake_all_locked(srv_http *h);
/* MHD's access handler and request-completed callback (srv_http.c). */
enum MHD_Result srv_http_on_request(void *cls, struct MHD_Connection *conn, const char *url, const char *method,
                                    const char *version, const char *upload, size_t *upload_size,
                                    void **con_cls);
void srv_http_on_completed(void *cls, struct MHD_Connection *conn, void **con_cls,
                           enum MHD_RequestTerminationCode toe);

#endif
