/* model/forward.c: the Llama forward pass over one flat batch, written once
 * against the kernel API (kernels/kernels.h) for every backend.
 *
 * Per layer (residual stream x, fused add+norm carrying the previous
 * sub-block's output in `proj`):
 *   h = rmsnorm(x += proj)            (layer 0: x is the embedding, no add)
 *   qkv = h @ Wqkv^T (+ bias: Qwen2); q, k per-head RMSNorm (Qwen3);
 *   RoPE(q, k); K/V -> paged cache (slot_mapping) -- one fused op after the GEMM
 *   attn = paged causal attention(q, cache)
 *   proj = attn @ Wo^T
 *   h = rmsnorm(x += proj)
 *   proj = (silu(h @ Wg^T) * (h @ Wu^T)) @ Wd^T
 * Small decode batches on the GPU run the same layer as four fused GEMVs
 * and the attention (use_fused_layers, fused_layer): the norms move into
 * the QKV and gate/up products, RoPE + KV write and SiLU * up into their
 * epilogues, and the O and down products add straight into x. Batches of
 * up to 16 tokens past those keep the norms as kernels but run RoPE + KV
 * write and SiLU * up in the epilogues of the GEMV's tensor-core form
 * (kern_matmul_epi_fusable; the same bits as the unfused ops).
 * Larger batches of large models on the GPU (cuBLASLt's products) fold the
 * residual add into the O and down products instead (use_accum: beta = 1),
 * so each norm reads x alone. With the norm fold (model->norm_fold: models
 * whose O and down products pass use_accum's weight floor, unless
 * INFERD_NORM_FOLD=0; fold_wanted in model_weights.c: each layer norm's weight multiplied into
 * the columns of the QKV and gate/up weights at load) every batch
 * past the fused layers runs without norm kernels (LAYERS_FOLD): those
 * products read x itself and their outputs are scaled by each token's
 * 1 / rms(x) in the tensor-core GEMV's epilogue or in the RoPE / SiLU op
 * after cuBLASLt, and O and down add into x (with a communicator after
 * the sum over the ranks).
 * The final add + norm and the LM head run only on the rows that need logits
 * (gathered first), like vLLM's logits_indices; a batch's optional extra
 * rows (prompt logprobs) go through the same head first, in sub-batches of
 * the logits buffer's rows, each copied to the host for the caller.
 *
 * model_forward_ops only enqueues ops over inputs already on the device, so
 * the same code runs eagerly (model_forward: inputs copied into the arena)
 * and inside the decode CUDA graphs of graphs.c (inputs in the graph's
 * fixed region). model_step (model/model_step.c) is the engine's entry:
 * the graph when the batch has one, else forward + sample. model_step_cost counts a step's bytes and
 * FLOPs for the roofline of `inferd bench latency`. For measurements,
 * INFERD_KNOCKOUT (model_knockout_parse) leaves named ops out of decode-only
 * steps, so a graph step's time without an op is that op's share of it.
 */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "common/alloc.h"
#include "common/check.h"
#include "common/util.h"
#include "kvcache/kv_layout.h"
#include "model/model_internal.h"

/* --- knock-out (timing only) ------------------------------------------------ */

/* The names model_knockout_parse takes, each a set of model_op bits. */
static const struct {
    const char *name;
    unsigned ops;
} k_knockout[] = {
    {"norm", 1u << MODEL_OP_ATTN_NORM | 1u << MODEL_OP_MLP_NORM},
    {"qkv", 1u << MODEL_OP_QKV},
    {"rope", 1u << MODEL_OP_ROPE_KV},
    {"attn", 1u << MODEL_OP_ATTENTION},
    {"o", 1u << MODEL_OP_O_PROJ},
    {"gateup", 1u << MODEL_OP_GATE_UP},
    {"silu", 1u << MODEL_OP_SILU_MUL},
    {"down", 1u << MODEL_OP_DOWN},
};

inferd_status model_knockout_parse(const char *list, unsigned *ops)
{
    *ops = 0;
    if (!list || strlen(list) > 256)
        return inferd_set_error(INFERD_ERR_INVALID_ARG, "knock-out: expected a list of at most 256 characters");
    for (const char *p = list; *p;) {
        const size_t len = strcspn(p, ",");
        size_t i = 0;
        while (i < INFERD_ARRAY_LEN(k_knockout) &&
               !(strlen(k_knockout[i].name) == len && strncmp(k_knockout[i].name, p, len) == 0))
            i++;
        if (i == INFERD_ARRAY_LEN(k_knockout)) {
            char names[128];
            size_t k = 0;
            for (size_t j = 0; j < INFERD_ARRAY_LEN(k_knockout); j++)
                k += (size_t)snprintf(names + k, sizeof names - k, "%s%s", j ? ", " : "", k_knockout[j].name);
            return inferd_set_error(INFERD_ERR_INVALID_ARG, "knock-out: unknown op '%.*s' (%s)",
                                    (int)INFERD_MIN(len, (size_t)32), p, names);
        }
        *ops |= k_knockout[i].ops;
        p += len + (p[len] == ',');
    }
    return INFERD_OK;
}

/* Whether this step leaves op out (m->ko_step: model->knockout in a
 * decode-only step, else 0). */
static bool knocked(const model *m, model_op op)
{
    return (m->ko_step >> op) & 1u;
}

/* --- profiling (model_prof.h) ------------------------------------------------ */

static const char *const k_op_names[MODEL_OP_COUNT] = {
    "embedding", "add+rmsnorm (attn)", "QKV GEMM", "RoPE + KV write", "attention", "O GEMM",
    "add+rmsnorm (mlp)", "gate/up GEMM", "SiLU * up", "down GEMM", "final gather+norm", "lm_head",
    "all-reduce", "logits all-gather", "sampling",
};

const char *model_op_name(model_op op)
{
    return op >= 0 && op < MODEL_OP_COUNT ? k_op_names[op] : "?";
}

#define PROF_ON(m, bit) ((m)->prof.open && ((m)->prof.what & (bit)))
/* An event before op `op`, which moves `bytes` and computes `flops`. */
#define PROF_MARK(m, op, bytes, flops)                   \
    do {                                                 \
        if (PROF_ON(m, MODEL_PROF_OPS))                  \
            prof_mark(m, (int)(op), (bytes), (flops));   \
    } while (0)

static void prof_mark(model *m, int op, double bytes, double flops)
{
    model_prof *p = &m->prof;
    if (p->n_marks >= p->max_marks)
        return;
    p->mark_op[p->n_marks] = (int8_t)op;
    p->mark_bytes[p->n_marks] = bytes;
    p->mark_flops[p->n_marks] = flops;
    kern_timer_record(m->kc, p->t, p->n_marks++);
}

static int slot_begin(const model_prof *p, int slot)
{
    return p->max_marks + slot;
}

static int slot_end(const model_prof *p, int slot)
{
    return p->max_marks + 4 + slot;
}

void model_prof_reset(model *m)
{
    memset(&m->prof.st, 0, sizeof m->prof.st);
    m->prof.prev_valid = false;
}

inferd_status model_prof_enable(model *m, unsigned what)
{
    model_prof *p = &m->prof;
    if (what && !p->t) {
        int marks = 12 * m->cfg.n_layers + 10; /* 11 ops a layer with all-reduces, + head */
        kern_timer *t = kern_timer_create(m->kc, marks + 8);
        if (!t)
            return inferd_set_error(INFERD_ERR_NOMEM, "profile: cannot create %d timers", marks + 8);
        p->t = t;
        p->max_marks = marks;
        p->mark_op = inferd_calloc((size_t)marks, sizeof *p->mark_op);
        p->mark_bytes = inferd_calloc((size_t)marks, sizeof *p->mark_bytes);
        p->mark_flops = inferd_calloc((size_t)marks, sizeof *p->mark_flops);
    } else if (!what && p->t) {
        kern_sync(m->kc);
        kern_timer_free(m->kc, p->t);
        inferd_free(p->mark_op);
        inferd_free(p->mark_bytes);
        inferd_free(p->mark_flops);
        memset(p, 0, sizeof *p);
    }
    p->what = what;
    p->open = false;
    memset(p->slot_open, 0, sizeof p->slot_open);
    model_prof_reset(m);
    return INFERD_OK;
}

void model_prof_get(const model *m, model_prof_stats *out)
{
    *out = m->prof.st;
}

/* A step's launch: open a record for a decode-only step, or with
 * MODEL_PROF_OPS for any step; a step that is not decode-only breaks the
 * chain of gaps. */
void model_prof_step_begin(model *m, const model_batch *b)
{
    model_prof *p = &m->prof;
    if (!p->what)
        return;
    p->cur = (p->cur + 1) & 3;
    p->decode = b->n_tokens == b->n_seqs && b->n_logits == b->n_seqs;
    p->open = p->decode || (p->what & MODEL_PROF_OPS);
    p->slot_open[p->cur] = p->open;
    p->slot_decode[p->cur] = p->decode;
    p->n_marks = 0;
    p->n_new = b->n_tokens;
    if (!p->decode) {
        p->prev_valid = false;
        return;
    }
    kern_timer_record(m->kc, p->t, slot_begin(p, p->cur));
}

void model_prof_step_end(model *m)
{
    model_prof *p = &m->prof;
    if (!p->open)
        return;
    if (p->what & MODEL_PROF_OPS)
        PROF_MARK(m, -1, 0, 0);
    if (p->decode)
        kern_timer_record(m->kc, p->t, slot_end(p, p->cur));
}

/* The step of profiler slot `slot` has finished (its tokens are back):
 * accumulate its op marks (steps run one at a time under MODEL_PROF_OPS),
 * its busy time and the gap from the end of the step launched before it. */
void model_prof_step_done(model *m, int slot)
{
    model_prof *p = &m->prof;
    if (!p->slot_open[slot])
        return;
    p->slot_open[slot] = false;
    if (slot == p->cur)
        p->open = false;
    kern_ctx *kc = m->kc;
    model_prof_stats *st = &p->st;
    if ((p->what & MODEL_PROF_OPS) && p->n_marks > 1 && p->mark_op[p->n_marks - 1] < 0) {
        model_prof_ops *o = p->decode ? &st->dec : &st->pf;
        for (int i = 0; i + 1 < p->n_marks; i++) {
            double ms = kern_timer_ms(kc, p->t, i, i + 1);
            int op = p->mark_op[i];
            if (ms < 0 || op < 0)
                continue;
            o->ms[op] += ms;
            o->bytes[op] += p->mark_bytes[i];
            o->flops[op] += p->mark_flops[i];
            o->calls[op]++;
        }
        o->steps++;
        o->tokens += p->n_new;
    }
    if (!p->slot_decode[slot])
        return;
    double busy = kern_timer_ms(kc, p->t, slot_begin(p, slot), slot_end(p, slot));
    if (busy >= 0) {
        st->busy_ms += busy;
        st->busy_steps++;
    }
    if (p->prev_valid) {
        double gap = kern_timer_ms(kc, p->t, slot_end(p, (slot + 3) & 3), slot_begin(p, slot));
        if (gap >= 0) {
            st->gap_ms += gap;
            st->gap_max_ms = INFERD_MAX(st->gap_max_ms, gap);
            st->gaps++;
        }
    }
    p->prev_valid = true;
}

/* Bytes of the ops of one layer and of the head, for n tokens of act-dtype
 * activations (weights counted in full; KV read from the host mirror). */
static double act_bytes(const model *m, double elems)
{
    return elems * (double)kern_dtype_size(m->act_dtype);
}

static double w_bytes(const kern_weight *w)
{
    return (double)kern_weight_bytes(w);
}

static double gemm_bytes(const model *m, const kern_weight *w, int n)
{
    return w_bytes(w) + act_bytes(m, (double)n * (double)(w->rows + w->cols));
}

static double attn_bytes(const model *m, const model_fwd_in *in)
{
    const model_config *c = &m->lc;
    double ctx = 0;
    for (int i = 0; i < in->n_seqs; i++)
        ctx += m->h_seq_lens[i];
    double kv = ctx * 2.0 * c->n_kv_heads * c->head_dim, q = 2.0 * in->n_tokens * c->n_heads * c->head_dim;
    return kv * (double)kern_dtype_size(m->kv_dtype) + act_bytes(m, q);
}

static double gemm_flops(const kern_weight *w, int n)
{
    return 2.0 * (double)n * (double)w->rows * (double)w->cols;
}

/* QK^T and PV over the keys each new token attends (its earlier context
 * and, causally, the chunk up to itself), from the host mirrors. */
static double attn_flops(const model *m, const model_fwd_in *in)
{
    const model_config *c = &m->lc;
    double keys = 0;
    for (int i = 0; i < in->n_seqs; i++) {
        const double q = (double)(m->h_qsl[i + 1] - m->h_qsl[i]), L = (double)m->h_seq_lens[i];
        keys += q * (L - q) + q * (q + 1.0) / 2.0;
    }
    return 4.0 * (double)c->n_heads * (double)c->head_dim * keys;
}

inferd_status model_check_batch(const model *m, const model_batch *b)
{
    if (b->n_tokens < 1 || b->n_tokens > m->T)
        return inferd_set_error(INFERD_ERR_INVALID_ARG, "batch of %d tokens outside [1, %d]", b->n_tokens,
                                m->T);
    if (b->n_seqs < 1 || b->n_seqs > m->S)
        return inferd_set_error(INFERD_ERR_INVALID_ARG, "batch of %d sequences outside [1, %d]", b->n_seqs,
                                m->S);
    if (b->n_logits < 0 || b->n_logits > m->R)
        return inferd_set_error(INFERD_ERR_INVALID_ARG, "%d logits rows outside [0, %d]", b->n_logits, m->R);
    if (b->max_blocks_per_seq < 1 || b->max_blocks_per_seq > m->max_blocks_per_seq)
        return inferd_set_error(INFERD_ERR_INVALID_ARG, "block table width %d outside [1, %d]",
                                b->max_blocks_per_seq, m->max_blocks_per_seq);
    if (b->query_start_loc[0] != 0 || b->query_start_loc[b->n_seqs] != b->n_tokens)
        return inferd_set_error(INFERD_ERR_INVALID_ARG, "query_start_loc does not cover the batch");
    for (int i = 0; i < b->n_seqs; i++) {
        int q = b->query_start_loc[i + 1] - b->query_start_loc[i];
        if (q < 1 || q > b->seq_lens[i] || b->seq_lens[i] > m->max_model_len ||
            INFERD_CEIL_DIV(b->seq_lens[i], m->block_size) > b->max_blocks_per_seq)
            return inferd_set_error(INFERD_ERR_INVALID_ARG, "sequence %d: %d new of %d tokens invalid", i, q,
                                    b->seq_lens[i]);
    }
    for (int i = 0; i < b->n_tokens; i++)
        if (b->tokens[i] < 0 || b->tokens[i] >= m->cfg.vocab_size)
            return inferd_set_error(INFERD_ERR_INVALID_ARG, "token id %d outside the vocabulary [0, %d)",
                                    b->tokens[i], m->cfg.vocab_size);
    for (int i = 0; i < b->n_logits; i++)
        if (b->logits_indices[i] < 0 || b->logits_indices[i] >= b->n_tokens)
            return inferd_set_error(INFERD_ERR_INVALID_ARG, "logits index %d out of range",
                                    b->logits_indices[i]);
    if (b->n_extra < 0 || (b->n_extra > 0 && (!b->extra_rows || !b->extra_buf || !b->extra_fn)))
        return inferd_set_error(INFERD_ERR_INVALID_ARG, "%d extra logits rows without rows, buffer or callback",
                                b->n_extra);
    for (int i = 0; i < b->n_extra; i++)
        if (b->extra_rows[i] < 0 || b->extra_rows[i] >= b->n_tokens)
            return inferd_set_error(INFERD_ERR_INVALID_ARG, "extra logits row %d out of range", b->extra_rows[i]);
    return INFERD_OK;
}

/* Copy the batch into the arena's input buffers; describe them in *in. */
static void upload_batch(model *m, const model_batch *b, model_fwd_in *in)
{
    kern_ctx *kc = m->kc;
    model_acts *a = &m->a;
    size_t n = (size_t)b->n_tokens;
    kern_memcpy_h2d(kc, a->tokens, b->tokens, n * sizeof(int32_t));
    kern_memcpy_h2d(kc, a->positions, b->positions, n * sizeof(int32_t));
    kern_memcpy_h2d(kc, a->slots, b->slot_mapping, n * sizeof(int64_t));
    kern_memcpy_h2d(kc, a->qsl, b->query_start_loc, ((size_t)b->n_seqs + 1) * sizeof(int32_t));
    kern_memcpy_h2d(kc, a->seq_lens, b->seq_lens, (size_t)b->n_seqs * sizeof(int32_t));
    kern_memcpy_h2d(kc, a->block_tables, b->block_tables,
                    (size_t)b->n_seqs * (size_t)b->max_blocks_per_seq * sizeof(int32_t));
    if (b->n_logits > 0)
        kern_memcpy_h2d(kc, a->logits_idx, b->logits_indices, (size_t)b->n_logits * sizeof(int32_t));
    memcpy(m->h_qsl, b->query_start_loc, ((size_t)b->n_seqs + 1) * sizeof(int32_t));
    memcpy(m->h_seq_lens, b->seq_lens, (size_t)b->n_seqs * sizeof(int32_t));
    memset(in, 0, sizeof *in);
    in->tokens = a->tokens;
    in->positions = a->positions;
    in->slots = a->slots;
    in->qsl = a->qsl;
    in->seq_lens = a->seq_lens;
    in->block_tables = a->block_tables;
    in->logits_idx = a->logits_idx;
    in->n_tokens = b->n_tokens;
    in->n_seqs = b->n_seqs;
    in->n_logits = b->n_logits;
    in->bt_width = b->max_blocks_per_seq;
    for (int i = 0; i < b->n_seqs; i++) {
        in->max_q = INFERD_MAX(in->max_q, b->query_start_loc[i + 1] - b->query_start_loc[i]);
        in->max_len = INFERD_MAX(in->max_len, b->seq_lens[i]);
    }
}

/* RoPE + K/V write parameters of layer L for batch b. */
static kern_rope_kv_params rope_params(const model *m, const model_layer *L, const model_fwd_in *b)
{
    const model_config *c = &m->lc;
    return (kern_rope_kv_params){
        .qkv = m->a.qkv,
        .positions = b->positions,
        .slot_mapping = b->slots,
        .inv_freq = m->a.inv_freq,
        .k_cache = L->k_cache,
        .v_cache = L->v_cache,
        .n_tokens = b->n_tokens,
        .n_heads = c->n_heads,
        .n_kv_heads = c->n_kv_heads,
        .head_dim = c->head_dim,
        .block_size = m->block_size,
        .mscale = c->rope_attn_factor, /* YaRN: cos, sin times its attention factor; else 1 */
        .kv_fp8 = model_kv_fp8(m),
    };
}

/* a->attn = paged attention of a->qkv's q over layer L's cache. */
static void attention_op(model *m, const model_layer *L, const model_fwd_in *b)
{
    const model_config *c = &m->lc;
    model_acts *a = &m->a;
    PROF_MARK(m, MODEL_OP_ATTENTION, attn_bytes(m, b), attn_flops(m, b));
    if (knocked(m, MODEL_OP_ATTENTION)) /* the mark stays, as the other ops' do */
        return;
    kern_attn_params ap = {
        .out = a->attn,
        .qkv = a->qkv,
        .k_cache = L->k_cache,
        .v_cache = L->v_cache,
        .query_start_loc = b->qsl,
        .seq_lens = b->seq_lens,
        .block_tables = b->block_tables,
        .h_query_start_loc = m->h_qsl,
        .h_seq_lens = m->h_seq_lens,
        .workspace = a->attn_ws,
        .n_seqs = b->n_seqs,
        .n_tokens = b->n_tokens,
        .max_blocks_per_seq = b->bt_width,
        .n_heads = c->n_heads,
        .n_kv_heads = c->n_kv_heads,
        .head_dim = c->head_dim,
        .block_size = m->block_size,
        .max_query_len = b->max_q,
        .max_seq_len = b->max_len,
        .scale = 1.0f / sqrtf((float)c->head_dim),
        .kv_fp8 = model_kv_fp8(m),
        .kv_dequant = m->kv_dequant, /* fp8 on CUDA: the prefill attention's act-dtype copy */
        .n_blocks = m->n_blocks,
    };
    kern_attention(m->kc, &ap);
}

/* With a communicator: buf[n, d] of dtype dt (a row-parallel product's
 * partial sum, or the embedding's rows of this rank's vocabulary) = the sum
 * over ranks. */
static void all_reduce(model *m, void *buf, int n, kern_dtype dt)
{
    if (!m->comm)
        return;
    const size_t count = (size_t)n * (size_t)m->cfg.hidden_size;
    PROF_MARK(m, MODEL_OP_ALL_REDUCE, 2.0 * (double)count * (double)kern_dtype_size(dt), 0);
    kern_all_reduce_sum(m->kc, m->comm, buf, count, dt);
}

/* Whether the row-parallel products keep their partial sums in fp32
 * through the all-reduce: tp > 1 on bf16 activations, unless
 * --tp-reduce-dtype bfloat16. Each rank's partial
 * is then rounded once, after the sum, as one rank's whole product is, so
 * tp 2 differs from tp 1 only in the fp32 summation order -- not by a bf16
 * rounding of every partial (stories260K's tp 2 logits were 0.33 from tp
 * 1's that way on two H100s, and bitwise equal this way). The all-reduce
 * moves twice the bytes (f32_to_act counts as part of it in a profile).
 * tp 1 with a communicator keeps the act dtype (the bits of tp 1
 * without). */
static bool partials_f32(const model *m)
{
    return m->comm && model_tp_partials_f32(m);
}

/* a->proj[n, d] = in @ w^T of a row-parallel weight (O, down), summed over
 * the ranks (alone: the product). */
static void row_parallel(model *m, const void *in, const kern_weight *w, int n)
{
    model_acts *a = &m->a;
    if (!partials_f32(m)) {
        kern_matmul(m->kc, a->proj, in, w, n);
        all_reduce(m, a->proj, n, m->act_dtype);
        return;
    }
    kern_logits(m->kc, a->proj_f32, in, w, n); /* the fp32-output product */
    all_reduce(m, a->proj_f32, n, KERN_DTYPE_F32);
    kern_f32_to_act(m->kc, a->proj, a->proj_f32, (size_t)n * (size_t)m->cfg.hidden_size);
}

/* QKV product, RoPE and the K/V cache write: one kernel where the product's
 * epilogue can do it (kern_matmul_epi_fusable: small batches; not Qwen3's
 * per-head q/k norms, which need whole heads), else the product and
 * kern_rope_kv_write_ex (the same bits either way). The product reads the
 * normed a->h, or with fold the residual stream x itself (the norm's weight
 * is in wqkv, model->norm_fold) and the 1 / rms scale comes after it. */
static void qkv_rope(model *m, const model_layer *L, const model_fwd_in *b, bool fold)
{
    const model_config *c = &m->lc;
    model_acts *a = &m->a;
    const int n = b->n_tokens;
    const void *in = fold ? a->x : a->h;
    const kern_rope_kv_params rp = rope_params(m, L, b);
    const kern_weight *bias = L->qkv_bias.rows > 0 ? &L->qkv_bias : NULL;
    PROF_MARK(m, MODEL_OP_QKV, gemm_bytes(m, &L->wqkv, n), gemm_flops(&L->wqkv, n));
    if (L->q_norm.rows == 0 && kern_matmul_epi_fusable(m->kc, &L->wqkv, n)) {
        const kern_fuse f = {
            .rms = fold, .eps = c->rms_norm_eps, .epi = KERN_EPI_ROPE_KV, .rope = &rp, .qkv_bias = bias};
        if (!knocked(m, MODEL_OP_QKV))
            kern_matmul_fused(m->kc, a->qkv, in, &L->wqkv, n, &f);
        return;
    }
    if (!knocked(m, MODEL_OP_QKV))
        kern_matmul(m->kc, a->qkv, in, &L->wqkv, n);
    if (knocked(m, MODEL_OP_ROPE_KV))
        return;
    PROF_MARK(m, MODEL_OP_ROPE_KV,
              act_bytes(m, (double)n * ((double)L->wqkv.rows + 3.0 * (c->n_heads + c->n_kv_heads) * c->head_dim)), 0);
    kern_qkv_epilogue ep = {
        .qkv_bias = bias,
        .q_norm = L->q_norm.rows > 0 ? &L->q_norm : NULL,
        .k_norm = L->k_norm.rows > 0 ? &L->k_norm : NULL,
        .norm_eps = c->rms_norm_eps,
        .rms_x = fold ? a->x : NULL,
        .rms_cols = c->hidden_size,
    };
    kern_rope_kv_write_ex(m->kc, &rp, &ep); /* Qwen2 biases / Qwen3 q,k norms fused in; Llama: none */
}

/* The output of a row-parallel product (O, down) for the next add + norm:
 * added into x by the product itself (accum: on the GEMV route its RESID
 * epilogue, which only the folded layers reach there; else
 * kern_matmul_accum, the add then reads resid in the product's epilogue;
 * with a communicator, which only the folded layers bring here, the sum
 * over the ranks in a->proj added by kern_add_rmsnorm, whose normed a->h
 * they do not read: fused_resid's bits), else a->proj, summed over the
 * ranks (row_parallel). */
static void out_proj(model *m, model_op op, const void *in, const kern_weight *w, int n, bool accum)
{
    PROF_MARK(m, op, gemm_bytes(m, w, n) + (accum ? act_bytes(m, (double)n * (double)w->rows) : 0.0),
              gemm_flops(w, n));
    if (knocked(m, op))
        return;
    if (accum && m->comm) {
        row_parallel(m, in, w, n);
        kern_add_rmsnorm(m->kc, m->a.h, m->a.x, m->a.proj, &m->final_norm, n, m->cfg.rms_norm_eps);
    } else if (accum && kern_matmul_epi_fusable(m->kc, w, n)) {
        const kern_fuse f = {.epi = KERN_EPI_RESID, .resid = m->a.x, .after_attention = op == MODEL_OP_O_PROJ};
        kern_matmul_fused(m->kc, NULL, in, w, n, &f);
    } else if (accum) {
        kern_matmul_accum(m->kc, m->a.x, in, w, n);
    } else {
        row_parallel(m, in, w, n);
    }
}

/* fold: the folded layers (LAYERS_FOLD): the products read x, see qkv_rope. */
static void attention_block(model *m, const model_layer *L, const model_fwd_in *b, bool accum, bool fold)
{
    qkv_rope(m, L, b, fold);
    attention_op(m, L, b);
    out_proj(m, MODEL_OP_O_PROJ, m->a.attn, &L->wo, b->n_tokens, accum);
}

static void mlp_block(model *m, const model_layer *L, int n, bool accum, bool fold)
{
    const model_config *c = &m->lc;
    model_acts *a = &m->a;
    const void *in = fold ? a->x : a->h;
    PROF_MARK(m, MODEL_OP_GATE_UP, gemm_bytes(m, &L->w_gate_up, n), gemm_flops(&L->w_gate_up, n));
    if (kern_matmul_epi_fusable(m->kc, &L->w_gate_up, n)) { /* SiLU * up in the product's epilogue */
        const kern_fuse f = {.rms = fold, .eps = c->rms_norm_eps, .epi = KERN_EPI_SILU_MUL};
        if (!knocked(m, MODEL_OP_GATE_UP))
            kern_matmul_fused(m->kc, a->act, in, &L->w_gate_up, n, &f);
    } else {
        if (!knocked(m, MODEL_OP_GATE_UP))
            kern_matmul(m->kc, a->gate_up, in, &L->w_gate_up, n);
        PROF_MARK(m, MODEL_OP_SILU_MUL,
                  act_bytes(m, (3.0 * c->intermediate_size + (fold ? c->hidden_size : 0.0)) * n), 0);
        if (!knocked(m, MODEL_OP_SILU_MUL) && fold)
            kern_silu_mul_rms(m->kc, a->act, a->gate_up, n, c->intermediate_size, a->x, c->hidden_size,
                              c->rms_norm_eps);
        else if (!knocked(m, MODEL_OP_SILU_MUL))
            kern_silu_mul(m->kc, a->act, a->gate_up, n, c->intermediate_size);
    }
    out_proj(m, MODEL_OP_DOWN, a->act, &L->w_down, n, accum);
}

/* Whether a batch of n tokens runs the fused layers: every product of
 * every layer is fusable (kern_matmul_fusable: CUDA, the GEMV route, small
 * n) and the model has no per-head q/k norm (Qwen3's needs whole heads,
 * which a GEMV warp does not hold). Depends only on n and the weights. */
static bool use_fused_layers(const model *m, int n)
{
    for (int l = 0; l < m->cfg.n_layers; l++) {
        const model_layer *L = &m->layers[l];
        if (L->q_norm.rows > 0 || !kern_matmul_fusable(m->kc, &L->wqkv, n) ||
            !kern_matmul_fusable(m->kc, &L->wo, n) || !kern_matmul_fusable(m->kc, &L->w_gate_up, n) ||
            !kern_matmul_fusable(m->kc, &L->w_down, n))
            return false;
    }
    return true;
}

/* Whether the unfused layers' O and down products add into the residual
 * stream themselves (out_proj, kern_matmul_accum: cuBLASLt's beta = 1), so
 * each add + norm reads x alone (half its bytes; at a 2k-token prefill 64
 * passes of 2 x 16 MiB fewer): no communicator (the partial products are
 * summed over the ranks first) and every layer's O and down products on a
 * route where the add is free (kern_matmul_accum_fast: CUDA, weights of
 * 1 MiB and more, not the GEMV). The sum is rounded once (bf16(x + p))
 * where the two ops round twice (bf16(x + bf16(p))). Depends only on n and
 * the weights. */
static bool use_accum(const model *m, int n)
{
    if (m->comm)
        return false;
    for (int l = 0; l < m->cfg.n_layers; l++) {
        const model_layer *L = &m->layers[l];
        if (!kern_matmul_accum_fast(m->kc, &L->wo, n) || !kern_matmul_accum_fast(m->kc, &L->w_down, n))
            return false;
    }
    return true;
}

/* How the layers of a batch of n tokens run: fused (use_fused_layers), or
 * folded (model->norm_fold: no norm kernels; the QKV and gate/up products
 * read x and scale by 1 / rms after it, in their epilogue or in the RoPE /
 * SiLU op; O and down add into x; at every n, so a token's arithmetic
 * depends on the batch no more than the products' routes make it), or
 * unfused with the products adding into x (use_accum), or unfused with the
 * add in the next norm. With any but the last, the last sub-block's output
 * is already in x when the head runs (folded). */
typedef enum { LAYERS_PLAIN, LAYERS_ACCUM, LAYERS_FOLD, LAYERS_FUSED } layers_form;
static layers_form layers_form_of(const model *m, int n)
{
    if (use_fused_layers(m, n))
        return LAYERS_FUSED;
    if (m->norm_fold)
        return LAYERS_FOLD;
    return use_accum(m, n) ? LAYERS_ACCUM : LAYERS_PLAIN;
}

/* A row-parallel fused product: out = in @ w^T added into the residual
 * stream x. Alone, the RESID epilogue does it in the product; with a
 * communicator the partial product goes to a->proj, is summed over the
 * ranks, and the add of kern_add_rmsnorm (whose normed output, a->h, is
 * not used: the next fused product norms x itself) puts it into x with
 * the same rounding as the epilogue, so tp 1 with a communicator gives
 * the bits of tp 1 without. norm: any [1, d] weight for that add.
 * after_attention: the product right after the decode attention (O; the
 * kern_fuse hint). */
static void fused_resid(model *m, const void *in, const kern_weight *w, int n, const kern_weight *norm,
                        bool after_attention)
{
    model_acts *a = &m->a;
    if (!m->comm) {
        const kern_fuse f = {.epi = KERN_EPI_RESID, .resid = a->x, .after_attention = after_attention};
        kern_matmul_fused(m->kc, NULL, in, w, n, &f);
        return;
    }
    if (partials_f32(m)) {
        row_parallel(m, in, w, n);
    } else {
        const kern_fuse f = {.epi = KERN_EPI_STORE};
        kern_matmul_fused(m->kc, a->proj, in, w, n, &f);
        all_reduce(m, a->proj, n, m->act_dtype);
    }
    kern_add_rmsnorm(m->kc, a->h, a->x, a->proj, norm, n, m->cfg.rms_norm_eps);
}

/* One layer as four fused GEMVs and the attention (kern_matmul_fused, the
 * same arithmetic as the unfused ops but for the norm's summation order):
 * the QKV and gate/up products norm the residual stream x on the fly, QKV
 * ends with RoPE and the cache write, gate/up with SiLU * up, and the O and
 * down products add straight into x (fused_resid; a->proj and a->h are not
 * used without a communicator). */
static void fused_layer(model *m, const model_layer *L, const model_fwd_in *b)
{
    const model_config *c = &m->cfg;
    model_acts *a = &m->a;
    const int n = b->n_tokens;
    const kern_rope_kv_params rp = rope_params(m, L, b);
    PROF_MARK(m, MODEL_OP_QKV, gemm_bytes(m, &L->wqkv, n), gemm_flops(&L->wqkv, n));
    const kern_fuse fq = {.norm = &L->attn_norm, .eps = c->rms_norm_eps, .epi = KERN_EPI_ROPE_KV, .rope = &rp,
                          .qkv_bias = L->qkv_bias.rows > 0 ? &L->qkv_bias : NULL};
    if (!knocked(m, MODEL_OP_QKV))
        kern_matmul_fused(m->kc, a->qkv, a->x, &L->wqkv, n, &fq);
    attention_op(m, L, b);
    PROF_MARK(m, MODEL_OP_O_PROJ, gemm_bytes(m, &L->wo, n), gemm_flops(&L->wo, n));
    if (!knocked(m, MODEL_OP_O_PROJ))
        fused_resid(m, a->attn, &L->wo, n, &L->mlp_norm, true);
    PROF_MARK(m, MODEL_OP_GATE_UP, gemm_bytes(m, &L->w_gate_up, n), gemm_flops(&L->w_gate_up, n));
    const kern_fuse fg = {.norm = &L->mlp_norm, .eps = c->rms_norm_eps, .epi = KERN_EPI_SILU_MUL};
    if (!knocked(m, MODEL_OP_GATE_UP))
        kern_matmul_fused(m->kc, a->act, a->x, &L->w_gate_up, n, &fg);
    PROF_MARK(m, MODEL_OP_DOWN, gemm_bytes(m, &L->w_down, n), gemm_flops(&L->w_down, n));
    if (!knocked(m, MODEL_OP_DOWN))
        fused_resid(m, a->act, &L->w_down, n, &L->mlp_norm, false);
}

/* logits [n, vocab] (F32) of the normed rows a->gn: this rank's vocabulary
 * rows, then with a communicator every rank's gathered and, on rank 0,
 * laid side by side (rank r's rows have its vocabulary count as stride). */
static void logits_op(model *m, int n)
{
    model_acts *a = &m->a;
    if (!m->comm) {
        kern_logits(m->kc, a->logits, a->gn, &m->lm_head, n);
        return;
    }
    const int64_t chunk = model_vocab_chunk(m), vocab = m->cfg.vocab_size;
    kern_logits(m->kc, a->logits_part, a->gn, &m->lm_head, n);
    PROF_MARK(m, MODEL_OP_GATHER, 4.0 * (double)n * (double)chunk * (m->sh.tp + 1), 0);
    kern_all_gather(m->kc, m->comm, a->logits_all, a->logits_part, (size_t)n * (size_t)chunk * sizeof(float));
    if (m->follower)
        return;
    for (int r = 0; r < m->sh.tp; r++) {
        const int64_t count = INFERD_MIN(chunk, vocab - r * chunk);
        kern_copy_2d(m->kc, a->logits + r * chunk, (size_t)vocab * sizeof(float),
                     a->logits_all + (size_t)r * (size_t)n * (size_t)chunk, (size_t)count * sizeof(float),
                     (size_t)count * sizeof(float), (size_t)n);
    }
}

/* Final add + norm and LM head over n token rows named by the device
 * index array idx ([n], n <= R): logits [n, vocab] in a->logits. folded:
 * the last sub-block's output is already in x (fused layers), so there is
 * nothing to add. */
static void head_ops(model *m, const int32_t *idx, int n, bool folded)
{
    const model_config *c = &m->cfg;
    model_acts *a = &m->a;
    if (n == 0)
        return;
    PROF_MARK(m, MODEL_OP_FINAL_NORM, w_bytes(&m->final_norm) + act_bytes(m, 7.0 * n * (double)c->hidden_size), 0);
    kern_gather_rows(m->kc, a->gx, a->x, idx, n, c->hidden_size);
    if (!folded)
        kern_gather_rows(m->kc, a->gp, a->proj, idx, n, c->hidden_size);
    kern_add_rmsnorm(m->kc, a->gn, a->gx, folded ? NULL : a->gp, &m->final_norm, n, c->rms_norm_eps);
    PROF_MARK(m, MODEL_OP_LM_HEAD,
              w_bytes(&m->lm_head) + act_bytes(m, (double)n * c->hidden_size) + 4.0 * n * (double)m->lm_head.rows,
              gemm_flops(&m->lm_head, n));
    logits_op(m, n);
}

void model_forward_ops(model *m, const model_fwd_in *in)
{
    const model_config *c = &m->cfg;
    model_acts *a = &m->a;
    int n = in->n_tokens;
    const double nd = (double)n * c->hidden_size; /* elements of one [n, d] activation */
    const layers_form form = layers_form_of(m, n);
    const bool accum = form == LAYERS_ACCUM;
    m->ko_step = in->n_tokens == in->n_seqs ? m->knockout : 0; /* decode-only steps */
    PROF_MARK(m, MODEL_OP_EMBED, act_bytes(m, 2.0 * nd), 0);
    if (m->comm) {
        kern_embed_shard(m->kc, a->x, in->tokens, n, &m->embed, m->sh.vocab.begin);
        all_reduce(m, a->x, n, m->act_dtype);
    } else {
        kern_embed(m->kc, a->x, in->tokens, n, &m->embed);
    }
    for (int l = 0; l < c->n_layers; l++) {
        const model_layer *L = &m->layers[l];
        if (form == LAYERS_FUSED) {
            fused_layer(m, L, in);
            continue;
        }
        if (form == LAYERS_FOLD) {
            attention_block(m, L, in, true, true);
            mlp_block(m, L, n, true, true);
            continue;
        }
        const bool add = l > 0 && !accum; /* a->proj holds the previous sub-block's output */
        PROF_MARK(m, MODEL_OP_ATTN_NORM, w_bytes(&L->attn_norm) + act_bytes(m, (add ? 4.0 : 2.0) * nd), 0);
        if (!knocked(m, MODEL_OP_ATTN_NORM))
            kern_add_rmsnorm(m->kc, a->h, a->x, add ? a->proj : NULL, &L->attn_norm, n, c->rms_norm_eps);
        attention_block(m, L, in, accum, false);
        PROF_MARK(m, MODEL_OP_MLP_NORM, w_bytes(&L->mlp_norm) + act_bytes(m, (accum ? 2.0 : 4.0) * nd), 0);
        if (!knocked(m, MODEL_OP_MLP_NORM))
            kern_add_rmsnorm(m->kc, a->h, a->x, accum ? NULL : a->proj, &L->mlp_norm, n, c->rms_norm_eps);
        mlp_block(m, L, n, accum, false);
    }
    head_ops(m, in->logits_idx, in->n_logits, form != LAYERS_PLAIN);
}

/* Extra rows (model_batch.extra_rows) after the layers, before the sampled
 * rows' head: sub-batches of at most R rows through the logits buffer and
 * a->logits_idx (both sized R), each copied to the host for the caller.
 * NOTE: a->logits_idx is then reloaded with the sampled rows' indices; the
 * copies are ordered on the stream after the head ops that read it. */
static void extra_rows_ops(model *m, const model_batch *b)
{
    model_acts *a = &m->a;
    const size_t vocab = (size_t)m->cfg.vocab_size;
    const bool folded = layers_form_of(m, b->n_tokens) != LAYERS_PLAIN;
    for (int first = 0; first < b->n_extra; first += m->R) {
        int n = INFERD_MIN(m->R, b->n_extra - first);
        kern_memcpy_h2d(m->kc, a->logits_idx, b->extra_rows + first, (size_t)n * sizeof(int32_t));
        head_ops(m, a->logits_idx, n, folded);
        if (m->follower) /* the rows' logits are rank 0's */
            continue;
        kern_memcpy_d2h(m->kc, b->extra_buf, a->logits, (size_t)n * vocab * sizeof(float));
        b->extra_fn(b->extra_user, first, n, b->extra_buf);
    }
    if (b->n_logits > 0)
        kern_memcpy_h2d(m->kc, a->logits_idx, b->logits_indices, (size_t)b->n_logits * sizeof(int32_t));
}

inferd_status model_forward(model *m, const model_batch *b)
{
    inferd_status st = model_check_batch(m, b);
    if (st != INFERD_OK)
        return st;
    m->prof.prev_valid = false; /* a step without sampling breaks the chain of decode gaps */
    model_tp_post(m, b, false);
    model_forward_checked(m, b);
    model_tp_wait(m);
    return INFERD_OK;
}

inferd_status model_forward_seq(model *m, const int32_t *table, const int32_t *toks, int start, int n,
                                int logits_from)
{
    if (n < 1 || n > m->T || start < 0 || logits_from < 0 || logits_from > n)
        return inferd_set_error(INFERD_ERR_INVALID_ARG, "sequence step of %d tokens at %d outside the arena",
                                n, start);
    for (int i = 0; i < n; i++) {
        m->h_pos[i] = start + i;
        m->h_slots[i] = table ? kv_slot(table, start + i, m->block_size) : -1;
    }
    for (int i = logits_from; i < n; i++)
        m->h_idx[i - logits_from] = i;
    int32_t qsl[2] = {0, n}, seq_len = start + n;
    model_batch b = {.n_tokens = n,
                     .tokens = toks,
                     .positions = m->h_pos,
                     .slot_mapping = m->h_slots,
                     .n_seqs = 1,
                     .query_start_loc = qsl,
                     .seq_lens = &seq_len,
                     .block_tables = table ? table : m->h_null_table,
                     .max_blocks_per_seq = m->max_blocks_per_seq,
                     .n_logits = n - logits_from,
                     .logits_indices = m->h_idx};
    return model_forward(m, &b);
}

/* True when some row has penalties or a logit bias (kern_penalty_apply). */
static bool any_penalty(const kern_sample_params *params, int r)
{
    for (int i = 0; i < r; i++)
        if (params[i].counts || params[i].n_bias > 0)
            return true;
    return false;
}

/* NOTE: the eager path launches kern_penalty_apply only when a row needs
 * it, so a step without penalties runs exactly the ops it always ran; the
 * decode graphs always hold the launch (graphs.c), whose empty rows leave
 * the logits untouched, so both paths give the same bits. */
/* Enqueue the sampler over the last forward pass's logits rows; returns
 * how many rows it samples (0: a prompt chunk without a sampled row). */
int model_sample_ops(model *m, const kern_sample_params *params)
{
    int r = m->last_n_logits;
    if (r == 0)
        return 0;
    kern_memcpy_h2d(m->kc, m->a.sparams, params, (size_t)r * sizeof(kern_sample_params));
    PROF_MARK(m, MODEL_OP_SAMPLE, 4.0 * r * (double)m->cfg.vocab_size, 0);
    if (any_penalty(params, r))
        kern_penalty_apply(m->kc, m->a.logits, m->a.sparams, r, m->cfg.vocab_size);
    kern_sample(m->kc, m->a.sampled, m->a.logits, m->a.sparams, r, m->cfg.vocab_size, m->a.sample_ws);
    return r;
}

inferd_status model_sample(model *m, const kern_sample_params *params, int32_t *tokens)
{
    int r = model_sample_ops(m, params);
    model_prof_step_end(m);
    if (r > 0)
        kern_memcpy_d2h(m->kc, tokens, m->a.sampled, (size_t)r * sizeof(int32_t));
    else if (m->prof.open) /* a prompt chunk's profile record closes once the device has passed it */
        kern_sync(m->kc);
    model_prof_step_done(m, m->prof.cur);
    return INFERD_OK;
}

void model_logits_to_host(model *m, float *dst)
{
    kern_memcpy_d2h(m->kc, dst, m->a.logits, (size_t)m->last_n_logits * m->cfg.vocab_size * sizeof(float));
}

/* model_forward_checked, the input tokens named by prev_rows taken from
 * the previous step's sampled ones on the device. With extra rows the
 * layers run first (no head), then the extra rows' heads, then the sampled
 * rows' head, so a->logits ends with those. */
void model_forward_from(model *m, const model_batch *b, const int32_t *prev_rows)
{
    model_fwd_in in;
    upload_batch(m, b, &in);
    if (prev_rows) {
        kern_memcpy_h2d(m->kc, m->a.src_rows, prev_rows, (size_t)b->n_tokens * sizeof(int32_t));
        kern_tokens_from(m->kc, m->a.tokens, m->a.src_rows, m->a.sampled, b->n_tokens);
    }
    if (b->n_extra > 0) {
        in.n_logits = 0;
        model_forward_ops(m, &in);
        extra_rows_ops(m, b);
        head_ops(m, in.logits_idx, b->n_logits, layers_form_of(m, b->n_tokens) != LAYERS_PLAIN);
    } else {
        model_forward_ops(m, &in);
    }
    m->last_n_logits = b->n_logits;
}

void model_forward_checked(model *m, const model_batch *b)
{
    model_forward_from(m, b, NULL);
}

static double weight_elems(const kern_weight *w)
{
    return (double)w->rows * (double)w->cols;
}

void model_step_cost(const model *m, int n_seqs, int n_new, int ctx_len, model_cost *out)
{
    const model_config *c = &m->lc; /* one rank's share under tensor parallelism */
    double toks = (double)n_seqs * n_new, lin = 0, wb = 0;
    for (int l = 0; l < c->n_layers; l++) {
        const model_layer *L = &m->layers[l];
        lin += weight_elems(&L->wqkv) + weight_elems(&L->wo) + weight_elems(&L->w_gate_up) + weight_elems(&L->w_down);
        wb += w_bytes(&L->wqkv) + w_bytes(&L->wo) + w_bytes(&L->w_gate_up) + w_bytes(&L->w_down) +
              w_bytes(&L->attn_norm) + w_bytes(&L->mlp_norm) + w_bytes(&L->qkv_bias) +
              w_bytes(&L->q_norm) + w_bytes(&L->k_norm);
    }
    wb += w_bytes(&m->final_norm) + w_bytes(&m->lm_head);
    wb += toks * (double)c->hidden_size * (double)kern_dtype_size(m->embed.dtype);
    /* keys attended by the new tokens: earlier context for each, plus causal among them */
    double prior = (double)(ctx_len - n_new);
    double attended = (double)n_seqs * ((double)n_new * prior + (double)n_new * (n_new + 1) / 2.0);
    double kv_row =
        (double)c->n_layers * c->n_kv_heads * c->head_dim * 2.0 * (double)kern_dtype_size(m->kv_dtype);
    out->weight_bytes = wb;
    out->kv_bytes = (double)n_seqs * (double)ctx_len * kv_row + toks * kv_row;
    out->flops = 2.0 * toks * lin + 2.0 * (double)n_seqs * weight_elems(&m->lm_head) +
                 4.0 * (double)c->n_layers * c->n_heads * c->head_dim * attended;
}
