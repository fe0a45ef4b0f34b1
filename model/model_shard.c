/* model/model_shard.c: the tensor-parallel split of model_shard.h.
 *
 * The divisibility rules and their messages follow vLLM's (heads and
 * intermediate_size divisible by the TP size; kv heads either divided or
 * replicated), so a model that vLLM refuses at some TP size is refused
 * here with the same reason. The element counts are what the rank's
 * weight slab and KV cache will hold; the forward pass adds no weights.
 */
#include "model/model_shard.h"

/* Rank r's part of n items cut in tp equal chunks (tp divides n). */
static model_range even_part(int64_t n, int tp, int r)
{
    const int64_t per = n / tp;
    return (model_range){.begin = per * r, .count = per};
}

/* The rules a split must satisfy, with vLLM's wording. */
static inferd_status check_split(const model_config *c, int tp, int rank)
{
    if (tp < 1 || tp > MODEL_MAX_TP)
        return inferd_set_error(INFERD_ERR_INVALID_ARG, "--tensor-parallel-size %d: must be in [1, %d]", tp,
                                MODEL_MAX_TP);
    if (rank < 0 || rank >= tp)
        return inferd_set_error(INFERD_ERR_INVALID_ARG, "tensor-parallel rank %d: must be in [0, %d)", rank, tp);
    if (c->n_heads % tp != 0)
        return inferd_set_error(INFERD_ERR_INVALID_ARG,
                                "--tensor-parallel-size %d: the model's %d attention heads must be divisible by it",
                                tp, c->n_heads);
    if (c->n_kv_heads % tp != 0 && tp % c->n_kv_heads != 0)
        return inferd_set_error(INFERD_ERR_INVALID_ARG,
                                "--tensor-parallel-size %d: the model's %d key/value heads must be divisible by it, "
                                "or it by them (heads then replicated)",
                                tp, c->n_kv_heads);
    if (c->intermediate_size % tp != 0)
        return inferd_set_error(INFERD_ERR_INVALID_ARG,
                                "--tensor-parallel-size %d: the model's intermediate_size %d must be divisible by it",
                                tp, c->intermediate_size);
    return INFERD_OK;
}

/* Elements of the rank's weights: per layer the QKV rows (+ biases), O's
 * columns, gate and up rows, down's columns and the replicated norms; then
 * the vocabulary rows of the embedding and, untied, of lm_head. */
static int64_t weight_elems(const model_config *c, const model_shard *s)
{
    const int64_t d = c->hidden_size, hd = c->head_dim;
    const int64_t q = s->q_heads.count * hd, kv = s->kv_heads.count * hd;
    int64_t layer = (q + 2 * kv) * d + d * q + 3 * s->inter.count * d + 2 * d;
    if (c->qkv_bias)
        layer += q + 2 * kv;
    if (c->qk_norm)
        layer += 2 * hd;
    const int64_t vocab_rows = s->vocab.count * (c->tie_word_embeddings ? 1 : 2);
    return layer * c->n_layers + vocab_rows * d + d;
}

inferd_status model_shard_plan(const model_config *c, int tp, int rank, model_shard *out)
{
    inferd_status st = check_split(c, tp, rank);
    if (st != INFERD_OK)
        return st;
    model_shard s = {.tp = tp, .rank = rank, .kv_replicas = 1};
    s.q_heads = even_part(c->n_heads, tp, rank);
    if (c->n_kv_heads % tp == 0) {
        s.kv_heads = even_part(c->n_kv_heads, tp, rank);
    } else { /* tp = k * n_kv_heads: k consecutive ranks share one kv head */
        s.kv_replicas = tp / c->n_kv_heads;
        s.kv_heads = (model_range){.begin = rank / s.kv_replicas, .count = 1};
    }
    s.inter = even_part(c->intermediate_size, tp, rank);
    const int64_t chunk = ((int64_t)c->vocab_size + tp - 1) / tp, v0 = chunk * rank;
    s.vocab = (model_range){.begin = v0 < c->vocab_size ? v0 : c->vocab_size,
                            .count = v0 < c->vocab_size ? (c->vocab_size - v0 < chunk ? c->vocab_size - v0 : chunk)
                                                        : 0};
    s.weight_elems = weight_elems(c, &s);
    s.kv_elems_per_token = 2 * (int64_t)c->n_layers * s.kv_heads.count * c->head_dim;
    *out = s;
    return INFERD_OK;
}
