/* server/srv_openai_resp.c: response bodies and stream chunks in OpenAI's
 * shapes (declared in srv_openai.h).
 *
 * Every text that reaches JSON goes through srv_utf8_sanitize first: model
 * output can contain bytes that are not valid UTF-8 (byte-fallback tokens of
 * a multi-byte character cut by max_tokens), and a client's JSON parser must
 * never see them. Timings ride beside usage as a top-level "timings" object.
 */
#include <string.h>

#include "common/alloc.h"
#include "common/check.h"
#include "server/srv_openai.h"
#include "server/srv_util.h"

static void add_text(cJSON *obj, const char *key, const char *text, size_t len)
{
    char *s = srv_utf8_sanitize(text ? text : "", text ? len : 0);
    cJSON_AddStringToObject(obj, key, s);
    inferd_free(s);
}

static char *print_take(cJSON *root)
{
    char *out = cJSON_PrintUnformatted(root);
    INFERD_CHECK(out != NULL);
    cJSON_Delete(root);
    char *s = inferd_strdup(out);
    cJSON_free(out);
    return s;
}

static void add_ms(cJSON *o, const char *key, double v)
{
    if (v < 0)
        cJSON_AddNullToObject(o, key);
    else
        cJSON_AddNumberToObject(o, key, (double)(int64_t)(v * 1000.0 + 0.5) / 1000.0);
}

static cJSON *timings_json(const srv_timings *t)
{
    cJSON *o = cJSON_CreateObject();
    add_ms(o, "queue_ms", t->queue_ms);
    add_ms(o, "ttft_ms", t->ttft_ms);
    add_ms(o, "prefill_ms", t->prefill_ms);
    add_ms(o, "decode_ms", t->decode_ms);
    add_ms(o, "total_ms", t->total_ms);
    return o;
}

static cJSON *meta_json(srv_api api, const srv_resp_meta *m, bool chunk)
{
    cJSON *o = cJSON_CreateObject();
    cJSON_AddStringToObject(o, "id", m->id);
    const char *object =
        api == SRV_API_CHAT ? (chunk ? "chat.completion.chunk" : "chat.completion") : "text_completion";
    cJSON_AddStringToObject(o, "object", object);
    cJSON_AddNumberToObject(o, "created", (double)m->created);
    cJSON_AddStringToObject(o, "model", m->model);
    return o;
}

static void add_finish(cJSON *choice, const char *finish)
{
    if (finish)
        cJSON_AddStringToObject(choice, "finish_reason", finish);
    else
        cJSON_AddNullToObject(choice, "finish_reason");
}

static void add_logprobs(cJSON *choice, cJSON *logprobs)
{
    if (logprobs)
        cJSON_AddItemToObject(choice, "logprobs", logprobs);
    else
        cJSON_AddNullToObject(choice, "logprobs");
}

char *srv_resp_full(srv_api api, const srv_resp_meta *m, const char *text, size_t len, const char *finish,
                    cJSON *logprobs, const srv_usage *u, const srv_timings *t)
{
    cJSON *root = meta_json(api, m, false);
    cJSON *choices = cJSON_AddArrayToObject(root, "choices");
    cJSON *c = cJSON_CreateObject();
    cJSON_AddNumberToObject(c, "index", 0);
    if (api == SRV_API_CHAT) {
        cJSON *msg = cJSON_AddObjectToObject(c, "message");
        cJSON_AddStringToObject(msg, "role", "assistant");
        add_text(msg, "content", text, len);
    } else {
        add_text(c, "text", text, len);
    }
    add_logprobs(c, logprobs);
    add_finish(c, finish);
    cJSON_AddItemToArray(choices, c);
    cJSON_AddItemToObject(root, "usage", inferd_usage_json(u));
    cJSON_AddItemToObject(root, "timings", timings_json(t));
    return print_take(root);
}

char *srv_chunk_delta(srv_api api, const srv_resp_meta *m, const char *role, const char *text, size_t len,
                      const char *finish, cJSON *logprobs, bool usage_null, const srv_timings *t)
{
    cJSON *root = meta_json(api, m, true);
    cJSON *choices = cJSON_AddArrayToObject(root, "choices");
    cJSON *c = cJSON_CreateObject();
    cJSON_AddNumberToObject(c, "index", 0);
    if (api == SRV_API_CHAT) {
        cJSON *delta = cJSON_AddObjectToObject(c, "delta");
        if (role)
            cJSON_AddStringToObject(delta, "role", role);
        if (text)
            add_text(delta, "content", text, len);
    } else {
        add_text(c, "text", text, len);
    }
    add_logprobs(c, logprobs);
    add_finish(c, finish);
    cJSON_AddItemToArray(choices, c);
    if (usage_null)
        cJSON_AddNullToObject(root, "usage");
    if (t)
        cJSON_AddItemToObject(root, "timings", timings_json(t));
    return print_take(root);
}

char *srv_chunk_usage(srv_api api, const srv_resp_meta *m, const srv_usage *u, const srv_timings *t)
{
    cJSON *root = meta_json(api, m, true);
    cJSON_AddArrayToObject(root, "choices");
    cJSON_AddItemToObject(root, "usage", inferd_usage_json(u));
    if (t)
        cJSON_AddItemToObject(root, "timings", timings_json(t));
    return print_take(root);
}

static cJSON *model_json(const char *name, int64_t created, int max_model_len)
{
    cJSON *o = cJSON_CreateObject();
    cJSON_AddStringToObject(o, "id", name);
    cJSON_AddStringToObject(o, "object", "model");
    cJSON_AddNumberToObject(o, "created", (double)created);
    cJSON_AddStringToObject(o, "owned_by", "inferd");
    cJSON_AddNumberToObject(o, "max_model_len", max_model_len);
    return o;
}

char *srv_resp_models(const char *name, int64_t created, int max_model_len, bool single)
{
    if (single)
        return print_take(model_json(name, created, max_model_len));
    cJSON *root = cJSON_CreateObject();
    cJSON_AddStringToObject(root, "object", "list");
    cJSON *data = cJSON_AddArrayToObject(root, "data");
    cJSON_AddItemToArray(data, model_json(name, created, max_model_len));
    return print_take(root);
}

char *srv_resp_tokenize(const int32_t *ids, int n, int max_model_len)
{
    cJSON *root = cJSON_CreateObject();
    cJSON_AddNumberToObject(root, "count", n);
    cJSON_AddNumberToObject(root, "max_model_len", max_model_len);
    cJSON *arr = cJSON_AddArrayToObject(root, "tokens");
    for (int i = 0; i < n; i++)
        cJSON_AddItemToArray(arr, cJSON_CreateNumber(ids[i]));
    return print_take(root);
}

char *srv_resp_detokenize(const char *text, size_t len)
{
    cJSON *root = cJSON_CreateObject();
    add_text(root, "prompt", text, len);
    return print_take(root);
}

/* ---- logprobs -------------------------------------------------------------- */

cJSON *srv_lp_new(srv_api api)
{
    cJSON *o = cJSON_CreateObject();
    if (api == SRV_API_CHAT) {
        cJSON_AddArrayToObject(o, "content");
    } else {
        cJSON_AddArrayToObject(o, "tokens");
        cJSON_AddArrayToObject(o, "token_logprobs");
        cJSON_AddArrayToObject(o, "top_logprobs");
        cJSON_AddArrayToObject(o, "text_offset");
    }
    return o;
}

static cJSON *bytes_json(const char *s)
{
    cJSON *arr = cJSON_CreateArray();
    for (const unsigned char *p = (const unsigned char *)s; *p; p++)
        cJSON_AddItemToArray(arr, cJSON_CreateNumber(*p));
    return arr;
}

static cJSON *chat_entry(const char *tok, float logprob)
{
    cJSON *e = cJSON_CreateObject();
    cJSON_AddStringToObject(e, "token", tok);
    cJSON_AddNumberToObject(e, "logprob", logprob);
    cJSON_AddItemToObject(e, "bytes", bytes_json(tok));
    return e;
}

static void append_chat(cJSON *lp, const engine_logprob *l, srv_token_text_fn fn, void *user)
{
    char *tok = fn(user, l->token);
    cJSON *e = chat_entry(tok, l->logprob);
    inferd_free(tok);
    cJSON *top = cJSON_AddArrayToObject(e, "top_logprobs");
    for (int k = 0; k < l->n_top; k++) {
        char *t = fn(user, l->top_ids[k]);
        cJSON_AddItemToArray(top, chat_entry(t, l->top_logprobs[k]));
        inferd_free(t);
    }
    cJSON_AddItemToArray(cJSON_GetObjectItemCaseSensitive(lp, "content"), e);
}

static void append_completion(cJSON *lp, const engine_logprob *l, srv_token_text_fn fn, void *user,
                              size_t *text_offset)
{
    char *tok = fn(user, l->token);
    cJSON_AddItemToArray(cJSON_GetObjectItemCaseSensitive(lp, "tokens"), cJSON_CreateString(tok));
    cJSON_AddItemToArray(cJSON_GetObjectItemCaseSensitive(lp, "token_logprobs"),
                         cJSON_CreateNumber(l->logprob));
    cJSON_AddItemToArray(cJSON_GetObjectItemCaseSensitive(lp, "text_offset"),
                         cJSON_CreateNumber((double)*text_offset));
    *text_offset += strlen(tok);
    inferd_free(tok);
    cJSON *top = cJSON_CreateObject();
    for (int k = 0; k < l->n_top; k++) {
        char *t = fn(user, l->top_ids[k]);
        if (!cJSON_GetObjectItemCaseSensitive(top, t))
            cJSON_AddNumberToObject(top, t, l->top_logprobs[k]);
        inferd_free(t);
    }
    cJSON_AddItemToArray(cJSON_GetObjectItemCaseSensitive(lp, "top_logprobs"), top);
}

void srv_lp_append(srv_api api, cJSON *lp, const engine_logprob *lps, int n, srv_token_text_fn fn, void *user,
                   size_t *text_offset)
{
    for (int i = 0; i < n; i++) {
        if (api == SRV_API_CHAT)
            append_chat(lp, &lps[i], fn, user);
        else
            append_completion(lp, &lps[i], fn, user, text_offset);
    }
}
