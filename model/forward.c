/* model/forward.c: the Llama forward pass over one flat batch, written once
 * against the kernel API (kernels/kernels.h) for every backend.
 *
 * Per layer (residual stream x, fused add+norm carrying the previous
 * sub-block's output in `proj`):
 *   h = rmsnorm(x += proj)            (layer 0: x is the embedding, no add)
 *   qkv = h @ Wqkv^T; RoPE(q, k); K/V -> paged cache (slot_mapping)
 *   attn = paged causal attention(q, cache)
 *   proj = attn @ Wo^T
 *   h = rmsnorm(x += proj)
 *   proj = (silu(h @ Wg^T) * (h @ Wu^T)) @ Wd^T
 * The final add + norm and the LM head run only on the rows that need logits
 * (gathered first), like vLLM's logits_indices.
 *
 * model_forward_ops only enqueues ops over inputs already on the device, so
 * the same code runs eagerly (model_forward: inputs copied into the arena)
 * and inside the decode CUDA graphs of graphs.c (inputs in the graph's
 * fixed region). model_step is the engine's entry: the graph when the batch
 * has one, else forward + sample. model_step_cost counts a step's bytes and
 * FLOPs for the roofline of `inferd bench latency`.
 */
#include <math.h>
#include <string.h>

#include "common/util.h"
#include "kvcache/kv_layout.h"
#include "model/model_internal.h"

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

static void attention_block(model *m, const model_layer *L, const model_fwd_in *b)
{
    const model_config *c = &m->cfg;
    model_acts *a = &m->a;
    kern_matmul(m->kc, a->qkv, a->h, &L->wqkv, b->n_tokens);
    kern_rope_kv_params rp = {
        .qkv = a->qkv,
        .positions = b->positions,
        .slot_mapping = b->slots,
        .inv_freq = a->inv_freq,
        .k_cache = L->k_cache,
        .v_cache = L->v_cache,
        .n_tokens = b->n_tokens,
        .n_heads = c->n_heads,
        .n_kv_heads = c->n_kv_heads,
        .head_dim = c->head_dim,
        .block_size = m->block_size,
    };
    kern_rope_kv_write(m->kc, &rp);
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
    };
    kern_attention(m->kc, &ap);
    kern_matmul(m->kc, a->proj, a->attn, &L->wo, b->n_tokens);
}

static void mlp_block(model *m, const model_layer *L, int n)
{
    model_acts *a = &m->a;
    kern_matmul(m->kc, a->gate_up, a->h, &L->w_gate_up, n);
    kern_silu_mul(m->kc, a->act, a->gate_up, n, m->cfg.intermediate_size);
    kern_matmul(m->kc, a->proj, a->act, &L->w_down, n);
}

void model_forward_ops(model *m, const model_fwd_in *in)
{
    const model_config *c = &m->cfg;
    model_acts *a = &m->a;
    int n = in->n_tokens;
    kern_embed(m->kc, a->x, in->tokens, n, &m->embed);
    for (int l = 0; l < c->n_layers; l++) {
        const model_layer *L = &m->layers[l];
        kern_add_rmsnorm(m->kc, a->h, a->x, l == 0 ? NULL : a->proj, &L->attn_norm, n, c->rms_norm_eps);
        attention_block(m, L, in);
        kern_add_rmsnorm(m->kc, a->h, a->x, a->proj, &L->mlp_norm, n, c->rms_norm_eps);
        mlp_block(m, L, n);
    }
    if (in->n_logits == 0)
        return;
    kern_gather_rows(m->kc, a->gx, a->x, in->logits_idx, in->n_logits, c->hidden_size);
    kern_gather_rows(m->kc, a->gp, a->proj, in->logits_idx, in->n_logits, c->hidden_size);
    kern_add_rmsnorm(m->kc, a->gn, a->gx, a->gp, &m->final_norm, in->n_logits, c->rms_norm_eps);
    kern_logits(m->kc, a->logits, a->gn, &m->lm_head, in->n_logits);
}

static void forward_checked(model *m, const model_batch *b)
{
    model_fwd_in in;
    upload_batch(m, b, &in);
    model_forward_ops(m, &in);
    m->last_n_logits = b->n_logits;
}

inferd_status model_forward(model *m, const model_batch *b)
{
    inferd_status st = model_check_batch(m, b);
    if (st != INFERD_OK)
        return st;
    forward_checked(m, b);
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

inferd_status model_sample(model *m, const kern_sample_params *params, int32_t *tokens)
{
    int r = m->last_n_logits;
    if (r == 0)
        return INFERD_OK;
    kern_memcpy_h2d(m->kc, m->a.sparams, params, (size_t)r * sizeof(kern_sample_params));
    kern_sample(m->kc, m->a.sampled, m->a.logits, m->a.sparams, r, m->cfg.vocab_size, m->a.sample_ws);
    kern_memcpy_d2h(m->kc, tokens, m->a.sampled, (size_t)r * sizeof(int32_t));
    return INFERD_OK;
}

void model_logits_to_host(model *m, float *dst)
{
    kern_memcpy_d2h(m->kc, dst, m->a.logits, (size_t)m->last_n_logits * m->cfg.vocab_size * sizeof(float));
}

inferd_status model_step(model *m, const model_batch *b, const kern_sample_params *params, int32_t *tokens)
{
    inferd_status st = model_check_batch(m, b);
    if (st != INFERD_OK)
        return st;
    if (model_graph_step(m, b, params, tokens))
        return INFERD_OK;
    m->gr.eager_steps++;
    forward_checked(m, b);
    return model_sample(m, params, tokens);
}

static double weight_bytes(const kern_weight *w)
{
    return (double)w->rows * (double)w->cols * (double)kern_dtype_size(w->dtype);
}

static double weight_elems(const kern_weight *w)
{
    return (double)w->rows * (double)w->cols;
}

void model_step_cost(const model *m, int n_seqs, int n_new, int ctx_len, model_cost *out)
{
    const model_config *c = &m->cfg;
    double toks = (double)n_seqs * n_new, lin = 0, wb = 0;
    for (int l = 0; l < c->n_layers; l++) {
        const model_layer *L = &m->layers[l];
        lin += weight_elems(&L->wqkv) + weight_elems(&L->wo) + weight_elems(&L->w_gate_up) + weight_elems(&L->w_down);
        wb += weight_bytes(&L->wqkv) + weight_bytes(&L->wo) + weight_bytes(&L->w_gate_up) + weight_bytes(&L->w_down) +
              weight_bytes(&L->attn_norm) + weight_bytes(&L->mlp_norm);
    }
    wb += weight_bytes(&m->final_norm) + weight_bytes(&m->lm_head);
    wb += toks * (double)c->hidden_size * (double)kern_dtype_size(m->embed.dtype);
    /* keys attended by the new tokens: earlier context for each, plus causal among them */
    double prior = (double)(ctx_len - n_new);
    double attended = (double)n_seqs * ((double)n_new * prior + (double)n_new * (n_new + 1) / 2.0);
    double kv_row = (double)c->n_layers * c->n_kv_heads * c->head_dim * 2.0 * (double)kern_dtype_size(m->act_dtype);
    out->weight_bytes = wb;
    out->kv_bytes = (double)n_seqs * (double)ctx_len * kv_row + toks * kv_row;
    out->flops = 2.0 * toks * lin + 2.0 * (double)n_seqs * weight_elems(&m->lm_head) +
                 4.0 * (double)c->n_layers * c->n_heads * c->head_dim * attended;
}
