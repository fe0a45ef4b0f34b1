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
static eng_req *make_req(const engine_request *req, engine_stream *s, const tokenizer *tok, uint64_t seed)
{
    eng_req *r = inferd_calloc(1, sizeof *r);
    r->stream = s;
    r->n_prompt = req->n_prompt;
    r->prompt = inferd_malloc((size_t)req->n_prompt * sizeof *r->prompt);
    memcpy(r->prompt, req->prompt_ids, (size_t)req->n_prompt * sizeof *r->prompt);
    r->sp = req->sp;
    r->pen_slot = -1;
    for (int i = 0; i < SAMPLING_MAX_STOP; i++)
        r->sp.stop[i] = NULL;
    for (int i = 0; i < req->sp.n_stop; i++) {
        r->stop_copy[i] = inferd_strdup(req->sp.stop[i]);
        r->sp.stop[i] = r->stop_copy[i];
        r->max_stop_len = INFERD_MAX(r->max_stop_len, strlen(r->stop_copy[i]));
    }
    r->seed = seed;
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

/* The group's seed: the request's, or without one a fresh one; mixing in
 * the id keeps two requests submitted in the same microsecond apart. */
static uint64_t group_seed(const engine_request *req, uint64_t id)
{
    return req->sp.has_seed ? req->sp.seed : rng_mix64((uint64_t)util_now_us() ^ (id * 0x9E3779B97F4A7C15ull));
}

uint64_t engine_seq_seed(uint64_t seed, int i)
{
    return seed + (uint64_t)i; /* wraps mod 2^64, like vLLM's seed + index on int64 bits */
}

/* Link the group: sequence 0 leads, the others wait for its fork. */
static void link_group(eng_req **rs, int n)
{
    if (n < 2)
        return;
    rs[0]->held = inferd_malloc((size_t)(n - 1) * sizeof *rs[0]->held);
    for (int i = 1; i < n; i++) {
        rs[0]->held[rs[0]->n_held++] = rs[i];
        rs[i]->leader = rs[0];
    }
}

/* First critical section of a submission of n sequences: the state and the
 * queue bound; on success *id is the first of n ids taken and the n are
 * counted in n_admitting until submit_publish. NOTE: n_admitting counts
 * submissions between this check and their push (the build runs
 * unlocked), so concurrent submitters cannot all pass the bound at once;
 * the bound is admission control, not a memory guarantee. */
static inferd_status submit_reserve(engine *e, int n, uint64_t *id)
{
    pthread_mutex_lock(&e->mu);
    if (e->stopping) {
        pthread_mutex_unlock(&e->mu);
        return inferd_set_error(INFERD_ERR_UNAVAILABLE, "the engine is stopping");
    }
    int queued = (int)inferd_list_len(&e->pending) + e->n_waiting_sched + e->n_admitting;
    if (queued + n > e->opts.max_queued_requests) {
        pthread_mutex_unlock(&e->mu);
        return inferd_set_error(INFERD_ERR_QUEUE_FULL, "%d requests are waiting (limit %d)", queued,
                                e->opts.max_queued_requests);
    }
    *id = e->next_id;
    e->next_id += (uint64_t)n;
    e->n_admitting += n;
    pthread_mutex_unlock(&e->mu);
    return INFERD_OK;
}

/* Second critical section: publish the n built sequences at once (the
 * engine thread takes them in the same pass), or, when the engine began
 * stopping meanwhile, free them (both stream references: the engine never
 * saw them and the caller gets none) and fail. */
static inferd_status submit_publish(engine *e, eng_req **r, engine_stream **s, int n)
{
    pthread_mutex_lock(&e->mu);
    e->n_admitting -= n;
    if (e->stopping) {
        pthread_mutex_unlock(&e->mu);
        for (int i = 0; i < n; i++) {
            eng_req_free(r[i]);
            stream_unref(s[i]);
            stream_unref(s[i]);
        }
        return inferd_set_error(INFERD_ERR_UNAVAILABLE, "the engine is stopping");
    }
    for (int i = 0; i < n; i++)
        inferd_list_push_back(&e->pending, &r[i]->link);
    pthread_cond_signal(&e->cv);
    pthread_mutex_unlock(&e->mu);
    return INFERD_OK;
}

/* Validate and queue n sequences of one request (engine_submit_n); on
 * success out[i] is the consumer's reference to sequence i's stream
 * (release each with engine_stream_release). On error every out[i] is
 * NULL and nothing was queued. Thread-safe: two short critical sections
 * (submit_reserve, submit_publish) around an unlocked build, the whole
 * group published at once so the engine thread takes a leader and its
 * held sequences in the same pass. */
inferd_status engine_submit_n(engine *e, const engine_request *req, int n, engine_stream **out)
{
    if (n < 1 || n > SAMPLING_MAX_SEQS) /* before out[] is touched: it may be shorter */
        return inferd_set_error_at(INFERD_ERR_INVALID_ARG, "n", "'n' must be in [1, %d] sequences, got %d",
                                   SAMPLING_MAX_SEQS, n);
    for (int i = 0; i < n && out; i++)
        out[i] = NULL;
    inferd_status st = check_request(e, req);
    uint64_t id = 0;
    if (st != INFERD_OK || (st = submit_reserve(e, n, &id)) != INFERD_OK)
        return st;
    /* build outside the lock: tokenizer prefill and copies may take a while */
    engine_stream *s[SAMPLING_MAX_SEQS];
    eng_req *r[SAMPLING_MAX_SEQS];
    uint64_t seed = group_seed(req, id);
    for (int i = 0; i < n; i++) {
        s[i] = stream_new(id + (uint64_t)i, req);
        r[i] = make_req(req, s[i], e->tok, engine_seq_seed(seed, i));
        if (i > 0) /* forked from sequence 0's prompt KV: only it computes the prompt's logprobs */
            r[i]->sp.prompt_logprobs = -1;
    }
    link_group(r, n);
    if ((st = submit_publish(e, r, s, n)) != INFERD_OK)
        return st;
    for (int i = 0; i < n; i++)
        out[i] = s[i];
    return INFERD_OK;
}

/* Contract (engine.h): n_reqs requests of one sequence each, validated
 * first (all or nothing), then published at once like a group of
 * engine_submit_n, so the engine's next step sees all of them. */
inferd_status engine_submit_many(engine *e, const engine_request *reqs, int n_reqs, engine_stream **out)
{
    if (n_reqs < 1 || n_reqs > ENGINE_SUBMIT_MANY_MAX) /* before out[] is touched */
        return inferd_set_error(INFERD_ERR_INVALID_ARG, "engine_submit_many: %d requests (1..%d)", n_reqs,
                                ENGINE_SUBMIT_MANY_MAX);
    for (int i = 0; i < n_reqs && out; i++)
        out[i] = NULL;
    for (int i = 0; i < n_reqs; i++) {
        inferd_status st = check_request(e, &reqs[i]);
        if (st != INFERD_OK) {
            char why[256];
            snprintf(why, sizeof why, "%s", inferd_last_error());
            return inferd_set_error(st, "request %d (%d prompt tokens): %s", i, reqs[i].n_prompt, why);
        }
    }
    inferd_status st;
    uint64_t id = 0;
    if ((st = submit_reserve(e, n_reqs, &id)) != INFERD_OK)
        return st;
    engine_stream **s = inferd_malloc((size_t)n_reqs * sizeof *s);
    eng_req **r = inferd_malloc((size_t)n_reqs * sizeof *r);
    for (int i = 0; i < n_reqs; i++) {
        s[i] = stream_new(id + (uint64_t)i, &reqs[i]);
        r[i] = make_req(&reqs[i], s[i], e->tok, group_seed(&reqs[i], id + (uint64_t)i));
    }
    st = submit_publish(e, r, s, n_reqs);
    for (int i = 0; i < n_reqs && st == INFERD_OK; i++)
        out[i] = s[i];
    inferd_free(r);
    inferd_free(s);
    return st;
}

/* One sequence: the group of one (its seed is the request's, unchanged). */
inferd_status engine_submit(engine *e, const engine_request *req, engine_stream **out)
{
    return engine_submit_n(e, req, 1, out);
}

/* Insertion sort: n <= SAMPLING_MAX_SEQS. Strict '>' keeps equal sums in
 * index order. */
void engine_rank_seqs(const double *cum_logprob, int n, int *order)
{
    for (int i = 0; i < n; i++) {
        int k = i;
        while (k > 0 && cum_logprob[i] > cum_logprob[order[k - 1]]) {
            order[k] = order[k - 1];
            k--;
        }
        order[k] = i;
    }
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
