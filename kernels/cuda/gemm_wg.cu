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
 *  - the weights are the wgmma's A operand, a tile of 64 or 128 rows
 *    (kern_gemm_opts.wg_mb; at 128 two m64 products share each input
 *    tile, so a stage holds twice the weight bytes of its input bytes);
 *    the n tokens its B operand, N = 64
 *    columns (tokens past n zero-filled), so the m64n64k16 products cover
 *    the whole batch and a token's result depends on its own input row
 *    only: bitwise the same at every n the route takes (a padded graph
 *    replay equals the eager step);
 *  - split mode, where a product's tiles are few (kern_gemm_opts.wg_split;
 *    wgg_split: the QKV, O and down products of an 8B model): each tile's
 *    k range is cut into S = 2..8 ranges, one CTA each, the S CTAs one
 *    cluster, and the launch (tiles x S CTAs) one wave; each CTA leaves
 *    its partial sums in its own shared memory and the cluster sums them
 *    in k order through distributed shared memory (wgg_finish_cluster), so
 *    no partial crosses the L2. Otherwise
 *  - stream-K: the (tile, 64-wide k unit) pairs, tile-major, are cut into
 *    gridDim.x equal ranges, one a CTA (one warpgroup), so every SM streams
 *    the same number of weight bytes whatever R is. A tile whose k range
 *    two or more CTAs share is summed by the last of them to finish: each
 *    writes its fp32 partial (fragment order) to a slot of the workspace,
 *    counts its arrival in the tile's counter, and the last adds the slots
 *    in k order (so the sum's order is fixed by R, C and the grid, never by
 *    which CTA came last) and runs the epilogue, as the decode attention's
 *    fused merge does (attention_decode.cu);
 *  - both operands go through a ring of STAGES units in shared memory,
 *    loaded by TMA (tma.cuh) from a producer warp beside the consuming
 *    warpgroup: one request a box, the 128-byte swizzle the descriptors
 *    describe (mma.cuh) made by the copy engine, rows past R or n and k
 *    past C zero-filled; each stage's full barrier counts its bytes in,
 *    its empty barrier the consumers' release. The weights of the first
 *    STAGES units are requested before the PDL wait (programmatic
 *    dependent launch), so they arrive while the kernel before this one
 *    ends; with kern_gemm_opts.wg_trigger the producer releases the next
 *    kernel's launch after its last request, so that kernel's weights
 *    stream during this one's tail where it fits beside this one;
 *  - the consumers keep one unit's products in flight while they issue the
 *    next unit's, and release a stage once its products are done;
 *  - epilogues: the bf16 store (kern_matmul), the fp32 store (kern_logits),
 *    the residual add (kern_matmul_accum: resid = bf16(resid + the fp32
 *    product), rounded once, as cuBLASLt's beta = 1) and kern_matmul_fused's
 *    RESID and SILU_MUL (with the folded norm's 1 / rms: each CTA sums the
 *    tokens' squares from the input tiles it holds, carried in the slots
 *    as the products are); ROPE_KV is the product, then the RoPE kernel.
 * History (docs/PERF.md, thirtieth session): the first form loaded the ring
 * by cp.async from every consumer thread (8 copies a thread a unit with
 * their address arithmetic); ncu found its warps busy issuing rather than
 * waiting on memory, a launch cost 10-13 us more than its bytes (cuBLASLt:
 * about 5), and it ran QKV and O at 52-56% of the copy bandwidth against
 * cuBLASLt's 74-79%. The TMA form with 64-row tiles was no faster (deeper
 * rings helped: the weights in flight were capped at half the ring); with
 * 128-row tiles it still runs QKV and O at 0.35-0.9x cuBLASLt's rate, its
 * time growing with n at a fixed weight (docs/PERF.md, thirty-first
 * session), so cuBLASLt keeps these products by default. Split mode
 * (thirty-second session) took the partials out of the L2 and was no
 * faster; on one H100 the 128-row tiles ran behind the earlier 64-row
 * ones, so both are built (wg_mb), with a per-CTA phase trace
 * (kcuda_gemm_wg_trace). The thirty-third session's A/B: 64-row tiles
 * win every short product (the default since); the trace showed the
 * stream at the copy bandwidth and 8-12 us a product outside it (the
 * next product's CTAs enter only as this one's leave, then wait on its
 * last CTA; the drain and the finish after the last request), and the
 * residual epilogue loading one value an L2 round trip (now all loaded
 * before any store, in split mode at the start). A ring of 98 KiB or
 * less leaves an SM room for the next product's CTA (the largest
 * carveout; split mode keeps to wg_ctas CTAs an SM), the overlap the
 * trigger was built for.
 * Grid (stream-K): kern_gemm_opts.wg_ctas CTAs an SM (1..3), at most one
 * a unit; wg_grid overrides the count (tests); the ring has wg_stages
 * stages of 16 or 24 KiB (64- or 128-row tiles; by default 6 / 4 / 2 for
 * 1..3 CTAs an SM).
 * Requirements (else cuBLASLt): compute capability 9.0, C % 8 == 0, W and
 * in 16-byte aligned, R <= 64 KCUDA_WG_MAX_TILES.
 */
#include "kernels/cuda/common.cuh"
#include "kernels/cuda/mma.cuh"
#include "kernels/cuda/tma.cuh"

/* Test hooks (test_cuda_kernels): launches so far, and those in split
 * mode; the phase trace: while kcuda_gemm_wg_trace is set (device memory
 * of kcuda_gemm_wg_trace_cap CTAs' WGG_TRACE stamps), a launch of at most
 * that many CTAs records each CTA's stamps there (wgg_kernel) and sets
 * kcuda_gemm_wg_trace_ctas to its grid. */
extern "C" int kcuda_gemm_wg_launches, kcuda_gemm_wg_split_launches, kcuda_gemm_wg_trace_cap, kcuda_gemm_wg_trace_ctas;
extern "C" unsigned long long *kcuda_gemm_wg_trace;
int kcuda_gemm_wg_launches, kcuda_gemm_wg_split_launches, kcuda_gemm_wg_trace_cap, kcuda_gemm_wg_trace_ctas;
unsigned long long *kcuda_gemm_wg_trace;

/* MB: 64-row blocks a tile (1 or 2; kern_gemm_opts.wg_mb), m64 products
 * sharing each input tile. */
#define WGG_M(MB) (64 * (MB))                /* weight rows a tile */
#define WGG_K 64                             /* k a unit: one 128-byte row of a swizzled tile */
#define WGG_THREADS 128                      /* the consumers: one warpgroup */
#define WGG_BLOCK (WGG_THREADS + 32)         /* and the producer warp */
#define WGG_A(MB) (WGG_M(MB) * WGG_K)        /* elements of a stage's A: 8 KiB a block */
#define WGG_B (KCUDA_WG_MAX_N * WGG_K)       /* elements of a stage's B (64 tokens): 8 KiB */
#define WGG_BLK_BYTES (64 * WGG_K * 2)       /* bytes of a 64-row block (A) or of B */
#define WGG_FRAG(MB) (WGG_M(MB) * KCUDA_WG_MAX_N) /* floats of a tile's sums */
#define WGG_SLOT(MB) (WGG_FRAG(MB) + KCUDA_WG_MAX_N) /* floats of a partial slot: the sums, then the tokens' squares */
/* A CTA's KCUDA_WG_TRACE_STAMPS phase stamps (kc_globaltimer, ns): entry;
 * its first unit's bytes in (the producer sees stage 0 full); its last
 * request issued; its last unit's products done; its last finish's sums
 * ready (the epilogue starts, or the tile is left to another CTA); its
 * exit (every finish and epilogue done). */
#define WGG_TRACE KCUDA_WG_TRACE_STAMPS
enum { WGG_T_ENTRY, WGG_T_FIRST_IN, WGG_T_LAST_REQ, WGG_T_LAST_DONE, WGG_T_SUMS, WGG_T_EXIT };

/* What the epilogue does with a tile's sums (kernels.h's epilogues):
 * bf16 store, fp32 store (logits), the add with one rounding
 * (kern_matmul_accum), RESID (kern_fuse: bf16(resid + bf16(product))) and
 * SILU_MUL (a tile's 64 rows are 32 gate rows and the same 32 up rows). */
enum { WGG_STORE, WGG_F32, WGG_ACCUM, WGG_RESID, WGG_SILU };

typedef struct {
    kc_tmap tw;         /* the weights [R, C] as {C, R, 1}, boxes of 64 x the tile's rows; SILU: {C, R / 2, 2} (gate rows,
                           then up rows), boxes of 64 x 8 x 2 */
    kc_tmap tx;         /* the inputs [n, C] as {C, n, 1}, boxes of 64 x 64 (tokens past n arrive as zeros) */
    void *out;          /* [n, R] ([n, R / 2] for WGG_SILU): bf16, fp32, or the bf16 residual stream */
    float *ws;          /* [2 gridDim.x][WGG_SLOT(MB)] partial slots, fragment order */
    int *cnt;           /* [tiles] arrival counters: 0 between launches */
    int R, C, n, kb;    /* kb: k units a tile, ceil(C / WGG_K) */
    int64_t units;      /* tiles * kb */
    int epi;            /* WGG_* */
    int rms;            /* a folded norm: each token's outputs scaled by 1 / rms(in row) first (SILU only) */
    int split;          /* 0: stream-K; S in 2..8: split mode, one cluster of S CTAs a tile (wgg_finish_cluster) */
    int trigger;        /* the producer triggers the dependent launch after its last load */
    int evict_first;    /* the weights read under an L2 evict-first policy */
    float eps;
    unsigned long long *trace; /* [gridDim.x][WGG_TRACE] phase stamps, or NULL (test hook) */
} wgg_args;

/* Phase stamp k of this CTA (a.trace set; the caller's one thread). */
__device__ __forceinline__ void wgg_stamp(const wgg_args &a, int k)
{
    if (a.trace)
        a.trace[(size_t)blockIdx.x * WGG_TRACE + k] = kc_globaltimer();
}

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

/* Bytes of tile t's weights a stage receives: a whole box (rows past R
 * zero-filled), or (SILU) the boxes of 8 gate + 8 up rows holding rows
 * below R / 2 (the others are not requested: their rows' sums are never
 * stored, see wgg_epilogue). */
template <int MB> __device__ __forceinline__ uint32_t wgg_w_bytes(const wgg_args &a, int t)
{
    if (a.epi != WGG_SILU)
        return WGG_A(MB) * 2;
    const int left = a.R / 2 - t * (WGG_M(MB) / 2);
    return (uint32_t)min(WGG_M(MB) / 16, (left + 7) / 8) * (WGG_BLK_BYTES / 4);
}

/* Tile t's weights at k unit kbi into a stage, completing on bar. SILU:
 * tile row r holds the gate row 8 (r / 16) + r % 8 of the tile's WGG_M(MB) / 2
 * for r % 16 < 8 and that row's up row for the others, so the thread holding
 * a tile row's sums (rows g and g + 8 of a warp's 16, mma.cuh) holds a
 * gate and its up: a box of 8 gate rows over their 8 up rows for each
 * warp's 16 tile rows. */
template <int MB>
__device__ __forceinline__ void wgg_tma_w(const wgg_args &a, int t, int kbi, uint16_t *stage, uint64_t *bar,
                                          uint64_t pol)
{
    const int k0 = kbi * WGG_K;
    if (a.epi == WGG_SILU) {
        const int j0 = t * (WGG_M(MB) / 2), nb = (int)(wgg_w_bytes<MB>(a, t) / (WGG_BLK_BYTES / 4));
        for (int i = 0; i < nb; i++)
            kc_tma_load(stage + i * 16 * WGG_K, &a.tw, k0, j0 + 8 * i, 0, bar, pol, a.evict_first);
    } else {
        kc_tma_load(stage, &a.tw, k0, t * WGG_M(MB), 0, bar, pol, a.evict_first);
    }
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
 * this thread's sums d[mb][jt][2 h + e] hold (mma.cuh's C fragment), in the
 * column tiles this CTA owns: (8 mb + jt) % S == rank (split mode,
 * wgg_finish_cluster; S = 1 owns all). */
template <class F> __device__ __forceinline__ void wgg_each_col(const wgg_args &a, int mb, int S, int rank, F fn)
{
    const int c = threadIdx.x & 3;
#pragma unroll
    for (int jt = 0; jt < 8; jt++)
#pragma unroll
        for (int e = 0; e < 2; e++)
            if (8 * jt + 2 * c + e < a.n && (8 * mb + jt) % S == rank)
                fn(jt, e, 8 * jt + 2 * c + e);
}

/* ACCUM / RESID: the residual values this thread's outputs of tile t add
 * to, in the column tiles owned (wgg_each_col's S, rank), into res (zeroed
 * by the caller; res[mb][h][j] holds tokens 8 j + 2 c and 8 j + 2 c + 1,
 * the first in the low half). Every load is issued before any value is
 * used, so they overlap; the epilogue then stores without loading (a load
 * there waited on the L2 behind the store before it, which may alias:
 * 3.6-8.8 us a product at 64 tokens, docs/PERF.md). Split mode loads them
 * at the start, the others once their tile's sums are theirs. */
template <int MB>
__device__ __forceinline__ void wgg_res_load(const wgg_args &a, int t, int S, int rank, uint32_t (&res)[MB][2][8])
{
    if (a.epi != WGG_ACCUM && a.epi != WGG_RESID)
        return;
    const int w = threadIdx.x >> 5, g = (threadIdx.x & 31) >> 2;
    const uint16_t *o = static_cast<const uint16_t *>(a.out);
#pragma unroll
    for (int mb = 0; mb < MB; mb++)
#pragma unroll
        for (int h = 0; h < 2; h++) {
            const int row = t * WGG_M(MB) + 64 * mb + 16 * w + g + 8 * h;
            if (row < a.R)
                wgg_each_col(a, mb, S, rank, [&](int jt, int e, int col) {
                    res[mb][h][jt] |= (uint32_t)o[(int64_t)col * a.R + row] << (16 * e);
                });
        }
}

/* The epilogue of tile t from its sums d (d[mb][j][2 h + e] = the product
 * of tile row 64 mb + 16 w + g + 8 h and token 8 j + 2 c + e, mma.cuh),
 * for the column tiles owned (wgg_each_col's S, rank); sm_r: each token's
 * 1 / rms (a.rms); res: the residual values (wgg_res_load; ACCUM, RESID). */
template <int MB>
__device__ __forceinline__ void wgg_epilogue(const wgg_args &a, const float (&d)[MB][8][4], int t,
                                             const float *sm_r, int S, int rank, const uint32_t (&res)[MB][2][8])
{
    const int w = threadIdx.x >> 5, g = (threadIdx.x & 31) >> 2;
    uint16_t *o = static_cast<uint16_t *>(a.out);
#pragma unroll
    for (int mb = 0; mb < MB; mb++) {
        if (a.epi == WGG_SILU) { /* h = 0: gate, h = 1: its up */
            const int f = a.R / 2, j = t * (WGG_M(MB) / 2) + 32 * mb + 8 * w + g;
            if (j < f)
                wgg_each_col(a, mb, S, rank, [&](int jt, int e, int col) {
                    float gv = kc_bf2f(kc_f2bf(d[mb][jt][e])), uv = kc_bf2f(kc_f2bf(d[mb][jt][2 + e]));
                    if (a.rms) {
                        gv = kc_bf2f(kc_f2bf(gv * sm_r[col]));
                        uv = kc_bf2f(kc_f2bf(uv * sm_r[col]));
                    }
                    o[(int64_t)col * f + j] = kc_f2bf(kc_silu_mul(gv, uv));
                });
            continue;
        }
#pragma unroll
        for (int h = 0; h < 2; h++) {
            const int row = t * WGG_M(MB) + 64 * mb + 16 * w + g + 8 * h;
            if (row < a.R)
                wgg_each_col(a, mb, S, rank, [&](int jt, int e, int col) {
                    const int64_t i = (int64_t)col * a.R + row;
                    const float v = d[mb][jt][2 * h + e];
                    const uint32_t rw = res[mb][h][jt]; /* ACCUM, RESID: this token's residual, half e */
                    switch (a.epi) {
                    case WGG_F32: static_cast<float *>(a.out)[i] = v; break;
                    case WGG_ACCUM: o[i] = kc_f2bf(kc_bf2f((uint16_t)(rw >> (16 * e))) + v); break;
                    case WGG_RESID: o[i] = kc_f2bf(kc_bf2f((uint16_t)(rw >> (16 * e))) + kc_bf2f(kc_f2bf(v))); break;
                    default: o[i] = kc_f2bf(v); break;
                    }
                });
        }
    }
}

/* This thread's sums d of the column tiles below nj to a partial in
 * fragment order (dst[(8 mb + j) WGG_THREADS + thread]), and its token's
 * sum of squares ss to sq[token] (the even thread of each pair) when sq. */
template <int MB>
__device__ __forceinline__ void wgg_put(float4 *dst, const float (&d)[MB][8][4], int nj, float *sq, float ss)
{
#pragma unroll
    for (int mb = 0; mb < MB; mb++)
#pragma unroll
        for (int j = 0; j < 8; j++)
            if (j < nj)
                dst[(mb * 8 + j) * WGG_THREADS + threadIdx.x] =
                    make_float4(d[mb][j][0], d[mb][j][1], d[mb][j][2], d[mb][j][3]);
    if (sq && (threadIdx.x & 1) == 0)
        sq[threadIdx.x >> 1] = ss;
}

/* A barrier of the consumer warpgroup alone (named barrier 1; the
 * producer warp has left). */
__device__ __forceinline__ void wgg_sync(void)
{
#if defined(KEMU_H)
    kemu_syncwg(__LINE__);
#else
    asm volatile("bar.sync 1, 128;\n" ::: "memory");
#endif
}

/* After the unit that ends this CTA's segment of tile t (its sums in d,
 * its share of the tokens' sums of squares in ss when a.rms): the epilogue
 * where the segment is the whole tile; else the partial to this CTA's slot
 * (first: the segment is the CTA's first), the arrival counted, and the
 * last of the tile's CTAs sums every slot in k order and runs the
 * epilogue. Every consumer thread calls it. sm: the flag and the tokens' 1 / rms.
 * NOTE: the fences make each partial visible before the count that admits
 * the summing CTA, and the others' partials visible to it after
 * (threadFenceReduction's pattern). */
template <int MB>
__device__ __forceinline__ void wgg_finish(const wgg_args &a, float (&d)[MB][8][4], float ss, int t,
                                           bool whole, bool first, int *sm_last, float *sm_r)
{
    const int tok = threadIdx.x >> 1;
    if (a.rms)
        ss += __shfl_xor_sync(0xFFFFFFFFu, ss, 1); /* the token's two k halves (a + b == b + a) */
    const int nj = (a.n + 7) >> 3; /* column tiles holding tokens: the partials carry only those */
    uint32_t res[MB][2][8] = {};
    if (whole) {
        wgg_res_load<MB>(a, t, 1, 0, res);
    } else {
        float4 *slot = reinterpret_cast<float4 *>(a.ws + (2 * (int64_t)blockIdx.x + (first ? 0 : 1)) * WGG_SLOT(MB));
        wgg_put<MB>(slot, d, nj, a.rms ? reinterpret_cast<float *>(slot) + WGG_FRAG(MB) : nullptr, ss);
        const int i0 = wgg_cta_of(a, (int64_t)t * a.kb), i1 = wgg_cta_of(a, (int64_t)(t + 1) * a.kb - 1);
        __threadfence();
        wgg_sync(); /* every thread's partial written; sm_last free */
        if (threadIdx.x == 0) {
            int *cnt = a.cnt + t;
            *sm_last = atomicAdd(cnt, 1) == i1 - i0;
            if (*sm_last) {
                *cnt = 0; /* every segment has counted: no one touches it again this launch */
                __threadfence();
            }
        }
        wgg_sync();
        if (!*sm_last) {
            if (threadIdx.x == 0)
                wgg_stamp(a, WGG_T_SUMS);
            return;
        }
        wgg_res_load<MB>(a, t, 1, 0, res); /* in flight with the slots' loads */
#pragma unroll
        for (int mb = 0; mb < MB; mb++)
#pragma unroll
            for (int j = 0; j < 8; j++)
                d[mb][j][0] = d[mb][j][1] = d[mb][j][2] = d[mb][j][3] = 0.0f;
        ss = 0.0f;
        for (int i = i0; i <= i1; i++) {
            const float *si = a.ws + (2 * (int64_t)i + (wgg_begin(a, i) / a.kb == t ? 0 : 1)) * WGG_SLOT(MB);
#pragma unroll
            for (int mb = 0; mb < MB; mb++)
#pragma unroll
                for (int j = 0; j < 8; j++) {
                    if (j >= nj)
                        break;
                    const float4 v =
                        __ldcg(reinterpret_cast<const float4 *>(si) + (mb * 8 + j) * WGG_THREADS + threadIdx.x);
                    d[mb][j][0] += v.x;
                    d[mb][j][1] += v.y;
                    d[mb][j][2] += v.z;
                    d[mb][j][3] += v.w;
                }
            if (a.rms)
                ss += __ldcg(si + WGG_FRAG(MB) + tok);
        }
    }
    if (a.rms) {
        if ((threadIdx.x & 1) == 0)
            sm_r[tok] = kc_inv_rms(ss, a.C, a.eps);
        wgg_sync();
    }
    if (threadIdx.x == 0)
        wgg_stamp(a, WGG_T_SUMS);
    wgg_epilogue<MB>(a, d, t, sm_r, 1, 0, res);
}

/* Split mode (a.split = S, the tile's k range cut into S in rank order, one
 * CTA each, one cluster a tile): after this CTA's units, its sums in d and
 * its share of the tokens' sums of squares in ss. Each CTA writes both to
 * its own ring (free: every unit is consumed; part: fragment order as the
 * stream-K slots, pss: a token's sum); after the cluster's barrier each
 * sums the column tiles it owns ((8 mb + j) % S == rank) over every CTA's
 * ring in rank (k) order through distributed shared memory, and the
 * tokens' squares likewise; the second barrier keeps each ring until its
 * peers have read it. Then the epilogue of the owned column tiles. No
 * global workspace, counters or fences. Every consumer thread calls it;
 * the producer warp meets the two barriers (wgg_kernel). res: the owned
 * residual values, loaded at the start (wgg_res_load). */
template <int MB>
__device__ __forceinline__ void wgg_finish_cluster(const wgg_args &a, float (&d)[MB][8][4], float ss, int t,
                                                   float4 *part, float *pss, float *sm_r,
                                                   const uint32_t (&res)[MB][2][8])
{
    const int S = a.split, nj = (a.n + 7) >> 3, tok = threadIdx.x >> 1;
    const int rank = (int)kc_cluster_rank();
    if (a.rms)
        ss += __shfl_xor_sync(0xFFFFFFFFu, ss, 1); /* the token's two k halves */
    wgg_sync(); /* every consumer's products done: the ring is free */
    wgg_put<MB>(part, d, nj, a.rms ? pss : nullptr, ss);
    kc_cluster_sync();
#pragma unroll
    for (int mb = 0; mb < MB; mb++)
#pragma unroll
        for (int j = 0; j < 8; j++) {
            if (j >= nj || (mb * 8 + j) % S != rank)
                continue;
            float4 v[8];
#pragma unroll
            for (int i = 0; i < 8; i++) /* every peer's partial in flight at once */
                if (i < S)
                    v[i] = kc_dsmem_ld4(part + (mb * 8 + j) * WGG_THREADS + threadIdx.x, (uint32_t)i);
            float x = 0.0f, y = 0.0f, z = 0.0f, w = 0.0f;
#pragma unroll
            for (int i = 0; i < 8; i++)
                if (i < S) {
                    x += v[i].x;
                    y += v[i].y;
                    z += v[i].z;
                    w += v[i].w;
                }
            d[mb][j][0] = x;
            d[mb][j][1] = y;
            d[mb][j][2] = z;
            d[mb][j][3] = w;
        }
    if (a.rms && (threadIdx.x & 1) == 0) {
        float sum = 0.0f;
        for (int i = 0; i < S; i++)
            sum += kc_dsmem_ld(pss + tok, (uint32_t)i);
        sm_r[tok] = kc_inv_rms(sum, a.C, a.eps);
    }
    kc_cluster_sync(); /* the peers' reads of this ring done; sm_r written */
    if (threadIdx.x == 0)
        wgg_stamp(a, WGG_T_SUMS);
    wgg_epilogue<MB>(a, d, t, sm_r, S, rank, res);
}

/* The producer (the extra warp's first lane): unit q of the CTA's range
 * (tile t, k unit kbi first) into stage q % STAGES, completing on that
 * stage's full barrier; a stage is refilled once the consumers have
 * released it (its empty barrier). The weights of the first STAGES units
 * are requested before the PDL wait, their inputs after it. With
 * a.trigger the dependent launch is released after the last request, so
 * the next kernel's CTAs start their own weights during this one's tail. */
template <int MB, int STAGES>
__device__ __forceinline__ void wgg_produce(const wgg_args &a, int t, int kbi, int nu, uint16_t *sA, uint16_t *sB,
                                            uint64_t *full, uint64_t *empty)
{
    const int pre = nu < STAGES ? nu : STAGES;
    const uint64_t pol = a.evict_first ? kc_l2_evict_first() : 0;
    int lt = t, lk = kbi; /* the next unit's weights */
    for (int q = 0; q < pre; q++) {
        kc_mbar_arrive_tx(&full[q], wgg_w_bytes<MB>(a, lt) + WGG_BLK_BYTES);
        wgg_tma_w<MB>(a, lt, lk, sA + q * WGG_A(MB), &full[q], pol);
        wgg_next(a, lt, lk);
    }
    kc_pdl_wait();
    for (int q = 0, xk = kbi; q < pre; q++, xk = xk + 1 == a.kb ? 0 : xk + 1)
        kc_tma_load(sB + q * WGG_B, &a.tx, xk * WGG_K, 0, 0, &full[q]);
    if (a.trace && pre > 0) { /* stage 0's first phase: the first unit's bytes are in */
        kc_mbar_wait(&full[0], 0);
        wgg_stamp(a, WGG_T_FIRST_IN);
    }
    int s = 0;
    uint32_t ph = 0; /* the parity of stage s's previous use */
    for (int q = pre; q < nu; q++) {
        kc_mbar_wait(&empty[s], ph);
        kc_mbar_arrive_tx(&full[s], wgg_w_bytes<MB>(a, lt) + WGG_BLK_BYTES);
        wgg_tma_w<MB>(a, lt, lk, sA + s * WGG_A(MB), &full[s], pol);
        kc_tma_load(sB + s * WGG_B, &a.tx, lk * WGG_K, 0, 0, &full[s]);
        wgg_next(a, lt, lk);
        if (++s == STAGES) {
            s = 0;
            ph ^= 1;
        }
    }
    wgg_stamp(a, WGG_T_LAST_REQ);
    if (a.trigger)
        kc_pdl_trigger();
}

/* One CTA: WGG_THREADS consumer threads (one warpgroup: the products, the
 * partials and the epilogues) and one producer warp (TMA requests). */
template <int MB, int STAGES>
static __global__ void __launch_bounds__(WGG_BLOCK) wgg_kernel(const __grid_constant__ wgg_args a)
{
    /* NOTE: no static shared memory, so the ring starts the window,
     * 1024-byte aligned as the swizzle needs; barriers and flags follow */
    extern __shared__ float4 wgg_sm4[];
    uint16_t *sA = (uint16_t *)wgg_sm4, *sB = sA + STAGES * WGG_A(MB); /* stage s at + s WGG_A, + s WGG_B */
    uint64_t *full = (uint64_t *)(sB + STAGES * WGG_B), *empty = full + STAGES;
    int *sm_last = (int *)(empty + STAGES);
    float *sm_r = (float *)(sm_last + 4); /* [KCUDA_WG_MAX_N] */
    int64_t u0;
    int nu;
    if (a.split) { /* rank blockIdx.x % S (a 1-D cluster) of tile blockIdx.x / S: k units [k0, k1) */
        const int r = (int)(blockIdx.x % a.split), k0 = r * a.kb / a.split;
        u0 = (int64_t)(blockIdx.x / a.split) * a.kb + k0;
        nu = (r + 1) * a.kb / a.split - k0;
    } else {
        u0 = wgg_begin(a, blockIdx.x);
        nu = (int)(wgg_begin(a, blockIdx.x + 1) - u0);
    }
    const int t0 = (int)(u0 / a.kb);
    int t = t0, kbi = (int)(u0 - (int64_t)t * a.kb);
    if (threadIdx.x == 0) {
        wgg_stamp(a, WGG_T_ENTRY);
        for (int i = 0; i < STAGES; i++) {
            kc_mbar_init(&full[i], 1);
            kc_mbar_init(&empty[i], WGG_THREADS);
        }
        kc_mbar_fence_init();
    }
    __syncthreads();
    if (threadIdx.x >= WGG_THREADS) {
        if (threadIdx.x == WGG_THREADS)
            wgg_produce<MB, STAGES>(a, t, kbi, nu, sA, sB, full, empty);
        if (a.split) { /* wgg_finish_cluster's two barriers: the whole cluster's threads */
            __syncwarp();
            kc_cluster_sync();
            kc_cluster_sync();
        }
        return;
    }
    kc_pdl_wait(); /* the epilogue's residual rows, the partial slots and counters */
    const uint64_t da = kc_wg_desc(sA, 0, 1024), db = kc_wg_desc(sB, 0, 1024);
    float d[MB][8][4] = {}, ss = 0.0f;
    uint32_t res[MB][2][8] = {}; /* split mode: the owned residual values, in flight with the stream */
    if (a.split)
        wgg_res_load<MB>(a, t0, a.split, (int)kc_cluster_rank(), res);
    int s = 0;       /* the stage of the next unit */
    uint32_t ph = 0; /* the parity of its current use */
    for (int q = 0; q < nu; t++) { /* the segments of tiles t, t + 1, ... in the CTA's range */
        const int len = min(a.kb - kbi, nu - q), k0 = kbi;
        int held = -1; /* the stage whose products may still run (released after the next unit's issue) */
        for (int i = 0; i < len; i++) {
            kc_mbar_wait(&full[s], ph);
            const uint32_t offa = (uint32_t)s * (WGG_A(MB) * 2), offb = (uint32_t)s * WGG_BLK_BYTES;
            kc_wg_fence();
#pragma unroll
            for (int ks = 0; ks < WGG_K / 16; ks++)
#pragma unroll
                for (int mb = 0; mb < MB; mb++)
                    kc_wgmma_ss<KCUDA_WG_MAX_N>(d[mb], kc_wg_desc_add(da, offa + mb * WGG_BLK_BYTES + 32 * ks),
                                                kc_wg_desc_add(db, offb + 32 * ks), i > 0 || ks > 0);
            kc_wg_commit();
            if (a.rms) { /* while the products run: the inputs are read, not written */
                if (i == 0)
                    ss = 0.0f;
                wgg_sumsq(sB + s * WGG_B, ss);
            }
            kc_wg_wait<1>(); /* the previous unit's products done: its stage is free */
            if (held >= 0)
                kc_mbar_arrive(&empty[held]);
            held = s;
            if (++s == STAGES) {
                s = 0;
                ph ^= 1;
            }
        }
        kc_wg_wait<0>();
        kc_wg_fence_regs(d[0]);
        kc_wg_fence_regs(d[MB - 1]);
        kc_mbar_arrive(&empty[held]);
        q += len;
        if (q == nu && threadIdx.x == 0)
            wgg_stamp(a, WGG_T_LAST_DONE);
        kbi = 0;
        if (!a.split)
            wgg_finish<MB>(a, d, ss, t, k0 == 0 && len == a.kb, q == len, sm_last, sm_r);
    }
    if (a.split) /* one segment (or none: more CTAs than k units), its sums in d */
        wgg_finish_cluster<MB>(a, d, ss, t0, (float4 *)sA, (float *)sB, sm_r, res);
    if (a.trace) {
        wgg_sync();
        if (threadIdx.x == 0)
            wgg_stamp(a, WGG_T_EXIT);
    }
}

/* The forms built: tiles of 64 or 128 rows (MB 1, 2), each with rings of
 * 8, 6, 4, 3 and 2 stages of 16 or 24 KiB (8 KiB of weights a block, 8 of
 * inputs), deepest first. */
static const struct {
    int mb, stages;
    void (*kernel)(const wgg_args);
} wgg_forms[] = {{1, 8, wgg_kernel<1, 8>}, {1, 6, wgg_kernel<1, 6>}, {1, 4, wgg_kernel<1, 4>},
                 {1, 3, wgg_kernel<1, 3>}, {1, 2, wgg_kernel<1, 2>}, {2, 8, wgg_kernel<2, 8>},
                 {2, 6, wgg_kernel<2, 6>}, {2, 4, wgg_kernel<2, 4>}, {2, 3, wgg_kernel<2, 3>},
                 {2, 2, wgg_kernel<2, 2>}};
#define WGG_N_FORMS (sizeof wgg_forms / sizeof wgg_forms[0])

/* The form a launch takes: tiles of wg_mb blocks (kern_gemm_config keeps
 * it 1 or 2), the deepest ring with at most the options' stages
 * (wg_stages), else by CTAs an SM (1..3) 6 / 4 / 2 stages. */
static size_t wgg_form(const kern_gemm_opts *o)
{
    const int want = o->wg_stages ? o->wg_stages : o->wg_ctas <= 1 ? 6 : o->wg_ctas == 2 ? 4 : 2;
    size_t i = 0;
    while (wgg_forms[i].mb != o->wg_mb)
        i++;
    while (i + 1 < WGG_N_FORMS && wgg_forms[i + 1].mb == o->wg_mb && wgg_forms[i].stages > want)
        i++;
    return i;
}

static size_t wgg_smem(int mb, int stages)
{
    /* the ring, its full and empty barriers, the last-arrival flag (16
     * bytes), the tokens' 1 / rms */
    return (size_t)stages * ((WGG_A(mb) + WGG_B) * 2 + 16) + 16 + KCUDA_WG_MAX_N * sizeof(float);
}

/* How many clusters of S CTAs of ring form f the device holds at once (0
 * where it cannot launch them). */
static int wgg_max_clusters(const kcuda_state *st, size_t f, int S)
{
#ifndef KEMU_H
    kc_launch_cfg l;
    kc_launch_cfg_init(&l, dim3((unsigned)S), WGG_BLOCK, wgg_smem(wgg_forms[f].mb, wgg_forms[f].stages), st->stream,
                       false, (unsigned)S);
    int n = 0;
    if (cudaOccupancyMaxActiveClusters(&n, wgg_forms[f].kernel, &l.cfg) != cudaSuccess) {
        (void)cudaGetLastError();
        n = 0;
    }
    return n;
#else
    (void)f;
    return st->n_sms / S; /* the emulator: one CTA an SM */
#endif
}

/* Tiles of MB 64-row blocks over a weight of `rows` rows; a SiLU pair's
 * (rows / 2 gate rows in tiles of half the rows, rows even) is the same
 * count. */
static int64_t wgg_tiles(int mb, int64_t rows)
{
    return (int64_t)kcuda_cdiv(rows, WGG_M(mb));
}

/* Split mode's cluster size S for a product of `tiles` tiles: the largest
 * of 2..8, at most kb (a CTA at least one k unit), whose clusters of form
 * f the device holds all at once, so the launch is one wave of tiles x S
 * CTAs, and at most wg_ctas CTAs an SM (as stream-K's grid: a ring that
 * leaves an SM room for a second CTA leaves it to the next product, which
 * then starts its weights during this one's tail); 0 (stream-K) where
 * none does, with wg_split 0, or with a test's
 * wg_grid. wg_split 2..8 forces that S (tests: any tile and k count). A
 * function of the weight's shape and the options, never of n. */
static int wgg_split(const kcuda_state *st, const kern_gemm_opts *o, size_t f, int64_t tiles, int kb)
{
    if (o->wg_split == 0 || o->wg_grid > 0)
        return 0;
    if (o->wg_split >= 2)
        return o->wg_split;
    for (int S = 8; S >= 2; S--)
        if (S <= kb && tiles <= st->wg_clusters[f][S] && tiles * S <= (int64_t)st->n_sms * o->wg_ctas)
            return S;
    return 0;
}

/* Contract (kern_internal.h): sets the kernels' shared-memory opt-in; false
 * where the device cannot run them (not compute capability 9.0, or less
 * shared memory than the largest ring). */
bool kcuda_gemm_wg_init(kcuda_state *st)
{
    if (!kcuda_wgmma_cc(st->cc) || st->smem_optin < wgg_smem(2, 8) || !kc_tmap_init())
        return false;
    static_assert(WGG_N_FORMS <= sizeof st->wg_clusters / sizeof st->wg_clusters[0], "wg_clusters' forms");
    for (size_t i = 0; i < WGG_N_FORMS; i++) {
        /* the largest carveout: an SM configured for one 98 KiB ring has no
         * room for the next product's CTA beside it */
        CUDA_CHECK(cudaFuncSetAttribute(wgg_forms[i].kernel, cudaFuncAttributePreferredSharedMemoryCarveout,
                                        (int)cudaSharedmemCarveoutMaxShared));
        CUDA_CHECK(cudaFuncSetAttribute(wgg_forms[i].kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                        (int)wgg_smem(wgg_forms[i].mb, wgg_forms[i].stages)));
        for (int S = 2; S <= 8; S++)
            st->wg_clusters[i][S] = wgg_max_clusters(st, i, S);
    }
    return true;
}

/* Contract (kern_internal.h): whether n tokens of w run here: the options'
 * token range (wg_min_n..wg_max_n) and weight floor (gemv_min_weight_bytes,
 * the GEMV's: small models stay on the kernels their numerics were
 * validated with), a device that runs the kernel, its requirements on the
 * weight, and with wg_split_only, a weight split mode takes (wgg_tiles:
 * the same for a SiLU pair); the input's alignment is the caller's to
 * check. A function of n and w alone, so a
 * padded graph replay chooses as the eager step. */
bool kcuda_gemm_wg_route(const kern_ctx *ctx, const kern_weight *w, int n)
{
    const kcuda_state *st = kcuda_st(ctx);
    if (!(st->wg_ok && n >= ctx->gemm.wg_min_n && n <= ctx->gemm.wg_max_n && n >= 1 &&
          kern_weight_bytes(w) >= ctx->gemm.gemv_min_weight_bytes && w->dtype == KERN_DTYPE_BF16 &&
          w->cols % 8 == 0 && w->cols <= INT32_MAX && w->rows <= (int64_t)WGG_M(1) * KCUDA_WG_MAX_TILES &&
          kcuda_aligned(w->data, 16)))
        return false;
    const size_t f = wgg_form(&ctx->gemm);
    return !ctx->gemm.wg_split_only ||
           wgg_split(st, &ctx->gemm, f, wgg_tiles(wgg_forms[f].mb, w->rows), (int)kcuda_cdiv(w->cols, WGG_K)) != 0;
}

/* One launch with epilogue epi (WGG_*; rms: the folded norm, eps). */
static void wgg_run(kern_ctx *ctx, void *out, int epi, bool rms, float eps, const void *in, const kern_weight *w,
                    int n)
{
    kcuda_state *st = kcuda_st(ctx);
    INFERD_CHECK(kcuda_gemm_wg_route(ctx, w, n) && kcuda_aligned(in, 16));
    INFERD_CHECK(epi != WGG_SILU || w->rows % 2 == 0);
    wgg_args a = {};
    a.out = out;
    a.R = (int)w->rows;
    a.C = (int)w->cols;
    a.n = n;
    a.kb = (int)kcuda_cdiv(a.C, WGG_K);
    const size_t f = wgg_form(&ctx->gemm);
    const int tm = WGG_M(wgg_forms[f].mb); /* rows a tile */
    const int64_t tiles = wgg_tiles(wgg_forms[f].mb, a.R); /* SILU: rows even, checked above */
    a.units = tiles * a.kb;
    a.epi = epi;
    a.rms = rms;
    a.trigger = ctx->gemm.wg_trigger;
    a.evict_first = ctx->gemm.wg_evict_first;
    a.eps = eps;
    a.cnt = st->wg_cnt;
    a.ws = static_cast<float *>(st->gemm_ws);
    const uint64_t row = (uint64_t)a.C * 2, rows = epi == WGG_SILU ? (uint64_t)a.R / 2 : (uint64_t)a.R;
    const uint64_t wd[3] = {(uint64_t)a.C, rows, epi == WGG_SILU ? 2u : 1u}, ws[2] = {row, row * rows};
    const uint32_t wb[3] = {WGG_K, epi == WGG_SILU ? 8u : (uint32_t)tm, epi == WGG_SILU ? 2u : 1u}; /* tm <= 256 */
    const uint64_t xd[3] = {(uint64_t)a.C, (uint64_t)n, 1}, xs[2] = {row, row * (uint64_t)n};
    const uint32_t xb[3] = {WGG_K, KCUDA_WG_MAX_N, 1};
    INFERD_CHECK(kc_tmap_encode(&a.tw, w->data, wd, ws, wb) && kc_tmap_encode(&a.tx, in, xd, xs, xb));
    a.split = wgg_split(st, &ctx->gemm, f, tiles, a.kb);
    int64_t grid;
    if (a.split) {
        grid = tiles * a.split;
        INFERD_CHECK(grid <= INT32_MAX);
    } else {
        const int ctas = ctx->gemm.wg_ctas; /* kern_gemm_config keeps it in 1..3 */
        grid = ctx->gemm.wg_grid > 0 ? ctx->gemm.wg_grid : (int64_t)st->n_sms * ctas;
        grid = grid < a.units ? grid : a.units;
        INFERD_CHECK((size_t)grid * 2 * WGG_SLOT(wgg_forms[f].mb) * sizeof(float) <= st->gemm_ws_bytes);
    }
    if (kcuda_gemm_wg_trace && grid <= kcuda_gemm_wg_trace_cap) {
        a.trace = kcuda_gemm_wg_trace;
        kcuda_gemm_wg_trace_ctas = (int)grid;
    }
    kc_launch_cluster(wgg_forms[f].kernel, dim3((unsigned)grid), WGG_BLOCK,
                      wgg_smem(wgg_forms[f].mb, wgg_forms[f].stages), st->stream, ctx->gemm.pdl,
                      a.split > 1 ? (unsigned)a.split : 1u, a);
    KCUDA_LAUNCH_CHECK();
    kcuda_gemm_wg_launches++;
    kcuda_gemm_wg_split_launches += a.split != 0;
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
