/* kernels/cuda/penalty.cu: repetition / frequency / presence penalties and
 * logit_bias on the GPU, the twin of kernels/cpu/penalty.c (read its top
 * comment and kernels.h for the formulas; the bits must match).
 *
 * Layout: a grid of (vocabulary chunks, rows); each block takes
 * PEN_CHUNK consecutive logits of one row, so a single long row (batch 1,
 * a 128k vocabulary) still spreads over ~32 SMs instead of streaming
 * through one. A row without counts and bias exits at once: in a decode
 * CUDA graph, where this kernel is always captured, a batch without
 * penalties costs one launch of empty blocks and leaves the logits alone.
 *
 * Ordering inside a row, without a grid-wide barrier:
 *  - the pending output token (params.count_token) is folded in by the
 *    thread that owns that vocabulary entry: it reads counts[v], adds 2 and
 *    writes it back, using the new value itself, so no other thread needs
 *    to see the write;
 *  - the bias entries of the block's chunk are added after a __syncthreads,
 *    by which time the chunk's penalized logits are written (logit_bias
 *    ids are distinct, so two threads never add to one logit).
 * Every arithmetic step uses an explicitly rounded intrinsic (__fdiv_rn,
 * __fmul_rn, __fsub_rn, __fadd_rn): no FMA contraction, the CPU's bits.
 */
#include "kernels/cuda/common.cuh"

#define PEN_THREADS 256
#define PEN_PER_THREAD 16
#define PEN_CHUNK (PEN_THREADS * PEN_PER_THREAD) /* logits per block */

/* The penalties of one logit with count c (kernels.h, step 2). */
__device__ __forceinline__ float pen_logit(float x, int32_t c, const kern_sample_params &p, bool rep)
{
    if (c == 0)
        return x;
    if (rep)
        x = x > 0.0f ? __fdiv_rn(x, p.repetition) : __fmul_rn(x, p.repetition);
    const int32_t out = c >> 1;
    if (out > 0) {
        x = __fsub_rn(x, __fmul_rn(p.frequency, (float)out));
        x = __fsub_rn(x, p.presence);
    }
    return x;
}

static __global__ void __launch_bounds__(PEN_THREADS)
    penalty_apply_kernel(float *__restrict__ logits, const kern_sample_params *__restrict__ params, int vocab)
{
    const kern_sample_params p = params[blockIdx.y];
    if (!p.counts && p.n_bias <= 0)
        return; /* uniform over the block: no barrier is skipped by some threads only */
    float *x = logits + (int64_t)blockIdx.y * vocab; /* [vocab] */
    const int lo = blockIdx.x * PEN_CHUNK, hi = min(vocab, lo + PEN_CHUNK);
    if (p.counts) {
        const bool rep = p.repetition > 0.0f && p.repetition != 1.0f;
        const bool any = rep || p.frequency != 0.0f || p.presence != 0.0f;
        for (int v = lo + threadIdx.x; v < hi; v += PEN_THREADS) {
            int32_t c = p.counts[v];
            if (v == p.count_token) {
                c += 2;
                p.counts[v] = c;
            }
            if (any)
                x[v] = pen_logit(x[v], c, p, rep);
        }
    }
    __syncthreads();
    for (int k = threadIdx.x; k < p.n_bias; k += PEN_THREADS) {
        const int32_t t = p.bias[k].token;
        if (t >= lo && t < hi)
            x[t] = __fadd_rn(x[t], p.bias[k].bias);
    }
}

/* Every entry of counts[vocab] is zero (cudaMemsetAsync) before this runs;
 * prompt tokens set bit 0, generated tokens add 2. Bit 0 and the count
 * bits never carry into each other, so the atomics commute and the result
 * is the CPU's whatever the order. */
static __global__ void penalty_init_kernel(int32_t *__restrict__ counts, const int32_t *__restrict__ tokens,
                                           int n_tokens, int n_prompt)
{
    for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < n_tokens; i += gridDim.x * blockDim.x) {
        if (i < n_prompt)
            atomicOr(&counts[tokens[i]], 1);
        else
            atomicAdd(&counts[tokens[i]], 2);
    }
}

/* Contract (kern_penalty_init). Token ids must be in [0, vocab): the
 * engine only passes ids it validated (prompt) or sampled. */
void kcuda_penalty_init(kern_ctx *ctx, int32_t *counts, const int32_t *tokens, int n_tokens, int n_prompt,
                        int vocab)
{
    kcuda_state *st = kcuda_st(ctx);
    CUDA_CHECK(cudaMemsetAsync(counts, 0, (size_t)vocab * sizeof *counts, st->stream));
    if (n_tokens <= 0)
        return;
    const int threads = 256, blocks = min(1024, (n_tokens + threads - 1) / threads);
    penalty_init_kernel<<<blocks, threads, 0, st->stream>>>(counts, tokens, n_tokens, n_prompt);
    KCUDA_LAUNCH_CHECK();
}

/* Contract (kern_penalty_apply). Capturable: one launch, no allocation. */
void kcuda_penalty_apply(kern_ctx *ctx, float *logits, const kern_sample_params *params, int r, int vocab)
{
    kcuda_state *st = kcuda_st(ctx);
    INFERD_CHECK(r <= 65535); /* grid.y; the engine's rows are max_num_seqs */
    const dim3 grid((unsigned)((vocab + PEN_CHUNK - 1) / PEN_CHUNK), (unsigned)r);
    penalty_apply_kernel<<<grid, PEN_THREADS, 0, st->stream>>>(logits, params, vocab);
    KCUDA_LAUNCH_CHECK();
}
