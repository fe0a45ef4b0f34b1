/* tests/kernels/cpu/test_kcpu_ops.c: the CPU backend's dense ops against
 * naive fp64 implementations written here: weight upload (every dtype pair),
 * random weights, embedding, residual add + RMSNorm, matmul / logits for
 * F32 / F16 / BF16 weights at odd sizes, row gather, SiLU * up. Outputs carry
 * guard regions; matmul is also checked for bitwise invariance to the batch
 * size and the thread count. */
#include <math.h>
#include <stdlib.h>

#include "common/alloc.h"
#include "common/half.h"
#include "kt_util.h"

static const kern_dtype all_dtypes[] = {KERN_DTYPE_F32, KERN_DTYPE_F16, KERN_DTYPE_BF16};

/* Round f to dtype dt and back (the value a weight of that dtype holds). */
static float round_to(kern_dtype dt, float f)
{
    switch (dt) {
    case KERN_DTYPE_F16: return half_f16_to_f32(half_f32_to_f16(f));
    case KERN_DTYPE_BF16: return half_bf16_to_f32(half_f32_to_bf16(f));
    default: return f;
    }
}

/* Host array of n elements of dtype dt holding src (rounded). */
static void *host_encode(kern_dtype dt, const float *src, size_t n)
{
    void *p = inferd_malloc(n * kern_dtype_size(dt));
    for (size_t i = 0; i < n; i++) {
        if (dt == KERN_DTYPE_F32)
            ((float *)p)[i] = src[i];
        else if (dt == KERN_DTYPE_F16)
            ((uint16_t *)p)[i] = half_f32_to_f16(src[i]);
        else
            ((uint16_t *)p)[i] = half_f32_to_bf16(src[i]);
    }
    return p;
}

/* Element i of a weight as float, independent of the backend's helpers. */
static float wget(const kern_weight *w, int64_t i)
{
    if (w->dtype == KERN_DTYPE_F32)
        return ((const float *)w->data)[i];
    uint16_t h = ((const uint16_t *)w->data)[i];
    return w->dtype == KERN_DTYPE_F16 ? half_f16_to_f32(h) : half_bf16_to_f32(h);
}

/* A weight [rows, cols] of dtype dt with random values in [-1, 1). */
static kern_weight make_weight(kern_ctx *ctx, kern_dtype dt, int64_t rows, int64_t cols,
                               uint64_t seed)
{
    kern_weight w = {kern_alloc(ctx, (size_t)(rows * cols) * kern_dtype_size(dt) + 1), dt, rows, cols};
    float *src = inferd_malloc((size_t)(rows * cols) * sizeof(float) + 4);
    test_fill_uniform(src, (size_t)(rows * cols), seed, -1.0f, 1.0f);
    kern_weight_upload(ctx, &w, 0, src, KERN_DTYPE_F32, rows);
    inferd_free(src);
    return w;
}

START_TEST(test_weight_upload_all_pairs)
{
    kern_ctx *ctx = kt_ctx(2);
    const int64_t rows = 7, cols = 13, off = 2, nr = 3;
    float src[3 * 13];
    test_fill_uniform(src, 3 * 13, 11, -70000.0f, 70000.0f); /* beyond f16 range too */
    for (int i = 0; i < 3 * 13; i += 5)
        src[i] *= 1e-6f; /* small values, f16 subnormals */
    for (size_t s = 0; s < 3; s++) {
        for (size_t d = 0; d < 3; d++) {
            kern_dtype sd = all_dtypes[s], dd = all_dtypes[d];
            size_t es = kern_dtype_size(dd);
            kern_weight w = {kern_alloc(ctx, (size_t)(rows * cols) * es), dd, rows, cols};
            memset(w.data, 0xAB, (size_t)(rows * cols) * es);
            void *enc = host_encode(sd, src, (size_t)(nr * cols));
            kern_weight_upload(ctx, &w, off, enc, sd, nr);
            for (int64_t i = 0; i < rows * cols; i++) {
                int64_t r = i / cols;
                if (r < off || r >= off + nr) {
                    KT_MSG(((unsigned char *)w.data)[i * (int64_t)es] == 0xAB,
                                  "%s->%s: row %lld outside the upload was written",
                                  kern_dtype_name(sd), kern_dtype_name(dd), (long long)r);
                    continue;
                }
                float want = round_to(dd, round_to(sd, src[i - off * cols]));
                float got = wget(&w, i);
                KT_MSG(kt_bits(want) == kt_bits(got), "%s->%s [%lld]: %g != %g",
                              kern_dtype_name(sd), kern_dtype_name(dd), (long long)i, got, want);
            }
            inferd_free(enc);
            kern_free(ctx, w.data);
        }
    }
    kern_ctx_free(ctx);
}
END_TEST

START_TEST(test_weight_fill_random)
{
    kern_ctx *ctx = kt_ctx(3);
    const int64_t rows = 129, cols = 257;
    const float scale = 0.02f;
    for (size_t d = 0; d < 3; d++) {
        kern_weight w = make_weight(ctx, all_dtypes[d], rows, cols, 1);
        kern_weight_fill_random(ctx, &w, 42, scale);
        double sum = 0.0, mx = 0.0;
        for (int64_t i = 0; i < rows * cols; i++) {
            float want = round_to(w.dtype, (float)((2.0 * rng_uniform(42, (uint64_t)i) - 1.0) * scale));
            float got = wget(&w, i);
            KT_MSG(kt_bits(got) == kt_bits(want), "[%lld] %g != %g", (long long)i, got, want);
            KT_CHECK(fabsf(got) <= scale * 1.001f);
            sum += got;
            mx = fmax(mx, fabs(got));
        }
        KT_CHECK(fabs(sum / (double)(rows * cols)) < 0.01 * scale); /* centred */
        KT_CHECK(mx > 0.99 * scale);                                 /* covers the range */
        /* another seed gives other values */
        kern_weight_fill_random(ctx, &w, 43, scale);
        int same = 0;
        for (int64_t i = 0; i < 1000; i++)
            same += wget(&w, i) == round_to(w.dtype, (float)((2.0 * rng_uniform(42, (uint64_t)i) - 1.0) * scale));
        ck_assert_int_lt(same, 50);
        kern_free(ctx, w.data);
    }
    kern_ctx_free(ctx);
}
END_TEST

START_TEST(test_embed)
{
    kern_ctx *ctx = kt_ctx(2);
    const int64_t vocab = 37, d = 29;
    const int32_t toks[] = {0, 36, 5, 5, 17, 1, 35};
    const int n = (int)(sizeof toks / sizeof toks[0]);
    for (size_t k = 0; k < 3; k++) {
        kern_weight t = make_weight(ctx, all_dtypes[k], vocab, d, 7 + k);
        float *out = kt_galloc(ctx, (size_t)(n * d));
        kern_embed(ctx, out, toks, n, &t);
        for (int i = 0; i < n; i++)
            for (int64_t j = 0; j < d; j++)
                KT_CHECK(kt_bits(out[i * d + j]) == kt_bits(wget(&t, toks[i] * d + j)));
        kt_gcheck(out, (size_t)(n * d), "embed");
        kt_gfree(ctx, out);
        kern_free(ctx, t.data);
    }
    kern_ctx_free(ctx);
}
END_TEST

/* Naive RMSNorm in fp64 of one row x[d] (already including the residual). */
static void ref_rmsnorm(const double *x, const kern_weight *w, int64_t d, double eps, double *y)
{
    double ss = 0.0;
    for (int64_t j = 0; j < d; j++)
        ss += x[j] * x[j];
    double inv = 1.0 / sqrt(ss / (double)d + eps);
    for (int64_t j = 0; j < d; j++)
        y[j] = x[j] * inv * wget(w, j);
}

START_TEST(test_add_rmsnorm)
{
    kern_ctx *ctx = kt_ctx(2);
    const int n = 5;
    const int64_t dims[] = {1, 67, 300};
    for (size_t di = 0; di < 3; di++) {
        const int64_t d = dims[di];
        for (size_t k = 0; k < 3; k++) {
            for (int with_add = 0; with_add < 2; with_add++) {
                kern_weight w = make_weight(ctx, all_dtypes[k], 1, d, 3 + k);
                float *resid = kt_galloc(ctx, (size_t)(n * d));
                float *add = kt_galloc(ctx, (size_t)(n * d));
                float *out = kt_galloc(ctx, (size_t)(n * d));
                test_fill_uniform(resid, (size_t)(n * d), 100 + di, -3.0f, 3.0f);
                test_fill_uniform(add, (size_t)(n * d), 200 + di, -1.0f, 1.0f);
                double *x = inferd_malloc((size_t)(n * d) * sizeof(double));
                double *y = inferd_malloc((size_t)d * sizeof(double));
                for (int64_t i = 0; i < n * d; i++)
                    x[i] = (double)resid[i] + (with_add ? (double)add[i] : 0.0);
                kern_add_rmsnorm(ctx, out, resid, with_add ? add : NULL, &w, n, 1e-5f);
                for (int i = 0; i < n; i++) {
                    ref_rmsnorm(x + i * d, &w, d, 1e-5, y);
                    for (int64_t j = 0; j < d; j++) {
                        /* resid holds the fp32 sum; out the normalized row */
                        KT_CHECK(fabs(resid[i * d + j] - x[i * d + j]) <= 1e-6 * (1 + fabs(x[i * d + j])));
                        KT_MSG(fabs(out[i * d + j] - y[j]) <= 1e-5 * (1e-2 + fabs(y[j])),
                                      "d %lld add %d row %d col %lld: %g vs %g", (long long)d,
                                      with_add, i, (long long)j, out[i * d + j], y[j]);
                    }
                }
                kt_gcheck(out, (size_t)(n * d), "rmsnorm out");
                kt_gcheck(resid, (size_t)(n * d), "rmsnorm resid");
                inferd_free(x);
                inferd_free(y);
                kt_gfree(ctx, resid);
                kt_gfree(ctx, add);
                kt_gfree(ctx, out);
                kern_free(ctx, w.data);
            }
        }
    }
    kern_ctx_free(ctx);
}
END_TEST

/* Compare out[n, rows] with the fp64 product; tolerance relative to the sum
 * of |terms| (fp32 accumulation error bound, with margin). */
static void check_matmul(const float *out, const float *in, const kern_weight *w, int n,
                         const char *what)
{
    const int64_t rows = w->rows, cols = w->cols;
    for (int t = 0; t < n; t++) {
        for (int64_t r = 0; r < rows; r++) {
            double ref = 0.0, mag = 0.0;
            for (int64_t c = 0; c < cols; c++) {
                double term = (double)wget(w, r * cols + c) * (double)in[t * cols + c];
                ref += term;
                mag += fabs(term);
            }
            double got = out[t * rows + r];
            KT_MSG(fabs(got - ref) <= 1e-5 * mag + 1e-6,
                          "%s %s n %d rows %lld cols %lld [%d, %lld]: %.9g vs %.9g", what,
                          kern_dtype_name(w->dtype), n, (long long)rows, (long long)cols, t,
                          (long long)r, got, ref);
        }
    }
}

START_TEST(test_matmul_vs_fp64)
{
    kern_ctx *ctx = kt_ctx(3);
    static const int64_t shapes[][2] = {{1, 1}, {37, 67}, {19, 300}, {33, 515}, {8, 8}, {5, 1031}};
    static const int ns[] = {1, 2, 3, 4, 5, 7, 9, 13};
    for (size_t s = 0; s < sizeof shapes / sizeof shapes[0]; s++) {
        for (size_t k = 0; k < 3; k++) {
            kern_weight w = make_weight(ctx, all_dtypes[k], shapes[s][0], shapes[s][1], 50 + s);
            for (size_t ni = 0; ni < sizeof ns / sizeof ns[0]; ni++) {
                int n = ns[ni];
                float *in = kt_galloc(ctx, (size_t)(n * w.cols));
                float *out = kt_galloc(ctx, (size_t)(n * w.rows));
                test_fill_uniform(in, (size_t)(n * w.cols), 900 + ni, -2.0f, 2.0f);
                kern_matmul(ctx, out, in, &w, n);
                check_matmul(out, in, &w, n, "matmul");
                kt_gcheck(out, (size_t)(n * w.rows), "matmul out");
                float *lg = kt_galloc(ctx, (size_t)(n * w.rows));
                kern_logits(ctx, lg, in, &w, n);
                check_matmul(lg, in, &w, n, "logits");
                kt_gcheck(lg, (size_t)(n * w.rows), "logits out");
                kt_gfree(ctx, lg);
                kt_gfree(ctx, in);
                kt_gfree(ctx, out);
            }
            kern_free(ctx, w.data);
        }
    }
    kern_ctx_free(ctx);
}
END_TEST

/* Each token's output row is bitwise the same whatever the batch size, the
 * token's place in the batch and the thread count. */
START_TEST(test_matmul_batch_invariance)
{
    kern_ctx *c1 = kt_ctx(1), *c3 = kt_ctx(3);
    const int n = 13;
    for (size_t k = 0; k < 3; k++) {
        kern_weight w = make_weight(c1, all_dtypes[k], 97, 523, 77);
        float *in = inferd_malloc((size_t)(n * w.cols) * sizeof(float));
        float *big1 = inferd_malloc((size_t)(n * w.rows) * sizeof(float));
        float *big3 = inferd_malloc((size_t)(n * w.rows) * sizeof(float));
        float *one = inferd_malloc((size_t)w.rows * sizeof(float));
        test_fill_uniform(in, (size_t)(n * w.cols), 5, -1.0f, 1.0f);
        kern_matmul(c1, big1, in, &w, n);
        kern_matmul(c3, big3, in, &w, n);
        KT_CHECK(memcmp(big1, big3, (size_t)(n * w.rows) * sizeof(float)) == 0);
        for (int t = 0; t < n; t++) {
            kern_matmul(c3, one, in + t * w.cols, &w, 1);
            KT_MSG(memcmp(one, big1 + t * w.rows, (size_t)w.rows * sizeof(float)) == 0,
                          "%s token %d differs between n=1 and n=%d", kern_dtype_name(w.dtype), t, n);
        }
        inferd_free(in);
        inferd_free(big1);
        inferd_free(big3);
        inferd_free(one);
        kern_free(c1, w.data);
    }
    kern_ctx_free(c1);
    kern_ctx_free(c3);
}
END_TEST

/* kern_matmul_accum on the CPU: resid += the product, bitwise kern_matmul
 * followed by the add (F32 activations), and never the forward's choice. */
START_TEST(test_matmul_accum)
{
    kern_ctx *ctx = kt_ctx(2);
    const int n = 6;
    kern_weight w = make_weight(ctx, KERN_DTYPE_BF16, 41, 77, 91);
    const size_t no = (size_t)(n * w.rows);
    float *in = kt_galloc(ctx, (size_t)(n * w.cols)), *res = kt_galloc(ctx, no);
    float *prod = inferd_malloc(no * sizeof(float)), *want = inferd_malloc(no * sizeof(float));
    test_fill_uniform(in, (size_t)(n * w.cols), 31, -1.0f, 1.0f);
    test_fill_uniform(res, no, 32, -2.0f, 2.0f);
    kern_matmul(ctx, prod, in, &w, n);
    for (size_t i = 0; i < no; i++)
        want[i] = res[i] + prod[i];
    kern_matmul_accum(ctx, res, in, &w, n);
    KT_CHECK(memcmp(res, want, no * sizeof(float)) == 0);
    kt_gcheck(res, no, "accum resid");
    KT_CHECK(!kern_matmul_accum_fast(ctx, &w, n));
    inferd_free(prod);
    inferd_free(want);
    kt_gfree(ctx, in);
    kt_gfree(ctx, res);
    kern_free(ctx, w.data);
    kern_ctx_free(ctx);
}
END_TEST

START_TEST(test_gather_rows)
{
    kern_ctx *ctx = kt_ctx(2);
    const int d = 23, n_in = 11;
    const int32_t idx[] = {10, 0, 3, 3, 7};
    const int r = 5;
    float *in = kt_galloc(ctx, (size_t)(n_in * d));
    float *out = kt_galloc(ctx, (size_t)(r * d));
    test_fill_uniform(in, (size_t)(n_in * d), 9, -1.0f, 1.0f);
    kern_gather_rows(ctx, out, in, idx, r, d);
    for (int j = 0; j < r; j++)
        KT_CHECK(memcmp(out + j * d, in + idx[j] * d, (size_t)d * sizeof(float)) == 0);
    kt_gcheck(out, (size_t)(r * d), "gather out");
    kt_gfree(ctx, in);
    kt_gfree(ctx, out);
    kern_ctx_free(ctx);
}
END_TEST

START_TEST(test_silu_mul)
{
    kern_ctx *ctx = kt_ctx(2);
    static const int fs[] = {1, 7, 172, 1001};
    const int n = 6;
    for (size_t k = 0; k < 4; k++) {
        int f = fs[k];
        float *gu = kt_galloc(ctx, (size_t)(n * 2 * f));
        float *out = kt_galloc(ctx, (size_t)(n * f));
        test_fill_uniform(gu, (size_t)(n * 2 * f), 31 + k, -12.0f, 12.0f);
        kern_silu_mul(ctx, out, gu, n, f);
        for (int i = 0; i < n; i++) {
            for (int j = 0; j < f; j++) {
                double g = gu[i * 2 * f + j], u = gu[i * 2 * f + f + j];
                double ref = g / (1.0 + exp(-g)) * u;
                KT_MSG(fabs(out[i * f + j] - ref) <= 1e-6 * (1 + fabs(ref)),
                              "f %d [%d, %d]: %g vs %g", f, i, j, out[i * f + j], ref);
            }
        }
        kt_gcheck(out, (size_t)(n * f), "silu out");
        kt_gfree(ctx, gu);
        kt_gfree(ctx, out);
    }
    kern_ctx_free(ctx);
}
END_TEST

/* kern_rope_kv_write_ex: Qwen2 q/k/v biases and Qwen3 per-head q/k RMSNorm
 * fused before RoPE, against a double reference of the same steps (bias add,
 * x * rsqrt(mean(x^2) + eps) * w per head, rotate_half RoPE with
 * angle = (float)pos * inv_freq[j]); biases and norm weights in every file
 * dtype; the cache gets the roped k and the biased v; padding tokens
 * (slot < 0) write nothing. Odd head counts and head_dim 6 / 34. Odd cases
 * set mscale (YaRN's attention factor: cos and sin times it), even ones
 * leave it 0 (= 1). */
START_TEST(test_rope_kv_write_ex)
{
    kern_ctx *ctx = kt_ctx(2);
    static const struct {
        int nh, nkv, hd, bs;
        bool bias, norm;
    } cs[] = {{14, 2, 64, 16, true, false}, {8, 4, 128, 4, false, true}, {5, 1, 6, 3, true, true},
              {3, 3, 34, 1, true, true}, {7, 7, 16, 2, false, false}};
    const int n = 5;
    const int32_t pos[] = {0, 1, 9, 300, 4095};
    for (size_t ci = 0; ci < sizeof cs / sizeof cs[0]; ci++) {
        const int nh = cs[ci].nh, nkv = cs[ci].nkv, hd = cs[ci].hd, bs = cs[ci].bs, half = hd / 2;
        const kern_dtype dt = all_dtypes[ci % 3];
        const int row = (nh + 2 * nkv) * hd, n_blocks = 8;
        const int64_t slots[] = {0, 5, -1, (int64_t)n_blocks * bs - 1, 2};
        float *qkv = kt_galloc(ctx, (size_t)(n * row));
        float *orig = inferd_malloc((size_t)(n * row) * sizeof(float));
        const size_t cache_n = (size_t)n_blocks * nkv * bs * hd;
        float *kc = kt_galloc(ctx, cache_n), *vc = kt_galloc(ctx, cache_n);
        for (size_t i = 0; i < cache_n; i++)
            kc[i] = vc[i] = -777.0f;
        test_fill_uniform(qkv, (size_t)(n * row), 50 + ci, -2.0f, 2.0f);
        memcpy(orig, qkv, (size_t)(n * row) * sizeof(float));
        kern_weight b = make_weight(ctx, dt, row, 1, 60 + ci);
        kern_weight qn = make_weight(ctx, dt, 1, hd, 70 + ci), kn = make_weight(ctx, dt, 1, hd, 80 + ci);
        float *inv = inferd_malloc((size_t)half * sizeof(float));
        for (int j = 0; j < half; j++)
            inv[j] = 1.0f / powf(1000000.0f, (float)(2 * j) / (float)hd);
        const float ms = ci % 2 ? 1.1386294f : 0.0f; /* 0.1 ln(4) + 1; 0 = unset */
        const double msr = ci % 2 ? (double)ms : 1.0;
        kern_rope_kv_params p = {.qkv = qkv, .positions = pos, .slot_mapping = slots, .inv_freq = inv,
                                 .k_cache = kc, .v_cache = vc, .n_tokens = n, .n_heads = nh,
                                 .n_kv_heads = nkv, .head_dim = hd, .block_size = bs, .mscale = ms};
        const float eps = 1e-6f;
        kern_qkv_epilogue e = {.qkv_bias = cs[ci].bias ? &b : NULL, .q_norm = cs[ci].norm ? &qn : NULL,
                               .k_norm = cs[ci].norm ? &kn : NULL, .norm_eps = eps};
        kern_rope_kv_write_ex(ctx, &p, &e);
        double *x = inferd_malloc((size_t)row * sizeof(double));
        for (int t = 0; t < n; t++) {
            for (int i = 0; i < row; i++)
                x[i] = (double)orig[t * row + i] + (cs[ci].bias ? (double)wget(&b, i) : 0.0);
            for (int h = 0; h < nh + nkv; h++) {
                double *v = x + (size_t)h * hd;
                if (cs[ci].norm) {
                    const kern_weight *w = h < nh ? &qn : &kn;
                    double ss = 0;
                    for (int j = 0; j < hd; j++)
                        ss += v[j] * v[j];
                    double r = 1.0 / sqrt(ss / hd + eps);
                    for (int j = 0; j < hd; j++)
                        v[j] = v[j] * r * wget(w, j);
                }
                for (int j = 0; j < half; j++) {
                    double a = (double)((float)pos[t] * inv[j]), x1 = v[j], x2 = v[j + half];
                    v[j] = x1 * cos(a) * msr - x2 * sin(a) * msr;
                    v[j + half] = x2 * cos(a) * msr + x1 * sin(a) * msr;
                }
            }
            for (int i = 0; i < (nh + nkv) * hd; i++)
                KT_MSG(fabs(qkv[t * row + i] - x[i]) <= 2e-5 * (1 + fabs(x[i])), "case %zu token %d [%d]: %g vs %g",
                       ci, t, i, qkv[t * row + i], x[i]);
            if (slots[t] < 0)
                continue;
            const int64_t blk = slots[t] / bs, off = slots[t] % bs;
            for (int h = 0; h < nkv; h++)
                for (int j = 0; j < hd; j++) {
                    const int64_t at = ((blk * nkv + h) * bs + off) * hd + j;
                    const double kr = x[(size_t)(nh + h) * hd + j], vr = x[(size_t)(nh + nkv + h) * hd + j];
                    KT_MSG(fabs(kc[at] - kr) <= 2e-5 * (1 + fabs(kr)) && fabs(vc[at] - vr) <= 2e-5 * (1 + fabs(vr)),
                           "case %zu token %d kv head %d [%d]: k %g vs %g, v %g vs %g", ci, t, h, j, kc[at], kr,
                           vc[at], vr);
                }
        }
        /* exactly the slots of the non-padding tokens were written */
        int64_t written = 0;
        for (size_t i = 0; i < cache_n; i++)
            written += kc[i] != -777.0f;
        KT_MSG(written <= (int64_t)4 * nkv * hd, "case %zu: %lld k cache values written", ci, (long long)written);
        kt_gcheck(qkv, (size_t)(n * row), "rope_ex qkv");
        kt_gcheck(kc, cache_n, "rope_ex k cache");
        kt_gcheck(vc, cache_n, "rope_ex v cache");
        inferd_free(x);
        inferd_free(inv);
        inferd_free(orig);
        kern_free(ctx, b.data);
        kern_free(ctx, qn.data);
        kern_free(ctx, kn.data);
        kt_gfree(ctx, qkv);
        kt_gfree(ctx, kc);
        kt_gfree(ctx, vc);
    }
    kern_ctx_free(ctx);
}
END_TEST

int main(void)
{
    Suite *s = suite_create("kernels_cpu_ops");
    TCase *tc = tcase_create("core");
    tcase_set_timeout(tc, 300);
    tcase_add_test(tc, test_weight_upload_all_pairs);
    tcase_add_test(tc, test_weight_fill_random);
    tcase_add_test(tc, test_embed);
    tcase_add_test(tc, test_add_rmsnorm);
    tcase_add_test(tc, test_matmul_vs_fp64);
    tcase_add_test(tc, test_matmul_batch_invariance);
    tcase_add_test(tc, test_matmul_accum);
    tcase_add_test(tc, test_gather_rows);
    tcase_add_test(tc, test_silu_mul);
    tcase_add_test(tc, test_rope_kv_write_ex);
    suite_add_tcase(s, tc);
    return test_run_suite(s);
}
