/* scheduler/engine_submit.c: the caller-side half of the engine API:
 * request validation and submission, stats, idle waiting and the invariant
 * check. Everything here may run on any thread. */
#include <errno.h>
#include <math.h>
#include <string.h>
#include <time.h>

#include "common/alloc.h"
#include "common/rng.h"
#include "common/util.h"
#include "scheduler/engine_internal.h"

static inferd_status check_sampling(const engine *e, const sampling_params *sp)
{
    if (!isfinite(sp->temperature) || sp->temperature < 0)
        return inferd_set_error(INFERD_ERR_INVALID_ARG, "temperature must be >= 0 (got %g)", sp->temperature);
    if (!(sp->top_p > 0 && sp->top_p <= 1))
        return inferd_set_error(INFERD_ERR_INVALID_ARG, "top_p must be in (0, 1] (got %g)", sp->top_p);
    if (!(sp->min_p >= 0 && sp->min_p <= 1))
        return inferd_set_error(INFERD_ERR_INVALID_ARG, "min_p must be in [0, 1] (got %g)", sp->min_p);
    if (sp->max_tokens < 1)
        return inferd_set_error(INFERD_ERR_INVALID_ARG, "max_tokens must be >= 1 (got %d)", sp->max_tokens);
    if (sp->min_tokens < 0 || sp->min_tokens > sp->max_tokens)
        return inferd_set_error(INFERD_ERR_INVALID_ARG, "min_tokens must be in [0, max_tokens = %d] (got %d)",
                                sp->max_tokens, sp->min_tokens);
    if (sp->n_stop_token_ids < 0 || sp->n_stop_token_ids > SAMPLING_MAX_STOP)
        return inferd_set_error(INFERD_ERR_INVALID_ARG, "at most %d stop token ids (got %d)",
                                SAMPLING_MAX_STOP, sp->n_stop_token_ids);
    for (int i = 0; i < sp->n_stop_token_ids; i++)
        if (sp->stop_token_ids[i] < 0 || sp->stop_token_ids[i] >= e->vocab)
            return inferd_set_error(INFERD_ERR_INVALID_ARG, "stop token id %d outside the vocabulary [0, %d)",
                                    sp->stop_token_ids[i], e->vocab);
    if (sp->n_stop < 0 || sp->n_stop > SAMPLING_MAX_STOP)
        return inferd_set_error(INFERD_ERR_INVALID_ARG, "at most %d stop strings (got %d)", SAMPLING_MAX_STOP,
                                sp->n_stop);
    if (sp->n_stop > 0 && !e->tok)
        return inferd_set_error(INFERD_ERR_INVALID_ARG, "stop strings need a tokenizer");
    for (int i = 0; i < sp->n_stop; i++) {
        if (!sp->stop[i] || !sp->stop[i][0])
            return inferd_set_error(INFERD_ERR_INVALID_ARG, "stop string %d is empty", i);
        if (!util_utf8_valid(sp->stop[i], strlen(sp->stop[i])))
            return inferd_set_error(INFERD_ERR_INVALID_ARG, "stop string %d is not valid UTF-8", i);
    }
    if (sp->logprobs < -1 || sp->logprobs > SAMPLING_MAX_LOGPROBS)
        return inferd_set_error(INFERD_ERR_INVALID_ARG,
                                "logprobs must be in [0, %d] (or -1 for none), got %d", SAMPLING_MAX_LOGPROBS,
                                sp->logprobs);
    return INFERD_OK;
}

static inferd_status check_request(const engine *e, const engine_request *req)
{
    if (!req || req->n_prompt < 1 || !req->prompt_ids)
        return inferd_set_error(INFERD_ERR_INVALID_ARG, "prompt is empty");
    for (int i = 0; i < req->n_prompt; i++)
        if (req->prompt_ids[i] < 0 || req->prompt_ids[i] >= e->vocab)
            return inferd_set_error(INFERD_ERR_INVALID_ARG,
                                    "prompt token %d (at %d) outside the vocabulary [0, %d)",
                                    req->prompt_ids[i], i, e->vocab);
    if (!isfinite(req->timeout_s) || req->timeout_s < 0)
        return inferd_set_error(INFERD_ERR_INVALID_ARG, "timeout must be >= 0 seconds (got %g)",
                                req->timeout_s);
    inferd_status st = check_sampling(e, &req->sp);
    if (st != INFERD_OK)
        return st;
    int64_t total = (int64_t)req->n_prompt + req->sp.max_tokens;
    if (total > e->opts.max_model_len)
        return inferd_set_error(
            INFERD_ERR_TOO_LONG,
            "prompt (%d tokens) + max_tokens (%d) = %lld tokens exceeds the maximum model "
            "length of %d tokens",
            req->n_prompt, req->sp.max_tokens, (long long)total, e->opts.max_model_len);
    int64_t need = INFERD_CEIL_DIV(total - 1, (int64_t)e->block_size);
    int usable = kv_pool_num_usable(e->pool);
    if (need > usable)
        return inferd_set_error(
            INFERD_ERR_TOO_LONG,
            "prompt (%d tokens) + max_tokens (%d) needs %lld KV blocks of %d tokens, but the "
            "whole KV cache holds %d blocks (%lld tokens)",
            req->n_prompt, req->sp.max_tokens, (long long)need, e->block_size, usable,
            (long long)usable * e->block_size);
    return INFERD_OK;
}

static eng_req *make_req(const engine_request *req, engine_stream *s, const tokenizer *tok)
{
    eng_req *r = inferd_calloc(1, sizeof *r);
    r->stream = s;
    r->n_prompt = req->n_prompt;
    r->prompt = inferd_malloc((size_t)req->n_prompt * sizeof *r->prompt);
    memcpy(r->prompt, req->prompt_ids, (size_t)req->n_prompt * sizeof *r->prompt);
    r->sp = req->sp;
    for (int i = 0; i < SAMPLING_MAX_STOP; i++)
        r->sp.stop[i] = NULL;
    for (int i = 0; i < req->sp.n_stop; i++) {
        r->stop_copy[i] = inferd_strdup(req->sp.stop[i]);
        r->sp.stop[i] = r->stop_copy[i];
        r->max_stop_len = INFERD_MAX(r->max_stop_len, strlen(r->stop_copy[i]));
    }
    r->seed = req->sp.has_seed ? req->sp.seed
                               : rng_mix64((uint64_t)util_now_us() ^ (s->id * 0x9E3779B97F4A7C15ull));
    r->times.arrival = util_now_s();
    r->deadline = req->timeout_s > 0 ? r->times.arrival + req->timeout_s : 0;
    if (tok) {
        r->detok = tok_stream_new(tok, true);
        tok_stream_prefill(r->detok, req->prompt_ids, req->n_prompt);
    }
    r->text = inferd_malloc(1);
    r->text[0] = '\0';
    r->text_cap = 1;
    s->times.arrival = r->times.arrival;
    return r;
}

inferd_status engine_submit(engine *e, const engine_request *req, engine_stream **out)
{
    *out = NULL;
    inferd_status st = check_request(e, req);
    if (st != INFERD_OK)
        return st;
    pthread_mutex_lock(&e->mu);
    if (e->stopping) {
        pthread_mutex_unlock(&e->mu);
        return inferd_set_error(INFERD_ERR_UNAVAILABLE, "the engine is stopping");
    }
    int queued = e->n_pending + e->n_waiting_sched;
    if (queued >= e->opts.max_queued_requests) {
        pthread_mutex_unlock(&e->mu);
        return inferd_set_error(INFERD_ERR_QUEUE_FULL, "%d requests are waiting (limit %d)", queued,
                                e->opts.max_queued_requests);
    }
    uint64_t id = e->next_id++;
    pthread_mutex_unlock(&e->mu);

    /* build outside the lock: tokenizer prefill and copies may take a while */
    engine_stream *s = stream_new(id, req);
    eng_req *r = make_req(req, s, e->tok);

    pthread_mutex_lock(&e->mu);
    if (e->stopping) {
        pthread_mutex_unlock(&e->mu);
        eng_req_free(r);
        stream_unref(s);
        stream_unref(s);
        return inferd_set_error(INFERD_ERR_UNAVAILABLE, "the engine is stopping");
    }
    r->next = NULL;
    r->prev = e->pending_tail;
    if (e->pending_tail)
        e->pending_tail->next = r;
    else
        e->pending_head = r;
    e->pending_tail = r;
    e->n_pending++;
    pthread_cond_signal(&e->cv);
    pthread_mutex_unlock(&e->mu);
    *out = s;
    return INFERD_OK;
}

void engine_get_stats(engine *e, engine_stats *st)
{
    pthread_mutex_lock(&e->mu);
    *st = e->stats;
    pthread_mutex_unlock(&e->mu);
}

bool engine_wait_idle(engine *e, int timeout_ms)
{
    struct timespec dl;
    clock_gettime(CLOCK_MONOTONIC, &dl);
    if (timeout_ms >= 0) {
        dl.tv_sec += timeout_ms / 1000;
        dl.tv_nsec += (long)(timeout_ms % 1000) * 1000000L;
        if (dl.tv_nsec >= 1000000000L) {
            dl.tv_sec++;
            dl.tv_nsec -= 1000000000L;
        }
    }
    pthread_mutex_lock(&e->mu);
    while (e->n_live > 0 || e->n_pending > 0) {
        if (timeout_ms < 0) {
            pthread_cond_wait(&e->idle_cv, &e->mu);
        } else if (pthread_cond_timedwait(&e->idle_cv, &e->mu, &dl) == ETIMEDOUT) {
            break;
        }
    }
    bool idle = e->n_live == 0 && e->n_pending == 0;
    pthread_mutex_unlock(&e->mu);
    if (!idle)
        return false;
    /* n_live drops inside a step; take step_mu so the pool is settled */
    pthread_mutex_lock(&e->step_mu);
    bool all_free = !sched_has_work(e->s) && kv_pool_num_free(e->pool) == kv_pool_num_usable(e->pool);
    pthread_mutex_unlock(&e->step_mu);
    return all_free;
}

bool engine_check_invariants(engine *e)
{
    char msg[256];
    pthread_mutex_lock(&e->step_mu);
    bool ok = sched_check(e->s, msg, sizeof msg);
    pthread_mutex_unlock(&e->step_mu);
    if (!ok)
        inferd_set_error(INFERD_ERR_INTERNAL, "engine invariant broken: %s", msg);
    return ok;
}
