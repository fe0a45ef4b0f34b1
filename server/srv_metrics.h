/* server/srv_metrics.h: Prometheus metrics (text exposition format 0.0.4),
 * all named inferd:*.
 *
 * Gauges and the engine's counters are read from engine_stats at scrape time;
 * the server keeps the per-request histograms and the HTTP status counter.
 * Thread-safe: observations come from the HTTP threads.
 */
#ifndef INFERD_SERVER_SRV_METRICS_H
#define INFERD_SERVER_SRV_METRICS_H

#include <stddef.h>

#include "scheduler/engine.h"

typedef enum {
    SRV_HIST_TTFT = 0,   /* inferd:time_to_first_token_seconds */
    SRV_HIST_ITL,        /* inferd:inter_token_latency_seconds */
    SRV_HIST_E2E,        /* inferd:e2e_request_latency_seconds */
    SRV_HIST_QUEUE,      /* inferd:request_queue_time_seconds */
    SRV_HIST_PREFILL,    /* inferd:request_prefill_time_seconds */
    SRV_HIST_DECODE,     /* inferd:request_decode_time_seconds */
    SRV_HIST_PROMPT_LEN, /* inferd:request_prompt_tokens */
    SRV_HIST_GEN_LEN,    /* inferd:request_generation_tokens */
    SRV_HIST_COUNT
} srv_hist_id;

typedef struct srv_metrics srv_metrics;

srv_metrics *srv_metrics_new(void);
void srv_metrics_free(srv_metrics *m);

/* Add one observation (seconds or tokens) `count` times. */
void srv_metrics_observe(srv_metrics *m, srv_hist_id h, double v, int count);
/* Count one HTTP response by status code (100..599). */
void srv_metrics_http(srv_metrics *m, int status);

/* Render the whole exposition (heap, inferd_free). st may be NULL while the model
 * is loading (engine gauges and counters then read 0). */
char *srv_metrics_render(srv_metrics *m, const engine_stats *st, size_t *len);

#endif
