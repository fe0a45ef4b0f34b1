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

struct engine_stream {
    pthread_mutex_t mu;
    pthread_cond_t cv;
    uint64_t id;
    int refs; /* engine + consumer; freed at 0 (under mu) */
    atomic_bool abort_req;
    bool want_logprobs;
    void (*notify)(void *user);
    void *notify_user;
    /* pending output, moved out by poll/wait */
    int32_t *tok;       /* [n_tok] */
    engine_logprob *lp; /* [n_tok] when want_logprobs */
    int n_tok, cap_tok;
    inferd_buf text; /* pending text, moved out whole by take() */
    bool finished, finish_delivered;
    finish_reason finish;
    char error[256];
    int prompt_tokens, completion_tokens, cached_tokens;
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
    inferd_list_node link; /* engine.pending, then engine.live */
} eng_req;

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
};

/* engine_stream.c */
engine_stream *stream_new(uint64_t id, const engine_request *req);
/* Drop one reference (frees at zero). */
void stream_unref(engine_stream *s);
/* Append output (any part may be empty) and wake the consumer. The finish
 * fields are applied when finish != FINISH_NONE. */
void stream_publish(engine_stream *s, const int32_t *tok, const engine_logprob *lp, int n_tok,
                    const char *text, size_t text_len, const engine_times *times, int completion_tokens,
                    int cached_tokens, finish_reason finish, const char *error);

/* engine_output.c: a sampled token for r (lp may be NULL): append it, apply
 * the stop conditions, publish. Returns true when r finished (r is freed). */
bool eng_accept_token(engine *e, eng_req *r, int32_t token, const engine_logprob *lp);
/* Finish r now with `reason` (abort, error): flush text, publish, free. */
void eng_finish(engine *e, eng_req *r, finish_reason reason, const char *error);
void eng_req_free(eng_req *r);

/* engine_step.c: one scheduler step + forward + sample + update. */
void eng_step(engine *e);

#endif
