/* scheduler/engine.h: the continuous-batching engine and its thread-safe API.
 *
 * One engine thread owns the model, the KV block pool and the scheduler. Any
 * thread may submit requests and read their output streams; the engine never
 * blocks on a consumer (output accumulates in the stream until polled).
 *
 * Life of a request: engine_submit() validates it (rejects with a status
 * what can never fit) and returns an engine_stream; the engine schedules it,
 * appends tokens, detokenizes incrementally, checks stop conditions, and
 * publishes events to the stream, calling `notify` (from the engine thread,
 * must not block) whenever new output is there. The consumer takes output
 * with engine_stream_poll/wait and ends with engine_stream_release(), which
 * aborts the request if it is still running (KV blocks freed within one step).
 */
#ifndef INFERD_SCHEDULER_ENGINE_H
#define INFERD_SCHEDULER_ENGINE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "common/status.h"
#include "model/model.h"
#include "tokenizer/tokenizer.h"

typedef enum {
    FINISH_NONE = 0,
    FINISH_STOP,    /* EOS, stop token or stop string */
    FINISH_LENGTH,  /* max_tokens or model length */
    FINISH_ABORT,   /* aborted by client / shutdown / timeout */
    FINISH_ERROR,
} finish_reason;

const char *finish_reason_str(finish_reason r); /* "stop", "length", "abort", "error" */

#define SAMPLING_MAX_STOP 16
#define SAMPLING_MAX_LOGPROBS 20

typedef struct {
    float temperature;       /* 0 = greedy */
    float top_p;             /* 1 = off */
    int32_t top_k;           /* <= 0 = off */
    float min_p;             /* 0 = off */
    uint64_t seed;           /* used when has_seed; else engine picks one */
    bool has_seed;
    int32_t max_tokens;      /* > 0 */
    int32_t min_tokens;      /* EOS / stop tokens ignored before this many */
    bool ignore_eos;
    int n_stop_token_ids;
    int32_t stop_token_ids[SAMPLING_MAX_STOP];
    int n_stop;
    const char *stop[SAMPLING_MAX_STOP]; /* copied at submit */
    int logprobs;            /* top-N logprobs per sampled token, 0..20; -1 = off */
} sampling_params;

void sampling_params_default(sampling_params *sp);

typedef struct {
    const int32_t *prompt_ids; /* copied at submit */
    int n_prompt;
    sampling_params sp;
    double timeout_s;          /* 0 = none: abort (FINISH_ABORT) after this long */
    void (*notify)(void *user);/* engine thread; must not block; may be NULL */
    void *notify_user;
} engine_request;

/* Timestamps in seconds on the monotonic clock (util_now_s); 0 = not yet. */
typedef struct {
    double arrival, first_scheduled, first_token, last_token, finished;
    double prefill_done;       /* when the whole prompt had been computed */
} engine_times;

typedef struct {
    int32_t token;
    float logprob;
    int n_top;
    int32_t top_ids[SAMPLING_MAX_LOGPROBS];
    float top_logprobs[SAMPLING_MAX_LOGPROBS];
} engine_logprob;

/* What a poll returns: everything new since the previous poll. */
typedef struct {
    int n_tokens;
    int32_t *token_ids;        /* [n_tokens] heap */
    engine_logprob *logprobs;  /* [n_tokens] heap, NULL unless requested */
    char *text;                /* new text, heap, NUL-terminated */
    size_t text_len;
    bool finished;
    finish_reason finish;
    char error[256];           /* when finish == FINISH_ERROR */
    int prompt_tokens, completion_tokens; /* totals so far */
    int cached_tokens;         /* prompt tokens served from the prefix cache */
    engine_times times;
} engine_output;

void engine_output_free(engine_output *o);

typedef struct {
    int max_num_seqs;           /* sequences per step */
    int max_num_batched_tokens; /* tokens per step */
    bool enable_prefix_caching;
    int max_queued_requests;    /* waiting requests beyond which submit fails with QUEUE_FULL */
    int max_model_len;          /* 0 = the model's */
} engine_opts;

void engine_opts_default(engine_opts *o);

typedef struct {
    int running, waiting;
    int kv_blocks_total, kv_blocks_used; /* excludes the null block */
    double kv_usage;                     /* used / total */
    uint64_t prompt_tokens, generation_tokens;
    uint64_t preemptions;
    uint64_t prefix_queries, prefix_hits; /* in tokens, like vLLM */
    uint64_t finished[5];                 /* by finish_reason */
    uint64_t steps;
} engine_stats;

typedef struct engine engine;
typedef struct engine_stream engine_stream;

/* The engine does not own model or tokenizer (tokenizer may be NULL: then no
 * text is produced and stop strings are rejected). */
inferd_status engine_create(const engine_opts *opts, model *m, const tokenizer *tok, engine **out);
/* Start / stop the engine thread. engine_stop aborts what is still running. */
inferd_status engine_start(engine *e);
void engine_stop(engine *e);
void engine_free(engine *e);

/* Thread-safe. Errors: INVALID_ARG (bad params), TOO_LONG (prompt + max_tokens
 * beyond the model length or the whole KV capacity, message has both numbers),
 * QUEUE_FULL, UNAVAILABLE (stopping). */
inferd_status engine_submit(engine *e, const engine_request *req, engine_stream **out);

uint64_t engine_stream_id(const engine_stream *s);
/* Non-blocking: move pending output into *out; false when nothing new. */
bool engine_stream_poll(engine_stream *s, engine_output *out);
/* Block up to timeout_ms (< 0 forever) for output; false on timeout. */
bool engine_stream_wait(engine_stream *s, engine_output *out, int timeout_ms);
/* Ask the engine to abort (idempotent). */
void engine_stream_abort(engine_stream *s);
/* Consumer is done with the stream (aborts if unfinished). */
void engine_stream_release(engine_stream *s);

void engine_get_stats(engine *e, engine_stats *st);
/* Wait until every block is back in the free list and no request is live;
 * false on timeout. For tests and graceful shutdown. */
bool engine_wait_idle(engine *e, int timeout_ms);
/* Check the block pool's invariants (tests). */
bool engine_check_invariants(engine *e);

#endif
