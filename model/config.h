/* model/config.h: the model's shape and hyper-parameters, parsed from a HF
 * config.json (+ generation_config.json for eos ids).
 *
 * Supported: LlamaForCausalLM, MistralForCausalLM, Qwen2ForCausalLM (q/k/v
 * biases), Qwen3ForCausalLM (per-head q/k RMSNorm), all without sliding
 * window.
 * Unsupported values get INFERD_ERR_UNSUPPORTED / INFERD_ERR_FORMAT with a
 * message naming the file and field.
 */
#ifndef INFERD_MODEL_CONFIG_H
#define INFERD_MODEL_CONFIG_H

#include <stdbool.h>
#include <stdint.h>

#include "common/status.h"

#define MODEL_MAX_EOS 8

typedef enum { ROPE_SCALING_NONE = 0, ROPE_SCALING_LLAMA3 } rope_scaling_type;

typedef struct {
    char arch[64];               /* "LlamaForCausalLM" */
    bool qkv_bias;               /* q/k/v projections have biases (Qwen2) */
    bool qk_norm;                /* per-head RMSNorm on q and k before RoPE (Qwen3) */
    int32_t hidden_size;
    int32_t intermediate_size;
    int32_t n_layers;            /* num_hidden_layers */
    int32_t n_heads;             /* num_attention_heads */
    int32_t n_kv_heads;          /* num_key_value_heads (defaults to n_heads) */
    int32_t head_dim;            /* head_dim or hidden_size / n_heads */
    int32_t vocab_size;
    int32_t max_position_embeddings;
    float rms_norm_eps;
    float rope_theta;            /* top level or rope_parameters.rope_theta; default 10000 */
    rope_scaling_type rope_scaling;
    float rope_factor, rope_low_freq_factor, rope_high_freq_factor;
    int32_t rope_original_max_pos;
    bool tie_word_embeddings;
    int32_t bos_id;              /* -1 when absent */
    int32_t eos_ids[MODEL_MAX_EOS];
    int n_eos;
    char torch_dtype[16];        /* "float32", "bfloat16", "float16" or "" */
} model_config;

/* Parse <dir>/config.json and, when present, <dir>/generation_config.json
 * (whose eos ids replace the config's). */
inferd_status model_config_load(const char *dir, model_config *cfg);
/* Parse config JSON text (for tests); `name` is used in error messages. */
inferd_status model_config_parse(const char *json, const char *name, model_config *cfg);

/* inv_freq[head_dim/2] for RoPE, with llama3 scaling applied when set
 * (the same formula as HF's _compute_llama3_parameters). */
void model_rope_inv_freq(const model_config *cfg, float *inv_freq);

#endif
