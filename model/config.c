/* model/config.c: HF config.json (+ generation_config.json) -> model_config.
 *
 * Parsing is strict where a wrong value would silently give a wrong model:
 * every size is an integer in a sane range (absurd numbers give an error long
 * before anything is allocated from them), the architecture must be one we run
 * (LlamaForCausalLM / MistralForCausalLM, and the Llama-shaped
 * Qwen2ForCausalLM with its q/k/v biases and Qwen3ForCausalLM with its
 * per-head q/k RMSNorm), and every feature outside that family (other RoPE scalings, sliding-window attention shorter than the
 * context, biases, quantization, other activations) is rejected with
 * INFERD_ERR_UNSUPPORTED naming the field. Fields we do not use
 * (initializer_range, use_cache, ...) are ignored. Each error message starts
 * with the file name and names the field, e.g.
 * "m/config.json: field 'num_key_value_heads': 5 does not divide num_attention_heads 32".
 *
 * RoPE frequencies follow HF bit for bit where C allows: the same float32
 * operations in the same order as transformers' rope initialisation
 * (default, linear, yarn, llama3; dynamic as vLLM: see model_rope_inv_freq).
 * generation_config.json gives the eos ids and the sampling defaults
 * (model_gen_defaults), types checked here, ranges where they are applied.
 */
#include "model/config.h"

#include <cjson/cJSON.h>
#include <ctype.h>
#include <math.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>

#include "common/alloc.h"
#include "common/util.h"

/* Bounds: generous for every published Llama/Mistral, small enough that the
 * products computed from them later stay far from int64 overflow. */
#define CFG_MAX_HIDDEN (1 << 17)
#define CFG_MAX_INTER (1 << 20)
#define CFG_MAX_LAYERS 1024
#define CFG_MAX_HEADS 1024
#define CFG_MAX_HEAD_DIM 1024
#define CFG_MAX_VOCAB (1 << 22)
#define CFG_MAX_POS (1 << 24)
#define CFG_MAX_CONFIG_BYTES (16u << 20)

/* A field that is absent or JSON null counts as absent. */
static const cJSON *cfg_field(const cJSON *obj, const char *field)
{
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(obj, field);
    return (v && !cJSON_IsNull(v)) ? v : NULL;
}

/* "scope.field" (or "field") into buf, for error messages. */
static const char *cfg_label(char *buf, size_t n, const char *scope, const char *field)
{
    if (scope)
        snprintf(buf, n, "%s.%s", scope, field);
    else
        snprintf(buf, n, "%s", field);
    return buf;
}

/* Integer field in [lo, hi] of object `obj` (called `scope` in messages, NULL
 * for the top level). Absent: *out = def when !required, else error. */
static inferd_status cfg_int_in(const cJSON *obj, const char *scope, const char *name, const char *fname,
                                bool required, int64_t lo, int64_t hi, int64_t def, int64_t *out)
{
    char field[128];
    const cJSON *v = cfg_field(obj, fname);
    cfg_label(field, sizeof field, scope, fname);
    if (!v) {
        if (required)
            return inferd_set_error(INFERD_ERR_FORMAT, "%s: missing required field '%s'", name, field);
        *out = def;
        return INFERD_OK;
    }
    if (!cJSON_IsNumber(v))
        return inferd_set_error(INFERD_ERR_FORMAT, "%s: field '%s' must be an integer", name, field);
    double d = v->valuedouble;
    if (!isfinite(d) || d != floor(d))
        return inferd_set_error(INFERD_ERR_FORMAT, "%s: field '%s': %g is not an integer", name, field, d);
    if (d < (double)lo || d > (double)hi)
        return inferd_set_error(INFERD_ERR_FORMAT, "%s: field '%s': %.0f out of range [%lld, %lld]", name,
                                field, d, (long long)lo, (long long)hi);
    *out = (int64_t)d;
    return INFERD_OK;
}

/* Finite number field in (lo, hi] (lo exclusive); scope as for cfg_int_in. */
static inferd_status cfg_num_in(const cJSON *obj, const char *scope, const char *name, const char *fname,
                                double lo, double hi, double def, double *out)
{
    char field[128];
    const cJSON *v = cfg_field(obj, fname);
    cfg_label(field, sizeof field, scope, fname);
    if (!v) {
        *out = def;
        return INFERD_OK;
    }
    if (!cJSON_IsNumber(v))
        return inferd_set_error(INFERD_ERR_FORMAT, "%s: field '%s' must be a number", name, field);
    double d = v->valuedouble;
    if (!isfinite(d) || d <= lo || d > hi)
        return inferd_set_error(INFERD_ERR_FORMAT, "%s: field '%s': %g out of range (%g, %g]", name, field, d,
                                lo, hi);
    *out = d;
    return INFERD_OK;
}

static inferd_status cfg_bool(const cJSON *obj, const char *name, const char *field, bool def, bool *out)
{
    const cJSON *v = cfg_field(obj, field);
    if (!v) {
        *out = def;
        return INFERD_OK;
    }
    if (!cJSON_IsBool(v))
        return inferd_set_error(INFERD_ERR_FORMAT, "%s: field '%s' must be true or false", name, field);
    *out = cJSON_IsTrue(v);
    return INFERD_OK;
}

/* Optional string field; *out = NULL when absent. */
static inferd_status cfg_str(const cJSON *obj, const char *name, const char *field, const char **out)
{
    const cJSON *v = cfg_field(obj, field);
    *out = NULL;
    if (!v)
        return INFERD_OK;
    if (!cJSON_IsString(v))
        return inferd_set_error(INFERD_ERR_FORMAT, "%s: field '%s' must be a string", name, field);
    *out = v->valuestring;
    return INFERD_OK;
}

/* The architectures we run, their model_type, and what they add to the
 * Llama block. */
static const struct {
    const char *arch, *model_type;
    bool qkv_bias, qk_norm;
} k_archs[] = {
    {"LlamaForCausalLM", "llama", false, false},
    {"MistralForCausalLM", "mistral", false, false},
    {"Qwen2ForCausalLM", "qwen2", true, false},
    {"Qwen3ForCausalLM", "qwen3", false, true},
};
#define CFG_ARCH_LIST "LlamaForCausalLM, MistralForCausalLM, Qwen2ForCausalLM, Qwen3ForCausalLM"
#define CFG_MODEL_TYPE_LIST "llama, mistral, qwen2, qwen3"

static bool cfg_is(const model_config *c, const char *arch)
{
    return strcmp(c->arch, arch) == 0;
}

/* Architecture from architectures[0], else from model_type. */
static inferd_status cfg_parse_arch(const cJSON *root, const char *name, model_config *c)
{
    const cJSON *archs = cfg_field(root, "architectures");
    int found = -1;
    if (archs) {
        if (!cJSON_IsArray(archs) || cJSON_GetArraySize(archs) < 1 || !cJSON_IsString(cJSON_GetArrayItem(archs, 0)))
            return inferd_set_error(INFERD_ERR_FORMAT, "%s: field 'architectures' must be a non-empty list of strings",
                                    name);
        const char *arch = cJSON_GetArrayItem(archs, 0)->valuestring;
        for (size_t i = 0; i < INFERD_ARRAY_LEN(k_archs); i++)
            if (strcmp(arch, k_archs[i].arch) == 0)
                found = (int)i;
        if (found < 0)
            return inferd_set_error(INFERD_ERR_UNSUPPORTED,
                                    "%s: field 'architectures': '%.64s' is not supported (" CFG_ARCH_LIST ")", name,
                                    arch);
    } else {
        const char *mt = NULL;
        inferd_status st = cfg_str(root, name, "model_type", &mt);
        if (st != INFERD_OK)
            return st;
        if (!mt)
            return inferd_set_error(INFERD_ERR_FORMAT, "%s: missing field 'architectures' (and 'model_type')", name);
        for (size_t i = 0; i < INFERD_ARRAY_LEN(k_archs); i++)
            if (strcmp(mt, k_archs[i].model_type) == 0)
                found = (int)i;
        if (found < 0)
            return inferd_set_error(INFERD_ERR_UNSUPPORTED,
                                    "%s: field 'model_type': '%.64s' is not supported (" CFG_MODEL_TYPE_LIST ")", name,
                                    mt);
    }
    snprintf(c->arch, sizeof c->arch, "%s", k_archs[found].arch);
    c->qkv_bias = k_archs[found].qkv_bias;
    c->qk_norm = k_archs[found].qk_norm;
    return INFERD_OK;
}

/* Sizes, heads and head_dim, with their cross-checks. */
static inferd_status cfg_parse_shape(const cJSON *root, const char *name, model_config *c)
{
    int64_t hid, inter, layers, heads, kv, hd, vocab, maxpos;
    inferd_status st;
    if ((st = cfg_int_in(root, NULL, name, "hidden_size", true, 1, CFG_MAX_HIDDEN, 0, &hid)) ||
        (st = cfg_int_in(root, NULL, name, "intermediate_size", true, 1, CFG_MAX_INTER, 0, &inter)) ||
        (st = cfg_int_in(root, NULL, name, "num_hidden_layers", true, 1, CFG_MAX_LAYERS, 0, &layers)) ||
        (st = cfg_int_in(root, NULL, name, "num_attention_heads", true, 1, CFG_MAX_HEADS, 0, &heads)) ||
        (st = cfg_int_in(root, NULL, name, "num_key_value_heads", false, 1, CFG_MAX_HEADS, heads, &kv)) ||
        (st = cfg_int_in(root, NULL, name, "vocab_size", true, 1, CFG_MAX_VOCAB, 0, &vocab)) ||
        (st = cfg_int_in(root, NULL, name, "max_position_embeddings", false, 1, CFG_MAX_POS,
                         c->qkv_bias || c->qk_norm ? 32768 : 2048, &maxpos)))
        return st; /* the default is transformers' config class default: Qwen2/3 32768, Llama 2048 */
    if (heads % kv != 0)
        return inferd_set_error(INFERD_ERR_FORMAT,
                                "%s: field 'num_key_value_heads': %lld does not divide num_attention_heads %lld", name,
                                (long long)kv, (long long)heads);
    if (cfg_field(root, "head_dim")) {
        if ((st = cfg_int_in(root, NULL, name, "head_dim", true, 1, CFG_MAX_HEAD_DIM, 0, &hd)))
            return st;
    } else if (cfg_is(c, "Qwen3ForCausalLM")) {
        hd = 128; /* Qwen3Config's default: head_dim is independent of hidden / heads */
    } else {
        if (hid % heads != 0)
            return inferd_set_error(INFERD_ERR_FORMAT,
                                    "%s: field 'hidden_size': %lld is not a multiple of num_attention_heads %lld "
                                    "(and no head_dim is given)",
                                    name, (long long)hid, (long long)heads);
        hd = hid / heads;
        if (hd > CFG_MAX_HEAD_DIM)
            return inferd_set_error(INFERD_ERR_FORMAT, "%s: field 'hidden_size': head dim %lld exceeds %d", name,
                                    (long long)hd, CFG_MAX_HEAD_DIM);
    }
    if (hd % 2 != 0)
        return inferd_set_error(INFERD_ERR_FORMAT, "%s: field 'head_dim': %lld%s must be even (RoPE pairs)", name,
                                (long long)hd,
                                cfg_field(root, "head_dim") ? "" : " (hidden_size / num_attention_heads)");
    c->hidden_size = (int32_t)hid;
    c->intermediate_size = (int32_t)inter;
    c->n_layers = (int32_t)layers;
    c->n_heads = (int32_t)heads;
    c->n_kv_heads = (int32_t)kv;
    c->head_dim = (int32_t)hd;
    c->vocab_size = (int32_t)vocab;
    c->max_position_embeddings = (int32_t)maxpos;
    return INFERD_OK;
}

/* The required scaling factor (>= 1) of object `o` for rope type `type`. */
static inferd_status cfg_rope_factor(const cJSON *o, const char *name, const char *what, const char *type,
                                     double *factor)
{
    if (!cfg_field(o, "factor"))
        return inferd_set_error(INFERD_ERR_FORMAT, "%s: field '%s.factor' is required for rope_type %s", name, what,
                                type);
    inferd_status st = cfg_num_in(o, what, name, "factor", 0.0, 1e6, 1.0, factor);
    if (st != INFERD_OK)
        return st;
    if (*factor < 1.0)
        return inferd_set_error(INFERD_ERR_FORMAT, "%s: field '%s.factor': %g must be >= 1", name, what, *factor);
    return INFERD_OK;
}

/* The llama3 parameters of a rope_scaling / rope_parameters object `o`
 * (named `what` in errors). */
static inferd_status cfg_parse_llama3(const cJSON *o, const char *name, const char *what, model_config *c)
{
    static const char *const req[] = {"low_freq_factor", "high_freq_factor", "original_max_position_embeddings"};
    double factor, lo, hi;
    inferd_status st = cfg_rope_factor(o, name, what, "llama3", &factor);
    if (st != INFERD_OK)
        return st;
    for (size_t i = 0; i < INFERD_ARRAY_LEN(req); i++) {
        if (!cfg_field(o, req[i]))
            return inferd_set_error(INFERD_ERR_FORMAT, "%s: field '%s.%s' is required for rope_type llama3", name,
                                    what, req[i]);
    }
    int64_t orig;
    if ((st = cfg_num_in(o, what, name, "low_freq_factor", 0.0, 1e6, 1.0, &lo)) ||
        (st = cfg_num_in(o, what, name, "high_freq_factor", 0.0, 1e6, 1.0, &hi)) ||
        (st = cfg_int_in(o, what, name, "original_max_position_embeddings", true, 1, CFG_MAX_POS, 0, &orig)))
        return st;
    if (hi <= lo)
        return inferd_set_error(INFERD_ERR_FORMAT,
                                "%s: field '%s.high_freq_factor': %g must be greater than low_freq_factor %g", name,
                                what, hi, lo);
    c->rope_scaling = ROPE_SCALING_LLAMA3;
    c->rope_factor = (float)factor;
    c->rope_low_freq_factor = (float)lo;
    c->rope_high_freq_factor = (float)hi;
    c->rope_original_max_pos = (int32_t)orig;
    return INFERD_OK;
}

/* YaRN's cos/sin factor when the config gives none (HF: get_mscale, and
 * DeepSeek's mscale / mscale_all_dim ratio when both are set). */
static double yarn_mscale(double factor, double mscale)
{
    return factor <= 1.0 ? 1.0 : 0.1 * mscale * log(factor) + 1.0;
}

/* The yarn parameters: factor (required), original_max_position_embeddings
 * (default max_position_embeddings), beta_fast / beta_slow (32 / 1),
 * truncate (true), attention_factor, else mscale / mscale_all_dim, else
 * 0.1 ln(factor) + 1. HF treats a 0 beta as "use the default" (`or 32`);
 * we refuse it instead, with the field named.
 * NOTE: transformers 4.4x-4.5x replaced factor by max_position_embeddings /
 * original_max_position_embeddings whenever the latter was given;
 * transformers 5 and vLLM use the explicit factor, and so do we. The two
 * agree when max_position_embeddings = factor * original (as in Qwen's and
 * DeepSeek's own configs and our test-llama-rope-yarn-small). */
static inferd_status cfg_parse_yarn(const cJSON *o, const char *name, const char *what, model_config *c)
{
    double factor, af, bf, bs, ms, msa;
    int64_t orig;
    inferd_status st;
    if ((st = cfg_rope_factor(o, name, what, "yarn", &factor)) ||
        (st = cfg_int_in(o, what, name, "original_max_position_embeddings", false, 1, CFG_MAX_POS,
                         c->max_position_embeddings, &orig)) ||
        (st = cfg_num_in(o, what, name, "attention_factor", 0.0, 1e3, 0.0, &af)) ||
        (st = cfg_num_in(o, what, name, "beta_fast", 0.0, 1e6, 32.0, &bf)) ||
        (st = cfg_num_in(o, what, name, "beta_slow", 0.0, 1e6, 1.0, &bs)) ||
        (st = cfg_num_in(o, what, name, "mscale", 0.0, 1e3, 0.0, &ms)) ||
        (st = cfg_num_in(o, what, name, "mscale_all_dim", 0.0, 1e3, 0.0, &msa)))
        return st;
    const cJSON *tr = cfg_field(o, "truncate");
    if (tr && !cJSON_IsBool(tr))
        return inferd_set_error(INFERD_ERR_FORMAT, "%s: field '%s.truncate' must be true or false", name, what);
    if (af == 0.0)
        af = ms > 0.0 && msa > 0.0 ? yarn_mscale(factor, ms) / yarn_mscale(factor, msa) : yarn_mscale(factor, 1.0);
    c->rope_scaling = ROPE_SCALING_YARN;
    c->rope_factor = (float)factor;
    c->rope_original_max_pos = (int32_t)orig;
    c->rope_beta_fast = (float)bf;
    c->rope_beta_slow = (float)bs;
    c->rope_attn_factor = (float)af;
    c->rope_truncate = !tr || cJSON_IsTrue(tr);
    return INFERD_OK;
}

/* The scaling type of object `o` ("rope_type", or legacy "type"). */
static inferd_status cfg_rope_type(const cJSON *o, const char *name, const char *what, const char **out)
{
    const char *t = NULL;
    inferd_status st = cfg_str(o, name, "rope_type", &t);
    if (st == INFERD_OK && !t)
        st = cfg_str(o, name, "type", &t);
    if (st != INFERD_OK)
        return inferd_set_error(st, "%s: field '%s.rope_type' must be a string", name, what);
    *out = t ? t : "default";
    return INFERD_OK;
}

/* The scaling of object `o` by its type. linear and dynamic need only the
 * factor; dynamic also needs head_dim > 2 (its base exponent is
 * head_dim / (head_dim - 2)). */
static inferd_status cfg_parse_scaling(const cJSON *o, const char *name, const char *what, model_config *c)
{
    const char *type = NULL;
    inferd_status st = cfg_rope_type(o, name, what, &type);
    if (st != INFERD_OK || strcmp(type, "default") == 0)
        return st;
    if (strcmp(type, "llama3") == 0)
        return cfg_parse_llama3(o, name, what, c);
    if (strcmp(type, "yarn") == 0)
        return cfg_parse_yarn(o, name, what, c);
    bool linear = strcmp(type, "linear") == 0;
    if (!linear && strcmp(type, "dynamic") != 0)
        return inferd_set_error(INFERD_ERR_UNSUPPORTED,
                                "%s: field '%s.rope_type': '%.64s' is not supported (default, linear, dynamic, yarn, "
                                "llama3)",
                                name, what, type);
    double factor;
    if ((st = cfg_rope_factor(o, name, what, type, &factor)))
        return st;
    if (!linear && c->head_dim <= 2)
        return inferd_set_error(INFERD_ERR_FORMAT, "%s: field '%s.rope_type': dynamic needs head_dim > 2 (got %d)",
                                name, what, c->head_dim);
    c->rope_scaling = linear ? ROPE_SCALING_LINEAR : ROPE_SCALING_DYNAMIC;
    c->rope_factor = (float)factor;
    return INFERD_OK;
}

/* rope_theta and rope scaling: transformers v5 `rope_parameters`, else the
 * classic top-level `rope_theta` + `rope_scaling`. */
static inferd_status cfg_parse_rope(const cJSON *root, const char *name, model_config *c)
{
    double theta;
    inferd_status st = cfg_num_in(root, NULL, name, "rope_theta", 0.0, 1e12, 10000.0, &theta);
    if (st != INFERD_OK)
        return st;
    c->rope_scaling = ROPE_SCALING_NONE;
    c->rope_factor = 1.0f;
    c->rope_low_freq_factor = 1.0f;
    c->rope_high_freq_factor = 1.0f;
    c->rope_original_max_pos = 0;
    c->rope_beta_fast = 32.0f;
    c->rope_beta_slow = 1.0f;
    c->rope_truncate = true;
    c->rope_attn_factor = 1.0f;

    const cJSON *rp = cfg_field(root, "rope_parameters");
    const cJSON *scaling = NULL;
    const char *what = NULL;
    if (rp) {
        if (!cJSON_IsObject(rp))
            return inferd_set_error(INFERD_ERR_FORMAT, "%s: field 'rope_parameters' must be an object", name);
        if ((st = cfg_num_in(rp, "rope_parameters", name, "rope_theta", 0.0, 1e12, theta, &theta)))
            return st;
        scaling = rp;
        what = "rope_parameters";
    } else if ((scaling = cfg_field(root, "rope_scaling"))) {
        if (!cJSON_IsObject(scaling))
            return inferd_set_error(INFERD_ERR_FORMAT, "%s: field 'rope_scaling' must be null or an object", name);
        what = "rope_scaling";
    }
    c->rope_theta = (float)theta;
    return scaling ? cfg_parse_scaling(scaling, name, what, c) : INFERD_OK;
}

/* eos_token_id: int, list of ints or null (keeps *n = 0). */
static inferd_status cfg_parse_eos(const cJSON *obj, const char *name, int32_t vocab, int32_t *ids, int *n)
{
    const cJSON *v = cfg_field(obj, "eos_token_id");
    *n = 0;
    if (!v)
        return INFERD_OK;
    int count = cJSON_IsArray(v) ? cJSON_GetArraySize(v) : 1;
    if (!cJSON_IsArray(v) && !cJSON_IsNumber(v))
        return inferd_set_error(INFERD_ERR_FORMAT, "%s: field 'eos_token_id' must be an integer or a list of integers",
                                name);
    if (count > MODEL_MAX_EOS)
        return inferd_set_error(INFERD_ERR_UNSUPPORTED, "%s: field 'eos_token_id': %d ids (at most %d supported)", name,
                                count, MODEL_MAX_EOS);
    for (int i = 0; i < count; i++) {
        const cJSON *e = cJSON_IsArray(v) ? cJSON_GetArrayItem(v, i) : v;
        double d = cJSON_IsNumber(e) ? e->valuedouble : -1.0;
        if (!cJSON_IsNumber(e) || d != floor(d) || d < 0 || d >= (double)vocab)
            return inferd_set_error(INFERD_ERR_FORMAT,
                                    "%s: field 'eos_token_id': item %d is not a token id in [0, %d)", name, i, vocab);
        ids[i] = (int32_t)d;
    }
    *n = count;
    return INFERD_OK;
}

/* Sliding-window attention: refused unless no layer uses a window shorter
 * than the context. HF semantics: use_sliding_window false (Qwen2/3) turns
 * it off whatever sliding_window says; layer_types (transformers 5) names
 * each layer's attention; without it every layer slides (Mistral), or, for
 * Qwen2/3, the layers from max_window_layers on. */
static inferd_status cfg_check_sliding(const cJSON *root, const char *name, const model_config *c)
{
    bool use_sw = true;
    inferd_status st = cfg_bool(root, name, "use_sliding_window", true, &use_sw);
    if (st != INFERD_OK)
        return st;
    const cJSON *lt = cfg_field(root, "layer_types");
    int n_sliding = c->n_layers;
    if (lt) {
        if (!cJSON_IsArray(lt) || cJSON_GetArraySize(lt) != c->n_layers)
            return inferd_set_error(INFERD_ERR_FORMAT,
                                    "%s: field 'layer_types' must be a list of num_hidden_layers (%d) strings", name,
                                    c->n_layers);
        n_sliding = 0;
        for (int i = 0; i < c->n_layers; i++) {
            const cJSON *t = cJSON_GetArrayItem(lt, i);
            if (!cJSON_IsString(t))
                return inferd_set_error(INFERD_ERR_FORMAT, "%s: field 'layer_types': item %d is not a string", name, i);
            if (strcmp(t->valuestring, "sliding_attention") == 0)
                n_sliding++;
            else if (strcmp(t->valuestring, "full_attention") != 0)
                return inferd_set_error(INFERD_ERR_UNSUPPORTED,
                                        "%s: field 'layer_types': item %d '%.64s' is not supported "
                                        "(full_attention, sliding_attention)",
                                        name, i, t->valuestring);
        }
    } else if (c->qkv_bias || c->qk_norm) {
        int64_t mwl;
        if ((st = cfg_int_in(root, NULL, name, "max_window_layers", false, 0, CFG_MAX_LAYERS, 0, &mwl)))
            return st;
        n_sliding = c->n_layers - (int)INFERD_MIN(mwl, (int64_t)c->n_layers);
    }
    const cJSON *sw = cfg_field(root, "sliding_window");
    if (!sw)
        return INFERD_OK;
    if (!cJSON_IsNumber(sw) || sw->valuedouble != floor(sw->valuedouble))
        return inferd_set_error(INFERD_ERR_FORMAT, "%s: field 'sliding_window' must be null or an integer", name);
    if (!use_sw || n_sliding == 0)
        return INFERD_OK;
    if (sw->valuedouble < (double)c->max_position_embeddings)
        return inferd_set_error(INFERD_ERR_UNSUPPORTED,
                                "%s: field 'sliding_window': %g < max_position_embeddings %d on %d of %d layers "
                                "(sliding-window attention is not supported)",
                                name, sw->valuedouble, c->max_position_embeddings, n_sliding, c->n_layers);
    return INFERD_OK;
}

/* Fields naming features outside the Llama family we run. Qwen2's q/k/v
 * biases are part of its architecture (HF hard-codes them, whatever
 * attention_bias says; o_proj has none); elsewhere attention_bias also puts
 * a bias on o_proj, which we do not run. */
static inferd_status cfg_check_unsupported(const cJSON *root, const char *name, const model_config *c)
{
    static const char *const no_bias[] = {"attention_bias", "mlp_bias"};
    for (size_t i = 0; i < INFERD_ARRAY_LEN(no_bias); i++) {
        bool b = false;
        inferd_status st = cfg_bool(root, name, no_bias[i], false, &b);
        if (st != INFERD_OK)
            return st;
        if (b && i == 0 && cfg_is(c, "Qwen2ForCausalLM"))
            continue;
        if (b)
            return inferd_set_error(INFERD_ERR_UNSUPPORTED, "%s: field '%s': biases are not supported for %s%s", name,
                                    no_bias[i], c->arch,
                                    i == 0 ? " (o_proj bias; only Qwen2's built-in q/k/v biases are)" : "");
    }
    const char *act = NULL;
    inferd_status st = cfg_str(root, name, "hidden_act", &act);
    if (st != INFERD_OK)
        return st;
    if (act && strcmp(act, "silu") != 0)
        return inferd_set_error(INFERD_ERR_UNSUPPORTED, "%s: field 'hidden_act': '%.64s' is not supported (silu)",
                                name, act);
    if (cfg_field(root, "quantization_config"))
        return inferd_set_error(INFERD_ERR_UNSUPPORTED, "%s: field 'quantization_config': quantized models are not "
                                "supported", name);
    return cfg_check_sliding(root, name, c);
}

/* The RoPE table the parameters give must be finite and positive, as must
 * yarn's attention factor: a degenerate rope_theta (1 with yarn, whose
 * correction range divides by log(theta); found by fuzz_config) gives NaN,
 * which would reach every attention score. Refused at load, naming the
 * fields. */
static inferd_status cfg_check_rope_table(const char *name, const model_config *c)
{
    const int half = c->head_dim / 2;
    if (half <= 0)
        return INFERD_OK; /* head_dim was refused already */
    float *f = inferd_malloc(sizeof(float) * (size_t)half);
    model_rope_inv_freq(c, f);
    int bad = -1;
    for (int j = 0; j < half && bad < 0; j++)
        if (!(isfinite(f[j]) && f[j] > 0.0f))
            bad = j;
    const double v = bad >= 0 ? (double)f[bad] : 0.0;
    inferd_free(f);
    if (bad >= 0)
        return inferd_set_error(INFERD_ERR_FORMAT,
                                "%s: the rope parameters (rope_theta %g and the scaling fields) give inv_freq[%d] = "
                                "%g; a finite positive frequency is required",
                                name, (double)c->rope_theta, bad, v);
    if (!(isfinite(c->rope_attn_factor) && c->rope_attn_factor > 0.0f))
        return inferd_set_error(INFERD_ERR_FORMAT, "%s: the rope attention factor is %g; it must be finite and > 0",
                                name, (double)c->rope_attn_factor);
    return INFERD_OK;
}

/* Everything but the architecture and shape. */
static inferd_status cfg_parse_rest(const cJSON *root, const char *name, model_config *c)
{
    double eps = 0.0;
    int64_t bos;
    inferd_status st;
    if ((st = cfg_num_in(root, NULL, name, "rms_norm_eps", 0.0, 1.0, 1e-6, &eps)) ||
        (st = cfg_parse_rope(root, name, c)) || (st = cfg_check_rope_table(name, c)) ||
        (st = cfg_bool(root, name, "tie_word_embeddings", false, &c->tie_word_embeddings)) ||
        (st = cfg_int_in(root, NULL, name, "bos_token_id", false, 0, c->vocab_size - 1, -1, &bos)) ||
        (st = cfg_parse_eos(root, name, c->vocab_size, c->eos_ids, &c->n_eos)) ||
        (st = cfg_check_unsupported(root, name, c)))
        return st;
    c->rms_norm_eps = (float)eps;
    c->bos_id = (int32_t)bos;

    const char *field = cfg_field(root, "torch_dtype") ? "torch_dtype" : "dtype";
    const char *dt = NULL;
    if ((st = cfg_str(root, name, field, &dt)))
        return st;
    c->torch_dtype[0] = '\0';
    if (dt) {
        if (strcmp(dt, "float32") != 0 && strcmp(dt, "bfloat16") != 0 && strcmp(dt, "float16") != 0)
            return inferd_set_error(INFERD_ERR_UNSUPPORTED,
                                    "%s: field '%s': '%.32s' is not supported (float32, bfloat16, float16)", name,
                                    field, dt);
        snprintf(c->torch_dtype, sizeof c->torch_dtype, "%s", dt);
    }
    return INFERD_OK;
}

/* Parse JSON text into a cJSON object, or an error naming `name`. */
static inferd_status cfg_parse_object(const char *json, const char *name, cJSON **out)
{
    cJSON *root = cJSON_Parse(json);
    if (!root)
        return inferd_set_error(INFERD_ERR_FORMAT, "%s: invalid JSON", name);
    if (!cJSON_IsObject(root)) {
        cJSON_Delete(root);
        return inferd_set_error(INFERD_ERR_FORMAT, "%s: top level is not a JSON object", name);
    }
    *out = root;
    return INFERD_OK;
}

inferd_status model_config_parse(const char *json, const char *name, model_config *cfg)
{
    if (!json || !cfg)
        return inferd_set_error(INFERD_ERR_INVALID_ARG, "model_config_parse: NULL argument");
    if (!name)
        name = "config.json";
    cJSON *root = NULL;
    inferd_status st = cfg_parse_object(json, name, &root);
    if (st != INFERD_OK)
        return st;
    model_config c;
    memset(&c, 0, sizeof c);
    if (!(st = cfg_parse_arch(root, name, &c)) && !(st = cfg_parse_shape(root, name, &c)))
        st = cfg_parse_rest(root, name, &c);
    cJSON_Delete(root);
    if (st == INFERD_OK)
        *cfg = c;
    return st;
}

/* generation_config.json fields vLLM reads as sampling defaults, their
 * sampling-table keys, whether they are integers, and HF GenerationConfig's
 * own default: vLLM takes only the values that differ from it
 * (GenerationConfig.to_diff_dict), so e.g. "top_k": 50 changes nothing. */
static const struct {
    const char *field, *key;
    bool integer;
    double hf_default; /* NAN: HF has none (None) */
} k_gen_fields[] = {
    {"temperature", "temperature", false, 1.0},   {"top_p", "top_p", false, 1.0},
    {"top_k", "top_k", true, 50.0},               {"min_p", "min_p", false, NAN},
    {"repetition_penalty", "repetition_penalty", false, 1.0}, {"max_new_tokens", "max_tokens", true, NAN},
};

/* The sampling defaults of a parsed generation_config.json. Types only:
 * the ranges are the sampling table's, checked where they are applied. */
static inferd_status cfg_parse_gen_defaults(const cJSON *root, const char *name, model_gen_defaults *out)
{
    model_gen_defaults g = {.n = 0};
    for (size_t i = 0; i < INFERD_ARRAY_LEN(k_gen_fields); i++) {
        const cJSON *v = cfg_field(root, k_gen_fields[i].field);
        if (!v)
            continue;
        if (!cJSON_IsNumber(v) || !isfinite(v->valuedouble) ||
            (k_gen_fields[i].integer && v->valuedouble != floor(v->valuedouble)))
            return inferd_set_error(INFERD_ERR_FORMAT, "%s: field '%s' must be %s", name, k_gen_fields[i].field,
                                    k_gen_fields[i].integer ? "an integer" : "a number");
        if (v->valuedouble == k_gen_fields[i].hf_default)
            continue;
        g.v[g.n].key = k_gen_fields[i].key;
        g.v[g.n].value = v->valuedouble;
        g.n++;
    }
    *out = g;
    return INFERD_OK;
}

/* Read and parse `path` as a JSON object. */
static inferd_status cfg_read_object(const char *path, cJSON **out)
{
    char *text = NULL;
    inferd_status st = util_read_file(path, CFG_MAX_CONFIG_BYTES, &text, NULL);
    if (st != INFERD_OK)
        return st;
    st = cfg_parse_object(text, path, out);
    inferd_free(text);
    return st;
}

/* Apply generation_config.json's eos ids (when it has any) and sampling
 * defaults to c. */
static inferd_status cfg_apply_generation(const char *path, model_config *c)
{
    cJSON *root = NULL;
    inferd_status st = cfg_read_object(path, &root);
    if (st != INFERD_OK)
        return st;
    int32_t ids[MODEL_MAX_EOS];
    int n = 0;
    st = cfg_parse_eos(root, path, c->vocab_size, ids, &n);
    if (st == INFERD_OK)
        st = cfg_parse_gen_defaults(root, path, &c->gen);
    cJSON_Delete(root);
    if (st == INFERD_OK && n > 0) {
        memcpy(c->eos_ids, ids, sizeof ids);
        c->n_eos = n;
    }
    return st;
}

inferd_status model_gen_defaults_load(const char *dir, model_gen_defaults *out)
{
    if (!dir || !out)
        return inferd_set_error(INFERD_ERR_INVALID_ARG, "model_gen_defaults_load: NULL argument");
    char *path = util_path_join(dir, "generation_config.json");
    inferd_status st = INFERD_OK;
    out->n = 0;
    if (util_file_exists(path)) {
        cJSON *root = NULL;
        if ((st = cfg_read_object(path, &root)) == INFERD_OK)
            st = cfg_parse_gen_defaults(root, path, out);
        cJSON_Delete(root);
    }
    inferd_free(path);
    return st;
}

/* "org/name" with hub-safe characters (letters, digits, '-', '_', '.'),
 * neither part empty nor starting with '.': what `vllm serve` would fetch
 * from the Hugging Face hub. */
static bool looks_like_hub_id(const char *s)
{
    const char *slash = strchr(s, '/');
    if (!slash || slash == s || !slash[1] || strchr(slash + 1, '/') || s[0] == '.' || slash[1] == '.')
        return false;
    for (const char *p = s; *p; p++)
        if (p != slash && !isalnum((unsigned char)*p) && *p != '-' && *p != '_' && *p != '.')
            return false;
    return true;
}

inferd_status model_dir_check(const char *dir)
{
    struct stat st;
    if (!dir || !*dir)
        return inferd_set_error(INFERD_ERR_INVALID_ARG, "no model directory given");
    if (stat(dir, &st) != 0) {
        if (looks_like_hub_id(dir))
            return inferd_set_error(INFERD_ERR_NOT_FOUND,
                                    "model '%s' is not a local directory. It looks like a Hugging Face hub id, "
                                    "but inferd does not download models: fetch it first, e.g. "
                                    "`huggingface-cli download %s --local-dir models/%s` (or `git clone "
                                    "https://huggingface.co/%s`), then pass that directory",
                                    dir, dir, strchr(dir, '/') + 1, dir);
        return inferd_set_error(INFERD_ERR_NOT_FOUND,
                                "model directory '%s' does not exist (inferd serves a local Hugging Face model "
                                "directory: config.json, *.safetensors, tokenizer.json)",
                                dir);
    }
    if (!S_ISDIR(st.st_mode))
        return inferd_set_error(INFERD_ERR_INVALID_ARG,
                                "model '%s' is a file, not a directory (give the Hugging Face model directory that "
                                "holds config.json, *.safetensors and tokenizer.json)",
                                dir);
    return INFERD_OK;
}

inferd_status model_config_load(const char *dir, model_config *cfg)
{
    if (!dir || !cfg)
        return inferd_set_error(INFERD_ERR_INVALID_ARG, "model_config_load: NULL argument");
    inferd_status st = model_dir_check(dir);
    if (st != INFERD_OK)
        return st;
    char *path = util_path_join(dir, "config.json");
    char *text = NULL;
    st = util_read_file(path, CFG_MAX_CONFIG_BYTES, &text, NULL);
    if (st != INFERD_OK) {
        if (!util_file_exists(path))
            st = inferd_set_error(INFERD_ERR_NOT_FOUND,
                                  "%s: not found (a Hugging Face model directory has config.json, "
                                  "*.safetensors and tokenizer.json)",
                                  path);
        inferd_free(path);
        return st;
    }
    model_config c;
    st = model_config_parse(text, path, &c);
    inferd_free(text);
    inferd_free(path);
    if (st != INFERD_OK)
        return st;
    char *gen = util_path_join(dir, "generation_config.json");
    if (util_file_exists(gen))
        st = cfg_apply_generation(gen, &c);
    inferd_free(gen);
    if (st == INFERD_OK)
        *cfg = c;
    return st;
}

/* theta^(-2j/d) for j < d/2 in float32: HF's
 * 1.0 / (base ** (torch.arange(0, dim, 2).float() / dim)). */
static void rope_plain(float base, int head_dim, float *inv_freq)
{
    const float dim = (float)head_dim;
    for (int j = 0; j < head_dim / 2; j++)
        inv_freq[j] = 1.0f / powf(base, (float)(2 * j) / dim);
}

/* Llama 3.1's three bands (HF _compute_llama3_parameters): long waves
 * divided by factor, short ones kept, a smooth mix between. */
static void rope_llama3(const model_config *cfg, float *inv_freq)
{
    const double orig = (double)cfg->rope_original_max_pos;
    const double lo = cfg->rope_low_freq_factor, hi = cfg->rope_high_freq_factor;
    const float factor = cfg->rope_factor;
    const float low_freq_wavelen = (float)(orig / lo);
    const float high_freq_wavelen = (float)(orig / hi);
    const float two_pi = (float)(2.0 * M_PI);
    for (int j = 0; j < cfg->head_dim / 2; j++) {
        const float f = inv_freq[j];
        const float wavelen = two_pi / f;
        if (wavelen > low_freq_wavelen) {
            inv_freq[j] = f / factor;
        } else if (!(wavelen < high_freq_wavelen)) {
            const float smooth = ((float)orig / wavelen - (float)lo) / (float)(hi - lo);
            inv_freq[j] = (1.0f - smooth) * f / factor + smooth * f;
        }
    }
}

/* YaRN (HF _compute_yarn_parameters): the pairs that turn fewer than
 * beta_slow times over the original context are interpolated (/ factor),
 * those that turn more than beta_fast times are kept, with a linear ramp
 * over the pair index between. The correction range is computed in double
 * (Python math), the ramp and the mix in float32 (torch). */
static void rope_yarn(const model_config *cfg, float *inv_freq)
{
    const int dim = cfg->head_dim, half = dim / 2;
    const double base = cfg->rope_theta, orig = cfg->rope_original_max_pos;
    const float factor = cfg->rope_factor;
    double low = dim * log(orig / (cfg->rope_beta_fast * 2.0 * M_PI)) / (2.0 * log(base));
    double high = dim * log(orig / (cfg->rope_beta_slow * 2.0 * M_PI)) / (2.0 * log(base));
    if (cfg->rope_truncate) {
        low = floor(low);
        high = ceil(high);
    }
    low = INFERD_MAX(low, 0.0);
    high = INFERD_MIN(high, (double)(dim - 1));
    if (low == high)
        high += 0.001; /* HF: prevent a zero-width ramp */
    for (int j = 0; j < half; j++) {
        const float pos_freq = powf(cfg->rope_theta, (float)(2 * j) / (float)dim); /* HF pos_freqs */
        const float extrap = 1.0f / pos_freq, interp = 1.0f / (factor * pos_freq);
        float ramp = ((float)j - (float)low) / (float)(high - low);
        ramp = ramp < 0.0f ? 0.0f : ramp > 1.0f ? 1.0f : ramp;
        const float keep = 1.0f - ramp; /* HF's inv_freq_extrapolation_factor */
        inv_freq[j] = interp * (1.0f - keep) + extrap * keep;
    }
}

/* NOTE: the float32 operation order mirrors transformers'
 * modeling_rope_utils (tensor ops on float32 with Python scalars rounded
 * to float32), so that our RoPE tables match HF's to the last bit or ulp
 * of powf.
 *
 * dynamic (NTK) follows vLLM, not HF. HF keeps plain RoPE until a sequence
 * passes max_position_embeddings and then recomputes the base from that
 * sequence's length at every step (and back when a shorter one comes).
 * With a paged KV cache that cannot be right: keys are cached already
 * rotated, blocks are shared between sequences by prefix caching, and a
 * batch mixes lengths, so the frequencies of a position must not depend on
 * which sequence it is in or how long that grows. vLLM's
 * DynamicNTKScalingRotaryEmbedding fixes the base once at the longest
 * context, max_position_embeddings * factor:
 *   base' = base * (factor * factor - factor + 1) ^ (d / (d - 2)),
 * which is HF's formula evaluated at seq_len = factor * max_position_embeddings.
 * Short prompts therefore see different frequencies than in HF (which
 * would use the plain base for them); scripts/hf_reference.py compares
 * against HF with that base. */
void model_rope_inv_freq(const model_config *cfg, float *inv_freq)
{
    float base = cfg->rope_theta;
    if (cfg->rope_scaling == ROPE_SCALING_DYNAMIC) {
        const double f = cfg->rope_factor, d = cfg->head_dim;
        base = (float)((double)cfg->rope_theta * pow(f * f - (f - 1.0), d / (d - 2.0)));
    }
    rope_plain(base, cfg->head_dim, inv_freq);
    switch (cfg->rope_scaling) {
    case ROPE_SCALING_LLAMA3: rope_llama3(cfg, inv_freq); break;
    case ROPE_SCALING_YARN: rope_yarn(cfg, inv_freq); break; /* recomputes from pos_freqs */
    case ROPE_SCALING_LINEAR:
        for (int j = 0; j < cfg->head_dim / 2; j++)
            inv_freq[j] /= cfg->rope_factor;
        break;
    case ROPE_SCALING_NONE:
    case ROPE_SCALING_DYNAMIC: break;
    }
}

int32_t model_config_context_len(const model_config *cfg)
{
    double len = cfg->max_position_embeddings;
    if (cfg->rope_scaling == ROPE_SCALING_LINEAR || cfg->rope_scaling == ROPE_SCALING_DYNAMIC)
        len *= cfg->rope_factor;
    else if (cfg->rope_scaling == ROPE_SCALING_YARN)
        len = (double)cfg->rope_original_max_pos * cfg->rope_factor;
    len = floor(len);
    return len > (double)CFG_MAX_POS ? CFG_MAX_POS : (int32_t)len;
}
