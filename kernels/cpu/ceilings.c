/* kernels/cpu/ceilings.c: the CPU backend's ceilings for `inferd bench
 * latency` (twin of cuda/ceilings.cu): memcpy bandwidth of a buffer well
 * beyond the last-level cache, counted as bytes read + written per second,
 * and the rate of the backend's own fp32 matmul (kern_matmul through the
 * CPU backend, all of ctx's threads) on a [GEMM_N, GEMM_K] x [GEMM_M,
 * GEMM_K]^T product, both timed with the monotonic clock after a warm-up
 * run, best of a few. These are this backend's ceilings, not the machine's
 * peak: the fp32 reference matmul is what a CPU forward pass can reach.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/alloc.h"
#include "common/util.h"
#include "kernels/cpu/kcpu.h"

#define COPY_BYTES ((size_t)64 << 20)
#define COPY_ITERS 5
#define GEMM_N 256
#define GEMM_M 1024
#define GEMM_K 1024
#define GEMM_ITERS 3

/* Contract (kern_measure_ceilings) on the CPU backend. */
inferd_status kcpu_measure_ceilings(kern_ctx *ctx, kern_ceilings *out)
{
    snprintf(out->device, sizeof out->device, "cpu (%d threads)", ctx->n_threads);
    char *a = malloc(COPY_BYTES), *b = malloc(COPY_BYTES);
    float *x = malloc(sizeof(float) * GEMM_N * GEMM_K), *w = malloc(sizeof(float) * GEMM_M * GEMM_K);
    float *y = malloc(sizeof(float) * GEMM_N * GEMM_M);
    if (!a || !b || !x || !w || !y) {
        free(a), free(b), free(x), free(w), free(y);
        return inferd_set_error(INFERD_ERR_NOMEM, "ceilings: cannot allocate the CPU scratch");
    }
    memset(a, 1, COPY_BYTES);
    memcpy(b, a, COPY_BYTES);
    double best = 1e30;
    for (int i = 0; i < COPY_ITERS; i++) {
        double t0 = util_now_s();
        memcpy(b, a, COPY_BYTES);
        double dt = util_now_s() - t0;
        best = dt < best ? dt : best;
        a[i] = b[COPY_BYTES - 1 - (size_t)i]; /* the copies are not dead code */
    }
    out->copy_bytes = (int64_t)COPY_BYTES;
    out->copy_gbps = 2.0 * (double)COPY_BYTES / best / 1e9;

    for (size_t i = 0; i < (size_t)GEMM_N * GEMM_K; i++)
        x[i] = (float)(i % 7) * 0.125f;
    for (size_t i = 0; i < (size_t)GEMM_M * GEMM_K; i++)
        w[i] = (float)(i % 5) * 0.25f;
    kern_weight kw = {.data = w, .dtype = KERN_DTYPE_F32, .rows = GEMM_M, .cols = GEMM_K};
    kern_matmul(ctx, y, x, &kw, GEMM_N);
    best = 1e30;
    for (int i = 0; i < GEMM_ITERS; i++) {
        double t0 = util_now_s();
        kern_matmul(ctx, y, x, &kw, GEMM_N);
        double dt = util_now_s() - t0;
        best = dt < best ? dt : best;
    }
    out->gemm_m = GEMM_M;
    out->gemm_n = GEMM_N;
    out->gemm_k = GEMM_K;
    out->gemm_tflops = 2.0 * GEMM_M * GEMM_N * GEMM_K / best / 1e12;
    free(a), free(b), free(x), free(w), free(y);
    return INFERD_OK;
}
