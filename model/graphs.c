/* model/graphs.c: decode steps replayed as CUDA graphs.
 *
 * A decode step of an 8B model is ~300 kernel launches; launched one by one
 * the host cannot keep the GPU busy, so at load the forward pass + sampler
 * of a decode-only batch is captured once per (batch size, context bucket)
 * and each later decode step is one input copy + one graph launch + one
 * copy of the sampled tokens back (vLLM's CUDA graphs).
 *
 * What a graph freezes, and how each is handled:
 *  - batch size: captured for a ladder (1, 2, 4, 8, 16, 24, 32, 48, 64, 96,
 *    128, ... up to max_num_seqs, at most MODEL_GRAPH_MAX_BATCH); a batch of
 *    B sequences replays the next size up, the extra rows are padding:
 *    token 0 at position 0, slot -1 (writes no KV), context 1 read through
 *    the null block 0, greedy sampling; their logits and tokens are ignored.
 *  - pointers: every per-step input (tokens, positions, slot mapping,
 *    query_start_loc, seq_lens, logits indices, sampling parameters, block
 *    tables) lives in one fixed device region, filled before each replay by
 *    one asynchronous copy from a pinned host region of the same layout.
 *    The penalty state (token counts, logit_bias lists) is reached through
 *    pointers inside the sampling parameters, so it may live anywhere on
 *    the device and still change every step (kernels.h, penalties).
 *  - the attention split plan (chunk length, grid) is chosen on the host
 *    from the context length, so it is frozen per graph: each batch size is
 *    captured for context buckets of 256 * 2^k tokens up to max_model_len
 *    (plan made for the bucket's length, valid for any shorter context:
 *    splits of a shorter sequence beyond its length exit at once). Buckets
 *    whose plan does not split share one graph. The bucket also fixes the
 *    block-table row width, ceil(bucket / block_size), so a step uploads
 *    only the table rows it needs.
 *  - cuBLASLt plans: each batch size runs once eagerly before its first
 *    capture, so no heuristic query happens inside a capture; that run is
 *    the search window of kernels/cuda/gemm.cu (the large products of the
 *    graph sizes time cuBLASLt's candidates once, at start-up).
 * Mixed prefill + decode steps, batches above the largest size, and steps
 * with logits rows other than one per sequence run eagerly (model_step).
 *
 * Two host regions are written by turns. With one step in flight at a
 * time, each is rewritten only after the token copy of the step that
 * uploaded it; with two (async scheduling, model_step_launch) the step
 * launched now writes the region of two launches ago, whose step's tokens
 * the caller has already waited for, so an asynchronous copy never reads a
 * half-written region. A chained step's input tokens are the previous
 * step's sampled ones: the region's src rows name them, and one small
 * kernel (kern_tokens_from) copies them into the region's tokens on the
 * device, between the upload and the replay.
 */
#include <stdlib.h>
#include <string.h>

#include "common/alloc.h"
#include "common/log.h"
#include "common/util.h"
#include "kvcache/kv_pool.h"
#include "model/model_internal.h"

#define REGION_ALIGN 256

static size_t region_take(size_t *off, size_t bytes)
{
    size_t at = *off;
    *off += (bytes + REGION_ALIGN - 1) & ~(size_t)(REGION_ALIGN - 1);
    return at;
}

/* Batch sizes 1, 2, 4, 8, then steps of a quarter to half of the size
 * (16, 24, 32, 48, 64, 96, 128, 192, 256, 384, 512), capped at max_batch,
 * which is always included. */
static void make_ladder(model_graphs *g, int max_batch)
{
    static const int k_ladder[] = {1, 2, 4, 8, 16, 24, 32, 48, 64, 96, 128, 192, 256, 384, 512, 768, 1024};
    g->n_sizes = 0;
    for (size_t i = 0; i < INFERD_ARRAY_LEN(k_ladder) && k_ladder[i] < max_batch; i++)
        g->sizes[g->n_sizes++] = k_ladder[i];
    g->sizes[g->n_sizes++] = max_batch;
}

/* Context buckets 256, 512, ... (doubling), the last one max_model_len. */
static void make_buckets(model_graphs *g, int max_model_len)
{
    g->n_buckets = 0;
    for (int64_t b = 256; b < max_model_len && g->n_buckets < MODEL_GRAPH_MAX_BUCKETS - 1; b *= 2)
        g->buckets[g->n_buckets++] = (int)b;
    g->buckets[g->n_buckets++] = max_model_len;
}

static int bucket_width(const model *m, int bucket)
{
    return INFERD_CEIL_DIV(bucket, m->block_size);
}

/* Lay out the input region for the largest batch and widest table. */
static inferd_status alloc_region(model *m)
{
    model_graphs *g = &m->gr;
    size_t S = (size_t)g->sizes[g->n_sizes - 1], off = 0;
    g->off_sparams = region_take(&off, S * sizeof(kern_sample_params));
    g->off_slots = region_take(&off, S * sizeof(int64_t));
    g->off_tokens = region_take(&off, S * sizeof(int32_t));
    g->off_positions = region_take(&off, S * sizeof(int32_t));
    g->off_qsl = region_take(&off, (S + 1) * sizeof(int32_t));
    g->off_seq_lens = region_take(&off, S * sizeof(int32_t));
    g->off_logits_idx = region_take(&off, S * sizeof(int32_t));
    g->off_src = region_take(&off, S * sizeof(int32_t));
    g->off_tables = region_take(&off, S * (size_t)m->max_blocks_per_seq * sizeof(int32_t));
    g->bytes = off;
    g->hosts[0] = kern_host_alloc(m->kc, off);
    g->hosts[1] = kern_host_alloc(m->kc, off);
    g->host = g->hosts[0];
    g->dev = kern_alloc(m->kc, off);
    if (!g->hosts[0] || !g->hosts[1] || !g->dev)
        return inferd_set_error(INFERD_ERR_NOMEM, "graphs: cannot allocate the %.1f MiB input region",
                                off / 1048576.0);
    memset(g->hosts[0], 0, off);
    memset(g->hosts[1], 0, off);
    return INFERD_OK;
}

#define HOST(g, T, f) ((T *)((g)->host + (g)->off_##f))
#define DEV(g, T, f) ((T *)((g)->dev + (g)->off_##f))

/* The graph inputs as forward_ops sees them, for rows sequences and table width w. */
static void region_in(model_graphs *g, int rows, int w, int max_len, model_fwd_in *in)
{
    memset(in, 0, sizeof *in);
    in->tokens = DEV(g, int32_t, tokens);
    in->positions = DEV(g, int32_t, positions);
    in->slots = DEV(g, int64_t, slots);
    in->qsl = DEV(g, int32_t, qsl);
    in->seq_lens = DEV(g, int32_t, seq_lens);
    in->block_tables = DEV(g, int32_t, tables);
    in->logits_idx = DEV(g, int32_t, logits_idx);
    in->n_tokens = in->n_seqs = in->n_logits = rows;
    in->bt_width = w;
    in->max_q = 1;
    in->max_len = max_len;
}

/* Rows [from, rows) of the host region become padding (see the top). */
static void fill_padding(model_graphs *g, int from, int rows, int w)
{
    for (int i = from; i < rows; i++) {
        HOST(g, int32_t, tokens)[i] = 0;
        HOST(g, int32_t, positions)[i] = 0;
        HOST(g, int64_t, slots)[i] = -1;
        HOST(g, int32_t, qsl)[i] = i;
        HOST(g, int32_t, seq_lens)[i] = 1;
        HOST(g, int32_t, logits_idx)[i] = i;
        HOST(g, int32_t, tables)[(size_t)i * w] = KV_NULL_BLOCK;
        kern_sample_params *p = &HOST(g, kern_sample_params, sparams)[i];
        memset(p, 0, sizeof *p);
        p->top_p = 1.0f;
    }
    HOST(g, int32_t, qsl)[rows] = rows;
}

static void upload_region(model *m, int rows, int w)
{
    model_graphs *g = &m->gr;
    kern_memcpy_h2d(m->kc, g->dev, g->host, g->off_tables + (size_t)rows * (size_t)w * sizeof(int32_t));
}

/* Host mirrors for the attention plan, from the host region. */
static void set_mirrors(model *m, int rows)
{
    memcpy(m->h_qsl, HOST(&m->gr, int32_t, qsl), ((size_t)rows + 1) * sizeof(int32_t));
    memcpy(m->h_seq_lens, HOST(&m->gr, int32_t, seq_lens), (size_t)rows * sizeof(int32_t));
}

/* The penalty launch is always part of the graph: the rows that need it
 * are only known at replay, from the uploaded params. */
static void enqueue_step(model *m, const model_fwd_in *in)
{
    model_forward_ops(m, in);
    if (m->follower) /* tensor parallelism: rank 0 samples */
        return;
    kern_penalty_apply(m->kc, m->a.logits, DEV(&m->gr, kern_sample_params, sparams), in->n_logits,
                       m->cfg.vocab_size);
    kern_sample(m->kc, m->a.sampled, m->a.logits, DEV(&m->gr, kern_sample_params, sparams), in->n_logits,
                m->cfg.vocab_size, m->a.sample_ws);
}

/* Capture the graph of batch size index si, bucket index bi. The capture
 * batch is all padding except row 0, whose context is the bucket's length
 * (read through the null block), so the attention plan is the bucket's. */
static inferd_status capture_one(model *m, int si, int bi, bool warm, kern_graph **out)
{
    model_graphs *g = &m->gr;
    int rows = g->sizes[si], L = g->buckets[bi], w = bucket_width(m, L);
    kern_sync(m->kc); /* the previous upload has read the host region */
    fill_padding(g, 0, rows, w);
    HOST(g, int32_t, seq_lens)[0] = L;
    HOST(g, int32_t, positions)[0] = L - 1;
    for (int j = 0; j < w; j++)
        HOST(g, int32_t, tables)[j] = KV_NULL_BLOCK;
    set_mirrors(m, rows);
    upload_region(m, rows, w);
    model_fwd_in in;
    region_in(g, rows, w, L, &in);
    if (warm) { /* loads the kernels and caches (and searches) the cuBLASLt plans of this size */
        kern_gemm_search_window(m->kc, true);
        enqueue_step(m, &in);
        kern_sync(m->kc);
        kern_gemm_search_window(m->kc, false);
    }
    inferd_status st = kern_graph_begin(m->kc);
    if (st != INFERD_OK)
        return st;
    enqueue_step(m, &in);
    return kern_graph_end(m->kc, out);
}

/* Every bucket of batch size index si, longest first; a bucket whose plan
 * does not split serves every shorter bucket too. */
static void capture_size(model *m, int si)
{
    model_graphs *g = &m->gr;
    for (int bi = g->n_buckets - 1; bi >= 0; bi--) {
        kern_graph *graph = NULL;
        inferd_status st = capture_one(m, si, bi, bi == g->n_buckets - 1, &graph);
        if (st != INFERD_OK) {
            INFERD_LOG_WARN("graphs: batch %d, context %d: capture failed (%s); those steps run eagerly",
                            g->sizes[si], g->buckets[bi], inferd_last_error());
            continue;
        }
        g->g[si][bi] = graph;
        g->n_graphs++;
        if (kern_attn_last_splits(m->kc) <= 1) {
            for (int k = 0; k < bi; k++)
                g->g[si][k] = graph;
            return;
        }
    }
}

/* The largest captured batch: MODEL_GRAPH_MAX_BATCH, or INFERD_GRAPH_MAX_BATCH
 * in [1, MODEL_GRAPH_MAX_BATCH_ENV] (an A/B knob of device-wave.sh). */
static int graph_max_batch(void)
{
    const char *v = getenv("INFERD_GRAPH_MAX_BATCH");
    int n = v && *v ? atoi(v) : 0;
    return n >= 1 && n <= MODEL_GRAPH_MAX_BATCH_ENV ? n : MODEL_GRAPH_MAX_BATCH;
}

inferd_status model_graphs_init(model *m)
{
    model_graphs *g = &m->gr;
    if (g->enabled || m->opts.enforce_eager || !kern_graphs_supported(m->kc))
        return INFERD_OK;
    double t0 = util_now_s();
    make_ladder(g, INFERD_MIN(m->S, graph_max_batch()));
    make_buckets(g, m->max_model_len);
    inferd_status st = alloc_region(m);
    if (st != INFERD_OK) {
        model_graphs_free(m);
        return st;
    }
    for (int si = 0; si < g->n_sizes; si++)
        capture_size(m, si);
    kern_sync(m->kc);
    m->last_n_logits = 0;
    g->enabled = g->n_graphs > 0;
    g->capture_s = util_now_s() - t0;
    INFERD_LOG_INFO("graphs: captured %d decode graphs (batch sizes 1..%d, %d context buckets up to %d) in %.2f s",
                    g->n_graphs, g->sizes[g->n_sizes - 1], g->n_buckets, g->buckets[g->n_buckets - 1],
                    g->capture_s);
    return INFERD_OK;
}

void model_graphs_free(model *m)
{
    model_graphs *g = &m->gr;
    if (!m->kc)
        return;
    for (int si = 0; si < g->n_sizes; si++)
        for (int bi = 0; bi < g->n_buckets; bi++) {
            kern_graph *graph = g->g[si][bi];
            if (!graph)
                continue;
            for (int k = 0; k < g->n_buckets; k++) /* a row may repeat one graph */
                if (g->g[si][k] == graph)
                    g->g[si][k] = NULL;
            kern_graph_free(m->kc, graph);
        }
    kern_host_free(m->kc, g->hosts[0]);
    kern_host_free(m->kc, g->hosts[1]);
    kern_free(m->kc, g->dev);
    memset(g, 0, sizeof *g);
    /* model_free calls this last thing before the context goes: the
     * profiler's timers (forward.c) go with the graphs */
    model_prof_enable(m, 0);
}

/* The graph of a decode-only batch, or NULL. */
static kern_graph *pick(const model *m, const model_batch *b, int *si, int *bi, int *max_len)
{
    const model_graphs *g = &m->gr;
    int n = b->n_seqs;
    if (!g->enabled || b->n_tokens != n || b->n_logits != n || n > g->sizes[g->n_sizes - 1])
        return NULL;
    *max_len = 0;
    for (int i = 0; i < n; i++) {
        if (b->query_start_loc[i] != i || b->logits_indices[i] != i)
            return NULL;
        *max_len = INFERD_MAX(*max_len, b->seq_lens[i]);
    }
    for (*si = 0; g->sizes[*si] < n; (*si)++)
        ;
    for (*bi = 0; *bi < g->n_buckets - 1 && g->buckets[*bi] < *max_len; (*bi)++)
        ;
    return g->g[*si][*bi];
}

bool model_graph_launch(model *m, const model_batch *b, const kern_sample_params *params,
                        const int32_t *prev_rows)
{
    int si, bi, max_len;
    kern_graph *graph = pick(m, b, &si, &bi, &max_len);
    if (!graph)
        return false;
    model_graphs *g = &m->gr;
    int n = b->n_seqs, rows = g->sizes[si], w = bucket_width(m, g->buckets[bi]), bs = m->block_size;
    /* the region of two launches ago: its upload ran before that step's
     * tokens came back, which the caller has waited for */
    g->host_turn ^= 1;
    g->host = g->hosts[g->host_turn];
    memcpy(HOST(g, int32_t, tokens), b->tokens, (size_t)n * sizeof(int32_t));
    memcpy(HOST(g, int32_t, positions), b->positions, (size_t)n * sizeof(int32_t));
    memcpy(HOST(g, int64_t, slots), b->slot_mapping, (size_t)n * sizeof(int64_t));
    memcpy(HOST(g, int32_t, qsl), b->query_start_loc, (size_t)n * sizeof(int32_t));
    memcpy(HOST(g, int32_t, seq_lens), b->seq_lens, (size_t)n * sizeof(int32_t));
    memcpy(HOST(g, int32_t, logits_idx), b->logits_indices, (size_t)n * sizeof(int32_t));
    if (prev_rows) /* src is read only by the kern_tokens_from below, over these n rows */
        memcpy(HOST(g, int32_t, src), prev_rows, (size_t)n * sizeof(int32_t));
    if (params) /* NULL on the other ranks of a group, which do not sample */
        memcpy(HOST(g, kern_sample_params, sparams), params, (size_t)n * sizeof(kern_sample_params));
    for (int i = 0; i < n; i++) /* only the blocks a row reads: ceil(seq_len / block_size) <= w */
        memcpy(HOST(g, int32_t, tables) + (size_t)i * w, b->block_tables + (size_t)i * b->max_blocks_per_seq,
               (size_t)INFERD_CEIL_DIV(b->seq_lens[i], bs) * sizeof(int32_t));
    fill_padding(g, n, rows, w);
    upload_region(m, rows, w);
    if (prev_rows) /* after the upload, before the replay reads them; the sampler writes later */
        kern_tokens_from(m->kc, DEV(g, int32_t, tokens), DEV(g, int32_t, src), m->a.sampled, n);
    kern_graph_launch(m->kc, graph);
    model_prof_step_end(m);
    m->last_n_logits = n;
    g->replays++;
    return true;
}

void model_graph_info_get(const model *m, model_graph_info *out)
{
    const model_graphs *g = &m->gr;
    memset(out, 0, sizeof *out);
    out->enabled = g->enabled;
    out->n_graphs = g->n_graphs;
    out->max_batch = g->enabled ? g->sizes[g->n_sizes - 1] : 0;
    out->capture_s = g->capture_s;
    out->replays = g->replays;
    out->eager_steps = g->eager_steps;
}
