/* tests/model/test_config.c: HF config.json parsing (model/config.c).
 *
 * A table of malformed and edge-case configs, each built by patching a valid
 * base config, must give the expected status and a message naming the field;
 * the accepted forms (rope_parameters, eos lists, model_type only, Mistral
 * without a short sliding window) parse to the right values; the
 * generation_config.json eos override; the shipped presets in
 * configs/models/; the real stories260K config; and the RoPE inverse
 * frequencies against an independent double-precision computation of HF's
 * formulas (plain and llama3 scaling).
 */
#include <cjson/cJSON.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "common/alloc.h"
#include "common/util.h"
#include "model/config.h"
#include "test_util.h"

static const char *k_base =
    "{\"architectures\": [\"LlamaForCausalLM\"], \"model_type\": \"llama\", \"hidden_size\": 64,"
    " \"intermediate_size\": 172, \"num_hidden_layers\": 5, \"num_attention_heads\": 8,"
    " \"num_key_value_heads\": 4, \"head_dim\": 8, \"vocab_size\": 512, \"max_position_embeddings\": 512,"
    " \"rms_norm_eps\": 1e-05, \"rope_theta\": 10000.0, \"rope_scaling\": null, \"hidden_act\": \"silu\","
    " \"tie_word_embeddings\": true, \"bos_token_id\": 1, \"eos_token_id\": 2, \"torch_dtype\": \"float32\"}";

/* Base config with `patch` applied: each key replaces the base's; the string
 * value "$DEL" deletes the key. Returns heap JSON text. */
static char *patched(const char *patch)
{
    cJSON *base = cJSON_Parse(k_base);
    cJSON *p = cJSON_Parse(patch);
    ck_assert_msg(base && p, "bad test patch %s", patch);
    for (cJSON *it = p->child; it; it = it->next) {
        cJSON_DeleteItemFromObjectCaseSensitive(base, it->string);
        if (!(cJSON_IsString(it) && strcmp(it->valuestring, "$DEL") == 0))
            cJSON_AddItemToObject(base, it->string, cJSON_Duplicate(it, 1));
    }
    char *s = cJSON_PrintUnformatted(base);
    char *out = inferd_strdup(s);
    cJSON_free(s);
    cJSON_Delete(base);
    cJSON_Delete(p);
    return out;
}

typedef struct {
    const char *patch; /* applied to k_base; NULL: use raw */
    const char *raw;   /* whole config text */
    inferd_status want;
    const char *msg;   /* substring the error must contain */
} cfg_row;

static const cfg_row k_rows[] = {
    /* JSON shape */
    {NULL, "{\"hidden_size\": 64,", INFERD_ERR_FORMAT, "invalid JSON"},
    {NULL, "", INFERD_ERR_FORMAT, "invalid JSON"},
    {NULL, "[1, 2]", INFERD_ERR_FORMAT, "not a JSON object"},
    {NULL, "\"LlamaForCausalLM\"", INFERD_ERR_FORMAT, "not a JSON object"},
    /* missing and wrongly typed sizes */
    {"{\"hidden_size\": \"$DEL\"}", NULL, INFERD_ERR_FORMAT, "hidden_size"},
    {"{\"vocab_size\": \"$DEL\"}", NULL, INFERD_ERR_FORMAT, "vocab_size"},
    {"{\"num_hidden_layers\": null}", NULL, INFERD_ERR_FORMAT, "num_hidden_layers"},
    {"{\"hidden_size\": \"64\"}", NULL, INFERD_ERR_FORMAT, "hidden_size"},
    {"{\"hidden_size\": 64.5}", NULL, INFERD_ERR_FORMAT, "hidden_size"},
    {"{\"hidden_size\": true}", NULL, INFERD_ERR_FORMAT, "hidden_size"},
    {"{\"hidden_size\": [64]}", NULL, INFERD_ERR_FORMAT, "hidden_size"},
    {"{\"intermediate_size\": {}}", NULL, INFERD_ERR_FORMAT, "intermediate_size"},
    /* ranges */
    {"{\"hidden_size\": 0}", NULL, INFERD_ERR_FORMAT, "hidden_size"},
    {"{\"hidden_size\": -64}", NULL, INFERD_ERR_FORMAT, "hidden_size"},
    {"{\"hidden_size\": 1e12}", NULL, INFERD_ERR_FORMAT, "hidden_size"},
    {"{\"intermediate_size\": -1}", NULL, INFERD_ERR_FORMAT, "intermediate_size"},
    {"{\"num_hidden_layers\": 0}", NULL, INFERD_ERR_FORMAT, "num_hidden_layers"},
    {"{\"num_hidden_layers\": 1000000000}", NULL, INFERD_ERR_FORMAT, "num_hidden_layers"},
    {"{\"num_attention_heads\": 0}", NULL, INFERD_ERR_FORMAT, "num_attention_heads"},
    {"{\"num_key_value_heads\": 0}", NULL, INFERD_ERR_FORMAT, "num_key_value_heads"},
    {"{\"vocab_size\": 0}", NULL, INFERD_ERR_FORMAT, "vocab_size"},
    {"{\"vocab_size\": 4294967296}", NULL, INFERD_ERR_FORMAT, "vocab_size"},
    {"{\"max_position_embeddings\": -5}", NULL, INFERD_ERR_FORMAT, "max_position_embeddings"},
    {"{\"rms_norm_eps\": 0}", NULL, INFERD_ERR_FORMAT, "rms_norm_eps"},
    {"{\"rms_norm_eps\": \"1e-5\"}", NULL, INFERD_ERR_FORMAT, "rms_norm_eps"},
    {"{\"rope_theta\": -1}", NULL, INFERD_ERR_FORMAT, "rope_theta"},
    {"{\"rope_theta\": \"10000\"}", NULL, INFERD_ERR_FORMAT, "rope_theta"},
    /* heads and head_dim */
    {"{\"num_key_value_heads\": 3}", NULL, INFERD_ERR_FORMAT, "num_key_value_heads"},
    {"{\"num_key_value_heads\": 16}", NULL, INFERD_ERR_FORMAT, "num_key_value_heads"},
    {"{\"head_dim\": 7}", NULL, INFERD_ERR_FORMAT, "head_dim"},
    {"{\"head_dim\": 0}", NULL, INFERD_ERR_FORMAT, "head_dim"},
    {"{\"head_dim\": \"$DEL\", \"hidden_size\": 66}", NULL, INFERD_ERR_FORMAT, "hidden_size"},
    {"{\"head_dim\": \"$DEL\", \"hidden_size\": 72, \"num_attention_heads\": 8}", NULL, INFERD_ERR_FORMAT,
     "head_dim"},
    /* architecture */
    {"{\"architectures\": [\"GPT2LMHeadModel\"]}", NULL, INFERD_ERR_UNSUPPORTED, "architectures"},
    {"{\"architectures\": \"LlamaForCausalLM\"}", NULL, INFERD_ERR_FORMAT, "architectures"},
    {"{\"architectures\": []}", NULL, INFERD_ERR_FORMAT, "architectures"},
    {"{\"architectures\": [7]}", NULL, INFERD_ERR_FORMAT, "architectures"},
    {"{\"architectures\": \"$DEL\", \"model_type\": \"gpt2\"}", NULL, INFERD_ERR_UNSUPPORTED, "model_type"},
    {"{\"architectures\": \"$DEL\", \"model_type\": \"$DEL\"}", NULL, INFERD_ERR_FORMAT, "architectures"},
    {"{\"architectures\": \"$DEL\", \"model_type\": \"mistral\"}", NULL, INFERD_OK, NULL},
    {"{\"architectures\": [\"MistralForCausalLM\"], \"sliding_window\": 128}", NULL, INFERD_ERR_UNSUPPORTED,
     "sliding_window"},
    {"{\"architectures\": [\"MistralForCausalLM\"], \"sliding_window\": \"x\"}", NULL, INFERD_ERR_FORMAT,
     "sliding_window"},
    {"{\"architectures\": [\"MistralForCausalLM\"], \"sliding_window\": 512}", NULL, INFERD_OK, NULL},
    {"{\"architectures\": [\"MistralForCausalLM\"], \"sliding_window\": null}", NULL, INFERD_OK, NULL},
    {"{\"attention_bias\": true}", NULL, INFERD_ERR_UNSUPPORTED, "attention_bias"},
    {"{\"mlp_bias\": true}", NULL, INFERD_ERR_UNSUPPORTED, "mlp_bias"},
    {"{\"hidden_act\": \"gelu\"}", NULL, INFERD_ERR_UNSUPPORTED, "hidden_act"},
    {"{\"quantization_config\": {\"quant_method\": \"awq\"}}", NULL, INFERD_ERR_UNSUPPORTED, "quantization_config"},
    /* rope scaling */
    {"{\"rope_scaling\": {\"rope_type\": \"linear\", \"factor\": 2.0}}", NULL, INFERD_OK, NULL},
    {"{\"rope_scaling\": {\"type\": \"dynamic\", \"factor\": 2.0}}", NULL, INFERD_OK, NULL},
    {"{\"rope_scaling\": {\"rope_type\": \"yarn\", \"factor\": 4.0}}", NULL, INFERD_OK, NULL},
    /* a degenerate theta: yarn's correction range divides by log(theta) (found by fuzz_config) */
    {"{\"rope_theta\": 1.0, \"rope_scaling\": {\"rope_type\": \"yarn\", \"factor\": 4.0}}", NULL,
     INFERD_ERR_FORMAT, "inv_freq"},
    {"{\"rope_parameters\": {\"rope_type\": \"yarn\", \"rope_theta\": 1.0, \"factor\": 4.0}}", NULL,
     INFERD_ERR_FORMAT, "inv_freq"},
    {"{\"rope_theta\": 1.0}", NULL, INFERD_OK, NULL},
    {"{\"rope_scaling\": {\"rope_type\": \"longrope\", \"factor\": 4.0}}", NULL, INFERD_ERR_UNSUPPORTED,
     "rope_scaling.rope_type"},
    {"{\"rope_scaling\": {\"type\": \"su\"}}", NULL, INFERD_ERR_UNSUPPORTED, "'su'"},
    {"{\"rope_scaling\": {\"rope_type\": 3}}", NULL, INFERD_ERR_FORMAT, "rope_scaling.rope_type"},
    {"{\"rope_scaling\": \"llama3\"}", NULL, INFERD_ERR_FORMAT, "rope_scaling"},
    {"{\"rope_scaling\": {\"rope_type\": \"llama3\", \"low_freq_factor\": 1.0, \"high_freq_factor\": 4.0,"
     " \"original_max_position_embeddings\": 8192}}",
     NULL, INFERD_ERR_FORMAT, "rope_scaling.factor"},
    {"{\"rope_scaling\": {\"rope_type\": \"llama3\", \"factor\": 8.0, \"low_freq_factor\": 1.0,"
     " \"high_freq_factor\": 4.0}}",
     NULL, INFERD_ERR_FORMAT, "rope_scaling.original_max_position_embeddings"},
    {"{\"rope_scaling\": {\"rope_type\": \"llama3\", \"factor\": \"8\", \"low_freq_factor\": 1.0,"
     " \"high_freq_factor\": 4.0, \"original_max_position_embeddings\": 8192}}",
     NULL, INFERD_ERR_FORMAT, "rope_scaling.factor"},
    {"{\"rope_scaling\": {\"rope_type\": \"llama3\", \"factor\": 8.0, \"low_freq_factor\": 4.0,"
     " \"high_freq_factor\": 4.0, \"original_max_position_embeddings\": 8192}}",
     NULL, INFERD_ERR_FORMAT, "rope_scaling.high_freq_factor"},
    {"{\"rope_scaling\": {\"rope_type\": \"llama3\", \"factor\": 0.5, \"low_freq_factor\": 1.0,"
     " \"high_freq_factor\": 4.0, \"original_max_position_embeddings\": 8192}}",
     NULL, INFERD_ERR_FORMAT, "rope_scaling.factor"},
    {"{\"rope_scaling\": {\"rope_type\": \"default\"}}", NULL, INFERD_OK, NULL},
    {"{\"rope_parameters\": {\"rope_type\": \"yarn\", \"factor\": 4.0}}", NULL, INFERD_OK, NULL},
    {"{\"rope_parameters\": {\"rope_type\": \"longrope\"}}", NULL, INFERD_ERR_UNSUPPORTED,
     "rope_parameters.rope_type"},
    {"{\"rope_parameters\": {\"rope_type\": \"default\", \"rope_theta\": -3}}", NULL, INFERD_ERR_FORMAT,
     "rope_parameters.rope_theta"},
    {"{\"rope_parameters\": [1]}", NULL, INFERD_ERR_FORMAT, "rope_parameters"},
    {"{\"rope_theta\": \"$DEL\", \"rope_parameters\": {\"rope_type\": \"default\", \"rope_theta\": 500000.0}}",
     NULL, INFERD_OK, NULL},
    /* other fields */
    {"{\"tie_word_embeddings\": \"yes\"}", NULL, INFERD_ERR_FORMAT, "tie_word_embeddings"},
    {"{\"tie_word_embeddings\": \"$DEL\"}", NULL, INFERD_OK, NULL},
    {"{\"bos_token_id\": \"1\"}", NULL, INFERD_ERR_FORMAT, "bos_token_id"},
    {"{\"bos_token_id\": 512}", NULL, INFERD_ERR_FORMAT, "bos_token_id"},
    {"{\"bos_token_id\": null}", NULL, INFERD_OK, NULL},
    {"{\"eos_token_id\": \"2\"}", NULL, INFERD_ERR_FORMAT, "eos_token_id"},
    {"{\"eos_token_id\": [2, 1.5]}", NULL, INFERD_ERR_FORMAT, "eos_token_id"},
    {"{\"eos_token_id\": [2, \"3\"]}", NULL, INFERD_ERR_FORMAT, "eos_token_id"},
    {"{\"eos_token_id\": -1}", NULL, INFERD_ERR_FORMAT, "eos_token_id"},
    {"{\"eos_token_id\": 100000}", NULL, INFERD_ERR_FORMAT, "eos_token_id"},
    {"{\"eos_token_id\": [1, 2, 3, 4, 5, 6, 7, 8, 9]}", NULL, INFERD_ERR_UNSUPPORTED, "eos_token_id"},
    {"{\"eos_token_id\": [2, 3]}", NULL, INFERD_OK, NULL},
    {"{\"torch_dtype\": \"int8\"}", NULL, INFERD_ERR_UNSUPPORTED, "torch_dtype"},
    {"{\"torch_dtype\": 16}", NULL, INFERD_ERR_FORMAT, "torch_dtype"},
    {"{\"torch_dtype\": \"$DEL\", \"dtype\": \"float64\"}", NULL, INFERD_ERR_UNSUPPORTED, "dtype"},
    {"{\"torch_dtype\": \"$DEL\", \"dtype\": \"bfloat16\"}", NULL, INFERD_OK, NULL},
    /* Qwen2 / Qwen3 (transformers 4 and 5 formats; unknown architectures still fail clearly) */
    {"{\"architectures\": [\"Qwen2ForCausalLM\"]}", NULL, INFERD_OK, NULL},
    {"{\"architectures\": [\"Qwen3ForCausalLM\"]}", NULL, INFERD_OK, NULL},
    {"{\"architectures\": \"$DEL\", \"model_type\": \"qwen2\"}", NULL, INFERD_OK, NULL},
    {"{\"architectures\": \"$DEL\", \"model_type\": \"qwen3\"}", NULL, INFERD_OK, NULL},
    {"{\"architectures\": [\"Qwen2MoeForCausalLM\"]}", NULL, INFERD_ERR_UNSUPPORTED, "Qwen2MoeForCausalLM"},
    {"{\"architectures\": [\"Qwen3MoeForCausalLM\"]}", NULL, INFERD_ERR_UNSUPPORTED, "Qwen3ForCausalLM)"},
    {"{\"architectures\": \"$DEL\", \"model_type\": \"qwen3_moe\"}", NULL, INFERD_ERR_UNSUPPORTED, "qwen3_moe"},
    {"{\"architectures\": [\"Qwen2ForCausalLM\"], \"attention_bias\": true}", NULL, INFERD_OK, NULL},
    {"{\"architectures\": [\"Qwen3ForCausalLM\"], \"attention_bias\": true}", NULL, INFERD_ERR_UNSUPPORTED,
     "attention_bias"},
    {"{\"architectures\": [\"Qwen3ForCausalLM\"], \"attention_bias\": \"no\"}", NULL, INFERD_ERR_FORMAT,
     "attention_bias"},
    {"{\"architectures\": [\"Qwen2ForCausalLM\"], \"mlp_bias\": true}", NULL, INFERD_ERR_UNSUPPORTED, "mlp_bias"},
    /* sliding window: off by use_sliding_window, by layer_types, by max_window_layers; else refused */
    {"{\"architectures\": [\"Qwen2ForCausalLM\"], \"sliding_window\": 128, \"use_sliding_window\": false}", NULL,
     INFERD_OK, NULL},
    {"{\"architectures\": [\"Qwen2ForCausalLM\"], \"sliding_window\": 128, \"use_sliding_window\": true}", NULL,
     INFERD_ERR_UNSUPPORTED, "sliding_window"},
    {"{\"architectures\": [\"Qwen2ForCausalLM\"], \"sliding_window\": 128, \"use_sliding_window\": true,"
     " \"max_window_layers\": 5}", NULL, INFERD_OK, NULL},
    {"{\"architectures\": [\"Qwen2ForCausalLM\"], \"sliding_window\": 128, \"use_sliding_window\": true,"
     " \"max_window_layers\": 3}", NULL, INFERD_ERR_UNSUPPORTED, "2 of 5 layers"},
    {"{\"architectures\": [\"Qwen2ForCausalLM\"], \"sliding_window\": 128, \"use_sliding_window\": \"no\"}", NULL,
     INFERD_ERR_FORMAT, "use_sliding_window"},
    {"{\"architectures\": [\"Qwen3ForCausalLM\"], \"sliding_window\": 128, \"use_sliding_window\": true,"
     " \"layer_types\": [\"full_attention\", \"full_attention\", \"full_attention\", \"full_attention\","
     " \"full_attention\"]}", NULL, INFERD_OK, NULL},
    {"{\"architectures\": [\"Qwen3ForCausalLM\"], \"sliding_window\": 128, \"use_sliding_window\": true,"
     " \"layer_types\": [\"full_attention\", \"sliding_attention\", \"full_attention\", \"full_attention\","
     " \"full_attention\"]}", NULL, INFERD_ERR_UNSUPPORTED, "1 of 5 layers"},
    {"{\"sliding_window\": null, \"layer_types\": [\"full_attention\", \"full_attention\", \"full_attention\","
     " \"full_attention\", \"full_attention\"]}", NULL, INFERD_OK, NULL},
    {"{\"layer_types\": [\"full_attention\"]}", NULL, INFERD_ERR_FORMAT, "layer_types"},
    {"{\"layer_types\": \"full_attention\"}", NULL, INFERD_ERR_FORMAT, "layer_types"},
    {"{\"layer_types\": [\"full_attention\", \"full_attention\", 3, \"full_attention\", \"full_attention\"]}",
     NULL, INFERD_ERR_FORMAT, "item 2"},
    {"{\"layer_types\": [\"full_attention\", \"linear_attention\", \"full_attention\", \"full_attention\","
     " \"full_attention\"]}", NULL, INFERD_ERR_UNSUPPORTED, "linear_attention"},
    {"{\"architectures\": [\"Qwen2ForCausalLM\"], \"rope_scaling\": {\"rope_type\": \"yarn\", \"factor\": 4.0}}", NULL,
     INFERD_OK, NULL},
};

START_TEST(test_config_table)
{
    for (size_t i = 0; i < INFERD_ARRAY_LEN(k_rows); i++) {
        const cfg_row *r = &k_rows[i];
        char *text = r->patch ? patched(r->patch) : inferd_strdup(r->raw);
        model_config c;
        memset(&c, 0x5a, sizeof c);
        model_config before = c;
        inferd_clear_error();
        inferd_status st = model_config_parse(text, "bad/config.json", &c);
        ck_assert_msg(st == r->want, "row %zu %s: status %s, want %s (%s)", i, text, inferd_status_str(st),
                      inferd_status_str(r->want), inferd_last_error());
        if (st != INFERD_OK) {
            const char *e = inferd_last_error();
            ck_assert_msg(strstr(e, "bad/config.json") && strstr(e, r->msg), "row %zu: message '%s' lacks '%s'", i,
                          e, r->msg);
            ck_assert_msg(memcmp(&c, &before, sizeof c) == 0, "row %zu: cfg changed on failure", i);
            if (getenv("INFERD_TEST_VERBOSE"))
                printf("%-12s %s\n", inferd_status_str(st), e);
        }
        inferd_free(text);
    }
}
END_TEST

/* --- RoPE scaling parameters, every type in both config formats ---------------
 * Each row edits one member of a valid scaling object of its type (value
 * "$DEL" deletes it) and runs in both formats: transformers 4's
 * "rope_scaling" next to "rope_theta", and transformers 5's
 * "rope_parameters" holding rope_theta; the message must name the member
 * with the format's prefix. Ranges: factor [1, 1e6]; yarn
 * original_max_position_embeddings [1, 2^24]; attention_factor, mscale,
 * mscale_all_dim (0, 1e3]; beta_fast, beta_slow (0, 1e6]. */
typedef struct {
    const char *type, *member, *value; /* value: JSON text, or "$DEL" */
    inferd_status want;
} rope_row;

static const char *rope_valid_object(const char *type)
{
    if (strcmp(type, "yarn") == 0)
        return "{\"factor\": 4.0, \"original_max_position_embeddings\": 128, \"beta_fast\": 32, \"beta_slow\": 1}";
    if (strcmp(type, "llama3") == 0)
        return "{\"factor\": 8.0, \"low_freq_factor\": 1.0, \"high_freq_factor\": 4.0,"
               " \"original_max_position_embeddings\": 128}";
    return "{\"factor\": 2.0}";
}

#define RF INFERD_ERR_FORMAT
static const rope_row k_rope_rows[] = {
    /* factor, every type: missing, wrong types, min-1 / min / max / max+1 */
    {"linear", "factor", "$DEL", RF}, {"linear", "factor", "\"2\"", RF}, {"linear", "factor", "true", RF},
    {"linear", "factor", "[2]", RF}, {"linear", "factor", "null", RF}, {"linear", "factor", "-2", RF},
    {"linear", "factor", "0.999", RF}, {"linear", "factor", "1", INFERD_OK}, {"linear", "factor", "1e6", INFERD_OK},
    {"linear", "factor", "1000001", RF},
    {"dynamic", "factor", "$DEL", RF}, {"dynamic", "factor", "\"2\"", RF}, {"dynamic", "factor", "0.999", RF},
    {"dynamic", "factor", "1", INFERD_OK}, {"dynamic", "factor", "1e6", INFERD_OK},
    {"dynamic", "factor", "1000001", RF},
    {"yarn", "factor", "$DEL", RF}, {"yarn", "factor", "{}", RF}, {"yarn", "factor", "0.999", RF},
    {"yarn", "factor", "1", INFERD_OK}, {"yarn", "factor", "1e6", INFERD_OK}, {"yarn", "factor", "1000001", RF},
    {"llama3", "factor", "$DEL", RF}, {"llama3", "factor", "0.999", RF}, {"llama3", "factor", "1", INFERD_OK},
    {"llama3", "factor", "1e6", INFERD_OK}, {"llama3", "factor", "1000001", RF},
    /* yarn's optional members */
    {"yarn", "original_max_position_embeddings", "$DEL", INFERD_OK},
    {"yarn", "original_max_position_embeddings", "0", RF},
    {"yarn", "original_max_position_embeddings", "1", INFERD_OK},
    {"yarn", "original_max_position_embeddings", "16777216", INFERD_OK},
    {"yarn", "original_max_position_embeddings", "16777217", RF},
    {"yarn", "original_max_position_embeddings", "128.5", RF},
    {"yarn", "original_max_position_embeddings", "\"128\"", RF},
    {"yarn", "attention_factor", "0", RF}, {"yarn", "attention_factor", "1e-9", INFERD_OK},
    {"yarn", "attention_factor", "1000", INFERD_OK}, {"yarn", "attention_factor", "1000.5", RF},
    {"yarn", "attention_factor", "\"1\"", RF}, {"yarn", "attention_factor", "null", INFERD_OK},
    {"yarn", "beta_fast", "0", RF}, {"yarn", "beta_fast", "1e-9", INFERD_OK}, {"yarn", "beta_fast", "1e6", INFERD_OK},
    {"yarn", "beta_fast", "1000001", RF}, {"yarn", "beta_fast", "[32]", RF}, {"yarn", "beta_fast", "$DEL", INFERD_OK},
    {"yarn", "beta_slow", "0", RF}, {"yarn", "beta_slow", "1e-9", INFERD_OK}, {"yarn", "beta_slow", "1e6", INFERD_OK},
    {"yarn", "beta_slow", "1000001", RF}, {"yarn", "beta_slow", "false", RF}, {"yarn", "beta_slow", "$DEL", INFERD_OK},
    {"yarn", "mscale", "0", RF}, {"yarn", "mscale", "1e-9", INFERD_OK}, {"yarn", "mscale", "1000", INFERD_OK},
    {"yarn", "mscale", "1000.5", RF}, {"yarn", "mscale", "\"1\"", RF},
    {"yarn", "mscale_all_dim", "0", RF}, {"yarn", "mscale_all_dim", "1000", INFERD_OK},
    {"yarn", "mscale_all_dim", "1000.5", RF},
    {"yarn", "truncate", "false", INFERD_OK}, {"yarn", "truncate", "true", INFERD_OK},
    {"yarn", "truncate", "\"no\"", RF}, {"yarn", "truncate", "0", RF},
    /* llama3's required members */
    {"llama3", "original_max_position_embeddings", "$DEL", RF},
    {"llama3", "original_max_position_embeddings", "0", RF},
    {"llama3", "original_max_position_embeddings", "16777217", RF},
    {"llama3", "low_freq_factor", "$DEL", RF}, {"llama3", "high_freq_factor", "0", RF},
    /* the type itself */
    {"linear", "rope_type", "\"LINEAR\"", INFERD_ERR_UNSUPPORTED}, {"linear", "rope_type", "7", RF},
};
#undef RF

/* The scaling object of row r: the type's valid object with r's edit. */
static cJSON *rope_object(const rope_row *r)
{
    cJSON *o = cJSON_Parse(rope_valid_object(r->type));
    cJSON_AddStringToObject(o, "rope_type", r->type);
    cJSON_DeleteItemFromObjectCaseSensitive(o, r->member);
    if (strcmp(r->value, "$DEL") != 0) {
        cJSON *v = cJSON_Parse(r->value);
        ck_assert_msg(v, "bad row value %s", r->value);
        cJSON_AddItemToObject(o, r->member, v);
    }
    return o;
}

START_TEST(test_rope_scaling_table)
{
    static const char *const what[] = {"rope_scaling", "rope_parameters"};
    for (size_t i = 0; i < INFERD_ARRAY_LEN(k_rope_rows); i++) {
        const rope_row *r = &k_rope_rows[i];
        for (int fmt = 0; fmt < 2; fmt++) {
            cJSON *patch = cJSON_CreateObject();
            cJSON *o = rope_object(r);
            if (fmt == 1) {
                cJSON_AddNumberToObject(o, "rope_theta", 10000.0);
                cJSON_AddStringToObject(patch, "rope_theta", "$DEL");
            }
            cJSON_AddItemToObject(patch, what[fmt], o);
            char *ptext = cJSON_PrintUnformatted(patch);
            char *text = patched(ptext);
            model_config c;
            inferd_clear_error();
            inferd_status st = model_config_parse(text, "r/config.json", &c);
            ck_assert_msg(st == r->want, "row %zu %s: %s, want %s (%s)", i, text, inferd_status_str(st),
                          inferd_status_str(r->want), inferd_last_error());
            if (st != INFERD_OK) {
                char field[96];
                snprintf(field, sizeof field, "'%s.%s'", what[fmt], r->member);
                ck_assert_msg(strstr(inferd_last_error(), "r/config.json") && strstr(inferd_last_error(), field),
                              "row %zu: message '%s' lacks %s", i, inferd_last_error(), field);
            } else {
                const rope_scaling_type t = strcmp(r->type, "linear") == 0    ? ROPE_SCALING_LINEAR
                                            : strcmp(r->type, "dynamic") == 0 ? ROPE_SCALING_DYNAMIC
                                            : strcmp(r->type, "yarn") == 0    ? ROPE_SCALING_YARN
                                                                              : ROPE_SCALING_LLAMA3;
                ck_assert_int_eq(c.rope_scaling, t);
                ck_assert_float_eq(c.rope_theta, 10000.0f);
                if (strcmp(r->member, "factor") == 0)
                    ck_assert_float_eq(c.rope_factor, (float)atof(r->value));
            }
            cJSON_free(ptext);
            cJSON_Delete(patch);
            inferd_free(text);
        }
    }
}
END_TEST

static void parse_ok(const char *patch, model_config *c)
{
    char *text = patched(patch);
    inferd_status st = model_config_parse(text, "t/config.json", c);
    ck_assert_msg(st == INFERD_OK, "%s: %s", text, inferd_last_error());
    inferd_free(text);
}

START_TEST(test_config_accepted_forms)
{
    model_config c;
    parse_ok("{}", &c);
    ck_assert_str_eq(c.arch, "LlamaForCausalLM");
    ck_assert_int_eq(c.hidden_size, 64);
    ck_assert_int_eq(c.intermediate_size, 172);
    ck_assert_int_eq(c.n_layers, 5);
    ck_assert_int_eq(c.n_heads, 8);
    ck_assert_int_eq(c.n_kv_heads, 4);
    ck_assert_int_eq(c.head_dim, 8);
    ck_assert_int_eq(c.vocab_size, 512);
    ck_assert_int_eq(c.max_position_embeddings, 512);
    ck_assert_float_eq(c.rms_norm_eps, 1e-5f);
    ck_assert_float_eq(c.rope_theta, 10000.0f);
    ck_assert_int_eq(c.rope_scaling, ROPE_SCALING_NONE);
    ck_assert(c.tie_word_embeddings);
    ck_assert_int_eq(c.bos_id, 1);
    ck_assert_int_eq(c.n_eos, 1);
    ck_assert_int_eq(c.eos_ids[0], 2);
    ck_assert_str_eq(c.torch_dtype, "float32");

    /* Defaults: kv heads = heads, head_dim = hidden / heads, untied, no bos. */
    parse_ok("{\"num_key_value_heads\": \"$DEL\", \"head_dim\": \"$DEL\", \"tie_word_embeddings\": \"$DEL\","
             " \"bos_token_id\": \"$DEL\", \"eos_token_id\": null, \"torch_dtype\": \"$DEL\","
             " \"rope_theta\": \"$DEL\", \"max_position_embeddings\": \"$DEL\"}",
             &c);
    ck_assert_int_eq(c.n_kv_heads, 8);
    ck_assert_int_eq(c.head_dim, 8);
    ck_assert(!c.tie_word_embeddings);
    ck_assert_int_eq(c.bos_id, -1);
    ck_assert_int_eq(c.n_eos, 0);
    ck_assert_str_eq(c.torch_dtype, "");
    ck_assert_float_eq(c.rope_theta, 10000.0f);
    ck_assert_int_eq(c.max_position_embeddings, 2048);

    /* head_dim given explicitly and different from hidden / heads. */
    parse_ok("{\"head_dim\": 16}", &c);
    ck_assert_int_eq(c.head_dim, 16);

    /* eos list; "dtype" instead of "torch_dtype"; model_type only. */
    parse_ok("{\"eos_token_id\": [2, 3, 7], \"torch_dtype\": \"$DEL\", \"dtype\": \"bfloat16\","
             " \"architectures\": \"$DEL\", \"model_type\": \"mistral\"}",
             &c);
    ck_assert_int_eq(c.n_eos, 3);
    ck_assert_int_eq(c.eos_ids[2], 7);
    ck_assert_str_eq(c.torch_dtype, "bfloat16");
    ck_assert_str_eq(c.arch, "MistralForCausalLM");

    /* Classic rope_scaling llama3. */
    parse_ok("{\"rope_theta\": 500000.0, \"rope_scaling\": {\"factor\": 32.0, \"high_freq_factor\": 4.0,"
             " \"low_freq_factor\": 1.0, \"original_max_position_embeddings\": 8192, \"rope_type\": \"llama3\"}}",
             &c);
    ck_assert_int_eq(c.rope_scaling, ROPE_SCALING_LLAMA3);
    ck_assert_float_eq(c.rope_theta, 500000.0f);
    ck_assert_float_eq(c.rope_factor, 32.0f);
    ck_assert_float_eq(c.rope_low_freq_factor, 1.0f);
    ck_assert_float_eq(c.rope_high_freq_factor, 4.0f);
    ck_assert_int_eq(c.rope_original_max_pos, 8192);

    /* Legacy "type" key. */
    parse_ok("{\"rope_scaling\": {\"factor\": 8.0, \"high_freq_factor\": 4.0, \"low_freq_factor\": 1.0,"
             " \"original_max_position_embeddings\": 8192, \"type\": \"llama3\"}}",
             &c);
    ck_assert_int_eq(c.rope_scaling, ROPE_SCALING_LLAMA3);
    ck_assert_float_eq(c.rope_factor, 8.0f);

    /* transformers v5 rope_parameters, default and llama3. */
    parse_ok("{\"rope_theta\": \"$DEL\", \"rope_scaling\": \"$DEL\","
             " \"rope_parameters\": {\"rope_type\": \"default\", \"rope_theta\": 123456.0}}",
             &c);
    ck_assert_float_eq(c.rope_theta, 123456.0f);
    ck_assert_int_eq(c.rope_scaling, ROPE_SCALING_NONE);
    parse_ok("{\"rope_theta\": \"$DEL\", \"rope_scaling\": \"$DEL\", \"rope_parameters\": {\"rope_type\": \"llama3\","
             " \"rope_theta\": 500000.0, \"factor\": 8.0, \"low_freq_factor\": 1.0, \"high_freq_factor\": 4.0,"
             " \"original_max_position_embeddings\": 8192}}",
             &c);
    ck_assert_float_eq(c.rope_theta, 500000.0f);
    ck_assert_int_eq(c.rope_scaling, ROPE_SCALING_LLAMA3);
    ck_assert_float_eq(c.rope_factor, 8.0f);
    ck_assert_int_eq(c.rope_original_max_pos, 8192);
}
END_TEST

/* Write `text` to dir/name. */
static void write_file(const char *dir, const char *name, const char *text)
{
    char *p = util_path_join(dir, name);
    FILE *f = fopen(p, "wb");
    ck_assert_ptr_nonnull(f);
    fputs(text, f);
    fclose(f);
    inferd_free(p);
}

static void remove_file(const char *dir, const char *name)
{
    char *p = util_path_join(dir, name);
    unlink(p);
    inferd_free(p);
}

/* Qwen2 / Qwen3 configs in both transformers formats parse to the Llama
 * block plus their extras, with their own defaults. */
START_TEST(test_config_qwen)
{
    model_config c;
    /* transformers 4: rope_theta + torch_dtype, Qwen2.5-0.5B-shaped */
    static const char *q2 =
        "{\"architectures\": [\"Qwen2ForCausalLM\"], \"attention_dropout\": 0.0, \"bos_token_id\": 151643,"
        " \"eos_token_id\": 151645, \"hidden_act\": \"silu\", \"hidden_size\": 896, \"initializer_range\": 0.02,"
        " \"intermediate_size\": 4864, \"max_position_embeddings\": 32768, \"max_window_layers\": 21,"
        " \"model_type\": \"qwen2\", \"num_attention_heads\": 14, \"num_hidden_layers\": 24,"
        " \"num_key_value_heads\": 2, \"rms_norm_eps\": 1e-06, \"rope_scaling\": null, \"rope_theta\": 1000000.0,"
        " \"sliding_window\": 32768, \"tie_word_embeddings\": true, \"torch_dtype\": \"bfloat16\","
        " \"transformers_version\": \"4.43.1\", \"use_cache\": true, \"use_sliding_window\": false,"
        " \"vocab_size\": 151936}";
    ck_assert_msg(model_config_parse(q2, "q2/config.json", &c) == INFERD_OK, "%s", inferd_last_error());
    ck_assert_str_eq(c.arch, "Qwen2ForCausalLM");
    ck_assert(c.qkv_bias && !c.qk_norm);
    ck_assert_int_eq(c.head_dim, 64);
    ck_assert_int_eq(c.n_kv_heads, 2);
    ck_assert(c.tie_word_embeddings);
    ck_assert_float_eq(c.rope_theta, 1000000.0f);
    ck_assert_str_eq(c.torch_dtype, "bfloat16");
    ck_assert_int_eq(c.eos_ids[0], 151645);

    /* transformers 5: rope_parameters + dtype + layer_types, Qwen3-0.6B-shaped (head_dim 128 != 1024 / 16) */
    static const char *q3 =
        "{\"architectures\": [\"Qwen3ForCausalLM\"], \"attention_bias\": false, \"attention_dropout\": 0.0,"
        " \"bos_token_id\": 151643, \"dtype\": \"bfloat16\", \"eos_token_id\": 151645, \"head_dim\": 128,"
        " \"hidden_act\": \"silu\", \"hidden_size\": 1024, \"intermediate_size\": 3072,"
        " \"layer_types\": [\"full_attention\", \"full_attention\"], \"max_position_embeddings\": 40960,"
        " \"max_window_layers\": 28, \"model_type\": \"qwen3\", \"num_attention_heads\": 16,"
        " \"num_hidden_layers\": 2, \"num_key_value_heads\": 8, \"rms_norm_eps\": 1e-06,"
        " \"rope_parameters\": {\"rope_theta\": 1000000, \"rope_type\": \"default\"}, \"sliding_window\": null,"
        " \"tie_word_embeddings\": true, \"use_cache\": true, \"use_sliding_window\": false, \"vocab_size\": 151936}";
    ck_assert_msg(model_config_parse(q3, "q3/config.json", &c) == INFERD_OK, "%s", inferd_last_error());
    ck_assert_str_eq(c.arch, "Qwen3ForCausalLM");
    ck_assert(!c.qkv_bias && c.qk_norm);
    ck_assert_int_eq(c.head_dim, 128);
    ck_assert_int_eq(c.hidden_size, 1024);
    ck_assert_int_eq(c.n_heads, 16);
    ck_assert_float_eq(c.rope_theta, 1000000.0f);
    ck_assert_str_eq(c.torch_dtype, "bfloat16");
    ck_assert_int_eq(c.max_position_embeddings, 40960);

    /* Qwen defaults: head_dim 128 for Qwen3 (Qwen3Config), hidden / heads for Qwen2; 32768 positions */
    parse_ok("{\"architectures\": [\"Qwen3ForCausalLM\"], \"head_dim\": \"$DEL\","
             " \"max_position_embeddings\": \"$DEL\"}", &c);
    ck_assert_int_eq(c.head_dim, 128);
    ck_assert_int_eq(c.max_position_embeddings, 32768);
    parse_ok("{\"architectures\": [\"Qwen2ForCausalLM\"], \"head_dim\": \"$DEL\"}", &c);
    ck_assert_int_eq(c.head_dim, 8);
    parse_ok("{}", &c);
    ck_assert(!c.qkv_bias && !c.qk_norm);

    /* the shipped test presets */
    const char *src = getenv("INFERD_SOURCE_DIR");
    if (!src || !*src)
        src = INFERD_TEST_SOURCE_DIR;
    char path[4096];
    snprintf(path, sizeof path, "%s/configs/models/test-qwen2-small", src);
    ck_assert_msg(model_config_load(path, &c) == INFERD_OK, "%s", inferd_last_error());
    ck_assert(c.qkv_bias && !c.qk_norm && c.tie_word_embeddings);
    ck_assert_int_eq(c.head_dim, 64);
    snprintf(path, sizeof path, "%s/configs/models/test-qwen3-small", src);
    ck_assert_msg(model_config_load(path, &c) == INFERD_OK, "%s", inferd_last_error());
    ck_assert(!c.qkv_bias && c.qk_norm && !c.tie_word_embeddings);
    ck_assert_int_eq(c.head_dim, 128);
    ck_assert_int_eq(c.hidden_size, 512);
    ck_assert_float_eq(c.rope_theta, 1000000.0f);
}
END_TEST

START_TEST(test_config_load_generation)
{
    char *dir = test_make_temp_dir("inferd-cfg");
    ck_assert_ptr_nonnull(dir);
    model_config c;

    /* No config.json at all. */
    ck_assert_int_eq(model_config_load(dir, &c), INFERD_ERR_NOT_FOUND);
    ck_assert_ptr_nonnull(strstr(inferd_last_error(), "config.json"));

    write_file(dir, "config.json", k_base);
    ck_assert_int_eq(model_config_load(dir, &c), INFERD_OK);
    ck_assert_int_eq(c.n_eos, 1);
    ck_assert_int_eq(c.eos_ids[0], 2);

    /* generation_config.json eos (list) replaces the config's. */
    write_file(dir, "generation_config.json", "{\"bos_token_id\": 1, \"eos_token_id\": [2, 7, 9]}");
    ck_assert_int_eq(model_config_load(dir, &c), INFERD_OK);
    ck_assert_int_eq(c.n_eos, 3);
    ck_assert_int_eq(c.eos_ids[0], 2);
    ck_assert_int_eq(c.eos_ids[1], 7);
    ck_assert_int_eq(c.eos_ids[2], 9);

    /* ... as an int. */
    write_file(dir, "generation_config.json", "{\"eos_token_id\": 5}");
    ck_assert_int_eq(model_config_load(dir, &c), INFERD_OK);
    ck_assert_int_eq(c.n_eos, 1);
    ck_assert_int_eq(c.eos_ids[0], 5);

    /* Without eos ids it keeps the config's. */
    write_file(dir, "generation_config.json", "{\"do_sample\": true}");
    ck_assert_int_eq(model_config_load(dir, &c), INFERD_OK);
    ck_assert_int_eq(c.n_eos, 1);
    ck_assert_int_eq(c.eos_ids[0], 2);

    /* Malformed generation config: error naming it, cfg untouched. */
    static const char *bad[] = {"{\"eos_token_id\": ", "[2]", "{\"eos_token_id\": \"2\"}",
                                "{\"eos_token_id\": [2, 99999]}"};
    for (size_t i = 0; i < INFERD_ARRAY_LEN(bad); i++) {
        write_file(dir, "generation_config.json", bad[i]);
        model_config d;
        memset(&d, 0x33, sizeof d);
        ck_assert_int_eq(model_config_load(dir, &d), INFERD_ERR_FORMAT);
        ck_assert_msg(strstr(inferd_last_error(), "generation_config.json"), "%s", inferd_last_error());
        ck_assert_int_eq(d.hidden_size, 0x33333333);
    }

    /* A malformed config.json names its path. */
    write_file(dir, "config.json", "{\"hidden_size\": 64");
    ck_assert_int_eq(model_config_load(dir, &c), INFERD_ERR_FORMAT);
    ck_assert_ptr_nonnull(strstr(inferd_last_error(), dir));

    remove_file(dir, "config.json");
    remove_file(dir, "generation_config.json");
    rmdir(dir);
    inferd_free(dir);
}
END_TEST

/* generation_config.json sampling defaults (vLLM's --generation-config
 * auto): the five fields it reads plus max_new_tokens as max_tokens, in
 * table order; values equal to HF GenerationConfig's defaults dropped (as
 * vLLM's to_diff_dict does); null = absent; other fields ignored; a wrong
 * type is an error naming the file and field. Ranges are the sampling
 * table's (applied by the front ends), so an out-of-range number passes
 * here. */
typedef struct {
    const char *json;
    inferd_status want;
    const char *keys; /* "key=value,..." of the parsed defaults, or the error's field */
} gen_row;

static const gen_row k_gen_rows[] = {
    {"{}", INFERD_OK, ""},
    {"{\"do_sample\": true, \"bos_token_id\": 1}", INFERD_OK, ""},
    {"{\"temperature\": 0.6, \"top_p\": 0.95, \"top_k\": 20, \"min_p\": 0}", INFERD_OK,
     "temperature=0.6,top_p=0.95,top_k=20,min_p=0"},
    {"{\"max_new_tokens\": 7, \"temperature\": 0.01, \"top_k\": 1}", INFERD_OK, "temperature=0.01,top_k=1,max_tokens=7"},
    {"{\"repetition_penalty\": 1.05}", INFERD_OK, "repetition_penalty=1.05"},
    {"{\"temperature\": 1.0, \"top_p\": 1.0, \"top_k\": 50, \"repetition_penalty\": 1.0}", INFERD_OK, ""},
    {"{\"top_k\": 49}", INFERD_OK, "top_k=49"},
    {"{\"top_k\": 51}", INFERD_OK, "top_k=51"},
    {"{\"temperature\": null, \"max_new_tokens\": null}", INFERD_OK, ""},
    {"{\"temperature\": 7}", INFERD_OK, "temperature=7"}, /* range: the sampling table's */
    {"{\"max_new_tokens\": 0}", INFERD_OK, "max_tokens=0"},
    {"{\"temperature\": \"0.7\"}", INFERD_ERR_FORMAT, "'temperature'"},
    {"{\"top_p\": true}", INFERD_ERR_FORMAT, "'top_p'"},
    {"{\"top_k\": 20.5}", INFERD_ERR_FORMAT, "'top_k'"},
    {"{\"top_k\": [20]}", INFERD_ERR_FORMAT, "'top_k'"},
    {"{\"min_p\": {}}", INFERD_ERR_FORMAT, "'min_p'"},
    {"{\"max_new_tokens\": 1.5}", INFERD_ERR_FORMAT, "'max_new_tokens'"},
    {"{\"max_new_tokens\": \"7\"}", INFERD_ERR_FORMAT, "'max_new_tokens'"},
    {"{\"repetition_penalty\": false}", INFERD_ERR_FORMAT, "'repetition_penalty'"},
};

static void gen_defaults_str(const model_gen_defaults *g, char *buf, size_t n)
{
    size_t off = 0;
    buf[0] = '\0';
    for (int i = 0; i < g->n && off < n; i++)
        off += (size_t)snprintf(buf + off, n - off, "%s%s=%g", i ? "," : "", g->v[i].key, g->v[i].value);
}

START_TEST(test_config_gen_defaults)
{
    char *dir = test_make_temp_dir("inferd-gen");
    ck_assert_ptr_nonnull(dir);
    write_file(dir, "config.json", k_base);
    model_gen_defaults g;
    /* no generation_config.json: none, for both entry points */
    ck_assert_int_eq(model_gen_defaults_load(dir, &g), INFERD_OK);
    ck_assert_int_eq(g.n, 0);
    model_config c;
    ck_assert_int_eq(model_config_load(dir, &c), INFERD_OK);
    ck_assert_int_eq(c.gen.n, 0);
    for (size_t i = 0; i < INFERD_ARRAY_LEN(k_gen_rows); i++) {
        const gen_row *r = &k_gen_rows[i];
        write_file(dir, "generation_config.json", r->json);
        memset(&g, 0x44, sizeof g);
        inferd_status st = model_gen_defaults_load(dir, &g);
        inferd_status st2 = model_config_load(dir, &c);
        ck_assert_msg(st == r->want && st2 == r->want, "row %zu %s: %s / %s (%s)", i, r->json,
                      inferd_status_str(st), inferd_status_str(st2), inferd_last_error());
        if (st != INFERD_OK) {
            ck_assert_msg(strstr(inferd_last_error(), "generation_config.json") &&
                              strstr(inferd_last_error(), r->keys),
                          "row %zu: '%s' lacks %s", i, inferd_last_error(), r->keys);
            continue;
        }
        char got[256], got2[256];
        gen_defaults_str(&g, got, sizeof got);
        gen_defaults_str(&c.gen, got2, sizeof got2);
        ck_assert_msg(strcmp(got, r->keys) == 0 && strcmp(got2, r->keys) == 0, "row %zu: '%s' / '%s', want '%s'",
                      i, got, got2, r->keys);
    }
    ck_assert_int_eq(model_gen_defaults_load(NULL, &g), INFERD_ERR_INVALID_ARG);
    remove_file(dir, "config.json");
    remove_file(dir, "generation_config.json");
    rmdir(dir);
    inferd_free(dir);
}
END_TEST

static void check_scaled(const model_config *c, bool want_ends);

START_TEST(test_config_presets)
{
    const char *src = getenv("INFERD_SOURCE_DIR");
    if (!src || !*src)
        src = INFERD_TEST_SOURCE_DIR;
    char path[4096];
    model_config c;

    snprintf(path, sizeof path, "%s/configs/models/llama3-8b", src);
    ck_assert_msg(model_config_load(path, &c) == INFERD_OK, "%s", inferd_last_error());
    ck_assert_int_eq(c.hidden_size, 4096);
    ck_assert_int_eq(c.intermediate_size, 14336);
    ck_assert_int_eq(c.n_layers, 32);
    ck_assert_int_eq(c.n_heads, 32);
    ck_assert_int_eq(c.n_kv_heads, 8);
    ck_assert_int_eq(c.head_dim, 128);
    ck_assert_int_eq(c.vocab_size, 128256);
    ck_assert_int_eq(c.max_position_embeddings, 8192);
    ck_assert_float_eq(c.rope_theta, 500000.0f);
    ck_assert_int_eq(c.rope_scaling, ROPE_SCALING_NONE);
    ck_assert(!c.tie_word_embeddings);
    ck_assert_int_eq(c.bos_id, 128000);
    ck_assert_int_eq(c.n_eos, 1);
    ck_assert_int_eq(c.eos_ids[0], 128001);
    ck_assert_str_eq(c.torch_dtype, "bfloat16");

    snprintf(path, sizeof path, "%s/configs/models/llama2-7b", src);
    ck_assert_msg(model_config_load(path, &c) == INFERD_OK, "%s", inferd_last_error());
    ck_assert_int_eq(c.hidden_size, 4096);
    ck_assert_int_eq(c.intermediate_size, 11008);
    ck_assert_int_eq(c.n_kv_heads, 32);
    ck_assert_int_eq(c.head_dim, 128);
    ck_assert_int_eq(c.vocab_size, 32000);
    ck_assert_int_eq(c.max_position_embeddings, 4096);
    ck_assert_float_eq(c.rope_theta, 10000.0f);
    ck_assert_int_eq(c.bos_id, 1);
    ck_assert_int_eq(c.eos_ids[0], 2);

    snprintf(path, sizeof path, "%s/configs/models/llama3.2-1b", src);
    ck_assert_msg(model_config_load(path, &c) == INFERD_OK, "%s", inferd_last_error());
    ck_assert_int_eq(c.hidden_size, 2048);
    ck_assert_int_eq(c.intermediate_size, 8192);
    ck_assert_int_eq(c.n_layers, 16);
    ck_assert_int_eq(c.n_kv_heads, 8);
    ck_assert_int_eq(c.head_dim, 64);
    ck_assert_int_eq(c.max_position_embeddings, 131072);
    ck_assert_int_eq(c.rope_scaling, ROPE_SCALING_LLAMA3);
    ck_assert_float_eq(c.rope_factor, 32.0f);
    ck_assert_int_eq(c.rope_original_max_pos, 8192);
    ck_assert(c.tie_word_embeddings);

    /* Llama-3.1-8B shapes with its real rope_scaling (dummy-weight long-context benchmarks) */
    snprintf(path, sizeof path, "%s/configs/models/llama3.1-8b", src);
    ck_assert_msg(model_config_load(path, &c) == INFERD_OK, "%s", inferd_last_error());
    ck_assert_int_eq(c.hidden_size, 4096);
    ck_assert_int_eq(c.n_kv_heads, 8);
    ck_assert_int_eq(c.max_position_embeddings, 131072);
    ck_assert_int_eq(c.rope_scaling, ROPE_SCALING_LLAMA3);
    ck_assert_float_eq(c.rope_factor, 8.0f);
    ck_assert_float_eq(c.rope_low_freq_factor, 1.0f);
    ck_assert_float_eq(c.rope_high_freq_factor, 4.0f);
    ck_assert_int_eq(c.rope_original_max_pos, 8192);
    ck_assert_int_eq(model_config_context_len(&c), 131072);

    /* the rope-scaling test models of scripts/hf_reference.py: each longer
     * than its original context, yarn in the transformers 5 format */
    static const struct {
        const char *dir;
        rope_scaling_type t;
        int ctx;
        float attn;
    } rope_presets[] = {
        {"test-llama-rope-linear-small", ROPE_SCALING_LINEAR, 2048, 1.0f},
        {"test-llama-rope-dynamic-small", ROPE_SCALING_DYNAMIC, 2048, 1.0f},
        {"test-llama-rope-yarn-small", ROPE_SCALING_YARN, 2048, 1.1386294f},
    };
    for (size_t i = 0; i < INFERD_ARRAY_LEN(rope_presets); i++) {
        snprintf(path, sizeof path, "%s/configs/models/%s", src, rope_presets[i].dir);
        ck_assert_msg(model_config_load(path, &c) == INFERD_OK, "%s", inferd_last_error());
        ck_assert_int_eq(c.rope_scaling, rope_presets[i].t);
        ck_assert_float_eq(c.rope_factor, 4.0f);
        ck_assert_int_eq(c.head_dim, 64);
        ck_assert_int_eq(model_config_context_len(&c), rope_presets[i].ctx);
        ck_assert_float_eq_tol(c.rope_attn_factor, rope_presets[i].attn, 1e-6f);
        check_scaled(&c, c.rope_scaling == ROPE_SCALING_YARN);
    }
}
END_TEST

START_TEST(test_config_stories260k)
{
    char *dir = test_fixture_path("models/stories260K");
    ck_assert_ptr_nonnull(dir);
    model_config c;
    ck_assert_msg(model_config_load(dir, &c) == INFERD_OK, "%s", inferd_last_error());
    ck_assert_str_eq(c.arch, "LlamaForCausalLM");
    ck_assert_int_eq(c.hidden_size, 64);
    ck_assert_int_eq(c.intermediate_size, 172);
    ck_assert_int_eq(c.n_layers, 5);
    ck_assert_int_eq(c.n_heads, 8);
    ck_assert_int_eq(c.n_kv_heads, 4);
    ck_assert_int_eq(c.head_dim, 8);
    ck_assert_int_eq(c.vocab_size, 512);
    ck_assert_int_eq(c.max_position_embeddings, 512);
    ck_assert_float_eq(c.rms_norm_eps, 1e-5f);
    ck_assert_float_eq(c.rope_theta, 10000.0f);
    ck_assert(c.tie_word_embeddings);
    ck_assert_int_eq(c.bos_id, 1);
    ck_assert_int_eq(c.n_eos, 1);
    ck_assert_int_eq(c.eos_ids[0], 2);
    inferd_free(dir);
}
END_TEST

/* --- RoPE ------------------------------------------------------------------ */

/* Independent reference in double: theta^(-2j/d), then HF's llama3 rule. */
static double ref_inv_freq(const model_config *c, int j, int *band)
{
    double f = pow((double)c->rope_theta, -2.0 * j / (double)c->head_dim);
    *band = 0;
    if (c->rope_scaling != ROPE_SCALING_LLAMA3)
        return f;
    double orig = c->rope_original_max_pos, lo = c->rope_low_freq_factor, hi = c->rope_high_freq_factor;
    double wavelen = 2.0 * M_PI / f;
    if (wavelen > orig / lo) {
        *band = 1;
        return f / c->rope_factor;
    }
    if (wavelen < orig / hi)
        return f;
    *band = 2;
    double s = (orig / wavelen - lo) / (hi - lo);
    return (1.0 - s) * f / c->rope_factor + s * f;
}

static void check_rope(const model_config *c, int want_bands)
{
    int half = c->head_dim / 2;
    float *got = inferd_malloc(sizeof(float) * (size_t)half);  /* [head_dim / 2] */
    float *plain = inferd_malloc(sizeof(float) * (size_t)half); /* [head_dim / 2] */
    model_config p = *c;
    p.rope_scaling = ROPE_SCALING_NONE;
    model_rope_inv_freq(c, got);
    model_rope_inv_freq(&p, plain);
    int seen = 0;
    for (int j = 0; j < half; j++) {
        int band;
        double ref = ref_inv_freq(c, j, &band);
        seen |= 1 << band;
        ck_assert_msg(fabs(got[j] - ref) <= 4e-6 * ref, "hd %d j %d: %.9g vs %.9g", c->head_dim, j, got[j], ref);
        /* The bands are exact float operations on the unscaled value. */
        if (band == 0)
            ck_assert_msg(got[j] == plain[j], "j %d high-freq band changed", j);
        if (band == 1)
            ck_assert_msg(got[j] == plain[j] / c->rope_factor, "j %d low-freq band not plain/factor", j);
    }
    ck_assert_float_eq(got[0], 1.0f);
    ck_assert_msg(seen == want_bands, "bands seen %#x, want %#x", seen, want_bands);
    inferd_free(got);
    inferd_free(plain);
}

START_TEST(test_rope_inv_freq)
{
    model_config c;
    parse_ok("{}", &c); /* head_dim 8, theta 1e4 */
    check_rope(&c, 1);
    parse_ok("{\"head_dim\": 128, \"rope_theta\": 500000.0}", &c);
    check_rope(&c, 1);
    parse_ok("{\"head_dim\": 96, \"rope_theta\": 1000000.0}", &c);
    check_rope(&c, 1);
    /* Llama 3.1-8B: head_dim 128, factor 8 (all three bands). */
    parse_ok("{\"head_dim\": 128, \"rope_theta\": 500000.0, \"rope_scaling\": {\"rope_type\": \"llama3\","
             " \"factor\": 8.0, \"low_freq_factor\": 1.0, \"high_freq_factor\": 4.0,"
             " \"original_max_position_embeddings\": 8192}}",
             &c);
    check_rope(&c, 7);
    /* Llama 3.2-1B: head_dim 64, factor 32. */
    parse_ok("{\"head_dim\": 64, \"rope_theta\": 500000.0, \"rope_scaling\": {\"rope_type\": \"llama3\","
             " \"factor\": 32.0, \"low_freq_factor\": 1.0, \"high_freq_factor\": 4.0,"
             " \"original_max_position_embeddings\": 8192}}",
             &c);
    check_rope(&c, 7);

    /* Spot values of the plain formula: theta^(-2j/d). */
    parse_ok("{}", &c);
    float f[4];
    model_rope_inv_freq(&c, f);
    ck_assert_float_eq_tol(f[1], 0.1f, 1e-7f);
    ck_assert_float_eq_tol(f[2], 0.01f, 1e-8f);
    ck_assert_float_eq_tol(f[3], 0.001f, 1e-9f);
}
END_TEST

/* Independent double-precision references of transformers'
 * modeling_rope_utils for linear, dynamic (at seq_len = factor *
 * max_position_embeddings, vLLM's fixed base) and yarn, written out from
 * the formulas rather than from model/config.c's float code. */
static double ref_scaled(const model_config *c, int j)
{
    const double d = c->head_dim, theta = c->rope_theta, f = c->rope_factor;
    const double plain = pow(theta, -2.0 * j / d);
    switch (c->rope_scaling) {
    case ROPE_SCALING_LINEAR: return plain / f;
    case ROPE_SCALING_DYNAMIC: {
        const double seq = f * c->max_position_embeddings;
        const double base = theta * pow(f * seq / c->max_position_embeddings - (f - 1.0), d / (d - 2.0));
        return pow(base, -2.0 * j / d);
    }
    case ROPE_SCALING_YARN: {
        const double orig = c->rope_original_max_pos;
        double lo = d * log(orig / (c->rope_beta_fast * 2.0 * M_PI)) / (2.0 * log(theta));
        double hi = d * log(orig / (c->rope_beta_slow * 2.0 * M_PI)) / (2.0 * log(theta));
        if (c->rope_truncate) {
            lo = floor(lo);
            hi = ceil(hi);
        }
        lo = lo < 0 ? 0 : lo;
        hi = hi > d - 1 ? d - 1 : hi;
        if (lo == hi)
            hi += 0.001;
        double ramp = (j - lo) / (hi - lo);
        ramp = ramp < 0 ? 0 : ramp > 1 ? 1 : ramp;
        /* ramp 0: the pair turns often over the original context -> kept
         * (extrapolated); ramp 1: interpolated (/ factor) */
        return plain / f * ramp + plain * (1.0 - ramp);
    }
    default: return plain;
    }
}

/* got[j] within 4 float ulps-ish (4e-6 relative) of the reference; for yarn
 * also that both ends of the ramp were seen when want_ends. */
static void check_scaled(const model_config *c, bool want_ends)
{
    const int half = c->head_dim / 2;
    float *got = inferd_malloc(sizeof(float) * (size_t)half); /* [head_dim / 2] */
    model_rope_inv_freq(c, got);
    int kept = 0, interp = 0;
    for (int j = 0; j < half; j++) {
        const double ref = ref_scaled(c, j), plain = pow((double)c->rope_theta, -2.0 * j / c->head_dim);
        ck_assert_msg(fabs(got[j] - ref) <= 4e-6 * ref, "type %d hd %d j %d: %.9g vs %.9g", c->rope_scaling,
                      c->head_dim, j, got[j], ref);
        kept += fabs(ref - plain) <= 1e-12 * plain;
        interp += fabs(ref - plain / c->rope_factor) <= 1e-12 * plain;
    }
    if (want_ends)
        ck_assert_msg(kept > 0 && interp > 0 && kept + interp < half, "yarn hd %d: %d kept, %d interpolated of %d",
                      c->head_dim, kept, interp, half);
    inferd_free(got);
}

START_TEST(test_rope_scaled_inv_freq)
{
    model_config c;
    /* linear: Vicuna-16k style (factor 4 over 4096) */
    parse_ok("{\"head_dim\": 128, \"max_position_embeddings\": 4096,"
             " \"rope_scaling\": {\"type\": \"linear\", \"factor\": 4.0}}", &c);
    ck_assert_int_eq(c.rope_scaling, ROPE_SCALING_LINEAR);
    ck_assert_float_eq(c.rope_attn_factor, 1.0f);
    ck_assert_int_eq(model_config_context_len(&c), 16384);
    check_scaled(&c, false);
    /* dynamic NTK, both formats, odd head_dim / 2 */
    parse_ok("{\"head_dim\": 64, \"max_position_embeddings\": 2048, \"rope_theta\": 500000.0,"
             " \"rope_scaling\": {\"rope_type\": \"dynamic\", \"factor\": 2.0}}", &c);
    ck_assert_int_eq(c.rope_scaling, ROPE_SCALING_DYNAMIC);
    ck_assert_int_eq(model_config_context_len(&c), 4096);
    check_scaled(&c, false);
    parse_ok("{\"head_dim\": 6, \"num_attention_heads\": 8, \"rope_theta\": \"$DEL\", \"rope_parameters\":"
             " {\"rope_type\": \"dynamic\", \"factor\": 3.5, \"rope_theta\": 10000.0}}", &c);
    check_scaled(&c, false);
    /* dynamic needs head_dim > 2 (exponent d / (d - 2)) */
    char *t = patched("{\"head_dim\": 2, \"rope_scaling\": {\"rope_type\": \"dynamic\", \"factor\": 2.0}}");
    ck_assert_int_eq(model_config_parse(t, "d/config.json", &c), INFERD_ERR_FORMAT);
    ck_assert_ptr_nonnull(strstr(inferd_last_error(), "head_dim > 2"));
    inferd_free(t);
    /* yarn: Qwen3's recommended long-context setting (factor 4 over 32768) */
    parse_ok("{\"head_dim\": 128, \"max_position_embeddings\": 40960, \"rope_theta\": 1000000.0,"
             " \"rope_scaling\": {\"rope_type\": \"yarn\", \"factor\": 4.0,"
             " \"original_max_position_embeddings\": 32768}}", &c);
    ck_assert_int_eq(c.rope_scaling, ROPE_SCALING_YARN);
    ck_assert_int_eq(c.rope_original_max_pos, 32768);
    ck_assert_float_eq(c.rope_beta_fast, 32.0f);
    ck_assert_float_eq(c.rope_beta_slow, 1.0f);
    ck_assert(c.rope_truncate);
    ck_assert_float_eq_tol(c.rope_attn_factor, (float)(0.1 * log(4.0) + 1.0), 1e-7f);
    ck_assert_int_eq(model_config_context_len(&c), 131072);
    check_scaled(&c, true);
    /* yarn: the test model's shape (small original context), no truncation,
     * explicit attention_factor; transformers 5 format */
    parse_ok("{\"head_dim\": 64, \"max_position_embeddings\": 256, \"rope_theta\": \"$DEL\", \"rope_parameters\":"
             " {\"rope_type\": \"yarn\", \"rope_theta\": 10000.0, \"factor\": 4.0,"
             " \"original_max_position_embeddings\": 64, \"truncate\": false, \"beta_fast\": 16, \"beta_slow\": 2,"
             " \"attention_factor\": 0.75}}", &c);
    ck_assert(!c.rope_truncate);
    ck_assert_float_eq(c.rope_beta_fast, 16.0f);
    ck_assert_float_eq(c.rope_beta_slow, 2.0f);
    ck_assert_float_eq(c.rope_attn_factor, 0.75f);
    ck_assert_int_eq(model_config_context_len(&c), 256);
    check_scaled(&c, true);
    /* yarn: DeepSeek's mscale / mscale_all_dim ratio; without original_max
     * the correction range uses max_position_embeddings */
    parse_ok("{\"head_dim\": 64, \"max_position_embeddings\": 4096, \"rope_scaling\": {\"rope_type\": \"yarn\","
             " \"factor\": 40.0, \"mscale\": 0.707, \"mscale_all_dim\": 1.0}}", &c);
    ck_assert_int_eq(c.rope_original_max_pos, 4096);
    const double ms = (0.1 * 0.707 * log(40.0) + 1.0) / (0.1 * 1.0 * log(40.0) + 1.0);
    ck_assert_float_eq_tol(c.rope_attn_factor, (float)ms, 1e-7f);
    ck_assert_int_eq(model_config_context_len(&c), 163840);
    check_scaled(&c, true);
    /* yarn factor 1: no attention factor (HF get_mscale(1) = 1), frequencies unchanged */
    parse_ok("{\"rope_scaling\": {\"rope_type\": \"yarn\", \"factor\": 1.0}}", &c);
    ck_assert_float_eq(c.rope_attn_factor, 1.0f);
    check_scaled(&c, false);
    /* llama3 and default keep max_position_embeddings; a huge factor is capped at 2^24 */
    parse_ok("{\"max_position_embeddings\": 131072, \"rope_scaling\": {\"rope_type\": \"llama3\", \"factor\": 8.0,"
             " \"low_freq_factor\": 1.0, \"high_freq_factor\": 4.0, \"original_max_position_embeddings\": 8192}}",
             &c);
    ck_assert_int_eq(model_config_context_len(&c), 131072);
    ck_assert_float_eq(c.rope_attn_factor, 1.0f);
    parse_ok("{}", &c);
    ck_assert_int_eq(model_config_context_len(&c), 512);
    parse_ok("{\"max_position_embeddings\": 16777216, \"rope_scaling\": {\"rope_type\": \"linear\", \"factor\": 1e6}}",
             &c);
    ck_assert_int_eq(model_config_context_len(&c), 1 << 24);
}
END_TEST

static Suite *config_suite(void)
{
    Suite *s = suite_create("model_config");
    TCase *tc = tcase_create("core");
    tcase_add_test(tc, test_config_table);
    tcase_add_test(tc, test_config_accepted_forms);
    tcase_add_test(tc, test_config_qwen);
    tcase_add_test(tc, test_config_load_generation);
    tcase_add_test(tc, test_config_gen_defaults);
    tcase_add_test(tc, test_config_presets);
    tcase_add_test(tc, test_rope_inv_freq);
    tcase_add_test(tc, test_rope_scaling_table);
    tcase_add_test(tc, test_rope_scaled_inv_freq);
    suite_add_tcase(s, tc);
    /* NOTE: a forked Check test cannot exit 77, so fixture tests are left
     * out (with a message) when the fixtures are absent. */
    if (test_fixtures_dir()) {
        TCase *fx = tcase_create("fixtures");
        tcase_add_test(fx, test_config_stories260k);
        suite_add_tcase(s, fx);
    } else {
        printf("SKIP: fixtures not found (set INFERD_FIXTURES): stories260K config test skipped\n");
    }
    return s;
}

int main(void)
{
    return test_run_suite(config_suite());
}
