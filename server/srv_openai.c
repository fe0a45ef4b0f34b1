/* server/srv_openai.c: request parsing/validation for the OpenAI endpoints.
 *
 * Strict where OpenAI is strict (types, ranges), lenient
 * where it is lenient (unknown fields ignored, null means "not given").
 * Every failure names the offending field in `param` and in the message.
 * The JSON parser is cJSON with its nesting limit (CJSON_NESTING_LIMIT, 1000),
 * so deeply nested bodies fail as malformed JSON instead of recursing deep.
 * Response builders live in srv_openai_resp.c; /v1/responses bodies are
 * parsed by srv_responses.c with the field readers exported at the end of
 * this file (srv_openai_int.h).
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
#include "common/buf.h"
#include "common/util.h"
#include "server/srv_util.h"

/* ---- typed field access ---------------------------------------------------- */

/* NULL when absent or JSON null. */
static const cJSON *field(const cJSON *obj, const char *name)
{
    const cJSON *it = cJSON_GetObjectItemCaseSensitive(obj, name);
    return it && !cJSON_IsNull(it) ? it : NULL;
}

/* An integer field in [lo, hi]. cJSON stores numbers as double, so
 * "integer" means a double with no fraction; the 9.2e18 bound keeps the
 * int64 cast below defined (casting an out-of-range double is UB). */
static bool get_int(const cJSON *obj, const char *name, int64_t lo, int64_t hi, int64_t *out, bool *present,
                    srv_error *err)
{
    const cJSON *it = field(obj, name);
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
static bool get_bool(const cJSON *obj, const char *name, bool *out, bool *present, srv_error *err)
{
    const cJSON *it = field(obj, name);
    *present = it != NULL;
    if (!it)
        return true;
    if (!cJSON_IsBool(it))
        return srv_error_set(err, SRV_ERR_INVALID, name, "'%s' must be a boolean", name);
    *out = cJSON_IsTrue(it);
    return true;
}

/* A valid UTF-8 string field; *out borrowed from the JSON tree or NULL. */
static bool get_str(const cJSON *obj, const char *name, const char **out, srv_error *err)
{
    const cJSON *it = field(obj, name);
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
static bool parse_root(const char *body, size_t len, cJSON **root, srv_error *err)
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
static bool check_model(const cJSON *root, const srv_parse_limits *lim, char **model_out, srv_error *err)
{
    const char *name;
    if (!get_str(root, "model", &name, err))
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
    const cJSON *p = field(root, "prompt");
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

/* ---- chat messages and template inputs ------------------------------------- */

/* Depth of a JSON value: 0 for a scalar, 1 + the deepest member for an
 * array or object. Stops counting past limit, so a deep tree costs only
 * its first limit + 1 levels of recursion per branch. */
static int json_depth(const cJSON *v, int limit)
{
    if (!cJSON_IsArray(v) && !cJSON_IsObject(v))
        return 0;
    if (limit < 0)
        return 1;
    int d = 0;
    const cJSON *it;
    cJSON_ArrayForEach(it, v)
    {
        int c = json_depth(it, limit - 1);
        if (c > d)
            d = c;
        if (d > limit)
            break;
    }
    return d + 1;
}

/* Every string value and object key of v valid UTF-8 (cJSON does not
 * check; Python would refuse the hand-over); *bytes accumulates their
 * lengths (the prompt size bound of srv_gen). */
static bool json_text_ok(const cJSON *v, size_t *bytes)
{
    const char *strs[2] = {v->string, cJSON_IsString(v) ? v->valuestring : NULL};
    for (int k = 0; k < 2; k++) {
        size_t n = strs[k] ? strlen(strs[k]) : 0;
        if (strs[k] && !util_utf8_valid(strs[k], n))
            return false;
        *bytes += n;
    }
    const cJSON *it;
    cJSON_ArrayForEach(it, (cJSON_IsArray(v) || cJSON_IsObject(v) ? v : NULL))
    {
        if (!json_text_ok(it, bytes))
            return false;
    }
    return true;
}

/* A client value handed to the template as it is (a tool, a document, a
 * kwarg, tool-call arguments): nesting bounded, text valid. what names it
 * in messages ("'tools'[3]"), param is the request field. */
static bool check_free_value(const cJSON *v, const char *param, const char *what, size_t *bytes, srv_error *err)
{
    if (json_depth(v, SRV_CHAT_MAX_DEPTH) > SRV_CHAT_MAX_DEPTH)
        return srv_error_set(err, SRV_ERR_INVALID, param, "%s is nested deeper than %d levels", what,
                             SRV_CHAT_MAX_DEPTH);
    if (!json_text_ok(v, bytes))
        return srv_error_set(err, SRV_ERR_INVALID, param, "%s is not valid UTF-8", what);
    return true;
}

/* content: a string, an array of {"type": "text", "text": str} parts, or
 * null / absent (assistant only: a tool-call turn in OpenAI's schema).
 * *json gets a copy (parts kept as parts: srv_chat joins them or not,
 * depending on the template), *flat the text (parts joined by "\n", null
 * as ""), both heap on success. */
static bool parse_content(const cJSON *c, int idx, srv_chat_role role, cJSON **json, char **flat, size_t *bytes,
                          srv_error *err)
{
    if (!c || cJSON_IsNull(c)) {
        if (role != SRV_ROLE_ASSISTANT)
            return srv_error_set(err, SRV_ERR_INVALID, "messages", "messages[%d].content is required", idx);
        *json = cJSON_CreateNull();
        *flat = inferd_strdup("");
        return true;
    }
    if (!cJSON_IsString(c) && !cJSON_IsArray(c))
        return srv_error_set(err, SRV_ERR_INVALID, "messages",
                             "messages[%d].content must be a string or an array of text parts", idx);
    if (cJSON_IsArray(c) && cJSON_GetArraySize(c) > SRV_CHAT_MAX_PARTS)
        return srv_error_set(err, SRV_ERR_INVALID, "messages", "messages[%d].content has more than %d parts",
                             idx, SRV_CHAT_MAX_PARTS);
    inferd_buf b = {0};
    int k = 0;
    const cJSON *part;
    cJSON_ArrayForEach(part, (cJSON_IsArray(c) ? c : NULL))
    {
        const cJSON *type = cJSON_IsObject(part) ? cJSON_GetObjectItemCaseSensitive(part, "type") : NULL;
        const cJSON *text = cJSON_IsObject(part) ? cJSON_GetObjectItemCaseSensitive(part, "text") : NULL;
        if (!cJSON_IsString(type) || strcmp(type->valuestring, "text") != 0 || !cJSON_IsString(text)) {
            inferd_buf_free(&b);
            return srv_error_set(err, SRV_ERR_INVALID, "messages",
                                 "messages[%d].content[%d]: only {\"type\": \"text\", \"text\": string} parts are "
                                 "supported",
                                 idx, k);
        }
        if (k++ > 0)
            inferd_buf_append_str(&b, "\n");
        inferd_buf_append_str(&b, text->valuestring);
    }
    if (cJSON_IsString(c))
        inferd_buf_append_str(&b, c->valuestring);
    char *s = inferd_buf_steal(&b, NULL);
    if (!s)
        s = inferd_strdup("");
    if (!util_utf8_valid(s, strlen(s))) {
        inferd_free(s);
        return srv_error_set(err, SRV_ERR_INVALID, "messages", "messages[%d].content is not valid UTF-8", idx);
    }
    *bytes += strlen(s);
    *json = cJSON_Duplicate(c, true);
    *flat = s;
    return true;
}

/* An optional string member of message idx copied into out under the
 * same key (absent or null: nothing). */
static bool copy_msg_str(const cJSON *m, int idx, const char *key, cJSON *out, size_t *bytes, srv_error *err)
{
    const cJSON *v = field(m, key);
    if (!v)
        return true;
    if (!cJSON_IsString(v) || !util_utf8_valid(v->valuestring, strlen(v->valuestring)))
        return srv_error_set(err, SRV_ERR_INVALID, "messages", "messages[%d].%s must be a string (valid UTF-8)",
                             idx, key);
    *bytes += strlen(v->valuestring);
    cJSON_AddStringToObject(out, key, v->valuestring);
    return true;
}

/* function.arguments as the template gets it (vLLM's rule): a JSON string
 * is parsed, so templates that expect an object (most) get one; a string
 * that is not JSON, null or absent becomes {} (vLLM does the same rather
 * than refuse a conversation whose earlier model output was malformed);
 * an object or array is kept. A new item, or NULL with *err set. */
static cJSON *tool_call_arguments(const cJSON *a, int idx, int k, size_t *bytes, srv_error *err)
{
    cJSON *v = NULL;
    if (cJSON_IsString(a))
        v = cJSON_ParseWithOpts(a->valuestring, NULL, true); /* trailing text: not JSON, as for json.loads */
    else if (cJSON_IsObject(a) || cJSON_IsArray(a))
        v = cJSON_Duplicate(a, true);
    else if (a && !cJSON_IsNull(a)) {
        srv_error_set(err, SRV_ERR_INVALID, "messages",
                      "messages[%d].tool_calls[%d].function.arguments must be a JSON string or an object", idx, k);
        return NULL;
    }
    if (!v)
        return cJSON_CreateObject();
    char what[80];
    snprintf(what, sizeof what, "messages[%d].tool_calls[%d].function.arguments", idx, k);
    if (!check_free_value(v, "messages", what, bytes, err)) {
        cJSON_Delete(v);
        return NULL;
    }
    return v;
}

/* One tool call {"id", "type", "function": {"name", "arguments"}} into a
 * new item, or NULL with *err set. */
static cJSON *parse_tool_call(const cJSON *tc, int idx, int k, size_t *bytes, srv_error *err)
{
    const cJSON *fn = cJSON_IsObject(tc) ? field(tc, "function") : NULL;
    const cJSON *name = cJSON_IsObject(fn) ? field(fn, "name") : NULL;
    if (!cJSON_IsString(name) || !util_utf8_valid(name->valuestring, strlen(name->valuestring))) {
        srv_error_set(err, SRV_ERR_INVALID, "messages",
                      "messages[%d].tool_calls[%d] must be an object with \"function\": {\"name\": string, "
                      "\"arguments\": string}",
                      idx, k);
        return NULL;
    }
    cJSON *out = cJSON_CreateObject();
    cJSON *ofn = cJSON_CreateObject();
    bool ok = copy_msg_str(tc, idx, "id", out, bytes, err) && copy_msg_str(tc, idx, "type", out, bytes, err);
    cJSON *args = ok ? tool_call_arguments(cJSON_GetObjectItemCaseSensitive(fn, "arguments"), idx, k, bytes, err)
                     : NULL;
    cJSON_AddItemToObject(out, "function", ofn);
    cJSON_AddStringToObject(ofn, "name", name->valuestring);
    *bytes += strlen(name->valuestring);
    if (!args) {
        cJSON_Delete(out);
        return NULL;
    }
    cJSON_AddItemToObject(ofn, "arguments", args);
    return out;
}

/* An assistant's tool_calls (absent, null or [] : none, as vLLM drops an
 * empty list so templates take their plain-assistant path). */
static bool parse_tool_calls(const cJSON *m, int idx, cJSON *out, size_t *bytes, srv_error *err)
{
    const cJSON *tcs = field(m, "tool_calls");
    if (!tcs)
        return true;
    if (!cJSON_IsArray(tcs))
        return srv_error_set(err, SRV_ERR_INVALID, "messages", "messages[%d].tool_calls must be an array", idx);
    int n = cJSON_GetArraySize(tcs);
    if (n > SRV_CHAT_MAX_TOOL_CALLS)
        return srv_error_set(err, SRV_ERR_INVALID, "messages", "messages[%d].tool_calls has %d entries; at most %d",
                             idx, n, SRV_CHAT_MAX_TOOL_CALLS);
    if (n == 0)
        return true;
    cJSON *arr = cJSON_AddArrayToObject(out, "tool_calls");
    int k = 0;
    const cJSON *tc;
    cJSON_ArrayForEach(tc, tcs)
    {
        cJSON *c = parse_tool_call(tc, idx, k++, bytes, err);
        if (!c)
            return false;
        cJSON_AddItemToArray(arr, c);
    }
    return true;
}

static bool parse_role(const cJSON *m, int idx, srv_chat_role *out, srv_error *err)
{
    const cJSON *role = cJSON_IsObject(m) ? cJSON_GetObjectItemCaseSensitive(m, "role") : NULL;
    if (!cJSON_IsString(role))
        return srv_error_set(err, SRV_ERR_INVALID, "messages", "messages[%d] must be an object with a string 'role'",
                             idx);
    for (int r = 0; r < SRV_ROLE_COUNT; r++) {
        if (strcmp(role->valuestring, srv_chat_role_name((srv_chat_role)r)) == 0) {
            *out = (srv_chat_role)r;
            return true;
        }
    }
    return srv_error_set(err, SRV_ERR_INVALID, "messages",
                         "messages[%d].role must be 'system', 'developer', 'user', 'assistant' or 'tool'", idx);
}

/* One message as vLLM hands it to the template: role and content, name
 * when given, an assistant's tool_calls (arguments parsed) and reasoning
 * (passed as both "reasoning" and "reasoning_content", the two names
 * templates read), a tool message's tool_call_id. Other members are not
 * passed (vLLM builds its messages the same way). */
static cJSON *parse_message(const cJSON *m, int idx, srv_chat_msg *flat, size_t *bytes, srv_error *err)
{
    if (!parse_role(m, idx, &flat->role, err))
        return NULL;
    cJSON *content = NULL;
    if (!parse_content(cJSON_GetObjectItemCaseSensitive(m, "content"), idx, flat->role, &content, &flat->content,
                       bytes, err))
        return NULL;
    cJSON *out = cJSON_CreateObject();
    cJSON_AddStringToObject(out, "role", srv_chat_role_name(flat->role));
    cJSON_AddItemToObject(out, "content", content);
    bool ok = copy_msg_str(m, idx, "name", out, bytes, err);
    if (ok && flat->role == SRV_ROLE_ASSISTANT) {
        ok = parse_tool_calls(m, idx, out, bytes, err);
        const char *key = field(m, "reasoning") ? "reasoning" : "reasoning_content";
        const cJSON *rs = field(m, key);
        if (ok && rs && (!cJSON_IsString(rs) || !util_utf8_valid(rs->valuestring, strlen(rs->valuestring))))
            ok = srv_error_set(err, SRV_ERR_INVALID, "messages", "messages[%d].%s must be a string", idx, key);
        else if (ok && rs) {
            cJSON_AddStringToObject(out, "reasoning", rs->valuestring);
            cJSON_AddStringToObject(out, "reasoning_content", rs->valuestring);
            *bytes += strlen(rs->valuestring);
        }
    } else if (ok && flat->role == SRV_ROLE_TOOL) {
        ok = copy_msg_str(m, idx, "tool_call_id", out, bytes, err);
    }
    if (!ok) {
        cJSON_Delete(out);
        return NULL;
    }
    return out;
}

static void msgs_free(srv_chat_msg *msgs, int n)
{
    for (int i = 0; i < n && msgs; i++)
        inferd_free(msgs[i].content);
    inferd_free(msgs);
}

/* "messages": c->messages (the template's view) and *msgs (the flat view,
 * heap, cnt entries) on success; nothing kept on failure. The count is
 * checked before any message is copied. */
static bool parse_messages(const cJSON *root, srv_chat_req *c, srv_chat_msg **msgs, int *n_msgs, srv_error *err)
{
    const cJSON *m = field(root, "messages");
    if (!m)
        return srv_error_set(err, SRV_ERR_INVALID, "messages", "'messages' is required");
    if (!cJSON_IsArray(m))
        return srv_error_set(err, SRV_ERR_INVALID, "messages", "'messages' must be an array");
    int cnt = cJSON_GetArraySize(m);
    if (cnt == 0)
        return srv_error_set(err, SRV_ERR_INVALID, "messages", "'messages' must not be empty");
    if (cnt > SRV_CHAT_MAX_MESSAGES)
        return srv_error_set(err, SRV_ERR_INVALID, "messages", "'messages' has %d entries; at most %d are allowed",
                             cnt, SRV_CHAT_MAX_MESSAGES);
    srv_chat_msg *v = inferd_calloc((size_t)cnt, sizeof *v);
    cJSON *arr = cJSON_CreateArray();
    int i = 0;
    const cJSON *it;
    cJSON_ArrayForEach(it, m)
    {
        cJSON *one = parse_message(it, i, &v[i], &c->text_bytes, err);
        if (!one) {
            msgs_free(v, cnt);
            cJSON_Delete(arr);
            return false;
        }
        cJSON_AddItemToArray(arr, one);
        i++;
    }
    c->messages = arr;
    *msgs = v;
    *n_msgs = cnt;
    return true;
}

/* "tools" / "documents": an array of at most SRV_CHAT_MAX_ITEMS objects,
 * each a bounded free value; *out a copy (NULL when absent or null). */
static bool parse_item_list(const cJSON *root, const char *key, cJSON **out, size_t *bytes, srv_error *err)
{
    const cJSON *v = field(root, key);
    if (!v)
        return true;
    if (!cJSON_IsArray(v))
        return srv_error_set(err, SRV_ERR_INVALID, key, "'%s' must be an array of objects", key);
    int n = cJSON_GetArraySize(v);
    if (n > SRV_CHAT_MAX_ITEMS)
        return srv_error_set(err, SRV_ERR_INVALID, key, "'%s' has %d entries; at most %d are allowed", key, n,
                             SRV_CHAT_MAX_ITEMS);
    int k = 0;
    const cJSON *it;
    cJSON_ArrayForEach(it, v)
    {
        char what[48];
        snprintf(what, sizeof what, "'%s'[%d]", key, k++);
        if (!cJSON_IsObject(it))
            return srv_error_set(err, SRV_ERR_INVALID, key, "%s must be an object", what);
        if (!check_free_value(it, key, what, bytes, err))
            return false;
    }
    *out = cJSON_Duplicate(v, true);
    return true;
}

/* "chat_template_kwargs": an object of extra template variables (e.g.
 * enable_thinking), bounded in members, nesting and size. The template's
 * own inputs cannot be set through it: they have request fields. */
static bool parse_kwargs(const cJSON *root, srv_chat_req *c, srv_error *err)
{
    static const char *const k_reserved[] = {"messages", "tools", "documents", "add_generation_prompt",
                                             "continue_final_message"};
    const cJSON *kw = field(root, "chat_template_kwargs");
    if (!kw)
        return true;
    if (!cJSON_IsObject(kw))
        return srv_error_set(err, SRV_ERR_INVALID, "chat_template_kwargs", "'chat_template_kwargs' must be an object");
    int n = cJSON_GetArraySize(kw);
    if (n > SRV_CHAT_MAX_KWARGS)
        return srv_error_set(err, SRV_ERR_INVALID, "chat_template_kwargs",
                             "'chat_template_kwargs' has %d members; at most %d are allowed", n, SRV_CHAT_MAX_KWARGS);
    const cJSON *it;
    cJSON_ArrayForEach(it, kw)
    {
        for (size_t k = 0; k < INFERD_ARRAY_LEN(k_reserved); k++)
            if (strcmp(it->string, k_reserved[k]) == 0)
                return srv_error_set(err, SRV_ERR_INVALID, "chat_template_kwargs",
                                     "'chat_template_kwargs' may not set '%s': it is a request field of its own",
                                     k_reserved[k]);
    }
    size_t bytes = 0;
    if (!check_free_value(kw, "chat_template_kwargs", "'chat_template_kwargs'", &bytes, err))
        return false;
    char *printed = cJSON_PrintUnformatted(kw);
    size_t plen = printed ? strlen(printed) : SIZE_MAX;
    cJSON_free(printed);
    if (plen > SRV_CHAT_MAX_KWARGS_BYTES)
        return srv_error_set(err, SRV_ERR_INVALID, "chat_template_kwargs",
                             "'chat_template_kwargs' is %zu bytes as JSON; at most %d are allowed", plen,
                             SRV_CHAT_MAX_KWARGS_BYTES);
    c->text_bytes += bytes;
    c->kwargs = cJSON_Duplicate(kw, true);
    return true;
}

/* add_generation_prompt (default true) and continue_final_message (default
 * false). Both true is refused, as vLLM does; continue_final_message alone
 * turns the generation prompt off (the two exclude each other, so asking
 * for one implies the other's absence). */
static bool parse_prompt_flags(const cJSON *root, srv_chat_req *c, srv_error *err)
{
    bool agp_given, cfm_given;
    c->add_generation_prompt = true;
    c->continue_final_message = false;
    if (!get_bool(root, "continue_final_message", &c->continue_final_message, &cfm_given, err) ||
        !get_bool(root, "add_generation_prompt", &c->add_generation_prompt, &agp_given, err))
        return false;
    if (c->continue_final_message && agp_given && c->add_generation_prompt)
        return srv_error_set(err, SRV_ERR_INVALID, "continue_final_message",
                             "'continue_final_message' and 'add_generation_prompt' cannot both be true: the first "
                             "continues the final message, the second opens a new assistant turn");
    if (c->continue_final_message)
        c->add_generation_prompt = false;
    return true;
}

/* Everything a chat request hands the template. with_tools: /tokenize
 * passes "tools" to the template; chat completions refuse a non-empty
 * "tools" earlier (check_unsupported) until tool-call parsing exists. */
static bool parse_chat(const cJSON *root, bool with_tools, srv_chat_req *c, srv_chat_msg **msgs, int *n_msgs,
                       srv_error *err)
{
    return parse_messages(root, c, msgs, n_msgs, err) && parse_prompt_flags(root, c, err) &&
           parse_kwargs(root, c, err) && parse_item_list(root, "documents", &c->documents, &c->text_bytes, err) &&
           (!with_tools || parse_item_list(root, "tools", &c->tools, &c->text_bytes, err));
}

void srv_chat_req_free(srv_chat_req *c)
{
    cJSON_Delete(c->messages);
    cJSON_Delete(c->tools);
    cJSON_Delete(c->documents);
    cJSON_Delete(c->kwargs);
    memset(c, 0, sizeof *c);
}

void srv_chat_req_inputs(const srv_chat_req *c, srv_chat_inputs *in)
{
    memset(in, 0, sizeof *in);
    in->add_generation_prompt = c->add_generation_prompt;
    in->continue_final_message = c->continue_final_message;
    in->tools = c->tools;
    in->documents = c->documents;
    in->kwargs = c->kwargs;
}

/* A request field through its sampling row: the adapter checks only the
 * JSON type; range and integrality are the row's (scheduler/params.c).
 * json_name may be an alias of the row (max_completion_tokens). */
static bool get_row(const cJSON *root, const char *json_name, const char *key, sampling_params *sp,
                    bool *present, srv_error *err)
{
    const sampling_row *row = sampling_row_find(key);
    const cJSON *it = field(root, json_name);
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
    const cJSON *s = field(root, "stop");
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
    const cJSON *s = field(root, "stop_token_ids");
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
    const cJSON *lb = field(root, "logit_bias");
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
        if (!get_str(root, "suffix", &suffix, err))
            return false;
        if (suffix && *suffix)
            return srv_error_set(
                err, SRV_ERR_INVALID, "suffix",
                "'suffix' is not supported: inferd does not do fill-in-the-middle insertion");
    } else {
        const cJSON *tools = field(root, "tools");
        if (tools && (!cJSON_IsArray(tools) || cJSON_GetArraySize(tools) > 0))
            return srv_error_set(err, SRV_ERR_INVALID, "tools",
                                 "'tools' is not supported yet: inferd does not parse tool calls out of the "
                                 "model's output (POST /tokenize with 'tools' shows the prompt a template builds)");
        const cJSON *rf = field(root, "response_format");
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
        const cJSON *it = field(root, k_keys[i]);
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
    return api == SRV_API_CHAT && field(root, "max_completion_tokens") ? "max_completion_tokens"
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
        if (!get_row(root, k_keys[i], k_keys[i], &r->sp, &present, err))
            return false;
    /* Parsed into a scratch copy: the row stores into sp.max_tokens, which
     * must stay unset until srv_gen knows the prompt length. */
    sampling_params mt = r->sp;
    if (!get_row(root, max_tokens_name(root, r->api), "max_tokens", &mt, &present, err))
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
        if (!get_row(root, "logprobs", "logprobs", &r->sp, &present, err))
            return false;
        if (!present)
            r->sp.logprobs = -1;
        return true;
    }
    bool on = false;
    const cJSON *lp = field(root, "logprobs");
    if (lp && !cJSON_IsBool(lp))
        return srv_error_set(err, SRV_ERR_INVALID, "logprobs", "'logprobs' must be a boolean");
    on = lp && cJSON_IsTrue(lp);
    sampling_params tmp = r->sp;
    if (!get_row(root, "top_logprobs", "logprobs", &tmp, &present, err))
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
static bool validate_sampling(const cJSON *root, const srv_parse_limits *lim, srv_request *r, srv_error *err)
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
    bool present;
    if (r->api != SRV_API_COMPLETIONS)
        return true;
    if (!get_bool(root, "echo", &r->echo, &present, err))
        return false;
    if (r->echo && r->sp.logprobs >= 0)
        r->sp.prompt_logprobs = r->sp.logprobs;
    return true;
}

/* stream_options without stream: true is an error, as in OpenAI's API. */
static bool parse_stream(const cJSON *root, srv_request *r, srv_error *err)
{
    bool present;
    if (!get_bool(root, "stream", &r->stream, &present, err))
        return false;
    const cJSON *so = field(root, "stream_options");
    if (!so)
        return true;
    if (!cJSON_IsObject(so))
        return srv_error_set(err, SRV_ERR_INVALID, "stream_options", "'stream_options' must be an object");
    if (!r->stream)
        return srv_error_set(err, SRV_ERR_INVALID, "stream_options",
                             "'stream_options' is only allowed when 'stream' is true");
    const cJSON *iu = field(so, "include_usage");
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
    if (!parse_root(body, len, &root, err))
        return false;
    bool ok = check_model(root, lim, &r->model, err) && check_unsupported(root, api, err) &&
              parse_seqs(root, r, err) && parse_sampling(root, r, err) && parse_stop_ids(root, lim, r, err) &&
              parse_logprobs(root, r, err) && parse_echo(root, r, err) &&
              validate_sampling(root, lim, r, err) && parse_stream(root, r, err);
    if (ok && api == SRV_API_COMPLETIONS) {
        bool present;
        ok = get_bool(root, "add_special_tokens", &r->add_special_tokens, &present, err) &&
             parse_prompt(root, lim, r, err);
    } else if (ok) {
        ok = parse_chat(root, false, &r->chat, &r->msgs, &r->n_msgs, err);
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
    msgs_free(r->msgs, r->n_msgs);
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
    if (!parse_root(body, len, &root, err))
        return false;
    bool ok = check_model(root, lim, &r->model, err);
    const cJSON *p = field(root, "prompt");
    if (ok && p && field(root, "messages"))
        ok = srv_error_set(err, SRV_ERR_INVALID, "prompt", "give either 'prompt' or 'messages', not both");
    if (ok && p) {
        r->add_special_tokens = true;
        const char *text;
        if ((ok = get_str(root, "prompt", &text, err))) {
            r->prompt = inferd_strdup(text);
            r->prompt_len = strlen(r->prompt);
        }
    } else if (ok) {
        ok = parse_chat(root, true, &r->chat, &r->msgs, &r->n_msgs, err);
        if (!ok && !field(root, "messages"))
            srv_error_set(err, SRV_ERR_INVALID, "prompt", "'prompt' (string) or 'messages' is required");
    }
    bool present;
    if (ok)
        ok = get_bool(root, "add_special_tokens", &r->add_special_tokens, &present, err);
    cJSON_Delete(root);
    if (!ok)
        srv_tokenize_free(r);
    return ok;
}

void srv_tokenize_free(srv_tokenize_req *r)
{
    inferd_free(r->model);
    inferd_free(r->prompt);
    msgs_free(r->msgs, r->n_msgs);
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
    if (!parse_root(body, len, &root, err))
        return false;
    bool ok = check_model(root, lim, &r->model, err);
    const cJSON *t = field(root, "tokens");
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

/* ---- field readers shared with srv_responses.c (srv_openai_int.h) ---------- */

const cJSON *srv_oa_field(const cJSON *obj, const char *name)
{
    return field(obj, name);
}

bool srv_oa_parse_root(const char *body, size_t len, cJSON **root, srv_error *err)
{
    return parse_root(body, len, root, err);
}

bool srv_oa_check_model(const cJSON *root, const srv_parse_limits *lim, char **model_out, srv_error *err)
{
    return check_model(root, lim, model_out, err);
}

bool srv_oa_get_str(const cJSON *obj, const char *name, const char **out, srv_error *err)
{
    return get_str(obj, name, out, err);
}

bool srv_oa_get_bool(const cJSON *obj, const char *name, bool *out, srv_error *err)
{
    bool present;
    return get_bool(obj, name, out, &present, err);
}

bool srv_oa_get_int(const cJSON *obj, const char *name, int64_t lo, int64_t hi, int64_t *out, bool *present,
                    srv_error *err)
{
    return get_int(obj, name, lo, hi, out, present, err);
}

bool srv_oa_get_row(const cJSON *root, const char *json_name, const char *key, sampling_params *sp,
                    bool *present, srv_error *err)
{
    return get_row(root, json_name, key, sp, present, err);
}

bool srv_oa_validate_sampling(const cJSON *root, const srv_parse_limits *lim, srv_request *r, srv_error *err)
{
    return validate_sampling(root, lim, r, err);
}
