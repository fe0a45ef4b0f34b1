/* kernels/cuda/sample.cu: token sampling on the GPU, the twin of
 * kernels/cpu/sample.c (read its step list first: this file reproduces
 * steps 1-8 in the same order, with the same fp32 / fp64 formulas).
 *
 * One CTA of 1024 threads per row, no workspace. The CPU sorts every
 * candidate by (w desc, id asc); here the order is materialized lazily:
 *  - every candidate gets a unique 64-bit key, (ordered bits of z) << 32 |
 *    ~id, whose descending order is (z desc, id asc). w = exp(z - m) is
 *    monotone in z, so this is the CPU's order (see NOTE below);
 *  - radix select (8-bit digits over the key, histograms in shared memory)
 *    finds the key at any rank in a few passes over the row;
 *  - the sorted order is walked in chunks of KC_SMP_CAP ranks: a chunk is
 *    gathered by key range into shared memory and bitonic-sorted, and thread
 *    0 accumulates the fp64 running sums sequentially in sorted order, as
 *    the CPU does, for the top-p cut and the final draw.
 * Totals over more than one chunk (the top-p total over top-k candidates,
 * the draw's total S) are fp64 sums in a fixed parallel order
 * (deterministic, but not the CPU's sequential order); totals within the
 * first chunk are sequential. So the GPU and CPU pick the same token unless
 * u lands within rounding of a CDF boundary, as the CPU file states; with
 * top-k <= KC_SMP_CAP every sum is in the CPU's order.
 *
 * NOTE: two distinct z can give the same fp64 w only when |z - m| is below
 * ~2^-29 relative or w is subnormal; the CPU then orders them by id and this
 * file by z. Negligible, and documented rather than paid for.
 *
 * Rows without truncation (step 4' of sample.c: top-k off or >= the
 * candidate count, top-p >= 1, min-p <= 0) need no order: they are drawn in
 * id order by smp_draw_id_order (one contiguous id segment per thread, a
 * fixed-order scan of the segment sums, one thread walks one segment).
 *
 * Cost: greedy rows one pass; rows without truncation a max pass, one sum
 * pass and a walk of ceil(vocab / 1024) ids (plus a count pass when
 * 0 < top-k < vocab); truncating rows a max pass, a count pass, one sum
 * pass, ~5 select/gather passes and one 2048-key sort for the first chunk.
 * Flat distributions walk further there (tests use them; real logits
 * rarely do).
 */
#include <limits.h>

#include "kernels/cuda/common.cuh"

#define KC_SMP_THREADS 1024
#define KC_SMP_WARPS (KC_SMP_THREADS / 32)
#define KC_SMP_CAP 2048 /* ranks per chunk (power of 2) */
static_assert(KC_SMP_THREADS == KERN_CUDA_SAMPLE_THREADS, "kern_check_model's vocab limit assumes this block size");

typedef struct {
    uint64_t keys[KC_SMP_CAP]; /* current chunk, sorted descending */
    double w[KC_SMP_CAP];      /* weights of keys[] */
    unsigned hist[256];
    double dred[KC_SMP_WARPS];
    float fred[KC_SMP_WARPS];
    int ired[KC_SMP_WARPS];
    int iidx[KC_SMP_WARPS];
    uint64_t sel_key;
    int sel_digit, sel_rem, sel_cnt;
    int counter;
    int walk_res;
    double bcast_d;
    int bcast_i;
    float bcast_f;
} smp_shared;

/* Per-row values, identical in every thread. */
typedef struct {
    const float *x; /* [vocab] logits */
    int vocab;
    float temp, m;  /* temperature, max of z */
    int n;          /* candidates */
    int res_base, res_count; /* resident chunk (res_count < 0: none) */
} smp_row;

__device__ __forceinline__ float smp_z(const smp_row &rw, int i)
{
    float z = rw.x[i] / rw.temp;
    return z == 0.0f ? 0.0f : z; /* -0 and +0 are one value (equal w) */
}

/* Step 3's "w > 0" without an exp in the common case. */
__device__ __forceinline__ bool smp_cand(const smp_row &rw, float z)
{
    if (isnan(z))
        return false;
    if (z == rw.m)
        return true;
    const double d = (double)z - (double)rw.m;
    if (d > -700.0)
        return true;
    if (d < -746.0)
        return false;
    return exp(d) > 0.0;
}

__device__ __forceinline__ double smp_w(const smp_row &rw, float z)
{
    return z == rw.m ? 1.0 : exp((double)z - (double)rw.m);
}

__device__ __forceinline__ uint64_t smp_key(float z, int id)
{
    const uint32_t b = __float_as_uint(z);
    const uint32_t ord = (b & 0x80000000u) ? ~b : (b | 0x80000000u);
    return ((uint64_t)ord << 32) | (uint64_t)(~(uint32_t)id);
}

__device__ __forceinline__ float smp_key_z(uint64_t key)
{
    const uint32_t ord = (uint32_t)(key >> 32);
    return __uint_as_float((ord & 0x80000000u) ? (ord & 0x7FFFFFFFu) : ~ord);
}

__device__ __forceinline__ int32_t smp_key_id(uint64_t key)
{
    return (int32_t)(~(uint32_t)key);
}

/* --- block reductions (fixed order: deterministic) ------------------------------ */

/* Block-wide reduction in a fixed order (warp shuffles, then thread 0 folds
 * the warp partials in warp order), so results are deterministic. red:
 * [KC_SMP_WARPS] scratch; bcast: the broadcast slot; every thread returns
 * the result. */
template <typename T, typename Op>
__device__ T smp_block_reduce(T v, T *red, T *bcast, T init, Op op)
{
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    for (int o = 16; o > 0; o >>= 1)
        v = op(v, __shfl_down_sync(0xFFFFFFFFu, v, o));
    if (lane == 0)
        red[warp] = v;
    __syncthreads();
    if (threadIdx.x == 0) {
        T t = init;
        for (int w = 0; w < KC_SMP_WARPS; w++)
            t = op(t, red[w]);
        *bcast = t;
    }
    __syncthreads();
    const T r = *bcast;
    __syncthreads();
    return r;
}

struct smp_add {
    template <typename T> __device__ T operator()(T a, T b) const { return a + b; }
};
struct smp_fmax {
    __device__ float operator()(float a, float b) const { return fmaxf(a, b); }
};
struct smp_imin {
    __device__ int operator()(int a, int b) const { return min(a, b); }
};
struct smp_imax {
    __device__ int operator()(int a, int b) const { return max(a, b); }
};

__device__ double smp_sum_d(smp_shared &S, double v)
{
    return smp_block_reduce(v, S.dred, &S.bcast_d, 0.0, smp_add());
}

__device__ int smp_sum_i(smp_shared &S, int v)
{
    return smp_block_reduce(v, S.ired, &S.bcast_i, 0, smp_add());
}

__device__ float smp_max_f(smp_shared &S, float v)
{
    return smp_block_reduce(v, S.fred, &S.bcast_f, -INFINITY, smp_fmax());
}

/* Step 1: lowest id of a maximal logit; NaN never wins; all-NaN gives 0. */
__device__ int32_t smp_argmax(smp_shared &S, const float *x, int vocab)
{
    float bv = -INFINITY;
    int bi = INT_MAX;
    for (int i = threadIdx.x; i < vocab; i += KC_SMP_THREADS) {
        const float v = x[i];
        if (v > bv || (v == bv && i < bi)) {
            bv = v;
            bi = i;
        }
    }
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    for (int o = 16; o > 0; o >>= 1) {
        const float ov = __shfl_down_sync(0xFFFFFFFFu, bv, o);
        const int oi = __shfl_down_sync(0xFFFFFFFFu, bi, o);
        if (ov > bv || (ov == bv && oi < bi)) {
            bv = ov;
            bi = oi;
        }
    }
    if (lane == 0) {
        S.fred[warp] = bv;
        S.iidx[warp] = bi;
    }
    __syncthreads();
    if (threadIdx.x == 0) {
        float v = -INFINITY;
        int b = INT_MAX;
        for (int w = 0; w < KC_SMP_WARPS; w++) {
            if (S.fred[w] > v || (S.fred[w] == v && S.iidx[w] < b)) {
                v = S.fred[w];
                b = S.iidx[w];
            }
        }
        S.bcast_i = b == INT_MAX ? 0 : b;
    }
    __syncthreads();
    const int32_t r = S.bcast_i;
    __syncthreads();
    return r;
}

/* --- radix select ------------------------------------------------------------------- */

/* Key of the candidate at 0-based rank `rank` (< rw.n) in descending order. */
__device__ uint64_t smp_select(smp_shared &S, const smp_row &rw, int rank)
{
    uint64_t prefix = 0, mask = 0;
    int rem = rank;
    for (int shift = 56; shift >= 0; shift -= 8) {
        for (int b = threadIdx.x; b < 256; b += KC_SMP_THREADS)
            S.hist[b] = 0;
        __syncthreads();
        for (int i = threadIdx.x; i < rw.vocab; i += KC_SMP_THREADS) {
            const float z = smp_z(rw, i);
            if (!smp_cand(rw, z))
                continue;
            const uint64_t key = smp_key(z, i);
            if ((key & mask) == prefix)
                atomicAdd(&S.hist[(key >> shift) & 255], 1u);
        }
        __syncthreads();
        if (threadIdx.x == 0) {
            int cum = 0, b = 255;
            for (; b > 0; b--) {
                const int c = (int)S.hist[b];
                if (rem < cum + c)
                    break;
                cum += c;
            }
            S.sel_digit = b;
            S.sel_rem = rem - cum;
            S.sel_cnt = (int)S.hist[b];
        }
        __syncthreads();
        const int b = S.sel_digit, cnt = S.sel_cnt;
        rem = S.sel_rem;
        prefix |= (uint64_t)b << shift;
        mask |= (uint64_t)0xFF << shift;
        if (cnt == 1 && shift > 0) {
            /* one key left under this prefix: fetch it in one more pass */
            for (int i = threadIdx.x; i < rw.vocab; i += KC_SMP_THREADS) {
                const float z = smp_z(rw, i);
                if (smp_cand(rw, z) && (smp_key(z, i) & mask) == prefix)
                    S.sel_key = smp_key(z, i);
            }
            __syncthreads();
            const uint64_t key = S.sel_key;
            __syncthreads();
            return key;
        }
    }
    return prefix;
}

/* --- chunks of the sorted order -------------------------------------------------- */

/* Bitonic sort of S.keys[0..p) descending, p a power of 2. */
__device__ void smp_sort_desc(smp_shared &S, int p)
{
    for (int k = 2; k <= p; k <<= 1) {
        for (int j = k >> 1; j > 0; j >>= 1) {
            for (int i = threadIdx.x; i < p; i += KC_SMP_THREADS) {
                const int ixj = i ^ j;
                if (ixj > i) {
                    const uint64_t a = S.keys[i], b = S.keys[ixj];
                    const bool desc = (i & k) == 0;
                    if (desc ? a < b : a > b) {
                        S.keys[i] = b;
                        S.keys[ixj] = a;
                    }
                }
            }
            __syncthreads();
        }
    }
}

/* Make ranks [base, base + count) resident, sorted, with weights; hi is the
 * largest key the chunk may hold (the previous chunk's last key - 1). */
__device__ void smp_load_chunk(smp_shared &S, smp_row &rw, int base, uint64_t hi)
{
    const int count = min(KC_SMP_CAP, rw.n - base);
    const uint64_t lo = base + count >= rw.n ? 0 : smp_select(S, rw, base + count - 1);
    if (threadIdx.x == 0)
        S.counter = 0;
    __syncthreads();
    for (int i = threadIdx.x; i < rw.vocab; i += KC_SMP_THREADS) {
        const float z = smp_z(rw, i);
        if (!smp_cand(rw, z))
            continue;
        const uint64_t key = smp_key(z, i);
        if (key >= lo && key <= hi) {
            const int pos = atomicAdd(&S.counter, 1);
            if (pos < KC_SMP_CAP)
                S.keys[pos] = key;
        }
    }
    __syncthreads();
    int p = 1;
    while (p < count)
        p <<= 1;
    for (int j = count + threadIdx.x; j < p; j += KC_SMP_THREADS)
        S.keys[j] = 0; /* below every candidate key (ord > 0) */
    __syncthreads();
    smp_sort_desc(S, p);
    for (int j = threadIdx.x; j < count; j += KC_SMP_THREADS)
        S.w[j] = smp_w(rw, smp_key_z(S.keys[j]));
    __syncthreads();
    rw.res_base = base;
    rw.res_count = count;
}

/* First rank r < limit whose running sum of w (sorted order, fp64,
 * sequential) is > target (strict) or >= target; -1 if none. */
__device__ int smp_walk(smp_shared &S, smp_row &rw, int limit, double target, bool strict)
{
    double cum = 0.0; /* thread 0's */
    int base = 0;
    uint64_t hi = ~(uint64_t)0;
    for (;;) {
        if (rw.res_count < 0 || rw.res_base != base)
            smp_load_chunk(S, rw, base, hi);
        if (threadIdx.x == 0) {
            int found = -1;
            const int end = min(rw.res_count, limit - base);
            for (int j = 0; j < end; j++) {
                cum += S.w[j];
                if (strict ? cum > target : cum >= target) {
                    found = base + j;
                    break;
                }
            }
            S.walk_res = found;
        }
        __syncthreads();
        const int found = S.walk_res;
        if (found >= 0 || base + rw.res_count >= limit) {
            __syncthreads();
            return found;
        }
        hi = S.keys[rw.res_count - 1] - 1;
        __syncthreads();
        base += rw.res_count;
    }
}

/* sum_{rank < limit} w in sorted order: sequential inside the first chunk,
 * fixed-order parallel beyond it. */
__device__ double smp_sum_top(smp_shared &S, smp_row &rw, int limit)
{
    if (limit <= min(KC_SMP_CAP, rw.n)) {
        if (rw.res_count < 0 || rw.res_base != 0)
            smp_load_chunk(S, rw, 0, ~(uint64_t)0);
        if (threadIdx.x == 0) {
            double t = 0.0;
            for (int j = 0; j < limit; j++)
                t += S.w[j];
            S.bcast_d = t;
        }
        __syncthreads();
        const double r = S.bcast_d;
        __syncthreads();
        return r;
    }
    const uint64_t lo = limit >= rw.n ? 0 : smp_select(S, rw, limit - 1);
    double acc = 0.0;
    for (int i = threadIdx.x; i < rw.vocab; i += KC_SMP_THREADS) {
        const float z = smp_z(rw, i);
        if (smp_cand(rw, z) && smp_key(z, i) >= lo)
            acc += smp_w(rw, z);
    }
    return smp_sum_d(S, acc);
}

__device__ uint64_t smp_key_at(smp_shared &S, smp_row &rw, int rank)
{
    if (rw.res_count >= 0 && rank >= rw.res_base && rank < rw.res_base + rw.res_count)
        return S.keys[rank - rw.res_base];
    return smp_select(S, rw, rank);
}

/* --- step 4': no truncation, draw in id order ---------------------------------- */

/* Step 3's w for token i, 0 when dropped (the CPU's token_weight). */
__device__ __forceinline__ double smp_w_id(const smp_row &rw, int i)
{
    const float z = smp_z(rw, i);
    return isnan(z) ? 0.0 : smp_w(rw, z);
}

/* Exclusive prefix sums of the threads' v in thread order: sequential
 * within each warp (its lane 0), then over the warp totals (thread 0);
 * thread t gets warp_prefix + lane_prefix, so the prefixes never decrease
 * with t. *total = the sum of all. Uses S.w[0..KC_SMP_THREADS) as scratch
 * (no chunk is resident on this path). */
static_assert(KC_SMP_THREADS <= KC_SMP_CAP && KC_SMP_THREADS % 32 == 0, "smp_scan_excl's scratch");
__device__ double smp_scan_excl(smp_shared &S, double v, double *total)
{
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    S.w[threadIdx.x] = v;
    __syncthreads();
    if (lane == 0) {
        double e = 0.0;
        for (int l = 0; l < 32; l++) {
            const double t = S.w[threadIdx.x + l];
            S.w[threadIdx.x + l] = e;
            e += t;
        }
        S.dred[warp] = e;
    }
    __syncthreads();
    if (threadIdx.x == 0) {
        double e = 0.0;
        for (int w = 0; w < KC_SMP_WARPS; w++) {
            const double t = S.dred[w];
            S.dred[w] = e;
            e += t;
        }
        S.bcast_d = e;
    }
    __syncthreads();
    const double r = S.dred[warp] + S.w[threadIdx.x];
    *total = S.bcast_d;
    __syncthreads();
    return r;
}

/* Step 4' (sample.c): every candidate kept, drawn in id order. Thread t owns
 * the ids [t * seg, (t + 1) * seg), seg = ceil(vocab / 1024), and sums its
 * w sequentially (s_t); e_t = the exclusive scan of the s_t, S = their
 * total (the CPU sums all ids sequentially: same token unless u lands
 * within rounding of a CDF boundary). The running sum at id i of segment t
 * is e_t + (sequential sum of the segment's w up to i), whose largest value
 * e_t + s_t needs no walk: the token lies in the lowest segment with s_t > 0
 * and e_t + s_t > u * S, and only its thread walks. Requiring w > 0 at the
 * hit keeps dropped tokens out even where rounding makes e_t exceed the
 * previous segment's last running sum. */
__device__ int32_t smp_draw_id_order(smp_shared &S, const smp_row &rw, const kern_sample_params &prm)
{
    const int seg = (rw.vocab + KC_SMP_THREADS - 1) / KC_SMP_THREADS;
    const int lo = min(rw.vocab, (int)threadIdx.x * seg), hi = min(rw.vocab, lo + seg);
    double s = 0.0;
    int last = -1;
    for (int i = lo; i < hi; i++) {
        const double w = smp_w_id(rw, i);
        if (w > 0.0) {
            s += w;
            last = i;
        }
    }
    double total;
    const double e = smp_scan_excl(S, s, &total);
    const double target = rng_uniform(prm.seed, prm.counter) * total;
    const bool has = s > 0.0 && e + s > target;
    const int owner =
        smp_block_reduce(has ? (int)threadIdx.x : INT_MAX, S.ired, &S.bcast_i, INT_MAX, smp_imin());
    if (owner == INT_MAX) /* rounding left none: the highest id with w > 0 */
        return smp_block_reduce(last, S.ired, &S.bcast_i, -1, smp_imax());
    if ((int)threadIdx.x == owner) {
        double cum = 0.0;
        int tok = last;
        for (int i = lo; i < hi; i++) {
            const double w = smp_w_id(rw, i);
            if (w > 0.0) {
                cum += w;
                if (e + cum > target) {
                    tok = i;
                    break;
                }
            }
        }
        S.walk_res = tok;
    }
    __syncthreads();
    const int32_t tok = S.walk_res;
    __syncthreads();
    return tok;
}

/* Steps 2-8 for one row whose temperature is > 0. */
__device__ int32_t smp_sample_row(smp_shared &S, const float *x, int vocab, const kern_sample_params &prm)
{
    smp_row rw;
    rw.x = x;
    rw.vocab = vocab;
    rw.temp = prm.temperature;
    rw.m = -INFINITY;
    rw.res_base = 0;
    rw.res_count = -1;
    float mx = -INFINITY;
    for (int i = threadIdx.x; i < vocab; i += KC_SMP_THREADS)
        mx = fmaxf(mx, smp_z(rw, i)); /* fmaxf skips NaN */
    rw.m = smp_max_f(S, mx);
    if (!(rw.m > -INFINITY))
        return smp_argmax(S, x, vocab);
    const bool keep_all = !(prm.top_p < 1.0f) && !(prm.min_p > 0.0f); /* step 4' unless top-k cuts */
    if (keep_all && (prm.top_k <= 0 || prm.top_k >= vocab))
        return smp_draw_id_order(S, rw, prm);
    int cnt = 0;
    for (int i = threadIdx.x; i < vocab; i += KC_SMP_THREADS)
        cnt += smp_cand(rw, smp_z(rw, i));
    rw.n = smp_sum_i(S, cnt); /* >= 1: the max itself */
    if (keep_all && prm.top_k >= rw.n)
        return smp_draw_id_order(S, rw, prm);

    int n = prm.top_k > 0 && prm.top_k < rw.n ? prm.top_k : rw.n; /* step 5 */
    if (prm.top_p < 1.0f) {                                       /* step 6 */
        const double target = (double)prm.top_p * smp_sum_top(S, rw, n);
        const int r = smp_walk(S, rw, n, target, false);
        if (r >= 0)
            n = r + 1;
    }
    if (prm.min_p > 0.0f) { /* step 7: w(c[0]) == 1 */
        const double thr = (double)prm.min_p * 1.0;
        int c = 0;
        for (int i = threadIdx.x; i < vocab; i += KC_SMP_THREADS) {
            const float z = smp_z(rw, i);
            c += smp_cand(rw, z) && smp_w(rw, z) >= thr;
        }
        const int keep = smp_sum_i(S, c);
        n = keep < 1 ? 1 : keep < n ? keep : n;
    }
    const double total = smp_sum_top(S, rw, n); /* step 8 */
    const double target = rng_uniform(prm.seed, prm.counter) * total;
    int r = smp_walk(S, rw, n, target, true);
    if (r < 0)
        r = n - 1;
    return smp_key_id(smp_key_at(S, rw, r));
}

static __global__ void __launch_bounds__(KC_SMP_THREADS) sample_kernel(int32_t *__restrict__ tokens,
                                                                        const float *__restrict__ logits,
                                                                        const kern_sample_params *__restrict__ params,
                                                                        int vocab)
{
    __shared__ smp_shared S;
    const int64_t row = blockIdx.x;
    const float *x = logits + row * vocab;
    const kern_sample_params prm = params[row];
    int32_t tok;
    if (!(prm.temperature > 0.0f))
        tok = smp_argmax(S, x, vocab);
    else
        tok = smp_sample_row(S, x, vocab, prm);
    if (threadIdx.x == 0)
        tokens[row] = tok;
}

/* One 1024-thread block per row, static shared memory only. */
static void launch_sample(cudaStream_t s, int32_t *tokens, const float *logits, const kern_sample_params *params,
                          int r, int vocab)
{
    sample_kernel<<<r, KC_SMP_THREADS, 0, s>>>(tokens, logits, params, vocab);
}

/* Contract (kern_sample_workspace_bytes): the CUDA sampler needs none. */
size_t kcuda_sample_workspace_bytes(const kern_ctx *ctx, int max_rows, int vocab)
{
    return 0;
}

/* Contract (kern_sample): tokens[j] = the algorithm of sample.c on row j
 * of logits[r, vocab] with params[j] (device memory). logits are not
 * modified; workspace is unused. */
void kcuda_sample(kern_ctx *ctx, int32_t *tokens, float *logits, const kern_sample_params *params, int r,
                  int vocab, void *workspace)
{
    kcuda_state *st = kcuda_st(ctx);
    if (r <= 0)
        return;
    INFERD_CHECK(vocab > 0);
    launch_sample(st->stream, tokens, logits, params, r, vocab);
    KCUDA_LAUNCH_CHECK();
}
