/* server/srv_gen.c: see srv_gen.h.
 *
 * One HTTP request, several engine requests: a batched completions prompt
 * (["a", "b"], [[ids], [ids]]) gives one choice per prompt, each its own
 * engine request, submitted together and refused together (any bad prompt
 * refuses the whole request, and a submit failure releases the ones
 * already queued). The choices are polled in index order, so a stream
 * interleaves their chunks by "index" as output arrives; usage sums the
 * prompts once each and every choice's completion tokens. The request
 * finishes when its last choice does; one failed choice aborts the rest.
 * n > 1 and best_of: each prompt's sequences are one engine group
 * (engine_submit_n: the prompt is computed once, the other sequences fork
 * its KV blocks, sequence k samples with seed + k); choice p * n + k is
 * prompt p's k-th. With best_of > n (never streamed: the parser refuses
 * it) the body returns each prompt's n sequences of highest cumulative
 * logprob. Usage counts every generated token, the discarded best_of
 * sequences' too (the engine ran them; OpenAI bills them alike), and each
 * prompt once.
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
 * (srv_http.c) and JSON shapes (srv_openai*.c, srv_responses.c).
 */
#include "server/srv_gen.h"

#include <stdio.h>
#include <string.h>

#include "common/alloc.h"
#include "common/buf.h"
#include "common/log.h"
#include "common/util.h"
#include "server/srv_responses.h"
#include "server/srv_util.h"

/* One choice: one engine sequence and what it has produced. */
typedef struct {
    engine_stream *stream;
    int prompt;         /* index of its prompt (completions), 0 otherwise */
    int32_t max_tokens; /* picked for its prompt's length (check_length) */
    /* non-stream (and /v1/responses streams): echo + generated text */
    inferd_buf text;
    cJSON *logprobs; /* non-stream: whole choice */
    size_t text_offset;
    /* echo + logprobs: the prompt's entries go first, once they are all
     * there (with the choice's first token or finish). A group's sequence 0
     * receives them (plp); its other sequences copy them from it. */
    engine_logprob *plp; /* [n_plp] prompt tokens 1.. (sequence 0 of a group) */
    int n_plp;
    int32_t prompt_tok0; /* the prompt's first token (its entry has no logprob) */
    bool echo_pending;   /* prompt entries not placed yet */
    char *echo;          /* streaming: the echo chunk's text, sent with the entries */
    size_t echo_len;
    int prompt_tokens, completion_tokens, cached_tokens;
    double cum_logprob; /* of its generated tokens (best_of ranking) */
    engine_times times;
    double last_token_t;
    bool finished;
    finish_reason finish;
} gen_choice;

struct srv_gen {
    srv_server *s;
    srv_request req;
    gen_choice *choices; /* [n_choices]: prompt p's sequences at p * per_prompt .. */
    int n_choices, n_finished;
    int per_prompt; /* sequences per prompt: best_of (n when not given) */
    int n_out;      /* choices returned per prompt: n (the best n of per_prompt by cum_logprob) */
    char id[48], msg_id[48];
    srv_resp_meta meta;
    double t_recv;
    engine_times times; /* merged over the choices at finish */
    bool finished, aborted;
    srv_error fail; /* kind != NONE when finished with an error */
    srv_timings timings;
    /* streaming */
    inferd_buf sse;
    int seq; /* /v1/responses: next sequence_number */
};

/* Chat and responses render messages through the chat template. */
static bool uses_chat(srv_api api)
{
    return api != SRV_API_COMPLETIONS;
}

/* The request fields errors name for the prompt and the length limit. */
static const char *prompt_param(srv_api api)
{
    return api == SRV_API_CHAT ? "messages" : api == SRV_API_RESPONSES ? "input" : "prompt";
}

static const char *max_tokens_param(srv_api api)
{
    return api == SRV_API_CHAT        ? "max_completion_tokens"
           : api == SRV_API_RESPONSES ? "max_output_tokens"
                                      : "max_tokens";
}

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

/* In a batch, say which prompt an error is about: "'prompt'[2]: ...". */
static void name_element(srv_gen *g, int i, srv_error *err)
{
    if (g->req.api != SRV_API_COMPLETIONS || g->req.n_prompts < 2)
        return;
    char msg[sizeof err->message];
    snprintf(msg, sizeof msg, "'prompt'[%d]: %.480s", i, err->message); /* the index fits in the rest */
    memcpy(err->message, msg, sizeof msg);
}

/* Finding 2 of the hardening issue: a text of `bytes` bytes encodes to at
 * least bytes / tok_max_token_bytes tokens, so one longer than the model
 * length times that can never fit: refuse it before encoding (a multi-MB
 * prompt would otherwise hold an HTTP thread for seconds only to be
 * refused). The factor 2 keeps the bound safe for normalizers that shorten
 * text (NFKC); the work per request is still linear in the context. */
static bool check_prompt_bytes(srv_gen *g, size_t bytes, srv_error *err)
{
    sched_fit_limits lim;
    engine_get_fit_limits(g->s->eng, &lim);
    const size_t per_tok = tok_max_token_bytes(g->s->tok);
    const size_t cap = (size_t)lim.max_model_len * per_tok * 2;
    if (bytes <= cap)
        return true;
    return srv_error_set(err, SRV_ERR_CONTEXT_LENGTH, prompt_param(g->req.api),
                         "This model's maximum context length is %d tokens, and the prompt is %zu bytes: more "
                         "than %zu bytes cannot fit it (the longest token is %zu bytes). Please shorten the prompt.",
                         lim.max_model_len, bytes, cap, per_tok);
}

/* Encode prompt i of the request into *ids.
 * *ids is heap on success (the caller frees it after submit: the engine
 * copies the prompt). Token-id prompts were range-checked by the parser.
 * An empty encoding is refused here rather than by the engine so the
 * message can say why (empty string, or only characters the vocabulary
 * drops). */
static bool build_prompt(srv_gen *g, int i, int32_t **ids, int *n, srv_error *err)
{
    srv_server *s = g->s;
    srv_request *r = &g->req;
    inferd_status st = INFERD_OK;
    if (uses_chat(r->api)) {
        /* chat: the request's template inputs (srv_chat_req); responses: role + text messages */
        size_t bytes = r->chat.text_bytes;
        for (int k = 0; k < r->n_msgs && !r->chat.messages; k++)
            bytes += r->msgs[k].content ? strlen(r->msgs[k].content) : 0;
        if (!check_prompt_bytes(g, bytes, err))
            return false;
        srv_chat_inputs in = {.add_generation_prompt = true};
        if (r->chat.messages)
            srv_chat_req_inputs(&r->chat, &in);
        if (!(r->chat.messages ? srv_chat_encode_json(s->chat, r->chat.messages, &in, ids, n, err)
                               : srv_chat_encode(s->chat, r->msgs, r->n_msgs, &in, ids, n, err)))
            return false;
    } else if (r->prompts[i].ids) {
        const srv_prompt *p = &r->prompts[i];
        *ids = inferd_malloc(sizeof(int32_t) * (size_t)p->n_ids);
        memcpy(*ids, p->ids, sizeof(int32_t) * (size_t)p->n_ids);
        *n = p->n_ids;
        return true;
    } else {
        if (!check_prompt_bytes(g, r->prompts[i].len, err))
            return false;
        st = tok_encode(s->tok, r->prompts[i].text, r->prompts[i].len, r->add_special_tokens, true, ids, n);
    }
    if (st != INFERD_OK) {
        srv_error_from_status(err, st, prompt_param(r->api));
        return false;
    }
    if (*n == 0) {
        inferd_free(*ids);
        *ids = NULL;
        return srv_error_set(err, SRV_ERR_INVALID, prompt_param(r->api), "the prompt encodes to zero tokens");
    }
    return true;
}

/* The max_tokens of a prompt of n_prompt tokens; 400 naming both numbers
 * when it cannot fit. The decision is the engine's fit check (model length
 * and KV capacity), the wording OpenAI's; the "maximum context length"
 * reported is the effective one (the KV cache may hold less than
 * max_model_len). */
static bool check_length(srv_gen *g, int n_prompt, int32_t *max_tokens, srv_error *err)
{
    srv_request *r = &g->req;
    sched_fit_limits lim;
    engine_get_fit_limits(g->s->eng, &lim);
    int64_t room = sched_fit_room(&lim, n_prompt);
    long long max_len = (long long)n_prompt + room;
    const char *mname = max_tokens_param(r->api);
    if (room < 1)
        return srv_error_set(
            err, SRV_ERR_CONTEXT_LENGTH, prompt_param(r->api),
            "This model's maximum context length is %lld tokens, but the prompt has %d tokens "
            "(no room left for the completion). Please shorten the prompt.",
            max_len, n_prompt);
    if (r->max_tokens == 0 && g->s->opts.gen_max_tokens > 0) { /* generation_config.json max_new_tokens */
        *max_tokens = (int32_t)INFERD_MIN((int64_t)g->s->opts.gen_max_tokens, room);
    } else if (r->max_tokens == 0) {
        *max_tokens = (int32_t)(r->api == SRV_API_COMPLETIONS ? INFERD_MIN(16, room) : room);
    } else if (sched_fit_check(&lim, n_prompt, r->max_tokens) != INFERD_OK) {
        return srv_error_set(
            err, SRV_ERR_CONTEXT_LENGTH, mname,
            "This model's maximum context length is %lld tokens. However, you requested %lld tokens "
            "(%d in the prompt, %lld in the completion). Please reduce the prompt or %s.",
            max_len, (long long)(n_prompt + r->max_tokens), n_prompt, (long long)r->max_tokens, mname);
    } else {
        *max_tokens = (int32_t)r->max_tokens;
    }
    if (r->sp.min_tokens > *max_tokens)
        return srv_error_set(err, SRV_ERR_INVALID, "min_tokens",
                             "'min_tokens' (%d) exceeds the %d tokens available", r->sp.min_tokens,
                             *max_tokens);
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
    if (!uses_chat(g->req.api))
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

/* Submit the g->per_prompt choices c[0..per) of one prompt as one engine
 * group (engine_submit_n: the prompt is computed once, the others fork
 * its blocks; choice k samples with seed + k). best_of > n needs each
 * sequence's cumulative logprob to rank them, so logprobs are computed
 * then even when the client did not ask (the response only shows them
 * when it did: consume reads g->req.sp, not the engine request's).
 * engine_submit_n's refusals become HTTP errors: queue full is 429 (with
 * Retry-After in srv_http.c), the rest keep the engine's status and the
 * field it named. The error slot is cleared first so a stale parameter
 * name from an earlier call on this thread cannot leak into the answer.
 * NOTE: notify may fire on the engine thread before engine_submit_n
 * returns; the caller has bound the slot already, and the consumer only
 * pumps once this function has stored the streams. */
static bool submit(srv_gen *g, gen_choice *c, const int32_t *ids, int n, void (*notify)(void *), void *user,
                   srv_error *err)
{
    engine_request er;
    memset(&er, 0, sizeof er);
    er.prompt_ids = ids;
    er.n_prompt = n;
    er.sp = g->req.sp;
    er.sp.max_tokens = c->max_tokens;
    if (g->per_prompt > g->n_out && er.sp.logprobs < 0)
        er.sp.logprobs = 0;
    er.timeout_s = g->s->opts.request_timeout_s;
    er.notify = notify;
    er.notify_user = user;
    engine_stream *streams[SAMPLING_MAX_SEQS];
    inferd_clear_error();
    inferd_status st = engine_submit_n(g->s->eng, &er, g->per_prompt, streams);
    if (st == INFERD_OK) {
        for (int k = 0; k < g->per_prompt; k++)
            c[k].stream = streams[k];
        return true;
    }
    if (st == INFERD_ERR_QUEUE_FULL)
        return srv_error_set(err, SRV_ERR_QUEUE_FULL, NULL,
                             "the server is at capacity (more than %d requests waiting); retry later",
                             g->s->opts.max_queued_requests);
    /* the engine names the field at fault; chat's prompt is its messages */
    const char *param = inferd_last_error_param();
    if (param && uses_chat(g->req.api) && strcmp(param, "prompt") == 0)
        param = prompt_param(g->req.api);
    srv_error_from_status(err, st, param);
    return false;
}

/* The text a choice echoes (completions echo: true): a text prompt as the
 * client sent it, a token prompt decoded without its special tokens (as
 * vLLM echoes them). *out is heap. */
static bool echo_text(srv_gen *g, int i, char **out, size_t *len, srv_error *err)
{
    const srv_prompt *p = &g->req.prompts[i];
    if (p->text) {
        *out = inferd_strdup(p->text);
        *len = p->len;
        return true;
    }
    inferd_status st = tok_decode(g->s->tok, p->ids, p->n_ids, true, out, len);
    if (st != INFERD_OK) {
        srv_error_from_status(err, st, "prompt");
        return false;
    }
    return true;
}

/* Build, check and submit every prompt's choices; all or nothing: the
 * first failure returns with the choices submitted so far still holding
 * their streams, which srv_gen_free releases (and so aborts). Every prompt
 * is built and checked before any is submitted, so a bad element refuses
 * the request without the engine seeing any of it. Prompt p owns choices
 * p * per .. p * per + per - 1 (per = best_of, which is n unless best_of
 * is given), one engine group; with per == n that is also the choice
 * index the client sees (p * n + k). */
static bool submit_choices(srv_gen *g, void (*notify)(void *), void *user, srv_error *err)
{
    const int n = g->n_choices / g->per_prompt; /* prompts */
    int32_t **ids = inferd_calloc((size_t)n, sizeof *ids);
    int *n_ids = inferd_calloc((size_t)n, sizeof *n_ids);
    int32_t *max_tokens = inferd_calloc((size_t)n, sizeof *max_tokens);
    bool ok = true;
    for (int i = 0; ok && i < n; i++) {
        ok = build_prompt(g, i, &ids[i], &n_ids[i], err) && check_length(g, n_ids[i], &max_tokens[i], err);
        if (!ok)
            name_element(g, i, err);
    }
    if (ok)
        add_chat_stop(g);
    for (int i = 0; i < g->n_choices; i++) {
        gen_choice *c = &g->choices[i];
        c->prompt = i / g->per_prompt;
        c->max_tokens = max_tokens[c->prompt];
        c->prompt_tokens = n_ids[c->prompt];
        c->prompt_tok0 = ids[c->prompt] && n_ids[c->prompt] > 0 ? ids[c->prompt][0] : 0;
    }
    for (int i = 0; ok && i < n; i++)
        ok = submit(g, &g->choices[i * g->per_prompt], ids[i], n_ids[i], notify, user, err);
    for (int i = 0; i < n; i++)
        inferd_free(ids[i]);
    inferd_free(ids);
    inferd_free(n_ids);
    inferd_free(max_tokens);
    return ok;
}

/* The first events, before any token exists: a chat stream opens each
 * choice with its role chunk, as OpenAI's does; a responses stream with
 * its created .. content_part.added events; echo puts each prompt's text
 * first (its own chunk when streaming). */
static bool open_output(srv_gen *g, srv_error *err)
{
    srv_request *r = &g->req;
    if (r->stream && r->api == SRV_API_CHAT)
        for (int i = 0; i < g->n_choices; i++)
            sse_event(g, srv_chunk_delta(r->api, &g->meta, i, "assistant", "", 0, NULL, NULL,
                                         r->include_usage, NULL));
    if (r->stream && r->api == SRV_API_RESPONSES) {
        srv_responses_meta rm = {g->id, g->msg_id, g->meta.created, g->meta.model, r};
        srv_responses_stream_begin(&g->sse, &rm, &g->seq);
    }
    if (!r->echo)
        return true;
    for (int i = 0; i < g->n_choices; i++) {
        gen_choice *c = &g->choices[i];
        char *text;
        size_t len;
        if (!echo_text(g, c->prompt, &text, &len, err))
            return false;
        c->text_offset = len;
        c->echo_len = len;
        c->echo_pending = r->sp.prompt_logprobs >= 0;
        if (!r->stream)
            inferd_buf_append(&c->text, text, len);
        if (r->stream && c->echo_pending) {
            c->echo = text; /* sent with the prompt's logprobs (place_prompt_lp) */
            continue;
        }
        if (r->stream)
            sse_event(
                g, srv_chunk_delta(r->api, &g->meta, i, NULL, text, len, NULL, NULL, r->include_usage, NULL));
        inferd_free(text);
    }
    return true;
}

/* The id: "cmpl-"/"chatcmpl-"/"resp_" + the engine's stream id of the first
 * choice + a 16-bit server counter: unique per process, and it lets a log
 * line be matched with the engine's own traces. */
static void set_identity(srv_gen *g)
{
    static const char *const k_prefix[] = {"cmpl-", "chatcmpl-", "resp_"};
    unsigned long long sid = (unsigned long long)engine_stream_id(g->choices[0].stream);
    unsigned long long ctr = (unsigned long long)(atomic_fetch_add(&g->s->next_id, 1) & 0xffff);
    snprintf(g->id, sizeof g->id, "%s%016llx%04llx", k_prefix[g->req.api], sid, ctr);
    snprintf(g->msg_id, sizeof g->msg_id, "msg_%016llx%04llx", sid, ctr);
    g->meta.id = g->id;
    g->meta.created = util_unix_s();
    g->meta.model = g->s->opts.served_model_name;
}

/* Event-loop thread. On failure everything is freed and nothing is left
 * running in the engine. */
srv_gen *srv_gen_start(srv_server *s, srv_api api, const char *body, size_t len, double t_recv,
                       void (*notify)(void *), void *notify_user, srv_error *err)
{
    srv_gen *g = inferd_calloc(1, sizeof *g);
    g->s = s;
    g->t_recv = t_recv;
    srv_parse_limits lim = {s->opts.served_model_name, s->vocab_size, &s->opts.gen_defaults};
    bool parsed = api == SRV_API_RESPONSES ? srv_responses_parse(body, len, &lim, &g->req, err)
                                           : srv_request_parse(api, body, len, &lim, &g->req, err);
    if (!parsed) {
        inferd_free(g);
        return NULL;
    }
    if (uses_chat(api) && !srv_chat_ready(s->chat)) {
        srv_error_set(err, SRV_ERR_NO_CHAT_TEMPLATE, prompt_param(api), "%s (or use /v1/completions)",
                      srv_chat_describe(s->chat));
        srv_gen_free(g);
        return NULL;
    }
    /* responses has no n: its request's seqs stay zero */
    g->per_prompt = api == SRV_API_RESPONSES ? 1 : g->req.seqs.best_of;
    g->n_out = api == SRV_API_RESPONSES ? 1 : g->req.seqs.n;
    g->n_choices = (api == SRV_API_COMPLETIONS ? g->req.n_prompts : 1) * g->per_prompt;
    g->choices = inferd_calloc((size_t)g->n_choices, sizeof *g->choices);
    if (!submit_choices(g, notify, notify_user, err)) {
        srv_gen_free(g);
        return NULL;
    }
    set_identity(g);
    if (!open_output(g, err)) {
        srv_gen_free(g);
        return NULL;
    }
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

/* The request's phases over all its choices: starts at the earliest
 * choice's stamp, ends at the latest one's (0 = not reached is skipped). */
static void merge_times(engine_times *acc, const engine_times *t)
{
    double *first[] = {&acc->arrival, &acc->first_scheduled, &acc->first_token};
    const double first_v[] = {t->arrival, t->first_scheduled, t->first_token};
    for (size_t i = 0; i < INFERD_ARRAY_LEN(first); i++)
        if (first_v[i] > 0 && (*first[i] <= 0 || first_v[i] < *first[i]))
            *first[i] = first_v[i];
    acc->last_token = INFERD_MAX(acc->last_token, t->last_token);
    acc->finished = INFERD_MAX(acc->finished, t->finished);
    acc->prefill_done = INFERD_MAX(acc->prefill_done, t->prefill_done);
}

/* Token counts of the whole request: each prompt once (its first choice
 * carries it, so n choices of one prompt will not count it n times), every
 * choice's completion tokens. */
static void usage_of(const srv_gen *g, srv_usage *u)
{
    memset(u, 0, sizeof *u);
    for (int i = 0; i < g->n_choices; i++) {
        const gen_choice *c = &g->choices[i];
        if (i == 0 || g->choices[i - 1].prompt != c->prompt) {
            u->prompt_tokens += c->prompt_tokens;
            u->cached_tokens += c->cached_tokens;
        }
        u->completion_tokens += c->completion_tokens;
    }
}

/* Once per request, at its final output: the response timings and the
 * latency histograms. Missing phases (-1) are not observed rather than
 * recorded as zero, which would drag the histograms down. Lengths are
 * observed per choice: each is one sequence the engine ran. */
static void observe_finish(srv_gen *g)
{
    memset(&g->times, 0, sizeof g->times);
    for (int i = 0; i < g->n_choices; i++)
        merge_times(&g->times, &g->choices[i].times);
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
    for (int i = 0; i < g->n_choices; i++) {
        srv_metrics_observe(m, SRV_HIST_PROMPT_LEN, g->choices[i].prompt_tokens, 1);
        srv_metrics_observe(m, SRV_HIST_GEN_LEN, g->choices[i].completion_tokens, 1);
    }
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

/* The responses API's view of the request (one choice). */
static void responses_state(srv_gen *g, const srv_usage *u, srv_responses_meta *m, srv_responses_state *st)
{
    const gen_choice *c = &g->choices[0];
    *m = (srv_responses_meta){g->id, g->msg_id, g->meta.created, g->meta.model, &g->req};
    *st = (srv_responses_state){
        c->text.data, c->text.len, c->finish, u, g->fail.kind != SRV_ERR_NONE ? &g->fail : NULL, &g->timings};
}

/* A streamed choice's last chunk: its finish reason. The request's final
 * one carries the timings, unless a usage chunk follows to carry them. */
static void stream_choice_done(srv_gen *g, int i)
{
    srv_api api = g->req.api;
    if (g->fail.kind != SRV_ERR_NONE || api == SRV_API_RESPONSES)
        return;
    const char *fin = finish_reason_str(g->choices[i].finish);
    bool iu = g->req.include_usage;
    const srv_timings *t = g->finished && !iu ? &g->timings : NULL;
    sse_event(g,
              srv_chunk_delta(api, &g->meta, i, NULL, api == SRV_API_CHAT ? NULL : "", 0, fin, NULL, iu, t));
}

/* The stream's tail: an error event (the status is then carried in the
 * body, the HTTP status being 200 already), or with include_usage the
 * usage chunk; then the [DONE] sentinel either way. A responses stream
 * ends with its closing events instead (OpenAI sends no [DONE] there). */
static void stream_finish(srv_gen *g)
{
    srv_api api = g->req.api;
    srv_usage u;
    usage_of(g, &u);
    if (api == SRV_API_RESPONSES) {
        srv_responses_meta m;
        srv_responses_state st;
        responses_state(g, &u, &m, &st);
        srv_responses_stream_end(&g->sse, &m, &g->seq, &st);
        return;
    }
    if (g->fail.kind != SRV_ERR_NONE)
        sse_event(g, srv_error_render(&g->fail, NULL));
    else if (g->req.include_usage)
        sse_event(g, srv_chunk_usage(api, &g->meta, &u, &g->timings));
    inferd_buf_append_str(&g->sse, "data: [DONE]\n\n");
}

/* Inter-token latency: an output may carry several tokens (the consumer
 * was slow to pump), so the gap since the previous output is spread evenly
 * over them. The first token has no predecessor: one gap fewer. */
static void observe_itl(srv_gen *g, gen_choice *c, const engine_output *o)
{
    if (o->n_tokens <= 0 || o->times.last_token <= 0)
        return;
    double prev = c->last_token_t > 0 ? c->last_token_t : o->times.first_token;
    int gaps = c->last_token_t > 0 ? o->n_tokens : o->n_tokens - 1;
    if (gaps > 0 && o->times.last_token >= prev)
        srv_metrics_observe(g->s->metrics, SRV_HIST_ITL, (o->times.last_token - prev) / gaps, gaps);
    c->last_token_t = o->times.last_token;
}

/* New text (and logprobs, taken) of choice i: an event at once when
 * streaming, else accumulated for srv_gen_response. A responses stream
 * also keeps the text: its closing events repeat it whole. */
static void emit_text(srv_gen *g, int i, const char *text, size_t len, cJSON *lp)
{
    gen_choice *c = &g->choices[i];
    srv_request *r = &g->req;
    if (!r->stream || r->api == SRV_API_RESPONSES)
        inferd_buf_append(&c->text, text, len);
    if (!r->stream)
        return;
    if (r->api == SRV_API_RESPONSES) {
        if (len > 0) {
            srv_responses_meta m = {g->id, g->msg_id, g->meta.created, g->meta.model, r};
            srv_responses_stream_delta(&g->sse, &m, &g->seq, text, len);
        }
        cJSON_Delete(lp);
    } else if (len > 0 || lp) {
        sse_event(g, srv_chunk_delta(r->api, &g->meta, i, NULL, text, len, NULL, lp, r->include_usage, NULL));
    }
}

/* Abort every choice still running (one failed: the request has failed). */
static void abort_choices(srv_gen *g)
{
    for (int i = 0; i < g->n_choices; i++)
        if (g->choices[i].stream && !g->choices[i].finished)
            engine_stream_abort(g->choices[i].stream);
}

/* Echo + logprobs: keep the prompt entries choice i (a group's sequence
 * 0) received; at its first token or finish (the engine sends every
 * prompt entry before the first token, and sequence 0 of the group, polled
 * first, has them by then) put the prompt's entries first in its logprobs,
 * or, streaming, send the echo chunk with them. */
static void place_prompt_lp(srv_gen *g, int i, const engine_output *o)
{
    gen_choice *c = &g->choices[i];
    if (o->n_prompt_logprobs > 0) {
        c->plp = inferd_realloc(c->plp, (size_t)(c->n_plp + o->n_prompt_logprobs) * sizeof *c->plp);
        memcpy(c->plp + c->n_plp, o->prompt_logprobs, (size_t)o->n_prompt_logprobs * sizeof *c->plp);
        c->n_plp += o->n_prompt_logprobs;
    }
    if (!c->echo_pending || (o->n_tokens == 0 && !o->finished))
        return;
    c->echo_pending = false;
    const gen_choice *src = &g->choices[c->prompt * g->per_prompt];
    cJSON *lp = srv_lp_new(g->req.api);
    srv_lp_append_prompt(lp, c->prompt_tok0, src->plp, src->n_plp, token_text, g->s->tok, c->echo_len);
    if (!g->req.stream) {
        c->logprobs = lp;
        return;
    }
    sse_event(g, srv_chunk_delta(g->req.api, &g->meta, i, NULL, c->echo, c->echo_len, NULL, lp,
                                 g->req.include_usage, NULL));
    inferd_free(c->echo);
    c->echo = NULL;
}

/* One engine output of choice i. Streaming logprobs get their own object
 * per chunk; non-streaming ones accumulate in the choice. Counts are the
 * engine's running totals, not increments. A finish-only output (no
 * tokens) emits no empty delta. */
static void consume(srv_gen *g, int i, const engine_output *o)
{
    gen_choice *c = &g->choices[i];
    srv_api api = g->req.api;
    cJSON *lp = NULL;
    place_prompt_lp(g, i, o);
    if (g->req.sp.logprobs >= 0 && o->logprobs && o->n_tokens > 0) {
        if (g->req.stream) {
            lp = srv_lp_new(api);
        } else {
            if (!c->logprobs)
                c->logprobs = srv_lp_new(api);
            lp = c->logprobs;
        }
        srv_lp_append(api, lp, o->logprobs, o->n_tokens, token_text, g->s->tok, &c->text_offset);
    }
    observe_itl(g, c, o);
    c->prompt_tokens = o->prompt_tokens > 0 ? o->prompt_tokens : c->prompt_tokens;
    c->completion_tokens = o->completion_tokens;
    c->cached_tokens = o->cached_tokens;
    c->cum_logprob = o->cum_logprob;
    c->times = o->times;
    emit_text(g, i, o->text ? o->text : "", o->text_len, g->req.stream ? lp : NULL);
    if (!o->finished)
        return;
    c->finished = true;
    c->finish = o->finish;
    if (o->finish != FINISH_STOP && o->finish != FINISH_LENGTH && g->fail.kind == SRV_ERR_NONE) {
        set_failure(g, o);
        abort_choices(g);
    }
    g->finished = ++g->n_finished == g->n_choices;
    if (g->finished)
        observe_finish(g);
    if (g->req.stream)
        stream_choice_done(g, i);
    if (g->finished && g->req.stream)
        stream_finish(g);
}

/* Event-loop thread; never blocks. Passes over the choices in index
 * order, taking one engine step of each per pass, until none has output:
 * the choices' chunks interleave step by step as they were generated, even
 * when the loop wakes after several steps (and sequence 0 of a group, which
 * carries the prompt logprobs, is still polled first). A choice stops at
 * its final output. */
bool srv_gen_pump(srv_gen *g)
{
    engine_output o;
    for (bool any = true; any;) {
        any = false;
        for (int i = 0; i < g->n_choices; i++) {
            gen_choice *c = &g->choices[i];
            if (c->finished || !c->stream || !engine_stream_poll_step(c->stream, &o))
                continue;
            consume(g, i, &o);
            engine_output_free(&o);
            any = true;
        }
    }
    return g->finished;
}

/* The sequences the body returns, in choice-index order: out[p * n + j]
 * is prompt p's j-th best sequence. With best_of > n the prompt's
 * best_of sequences are ranked by cumulative logprob (engine_rank_seqs:
 * vLLM's ranking, ties to the lower seed); with best_of == n nothing is
 * ranked and choice k is the sequence of seed + k. */
static void returned_choices(const srv_gen *g, int *out)
{
    const int per = g->per_prompt, n = g->n_out;
    double cum[SAMPLING_MAX_SEQS];
    int order[SAMPLING_MAX_SEQS];
    for (int p = 0; p < g->n_choices / per; p++) {
        for (int k = 0; k < per; k++) {
            cum[k] = g->choices[p * per + k].cum_logprob;
            order[k] = k;
        }
        if (per > n)
            engine_rank_seqs(cum, per, order);
        for (int j = 0; j < n; j++)
            out[p * n + j] = p * per + order[j];
    }
}

/* Moves the accumulated logprobs into the body (g keeps no pointer to
 * them); logprobs requested but never produced render as an empty object,
 * not null, so clients that index into it do not fail. */
char *srv_gen_response(srv_gen *g, int *http_status)
{
    if (g->fail.kind != SRV_ERR_NONE)
        return srv_error_render(&g->fail, http_status);
    srv_usage u;
    usage_of(g, &u);
    *http_status = 200;
    if (g->req.api == SRV_API_RESPONSES) {
        srv_responses_meta m;
        srv_responses_state st;
        responses_state(g, &u, &m, &st);
        return srv_responses_body(&m, &st);
    }
    const int n_body = g->n_choices / g->per_prompt * g->n_out;
    int *sel = inferd_calloc((size_t)n_body, sizeof *sel);
    returned_choices(g, sel);
    srv_choice_body *b = inferd_calloc((size_t)n_body, sizeof *b);
    for (int i = 0; i < n_body; i++) {
        gen_choice *c = &g->choices[sel[i]];
        cJSON *lp = c->logprobs;
        if (!lp && g->req.sp.logprobs >= 0)
            lp = srv_lp_new(g->req.api);
        c->logprobs = NULL;
        b[i] = (srv_choice_body){c->text.data, c->text.len, finish_reason_str(c->finish), lp};
    }
    char *out = srv_resp_full(g->req.api, &g->meta, b, n_body, &u, &g->timings);
    inferd_free(b);
    inferd_free(sel);
    return out;
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

/* The abort is asynchronous: the engine finishes each choice within a
 * step and its final output arrives through the usual notify. */
void srv_gen_abort(srv_gen *g)
{
    if (!g->aborted) {
        g->aborted = true;
        abort_choices(g);
    }
}

/* NOTE: releasing an unfinished stream aborts it in the engine; after this
 * call the engine may still notify the slot once per stream (see
 * slot_release). Safe on a half-built srv_gen (choices not all submitted). */
void srv_gen_free(srv_gen *g)
{
    if (!g)
        return;
    for (int i = 0; i < g->n_choices; i++) {
        gen_choice *c = &g->choices[i];
        if (c->stream)
            engine_stream_release(c->stream);
        inferd_buf_free(&c->text);
        cJSON_Delete(c->logprobs);
        inferd_free(c->plp);
        inferd_free(c->echo);
    }
    inferd_free(g->choices);
    srv_request_free(&g->req);
    inferd_buf_free(&g->sse);
    inferd_free(g);
}

/* For the access log in on_completed: out->id points into g (valid until
 * srv_gen_free). Counts are the request's totals; the finish is the worst
 * of its choices' (stop < length < abort < error). An unfinished request
 * reports ttft so far, or -1. */
void srv_gen_get_summary(const srv_gen *g, srv_gen_summary *out)
{
    srv_usage u;
    usage_of(g, &u);
    out->id = g->id;
    out->prompt_tokens = u.prompt_tokens;
    out->completion_tokens = u.completion_tokens;
    double first_token = 0;
    finish_reason worst = FINISH_NONE;
    for (int i = 0; i < g->n_choices; i++) {
        const gen_choice *c = &g->choices[i];
        if (c->times.first_token > 0 && (first_token <= 0 || c->times.first_token < first_token))
            first_token = c->times.first_token;
        worst = INFERD_MAX(worst, c->finish);
    }
    out->ttft_ms = g->finished ? g->timings.ttft_ms : ms_between(g->t_recv, first_token);
    out->total_ms = (util_now_s() - g->t_recv) * 1e3;
    out->finish = g->finished ? finish_reason_str(worst) : "none";
}
