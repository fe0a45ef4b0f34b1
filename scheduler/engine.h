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
 * must not block) whenever new output is there: for a generated token once
 * the next step has been launched (so the wake-ups overlap the device's
 * work), or when no step follows; the output itself is in the stream at
 * once, for a consumer that polls. The consumer takes output
 * with engine_stream_poll/wait and ends with engine_stream_release(), which
 * aborts the request if it is still running (KV blocks freed within one step).
 */
#ifndef INFERD_SCHEDULER_ENGINE_H
#define INFERD_SCHEDULER_ENGINE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "common/opt.h"
#include "common/status.h"
#include "model/model.h"
#include "scheduler/sched.h"
#include "tokenizer/tokenizer.h"

typedef enum {
    FINISH_NONE = 0,
    FINISH_STOP,    /* EOS, stop token or stop string */
    FINISH_LENGTH,  /* max_tokens or model length */
    FINISH_ABORT,   /* aborted by client / shutdown / timeout */
    FINISH_ERROR,
} finish_reason;

const char *finish_reason_str(finish_reason r); /* "stop", "length", "abort", "error" */

/* Request-level limits, written once (the sampling rows below use them). */
#define SAMPLING_MAX_STOP 16      /* stop strings, and separately stop token ids, per request */
#define SAMPLING_MAX_STOP_LEN 256 /* bytes per stop string: the engine re-scans up to this many
                                     bytes of text after every token, so it bounds that work */
#define SAMPLING_MAX_LOGPROBS 20  /* top-N alternatives per sampled token (OpenAI's limit) */
#define SAMPLING_MAX_LOGIT_BIAS 300   /* logit_bias entries per request (OpenAI's limit) */
#define SAMPLING_LOGIT_BIAS_MAX 100.0 /* a bias is in [-100, 100] (OpenAI's range) */

/* One logit_bias entry: bias added to token's logit before sampling. */
typedef struct {
    int32_t token;
    float bias;
} sampling_logit_bias;

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
    int prompt_logprobs;     /* top-N logprobs per prompt token, 0..20; -1 = off (not a table row:
                                the server sets it for completions echo + logprobs). A request with
                                it takes no prefix-cache hits (those prompt rows are never computed,
                                vLLM's rule) and only sequence 0 of a group computes them */
    float presence_penalty;  /* OpenAI: minus this once for every token already generated; 0 = off */
    float frequency_penalty; /* OpenAI: minus this per earlier occurrence among generated tokens; 0 = off */
    float repetition_penalty;/* HF/vLLM: over prompt and generated tokens; 1 = off */
    int n_logit_bias;        /* entries of logit_bias (sampling_logit_bias_add) */
    sampling_logit_bias logit_bias[SAMPLING_MAX_LOGIT_BIAS]; /* distinct tokens */
} sampling_params;

/* The defaults of every row below (max_tokens 16, logprobs off). */
void sampling_params_default(sampling_params *sp);

/* ---- the sampling-parameter table ---------------------------------------
 *
 * One row per request field: the CLI flags of `inferd generate`, the keys of
 * a prompts-file line and the OpenAI request body are all read through these
 * rows, and sampling_params_validate() checks the same rows again at
 * engine_submit, so a limit is written once. Ranges follow OpenAI/vLLM:
 *   temperature [0, 2], top_p (0, 1], top_k [-1, 2^31-1] (<= 0 off),
 *   min_p [0, 1], seed any int64 (negatives keep their two's-complement bits),
 *   max_tokens [1, 2^31-1], min_tokens [0, 2^31-1] and <= max_tokens,
 *   stop_token_ids 0..16 ids in [0, vocab), stop 0..16 strings of 1..256
 *   bytes of valid UTF-8, ignore_eos bool, logprobs [0, 20],
 *   presence_penalty and frequency_penalty [-2, 2], repetition_penalty
 *   (0, 2].
 * logit_bias is not a row (it is a map, not a number or a list of them):
 * its limits are the SAMPLING_*LOGIT_BIAS constants, enforced by
 * sampling_logit_bias_add and again by sampling_params_validate.
 * The row's opt.name is the flag spelling ("top-p"), `key` the API key
 * ("top_p") that errors name. List rows (stop, stop_token_ids) point at the
 * count field and bound the count. */
typedef struct {
    opt_row opt;   /* name, kind, offset, [min, max], default, help */
    const char *key;
    bool min_open; /* the minimum itself is excluded: top_p is (0, 1] */
} sampling_row;

/* The table: *n rows. */
const sampling_row *sampling_rows(size_t *n);
/* Row by API key or flag name ('_' matches '-'), or NULL. */
const sampling_row *sampling_row_find(const char *name);
/* Range text of a row: "[0, 2]", "(0, 1]", "[0, 16] entries". */
const char *sampling_row_range(const sampling_row *r, char *buf, size_t len);
/* Check v against the row (integral for integer rows, count bounds for
 * lists) without storing. INVALID_ARG naming r->key otherwise. */
inferd_status sampling_row_check(const sampling_row *r, double v);
/* Check and store a number (BOOL rows: 0/1; seed also sets has_seed; list
 * rows are not settable). Nothing is stored on error. */
inferd_status sampling_row_set_number(const sampling_row *r, sampling_params *sp, double v);
/* The same from command-line text: integers are parsed exactly (the full
 * int64 range for seed), numbers with strtod. */
inferd_status sampling_row_set_text(const sampling_row *r, sampling_params *sp, const char *text);

/* Add one logit_bias entry (token -> bias) to sp: INVALID_ARG naming
 * 'logit_bias' (nothing stored) when sp already has SAMPLING_MAX_LOGIT_BIAS
 * entries, the token is negative or already present, or the bias is not a
 * finite number in [-SAMPLING_LOGIT_BIAS_MAX, SAMPLING_LOGIT_BIAS_MAX].
 * The vocabulary bound is sampling_params_validate's (it needs the model). */
inferd_status sampling_logit_bias_add(sampling_params *sp, int64_t token, double bias);

/* Check every rule of the table on sp, and the cross-field ones (min_tokens
 * <= max_tokens, each stop token id in [0, vocab_size) when vocab_size > 0,
 * stop strings non-empty, <= SAMPLING_MAX_STOP_LEN bytes, valid UTF-8,
 * logit_bias entries as sampling_logit_bias_add states, with tokens in
 * [0, vocab_size) when vocab_size > 0).
 * INVALID_ARG with a message naming the field; *param (may be NULL) gets
 * the row's key. */
inferd_status sampling_params_validate(const sampling_params *sp, int vocab_size, const char **param);

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
    double cum_logprob;        /* sum of the generated tokens' logprobs so far (0 unless sp.logprobs >= 0) */
    engine_times times;
    /* sp.prompt_logprobs >= 0: the prompt tokens' logprobs, in prompt order,
     * computed in the prefill; the first output holding any starts at
     * prompt token 1 (token 0 has no logprob), and all of them come before
     * (or with) the first generated token. entry.token is the prompt token. */
    int n_prompt_logprobs;
    engine_logprob *prompt_logprobs; /* [n_prompt_logprobs] heap, NULL when none */
} engine_output;

void engine_output_free(engine_output *o);

/* Engine options. enable_prefix_caching and max_queued_requests are rows of
 * the engine option table (engine_opts.c); the three step limits are the
 * model's rows (model_opts_rows: the model sizes its buffers from them), so
 * engine_opts_from_model copies them and engine_opts_validate checks them
 * against those rows. engine_create validates with the same rows. */
typedef struct {
    int max_num_seqs;           /* sequences per step */
    int max_num_batched_tokens; /* tokens per step */
    bool enable_prefix_caching;
    int max_queued_requests;    /* waiting requests beyond which submit fails with QUEUE_FULL */
    int max_model_len;          /* 0 = the model's */
    /* Async scheduling (vLLM's --async-scheduling): while a step runs,
     * the next one is planned (new requests admitted, prompt chunks and
     * decode tokens alike) and launched, its decode rows' input tokens
     * taken from the running step's samples on the device, and the
     * running step's outputs are processed after that launch; the device
     * does not wait for the host between steps. Requests with logprobs,
     * penalties, prompt logprobs or forks, and tensor parallelism, run
     * one step at a time. Greedy and seeded outputs are the same either
     * way. */
    bool async_scheduling;
} engine_opts;

void engine_opts_default(engine_opts *o);
/* The engine's own option rows (offsets into engine_opts); *n = count. */
const opt_row *engine_opts_rows(size_t *n);
/* Take the step limits (max_num_seqs, max_num_batched_tokens,
 * max_model_len) from the model options they were parsed into. */
void engine_opts_from_model(engine_opts *eo, const model_opts *mo);
/* Check every field against its row (the engine table's, or the model
 * table's for the step limits): INVALID_ARG naming the field and range. */
inferd_status engine_opts_validate(const engine_opts *o);

/* The engine thread's own time between two consecutive decode-only steps
 * (wall clock, summed over `gaps` pairs): from one step's return from the
 * model until the next step calls it. The GPU idles through this time
 * (bench latency's host gap is this plus the token copy-back, the input
 * upload and the launch around it). With async scheduling a pair is two
 * launches, and this time runs while the device computes: schedule then
 * holds the planning, the batch build and the launch of the step ahead,
 * outputs the step before's, build stays 0 (on the CPU backend, whose
 * launch runs the whole step, schedule holds the step too). */
typedef struct {
    uint64_t gaps;
    double outputs_s;  /* commit and the sampled tokens: stop checks, detokenizing, streaming */
    double loop_s;     /* the thread loop: stats snapshot, admission, aborts, locks */
    double schedule_s; /* sched_step */
    double build_s;    /* the batch arrays and the sampling parameters */
} engine_host_times;

typedef struct {
    int running, waiting;
    int kv_blocks_total, kv_blocks_used; /* excludes the null block */
    double kv_usage;                     /* used / total */
    uint64_t prompt_tokens, generation_tokens;
    uint64_t preemptions;
    uint64_t prefix_queries, prefix_hits; /* in tokens, like vLLM */
    uint64_t kv_blocks_allocated;         /* blocks the pool handed out fresh (KV computed into them) */
    uint64_t kv_blocks_shared;            /* block references added by forks (KV reused, not recomputed) */
    uint64_t finished[5];                 /* by finish_reason */
    uint64_t steps;
    uint64_t steps_ahead;   /* steps launched while the step before still ran (async scheduling) */
    engine_host_times host; /* between consecutive decode-only steps */
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

/* Thread-safe. Errors: INVALID_ARG (sampling_params_validate, an empty
 * prompt, ids outside the vocabulary, stop strings without a tokenizer),
 * TOO_LONG (sched_fit_check against engine_get_fit_limits),
 * QUEUE_FULL, UNAVAILABLE (stopping). */
inferd_status engine_submit(engine *e, const engine_request *req, engine_stream **out);
/* n_reqs separate requests (one sequence each; out[i] is reqs[i]'s stream),
 * all or nothing, published at once: the engine's next step sees every
 * one of them, as a batch of prompts handed over together (bench latency
 * times the prefill of such a batch). Each request is checked as by
 * engine_submit; INVALID_ARG when n_reqs is outside [1,
 * ENGINE_SUBMIT_MANY_MAX]. */
#define ENGINE_SUBMIT_MANY_MAX (1 << 24) /* the largest max_queued_requests */
inferd_status engine_submit_many(engine *e, const engine_request *reqs, int n_reqs, engine_stream **out);

/* ---- several sequences of one prompt (OpenAI n, best_of) -----------------
 *
 * engine_submit_n submits n_seqs sequences of one prompt, each with its own
 * stream (out[0..n_seqs)), all-or-nothing. The prompt is computed once:
 * sequence 0 runs first; when its prompt KV is complete the others are
 * forked from it (sched_fork), sharing its full prompt blocks by reference
 * and computing only the prompt's last partial block (< block_size tokens)
 * themselves, one step later. Every other rule is that of n_seqs separate
 * engine_submit calls: the same validation, each sequence counts against
 * max_queued_requests, finishes, aborts and reports usage on its own
 * stream (completion_tokens counts that sequence's tokens; the prompt is
 * one prompt for the caller's usage).
 *
 * Seeds: sequence i samples with engine_seq_seed(seed, i), where seed is
 * req->sp.seed when has_seed, else one fresh seed for the group. So
 * sequence i of a seeded group produces exactly what engine_submit of the
 * same request with sp.seed = engine_seq_seed(seed, i) produces (vLLM's
 * rule for n > 1: seed + index), and greedy sequences are all identical.
 *
 * best_of: submit best_of sequences with sp.logprobs >= 0 (so
 * engine_output.cum_logprob is computed), then engine_rank_seqs orders them
 * by cumulative logprob; the first n are the answer (vLLM's ranking).
 * INVALID_ARG (param "n") when n_seqs is outside [1, SAMPLING_MAX_SEQS]. */
#define SAMPLING_MAX_SEQS 16
inferd_status engine_submit_n(engine *e, const engine_request *req, int n_seqs, engine_stream **out);
/* ---- n and best_of of an API request (params.c) ---------------------------
 *
 * Not rows of the sampling table: they size a request (how many
 * sequences), they do not steer one sequence, so sampling_params has no
 * field for them and the `inferd generate` faces do not take them. They
 * are checked here, next to the table, with the table's row type and
 * messages: n in [1, SAMPLING_MAX_SEQS], best_of in [1, SAMPLING_MAX_SEQS]
 * and >= n (OpenAI's rule), and n_prompts x max(n, best_of) sequences at
 * most SAMPLING_MAX_REQUEST_SEQS for one request (each sequence is an
 * engine request: the bound keeps one HTTP request from filling the
 * queue). */
#define SAMPLING_MAX_REQUEST_SEQS 128
typedef struct {
    int32_t n;       /* choices returned per prompt */
    int32_t best_of; /* sequences generated per prompt (>= n); the n with the highest cum_logprob return */
} sampling_seqs;

/* n = best_of = 1. */
void sampling_seqs_default(sampling_seqs *q);
/* Row of "n" or "best_of" (integer rows, [1, SAMPLING_MAX_SEQS]), or NULL. */
const sampling_row *sampling_seqs_row_find(const char *key);
/* Check v against the row named key ("n" / "best_of") and store it into
 * q; INVALID_ARG naming the key (nothing stored) otherwise. */
inferd_status sampling_seqs_set(sampling_seqs *q, const char *key, double v);
/* Both rows, best_of >= n, and n_prompts x best_of <=
 * SAMPLING_MAX_REQUEST_SEQS; INVALID_ARG naming the field through *param
 * ("n", "best_of", or "prompt" for the product when n_prompts > 1). */
inferd_status sampling_seqs_validate(const sampling_seqs *q, int n_prompts, const char **param);

/* The seed of sequence i of a group whose seed is `seed`: seed + i (mod 2^64). */
uint64_t engine_seq_seed(uint64_t seed, int i);
/* order[0..n) = 0..n-1 sorted by cum_logprob[] descending, ties by lower
 * index (a stable, deterministic ranking). */
void engine_rank_seqs(const double *cum_logprob, int n, int *order);

uint64_t engine_stream_id(const engine_stream *s);
/* Non-blocking: move pending output into *out; false when nothing new. */
bool engine_stream_poll(engine_stream *s, engine_output *out);
/* Non-blocking, one engine step at a time: the oldest pending publish
 * (its tokens, logprobs and text, with the totals as of it), the finish with
 * the last. An event loop that serves several streams polls each in turn
 * this way, so their outputs interleave step by step however late it
 * wakes. */
bool engine_stream_poll_step(engine_stream *s, engine_output *out);
/* Block up to timeout_ms (< 0 forever) for output; false on timeout. */
bool engine_stream_wait(engine_stream *s, engine_output *out, int timeout_ms);
/* Ask the engine to abort (idempotent). */
void engine_stream_abort(engine_stream *s);
/* Consumer is done with the stream (aborts if unfinished). */
void engine_stream_release(engine_stream *s);

void engine_get_stats(engine *e, engine_stats *st);
/* The limits engine_submit checks requests against (fixed at create). */
void engine_get_fit_limits(const engine *e, sched_fit_limits *out);
/* Wait until every block is back in the free list and no request is live;
 * false on timeout. For tests and graceful shutdown. */
bool engine_wait_idle(engine *e, int timeout_ms);
/* Check the block pool's invariants (tests). */
bool engine_check_invariants(engine *e);

#endif
