/* kernels/cpu/penalty.c: repetition / frequency / presence penalties and
 * logit_bias on the logits rows of one step (CPU backend; the CUDA twin is
 * kernels/cuda/penalty.cu and must give the same bits).
 *
 * The penalties read a per-sequence count array kept in backend memory
 * (kernels.h: counts[v] = generated occurrences << 1 | in-prompt bit), so a
 * step needs no token history from the host: kern_penalty_init builds it
 * once when a sequence gets a penalty slot, and every later step adds the
 * previous step's token through params.count_token before applying. The
 * formulas are vLLM's (repetition over prompt and output tokens, HF's
 * divide-positive / multiply-negative rule; frequency and presence over
 * output tokens only, as OpenAI defines them), then the bias entries are
 * added, so a bias of +100 dominates whatever the penalties did.
 *
 * Exactness: each step is one fp32 operation rounded on its own; this file
 * is compiled with -ffp-contract=off (kernels/CMakeLists.txt) so that
 * x - frequency * out never becomes a fused multiply-add, which the CUDA
 * twin avoids with __fmul_rn / __fsub_rn.
 */
#include <string.h>

#include "common/check.h"
#include "kernels/cpu/kcpu.h"

/* Contract (kern_penalty_init). */
void kcpu_penalty_init(kern_ctx *ctx, int32_t *counts, const int32_t *tokens, int n_tokens, int n_prompt,
                       int vocab)
{
    (void)ctx;
    memset(counts, 0, (size_t)vocab * sizeof *counts);
    for (int i = 0; i < n_tokens; i++) {
        const int32_t t = tokens[i];
        INFERD_CHECK_MSG(t >= 0 && t < vocab, "penalty init: token outside the vocabulary");
        if (i < n_prompt)
            counts[t] |= 1;
        else
            counts[t] += 2;
    }
}

/* The penalties of one logit with count c (kernels.h, step 2). */
static inline float penalize(float x, int32_t c, const kern_sample_params *p, bool rep)
{
    if (c == 0)
        return x;
    if (rep)
        x = x > 0.0f ? x / p->repetition : x * p->repetition;
    const int32_t out = c >> 1;
    if (out > 0) {
        const float f = p->frequency * (float)out;
        x = x - f;
        x = x - p->presence;
    }
    return x;
}

/* One row: count the pending token, penalize, bias. */
static void apply_row(float *x, const kern_sample_params *p, int vocab)
{
    if (p->counts) {
        if (p->count_token >= 0) {
            INFERD_CHECK_MSG(p->count_token < vocab, "penalty: count_token outside the vocabulary");
            p->counts[p->count_token] += 2;
        }
        const bool rep = p->repetition > 0.0f && p->repetition != 1.0f;
        if (rep || p->frequency != 0.0f || p->presence != 0.0f)
            for (int v = 0; v < vocab; v++)
                x[v] = penalize(x[v], p->counts[v], p, rep);
    }
    for (int k = 0; k < p->n_bias; k++) {
        const int32_t t = p->bias[k].token;
        INFERD_CHECK_MSG(t >= 0 && t < vocab, "logit_bias token outside the vocabulary");
        x[t] = x[t] + p->bias[k].bias;
    }
}

/* Contract (kern_penalty_apply). Rows are independent (each has its own
 * counts), so they run in parallel. */
void kcpu_penalty_apply(kern_ctx *ctx, float *logits, const kern_sample_params *params, int r, int vocab)
{
    int nt = kcpu_threads(ctx, (int64_t)r * vocab);
#pragma omp parallel for num_threads(nt) schedule(static)
    for (int j = 0; j < r; j++)
        apply_row(logits + (int64_t)j * vocab, &params[j], vocab);
}
