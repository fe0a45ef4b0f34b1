/* kernels/cuda/attention_prefill_tc.cu: paged causal attention for sequences
 * with several new tokens (prefill and chunked prefill) on tensor cores,
 * for head_dim 64 and 128, in two forms: mma.sync, FlashAttention-2 style
 * (below; any sm_80+ device), and wgmma, FlashAttention-3 style (the
 * section "the warpgroup (wgmma) form"; compute capability 9.0, the
 * default there). Same contract as
 * attention_prefill.cu (the CUDA-core kernel, which keeps every other
 * head_dim and is selected with INFERD_PREFILL_ATTN=simt; attention.cu
 * chooses): causal, variable length, GQA, earlier context read through the
 * block table, fp32 online softmax, bf16 output, q_len == 1 sequences left
 * to the decode kernel.
 *
 * mma.sync form. Tiling: one CTA of 4 warps per (sequence, query head,
 * tile of 64 MT query rows); warp w owns MT m-tiles of 16 rows, [16 MT w,
 * 16 MT (w + 1)), for the whole key walk, so the softmax state never leaves
 * registers. MT = 2 (mma2): every K and V fragment read from shared memory
 * serves two m-tiles, which halves the shared-memory traffic per FLOP (with
 * one m-tile the kernel is bound by ldmatrix bandwidth, 16 FLOP a byte);
 * the Q fragments are then re-read from shared memory for each 16 dims
 * instead of held in registers. Keys are walked in tiles of 64 up to the
 * last position the CTA's rows may see; tiles past the diagonal are never
 * loaded, and the causal mask is applied only on tiles that reach past the
 * first row's position (rows whose keys a tile does not reach get p = 0
 * there, exactly: both MT give bitwise the same output). Per key tile, warp
 * and m-tile: S = Q K^T (16 x 64) with mma.sync m16n8k16 bf16 -> fp32 (Q
 * and K fragments with ldmatrix), the online softmax in the
 * log2 domain (scale * log2 e folded into one FFMA, exp2f), P rounded to
 * bf16 and reused straight from the accumulator registers as the A operand
 * of O += P V (V fragments with ldmatrix.trans). The row sum l accumulates
 * the fp32 P (as FlashAttention does; the bf16 rounding of the weights is
 * within the tolerance); l stays a per-thread partial (the rescale factor
 * is uniform across the 4 lanes of a row) and is reduced once at the end.
 *
 * Memory: K/V tiles are gathered from the paged cache ([n_blocks, nkv, bs,
 * hd], one block-table lookup per key row) with cp.async into a two-stage
 * shared-memory ring: tile i + 1 is in flight while tile i is computed. Rows
 * past the last visible key (and query rows past the sequence) are
 * zero-filled by cp.async's src-size 0 and never read from memory, so
 * stale or NaN cache slots cannot leak in. Shared rows are padded by 8 bf16
 * (16 bytes): the 8 row addresses of each ldmatrix phase then fall on
 * distinct bank groups. Shared memory: (64 MT + 2 * 64 + 2 * 64) rows x
 * (hd + 8) bf16 = 45 / 54 KiB at hd 64, 85 / 102 KiB at hd 128 (MT 1 / 2;
 * two CTAs per SM). Registers per thread at hd 128: O 64 MT + S 32 MT
 * (+ Q 32 at MT 1) fp32/b32.
 *
 * Trade-offs (both forms): no split over keys, so a short
 * chunk after a long cached context runs one CTA per (head, 64 rows) through
 * the whole context; heads of one GQA group read the same K/V through L2
 * rather than sharing a shared-memory tile.
 *
 * Host emulator (tests/kernels/cuda/emu): the warp-level primitives
 * (ldmatrix, ldmatrix.trans and mma, mma.cuh; cp.async, attention.cuh) have a
 * second body, used when kemu.h is the CUDA stand-in, that reproduces the
 * PTX fragment layouts exactly through a per-warp scratch and __syncwarp, so
 * the emulator runs this kernel's real tiling, fragment indexing and masking;
 * wgmma's emulation (mma.cuh) reads shared memory as the descriptor says
 * under the documented 128-byte swizzle.
 */
#include "kernels/cuda/attention.cuh"
#include "kernels/cuda/mma.cuh"

#define TC_BQ1 64 /* query rows per CTA with one m-tile a warp (4 warps x 16) */
#ifndef KC_TC_BK
#define TC_BK 64 /* keys per tile (-DKC_TC_BK=32: A/B builds) */
#else
#define TC_BK KC_TC_BK
#endif
#define TC_WARPS 4
#define TC_THREADS (TC_WARPS * 32)
#define TC_PAD 8 /* bf16 of padding per shared row (16 bytes) */
#define TC_LOG2E 1.4426950408889634f

/* Dynamic shared memory of the kernel for head_dim hd and mt m-tiles (of
 * 16 query rows) a warp: Q tile plus two stages of K and V. */
static size_t tc_smem_bytes(int hd, int mt)
{
    return (size_t)(TC_BQ1 * mt + 4 * TC_BK) * (size_t)(hd + TC_PAD) * sizeof(uint16_t);
}

/* --- warp-level primitives: kc_mma_16816, kc_ldsm_x4, kc_pack_bf16 (mma.cuh) --- */

/* --- tiles ------------------------------------------------------------------------ */

/* Tile geometry of one CTA, identical in all its threads. */
typedef struct {
    int q0, qstart, nrows; /* first token row of the sequence, tile start, valid rows */
    int pos0, kv_end;      /* position of tile row 0; keys [0, kv_end) */
    int h, kvh;
} tc_tile;

/* The tile of this CTA (blockIdx: sequence x, query head y, tile z of bq
 * query rows, the last and longest tiles at the lowest z so they start
 * first); false when it has no rows (a decode sequence, whose q_len 1 the
 * decode kernel takes, or a tile past the sequence's queries). */
__device__ __forceinline__ bool tc_tile_make(const kc_attn_args &a, int bq, tc_tile &t)
{
    const int seq = blockIdx.x;
    t.q0 = a.qsl[seq];
    const int q_len = a.qsl[seq + 1] - t.q0;
    t.qstart = (int)(gridDim.z - 1 - blockIdx.z) * bq;
    if (q_len <= 1 || t.qstart >= q_len)
        return false;
    t.nrows = min(bq, q_len - t.qstart);
    t.pos0 = a.seq_lens[seq] - q_len + t.qstart;
    t.kv_end = t.pos0 + t.nrows;
    t.h = blockIdx.y;
    t.kvh = t.h / a.group;
    return true;
}

/* Q rows [qstart, qstart + BQ) of head t.h into sQ [BQ][D + PAD]; rows
 * past the sequence's queries are zero. */
template <int D, int BQ, int NT = TC_THREADS>
__device__ __forceinline__ void tc_load_q(const kc_attn_args &a, const tc_tile &t, uint16_t *sQ)
{
    constexpr int CH = D / 8, LD = D + TC_PAD; /* 16-byte chunks per row */
    static_assert(BQ * CH % NT == 0, "Q tile chunks per thread");
#pragma unroll
    for (int j = 0; j < BQ * CH / NT; j++) {
        const int i = threadIdx.x + j * NT, r = i / CH, ch = i % CH;
        const bool ok = r < t.nrows;
        const uint16_t *src = a.qkv; /* [n_tokens, qkv_stride] */
        if (ok)
            src += (int64_t)(t.q0 + t.qstart + r) * a.qkv_stride + (int64_t)t.h * D + ch * 8;
        kc_cp_async16(sQ + r * LD + ch * 8, src, ok);
    }
}

/* Keys/values [kt, kt + TC_BK) of kv head t.kvh into sK / sV [TC_BK][D + PAD]
 * (kc_gather_kv, the whole CTA); rows at or past kv_end are zero. */
template <int D>
__device__ __forceinline__ void tc_load_kv(const kc_attn_args &a, const tc_tile &t, const int32_t *bt, int kt,
                                           uint16_t *sK, uint16_t *sV)
{
    kc_gather_kv<D, D + TC_PAD, TC_BK, TC_THREADS>(a, bt, t.kvh, kt, t.kv_end, threadIdx.x, sK, sV);
}

/* Q fragments (ldmatrix.x4, A layout) of the 16 rows at sQw, dims
 * [16 kk, +16). */
template <int D>
__device__ __forceinline__ void tc_load_qf(uint32_t (&qf)[4], const uint16_t *sQw, int kk)
{
    constexpr int LD = D + TC_PAD;
    const int lane = threadIdx.x & 31;
    kc_ldsm_x4(qf, sQw + ((lane & 7) + ((lane >> 3) & 1) * 8) * LD + (lane >> 4) * 8 + kk * 16, false);
}

/* S (this warp's MT m-tiles of 16 rows x 64 keys, fp32 C fragments) = Q K^T
 * over D. MT == 1: the Q fragments come from registers (qreg, loaded once
 * per CTA); else they are read from this warp's rows of shared memory
 * (sQw) for each 16 dims, so the registers go to the second m-tile, whose
 * rows reuse every K fragment. */
template <int D, int MT>
__device__ __forceinline__ void tc_qk(const uint32_t (&qreg)[D / 16][4], const uint16_t *sQw, const uint16_t *sK,
                                      float (&s)[MT][TC_BK / 8][4])
{
    constexpr int LD = D + TC_PAD;
    const int lane = threadIdx.x & 31;
    /* ldmatrix.x4 over keys [16 np, +16) x dims [16 kk, +16): matrices
     * (keys +0, dims +0), (+0, +8), (+8, +0), (+8, +8) = b0, b1 of n-tile
     * 2 np and b0, b1 of n-tile 2 np + 1. */
    const uint16_t *base = sK + ((lane & 7) + (lane >> 4) * 8) * LD + ((lane >> 3) & 1) * 8;
#pragma unroll
    for (int mt = 0; mt < MT; mt++)
#pragma unroll
        for (int n = 0; n < TC_BK / 8; n++)
            s[mt][n][0] = s[mt][n][1] = s[mt][n][2] = s[mt][n][3] = 0.0f;
#pragma unroll
    for (int kk = 0; kk < D / 16; kk++) {
        uint32_t qf[MT][4];
#pragma unroll
        for (int mt = 0; mt < MT; mt++) {
            if (MT == 1) {
#pragma unroll
                for (int e = 0; e < 4; e++)
                    qf[mt][e] = qreg[kk][e];
            } else {
                tc_load_qf<D>(qf[mt], sQw + mt * 16 * LD, kk);
            }
        }
#pragma unroll
        for (int np = 0; np < TC_BK / 16; np++) {
            uint32_t kb[4];
            kc_ldsm_x4(kb, base + np * 16 * LD + kk * 16, false);
#pragma unroll
            for (int mt = 0; mt < MT; mt++) {
                kc_mma_16816(s[mt][2 * np], qf[mt], kb[0], kb[1]);
                kc_mma_16816(s[mt][2 * np + 1], qf[mt], kb[2], kb[3]);
            }
        }
    }
}

/* O (MT m-tiles of 16 rows x D, fp32 C fragments) += P V, P (16 x 64 per
 * m-tile) as bf16 A fragments; each V fragment serves every m-tile. */
template <int D, int MT>
__device__ __forceinline__ void tc_pv(const uint32_t (&pa)[MT][TC_BK / 16][4], const uint16_t *sV,
                                      float (&o)[MT][D / 8][4])
{
    constexpr int LD = D + TC_PAD;
    const int lane = threadIdx.x & 31;
    /* ldmatrix.x4.trans over keys [16 kk, +16) x dims [16 dp, +16):
     * matrices (keys +0, dims +0), (+8, +0), (+0, +8), (+8, +8) = b0, b1 of
     * dim-tile 2 dp and b0, b1 of dim-tile 2 dp + 1. */
    const uint16_t *base = sV + ((lane & 7) + ((lane >> 3) & 1) * 8) * LD + (lane >> 4) * 8;
#pragma unroll
    for (int kk = 0; kk < TC_BK / 16; kk++) {
#pragma unroll
        for (int dp = 0; dp < D / 16; dp++) {
            uint32_t vb[4];
            kc_ldsm_x4(vb, base + kk * 16 * LD + dp * 16, true);
#pragma unroll
            for (int mt = 0; mt < MT; mt++) {
                kc_mma_16816(o[mt][2 * dp], pa[mt][kk], vb[0], vb[1]);
                kc_mma_16816(o[mt][2 * dp + 1], pa[mt][kk], vb[2], vb[3]);
            }
        }
    }
}

/* Online softmax of one key tile for this thread's two rows (i = 0: row g,
 * i = 1: row g + 8 of the warp), on the raw scores: keys past a row's
 * position masked to -inf when `diag`; the running max m is kept in the
 * log2 domain (m = max(s) * scale log2 e, the scale being positive), so a
 * probability is one FFMA and one 2^x, 2^(s scale_log2 - m) (EX2: one
 * MUFU.EX2, kc_ex2; else exp2f, whose range check the mma.sync form keeps:
 * with kc_ex2 its 255 registers spill); partial sum l of the fp32
 * probabilities; the probabilities as bf16 A fragments in pa (PACK) or in
 * place of the scores in s (tc_pack_p packs them later: the wgmma form's
 * product into O still reads the previous pa then), and in corr the factor
 * O must be rescaled by (tc_rescale). Per score: FFMA, MUFU, FADD, half an
 * F2FP and a max (the form before, a scale pass and the bf16 P unpacked
 * again for the sum, took 2-6% longer: docs/PERF.md). */
template <int BK, bool PACK, bool EX2>
__device__ __forceinline__ void tc_softmax_p(float (&s)[BK / 8][4], uint32_t (&pa)[BK / 16][4], float (&m)[2],
                                             float (&l)[2], float (&corr)[2], float scale_log2, bool diag, int key0,
                                             int qpos0)
{
    const int c = threadIdx.x & 3;
    if (diag) {
#pragma unroll
        for (int n = 0; n < BK / 8; n++)
#pragma unroll
            for (int r = 0; r < 4; r++)
                if (key0 + 8 * n + 2 * c + (r & 1) > qpos0 + 8 * (r >> 1))
                    s[n][r] = -INFINITY;
    }
#pragma unroll
    for (int i = 0; i < 2; i++) {
        float mx = -INFINITY;
#pragma unroll
        for (int n = 0; n < BK / 8; n++)
            mx = fmaxf(mx, fmaxf(s[n][2 * i], s[n][2 * i + 1]));
        mx = fmaxf(mx, __shfl_xor_sync(0xFFFFFFFFu, mx, 1));
        mx = fmaxf(mx, __shfl_xor_sync(0xFFFFFFFFu, mx, 2));
        const float m_new = fmaxf(m[i], mx * scale_log2);
        /* NOTE: a row whose keys are all masked so far keeps m = -inf; use 0
         * as the base so that exp2(-inf - base) = 0 instead of NaN. */
        const float base = m_new == -INFINITY ? 0.0f : m_new;
        corr[i] = EX2 ? kc_ex2(m[i] - base) : exp2f(m[i] - base);
        m[i] = m_new;
        float rs = 0.0f;
#pragma unroll
        for (int n = 0; n < BK / 8; n++) {
            const float x0 = fmaf(s[n][2 * i], scale_log2, -base), x1 = fmaf(s[n][2 * i + 1], scale_log2, -base);
            const float p0 = EX2 ? kc_ex2(x0) : exp2f(x0), p1 = EX2 ? kc_ex2(x1) : exp2f(x1);
            rs += p0 + p1;
            if (PACK) {
                pa[n / 2][(n & 1) * 2 + i] = kc_pack_bf16(p0, p1);
            } else {
                s[n][2 * i] = p0;
                s[n][2 * i + 1] = p1;
            }
        }
        l[i] = l[i] * corr[i] + rs;
    }
}

/* The probabilities p (tc_softmax_p's s) as bf16 A fragments, pa[kk] for
 * keys [16 kk, +16). */
template <int BK> __device__ __forceinline__ void tc_pack_p(const float (&p)[BK / 8][4], uint32_t (&pa)[BK / 16][4])
{
#pragma unroll
    for (int n = 0; n < BK / 8; n++)
#pragma unroll
        for (int i = 0; i < 2; i++)
            pa[n / 2][(n & 1) * 2 + i] = kc_pack_bf16(p[n][2 * i], p[n][2 * i + 1]);
}

/* O *= corr, row by row (i = 0: row g, 1: row g + 8). */
template <int D> __device__ __forceinline__ void tc_rescale(float (&o)[D / 8][4], const float (&corr)[2])
{
#pragma unroll
    for (int dn = 0; dn < D / 8; dn++) {
        o[dn][0] *= corr[0];
        o[dn][1] *= corr[0];
        o[dn][2] *= corr[1];
        o[dn][3] *= corr[1];
    }
}

/* O / l of this thread's two rows (tile rows r0 and r0 + 8; l the
 * per-thread partial sums of tc_softmax_p) as bf16 into a.out, rows past the
 * tile's queries skipped. */
template <int D>
__device__ __forceinline__ void tc_store_o(const kc_attn_args &a, const tc_tile &t, int r0, const float (&o)[D / 8][4],
                                           const float (&l)[2])
{
    const int c = threadIdx.x & 3;
#pragma unroll
    for (int i = 0; i < 2; i++) {
        float li = l[i];
        li += __shfl_xor_sync(0xFFFFFFFFu, li, 1);
        li += __shfl_xor_sync(0xFFFFFFFFu, li, 2);
        const float inv = li > 0.0f ? 1.0f / li : 0.0f;
        const int r = r0 + 8 * i;
        if (r < t.nrows) {
            uint16_t *orow = a.out + (int64_t)(t.q0 + t.qstart + r) * a.out_stride + (int64_t)t.h * D; /* [D] */
#pragma unroll
            for (int dn = 0; dn < D / 8; dn++)
                *(uint32_t *)(orow + dn * 8 + 2 * c) = kc_pack_bf16(o[dn][2 * i] * inv, o[dn][2 * i + 1] * inv);
        }
    }
}

/* One CTA: BQ = 64 MT query rows of one head; warp w owns rows [16 MT w,
 * +16 MT) as MT m-tiles. */
template <int D, int MT>
static __global__ void __launch_bounds__(TC_THREADS, MT == 1 ? 1 : 2) attn_prefill_tc_kernel(const kc_attn_args a)
{
    constexpr int LD = D + TC_PAD, BQ = TC_BQ1 * MT;
    extern __shared__ float4 tc_sm4[];
    const int seq = blockIdx.x;
    tc_tile t;
    if (!tc_tile_make(a, BQ, t))
        return;
    uint16_t *sQ = (uint16_t *)tc_sm4;                                /* [BQ][LD] */
    uint16_t *sK = sQ + BQ * LD;                                      /* [2][BK][LD] */
    uint16_t *sV = sK + 2 * TC_BK * LD;                               /* [2][BK][LD] */
    const int32_t *bt = a.block_tables + (int64_t)seq * a.max_blocks; /* [max_blocks] */
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
    const int wrow = warp * 16 * MT + (lane >> 2); /* this thread's first row in the tile */
    const uint16_t *sQw = sQ + warp * 16 * MT * LD; /* this warp's rows */
    const float scale_log2 = a.scale * TC_LOG2E;

    /* cp.async groups: Q, then K/V tile 0; with one m-tile the Q fragments
     * go to registers once, while tile 0 is still in flight. */
    tc_load_q<D, BQ>(a, t, sQ);
    kc_cp_commit();
    tc_load_kv<D>(a, t, bt, 0, sK, sV);
    kc_cp_commit();
    kc_cp_wait<1>();
    __syncthreads();
    uint32_t qreg[D / 16][4];
    if (MT == 1) {
#pragma unroll
        for (int kk = 0; kk < D / 16; kk++)
            tc_load_qf<D>(qreg[kk], sQw, kk);
    }

    float o[MT][D / 8][4];
#pragma unroll
    for (int mt = 0; mt < MT; mt++)
#pragma unroll
        for (int dn = 0; dn < D / 8; dn++)
            o[mt][dn][0] = o[mt][dn][1] = o[mt][dn][2] = o[mt][dn][3] = 0.0f;
    float m[MT][2], l[MT][2];
#pragma unroll
    for (int mt = 0; mt < MT; mt++) {
        m[mt][0] = m[mt][1] = -INFINITY;
        l[mt][0] = l[mt][1] = 0.0f;
    }
    const int n_tiles = (t.kv_end + TC_BK - 1) / TC_BK;
    for (int it = 0; it < n_tiles; it++) {
        const int kt = it * TC_BK, stage = it & 1;
        if (it + 1 < n_tiles) {
            /* NOTE: stage ^ 1 was last read in iteration it - 1, which ended
             * with a barrier, so it is free to overwrite. */
            tc_load_kv<D>(a, t, bt, kt + TC_BK, sK + (stage ^ 1) * TC_BK * LD, sV + (stage ^ 1) * TC_BK * LD);
            kc_cp_commit();
            kc_cp_wait<1>(); /* this thread's copies of tile it landed */
        } else {
            kc_cp_wait<0>();
        }
        __syncthreads(); /* ... and every other thread's */
        float s[MT][TC_BK / 8][4];
        tc_qk<D, MT>(qreg, sQw, sK + stage * TC_BK * LD, s);
        uint32_t pa[MT][TC_BK / 16][4];
        /* the mask matters only where the tile's last key passes row 0 */
        const bool diag = kt + TC_BK - 1 > t.pos0;
#pragma unroll
        for (int mt = 0; mt < MT; mt++)
        {
            float corr[2];
            tc_softmax_p<TC_BK, true, false>(s[mt], pa[mt], m[mt], l[mt], corr, scale_log2, diag, kt, t.pos0 + wrow + 16 * mt);
            tc_rescale<D>(o[mt], corr);
        }
        tc_pv<D, MT>(pa, sV + stage * TC_BK * LD, o);
        __syncthreads(); /* stage consumed before iteration it + 1 refills it */
    }

#pragma unroll
    for (int mt = 0; mt < MT; mt++)
        tc_store_o<D>(a, t, wrow + 16 * mt, o[mt], l[mt]);
}

/* --- the warpgroup (wgmma) form, sm_90a -------------------------------------------
 * One CTA of two warpgroups per (sequence, query head, tile of 128 query
 * rows); warpgroup g owns rows [64 g, +64), warp w of the CTA rows [16 w,
 * +16) as in the mma.sync form, so the softmax (tc_softmax_p), masking and
 * store are that form's, on the same fragment layout. Per key tile of BK
 * keys (64: the wg form; 128: wgk128) and warpgroup: S (64 x BK) = Q K^T
 * as D / 16 wgmma m64nBKk16, Q's A fragments held in registers for the
 * whole walk (loaded once with ldmatrix), K read by the tensor cores from
 * shared memory (K-major); O
 * (64 x D) += P V as BK / 16 wgmma m64nDk16, P's bf16 A fragments from
 * the softmax, V from shared memory (N-major: the transposed B). O lives in
 * D / 2 fp32 registers a thread.
 *
 * Pipeline (FlashAttention-3's overlap within a warpgroup): in step j the
 * warpgroup issues S(j + 1) = Q K(j + 1)^T and then O += P(j) V(j), waits
 * for S(j + 1) only, runs the softmax of tile j + 1 while the tensor cores
 * do P(j) V(j), then waits for that and rescales O. K/V tiles come through a
 * three-stage cp.async ring (tile j + 2 loads during step j; gathered by
 * kc_gather_kv into the 128-byte-swizzled layout the descriptors describe,
 * mma.cuh), each thread fencing its copies into the async proxy before the
 * barrier that publishes them. A warpgroup skips the products of tiles none
 * of its rows may see (the CTA's last tile for its first warpgroup): those
 * would add p = 0.
 * Shared memory: 3 stages x (K + V) [BK][D] bf16 (1024-byte aligned, at
 * the start), then Q [128][D + 8] unless it fits in the last stage
 * (wg_q_in_stage) = 66 / 130 KiB at hd 64 / 128 with 64-key tiles, 96 /
 * 192 KiB with 128 (250 registers a thread at hd 128: S takes 64). */
#define WG_STAGES 3
#define WG_BQ 128 /* query rows per CTA: two warpgroups of 64 */
#define WG_THREADS 256

/* Q [WG_BQ][D + 8] fits in one stage (K and V of BK keys): then it lives
 * in the last stage, which is first loaded after Q went to registers. */
__host__ __device__ static constexpr bool wg_q_in_stage(int hd, int bk)
{
    return WG_BQ * (hd + TC_PAD) <= 2 * bk * hd;
}

static size_t wg_smem_bytes(int hd, int bk)
{
    return ((size_t)2 * WG_STAGES * bk * hd + (wg_q_in_stage(hd, bk) ? 0 : (size_t)WG_BQ * (hd + TC_PAD))) *
           sizeof(uint16_t);
}

/* S (this warpgroup's 64 rows x BK keys) = Q K^T, issued and committed,
 * not waited for; dk: the descriptor of the K tile (SBO 1024). k-step kk
 * reads dims [16 kk, +16): the 32-byte piece kk % 4 of each 128-byte row of
 * 64-dim half kk / 4 (the halves BK 128 bytes apart). */
template <int D, int BK>
__device__ __forceinline__ void wg_issue_qk(float (&s)[BK / 8][4], const uint32_t (&qreg)[D / 16][4], uint64_t dk)
{
#pragma unroll
    for (int kk = 0; kk < D / 16; kk++)
        kc_wgmma<BK, 0>(s, qreg[kk], kc_wg_desc_add(dk, (kk >> 2) * BK * 128 + (kk & 3) * 32), kk > 0);
    kc_wg_commit();
}

/* O += P V, issued and committed; dv: the descriptor of the V tile (LBO
 * BK 128 bytes between the 64-dim halves, SBO 1024 between 8-key atoms).
 * k-step kk reads keys [16 kk, +16), every dim. */
template <int D, int BK>
__device__ __forceinline__ void wg_issue_pv(float (&o)[D / 8][4], const uint32_t (&pa)[BK / 16][4], uint64_t dv)
{
#pragma unroll
    for (int kk = 0; kk < BK / 16; kk++)
        kc_wgmma<D, 1>(o, pa[kk], kc_wg_desc_add(dv, kk * 16 * 128), 1);
    kc_wg_commit();
}

template <int D, int BK>
static __global__ void __launch_bounds__(WG_THREADS, 1) attn_prefill_wg_kernel(const kc_attn_args a)
{
    /* elements a K or V tile; ST: from a stage's K (or V) tile to the next
     * stage's. Q in the last stage: stages of K then V, so that stage is
     * one span; else all K tiles, then all V tiles, then Q. */
    constexpr bool QIN = wg_q_in_stage(D, BK);
    constexpr int LD = D + TC_PAD, KT = BK * D, ST = QIN ? 2 * KT : KT;
    extern __shared__ float4 tc_sm4[];
    tc_tile t;
    if (!tc_tile_make(a, WG_BQ, t))
        return;
    uint16_t *sK = (uint16_t *)tc_sm4;               /* stage st's K [KT] at sK + st ST, swizzled */
    uint16_t *sV = sK + (QIN ? KT : WG_STAGES * KT); /* stage st's V [KT] at sV + st ST, swizzled */
    uint16_t *sQ = QIN ? sK + (WG_STAGES - 1) * ST : sV + WG_STAGES * KT; /* [WG_BQ][LD] */
    const int32_t *bt = a.block_tables + (int64_t)blockIdx.x * a.max_blocks; /* [max_blocks] */
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
    /* NOTE: through a shuffle so the compiler knows it is warp-uniform; a
     * wgmma under a branch it cannot prove uniform is serialized */
    const int wg = __shfl_sync(0xFFFFFFFFu, warp >> 2, 0);
    const int wrow = warp * 16 + (lane >> 2); /* this thread's first row in the tile */
    const float scale_log2 = a.scale * TC_LOG2E;
    const int n_tiles = (t.kv_end + BK - 1) / BK;
    /* tiles this warpgroup computes: up to the last position its rows see */
    const int n_wg = 64 * wg < t.nrows ? min(n_tiles, (t.pos0 + min(64 * wg + 63, t.nrows - 1)) / BK + 1) : 0;

    /* cp.async groups: Q with tile 0, then tile 1 */
    tc_load_q<D, WG_BQ, WG_THREADS>(a, t, sQ);
    kc_gather_kv<D, 0, BK, WG_THREADS, KC_TILE_SW128>(a, bt, t.kvh, 0, t.kv_end, threadIdx.x, sK, sV);
    kc_cp_commit();
    if (n_tiles > 1) {
        kc_gather_kv<D, 0, BK, WG_THREADS, KC_TILE_SW128>(a, bt, t.kvh, BK, t.kv_end, threadIdx.x, sK + ST, sV + ST);
        kc_cp_commit();
        kc_cp_wait<1>();
    } else {
        kc_cp_wait<0>();
    }
    kc_fence_proxy_async(); /* this thread's copies, visible to the tensor cores' reads */
    __syncthreads();
    uint32_t qreg[D / 16][4];
#pragma unroll
    for (int kk = 0; kk < D / 16; kk++)
        tc_load_qf<D>(qreg[kk], sQ + warp * 16 * LD, kk);
    /* stage 0's descriptors; stage st is st ST 2 bytes further */
    const uint64_t dk0 = kc_wg_desc(sK, 0, 1024), dv0 = kc_wg_desc(sV, BK * 128, 1024);
    /* tile j + 2 into its stage, in whichever path this warpgroup takes (the
     * stage of tile j - 1: free once every warpgroup passed this step's
     * barrier) */
    auto load_next = [&](int j) {
        if (j + 2 < n_tiles) {
            const int st = (j + 2) % WG_STAGES;
            kc_gather_kv<D, 0, BK, WG_THREADS, KC_TILE_SW128>(a, bt, t.kvh, (j + 2) * BK, t.kv_end, threadIdx.x,
                                                        sK + st * ST, sV + st * ST);
            kc_cp_commit();
        }
    };

    float o[D / 8][4];
#pragma unroll
    for (int dn = 0; dn < D / 8; dn++)
        o[dn][0] = o[dn][1] = o[dn][2] = o[dn][3] = 0.0f;
    float m[2] = {-INFINITY, -INFINITY}, l[2] = {0.0f, 0.0f}, corr[2];
    float s[BK / 8][4];
    uint32_t pa[BK / 16][4];
    if (n_wg > 0) { /* S(0) and P(0); O is still 0, no rescale */
        kc_wg_fence();
        wg_issue_qk<D, BK>(s, qreg, dk0);
        kc_wg_wait<0>();
        kc_wg_fence_regs(s);
        tc_softmax_p<BK, true, true>(s, pa, m, l, corr, scale_log2, BK - 1 > t.pos0 + 64 * wg, 0, t.pos0 + wrow);
    }
    for (int j = 0; j < n_tiles; j++) {
        if (j + 1 < n_tiles) {
            kc_cp_wait<0>(); /* tile j + 1, the one group in flight */
            kc_fence_proxy_async();
        }
        /* tile j + 1 published; every warpgroup's P(j - 1) V(j - 1) done, so
         * the stage of tile j - 1 is free for tile j + 2 (load_next, issued
         * while this step's products run) */
        __syncthreads();
        const uint32_t kb = (uint32_t)(((j + 1) % WG_STAGES) * ST * 2), vb = (uint32_t)((j % WG_STAGES) * ST * 2);
        /* NOTE: the cases as separate straight-line paths (conditions
         * warpgroup-uniform): with the products under shared conditions
         * ptxas cannot tell which group wait<1> leaves and serializes them */
        if (j + 1 < n_wg) {
            kc_wg_fence();
            wg_issue_qk<D, BK>(s, qreg, kc_wg_desc_add(dk0, kb));
            wg_issue_pv<D, BK>(o, pa, kc_wg_desc_add(dv0, vb));
            load_next(j);
            kc_wg_wait<1>(); /* S(j + 1); P(j) V(j) may still run */
            kc_wg_fence_regs(s);
            const int kt = (j + 1) * BK;
            const bool diag = kt + BK - 1 > t.pos0 + 64 * wg;
            tc_softmax_p<BK, false, true>(s, pa, m, l, corr, scale_log2, diag, kt, t.pos0 + wrow);
            kc_wg_wait<0>(); /* P(j) V(j): its A registers pa are free */
            kc_wg_fence_regs(o);
            /* once the running max settles most tiles leave it: O * 1 = O */
            if (__any_sync(0xFFFFFFFFu, corr[0] != 1.0f || corr[1] != 1.0f))
                tc_rescale<D>(o, corr);
            tc_pack_p<BK>(s, pa);
        } else if (j < n_wg) { /* this warpgroup's last tile */
            kc_wg_fence();
            wg_issue_pv<D, BK>(o, pa, kc_wg_desc_add(dv0, vb));
            load_next(j);
            kc_wg_wait<0>();
            kc_wg_fence_regs(o);
        } else {
            load_next(j);
        }
    }
    tc_store_o<D>(a, t, wrow, o, l);
}

template <int D, int MT> static void tc_launch(const kcuda_state *st, const kc_attn_args *a, int max_q_len)
{
    const size_t smem = tc_smem_bytes(D, MT); /* the opt-in was set at start-up (kcuda_attn_prefill_tc_init) */
    dim3 grid((unsigned)a->n_seqs, (unsigned)a->nh, kcuda_cdiv(max_q_len, TC_BQ1 * MT));
    attn_prefill_tc_kernel<D, MT><<<grid, TC_THREADS, smem, st->stream>>>(*a);
    KCUDA_LAUNCH_CHECK();
}

template <int D, int BK> static void wg_launch(const kcuda_state *st, const kc_attn_args *a, int max_q_len)
{
    dim3 grid((unsigned)a->n_seqs, (unsigned)a->nh, kcuda_cdiv(max_q_len, WG_BQ));
    attn_prefill_wg_kernel<D, BK><<<grid, WG_THREADS, wg_smem_bytes(D, BK), st->stream>>>(*a);
    KCUDA_LAUNCH_CHECK();
}

/* Raise the dynamic shared-memory limit of one kernel where it needs more
 * than the default 48 KiB and the device can give it. */
template <class K> static void tc_optin(const kcuda_state *st, K kernel, size_t smem)
{
    if (smem > 48 * 1024 && smem <= st->smem_optin)
        CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)smem));
}

/* Contract: once per device (kcuda_attn_init): the shared-memory opt-in of
 * every instantiation, so a launch sets nothing. */
void kcuda_attn_prefill_tc_init(const kcuda_state *st)
{
    tc_optin(st, attn_prefill_tc_kernel<64, 1>, tc_smem_bytes(64, 1));
    tc_optin(st, attn_prefill_tc_kernel<64, 2>, tc_smem_bytes(64, 2));
    tc_optin(st, attn_prefill_tc_kernel<128, 1>, tc_smem_bytes(128, 1));
    tc_optin(st, attn_prefill_tc_kernel<128, 2>, tc_smem_bytes(128, 2));
    if (kcuda_wgmma_cc(st->cc)) {
        tc_optin(st, attn_prefill_wg_kernel<64, 64>, wg_smem_bytes(64, 64));
        tc_optin(st, attn_prefill_wg_kernel<128, 64>, wg_smem_bytes(128, 64));
        tc_optin(st, attn_prefill_wg_kernel<64, 128>, wg_smem_bytes(64, 128));
        tc_optin(st, attn_prefill_wg_kernel<128, 128>, wg_smem_bytes(128, 128));
    }
}

/* Contract: true when the tensor-core prefill kernel handles head_dim hd on
 * this device (hd 64 or 128 and its shared memory, at one m-tile a warp,
 * within the opt-in limit). */
bool kcuda_attn_prefill_tc_supported(const kcuda_state *st, int hd)
{
    return (hd == 64 || hd == 128) && tc_smem_bytes(hd, 1) <= st->smem_optin;
}

/* The form a launch asked for, or the nearest one this device runs: the
 * wgmma forms need compute capability 9.0 (the build's sm_90a) and their
 * shared memory; two m-tiles a warp its shared memory. */
static int tc_form_fit(const kcuda_state *st, int hd, int form)
{
    if (form == KC_PTC_WG128 && (!kcuda_wgmma_cc(st->cc) || wg_smem_bytes(hd, 128) > st->smem_optin))
        form = KC_PTC_WG;
    if (form == KC_PTC_WG && (!kcuda_wgmma_cc(st->cc) || wg_smem_bytes(hd, 64) > st->smem_optin))
        form = KC_PTC_MMA2;
    if (form == KC_PTC_MMA2 && tc_smem_bytes(hd, 2) > st->smem_optin)
        form = KC_PTC_MMA1;
    return form;
}

/* Contract: prefill attention on tensor cores for every sequence with
 * q_len > 1; max_q_len bounds the query tiles; form (KC_PTC_*) the kernel
 * form wanted, the nearest one the device runs taken (tc_form_fit). Needs
 * kcuda_attn_prefill_tc_supported(st, a->hd). Returns the form used. */
int kcuda_attn_prefill_tc_launch(const kcuda_state *st, const kc_attn_args *a, int max_q_len, int form)
{
    INFERD_CHECK_MSG(kcuda_attn_prefill_tc_supported(st, a->hd),
                     "tensor-core prefill attention: head_dim 64 or 128");
    INFERD_CHECK(a->hd == 64 || a->hd == 128);
    form = tc_form_fit(st, a->hd, form);
    const bool h64 = a->hd == 64;
    switch (form) {
    case KC_PTC_MMA1:
        h64 ? tc_launch<64, 1>(st, a, max_q_len) : tc_launch<128, 1>(st, a, max_q_len);
        break;
    case KC_PTC_MMA2:
        h64 ? tc_launch<64, 2>(st, a, max_q_len) : tc_launch<128, 2>(st, a, max_q_len);
        break;
    case KC_PTC_WG:
        h64 ? wg_launch<64, 64>(st, a, max_q_len) : wg_launch<128, 64>(st, a, max_q_len);
        break;
    default:
        INFERD_CHECK(form == KC_PTC_WG128);
        h64 ? wg_launch<64, 128>(st, a, max_q_len) : wg_launch<128, 128>(st, a, max_q_len);
        break;
    }
    return form;
}
