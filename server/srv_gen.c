/* server/srv_gen.c: see srv_gen.h.
 *
 * Prompt construction follows HF semantics: a text prompt is encoded with
 * the tokenizer's post-processor (BOS) unless add_special_tokens is false,
 * special-token text parsed; a chat prompt is rendered by the model's chat
 * template (which writes BOS itself) and encoded without the
 * post-processor, special-token text parsed only where the template wrote
 * it, not in message contents (srv_chat_encode). Token-id prompts go to the
 * engine unchanged.
 *
 * Length policy: prompt + max_tokens must pass the engine's fit check
 * (sched_fit_check: model length and KV capacity); when
 * max_tokens is not given, completions default to 16 (OpenAI's default) and
 * chat to whatever room the context has left (vLLM's default), both capped
 * by that room.
 *
 * Streaming text equals non-streaming text by construction: both are the
 * concatenation of the engine's text deltas; the stream only cuts it into
 * events. Timings are computed once at finish and go into the last event.
 *
 * Threads: srv_gen_start and everything after it run on the event-loop
 * thread that owns the connection (one at a time per request: MHD never
 * runs two callbacks of a connection at once), so a srv_gen needs no lock.
 * The engine thread only calls the notify passed in; output crosses through
 * the engine stream's own queue. Not done here: the wait/suspend protocol
 * (srv_http.c) and JSON shapes (srv_openai*.c).
 */
#include "server/srv_gen.h"

#include <stdio.h>
#include <string.h>

#include "common/alloc.h"
#include "common/buf.h"
#include "common/log.h"
#include "common/util.h"
#include "server/srv_util.h"

struct srv_gen {
    srv_server *s;
    srv_request req;
    engine_stream *stream;
    char id[48];
    srv_resp_meta meta;
    double t_recv;
    /* accumulated output */
    inferd_buf text;
    cJSON *logprobs; /* non-stream: whole request */
    size_t text_offset;
    int prompt_tokens, completion_tokens, cached_tokens;
    engine_times times;
    double last_token_t;
    bool finished, aborted;
    finish_reason finish;
    srv_error fail; /* kind != NONE when finished with an error */
    srv_timings timings;
    /* streaming */
    inferd_buf sse;
    bool sse_done;
};

/* The text of one token for logprobs entries (heap, valid UTF-8). A token
 * that is part of a multi-byte character decodes to invalid UTF-8 alone;
 * its vocabulary piece, sanitized, is then the most useful stand-in (JSON
 * strings must be valid UTF-8). */
static char *token_text(void *user, int32_t id)
{
    const tokenizer *tok = user;
    char *txt = NULL;
    size_t len = 0;
    if (tok_decode(tok, &id, 1, false, &txt, &len) == INFERD_OK && util_utf8_valid(txt, len) && len > 0)
        return txt;
    inferd_free(txt);
    const char *piece = tok_id_to_piece(tok, id);
    return srv_utf8_sanitize(piece ? piece : "", piece ? strlen(piece) : 0);
}

/* Encode the request's prompt into *ids.
 * *ids is heap on success (the caller frees it after submit: the engine
 * copies the prompt). Token-id prompts were range-checked by the parser.
 * An empty encoding is refused here rather than by the engine so the
 * message can say why (empty string, or only characters the vocabulary
 * drops). */
static bool build_prompt(srv_gen *g, int32_t **ids, int *n, srv_error *err)
{
    srv_server *s = g->s;
    srv_request *r = &g->req;
    inferd_status st;
    if (r->prompt_ids) {
        *ids = inferd_malloc(sizeof(int32_t) * (size_t)r->n_prompt_ids);
        memcpy(*ids, r->prompt_ids, sizeof(int32_t) * (size_t)r->n_prompt_ids);
        *n = r->n_prompt_ids;
        return true;
    }
    if (r->api == SRV_API_COMPLETIONS) {
        st = tok_encode(s->tok, r->prompt, r->prompt_len, r->add_special_tokens, true, ids, n);
    } else {
        srv_chat_inputs in = {.add_generation_prompt = true};
        if (!srv_chat_encode(s->chat, r->msgs, r->n_msgs, &in, ids, n, err))
            return false;
        st = INFERD_OK;
    }
    if (st != INFERD_OK) {
        srv_error_from_status(err, st, r->api == SRV_API_CHAT ? "messages" : "prompt");
        return false;
    }
    if (*n == 0) {
        inferd_free(*ids);
        *ids = NULL;
        return srv_error_set(err, SRV_ERR_INVALID, "prompt", "the prompt encodes to zero tokens");
    }
    return true;
}

/* Fill sp.max_tokens; 400 naming both numbers when it cannot fit. The
 * decision is the engine's fit check (model length and KV capacity), the
 * wording OpenAI's; the "maximum context length" reported is the effective
 * one (the KV cache may hold less than max_model_len). */
static bool check_length(srv_gen *g, int n_prompt, srv_error *err)
{
    srv_request *r = &g->req;
    sched_fit_limits lim;
    engine_get_fit_limits(g->s->eng, &lim);
    int64_t room = sched_fit_room(&lim, n_prompt);
    long long max_len = (long long)n_prompt + room;
    const char *pname = r->api == SRV_API_CHAT ? "messages" : "prompt";
    const char *mname = r->api == SRV_API_CHAT ? "max_completion_tokens" : "max_tokens";
    if (room < 1)
        return srv_error_set(err, SRV_ERR_CONTEXT_LENGTH, pname,
                             "This model's maximum context length is %lld tokens, but the prompt has %d tokens "
                             "(no room left for the completion). Please shorten the prompt.",
                             max_len, n_prompt);
    if (r->max_tokens == 0) {
        r->sp.max_tokens = (int32_t)(r->api == SRV_API_COMPLETIONS ? INFERD_MIN(16, room) : room);
    } else if (sched_fit_check(&lim, n_prompt, r->max_tokens) != INFERD_OK) {
        return srv_error_set(
            err, SRV_ERR_CONTEXT_LENGTH, mname,
            "This model's maximum context length is %lld tokens. However, you requested %lld tokens "
            "(%d in the prompt, %lld in the completion). Please reduce the prompt or %s.",
            max_len, (long long)(n_prompt + r->max_tokens), n_prompt, (long long)r->max_tokens, mname);
    } else {
        r->sp.max_tokens = (int32_t)r->max_tokens;
    }
    if (r->sp.min_tokens > r->sp.max_tokens)
        return srv_error_set(err, SRV_ERR_INVALID, "min_tokens",
                             "'min_tokens' (%d) exceeds the %d tokens available", r->sp.min_tokens,
                             r->sp.max_tokens);
    return true;
}

/* Chat: stop at the template's end-of-turn marker too.
 * The template's end-of-turn marker, preferably as a token id (exact and
 * cheap); as a stop string when it is not a single token. Silently skipped
 * when the client used every stop slot: the EOS token still ends the turn
 * in practice. The string copy is owned by g->req (freed with it). */
static void add_chat_stop(srv_gen *g)
{
    srv_server *s = g->s;
    sampling_params *sp = &g->req.sp;
    if (g->req.api != SRV_API_CHAT)
        return;
    int32_t stop_id = srv_chat_stop_id(s->chat);
    const char *stop_str = srv_chat_stop_str(s->chat);
    if (stop_id >= 0 && sp->n_stop_token_ids < SAMPLING_MAX_STOP) {
        for (int i = 0; i < sp->n_stop_token_ids; i++)
            if (sp->stop_token_ids[i] == stop_id)
                return;
        sp->stop_token_ids[sp->n_stop_token_ids++] = stop_id;
    } else if (stop_str && sp->n_stop < SAMPLING_MAX_STOP) {
        g->req.stops[sp->n_stop] = inferd_strdup(stop_str);
        sp->stop[sp->n_stop] = g->req.stops[sp->n_stop];
        sp->n_stop++;
    }
}

/* Append one SSE event; json is a heap string, taken. */
static void sse_event(srv_gen *g, char *json)
{
    inferd_buf_append_str(&g->sse, "data: ");
    inferd_buf_append_str(&g->sse, json);
    inferd_buf_append_str(&g->sse, "\n\n");
    inferd_free(json);
}

/* engine_submit's refusals become HTTP errors: queue full is 429 (with
 * Retry-After in srv_http.c), the rest keep the engine's status and the
 * field it named. The error slot is cleared first so a stale parameter
 * name from an earlier call on this thread cannot leak into the answer.
 * NOTE: notify may fire on the engine thread before engine_submit returns;
 * the caller has bound the slot already, and the consumer only pumps
 * once this function has stored g->stream. */
static bool submit(srv_gen *g, int32_t *ids, int n, void (*notify)(void *), void *user, srv_error *err)
{
    engine_request er;
    memset(&er, 0, sizeof er);
    er.prompt_ids = ids;
    er.n_prompt = n;
    er.sp = g->req.sp;
    er.timeout_s = g->s->opts.request_timeout_s;
    er.notify = notify;
    er.notify_user = user;
    inferd_clear_error();
    inferd_status st = engine_submit(g->s->eng, &er, &g->stream);
    if (st == INFERD_OK)
        return true;
    g->stream = NULL;
    if (st == INFERD_ERR_QUEUE_FULL)
        return srv_error_set(err, SRV_ERR_QUEUE_FULL, NULL,
                             "the server is at capacity (more than %d requests waiting); retry later",
                             g->s->opts.max_queued_requests);
    /* the engine names the field at fault; chat's prompt is its messages */
    const char *param = inferd_last_error_param();
    if (param && g->req.api == SRV_API_CHAT && strcmp(param, "prompt") == 0)
        param = "messages";
    srv_error_from_status(err, st, param);
    return false;
}

/* Event-loop thread. On failure everything is freed and nothing reached
 * the engine. The id is "cmpl-"/"chatcmpl-" + the engine's stream id + a
 * 16-bit server counter: unique per process, and it lets a log line be
 * matched with the engine's own traces. A chat stream opens with the role
 * chunk, as OpenAI's does, before any token exists. */
srv_gen *srv_gen_start(srv_server *s, srv_api api, const char *body, size_t len, double t_recv,
                       void (*notify)(void *), void *notify_user, srv_error *err)
{
    srv_gen *g = inferd_calloc(1, sizeof *g);
    g->s = s;
    g->t_recv = t_recv;
    srv_parse_limits lim = {s->opts.served_model_name, s->vocab_size};
    if (!srv_request_parse(api, body, len, &lim, &g->req, err)) {
        inferd_free(g);
        return NULL;
    }
    if (api == SRV_API_CHAT && !srv_chat_ready(s->chat)) {
        srv_error_set(err, SRV_ERR_NO_CHAT_TEMPLATE, "messages", "%s (or use /v1/completions)",
                      srv_chat_describe(s->chat));
        srv_gen_free(g);
        return NULL;
    }
    int32_t *ids = NULL;
    int n = 0;
    bool ok = build_prompt(g, &ids, &n, err) && check_length(g, n, err);
    if (ok) {
        add_chat_stop(g);
        ok = submit(g, ids, n, notify, notify_user, err);
    }
    inferd_free(ids);
    if (!ok) {
        srv_gen_free(g);
        return NULL;
    }
    g->prompt_tokens = n;
    snprintf(g->id, sizeof g->id, "%s-%016llx%04llx", api == SRV_API_CHAT ? "chatcmpl" : "cmpl",
             (unsigned long long)engine_stream_id(g->stream),
             (unsigned long long)(atomic_fetch_add(&s->next_id, 1) & 0xffff));
    g->meta.id = g->id;
    g->meta.created = util_unix_s();
    g->meta.model = s->opts.served_model_name;
    if (g->req.stream && api == SRV_API_CHAT)
        sse_event(g,
                  srv_chunk_delta(api, &g->meta, "assistant", "", 0, NULL, NULL, g->req.include_usage, NULL));
    return g;
}

bool srv_gen_is_stream(const srv_gen *g)
{
    return g->req.stream;
}

/* Milliseconds from a to b, or -1 when either stamp is missing (0): an
 * aborted request may never have been scheduled. */
static double ms_between(double a, double b)
{
    return a > 0 && b > 0 && b >= a ? (b - a) * 1e3 : -1.0;
}

/* Once per request, at its final output: the response timings and the
 * latency histograms. Missing phases (-1) are not observed rather than
 * recorded as zero, which would drag the histograms down. */
static void observe_finish(srv_gen *g)
{
    const engine_times *t = &g->times;
    double end = t->finished > 0 ? t->finished : util_now_s();
    srv_timings *tm = &g->timings;
    tm->queue_ms = ms_between(t->arrival, t->first_scheduled);
    tm->prefill_ms = ms_between(t->first_scheduled, t->prefill_done);
    tm->ttft_ms = ms_between(g->t_recv, t->first_token);
    tm->decode_ms = ms_between(t->first_token, t->last_token);
    tm->total_ms = ms_between(g->t_recv, end);
    srv_metrics *m = g->s->metrics;
    const struct {
        srv_hist_id h;
        double ms;
    } k[] = {{SRV_HIST_QUEUE, tm->queue_ms},
             {SRV_HIST_PREFILL, tm->prefill_ms},
             {SRV_HIST_TTFT, tm->ttft_ms},
             {SRV_HIST_DECODE, tm->decode_ms},
             {SRV_HIST_E2E, tm->total_ms}};
    for (size_t i = 0; i < INFERD_ARRAY_LEN(k); i++)
        if (k[i].ms >= 0)
            srv_metrics_observe(m, k[i].h, k[i].ms / 1e3, 1);
    srv_metrics_observe(m, SRV_HIST_PROMPT_LEN, g->prompt_tokens, 1);
    srv_metrics_observe(m, SRV_HIST_GEN_LEN, g->completion_tokens, 1);
}

/* Error of a request that finished without a normal finish reason.
 * The engine reports an abort without its cause; the cause is inferred
 * from server state. NOTE: the timeout test is a heuristic with 2% slack:
 * the engine's deadline runs from its own arrival stamp, not from t_recv,
 * and the two clocks' readings need not agree to the millisecond. An
 * abort for another reason near the timeout would be reported as one. */
static void set_failure(srv_gen *g, const engine_output *o)
{
    srv_server *s = g->s;
    double to = s->opts.request_timeout_s;
    if (o->finish == FINISH_ERROR)
        srv_error_set(&g->fail, SRV_ERR_INTERNAL, NULL, "generation failed: %s",
                      o->error[0] ? o->error : "engine error");
    else if (atomic_load(&s->aborting) || atomic_load(&s->draining))
        srv_error_set(&g->fail, SRV_ERR_UNAVAILABLE, NULL, "the server is shutting down; request aborted");
    else if (to > 0 && util_now_s() - g->t_recv >= to * 0.98)
        srv_error_set(&g->fail, SRV_ERR_TIMEOUT, NULL,
                      "the request exceeded the server's request timeout of %g s", to);
    else
        srv_error_set(&g->fail, SRV_ERR_UNAVAILABLE, NULL, "the request was aborted");
}

/* The stream's tail: an error event (the status is then carried in the
 * body, the HTTP status being 200 already), or the finish chunk and, with
 * include_usage, the usage chunk; then the [DONE] sentinel either way.
 * Timings ride on the usage chunk when there is one, else on the finish. */
static void stream_finish(srv_gen *g)
{
    srv_api api = g->req.api;
    if (g->fail.kind != SRV_ERR_NONE) {
        sse_event(g, srv_error_render(&g->fail, NULL));
    } else {
        const char *fin = finish_reason_str(g->finish);
        srv_usage u = {g->prompt_tokens, g->completion_tokens, g->cached_tokens};
        if (api == SRV_API_CHAT)
            sse_event(g, srv_chunk_delta(api, &g->meta, NULL, NULL, 0, fin, NULL, g->req.include_usage,
                                         g->req.include_usage ? NULL : &g->timings));
        else
            sse_event(g, srv_chunk_delta(api, &g->meta, NULL, "", 0, fin, NULL, g->req.include_usage,
                                         g->req.include_usage ? NULL : &g->timings));
        if (g->req.include_usage)
            sse_event(g, srv_chunk_usage(api, &g->meta, &u, &g->timings));
    }
    inferd_buf_append_str(&g->sse, "data: [DONE]\n\n");
}

/* Inter-token latency: an output may carry several tokens (the consumer
 * was slow to pump), so the gap since the previous output is spread evenly
 * over them. The first token has no predecessor: one gap fewer. */
static void observe_itl(srv_gen *g, const engine_output *o)
{
    if (o->n_tokens <= 0 || o->times.last_token <= 0)
        return;
    double prev = g->last_token_t > 0 ? g->last_token_t : o->times.first_token;
    int gaps = g->last_token_t > 0 ? o->n_tokens : o->n_tokens - 1;
    if (gaps > 0 && o->times.last_token >= prev)
        srv_metrics_observe(g->s->metrics, SRV_HIST_ITL, (o->times.last_token - prev) / gaps, gaps);
    g->last_token_t = o->times.last_token;
}

/* One engine output. Streaming turns it into an event at once (its own
 * logprobs object, handed to the chunk); non-streaming accumulates text
 * and logprobs for srv_gen_response. Counts are the engine's running
 * totals, not increments. A request with no tokens in this output (a
 * finish-only output) emits no empty delta. */
static void consume(srv_gen *g, const engine_output *o)
{
    srv_api api = g->req.api;
    cJSON *lp = NULL;
    if (g->req.sp.logprobs >= 0 && o->logprobs && o->n_tokens > 0) {
        if (g->req.stream) {
            lp = srv_lp_new(api);
        } else {
            if (!g->logprobs)
                g->logprobs = srv_lp_new(api);
            lp = g->logprobs;
        }
        srv_lp_append(api, lp, o->logprobs, o->n_tokens, token_text, g->s->tok, &g->text_offset);
    }
    observe_itl(g, o);
    g->prompt_tokens = o->prompt_tokens > 0 ? o->prompt_tokens : g->prompt_tokens;
    g->completion_tokens = o->completion_tokens;
    g->cached_tokens = o->cached_tokens;
    g->times = o->times;
    if (g->req.stream) {
        if (o->text_len > 0 || lp)
            sse_event(g, srv_chunk_delta(api, &g->meta, NULL, o->text ? o->text : "", o->text_len, NULL, lp,
                                         g->req.include_usage, NULL));
        else
            cJSON_Delete(lp);
    } else if (o->text_len > 0) {
        inferd_buf_append(&g->text, o->text, o->text_len);
    }
    if (!o->finished)
        return;
    g->finished = true;
    g->finish = o->finish;
    if (o->finish != FINISH_STOP && o->finish != FINISH_LENGTH)
        set_failure(g, o);
    observe_finish(g);
    if (g->req.stream)
        stream_finish(g);
}

/* Event-loop thread; never blocks. Stops at the final output even when
 * more are queued (there are none after a finished one by contract). */
bool srv_gen_pump(srv_gen *g)
{
    engine_output o;
    while (!g->finished && g->stream && engine_stream_poll(g->stream, &o)) {
        consume(g, &o);
        engine_output_free(&o);
    }
    return g->finished;
}

/* Moves the accumulated logprobs into the body (g keeps no pointer to
 * them); logprobs requested but never produced render as an empty object,
 * not null, so clients that index into it do not fail. */
char *srv_gen_response(srv_gen *g, int *http_status)
{
    if (g->fail.kind != SRV_ERR_NONE)
        return srv_error_render(&g->fail, http_status);
    srv_usage u = {g->prompt_tokens, g->completion_tokens, g->cached_tokens};
    cJSON *lp = g->logprobs;
    if (!lp && g->req.sp.logprobs >= 0)
        lp = srv_lp_new(g->req.api);
    g->logprobs = NULL;
    *http_status = 200;
    return srv_resp_full(g->req.api, &g->meta, g->text.data, g->text.len, finish_reason_str(g->finish), lp,
                         &u, &g->timings);
}

/* *done only once the buffer is empty after the final event: a finished
 * request may still have pending bytes larger than one read. */
size_t srv_gen_sse_read(srv_gen *g, char *buf, size_t max, bool *done)
{
    size_t n = INFERD_MIN(max, g->sse.len);
    if (n)
        memcpy(buf, g->sse.data, n);
    inferd_buf_consume(&g->sse, n);
    *done = g->finished && g->sse.len == 0;
    return n;
}

/* The abort is asynchronous: the engine finishes the request within a
 * step and its final output arrives through the usual notify. */
void srv_gen_abort(srv_gen *g)
{
    if (g->stream && !g->aborted) {
        g->aborted = true;
        engine_stream_abort(g->stream);
    }
}

/* NOTE: releasing an unfinished stream aborts it in the engine; after this
 * call the engine may still notify the slot once (see slot_release). */
void srv_gen_free(srv_gen *g)
{
    if (!g)
        return;
    if (g->stream)
        engine_stream_release(g->stream);
    srv_request_free(&g->req);
    inferd_buf_free(&g->text);
    inferd_buf_free(&g->sse);
    cJSON_Delete(g->logprobs);
    inferd_free(g);
}

/* For the access log in on_completed: out->id points into g (valid until
 * srv_gen_free). An unfinished request reports ttft so far, or -1. */
void srv_gen_get_summary(const srv_gen *g, srv_gen_summary *out)
{
    out->id = g->id;
    out->prompt_tokens = g->prompt_tokens;
    out->completion_tokens = g->completion_tokens;
    out->ttft_ms = g->finished ? g->timings.ttft_ms : ms_between(g->t_recv, g->times.first_token);
    out->total_ms = (util_now_s() - g->t_recv) * 1e3;
    out->finish = g->finished ? finish_reason_str(g->finish) : "none";
}
