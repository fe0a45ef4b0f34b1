/* tests/kernels/cuda/kt_harness.h: shared harness of the CUDA kernel tests.
 *
 * Every test runs an op on a CPU ctx (the fp32 reference) and a CUDA ctx on
 * the same inputs: random values rounded to bf16 first, so both backends
 * start from identical numbers (the CPU sees them as F32). GPU outputs live
 * in guarded buffers: GUARD bytes of 0xFF before and after, and the output
 * itself pre-filled with 0xFF (NaN in bf16 and fp32), so an unwritten element
 * fails the comparison and a stray write fails the guard check.
 *
 * Comparisons use |got - ref| <= atol + rtol * |ref| per element; each test
 * records (cases, max abs err, max rel err, failures) per op, and main prints
 * one summary line per op.
 */
#ifndef INFERD_KT_HARNESS_H
#define INFERD_KT_HARNESS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "kernels/kernels.h"
#include "test_util.h"

#define KT_GUARD 256

extern kern_ctx *kt_cpu;
extern kern_ctx *kt_gpu;
/* INFERD_TEST_QUICK=1 (set for compute-sanitizer runs): skip the largest cases. */
extern bool kt_quick;

/* Seed of the randomized tests: $INFERD_TEST_SEED, else fresh (time-based),
 * fixed for the whole run; printed by the tests that use it. */
uint64_t kt_seed(void);

/* A guarded GPU buffer. */
typedef struct {
    uint8_t *base; /* device: [KT_GUARD | bytes | KT_GUARD] */
    size_t bytes;
    size_t offset; /* data = base + KT_GUARD + offset */
} kt_gbuf;

/* Allocate and fill everything (guards and data) with 0xFF; returns data. */
void *kt_gbuf_alloc(kt_gbuf *g, size_t bytes, size_t offset);
/* Copy the data region to host. */
void kt_gbuf_read(const kt_gbuf *g, void *host);
/* 0 when both guards still hold 0xFF, else prints and returns 1. */
int kt_gbuf_guards_bad(const kt_gbuf *g, const char *what);
void kt_gbuf_free(kt_gbuf *g);

/* x[i] uniform in [lo, hi) from seed, rounded to bf16. */
void kt_rand_bf16(float *x, size_t n, uint64_t seed, float lo, float hi);
uint16_t *kt_to_bf16(const float *x, size_t n);   /* inferd_malloc'd */
void kt_from_bf16(const uint16_t *h, float *x, size_t n);

/* Device copy of n floats as bf16 / as f32 (kern_alloc'd on kt_gpu). */
void *kt_gpu_bf16(const float *x, size_t n);
void *kt_gpu_bytes(const void *src, size_t bytes);
/* Host copy (kern_alloc'd on kt_cpu) of n floats. */
float *kt_cpu_f32(const float *x, size_t n);

/* CPU weight (F32, exact copy of w) and GPU weight (BF16 upload of w); w
 * should be bf16-exact so both hold the same values. */
kern_weight kt_weight_cpu(const float *w, int64_t rows, int64_t cols);
kern_weight kt_weight_gpu(const float *w, int64_t rows, int64_t cols);

/* Compare n values; records into op's stats; returns violations. */
int kt_compare(const char *op, const char *what, const float *got, const float *ref, size_t n, double atol,
               double rtol);
/* Record a case with an exact-match count of mismatches (tokens, bits). */
void kt_record(const char *op, int bad, double max_abs, double max_rel);
/* Print the per-op summary table; returns the number of failing ops. */
int kt_print_summary(void);

TCase *kt_tcase_dense(void);
TCase *kt_tcase_attention(void);
TCase *kt_tcase_sample(void);
TCase *kt_tcase_penalty(void);
TCase *kt_tcase_fused(void);
TCase *kt_tcase_tp(void);

#endif
