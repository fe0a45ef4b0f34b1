/* scheduler/sched.c: request queues, the per-step token budget, block
 * reservation with preemption, prefix-cache admission (see sched.h).
 *
 * Both queues are intrusive lists (common/list.h) through sched_req.link:
 * `running` in admission order (the tail is the preemption victim), `waiting`
 * FCFS with preempted requests pushed back at the front. A step never
 * allocates memory: the item array is sized for max_num_seqs at init.
 *
 * Policy (vLLM v1, simplified): every step first gives the token budget to
 * the running requests in admission order (decode tokens and the next
 * chunk of unfinished prompts alike), then, if nothing had to be preempted,
 * admits waiting requests FCFS with whatever budget is left. Prompts are
 * chunked by the budget, so a long prompt never blocks decodes for more
 * than one step's worth of tokens. Preemption is recompute-only: a victim
 * loses its blocks and starts again from its prefix-cache hits. The
 * trade-off: no swapping to host memory and no priorities, and the
 * FCFS head of the waiting queue blocks smaller requests behind it when it
 * does not fit (no starvation, at some cost in utilization).
 *
 * Pure policy: no threads, no model, no CUDA (the engine holds step_mu
 * around every call). Every function here leaves the queues and the pool
 * consistent; sched_check verifies that.
 */
#include "scheduler/sched.h"

#include <stdio.h>
#include <string.h>

#include "common/alloc.h"
#include "common/check.h"
#include "common/util.h"

#define REQ_OF(node) INFERD_LIST_ENTRY(node, sched_req, link)

struct sched {
    sched_opts o;
    kv_pool *pool;
    int block_size;
    inferd_list running, waiting; /* of sched_req, through link */
    sched_item *items;            /* [max_num_seqs] the array of the next step */
    sched_item *items_alt;        /* [max_num_seqs] the other (two steps alive: sched_step_ahead) */
    sched_stats st;
};

const char *req_state_str(req_state s)
{
    switch (s) {
    case REQ_STATE_WAITING: return "waiting";
    case REQ_STATE_RUNNING: return "running";
    case REQ_STATE_PREEMPTED: return "preempted";
    case REQ_STATE_FINISHED: return "finished";
    }
    return "?";
}

/* --- lifecycle ------------------------------------------------------------ */

/* The pool is borrowed (the engine owns it) and must outlive the scheduler.
 * INVALID_ARG when a limit is < 1; *out NULL then. */
inferd_status sched_init(const sched_opts *o, kv_pool *pool, sched **out)
{
    *out = NULL;
    if (o->max_num_seqs < 1 || o->max_num_batched_tokens < 1 || o->max_model_len < 1)
        return inferd_set_error(INFERD_ERR_INVALID_ARG,
                                "scheduler: max_num_seqs %d, max_num_batched_tokens %d, "
                                "max_model_len %d must all be >= 1",
                                o->max_num_seqs, o->max_num_batched_tokens, o->max_model_len);
    sched *s = inferd_calloc(1, sizeof *s);
    s->o = *o;
    s->pool = pool;
    s->block_size = kv_pool_block_size(pool);
    s->items = inferd_calloc((size_t)o->max_num_seqs, sizeof *s->items);
    s->items_alt = inferd_calloc((size_t)o->max_num_seqs, sizeof *s->items_alt);
    inferd_list_init(&s->running);
    inferd_list_init(&s->waiting);
    *out = s;
    return INFERD_OK;
}

static void req_destroy(sched_req *r)
{
    inferd_free(r->tokens);
    inferd_free(r->blocks);
    inferd_free(r->hashes);
    inferd_free(r);
}

/* Remove every request (their blocks go back to the pool) and free s. The
 * sched_req pointers the caller still holds become dangling. */
void sched_free(sched *s)
{
    if (!s)
        return;
    while (!inferd_list_empty(&s->running))
        sched_remove(s, REQ_OF(inferd_list_first(&s->running)));
    while (!inferd_list_empty(&s->waiting))
        sched_remove(s, REQ_OF(inferd_list_first(&s->waiting)));
    inferd_free(s->items);
    inferd_free(s->items_alt);
    inferd_free(s);
}

/* ---- does a request fit ---------------------------------------------------- */

/* The most tokens a request with this prompt could generate: the smaller of
 * the model-length room and the whole-KV-cache room; negative when the
 * prompt alone does not fit. int64: kv_blocks * block_size can pass
 * INT_MAX. */
int64_t sched_fit_room(const sched_fit_limits *l, int64_t n_prompt)
{
    /* the last sampled token is never fed back, so it needs no KV slot */
    int64_t kv_tokens = (int64_t)l->kv_blocks * l->block_size + 1;
    return INFERD_MIN((int64_t)l->max_model_len, kv_tokens) - n_prompt;
}

/* The one "does this request fit" check (engine_submit, the server's
 * pre-check, sched_add): prompt + max_tokens within max_model_len, and its
 * KV within the whole cache, counted against an empty pool on purpose (a
 * request that fits an empty cache can always run eventually, by
 * preempting the others). TOO_LONG with the numbers otherwise. Pure. */
inferd_status sched_fit_check(const sched_fit_limits *l, int64_t n_prompt, int64_t max_tokens)
{
    int64_t total = n_prompt + max_tokens;
    if (total > l->max_model_len)
        return inferd_set_error(INFERD_ERR_TOO_LONG,
                                "prompt (%lld tokens) + max_tokens (%lld) = %lld tokens exceeds the maximum model "
                                "length of %d tokens",
                                (long long)n_prompt, (long long)max_tokens, (long long)total, l->max_model_len);
    /* total - 1: the last sampled token is never fed back (sched_fit_room) */
    int64_t need = INFERD_CEIL_DIV(total - 1, (int64_t)l->block_size);
    if (need > l->kv_blocks)
        return inferd_set_error(INFERD_ERR_TOO_LONG,
                                "prompt (%lld tokens) + max_tokens (%lld) needs %lld KV blocks of %d tokens, but "
                                "the whole KV cache holds %d blocks (%lld tokens)",
                                (long long)n_prompt, (long long)max_tokens, (long long)need, l->block_size,
                                l->kv_blocks, (long long)l->kv_blocks * l->block_size);
    return INFERD_OK;
}

/* Queue a request at the tail of `waiting`. The prompt is copied into a
 * token array sized for prompt + max_tokens, and the block table and hash
 * arrays for its worst case, so that appending tokens and reserving blocks
 * never reallocate during a step. `user` is the caller's back-pointer
 * (the engine's eng_req). *out stays owned by the scheduler until
 * sched_remove. Errors (nothing queued): INVALID_ARG, TOO_LONG. */
inferd_status sched_add(sched *s, uint64_t id, const int32_t *prompt, int n_prompt, int max_tokens,
                        void *user, sched_req **out)
{
    *out = NULL;
    if (n_prompt < 1)
        return inferd_set_error(INFERD_ERR_INVALID_ARG, "prompt is empty");
    if (max_tokens < 1)
        return inferd_set_error(INFERD_ERR_INVALID_ARG, "max_tokens must be >= 1 (got %d)", max_tokens);
    sched_fit_limits lim = {s->o.max_model_len, s->block_size, kv_pool_num_usable(s->pool)};
    inferd_status st = sched_fit_check(&lim, n_prompt, max_tokens);
    if (st != INFERD_OK)
        return st;
    int64_t cap = (int64_t)n_prompt + max_tokens; /* fits: <= max_model_len */
    sched_req *r = inferd_calloc(1, sizeof *r);
    r->id = id;
    r->state = REQ_STATE_WAITING;
    r->cap = (int)cap;
    r->tokens = inferd_malloc((size_t)cap * sizeof *r->tokens);
    memcpy(r->tokens, prompt, (size_t)n_prompt * sizeof *prompt);
    r->n_prompt = r->n_total = n_prompt;
    r->max_blocks = (int)INFERD_CEIL_DIV(cap, (int64_t)s->block_size);
    r->blocks = inferd_malloc((size_t)r->max_blocks * sizeof *r->blocks);
    r->hashes = inferd_malloc((size_t)r->max_blocks * sizeof *r->hashes);
    r->user = user;
    r->flight = -1;
    inferd_list_push_back(&s->waiting, &r->link);
    *out = r;
    return INFERD_OK;
}

/* Share the parent's first n_share blocks with r (fresh, holding no
 * blocks): references, chain hashes and the cache registration travel
 * along, so cache_full_blocks does not offer them again. */
static void share_prefix(sched *s, const sched_req *parent, sched_req *r, int n_share)
{
    for (int i = 0; i < n_share; i++) {
        kv_pool_ref(s->pool, parent->blocks[i]);
        r->blocks[i] = parent->blocks[i];
    }
    r->n_blocks = n_share;
    r->n_computed = n_share * s->block_size;
    r->n_hashes = INFERD_MIN(parent->n_hashes, n_share);
    memcpy(r->hashes, parent->hashes, (size_t)r->n_hashes * sizeof *r->hashes);
    r->n_cached_blocks = INFERD_MIN(parent->n_cached_blocks, n_share);
}

/* NOTE: the child goes straight to `running` because a waiting request
 * must hold no blocks (admission starts from an empty table); a full
 * running set therefore means no sharing for that child, never a broken
 * invariant. Its cached_tokens reports the shared tokens, as a prefix-cache
 * hit would. */
inferd_status sched_fork(sched *s, const sched_req *parent, uint64_t id, int max_tokens, void *user,
                         sched_req **out)
{
    INFERD_CHECK(parent->state == REQ_STATE_RUNNING && parent->n_computed >= parent->n_prompt);
    inferd_status st = sched_add(s, id, parent->tokens, parent->n_prompt, max_tokens, user, out);
    if (st != INFERD_OK)
        return st;
    sched_req *r = *out;
    if (inferd_list_len(&s->running) >= (size_t)s->o.max_num_seqs)
        return INFERD_OK; /* stays waiting, without blocks */
    int n_share = (r->n_prompt - 1) / s->block_size;
    inferd_list_unlink(&s->waiting, &r->link);
    share_prefix(s, parent, r, n_share);
    r->state = REQ_STATE_RUNNING;
    r->admitted_once = true;
    r->cached_tokens = r->n_computed;
    inferd_list_push_back(&s->running, &r->link);
    return INFERD_OK;
}

/* --- blocks --------------------------------------------------------------- */

/* Release r's blocks, last first (so its tail is evicted before a shared
 * prefix), and forget its KV. */
static void release_blocks(sched *s, sched_req *r)
{
    for (int i = r->n_blocks - 1; i >= 0; i--)
        kv_pool_release(s->pool, &r->blocks[i], 1);
    r->n_blocks = 0;
    r->n_computed = 0;
    r->n_cached_blocks = 0;
}

/* NOTE: INFERD_CHECK, not an error: max_blocks was sized from cap at add,
 * so a larger want is a scheduler bug, never a request property. */
/* Make r's block table cover n_tokens tokens; false (nothing changed) when
 * the pool has too few free blocks. */
static bool reserve(sched *s, sched_req *r, int n_tokens)
{
    int want = INFERD_CEIL_DIV(n_tokens, s->block_size);
    INFERD_CHECK(want <= r->max_blocks);
    int need = want - r->n_blocks;
    if (need <= 0)
        return true;
    if (kv_pool_alloc(s->pool, need, r->blocks + r->n_blocks) != INFERD_OK)
        return false;
    r->n_blocks = want;
    return true;
}

/* Recompute preemption: r drops all its blocks (its computed KV is lost,
 * except what stays findable in the prefix cache) and goes to the FRONT of
 * `waiting`, so it is the next request admitted; its tokens, including the
 * generated ones, are kept and recomputed as a prompt. */
static void preempt(sched *s, sched_req *r)
{
    INFERD_CHECK(r->state == REQ_STATE_RUNNING);
    inferd_list_unlink(&s->running, &r->link);
    release_blocks(s, r);
    r->state = REQ_STATE_PREEMPTED;
    r->n_preemptions++;
    s->st.preemptions++;
    inferd_list_push_front(&s->waiting, &r->link);
}

/* --- step ----------------------------------------------------------------- */

/* Append r's next n_new tokens to the step's batch. `sample` is set when
 * the chunk reaches the end of r's known tokens: only then do its logits
 * produce a token (a partial prompt chunk samples nothing). */
static void add_item(sched *s, sched_output *out, sched_req *r, int n_new)
{
    INFERD_CHECK(out->n_items < s->o.max_num_seqs);
    sched_item *it = &out->items[out->n_items++];
    it->req = r;
    it->start = r->n_computed;
    it->n_new = n_new;
    it->from = -1;
    it->sample = r->n_computed + n_new == r->n_total;
    out->n_tokens += n_new;
    out->n_sample += it->sample;
}

/* Running requests in admission order; preempt from the tail when the pool
 * is dry. Returns the remaining budget. */
/* NOTE: victims come from the tail and the walk from the head, so a victim
 * is never a request already given an item this step: the batch never
 * refers to a preempted request. When r itself is the tail and still does
 * not fit, r is preempted and the walk stops (everything after it is
 * gone). It cannot leave the step empty with work pending: a lone running
 * request always fits (sched_fit_check counted against the whole pool). */
static int schedule_running(sched *s, sched_output *out, int budget)
{
    sched_req *r = REQ_OF(inferd_list_first(&s->running));
    while (r && budget > 0) {
        int n_new = INFERD_MIN(r->n_total - r->n_computed, budget);
            /* defensive: a running request normally has its newest token
             * to compute; one with nothing left needs no budget or blocks */
        if (n_new <= 0) {
            r = REQ_OF(inferd_list_next(&s->running, &r->link));
            continue;
        }
        bool self_preempted = false;
        while (!reserve(s, r, r->n_computed + n_new)) {
            sched_req *victim = REQ_OF(inferd_list_last(&s->running));
            preempt(s, victim);
            out->n_preempted++;
            if (victim == r) {
                self_preempted = true;
                break;
            }
        }
        if (self_preempted)
            break;
        add_item(s, out, r, n_new);
        budget -= n_new;
        /* re-read: a later request may have been preempted */
        r = REQ_OF(inferd_list_next(&s->running, &r->link));
    }
    return budget;
}

/* Take the longest cached prefix of a request that holds no blocks.
 * max_hit_blocks leaves at least the last token uncomputed even when the
 * whole sequence is cached: the step must run that token to get the logits
 * that sample the next one. The hits take pool references; the hashes
 * computed on the way are kept in r->hashes for cache_full_blocks. */
/* Take the longest cached prefix of a request that holds no blocks. */
static void admit_prefix(sched *s, sched_req *r)
{
    if (!kv_pool_caching(s->pool) || r->n_blocks > 0 || r->no_prefix_hits)
        return;
    int max_hit_blocks = (r->n_total - 1) / s->block_size;
    int hits =
        kv_pool_lookup(s->pool, r->tokens, r->n_total, max_hit_blocks, r->hashes, &r->n_hashes, r->blocks);
    r->n_blocks = hits;
    r->n_cached_blocks = hits;
    r->n_computed = hits * s->block_size;
}

/* Waiting requests FCFS while budget, sequences and blocks last.
 * NOTE: strict FCFS: when the head cannot get its blocks the loop stops
 * rather than trying smaller requests behind it, so a long request cannot
 * be starved by a stream of short ones. The prefix hits it took are given
 * back, keeping the invariant that waiting requests hold no blocks.
 * prefix_queries/prefix_hits count at every admission, re-admissions after
 * preemption included (vLLM counts the same way). */
/* Waiting requests FCFS while budget, sequences and blocks last. */
static void schedule_waiting(sched *s, sched_output *out, int budget, sched_admit_fn admit, void *user)
{
    while (!inferd_list_empty(&s->waiting) && budget > 0 &&
           inferd_list_len(&s->running) < (size_t)s->o.max_num_seqs) {
        sched_req *r = REQ_OF(inferd_list_first(&s->waiting));
        if (admit && !admit(r, user))
            break; /* FCFS: nothing behind it goes first */
        admit_prefix(s, r);
        int n_new = INFERD_MIN(r->n_total - r->n_computed, budget);
        if (!reserve(s, r, r->n_computed + n_new)) {
            release_blocks(s, r); /* give back the prefix hits: retry next step */
            break;
        }
        if (kv_pool_caching(s->pool)) {
            s->st.prefix_queries += (uint64_t)r->n_total;
            s->st.prefix_hits += (uint64_t)r->n_computed;
        }
        if (!r->admitted_once) {
            r->cached_tokens = r->n_computed;
            r->admitted_once = true;
        }
        inferd_list_unlink(&s->waiting, &r->link);
        r->state = REQ_STATE_RUNNING;
        inferd_list_push_back(&s->running, &r->link);
        out->n_admitted++;
        add_item(s, out, r, n_new);
        budget -= n_new;
    }
}

/* Plan one step into *out. out->items points into the scheduler's own
 * array: valid until the next sched_step, and the caller must call
 * sched_commit with it after the forward pass (or remove the requests on
 * failure) before planning again. Aborts (INFERD_CHECK) if work is pending
 * but nothing could be scheduled, which the fit check rules out. */
/* The next step's item array; the two arrays alternate, so the output of
 * the step before stays valid while this one is planned. */
static sched_item *take_items(sched *s)
{
    sched_item *it = s->items;
    s->items = s->items_alt;
    s->items_alt = it;
    return it;
}

void sched_step(sched *s, sched_output *out)
{
    memset(out, 0, sizeof *out);
    out->items = take_items(s);
    int budget = schedule_running(s, out, s->o.max_num_batched_tokens);
    /* vLLM: no admission in a step that had to preempt (blocks are short). */
    if (out->n_preempted == 0)
        schedule_waiting(s, out, budget, NULL, NULL);
    s->st.steps++;
    /* Liveness: with every block free, the oldest request always fits. */
    INFERD_CHECK_MSG(out->n_items > 0 || !sched_has_work(s), "scheduler: live requests but nothing scheduled");
}

/* NOTE: prev's items are planned and uncommitted: a request with an item
 * there has n_computed == its start, and, when the item samples, a token
 * that is not appended yet (its n_total will be one more). So a request's
 * next tokens start where its item in prev ends; when that item samples,
 * the next item is the one token prev samples (from = its prev item), and
 * it exists only when that token is not the request's last; its block is
 * reserved one token ahead of n_total (sched_check allows that one
 * token). A request without an item in prev (the budget ran out) is
 * planned as sched_step would. */
static bool plan_running_ahead(sched *s, const sched_output *prev, sched_output *out, int *budget)
{
    for (int i = 0; i < prev->n_items; i++)
        if (prev->items[i].req)
            prev->items[i].req->flight = i;
    bool ok = true;
    for (sched_req *r = REQ_OF(inferd_list_first(&s->running)); r && *budget > 0 && ok;
         r = REQ_OF(inferd_list_next(&s->running, &r->link))) {
        const sched_item *p = r->flight >= 0 ? &prev->items[r->flight] : NULL;
        INFERD_CHECK(!p || (r->n_computed == p->start && (p->sample ? r->n_total == p->start + p->n_new
                                                                    : r->n_total > p->start + p->n_new)));
        const int start = p ? p->start + p->n_new : r->n_computed;
        const int known = r->n_total + (p && p->sample ? 1 : 0);
        if (p && p->sample && known >= r->cap)
            continue; /* prev samples its last token */
        const int n_new = INFERD_MIN(known - start, *budget);
        if (n_new <= 0)
            continue;
        if (!reserve(s, r, start + n_new)) {
            ok = false;
            break;
        }
        sched_item *it = &out->items[out->n_items++];
        *it = (sched_item){.req = r,
                           .start = start,
                           .n_new = n_new,
                           .sample = start + n_new == known,
                           .from = p && p->sample ? r->flight : -1};
        out->n_tokens += n_new;
        out->n_sample += it->sample;
        *budget -= n_new;
    }
    for (int i = 0; i < prev->n_items; i++)
        if (prev->items[i].req)
            prev->items[i].req->flight = -1;
    return ok;
}

bool sched_step_ahead(sched *s, const sched_output *prev, sched_output *out, sched_admit_fn admit, void *user)
{
    memset(out, 0, sizeof *out);
    out->items = take_items(s);
    int budget = s->o.max_num_batched_tokens;
    if (!plan_running_ahead(s, prev, out, &budget)) {
        out->n_items = out->n_tokens = out->n_sample = 0;
        return false;
    }
    if (admit)
        schedule_waiting(s, out, budget, admit, user);
    if (out->n_items > 0)
        s->st.steps++;
    return true;
}

/* Offer r's newly full, computed blocks to the prefix cache. */
/* Hashes chain (each block's hash covers its parent's), so they are
 * computed in order and only once per block; r->hashes may already hold
 * some from the admission lookup. A refused registration (the same
 * content is already cached under another block) leaves the block simply
 * uncached. */
static void cache_full_blocks(sched *s, sched_req *r)
{
    int n_full = r->n_computed / s->block_size;
    for (int i = r->n_cached_blocks; i < n_full; i++) {
        const int32_t *blk = r->tokens + (size_t)i * s->block_size;
        kv_hash parent = {0, 0};
        if (i > 0)
            parent = r->hashes[i - 1];
        if (i >= r->n_hashes) {
            INFERD_CHECK(i == r->n_hashes);
            r->hashes[i] = kv_hash_block(parent, blk, s->block_size);
            r->n_hashes++;
        }
        kv_pool_cache_block(s->pool, r->blocks[i], parent, r->hashes[i], blk);
    }
    if (n_full > r->n_cached_blocks)
        r->n_cached_blocks = n_full;
}

/* Record that the planned tokens were computed (after a successful
 * forward) and offer blocks that just became full to the prefix cache.
 * The checks catch an engine that committed a stale plan. */
void sched_commit(sched *s, const sched_output *out)
{
    for (int i = 0; i < out->n_items; i++) {
        sched_req *r = out->items[i].req;
        if (!r) /* removed while its step was in flight */
            continue;
        INFERD_CHECK(r->state == REQ_STATE_RUNNING && r->n_computed == out->items[i].start);
        r->n_computed += out->items[i].n_new;
        INFERD_CHECK(r->n_computed <= r->n_total);
        if (kv_pool_caching(s->pool))
            cache_full_blocks(s, r);
    }
}

/* Append a sampled token; it is computed in the next step that schedules
 * r. NOTE: the bound is an abort, not an error: the engine finishes a
 * request at cap (FINISH_LENGTH) before it could append beyond it. */
void sched_append_token(sched *s, sched_req *r, int32_t token)
{
    (void)s;
    INFERD_CHECK_MSG(r->n_total < r->cap, "scheduler: token appended beyond prompt + max_tokens");
    r->tokens[r->n_total++] = token;
}

/* Take r out of whichever queue it is in, release its blocks (full
 * computed ones stay cached for later hits) and free it: r is invalid on
 * return. Valid in any state, between steps. */
void sched_remove(sched *s, sched_req *r)
{
    if (r->state == REQ_STATE_RUNNING)
        inferd_list_unlink(&s->running, &r->link);
    else if (r->state == REQ_STATE_WAITING || r->state == REQ_STATE_PREEMPTED)
        inferd_list_unlink(&s->waiting, &r->link);
    release_blocks(s, r);
    r->state = REQ_STATE_FINISHED;
    req_destroy(r);
}

bool sched_has_work(const sched *s)
{
    return !inferd_list_empty(&s->running) || !inferd_list_empty(&s->waiting);
}

/* Counters since init plus the current queue lengths (O(1) lists). */
void sched_get_stats(const sched *s, sched_stats *st)
{
    *st = s->st;
    st->running = (int)inferd_list_len(&s->running);
    st->waiting = (int)inferd_list_len(&s->waiting);
}

/* Queue walking for tests and tools: heads, then
 * sched_req_next within r's current queue (NULL at the end or for a
 * finished request). Read-only. */
sched_req *sched_running_head(const sched *s)
{
    return REQ_OF(inferd_list_first(&s->running));
}
sched_req *sched_waiting_head(const sched *s)
{
    return REQ_OF(inferd_list_first(&s->waiting));
}
sched_req *sched_req_next(const sched *s, const sched_req *r)
{
    if (r->state == REQ_STATE_RUNNING)
        return REQ_OF(inferd_list_next(&s->running, &r->link));
    if (r->state == REQ_STATE_WAITING || r->state == REQ_STATE_PREEMPTED)
        return REQ_OF(inferd_list_next(&s->waiting, &r->link));
    return NULL;
}

/* --- invariants ----------------------------------------------------------- */

#define FAIL(...)                                                                                            \
    do {                                                                                                     \
        if (msg && msg_len)                                                                                  \
            snprintf(msg, msg_len, __VA_ARGS__);                                                             \
        goto fail;                                                                                           \
    } while (0)

/* Check every request of one queue (state, counters, block-table bounds)
 * and add its block references into refs[], which sched_check then
 * compares with the pool's reference counts. */
static bool check_list(const inferd_list *l, bool running, int block_size, int32_t *refs, int n_blocks,
                       char *msg, size_t msg_len)
{
    if (!inferd_list_check(l))
        FAIL("%s list: broken links or count %zu", running ? "running" : "waiting", inferd_list_len(l));
    for (const sched_req *r = REQ_OF(inferd_list_first(l)); r; r = REQ_OF(inferd_list_next(l, &r->link))) {
        bool ok_state = running ? r->state == REQ_STATE_RUNNING
                                : (r->state == REQ_STATE_WAITING || r->state == REQ_STATE_PREEMPTED);
        if (!ok_state)
            FAIL("request %llu is %s in the %s list", (unsigned long long)r->id, req_state_str(r->state),
                 running ? "running" : "waiting");
        if (r->n_computed < 0 || r->n_computed > r->n_total || r->n_total > r->cap)
            FAIL("request %llu: computed %d total %d cap %d", (unsigned long long)r->id, r->n_computed,
                 r->n_total, r->cap);
        if (!running && (r->n_blocks != 0 || r->n_computed != 0))
            FAIL("waiting request %llu holds %d blocks, %d computed", (unsigned long long)r->id, r->n_blocks,
                 r->n_computed);
        /* one token past n_total: a block sched_step_ahead reserved */
        if (r->n_blocks < INFERD_CEIL_DIV(r->n_computed, block_size) ||
            r->n_blocks > INFERD_CEIL_DIV(r->n_total + 1, block_size))
            FAIL("request %llu: %d blocks for %d computed / %d total tokens", (unsigned long long)r->id,
                 r->n_blocks, r->n_computed, r->n_total);
        for (int i = 0; i < r->n_blocks; i++) {
            if (r->blocks[i] <= KV_NULL_BLOCK || r->blocks[i] >= n_blocks)
                FAIL("request %llu: block table entry %d = %d", (unsigned long long)r->id, i, r->blocks[i]);
            refs[r->blocks[i]]++;
        }
    }
    return true;
fail:
    return false;
}

/* Every invariant of the pool and the queues, with the first violation
 * described in msg. O(blocks + requests) and allocates: for tests and
 * debug checks, never on the step path. */
bool sched_check(const sched *s, char *msg, size_t msg_len)
{
    int n_blocks = kv_pool_num_blocks(s->pool);
    int32_t *refs = inferd_calloc((size_t)n_blocks, sizeof *refs);
    if (!kv_pool_check(s->pool, msg, msg_len))
        goto fail;
    if (inferd_list_len(&s->running) > (size_t)s->o.max_num_seqs)
        FAIL("%zu running requests, max_num_seqs %d", inferd_list_len(&s->running), s->o.max_num_seqs);
    if (!check_list(&s->running, true, s->block_size, refs, n_blocks, msg, msg_len) ||
        !check_list(&s->waiting, false, s->block_size, refs, n_blocks, msg, msg_len))
        goto fail;
    for (int32_t id = 1; id < n_blocks; id++)
        if (refs[id] != kv_pool_ref_count(s->pool, id))
            FAIL("block %d: %d block-table entries but ref count %d", id, refs[id],
                 kv_pool_ref_count(s->pool, id));
    inferd_free(refs);
    return true;
fail:
    inferd_free(refs);
    return false;
}
