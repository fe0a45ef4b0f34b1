/* tests/kernels/cuda/test_cuda_sample.c: the GPU sampler against the CPU
 * twin (kernels/cpu/sample.c), token for token.
 *
 * Logits are rounded to bf16 (as a bf16 model's would be), which creates
 * many exact ties, so lowest-id tie breaking is exercised everywhere. Greedy
 * rows must equal the CPU argmax; seeded rows must equal the CPU's token for
 * the same (seed, counter), over temperature-only, top-k (small and larger
 * than the GPU's 2048-rank chunk), top-p, min-p and combined filters, on a
 * peaked row, a flat row (the draw walks many chunks) and rows with NaN,
 * +inf and -inf logits. Rows without truncation (step 4' of sample.c,
 * drawn in id order) get their own case: vocab sizes 1 to 128256 (around
 * the 1024-thread segment split), every way of switching the filters off
 * (top-k 0, negative, = the candidate count, >= vocab; top-p >= 1; min-p
 * <= 0) next to truncating and greedy rows in the same batch. The
 * algorithms agree exactly except when u lands within fp64 rounding of a
 * CDF boundary (the GPU sums large sets in another order); over these few
 * hundred draws that has probability ~1e-10.
 */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "common/alloc.h"
#include "common/half.h"
#include "common/rng.h"
#include "kt_harness.h"

enum { ROW_PEAKED, ROW_FLAT, ROW_TIES, ROW_SPECIAL, ROW_KINDS };

static void fill_row(float *x, int vocab, int kind, uint64_t seed)
{
    switch (kind) {
    case ROW_PEAKED: /* LLM-like: a few strong logits over a broad tail */
        for (int i = 0; i < vocab; i++) {
            double u = rng_uniform(seed, (uint64_t)i);
            x[i] = (float)(-8.0 + 6.0 * u);
        }
        for (int k = 0; k < 20; k++)
            x[(int)(rng_uniform(seed + 1, (uint64_t)k) * vocab)] = (float)(4.0 + 6.0 * rng_uniform(seed + 2, (uint64_t)k));
        break;
    case ROW_FLAT:
        for (int i = 0; i < vocab; i++)
            x[i] = (float)(2.0 * rng_uniform(seed, (uint64_t)i) - 1.0);
        break;
    case ROW_TIES: /* a handful of distinct values */
        for (int i = 0; i < vocab; i++)
            x[i] = (float)((int)(rng_uniform(seed, (uint64_t)i) * 4)) * 0.5f;
        break;
    default: /* NaN / -inf sprinkled, two +inf */
        for (int i = 0; i < vocab; i++) {
            double u = rng_uniform(seed, (uint64_t)i);
            x[i] = u < 0.05 ? NAN : u < 0.1 ? -INFINITY : (float)(10.0 * u - 5.0);
        }
        x[vocab / 3] = INFINITY;
        x[vocab / 2] = INFINITY;
        break;
    }
    for (int i = 0; i < vocab; i++)
        if (isfinite(x[i]))
            x[i] = half_bf16_to_f32(half_f32_to_bf16(x[i]));
}

/* Sample r rows on both backends; returns the number of differing tokens. */
static int sample_case(const char *name, int vocab, int r, const float *logits, const kern_sample_params *prm)
{
    const size_t n = (size_t)r * vocab;
    float *cl = kt_cpu_f32(logits, n);
    int32_t *ctok = inferd_malloc((size_t)r * 4), *gtok = inferd_malloc((size_t)r * 4);
    size_t cws = kern_sample_workspace_bytes(kt_cpu, r, vocab);
    void *cw = kern_alloc(kt_cpu, cws);
    kern_sample(kt_cpu, ctok, cl, prm, r, vocab, cw);
    void *dl = kt_gpu_bytes(logits, n * 4), *dp = kt_gpu_bytes(prm, (size_t)r * sizeof *prm);
    size_t gws = kern_sample_workspace_bytes(kt_gpu, r, vocab);
    void *gw = kern_alloc(kt_gpu, gws);
    kt_gbuf g;
    void *dt = kt_gbuf_alloc(&g, (size_t)r * 4, 0);
    kern_sample(kt_gpu, dt, dl, dp, r, vocab, gw);
    kt_gbuf_read(&g, gtok);
    int bad = kt_gbuf_guards_bad(&g, name);
    for (int j = 0; j < r; j++) {
        if (ctok[j] != gtok[j]) {
            printf("  sample %s row %d (T=%g k=%d p=%g min_p=%g seed=%llu ctr=%llu): gpu %d cpu %d\n", name, j,
                   prm[j].temperature, prm[j].top_k, prm[j].top_p, prm[j].min_p, (unsigned long long)prm[j].seed,
                   (unsigned long long)prm[j].counter, gtok[j], ctok[j]);
            bad++;
        }
    }
    kt_record(prm[0].temperature > 0.0f ? "sample" : "sample_greedy", bad, 0, 0);
    kt_gbuf_free(&g);
    kern_free(kt_gpu, gw);
    kern_free(kt_gpu, dp);
    kern_free(kt_gpu, dl);
    kern_free(kt_cpu, cw);
    kern_free(kt_cpu, cl);
    inferd_free(gtok);
    inferd_free(ctok);
    return bad;
}

START_TEST(test_sample_greedy)
{
    const int vocabs[] = {512, 32000, 128256};
    int bad = 0;
    for (int v = 0; v < 3; v++) {
        const int vocab = vocabs[v], r = 8;
        float *x = inferd_malloc((size_t)r * vocab * sizeof(float));
        kern_sample_params prm[8];
        for (int j = 0; j < r; j++) {
            fill_row(x + (size_t)j * vocab, vocab, j % ROW_KINDS, 500 + (uint64_t)(v * 10 + j));
            memset(&prm[j], 0, sizeof prm[j]);
            prm[j].temperature = j == 5 ? -1.0f : 0.0f;
            prm[j].top_p = 1.0f;
        }
        /* all-NaN row -> 0; all -inf row -> 0; a row tied at the max twice */
        for (int i = 0; i < vocab; i++) {
            x[(size_t)6 * vocab + i] = NAN;
            x[(size_t)7 * vocab + i] = -INFINITY;
        }
        x[(size_t)1 * vocab + 77] = x[(size_t)1 * vocab + 33] = 20.0f;
        bad += sample_case("greedy", vocab, r, x, prm);
        inferd_free(x);
    }
    ck_assert_int_eq(bad, 0);
}
END_TEST

/* Filter settings: temperature, top_k, top_p, min_p. */
static const struct {
    float t;
    int k;
    float p, min_p;
} k_cfg[] = {
    {1.0f, 0, 1.0f, 0.0f},   {0.7f, 50, 1.0f, 0.0f},  {1.0f, 0, 0.9f, 0.0f},   {1.3f, 0, 1.0f, 0.05f},
    {1.0f, 4000, 0.95f, 0.0f}, {0.5f, 1, 1.0f, 0.0f}, {1.0f, 0, 0.0f, 0.0f},   {0.8f, 40, 0.8f, 0.1f},
    {2.0f, 0, 0.5f, 0.0f},   {1.0f, 3000, 1.0f, 0.0f}, {1.0f, 0, 1.0f, 1.5f},  {1e-3f, 0, 1.0f, 0.0f},
};

START_TEST(test_sample_seeded)
{
    const int vocabs[] = {512, 32000, 128256};
    const int n_cfg = (int)(sizeof k_cfg / sizeof k_cfg[0]);
    int bad = 0;
    for (int v = 0; v < 3; v++) {
        if (kt_quick && v == 2)
            continue;
        const int vocab = vocabs[v], r = 8;
        float *x = inferd_malloc((size_t)r * vocab * sizeof(float));
        kern_sample_params prm[8];
        for (int c = 0; c < n_cfg; c++) {
            for (int j = 0; j < r; j++) {
                fill_row(x + (size_t)j * vocab, vocab, (j + c) % ROW_KINDS, 900 + (uint64_t)(v * 1000 + c * 10 + j));
                memset(&prm[j], 0, sizeof prm[j]);
                prm[j].temperature = k_cfg[c].t;
                prm[j].top_k = k_cfg[c].k;
                prm[j].top_p = k_cfg[c].p;
                prm[j].min_p = k_cfg[c].min_p;
                prm[j].seed = 0x5EEDull * (uint64_t)(c + 1) + (uint64_t)j;
                prm[j].counter = (uint64_t)(v * 7 + j);
            }
            char name[48];
            snprintf(name, sizeof name, "vocab %d cfg %d", vocab, c);
            bad += sample_case(name, vocab, r, x, prm);
        }
        inferd_free(x);
    }
    ck_assert_int_eq(bad, 0);
}
END_TEST

/* Random vocab sizes, row kinds and filter settings from a fresh seed. */
START_TEST(test_sample_random)
{
    const uint64_t seed = kt_seed() ^ 0xABCDull;
    printf("  sample random: INFERD_TEST_SEED=%llu\n", (unsigned long long)kt_seed());
    int bad = 0;
    for (int c = 0; c < 6; c++) {
        uint64_t k = 0, r = seed + (uint64_t)c * 31337;
#define RU() rng_uniform(r, k++)
        const int vocab = 2 + (int)(RU() * (kt_quick ? 20000 : 130000)), rows = 1 + (int)(RU() * 6);
        float *x = inferd_malloc((size_t)rows * vocab * sizeof(float));
        kern_sample_params prm[6];
        for (int j = 0; j < rows; j++) {
            fill_row(x + (size_t)j * vocab, vocab, (int)(RU() * ROW_KINDS), r + (uint64_t)j);
            memset(&prm[j], 0, sizeof prm[j]);
            prm[j].temperature = RU() < 0.1 ? 0.0f : (float)(0.05 + 2.0 * RU());
            prm[j].top_k = RU() < 0.5 ? 0 : 1 + (int)(RU() * 5000);
            prm[j].top_p = RU() < 0.5 ? 1.0f : (float)RU();
            prm[j].min_p = RU() < 0.7 ? 0.0f : (float)(0.3 * RU());
            prm[j].seed = r ^ (uint64_t)j;
            prm[j].counter = (uint64_t)(RU() * 1000);
        }
#undef RU
        char name[48];
        snprintf(name, sizeof name, "random vocab %d", vocab);
        bad += sample_case(name, vocab, rows, x, prm);
        inferd_free(x);
    }
    ck_assert_int_eq(bad, 0);
}
END_TEST

/* Tokens of row x[vocab] with w > 0 at temperature t (sample.c step 3). */
static int count_candidates(const float *x, int vocab, float t)
{
    float m = -INFINITY;
    for (int i = 0; i < vocab; i++)
        m = fmaxf(m, x[i] / t);
    int n = 0;
    for (int i = 0; i < vocab; i++) {
        const float z = x[i] / t;
        n += !isnan(z) && (z == m || exp((double)z - (double)m) > 0.0);
    }
    return n;
}

/* Step 4' rows (no truncation, id order) mixed with truncating and greedy
 * rows; n is the row's candidate count. */
static kern_sample_params id_order_params(int cfg, int vocab, int n, uint64_t seed, uint64_t counter)
{
    kern_sample_params p;
    memset(&p, 0, sizeof p);
    p.temperature = cfg == 6 ? 0.0f : cfg == 7 ? 2.0f : cfg % 2 ? 0.8f : 1.0f;
    p.top_p = cfg == 1 ? 1.5f : 1.0f;
    p.min_p = cfg == 1 ? -0.1f : 0.0f;
    const int32_t ks[8] = {0, -1, vocab, INT32_MAX, n, n > 1 ? n - 1 : 1, 0, 0};
    p.top_k = ks[cfg];
    p.seed = seed;
    p.counter = counter;
    return p;
}

START_TEST(test_sample_id_order)
{
    const int vocabs[] = {1, 2, 1023, 1025, 32000, 128256};
    int bad = 0;
    for (int v = 0; v < 6; v++) {
        const int vocab = vocabs[v], r = 8;
        float *x = inferd_malloc((size_t)r * vocab * sizeof(float));
        kern_sample_params prm[8];
        for (int rep = 0; rep < (kt_quick && vocab > 32000 ? 1 : 3); rep++) {
            for (int j = 0; j < r; j++) {
                float *row = x + (size_t)j * vocab;
                fill_row(row, vocab, (j + rep) % ROW_KINDS, 7000 + (uint64_t)(v * 100 + rep * 10 + j));
                if (j == 7 && vocab > 2) /* mostly dropped: one finite token among NaN / -inf */
                    for (int i = 0; i < vocab; i++)
                        row[i] = i == vocab - 2 ? 1.0f : i % 2 ? NAN : -INFINITY;
                const int cfg = (j + 5 * rep) % 8; /* row 0 never greedy: it names the record */
                const float t = cfg == 6 ? 1.0f : cfg == 7 ? 2.0f : cfg % 2 ? 0.8f : 1.0f;
                const uint64_t seed = 0x1D0ull * (uint64_t)(rep + 1) + (uint64_t)j;
                prm[j] = id_order_params(cfg, vocab, count_candidates(row, vocab, t), seed,
                                         (uint64_t)(v * 13 + j));
            }
            char name[48];
            snprintf(name, sizeof name, "id order vocab %d rep %d", vocab, rep);
            bad += sample_case(name, vocab, r, x, prm);
        }
        inferd_free(x);
    }
    ck_assert_int_eq(bad, 0);
}
END_TEST

TCase *kt_tcase_sample(void)
{
    TCase *tc = tcase_create("sample");
    tcase_set_timeout(tc, 600);
    tcase_add_test(tc, test_sample_greedy);
    tcase_add_test(tc, test_sample_seeded);
    tcase_add_test(tc, test_sample_random);
    tcase_add_test(tc, test_sample_id_order);
    return tc;
}
