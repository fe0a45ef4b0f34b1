/* model/model_tp.c: tensor parallelism in one process (issue 16): one
 * model per rank, one worker thread per rank > 0, one communicator each.
 *
 * Rank 0 is the model the caller holds; the thread that drives it (the
 * engine's) is rank 0's worker, like the driver worker of vLLM's first
 * multi-GPU design. Every batch rank 0 is given (model_step, model_forward)
 * is first posted to the other ranks; each runs the same forward pass over
 * its own slices -- the same batch and block ids, its own heads, its own KV
 * pool -- meeting the others in the collectives of forward.c (all-reduce
 * after the embedding, O and down; the logits all-gather). Rank 0 alone
 * samples (model_step_follower skips it) and returns once every rank is
 * done, so the caller may reuse the batch's host arrays at once.
 *
 * Loading runs in phases, every rank at once: begin (config, context on
 * device device_id + rank, this rank's weight slices, activations); the
 * communicators (one call over every context); the KV pool: the fewest
 * blocks any rank holds, so block ids mean the same everywhere; end
 * (warm-up and decode-graph capture, which run collectives). A failure on
 * any rank stops the load before the next phase and names the rank.
 */
#include <pthread.h>
#include <stdio.h>
#include <string.h>

#include "common/alloc.h"
#include "common/log.h"
#include "common/util.h"
#include "model/model_internal.h"

typedef enum { TP_BEGIN, TP_ALLOC_KV, TP_END, TP_STEP, TP_FORWARD, TP_EXIT } tp_cmd;

typedef struct {
    model_tp *g;
    int rank;
} tp_worker;

struct model_tp {
    int n;
    model **ranks;      /* [n]; ranks[0] is the caller's model */
    kern_comm **comms;  /* [n] */
    pthread_t *threads; /* [n]; [0] unused */
    tp_worker *args;    /* [n] */
    int n_started;      /* workers running (ranks 1 .. n_started) */
    pthread_mutex_t mu;
    pthread_cond_t go, done;
    uint64_t gen; /* bumped per command */
    int busy;     /* workers still running the current command */
    tp_cmd cmd;
    /* the command's arguments */
    const model_opts *opts;
    int64_t n_blocks;
    bool auto_sized;
    const model_batch *b;
    /* the command's outcome per rank */
    inferd_status *st;
    char (*err)[512];
};

static void run_cmd(model_tp *g, int r, tp_cmd cmd)
{
    inferd_status st = INFERD_OK;
    switch (cmd) {
    case TP_BEGIN: st = model_load_rank_begin(g->opts, r, &g->ranks[r]); break;
    case TP_ALLOC_KV: st = model_load_rank_alloc_kv(g->ranks[r], g->n_blocks, g->auto_sized); break;
    case TP_END: st = model_load_rank_end(g->ranks[r]); break;
    case TP_STEP: model_step_follower(g->ranks[r], g->b); break;
    case TP_FORWARD:
        model_forward_checked(g->ranks[r], g->b);
        kern_sync(g->ranks[r]->kc);
        break;
    case TP_EXIT: break;
    }
    g->st[r] = st;
    if (st != INFERD_OK)
        snprintf(g->err[r], sizeof g->err[r], "%s", inferd_last_error());
}

static void *worker_main(void *arg)
{
    tp_worker *w = arg;
    model_tp *g = w->g;
    uint64_t seen = 0;
    for (;;) {
        pthread_mutex_lock(&g->mu);
        while (g->gen == seen)
            pthread_cond_wait(&g->go, &g->mu);
        seen = g->gen;
        tp_cmd cmd = g->cmd;
        pthread_mutex_unlock(&g->mu);
        if (cmd == TP_EXIT)
            return NULL;
        run_cmd(g, w->rank, cmd);
        pthread_mutex_lock(&g->mu);
        if (--g->busy == 0)
            pthread_cond_broadcast(&g->done);
        pthread_mutex_unlock(&g->mu);
    }
}

/* Hand cmd (arguments already in g) to every worker. */
static void post(model_tp *g, tp_cmd cmd)
{
    pthread_mutex_lock(&g->mu);
    g->cmd = cmd;
    g->busy = g->n_started;
    g->gen++;
    pthread_cond_broadcast(&g->go);
    pthread_mutex_unlock(&g->mu);
}

static void wait_all(model_tp *g)
{
    pthread_mutex_lock(&g->mu);
    while (g->busy > 0)
        pthread_cond_wait(&g->done, &g->mu);
    pthread_mutex_unlock(&g->mu);
}

/* cmd on every rank at once (rank 0 in this thread); the first failing
 * rank's error. */
static inferd_status run_all(model_tp *g, tp_cmd cmd)
{
    post(g, cmd);
    run_cmd(g, 0, cmd);
    wait_all(g);
    for (int r = 0; r < g->n; r++)
        if (g->st[r] != INFERD_OK)
            return inferd_set_error(g->st[r], "tensor-parallel rank %d of %d: %s", r, g->n, g->err[r]);
    return INFERD_OK;
}

static inferd_status start_workers(model_tp *g)
{
    for (int r = 1; r < g->n; r++) {
        g->args[r] = (tp_worker){.g = g, .rank = r};
        if (pthread_create(&g->threads[r], NULL, worker_main, &g->args[r]) != 0)
            return inferd_set_error(INFERD_ERR_NOMEM, "tensor parallelism: cannot start the worker of rank %d", r);
        g->n_started = r;
    }
    return INFERD_OK;
}

/* Stop the workers, then free the communicators and every rank but 0
 * (rank 0 too when free_rank0: a failed load). */
static void destroy(model_tp *g, bool free_rank0)
{
    if (g->n_started > 0) {
        post(g, TP_EXIT);
        for (int r = 1; r <= g->n_started; r++)
            pthread_join(g->threads[r], NULL);
    }
    for (int r = 0; r < g->n; r++)
        if (g->ranks[r] && g->ranks[r]->kc)
            kern_sync(g->ranks[r]->kc);
    for (int r = 0; r < g->n; r++) {
        if (g->ranks[r])
            g->ranks[r]->comm = NULL;
        if (g->comms[r])
            kern_comm_free(g->comms[r]);
    }
    for (int r = free_rank0 ? 0 : 1; r < g->n; r++)
        model_free(g->ranks[r]);
    pthread_mutex_destroy(&g->mu);
    pthread_cond_destroy(&g->go);
    pthread_cond_destroy(&g->done);
    inferd_free(g->ranks);
    inferd_free(g->comms);
    inferd_free(g->threads);
    inferd_free(g->args);
    inferd_free(g->st);
    inferd_free(g->err);
    inferd_free(g);
}

/* One communicator per rank, over every rank's context. */
static inferd_status make_comms(model_tp *g)
{
    kern_ctx **ctxs = inferd_calloc((size_t)g->n, sizeof *ctxs);
    for (int r = 0; r < g->n; r++)
        ctxs[r] = g->ranks[r]->kc;
    inferd_status st = kern_comm_create_local(ctxs, g->n, g->comms);
    inferd_free(ctxs);
    if (st != INFERD_OK)
        return st;
    for (int r = 0; r < g->n; r++)
        g->ranks[r]->comm = g->comms[r];
    return INFERD_OK;
}

/* The KV pool every rank allocates: the fewest blocks any rank holds. */
static inferd_status agree_kv(model_tp *g)
{
    g->n_blocks = INT64_MAX;
    for (int r = 0; r < g->n; r++) {
        int64_t nb = 0;
        inferd_status st = model_load_rank_kv(g->ranks[r], &nb, &g->auto_sized);
        if (st != INFERD_OK)
            return inferd_set_error(st, "tensor-parallel rank %d of %d: %s", r, g->n, inferd_last_error());
        g->n_blocks = INFERD_MIN(g->n_blocks, nb);
    }
    return INFERD_OK;
}

inferd_status model_tp_load(const model_opts *opts, model **out)
{
    model_tp *g = inferd_calloc(1, sizeof *g);
    g->n = INFERD_MAX(opts->tensor_parallel_size, 1);
    g->ranks = inferd_calloc((size_t)g->n, sizeof *g->ranks);
    g->comms = inferd_calloc((size_t)g->n, sizeof *g->comms);
    g->threads = inferd_calloc((size_t)g->n, sizeof *g->threads);
    g->args = inferd_calloc((size_t)g->n, sizeof *g->args);
    g->st = inferd_calloc((size_t)g->n, sizeof *g->st);
    g->err = inferd_calloc((size_t)g->n, sizeof *g->err);
    g->opts = opts;
    pthread_mutex_init(&g->mu, NULL);
    pthread_cond_init(&g->go, NULL);
    pthread_cond_init(&g->done, NULL);
    double t0 = util_now_s();
    inferd_status st = start_workers(g);
    if (st == INFERD_OK)
        st = run_all(g, TP_BEGIN);
    if (st == INFERD_OK)
        st = make_comms(g);
    if (st == INFERD_OK)
        st = agree_kv(g);
    if (st == INFERD_OK)
        st = run_all(g, TP_ALLOC_KV);
    if (st == INFERD_OK)
        st = run_all(g, TP_END);
    if (st != INFERD_OK) {
        destroy(g, true);
        return st;
    }
    g->opts = NULL; /* the caller's, gone after load */
    model *m = g->ranks[0];
    m->tp = g;
    INFERD_LOG_INFO("tensor parallel: %d ranks loaded in %.1f s, %d KV blocks each", g->n, util_now_s() - t0,
                    m->n_blocks);
    *out = m;
    return INFERD_OK;
}

void model_tp_free(model *m)
{
    model_tp *g = m->tp;
    m->tp = NULL;
    destroy(g, false);
}

void model_tp_post(model *m, const model_batch *b, bool step)
{
    if (!m->tp)
        return;
    m->tp->b = b;
    post(m->tp, step ? TP_STEP : TP_FORWARD);
}

void model_tp_wait(model *m)
{
    if (m->tp)
        wait_all(m->tp);
}
