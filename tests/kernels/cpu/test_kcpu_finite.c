/* tests/kernels/cpu/test_kcpu_finite.c: the non-finite weight count
 * (kern_weights_count_nonfinite, kernels/cpu/weights.c), the check model
 * load runs over the weight slab.
 *
 * Randomized: every dtype (F32, F16, BF16), odd sizes from 0 to 100k, random
 * bit patterns for the finite values (so every mantissa / sign / exponent
 * combination short of an all-ones exponent appears), the finite edge cases
 * (largest finite, subnormals, -0) at fixed places, and a known number of
 * NaN / +-Inf patterns (quiet, signalling, negative, all-ones) planted at
 * random distinct places, first and last element included. Each buffer sits
 * between guards full of NaN bit patterns (kt_util.h KT_SENTINEL is a NaN in
 * f32 and in its high half for f16/bf16), so a read past either end shows up
 * as a wrong count. A list of weights gets one count each, zero-size ones
 * included. Seed: $INFERD_TEST_SEED or time-based, printed.
 */
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

#include "common/alloc.h"
#include "kt_util.h"

static uint64_t g_seed;

/* Finite edge values and non-finite patterns per dtype (bits). */
static const uint32_t k_edge_f32[] = {0x7F7FFFFFu, 0xFF7FFFFFu, 0x00000001u, 0x80000000u, 0x007FFFFFu};
static const uint32_t k_edge_h16[2][5] = {{0x7BFF, 0xFBFF, 0x0001, 0x8000, 0x03FF},  /* f16 */
                                          {0x7F7F, 0xFF7F, 0x0001, 0x8000, 0x007F}}; /* bf16 */
static const uint32_t k_bad_f32[] = {0x7F800000u, 0xFF800000u, 0x7FC00000u, 0x7F800001u, 0xFFFFFFFFu};
static const uint32_t k_bad_h16[2][5] = {{0x7C00, 0xFC00, 0x7E00, 0x7C01, 0xFFFF},
                                         {0x7F80, 0xFF80, 0x7FC0, 0x7F81, 0xFFFF}};

static void put(void *x, kern_dtype dt, size_t i, uint32_t bits)
{
    if (dt == KERN_DTYPE_F32)
        ((uint32_t *)x)[i] = bits;
    else
        ((uint16_t *)x)[i] = (uint16_t)bits;
}

/* Fill x[0, n) of dtype dt: random finite bit patterns, the edge values,
 * then n_bad non-finite patterns at distinct random places (element 0 and
 * n - 1 among them when n_bad >= 2). Returns the planted count. */
static int64_t fill_case(void *x, kern_dtype dt, size_t n, size_t n_bad, uint64_t seed)
{
    const int h = dt == KERN_DTYPE_BF16;
    const uint32_t exp_mask = dt == KERN_DTYPE_F32 ? 0x7F800000u : dt == KERN_DTYPE_F16 ? 0x7C00u : 0x7F80u;
    const uint32_t low_exp_bit = dt == KERN_DTYPE_F32   ? 0x00800000u
                                 : dt == KERN_DTYPE_F16 ? 0x0400u
                                                        : 0x0080u;
    for (size_t i = 0; i < n; i++) {
        uint32_t b = (uint32_t)(rng_uniform(seed, i) * 4294967296.0);
        if (dt != KERN_DTYPE_F32)
            b &= 0xFFFFu;
        if ((b & exp_mask) == exp_mask)
            b &= ~low_exp_bit; /* keep it finite */
        put(x, dt, i, b);
    }
    for (size_t e = 0; e < 5 && e < n; e++)
        put(x, dt, (e * 7919) % n, dt == KERN_DTYPE_F32 ? k_edge_f32[e] : k_edge_h16[h][e]);
    if (n_bad > n)
        n_bad = n;
    uint8_t *taken = inferd_calloc(n ? n : 1, 1);
    size_t planted = 0;
    for (uint64_t k = 0; planted < n_bad; k++) {
        size_t i = planted == 0 ? 0 : planted == 1 ? n - 1 : (size_t)(rng_uniform(seed + 1, k) * (double)n);
        if (i >= n || taken[i])
            continue;
        taken[i] = 1;
        const uint32_t *bad = dt == KERN_DTYPE_F32 ? k_bad_f32 : k_bad_h16[h];
        put(x, dt, i, bad[planted % 5]);
        planted++;
    }
    inferd_free(taken);
    return (int64_t)planted;
}

START_TEST(test_count_random)
{
    kern_ctx *ctx = kt_ctx(_i % 2 ? 3 : 0); /* odd iterations: 3 threads, uneven split */
    const size_t sizes[] = {0, 1, 2, 7, 8, 33, 1000, 4099, 100003};
    const size_t bads[] = {0, 1, 2, 5, 97};
    const kern_dtype dts[] = {KERN_DTYPE_F32, KERN_DTYPE_F16, KERN_DTYPE_BF16};
    int cases = 0;
    for (size_t d = 0; d < 3; d++)
        for (size_t s = 0; s < sizeof sizes / sizeof sizes[0]; s++)
            for (size_t b = 0; b < sizeof bads / sizeof bads[0]; b++) {
                const size_t n = sizes[s], es = kern_dtype_size(dts[d]);
                void *buf = kt_galloc(ctx, (n * es + 3) / 4); /* guards: NaN patterns */
                const uint64_t seed = g_seed + (uint64_t)(1000 * _i + 100 * d + 10 * s + b);
                const int64_t want = fill_case(buf, dts[d], n, bads[b], seed);
                kern_weight w = {buf, dts[d], 1, (int64_t)n};
                if (n % 7 == 0 && n > 0) /* same elements as a matrix */
                    w = (kern_weight){buf, dts[d], 7, (int64_t)n / 7};
                int64_t got = -1;
                KT_INT_EQ(kern_weights_count_nonfinite(ctx, &w, 1, &got), INFERD_OK);
                KT_MSG(got == want, "%s n=%zu planted %lld: counted %lld (seed %llu)",
                       kern_dtype_name(dts[d]), n, (long long)want, (long long)got, (unsigned long long)seed);
                kt_gcheck(buf, (n * es + 3) / 4, "count_nonfinite");
                kt_gfree(ctx, buf);
                cases++;
            }
    ck_assert_int_eq(cases, 3 * 9 * 5);
    kern_ctx_free(ctx);
}
END_TEST

/* A list: one count per weight, in order, zero-size weights count 0, and a
 * view at an odd element offset (a source tensor inside a fused weight). */
START_TEST(test_count_list)
{
    kern_ctx *ctx = kt_ctx(0);
    const size_t n = 3001;
    uint16_t *a = kern_alloc(ctx, n * 2);
    float *b = kern_alloc(ctx, n * 4);
    const int64_t wa = fill_case(a, KERN_DTYPE_BF16, n, 3, g_seed + 7);
    const int64_t wb = fill_case(b, KERN_DTYPE_F32, n, 0, g_seed + 8);
    ((uint32_t *)b)[1500] = 0x7FC00000u;
    const struct {
        kern_weight w;
        int64_t want;
    } rows[] = {
        {{a, KERN_DTYPE_BF16, 1, (int64_t)n}, wa},
        {{NULL, KERN_DTYPE_F16, 0, 64}, 0},
        {{b, KERN_DTYPE_F32, 3, 1000}, wb + 1},
        {{b + 1501, KERN_DTYPE_F32, 1, 1500}, 0}, /* the part after the NaN */
        {{b + 1499, KERN_DTYPE_F32, 1, 3}, 1},    /* a 3-element view around it */
        {{a + 1, KERN_DTYPE_BF16, 3, 333}, -1},   /* odd offset: counted below */
    };
    enum { N = sizeof rows / sizeof rows[0] };
    kern_weight ws[N];
    for (int i = 0; i < N; i++)
        ws[i] = rows[i].w;
    int64_t got[N];
    ck_assert_int_eq(kern_weights_count_nonfinite(ctx, ws, N, got), INFERD_OK);
    int64_t slow = 0;
    for (size_t i = 1; i < 1 + 999; i++)
        slow += (a[i] & 0x7F80u) == 0x7F80u;
    for (int i = 0; i < N; i++)
        ck_assert_msg(got[i] == (rows[i].want >= 0 ? rows[i].want : slow), "row %d: %lld", i,
                      (long long)got[i]);
    ck_assert_int_eq(kern_weights_count_nonfinite(ctx, NULL, 0, NULL), INFERD_OK);
    kern_free(ctx, a);
    kern_free(ctx, b);
    kern_ctx_free(ctx);
}
END_TEST

int main(void)
{
    const char *s = getenv("INFERD_TEST_SEED");
    g_seed = s && *s ? strtoull(s, NULL, 10) : (uint64_t)time(NULL);
    printf("test_kcpu_finite: seed %llu (INFERD_TEST_SEED)\n", (unsigned long long)g_seed);
    Suite *su = suite_create("kcpu_finite");
    TCase *tc = tcase_create("count");
    tcase_add_loop_test(tc, test_count_random, 0, 2);
    tcase_add_test(tc, test_count_list);
    suite_add_tcase(su, tc);
    return test_run_suite(su);
}
