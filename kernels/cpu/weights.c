/* kernels/cpu/weights.c: weight upload (dtype conversion) and random
 * weights for --load-format dummy, for the CPU backend (twin:
 * kernels/cuda/weights.cu), plus the weight-to-fp32 row conversion the
 * other CPU ops read weights through (kcpu_weight_to_f32), and the count of
 * NaN/Inf weight elements that model load runs over the slab
 * (kcpu_weights_count_nonfinite).
 *
 * The CPU backend keeps weights in the file dtype (kern_weight_dtype), so the
 * usual upload is a memcpy; every other combination of F32/F16/BF16 converts
 * through fp32 (bf16 rounding is round-to-nearest-even, see common/half.h).
 * Conversions run in parallel over rows: loading a multi-GB model through a
 * single core would take longer than the rest of start-up.
 *
 * Random weights are filled by window (kern_weight_fill_random_part), so a
 * tensor-parallel shard gets exactly its rows and columns of the whole dummy
 * matrix; the whole-matrix fill is the window that covers everything.
 */
#include <string.h>

#include "common/alloc.h"
#include "common/half.h"
#include "common/rng.h"
#include "kernels/cpu/kcpu.h"

void kcpu_weight_to_f32(const kern_weight *w, int64_t i0, int64_t n, float *dst)
{
    switch (w->dtype) {
    case KERN_DTYPE_F32:
        memcpy(dst, (const float *)w->data + i0, (size_t)n * sizeof(float));
        return;
    case KERN_DTYPE_BF16: {
        /* bf16 -> f32 is a 16-bit shift; done 4 lanes at a time */
        typedef uint32_t u32x4 __attribute__((vector_size(16)));
        const uint16_t *s = (const uint16_t *)w->data + i0;
        int64_t i = 0;
        for (; i + 4 <= n; i += 4) {
            u32x4 v = {s[i], s[i + 1], s[i + 2], s[i + 3]};
            v <<= 16;
            memcpy(dst + i, &v, sizeof v);
        }
        for (; i < n; i++)
            dst[i] = half_bf16_to_f32(s[i]);
        return;
    }
    case KERN_DTYPE_F16: {
        const uint16_t *s = (const uint16_t *)w->data + i0;
        for (int64_t i = 0; i < n; i++)
            dst[i] = half_f16_to_f32(s[i]);
        return;
    }
    case KERN_DTYPE_FP8_E4M3: break; /* a KV cache dtype, never a weight's */
    }
}

/* Read element i of a host array of dtype dt as float. */
static inline float load_as_f32(const void *src, kern_dtype dt, int64_t i)
{
    switch (dt) {
    case KERN_DTYPE_F32: return ((const float *)src)[i];
    case KERN_DTYPE_F16: return half_f16_to_f32(((const uint16_t *)src)[i]);
    case KERN_DTYPE_BF16: return half_bf16_to_f32(((const uint16_t *)src)[i]);
    case KERN_DTYPE_FP8_E4M3: break; /* a KV cache dtype, never a weight's */
    }
    return 0.0f;
}

/* Store v as element i of w (w->dtype). */
static inline void store_f32(kern_weight *w, int64_t i, float v)
{
    switch (w->dtype) {
    case KERN_DTYPE_F32: ((float *)w->data)[i] = v; return;
    case KERN_DTYPE_F16: ((uint16_t *)w->data)[i] = half_f32_to_f16(v); return;
    case KERN_DTYPE_BF16: ((uint16_t *)w->data)[i] = half_f32_to_bf16(v); return;
    case KERN_DTYPE_FP8_E4M3: return; /* a KV cache dtype, never a weight's */
    }
}

/* Contract (kern_weight_upload): rows [row_offset, row_offset + n_rows) of w
 * become src ([n_rows, w->cols], src_dtype) converted to w->dtype. The
 * dispatcher has checked the row range. */
void kcpu_weight_upload(kern_ctx *ctx, kern_weight *w, int64_t row_offset, const void *src,
                        kern_dtype src_dtype, int64_t n_rows)
{
    const int64_t cols = w->cols;
    const int64_t n = n_rows * cols;
    if (n == 0)
        return;
    if (src_dtype == w->dtype) {
        size_t es = kern_dtype_size(w->dtype);
        memcpy((char *)w->data + (size_t)(row_offset * cols) * es, src, (size_t)n * es);
        return;
    }
    const int64_t base = row_offset * cols;
    int nt = kcpu_threads(ctx, n);
#pragma omp parallel for num_threads(nt) schedule(static)
    for (int64_t r = 0; r < n_rows; r++)
        for (int64_t c = 0; c < cols; c++)
            store_f32(w, base + r * cols + c, load_as_f32(src, src_dtype, r * cols + c));
}

/* Contract (kern_weight_scale_cols): w[r, c] = w[r, c] * g[c] in fp32,
 * stored in w's dtype (nearest even). */
void kcpu_weight_scale_cols(kern_ctx *ctx, kern_weight *w, const kern_weight *g)
{
    const int64_t rows = w->rows, cols = w->cols;
    float *gf = inferd_malloc(sizeof(float) * (size_t)cols); /* [cols] */
    kcpu_weight_to_f32(g, 0, cols, gf);
    int nt = kcpu_threads(ctx, rows * cols);
#pragma omp parallel for num_threads(nt) schedule(static)
    for (int64_t r = 0; r < rows; r++)
        for (int64_t c = 0; c < cols; c++)
            store_f32(w, r * cols + c, kcpu_weight_get(w, r * cols + c) * gf[c]);
    inferd_free(gf);
}

/* The dummy value of logical flat index e: (float)((2 * rng_uniform(seed, e)
 * - 1) * scale) in double, rounded to fp32 (then to the weight's dtype). */
static inline float random_value(uint64_t seed, int64_t e, float scale)
{
    return (float)((2.0 * rng_uniform(seed, (uint64_t)e) - 1.0) * (double)scale);
}

/* Contract (kern_weight_fill_random_part): element (row + i, j) of w becomes
 * random_value of the logical flat index (src_row + i) * src_cols + src_col
 * + j, rounded to w->dtype. kern_weight_fill_random is the whole-matrix
 * window, so it gives every element e its random_value(e); the CUDA twin
 * uses the same formula, so dummy weights agree across backends up to the
 * dtype rounding. The dispatcher has checked the window. */
void kcpu_weight_fill_random_part(kern_ctx *ctx, kern_weight *w, int64_t row, int64_t n_rows, uint64_t seed,
                                  float scale, int64_t src_row, int64_t src_col, int64_t src_cols)
{
    const int64_t cols = w->cols, n = n_rows * cols;
    const int64_t dst0 = row * cols, src0 = src_row * src_cols + src_col;
    int nt = kcpu_threads(ctx, n);
    if (cols == src_cols) { /* whole rows: one contiguous run (src_col is 0) */
#pragma omp parallel for num_threads(nt) schedule(static)
        for (int64_t e = 0; e < n; e++)
            store_f32(w, dst0 + e, random_value(seed, src0 + e, scale));
        return;
    }
#pragma omp parallel for num_threads(nt) schedule(static)
    for (int64_t i = 0; i < n_rows; i++)
        for (int64_t j = 0; j < cols; j++)
            store_f32(w, dst0 + i * cols + j, random_value(seed, src0 + i * src_cols + j, scale));
}

/* Non-finite test on the bits: the exponent field all ones (Inf or NaN). */
static inline bool f32_bits_nonfinite(uint32_t u)
{
    return (u & 0x7F800000u) == 0x7F800000u;
}
static inline bool h16_bits_nonfinite(uint16_t h, uint16_t exp_mask)
{
    return (h & exp_mask) == exp_mask;
}

/* Non-finite elements of x[0, n) of dtype dt. */
static int64_t count_nonfinite_one(kern_ctx *ctx, const void *x, kern_dtype dt, int64_t n)
{
    int64_t c = 0;
    int nt = kcpu_threads(ctx, n);
    if (dt == KERN_DTYPE_F32) {
        const uint32_t *u = x;
#pragma omp parallel for num_threads(nt) schedule(static) reduction(+ : c)
        for (int64_t i = 0; i < n; i++)
            c += f32_bits_nonfinite(u[i]);
    } else {
        const uint16_t *h = x;
        const uint16_t m = dt == KERN_DTYPE_F16 ? 0x7C00u : 0x7F80u; /* f16: 5 exponent bits; bf16: 8 */
#pragma omp parallel for num_threads(nt) schedule(static) reduction(+ : c)
        for (int64_t i = 0; i < n; i++)
            c += h16_bits_nonfinite(h[i], m);
    }
    return c;
}

/* Contract (kern_weights_count_nonfinite): counts[i] = NaN/Inf elements of
 * ws[i] (its dtype, rows * cols values); host memory, so no counters to
 * allocate and never NOMEM. The CUDA twin decides on the same bits. */
inferd_status kcpu_weights_count_nonfinite(kern_ctx *ctx, const kern_weight *ws, int n, int64_t *counts)
{
    for (int i = 0; i < n; i++)
        counts[i] = count_nonfinite_one(ctx, ws[i].data, ws[i].dtype, ws[i].rows * ws[i].cols);
    return INFERD_OK;
}
