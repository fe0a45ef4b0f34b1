/* kernels/cuda/attention_decode.cu: paged decode attention (one query token
 * per sequence) with optional split-KV and a log-sum-exp merge.
 *
 * One CTA of 4 warps per (sequence, kv head, head chunk, split). A CTA covers
 * up to GMAX query heads of the kv head's GQA group (GMAX = 1, 2, 4 or 8;
 * larger groups use several head chunks), so every K/V row read from the
 * cache serves the whole group. Inside a warp, a key is handled by a group of
 * `tg` lanes, each lane holding 8 consecutive dims (one 16-byte load of K and
 * one of V); 32 / tg keys per warp step, 2 steps unrolled for loads in
 * flight. Each lane keeps its own online-softmax state (max, sum, 8 output
 * dims per head) over the keys it saw; states are merged across lane groups
 * with shuffles, then across warps through shared memory, all in fp32.
 *
 * Split-KV (planned on the host, attention.cu): split s of a sequence of
 * length L covers keys [s * chunk, min(L, (s + 1) * chunk)); its normalized
 * partial output and log-sum-exp go to the workspace, and the merge kernel
 * combines the splits: out = sum_s exp(lse_s - M) o_s / sum_s exp(lse_s - M).
 * Without a split the CTA writes bf16 output directly.
 */
#include "kernels/cuda/attention.cuh"

#define DEC_WARPS 4
#define DEC_THREADS (DEC_WARPS * 32)
#define DEC_UNROLL 2

/* Splits of a sequence of length L under the plan (>= 1, <= max_splits). */
__device__ __forceinline__ int dec_n_splits(const kc_attn_args &a, int L)
{
    if (!a.part_o)
        return 1;
    int n = (L + a.chunk - 1) / a.chunk;
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

/* What one decode CTA works on, identical in all its threads. */
typedef struct {
    int seq, q0, kvh, h0, nhc;  /* sequence, its token row, kv head, first head, heads here */
    int split, kv_begin, kv_end;
    int tg, sub, grp, tpw;      /* lanes per key, this lane's dims / key slot, keys per warp step */
    bool dim_ok;                /* this lane's 8 dims exist (sub * 8 < hd) */
} dec_cta;

/* Online softmax over keys [kv_begin, kv_end): this lane's state over the
 * keys of its slot, for GMAX heads (8 dims each). */
template <int GMAX>
__device__ __forceinline__ void dec_fold_keys(const kc_attn_args &a, const dec_cta &c, const float (&q)[GMAX][8],
                                              float (&m)[GMAX], float (&l)[GMAX], float (&acc)[GMAX][8])
{
    const int32_t *bt = a.block_tables + (int64_t)c.seq * a.max_blocks;
    const int warp = threadIdx.x >> 5, step = DEC_WARPS * c.tpw * DEC_UNROLL;
    /* NOTE: the loop bound is warp-uniform (tb), so all 32 lanes reach the
     * shuffles; lanes past kv_end carry ok = false. */
    for (int tb = c.kv_begin + warp * c.tpw * DEC_UNROLL; tb < c.kv_end; tb += step) {
        float k[DEC_UNROLL][8], v[DEC_UNROLL][8];
        bool ok[DEC_UNROLL];
#pragma unroll
        for (int u = 0; u < DEC_UNROLL; u++) {
            const int t = tb + u * c.tpw + c.grp;
            ok[u] = t < c.kv_end;
            if (ok[u] && c.dim_ok) {
                const int bi = t / a.bs;
                const int64_t blk = bt[bi];
                const int64_t base = ((blk * a.nkv + c.kvh) * a.bs + (t - bi * a.bs)) * a.hd + c.sub * 8;
                kc_unpack8(__ldg((const uint4 *)(a.k_cache + base)), k[u]);
                kc_unpack8(__ldg((const uint4 *)(a.v_cache + base)), v[u]);
            } else {
#pragma unroll
                for (int e = 0; e < 8; e++)
                    k[u][e] = v[u][e] = 0.0f;
            }
        }
#pragma unroll
        for (int u = 0; u < DEC_UNROLL; u++) {
#pragma unroll
            for (int g = 0; g < GMAX; g++) {
                float s = 0.0f;
#pragma unroll
                for (int e = 0; e < 8; e++)
                    s += q[g][e] * k[u][e];
                for (int o = c.tg >> 1; o > 0; o >>= 1)
                    s += __shfl_xor_sync(0xFFFFFFFFu, s, o);
                if (ok[u]) {
                    const float mx = fmaxf(m[g], s);
                    const float corr = kc_exp_diff(m[g], mx);
                    const float p = expf(s - mx);
                    l[g] = l[g] * corr + p;
#pragma unroll
                    for (int e = 0; e < 8; e++)
                        acc[g][e] = acc[g][e] * corr + p * v[u][e];
                    m[g] = mx;
                }
            }
        }
    }
}

template <int GMAX>
static __global__ void __launch_bounds__(DEC_THREADS) attn_decode_kernel(const kc_attn_args a)
{
    __shared__ float sm_acc[DEC_WARPS][GMAX][KC_ATTN_MAX_HD];
    __shared__ float sm_m[DEC_WARPS][GMAX], sm_l[DEC_WARPS][GMAX];
    dec_cta c;
    c.seq = blockIdx.x;
    c.q0 = a.qsl[c.seq];
    if (a.qsl[c.seq + 1] - c.q0 != 1)
        return; /* not a decode sequence: the prefill kernel owns it */
    const int hchunks = (a.group + GMAX - 1) / GMAX;
    c.kvh = blockIdx.y / hchunks;
    const int hc = blockIdx.y - c.kvh * hchunks;
    c.h0 = c.kvh * a.group + hc * GMAX;
    c.nhc = min(GMAX, a.group - hc * GMAX);
    const int L = a.seq_lens[c.seq];
    c.split = blockIdx.z;
    if (c.split >= dec_n_splits(a, L))
        return;
    c.kv_begin = a.part_o ? c.split * a.chunk : 0;
    c.kv_end = a.part_o ? min(L, c.kv_begin + a.chunk) : L;
    const int hd = a.hd, lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    c.tg = a.tg;
    c.sub = lane & (c.tg - 1);
    c.grp = lane / c.tg;
    c.tpw = 32 / c.tg;
    c.dim_ok = c.sub * 8 < hd;

    float q[GMAX][8], acc[GMAX][8], m[GMAX], l[GMAX];
    const uint16_t *qrow = a.qkv + (int64_t)c.q0 * a.qkv_stride + (int64_t)c.h0 * hd + c.sub * 8;
#pragma unroll
    for (int g = 0; g < GMAX; g++) {
        m[g] = -INFINITY;
        l[g] = 0.0f;
#pragma unroll
        for (int e = 0; e < 8; e++)
            acc[g][e] = q[g][e] = 0.0f;
        if (g < c.nhc && c.dim_ok) {
            kc_unpack8(*(const uint4 *)(qrow + (int64_t)g * hd), q[g]);
#pragma unroll
            for (int e = 0; e < 8; e++)
                q[g][e] *= a.scale;
        }
    }
    dec_fold_keys<GMAX>(a, c, q, m, l, acc);
    for (int o = c.tg; o < 32; o <<= 1)
        dec_merge_lanes<GMAX>(m, l, acc, o);
    if (c.grp == 0) {
#pragma unroll
        for (int g = 0; g < GMAX; g++) {
            if (c.dim_ok) {
#pragma unroll
                for (int e = 0; e < 8; e++)
                    sm_acc[warp][g][c.sub * 8 + e] = acc[g][e];
            }
            if (c.sub == 0) {
                sm_m[warp][g] = m[g];
                sm_l[warp][g] = l[g];
            }
        }
    }
    __syncthreads();
    /* across warps; then the bf16 output (no split) or the split's partial */
    for (int idx = threadIdx.x; idx < c.nhc * hd; idx += DEC_THREADS) {
        const int g = idx / hd, d = idx - g * hd;
        float mx = -INFINITY;
#pragma unroll
        for (int w = 0; w < DEC_WARPS; w++)
            mx = fmaxf(mx, sm_m[w][g]);
        float sum = 0.0f, o = 0.0f;
#pragma unroll
        for (int w = 0; w < DEC_WARPS; w++) {
            const float f = kc_exp_diff(sm_m[w][g], mx);
            sum += sm_l[w][g] * f;
            o += sm_acc[w][g][d] * f;
        }
        const int h = c.h0 + g;
        const float res = sum > 0.0f ? o / sum : 0.0f;
        if (!a.part_o) {
            a.out[(int64_t)c.q0 * a.out_stride + (int64_t)h * hd + d] = kc_f2bf(res);
        } else {
            const int64_t pi = ((int64_t)c.seq * a.nh + h) * a.max_splits + c.split;
            a.part_o[pi * hd + d] = res;
            if (d == 0)
                a.part_lse[pi] = sum > 0.0f ? mx + logf(sum) : -INFINITY;
        }
    }
}

/* One block per (sequence, head): combine the splits' partials. */
static __global__ void attn_merge_kernel(const kc_attn_args a)
{
    const int seq = blockIdx.x, h = blockIdx.y;
    const int q0 = a.qsl[seq];
    if (a.qsl[seq + 1] - q0 != 1)
        return;
    const int ns = dec_n_splits(a, a.seq_lens[seq]);
    const int64_t pb = ((int64_t)seq * a.nh + h) * a.max_splits;
    float mx = -INFINITY;
    for (int s = 0; s < ns; s++)
        mx = fmaxf(mx, a.part_lse[pb + s]);
    for (int d = threadIdx.x; d < a.hd; d += blockDim.x) {
        float wsum = 0.0f, o = 0.0f;
        for (int s = 0; s < ns; s++) {
            const float w = kc_exp_diff(a.part_lse[pb + s], mx);
            wsum += w;
            o += w * a.part_o[(pb + s) * a.hd + d];
        }
        a.out[(int64_t)q0 * a.out_stride + (int64_t)h * a.hd + d] = kc_f2bf(wsum > 0.0f ? o / wsum : 0.0f);
    }
}

void kcuda_attn_decode_launch(const kcuda_state *st, const kc_attn_args *a)
{
    const int gmax = a->group <= 1 ? 1 : a->group <= 2 ? 2 : a->group <= 4 ? 4 : 8;
    const int hchunks = (a->group + gmax - 1) / gmax;
    dim3 grid((unsigned)a->n_seqs, (unsigned)(a->nkv * hchunks), a->part_o ? (unsigned)a->max_splits : 1u);
    switch (gmax) {
    case 1: attn_decode_kernel<1><<<grid, DEC_THREADS, 0, st->stream>>>(*a); break;
    case 2: attn_decode_kernel<2><<<grid, DEC_THREADS, 0, st->stream>>>(*a); break;
    case 4: attn_decode_kernel<4><<<grid, DEC_THREADS, 0, st->stream>>>(*a); break;
    default: attn_decode_kernel<8><<<grid, DEC_THREADS, 0, st->stream>>>(*a); break;
    }
    KCUDA_LAUNCH_CHECK();
    if (a->part_o) {
        const int threads = (a->hd + 31) / 32 * 32;
        attn_merge_kernel<<<dim3((unsigned)a->n_seqs, (unsigned)a->nh), threads, 0, st->stream>>>(*a);
        KCUDA_LAUNCH_CHECK();
    }
}
