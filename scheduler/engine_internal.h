/* scheduler/engine_internal.h: the engine's private structures, shared by
 * engine.c (lifecycle, thread loop, submission), engine_step.c (batch build,
 * forward, sampling, logprobs), engine_output.c (stop conditions, stop
 * strings, incremental text) and engine_stream.c (per-request output
 * channels).
 *
 * Threads and locks:
 *  - e->mu guards the submission queue, the stop flag, n_live, the stats
 *    snapshot; e->cv wakes the engine, e->idle_cv wakes engine_wait_idle.
 *  - e->step_mu is held by the engine thread while it touches the scheduler
 *    and the block pool (one loop iteration), so tests can check the pool's
 *    invariants from another thread.
 *  - each stream has its own mutex + condvar; the engine holds it only to
 *    append output, never while waiting on anything.
 *  - abort requests are an atomic flag on the stream, polled by the engine
 *    every iteration (the engine never sleeps while a request is live).
 */
#ifndef INFERD_SCHEDULER_ENGINE_INTERNAL_H
#define INFERD_SCHEDULER_ENGINE_INTERNAL_H

#include <pthread.h>
#include <stdatomic.h>

#include "common/buf.h"
#include "common/list.h"
#include "common/util.h"
#include "kvcache/kv_pool.h"
#include "scheduler/engine.h"
#include "scheduler/sched.h"

/* Where one publish with tokens or text ends in the stream's buffers, and
 * the running totals it carried. */
typedef struct {
    int tok_end;
    size_t text_end;
    int completion_tokens;
    double cum_logprob;
} stream_seg;

struct engine_stream {
    pthread_mutex_t mu;
    pthread_cond_t cv;
    uint64_t id;
    int refs; /* engine + consumer; freed at 0 (under mu) */
    atomic_bool abort_req;
    bool want_logprobs;
    void (*notify)(void *user);
    void *notify_user;
    /* pending output, moved out by poll/wait (all of it) or poll_step (one
     * publish at a time, from the heads) */
    int32_t *tok;       /* [n_tok], pending from tok_head */
    engine_logprob *lp; /* [n_tok] when want_logprobs */
    int n_tok, cap_tok, tok_head;
    engine_logprob *plp; /* [n_plp] pending prompt logprobs */
    int n_plp, cap_plp;
    inferd_buf text;  /* pending text from text_head */
    size_t text_head;
    stream_seg *seg; /* [n_seg] the publishes with tokens or text, pending from seg_head */
    int n_seg, cap_seg, seg_head;
    bool finished, finish_delivered;
    finish_reason finish;
    char error[256];
    int prompt_tokens, completion_tokens, cached_tokens;
    double cum_logprob;
    engine_times times;
};

/* The engine's record of one live request. */
typedef struct eng_req {
    engine_stream *stream;
    sched_req *sr;   /* NULL until added to the scheduler */
    int32_t *prompt; /* [n_prompt] until added (then the scheduler has it) */
    int n_prompt;
    sampling_params sp; /* stop[] point into stop_copy */
    char *stop_copy[SAMPLING_MAX_STOP];
    size_t max_stop_len;
    uint64_t seed;
    inferd_deadline deadline; /* from engine_request.timeout_s */
    engine_times times;
    tok_stream *detok; /* NULL without tokenizer */
    inferd_buf text;   /* all generated text so far (stop strings are matched here) */
    size_t emitted;    /* bytes of text already published */
    int n_gen;
    bool prefill_counted;
    int pen_slot;    /* penalty slot (engine_penalty.c) while running, -1 none */
    int pen_counted; /* tokens of sr->tokens already in the slot's counts */
    double cum_logprob; /* sum of the generated tokens' logprobs (when computed) */
    int plp_done;       /* sp.prompt_logprobs: prompt tokens [1, plp_done] published (a
                           preempted request recomputes them: those are not published again) */
    /* groups (engine_submit_n): the leader holds the other sequences until
     * its prompt KV is computed, then forks them (engine_fork_held) */
    struct eng_req **held; /* leader: [n_held] sequences waiting for the fork */
    int n_held;
    struct eng_req *leader; /* a sequence waiting for its leader's fork, else NULL */
    bool in_live;           /* taken by the engine thread (in e->live) */
    bool forked;            /* forked from a leader: its prompt was counted there */
    inferd_list_node link; /* engine.pending, then engine.live */
} eng_req;

/* Device state of penalties and logit_bias (engine_penalty.c): one slot
 * per running sequence that uses them, allocated on the first such request. */
typedef struct {
    int n_slots;            /* max_num_seqs; 0 until allocated */
    int32_t *counts;        /* device [n_slots, vocab] (kernels.h: penalties) */
    kern_logit_bias *bias;  /* device [n_slots, SAMPLING_MAX_LOGIT_BIAS] */
    int32_t *staging;       /* device [max_model_len]: tokens for kern_penalty_init */
    int *free_slots, n_free;/* host stack of unused slots */
    kern_logit_bias *h_bias;/* host [SAMPLING_MAX_LOGIT_BIAS] upload staging */
} eng_penalty;

#define ENG_REQ_OF(node) INFERD_LIST_ENTRY(node, eng_req, link)

struct engine {
    engine_opts opts; /* effective (clamped to the model) */
    model *m;
    const tokenizer *tok;
    kv_pool *pool;
    sched *s;
    int block_size, vocab, max_blocks_per_seq;
    const model_config *cfg;

    pthread_t thread;
    bool started, stopping, stopped;
    pthread_mutex_t mu, step_mu;
    pthread_cond_t cv, idle_cv;
    inferd_list pending; /* of eng_req: submitted, not yet taken by the engine */
    int n_live;          /* requests taken by the engine, unfinished */
    int n_waiting_sched; /* scheduler waiting count, for QUEUE_FULL */
    int n_admitting;     /* submissions past the QUEUE_FULL check, not yet pushed */
    uint64_t next_id;
    engine_stats stats; /* snapshot under mu */

    /* engine-thread state */
    inferd_list live; /* of eng_req: taken, unfinished */
    uint64_t n_prompt_tokens, n_gen_tokens, n_finished[5];
    /* host time between decode-only steps (engine_host_times): when the
     * previous step ended and its output part; h_end 0 = that step was not
     * decode-only (or failed), so the next one starts no pair */
    double h_end, h_outputs;
    engine_host_times host;
    /* streams published without a wake (eng_accept_token), each holding a
     * reference: woken by eng_flush_wakes once the next step is on the
     * device, or when no step follows */
    engine_stream **wake;
    int n_wake, cap_wake;

    /* per-step host buffers, sized at create */
    int32_t *b_tokens, *b_positions;    /* [max_num_batched_tokens] */
    int64_t *b_slots;                   /* [max_num_batched_tokens] */
    int32_t *b_qsl;                     /* [max_num_seqs + 1] */
    int32_t *b_seq_lens;                /* [max_num_seqs] */
    int32_t *b_tables;                  /* [max_num_seqs, max_blocks_per_seq] */
    int32_t *b_logits_idx, *b_row_item; /* [max_num_seqs] */
    kern_sample_params *b_sparams;      /* [max_num_seqs] */
    int32_t *b_sampled;                 /* [max_num_seqs] */
    float *h_logits;                    /* [max_num_seqs, vocab], allocated on first logprobs */
    /* prompt logprobs (model_batch extra rows), allocated on first use */
    int32_t *b_extra_rows, *b_extra_item; /* [max_num_batched_tokens] token row, step item */
    engine_logprob *b_extra_lp;           /* [max_num_batched_tokens] */
    const sched_output *cur_out;          /* the step being run (extra_fn's context) */
    /* async scheduling: a step launched and not yet waited for
     * (model_step_launch, fl_out: items in the scheduler's arrays); its
     * items' reqs go NULL when they retire. b_prev_rows: [max_num_batched_
     * tokens] a chained step's token rows, fl_out's logits row or -1 */
    bool async; /* opts.async_scheduling and model_step_chainable */
    /* INFERD_ASYNC_CHAIN=decode (for A/B measurements): chain only
     * decode-only steps while nobody waits, not through prompt chunks and
     * admissions (async scheduling's scope before the chain was widened) */
    bool chain_decode;
    bool fl_active;
    sched_output fl_out;
    int32_t *b_prev_rows;
    /* the step in flight's logits row -> item and item -> logits row (-1:
     * none), in map set fl_k; the step planned ahead fills the other set */
    int32_t *fl_row_item[2], *fl_item_row[2]; /* [max_num_seqs] each */
    int fl_n_logits[2], fl_k;
    uint64_t steps_ahead;
    double c_end; /* when the last chained call (or the step left in flight) ended, 0 = none */
    eng_penalty pen;                    /* engine-thread only */
};

/* engine_stream.c */
engine_stream *stream_new(uint64_t id, const engine_request *req);
/* The cumulative logprob the next output reports. */
void stream_set_cum_logprob(engine_stream *s, double v);
/* Append prompt logprobs lp[0, n) and wake the consumer. */
void stream_publish_prompt(engine_stream *s, const engine_logprob *lp, int n);
/* Drop one reference (frees at zero). */
void stream_unref(engine_stream *s);
/* Append output (any part may be empty) and wake the consumer, or with
 * wake = false take a reference and leave the wake to stream_wake_unref.
 * The finish fields are applied when finish != FINISH_NONE. */
void stream_publish(engine_stream *s, const int32_t *tok, const engine_logprob *lp, int n_tok,
                    const char *text, size_t text_len, const engine_times *times, int completion_tokens,
                    int cached_tokens, finish_reason finish, const char *error, bool wake);
void stream_wake_unref(engine_stream *s);

/* engine_output.c: a sampled token for r (lp may be NULL): append it, apply
 * the stop conditions, publish. Returns true when r finished (r is freed). */
bool eng_accept_token(engine *e, eng_req *r, int32_t token, const engine_logprob *lp);
/* engine_step.c: wake the consumers of every stream eng_accept_token
 * published since the last call (and drop the references they held). */
void eng_flush_wakes(engine *e);
/* Finish r now with `reason` (abort, error): flush text, publish, free. */
void eng_finish(engine *e, eng_req *r, finish_reason reason, const char *error);
void eng_req_free(eng_req *r);

/* engine.c: put r (taken, in e->live) into the scheduler on its own;
 * finishes r with FINISH_ERROR when the scheduler refuses it. */
void eng_sched_add(engine *e, eng_req *r);
/* engine_fork.c (groups): fork every sequence leader r holds, now that its
 * prompt KV is computed; detach r's held sequences (they run unshared)
 * or a held sequence from its leader, when either leaves early. */
void eng_fork_held(engine *e, eng_req *r);
void eng_group_detach(engine *e, eng_req *r);

/* engine_step.c: one scheduler step + forward + sample + update. With
 * async scheduling it may return with a decode step in flight (e->fl_*),
 * whose outputs the next call processes, after launching the step after. */
void eng_step(engine *e);
/* engine_step.c: wait for the step in flight, if any, and process its
 * outputs (the engine ends or has nothing left to schedule). */
void eng_drain(engine *e);
/* engine_step.c: r retires: its item in the step in flight, if any, is
 * marked removed (sched_item.req = NULL) before its sched_req is freed. */
void eng_forget_inflight(engine *e, const eng_req *r);

/* engine_penalty.c (engine thread). r uses penalties or logit_bias. */
bool eng_penalized(const eng_req *r);
/* Allocate the slots on first use; NOMEM with the sizes when the device
 * has no room (the request then fails, the engine goes on). */
inferd_status eng_penalty_reserve(engine *e);
/* Fill p's penalty members for r's sampling row this step: on r's first
 * row since admission take a slot and build its counts from r's tokens on
 * the device; later rows pass the one token added since as count_token. */
void eng_penalty_fill(engine *e, eng_req *r, kern_sample_params *p);
/* Give r's slot back (finish, preemption). No-op without one. */
void eng_penalty_release(engine *e, eng_req *r);
/* Release the slots of requests the last sched_step preempted. */
void eng_penalty_drop_preempted(engine *e);
void eng_penalty_free(engine *e);

#endif
