/* server/srv_openai.c: request parsing/validation for the OpenAI endpoints.
 *
 * Strict where OpenAI is strict (types, ranges), lenient
 * where it is lenient (unknown fields ignored, null means "not given").
 * Every failure names the offending field in `param` and in the message.
 * The JSON parser is cJSON with its nesting limit (CJSON_NESTING_LIMIT, 1000),
 * so deeply nested bodies fail as malformed JSON instead of recursing deep.
 * Chat messages and the other chat template inputs are parsed by
 * srv_openai_chat.c, response builders live in srv_openai_resp.c, and
 * /v1/responses bodies are parsed by srv_responses.c; all three read fields
 * with the srv_oa_* readers at the top of this file (srv_openai_int.h), so
 * a type or range error reads the same on every endpoint.
 *
 * Design choice: the adapter checks JSON types and API shapes only; every
 * sampling range lives in one table (scheduler/params.c) that the CLI and
 * the engine use too, so a value means the same everywhere. The cost is
 * two passes: the row sets each field, then the whole-struct validator
 * checks the cross-field rules once everything is parsed.
 * Ownership: a srv_request owns every string and array it holds (copied
 * out of the cJSON tree, which is freed before srv_request_parse returns);
 * srv_request_free releases them, and is safe on a half-filled request.
 * Threads: pure functions of their inputs, called on event-loop threads.
 */
#include "server/srv_openai.h"
#include "server/srv_openai_int.h"

#include <math.h>
#include <stdio.h>
#include <string.h>

#include "common/alloc.h"
#include "common/util.h"
#include "server/srv_util.h"

/* ---- typed field access (shared: srv_openai_int.h) -------------------------- */

/* NULL when absent or JSON null. */
const cJSON *srv_oa_field(const cJSON *obj, const char *name)
{
    const cJSON *it = cJSON_GetObjectItemCaseSensitive(obj, name);
    return it && !cJSON_IsNull(it) ? it : NULL;
}

/* An integer field in [lo, hi]. cJSON stores numbers as double, so
 * "integer" means a double with no fraction; the 9.2e18 bound keeps the
 * int64 cast below defined (casting an out-of-range double is UB). */
bool srv_oa_get_int(const cJSON *obj, const char *name, int64_t lo, int64_t hi, int64_t *out, bool *present,
                    srv_error *err)
{
    const cJSON *it = srv_oa_field(obj, name);
    *present = it != NULL;
    if (!it)
        return true;
    if (!cJSON_IsNumber(it) || it->valuedouble != floor(it->valuedouble) || fabs(it->valuedouble) > 9.2e18)
        return srv_error_set(err, SRV_ERR_INVALID, name, "'%s' must be an integer", name);
    double v = it->valuedouble;
    if (v < (double)lo || v > (double)hi)
        return srv_error_set(err, SRV_ERR_INVALID, name, "'%s' must be between %lld and %lld, got %.0f", name,
                             (long long)lo, (long long)hi, v);
    *out = (int64_t)v;
    return true;
}

/* A JSON boolean (0 and 1 are refused). *out untouched when absent, so the
 * caller's default stands. */
bool srv_oa_get_bool(const cJSON *obj, const char *name, bool *out, srv_error *err)
{
    const cJSON *it = srv_oa_field(obj, name);
    if (!it)
        return true;
    if (!cJSON_IsBool(it))
        return srv_error_set(err, SRV_ERR_INVALID, name, "'%s' must be a boolean", name);
    *out = cJSON_IsTrue(it);
    return true;
}

/* A valid UTF-8 string field; *out borrowed from the JSON tree or NULL. */
bool srv_oa_get_str(const cJSON *obj, const char *name, const char **out, srv_error *err)
{
    const cJSON *it = srv_oa_field(obj, name);
    *out = NULL;
    if (!it)
        return true;
    if (!cJSON_IsString(it))
        return srv_error_set(err, SRV_ERR_INVALID, name, "'%s' must be a string", name);
    if (!util_utf8_valid(it->valuestring, strlen(it->valuestring)))
        return srv_error_set(err, SRV_ERR_INVALID, name, "'%s' is not valid UTF-8", name);
    *out = it->valuestring;
    return true;
}

/* Whether the JSON text holds a \u0000 escape. Walks escapes pairwise, so
 * "\\u0000" (an escaped backslash, then text) is not one. cJSON would end
 * the string at the NUL and silently drop the rest of it. */
static bool has_nul_escape(const char *s, size_t n)
{
    for (size_t i = 0; i + 1 < n; i++) {
        if (s[i] != '\\')
            continue;
        if (s[i + 1] == 'u' && i + 5 < n && memcmp(s + i + 2, "0000", 4) == 0)
            return true;
        i++; /* skip the escaped character */
    }
    return false;
}

/* body (not NUL-terminated, len bytes) into a JSON object. *root is the
 * caller's to cJSON_Delete on success, NULL on failure. Trailing data
 * after the value is an error ("{}x"): cJSON's require_null_terminated
 * cannot be used on a body without a NUL, so the tail is checked by hand. */
bool srv_oa_parse_root(const char *body, size_t len, cJSON **root, srv_error *err)
{
    *root = NULL;
    if (len == 0 || srv_is_blank(body, len))
        return srv_error_set(err, SRV_ERR_INVALID, NULL, "request body is empty; expected a JSON object");
    if (has_nul_escape(body, len))
        return srv_error_set(err, SRV_ERR_INVALID, NULL,
                             "JSON strings may not contain U+0000 (\\u0000): it would truncate the string");
    const char *end = NULL;
    cJSON *j = cJSON_ParseWithLengthOpts(body, len, &end, false);
    if (!j) {
        size_t pos = end && end >= body && end <= body + len ? (size_t)(end - body) : 0;
        return srv_error_set(err, SRV_ERR_INVALID, NULL,
                             "malformed JSON in request body near byte %zu (or nesting deeper than %d)", pos,
                             CJSON_NESTING_LIMIT);
    }
    size_t used = (size_t)(end - body);
    if (!srv_is_blank(end, len - used)) {
        cJSON_Delete(j);
        return srv_error_set(err, SRV_ERR_INVALID, NULL, "malformed JSON: trailing data after byte %zu",
                             used);
    }
    if (!cJSON_IsObject(j)) {
        cJSON_Delete(j);
        return srv_error_set(err, SRV_ERR_INVALID, NULL, "request body must be a JSON object");
    }
    *root = j;
    return true;
}

/* "model" is optional (clients of single-model servers often omit it);
 * when given it must name the served model: 404 model_not_found, OpenAI's
 * answer, not a silent substitution. */
bool srv_oa_check_model(const cJSON *root, const srv_parse_limits *lim, char **model_out, srv_error *err)
{
    const char *name;
    if (!srv_oa_get_str(root, "model", &name, err))
        return false;
    if (!name)
        return true;
    if (lim->served_model_name && strcmp(name, lim->served_model_name) != 0)
        return srv_error_set(err, SRV_ERR_MODEL_NOT_FOUND, "model",
                             "The model '%.128s' does not exist (this server serves '%.128s')", name,
                             lim->served_model_name);
    *model_out = inferd_strdup(name);
    return true;
}

/* One token id array. param is the field errors name; label the quoted
 * element for messages ("'prompt'" or "'prompt'[2]"). *ids is heap on
 * success, caller-owned. Non-numbers read as -1.5, which fails the
 * integrality test and so gets the "integer" message. The array length is
 * bounded by the body size limit, not here. */
static bool parse_ids(const cJSON *arr, const char *param, const char *label, int vocab, int32_t **ids,
                      int *n, srv_error *err)
{
    int cnt = cJSON_GetArraySize(arr);
    if (cnt == 0)
        return srv_error_set(err, SRV_ERR_INVALID, param, "%s must not be empty", label);
    int32_t *v = inferd_malloc(sizeof(int32_t) * (size_t)cnt);
    int i = 0;
    const cJSON *it;
    cJSON_ArrayForEach(it, arr)
    {
        double d = cJSON_IsNumber(it) ? it->valuedouble : -1.5;
        if (d != floor(d)) {
            inferd_free(v);
            return srv_error_set(err, SRV_ERR_INVALID, param, "%s[%d] must be an integer token id", label, i);
        }
        if (d < 0 || d >= vocab) {
            inferd_free(v);
            return srv_error_set(err, SRV_ERR_INVALID, param,
                                 "%s[%d]: token id %.0f is outside the vocabulary [0, %d)", label, i, d,
                                 vocab);
        }
        v[i++] = (int32_t)d;
    }
    *ids = v;
    *n = cnt;
    return true;
}

/* Every element a number (integrality and range are parse_ids' job). */
static bool is_id_array(const cJSON *arr)
{
    const cJSON *it;
    cJSON_ArrayForEach(it, arr)
    {
        if (!cJSON_IsNumber(it))
            return false;
    }
    return true;
}

/* cJSON does not validate UTF-8 in strings, hence the check. A
 * whitespace-only prompt is refused: it encodes to tokens that carry no
 * request, almost always a client bug. label as in parse_ids. */
static bool set_text_prompt(const char *s, const char *param, const char *label, srv_prompt *p,
                            srv_error *err)
{
    size_t n = strlen(s);
    if (!util_utf8_valid(s, n))
        return srv_error_set(err, SRV_ERR_INVALID, param, "%s is not valid UTF-8", label);
    if (n == 0)
        return srv_error_set(err, SRV_ERR_INVALID, param, "%s must not be empty", label);
    if (srv_is_blank(s, n))
        return srv_error_set(err, SRV_ERR_INVALID, param, "%s must contain non-whitespace text", label);
    p->text = inferd_strdup(s);
    p->len = n;
    return true;
}

/* One element of a batched prompt array: a string or an array of ids. */
static bool parse_prompt_item(const cJSON *it, int i, const srv_parse_limits *lim, srv_prompt *p,
                              srv_error *err)
{
    char label[32];
    snprintf(label, sizeof label, "'prompt'[%d]", i);
    if (cJSON_IsString(it))
        return set_text_prompt(it->valuestring, "prompt", label, p, err);
    if (cJSON_IsArray(it) && is_id_array(it))
        return parse_ids(it, "prompt", label, lim->vocab_size, &p->ids, &p->n_ids, err);
    return srv_error_set(err, SRV_ERR_INVALID, "prompt", "%s must be a string or an array of token ids",
                         label);
}

/* The completion prompt in OpenAI's four shapes: "text", [ids], and the
 * batches ["text", ...] and [[ids], ...] (strings and id arrays may mix).
 * A batch gives one choice per prompt, in order; it is refused as a whole
 * when any element is bad, the message naming the element. The count is
 * checked before any element is copied, so a huge array costs nothing. */
static bool parse_prompt(const cJSON *root, const srv_parse_limits *lim, srv_request *r, srv_error *err)
{
    const cJSON *p = srv_oa_field(root, "prompt");
    if (!p)
        return srv_error_set(err, SRV_ERR_INVALID, "prompt", "'prompt' is required");
    if (!cJSON_IsString(p) && !cJSON_IsArray(p))
        return srv_error_set(err, SRV_ERR_INVALID, "prompt",
                             "'prompt' must be a string, an array of token ids, or an array of those");
    int cnt = cJSON_IsString(p) || is_id_array(p) ? 1 : cJSON_GetArraySize(p);
    if (cJSON_IsArray(p) && cJSON_GetArraySize(p) == 0)
        return srv_error_set(err, SRV_ERR_INVALID, "prompt", "'prompt' must not be empty");
    if (cnt > SRV_MAX_PROMPTS)
        return srv_error_set(err, SRV_ERR_INVALID, "prompt",
                             "'prompt' holds %d prompts; at most %d per request", cnt, SRV_MAX_PROMPTS);
    r->prompts = inferd_calloc((size_t)cnt, sizeof *r->prompts);
    r->n_prompts = cnt;
    if (cJSON_IsString(p))
        return set_text_prompt(p->valuestring, "prompt", "'prompt'", &r->prompts[0], err);
    if (is_id_array(p))
        return parse_ids(p, "prompt", "'prompt'", lim->vocab_size, &r->prompts[0].ids, &r->prompts[0].n_ids,
                         err);
    int i = 0;
    const cJSON *it;
    cJSON_ArrayForEach(it, p)
    {
        if (!parse_prompt_item(it, i, lim, &r->prompts[i], err))
            return false;
        i++;
    }
    return true;
}

/* A request field through its sampling row: the adapter checks only the
 * JSON type; range and integrality are the row's (scheduler/params.c).
 * json_name may be an alias of the row (max_completion_tokens). */
bool srv_oa_get_row(const cJSON *root, const char *json_name, const char *key, sampling_params *sp,
                    bool *present, srv_error *err)
{
    const sampling_row *row = sampling_row_find(key);
    const cJSON *it = srv_oa_field(root, json_name);
    *present = it != NULL;
    if (!it)
        return true;
    double v;
    if (row->opt.kind == OPT_BOOL) {
        if (!cJSON_IsBool(it))
            return srv_error_set(err, SRV_ERR_INVALID, json_name, "'%s' must be a boolean", json_name);
        v = cJSON_IsTrue(it);
    } else {
        if (!cJSON_IsNumber(it))
            return srv_error_set(err, SRV_ERR_INVALID, json_name, "'%s' must be %s", json_name,
                                 row->opt.kind == OPT_FLOAT ? "a number" : "an integer");
        v = it->valuedouble;
    }
    if (sampling_row_set_number(row, sp, v) != INFERD_OK)
        return srv_error_set(err, SRV_ERR_INVALID, json_name, "%s", inferd_last_error());
    return true;
}

/* "stop": a string or an array of strings; the count is checked here (it
 * bounds the array), each string (1..256 bytes, UTF-8) by the validator
 * in validate_sampling. Strings are copied into r->stops (owned by r) and
 * sp.stop points at the copies. */
static bool parse_stop(const cJSON *root, srv_request *r, srv_error *err)
{
    const cJSON *s = srv_oa_field(root, "stop");
    if (!s)
        return true;
    if (!cJSON_IsString(s) && !cJSON_IsArray(s))
        return srv_error_set(err, SRV_ERR_INVALID, "stop", "'stop' must be a string or an array of strings");
    int cnt = cJSON_IsString(s) ? 1 : cJSON_GetArraySize(s);
    if (sampling_row_check(sampling_row_find("stop"), cnt) != INFERD_OK)
        return srv_error_set(err, SRV_ERR_INVALID, "stop", "%s", inferd_last_error());
    for (int i = 0; i < cnt; i++) {
        const cJSON *it = cJSON_IsString(s) ? s : cJSON_GetArrayItem(s, i);
        if (!cJSON_IsString(it))
            return srv_error_set(err, SRV_ERR_INVALID, "stop", "'stop'[%d] must be a string", i);
        r->stops[i] = inferd_strdup(it->valuestring);
        r->sp.stop[i] = r->stops[i];
        r->sp.n_stop = i + 1;
    }
    return true;
}

/* The count is checked before parse_ids so a huge array is refused before
 * it is copied; the ids then go into the fixed array in sp. */
static bool parse_stop_ids(const cJSON *root, const srv_parse_limits *lim, srv_request *r, srv_error *err)
{
    const cJSON *s = srv_oa_field(root, "stop_token_ids");
    if (!s)
        return true;
    if (!cJSON_IsArray(s))
        return srv_error_set(err, SRV_ERR_INVALID, "stop_token_ids",
                             "'stop_token_ids' must be an array of token ids");
    int cnt = cJSON_GetArraySize(s);
    if (cnt == 0)
        return true;
    if (sampling_row_check(sampling_row_find("stop_token_ids"), cnt) != INFERD_OK)
        return srv_error_set(err, SRV_ERR_INVALID, "stop_token_ids", "%s", inferd_last_error());
    int32_t *ids;
    int n;
    if (!parse_ids(s, "stop_token_ids", "'stop_token_ids'", lim->vocab_size, &ids, &n, err))
        return false;
    memcpy(r->sp.stop_token_ids, ids, sizeof(int32_t) * (size_t)n);
    r->sp.n_stop_token_ids = n;
    inferd_free(ids);
    return true;
}

/* "logit_bias": an object from token ids (decimal strings: JSON keys) to
 * numbers. The count is checked before any entry (a huge object is refused
 * at once); each entry goes through sampling_logit_bias_add (the limits of
 * params.c: [-100, 100], no duplicates); the vocabulary bound is checked by
 * validate_sampling with the rest. */
static bool parse_logit_bias(const cJSON *root, srv_request *r, srv_error *err)
{
    const cJSON *lb = srv_oa_field(root, "logit_bias");
    if (!lb)
        return true;
    if (!cJSON_IsObject(lb))
        return srv_error_set(err, SRV_ERR_INVALID, "logit_bias",
                             "'logit_bias' must be an object mapping token ids to numbers");
    int cnt = cJSON_GetArraySize(lb);
    if (cnt > SAMPLING_MAX_LOGIT_BIAS)
        return srv_error_set(err, SRV_ERR_INVALID, "logit_bias", "'logit_bias' has %d entries; at most %d are allowed",
                             cnt, SAMPLING_MAX_LOGIT_BIAS);
    const cJSON *it;
    cJSON_ArrayForEach(it, lb)
    {
        long long id;
        if (!util_parse_int(it->string, 0, INT32_MAX, &id))
            return srv_error_set(err, SRV_ERR_INVALID, "logit_bias",
                                 "'logit_bias' keys must be token ids (non-negative integers), got \"%.32s\"",
                                 it->string);
        if (!cJSON_IsNumber(it))
            return srv_error_set(err, SRV_ERR_INVALID, "logit_bias", "'logit_bias'[\"%lld\"] must be a number", id);
        if (sampling_logit_bias_add(&r->sp, id, it->valuedouble) != INFERD_OK)
            return srv_error_set(err, SRV_ERR_INVALID, "logit_bias", "%s", inferd_last_error());
    }
    return true;
}

/* Fields we do not implement: accepted at their neutral value, 400 otherwise.
 * Accepting the neutral value keeps SDKs that always send defaults working;
 * refusing the rest beats silently ignoring a setting the client relies on.
 * Fields not listed here are ignored entirely (OpenAI's own leniency). */
static bool check_unsupported(const cJSON *root, srv_api api, srv_error *err)
{
    if (api == SRV_API_COMPLETIONS) {
        /* "" is what some SDKs send for "no suffix"; anything else asks for
         * fill-in-the-middle, which needs a model trained for it. */
        const char *suffix;
        if (!srv_oa_get_str(root, "suffix", &suffix, err))
            return false;
        if (suffix && *suffix)
            return srv_error_set(
                err, SRV_ERR_INVALID, "suffix",
                "'suffix' is not supported: inferd does not do fill-in-the-middle insertion");
    } else {
        const cJSON *tools = srv_oa_field(root, "tools");
        if (tools && (!cJSON_IsArray(tools) || cJSON_GetArraySize(tools) > 0))
            return srv_error_set(err, SRV_ERR_INVALID, "tools",
                                 "'tools' is not supported yet: inferd does not parse tool calls out of the "
                                 "model's output (POST /tokenize with 'tools' shows the prompt a template builds)");
        const cJSON *rf = srv_oa_field(root, "response_format");
        if (rf) {
            const cJSON *t = cJSON_IsObject(rf) ? cJSON_GetObjectItemCaseSensitive(rf, "type") : NULL;
            if (!cJSON_IsString(t) || strcmp(t->valuestring, "text") != 0)
                return srv_error_set(err, SRV_ERR_INVALID, "response_format",
                                     "'response_format' other than {\"type\": \"text\"} is not supported");
        }
    }
    return true;
}

/* "n" (completions and chat) and "best_of" (completions: chat has no
 * such field in OpenAI's API, so only its neutral 1 passes there): each
 * value through its row in scheduler/params.c (integer in [1, 16]); an
 * absent best_of is n. The rules across fields (best_of >= n, the
 * request's total sequences, no streaming of best_of > n) need the prompt
 * count and stream flag: check_seqs, after the prompt is parsed. */
static bool parse_seqs(const cJSON *root, srv_request *r, srv_error *err)
{
    static const char *const k_keys[] = {"n", "best_of"};
    bool given[2] = {false, false};
    for (size_t i = 0; i < INFERD_ARRAY_LEN(k_keys); i++) {
        const cJSON *it = srv_oa_field(root, k_keys[i]);
        if (!it)
            continue;
        if (!cJSON_IsNumber(it))
            return srv_error_set(err, SRV_ERR_INVALID, k_keys[i], "'%s' must be an integer", k_keys[i]);
        if (sampling_seqs_set(&r->seqs, k_keys[i], it->valuedouble) != INFERD_OK)
            return srv_error_set(err, SRV_ERR_INVALID, k_keys[i], "%s", inferd_last_error());
        given[i] = true;
    }
    if (given[1] && r->seqs.best_of != 1 && r->api != SRV_API_COMPLETIONS)
        return srv_error_set(err, SRV_ERR_INVALID, "best_of",
                             "'best_of' is only supported by /v1/completions");
    if (!given[1])
        r->seqs.best_of = r->seqs.n;
    return true;
}

/* The cross-field rules of n and best_of, once the prompt count is known.
 * OpenAI refuses to stream best_of > n: the n returned are only known
 * when every sequence has finished. */
static bool check_seqs(srv_request *r, srv_error *err)
{
    const char *param = NULL;
    int n_prompts = r->api == SRV_API_COMPLETIONS ? r->n_prompts : 1;
    if (sampling_seqs_validate(&r->seqs, n_prompts, &param) != INFERD_OK)
        return srv_error_set(err, SRV_ERR_INVALID, param, "%s", inferd_last_error());
    if (r->stream && r->seqs.best_of > r->seqs.n)
        return srv_error_set(err, SRV_ERR_INVALID, "best_of",
                             "'best_of' (%d) greater than 'n' (%d) cannot be streamed: the returned choices are "
                             "only known once every sequence has finished",
                             r->seqs.best_of, r->seqs.n);
    return true;
}

/* The name the client used, for error messages: chat accepts OpenAI's
 * newer max_completion_tokens as an alias (it wins when both are given). */
static const char *max_tokens_name(const cJSON *root, srv_api api)
{
    if (api == SRV_API_RESPONSES)
        return "max_output_tokens";
    return api == SRV_API_CHAT && srv_oa_field(root, "max_completion_tokens") ? "max_completion_tokens"
                                                                              : "max_tokens";
}

/* The sampling fields that are the same in both APIs. max_tokens stays in
 * r->max_tokens (0 = not given) until srv_gen knows the prompt length. */
static bool parse_sampling(const cJSON *root, srv_request *r, srv_error *err)
{
    static const char *const k_keys[] = {"temperature",      "top_p",           "top_k",
                                         "min_p",            "seed",            "ignore_eos",
                                         "min_tokens",       "presence_penalty", "frequency_penalty",
                                         "repetition_penalty"};
    bool present;
    for (size_t i = 0; i < INFERD_ARRAY_LEN(k_keys); i++)
        if (!srv_oa_get_row(root, k_keys[i], k_keys[i], &r->sp, &present, err))
            return false;
    /* Parsed into a scratch copy: the row stores into sp.max_tokens, which
     * must stay unset until srv_gen knows the prompt length. */
    sampling_params mt = r->sp;
    if (!srv_oa_get_row(root, max_tokens_name(root, r->api), "max_tokens", &mt, &present, err))
        return false;
    if (present)
        r->max_tokens = mt.max_tokens;
    return parse_stop(root, r, err) && parse_logit_bias(root, r, err);
}

/* API-only shapes: completions "logprobs": N; chat "logprobs": bool with
 * "top_logprobs": N. The number itself goes through the logprobs row. */
static bool parse_logprobs(const cJSON *root, srv_request *r, srv_error *err)
{
    bool present;
    if (r->api == SRV_API_COMPLETIONS) {
        if (!srv_oa_get_row(root, "logprobs", "logprobs", &r->sp, &present, err))
            return false;
        if (!present)
            r->sp.logprobs = -1;
        return true;
    }
    bool on = false;
    const cJSON *lp = srv_oa_field(root, "logprobs");
    if (lp && !cJSON_IsBool(lp))
        return srv_error_set(err, SRV_ERR_INVALID, "logprobs", "'logprobs' must be a boolean");
    on = lp && cJSON_IsTrue(lp);
    sampling_params tmp = r->sp;
    if (!srv_oa_get_row(root, "top_logprobs", "logprobs", &tmp, &present, err))
        return false;
    if (present && !on)
        return srv_error_set(err, SRV_ERR_INVALID, "top_logprobs",
                             "'top_logprobs' requires 'logprobs': true");
    r->sp.logprobs = on ? (present ? tmp.logprobs : 0) : -1;
    return true;
}

/* The table's cross-field and per-entry rules (min_tokens <= max_tokens,
 * stop string lengths, stop ids in the vocabulary) on the parsed values.
 * Works on a copy whose max_tokens is the request's or INT32_MAX when not
 * given (so min_tokens is bounded only by what was asked); srv_gen checks
 * min_tokens again against the max_tokens it finally picks. */
bool srv_oa_validate_sampling(const cJSON *root, const srv_parse_limits *lim, srv_request *r, srv_error *err)
{
    sampling_params chk = r->sp;
    chk.max_tokens = r->max_tokens > 0 ? (int32_t)r->max_tokens : INT32_MAX;
    const char *param = NULL;
    if (sampling_params_validate(&chk, lim->vocab_size, &param) == INFERD_OK)
        return true;
    if (param && strcmp(param, "max_tokens") == 0)
        param = max_tokens_name(root, r->api);
    return srv_error_set(err, SRV_ERR_INVALID, param, "%s", inferd_last_error());
}

/* Completions "echo": each choice's text starts with its prompt. With
 * logprobs, OpenAI also returns the prompt tokens' logprobs (the same
 * top-N), which the engine computes in the prefill (sp.prompt_logprobs).
 * Runs after parse_logprobs, whose result it reads. */
static bool parse_echo(const cJSON *root, srv_request *r, srv_error *err)
{
    if (r->api != SRV_API_COMPLETIONS)
        return true;
    if (!srv_oa_get_bool(root, "echo", &r->echo, err))
        return false;
    if (r->echo && r->sp.logprobs >= 0)
        r->sp.prompt_logprobs = r->sp.logprobs;
    return true;
}

/* stream_options without stream: true is an error, as in OpenAI's API. */
static bool parse_stream(const cJSON *root, srv_request *r, srv_error *err)
{
    if (!srv_oa_get_bool(root, "stream", &r->stream, err))
        return false;
    const cJSON *so = srv_oa_field(root, "stream_options");
    if (!so)
        return true;
    if (!cJSON_IsObject(so))
        return srv_error_set(err, SRV_ERR_INVALID, "stream_options", "'stream_options' must be an object");
    if (!r->stream)
        return srv_error_set(err, SRV_ERR_INVALID, "stream_options",
                             "'stream_options' is only allowed when 'stream' is true");
    const cJSON *iu = srv_oa_field(so, "include_usage");
    if (iu && !cJSON_IsBool(iu))
        return srv_error_set(err, SRV_ERR_INVALID, "stream_options",
                             "'stream_options.include_usage' must be a boolean");
    r->include_usage = iu && cJSON_IsTrue(iu);
    return true;
}

/* Event-loop thread. The check order fixes which error a request with
 * several faults gets: model, unsupported fields, sampling, stream, then
 * the prompt (the biggest field, parsed last). On failure r is freed and
 * zeroed, so the caller never frees it twice. */
bool srv_request_parse(srv_api api, const char *body, size_t len, const srv_parse_limits *lim, srv_request *r,
                       srv_error *err)
{
    memset(r, 0, sizeof *r);
    r->api = api;
    r->add_special_tokens = true;
    sampling_seqs_default(&r->seqs);
    if (lim->defaults)
        r->sp = *lim->defaults; /* generation_config.json; sp.max_tokens is set by srv_gen */
    else
        sampling_params_default(&r->sp);
    cJSON *root;
    if (!srv_oa_parse_root(body, len, &root, err))
        return false;
    bool ok = srv_oa_check_model(root, lim, &r->model, err) && check_unsupported(root, api, err) &&
              parse_seqs(root, r, err) && parse_sampling(root, r, err) && parse_stop_ids(root, lim, r, err) &&
              parse_logprobs(root, r, err) && parse_echo(root, r, err) &&
              srv_oa_validate_sampling(root, lim, r, err) && parse_stream(root, r, err);
    if (ok && api == SRV_API_COMPLETIONS) {
        ok = srv_oa_get_bool(root, "add_special_tokens", &r->add_special_tokens, err) &&
             parse_prompt(root, lim, r, err);
    } else if (ok) {
        ok = srv_oa_parse_chat(root, false, &r->chat, &r->msgs, &r->n_msgs, err);
    }
    ok = ok && check_seqs(r, err);
    cJSON_Delete(root);
    if (!ok)
        srv_request_free(r);
    return ok;
}

/* Safe on a zeroed or half-filled request; leaves r zeroed. */
void srv_request_free(srv_request *r)
{
    inferd_free(r->model);
    for (int i = 0; i < r->n_prompts; i++) {
        inferd_free(r->prompts[i].text);
        inferd_free(r->prompts[i].ids);
    }
    inferd_free(r->prompts);
    inferd_free(r->instructions);
    srv_oa_msgs_free(r->msgs, r->n_msgs);
    srv_chat_req_free(&r->chat);
    for (int i = 0; i < SAMPLING_MAX_STOP; i++)
        inferd_free(r->stops[i]);
    memset(r, 0, sizeof *r);
}

/* /tokenize (vLLM's shape): "prompt" (string) or "messages" (rendered with
 * the chat template by the route, with the template inputs of chat
 * completions and "tools"). add_special_tokens defaults to true for a
 * prompt and false for messages (the template writes its own BOS). */
bool srv_tokenize_parse(const char *body, size_t len, const srv_parse_limits *lim, srv_tokenize_req *r,
                        srv_error *err)
{
    memset(r, 0, sizeof *r);
    cJSON *root;
    if (!srv_oa_parse_root(body, len, &root, err))
        return false;
    bool ok = srv_oa_check_model(root, lim, &r->model, err);
    const cJSON *p = srv_oa_field(root, "prompt");
    if (ok && p && srv_oa_field(root, "messages"))
        ok = srv_error_set(err, SRV_ERR_INVALID, "prompt", "give either 'prompt' or 'messages', not both");
    if (ok && p) {
        r->add_special_tokens = true;
        const char *text;
        if ((ok = srv_oa_get_str(root, "prompt", &text, err))) {
            r->prompt = inferd_strdup(text);
            r->prompt_len = strlen(r->prompt);
        }
    } else if (ok) {
        ok = srv_oa_parse_chat(root, true, &r->chat, &r->msgs, &r->n_msgs, err);
        if (!ok && !srv_oa_field(root, "messages"))
            srv_error_set(err, SRV_ERR_INVALID, "prompt", "'prompt' (string) or 'messages' is required");
    }
    if (ok)
        ok = srv_oa_get_bool(root, "add_special_tokens", &r->add_special_tokens, err);
    cJSON_Delete(root);
    if (!ok)
        srv_tokenize_free(r);
    return ok;
}

void srv_tokenize_free(srv_tokenize_req *r)
{
    inferd_free(r->model);
    inferd_free(r->prompt);
    srv_oa_msgs_free(r->msgs, r->n_msgs);
    srv_chat_req_free(&r->chat);
    memset(r, 0, sizeof *r);
}

/* /detokenize: "tokens", ids in the vocabulary; an empty array is valid
 * and decodes to "". */
bool srv_detokenize_parse(const char *body, size_t len, const srv_parse_limits *lim, srv_detokenize_req *r,
                          srv_error *err)
{
    memset(r, 0, sizeof *r);
    cJSON *root;
    if (!srv_oa_parse_root(body, len, &root, err))
        return false;
    bool ok = srv_oa_check_model(root, lim, &r->model, err);
    const cJSON *t = srv_oa_field(root, "tokens");
    if (ok && !t)
        ok = srv_error_set(err, SRV_ERR_INVALID, "tokens", "'tokens' is required");
    else if (ok && !cJSON_IsArray(t))
        ok = srv_error_set(err, SRV_ERR_INVALID, "tokens", "'tokens' must be an array of token ids");
    else if (ok && cJSON_GetArraySize(t) == 0)
        r->n_ids = 0;
    else if (ok)
        ok = parse_ids(t, "tokens", "'tokens'", lim->vocab_size, &r->ids, &r->n_ids, err);
    cJSON_Delete(root);
    if (!ok)
        srv_detokenize_free(r);
    return ok;
}

void srv_detokenize_free(srv_detokenize_req *r)
{
    inferd_free(r->model);
    inferd_free(r->ids);
    memset(r, 0, sizeof *r);
}
