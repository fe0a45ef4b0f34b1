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

typedef enum {
    ROPE_SCALING_NONE = 0,
    ROPE_SCALING_LLAMA3,  /* Llama 3.1+: three frequency bands */
    ROPE_SCALING_LINEAR,  /* every frequency / factor (position interpolation) */
    ROPE_SCALING_DYNAMIC, /* NTK-aware: a larger base, fixed at load (see model_rope_inv_freq) */
    ROPE_SCALING_YARN,    /* NTK-by-parts ramp + attention factor on cos/sin */
} rope_scaling_type;

/* generation_config.json sampling defaults, as (sampling-table key, value)
 * pairs in file order: temperature, top_p, top_k, min_p,
 * repetition_penalty, and max_new_tokens under the key "max_tokens". The
 * model layer only checks types; each front end applies them through the
 * sampling rows (scheduler/params.c), which own the ranges, and skips a
 * key the engine has no row for. */
#define MODEL_MAX_GEN_DEFAULTS 8
typedef struct {
    const char *key; /* static string */
    double value;
} model_gen_default;
typedef struct {
    model_gen_default v[MODEL_MAX_GEN_DEFAULTS];
    int n;
} model_gen_defaults;

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
    float rope_factor, rope_low_freq_factor, rope_high_freq_factor; /* factor: every scaling; lo/hi: llama3 */
    int32_t rope_original_max_pos; /* llama3, yarn (yarn: defaults to max_position_embeddings) */
    float rope_beta_fast, rope_beta_slow; /* yarn correction range in rotations (32, 1) */
    bool rope_truncate;                   /* yarn: floor/ceil the correction range (default true) */
    float rope_attn_factor;               /* yarn: cos and sin times this (HF attention_scaling); else 1 */
    bool tie_word_embeddings;
    int32_t bos_id;              /* -1 when absent */
    int32_t eos_ids[MODEL_MAX_EOS];
    int n_eos;
    char torch_dtype[16];        /* "float32", "bfloat16", "float16" or "" */
    model_gen_defaults gen;      /* generation_config.json sampling defaults (model_config_load) */
} model_config;

/* Parse <dir>/config.json and, when present, <dir>/generation_config.json
 * (whose eos ids replace the config's and whose sampling defaults fill
 * cfg->gen). */
inferd_status model_config_load(const char *dir, model_config *cfg);
/* Whether dir is an existing directory. NOT_FOUND when it does not exist,
 * saying how to get a Hugging Face model directory (a hub id such as
 * "org/name" gets the download command), INVALID_ARG for a file. */
inferd_status model_dir_check(const char *dir);
/* Parse config JSON text (for tests); `name` is used in error messages. */
inferd_status model_config_parse(const char *json, const char *name, model_config *cfg);

/* The sampling defaults of <dir>/generation_config.json into *out (n = 0
 * when the file is absent). FORMAT naming the file and field for a value
 * of the wrong type. (--generation-config DIR reads another folder.) */
inferd_status model_gen_defaults_load(const char *dir, model_gen_defaults *out);

/* inv_freq[head_dim/2] for RoPE with the config's scaling applied (HF's
 * _compute_*_parameters of modeling_rope_utils); cfg->rope_attn_factor is
 * the matching cos/sin factor. */
void model_rope_inv_freq(const model_config *cfg, float *inv_freq);

/* The context the model's RoPE is meant for, vLLM's derived max length:
 * max_position_embeddings, times factor for linear and dynamic, and
 * original_max_position_embeddings * factor for yarn (llama3 configs
 * already state the long context); at most 2^24. */
int32_t model_config_context_len(const model_config *cfg);

#endif
