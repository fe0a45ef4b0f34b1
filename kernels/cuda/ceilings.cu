/* kernels/cuda/ceilings.cu: the device's ceilings, measured in-process for
 * `inferd bench latency`: device-to-device copy bandwidth and the rate of a
 * large bf16 cuBLASLt GEMM (fp32 accumulate), both timed with CUDA events on
 * the ctx's stream after warm-up runs. The CPU twin is cpu/ceilings.c.
 *
 * Copy: COPY_BYTES (well beyond the 50-60 MiB L2 of H100/H200) copied
 * COPY_ITERS times; the rate counts bytes read + written (2 x size / time),
 * the convention of docs/PERF.md's earlier PyTorch measurement.
 * GEMM: D[m, n] = A[m, k] B[k, n] with m = n = k = GEMM_DIM, bf16 in and
 * out, the heuristic's first algorithm with the ctx's workspace; the rate is
 * 2 m n k / time. Inputs are uniform random values in [-1, 1] (the dummy
 * weights' generator), not zeros: a GEMM's rate depends on its data through
 * power. Zero operands toggle no multiplier bits, draw less power and keep
 * the boost clock, so an H200 ran the zeros product 10-12% faster than
 * torch.matmul on randn data or this model's own products (docs/PERF.md,
 * twenty-second session). The ceiling is the rate real operands reach.
 *
 * Scratch (2 x 512 MiB + 3 x 128 MiB) is allocated and freed here: this is
 * a start-up measurement, never on the forward path.
 */
#include "kernels/cuda/common.cuh"

#define COPY_BYTES ((size_t)512 << 20)
#define COPY_ITERS 20
#define GEMM_DIM 8192
#define GEMM_ITERS 10

#ifndef KEMU_H

/* Milliseconds between two events recorded around `body` run iters times. */
#define TIME_MS(st, iters, ms, body)                                          \
    do {                                                                      \
        cudaEvent_t t0_, t1_;                                                 \
        CUDA_CHECK(cudaEventCreate(&t0_));                                    \
        CUDA_CHECK(cudaEventCreate(&t1_));                                    \
        CUDA_CHECK(cudaEventRecord(t0_, (st)->stream));                       \
        for (int it_ = 0; it_ < (iters); it_++) {                             \
            body;                                                             \
        }                                                                     \
        CUDA_CHECK(cudaEventRecord(t1_, (st)->stream));                       \
        CUDA_CHECK(cudaEventSynchronize(t1_));                                \
        float ms_ = 0;                                                        \
        CUDA_CHECK(cudaEventElapsedTime(&ms_, t0_, t1_));                     \
        (ms) = ms_;                                                           \
        CUDA_CHECK(cudaEventDestroy(t0_));                                    \
        CUDA_CHECK(cudaEventDestroy(t1_));                                    \
    } while (0)

static inferd_status measure_copy(kcuda_state *st, kern_ceilings *out)
{
    void *a = NULL, *b = NULL;
    if (cudaMalloc(&a, COPY_BYTES) != cudaSuccess || cudaMalloc(&b, COPY_BYTES) != cudaSuccess) {
        (void)cudaGetLastError();
        if (a)
            cudaFree(a);
        return inferd_set_error(INFERD_ERR_NOMEM, "ceilings: cannot allocate 2 x %zu MiB for the copy",
                                COPY_BYTES >> 20);
    }
    CUDA_CHECK(cudaMemsetAsync(a, 0, COPY_BYTES, st->stream));
    for (int i = 0; i < 3; i++)
        CUDA_CHECK(cudaMemcpyAsync(b, a, COPY_BYTES, cudaMemcpyDeviceToDevice, st->stream));
    float ms = 0;
    TIME_MS(st, COPY_ITERS, ms,
            CUDA_CHECK(cudaMemcpyAsync(b, a, COPY_BYTES, cudaMemcpyDeviceToDevice, st->stream)));
    out->copy_bytes = (int64_t)COPY_BYTES;
    out->copy_gbps = 2.0 * (double)COPY_BYTES * COPY_ITERS / (ms * 1e-3) / 1e9;
    CUDA_CHECK(cudaFree(a));
    CUDA_CHECK(cudaFree(b));
    return INFERD_OK;
}

typedef struct {
    cublasLtMatmulDesc_t desc;
    cublasLtMatrixLayout_t la, lb, lc;
    cublasLtMatmulAlgo_t algo;
} gemm_plan;

static void gemm_plan_free(gemm_plan *p)
{
    if (p->desc)
        cublasLtMatmulDescDestroy(p->desc);
    if (p->la)
        cublasLtMatrixLayoutDestroy(p->la);
    if (p->lb)
        cublasLtMatrixLayoutDestroy(p->lb);
    if (p->lc)
        cublasLtMatrixLayoutDestroy(p->lc);
}

/* Column-major D[m, n] = A^T[k, m]^T B[k, n] (the layout of gemm.cu). */
static bool gemm_plan_make(kcuda_state *st, gemm_plan *p, int d)
{
    const cublasOperation_t op_t = CUBLAS_OP_T, op_n = CUBLAS_OP_N;
    CUBLAS_CHECK(cublasLtMatmulDescCreate(&p->desc, CUBLAS_COMPUTE_32F, CUDA_R_32F));
    CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(p->desc, CUBLASLT_MATMUL_DESC_TRANSA, &op_t, sizeof op_t));
    CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(p->desc, CUBLASLT_MATMUL_DESC_TRANSB, &op_n, sizeof op_n));
    CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&p->la, CUDA_R_16BF, d, d, d));
    CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&p->lb, CUDA_R_16BF, d, d, d));
    CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&p->lc, CUDA_R_16BF, d, d, d));
    cublasLtMatmulPreference_t pref;
    CUBLAS_CHECK(cublasLtMatmulPreferenceCreate(&pref));
    const uint64_t ws = st->gemm_ws_bytes;
    CUBLAS_CHECK(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &ws, sizeof ws));
    cublasLtMatmulHeuristicResult_t res;
    memset(&res, 0, sizeof res);
    int n_res = 0;
    cublasStatus_t hs =
        cublasLtMatmulAlgoGetHeuristic(st->lt, p->desc, p->la, p->lb, p->lc, p->lc, pref, 1, &res, &n_res);
    CUBLAS_CHECK(cublasLtMatmulPreferenceDestroy(pref));
    if (hs != CUBLAS_STATUS_SUCCESS || n_res < 1 || res.state != CUBLAS_STATUS_SUCCESS)
        return false;
    p->algo = res.algo;
    return true;
}

/* Uniform values in [-1, 1] into a d x d bf16 scratch matrix. */
static void fill_operand(kern_ctx *ctx, void *p, int d, uint64_t seed)
{
    kern_weight w = {.data = p, .dtype = KERN_DTYPE_BF16, .rows = d, .cols = d};
    kern_weight_fill_random(ctx, &w, seed, 1.0f);
}

static inferd_status measure_gemm(kern_ctx *ctx, kcuda_state *st, kern_ceilings *out)
{
    const int d = GEMM_DIM;
    const size_t bytes = (size_t)d * d * 2;
    void *a = NULL, *b = NULL, *c = NULL;
    if (cudaMalloc(&a, bytes) != cudaSuccess || cudaMalloc(&b, bytes) != cudaSuccess ||
        cudaMalloc(&c, bytes) != cudaSuccess) {
        (void)cudaGetLastError();
        if (a)
            cudaFree(a);
        if (b)
            cudaFree(b);
        return inferd_set_error(INFERD_ERR_NOMEM, "ceilings: cannot allocate 3 x %zu MiB for the GEMM",
                                bytes >> 20);
    }
    fill_operand(ctx, a, d, 0x6365696cULL);
    fill_operand(ctx, b, d, 0x696e6773ULL);
    gemm_plan p;
    memset(&p, 0, sizeof p);
    inferd_status rc = INFERD_OK;
    if (!gemm_plan_make(st, &p, d)) {
        rc = inferd_set_error(INFERD_ERR_DEVICE, "ceilings: cuBLASLt has no bf16 algorithm for %d^3", d);
    } else {
        const float alpha = 1.0f, beta = 0.0f;
#define RUN_GEMM()                                                                                              \
    CUBLAS_CHECK(cublasLtMatmul(st->lt, p.desc, &alpha, a, p.la, b, p.lb, &beta, c, p.lc, c, p.lc, &p.algo,    \
                                st->gemm_ws, st->gemm_ws_bytes, st->stream))
        for (int i = 0; i < 3; i++)
            RUN_GEMM();
        float ms = 0;
        TIME_MS(st, GEMM_ITERS, ms, RUN_GEMM());
#undef RUN_GEMM
        out->gemm_m = out->gemm_n = out->gemm_k = d;
        out->gemm_tflops = 2.0 * (double)d * d * d * GEMM_ITERS / (ms * 1e-3) / 1e12;
    }
    gemm_plan_free(&p);
    CUDA_CHECK(cudaStreamSynchronize(st->stream));
    CUDA_CHECK(cudaFree(a));
    CUDA_CHECK(cudaFree(b));
    CUDA_CHECK(cudaFree(c));
    return rc;
}

/* Contract (kern_measure_ceilings): fills out (copy GB/s, bf16 GEMM
 * TFLOP/s, the device name); NOMEM when the scratch does not fit. */
inferd_status kcuda_measure_ceilings(kern_ctx *ctx, kern_ceilings *out)
{
    kcuda_state *st = kcuda_st(ctx);
    snprintf(out->device, sizeof out->device, "%.127s", st->name);
    CUDA_CHECK(cudaStreamSynchronize(st->stream));
    inferd_status rc = measure_copy(st, out);
    if (rc == INFERD_OK)
        rc = measure_gemm(ctx, st, out);
    return rc;
}

#else /* KEMU_H: the host emulator has no events */

inferd_status kcuda_measure_ceilings(kern_ctx *ctx, kern_ceilings *out)
{
    (void)ctx;
    (void)out;
    return inferd_set_error(INFERD_ERR_UNSUPPORTED, "no ceilings in the kernel emulator");
}

#endif
