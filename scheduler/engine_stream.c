/* scheduler/engine_stream.c: per-request output channels.
 *
 * A stream is shared by the engine thread (producer) and one consumer. The
 * producer appends token ids, logprobs and text to growable buffers under
 * the stream's mutex and signals its condvar; it never waits, so a slow
 * consumer only makes the buffers grow. The consumer moves everything new
 * out with poll/wait. Two references (engine, consumer) keep the stream
 * alive; the engine drops its reference when the request finishes, the
 * consumer with engine_stream_release (which also requests an abort).
 *
 * Design choice: an unbounded per-request buffer instead of a bounded ring,
 * so the engine thread can never block on a consumer (a stalled HTTP client
 * must not stall the batch). The trade-off: memory grows with what an
 * unread request generates, bounded by its max_tokens and text. Consumers
 * are woken twice over: the condvar for blocking readers
 * (engine_stream_wait) and the notify callback for event loops (the HTTP
 * server), which is called after the mutex is released.
 */
#include <string.h>
#include <time.h>

#include "common/alloc.h"
#include "common/check.h"
#include "scheduler/engine_internal.h"

/* A new stream with two references (the engine's and the consumer's),
 * recording what the consumer needs from the request: whether to keep
 * logprobs, the notify callback and the prompt length. Never fails. */
engine_stream *stream_new(uint64_t id, const engine_request *req)
{
    engine_stream *s = inferd_calloc(1, sizeof *s);
    pthread_mutex_init(&s->mu, NULL);
    pthread_condattr_t ca;
    pthread_condattr_init(&ca);
    pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
    pthread_cond_init(&s->cv, &ca);
    pthread_condattr_destroy(&ca);
    s->id = id;
    s->refs = 2;
    atomic_init(&s->abort_req, false);
    s->want_logprobs = req->sp.logprobs >= 0;
    s->notify = req->notify;
    s->notify_user = req->notify_user;
    s->prompt_tokens = req->n_prompt;
    return s;
}

/* Free a stream whose last reference is gone, with any output never read. */
static void stream_destroy(engine_stream *s)
{
    pthread_mutex_destroy(&s->mu);
    pthread_cond_destroy(&s->cv);
    inferd_free(s->tok);
    inferd_free(s->lp);
    inferd_free(s->plp);
    inferd_free(s->seg);
    inferd_buf_free(&s->text);
    inferd_free(s);
}

/* NOTE: destroy happens outside the mutex (it destroys that mutex); this is
 * safe because at zero no other party holds a pointer to s. */
void stream_unref(engine_stream *s)
{
    pthread_mutex_lock(&s->mu);
    INFERD_CHECK(s->refs > 0);
    int left = --s->refs;
    pthread_mutex_unlock(&s->mu);
    if (left == 0)
        stream_destroy(s);
}

/* Caller holds s->mu: wake the waiters, release the lock, then call the
 * consumer's notify (outside the lock, see stream_publish). */
static void wake_unlock(engine_stream *s)
{
    pthread_cond_broadcast(&s->cv);
    void (*notify)(void *) = s->notify;
    void *user = s->notify_user;
    pthread_mutex_unlock(&s->mu);
    if (notify)
        notify(user);
}

/* Under s->mu: record the end of the publish just appended (its tokens and
 * text end the buffers) with the totals it carries, for poll_step. */
static void push_seg(engine_stream *s)
{
    if (s->n_seg == s->cap_seg) {
        s->cap_seg = s->cap_seg ? 2 * s->cap_seg : 8;
        s->seg = inferd_realloc(s->seg, (size_t)s->cap_seg * sizeof *s->seg);
    }
    s->seg[s->n_seg++] = (stream_seg){.tok_end = s->n_tok,
                                      .text_end = s->text.len,
                                      .completion_tokens = s->completion_tokens,
                                      .cum_logprob = s->cum_logprob};
}

/* Engine thread only. Tokens and their logprobs (zeroed when lp is NULL but
 * the consumer asked for them, so the two arrays stay parallel) are appended;
 * the counters and times replace the previous ones (they are totals). The
 * first finish wins: a later finish event (there is none in practice) is
 * ignored, so the consumer sees one finish reason.
 * wake = false publishes without waking: the data is there for a consumer
 * that polls, but a waiting one (and notify) is woken only by the
 * stream_wake_unref the caller then owes (publish took a reference for it),
 * which the engine defers past the next step's launch (engine_step.c).
 * NOTE: notify(user) runs after s->mu is released (the callback may poll
 * this stream) and may run after the consumer released the stream; the
 * engine's reference keeps s alive, but notify_user's lifetime is the
 * caller's problem (the HTTP server makes a late call find no connection
 * and do nothing: server/srv_http.c). */
void stream_publish(engine_stream *s, const int32_t *tok, const engine_logprob *lp, int n_tok,
                    const char *text, size_t text_len, const engine_times *times, int completion_tokens,
                    int cached_tokens, finish_reason finish, const char *error, bool wake)
{
    pthread_mutex_lock(&s->mu);
    if (n_tok > 0) {
        if (s->n_tok + n_tok > s->cap_tok) {
            /* doubling: amortized O(1) per token for a consumer that polls
             * rarely; tok and lp share cap_tok */
            s->cap_tok = (s->n_tok + n_tok) * 2;
            s->tok = inferd_realloc(s->tok, (size_t)s->cap_tok * sizeof *s->tok);
            if (s->want_logprobs)
                s->lp = inferd_realloc(s->lp, (size_t)s->cap_tok * sizeof *s->lp);
        }
        memcpy(s->tok + s->n_tok, tok, (size_t)n_tok * sizeof *tok);
        if (s->want_logprobs) {
            for (int i = 0; i < n_tok; i++) {
                if (lp)
                    s->lp[s->n_tok + i] = lp[i];
                else
                    memset(&s->lp[s->n_tok + i], 0, sizeof *s->lp);
            }
        }
        s->n_tok += n_tok;
    }
    inferd_buf_append(&s->text, text, text_len);
    if (times)
        s->times = *times;
    s->completion_tokens = completion_tokens;
    if (n_tok > 0 || text_len > 0)
        push_seg(s);
    s->cached_tokens = cached_tokens;
    if (finish != FINISH_NONE && !s->finished) {
        s->finished = true;
        s->finish = finish;
        if (error)
            snprintf(s->error, sizeof s->error, "%s", error);
    }
    if (wake) {
        wake_unlock(s);
        return;
    }
    s->refs++; /* the deferred wake's, dropped by stream_wake_unref */
    pthread_mutex_unlock(&s->mu);
}

/* The deferred wake of a publish with wake = false: wake the waiters, call
 * notify, drop the reference that publish took (freeing s at zero). */
void stream_wake_unref(engine_stream *s)
{
    pthread_mutex_lock(&s->mu);
    INFERD_CHECK(s->refs > 0);
    int left = --s->refs;
    wake_unlock(s);
    if (left == 0)
        stream_destroy(s);
}

/* Engine thread only: prompt logprobs, computed in a prefill step, go
 * before that step's tokens (eng_step publishes them first). */
void stream_publish_prompt(engine_stream *s, const engine_logprob *lp, int n)
{
    if (n <= 0)
        return;
    pthread_mutex_lock(&s->mu);
    if (s->n_plp + n > s->cap_plp) {
        s->cap_plp = (s->n_plp + n) * 2;
        s->plp = inferd_realloc(s->plp, (size_t)s->cap_plp * sizeof *s->plp);
    }
    memcpy(s->plp + s->n_plp, lp, (size_t)n * sizeof *lp);
    s->n_plp += n;
    wake_unlock(s);
}

/* Set before the publish of the token it includes, so the output that
 * carries a token carries the sum up to it. */
void stream_set_cum_logprob(engine_stream *s, double v)
{
    pthread_mutex_lock(&s->mu);
    s->cum_logprob = v;
    pthread_mutex_unlock(&s->mu);
}

/* Under s->mu: is there anything the consumer has not seen? */
static bool has_news(const engine_stream *s)
{
    return s->n_tok > s->tok_head || s->n_plp > 0 || s->text.len > s->text_head ||
           (s->finished && !s->finish_delivered);
}

/* Under s->mu, before take() hands the buffers over: drop what poll_step
 * already handed out (the fronts up to the heads). The segments all go
 * with the take, so only tokens and text move. */
static void drop_taken(engine_stream *s)
{
    const int nt = s->n_tok - s->tok_head;
    if (s->tok_head > 0 && nt > 0) {
        memmove(s->tok, s->tok + s->tok_head, (size_t)nt * sizeof *s->tok);
        if (s->want_logprobs)
            memmove(s->lp, s->lp + s->tok_head, (size_t)nt * sizeof *s->lp);
    }
    s->n_tok = nt;
    if (s->text_head > 0)
        inferd_buf_consume(&s->text, s->text_head);
    s->tok_head = 0;
    s->text_head = 0;
}

/* Under s->mu: move the pending output into *out. */
/* Ownership of the token, logprob and text buffers moves to *out (the
 * consumer frees them with engine_output_free), so a poll copies nothing;
 * the stream starts again from empty buffers. The finish is delivered once:
 * finish_delivered makes the next has_news() false. */
static void take(engine_stream *s, engine_output *out)
{
    drop_taken(s);
    s->n_seg = s->seg_head = 0;
    memset(out, 0, sizeof *out);
    out->n_tokens = s->n_tok;
    out->token_ids = s->tok;
    out->logprobs = s->want_logprobs ? s->lp : NULL;
    if (!s->want_logprobs)
        inferd_free(s->lp);
    s->tok = NULL;
    s->lp = NULL;
    s->n_tok = s->cap_tok = 0;
    out->n_prompt_logprobs = s->n_plp;
    out->prompt_logprobs = s->plp;
    s->plp = NULL;
    s->n_plp = s->cap_plp = 0;
    out->text = inferd_buf_steal(&s->text, &out->text_len);
    out->finished = s->finished;
    out->finish = s->finished ? s->finish : FINISH_NONE;
    if (s->finished) {
        s->finish_delivered = true;
        snprintf(out->error, sizeof out->error, "%s", s->error);
    }
    out->prompt_tokens = s->prompt_tokens;
    out->completion_tokens = s->completion_tokens;
    out->cached_tokens = s->cached_tokens;
    out->cum_logprob = s->cum_logprob;
    out->times = s->times;
}

/* Under s->mu, with a pending publish: hand out the oldest one (copies of
 * its tokens, logprobs and text, with the totals it carried) and every
 * pending prompt logprob (they precede it); the finish comes with the last
 * publish. Once everything is out the buffers start again from 0, so
 * step-wise polling costs what the publishes copied in, however far the
 * consumer lags. */
static void take_step(engine_stream *s, engine_output *out)
{
    const stream_seg g = s->seg[s->seg_head++];
    if (s->seg_head == s->n_seg) {
        take(s, out); /* the last one: everything pending, finish included */
        return;
    }
    memset(out, 0, sizeof *out);
    const int nt = g.tok_end - s->tok_head;
    if (nt > 0) {
        out->token_ids = inferd_malloc((size_t)nt * sizeof *out->token_ids);
        memcpy(out->token_ids, s->tok + s->tok_head, (size_t)nt * sizeof *out->token_ids);
        if (s->want_logprobs) {
            out->logprobs = inferd_malloc((size_t)nt * sizeof *out->logprobs);
            memcpy(out->logprobs, s->lp + s->tok_head, (size_t)nt * sizeof *out->logprobs);
        }
    }
    out->n_tokens = nt;
    out->text_len = g.text_end - s->text_head;
    out->text = inferd_malloc(out->text_len + 1);
    memcpy(out->text, s->text.data + s->text_head, out->text_len);
    out->text[out->text_len] = '\0';
    s->tok_head = g.tok_end;
    s->text_head = g.text_end;
    out->n_prompt_logprobs = s->n_plp;
    out->prompt_logprobs = s->plp;
    s->plp = NULL;
    s->n_plp = s->cap_plp = 0;
    out->prompt_tokens = s->prompt_tokens;
    out->completion_tokens = g.completion_tokens;
    out->cached_tokens = s->cached_tokens;
    out->cum_logprob = g.cum_logprob;
    out->times = s->times;
}

/* Under s->mu: no new output, only the current totals and state (what a
 * poll that returns false still fills in). */
static void empty_output(const engine_stream *s, engine_output *out)
{
    memset(out, 0, sizeof *out);
    out->finished = s->finished;
    out->finish = s->finished ? s->finish : FINISH_NONE;
    out->prompt_tokens = s->prompt_tokens;
    out->completion_tokens = s->completion_tokens;
    out->cached_tokens = s->cached_tokens;
    out->cum_logprob = s->cum_logprob;
    out->times = s->times;
}

/* Free the buffers a poll handed over and clear the pointers, so calling it
 * twice, or on an output that came back empty, is harmless. */
void engine_output_free(engine_output *o)
{
    if (!o)
        return;
    inferd_free(o->token_ids);
    inferd_free(o->logprobs);
    inferd_free(o->text);
    inferd_free(o->prompt_logprobs);
    o->prompt_logprobs = NULL;
    o->n_prompt_logprobs = 0;
    o->token_ids = NULL;
    o->logprobs = NULL;
    o->text = NULL;
    o->n_tokens = 0;
    o->text_len = 0;
}

uint64_t engine_stream_id(const engine_stream *s)
{
    return s->id;
}

bool engine_stream_poll(engine_stream *s, engine_output *out)
{
    /* a zero timeout is an already expired deadline: never blocks */
    return engine_stream_wait(s, out, 0);
}

/* Wait for output on the consumer's thread. *out is always filled (empty
 * when false is returned) and must be freed with engine_output_free.
 * Returns at once, false, once the finish was delivered: a consumer loop
 * `while (!o.finished)` and a loop that waits after the finish both end.
 * One consumer per stream: two waiters would split the output. */
bool engine_stream_wait(engine_stream *s, engine_output *out, int timeout_ms)
{
    inferd_deadline dl = inferd_deadline_in_ms(timeout_ms);
    pthread_mutex_lock(&s->mu);
    while (!has_news(s)) {
        if (s->finished) /* finished and delivered: nothing will ever come */
            break;
        if (!inferd_deadline_cond_wait(dl, &s->cv, &s->mu))
            break;
    }
    bool news = has_news(s);
    if (news)
        take(s, out);
    else
        empty_output(s, out);
    pthread_mutex_unlock(&s->mu);
    return news;
}

/* Like engine_stream_poll, but one publish (one engine step's tokens and
 * text) at a time; see take_step. */
bool engine_stream_poll_step(engine_stream *s, engine_output *out)
{
    pthread_mutex_lock(&s->mu);
    const bool news = has_news(s);
    if (!news)
        empty_output(s, out);
    else if (s->seg_head < s->n_seg)
        take_step(s, out);
    else
        take(s, out);
    pthread_mutex_unlock(&s->mu);
    return news;
}

/* Lock-free: the engine polls the flag every iteration and finishes the
 * request with FINISH_ABORT (published to this stream) within one step. */
void engine_stream_abort(engine_stream *s)
{
    atomic_store(&s->abort_req, true);
}

/* The consumer's last call on s: request an abort (a no-op for a finished
 * request) and drop its reference. s must not be used afterwards; output
 * not yet polled is discarded. NULL is a no-op. */
void engine_stream_release(engine_stream *s)
{
    if (!s)
        return;
    atomic_store(&s->abort_req, true);
    stream_unref(s);
}
