/* scripts/exp_mlp_pipe.cu: an experiment, not part of inferd. Does running
 * a decode step's MLP as two chains on two graph branches hide cuBLASLt's
 * kernel boundaries?
 *
 * Answered on an H100 (docs/PERF.md, thirty-seventh session): no. One chain
 * ran 129.6 / 138.1 us a layer at 16 / 64 tokens; the halves staggered on
 * two streams 134.3 / 143.7, side by side 131.1 / 139.8. Halving costs
 * about 9 us a layer, and the second stream never wins it back.
 *
 * cuBLASLt's kernels neither wait on a prerequisite grid nor trigger their
 * dependents (docs/PERF.md, thirty-sixth session), so in a captured decode
 * step every product on it starts only after the kernel before it has
 * finished and flushed: about 3 us a boundary at 64 tokens. Splitting the
 * MLP of n tokens into two chains, gate/up column halves -> SiLU * up
 * halves -> down K-halves (the second adding into x after the first), and
 * running the chains on two streams, puts each chain's boundaries inside
 * the other chain's streaming. Every weight byte is still read once.
 *
 * Timed, each as one CUDA graph of L layers replayed R times (us a layer,
 * and the weights' bytes a layer over that time against the device copy
 * bandwidth measured here):
 *   one:   gate/up, SiLU * up, down on one stream (what inferd runs today)
 *   split: the two chains' six kernels on one stream (the cost of halving;
 *          chain 0's down writes y = its product + x, chain 1's x = its
 *          product + y, so x is never written while a gate/up half reads it)
 *   stag:  the chains on two streams, staggered: gate/up halves back to
 *          back on stream 0, chain 0's SiLU * up and down on stream 1 behind
 *          the first half, chain 1's behind the second, down 1 after down 0
 *   par:   the chains on two streams side by side (both gate/up halves at
 *          once)
 * The numbers are not checked against each other (the chains round the
 * residual twice); only the times matter here, but every form keeps its
 * reads and writes ordered as a real one must. Weights are
 * pseudo-random bf16 (not zeros: the GEMM ceiling section of docs/PERF.md
 * says why), one set per layer so that nothing stays in the L2.
 *
 * Build and run (the device wave's mlppipe part does both):
 *   nvcc -O3 -arch=sm_90a -o /tmp/mlp_pipe scripts/exp_mlp_pipe.cu -lcublasLt
 *   /tmp/mlp_pipe [n=64] [layers=32] [replays=20] [hidden=4096] [inter=14336]
 */
#include <cublasLt.h>
#include <cuda_bf16.h>
#include <cuda_runtime.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

#define CK(x)                                                                                                  \
    do {                                                                                                       \
        cudaError_t e_ = (x);                                                                                  \
        if (e_ != cudaSuccess) {                                                                               \
            fprintf(stderr, "%s:%d: %s: %s\n", __FILE__, __LINE__, #x, cudaGetErrorString(e_));               \
            exit(1);                                                                                           \
        }                                                                                                      \
    } while (0)
#define CB(x)                                                                                                  \
    do {                                                                                                       \
        cublasStatus_t s_ = (x);                                                                               \
        if (s_ != CUBLAS_STATUS_SUCCESS) {                                                                     \
            fprintf(stderr, "%s:%d: %s: cuBLAS status %d\n", __FILE__, __LINE__, #x, (int)s_);                \
            exit(1);                                                                                           \
        }                                                                                                      \
    } while (0)

/* x[i] = a pseudo-random bf16 in [-scale, scale) */
static __global__ void fill_kernel(__nv_bfloat16 *x, size_t n, uint32_t seed, float scale)
{
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x) {
        uint32_t h = (uint32_t)i * 2654435761u ^ seed;
        h ^= h >> 15;
        h *= 2246822519u;
        h ^= h >> 13;
        x[i] = __float2bfloat16(((float)(h & 0xffffff) / 16777216.0f * 2.0f - 1.0f) * scale);
    }
}

/* h[t, col0 + j] = silu(g[t, j]) * g[t, half + j], j < half: the rows of g
 * hold `half` gate then `half` up values (ld 2 * half), h has ld ldh */
static __global__ void silu_kernel(__nv_bfloat16 *h, int ldh, int col0, const __nv_bfloat16 *g, int half)
{
    const int t = blockIdx.y;
    for (int j = blockIdx.x * blockDim.x + threadIdx.x; j < half; j += gridDim.x * blockDim.x) {
        const float a = __bfloat162float(g[(size_t)t * 2 * half + j]);
        const float b = __bfloat162float(g[(size_t)t * 2 * half + half + j]);
        h[(size_t)t * ldh + col0 + j] = __float2bfloat16(a / (1.0f + __expf(-a)) * b);
    }
}

#define ALGO_CACHE 32

typedef struct {
    int key[7];
    cublasLtMatmulAlgo_t algo;
} algo_entry;

typedef struct {
    cublasLtHandle_t lt;
    cudaStream_t s1; /* the second stream: its own workspace (split-K fixups must not share one) */
    void *ws[2];
    size_t ws_bytes;
    algo_entry cache[ALGO_CACHE]; /* the heuristic asked once a shape, never inside a capture */
    int n_cache;
} gemm_ctx;

/* D[m, n] (column-major, ldd) = A^T B + beta C (C like D), with A [k, m] (lda) and B
 * [k, n] (ldb) column-major, bf16 in and out, fp32 accumulation: a weight
 * of m rows of k (row-major, row stride lda) times n token rows of k
 * (stride ldb) into n token rows of m (stride ldd). The heuristic's first
 * algorithm for the shape, cached. */
static void gemm(gemm_ctx *g, cudaStream_t s, int m, int n, int k, const void *A, int lda, const void *B, int ldb,
                 const void *C, void *D, int ldd, float beta)
{
    cublasLtMatmulDesc_t op;
    CB(cublasLtMatmulDescCreate(&op, CUBLAS_COMPUTE_32F, CUDA_R_32F));
    cublasOperation_t ta = CUBLAS_OP_T, tb = CUBLAS_OP_N;
    CB(cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_TRANSA, &ta, sizeof ta));
    CB(cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_TRANSB, &tb, sizeof tb));
    cublasLtMatrixLayout_t la, lb, ld;
    CB(cublasLtMatrixLayoutCreate(&la, CUDA_R_16BF, k, m, lda));
    CB(cublasLtMatrixLayoutCreate(&lb, CUDA_R_16BF, k, n, ldb));
    CB(cublasLtMatrixLayoutCreate(&ld, CUDA_R_16BF, m, n, ldd));
    const int key[7] = {m, n, k, lda, ldb, ldd, beta != 0.0f};
    const cublasLtMatmulAlgo_t *algo = NULL;
    for (int i = 0; i < g->n_cache && !algo; i++) {
        int same = 1;
        for (int j = 0; j < 7; j++)
            same &= g->cache[i].key[j] == key[j];
        if (same)
            algo = &g->cache[i].algo;
    }
    if (!algo) {
        cudaStreamCaptureStatus cs;
        CK(cudaStreamIsCapturing(s, &cs));
        if (cs != cudaStreamCaptureStatusNone || g->n_cache == ALGO_CACHE) {
            fprintf(stderr, "a new shape inside the capture, or too many shapes\n");
            exit(1);
        }
        cublasLtMatmulPreference_t pref;
        CB(cublasLtMatmulPreferenceCreate(&pref));
        CB(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &g->ws_bytes,
                                                sizeof g->ws_bytes));
        cublasLtMatmulHeuristicResult_t res;
        int got = 0;
        CB(cublasLtMatmulAlgoGetHeuristic(g->lt, op, la, lb, ld, ld, pref, 1, &res, &got));
        cublasLtMatmulPreferenceDestroy(pref);
        if (got < 1) {
            fprintf(stderr, "no cuBLASLt algorithm for m %d n %d k %d\n", m, n, k);
            exit(1);
        }
        algo_entry *en = &g->cache[g->n_cache++];
        for (int j = 0; j < 7; j++)
            en->key[j] = key[j];
        en->algo = res.algo;
        algo = &en->algo;
    }
    const float alpha = 1.0f;
    CB(cublasLtMatmul(g->lt, op, &alpha, A, la, B, lb, &beta, C, ld, D, ld, algo, g->ws[s == g->s1],
                      g->ws_bytes, s));
    cublasLtMatrixLayoutDestroy(la);
    cublasLtMatrixLayoutDestroy(lb);
    cublasLtMatrixLayoutDestroy(ld);
    cublasLtMatmulDescDestroy(op);
}

typedef struct {
    int n, L, H, I;
    __nv_bfloat16 **wgu, **wd; /* per layer: [2I, H] (as [g0; u0; g1; u1] halves for the chains), [H, I] */
    __nv_bfloat16 *x, *y, *gu, *gu2, *h;
    cudaStream_t s0, s1;
    cudaEvent_t ev[5]; /* the fork / join points of stag (0, 1) and par (2..4) */
    gemm_ctx g;
} exp_state;

static void silu(exp_state *e, cudaStream_t s, __nv_bfloat16 *g, int half, int col0)
{
    const dim3 grid((unsigned)min((half + 255) / 256, 64), (unsigned)e->n);
    silu_kernel<<<grid, 256, 0, s>>>(e->h, e->I, col0, g, half);
    CK(cudaGetLastError());
}

/* chain c's down K-half, Wd[:, c I/2 : (c+1) I/2] h[:, c I/2 : ...]: chain 0
 * y = it + x (x is only read: chain 1's gate/up may still be reading it),
 * chain 1 x = it + y */
static void down_half(exp_state *e, cudaStream_t s, int l, int c)
{
    const int half = e->I / 2;
    gemm(&e->g, s, e->H, e->n, half, e->wd[l] + (size_t)c * half, e->I, e->h + (size_t)c * half, e->I,
         c ? e->y : e->x, c ? e->x : e->y, e->H, 1.0f);
}

/* chain c's gate/up half: rows [c I, (c+1) I) of the layer's [g0; u0; g1; u1] weight */
static void gu_half(exp_state *e, cudaStream_t s, int l, int c, __nv_bfloat16 *out)
{
    gemm(&e->g, s, e->I, e->n, e->H, e->wgu[l] + (size_t)c * e->I * e->H, e->H, e->x, e->H, out, out, e->I, 0.0f);
}

static void layer_ops(exp_state *e, int l, const char *form)
{
    const int half = e->I / 2;
    cudaStream_t s0 = e->s0, s1 = e->s1;
    if (form[0] == 'o') { /* one */
        gemm(&e->g, s0, 2 * e->I, e->n, e->H, e->wgu[l], e->H, e->x, e->H, e->gu, e->gu, 2 * e->I, 0.0f);
        silu(e, s0, e->gu, e->I, 0); /* one chain: [g; u] of I each (the weight's layout differs; timing only) */
        gemm(&e->g, s0, e->H, e->n, e->I, e->wd[l], e->I, e->h, e->I, e->x, e->x, e->H, 1.0f);
    } else if (form[0] == 's' && form[1] == 'p') { /* split */
        gu_half(e, s0, l, 0, e->gu);
        silu(e, s0, e->gu, half, 0);
        down_half(e, s0, l, 0);
        gu_half(e, s0, l, 1, e->gu2);
        silu(e, s0, e->gu2, half, half);
        down_half(e, s0, l, 1);
    } else if (form[0] == 's') { /* stag */
        gu_half(e, s0, l, 0, e->gu);
        CK(cudaEventRecord(e->ev[0], s0));
        gu_half(e, s0, l, 1, e->gu2);
        CK(cudaStreamWaitEvent(s1, e->ev[0], 0));
        silu(e, s1, e->gu, half, 0);
        down_half(e, s1, l, 0);
        CK(cudaEventRecord(e->ev[1], s1));
        silu(e, s0, e->gu2, half, half);
        CK(cudaStreamWaitEvent(s0, e->ev[1], 0));
        down_half(e, s0, l, 1);
    } else { /* par */
        CK(cudaEventRecord(e->ev[2], s0));
        CK(cudaStreamWaitEvent(s1, e->ev[2], 0));
        gu_half(e, s0, l, 0, e->gu);
        gu_half(e, s1, l, 1, e->gu2);
        silu(e, s0, e->gu, half, 0);
        silu(e, s1, e->gu2, half, half);
        down_half(e, s0, l, 0);
        CK(cudaEventRecord(e->ev[3], s0));
        CK(cudaStreamWaitEvent(s1, e->ev[3], 0));
        down_half(e, s1, l, 1);
        CK(cudaEventRecord(e->ev[4], s1));
        CK(cudaStreamWaitEvent(s0, e->ev[4], 0));
    }
}

/* us a layer of FORM, as a graph of L layers replayed `reps` times */
static double time_form(exp_state *e, const char *form, int reps)
{
    for (int l = 0; l < e->L; l++) /* eager once: cuBLASLt's first calls set up outside the capture */
        layer_ops(e, l, form);
    CK(cudaDeviceSynchronize());
    cudaGraph_t graph;
    cudaGraphExec_t exec;
    CK(cudaStreamBeginCapture(e->s0, cudaStreamCaptureModeThreadLocal));
    for (int l = 0; l < e->L; l++)
        layer_ops(e, l, form);
    CK(cudaStreamEndCapture(e->s0, &graph));
    CK(cudaGraphInstantiate(&exec, graph, 0));
    CK(cudaGraphLaunch(exec, e->s0)); /* warm-up */
    CK(cudaStreamSynchronize(e->s0));
    cudaEvent_t a, b;
    CK(cudaEventCreate(&a));
    CK(cudaEventCreate(&b));
    CK(cudaEventRecord(a, e->s0));
    for (int r = 0; r < reps; r++)
        CK(cudaGraphLaunch(exec, e->s0));
    CK(cudaEventRecord(b, e->s0));
    CK(cudaEventSynchronize(b));
    float ms = 0;
    CK(cudaEventElapsedTime(&ms, a, b));
    cudaEventDestroy(a);
    cudaEventDestroy(b);
    cudaGraphExecDestroy(exec);
    cudaGraphDestroy(graph);
    return ms * 1000.0 / reps / e->L;
}

static double copy_gbps(void)
{
    const size_t bytes = 512ull << 20;
    void *src, *dst;
    CK(cudaMalloc(&src, bytes));
    CK(cudaMalloc(&dst, bytes));
    CK(cudaMemset(src, 1, bytes));
    cudaEvent_t a, b;
    CK(cudaEventCreate(&a));
    CK(cudaEventCreate(&b));
    CK(cudaMemcpy(dst, src, bytes, cudaMemcpyDeviceToDevice));
    CK(cudaEventRecord(a));
    for (int i = 0; i < 10; i++)
        CK(cudaMemcpy(dst, src, bytes, cudaMemcpyDeviceToDevice));
    CK(cudaEventRecord(b));
    CK(cudaEventSynchronize(b));
    float ms = 0;
    CK(cudaEventElapsedTime(&ms, a, b));
    cudaFree(src);
    cudaFree(dst);
    return 2.0 * bytes * 10 / (ms * 1e-3) / 1e9; /* read + write */
}

int main(int argc, char **argv)
{
    exp_state e = {0};
    e.n = argc > 1 ? atoi(argv[1]) : 64;
    e.L = argc > 2 ? atoi(argv[2]) : 32;
    const int reps = argc > 3 ? atoi(argv[3]) : 20;
    e.H = argc > 4 ? atoi(argv[4]) : 4096;
    e.I = argc > 5 ? atoi(argv[5]) : 14336;
    if (e.n < 1 || e.n > 4096 || e.L < 1 || e.L > 256 || reps < 1 || e.H < 64 || e.I < 64 || e.H % 8 ||
        e.I % 16) {
        fprintf(stderr, "usage: %s [n 1..4096] [layers 1..256] [replays >= 1] [hidden %% 8] [inter %% 16]\n",
                argv[0]);
        return 2;
    }
    cudaDeviceProp prop;
    CK(cudaGetDeviceProperties(&prop, 0));
    const double bw = copy_gbps();
    e.wgu = (__nv_bfloat16 **)calloc(e.L, sizeof *e.wgu);
    e.wd = (__nv_bfloat16 **)calloc(e.L, sizeof *e.wd);
    const size_t wgu_n = (size_t)2 * e.I * e.H, wd_n = (size_t)e.H * e.I;
    for (int l = 0; l < e.L; l++) {
        CK(cudaMalloc(&e.wgu[l], wgu_n * 2));
        CK(cudaMalloc(&e.wd[l], wd_n * 2));
        fill_kernel<<<1024, 256>>>(e.wgu[l], wgu_n, 2 * l + 1, 0.02f);
        fill_kernel<<<1024, 256>>>(e.wd[l], wd_n, 2 * l + 2, 0.02f);
    }
    CK(cudaMalloc(&e.x, (size_t)e.n * e.H * 2));
    CK(cudaMalloc(&e.y, (size_t)e.n * e.H * 2));
    CK(cudaMalloc(&e.gu, (size_t)e.n * 2 * e.I * 2));
    CK(cudaMalloc(&e.gu2, (size_t)e.n * e.I * 2));
    CK(cudaMalloc(&e.h, (size_t)e.n * e.I * 2));
    fill_kernel<<<256, 256>>>(e.x, (size_t)e.n * e.H, 7, 1.0f);
    CK(cudaGetLastError());
    CK(cudaStreamCreateWithFlags(&e.s0, cudaStreamNonBlocking));
    CK(cudaStreamCreateWithFlags(&e.s1, cudaStreamNonBlocking));
    for (int i = 0; i < 5; i++)
        CK(cudaEventCreateWithFlags(&e.ev[i], cudaEventDisableTiming));
    CB(cublasLtCreate(&e.g.lt));
    e.g.ws_bytes = 32u << 20;
    CK(cudaMalloc(&e.g.ws[0], e.g.ws_bytes));
    CK(cudaMalloc(&e.g.ws[1], e.g.ws_bytes));
    e.g.s1 = e.s1;
    CK(cudaDeviceSynchronize());

    const double bytes = (double)(wgu_n + wd_n) * 2.0; /* the weights a layer: the floor */
    const double floor_us = bytes / (bw * 1e9) * 1e6;
    printf("device %s, copy %.0f GB/s; MLP of %d tokens, hidden %d, intermediate %d, %d layers, %d replays\n",
           prop.name, bw, e.n, e.H, e.I, e.L, reps);
    printf("weights %.1f MiB a layer, floor %.1f us a layer\n", bytes / 1048576.0, floor_us);
    printf("| form | us a layer | %% of floor | vs one |\n|---|---:|---:|---:|\n");
    static const char *const forms[] = {"one", "split", "stag", "par", "one", "stag"};
    double one_us = 0;
    for (int f = 0; f < (int)(sizeof forms / sizeof *forms); f++) {
        const double us = time_form(&e, forms[f], reps);
        if (f == 0)
            one_us = us;
        printf("| %s | %.2f | %.1f%% | %+.2f us |\n", forms[f], us, 100.0 * floor_us / us, us - one_us);
    }
    return 0;
}
