/* kernels/cuda/attention_prefill.cu: paged causal attention for sequences
 * with several new tokens (prefill and chunked prefill), GQA, earlier
 * context read through the block table.
 *
 * Flash-attention structure on CUDA cores (correctness first; a tensor-core
 * version is later work): one CTA of 128 threads per (sequence, query head,
 * tile of 32 query rows). The CTA walks the keys in tiles of 32 up to the
 * last position its rows may see; each tile of K and V is gathered from the
 * paged cache into shared memory as fp32, scores S = (scale * Q) K^T are
 * computed by 4 threads per query row (8 keys each), the causal mask
 * (key position <= query position) applied, and the online softmax (fp32
 * running max and sum per row) rescales the output accumulator, which lives
 * in shared memory: thread (row r, lane c4) owns dims [4 c4 + 16 k, +4) of
 * row r, the same thread that holds row r's softmax state, so only the K/V
 * tiles need block-wide barriers.
 *
 * Shared memory: Q, K, V and O tiles of 32 x (hd + 4) floats plus the
 * 32 x 33 probabilities; 72 KB at hd = 128, 137 KB at hd = 256 (opt-in).
 * Row padding by 4 floats keeps 16-byte alignment and spreads the 8 rows a
 * warp touches over distinct banks.
 */
#include "kernels/cuda/attention.cuh"

#define PF_BQ KERN_CUDA_PREFILL_BQ /* tile sizes and shared memory: kern_limits.h */
#define PF_BK KERN_CUDA_PREFILL_BK
#define PF_THREADS 128

static size_t pf_smem_bytes(int hd)
{
    return kern_cuda_prefill_smem_bytes(hd);
}

/* Tile geometry of one CTA, identical in all its threads. */
typedef struct {
    int q0, qstart, nrows; /* first token row of the sequence, tile start, valid rows */
    int pos0, kv_end;      /* position of tile row 0; keys [0, kv_end) */
    int h, kvh, hd, ld;
} pf_tile;

__device__ __forceinline__ void pf_store8(float *dst, const float *x)
{
    float4 *d = (float4 *)dst;
    d[0] = make_float4(x[0], x[1], x[2], x[3]);
    d[1] = make_float4(x[4], x[5], x[6], x[7]);
}

/* Q tile (scaled; zero rows past the sequence's queries) and O tile = 0. */
__device__ void pf_load_q(const kc_attn_args &a, const pf_tile &t, float *Qs, float *Os)
{
    const int chunks = t.hd / 8;
    for (int i = threadIdx.x; i < PF_BQ * chunks; i += PF_THREADS) {
        const int rr = i / chunks, ch = i - rr * chunks;
        float x[8] = {0, 0, 0, 0, 0, 0, 0, 0};
        if (rr < t.nrows) {
            const uint16_t *src =
                a.qkv + (int64_t)(t.q0 + t.qstart + rr) * a.qkv_stride + (int64_t)t.h * t.hd + ch * 8;
            kc_unpack8(*(const uint4 *)src, x);
#pragma unroll
            for (int e = 0; e < 8; e++)
                x[e] *= a.scale;
        }
        pf_store8(Qs + rr * t.ld + ch * 8, x);
        const float z[8] = {0, 0, 0, 0, 0, 0, 0, 0};
        pf_store8(Os + rr * t.ld + ch * 8, z);
    }
}

/* Keys/values [kt, kt + BK) of kv head t.kvh from the paged cache into Ks/Vs
 * as fp32; rows at or past kv_end are zero (never read from the cache). */
__device__ void pf_load_kv(const kc_attn_args &a, const pf_tile &t, const int32_t *bt, int kt, float *Ks,
                           float *Vs)
{
    const int chunks = t.hd / 8;
    for (int i = threadIdx.x; i < PF_BK * chunks; i += PF_THREADS) {
        const int c = i / chunks, ch = i - c * chunks;
        const int p = kt + c;
        float kx[8] = {0, 0, 0, 0, 0, 0, 0, 0}, vx[8] = {0, 0, 0, 0, 0, 0, 0, 0};
        if (p < t.kv_end) {
            const int bi = p / a.bs;
            const int64_t blk = bt[bi];
            const int64_t base = ((blk * a.nkv + t.kvh) * a.bs + (p - bi * a.bs)) * t.hd + ch * 8;
            kc_unpack8(__ldg((const uint4 *)(a.k_cache + base)), kx);
            kc_unpack8(__ldg((const uint4 *)(a.v_cache + base)), vx);
        }
        pf_store8(Ks + c * t.ld + ch * 8, kx);
        pf_store8(Vs + c * t.ld + ch * 8, vx);
    }
}

/* Thread (row r, lane c4): scores of row r against keys c4 + 4 i of the tile,
 * causal mask, online-softmax update of (m, l); writes the row's
 * probabilities to Ps and returns the rescale factor of the old state. */
__device__ float pf_softmax_step(const pf_tile &t, const float *Qs, const float *Ks, float *Ps, int kt, int r,
                                 int c4, float &m, float &l)
{
    float s[8] = {0, 0, 0, 0, 0, 0, 0, 0};
    const float *qr = Qs + r * t.ld;
    for (int d = 0; d < t.hd; d += 4) {
        const float4 qv = *(const float4 *)(qr + d);
#pragma unroll
        for (int i = 0; i < 8; i++) {
            const float4 kv = *(const float4 *)(Ks + (c4 + 4 * i) * t.ld + d);
            s[i] += qv.x * kv.x + qv.y * kv.y + qv.z * kv.z + qv.w * kv.w;
        }
    }
    const int qpos = t.pos0 + r;
    float mx = -INFINITY;
#pragma unroll
    for (int i = 0; i < 8; i++) {
        if (r >= t.nrows || kt + c4 + 4 * i > qpos)
            s[i] = -INFINITY;
        mx = fmaxf(mx, s[i]);
    }
    mx = fmaxf(mx, __shfl_xor_sync(0xFFFFFFFFu, mx, 1));
    mx = fmaxf(mx, __shfl_xor_sync(0xFFFFFFFFu, mx, 2));
    const float m_new = fmaxf(m, mx);
    const float corr = kc_exp_diff(m, m_new);
    float rs = 0.0f;
#pragma unroll
    for (int i = 0; i < 8; i++) {
        const float p = s[i] == -INFINITY ? 0.0f : expf(s[i] - m_new);
        Ps[r * (PF_BK + 1) + c4 + 4 * i] = p;
        rs += p;
    }
    rs += __shfl_xor_sync(0xFFFFFFFFu, rs, 1);
    rs += __shfl_xor_sync(0xFFFFFFFFu, rs, 2);
    l = l * corr + rs;
    m = m_new;
    return corr;
}

/* O[r, dims of c4] = O * corr + P[r, :] V. */
__device__ void pf_update_o(const pf_tile &t, const float *Ps, const float *Vs, float *Os, int r, int c4,
                            float corr)
{
    const float *pr = Ps + r * (PF_BK + 1);
    for (int d = 4 * c4; d < t.hd; d += 16) {
        float4 o = *(float4 *)(Os + r * t.ld + d);
        o.x *= corr;
        o.y *= corr;
        o.z *= corr;
        o.w *= corr;
#pragma unroll 8
        for (int j = 0; j < PF_BK; j++) {
            const float p = pr[j];
            const float4 v = *(const float4 *)(Vs + j * t.ld + d);
            o.x += p * v.x;
            o.y += p * v.y;
            o.z += p * v.z;
            o.w += p * v.w;
        }
        *(float4 *)(Os + r * t.ld + d) = o;
    }
}

static __global__ void __launch_bounds__(PF_THREADS) attn_prefill_kernel(const kc_attn_args a)
{
    extern __shared__ float4 pf_sm4[];
    const int seq = blockIdx.x;
    pf_tile t;
    t.q0 = a.qsl[seq];
    const int q_len = a.qsl[seq + 1] - t.q0;
    if (q_len <= 1)
        return; /* decode sequences go to the decode kernel */
    t.qstart = blockIdx.z * PF_BQ;
    if (t.qstart >= q_len)
        return;
    t.nrows = min(PF_BQ, q_len - t.qstart);
    t.pos0 = a.seq_lens[seq] - q_len + t.qstart;
    t.kv_end = t.pos0 + t.nrows;
    t.h = blockIdx.y;
    t.kvh = t.h / a.group;
    t.hd = a.hd;
    t.ld = a.hd + 4;
    float *Qs = (float *)pf_sm4;       /* [BQ][ld] */
    float *Ks = Qs + PF_BQ * t.ld;     /* [BK][ld] */
    float *Vs = Ks + PF_BK * t.ld;     /* [BK][ld] */
    float *Os = Vs + PF_BK * t.ld;     /* [BQ][ld] */
    float *Ps = Os + PF_BQ * t.ld;     /* [BQ][BK + 1] */
    const int r = threadIdx.x >> 2, c4 = threadIdx.x & 3;
    const int32_t *bt = a.block_tables + (int64_t)seq * a.max_blocks;

    pf_load_q(a, t, Qs, Os);
    float m = -INFINITY, l = 0.0f;
    for (int kt = 0; kt < t.kv_end; kt += PF_BK) {
        __syncthreads(); /* previous tile consumed (Q/O initialized on the first) */
        pf_load_kv(a, t, bt, kt, Ks, Vs);
        __syncthreads();
        const float corr = pf_softmax_step(t, Qs, Ks, Ps, kt, r, c4, m, l);
        __syncwarp(); /* row r's probabilities come from the 4 lanes of this warp */
        pf_update_o(t, Ps, Vs, Os, r, c4, corr);
    }
    if (r >= t.nrows)
        return;
    const float inv = l > 0.0f ? 1.0f / l : 0.0f;
    uint16_t *orow = a.out + (int64_t)(t.q0 + t.qstart + r) * a.out_stride + (int64_t)t.h * t.hd;
    for (int d = 4 * c4; d < t.hd; d += 16) {
        const float4 o = *(const float4 *)(Os + r * t.ld + d);
        orow[d] = kc_f2bf(o.x * inv);
        orow[d + 1] = kc_f2bf(o.y * inv);
        orow[d + 2] = kc_f2bf(o.z * inv);
        orow[d + 3] = kc_f2bf(o.w * inv);
    }
}

void kcuda_attn_prefill_launch(const kcuda_state *st, const kc_attn_args *a, int max_q_len)
{
    const size_t smem = pf_smem_bytes(a->hd);
    INFERD_CHECK_MSG(smem <= st->smem_optin, "prefill attention tile exceeds the device's shared memory");
    if (smem > 48 * 1024)
        CUDA_CHECK(cudaFuncSetAttribute(attn_prefill_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)smem));
    dim3 grid((unsigned)a->n_seqs, (unsigned)a->nh, kcuda_cdiv(max_q_len, PF_BQ));
    attn_prefill_kernel<<<grid, PF_THREADS, smem, st->stream>>>(*a);
    KCUDA_LAUNCH_CHECK();
}
