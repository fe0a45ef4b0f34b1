/* tests/kernels/cpu/test_kcpu_sample.c: the CPU sampler. Greedy (max, lowest
 * id on ties, NaN never wins), determinism of (seed, counter), spread over
 * seeds, top-k = 1 and tiny top-p equal greedy, top-k / top-p / min-p keep
 * exactly the expected sets, the empirical distribution of 20000 draws
 * matches the (filtered, renormalized) softmax, multi-row calls with a
 * guarded workspace equal single-row calls; rows without truncation (step
 * 4') draw the inverse CDF in id order under every way of switching the
 * filters off, over vocab sizes 1 to 128256 and rows with NaN / +-inf. */
#include <math.h>
#include <stdlib.h>

#include "common/alloc.h"
#include "common/rng.h"
#include "kt_util.h"

static kern_sample_params params(float temp, int32_t top_k, float top_p, float min_p,
                                 uint64_t seed, uint64_t counter)
{
    kern_sample_params p = {.temperature = temp, .top_p = top_p, .min_p = min_p, .top_k = top_k,
                            .seed = seed, .counter = counter};
    return p;
}

/* Sample one row with a freshly sized, guarded workspace. */
static int32_t sample1(kern_ctx *ctx, const float *logits, int vocab, kern_sample_params p)
{
    size_t ws_n = (kern_sample_workspace_bytes(ctx, 1, vocab) + 3) / 4;
    void *ws = kt_galloc(ctx, ws_n);
    float *lg = kt_galloc(ctx, (size_t)vocab);
    memcpy(lg, logits, (size_t)vocab * sizeof(float));
    int32_t *tok = kt_galloc(ctx, 1);
    kern_sample(ctx, tok, lg, &p, 1, vocab, ws);
    int32_t t = tok[0];
    kt_gcheck(ws, ws_n, "sample workspace");
    kt_gcheck(tok, 1, "sample tokens");
    kt_gfree(ctx, ws);
    kt_gfree(ctx, lg);
    kt_gfree(ctx, tok);
    KT_CHECK(t >= 0 && t < vocab);
    return t;
}

START_TEST(test_greedy)
{
    kern_ctx *ctx = kt_ctx(2);
    float x[1001];
    test_fill_uniform(x, 1001, 4, -5.0f, 5.0f);
    const int want = test_argmax(x, 1001);
    KT_INT_EQ(sample1(ctx, x, 1001, params(0.0f, 0, 1.0f, 0.0f, 1, 0)), want);
    KT_INT_EQ(sample1(ctx, x, 1001, params(-1.0f, 5, 0.5f, 0.1f, 1, 0)), want);
    /* ties go to the lowest id */
    float t[] = {1.0f, 3.0f, -2.0f, 3.0f, 3.0f};
    KT_INT_EQ(sample1(ctx, t, 5, params(0.0f, 0, 1.0f, 0.0f, 9, 9)), 1);
    float all_eq[] = {-INFINITY, -INFINITY, -INFINITY};
    KT_INT_EQ(sample1(ctx, all_eq, 3, params(0.0f, 0, 1.0f, 0.0f, 9, 9)), 0);
    /* NaN never wins */
    float nan_row[] = {NAN, 0.5f, NAN, 2.0f, 1.0f};
    KT_INT_EQ(sample1(ctx, nan_row, 5, params(0.0f, 0, 1.0f, 0.0f, 1, 1)), 3);
    kern_ctx_free(ctx);
}
END_TEST

START_TEST(test_deterministic_and_spread)
{
    kern_ctx *ctx = kt_ctx(2);
    enum { V = 50, SEEDS = 2000 };
    float flat[V];
    for (int i = 0; i < V; i++)
        flat[i] = 0.25f;
    int counts[V] = {0};
    for (uint64_t s = 0; s < SEEDS; s++) {
        kern_sample_params p = params(1.0f, 0, 1.0f, 0.0f, s, 3);
        int32_t a = sample1(ctx, flat, V, p);
        KT_INT_EQ(sample1(ctx, flat, V, p), a); /* same (seed, counter), same token */
        counts[a]++;
    }
    for (int i = 0; i < V; i++) /* expect 40 each; all tokens reached, none dominant */
        KT_MSG(counts[i] >= 15 && counts[i] <= 70, "token %d drawn %d times", i, counts[i]);
    /* the counter matters too */
    int differ = 0;
    for (uint64_t k = 0; k < 100; k++)
        differ += sample1(ctx, flat, V, params(1.0f, 0, 1.0f, 0.0f, 7, k)) !=
                  sample1(ctx, flat, V, params(1.0f, 0, 1.0f, 0.0f, 7, k + 1));
    ck_assert_int_gt(differ, 80);
    kern_ctx_free(ctx);
}
END_TEST

START_TEST(test_topk1_tiny_topp_equal_greedy)
{
    kern_ctx *ctx = kt_ctx(2);
    float x[777];
    for (uint64_t r = 0; r < 50; r++) {
        test_fill_uniform(x, 777, 100 + r, -3.0f, 3.0f);
        int want = test_argmax(x, 777);
        KT_INT_EQ(sample1(ctx, x, 777, params(1.3f, 1, 1.0f, 0.0f, r, r)), want);
        KT_INT_EQ(sample1(ctx, x, 777, params(2.0f, 0, 1e-6f, 0.0f, r, 2 * r)), want);
        KT_INT_EQ(sample1(ctx, x, 777, params(0.7f, 0, 0.0f, 0.0f, r, 5)), want);
        KT_INT_EQ(sample1(ctx, x, 777, params(1.0f, 0, 1.0f, 1.0f, r, 5)), want); /* min_p 1 */
    }
    /* top-k = 1 with tied maxima keeps the lowest id */
    float t[] = {0.0f, 2.0f, 1.0f, 2.0f};
    for (uint64_t r = 0; r < 20; r++)
        KT_INT_EQ(sample1(ctx, t, 4, params(1.0f, 1, 1.0f, 0.0f, r, 0)), 1);
    kern_ctx_free(ctx);
}
END_TEST

/* Draw n tokens with counters 0..n-1 and return the frequencies. */
static void frequencies(kern_ctx *ctx, const float *x, int vocab, kern_sample_params p, int n,
                        double *freq)
{
    for (int i = 0; i < vocab; i++)
        freq[i] = 0.0;
    for (int k = 0; k < n; k++) {
        p.counter = (uint64_t)k;
        freq[sample1(ctx, x, vocab, p)] += 1.0 / n;
    }
}

/* softmax(x / temp) restricted to keep[] and renormalized. */
static void ref_probs(const float *x, int vocab, double temp, const bool *keep, double *pr)
{
    double mx = -INFINITY, sum = 0.0;
    for (int i = 0; i < vocab; i++)
        mx = fmax(mx, x[i] / temp);
    for (int i = 0; i < vocab; i++) {
        pr[i] = keep[i] ? exp(x[i] / temp - mx) : 0.0;
        sum += pr[i];
    }
    for (int i = 0; i < vocab; i++)
        pr[i] /= sum;
}

START_TEST(test_distribution_matches_softmax)
{
    kern_ctx *ctx = kt_ctx(2);
    const float x[5] = {1.0f, 0.2f, -0.5f, 1.6f, 0.0f};
    double freq[5], pr[5];
    /* plain temperature sampling */
    const bool all[5] = {true, true, true, true, true};
    frequencies(ctx, x, 5, params(0.8f, 0, 1.0f, 0.0f, 1234, 0), 20000, freq);
    ref_probs(x, 5, 0.8, all, pr);
    for (int i = 0; i < 5; i++)
        KT_MSG(fabs(freq[i] - pr[i]) < 0.015, "token %d: %.4f vs %.4f", i, freq[i], pr[i]);
    /* top-k 3 keeps tokens 3, 0, 1 */
    const bool top3[5] = {true, true, false, true, false};
    frequencies(ctx, x, 5, params(1.0f, 3, 1.0f, 0.0f, 99, 0), 20000, freq);
    ref_probs(x, 5, 1.0, top3, pr);
    for (int i = 0; i < 5; i++)
        KT_MSG(fabs(freq[i] - pr[i]) < 0.015, "top-k token %d: %.4f vs %.4f", i, freq[i], pr[i]);
    kern_ctx_free(ctx);
}
END_TEST

/* Which tokens can be drawn under p (over 3000 counters). */
static void reachable(kern_ctx *ctx, const float *x, int vocab, kern_sample_params p, bool *hit)
{
    for (int i = 0; i < vocab; i++)
        hit[i] = false;
    for (uint64_t k = 0; k < 3000; k++) {
        p.counter = k;
        hit[sample1(ctx, x, vocab, p)] = true;
    }
}

START_TEST(test_filters_keep_expected_sets)
{
    kern_ctx *ctx = kt_ctx(2);
    /* probabilities 0.5, 0.3, 0.15, 0.05 (token order shuffled) */
    const float x[4] = {logf(0.15f), logf(0.5f), logf(0.05f), logf(0.3f)};
    static const struct {
        int32_t top_k;
        float top_p, min_p;
        bool want[4];
    } rows[] = {
        {0, 1.0f, 0.0f, {true, true, true, true}},
        {2, 1.0f, 0.0f, {false, true, false, true}},
        {3, 1.0f, 0.0f, {true, true, false, true}},
        {0, 0.7f, 0.0f, {false, true, false, true}},  /* 0.5 + 0.3 >= 0.7 */
        {0, 0.45f, 0.0f, {false, true, false, false}}, /* 0.5 >= 0.45 */
        {0, 0.9f, 0.0f, {true, true, false, true}},   /* 0.95 >= 0.9 */
        {0, 1.0f, 0.2f, {true, true, false, true}},   /* drop p < 0.1 */
        {0, 1.0f, 0.7f, {false, true, false, false}}, /* drop p < 0.35 */
        {3, 0.6f, 0.0f, {false, true, false, true}},  /* top-p over the top-3 mass 0.95 */
        {2, 1.0f, 0.5f, {false, true, false, true}},  /* 0.3 >= 0.25 */
        {0, 0.9f, 0.4f, {false, true, false, true}},  /* top-p then min-p */
    };
    for (size_t r = 0; r < sizeof rows / sizeof rows[0]; r++) {
        bool hit[4];
        reachable(ctx, x, 4, params(1.0f, rows[r].top_k, rows[r].top_p, rows[r].min_p, 5 + r, 0), hit);
        for (int i = 0; i < 4; i++)
            KT_MSG(hit[i] == rows[r].want[i], "row %zu token %d: drawn %d, expected %d", r,
                          i, hit[i], rows[r].want[i]);
    }
    kern_ctx_free(ctx);
}
END_TEST

/* r rows in one call (shared workspace, several threads) equal r single-row
 * calls; NULL workspace works too; logits are left intact. */
START_TEST(test_multi_row)
{
    kern_ctx *ctx = kt_ctx(3);
    enum { R = 9, V = 301 };
    float *x = kt_galloc(ctx, (size_t)(R * V));
    float *copy = inferd_malloc((size_t)(R * V) * sizeof(float));
    test_fill_uniform(x, (size_t)(R * V), 8, -4.0f, 4.0f);
    memcpy(copy, x, (size_t)(R * V) * sizeof(float));
    kern_sample_params p[R];
    for (int r = 0; r < R; r++)
        p[r] = params(r % 3 == 0 ? 0.0f : 0.5f + 0.2f * r, r % 4 == 1 ? 10 : 0,
                      r % 3 == 2 ? 0.8f : 1.0f, r == 5 ? 0.05f : 0.0f, 1000 + (uint64_t)r,
                      (uint64_t)r * 7);
    size_t ws_n = (kern_sample_workspace_bytes(ctx, 16, V) + 3) / 4;
    ck_assert_uint_gt(ws_n, 0);
    void *ws = kt_galloc(ctx, ws_n);
    int32_t *tok = kt_galloc(ctx, R);
    int32_t tok2[R];
    kern_sample(ctx, tok, x, p, R, V, ws);
    kern_sample(ctx, tok2, x, p, R, V, NULL);
    KT_CHECK(memcmp(x, copy, (size_t)(R * V) * sizeof(float)) == 0);
    for (int r = 0; r < R; r++) {
        KT_INT_EQ(tok[r], sample1(ctx, copy + r * V, V, p[r]));
        KT_INT_EQ(tok2[r], tok[r]);
    }
    kt_gcheck(ws, ws_n, "workspace");
    kt_gcheck(tok, R, "tokens");
    kt_gcheck(x, (size_t)(R * V), "logits");
    kt_gfree(ctx, ws);
    kt_gfree(ctx, tok);
    kt_gfree(ctx, x);
    inferd_free(copy);
    kern_ctx_free(ctx);
}
END_TEST

/* Step 4' by its definition: the lowest id whose running sum of
 * w = exp(z - max z) (fp64, id order, NaN z dropped) exceeds u * S. */
static int32_t ref_id_order(const float *x, int vocab, float temp, uint64_t seed, uint64_t counter)
{
    float m = -INFINITY;
    for (int i = 0; i < vocab; i++)
        m = fmaxf(m, x[i] / temp);
    double *w = inferd_malloc((size_t)vocab * sizeof(double));
    double total = 0.0;
    for (int i = 0; i < vocab; i++) {
        float z = x[i] / temp;
        w[i] = isnan(z) ? 0.0 : z == m ? 1.0 : exp((double)z - (double)m);
        total += w[i];
    }
    const double target = rng_uniform(seed, counter) * total;
    double cum = 0.0;
    int32_t tok = -1;
    for (int i = 0; i < vocab && tok < 0; i++) {
        cum += w[i];
        if (cum > target)
            tok = i;
    }
    for (int i = vocab - 1; tok < 0 && i >= 0; i--)
        if (w[i] > 0.0)
            tok = i;
    inferd_free(w);
    return tok;
}

enum { ID_FLAT, ID_PEAKED, ID_SPECIAL, ID_POSINF, ID_KINDS };

/* Rows for the id-order path; returns the number of tokens with w > 0. */
static int fill_id_row(float *x, int vocab, int kind, uint64_t seed)
{
    test_fill_uniform(x, (size_t)vocab, seed, -1.0f, 1.0f);
    if (kind == ID_PEAKED)
        for (int k = 0; k < 8; k++)
            x[(int)(rng_uniform(seed, (uint64_t)k) * vocab)] = 6.0f + (float)k;
    if (kind == ID_SPECIAL || kind == ID_POSINF)
        for (int i = 0; i < vocab; i++) {
            double u = rng_uniform(seed + 1, (uint64_t)i);
            if (u < 0.1)
                x[i] = u < 0.05 ? NAN : -INFINITY;
        }
    if (kind == ID_POSINF && vocab > 2) {
        x[vocab / 3] = INFINITY;
        x[vocab - 1] = INFINITY;
    }
    x[vocab / 2] = 0.5f; /* at least one drawable token */
    float m = -INFINITY;
    for (int i = 0; i < vocab; i++)
        m = fmaxf(m, x[i]);
    int n = 0;
    for (int i = 0; i < vocab; i++)
        n += !isnan(x[i]) && (x[i] == m || exp((double)x[i] - (double)m) > 0.0);
    return n;
}

/* Every setting that keeps all candidates draws the same, reference, token:
 * top_k 0, negative, = n (the candidate count), = vocab, huge; top_p 1 or
 * above; min_p 0 or negative. */
START_TEST(test_id_order_inverse_cdf)
{
    kern_ctx *ctx = kt_ctx(2);
    const int vocabs[] = {1, 2, 1023, 1025, 32000, 128256};
    for (int v = 0; v < 6; v++) {
        const int vocab = vocabs[v];
        float *x = inferd_malloc((size_t)vocab * sizeof(float));
        for (int kind = 0; kind < ID_KINDS; kind++) {
            const int n = fill_id_row(x, vocab, kind, 40 + (uint64_t)(v * 10 + kind));
            const int32_t ks[] = {0, -7, n, vocab, INT32_MAX};
            for (uint64_t c = 0; c < 12; c++) {
                const float temp = c % 3 == 0 ? 0.6f : 1.0f;
                const int32_t want = ref_id_order(x, vocab, temp, 77 + c, c);
                KT_MSG(!isnan(x[want]) && x[want] > -INFINITY, "vocab %d kind %d drew a dropped token %d",
                       vocab, kind, want);
                if (kind == ID_POSINF && vocab > 2)
                    KT_MSG(x[want] == INFINITY, "vocab %d: +inf row drew %d", vocab, want);
                for (int k = 0; k < 5; k++) {
                    const float top_p = k % 2 ? 1.0f : 3.5f, min_p = k % 2 ? 0.0f : -0.25f;
                    KT_MSG(sample1(ctx, x, vocab, params(temp, ks[k], top_p, min_p, 77 + c, c)) == want,
                           "vocab %d kind %d counter %llu top_k %d", vocab, kind, (unsigned long long)c,
                           (int)ks[k]);
                }
            }
        }
        inferd_free(x);
    }
    kern_ctx_free(ctx);
}
END_TEST

/* Small rows: vocab 1, NaN / -inf never drawn, +inf tokens share the mass,
 * and top_k = n - 1 still truncates (the switch is exactly at n). */
START_TEST(test_id_order_edges)
{
    kern_ctx *ctx = kt_ctx(2);
    float one[] = {-3.0f};
    float two[] = {-INFINITY, 2.0f};
    float nan_row[] = {NAN, 1.0f, NAN, -INFINITY};
    float inf_row[] = {1.0f, INFINITY, NAN, 50.0f, INFINITY, -INFINITY};
    float four[] = {-INFINITY, logf(0.5f), logf(0.2f), logf(0.3f)}; /* n = 3 */
    int inf_hits[6] = {0};
    bool k3[4] = {false}, k2[4] = {false};
    for (uint64_t c = 0; c < 2000; c++) {
        KT_INT_EQ(sample1(ctx, one, 1, params(1.0f, 0, 1.0f, 0.0f, 3, c)), 0);
        KT_INT_EQ(sample1(ctx, two, 2, params(0.9f, 0, 1.0f, 0.0f, 3, c)), 1);
        KT_INT_EQ(sample1(ctx, nan_row, 4, params(1.0f, 0, 1.0f, 0.0f, 3, c)), 1);
        inf_hits[sample1(ctx, inf_row, 6, params(1.0f, 0, 1.0f, 0.0f, 3, c))]++;
        k3[sample1(ctx, four, 4, params(1.0f, 3, 1.0f, 0.0f, 4, c))] = true;
        k2[sample1(ctx, four, 4, params(1.0f, 2, 1.0f, 0.0f, 4, c))] = true;
    }
    KT_MSG(inf_hits[1] + inf_hits[4] == 2000 && inf_hits[1] > 850 && inf_hits[4] > 850,
           "+inf tokens drawn %d and %d times of 2000", inf_hits[1], inf_hits[4]);
    KT_CHECK(!k3[0] && k3[1] && k3[2] && k3[3]);
    KT_CHECK(!k2[0] && k2[1] && !k2[2] && k2[3]);
    kern_ctx_free(ctx);
}
END_TEST

int main(void)
{
    Suite *s = suite_create("kernels_cpu_sample");
    TCase *tc = tcase_create("core");
    tcase_set_timeout(tc, 300);
    tcase_add_test(tc, test_greedy);
    tcase_add_test(tc, test_deterministic_and_spread);
    tcase_add_test(tc, test_topk1_tiny_topp_equal_greedy);
    tcase_add_test(tc, test_distribution_matches_softmax);
    tcase_add_test(tc, test_filters_keep_expected_sets);
    tcase_add_test(tc, test_multi_row);
    tcase_add_test(tc, test_id_order_inverse_cdf);
    tcase_add_test(tc, test_id_order_edges);
    suite_add_tcase(s, tc);
    return test_run_suite(s);
}
