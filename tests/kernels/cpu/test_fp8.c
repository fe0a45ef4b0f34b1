/* tests/kernels/cpu/test_fp8.c: the software fp8 e4m3 conversions of
 * kernels/kern_fp8.h (the KV cache element of --kv-cache-dtype fp8) against
 * the format's definition, written here independently:
 *   - decode: each of the 256 codes against (-1)^s * 2^(E-7) * (1 + m/8)
 *     (E > 0), (-1)^s * 2^-6 * m/8 (E == 0), NaN for S.1111.111, computed
 *     in double with pow(); plus a table of named codes (0x38 = 1, 0x7E =
 *     448, 0x01 = 2^-9, ...);
 *   - round trip: encode(decode(c)) == c for the 254 non-NaN codes (-0
 *     included: 0x80 stays 0x80);
 *   - encode: the nearest finite e4m3 value, ties to the even code, +-448
 *     past the largest (saturating, infinities too), NaN to a NaN code. The
 *     reference brackets |x| between the two nearest of the 127
 *     non-negative finite values found by scanning them (the negative codes
 *     mirror them), compares the exact distances and attaches x's sign
 *     bit. Checked on a table of hand-derived cases (subnormals, ties at
 *     every kind of boundary, 448, 464, 465, 1e30, inf, NaN) and on random
 *     inputs: every midpoint of two neighbours and its float neighbours,
 *     log-uniform magnitudes over [2^-14, 2^10], and raw random bit
 *     patterns.
 */
#include <float.h>
#include <math.h>

#include "common/rng.h"
#include "kernels/kern_fp8.h"
#include "kt_util.h"

/* The value of code c by the format's definition (double, exact). */
static double ref_decode(int c)
{
    const int s = c >> 7, E = (c >> 3) & 15, m = c & 7;
    if (E == 15 && m == 7)
        return NAN;
    double v = E == 0 ? pow(2.0, -6.0) * (m / 8.0) : pow(2.0, E - 7.0) * (1.0 + m / 8.0);
    return s ? -v : v;
}

/* The e4m3 code nearest x (ties to the even code), saturating; NaN codes
 * for NaN. Brackets |x| among the non-negative finite codes 0..0x7E. */
static int ref_encode(float x)
{
    const int sign = signbit(x) ? 0x80 : 0;
    if (isnan(x))
        return sign | 0x7F;
    const double a = fabs((double)x);
    int lo = -1, hi = -1; /* largest code <= a, smallest code >= a */
    for (int c = 0; c <= 0x7E; c++) {
        const double v = ref_decode(c);
        if (v <= a && (lo < 0 || v > ref_decode(lo)))
            lo = c;
        if (v >= a && (hi < 0 || v < ref_decode(hi)))
            hi = c;
    }
    if (hi < 0) /* beyond 448: saturate */
        return sign | lo;
    if (lo == hi)
        return sign | lo;
    /* exact (Sterbenz: lo and hi lie within a factor 2 of a), except for
     * lo = 0 and a < hi / 2, where rounding dhi cannot take it below a */
    const double dlo = a - ref_decode(lo), dhi = ref_decode(hi) - a;
    if (dlo < dhi)
        return sign | lo;
    if (dhi < dlo)
        return sign | hi;
    return sign | (lo % 2 == 0 ? lo : hi); /* a tie: the even code */
}

static void check_encode(float x)
{
    const int got = kern_f32_to_e4m3(x), want = ref_encode(x);
    KT_MSG(got == want, "encode(%a = %.9g): 0x%02X, want 0x%02X", (double)x, (double)x, got, want);
}

START_TEST(test_decode_all_codes)
{
    int nan_codes = 0;
    for (int c = 0; c < 256; c++) {
        const double want = ref_decode(c);
        const float got = kern_e4m3_to_f32((uint8_t)c);
        if (isnan(want)) {
            KT_MSG(isnan(got), "code 0x%02X: %g, want NaN", c, (double)got);
            nan_codes++;
            continue;
        }
        KT_MSG((double)got == want && (signbit(got) != 0) == (c >= 0x80), "code 0x%02X: %.9g, want %.9g", c,
               (double)got, want);
    }
    KT_INT_EQ(nan_codes, 2); /* 0x7F and 0xFF: no infinities */
    static const struct {
        uint8_t code;
        float value;
    } named[] = {
        {0x00, 0.0f},         {0x01, 0x1p-9f},  {0x07, 0x7p-9f},      {0x08, 0x1p-6f}, {0x0F, 0x1.ep-6f},
        {0x38, 1.0f},         {0x3F, 1.875f},   {0x40, 2.0f},         {0x77, 240.0f},  {0x78, 256.0f},
        {0x7D, 416.0f},       {0x7E, 448.0f},   {0xB8, -1.0f},        {0xFE, -448.0f}, {0x81, -0x1p-9f},
    };
    for (size_t i = 0; i < sizeof named / sizeof named[0]; i++)
        KT_MSG(kern_e4m3_to_f32(named[i].code) == named[i].value, "code 0x%02X: %g, want %g", named[i].code,
               (double)kern_e4m3_to_f32(named[i].code), (double)named[i].value);
    const float mz = kern_e4m3_to_f32(0x80);
    KT_CHECK(mz == 0.0f && signbit(mz)); /* -0 */
    KT_CHECK(kern_e4m3_to_f32(0x7E) == KERN_FP8_E4M3_MAX);
}
END_TEST

START_TEST(test_round_trip)
{
    int n = 0;
    for (int c = 0; c < 256; c++) {
        if ((c & 0x7F) == 0x7F)
            continue;
        const int back = kern_f32_to_e4m3(kern_e4m3_to_f32((uint8_t)c));
        KT_MSG(back == c, "encode(decode(0x%02X)) = 0x%02X", c, back);
        n++;
    }
    KT_INT_EQ(n, 254);
}
END_TEST

START_TEST(test_encode_table)
{
    static const struct {
        float x;
        int code;
    } rows[] = {
        {0.0f, 0x00},
        {-0.0f, 0x80},
        {0x1p-9f, 0x01},         /* smallest subnormal */
        {0x1p-10f, 0x00},        /* tie 0 | 2^-9: even 0 */
        {-0x1p-10f, 0x80},       /* ... keeping the sign: -0 */
        {0x1.000002p-10f, 0x01}, /* just past the tie */
        {0x3p-10f, 0x02},        /* tie 2^-9 | 2^-8: even 0x02 */
        {0x5p-10f, 0x02},        /* tie 0x02 | 0x03: even 0x02 */
        {0x7p-9f, 0x07},         /* largest subnormal */
        {0xfp-10f, 0x08},        /* tie 7*2^-9 | 2^-6 (subnormal | normal): even 0x08 */
        {0x1p-6f, 0x08},         /* smallest normal */
        {1e-30f, 0x00},
        {1e-40f, 0x00},          /* an fp32 subnormal */
        {-1e-40f, 0x80},
        {1.0f, 0x38},
        {1.0625f, 0x38},         /* tie 1 | 1.125: even 0x38 */
        {1.1875f, 0x3A},         /* tie 1.125 | 1.25: even 0x3A */
        {1.0625001f, 0x39},
        {-1.1875f, 0xBA},
        {1.9375f, 0x40},         /* tie 1.875 | 2: carries into the next binade */
        {0.1f, 0x1D},            /* 0.1 -> 0.1015625 = 2^-4 * 1.625 */
        {-3.3f, 0xC5},           /* -3.25 */
        {240.0f, 0x77},
        {248.0f, 0x78},          /* tie 240 | 256: even 0x78 */
        {432.0f, 0x7E},          /* tie 416 | 448: even 0x7E */
        {448.0f, 0x7E},
        {449.0f, 0x7E},
        {463.99997f, 0x7E},
        {464.0f, 0x7E},          /* tie 448 | (480): saturates */
        {465.0f, 0x7E},
        {-465.0f, 0xFE},
        {1e30f, 0x7E},
        {FLT_MAX, 0x7E},
        {-1e30f, 0xFE},
        {INFINITY, 0x7E},
        {-INFINITY, 0xFE},
    };
    for (size_t i = 0; i < sizeof rows / sizeof rows[0]; i++) {
        const int got = kern_f32_to_e4m3(rows[i].x);
        KT_MSG(got == rows[i].code, "row %zu: encode(%a) = 0x%02X, want 0x%02X", i, (double)rows[i].x, got,
               rows[i].code);
        KT_MSG(ref_encode(rows[i].x) == rows[i].code, "row %zu: the reference gives 0x%02X", i,
               ref_encode(rows[i].x));
    }
    /* NaN -> a NaN code (0x7F with the sign), which decodes to NaN */
    const uint8_t n1 = kern_f32_to_e4m3(NAN), n2 = kern_f32_to_e4m3(-NAN);
    KT_CHECK((n1 & 0x7F) == 0x7F && (n2 & 0x7F) == 0x7F);
    KT_CHECK(isnan(kern_e4m3_to_f32(n1)) && isnan(kern_e4m3_to_f32(n2)));
}
END_TEST

static float bits_float(uint32_t u)
{
    float f;
    memcpy(&f, &u, sizeof f);
    return f;
}

START_TEST(test_encode_random)
{
    int n = 0;
    /* every midpoint of two neighbouring values (each a tie), its float
     * neighbours, and the same negated */
    for (int c = 0; c < 0x7E; c++) {
        const float mid = (kern_e4m3_to_f32((uint8_t)c) + kern_e4m3_to_f32((uint8_t)(c + 1))) / 2.0f;
        const float xs[] = {mid, nextafterf(mid, 0.0f), nextafterf(mid, INFINITY)};
        for (int k = 0; k < 3; k++) {
            check_encode(xs[k]);
            check_encode(-xs[k]);
            n += 2;
        }
    }
    /* log-uniform magnitudes over [2^-14, 2^10], both signs */
    for (uint64_t i = 0; i < 200000; i++) {
        const double e = -14.0 + 24.0 * rng_uniform(11, i);
        const float x = (float)ldexp(1.0 + rng_uniform(12, i), (int)floor(e));
        check_encode(rng_uniform(13, i) < 0.5 ? x : -x);
        n++;
    }
    /* raw bit patterns: every exponent, NaNs and infinities included */
    for (uint64_t i = 0; i < 100000; i++) {
        const uint32_t u = (uint32_t)(rng_mix64(i * 7919 + 5) >> 32);
        check_encode(bits_float(u));
        n++;
    }
    KT_CHECK(n > 300000);
}
END_TEST

int main(void)
{
    Suite *s = suite_create("kernels_fp8");
    TCase *tc = tcase_create("core");
    tcase_set_timeout(tc, 300);
    tcase_add_test(tc, test_decode_all_codes);
    tcase_add_test(tc, test_round_trip);
    tcase_add_test(tc, test_encode_table);
    tcase_add_test(tc, test_encode_random);
    suite_add_tcase(s, tc);
    return test_run_suite(s);
}
