/* kernels/cpu/comm.c: the CPU backend's collectives (kern_comm_*), for
 * tensor parallelism without GPUs. The ranks are threads of this process,
 * each with its own CPU kern_ctx, and they meet in one shared group: a
 * mutex + condition variable barrier (a generation counter, so it can be
 * reused back to back) and a table where every rank publishes its buffer.
 *
 * A collective is two barriers. Each rank publishes (pointer, length, kind)
 * and arrives; after the first barrier every pointer is visible, rank r
 * checks that all ranks called the same collective and does its part
 * reading the others' buffers directly; the second barrier keeps every
 * buffer and the table in place until all ranks are done with them.
 *  - all_reduce_sum: rank r owns the r-th chunk of the elements. For each of
 *    its elements it adds the ranks' values in rank order (fp32, one final
 *    rounding to the dtype) and writes the sum into every rank's buffer.
 *    Chunks are disjoint, so no scratch is needed, and every rank ends with
 *    the same bits whatever the thread timing.
 *  - all_gather: every rank copies every rank's src into its own dst.
 * With one rank, all_reduce is nothing and all_gather a copy. The group is
 * freed by the last of its ranks' kern_comm_free (a reference count), so the
 * handles can be freed in any order.
 */
#include <pthread.h>
#include <string.h>

#include "common/alloc.h"
#include "common/check.h"
#include "kernels/cpu/kcpu.h"

/* What one rank brought to the current collective. */
typedef struct {
    void *buf;   /* all_reduce: buf; all_gather: src */
    size_t len;  /* elements (all_reduce) or bytes (all_gather) */
    int kind;    /* the dtype (all_reduce) or GATHER */
} cpu_slot;

#define GATHER (-1)

typedef struct {
    pthread_mutex_t mu;
    pthread_cond_t cv;
    int n;
    int arrived;              /* ranks waiting at the current barrier */
    unsigned long generation; /* barriers completed */
    int refs;                 /* rank handles not yet freed */
    cpu_slot *slots;          /* [n] */
} cpu_group;

/* Returns once all n ranks have called it (for this generation). */
static void group_barrier(cpu_group *g)
{
    pthread_mutex_lock(&g->mu);
    const unsigned long gen = g->generation;
    if (++g->arrived == g->n) {
        g->arrived = 0;
        g->generation++;
        pthread_cond_broadcast(&g->cv);
    } else {
        while (gen == g->generation)
            pthread_cond_wait(&g->cv, &g->mu);
    }
    pthread_mutex_unlock(&g->mu);
}

/* Publish this rank's slot and wait for everyone's; then check they agree
 * (a mismatch is a caller bug that would otherwise corrupt memory). */
static void group_meet(cpu_group *g, int rank, void *buf, size_t len, int kind)
{
    g->slots[rank] = (cpu_slot){buf, len, kind};
    group_barrier(g);
    for (int k = 0; k < g->n; k++)
        INFERD_CHECK_MSG(g->slots[k].len == len && g->slots[k].kind == kind,
                         "cpu communicator: ranks called different collectives or sizes");
}

inferd_status kcpu_comm_create_local(kern_ctx *const *ctxs, int n, kern_comm **out)
{
    (void)ctxs;
    cpu_group *g = inferd_calloc(1, sizeof *g);
    INFERD_CHECK(pthread_mutex_init(&g->mu, NULL) == 0 && pthread_cond_init(&g->cv, NULL) == 0);
    g->n = n;
    g->refs = n;
    g->slots = inferd_calloc((size_t)n, sizeof *g->slots);
    for (int r = 0; r < n; r++) {
        out[r] = inferd_calloc(1, sizeof *out[r]);
        *out[r] = (kern_comm){.backend = KERN_BACKEND_CPU, .rank = r, .size = n, .device = -1, .impl = g};
    }
    return INFERD_OK;
}

void kcpu_comm_free(kern_comm *c)
{
    cpu_group *g = c->impl;
    pthread_mutex_lock(&g->mu);
    const bool last = --g->refs == 0;
    pthread_mutex_unlock(&g->mu);
    if (last) {
        pthread_cond_destroy(&g->cv);
        pthread_mutex_destroy(&g->mu);
        inferd_free(g->slots);
        inferd_free(g);
    }
    inferd_free(c);
}

enum { REDUCE_BLOCK = 256 };

/* dst[m] = elements [i0, i0 + m) of p (dtype dt) as fp32. */
static void load_f32(const void *p, kern_dtype dt, size_t i0, size_t m, float *dst)
{
    const kern_weight w = {(void *)p, dt, 1, (int64_t)(i0 + m)};
    kcpu_weight_to_f32(&w, (int64_t)i0, (int64_t)m, dst);
}

/* Elements [i0, i0 + m) of p (dtype dt) = src[m] rounded to dt. */
static void store_f32(void *p, kern_dtype dt, size_t i0, size_t m, const float *src)
{
    if (dt == KERN_DTYPE_F32) {
        memcpy((float *)p + i0, src, m * sizeof(float));
        return;
    }
    uint16_t *h = (uint16_t *)p + i0; /* [m] */
    for (size_t j = 0; j < m; j++)
        h[j] = dt == KERN_DTYPE_F16 ? half_f32_to_f16(src[j]) : half_f32_to_bf16(src[j]);
}

/* Elements [lo, hi) of every rank's buffer = their sum in rank order. */
static void reduce_chunk(kern_ctx *ctx, const cpu_group *g, size_t lo, size_t hi, kern_dtype dt)
{
    const size_t n_blocks = (hi - lo + REDUCE_BLOCK - 1) / REDUCE_BLOCK;
    int nt = kcpu_threads(ctx, (int64_t)((hi - lo) * (size_t)g->n));
#pragma omp parallel for num_threads(nt) schedule(static)
    for (size_t b = 0; b < n_blocks; b++) {
        const size_t i0 = lo + b * REDUCE_BLOCK, m = hi - i0 < REDUCE_BLOCK ? hi - i0 : REDUCE_BLOCK;
        float acc[REDUCE_BLOCK], x[REDUCE_BLOCK];
        load_f32(g->slots[0].buf, dt, i0, m, acc);
        for (int k = 1; k < g->n; k++) {
            load_f32(g->slots[k].buf, dt, i0, m, x);
            for (size_t j = 0; j < m; j++)
                acc[j] += x[j];
        }
        for (int k = 0; k < g->n; k++)
            store_f32(g->slots[k].buf, dt, i0, m, acc);
    }
}

/* Contract (kern_all_reduce_sum): buf[count] of dtype on every rank = the
 * rank-ordered fp32 sum of all ranks' buf, rounded once to dtype. */
void kcpu_all_reduce_sum(kern_ctx *ctx, kern_comm *c, void *buf, size_t count, kern_dtype dtype)
{
    cpu_group *g = c->impl;
    if (g->n == 1)
        return;
    group_meet(g, c->rank, buf, count, (int)dtype);
    const size_t per = count / (size_t)g->n, extra = count % (size_t)g->n, r = (size_t)c->rank;
    const size_t lo = r * per + (r < extra ? r : extra);
    reduce_chunk(ctx, g, lo, lo + per + (r < extra), dtype);
    group_barrier(g);
}

/* Contract (kern_all_gather): dst[n * bytes] = every rank's src in rank
 * order. src may be this rank's own slot of dst (then it is not copied). */
void kcpu_all_gather(kern_ctx *ctx, kern_comm *c, void *dst, const void *src, size_t bytes)
{
    cpu_group *g = c->impl;
    (void)ctx;
    if (g->n == 1) {
        if (dst != src && bytes)
            memmove(dst, src, bytes);
        return;
    }
    group_meet(g, c->rank, (void *)src, bytes, GATHER);
    for (int k = 0; k < g->n; k++) {
        char *d = (char *)dst + (size_t)k * bytes;
        if (d != g->slots[k].buf && bytes)
            memcpy(d, g->slots[k].buf, bytes);
    }
    group_barrier(g);
}
