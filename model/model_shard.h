/* model/model_shard.h: how tensor parallelism splits a model over tp ranks
 * (issue 16): Megatron-style, as vLLM, SGLang and TensorRT-LLM split Llama.
 * For rank r of tp:
 *   - q heads: n_heads / tp consecutive heads, from r * n_heads / tp;
 *   - kv heads: n_kv_heads / tp consecutive heads when tp divides
 *     n_kv_heads; else (tp a multiple of n_kv_heads) the one head
 *     r * n_kv_heads / tp, replicated over tp / n_kv_heads ranks, so that
 *     every rank holds the kv heads its q heads read (GQA groups stay whole);
 *   - QKV (column-parallel): the rows of those q, k and v heads (and their
 *     biases); O (row-parallel): the columns of its q heads, all-reduced;
 *   - gate/up (column-parallel): intermediate_size / tp rows of gate and the
 *     same of up; down (row-parallel): the matching columns, all-reduced;
 *   - embedding and lm_head: vocabulary rows split in ceil(vocab / tp)
 *     chunks (the last rank may hold fewer, none past the vocabulary);
 *   - norms (and Qwen3's per-head q/k norms): replicated.
 * A pure function of the config: it decides and checks the split. The
 * loader (each rank reading its slices), the forward pass (the all-reduces)
 * and the memory report are to read it: issue 16's next steps; today only
 * tests/model/test_shard.c calls it.
 */
#ifndef INFERD_MODEL_MODEL_SHARD_H
#define INFERD_MODEL_MODEL_SHARD_H

#include <stdint.h>

#include "common/status.h"
#include "model/config.h"

#define MODEL_MAX_TP 64

/* [begin, begin + count) of some index space (heads, columns, rows). */
typedef struct {
    int64_t begin, count;
} model_range;

typedef struct {
    int tp, rank;
    model_range q_heads;  /* of n_heads */
    model_range kv_heads; /* of n_kv_heads; count 1 and shared when replicated */
    int kv_replicas;      /* ranks holding each of this rank's kv heads (1 = none replicated) */
    model_range inter;    /* of intermediate_size: gate rows, up rows, down columns */
    model_range vocab;    /* of vocab_size: embedding and lm_head rows */
    int64_t weight_elems; /* this rank's weights, elements (bytes = elems x the dtype's size) */
    int64_t kv_elems_per_token; /* this rank's K + V cache per token, elements */
} model_shard;

/* The split of rank `rank` of `tp` for config c. INVALID_ARG naming
 * --tensor-parallel-size when the model cannot be split that way (heads,
 * kv heads or intermediate_size not divisible, tp out of [1, MODEL_MAX_TP]),
 * or when rank is not in [0, tp). */
inferd_status model_shard_plan(const model_config *c, int tp, int rank, model_shard *out);

#endif
