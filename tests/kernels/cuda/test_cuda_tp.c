/* tests/kernels/cuda/test_cuda_tp.c: the kernel-layer pieces of tensor
 * parallelism on the CUDA backend:
 *  - kern_embed_shard against the CPU twin, exactly (a copy of bf16 rows or
 *    a zero row), on the 16-byte and the scalar path, ids outside the shard
 *    and outside the vocabulary included;
 *  - kern_weight_fill_random_part windows (row, column, block into offset
 *    rows) against the same elements of the whole CUDA fill and against the
 *    CPU twin's window, bitwise, other rows untouched;
 *  - kern_copy_2d with odd pitches, gaps and guards untouched;
 *  - NCCL communicators: one rank on kt_gpu (all_reduce leaves the buffer's
 *    bits, all_gather copies) and, with two or more devices, one rank per
 *    device driven by its own thread (bf16 all_reduce against a host sum,
 *    the same bits on every rank; all_gather exact).
 * When NCCL cannot be loaded (kern_comm_create_local says UNAVAILABLE) the
 * communicator cases print why and pass, unless INFERD_REQUIRE_NCCL=1 makes
 * that a failure. Outputs live in guarded buffers (kt_gbuf, 0xFF fill). */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/alloc.h"
#include "common/half.h"
#include "common/rng.h"
#include "kt_harness.h"

/* --- embed_shard ------------------------------------------------------------ */

enum { EMB_V = 101, EMB_SHARDS = 3 };
static const int64_t shard_begin[EMB_SHARDS + 1] = {0, 34, 68, EMB_V};

static kern_weight shard_view(const kern_weight *full, int k)
{
    const size_t es = kern_dtype_size(full->dtype);
    kern_weight w = {(char *)full->data + (size_t)(shard_begin[k] * full->cols) * es, full->dtype,
                     shard_begin[k + 1] - shard_begin[k], full->cols};
    return w;
}

/* One table width d: every shard's GPU output == the CPU twin's, exactly. */
static int embed_shard_case(int d, uint64_t seed)
{
    enum { N = 24 };
    float *tab = inferd_malloc((size_t)EMB_V * d * sizeof(float));
    kt_rand_bf16(tab, (size_t)EMB_V * d, seed, -1.0f, 1.0f);
    int32_t tok[N] = {0, 33, 34, 67, 68, EMB_V - 1, -1, EMB_V, INT32_MAX, INT32_MIN};
    for (int i = 10; i < N; i++)
        tok[i] = (int32_t)(rng_uniform(seed + 1, (uint64_t)i) * EMB_V);
    kern_weight tc = kt_weight_cpu(tab, EMB_V, d), tg = kt_weight_gpu(tab, EMB_V, d);
    int32_t *dtok = kt_gpu_bytes(tok, sizeof tok);
    const size_t nd = (size_t)N * (size_t)d;
    float *ref = inferd_malloc(nd * sizeof(float)), *got = inferd_malloc(nd * sizeof(float));
    uint16_t *h = inferd_malloc(nd * 2);
    int bad = 0;
    for (int k = 0; k < EMB_SHARDS; k++) {
        kern_weight sc = shard_view(&tc, k), sg = shard_view(&tg, k);
        kern_embed_shard(kt_cpu, ref, tok, N, &sc, shard_begin[k]);
        kt_gbuf g;
        void *out = kt_gbuf_alloc(&g, nd * 2, 0);
        kern_embed_shard(kt_gpu, out, dtok, N, &sg, shard_begin[k]);
        kt_gbuf_read(&g, h);
        kt_from_bf16(h, got, nd);
        bad += kt_gbuf_guards_bad(&g, "embed_shard");
        bad += kt_compare("embed_shard", "out", got, ref, nd, 0.0, 0.0); /* exact: a copy or zeros */
        for (size_t e = 0; e < nd; e++) /* zero rows: +0 bits, as the CPU's */
            bad += ref[e] == 0.0f && h[e] != 0;
        kt_gbuf_free(&g);
    }
    kern_free(kt_gpu, dtok);
    kern_free(kt_gpu, tg.data);
    kern_free(kt_cpu, tc.data);
    inferd_free(h);
    inferd_free(got);
    inferd_free(ref);
    inferd_free(tab);
    return bad;
}

START_TEST(test_embed_shard)
{
    int bad = 0;
    const int ds[] = {64, 37, 4096}; /* 16-byte path, scalar path, a model's width */
    for (int c = 0; c < 3; c++)
        bad += embed_shard_case(ds[c], 40 + (uint64_t)c);
    ck_assert_int_eq(bad, 0);
}
END_TEST

/* --- fill_random_part ------------------------------------------------------- */

/* GPU rows [row, row + nr) of a w_rows x w_cols weight from the window at
 * (r0, c0) of the R x C matrix whose whole GPU fill is full[]; compares with
 * full[], with the CPU twin's window, and the other rows with 0xFFFF. */
static int fill_window_case(const uint16_t *full, int64_t C, int64_t w_rows, int64_t w_cols, int64_t row,
                            int64_t nr, int64_t r0, int64_t c0, uint64_t seed, float scale)
{
    const size_t n = (size_t)(w_rows * w_cols);
    kt_gbuf g;
    kern_weight wg = {kt_gbuf_alloc(&g, n * 2, 0), KERN_DTYPE_BF16, w_rows, w_cols};
    kern_weight wc = {kern_alloc(kt_cpu, n * 2 + 2), KERN_DTYPE_BF16, w_rows, w_cols};
    memset(wc.data, 0xFF, n * 2);
    kern_weight_fill_random_part(kt_gpu, &wg, row, nr, seed, scale, r0, c0, C);
    kern_weight_fill_random_part(kt_cpu, &wc, row, nr, seed, scale, r0, c0, C);
    uint16_t *back = inferd_malloc(n * 2 + 2);
    kt_gbuf_read(&g, back);
    int bad = kt_gbuf_guards_bad(&g, "fill_random_part");
    const uint16_t *cpu = wc.data;
    for (int64_t i = 0; i < w_rows; i++)
        for (int64_t j = 0; j < w_cols; j++) {
            const int64_t e = i * w_cols + j;
            const uint16_t want = i >= row && i < row + nr ? full[(r0 + i - row) * C + c0 + j] : 0xFFFF;
            if (back[e] != want || cpu[e] != want) {
                if (bad < 5)
                    printf("  fill_random_part [%lld, %lld]: gpu %04x cpu %04x want %04x\n", (long long)i,
                           (long long)j, back[e], cpu[e], want);
                bad++;
            }
        }
    kt_gbuf_free(&g);
    kern_free(kt_cpu, wc.data);
    inferd_free(back);
    return bad;
}

START_TEST(test_fill_random_part)
{
    const int64_t shapes[][2] = {{1000, 37}, {3, 4096}, {7, 13}, {64, 33}};
    const float scale = 0.02f;
    int bad = 0;
    for (int s = 0; s < 4; s++) {
        const int64_t R = shapes[s][0], C = shapes[s][1];
        const uint64_t seed = 90 + (uint64_t)s;
        kern_weight w = {kern_alloc(kt_gpu, (size_t)(R * C) * 2), KERN_DTYPE_BF16, R, C};
        ck_assert_ptr_nonnull(w.data);
        kern_weight_fill_random(kt_gpu, &w, seed, scale);
        uint16_t *full = inferd_malloc((size_t)(R * C) * 2);
        kern_memcpy_d2h(kt_gpu, full, w.data, (size_t)(R * C) * 2);
        int b = fill_window_case(full, C, R, C, 0, R, 0, 0, seed, scale);
        for (int k = 0; k < 3; k++) {
            const int64_t rb = R * k / 3, re = R * (k + 1) / 3, cb = C * k / 3, ce = C * (k + 1) / 3;
            b += fill_window_case(full, C, re - rb, C, 0, re - rb, rb, 0, seed, scale);   /* row shard */
            b += fill_window_case(full, C, R, ce - cb, 0, R, 0, cb, seed, scale);         /* column shard */
            b += fill_window_case(full, C, re - rb + 3, ce - cb, 2, re - rb, rb, cb, seed, scale); /* block */
        }
        kt_record("fill_random_part", b, 0, 0);
        bad += b;
        inferd_free(full);
        kern_free(kt_gpu, w.data);
    }
    ck_assert_int_eq(bad, 0);
}
END_TEST

/* --- copy_2d ---------------------------------------------------------------- */

START_TEST(test_copy_2d)
{
    const struct {
        size_t height, width, src_pitch, dst_pitch;
    } cases[] = {{5, 13, 17, 29}, {1, 7, 7, 7}, {9, 1, 3, 2}, {4, 16, 16, 16}, {33, 31, 37, 31},
                 {3, 0, 5, 5},    {0, 5, 5, 5}, {6, 12, 12, 40}, {1000, 6, 4096, 6}};
    int bad = 0;
    for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
        const size_t h = cases[c].height, w = cases[c].width, sp = cases[c].src_pitch, dp = cases[c].dst_pitch;
        uint8_t *src = inferd_malloc(h * sp + 1), *back = inferd_malloc(h * dp + 1);
        for (size_t i = 0; i < h * sp; i++)
            src[i] = (uint8_t)(rng_uniform(60 + c, i) * 256.0);
        void *dsrc = kt_gpu_bytes(src, h * sp + 1);
        kt_gbuf g;
        void *dst = kt_gbuf_alloc(&g, h * dp, 0);
        kern_copy_2d(kt_gpu, dst, dp, dsrc, sp, w, h);
        kt_gbuf_read(&g, back);
        int b = kt_gbuf_guards_bad(&g, "copy_2d");
        for (size_t i = 0; i < h * dp; i++) {
            const size_t r = i / dp, col = i % dp;
            b += back[i] != (col < w ? src[r * sp + col] : 0xFF);
        }
        if (b)
            printf("  copy_2d case %zu: %d bad bytes\n", c, b);
        kt_record("copy_2d", b, 0, 0);
        bad += b;
        kt_gbuf_free(&g);
        kern_free(kt_gpu, dsrc);
        inferd_free(src);
        inferd_free(back);
    }
    ck_assert_int_eq(bad, 0);
}
END_TEST

/* --- communicators ---------------------------------------------------------- */

/* Whether a communicator was created; when NCCL is missing (UNAVAILABLE)
 * prints why and says no, unless INFERD_REQUIRE_NCCL=1; any other failure
 * fails the test. */
static bool comm_created(inferd_status st, const char *what)
{
    if (st == INFERD_OK)
        return true;
    const char *req = getenv("INFERD_REQUIRE_NCCL");
    if (st == INFERD_ERR_UNAVAILABLE && !(req && strcmp(req, "1") == 0)) {
        printf("%s: skipped: %s\n", what, inferd_last_error());
        return false;
    }
    ck_abort_msg("%s: %s: %s", what, inferd_status_str(st), inferd_last_error());
    return false;
}

/* One rank: all_reduce of bf16 and f32 data leaves the bits; all_gather
 * (out of place and in place) is a copy. */
START_TEST(test_comm_one_rank)
{
    kern_comm *c = NULL;
    if (!comm_created(kern_comm_create_local(&kt_gpu, 1, &c), "comm_one_rank"))
        return;
    ck_assert_int_eq(kern_comm_size(c), 1);
    ck_assert_int_eq(kern_comm_rank(c), 0);
    int bad = 0;
    const size_t counts[] = {1, 7, 1000, 65537};
    for (size_t i = 0; i < 4; i++) {
        const size_t n = counts[i], bytes = n * 4; /* n f32 or 2n bf16 */
        uint8_t *h = inferd_malloc(bytes), *back = inferd_malloc(bytes);
        for (size_t j = 0; j < bytes; j++)
            h[j] = (uint8_t)(rng_uniform(70 + i, j) * 256.0);
        for (int d = 0; d < 2; d++) { /* random bits: NaN payloads too must survive */
            kt_gbuf g;
            void *buf = kt_gbuf_alloc(&g, bytes, 0);
            kern_memcpy_h2d(kt_gpu, buf, h, bytes);
            kern_all_reduce_sum(kt_gpu, c, buf, d ? n : 2 * n, d ? KERN_DTYPE_F32 : KERN_DTYPE_BF16);
            kt_gbuf_read(&g, back);
            bad += memcmp(back, h, bytes) != 0;
            bad += kt_gbuf_guards_bad(&g, "all_reduce 1 rank");
            kt_gbuf_free(&g);
        }
        void *src = kt_gpu_bytes(h, bytes);
        kt_gbuf g;
        void *dst = kt_gbuf_alloc(&g, bytes, 0);
        kern_all_gather(kt_gpu, c, dst, src, bytes);
        kt_gbuf_read(&g, back);
        bad += memcmp(back, h, bytes) != 0;
        kern_all_gather(kt_gpu, c, dst, dst, bytes); /* in place */
        kt_gbuf_read(&g, back);
        bad += memcmp(back, h, bytes) != 0;
        bad += kt_gbuf_guards_bad(&g, "all_gather 1 rank");
        kt_gbuf_free(&g);
        kern_free(kt_gpu, src);
        inferd_free(h);
        inferd_free(back);
    }
    kern_sync(kt_gpu);
    kern_comm_free(c);
    kt_record("comm_one_rank", bad, 0, 0);
    ck_assert_int_eq(bad, 0);
}
END_TEST

enum { MAX_DEV = 8 };

/* One rank's part of a multi-device case: buffers on its device. */
typedef struct {
    kern_ctx *ctx;
    kern_comm *comm;
    void *buf;         /* [count] bf16: the rank's data, then the sum */
    void *src, *dst;   /* all_gather: [bytes], [n * bytes] */
    size_t count, bytes;
} dev_rank;

static void *dev_rank_main(void *p)
{
    dev_rank *r = p;
    kern_all_reduce_sum(r->ctx, r->comm, r->buf, r->count, KERN_DTYPE_BF16);
    kern_all_gather(r->ctx, r->comm, r->dst, r->src, r->bytes);
    kern_sync(r->ctx);
    return NULL;
}

/* kt_gpu (device 0) and a ctx for each further device, at most MAX_DEV;
 * returns how many. */
static int open_devices(kern_ctx **ctxs)
{
    int n = kern_cuda_device_count();
    n = n > MAX_DEV ? MAX_DEV : n;
    ctxs[0] = kt_gpu;
    for (int d = 1; d < n; d++) {
        kern_ctx_opts o = {KERN_BACKEND_CUDA, 0, d};
        ck_assert_int_eq(kern_ctx_create(&o, &ctxs[d]), INFERD_OK);
    }
    return n;
}

/* One all_reduce + all_gather over n devices: count bf16 values per rank,
 * bytes gathered per rank. The sum is checked against the host's fp64 sum of
 * the bf16 inputs in [-1, 1) with atol n^2 / 256 (NCCL rounds to bf16 after
 * each of its n - 1 additions, a partial sum of k values being up to k in
 * size: at most sum_k k 2^-9 < n^2 2^-9 in all, plus the last rounding) and
 * rtol 1e-2, and must be the same bits on every rank; the gather is exact. */
static int multi_case(kern_ctx **ctxs, kern_comm **comms, int n, size_t count, size_t bytes, uint64_t seed)
{
    dev_rank rk[MAX_DEV];
    float *x = inferd_malloc(count * sizeof(float)), *sum = inferd_calloc(count, sizeof(float));
    double *acc = inferd_calloc(count, sizeof(double));
    uint8_t *gsrc = inferd_malloc((size_t)n * bytes + 1);
    for (int r = 0; r < n; r++) {
        rk[r] = (dev_rank){ctxs[r], comms[r], kern_alloc(ctxs[r], count * 2), kern_alloc(ctxs[r], bytes + 1),
                           kern_alloc(ctxs[r], (size_t)n * bytes + 1), count, bytes};
        ck_assert(rk[r].buf && rk[r].src && rk[r].dst);
        kt_rand_bf16(x, count, seed + (uint64_t)r, -1.0f, 1.0f);
        for (size_t i = 0; i < count; i++)
            acc[i] += x[i];
        uint16_t *hb = kt_to_bf16(x, count);
        kern_memcpy_h2d(ctxs[r], rk[r].buf, hb, count * 2);
        inferd_free(hb);
        for (size_t i = 0; i < bytes; i++)
            gsrc[(size_t)r * bytes + i] = (uint8_t)(rng_uniform(seed + 100 + (uint64_t)r, i) * 256.0);
        kern_memcpy_h2d(ctxs[r], rk[r].src, gsrc + (size_t)r * bytes, bytes);
        kern_sync(ctxs[r]);
    }
    pthread_t th[MAX_DEV];
    for (int r = 0; r < n; r++)
        ck_assert_int_eq(pthread_create(&th[r], NULL, dev_rank_main, &rk[r]), 0);
    for (int r = 0; r < n; r++)
        ck_assert_int_eq(pthread_join(th[r], NULL), 0);
    for (size_t i = 0; i < count; i++)
        sum[i] = (float)acc[i];
    uint16_t *h0 = inferd_malloc(count * 2 + 2), *h = inferd_malloc(count * 2 + 2);
    uint8_t *g = inferd_malloc((size_t)n * bytes + 1);
    int bad_sum = 0, bad_bits = 0, bad_gather = 0;
    for (int r = 0; r < n; r++) {
        kern_memcpy_d2h(ctxs[r], r ? h : h0, rk[r].buf, count * 2);
        if (r == 0) {
            kt_from_bf16(h0, x, count);
            bad_sum = kt_compare("comm_all_reduce", "sum", x, sum, count, (double)(n * n) / 256.0, 1e-2);
        } else if (memcmp(h, h0, count * 2) != 0) {
            printf("  all_reduce: rank %d holds other bits than rank 0\n", r);
            bad_bits++;
        }
        kern_memcpy_d2h(ctxs[r], g, rk[r].dst, (size_t)n * bytes);
        if (memcmp(g, gsrc, (size_t)n * bytes) != 0) {
            printf("  all_gather: rank %d, %zu bytes per rank: wrong\n", r, bytes);
            bad_gather++;
        }
        kern_free(ctxs[r], rk[r].buf);
        kern_free(ctxs[r], rk[r].src);
        kern_free(ctxs[r], rk[r].dst);
    }
    kt_record("comm_same_bits", bad_bits, 0, 0);
    kt_record("comm_all_gather", bad_gather, 0, 0);
    inferd_free(g);
    inferd_free(h);
    inferd_free(h0);
    inferd_free(gsrc);
    inferd_free(acc);
    inferd_free(sum);
    inferd_free(x);
    return bad_sum + bad_bits + bad_gather;
}

START_TEST(test_comm_devices)
{
    kern_ctx *ctxs[MAX_DEV];
    const int n = open_devices(ctxs);
    if (n < 2) {
        printf("comm_devices: skipped: one CUDA device\n");
        return;
    }
    kern_comm *comms[MAX_DEV];
    const uint64_t seed = kt_seed();
    printf("comm_devices: %d devices, seed %llu\n", n, (unsigned long long)seed);
    int bad = 0;
    if (comm_created(kern_comm_create_local(ctxs, n, comms), "comm_devices")) {
        const size_t sizes[] = {1, 7, 1000, 65537, (size_t)1 << 22};
        for (size_t i = 0; i < sizeof sizes / sizeof sizes[0]; i++)
            for (int rep = 0; rep < 3; rep++)
                bad += multi_case(ctxs, comms, n, sizes[i], sizes[i] + (size_t)rep, seed + 1000 * i + 10 * (size_t)rep);
        for (int r = 0; r < n; r++)
            kern_comm_free(comms[r]);
    }
    for (int r = 1; r < n; r++)
        kern_ctx_free(ctxs[r]);
    ck_assert_int_eq(bad, 0);
}
END_TEST

TCase *kt_tcase_tp(void)
{
    TCase *tc = tcase_create("tp");
    tcase_set_timeout(tc, 600);
    tcase_add_test(tc, test_embed_shard);
    tcase_add_test(tc, test_fill_random_part);
    tcase_add_test(tc, test_copy_2d);
    tcase_add_test(tc, test_comm_one_rank);
    tcase_add_test(tc, test_comm_devices);
    return tc;
}
