/* kernels/cuda/timer.cu: the CUDA side of kern_timer (kernels.h): one
 * cudaEvent_t per slot, recorded on the ctx's stream, read with
 * cudaEventElapsedTime once the stream has passed both (the caller syncs;
 * a slot not yet reached reads as -1). Used by the per-op profile of
 * `inferd bench latency --profile-ops` and the idle-gap measurement between
 * decode steps (model/forward.c), and as the fences of the engine's async
 * scheduling (kern_timer_wait after an asynchronous token copy). Events
 * are created with timing on (cudaEventDefault), which costs about a
 * microsecond per record.
 *
 * The host emulator (KEMU_H) has no events: there the slots hold the host
 * clock, as on the CPU backend (kernels run synchronously there).
 */
#include "kernels/cuda/common.cuh"

extern "C" double util_now_s(void);

#ifndef KEMU_H

/* Contract: create t->n events; false (nothing left allocated) on failure. */
bool kcuda_timer_init(kern_ctx *ctx, kern_timer *t)
{
    kcuda_st(ctx);
    t->ev = (void **)inferd_calloc((size_t)t->n, sizeof(void *));
    for (int i = 0; i < t->n; i++) {
        cudaEvent_t e = NULL;
        if (cudaEventCreate(&e) != cudaSuccess) {
            (void)cudaGetLastError();
            kcuda_timer_release(ctx, t);
            return false;
        }
        t->ev[i] = (void *)e;
    }
    return true;
}

void kcuda_timer_record(kern_ctx *ctx, kern_timer *t, int i)
{
    kcuda_state *st = kcuda_st(ctx);
    CUDA_CHECK(cudaEventRecord((cudaEvent_t)t->ev[i], st->stream));
}

/* Contract: ms from slot i to j, or -1 when either has not completed (or
 * was never recorded). Does not wait. */
double kcuda_timer_ms(kern_ctx *ctx, kern_timer *t, int i, int j)
{
    kcuda_st(ctx);
    float ms = 0;
    cudaError_t e = cudaEventElapsedTime(&ms, (cudaEvent_t)t->ev[i], (cudaEvent_t)t->ev[j]);
    if (e != cudaSuccess) {
        (void)cudaGetLastError();
        return -1.0;
    }
    return (double)ms;
}

/* Contract (kern_timer_wait): the host waits for slot i's event. */
void kcuda_timer_wait(kern_ctx *ctx, kern_timer *t, int i)
{
    kcuda_st(ctx);
    CUDA_CHECK(cudaEventSynchronize((cudaEvent_t)t->ev[i]));
}

void kcuda_timer_release(kern_ctx *ctx, kern_timer *t)
{
    kcuda_st(ctx);
    if (!t->ev)
        return;
    for (int i = 0; i < t->n; i++)
        if (t->ev[i])
            CUDA_CHECK(cudaEventDestroy((cudaEvent_t)t->ev[i]));
    inferd_free(t->ev);
    t->ev = NULL;
}

#else /* KEMU_H: host clock */

bool kcuda_timer_init(kern_ctx *ctx, kern_timer *t)
{
    (void)ctx;
    (void)t;
    return true;
}

void kcuda_timer_record(kern_ctx *ctx, kern_timer *t, int i)
{
    (void)ctx;
    t->host_s[i] = util_now_s();
}

double kcuda_timer_ms(kern_ctx *ctx, kern_timer *t, int i, int j)
{
    (void)ctx;
    return (t->host_s[j] - t->host_s[i]) * 1e3;
}

void kcuda_timer_wait(kern_ctx *ctx, kern_timer *t, int i)
{
    (void)ctx;
    (void)t;
    (void)i;
}

void kcuda_timer_release(kern_ctx *ctx, kern_timer *t)
{
    (void)ctx;
    (void)t;
}

#endif
