/* scheduler/engine_submit.c: the caller-side half of the engine API:
 * request validation and submission, stats, idle waiting and the invariant
 * check. Everything here may run on any thread. */
/*
 * Design choice: everything that can reject a request runs here, on the
 * caller's thread, before the request exists for the engine: a refusal is
 * a status the caller can map to HTTP 400/413/429/503, and the engine
 * thread never has to turn a bad request into a stream error. The cost is
 * that the checks use values fixed at engine_create (the fit limits), not
 * the live pool: a request that fits the whole KV cache is accepted even
 * when the cache is busy, and simply waits (or preempts) in the scheduler.
 * Not done here: tokenization or templating (the front ends do that) and
 * any fairness between callers.
 */
#include <errno.h>
#include <math.h>
#include <string.h>
#include <time.h>

#include "common/alloc.h"
#include "common/rng.h"
#include "common/util.h"
#include "scheduler/engine_internal.h"

/* The limits check_request and sched_add test against. Safe without a lock
 * from any thread: every field is fixed at engine_create (the pool's block
 * count never changes, only which blocks are free). */
void engine_get_fit_limits(const engine *e, sched_fit_limits *out)
{
    out->max_model_len = e->opts.max_model_len;
    out->block_size = e->block_size;
    out->kv_blocks = kv_pool_num_usable(e->pool);
}

/* The one check of a request: the sampling table's rules, then the parts
 * only the engine knows (vocabulary, tokenizer, length and KV capacity). */
static inferd_status check_request(const engine *e, const engine_request *req)
{
    if (!req || req->n_prompt < 1 || !req->prompt_ids)
        return inferd_set_error_at(INFERD_ERR_INVALID_ARG, "prompt", "prompt is empty");
    for (int i = 0; i < req->n_prompt; i++)
        if (req->prompt_ids[i] < 0 || req->prompt_ids[i] >= e->vocab)
            return inferd_set_error_at(INFERD_ERR_INVALID_ARG, "prompt",
                                    "prompt token %d (at %d) outside the vocabulary [0, %d)",
                                    req->prompt_ids[i], i, e->vocab);
    if (!isfinite(req->timeout_s) || req->timeout_s < 0)
        return inferd_set_error_at(INFERD_ERR_INVALID_ARG, "timeout", "timeout must be >= 0 seconds (got %g)",
                                   req->timeout_s);
    const char *param = NULL;
    inferd_status st = sampling_params_validate(&req->sp, e->vocab, &param);
    if (st != INFERD_OK)
        return inferd_set_error_param(st, param);
    if (req->sp.n_stop > 0 && !e->tok)
        return inferd_set_error_at(INFERD_ERR_INVALID_ARG, "stop", "stop strings need a tokenizer");
    sched_fit_limits lim;
    engine_get_fit_limits(e, &lim);
    st = sched_fit_check(&lim, req->n_prompt, req->sp.max_tokens);
    if (st != INFERD_OK)
        return inferd_set_error_param(st, "max_tokens");
    return INFERD_OK;
}

/* Build the engine's record of an accepted request: private copies of the
 * prompt and of every stop string (the caller's buffers are only valid
 * during engine_submit), the seed, the deadline and a detokenizer primed
 * with the prompt (so the first generated token decodes with the right
 * SentencePiece leading-space context). Never fails (allocation aborts).
 * The returned record is not yet visible to the engine; ownership passes
 * to it when pushed on e->pending. */
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
    /* without a seed: a fresh one per request; mixing in the id keeps two
     * requests submitted in the same microsecond apart */
    r->seed = req->sp.has_seed ? req->sp.seed
                               : rng_mix64((uint64_t)util_now_us() ^ (s->id * 0x9E3779B97F4A7C15ull));
    r->times.arrival = util_now_s();
    r->deadline = req->timeout_s > 0 ? inferd_deadline_from(r->times.arrival, req->timeout_s)
                                     : inferd_deadline_never();
    if (tok) {
        r->detok = tok_stream_new(tok, true);
        tok_stream_prefill(r->detok, req->prompt_ids, req->n_prompt);
    }
    /* no lock: s is not yet shared with the engine thread */
    s->times.arrival = r->times.arrival;
    return r;
}

/* Validate and queue one request; on success *out is the consumer's
 * reference to its stream (release it with engine_stream_release). On
 * error *out is NULL and nothing was queued. Thread-safe.
 *
 * Two short critical sections around an unlocked build: the first checks
 * the state and the queue bound and takes an id, the second re-checks
 * `stopping` and publishes. NOTE: because the bound is checked before the
 * build, concurrent submitters can each pass it and overshoot
 * max_queued_requests by at most the number of threads inside submit at
 * once; the bound is admission control, not a memory guarantee. */
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
    /* NOTE: n_admitting counts submissions between this check and their
     * push below (the build runs unlocked), so concurrent submitters cannot
     * all pass the bound at once. */
    int queued = (int)inferd_list_len(&e->pending) + e->n_waiting_sched + e->n_admitting;
    if (queued >= e->opts.max_queued_requests) {
        pthread_mutex_unlock(&e->mu);
        return inferd_set_error(INFERD_ERR_QUEUE_FULL, "%d requests are waiting (limit %d)", queued,
                                e->opts.max_queued_requests);
    }
    uint64_t id = e->next_id++;
    e->n_admitting++;
    pthread_mutex_unlock(&e->mu);

    /* build outside the lock: tokenizer prefill and copies may take a while */
    engine_stream *s = stream_new(id, req);
    eng_req *r = make_req(req, s, e->tok);

    pthread_mutex_lock(&e->mu);
    e->n_admitting--;
    if (e->stopping) {
        pthread_mutex_unlock(&e->mu);
        /* both references go: the engine never saw the stream (eng_req_free
         * does not touch it) and the caller gets no stream back */
        eng_req_free(r);
        stream_unref(s);
        stream_unref(s);
        return inferd_set_error(INFERD_ERR_UNAVAILABLE, "the engine is stopping");
    }
    inferd_list_push_back(&e->pending, &r->link);
    pthread_cond_signal(&e->cv);
    pthread_mutex_unlock(&e->mu);
    *out = s;
    return INFERD_OK;
}

/* The snapshot publish_stats wrote at the end of the last engine loop
 * iteration: consistent with itself, up to one step old. Thread-safe. */
void engine_get_stats(engine *e, engine_stats *st)
{
    pthread_mutex_lock(&e->mu);
    *st = e->stats;
    pthread_mutex_unlock(&e->mu);
}

/* Block until no request is pending or live and every KV block is back in
 * the free list (cached blocks count as free), or until timeout_ms passes
 * (< 0: no timeout). True when idle. Any thread but the engine's. The pool
 * check is what tests want: a request that finished but leaked a block
 * makes this return false. */
bool engine_wait_idle(engine *e, int timeout_ms)
{
    inferd_deadline dl = inferd_deadline_in_ms(timeout_ms);
    pthread_mutex_lock(&e->mu);
    while (e->n_live > 0 || !inferd_list_empty(&e->pending)) {
        if (!inferd_deadline_cond_wait(dl, &e->idle_cv, &e->mu))
            break;
    }
    bool idle = e->n_live == 0 && inferd_list_empty(&e->pending);
    pthread_mutex_unlock(&e->mu);
    if (!idle)
        return false;
    /* n_live drops inside a step; take step_mu so the pool is settled */
    pthread_mutex_lock(&e->step_mu);
    bool all_free = !sched_has_work(e->s) && kv_pool_num_free(e->pool) == kv_pool_num_usable(e->pool);
    pthread_mutex_unlock(&e->step_mu);
    return all_free;
}

/* Run sched_check (queues, block tables, pool reference counts) between
 * steps; false with the message set as the last error. step_mu makes the
 * check see a settled state even while the engine runs. Tests only: it
 * walks every block. */
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
