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
 *
 * Several nodes (--nnodes, processes on one host or several hosts): node k
 * runs this group for its ranks [k * L, (k + 1) * L). Before loading, node
 * 0 makes the communicator id (NCCL's; nothing on the CPU) and hands it
 * out in the rendezvous, whose connections stay open as the control
 * channel (dist/dist_chan.h). Communicators are then one per rank across
 * the processes (NCCL; on the CPU a hosted one that meets the other nodes
 * through the channel, model_tp_net.c), the KV pool is the fewest blocks of
 * any rank of any node, and every batch node 0's rank 0 is given goes to
 * the other nodes as one channel message before its local ranks get it.
 * The other nodes loop in model_tp_follow until node 0 closes the channel.
 */
#include <pthread.h>
#include <stdio.h>
#include <string.h>

#include "common/alloc.h"
#include "common/check.h"
#include "common/log.h"
#include "common/util.h"
#include "dist/dist_chan.h"
#include "model/model_internal.h"

typedef enum { TP_BEGIN, TP_COMM, TP_ALLOC_KV, TP_END, TP_STEP, TP_FORWARD, TP_EXIT } tp_cmd;

typedef struct {
    model_tp *g;
    int rank;
} tp_worker;

struct model_tp {
    int n;              /* ranks on this node */
    int tp, rank0;      /* ranks of the whole group; the global rank of ranks[0] */
    dist_chan *chan;    /* several nodes: the control channel (NULL: one node) */
    unsigned char id[KERN_COMM_ID_BYTES]; /* several nodes, CUDA: the communicator id */
    void *msg;          /* several nodes: one step message (model_tp_msg_cap bytes) */
    size_t msg_cap;
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
    case TP_BEGIN: st = model_load_rank_begin(g->opts, g->rank0 + r, r, &g->ranks[r]); break;
    case TP_COMM: st = kern_comm_create_rank(g->ranks[r]->kc, g->id, g->tp, g->rank0 + r, &g->comms[r]); break;
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
            return inferd_set_error(g->st[r], "tensor-parallel rank %d of %d: %s", g->rank0 + r, g->tp, g->err[r]);
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
    dist_chan_close(g->chan); /* the other nodes' model_tp_follow return */
    g->chan = NULL;
    if (g->n_started > 0) {
        post(g, TP_EXIT);
        for (int r = 1; r <= g->n_started; r++)
            pthread_join(g->threads[r], NULL);
    }
    for (int r = 0; r < g->n; r++)
        if (g->ranks[r] && g->ranks[r]->kc) {
            kern_sync(g->ranks[r]->kc);
            /* NCCL: a decode graph that captured collectives holds its
             * communicator; ncclCommDestroy waits for the graph to go (a
             * tp 2 teardown hung in it on two H100s), so graphs go first */
            model_graphs_free(g->ranks[r]);
        }
    for (int r = 0; r < g->n; r++) {
        if (g->ranks[r])
            g->ranks[r]->comm = NULL;
        if (g->comms[r])
            kern_comm_free(g->comms[r]);
    }
    for (int r = free_rank0 ? 0 : 1; r < g->n; r++)
        model_free(g->ranks[r]);
    dist_chan_close(g->chan);
    inferd_free(g->msg);
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

/* One communicator per rank: over every rank's context (one node), NCCL
 * ranks joined through the id (several nodes, CUDA), or hosted by the
 * channel (several nodes, CPU: one rank a node). */
static inferd_status make_comms(model_tp *g)
{
    inferd_status st = INFERD_OK;
    if (!g->chan) {
        kern_ctx **ctxs = inferd_calloc((size_t)g->n, sizeof *ctxs);
        for (int r = 0; r < g->n; r++)
            ctxs[r] = g->ranks[r]->kc;
        st = kern_comm_create_local(ctxs, g->n, g->comms);
        inferd_free(ctxs);
    } else if (kern_ctx_backend(g->ranks[0]->kc) == KERN_BACKEND_CUDA) {
        st = run_all(g, TP_COMM);
    } else {
        const kern_comm_hooks h = model_tp_star_hooks(g->chan);
        st = kern_comm_create_hosted(g->ranks[0]->kc, g->tp, g->rank0, &h, &g->comms[0]);
    }
    if (st != INFERD_OK)
        return st;
    for (int r = 0; r < g->n; r++)
        g->ranks[r]->comm = g->comms[r];
    return INFERD_OK;
}

/* The KV pool every rank allocates: the fewest blocks any rank of any
 * node holds (node 0 gathers the nodes' minima and sends the result). */
static inferd_status agree_kv(model_tp *g)
{
    g->n_blocks = INT64_MAX;
    for (int r = 0; r < g->n; r++) {
        int64_t nb = 0;
        inferd_status st = model_load_rank_kv(g->ranks[r], &nb, &g->auto_sized);
        if (st != INFERD_OK)
            return inferd_set_error(st, "tensor-parallel rank %d of %d: %s", g->rank0 + r, g->tp, inferd_last_error());
        g->n_blocks = INFERD_MIN(g->n_blocks, nb);
    }
    if (!g->chan)
        return INFERD_OK;
    const int nodes = dist_chan_nnodes(g->chan);
    int64_t *all = inferd_calloc((size_t)nodes, sizeof *all);
    inferd_status st = dist_chan_gather(g->chan, &g->n_blocks, sizeof g->n_blocks, all);
    if (st == INFERD_OK && dist_chan_node_rank(g->chan) == 0) {
        for (int k = 0; k < nodes; k++)
            g->n_blocks = INFERD_MIN(g->n_blocks, all[k]);
        st = dist_chan_bcast(g->chan, &g->n_blocks, sizeof g->n_blocks);
    } else if (st == INFERD_OK) {
        size_t len = 0;
        st = dist_chan_recv(g->chan, &g->n_blocks, sizeof g->n_blocks, &len);
        if (st == INFERD_OK && len != sizeof g->n_blocks)
            st = inferd_set_error(INFERD_ERR_FORMAT, "the KV pool size from node 0 is %zu bytes, not 8", len);
    }
    inferd_free(all);
    return st;
}

/* The options every node must be given alike: they fix each step's shapes,
 * the decode-graph ladder and the collectives' dtypes, so nodes that
 * differ would meet in collectives of other sizes (a hang, or wrong sums);
 * and the KV cache's element, so every rank's heads round K and V alike.
 * Node 0 sends its values with the communicator id; a follower with other
 * values refuses to load, naming the option. */
#define TP_NODE_OPTS 10
static const char *const k_node_opt_flags[TP_NODE_OPTS] = {
    "--tensor-parallel-size", "--max-num-seqs",    "--max-num-batched-tokens", "--max-model-len",
    "--block-size",           "--enforce-eager",   "--tp-reduce-dtype",        "--load-format",
    "--dummy-seed",           "--kv-cache-dtype"};

static void node_opts_of(const model_opts *o, int64_t v[TP_NODE_OPTS])
{
    const int64_t w[TP_NODE_OPTS] = {o->tensor_parallel_size, o->max_num_seqs,    o->max_num_batched_tokens,
                                     o->max_model_len,        o->block_size,      o->enforce_eager,
                                     o->tp_reduce_dtype,      o->load_format,     (int64_t)o->dummy_seed,
                                     o->kv_cache_dtype};
    memcpy(v, w, sizeof w);
}

/* Follower: its options against node 0's (v0). */
static inferd_status node_opts_check(const model_opts *o, const int64_t v0[TP_NODE_OPTS])
{
    int64_t v[TP_NODE_OPTS];
    node_opts_of(o, v);
    for (int i = 0; i < TP_NODE_OPTS; i++)
        if (v[i] != v0[i])
            return inferd_set_error(INFERD_ERR_INVALID_ARG,
                                    "%s is %lld on node %d and %lld on node 0: give every node the same",
                                    k_node_opt_flags[i], (long long)v[i], o->dist.node_rank, (long long)v0[i]);
    return INFERD_OK;
}

/* Several nodes: the rendezvous (node 0 makes the communicator id and
 * hands it out with its node options, which each follower checks),
 * keeping its connections as the control channel. */
static inferd_status join_nodes(model_tp *g, const model_opts *o)
{
    if (o->dist.nnodes <= 1)
        return INFERD_OK;
    const bool cuda = o->device_auto ? kern_cuda_available() : o->backend == KERN_BACKEND_CUDA;
    if (!cuda && g->n != 1)
        return inferd_set_error(INFERD_ERR_INVALID_ARG,
                                "--nnodes %d on the cpu backend: one rank a node (--tensor-parallel-size %d)",
                                o->dist.nnodes, o->dist.nnodes);
    /* the blob: the communicator id, then node 0's node options */
    unsigned char blob[KERN_COMM_ID_BYTES + TP_NODE_OPTS * sizeof(int64_t)];
    int64_t v0[TP_NODE_OPTS];
    inferd_status st;
    if (o->dist.node_rank == 0) {
        dist_rdzv_listener *l = NULL;
        st = dist_rdzv_listen(&o->dist, &l);
        if (st == INFERD_OK && cuda)
            st = kern_comm_make_id(KERN_BACKEND_CUDA, g->id);
        node_opts_of(o, v0);
        memcpy(blob, g->id, sizeof g->id);
        memcpy(blob + sizeof g->id, v0, sizeof v0);
        if (st == INFERD_OK)
            st = dist_chan_serve(l, blob, sizeof blob, &g->chan);
        else
            dist_rdzv_close(l);
    } else {
        size_t len = 0;
        st = dist_chan_join(&o->dist, blob, sizeof blob, &len, &g->chan);
        if (st == INFERD_OK && len != sizeof blob)
            st = inferd_set_error(INFERD_ERR_FORMAT, "the rendezvous blob is %zu bytes, not %zu", len, sizeof blob);
        if (st == INFERD_OK) {
            memcpy(g->id, blob, sizeof g->id);
            memcpy(v0, blob + sizeof g->id, sizeof v0);
            st = node_opts_check(o, v0);
        }
    }
    return st;
}

static model_tp *group_new(const model_opts *opts)
{
    model_tp *g = inferd_calloc(1, sizeof *g);
    const int nodes = INFERD_MAX(opts->dist.nnodes, 1);
    g->tp = INFERD_MAX(opts->tensor_parallel_size, 1);
    g->n = g->tp / nodes;
    g->rank0 = opts->dist.node_rank * g->n;
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
    return g;
}

inferd_status model_tp_load(const model_opts *opts, model **out)
{
    inferd_status st = model_opts_validate(opts);
    if (st != INFERD_OK)
        return st;
    model_tp *g = group_new(opts);
    double t0 = util_now_s();
    st = join_nodes(g, opts);
    if (st == INFERD_OK)
        st = start_workers(g);
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
    if (g->chan) {
        g->msg_cap = model_tp_msg_cap(m);
        g->msg = inferd_malloc(g->msg_cap);
    }
    INFERD_LOG_INFO("tensor parallel: ranks %d..%d of %d loaded in %.1f s, %d KV blocks each", g->rank0,
                    g->rank0 + g->n - 1, g->tp, util_now_s() - t0, m->n_blocks);
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
    model_tp *g = m->tp;
    if (!g)
        return;
    if (g->chan) { /* node 0: the other nodes first; a lost node is fatal (the collectives would hang) */
        size_t len = model_tp_msg_encode(b, step ? MODEL_TP_MSG_STEP : MODEL_TP_MSG_FORWARD, g->msg, g->msg_cap);
        inferd_status st = dist_chan_bcast(g->chan, g->msg, len);
        INFERD_CHECK_MSG(st == INFERD_OK, "tensor parallel: cannot send a step to the other nodes");
    }
    g->b = b;
    post(g, step ? TP_STEP : TP_FORWARD);
}

void model_tp_wait(model *m)
{
    if (m->tp)
        wait_all(m->tp);
}

/* Called on an extra-rows batch by a follower's forward pass only when it
 * is not a follower: never (model_check_batch wants a callback). */
static void no_extra(void *user, int first, int n, const float *logits)
{
    (void)user, (void)first, (void)n, (void)logits;
}

inferd_status model_tp_follow(model *m)
{
    model_tp *g = m->tp;
    if (!g || !g->chan || dist_chan_node_rank(g->chan) == 0)
        return inferd_set_error(INFERD_ERR_INVALID_ARG, "model_tp_follow: not a follower node of a multi-node group");
    float extra_buf[1];
    for (uint64_t steps = 0;; steps++) {
        size_t len = 0;
        inferd_status st = dist_chan_recv(g->chan, g->msg, g->msg_cap, &len);
        if (st == INFERD_ERR_UNAVAILABLE) { /* node 0 closed the group */
            INFERD_LOG_INFO("tensor parallel: node 0 closed the group after %llu steps", (unsigned long long)steps);
            return INFERD_OK;
        }
        model_batch b;
        int kind = 0;
        if (st == INFERD_OK)
            st = model_tp_msg_decode(g->msg, len, &b, &kind);
        if (st == INFERD_OK && b.n_extra > 0) {
            b.extra_buf = extra_buf;
            b.extra_fn = no_extra;
        }
        if (st == INFERD_OK)
            st = model_check_batch(m, &b);
        if (st != INFERD_OK)
            return inferd_set_error(st, "tensor parallel: step %llu from node 0: %s", (unsigned long long)steps,
                                    inferd_last_error());
        g->b = &b; /* this node's ranks run what node 0's rank 0 runs (steps do not fail) */
        run_all(g, kind == MODEL_TP_MSG_STEP ? TP_STEP : TP_FORWARD);
    }
}
