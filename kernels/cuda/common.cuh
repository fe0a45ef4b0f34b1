/* kernels/cuda/common.cuh: shared pieces of the CUDA backend.
 *
 * The backend state hung off kern_ctx::cuda (stream, cuBLASLt/cuBLAS handles,
 * the GEMM workspace, device properties), the fatal check macros for CUDA and
 * cuBLAS calls, and small device helpers: bf16 <-> fp32 conversion on raw
 * uint16_t storage (the backend keeps every bf16 tensor as uint16_t so device
 * code and host tests agree on the bits), 16-byte vector loads of 8 bf16, and
 * warp / block reductions.
 *
 * Every op follows three tiers (DESIGN.md section 3): a static __global__
 * kernel, a launcher that computes grid / shared memory, and the kcuda_*
 * entry that takes the ctx's stream and checks cudaGetLastError through
 * KCUDA_LAUNCH_CHECK.
 */
#ifndef INFERD_KERNELS_CUDA_COMMON_CUH
#define INFERD_KERNELS_CUDA_COMMON_CUH

/* C and C++ standard headers first, so the C headers below (which have no
 * extern "C" guards of their own) only declare project functions inside the
 * extern "C" block. */
#include <math.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cublasLt.h>
#include <cublas_v2.h>
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

extern "C" {
#include "common/alloc.h"
#include "common/check.h"
#include "common/log.h"
#include "common/status.h"
}
#include "common/half.h"
#include "common/rng.h"
#include "kernels/kern_fp8.h"
#include "kernels/kern_internal.h"
#if !defined(KEMU_H)
#include <cuda_fp8.h>
#endif

/* One cached cuBLASLt plan (see gemm.cu). */
typedef struct kcuda_gemm_plan kcuda_gemm_plan;

/* Backend state, owned by kern_ctx::cuda. */
typedef struct {
    int device;
    cudaStream_t stream;
    cublasLtHandle_t lt;
    cublasHandle_t blas;        /* fallback GEMM when cuBLASLt has no algorithm */
    void *gemm_ws;              /* GEMM workspace, shared by lt and blas (one stream) */
    size_t gemm_ws_bytes;
    int n_sms;
    int cc;                     /* compute capability, 10 major + minor (90: Hopper) */
    size_t smem_optin;          /* max dynamic shared memory per block after opt-in */
    size_t l2_bytes;            /* L2 cache size */
    char name[256];
    kcuda_gemm_plan *plans;     /* [KCUDA_GEMM_PLANS] cache, gemm.cu */
    int n_plans, next_plan;
    int *attn_merge_cnt;        /* [KC_ATTN_MERGE_COUNTERS(n_sms)] decode fused-merge counters, attention.cu */
} kcuda_state;

#define KCUDA_GEMM_WS_BYTES ((size_t)32 << 20)
#define KCUDA_GEMM_PLANS 256

/* Abort with the failed statement, the CUDA error, function, file:line and
 * device. Defined in ctx.cu. */
extern "C" void kcuda_fatal(const char *stmt, const char *err, const char *func, const char *file,
                            int line) __attribute__((noreturn));

#define CUDA_CHECK(stmt)                                                                    \
    do {                                                                                    \
        cudaError_t kc_err_ = (stmt);                                                       \
        if (__builtin_expect(kc_err_ != cudaSuccess, 0))                                    \
            kcuda_fatal(#stmt, cudaGetErrorString(kc_err_), __func__, __FILE__, __LINE__); \
    } while (0)

#define CUBLAS_CHECK(stmt)                                                                      \
    do {                                                                                        \
        cublasStatus_t kc_st_ = (stmt);                                                         \
        if (__builtin_expect(kc_st_ != CUBLAS_STATUS_SUCCESS, 0))                               \
            kcuda_fatal(#stmt, cublasGetStatusString(kc_st_), __func__, __FILE__, __LINE__);   \
    } while (0)

/* After every launch: a bad configuration shows up here, not three ops later. */
#define KCUDA_LAUNCH_CHECK() CUDA_CHECK(cudaGetLastError())

/* Destroys the cached cuBLASLt plans (gemm.cu); called by ctx free. */
void kcuda_gemm_release(kcuda_state *st);

/* The backend state of a CUDA ctx; makes its device current on this thread
 * (cheap; lets another thread than the creator drive the ctx). */
static inline kcuda_state *kcuda_st(const kern_ctx *ctx)
{
    kcuda_state *st = (kcuda_state *)ctx->cuda;
    INFERD_CHECK(ctx->backend == KERN_BACKEND_CUDA && st != NULL);
    CUDA_CHECK(cudaSetDevice(st->device));
    return st;
}

static inline unsigned kcuda_cdiv(int64_t a, int64_t b)
{
    return (unsigned)((a + b - 1) / b);
}

/* True when p is aligned to `a` bytes. */
static inline bool kcuda_aligned(const void *p, size_t a)
{
    return ((uintptr_t)p & (a - 1)) == 0;
}

/* --- device helpers -------------------------------------------------------- */

__device__ __forceinline__ float kc_bf2f(uint16_t h)
{
    return __uint_as_float((uint32_t)h << 16);
}

/* Round to nearest even, NaN kept (as common/half.h half_f32_to_bf16). */
__device__ __forceinline__ uint16_t kc_f2bf(float f)
{
    return __bfloat16_as_ushort(__float2bfloat16_rn(f));
}

/* 8 bf16 packed in a uint4 <-> 8 floats. */
__device__ __forceinline__ void kc_unpack8(uint4 v, float *f)
{
    const uint32_t w[4] = {v.x, v.y, v.z, v.w};
#pragma unroll
    for (int i = 0; i < 4; i++) {
        f[2 * i] = __uint_as_float(w[i] << 16);
        f[2 * i + 1] = __uint_as_float(w[i] & 0xFFFF0000u);
    }
}

__device__ __forceinline__ uint4 kc_pack8(const float *f)
{
    uint32_t w[4];
#pragma unroll
    for (int i = 0; i < 4; i++)
        w[i] = (uint32_t)kc_f2bf(f[2 * i]) | ((uint32_t)kc_f2bf(f[2 * i + 1]) << 16);
    return make_uint4(w[0], w[1], w[2], w[3]);
}

/* --- fp8 e4m3 KV cache elements (kern_fp8.h) --- */

/* The e4m3 code of f, rounded to nearest even and saturated to +-448: the
 * hardware conversion (cvt.rn.satfinite.e4m3x2.f32); the host emulator
 * runs kern_fp8.h's, which test_cuda_kernels checks against it. */
__device__ __forceinline__ uint8_t kc_f2e4m3(float f)
{
#if defined(KEMU_H)
    return kern_f32_to_e4m3(f);
#else
    return (uint8_t)__nv_cvt_float_to_fp8(f, __NV_SATFINITE, __NV_E4M3);
#endif
}

/* Bytes 2i, 2i + 1 of w (e4m3 codes, i = 0 or 1) -> an f16 pair (the
 * lower byte in the lower half), exactly: every e4m3 value is an f16; one
 * hardware conversion (the fp8 tensor-core decode body feeds f16 mma with
 * it). */
__device__ __forceinline__ uint32_t kc_e4m3x2_f16x2(uint32_t w, int i)
{
    const uint16_t pair = (uint16_t)(w >> (16 * i));
#if defined(KEMU_H)
    return (uint32_t)half_f32_to_f16(kern_e4m3_to_f32((uint8_t)pair)) |
           (uint32_t)half_f32_to_f16(kern_e4m3_to_f32((uint8_t)(pair >> 8))) << 16;
#else
    const __half2_raw hr = __nv_cvt_fp8x2_to_halfraw2((__nv_fp8x2_storage_t)pair, __NV_E4M3);
    return (uint32_t)hr.x | (uint32_t)hr.y << 16;
#endif
}

/* 8 e4m3 codes (byte i of v = element i) -> 8 floats, exactly: pairs
 * through kc_e4m3x2_f16x2, then to fp32. */
__device__ __forceinline__ void kc_unpack8_e4m3(uint2 v, float *f)
{
    const uint32_t w[2] = {v.x, v.y};
#pragma unroll
    for (int i = 0; i < 2; i++)
#pragma unroll
        for (int j = 0; j < 2; j++) {
            const uint32_t h = kc_e4m3x2_f16x2(w[i], j);
            f[4 * i + 2 * j] = __half2float(__ushort_as_half((unsigned short)(h & 0xFFFFu)));
            f[4 * i + 2 * j + 1] = __half2float(__ushort_as_half((unsigned short)(h >> 16)));
        }
}

/* Element i of a KV cache: the bf16 bits b as they are, or, when fp8, the
 * e4m3 code of b's value (kern_rope_kv_params.kv_fp8). */
__device__ __forceinline__ void kc_kv_store(void *cache, int64_t i, uint16_t b, bool fp8)
{
    if (fp8)
        static_cast<uint8_t *>(cache)[i] = kc_f2e4m3(kc_bf2f(b));
    else
        static_cast<uint16_t *>(cache)[i] = b;
}

/* Asynchronous 16-byte copies global -> shared (cp.async, sm_80+), used by
 * the tensor-core prefill tiles, the decode kernel's pipeline and the GEMV's
 * ring:
 * kc_cp_async16 zero-fills the 16 bytes without reading memory when !valid;
 * kc_cp_commit closes this thread's group of copies; kc_cp_wait<N> returns
 * once at most N of its groups are in flight (the others' bytes are then
 * visible to this thread; other threads need a barrier); kc_cp_async8
 * copies 8 bytes (the fp8 decode ring). Under the host emulator (kemu.h)
 * the copy is immediate. */
#if defined(KEMU_H)
static inline void kc_cp_async16(void *smem, const void *gmem, bool valid)
{
    if (valid)
        memcpy(smem, gmem, 16);
    else
        memset(smem, 0, 16);
}
static inline void kc_cp_async8(void *smem, const void *gmem, bool valid)
{
    if (valid)
        memcpy(smem, gmem, 8);
    else
        memset(smem, 0, 8);
}
static inline void kc_cp_commit(void)
{
}
template <int N> static inline void kc_cp_wait(void)
{
}
#else
__device__ __forceinline__ void kc_cp_async16(void *smem, const void *gmem, bool valid)
{
    const uint32_t s = (uint32_t)__cvta_generic_to_shared(smem);
    const int n = valid ? 16 : 0;
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(s), "l"(gmem), "r"(n) : "memory");
}
/* The same for 8 bytes (cp.async.ca: .cg copies only 16). */
__device__ __forceinline__ void kc_cp_async8(void *smem, const void *gmem, bool valid)
{
    const uint32_t s = (uint32_t)__cvta_generic_to_shared(smem);
    const int n = valid ? 8 : 0;
    asm volatile("cp.async.ca.shared.global [%0], [%1], 8, %2;\n" ::"r"(s), "l"(gmem), "r"(n) : "memory");
}
__device__ __forceinline__ void kc_cp_commit(void)
{
    asm volatile("cp.async.commit_group;\n" ::: "memory");
}
template <int N> __device__ __forceinline__ void kc_cp_wait(void)
{
    asm volatile("cp.async.wait_group %0;\n" ::"n"(N) : "memory");
}
#endif

/* Pull the 128-byte line at p into this SM's L1 (a hint: no register
 * waits on it), so that a load of it after a barrier or a reduction does
 * not pay its L2 round trip there. */
__device__ __forceinline__ void kc_prefetch_l1(const void *p)
{
#if !defined(KEMU_H) && defined(__CUDA_ARCH__)
    asm volatile("prefetch.global.L1 [%0];" ::"l"(p));
#else
    (void)p;
#endif
}

/* Programmatic dependent launch, primary side: let the next kernel on the
 * stream, when it is launched with the programmatic-serialization attribute
 * (the decode GEMV, gemv.cu), start now. Its CTAs then fill the SMs this
 * kernel leaves idle (a batch-1 RMSNorm is one CTA) and stream their first
 * weights while this kernel runs; they wait (griddepcontrol.wait) for this
 * grid to finish before reading its output. Called first thing by the small
 * per-layer kernels; no effect on a dependent launched without the
 * attribute.
 * -DKC_NO_PDL_TRIGGER turns it off (for measurements). */
__device__ __forceinline__ void kc_pdl_trigger(void)
{
#if !defined(KEMU_H) && !defined(KC_NO_PDL_TRIGGER) && defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    asm volatile("griddepcontrol.launch_dependents;" ::: "memory");
#endif
}

/* Programmatic dependent launch, dependent side: wait until the previous
 * kernel on the stream has finished and its writes are visible (a no-op
 * when this kernel was launched without the attribute). Before it a
 * kernel may read only what no kernel of the step writes (the step's
 * uploaded inputs: query_start_loc, seq_lens, block tables) and the
 * weights. */
__device__ __forceinline__ void kc_pdl_wait(void)
{
#if !defined(KEMU_H) && defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    asm volatile("griddepcontrol.wait;" ::: "memory");
#endif
}

/* Whether the small per-layer kernels of an n-token step (add + RMSNorm,
 * SiLU * up, RoPE + KV write, the decode attention and merge) launch as
 * programmatic dependents (kc_launch's pdl; each waits first): where the
 * step's products run on cuBLASLt (n > gemv_max_n), whose kernels end
 * without triggering, the launch then overlaps the GEMM's end (batch 64
 * decode steps 2% faster on an H100). Not after the GEMVs (n <=
 * gemv_max_n): there, launched early, they and the GEMV behind them
 * crowded the SMs (batch 16 4.5% slower; docs/PERF.md, eleventh session).
 * A function of n alone, so a padded graph replay launches as the eager
 * step does. */
static inline bool kcuda_ops_pdl(const kern_ctx *ctx, int64_t n)
{
    return n > ctx->gemm.gemv_max_n;
}

/* Launch kern<<<grid, block, smem, s>>>(args), with the programmatic
 * stream-serialization attribute when pdl (the kernel then calls
 * kc_pdl_wait before reading what the previous kernel wrote). Valid inside
 * CUDA graphs (captured as a programmatic edge). */
template <class A>
static void kc_launch(void (*kern)(const A), dim3 grid, unsigned block, size_t smem, cudaStream_t s, bool pdl,
                      const A &args)
{
#ifndef KEMU_H
    if (pdl) {
        cudaLaunchConfig_t cfg = {};
        cudaLaunchAttribute attr[1] = {};
        attr[0].id = cudaLaunchAttributeProgrammaticStreamSerialization;
        attr[0].val.programmaticStreamSerializationAllowed = 1;
        cfg.gridDim = grid;
        cfg.blockDim = dim3(block);
        cfg.dynamicSmemBytes = smem;
        cfg.stream = s;
        cfg.attrs = attr;
        cfg.numAttrs = 1;
        CUDA_CHECK(cudaLaunchKernelEx(&cfg, kern, args));
        return;
    }
    kern<<<grid, block, smem, s>>>(args);
#else
    (void)pdl; /* the host emulator runs kernels one after another */
    kemu_launch(kern, grid, dim3(block), smem, s, args);
#endif
}

/* The RoPE rotation of the pair (x1, x2) by cos cs and sin sn, rounded to
 * bf16: o1 = x1 cs - x2 sn, o2 = x2 cs + x1 sn, each as one explicit FMA
 * on a rounded product (the rope kernel and the fused GEMV's epilogue
 * share it, so their bits agree: written as x1 * cs - x2 * sn, the
 * compiler chose the contraction per kernel, and one of them differed
 * from the other in the last fp32 bit on some inputs). */
__device__ __forceinline__ void kc_rope_rotate(float x1, float x2, float cs, float sn, uint16_t *o1, uint16_t *o2)
{
    *o1 = kc_f2bf(fmaf(x1, cs, -__fmul_rn(x2, sn)));
    *o2 = kc_f2bf(fmaf(x2, cs, __fmul_rn(x1, sn)));
}

/* RMSNorm's scale 1 / sqrt(ss / n + eps) from a row's sum of squares ss
 * over n elements, in double and rounded once to float: every norm (the
 * add + RMSNorm kernel, Qwen3's q/k norms, the GEMV's prologue) takes it
 * from here, so their bits agree. */
__device__ __forceinline__ float kc_inv_rms(float ss, int n, float eps)
{
    return (float)(1.0 / sqrt((double)ss / (double)n + (double)eps));
}

/* silu(g) * u in fp32 (kern_silu_mul and the fused GEMV's epilogue). */
__device__ __forceinline__ float kc_silu_mul(float g, float u)
{
    return g / (1.0f + expf(-g)) * u;
}

__device__ __forceinline__ float kc_warp_sum(float v)
{
#pragma unroll
    for (int o = 16; o > 0; o >>= 1)
        v += __shfl_xor_sync(0xFFFFFFFFu, v, o);
    return v;
}

__device__ __forceinline__ float kc_warp_max(float v)
{
#pragma unroll
    for (int o = 16; o > 0; o >>= 1)
        v = fmaxf(v, __shfl_xor_sync(0xFFFFFFFFu, v, o));
    return v;
}

/* Sum of v over the block; every thread gets the result. red: __shared__
 * float[33]. blockDim.x must be a multiple of 32. Contains barriers: call
 * from all threads. */
__device__ __forceinline__ float kc_block_sum(float v, float *red)
{
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, nw = blockDim.x >> 5;
    v = kc_warp_sum(v);
    if (lane == 0)
        red[warp] = v;
    __syncthreads();
    if (warp == 0) {
        float t = lane < nw ? red[lane] : 0.0f;
        t = kc_warp_sum(t);
        if (lane == 0)
            red[32] = t;
    }
    __syncthreads();
    float r = red[32];
    __syncthreads(); /* red may be reused right after */
    return r;
}

/* exp that maps a -inf difference to 0 (online-softmax rescale factors). */
__device__ __forceinline__ float kc_exp_diff(float a, float b)
{
    return a == -INFINITY ? 0.0f : expf(a - b);
}

#endif
