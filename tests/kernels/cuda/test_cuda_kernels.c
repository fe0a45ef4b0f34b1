/* tests/kernels/cuda/test_cuda_kernels.c: the CUDA backend against its CPU
 * twin, op by op, on fresh random inputs (label gpu; skips with 77 when no
 * CUDA device is present or the build has no CUDA backend).
 *
 * This file holds main, memory, weights and the dense per-token ops
 * (embedding, add + RMSNorm, matmul, logits, the product into the residual
 * stream, gather, SiLU * up);
 * test_cuda_attention.c covers RoPE + KV write and attention,
 * test_cuda_sample.c the sampler, test_cuda_tp.c the tensor-parallel pieces
 * (vocabulary-shard embedding, windowed dummy weights, 2-D copies, NCCL
 * communicators). Check runs in-process (CK_FORK=no): the
 * CUDA runtime cannot be used in a child forked after the parent touched it,
 * and compute-sanitizer follows one process more simply. Tolerances are
 * stated at each op: bf16 outputs are compared with rtol 1e-2..2e-2 (bf16
 * has 8 mantissa bits, 2^-9 relative rounding), fp32 logits with 1e-3.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/alloc.h"
#include "common/half.h"
#include "common/rng.h"
#include "kt_harness.h"

/* --- memory and weights ---------------------------------------------------- */

START_TEST(test_memory)
{
    size_t fr = 0, tot = 0;
    ck_assert_int_eq(kern_mem_info(kt_gpu, &fr, &tot), INFERD_OK);
    ck_assert(tot > 0 && fr <= tot);
    /* A failed allocation returns NULL and leaves the ctx usable. */
    ck_assert_ptr_null(kern_alloc(kt_gpu, (size_t)1 << 52));
    float h[37], back[37];
    for (int i = 0; i < 37; i++)
        h[i] = (float)i - 3.5f;
    void *d = kern_alloc(kt_gpu, sizeof h);
    ck_assert_ptr_nonnull(d);
    kern_memcpy_h2d(kt_gpu, d, h, sizeof h);
    kern_memcpy_d2h(kt_gpu, back, d, sizeof h);
    ck_assert_int_eq(memcmp(h, back, sizeof h), 0);
    kern_memset0(kt_gpu, d, sizeof h);
    kern_memcpy_d2h(kt_gpu, back, d, sizeof h);
    for (int i = 0; i < 37; i++)
        ck_assert(back[i] == 0.0f);
    kern_free(kt_gpu, d);
    kt_record("memory", 0, 0, 0);
}
END_TEST

/* Upload rows [off, off + n) of an R x C weight from each source dtype;
 * the result must equal the host conversion bit for bit, other rows keep
 * their 0xFFFF fill. */
static int upload_case(int64_t R, int64_t C, int64_t off, int64_t n, kern_dtype src_dt, uint64_t seed)
{
    const size_t cnt = (size_t)(n * C);
    float *v = inferd_malloc(cnt * sizeof(float));
    kt_rand_bf16(v, cnt, seed, -3.0f, 3.0f);
    for (size_t i = 0; i < cnt; i++) /* full fp32 precision so rounding matters */
        v[i] += (float)rng_uniform(seed + 1, i) * 1e-3f;
    void *src = NULL;
    uint16_t *expect = inferd_malloc(cnt * 2);
    if (src_dt == KERN_DTYPE_F32) {
        src = v;
        for (size_t i = 0; i < cnt; i++)
            expect[i] = half_f32_to_bf16(v[i]);
    } else {
        uint16_t *h = inferd_malloc(cnt * 2);
        for (size_t i = 0; i < cnt; i++) {
            h[i] = src_dt == KERN_DTYPE_F16 ? half_f32_to_f16(v[i]) : half_f32_to_bf16(v[i]);
            expect[i] = src_dt == KERN_DTYPE_F16 ? half_f32_to_bf16(half_f16_to_f32(h[i])) : h[i];
        }
        src = h;
    }
    kt_gbuf g;
    kern_weight w = {kt_gbuf_alloc(&g, (size_t)(R * C) * 2, 0), KERN_DTYPE_BF16, R, C};
    kern_weight_upload(kt_gpu, &w, off, src, src_dt, n);
    uint16_t *back = inferd_malloc((size_t)(R * C) * 2);
    kt_gbuf_read(&g, back);
    int bad = kt_gbuf_guards_bad(&g, "weight_upload");
    for (int64_t i = 0; i < R * C; i++) {
        const int64_t r = i / C;
        const uint16_t want = r >= off && r < off + n ? expect[i - off * C] : 0xFFFF;
        if (back[i] != want) {
            if (bad < 5)
                printf("  weight_upload %s: [%lld] got %04x want %04x\n", kern_dtype_name(src_dt), (long long)i,
                       back[i], want);
            bad++;
        }
    }
    kt_record("weight_upload", bad, 0, 0);
    kt_gbuf_free(&g);
    inferd_free(back);
    inferd_free(expect);
    if (src != v)
        inferd_free(src);
    inferd_free(v);
    return bad;
}

START_TEST(test_weight_upload)
{
    int bad = 0;
    const kern_dtype dts[] = {KERN_DTYPE_F32, KERN_DTYPE_F16, KERN_DTYPE_BF16};
    for (int i = 0; i < 3; i++) {
        bad += upload_case(37, 53, 5, 20, dts[i], 100 + (uint64_t)i);
        bad += upload_case(8, 64, 0, 8, dts[i], 200 + (uint64_t)i);
    }
    if (!kt_quick) /* 48 MB of F32: two chunks through the 32 MiB workspace */
        bad += upload_case(3001, 4000, 1, 3000, KERN_DTYPE_F32, 300);
    ck_assert_int_eq(bad, 0);
}
END_TEST

START_TEST(test_weight_fill_random)
{
    int bad = 0;
    const int64_t shapes[][2] = {{1000, 37}, {3, 4096}};
    for (int s = 0; s < 2; s++) {
        const int64_t R = shapes[s][0], C = shapes[s][1];
        const size_t n = (size_t)(R * C);
        kern_weight wc = {kern_alloc(kt_cpu, n * 2), KERN_DTYPE_BF16, R, C};
        kt_gbuf g;
        kern_weight wg = {kt_gbuf_alloc(&g, n * 2, 0), KERN_DTYPE_BF16, R, C};
        kern_weight_fill_random(kt_cpu, &wc, 77 + (uint64_t)s, 0.02f);
        kern_weight_fill_random(kt_gpu, &wg, 77 + (uint64_t)s, 0.02f);
        uint16_t *back = inferd_malloc(n * 2);
        kt_gbuf_read(&g, back);
        int b = kt_gbuf_guards_bad(&g, "weight_fill_random");
        const uint16_t *ref = wc.data;
        for (size_t i = 0; i < n; i++) {
            float f = half_bf16_to_f32(back[i]); /* |f| <= scale up to half a bf16 ulp */
            if (back[i] != ref[i] || !(fabsf(f) <= 0.02f * (1.0f + 1.0f / 256.0f))) {
                if (b < 5)
                    printf("  fill_random [%zu] gpu %04x cpu %04x\n", i, back[i], ref[i]);
                b++;
            }
        }
        kt_record("weight_fill_random", b, 0, 0);
        bad += b;
        inferd_free(back);
        kt_gbuf_free(&g);
        kern_free(kt_cpu, wc.data);
    }
    ck_assert_int_eq(bad, 0);
}
END_TEST

/* --- non-finite weight count ------------------------------------------------------- */

/* x[0, n) of dtype dt: random finite bit patterns (exponent never all ones),
 * then n_bad NaN/Inf patterns (quiet, signalling, negative, all-ones) at
 * distinct random places, the first and last element among them. Returns
 * the planted count. */
static int64_t nonfinite_fill(void *x, kern_dtype dt, size_t n, size_t n_bad, uint64_t seed)
{
    const uint32_t em = dt == KERN_DTYPE_F32 ? 0x7F800000u : dt == KERN_DTYPE_F16 ? 0x7C00u : 0x7F80u;
    const uint32_t lo = dt == KERN_DTYPE_F32 ? 0x00800000u : dt == KERN_DTYPE_F16 ? 0x0400u : 0x0080u;
    const uint32_t bad32[] = {0x7F800000u, 0xFF800000u, 0x7FC00000u, 0x7F800001u, 0xFFFFFFFFu};
    const uint32_t bad16[2][5] = {{0x7C00, 0xFC00, 0x7E00, 0x7C01, 0xFFFF}, {0x7F80, 0xFF80, 0x7FC0, 0x7F81, 0xFFFF}};
    for (size_t i = 0; i < n; i++) {
        uint32_t b = (uint32_t)(rng_uniform(seed, i) * 4294967296.0);
        if (dt != KERN_DTYPE_F32)
            b &= 0xFFFFu;
        if ((b & em) == em)
            b &= ~lo;
        if (dt == KERN_DTYPE_F32)
            ((uint32_t *)x)[i] = b;
        else
            ((uint16_t *)x)[i] = (uint16_t)b;
    }
    n_bad = n_bad < n ? n_bad : n;
    uint8_t *taken = inferd_calloc(n ? n : 1, 1);
    size_t planted = 0;
    for (uint64_t k = 0; planted < n_bad; k++) {
        const size_t i = planted == 0 ? 0 : planted == 1 ? n - 1 : (size_t)(rng_uniform(seed + 1, k) * (double)n);
        if (i >= n || taken[i])
            continue;
        taken[i] = 1;
        if (dt == KERN_DTYPE_F32)
            ((uint32_t *)x)[i] = bad32[planted % 5];
        else
            ((uint16_t *)x)[i] = (uint16_t)bad16[dt == KERN_DTYPE_BF16][planted % 5];
        planted++;
    }
    inferd_free(taken);
    return (int64_t)planted;
}

/* GPU count == CPU twin count == planted, for every dtype, odd sizes and
 * start addresses off the 16-byte boundary by every element step (the
 * kernel's scalar head, vector body and tail), each buffer inside guards of
 * 0xFF bytes (NaN in every dtype: an over-read miscounts); then one call
 * over a list of all of them (per-weight counters in one launch sequence).
 * Exact: counts are integers. */
START_TEST(test_count_nonfinite)
{
    const uint64_t seed = kt_seed();
    const size_t sizes[] = {1, 7, 9, 33, 4099, 100003, 5000011};
    const size_t n_sizes = kt_quick ? 6 : 7;
    const kern_dtype dts[] = {KERN_DTYPE_F32, KERN_DTYPE_F16, KERN_DTYPE_BF16};
    enum { MAXW = 3 * 7 * 8 };
    kern_weight gw[MAXW], cw[MAXW];
    int64_t want[MAXW];
    kt_gbuf gb[MAXW];
    int nw = 0, bad = 0;
    for (int d = 0; d < 3; d++)
        for (size_t s = 0; s < n_sizes; s++)
            for (size_t off = 0; off < 16; off += kern_dtype_size(dts[d]) * (s % 2 ? 1 : 2)) {
                const size_t n = sizes[s], bytes = n * kern_dtype_size(dts[d]);
                const size_t n_bad = (s + off) % 4 == 0 ? 0 : 1 + (n / 1000) % 37;
                void *h = inferd_malloc(bytes);
                want[nw] = nonfinite_fill(h, dts[d], n, n_bad, seed + 31u * (uint64_t)nw);
                void *g = kt_gbuf_alloc(&gb[nw], bytes, off);
                kern_memcpy_h2d(kt_gpu, g, h, bytes);
                gw[nw] = (kern_weight){g, dts[d], 1, (int64_t)n};
                cw[nw] = (kern_weight){kern_alloc(kt_cpu, bytes), dts[d], 1, (int64_t)n};
                memcpy(cw[nw].data, h, bytes);
                inferd_free(h);
                int64_t got_g = -1, got_c = -1;
                ck_assert_int_eq(kern_weights_count_nonfinite(kt_gpu, &gw[nw], 1, &got_g), INFERD_OK);
                ck_assert_int_eq(kern_weights_count_nonfinite(kt_cpu, &cw[nw], 1, &got_c), INFERD_OK);
                if (got_g != want[nw] || got_c != want[nw]) {
                    printf("  count_nonfinite %s n=%zu off=%zu: gpu %lld cpu %lld planted %lld (seed %llu)\n",
                           kern_dtype_name(dts[d]), n, off, (long long)got_g, (long long)got_c,
                           (long long)want[nw], (unsigned long long)seed);
                    bad++;
                }
                bad += kt_gbuf_guards_bad(&gb[nw], "count_nonfinite");
                nw++;
            }
    int64_t *got = inferd_malloc((size_t)nw * sizeof(int64_t));
    ck_assert_int_eq(kern_weights_count_nonfinite(kt_gpu, gw, nw, got), INFERD_OK);
    for (int i = 0; i < nw; i++)
        bad += got[i] != want[i];
    kt_record("count_nonfinite", bad, 0, 0);
    for (int i = 0; i < nw; i++) {
        kt_gbuf_free(&gb[i]);
        kern_free(kt_cpu, cw[i].data);
    }
    inferd_free(got);
    ck_assert_int_eq(bad, 0);
}
END_TEST

/* --- embedding, gather -------------------------------------------------------------- */

START_TEST(test_embed)
{
    const int ds[] = {64, 37, 4096};
    int bad = 0;
    for (int c = 0; c < 3; c++) {
        const int V = 97, d = ds[c], n = 11;
        float *tab = inferd_malloc((size_t)V * d * sizeof(float));
        kt_rand_bf16(tab, (size_t)V * d, 10 + (uint64_t)c, -1.0f, 1.0f);
        int32_t tok[11];
        for (int i = 0; i < n; i++)
            tok[i] = (int32_t)(rng_uniform(20 + (uint64_t)c, (uint64_t)i) * V);
        tok[0] = 0;
        tok[n - 1] = V - 1;
        kern_weight tc = kt_weight_cpu(tab, V, d), tg = kt_weight_gpu(tab, V, d);
        float *ref = inferd_malloc((size_t)n * d * sizeof(float)), *got = inferd_malloc((size_t)n * d * sizeof(float));
        kern_embed(kt_cpu, ref, tok, n, &tc);
        int32_t *dtok = kt_gpu_bytes(tok, sizeof tok);
        kt_gbuf g;
        void *out = kt_gbuf_alloc(&g, (size_t)n * d * 2, 0);
        kern_embed(kt_gpu, out, dtok, n, &tg);
        uint16_t *h = inferd_malloc((size_t)n * d * 2);
        kt_gbuf_read(&g, h);
        kt_from_bf16(h, got, (size_t)n * d);
        bad += kt_gbuf_guards_bad(&g, "embed");
        bad += kt_compare("embed", "out", got, ref, (size_t)n * d, 0.0, 0.0); /* exact: a copy */
        kt_gbuf_free(&g);
        kern_free(kt_gpu, dtok);
        kern_free(kt_gpu, tg.data);
        kern_free(kt_cpu, tc.data);
        inferd_free(h);
        inferd_free(got);
        inferd_free(ref);
        inferd_free(tab);
    }
    ck_assert_int_eq(bad, 0);
}
END_TEST

START_TEST(test_gather_rows)
{
    const int ds[] = {64, 37, 1000};
    int bad = 0;
    for (int c = 0; c < 3; c++) {
        const int N = 19, d = ds[c], r = 7;
        float *in = inferd_malloc((size_t)N * d * sizeof(float));
        kt_rand_bf16(in, (size_t)N * d, 30 + (uint64_t)c, -4.0f, 4.0f);
        int32_t idx[7] = {18, 0, 5, 5, 11, 2, 17};
        float *ref = inferd_malloc((size_t)r * d * sizeof(float)), *got = inferd_malloc((size_t)r * d * sizeof(float));
        float *cin = kt_cpu_f32(in, (size_t)N * d);
        kern_gather_rows(kt_cpu, ref, cin, idx, r, d);
        void *gin = kt_gpu_bf16(in, (size_t)N * d);
        int32_t *gidx = kt_gpu_bytes(idx, sizeof idx);
        kt_gbuf g;
        void *out = kt_gbuf_alloc(&g, (size_t)r * d * 2, 0);
        kern_gather_rows(kt_gpu, out, gin, gidx, r, d);
        uint16_t *h = inferd_malloc((size_t)r * d * 2);
        kt_gbuf_read(&g, h);
        kt_from_bf16(h, got, (size_t)r * d);
        bad += kt_gbuf_guards_bad(&g, "gather_rows");
        bad += kt_compare("gather_rows", "out", got, ref, (size_t)r * d, 0.0, 0.0);
        kt_gbuf_free(&g);
        kern_free(kt_gpu, gidx);
        kern_free(kt_gpu, gin);
        kern_free(kt_cpu, cin);
        inferd_free(h);
        inferd_free(got);
        inferd_free(ref);
        inferd_free(in);
    }
    ck_assert_int_eq(bad, 0);
}
END_TEST

/* kern_tokens_from: random sizes (1 .. 700 rows, over two CTAs of the
 * launch), a random mix of kept rows (src -1) and rows taken from a
 * "previous step" of another length, repeats included; exact, with guard
 * regions around the output (INFERD_TEST_SEED replays). */
START_TEST(test_tokens_from)
{
    const uint64_t seed = kt_seed();
    printf("  tokens_from: INFERD_TEST_SEED=%llu\n", (unsigned long long)seed);
    int bad = 0;
    for (int c = 0; c < 8; c++) {
        uint64_t r = seed * 6151 + (uint64_t)c * 7919 + 1;
        r = r * 6364136223846793005ULL + 1442695040888963407ULL;
        const int n = c == 0 ? 1 : 1 + (int)((r >> 33) % 700);
        r = r * 6364136223846793005ULL + 1442695040888963407ULL;
        const int n_from = 1 + (int)((r >> 33) % 600);
        int32_t *tok = inferd_malloc((size_t)n * sizeof *tok), *src = inferd_malloc((size_t)n * sizeof *src);
        int32_t *from = inferd_malloc((size_t)n_from * sizeof *from),
                *got = inferd_malloc((size_t)n * sizeof *got);
        for (int i = 0; i < n_from; i++)
            from[i] = 1000000 + i * 7;
        for (int i = 0; i < n; i++) {
            r = r * 6364136223846793005ULL + 1442695040888963407ULL;
            tok[i] = (int32_t)((r >> 40) % 128000);
            src[i] = (r >> 20) % 4 == 0 ? -1 : (int32_t)((r >> 24) % (uint64_t)n_from);
        }
        int32_t *gsrc = kt_gpu_bytes(src, (size_t)n * sizeof *src),
                *gfrom = kt_gpu_bytes(from, (size_t)n_from * 4);
        kt_gbuf g;
        int32_t *gtok = kt_gbuf_alloc(&g, (size_t)n * sizeof *tok, 0);
        kern_memcpy_h2d(kt_gpu, gtok, tok, (size_t)n * sizeof *tok);
        kern_tokens_from(kt_gpu, gtok, gsrc, gfrom, n);
        kt_gbuf_read(&g, got);
        kern_tokens_from(kt_cpu, tok, src, from, n); /* the CPU twin, in place */
        int diff = 0;
        for (int i = 0; i < n; i++)
            diff += got[i] != tok[i] || tok[i] != (src[i] >= 0 ? from[src[i]] : tok[i]);
        kt_record("tokens_from", diff, diff, 0);
        bad += diff + kt_gbuf_guards_bad(&g, "tokens_from");
        kt_gbuf_free(&g);
        kern_free(kt_gpu, gsrc);
        kern_free(kt_gpu, gfrom);
        inferd_free(tok);
        inferd_free(src);
        inferd_free(from);
        inferd_free(got);
    }
    ck_assert_int_eq(bad, 0);
}
END_TEST

/* --- add + RMSNorm ------------------------------------------------------------------ */

/* Tolerance: resid is bf16(resid + add) on the GPU vs the exact fp32 sum on
 * the CPU (0.4% rel), out adds one more bf16 rounding: atol 2e-2 (values are
 * O(1)), rtol 2e-2. The 16-byte path (d % 8 == 0, from 8 to 8192, up to
 * 2201 rows) and the scalar one (d = 37). */
START_TEST(test_add_rmsnorm)
{
    const struct {
        int n, d, with_add;
    } cases[] = {{1, 64, 1}, {5, 4096, 1}, {33, 37, 1}, {3, 1000, 0},  {7, 8192, 1},
                 {2, 72, 0}, {41, 4096, 1}, {9, 2048, 0}, {2, 4104, 1}, {17, 8, 1},
                 {600, 64, 0}, {2201, 256, 1}};
    int bad = 0;
    for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
        const int n = cases[c].n, d = cases[c].d;
        const size_t nd = (size_t)n * d;
        float *res = inferd_malloc(nd * sizeof(float)), *add = inferd_malloc(nd * sizeof(float)), *w = inferd_malloc((size_t)d * sizeof(float));
        kt_rand_bf16(res, nd, 40 + c, -2.0f, 2.0f);
        kt_rand_bf16(add, nd, 50 + c, -2.0f, 2.0f);
        kt_rand_bf16(w, (size_t)d, 60 + c, 0.5f, 1.5f);
        float *cres = kt_cpu_f32(res, nd), *cadd = kt_cpu_f32(add, nd);
        float *cout = inferd_malloc(nd * sizeof(float));
        kern_weight wc = kt_weight_cpu(w, 1, d), wg = kt_weight_gpu(w, 1, d);
        kern_add_rmsnorm(kt_cpu, cout, cres, cases[c].with_add ? cadd : NULL, &wc, n, 1e-5f);
        kt_gbuf gr, go;
        void *gres = kt_gbuf_alloc(&gr, nd * 2, 0);
        uint16_t *hres = kt_to_bf16(res, nd);
        kern_memcpy_h2d(kt_gpu, gres, hres, nd * 2);
        void *gadd = kt_gpu_bf16(add, nd);
        void *gout = kt_gbuf_alloc(&go, nd * 2, 0);
        kern_add_rmsnorm(kt_gpu, gout, gres, cases[c].with_add ? gadd : NULL, &wg, n, 1e-5f);
        uint16_t *h = inferd_malloc(nd * 2);
        float *got = inferd_malloc(nd * sizeof(float));
        kt_gbuf_read(&go, h);
        kt_from_bf16(h, got, nd);
        bad += kt_compare("add_rmsnorm", "out", got, cout, nd, 2e-2, 2e-2);
        kt_gbuf_read(&gr, h);
        kt_from_bf16(h, got, nd);
        bad += kt_compare("add_rmsnorm", "resid", got, cres, nd, 1e-2, 1e-2);
        bad += kt_gbuf_guards_bad(&go, "add_rmsnorm out") + kt_gbuf_guards_bad(&gr, "add_rmsnorm resid");
        kt_gbuf_free(&go);
        kt_gbuf_free(&gr);
        kern_free(kt_gpu, gadd);
        kern_free(kt_gpu, wg.data);
        kern_free(kt_cpu, wc.data);
        kern_free(kt_cpu, cres);
        kern_free(kt_cpu, cadd);
        inferd_free(h);
        inferd_free(got);
        inferd_free(hres);
        inferd_free(cout);
        inferd_free(w);
        inferd_free(add);
        inferd_free(res);
    }
    ck_assert_int_eq(bad, 0);
}
END_TEST

#ifdef INFERD_HAVE_CUDA
/* kernels/cuda/gemm.cu test hooks: the heuristic candidate a new plan takes
 * (0: its first), and what the last plan build saw and did */
extern int kcuda_gemm_pick, kcuda_gemm_last_n_res, kcuda_gemm_last_splitk, kcuda_gemm_last_tile,
    kcuda_gemm_last_searched;
#else
static int kcuda_gemm_pick, kcuda_gemm_last_n_res, kcuda_gemm_last_splitk, kcuda_gemm_last_tile,
    kcuda_gemm_last_searched;
#endif

/* --- matmul, logits ------------------------------------------------------------------ */

/* What gemm_case runs: kern_matmul, kern_logits or kern_matmul_accum. */
typedef enum { GEMM_MATMUL, GEMM_LOGITS, GEMM_ACCUM } gemm_kind;

/* One product in[n, C] @ W[R, C]^T on both backends. logits: fp32 output
 * (products of bf16 are exact in fp32, only the summation order differs:
 * atol/rtol 1e-3); matmul: bf16 output (one rounding: rtol 1e-2, atol 1e-2
 * for outputs of magnitude ~0.6); accum: added into a bf16 resid[n, R] of
 * values ~U(-2, 2) (so a product written over resid instead of added to it
 * is far off), the GPU's fp32 sum rounded once, the CPU twin's product then
 * add; matmul's tolerances. in_off shifts the GPU input by that many bytes
 * (an arena sub-buffer that is not 256-byte aligned). */
static int gemm_case(gemm_kind kind, int n, int R, int C, size_t in_off, uint64_t seed)
{
    const size_t ni = (size_t)n * C, nw = (size_t)R * C, no = (size_t)n * R;
    float *in = inferd_malloc(ni * sizeof(float)), *w = inferd_malloc(nw * sizeof(float));
    kt_rand_bf16(in, ni, seed, -1.0f, 1.0f);
    const float ws = 1.7f / sqrtf((float)C);
    kt_rand_bf16(w, nw, seed + 1, -ws, ws);
    kern_weight wc = kt_weight_cpu(w, R, C), wg = kt_weight_gpu(w, R, C);
    float *cin = kt_cpu_f32(in, ni), *ref = inferd_malloc(no * sizeof(float)), *got = inferd_malloc(no * sizeof(float));
    kt_gbuf gi, go;
    void *gin = kt_gbuf_alloc(&gi, ni * 2, in_off);
    uint16_t *hin = kt_to_bf16(in, ni), *hout = inferd_malloc(no * 2);
    kern_memcpy_h2d(kt_gpu, gin, hin, ni * 2);
    void *gout = kt_gbuf_alloc(&go, no * (kind == GEMM_LOGITS ? 4 : 2), 0);
    if (kind == GEMM_ACCUM) { /* the same bf16 residual stream on both */
        kt_rand_bf16(ref, no, seed + 2, -2.0f, 2.0f);
        uint16_t *h = kt_to_bf16(ref, no);
        kern_memcpy_h2d(kt_gpu, gout, h, no * 2);
        inferd_free(h);
    }
    static const char *const names[] = {"matmul", "logits", "matmul_accum"};
    char what[64];
    snprintf(what, sizeof what, "n=%d R=%d C=%d off=%zu", n, R, C, in_off);
    if (kind == GEMM_LOGITS) {
        kern_logits(kt_cpu, ref, cin, &wc, n);
        kern_logits(kt_gpu, gout, gin, &wg, n);
        kt_gbuf_read(&go, got);
    } else {
        if (kind == GEMM_MATMUL) {
            kern_matmul(kt_cpu, ref, cin, &wc, n);
            kern_matmul(kt_gpu, gout, gin, &wg, n);
        } else {
            kern_matmul_accum(kt_cpu, ref, cin, &wc, n);
            kern_matmul_accum(kt_gpu, gout, gin, &wg, n);
        }
        kt_gbuf_read(&go, hout);
        kt_from_bf16(hout, got, no);
    }
    const double tol = kind == GEMM_LOGITS ? 1e-3 : 1e-2;
    int bad = kt_compare(names[kind], what, got, ref, no, tol, tol);
    bad += kt_gbuf_guards_bad(&go, what) + kt_gbuf_guards_bad(&gi, "gemm input");
    kt_gbuf_free(&go);
    kt_gbuf_free(&gi);
    kern_free(kt_gpu, wg.data);
    kern_free(kt_cpu, wc.data);
    kern_free(kt_cpu, cin);
    inferd_free(hin);
    inferd_free(hout);
    inferd_free(got);
    inferd_free(ref);
    inferd_free(w);
    inferd_free(in);
    return bad;
}

START_TEST(test_matmul)
{
    int bad = 0;
    bad += gemm_case(GEMM_MATMUL, 1, 64, 64, 0, 1);
    bad += gemm_case(GEMM_MATMUL, 7, 129, 67, 0, 2);   /* odd: ld not a multiple of 8 */
    bad += gemm_case(GEMM_MATMUL, 33, 256, 512, 2, 3); /* 2-byte aligned input */
    bad += gemm_case(GEMM_MATMUL, 5, 1000, 72, 16, 4);
    bad += gemm_case(GEMM_MATMUL, 64, 384, 64, 0, 5);  /* stories-like QKV */
    if (!kt_quick) {
        bad += gemm_case(GEMM_MATMUL, 3, 4096, 4096, 0, 6);
        bad += gemm_case(GEMM_MATMUL, 130, 1024, 1024, 0, 7);
    }
    ck_assert_int_eq(bad, 0);
}
END_TEST

START_TEST(test_logits)
{
    int bad = 0;
    bad += gemm_case(GEMM_LOGITS, 1, 512, 64, 0, 11);
    bad += gemm_case(GEMM_LOGITS, 3, 1001, 37, 0, 12);
    bad += gemm_case(GEMM_LOGITS, 4, 32000, 256, 2, 13);
    if (!kt_quick)
        bad += gemm_case(GEMM_LOGITS, 2, 128256, 128, 0, 14);
    ck_assert_int_eq(bad, 0);
}
END_TEST

/* The product into the residual stream (gemm_case GEMM_ACCUM; forward.c
 * folds the O and down products' add this way where
 * kern_matmul_accum_fast), and the rule for
 * when it is taken: CUDA beyond the GEMV route for weights of at least
 * accum_min_weight_bytes, never on the CPU. */
START_TEST(test_matmul_accum)
{
    int bad = 0;
    bad += gemm_case(GEMM_ACCUM, 1, 64, 64, 0, 21);
    bad += gemm_case(GEMM_ACCUM, 7, 129, 67, 0, 22);   /* odd: cublasGemmEx with beta = 1 */
    bad += gemm_case(GEMM_ACCUM, 33, 256, 512, 2, 23); /* 2-byte aligned input */
    bad += gemm_case(GEMM_ACCUM, 17, 4096, 512, 16, 24);
    if (!kt_quick)
        bad += gemm_case(GEMM_ACCUM, 300, 1024, 4096, 0, 25);
    ck_assert_int_eq(bad, 0);
    float *w = inferd_calloc((size_t)1024 * 1024, sizeof(float));
    kern_weight wg = kt_weight_gpu(w, 1024, 1024), wc = kt_weight_cpu(w, 1024, 1024); /* 2 MiB: the GEMV's */
    kern_gemm_opts o;
    kern_gemm_config_get(kt_gpu, &o);
    ck_assert(kern_matmul_accum_fast(kt_gpu, &wg, o.gemv_max_n + 1) == o.accum); /* INFERD_GEMM_ACCUM */
    ck_assert(o.gemv_max_n == 0 || !kern_matmul_accum_fast(kt_gpu, &wg, 1));
    ck_assert(!kern_matmul_accum_fast(kt_cpu, &wc, 64));
    kern_weight small = kt_weight_gpu(w, 64, 64); /* 8 KiB: under the floor, the add stays in the norm */
    ck_assert(o.accum_min_weight_bytes > 8192 || !o.accum || kern_matmul_accum_fast(kt_gpu, &small, 64));
    ck_assert(o.accum_min_weight_bytes <= 8192 || !kern_matmul_accum_fast(kt_gpu, &small, 64));
    kern_free(kt_gpu, small.data);
    kern_free(kt_gpu, wg.data);
    kern_free(kt_cpu, wc.data);
    inferd_free(w);
}
END_TEST

/* The cuBLASLt candidate search (kern_gemm_opts.search_max_n), forced onto
 * small weights: a searched plan's products against the CPU twin (plain,
 * logits, and accumulating: the timed runs must leave the residual stream
 * alone), the search run where the heuristic offers 2+ candidates, none
 * past search_max_n or outside the search window, and a plan first built
 * inside a graph capture within the window (no search there: the capture
 * must succeed) whose replay gives the eager product's bits. */
START_TEST(test_gemm_search)
{
    kern_gemm_opts o0, o;
    kern_gemm_config_get(kt_gpu, &o0);
    o = o0;
    o.gemv_max_n = 0; /* cuBLASLt at every n */
    o.search_max_n = 64;
    o.search_min_weight_bytes = 0;
    kern_gemm_config(kt_gpu, &o);
    int bad = 0;
    bad += gemm_case(GEMM_MATMUL, 24, 512, 1000, 0, 40); /* the window closed: no search */
    ck_assert_int_eq(kcuda_gemm_last_searched, 0);
    kern_gemm_search_window(kt_gpu, true);
    bad += gemm_case(GEMM_MATMUL, 24, 512, 1024, 0, 41);
    ck_assert(kcuda_gemm_last_n_res < 2 || kcuda_gemm_last_searched >= 1);
    bad += gemm_case(GEMM_LOGITS, 17, 1000, 256, 0, 42);
    bad += gemm_case(GEMM_ACCUM, 40, 768, 512, 0, 43);
    ck_assert(kcuda_gemm_last_n_res < 2 || kcuda_gemm_last_searched >= 1);
    bad += gemm_case(GEMM_MATMUL, 65, 512, 1024, 0, 44); /* past search_max_n */
    ck_assert_int_eq(kcuda_gemm_last_searched, 0);

    /* first built inside a capture: the heuristic's first choice */
    const int n = 33, R = 640, C = 256;
    float *hw = inferd_malloc((size_t)R * C * sizeof(float)), *hx = inferd_malloc((size_t)n * C * sizeof(float));
    kt_rand_bf16(hw, (size_t)R * C, 45, -0.1f, 0.1f);
    kt_rand_bf16(hx, (size_t)n * C, 46, -1.0f, 1.0f);
    kern_weight wg = kt_weight_gpu(hw, R, C);
    void *x = kt_gpu_bf16(hx, (size_t)n * C);
    uint16_t *y = kern_alloc(kt_gpu, (size_t)n * R * 2), *hy = inferd_malloc((size_t)n * R * 2),
             *hy2 = inferd_malloc((size_t)n * R * 2);
    if (kern_graph_begin(kt_gpu) == INFERD_OK) {
        kern_matmul(kt_gpu, y, x, &wg, n);
        kern_graph *g = NULL;
        ck_assert_int_eq(kern_graph_end(kt_gpu, &g), INFERD_OK);
        ck_assert_int_eq(kcuda_gemm_last_searched, 0);
        kern_graph_launch(kt_gpu, g);
        kern_memcpy_d2h(kt_gpu, hy, y, (size_t)n * R * 2);
        kern_matmul(kt_gpu, y, x, &wg, n); /* eager: the same plan */
        kern_memcpy_d2h(kt_gpu, hy2, y, (size_t)n * R * 2);
        ck_assert(memcmp(hy, hy2, (size_t)n * R * 2) == 0);
        kern_graph_free(kt_gpu, g);
    }
    kern_gemm_search_window(kt_gpu, false);
    kern_gemm_config(kt_gpu, &o0);
    kern_free(kt_gpu, y);
    kern_free(kt_gpu, x);
    kern_free(kt_gpu, wg.data);
    inferd_free(hy2);
    inferd_free(hy);
    inferd_free(hx);
    inferd_free(hw);
    ck_assert_int_eq(bad, 0);
}
END_TEST

/* --- small-batch GEMV (kernels/cuda/gemv.cu) ------------------------------------------ */

/* Every n the GEMV takes (1..16; a subset under INFERD_TEST_QUICK), with
 * and without programmatic dependent launch, against kcpu_matmul /
 * kcpu_logits on odd row counts and C = 8..4096 (multiples of 8), inputs
 * 16-byte but not 256-byte aligned; then cuBLASLt forced on the same shapes
 * (the other branch of the run-time choice), the variant-1 tile, and the
 * tensor-core form with and without PDL (row counts off the 16-row tile, C
 * off the 32-element chunk and shorter than one chunk a warp, n on both
 * sides of the 8-token n-tile). Tolerances as gemm_case. */
START_TEST(test_gemv)
{
    kern_gemm_opts go0;
    kern_gemm_config_get(kt_gpu, &go0);
    static const int shapes[][2] = {{1, 8}, {3, 72}, {37, 264}, {129, 1000}, {1000, 64}, {61, 4096}};
    const int n_shapes = (int)(sizeof shapes / sizeof shapes[0]);
    const uint64_t seed = kt_seed();
    printf("test_gemv: seed %llu\n", (unsigned long long)seed);
    int bad = 0, k = 0;
    /* GEMV without PDL, with PDL, cuBLASLt, GEMV variant 1, tensor-core form with PDL, without, with its
     * weights through the shared-memory ring (forced), with products of 9..16 tokens of weights of
     * 4 KiB and more on cuBLASLt (gemv_lt_min_bytes: the route chosen per weight), and triggering its
     * dependents once its weights are read (gemv_tc_trigger), in registers at one n-tile (the default
     * rule: 9..16 tokens without) and through the ring at every n */
    for (int mode = 0; mode < 10; mode++) {
        const bool tc = mode >= 4;
        kern_gemm_opts go = {.gemv_max_n = mode == 2 ? 0 : 16, .gemv_min_weight_bytes = 0,
                             .pdl = mode != 0 && mode != 5, .gemv_variant = mode == 3, .gemv_tc_min_n = tc ? 1 : 0,
                             .gemv_tc_ring = mode == 6 || mode == 9 ? 2 : 0, .gemv_lt_min_bytes = mode == 7 ? 4096 : 0,
                             .gemv_tc_trigger = mode == 8 ? 1 : mode == 9 ? 2 : 0};
        kern_gemm_config(kt_gpu, &go);
        for (int n = 1; n <= 16; n++) {
            const bool quick_n = tc ? n == 1 || n == 3 || n == 8 || n == 9 || n == 16
                                    : n == 1 || n == 2 || n == 5 || n == 16;
            if ((kt_quick && !quick_n) || (mode == 3 && n > 2))
                continue;
            for (int si = 0; si < n_shapes; si++, k++) {
                if ((kt_quick || (mode >= 2 && !tc)) && (si + n) % 2)
                    continue;
                const int R = shapes[si][0], C = shapes[si][1];
                const gemm_kind kind = k % 2 == 0 ? GEMM_LOGITS : GEMM_MATMUL;
                bad += gemm_case(kind, n, R, C, (size_t)(16 * (k % 3)), seed + (uint64_t)k);
            }
        }
    }
    if (!kt_quick) { /* Llama-3-8B down projection and lm_head shapes, both forms */
        for (int tc = 0; tc < 2; tc++) {
            kern_gemm_opts go = {.gemv_max_n = 16, .gemv_min_weight_bytes = 0, .pdl = true, .gemv_tc_min_n = tc};
            kern_gemm_config(kt_gpu, &go);
            bad += gemm_case(GEMM_MATMUL, tc ? 12 : 2, 4096, 14336, 0, seed + 1000);
            bad += gemm_case(GEMM_LOGITS, tc ? 16 : 1, 128256, 4096, 16, seed + 1001);
        }
    }
    kern_gemm_config(kt_gpu, &go0);
    ck_assert_int_eq(bad, 0);
}
END_TEST

/* A logits product's buffers for the GEMV's bitwise tests: N input rows
 * and an R x C weight, random bf16 values of seed, on the GPU; ref and got
 * hold N x R host results. */
typedef struct {
    float *in, *w, *ref, *got; /* host: [N, C], [R, C], [N, R], [N, R] */
    kern_weight wg;
    void *gin;   /* [N, C] bf16 */
    float *gout; /* [N, R] */
} gemv_bufs;

static void gemv_bufs_make(gemv_bufs *b, int N, int R, int C, uint64_t seed)
{
    b->in = inferd_malloc(sizeof(float) * (size_t)N * C);
    b->w = inferd_malloc(sizeof(float) * (size_t)R * C);
    kt_rand_bf16(b->in, (size_t)N * C, seed, -1.0f, 1.0f);
    kt_rand_bf16(b->w, (size_t)R * C, seed + 1, -0.1f, 0.1f);
    b->wg = kt_weight_gpu(b->w, R, C);
    b->gin = kt_gpu_bf16(b->in, (size_t)N * C);
    b->gout = kern_alloc(kt_gpu, sizeof(float) * (size_t)N * R);
    b->ref = inferd_malloc(sizeof(float) * (size_t)N * R);
    b->got = inferd_malloc(sizeof(float) * (size_t)N * R);
}

static void gemv_bufs_free(gemv_bufs *b)
{
    kern_free(kt_gpu, b->gout);
    kern_free(kt_gpu, b->gin);
    kern_free(kt_gpu, b->wg.data);
    inferd_free(b->got);
    inferd_free(b->ref);
    inferd_free(b->w);
    inferd_free(b->in);
}

/* The tensor-core form's shared-memory ring (gemv_tc_ring) changes where
 * the weights wait, not the arithmetic: its products equal the register
 * form's bit for bit, n on both sides of the 8-token n-tile, rows off the
 * CTA tile, C shorter than a warp's chunks and past the ring's stages. */
START_TEST(test_gemv_ring_bitwise)
{
    kern_gemm_opts go0;
    kern_gemm_config_get(kt_gpu, &go0);
    static const int shapes[][2] = {{3, 8}, {203, 520}, {1000, 64}, {61, 4096}};
    static const int ns[] = {1, 2, 3, 5, 9, 16};
    const uint64_t seed = kt_seed() + 91;
    int bad = 0;
    for (int si = 0; si < 4; si++) {
        const int R = shapes[si][0], C = shapes[si][1];
        gemv_bufs b;
        gemv_bufs_make(&b, 16, R, C, seed + 10 * (uint64_t)si);
        for (int i = 0; i < 6; i++) {
            const int n = ns[i];
            for (int ring = 0; ring <= 2; ring += 2) {
                const kern_gemm_opts go = {.gemv_max_n = 16, .gemv_min_weight_bytes = 0, .pdl = true,
                                           .gemv_variant = 1, .gemv_tc_min_n = 1, .gemv_tc_ring = ring};
                kern_gemm_config(kt_gpu, &go);
                kern_logits(kt_gpu, b.gout, b.gin, &b.wg, n);
                kern_memcpy_d2h(kt_gpu, ring ? b.got : b.ref, b.gout, sizeof(float) * (size_t)n * R);
            }
            if (memcmp(b.got, b.ref, sizeof(float) * (size_t)n * R) != 0 && bad++ < 10)
                printf("  gemv ring: %d x %d at n = %d differs from the register form\n", R, C, n);
        }
        gemv_bufs_free(&b);
    }
    kt_record("gemv_ring_bitwise", bad, 0, 0);
    kern_gemm_config(kt_gpu, &go0);
    ck_assert_int_eq(bad, 0);
}
END_TEST

/* The GEMV's result for a token does not depend on how many tokens share
 * the launch (what makes a padded graph replay equal the eager step):
 * logits of token t computed in a batch of n equal those of a batch of 16
 * bit for bit, for every n; the CUDA-core form and the tensor-core form
 * each (the case's loop index picks). */
START_TEST(test_gemv_batch_invariant)
{
    kern_gemm_opts go0;
    kern_gemm_config_get(kt_gpu, &go0);
    const kern_gemm_opts go = {.gemv_max_n = 16, .gemv_min_weight_bytes = 0, .pdl = true, .gemv_tc_min_n = _i};
    kern_gemm_config(kt_gpu, &go);
    const int R = 203, C = 520, N = 16;
    gemv_bufs b;
    gemv_bufs_make(&b, N, R, C, kt_seed() + 77);
    float *ref = b.ref, *got = b.got, *gout = b.gout;
    kern_logits(kt_gpu, gout, b.gin, &b.wg, N);
    kern_memcpy_d2h(kt_gpu, ref, gout, sizeof(float) * N * R);
    int bad = 0;
    for (int n = 1; n < N; n++) {
        kern_logits(kt_gpu, gout, b.gin, &b.wg, n);
        kern_memcpy_d2h(kt_gpu, got, gout, sizeof(float) * (size_t)n * R);
        if (memcmp(got, ref, sizeof(float) * (size_t)n * R) != 0) {
            printf("  gemv%s: batch of %d differs from batch of %d\n", _i ? " (tensor cores)" : "", n, N);
            bad++;
        }
    }
    kt_record("gemv_batch_invariant", bad, 0, 0);
    kern_gemm_config(kt_gpu, &go0);
    gemv_bufs_free(&b);
    ck_assert_int_eq(bad, 0);
}
END_TEST

/* The GEMM bench's shapes: Llama-3-8B's products (the first
 * five; lm_head as logits), then a small one. kind: 0 a
 * plain product, 1 logits (fp32). */
typedef struct {
    const char *name;
    int R, C, kind;
} bench_shape;
static const bench_shape bench_shapes[] = {{"qkv", 6144, 4096, 0},      {"o", 4096, 4096, 0},
                                           {"gate_up", 28672, 4096, 0}, {"down", 4096, 14336, 0},
                                           {"lm_head", 128256, 4096, 1}, {"small", 512, 512, 0}};

/* A benchmark shape's operands: `copies` copies of a random R x C bf16
 * weight (256 MiB together or more, so the L2 never holds the one read
 * next), nmax random input rows and an output of nmax fp32 rows. */
typedef struct {
    uint8_t *slab;
    void *in, *out;
    size_t wb; /* bytes of one copy */
    int R, C, kind, copies;
} bench_ops;

static void bench_ops_make(bench_ops *b, const bench_shape *sh, int nmax, uint64_t seed)
{
    const int R = sh->R, C = sh->C;
    b->R = R;
    b->C = C;
    b->kind = sh->kind;
    b->wb = (size_t)R * (size_t)C * 2;
    b->copies = (int)((((size_t)256 << 20) + b->wb - 1) / b->wb);
    b->copies = b->copies < 2 ? 2 : b->copies;
    b->slab = kern_alloc(kt_gpu, b->wb * (size_t)b->copies);
    ck_assert_ptr_nonnull(b->slab);
    kern_weight all = {b->slab, KERN_DTYPE_BF16, (int64_t)R * b->copies, C};
    kern_weight_fill_random(kt_gpu, &all, seed, 0.02f);
    const size_t ni = (size_t)nmax * (size_t)C;
    float *hin = inferd_malloc(ni * sizeof(float));
    kt_rand_bf16(hin, ni, seed + 4, -1.0f, 1.0f);
    b->in = kt_gpu_bf16(hin, ni);
    inferd_free(hin);
    b->out = kern_alloc(kt_gpu, (size_t)nmax * (size_t)R * 4);
}

static void bench_ops_free(bench_ops *b)
{
    kern_free(kt_gpu, b->out);
    kern_free(kt_gpu, b->in);
    kern_free(kt_gpu, b->slab);
}

/* One product of n tokens of w as the shape's kind says. */
static void bench_ops_run(const bench_ops *b, const kern_weight *w, int n)
{
    if (b->kind == 1)
        kern_logits(kt_gpu, b->out, b->in, w, n);
    else
        kern_matmul(kt_gpu, b->out, b->in, w, n);
}

/* Microseconds a product of n tokens (bench_ops_run) under the ctx's
 * current options: a warm-up round over the copies, then at least 30
 * products timed, each on the next copy. */
static double bench_ops_time(const bench_ops *b, kern_timer *t, int n)
{
    const int reps = 6 * b->copies > 30 ? 6 * b->copies : 30;
    for (int r = -b->copies; r < reps; r++) {
        if (r == 0)
            kern_timer_record(kt_gpu, t, 0);
        kern_weight w = {b->slab + b->wb * (size_t)((r + b->copies) % b->copies), KERN_DTYPE_BF16, b->R, b->C};
        bench_ops_run(b, &w, n);
    }
    kern_timer_record(kt_gpu, t, 1);
    kern_sync(kt_gpu);
    return 1e3 * kern_timer_ms(kt_gpu, t, 0, 1) / reps;
}

/* Not a test: with INFERD_TEST_GEMM_BENCH=1, time cuBLASLt, the GEMV with
 * PDL, its variant 1 (n <= 2), its tensor-core form with PDL, without and
 * with the shared-memory ring (forced), on the
 * Llama-3-8B weight shapes for n = 1..64 (the GEMV forms for n <= 16) and
 * print a table (us per product, GB/s of weight bytes, % of the copy
 * bandwidth); for n >= 16 also each of cuBLASLt's first 8 heuristic
 * candidates (GEMM_PICK rows: split-K count and tile id of each).
 * Each shape rotates over enough weight copies (>= 256 MiB) that the L2
 * never holds them; weights random (kern_weight_fill_random). This is the
 * measurement behind KCUDA_GEMV_DEFAULT_MAX_N (docs/PERF.md). */
START_TEST(test_gemm_small_bench)
{
    const char *e = getenv("INFERD_TEST_GEMM_BENCH");
    if (!e || strcmp(e, "1") != 0 || kt_quick)
        return;
    kern_ceilings cl;
    ck_assert_int_eq(kern_measure_ceilings(kt_gpu, &cl), INFERD_OK);
    kern_gemm_opts go0;
    kern_gemm_config_get(kt_gpu, &go0);
    const bench_shape *sh = bench_shapes;
    const size_t n_sh = sizeof bench_shapes / sizeof bench_shapes[0];
    static const int ns[] = {1, 2, 4, 6, 8, 12, 16, 24, 32, 48, 64};
    enum { NMAX = 64, NCOL = 5 };
    kern_timer *t = kern_timer_create(kt_gpu, 2);
    ck_assert_ptr_nonnull(t);
    printf("\nGEMM_BENCH copy %.0f GB/s; us per product (GB/s of weights, %% copy BW)\n", cl.copy_gbps);
    printf("GEMM_BENCH | shape | n | cuBLASLt us | GEMV+PDL us | GEMV v1+PDL us | GEMV TC+PDL us | GEMV TC ring us | "
           "cuBLASLt %%BW | GEMV+PDL %%BW | GEMV v1+PDL %%BW | GEMV TC+PDL %%BW | GEMV TC ring %%BW |\n");
    for (size_t s = 0; s < n_sh; s++) {
        bench_ops b;
        bench_ops_make(&b, &sh[s], NMAX, 5 + s);
        const size_t wb = b.wb;
        for (size_t ni_ = 0; ni_ < sizeof ns / sizeof ns[0]; ni_++) {
            const int n = ns[ni_];
            double us[NCOL + 7];
            int splitk[8], tile[8], n_res = 1;
            /* modes 0..NCOL-1 as the columns; NCOL..: cuBLASLt's candidates 1..7 (n >= 16) */
            for (int mode = 0; mode < NCOL + 7; mode++) {
                const int pick = mode >= NCOL ? mode - NCOL + 1 : 0;
                if (mode >= NCOL && (n < 16 || pick >= n_res))
                    continue;
                if (mode >= 1 && mode < NCOL && n > 16) { /* the GEMV forms take n <= 16 */
                    us[mode] = us[0];
                    continue;
                }
                kern_gemm_opts go = {.gemv_max_n = mode == 0 || mode >= NCOL ? 0 : 16, .gemv_min_weight_bytes = 0,
                                     .pdl = true, .gemv_variant = mode == 2, .gemv_tc_min_n = mode == 3 || mode == 4,
                                     .gemv_tc_ring = mode == 4 ? 2 : 0};
                kern_gemm_config(kt_gpu, &go);
                kcuda_gemm_pick = pick;
                kcuda_gemm_last_n_res = kcuda_gemm_last_splitk = kcuda_gemm_last_tile = -9; /* -9: no plan built */
                us[mode] = bench_ops_time(&b, t, n); /* its warm-up builds the plans */
                if (mode == 0 || mode >= NCOL) { /* a plan was built in this mode's warm-up */
                    if (mode == 0)
                        n_res = 8; /* a pick run asks again for up to 8 */
                    splitk[pick] = kcuda_gemm_last_splitk;
                    tile[pick] = kcuda_gemm_last_tile;
                    if (mode >= NCOL && kcuda_gemm_last_n_res >= 0)
                        n_res = kcuda_gemm_last_n_res;
                }
            }
            kcuda_gemm_pick = 0;
            double pct[NCOL];
            for (int mode = 0; mode < NCOL; mode++)
                pct[mode] = 100.0 * ((double)wb / (us[mode] * 1e-6) / 1e9) / cl.copy_gbps;
            printf("GEMM_BENCH | %s %dx%d | %d | %.1f | %.1f | %.1f | %.1f | %.1f | %.1f%% | %.1f%% | %.1f%% | %.1f%% | "
                   "%.1f%% |\n",
                   sh[s].name, sh[s].R, sh[s].C, n, us[0], us[1], us[2], us[3], us[4], pct[0], pct[1], pct[2], pct[3],
                   pct[4]);
            for (int k = 0; n >= 16 && k < n_res && k < 8; k++) {
                const double u = k == 0 ? us[0] : us[NCOL - 1 + k];
                printf("GEMM_PICK | %s %dx%d | %d | candidate %d | %.1f us | %.1f%% | split-k %d | tile %d |\n",
                       sh[s].name, sh[s].R, sh[s].C, n, k, u, 100.0 * ((double)wb / (u * 1e-6) / 1e9) / cl.copy_gbps,
                       splitk[k], tile[k]);
            }
        }
        bench_ops_free(&b);
    }
    kern_timer_free(kt_gpu, t);
    kern_gemm_config(kt_gpu, &go0);
}
END_TEST

/* --- SiLU * up ------------------------------------------------------------------------ */

/* Tolerance: one bf16 rounding of the product: rtol 1e-2, atol 1e-3. */
START_TEST(test_silu_mul)
{
    const int fs[][2] = {{3, 64}, {17, 1000}, {5, 37}, {1, 14336}};
    int bad = 0;
    for (int c = 0; c < 4; c++) {
        const int n = fs[c][0], f = fs[c][1];
        const size_t nin = (size_t)n * 2 * f, nout = (size_t)n * f;
        float *gu = inferd_malloc(nin * sizeof(float));
        kt_rand_bf16(gu, nin, 70 + (uint64_t)c, -6.0f, 6.0f);
        float *cgu = kt_cpu_f32(gu, nin), *ref = inferd_malloc(nout * sizeof(float)), *got = inferd_malloc(nout * sizeof(float));
        kern_silu_mul(kt_cpu, ref, cgu, n, f);
        void *ggu = kt_gpu_bf16(gu, nin);
        kt_gbuf g;
        void *out = kt_gbuf_alloc(&g, nout * 2, 0);
        kern_silu_mul(kt_gpu, out, ggu, n, f);
        uint16_t *h = inferd_malloc(nout * 2);
        kt_gbuf_read(&g, h);
        kt_from_bf16(h, got, nout);
        bad += kt_compare("silu_mul", "out", got, ref, nout, 1e-3, 1e-2);
        bad += kt_gbuf_guards_bad(&g, "silu_mul");
        kt_gbuf_free(&g);
        kern_free(kt_gpu, ggu);
        kern_free(kt_cpu, cgu);
        inferd_free(h);
        inferd_free(got);
        inferd_free(ref);
        inferd_free(gu);
    }
    ck_assert_int_eq(bad, 0);
}
END_TEST

/* kern_silu_mul_rms (a folded norm): x rows of d values (d % 8 == 0 and
 * not: both ways of summing a row's squares; x off 16-byte alignment by 2
 * bytes: the scalar way), gate/up rows of odd and even f (the vector and
 * scalar items), n from 1 to 37 (one part a row and several). Tolerance:
 * the GPU's bf16 roundings of g r and u r and of the result. */
START_TEST(test_silu_mul_rms)
{
    const int fs[][4] = {{1, 14336, 4096, 0}, {3, 64, 64, 0}, {17, 1000, 37, 0}, {5, 37, 40, 2}, {37, 88, 8, 0}};
    const uint64_t seed = kt_seed();
    printf("silu_mul_rms: seed %llu\n", (unsigned long long)seed);
    int bad = 0;
    for (int c = 0; c < 5; c++) {
        const int n = fs[c][0], f = fs[c][1], d = fs[c][2], xoff = fs[c][3];
        const size_t nin = (size_t)n * 2 * f, nout = (size_t)n * f, nx = (size_t)n * d;
        float *gu = inferd_malloc(nin * sizeof(float)), *x = inferd_malloc(nx * sizeof(float));
        kt_rand_bf16(gu, nin, seed + 10 * (uint64_t)c, -6.0f, 6.0f);
        kt_rand_bf16(x, nx, seed + 10 * (uint64_t)c + 1, -3.0f, 3.0f);
        float *cgu = kt_cpu_f32(gu, nin), *cx = kt_cpu_f32(x, nx);
        float *ref = inferd_malloc(nout * sizeof(float)), *got = inferd_malloc(nout * sizeof(float));
        kern_silu_mul_rms(kt_cpu, ref, cgu, n, f, cx, d, 1e-5f);
        void *ggu = kt_gpu_bf16(gu, nin);
        kt_gbuf g, gx;
        void *dx = kt_gbuf_alloc(&gx, nx * 2, (size_t)xoff);
        uint16_t *hx = kt_to_bf16(x, nx);
        kern_memcpy_h2d(kt_gpu, dx, hx, nx * 2);
        void *out = kt_gbuf_alloc(&g, nout * 2, 0);
        kern_silu_mul_rms(kt_gpu, out, ggu, n, f, dx, d, 1e-5f);
        uint16_t *h = inferd_malloc(nout * 2);
        kt_gbuf_read(&g, h);
        kt_from_bf16(h, got, nout);
        char what[64];
        snprintf(what, sizeof what, "n=%d f=%d d=%d x+%d", n, f, d, xoff);
        bad += kt_compare("silu_mul_rms", what, got, ref, nout, 2e-3, 2e-2);
        bad += kt_gbuf_guards_bad(&g, "silu_mul_rms") + kt_gbuf_guards_bad(&gx, "silu_mul_rms x");
        kt_gbuf_free(&g);
        kt_gbuf_free(&gx);
        kern_free(kt_gpu, ggu);
        kern_free(kt_cpu, cgu);
        kern_free(kt_cpu, cx);
        inferd_free(hx);
        inferd_free(h);
        inferd_free(got);
        inferd_free(ref);
        inferd_free(x);
        inferd_free(gu);
    }
    ck_assert_int_eq(bad, 0);
}
END_TEST

/* kern_weight_scale_cols (the norm fold at load): bf16 weights times a bf16
 * norm weight, rounded once: the GPU's bits equal the CPU twin's on a bf16
 * weight, bitwise (the same fp32 product, the same rounding); odd shapes
 * and a one-row weight. */
START_TEST(test_weight_scale_cols)
{
    const int64_t shapes[][2] = {{37, 53}, {1, 8}, {300, 4096}};
    const uint64_t seed = kt_seed();
    int bad = 0;
    for (int c = 0; c < 3; c++) {
        const int64_t R = shapes[c][0], C = shapes[c][1];
        const size_t nw = (size_t)(R * C);
        float *w = inferd_malloc(nw * sizeof(float)), *g = inferd_malloc((size_t)C * sizeof(float));
        kt_rand_bf16(w, nw, seed + (uint64_t)c, -2.0f, 2.0f);
        kt_rand_bf16(g, (size_t)C, seed + 50 + (uint64_t)c, 0.01f, 3.0f);
        uint16_t *wb = kt_to_bf16(w, nw), *gb = kt_to_bf16(g, (size_t)C);
        kern_weight wc = {inferd_malloc(nw * 2), KERN_DTYPE_BF16, R, C}, gc = {gb, KERN_DTYPE_BF16, 1, C};
        memcpy(wc.data, wb, nw * 2);
        kern_weight_scale_cols(kt_cpu, &wc, &gc);
        kern_weight wg = kt_weight_gpu(w, R, C), gg = kt_weight_gpu(g, 1, C);
        kern_weight_scale_cols(kt_gpu, &wg, &gg);
        uint16_t *got = inferd_malloc(nw * 2);
        kern_memcpy_d2h(kt_gpu, got, wg.data, nw * 2);
        int b = memcmp(got, wc.data, nw * 2) != 0;
        int changed = memcmp(got, wb, nw * 2) != 0;
        if (b || !changed)
            printf("  weight_scale_cols %lld x %lld: %s\n", (long long)R, (long long)C,
                   b ? "GPU bits differ from the CPU twin's" : "the weight did not change");
        kt_record("weight_scale_cols", b + !changed, 0, 0);
        bad += b + !changed;
        kern_free(kt_gpu, wg.data);
        kern_free(kt_gpu, gg.data);
        inferd_free(got);
        inferd_free(wc.data);
        inferd_free(wb);
        inferd_free(gb);
        inferd_free(g);
        inferd_free(w);
    }
    ck_assert_int_eq(bad, 0);
}
END_TEST

/* kern_f32_to_act: random fp32 values (every fifth exactly halfway between
 * two bf16 values: round to even), the CPU twin's copy rounded by
 * common/half.h on the host is the reference, bitwise. Both CUDA paths: 8
 * values a thread (count % 8 == 0, 16-byte aligned) and one a thread (odd
 * counts, or in / out off 16-byte alignment by 4 / 2 bytes). */
static int f32_to_act_case(size_t count, size_t in_off, size_t out_off, uint64_t seed)
{
    float *x = inferd_malloc((count ? count : 1) * sizeof(float));
    for (size_t i = 0; i < count; i++) {
        const float v = (float)((rng_uniform(seed, i) - 0.5) * 200.0);
        uint32_t b;
        memcpy(&b, &v, 4);
        if (i % 5 == 0)
            b = (b & 0xFFFF0000u) | 0x8000u; /* a tie */
        memcpy(&x[i], &b, 4);
    }
    float *cx = kt_cpu_f32(x, count), *ref = inferd_malloc((count ? count : 1) * sizeof(float));
    kern_f32_to_act(kt_cpu, ref, cx, count);
    uint16_t *want = kt_to_bf16(ref, count), *got = inferd_malloc((count ? count : 1) * 2);
    kt_gbuf gi, go;
    float *gin = kt_gbuf_alloc(&gi, count * sizeof(float), in_off);
    kern_memcpy_h2d(kt_gpu, gin, x, count * sizeof(float));
    void *out = kt_gbuf_alloc(&go, count * 2, out_off);
    kern_f32_to_act(kt_gpu, out, gin, count);
    kt_gbuf_read(&go, got);
    int bad = 0;
    for (size_t i = 0; i < count; i++)
        bad += got[i] != want[i];
    if (bad)
        printf("  f32_to_act count %zu in+%zu out+%zu: %d of %zu differ\n", count, in_off, out_off, bad, count);
    kt_record("f32_to_act", bad, 0, 0);
    bad += kt_gbuf_guards_bad(&go, "f32_to_act");
    kt_gbuf_free(&gi);
    kt_gbuf_free(&go);
    kern_free(kt_cpu, cx);
    inferd_free(x);
    inferd_free(ref);
    inferd_free(want);
    inferd_free(got);
    return bad;
}

START_TEST(test_f32_to_act)
{
    const uint64_t seed = kt_seed();
    printf("f32_to_act: seed %llu\n", (unsigned long long)seed);
    const size_t counts[] = {1, 7, 8, 1000, 4099, 65536, (size_t)3 << 20};
    int bad = 0;
    for (size_t c = 0; c < sizeof counts / sizeof counts[0]; c++) {
        if (kt_quick && counts[c] > 70000)
            continue;
        bad += f32_to_act_case(counts[c], 0, 0, seed + c);
        bad += f32_to_act_case(counts[c], 4, 2, seed + 100 + c);
    }
    ck_assert_int_eq(bad, 0);
}
END_TEST

/* --- QKV epilogue (Qwen2 biases, Qwen3 per-head q/k RMSNorm) fused into RoPE + KV write --- */

/* One case of kern_rope_kv_write_ex: random bf16 qkv rows, biases in
 * [-1, 1), norm weights in [0.5, 1.5); every fourth token padding (slot -1),
 * the others at shuffled cache slots. GPU qkv and caches in guarded buffers
 * (caches pre-filled 0xFF: unwritten slots must stay so). Tolerance: atol 3e-2,
 * rtol 2e-2: the GPU rounds the biased row and the normed heads to bf16
 * (as HF does) before RoPE, the CPU twin stays fp32 throughout. mscale
 * (YaRN's attention factor on cos and sin; 0 = 1) goes to both twins.
 * rms_d > 0: a folded norm's input rows (kern_qkv_epilogue.rms_x, n_tokens
 * x rms_d in [-3, 3)) scale each token's row first. */
static int qkv_epi_case(int nh, int nkv, int hd, int bs, int n_tokens, bool bias, bool norm, float mscale,
                        int rms_d, uint64_t seed)
{
    const int row = (nh + 2 * nkv) * hd;
    const int n_blocks = n_tokens / bs + 3;
    const size_t nq = (size_t)n_tokens * row, nc = (size_t)n_blocks * nkv * bs * hd;
    float *qkv = inferd_malloc(nq * sizeof(float));
    kt_rand_bf16(qkv, nq, seed, -2.0f, 2.0f);
    float *bv = inferd_malloc((size_t)row * sizeof(float)), *qw = inferd_malloc((size_t)hd * sizeof(float)),
          *kw = inferd_malloc((size_t)hd * sizeof(float));
    kt_rand_bf16(bv, (size_t)row, seed + 1, -1.0f, 1.0f);
    kt_rand_bf16(qw, (size_t)hd, seed + 2, 0.5f, 1.5f);
    kt_rand_bf16(kw, (size_t)hd, seed + 3, 0.5f, 1.5f);
    int32_t *pos = inferd_malloc((size_t)n_tokens * sizeof(int32_t));
    int64_t *slot = inferd_malloc((size_t)n_tokens * sizeof(int64_t));
    const int n_slots = n_blocks * bs;
    int stride = 7; /* distinct slots: t * stride mod n_slots with gcd(stride, n_slots) = 1 */
    for (;; stride++) {
        int a = stride, b = n_slots;
        while (b) {
            int r = a % b;
            a = b;
            b = r;
        }
        if (a == 1)
            break;
    }
    for (int t = 0; t < n_tokens; t++) {
        pos[t] = (int32_t)(rng_uniform(seed + 4, (uint64_t)t) * 3000);
        slot[t] = t % 4 == 2 ? -1 : ((int64_t)t * stride + 3) % n_slots;
    }
    float *inv = inferd_malloc((size_t)(hd / 2) * sizeof(float));
    for (int j = 0; j < hd / 2; j++)
        inv[j] = (float)(1.0 / pow(1000000.0, 2.0 * j / hd));
    const size_t nx = (size_t)n_tokens * (size_t)(rms_d > 0 ? rms_d : 1); /* a folded norm's input rows */
    float *x = inferd_malloc(nx * sizeof(float));
    kt_rand_bf16(x, nx, seed + 5, -3.0f, 3.0f);
    float *cx = kt_cpu_f32(x, nx);

    /* CPU twin */
    float *cqkv = kt_cpu_f32(qkv, nq);
    float *ckc = inferd_malloc(nc * sizeof(float)), *cvc = inferd_malloc(nc * sizeof(float));
    for (size_t i = 0; i < nc; i++)
        ckc[i] = cvc[i] = NAN;
    kern_weight cb = kt_weight_cpu(bv, row, 1), cqn = kt_weight_cpu(qw, 1, hd), ckn = kt_weight_cpu(kw, 1, hd);
    kern_rope_kv_params pc = {.qkv = cqkv, .positions = pos, .slot_mapping = slot, .inv_freq = inv,
                              .k_cache = ckc, .v_cache = cvc, .n_tokens = n_tokens, .n_heads = nh,
                              .n_kv_heads = nkv, .head_dim = hd, .block_size = bs, .mscale = mscale};
    kern_qkv_epilogue ec = {.qkv_bias = bias ? &cb : NULL, .q_norm = norm ? &cqn : NULL,
                            .k_norm = norm ? &ckn : NULL, .norm_eps = 1e-6f, .rms_x = rms_d > 0 ? cx : NULL,
                            .rms_cols = rms_d};
    kern_rope_kv_write_ex(kt_cpu, &pc, &ec);

    /* GPU, odd offsets into guarded buffers where the op allows them (bf16: 2-byte aligned) */
    kt_gbuf gq, gk, gv;
    void *dqkv = kt_gbuf_alloc(&gq, nq * 2, 2);
    uint16_t *hq = kt_to_bf16(qkv, nq);
    kern_memcpy_h2d(kt_gpu, dqkv, hq, nq * 2);
    void *dkc = kt_gbuf_alloc(&gk, nc * 2, 0), *dvc = kt_gbuf_alloc(&gv, nc * 2, 0);
    void *dpos = kt_gpu_bytes(pos, (size_t)n_tokens * 4), *dslot = kt_gpu_bytes(slot, (size_t)n_tokens * 8);
    void *dinv = kt_gpu_bytes(inv, (size_t)(hd / 2) * 4);
    kern_weight gb = kt_weight_gpu(bv, row, 1), gqn = kt_weight_gpu(qw, 1, hd), gkn = kt_weight_gpu(kw, 1, hd);
    void *dx = kt_gpu_bf16(x, nx);
    kern_rope_kv_params pg = {.qkv = dqkv, .positions = dpos, .slot_mapping = dslot, .inv_freq = dinv,
                              .k_cache = dkc, .v_cache = dvc, .n_tokens = n_tokens, .n_heads = nh,
                              .n_kv_heads = nkv, .head_dim = hd, .block_size = bs, .mscale = mscale};
    kern_qkv_epilogue eg = {.qkv_bias = bias ? &gb : NULL, .q_norm = norm ? &gqn : NULL,
                            .k_norm = norm ? &gkn : NULL, .norm_eps = 1e-6f, .rms_x = rms_d > 0 ? dx : NULL,
                            .rms_cols = rms_d};
    kern_rope_kv_write_ex(kt_gpu, &pg, &eg);

    char what[96];
    snprintf(what, sizeof what, "nh=%d nkv=%d hd=%d bs=%d n=%d bias=%d norm=%d mscale=%g rms_d=%d", nh, nkv, hd,
             bs, n_tokens, bias, norm, mscale, rms_d);
    const size_t nmax = nq > nc ? nq : nc;
    float *got = inferd_malloc(nmax * sizeof(float));
    uint16_t *h = inferd_malloc(nmax * 2);
    kt_gbuf_read(&gq, h);
    kt_from_bf16(h, got, nq);
    /* q and k are roped in place; v rows of qkv may or may not hold the bias: compare q | k only */
    float *gqk = inferd_malloc(nq * sizeof(float)), *cqk = inferd_malloc(nq * sizeof(float));
    const int qk = (nh + nkv) * hd;
    for (int t = 0; t < n_tokens; t++) {
        memcpy(gqk + (size_t)t * qk, got + (size_t)t * row, (size_t)qk * sizeof(float));
        memcpy(cqk + (size_t)t * qk, cqkv + (size_t)t * row, (size_t)qk * sizeof(float));
    }
    int bad = kt_compare("rope_kv_write_ex", what, gqk, cqk, (size_t)n_tokens * qk, 3e-2, 2e-2);
    for (int c = 0; c < 2; c++) {
        kt_gbuf_read(c ? &gv : &gk, h);
        kt_from_bf16(h, got, nc);
        const float *ref = c ? cvc : ckc;
        int b = 0;
        for (size_t i = 0; i < nc; i++) {
            bool ok = isnan(ref[i]) ? h[i] == 0xFFFF : fabsf(got[i] - ref[i]) <= 3e-2f + 2e-2f * fabsf(ref[i]);
            if (!ok && b++ < 5)
                printf("  rope_ex %s %s cache[%zu] got %g ref %g\n", what, c ? "v" : "k", i, got[i], ref[i]);
        }
        kt_record("rope_kv_write_ex", b, 0, 0);
        bad += b;
    }
    bad += kt_gbuf_guards_bad(&gq, "rope_ex qkv") + kt_gbuf_guards_bad(&gk, "rope_ex k cache") +
           kt_gbuf_guards_bad(&gv, "rope_ex v cache");
    kt_gbuf_free(&gq);
    kt_gbuf_free(&gk);
    kt_gbuf_free(&gv);
    kern_free(kt_gpu, dpos);
    kern_free(kt_gpu, dslot);
    kern_free(kt_gpu, dinv);
    kern_free(kt_gpu, gb.data);
    kern_free(kt_gpu, gqn.data);
    kern_free(kt_gpu, gkn.data);
    kern_free(kt_gpu, dx);
    kern_free(kt_cpu, cx);
    inferd_free(x);
    kern_free(kt_cpu, cb.data);
    kern_free(kt_cpu, cqn.data);
    kern_free(kt_cpu, ckn.data);
    kern_free(kt_cpu, cqkv);
    inferd_free(gqk);
    inferd_free(cqk);
    inferd_free(h);
    inferd_free(got);
    inferd_free(hq);
    inferd_free(ckc);
    inferd_free(cvc);
    inferd_free(inv);
    inferd_free(slot);
    inferd_free(pos);
    inferd_free(kw);
    inferd_free(qw);
    inferd_free(bv);
    inferd_free(qkv);
    return bad;
}

START_TEST(test_rope_kv_write_ex)
{
    uint64_t seed = kt_seed();
    printf("rope_kv_write_ex: seed %llu\n", (unsigned long long)seed);
    int bad = 0;
    bad += qkv_epi_case(14, 2, 64, 16, 11, true, false, 0.0f, 0, seed);     /* Qwen2.5-0.5B heads: bias */
    bad += qkv_epi_case(8, 4, 128, 16, 9, false, true, 0.0f, 0, seed + 10); /* Qwen3 head_dim 128: q/k norm */
    bad += qkv_epi_case(5, 1, 6, 3, 7, true, true, 0.0f, 0, seed + 20);     /* odd sizes, hd < 32 lanes, both */
    bad += qkv_epi_case(3, 3, 40, 1, 5, false, true, 0.0f, 0, seed + 30);   /* MHA, block size 1, hd 40 */
    bad += qkv_epi_case(7, 1, 34, 5, 13, true, false, 0.0f, 0, seed + 40);  /* odd GQA 7, hd 34 */
    bad += qkv_epi_case(7, 1, 34, 5, 13, false, false, 1.1386294f, 0, seed + 60); /* YaRN factor 4: mscale */
    bad += qkv_epi_case(8, 4, 128, 16, 9, false, true, 0.6f, 0, seed + 70);  /* mscale < 1, Qwen3 norms */
    bad += qkv_epi_case(8, 2, 64, 16, 11, false, false, 0.0f, 4096, seed + 80); /* a folded norm: Llama */
    bad += qkv_epi_case(7, 1, 34, 5, 13, true, false, 0.0f, 37, seed + 90);    /* ... odd d: the scalar sum, bias */
    bad += qkv_epi_case(8, 4, 128, 16, 9, false, true, 0.0f, 136, seed + 100); /* ... and q/k norms */
    bad += qkv_epi_case(8, 2, 64, 16, 130, true, false, 0.0f, 512, seed + 110); /* ... a block a token (>= 128) */
    if (!kt_quick)
        bad += qkv_epi_case(32, 8, 256, 16, 37, true, true, 1.25f, 0, seed + 50); /* more heads than warps, hd 256 */
    ck_assert_int_eq(bad, 0);
}
END_TEST

TCase *kt_tcase_dense(void)
{
    TCase *tc = tcase_create("dense");
    tcase_set_timeout(tc, 600);
    tcase_add_test(tc, test_memory);
    tcase_add_test(tc, test_weight_upload);
    tcase_add_test(tc, test_weight_fill_random);
    tcase_add_test(tc, test_count_nonfinite);
    tcase_add_test(tc, test_embed);
    tcase_add_test(tc, test_gather_rows);
    tcase_add_test(tc, test_tokens_from);
    tcase_add_test(tc, test_add_rmsnorm);
    tcase_add_test(tc, test_matmul);
    tcase_add_test(tc, test_logits);
    tcase_add_test(tc, test_matmul_accum);
    tcase_add_test(tc, test_gemm_search);
    tcase_add_test(tc, test_gemv);
    tcase_add_loop_test(tc, test_gemv_batch_invariant, 0, 2);
    tcase_add_test(tc, test_gemv_ring_bitwise);
    tcase_add_test(tc, test_gemm_small_bench);
    tcase_add_test(tc, test_silu_mul);
    tcase_add_test(tc, test_silu_mul_rms);
    tcase_add_test(tc, test_weight_scale_cols);
    tcase_add_test(tc, test_f32_to_act);
    tcase_add_test(tc, test_rope_kv_write_ex);
    return tc;
}

int main(void)
{
    if (!kern_cuda_available())
        test_skip("no CUDA device (or a build without the CUDA backend)");
    /* NOTE: in-process: CUDA is already initialized in this process. */
    setenv("CK_FORK", "no", 1);
    const char *q = getenv("INFERD_TEST_QUICK");
    kt_quick = q && *q && strcmp(q, "0") != 0;
    kern_ctx_opts co = {KERN_BACKEND_CPU, 0, 0}, go = {KERN_BACKEND_CUDA, 0, 0};
    if (kern_ctx_create(&co, &kt_cpu) != INFERD_OK || kern_ctx_create(&go, &kt_gpu) != INFERD_OK) {
        printf("cannot create contexts: %s\n", inferd_last_error());
        return 1;
    }
    Suite *s = suite_create("kernels_cuda");
    suite_add_tcase(s, kt_tcase_dense());
    suite_add_tcase(s, kt_tcase_attention());
    suite_add_tcase(s, kt_tcase_sample());
    suite_add_tcase(s, kt_tcase_penalty());
    suite_add_tcase(s, kt_tcase_fused());
    suite_add_tcase(s, kt_tcase_tp());
    int rc = test_run_suite(s);
    int failing = kt_print_summary();
    kern_ctx_free(kt_gpu);
    kern_ctx_free(kt_cpu);
    return rc != 0 || failing != 0 ? 1 : 0;
}
