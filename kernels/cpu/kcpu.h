/* kernels/cpu/kcpu.h: helpers shared by the CPU backend's source files
 * (private to kernels/cpu; the backend's entry points are declared in
 * kernels/kern_internal.h).
 *
 * Element access for weights of any dtype, the OpenMP team size for a given
 * amount of work, and a fixed-order dot product. The dot product's summation
 * order depends only on the vector length, never on the batch, the thread
 * count or the caller, so every op of this backend is bitwise invariant to
 * batch composition (a request's greedy output cannot change because another
 * request joined the batch).
 */
#ifndef INFERD_KCPU_H
#define INFERD_KCPU_H

#include <stdint.h>
#include <string.h>

#include "common/half.h"
#include "kernels/kern_internal.h"

/* Largest head_dim the CPU attention / RoPE support (stack scratch size;
 * kernels/kern_limits.h, checked at model load by kern_check_model). */
#define KCPU_MAX_HEAD_DIM KERN_CPU_MAX_HEAD_DIM

/* Element i (flat index) of a weight, as float. */
static inline float kcpu_weight_get(const kern_weight *w, int64_t i)
{
    switch (w->dtype) {
    case KERN_DTYPE_F32: return ((const float *)w->data)[i];
    case KERN_DTYPE_F16: return half_f16_to_f32(((const uint16_t *)w->data)[i]);
    case KERN_DTYPE_BF16: return half_bf16_to_f32(((const uint16_t *)w->data)[i]);
    case KERN_DTYPE_FP8_E4M3: break; /* a KV cache dtype, never a weight's */
    }
    return 0.0f;
}

/* Convert n elements starting at flat index i0 of a weight into dst[n]. */
void kcpu_weight_to_f32(const kern_weight *w, int64_t i0, int64_t n, float *dst);

/* Threads to use for `work` scalar operations: 1 below a threshold (waking a
 * team costs microseconds, which dominates tiny ops), else ctx->n_threads. */
static inline int kcpu_threads(const kern_ctx *ctx, int64_t work)
{
    /* a fork/join costs microseconds: give each thread >= ~50 us of work */
    const int64_t min_work_per_thread = 1 << 18;
    int64_t nt = work / min_work_per_thread;
    if (nt < 1)
        nt = 1;
    if (nt > ctx->n_threads)
        nt = ctx->n_threads;
    return (int)nt;
}

/* Four fp32 lanes (GCC/Clang vector extension; SSE on baseline x86-64).
 * Lane-wise arithmetic, so results equal the scalar code lane by lane. */
typedef float kcpu_v4 __attribute__((vector_size(16)));

static inline kcpu_v4 kcpu_load4(const float *p)
{
    kcpu_v4 v;
    memcpy(&v, p, sizeof v);
    return v;
}

/* Finish an 8-lane dot product: lanes lo (k = 0..3) and hi (k = 4..7) hold
 * the partial sums of columns j = k mod 8 up to the last multiple of 8; the
 * tail columns [j0, n) go to lanes 0..n-j0-1, then a fixed tree combines. */
static inline float kcpu_lanes_finish(kcpu_v4 lo, kcpu_v4 hi, const float *a, const float *b,
                                      int64_t j0, int64_t n)
{
    float acc[8];
    memcpy(acc, &lo, sizeof lo);
    memcpy(acc + 4, &hi, sizeof hi);
    for (int k = 0; j0 + k < n; k++)
        acc[k] += a[j0 + k] * b[j0 + k];
    return ((acc[0] + acc[4]) + (acc[2] + acc[6])) + ((acc[1] + acc[5]) + (acc[3] + acc[7]));
}

/* sum_j a[j] * b[j] in fp32 with 8 interleaved partial sums (lane k takes
 * j = k mod 8), combined in a fixed tree. Every dot product of this backend
 * (matmul included) uses exactly this order. */
static inline float kcpu_dot(const float *a, const float *b, int64_t n)
{
    kcpu_v4 lo = {0, 0, 0, 0}, hi = {0, 0, 0, 0};
    int64_t j = 0;
    for (; j + 8 <= n; j += 8) {
        lo += kcpu_load4(a + j) * kcpu_load4(b + j);
        hi += kcpu_load4(a + j + 4) * kcpu_load4(b + j + 4);
    }
    return kcpu_lanes_finish(lo, hi, a, b, j, n);
}

#endif
