/* model/model.h: a loaded Llama-style model on one kernel backend, its KV
 * storage, and the forward pass over one flat batch.
 *
 * The model owns: the kern_ctx, the weights (one slab per backend), the
 * activation arena sized at load for max_num_batched_tokens, fixed device
 * buffers for every per-step batch input (so decode CUDA graphs stay valid),
 * and the paged KV storage. The block *pool* (which block belongs to whom) is
 * kvcache/'s business; the model only reads block tables and slot mappings.
 */
#ifndef INFERD_MODEL_H
#define INFERD_MODEL_H

#include <stdbool.h>
#include <stdint.h>

#include "common/opt.h"
#include "common/status.h"
#include "dist/dist_rendezvous.h"
#include "kernels/kernels.h"
#include "model/config.h"

typedef struct model model;

typedef enum { MODEL_LOAD_SAFETENSORS = 0, MODEL_LOAD_DUMMY } model_load_format;
/* Tensor parallelism: the dtype of the row-parallel products' partial sums
 * through the all-reduce (--tp-reduce-dtype). float32: each rank's partial
 * is rounded once, after the sum, as one GPU's whole product is (tp 2
 * reproduces tp 1 up to the fp32 summation order); bfloat16: the
 * activation dtype (half the bytes; every partial rounded). The CPU's
 * activations are fp32 either way. */
typedef enum { MODEL_TP_REDUCE_F32 = 0, MODEL_TP_REDUCE_ACT } model_tp_reduce;
/* The KV cache's element (--kv-cache-dtype, vLLM's): auto is the
 * activation dtype (F32 on the CPU, BF16 on CUDA); fp8 stores e4m3 with
 * scale 1 (kernels/kern_fp8.h), half the bytes of bf16 per token, so twice
 * the tokens fit in the same memory, at the cost of a 3-bit mantissa. */
typedef enum { MODEL_KV_CACHE_AUTO = 0, MODEL_KV_CACHE_FP8_E4M3 } model_kv_cache_dtype;

/* Load options. Every field a user can set has one row in the model option
 * table (model_opts.c: model_opts_rows): its flag / config-key name, range,
 * default and help. model_load validates with those rows, so the command
 * line, config files and load accept the same values. */
typedef struct {
    const char *model_dir;         /* config.json (+ weights unless dummy) */
    const char *tokenizer_dir;     /* tokenizer.json, for the caller (NULL = model_dir); not read by load */
    model_load_format load_format;
    kern_backend backend;
    bool device_auto;              /* resolve backend at load: CUDA when a GPU is present, else CPU */
    int n_threads;                 /* CPU backend threads, 0 = all cores */
    int device_id;
    int max_num_batched_tokens;    /* activation arena size (tokens per step) */
    int max_num_seqs;              /* sequences per step */
    int max_model_len;             /* 0 = config max_position_embeddings */
    int block_size;                /* KV block size (tokens) */
    int64_t kv_cache_bytes;        /* 0 = derive from gpu_memory_utilization */
    int kv_cache_dtype;            /* model_kv_cache_dtype */
    float gpu_memory_utilization;  /* fraction of device memory (CUDA) */
    uint64_t dummy_seed;
    bool enforce_eager;            /* no CUDA graphs: every step runs op by op (vLLM's --enforce-eager) */
    const char *generation_config; /* sampling defaults: "auto" (model dir), "vllm" (none) or a DIR */
    /* Tensor parallelism (model/model_tp.c): the model split over this many
     * ranks, rank r on device device_id + r (CUDA) or a thread (CPU), in
     * one process. 1 = none. */
    int tensor_parallel_size;
    int tp_reduce_dtype; /* model_tp_reduce; the same on every node */
    /* A communicator (and every collective of the split forward pass) even
     * at tensor_parallel_size 1, where each is a copy or nothing: the tests
     * of the collective path against the plain one. Not a command-line flag. */
    bool force_comm;
    /* Several hosts (or processes): --nnodes, --node-rank, --master-addr,
     * --master-port, --dist-timeout (dist/'s option rows). Node k holds
     * ranks [k * L, (k + 1) * L) of tensor_parallel_size = nnodes * L, on
     * devices device_id .. device_id + L - 1 (CPU backend: L = 1). Node 0
     * drives (the engine, the server); the others follow its steps
     * (model_tp_follow). nnodes 1: one process. */
    dist_rdzv_opts dist;
} model_opts;

/* The table's defaults (CPU backend, device_auto off: API users pick the
 * backend; the command line turns device_auto on). */
void model_opts_default(model_opts *o);
/* The model option rows (offsets into model_opts); *n = count. The
 * strings of a model_opts filled through them are owned: free with
 * model_opts_free. The multi-node rows are dist/'s (dist_rdzv_opts_rows),
 * filling o->dist. */
const opt_row *model_opts_rows(size_t *n);
/* Free the strings the model rows and the dist rows own (o->dist too). */
void model_opts_free(model_opts *o);
/* Check every field against its row: INVALID_ARG naming the field and the
 * accepted range. (model_load also checks max_model_len against the
 * config's max_position_embeddings, which no table knows.) */
inferd_status model_opts_validate(const model_opts *o);

/* Load config + weights, size and allocate activations and KV storage. */
inferd_status model_load(const model_opts *opts, model **out);
/* A model loaded with dist.node_rank > 0 (a follower node of a multi-node
 * group): run the steps node 0 sends until node 0 closes the group
 * (INFERD_OK), or until the channel or a step fails (the status). */
inferd_status model_tp_follow(model *m);
void model_free(model *m);

const model_config *model_get_config(const model *m);
kern_ctx *model_kern(model *m);
int model_num_kv_blocks(const model *m);  /* includes the reserved null block 0 */
int model_block_size(const model *m);
int model_max_model_len(const model *m);
int model_max_num_batched_tokens(const model *m);
int model_max_num_seqs(const model *m);
int model_max_blocks_per_seq(const model *m);
/* The ops decode steps leave out (INFERD_KNOCKOUT as given at load, for
 * timing only: the outputs are wrong), or NULL. */
const char *model_knockout(const model *m);
/* Whether the layer norms were folded into the QKV and gate/up weights at
 * load (the norm fold: models whose O and down products pass the residual
 * add's weight floor, 1 MiB by default, unless INFERD_NORM_FOLD=0;
 * INFERD_NORM_FOLD=1 forces it). */
bool model_norm_folded(const model *m);
/* Bytes of KV storage per block over all layers (K and V), in the KV
 * cache's element (model_kv_dtype). */
int64_t model_kv_bytes_per_block(const model *m);
/* Bytes of the KV budget (--kv-cache-bytes, or the memory left) one block
 * takes: model_kv_bytes_per_block, plus with an fp8 cache on CUDA the
 * block's rows of the prefill attention's act-dtype copy (one layer's);
 * a budget of n times this holds n blocks. */
int64_t model_kv_budget_per_block(const model *m);
/* The KV cache's element: the activation dtype, or KERN_DTYPE_FP8_E4M3
 * (--kv-cache-dtype fp8). */
kern_dtype model_kv_dtype(const model *m);

/* One step's batch, host arrays (the model copies them to its device
 * buffers). See kernels.h for the layout. */
typedef struct {
    int n_tokens;
    const int32_t *tokens;          /* [n_tokens] */
    const int32_t *positions;       /* [n_tokens] */
    const int64_t *slot_mapping;    /* [n_tokens] block_id * block_size + offset, < 0 skip */
    int n_seqs;
    const int32_t *query_start_loc; /* [n_seqs + 1] */
    const int32_t *seq_lens;        /* [n_seqs] total context incl. new tokens */
    const int32_t *block_tables;    /* [n_seqs, max_blocks_per_seq] (row stride = that) */
    int max_blocks_per_seq;         /* row stride of block_tables (<= model_max_blocks_per_seq) */
    int n_logits;
    const int32_t *logits_indices;  /* [n_logits] token rows whose logits are wanted */
    /* Optional extra rows (prompt logprobs): token rows whose next-token
     * logits the caller reads on the host, besides the sampled rows. The
     * forward pass runs the final norm + LM head over them in sub-batches of
     * at most model_max_num_seqs rows, copies each sub-batch's raw logits
     * into extra_buf and calls extra_fn(extra_user, first, n, extra_buf)
     * for rows extra_rows[first, first + n) (logits [n, vocab], valid
     * during the call); then it computes the sampled rows, so sampling and
     * model_logits_to_host see those as without extra rows. A step with
     * extra rows always runs eagerly (never a decode graph). n_extra = 0:
     * none (the other fields are not read). */
    int n_extra;
    const int32_t *extra_rows;      /* [n_extra] token rows, each in [0, n_tokens) */
    float *extra_buf;               /* host [model_max_num_seqs, vocab] scratch */
    void (*extra_fn)(void *user, int first, int n, const float *logits);
    void *extra_user;
    /* Optional (model_step only): called once, on the caller's thread, when
     * the step's device work is enqueued and before model_step waits for
     * the sampled tokens, so host work placed there overlaps the device's
     * (the engine wakes the previous step's consumers there). On a backend
     * whose ops run synchronously (the CPU) it is called before the forward
     * pass. Never called on the other ranks of a tensor-parallel group. */
    void (*launched_fn)(void *user);
    void *launched_user;
} model_batch;

/* Run the forward pass; keeps logits [n_logits, vocab] (F32) on the device. */
inferd_status model_forward(model *m, const model_batch *b);

/* One sequence, the common case of `inferd generate`, tests and warm-up:
 * forward tokens toks[0, n) at positions [start, start + n) of a sequence
 * whose blocks are table[0, model_max_blocks_per_seq) (NULL: write no KV and
 * read the null block 0), with logits for rows [logits_from, n). Builds the
 * model_batch in preallocated host scratch (no allocation). */
inferd_status model_forward_seq(model *m, const int32_t *table, const int32_t *toks, int start, int n,
                                int logits_from);

/* Sample one token per logits row of the last forward pass. params: [n_logits]
 * host array; tokens: [n_logits] host output. */
inferd_status model_sample(model *m, const kern_sample_params *params, int32_t *tokens);

/* Copy logits rows of the last forward pass to the host: dst [n_logits, vocab]. */
void model_logits_to_host(model *m, float *dst);

/* Forward + sample in one call, the engine's step: tokens[n_logits] (host)
 * gets the token sampled from each logits row with params[n_logits] (host),
 * and the logits stay readable with model_logits_to_host (sampling does not
 * modify them). A decode-only batch (every sequence has one new token and
 * samples it, logits_indices[i] == i) replays the CUDA graph captured at
 * load for the next captured batch size at or above n_seqs (padding rows
 * write no KV: slot -1) after one asynchronous copy of every input from
 * pinned memory; any other batch, the CPU backend and --enforce-eager run
 * model_forward + model_sample. Both paths give bitwise the same logits and
 * tokens when n_seqs is a captured size (tests/model/test_graphs_gpu.c). */
inferd_status model_step(model *m, const model_batch *b, const kern_sample_params *params, int32_t *tokens);

/* model_step in two halves, so the host can prepare (and launch) the next
 * step while this one runs: the engine's async scheduling (vLLM's
 * --async-scheduling, SGLang's overlap scheduler). model_step_launch
 * enqueues the step (graph or eager, as model_step) and an asynchronous
 * copy of its sampled tokens, calls b->launched_fn, and returns without
 * waiting; model_step_wait(tokens) waits for the oldest launched step and
 * copies its tokens out (tokens may be NULL). At most two steps are in
 * flight. prev_rows (NULL: none) makes the step a continuation of the one
 * in flight: one entry a token row, -1 (the row's token is b->tokens[i])
 * or a sampled row of that step, whose token becomes this row's input on
 * the device, before the host has seen it (b->tokens[i] is then ignored,
 * but must be a valid id). Allowed only with exactly one step in flight
 * and when model_step_chainable; INVALID_ARG otherwise, or for a row out
 * of range (nothing launched). model_step is launch + wait with nothing
 * in flight. Logits (model_logits_to_host) are those of the step launched
 * last, once it has been waited for. */
inferd_status model_step_launch(model *m, const model_batch *b, const kern_sample_params *params,
                                const int32_t *prev_rows);
inferd_status model_step_wait(model *m, int32_t *tokens);
/* Continuations are possible: one process, no tensor parallelism, no op
 * profile (whose events run steps one at a time). */
bool model_step_chainable(const model *m);

/* Decode CUDA graphs (model/graphs.c). Captured at load for every batch size
 * of a ladder up to max_num_seqs (1, 2, 4, 8, 16, 24, 32, 48, 64, 96, 128,
 * ...) times every context bucket whose attention plan differs, unless
 * enforce_eager or the CPU backend. */
typedef struct {
    bool enabled;        /* graphs are in use */
    int n_graphs;        /* captured graphs */
    int max_batch;       /* largest captured batch size (0 = none) */
    double capture_s;    /* wall time of the warm-up + capture at load */
    uint64_t replays;    /* steps run through a graph since load */
    uint64_t eager_steps;/* model_step calls that ran op by op */
} model_graph_info;
void model_graph_info_get(const model *m, model_graph_info *out);
/* Capture the decode graphs now (model_load calls it; idempotent). A batch
 * size whose capture fails runs eagerly (logged); not an error. */
inferd_status model_graphs_init(model *m);
void model_graphs_free(model *m);

/* What one step costs in memory traffic and arithmetic, counted from the
 * config: n_seqs sequences each computing n_new new tokens at the end of a
 * context of ctx_len tokens (new ones included), with logits for one row per
 * sequence. weight_bytes: every weight matrix read once (the embedding only
 * for the n_seqs * n_new looked-up rows); kv_bytes: K and V read over the
 * context plus the new rows written, in the KV cache's element
 * (model_kv_dtype: 1 byte for fp8); flops: 2 per multiply-add of the
 * linear layers and LM head, plus 4 * head_dim per (query head, attended
 * key) for the attention scores and the weighted sum. */
typedef struct {
    double weight_bytes, kv_bytes, flops;
} model_cost;
void model_step_cost(const model *m, int n_seqs, int n_new, int ctx_len, model_cost *out);

#endif
