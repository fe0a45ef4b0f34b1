/* tests/kernels/cuda/kt_harness.c: see kt_harness.h. */
#include "kt_harness.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "common/alloc.h"
#include "common/half.h"
#include "common/rng.h"

kern_ctx *kt_cpu;
kern_ctx *kt_gpu;
bool kt_quick;

uint64_t kt_seed(void)
{
    static uint64_t seed;
    if (!seed) {
        const char *e = getenv("INFERD_TEST_SEED");
        seed = e && *e ? strtoull(e, NULL, 10) : (uint64_t)time(NULL);
        if (!seed)
            seed = 1;
    }
    return seed;
}

typedef struct {
    char op[32];
    int cases, fails;
    double max_abs, max_rel;
} kt_stat;

#define KT_MAX_OPS 64
static kt_stat g_stats[KT_MAX_OPS];
static int g_nstats;

static kt_stat *stat_get(const char *op)
{
    for (int i = 0; i < g_nstats; i++)
        if (strcmp(g_stats[i].op, op) == 0)
            return &g_stats[i];
    ck_assert_int_lt(g_nstats, KT_MAX_OPS);
    kt_stat *s = &g_stats[g_nstats++];
    memset(s, 0, sizeof *s);
    snprintf(s->op, sizeof s->op, "%s", op);
    return s;
}

void *kt_gbuf_alloc(kt_gbuf *g, size_t bytes, size_t offset)
{
    const size_t total = bytes + offset + 2 * KT_GUARD;
    g->bytes = bytes;
    g->offset = offset;
    g->base = kern_alloc(kt_gpu, total);
    ck_assert_ptr_nonnull(g->base);
    uint8_t *fill = inferd_malloc(total);
    memset(fill, 0xFF, total);
    kern_memcpy_h2d(kt_gpu, g->base, fill, total);
    kern_sync(kt_gpu);
    inferd_free(fill);
    return g->base + KT_GUARD + offset;
}

void kt_gbuf_read(const kt_gbuf *g, void *host)
{
    kern_memcpy_d2h(kt_gpu, host, g->base + KT_GUARD + g->offset, g->bytes);
}

int kt_gbuf_guards_bad(const kt_gbuf *g, const char *what)
{
    const size_t total = g->bytes + g->offset + 2 * KT_GUARD;
    uint8_t *h = inferd_malloc(total);
    kern_memcpy_d2h(kt_gpu, h, g->base, total);
    int bad = 0;
    for (size_t i = 0; i < KT_GUARD + g->offset; i++)
        bad |= h[i] != 0xFF;
    for (size_t i = KT_GUARD + g->offset + g->bytes; i < total; i++)
        bad |= h[i] != 0xFF;
    inferd_free(h);
    if (bad)
        printf("  GUARD VIOLATION around %s\n", what);
    return bad;
}

void kt_gbuf_free(kt_gbuf *g)
{
    kern_free(kt_gpu, g->base);
    g->base = NULL;
}

void kt_rand_bf16(float *x, size_t n, uint64_t seed, float lo, float hi)
{
    for (size_t i = 0; i < n; i++)
        x[i] = half_bf16_to_f32(half_f32_to_bf16(lo + (hi - lo) * (float)rng_uniform(seed, i)));
}

uint16_t *kt_to_bf16(const float *x, size_t n)
{
    uint16_t *h = inferd_malloc((n ? n : 1) * sizeof *h);
    for (size_t i = 0; i < n; i++)
        h[i] = half_f32_to_bf16(x[i]);
    return h;
}

void kt_from_bf16(const uint16_t *h, float *x, size_t n)
{
    for (size_t i = 0; i < n; i++)
        x[i] = half_bf16_to_f32(h[i]);
}

void *kt_gpu_bf16(const float *x, size_t n)
{
    uint16_t *h = kt_to_bf16(x, n);
    void *d = kt_gpu_bytes(h, n * 2);
    inferd_free(h);
    return d;
}

void *kt_gpu_bytes(const void *src, size_t bytes)
{
    void *d = kern_alloc(kt_gpu, bytes);
    ck_assert_ptr_nonnull(d);
    kern_memcpy_h2d(kt_gpu, d, src, bytes);
    return d;
}

float *kt_cpu_f32(const float *x, size_t n)
{
    float *d = kern_alloc(kt_cpu, n * sizeof(float));
    ck_assert_ptr_nonnull(d);
    memcpy(d, x, n * sizeof(float));
    return d;
}

kern_weight kt_weight_cpu(const float *w, int64_t rows, int64_t cols)
{
    kern_weight kw = {kt_cpu_f32(w, (size_t)(rows * cols)), KERN_DTYPE_F32, rows, cols};
    return kw;
}

kern_weight kt_weight_gpu(const float *w, int64_t rows, int64_t cols)
{
    kern_weight kw = {kern_alloc(kt_gpu, (size_t)(rows * cols) * 2), KERN_DTYPE_BF16, rows, cols};
    ck_assert_ptr_nonnull(kw.data);
    kern_weight_upload(kt_gpu, &kw, 0, w, KERN_DTYPE_F32, rows);
    return kw;
}

int kt_compare(const char *op, const char *what, const float *got, const float *ref, size_t n, double atol,
               double rtol)
{
    double max_abs = 0.0, max_rel = 0.0;
    int bad = 0;
    for (size_t i = 0; i < n; i++) {
        const double g = got[i], r = ref[i], e = fabs(g - r);
        const bool ok = !isnan(g) && !isnan(r) ? e <= atol + rtol * fabs(r) : (isnan(g) && isnan(r));
        if (!isnan(e)) {
            if (e > max_abs)
                max_abs = e;
            if (fabs(r) > atol && e / fabs(r) > max_rel)
                max_rel = e / fabs(r);
        }
        if (!ok) {
            if (bad < 5)
                printf("  %s %s: [%zu] got %.6g ref %.6g\n", op, what, i, g, r);
            bad++;
        }
    }
    kt_stat *s = stat_get(op);
    if (isnan(max_abs) || bad)
        printf("  %s %s: %d of %zu outside atol %.1e + rtol %.1e\n", op, what, bad, n, atol, rtol);
    if (max_abs > s->max_abs)
        s->max_abs = max_abs;
    if (max_rel > s->max_rel)
        s->max_rel = max_rel;
    s->cases++;
    s->fails += bad != 0;
    return bad;
}

void kt_record(const char *op, int bad, double max_abs, double max_rel)
{
    kt_stat *s = stat_get(op);
    s->cases++;
    s->fails += bad != 0;
    if (max_abs > s->max_abs)
        s->max_abs = max_abs;
    if (max_rel > s->max_rel)
        s->max_rel = max_rel;
}

int kt_print_summary(void)
{
    int failing = 0;
    printf("\n%-18s %6s %12s %12s %s\n", "op", "cases", "max_abs_err", "max_rel_err", "result");
    for (int i = 0; i < g_nstats; i++) {
        const kt_stat *s = &g_stats[i];
        printf("%-18s %6d %12.3e %12.3e %s\n", s->op, s->cases, s->max_abs, s->max_rel,
               s->fails ? "FAIL" : "PASS");
        failing += s->fails != 0;
    }
    fflush(stdout);
    return failing;
}
