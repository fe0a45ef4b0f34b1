/* tests/kernels/cpu/test_kcpu_penalty.c: the CPU penalty ops
 * (kernels/cpu/penalty.c) against a host reference written here from the
 * formulas of kernels.h: token counts built from prompt + generated ids,
 * the pending token folded in, repetition over prompt and output tokens,
 * frequency and presence over output tokens only, then logit_bias; bitwise
 * equality on odd vocabularies, several rows with different parameters in
 * one call, guard regions around every buffer, and rows without penalties
 * left bit for bit (NaN payloads included). This file is compiled with
 * -ffp-contract=off, so the reference rounds every step as the spec says. */
#include <math.h>

#include "common/alloc.h"
#include "kt_util.h"

/* The reference counts: generated occurrences << 1 | in-prompt bit. */
static void ref_counts(const int32_t *tok, int n, int n_prompt, int vocab, int32_t *c)
{
    memset(c, 0, (size_t)vocab * sizeof *c);
    for (int i = 0; i < n; i++) {
        if (i < n_prompt)
            c[tok[i]] |= 1;
        else
            c[tok[i]] += 2;
    }
}

/* The reference of one row, from the contract in kernels.h. */
static void ref_apply(float *x, int32_t *c, const kern_sample_params *p, int vocab)
{
    if (p->counts) {
        if (p->count_token >= 0)
            c[p->count_token] += 2;
        for (int v = 0; v < vocab; v++) {
            const bool in_prompt = c[v] & 1;
            const int out = c[v] >> 1;
            float y = x[v];
            if ((in_prompt || out > 0) && p->repetition > 0 && p->repetition != 1)
                y = y > 0 ? y / p->repetition : y * p->repetition;
            if (out > 0) {
                float f = p->frequency * (float)out;
                y = y - f;
                y = y - p->presence;
            }
            x[v] = y;
        }
    }
    for (int k = 0; k < p->n_bias; k++)
        x[p->bias[k].token] += p->bias[k].bias;
}

/* Random ids in [0, vocab) drawn from a small pool, so repeats happen. */
static void rand_tokens(int32_t *t, int n, int vocab, uint64_t seed)
{
    int pool = vocab < 40 ? vocab : 40;
    for (int i = 0; i < n; i++)
        t[i] = (int32_t)(rng_uniform(seed, (uint64_t)i) * pool * 7) % vocab;
}

START_TEST(test_init_counts)
{
    kern_ctx *ctx = kt_ctx(2);
    const int vocab = 517, n = 300, n_prompt = 120;
    int32_t tok[300], want[517];
    rand_tokens(tok, n, vocab, 11);
    ref_counts(tok, n, n_prompt, vocab, want);
    int32_t *c = kt_galloc(ctx, (size_t)vocab);
    kern_penalty_init(ctx, c, tok, n, n_prompt, vocab);
    kt_gcheck(c, (size_t)vocab, "counts");
    for (int v = 0; v < vocab; v++)
        KT_INT_EQ(c[v], want[v]);
    /* a token in both parts: prompt bit and its output count side by side */
    int32_t both[] = {5, 7, 5, 5, 9};
    kern_penalty_init(ctx, c, both, 5, 2, vocab);
    KT_INT_EQ(c[5], (2 << 1) | 1);
    KT_INT_EQ(c[7], 1);
    KT_INT_EQ(c[9], 1 << 1);
    KT_INT_EQ(c[6], 0);
    /* no tokens: all zero (the slot is reused, so stale counts must go) */
    kern_penalty_init(ctx, c, both, 0, 0, vocab);
    for (int v = 0; v < vocab; v++)
        KT_INT_EQ(c[v], 0);
    kt_gcheck(c, (size_t)vocab, "counts");
    kt_gfree(ctx, c);
    kern_ctx_free(ctx);
}
END_TEST

/* A hand-computed row: each rule on its own token. */
START_TEST(test_hand_row)
{
    kern_ctx *ctx = kt_ctx(1);
    enum { V = 7 };
    /* token: 0 prompt only, 1 output x2, 2 prompt + output x1, 3 unseen,
     * 4 prompt only and negative, 5 output x1 and zero logit, 6 biased */
    float x[V] = {2.0f, 3.0f, -1.0f, 4.0f, -2.0f, 0.0f, 1.0f};
    int32_t toks[] = {0, 2, 4, 1, 1, 2, 5};
    int32_t *c = kt_galloc(ctx, V);
    kern_penalty_init(ctx, c, toks, 7, 3, V);
    kern_logit_bias b[2] = {{6, 0.5f}, {3, -100.0f}};
    kern_sample_params p = {.top_p = 1, .counts = c, .bias = b, .n_bias = 2, .count_token = -1,
                            .presence = 0.25f, .frequency = 0.5f, .repetition = 2.0f};
    kern_penalty_apply(ctx, x, &p, 1, V);
    const float want[V] = {
        1.0f,                        /* 2 / 2 */
        3.0f / 2 - 0.5f * 2 - 0.25f, /* 1.5 - 1 - 0.25 = 0.25 */
        -1.0f * 2 - 0.5f - 0.25f,    /* -2.75 */
        4.0f - 100.0f,               /* unseen: bias only */
        -4.0f,                       /* -2 * 2 */
        0.0f - 0.5f - 0.25f,         /* 0 * 2 = 0, then -0.75 */
        1.5f,                        /* bias */
    };
    for (int v = 0; v < V; v++)
        KT_MSG(kt_bits(x[v]) == kt_bits(want[v]), "token %d: %g, want %g", v, x[v], want[v]);
    /* count_token adds one occurrence before the penalties: token 3 now
     * seen once as output */
    float y[V] = {0, 0, 0, 4.0f, 0, 0, 0};
    kern_sample_params q = {.top_p = 1, .counts = c, .count_token = 3, .frequency = 1.0f, .repetition = 1.0f};
    kern_penalty_apply(ctx, y, &q, 1, V);
    KT_INT_EQ(c[3], 2);
    KT_MSG(y[3] == 3.0f, "count_token: %g", y[3]);
    kt_gcheck(c, V, "counts");
    kt_gfree(ctx, c);
    kern_ctx_free(ctx);
}
END_TEST

/* Several rows with different parameters, odd vocabularies, against the
 * reference; rows without penalties stay bit for bit. */
START_TEST(test_rows_vs_reference)
{
    kern_ctx *ctx = kt_ctx(2);
    const int vocabs[] = {1, 3, 257, 1001, 4099};
    for (int vi = 0; vi < 5; vi++) {
        const int vocab = vocabs[vi], r = 6, n_tok = 64;
        float *x = kt_galloc(ctx, (size_t)r * vocab), *ref = inferd_malloc((size_t)r * vocab * 4);
        int32_t *counts = kt_galloc(ctx, (size_t)r * vocab), *rc = inferd_malloc((size_t)r * vocab * 4);
        kern_logit_bias *bias = kt_galloc(ctx, (size_t)r * 8 * 2);
        kern_sample_params p[6];
        test_fill_uniform(x, (size_t)r * vocab, 100 + (uint64_t)vi, -6.0f, 6.0f);
        for (int i = 0; i < r * vocab; i += 13)
            x[i] = i % 2 ? -INFINITY : NAN;
        memcpy(ref, x, (size_t)r * vocab * 4);
        for (int j = 0; j < r; j++) {
            int32_t tok[64];
            rand_tokens(tok, n_tok, vocab, 1000 + (uint64_t)(vi * 10 + j));
            int np = j * 9 % n_tok;
            kern_penalty_init(ctx, counts + (size_t)j * vocab, tok, n_tok, np, vocab);
            ref_counts(tok, n_tok, np, vocab, rc + (size_t)j * vocab);
            int nb = vocab < 8 ? vocab : 8;
            for (int k = 0; k < nb; k++) /* distinct ids: a stride coprime to nothing in particular, deduped */
                bias[j * 8 + k] = (kern_logit_bias){(int32_t)((k * 37 + j) % vocab), (float)(k * 25 - 100) / (j + 1)};
            if (vocab < 8)
                for (int k = 0; k < nb; k++)
                    bias[j * 8 + k].token = k;
            p[j] = (kern_sample_params){.top_p = 1, .count_token = -1, .repetition = 1};
            switch (j) {
            case 0: break; /* no penalties, no bias: untouched */
            case 1: p[j].counts = counts + vocab; p[j].repetition = 1.7f; break;
            case 2: p[j].counts = counts + 2 * vocab; p[j].presence = -1.5f; p[j].frequency = 0.75f;
                    p[j].count_token = vocab - 1; break;
            case 3: p[j].bias = bias + 3 * 8; p[j].n_bias = nb; break;
            case 4: p[j].counts = counts + 4 * vocab; p[j].presence = 2; p[j].frequency = -2;
                    p[j].repetition = 0.3f; p[j].bias = bias + 4 * 8; p[j].n_bias = nb; p[j].count_token = 0; break;
            default: p[j].counts = counts + 5 * vocab; p[j].count_token = vocab / 2; break; /* counts only */
            }
        }
        kern_penalty_apply(ctx, x, p, r, vocab);
        for (int j = 0; j < r; j++) {
            kern_sample_params pr = p[j];
            ref_apply(ref + (size_t)j * vocab, rc + (size_t)j * vocab, &pr, vocab);
        }
        for (size_t i = 0; i < (size_t)r * vocab; i++)
            KT_MSG(kt_bits(x[i]) == kt_bits(ref[i]), "vocab %d row %zu token %zu: %g, want %g", vocab,
                   i / vocab, i % vocab, x[i], ref[i]);
        for (size_t i = 0; i < (size_t)r * vocab; i++)
            KT_MSG(counts[i] == rc[i], "vocab %d counts[%zu] = %d, want %d", vocab, i, counts[i], rc[i]);
        kt_gcheck(x, (size_t)r * vocab, "logits");
        kt_gcheck(counts, (size_t)r * vocab, "counts");
        kt_gfree(ctx, x);
        kt_gfree(ctx, counts);
        kt_gfree(ctx, bias);
        inferd_free(ref);
        inferd_free(rc);
    }
    kern_ctx_free(ctx);
}
END_TEST

/* The direction of each penalty on a seen token, over random logits: the
 * spec's promise that callers rely on (a penalty > 0 never raises a
 * logit, repetition > 1 pulls every seen logit toward -inf). */
START_TEST(test_direction)
{
    kern_ctx *ctx = kt_ctx(1);
    enum { V = 301 };
    float x[V], y[V];
    test_fill_uniform(x, V, 5, -8.0f, 8.0f);
    int32_t tok[50];
    rand_tokens(tok, 50, V, 77);
    int32_t *c = kt_galloc(ctx, V);
    kern_penalty_init(ctx, c, tok, 50, 20, V);
    memcpy(y, x, sizeof x);
    kern_sample_params p = {.top_p = 1, .counts = c, .count_token = -1, .presence = 0.5f, .frequency = 0.5f,
                            .repetition = 1.3f};
    kern_penalty_apply(ctx, y, &p, 1, V);
    int seen = 0;
    for (int v = 0; v < V; v++) {
        if (c[v] == 0) {
            KT_CHECK(kt_bits(y[v]) == kt_bits(x[v]));
            continue;
        }
        seen++;
        KT_MSG(y[v] < x[v] || (x[v] == 0.0f && c[v] == 1), "token %d (count %d): %g -> %g", v, c[v], x[v], y[v]);
    }
    KT_CHECK(seen > 0);
    kt_gfree(ctx, c);
    kern_ctx_free(ctx);
}
END_TEST

int main(void)
{
    Suite *s = suite_create("kcpu_penalty");
    TCase *tc = tcase_create("core");
    tcase_add_test(tc, test_init_counts);
    tcase_add_test(tc, test_hand_row);
    tcase_add_test(tc, test_rows_vs_reference);
    tcase_add_test(tc, test_direction);
    suite_add_tcase(s, tc);
    return test_run_suite(s);
}
