/* scheduler/sched.h: the scheduling policy (vLLM v1 style), pure and
 * model-free so it tests without a forward pass.
 *
 * Every request has n_computed tokens (KV written) chasing n_total tokens
 * (prompt + generated so far); there are no prefill/decode modes. Each step
 * hands out at most max_num_batched_tokens tokens to at most max_num_seqs
 * running requests: running requests first, in admission order, then waiting
 * requests FCFS. A prompt longer than the remaining budget is split across
 * steps (chunked prefill). A request whose tokens all have KV gets n_new = 1
 * per step (decode); one whose chunk reaches n_total samples this step.
 *
 * Blocks: a request holds ceil(kv tokens / block_size) blocks of the pool in
 * its block table. When the pool runs dry while extending a running request,
 * the most recently admitted running request is preempted (blocks freed,
 * n_computed = 0, pushed to the FRONT of the waiting queue, recomputed later;
 * its generated tokens are kept). Waiting requests are admitted only in
 * steps without preemption and strictly in order (no skipping), so the
 * oldest request always progresses: no starvation, no deadlock, as long as
 * every request fits the whole pool (checked by sched_add).
 *
 * Prefix caching: at admission the longest cached prefix of the request's
 * tokens (full blocks, at most (n_total - 1) / block_size so at least the
 * last token is recomputed and yields logits) is taken from the pool and
 * counted as computed. After each step every newly full block is registered
 * in the pool's cache.
 *
 * Ownership: the scheduler owns its requests and their token buffers. The
 * engine (or a test) drives: sched_add, sched_step (or sched_step_ahead,
 * planning the next step before the last one's tokens are known),
 * sched_commit, sched_append_token, sched_remove. Not thread-safe (the
 * engine thread).
 */
#ifndef INFERD_SCHEDULER_SCHED_H
#define INFERD_SCHEDULER_SCHED_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "common/list.h"
#include "common/status.h"
#include "kvcache/kv_pool.h"

typedef enum {
    REQ_STATE_WAITING = 0, /* never admitted yet */
    REQ_STATE_RUNNING,
    REQ_STATE_PREEMPTED, /* waiting again after preemption */
    REQ_STATE_FINISHED,
} req_state;

const char *req_state_str(req_state s);

/* One request. Fields are read-only outside sched.c. */
typedef struct sched_req {
    uint64_t id;
    req_state state;
    int32_t *tokens; /* [cap] prompt then generated tokens */
    int n_prompt;
    int n_total;     /* tokens known (prompt + generated) */
    int cap;         /* n_prompt + max_tokens */
    int n_computed;  /* tokens whose KV is in the cache */
    int32_t *blocks; /* [max_blocks] block table */
    int n_blocks, max_blocks;
    kv_hash *hashes;     /* [max_blocks] chain hashes of full blocks */
    int n_hashes;        /* valid entries of hashes */
    int n_cached_blocks; /* leading blocks already offered to the prefix cache */
    int cached_tokens;   /* prompt tokens served from the cache at first admission */
    int n_preemptions;
    bool admitted_once;
    bool no_prefix_hits;   /* set by the owner after sched_add: admission takes no cache hits
                              (prompt logprobs need every prompt row computed) */
    void *user;            /* the engine's per-request record */
    int flight;            /* scratch of sched_step_ahead: its item in the step in flight, else -1 */
    inferd_list_node link; /* queue link (waiting or running) */
} sched_req;

/* One scheduled request of a step: tokens [start, start + n_new) of
 * req->tokens are computed; sample = this chunk ends at n_total, so its last
 * row's logits give the next token. */
typedef struct {
    sched_req *req; /* NULL: removed while its step was in flight (skipped by sched_commit) */
    int start;
    int n_new;
    bool sample;
    int from; /* sched_step_ahead: the item of the previous step this one continues; else -1 */
} sched_item;

typedef struct {
    int n_items;
    sched_item *items; /* [n_items], owned by the scheduler, valid through the next step */
    int n_tokens;      /* sum of n_new */
    int n_sample;      /* items with sample */
    int n_preempted;   /* requests preempted in this step */
    int n_admitted;    /* waiting requests admitted in this step */
} sched_output;

typedef struct {
    int max_num_seqs;
    int max_num_batched_tokens;
    int max_model_len; /* prompt + max_tokens limit */
} sched_opts;

typedef struct {
    int running, waiting;
    uint64_t preemptions;
    uint64_t prefix_queries; /* tokens looked up at admission */
    uint64_t prefix_hits;    /* of which served from the cache */
    uint64_t steps;
} sched_stats;

typedef struct sched sched;

/* The scheduler uses (does not own) pool. */
inferd_status sched_init(const sched_opts *o, kv_pool *pool, sched **out);
/* Removes every request (their blocks go back to the pool). */
void sched_free(sched *s);

/* Validate and queue a new request at the waiting tail. INVALID_ARG for
 * n_prompt < 1 or max_tokens < 1; TOO_LONG (message has both numbers) when
 * n_prompt + max_tokens exceeds max_model_len or needs more blocks than the
 * whole pool holds. */
inferd_status sched_add(sched *s, uint64_t id, const int32_t *prompt, int n_prompt, int max_tokens,
                        void *user, sched_req **out);

/* Fork a running request whose prompt KV is computed (n_computed >=
 * n_prompt): a new request with the same prompt and its own max_tokens
 * that shares the parent's full prompt blocks by reference (kv_pool_ref)
 * instead of computing them again (n > 1 choices of one prompt). It shares
 * (n_prompt - 1) / block_size blocks, so at least the prompt's last token
 * is computed again, in its own block, and yields the child's own logits;
 * everything after the shared blocks is the child's. The child joins the
 * running tail, or, when max_num_seqs requests already run, the waiting
 * tail without blocks (then it is admitted like any request, through the
 * prefix cache when caching is on). Errors as sched_add (nothing changed). */
inferd_status sched_fork(sched *s, const sched_req *parent, uint64_t id, int max_tokens, void *user,
                         sched_req **out);

/* Plan one step (may preempt and admit). out->n_items == 0 only when no
 * request is live. out->items is valid until the step after next. */
void sched_step(sched *s, sched_output *out);

/* May the waiting request r be admitted into a step planned ahead? */
typedef bool (*sched_admit_fn)(const sched_req *r, void *user);

/* Plan the step after prev while prev runs, before its sampled tokens are
 * known (the engine's async scheduling): prev is the last step planned,
 * not yet committed (NULL reqs skipped). Each running request continues
 * where its prev item ends: a request whose prev item samples gets one
 * item for the token prev samples (sample; from = that prev item), unless
 * that token is its last; a partial prompt chunk gets its next chunk
 * (tokens known); a running request without a prev item is planned as in
 * sched_step; then, when admit is not NULL, waiting requests are admitted
 * FCFS while the budget and blocks last and admit(r, user) holds (it
 * stops at the first it refuses). Blocks are reserved for every item. No
 * preemption: false (out empty; blocks reserved so far stay, at most one
 * token ahead) when a running request cannot get a block, and the caller
 * plans with sched_step once prev is done. Commit prev before out.
 * out->items stays valid through one more step of either kind. */
bool sched_step_ahead(sched *s, const sched_output *prev, sched_output *out, sched_admit_fn admit,
                      void *user);

/* The step's forward pass ran: advance n_computed of every item and offer
 * newly full blocks to the prefix cache. Items whose req is NULL are
 * skipped. */
void sched_commit(sched *s, const sched_output *out);

/* Append a sampled token (CHECKs room: n_total < cap). */
void sched_append_token(sched *s, sched_req *r, int32_t token);

/* Remove a request in any state (finish or abort): blocks released at once,
 * r freed. */
void sched_remove(sched *s, sched_req *r);

bool sched_has_work(const sched *s);
void sched_get_stats(const sched *s, sched_stats *st);
/* The first request of each queue (NULL when empty); sched_req_next gives
 * the one after r in r's queue (NULL at the end). */
sched_req *sched_running_head(const sched *s);
sched_req *sched_waiting_head(const sched *s);
sched_req *sched_req_next(const sched *s, const sched_req *r);

/* Check scheduler + pool invariants: queue links and counts, states, every
 * block table consistent with n_computed, the pool's reference counts equal
 * to the number of block-table entries naming each block. */
bool sched_check(const sched *s, char *msg, size_t msg_len);

/* ---- does a request fit -------------------------------------------------- */

/* What bounds one request's length: prompt + max_tokens must fit the model
 * length and, minus the last sampled token (which needs no KV), the whole
 * KV cache. */
typedef struct {
    int max_model_len;
    int block_size; /* KV block size in tokens */
    int kv_blocks;  /* usable blocks of the whole KV cache */
} sched_fit_limits;

/* The most tokens a request may generate after n_prompt prompt tokens
 * (<= 0: the prompt alone leaves no room). */
int64_t sched_fit_room(const sched_fit_limits *l, int64_t n_prompt);
/* INFERD_OK when n_prompt + max_tokens fits; TOO_LONG otherwise, the message
 * names both numbers and the limit hit (model length or KV blocks). */
inferd_status sched_fit_check(const sched_fit_limits *l, int64_t n_prompt, int64_t max_tokens);

#endif
