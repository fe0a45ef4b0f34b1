/* kernels/cuda/ctx.cu: lifecycle and memory of the CUDA backend.
 *
 * A ctx owns one non-blocking stream, a cuBLASLt handle (plus a cuBLAS handle
 * for the rare GEMM shape cuBLASLt has no algorithm for) and one 32 MiB GEMM
 * workspace, all created here so the forward pass never allocates. Failures
 * while creating a ctx are recoverable (status); any CUDA error after that is
 * a device fault and aborts through CUDA_CHECK. Weight upload and random
 * weights are in weights.cu (twin of cpu/weights.c).
 */
#include "kernels/cuda/attention.cuh"

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

/* Contract (kern_cuda_device_count): devices visible, 0 on any error. */
int kcuda_device_count(void)
{
    int n = 0;
    if (cudaGetDeviceCount(&n) != cudaSuccess) {
        (void)cudaGetLastError();
        return 0;
    }
    return n;
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
    if (st->attn_merge_cnt)
        cudaFree(st->attn_merge_cnt);
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
    st->cc = prop.major * 10 + prop.minor;
    st->smem_optin = prop.sharedMemPerBlockOptin;
    st->l2_bytes = (size_t)prop.l2CacheSize;
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
    if (!kcuda_attn_init(st)) {
        rc = inferd_set_error(INFERD_ERR_NOMEM, "CUDA device %d: cannot allocate the attention merge counters",
                              device_id);
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

/* Contract: the device's opt-in dynamic shared memory per block (read at
 * ctx creation), for kern_ctx_check_model. */
size_t kcuda_smem_per_block(const kern_ctx *ctx)
{
    return kcuda_st(ctx)->smem_optin;
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

/* Contract (kern_memcpy_d2h_async): ordered on the ctx's stream, no wait;
 * dst is page-locked, so the copy is truly asynchronous. */
void kcuda_memcpy_d2h_async(kern_ctx *ctx, void *dst, const void *src, size_t bytes)
{
    kcuda_state *st = kcuda_st(ctx);
    if (bytes)
        CUDA_CHECK(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToHost, st->stream));
}

void kcuda_memset0(kern_ctx *ctx, void *dst, size_t bytes)
{
    kcuda_state *st = kcuda_st(ctx);
    if (bytes)
        CUDA_CHECK(cudaMemsetAsync(dst, 0, bytes, st->stream));
}

/* Contract (kern_copy_2d): height rows of width bytes, device to device, on
 * the ctx's stream (capturable). The dispatcher has checked the pitches. */
void kcuda_copy_2d(kern_ctx *ctx, void *dst, size_t dst_pitch, const void *src, size_t src_pitch, size_t width,
                   size_t height)
{
    kcuda_state *st = kcuda_st(ctx);
    CUDA_CHECK(cudaMemcpy2DAsync(dst, dst_pitch, src, src_pitch, width, height, cudaMemcpyDeviceToDevice,
                                 st->stream));
}

void kcuda_sync(kern_ctx *ctx)
{
    kcuda_state *st = kcuda_st(ctx);
    CUDA_CHECK(cudaStreamSynchronize(st->stream));
}
