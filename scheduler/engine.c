/* scheduler/engine.c: the engine's lifecycle (create, start, stop, free) and
 * its thread loop; the caller-side API (submit, stats, idle wait) is in
 * engine_submit.c (see engine.h and engine_internal.h).
 *
 * Loop: take the submitted requests (under e->mu), add them to the
 * scheduler, finish those whose consumer aborted or whose deadline passed,
 * run one step (engine_step.c), publish the stats snapshot. The thread
 * sleeps on e->cv only when no request is live or pending, so aborts need
 * no wake-up: they are atomic flags polled every iteration.
 *
 * Validation happens in engine_submit, on the caller's thread, against
 * values fixed at engine_create (model length, block size, pool size), so a
 * request that can never run is rejected with a status instead of failing
 * later; the scheduler re-checks the same limits when the request arrives.
 *
 * Design choice: one engine thread owns every piece of mutable inference
 * state (scheduler, pool, per-step buffers, the live list), so none of it
 * needs a lock of its own; callers only touch the pending list and the stats
 * snapshot under e->mu. The cost is that a step's latency is seen by every
 * request, and submit -> first schedule waits for the current step to end.
 * Not done here: priorities, fairness across clients, or any step
 * pipelining (the CPU builds batch N+1 only after batch N is sampled).
 *
 * Lock order: e->step_mu before e->mu, never the reverse (the loop holds
 * step_mu across a step and takes mu briefly inside it, in retire() and
 * publish_stats()); a stream's mutex is taken last and never held while
 * taking another lock.
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "common/alloc.h"
#include "common/check.h"
#include "common/log.h"
#include "common/rng.h"
#include "common/util.h"
#include "scheduler/engine_internal.h"

/* --- lifecycle ------------------------------------------------------------ */

/* Size the per-step host buffers for the clamped limits: T tokens and S
 * sequences per step, S block tables of max_blocks_per_seq entries. Called
 * once at create, so a step never allocates (h_logits, needed only for
 * logprobs, is allocated lazily by engine_step.c). inferd_malloc aborts on
 * OOM, hence no error path.
 * NOTE: the products are size_t on purpose: S * max_blocks_per_seq can
 * exceed int for long contexts with small blocks. */
static void alloc_buffers(engine *e)
{
    size_t T = (size_t)e->opts.max_num_batched_tokens, S = (size_t)e->opts.max_num_seqs;
    e->b_tokens = inferd_malloc(T * sizeof(int32_t));
    e->b_positions = inferd_malloc(T * sizeof(int32_t));
    e->b_slots = inferd_malloc(T * sizeof(int64_t));
    e->b_qsl = inferd_malloc((S + 1) * sizeof(int32_t));
    e->b_seq_lens = inferd_malloc(S * sizeof(int32_t));
    e->b_tables = inferd_malloc(S * (size_t)e->max_blocks_per_seq * sizeof(int32_t));
    e->b_logits_idx = inferd_malloc(S * sizeof(int32_t));
    e->b_row_item = inferd_malloc(S * sizeof(int32_t));
    e->b_sparams = inferd_malloc(S * sizeof(kern_sample_params));
    e->b_sampled = inferd_malloc(S * sizeof(int32_t));
    e->b_prev_rows = inferd_malloc(T * sizeof(int32_t));
    for (int k = 0; k < 2; k++) {
        e->fl_row_item[k] = inferd_malloc(S * sizeof(int32_t));
        e->fl_item_row[k] = inferd_malloc(S * sizeof(int32_t));
    }
}

/* Clamp the engine limits to what the model's buffers were sized for.
 * The model allocated its activations and device block tables at load from
 * its own copies of these limits; an engine asking for more would overrun
 * them, so asking for more is a warning and a clamp, not an error (the
 * options were already validated against the same rows). max_model_len 0
 * means "the model's". */
/* Clamp the engine limits to what the model's buffers were sized for. */
static void clamp_opts(engine *e)
{
    engine_opts *o = &e->opts;
    int T = model_max_num_batched_tokens(e->m), S = model_max_num_seqs(e->m);
    int L = model_max_model_len(e->m);
    if (o->max_num_batched_tokens > T) {
        INFERD_LOG_WARN("engine: max_num_batched_tokens %d > the model's %d; using %d", o->max_num_batched_tokens, T,
                 T);
        o->max_num_batched_tokens = T;
    }
    if (o->max_num_seqs > S) {
        INFERD_LOG_WARN("engine: max_num_seqs %d > the model's %d; using %d", o->max_num_seqs, S, S);
        o->max_num_seqs = S;
    }
    if (o->max_model_len == 0 || o->max_model_len > L) {
        if (o->max_model_len > L)
            INFERD_LOG_WARN("engine: max_model_len %d > the model's %d; using %d", o->max_model_len, L, L);
        o->max_model_len = L;
    }
}

/* Build an engine over a loaded model: validate opts against the option
 * rows, clamp them to the model, create the KV block pool (all of the
 * model's KV blocks) and the scheduler, size the step buffers. The thread is
 * not started (engine_start). m and tok are borrowed and must outlive the
 * engine; tok may be NULL (no text, no stop strings).
 * Errors: INVALID_ARG from the rows or when tok can produce an id >= the
 * model's vocab_size (both sizes named), or what kv_pool_init / sched_init
 * return; *out is NULL and nothing is leaked. Any thread, once. */
/* The tokenizer must not produce ids the model has no embedding row for:
 * its largest id (model vocab and added tokens, tok_vocab_size = max + 1)
 * below the model's vocab_size. Checked once here, the one place that gets
 * both; otherwise the first request that meets such a token fails (or, for
 * a stop or special token, is silently never produced). A model vocab
 * larger than the tokenizer's (padded embeddings, as Qwen ships) is fine. */
static inferd_status check_tok_vocab(const model *m, const tokenizer *tok)
{
    if (!tok)
        return INFERD_OK;
    int mv = model_get_config(m)->vocab_size, tv = tok_vocab_size(tok);
    if (tv <= mv)
        return INFERD_OK;
    return inferd_set_error(INFERD_ERR_INVALID_ARG,
                            "tokenizer and model do not match: the tokenizer's largest token id is %d (%d ids "
                            "including added tokens) but the model's vocab_size (config.json) is %d, so ids %d..%d "
                            "have no embedding; use the tokenizer that ships with the model",
                            tv - 1, tv, mv, mv, tv - 1);
}

inferd_status engine_create(const engine_opts *opts, model *m, const tokenizer *tok, engine **out)
{
    *out = NULL;
    inferd_status st = engine_opts_validate(opts); /* the option rows (engine_opts.c) */
    if (st != INFERD_OK)
        return st;
    if ((st = check_tok_vocab(m, tok)) != INFERD_OK)
        return st;
    engine *e = inferd_calloc(1, sizeof *e);
    e->opts = *opts;
    e->m = m;
    e->tok = tok;
    e->cfg = model_get_config(m);
    e->vocab = e->cfg->vocab_size;
    e->block_size = model_block_size(m);
    e->max_blocks_per_seq = model_max_blocks_per_seq(m);
    clamp_opts(e);
    st = kv_pool_init(model_num_kv_blocks(m), e->block_size, opts->enable_prefix_caching, &e->pool);
    if (st != INFERD_OK) {
        inferd_free(e);
        return st;
    }
    sched_opts so = {.max_num_seqs = e->opts.max_num_seqs,
                     .max_num_batched_tokens = e->opts.max_num_batched_tokens,
                     .max_model_len = e->opts.max_model_len};
    if ((st = sched_init(&so, e->pool, &e->s)) != INFERD_OK) {
        kv_pool_free(e->pool);
        inferd_free(e);
        return st;
    }
    alloc_buffers(e);
    e->async = opts->async_scheduling && model_step_chainable(m);
    const char *chain = getenv("INFERD_ASYNC_CHAIN");
    e->chain_decode = chain && strcmp(chain, "decode") == 0;
    pthread_mutex_init(&e->mu, NULL);
    pthread_mutex_init(&e->step_mu, NULL);
    pthread_condattr_t ca;
    pthread_condattr_init(&ca);
    /* monotonic: engine_wait_idle's timed wait must not jump with the wall
     * clock (inferd_deadline_cond_wait computes its abstime on it) */
    pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
    pthread_cond_init(&e->cv, &ca);
    pthread_cond_init(&e->idle_cv, &ca);
    pthread_condattr_destroy(&ca);
    e->next_id = 1;
    inferd_list_init(&e->pending);
    inferd_list_init(&e->live);
    e->stats.kv_blocks_total = kv_pool_num_usable(e->pool);
    INFERD_LOG_INFO(
        "engine: %d seqs, %d tokens/step, max model len %d, %d KV blocks of %d tokens, prefix caching %s, "
        "async scheduling %s",
        e->opts.max_num_seqs, e->opts.max_num_batched_tokens, e->opts.max_model_len,
        kv_pool_num_usable(e->pool), e->block_size, opts->enable_prefix_caching ? "on" : "off",
        e->async ? "on" : "off");
    *out = e;
    return INFERD_OK;
}

/* --- thread loop ---------------------------------------------------------- */

/* Move a taken submission into the scheduler (engine thread, step_mu held).
 * r joins e->live first so that every outcome, including a refusal by
 * sched_add, leaves through eng_finish/retire, which unlinks it, drops the
 * engine's stream reference and decrements n_live. On success the prompt
 * copy is freed: the scheduler holds its own copy in sched_req.tokens.
 * sched_add re-runs the fit check engine_submit already passed; it cannot
 * fail for an accepted request, but if it did the consumer would see
 * FINISH_ERROR with the message rather than a hang. */
/* Move a taken submission into the scheduler (engine thread). */
void eng_sched_add(engine *e, eng_req *r)
{
    inferd_status st = sched_add(e->s, r->stream->id, r->prompt, r->n_prompt, r->sp.max_tokens, r, &r->sr);
    if (st != INFERD_OK) {
        eng_finish(e, r, FINISH_ERROR, inferd_last_error());
        return;
    }
    r->sr->no_prefix_hits = r->sp.prompt_logprobs >= 0;
    inferd_free(r->prompt);
    r->prompt = NULL;
}

/* A group's held sequence (r->leader set) stays out of the scheduler until
 * its leader forks it (engine_fork.c); it keeps its prompt copy for the
 * case where it has to run on its own. */
static void admit(engine *e, eng_req *r)
{
    inferd_list_push_back(&e->live, &r->link);
    r->in_live = true;
    /* the penalty slots are allocated by the first request that needs them */
    if (eng_penalized(r) && eng_penalty_reserve(e) != INFERD_OK) {
        eng_finish(e, r, FINISH_ERROR, inferd_last_error());
        return;
    }
    if (!r->leader)
        eng_sched_add(e, r);
}

/* Admit every request of `taken` (moved out of e->pending), in order. */
static void admit_all(engine *e, inferd_list *taken)
{
    inferd_list_node *n;
    while ((n = inferd_list_pop_front(taken)) != NULL)
        admit(e, ENG_REQ_OF(n));
}

/* Finish every live request whose consumer asked for an abort (atomic flag
 * set by engine_stream_abort/release) or whose timeout passed; when
 * `stopping`, finish all of them. Engine thread with step_mu held, between
 * steps, so no request is in a batch while it is freed. An abort therefore
 * takes effect within one step: the blocks return to the pool at the next
 * iteration, never in the middle of a forward pass.
 * NOTE: the _SAFE walk is required: eng_finish unlinks and frees r. */
static void reap_aborts(engine *e, bool stopping)
{
    inferd_list_node *it, *tmp;
    INFERD_LIST_FOR_EACH_SAFE(&e->live, it, tmp) {
        eng_req *r = ENG_REQ_OF(it);
        if (stopping || atomic_load(&r->stream->abort_req) || inferd_deadline_expired(r->deadline))
            eng_finish(e, r, FINISH_ABORT, NULL);
    }
}

/* Copy the scheduler's and the engine thread's counters into the snapshot
 * that engine_get_stats reads, under e->mu (the snapshot is the only stats
 * state callers see; the counters themselves are engine-thread only).
 * Also refreshes n_waiting_sched, the admission-control count
 * engine_submit compares with max_queued_requests, and wakes
 * engine_wait_idle when nothing is live or pending. */
static void publish_stats(engine *e)
{
    sched_stats ss;
    sched_get_stats(e->s, &ss);
    pthread_mutex_lock(&e->mu);
    engine_stats *st = &e->stats;
    st->running = ss.running;
    st->waiting = ss.waiting + (int)inferd_list_len(&e->pending);
    e->n_waiting_sched = ss.waiting;
    st->kv_blocks_total = kv_pool_num_usable(e->pool);
    st->kv_blocks_used = st->kv_blocks_total - kv_pool_num_free(e->pool);
    st->kv_usage = st->kv_blocks_total > 0 ? (double)st->kv_blocks_used / st->kv_blocks_total : 0;
    st->prompt_tokens = e->n_prompt_tokens;
    st->generation_tokens = e->n_gen_tokens;
    st->preemptions = ss.preemptions;
    st->prefix_queries = ss.prefix_queries;
    st->prefix_hits = ss.prefix_hits;
    kv_pool_stats ps;
    kv_pool_get_stats(e->pool, &ps);
    st->kv_blocks_allocated = ps.allocs;
    st->kv_blocks_shared = ps.shares;
    memcpy(st->finished, e->n_finished, sizeof st->finished);
    st->steps = ss.steps;
    st->steps_ahead = e->steps_ahead;
    st->host = e->host;
    if (e->n_live == 0 && inferd_list_empty(&e->pending))
        pthread_cond_broadcast(&e->idle_cv);
    pthread_mutex_unlock(&e->mu);
}

/* The engine thread. Each iteration: sleep until there is something to do;
 * take the whole pending list in O(1) (splice) so e->mu is held briefly and
 * submitters never wait on a step; then, under step_mu, admit, reap aborts,
 * run at most one step and publish the stats. When stopping it makes one
 * last pass that aborts everything live and exits.
 * NOTE: the wait condition includes n_live: while any request is live the
 * thread never sleeps, which is why aborts and deadlines need no wake-up. */
static void *engine_main(void *arg)
{
    engine *e = arg;
    for (;;) {
        pthread_mutex_lock(&e->mu);
        while (!e->stopping && inferd_list_empty(&e->pending) && e->n_live == 0)
            pthread_cond_wait(&e->cv, &e->mu);
        inferd_list taken;
        inferd_list_init(&taken);
        int n_taken = (int)inferd_list_len(&e->pending);
        inferd_list_splice_back(&taken, &e->pending);
        /* counted live here, under mu, so engine_wait_idle never sees a
         * request that is in neither `pending` nor n_live */
        e->n_live += n_taken;
        e->n_waiting_sched += n_taken; /* they wait in the scheduler until publish_stats recounts */
        bool stopping = e->stopping;
        pthread_mutex_unlock(&e->mu);

        pthread_mutex_lock(&e->step_mu);
        admit_all(e, &taken);
        reap_aborts(e, stopping);
        /* a step in flight whose requests all left (aborts), or the end */
        if (stopping || !sched_has_work(e->s))
            eng_drain(e);
        if (!stopping && sched_has_work(e->s))
            eng_step(e);
        /* the step's consumers are woken when the next step is launched;
         * with none to come, now (before publish_stats can report the
         * engine idle: a notify must not outlive engine_wait_idle) */
        if (stopping || !sched_has_work(e->s))
            eng_flush_wakes(e);
        publish_stats(e);
        pthread_mutex_unlock(&e->step_mu);
        if (stopping)
            break;
    }
    return NULL;
}

/* Start the engine thread, once. UNAVAILABLE when already started or once
 * stopped (stop is final); INTERNAL when pthread_create
 * fails, with the engine left unstarted. Any thread. */
inferd_status engine_start(engine *e)
{
    pthread_mutex_lock(&e->mu);
    if (e->started || e->stopped) {
        pthread_mutex_unlock(&e->mu);
        return inferd_set_error(INFERD_ERR_UNAVAILABLE, "engine already %s",
                                e->started ? "started" : "stopped");
    }
    int rc = pthread_create(&e->thread, NULL, engine_main, e);
    if (rc == 0)
        e->started = true;
    pthread_mutex_unlock(&e->mu);
    if (rc != 0)
        return inferd_set_error(INFERD_ERR_INTERNAL, "cannot start the engine thread (error %d)", rc);
    return INFERD_OK;
}

/* Stop the engine: ask the thread to exit, join it (it aborts every live
 * request on its way out), then abort on this thread whatever was submitted
 * but never taken (the engine was never started). After it, engine_submit
 * fails with UNAVAILABLE and every unfinished request's stream has received
 * FINISH_ABORT.
 * Idempotent; must not be called from the engine thread or from a notify
 * callback (it joins the engine thread). Consumers keep their streams until
 * they release them. */
void engine_stop(engine *e)
{
    pthread_mutex_lock(&e->mu);
    bool was_started = e->started && !e->stopped;
    e->stopping = true;
    e->stopped = true;
    pthread_cond_broadcast(&e->cv);
    pthread_mutex_unlock(&e->mu);
    if (was_started)
        pthread_join(e->thread, NULL);
    /* requests never taken by a thread (not started, or submitted late) */
    /* step_mu, then mu: the documented order (the thread is gone, but
     * engine_wait_idle and engine_check_invariants may still run) */
    pthread_mutex_lock(&e->step_mu);
    pthread_mutex_lock(&e->mu);
    inferd_list taken;
    inferd_list_init(&taken);
    e->n_live += (int)inferd_list_len(&e->pending);
    inferd_list_splice_back(&taken, &e->pending);
    pthread_mutex_unlock(&e->mu);
    admit_all(e, &taken);
    reap_aborts(e, true);
    eng_drain(e);
    eng_flush_wakes(e);
    publish_stats(e);
    pthread_mutex_unlock(&e->step_mu);
}

/* Stop (if still running) and free everything the engine owns; the model
 * and tokenizer are not freed. Streams still held by consumers stay valid
 * until released: they are reference counted, not owned by the engine.
 * NULL is a no-op. */
void engine_free(engine *e)
{
    if (!e)
        return;
    engine_stop(e);
    sched_free(e->s);
    kv_pool_free(e->pool);
    pthread_mutex_destroy(&e->mu);
    pthread_mutex_destroy(&e->step_mu);
    pthread_cond_destroy(&e->cv);
    pthread_cond_destroy(&e->idle_cv);
    inferd_free(e->b_tokens);
    inferd_free(e->b_positions);
    inferd_free(e->b_slots);
    inferd_free(e->b_qsl);
    inferd_free(e->b_seq_lens);
    inferd_free(e->b_tables);
    inferd_free(e->b_logits_idx);
    inferd_free(e->b_row_item);
    inferd_free(e->b_sparams);
    inferd_free(e->wake);
    inferd_free(e->b_sampled);
    inferd_free(e->b_prev_rows);
    for (int k = 0; k < 2; k++) {
        inferd_free(e->fl_row_item[k]);
        inferd_free(e->fl_item_row[k]);
    }
    inferd_free(e->h_logits);
    inferd_free(e->b_extra_rows);
    inferd_free(e->b_extra_item);
    inferd_free(e->b_extra_lp);
    eng_penalty_free(e);
    inferd_free(e);
}
