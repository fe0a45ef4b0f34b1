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

#include "common/status.h"
#include "kernels/kernels.h"
#include "model/config.h"

typedef struct model model;

typedef enum { MODEL_LOAD_SAFETENSORS = 0, MODEL_LOAD_DUMMY } model_load_format;

typedef struct {
    const char *model_dir;         /* config.json (+ weights unless dummy) */
    model_load_format load_format;
    kern_backend backend;
    int n_threads;                 /* CPU backend threads, 0 = all cores */
    int device_id;
    int max_num_batched_tokens;    /* activation arena size (tokens per step) */
    int max_num_seqs;              /* sequences per step */
    int max_model_len;             /* 0 = config max_position_embeddings */
    int block_size;                /* KV block size (tokens) */
    int64_t kv_cache_bytes;        /* 0 = derive from gpu_memory_utilization */
    float gpu_memory_utilization;  /* fraction of device memory (CUDA) */
    uint64_t dummy_seed;
} model_opts;

void model_opts_default(model_opts *o);

/* Load config + weights, size and allocate activations and KV storage. */
inferd_status model_load(const model_opts *opts, model **out);
void model_free(model *m);

const model_config *model_get_config(const model *m);
kern_ctx *model_kern(model *m);
int model_num_kv_blocks(const model *m);  /* includes the reserved null block 0 */
int model_block_size(const model *m);
int model_max_model_len(const model *m);
int model_max_num_batched_tokens(const model *m);
int model_max_num_seqs(const model *m);
int model_max_blocks_per_seq(const model *m);
/* Bytes of KV storage per block over all layers (K and V). */
int64_t model_kv_bytes_per_block(const model *m);

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

#endif
