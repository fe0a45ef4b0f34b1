// tests/kernels/cuda/emu/kemu.h: a small host emulation of the CUDA subset
// that kernels/cuda uses, to run the kernels' real source against the CPU
// twins without a GPU (docs/DEVICE.md section 5). One ucontext fiber per CUDA
// thread, one block at a time, round robin; __syncthreads, __syncwarp and
// warp shuffles are barriers that abort when the participants arrive from
// different source lines (divergence) or can never all arrive (deadlock).
// Dynamic shared memory starts as 0xFF bytes (NaN as float). cuBLASLt offers
// no algorithm, so the backend falls back to cublasGemmEx, implemented here
// naively in column-major form. Not a GPU: no memory model, no performance.
#pragma once
#include <array>
#include <cassert>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <ucontext.h>
#include <vector>

#include "common/half.h"

#define __CUDACC__ 1
#define __host__
#define __device__
#define __global__
#define __forceinline__ inline
#define __launch_bounds__(...)
#define __shared__ static

struct uint3 { unsigned x, y, z; };
struct dim3 {
    unsigned x, y, z;
    dim3(unsigned a = 1, unsigned b = 1, unsigned c = 1) : x(a), y(b), z(c) {}
};
struct uint4 { unsigned x, y, z, w; };
struct uint2 { unsigned x, y; };
struct float4 { float x, y, z, w; };
static inline uint4 make_uint4(unsigned a, unsigned b, unsigned c, unsigned d) { return uint4{a, b, c, d}; }
static inline uint2 make_uint2(unsigned a, unsigned b) { return uint2{a, b}; }
static inline float4 make_float4(float a, float b, float c, float d) { return float4{a, b, c, d}; }

inline uint3 threadIdx, blockIdx;
inline dim3 blockDim, gridDim;
inline void *kemu_dyn_smem;

static inline float __uint_as_float(uint32_t u) { float f; memcpy(&f, &u, 4); return f; }
static inline uint32_t __float_as_uint(float f) { uint32_t u; memcpy(&u, &f, 4); return u; }
struct __nv_bfloat16 { uint16_t x; };
static inline __nv_bfloat16 __float2bfloat16_rn(float f) { return __nv_bfloat16{half_f32_to_bf16(f)}; }
static inline uint16_t __bfloat16_as_ushort(__nv_bfloat16 b) { return b.x; }
struct __half { uint16_t x; };
static inline __half __ushort_as_half(uint16_t u) { return __half{u}; }
static inline float __half2float(__half h) { return half_f16_to_f32(h.x); }
template <class T> static inline T __ldg(const T *p) { return *p; }
template <class T> static inline T __ldcg(const T *p) { return *p; }
static inline void __threadfence() {}
static inline unsigned atomicAdd(unsigned *p, unsigned v) { return __atomic_fetch_add(p, v, __ATOMIC_SEQ_CST); }
static inline int atomicAdd(int *p, int v) { return __atomic_fetch_add(p, v, __ATOMIC_SEQ_CST); }
static inline int atomicOr(int *p, int v) { return __atomic_fetch_or(p, v, __ATOMIC_SEQ_CST); }
// Explicitly rounded fp32 arithmetic (kernels/cuda/penalty.cu); the emulator is built without FMA contraction.
static inline float __fadd_rn(float a, float b) { return a + b; }
static inline float __fsub_rn(float a, float b) { return a - b; }
static inline float __fmul_rn(float a, float b) { return a * b; }
static inline float __fdiv_rn(float a, float b) { return a / b; }
static inline int min(int a, int b) { return a < b ? a : b; }
static inline int max(int a, int b) { return a > b ? a : b; }

// ---- fibers and barriers (one OS thread; a CUDA thread is a ucontext fiber) ----
struct kemu_bar {
    int expected = 0, arrived = 0, site = -1;
    unsigned gen = 0;
};
struct kemu_fiber {
    ucontext_t ctx;
    int tid = 0, state = 0; /* 0 runnable, 1 waiting, 2 done */
    kemu_bar *wait_bar = nullptr;
    unsigned wait_gen = 0;
};
struct kemu_block {
    kemu_bar bar;
    std::vector<kemu_bar> wbar, gbar; /* per warp; per warpgroup of 128 threads (wgmma) */
    std::vector<std::array<uint64_t, 32>> slots;
    explicit kemu_block(int nt) : wbar(nt / 32), gbar((nt + 127) / 128), slots(nt / 32)
    {
        bar.expected = nt;
        for (auto &w : wbar)
            w.expected = 32;
        for (size_t g = 0; g < gbar.size(); g++)
            gbar[g].expected = nt - (int)g * 128 < 128 ? nt - (int)g * 128 : 128;
    }
};
inline kemu_block *kemu_blk;
inline int kemu_tid;
inline kemu_fiber *kemu_cur;
inline ucontext_t kemu_sched;

static inline void kemu_bar_wait(kemu_bar &b, int site, const char *what)
{
    if (b.arrived == 0) {
        b.site = site;
    } else if (b.site != site) {
        fprintf(stderr, "KEMU: divergent %s: line %d vs line %d (block %u,%u,%u thread %d)\n", what, site, b.site,
                blockIdx.x, blockIdx.y, blockIdx.z, kemu_tid);
        abort();
    }
    b.arrived++;
    if (b.arrived == b.expected) {
        b.arrived = 0;
        b.gen++;
        return;
    }
    kemu_cur->state = 1;
    kemu_cur->wait_bar = &b;
    kemu_cur->wait_gen = b.gen;
    swapcontext(&kemu_cur->ctx, &kemu_sched);
}
static inline void kemu_bar_drop(kemu_bar &b)
{
    b.expected--;
    if (b.arrived > 0 && b.arrived == b.expected) {
        b.arrived = 0;
        b.gen++;
    }
}

static inline void kemu_syncthreads(int site) { kemu_bar_wait(kemu_blk->bar, site, "__syncthreads"); }
static inline void kemu_syncwarp(int site) { kemu_bar_wait(kemu_blk->wbar[kemu_tid / 32], site, "__syncwarp"); }
/* the warpgroup-collective wgmma's exchange (kernels/cuda/mma.cuh) */
static inline void kemu_syncwg(int site) { kemu_bar_wait(kemu_blk->gbar[kemu_tid / 128], site, "warpgroup"); }
#define __syncthreads() kemu_syncthreads(__LINE__)
#define __syncwarp(...) kemu_syncwarp(__LINE__)

template <class T> static inline T kemu_shfl(T v, int src, int site)
{
    const int w = kemu_tid / 32, lane = kemu_tid % 32;
    static_assert(sizeof(T) <= 8, "shfl type");
    uint64_t u = 0;
    memcpy(&u, &v, sizeof(T));
    kemu_blk->slots[w][lane] = u;
    kemu_bar_wait(kemu_blk->wbar[w], site, "shuffle");
    T r = v;
    if (src >= 0 && src < 32)
        memcpy(&r, &kemu_blk->slots[w][src], sizeof(T));
    kemu_bar_wait(kemu_blk->wbar[w], site, "shuffle (2)");
    return r;
}
#define __shfl_xor_sync(m, v, o) kemu_shfl((v), (kemu_tid % 32) ^ (o), __LINE__)
#define __shfl_down_sync(m, v, o) kemu_shfl((v), (kemu_tid % 32) + (o), __LINE__)
#define __shfl_sync(m, v, s) kemu_shfl((v), (s), __LINE__)
static inline bool kemu_any(bool p, int site)
{
    const int w = kemu_tid / 32;
    kemu_blk->slots[w][kemu_tid % 32] = p;
    kemu_bar_wait(kemu_blk->wbar[w], site, "vote");
    bool r = false;
    for (int l = 0; l < 32; l++)
        r = r || kemu_blk->slots[w][l] != 0;
    kemu_bar_wait(kemu_blk->wbar[w], site, "vote (2)");
    return r;
}
#define __any_sync(m, p) kemu_any((p), __LINE__)

inline std::function<void()> *kemu_body;
static inline void kemu_fiber_entry(void)
{
    (*kemu_body)();
    kemu_bar_drop(kemu_blk->bar);
    kemu_bar_drop(kemu_blk->wbar[kemu_tid / 32]);
    kemu_bar_drop(kemu_blk->gbar[kemu_tid / 128]);
    kemu_cur->state = 2;
    swapcontext(&kemu_cur->ctx, &kemu_sched);
}

// ---- runtime ------------------------------------------------------------------
typedef int cudaError_t;
#define cudaSuccess 0
#define cudaErrorMemoryAllocation 2
typedef struct kemu_stream *cudaStream_t;
#define cudaStreamNonBlocking 1
enum cudaMemcpyKind { cudaMemcpyHostToDevice = 1, cudaMemcpyDeviceToHost = 2, cudaMemcpyDeviceToDevice = 3 };
enum cudaFuncAttribute { cudaFuncAttributeMaxDynamicSharedMemorySize = 8, cudaFuncAttributePreferredSharedMemoryCarveout = 9 };
enum cudaSharedCarveout { cudaSharedmemCarveoutMaxShared = 100 };
struct cudaDeviceProp {
    char name[256];
    int multiProcessorCount, major, minor, l2CacheSize;
    size_t sharedMemPerBlockOptin, totalGlobalMem;
};
inline size_t kemu_n_sms = 132;
static inline const char *cudaGetErrorString(cudaError_t e) { return e ? "kemu error" : "no error"; }
static inline cudaError_t cudaGetLastError(void) { return cudaSuccess; }
static inline cudaError_t cudaGetDeviceCount(int *n) { *n = 1; return cudaSuccess; }
static inline cudaError_t cudaSetDevice(int) { return cudaSuccess; }
static inline cudaError_t cudaGetDevice(int *d) { *d = 0; return cudaSuccess; }
static inline cudaError_t cudaGetDeviceProperties(cudaDeviceProp *p, int)
{
    memset(p, 0, sizeof *p);
    snprintf(p->name, sizeof p->name, "kemu");
    p->multiProcessorCount = (int)kemu_n_sms;
    p->major = 9;
    p->sharedMemPerBlockOptin = 227 * 1024;
    p->totalGlobalMem = (size_t)80 << 30;
    return cudaSuccess;
}
static inline cudaError_t cudaStreamCreateWithFlags(cudaStream_t *s, unsigned) { *s = (cudaStream_t)0x1; return cudaSuccess; }
static inline cudaError_t cudaStreamDestroy(cudaStream_t) { return cudaSuccess; }
static inline cudaError_t cudaStreamSynchronize(cudaStream_t) { return cudaSuccess; }
static inline cudaError_t cudaMalloc(void **p, size_t n)
{
    if (n > ((size_t)1 << 40)) { *p = nullptr; return cudaErrorMemoryAllocation; }
    /* exact size (not rounded up), so ASan builds see overruns */
    if (posix_memalign(p, 256, n ? n : 1) != 0) {
        *p = nullptr;
        return cudaErrorMemoryAllocation;
    }
    return cudaSuccess;
}
template <class T> static inline cudaError_t cudaMalloc(T **p, size_t n) { return cudaMalloc((void **)p, n); }
static inline cudaError_t cudaFree(void *p) { free(p); return cudaSuccess; }
static inline cudaError_t cudaMemcpyAsync(void *d, const void *s, size_t n, cudaMemcpyKind, cudaStream_t) { memcpy(d, s, n); return cudaSuccess; }
static inline cudaError_t cudaMemcpy2DAsync(void *d, size_t dp, const void *s, size_t sp, size_t w, size_t h,
                                            cudaMemcpyKind, cudaStream_t)
{
    for (size_t r = 0; r < h; r++)
        memcpy((char *)d + r * dp, (const char *)s + r * sp, w);
    return cudaSuccess;
}
static inline cudaError_t cudaMemsetAsync(void *d, int v, size_t n, cudaStream_t) { memset(d, v, n); return cudaSuccess; }
static inline cudaError_t cudaMemGetInfo(size_t *f, size_t *t) { *f = (size_t)70 << 30; *t = (size_t)80 << 30; return cudaSuccess; }
template <class F> static inline cudaError_t cudaFuncSetAttribute(F, cudaFuncAttribute, int v)
{
    return v <= 227 * 1024 ? cudaSuccess : 1;
}

// Launch: blocks in order; the block's threads as fibers, round robin.
template <class... KA, class... A>
void kemu_launch(void (*k)(KA...), dim3 g, dim3 b, size_t smem, cudaStream_t, A... args)
{
    const int nt = (int)(b.x * b.y * b.z);
    if (nt % 32 != 0 || nt > 1024 || nt <= 0) {
        fprintf(stderr, "KEMU: block of %d threads\n", nt);
        abort();
    }
    if (smem > 227 * 1024) {
        fprintf(stderr, "KEMU: %zu bytes of dynamic smem\n", smem);
        abort();
    }
    const size_t stack = 256 * 1024;
    std::vector<uint8_t> dyn(smem + 64, 0xFF);
    std::vector<uint8_t> stacks((size_t)nt * stack);
    std::vector<kemu_fiber> fib(nt);
    std::function<void()> body = [&] { k(args...); };
    kemu_body = &body;
    blockDim = b;
    gridDim = g;
    for (unsigned bz = 0; bz < g.z; bz++)
        for (unsigned by = 0; by < g.y; by++)
            for (unsigned bx = 0; bx < g.x; bx++) {
                memset(dyn.data(), 0xFF, dyn.size());
                kemu_dyn_smem = (void *)(((uintptr_t)dyn.data() + 15) & ~(uintptr_t)15);
                kemu_block blk(nt);
                kemu_blk = &blk;
                blockIdx = uint3{bx, by, bz};
                for (int t = 0; t < nt; t++) {
                    fib[t] = kemu_fiber();
                    fib[t].tid = t;
                    getcontext(&fib[t].ctx);
                    fib[t].ctx.uc_stack.ss_sp = stacks.data() + (size_t)t * stack;
                    fib[t].ctx.uc_stack.ss_size = stack;
                    fib[t].ctx.uc_link = nullptr;
                    makecontext(&fib[t].ctx, kemu_fiber_entry, 0);
                }
                int done = 0;
                while (done < nt) {
                    bool progress = false;
                    for (int t = 0; t < nt; t++) {
                        kemu_fiber &f = fib[t];
                        if (f.state == 2 || (f.state == 1 && f.wait_bar->gen == f.wait_gen))
                            continue;
                        f.state = 0;
                        kemu_cur = &f;
                        kemu_tid = t;
                        threadIdx = uint3{(unsigned)t % b.x, (unsigned)t / b.x % b.y, (unsigned)t / (b.x * b.y)};
                        swapcontext(&kemu_sched, &f.ctx);
                        progress = true;
                        if (f.state == 2)
                            done++;
                    }
                    if (!progress) {
                        fprintf(stderr, "KEMU: deadlock in block %u,%u,%u\n", bx, by, bz);
                        abort();
                    }
                }
            }
}

// ---- cuBLAS(Lt) stubs: no Lt algorithm, GemmEx computes naively ----------------
typedef int cublasStatus_t;
#define CUBLAS_STATUS_SUCCESS 0
#define CUBLAS_STATUS_NOT_SUPPORTED 15
typedef struct kemu_h *cublasLtHandle_t, *cublasHandle_t, *cublasLtMatmulDesc_t, *cublasLtMatrixLayout_t,
    *cublasLtMatmulPreference_t;
typedef enum { CUBLAS_OP_N = 0, CUBLAS_OP_T = 1 } cublasOperation_t;
typedef enum { CUDA_R_32F = 0, CUDA_R_16BF = 14 } cudaDataType_t;
typedef enum { CUBLAS_COMPUTE_32F = 68 } cublasComputeType_t;
#define CUBLAS_GEMM_DEFAULT (-1)
#define CUBLAS_DEFAULT_MATH 0
enum { CUBLASLT_MATMUL_DESC_TRANSA = 3, CUBLASLT_MATMUL_DESC_TRANSB = 4 };
enum { CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES = 1, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES = 5,
       CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES = 6, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES = 7,
       CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES = 8 };
enum { CUBLASLT_ALGO_CONFIG_TILE_ID = 1, CUBLASLT_ALGO_CONFIG_SPLITK_NUM = 2 };
struct cublasLtMatmulAlgo_t { uint64_t data[8]; };
struct cublasLtMatmulHeuristicResult_t { cublasLtMatmulAlgo_t algo; size_t workspaceSize; cublasStatus_t state; float wavesCount; int reserved[4]; };
#define KEMU_H ((kemu_h *)0x1)
static inline const char *cublasGetStatusString(cublasStatus_t) { return "kemu cublas"; }
static inline cublasStatus_t cublasLtCreate(cublasLtHandle_t *h) { *h = KEMU_H; return 0; }
static inline cublasStatus_t cublasLtDestroy(cublasLtHandle_t) { return 0; }
static inline cublasStatus_t cublasCreate(cublasHandle_t *h) { *h = KEMU_H; return 0; }
static inline cublasStatus_t cublasDestroy(cublasHandle_t) { return 0; }
static inline cublasStatus_t cublasSetStream(cublasHandle_t, cudaStream_t) { return 0; }
static inline cublasStatus_t cublasSetWorkspace(cublasHandle_t, void *, size_t) { return 0; }
static inline cublasStatus_t cublasSetMathMode(cublasHandle_t, int) { return 0; }
static inline cublasStatus_t cublasLtMatmulDescCreate(cublasLtMatmulDesc_t *d, cublasComputeType_t, cudaDataType_t) { *d = KEMU_H; return 0; }
static inline cublasStatus_t cublasLtMatmulDescSetAttribute(cublasLtMatmulDesc_t, int, const void *, size_t) { return 0; }
static inline cublasStatus_t cublasLtMatmulDescDestroy(cublasLtMatmulDesc_t) { return 0; }
static inline cublasStatus_t cublasLtMatrixLayoutCreate(cublasLtMatrixLayout_t *l, cudaDataType_t, uint64_t, uint64_t, int64_t) { *l = KEMU_H; return 0; }
static inline cublasStatus_t cublasLtMatrixLayoutDestroy(cublasLtMatrixLayout_t) { return 0; }
static inline cublasStatus_t cublasLtMatmulPreferenceCreate(cublasLtMatmulPreference_t *p) { *p = KEMU_H; return 0; }
static inline cublasStatus_t cublasLtMatmulPreferenceSetAttribute(cublasLtMatmulPreference_t, int, const void *, size_t) { return 0; }
static inline cublasStatus_t cublasLtMatmulPreferenceDestroy(cublasLtMatmulPreference_t) { return 0; }
static inline cublasStatus_t cublasLtMatmulAlgoConfigGetAttribute(const cublasLtMatmulAlgo_t *, int, void *, size_t, size_t *) { return CUBLAS_STATUS_NOT_SUPPORTED; }
static inline cublasStatus_t cublasLtMatmulAlgoGetHeuristic(cublasLtHandle_t, cublasLtMatmulDesc_t, cublasLtMatrixLayout_t,
                                                            cublasLtMatrixLayout_t, cublasLtMatrixLayout_t, cublasLtMatrixLayout_t,
                                                            cublasLtMatmulPreference_t, int, cublasLtMatmulHeuristicResult_t *, int *n)
{
    *n = 0;
    return CUBLAS_STATUS_NOT_SUPPORTED;
}
static inline cublasStatus_t cublasLtMatmul(cublasLtHandle_t, cublasLtMatmulDesc_t, const void *, const void *, cublasLtMatrixLayout_t,
                                            const void *, cublasLtMatrixLayout_t, const void *, const void *, cublasLtMatrixLayout_t,
                                            void *, cublasLtMatrixLayout_t, const cublasLtMatmulAlgo_t *, void *, size_t, cudaStream_t)
{
    abort();
}
// Column-major C[m, n] = op(A) op(B) + beta C, alpha = 1, beta 0 or 1 (the sum in fp32, one rounding).
static inline cublasStatus_t cublasGemmEx(cublasHandle_t, cublasOperation_t ta, cublasOperation_t tb, int m, int n, int k,
                                          const void *alpha, const void *A, cudaDataType_t at, int lda, const void *B,
                                          cudaDataType_t bt, int ldb, const void *beta, void *C, cudaDataType_t ct, int ldc,
                                          cublasComputeType_t, int)
{
    const float bet = *(const float *)beta;
    assert(at == CUDA_R_16BF && bt == CUDA_R_16BF && *(const float *)alpha == 1.0f && (bet == 0.0f || bet == 1.0f));
    const uint16_t *a = (const uint16_t *)A, *b = (const uint16_t *)B;
    for (int j = 0; j < n; j++)
        for (int i = 0; i < m; i++) {
            float s = 0.0f;
            for (int p = 0; p < k; p++) {
                float av = half_bf16_to_f32(ta == CUBLAS_OP_T ? a[p + (int64_t)i * lda] : a[i + (int64_t)p * lda]);
                float bv = half_bf16_to_f32(tb == CUBLAS_OP_T ? b[j + (int64_t)p * ldb] : b[p + (int64_t)j * ldb]);
                s += av * bv;
            }
            const int64_t o = i + (int64_t)j * ldc;
            if (ct == CUDA_R_32F)
                ((float *)C)[o] = s + (bet != 0.0f ? ((float *)C)[o] : 0.0f);
            else
                ((uint16_t *)C)[o] = half_f32_to_bf16(s + (bet != 0.0f ? half_bf16_to_f32(((uint16_t *)C)[o]) : 0.0f));
        }
    return 0;
}
