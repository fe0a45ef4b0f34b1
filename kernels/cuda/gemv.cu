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
 *    Valid inside CUDA graphs (captured as a programmatic edge). The
 *    CUDA-core form does not trigger its own dependents early: an early
 *    trigger after the weights were read was timed twice (docs/PERF.md,
 *    eleventh and twelfth sessions; clean under compute-sanitizer once the
 *    RoPE rounding was fixed) and ran batch 1 within noise of the plain end
 *    of the grid. The tensor-core form does at one n-tile (a.trigger,
 *    tcg_trigger, INFERD_GEMV_TC_TRIGGER): once its main loop is done, so
 *    the next GEMV's and the decode attention's CTAs launch during its sums
 *    and epilogue (batch 8 1.3% faster on an H100; at two n-tiles batch 16
 *    ran 0.4% slower with it, thirty-sixth session). Each dependent still
 *    waits for the whole grid.
 * Preload (a.pre, kcuda_gemv_preload; the O product after the decode
 * attention, 1..2 tokens): the lane's first a.pre chunks of its rows go to
 * shared memory by cp.async before the PDL wait. The attention and its
 * merge then trigger their dependents at their start, so this kernel is
 * resident while they run and those bytes arrive while the HBM would
 * otherwise idle; after the wait the chunks are multiplied from shared
 * memory first, in the same k order (the same bits).
 * Input staging (a.xs, gemv_xs_fit; kern_gemm_opts.gemv_xs, INFERD_GEMV_XS,
 * on by default: H100 decode steps at batch 1 1.1% and batch 2 4.3%
 * faster, docs/PERF.md): at 1..2 tokens the CTA copies the
 * input rows (after the PDL wait) and the norm weight (before it) into
 * shared memory behind the preload area in one round trip, and every chunk
 * step reads them there: without it each step's first warp waits on an
 * L1/L2 load of its input chunk, which in the O product's preloaded steps
 * (weights already in shared memory) is the whole cost of the step. Where
 * the rows do not fit the 48 KiB a CTA gets without an opt-in beside the
 * preload, the preload is shortened (its chunks stay summed in k order)
 * or, past that, the launch reads through L1 as before. Same values, same
 * order: the same bits (test_fused_xs).
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
 *
 * Tensor-core form (gemv_tc_kernel; plain products of n >= gemv_tc_min_n
 * tokens, 3 by default): at n > 4 the CUDA-core
 * kernel stops being memory-bound (8 n FMAs per weight element: 88% of
 * the copy bandwidth at n = 8 on gate/up, 64% on QKV, where cuBLASLt gets
 * 94% / 76%), so mma.sync does the n-fold work and the loop only streams
 * W. A CTA owns 16 output rows (one m-tile, W as the A operand) and all n
 * <= 16 tokens (one or two n-tiles of 8, the input as the B operand); its
 * 4 warps split the row's 32-element chunks four ways. Lane (g, c) reads
 * 16 bytes, elements [8c, 8c + 8) of a chunk, of rows g and g + 8 and of
 * token g (and g + 8); no shuffles: the mma's k index is permuted the same
 * way for A and B (its k pairs 2c, 2c + 1 and 2c + 8, 2c + 9 take elements
 * 8c + {0, 1} and 8c + {2, 3} of the chunk in the first k-block, + 4 in the
 * second), which a dot product does not see. TCG_U chunks of both rows in
 * flight per lane, loaded before the PDL wait for the first, and the
 * matching input pieces loaded with them (ninth session: the first form
 * read the input inside the mma loop, one L2 round trip per chunk, and
 * reached 59-76% of the copy bandwidth at n = 16 against cuBLASLt's
 * 66-94%, docs/PERF.md; this one ran decode steps of 4 / 8 / 16 tokens
 * 7% / 6% / 3% faster than the CUDA-core GEMV and cuBLASLt). The four
 * warps' partial sums meet in shared memory and are added in warp order,
 * so a (row, token) result depends on C and the tiling alone, not on n.
 * The ring (gemv_tc_ring): the weights through TCG_RING_S stages in shared
 * memory by cp.async (48 KiB a CTA at TCG_U 4; the partial sums then
 * overlay its front), two steps in flight a warp instead of one, and 128
 * registers instead of 168 at two n-tiles; the input pieces stay one step
 * ahead in registers. Bitwise the same products (test_gemv_ring_bitwise).
 * Its epilogues (kern_matmul_epi_fusable: no norm, n >= gemv_tc_min_n):
 * RESID, and the pair epilogues with a CTA's 16 rows as 8 pairs, rows m and
 * m + 8 the two rows of a pair (tcg_row), so one thread of the final
 * reduction holds both: SiLU * up and RoPE + K/V write (gemv_rope_pair)
 * with the roundings of the unfused ops, bit for bit. A folded norm
 * (kern_fuse.rms: the norm weight multiplied into W at load, the input
 * the residual stream itself) adds the sum of the squares of the input
 * pieces each lane loads, met in shared memory beside the products, and a
 * per-token scale 1 / rms in the pair epilogues; at any n of the route,
 * since the CUDA-core form below takes weighted norms only.
 *
 * Fusion (kern_matmul_fused, n <= KCUDA_FUSE_MAX_N): the same kernel with
 * a norm and an epilogue, so a decode layer runs four GEMVs, the attention
 * and nothing else: the QKV GEMV normalizes the residual stream on the fly
 * and ends with RoPE and the K/V cache write; the O and down GEMVs add into
 * the residual stream; the gate/up GEMV normalizes and ends with SiLU * up.
 * The norm costs no pass of its own: a warp's lanes read every chunk of
 * the input row anyway, so they multiply x * g into the dot product and sum
 * x^2 on the side; the warp's reduction gives the 1 / rms that scales the
 * sum. (The unfused path rounds the normed row to bf16 first; this one
 * does not, and sums the squares in another order: the results agree to
 * bf16 noise, not bitwise.) The pair epilogues (SiLU, RoPE) map a warp's
 * row slots onto pairs of rows whose results meet in one lane: (j, j + R/2)
 * for gate and up, (j, j + head_dim/2) for RoPE. Every epilogue rounds
 * where the unfused ops round (bf16 product, then the op in fp32 from bf16
 * values). Lane t of a warp runs token t's epilogue; what it reads besides
 * the sums (residual values, position, slot) it loads before the main loop.
 */
#include "kernels/cuda/common.cuh"
#include "kernels/cuda/mma.cuh"

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

/* A launch's arguments: the product and what is fused around it
 * (kern_fuse). Epilogue kinds as kern_epilogue; F32 output only with STORE. */
struct gemv_args {
    void *out;            /* STORE: [NT, R] bf16 or fp32; SILU_MUL: [NT, R/2]; ROPE_KV: [NT, R] qkv */
    const uint16_t *in;   /* [NT, C] */
    const uint16_t *w;    /* [R, C] */
    int R, C;
    const uint16_t *norm; /* [C]: prologue RMSNorm weight, or NULL */
    float eps;
    uint16_t *resid;      /* RESID: [NT, R] */
    const uint16_t *bias; /* ROPE_KV: [R] or NULL */
    kern_rope_kv_params rope;
    int n;   /* tokens (the tensor-core form; the CUDA-core one has NT) */
    int pre; /* the CUDA-core form: chunks a lane copies into shared memory before its PDL wait
              * (kcuda_gemv_preload), 0: none */
    int xs;  /* the CUDA-core form at n <= 2: the input rows (and the norm weight) staged in
              * shared memory (gemv_xs_fit), 0: read through L1 */
    int trigger; /* the tensor-core form: trigger its programmatic dependents once its weights are
                  * read (kern_gemm_opts.gemv_tc_trigger), else at its end */
};

/* The weight row of a warp's row slot r (of RPW). STORE and RESID: RPW
 * consecutive rows. The pair epilogues give a warp RPW / 2 pairs of rows
 * whose results meet in one lane: SILU_MUL the pair (j, j + R/2) of gate
 * and up, ROPE_KV the rotate_half pair (j, j + head_dim/2) of a head (v
 * heads too, stored unrotated). *ok: the slot holds a real row (else its
 * row is clamped into the matrix and never stored). */
template <int EPI, int RPW>
__device__ __forceinline__ int gemv_row(const gemv_args &a, int gwarp, int r, bool *ok)
{
    if (EPI == KERN_EPI_STORE || EPI == KERN_EPI_RESID) {
        const int row = gwarp * RPW + r;
        *ok = row < a.R;
        return min(row, a.R - 1);
    }
    constexpr int P = RPW / 2;
    const int half_rows = a.R / 2;
    int pair = gwarp * P + r % P;
    *ok = pair < half_rows;
    pair = min(pair, half_rows - 1);
    if (EPI == KERN_EPI_SILU_MUL)
        return pair + (r >= P ? half_rows : 0);
    const int half = a.rope.head_dim / 2, h = pair / half, j = pair - h * half;
    return h * a.rope.head_dim + j + (r >= P ? half : 0);
}

/* RoPE + cache write of one pair of token t (ROPE_KV): x1, x2 are the bf16
 * products of rows row1 = h * hd + j and row1 + hd/2, biased; q and k pairs
 * are rotated (as rope_kv_kernel in ops.cu), v pairs stored as they are;
 * k and v also go to the cache slot of the token (bf16, or with kv_fp8
 * their e4m3 codes). */
__device__ __forceinline__ void gemv_rope_pair(const gemv_args &a, int t, int row1, float x1, float x2, int pos,
                                               int64_t slot)
{
    const kern_rope_kv_params &p = a.rope;
    const int hd = p.head_dim, half = hd / 2, h = row1 / hd, j = row1 - h * hd;
    if (a.bias) {
        x1 = kc_bf2f(kc_f2bf(x1 + kc_bf2f(a.bias[row1])));
        x2 = kc_bf2f(kc_f2bf(x2 + kc_bf2f(a.bias[row1 + half])));
    }
    uint16_t o1 = kc_f2bf(x1), o2 = kc_f2bf(x2);
    if (h < p.n_heads + p.n_kv_heads) {
        const float ms = p.mscale != 0.0f ? p.mscale : 1.0f;
        const float angle = (float)pos * p.inv_freq[j];
        const float cs = cosf(angle) * ms, sn = sinf(angle) * ms;
        kc_rope_rotate(x1, x2, cs, sn, &o1, &o2);
    }
    uint16_t *qkv = static_cast<uint16_t *>(a.out) + (size_t)t * (size_t)a.R;
    qkv[row1] = o1;
    qkv[row1 + half] = o2;
    if (h < p.n_heads || slot < 0)
        return;
    const bool is_k = h < p.n_heads + p.n_kv_heads;
    const int kvh = h - p.n_heads - (is_k ? 0 : p.n_kv_heads);
    const int64_t blk = slot / p.block_size, off = slot - blk * p.block_size;
    void *cache = is_k ? p.k_cache : p.v_cache;
    const int64_t dst = ((blk * p.n_kv_heads + kvh) * p.block_size + off) * hd + j;
    kc_kv_store(cache, dst, o1, p.kv_fp8);
    kc_kv_store(cache, dst + half, o2, p.kv_fp8);
}

/* What lane t's epilogue reads besides the sums, loaded before the main
 * loop so that the loads' latency hides behind it: the residual values of
 * the warp's rows (RESID), the token's position and cache slot (ROPE_KV). */
template <int RPW>
struct gemv_pre {
    float resid[RPW];
    int pos;
    int64_t slot;
};

template <int EPI, int RPW>
__device__ __forceinline__ void gemv_prefetch(const gemv_args &a, int gwarp, int t, gemv_pre<RPW> &pre)
{
    if (EPI == KERN_EPI_RESID) {
#pragma unroll
        for (int r = 0; r < RPW; r++) {
            bool ok;
            const int row = gemv_row<EPI, RPW>(a, gwarp, r, &ok);
            pre.resid[r] = kc_bf2f(a.resid[(size_t)t * (size_t)a.R + (size_t)row]);
        }
    } else if (EPI == KERN_EPI_ROPE_KV) {
        pre.pos = a.rope.positions[t];
        pre.slot = a.rope.slot_mapping[t];
    }
}

/* Token t's results of the warp's RPW slots (s[r], lane t holds them). */
template <int EPI, int RPW, bool F32>
__device__ __forceinline__ void gemv_epilogue(const gemv_args &a, int gwarp, int t, const float *s,
                                              const gemv_pre<RPW> &pre)
{
    constexpr int P = RPW / 2;
#pragma unroll
    for (int r = 0; r < (EPI == KERN_EPI_STORE || EPI == KERN_EPI_RESID ? RPW : P); r++) {
        bool ok;
        const int row = gemv_row<EPI, RPW>(a, gwarp, r, &ok);
        if (!ok)
            continue;
        const size_t o = (size_t)t * (size_t)a.R + (size_t)row;
        if (EPI == KERN_EPI_STORE) {
            if (F32)
                static_cast<float *>(a.out)[o] = s[r];
            else
                static_cast<uint16_t *>(a.out)[o] = kc_f2bf(s[r]);
        } else if (EPI == KERN_EPI_RESID) {
            a.resid[o] = kc_f2bf(pre.resid[r] + kc_bf2f(kc_f2bf(s[r])));
        } else if (EPI == KERN_EPI_SILU_MUL) {
            const float g = kc_bf2f(kc_f2bf(s[r])), u = kc_bf2f(kc_f2bf(s[r + P]));
            static_cast<uint16_t *>(a.out)[(size_t)t * (size_t)(a.R / 2) + (size_t)row] = kc_f2bf(kc_silu_mul(g, u));
        } else {
            gemv_rope_pair(a, t, row, kc_bf2f(kc_f2bf(s[r])), kc_bf2f(kc_f2bf(s[r + P])), pre.pos, pre.slot);
        }
    }
}

/* 16 bytes of the input or the norm weight: from shared memory when XS
 * (staged there, gemv_kernel), else through the read-only path. */
template <bool XS> __device__ __forceinline__ uint4 gemv_ld_x(const uint4 *p)
{
    return XS ? *p : __ldg(p);
}

/* The input chunk k of token t as 8 floats; with the norm, x * g in fp32
 * and x's squares added to *ss (the 1 / rms is applied to the sum). */
template <bool NORM, bool XS>
__device__ __forceinline__ void gemv_load_x(const uint4 *x, int nch, int t, int k, const float *g, float *xf,
                                            float *ss)
{
    kc_unpack8(gemv_ld_x<XS>(x + (size_t)t * nch + k), xf);
    if (NORM) {
#pragma unroll
        for (int e = 0; e < 8; e++) {
            *ss = fmaf(xf[e], xf[e], *ss);
            xf[e] *= g[e];
        }
    }
}

/* Chunk k of the warp's RPW rows (w[r], 16 bytes each) times chunk k of
 * every token's input row (normed with NORM: g the norm's chunk), into
 * acc; with NORM, x's squares into ss. */
template <int NT, int RPW, bool NORM, bool XS>
__device__ __forceinline__ void gemv_chunk(const uint4 (&w)[RPW], const uint4 *x, const uint4 *gn, int nch,
                                           int k, float (&acc)[RPW][NT], float (&ss)[NT])
{
    float wf[RPW][8], g[8] = {};
#pragma unroll
    for (int r = 0; r < RPW; r++)
        kc_unpack8(w[r], wf[r]);
    if (NORM)
        kc_unpack8(gemv_ld_x<XS>(gn + k), g);
#pragma unroll
    for (int t = 0; t < NT; t++) {
        float xf[8];
        gemv_load_x<NORM, XS>(x, nch, t, k, g, xf, &ss[t]);
#pragma unroll
        for (int r = 0; r < RPW; r++)
#pragma unroll
            for (int j = 0; j < 8; j++)
                acc[r][t] = fmaf(wf[r][j], xf[j], acc[r][t]);
    }
}

/* For t < NT and the warp's RPW row slots: the dot product of input row t
 * (normed with NORM) and the slot's weight row, then the epilogue EPI.
 * Pipelining, PDL and the summation order as described at the top. With
 * a.pre, the lane's first a.pre chunks of each row (k = lane + 32 j, j <
 * a.pre) are copied into shared memory (cp.async, [GEMV_WARPS][pre][RPW]
 * [32] uint4) before the PDL wait, while the kernels before this one run,
 * and multiplied from there first; the rest streams as before, so the
 * chunks are summed in the same order and the bits do not change. XS:
 * the input staging described at the top (a.xs, gemv_xs_fit). */
template <int NT, int RPW, int U, bool F32, int MINB, int EPI, bool NORM, bool XS>
static __global__ void __launch_bounds__(GEMV_WARPS * 32, MINB) gemv_kernel(const gemv_args a)
{
    extern __shared__ uint4 gemv_pre_smem[];
    const int lane = threadIdx.x & 31;
    const int gwarp = (int)(blockIdx.x * GEMV_WARPS + (threadIdx.x >> 5));
    const int nch = a.C >> 3; /* 16-byte chunks per row */
    const uint4 *wr[RPW];
    bool any = false;
#pragma unroll
    for (int r = 0; r < RPW; r++) {
        bool ok;
        wr[r] = reinterpret_cast<const uint4 *>(a.w + (size_t)gemv_row<EPI, RPW>(a, gwarp, r, &ok) * (size_t)a.C);
        any |= ok;
    }
    const uint4 *x = reinterpret_cast<const uint4 *>(a.in);
    const uint4 *gn = reinterpret_cast<const uint4 *>(a.norm);
    /* XS: [NT][nch] input chunks, then [nch] norm chunks, after the preload area */
    uint4 *xs = gemv_pre_smem + (size_t)GEMV_WARPS * a.pre * RPW * 32;
    if (XS && NORM) { /* a weight: no earlier kernel writes it */
        for (int i = threadIdx.x; i < nch; i += GEMV_WARPS * 32)
            kc_cp_async16(xs + NT * nch + i, gn + i, true);
        kc_cp_commit();
    }
    float acc[RPW][NT], ss[NT];
#pragma unroll
    for (int t = 0; t < NT; t++) {
        ss[t] = 0.0f;
#pragma unroll
        for (int r = 0; r < RPW; r++)
            acc[r][t] = 0.0f;
    }
    if (!any && !XS) { /* with XS the warp takes part in the staging (its rows clamped, never stored) */
        kc_pdl_wait();
        return;
    }
    /* only the O product's form (RESID, no norm) preloads: the other forms keep their registers */
    const int pre = EPI == KERN_EPI_RESID && !NORM ? a.pre : 0, k1 = lane + 32 * pre; /* streamed from k1 */
    const int npre = min(pre, (nch - lane + 31) / 32); /* this lane's preloaded chunks (those in the row) */
    uint4 *ps = gemv_pre_smem + (size_t)(threadIdx.x >> 5) * pre * RPW * 32 +
                lane; /* slot (j, r) at (j RPW + r) 32 */
    if (pre > 0) {
        for (int j = 0; j < npre; j++)
#pragma unroll
            for (int r = 0; r < RPW; r++)
                kc_cp_async16(ps + (j * RPW + r) * 32, wr[r] + lane + 32 * j, true);
        kc_cp_commit();
    }
    uint4 wv[RPW][U];
    gemv_load_w<RPW, U>(wv, wr, k1, nch);
    kc_pdl_wait(); /* the input is the previous kernel's output */
    if (XS) {
        for (int i = threadIdx.x; i < NT * nch; i += GEMV_WARPS * 32)
            kc_cp_async16(xs + i, x + i, true);
        kc_cp_commit();
        kc_cp_wait<0>(); /* (the preload's copies too) */
        __syncthreads();
        x = xs;
        gn = xs + NT * nch;
    }
    gemv_pre<RPW> pre_e = {};
    if (lane < NT)
        gemv_prefetch<EPI, RPW>(a, gwarp, lane, pre_e);
    if (pre > 0)
        kc_cp_wait<0>(); /* this lane's copies (it alone reads its slots) */
    for (int j = 0; j < npre; j++) {
        uint4 w[RPW];
#pragma unroll
        for (int r = 0; r < RPW; r++)
            w[r] = ps[(j * RPW + r) * 32];
        gemv_chunk<NT, RPW, NORM, XS>(w, x, gn, nch, lane + 32 * j, acc, ss);
    }
    for (int k0 = k1; k0 < nch; k0 += 32 * U) {
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
            uint4 w[RPW];
#pragma unroll
            for (int r = 0; r < RPW; r++)
                w[r] = cur[r][u];
            gemv_chunk<NT, RPW, NORM, XS>(w, x, gn, nch, k, acc, ss);
        }
    }
    /* every lane gets every sum (butterfly); lane t runs token t's epilogue */
#pragma unroll
    for (int t = 0; t < NT; t++) {
        float inv = 1.0f;
        if (NORM) /* kern_add_rmsnorm's formula; the warp saw the whole row */
            inv = kc_inv_rms(kc_warp_sum(ss[t]), a.C, a.eps);
        float s[RPW];
#pragma unroll
        for (int r = 0; r < RPW; r++)
            s[r] = kc_warp_sum(acc[r][t]) * inv;
        if (lane == t)
            gemv_epilogue<EPI, RPW, F32>(a, gwarp, t, s, pre_e);
    }
}

/* Launch one instantiation: one warp per RPW rows (STORE, RESID) or per
 * RPW / 2 pairs of rows, GEMV_WARPS warps per CTA; with PDL the launch may
 * begin before the previous kernel on the stream ends (the kernel waits
 * before touching its input). */
template <int NT, bool F32, int RPW, int U, int MINB, int EPI, bool NORM, bool XS>
static void gemv_launch(cudaStream_t s, bool pdl, const gemv_args &a)
{
    const int64_t units = EPI == KERN_EPI_STORE || EPI == KERN_EPI_RESID ? a.R : a.R / 2;
    const unsigned grid = kcuda_cdiv(units, (int64_t)(EPI == KERN_EPI_STORE || EPI == KERN_EPI_RESID ? RPW : RPW / 2) *
                                                GEMV_WARPS);
    const size_t smem = (size_t)GEMV_WARPS * a.pre * RPW * 32 * sizeof(uint4) + /* the preloaded chunks */
                        (XS ? (size_t)(NT + (NORM ? 1 : 0)) * (size_t)(a.C / 8) * sizeof(uint4) : 0);
    kc_launch(gemv_kernel<NT, RPW, U, F32, MINB, EPI, NORM, XS>, dim3(grid), GEMV_WARPS * 32, smem, s, pdl,
              a);
}

/* Shapes per n: RPW rows per warp, U chunks per row in flight, MINB CTAs
 * per SM asked of the register allocator. Variant 1 (the default, n <= 2
 * only; INFERD_GEMV_VARIANT=0 turns it off): U 2 and 8 CTAs per SM, more
 * warps resident instead of more loads per warp. */
template <int NT, bool F32, int EPI, bool NORM>
static void gemv_launch_n(cudaStream_t s, bool pdl, int variant, const gemv_args &a)
{
    if constexpr (NT <= 2) {
        /* the fused forms at n = 2 spill at 64 registers (8 CTAs) */
        constexpr int minb = NT == 1 || (EPI == KERN_EPI_STORE && !NORM) ? 8 : 6;
        if (variant == 1 && a.xs)
            gemv_launch<NT, F32, 2, 2, minb, EPI, NORM, true>(s, pdl, a);
        else if (variant == 1)
            gemv_launch<NT, F32, 2, 2, minb, EPI, NORM, false>(s, pdl, a);
        else
            gemv_launch<NT, F32, 2, 4, 1, EPI, NORM, false>(s, pdl, a);
    } else if constexpr (NT <= 4) {
        (void)variant;
        gemv_launch<NT, F32, 2, 4, 1, EPI, NORM, false>(s, pdl, a);
    } else {
        (void)variant;
        gemv_launch<NT, F32, 4, 2, 1, EPI, NORM, false>(s, pdl, a);
    }
}

/* The fused forms are instantiated for n <= KCUDA_FUSE_MAX_N only (code
 * size: 7 forms x 16 sizes otherwise); kcuda_matmul_fusable says so. */
template <int NT>
static void gemv_launch_form(cudaStream_t s, bool pdl, int variant, bool f32, int epi, bool norm, const gemv_args &a)
{
    if (epi == KERN_EPI_STORE && !norm) {
        if (f32)
            gemv_launch_n<NT, true, KERN_EPI_STORE, false>(s, pdl, variant, a);
        else
            gemv_launch_n<NT, false, KERN_EPI_STORE, false>(s, pdl, variant, a);
        return;
    }
    if constexpr (NT <= KCUDA_FUSE_MAX_N) {
        if (epi == KERN_EPI_STORE)
            gemv_launch_n<NT, false, KERN_EPI_STORE, true>(s, pdl, variant, a);
        else if (epi == KERN_EPI_RESID && norm)
            gemv_launch_n<NT, false, KERN_EPI_RESID, true>(s, pdl, variant, a);
        else if (epi == KERN_EPI_RESID)
            gemv_launch_n<NT, false, KERN_EPI_RESID, false>(s, pdl, variant, a);
        else if (epi == KERN_EPI_SILU_MUL && norm)
            gemv_launch_n<NT, false, KERN_EPI_SILU_MUL, true>(s, pdl, variant, a);
        else if (epi == KERN_EPI_SILU_MUL)
            gemv_launch_n<NT, false, KERN_EPI_SILU_MUL, false>(s, pdl, variant, a);
        else if (norm)
            gemv_launch_n<NT, false, KERN_EPI_ROPE_KV, true>(s, pdl, variant, a);
        else
            gemv_launch_n<NT, false, KERN_EPI_ROPE_KV, false>(s, pdl, variant, a);
    } else {
        INFERD_CHECK_MSG(false, "gemv: fused forms take n <= KCUDA_FUSE_MAX_N");
    }
}

static void gemv_dispatch(cudaStream_t s, bool pdl, int variant, bool f32, int epi, bool norm, const gemv_args &a,
                          int n)
{
    switch (n) {
#define GEMV_CASE(N)                                                                                               \
    case N:                                                                                                        \
        gemv_launch_form<N>(s, pdl, variant, f32, epi, norm, a);                                                   \
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

/* --- tensor-core form (see the top) --------------------------------------------------- */

#define TCG_WARPS 4 /* warps per CTA: a row's chunks split four ways */
#define TCG_ROWS 16 /* output rows per CTA: one m-tile */
#define TCG_NT 8    /* tokens of an n-tile (the mma's n): 1..8 tokens one tile, 9..16 two */
#ifndef KC_TCG_U
#define TCG_U 4 /* chunks (32 elements) of both rows in flight per lane (-DKC_TCG_U=N: A/B builds) */
#else
#define TCG_U KC_TCG_U
#endif
#define TCG_STAGE (TCG_U * 2 * 32) /* uint4 of a warp's ring stage: TCG_U chunks of both rows */
#ifndef KC_TCG_RING_S
#define TCG_RING_S 3 /* stages of a warp's ring, 48 KiB a CTA at TCG_U 4 (-DKC_TCG_RING_S=N) */
#else
#define TCG_RING_S KC_TCG_RING_S
#endif

/* Whether a tensor-core launch of n tokens triggers its programmatic
 * dependents once its main loop is done (gemv_args.trigger):
 * kern_gemm_opts.gemv_tc_trigger 1 (the default) at one n-tile only, 2 at
 * every n, 0 never. A function of n alone, so a padded graph replay
 * launches as the eager step does. */
static bool tcg_trigger(const kern_ctx *ctx, int n)
{
    return ctx->gemm.gemv_tc_trigger >= 2 || (ctx->gemm.gemv_tc_trigger == 1 && n <= TCG_NT);
}

/* The first element of lane column c's 16-byte piece of chunk q (32
 * elements a chunk, 8 a piece): what tcg_load_w, tcg_ring_issue and
 * tcg_load_x read at chunk q + u. */
__device__ __forceinline__ int tcg_elem(int q, int c)
{
    return 32 * q + 8 * c;
}

/* Chunks q .. q + TCG_U - 1 (< q1) of the lane's two rows, elements
 * [32 q + 8c, +8); pieces past the warp's range or the row are zero. */
__device__ __forceinline__ void tcg_load_w(uint4 (&wv)[TCG_U][2], const uint16_t *wa, const uint16_t *wb, int q,
                                           int q1, int c, int C)
{
#pragma unroll
    for (int u = 0; u < TCG_U; u++) {
        const int k = tcg_elem(q + u, c);
        const bool ok = q + u < q1 && k < C;
        wv[u][0] = ok ? gemv_ld_stream(reinterpret_cast<const uint4 *>(wa + k)) : make_uint4(0u, 0u, 0u, 0u);
        wv[u][1] = ok ? gemv_ld_stream(reinterpret_cast<const uint4 *>(wb + k)) : make_uint4(0u, 0u, 0u, 0u);
    }
}

/* The ring form of tcg_load_w (gemv_tc_ring): the same chunks by cp.async into
 * stage st of the warp's ring, slot (u, row h) of lane l at
 * st[(2 u + h) * 32 + l]: zero-filled past the row end, not written past
 * the warp's range (chunks the loop never multiplies, so no copy is in
 * flight once it ends); closes the lane's group. */
__device__ __forceinline__ void tcg_ring_issue(uint4 *st, const uint16_t *wa, const uint16_t *wb, int q, int q1,
                                               int c, int C, int lane)
{
#pragma unroll
    for (int u = 0; u < TCG_U; u++) {
        const int k = tcg_elem(q + u, c);
        const bool ok = k < C;
        if (q + u < q1) {
            kc_cp_async16(st + (2 * u) * 32 + lane, ok ? wa + k : wa, ok);
            kc_cp_async16(st + (2 * u + 1) * 32 + lane, ok ? wb + k : wb, ok);
        }
    }
    kc_cp_commit();
}

/* The input pieces matching tcg_load_w's chunks: elements [32 q + 8c, +8)
 * of tokens g and g + 8 (n-tiles nt < NT2); tokens past a.n, chunks past the
 * warp's range or the row are zero. Loaded TCG_U chunks ahead with the
 * weights, so the mma never waits on an input read. */
template <int NT2>
__device__ __forceinline__ void tcg_load_x(uint4 (&xv)[TCG_U][NT2], const gemv_args &a, int q, int q1, int c, int g)
{
#pragma unroll
    for (int u = 0; u < TCG_U; u++) {
        const int k = tcg_elem(q + u, c);
#pragma unroll
        for (int nt = 0; nt < NT2; nt++) {
            const int t = g + TCG_NT * nt;
            xv[u][nt] = q + u < q1 && k < a.C && t < a.n
                            ? __ldg(reinterpret_cast<const uint4 *>(a.in + (size_t)t * (size_t)a.C + k))
                            : make_uint4(0u, 0u, 0u, 0u);
        }
    }
}

/* The weight row of the tensor-core form's CTA row m (0..15). STORE and
 * RESID: rows 16 blockIdx.x + m. The pair epilogues: the CTA holds pairs
 * 8 blockIdx.x .. + 7, rows m and m + 8 the two rows of one pair (gate and
 * up: j, j + R/2; RoPE: the rotate_half pair j, j + head_dim/2 of a head,
 * as gemv_row maps a warp's slots), so the mma's C fragment puts both in
 * one thread (its elements e and e + 2). *ok: a real row (else clamped
 * into the matrix for the loads, never stored). */
template <int EPI> __device__ __forceinline__ int tcg_row(const gemv_args &a, int m, bool *ok)
{
    if (EPI == KERN_EPI_STORE || EPI == KERN_EPI_RESID) {
        const int row = (int)blockIdx.x * TCG_ROWS + m;
        *ok = row < a.R;
        return min(row, a.R - 1);
    }
    const int half_rows = a.R / 2;
    int pair = (int)blockIdx.x * (TCG_ROWS / 2) + (m & 7);
    *ok = pair < half_rows;
    pair = min(pair, half_rows - 1);
    if (EPI == KERN_EPI_SILU_MUL)
        return pair + (m >= 8 ? half_rows : 0);
    const int half = a.rope.head_dim / 2, h = pair / half, j = pair - h * half;
    return h * a.rope.head_dim + j + (m >= 8 ? half : 0);
}

/* The sum over the CTA's warps of (CTA row m, token t): it sits in lane
 * 4 (m % 8) + (t % 8) / 2, element 2 (m / 8) + t % 2 of n-tile t / 8 of
 * each warp's C fragment; added in warp order. */
template <int NT2>
__device__ __forceinline__ float tcg_sum(const float (&red)[TCG_WARPS][NT2][32][4], int m, int t)
{
    const int tl = t & 7, l = 4 * (m & 7) + (tl >> 1), e = 2 * (m >> 3) + (tl & 1);
    float sum = red[0][t >> 3][l][e];
#pragma unroll
    for (int w = 1; w < TCG_WARPS; w++)
        sum += red[w][t >> 3][l][e];
    return sum;
}

/* The squares of the 8 input elements of piece v, added to ss. */
__device__ __forceinline__ float tcg_sq8(uint4 v, float ss)
{
    float x[8];
    kc_unpack8(v, x);
#pragma unroll
    for (int e = 0; e < 8; e++)
        ss = fmaf(x[e], x[e], ss);
    return ss;
}

/* Token t's 1 / rms from the warps' sums of squares (RMS), added in warp
 * order: a function of C and the tiling alone, as the products are. */
template <int NT2>
__device__ __forceinline__ float tcg_inv_rms(const float (&sq)[TCG_WARPS][NT2][TCG_NT], int t, int C, float eps)
{
    float ss = sq[0][t >> 3][t & 7];
#pragma unroll
    for (int w = 1; w < TCG_WARPS; w++)
        ss += sq[w][t >> 3][t & 7];
    return kc_inv_rms(ss, C, eps);
}

/* Shared memory of a tensor-core CTA: the partial sums red[TCG_WARPS][nt2]
 * [32][4] and, with RMS, the sums of squares [TCG_WARPS][nt2][TCG_NT] after
 * them (both over the ring's front once the loop is done). */
static size_t tcg_red_bytes(int nt2, bool rms)
{
    return (size_t)TCG_WARPS * nt2 * (32 * 4 + (rms ? TCG_NT : 0)) * sizeof(float);
}

/* One CTA: the 16 rows of tcg_row for t < a.n (NT2 n-tiles of 8 tokens),
 * then the epilogue EPI: STORE (fp32 with F32, else bf16), RESID, and the
 * pair epilogues SILU_MUL and ROPE_KV (one thread a pair and token), each
 * rounding as gemv_epilogue does. RMS (a folded norm, kern_fuse.rms; pair
 * epilogues only): the lanes also sum the squares of the input pieces they
 * load, each token's sum meets in shared memory as the products' do, and
 * the epilogue scales the bf16 products by the token's 1 / rms and rounds
 * again, as kern_silu_mul_rms and kern_rope_kv_write_ex do. */
template <int NT2, int S, bool F32, int EPI, bool RMS>
static __global__ void __launch_bounds__(TCG_WARPS * 32, S > 0 ? 4 : 1) gemv_tc_kernel(const gemv_args a)
{
    /* the ring (S > 0: [TCG_WARPS][S][TCG_STAGE] uint4), then the partial sums
     * red[TCG_WARPS][NT2][32][4] (and sq) over its front once the loop is done */
    extern __shared__ uint4 tcg_smem[];
    float(&red)[TCG_WARPS][NT2][32][4] = *reinterpret_cast<float(*)[TCG_WARPS][NT2][32][4]>(tcg_smem);
    float(&sqs)[TCG_WARPS][NT2][TCG_NT] = *reinterpret_cast<float(*)[TCG_WARPS][NT2][TCG_NT]>(
        reinterpret_cast<float *>(tcg_smem) + TCG_WARPS * NT2 * 32 * 4);
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, g = lane >> 2, c = lane & 3;
    const int C = a.C;
    const int nq = (C + 31) >> 5, per = (nq + TCG_WARPS - 1) / TCG_WARPS;
    const int q0 = min(nq, warp * per), q1 = min(nq, q0 + per);
    bool ok;
    const uint16_t *wa = a.w + (size_t)tcg_row<EPI>(a, g, &ok) * (size_t)C;     /* [C] */
    const uint16_t *wb = a.w + (size_t)tcg_row<EPI>(a, g + 8, &ok) * (size_t)C; /* [C] */
    float d[NT2][4], sq[NT2];
#pragma unroll
    for (int nt = 0; nt < NT2; nt++)
        d[nt][0] = d[nt][1] = d[nt][2] = d[nt][3] = sq[nt] = 0.0f;
    uint4 wv[TCG_U][2], xv[TCG_U][NT2];
    uint4 *ring = tcg_smem + (size_t)warp * S * TCG_STAGE; /* S > 0 */
    if constexpr (S > 0) {
#pragma unroll
        for (int j = 0; j < S - 1; j++)
            tcg_ring_issue(ring + j * TCG_STAGE, wa, wb, q0 + TCG_U * j, q1, c, C, lane);
    } else {
        tcg_load_w(wv, wa, wb, q0, q1, c, C);
    }
    kc_pdl_wait(); /* the input is the previous kernel's output */
    tcg_load_x<NT2>(xv, a, q0, q1, c, g);
    int stage = 0;
    for (int q = q0; q < q1; q += TCG_U) {
        uint4 cur[TCG_U][2], curx[TCG_U][NT2];
        if constexpr (S > 0) { /* S - 1 steps' weights in flight during this step's math */
            tcg_ring_issue(ring + (stage == 0 ? S - 1 : stage - 1) * TCG_STAGE, wa, wb, q + TCG_U * (S - 1), q1, c,
                           C, lane);
            kc_cp_wait<S - 1>();
#pragma unroll
            for (int u = 0; u < TCG_U; u++) {
                cur[u][0] = ring[stage * TCG_STAGE + (2 * u) * 32 + lane];
                cur[u][1] = ring[stage * TCG_STAGE + (2 * u + 1) * 32 + lane];
            }
            stage = stage == S - 1 ? 0 : stage + 1;
        }
#pragma unroll
        for (int u = 0; u < TCG_U; u++) {
            if constexpr (S == 0)
                cur[u][0] = wv[u][0], cur[u][1] = wv[u][1];
#pragma unroll
            for (int nt = 0; nt < NT2; nt++)
                curx[u][nt] = xv[u][nt];
        }
        if (q + TCG_U < q1) { /* next step's loads in flight during this step's math */
            if constexpr (S == 0)
                tcg_load_w(wv, wa, wb, q + TCG_U, q1, c, C);
            tcg_load_x<NT2>(xv, a, q + TCG_U, q1, c, g);
        }
        if constexpr (RMS) { /* pieces past the range or the row are zero */
#pragma unroll
            for (int u = 0; u < TCG_U; u++)
#pragma unroll
                for (int nt = 0; nt < NT2; nt++)
                    sq[nt] = tcg_sq8(curx[u][nt], sq[nt]);
        }
#pragma unroll
        for (int u = 0; u < TCG_U; u++) {
            if (q + u >= q1) /* warp-uniform */
                break;
            const uint32_t a0[4] = {cur[u][0].x, cur[u][1].x, cur[u][0].y, cur[u][1].y};
            const uint32_t a1[4] = {cur[u][0].z, cur[u][1].z, cur[u][0].w, cur[u][1].w};
#pragma unroll
            for (int nt = 0; nt < NT2; nt++) {
                kc_mma_16816(d[nt], a0, curx[u][nt].x, curx[u][nt].y);
                kc_mma_16816(d[nt], a1, curx[u][nt].z, curx[u][nt].w);
            }
        }
    }
    if (a.trigger) /* the next GEMV's CTAs stream their first weights during this one's sums */
        kc_pdl_trigger();
    if constexpr (S > 0) { /* red overlays other warps' stages */
        kc_cp_wait<0>();
        __syncthreads();
    }
#pragma unroll
    for (int nt = 0; nt < NT2; nt++) {
#pragma unroll
        for (int e = 0; e < 4; e++)
            red[warp][nt][lane][e] = d[nt][e];
        if constexpr (RMS) { /* token g + 8 nt: the four lanes of column c */
            float v = sq[nt];
            v += __shfl_xor_sync(0xFFFFFFFFu, v, 1);
            v += __shfl_xor_sync(0xFFFFFFFFu, v, 2);
            if (c == 0)
                sqs[warp][nt][g] = v;
        }
    }
    __syncthreads();
    if constexpr (EPI == KERN_EPI_STORE || EPI == KERN_EPI_RESID) {
        /* consecutive threads take consecutive rows of one token */
        for (int i = threadIdx.x; i < TCG_ROWS * TCG_NT * NT2; i += TCG_WARPS * 32) {
            const int m = i % TCG_ROWS, t = i / TCG_ROWS;
            const float sum = tcg_sum<NT2>(red, m, t);
            const int row = tcg_row<EPI>(a, m, &ok);
            if (t >= a.n || !ok)
                continue;
            const size_t o = (size_t)t * (size_t)a.R + (size_t)row;
            if (EPI == KERN_EPI_RESID)
                a.resid[o] = kc_f2bf(kc_bf2f(a.resid[o]) + kc_bf2f(kc_f2bf(sum)));
            else if (F32)
                static_cast<float *>(a.out)[o] = sum;
            else
                static_cast<uint16_t *>(a.out)[o] = kc_f2bf(sum);
        }
    } else {
        /* the pair epilogues: thread (pair m < 8, token t) has both rows */
        for (int i = threadIdx.x; i < (TCG_ROWS / 2) * TCG_NT * NT2; i += TCG_WARPS * 32) {
            const int m = i % (TCG_ROWS / 2), t = i / (TCG_ROWS / 2);
            float x1 = kc_bf2f(kc_f2bf(tcg_sum<NT2>(red, m, t)));
            float x2 = kc_bf2f(kc_f2bf(tcg_sum<NT2>(red, m + 8, t)));
            const int row = tcg_row<EPI>(a, m, &ok);
            if (t >= a.n || !ok)
                continue;
            if constexpr (RMS) {
                const float r = tcg_inv_rms<NT2>(sqs, t, C, a.eps);
                x1 = kc_bf2f(kc_f2bf(x1 * r));
                x2 = kc_bf2f(kc_f2bf(x2 * r));
            }
            if (EPI == KERN_EPI_SILU_MUL)
                static_cast<uint16_t *>(a.out)[(size_t)t * (size_t)(a.R / 2) + (size_t)row] =
                    kc_f2bf(kc_silu_mul(x1, x2));
            else
                gemv_rope_pair(a, t, row, x1, x2, a.rope.positions[t], a.rope.slot_mapping[t]);
        }
    }
}

/* Whether a tensor-core launch of nt2 n-tiles and ctas CTAs streams its
 * weights through the ring (mode: kern_gemm_opts::gemv_tc_ring): 2 always,
 * 1 (the default) for two n-tiles (9..16 tokens) and a grid of at least 2.5
 * CTAs an SM, 0 never. Measured on an H200 (docs/PERF.md, sixteenth
 * session), products of 16 tokens, % of the copy bandwidth, registers /
 * ring: QKV (384 CTAs) 58.0 / 71.0,
 * lm_head 82.3 / 91.0, gate/up 79.2 / 80.1, but O and down (256 CTAs, 1.9
 * an SM) 65.2 / 61.4 and 78.6 / 74.3; at n <= 8 the ring was slower or
 * even. The products are bitwise the same either way. */
static bool gemv_tc_ring(int mode, int nt2, int64_t ctas, int n_sms)
{
    if (mode != 1)
        return mode == 2;
    return nt2 == 2 && 2 * ctas >= 5 * (int64_t)n_sms;
}

/* The tensor-core kernel of NT2 n-tiles and epilogue EPI, with or
 * without the ring, fp32 or bf16 output, with or without the folded norm
 * (rms: the pair epilogues only, bf16). */
template <int NT2, int EPI> static void (*tcg_kernel(bool ring, bool f32, bool rms))(const gemv_args)
{
    if constexpr (EPI == KERN_EPI_SILU_MUL || EPI == KERN_EPI_ROPE_KV) {
        if (rms)
            return ring ? gemv_tc_kernel<NT2, TCG_RING_S, false, EPI, true> : gemv_tc_kernel<NT2, 0, false, EPI, true>;
    }
    if (ring)
        return f32 ? gemv_tc_kernel<NT2, TCG_RING_S, true, EPI, false> : gemv_tc_kernel<NT2, TCG_RING_S, false, EPI, false>;
    return f32 ? gemv_tc_kernel<NT2, 0, true, EPI, false> : gemv_tc_kernel<NT2, 0, false, EPI, false>;
}

/* The tensor-core form of a product of a.n <= 16 tokens with epilogue EPI
 * (fp32 output only with STORE): a CTA 16 rows, or 8 pairs of rows; the
 * ring as gemv_tc_ring says (ring_mode, n_sms). */
template <int EPI>
static void gemv_tc_launch_e(cudaStream_t s, bool pdl, int ring_mode, int n_sms, bool f32, bool rms,
                             const gemv_args &a)
{
    const int64_t units = EPI == KERN_EPI_STORE || EPI == KERN_EPI_RESID ? a.R : a.R / 2;
    const int per = EPI == KERN_EPI_STORE || EPI == KERN_EPI_RESID ? TCG_ROWS : TCG_ROWS / 2;
    const int64_t ctas = kcuda_cdiv(units, (int64_t)per);
    const int nt2 = a.n <= TCG_NT ? 1 : 2;
    const bool ring = gemv_tc_ring(ring_mode, nt2, ctas, n_sms);
    size_t smem = tcg_red_bytes(nt2, rms);
    if (ring) {
        const size_t bytes = (size_t)TCG_WARPS * TCG_RING_S * TCG_STAGE * sizeof(uint4);
        smem = bytes > smem ? bytes : smem;
    }
    kc_launch(nt2 == 1 ? tcg_kernel<1, EPI>(ring, f32, rms) : tcg_kernel<2, EPI>(ring, f32, rms),
              dim3((unsigned)ctas), TCG_WARPS * 32, smem, s, pdl, a);
}

/* rms: the folded norm (a.eps), SILU_MUL and ROPE_KV only. */
static void gemv_tc_launch(cudaStream_t s, bool pdl, int ring_mode, int n_sms, bool f32, int epi, bool rms,
                           const gemv_args &a)
{
    INFERD_CHECK(!f32 || epi == KERN_EPI_STORE);
    INFERD_CHECK(!rms || epi == KERN_EPI_SILU_MUL || epi == KERN_EPI_ROPE_KV);
    switch (epi) {
    case KERN_EPI_STORE: gemv_tc_launch_e<KERN_EPI_STORE>(s, pdl, ring_mode, n_sms, f32, false, a); break;
    case KERN_EPI_RESID: gemv_tc_launch_e<KERN_EPI_RESID>(s, pdl, ring_mode, n_sms, false, false, a); break;
    case KERN_EPI_SILU_MUL: gemv_tc_launch_e<KERN_EPI_SILU_MUL>(s, pdl, ring_mode, n_sms, false, rms, a); break;
    default: gemv_tc_launch_e<KERN_EPI_ROPE_KV>(s, pdl, ring_mode, n_sms, false, rms, a); break;
    }
}

/* Contract: the GEMV route for n tokens of w on ctx (kern_gemm_opts' sizes
 * and the kernel's requirements on the weight; the input's alignment is the
 * caller's to check): kern_matmul's (use_gemv, gemm.cu) and the fused
 * products'. Depends only on n and w. */
bool kcuda_gemv_route(const kern_ctx *ctx, const kern_weight *w, int n)
{
    const int64_t bytes = kern_weight_bytes(w);
    if (n > TCG_NT && ctx->gemm.gemv_lt_min_bytes > 0 && bytes >= ctx->gemm.gemv_lt_min_bytes)
        return false;
    return n >= 1 && n <= ctx->gemm.gemv_max_n && bytes >= ctx->gemm.gemv_min_weight_bytes &&
           w->dtype == KERN_DTYPE_BF16 && w->cols % 8 == 0 && w->rows <= INT32_MAX && w->cols <= INT32_MAX &&
           kcuda_aligned(w->data, 16);
}

/* Whether n tokens of the GEMV run its tensor-core form (gemv_tc_min_n). */
static bool gemv_use_tc(const kern_ctx *ctx, int n)
{
    return ctx->gemm.gemv_tc_min_n > 0 && n >= ctx->gemm.gemv_tc_min_n;
}

/* Whether n tokens of w run the tensor-core form on the GEMV route (its
 * epilogues: kern_matmul_epi_fusable past the CUDA-core fused form). */
static bool gemv_tc_route(const kern_ctx *ctx, const kern_weight *w, int n)
{
    return gemv_use_tc(ctx, n) && kcuda_gemv_route(ctx, w, n);
}

/* The input staging of gemv_kernel (XS) for a CUDA-core launch of n
 * tokens (gemv_xs: 0 never, 1 the preload form only, 2 every launch of
 * n <= 2 at variant 1): sets a->xs where the n input rows (and the norm
 * weight) fit beside the preload in the 48 KiB a CTA gets without an
 * opt-in, shortening the preload to make room. A function of n, the shape
 * and the options, so a padded graph replay launches as the eager step. */
static void gemv_xs_fit(const kern_ctx *ctx, gemv_args *a, int n, bool norm)
{
    const int mode = ctx->gemm.gemv_xs;
    const size_t max_bytes = 48 * 1024, pre_bytes = (size_t)GEMV_WARPS * 2 * 32 * sizeof(uint4);
    const size_t xb = (size_t)(n + (norm ? 1 : 0)) * (size_t)a->C * sizeof(uint16_t);
    a->xs = 0;
    if (n > 2 || ctx->gemm.gemv_variant != 1 || mode == 0 || (mode == 1 && a->pre == 0) || xb > max_bytes)
        return;
    const size_t room = (max_bytes - xb) / pre_bytes; /* preloaded chunks that still fit */
    if ((size_t)a->pre > room)
        a->pre = (int)room;
    a->xs = 1;
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
    gemv_args a = {};
    a.out = out;
    a.in = static_cast<const uint16_t *>(in);
    a.w = static_cast<const uint16_t *>(w->data);
    a.R = (int)w->rows;
    a.C = (int)w->cols;
    a.n = n;
    if (gemv_use_tc(ctx, n)) {
        a.trigger = tcg_trigger(ctx, n);
        gemv_tc_launch(st->stream, pdl, ctx->gemm.gemv_tc_ring, st->n_sms, out_f32 != 0, KERN_EPI_STORE, false, a);
    } else {
        gemv_xs_fit(ctx, &a, n, false);
        gemv_dispatch(st->stream, pdl, ctx->gemm.gemv_variant, out_f32 != 0, KERN_EPI_STORE, false, a, n);
    }
    KCUDA_LAUNCH_CHECK();
}

/* Contract (kern_internal.h): gemv_preload (kern_gemm_config keeps it in
 * 0..KCUDA_GEMV_MAX_PRELOAD) where the product after the attention runs the
 * CUDA-core form of 1..2 tokens (two rows a warp: pre x 4 KiB of shared
 * memory a CTA) launched as a programmatic dependent, else 0. A function of
 * n alone (and the options), so a padded graph replay launches as the
 * eager step does. */
int kcuda_gemv_preload(const kern_ctx *ctx, int n)
{
    if (n < 1 || n > 2 || !ctx->gemm.pdl || gemv_use_tc(ctx, n) || ctx->gemm.gemv_max_n < n)
        return 0;
    return ctx->gemm.gemv_preload;
}

/* Contract (kern_matmul_fusable): the GEMV route for n <= fuse_max_n
 * (kern_gemm_config keeps it <= KCUDA_FUSE_MAX_N). */
bool kcuda_matmul_fusable(const kern_ctx *ctx, const kern_weight *w, int n)
{
    return n <= ctx->gemm.fuse_max_n && kcuda_gemv_route(ctx, w, n);
}

/* Contract (kern_matmul_epi_fusable): the CUDA-core fused form, or the
 * tensor-core form's epilogues on the GEMV route. */
bool kcuda_matmul_epi_fusable(const kern_ctx *ctx, const kern_weight *w, int n)
{
    return kcuda_matmul_fusable(ctx, w, n) || gemv_tc_route(ctx, w, n);
}

/* Contract (kern_matmul_fused): one GEMV launch (PDL as kcuda_matmul's)
 * whose prologue and epilogue are defined in kernels.h: the CUDA-core form
 * (kern_matmul_fusable), else, without a norm, the tensor-core form
 * (kern_matmul_epi_fusable); a folded norm (f->rms) always the tensor-core
 * form, at any n of the GEMV route; kern_matmul_fused has checked the shapes.
 * Aborts when the product is not fusable or a bf16 operand (norm, bias,
 * cache) has another dtype. */
void kcuda_matmul_fused(kern_ctx *ctx, void *out, const void *in, const kern_weight *w, int n, const kern_fuse *f)
{
    kcuda_state *st = kcuda_st(ctx);
    const bool core = kcuda_matmul_fusable(ctx, w, n) && !f->rms; /* the CUDA-core form: weighted norms only */
    const bool tc = !core && !f->norm && (f->rms ? kcuda_gemv_route(ctx, w, n) : gemv_tc_route(ctx, w, n));
    INFERD_CHECK_MSG((core || tc) && kcuda_aligned(in, 16), "fused product not fusable here");
    INFERD_CHECK((!f->norm || f->norm->dtype == KERN_DTYPE_BF16) && (!f->qkv_bias || f->qkv_bias->dtype == KERN_DTYPE_BF16));
    gemv_args a = {};
    a.out = out;
    a.in = static_cast<const uint16_t *>(in);
    a.w = static_cast<const uint16_t *>(w->data);
    a.R = (int)w->rows;
    a.C = (int)w->cols;
    a.n = n;
    a.norm = f->norm ? static_cast<const uint16_t *>(f->norm->data) : NULL;
    a.eps = f->eps;
    a.resid = static_cast<uint16_t *>(f->resid);
    if (f->epi == KERN_EPI_ROPE_KV) {
        a.rope = *f->rope;
        a.bias = f->qkv_bias ? static_cast<const uint16_t *>(f->qkv_bias->data) : NULL;
    }
    a.pre =
        f->after_attention && !tc && f->epi == KERN_EPI_RESID && !f->norm ? kcuda_gemv_preload(ctx, n) : 0;
    if (tc) {
        a.trigger = tcg_trigger(ctx, n);
        gemv_tc_launch(st->stream, ctx->gemm.pdl, ctx->gemm.gemv_tc_ring, st->n_sms, false, f->epi, f->rms, a);
    } else {
        gemv_xs_fit(ctx, &a, n, f->norm != NULL);
        gemv_dispatch(st->stream, ctx->gemm.pdl, ctx->gemm.gemv_variant, false, f->epi, f->norm != NULL, a, n);
    }
    KCUDA_LAUNCH_CHECK();
}
