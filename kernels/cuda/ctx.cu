/* kernels/cuda/ctx.cu: lifecycle, memory and weights of the CUDA backend.
 *
 * A ctx owns one non-blocking stream, a cuBLASLt handle (plus a cuBLAS handle
 * for the rare GEMM shape cuBLASLt has no algorithm for) and one 32 MiB GEMM
 * workspace, all created here so the forward pass never allocates. Failures
 * while creating a ctx are recoverable (status); any CUDA error after that is
 * a device fault and aborts through CUDA_CHECK.
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

extern "C" void kcuda_fatal(const char *stmt, const char *err, const char *func, const char *file,
                            int line)
{
    int dev = -1;
    char detail[512];
    if (cudaGetDevice(&dev) != cudaSuccess)
        dev = -1;
    snprintf(detail, sizeof detail, "%s (device %d)", err ? err : "?", dev);
    inferd_fatal(stmt, detail, func, file, line);
}

/* Contract (kern_cuda_available): a CUDA device is visible to this process. */
bool kcuda_available(void)
{
    int n = 0;
    cudaError_t e = cudaGetDeviceCount(&n);
    if (e != cudaSuccess) {
        (void)cudaGetLastError();
        return false;
    }
    return n > 0;
}

static void ctx_state_destroy(kcuda_state *st)
{
    if (!st)
        return;
    kcuda_gemm_release(st);
    if (st->blas)
        cublasDestroy(st->blas);
    if (st->lt)
        cublasLtDestroy(st->lt);
    if (st->gemm_ws)
        cudaFree(st->gemm_ws);
    if (st->stream)
        cudaStreamDestroy(st->stream);
    inferd_free(st);
}

/* Contract: create the backend state of ctx on device_id: stream, cuBLASLt +
 * cuBLAS handles bound to the stream, GEMM workspace. Returns
 * INFERD_ERR_UNAVAILABLE when no device is present, INFERD_ERR_INVALID_ARG for
 * a bad ordinal, INFERD_ERR_NOMEM / INFERD_ERR_DEVICE on failures; ctx->cuda
 * is left NULL on failure. */
inferd_status kcuda_ctx_init(kern_ctx *ctx, int device_id)
{
    int n = 0;
    cudaError_t e = cudaGetDeviceCount(&n);
    if (e != cudaSuccess || n <= 0) {
        (void)cudaGetLastError();
        return inferd_set_error(INFERD_ERR_UNAVAILABLE, "no CUDA device: %s",
                                e != cudaSuccess ? cudaGetErrorString(e) : "device count is 0");
    }
    if (device_id < 0 || device_id >= n)
        return inferd_set_error(INFERD_ERR_INVALID_ARG, "CUDA device %d out of range (%d devices)",
                                device_id, n);
    kcuda_state *st = (kcuda_state *)inferd_calloc(1, sizeof *st);
    st->device = device_id;
    inferd_status rc = INFERD_OK;
    cudaDeviceProp prop;
    if ((e = cudaSetDevice(device_id)) != cudaSuccess ||
        (e = cudaGetDeviceProperties(&prop, device_id)) != cudaSuccess ||
        (e = cudaStreamCreateWithFlags(&st->stream, cudaStreamNonBlocking)) != cudaSuccess) {
        rc = inferd_set_error(INFERD_ERR_DEVICE, "CUDA device %d: %s", device_id, cudaGetErrorString(e));
        goto fail;
    }
    st->n_sms = prop.multiProcessorCount;
    st->smem_optin = prop.sharedMemPerBlockOptin;
    snprintf(st->name, sizeof st->name, "%s", prop.name);
    if (cudaMalloc(&st->gemm_ws, KCUDA_GEMM_WS_BYTES) != cudaSuccess) {
        st->gemm_ws = NULL;
        rc = inferd_set_error(INFERD_ERR_NOMEM, "CUDA device %d: cannot allocate the %zu-byte GEMM workspace",
                              device_id, KCUDA_GEMM_WS_BYTES);
        goto fail;
    }
    st->gemm_ws_bytes = KCUDA_GEMM_WS_BYTES;
    if (cublasLtCreate(&st->lt) != CUBLAS_STATUS_SUCCESS) {
        st->lt = NULL;
        rc = inferd_set_error(INFERD_ERR_DEVICE, "cublasLtCreate failed on device %d", device_id);
        goto fail;
    }
    if (cublasCreate(&st->blas) != CUBLAS_STATUS_SUCCESS) {
        st->blas = NULL;
        rc = inferd_set_error(INFERD_ERR_DEVICE, "cublasCreate failed on device %d", device_id);
        goto fail;
    }
    if (cublasSetStream(st->blas, st->stream) != CUBLAS_STATUS_SUCCESS ||
        cublasSetWorkspace(st->blas, st->gemm_ws, st->gemm_ws_bytes) != CUBLAS_STATUS_SUCCESS ||
        cublasSetMathMode(st->blas, CUBLAS_DEFAULT_MATH) != CUBLAS_STATUS_SUCCESS) {
        rc = inferd_set_error(INFERD_ERR_DEVICE, "cuBLAS setup failed on device %d", device_id);
        goto fail;
    }
    ctx->cuda = st;
    INFERD_LOG_INFO("cuda: device %d %s, %d SMs, sm_%d%d, %.1f GiB", device_id, st->name, st->n_sms,
             prop.major, prop.minor, (double)prop.totalGlobalMem / (double)(1u << 30));
    return INFERD_OK;
fail:
    (void)cudaGetLastError();
    ctx_state_destroy(st);
    return rc;
}

/* Contract: wait for the stream and release everything kcuda_ctx_init made. */
void kcuda_ctx_free(kern_ctx *ctx)
{
    kcuda_state *st = (kcuda_state *)ctx->cuda;
    if (!st)
        return;
    CUDA_CHECK(cudaSetDevice(st->device));
    CUDA_CHECK(cudaStreamSynchronize(st->stream));
    ctx_state_destroy(st);
    ctx->cuda = NULL;
}

/* Contract (kern_mem_info): free and total bytes of the ctx's device. */
inferd_status kcuda_mem_info(kern_ctx *ctx, size_t *free_b, size_t *total_b)
{
    kcuda_st(ctx);
    cudaError_t e = cudaMemGetInfo(free_b, total_b);
    if (e != cudaSuccess) {
        (void)cudaGetLastError();
        return inferd_set_error(INFERD_ERR_DEVICE, "cudaMemGetInfo: %s", cudaGetErrorString(e));
    }
    return INFERD_OK;
}

/* Contract (kern_alloc): cudaMalloc (256-byte aligned); NULL on failure, with
 * the error cleared so later launch checks do not see it. Never on the
 * forward path. */
void *kcuda_alloc(kern_ctx *ctx, size_t bytes)
{
    kcuda_st(ctx);
    void *p = NULL;
    if (cudaMalloc(&p, bytes ? bytes : 256) != cudaSuccess) {
        (void)cudaGetLastError();
        return NULL;
    }
    return p;
}

void kcuda_free(kern_ctx *ctx, void *p)
{
    kcuda_st(ctx);
    CUDA_CHECK(cudaFree(p));
}

/* Contract (kern_memcpy_h2d): ordered on the ctx's stream. NOTE: src is
 * expected to be pageable host memory, which the driver stages before
 * returning, so src may be reused at once; a pinned src would be read
 * asynchronously. */
void kcuda_memcpy_h2d(kern_ctx *ctx, void *dst, const void *src, size_t bytes)
{
    kcuda_state *st = kcuda_st(ctx);
    if (bytes)
        CUDA_CHECK(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyHostToDevice, st->stream));
}

/* Contract (kern_memcpy_d2h): waits for all earlier work on the stream. */
void kcuda_memcpy_d2h(kern_ctx *ctx, void *dst, const void *src, size_t bytes)
{
    kcuda_state *st = kcuda_st(ctx);
    if (bytes)
        CUDA_CHECK(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToHost, st->stream));
    CUDA_CHECK(cudaStreamSynchronize(st->stream));
}

void kcuda_memset0(kern_ctx *ctx, void *dst, size_t bytes)
{
    kcuda_state *st = kcuda_st(ctx);
    if (bytes)
        CUDA_CHECK(cudaMemsetAsync(dst, 0, bytes, st->stream));
}

void kcuda_sync(kern_ctx *ctx)
{
    kcuda_state *st = kcuda_st(ctx);
    CUDA_CHECK(cudaStreamSynchronize(st->stream));
}

/* --- weights ----------------------------------------------------------------- */

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
