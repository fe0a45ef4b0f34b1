/* tests/dist/test_chan.c: the control channel (dist/dist_chan.h), on the
 * loopback only.
 *
 * As in test_rendezvous.c, node 0 runs in the test's thread and nodes
 * 1..nnodes-1 in threads, so one process plays a whole multi-node job. A
 * peer thread runs a script after its join and records the first thing it
 * found wrong (Check's asserts belong to the test's thread); the test
 * asserts on that record once the thread is joined. Payloads are
 * counter-based random bytes, regenerated (never stored twice) to check
 * them, so a 1 GiB message costs one buffer per side. A peer dying is a
 * peer thread closing its channel: the process must survive node 0's next
 * call (a SIGPIPE would kill the forked test and fail it).
 */
#include <dirent.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "common/rng.h"
#include "common/status.h"
#include "common/util.h"
#include "dist/dist_chan.h"
#include "dist/dist_rendezvous.h"
#include "test_util.h"

#define LOOPBACK "127.0.0.1"
#define MAX_NODES 4
#define BLOB_LEN 128          /* an NCCL unique id */
#define BIG ((size_t)8 << 20) /* the largest message of the ordinary tests */
#define GUARD 0xA5
#define N_SMALL 100 /* back-to-back small messages */
#define DEAD_RANK 2 /* the node that dies in the dead-peer tests */

/* ---- data ---------------------------------------------------------------------------- */

/* Word i of stream seed. */
static uint64_t rand_word(uint64_t seed, size_t i)
{
    return rng_mix64(rng_mix64(seed) ^ ((uint64_t)i * 0xD1B54A32D192ED03ull));
}

/* b[0..n) = the first n bytes of stream seed. */
static void fill_rand(void *b, size_t n, uint64_t seed)
{
    uint8_t *p = b;
    for (size_t i = 0; i < n; i += 8) {
        uint64_t w = rand_word(seed, i / 8);
        memcpy(p + i, &w, INFERD_MIN((size_t)8, n - i));
    }
}

/* The offset of the first byte of b[0..n) that differs from stream seed,
 * or n when none does. */
static size_t diff_rand(const void *b, size_t n, uint64_t seed)
{
    const uint8_t *p = b;
    for (size_t i = 0; i < n; i += 8) {
        uint64_t w = rand_word(seed, i / 8);
        size_t k = INFERD_MIN((size_t)8, n - i);
        if (memcmp(p + i, &w, k) != 0)
            for (size_t j = 0; j < k; j++)
                if (p[i + j] != ((const uint8_t *)&w)[j])
                    return i + j;
    }
    return n;
}

/* Small message i of a back-to-back run: 0..39 bytes that depend on i. */
static size_t small_msg(uint8_t *b, int i)
{
    size_t n = (size_t)(i % 40);
    for (size_t j = 0; j < n; j++)
        b[j] = (uint8_t)(i * 31 + (int)j);
    return n;
}

/* ---- the process ----------------------------------------------------------------------- */

static double thread_cpu_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}


#define FD_SNAP 4096

/* open[fd] for the descriptors open now (below FD_SNAP). */
static void fd_snapshot(bool *open)
{
    memset(open, 0, FD_SNAP * sizeof *open);
    DIR *d = opendir("/proc/self/fd");
    ck_assert_ptr_nonnull(d);
    for (struct dirent *e; (e = readdir(d));) {
        int fd = atoi(e->d_name);
        if (e->d_name[0] != '.' && fd < FD_SNAP && fd != dirfd(d)) /* the listing's own */
            open[fd] = true;
    }
    closedir(d);
}

/* The TCP sockets opened since `before`: how many, whether all have
 * TCP_NODELAY (*all_nodelay), how many are in CLOSE_WAIT (*close_wait: the
 * peer's FIN has arrived). */
static int new_sockets(const bool *before, bool *all_nodelay, int *close_wait)
{
    static bool now[FD_SNAP];
    int n = 0;
    fd_snapshot(now);
    *all_nodelay = true;
    *close_wait = 0;
    for (int fd = 0; fd < FD_SNAP; fd++) {
        int type = 0, nodelay = 0;
        struct tcp_info ti = {0};
        socklen_t tl = sizeof type, nl = sizeof nodelay, il = sizeof ti;
        if (!now[fd] || before[fd] || getsockopt(fd, SOL_SOCKET, SO_TYPE, &type, &tl) != 0 ||
            type != SOCK_STREAM)
            continue;
        n++;
        if (getsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &nodelay, &nl) != 0 || !nodelay)
            *all_nodelay = false;
        if (getsockopt(fd, IPPROTO_TCP, TCP_INFO, &ti, &il) == 0 && ti.tcpi_state == TCP_CLOSE_WAIT)
            (*close_wait)++;
    }
    return n;
}

/* Wait (up to 5 s) until a socket opened since `before` has received its
 * peer's FIN; false if none did. */
static bool wait_close_wait(const bool *before)
{
    bool nodelay;
    int close_wait = 0;
    for (int i = 0; i < 500 && !close_wait; i++) {
        new_sockets(before, &nodelay, &close_wait);
        if (!close_wait)
            usleep(10 * 1000);
    }
    return close_wait > 0;
}

/* ---- nodes in threads ------------------------------------------------------------------- */

typedef struct node node;
typedef void (*node_script)(node *n);

struct node {
    int nnodes, rank, port;
    node_script script; /* run after the join, on the open channel */
    const void *arg;    /* the script's parameters */
    dist_chan *c;
    uint8_t blob[DIST_RDZV_MAX_BLOB];
    size_t blob_len;
    inferd_status join_st;
    char join_err[1024];
    int count;            /* script-defined: messages received, rounds done */
    inferd_status end_st; /* the status the script stopped on */
    char end_err[1024];
    double wall_s, cpu_s; /* script-defined spans */
    char fail[1024];      /* the first failed check, "" when none */
    bool joined;          /* its thread has been joined */
    pthread_t th;
};

static void node_failf(node *n, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

/* Record the first failed check of n (later ones are consequences). */
static void node_failf(node *n, const char *fmt, ...)
{
    if (n->fail[0])
        return;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(n->fail, sizeof n->fail, fmt, ap);
    va_end(ap);
}

/* Record st (and the thread's message) as where the script stopped. */
static void node_end(node *n, inferd_status st)
{
    n->end_st = st;
    snprintf(n->end_err, sizeof n->end_err, "%s", inferd_last_error());
}

/* dist_chan_recv that must deliver a message: false (and a recorded
 * failure) when it does not. */
static bool node_recv(node *n, void *buf, size_t cap, size_t *len, const char *what)
{
    inferd_status st = dist_chan_recv(n->c, buf, cap, len);
    if (st == INFERD_OK)
        return true;
    node_failf(n, "%s: %s (%s)", what, inferd_status_str(st), inferd_last_error());
    return false;
}

/* The next recv must be the clean end: node 0 closed the channel. */
static void node_expect_end(node *n)
{
    uint8_t b[8];
    size_t len = 99;
    inferd_status st = dist_chan_recv(n->c, b, sizeof b, &len);
    if (st != INFERD_ERR_UNAVAILABLE || len != 0 || !strstr(inferd_last_error(), "node 0 closed the channel"))
        node_failf(n, "end: %s, len %zu (%s), want unavailable", inferd_status_str(st), len,
                   inferd_last_error());
}

static void *node_main(void *arg)
{
    node *n = arg;
    dist_rdzv_opts o = {.master_addr = LOOPBACK,
                        .master_port = n->port,
                        .nnodes = n->nnodes,
                        .node_rank = n->rank,
                        .timeout_s = 30};
    n->join_st = dist_chan_join(&o, n->blob, sizeof n->blob, &n->blob_len, &n->c);
    snprintf(n->join_err, sizeof n->join_err, "%s", inferd_last_error());
    if (n->join_st == INFERD_OK) {
        if (dist_chan_nnodes(n->c) != n->nnodes || dist_chan_node_rank(n->c) != n->rank)
            node_failf(n, "channel says nnodes %d rank %d", dist_chan_nnodes(n->c),
                       dist_chan_node_rank(n->c));
        if (n->script)
            n->script(n);
    }
    dist_chan_close(n->c); /* NULL when the script closed it */
    n->c = NULL;
    return NULL;
}

static void node_start(node *n, int nnodes, int rank, int port, node_script script, const void *arg)
{
    memset(n, 0, sizeof *n);
    n->nnodes = nnodes;
    n->rank = rank;
    n->port = port;
    n->script = script;
    n->arg = arg;
    ck_assert_int_eq(pthread_create(&n->th, NULL, node_main, n), 0);
}

static void node_join(node *n)
{
    if (!n->joined)
        pthread_join(n->th, NULL);
    n->joined = true;
}

/* Wait for n: its join got the blob and its script found nothing wrong. */
static void node_finish(node *n)
{
    uint8_t want[BLOB_LEN];
    node_join(n);
    ck_assert_msg(n->join_st == INFERD_OK, "node %d join: %s", n->rank, n->join_err);
    fill_rand(want, sizeof want, 42);
    ck_assert_uint_eq(n->blob_len, BLOB_LEN);
    ck_assert_msg(memcmp(n->blob, want, BLOB_LEN) == 0, "node %d: blob differs", n->rank);
    ck_assert_msg(!n->fail[0], "node %d (of %d): %s", n->rank, n->nnodes, n->fail);
}

/* Node 0: listen on an any-port loopback socket, start nodes 1..nnodes-1
 * (peers[rank]) on script(arg), serve them the blob; node 0's channel. */
static dist_chan *star_up(node *peers, int nnodes, node_script script, const void *arg)
{
    dist_rdzv_opts o = {.master_addr = LOOPBACK, .master_port = 0, .nnodes = nnodes, .timeout_s = 30};
    dist_rdzv_listener *l = NULL;
    ck_assert_msg(dist_rdzv_listen(&o, &l) == INFERD_OK, "%s", inferd_last_error());
    int port = dist_rdzv_port(l);
    for (int r = 1; r < nnodes; r++)
        node_start(&peers[r], nnodes, r, port, script, arg);
    uint8_t blob[BLOB_LEN];
    fill_rand(blob, sizeof blob, 42);
    dist_chan *c = NULL;
    ck_assert_msg(dist_chan_serve(l, blob, sizeof blob, &c) == INFERD_OK, "serve, %d nodes: %s", nnodes,
                  inferd_last_error());
    ck_assert_int_eq(dist_chan_nnodes(c), nnodes);
    ck_assert_int_eq(dist_chan_node_rank(c), 0);
    return c;
}

/* Node 0's call must have failed with st and a message containing frag. */
static void expect_error(inferd_status got, inferd_status st, const char *frag, const char *what)
{
    ck_assert_msg(got == st, "%s: %s (%s), want %s", what, inferd_status_str(got), inferd_last_error(),
                  inferd_status_str(st));
    ck_assert_msg(strstr(inferd_last_error(), frag), "%s: '%s' lacks '%s'", what, inferd_last_error(), frag);
}

static const int k_node_counts[] = {1, 2, 4};

/* ---- misuse, one node ------------------------------------------------------------------- */

START_TEST(test_api_misuse)
{
    int fds0 = test_open_fds();
    dist_chan *c = (dist_chan *)&c;
    ck_assert_int_eq(dist_chan_serve(NULL, "x", 1, &c), INFERD_ERR_INVALID_ARG);
    ck_assert_ptr_null(c);

    /* the listener is consumed on every failure: no socket left open */
    dist_rdzv_opts o = {.master_addr = LOOPBACK, .master_port = 0, .nnodes = 2, .timeout_s = 5};
    dist_rdzv_listener *l = NULL;
    ck_assert_int_eq(dist_rdzv_listen(&o, &l), INFERD_OK);
    ck_assert_int_eq(dist_chan_serve(l, "x", 1, NULL), INFERD_ERR_INVALID_ARG);
    ck_assert_int_eq(dist_rdzv_listen(&o, &l), INFERD_OK);
    static uint8_t big[DIST_RDZV_MAX_BLOB + 1];
    expect_error(dist_chan_serve(l, big, sizeof big, &c), INFERD_ERR_INVALID_ARG, "4097-byte blob exceeds",
                 "serve, blob too large");
    ck_assert_ptr_null(c);
    ck_assert_int_eq(test_open_fds(), fds0);

    uint8_t buf[8];
    size_t len;
    o.master_port = 29500;
    expect_error(dist_chan_join(&o, buf, sizeof buf, &len, &c), INFERD_ERR_INVALID_ARG,
                 "--node-rank 0 is the master", "join as node 0");
    ck_assert_ptr_null(c);
    o.node_rank = 1;
    ck_assert_int_eq(dist_chan_join(&o, buf, sizeof buf, &len, NULL), INFERD_ERR_INVALID_ARG);

    /* node 0 of one node: recv is a peer's call, gather needs an output */
    o = (dist_rdzv_opts){.master_addr = LOOPBACK, .master_port = 0, .nnodes = 1, .timeout_s = 5};
    ck_assert_int_eq(dist_rdzv_listen(&o, &l), INFERD_OK);
    ck_assert_int_eq(dist_chan_serve(l, NULL, 0, &c), INFERD_OK);
    expect_error(dist_chan_recv(c, buf, sizeof buf, &len), INFERD_ERR_INVALID_ARG, "for nodes 1..",
                 "recv on node 0");
    expect_error(dist_chan_gather(c, buf, 4, NULL), INFERD_ERR_INVALID_ARG, "no output buffer",
                 "gather without output");
    expect_error(dist_chan_bcast(c, NULL, 5), INFERD_ERR_INVALID_ARG, "no bytes for length 5", "bcast NULL");
    ck_assert_int_eq(dist_chan_bcast(c, NULL, 0), INFERD_OK);
    expect_error(dist_chan_bcast(NULL, "x", 1), INFERD_ERR_INVALID_ARG, "no channel", "bcast, no channel");
    dist_chan_close(c);
    dist_chan_close(NULL);
}
END_TEST

/* One node: no socket, bcast is a no-op, gather copies node 0's record. */
START_TEST(test_single_node)
{
    int fds0 = test_open_fds();
    dist_rdzv_opts o = {.master_addr = "bad..host", .master_port = 0, .nnodes = 1, .timeout_s = 5};
    dist_rdzv_listener *l = NULL;
    dist_chan *c = NULL;
    ck_assert_int_eq(dist_rdzv_listen(&o, &l), INFERD_OK);
    ck_assert_int_eq(dist_chan_serve(l, "id", 2, &c), INFERD_OK);
    ck_assert(dist_chan_nnodes(c) == 1 && dist_chan_node_rank(c) == 0);
    ck_assert_int_eq(test_open_fds(), fds0);
    ck_assert_int_eq(dist_chan_bcast(c, "step", 4), INFERD_OK);
    uint8_t mine[24], all[24 + 8];
    fill_rand(mine, sizeof mine, 7);
    memset(all, GUARD, sizeof all);
    ck_assert_int_eq(dist_chan_gather(c, mine, sizeof mine, all), INFERD_OK);
    ck_assert(memcmp(all, mine, sizeof mine) == 0 && all[sizeof mine] == GUARD);
    ck_assert_int_eq(dist_chan_gather(c, NULL, 0, NULL), INFERD_OK);
    dist_chan_close(c);
}
END_TEST

/* ---- bcast ------------------------------------------------------------------------------ */

static const size_t k_bcast_sizes[] = {0, 1, 7, 65537, BIG};

/* Every size of k_bcast_sizes intact and in order, then N_SMALL small
 * messages, then the clean end. A peer's bcast is refused first. */
static void script_bcast(node *n)
{
    if (dist_chan_bcast(n->c, "x", 1) != INFERD_ERR_INVALID_ARG)
        node_failf(n, "a peer's bcast was not refused");
    uint8_t *buf = malloc(BIG);
    size_t len;
    for (size_t i = 0; i < INFERD_ARRAY_LEN(k_bcast_sizes) && !n->fail[0]; i++) {
        size_t want = k_bcast_sizes[i], at;
        if (!node_recv(n, buf, BIG, &len, "sizes"))
            break;
        if (len != want)
            node_failf(n, "message %zu: %zu bytes, want %zu", i, len, want);
        else if ((at = diff_rand(buf, len, 100 + i)) != len)
            node_failf(n, "message %zu (%zu bytes) differs at byte %zu", i, len, at);
    }
    for (int i = 0; i < N_SMALL && !n->fail[0]; i++) {
        uint8_t want[64];
        size_t wlen = small_msg(want, i);
        if (node_recv(n, buf, 64, &len, "small") && (len != wlen || memcmp(buf, want, len) != 0))
            node_failf(n, "small message %d: %zu bytes, want %zu, or other bytes", i, len, wlen);
        n->count += !n->fail[0];
    }
    if (!n->fail[0])
        node_expect_end(n);
    free(buf);
}

/* 1, 2 and 4 nodes: the blob, every size, 100 back-to-back messages, the
 * clean end; TCP_NODELAY on every channel socket; nothing left open. */
START_TEST(test_bcast_table)
{
    static node peers[MAX_NODES];
    static bool before[FD_SNAP];
    uint8_t *msg = malloc(BIG);
    for (size_t t = 0; t < INFERD_ARRAY_LEN(k_node_counts); t++) {
        int nn = k_node_counts[t], fds0 = test_open_fds();
        fd_snapshot(before);
        dist_chan *c = star_up(peers, nn, script_bcast, NULL);
        bool nodelay;
        int close_wait;
        ck_assert_int_eq(new_sockets(before, &nodelay, &close_wait), 2 * (nn - 1)); /* both ends of each */
        ck_assert_msg(nodelay, "a channel socket without TCP_NODELAY");
        for (size_t i = 0; i < INFERD_ARRAY_LEN(k_bcast_sizes); i++) {
            fill_rand(msg, k_bcast_sizes[i], 100 + i);
            ck_assert_msg(dist_chan_bcast(c, msg, k_bcast_sizes[i]) == INFERD_OK, "%d nodes, %zu bytes: %s",
                          nn, k_bcast_sizes[i], inferd_last_error());
        }
        for (int i = 0; i < N_SMALL; i++) {
            size_t len = small_msg(msg, i);
            ck_assert_msg(dist_chan_bcast(c, msg, len) == INFERD_OK, "small %d: %s", i, inferd_last_error());
        }
        dist_chan_close(c);
        for (int r = 1; r < nn; r++) {
            node_finish(&peers[r]);
            ck_assert_int_eq(peers[r].count, N_SMALL);
        }
        ck_assert_int_eq(test_open_fds(), fds0);
    }
    free(msg);
}
END_TEST

/* ---- gather ------------------------------------------------------------------------------ */

static const size_t k_gather_sizes[] = {0, 1, 24, 100000};
#define GATHER_ROUNDS 3

static uint64_t record_seed(int rank, size_t size, int round)
{
    return (uint64_t)rank * 7919u + size * 31u + (uint64_t)round;
}

static void script_gather(node *n)
{
    uint8_t *mine = malloc(100000);
    for (size_t s = 0; s < INFERD_ARRAY_LEN(k_gather_sizes) && !n->fail[0]; s++)
        for (int round = 0; round < GATHER_ROUNDS && !n->fail[0]; round++) {
            fill_rand(mine, k_gather_sizes[s], record_seed(n->rank, k_gather_sizes[s], round));
            inferd_status st = dist_chan_gather(n->c, mine, k_gather_sizes[s], NULL);
            if (st != INFERD_OK)
                node_failf(n, "gather %zu bytes: %s", k_gather_sizes[s], inferd_last_error());
        }
    if (!n->fail[0])
        node_expect_end(n);
    free(mine);
}

/* 1, 2 and 4 nodes gather records of 0, 1, 24 and 100000 bytes, three
 * rounds each: node k's record lands at all[k * len], nothing past. */
START_TEST(test_gather_table)
{
    static node peers[MAX_NODES];
    const size_t max = 100000;
    uint8_t *mine = malloc(max), *all = malloc(MAX_NODES * max + 64);
    for (size_t t = 0; t < INFERD_ARRAY_LEN(k_node_counts); t++) {
        int nn = k_node_counts[t], fds0 = test_open_fds();
        dist_chan *c = star_up(peers, nn, script_gather, NULL);
        for (size_t s = 0; s < INFERD_ARRAY_LEN(k_gather_sizes); s++)
            for (int round = 0; round < GATHER_ROUNDS; round++) {
                size_t len = k_gather_sizes[s];
                fill_rand(mine, len, record_seed(0, len, round));
                memset(all, GUARD, (size_t)nn * len + 64);
                ck_assert_msg(dist_chan_gather(c, mine, len, all) == INFERD_OK, "%d nodes, %zu bytes: %s", nn,
                              len, inferd_last_error());
                for (int k = 0; k < nn; k++)
                    ck_assert_msg(diff_rand(all + (size_t)k * len, len, record_seed(k, len, round)) == len,
                                  "%d nodes, %zu bytes, round %d: node %d's record differs", nn, len, round,
                                  k);
                for (size_t i = (size_t)nn * len; i < (size_t)nn * len + 64; i++)
                    ck_assert_msg(all[i] == GUARD, "byte %zu written past the records", i);
            }
        dist_chan_close(c);
        for (int r = 1; r < nn; r++)
            node_finish(&peers[r]);
        ck_assert_int_eq(test_open_fds(), fds0);
    }
    free(all);
    free(mine);
}
END_TEST

/* ---- recv: too long, idle, end -------------------------------------------------------------- */

/* Node 0 sends 100, 10, 8 MiB and 3 bytes; the peer's buffer holds 50. */
static const size_t k_too_long_sizes[] = {100, 10, BIG, 3};
#define TOO_LONG_CAP 50

static void script_too_long(node *n)
{
    uint8_t buf[TOO_LONG_CAP + 14];
    for (size_t i = 0; i < INFERD_ARRAY_LEN(k_too_long_sizes) && !n->fail[0]; i++) {
        size_t want = k_too_long_sizes[i], len = 0;
        memset(buf, GUARD, sizeof buf);
        inferd_status st = dist_chan_recv(n->c, buf, TOO_LONG_CAP, &len);
        char frag[96];
        snprintf(frag, sizeof frag, "a %zu-byte message from node 0 exceeds the %d-byte buffer (dropped)",
                 want, TOO_LONG_CAP);
        if (want > TOO_LONG_CAP) {
            if (st != INFERD_ERR_TOO_LONG || len != want || !strstr(inferd_last_error(), frag))
                node_failf(n, "message %zu: %s, len %zu (%s), want too long with '%s'", i,
                           inferd_status_str(st), len, inferd_last_error(), frag);
            for (size_t j = 0; j < sizeof buf; j++)
                if (buf[j] != GUARD) {
                    node_failf(n, "message %zu: dropped, yet byte %zu of the buffer was written", i, j);
                    break;
                }
        } else if (st != INFERD_OK || len != want || diff_rand(buf, len, 200 + i) != len ||
                   buf[len] != GUARD) {
            node_failf(n, "message %zu after a dropped one: %s, %zu bytes (%s)", i, inferd_status_str(st),
                       len, inferd_last_error());
        }
    }
    if (!n->fail[0])
        node_expect_end(n);
}

/* TOO_LONG drops the message (buffer untouched, *len its size) and the
 * stream stays framed: the next recv returns the next message whole. */
START_TEST(test_recv_too_long)
{
    static node peers[2];
    uint8_t *msg = malloc(BIG);
    dist_chan *c = star_up(peers, 2, script_too_long, NULL);
    for (size_t i = 0; i < INFERD_ARRAY_LEN(k_too_long_sizes); i++) {
        fill_rand(msg, k_too_long_sizes[i], 200 + i);
        ck_assert_msg(dist_chan_bcast(c, msg, k_too_long_sizes[i]) == INFERD_OK, "%s", inferd_last_error());
    }
    dist_chan_close(c);
    node_finish(&peers[1]);
    free(msg);
}
END_TEST

/* A peer blocked in recv while node 0 is idle: the message, then the end. */
static void script_idle(node *n)
{
    uint8_t buf[16];
    size_t len;
    double t0 = util_now_s(), c0 = thread_cpu_s();
    if (node_recv(n, buf, sizeof buf, &len, "after idling") && (len != 5 || memcmp(buf, "hello", 5) != 0))
        node_failf(n, "got %zu bytes, want 'hello'", len);
    if (!n->fail[0])
        node_expect_end(n);
    n->wall_s = util_now_s() - t0;
    n->cpu_s = thread_cpu_s() - c0;
}

/* A peer waits for node 0 without a deadline and without spinning: 0.7 s
 * of waiting costs it almost no CPU. A recv already waiting when node 0
 * closes returns UNAVAILABLE. */
START_TEST(test_recv_waits_idle)
{
    static node peers[2];
    dist_chan *c = star_up(peers, 2, script_idle, NULL);
    usleep(400 * 1000);
    ck_assert_int_eq(dist_chan_bcast(c, "hello", 5), INFERD_OK);
    usleep(300 * 1000);
    dist_chan_close(c);
    node_finish(&peers[1]);
    ck_assert_double_ge(peers[1].wall_s, 0.65);
    ck_assert_msg(peers[1].cpu_s < 0.1, "the waiting peer used %.3f s of CPU in %.3f s", peers[1].cpu_s,
                  peers[1].wall_s);
}
END_TEST

/* ---- dead peers, disagreeing peers -------------------------------------------------------- */

typedef struct {
    const char *name;
    size_t len;        /* node 0's bcast size, or the gather record size */
    bool gather;       /* node 0 gathers instead of broadcasting */
    bool dies_at_once; /* the dead node closes right after its join (else after 0.4 s, unread data pending) */
    const char *want;  /* in node 0's error */
} dead_case;

/* Node DEAD_RANK closes its channel; the others (gather first when the
 * case does) count messages until recv fails. */
static void script_dead(node *n)
{
    const dead_case *dc = n->arg;
    if (n->rank == DEAD_RANK) {
        if (!dc->dies_at_once)
            usleep(400 * 1000);
        dist_chan_close(n->c);
        n->c = NULL;
        return;
    }
    uint8_t *buf = malloc(BIG);
    size_t len;
    memset(buf, n->rank, dc->len);
    inferd_status st = dc->gather ? dist_chan_gather(n->c, buf, dc->len, NULL) : INFERD_OK;
    /* node 0 reads node 1's record before it meets the dead node; node 3's
     * send may find node 0 already gone (then recv refuses: failed earlier) */
    if (st != INFERD_OK && n->rank < DEAD_RANK)
        node_failf(n, "gather: %s", inferd_last_error());
    while ((st = dist_chan_recv(n->c, buf, BIG, &len)) == INFERD_OK)
        n->count++;
    node_end(n, st);
    free(buf);
}

/* A peer that died: node 0's call fails with IO naming it (the process
 * survives: no SIGPIPE), later calls fail too, and node 0 closing the
 * failed channel resets it, so the live peers see IO, not the clean end.
 * The peers before the dead one in node order got the failed bcast. */
static void run_dead_case(const dead_case *dc)
{
    static node peers[MAX_NODES];
    static bool before[FD_SNAP];
    uint8_t *msg = malloc(BIG), all[MAX_NODES * 8];
    memset(msg, 0, dc->len);
    int fds0 = test_open_fds();
    fd_snapshot(before);
    dist_chan *c = star_up(peers, MAX_NODES, script_dead, dc);
    if (dc->dies_at_once) {
        /* node 0's end has seen the FIN: a plain send would still succeed
         * once there; bcast must notice the hang-up itself */
        node_join(&peers[DEAD_RANK]);
        ck_assert_msg(wait_close_wait(before), "%s: node 0 never saw the FIN", dc->name);
    }
    inferd_status st = dc->gather ? dist_chan_gather(c, msg, dc->len, all) : dist_chan_bcast(c, msg, dc->len);
    expect_error(st, INFERD_ERR_IO, dc->want, dc->name);
    expect_error(dist_chan_bcast(c, "x", 1), INFERD_ERR_IO, "failed earlier", dc->name);
    expect_error(dist_chan_gather(c, "x", 1, all), INFERD_ERR_IO, dc->want, dc->name);
    dist_chan_close(c);
    for (int r = 1; r < MAX_NODES; r++) {
        node_finish(&peers[r]);
        if (r == DEAD_RANK)
            continue;
        int want = !dc->gather && r < DEAD_RANK; /* node order: the ones before got it */
        ck_assert_msg(peers[r].count == want, "%s: node %d got %d messages, want %d", dc->name, r,
                      peers[r].count, want);
        ck_assert_msg(peers[r].end_st == INFERD_ERR_IO, "%s: node %d ended with %s (%s), want IO", dc->name,
                      r, inferd_status_str(peers[r].end_st), peers[r].end_err);
    }
    ck_assert_msg(test_open_fds() == fds0, "%s: a socket left open", dc->name);
    free(msg);
}

START_TEST(test_dead_peer_table)
{
    static const dead_case cases[] = {
        {"bcast after a peer closed", 16, false, true, "broadcasting 16 bytes to node 2"},
        {"bcast 8 MiB, the peer dies mid-message", BIG, false, false, "broadcasting 8388608 bytes to node 2"},
        {"gather after a peer closed", 8, true, true, "gathering from node 2: it closed its connection"},
    };
    for (size_t i = 0; i < INFERD_ARRAY_LEN(cases); i++)
        run_dead_case(&cases[i]);
}
END_TEST

typedef struct {
    int nnodes, bad_rank;
} mismatch_case;

/* Gather a record of 8 bytes (16 on the bad rank), then recv until it fails. */
static void script_mismatch(node *n)
{
    const mismatch_case *mc = n->arg;
    uint8_t rec[16] = {0};
    if (dist_chan_gather(n->c, rec, n->rank == mc->bad_rank ? 16 : 8, NULL) != INFERD_OK)
        node_failf(n, "gather: %s", inferd_last_error());
    size_t len;
    inferd_status st;
    while ((st = dist_chan_recv(n->c, rec, sizeof rec, &len)) == INFERD_OK)
        n->count++;
    node_end(n, st);
}

/* Nodes that disagree on a gather's size: FORMAT naming the node, the
 * channel failed, every peer sees IO. */
START_TEST(test_gather_size_mismatch)
{
    static const mismatch_case cases[] = {{2, 1}, {4, 3}};
    static node peers[MAX_NODES];
    for (size_t i = 0; i < INFERD_ARRAY_LEN(cases); i++) {
        const mismatch_case *mc = &cases[i];
        uint8_t rec[8] = {0}, all[MAX_NODES * 8];
        char frag[96];
        dist_chan *c = star_up(peers, mc->nnodes, script_mismatch, mc);
        snprintf(frag, sizeof frag, "node %d sent a 16-byte gather record, node 0 expects 8", mc->bad_rank);
        expect_error(dist_chan_gather(c, rec, sizeof rec, all), INFERD_ERR_FORMAT, frag, "mismatch");
        expect_error(dist_chan_gather(c, rec, sizeof rec, all), INFERD_ERR_IO, "failed earlier",
                     "after mismatch");
        dist_chan_close(c);
        for (int r = 1; r < mc->nnodes; r++) {
            node_finish(&peers[r]);
            ck_assert_int_eq(peers[r].count, 0);
            ck_assert_msg(peers[r].end_st == INFERD_ERR_IO, "node %d: %s (%s)", r,
                          inferd_status_str(peers[r].end_st), peers[r].end_err);
        }
    }
}
END_TEST

/* ---- all-reduce over the star ------------------------------------------------------------- */

#define AR_ROUNDS 200
#define AR_MAX 1024 /* uint64 elements: rounds cross the one-send bound of small frames */

static size_t ar_len(int round)
{
    return 1 + (size_t)(round * 37 % AR_MAX);
}

static uint64_t ar_value(int rank, int round, size_t j)
{
    return (uint64_t)(rank + 1) * 1000003u * (uint64_t)(round + 1) + j * 7u + (uint64_t)rank;
}

static uint64_t ar_sum(int nnodes, int round, size_t j)
{
    uint64_t s = 0;
    for (int k = 0; k < nnodes; k++)
        s += ar_value(k, round, j);
    return s;
}

/* Each round: send this node's vector, receive the sum, check it. */
static void script_allreduce(node *n)
{
    uint64_t mine[AR_MAX], sum[AR_MAX];
    for (int round = 0; round < AR_ROUNDS && !n->fail[0]; round++) {
        size_t m = ar_len(round), len;
        for (size_t j = 0; j < m; j++)
            mine[j] = ar_value(n->rank, round, j);
        if (dist_chan_gather(n->c, mine, m * sizeof *mine, NULL) != INFERD_OK) {
            node_failf(n, "round %d gather: %s", round, inferd_last_error());
            break;
        }
        if (!node_recv(n, sum, sizeof sum, &len, "sum"))
            break;
        if (len != m * sizeof *sum)
            node_failf(n, "round %d: sum of %zu bytes, want %zu", round, len, m * sizeof *sum);
        for (size_t j = 0; j < m && !n->fail[0]; j++)
            if (sum[j] != ar_sum(n->nnodes, round, j))
                node_failf(n, "round %d: sum[%zu] = %llu, want %llu", round, j, (unsigned long long)sum[j],
                           (unsigned long long)ar_sum(n->nnodes, round, j));
        n->count += !n->fail[0];
    }
    if (!n->fail[0])
        node_expect_end(n);
}

/* 4 nodes, 200 rounds of gather, sum on node 0, bcast, each checked on
 * every node: the pattern of an all-reduce over the star. */
START_TEST(test_allreduce_star)
{
    static node peers[MAX_NODES];
    static uint64_t all[MAX_NODES * AR_MAX];
    uint64_t mine[AR_MAX], sum[AR_MAX];
    dist_chan *c = star_up(peers, MAX_NODES, script_allreduce, NULL);
    double t0 = util_now_s();
    for (int round = 0; round < AR_ROUNDS; round++) {
        size_t m = ar_len(round);
        for (size_t j = 0; j < m; j++)
            mine[j] = ar_value(0, round, j);
        ck_assert_msg(dist_chan_gather(c, mine, m * sizeof *mine, all) == INFERD_OK, "round %d: %s", round,
                      inferd_last_error());
        for (size_t j = 0; j < m; j++) {
            sum[j] = 0;
            for (int k = 0; k < MAX_NODES; k++)
                sum[j] += all[(size_t)k * m + j];
            ck_assert_msg(sum[j] == ar_sum(MAX_NODES, round, j), "round %d, element %zu", round, j);
        }
        ck_assert_msg(dist_chan_bcast(c, sum, m * sizeof *sum) == INFERD_OK, "round %d: %s", round,
                      inferd_last_error());
    }
    double elapsed = util_now_s() - t0;
    dist_chan_close(c);
    for (int r = 1; r < MAX_NODES; r++) {
        node_finish(&peers[r]);
        ck_assert_int_eq(peers[r].count, AR_ROUNDS);
    }
    printf("allreduce over the star: %d nodes, %d rounds in %.3f s (%.0f us a round)\n", MAX_NODES, AR_ROUNDS,
           elapsed, elapsed / AR_ROUNDS * 1e6);
    /* a small message stalled by Nagle and delayed ACKs costs ~40 ms a round */
    ck_assert_msg(elapsed < 4.0, "%d rounds took %.3f s", AR_ROUNDS, elapsed);
}
END_TEST

/* ---- 1 GiB ----------------------------------------------------------------------------------- */

#define HUGE_MSG ((size_t)1 << 30)
#define HUGE_RECORD ((size_t)256 << 20)

/* Receive 1 GiB, then gather-send 256 MiB of it (regenerated). */
static void script_huge(node *n)
{
    uint8_t *buf = malloc(HUGE_MSG);
    size_t len;
    if (!buf) {
        node_failf(n, "no memory for 1 GiB");
        return;
    }
    if (node_recv(n, buf, HUGE_MSG, &len, "1 GiB") && (len != HUGE_MSG || diff_rand(buf, len, 300) != len))
        node_failf(n, "1 GiB message: %zu bytes, or differs", len);
    fill_rand(buf, HUGE_RECORD, 301);
    if (!n->fail[0] && dist_chan_gather(n->c, buf, HUGE_RECORD, NULL) != INFERD_OK)
        node_failf(n, "gather 256 MiB: %s", inferd_last_error());
    if (!n->fail[0])
        node_expect_end(n);
    free(buf);
}

/* A 1 GiB bcast and a 256 MiB gather record arrive intact (partial
 * reads and writes over a socket buffer of a few MiB). */
START_TEST(test_huge_message)
{
    static node peers[2];
    uint8_t *msg = malloc(HUGE_MSG);
    ck_assert_ptr_nonnull(msg);
    fill_rand(msg, HUGE_MSG, 300);
    dist_chan *c = star_up(peers, 2, script_huge, NULL);
    double t0 = util_now_s();
    ck_assert_msg(dist_chan_bcast(c, msg, HUGE_MSG) == INFERD_OK, "%s", inferd_last_error());
    double t_bcast = util_now_s() - t0;
    /* all = msg[0 .. 512 MiB), node 0's record msg[512 MiB ..) */
    uint8_t *mine = msg + 2 * HUGE_RECORD;
    fill_rand(mine, HUGE_RECORD, 300);
    ck_assert_msg(dist_chan_gather(c, mine, HUGE_RECORD, msg) == INFERD_OK, "%s", inferd_last_error());
    ck_assert(diff_rand(msg, HUGE_RECORD, 300) == HUGE_RECORD);
    ck_assert(diff_rand(msg + HUGE_RECORD, HUGE_RECORD, 301) == HUGE_RECORD);
    dist_chan_close(c);
    node_finish(&peers[1]);
    printf("1 GiB bcast to one peer: %.3f s\n", t_bcast);
    free(msg);
}
END_TEST

int main(void)
{
    Suite *s = suite_create("dist_chan");
    TCase *tc = tcase_create("core");
    tcase_set_timeout(tc, 120);
    tcase_add_test(tc, test_api_misuse);
    tcase_add_test(tc, test_single_node);
    tcase_add_test(tc, test_bcast_table);
    tcase_add_test(tc, test_gather_table);
    tcase_add_test(tc, test_recv_too_long);
    tcase_add_test(tc, test_recv_waits_idle);
    tcase_add_test(tc, test_dead_peer_table);
    tcase_add_test(tc, test_gather_size_mismatch);
    tcase_add_test(tc, test_allreduce_star);
    suite_add_tcase(s, tc);
    TCase *big = tcase_create("huge");
    tcase_set_timeout(big, 300);
    tcase_add_test(big, test_huge_message);
    suite_add_tcase(s, big);
    return test_run_suite(s);
}
