/* server/srv_http_life.c: the HTTP front end's lifecycle (start, drain,
 * stop, free), the libmicrohttpd connection notifications that drive the
 * slow-client deadlines (srv_http_limits.c), and the watchdog thread: every
 * 50 ms it polls suspended connections for hang-ups (probing a possible
 * half-close first, see srv_http.c), every 250 ms it runs the deadline scan.
 *
 * Design choice: one watchdog thread for all connections instead of keeping
 * suspended sockets in MHD's poll set (MHD offers no such mode). The cost is
 * up to 50 ms before a hang-up is noticed, and one poll() over every
 * suspended socket per tick; both are small next to a generation. The
 * watchdog never closes a socket itself: it only marks and resumes, and
 * MHD, on the connection's own thread, does the closing.
 * Not done here: request handling (srv_http.c), the deadline policy
 * (srv_http_limits.c).
 */
#include <arpa/inet.h>
#include <errno.h>
#include <netdb.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "common/alloc.h"
#include "common/log.h"
#include "common/util.h"
#include "server/srv_http_int.h"

/* MHD_POOL bounds what one connection's head may take in MHD's arena; a
 * head that does not fit is refused by MHD itself. PROBE_100 is a complete interim
 * response: legal at any time before the final one on HTTP/1.1 (RFC 9110
 * 15.2), and ignored by clients, which is what makes it a safe probe. */
#define WATCHDOG_PERIOD_MS 50
#define SCAN_EVERY 5        /* watchdog ticks per deadline scan (250 ms) */
#define MHD_POOL (64 << 10) /* per-connection parse memory: room above the guard's limits */
#define PROBE_100 "HTTP/1.1 100 Continue\r\n\r\n"

/* ---- watchdog ------------------------------------------------------------- */

/* Cancel suspended requests whose client hung up, probing a possible
 * half-close first (see the top of the file; caller holds h->mu).
 * Watchdog thread. The pollfd arrays are scratch kept in h (grown by
 * doubling, never shrunk) so a tick allocates nothing in the steady state.
 * poll() with timeout 0 only samples; sleeping is watchdog_main's job.
 * NOTE: polling under h->mu is what makes c->fd safe to use: a suspended
 * connection is not closed by MHD until it is resumed, and resuming needs
 * this lock (on_completed detaches under it too). */
static void watchdog_scan(srv_http *h)
{
    size_t n = 0;
    inferd_list_node *it;
    INFERD_LIST_FOR_EACH(&h->conns, it) {
        srv_conn *c = CONN_OF(it);
        if (!c->suspended || c->fd < 0)
            continue;
        if (n == h->pcap) {
            h->pcap = h->pcap ? 2 * h->pcap : 64;
            h->pfds = inferd_realloc(h->pfds, sizeof *h->pfds * h->pcap);
            h->pconns = inferd_realloc(h->pconns, sizeof *h->pconns * h->pcap);
        }
        h->pfds[n] = (struct pollfd){.fd = c->fd, .events = POLLRDHUP, .revents = 0};
        h->pconns[n++] = c;
    }
    if (n == 0 || poll(h->pfds, (nfds_t)n, 0) <= 0)
        return;
    for (size_t i = 0; i < n; i++) {
        srv_conn *c = h->pconns[i];
        short ev = h->pfds[i].revents;
        bool gone = ev & (POLLHUP | POLLERR | POLLNVAL);
        if (!gone && (ev & POLLRDHUP) && !c->probed) { /* left, or only half-closed? probe once */
            c->probed = true;
            if (c->stream) {
                c->probe_sse = true;
                srv_http_wake_locked(c);
            } else if (c->http11) {
                /* Written straight to the socket: the connection is
                 * suspended, so MHD is not writing to it at the same time.
                 * MSG_NOSIGNAL: a dead peer must not raise SIGPIPE; a full
                 * send buffer (EAGAIN) means the peer is alive but slow. */
                ssize_t w = send(c->fd, PROBE_100, sizeof PROBE_100 - 1, MSG_NOSIGNAL | MSG_DONTWAIT);
                gone = w < 0 && errno != EAGAIN && errno != EWOULDBLOCK;
            }
        }
        if (gone) {
            c->client_gone = true;
            srv_http_wake_locked(c);
        }
    }
}

/* The watchdog thread's body, until srv_http_stop sets stop_watchdog. The
 * deadline scan runs outside h->mu: srv_limits has its own lock, and the
 * two locks are never held together. */
static void *watchdog_main(void *arg)
{
    srv_http *h = arg;
    for (unsigned tick = 1; !atomic_load(&h->stop_watchdog); tick++) {
        struct timespec ts = {0, WATCHDOG_PERIOD_MS * 1000000L};
        nanosleep(&ts, NULL);
        if (tick % SCAN_EVERY == 0)
            srv_limits_scan(h->limits, util_now_s());
        pthread_mutex_lock(&h->mu);
        if (!h->closing)
            watchdog_scan(h);
        pthread_mutex_unlock(&h->mu);
    }
    return NULL;
}

/* ---- lifecycle -------------------------------------------------------------- */

/* Connection opened / closed (MHD_OPTION_NOTIFY_CONNECTION): deadlines.
 * NOTE: MHD sends CLOSED before it closes the socket, which is what lets the
 * deadline scan shut down descriptors without racing their reuse. */
static void on_connection(void *cls, struct MHD_Connection *conn, void **socket_context,
                          enum MHD_ConnectionNotificationCode code)
{
    srv_http *h = cls;
    if (code == MHD_CONNECTION_NOTIFY_STARTED) {
        const union MHD_ConnectionInfo *ci = MHD_get_connection_info(conn, MHD_CONNECTION_INFO_CONNECTION_FD);
        *socket_context = ci ? srv_limits_peer_open(h->limits, ci->connect_fd) : NULL;
    } else if (code == MHD_CONNECTION_NOTIFY_CLOSED) {
        srv_limits_peer_close(h->limits, *socket_context);
        *socket_context = NULL;
    }
}

/* MHD's accept policy (any MHD thread): once the server drains, a new
 * connection is accepted and closed at once, so a client sees it fail
 * instead of waiting in the backlog for the grace period.
 * NOTE: not MHD_quiesce_daemon: with a thread pool and epoll,
 * libmicrohttpd 0.9.75's quiesce races each worker to take the listen
 * socket out of the worker's epoll set and calls abort() when the worker
 * wins (it tolerates ENOENT for the master daemon only); a SIGTERM could
 * end the process with status 134. Closing at accept needs no such step. */
static enum MHD_Result accept_policy(void *cls, const struct sockaddr *addr, socklen_t len)
{
    (void)addr;
    (void)len;
    const srv_http *h = cls;
    return atomic_load(&h->s->draining) ? MHD_NO : MHD_YES;
}

/* MHD's error logger (any MHD thread). MHD reports routine client
 * misbehaviour here (resets, malformed requests), so it goes to debug
 * level only; the trailing newline MHD adds is stripped. */
static void mhd_log(void *cls, const char *fmt, va_list ap)
{
    (void)cls;
    if (g_log_level > LOG_LEVEL_DEBUG)
        return;
    char msg[512];
    vsnprintf(msg, sizeof msg, fmt, ap);
    size_t n = strlen(msg);
    while (n && (msg[n - 1] == '\n' || msg[n - 1] == '\r'))
        msg[--n] = '\0';
    INFERD_LOG_DEBUG("mhd: %s", msg);
}

/* host:port to the first address getaddrinfo returns (AI_PASSIVE: a NULL
 * host means "any"). Only the first is bound: one listening socket, which
 * keeps quiesce simple. NOTE: "::" is IPv6 only (MHD sets V6ONLY unless
 * asked for dual stack), so "localhost" binds whichever family comes first. */
static bool resolve(const char *host, int port, struct sockaddr_storage *addr, bool *v6)
{
    struct addrinfo hints, *res = NULL;
    memset(&hints, 0, sizeof hints);
    hints.ai_family = AF_UNSPEC;
    hints.ai_socktype = SOCK_STREAM;
    hints.ai_flags = AI_PASSIVE | AI_NUMERICSERV;
    char ps[16];
    snprintf(ps, sizeof ps, "%d", port);
    if (getaddrinfo(host, ps, &hints, &res) != 0 || !res)
        return false;
    memcpy(addr, res->ai_addr, res->ai_addrlen);
    *v6 = res->ai_family == AF_INET6;
    freeaddrinfo(res);
    return true;
}

/* Main thread, once. Starts MHD with a pool of http_threads event-loop
 * threads and the watchdog. On failure
 * nothing is left behind and s->http stays NULL. NOTE: a watchdog that
 * fails to start is not an error: the server still serves, but hang-ups
 * of suspended requests are then only seen when their generation ends.
 * MHD's CONNECTION_TIMEOUT (300 s idle) is the backstop behind the finer
 * deadlines of srv_http_limits.c. */
inferd_status srv_http_start(srv_server *s)
{
    const srv_opts *o = &s->opts;
    struct sockaddr_storage addr;
    bool v6 = false;
    if (!resolve(o->host, o->port, &addr, &v6))
        return inferd_set_error(INFERD_ERR_INVALID_ARG, "--host: cannot resolve '%s'", o->host);
    srv_guard_warn_exposure(o, (const struct sockaddr *)&addr);
    srv_http *h = inferd_calloc(1, sizeof *h);
    h->s = s;
    h->guard = srv_guard_new(o, (const struct sockaddr *)&addr);
    h->limits = srv_limits_new(o);
    inferd_list_init(&h->conns);
    pthread_mutex_init(&h->mu, NULL);
    unsigned flags = MHD_USE_INTERNAL_POLLING_THREAD | MHD_ALLOW_SUSPEND_RESUME | MHD_USE_ERROR_LOG;
    flags |= MHD_is_feature_supported(MHD_FEATURE_EPOLL) == MHD_YES ? MHD_USE_EPOLL : MHD_USE_POLL;
    if (v6)
        flags |= MHD_USE_IPv6;
    h->d = MHD_start_daemon(flags, (uint16_t)o->port, accept_policy, h, srv_http_on_request, h, MHD_OPTION_SOCK_ADDR,
                            (struct sockaddr *)&addr, MHD_OPTION_THREAD_POOL_SIZE, (unsigned)o->http_threads,
                            MHD_OPTION_CONNECTION_LIMIT, (unsigned)o->max_connections,
                            MHD_OPTION_CONNECTION_TIMEOUT, (unsigned)300, MHD_OPTION_LISTEN_BACKLOG_SIZE,
                            (unsigned)1024, MHD_OPTION_NOTIFY_COMPLETED, srv_http_on_completed, h,
                            MHD_OPTION_NOTIFY_CONNECTION, on_connection, h, MHD_OPTION_PER_IP_CONNECTION_LIMIT,
                            (unsigned)o->max_connections_per_client, MHD_OPTION_CONNECTION_MEMORY_LIMIT,
                            (size_t)MHD_POOL, MHD_OPTION_EXTERNAL_LOGGER, mhd_log, h, MHD_OPTION_END);
    if (!h->d) {
        srv_guard_free(h->guard);
        srv_limits_free(h->limits);
        pthread_mutex_destroy(&h->mu);
        inferd_free(h);
        return inferd_set_error(INFERD_ERR_IO, "cannot listen on %s:%d (address in use or not permitted?)",
                                o->host, o->port);
    }
    const union MHD_DaemonInfo *di = MHD_get_daemon_info(h->d, MHD_DAEMON_INFO_BIND_PORT);
    h->port = di ? di->port : o->port;
    if (pthread_create(&h->watchdog, NULL, watchdog_main, h) == 0)
        h->watchdog_started = true;
    s->http = h;
    return INFERD_OK;
}

int srv_http_port(const srv_http *h)
{
    return h->port;
}

/* Any thread. The cast drops const because C11's atomic_load takes a
 * non-const pointer (relaxed only in C17); the read changes nothing. */
int srv_http_open_requests(const srv_http *h)
{
    return atomic_load(&((srv_http *)h)->open);
}

/* Any thread. Wakes every generation request; each, on its event-loop
 * thread, sees s->aborting in begin_pump and aborts its engine stream. */
void srv_http_abort_all(srv_http *h)
{
    pthread_mutex_lock(&h->mu);
    srv_http_wake_all_locked(h);
    pthread_mutex_unlock(&h->mu);
}

/* Main thread. Order: mark closing and wake everyone (so no request
 * suspends again, which would make MHD_stop_daemon wait), join the
 * watchdog (it touches connections), then stop MHD, which runs
 * on_completed for every open request on its own threads. Idempotent. */
void srv_http_stop(srv_http *h)
{
    if (!h || !h->d)
        return;
    pthread_mutex_lock(&h->mu);
    h->closing = true;
    srv_http_wake_all_locked(h);
    pthread_mutex_unlock(&h->mu);
    atomic_store(&h->stop_watchdog, true);
    if (h->watchdog_started)
        pthread_join(h->watchdog, NULL);
    h->watchdog_started = false;
    MHD_stop_daemon(h->d);
    h->d = NULL;
}

/* Main thread, after the engine thread has stopped: until then the engine
 * may call on_notify with a slot pointer, and the slots live in h. */
void srv_http_free(srv_http *h)
{
    if (!h)
        return;
    srv_http_stop(h);
    for (int i = 0; i < h->n_chunks; i++)
        inferd_free(h->chunks[i]);
    inferd_free(h->chunks);
    inferd_free(h->free_slots);
    inferd_free(h->pfds);
    inferd_free(h->pconns);
    srv_guard_free(h->guard);
    srv_limits_free(h->limits);
    pthread_mutex_destroy(&h->mu);
    h->s->http = NULL;
    inferd_free(h);
}
