/* server/srv_responses.c: /v1/responses requests and their output (see
 * srv_responses.h).
 *
 * Design choice: a Responses request is translated into the chat request
 * inferd already serves (a message list for the chat template, the same
 * sampling rows), so tokenization, stop handling, streaming and the engine
 * path are the chat path byte for byte; only the wire shapes differ. The
 * field readers are srv_openai.c's (srv_openai_int.h), so a type error or
 * a range reads the same as on /v1/chat/completions.
 *
 * Leniency follows the other endpoints: unknown fields are ignored, null
 * means "not given", and a field we cannot honour is accepted only at its
 * neutral value (tools [], tool_choice "auto"/"none", truncation
 * "disabled", an all-null reasoning object, an empty include list, store
 * either way since nothing is stored: the Response says "store": false).
 *
 * Output: one output message with one output_text part. Events are built as
 * cJSON trees (valid JSON, sanitized text) and written as "event:" +
 * "data:" pairs, which is how OpenAI streams them and what the openai and
 * AI SDK clients parse (both key on the JSON "type", the event line is for
 * generic SSE readers). Threads: pure functions, event-loop threads.
 */
#include "server/srv_responses.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/alloc.h"
#include "common/util.h"
#include "server/srv_openai_int.h"

/* ---- request ---------------------------------------------------------------- */

/* Fields that need state inferd does not keep. Any non-null value is
 * refused: answering without the referenced state would silently drop the
 * conversation the client thinks it continues. */
static const struct {
    const char *name, *why;
} k_stateful[] = {
    {"previous_response_id", "inferd does not store responses; send the whole conversation in 'input'"},
    {"conversation", "inferd does not store conversations; send the whole conversation in 'input'"},
    {"prompt", "stored prompt templates are not supported; send 'input' and 'instructions'"},
};

/* reasoning: only an object whose every value is null (what a client
 * that spreads optional settings sends) is neutral. */
static bool check_reasoning(const cJSON *root, srv_error *err)
{
    const cJSON *rs = srv_oa_field(root, "reasoning");
    if (!rs)
        return true;
    if (!cJSON_IsObject(rs))
        return srv_error_set(err, SRV_ERR_INVALID, "reasoning", "'reasoning' must be an object");
    const cJSON *it;
    cJSON_ArrayForEach(it, rs)
    {
        if (!cJSON_IsNull(it))
            return srv_error_set(err, SRV_ERR_INVALID, "reasoning",
                                 "'reasoning.%.64s' is not supported: this model has no reasoning settings",
                                 it->string);
    }
    return true;
}

/* tools, tool_choice, include: inferd's Responses endpoint produces text
 * only, so every one of them must be empty or neutral. */
static bool check_tools(const cJSON *root, srv_error *err)
{
    const cJSON *t = srv_oa_field(root, "tools");
    if (t && !cJSON_IsArray(t))
        return srv_error_set(err, SRV_ERR_INVALID, "tools", "'tools' must be an array");
    if (t && cJSON_GetArraySize(t) > 0)
        return srv_error_set(err, SRV_ERR_INVALID, "tools",
                             "'tools' is not supported: /v1/responses generates text only");
    const cJSON *tc = srv_oa_field(root, "tool_choice");
    if (tc && !(cJSON_IsString(tc) && (!strcmp(tc->valuestring, "auto") || !strcmp(tc->valuestring, "none"))))
        return srv_error_set(err, SRV_ERR_INVALID, "tool_choice",
                             "'tool_choice' must be \"auto\" or \"none\" (no tools are supported)");
    const cJSON *inc = srv_oa_field(root, "include");
    if (inc && !cJSON_IsArray(inc))
        return srv_error_set(err, SRV_ERR_INVALID, "include", "'include' must be an array of strings");
    if (inc && cJSON_GetArraySize(inc) > 0)
        return srv_error_set(err, SRV_ERR_INVALID, "include",
                             "'include' must be empty: no extra output (logprobs, tool results, reasoning) "
                             "is available");
    return true;
}

/* text.format must be {"type": "text"}; truncation "disabled"; logprobs
 * (top_logprobs) 0. */
static bool check_output_options(const cJSON *root, srv_error *err)
{
    const cJSON *text = srv_oa_field(root, "text");
    if (text && !cJSON_IsObject(text))
        return srv_error_set(err, SRV_ERR_INVALID, "text", "'text' must be an object");
    const cJSON *fmt = text ? srv_oa_field(text, "format") : NULL;
    if (fmt) {
        const cJSON *ty = cJSON_IsObject(fmt) ? cJSON_GetObjectItemCaseSensitive(fmt, "type") : NULL;
        if (!cJSON_IsString(ty) || strcmp(ty->valuestring, "text") != 0)
            return srv_error_set(err, SRV_ERR_INVALID, "text",
                                 "'text.format' other than {\"type\": \"text\"} is not supported");
    }
    const char *trunc;
    if (!srv_oa_get_str(root, "truncation", &trunc, err))
        return false;
    if (trunc && strcmp(trunc, "disabled") != 0)
        return srv_error_set(err, SRV_ERR_INVALID, "truncation",
                             "'truncation' must be \"disabled\": inferd never drops input to make it fit");
    int64_t v;
    bool present;
    if (!srv_oa_get_int(root, "top_logprobs", 0, SAMPLING_MAX_LOGPROBS, &v, &present, err))
        return false;
    if (present && v > 0)
        return srv_error_set(err, SRV_ERR_INVALID, "top_logprobs",
                             "'top_logprobs' is not supported on /v1/responses (use /v1/chat/completions)");
    return true;
}

/* Everything refused or type-checked before the sampling fields. The
 * ignored fields (metadata, user, parallel_tool_calls, service_tier, ...)
 * are type-checked only where a wrong type hints at a client bug. */
static bool check_unsupported(const cJSON *root, srv_error *err)
{
    for (size_t i = 0; i < INFERD_ARRAY_LEN(k_stateful); i++)
        if (srv_oa_field(root, k_stateful[i].name))
            return srv_error_set(err, SRV_ERR_INVALID, k_stateful[i].name, "'%s' is not supported: %s",
                                 k_stateful[i].name, k_stateful[i].why);
    bool b = false;
    if (!srv_oa_get_bool(root, "background", &b, err))
        return false;
    if (b)
        return srv_error_set(err, SRV_ERR_INVALID, "background", "'background' responses are not supported");
    if (!srv_oa_get_bool(root, "store", &b, err) || !srv_oa_get_bool(root, "parallel_tool_calls", &b, err))
        return false;
    const cJSON *md = srv_oa_field(root, "metadata");
    if (md && !cJSON_IsObject(md))
        return srv_error_set(err, SRV_ERR_INVALID, "metadata", "'metadata' must be an object");
    return check_reasoning(root, err) && check_tools(root, err) && check_output_options(root, err);
}

/* temperature and top_p (the API's), plus inferd's extensions top_k,
 * min_p and seed, through the sampling rows; max_output_tokens through
 * the max_tokens row into r->max_tokens (0 = not given, srv_gen picks). */
static bool parse_sampling(const cJSON *root, srv_request *r, srv_error *err)
{
    static const char *const k_keys[] = {"temperature", "top_p", "top_k", "min_p", "seed"};
    bool present;
    for (size_t i = 0; i < INFERD_ARRAY_LEN(k_keys); i++)
        if (!srv_oa_get_row(root, k_keys[i], k_keys[i], &r->sp, &present, err))
            return false;
    sampling_params mt = r->sp;
    if (!srv_oa_get_row(root, "max_output_tokens", "max_tokens", &mt, &present, err))
        return false;
    if (present)
        r->max_tokens = mt.max_tokens;
    return true;
}

/* stream, and stream_options (an object, only with stream: true; its
 * include_obfuscation has nothing to obfuscate here and is ignored). */
static bool parse_stream(const cJSON *root, srv_request *r, srv_error *err)
{
    if (!srv_oa_get_bool(root, "stream", &r->stream, err))
        return false;
    const cJSON *so = srv_oa_field(root, "stream_options");
    if (so && !cJSON_IsObject(so))
        return srv_error_set(err, SRV_ERR_INVALID, "stream_options", "'stream_options' must be an object");
    if (so && !r->stream)
        return srv_error_set(err, SRV_ERR_INVALID, "stream_options",
                             "'stream_options' is only allowed when 'stream' is true");
    return true;
}

/* A message's role; "developer" is the newer name of "system". */
static bool parse_role(const cJSON *item, int i, srv_chat_role *out, srv_error *err)
{
    const cJSON *role = cJSON_GetObjectItemCaseSensitive(item, "role");
    const char *s = cJSON_IsString(role) ? role->valuestring : "";
    if (!strcmp(s, "user"))
        *out = SRV_ROLE_USER;
    else if (!strcmp(s, "assistant"))
        *out = SRV_ROLE_ASSISTANT;
    else if (!strcmp(s, "system") || !strcmp(s, "developer"))
        *out = SRV_ROLE_SYSTEM;
    else
        return srv_error_set(err, SRV_ERR_INVALID, "input",
                             "'input'[%d].role must be 'user', 'assistant', 'system' or 'developer'", i);
    return true;
}

/* A message's content: a string, or a list of text parts (input_text,
 * output_text for earlier assistant turns, or plain text) joined by "\n"
 * as chat content parts are. *out is heap, valid UTF-8. */
static bool parse_content(const cJSON *c, int i, char **out, srv_error *err)
{
    if (cJSON_IsString(c)) {
        if (!util_utf8_valid(c->valuestring, strlen(c->valuestring)))
            return srv_error_set(err, SRV_ERR_INVALID, "input", "'input'[%d].content is not valid UTF-8", i);
        *out = inferd_strdup(c->valuestring);
        return true;
    }
    if (!cJSON_IsArray(c))
        return srv_error_set(err, SRV_ERR_INVALID, "input",
                             "'input'[%d].content must be a string or an array of text parts", i);
    inferd_buf b = {0};
    int k = 0;
    const cJSON *part;
    cJSON_ArrayForEach(part, c)
    {
        const cJSON *ty = cJSON_IsObject(part) ? cJSON_GetObjectItemCaseSensitive(part, "type") : NULL;
        const cJSON *tx = cJSON_IsObject(part) ? cJSON_GetObjectItemCaseSensitive(part, "text") : NULL;
        const char *t = cJSON_IsString(ty) ? ty->valuestring : "";
        bool is_text = !strcmp(t, "input_text") || !strcmp(t, "output_text") || !strcmp(t, "text");
        if (!is_text || !cJSON_IsString(tx) || !util_utf8_valid(tx->valuestring, strlen(tx->valuestring))) {
            inferd_buf_free(&b);
            return srv_error_set(err, SRV_ERR_INVALID, "input",
                                 "'input'[%d].content[%d]: only text parts ({\"type\": \"input_text\", "
                                 "\"text\": string} in UTF-8) are supported",
                                 i, k);
        }
        if (k++ > 0)
            inferd_buf_append_str(&b, "\n");
        inferd_buf_append_str(&b, tx->valuestring);
    }
    *out = b.data ? inferd_buf_steal(&b, NULL) : inferd_strdup("");
    return true;
}

/* One input item: a message (type "message" or no type). Other item kinds
 * (function calls and their outputs, reasoning, item references) belong to
 * features that are refused, so they are refused by name. */
static bool parse_item(const cJSON *item, int i, srv_chat_msg *m, srv_error *err)
{
    if (!cJSON_IsObject(item))
        return srv_error_set(err, SRV_ERR_INVALID, "input", "'input'[%d] must be a message object", i);
    const cJSON *ty = srv_oa_field(item, "type");
    if (ty && !(cJSON_IsString(ty) && !strcmp(ty->valuestring, "message")))
        return srv_error_set(err, SRV_ERR_INVALID, "input",
                             "'input'[%d]: items of type '%.64s' are not supported (text messages only)", i,
                             cJSON_IsString(ty) ? ty->valuestring : "?");
    if (!parse_role(item, i, &m->role, err))
        return false;
    const cJSON *c = srv_oa_field(item, "content");
    if (!c)
        return srv_error_set(err, SRV_ERR_INVALID, "input", "'input'[%d].content is required", i);
    return parse_content(c, i, &m->content, err);
}

/* instructions (a leading system message) and input into r->msgs. */
static bool parse_input(const cJSON *root, srv_request *r, srv_error *err)
{
    const char *instr;
    if (!srv_oa_get_str(root, "instructions", &instr, err))
        return false;
    const cJSON *in = srv_oa_field(root, "input");
    if (!in)
        return srv_error_set(err, SRV_ERR_INVALID, "input", "'input' is required");
    if (!cJSON_IsString(in) && !cJSON_IsArray(in))
        return srv_error_set(err, SRV_ERR_INVALID, "input",
                             "'input' must be a string or an array of messages");
    if (cJSON_IsString(in) && !util_utf8_valid(in->valuestring, strlen(in->valuestring)))
        return srv_error_set(err, SRV_ERR_INVALID, "input", "'input' is not valid UTF-8");
    int n_items = cJSON_IsString(in) ? 1 : cJSON_GetArraySize(in);
    if (n_items == 0)
        return srv_error_set(err, SRV_ERR_INVALID, "input", "'input' must not be empty");
    int first = instr ? 1 : 0;
    r->msgs = inferd_calloc((size_t)(first + n_items), sizeof *r->msgs);
    if (instr) {
        r->instructions = inferd_strdup(instr);
        r->msgs[0] = (srv_chat_msg){SRV_ROLE_SYSTEM, inferd_strdup(instr)};
        r->n_msgs = 1;
    }
    if (cJSON_IsString(in)) {
        r->msgs[r->n_msgs++] = (srv_chat_msg){SRV_ROLE_USER, inferd_strdup(in->valuestring)};
        return true;
    }
    int i = 0;
    const cJSON *it;
    cJSON_ArrayForEach(it, in)
    {
        /* counted only once filled, so srv_request_free frees what exists */
        if (!parse_item(it, i, &r->msgs[r->n_msgs], err))
            return false;
        r->n_msgs++;
        i++;
    }
    return true;
}

/* The check order fixes which error a request with several faults gets:
 * model, unsupported features, sampling, stream, then the input (the
 * biggest field, read last). */
bool srv_responses_parse(const char *body, size_t len, const srv_parse_limits *lim, srv_request *r,
                         srv_error *err)
{
    memset(r, 0, sizeof *r);
    r->api = SRV_API_RESPONSES;
    if (lim->defaults)
        r->sp = *lim->defaults; /* generation_config.json, as for chat */
    else
        sampling_params_default(&r->sp);
    cJSON *root;
    if (!srv_oa_parse_root(body, len, &root, err))
        return false;
    bool ok = srv_oa_check_model(root, lim, &r->model, err) && check_unsupported(root, err) &&
              parse_sampling(root, r, err) && srv_oa_validate_sampling(root, lim, r, err) &&
              parse_stream(root, r, err) && parse_input(root, r, err);
    cJSON_Delete(root);
    if (!ok)
        srv_request_free(r);
    return ok;
}

/* ---- output ------------------------------------------------------------------ */

/* A float request value as the client wrote it: 0.7f prints as 0.7, not
 * 0.699999988. */
static double short_float(float v)
{
    char buf[32];
    snprintf(buf, sizeof buf, "%.6g", (double)v);
    return strtod(buf, NULL);
}

static const char *status_of(const srv_responses_state *st)
{
    if (st->fail)
        return "failed";
    if (st->finish == FINISH_NONE)
        return "in_progress";
    return st->finish == FINISH_LENGTH ? "incomplete" : "completed";
}

/* The output_text part: text, no annotations, no logprobs. */
static cJSON *text_part(const char *text, size_t len)
{
    cJSON *p = cJSON_CreateObject();
    cJSON_AddStringToObject(p, "type", "output_text");
    srv_oa_add_text(p, "text", text, len);
    cJSON_AddArrayToObject(p, "annotations");
    cJSON_AddArrayToObject(p, "logprobs");
    return p;
}

/* The output message; with_part false gives the empty item that
 * output_item.added announces. */
static cJSON *message_item(const srv_responses_meta *m, const char *status, bool with_part, const char *text,
                           size_t len)
{
    cJSON *it = cJSON_CreateObject();
    cJSON_AddStringToObject(it, "id", m->msg_id);
    cJSON_AddStringToObject(it, "type", "message");
    cJSON_AddStringToObject(it, "status", status);
    cJSON_AddStringToObject(it, "role", "assistant");
    cJSON *content = cJSON_AddArrayToObject(it, "content");
    if (with_part)
        cJSON_AddItemToArray(content, text_part(text, len));
    return it;
}

/* OpenAI's Responses usage: input/output/total plus the detail objects
 * clients read (cached prompt tokens; no reasoning tokens). */
static cJSON *usage_json(const srv_usage *u)
{
    cJSON *o = cJSON_CreateObject();
    cJSON_AddNumberToObject(o, "input_tokens", u->prompt_tokens);
    cJSON_AddNumberToObject(cJSON_AddObjectToObject(o, "input_tokens_details"), "cached_tokens",
                            u->cached_tokens);
    cJSON_AddNumberToObject(o, "output_tokens", u->completion_tokens);
    cJSON_AddNumberToObject(cJSON_AddObjectToObject(o, "output_tokens_details"), "reasoning_tokens", 0);
    cJSON_AddNumberToObject(o, "total_tokens", u->prompt_tokens + u->completion_tokens);
    return o;
}

/* The error object of a failed response: the same {message, type, param,
 * code} srv_errors.c renders for an HTTP error, so the code table stays
 * in one place. */
static cJSON *error_json(const srv_error *e)
{
    int status;
    char *body = srv_error_render(e, &status);
    cJSON *root = cJSON_Parse(body);
    inferd_free(body);
    cJSON *err = cJSON_DetachItemFromObjectCaseSensitive(root, "error");
    cJSON_Delete(root);
    return err ? err : cJSON_CreateNull();
}

/* The request settings a Response echoes back, at their fixed values
 * where inferd has only one. */
static void add_settings(cJSON *o, const srv_request *r)
{
    if (r->instructions)
        cJSON_AddStringToObject(o, "instructions", r->instructions);
    else
        cJSON_AddNullToObject(o, "instructions");
    if (r->max_tokens > 0)
        cJSON_AddNumberToObject(o, "max_output_tokens", (double)r->max_tokens);
    else
        cJSON_AddNullToObject(o, "max_output_tokens");
    cJSON_AddBoolToObject(o, "parallel_tool_calls", true);
    cJSON_AddNullToObject(o, "previous_response_id");
    cJSON *rs = cJSON_AddObjectToObject(o, "reasoning");
    cJSON_AddNullToObject(rs, "effort");
    cJSON_AddNullToObject(rs, "summary");
    cJSON_AddStringToObject(o, "service_tier", "default");
    cJSON_AddBoolToObject(o, "store", false);
    cJSON_AddNumberToObject(o, "temperature", short_float(r->sp.temperature));
    cJSON_AddStringToObject(cJSON_AddObjectToObject(cJSON_AddObjectToObject(o, "text"), "format"), "type",
                            "text");
    cJSON_AddStringToObject(o, "tool_choice", "auto");
    cJSON_AddArrayToObject(o, "tools");
    cJSON_AddNumberToObject(o, "top_p", short_float(r->sp.top_p));
    cJSON_AddStringToObject(o, "truncation", "disabled");
    cJSON_AddNullToObject(o, "user");
    cJSON_AddObjectToObject(o, "metadata");
}

/* The Response object in any state: in progress (no output, usage null),
 * finished (the message), or failed (the error, no output). */
static cJSON *response_json(const srv_responses_meta *m, const srv_responses_state *st)
{
    const char *status = status_of(st);
    cJSON *o = cJSON_CreateObject();
    cJSON_AddStringToObject(o, "id", m->id);
    cJSON_AddStringToObject(o, "object", "response");
    cJSON_AddNumberToObject(o, "created_at", (double)m->created);
    cJSON_AddStringToObject(o, "status", status);
    cJSON_AddBoolToObject(o, "background", false);
    cJSON_AddItemToObject(o, "error", st->fail ? error_json(st->fail) : cJSON_CreateNull());
    if (!st->fail && st->finish == FINISH_LENGTH)
        cJSON_AddStringToObject(cJSON_AddObjectToObject(o, "incomplete_details"), "reason",
                                "max_output_tokens");
    else
        cJSON_AddNullToObject(o, "incomplete_details");
    cJSON_AddStringToObject(o, "model", m->model);
    cJSON *output = cJSON_AddArrayToObject(o, "output");
    if (!st->fail && st->finish != FINISH_NONE)
        cJSON_AddItemToArray(output, message_item(m, status, true, st->text, st->len));
    add_settings(o, m->req);
    cJSON_AddItemToObject(o, "usage", st->usage ? usage_json(st->usage) : cJSON_CreateNull());
    if (st->timings)
        cJSON_AddItemToObject(o, "timings", srv_oa_timings_json(st->timings));
    return o;
}

char *srv_responses_body(const srv_responses_meta *m, const srv_responses_state *st)
{
    return srv_oa_print_take(response_json(m, st));
}

/* A new event object {"type", "sequence_number"}; *seq advances. */
static cJSON *event_new(const char *type, int *seq)
{
    cJSON *e = cJSON_CreateObject();
    cJSON_AddStringToObject(e, "type", type);
    cJSON_AddNumberToObject(e, "sequence_number", (*seq)++);
    return e;
}

/* The position fields of the events about the one text part. */
static void add_part_position(cJSON *e, const srv_responses_meta *m)
{
    cJSON_AddStringToObject(e, "item_id", m->msg_id);
    cJSON_AddNumberToObject(e, "output_index", 0);
    cJSON_AddNumberToObject(e, "content_index", 0);
}

/* Write e (taken) as one SSE event named by its type. */
static void emit(inferd_buf *out, cJSON *e)
{
    const cJSON *ty = cJSON_GetObjectItemCaseSensitive(e, "type");
    inferd_buf_append_str(out, "event: ");
    inferd_buf_append_str(out, ty->valuestring);
    inferd_buf_append_str(out, "\ndata: ");
    char *json = srv_oa_print_take(e);
    inferd_buf_append_str(out, json);
    inferd_free(json);
    inferd_buf_append_str(out, "\n\n");
}

void srv_responses_stream_begin(inferd_buf *out, const srv_responses_meta *m, int *seq)
{
    const srv_responses_state open = {.finish = FINISH_NONE};
    static const char *const k_open[] = {"response.created", "response.in_progress"};
    for (size_t i = 0; i < INFERD_ARRAY_LEN(k_open); i++) {
        cJSON *e = event_new(k_open[i], seq);
        cJSON_AddItemToObject(e, "response", response_json(m, &open));
        emit(out, e);
    }
    cJSON *e = event_new("response.output_item.added", seq);
    cJSON_AddNumberToObject(e, "output_index", 0);
    cJSON_AddItemToObject(e, "item", message_item(m, "in_progress", false, NULL, 0));
    emit(out, e);
    e = event_new("response.content_part.added", seq);
    add_part_position(e, m);
    cJSON_AddItemToObject(e, "part", text_part("", 0));
    emit(out, e);
}

void srv_responses_stream_delta(inferd_buf *out, const srv_responses_meta *m, int *seq, const char *text,
                                size_t len)
{
    cJSON *e = event_new("response.output_text.delta", seq);
    add_part_position(e, m);
    srv_oa_add_text(e, "delta", text, len);
    cJSON_AddArrayToObject(e, "logprobs");
    emit(out, e);
}

/* Success closes the part, the item, then the response (completed or
 * incomplete); a failure sends response.failed alone, as OpenAI does. */
void srv_responses_stream_end(inferd_buf *out, const srv_responses_meta *m, int *seq,
                              const srv_responses_state *st)
{
    if (st->fail) {
        cJSON *e = event_new("response.failed", seq);
        cJSON_AddItemToObject(e, "response", response_json(m, st));
        emit(out, e);
        return;
    }
    cJSON *e = event_new("response.output_text.done", seq);
    add_part_position(e, m);
    srv_oa_add_text(e, "text", st->text, st->len);
    cJSON_AddArrayToObject(e, "logprobs");
    emit(out, e);
    e = event_new("response.content_part.done", seq);
    add_part_position(e, m);
    cJSON_AddItemToObject(e, "part", text_part(st->text, st->len));
    emit(out, e);
    const char *status = status_of(st);
    e = event_new("response.output_item.done", seq);
    cJSON_AddNumberToObject(e, "output_index", 0);
    cJSON_AddItemToObject(e, "item", message_item(m, status, true, st->text, st->len));
    emit(out, e);
    e = event_new(st->finish == FINISH_LENGTH ? "response.incomplete" : "response.completed", seq);
    cJSON_AddItemToObject(e, "response", response_json(m, st));
    emit(out, e);
}
