/* scheduler/sched.c: request queues, the per-step token budget, block
 * reservation with preemption, prefix-cache admission (see sched.h).
 *
 * Both queues are intrusive doubly-linked lists through sched_req.prev/next:
 * `running` in admission order (the tail is the preemption victim), `waiting`
 * FCFS with preempted requests pushed back at the front. A step never
 * allocates memory: the item array is sized for max_num_seqs at init.
 */
#include "scheduler/sched.h"

#include <stdio.h>
#include <string.h>

#include "common/alloc.h"
#include "common/check.h"
#include "common/util.h"

typedef struct {
    sched_req *head, *tail;
    int n;
} req_list;

struct sched {
    sched_opts o;
    kv_pool *pool;
    int block_size;
    req_list running, waiting;
    sched_item *items; /* [max_num_seqs] */
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

/* --- lists ---------------------------------------------------------------- */

static void list_push_back(req_list *l, sched_req *r)
{
    r->prev = l->tail;
    r->next = NULL;
    if (l->tail)
        l->tail->next = r;
    else
        l->head = r;
    l->tail = r;
    l->n++;
}

static void list_push_front(req_list *l, sched_req *r)
{
    r->prev = NULL;
    r->next = l->head;
    if (l->head)
        l->head->prev = r;
    else
        l->tail = r;
    l->head = r;
    l->n++;
}

static void list_remove(req_list *l, sched_req *r)
{
    if (r->prev)
        r->prev->next = r->next;
    else
        l->head = r->next;
    if (r->next)
        r->next->prev = r->prev;
    else
        l->tail = r->prev;
    r->prev = r->next = NULL;
    l->n--;
}

/* --- lifecycle ------------------------------------------------------------ */

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

void sched_free(sched *s)
{
    if (!s)
        return;
    while (s->running.head)
        sched_remove(s, s->running.head);
    while (s->waiting.head)
        sched_remove(s, s->waiting.head);
    inferd_free(s->items);
    inferd_free(s);
}

inferd_status sched_add(sched *s, uint64_t id, const int32_t *prompt, int n_prompt, int max_tokens,
                        void *user, sched_req **out)
{
    *out = NULL;
    if (n_prompt < 1)
        return inferd_set_error(INFERD_ERR_INVALID_ARG, "prompt is empty");
    if (max_tokens < 1)
        return inferd_set_error(INFERD_ERR_INVALID_ARG, "max_tokens must be >= 1 (got %d)", max_tokens);
    int64_t cap = (int64_t)n_prompt + max_tokens;
    if (cap > s->o.max_model_len)
        return inferd_set_error(INFERD_ERR_TOO_LONG,
                                "prompt (%d tokens) + max_tokens (%d) = %lld tokens exceeds the "
                                "maximum model length of %d tokens",
                                n_prompt, max_tokens, (long long)cap, s->o.max_model_len);
    /* The last sampled token never needs KV: cap - 1 tokens at most. */
    int64_t need = INFERD_CEIL_DIV(cap - 1, (int64_t)s->block_size);
    int usable = kv_pool_num_usable(s->pool);
    if (need > usable)
        return inferd_set_error(INFERD_ERR_TOO_LONG,
                                "prompt (%d tokens) + max_tokens (%d) needs %lld KV blocks of %d "
                                "tokens, but the whole KV cache holds %d blocks (%lld tokens)",
                                n_prompt, max_tokens, (long long)need, s->block_size, usable,
                                (long long)usable * s->block_size);
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
    list_push_back(&s->waiting, r);
    *out = r;
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

static void preempt(sched *s, sched_req *r)
{
    INFERD_CHECK(r->state == REQ_STATE_RUNNING);
    list_remove(&s->running, r);
    release_blocks(s, r);
    r->state = REQ_STATE_PREEMPTED;
    r->n_preemptions++;
    s->st.preemptions++;
    list_push_front(&s->waiting, r);
}

/* --- step ----------------------------------------------------------------- */

static void add_item(sched *s, sched_output *out, sched_req *r, int n_new)
{
    INFERD_CHECK(out->n_items < s->o.max_num_seqs);
    sched_item *it = &s->items[out->n_items++];
    it->req = r;
    it->start = r->n_computed;
    it->n_new = n_new;
    it->sample = r->n_computed + n_new == r->n_total;
    out->n_tokens += n_new;
    out->n_sample += it->sample;
}

/* Running requests in admission order; preempt from the tail when the pool
 * is dry. Returns the remaining budget. */
static int schedule_running(sched *s, sched_output *out, int budget)
{
    sched_req *r = s->running.head;
    while (r && budget > 0) {
        int n_new = INFERD_MIN(r->n_total - r->n_computed, budget);
        if (n_new <= 0) {
            r = r->next;
            continue;
        }
        bool self_preempted = false;
        while (!reserve(s, r, r->n_computed + n_new)) {
            sched_req *victim = s->running.tail;
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
        r = r->next; /* re-read: a later request may have been preempted */
    }
    return budget;
}

/* Take the longest cached prefix of a request that holds no blocks. */
static void admit_prefix(sched *s, sched_req *r)
{
    if (!kv_pool_caching(s->pool) || r->n_blocks > 0)
        return;
    int max_hit_blocks = (r->n_total - 1) / s->block_size;
    int hits =
        kv_pool_lookup(s->pool, r->tokens, r->n_total, max_hit_blocks, r->hashes, &r->n_hashes, r->blocks);
    r->n_blocks = hits;
    r->n_cached_blocks = hits;
    r->n_computed = hits * s->block_size;
}

/* Waiting requests FCFS while budget, sequences and blocks last. */
static void schedule_waiting(sched *s, sched_output *out, int budget)
{
    while (s->waiting.head && budget > 0 && s->running.n < s->o.max_num_seqs) {
        sched_req *r = s->waiting.head;
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
        list_remove(&s->waiting, r);
        r->state = REQ_STATE_RUNNING;
        list_push_back(&s->running, r);
        out->n_admitted++;
        add_item(s, out, r, n_new);
        budget -= n_new;
    }
}

void sched_step(sched *s, sched_output *out)
{
    memset(out, 0, sizeof *out);
    out->items = s->items;
    int budget = schedule_running(s, out, s->o.max_num_batched_tokens);
    /* vLLM: no admission in a step that had to preempt (blocks are short). */
    if (out->n_preempted == 0)
        schedule_waiting(s, out, budget);
    s->st.steps++;
    /* Liveness: with every block free, the oldest request always fits. */
    INFERD_CHECK_MSG(out->n_items > 0 || !sched_has_work(s), "scheduler: live requests but nothing scheduled");
}

/* Offer r's newly full, computed blocks to the prefix cache. */
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

void sched_commit(sched *s, const sched_output *out)
{
    for (int i = 0; i < out->n_items; i++) {
        sched_req *r = out->items[i].req;
        INFERD_CHECK(r->state == REQ_STATE_RUNNING && r->n_computed == out->items[i].start);
        r->n_computed += out->items[i].n_new;
        INFERD_CHECK(r->n_computed <= r->n_total);
        if (kv_pool_caching(s->pool))
            cache_full_blocks(s, r);
    }
}

void sched_append_token(sched *s, sched_req *r, int32_t token)
{
    (void)s;
    INFERD_CHECK_MSG(r->n_total < r->cap, "scheduler: token appended beyond prompt + max_tokens");
    r->tokens[r->n_total++] = token;
}

void sched_remove(sched *s, sched_req *r)
{
    if (r->state == REQ_STATE_RUNNING)
        list_remove(&s->running, r);
    else if (r->state == REQ_STATE_WAITING || r->state == REQ_STATE_PREEMPTED)
        list_remove(&s->waiting, r);
    release_blocks(s, r);
    r->state = REQ_STATE_FINISHED;
    req_destroy(r);
}

bool sched_has_work(const sched *s)
{
    return s->running.n > 0 || s->waiting.n > 0;
}

void sched_get_stats(const sched *s, sched_stats *st)
{
    *st = s->st;
    st->running = s->running.n;
    st->waiting = s->waiting.n;
}

sched_req *sched_running_head(const sched *s)
{
    return s->running.head;
}
sched_req *sched_waiting_head(const sched *s)
{
    return s->waiting.head;
}

/* --- invariants ----------------------------------------------------------- */

#define FAIL(...)                                                                                            \
    do {                                                                                                     \
        if (msg && msg_len)                                                                                  \
            snprintf(msg, msg_len, __VA_ARGS__);                                                             \
        goto fail;                                                                                           \
    } while (0)

static bool check_list(const req_list *l, bool running, int block_size, int32_t *refs, int n_blocks,
                       char *msg, size_t msg_len)
{
    int n = 0;
    const sched_req *prev = NULL;
    for (const sched_req *r = l->head; r; r = r->next) {
        if (++n > l->n)
            FAIL("%s list longer than its count %d", running ? "running" : "waiting", l->n);
        if (r->prev != prev)
            FAIL("request %llu: broken prev link", (unsigned long long)r->id);
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
        if (r->n_blocks < INFERD_CEIL_DIV(r->n_computed, block_size) ||
            r->n_blocks > INFERD_CEIL_DIV(r->n_total, block_size))
            FAIL("request %llu: %d blocks for %d computed / %d total tokens", (unsigned long long)r->id,
                 r->n_blocks, r->n_computed, r->n_total);
        for (int i = 0; i < r->n_blocks; i++) {
            if (r->blocks[i] <= KV_NULL_BLOCK || r->blocks[i] >= n_blocks)
                FAIL("request %llu: block table entry %d = %d", (unsigned long long)r->id, i, r->blocks[i]);
            refs[r->blocks[i]]++;
        }
        prev = r;
    }
    if (n != l->n || prev != l->tail)
        FAIL("%s list: %d linked, count %d", running ? "running" : "waiting", n, l->n);
    return true;
fail:
    return false;
}

bool sched_check(const sched *s, char *msg, size_t msg_len)
{
    int n_blocks = kv_pool_num_blocks(s->pool);
    int32_t *refs = inferd_calloc((size_t)n_blocks, sizeof *refs);
    if (!kv_pool_check(s->pool, msg, msg_len))
        goto fail;
    if (s->running.n > s->o.max_num_seqs)
        FAIL("%d running requests, max_num_seqs %d", s->running.n, s->o.max_num_seqs);
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
