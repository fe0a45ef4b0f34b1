/* tests/kernels/cuda/test_cuda_fused.c: the fused small-batch products
 * (kern_matmul_fused: the decode GEMV with an RMSNorm prologue and a
 * STORE / RESID / SILU_MUL / ROPE_KV epilogue) against the CPU twin, which
 * composes the unfused ops (kcpu_matmul_fused), and the run-time choice
 * kern_matmul_fusable as a table.
 *
 * Every form x n in 1..KCUDA_FUSE_MAX_N x odd shapes (rows not a multiple
 * of a warp's rows, pairs of rows that straddle CTAs, head_dim 6..128, GQA,
 * biases, padding tokens with slot -1), outputs in guarded buffers
 * pre-filled 0xFF (an unwritten element or a stray write fails). The
 * tolerances count the GPU's bf16 roundings that the fp32 twin does not
 * have: the product and the epilogue's result (rtol/atol 2e-2 for outputs
 * of magnitude ~1). The tensor-core form's epilogues (no norm, n from
 * gemv_tc_min_n to 16: kern_matmul_epi_fusable) run the same cases at n =
 * 3..16 against the twin, and bitwise against the plain tensor-core
 * product followed by the unfused op (test_fused_tc_bitwise); with a
 * folded norm (kern_fuse.rms) at n = 1..16 (test_fused_rms). With an
 * fp8 KV cache every route's cache elements are the e4m3 codes of the bf16
 * values the bf16 cache gets (test_fused_fp8_cache).
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/alloc.h"
#include "common/half.h"
#include "common/rng.h"
#include "kernels/kern_fp8.h"
#include "kernels/kern_internal.h"
#include "kt_harness.h"

/* One fused case's shape. For ROPE_KV, rows = (nh + 2 nkv) * hd. */
typedef struct {
    kern_epilogue epi;
    bool norm, bias;
    bool rms; /* the folded norm (kern_fuse.rms), not with norm */
    int n, rows, cols;
    int nh, nkv, hd, bs;  /* ROPE_KV */
    bool after_attention; /* kern_fuse's hint (the CUDA GEMV's preload) */
} fcase;

/* When set, fused_case copies the GPU's residual stream (n x rows bf16)
 * here, and (g_keep_out) the product's output of the other epilogues
 * (test_fused_preload, test_fused_xs: bitwise comparisons). */
static uint16_t *g_keep_resid, *g_keep_out;

/* The ROPE_KV inputs of a case (host arrays) and their device copies. */
typedef struct {
    int32_t *pos;
    int64_t *slot;
    float *inv;
    int n_blocks;
    size_t nc; /* elements of each cache */
} rope_in;

static void rope_in_make(rope_in *r, const fcase *c, uint64_t seed)
{
    r->n_blocks = 3 * c->n / c->bs + 2; /* every slot below >= 0 but token 2's */
    r->nc = (size_t)r->n_blocks * c->nkv * c->bs * c->hd;
    r->pos = inferd_malloc(sizeof(int32_t) * (size_t)c->n);
    r->slot = inferd_malloc(sizeof(int64_t) * (size_t)c->n);
    r->inv = inferd_malloc(sizeof(float) * (size_t)(c->hd / 2));
    for (int t = 0; t < c->n; t++) {
        r->pos[t] = (int32_t)(rng_uniform(seed, (uint64_t)t) * 4000);
        r->slot[t] = t == 2 ? -1 : (int64_t)(r->n_blocks * c->bs - 1 - 3 * t); /* distinct, backwards; 2: padding */
    }
    for (int j = 0; j < c->hd / 2; j++)
        r->inv[j] = (float)(1.0 / pow(500000.0, 2.0 * j / c->hd));
}

static void rope_in_free(rope_in *r)
{
    inferd_free(r->pos);
    inferd_free(r->slot);
    inferd_free(r->inv);
}

/* Compare a bf16 GPU buffer of n values with the fp32 reference; NaN in
 * the reference means "must be unwritten" (0xFFFF). */
static int cmp_bf16(const char *what, const kt_gbuf *g, const float *ref, size_t n)
{
    uint16_t *h = inferd_malloc(n * 2);
    float *got = inferd_malloc(n * sizeof(float));
    kt_gbuf_read(g, h);
    kt_from_bf16(h, got, n);
    int bad = 0;
    double max_abs = 0, max_rel = 0;
    for (size_t i = 0; i < n; i++) {
        bool ok;
        if (isnan(ref[i])) {
            ok = h[i] == 0xFFFF;
        } else {
            const double d = fabs((double)got[i] - ref[i]);
            ok = d <= 2e-2 + 2e-2 * fabs(ref[i]);
            max_abs = fmax(max_abs, d);
            max_rel = fmax(max_rel, d / fmax(fabs(ref[i]), 1e-6));
        }
        if (!ok && bad++ < 5)
            printf("  fused %s [%zu]: got %g ref %g\n", what, i, got[i], ref[i]);
    }
    kt_record("matmul_fused", bad, max_abs, max_rel);
    inferd_free(got);
    inferd_free(h);
    return bad;
}

static float *nan_filled(size_t n)
{
    float *p = inferd_malloc(n * sizeof(float));
    for (size_t i = 0; i < n; i++)
        p[i] = NAN;
    return p;
}

static int fused_case(const fcase *c, uint64_t seed)
{
    const int n = c->n, R = c->rows, C = c->cols;
    const size_t ni = (size_t)n * C, nw = (size_t)R * C, nr = (size_t)n * R;
    const size_t nout = c->epi == KERN_EPI_SILU_MUL ? nr / 2 : nr;
    float *in = inferd_malloc(ni * sizeof(float)), *w = inferd_malloc(nw * sizeof(float));
    float *g = inferd_malloc((size_t)C * sizeof(float)), *b = inferd_malloc((size_t)R * sizeof(float));
    float *res = inferd_malloc(nr * sizeof(float));
    kt_rand_bf16(in, ni, seed, c->norm || c->rms ? -3.0f : -1.0f, c->norm || c->rms ? 3.0f : 1.0f);
    kt_rand_bf16(w, nw, seed + 1, -1.7f / sqrtf((float)C), 1.7f / sqrtf((float)C));
    kt_rand_bf16(g, (size_t)C, seed + 2, 0.5f, 1.5f);
    kt_rand_bf16(b, (size_t)R, seed + 3, -0.5f, 0.5f);
    kt_rand_bf16(res, nr, seed + 4, -1.0f, 1.0f);
    rope_in ri = {0};
    if (c->epi == KERN_EPI_ROPE_KV)
        rope_in_make(&ri, c, seed + 5);

    /* CPU twin */
    kern_weight wc = kt_weight_cpu(w, R, C), gc = kt_weight_cpu(g, 1, C), bc = kt_weight_cpu(b, R, 1);
    float *cin = kt_cpu_f32(in, ni), *cres = kt_cpu_f32(res, nr), *cout = nan_filled(nr);
    float *ckc = nan_filled(ri.nc), *cvc = nan_filled(ri.nc);
    kern_rope_kv_params rc = {.positions = ri.pos, .slot_mapping = ri.slot, .inv_freq = ri.inv, .k_cache = ckc,
                              .v_cache = cvc, .n_heads = c->nh, .n_kv_heads = c->nkv, .head_dim = c->hd,
                              .block_size = c->bs};
    kern_fuse fc = {.norm = c->norm ? &gc : NULL, .rms = c->rms, .eps = 1e-5f, .epi = c->epi, .resid = cres,
                    .rope = &rc, .qkv_bias = c->bias ? &bc : NULL};
    kern_matmul_fused(kt_cpu, cout, cin, &wc, n, &fc);

    /* GPU */
    kern_weight wg = kt_weight_gpu(w, R, C), gg = kt_weight_gpu(g, 1, C), bg = kt_weight_gpu(b, R, 1);
    void *gin = kt_gpu_bf16(in, ni);
    kt_gbuf go, gr, gk, gv;
    void *gout = c->epi == KERN_EPI_RESID ? NULL : kt_gbuf_alloc(&go, nout * 2, 0);
    void *gres = kt_gbuf_alloc(&gr, nr * 2, 0);
    uint16_t *hres = kt_to_bf16(res, nr);
    kern_memcpy_h2d(kt_gpu, gres, hres, nr * 2);
    void *dpos = NULL, *dslot = NULL, *dinv = NULL, *gkc = NULL, *gvc = NULL;
    if (c->epi == KERN_EPI_ROPE_KV) {
        dpos = kt_gpu_bytes(ri.pos, sizeof(int32_t) * (size_t)n);
        dslot = kt_gpu_bytes(ri.slot, sizeof(int64_t) * (size_t)n);
        dinv = kt_gpu_bytes(ri.inv, sizeof(float) * (size_t)(c->hd / 2));
        gkc = kt_gbuf_alloc(&gk, ri.nc * 2, 0);
        gvc = kt_gbuf_alloc(&gv, ri.nc * 2, 0);
    }
    kern_rope_kv_params rg = {.positions = dpos, .slot_mapping = dslot, .inv_freq = dinv, .k_cache = gkc,
                              .v_cache = gvc, .n_heads = c->nh, .n_kv_heads = c->nkv, .head_dim = c->hd,
                              .block_size = c->bs};
    kern_fuse fg = {.norm = c->norm ? &gg : NULL,
                    .rms = c->rms,
                    .eps = 1e-5f,
                    .epi = c->epi,
                    .resid = gres,
                    .rope = &rg,
                    .qkv_bias = c->bias ? &bg : NULL,
                    .after_attention = c->after_attention};
    ck_assert(c->norm ? kern_matmul_fusable(kt_gpu, &wg, n) : kern_matmul_epi_fusable(kt_gpu, &wg, n));
    kern_matmul_fused(kt_gpu, gout, gin, &wg, n, &fg);

    char what[128];
    snprintf(what, sizeof what, "epi=%d norm=%d rms=%d bias=%d n=%d R=%d C=%d hd=%d", (int)c->epi, c->norm, c->rms,
             c->bias, n, R, C, c->hd);
    int bad = 0;
    if (c->epi == KERN_EPI_RESID) {
        bad += cmp_bf16(what, &gr, cres, nr);
    } else {
        bad += cmp_bf16(what, &go, cout, nout) + kt_gbuf_guards_bad(&go, what);
        if (g_keep_out)
            kt_gbuf_read(&go, g_keep_out);
        kt_gbuf_free(&go);
        /* the residual stream is an input here: it must be left as it was */
        float *r0 = inferd_malloc(nr * sizeof(float));
        kt_from_bf16(hres, r0, nr);
        bad += cmp_bf16("resid untouched", &gr, r0, nr);
        inferd_free(r0);
    }
    bad += kt_gbuf_guards_bad(&gr, "fused resid");
    if (g_keep_resid)
        kt_gbuf_read(&gr, g_keep_resid);
    kt_gbuf_free(&gr);
    if (c->epi == KERN_EPI_ROPE_KV) {
        bad += cmp_bf16("k cache", &gk, ckc, ri.nc) + cmp_bf16("v cache", &gv, cvc, ri.nc);
        bad += kt_gbuf_guards_bad(&gk, "fused k cache") + kt_gbuf_guards_bad(&gv, "fused v cache");
        kt_gbuf_free(&gk);
        kt_gbuf_free(&gv);
        kern_free(kt_gpu, dpos);
        kern_free(kt_gpu, dslot);
        kern_free(kt_gpu, dinv);
        rope_in_free(&ri);
    }
    kern_free(kt_gpu, gin);
    kern_free(kt_gpu, wg.data);
    kern_free(kt_gpu, gg.data);
    kern_free(kt_gpu, bg.data);
    kern_free(kt_cpu, wc.data);
    kern_free(kt_cpu, gc.data);
    kern_free(kt_cpu, bc.data);
    kern_free(kt_cpu, cin);
    kern_free(kt_cpu, cres);
    inferd_free(cout);
    inferd_free(ckc);
    inferd_free(cvc);
    inferd_free(hres);
    inferd_free(res);
    inferd_free(b);
    inferd_free(g);
    inferd_free(w);
    inferd_free(in);
    return bad;
}

/* The ROPE_KV shapes of the form tests, case s of 4: Llama GQA hd 64, Qwen2
 * bias, odd hd 6 (3 pairs), MHA hd 34 with block size 1; n tokens of 136
 * input columns. */
static fcase rope_fcase(int s, int n)
{
    static const int rp[][5] = {{8, 2, 64, 16, 0}, {7, 1, 32, 5, 1}, {5, 1, 6, 3, 1}, {3, 3, 34, 1, 0}};
    fcase c = {.epi = KERN_EPI_ROPE_KV, .bias = rp[s][4] != 0, .n = n, .cols = 136, .nh = rp[s][0],
               .nkv = rp[s][1], .hd = rp[s][2], .bs = rp[s][3]};
    c.rows = (c.nh + 2 * c.nkv) * c.hd;
    return c;
}

/* GEMV route for every size: small test weights must take it too; the
 * tensor-core form's shared-memory ring (0 or 2: off, forced; _i of the loop
 * tests); the
 * tensor-core form from 3 tokens (the default); programmatic launches as
 * the engine's default (INFERD_GEMV_PDL=0: plain launches, to tell a
 * launch-order effect from a kernel's own). */
static void fuse_config(kern_gemm_opts *saved, int fuse_max_n, int64_t min_bytes, int tc_ring)
{
    kern_gemm_config_get(kt_gpu, saved);
    const char *pdl_env = getenv("INFERD_GEMV_PDL");
    const bool pdl = !(pdl_env && strcmp(pdl_env, "0") == 0);
    const kern_gemm_opts o = {.gemv_max_n = 16, .gemv_min_weight_bytes = min_bytes, .pdl = pdl,
                              .gemv_variant = 1, .fuse_max_n = fuse_max_n, .gemv_tc_ring = tc_ring,
                              .gemv_tc_min_n = KCUDA_GEMV_DEFAULT_TC_MIN_N};
    kern_gemm_config(kt_gpu, &o);
}

START_TEST(test_fused_forms)
{
    kern_gemm_opts saved;
    fuse_config(&saved, KCUDA_FUSE_MAX_N, 0, 2 * _i);
    const uint64_t seed = kt_seed() + 900;
    printf("test_fused_forms: tensor-core ring %d, seed %llu\n", 2 * _i, (unsigned long long)seed);
    /* rows, cols of the dense forms: odd row counts, one row, pairs across CTAs */
    static const int dense[][2] = {{1, 8}, {37, 264}, {258, 72}, {1000, 512}};
    int bad = 0, k = 0;
    for (int n = 1; n <= KCUDA_FUSE_MAX_N; n++) {
        for (int epi = KERN_EPI_STORE; epi <= KERN_EPI_SILU_MUL; epi++)
            for (int s = 0; s < 4; s++, k++) {
                if (kt_quick && (s + n + epi) % 2)
                    continue;
                fcase c = {.epi = (kern_epilogue)epi, .norm = (k % 3) != 1, .n = n, .rows = dense[s][0],
                           .cols = dense[s][1]};
                if (epi == KERN_EPI_SILU_MUL && c.rows % 2)
                    c.rows++;
                if (epi == KERN_EPI_STORE)
                    c.norm = true; /* the plain product is test_gemv's */
                bad += fused_case(&c, seed + (uint64_t)k * 16);
            }
        for (int s = 0; s < 4; s++, k++) { /* ROPE_KV (rope_fcase) */
            fcase c = rope_fcase(s, n);
            c.norm = (k % 2) == 0;
            bad += fused_case(&c, seed + (uint64_t)k * 16);
        }
    }
    /* the tensor-core form's epilogues: no norm, n = 3..16 (one n-tile and two) */
    static const int tc_n[] = {3, 8, 9, 16};
    for (int i = 0; i < 4; i++) {
        const int n = tc_n[i];
        for (int epi = KERN_EPI_RESID; epi <= KERN_EPI_SILU_MUL; epi++)
            for (int s = 0; s < 4; s++, k++) {
                if (kt_quick && (s + i) % 2)
                    continue;
                fcase c = {.epi = (kern_epilogue)epi, .n = n, .rows = dense[s][0], .cols = dense[s][1]};
                if (epi == KERN_EPI_SILU_MUL && c.rows % 2)
                    c.rows++;
                bad += fused_case(&c, seed + (uint64_t)k * 16);
            }
        for (int s = 0; s < 4; s++, k++) {
            const fcase c = rope_fcase(s, n);
            bad += fused_case(&c, seed + (uint64_t)k * 16);
        }
    }
    if (!kt_quick) { /* Llama-3-8B layer shapes at batch 1 */
        const fcase big[] = {
            {.epi = KERN_EPI_ROPE_KV, .norm = true, .n = 1, .rows = 6144, .cols = 4096, .nh = 32, .nkv = 8,
             .hd = 128, .bs = 16},
            {.epi = KERN_EPI_RESID, .n = 1, .rows = 4096, .cols = 4096},
            {.epi = KERN_EPI_SILU_MUL, .norm = true, .n = 2, .rows = 28672, .cols = 4096},
            {.epi = KERN_EPI_RESID, .n = 1, .rows = 4096, .cols = 14336},
        };
        for (int i = 0; i < 4; i++)
            bad += fused_case(&big[i], seed + 5000 + (uint64_t)i);
        const fcase big_tc[] = { /* and at batch 16 on the tensor-core form */
            {.epi = KERN_EPI_ROPE_KV, .n = 16, .rows = 6144, .cols = 4096, .nh = 32, .nkv = 8, .hd = 128, .bs = 16},
            {.epi = KERN_EPI_SILU_MUL, .n = 13, .rows = 28672, .cols = 4096},
        };
        for (int i = 0; i < 2; i++)
            bad += fused_case(&big_tc[i], seed + 6000 + (uint64_t)i);
    }
    kern_gemm_config(kt_gpu, &saved);
    ck_assert_int_eq(bad, 0);
}
END_TEST

/* The folded norm (kern_fuse.rms: the tensor-core form at every n of the
 * route, the input's squares summed beside the product): SiLU * up and
 * RoPE + K/V write at one and two n-tiles, n = 1 and 2 included (where the
 * CUDA-core form would take a weighted norm), against the twin; the
 * ring off and forced (_i), odd shapes as test_fused_forms, and the
 * Llama-3-8B QKV and gate/up at 16 and 5 tokens. */
START_TEST(test_fused_rms)
{
    kern_gemm_opts saved;
    fuse_config(&saved, KCUDA_FUSE_MAX_N, 0, 2 * _i);
    const uint64_t seed = kt_seed() + 7000;
    printf("test_fused_rms: tensor-core ring %d, seed %llu\n", 2 * _i, (unsigned long long)seed);
    static const int dense[][2] = {{2, 8}, {38, 264}, {258, 72}, {1000, 512}};
    static const int ns[] = {1, 2, 3, 7, 8, 9, 16};
    int bad = 0, k = 0;
    for (int i = 0; i < 7; i++) {
        for (int s = 0; s < 4; s++, k++) {
            if (kt_quick && (s + i) % 2)
                continue;
            fcase c = {.epi = KERN_EPI_SILU_MUL, .rms = true, .n = ns[i], .rows = dense[s][0], .cols = dense[s][1]};
            bad += fused_case(&c, seed + (uint64_t)k * 16);
        }
        for (int s = 0; s < 4; s++, k++) {
            fcase c = rope_fcase(s, ns[i]);
            c.rms = true;
            bad += fused_case(&c, seed + (uint64_t)k * 16);
        }
    }
    if (!kt_quick) {
        const fcase big[] = {
            {.epi = KERN_EPI_ROPE_KV, .rms = true, .n = 16, .rows = 6144, .cols = 4096, .nh = 32, .nkv = 8,
             .hd = 128, .bs = 16},
            {.epi = KERN_EPI_SILU_MUL, .rms = true, .n = 5, .rows = 28672, .cols = 4096},
        };
        for (int i = 0; i < 2; i++)
            bad += fused_case(&big[i], seed + 9000 + (uint64_t)i);
    }
    kern_gemm_config(kt_gpu, &saved);
    ck_assert_int_eq(bad, 0);
}
END_TEST

/* Device bytes a and b (bytes each) equal? Prints what differs. */
static int same_dev(const char *what, const void *a, const void *b, size_t bytes)
{
    uint8_t *ha = inferd_malloc(bytes), *hb = inferd_malloc(bytes);
    kern_memcpy_d2h(kt_gpu, ha, a, bytes);
    kern_memcpy_d2h(kt_gpu, hb, b, bytes);
    const int bad = memcmp(ha, hb, bytes) != 0;
    if (bad)
        printf("  fused tc bitwise: %s differs from the unfused ops\n", what);
    inferd_free(hb);
    inferd_free(ha);
    return bad;
}

/* One tensor-core epilogue against the plain tensor-core product followed
 * by the unfused op, bit for bit: ROPE_KV (kern_rope_kv_write_ex, with a
 * bias when bias), SILU_MUL (kern_silu_mul), RESID (the add of
 * kern_add_rmsnorm). */
static int tc_bitwise_case(kern_epilogue epi, int n, int R, int C, int nh, int nkv, int hd, int bs, bool bias,
                           uint64_t seed)
{
    const size_t ni = (size_t)n * C, nw = (size_t)R * C, nr = (size_t)n * R;
    float *in = inferd_malloc(ni * sizeof(float)), *w = inferd_malloc(nw * sizeof(float));
    float *b = inferd_malloc((size_t)R * sizeof(float)), *res = inferd_malloc(nr * sizeof(float));
    float *g = inferd_malloc((size_t)R * sizeof(float));
    kt_rand_bf16(in, ni, seed, -1.0f, 1.0f);
    kt_rand_bf16(w, nw, seed + 1, -1.7f / sqrtf((float)C), 1.7f / sqrtf((float)C));
    kt_rand_bf16(b, (size_t)R, seed + 2, -0.5f, 0.5f);
    kt_rand_bf16(res, nr, seed + 3, -1.0f, 1.0f);
    for (int i = 0; i < R; i++)
        g[i] = 1.0f;
    kern_weight wg = kt_weight_gpu(w, R, C), bg = kt_weight_gpu(b, R, 1), ng = kt_weight_gpu(g, 1, R);
    void *gin = kt_gpu_bf16(in, ni), *prod = kern_alloc(kt_gpu, nr * 2), *outA = kern_alloc(kt_gpu, nr * 2);
    void *outB = kern_alloc(kt_gpu, nr * 2), *resA = kt_gpu_bf16(res, nr), *resB = kt_gpu_bf16(res, nr);
    kern_memset0(kt_gpu, outA, nr * 2);
    kern_memset0(kt_gpu, outB, nr * 2);
    int bad = 0;
    char what[96];
    snprintf(what, sizeof what, "epi=%d n=%d R=%d C=%d hd=%d bias=%d", (int)epi, n, R, C, hd, bias);
    ck_assert(kern_matmul_epi_fusable(kt_gpu, &wg, n) && !kern_matmul_fusable(kt_gpu, &wg, n));
    if (epi == KERN_EPI_ROPE_KV) {
        rope_in ri;
        const fcase c = {.n = n, .nh = nh, .nkv = nkv, .hd = hd, .bs = bs};
        rope_in_make(&ri, &c, seed + 4);
        void *dpos = kt_gpu_bytes(ri.pos, sizeof(int32_t) * (size_t)n);
        void *dslot = kt_gpu_bytes(ri.slot, sizeof(int64_t) * (size_t)n);
        void *dinv = kt_gpu_bytes(ri.inv, sizeof(float) * (size_t)(hd / 2));
        void *kA = kern_alloc(kt_gpu, ri.nc * 2), *vA = kern_alloc(kt_gpu, ri.nc * 2);
        void *kB = kern_alloc(kt_gpu, ri.nc * 2), *vB = kern_alloc(kt_gpu, ri.nc * 2);
        kern_memset0(kt_gpu, kA, ri.nc * 2);
        kern_memset0(kt_gpu, vA, ri.nc * 2);
        kern_memset0(kt_gpu, kB, ri.nc * 2);
        kern_memset0(kt_gpu, vB, ri.nc * 2);
        kern_rope_kv_params rp = {.qkv = outA, .positions = dpos, .slot_mapping = dslot, .inv_freq = dinv,
                                  .k_cache = kA, .v_cache = vA, .n_tokens = n, .n_heads = nh, .n_kv_heads = nkv,
                                  .head_dim = hd, .block_size = bs};
        kern_matmul(kt_gpu, outA, gin, &wg, n);
        const kern_qkv_epilogue e = {.qkv_bias = bias ? &bg : NULL};
        kern_rope_kv_write_ex(kt_gpu, &rp, &e);
        rp.k_cache = kB;
        rp.v_cache = vB;
        const kern_fuse f = {.epi = KERN_EPI_ROPE_KV, .rope = &rp, .qkv_bias = bias ? &bg : NULL};
        kern_matmul_fused(kt_gpu, outB, gin, &wg, n, &f);
        bad += same_dev(what, outA, outB, nr * 2);
        bad += same_dev("k cache", kA, kB, ri.nc * 2) + same_dev("v cache", vA, vB, ri.nc * 2);
        kern_free(kt_gpu, vB);
        kern_free(kt_gpu, kB);
        kern_free(kt_gpu, vA);
        kern_free(kt_gpu, kA);
        kern_free(kt_gpu, dinv);
        kern_free(kt_gpu, dslot);
        kern_free(kt_gpu, dpos);
        rope_in_free(&ri);
    } else if (epi == KERN_EPI_SILU_MUL) {
        kern_matmul(kt_gpu, prod, gin, &wg, n);
        kern_silu_mul(kt_gpu, outA, prod, n, R / 2);
        const kern_fuse f = {.epi = KERN_EPI_SILU_MUL};
        kern_matmul_fused(kt_gpu, outB, gin, &wg, n, &f);
        bad += same_dev(what, outA, outB, nr);
    } else {
        kern_matmul(kt_gpu, prod, gin, &wg, n);
        kern_add_rmsnorm(kt_gpu, outA, resA, prod, &ng, n, 1e-5f); /* resA = bf16(resA + prod) */
        const kern_fuse f = {.epi = KERN_EPI_RESID, .resid = resB};
        kern_matmul_fused(kt_gpu, NULL, gin, &wg, n, &f);
        bad += same_dev(what, resA, resB, nr * 2);
    }
    kt_record("fused_tc_bitwise", bad, 0, 0);
    kern_free(kt_gpu, resB);
    kern_free(kt_gpu, resA);
    kern_free(kt_gpu, outB);
    kern_free(kt_gpu, outA);
    kern_free(kt_gpu, prod);
    kern_free(kt_gpu, gin);
    kern_free(kt_gpu, ng.data);
    kern_free(kt_gpu, bg.data);
    kern_free(kt_gpu, wg.data);
    inferd_free(g);
    inferd_free(res);
    inferd_free(b);
    inferd_free(w);
    inferd_free(in);
    return bad;
}

/* The tensor-core form's epilogues give the bits of the unfused ops after
 * the plain tensor-core product (forward.c picks either by n alone, so a
 * batch's bits must not depend on the choice): n = 3, 9, 16; Llama GQA
 * hd 64, a Qwen2 bias at hd 32 with block size 5, odd row counts. */
START_TEST(test_fused_tc_bitwise)
{
    kern_gemm_opts saved;
    fuse_config(&saved, KCUDA_FUSE_MAX_N, 0, 2 * _i);
    const uint64_t seed = kt_seed() + 1900;
    static const int ns[] = {3, 9, 16};
    int bad = 0;
    for (int i = 0; i < 3; i++) {
        const int n = ns[i];
        bad += tc_bitwise_case(KERN_EPI_ROPE_KV, n, (8 + 2 * 2) * 64, 136, 8, 2, 64, 16, false, seed + 10 * i);
        bad += tc_bitwise_case(KERN_EPI_ROPE_KV, n, (7 + 2 * 1) * 32, 264, 7, 1, 32, 5, true, seed + 10 * i + 1);
        bad += tc_bitwise_case(KERN_EPI_SILU_MUL, n, 1002, 264, 0, 0, 0, 0, false, seed + 10 * i + 2);
        bad += tc_bitwise_case(KERN_EPI_RESID, n, 37, 512, 0, 0, 0, 0, false, seed + 10 * i + 3);
    }
    kern_gemm_config(kt_gpu, &saved);
    ck_assert_int_eq(bad, 0);
}
END_TEST

/* One ROPE_KV step of n tokens (nh, nkv heads of hd, block size bs) twice,
 * into a bf16 cache and into an fp8 one (kv_fp8), through the route picked
 * by how: 0 kern_matmul + kern_rope_kv_write, 1 the fused GEMV with its
 * norm prologue, 2 the fused product without a norm (the tensor-core
 * epilogue for n >= gemv_tc_min_n). The qkv rows must be bitwise the same;
 * every element of the fp8 cache must be kern_f32_to_e4m3 of the bf16
 * cache's element where the step wrote one (the device's conversion agrees
 * with kern_fp8.h), and keep the 0xFF fill elsewhere; guards intact. */
static int rope_fp8_case(int n, int nh, int nkv, int hd, int bs, int how, uint64_t seed)
{
    const int R = (nh + 2 * nkv) * hd, C = 264;
    const size_t ni = (size_t)n * C, nw = (size_t)R * C, nr = (size_t)n * R;
    const fcase c = {.n = n, .nh = nh, .nkv = nkv, .hd = hd, .bs = bs};
    rope_in ri;
    rope_in_make(&ri, &c, seed);
    float *in = inferd_malloc(ni * sizeof(float)), *w = inferd_malloc(nw * sizeof(float));
    float *g = inferd_malloc((size_t)C * sizeof(float));
    kt_rand_bf16(in, ni, seed + 1, -3.0f, 3.0f);
    kt_rand_bf16(w, nw, seed + 2, -3.0f / sqrtf((float)C), 3.0f / sqrtf((float)C));
    kt_rand_bf16(g, (size_t)C, seed + 3, 0.5f, 1.5f);
    kern_weight wg = kt_weight_gpu(w, R, C), gg = kt_weight_gpu(g, 1, C);
    void *gin = kt_gpu_bf16(in, ni);
    void *dpos = kt_gpu_bytes(ri.pos, sizeof(int32_t) * (size_t)n);
    void *dslot = kt_gpu_bytes(ri.slot, sizeof(int64_t) * (size_t)n);
    void *dinv = kt_gpu_bytes(ri.inv, sizeof(float) * (size_t)(hd / 2));
    kt_gbuf go[2], gk[2], gv[2];
    for (int f8 = 0; f8 < 2; f8++) {
        const size_t es = f8 ? 1 : 2;
        void *out = kt_gbuf_alloc(&go[f8], nr * 2, 0);
        kern_rope_kv_params rp = {.qkv = out, .positions = dpos, .slot_mapping = dslot, .inv_freq = dinv,
                                  .k_cache = kt_gbuf_alloc(&gk[f8], ri.nc * es, 0),
                                  .v_cache = kt_gbuf_alloc(&gv[f8], ri.nc * es, 0), .n_tokens = n,
                                  .n_heads = nh, .n_kv_heads = nkv, .head_dim = hd, .block_size = bs,
                                  .kv_fp8 = f8 == 1};
        if (how == 0) {
            kern_matmul(kt_gpu, out, gin, &wg, n);
            kern_rope_kv_write(kt_gpu, &rp);
        } else {
            ck_assert(how == 1 ? kern_matmul_fusable(kt_gpu, &wg, n) : kern_matmul_epi_fusable(kt_gpu, &wg, n));
            const kern_fuse f = {.norm = how == 1 ? &gg : NULL, .eps = 1e-5f, .epi = KERN_EPI_ROPE_KV, .rope = &rp};
            kern_matmul_fused(kt_gpu, out, gin, &wg, n, &f);
        }
    }
    char what[96];
    snprintf(what, sizeof what, "fp8 cache route %d n=%d nh=%d nkv=%d hd=%d bs=%d", how, n, nh, nkv, hd, bs);
    uint16_t *h0 = inferd_malloc(ri.nc * 2 > nr * 2 ? ri.nc * 2 : nr * 2);
    uint16_t *h1 = inferd_malloc(ri.nc * 2 > nr * 2 ? ri.nc * 2 : nr * 2);
    kt_gbuf_read(&go[0], h0);
    kt_gbuf_read(&go[1], h1);
    int bad = memcmp(h0, h1, nr * 2) != 0;
    if (bad)
        printf("  %s: the qkv rows differ with an fp8 cache\n", what);
    for (int kv = 0; kv < 2; kv++) {
        kt_gbuf_read(kv ? &gv[0] : &gk[0], h0);
        uint8_t *b8 = (uint8_t *)h1;
        kt_gbuf_read(kv ? &gv[1] : &gk[1], b8);
        int b = 0;
        for (size_t i = 0; i < ri.nc; i++) {
            const uint8_t want = h0[i] == 0xFFFF ? 0xFF : kern_f32_to_e4m3(half_bf16_to_f32(h0[i]));
            if (b8[i] != want && b++ < 5)
                printf("  %s: %s[%zu] = 0x%02x, want 0x%02x (bf16 0x%04x)\n", what, kv ? "v" : "k", i, b8[i], want,
                       h0[i]);
        }
        bad += b;
    }
    for (int f8 = 0; f8 < 2; f8++) {
        bad += kt_gbuf_guards_bad(&go[f8], what) + kt_gbuf_guards_bad(&gk[f8], "fp8 case k cache") +
               kt_gbuf_guards_bad(&gv[f8], "fp8 case v cache");
        kt_gbuf_free(&go[f8]);
        kt_gbuf_free(&gk[f8]);
        kt_gbuf_free(&gv[f8]);
    }
    kt_record("fused_fp8_cache", bad, 0, 0);
    inferd_free(h1);
    inferd_free(h0);
    kern_free(kt_gpu, dinv);
    kern_free(kt_gpu, dslot);
    kern_free(kt_gpu, dpos);
    kern_free(kt_gpu, gin);
    kern_free(kt_gpu, gg.data);
    kern_free(kt_gpu, wg.data);
    inferd_free(g);
    inferd_free(w);
    inferd_free(in);
    rope_in_free(&ri);
    return bad;
}

/* The fp8 cache through every route that writes K/V: the rope kernel, the
 * fused GEMV with a norm (n = 1 and KCUDA_FUSE_MAX_N), the tensor-core
 * epilogue (n = 3, 9, 16); Llama GQA hd 128, hd 64 with block size 5, MHA hd 32 with block
 * size 1. */
START_TEST(test_fused_fp8_cache)
{
    kern_gemm_opts saved;
    fuse_config(&saved, KCUDA_FUSE_MAX_N, 0, 0);
    const uint64_t seed = kt_seed() + 2300;
    static const int shapes[][4] = {{8, 2, 128, 16}, {6, 2, 64, 5}, {4, 4, 32, 1}};
    static const int route_n[][2] = {{0, 13}, {0, 1}, {1, 1}, {1, KCUDA_FUSE_MAX_N}, {2, 3}, {2, 9}, {2, 16}};
    int bad = 0;
    for (int s = 0; s < 3; s++)
        for (int r = 0; r < (int)(sizeof route_n / sizeof route_n[0]); r++)
            bad += rope_fp8_case(route_n[r][1], shapes[s][0], shapes[s][1], shapes[s][2], shapes[s][3],
                                 route_n[r][0], seed + 10 * (uint64_t)s + (uint64_t)r);
    kern_gemm_config(kt_gpu, &saved);
    ck_assert_int_eq(bad, 0);
}
END_TEST

/* kern_matmul_fusable and kern_matmul_epi_fusable: the run-time choices as tables. */
/* The O product's preload (kern_fuse.after_attention, gemv_preload): its
 * CUDA-core form at 1 and 2 tokens copies the head of each lane's chunks
 * into shared memory before its PDL wait and multiplies them first; the
 * residual stream it leaves is bitwise the one without the preload, and
 * within the twin's tolerance, for preloads shorter than a row's chunks, as
 * long as them, and longer (rows of 8 to 4096 columns, odd row counts), and
 * kcuda_gemv_preload reports the preload only where that form runs. */
START_TEST(test_fused_preload)
{
    kern_gemm_opts saved;
    fuse_config(&saved, KCUDA_FUSE_MAX_N, 0, 0);
    kern_gemm_opts o;
    kern_gemm_config_get(kt_gpu, &o);
    o.pdl = true; /* the preload is a programmatic launch's */
    static const int shapes[][2] = {{1, 8}, {37, 264}, {61, 72}, {1000, 512}, {258, 4096}};
    static const int pres[] = {0, 1, 3, 12};
    const uint64_t seed = kt_seed() + 2700;
    int bad = 0;
    for (int n = 1; n <= 2; n++)
        for (int si = 0; si < 5; si++) {
            const int R = shapes[si][0], C = shapes[si][1];
            uint16_t *ref = inferd_malloc((size_t)n * R * 2), *got = inferd_malloc((size_t)n * R * 2);
            for (int p = 0; p < 4; p++) {
                o.gemv_preload = pres[p];
                kern_gemm_config(kt_gpu, &o);
#ifdef INFERD_HAVE_CUDA
                if (kcuda_gemv_preload(kt_gpu, n) != pres[p] && bad++ < 20)
                    printf("  preload at n = %d: %d, set %d\n", n, kcuda_gemv_preload(kt_gpu, n), pres[p]);
#endif
                const fcase c = {
                    .epi = KERN_EPI_RESID, .n = n, .rows = R, .cols = C, .after_attention = true};
                g_keep_resid = p == 0 ? ref : got;
                bad += fused_case(&c, seed + (uint64_t)(10 * si + n));
                if (p > 0 && memcmp(ref, got, (size_t)n * R * 2) != 0 && bad++ < 20)
                    printf("  preload %d: %d x %d at n = %d differs from no preload\n", pres[p], R, C, n);
            }
            inferd_free(got);
            inferd_free(ref);
        }
    g_keep_resid = NULL;
#ifdef INFERD_HAVE_CUDA
    /* no preload where the tensor-core form runs (3 tokens), nor without PDL */
    o.gemv_preload = 3;
    kern_gemm_config(kt_gpu, &o);
    ck_assert_int_eq(kcuda_gemv_preload(kt_gpu, 3), 0);
    o.pdl = false;
    kern_gemm_config(kt_gpu, &o);
    ck_assert_int_eq(kcuda_gemv_preload(kt_gpu, 1), 0);
#endif
    kern_gemm_config(kt_gpu, &saved);
    ck_assert_int_eq(bad, 0);
}
END_TEST

/* One case of test_fused_xs: c with the input staging off (gemv_xs 0)
 * and in mode xs; the outputs (residual stream or product) must be
 * bitwise alike, and each within the CPU twin's tolerance. */
static int xs_case(kern_gemm_opts *o, const fcase *c, int xs, uint64_t seed)
{
    const size_t nr = (size_t)c->n * c->rows;
    uint16_t *ref = inferd_malloc(nr * 2), *got = inferd_malloc(nr * 2);
    int bad = 0;
    for (int pass = 0; pass < 2; pass++) {
        o->gemv_xs = pass ? xs : 0;
        kern_gemm_config(kt_gpu, o);
        g_keep_resid = c->epi == KERN_EPI_RESID ? (pass ? got : ref) : NULL;
        g_keep_out = c->epi == KERN_EPI_RESID ? NULL : (pass ? got : ref);
        bad += fused_case(c, seed);
    }
    const size_t nout = c->epi == KERN_EPI_SILU_MUL ? nr / 2 : nr;
    if (memcmp(ref, got, nout * 2) != 0 && bad++ < 20)
        printf("  xs %d: epi %d norm %d %d x %d at n = %d differs from no staging\n", xs, (int)c->epi,
               c->norm, c->rows, c->cols, c->n);
    g_keep_resid = g_keep_out = NULL;
    inferd_free(got);
    inferd_free(ref);
    return bad;
}

/* The plain product (kern_matmul, kern_logits) of n tokens with the input
 * staging off and in mode 2: bitwise alike. */
static int xs_plain_case(kern_gemm_opts *o, int n, int R, int C, uint64_t seed)
{
    float *in = inferd_malloc((size_t)n * C * sizeof(float)),
          *w = inferd_malloc((size_t)R * C * sizeof(float));
    kt_rand_bf16(in, (size_t)n * C, seed, -1.0f, 1.0f);
    kt_rand_bf16(w, (size_t)R * C, seed + 1, -1.0f, 1.0f);
    kern_weight wg = kt_weight_gpu(w, R, C);
    void *gin = kt_gpu_bf16(in, (size_t)n * C);
    const size_t nr = (size_t)n * R;
    uint16_t *ob[2];
    float *of[2];
    for (int pass = 0; pass < 2; pass++) {
        o->gemv_xs = pass ? 2 : 0;
        kern_gemm_config(kt_gpu, o);
        kt_gbuf gb, gf;
        kern_matmul(kt_gpu, kt_gbuf_alloc(&gb, nr * 2, 0), gin, &wg, n);
        kern_logits(kt_gpu, kt_gbuf_alloc(&gf, nr * sizeof(float), 0), gin, &wg, n);
        ob[pass] = inferd_malloc(nr * 2);
        of[pass] = inferd_malloc(nr * sizeof(float));
        kt_gbuf_read(&gb, ob[pass]);
        kt_gbuf_read(&gf, of[pass]);
        kt_gbuf_free(&gb);
        kt_gbuf_free(&gf);
    }
    int bad = 0;
    if ((memcmp(ob[0], ob[1], nr * 2) != 0 || memcmp(of[0], of[1], nr * sizeof(float)) != 0) && bad++ < 20)
        printf("  xs: plain %d x %d at n = %d differs from no staging\n", R, C, n);
    for (int pass = 0; pass < 2; pass++) {
        inferd_free(ob[pass]);
        inferd_free(of[pass]);
    }
    kern_free(kt_gpu, gin);
    kern_free(kt_gpu, wg.data);
    inferd_free(w);
    inferd_free(in);
    return bad;
}

/* The CUDA-core GEMV's input staging (gemv_xs): every fused form at 1
 * and 2 tokens, and the plain products, bitwise the same with the input
 * rows (and the norm weight) read from shared memory as through L1: odd
 * row counts, rows of 8 to 14,336 columns (at 2 tokens 14,336 columns do
 * not fit: the launch falls back), the O product's preload (mode 1 and 2;
 * a 4,096-column row shortens the preload to make room). */
START_TEST(test_fused_xs)
{
    kern_gemm_opts saved;
    fuse_config(&saved, KCUDA_FUSE_MAX_N, 0, 0);
    kern_gemm_opts o;
    kern_gemm_config_get(kt_gpu, &o);
    o.gemv_preload = 12;
    static const int dense[][2] = {{1, 8}, {37, 264}, {258, 4096}, {61, 14336}};
    static const int rp[][5] = {{8, 2, 64, 16, 0}, {7, 1, 32, 5, 1}, {32, 8, 128, 16, 0}};
    const uint64_t seed = kt_seed() + 3100;
    int bad = 0, k = 0;
    for (int n = 1; n <= 2; n++) {
        for (int epi = KERN_EPI_STORE; epi <= KERN_EPI_SILU_MUL; epi++)
            for (int s = 0; s < 4; s++)
                for (int norm = 0; norm < 2; norm++, k++) {
                    if ((epi == KERN_EPI_STORE && !norm) || (kt_quick && s == 3))
                        continue;
                    fcase c = {.epi = (kern_epilogue)epi,
                               .norm = norm,
                               .n = n,
                               .rows = dense[s][0],
                               .cols = dense[s][1]};
                    if (epi == KERN_EPI_SILU_MUL && c.rows % 2)
                        c.rows++;
                    bad += xs_case(&o, &c, 2, seed + (uint64_t)k * 16);
                    if (epi == KERN_EPI_RESID && !norm) { /* the O product's form: preloaded, mode 1 and 2 */
                        c.after_attention = true;
                        bad += xs_case(&o, &c, 1, seed + (uint64_t)k * 16 + 1);
                        bad += xs_case(&o, &c, 2, seed + (uint64_t)k * 16 + 2);
                    }
                }
        for (int s = 0; s < 3; s++, k++) {
            fcase c = {.epi = KERN_EPI_ROPE_KV,
                       .norm = s != 1,
                       .bias = rp[s][4] != 0,
                       .n = n,
                       .cols = s == 2 ? 4096 : 136,
                       .nh = rp[s][0],
                       .nkv = rp[s][1],
                       .hd = rp[s][2],
                       .bs = rp[s][3]};
            c.rows = (c.nh + 2 * c.nkv) * c.hd;
            bad += xs_case(&o, &c, 2, seed + (uint64_t)k * 16);
        }
        bad += xs_plain_case(&o, n, 37, 264, seed + 7000 + (uint64_t)n);
        bad += xs_plain_case(&o, n, 1000, 4096, seed + 7100 + (uint64_t)n);
    }
    kern_gemm_config(kt_gpu, &saved);
    ck_assert_int_eq(bad, 0);
}
END_TEST

START_TEST(test_fusable_table)
{
    kern_gemm_opts saved;
    kern_gemm_config_get(kt_gpu, &saved);
    float *w = inferd_malloc(sizeof(float) * 64 * 72);
    kt_rand_bf16(w, 64 * 72, 3, -1.0f, 1.0f);
    kern_weight wg = kt_weight_gpu(w, 64, 72), wc = kt_weight_cpu(w, 64, 72);
    kern_weight odd = wg;
    odd.cols = 36; /* cols % 8 != 0 */
    odd.rows = 128;
    const int64_t wbytes = 64 * 72 * 2;
    const struct {
        int fuse_max_n;
        int gemv_max_n;
        int64_t min_bytes;
        const kern_weight *w;
        bool cpu;
        int n;
        bool want;
    } rows[] = {
        {4, 4, 0, &wg, false, 0, false},                  /* n below 1 */
        {4, 4, 0, &wg, false, 1, true},                   /* batch 1 */
        {4, 4, 0, &wg, false, KCUDA_FUSE_MAX_N, true},
        {99, 16, 0, &wg, false, KCUDA_FUSE_MAX_N + 1, false}, /* past the fused sizes (clamped) */
        {2, 4, 0, &wg, false, 3, false},                  /* past fuse_max_n (INFERD_FUSE=2) */
        {2, 4, 0, &wg, false, 2, true},
        {4, 1, 0, &wg, false, 2, false},                  /* past gemv_max_n: cuBLASLt route */
        {4, 0, 0, &wg, false, 1, false},                  /* GEMV off */
        {0, 4, 0, &wg, false, 1, false},                  /* fusion off (INFERD_FUSE=0) */
        {4, 4, wbytes, &wg, false, 1, true},              /* weight at the size threshold */
        {4, 4, wbytes + 1, &wg, false, 1, false},         /* weight below it */
        {4, 4, 0, &odd, false, 1, false},                 /* cols % 8 != 0 */
        {4, 4, 0, &wc, true, 1, false},                   /* never on the CPU */
    };
    int bad = 0;
    for (size_t i = 0; i < sizeof rows / sizeof rows[0]; i++) {
        const kern_gemm_opts o = {.gemv_max_n = rows[i].gemv_max_n, .gemv_min_weight_bytes = rows[i].min_bytes,
                                  .pdl = true, .gemv_variant = 1, .fuse_max_n = rows[i].fuse_max_n};
        kern_gemm_config(kt_gpu, &o);
        const bool got = kern_matmul_fusable(rows[i].cpu ? kt_cpu : kt_gpu, rows[i].w, rows[i].n);
        if (got != rows[i].want && bad++ < 20)
            printf("  fusable row %zu: got %d want %d\n", i, got, rows[i].want);
    }
    /* kern_matmul_epi_fusable: kern_matmul_fusable, or the tensor-core form from gemv_tc_min_n */
    const struct {
        int fuse_max_n, gemv_max_n, tc_min_n;
        int64_t min_bytes;
        const kern_weight *w;
        bool cpu;
        int n;
        bool want;
        int64_t lt_bytes; /* gemv_lt_min_bytes (0: never) */
    } erows[] = {
        {2, 16, 3, 0, &wg, false, 1, true, 0},          /* the CUDA-core fused form */
        {2, 16, 3, 0, &wg, false, 3, true, 0},          /* the tensor-core form */
        {2, 16, 3, 0, &wg, false, 16, true, 0},
        {2, 16, 3, 0, &wg, false, 17, false, 0},        /* past the GEMV */
        {2, 8, 3, 0, &wg, false, 9, false, 0},          /* past gemv_max_n */
        {2, 16, 0, 0, &wg, false, 5, false, 0},         /* tensor-core form off */
        {2, 16, 5, 0, &wg, false, 4, false, 0},         /* between the two forms */
        {0, 16, 3, 0, &wg, false, 1, false, 0},         /* fusion off, below the tensor-core form */
        {0, 16, 3, 0, &wg, false, 4, true, 0},          /* fusion off: the tensor-core form still */
        {2, 16, 3, wbytes + 1, &wg, false, 8, false, 0}, /* weight below the GEMV threshold */
        {2, 16, 3, 0, &odd, false, 8, false, 0},        /* cols % 8 != 0 */
        {2, 16, 3, 0, &wc, true, 8, false, 0},          /* never on the CPU */
        {2, 16, 3, 0, &wg, false, 8, true, wbytes},  /* cuBLASLt for large weights: not at 8 tokens */
        {2, 16, 3, 0, &wg, false, 9, false, wbytes}, /* ... at 9..16 */
        {2, 16, 3, 0, &wg, false, 16, false, wbytes},
        {2, 16, 3, 0, &wg, false, 9, true, wbytes + 1}, /* the weight below that size */
    };
    for (size_t i = 0; i < sizeof erows / sizeof erows[0]; i++) {
        const kern_gemm_opts o = {.gemv_max_n = erows[i].gemv_max_n, .gemv_min_weight_bytes = erows[i].min_bytes,
                                  .pdl = true, .gemv_variant = 1, .fuse_max_n = erows[i].fuse_max_n,
                                  .gemv_tc_min_n = erows[i].tc_min_n, .gemv_lt_min_bytes = erows[i].lt_bytes};
        kern_gemm_config(kt_gpu, &o);
        const bool got = kern_matmul_epi_fusable(erows[i].cpu ? kt_cpu : kt_gpu, erows[i].w, erows[i].n);
        if (got != erows[i].want && bad++ < 20)
            printf("  epi fusable row %zu: got %d want %d\n", i, got, erows[i].want);
    }
    kt_record("matmul_fusable", bad, 0, 0);
    kern_gemm_config(kt_gpu, &saved);
    kern_free(kt_gpu, wg.data);
    kern_free(kt_cpu, wc.data);
    inferd_free(w);
    ck_assert_int_eq(bad, 0);
}
END_TEST

TCase *kt_tcase_fused(void)
{
    TCase *tc = tcase_create("fused");
    tcase_set_timeout(tc, 600);
    tcase_add_loop_test(tc, test_fused_forms, 0, 2); /* _i * 2: the tensor-core ring off, forced */
    tcase_add_loop_test(tc, test_fused_rms, 0, 2);
    tcase_add_loop_test(tc, test_fused_tc_bitwise, 0, 2);
    tcase_add_test(tc, test_fused_fp8_cache);
    tcase_add_test(tc, test_fused_preload);
    tcase_add_test(tc, test_fused_xs);
    tcase_add_test(tc, test_fusable_table);
    return tc;
}
