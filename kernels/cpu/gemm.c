/* kernels/cpu/gemm.c: matmul and logits of the CPU backend (twin:
 * kernels/cuda/gemm.cu), against F32, F16 or BF16 weights; activations F32.
 *
 * Matmul: out[n, rows] = in[n, cols] @ W^T, fp32 accumulation, OpenMP over
 * blocks of 16 output rows. Each weight row is reused for groups of 4 tokens
 * (one pass over the row feeds 4 dot products) and each group of 4 input
 * rows is reused by the 16 weight rows of a block (which stay in L2), so
 * large batches do not stream the whole input once per weight row. BF16/F16
 * rows are converted to fp32 in 256-element chunks on the stack: no
 * allocation. Every dot product uses the same 8-lane summation order (see
 * kcpu_dot) whatever the token group, the batch size or the thread count:
 * results are bitwise invariant to batch composition, which the engine's
 * invariance tests rely on. Trade-off: no blocking over the reduction
 * dimension and no AVX (baseline x86-64 SSE); this is the reference backend,
 * not a BLAS.
 */
#include <string.h>

#include "common/alloc.h"
#include "kernels/cpu/kcpu.h"

#define MM_CHUNK 256    /* converted weight elements per step; multiple of 8 */
#define MM_ROW_BLOCK 16 /* weight rows that share one pass over 4 input tokens */

/* Pointer to weight row r, elements [c0, c0 + len) as fp32: the row itself
 * for F32 weights, else converted into buf[MM_CHUNK]. */
static inline const float *mm_chunk(const kern_weight *w, int64_t r, int64_t c0, int64_t len,
                                    float *buf)
{
    if (w->dtype == KERN_DTYPE_F32)
        return (const float *)w->data + r * w->cols + c0;
    kcpu_weight_to_f32(w, r * w->cols + c0, len, buf);
    return buf;
}

/* out[t * ldo] = W[r, :] . x[t * cols, :] for the 4 tokens t = 0..3, in the
 * lane order of kcpu_dot. Chunks start at multiples of 8, so the lanes run on
 * across chunks and only the last chunk has a tail. */
static void mm_row_x4(const kern_weight *w, int64_t r, const float *x, float *out, int64_t ldo)
{
    const int64_t cols = w->cols;
    const int64_t step = w->dtype == KERN_DTYPE_F32 ? cols : MM_CHUNK;
    kcpu_v4 l0 = {0}, h0 = {0}, l1 = {0}, h1 = {0}, l2 = {0}, h2 = {0}, l3 = {0}, h3 = {0};
    float buf[MM_CHUNK];
    const float *wp = NULL; /* last chunk of the weight row */
    int64_t c0 = 0, j = 0, len = 0;
    for (c0 = 0; c0 < cols; c0 += step) {
        len = cols - c0 < step ? cols - c0 : step;
        wp = mm_chunk(w, r, c0, len, buf);
        const float *y = x + c0;
        for (j = 0; j + 8 <= len; j += 8) {
            kcpu_v4 wl = kcpu_load4(wp + j), wh = kcpu_load4(wp + j + 4);
            l0 += wl * kcpu_load4(y + j);
            h0 += wh * kcpu_load4(y + j + 4);
            l1 += wl * kcpu_load4(y + cols + j);
            h1 += wh * kcpu_load4(y + cols + j + 4);
            l2 += wl * kcpu_load4(y + 2 * cols + j);
            h2 += wh * kcpu_load4(y + 2 * cols + j + 4);
            l3 += wl * kcpu_load4(y + 3 * cols + j);
            h3 += wh * kcpu_load4(y + 3 * cols + j + 4);
        }
    }
    c0 = cols - len; /* start of the last chunk */
    out[0] = kcpu_lanes_finish(l0, h0, wp, x + c0, j, len);
    out[ldo] = kcpu_lanes_finish(l1, h1, wp, x + cols + c0, j, len);
    out[2 * ldo] = kcpu_lanes_finish(l2, h2, wp, x + 2 * cols + c0, j, len);
    out[3 * ldo] = kcpu_lanes_finish(l3, h3, wp, x + 3 * cols + c0, j, len);
}

/* W[r, :] . x[:] for one token, same lane order as mm_row_x4 / kcpu_dot. */
static float mm_row_x1(const kern_weight *w, int64_t r, const float *x)
{
    const int64_t cols = w->cols;
    if (w->dtype == KERN_DTYPE_F32)
        return kcpu_dot((const float *)w->data + r * cols, x, cols);
    kcpu_v4 lo = {0}, hi = {0};
    float buf[MM_CHUNK];
    const float *wp = NULL;
    int64_t c0 = 0, j = 0, len = 0;
    for (c0 = 0; c0 < cols; c0 += MM_CHUNK) {
        len = cols - c0 < MM_CHUNK ? cols - c0 : MM_CHUNK;
        wp = mm_chunk(w, r, c0, len, buf);
        const float *y = x + c0;
        for (j = 0; j + 8 <= len; j += 8) {
            lo += kcpu_load4(wp + j) * kcpu_load4(y + j);
            hi += kcpu_load4(wp + j + 4) * kcpu_load4(y + j + 4);
        }
    }
    return kcpu_lanes_finish(lo, hi, wp, x + (cols - len), j, len);
}

static void mm_f32(kern_ctx *ctx, float *out, const float *in, const kern_weight *w, int n)
{
    const int64_t rows = w->rows, cols = w->cols; /* out: [n, rows]; in: [n, cols] */
    const int64_t n_blocks = (rows + MM_ROW_BLOCK - 1) / MM_ROW_BLOCK;
    int nt = kcpu_threads(ctx, (int64_t)n * rows * cols);
#pragma omp parallel for num_threads(nt) schedule(static)
    for (int64_t b = 0; b < n_blocks; b++) {
        const int64_t r0 = b * MM_ROW_BLOCK;
        const int64_t r1 = r0 + MM_ROW_BLOCK < rows ? r0 + MM_ROW_BLOCK : rows;
        int t = 0;
        for (; t + 4 <= n; t += 4)
            for (int64_t r = r0; r < r1; r++)
                mm_row_x4(w, r, in + (int64_t)t * cols, out + (int64_t)t * rows + r, rows);
        for (; t < n; t++)
            for (int64_t r = r0; r < r1; r++)
                out[(int64_t)t * rows + r] = mm_row_x1(w, r, in + (int64_t)t * cols);
    }
}

/* Contract (kern_matmul): out[n, w->rows] = in[n, w->cols] @ W^T, F32
 * activations, fp32 accumulation. out must not overlap in. */
void kcpu_matmul(kern_ctx *ctx, void *out, const void *in, const kern_weight *w, int n)
{
    mm_f32(ctx, out, in, w, n);
}

/* Contract (kern_logits): as kcpu_matmul; on the CPU the activation dtype is
 * already F32, so the two are the same computation. */
void kcpu_logits(kern_ctx *ctx, float *logits, const void *in, const kern_weight *w, int n)
{
    mm_f32(ctx, logits, in, w, n);
}

/* Contract (kern_matmul_accum): the product, then resid += it (F32: the
 * bits of kern_matmul followed by kern_add_rmsnorm's add). Scratch from
 * the heap: the CPU forward keeps the two ops (kcpu_matmul_accum_fast). */
void kcpu_matmul_accum(kern_ctx *ctx, void *resid, const void *in, const kern_weight *w, int n)
{
    const size_t count = (size_t)n * (size_t)w->rows;
    float *prod = inferd_malloc(sizeof(float) * count), *r = resid; /* [n, rows] each */
    mm_f32(ctx, prod, in, w, n);
    for (size_t i = 0; i < count; i++)
        r[i] += prod[i];
    inferd_free(prod);
}

/* Contract (kern_matmul_accum_fast): never (see kcpu_matmul_accum). */
bool kcpu_matmul_accum_fast(const kern_ctx *ctx, const kern_weight *w, int n)
{
    (void)ctx;
    (void)w;
    (void)n;
    return false;
}

/* Contract (kern_matmul_fusable): fusion is a CUDA launch saving; the CPU
 * forward keeps the unfused ops. */
bool kcpu_matmul_fusable(const kern_ctx *ctx, const kern_weight *w, int n)
{
    (void)ctx;
    (void)w;
    (void)n;
    return false;
}

/* Contract (kern_matmul_epi_fusable): as kcpu_matmul_fusable. */
bool kcpu_matmul_epi_fusable(const kern_ctx *ctx, const kern_weight *w, int n)
{
    return kcpu_matmul_fusable(ctx, w, n);
}

/* Contract (kern_matmul_fused): the composition of the unfused ops the fused
 * product stands for (kernels.h), in fp32: the CPU twin of the fused CUDA
 * GEMV (kernels/cuda/gemv.cu). Scratch comes from the heap: only tests call
 * it on the CPU. */
void kcpu_matmul_fused(kern_ctx *ctx, void *out, const void *in, const kern_weight *w, int n, const kern_fuse *f)
{
    const int64_t rows = w->rows, cols = w->cols;
    float *normed = NULL; /* [n, cols] */
    const void *x = in;
    if (f->norm) {
        normed = inferd_malloc(sizeof(float) * (size_t)(n * cols));
        /* with add NULL the residual argument is only read */
        kcpu_add_rmsnorm(ctx, normed, (void *)in, NULL, f->norm, n, f->eps);
        x = normed;
    }
    float *prod = f->epi == KERN_EPI_STORE ? out : inferd_malloc(sizeof(float) * (size_t)(n * rows)); /* [n, rows] */
    kcpu_matmul(ctx, prod, x, w, n);
    if (f->epi == KERN_EPI_RESID) {
        float *r = f->resid; /* [n, rows] */
        for (int64_t i = 0; i < n * rows; i++)
            r[i] += prod[i];
    } else if (f->epi == KERN_EPI_SILU_MUL && f->rms) {
        kcpu_silu_mul_rms(ctx, out, prod, n, (int)(rows / 2), in, (int)cols, f->eps);
    } else if (f->epi == KERN_EPI_SILU_MUL) {
        kcpu_silu_mul(ctx, out, prod, n, (int)(rows / 2));
    } else if (f->epi == KERN_EPI_ROPE_KV) {
        kern_rope_kv_params rp = *f->rope;
        rp.qkv = prod;
        rp.n_tokens = n;
        const kern_qkv_epilogue e = {
            .qkv_bias = f->qkv_bias, .rms_x = f->rms ? in : NULL, .rms_cols = (int)cols, .norm_eps = f->eps};
        kcpu_rope_kv_write(ctx, &rp, &e); /* members left NULL do nothing */
        memcpy(out, prod, sizeof(float) * (size_t)(n * rows));
    }
    if (prod != out)
        inferd_free(prod);
    inferd_free(normed);
}
