/* kernels/cuda/ops.cu: the memory-bound per-token ops of the CUDA
 * backend: embedding gather (whole table or one tensor-parallel shard of
 * the vocabulary), fused residual add + RMSNorm, row gather, a step's
 * input tokens taken from the previous step's sampled ones,
 * SiLU(gate) * up, and RoPE fused with the paged K/V write (and with the
 * QKV epilogue: Qwen2 q/k/v biases, Qwen3 per-head q/k RMSNorm).
 *
 * All tensors are bf16 (uint16_t storage), arithmetic is fp32. Each op has a
 * 16-byte path (8 bf16 per access) taken when the row length is a multiple of
 * 8 and the pointers are 16-byte aligned, and a scalar path otherwise, so odd
 * sizes work (tests cover both). Numerics follow the CPU twins in
 * kernels/cpu: RMSNorm computes (x * inv_rms) * w with x the bf16-rounded
 * residual; RoPE uses sinf/cosf of the fp32 product pos * inv_freq[j].
 */
#include "kernels/cuda/common.cuh"

/* Threads for a row op processing `items` items per row: a multiple of 32 in
 * [32, 1024]. */
static int row_threads(int64_t items)
{
    int64_t t = (items + 31) / 32 * 32;
    return (int)(t < 32 ? 32 : t > 1024 ? 1024 : t);
}

/* --- embedding / row gather -------------------------------------------------- */

/* out[j, :] = src[idx[j] - base, :] for rows of d bf16; an id outside
 * [0, n_src) after the offset gives a zero row (n_src < 0: only negative
 * ids do). VEC8: d % 8 == 0 and 16-byte aligned. */
template <bool VEC8>
static __global__ void gather_kernel(uint16_t *__restrict__ out, const uint16_t *__restrict__ src,
                                     const int32_t *__restrict__ idx, int64_t base, int64_t n_src, int d)
{
    kc_pdl_trigger();
    const int64_t j = blockIdx.x;
    const int64_t id = (int64_t)idx[j] - base;
    const bool ok = id >= 0 && (n_src < 0 || id < n_src);
    uint16_t *o = out + j * d;
    const uint16_t *s = src + (ok ? id : 0) * d;
    if (VEC8) {
        for (int i = threadIdx.x * 8; i < d; i += blockDim.x * 8)
            *(uint4 *)(o + i) = ok ? *(const uint4 *)(s + i) : make_uint4(0, 0, 0, 0);
    } else {
        for (int i = threadIdx.x; i < d; i += blockDim.x)
            o[i] = ok ? s[i] : (uint16_t)0;
    }
}

static void launch_gather(cudaStream_t s, uint16_t *out, const uint16_t *src, const int32_t *idx, int64_t base,
                          int64_t n_src, int r, int d)
{
    const bool vec = d % 8 == 0 && kcuda_aligned(out, 16) && kcuda_aligned(src, 16);
    if (vec)
        gather_kernel<true><<<r, row_threads(d / 8), 0, s>>>(out, src, idx, base, n_src, d);
    else
        gather_kernel<false><<<r, row_threads(d), 0, s>>>(out, src, idx, base, n_src, d);
}

/* Contract (kern_embed): out[n, table->cols] = table rows tokens[i] (bf16).
 * NOTE: a token id outside the table (a caller bug; the CPU twin aborts)
 * yields a zero row instead of a device fault. */
void kcuda_embed(kern_ctx *ctx, void *out, const int32_t *tokens, int n, const kern_weight *t)
{
    kcuda_embed_shard(ctx, out, tokens, n, t, 0);
}

/* Contract (kern_embed_shard): out[n, table->cols] = table rows tokens[i] -
 * vocab_begin (bf16), zero rows for ids outside this rank's rows. */
void kcuda_embed_shard(kern_ctx *ctx, void *out, const int32_t *tokens, int n, const kern_weight *t,
                       int64_t vocab_begin)
{
    kcuda_state *st = kcuda_st(ctx);
    INFERD_CHECK(t->dtype == KERN_DTYPE_BF16 && t->cols > 0 && t->cols <= INT32_MAX);
    if (n <= 0)
        return;
    launch_gather(st->stream, (uint16_t *)out, (const uint16_t *)t->data, tokens, vocab_begin, t->rows, n,
                  (int)t->cols);
    KCUDA_LAUNCH_CHECK();
}

/* Contract (kern_gather_rows): out[j, :] = in[idx[j], :] for j < r, rows of d
 * bf16. out must not overlap in. */
void kcuda_gather_rows(kern_ctx *ctx, void *out, const void *in, const int32_t *idx, int r, int d)
{
    kcuda_state *st = kcuda_st(ctx);
    if (r <= 0 || d <= 0)
        return;
    launch_gather(st->stream, (uint16_t *)out, (const uint16_t *)in, idx, 0, -1, r, d);
    KCUDA_LAUNCH_CHECK();
}

/* --- tokens from the previous step ------------------------------------------ */

static __global__ void tokens_from_kernel(int32_t *__restrict__ tokens, const int32_t *__restrict__ src,
                                          const int32_t *__restrict__ from, int n)
{
    const int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n && src[i] >= 0)
        tokens[i] = from[src[i]];
}

/* Contract (kern_tokens_from): tokens[i] = from[src[i]] where src[i] >= 0,
 * one thread a row. */
void kcuda_tokens_from(kern_ctx *ctx, int32_t *tokens, const int32_t *src, const int32_t *from, int n)
{
    kcuda_state *st = kcuda_st(ctx);
    tokens_from_kernel<<<(n + 255) / 256, 256, 0, st->stream>>>(tokens, src, from, n);
    KCUDA_LAUNCH_CHECK();
}

/* --- fp32 -> bf16 ---------------------------------------------------------------- */

/* VEC8: 8 values a thread (two 16-byte loads, one 16-byte store), count % 8
 * == 0 and both pointers 16-byte aligned; else one a thread. Grid-stride. */
template <bool VEC8>
static __global__ void f32_to_bf16_kernel(uint16_t *__restrict__ out, const float *__restrict__ in, size_t count)
{
    kc_pdl_trigger();
    const size_t stride = (size_t)gridDim.x * blockDim.x;
    if (VEC8) {
        for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < count / 8; i += stride) {
            const float4 a = ((const float4 *)in)[2 * i], b = ((const float4 *)in)[2 * i + 1];
            uint4 o;
            o.x = (uint32_t)kc_f2bf(a.x) | ((uint32_t)kc_f2bf(a.y) << 16);
            o.y = (uint32_t)kc_f2bf(a.z) | ((uint32_t)kc_f2bf(a.w) << 16);
            o.z = (uint32_t)kc_f2bf(b.x) | ((uint32_t)kc_f2bf(b.y) << 16);
            o.w = (uint32_t)kc_f2bf(b.z) | ((uint32_t)kc_f2bf(b.w) << 16);
            ((uint4 *)out)[i] = o;
        }
    } else {
        for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < count; i += stride)
            out[i] = kc_f2bf(in[i]);
    }
}

/* Contract (kern_f32_to_act): out[count] bf16 = in[count] rounded to
 * nearest even. */
void kcuda_f32_to_act(kern_ctx *ctx, void *out, const float *in, size_t count)
{
    kcuda_state *st = kcuda_st(ctx);
    if (count == 0)
        return;
    const bool vec = count % 8 == 0 && kcuda_aligned(out, 16) && kcuda_aligned(in, 16);
    const size_t items = vec ? count / 8 : count;
    const size_t want = (items + 255) / 256, cap = (size_t)st->n_sms * 8;
    const unsigned blocks = (unsigned)(want < cap ? want : cap);
    if (vec)
        f32_to_bf16_kernel<true><<<blocks, 256, 0, st->stream>>>((uint16_t *)out, in, count);
    else
        f32_to_bf16_kernel<false><<<blocks, 256, 0, st->stream>>>((uint16_t *)out, in, count);
    KCUDA_LAUNCH_CHECK();
}

/* --- fused residual add + RMSNorm ---------------------------------------------- */

/* One block per row. Pass 1: resid = bf16(resid + add), sum of squares of the
 * rounded values. Pass 2: out = bf16((resid * inv) * w). Each thread touches
 * the same elements in both passes, so out may alias add or resid. */
struct add_rmsnorm_args {
    uint16_t *out, *resid;
    const uint16_t *add, *w;
    int d;
    float eps;
};

template <bool VEC8> static __global__ void add_rmsnorm_kernel(const add_rmsnorm_args p)
{
    kc_pdl_trigger();
    kc_pdl_wait(); /* a programmatic dependent (kcuda_ops_pdl): its inputs are the last kernel's */
    uint16_t *out = p.out, *resid = p.resid;
    const uint16_t *add = p.add, *__restrict__ w = p.w;
    const int d = p.d;
    const float eps = p.eps;
    __shared__ float red[33];
    const int64_t row = blockIdx.x;
    uint16_t *r = resid + row * d;            /* [d] */
    const uint16_t *a = add ? add + row * d : NULL;
    uint16_t *o = out + row * d;
    float ss = 0.0f;
    if (VEC8) {
        for (int i = threadIdx.x * 8; i < d; i += blockDim.x * 8) {
            float x[8];
            kc_unpack8(*(const uint4 *)(r + i), x);
            if (a) {
                float y[8];
                kc_unpack8(*(const uint4 *)(a + i), y);
#pragma unroll
                for (int e = 0; e < 8; e++)
                    x[e] += y[e];
                uint4 pk = kc_pack8(x);
                *(uint4 *)(r + i) = pk;
                kc_unpack8(pk, x);
            }
#pragma unroll
            for (int e = 0; e < 8; e++)
                ss += x[e] * x[e];
        }
    } else {
        for (int i = threadIdx.x; i < d; i += blockDim.x) {
            float x = kc_bf2f(r[i]);
            if (a) {
                uint16_t v = kc_f2bf(x + kc_bf2f(a[i]));
                r[i] = v;
                x = kc_bf2f(v);
            }
            ss += x * x;
        }
    }
    const float tot = kc_block_sum(ss, red);
    const float inv = kc_inv_rms(tot, d, eps);
    if (VEC8) {
        for (int i = threadIdx.x * 8; i < d; i += blockDim.x * 8) {
            float x[8], g[8];
            kc_unpack8(*(const uint4 *)(r + i), x);
            kc_unpack8(*(const uint4 *)(w + i), g);
#pragma unroll
            for (int e = 0; e < 8; e++)
                x[e] = (x[e] * inv) * g[e];
            *(uint4 *)(o + i) = kc_pack8(x);
        }
    } else {
        for (int i = threadIdx.x; i < d; i += blockDim.x)
            o[i] = kc_f2bf((kc_bf2f(r[i]) * inv) * kc_bf2f(w[i]));
    }
}

/* One block per row; the 16-byte path when every row start is 16-byte aligned. */
static void launch_add_rmsnorm(cudaStream_t s, bool pdl, uint16_t *out, uint16_t *resid, const uint16_t *add,
                               const uint16_t *w, int n, int d, float eps)
{
    const bool vec = d % 8 == 0 && kcuda_aligned(out, 16) && kcuda_aligned(resid, 16) && kcuda_aligned(add, 16) &&
                     kcuda_aligned(w, 16);
    const add_rmsnorm_args a = {out, resid, add, w, d, eps};
    if (vec)
        kc_launch(add_rmsnorm_kernel<true>, dim3(n), row_threads(d / 8), 0, s, pdl, a);
    else
        kc_launch(add_rmsnorm_kernel<false>, dim3(n), row_threads(d), 0, s, pdl, a);
}

/* Contract (kern_add_rmsnorm): per row, resid = bf16(resid + add) when add is
 * not NULL, then out = bf16((resid * rsqrt(mean(resid^2) + eps)) * w). out
 * may alias add or resid. */
void kcuda_add_rmsnorm(kern_ctx *ctx, void *out, void *resid, const void *add, const kern_weight *w,
                       int n, float eps)
{
    kcuda_state *st = kcuda_st(ctx);
    INFERD_CHECK(w->dtype == KERN_DTYPE_BF16 && w->rows == 1 && w->cols > 0 && w->cols <= INT32_MAX);
    if (n <= 0)
        return;
    launch_add_rmsnorm(st->stream, kcuda_ops_pdl(ctx, n), (uint16_t *)out, (uint16_t *)resid, (const uint16_t *)add,
                       (const uint16_t *)w->data, n, (int)w->cols, eps);
    KCUDA_LAUNCH_CHECK();
}

/* --- SiLU(gate) * up ---------------------------------------------------------- */

/* out[n, f] = silu(gu[:, :f]) * gu[:, f:]; VEC8 handles 8 columns per item. */
struct silu_mul_args {
    uint16_t *out;
    const uint16_t *gu;
    int64_t n;
    int f;
};

template <bool VEC8> static __global__ void silu_mul_kernel(const silu_mul_args p)
{
    kc_pdl_trigger();
    kc_pdl_wait(); /* a programmatic dependent (kcuda_ops_pdl): its inputs are the last kernel's */
    uint16_t *__restrict__ out = p.out;
    const uint16_t *__restrict__ gu = p.gu;
    const int64_t n = p.n;
    const int f = p.f;
    const int per = VEC8 ? 8 : 1;
    const int64_t items_per_row = f / per;
    const int64_t total = n * items_per_row;
    for (int64_t it = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; it < total;
         it += (int64_t)gridDim.x * blockDim.x) {
        const int64_t row = it / items_per_row;
        const int64_t col = (it - row * items_per_row) * per;
        const uint16_t *g = gu + row * 2 * f + col;
        uint16_t *o = out + row * f + col;
        if (VEC8) {
            float a[8], b[8];
            kc_unpack8(*(const uint4 *)g, a);
            kc_unpack8(*(const uint4 *)(g + f), b);
#pragma unroll
            for (int e = 0; e < 8; e++)
                a[e] = kc_silu_mul(a[e], b[e]);
            *(uint4 *)o = kc_pack8(a);
        } else {
            o[0] = kc_f2bf(kc_silu_mul(kc_bf2f(g[0]), kc_bf2f(g[f])));
        }
    }
}

/* Grid-stride over n * f (or n * f / 8) items, at most 16 blocks per SM. */
static void launch_silu_mul(const kcuda_state *st, bool pdl, uint16_t *out, const uint16_t *gate_up, int n, int f)
{
    const bool vec = f % 8 == 0 && kcuda_aligned(out, 16) && kcuda_aligned(gate_up, 16);
    const int64_t items = (int64_t)n * (vec ? f / 8 : f);
    unsigned grid = kcuda_cdiv(items, 256);
    if (grid > (unsigned)st->n_sms * 16u)
        grid = (unsigned)st->n_sms * 16u;
    const silu_mul_args a = {out, gate_up, n, f};
    if (vec)
        kc_launch(silu_mul_kernel<true>, dim3(grid), 256, 0, st->stream, pdl, a);
    else
        kc_launch(silu_mul_kernel<false>, dim3(grid), 256, 0, st->stream, pdl, a);
}

/* Contract (kern_silu_mul): out[n, f] = bf16(silu(g) * u), g = gate_up[:, :f],
 * u = gate_up[:, f:], silu(g) = g / (1 + exp(-g)) in fp32. */
void kcuda_silu_mul(kern_ctx *ctx, void *out, const void *gate_up, int n, int f)
{
    kcuda_state *st = kcuda_st(ctx);
    if (n <= 0 || f <= 0)
        return;
    launch_silu_mul(st, kcuda_ops_pdl(ctx, n), (uint16_t *)out, (const uint16_t *)gate_up, n, f);
    KCUDA_LAUNCH_CHECK();
}

/* --- SiLU * up after a folded norm -------------------------------------------------- */

/* One piece of a bf16 row at p: 8 values (one 16-byte load) when VEC8,
 * else 1 (in .x); and its squares added to ss in element order. */
template <bool VEC8> __device__ __forceinline__ uint4 row_piece(const uint16_t *p)
{
    if (VEC8)
        return *(const uint4 *)p;
    return make_uint4(*p, 0, 0, 0);
}
template <bool VEC8> __device__ __forceinline__ float row_piece_sq(uint4 b, float ss)
{
    if (VEC8) {
        float v[8];
        kc_unpack8(b, v);
#pragma unroll
        for (int e = 0; e < 8; e++)
            ss += v[e] * v[e];
        return ss;
    }
    const float v = kc_bf2f((uint16_t)b.x);
    return ss + v * v;
}

/* This thread's share of the sum of the squares of row x[d] (bf16), pieces
 * of row_piece: its first ROW_SQ_BATCH loads are issued together (one L2
 * round trip, not one an iteration: each is predicated, not branched
 * around), the rest one at a time. The order of the additions is that of
 * the plain loop over the pieces. */
#define ROW_SQ_BATCH 4
template <bool VEC8> __device__ __forceinline__ float row_sq_part(const uint16_t *x, int d)
{
    const int per = VEC8 ? 8 : 1, step = (int)blockDim.x * per, i0 = (int)threadIdx.x * per;
    uint4 b[ROW_SQ_BATCH];
#pragma unroll
    for (int k = 0; k < ROW_SQ_BATCH; k++)
        b[k] = i0 + k * step < d ? row_piece<VEC8>(x + i0 + k * step) : make_uint4(0, 0, 0, 0);
    float ss = 0.0f;
#pragma unroll
    for (int k = 0; k < ROW_SQ_BATCH; k++)
        ss = row_piece_sq<VEC8>(b[k], ss);
    for (int i = i0 + ROW_SQ_BATCH * step; i < d; i += step)
        ss = row_piece_sq<VEC8>(row_piece<VEC8>(x + i), ss);
    return ss;
}

/* 1 / rms of row x[d] from every thread's row_sq_part, summed by the whole
 * block (red: 33 floats of shared memory). Every thread gets it. */
__device__ __forceinline__ float row_inv_rms_of(float part, int d, float eps, float *red)
{
    return kc_inv_rms(kc_block_sum(part, red), d, eps);
}

/* out[n, f] = bf16(silu(bf16(g r)) * bf16(u r)), r = 1 / rms of the token's
 * row of x: block (row, part) takes items [part * per_part, + per_part) of
 * its row (8 columns an item with VEC8) after the block has summed the
 * row's squares (each part reads the row from L2; the sum's order depends
 * on d and the block size alone, not on the grid). Grid (row, part). */
struct silu_rms_args {
    uint16_t *out;
    const uint16_t *gu, *x;
    int f, d, per_part;
    float eps;
};

/* One item (8 columns with VEC8, else 1) of silu_mul_rms_kernel from its
 * loaded gate and up values. */
template <bool VEC8> struct silu_item {
    uint4 g, u;
    __device__ __forceinline__ void load(const uint16_t *gr, int f, int col)
    {
        g = row_piece<VEC8>(gr + col);
        u = row_piece<VEC8>(gr + f + col);
    }
    __device__ __forceinline__ void store(uint16_t *o, int col, float r) const
    {
        if (VEC8) {
            float a[8], b[8];
            kc_unpack8(g, a);
            kc_unpack8(u, b);
#pragma unroll
            for (int e = 0; e < 8; e++)
                a[e] = kc_silu_mul(kc_bf2f(kc_f2bf(a[e] * r)), kc_bf2f(kc_f2bf(b[e] * r)));
            *(uint4 *)(o + col) = kc_pack8(a);
        } else {
            o[col] = kc_f2bf(kc_silu_mul(kc_bf2f(kc_f2bf(kc_bf2f((uint16_t)g.x) * r)),
                                         kc_bf2f(kc_f2bf(kc_bf2f((uint16_t)u.x) * r))));
        }
    }
};

/* The thread's first item is loaded with its share of x's row, before the
 * block's sum, so the kernel's two reads from the L2 take one round trip. */
template <bool VEC8, bool XVEC> static __global__ void silu_mul_rms_kernel(const silu_rms_args p)
{
    kc_pdl_trigger();
    kc_pdl_wait(); /* a programmatic dependent (kcuda_ops_pdl): its inputs are the last kernel's */
    __shared__ float red[33];
    const int64_t row = blockIdx.x;
    const int f = p.f, per = VEC8 ? 8 : 1;
    const int items = f / per, i0 = (int)blockIdx.y * p.per_part, i1 = min(items, i0 + p.per_part);
    const uint16_t *g = p.gu + row * 2 * f; /* [2f] */
    uint16_t *o = p.out + row * f;          /* [f] */
    int it = i0 + (int)threadIdx.x;
    silu_item<VEC8> v = {};
    if (it < i1)
        v.load(g, f, it * per);
    const float r = row_inv_rms_of(row_sq_part<XVEC>(p.x + row * p.d, p.d), p.d, p.eps, red);
    while (it < i1) {
        v.store(o, it * per, r);
        if ((it += blockDim.x) < i1)
            v.load(g, f, it * per);
    }
}

/* Contract (kern_silu_mul_rms): kcuda_silu_mul of bf16(g r), bf16(u r), r =
 * kc_inv_rms of the token's row of x. Parts a row so that the grid holds
 * about four blocks an SM (at least one, at most one per 256 items). */
void kcuda_silu_mul_rms(kern_ctx *ctx, void *out, const void *gate_up, int n, int f, const void *x, int d, float eps)
{
    kcuda_state *st = kcuda_st(ctx);
    const bool vec = f % 8 == 0 && kcuda_aligned(out, 16) && kcuda_aligned(gate_up, 16);
    const bool xvec = d % 8 == 0 && kcuda_aligned(x, 16);
    const int items = vec ? f / 8 : f;
    const int64_t want = kcuda_cdiv(4 * (int64_t)st->n_sms, n), most = kcuda_cdiv(items, 256);
    const int parts = (int)(want < 1 ? 1 : want > most ? most : want);
    const silu_rms_args a = {(uint16_t *)out, (const uint16_t *)gate_up, (const uint16_t *)x, f, d,
                             (int)kcuda_cdiv(items, parts), eps};
    const dim3 grid((unsigned)n, (unsigned)parts);
    const bool pdl = kcuda_ops_pdl(ctx, n);
    if (vec && xvec)
        kc_launch(silu_mul_rms_kernel<true, true>, grid, 256, 0, st->stream, pdl, a);
    else if (vec)
        kc_launch(silu_mul_rms_kernel<true, false>, grid, 256, 0, st->stream, pdl, a);
    else if (xvec)
        kc_launch(silu_mul_rms_kernel<false, true>, grid, 256, 0, st->stream, pdl, a);
    else
        kc_launch(silu_mul_rms_kernel<false, false>, grid, 256, 0, st->stream, pdl, a);
    KCUDA_LAUNCH_CHECK();
}

/* --- RoPE + paged K/V write ------------------------------------------------------ */

/* The epilogue's device pointers (kern_qkv_epilogue's weights), NULL = none. */
struct rope_epi {
    const uint16_t *bias;    /* [(nh + 2 nkv) * hd] q | k | v biases */
    const uint16_t *qn, *kn; /* [hd] per-head RMSNorm weights of q and k heads */
    float eps;
    const uint16_t *rx;      /* [n_tokens, rd]: a folded norm's input rows (kern_qkv_epilogue.rms_x), or NULL */
    int rd;
    bool rvec;               /* rx rows 16-byte aligned, rd % 8 == 0 */
};

#define ROPE_HEADS 4 /* warps of a rope_kv_kernel block, one head at a time each */
#define ROPE_TOKEN_BLOCK_N 128 /* a folded norm's batches from this many tokens: one block a token */

/* One block per (token, hpb heads), one warp per head, ROPE_HEADS warps
 * (hpb = ROPE_HEADS: a block per token alone ran 11.4 us for 16 tokens on
 * an H100: 16 blocks, each thread a serial chain of 20 load-store round
 * trips; but after a folded norm each block sums its token's squares, so
 * batches of ROPE_TOKEN_BLOCK_N tokens and more take all heads a block,
 * the warps looping over them: the sum once a token). The block's threads first
 * put cos/sin of pos * inv_freq[j] (times mscale) in shared memory (and,
 * after a folded norm, sum the squares of the token's input row: r; the
 * row's loads, and an L1 prefetch of each warp's first head, go out before
 * the sines, so the block's L2 round trips overlap); then each warp, for
 * its head: bf16(bf16(x r) + bias), each step where it applies, on each
 * value as it is loaded (in place first for a head with q/k norms, whose
 * sum needs the whole head), the values stored back; a v head
 * is copied to the cache slot (if any); a q or k head with q/k norms sums
 * the squares of its bf16 values (inv_rms), then its pairs (j, j + half)
 * are rotated in place (a normed head's values are bf16((x * inv_rms) * w)
 * first, the bf16 tensor HF's Qwen3RMSNorm hands to RoPE), and a k head's
 * go to the cache slot too (the bf16 values stored back into qkv; with
 * kv_fp8 their e4m3 codes). The arithmetic of every value is that of the
 * block-per-token form. */
struct rope_kv_args {
    kern_rope_kv_params p;
    rope_epi e;
    int hpb; /* heads a block, a multiple of ROPE_HEADS */
};

/* N (1, 2 or 4) adjacent bf16 values at p (N-element aligned) in one access. */
template <int N> __device__ __forceinline__ void rope_ld(const uint16_t *p, uint16_t (&x)[N])
{
    static_assert(N == 1 || N == 2 || N == 4, "accesses of 1, 2 or 4 values");
    if constexpr (N == 1) {
        x[0] = *p;
    } else if constexpr (N == 2) {
        const uint32_t u = *reinterpret_cast<const uint32_t *>(p);
        x[0] = (uint16_t)(u & 0xFFFFu), x[1] = (uint16_t)(u >> 16);
    } else {
        const uint2 u = *reinterpret_cast<const uint2 *>(p);
        x[0] = (uint16_t)(u.x & 0xFFFFu), x[1] = (uint16_t)(u.x >> 16);
        x[2] = (uint16_t)(u.y & 0xFFFFu), x[3] = (uint16_t)(u.y >> 16);
    }
}
/* ... and stored there, as rope_ld reads them. */
template <int N> __device__ __forceinline__ void rope_st(uint16_t *p, const uint16_t (&x)[N])
{
    static_assert(N == 1 || N == 2 || N == 4, "accesses of 1, 2 or 4 values");
    if constexpr (N == 1)
        *p = x[0];
    else if constexpr (N == 2)
        *reinterpret_cast<uint32_t *>(p) = (uint32_t)x[0] | ((uint32_t)x[1] << 16);
    else
        *reinterpret_cast<uint2 *>(p) = make_uint2((uint32_t)x[0] | ((uint32_t)x[1] << 16),
                                                   (uint32_t)x[2] | ((uint32_t)x[3] << 16));
}

/* The epilogue of value x (bf16) at element i of a head: bf16(bf16(x rs) +
 * bias[i]), each step where it applies (rope_epi: a folded norm's scale,
 * a bias). */
__device__ __forceinline__ uint16_t rope_epi_val(const rope_epi &e, uint16_t x, const uint16_t *bias, int i, float rs)
{
    float y = kc_bf2f(x);
    if (e.rx)
        y = kc_bf2f(kc_f2bf(y * rs));
    if (bias)
        y += kc_bf2f(bias[i]);
    return kc_f2bf(y);
}

/* Head h of token t (one warp, lane): rs the token's folded-norm scale (1
 * without), cs / sn its cos and sin; see rope_kv_kernel. */
template <int P>
__device__ __forceinline__ void rope_head(const kern_rope_kv_params &p, const rope_epi &e, int64_t t, int h, int lane,
                                          const float *cs, const float *sn, float rs)
{
    const int hd = p.head_dim, half = hd / 2, nh = p.n_heads, nkv = p.n_kv_heads;
    uint16_t *v = (uint16_t *)p.qkv + (t * (int64_t)(nh + 2 * nkv) + h) * hd; /* this head's [hd] */
    const bool epi = e.bias || e.rx;
    const uint16_t *bias = e.bias ? e.bias + (int64_t)h * hd : NULL; /* [hd] */
    if (epi && e.qn) { /* a normed head's sum needs the whole head: the epilogue in place first */
        for (int i = lane; i < hd; i += 32)
            v[i] = rope_epi_val(e, v[i], bias, i, rs);
        __syncwarp();
    }
    const bool epi_now = epi && !e.qn; /* else the epilogue is applied to each value as it is loaded */
    const int64_t slot = p.slot_mapping[t];
    const int64_t blk = slot >= 0 ? slot / p.block_size : 0, off = slot >= 0 ? slot % p.block_size : 0;
    if (h >= nh + nkv) { /* a v head: to the cache as it is (after the epilogue) */
        const int64_t dst = slot >= 0 ? ((blk * nkv + (h - nh - nkv)) * p.block_size + off) * hd : -1;
        if (dst < 0 && !epi_now)
            return;
        constexpr int VC = P == 2 ? 4 : 1;
        for (int i = VC * lane; i < hd; i += 32 * VC) {
            uint16_t x[VC];
            rope_ld<VC>(v + i, x);
            if (epi_now) {
#pragma unroll
                for (int q = 0; q < VC; q++)
                    x[q] = rope_epi_val(e, x[q], bias, i + q, rs);
                rope_st<VC>(v + i, x);
            }
            if (dst >= 0) {
#pragma unroll
                for (int q = 0; q < VC; q++)
                    kc_kv_store(p.v_cache, dst + i + q, x[q], p.kv_fp8);
            }
        }
        return;
    }
    float r = 1.0f;
    if (e.qn) {
        float ss = 0.0f;
        for (int j = lane; j < hd; j += 32) {
            const float a = kc_bf2f(v[j]);
            ss += a * a;
        }
        ss = kc_warp_sum(ss);
        r = kc_inv_rms(ss, hd, e.eps);
        __syncwarp(); /* every lane read the head before any lane writes it */
    }
    const int64_t kdst = h >= nh && slot >= 0 ? ((blk * nkv + (h - nh)) * p.block_size + off) * hd : -1;
    for (int j = P * lane; j < half; j += 32 * P) {
        uint16_t a1[P], a2[P], o1[P], o2[P];
        rope_ld<P>(v + j, a1);
        rope_ld<P>(v + j + half, a2);
#pragma unroll
        for (int q = 0; q < P; q++) {
            if (epi_now) {
                a1[q] = rope_epi_val(e, a1[q], bias, j + q, rs);
                a2[q] = rope_epi_val(e, a2[q], bias, j + q + half, rs);
            }
            float x1 = kc_bf2f(a1[q]), x2 = kc_bf2f(a2[q]);
            if (e.qn) {
                const uint16_t *w = h < nh ? e.qn : e.kn;
                x1 = kc_bf2f(kc_f2bf((x1 * r) * kc_bf2f(w[j + q])));
                x2 = kc_bf2f(kc_f2bf((x2 * r) * kc_bf2f(w[j + q + half])));
            }
            kc_rope_rotate(x1, x2, cs[j + q], sn[j + q], &o1[q], &o2[q]);
        }
        rope_st<P>(v + j, o1);
        rope_st<P>(v + j + half, o2);
        if (kdst >= 0) {
#pragma unroll
            for (int q = 0; q < P; q++) {
                kc_kv_store(p.k_cache, kdst + j + q, o1[q], p.kv_fp8);
                kc_kv_store(p.k_cache, kdst + j + q + half, o2[q], p.kv_fp8);
            }
        }
    }
}

/* P: adjacent elements of each half a lane rotates (2 when head_dim % 8 ==
 * 0 and the rows and caches are 16-byte aligned, else 1), and 2 P of a v
 * head it copies (1 when P = 1): a 128-dim head is then one load-store
 * round trip a lane instead of two (a v head one instead of four). The same
 * arithmetic per element either way. */
template <int P> static __global__ void rope_kv_kernel(const rope_kv_args ra)
{
    kc_pdl_trigger();
    kc_pdl_wait(); /* a programmatic dependent (kcuda_ops_pdl): its inputs are the last kernel's */
    const kern_rope_kv_params &p = ra.p;
    const rope_epi &e = ra.e;
    extern __shared__ float rope_sm[]; /* cs[half], sn[half] */
    const int half = p.head_dim / 2;
    float *cs = rope_sm, *sn = rope_sm + half;
    const int64_t t = blockIdx.x;
    const int lane = threadIdx.x & 31, h1 = min(p.n_heads + 2 * p.n_kv_heads, ((int)blockIdx.y + 1) * ra.hpb);
    const int h0 = (int)blockIdx.y * ra.hpb + (int)(threadIdx.x >> 5); /* the warp's first head */
    if (h0 < h1 && lane * 128 < p.head_dim * 2) /* its lines, read after the sum below */
        kc_prefetch_l1((const char *)p.qkv + ((t * (p.n_heads + 2 * p.n_kv_heads) + h0) * p.head_dim) * 2 + lane * 128);
    /* a folded norm's input row: its loads go out with the position's, before the sines */
    const uint16_t *rx = e.rx ? e.rx + t * e.rd : NULL; /* [rd] */
    const float part = !rx ? 0.0f : e.rvec ? row_sq_part<true>(rx, e.rd) : row_sq_part<false>(rx, e.rd);
    const float pos = (float)p.positions[t];
    const float ms = p.mscale != 0.0f ? p.mscale : 1.0f; /* YaRN attention factor; 0 = unset */
    for (int j = threadIdx.x; j < half; j += blockDim.x) {
        const float angle = pos * p.inv_freq[j];
        cs[j] = cosf(angle) * ms;
        sn[j] = sinf(angle) * ms;
    }
    __shared__ float red[33];
    const float rs = !rx ? 1.0f : row_inv_rms_of(part, e.rd, e.eps, red);
    __syncthreads();
    for (int h = h0; h < h1; h += ROPE_HEADS) /* warp-uniform */
        rope_head<P>(p, e, t, h, lane, cs, sn, rs);
}

static void launch_rope_kv(cudaStream_t s, bool pdl, const kern_rope_kv_params *p, const rope_epi *e)
{
    const size_t smem = (size_t)p->head_dim * sizeof(float);
    const int heads = p->n_heads + 2 * p->n_kv_heads;
    const int hpb = e->rx && p->n_tokens >= ROPE_TOKEN_BLOCK_N ? (int)kcuda_cdiv(heads, ROPE_HEADS) * ROPE_HEADS
                                                                 : ROPE_HEADS;
    const dim3 grid((unsigned)p->n_tokens, kcuda_cdiv(heads, hpb));
    const rope_kv_args a = {*p, *e, hpb};
    const bool v2 = p->head_dim % 8 == 0 && kcuda_aligned(p->qkv, 16) && kcuda_aligned(p->k_cache, 16) &&
                    kcuda_aligned(p->v_cache, 16);
    kc_launch(v2 ? rope_kv_kernel<2> : rope_kv_kernel<1>, grid, ROPE_HEADS * 32, smem, s, pdl, a);
}

/* Contract (kern_rope_kv_write_ex): the epilogue first when e is not NULL
 * (row = bf16(bf16(row * r) + qkv_bias), r the inverse RMS of the token's
 * rms_x row where given, each step where it applies; q / k heads bf16((x * rsqrt(mean(x^2) + eps))
 * * w) with q_norm / k_norm), then HF rotate_half RoPE in place on the q and
 * k heads of each token's qkv row (bf16; cos and sin times mscale, 0 = 1),
 * then, for slot_mapping >= 0, the
 * roped k heads and the v heads stored at cache slot s = block * block_size +
 * offset, head h at ((block * n_kv_heads + h) * block_size + offset) *
 * head_dim. */
void kcuda_rope_kv_write(kern_ctx *ctx, const kern_rope_kv_params *p, const kern_qkv_epilogue *e)
{
    kcuda_state *st = kcuda_st(ctx);
    INFERD_CHECK(p->head_dim > 0 && p->head_dim % 2 == 0 && p->head_dim <= KERN_CUDA_ROPE_MAX_HEAD_DIM &&
          p->block_size > 0 && p->n_heads > 0 && p->n_kv_heads > 0);
    rope_epi de = {NULL, NULL, NULL, 0.0f, NULL, 0, false};
    if (e) {
        INFERD_CHECK((!e->qkv_bias || e->qkv_bias->dtype == KERN_DTYPE_BF16) &&
                     (!e->q_norm || (e->q_norm->dtype == KERN_DTYPE_BF16 && e->k_norm->dtype == KERN_DTYPE_BF16)));
        de.bias = e->qkv_bias ? (const uint16_t *)e->qkv_bias->data : NULL;
        de.qn = e->q_norm ? (const uint16_t *)e->q_norm->data : NULL;
        de.kn = e->k_norm ? (const uint16_t *)e->k_norm->data : NULL;
        de.eps = e->norm_eps;
        de.rx = (const uint16_t *)e->rms_x;
        de.rd = e->rms_cols;
        de.rvec = e->rms_cols % 8 == 0 && kcuda_aligned(e->rms_x, 16);
    }
    if (p->n_tokens <= 0)
        return;
    launch_rope_kv(st->stream, kcuda_ops_pdl(ctx, p->n_tokens), p, &de);
    KCUDA_LAUNCH_CHECK();
}
