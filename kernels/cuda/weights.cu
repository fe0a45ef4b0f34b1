/* kernels/cuda/weights.cu: weight upload and random weights
 * (--load-format dummy) for the CUDA backend (twin: kernels/cpu/weights.c).
 * Every CUDA weight is bf16 (kern_weight_dtype).
 *
 * Weight upload converts on the device: F32/F16 host rows are copied raw into
 * the GEMM workspace in chunks (cudaMemcpyAsync from pageable memory returns
 * once the source has been staged, so the caller may free src on return) and
 * converted to bf16 by a kernel in stream order; BF16 rows are copied
 * directly. Random weights are generated on the device with the same formula
 * as the CPU backend: (float)((2 * rng_uniform(seed, e) - 1) * scale), e the
 * flat element index of the logical matrix (a window of it for a
 * tensor-parallel shard, kern_weight_fill_random_part).
 *
 * The norm fold (kern_weight_scale_cols) multiplies a weight's columns by
 * a norm weight in place, one grid-stride pass at load.
 *
 * The non-finite count (model load's check of the weight slab) reads each
 * weight once: 16-byte loads over the aligned body, scalar loads for the
 * unaligned head and the tail, a test on the exponent bits, a warp sum, and
 * one 32-bit atomic per warp into the counter of its chunk. Weights are cut
 * into chunks of at most 2^31 elements, each with its own counter, so no
 * counter can wrap; the host adds the chunks of a weight up after one copy
 * back. Load-time only: it allocates its counters and synchronizes.
 */
#include "kernels/cuda/common.cuh"

/* dst[i] = bf16(src[i]) for i < n; src F32 (is_f16 = 0) or F16 bits. */
static __global__ void convert_to_bf16_kernel(uint16_t *__restrict__ dst, const void *__restrict__ src,
                                              int64_t n, int is_f16)
{
    int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
    const int64_t stride = (int64_t)gridDim.x * blockDim.x;
    for (; i < n; i += stride) {
        float f = is_f16 ? __half2float(__ushort_as_half(((const uint16_t *)src)[i]))
                         : ((const float *)src)[i];
        dst[i] = kc_f2bf(f);
    }
}

static void launch_convert_to_bf16(cudaStream_t s, uint16_t *dst, const void *src, int64_t n, int is_f16)
{
    unsigned grid = kcuda_cdiv(n, 256);
    if (grid > 65536u)
        grid = 65536u;
    convert_to_bf16_kernel<<<grid, 256, 0, s>>>(dst, src, n, is_f16);
}

/* Contract (kern_weight_upload): rows [row_offset, row_offset + n_rows) of the
 * bf16 weight w become the host rows src ([n_rows, w->cols] of src_dtype),
 * rounded to nearest even. src may be freed on return. */
void kcuda_weight_upload(kern_ctx *ctx, kern_weight *w, int64_t row_offset, const void *src,
                         kern_dtype src_dtype, int64_t n_rows)
{
    kcuda_state *st = kcuda_st(ctx);
    INFERD_CHECK_MSG(w->dtype == KERN_DTYPE_BF16, "CUDA weights are BF16");
    const int64_t n = n_rows * w->cols;
    if (n == 0)
        return;
    uint16_t *dst = (uint16_t *)w->data + row_offset * w->cols; /* [n_rows, cols] */
    if (src_dtype == KERN_DTYPE_BF16) {
        CUDA_CHECK(cudaMemcpyAsync(dst, src, (size_t)n * 2, cudaMemcpyHostToDevice, st->stream));
        return;
    }
    const size_t es = kern_dtype_size(src_dtype);
    const int64_t chunk = (int64_t)(st->gemm_ws_bytes / es);
    for (int64_t i0 = 0; i0 < n; i0 += chunk) {
        int64_t len = n - i0 < chunk ? n - i0 : chunk;
        /* NOTE: the workspace is reused by the next chunk; stream order makes
         * the copy wait for the previous conversion. */
        CUDA_CHECK(cudaMemcpyAsync(st->gemm_ws, (const char *)src + (size_t)i0 * es, (size_t)len * es,
                                   cudaMemcpyHostToDevice, st->stream));
        launch_convert_to_bf16(st->stream, dst + i0, st->gemm_ws, len, src_dtype == KERN_DTYPE_F16);
        KCUDA_LAUNCH_CHECK();
    }
}

/* A window of the logical random matrix: window element e (row-major over
 * [n_rows, cols]) is dst[e] and takes the logical flat index src0 + (e /
 * cols) * src_cols + e % cols. contiguous: cols == src_cols, so that index
 * is src0 + e (no division). */
typedef struct {
    uint16_t *dst; /* [n_rows, cols], the window's first row */
    int64_t n, cols, src0, src_cols;
    uint64_t seed;
    float scale;
} fill_params;

static __global__ void fill_random_kernel(fill_params p, bool contiguous)
{
    int64_t e = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
    const int64_t stride = (int64_t)gridDim.x * blockDim.x;
    for (; e < p.n; e += stride) {
        const int64_t src = contiguous ? p.src0 + e : p.src0 + e / p.cols * p.src_cols + e % p.cols;
        const double u = rng_uniform(p.seed, (uint64_t)src);
        p.dst[e] = kc_f2bf((float)((2.0 * u - 1.0) * (double)p.scale));
    }
}

static void launch_fill_random(const kcuda_state *st, const fill_params *p)
{
    unsigned grid = kcuda_cdiv(p->n, 256);
    if (grid > (unsigned)st->n_sms * 32u)
        grid = (unsigned)st->n_sms * 32u;
    fill_random_kernel<<<grid, 256, 0, st->stream>>>(*p, p->cols == p->src_cols);
}

/* Contract (kern_weight_fill_random_part): element (row + i, j) of w becomes
 * bf16((float)((2 * rng_uniform(seed, e) - 1) * scale)) with e = (src_row +
 * i) * src_cols + src_col + j, as the CPU twin; kern_weight_fill_random is
 * the whole-matrix window. The dispatcher has checked the window. */
void kcuda_weight_fill_random_part(kern_ctx *ctx, kern_weight *w, int64_t row, int64_t n_rows, uint64_t seed,
                                   float scale, int64_t src_row, int64_t src_col, int64_t src_cols)
{
    kcuda_state *st = kcuda_st(ctx);
    INFERD_CHECK_MSG(w->dtype == KERN_DTYPE_BF16, "CUDA weights are BF16");
    const fill_params p = {(uint16_t *)w->data + row * w->cols, n_rows * w->cols, w->cols,
                           src_row * src_cols + src_col, src_cols, seed, scale};
    if (p.n == 0)
        return;
    launch_fill_random(st, &p);
    KCUDA_LAUNCH_CHECK();
}

/* --- norm fold ------------------------------------------------------------ */

/* w[r, c] = bf16(w[r, c] * g[c]) over n = rows * cols elements (g bf16). */
static __global__ void scale_cols_kernel(uint16_t *__restrict__ w, const uint16_t *__restrict__ g, int64_t n,
                                         int64_t cols)
{
    for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += (int64_t)gridDim.x * blockDim.x)
        w[i] = kc_f2bf(kc_bf2f(w[i]) * kc_bf2f(g[i % cols]));
}

/* Contract (kern_weight_scale_cols): w[r, c] = bf16(w[r, c] * g[c]) (both
 * bf16, as every CUDA weight). Load time only. */
void kcuda_weight_scale_cols(kern_ctx *ctx, kern_weight *w, const kern_weight *g)
{
    kcuda_state *st = kcuda_st(ctx);
    INFERD_CHECK(w->dtype == KERN_DTYPE_BF16 && g->dtype == KERN_DTYPE_BF16);
    const int64_t n = w->rows * w->cols;
    unsigned grid = kcuda_cdiv(n, 256);
    if (grid > (unsigned)st->n_sms * 16u)
        grid = (unsigned)st->n_sms * 16u;
    scale_cols_kernel<<<grid, 256, 0, st->stream>>>((uint16_t *)w->data, (const uint16_t *)g->data, n, w->cols);
    KCUDA_LAUNCH_CHECK();
}

/* --- non-finite count ----------------------------------------------------- */

#define NONFINITE_CHUNK ((int64_t)1 << 31) /* elements per counter: < 2^32, cannot wrap */

/* NaN/Inf elements in one 32-bit word: one f32 (exp_mask16 == 0) or two
 * f16/bf16 halves (exp_mask16 = 0x7C00 / 0x7F80). */
__device__ __forceinline__ unsigned nonfinite_in_word(uint32_t w, uint32_t exp_mask16)
{
    if (exp_mask16 == 0)
        return (w & 0x7F800000u) == 0x7F800000u;
    return ((w & exp_mask16) == exp_mask16) + (((w >> 16) & exp_mask16) == exp_mask16);
}

/* *counter += NaN/Inf elements of x[0, n); es = element size (2 or 4).
 * head: elements before the first 16-byte boundary (scalar, block 0), then
 * n_vec uint4 vectors (grid-stride), then the tail (scalar, block 0). */
static __global__ void count_nonfinite_kernel(const uint8_t *__restrict__ x, int64_t n, int es, uint32_t exp_mask16,
                                              int64_t head, int64_t n_vec, unsigned *__restrict__ counter)
{
    unsigned c = 0;
    const int64_t per_vec = 16 / es;
    const uint4 *v = (const uint4 *)(x + head * es); /* [n_vec] */
    const int64_t stride = (int64_t)gridDim.x * blockDim.x;
    for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < n_vec; i += stride) {
        const uint4 q = __ldg(&v[i]);
        c += nonfinite_in_word(q.x, exp_mask16) + nonfinite_in_word(q.y, exp_mask16) +
             nonfinite_in_word(q.z, exp_mask16) + nonfinite_in_word(q.w, exp_mask16);
    }
    if (blockIdx.x == 0) {
        const int64_t tail0 = head + n_vec * per_vec;
        for (int64_t i = threadIdx.x; i < head + (n - tail0); i += blockDim.x) {
            const int64_t e = i < head ? i : tail0 + (i - head); /* element index */
            const uint32_t w = es == 4 ? ((const uint32_t *)x)[e] : (uint32_t)((const uint16_t *)x)[e];
            c += nonfinite_in_word(w, exp_mask16);
        }
    }
#pragma unroll
    for (int o = 16; o > 0; o >>= 1)
        c += __shfl_xor_sync(0xFFFFFFFFu, c, o);
    if ((threadIdx.x & 31) == 0 && c != 0)
        atomicAdd(counter, c);
}

/* Count x[0, n) (n <= NONFINITE_CHUNK) of dtype dt into *counter. */
static void launch_count_nonfinite(const kcuda_state *st, const void *x, kern_dtype dt, int64_t n, unsigned *counter)
{
    const int es = (int)kern_dtype_size(dt);
    const uint32_t mask = dt == KERN_DTYPE_F32 ? 0u : dt == KERN_DTYPE_F16 ? 0x7C00u : 0x7F80u;
    const int64_t per_vec = 16 / es;
    int64_t head = (int64_t)(((16 - ((uintptr_t)x & 15)) & 15) / (uintptr_t)es);
    if (head > n)
        head = n;
    const int64_t n_vec = (n - head) / per_vec;
    unsigned grid = kcuda_cdiv(n_vec > 0 ? n_vec : 1, 256);
    if (grid > (unsigned)st->n_sms * 8u)
        grid = (unsigned)st->n_sms * 8u;
    count_nonfinite_kernel<<<grid, 256, 0, st->stream>>>((const uint8_t *)x, n, es, mask, head, n_vec, counter);
}

/* Contract (kern_weights_count_nonfinite): counts[i] = NaN/Inf elements of
 * ws[i] (any dtype: the check runs on CUDA weights, bf16, and on whatever a
 * test hands it); one counter per chunk of NONFINITE_CHUNK elements, one
 * copy back, one synchronization. NOMEM when the counters do not fit. */
inferd_status kcuda_weights_count_nonfinite(kern_ctx *ctx, const kern_weight *ws, int n, int64_t *counts)
{
    kcuda_state *st = kcuda_st(ctx);
    int64_t n_slots = 0;
    for (int i = 0; i < n; i++)
        n_slots += (ws[i].rows * ws[i].cols + NONFINITE_CHUNK - 1) / NONFINITE_CHUNK;
    if (n_slots == 0) {
        for (int i = 0; i < n; i++)
            counts[i] = 0;
        return INFERD_OK;
    }
    unsigned *d = (unsigned *)kcuda_alloc(ctx, (size_t)n_slots * sizeof(unsigned)); /* [n_slots] */
    if (!d)
        return inferd_set_error(INFERD_ERR_NOMEM, "cannot allocate %lld non-finite counters on the device",
                                (long long)n_slots);
    CUDA_CHECK(cudaMemsetAsync(d, 0, (size_t)n_slots * sizeof(unsigned), st->stream));
    int64_t slot = 0;
    for (int i = 0; i < n; i++) {
        const int64_t total = ws[i].rows * ws[i].cols;
        const size_t es = kern_dtype_size(ws[i].dtype);
        for (int64_t e0 = 0; e0 < total; e0 += NONFINITE_CHUNK, slot++) {
            const int64_t len = total - e0 < NONFINITE_CHUNK ? total - e0 : NONFINITE_CHUNK;
            launch_count_nonfinite(st, (const uint8_t *)ws[i].data + (size_t)e0 * es, ws[i].dtype, len, d + slot);
            KCUDA_LAUNCH_CHECK();
        }
    }
    unsigned *h = (unsigned *)inferd_malloc((size_t)n_slots * sizeof(unsigned));
    kcuda_memcpy_d2h(ctx, h, d, (size_t)n_slots * sizeof(unsigned)); /* synchronous */
    slot = 0;
    for (int i = 0; i < n; i++) {
        const int64_t total = ws[i].rows * ws[i].cols;
        counts[i] = 0;
        for (int64_t e0 = 0; e0 < total; e0 += NONFINITE_CHUNK, slot++)
            counts[i] += h[slot];
    }
    inferd_free(h);
    kcuda_free(ctx, d);
    return INFERD_OK;
}
