/* server/srv_metrics.c: see srv_metrics.h.
 *
 * Histograms keep per-bucket (non-cumulative) counts under one mutex and are
 * made cumulative when rendered, ending with le="+Inf" equal to _count, as the
 * exposition format requires. Bucket bounds follow vLLM's choices so
 * dashboards built for it read the same ranges. Label values here are fixed
 * strings and integers, so no escaping is needed.
 *
 * Design choice: one mutex for all histograms and counters, taken for a few
 * additions per observation; at our request rates (thousands per second at
 * most, one observation set per request and per output) contention is
 * negligible, and a consistent snapshot for /metrics is simple. Engine
 * gauges and counters are not kept here: they are read from engine_stats at
 * render time, so the engine never calls into the server.
 * Threads: observe/http from event-loop threads, render from the one
 * serving /metrics.
 */
#include "server/srv_metrics.h"

#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include "common/alloc.h"
#include "common/buf.h"
#include "common/util.h"
#include "server/srv_util.h"

/* Bounds per histogram (the fixed arrays in hist_def and hist). */
#define MAX_BUCKETS 32

typedef struct {
    const char *name;
    const char *help;
    int n_bounds;
    double bounds[MAX_BUCKETS];
} hist_def;

static const hist_def k_hist[SRV_HIST_COUNT] = {
    [SRV_HIST_TTFT] = {"inferd:time_to_first_token_seconds",
                       "Time to first token (from request receipt).",
                       19,
                       {0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5, 0.75, 1.0, 2.5, 5.0, 7.5,
                        10.0, 20.0, 40.0, 80.0}},
    [SRV_HIST_ITL] = {"inferd:inter_token_latency_seconds",
                      "Time between consecutive output tokens.",
                      19,
                      {0.001, 0.005, 0.01, 0.015, 0.02, 0.025, 0.03, 0.04, 0.05, 0.075, 0.1, 0.15, 0.2, 0.3,
                       0.4, 0.5, 0.75, 1.0, 2.5}},
    [SRV_HIST_E2E] = {"inferd:e2e_request_latency_seconds",
                      "End-to-end request latency.",
                      20,
                      {0.01, 0.05, 0.1,  0.3,  0.5,  0.8,  1.0,  1.5,  2.0,   2.5,
                       5.0,  10.0, 15.0, 20.0, 30.0, 40.0, 50.0, 60.0, 120.0, 300.0}},
    [SRV_HIST_QUEUE] = {"inferd:request_queue_time_seconds",
                        "Time a request waited before first scheduled.",
                        20,
                        {0.001, 0.005, 0.01, 0.05, 0.1,  0.3,  0.5,  0.8,  1.0,   1.5,
                         2.0,   2.5,   5.0,  10.0, 15.0, 20.0, 30.0, 60.0, 120.0, 300.0}},
    [SRV_HIST_PREFILL] = {"inferd:request_prefill_time_seconds",
                          "Time from first scheduled to prompt computed.",
                          18,
                          {0.001, 0.005, 0.01, 0.05, 0.1, 0.3, 0.5, 0.8, 1.0, 1.5, 2.0, 2.5, 5.0, 10.0, 20.0,
                           30.0, 60.0, 120.0}},
    [SRV_HIST_DECODE] = {"inferd:request_decode_time_seconds",
                         "Time from first to last output token.",
                         18,
                         {0.01, 0.05, 0.1, 0.3, 0.5, 0.8, 1.0, 1.5, 2.0, 2.5, 5.0, 10.0, 15.0, 20.0, 30.0,
                          60.0, 120.0, 300.0}},
    [SRV_HIST_PROMPT_LEN] = {"inferd:request_prompt_tokens",
                             "Prompt length of finished requests (tokens).",
                             18,
                             {1, 2, 5, 10, 20, 50, 100, 200, 500, 1000, 2000, 5000, 10000, 20000, 50000,
                              100000, 200000, 500000}},
    [SRV_HIST_GEN_LEN] = {"inferd:request_generation_tokens",
                          "Generated tokens of finished requests.",
                          16,
                          {1, 2, 5, 10, 20, 50, 100, 200, 500, 1000, 2000, 5000, 10000, 20000, 50000,
                           100000}},
};

typedef struct {
    uint64_t counts[MAX_BUCKETS + 1]; /* last = above every bound */
    uint64_t total;
    double sum;
} hist;

struct srv_metrics {
    pthread_mutex_t mu;
    hist h[SRV_HIST_COUNT];
    /* responses by status, indexed by the code itself (100..599) */
    uint64_t http[600];
};

srv_metrics *srv_metrics_new(void)
{
    srv_metrics *m = inferd_calloc(1, sizeof *m);
    pthread_mutex_init(&m->mu, NULL);
    return m;
}

void srv_metrics_free(srv_metrics *m)
{
    if (!m)
        return;
    pthread_mutex_destroy(&m->mu);
    inferd_free(m);
}

/* count observations of value v (ITL records several equal gaps at once).
 * The bucket is found before the lock (bounds are constant). NaN is
 * dropped (v == v is false only for NaN): it would poison the sum. */
void srv_metrics_observe(srv_metrics *m, srv_hist_id id, double v, int count)
{
    if ((int)id < 0 || id >= SRV_HIST_COUNT || count <= 0 || !(v == v))
        return;
    const hist_def *d = &k_hist[id];
    int b = 0;
    while (b < d->n_bounds && v > d->bounds[b])
        b++;
    pthread_mutex_lock(&m->mu);
    m->h[id].counts[b] += (uint64_t)count;
    m->h[id].total += (uint64_t)count;
    m->h[id].sum += v * count;
    pthread_mutex_unlock(&m->mu);
}

/* One response with this status; values outside 100..599 are ignored
 * rather than indexing past the table. */
void srv_metrics_http(srv_metrics *m, int status)
{
    if (status < 100 || status >= 600)
        return;
    pthread_mutex_lock(&m->mu);
    m->http[status]++;
    pthread_mutex_unlock(&m->mu);
}

/* The HELP and TYPE lines that open each metric family (text format 0.0.4). */
static void family(inferd_buf *b, const char *name, const char *type, const char *help)
{
    inferd_buf_printf(b, "# HELP %s %s\n# TYPE %s %s\n", name, help, name, type);
}

static void gauge(inferd_buf *b, const char *name, const char *help, double v)
{
    family(b, name, "gauge", help);
    inferd_buf_printf(b, "%s %.12g\n", name, v);
}

static void counter(inferd_buf *b, const char *name, const char *help, uint64_t v)
{
    family(b, name, "counter", help);
    inferd_buf_printf(b, "%s %llu\n", name, (unsigned long long)v);
}

/* Bucket bound as Prometheus expects it in le="...".
 * "1.0", not "1": Prometheus compares le labels as strings across scrapes,
 * and clients (and vLLM) print bounds as floats. */
static void bound_str(double v, char *out, size_t n)
{
    snprintf(out, n, "%.12g", v);
    if (!strchr(out, '.') && !strchr(out, 'e'))
        strncat(out, ".0", n - strlen(out) - 1);
}

static void render_hist(inferd_buf *b, const hist_def *d, const hist *h)
{
    family(b, d->name, "histogram", d->help);
    uint64_t cum = 0;
    char le[64];
    for (int i = 0; i < d->n_bounds; i++) {
        cum += h->counts[i];
        bound_str(d->bounds[i], le, sizeof le);
        inferd_buf_printf(b, "%s_bucket{le=\"%s\"} %llu\n", d->name, le, (unsigned long long)cum);
    }
    cum += h->counts[d->n_bounds];
    inferd_buf_printf(b, "%s_bucket{le=\"+Inf\"} %llu\n", d->name, (unsigned long long)cum);
    inferd_buf_printf(b, "%s_sum %.12g\n", d->name, h->sum);
    inferd_buf_printf(b, "%s_count %llu\n", d->name, (unsigned long long)h->total);
}

/* st NULL (no engine yet: the model is loading) renders zeros, so scrapers
 * see every series from the first scrape. request_success_total keeps
 * vLLM's name though it counts every finish reason, aborts included. */
static void render_engine(inferd_buf *b, const engine_stats *st)
{
    engine_stats zero;
    memset(&zero, 0, sizeof zero);
    if (!st)
        st = &zero;
    gauge(b, "inferd:num_requests_running", "Requests in the running batch.", st->running);
    gauge(b, "inferd:num_requests_waiting", "Requests waiting to be scheduled.", st->waiting);
    gauge(b, "inferd:kv_cache_usage_perc", "Fraction of KV cache blocks in use (0..1).", st->kv_usage);
    gauge(b, "inferd:kv_cache_blocks_total", "KV cache blocks (excluding the null block).",
          st->kv_blocks_total);
    gauge(b, "inferd:kv_cache_blocks_used", "KV cache blocks in use.", st->kv_blocks_used);
    counter(b, "inferd:prompt_tokens_total", "Prompt tokens processed.", st->prompt_tokens);
    counter(b, "inferd:generation_tokens_total", "Tokens generated.", st->generation_tokens);
    counter(b, "inferd:num_preemptions_total", "Requests preempted (recomputed later).", st->preemptions);
    counter(b, "inferd:prefix_cache_queries_total", "Prompt tokens looked up in the prefix cache.",
            st->prefix_queries);
    counter(b, "inferd:prefix_cache_hits_total", "Prompt tokens served from the prefix cache.",
            st->prefix_hits);
    counter(b, "inferd:engine_steps_total", "Engine steps run.", st->steps);
    /* n > 1 shares a prompt's blocks: allocated vs shared shows the saving */
    counter(b, "inferd:kv_cache_blocks_allocated_total",
            "KV cache blocks handed out fresh (KV computed into them).", st->kv_blocks_allocated);
    counter(b, "inferd:kv_cache_blocks_shared_total",
            "KV cache block references added by sequences forked from a prompt (KV reused).",
            st->kv_blocks_shared);
    family(b, "inferd:request_success_total", "counter", "Finished requests by finish reason.");
    static const finish_reason k_reasons[] = {FINISH_STOP, FINISH_LENGTH, FINISH_ABORT, FINISH_ERROR};
    for (size_t i = 0; i < INFERD_ARRAY_LEN(k_reasons); i++)
        inferd_buf_printf(b, "inferd:request_success_total{finished_reason=\"%s\"} %llu\n",
                       finish_reason_str(k_reasons[i]), (unsigned long long)st->finished[k_reasons[i]]);
}

/* The /metrics body (heap) and its length. The server's counters are
 * copied under the lock and formatted after it, so a slow render never
 * blocks the request path. */
char *srv_metrics_render(srv_metrics *m, const engine_stats *st, size_t *len)
{
    inferd_buf b = {0};
    render_engine(&b, st);
    hist snap[SRV_HIST_COUNT];
    uint64_t http[600];
    pthread_mutex_lock(&m->mu);
    memcpy(snap, m->h, sizeof snap);
    memcpy(http, m->http, sizeof http);
    pthread_mutex_unlock(&m->mu);
    family(&b, "inferd:http_requests_total", "counter", "HTTP responses by status code.");
    for (int s = 100; s < 600; s++)
        if (http[s])
            inferd_buf_printf(&b, "inferd:http_requests_total{code=\"%d\"} %llu\n", s,
                           (unsigned long long)http[s]);
    for (int i = 0; i < SRV_HIST_COUNT; i++)
        render_hist(&b, &k_hist[i], &snap[i]);
    if (len)
        *len = b.len;
    return inferd_buf_steal(&b, NULL);
}
