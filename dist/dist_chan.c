/* dist/dist_chan.c: see dist_chan.h for the contract and the wire format.
 *
 * The channel is the rendezvous's connections (dist_rdzv_serve_keep /
 * dist_rdzv_join_keep hand them over instead of closing them) plus a
 * failed flag. Every transfer is one of dist_net's loops over partial
 * reads and writes with a never deadline, so each wait is a poll() without
 * a timeout. A small frame is copied into one buffer with its header and
 * goes out in one send: with TCP_NODELAY two sends would be two packets.
 * Node 0 serves the peers one after the other, in node order; no peer
 * waits on another, so this cannot deadlock, and node 0's one link is the
 * bottleneck of a star either way.
 */
#include "dist/dist_chan.h"

#include <inttypes.h>
#include <stdbool.h>
#include <stdio.h>
#include <string.h>

#include "common/alloc.h"
#include "common/util.h"
#include "dist/dist_net.h"
#include "dist/dist_rdzv_internal.h"

#define CHAN_COALESCE 4096 /* frames with a payload up to this go out in one send */
#define CHAN_DRAIN 65536   /* scratch for dropping a message above the caller's cap */

struct dist_chan {
    int nnodes;
    int rank;
    int nfd;       /* node 0: nnodes-1; the others: 1 */
    int *fd;       /* node 0: fd[k-1] = node k's connection; the others: fd[0] = node 0's */
    bool failed;   /* a transfer failed: the streams may be cut mid-frame */
    char why[512]; /* the failure, for later calls */
};

/* ---- frames ---------------------------------------------------------------------- */

static void put_u64(uint8_t *p, uint64_t v)
{
    for (int i = 0; i < 8; i++)
        p[i] = (uint8_t)(v >> (8 * i));
}

static uint64_t get_u64(const uint8_t *p)
{
    uint64_t v = 0;
    for (int i = 0; i < 8; i++)
        v |= (uint64_t)p[i] << (8 * i);
    return v;
}

/* Send one frame: header and msg[0..len). */
static inferd_status frame_send(int fd, const void *msg, size_t len)
{
    const inferd_deadline never = inferd_deadline_never();
    uint8_t small[DIST_CHAN_FRAME_HEADER + CHAN_COALESCE];
    put_u64(small, len);
    if (len <= CHAN_COALESCE) {
        if (len)
            memcpy(small + DIST_CHAN_FRAME_HEADER, msg, len);
        return dist_net_write_full(fd, small, DIST_CHAN_FRAME_HEADER + len, never);
    }
    inferd_status st = dist_net_write_full(fd, small, DIST_CHAN_FRAME_HEADER, never);
    return st == INFERD_OK ? dist_net_write_full(fd, msg, len, never) : st;
}

/* Read one frame header: *n = its payload length. UNAVAILABLE when the
 * peer closed cleanly before it, IO on a reset or a cut header, FORMAT
 * above DIST_CHAN_MAX_MSG. */
static inferd_status frame_recv_header(int fd, uint64_t *n)
{
    uint8_t h[DIST_CHAN_FRAME_HEADER];
    inferd_status st = dist_net_read_next(fd, h, sizeof h, inferd_deadline_never());
    if (st != INFERD_OK)
        return st;
    *n = get_u64(h);
    if (*n > DIST_CHAN_MAX_MSG)
        return inferd_set_error(INFERD_ERR_FORMAT,
                                "a %" PRIu64 "-byte message exceeds the %" PRIu64
                                "-byte limit (not a channel stream?)",
                                *n, DIST_CHAN_MAX_MSG);
    return INFERD_OK;
}

/* Read and drop n payload bytes. */
static inferd_status frame_skip(int fd, uint64_t n)
{
    uint8_t scratch[CHAN_DRAIN];
    while (n > 0) {
        size_t k = (size_t)INFERD_MIN(n, (uint64_t)sizeof scratch);
        inferd_status st = dist_net_read_full(fd, scratch, k, inferd_deadline_never(), NULL);
        if (st != INFERD_OK)
            return st;
        n -= k;
    }
    return INFERD_OK;
}

/* ---- the channel ------------------------------------------------------------------- */

static dist_chan *chan_new(int nnodes, int rank, int nfd)
{
    dist_chan *c = inferd_calloc(1, sizeof *c);
    c->nnodes = nnodes;
    c->rank = rank;
    c->nfd = nfd;
    c->fd = inferd_calloc((size_t)(nfd > 0 ? nfd : 1), sizeof *c->fd);
    for (int i = 0; i < nfd; i++)
        c->fd[i] = -1;
    return c;
}

/* Close the connections (reset when the channel failed) and free c. */
static void chan_free(dist_chan *c)
{
    for (int i = 0; i < c->nfd; i++) {
        if (c->failed)
            dist_net_close_reset(c->fd[i]);
        else
            dist_net_close(c->fd[i]);
    }
    inferd_free(c->fd);
    inferd_free(c);
}

/* The channel fails with the thread's current error; returns st. */
static inferd_status chan_fail(dist_chan *c, inferd_status st)
{
    c->failed = true;
    snprintf(c->why, sizeof c->why, "%s", inferd_last_error());
    return st;
}

/* Who may make a call: node 0, nodes 1.., every node. */
typedef enum { CHAN_MASTER, CHAN_PEER, CHAN_ANY } chan_role;

/* OK when this node may make the call `what` (role) on c and c has not
 * failed; else INVALID_ARG (misuse) or IO (failed earlier, with why). */
static inferd_status chan_check(const dist_chan *c, chan_role role, const char *what)
{
    if (!c)
        return inferd_set_error(INFERD_ERR_INVALID_ARG, "channel: %s: no channel", what);
    if (role == CHAN_MASTER && c->rank != 0)
        return inferd_set_error(INFERD_ERR_INVALID_ARG, "channel: %s is node 0's; this is node %d", what,
                                c->rank);
    if (role == CHAN_PEER && c->rank == 0)
        return inferd_set_error(INFERD_ERR_INVALID_ARG, "channel: %s is for nodes 1..; this is node 0", what);
    if (c->failed)
        return inferd_set_error(INFERD_ERR_IO, "channel: node %d: %s on a channel that failed earlier: %s",
                                c->rank, what, c->why);
    return INFERD_OK;
}

static void chan_nodelay(dist_chan *c)
{
    for (int i = 0; i < c->nfd; i++)
        dist_net_nodelay(c->fd[i]);
}

/* ---- public ------------------------------------------------------------------------ */

inferd_status dist_chan_serve(dist_rdzv_listener *l, const void *blob, size_t len, dist_chan **out)
{
    if (out)
        *out = NULL;
    if (!l || !out) {
        dist_rdzv_close(l);
        return inferd_set_error(INFERD_ERR_INVALID_ARG, "channel: no listener or no output");
    }
    int nnodes = dist_rdzv_nnodes(l);
    dist_chan *c = chan_new(nnodes, 0, nnodes - 1);
    inferd_status st = dist_rdzv_serve_keep(l, blob, len, c->fd);
    dist_rdzv_close(l);
    if (st != INFERD_OK) {
        chan_free(c); /* serve_keep handed nothing over: every slot is -1 */
        return st;
    }
    chan_nodelay(c);
    *out = c;
    return INFERD_OK;
}

inferd_status dist_chan_join(const dist_rdzv_opts *o, void *buf, size_t cap, size_t *len, dist_chan **out)
{
    if (!out)
        return inferd_set_error(INFERD_ERR_INVALID_ARG, "channel: no output");
    *out = NULL;
    int fd = -1;
    inferd_status st = dist_rdzv_join_keep(o, buf, cap, len, &fd);
    if (st != INFERD_OK)
        return st;
    dist_chan *c = chan_new(o->nnodes, o->node_rank, 1);
    c->fd[0] = fd;
    chan_nodelay(c);
    *out = c;
    return INFERD_OK;
}

int dist_chan_nnodes(const dist_chan *c)
{
    return c->nnodes;
}

int dist_chan_node_rank(const dist_chan *c)
{
    return c->rank;
}

/* INVALID_ARG when msg[0..len) cannot be one message. */
static inferd_status check_msg(const void *msg, size_t len, const char *what)
{
    if (len && !msg)
        return inferd_set_error(INFERD_ERR_INVALID_ARG, "channel: %s: no bytes for length %zu", what, len);
    if ((uint64_t)len > DIST_CHAN_MAX_MSG)
        return inferd_set_error(INFERD_ERR_INVALID_ARG,
                                "channel: %s: %zu bytes exceed the %" PRIu64 "-byte message limit", what, len,
                                DIST_CHAN_MAX_MSG);
    return INFERD_OK;
}

inferd_status dist_chan_bcast(dist_chan *c, const void *msg, size_t len)
{
    inferd_status st = chan_check(c, CHAN_MASTER, "bcast");
    if (st == INFERD_OK)
        st = check_msg(msg, len, "bcast");
    for (int k = 1; st == INFERD_OK && k < c->nnodes; k++) {
        int fd = c->fd[k - 1];
        /* a peer that died is caught now, not one message later: a send
         * into a closed connection succeeds once before it fails */
        if (dist_net_peer_gone(fd))
            st = inferd_set_error(INFERD_ERR_IO, "it has closed or reset its connection");
        else
            st = frame_send(fd, msg, len);
        if (st != INFERD_OK)
            return chan_fail(c, dist_net_with_context(INFERD_ERR_IO,
                                                      "channel: broadcasting %zu bytes to node %d", len, k));
    }
    return st;
}

inferd_status dist_chan_recv(dist_chan *c, void *buf, size_t cap, size_t *len)
{
    inferd_status st = chan_check(c, CHAN_PEER, "recv");
    if (st == INFERD_OK && (!len || (cap && !buf)))
        st = inferd_set_error(INFERD_ERR_INVALID_ARG, "channel: recv: no buffer or no length output");
    if (st != INFERD_OK)
        return st;
    *len = 0;
    const int fd = c->fd[0];
    uint64_t n;
    st = frame_recv_header(fd, &n);
    if (st == INFERD_ERR_UNAVAILABLE)
        return inferd_set_error(st, "channel: node %d: node 0 closed the channel", c->rank);
    if (st != INFERD_OK)
        return chan_fail(c, dist_net_with_context(st, "channel: node %d receiving from node 0", c->rank));
    if (n > (uint64_t)cap) {
        if (frame_skip(fd, n) != INFERD_OK)
            return chan_fail(c, dist_net_with_context(INFERD_ERR_IO,
                                                      "channel: node %d dropping a %" PRIu64
                                                      "-byte message from node 0",
                                                      c->rank, n));
        *len = (size_t)n;
        return inferd_set_error(INFERD_ERR_TOO_LONG,
                                "channel: node %d: a %" PRIu64
                                "-byte message from node 0 exceeds the %zu-byte buffer (dropped)",
                                c->rank, n, cap);
    }
    st = n ? dist_net_read_full(fd, buf, (size_t)n, inferd_deadline_never(), NULL) : INFERD_OK;
    if (st != INFERD_OK)
        return chan_fail(c, dist_net_with_context(INFERD_ERR_IO,
                                                  "channel: node %d receiving a %" PRIu64
                                                  "-byte message from node 0",
                                                  c->rank, n));
    *len = (size_t)n;
    return INFERD_OK;
}

/* Node 0: node k's gather record into dst[0..len). */
static inferd_status gather_one(dist_chan *c, int k, void *dst, size_t len)
{
    const int fd = c->fd[k - 1];
    uint64_t n;
    inferd_status st = frame_recv_header(fd, &n);
    if (st == INFERD_ERR_UNAVAILABLE)
        return inferd_set_error(INFERD_ERR_IO, "channel: gathering from node %d: it closed its connection",
                                k);
    if (st != INFERD_OK)
        return dist_net_with_context(st, "channel: gathering from node %d", k);
    if (n != (uint64_t)len)
        return inferd_set_error(INFERD_ERR_FORMAT,
                                "channel: node %d sent a %" PRIu64
                                "-byte gather record, node 0 expects %zu (the nodes disagree on its size)",
                                k, n, len);
    st = len ? dist_net_read_full(fd, dst, len, inferd_deadline_never(), NULL) : INFERD_OK;
    if (st != INFERD_OK)
        return dist_net_with_context(INFERD_ERR_IO, "channel: gathering %zu bytes from node %d", len, k);
    return INFERD_OK;
}

inferd_status dist_chan_gather(dist_chan *c, const void *mine, size_t len, void *all)
{
    inferd_status st = chan_check(c, CHAN_ANY, "gather");
    if (st == INFERD_OK)
        st = check_msg(mine, len, "gather");
    if (st == INFERD_OK && c->rank == 0 && len && !all)
        st = inferd_set_error(INFERD_ERR_INVALID_ARG, "channel: gather: node 0 has no output buffer");
    if (st != INFERD_OK)
        return st;
    if (c->rank != 0) {
        if (frame_send(c->fd[0], mine, len) != INFERD_OK)
            return chan_fail(c, dist_net_with_context(INFERD_ERR_IO,
                                                      "channel: node %d sending its %zu-byte gather record",
                                                      c->rank, len));
        return INFERD_OK;
    }
    if (len)
        memcpy(all, mine, len);
    for (int k = 1; k < c->nnodes; k++) {
        st = gather_one(c, k, len ? (uint8_t *)all + (size_t)k * len : NULL, len);
        if (st != INFERD_OK)
            return chan_fail(c, st);
    }
    return INFERD_OK;
}

void dist_chan_close(dist_chan *c)
{
    if (c)
        chan_free(c);
}
