/* scheduler/engine_output.c: what happens to each sampled token: append it
 * to the request, detokenize incrementally, apply the stop conditions, and
 * publish the new output to the request's stream.
 *
 * Stop conditions, in vLLM's order and semantics:
 *  - before min_tokens generated tokens nothing but the length limit stops;
 *  - EOS ids of the model config (unless ignore_eos) and stop_token_ids:
 *    the token is part of token_ids (and counted) but its text is not;
 *  - stop strings are matched on the detokenized text, including across
 *    token boundaries (the search window reaches max_stop_len - 1 bytes back
 *    into older text); the output text ends right before the match;
 *  - max_tokens or the model length: FINISH_LENGTH.
 * Text that could still be the start of a stop string is held back until it
 * can no longer be one (or the request finishes).
 *
 * Design choice: stop strings are matched on the request's whole text
 * buffer with a bounded look-back (max_stop_len - 1 bytes) instead of an
 * automaton: O(new bytes + look-back) per stop string per token, with
 * SAMPLING_MAX_STOP_LEN bounding the look-back. The trade-off is the
 * held-back text: a consumer sees text that might begin a stop string only
 * one token later. Everything here runs on the engine thread, with step_mu
 * held; the only lock taken is e->mu in retire() and the stream's own in
 * stream_publish(). A token's publish does not wake its consumer: the
 * wake-ups (a condvar broadcast and the notify callback, which for an HTTP
 * connection resumes it in libmicrohttpd's event loop) wait in e->wake
 * until the next step is on the device (eng_flush_wakes), so they overlap
 * it instead of delaying its launch; with async scheduling the next step
 * is launched before these outputs are processed, so they go right after
 * them.
 */
#include <string.h>

#include "common/alloc.h"
#include "common/check.h"
#include "common/util.h"
#include "scheduler/engine_internal.h"

/* Free the engine's record: stop-string copies, detokenizer, the prompt
 * copy (still owned only before admission), the text. The stream is not
 * touched: its references are dropped by retire() or, for a request that
 * never reached the engine, by engine_submit. NULL is a no-op. */
void eng_req_free(eng_req *r)
{
    if (!r)
        return;
    for (int i = 0; i < SAMPLING_MAX_STOP; i++)
        inferd_free(r->stop_copy[i]);
    if (r->detok)
        tok_stream_free(r->detok);
    inferd_free(r->prompt);
    inferd_free(r->held);
    inferd_buf_free(&r->text);
    inferd_free(r);
}

/* Earliest match of any stop string starting at or after `from`; -1 if none. */
static long find_stop(const eng_req *r, size_t from)
{
    long best = -1;
    for (int i = 0; i < r->sp.n_stop; i++) {
        const char *needle = r->sp.stop[i];
        size_t nl = strlen(needle);
        if (nl == 0 || r->text.len < nl)
            continue;
        /* naive scan: needles are <= SAMPLING_MAX_STOP_LEN bytes and the
         * window is the new text plus the look-back, so this stays small */
        for (size_t p = from; p + nl <= r->text.len; p++) {
                /* a later needle can only win with an earlier start */
            if (best >= 0 && (long)p >= best)
                break;
            if (memcmp(r->text.data + p, needle, nl) == 0) {
                best = (long)p;
                break;
            }
        }
    }
    return best;
}

/* Bytes at the end of the unemitted text that are a proper prefix of some
 * stop string (they must wait for the next token). Only the longest such
 * suffix matters, hence `k > keep`. Only unemitted bytes are considered:
 * text already published cannot be taken back.
 * NOTE: nl - 1 relies on stop strings being non-empty, which
 * sampling_params_validate guarantees. */
/* Bytes at the end of the unemitted text that are a proper prefix of some
 * stop string (they must wait for the next token). */
static size_t holdback(const eng_req *r)
{
    size_t avail = r->text.len - r->emitted;
    size_t keep = 0;
    for (int i = 0; i < r->sp.n_stop; i++) {
        size_t nl = strlen(r->sp.stop[i]);
        for (size_t k = INFERD_MIN(avail, nl - 1); k > keep; k--) {
            if (memcmp(r->text.data + r->text.len - k, r->sp.stop[i], k) == 0) {
                keep = k;
                break;
            }
        }
    }
    return keep;
}

/* Search the text appended since old_len (reaching back max_stop_len - 1
 * bytes across the boundary) for a stop string; on a match cut the text
 * there and return true. */
/* NOTE: the search never starts before r->emitted, so a cut never removes
 * text the consumer already has. That loses no match because holdback()
 * never lets a suffix that could begin a stop string be emitted. */
static bool match_stop(eng_req *r, size_t old_len)
{
    if (r->sp.n_stop == 0 || r->text.len <= old_len)
        return false;
    size_t back = r->max_stop_len > 0 ? r->max_stop_len - 1 : 0;
    size_t from = old_len > back ? old_len - back : 0;
    if (from < r->emitted)
        from = r->emitted;
    long at = find_stop(r, from);
    if (at < 0)
        return false;
    r->text.len = (size_t)at;
    r->text.data[at] = '\0';
    return true;
}

/* The request ends: let the detokenizer emit what it held back (an
 * incomplete character at the very end). Returns true when that text
 * completed a stop string (the text is cut there). */
/* may_stop is false before min_tokens: then the flushed text is kept even
 * if it completes a stop string, as for any other token. A flush error
 * loses at most the held-back bytes, which is preferred to failing the
 * request at its very end. */
static bool flush_detok(eng_req *r, bool may_stop)
{
    if (!r->detok)
        return false;
    char *delta = NULL;
    size_t dlen = 0;
    size_t old_len = r->text.len;
    if (tok_stream_flush(r->detok, &delta, &dlen) == INFERD_OK && dlen > 0)
        inferd_buf_append(&r->text, delta, dlen);
    inferd_free(delta);
    return may_stop && match_stop(r, old_len);
}

/* Is t one of the model's EOS ids (config: eos_token_id may be a list)? */
static bool is_eos(const engine *e, int32_t t)
{
    for (int i = 0; i < e->cfg->n_eos; i++)
        if (e->cfg->eos_ids[i] == t)
            return true;
    return false;
}

/* Is t one of the request's stop_token_ids? Linear: at most 16. */
static bool is_stop_token(const eng_req *r, int32_t t)
{
    for (int i = 0; i < r->sp.n_stop_token_ids; i++)
        if (r->sp.stop_token_ids[i] == t)
            return true;
    return false;
}

/* Remove r from the live list and the scheduler; drop the engine's stream
 * reference; free r. */
/* The single exit of every request (eng_finish, eng_accept_token): after
 * it r is gone and the consumer's stream is the only trace of it.
 * NOTE: sched_remove releases r's KV blocks, last block first, so the
 * blocks are free for the very next step. n_live is decremented under e->mu
 * because engine_wait_idle reads it there. */
static void retire(engine *e, eng_req *r, finish_reason reason)
{
    inferd_list_unlink(&e->live, &r->link);
    eng_group_detach(e, r);
    eng_penalty_release(e, r);
    eng_forget_inflight(e, r);
    if (r->sr)
        sched_remove(e->s, r->sr);
    r->sr = NULL;
    e->n_finished[reason]++;
    pthread_mutex_lock(&e->mu);
    e->n_live--;
    pthread_mutex_unlock(&e->mu);
    stream_unref(r->stream);
    eng_req_free(r);
}

/* Prompt tokens the prefix cache served at first admission (0 before the
 * request reached the scheduler). */
static int cached_tokens_of(const eng_req *r)
{
    return r->sr ? r->sr->cached_tokens : 0;
}

/* Finish r now with FINISH_ABORT (consumer abort, timeout, shutdown) or
 * FINISH_ERROR (a failed step): flush the detokenizer (not on error),
 * publish whatever
 * text was held back plus the finish event, and retire r. r is freed on
 * return. Engine thread (or engine_stop's thread once the engine thread
 * has exited). */
void eng_finish(engine *e, eng_req *r, finish_reason reason, const char *error)
{
    r->times.finished = util_now_s();
    if (reason != FINISH_ERROR)
        flush_detok(r, r->n_gen >= r->sp.min_tokens);
    size_t n = r->text.len - r->emitted;
    stream_publish(r->stream, NULL, NULL, 0, inferd_buf_str(&r->text) + r->emitted, n, &r->times, r->n_gen,
                   cached_tokens_of(r), reason, error, true);
    r->emitted = r->text.len;
    retire(e, r, reason);
}

/* Queue s (published with wake = false) for eng_flush_wakes. */
static void defer_wake(engine *e, engine_stream *s)
{
    if (e->n_wake == e->cap_wake) {
        e->cap_wake = e->cap_wake ? 2 * e->cap_wake : 64;
        e->wake = inferd_realloc(e->wake, (size_t)e->cap_wake * sizeof *e->wake);
    }
    e->wake[e->n_wake++] = s;
}

/* Take one sampled token of a running request: append it to the
 * scheduler's sequence, decode its text, decide whether the request ends,
 * publish the token with the text that is now safe to show (its consumer
 * is woken later, by eng_flush_wakes), and retire the request when it
 * finished (true: r is freed, do not touch it).
 * Order of the checks matters and follows vLLM: a stop token wins over a
 * stop string found in the same token, which wins over the length limit.
 * lp may be NULL (no logprobs requested). Engine thread, r->sr non-NULL. */
bool eng_accept_token(engine *e, eng_req *r, int32_t token, const engine_logprob *lp)
{
    double now = util_now_s();
    sched_append_token(e->s, r->sr, token);
    r->n_gen++;
    e->n_gen_tokens++;
    if (r->times.first_token == 0)
        r->times.first_token = now;
    r->times.last_token = now;

    finish_reason fin = FINISH_NONE;
    bool may_stop = r->n_gen >= r->sp.min_tokens;
    /* a stop/EOS token's text is never decoded: it must not appear in the
     * output text, but it stays in token_ids and in completion_tokens */
    bool stop_tok = may_stop && ((!r->sp.ignore_eos && is_eos(e, token)) || is_stop_token(r, token));
    if (stop_tok)
        fin = FINISH_STOP;
    size_t old_len = r->text.len;
    if (r->detok && !stop_tok) {
        char *delta = NULL;
        size_t dlen = 0;
        if (tok_stream_push(r->detok, token, &delta, &dlen) == INFERD_OK && dlen > 0)
            inferd_buf_append(&r->text, delta, dlen);
        inferd_free(delta);
    }
    if (fin == FINISH_NONE && may_stop && match_stop(r, old_len))
        fin = FINISH_STOP;
        /* the same limit seen from the scheduler (cap = prompt +
         * max_tokens): never let sched_append_token pass its bound */
    else if (fin == FINISH_NONE && (r->n_gen >= r->sp.max_tokens || r->sr->n_total >= r->sr->cap))
        fin = FINISH_LENGTH;
        /* at the end, flush the detokenizer's held-back bytes (an
         * incomplete UTF-8 tail); they may still complete a stop string */
    if (fin == FINISH_LENGTH || stop_tok) {
        if (flush_detok(r, may_stop))
            fin = FINISH_STOP;
    }

    size_t emit_to = r->text.len;
    if (fin == FINISH_NONE && r->sp.n_stop > 0)
        emit_to -= holdback(r);
    if (fin != FINISH_NONE)
        r->times.finished = now;
    stream_publish(r->stream, &token, lp, 1, inferd_buf_str(&r->text) + r->emitted, emit_to - r->emitted,
                   &r->times, r->n_gen, cached_tokens_of(r), fin, NULL, false);
    defer_wake(e, r->stream);
    r->emitted = emit_to;
    if (fin == FINISH_NONE)
        return false;
    retire(e, r, fin);
    return true;
}
