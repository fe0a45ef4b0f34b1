/* server/srv_http_limits.c: connection deadlines and the body budget (see
 * srv_http_limits.h).
 *
 * One mutex guards the peer list; each event is a few stores under it, and
 * the watchdog's scan (every 250 ms) walks every open connection, which for
 * the 10,000-connection default is a few microseconds of work. Closing is
 * shutdown(SHUT_RDWR), never close(): libmicrohttpd owns the descriptor,
 * sees the hang-up on its next poll and tears the connection down through
 * its usual path (so the CLOSED notification, and srv_limits_peer_close,
 * still happen exactly once).
 *
 * The budget is one atomic counter: reservations never block, they fail.
 *
 * Threads: peer_open/peer_close run from MHD's connection notifications and
 * the phase calls from srv_http.c, all on event-loop threads; srv_limits_scan
 * runs on the watchdog thread. The budget calls are lock-free and may run
 * anywhere. Not done here: slow readers. A connection being answered
 * (PEER_ACTIVE) has no deadline; a stream to a client that stopped reading
 * is bounded by the socket buffers and MHD's connection timeout instead.
 */
#include "server/srv_http_limits.h"

#include <pthread.h>
#include <stdatomic.h>
#include <sys/socket.h>

#include "common/alloc.h"
#include "common/list.h"
#include "common/log.h"
#include "common/util.h"

typedef enum {
    PEER_HEAD,   /* waiting for a request head: header deadline */
    PEER_BODY,   /* reading a body: minimum rate */
    PEER_ACTIVE, /* being answered: no deadline */
    PEER_CUT     /* shut down by a scan, waiting for the library to close it */
} peer_phase;

struct srv_peer {
    int fd;
    peer_phase phase;
    double t0;          /* phase start */
    double deadline;    /* HEAD / BODY */
    uint64_t body_seen; /* BODY */
    inferd_list_node link;
};

struct srv_limits {
    pthread_mutex_t mu;
    inferd_list peers; /* of srv_peer, under mu */
    double header_timeout_s;
    double min_body_rate;
    int64_t budget;
    atomic_int_fast64_t in_use;
};

/* Main thread. Zero or negative options mean "default" (30 s, 1 KiB/s,
 * 256 MiB): the option rows forbid them, but a srv_opts built by hand
 * (tests) must not turn into "no deadline" or a division by zero. */
srv_limits *srv_limits_new(const srv_opts *o)
{
    srv_limits *L = inferd_calloc(1, sizeof *L);
    pthread_mutex_init(&L->mu, NULL);
    inferd_list_init(&L->peers);
    L->header_timeout_s = o->header_timeout_s > 0 ? o->header_timeout_s : 30;
    L->min_body_rate = o->min_body_rate > 0 ? (double)o->min_body_rate : 1024;
    L->budget = o->max_body_buffer_bytes > 0 ? o->max_body_buffer_bytes : INT64_C(256) << 20;
    atomic_init(&L->in_use, 0);
    return L;
}

void srv_limits_free(srv_limits *L)
{
    if (!L)
        return;
    inferd_list_node *it, *tmp;
    INFERD_LIST_FOR_EACH_SAFE(&L->peers, it, tmp) /* none left after the daemon stopped */
        inferd_free(INFERD_LIST_ENTRY(it, srv_peer, link));
    pthread_mutex_destroy(&L->mu);
    inferd_free(L);
}

/* ---- peers ---------------------------------------------------------------- */

/* MHD_CONNECTION_NOTIFY_STARTED, event-loop thread. The header deadline
 * starts at accept, so a client that connects and sends nothing is cut
 * after header_timeout_s. The peer is owned by the list until peer_close. */
srv_peer *srv_limits_peer_open(srv_limits *L, int fd)
{
    srv_peer *p = inferd_calloc(1, sizeof *p);
    p->fd = fd;
    p->phase = PEER_HEAD;
    p->t0 = util_now_s();
    p->deadline = p->t0 + L->header_timeout_s;
    pthread_mutex_lock(&L->mu);
    inferd_list_push_back(&L->peers, &p->link);
    pthread_mutex_unlock(&L->mu);
    return p;
}

/* MHD_CONNECTION_NOTIFY_CLOSED, before MHD closes the fd: once unlinked
 * here, no scan can shut down a descriptor number the kernel may reuse. */
void srv_limits_peer_close(srv_limits *L, srv_peer *p)
{
    if (!p)
        return;
    pthread_mutex_lock(&L->mu);
    inferd_list_unlink(&L->peers, &p->link);
    pthread_mutex_unlock(&L->mu);
    inferd_free(p);
}

/* Move p to phase (unless a scan cut it already).
 * NOTE: PEER_CUT is final: a request the scan cut may still complete a
 * call or two on its thread before MHD sees the shutdown, and those must
 * not re-arm a deadline on a dead socket. p may be NULL (no socket
 * context: the peer was not registered), which every caller tolerates. */
static void set_phase(srv_limits *L, srv_peer *p, peer_phase phase, double deadline)
{
    if (!p)
        return;
    pthread_mutex_lock(&L->mu);
    if (p->phase != PEER_CUT) {
        p->phase = phase;
        p->t0 = util_now_s();
        p->deadline = p->t0 + deadline;
        p->body_seen = 0;
    }
    pthread_mutex_unlock(&L->mu);
}

/* The body phase starts with the header timeout as a grace period; rate
 * accounting then extends it in srv_limits_body_progress. */
void srv_limits_head_done(srv_limits *L, srv_peer *p, bool body_follows)
{
    set_phase(L, p, body_follows ? PEER_BODY : PEER_ACTIVE, L->header_timeout_s);
}

/* The deadline grows by n / min_body_rate seconds per piece: a client
 * sending at least min_body_rate bytes per second (after the grace) never
 * hits it, a trickling one does, however long its body is. */
void srv_limits_body_progress(srv_limits *L, srv_peer *p, size_t n)
{
    if (!p)
        return;
    pthread_mutex_lock(&L->mu);
    if (p->phase == PEER_BODY) {
        p->body_seen += n;
        p->deadline = p->t0 + L->header_timeout_s + (double)p->body_seen / L->min_body_rate;
    }
    pthread_mutex_unlock(&L->mu);
}

void srv_limits_body_done(srv_limits *L, srv_peer *p)
{
    set_phase(L, p, PEER_ACTIVE, 0);
}

/* Back to waiting for the next head of a keep-alive connection: an idle
 * keep-alive connection is closed after header_timeout_s too. */
void srv_limits_request_done(srv_limits *L, srv_peer *p)
{
    set_phase(L, p, PEER_HEAD, L->header_timeout_s);
}

/* Watchdog thread. Cuts every HEAD/BODY peer past its deadline and returns
 * how many. NOTE: shutdown under L->mu is what makes p->fd safe (see
 * peer_close); it does not block, and MHD closes the socket on its side. */
int srv_limits_scan(srv_limits *L, double now)
{
    int n_head = 0, n_body = 0;
    pthread_mutex_lock(&L->mu);
    inferd_list_node *it;
    INFERD_LIST_FOR_EACH(&L->peers, it) {
        srv_peer *p = INFERD_LIST_ENTRY(it, srv_peer, link);
        if ((p->phase != PEER_HEAD && p->phase != PEER_BODY) || now < p->deadline)
            continue;
        if (p->phase == PEER_HEAD)
            n_head++;
        else
            n_body++;
        p->phase = PEER_CUT;
        shutdown(p->fd, SHUT_RDWR);
    }
    pthread_mutex_unlock(&L->mu);
    if (n_head + n_body)
        INFERD_LOG_INFO("closed %d connection(s) past the header deadline and %d sending their body below "
                        "--min-body-rate",
                        n_head, n_body);
    return n_head + n_body;
}

/* ---- body budget ------------------------------------------------------------ */

/* At the head, for a declared Content-Length: 413 when the body could never
 * fit, 503 when it does not fit now. Advisory only: nothing is reserved, so
 * two heads may both pass; srv_limits_body_reserve enforces the bound. */
bool srv_limits_body_admit(srv_limits *L, uint64_t declared, srv_error *err)
{
    if (declared > (uint64_t)L->budget)
        return srv_error_set(err, SRV_ERR_TOO_LARGE, NULL,
                             "request body of %llu bytes exceeds the server's body buffer (%lld bytes)",
                             (unsigned long long)declared, (long long)L->budget);
    if ((uint64_t)atomic_load(&L->in_use) + declared > (uint64_t)L->budget)
        return srv_error_set(err, SRV_ERR_BUSY, NULL,
                             "the server is buffering too many request bodies; retry shortly");
    return true;
}

/* Add first, then roll back on overflow: one atomic op in the common case
 * and in_use never exceeds the budget for longer than the rollback. The
 * cost: a reservation racing a rolled-back one may fail spuriously, which
 * only means a 503 with Retry-After for a request at the budget's edge. */
bool srv_limits_body_reserve(srv_limits *L, size_t n)
{
    int64_t prev = atomic_fetch_add(&L->in_use, (int64_t)n);
    if (prev + (int64_t)n <= L->budget)
        return true;
    atomic_fetch_sub(&L->in_use, (int64_t)n);
    return false;
}

void srv_limits_body_release(srv_limits *L, size_t n)
{
    if (n)
        atomic_fetch_sub(&L->in_use, (int64_t)n);
}

int64_t srv_limits_body_in_use(srv_limits *L)
{
    return atomic_load(&L->in_use);
}
