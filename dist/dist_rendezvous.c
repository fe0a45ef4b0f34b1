/* dist/dist_rendezvous.c: see dist_rendezvous.h for the protocol.
 *
 * The master is one poll() loop over its listening socket and every
 * connection, joined or not, rather than one connection at a time: a peer
 * that connects and says nothing then costs nothing but a slot, and the
 * real nodes behind it still join. Connections stay in the poll set after
 * their hello too, so a node that dies and is restarted (same rank, new
 * connection) is seen to hang up and takes its rank back, while two live
 * processes with the same --node-rank are refused. Strays (no hello yet)
 * are bounded by RDZV_MAX_STRAYS; when full, the oldest is evicted, since a
 * real node sends its hello the moment it connects.
 *
 * The joiner retries while retrying can help: no master yet (refused,
 * unreachable, a name that does not resolve yet) or a master that closed
 * without a reply (it restarted). Anything the master said is final.
 */
#include "dist/dist_rendezvous.h"

#include <errno.h>
#include <poll.h>
#include <stdbool.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>

#include "common/alloc.h"
#include "common/log.h"
#include "common/util.h"
#include "dist/dist_net.h"
#include "dist/dist_rdzv_internal.h"

#define RDZV_MAX_STRAYS 16   /* connections without a hello the master keeps */
#define RDZV_NOTICE_S 0.5    /* bound of a refusal / abort sent on the way out */
#define RDZV_RETRY_MIN_MS 20 /* joiner backoff: doubles up to the max */
#define RDZV_RETRY_MAX_MS 500
#define RDZV_BACKLOG 128

struct dist_rdzv_listener {
    dist_rdzv_opts o; /* master_addr points at addr */
    char *addr;       /* owned copy; NULL when nnodes == 1 */
    int fd;           /* -1 when nnodes == 1 */
    int port;
    inferd_deadline deadline;
    bool served;
};

/* ---- wire -------------------------------------------------------------------- */

static void put_u32(uint8_t *p, uint32_t v)
{
    p[0] = (uint8_t)v;
    p[1] = (uint8_t)(v >> 8);
    p[2] = (uint8_t)(v >> 16);
    p[3] = (uint8_t)(v >> 24);
}

static uint32_t get_u32(const uint8_t *p)
{
    return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}

/* magic, version, a, b: hello (nnodes, rank) and reply (code, length) alike. */
static void header_pack(uint8_t h[DIST_RDZV_HEADER_SIZE], uint32_t a, uint32_t b)
{
    put_u32(h, DIST_RDZV_MAGIC);
    put_u32(h + 4, DIST_RDZV_VERSION);
    put_u32(h + 8, a);
    put_u32(h + 12, b);
}

/* ---- master: connections ------------------------------------------------------ */

typedef struct {
    int fd;     /* -1 once closed (compacted away) */
    int rank;   /* -1 until its hello is accepted */
    size_t got; /* hello bytes read */
    uint8_t hello[DIST_RDZV_HEADER_SIZE];
} rdzv_conn;

typedef struct {
    dist_rdzv_listener *l;
    rdzv_conn *c; /* [cap]: joined and pending, in accept order */
    int n, cap;
    int n_joined;
    int n_dropped;     /* strays refused or closed */
    char dropped[160]; /* why the last one was, for the timeout message */
} rdzv_master;

/* Tell a peer why it gets no blob (code != OK), best effort: the master is
 * failing or dropping it anyway. Keeps the thread's error message. */
static void send_notice(int fd, dist_rdzv_code code, const char *text)
{
    char saved[1024];
    snprintf(saved, sizeof saved, "%s", inferd_last_error());
    size_t n = INFERD_MIN(strlen(text), (size_t)DIST_RDZV_MAX_REASON);
    uint8_t msg[DIST_RDZV_HEADER_SIZE + DIST_RDZV_MAX_REASON];
    header_pack(msg, (uint32_t)code, (uint32_t)n);
    memcpy(msg + DIST_RDZV_HEADER_SIZE, text, n);
    dist_net_write_full(fd, msg, DIST_RDZV_HEADER_SIZE + n, inferd_deadline_in_s(RDZV_NOTICE_S));
    inferd_set_error(INFERD_OK, "%s", saved); /* only the message is kept per thread */
}

/* Close connection c (a stray or a joined node that went away) and remember
 * why for the timeout message. */
static void conn_drop(rdzv_master *m, rdzv_conn *c, const char *why)
{
    char peer[80];
    INFERD_LOG_DEBUG("rendezvous: dropped %s: %s", dist_net_peer_str(c->fd, peer, sizeof peer), why);
    if (c->rank >= 0)
        m->n_joined--;
    dist_net_close(c->fd);
    c->fd = -1;
    c->rank = -1;
    m->n_dropped++;
    snprintf(m->dropped, sizeof m->dropped, "%.80s from %.70s", why, peer); /* fits: 80 + 6 + 70 < 160 */
}

/* Remove closed connections, keeping accept order. */
static void compact(rdzv_master *m)
{
    int k = 0;
    for (int i = 0; i < m->n; i++)
        if (m->c[i].fd >= 0)
            m->c[k++] = m->c[i];
    m->n = k;
}

static void conn_add(rdzv_master *m, int fd)
{
    if (m->n == m->cap) {
        /* full: the oldest connection without a hello goes (one exists:
         * at most nnodes-1 are joined and cap leaves room for strays) */
        for (int i = 0; i < m->n; i++)
            if (m->c[i].rank < 0) {
                conn_drop(m, &m->c[i], "evicted: no hello while connections piled up");
                break;
            }
        compact(m);
    }
    if (m->n == m->cap) { /* unreachable by the bound above; never overflow */
        dist_net_close(fd);
        return;
    }
    m->c[m->n++] = (rdzv_conn){.fd = fd, .rank = -1};
}

static int find_rank(const rdzv_master *m, int rank)
{
    for (int i = 0; i < m->n; i++)
        if (m->c[i].fd >= 0 && m->c[i].rank == rank)
            return i;
    return -1;
}

/* ---- master: hellos ------------------------------------------------------------ */

/* A whole hello is in: join c, or refuse it (INVALID_ARG: the job is
 * misconfigured, the master fails). */
static inferd_status on_hello(rdzv_master *m, rdzv_conn *c)
{
    uint32_t version = get_u32(c->hello + 4), nnodes = get_u32(c->hello + 8), rank = get_u32(c->hello + 12);
    int nn = m->l->o.nnodes;
    char why[DIST_RDZV_MAX_REASON + 1], peer[80];
    dist_rdzv_code code = DIST_RDZV_OK;
    if (version != DIST_RDZV_VERSION) {
        code = DIST_RDZV_BAD_VERSION;
        snprintf(why, sizeof why, "protocol version %u, the master speaks version %u", version,
                 DIST_RDZV_VERSION);
    } else if (nnodes != (uint32_t)nn) {
        code = DIST_RDZV_BAD_NNODES;
        snprintf(why, sizeof why, "--nnodes %u differs from the master's --nnodes %d", nnodes, nn);
    } else if (rank == 0 || rank >= (uint32_t)nn) {
        code = DIST_RDZV_BAD_RANK;
        snprintf(why, sizeof why, "--node-rank %u out of range [1, %d] (node 0 is the master)", rank, nn - 1);
    } else {
        int holder = find_rank(m, (int)rank);
        if (holder >= 0 && dist_net_peer_gone(m->c[holder].fd))
            conn_drop(m, &m->c[holder], "hung up after its hello (a node restarted?)");
        else if (holder >= 0) {
            code = DIST_RDZV_RANK_TAKEN;
            snprintf(why, sizeof why, "--node-rank %u already joined from %s", rank,
                     dist_net_peer_str(m->c[holder].fd, peer, sizeof peer));
        }
    }
    dist_net_peer_str(c->fd, peer, sizeof peer);
    if (code != DIST_RDZV_OK) {
        send_notice(c->fd, code, why);
        return inferd_set_error(INFERD_ERR_INVALID_ARG, "rendezvous: refused %s: %s", peer, why);
    }
    c->rank = (int)rank;
    m->n_joined++;
    INFERD_LOG_DEBUG("rendezvous: node %u joined from %s (%d of %d peers)", rank, peer, m->n_joined, nn - 1);
    return INFERD_OK;
}

/* A joined node has nothing to say until its reply: input from it is a
 * hang-up (its rank is free again) or a protocol breach (dropped too). */
static void on_joined_readable(rdzv_master *m, rdzv_conn *c)
{
    char b;
    ssize_t r = recv(c->fd, &b, 1, MSG_DONTWAIT);
    if (r < 0 && (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR))
        return;
    char why[64];
    snprintf(why, sizeof why, "node %d %s", c->rank, r > 0 ? "sent data after its hello" : "hung up");
    conn_drop(m, c, why);
}

/* Read what a connection sent; the hello is checked once whole. */
static inferd_status on_readable(rdzv_master *m, rdzv_conn *c)
{
    if (c->fd < 0)
        return INFERD_OK; /* dropped earlier in this round */
    if (c->rank >= 0) {
        on_joined_readable(m, c);
        return INFERD_OK;
    }
    ssize_t r = recv(c->fd, c->hello + c->got, sizeof c->hello - c->got, MSG_DONTWAIT);
    char why[96];
    if (r < 0 && (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR))
        return INFERD_OK;
    if (r <= 0) {
        snprintf(why, sizeof why, "closed after %zu of %d hello bytes", c->got, DIST_RDZV_HEADER_SIZE);
        conn_drop(m, c, why);
        return INFERD_OK;
    }
    c->got += (size_t)r;
    /* the magic is judged as soon as it is in: garbage is dropped at once */
    if (c->got >= 4 && get_u32(c->hello) != DIST_RDZV_MAGIC) {
        snprintf(why, sizeof why, "bad magic 0x%08x (not an inferd rendezvous peer)", get_u32(c->hello));
        send_notice(c->fd, DIST_RDZV_BAD_MAGIC, why);
        conn_drop(m, c, why);
        return INFERD_OK;
    }
    return c->got == sizeof c->hello ? on_hello(m, c) : INFERD_OK;
}

/* ---- master: the loop ------------------------------------------------------------ */

/* TIMEOUT naming the ranks still missing and what else was seen. */
static inferd_status timeout_error(const rdzv_master *m)
{
    const dist_rdzv_opts *o = &m->l->o;
    char missing[160] = "", extra[256] = "";
    size_t k = 0;
    int listed = 0, pending = 0;
    for (int r = 1; r < o->nnodes; r++) {
        if (find_rank(m, r) >= 0)
            continue;
        if (k + 16 >= sizeof missing) {
            snprintf(missing + k, sizeof missing - k, ", ...");
            break;
        }
        k += (size_t)snprintf(missing + k, sizeof missing - k, "%s%d", listed++ ? ", " : "", r);
    }
    for (int i = 0; i < m->n; i++)
        pending += m->c[i].rank < 0;
    k = 0;
    if (pending)
        k += (size_t)snprintf(extra + k, sizeof extra - k, "; %d connection(s) sent no complete hello",
                              pending);
    if (m->n_dropped)
        snprintf(extra + k, sizeof extra - k, "; dropped %d connection(s), the last: %s", m->n_dropped,
                 m->dropped);
    return inferd_set_error(
        INFERD_ERR_TIMEOUT,
        "rendezvous: timed out after %g s waiting for --node-rank %s (%d of %d peers joined)%s", o->timeout_s,
        missing, m->n_joined, o->nnodes - 1, extra);
}

static void accept_all(rdzv_master *m)
{
    /* bounded: a connect flood must not keep the loop from its deadline */
    for (int i = 0; i < m->cap; i++) {
        int fd = dist_net_accept(m->l->fd);
        if (fd < 0)
            return;
        conn_add(m, fd);
    }
}

/* Drop the joined nodes that have hung up. Run before declaring everyone
 * in: a node's hello and its hang-up can arrive in one read, and the blob
 * must go to its restarted successor, not to the closed socket. */
static void drop_dead_joined(rdzv_master *m)
{
    for (int i = 0; i < m->n; i++)
        if (m->c[i].fd >= 0 && m->c[i].rank >= 0 && dist_net_peer_gone(m->c[i].fd)) {
            char why[64];
            snprintf(why, sizeof why, "node %d hung up", m->c[i].rank);
            conn_drop(m, &m->c[i], why);
        }
    compact(m);
}

/* Poll until nnodes-1 nodes have joined. pfd has room for cap + 1. */
static inferd_status master_wait(rdzv_master *m, struct pollfd *pfd)
{
    const inferd_deadline d = m->l->deadline;
    while (m->n_joined < m->l->o.nnodes - 1) {
        if (inferd_deadline_expired(d))
            return timeout_error(m);
        pfd[0] = (struct pollfd){.fd = m->l->fd, .events = POLLIN};
        for (int i = 0; i < m->n; i++)
            pfd[1 + i] = (struct pollfd){.fd = m->c[i].fd, .events = POLLIN};
        int rc = poll(pfd, (nfds_t)m->n + 1, inferd_deadline_remaining_ms(d));
        if (rc < 0 && errno != EINTR)
            return inferd_set_error(INFERD_ERR_IO, "rendezvous: poll: %s", strerror(errno));
        if (rc <= 0)
            continue;
        for (int i = 0; i < m->n; i++) {
            if (pfd[1 + i].revents == 0)
                continue;
            inferd_status st = on_readable(m, &m->c[i]);
            if (st != INFERD_OK)
                return st;
        }
        compact(m);
        if (pfd[0].revents)
            accept_all(m);
        if (m->n_joined == m->l->o.nnodes - 1)
            drop_dead_joined(m);
    }
    return INFERD_OK;
}

/* Send every joined node its reply and the blob, then close its
 * connection, or hand it over as keep[rank - 1] when keep is set. */
static inferd_status master_send(rdzv_master *m, const void *blob, size_t len, int *keep)
{
    uint8_t msg[DIST_RDZV_HEADER_SIZE + DIST_RDZV_MAX_BLOB];
    header_pack(msg, DIST_RDZV_OK, (uint32_t)len);
    if (len)
        memcpy(msg + DIST_RDZV_HEADER_SIZE, blob, len);
    for (int i = 0; i < m->n; i++) {
        rdzv_conn *c = &m->c[i];
        if (c->rank < 0)
            continue;
        if (dist_net_write_full(c->fd, msg, DIST_RDZV_HEADER_SIZE + len, m->l->deadline) != INFERD_OK)
            return dist_net_with_context(INFERD_ERR_IO, "rendezvous: sending the blob to node %d", c->rank);
        if (keep)
            keep[c->rank - 1] = c->fd;
        else
            dist_net_close(c->fd);
        c->fd = -1;
        c->rank = -1;
    }
    return INFERD_OK;
}

/* The master failed with st: tell the joined nodes still waiting, so they
 * fail now rather than at their deadline; returns st, message kept. */
static inferd_status master_abort(rdzv_master *m, inferd_status st)
{
    char why[DIST_RDZV_MAX_REASON + 1];
    snprintf(why, sizeof why, "%s", inferd_last_error());
    for (int i = 0; i < m->n; i++)
        if (m->c[i].fd >= 0 && m->c[i].rank >= 0)
            send_notice(m->c[i].fd, DIST_RDZV_ABORTED, why);
    return st;
}

/* ---- master: public ------------------------------------------------------------ */

inferd_status dist_rdzv_listen(const dist_rdzv_opts *o, dist_rdzv_listener **out)
{
    if (!o || !out)
        return inferd_set_error(INFERD_ERR_INVALID_ARG, "rendezvous: no options or no output");
    *out = NULL;
    inferd_status st = dist_rdzv_check_numbers(o, 0);
    if (st != INFERD_OK)
        return st;
    if (o->node_rank != 0)
        return inferd_set_error(INFERD_ERR_INVALID_ARG,
                                "--node-rank %d: only node 0 listens; the others join", o->node_rank);
    dist_rdzv_listener *l = inferd_calloc(1, sizeof *l);
    l->o = *o;
    l->fd = -1;
    l->deadline = inferd_deadline_in_s(o->timeout_s);
    if (o->nnodes > 1) {
        l->addr = inferd_strdup(o->master_addr);
        l->o.master_addr = l->addr;
        st = dist_net_listen(l->addr, o->master_port, RDZV_BACKLOG, &l->fd, &l->port);
        if (st != INFERD_OK) {
            st = dist_net_with_context(st, "rendezvous: --master-addr %s --master-port %d", l->addr,
                                       o->master_port);
            dist_rdzv_close(l);
            return st;
        }
        INFERD_LOG_DEBUG("rendezvous: listening on %s port %d for %d peers", l->addr, l->port, o->nnodes - 1);
    }
    *out = l;
    return INFERD_OK;
}

int dist_rdzv_port(const dist_rdzv_listener *l)
{
    return l ? l->port : 0;
}
int dist_rdzv_nnodes(const dist_rdzv_listener *l)
{
    return l ? l->o.nnodes : 0;
}

/* Empty the hand-over slots keep[0..n) (NULL: none), resetting the
 * connections in them when reset is set. */
static void set_kept(int *keep, int n, bool reset)
{
    for (int r = 0; keep && r < n; r++) {
        if (reset)
            dist_net_close_reset(keep[r]);
        keep[r] = -1;
    }
}

/* keep == NULL: dist_rdzv_serve. A failure after some connections were
 * handed over resets them, so no node takes a failed rendezvous for a good
 * one. */
inferd_status dist_rdzv_serve_keep(dist_rdzv_listener *l, const void *blob, size_t len, int *keep)
{
    if (!l)
        return inferd_set_error(INFERD_ERR_INVALID_ARG, "rendezvous: no listener");
    if (l->served)
        return inferd_set_error(INFERD_ERR_INVALID_ARG, "rendezvous: this listener has already served");
    if (len > DIST_RDZV_MAX_BLOB)
        return inferd_set_error(INFERD_ERR_INVALID_ARG,
                                "rendezvous: a %zu-byte blob exceeds the %d-byte limit", len,
                                DIST_RDZV_MAX_BLOB);
    if (len && !blob)
        return inferd_set_error(INFERD_ERR_INVALID_ARG, "rendezvous: no blob bytes for length %zu", len);
    l->served = true;
    if (l->o.nnodes == 1)
        return INFERD_OK;
    rdzv_master m = {.l = l, .cap = l->o.nnodes - 1 + RDZV_MAX_STRAYS};
    m.c = inferd_calloc((size_t)m.cap, sizeof *m.c);
    struct pollfd *pfd = inferd_calloc((size_t)m.cap + 1, sizeof *pfd);
    set_kept(keep, l->o.nnodes - 1, false);
    inferd_status st = master_wait(&m, pfd);
    if (st == INFERD_OK)
        st = master_send(&m, blob, len, keep);
    if (st == INFERD_OK) {
        INFERD_LOG_DEBUG("rendezvous: sent %zu bytes to %d peers", len, l->o.nnodes - 1);
    } else {
        st = master_abort(&m, st);
        set_kept(keep, l->o.nnodes - 1, true);
    }
    for (int i = 0; i < m.n; i++)
        dist_net_close(m.c[i].fd);
    inferd_free(pfd);
    inferd_free(m.c);
    return st;
}

inferd_status dist_rdzv_serve(dist_rdzv_listener *l, const void *blob, size_t len)
{
    return dist_rdzv_serve_keep(l, blob, len, NULL);
}

void dist_rdzv_close(dist_rdzv_listener *l)
{
    if (!l)
        return;
    dist_net_close(l->fd);
    inferd_free(l->addr);
    inferd_free(l);
}

/* ---- joiner ---------------------------------------------------------------------- */

/* The master's reply after the header: its refusal reason (code != OK,
 * final) or the blob into buf[0..cap). */
static inferd_status read_reply_body(int fd, const dist_rdzv_opts *o, inferd_deadline d, uint32_t code,
                                     uint32_t n, void *buf, size_t cap, size_t *len)
{
    if (code != DIST_RDZV_OK) {
        char why[DIST_RDZV_MAX_REASON + 1] = "(no reason given)";
        size_t got = 0;
        if (n <= DIST_RDZV_MAX_REASON && n > 0) {
            dist_net_read_full(fd, why, n, d, &got);
            why[got] = '\0';
            for (size_t i = 0; i < got; i++) /* the text goes into our logs: no control bytes */
                if ((unsigned char)why[i] < 0x20 || why[i] == 0x7f)
                    why[i] = '?';
        }
        if (code == DIST_RDZV_ABORTED)
            return inferd_set_error(INFERD_ERR_UNAVAILABLE, "rendezvous: master %s:%d aborted: %s",
                                    o->master_addr, o->master_port, why);
        return inferd_set_error(INFERD_ERR_INVALID_ARG, "rendezvous: master %s:%d refused --node-rank %d: %s",
                                o->master_addr, o->master_port, o->node_rank, why);
    }
    if (n > DIST_RDZV_MAX_BLOB)
        return inferd_set_error(INFERD_ERR_FORMAT,
                                "rendezvous: master %s:%d sent a %u-byte blob, above the %d-byte limit",
                                o->master_addr, o->master_port, n, DIST_RDZV_MAX_BLOB);
    if (n > cap)
        return inferd_set_error(INFERD_ERR_TOO_LONG,
                                "rendezvous: master %s:%d sent a %u-byte blob; the buffer holds %zu",
                                o->master_addr, o->master_port, n, cap);
    inferd_status st = n ? dist_net_read_full(fd, buf, n, d, NULL) : INFERD_OK;
    if (st != INFERD_OK)
        return dist_net_with_context(st, "rendezvous: reading the blob");
    *len = n;
    return INFERD_OK;
}

/* Hello and reply over a connected fd. *retry: the master went away
 * without answering (worth another connection). */
static inferd_status join_exchange(int fd, const dist_rdzv_opts *o, inferd_deadline d, void *buf, size_t cap,
                                   size_t *len, bool *retry)
{
    uint8_t h[DIST_RDZV_HEADER_SIZE];
    header_pack(h, (uint32_t)o->nnodes, (uint32_t)o->node_rank);
    inferd_status st = dist_net_write_full(fd, h, sizeof h, d);
    if (st != INFERD_OK) {
        *retry = st != INFERD_ERR_TIMEOUT;
        return dist_net_with_context(st, "sending the hello");
    }
    size_t got = 0;
    st = dist_net_read_full(fd, h, sizeof h, d, &got);
    if (st == INFERD_ERR_TIMEOUT)
        return inferd_set_error(st, "connected, no reply yet: are all %d nodes up?", o->nnodes);
    if (st != INFERD_OK && got == 0) {
        *retry = true;
        return inferd_set_error(INFERD_ERR_UNAVAILABLE, "the master closed the connection without a reply");
    }
    if (st != INFERD_OK)
        return inferd_set_error(INFERD_ERR_FORMAT,
                                "rendezvous: master %s:%d sent %zu of a %d-byte reply header", o->master_addr,
                                o->master_port, got, DIST_RDZV_HEADER_SIZE);
    if (get_u32(h) != DIST_RDZV_MAGIC || get_u32(h + 4) != DIST_RDZV_VERSION)
        return inferd_set_error(INFERD_ERR_FORMAT,
                                "rendezvous: %s:%d is no inferd rendezvous master of protocol version %u "
                                "(reply magic 0x%08x, version %u)",
                                o->master_addr, o->master_port, DIST_RDZV_VERSION, get_u32(h),
                                get_u32(h + 4));
    return read_reply_body(fd, o, d, get_u32(h + 8), get_u32(h + 12), buf, cap, len);
}

/* keep == NULL: dist_rdzv_join. */
inferd_status dist_rdzv_join_keep(const dist_rdzv_opts *o, void *buf, size_t cap, size_t *len, int *keep)
{
    if (!o || !len || (cap && !buf))
        return inferd_set_error(INFERD_ERR_INVALID_ARG, "rendezvous: no options, buffer or length output");
    *len = 0;
    inferd_status st = dist_rdzv_check_numbers(o, 1);
    if (st != INFERD_OK)
        return st;
    if (o->node_rank == 0)
        return inferd_set_error(INFERD_ERR_INVALID_ARG,
                                "--node-rank 0 is the master: it listens, it does not join");
    const inferd_deadline d = inferd_deadline_in_s(o->timeout_s);
    char last[256] = "";
    for (int wait_ms = RDZV_RETRY_MIN_MS;; wait_ms = INFERD_MIN(2 * wait_ms, RDZV_RETRY_MAX_MS)) {
        int fd = -1;
        bool retry = false, connected = false;
        st = dist_net_connect(o->master_addr, o->master_port, d, &fd);
        if (st == INFERD_OK) {
            connected = true;
            st = join_exchange(fd, o, d, buf, cap, len, &retry);
            if (st == INFERD_OK && keep)
                *keep = fd;
            else
                dist_net_close(fd);
        } else {
            retry = st != INFERD_ERR_TIMEOUT;
        }
        if (st == INFERD_OK) {
            INFERD_LOG_DEBUG("rendezvous: node %d received %zu bytes", o->node_rank, *len);
            return INFERD_OK;
        }
        if (st == INFERD_ERR_TIMEOUT || (retry && inferd_deadline_expired(d))) {
            /* say where it stood: waiting for a reply, or the last reason
             * a connection failed (more telling than "deadline passed") */
            char detail[512];
            snprintf(detail, sizeof detail, "%s",
                     !connected && st == INFERD_ERR_TIMEOUT && last[0] ? last : inferd_last_error());
            return inferd_set_error(INFERD_ERR_TIMEOUT,
                                    "rendezvous: node %d got no blob from master %s:%d within %g s (%s)",
                                    o->node_rank, o->master_addr, o->master_port, o->timeout_s, detail);
        }
        if (!retry)
            return st;
        snprintf(last, sizeof last, "%s", inferd_last_error());
        INFERD_LOG_DEBUG("rendezvous: node %d retrying in %d ms: %s", o->node_rank, wait_ms, last);
        dist_net_sleep_ms(wait_ms, d);
    }
}

inferd_status dist_rdzv_join(const dist_rdzv_opts *o, void *buf, size_t cap, size_t *len)
{
    return dist_rdzv_join_keep(o, buf, cap, len, NULL);
}
