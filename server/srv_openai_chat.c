/* server/srv_openai_chat.c: the chat half of request parsing: the
 * "messages" of /v1/chat/completions and /tokenize checked and copied into
 * the shape the chat template takes, with the other template inputs
 * (tools, documents, chat_template_kwargs, the generation-prompt flags).
 *
 * What the template gets follows vLLM: content as a string or text parts,
 * an assistant's tool calls with their arguments parsed from JSON, its
 * reasoning under both names templates read, a tool message's id. Client
 * values handed to the template as they are (tools, documents, kwargs,
 * tool-call arguments) are bounded in nesting and checked for UTF-8 here,
 * because the template engine (Python) would refuse or recurse on them.
 * The bytes of client text are counted as they are read (text_bytes), for
 * srv_gen's prompt size bound. The field readers are srv_openai.c's
 * (srv_openai_int.h), so errors read the same as the other fields'.
 * Threads: pure functions of their inputs, called on event-loop threads.
 */
#include "server/srv_openai.h"
#include "server/srv_openai_int.h"

#include <stdio.h>
#include <string.h>

#include "common/alloc.h"
#include "common/buf.h"
#include "common/util.h"

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
static bool check_free_value(const cJSON *v, const char *param, const char *what, size_t *bytes,
                             srv_error *err)
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
static bool parse_content(const cJSON *c, int idx, srv_chat_role role, cJSON **json, char **flat,
                          size_t *bytes, srv_error *err)
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
            return srv_error_set(
                err, SRV_ERR_INVALID, "messages",
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
        return srv_error_set(err, SRV_ERR_INVALID, "messages", "messages[%d].content is not valid UTF-8",
                             idx);
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
    const cJSON *v = srv_oa_field(m, key);
    if (!v)
        return true;
    if (!cJSON_IsString(v) || !util_utf8_valid(v->valuestring, strlen(v->valuestring)))
        return srv_error_set(err, SRV_ERR_INVALID, "messages",
                             "messages[%d].%s must be a string (valid UTF-8)", idx, key);
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
                      "messages[%d].tool_calls[%d].function.arguments must be a JSON string or an object",
                      idx, k);
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
    const cJSON *fn = cJSON_IsObject(tc) ? srv_oa_field(tc, "function") : NULL;
    const cJSON *name = cJSON_IsObject(fn) ? srv_oa_field(fn, "name") : NULL;
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
    cJSON *args =
        ok ? tool_call_arguments(cJSON_GetObjectItemCaseSensitive(fn, "arguments"), idx, k, bytes, err)
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
    const cJSON *tcs = srv_oa_field(m, "tool_calls");
    if (!tcs)
        return true;
    if (!cJSON_IsArray(tcs))
        return srv_error_set(err, SRV_ERR_INVALID, "messages", "messages[%d].tool_calls must be an array",
                             idx);
    int n = cJSON_GetArraySize(tcs);
    if (n > SRV_CHAT_MAX_TOOL_CALLS)
        return srv_error_set(err, SRV_ERR_INVALID, "messages",
                             "messages[%d].tool_calls has %d entries; at most %d", idx, n,
                             SRV_CHAT_MAX_TOOL_CALLS);
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
        return srv_error_set(err, SRV_ERR_INVALID, "messages",
                             "messages[%d] must be an object with a string 'role'", idx);
    for (int r = 0; r < SRV_ROLE_COUNT; r++) {
        if (strcmp(role->valuestring, srv_chat_role_name((srv_chat_role)r)) == 0) {
            *out = (srv_chat_role)r;
            return true;
        }
    }
    return srv_error_set(err, SRV_ERR_INVALID, "messages",
                         "messages[%d].role must be 'system', 'developer', 'user', 'assistant' or 'tool'",
                         idx);
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
    if (!parse_content(cJSON_GetObjectItemCaseSensitive(m, "content"), idx, flat->role, &content,
                       &flat->content, bytes, err))
        return NULL;
    cJSON *out = cJSON_CreateObject();
    cJSON_AddStringToObject(out, "role", srv_chat_role_name(flat->role));
    cJSON_AddItemToObject(out, "content", content);
    bool ok = copy_msg_str(m, idx, "name", out, bytes, err);
    if (ok && flat->role == SRV_ROLE_ASSISTANT) {
        ok = parse_tool_calls(m, idx, out, bytes, err);
        const char *key = srv_oa_field(m, "reasoning") ? "reasoning" : "reasoning_content";
        const cJSON *rs = srv_oa_field(m, key);
        if (ok && rs && (!cJSON_IsString(rs) || !util_utf8_valid(rs->valuestring, strlen(rs->valuestring))))
            ok =
                srv_error_set(err, SRV_ERR_INVALID, "messages", "messages[%d].%s must be a string", idx, key);
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

/* Safe on NULL and on a half-filled array (calloc'ed, unset contents NULL). */
void srv_oa_msgs_free(srv_chat_msg *msgs, int n)
{
    for (int i = 0; i < n && msgs; i++)
        inferd_free(msgs[i].content);
    inferd_free(msgs);
}

/* "messages": c->messages (the template's view) and *msgs (the flat view,
 * heap, cnt entries) on success; nothing kept on failure. The count is
 * checked before any message is copied. */
static bool parse_messages(const cJSON *root, srv_chat_req *c, srv_chat_msg **msgs, int *n_msgs,
                           srv_error *err)
{
    const cJSON *m = srv_oa_field(root, "messages");
    if (!m)
        return srv_error_set(err, SRV_ERR_INVALID, "messages", "'messages' is required");
    if (!cJSON_IsArray(m))
        return srv_error_set(err, SRV_ERR_INVALID, "messages", "'messages' must be an array");
    int cnt = cJSON_GetArraySize(m);
    if (cnt == 0)
        return srv_error_set(err, SRV_ERR_INVALID, "messages", "'messages' must not be empty");
    if (cnt > SRV_CHAT_MAX_MESSAGES)
        return srv_error_set(err, SRV_ERR_INVALID, "messages",
                             "'messages' has %d entries; at most %d are allowed", cnt, SRV_CHAT_MAX_MESSAGES);
    srv_chat_msg *v = inferd_calloc((size_t)cnt, sizeof *v);
    cJSON *arr = cJSON_CreateArray();
    int i = 0;
    const cJSON *it;
    cJSON_ArrayForEach(it, m)
    {
        cJSON *one = parse_message(it, i, &v[i], &c->text_bytes, err);
        if (!one) {
            srv_oa_msgs_free(v, cnt);
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
    const cJSON *v = srv_oa_field(root, key);
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
    const cJSON *kw = srv_oa_field(root, "chat_template_kwargs");
    if (!kw)
        return true;
    if (!cJSON_IsObject(kw))
        return srv_error_set(err, SRV_ERR_INVALID, "chat_template_kwargs",
                             "'chat_template_kwargs' must be an object");
    int n = cJSON_GetArraySize(kw);
    if (n > SRV_CHAT_MAX_KWARGS)
        return srv_error_set(err, SRV_ERR_INVALID, "chat_template_kwargs",
                             "'chat_template_kwargs' has %d members; at most %d are allowed", n,
                             SRV_CHAT_MAX_KWARGS);
    const cJSON *it;
    cJSON_ArrayForEach(it, kw)
    {
        for (size_t k = 0; k < INFERD_ARRAY_LEN(k_reserved); k++)
            if (strcmp(it->string, k_reserved[k]) == 0)
                return srv_error_set(
                    err, SRV_ERR_INVALID, "chat_template_kwargs",
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
    c->add_generation_prompt = true;
    c->continue_final_message = false;
    if (!srv_oa_get_bool(root, "continue_final_message", &c->continue_final_message, err) ||
        !srv_oa_get_bool(root, "add_generation_prompt", &c->add_generation_prompt, err))
        return false;
    /* add_generation_prompt defaults to true, so only an explicit true conflicts. */
    bool agp_given = srv_oa_field(root, "add_generation_prompt") != NULL;
    if (c->continue_final_message && agp_given && c->add_generation_prompt)
        return srv_error_set(
            err, SRV_ERR_INVALID, "continue_final_message",
            "'continue_final_message' and 'add_generation_prompt' cannot both be true: the first "
            "continues the final message, the second opens a new assistant turn");
    if (c->continue_final_message)
        c->add_generation_prompt = false;
    return true;
}

/* Everything a chat request hands the template. with_tools: /tokenize
 * passes "tools" to the template; chat completions refuse a non-empty
 * "tools" earlier (srv_openai.c's check_unsupported) until tool-call
 * parsing exists. */
bool srv_oa_parse_chat(const cJSON *root, bool with_tools, srv_chat_req *c, srv_chat_msg **msgs, int *n_msgs,
                       srv_error *err)
{
    return parse_messages(root, c, msgs, n_msgs, err) && parse_prompt_flags(root, c, err) &&
           parse_kwargs(root, c, err) &&
           parse_item_list(root, "documents", &c->documents, &c->text_bytes, err) &&
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
