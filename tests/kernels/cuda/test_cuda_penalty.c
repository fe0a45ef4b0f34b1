/* tests/kernels/cuda/test_cuda_penalty.c: the GPU penalty ops
 * (kernels/cuda/penalty.cu) against the CPU twin (kernels/cpu/penalty.c),
 * bit for bit: kern_penalty_init on random token lists (counts compared
 * whole), then kern_penalty_apply over several rows with different
 * parameters in one call (no penalties, repetition only, presence +
 * frequency with a pending token, bias only, everything, counts only),
 * on odd vocabularies from 1 to past several 4096-logit chunks, with
 * NaN / -inf / +inf logits, and guard regions around the logits and the
 * counts. A row without penalties must come back untouched. */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "common/alloc.h"
#include "common/rng.h"
#include "kt_harness.h"

#define PT_ROWS 6
#define PT_BIAS 300

/* Random ids in [0, vocab), drawn so that repeats are common. */
static void rand_tokens(int32_t *t, int n, int vocab, uint64_t seed)
{
    int pool = vocab < 64 ? vocab : 64;
    for (int i = 0; i < n; i++) {
        int64_t v = (int64_t)(rng_uniform(seed, (uint64_t)i) * pool) * 7919 + (int64_t)(seed % 13);
        t[i] = (int32_t)(v % vocab);
    }
}

/* Row j's parameters (without the pointers), varied by j and a seed. */
static kern_sample_params row_params(int j, uint64_t seed, int vocab)
{
    kern_sample_params p = {.top_p = 1, .count_token = -1, .repetition = 1};
    double u = rng_uniform(seed, 99);
    switch (j % PT_ROWS) {
    case 0: break;
    case 1: p.repetition = (float)(0.1 + 1.9 * u); break;
    case 2: p.presence = (float)(4 * u - 2); p.frequency = (float)(2 - 4 * u); p.count_token = (int)(u * vocab); break;
    case 3: break; /* bias only */
    case 4:
        p.presence = 2; p.frequency = -2; p.repetition = (float)(0.05 + 1.95 * u);
        p.count_token = vocab - 1;
        break;
    default: p.count_token = 0; break;
    }
    return p;
}

static int penalty_case(int vocab, uint64_t seed)
{
    const int r = PT_ROWS, n_tok = 1 + (int)(rng_uniform(seed, 1) * 700);
    const size_t n = (size_t)r * vocab;
    char name[64];
    snprintf(name, sizeof name, "penalty vocab %d", vocab);
    float *x = inferd_malloc(n * sizeof *x);
    for (size_t i = 0; i < n; i++) {
        double u = rng_uniform(seed ^ 0xF00Dull, i);
        x[i] = u < 0.02 ? NAN : u < 0.04 ? -INFINITY : u < 0.045 ? INFINITY : u < 0.06 ? 0.0f : (float)(20 * u - 10);
    }
    int32_t *tok = inferd_malloc((size_t)n_tok * 4);
    kern_logit_bias *bias = inferd_malloc((size_t)r * PT_BIAS * sizeof *bias);
    int n_bias = vocab < PT_BIAS ? vocab : PT_BIAS;
    for (int j = 0; j < r; j++) /* distinct ids per row: a rotation of 0..n_bias-1 scaled by a unit */
        for (int k = 0; k < n_bias; k++)
            bias[j * PT_BIAS + k] = (kern_logit_bias){(int32_t)((k + j) % vocab),
                                                      (float)(200 * rng_uniform(seed + (uint64_t)j, (uint64_t)k) - 100)};

    /* both backends: counts (guarded on the GPU), bias lists, params */
    int32_t *ccounts = kern_alloc(kt_cpu, n * 4);
    kern_logit_bias *cbias = kern_alloc(kt_cpu, (size_t)r * PT_BIAS * sizeof *bias);
    memcpy(cbias, bias, (size_t)r * PT_BIAS * sizeof *bias);
    kt_gbuf gc, gl;
    int32_t *gcounts = kt_gbuf_alloc(&gc, n * 4, 0);
    kern_logit_bias *gbias = kt_gpu_bytes(bias, (size_t)r * PT_BIAS * sizeof *bias);
    int32_t *ctok = kern_alloc(kt_cpu, (size_t)n_tok * 4);
    int32_t *gtok_dev = kern_alloc(kt_gpu, (size_t)n_tok * 4);
    kern_sample_params cp[PT_ROWS], gp[PT_ROWS];
    for (int j = 0; j < r; j++) {
        rand_tokens(tok, n_tok, vocab, seed + 17 * (uint64_t)j);
        int np = (int)(rng_uniform(seed, 50 + (uint64_t)j) * (n_tok + 1));
        memcpy(ctok, tok, (size_t)n_tok * 4);
        kern_penalty_init(kt_cpu, ccounts + (size_t)j * vocab, ctok, n_tok, np, vocab);
        kern_memcpy_h2d(kt_gpu, gtok_dev, tok, (size_t)n_tok * 4);
        kern_penalty_init(kt_gpu, gcounts + (size_t)j * vocab, gtok_dev, n_tok, np, vocab);
        cp[j] = gp[j] = row_params(j, seed + (uint64_t)j, vocab);
        bool has_counts = j % PT_ROWS != 0 && j % PT_ROWS != 3;
        bool has_bias = j % PT_ROWS == 3 || j % PT_ROWS == 4;
        if (has_counts) {
            cp[j].counts = ccounts + (size_t)j * vocab;
            gp[j].counts = gcounts + (size_t)j * vocab;
        }
        if (has_bias) {
            cp[j].bias = cbias + (size_t)j * PT_BIAS;
            gp[j].bias = gbias + (size_t)j * PT_BIAS;
            cp[j].n_bias = gp[j].n_bias = n_bias;
        }
    }
    int bad = 0;
    int32_t *got_counts = inferd_malloc(n * 4);
    kern_sync(kt_gpu);
    kt_gbuf_read(&gc, got_counts);
    for (size_t i = 0; i < n; i++)
        bad += got_counts[i] != ccounts[i];
    if (bad)
        printf("  %s: %d init counts differ\n", name, bad);

    float *cl = kt_cpu_f32(x, n);
    float *gl_dev = kt_gbuf_alloc(&gl, n * 4, 0);
    kern_memcpy_h2d(kt_gpu, gl_dev, x, n * 4);
    void *gparams = kt_gpu_bytes(gp, sizeof gp);
    kern_penalty_apply(kt_cpu, cl, cp, r, vocab);
    kern_penalty_apply(kt_gpu, gl_dev, gparams, r, vocab);
    float *got = inferd_malloc(n * 4);
    kt_gbuf_read(&gl, got);
    kt_gbuf_read(&gc, got_counts);
    int bad_l = 0, bad_c = 0;
    for (size_t i = 0; i < n; i++) {
        uint32_t a, b;
        memcpy(&a, &got[i], 4);
        memcpy(&b, &cl[i], 4);
        /* NaN in, NaN out on both; the payload is not portable (x86 keeps
         * the input's, the GPU writes its canonical NaN) */
        const bool both_nan = isnan(got[i]) && isnan(cl[i]);
        if (a != b && !both_nan && bad_l++ < 5)
            printf("  %s row %zu token %zu: gpu %.9g cpu %.9g\n", name, i / vocab, i % vocab, got[i], cl[i]);
        bad_c += got_counts[i] != ccounts[i];
    }
    /* row 0 has neither counts nor bias: the input, bit for bit */
    bad += memcmp(got, x, (size_t)vocab * 4) != 0;
    bad += bad_l + bad_c + kt_gbuf_guards_bad(&gl, name) + kt_gbuf_guards_bad(&gc, name);
    if (bad_c)
        printf("  %s: %d counts differ after apply\n", name, bad_c);
    kt_record("penalty", bad, 0, 0);

    kt_gbuf_free(&gl);
    kt_gbuf_free(&gc);
    kern_free(kt_gpu, gparams);
    kern_free(kt_gpu, gbias);
    kern_free(kt_gpu, gtok_dev);
    kern_free(kt_cpu, cl);
    kern_free(kt_cpu, ccounts);
    kern_free(kt_cpu, cbias);
    kern_free(kt_cpu, ctok);
    inferd_free(got);
    inferd_free(got_counts);
    inferd_free(bias);
    inferd_free(tok);
    inferd_free(x);
    return bad;
}

/* Fixed odd sizes: below one warp, around the 4096-logit chunk, Llama-3's. */
START_TEST(test_penalty_sizes)
{
    const int vocabs[] = {1, 7, 301, 4095, 4097, 32003, 128256};
    int bad = 0;
    for (int v = 0; v < 7; v++) {
        if (kt_quick && vocabs[v] > 40000)
            continue;
        bad += penalty_case(vocabs[v], 4242 + (uint64_t)v);
    }
    ck_assert_int_eq(bad, 0);
}
END_TEST

/* Random vocabulary sizes from a fresh seed. */
START_TEST(test_penalty_random)
{
    const uint64_t seed = kt_seed() ^ 0x9E4Aull;
    printf("  penalty random: INFERD_TEST_SEED=%llu\n", (unsigned long long)kt_seed());
    int bad = 0;
    for (int c = 0; c < 4; c++) {
        int vocab = 1 + (int)(rng_uniform(seed, (uint64_t)c) * (kt_quick ? 9000 : 150000));
        bad += penalty_case(vocab, seed + 1000 * (uint64_t)c);
    }
    ck_assert_int_eq(bad, 0);
}
END_TEST

TCase *kt_tcase_penalty(void)
{
    TCase *tc = tcase_create("penalty");
    tcase_set_timeout(tc, 600);
    tcase_add_test(tc, test_penalty_sizes);
    tcase_add_test(tc, test_penalty_random);
    return tc;
}
