/* kernels/cpu/sample.c: token sampling for the CPU backend (greedy and
 * temperature / top-k / top-p / min-p with a counter-based RNG).
 *
 * THE ALGORITHM (the CUDA twin must reproduce it step by step; every step
 * below is exact except the fp64 sums, which the twin performs in the same
 * order, so both pick the same token unless u lands within rounding of a
 * CDF boundary). For one row with params P and logits x[0..V):
 *
 *  1. Greedy: if !(P.temperature > 0) (also NaN), return the lowest id i with
 *     x[i] maximal (NaN logits never win; all-NaN gives 0).
 *  2. z[i] = x[i] / P.temperature in fp32; m = max over non-NaN z (fp32). If
 *     no z exceeds -inf, fall back to step 1.
 *  3. Weights w[i] = 1.0 if z[i] == m, else exp((double)z[i] - (double)m) in
 *     fp64 (the unnormalized softmax; every later step is invariant to the
 *     normalization, so it is never divided out). Tokens with NaN z or
 *     w[i] == 0 are dropped: they can never be drawn.
 *  4'. No truncation: if !(P.top_p < 1), !(P.min_p > 0) and (P.top_k <= 0
 *     or P.top_k >= n, n = the number of kept tokens), steps 5-7 keep every
 *     token, so the order does not matter to the distribution: skip 4-8 and
 *     draw in token-id order: u = rng_uniform(P.seed, P.counter); S = sum
 *     of w[i] over all ids (fp64, id order, dropped tokens add 0); the token
 *     is the lowest id whose running sum (same order) is > u * S; if
 *     rounding leaves none, the highest id with w > 0. (A different token
 *     than steps 4-8 would give for the same u, with the same probability.)
 *  4. Sort the remaining tokens by w descending, ties by lower id first.
 *     Call the sorted list c[0..n).
 *  5. top-k: if P.top_k > 0 and P.top_k < n, n = P.top_k.
 *  6. top-p: if P.top_p < 1: T = sum_{i<n} w(c[i]) (fp64, in sorted order);
 *     keep the smallest prefix c[0..j] with cumulative sum >= P.top_p * T
 *     (cumulative sum in sorted order); so top_p <= 0 keeps c[0] only.
 *  7. min-p: if P.min_p > 0: keep the prefix of c whose w >= P.min_p * w(c[0])
 *     (c[0] is always kept).
 *  8. Draw: u = rng_uniform(P.seed, P.counter); S = sum_{i<n} w(c[i]) (fp64,
 *     sorted order); the token is the first c[i] whose running sum (same
 *     order) is > u * S; if rounding leaves none, c[n-1].
 *
 * Step 3 with "== m" makes +inf logits well defined (all +inf tokens share
 * the mass). Cost: a truncating row sorts the vocabulary; this is the
 * reference, the CUDA twin may select instead of sorting as long as it keeps
 * the same order. A row without truncation (4') takes two passes over the
 * logits and two over the weights, no sort; a row with 0 < top_k < n pays
 * that weight pass before sorting (n comes from it).
 *
 * Workspace: one candidate array of `vocab` entries per worker thread,
 * min(n_threads, max_rows) arrays; rows are sampled in parallel.
 */
#include <math.h>
#include <stdlib.h>

#include "common/alloc.h"
#include "common/check.h"
#include "common/rng.h"
#include "kernels/cpu/kcpu.h"

#ifdef _OPENMP
#include <omp.h>
#endif

typedef struct {
    double w;   /* unnormalized probability */
    int32_t id; /* token id */
} sample_cand;

/* w descending, then id ascending: a total order (ids are unique). */
static int cand_cmp(const void *a, const void *b)
{
    const sample_cand *x = a, *y = b;
    if (x->w > y->w)
        return -1;
    if (x->w < y->w)
        return 1;
    return (x->id > y->id) - (x->id < y->id);
}

/* Lowest id of a maximal logit; NaN never wins, all-NaN gives 0. */
static int32_t argmax_row(const float *x, int vocab)
{
    int32_t best = 0;
    float bv = -INFINITY;
    bool found = false;
    for (int i = 0; i < vocab; i++) {
        if (x[i] > bv || (!found && x[i] == bv)) {
            bv = x[i];
            best = i;
            found = true;
        }
    }
    return best;
}

/* Step 2: m = max of z = x / temp over non-NaN z (-inf if none). */
static float max_z(const float *x, int vocab, float temp)
{
    float m = -INFINITY;
    for (int i = 0; i < vocab; i++) {
        float z = x[i] / temp;
        if (z > m)
            m = z;
    }
    return m;
}

/* Step 3 for one token: w, 0 when the token is dropped. */
static double token_weight(float x, float temp, float m)
{
    float z = x / temp;
    if (isnan(z))
        return 0.0;
    return z == m ? 1.0 : exp((double)z - (double)m);
}

/* Step 4' weights: w[0..vocab) in id order; returns how many are > 0. */
static int id_weights(const float *x, int vocab, float temp, float m, double *w)
{
    int n = 0;
    for (int i = 0; i < vocab; i++) {
        w[i] = token_weight(x[i], temp, m);
        n += w[i] > 0.0;
    }
    return n;
}

/* Step 4' draw over w[0..vocab) (n > 0 of them nonzero). Zero weights are
 * skipped in the walk: adding 0 changes no running sum. */
static int32_t draw_id_order(const double *w, int vocab, const kern_sample_params *prm)
{
    double total = 0.0;
    for (int i = 0; i < vocab; i++)
        total += w[i];
    double target = rng_uniform(prm->seed, prm->counter) * total, cum = 0.0;
    int32_t last = 0;
    for (int i = 0; i < vocab; i++) {
        if (!(w[i] > 0.0))
            continue;
        cum += w[i];
        last = i;
        if (cum > target)
            return i;
    }
    return last;
}

/* Steps 3-4 given m > -inf: candidates with nonzero weight, sorted; returns
 * their count. */
static int build_candidates(const float *x, int vocab, float temp, float m, sample_cand *c)
{
    int n = 0;
    for (int i = 0; i < vocab; i++) {
        double w = token_weight(x[i], temp, m);
        if (w > 0.0) {
            c[n].w = w;
            c[n].id = i;
            n++;
        }
    }
    qsort(c, (size_t)n, sizeof *c, cand_cmp);
    return n;
}

/* Steps 5-7 on sorted candidates c[0..n); returns the kept count (>= 1). */
static int apply_filters(const sample_cand *c, int n, const kern_sample_params *prm)
{
    if (prm->top_k > 0 && prm->top_k < n)
        n = prm->top_k;
    if (prm->top_p < 1.0f) {
        double total = 0.0;
        for (int i = 0; i < n; i++)
            total += c[i].w;
        double target = (double)prm->top_p * total, cum = 0.0;
        for (int i = 0; i < n; i++) {
            cum += c[i].w;
            if (cum >= target) {
                n = i + 1;
                break;
            }
        }
    }
    if (prm->min_p > 0.0f) {
        double thr = (double)prm->min_p * c[0].w;
        int keep = 1;
        while (keep < n && c[keep].w >= thr)
            keep++;
        n = keep;
    }
    return n;
}

/* Sample one row (steps 1-8); c has room for vocab candidates (or, on the
 * 4' path, vocab doubles: a candidate is larger). */
static int32_t sample_row(const float *x, int vocab, const kern_sample_params *prm, sample_cand *c)
{
    if (!(prm->temperature > 0.0f))
        return argmax_row(x, vocab);
    const float m = max_z(x, vocab, prm->temperature);
    if (!(m > -INFINITY))
        return argmax_row(x, vocab);
    if (!(prm->top_p < 1.0f) && !(prm->min_p > 0.0f)) { /* step 4' */
        double *w = (double *)c;
        int n = id_weights(x, vocab, prm->temperature, m, w);
        if (prm->top_k <= 0 || prm->top_k >= n)
            return draw_id_order(w, vocab, prm);
    }
    int n = build_candidates(x, vocab, prm->temperature, m, c);
    n = apply_filters(c, n, prm);
    double total = 0.0;
    for (int i = 0; i < n; i++)
        total += c[i].w;
    double target = rng_uniform(prm->seed, prm->counter) * total, cum = 0.0;
    for (int i = 0; i < n; i++) {
        cum += c[i].w;
        if (cum > target)
            return c[i].id;
    }
    return c[n - 1].id;
}

static int sample_slots(const kern_ctx *ctx, int max_rows)
{
    return max_rows < ctx->n_threads ? max_rows : ctx->n_threads;
}

/* Contract (kern_sample_workspace_bytes): bytes for r <= max_rows rows of
 * `vocab` logits: one candidate array per worker thread. */
size_t kcpu_sample_workspace_bytes(const kern_ctx *ctx, int max_rows, int vocab)
{
    if (max_rows <= 0 || vocab <= 0)
        return 0;
    return (size_t)sample_slots(ctx, max_rows) * (size_t)vocab * sizeof(sample_cand);
}

/* Contract (kern_sample): tokens[j] = the algorithm above on row j of
 * logits[r, vocab] with params[j]. workspace: kcpu_sample_workspace_bytes(ctx,
 * >= r, vocab) bytes; NULL makes the call allocate its own (slow path, for
 * callers without an arena). logits are not modified. */
void kcpu_sample(kern_ctx *ctx, int32_t *tokens, float *logits, const kern_sample_params *params,
                 int r, int vocab, void *workspace)
{
    if (r <= 0)
        return;
    INFERD_CHECK(vocab > 0);
    const int slots = sample_slots(ctx, r);
    sample_cand *ws = workspace;
    sample_cand *own = NULL;
    if (!ws)
        ws = own = inferd_malloc((size_t)slots * (size_t)vocab * sizeof(sample_cand));
    int nt = kcpu_threads(ctx, (int64_t)r * vocab * 8);
    if (nt > slots)
        nt = slots;
#pragma omp parallel for num_threads(nt) schedule(dynamic, 1)
    for (int j = 0; j < r; j++) {
#ifdef _OPENMP
        int slot = omp_get_thread_num();
#else
        int slot = 0;
#endif
        tokens[j] = sample_row(logits + (int64_t)j * vocab, vocab, &params[j],
                               ws + (size_t)slot * (size_t)vocab);
    }
    inferd_free(own);
}
