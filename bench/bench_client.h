/* bench/bench_client.h: the load generator's HTTP side for `inferd bench
 * serve`: one thread drives every request through libcurl's multi interface,
 * parses the OpenAI SSE stream of each and stamps every content chunk.
 *
 * A request's outcome is a bench_result: its error class (connect, timeout,
 * HTTP 4xx/5xx, bad response, cancelled), the arrival time of every content
 * chunk relative to its own launch, and the token counts of the server's usage
 * chunk. Statistics are computed from these records by bench_stats.h.
 */
#ifndef INFERD_BENCH_BENCH_CLIENT_H
#define INFERD_BENCH_BENCH_CLIENT_H

#include <signal.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "common/buf.h"
#include "common/status.h"

typedef enum {
    BENCH_ERR_NONE = 0,     /* completed */
    BENCH_ERR_CONNECT,      /* no HTTP response: refused, reset, DNS, closed early */
    BENCH_ERR_TIMEOUT,      /* --timeout (or the connect timeout) expired */
    BENCH_ERR_HTTP_4XX,     /* 400..499 */
    BENCH_ERR_HTTP_5XX,     /* 500..599 */
    BENCH_ERR_BAD_RESPONSE, /* other status, malformed/truncated stream, error event */
    BENCH_ERR_CANCELLED,    /* interrupted (SIGINT) before it finished or started */
    BENCH_ERR_COUNT
} bench_err;

/* Short stable name of an error class ("connect", "timeout", "http_4xx",
 * "http_5xx", "bad_response", "cancelled", "" for none). */
const char *bench_err_name(bench_err e);

/* One request's outcome. Times are seconds. */
typedef struct {
    bench_err err;
    long http_status;  /* 0 when no response arrived */
    char *error;       /* heap message (NULL on success) */
    double start_s;    /* launch time since the run's t0; < 0 when never launched */
    double ttft_s;     /* first content chunk - launch (completed only) */
    double e2el_s;     /* end of response - launch */
    double *chunk_s;   /* [n_chunks] content-chunk arrival times since launch */
    int n_chunks, cap_chunks;
    int prompt_tokens; /* usage.prompt_tokens, -1 when absent */
    int output_tokens; /* usage.completion_tokens, or n_chunks without usage */
    bool usage_seen;
} bench_result;

void bench_result_free(bench_result *r);

/* ---- SSE / response parsing (pure; exposed for tests) ------------------ */

/* Incremental parser of one response body. In stream mode it splits the body
 * into lines (any split of the bytes gives the same result), takes `data:`
 * lines as events, JSON-decodes each, records content-chunk times and usage
 * into the bench_result and notes `[DONE]`. In non-stream mode it collects the
 * body and decodes it as one completion at finish. */
typedef struct {
    bench_result *r;
    bool stream, chat;
    inferd_buf buf;     /* stream: partial line; non-stream: whole body */
    bool done;          /* [DONE] seen */
    bool bad;           /* first problem wins: bad_msg */
    char *bad_msg;
    int n_events;       /* JSON data events parsed */
    double first_any_s; /* first event with choices (fallback TTFT); < 0 none */
    double last_s;      /* last event time */
} bench_sse;

void bench_sse_init(bench_sse *s, bench_result *r, bool stream, bool chat);
/* Feed `n` bytes that arrived `t_s` seconds after launch. */
void bench_sse_feed(bench_sse *s, const char *data, size_t n, double t_s);
/* End of body at `t_s`: completes r (err NONE or BAD_RESPONSE, ttft, e2el,
 * output_tokens). Call once; the parser may then be freed. */
void bench_sse_finish(bench_sse *s, double t_s);
void bench_sse_free(bench_sse *s);

/* ---- the multi-request driver ------------------------------------------ */

typedef void (*bench_progress_fn)(void *ud, int n_done, int n_failed, int n_total,
                                  int64_t out_tokens, double elapsed_s);

typedef struct {
    const char *url;            /* full endpoint URL */
    const char *api_key;        /* NULL/"": no Authorization header */
    bool stream;                /* expect SSE (request bodies say so too) */
    bool chat;                  /* chat.completion.chunk shapes */
    double timeout_s;           /* per request, whole transfer; <= 0: none */
    double connect_timeout_s;   /* <= 0: 10 s */
    int max_concurrency;        /* <= 0: unlimited */
    const double *arrival_s;    /* [n] nondecreasing launch offsets; NULL: all at 0 */
    char *const *bodies;        /* [n] JSON request bodies (kept by the caller) */
    int n;
    volatile sig_atomic_t *stop; /* nonzero: abort in-flight, launch nothing more */
    bench_progress_fn progress;  /* called about every 100 ms; may be NULL */
    void *progress_ud;
} bench_client_opts;

/* Run every request; out[i] (zeroed by this call) receives request i. Never
 * fails because of the server: errors are recorded per request. Returns
 * INFERD_ERR_INTERNAL only when libcurl itself cannot be set up.
 * *duration_s: t0 to the end of the last request; *peak_active: the most
 * requests in flight at once. */
inferd_status bench_client_run(const bench_client_opts *o, bench_result *out, double *duration_s,
                               int *peak_active);

/* Blocking GET of `url` (10 s timeout). On success *body (heap, inferd_free) holds
 * the response and *http_status its status. Returns INFERD_ERR_UNAVAILABLE
 * with a message when no response arrived. */
inferd_status bench_http_get(const char *url, const char *api_key, char **body, long *http_status);

#endif
