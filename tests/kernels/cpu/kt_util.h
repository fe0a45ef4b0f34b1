/* tests/kernels/cpu/kt_util.h: helpers for the CPU kernel tests: contexts,
 * guarded buffers (sentinel elements before and after an output, checked
 * after the op) and random fills. Header-only, static functions. */
#ifndef INFERD_TESTS_KT_UTIL_H
#define INFERD_TESTS_KT_UTIL_H

#include <stdint.h>
#include <string.h>

#include "common/rng.h"
#include "kernels/kernels.h"
#include "test_util.h"

#define KT_GUARD 64                 /* sentinel elements on each side */
#define KT_SENTINEL 0x7FC0DEADu     /* a NaN bit pattern no op produces */

/* Assertions for hot loops. Check's ck_assert* report every passed
 * assertion to the parent process through a pipe (one write(2) each), which
 * makes million-element comparisons take minutes; these only call into Check
 * on failure. */
#define KT_CHECK(cond)                                                        \
    do {                                                                      \
        if (!(cond))                                                          \
            ck_abort_msg("%s:%d: assertion '%s' failed", __FILE__, __LINE__, #cond); \
    } while (0)
#define KT_MSG(cond, ...)                                                     \
    do {                                                                      \
        if (!(cond))                                                          \
            ck_abort_msg(__VA_ARGS__);                                        \
    } while (0)
#define KT_INT_EQ(a, b)                                                       \
    do {                                                                      \
        long long kt_a_ = (long long)(a), kt_b_ = (long long)(b);             \
        if (kt_a_ != kt_b_)                                                   \
            ck_abort_msg("%s:%d: %s == %lld, expected %s == %lld", __FILE__, __LINE__, #a, kt_a_, #b, kt_b_); \
    } while (0)

static inline kern_ctx *kt_ctx(int n_threads)
{
    kern_ctx_opts o = {.backend = KERN_BACKEND_CPU, .n_threads = n_threads, .device_id = 0};
    kern_ctx *ctx = NULL;
    ck_assert_int_eq(kern_ctx_create(&o, &ctx), INFERD_OK);
    return ctx;
}

/* n 4-byte elements with KT_GUARD sentinels on each side; the body is filled
 * with sentinels too. Free with kt_gfree. */
static inline void *kt_galloc(kern_ctx *ctx, size_t n)
{
    uint32_t *p = kern_alloc(ctx, (n + 2 * KT_GUARD) * 4);
    KT_CHECK(p != NULL);
    for (size_t i = 0; i < n + 2 * KT_GUARD; i++)
        p[i] = KT_SENTINEL;
    return p + KT_GUARD;
}

/* Assert the guards around a kt_galloc buffer of n elements are intact. */
static inline void kt_gcheck(const void *buf, size_t n, const char *what)
{
    const uint32_t *p = (const uint32_t *)buf - KT_GUARD;
    for (size_t i = 0; i < KT_GUARD; i++) {
        KT_MSG(p[i] == KT_SENTINEL, "%s: guard before [%zu] overwritten", what, i);
        KT_MSG(p[KT_GUARD + n + i] == KT_SENTINEL, "%s: guard after [%zu] overwritten", what, i);
    }
}

static inline void kt_gfree(kern_ctx *ctx, void *buf)
{
    kern_free(ctx, (uint32_t *)buf - KT_GUARD);
}

static inline uint32_t kt_bits(float f)
{
    uint32_t u;
    memcpy(&u, &f, 4);
    return u;
}

#endif
