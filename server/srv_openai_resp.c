/* server/srv_openai_resp.c: response bodies and stream chunks in OpenAI's
 * shapes (declared in srv_openai.h).
 *
 * Every text that reaches JSON goes through srv_utf8_sanitize first: model
 * output can contain bytes that are not valid UTF-8 (byte-fallback tokens of
 * a multi-byte character cut by max_tokens), and a client's JSON parser must
 * never see them. Timings ride beside usage as a top-level "timings" object.
 *
 * Design choice: bodies are built as cJSON trees and printed once, not
 * written by hand: escaping is then cJSON's problem and every body is valid
 * JSON by construction. The cost is an allocation per node, negligible next
 * to a token's forward pass. Every builder returns a heap string from
 * inferd_strdup (freed with inferd_free, like every other body in server/)
 * and takes ownership of any cJSON argument it is given.
 * Threads: pure functions, called on event-loop threads.
 */
#include <string.h>

#include "common/alloc.h"
#include "common/check.h"
#include "common/util.h"
#include "server/srv_openai.h"
#include "server/srv_openai_int.h"
#include "server/srv_util.h"

/* text is len bytes, not NUL-terminated, and may be NULL ("" then). */
static void add_text(cJSON *obj, const char *key, const char *text, size_t len)
{
    char *s = srv_utf8_sanitize(text ? text : "", text ? len : 0);
    cJSON_AddStringToObject(obj, key, s);
    inferd_free(s);
}

/* Print and free root. The copy moves the string from cJSON's allocator to
 * ours, so callers free every body the same way. NOTE: print failure is
 * out of memory and aborts, like every allocation in inferd. */
static char *print_take(cJSON *root)
{
    char *out = cJSON_PrintUnformatted(root);
    INFERD_CHECK(out != NULL);
    cJSON_Delete(root);
    char *s = inferd_strdup(out);
    cJSON_free(out);
    return s;
}

/* Rounded to microseconds (3 decimals of a millisecond) so bodies do not
 * carry 17 digits of noise; negative means unknown and prints null. */
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

/* The envelope every body and chunk shares: id, object type, created
 * (Unix seconds), model. */
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

/* The non-streaming body: every choice in index order, usage, timings. */
char *srv_resp_full(srv_api api, const srv_resp_meta *m, srv_choice_body *choices, int n, const srv_usage *u,
                    const srv_timings *t)
{
    cJSON *root = meta_json(api, m, false);
    cJSON *arr = cJSON_AddArrayToObject(root, "choices");
    for (int i = 0; i < n; i++) {
        const srv_choice_body *b = &choices[i];
        cJSON *c = cJSON_CreateObject();
        cJSON_AddNumberToObject(c, "index", i);
        if (api == SRV_API_CHAT) {
            cJSON *msg = cJSON_AddObjectToObject(c, "message");
            cJSON_AddStringToObject(msg, "role", "assistant");
            add_text(msg, "content", b->text, b->len);
        } else {
            add_text(c, "text", b->text, b->len);
        }
        add_logprobs(c, b->logprobs);
        choices[i].logprobs = NULL; /* taken */
        add_finish(c, b->finish);
        cJSON_AddItemToArray(arr, c);
    }
    cJSON_AddItemToObject(root, "usage", inferd_usage_json(u));
    cJSON_AddItemToObject(root, "timings", timings_json(t));
    return print_take(root);
}

/* NOTE: a completions chunk always has "text" (NULL renders as ""), while a
 * chat delta omits "content" when text is NULL: the finish chunk of a chat
 * stream has an empty delta, as OpenAI sends it. */
char *srv_chunk_delta(srv_api api, const srv_resp_meta *m, int index, const char *role, const char *text,
                      size_t len, const char *finish, cJSON *logprobs, bool usage_null, const srv_timings *t)
{
    cJSON *root = meta_json(api, m, true);
    cJSON *choices = cJSON_AddArrayToObject(root, "choices");
    cJSON *c = cJSON_CreateObject();
    cJSON_AddNumberToObject(c, "index", index);
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

/* max_model_len is vLLM's extension; OpenAI clients ignore it. */
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

/* single: GET /v1/models/{id} (the object); else the list of one. */
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

/* The empty logprobs object of each API: chat has one array of entries,
 * completions four parallel arrays (tokens, logprobs, top, offsets). */
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

/* OpenAI's "bytes": the token text as an array of byte values. NOTE: built
 * from the text token_text returned (sanitized UTF-8 or the vocabulary
 * piece), so for a token that is part of a multi-byte character it does
 * not hold the raw bytes a client would need to rebuild the character. */
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

/* One sampled token and its top-N alternatives, in chat's shape. fn
 * returns heap strings, freed here. */
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

/* One token in the legacy completions shape, where top_logprobs is an
 * object keyed by token text: two alternatives with the same text (which
 * happens with byte tokens rendered alike) keep the first one listed.
 * NOTE: text_offset advances by the byte length of each token's rendered
 * text; it matches offsets into the response text only when each token
 * decodes on its own (not for pieces of a multi-byte character). */
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

/* Append n tokens' entries to lp (from srv_lp_new of the same api). */
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

void srv_lp_append_prompt(cJSON *lp, int32_t first0, const engine_logprob *lps, int n, srv_token_text_fn fn,
                          void *user, size_t echo_len)
{
    char *tok = fn(user, first0);
    cJSON_AddItemToArray(cJSON_GetObjectItemCaseSensitive(lp, "tokens"), cJSON_CreateString(tok));
    cJSON_AddItemToArray(cJSON_GetObjectItemCaseSensitive(lp, "token_logprobs"), cJSON_CreateNull());
    cJSON_AddItemToArray(cJSON_GetObjectItemCaseSensitive(lp, "top_logprobs"), cJSON_CreateNull());
    cJSON_AddItemToArray(cJSON_GetObjectItemCaseSensitive(lp, "text_offset"), cJSON_CreateNumber(0));
    size_t off = INFERD_MIN(strlen(tok), echo_len);
    inferd_free(tok);
    for (int i = 0; i < n; i++) {
        append_completion(lp, &lps[i], fn, user, &off);
        off = INFERD_MIN(off, echo_len);
    }
}

/* ---- helpers shared with srv_responses.c (srv_openai_int.h) ----------------- */

void srv_oa_add_text(cJSON *obj, const char *key, const char *text, size_t len)
{
    add_text(obj, key, text, len);
}

char *srv_oa_print_take(cJSON *root)
{
    return print_take(root);
}

cJSON *srv_oa_timings_json(const srv_timings *t)
{
    return timings_json(t);
}
