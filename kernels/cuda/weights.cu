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
 * flat element index.
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

static __global__ void fill_random_kernel(uint16_t *__restrict__ dst, int64_t n, uint64_t seed, float scale)
{
    int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
    const int64_t stride = (int64_t)gridDim.x * blockDim.x;
    for (; i < n; i += stride) {
        double u = rng_uniform(seed, (uint64_t)i);
        dst[i] = kc_f2bf((float)((2.0 * u - 1.0) * (double)scale));
    }
}

static void launch_fill_random(const kcuda_state *st, uint16_t *dst, int64_t n, uint64_t seed, float scale)
{
    unsigned grid = kcuda_cdiv(n, 256);
    if (grid > (unsigned)st->n_sms * 32u)
        grid = (unsigned)st->n_sms * 32u;
    fill_random_kernel<<<grid, 256, 0, st->stream>>>(dst, n, seed, scale);
}

/* Contract (kern_weight_fill_random): element e of w (flat row-major) becomes
 * bf16((float)((2 * rng_uniform(seed, e) - 1) * scale)), as the CPU twin. */
void kcuda_weight_fill_random(kern_ctx *ctx, kern_weight *w, uint64_t seed, float scale)
{
    kcuda_state *st = kcuda_st(ctx);
    INFERD_CHECK_MSG(w->dtype == KERN_DTYPE_BF16, "CUDA weights are BF16");
    const int64_t n = w->rows * w->cols;
    if (n == 0)
        return;
    launch_fill_random(st, (uint16_t *)w->data, n, seed, scale);
    KCUDA_LAUNCH_CHECK();
}
