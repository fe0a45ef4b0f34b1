/* model/model_internal.h: the model struct shared by model.c (lifecycle,
 * memory plan), model_weights.c (loading) and forward.c (the forward pass). */
#ifndef INFERD_MODEL_INTERNAL_H
#define INFERD_MODEL_INTERNAL_H

#include "kernels/kernels.h"
#include "model/model.h"
#include "model/model_prof.h"
#include "model/model_shard.h"

typedef struct {
    kern_weight attn_norm; /* [1, d] */
    kern_weight wqkv;      /* [(n_heads + 2*n_kv_heads) * head_dim, d]: q | k | v rows */
    kern_weight wo;        /* [d, n_heads * head_dim] */
    kern_weight mlp_norm;  /* [1, d] */
    kern_weight w_gate_up; /* [2 * ffn, d]: gate | up rows */
    kern_weight w_down;    /* [d, ffn] */
    kern_weight qkv_bias;  /* [(n_heads + 2*n_kv_heads) * head_dim, 1]: q | k | v biases (Qwen2); rows 0 = none */
    kern_weight q_norm;    /* [1, head_dim] per-head RMSNorm of q (Qwen3); rows 0 = none */
    kern_weight k_norm;    /* [1, head_dim] per-head RMSNorm of k (Qwen3); rows 0 = none */
    void *k_cache;         /* [n_blocks, n_kv_heads, block_size, head_dim] kv dtype (model.kv_dtype) */
    void *v_cache;         /* [n_blocks, n_kv_heads, block_size, head_dim] kv dtype */
} model_layer;

/* Activation arena: every per-step buffer, sized once for T tokens, S seqs, R logits rows. */
typedef struct {
    void *x;                     /* [T, d] residual stream */
    void *h;                     /* [T, d] normed */
    void *qkv;                   /* [T, (nh + 2*nkv) * hd] */
    void *attn;                  /* [T, nh * hd] */
    void *proj;                  /* [T, d] o_proj / down_proj output */
    float *proj_f32;             /* [T, d] its fp32 partial sums (tp > 1, bf16 activations: forward.c) */
    void *gate_up;               /* [T, 2 * ffn] */
    void *act;                   /* [T, ffn] */
    void *gx, *gp, *gn;          /* [R, d] gathered residual / add / normed rows */
    float *logits;               /* [R, vocab] */
    float *logits_part;          /* [R, vocab_chunk] this rank's lm_head rows (with a communicator) */
    float *logits_all;           /* [tp, R, vocab_chunk] every rank's, gathered (with a communicator) */
    int32_t *tokens;             /* [T] */
    int32_t *positions;          /* [T] */
    int64_t *slots;              /* [T] */
    int32_t *qsl;                /* [S + 1] */
    int32_t *seq_lens;           /* [S] */
    int32_t *block_tables;       /* [S, max_blocks_per_seq] */
    int32_t *logits_idx;         /* [R] */
    kern_sample_params *sparams; /* [R] */
    int32_t *sampled;            /* [R] */
    int32_t *src_rows;           /* [T] eager steps: previous step's rows (kern_tokens_from) */
    float *inv_freq;             /* [hd / 2] */
    void *attn_ws;
    void *sample_ws;
} model_acts;

/* Device pointers and sizes of one step's inputs, already on the device
 * (the eager arena buffers, or the graph input region of graphs.c). */
typedef struct {
    const int32_t *tokens;       /* [n_tokens] */
    const int32_t *positions;    /* [n_tokens] */
    const int64_t *slots;        /* [n_tokens], < 0 = write no KV */
    const int32_t *qsl;          /* [n_seqs + 1] */
    const int32_t *seq_lens;     /* [n_seqs] */
    const int32_t *block_tables; /* [n_seqs, bt_width] */
    const int32_t *logits_idx;   /* [n_logits] */
    int n_tokens, n_seqs, n_logits, bt_width;
    int max_q, max_len;          /* over the batch */
} model_fwd_in;

#define MODEL_GRAPH_MAX_SIZES 24
#define MODEL_GRAPH_MAX_BUCKETS 24
#define MODEL_GRAPH_MAX_BATCH 512 /* larger decode batches run eagerly (vLLM's cap); */
#define MODEL_GRAPH_MAX_BATCH_ENV 1024 /* INFERD_GRAPH_MAX_BATCH may raise it up to this (A/B) */

/* Decode graphs (graphs.c): one per (batch size, context bucket); the
 * bucket fixes the attention split plan and the block-table row width
 * (ceil(bucket / block_size)) baked into the graph. Every input of a replay
 * sits in one region laid out identically in pinned host memory (`host`)
 * and on the device (`dev`), block tables last, so one copy of its first
 * off_tables + rows * width * 4 bytes uploads a step. */
typedef struct {
    bool enabled;
    int n_sizes, sizes[MODEL_GRAPH_MAX_SIZES];       /* ascending batch ladder */
    int n_buckets, buckets[MODEL_GRAPH_MAX_BUCKETS]; /* ascending context lengths, last = max_model_len */
    kern_graph *g[MODEL_GRAPH_MAX_SIZES][MODEL_GRAPH_MAX_BUCKETS]; /* NULL: eager; a row may repeat one graph */
    /* two host regions, used by turns: with two steps in flight (async
     * scheduling) the next step's region is written while the previous
     * step's upload may not have run yet */
    char *hosts[2], *host, *dev;
    int host_turn;
    size_t bytes;
    size_t off_sparams, off_slots, off_tokens, off_positions, off_qsl, off_seq_lens, off_logits_idx, off_src,
        off_tables;
    int n_graphs;
    double capture_s;
    uint64_t replays, eager_steps;
} model_graphs;

/* Profiler state (forward.c; model_prof.h). Timer slots: [0, max_marks)
 * op marks of the current step, then begin[4] and end[4] of the last four
 * steps (cur = the slot of the step being launched; two may be in flight
 * and the gap needs the end of the one before). */
typedef struct {
    unsigned what;           /* MODEL_PROF_* bits, 0 = off */
    kern_timer *t;
    int max_marks, n_marks;
    int8_t *mark_op;         /* [max_marks] op of the segment that starts at mark i, -1 = end */
    double *mark_bytes;      /* [max_marks] bytes of that op */
    double *mark_flops;      /* [max_marks] its FLOPs */
    int n_new;               /* new tokens of the current step */
    int cur;                 /* step slot of the step being launched */
    bool open, decode;       /* that step is being recorded; it is decode-only */
    bool slot_open[4], slot_decode[4]; /* the same per step slot, until its model_step_wait */
    bool prev_valid;         /* the previous step was decode-only and has its end event */
    model_prof_stats st;
} model_prof;

/* Steps launched and not yet waited for (model_step_launch, at most 2):
 * the sampled tokens of each come back by an asynchronous copy into its
 * page-locked buffer, fenced by its timer slot. */
typedef struct {
    int32_t *tok[2];   /* page-locked [R] each */
    kern_timer *fence; /* 2 slots */
    int n[2];          /* sampled rows of the step in buffer k */
    int prof_slot[2];  /* its profiler slot */
    int head, count;   /* FIFO over the two buffers */
} model_inflight;

typedef struct model_tp model_tp;

struct model {
    model_config cfg;
    /* Tensor parallelism (model_tp.c). sh: this rank's split (tp 1: the
     * whole model); lc: cfg with this rank's n_heads, n_kv_heads and
     * intermediate_size, the dims the forward pass computes with (the
     * vocabulary stays whole: logits are gathered). comm: NULL without a
     * communicator; else the forward pass all-reduces after the O and down
     * products and the embedding, and gathers the logits (also at tp 1,
     * where every collective is a copy or nothing). */
    model_shard sh;
    model_config lc;
    kern_comm *comm;
    model_tp *tp;  /* rank 0 of a group: the other ranks and their workers */
    bool follower; /* rank > 0 of a group: runs the steps rank 0 is given, never samples */
    int device;    /* CUDA device ordinal of this rank (device_id + its index on this node) */
    model_opts opts;
    kern_ctx *kc;
    kern_dtype act_dtype;
    kern_weight embed;      /* [vocab, d] */
    kern_weight final_norm; /* [1, d] */
    kern_weight lm_head;    /* [vocab, d] (aliases embed when tied) */
    model_layer *layers;    /* [n_layers] */
    void *weight_slab;
    size_t weight_bytes;
    void *act_slab;
    size_t act_bytes;
    bool norm_fold;         /* layer norm weights folded into wqkv / w_gate_up (fold_wanted, model_weights.c; forward.c) */
    unsigned knockout;      /* model_op bits decode-only steps leave out (INFERD_KNOCKOUT; timing only) */
    char knockout_list[257]; /* ... as given (model_knockout) */
    unsigned ko_step;       /* the bits the step being enqueued leaves out (forward.c) */
    kern_dtype kv_dtype;    /* the KV cache's element: act_dtype, or FP8_E4M3 (--kv-cache-dtype fp8) */
    void *kv_slab;
    size_t kv_bytes;
    void *kv_dequant;       /* fp8 on CUDA: one layer's act-dtype K and V, [2, n_blocks, nkv, bs, hd], the
                               prefill attention's copy (kern_attn_params.kv_dequant); else NULL */
    size_t kv_dequant_bytes;
    model_acts a;
    int T, S, R; /* arena limits: tokens, seqs, logits rows */
    int max_model_len, block_size, n_blocks, max_blocks_per_seq;
    int last_n_logits; /* rows of logits from the last forward */
    /* host copy of the last batch's seq metadata, for attention planning */
    int32_t *h_qsl, *h_seq_lens;
    /* host scratch for model_forward_seq: [T] positions, slots, logits rows; [max_blocks_per_seq] null table */
    int32_t *h_pos, *h_idx, *h_null_table;
    int64_t *h_slots;
    model_graphs gr; /* decode CUDA graphs (graphs.c) */
    model_inflight fl; /* launched steps (forward.c) */
    model_prof prof; /* step profile (forward.c), off by default */
};

/* Whether a model of these options runs the collective forward pass. */
static inline bool model_has_comm_opts(const model_opts *o)
{
    return o->tensor_parallel_size > 1 || o->force_comm || o->dist.nnodes > 1;
}
static inline bool model_has_comm_planned(const model *m)
{
    return model_has_comm_opts(&m->opts);
}

/* The KV cache holds fp8 e4m3 (kern_rope_kv_params / kern_attn_params.kv_fp8). */
static inline bool model_kv_fp8(const model *m)
{
    return m->kv_dtype == KERN_DTYPE_FP8_E4M3;
}

/* Row-parallel partial sums in fp32 through the all-reduce (forward.c's
 * partials_f32: tp > 1 on bf16 activations; a->proj_f32 exists). */
static inline bool model_tp_partials_f32(const model *m)
{
    return model_has_comm_planned(m) && m->sh.tp > 1 && m->act_dtype != KERN_DTYPE_F32 &&
           m->opts.tp_reduce_dtype == MODEL_TP_REDUCE_F32;
}
/* Vocabulary rows per rank (the last rank may hold fewer). */
static inline int64_t model_vocab_chunk(const model *m)
{
    return ((int64_t)m->cfg.vocab_size + m->sh.tp - 1) / m->sh.tp;
}

/* model.c: the load of one rank in phases, so a group (model_tp.c) can
 * agree on the KV pool between them and run the warm-up of every rank at
 * once (it runs collectives): begin (config, context, weights,
 * activations; *out is set even on failure, for model_free), kv (the
 * blocks this rank's memory holds), alloc_kv (the pool the group agreed
 * on), end (warm-up, decode graphs, the logged plan). */
inferd_status model_load_rank_begin(const model_opts *opts, int rank, int local, model **out);
inferd_status model_load_rank_kv(model *m, int64_t *n_blocks, bool *auto_sized);
inferd_status model_load_rank_alloc_kv(model *m, int64_t n_blocks, bool auto_sized);
inferd_status model_load_rank_end(model *m);
/* model_tp.c: load every rank of opts->tensor_parallel_size (worker
 * threads, one communicator each) and return rank 0, which holds the group
 * (m->tp); model_free of rank 0 calls model_tp_free. */
inferd_status model_tp_load(const model_opts *opts, model **out);
void model_tp_free(model *m);
/* model_tp_net.c: the multi-node parts of a group. A step as one message
 * of the control channel (kind: step or forward, then the batch's arrays),
 * and back: decode points b's arrays into msg (valid while it is) and
 * checks the lengths against the header; the caller checks the values
 * (model_check_batch). */
enum { MODEL_TP_MSG_STEP = 1, MODEL_TP_MSG_FORWARD = 2 };
size_t model_tp_msg_cap(const model *m);
size_t model_tp_msg_encode(const model_batch *b, int kind, void *msg, size_t cap);
inferd_status model_tp_msg_decode(const void *msg, size_t len, model_batch *b, int *kind);
/* The CPU backend's collectives across nodes (one rank a node) over the
 * channel: a star through node 0, which sums in rank order like the
 * in-process CPU communicator, so the bits do not depend on the split
 * into processes. user: the dist_chan. */
kern_comm_hooks model_tp_star_hooks(void *chan);

/* model_tp.c: hand a batch to the other ranks of rank 0's group before
 * rank 0 runs it (step: model_step; else model_forward), and wait for
 * them after. No-ops without a group. */
void model_tp_post(model *m, const model_batch *b, bool step);
void model_tp_wait(model *m);
/* forward.c: model_forward / model_step without the batch checks and the
 * group, for the rank workers. */
void model_forward_checked(model *m, const model_batch *b);
/* model_step.c: release the in-flight token buffers (model_free). */
void model_inflight_free(model *m);
void model_step_follower(model *m, const model_batch *b);

/* Plan and allocate the weight slab, then load weights (or fill dummy);
 * FORMAT naming the tensor when a loaded weight holds NaN or Inf. */
inferd_status model_weights_load(model *m);
/* model.c: on the CPU backend, INFERD_ERR_NOMEM (with every number) when
 * weight_bytes of weights, the activation arena and the smallest KV cache
 * the options allow exceed available host memory (kern_mem_info: MemAvailable);
 * INFERD_OK on CUDA (device allocations fail cleanly). model_weights_load
 * calls it between its layout pass and the slab allocation. */
inferd_status model_check_host_memory(model *m, size_t weight_bytes);

/* forward.c: enqueue the ops of one forward pass (embedding to logits) over
 * inputs already on the device; m->h_qsl / m->h_seq_lens must mirror
 * in->qsl / in->seq_lens (attention plans from them). Enqueues only (no
 * allocation, no synchronization), so graphs.c captures it as is. */
void model_forward_ops(model *m, const model_fwd_in *in);
/* forward.c: *ops = the model_op bits of list, a comma-separated list of
 * norm (both add + RMSNorm kernels), qkv (with RoPE + K/V write where the
 * product's epilogue does it), rope, attn, o, gateup (with SiLU * up where
 * fused), silu, down; an unknown name or a list over 256 characters is an
 * error. model_load reads INFERD_KNOCKOUT through it into m->knockout:
 * decode-only steps then leave those ops out, so a graph step's time
 * without an op is what the op costs inside the step, overlap included
 * (bench latency --profile-ops times each op eagerly, one at a time). For
 * measurements only: the outputs are wrong. Ops fused into a product
 * (the norms at 1..2 tokens) go with it. */
inferd_status model_knockout_parse(const char *list, unsigned *ops);
/* forward.c: the batch checks of model_forward (status + message). */
inferd_status model_check_batch(const model *m, const model_batch *b);
/* forward.c: profiler hooks, no-ops unless model_prof_enable was called:
 * a step is launched, it ends (after the sampler, before the token copy),
 * and its token copy has been waited for (accumulate; slot: its
 * prof.cur at launch). */
void model_prof_step_begin(model *m, const model_batch *b);
void model_prof_step_end(model *m);
void model_prof_step_done(model *m, int slot);
/* forward.c: enqueue the sampler over the last forward pass's logits rows
 * (model_sample without the copy); returns the rows it samples. */
int model_sample_ops(model *m, const kern_sample_params *params);
/* forward.c: model_forward_checked with prev_rows (model_step_launch). */
void model_forward_from(model *m, const model_batch *b, const int32_t *prev_rows);
/* graphs.c: enqueue a decode-only batch through its graph (region upload,
 * with prev_rows the tokens taken from the last step's sampled ones, the
 * replay, the profiler's step end); false (nothing done) when the batch has
 * no graph. The caller copies the tokens back. */
bool model_graph_launch(model *m, const model_batch *b, const kern_sample_params *params,
                        const int32_t *prev_rows);
/* b->launched_fn(b->launched_user) when set (model_step's hook, forward.c). */
void model_step_launched(const model_batch *b);

#endif
