/* tests/dist/test_rendezvous.c: the multi-host rendezvous (dist/), on the
 * loopback only.
 *
 * The master runs in the test's thread and the joiners in threads (each
 * with its own error message: inferd's is per thread), so one process
 * plays a whole multi-node job. Hostile peers and hostile masters are raw
 * sockets scripted by tables; their bytes are written here from the wire
 * format in dist_rendezvous.h rather than by the library, so the tests
 * also pin that format. Timing checks are one-sided with generous slack:
 * a deadline must be kept, not hit to the millisecond.
 */
#include <arpa/inet.h>
#include <math.h>
#include <netinet/in.h>
#include <pthread.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <unistd.h>

#include "common/opt.h"
#include "common/status.h"
#include "common/util.h"
#include "dist/dist_rendezvous.h"
#include "test_util.h"

#define LOOPBACK "127.0.0.1"
/* A name the resolver refuses without sending a query (an empty label):
 * the tests never reach past the loopback, not even a DNS server. */
#define BAD_HOST "bad..host"
#define GUARD 0xA5  /* fill of joiner buffers: bytes past the blob must keep it */
#define SLACK_S 1.0 /* scheduling slack on a loaded 2-core machine (and ASan) */

static dist_rdzv_opts opts_for(int nnodes, int rank, int port, double timeout_s)
{
    return (dist_rdzv_opts){.master_addr = LOOPBACK,
                            .master_port = port,
                            .nnodes = nnodes,
                            .node_rank = rank,
                            .timeout_s = timeout_s};
}

static void fill_blob(uint8_t *b, size_t n)
{
    for (size_t i = 0; i < n; i++)
        b[i] = (uint8_t)(i * 131u + 7u);
}

static void put_u32(uint8_t *p, uint32_t v)
{
    for (int i = 0; i < 4; i++)
        p[i] = (uint8_t)(v >> (8 * i));
}

static uint32_t get_u32(const uint8_t *p)
{
    return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}

/* A 16-byte header: hello (nnodes, rank) or reply (code, length). */
static void header(uint8_t h[16], uint32_t magic, uint32_t version, uint32_t a, uint32_t b)
{
    put_u32(h, magic);
    put_u32(h + 4, version);
    put_u32(h + 8, a);
    put_u32(h + 12, b);
}


/* A loopback port nothing listens on (bound, read back, closed). */
static int free_port(void)
{
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    socklen_t al = sizeof a;
    ck_assert(fd >= 0 && bind(fd, (struct sockaddr *)&a, sizeof a) == 0);
    ck_assert(getsockname(fd, (struct sockaddr *)&a, &al) == 0);
    close(fd);
    return ntohs(a.sin_port);
}

/* A blocking loopback client whose reads give up after 5 s, so a broken
 * master fails the test instead of hanging it. */
static int raw_connect(int port)
{
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in a = {
        .sin_family = AF_INET, .sin_port = htons((uint16_t)port), .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    struct timeval tv = {.tv_sec = 5};
    setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
    if (fd >= 0 && connect(fd, (struct sockaddr *)&a, sizeof a) != 0) {
        close(fd);
        return -1;
    }
    return fd;
}

/* recv exactly n bytes (or fewer at EOF / timeout); returns the count. */
static size_t raw_read(int fd, void *buf, size_t n)
{
    size_t k = 0;
    while (k < n) {
        ssize_t r = recv(fd, (char *)buf + k, n - k, 0);
        if (r <= 0)
            break;
        k += (size_t)r;
    }
    return k;
}

/* ---- joiners in threads ------------------------------------------------------------ */

typedef struct {
    dist_rdzv_opts o;
    size_t cap;
    uint8_t buf[DIST_RDZV_MAX_BLOB + 64]; /* [cap] for the blob, the rest a guard */
    size_t len;
    inferd_status st;
    char err[1024];
    double elapsed_s;
    pthread_t th;
} joiner;

static void *joiner_main(void *arg)
{
    joiner *j = arg;
    double t0 = util_now_s();
    j->st = dist_rdzv_join(&j->o, j->buf, j->cap, &j->len);
    j->elapsed_s = util_now_s() - t0;
    snprintf(j->err, sizeof j->err, "%s", inferd_last_error());
    return NULL;
}

static void joiner_start(joiner *j, dist_rdzv_opts o, size_t cap)
{
    memset(j, 0, sizeof *j);
    memset(j->buf, GUARD, sizeof j->buf);
    j->o = o;
    j->cap = cap;
    ck_assert_int_eq(pthread_create(&j->th, NULL, joiner_main, j), 0);
}

/* Wait for j; it must have received blob[0..len) and written nothing else. */
static void joiner_expect_blob(joiner *j, const uint8_t *blob, size_t len)
{
    pthread_join(j->th, NULL);
    ck_assert_msg(j->st == INFERD_OK, "node %d: %s", j->o.node_rank, j->err);
    ck_assert_uint_eq(j->len, len);
    ck_assert(len == 0 || memcmp(j->buf, blob, len) == 0);
    for (size_t i = len; i < sizeof j->buf; i++)
        ck_assert_msg(j->buf[i] == GUARD, "node %d wrote byte %zu past the blob", j->o.node_rank, i);
}

/* Wait for j; it must have failed with st and a message containing frag. */
static void joiner_expect_error(joiner *j, inferd_status st, const char *frag)
{
    pthread_join(j->th, NULL);
    ck_assert_msg(j->st == st, "node %d: status %s (%s), want %s", j->o.node_rank, inferd_status_str(j->st),
                  j->err, inferd_status_str(st));
    ck_assert_msg(strstr(j->err, frag), "node %d: '%s' lacks '%s'", j->o.node_rank, j->err, frag);
}

/* A master on an any-port loopback listener; *port = its port. */
static dist_rdzv_listener *master_listen(int nnodes, double timeout_s, int *port)
{
    dist_rdzv_opts o = opts_for(nnodes, 0, 0, timeout_s);
    dist_rdzv_listener *l = NULL;
    ck_assert_msg(dist_rdzv_listen(&o, &l) == INFERD_OK, "%s", inferd_last_error());
    *port = dist_rdzv_port(l);
    ck_assert_int_gt(*port, 0);
    return l;
}

/* ---- options ---------------------------------------------------------------------- */

START_TEST(test_opts_table)
{
    static const struct {
        const char *addr;
        int port, nnodes, rank;
        double timeout;
        const char *want; /* NULL: valid, else a fragment of the message */
    } cases[] = {
        {LOOPBACK, 29500, 2, 1, 10, NULL},
        {"localhost", 29500, 2, 1, 10, NULL},
        {"::1", 29500, 2, 1, 10, NULL},
        {LOOPBACK, 29500, 1, 0, 10, NULL},
        {NULL, 29500, 1, 0, 10, NULL},     /* one node needs no address... */
        {BAD_HOST, 29500, 1, 0, 10, NULL}, /* ...nor a resolvable one */
        {LOOPBACK, 29500, 1024, 1023, 10, NULL},
        {LOOPBACK, 1, 2, 1, 10, NULL},
        {LOOPBACK, 65535, 2, 1, 10, NULL},
        {LOOPBACK, 29500, 2, 1, 0.001, NULL},
        {LOOPBACK, 29500, 2, 1, 86400, NULL},
        {LOOPBACK, 29500, 0, 0, 10, "--nnodes 0 out of range [1, 1024]"},
        {LOOPBACK, 29500, -1, 0, 10, "--nnodes -1 out of range [1, 1024]"},
        {LOOPBACK, 29500, 1025, 0, 10, "--nnodes 1025 out of range [1, 1024]"},
        {LOOPBACK, 29500, 2, -1, 10, "--node-rank -1 out of range [0, 1023]"},
        {LOOPBACK, 29500, 2, 2, 10, "--node-rank 2 out of range [0, 1] for --nnodes 2"},
        {LOOPBACK, 29500, 1, 1, 10, "--node-rank 1 out of range [0, 0] for --nnodes 1"},
        {LOOPBACK, 29500, 1024, 1024, 10, "--node-rank 1024 out of range [0, 1023]"},
        {LOOPBACK, 0, 2, 1, 10, "--master-port 0 out of range [1, 65535]"},
        {LOOPBACK, -1, 2, 1, 10, "--master-port -1 out of range [1, 65535]"},
        {LOOPBACK, 65536, 2, 1, 10, "--master-port 65536 out of range [1, 65535]"},
        {LOOPBACK, 29500, 2, 1, 0, "--dist-timeout 0 out of range [0.001, 86400]"},
        {LOOPBACK, 29500, 2, 1, -1, "--dist-timeout -1 out of range"},
        {LOOPBACK, 29500, 2, 1, 86401, "--dist-timeout 86401 out of range"},
        {LOOPBACK, 29500, 2, 1, NAN, "--dist-timeout nan out of range"},
        {LOOPBACK, 29500, 2, 1, INFINITY, "--dist-timeout inf out of range"},
        {NULL, 29500, 2, 1, 10, "--master-addr is required with --nnodes 2"},
        {"", 29500, 2, 1, 10, "--master-addr is empty"},
        {BAD_HOST, 29500, 2, 1, 10, "--master-addr '" BAD_HOST "' does not resolve"},
    };
    for (size_t i = 0; i < INFERD_ARRAY_LEN(cases); i++) {
        dist_rdzv_opts o = opts_for(cases[i].nnodes, cases[i].rank, cases[i].port, cases[i].timeout);
        o.master_addr = cases[i].addr;
        inferd_clear_error();
        inferd_status st = dist_rdzv_opts_validate(&o);
        if (!cases[i].want) {
            ck_assert_msg(st == INFERD_OK, "case %zu: %s", i, inferd_last_error());
            continue;
        }
        ck_assert_msg(st == INFERD_ERR_INVALID_ARG, "case %zu accepted", i);
        ck_assert_msg(strstr(inferd_last_error(), cases[i].want), "case %zu: '%s' lacks '%s'", i,
                      inferd_last_error(), cases[i].want);
    }
}
END_TEST

/* The rows read the flags the CLI will pass, and their defaults validate. */
START_TEST(test_opts_rows)
{
    size_t n;
    const opt_row *rows = dist_rdzv_opts_rows(&n);
    dist_rdzv_opts o;
    dist_rdzv_opts_default(&o);
    ck_assert(o.nnodes == 1 && o.node_rank == 0 && o.master_port == 29500 && o.timeout_s == 600);
    ck_assert_ptr_null(o.master_addr);
    ck_assert_int_eq(dist_rdzv_opts_validate(&o), INFERD_OK);

    char *argv[] = {"x",
                    "--nnodes",
                    "4",
                    "--node-rank=3",
                    "--master-addr",
                    LOOPBACK,
                    "--master-port",
                    "1234",
                    "--dist-timeout",
                    "2.5",
                    "--nnodes",
                    "0"};
    opt_group g = {rows, n, &o};
    int i = 1;
    for (int k = 0; k < 5; k++, i++)
        ck_assert_msg(opt_parse_arg(&g, 1, (int)INFERD_ARRAY_LEN(argv), argv, &i, NULL) == 1, "%s",
                      inferd_last_error());
    ck_assert(o.nnodes == 4 && o.node_rank == 3 && o.master_port == 1234 && o.timeout_s == 2.5);
    ck_assert_str_eq(o.master_addr, LOOPBACK);
    ck_assert_int_eq(dist_rdzv_opts_validate(&o), INFERD_OK);
    ck_assert_int_eq(opt_parse_arg(&g, 1, (int)INFERD_ARRAY_LEN(argv), argv, &i, NULL), -1);
    ck_assert_msg(strstr(inferd_last_error(), "--nnodes"), "%s", inferd_last_error());
    opt_free(rows, n, &o);
}
END_TEST

/* Misuse of listen / serve / join: each a clear INVALID_ARG or IO. */
START_TEST(test_api_misuse)
{
    dist_rdzv_opts o = opts_for(2, 1, 0, 5);
    dist_rdzv_listener *l = NULL;
    ck_assert_int_eq(dist_rdzv_listen(&o, &l), INFERD_ERR_INVALID_ARG);
    ck_assert(strstr(inferd_last_error(), "only node 0 listens") && !l);

    o = opts_for(2, 0, 29500, 5);
    uint8_t buf[8];
    size_t len = 99;
    ck_assert_int_eq(dist_rdzv_join(&o, buf, sizeof buf, &len), INFERD_ERR_INVALID_ARG);
    ck_assert_msg(strstr(inferd_last_error(), "--node-rank 0 is the master"), "%s", inferd_last_error());
    o.node_rank = 1;
    ck_assert_int_eq(dist_rdzv_join(&o, NULL, 8, &len), INFERD_ERR_INVALID_ARG);
    o.master_port = 0; /* any-port is for a master only */
    ck_assert_int_eq(dist_rdzv_join(&o, buf, sizeof buf, &len), INFERD_ERR_INVALID_ARG);
    ck_assert(strstr(inferd_last_error(), "--master-port 0"));

    int port;
    l = master_listen(2, 5, &port);
    static uint8_t big[DIST_RDZV_MAX_BLOB + 1];
    ck_assert_int_eq(dist_rdzv_serve(l, big, sizeof big), INFERD_ERR_INVALID_ARG);
    ck_assert(strstr(inferd_last_error(), "4097-byte blob exceeds the 4096-byte limit"));
    ck_assert_int_eq(dist_rdzv_serve(l, NULL, 5), INFERD_ERR_INVALID_ARG);

    /* a second master on a port in use: IO naming the flags */
    dist_rdzv_listener *l2 = NULL;
    o = opts_for(2, 0, port, 5);
    ck_assert_int_eq(dist_rdzv_listen(&o, &l2), INFERD_ERR_IO);
    ck_assert_msg(strstr(inferd_last_error(), "--master-port") && strstr(inferd_last_error(), "in use"), "%s",
                  inferd_last_error());
    ck_assert_ptr_null(l2);
    dist_rdzv_close(l);
    dist_rdzv_close(NULL);
}
END_TEST

/* ---- happy paths ------------------------------------------------------------------- */

/* One node: no socket (port 0, even an unresolvable address is fine), the
 * serve returns at once, once. */
START_TEST(test_single_node)
{
    dist_rdzv_opts o = opts_for(1, 0, 29500, 5);
    o.master_addr = BAD_HOST;
    dist_rdzv_listener *l = NULL;
    ck_assert_msg(dist_rdzv_listen(&o, &l) == INFERD_OK, "%s", inferd_last_error());
    ck_assert_int_eq(dist_rdzv_port(l), 0);
    uint8_t blob[128];
    fill_blob(blob, sizeof blob);
    ck_assert_int_eq(dist_rdzv_serve(l, blob, sizeof blob), INFERD_OK);
    ck_assert_int_eq(dist_rdzv_serve(l, blob, sizeof blob), INFERD_ERR_INVALID_ARG);
    ck_assert(strstr(inferd_last_error(), "already served"));
    dist_rdzv_close(l);
}
END_TEST

/* nnodes 2 and 4, blob sizes 0, 1, 128 (an NCCL id) and 4096. */
START_TEST(test_happy_table)
{
    static const int nodes[] = {2, 4};
    static const size_t sizes[] = {0, 1, 128, DIST_RDZV_MAX_BLOB};
    static uint8_t blob[DIST_RDZV_MAX_BLOB];
    static joiner js[3];
    fill_blob(blob, sizeof blob);
    for (size_t a = 0; a < INFERD_ARRAY_LEN(nodes); a++)
        for (size_t b = 0; b < INFERD_ARRAY_LEN(sizes); b++) {
            int port, nn = nodes[a], fds0 = test_open_fds();
            dist_rdzv_listener *l = master_listen(nn, 30, &port);
            for (int r = 1; r < nn; r++)
                joiner_start(&js[r - 1], opts_for(nn, r, port, 30), DIST_RDZV_MAX_BLOB);
            ck_assert_msg(dist_rdzv_serve(l, blob, sizes[b]) == INFERD_OK, "nnodes %d, %zu bytes: %s", nn,
                          sizes[b], inferd_last_error());
            for (int r = 1; r < nn; r++)
                joiner_expect_blob(&js[r - 1], blob, sizes[b]);
            dist_rdzv_close(l);
            ck_assert_int_eq(test_open_fds(), fds0); /* every socket closed, both sides */
        }
}
END_TEST

/* Joiners started before the master retry until it listens. */
START_TEST(test_joiners_first)
{
    static joiner js[3];
    uint8_t blob[128];
    fill_blob(blob, sizeof blob);
    int port = free_port();
    for (int r = 1; r < 4; r++)
        joiner_start(&js[r - 1], opts_for(4, r, port, 30), sizeof blob);
    usleep(400 * 1000);
    dist_rdzv_opts o = opts_for(4, 0, port, 30);
    dist_rdzv_listener *l = NULL;
    ck_assert_msg(dist_rdzv_listen(&o, &l) == INFERD_OK, "%s", inferd_last_error());
    ck_assert_int_eq(dist_rdzv_port(l), port);
    ck_assert_msg(dist_rdzv_serve(l, blob, sizeof blob) == INFERD_OK, "%s", inferd_last_error());
    for (int r = 1; r < 4; r++) {
        joiner_expect_blob(&js[r - 1], blob, sizeof blob);
        ck_assert_double_ge(js[r - 1].elapsed_s, 0.3); /* it did wait for the master */
    }
    dist_rdzv_close(l);
}
END_TEST

/* A blob larger than the joiner's buffer: TOO_LONG, nothing written. */
START_TEST(test_joiner_cap_too_small)
{
    static joiner j;
    uint8_t blob[128];
    fill_blob(blob, sizeof blob);
    int port;
    dist_rdzv_listener *l = master_listen(2, 30, &port);
    joiner_start(&j, opts_for(2, 1, port, 30), 100);
    ck_assert_msg(dist_rdzv_serve(l, blob, sizeof blob) == INFERD_OK, "%s", inferd_last_error());
    joiner_expect_error(&j, INFERD_ERR_TOO_LONG, "128-byte blob; the buffer holds 100");
    ck_assert_uint_eq(j.len, 0);
    for (size_t i = 0; i < sizeof j.buf; i++)
        ck_assert(j.buf[i] == GUARD);
    dist_rdzv_close(l);
}
END_TEST

/* ---- hostile peers against the master --------------------------------------------- */

typedef struct {
    const char *name;
    int nnodes;
    uint32_t magic, version, peer_nnodes, rank;
    int send_len;        /* bytes of that hello sent (<= 16) */
    const char *raw;     /* sent instead of a hello when set */
    bool hang_up;        /* close after sending (else wait for the master) */
    bool pre_join_rank1; /* a well-behaved rank 1 joins first */
    inferd_status want_st;
    const char *want_msg; /* in the master's error */
    int want_code;        /* reply code the peer reads; -1: none */
    const char *want_reason;
    bool at_deadline; /* the master fails at its deadline, not at once */
} attack_case;

typedef struct {
    int port;
    const attack_case *c;
    uint8_t bytes[16];
    size_t n_bytes;
    bool hang_up;
    int code; /* -1: no reply */
    char reason[DIST_RDZV_MAX_REASON + 1];
    pthread_t th;
} attacker;

static void *attacker_main(void *arg)
{
    attacker *a = arg;
    int fd = raw_connect(a->port);
    if (fd < 0)
        return NULL;
    if (a->n_bytes)
        send(fd, a->bytes, a->n_bytes, MSG_NOSIGNAL);
    if (!a->hang_up) {
        uint8_t h[16];
        if (raw_read(fd, h, sizeof h) == sizeof h) {
            a->code = (int)get_u32(h + 8);
            uint32_t n = get_u32(h + 12);
            a->reason[raw_read(fd, a->reason, INFERD_MIN(n, (uint32_t)DIST_RDZV_MAX_REASON))] = '\0';
        }
    }
    close(fd);
    return NULL;
}

static void attacker_start(attacker *a, int port, const void *bytes, size_t n, bool hang_up)
{
    memset(a, 0, sizeof *a);
    a->port = port;
    a->code = -1;
    memcpy(a->bytes, bytes, INFERD_MIN(n, sizeof a->bytes));
    a->n_bytes = INFERD_MIN(n, sizeof a->bytes);
    a->hang_up = hang_up;
    ck_assert_int_eq(pthread_create(&a->th, NULL, attacker_main, a), 0);
}

static void run_attack(const attack_case *c)
{
    const double timeout = 1.0;
    static attacker pre, bad;
    uint8_t h[16];
    int port, fds0 = test_open_fds();
    dist_rdzv_listener *l = master_listen(c->nnodes, timeout, &port);
    double t0 = util_now_s();
    if (c->pre_join_rank1) {
        header(h, DIST_RDZV_MAGIC, DIST_RDZV_VERSION, (uint32_t)c->nnodes, 1);
        attacker_start(&pre, port, h, sizeof h, false);
        usleep(150 * 1000); /* its hello is in before the duplicate's */
    }
    header(h, c->magic, c->version, c->peer_nnodes, c->rank);
    attacker_start(&bad, port, c->raw ? (const void *)c->raw : h,
                   c->raw ? strlen(c->raw) : (size_t)c->send_len, c->hang_up);
    inferd_status st = dist_rdzv_serve(l, "0123456789", 10);
    double elapsed = util_now_s() - t0;
    char err[1024];
    snprintf(err, sizeof err, "%s", inferd_last_error());
    dist_rdzv_close(l);
    pthread_join(bad.th, NULL);
    ck_assert_msg(st == c->want_st, "%s: status %s (%s)", c->name, inferd_status_str(st), err);
    ck_assert_msg(strstr(err, c->want_msg), "%s: '%s' lacks '%s'", c->name, err, c->want_msg);
    ck_assert_msg(bad.code == c->want_code, "%s: reply code %d, want %d", c->name, bad.code, c->want_code);
    if (c->want_reason)
        ck_assert_msg(strstr(bad.reason, c->want_reason), "%s: reason '%s'", c->name, bad.reason);
    if (c->at_deadline)
        ck_assert_msg(elapsed >= timeout - 0.01 && elapsed <= 2 * timeout + SLACK_S, "%s: %.3f s", c->name,
                      elapsed);
    else
        ck_assert_msg(elapsed < timeout, "%s: took %.3f s, want at once", c->name, elapsed);
    if (c->pre_join_rank1) { /* the node already joined is told the rendezvous is off */
        pthread_join(pre.th, NULL);
        ck_assert_int_eq(pre.code, DIST_RDZV_ABORTED);
        ck_assert_msg(strstr(pre.reason, "already joined"), "aborted with '%s'", pre.reason);
    }
    ck_assert_msg(test_open_fds() == fds0, "%s: a socket left open", c->name);
}

START_TEST(test_attack_table)
{
    const uint32_t M = DIST_RDZV_MAGIC, V = DIST_RDZV_VERSION;
    const inferd_status TIMEOUT = INFERD_ERR_TIMEOUT, BAD = INFERD_ERR_INVALID_ARG;
    static const char *const no_hello = "1 connection(s) sent no complete hello";
    const attack_case cases[] = {
        {"wrong magic", 2, 0xdeadbeefu, V, 2, 1, 16, NULL, false, false, TIMEOUT, "bad magic 0xdeadbeef",
         DIST_RDZV_BAD_MAGIC, "bad magic 0xdeadbeef", true},
        {"http request", 2, 0, 0, 0, 0, 0, "GET / HTTP/1.1\r\n\r\n", false, false, TIMEOUT,
         "bad magic 0x20544547", DIST_RDZV_BAD_MAGIC, "not an inferd rendezvous peer", true},
        {"wrong version", 2, M, V + 1, 2, 1, 16, NULL, false, false, BAD,
         "protocol version 2, the master speaks", DIST_RDZV_BAD_VERSION, "protocol version 2", false},
        {"wrong nnodes", 2, M, V, 3, 1, 16, NULL, false, false, BAD,
         "--nnodes 3 differs from the master's --nnodes 2", DIST_RDZV_BAD_NNODES, "--nnodes 3 differs",
         false},
        {"rank 0", 2, M, V, 2, 0, 16, NULL, false, false, BAD, "--node-rank 0 out of range [1, 1]",
         DIST_RDZV_BAD_RANK, "node 0 is the master", false},
        {"rank = nnodes", 2, M, V, 2, 2, 16, NULL, false, false, BAD, "--node-rank 2 out of range [1, 1]",
         DIST_RDZV_BAD_RANK, "--node-rank 2", false},
        {"rank 2^32-1", 2, M, V, 2, 0xffffffffu, 16, NULL, false, false, BAD,
         "--node-rank 4294967295 out of range", DIST_RDZV_BAD_RANK, "4294967295", false},
        {"duplicate rank", 3, M, V, 3, 1, 16, NULL, false, true, BAD,
         "--node-rank 1 already joined from 127.0.0.1", DIST_RDZV_RANK_TAKEN, "already joined", false},
        {"silent", 2, M, V, 2, 1, 0, NULL, false, false, TIMEOUT, no_hello, -1, NULL, true},
        {"connect and close", 2, M, V, 2, 1, 0, NULL, true, false, TIMEOUT,
         "closed after 0 of 16 hello bytes", -1, NULL, true},
        {"truncated header, closed", 2, M, V, 2, 1, 8, NULL, true, false, TIMEOUT,
         "closed after 8 of 16 hello bytes", -1, NULL, true},
        {"truncated header, silent", 2, M, V, 2, 1, 15, NULL, false, false, TIMEOUT, no_hello, -1, NULL,
         true},
    };
    for (size_t i = 0; i < INFERD_ARRAY_LEN(cases); i++)
        run_attack(&cases[i]);
}
END_TEST

/* The master's timeout names the ranks still missing. */
START_TEST(test_master_timeout_names_missing)
{
    static joiner j;
    int port;
    dist_rdzv_listener *l = master_listen(4, 0.5, &port);
    joiner_start(&j, opts_for(4, 2, port, 30), 16);
    double t0 = util_now_s();
    ck_assert_int_eq(dist_rdzv_serve(l, "x", 1), INFERD_ERR_TIMEOUT);
    double elapsed = util_now_s() - t0;
    ck_assert_msg(strstr(inferd_last_error(), "waiting for --node-rank 1, 3 (1 of 3 peers joined)"), "%s",
                  inferd_last_error());
    ck_assert_double_le(elapsed, 0.5 + SLACK_S);
    /* the node that did join is told at once, not at its own deadline */
    joiner_expect_error(&j, INFERD_ERR_UNAVAILABLE, "aborted: rendezvous: timed out");
    ck_assert_double_lt(j.elapsed_s, 0.5 + SLACK_S);
    dist_rdzv_close(l);
}
END_TEST

/* Strays (silent, garbage, half a hello, more of them than the master
 * keeps) do not stop the real nodes from joining. */
START_TEST(test_strays_do_not_block)
{
    static joiner js[2];
    static attacker strays[3];
    int silent[40];
    uint8_t blob[128], h[16];
    fill_blob(blob, sizeof blob);
    int port;
    dist_rdzv_listener *l = master_listen(3, 30, &port);
    for (size_t i = 0; i < INFERD_ARRAY_LEN(silent); i++) /* more than the master keeps: the oldest go */
        ck_assert_int_ge(silent[i] = raw_connect(port), 0);
    attacker_start(&strays[0], port, "GET / HTTP/1.1\r\n\r\n", 16, true);
    header(h, DIST_RDZV_MAGIC, DIST_RDZV_VERSION, 3, 1);
    attacker_start(&strays[1], port, h, 10, true);
    attacker_start(&strays[2], port, h, 10, false);
    for (int r = 1; r < 3; r++)
        joiner_start(&js[r - 1], opts_for(3, r, port, 30), sizeof blob);
    ck_assert_msg(dist_rdzv_serve(l, blob, sizeof blob) == INFERD_OK, "%s", inferd_last_error());
    for (int r = 1; r < 3; r++)
        joiner_expect_blob(&js[r - 1], blob, sizeof blob);
    dist_rdzv_close(l);
    for (size_t i = 0; i < INFERD_ARRAY_LEN(strays); i++)
        pthread_join(strays[i].th, NULL);
    for (size_t i = 0; i < INFERD_ARRAY_LEN(silent); i++)
        close(silent[i]);
}
END_TEST

/* A node that joined and died (hung up) gives its rank back: the restarted
 * node with the same rank joins. */
START_TEST(test_restarted_node_rejoins)
{
    static joiner js[2];
    static attacker dead;
    uint8_t blob[128], h[16];
    fill_blob(blob, sizeof blob);
    int port;
    dist_rdzv_listener *l = master_listen(3, 30, &port);
    header(h, DIST_RDZV_MAGIC, DIST_RDZV_VERSION, 3, 1);
    attacker_start(&dead, port, h, sizeof h, true);
    pthread_join(dead.th, NULL);
    /* rank 2 first: with the dead rank 1 counted, everyone would seem in */
    joiner_start(&js[1], opts_for(3, 2, port, 10), sizeof blob);
    usleep(300 * 1000);
    joiner_start(&js[0], opts_for(3, 1, port, 10), sizeof blob);
    ck_assert_msg(dist_rdzv_serve(l, blob, sizeof blob) == INFERD_OK, "%s", inferd_last_error());
    for (int r = 1; r < 3; r++)
        joiner_expect_blob(&js[r - 1], blob, sizeof blob);
    dist_rdzv_close(l);
}
END_TEST

/* A real joiner the master refuses reports the master's reason. */
START_TEST(test_joiner_reports_refusal)
{
    static joiner j;
    int port;
    dist_rdzv_listener *l = master_listen(2, 30, &port);
    joiner_start(&j, opts_for(3, 1, port, 30), 16);
    ck_assert_int_eq(dist_rdzv_serve(l, "x", 1), INFERD_ERR_INVALID_ARG);
    ck_assert_msg(strstr(inferd_last_error(), "refused 127.0.0.1:"), "%s", inferd_last_error());
    joiner_expect_error(&j, INFERD_ERR_INVALID_ARG,
                        "refused --node-rank 1: --nnodes 3 differs from the master's --nnodes 2");
    dist_rdzv_close(l);
}
END_TEST

/* ---- hostile masters against a joiner ---------------------------------------------- */

typedef struct {
    const char *name;
    uint32_t magic, version, code, length; /* the reply header */
    const char *body;                      /* after it */
    size_t send_len;                       /* bytes of header + body sent, then the master closes */
    bool silent;                           /* send nothing, wait for the joiner to give up */
    size_t cap;
    inferd_status want_st;
    const char *want_msg;
} fake_master_case;

typedef struct {
    int lfd;
    const fake_master_case *c;
    uint8_t hello[16];
    size_t hello_len;
    pthread_t th;
} fake_master;

static void *fake_master_main(void *arg)
{
    fake_master *f = arg;
    int fd = accept(f->lfd, NULL, NULL);
    if (fd < 0)
        return NULL;
    struct timeval tv = {.tv_sec = 5};
    setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
    f->hello_len = raw_read(fd, f->hello, sizeof f->hello);
    if (f->c->silent) {
        char b;
        recv(fd, &b, 1, 0); /* until the joiner closes (or 5 s) */
    } else {
        const fake_master_case *c = f->c;
        uint8_t reply[64];
        header(reply, c->magic, c->version, c->code, c->length);
        memcpy(reply + 16, c->body, INFERD_MIN(strlen(c->body), sizeof reply - 16));
        send(fd, reply, INFERD_MIN(c->send_len, sizeof reply), MSG_NOSIGNAL);
    }
    close(fd);
    return NULL;
}

static void run_fake_master(const fake_master_case *c)
{
    static fake_master f;
    int fds0 = test_open_fds();
    memset(&f, 0, sizeof f);
    f.c = c;
    f.lfd = socket(AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    socklen_t al = sizeof a;
    ck_assert(bind(f.lfd, (struct sockaddr *)&a, sizeof a) == 0 && listen(f.lfd, 4) == 0);
    ck_assert(getsockname(f.lfd, (struct sockaddr *)&a, &al) == 0);
    ck_assert_int_eq(pthread_create(&f.th, NULL, fake_master_main, &f), 0);

    const double timeout = 1.0;
    static uint8_t buf[DIST_RDZV_MAX_BLOB + 64];
    memset(buf, GUARD, sizeof buf);
    size_t len = 99;
    dist_rdzv_opts o = opts_for(2, 1, ntohs(a.sin_port), timeout);
    double t0 = util_now_s();
    inferd_status st = dist_rdzv_join(&o, buf, c->cap, &len);
    double elapsed = util_now_s() - t0;
    pthread_join(f.th, NULL);
    close(f.lfd);
    ck_assert_msg(test_open_fds() == fds0, "%s: a socket left open", c->name);

    /* the hello on the wire, byte for byte */
    uint8_t want[16];
    header(want, DIST_RDZV_MAGIC, DIST_RDZV_VERSION, 2, 1);
    ck_assert_msg(f.hello_len == 16 && memcmp(f.hello, want, 16) == 0, "%s: hello", c->name);
    ck_assert_msg(st == c->want_st, "%s: status %s (%s)", c->name, inferd_status_str(st),
                  inferd_last_error());
    ck_assert_msg(strstr(inferd_last_error(), c->want_msg), "%s: '%s' lacks '%s'", c->name,
                  inferd_last_error(), c->want_msg);
    ck_assert_uint_eq(len, 0);
    for (size_t i = c->cap; i < sizeof buf; i++)
        ck_assert_msg(buf[i] == GUARD, "%s: byte %zu written past the buffer", c->name, i);
    ck_assert_msg(elapsed <= timeout + SLACK_S, "%s: %.3f s", c->name, elapsed);
}

START_TEST(test_fake_master_table)
{
    const uint32_t M = DIST_RDZV_MAGIC;
    const fake_master_case cases[] = {
        {"bad magic", 0x50545448u, 1, 0, 0, "", 16, false, 64, INFERD_ERR_FORMAT,
         "is no inferd rendezvous master of protocol version 1 (reply magic 0x50545448"},
        {"bad version", M, 7, 0, 0, "", 16, false, 64, INFERD_ERR_FORMAT, "version 7)"},
        {"blob above the limit", M, 1, 0, 5000, "", 16, false, DIST_RDZV_MAX_BLOB, INFERD_ERR_FORMAT,
         "5000-byte blob, above the 4096-byte limit"},
        {"blob above the cap", M, 1, 0, 20, "ab", 18, false, 19, INFERD_ERR_TOO_LONG,
         "20-byte blob; the buffer holds 19"},
        {"blob truncated", M, 1, 0, 20, "ab", 18, false, 64, INFERD_ERR_IO,
         "reading the blob: connection closed after 2 of 20 bytes"},
        {"header truncated", M, 1, 0, 0, "", 8, false, 64, INFERD_ERR_FORMAT,
         "sent 8 of a 16-byte reply header"},
        {"refusal, control bytes in the reason", M, 1, DIST_RDZV_BAD_RANK, 7, "\x1b[31mn\n", 23, false, 64,
         INFERD_ERR_INVALID_ARG, "refused --node-rank 1: ?[31mn?"},
        {"refusal, reason cut short", M, 1, DIST_RDZV_RANK_TAKEN, 200, "no", 18, false, 64,
         INFERD_ERR_INVALID_ARG, "refused --node-rank 1: no"},
        {"aborted", M, 1, DIST_RDZV_ABORTED, 3, "bye", 19, false, 64, INFERD_ERR_UNAVAILABLE, "aborted: bye"},
        {"never replies", 0, 0, 0, 0, "", 0, true, 64, INFERD_ERR_TIMEOUT,
         "got no blob from master 127.0.0.1:"},
    };
    for (size_t i = 0; i < INFERD_ARRAY_LEN(cases); i++)
        run_fake_master(&cases[i]);
}
END_TEST

/* A joiner with no master fails by its deadline, saying why. */
START_TEST(test_joiner_no_master)
{
    uint8_t buf[16];
    size_t len = 99;
    dist_rdzv_opts o = opts_for(2, 1, free_port(), 0.5);
    double t0 = util_now_s();
    ck_assert_int_eq(dist_rdzv_join(&o, buf, sizeof buf, &len), INFERD_ERR_TIMEOUT);
    double elapsed = util_now_s() - t0;
    ck_assert_msg(strstr(inferd_last_error(), "within 0.5 s (connect: Connection refused)"), "%s",
                  inferd_last_error());
    ck_assert_double_ge(elapsed, 0.45);
    ck_assert_double_le(elapsed, 0.5 + SLACK_S);
    ck_assert_uint_eq(len, 0);
}
END_TEST

int main(void)
{
    Suite *s = suite_create("dist_rendezvous");
    TCase *tc = tcase_create("core");
    tcase_set_timeout(tc, 120);
    tcase_add_test(tc, test_opts_table);
    tcase_add_test(tc, test_opts_rows);
    tcase_add_test(tc, test_api_misuse);
    tcase_add_test(tc, test_single_node);
    tcase_add_test(tc, test_happy_table);
    tcase_add_test(tc, test_joiners_first);
    tcase_add_test(tc, test_joiner_cap_too_small);
    tcase_add_test(tc, test_attack_table);
    tcase_add_test(tc, test_master_timeout_names_missing);
    tcase_add_test(tc, test_strays_do_not_block);
    tcase_add_test(tc, test_restarted_node_rejoins);
    tcase_add_test(tc, test_joiner_reports_refusal);
    tcase_add_test(tc, test_fake_master_table);
    tcase_add_test(tc, test_joiner_no_master);
    suite_add_tcase(s, tc);
    return test_run_suite(s);
}
