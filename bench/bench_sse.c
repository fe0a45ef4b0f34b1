/* bench/bench_sse.c: parsing of OpenAI completion responses for `inferd
 * bench serve`, streamed (SSE) or not.
 *
 * The stream is split into lines as bytes arrive; each `data: {json}` line is
 * one event, `data: [DONE]` ends the stream, blank lines, comments (`:`) and
 * other SSE fields are ignored. A content chunk is an event whose first choice
 * carries generated text (`text` for completions, `delta.content` or a
 * reasoning delta for chat). An empty-text chunk still counts when it is not
 * the chat role announcement or the finish marker: servers send those for
 * tokens whose text is held back (incomplete UTF-8), and they are token events
 * for inter-token latency. The last `usage` object seen gives the token counts.
 * All chunks delivered by one socket read share one timestamp, the earliest
 * the client can know of them.
 *
 * Design choice: tolerant framing, strict outcome. Anything SSE allows
 * (CRLF, comments, `event:` fields, a missing space after `data:`, bytes
 * split anywhere) is accepted, but a 2xx response only counts as completed
 * when it ends with `[DONE]` and carried content (or a usage object saying
 * zero tokens): a truncated or empty stream is a BAD_RESPONSE, never a
 * silently short measurement. Not done here: multiple choices (n > 1;
 * only choice 0 is looked at) and any check of the generated text itself.
 */
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include <cjson/cJSON.h>

#include "common/alloc.h"
#include "common/usage.h"
#include "bench/bench_client.h"

/* Bounds against a broken server: a line without a newline, or an endless
 * non-streamed body, fails the request instead of exhausting memory. 16 MiB
 * per event is orders of magnitude above a real chunk. */
enum { SSE_MAX_LINE = 16 << 20, SSE_MAX_BODY = 64 << 20 };

/* The names are part of the result JSON ("error_types", "failed_by_type"):
 * keep them stable. */
const char *bench_err_name(bench_err e)
{
    static const char *const k_names[BENCH_ERR_COUNT] = {
        "", "connect", "timeout", "http_4xx", "http_5xx", "bad_response", "cancelled",
    };
    return (unsigned)e < BENCH_ERR_COUNT ? k_names[e] : "unknown";
}

/* Frees the heap parts only: r itself lives in the caller's array, and is
 * left reusable (pointers NULL, counts 0). */
void bench_result_free(bench_result *r)
{
    if (!r)
        return;
    inferd_free(r->error);
    inferd_free(r->chunk_s);
    r->error = NULL;
    r->chunk_s = NULL;
    r->n_chunks = r->cap_chunks = 0;
}

/* r is borrowed: the parser writes chunk times, usage and the verdict into
 * it, and must not outlive it. */
void bench_sse_init(bench_sse *s, bench_result *r, bool stream, bool chat)
{
    memset(s, 0, sizeof *s);
    s->r = r;
    s->stream = stream;
    s->chat = chat;
    s->first_any_s = -1.0;
    s->last_s = -1.0;
}

void bench_sse_free(bench_sse *s)
{
    inferd_buf_free(&s->buf);
    inferd_free(s->bad_msg);
    s->bad_msg = NULL;
}

/* Record the first problem only: later ones are usually consequences, and
 * the first one is what a user needs to see. */
static void sse_fail(bench_sse *s, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void sse_fail(bench_sse *s, const char *fmt, ...)
{
    if (s->bad)
        return;
    char msg[256];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    s->bad = true;
    s->bad_msg = inferd_strdup(msg);
}

/* Doubling growth from 64: a typical stream of a few hundred tokens needs
 * a few reallocations at most. */
static void push_chunk(bench_result *r, double t_s)
{
    if (r->n_chunks == r->cap_chunks) {
        r->cap_chunks = r->cap_chunks ? 2 * r->cap_chunks : 64;
        r->chunk_s = inferd_realloc(r->chunk_s, (size_t)r->cap_chunks * sizeof *r->chunk_s);
    }
    r->chunk_s[r->n_chunks++] = t_s;
}

static const char *json_str(const cJSON *obj, const char *key)
{
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(obj, key);
    return cJSON_IsString(v) ? v->valuestring : NULL;
}

/* Any event may carry usage (servers send it on the last chunk with
 * include_usage, some on every chunk); the last one seen wins. Absent
 * fields keep their previous values. */
static void take_usage(bench_result *r, const cJSON *root)
{
    inferd_usage u = {.prompt_tokens = r->prompt_tokens, .completion_tokens = r->output_tokens};
    if (inferd_usage_parse(cJSON_GetObjectItemCaseSensitive(root, "usage"), &u)) {
        r->output_tokens = u.completion_tokens;
        r->usage_seen = true;
    }
    r->prompt_tokens = u.prompt_tokens;
}

/* The error object of an error event or body, as a message; NULL if none. */
static const char *error_message(const cJSON *root)
{
    const cJSON *e = cJSON_GetObjectItemCaseSensitive(root, "error");
    if (!e || cJSON_IsNull(e))
        return NULL;
    if (cJSON_IsString(e))
        return e->valuestring;
    const char *m = json_str(e, "message");
    return m ? m : "error event";
}

/* Is the first choice a token event (see the file comment)? */
static bool is_content_choice(const bench_sse *s, const cJSON *c0)
{
    const cJSON *fin = cJSON_GetObjectItemCaseSensitive(c0, "finish_reason");
    bool finished = fin && !cJSON_IsNull(fin);
    /* completions: a "text" field is a token event unless it is the
     * empty final chunk that only carries finish_reason */
    if (!s->chat) {
        const char *text = json_str(c0, "text");
        return text && (text[0] || !finished);
    }
    const cJSON *delta = cJSON_GetObjectItemCaseSensitive(c0, "delta");
    if (!cJSON_IsObject(delta))
        return false;
    static const char *const k_keys[] = {"content", "reasoning_content", "reasoning"};
    bool has_str = false;
    for (size_t i = 0; i < sizeof k_keys / sizeof k_keys[0]; i++) {
        const char *v = json_str(delta, k_keys[i]);
        if (v && v[0])
            return true;
        has_str = has_str || v != NULL;
    }
    /* chat: an empty delta is a held-back token, except the first chunk
     * (role announcement) and the last (finish_reason) */
    bool role = cJSON_GetObjectItemCaseSensitive(delta, "role") != NULL;
    return has_str && !role && !finished;
}

/* One `data:` payload. Events after [DONE] are ignored. An error object
 * fails the request but the event is still read (its usage may count). */
static void handle_event(bench_sse *s, const char *payload, size_t n, double t_s)
{
    if (s->done)
        return;
        /* not JSON; the stream's end marker. Its time ends E2E latency */
    if (n == 6 && memcmp(payload, "[DONE]", 6) == 0) {
        s->done = true;
        s->last_s = t_s;
        return;
    }
    cJSON *root = cJSON_ParseWithLength(payload, n);
    if (!root || !cJSON_IsObject(root)) {
        sse_fail(s, "malformed JSON in stream event");
        cJSON_Delete(root);
        return;
    }
    s->n_events++;
    s->last_s = t_s;
    const char *err = error_message(root);
    if (err)
        sse_fail(s, "error event in stream: %.200s", err);
    take_usage(s->r, root);
    const cJSON *choices = cJSON_GetObjectItemCaseSensitive(root, "choices");
    /* usage-only chunks have "choices": [] and are not token events */
    const cJSON *c0 = cJSON_IsArray(choices) ? cJSON_GetArrayItem(choices, 0) : NULL;
    if (cJSON_IsObject(c0)) {
        if (s->first_any_s < 0)
            s->first_any_s = t_s;
        if (is_content_choice(s, c0))
            push_chunk(s->r, t_s);
    }
    cJSON_Delete(root);
}

/* line is the parser's own buffer, so the CR can be cut in place. One
 * optional space after "data:" is stripped, per the SSE spec. */
static void handle_line(bench_sse *s, char *line, size_t n, double t_s)
{
    if (n > 0 && line[n - 1] == '\r')
        line[--n] = '\0';
    if (n < 5 || memcmp(line, "data:", 5) != 0)
        return; /* blank line, comment, event:/id:/retry: fields */
    const char *p = line + 5;
    size_t k = n - 5;
    if (k > 0 && *p == ' ') {
        p++;
        k--;
    }
    handle_event(s, p, k, t_s);
}

/* Every complete line in data is handled with this read's timestamp; a
 * partial last line waits in s->buf for the next read. After a failure the
 * rest of a stream is skipped (the verdict is already BAD_RESPONSE). */
void bench_sse_feed(bench_sse *s, const char *data, size_t n, double t_s)
{
    /* non-stream bodies are still collected: finish_plain parses them */
    if (s->bad && s->stream)
        return;
    if (!s->stream) {
        if (s->buf.len + n > SSE_MAX_BODY)
            sse_fail(s, "response body too large");
        else
            inferd_buf_append(&s->buf, data, n);
        return;
    }
    while (n > 0) {
        const char *nl = memchr(data, '\n', n);
        size_t take = nl ? (size_t)(nl - data) : n;
        if (s->buf.len + take > SSE_MAX_LINE) {
            sse_fail(s, "stream line too long");
            return;
        }
        inferd_buf_append(&s->buf, data, take);
        if (!nl)
            return;
        handle_line(s, s->buf.data, s->buf.len, t_s);
        inferd_buf_reset(&s->buf);
        data += take + 1;
        n -= take + 1;
    }
}

/* Non-streamed response: TTFT is the whole latency (nothing arrives
 * earlier), and output_tokens comes only from usage (there are no chunks
 * to count). */
static void finish_plain(bench_sse *s, double t_s)
{
    bench_result *r = s->r;
    r->e2el_s = t_s;
    r->ttft_s = t_s;
    cJSON *root = s->buf.data ? cJSON_ParseWithLength(s->buf.data, s->buf.len) : NULL;
        /* also covers an empty body (buf.data NULL: root is NULL) */
    if (!cJSON_IsObject(root)) {
        sse_fail(s, "response is not a JSON object");
    } else {
        const char *err = error_message(root);
        if (err)
            sse_fail(s, "error in response: %.200s", err);
        const cJSON *choices = cJSON_GetObjectItemCaseSensitive(root, "choices");
        if (!cJSON_IsArray(choices) || cJSON_GetArraySize(choices) == 0)
            sse_fail(s, "response has no choices");
        take_usage(r, root);
    }
    cJSON_Delete(root);
}

/* E2E ends at [DONE] when it came (not at connection close, which may
 * lag), else at the end of the body. A stream with no content chunk is
 * accepted only when usage says zero tokens were generated; its TTFT is
 * then the first event with choices. Without usage the chunk count stands
 * in for the token count (servers usually stream one token per chunk). */
static void finish_stream(bench_sse *s, double t_s)
{
    bench_result *r = s->r;
    if (s->buf.len > 0 && !s->bad) { /* last line without a newline */
        handle_line(s, s->buf.data, s->buf.len, t_s);
        inferd_buf_reset(&s->buf);
    }
    r->e2el_s = s->done && s->last_s >= 0 ? s->last_s : t_s;
    if (s->bad)
        return;
    if (s->n_events == 0)
        sse_fail(s, "no SSE data events in the response");
    else if (!s->done)
        sse_fail(s, "stream ended without data: [DONE]");
    else if (r->n_chunks > 0)
        r->ttft_s = r->chunk_s[0];
        /* a legitimate empty generation (e.g. immediate EOS) */
    else if (r->usage_seen && r->output_tokens == 0)
        r->ttft_s = s->first_any_s >= 0 ? s->first_any_s : r->e2el_s;
    else
        sse_fail(s, "stream carried no content chunks");
    if (!r->usage_seen)
        r->output_tokens = r->n_chunks;
}

/* The verdict: BAD_RESPONSE with the first problem's message, or NONE.
 * Once per parser; r->error is replaced, not appended to. */
void bench_sse_finish(bench_sse *s, double t_s)
{
    bench_result *r = s->r;
    if (!s->stream)
        finish_plain(s, t_s);
    else
        finish_stream(s, t_s);
    if (s->bad) {
        r->err = BENCH_ERR_BAD_RESPONSE;
        inferd_free(r->error);
        r->error = inferd_strdup(s->bad_msg);
    } else {
        r->err = BENCH_ERR_NONE;
    }
}
