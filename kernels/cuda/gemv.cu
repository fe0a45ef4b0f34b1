/* kernels/cuda/gemv.cu: small-batch matmul / logits (n = 1..KCUDA_GEMV_MAX_N
 * tokens) as a weight-streaming GEMV. CPU twin: kcpu_matmul / kcpu_logits
 * (kernels/cpu/gemm.c); gemm.cu routes a product here (kcuda_gemv_fits).
 *
 * At n <= 16 a product out[n, R] = in[n, C] @ W[R, C]^T is bound by reading
 * W once: 2 R C bytes against 2 n R C FLOPs. cuBLASLt's kernels for these
 * shapes reach 60-75% of the copy bandwidth (docs/PERF.md); this kernel is
 * built to keep the HBM busy instead:
 *  - each warp owns RPW consecutive output rows; a lane reads 16-byte chunks
 *    (8 bf16) of each row, chunk k = lane + 32 j, so a warp load is 512
 *    contiguous bytes; weight loads bypass L1 (ld.global.nc.L1::no_allocate)
 *    so the activations stay there;
 *  - software pipelining: U chunks of each of the RPW rows are loaded for
 *    step j + 1 before step j is multiplied, RPW * U 16-byte loads in flight
 *    per lane at all times;
 *  - every weight chunk is unpacked once and multiplied with all n token
 *    rows (16-byte L1-cached loads of the input); fp32 accumulation; one warp
 *    reduction per (row, token) at the end;
 *  - programmatic dependent launch (PDL): the kernel is launched with the
 *    programmatic-serialization attribute, loads its first weight chunks
 *    (which no earlier kernel writes), then waits (griddepcontrol.wait) for
 *    the previous kernel before reading the input or writing the output. The
 *    launch latency and the first loads overlap the previous kernel's tail.
 *    Valid inside CUDA graphs (captured as a programmatic edge).
 * RPW and U shrink/grow with n so registers stay under ~128 per thread and
 * the L1 traffic of the input (n / RPW input chunks per weight chunk) stays
 * under the L1 rate: n <= 2: RPW 2, U 2 and 8 CTAs per SM (variant 1, the
 * default: more warps resident rather than more loads per warp, so the
 * 6144- and 4096-row matrices run in one wave: QKV 84 -> 92%, O 82 -> 87%
 * of the copy bandwidth at n = 1 on an H100); n 3..4 (and n <= 2 with
 * variant 0): RPW 2, U 4; n > 4: RPW 4, U 2. RPW is 2 up to n = 4 and
 * chunks are summed in k order whatever U is, so the bits do not depend on
 * the variant either.
 *
 * Numerics: the summation order of a (row, token) output depends only on C
 * and the lane layout, not on n: a token's result is bitwise the same in a
 * batch of 1 or of 16 (a padded graph replay equals the eager step), unlike
 * cuBLAS. It differs from the CPU twin only in summation order (fp32).
 *
 * Requirements (else gemm.cu uses cuBLASLt): C % 8 == 0, W and in 16-byte
 * aligned, 1 <= n <= KCUDA_GEMV_MAX_N, R < 2^31.
 */
#include "kernels/cuda/common.cuh"

#define GEMV_WARPS 4 /* warps per CTA */

/* 16 bytes of weights, streamed: no L1 allocation, read-only path. */
__device__ __forceinline__ uint4 gemv_ld_stream(const uint4 *p)
{
#ifndef KEMU_H
    uint4 v;
    asm("ld.global.nc.L1::no_allocate.v4.u32 {%0, %1, %2, %3}, [%4];"
        : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w)
        : "l"(p));
    return v;
#else
    return *p;
#endif
}

/* Wait until the previous kernel on the stream has finished and its writes
 * are visible (a no-op when launched without the PDL attribute). */
__device__ __forceinline__ void gemv_wait_prior(void)
{
#if !defined(KEMU_H) && defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    asm volatile("griddepcontrol.wait;" ::: "memory");
#endif
}

/* Chunks k0 + 32 u (u < U) of RPW rows into wv; chunks past the row end
 * are left as they are (never used). */
template <int RPW, int U>
__device__ __forceinline__ void gemv_load_w(uint4 (&wv)[RPW][U], const uint4 *const (&wr)[RPW], int k0, int nch)
{
#pragma unroll
    for (int u = 0; u < U; u++)
        if (k0 + 32 * u < nch) {
#pragma unroll
            for (int r = 0; r < RPW; r++)
                wv[r][u] = gemv_ld_stream(wr[r] + k0 + 32 * u);
        }
}

/* out[t, row] = in[t, :] . W[row, :] for t < NT and the warp's RPW rows.
 * out: [NT, R] bf16 or fp32; in: [NT, C] bf16; w: [R, C] bf16. */
template <int NT, int RPW, int U, bool F32, int MINB>
static __global__ void __launch_bounds__(GEMV_WARPS * 32, MINB)
    gemv_kernel(void *__restrict__ out, const uint16_t *__restrict__ in, const uint16_t *__restrict__ w, int R,
                int C)
{
    const int lane = threadIdx.x & 31;
    const int row0 = (int)(blockIdx.x * GEMV_WARPS + (threadIdx.x >> 5)) * RPW;
    const int nch = C >> 3; /* 16-byte chunks per row */
    if (row0 >= R) {
        gemv_wait_prior();
        return;
    }
    const uint4 *wr[RPW];
#pragma unroll
    for (int r = 0; r < RPW; r++) /* rows past R read row R-1; never written */
        wr[r] = reinterpret_cast<const uint4 *>(w + (size_t)min(row0 + r, R - 1) * (size_t)C);
    const uint4 *x = reinterpret_cast<const uint4 *>(in);
    float acc[RPW][NT];
#pragma unroll
    for (int r = 0; r < RPW; r++)
#pragma unroll
        for (int t = 0; t < NT; t++)
            acc[r][t] = 0.0f;
    uint4 wv[RPW][U];
    gemv_load_w<RPW, U>(wv, wr, lane, nch);
    gemv_wait_prior(); /* the input is the previous kernel's output */
    for (int k0 = lane; k0 < nch; k0 += 32 * U) {
        uint4 cur[RPW][U];
#pragma unroll
        for (int r = 0; r < RPW; r++)
#pragma unroll
            for (int u = 0; u < U; u++)
                cur[r][u] = wv[r][u];
        if (k0 + 32 * U < nch) /* next step's loads in flight during this step's math */
            gemv_load_w<RPW, U>(wv, wr, k0 + 32 * U, nch);
#pragma unroll
        for (int u = 0; u < U; u++) {
            const int k = k0 + 32 * u;
            if (k >= nch)
                break;
            float wf[RPW][8];
#pragma unroll
            for (int r = 0; r < RPW; r++)
                kc_unpack8(cur[r][u], wf[r]);
#pragma unroll
            for (int t = 0; t < NT; t++) {
                float xf[8];
                kc_unpack8(__ldg(x + (size_t)t * nch + k), xf);
#pragma unroll
                for (int r = 0; r < RPW; r++)
#pragma unroll
                    for (int j = 0; j < 8; j++)
                        acc[r][t] = fmaf(wf[r][j], xf[j], acc[r][t]);
            }
        }
    }
#pragma unroll
    for (int r = 0; r < RPW; r++)
#pragma unroll
        for (int t = 0; t < NT; t++) {
            const float s = kc_warp_sum(acc[r][t]);
            if (lane == 0 && row0 + r < R) {
                const size_t o = (size_t)t * (size_t)R + (size_t)(row0 + r);
                if (F32)
                    static_cast<float *>(out)[o] = s;
                else
                    static_cast<uint16_t *>(out)[o] = kc_f2bf(s);
            }
        }
}

/* Launch one instantiation: grid = ceil(R / (RPW * GEMV_WARPS)) CTAs of
 * GEMV_WARPS warps; with PDL the launch may begin before the previous
 * kernel on the stream ends (the kernel waits before touching its input). */
template <int NT, bool F32, int RPW, int U, int MINB>
static void gemv_launch(cudaStream_t s, bool pdl, void *out, const uint16_t *in, const uint16_t *w, int R, int C)
{
    const unsigned grid = kcuda_cdiv(R, (int64_t)RPW * GEMV_WARPS);
    void (*kern)(void *, const uint16_t *, const uint16_t *, int, int) = gemv_kernel<NT, RPW, U, F32, MINB>;
#ifndef KEMU_H
    if (pdl) {
        cudaLaunchConfig_t cfg = {};
        cudaLaunchAttribute attr[1] = {};
        attr[0].id = cudaLaunchAttributeProgrammaticStreamSerialization;
        attr[0].val.programmaticStreamSerializationAllowed = 1;
        cfg.gridDim = dim3(grid);
        cfg.blockDim = dim3(GEMV_WARPS * 32);
        cfg.dynamicSmemBytes = 0;
        cfg.stream = s;
        cfg.attrs = attr;
        cfg.numAttrs = 1;
        CUDA_CHECK(cudaLaunchKernelEx(&cfg, kern, out, in, w, R, C));
        return;
    }
#else
    (void)pdl;
#endif
    kern<<<grid, GEMV_WARPS * 32, 0, s>>>(out, in, w, R, C);
}

/* Shapes per n: RPW rows per warp, U chunks per row in flight, MINB CTAs
 * per SM asked of the register allocator. Variant 1 (the default, n <= 2
 * only; INFERD_GEMV_VARIANT=0 turns it off): U 2 and 8 CTAs per SM, more
 * warps resident instead of more loads per warp. */
template <int NT, bool F32>
static void gemv_launch_n(cudaStream_t s, bool pdl, int variant, void *out, const uint16_t *in, const uint16_t *w,
                          int R, int C)
{
    if constexpr (NT <= 2) {
        if (variant == 1)
            gemv_launch<NT, F32, 2, 2, 8>(s, pdl, out, in, w, R, C);
        else
            gemv_launch<NT, F32, 2, 4, 1>(s, pdl, out, in, w, R, C);
    } else if constexpr (NT <= 4) {
        (void)variant;
        gemv_launch<NT, F32, 2, 4, 1>(s, pdl, out, in, w, R, C);
    } else {
        (void)variant;
        gemv_launch<NT, F32, 4, 2, 1>(s, pdl, out, in, w, R, C);
    }
}

template <bool F32>
static void gemv_dispatch(cudaStream_t s, bool pdl, int variant, void *out, const uint16_t *in, const uint16_t *w,
                          int R, int C, int n)
{
    switch (n) {
#define GEMV_CASE(N)                                                                                               \
    case N:                                                                                                        \
        gemv_launch_n<N, F32>(s, pdl, variant, out, in, w, R, C);                                                  \
        break;
        GEMV_CASE(1)
        GEMV_CASE(2)
        GEMV_CASE(3)
        GEMV_CASE(4)
        GEMV_CASE(5)
        GEMV_CASE(6)
        GEMV_CASE(7)
        GEMV_CASE(8)
        GEMV_CASE(9)
        GEMV_CASE(10)
        GEMV_CASE(11)
        GEMV_CASE(12)
        GEMV_CASE(13)
        GEMV_CASE(14)
        GEMV_CASE(15)
        GEMV_CASE(16)
#undef GEMV_CASE
    default: INFERD_CHECK_MSG(false, "gemv: n outside [1, 16]");
    }
}

/* Contract: true when the GEMV kernel can compute this product (see the
 * requirements at the top); the choice of using it is gemm.cu's. */
bool kcuda_gemv_fits(const void *in, const kern_weight *w, int n)
{
    return n >= 1 && n <= KCUDA_GEMV_MAX_N && w->dtype == KERN_DTYPE_BF16 && w->cols % 8 == 0 &&
           w->rows <= INT32_MAX && w->cols <= INT32_MAX && kcuda_aligned(w->data, 16) && kcuda_aligned(in, 16);
}

/* Contract: out[n, w->rows] = in[n, w->cols] @ w^T (bf16 out, or fp32 when
 * out_f32) on the ctx's stream; kcuda_gemv_fits must hold; pdl: launch with
 * programmatic dependent launch. out must not overlap in. */
void kcuda_gemv(kern_ctx *ctx, void *out, int out_f32, const void *in, const kern_weight *w, int n, bool pdl)
{
    kcuda_state *st = kcuda_st(ctx);
    INFERD_CHECK(kcuda_gemv_fits(in, w, n));
    const uint16_t *x = static_cast<const uint16_t *>(in), *wd = static_cast<const uint16_t *>(w->data);
    if (out_f32)
        gemv_dispatch<true>(st->stream, pdl, ctx->gemm.gemv_variant, out, x, wd, (int)w->rows, (int)w->cols, n);
    else
        gemv_dispatch<false>(st->stream, pdl, ctx->gemm.gemv_variant, out, x, wd, (int)w->rows, (int)w->cols, n);
    KCUDA_LAUNCH_CHECK();
}
