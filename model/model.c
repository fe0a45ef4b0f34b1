/* model/model.c: model lifecycle and memory plan.
 *
 * model_load reads the config, creates the kernel context, loads the weights
 * into one slab (model_weights.c), then sizes everything else once:
 *  - the activation arena for max_num_batched_tokens tokens, max_num_seqs
 *    sequences and as many logits rows, with fixed buffers for every
 *    per-step input (tokens, positions, slots, block tables, ...) so that the
 *    forward pass never allocates and decode graphs can be captured later;
 *  - the paged KV storage: --kv-cache-bytes, or on CUDA what is left of
 *    gpu_memory_utilization * device memory after weights and activations
 *    (CPU: max_num_seqs max-length sequences, at most 1/4 of available RAM);
 *    its element is --kv-cache-dtype's (the act dtype, or fp8 e4m3). An fp8
 *    cache on CUDA also needs one layer's act-dtype copy of the pool for the
 *    prefill attention (kern_attn_kv_dequant_bytes), carved from the same
 *    budget: each block costs its KV bytes plus its share of that copy.
 * The numbers are logged; a model that does not fit gets an error with them.
 *
 * Two guards against a load that "works" and fails later: on the CPU the
 * weight slab, the arena and the smallest KV cache are compared with
 * available memory (MemAvailable) before the slab is allocated, since an
 * overcommitted malloc succeeds and the OOM killer strikes when the pages
 * are touched (model_check_host_memory); and an automatically sized KV cache
 * must hold one max_model_len sequence, or max_model_len is lowered to what
 * it holds, with a warning naming both (a request longer than the whole pool
 * could be admitted by length and never run).
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/alloc.h"
#include "common/log.h"
#include "common/util.h"
#include "kvcache/kv_layout.h"
#include "model/model_internal.h"

#define ARENA_ALIGN 256

typedef struct {
    char *base; /* NULL while measuring */
    size_t off;
} arena;

static void *arena_take(arena *a, size_t bytes)
{
    void *p = a->base ? a->base + a->off : NULL;
    a->off += (bytes + ARENA_ALIGN - 1) & ~(size_t)(ARENA_ALIGN - 1);
    return p;
}

/* Carve every activation buffer from `a` (measure when a->base == NULL). */
static void plan_acts(model *m, arena *a)
{
    const model_config *c = &m->lc; /* this rank's heads and intermediate size */
    size_t T = (size_t)m->T, S = (size_t)m->S, R = (size_t)m->R;
    size_t es = kern_dtype_size(m->act_dtype);
    size_t d = (size_t)c->hidden_size, f = (size_t)c->intermediate_size;
    size_t nq = (size_t)c->n_heads * c->head_dim;
    size_t nqkv = (size_t)(c->n_heads + 2 * c->n_kv_heads) * c->head_dim;
    model_acts *x = &m->a;
    x->x = arena_take(a, T * d * es);
    x->h = arena_take(a, T * d * es);
    x->qkv = arena_take(a, T * nqkv * es);
    x->attn = arena_take(a, T * nq * es);
    x->proj = arena_take(a, T * d * es);
    if (model_tp_partials_f32(m))
        x->proj_f32 = arena_take(a, T * d * sizeof(float));
    x->gate_up = arena_take(a, T * 2 * f * es);
    x->act = arena_take(a, T * f * es);
    x->gx = arena_take(a, R * d * es);
    x->gp = arena_take(a, R * d * es);
    x->gn = arena_take(a, R * d * es);
    x->logits = arena_take(a, R * (size_t)c->vocab_size * sizeof(float));
    if (model_has_comm_planned(m)) {
        const size_t chunk = (size_t)model_vocab_chunk(m);
        x->logits_part = arena_take(a, R * chunk * sizeof(float));
        x->logits_all = arena_take(a, (size_t)m->sh.tp * R * chunk * sizeof(float));
    }
    x->tokens = arena_take(a, T * sizeof(int32_t));
    x->positions = arena_take(a, T * sizeof(int32_t));
    x->slots = arena_take(a, T * sizeof(int64_t));
    x->qsl = arena_take(a, (S + 1) * sizeof(int32_t));
    x->seq_lens = arena_take(a, S * sizeof(int32_t));
    x->block_tables = arena_take(a, S * (size_t)m->max_blocks_per_seq * sizeof(int32_t));
    x->logits_idx = arena_take(a, R * sizeof(int32_t));
    x->sparams = arena_take(a, R * sizeof(kern_sample_params));
    x->sampled = arena_take(a, R * sizeof(int32_t));
    x->src_rows = arena_take(a, T * sizeof(int32_t));
    x->inv_freq = arena_take(a, (size_t)c->head_dim / 2 * sizeof(float));
    x->attn_ws = arena_take(
        a, kern_attn_workspace_bytes(m->kc, m->T, m->S, c->n_heads, c->head_dim, m->max_model_len));
    x->sample_ws = arena_take(a, kern_sample_workspace_bytes(m->kc, m->R, c->vocab_size));
}

static inferd_status alloc_acts(model *m)
{
    arena a = {0};
    plan_acts(m, &a);
    m->act_bytes = a.off;
    m->act_slab = kern_alloc(m->kc, a.off);
    if (!m->act_slab)
        return inferd_set_error(INFERD_ERR_NOMEM,
                                "cannot allocate the activation arena: %.1f MiB for %d tokens per step",
                                a.off / 1048576.0, m->T);
    a.base = m->act_slab;
    a.off = 0;
    plan_acts(m, &a);
    float *inv = inferd_malloc(sizeof(float) * (size_t)(m->cfg.head_dim / 2));
    model_rope_inv_freq(&m->cfg, inv);
    kern_memcpy_h2d(m->kc, m->a.inv_freq, inv, sizeof(float) * (size_t)(m->cfg.head_dim / 2));
    inferd_free(inv);
    return INFERD_OK;
}

/* The smallest KV cache load accepts (bytes): --kv-cache-bytes, or when
 * sized automatically the null block and one block of tokens. */
static int64_t kv_min_bytes(const model *m)
{
    if (m->opts.kv_cache_bytes > 0)
        return m->opts.kv_cache_bytes;
    return (KV_NULL_BLOCKS + 1) * model_kv_budget_per_block(m);
}

inferd_status model_check_host_memory(model *m, size_t weight_bytes)
{
    if (kern_ctx_backend(m->kc) != KERN_BACKEND_CPU)
        return INFERD_OK;
    size_t avail = 0, total = 0;
    inferd_status st = kern_mem_info(m->kc, &avail, &total);
    if (st != INFERD_OK)
        return st;
    arena a = {0};
    plan_acts(m, &a); /* measure only */
    const double mib = 1048576.0;
    const double kv = (double)kv_min_bytes(m);
    const double need = (double)weight_bytes + (double)a.off + kv;
    if (need <= (double)avail)
        return INFERD_OK;
    const char *ov = getenv("INFERD_TEST_MEM_AVAILABLE");
    return inferd_set_error(
        INFERD_ERR_NOMEM,
        "not enough host memory for %s on the cpu backend: weights %.1f MiB + activations %.1f MiB (%d tokens/step) "
        "+ KV cache %.1f MiB (%s) = %.1f MiB, but only %.1f MiB are available (%s) of %.1f MiB; lower "
        "--max-num-batched-tokens or --kv-cache-bytes, or free memory",
        m->opts.model_dir, (double)weight_bytes / mib, (double)a.off / mib, m->T, kv / mib,
        m->opts.kv_cache_bytes > 0 ? "--kv-cache-bytes" : "at least 2 blocks", need / mib, (double)avail / mib,
        ov && *ov ? "INFERD_TEST_MEM_AVAILABLE" : "MemAvailable, /proc/meminfo", (double)total / mib);
}

/* An automatically sized pool of n_blocks must hold one max_model_len
 * sequence; when it cannot, lower max_model_len (and the block-table width)
 * to what it holds. Buffers already sized for the larger length stay valid:
 * they are only bigger than needed. An explicit --kv-cache-bytes is the
 * user's choice: longer requests are refused at submission; warn only. */
static void fit_max_model_len(model *m, int64_t n_blocks, bool auto_sized)
{
    int64_t cap = kv_max_len_for_blocks(n_blocks, m->block_size);
    if (cap >= m->max_model_len)
        return;
    if (!auto_sized) {
        INFERD_LOG_WARN("KV cache: --kv-cache-bytes gives %lld blocks of %d tokens = %lld tokens, fewer than "
                        "max_model_len %d: longer requests will be refused",
                        (long long)n_blocks - KV_NULL_BLOCKS, m->block_size, (long long)cap, m->max_model_len);
        return;
    }
    INFERD_LOG_WARN("KV cache: the memory left holds %lld blocks of %d tokens = %lld tokens, fewer than "
                    "max_model_len %d: lowering max_model_len to %lld (raise --gpu-memory-utilization or "
                    "--kv-cache-bytes, or give --max-model-len)",
                    (long long)n_blocks - KV_NULL_BLOCKS, m->block_size, (long long)cap, m->max_model_len,
                    (long long)cap);
    m->max_model_len = (int)cap;
    m->max_blocks_per_seq = INFERD_CEIL_DIV(m->max_model_len, m->block_size);
}

/* Bytes of the fp8 cache's prefill copy (kv_dequant) for n_blocks blocks;
 * 0 without fp8 or on the CPU (it reads fp8). */
static size_t kv_dequant_bytes(const model *m, int64_t n_blocks)
{
    if (!model_kv_fp8(m))
        return 0;
    return kern_attn_kv_dequant_bytes(m->kc, n_blocks, m->lc.n_kv_heads, m->block_size, m->lc.head_dim);
}

/* How many KV blocks this rank's memory holds (>= 2, else NOMEM with the
 * numbers); *auto_sized: decided from free memory, not --kv-cache-bytes.
 * A block costs its KV bytes and its rows of the fp8 prefill copy. */
inferd_status model_load_rank_kv(model *m, int64_t *n_blocks, bool *auto_sized)
{
    int64_t per_block = model_kv_budget_per_block(m);
    int64_t budget = m->opts.kv_cache_bytes;
    *auto_sized = budget <= 0;
    if (*auto_sized) {
        size_t free_b = 0, total_b = 0;
        inferd_status st = kern_mem_info(m->kc, &free_b, &total_b);
        if (st != INFERD_OK)
            return st;
        if (kern_ctx_backend(m->kc) == KERN_BACKEND_CUDA) {
            double allowed = m->opts.gpu_memory_utilization * (double)total_b;
            budget = (int64_t)(allowed - (double)(total_b - free_b));
        } else {
            /* CPU: room for max_num_seqs sequences of max length plus the
             * null block, at most 1/4 of available RAM (shared by the ranks) */
            int64_t want = kv_blocks_for_seqs(m->S, m->max_model_len, m->block_size) * per_block;
            budget = INFERD_MIN(want, (int64_t)(free_b / 4 / (size_t)m->sh.tp));
        }
    }
    int64_t n = budget / per_block;
    if (n < 2)
        return inferd_set_error(INFERD_ERR_NOMEM,
                                "model does not fit: weights %.1f MiB, activations %.1f MiB, KV budget "
                                "%.1f MiB holds %lld blocks of %.2f MiB (need >= 2)%s",
                                m->weight_bytes / 1048576.0, m->act_bytes / 1048576.0, budget / 1048576.0,
                                (long long)n, per_block / 1048576.0, m->sh.tp > 1 ? " on one tensor-parallel rank" : "");
    *n_blocks = INFERD_MIN(n, (int64_t)(INT32_MAX / 2));
    return INFERD_OK;
}

/* Allocate the KV pool of n_blocks (one slab, per-layer K and V); every
 * rank of a group gets the same count (the scheduler's block ids are
 * shared). */
inferd_status model_load_rank_alloc_kv(model *m, int64_t n_blocks, bool auto_sized)
{
    fit_max_model_len(m, n_blocks, auto_sized);
    m->n_blocks = (int)n_blocks;
    m->kv_bytes = (size_t)(n_blocks * model_kv_bytes_per_block(m));
    m->kv_slab = kern_alloc(m->kc, m->kv_bytes);
    if (!m->kv_slab)
        return inferd_set_error(INFERD_ERR_NOMEM, "cannot allocate the KV cache: %.1f MiB",
                                m->kv_bytes / 1048576.0);
    kern_memset0(m->kc, m->kv_slab, m->kv_bytes);
    m->kv_dequant_bytes = kv_dequant_bytes(m, n_blocks);
    if (m->kv_dequant_bytes > 0 && !(m->kv_dequant = kern_alloc(m->kc, m->kv_dequant_bytes)))
        return inferd_set_error(INFERD_ERR_NOMEM, "cannot allocate the fp8 KV cache's prefill copy: %.1f MiB",
                                m->kv_dequant_bytes / 1048576.0);
    size_t layer_half = m->kv_bytes / (2 * (size_t)m->cfg.n_layers);
    char *p = m->kv_slab;
    for (int l = 0; l < m->cfg.n_layers; l++) {
        m->layers[l].k_cache = p;
        m->layers[l].v_cache = p + layer_half;
        p += 2 * layer_half;
    }
    return INFERD_OK;
}

static void log_plan(const model *m)
{
    int64_t kv_tokens = (int64_t)(m->n_blocks - 1) * m->block_size;
    const model_shard *sh = &m->sh;
    if (sh->rank == 0)
        INFERD_LOG_INFO("model: %s, %d layers, d=%d, heads %d/%d x %d, vocab %d, backend %s (%s weights%s)",
                        m->cfg.arch, m->cfg.n_layers, m->cfg.hidden_size, m->cfg.n_heads, m->cfg.n_kv_heads,
                        m->cfg.head_dim, m->cfg.vocab_size, kern_backend_name(kern_ctx_backend(m->kc)),
                        kern_dtype_name(m->embed.dtype), m->norm_fold ? ", norms folded" : "");
    if (sh->tp > 1 || m->comm)
        INFERD_LOG_INFO("tensor parallel rank %d/%d (%s %d): q heads [%lld, %lld), kv heads [%lld, %lld)%s, "
                        "intermediate [%lld, %lld), vocabulary [%lld, %lld)",
                        sh->rank, sh->tp, kern_ctx_backend(m->kc) == KERN_BACKEND_CUDA ? "device" : "cpu thread",
                        kern_ctx_backend(m->kc) == KERN_BACKEND_CUDA ? m->device : sh->rank,
                        (long long)sh->q_heads.begin,
                        (long long)(sh->q_heads.begin + sh->q_heads.count), (long long)sh->kv_heads.begin,
                        (long long)(sh->kv_heads.begin + sh->kv_heads.count),
                        sh->kv_replicas > 1 ? " (replicated)" : "", (long long)sh->inter.begin,
                        (long long)(sh->inter.begin + sh->inter.count), (long long)sh->vocab.begin,
                        (long long)(sh->vocab.begin + sh->vocab.count));
    char dq[96] = "";
    if (m->kv_dequant_bytes > 0)
        snprintf(dq, sizeof dq, " + %.1f MiB %s prefill copy", m->kv_dequant_bytes / 1048576.0,
                 kern_dtype_name(m->act_dtype));
    INFERD_LOG_INFO("memory%s: weights %.1f MiB, activations %.1f MiB (%d tokens/step), KV cache %.1f MiB "
                    "%s%s = %d blocks x %d = %lld tokens, max %.1f concurrent sequences at max length %d",
                    sh->tp > 1 ? " of this rank" : "", m->weight_bytes / 1048576.0, m->act_bytes / 1048576.0, m->T,
                    m->kv_bytes / 1048576.0, kern_dtype_name(m->kv_dtype), dq, m->n_blocks, m->block_size,
                    (long long)kv_tokens, (double)kv_tokens / m->max_model_len, m->max_model_len);
}

/* The option rows' checks (model_opts.c), then the one bound that depends
 * on the config. */
static inferd_status check_opts(const model_opts *o, const model_config *c)
{
    inferd_status st = model_opts_validate(o);
    if (st != INFERD_OK)
        return st;
    const int32_t ctx = model_config_context_len(c);
    if (o->max_model_len > ctx)
        return inferd_set_error(INFERD_ERR_INVALID_ARG,
                                "model options: max_model_len %d out of range [0, %d] (%s)", o->max_model_len, ctx,
                                ctx == c->max_position_embeddings ? "max_position_embeddings"
                                                                  : "the context of the config's rope scaling");
    return INFERD_OK;
}

/* --generation-config: "auto" (or unset) keeps the sampling defaults
 * model_config_load read from the model directory, "vllm" drops them (the
 * engine's own defaults apply, vLLM's name for that), anything else is a
 * directory holding the generation_config.json to use. The eos ids always
 * come from the model directory: they are part of the model, not a
 * sampling preference. */
static inferd_status load_gen_defaults(const model_opts *o, model_config *c)
{
    const char *gc = o->generation_config;
    if (!gc || strcmp(gc, "auto") == 0)
        return INFERD_OK;
    if (strcmp(gc, "vllm") == 0) {
        c->gen.n = 0;
        return INFERD_OK;
    }
    if (!util_file_exists(gc))
        return inferd_set_error(INFERD_ERR_NOT_FOUND,
                                "model options: generation_config '%s' is neither auto, vllm nor an existing "
                                "directory",
                                gc);
    return model_gen_defaults_load(gc, &c->gen);
}

/* One throw-away prefill of up to 512 tokens and one decode step, so that
 * lazily loaded kernels and cuBLASLt plans are ready before the first real
 * request (vLLM's profile run plays the same role). No block table: nothing
 * is written to the KV cache and attention reads the zeroed null block 0. */
static inferd_status model_warmup(model *m)
{
    int n = INFERD_MIN(INFERD_MIN(m->T, 512), m->max_model_len);
    int32_t *toks = inferd_calloc((size_t)n, sizeof(int32_t));
    inferd_status st = model_forward_seq(m, NULL, toks, 0, n, n - 1); /* prefill path */
    if (st == INFERD_OK)
        st = model_forward_seq(m, NULL, toks, n - 1, 1, 0); /* decode path */
    kern_sync(m->kc);
    m->last_n_logits = 0;
    inferd_free(toks);
    return st;
}

/* This rank's split and the dims the forward pass computes with. */
static inferd_status plan_shard(model *m, int rank)
{
    const int tp = m->opts.tensor_parallel_size > 0 ? m->opts.tensor_parallel_size : 1;
    inferd_status st = model_shard_plan(&m->cfg, tp, rank, &m->sh);
    if (st != INFERD_OK)
        return st;
    m->lc = m->cfg;
    m->lc.n_heads = (int)m->sh.q_heads.count;
    m->lc.n_kv_heads = (int)m->sh.kv_heads.count;
    m->lc.intermediate_size = (int)m->sh.inter.count;
    m->follower = rank > 0;
    return INFERD_OK;
}

/* Load phase 1 of a rank: config, context (device device_id + rank),
 * weights (this rank's slices), activations. */
static inferd_status load_begin(model *m, int rank, int local)
{
    inferd_status st = model_config_load(m->opts.model_dir, &m->cfg);
    if (st != INFERD_OK)
        return st;
    if ((st = check_opts(&m->opts, &m->cfg)) != INFERD_OK || (st = load_gen_defaults(&m->opts, &m->cfg)))
        return st;
    if ((st = plan_shard(m, rank)) != INFERD_OK)
        return st;
    if (m->opts.device_auto)
        m->opts.backend = kern_cuda_available() ? KERN_BACKEND_CUDA : KERN_BACKEND_CPU;
    m->device = m->opts.device_id + local;
    kern_ctx_opts ko = {
        .backend = m->opts.backend, .n_threads = m->opts.n_threads, .device_id = m->opts.device_id + local};
    if ((st = kern_ctx_create(&ko, &m->kc)) != INFERD_OK)
        return st;
    const char *ko_list = getenv("INFERD_KNOCKOUT"); /* timing only (model_knockout_parse) */
    if (ko_list && *ko_list) {
        if ((st = model_knockout_parse(ko_list, &m->knockout)) != INFERD_OK)
            return st;
        snprintf(m->knockout_list, sizeof m->knockout_list, "%s", ko_list); /* <= 256: parsed */
        INFERD_LOG_WARN("INFERD_KNOCKOUT=%.64s: decode steps leave these ops out; for timing only, the outputs "
                        "are wrong", ko_list);
    }
    m->act_dtype = kern_act_dtype(m->kc);
    m->kv_dtype = m->opts.kv_cache_dtype == MODEL_KV_CACHE_FP8_E4M3 ? KERN_DTYPE_FP8_E4M3 : m->act_dtype;
    m->block_size = m->opts.block_size;
    m->max_model_len = m->opts.max_model_len > 0 ? m->opts.max_model_len : model_config_context_len(&m->cfg);
    m->max_blocks_per_seq = INFERD_CEIL_DIV(m->max_model_len, m->block_size);
    m->T = m->opts.max_num_batched_tokens;
    m->S = m->opts.max_num_seqs;
    m->R = m->S;
    /* A valid model that this backend's kernels cannot run (head_dim, GQA,
     * dtype, lengths) fails here, naming the field, not at the first request. */
    const model_config *c = &m->lc;
    kern_model_shape shape = {
        .hidden = c->hidden_size, .intermediate = c->intermediate_size, .n_heads = c->n_heads,
        .n_kv_heads = c->n_kv_heads, .head_dim = c->head_dim, .vocab = c->vocab_size,
        .weight_dtype = strcmp(c->torch_dtype, "float32") == 0   ? KERN_DTYPE_F32
                        : strcmp(c->torch_dtype, "float16") == 0 ? KERN_DTYPE_F16
                                                                  : KERN_DTYPE_BF16,
        .block_size = m->block_size, .max_model_len = m->max_model_len, .max_batch_tokens = m->T};
    if ((st = kern_ctx_check_model(m->kc, &shape)) != INFERD_OK)
        return st;
    m->h_qsl = inferd_calloc((size_t)m->S + 1, sizeof(int32_t));
    m->h_seq_lens = inferd_calloc((size_t)m->S, sizeof(int32_t));
    m->h_pos = inferd_calloc((size_t)m->T, sizeof(int32_t));
    m->h_idx = inferd_calloc((size_t)m->T, sizeof(int32_t));
    m->h_slots = inferd_calloc((size_t)m->T, sizeof(int64_t));
    m->h_null_table = inferd_calloc((size_t)m->max_blocks_per_seq, sizeof(int32_t));
    if ((st = model_weights_load(m)) != INFERD_OK)
        return st;
    return alloc_acts(m);
}

inferd_status model_load_rank_begin(const model_opts *opts, int rank, int local, model **out)
{
    model *m = inferd_calloc(1, sizeof *m);
    m->opts = *opts;
    *out = m;
    return load_begin(m, rank, local);
}

/* Load phase 3: warm-up and graph capture (with a communicator every rank
 * runs them at once: both run collectives), then the plan is logged. */
inferd_status model_load_rank_end(model *m)
{
    inferd_status st;
    if (kern_ctx_backend(m->kc) == KERN_BACKEND_CUDA && (st = model_warmup(m)) != INFERD_OK)
        return st;
    if ((st = model_graphs_init(m)) != INFERD_OK) /* decode CUDA graphs (graphs.c) */
        return st;
    log_plan(m);
    return INFERD_OK;
}

static inferd_status load_all(model *m)
{
    inferd_status st = load_begin(m, 0, 0);
    int64_t n_blocks = 0;
    bool auto_sized = false;
    if (st == INFERD_OK)
        st = model_load_rank_kv(m, &n_blocks, &auto_sized);
    if (st == INFERD_OK)
        st = model_load_rank_alloc_kv(m, n_blocks, auto_sized);
    if (st == INFERD_OK)
        st = model_load_rank_end(m);
    return st;
}

inferd_status model_load(const model_opts *opts, model **out)
{
    if (!opts->model_dir)
        return inferd_set_error(INFERD_ERR_INVALID_ARG, "no model directory given");
    if (model_has_comm_opts(opts))
        return model_tp_load(opts, out); /* model_tp.c: every rank, then the group */
    model *m = inferd_calloc(1, sizeof *m);
    m->opts = *opts;
    inferd_status st = load_all(m);
    if (st != INFERD_OK) {
        model_free(m);
        return st;
    }
    *out = m;
    return INFERD_OK;
}

void model_free(model *m)
{
    if (!m)
        return;
    if (m->tp)
        model_tp_free(m); /* the other ranks, their workers and the communicators */
    if (m->kc) {
        kern_sync(m->kc);
        model_inflight_free(m);
        model_graphs_free(m);
        kern_free(m->kc, m->weight_slab);
        kern_free(m->kc, m->act_slab);
        kern_free(m->kc, m->kv_slab);
        kern_free(m->kc, m->kv_dequant);
        kern_ctx_free(m->kc);
    }
    inferd_free(m->layers);
    inferd_free(m->h_qsl);
    inferd_free(m->h_seq_lens);
    inferd_free(m->h_pos);
    inferd_free(m->h_idx);
    inferd_free(m->h_slots);
    inferd_free(m->h_null_table);
    inferd_free(m);
}

const model_config *model_get_config(const model *m)
{
    return &m->cfg;
}
kern_ctx *model_kern(model *m)
{
    return m->kc;
}
int model_num_kv_blocks(const model *m)
{
    return m->n_blocks;
}
int model_block_size(const model *m)
{
    return m->block_size;
}
int model_max_model_len(const model *m)
{
    return m->max_model_len;
}
int model_max_num_batched_tokens(const model *m)
{
    return m->T;
}
int model_max_num_seqs(const model *m)
{
    return m->S;
}
int model_max_blocks_per_seq(const model *m)
{
    return m->max_blocks_per_seq;
}

const char *model_knockout(const model *m)
{
    return m->knockout ? m->knockout_list : NULL;
}

bool model_norm_folded(const model *m)
{
    return m->norm_fold;
}

int64_t model_kv_bytes_per_block(const model *m)
{
    return kv_bytes_per_block(m->cfg.n_layers, m->lc.n_kv_heads, m->cfg.head_dim, m->block_size,
                              (int)kern_dtype_size(m->kv_dtype));
}

int64_t model_kv_budget_per_block(const model *m)
{
    return model_kv_bytes_per_block(m) + (int64_t)kv_dequant_bytes(m, 1);
}

kern_dtype model_kv_dtype(const model *m)
{
    return m->kv_dtype;
}
