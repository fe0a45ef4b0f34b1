/* tests/kernels/cpu/test_kcpu_kv_fp8.c: the CPU backend's fp8 e4m3 KV
 * cache (kv_fp8, --kv-cache-dtype fp8) against its f32 path, bitwise:
 *   - RoPE + KV write: with kv_fp8 every cache byte is kern_f32_to_e4m3 of
 *     the f32 path's cache element (untouched slots included) and qkv is
 *     bitwise the f32 path's; through kern_rope_kv_write, kern_rope_kv_write_ex
 *     with Qwen2 biases and Qwen3 q/k norms (so V is the biased value), and
 *     the CPU kern_matmul_fused ROPE_KV epilogue; inputs span e4m3's
 *     subnormals and saturation; slots include padding (-1); guards around
 *     the byte caches stay intact;
 *   - attention: with kv_fp8 the output is bitwise the f32 attention over
 *     an f32 cache holding the decoded bytes, for a batch of a fresh
 *     prefill, a decode token, a prefill chunk after cached context, a
 *     one-token sequence and a padding row; GQA 4 (8 heads, 2 kv heads);
 *     odd block sizes 7 and 67 (67 > the 64-key run, so a block's keys go
 *     in two runs); caches of random codes with the extremes (+-448,
 *     subnormals, -0) mixed in.
 */
#include <math.h>
#include <stdlib.h>

#include "common/alloc.h"
#include "kernels/kern_fp8.h"
#include "kt_util.h"

static void make_inv_freq(float *inv, int hd, float theta)
{
    for (int j = 0; j < hd / 2; j++)
        inv[j] = (float)(1.0 / pow((double)theta, (double)(2 * j) / (double)hd));
}

/* A host F32 weight of rows x cols, uniform in [lo, hi). */
static kern_weight weight_f32(int64_t rows, int64_t cols, uint64_t seed, float lo, float hi)
{
    kern_weight w = {inferd_malloc((size_t)(rows * cols) * sizeof(float)), KERN_DTYPE_F32, rows, cols};
    test_fill_uniform(w.data, (size_t)(rows * cols), seed, lo, hi);
    return w;
}

/* --- RoPE + KV write ---------------------------------------------------------- */

enum { W_PLAIN, W_EPILOGUE, W_FUSED };

#define RK_NH 6
#define RK_NKV 2
#define RK_HD 48
#define RK_BS 5
#define RK_BLOCKS 7
#define RK_N 9
#define RK_ROW ((RK_NH + 2 * RK_NKV) * RK_HD)
#define RK_CACHE ((size_t)RK_BLOCKS * RK_NKV * RK_BS * RK_HD)
#define RK_COLS 24

typedef struct {
    kern_weight bias, q_norm, k_norm, w; /* w: [RK_ROW, RK_COLS] for the fused product */
    float *in;                           /* [RK_N, RK_COLS] the fused product's input */
    float *qkv;                          /* [RK_N, RK_ROW] */
    float inv[RK_HD / 2];
} rk_inputs;

static void rk_inputs_init(rk_inputs *x)
{
    x->bias = weight_f32(RK_ROW, 1, 41, -0.5f, 0.5f);
    x->q_norm = weight_f32(1, RK_HD, 42, 0.5f, 1.5f);
    x->k_norm = weight_f32(1, RK_HD, 43, 0.5f, 1.5f);
    x->w = weight_f32(RK_ROW, RK_COLS, 44, -0.5f, 0.5f);
    x->in = inferd_malloc(sizeof(float) * RK_N * RK_COLS);
    test_fill_uniform(x->in, RK_N * RK_COLS, 45, -2.0f, 2.0f);
    x->qkv = inferd_malloc(sizeof(float) * RK_N * RK_ROW);
    test_fill_uniform(x->qkv, RK_N * RK_ROW, 46, -4.0f, 4.0f);
    for (int j = 0; j < RK_ROW; j++) { /* e4m3's extremes: saturation and subnormals */
        x->qkv[2 * RK_ROW + j] *= 300.0f;
        x->qkv[3 * RK_ROW + j] *= 1e-3f;
    }
    for (int j = 0; j < RK_COLS; j++) /* the fused product's saturating row */
        x->in[2 * RK_COLS + j] = 900.0f;
    make_inv_freq(x->inv, RK_HD, 10000.0f);
}

static void rk_inputs_free(rk_inputs *x)
{
    inferd_free(x->bias.data);
    inferd_free(x->q_norm.data);
    inferd_free(x->k_norm.data);
    inferd_free(x->w.data);
    inferd_free(x->in);
    inferd_free(x->qkv);
}

/* Run variant `way` with caches kc / vc (f32 or, kv_fp8, bytes) into qkv. */
static void rk_run(kern_ctx *ctx, const rk_inputs *x, int way, bool fp8, float *qkv, void *kc, void *vc)
{
    static const int32_t pos[RK_N] = {0, 1, 7, 30, 2, 100, 4095, 3, 11};
    static const int64_t slots[RK_N] = {0, 6, 12, -1, 34, 19, 27, 5, -1};
    memcpy(qkv, x->qkv, sizeof(float) * RK_N * RK_ROW);
    kern_rope_kv_params p = {.qkv = qkv, .positions = pos, .slot_mapping = slots, .inv_freq = x->inv,
                             .k_cache = kc, .v_cache = vc, .n_tokens = RK_N, .n_heads = RK_NH,
                             .n_kv_heads = RK_NKV, .head_dim = RK_HD, .block_size = RK_BS, .kv_fp8 = fp8};
    if (way == W_PLAIN) {
        kern_rope_kv_write(ctx, &p);
    } else if (way == W_EPILOGUE) {
        const kern_qkv_epilogue e = {.qkv_bias = &x->bias, .q_norm = &x->q_norm, .k_norm = &x->k_norm,
                                     .norm_eps = 1e-6f};
        kern_rope_kv_write_ex(ctx, &p, &e);
    } else {
        const kern_fuse f = {.epi = KERN_EPI_ROPE_KV, .rope = &p, .qkv_bias = &x->bias};
        kern_matmul_fused(ctx, qkv, x->in, &x->w, RK_N, &f);
    }
}

START_TEST(test_rope_kv_write_fp8)
{
    KT_INT_EQ(RK_CACHE % 4, 0);
    kern_ctx *ctx = kt_ctx(2);
    rk_inputs x;
    rk_inputs_init(&x);
    float *qkv32 = inferd_malloc(sizeof(float) * RK_N * RK_ROW);
    float *qkv8 = inferd_malloc(sizeof(float) * RK_N * RK_ROW);
    int saturated = 0, subnormal = 0;
    for (int way = W_PLAIN; way <= W_FUSED; way++) {
        float *kc = kt_galloc(ctx, RK_CACHE), *vc = kt_galloc(ctx, RK_CACHE); /* NaN sentinels */
        uint8_t *kb = kt_galloc(ctx, RK_CACHE / 4), *vb = kt_galloc(ctx, RK_CACHE / 4);
        memset(kb, kern_f32_to_e4m3(kc[0]), RK_CACHE); /* the sentinel's code, 0x7F */
        memset(vb, kern_f32_to_e4m3(vc[0]), RK_CACHE);
        rk_run(ctx, &x, way, false, qkv32, kc, vc);
        rk_run(ctx, &x, way, true, qkv8, kb, vb);
        KT_MSG(memcmp(qkv32, qkv8, sizeof(float) * RK_N * RK_ROW) == 0, "variant %d: qkv differs", way);
        for (size_t i = 0; i < RK_CACHE; i++) {
            KT_MSG(kb[i] == kern_f32_to_e4m3(kc[i]), "variant %d: k[%zu] 0x%02X, want 0x%02X (of %g)", way, i,
                   kb[i], kern_f32_to_e4m3(kc[i]), (double)kc[i]);
            KT_MSG(vb[i] == kern_f32_to_e4m3(vc[i]), "variant %d: v[%zu] 0x%02X, want 0x%02X (of %g)", way, i,
                   vb[i], kern_f32_to_e4m3(vc[i]), (double)vc[i]);
            saturated += (kb[i] & 0x7F) == 0x7E;
            subnormal += (vb[i] & 0x78) == 0 && (vb[i] & 7) != 0;
        }
        kt_gcheck(kb, RK_CACHE / 4, "fp8 k cache");
        kt_gcheck(vb, RK_CACHE / 4, "fp8 v cache");
        kt_gfree(ctx, kc);
        kt_gfree(ctx, vc);
        kt_gfree(ctx, kb);
        kt_gfree(ctx, vb);
    }
    KT_MSG(saturated > 0 && subnormal > 0, "inputs reach neither saturation (%d) nor subnormals (%d)",
           saturated, subnormal);
    inferd_free(qkv32);
    inferd_free(qkv8);
    rk_inputs_free(&x);
    kern_ctx_free(ctx);
}
END_TEST

/* --- attention ---------------------------------------------------------------- */

#define AT_SEQS 4
#define AT_NH 8
#define AT_NKV 2

/* The batch: new tokens and total length of each sequence. */
static const int32_t at_qlen[AT_SEQS] = {30, 1, 20, 1};
static const int32_t at_len[AT_SEQS] = {30, 140, 65, 1};

/* A random e4m3 code for element i: mostly encoded uniforms in [-2, 2],
 * 1 in 64 an extreme (+-448, the smallest subnormals, -0). */
static uint8_t random_code(uint64_t seed, uint64_t i)
{
    static const uint8_t extremes[] = {0x7E, 0xFE, 0x01, 0x81, 0x80, 0x07};
    const double u = rng_uniform(seed, i);
    if (rng_uniform(seed + 1, i) < 1.0 / 64)
        return extremes[(int)(u * (double)sizeof extremes)];
    return kern_f32_to_e4m3((float)(4.0 * u - 2.0));
}

/* kern_attention over caches kc / vc (kv_fp8: bytes) into out. */
static void at_run(kern_ctx *ctx, int hd, int bs, int max_blocks, const int32_t *bt, const float *qkv,
                   int n_tokens, const void *kc, const void *vc, bool fp8, float *out)
{
    int32_t qsl[AT_SEQS + 1] = {0};
    int max_q = 0, max_len = 0;
    for (int i = 0; i < AT_SEQS; i++) {
        qsl[i + 1] = qsl[i] + at_qlen[i];
        max_q = at_qlen[i] > max_q ? at_qlen[i] : max_q;
        max_len = at_len[i] > max_len ? at_len[i] : max_len;
    }
    kern_attn_params a = {
        .out = out, .qkv = qkv, .k_cache = kc, .v_cache = vc, .query_start_loc = qsl, .seq_lens = at_len,
        .block_tables = bt, .h_query_start_loc = qsl, .h_seq_lens = at_len, .n_seqs = AT_SEQS,
        .n_tokens = n_tokens, .max_blocks_per_seq = max_blocks, .n_heads = AT_NH, .n_kv_heads = AT_NKV,
        .head_dim = hd, .block_size = bs, .max_query_len = max_q, .max_seq_len = max_len,
        .scale = 1.0f / sqrtf((float)hd), .kv_fp8 = fp8};
    kern_attention(ctx, &a);
}

/* Block tables: the sequences' blocks, shuffled over the pool (block 0 unused). */
static int32_t *at_tables(int bs, int max_blocks, int n_blocks, uint64_t seed)
{
    int32_t *perm = inferd_malloc(sizeof(int32_t) * (size_t)n_blocks);
    for (int b = 0; b < n_blocks; b++)
        perm[b] = b;
    for (int b = n_blocks - 1; b > 1; b--) {
        int j = 1 + (int)(rng_uniform(seed, (uint64_t)b) * (double)b);
        int32_t t = perm[b];
        perm[b] = perm[j];
        perm[j] = t;
    }
    int32_t *bt = inferd_malloc(sizeof(int32_t) * (size_t)(AT_SEQS * max_blocks));
    int next = 1;
    for (int i = 0; i < AT_SEQS; i++)
        for (int b = 0; b < max_blocks; b++)
            bt[i * max_blocks + b] = b * bs < at_len[i] ? perm[next++] : -1;
    inferd_free(perm);
    return bt;
}

static void attention_case(kern_ctx *ctx, int hd, int bs, uint64_t seed)
{
    int max_blocks = 0, need = 0, n_tokens = 1; /* + 1 padding row */
    for (int i = 0; i < AT_SEQS; i++) {
        int nb = (at_len[i] + bs - 1) / bs;
        max_blocks = nb > max_blocks ? nb : max_blocks;
        need += nb;
        n_tokens += at_qlen[i];
    }
    const int n_blocks = need + 3;
    int32_t *bt = at_tables(bs, max_blocks, n_blocks, seed);
    const size_t cache_n = (size_t)n_blocks * AT_NKV * bs * hd;
    uint8_t *kb = inferd_malloc(cache_n), *vb = inferd_malloc(cache_n);
    float *kf = inferd_malloc(sizeof(float) * cache_n), *vf = inferd_malloc(sizeof(float) * cache_n);
    for (size_t i = 0; i < cache_n; i++) {
        kb[i] = random_code(seed * 4, i);
        vb[i] = random_code(seed * 4 + 2, i);
        kf[i] = kern_e4m3_to_f32(kb[i]);
        vf[i] = kern_e4m3_to_f32(vb[i]);
    }
    const int row = (AT_NH + 2 * AT_NKV) * hd, out_n = n_tokens * AT_NH * hd;
    float *qkv = inferd_malloc(sizeof(float) * (size_t)(n_tokens * row));
    test_fill_uniform(qkv, (size_t)(n_tokens * row), seed * 4 + 3, -1.5f, 1.5f);
    float *o32 = kt_galloc(ctx, (size_t)out_n), *o8 = kt_galloc(ctx, (size_t)out_n);
    at_run(ctx, hd, bs, max_blocks, bt, qkv, n_tokens, kf, vf, false, o32);
    at_run(ctx, hd, bs, max_blocks, bt, qkv, n_tokens, kb, vb, true, o8);
    KT_MSG(memcmp(o32, o8, sizeof(float) * (size_t)out_n) == 0, "hd %d bs %d: fp8 attention differs", hd, bs);
    int nonzero = 0;
    for (int i = 0; i < out_n; i++)
        nonzero += o8[i] != 0.0f;
    KT_MSG(nonzero > out_n / 2, "hd %d bs %d: only %d of %d outputs nonzero", hd, bs, nonzero, out_n);
    for (int i = (n_tokens - 1) * AT_NH * hd; i < out_n; i++) /* the padding row */
        KT_CHECK(o8[i] == 0.0f);
    kt_gcheck(o8, (size_t)out_n, "fp8 attention out");
    kt_gfree(ctx, o32);
    kt_gfree(ctx, o8);
    inferd_free(qkv);
    inferd_free(kb);
    inferd_free(vb);
    inferd_free(kf);
    inferd_free(vf);
    inferd_free(bt);
}

START_TEST(test_attention_fp8)
{
    kern_ctx *ctx = kt_ctx(3);
    attention_case(ctx, 72, 7, 5);
    attention_case(ctx, 64, 67, 6);
    attention_case(ctx, 8, 1, 7);
    kern_ctx_free(ctx);
}
END_TEST

int main(void)
{
    Suite *s = suite_create("kernels_cpu_kv_fp8");
    TCase *tc = tcase_create("core");
    tcase_set_timeout(tc, 300);
    tcase_add_test(tc, test_rope_kv_write_fp8);
    tcase_add_test(tc, test_attention_fp8);
    suite_add_tcase(s, tc);
    return test_run_suite(s);
}
