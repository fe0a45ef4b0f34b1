/* kernels/cuda/attention_decode.cu: paged decode attention (one query token
 * per sequence) with optional split-KV and a log-sum-exp merge.
 *
 * One CTA of 4 warps per (sequence, kv head, head chunk, split). A CTA covers
 * up to GMAX query heads of the kv head's GQA group (GMAX = 1, 2, 4 or 8;
 * larger groups use several head chunks), so every K/V row read from the
 * cache serves the whole group. Inside a warp, a key is handled by a group of
 * TG lanes (TG = 4, 8, 16 or 32, a template parameter: TG * 8 >= head_dim),
 * each lane holding 8 consecutive dims (one 16-byte load of K and one of V);
 * 32 / TG keys per warp step, DEC_UNROLL steps per iteration, all their
 * loads issued before any is used (the block-table row they index through
 * is a few hot bytes, read through the read-only cache; prefetching the
 * next iteration's block ids spilled registers at 4 CTAs per SM). The
 * DEC_UNROLL keys of an iteration update the lane's
 * online-softmax state at once (one rescale per iteration, not per key).
 * Lane states are merged across lane groups with shuffles, then across warps
 * through shared memory (each head's warp weights computed once), all in
 * fp32.
 *
 * A third body, on tensor cores, takes GQA groups of 3..8 heads (a chunk of
 * 8 for larger groups) at head_dim 64 and 128 by default (the tensor-core
 * body below; INFERD_ATTN_DEC_TC=0 turns it off): same CTAs, splits,
 * partials and merges, its own arithmetic (bf16 P, as the tensor-core
 * prefill).
 *
 * fp8 e4m3 cache (kc_attn_args.kv_fp8): the CUDA-core bodies read a lane's
 * 8 dims as 8 bytes (the ring holds twice the iterations in the same
 * bytes) and convert them exactly to fp32 (kc_unpack8_e4m3); the rest of
 * the arithmetic is the bf16 bodies'. The tensor-core body has an fp8 twin
 * (attn_decode_tc8_kernel): fp8 tiles in a deeper ring, converted to f16
 * fragments in registers, products on f16 mma.
 *
 * The CUDA-core bodies, bitwise alike (same keys per lane, same arithmetic order):
 * the K/V pieces go straight to registers (dec_fold_keys: a warp's loads
 * are in flight only between its iterations' compute), or through a
 * per-thread ring of DEC_STAGES iterations in shared memory filled by
 * cp.async (dec_fold_keys_pipe: the next iterations' loads stay in flight
 * while one is computed, and hold no registers). The dispatcher picks
 * (kc_attn_args.pipe, attention.cu).
 *
 * Split-KV (planned on the host, attention.cu): split s of a sequence of
 * length L covers keys [s * chunk, min(L, (s + 1) * chunk)) with chunk =
 * dec_chunk(L), computed here from the sequence's own length; its normalized
 * partial output and log-sum-exp go to the workspace, and the merge kernel
 * (one warp per (sequence, head), four heads a CTA; 16-byte reads of the
 * partials issued before the weights are computed) combines the splits in
 * an order fixed by the split count and head_dim (dec_merge_head):
 * out = sum_s exp(lse_s - M) o_s / sum_s exp(lse_s - M). Without a split the
 * CTA writes bf16 output directly. For a given plan (chunk) the result is
 * bitwise reproducible: which CTA runs first never changes the arithmetic.
 *
 * Fused merge (a.merge_cnt set): no merge launch; the split CTAs of a
 * (sequence, kv head, head chunk) count their arrivals in a device counter
 * after their partials are written and fenced, and the last to arrive
 * merges the group's heads, one warp a head, with the merge kernel's code
 * (dec_merge_head: the same arithmetic in the same order, so both forms
 * give bitwise the same output), reading the partials through L2, and sets
 * the counter back
 * to 0 for the next launch (and graph replay). At batch 1 the merge launch
 * is one kernel boundary per layer on the decode step's critical path.
 *
 * Folded plan (a.warps > DEC_WARPS, the tensor-core bodies; on by
 * default, INFERD_ATTN_FOLD=0 off, attention.cu): a plan of 2..4
 * splits a sequence runs as one CTA of 4 warps a split (at most 12 on an
 * fp8 cache by default, attention.cu's attn_fold_cap) over the whole
 * context, tile t to warp t % W, the warps merged in shared memory as a
 * CTA's 4 always are: no partials, no merge kernel.
 *
 * PDL (a.pdl): the decode and merge kernels are launched as programmatic
 * dependents of the kernel before them, so their launch overlaps its end;
 * each reads only the step's uploaded inputs (query_start_loc, seq_lens)
 * before kc_pdl_wait, and q, K/V and the partials after it. A decode CTA
 * triggers its own dependents at its start (a.pdl 1) or, with a.pdl 2,
 * at its exit (the merge's launch then only overlaps the decode's end).
 */
#include <type_traits>

#include "kernels/cuda/attention.cuh"
#include "kernels/cuda/mma.cuh"

#define DEC_WARPS 4
#define DEC_THREADS (DEC_WARPS * 32)
#ifndef KC_DEC_UNROLL
#define DEC_UNROLL 4 /* -DKC_DEC_UNROLL=N: A/B builds of device-wave.sh's attnab part */
#else
#define DEC_UNROLL KC_DEC_UNROLL
#endif
#ifndef KC_DEC_STAGES
#define DEC_STAGES 3 /* iterations of the cp.async ring (-DKC_DEC_STAGES=N for A/B builds) */
#else
#define DEC_STAGES KC_DEC_STAGES
#endif
#define DEC_SLOT_VECS (2 * DEC_UNROLL)                              /* 16-byte K and V pieces a thread stages */
#define DEC_RING_BYTES (DEC_STAGES * DEC_SLOT_VECS * DEC_THREADS * 16) /* 48 KiB: no opt-in needed */
#define MERGE_THREADS 128
#define MERGE_HEADS (MERGE_THREADS / 32) /* heads of a merge CTA: one warp each */

#if KC_ATTN_MAX_SPLITS > 64
#error "a merge warp's lanes hold two splits' log-sum-exps each"
#endif
/* Keys per split of a sequence of length L: ceil(L / split_target) rounded
 * up to KC_ATTN_CHUNK_ALIGN, at least min_chunk. A function of the
 * sequence's own length and of the plan's split_target and min_chunk
 * (constants of the model, the GPU, the process and the batch's
 * power-of-two class), never of the other sequences' lengths or of the
 * graph's context bucket (attention.cu). */
__device__ __forceinline__ int dec_chunk(const kc_attn_args &a, int L)
{
    int c = (L + a.split_target - 1) / a.split_target;
    c = (c + KC_ATTN_CHUNK_ALIGN - 1) / KC_ATTN_CHUNK_ALIGN * KC_ATTN_CHUNK_ALIGN;
    return c < a.min_chunk ? a.min_chunk : c;
}

/* Splits of a sequence of length L under the plan (1 when L <=
 * KC_ATTN_SPLIT_MIN_LEN, else >= 1 and <= max_splits:
 * ceil(L / dec_chunk(L)) <= min(split_target, ceil(L / min_chunk))
 * and the host sizes max_splits for the batch's longest L). */
__device__ __forceinline__ int dec_n_splits(const kc_attn_args &a, int L)
{
    if (!a.part_o || L <= KC_ATTN_SPLIT_MIN_LEN)
        return 1;
    const int c = dec_chunk(a, L);
    int n = (L + c - 1) / c;
    return n < 1 ? 1 : n > a.max_splits ? a.max_splits : n;
}

/* Merge (m, l, acc) of the lane `o` positions away into this lane's state. */
template <int GMAX>
__device__ __forceinline__ void dec_merge_lanes(float (&m)[GMAX], float (&l)[GMAX], float (&acc)[GMAX][8], int o)
{
#pragma unroll
    for (int g = 0; g < GMAX; g++) {
        const float mo = __shfl_xor_sync(0xFFFFFFFFu, m[g], o);
        const float lo = __shfl_xor_sync(0xFFFFFFFFu, l[g], o);
        const float mx = fmaxf(m[g], mo);
        const float ca = kc_exp_diff(m[g], mx), cb = kc_exp_diff(mo, mx);
        l[g] = l[g] * ca + lo * cb;
#pragma unroll
        for (int e = 0; e < 8; e++) {
            const float ao = __shfl_xor_sync(0xFFFFFFFFu, acc[g][e], o);
            acc[g][e] = acc[g][e] * ca + ao * cb;
        }
        m[g] = mx;
    }
}

/* A lane's 8 dims of one key's K or V, as the cache holds them: 8 bf16
 * (16 bytes) or, F8, 8 e4m3 codes (8 bytes); dec_unpack gives the floats. */
template <bool F8> struct dec_kv {
    typedef uint4 vec;
};
template <> struct dec_kv<true> {
    typedef uint2 vec;
};
__device__ __forceinline__ void dec_unpack(uint4 v, float *f)
{
    kc_unpack8(v, f);
}
__device__ __forceinline__ void dec_unpack(uint2 v, float *f)
{
    kc_unpack8_e4m3(v, f);
}

/* This lane's view of a warp's keys: iteration tb covers keys tb + u * TPW
 * + grp (u < DEC_UNROLL) of kv head kvh. */
typedef struct {
    const int32_t *bt;
    const uint8_t *kbase, *vbase; /* the kv head's row, this lane's 8 dims (bytes) */
    int64_t blk_elems;
} dec_lane;

template <bool F8>
__device__ __forceinline__ dec_lane dec_lane_make(const kc_attn_args &a, int seq, int kvh, int sub)
{
    constexpr int ES = sizeof(typename dec_kv<F8>::vec) / 8; /* bytes an element */
    dec_lane d;
    d.bt = a.block_tables + (int64_t)seq * a.max_blocks;
    d.blk_elems = (int64_t)a.nkv * a.bs * a.hd;
    d.kbase = (const uint8_t *)a.k_cache + ((int64_t)kvh * a.bs * a.hd + sub * 8) * ES;
    d.vbase = (const uint8_t *)a.v_cache + ((int64_t)kvh * a.bs * a.hd + sub * 8) * ES;
    return d;
}

/* Element offset of key t (kv head 0) in the paged cache, through the
 * lane's block-table row (a few hot bytes, read through the read-only cache). */
__device__ __forceinline__ int64_t dec_key_off(const kc_attn_args &a, const dec_lane &ln, int t)
{
    const int bi = a.bs_log >= 0 ? t >> a.bs_log : t / a.bs; /* no integer division for power-of-two blocks */
    return (int64_t)__ldg(ln.bt + bi) * ln.blk_elems + (int64_t)(t - bi * a.bs) * a.hd;
}

/* One iteration of the online softmax: this lane's DEC_UNROLL keys (K and
 * V pieces kr, vr; ok = inside the range) folded into (m, l, acc) for GMAX
 * heads, with one rescale for the iteration. */
template <int GMAX, int TG, class V>
__device__ __forceinline__ void dec_fold_step(const V (&kr)[DEC_UNROLL], const V (&vr)[DEC_UNROLL],
                                              const bool (&ok)[DEC_UNROLL], const float (&q)[GMAX][8],
                                              float (&m)[GMAX], float (&l)[GMAX], float (&acc)[GMAX][8])
{
    float s[DEC_UNROLL][GMAX];
#pragma unroll
    for (int u = 0; u < DEC_UNROLL; u++) {
        float k[8];
        dec_unpack(kr[u], k);
#pragma unroll
        for (int g = 0; g < GMAX; g++) {
            float d = 0.0f;
#pragma unroll
            for (int e = 0; e < 8; e++)
                d += q[g][e] * k[e];
#pragma unroll
            for (int o = TG >> 1; o > 0; o >>= 1)
                d += __shfl_xor_sync(0xFFFFFFFFu, d, o);
            s[u][g] = ok[u] ? d : -INFINITY;
        }
    }
#pragma unroll
    for (int g = 0; g < GMAX; g++) {
        float mx = m[g];
#pragma unroll
        for (int u = 0; u < DEC_UNROLL; u++)
            mx = fmaxf(mx, s[u][g]);
        const float corr = kc_exp_diff(m[g], mx);
        l[g] *= corr;
#pragma unroll
        for (int e = 0; e < 8; e++)
            acc[g][e] *= corr;
        m[g] = mx;
    }
#pragma unroll
    for (int u = 0; u < DEC_UNROLL; u++) {
        float v[8];
        dec_unpack(vr[u], v);
#pragma unroll
        for (int g = 0; g < GMAX; g++) {
            const float p = ok[u] ? expf(s[u][g] - m[g]) : 0.0f;
            l[g] += p;
#pragma unroll
            for (int e = 0; e < 8; e++)
                acc[g][e] += p * v[e];
        }
    }
}

/* Online softmax over keys [kv_begin, kv_end) of kv head kvh: this lane's
 * state over the keys of its slot (grp), for GMAX heads (8 dims each). K/V
 * pieces go straight to registers, all DEC_UNROLL loads issued before any
 * is used. */
template <int GMAX, int TG, bool F8>
__device__ __forceinline__ void dec_fold_keys(const kc_attn_args &a, const dec_lane &ln, int kv_begin, int kv_end,
                                              int grp, bool dim_ok, const float (&q)[GMAX][8], float (&m)[GMAX],
                                              float (&l)[GMAX], float (&acc)[GMAX][8])
{
    typedef typename dec_kv<F8>::vec V;
    constexpr int TPW = 32 / TG, KPW = TPW * DEC_UNROLL, STEP = DEC_WARPS * KPW, ES = sizeof(V) / 8;
    const int first = kv_begin + (threadIdx.x >> 5) * KPW;
    /* NOTE: the loop bound is warp-uniform (tb), so all 32 lanes reach the
     * shuffles; lanes past kv_end carry ok = false. */
    for (int tb = first; tb < kv_end; tb += STEP) {
        V kr[DEC_UNROLL], vr[DEC_UNROLL];
        bool ok[DEC_UNROLL];
#pragma unroll
        for (int u = 0; u < DEC_UNROLL; u++) {
            const int t = tb + u * TPW + grp;
            ok[u] = t < kv_end;
            if (ok[u] && dim_ok) {
                const int64_t off = dec_key_off(a, ln, t) * ES;
                kr[u] = __ldg((const V *)(ln.kbase + off));
                vr[u] = __ldg((const V *)(ln.vbase + off));
            } else {
                kr[u] = vr[u] = V{};
            }
        }
        dec_fold_step<GMAX, TG>(kr, vr, ok, q, m, l, acc);
    }
}

/* Start the copies of iteration tb's K/V pieces into this thread's stage
 * slot (piece j at slot[j * DEC_THREADS]: K of key u at j = 2u, V at
 * 2u + 1); pieces outside the range are zero-filled without a read, an
 * iteration past the range copies nothing. Always closes a group, so the
 * group count per iteration stays fixed. */
template <int TG, class V>
__device__ __forceinline__ void dec_issue(const kc_attn_args &a, const dec_lane &ln, int tb, int kv_end, int grp,
                                          bool dim_ok, V *slot)
{
    constexpr int TPW = 32 / TG, ES = sizeof(V) / 8;
    if (tb < kv_end) {
#pragma unroll
        for (int u = 0; u < DEC_UNROLL; u++) {
            const int t = tb + u * TPW + grp;
            const bool ok = t < kv_end && dim_ok;
            const int64_t off = ok ? dec_key_off(a, ln, t) * ES : 0;
            if constexpr (sizeof(V) == 16) {
                kc_cp_async16(slot + (2 * u) * DEC_THREADS, ln.kbase + off, ok);
                kc_cp_async16(slot + (2 * u + 1) * DEC_THREADS, ln.vbase + off, ok);
            } else {
                kc_cp_async8(slot + (2 * u) * DEC_THREADS, ln.kbase + off, ok);
                kc_cp_async8(slot + (2 * u + 1) * DEC_THREADS, ln.vbase + off, ok);
            }
        }
    }
    kc_cp_commit();
}

/* dec_fold_keys with the K/V pieces staged through a per-thread ring of
 * DEC_STAGES iterations in shared memory (cp.async): iterations it + 1 ..
 * it + DEC_STAGES - 1 are in flight while iteration it is computed, and the
 * loads hold no registers. A thread reads back only the pieces it copied
 * itself, so no barrier is needed. The arithmetic is dec_fold_keys's, in the
 * same order: the two give bitwise the same state. */
template <int GMAX, int TG, bool F8>
__device__ __forceinline__ void dec_fold_keys_pipe(const kc_attn_args &a, const dec_lane &ln, int kv_begin,
                                                   int kv_end, int grp, bool dim_ok, const float (&q)[GMAX][8],
                                                   float (&m)[GMAX], float (&l)[GMAX], float (&acc)[GMAX][8],
                                                   uint4 *ring_bytes)
{
    typedef typename dec_kv<F8>::vec V;
    constexpr int TPW = 32 / TG, KPW = TPW * DEC_UNROLL, STEP = DEC_WARPS * KPW;
    constexpr int STAGE = DEC_SLOT_VECS * DEC_THREADS; /* V per stage */
    constexpr int STAGES = DEC_RING_BYTES / (STAGE * (int)sizeof(V)); /* fp8: twice DEC_STAGES in the same bytes */
    const int first = kv_begin + (threadIdx.x >> 5) * KPW;
    V *mine = (V *)ring_bytes + threadIdx.x;
#pragma unroll
    for (int s = 0; s < STAGES; s++)
        dec_issue<TG>(a, ln, first + s * STEP, kv_end, grp, dim_ok, mine + s * STAGE);
    int stage = 0;
    for (int tb = first; tb < kv_end; tb += STEP) {
        kc_cp_wait<STAGES - 1>(); /* iteration tb's group has landed */
        V *slot = mine + stage * STAGE;
        V kr[DEC_UNROLL], vr[DEC_UNROLL];
        bool ok[DEC_UNROLL];
#pragma unroll
        for (int u = 0; u < DEC_UNROLL; u++) {
            kr[u] = slot[(2 * u) * DEC_THREADS];
            vr[u] = slot[(2 * u + 1) * DEC_THREADS];
            ok[u] = tb + u * TPW + grp < kv_end;
        }
        dec_fold_step<GMAX, TG>(kr, vr, ok, q, m, l, acc);
        dec_issue<TG>(a, ln, tb + STAGES * STEP, kv_end, grp, dim_ok, slot);
        stage = stage + 1 == STAGES ? 0 : stage + 1;
    }
    kc_cp_wait<0>();
}

/* The bf16 output of head h of the decode token at row q0 from its ns
 * partials (at partial index pb, its split 0), merged by one warp; sm_w is
 * the warp's KC_ATTN_MAX_SPLITS floats of shared memory. Every lane of the
 * warp calls it (shuffles). Lane l owns 4 dims (d4 = l % hd4, and d4 + 32
 * .. where hd4 = hd / 4 > 32) of the splits grp, grp + G, ... (G = 32 /
 * hd4 groups of lanes, grp = l / hd4; G = 1 where hd4 >= 32), and issues
 * the NL 16-byte reads of its first splits' partials before anything else,
 * so they are in flight while the weights are computed: split s's weight
 * w_s = exp(lse_s - max_s lse_s) is computed by lane s % 32 and passed
 * through sm_w. A lane adds its splits in split order, the groups' sums
 * meet by shuffles in group order, sum_s w_s is a butterfly of the lanes'
 * weights (a serial chain of one round trip per split ran 7-12 us at batch
 * 1 on an H100, and a merge of the 4 heads of a CTA one after another in
 * the fused form was slower than the merge launch). The order is a
 * function of ns and hd alone, so the merge kernel and the fused merge
 * (both this code) give bitwise the same output. Partials are read through
 * L2 (__ldcg): in the fused merge other CTAs wrote them during this launch. */
template <int NL>
__device__ __forceinline__ void dec_merge_head(const kc_attn_args &a, int q0, int h, int64_t pb, int ns, float *sm_w)
{
    const int lane = threadIdx.x & 31, hd4 = a.hd >> 2; /* hd % 8 == 0 */
    const int G = hd4 >= 32 ? 1 : 32 / hd4, grp = hd4 >= 32 ? 0 : lane / hd4;
    const int d4_0 = hd4 >= 32 ? lane : lane - grp * hd4;
    const float4 *po = (const float4 *)(a.part_o + pb * a.hd); /* [ns][hd4] */
    const bool mine = grp < G && d4_0 < hd4;
    float4 v[NL];
#pragma unroll
    for (int i = 0; i < NL; i++) {
        const int s = grp + i * G;
        v[i] = mine && s < ns ? __ldcg(po + (int64_t)s * hd4 + d4_0) : make_float4(0.0f, 0.0f, 0.0f, 0.0f);
    }
    /* the weights: lanes hold splits lane and lane + 32 (KC_ATTN_MAX_SPLITS <= 64) */
    const float lse0 = lane < ns ? __ldcg(a.part_lse + pb + lane) : -INFINITY;
    const float lse1 = lane + 32 < ns ? __ldcg(a.part_lse + pb + lane + 32) : -INFINITY;
    float mx = fmaxf(lse0, lse1);
#pragma unroll
    for (int o = 16; o > 0; o >>= 1)
        mx = fmaxf(mx, __shfl_xor_sync(0xFFFFFFFFu, mx, o));
    const float w0 = kc_exp_diff(lse0, mx), w1 = kc_exp_diff(lse1, mx);
    float wsum = w0 + w1;
#pragma unroll
    for (int o = 16; o > 0; o >>= 1)
        wsum += __shfl_xor_sync(0xFFFFFFFFu, wsum, o);
    if (lane < ns)
        sm_w[lane] = w0;
    if (lane + 32 < ns)
        sm_w[lane + 32] = w1;
    __syncwarp();
    const float r = wsum > 0.0f ? 1.0f / wsum : 0.0f;
    for (int d4 = d4_0; d4 - d4_0 < (hd4 > 32 ? hd4 : 1); d4 += 32) { /* twice where hd4 > 32 */
        float4 o = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
        const bool on = mine && d4 < hd4;
        for (int s0 = grp; s0 < ns; s0 += G * NL) {
            if (s0 != grp || d4 != d4_0) { /* the first batch was read above */
#pragma unroll
                for (int i = 0; i < NL; i++) {
                    const int s = s0 + i * G;
                    v[i] = on && s < ns ? __ldcg(po + (int64_t)s * hd4 + d4) : make_float4(0.0f, 0.0f, 0.0f, 0.0f);
                }
            }
#pragma unroll
            for (int i = 0; i < NL; i++) {
                const int s = s0 + i * G;
                if (on && s < ns) {
                    const float w = sm_w[s];
                    o.x = fmaf(w, v[i].x, o.x);
                    o.y = fmaf(w, v[i].y, o.y);
                    o.z = fmaf(w, v[i].z, o.z);
                    o.w = fmaf(w, v[i].w, o.w);
                }
            }
        }
        /* the G groups' sums, in group order, to the lanes of group 0 */
        const float4 og = o;
        for (int g = 1; g < G; g++) {
            const float x = __shfl_down_sync(0xFFFFFFFFu, og.x, g * hd4);
            const float y = __shfl_down_sync(0xFFFFFFFFu, og.y, g * hd4);
            const float z = __shfl_down_sync(0xFFFFFFFFu, og.z, g * hd4);
            const float w = __shfl_down_sync(0xFFFFFFFFu, og.w, g * hd4);
            o.x += x;
            o.y += y;
            o.z += z;
            o.w += w;
        }
        if (grp == 0 && on) {
            uint32_t *dst = (uint32_t *)(a.out + (int64_t)q0 * a.out_stride + (int64_t)h * a.hd + 4 * d4);
            dst[0] = (uint32_t)kc_f2bf(o.x * r) | ((uint32_t)kc_f2bf(o.y * r) << 16);
            dst[1] = (uint32_t)kc_f2bf(o.z * r) | ((uint32_t)kc_f2bf(o.w * r) << 16);
        }
    }
    __syncwarp(); /* sm_w is read by every lane before the warp's next head overwrites it */
}

/* Fused merge, after a split CTA wrote its partials: count this CTA's
 * arrival in the group's counter; the last of the sequence's ns splits to
 * arrive merges every head of the group (h0 .. h0 + nhc - 1, warp w the
 * heads h0 + w, h0 + w + DEC_WARPS, ...) and sets the counter back to 0.
 * Every thread of the CTA calls it; scratch holds DEC_WARPS *
 * KC_ATTN_MAX_SPLITS + 1 floats. NOTE: the fences make the partials of
 * every arrival visible before the count that admits the merging CTA
 * (release), and the other CTAs' partials visible to it after (acquire), as
 * in CUDA's threadFenceReduction sample. */
__device__ __forceinline__ void dec_fused_merge(const kc_attn_args &a, int seq, int q0, int h0, int nhc, int ns,
                                                float *scratch)
{
    int &sm_last = *(int *)(scratch + DEC_WARPS * KC_ATTN_MAX_SPLITS);
    __threadfence();
    __syncthreads(); /* also: every thread is done reading the merge area that scratch reuses */
    if (threadIdx.x == 0) {
        int *cnt = a.merge_cnt + (int64_t)seq * gridDim.y + blockIdx.y;
        sm_last = atomicAdd(cnt, 1) == ns - 1;
        if (sm_last) {
            *cnt = 0; /* every split of the group has counted: no one touches it again this launch */
            __threadfence();
        }
    }
    __syncthreads();
    if (!sm_last)
        return;
    const int warp = threadIdx.x >> 5;
    for (int g = warp; g < nhc; g += DEC_WARPS) /* warp-uniform */
        dec_merge_head<8>(a, q0, h0 + g, ((int64_t)seq * a.nh + h0 + g) * a.max_splits, ns,
                          scratch + warp * KC_ATTN_MAX_SPLITS);
}

/* Cross-warp merge area of a decode CTA of W warps: the warps' states,
 * then each head's warp weights f (exp(m_w - max)) and weighted sum of l. */
template <int GMAX, int W = DEC_WARPS> struct dec_red {
    float acc[W][GMAX][KC_ATTN_MAX_HD];
    float m[W][GMAX], l[W][GMAX];
    float f[GMAX][W], sum[GMAX];
};
struct dec_no_red {
};
static_assert(sizeof(dec_red<8>) <= DEC_RING_BYTES, "the merge area reuses the ring");
/* The fused merge's weights, warp maxima and last-arrival flag reuse the
 * merge area too: a decode CTA's static shared memory beside the 48 KiB
 * ring would need an opt-in launch attribute (an H100 launch failed). */
static_assert(sizeof(dec_red<1>) >= (DEC_WARPS * KC_ATTN_MAX_SPLITS + 1) * sizeof(float),
              "the fused merge's scratch fits the merge area");

/* What a decode CTA covers: the sequence's query row and length, its head
 * chunk (h0 .. h0 + nhc - 1 of kv head kvh) and its split's keys
 * [kv_begin, kv_end). */
typedef struct {
    int seq, q0, L, kvh, h0, nhc, split, n_splits, kv_begin, kv_end;
} dec_cta;

/* This CTA's dec_cta; false when it has nothing to do (not a decode
 * sequence, or a split past the sequence's count). Reads only uploaded
 * inputs (before kc_pdl_wait). */
template <int GMAX> __device__ __forceinline__ bool dec_cta_make(const kc_attn_args &a, dec_cta &c)
{
    c.seq = blockIdx.x;
    const int q1 = a.qsl[c.seq + 1];
    c.q0 = a.qsl[c.seq];
    c.L = a.seq_lens[c.seq]; /* issued together */
    if (q1 - c.q0 != 1)
        return false; /* not a decode sequence: the prefill kernel owns it */
    const int hchunks = (a.group + GMAX - 1) / GMAX;
    c.kvh = blockIdx.y / hchunks;
    const int hc = blockIdx.y - c.kvh * hchunks;
    c.h0 = c.kvh * a.group + hc * GMAX;
    c.nhc = min(GMAX, a.group - hc * GMAX);
    c.split = blockIdx.z;
    c.n_splits = dec_n_splits(a, c.L);
    if (c.split >= c.n_splits)
        return false;
    const int chunk = c.n_splits > 1 ? dec_chunk(a, c.L) : c.L; /* an unsplit sequence in a split launch: all of it */
    c.kv_begin = c.split * chunk;
    c.kv_end = min(c.L, c.kv_begin + chunk);
    return true;
}

/* After every warp's state is in red (a barrier later): across the W
 * warps (each head's warp weights once, thread g, then every output dim),
 * then the bf16 output (no split) or the split's partial, and the fused
 * merge. Every thread of the CTA calls it. */
template <int GMAX, int W = DEC_WARPS>
__device__ __forceinline__ void dec_cta_finish(const kc_attn_args &a, const dec_cta &c, dec_red<GMAX, W> &red)
{
    const int hd = a.hd;
    if ((int)threadIdx.x < c.nhc) {
        const int g = threadIdx.x;
        float mx = -INFINITY;
#pragma unroll
        for (int w = 0; w < W; w++)
            mx = fmaxf(mx, red.m[w][g]);
        float sum = 0.0f;
#pragma unroll
        for (int w = 0; w < W; w++) {
            const float f = kc_exp_diff(red.m[w][g], mx);
            red.f[g][w] = f;
            sum += red.l[w][g] * f;
        }
        red.sum[g] = sum;
        if (a.part_o) {
            const int64_t pi = ((int64_t)c.seq * a.nh + c.h0 + g) * a.max_splits + c.split;
            a.part_lse[pi] = sum > 0.0f ? mx + logf(sum) : -INFINITY;
        }
    }
    __syncthreads();
    for (int g = 0; g < c.nhc; g++) {
        const float sum = red.sum[g];
        for (int d = threadIdx.x; d < hd; d += W * 32) {
            float o = 0.0f;
#pragma unroll
            for (int w = 0; w < W; w++)
                o += red.acc[w][g][d] * red.f[g][w];
            const int h = c.h0 + g;
            const float res = sum > 0.0f ? o / sum : 0.0f;
            if (!a.part_o) {
                a.out[(int64_t)c.q0 * a.out_stride + (int64_t)h * hd + d] = kc_f2bf(res);
            } else {
                const int64_t pi = ((int64_t)c.seq * a.nh + h) * a.max_splits + c.split;
                a.part_o[pi * hd + d] = res;
            }
        }
    }
    if (a.part_o && a.merge_cnt)
        dec_fused_merge(a, c.seq, c.q0, c.h0, c.nhc, c.n_splits, (float *)&red);
}

/* PIPE: K/V through the shared-memory ring (DEC_RING_BYTES of dynamic
 * shared memory, reused as the merge area once every warp is done), else
 * straight to registers (static merge area). F8: the cache holds e4m3
 * (kc_attn_args.kv_fp8), 8-byte pieces, the ring twice as deep. */
template <int GMAX, int TG, bool PIPE, bool F8>
static __global__ void __launch_bounds__(DEC_THREADS, KC_ATTN_DEC_CTAS_PER_SM(GMAX))
    attn_decode_kernel(const kc_attn_args a)
{
    if (a.pdl != 2)
        kc_pdl_trigger();
    extern __shared__ uint4 dec_ring[];
    __shared__ typename std::conditional<PIPE, dec_no_red, dec_red<GMAX>>::type red_static;
    dec_red<GMAX> &red = *(PIPE ? (dec_red<GMAX> *)dec_ring : (dec_red<GMAX> *)&red_static);
    dec_cta c;
    if (!dec_cta_make<GMAX>(a, c))
        return;
    const int hd = a.hd, lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    const int sub = lane & (TG - 1), grp = lane / TG;
    const bool dim_ok = sub * 8 < hd;
    kc_pdl_wait(); /* q and this step's K/V are the previous kernel's output */

    float q[GMAX][8], acc[GMAX][8], m[GMAX], l[GMAX];
    const uint16_t *qrow = a.qkv + (int64_t)c.q0 * a.qkv_stride + (int64_t)c.h0 * hd + sub * 8;
#pragma unroll
    for (int g = 0; g < GMAX; g++) {
        m[g] = -INFINITY;
        l[g] = 0.0f;
#pragma unroll
        for (int e = 0; e < 8; e++)
            acc[g][e] = q[g][e] = 0.0f;
        if (g < c.nhc && dim_ok) {
            kc_unpack8(*(const uint4 *)(qrow + (int64_t)g * hd), q[g]);
#pragma unroll
            for (int e = 0; e < 8; e++)
                q[g][e] *= a.scale;
        }
    }
    const dec_lane ln = dec_lane_make<F8>(a, c.seq, c.kvh, sub);
    if (PIPE) {
        dec_fold_keys_pipe<GMAX, TG, F8>(a, ln, c.kv_begin, c.kv_end, grp, dim_ok, q, m, l, acc, dec_ring);
        __syncthreads(); /* every warp is done with the ring: it becomes the merge area */
    } else {
        dec_fold_keys<GMAX, TG, F8>(a, ln, c.kv_begin, c.kv_end, grp, dim_ok, q, m, l, acc);
    }
#pragma unroll
    for (int o = TG; o < 32; o <<= 1)
        dec_merge_lanes<GMAX>(m, l, acc, o);
    if (grp == 0) {
#pragma unroll
        for (int g = 0; g < GMAX; g++) {
            if (dim_ok) {
#pragma unroll
                for (int e = 0; e < 8; e++)
                    red.acc[warp][g][sub * 8 + e] = acc[g][e];
            }
            if (sub == 0) {
                red.m[warp][g] = m[g];
                red.l[warp][g] = l[g];
            }
        }
    }
    __syncthreads();
    dec_cta_finish<GMAX>(a, c, red);
}

/* --- tensor-core body ----------------------------------------------------------
 * For GQA groups of 3..8 heads and head_dim 64 or 128 (kc_attn_args.tc,
 * attention.cu): a warp multiplies its kv head's whole group at once on
 * mma.sync m16n8k16, the group's query heads as the 16 rows of the A operand
 * (rows past the group zero), 16 keys a tile: S = Q K^T (K fragments by
 * ldmatrix from a per-warp two-stage cp.async ring of K and V tiles), the
 * online softmax of each head row in the log2 domain (scale * log2 e folded
 * into one FFMA, exp2; m kept for the merge in natural units), P rounded to
 * bf16 and reused from the accumulators as the A operand of O += P V (V
 * fragments by ldmatrix.trans), as the tensor-core prefill kernel does.
 * Warp w takes the split's tiles w, w + 4, ...; its state goes to the same
 * cross-warp merge as the CUDA-core bodies (dec_cta_finish), so splits,
 * partials and both merges are shared. A key costs the warp about 2 mma and
 * a few softmax instructions instead of ~90 instructions a lane (the
 * CUDA-core body at batch 1 x 512 is a latency chain: ncu 8.6 us a layer
 * for 2.2 MB). Llama-3-8B decode steps on an H100 (docs/PERF.md): batch 1
 * -1.5%, batch 16 -3%, batch 256 x 1k -10%, batch 1 x 32k -3%, batch 64
 * within noise. The split plan counts KC_ATTN_DEC_TC_CTAS_PER_SM CTAs a SM
 * for it (two stages of 16-key K and V tiles a warp: 68 KiB at 128 dims). */
#define DTC_KEYS 16 /* keys a tile */
#define DTC_PAD 8   /* bf16 of padding per shared row: ldmatrix rows on distinct banks */

/* Whether a tensor-core body may gather the tile of keys [k0, k0 +
 * DTC_KEYS) before its PDL wait (a.early_kv): every key in it precedes the
 * step's own (position L - 1, which the kernel before writes). Earlier
 * keys were written by earlier steps; a block being written this step is
 * never one a sequence shares, and the block tables are uploaded inputs. */
__device__ __forceinline__ bool dec_tile_early(const kc_attn_args &a, const dec_cta &c, int k0)
{
    return a.early_kv && k0 + DTC_KEYS <= c.L - 1;
}

/* Dynamic shared memory of the tensor-core body with W warps: per warp two
 * stages of a K and a V tile (also the merge area afterwards). */
template <int W = DEC_WARPS> static size_t dtc_smem_bytes(int hd)
{
    const size_t tiles = (size_t)W * 2 * 2 * DTC_KEYS * (size_t)(hd + DTC_PAD) * sizeof(uint16_t);
    return tiles > sizeof(dec_red<8, W>) ? tiles : sizeof(dec_red<8, W>);
}

/* CTAs an SM of a tensor-core body with W warps a CTA, when CTAS CTAs of
 * DEC_WARPS fit an SM (the register bound): the same warps an SM. */
#define DTC_MINB(CTAS, W) (DEC_WARPS * (CTAS) / (W) > 0 ? DEC_WARPS * (CTAS) / (W) : 1)

/* W warps a CTA: DEC_WARPS, or (kc_attn_args.warps, the folded split
 * plan, attention.cu) 8 or 12 (the fp8 body: up to 16; dtc_warps_max)
 * covering a sequence's whole context, tile t to warp t % W. */
template <int GMAX, int D, int W = DEC_WARPS>
static __global__ void __launch_bounds__(W * 32, DTC_MINB(KC_ATTN_DEC_TC_CTAS_PER_SM, W))
    attn_decode_tc_kernel(const kc_attn_args a)
{
    static_assert(GMAX <= 8, "the group's heads are rows 0..7 of the m16 tile");
    constexpr int LD = D + DTC_PAD, STAGE = 2 * DTC_KEYS * LD; /* K then V tile */
    if (a.pdl != 2)
        kc_pdl_trigger();
    extern __shared__ uint4 dec_ring[];
    dec_red<GMAX, W> &red = *(dec_red<GMAX, W> *)dec_ring;
    dec_cta c;
    if (!dec_cta_make<GMAX>(a, c))
        return;
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, g = lane >> 2, cc = lane & 3;
    const int32_t *bt = a.block_tables + (int64_t)c.seq * a.max_blocks; /* [max_blocks] */
    uint16_t *ring = (uint16_t *)dec_ring + warp * 2 * STAGE; /* [2][K, V][16][LD] */
    const int n_tiles = (c.kv_end - c.kv_begin + DTC_KEYS - 1) / DTC_KEYS;
    /* the warp's first tile: before the PDL wait where it may (dec_tile_early), else after it */
    const bool early = warp < n_tiles && dec_tile_early(a, c, c.kv_begin + warp * DTC_KEYS);
    if (!early)
        kc_pdl_wait(); /* q and this step's K/V are the previous kernel's output */
    if (warp < n_tiles)
        kc_gather_kv<D, LD, DTC_KEYS, 32>(a, bt, c.kvh, c.kv_begin + warp * DTC_KEYS, c.kv_end, lane, ring,
                                          ring + DTC_KEYS * LD);
    kc_cp_commit();
    if (early)
        kc_pdl_wait();
    /* Q fragments (A operand, rows = heads h0 + g, g < nhc; rows g + 8 zero) */
    uint32_t qf[D / 16][2];
    const uint16_t *qrow = a.qkv + (int64_t)c.q0 * a.qkv_stride + (int64_t)(c.h0 + g) * D + 2 * cc;
#pragma unroll
    for (int kk = 0; kk < D / 16; kk++) {
        qf[kk][0] = g < c.nhc ? *(const uint32_t *)(qrow + kk * 16) : 0u;
        qf[kk][1] = g < c.nhc ? *(const uint32_t *)(qrow + kk * 16 + 8) : 0u;
    }
    const float scale_log2 = a.scale * 1.4426950408889634f;
    float o[D / 8][4];
#pragma unroll
    for (int dn = 0; dn < D / 8; dn++)
        o[dn][0] = o[dn][1] = o[dn][2] = o[dn][3] = 0.0f;
    float m = -INFINITY, l = 0.0f; /* row g: running max (log2 units), this lane's partial sum */
    int stage = 0;
    for (int t = warp; t < n_tiles; t += W, stage ^= 1) {
        const int k0 = c.kv_begin + t * DTC_KEYS;
        if (t + W < n_tiles) {
            /* NOTE: stage ^ 1 was read in the warp's previous tile, which
             * ended with __syncwarp, so it is free to overwrite */
            uint16_t *nx = ring + (stage ^ 1) * STAGE;
            kc_gather_kv<D, LD, DTC_KEYS, 32>(a, bt, c.kvh, k0 + W * DTC_KEYS, c.kv_end, lane, nx,
                                              nx + DTC_KEYS * LD);
            kc_cp_commit();
            kc_cp_wait<1>();
        } else {
            kc_cp_wait<0>();
        }
        __syncwarp(); /* every lane's copies of this tile have landed */
        const uint16_t *sK = ring + stage * STAGE, *sV = sK + DTC_KEYS * LD;
        /* S = Q K^T: n-tiles of keys [0, 8) and [8, 16) */
        float s[2][4] = {{0.0f, 0.0f, 0.0f, 0.0f}, {0.0f, 0.0f, 0.0f, 0.0f}};
        const uint16_t *kb_base = sK + ((lane & 7) + (lane >> 4) * 8) * LD + ((lane >> 3) & 1) * 8;
#pragma unroll
        for (int kk = 0; kk < D / 16; kk++) {
            uint32_t kb[4];
            kc_ldsm_x4(kb, kb_base + kk * 16, false);
            const uint32_t af[4] = {qf[kk][0], 0u, qf[kk][1], 0u};
            kc_mma_16816(s[0], af, kb[0], kb[1]);
            kc_mma_16816(s[1], af, kb[2], kb[3]);
        }
        /* online softmax of row g over the tile's keys (8 n + 2 cc + e) */
        float mx = -INFINITY;
#pragma unroll
        for (int n = 0; n < 2; n++)
#pragma unroll
            for (int e = 0; e < 2; e++) {
                if (k0 + 8 * n + 2 * cc + e >= c.kv_end)
                    s[n][e] = -INFINITY;
                mx = fmaxf(mx, s[n][e]);
            }
        mx = fmaxf(mx, __shfl_xor_sync(0xFFFFFFFFu, mx, 1));
        mx = fmaxf(mx, __shfl_xor_sync(0xFFFFFFFFu, mx, 2));
        const float m_new = fmaxf(m, mx * scale_log2);
        /* NOTE: a row with every key so far masked keeps m = -inf; base 0
         * makes exp2(-inf - base) = 0 instead of NaN */
        const float base = m_new == -INFINITY ? 0.0f : m_new;
        const float corr = exp2f(m - base);
        m = m_new;
        const float p00 = exp2f(fmaf(s[0][0], scale_log2, -base)), p01 = exp2f(fmaf(s[0][1], scale_log2, -base));
        const float p10 = exp2f(fmaf(s[1][0], scale_log2, -base)), p11 = exp2f(fmaf(s[1][1], scale_log2, -base));
        l = l * corr + ((p00 + p01) + (p10 + p11));
        const uint32_t pa[4] = {kc_pack_bf16(p00, p01), 0u, kc_pack_bf16(p10, p11), 0u};
        /* O = O * corr + P V */
        const uint16_t *vb_base = sV + ((lane & 7) + ((lane >> 3) & 1) * 8) * LD + (lane >> 4) * 8;
#pragma unroll
        for (int dp = 0; dp < D / 16; dp++) {
            uint32_t vb[4];
            kc_ldsm_x4(vb, vb_base + dp * 16, true);
#pragma unroll
            for (int h = 0; h < 2; h++) {
                o[2 * dp + h][0] *= corr;
                o[2 * dp + h][1] *= corr;
                kc_mma_16816(o[2 * dp + h], pa, vb[2 * h], vb[2 * h + 1]);
            }
        }
        __syncwarp(); /* the tile is consumed before the stage is refilled */
    }
    kc_cp_wait<0>();
    l += __shfl_xor_sync(0xFFFFFFFFu, l, 1);
    l += __shfl_xor_sync(0xFFFFFFFFu, l, 2);
    __syncthreads(); /* every warp is done with its ring: it becomes the merge area */
    if (g < c.nhc) {
#pragma unroll
        for (int dn = 0; dn < D / 8; dn++) {
            red.acc[warp][g][8 * dn + 2 * cc] = o[dn][0];
            red.acc[warp][g][8 * dn + 2 * cc + 1] = o[dn][1];
        }
        if (cc == 0) {
            red.m[warp][g] = m * 0.6931471805599453f; /* natural units, as the CUDA-core bodies keep it */
            red.l[warp][g] = l;
        }
    }
    __syncthreads(); /* (a warp without keys wrote m = -inf, l = 0, acc = 0) */
    dec_cta_finish<GMAX, W>(a, c, red);
}

/* --- tensor-core body on an fp8 cache -----------------------------------------
 * The tensor-core body's plan on an e4m3 cache (kc_attn_args.kv_fp8), in
 * transposed form and with f16 operands. Every e4m3 value is an f16 and
 * one instruction converts a pair (kc_e4m3x2_f16x2), so the tiles stay fp8
 * in shared memory (a ring of DTC8_STAGES stages of K and V tiles a warp,
 * 4 KiB a stage at 128 dims: DTC8_STAGES - 1 tiles in flight) and are
 * converted in registers. Transposed: the 16 keys of a tile are the M rows
 * and the group's heads the 8 N columns, S^T = K Q^T and O^T += V^T P^T,
 * so no product spends half its rows on nothing (one QK mma a k-block
 * instead of two, half the accumulators: 4 CTAs a SM,
 * KC_ATTN_DEC_TC8_CTAS_PER_SM). P^T goes from the S^T accumulators to the
 * B operand by one movmatrix a 8 x 8 block. Bytes are read 4 at a time and
 * an mma register wants two elements adjacent in k, so the k orders are
 * permuted (a dot product does not see it):
 *  - S^T: lane (g, cc) holds dims [cc D/4, (cc + 1) D/4) of key rows
 *    sigma(g) and sigma(g + 8); word kk (dims cc D/4 + 4 kk + 0..3) gives
 *    the k pairs 2cc, 2cc + 1 and 2cc + 8, 2cc + 9 of k-block kk; Q's
 *    fragments take the same dims;
 *  - row m of S^T (and k m of O^T's product) is key sigma(m), sigma(2c + e)
 *    = 4c + e and sigma(8 + 2c + e) = 4c + 2 + e, so a lane's four P^T k
 *    entries are keys 4cc .. 4cc + 3: it reads those V rows, 4 bytes (dims
 *    32q + 4g + 0..3) each, and byte-permutes them into the A fragments of
 *    m-tiles 2q, 2q + 1, whose rows g and g + 8 are dims 32q + 4g + 2t and
 *    + 1 (t = the m-tile's parity).
 * kc_dec8_off's swizzle makes both reads conflict-free. Q is scaled by a
 * power of two per head (its largest |q| to [2^14, 2^15)) before it is
 * rounded to f16, and the score scale by the inverse, so no q overflows an
 * f16; P is rounded to f16 (the bf16 body rounds it to bf16). */
#ifndef KC_DEC8_STAGES /* -DKC_DEC8_STAGES=N: A/B builds */
#define KC_DEC8_STAGES 3
#endif
#define DTC8_STAGES KC_DEC8_STAGES

/* Dynamic shared memory of the fp8 body with W warps: per warp
 * DTC8_STAGES stages of a K and a V tile of e4m3 bytes (also the merge
 * area afterwards). */
template <int W = DEC_WARPS> static size_t dtc8_smem_bytes(int hd)
{
    const size_t tiles = (size_t)W * DTC8_STAGES * 2 * DTC_KEYS * (size_t)hd;
    return tiles > sizeof(dec_red<8, W>) ? tiles : sizeof(dec_red<8, W>);
}

/* Q fragments of the fp8 body (the B operand of S^T: column g = head
 * h0 + g, zero past the chunk): dims [cc D / 4, (cc + 1) D / 4) times 2^sh
 * as f16 pairs, qf[kk] = dims cc D / 4 + 4 kk + {0, 1}, {2, 3}; sh puts
 * the head's largest |q| in [2^14, 2^15). Returns 2^-sh. */
template <int D>
__device__ __forceinline__ float dtc8_q(const kc_attn_args &a, const dec_cta &c, int g, int cc,
                                        uint32_t (&qf)[D / 16][2])
{
    constexpr int QD = D / 4;
    float q[QD];
    if (g < c.nhc) {
        const uint16_t *qrow = a.qkv + (int64_t)c.q0 * a.qkv_stride + (int64_t)(c.h0 + g) * D + cc * QD;
#pragma unroll
        for (int i = 0; i < QD / 8; i++)
            kc_unpack8(*(const uint4 *)(qrow + 8 * i), q + 8 * i);
    } else {
#pragma unroll
        for (int i = 0; i < QD; i++)
            q[i] = 0.0f;
    }
    float mx = 0.0f;
#pragma unroll
    for (int i = 0; i < QD; i++)
        mx = fmaxf(mx, fabsf(q[i]));
    mx = fmaxf(mx, __shfl_xor_sync(0xFFFFFFFFu, mx, 1));
    mx = fmaxf(mx, __shfl_xor_sync(0xFFFFFFFFu, mx, 2));
    /* mx in [2^e, 2^(e + 1)): scale by 2^(14 - e), kept within +-64 (a
     * zero row: any scale) */
    const int e = (int)((__float_as_uint(mx) >> 23) & 0xFF) - 127;
    const int sh = max(-64, min(64, 14 - e));
    const float up = __uint_as_float((uint32_t)(127 + sh) << 23);
#pragma unroll
    for (int kk = 0; kk < D / 16; kk++) {
        qf[kk][0] = kc_pack_f16(q[4 * kk] * up, q[4 * kk + 1] * up);
        qf[kk][1] = kc_pack_f16(q[4 * kk + 2] * up, q[4 * kk + 3] * up);
    }
    return __uint_as_float((uint32_t)(127 - sh) << 23);
}

/* W warps a CTA, as the bf16 body's. */
template <int GMAX, int D, int W = DEC_WARPS>
static __global__ void __launch_bounds__(W * 32, DTC_MINB(KC_ATTN_DEC_TC8_CTAS_PER_SM, W))
    attn_decode_tc8_kernel(const kc_attn_args a)
{
    static_assert(GMAX <= 8, "the group's heads are the 8 columns of the n8 tile");
    constexpr int TILE = DTC_KEYS * D, STAGE = 2 * TILE, QD = D / 4; /* bytes */
    if (a.pdl != 2)
        kc_pdl_trigger();
    extern __shared__ uint4 dec_ring[];
    dec_red<GMAX, W> &red = *(dec_red<GMAX, W> *)dec_ring;
    dec_cta c;
    if (!dec_cta_make<GMAX>(a, c))
        return;
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, g = lane >> 2, cc = lane & 3;
    const int32_t *bt = a.block_tables + (int64_t)c.seq * a.max_blocks; /* [max_blocks] */
    uint8_t *ring = (uint8_t *)dec_ring + warp * DTC8_STAGES * STAGE; /* [DTC8_STAGES][K, V][16][D], kc_dec8_off */
    const int n_tiles = (c.kv_end - c.kv_begin + DTC_KEYS - 1) / DTC_KEYS;

    /* the warp's tiles warp + W i go to stage i % DTC8_STAGES; one commit
     * group a tile (empty past the last), so wait counts stay fixed. The
     * PDL wait comes before the first tile that may not be gathered early
     * (dec_tile_early; only the last tile holds the step's key) */
    bool waited = false;
#pragma unroll
    for (int i = 0; i < DTC8_STAGES - 1; i++) {
        const int t = warp + W * i;
        if (!waited && !(t < n_tiles && dec_tile_early(a, c, c.kv_begin + t * DTC_KEYS))) {
            kc_pdl_wait(); /* q and this step's K/V are the previous kernel's output */
            waited = true;
        }
        if (t < n_tiles)
            kc_gather_kv<D, 0, DTC_KEYS, 32, KC_TILE_DEC8, uint8_t>(a, bt, c.kvh, c.kv_begin + t * DTC_KEYS,
                                                                     c.kv_end, lane, ring + i * STAGE,
                                                                     ring + i * STAGE + TILE);
        kc_cp_commit();
    }
    if (!waited) /* every first tile was gathered early */
        kc_pdl_wait();
    uint32_t qf[D / 16][2];
    const float sc_row = a.scale * 1.4426950408889634f * dtc8_q<D>(a, c, g, cc, qf);
    /* this lane's two heads (columns 2cc + h): their score scales, states */
    float sc[2], m[2], l[2];
#pragma unroll
    for (int h = 0; h < 2; h++) {
        sc[h] = __shfl_sync(0xFFFFFFFFu, sc_row, 4 * (2 * cc + h));
        m[h] = -INFINITY;
        l[h] = 0.0f;
    }
    float o[D / 16][4]; /* O^T: m-tile mt rows g, g + 8 (dims below), columns 2cc, 2cc + 1 */
#pragma unroll
    for (int mt = 0; mt < D / 16; mt++)
        o[mt][0] = o[mt][1] = o[mt][2] = o[mt][3] = 0.0f;
    /* K rows of S^T rows g and g + 8 */
    const int r0 = 4 * (g >> 1) + (g & 1), r1 = r0 + 2;
    int i = 0;
    for (int t = warp; t < n_tiles; t += W, i++) {
        const int k0 = c.kv_begin + t * DTC_KEYS, tn = t + (DTC8_STAGES - 1) * W;
        /* NOTE: stage (i - 1) % DTC8_STAGES was read in the warp's previous
         * tile, which ended with __syncwarp, so it is free to overwrite */
        if (tn < n_tiles) {
            uint8_t *nx = ring + (i + DTC8_STAGES - 1) % DTC8_STAGES * STAGE;
            kc_gather_kv<D, 0, DTC_KEYS, 32, KC_TILE_DEC8, uint8_t>(a, bt, c.kvh, c.kv_begin + tn * DTC_KEYS,
                                                                     c.kv_end, lane, nx, nx + TILE);
        }
        kc_cp_commit();
        kc_cp_wait<DTC8_STAGES - 1>();
        __syncwarp(); /* every lane's copies of this tile have landed */
        const uint8_t *sK = ring + i % DTC8_STAGES * STAGE, *sV = sK + TILE;
        /* S^T = K Q^T over the permuted k order */
        float s[4] = {0.0f, 0.0f, 0.0f, 0.0f};
#pragma unroll
        for (int hh = 0; hh < QD / 16; hh++) {
            uint32_t k0w[4], k1w[4];
            *(uint4 *)k0w = *(const uint4 *)(sK + kc_dec8_off<D>(r0, cc * QD + 16 * hh));
            *(uint4 *)k1w = *(const uint4 *)(sK + kc_dec8_off<D>(r1, cc * QD + 16 * hh));
#pragma unroll
            for (int j = 0; j < 4; j++) {
                const int kk = 4 * hh + j;
                const uint32_t af[4] = {kc_e4m3x2_f16x2(k0w[j], 0), kc_e4m3x2_f16x2(k1w[j], 0),
                                        kc_e4m3x2_f16x2(k0w[j], 1), kc_e4m3x2_f16x2(k1w[j], 1)};
                kc_mma_16816_f16(s, af, qf[kk][0], qf[kk][1]);
            }
        }
        /* online softmax of heads 2cc, 2cc + 1 (s[h], s[2 + h]: keys
         * sigma(g), sigma(g + 8)) over the 8 lanes of the column */
        if (k0 + r0 >= c.kv_end)
            s[0] = s[1] = -INFINITY;
        if (k0 + r1 >= c.kv_end)
            s[2] = s[3] = -INFINITY;
        float p[4], corr[2];
#pragma unroll
        for (int h = 0; h < 2; h++) {
            float mx = fmaxf(s[h], s[2 + h]);
            mx = fmaxf(mx, __shfl_xor_sync(0xFFFFFFFFu, mx, 4));
            mx = fmaxf(mx, __shfl_xor_sync(0xFFFFFFFFu, mx, 8));
            mx = fmaxf(mx, __shfl_xor_sync(0xFFFFFFFFu, mx, 16));
            const float m_new = fmaxf(m[h], mx * sc[h]);
            /* NOTE: a head with every key so far masked keeps m = -inf;
             * base 0 makes exp2(-inf - base) = 0 instead of NaN */
            const float base = m_new == -INFINITY ? 0.0f : m_new;
            corr[h] = exp2f(m[h] - base);
            m[h] = m_new;
            p[h] = exp2f(fmaf(s[h], sc[h], -base));
            p[2 + h] = exp2f(fmaf(s[2 + h], sc[h], -base));
            l[h] = l[h] * corr[h] + (p[h] + p[2 + h]);
        }
        /* P^T as the B operand: rows m = keys sigma(m), column g = head g */
        const uint32_t pb0 = kc_movmatrix_trans(kc_pack_f16(p[0], p[1]));
        const uint32_t pb1 = kc_movmatrix_trans(kc_pack_f16(p[2], p[3]));
        /* O^T = O^T * corr + V^T P^T: keys 4 cc + j, dims 32 q + 4 g + 0..3 */
#pragma unroll
        for (int q = 0; q < D / 32; q++) {
            uint32_t w[4];
#pragma unroll
            for (int j = 0; j < 4; j++)
                w[j] = *(const uint32_t *)(sV + kc_dec8_off<D>(4 * cc + j, 32 * q + 4 * g));
            /* byte d of the keys' words: keys (0, 1) -> a0 / a1, (2, 3) -> a2 / a3 */
#pragma unroll
            for (int t2 = 0; t2 < 2; t2++) {
                const uint32_t sel = t2 ? 0x7362u : 0x5140u; /* dims 2 t2, 2 t2 + 1 */
                const uint32_t x01 = kc_prmt(w[0], w[1], sel), x23 = kc_prmt(w[2], w[3], sel);
                const uint32_t af[4] = {kc_e4m3x2_f16x2(x01, 0), kc_e4m3x2_f16x2(x01, 1), kc_e4m3x2_f16x2(x23, 0),
                                        kc_e4m3x2_f16x2(x23, 1)};
                float(&od)[4] = o[2 * q + t2];
                od[0] *= corr[0];
                od[1] *= corr[1];
                od[2] *= corr[0];
                od[3] *= corr[1];
                kc_mma_16816_f16(od, af, pb0, pb1);
            }
        }
        __syncwarp(); /* the tile is consumed before the stage is refilled */
    }
    kc_cp_wait<0>();
#pragma unroll
    for (int h = 0; h < 2; h++) {
        l[h] += __shfl_xor_sync(0xFFFFFFFFu, l[h], 4);
        l[h] += __shfl_xor_sync(0xFFFFFFFFu, l[h], 8);
        l[h] += __shfl_xor_sync(0xFFFFFFFFu, l[h], 16);
    }
    __syncthreads(); /* every warp is done with its ring: it becomes the merge area */
#pragma unroll
    for (int h = 0; h < 2; h++) {
        const int hd = 2 * cc + h;
        if (hd < c.nhc) {
#pragma unroll
            for (int mt = 0; mt < D / 16; mt++) {
                const int d = 32 * (mt >> 1) + 4 * g + 2 * (mt & 1); /* rows g, g + 8: dims d, d + 1 */
                red.acc[warp][hd][d] = o[mt][h];
                red.acc[warp][hd][d + 1] = o[mt][2 + h];
            }
            if (g == 0) {
                red.m[warp][hd] = m[h] * 0.6931471805599453f; /* natural units, as the CUDA-core bodies keep it */
                red.l[warp][hd] = l[h];
            }
        }
    }
    __syncthreads(); /* (a warp without keys wrote m = -inf, l = 0, acc = 0) */
    dec_cta_finish<GMAX, W>(a, c, red);
}

/* One CTA per (sequence, MERGE_HEADS heads), one warp per head:
 * combine the splits' partials (dec_merge_head). */
static __global__ void __launch_bounds__(MERGE_THREADS) attn_merge_kernel(const kc_attn_args a)
{
    kc_pdl_trigger();
    __shared__ float sm_w[MERGE_HEADS][KC_ATTN_MAX_SPLITS];
    const int seq = blockIdx.x, warp = threadIdx.x >> 5, h = blockIdx.y * MERGE_HEADS + warp;
    const int q0 = a.qsl[seq], q1 = a.qsl[seq + 1], L = a.seq_lens[seq]; /* issued together */
    if (q1 - q0 != 1 || h >= a.nh)
        return; /* warp-uniform */
    const int ns = dec_n_splits(a, L);
    const int64_t pb = ((int64_t)seq * a.nh + h) * a.max_splits;
    kc_pdl_wait(); /* the partials are the decode kernel's output */
    dec_merge_head<32>(a, q0, h, pb, ns, sm_w[warp]);
}

template <int GMAX, bool PIPE, bool F8>
static void dec_launch_g(const kcuda_state *st, const kc_attn_args *a, dim3 grid)
{
    void (*kern)(const kc_attn_args) = a->tg <= 4    ? attn_decode_kernel<GMAX, 4, PIPE, F8>
                                       : a->tg <= 8  ? attn_decode_kernel<GMAX, 8, PIPE, F8>
                                       : a->tg <= 16 ? attn_decode_kernel<GMAX, 16, PIPE, F8>
                                                     : attn_decode_kernel<GMAX, 32, PIPE, F8>;
    kc_launch(kern, grid, DEC_THREADS, PIPE ? DEC_RING_BYTES : 0, st->stream, a->pdl != 0, *a);
}

/* A tensor-core body (F8: the fp8 one) for w warps a CTA (DEC_WARPS, 8,
 * 12 or, fp8 only, 16; anything else: DEC_WARPS) at head_dim hd (64, else 128): its
 * kernel and dynamic shared memory. The one place a run-time warp count
 * becomes a template argument (launch, opt-in, kcuda_attn_dec_warps_fit). */
typedef struct {
    void (*kern)(const kc_attn_args);
    size_t smem;
} dtc_form;
template <int GMAX, bool F8, int W> static dtc_form dtc_form_w(int hd)
{
    if constexpr (F8)
        return {hd == 64 ? attn_decode_tc8_kernel<GMAX, 64, W> : attn_decode_tc8_kernel<GMAX, 128, W>,
                dtc8_smem_bytes<W>(hd)};
    else
        return {hd == 64 ? attn_decode_tc_kernel<GMAX, 64, W> : attn_decode_tc_kernel<GMAX, 128, W>,
                dtc_smem_bytes<W>(hd)};
}
template <int GMAX, bool F8> static dtc_form dtc_form_of(int w, int hd)
{
    if constexpr (F8) /* the bf16 body's registers do not fit 16 warps an SM (dtc_warps_max) */
        if (w == 16)
            return dtc_form_w<GMAX, F8, 16>(hd);
    return w == 8 ? dtc_form_w<GMAX, F8, 8>(hd) : w == 12 ? dtc_form_w<GMAX, F8, 12>(hd)
                                                          : dtc_form_w<GMAX, F8, DEC_WARPS>(hd);
}
/* The most warps a CTA of a tensor-core body: the warps an SM holds under
 * its register bound (KC_ATTN_DEC_TC8_CTAS_PER_SM or _TC_ CTAs of
 * DEC_WARPS), so a folded CTA never asks for more registers than an SM has. */
static int dtc_warps_max(bool kv_fp8)
{
    return DEC_WARPS * (kv_fp8 ? KC_ATTN_DEC_TC8_CTAS_PER_SM : KC_ATTN_DEC_TC_CTAS_PER_SM);
}
/* dtc_form_of for the cache's body (kv_fp8) chosen at run time. */
template <int GMAX> static dtc_form dtc_form_for(bool kv_fp8, int w, int hd)
{
    return kv_fp8 ? dtc_form_of<GMAX, true>(w, hd) : dtc_form_of<GMAX, false>(w, hd);
}
/* Whether form f of a body with w warps runs on a device of optin bytes of
 * shared memory a CTA: within the body's register bound and the opt-in. */
static bool dtc_form_runs(bool kv_fp8, int w, const dtc_form &f, size_t optin)
{
    return w <= dtc_warps_max(kv_fp8) && f.smem <= optin;
}

template <int GMAX>
static void dec_launch_p(const kcuda_state *st, const kc_attn_args *a, dim3 grid)
{
    if (a->kv_fp8 && !a->tc) {
        if (a->pipe)
            dec_launch_g<GMAX, true, true>(st, a, grid);
        else
            dec_launch_g<GMAX, false, true>(st, a, grid);
        return;
    }
    if constexpr (GMAX >= 4) { /* the tensor-core body takes groups of 3+ (kcuda_attn_decode_tc_supported) */
        if (a->tc) {
            const int w = a->warps > 0 ? a->warps : DEC_WARPS;
            const dtc_form f = dtc_form_for<GMAX>(a->kv_fp8, w, a->hd);
            kc_launch(f.kern, grid, (unsigned)w * 32, f.smem, st->stream, a->pdl != 0, *a);
            return;
        }
    }
    if (a->pipe)
        dec_launch_g<GMAX, true, false>(st, a, grid);
    else
        dec_launch_g<GMAX, false, false>(st, a, grid);
}

/* The pipelined kernels' ring wants the largest shared-memory carveout, so
 * KC_ATTN_DEC_CTAS_PER_SM CTAs of DEC_RING_BYTES each stay resident. */
template <int GMAX> static void dec_carveout_g(void)
{
    void (*k[8])(const kc_attn_args) = {
        attn_decode_kernel<GMAX, 4, true, false>,  attn_decode_kernel<GMAX, 8, true, false>,
        attn_decode_kernel<GMAX, 16, true, false>, attn_decode_kernel<GMAX, 32, true, false>,
        attn_decode_kernel<GMAX, 4, true, true>,   attn_decode_kernel<GMAX, 8, true, true>,
        attn_decode_kernel<GMAX, 16, true, true>,  attn_decode_kernel<GMAX, 32, true, true>};
    for (int i = 0; i < 8; i++) {
        CUDA_CHECK(cudaFuncSetAttribute(k[i], cudaFuncAttributePreferredSharedMemoryCarveout,
                                        (int)cudaSharedmemCarveoutMaxShared));
        /* the opt-in always: static shared memory beside a 48 KiB ring (or a
         * larger ring of an A/B build) needs it, and the emulator cannot
         * see a launch refused for want of it */
        CUDA_CHECK(cudaFuncSetAttribute(k[i], cudaFuncAttributeMaxDynamicSharedMemorySize, DEC_RING_BYTES));
    }
}

/* The tensor-core body's tiles pass the default 48 KiB of dynamic shared
 * memory at head_dim 128: the opt-in, and the largest carveout. */
template <class K> static void dtc_optin(K kern, size_t smem)
{
    CUDA_CHECK(cudaFuncSetAttribute(kern, cudaFuncAttributePreferredSharedMemoryCarveout,
                                    (int)cudaSharedmemCarveoutMaxShared));
    CUDA_CHECK(cudaFuncSetAttribute(kern, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)smem));
}
/* Both tensor-core bodies' opt-in for each warp count, where the device
 * has the shared memory (optin bytes; kcuda_attn_dec_warps_fit: the host
 * folds no plan into a CTA that does not fit). */
static const int dtc_warps[] = {DEC_WARPS, 8, 12, 16};
template <int GMAX> static void dtc_optin_g(size_t optin)
{
    for (int w : dtc_warps)
        for (int hd : {64, 128})
            for (bool f8 : {false, true}) {
                const dtc_form f = dtc_form_for<GMAX>(f8, w, hd);
                if (dtc_form_runs(f8, w, f, optin))
                    dtc_optin(f.kern, f.smem);
            }
}

void kcuda_attn_decode_init(const kcuda_state *st)
{
    dec_carveout_g<1>();
    dec_carveout_g<2>();
    dec_carveout_g<4>();
    dec_carveout_g<8>();
    dtc_optin_g<4>(st->smem_optin);
    dtc_optin_g<8>(st->smem_optin);
}

/* Contract: whether this device runs the tensor-core body (kv_fp8: the
 * fp8 one) with w warps a CTA (4, 8, 12, 16) at head_dim hd: its
 * registers (dtc_warps_max: bf16 up to 12, fp8 up to 16) and shared
 * memory. */
bool kcuda_attn_dec_warps_fit(const kcuda_state *st, bool kv_fp8, int hd, int w)
{
    return dtc_form_runs(kv_fp8, w, dtc_form_for<8>(kv_fp8, w, hd), st->smem_optin); /* merge area: 8 heads */
}

/* Contract: true when the tensor-core decode body handles a GQA group of
 * `group` query heads a kv head at head_dim hd (kc_attn_args.tc). */
bool kcuda_attn_decode_tc_supported(int group, int hd)
{
    return group >= 3 && (hd == 64 || hd == 128);
}

void kcuda_attn_decode_launch(const kcuda_state *st, const kc_attn_args *a)
{
    const int gmax = a->group <= 1 ? 1 : a->group <= 2 ? 2 : a->group <= 4 ? 4 : 8;
    const int hchunks = (a->group + gmax - 1) / gmax;
    dim3 grid((unsigned)a->n_seqs, (unsigned)(a->nkv * hchunks), a->part_o ? (unsigned)a->max_splits : 1u);
    switch (gmax) {
    case 1: dec_launch_p<1>(st, a, grid); break;
    case 2: dec_launch_p<2>(st, a, grid); break;
    case 4: dec_launch_p<4>(st, a, grid); break;
    default: dec_launch_p<8>(st, a, grid); break;
    }
    KCUDA_LAUNCH_CHECK();
    if (a->part_o && !a->merge_cnt) {
        kc_launch(attn_merge_kernel, dim3((unsigned)a->n_seqs, (unsigned)kcuda_cdiv(a->nh, MERGE_HEADS)), MERGE_THREADS,
                  0, st->stream,
                  a->pdl != 0, *a);
        KCUDA_LAUNCH_CHECK();
    }
}
