/* kernels/comm.c: the public collectives API (kern_comm_*, kern_all_*):
 * argument checks, then the backend named by the contexts. The CPU backend
 * (kernels/cpu/comm.c) meets its ranks, threads of this process, in shared
 * memory; the CUDA backend (kernels/cuda/comm.cu) wraps NCCL, loaded at run
 * time. Multi-process groups (an id made by rank 0 and passed out of band)
 * exist on CUDA through NCCL; on the CPU a hosted communicator hands each
 * collective to the caller's hooks (dist/'s transport, model/model_tp.c).
 *
 * As in dispatch.c, kcuda_* symbols are referenced only when
 * INFERD_HAVE_CUDA is defined: a build without CUDA rejects CUDA contexts
 * at kern_ctx_create, so no CUDA communicator can be asked for there.
 */
#include "common/alloc.h"
#include "common/check.h"
#include "kernels/kern_internal.h"

/* INVALID_ARG unless ctxs[0..n) are n >= 1 contexts of one backend (CUDA:
 * on distinct devices, which the backend checks). */
static inferd_status check_local(kern_ctx *const *ctxs, int n)
{
    if (n < 1 || !ctxs)
        return inferd_set_error(INFERD_ERR_INVALID_ARG, "a communicator needs at least one rank (got %d)", n);
    for (int r = 0; r < n; r++) {
        if (!ctxs[r])
            return inferd_set_error(INFERD_ERR_INVALID_ARG, "communicator rank %d has no context", r);
        if (ctxs[r]->backend != ctxs[0]->backend)
            return inferd_set_error(INFERD_ERR_INVALID_ARG, "communicator ranks on two backends (%s and %s)",
                                    kern_backend_name(ctxs[0]->backend), kern_backend_name(ctxs[r]->backend));
    }
    return INFERD_OK;
}

inferd_status kern_comm_create_local(kern_ctx *const *ctxs, int n, kern_comm **out)
{
    for (int r = 0; r < n && out; r++)
        out[r] = NULL;
    inferd_status st = check_local(ctxs, n);
    if (st != INFERD_OK)
        return st;
#ifdef INFERD_HAVE_CUDA
    if (ctxs[0]->backend == KERN_BACKEND_CUDA)
        return kcuda_comm_create_local(ctxs, n, out);
#endif
    return kcpu_comm_create_local(ctxs, n, out);
}

/* The error of a multi-process call on a backend without it. */
static inferd_status no_multi_process(kern_backend b)
{
    if (b == KERN_BACKEND_CPU)
        return inferd_set_error(INFERD_ERR_UNSUPPORTED,
                                "the cpu backend has no multi-process communicators (its ranks are threads "
                                "of one process: kern_comm_create_local)");
    return inferd_set_error(INFERD_ERR_UNSUPPORTED, "this build of inferd has no CUDA backend");
}

inferd_status kern_comm_make_id(kern_backend b, unsigned char id[KERN_COMM_ID_BYTES])
{
#ifdef INFERD_HAVE_CUDA
    if (b == KERN_BACKEND_CUDA)
        return kcuda_comm_make_id(id);
#endif
    return no_multi_process(b);
}

inferd_status kern_comm_create_rank(kern_ctx *ctx, const unsigned char id[KERN_COMM_ID_BYTES], int n, int rank,
                                    kern_comm **out)
{
    *out = NULL;
    if (n < 1 || rank < 0 || rank >= n)
        return inferd_set_error(INFERD_ERR_INVALID_ARG, "communicator rank %d of %d ranks", rank, n);
#ifdef INFERD_HAVE_CUDA
    if (ctx->backend == KERN_BACKEND_CUDA)
        return kcuda_comm_create_rank(ctx, id, n, rank, out);
#endif
    return no_multi_process(ctx->backend);
}

inferd_status kern_comm_create_hosted(kern_ctx *ctx, int n, int rank, const kern_comm_hooks *h, kern_comm **out)
{
    *out = NULL;
    if (n < 1 || rank < 0 || rank >= n || !h || !h->all_reduce_sum || !h->all_gather)
        return inferd_set_error(INFERD_ERR_INVALID_ARG, "hosted communicator: rank %d of %d ranks, hooks %s", rank, n,
                                h && h->all_reduce_sum && h->all_gather ? "set" : "missing");
    if (ctx->backend != KERN_BACKEND_CPU)
        return inferd_set_error(INFERD_ERR_UNSUPPORTED,
                                "hosted communicators are for the cpu backend (CUDA ranks use NCCL)");
    kern_comm *c = inferd_calloc(1, sizeof *c);
    *c = (kern_comm){.backend = ctx->backend, .rank = rank, .size = n, .device = -1, .hooks = *h, .hosted = true};
    *out = c;
    return INFERD_OK;
}

void kern_comm_free(kern_comm *c)
{
    if (!c)
        return;
    if (c->hosted) {
        inferd_free(c);
        return;
    }
#ifdef INFERD_HAVE_CUDA
    if (c->backend == KERN_BACKEND_CUDA) {
        kcuda_comm_free(c);
        return;
    }
#endif
    kcpu_comm_free(c);
}

int kern_comm_size(const kern_comm *c)
{
    return c->size;
}

int kern_comm_rank(const kern_comm *c)
{
    return c->rank;
}

void kern_all_reduce_sum(kern_ctx *ctx, kern_comm *c, void *buf, size_t count, kern_dtype dtype)
{
    INFERD_CHECK_MSG(c && ctx->backend == c->backend, "all_reduce: the communicator is of another backend");
    if (c->hosted) {
        c->hooks.all_reduce_sum(c->hooks.user, buf, count, dtype);
        return;
    }
#ifdef INFERD_HAVE_CUDA
    if (ctx->backend == KERN_BACKEND_CUDA) {
        kcuda_all_reduce_sum(ctx, c, buf, count, dtype);
        return;
    }
#endif
    kcpu_all_reduce_sum(ctx, c, buf, count, dtype);
}

void kern_all_gather(kern_ctx *ctx, kern_comm *c, void *dst, const void *src, size_t bytes)
{
    INFERD_CHECK_MSG(c && ctx->backend == c->backend, "all_gather: the communicator is of another backend");
    if (c->hosted) {
        c->hooks.all_gather(c->hooks.user, dst, src, bytes);
        return;
    }
#ifdef INFERD_HAVE_CUDA
    if (ctx->backend == KERN_BACKEND_CUDA) {
        kcuda_all_gather(ctx, c, dst, src, bytes);
        return;
    }
#endif
    kcpu_all_gather(ctx, c, dst, src, bytes);
}
