/* tests/kernels/cpu/test_kcpu_comm.c: the kernel-layer pieces of tensor
 * parallelism on the CPU backend, against values computed here:
 *  - collectives (kern_comm_*): 1..4 rank threads, each with its own CPU
 *    ctx; all_reduce_sum must give the rank-ordered fp32 sum, the same bits
 *    on every rank, 50 times back to back (a barrier race shows up as a
 *    wrong or torn sum); all_gather the concatenation, also in place; both
 *    interleaved; bf16 / f16 sums rounded once; the error table (CPU
 *    multi-process calls, bad rank counts);
 *  - kern_embed_shard: shard outputs are table rows or zero rows, their sum
 *    is kern_embed of the whole table bitwise, also through all_reduce;
 *  - kern_weight_fill_random_part: row, column and block windows (into
 *    offset rows of a larger weight) equal the same elements of the whole
 *    matrix's fill, bitwise, for every dtype;
 *  - kern_copy_2d with odd pitches: rows copied, gaps and guards untouched.
 * Values are random with mixed magnitudes (2^-12..2^12), so a sum in any
 * other order than the contract's would round differently. Rank threads
 * never call Check (not thread-safe): they count mismatches, the test
 * thread asserts. */
#include <math.h>
#include <pthread.h>
#include <stdlib.h>

#include "common/alloc.h"
#include "common/half.h"
#include "kt_util.h"

#define MAX_RANKS 4

/* --- rank threads ---------------------------------------------------------- */

typedef void (*rank_fn)(int rank, void *arg);

typedef struct {
    int rank;
    rank_fn fn;
    void *arg;
} rank_thread;

static void *rank_main(void *p)
{
    rank_thread *t = p;
    t->fn(t->rank, t->arg);
    return NULL;
}

/* Run fn(rank, arg) on n threads at once; returns when all have finished. */
static void run_ranks(int n, rank_fn fn, void *arg)
{
    pthread_t th[MAX_RANKS];
    rank_thread rt[MAX_RANKS];
    for (int r = 0; r < n; r++) {
        rt[r] = (rank_thread){r, fn, arg};
        ck_assert_int_eq(pthread_create(&th[r], NULL, rank_main, &rt[r]), 0);
    }
    for (int r = 0; r < n; r++)
        ck_assert_int_eq(pthread_join(th[r], NULL), 0);
}

/* n CPU ctxs (one thread each) and their communicators. */
typedef struct {
    int n;
    kern_ctx *ctx[MAX_RANKS];
    kern_comm *comm[MAX_RANKS];
} group;

static void group_open(group *g, int n)
{
    g->n = n;
    for (int r = 0; r < n; r++)
        g->ctx[r] = kt_ctx(1);
    ck_assert_int_eq(kern_comm_create_local(g->ctx, n, g->comm), INFERD_OK);
    for (int r = 0; r < n; r++) {
        ck_assert_int_eq(kern_comm_size(g->comm[r]), n);
        ck_assert_int_eq(kern_comm_rank(g->comm[r]), r);
    }
}

/* Frees the handles out of rank order (odd ranks first): the group must
 * survive until the last one. */
static void group_close(group *g)
{
    for (int pass = 1; pass >= 0; pass--)
        for (int r = pass; r < g->n; r += 2)
            kern_comm_free(g->comm[r]);
    for (int r = 0; r < g->n; r++)
        kern_ctx_free(g->ctx[r]);
}

/* Element i of rank r's data in repetition rep: uniform in (-1, 1) times
 * 2^k, k uniform in [-12, 12). */
static float rank_value(uint64_t seed, int r, int rep, size_t i)
{
    const uint64_t s = seed * 1000003u + (uint64_t)rep * 131u + (uint64_t)r;
    const double u = rng_uniform(s, i), e = rng_uniform(s ^ 0x5bd1e995u, i);
    return (float)((2.0 * u - 1.0) * ldexp(1.0, (int)(e * 24.0) - 12));
}

/* The contract's sum: fp32, ranks 0..n-1 in order. */
static float rank_sum(uint64_t seed, int n, int rep, size_t i)
{
    float s = rank_value(seed, 0, rep, i);
    for (int k = 1; k < n; k++)
        s += rank_value(seed, k, rep, i);
    return s;
}

/* --- all_reduce ------------------------------------------------------------ */

typedef struct {
    group *g;
    size_t count;
    int reps;
    uint64_t seed;
    float *buf[MAX_RANKS]; /* [count] guarded */
    size_t bad[MAX_RANKS];
} reduce_job;

static void reduce_rank(int r, void *arg)
{
    reduce_job *j = arg;
    float *b = j->buf[r];
    for (int rep = 0; rep < j->reps; rep++) {
        for (size_t i = 0; i < j->count; i++)
            b[i] = rank_value(j->seed, r, rep, i);
        kern_all_reduce_sum(j->g->ctx[r], j->g->comm[r], b, j->count, KERN_DTYPE_F32);
        for (size_t i = 0; i < j->count; i++)
            j->bad[r] += kt_bits(b[i]) != kt_bits(rank_sum(j->seed, j->g->n, rep, i));
    }
}

START_TEST(test_all_reduce_f32)
{
    const size_t counts[] = {0, 1, 7, 1000, 65537};
    for (int n = 1; n <= MAX_RANKS; n++) {
        for (size_t c = 0; c < sizeof counts / sizeof counts[0]; c++) {
            group g;
            group_open(&g, n);
            reduce_job j = {.g = &g, .count = counts[c], .reps = 50, .seed = 100 + (uint64_t)(n * 10) + c};
            for (int r = 0; r < n; r++)
                j.buf[r] = kt_galloc(g.ctx[r], j.count);
            run_ranks(n, reduce_rank, &j);
            for (int r = 0; r < n; r++) {
                KT_MSG(j.bad[r] == 0, "n=%d count=%zu: rank %d saw %zu wrong sums", n, j.count, r, j.bad[r]);
                KT_MSG(memcmp(j.buf[r], j.buf[0], j.count * sizeof(float)) == 0, "n=%d count=%zu: rank %d differs",
                       n, j.count, r);
                kt_gcheck(j.buf[r], j.count, "all_reduce");
            }
            for (int r = 0; r < n; r++)
                kt_gfree(g.ctx[r], j.buf[r]);
            group_close(&g);
        }
    }
}
END_TEST

/* 16-bit dtypes: each rank holds dtype-rounded values; the result is the
 * rank-ordered fp32 sum of them, rounded once. */
typedef struct {
    group *g;
    kern_dtype dt;
    size_t count;
    uint16_t *buf[MAX_RANKS];
    size_t bad[MAX_RANKS];
} reduce16_job;

static uint16_t to16(kern_dtype dt, float f)
{
    return dt == KERN_DTYPE_F16 ? half_f32_to_f16(f) : half_f32_to_bf16(f);
}

static float from16(kern_dtype dt, uint16_t h)
{
    return dt == KERN_DTYPE_F16 ? half_f16_to_f32(h) : half_bf16_to_f32(h);
}

/* Values within f16's range: uniform in (-8, 8). */
static uint16_t value16(kern_dtype dt, int r, int rep, size_t i)
{
    return to16(dt, 16.0f * (float)rng_uniform(7000 + (uint64_t)(rep * 8 + r), i) - 8.0f);
}

static void reduce16_rank(int r, void *arg)
{
    reduce16_job *j = arg;
    for (int rep = 0; rep < 10; rep++) {
        for (size_t i = 0; i < j->count; i++)
            j->buf[r][i] = value16(j->dt, r, rep, i);
        kern_all_reduce_sum(j->g->ctx[r], j->g->comm[r], j->buf[r], j->count, j->dt);
        for (size_t i = 0; i < j->count; i++) {
            float s = from16(j->dt, value16(j->dt, 0, rep, i));
            for (int k = 1; k < j->g->n; k++)
                s += from16(j->dt, value16(j->dt, k, rep, i));
            j->bad[r] += j->buf[r][i] != to16(j->dt, s);
        }
    }
}

START_TEST(test_all_reduce_16bit)
{
    const kern_dtype dts[] = {KERN_DTYPE_BF16, KERN_DTYPE_F16};
    for (int d = 0; d < 2; d++) {
        group g;
        group_open(&g, 3);
        reduce16_job j = {.g = &g, .dt = dts[d], .count = 1001};
        for (int r = 0; r < 3; r++)
            j.buf[r] = inferd_malloc(j.count * 2);
        run_ranks(3, reduce16_rank, &j);
        for (int r = 0; r < 3; r++) {
            KT_MSG(j.bad[r] == 0, "%s: rank %d saw %zu wrong sums", kern_dtype_name(dts[d]), r, j.bad[r]);
            inferd_free(j.buf[r]);
        }
        group_close(&g);
    }
}
END_TEST

/* --- all_gather ------------------------------------------------------------ */

enum { GUARD_BYTES = 64 };

static uint8_t byte_value(int r, int rep, size_t i)
{
    return (uint8_t)(rng_uniform(9000 + (uint64_t)(rep * 8 + r), i) * 256.0);
}

typedef struct {
    group *g;
    size_t bytes;
    int reps;
    uint8_t *src[MAX_RANKS]; /* [bytes] */
    uint8_t *dst[MAX_RANKS]; /* [GUARD | n * bytes | GUARD] */
    size_t bad[MAX_RANKS];
} gather_job;

/* Odd repetitions gather in place: src is this rank's slot of dst. */
static void gather_rank(int r, void *arg)
{
    gather_job *j = arg;
    const int n = j->g->n;
    uint8_t *dst = j->dst[r] + GUARD_BYTES;
    for (int rep = 0; rep < j->reps; rep++) {
        uint8_t *src = rep % 2 ? dst + (size_t)r * j->bytes : j->src[r];
        for (size_t i = 0; i < j->bytes; i++)
            src[i] = byte_value(r, rep, i);
        kern_all_gather(j->g->ctx[r], j->g->comm[r], dst, src, j->bytes);
        for (int k = 0; k < n; k++)
            for (size_t i = 0; i < j->bytes; i++)
                j->bad[r] += dst[(size_t)k * j->bytes + i] != byte_value(k, rep, i);
    }
}

START_TEST(test_all_gather)
{
    const size_t sizes[] = {0, 1, 7, 1000, 65537};
    for (int n = 1; n <= MAX_RANKS; n++) {
        for (size_t s = 0; s < sizeof sizes / sizeof sizes[0]; s++) {
            group g;
            group_open(&g, n);
            gather_job j = {.g = &g, .bytes = sizes[s], .reps = 20};
            const size_t total = (size_t)n * j.bytes + 2 * GUARD_BYTES;
            for (int r = 0; r < n; r++) {
                j.src[r] = inferd_malloc(j.bytes + 1);
                j.dst[r] = inferd_malloc(total);
                memset(j.dst[r], 0xA5, total);
            }
            run_ranks(n, gather_rank, &j);
            for (int r = 0; r < n; r++) {
                KT_MSG(j.bad[r] == 0, "n=%d bytes=%zu: rank %d saw %zu wrong bytes", n, j.bytes, r, j.bad[r]);
                for (size_t i = 0; i < GUARD_BYTES; i++)
                    KT_MSG(j.dst[r][i] == 0xA5 && j.dst[r][total - 1 - i] == 0xA5, "all_gather: guard overwritten");
                inferd_free(j.src[r]);
                inferd_free(j.dst[r]);
            }
            group_close(&g);
        }
    }
}
END_TEST

/* all_reduce then all_gather of its result, 200 times: a rank that races
 * ahead into the next collective must not disturb the previous one. */
typedef struct {
    group *g;
    float *buf[MAX_RANKS], *all[MAX_RANKS];
    size_t bad[MAX_RANKS];
} mixed_job;

enum { MIXED_COUNT = 37, MIXED_REPS = 200 };

static void mixed_rank(int r, void *arg)
{
    mixed_job *j = arg;
    const int n = j->g->n;
    for (int rep = 0; rep < MIXED_REPS; rep++) {
        for (size_t i = 0; i < MIXED_COUNT; i++)
            j->buf[r][i] = rank_value(5, r, rep, i);
        kern_all_reduce_sum(j->g->ctx[r], j->g->comm[r], j->buf[r], MIXED_COUNT, KERN_DTYPE_F32);
        kern_all_gather(j->g->ctx[r], j->g->comm[r], j->all[r], j->buf[r], MIXED_COUNT * sizeof(float));
        for (int k = 0; k < n; k++)
            for (size_t i = 0; i < MIXED_COUNT; i++)
                j->bad[r] += kt_bits(j->all[r][k * MIXED_COUNT + i]) != kt_bits(rank_sum(5, n, rep, i));
    }
}

START_TEST(test_mixed_back_to_back)
{
    for (int n = 2; n <= MAX_RANKS; n++) {
        group g;
        group_open(&g, n);
        mixed_job j = {.g = &g};
        for (int r = 0; r < n; r++) {
            j.buf[r] = inferd_malloc(MIXED_COUNT * sizeof(float));
            j.all[r] = inferd_malloc((size_t)n * MIXED_COUNT * sizeof(float));
        }
        run_ranks(n, mixed_rank, &j);
        for (int r = 0; r < n; r++) {
            KT_MSG(j.bad[r] == 0, "n=%d: rank %d saw %zu wrong values", n, r, j.bad[r]);
            inferd_free(j.buf[r]);
            inferd_free(j.all[r]);
        }
        group_close(&g);
    }
}
END_TEST

/* Errors as a table: what the CPU backend refuses, and how. */
START_TEST(test_comm_errors)
{
    kern_ctx *ctx = kt_ctx(1);
    unsigned char id[KERN_COMM_ID_BYTES];
    ck_assert_int_eq(kern_comm_make_id(KERN_BACKEND_CPU, id), INFERD_ERR_UNSUPPORTED);
    ck_assert_ptr_nonnull(strstr(inferd_last_error(), "cpu backend"));
    kern_comm *c = (kern_comm *)0x1;
    memset(id, 0, sizeof id);
    ck_assert_int_eq(kern_comm_create_rank(ctx, id, 2, 0, &c), INFERD_ERR_UNSUPPORTED);
    ck_assert_ptr_null(c);
    const struct {
        int n, rank;
    } bad_ranks[] = {{0, 0}, {2, 2}, {2, -1}, {-1, 0}};
    for (size_t i = 0; i < sizeof bad_ranks / sizeof bad_ranks[0]; i++)
        ck_assert_int_eq(kern_comm_create_rank(ctx, id, bad_ranks[i].n, bad_ranks[i].rank, &c), INFERD_ERR_INVALID_ARG);
    kern_comm *out[2] = {(kern_comm *)0x1, (kern_comm *)0x1};
    ck_assert_int_eq(kern_comm_create_local(&ctx, 0, out), INFERD_ERR_INVALID_ARG);
    kern_ctx *with_null[2] = {ctx, NULL};
    ck_assert_int_eq(kern_comm_create_local(with_null, 2, out), INFERD_ERR_INVALID_ARG);
    ck_assert_ptr_null(out[0]);
    ck_assert_ptr_null(out[1]);
    kern_comm_free(NULL);
    kern_ctx_free(ctx);
}
END_TEST

/* --- embed_shard ----------------------------------------------------------- */

enum { EMB_V = 101, EMB_SHARDS = 3 };
static const int64_t shard_begin[EMB_SHARDS + 1] = {0, 34, 68, EMB_V}; /* uneven: 34, 34, 33 rows */

/* Row view of shard k of a [EMB_V, d] table. */
static kern_weight shard_view(const kern_weight *full, int k)
{
    const size_t es = kern_dtype_size(full->dtype);
    kern_weight w = {(char *)full->data + (size_t)(shard_begin[k] * full->cols) * es, full->dtype,
                     shard_begin[k + 1] - shard_begin[k], full->cols};
    return w;
}

static kern_weight random_table(kern_ctx *ctx, kern_dtype dt, int64_t d, uint64_t seed)
{
    kern_weight w = {kern_alloc(ctx, (size_t)(EMB_V * d) * kern_dtype_size(dt)), dt, EMB_V, d};
    float *v = inferd_malloc((size_t)(EMB_V * d) * sizeof(float));
    test_fill_uniform(v, (size_t)(EMB_V * d), seed, -2.0f, 2.0f);
    kern_weight_upload(ctx, &w, 0, v, KERN_DTYPE_F32, EMB_V);
    inferd_free(v);
    return w;
}

/* Token ids: the shard boundaries, the ends, then random ids. */
static void random_tokens(int32_t *tok, int n, uint64_t seed)
{
    const int32_t fixed[] = {0, 33, 34, 67, 68, EMB_V - 1};
    for (int i = 0; i < n; i++)
        tok[i] = i < 6 ? fixed[i] : (int32_t)(rng_uniform(seed, (uint64_t)i) * EMB_V);
}

START_TEST(test_embed_shard_sum)
{
    const kern_dtype dts[] = {KERN_DTYPE_F32, KERN_DTYPE_F16, KERN_DTYPE_BF16};
    const int64_t ds[] = {37, 64};
    kern_ctx *ctx = kt_ctx(2);
    for (int di = 0; di < 3; di++) {
        for (int c = 0; c < 2; c++) {
            const int64_t d = ds[c];
            const int n = 45;
            kern_weight full = random_table(ctx, dts[di], d, 300 + (uint64_t)(di * 2 + c));
            int32_t tok[45];
            random_tokens(tok, n, 400 + (uint64_t)c);
            const size_t nd = (size_t)n * (size_t)d;
            float *want = kt_galloc(ctx, nd), *got = kt_galloc(ctx, nd), *sum = inferd_calloc(nd, sizeof(float));
            kern_embed(ctx, want, tok, n, &full);
            for (int k = 0; k < EMB_SHARDS; k++) {
                kern_weight sh = shard_view(&full, k);
                kern_embed_shard(ctx, got, tok, n, &sh, shard_begin[k]);
                kt_gcheck(got, nd, "embed_shard");
                for (int i = 0; i < n; i++) {
                    const bool mine = tok[i] >= shard_begin[k] && tok[i] < shard_begin[k + 1];
                    for (int64_t j = 0; j < d; j++) {
                        const size_t e = (size_t)i * (size_t)d + (size_t)j;
                        KT_MSG(kt_bits(got[e]) == (mine ? kt_bits(want[e]) : 0u), "%s d=%lld shard %d token %d [%lld]",
                               kern_dtype_name(dts[di]), (long long)d, k, tok[i], (long long)j);
                        sum[e] += got[e];
                    }
                }
            }
            for (size_t e = 0; e < nd; e++)
                KT_MSG(kt_bits(sum[e]) == kt_bits(want[e]), "sum of shards [%zu]: %g != %g", e, sum[e], want[e]);
            kt_gfree(ctx, want);
            kt_gfree(ctx, got);
            inferd_free(sum);
            kern_free(ctx, full.data);
        }
    }
    kern_ctx_free(ctx);
}
END_TEST

/* Ids outside the whole vocabulary (which kern_embed would reject) give
 * zero rows on every shard, never a read outside the table. */
START_TEST(test_embed_shard_outside)
{
    kern_ctx *ctx = kt_ctx(1);
    kern_weight full = random_table(ctx, KERN_DTYPE_F32, 8, 500);
    const int32_t tok[] = {-1, -5, EMB_V, EMB_V + 3, INT32_MAX, INT32_MIN};
    const int n = (int)(sizeof tok / sizeof tok[0]);
    float *got = kt_galloc(ctx, (size_t)n * 8);
    for (int k = 0; k < EMB_SHARDS; k++) {
        kern_weight sh = shard_view(&full, k);
        kern_embed_shard(ctx, got, tok, n, &sh, shard_begin[k]);
        for (int e = 0; e < n * 8; e++)
            KT_MSG(kt_bits(got[e]) == 0u, "shard %d token %d: not a zero row", k, tok[e / 8]);
        kt_gcheck(got, (size_t)n * 8, "embed_shard outside");
    }
    kt_gfree(ctx, got);
    kern_free(ctx, full.data);
    kern_ctx_free(ctx);
}
END_TEST

/* The tensor-parallel embedding end to end: each rank looks up its shard,
 * all_reduce sums them; every rank must hold kern_embed's rows bitwise. */
typedef struct {
    group *g;
    const kern_weight *full;
    const int32_t *tok;
    int n;
    float *out[EMB_SHARDS];
} tp_embed_job;

static void tp_embed_rank(int r, void *arg)
{
    tp_embed_job *j = arg;
    kern_weight sh = shard_view(j->full, r);
    kern_embed_shard(j->g->ctx[r], j->out[r], j->tok, j->n, &sh, shard_begin[r]);
    kern_all_reduce_sum(j->g->ctx[r], j->g->comm[r], j->out[r], (size_t)j->n * (size_t)j->full->cols,
                        KERN_DTYPE_F32);
}

START_TEST(test_embed_shard_all_reduce)
{
    group g;
    group_open(&g, EMB_SHARDS);
    const int n = 40;
    const int64_t d = 24;
    kern_weight full = random_table(g.ctx[0], KERN_DTYPE_BF16, d, 600);
    int32_t tok[40];
    random_tokens(tok, n, 601);
    float *want = inferd_malloc((size_t)(n * d) * sizeof(float));
    kern_embed(g.ctx[0], want, tok, n, &full);
    tp_embed_job j = {.g = &g, .full = &full, .tok = tok, .n = n};
    for (int r = 0; r < EMB_SHARDS; r++)
        j.out[r] = inferd_malloc((size_t)(n * d) * sizeof(float));
    run_ranks(EMB_SHARDS, tp_embed_rank, &j);
    for (int r = 0; r < EMB_SHARDS; r++) {
        KT_MSG(memcmp(j.out[r], want, (size_t)(n * d) * sizeof(float)) == 0, "rank %d: not the full lookup", r);
        inferd_free(j.out[r]);
    }
    inferd_free(want);
    kern_free(g.ctx[0], full.data);
    group_close(&g);
}
END_TEST

/* --- fill_random_part ------------------------------------------------------ */

/* Bits of element i of a weight (any dtype), widened. */
static uint32_t wbits(const kern_weight *w, int64_t i)
{
    if (w->dtype == KERN_DTYPE_F32)
        return ((const uint32_t *)w->data)[i];
    return ((const uint16_t *)w->data)[i];
}

/* Fill w rows [row, row + nr) from the logical window at (r0, c0) of an
 * R x C fill, with every other element of w pre-set to 0xAB bytes; check
 * the window against ref (the whole fill) and the rest untouched. Returns
 * mismatches. */
static int64_t window_case(kern_ctx *ctx, const kern_weight *ref, int64_t w_rows, int64_t w_cols, int64_t row,
                           int64_t nr, int64_t r0, int64_t c0, uint64_t seed, float scale)
{
    const size_t es = kern_dtype_size(ref->dtype), bytes = (size_t)(w_rows * w_cols) * es;
    kern_weight w = {kern_alloc(ctx, bytes + 1), ref->dtype, w_rows, w_cols};
    memset(w.data, 0xAB, bytes);
    const uint32_t fill = es == 4 ? 0xABABABABu : 0xABABu;
    kern_weight_fill_random_part(ctx, &w, row, nr, seed, scale, r0, c0, ref->cols);
    int64_t bad = 0;
    for (int64_t i = 0; i < w_rows; i++)
        for (int64_t j = 0; j < w_cols; j++) {
            const bool in = i >= row && i < row + nr;
            const uint32_t want = in ? wbits(ref, (r0 + i - row) * ref->cols + c0 + j) : fill;
            bad += wbits(&w, i * w_cols + j) != want;
        }
    kern_free(ctx, w.data);
    return bad;
}

START_TEST(test_fill_random_part)
{
    const int64_t shapes[][2] = {{7, 13}, {64, 33}, {5, 1}, {1, 100}, {129, 257}};
    const kern_dtype dts[] = {KERN_DTYPE_F32, KERN_DTYPE_F16, KERN_DTYPE_BF16};
    const float scale = 0.7f;
    kern_ctx *ctx = kt_ctx(2);
    for (size_t s = 0; s < sizeof shapes / sizeof shapes[0]; s++) {
        const int64_t R = shapes[s][0], C = shapes[s][1];
        for (int d = 0; d < 3; d++) {
            const uint64_t seed = 800 + s * 3 + (uint64_t)d;
            kern_weight full = {kern_alloc(ctx, (size_t)(R * C) * kern_dtype_size(dts[d])), dts[d], R, C};
            kern_weight_fill_random(ctx, &full, seed, scale);
            int64_t bad = window_case(ctx, &full, R, C, 0, R, 0, 0, seed, scale); /* the whole window */
            for (int k = 0; k < 3; k++) {
                const int64_t rb = R * k / 3, re = R * (k + 1) / 3, cb = C * k / 3, ce = C * (k + 1) / 3;
                bad += window_case(ctx, &full, re - rb, C, 0, re - rb, rb, 0, seed, scale); /* row shard */
                bad += window_case(ctx, &full, R, ce - cb, 0, R, 0, cb, seed, scale);       /* column shard */
                /* a block of the matrix into rows [2, 2 + nr) of a taller weight (a fused QKV slice) */
                bad += window_case(ctx, &full, re - rb + 3, ce - cb, 2, re - rb, rb, cb, seed, scale);
            }
            KT_MSG(bad == 0, "%lldx%lld %s: %lld elements differ from the whole fill", (long long)R, (long long)C,
                   kern_dtype_name(dts[d]), (long long)bad);
            kern_free(ctx, full.data);
        }
    }
    kern_ctx_free(ctx);
}
END_TEST

/* --- copy_2d --------------------------------------------------------------- */

START_TEST(test_copy_2d)
{
    const struct {
        size_t height, width, src_pitch, dst_pitch;
    } cases[] = {{5, 13, 17, 29}, {1, 7, 7, 7}, {9, 1, 3, 2}, {4, 16, 16, 16},
                 {33, 31, 37, 31}, {3, 0, 5, 5}, {0, 5, 5, 5}, {6, 12, 12, 40}};
    kern_ctx *ctx = kt_ctx(1);
    for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
        const size_t h = cases[c].height, w = cases[c].width, sp = cases[c].src_pitch, dp = cases[c].dst_pitch;
        const size_t src_bytes = h * sp, dst_bytes = h * dp + 2 * GUARD_BYTES;
        uint8_t *src = kern_alloc(ctx, src_bytes + 1), *dst = kern_alloc(ctx, dst_bytes);
        for (size_t i = 0; i < src_bytes; i++)
            src[i] = (uint8_t)(rng_uniform(1100 + c, i) * 256.0);
        memset(dst, 0x5A, dst_bytes);
        kern_copy_2d(ctx, dst + GUARD_BYTES, dp, src, sp, w, h);
        for (size_t i = 0; i < dst_bytes; i++) {
            const size_t e = i - GUARD_BYTES, r = e / dp, col = e % dp; /* e wraps below the guard: r >= h */
            const bool copied = i >= GUARD_BYTES && r < h && col < w;
            KT_MSG(dst[i] == (copied ? src[r * sp + col] : 0x5A), "case %zu: byte %zu", c, i);
        }
        kern_free(ctx, src);
        kern_free(ctx, dst);
    }
    kern_ctx_free(ctx);
}
END_TEST

int main(void)
{
    Suite *s = suite_create("kernels_cpu_comm");
    TCase *tc = tcase_create("core");
    tcase_set_timeout(tc, 300);
    tcase_add_test(tc, test_all_reduce_f32);
    tcase_add_test(tc, test_all_reduce_16bit);
    tcase_add_test(tc, test_all_gather);
    tcase_add_test(tc, test_mixed_back_to_back);
    tcase_add_test(tc, test_comm_errors);
    tcase_add_test(tc, test_embed_shard_sum);
    tcase_add_test(tc, test_embed_shard_outside);
    tcase_add_test(tc, test_embed_shard_all_reduce);
    tcase_add_test(tc, test_fill_random_part);
    tcase_add_test(tc, test_copy_2d);
    suite_add_tcase(s, tc);
    return test_run_suite(s);
}
