/* kernels/cuda/gemm_wg.cu: the decode products of 17..64 tokens
 * (kern_gemm_opts.wg_min_n .. wg_max_n; opt-in, INFERD_GEMM_WG_MAX_N=64)
 * on Hopper's warpgroup tensor-core product (wgmma), as a weight-streaming
 * GEMM of our own.
 * CPU twin: kcpu_matmul / kcpu_logits / kcpu_matmul_accum
 * (kernels/cpu/gemm.c); gemm.cu routes a product here (kcuda_gemm_wg_route).
 *
 * Why: at 17..64 tokens a product out[n, R] = in[n, C] @ W[R, C]^T still
 * costs what reading W costs (64 FLOPs a weight byte at most), but
 * cuBLASLt's kernels for these shapes reach only 74-80% of the copy
 * bandwidth on Llama-3-8B's QKV and O (docs/PERF.md): their tiles leave a
 * partial last wave on 132 SMs, and they cannot overlap their start with
 * the previous kernel's end. Here:
 *  - the weights are the wgmma's A operand, a tile of WGG_M = 64 rows; the
 *    n tokens its B operand, N = 64 columns (tokens past n zero-filled), so
 *    one m64n64k16 product covers the whole batch and a token's result
 *    depends on its own input row only: bitwise the same at every n the
 *    route takes (a padded graph replay equals the eager step);
 *  - stream-K: the (tile, 64-wide k unit) pairs, tile-major, are cut into
 *    gridDim.x equal ranges, one a CTA (one warpgroup), so every SM streams
 *    the same number of weight bytes whatever R is. A tile whose k range
 *    two or more CTAs share is summed by the last of them to finish: each
 *    writes its fp32 partial (fragment order) to a slot of the workspace,
 *    counts its arrival in the tile's counter, and the last adds the slots
 *    in k order (so the sum's order is fixed by R, C and the grid, never by
 *    which CTA came last) and runs the epilogue, as the decode attention's
 *    fused merge does (attention_decode.cu);
 *  - both operands go through a ring of STAGES units in shared memory by
 *    cp.async (16-byte copies into the 128-byte swizzle the descriptors
 *    describe, mma.cuh), STAGES - 1 units in flight while one is
 *    multiplied; the weights of the first STAGES - 1 units are requested
 *    before the PDL wait (programmatic dependent launch, as the GEMV), so
 *    they arrive while the kernel before this one ends;
 *  - epilogues: the bf16 store (kern_matmul), the fp32 store (kern_logits),
 *    the residual add (kern_matmul_accum: resid = bf16(resid + the fp32
 *    product), rounded once, as cuBLASLt's beta = 1) and kern_matmul_fused's
 *    RESID and SILU_MUL (with the folded norm's 1 / rms: each CTA sums the
 *    tokens' squares from the input tiles it holds, carried in the slots
 *    as the products are); ROPE_KV is the product, then the RoPE kernel.
 * Measured on an H100 (docs/PERF.md, thirtieth session): in steady state
 * it streams at the copy bandwidth (lm_head: 94%), but a launch costs
 * 10-13 us more than its bytes (cuBLASLt: about 5), so it ran QKV and O at
 * 52-56% of the copy bandwidth against cuBLASLt's 74-79%; hence opt-in.
 * ncu: 8 warps an SM busy issuing (every thread's 8 cp.async a unit with
 * their address arithmetic), not waiting on memory, so too few bytes are
 * in flight; and a 96 KiB ring a CTA leaves no room for the next
 * product's CTAs, so the PDL prologue overlaps nothing. TMA loads from a
 * producer warp are the next form (docs/PERF.md).
 * Grid: kern_gemm_opts.wg_ctas CTAs an SM (1..4, with 8 / 6 / 4 / 3 stages
 * of 16 KiB), at most one a unit; wg_grid overrides the count (tests).
 * Requirements (else cuBLASLt): compute capability 9.0, C % 8 == 0, W and
 * in 16-byte aligned, R <= 64 KCUDA_WG_MAX_TILES.
 */
#include "kernels/cuda/common.cuh"
#include "kernels/cuda/mma.cuh"

/* Test hook (test_cuda_kernels): launches so far. */
extern "C" int kcuda_gemm_wg_launches;
int kcuda_gemm_wg_launches;

#define WGG_M 64                          /* weight rows a tile: the wgmma's M */
#define WGG_K 64                          /* k a unit: one 128-byte row of a swizzled tile */
#define WGG_THREADS 128                   /* one warpgroup */
#define WGG_TILE (WGG_M * WGG_K)          /* elements of a stage's A (or B: 64 tokens) */
#define WGG_TILE_BYTES (WGG_TILE * 2)     /* 8 KiB */
#define WGG_FRAG (WGG_M * KCUDA_WG_MAX_N) /* floats of a tile's sums */
#define WGG_SLOT (WGG_FRAG + KCUDA_WG_MAX_N) /* floats of a partial slot: the sums, then the tokens' sums of squares */

/* What the epilogue does with a tile's sums (kernels.h's epilogues):
 * bf16 store, fp32 store (logits), the add with one rounding
 * (kern_matmul_accum), RESID (kern_fuse: bf16(resid + bf16(product))) and
 * SILU_MUL (a tile's 64 rows are 32 gate rows and the same 32 up rows). */
enum { WGG_STORE, WGG_F32, WGG_ACCUM, WGG_RESID, WGG_SILU };

typedef struct {
    const uint16_t *w;  /* [R, C] */
    const uint16_t *in; /* [n, C] */
    void *out;          /* [n, R] ([n, R / 2] for WGG_SILU): bf16, fp32, or the bf16 residual stream */
    float *ws;          /* [2 gridDim.x][WGG_SLOT] partial slots, fragment order */
    int *cnt;           /* [tiles] arrival counters: 0 between launches */
    int R, C, n, kb;    /* kb: k units a tile, ceil(C / WGG_K) */
    int64_t units;      /* tiles * kb */
    int epi;            /* WGG_* */
    int rms;            /* a folded norm: each token's outputs scaled by 1 / rms(in row) first (SILU only) */
    float eps;
} wgg_args;

/* First unit of CTA i's range: units are cut into gridDim.x ranges of
 * floor or ceil(units / grid) units. */
__device__ __forceinline__ int64_t wgg_begin(const wgg_args &a, int64_t i)
{
    return i * a.units / gridDim.x;
}

/* The CTA whose range holds unit u (the largest i with wgg_begin(i) <= u;
 * every range is non-empty, grid <= units). */
__device__ __forceinline__ int wgg_cta_of(const wgg_args &a, int64_t u)
{
    return (int)(((u + 1) * gridDim.x + a.units - 1) / a.units - 1);
}

/* Copies of unit u's k range into a stage: rows r of [row0, row0 + rows)
 * of src ([*, C]), 8 chunks of 16 bytes a row into the 128-byte swizzle
 * (chunk ch of row r at chunk ch ^ (r % 8)); rows past `rows` and k past C
 * zero-filled without a read. */
/* Tile row r's source row, from src: r itself, or with pairs (SILU) the
 * gate row 8 (r / 16) + r % 8 for r % 16 < 8 and that row's up row `up`
 * rows further for the others, so the thread holding a tile row's sums
 * (rows g and g + 8 of a warp's 16, mma.cuh) holds a gate and its up; the
 * source row is valid below `rows` (before the up offset). */
__device__ __forceinline__ int wgg_src_row(int r, bool pairs)
{
    return pairs ? 8 * (r >> 4) + (r & 7) : r;
}

__device__ __forceinline__ void wgg_load(const uint16_t *src, int rows, int64_t up, int C, int k0, uint16_t *stage)
{
#pragma unroll
    for (int j = 0; j < WGG_TILE / 8 / WGG_THREADS; j++) {
        const int i = threadIdx.x + j * WGG_THREADS, r = i >> 3, ch = i & 7, k = k0 + ch * 8;
        const int sr = wgg_src_row(r, up > 0);
        const bool ok = sr < rows && k < C;
        const int64_t row = sr + ((r >> 3) & 1) * up;
        kc_cp_async16(stage + r * WGG_K + ((ch ^ (r & 7)) << 3), ok ? src + row * C + k : src, ok);
    }
}

/* Weight rows of tile t at k unit kbi: 64 from 64 t, or (SILU) the gate
 * and up rows of the outputs [32 t, +32) (the up rows R / 2 further). */
__device__ __forceinline__ void wgg_load_w(const wgg_args &a, int t, int kbi, uint16_t *stage)
{
    const int k0 = kbi * WGG_K;
    if (a.epi == WGG_SILU) {
        const int f = a.R / 2, j0 = t * (WGG_M / 2);
        wgg_load(a.w + (int64_t)j0 * a.C, min(WGG_M / 2, f - j0), f, a.C, k0, stage);
    } else {
        const int m0 = t * WGG_M;
        wgg_load(a.w + (int64_t)m0 * a.C, min(WGG_M, a.R - m0), 0, a.C, k0, stage);
    }
}

__device__ __forceinline__ void wgg_load_x(const wgg_args &a, int kbi, uint16_t *stage)
{
    wgg_load(a.in, a.n, 0, a.C, kbi * WGG_K, stage);
}

/* The next unit (tile t, k unit kbi) in tile-major order. */
__device__ __forceinline__ void wgg_next(const wgg_args &a, int &t, int &kbi)
{
    if (++kbi == a.kb) {
        kbi = 0;
        t++;
    }
}

/* The folded norm's sums of squares (a.rms): this thread's share of unit
 * q's input tile (token threadIdx.x / 2, its k half threadIdx.x % 2: four
 * 16-byte chunks of the swizzled row) added to ss; tokens past n hold 0. */
__device__ __forceinline__ void wgg_sumsq(const uint16_t *stage, float &ss)
{
    const int r = threadIdx.x >> 1, h = threadIdx.x & 1;
#pragma unroll
    for (int c = 0; c < 4; c++) {
        float v[8];
        kc_unpack8(*(const uint4 *)(stage + r * WGG_K + (((4 * h + c) ^ (r & 7)) << 3)), v);
#pragma unroll
        for (int e = 0; e < 8; e++)
            ss = fmaf(v[e], v[e], ss);
    }
}

/* fn(jt, e, col) for each token column col = 8 jt + 2 c + e below n that
 * this thread's sums d[jt][2 h + e] hold (mma.cuh's C fragment). */
template <class F> __device__ __forceinline__ void wgg_each_col(const wgg_args &a, F fn)
{
    const int c = threadIdx.x & 3;
#pragma unroll
    for (int jt = 0; jt < 8; jt++)
#pragma unroll
        for (int e = 0; e < 2; e++)
            if (8 * jt + 2 * c + e < a.n)
                fn(jt, e, 8 * jt + 2 * c + e);
}

/* The epilogue of tile t from its sums d (d[j][2 h + e] = the product of
 * tile row 16 w + g + 8 h and token 8 j + 2 c + e, mma.cuh); sm_r: each
 * token's 1 / rms (a.rms). */
__device__ __forceinline__ void wgg_epilogue(const wgg_args &a, const float (&d)[8][4], int t, const float *sm_r)
{
    const int w = threadIdx.x >> 5, g = (threadIdx.x & 31) >> 2;
    uint16_t *o = static_cast<uint16_t *>(a.out);
    if (a.epi == WGG_SILU) { /* h = 0: gate, h = 1: its up */
        const int f = a.R / 2, j = t * (WGG_M / 2) + 8 * w + g;
        if (j < f)
            wgg_each_col(a, [&](int jt, int e, int col) {
                float gv = kc_bf2f(kc_f2bf(d[jt][e])), uv = kc_bf2f(kc_f2bf(d[jt][2 + e]));
                if (a.rms) {
                    gv = kc_bf2f(kc_f2bf(gv * sm_r[col]));
                    uv = kc_bf2f(kc_f2bf(uv * sm_r[col]));
                }
                o[(int64_t)col * f + j] = kc_f2bf(kc_silu_mul(gv, uv));
            });
        return;
    }
#pragma unroll
    for (int h = 0; h < 2; h++) {
        const int row = t * WGG_M + 16 * w + g + 8 * h;
        if (row < a.R)
            wgg_each_col(a, [&](int jt, int e, int col) {
                const int64_t i = (int64_t)col * a.R + row;
                const float v = d[jt][2 * h + e];
                switch (a.epi) {
                case WGG_F32: static_cast<float *>(a.out)[i] = v; break;
                case WGG_ACCUM: o[i] = kc_f2bf(kc_bf2f(o[i]) + v); break;
                case WGG_RESID: o[i] = kc_f2bf(kc_bf2f(o[i]) + kc_bf2f(kc_f2bf(v))); break;
                default: o[i] = kc_f2bf(v); break;
                }
            });
    }
}

/* After the unit that ends this CTA's segment of tile t (its sums in d,
 * its share of the tokens' sums of squares in ss when a.rms): the epilogue
 * where the segment is the whole tile; else the partial to this CTA's slot
 * (first: the segment is the CTA's first), the arrival counted, and the
 * last of the tile's CTAs sums every slot in k order and runs the
 * epilogue. Every thread calls it. sm: the flag and the tokens' 1 / rms.
 * NOTE: the fences make each partial visible before the count that admits
 * the summing CTA, and the others' partials visible to it after
 * (threadFenceReduction's pattern). */
__device__ __forceinline__ void wgg_finish(const wgg_args &a, float (&d)[8][4], float ss, int t, bool whole,
                                           bool first, int *sm_last, float *sm_r)
{
    const int tok = threadIdx.x >> 1;
    if (a.rms)
        ss += __shfl_xor_sync(0xFFFFFFFFu, ss, 1); /* the token's two k halves (a + b == b + a) */
    const int nj = (a.n + 7) >> 3; /* column tiles holding tokens: the partials carry only those */
    if (!whole) {
        float *slot = a.ws + (2 * (int64_t)blockIdx.x + (first ? 0 : 1)) * WGG_SLOT;
#pragma unroll
        for (int j = 0; j < 8; j++)
            if (j < nj)
                reinterpret_cast<float4 *>(slot)[j * WGG_THREADS + threadIdx.x] =
                    make_float4(d[j][0], d[j][1], d[j][2], d[j][3]);
        if (a.rms && (threadIdx.x & 1) == 0)
            slot[WGG_FRAG + tok] = ss;
        const int i0 = wgg_cta_of(a, (int64_t)t * a.kb), i1 = wgg_cta_of(a, (int64_t)(t + 1) * a.kb - 1);
        __threadfence();
        __syncthreads(); /* every thread's partial written; sm_last free */
        if (threadIdx.x == 0) {
            int *cnt = a.cnt + t;
            *sm_last = atomicAdd(cnt, 1) == i1 - i0;
            if (*sm_last) {
                *cnt = 0; /* every segment has counted: no one touches it again this launch */
                __threadfence();
            }
        }
        __syncthreads();
        if (!*sm_last)
            return;
#pragma unroll
        for (int j = 0; j < 8; j++)
            d[j][0] = d[j][1] = d[j][2] = d[j][3] = 0.0f;
        ss = 0.0f;
        for (int i = i0; i <= i1; i++) {
            const float *si = a.ws + (2 * (int64_t)i + (wgg_begin(a, i) / a.kb == t ? 0 : 1)) * WGG_SLOT;
#pragma unroll
            for (int j = 0; j < 8; j++) {
                if (j >= nj)
                    break;
                const float4 v = __ldcg(reinterpret_cast<const float4 *>(si) + j * WGG_THREADS + threadIdx.x);
                d[j][0] += v.x;
                d[j][1] += v.y;
                d[j][2] += v.z;
                d[j][3] += v.w;
            }
            if (a.rms)
                ss += __ldcg(si + WGG_FRAG + tok);
        }
    }
    if (a.rms) {
        if ((threadIdx.x & 1) == 0)
            sm_r[tok] = kc_inv_rms(ss, a.C, a.eps);
        __syncthreads();
    }
    wgg_epilogue(a, d, t, sm_r);
}

template <int STAGES> static __global__ void __launch_bounds__(WGG_THREADS) wgg_kernel(const wgg_args a)
{
    /* NOTE: no static shared memory, so the ring starts the window,
     * 1024-byte aligned as the swizzle needs; the flag follows the ring */
    extern __shared__ float4 wgg_sm4[];
    uint16_t *sA = (uint16_t *)wgg_sm4, *sB = sA + STAGES * WGG_TILE; /* stage s at + s WGG_TILE */
    int *sm_last = (int *)(sB + STAGES * WGG_TILE);
    float *sm_r = (float *)(sm_last + 4); /* [KCUDA_WG_MAX_N] */
    const int64_t u0 = wgg_begin(a, blockIdx.x);
    const int nu = (int)(wgg_begin(a, blockIdx.x + 1) - u0);
    int t = (int)(u0 / a.kb), kbi = (int)(u0 - (int64_t)t * a.kb), seg_k0 = kbi;
    int lt = t, lkbi = kbi; /* the next unit to load */
    /* cp.async groups: the weights of units 0 .. STAGES - 2 (before the
     * PDL wait), their inputs, then one group a unit */
#pragma unroll
    for (int s = 0; s < STAGES - 1; s++) {
        if (s < nu)
            wgg_load_w(a, lt, lkbi, sA + s * WGG_TILE);
        kc_cp_commit();
        wgg_next(a, lt, lkbi);
    }
    kc_pdl_wait();
    lkbi = kbi;
#pragma unroll
    for (int s = 0; s < STAGES - 1; s++) {
        if (s < nu)
            wgg_load_x(a, lkbi, sB + s * WGG_TILE);
        kc_cp_commit();
        lkbi = lkbi + 1 == a.kb ? 0 : lkbi + 1;
    }
    const uint64_t da = kc_wg_desc(sA, 0, 1024), db = kc_wg_desc(sB, 0, 1024);
    float d[8][4] = {}, ss = 0.0f;
    bool first = true;
    for (int q = 0; q < nu; q++) {
        kc_cp_wait<STAGES - 2>(); /* unit q's group and every earlier one */
        kc_fence_proxy_async();
        /* unit q published; every thread's products of unit q - 1 done, so
         * its stage is free for unit q + STAGES - 1 */
        __syncthreads();
        const uint32_t off = (uint32_t)(q % STAGES) * WGG_TILE_BYTES;
        kc_wg_fence();
#pragma unroll
        for (int ks = 0; ks < WGG_K / 16; ks++)
            kc_wgmma_ss<KCUDA_WG_MAX_N>(d, kc_wg_desc_add(da, off + 32 * ks), kc_wg_desc_add(db, off + 32 * ks),
                                        kbi > seg_k0 || ks > 0);
        kc_wg_commit();
        if (a.rms) { /* while the products run: the inputs are read, not written */
            if (kbi == seg_k0)
                ss = 0.0f;
            wgg_sumsq(sB + (q % STAGES) * WGG_TILE, ss);
        }
        const int qn = q + STAGES - 1;
        if (qn < nu) {
            const int sn = qn % STAGES;
            wgg_load_w(a, lt, lkbi, sA + sn * WGG_TILE);
            wgg_load_x(a, lkbi, sB + sn * WGG_TILE);
            wgg_next(a, lt, lkbi);
        }
        kc_cp_commit();
        kc_wg_wait<0>();
        kc_wg_fence_regs(d);
        if (kbi == a.kb - 1 || q == nu - 1) { /* the segment of tile t ends */
            wgg_finish(a, d, ss, t, seg_k0 == 0 && kbi == a.kb - 1, first, sm_last, sm_r);
            first = false;
            t++;
            kbi = seg_k0 = 0;
        } else {
            kbi++;
        }
    }
    kc_cp_wait<0>();
}

/* Stages a ring of CTAs an SM (1..4) holds: 8 / 6 / 4 / 3 units of 16 KiB. */
static int wgg_stages(int ctas)
{
    return ctas <= 1 ? 8 : ctas == 2 ? 6 : ctas == 3 ? 4 : 3;
}

static size_t wgg_smem(int stages)
{
    /* the ring, the last-arrival flag (16 bytes), the tokens' 1 / rms */
    return (size_t)stages * 2 * WGG_TILE_BYTES + 16 + KCUDA_WG_MAX_N * sizeof(float);
}

/* Contract (kern_internal.h): sets the kernels' shared-memory opt-in; false
 * where the device cannot run them (not compute capability 9.0, or less
 * shared memory than the largest ring). */
bool kcuda_gemm_wg_init(kcuda_state *st)
{
    if (!kcuda_wgmma_cc(st->cc) || st->smem_optin < wgg_smem(8))
        return false;
    CUDA_CHECK(cudaFuncSetAttribute(wgg_kernel<8>, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)wgg_smem(8)));
    CUDA_CHECK(cudaFuncSetAttribute(wgg_kernel<6>, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)wgg_smem(6)));
    CUDA_CHECK(cudaFuncSetAttribute(wgg_kernel<4>, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)wgg_smem(4)));
    CUDA_CHECK(cudaFuncSetAttribute(wgg_kernel<3>, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)wgg_smem(3)));
    return true;
}

/* Contract (kern_internal.h): whether n tokens of w run here: the options'
 * token range (wg_min_n..wg_max_n) and weight floor (gemv_min_weight_bytes,
 * the GEMV's: small models stay on the kernels their numerics were
 * validated with), a device that runs the kernel, and its requirements on
 * the weight; the input's alignment is the caller's to check. A function of
 * n and w alone, so a padded graph replay chooses as the eager step. */
bool kcuda_gemm_wg_route(const kern_ctx *ctx, const kern_weight *w, int n)
{
    const kcuda_state *st = kcuda_st(ctx);
    return st->wg_ok && n >= ctx->gemm.wg_min_n && n <= ctx->gemm.wg_max_n && n >= 1 &&
           kern_weight_bytes(w) >= ctx->gemm.gemv_min_weight_bytes && w->dtype == KERN_DTYPE_BF16 &&
           w->cols % 8 == 0 && w->cols <= INT32_MAX && w->rows <= (int64_t)WGG_M * KCUDA_WG_MAX_TILES &&
           kcuda_aligned(w->data, 16);
}

/* One launch with epilogue epi (WGG_*; rms: the folded norm, eps). */
static void wgg_run(kern_ctx *ctx, void *out, int epi, bool rms, float eps, const void *in, const kern_weight *w,
                    int n)
{
    kcuda_state *st = kcuda_st(ctx);
    INFERD_CHECK(kcuda_gemm_wg_route(ctx, w, n) && kcuda_aligned(in, 16));
    INFERD_CHECK(epi != WGG_SILU || w->rows % 2 == 0);
    wgg_args a = {};
    a.w = static_cast<const uint16_t *>(w->data);
    a.in = static_cast<const uint16_t *>(in);
    a.out = out;
    a.R = (int)w->rows;
    a.C = (int)w->cols;
    a.n = n;
    a.kb = (int)kcuda_cdiv(a.C, WGG_K);
    a.units = (int64_t)kcuda_cdiv(epi == WGG_SILU ? a.R / 2 : a.R, epi == WGG_SILU ? WGG_M / 2 : WGG_M) * a.kb;
    a.epi = epi;
    a.rms = rms;
    a.eps = eps;
    a.cnt = st->wg_cnt;
    a.ws = static_cast<float *>(st->gemm_ws);
    const int ctas = ctx->gemm.wg_ctas; /* kern_gemm_config keeps it in 1..4 */
    int64_t grid = ctx->gemm.wg_grid > 0 ? ctx->gemm.wg_grid : (int64_t)st->n_sms * ctas;
    grid = grid < a.units ? grid : a.units;
    INFERD_CHECK((size_t)grid * 2 * WGG_SLOT * sizeof(float) <= st->gemm_ws_bytes);
    const int stages = wgg_stages(ctas);
    void (*k)(const wgg_args) = stages == 8   ? wgg_kernel<8>
                                : stages == 6 ? wgg_kernel<6>
                                : stages == 4 ? wgg_kernel<4>
                                              : wgg_kernel<3>;
    kc_launch(k, dim3((unsigned)grid), WGG_THREADS, wgg_smem(stages), st->stream, ctx->gemm.pdl, a);
    KCUDA_LAUNCH_CHECK();
    kcuda_gemm_wg_launches++;
}

/* Contract (kern_internal.h): out[n, w->rows] = in[n, w->cols] @ w^T as
 * bf16 (f32: fp32; accum: added into out, the bf16 residual stream, with
 * one rounding); kcuda_gemm_wg_route must hold and in be 16-byte aligned;
 * out must not overlap in. */
void kcuda_gemm_wg(kern_ctx *ctx, void *out, bool f32, bool accum, const void *in, const kern_weight *w, int n)
{
    INFERD_CHECK(!(f32 && accum));
    wgg_run(ctx, out, f32 ? WGG_F32 : accum ? WGG_ACCUM : WGG_STORE, false, 0.0f, in, w, n);
}

/* Contract (kern_internal.h): kern_matmul_fused on this route (no norm
 * weight): RESID and SILU_MUL (with or without the folded norm) in the
 * kernel's epilogue; ROPE_KV as the product, then kcuda_rope_kv_write
 * with the bias and the folded norm's rows (the unfused ops: their bits). */
void kcuda_gemm_wg_fused(kern_ctx *ctx, void *out, const void *in, const kern_weight *w, int n, const kern_fuse *f)
{
    INFERD_CHECK(!f->norm);
    switch (f->epi) {
    case KERN_EPI_RESID: wgg_run(ctx, f->resid, WGG_RESID, false, 0.0f, in, w, n); break;
    case KERN_EPI_SILU_MUL: wgg_run(ctx, out, WGG_SILU, f->rms, f->eps, in, w, n); break;
    case KERN_EPI_ROPE_KV: {
        wgg_run(ctx, out, WGG_STORE, false, 0.0f, in, w, n);
        kern_rope_kv_params p = *f->rope;
        p.qkv = out;
        p.n_tokens = n;
        const kern_qkv_epilogue e = {.qkv_bias = f->qkv_bias, .norm_eps = f->eps,
                                     .rms_x = f->rms ? in : NULL, .rms_cols = (int)w->cols};
        kcuda_rope_kv_write(ctx, &p, f->qkv_bias || f->rms ? &e : NULL);
        break;
    }
    default: wgg_run(ctx, out, WGG_STORE, false, 0.0f, in, w, n); break;
    }
}
