/* bench/bench_stats.h: metrics of a `inferd bench serve` run: percentiles,
 * the summary vLLM's `bench serve` reports (same definitions and JSON key
 * names), the printed table and the result JSON.
 *
 * Definitions (over completed requests):
 *   TTFT  first content chunk - launch.
 *   TPOT  (E2E - TTFT) / (output_tokens - 1), for requests with > 1 token.
 *   ITL   gaps between consecutive content chunks, all requests pooled.
 *   E2EL  end of response ([DONE]) - launch.
 *   peak output tok/s: output tokens per 1 s bucket of the run clock (each
 *         chunk carries output_tokens / n_chunks of its request), max bucket.
 *   goodput: completed requests that met every SLO given (TTFT, TPOT with
 *         0 for one-token outputs, E2EL; value <= SLO in ms) per second of
 *         the run, as vLLM's --goodput.
 * Percentiles interpolate linearly between order statistics (numpy's
 * default); std is the population standard deviation. Empty sets give 0.
 * Which metrics and percentiles are printed and saved is a bench_report_cfg
 * (vLLM's --percentile-metrics / --metric-percentiles); the fixed
 * median/p90/p95/p99 fields are always computed.
 */
#ifndef INFERD_BENCH_BENCH_STATS_H
#define INFERD_BENCH_BENCH_STATS_H

#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>

#include "bench/bench_client.h"

/* p-th percentile (0..100) of ascending `sorted[n]`; 0 when n == 0. */
double bench_percentile(const double *sorted, int n, double p);

/* The latency metrics, in table order; names "ttft", "tpot", "itl", "e2el". */
typedef enum { BENCH_METRIC_TTFT = 0, BENCH_METRIC_TPOT, BENCH_METRIC_ITL, BENCH_METRIC_E2EL, BENCH_METRIC_COUNT } bench_metric;

const char *bench_metric_name(bench_metric m);

#define BENCH_MAX_PCTS 16 /* percentiles per metric (--metric-percentiles) */

/* What the report shows and what counts as a good request. */
typedef struct {
    unsigned metrics;                        /* bit 1u << bench_metric: printed and saved */
    int n_pcts;
    double pcts[BENCH_MAX_PCTS];             /* [0, 100], distinct, printed as P<p> */
    double goodput_slo_ms[BENCH_METRIC_COUNT]; /* < 0: no SLO (ITL never has one) */
} bench_report_cfg;

/* Every metric, P90/P95/P99, no goodput SLO (inferd's table; vLLM's
 * default is ttft,tpot,itl and P99). */
void bench_report_cfg_default(bench_report_cfg *c);
/* Whether any goodput SLO is set. */
bool bench_report_cfg_has_goodput(const bench_report_cfg *c);

/* The three flag values as text, into c (whose other fields are kept).
 * false with inferd_last_error() naming the bad item:
 *   metrics:     "ttft,tpot,itl,e2el", any non-empty subset, comma separated;
 *   percentiles: "50,90,99.9", 1..BENCH_MAX_PCTS distinct numbers in [0, 100];
 *   goodput:     "ttft:200 tpot:50" (or one pair per call: SLOs accumulate,
 *                a repeated key keeps the last value), keys ttft|tpot|e2el,
 *                values in ms, finite, in [0, 1e9]. */
bool bench_parse_percentile_metrics(const char *text, bench_report_cfg *c);
bool bench_parse_metric_percentiles(const char *text, bench_report_cfg *c);
bool bench_parse_goodput(const char *text, bench_report_cfg *c);

typedef struct {
    int n;
    double mean, std, median, p90, p95, p99; /* milliseconds */
    double pct[BENCH_MAX_PCTS];              /* at bench_report_cfg.pcts (bench_summarize) */
} bench_dist;

/* Distribution of vals[n] (milliseconds); vals is sorted in place. pct[]
 * is left 0 (bench_summarize fills it for its cfg). */
void bench_dist_compute(double *vals, int n, bench_dist *d);

typedef struct {
    int num_prompts;
    int completed, failed, cancelled;
    int errors[BENCH_ERR_COUNT];
    int64_t total_input_tokens, total_output_tokens;
    double duration_s;
    double request_throughput, output_throughput, total_token_throughput;
    double max_output_tokens_per_s;
    int max_concurrent_requests;
    int input_len_mismatches; /* server usage != the exact length we sent */
    bench_dist ttft, tpot, itl, e2el;
    int good_completed;       /* completed within every goodput SLO */
    double request_goodput;   /* good_completed / duration (0 without SLOs) */
    bench_report_cfg cfg;     /* what the table and the JSON show */
} bench_summary;

/* Summarize results[n]. sent_len[i]: the prompt length request i was built
 * with (used when the server reports no usage); sent_exact[i]: that length is
 * exactly what the server must count (token-id prompts), so a different
 * usage.prompt_tokens is a mismatch. Either array may be NULL; cfg NULL
 * means bench_report_cfg_default. */
void bench_summarize(const bench_result *results, int n, const int *sent_len, const bool *sent_exact,
                     double duration_s, const bench_report_cfg *cfg, bench_summary *s);

/* Run description printed and saved beside the numbers. */
typedef struct {
    const char *backend;      /* "openai" or "openai-chat" */
    const char *base_url, *endpoint, *model_id, *tokenizer_id, *dataset_name;
    double request_rate;      /* inf: all at once */
    double burstiness;
    int max_concurrency;      /* <= 0: none */
    bool interrupted;
} bench_meta;

/* The `vllm bench serve` style table: the metrics and percentiles of
 * s->cfg, and "Request goodput (req/s):" when it has SLOs. */
void bench_print_table(FILE *f, const bench_summary *s, const bench_meta *m);

/* Result JSON (vLLM key names + per-request arrays); heap string (inferd_free).
 * Per metric of s->cfg: mean_/median_/std_<m>_ms and p<p>_<m>_ms per
 * percentile; request_goodput (null without SLOs); per request "latencies"
 * (vLLM's name) and "e2els", both E2E seconds. */
char *bench_result_json(const bench_summary *s, const bench_meta *m, const bench_result *results,
                        int n, const int *sent_len);

/* Write bench_result_json() to `path`. */
inferd_status bench_save_json(const char *path, const bench_summary *s, const bench_meta *m,
                              const bench_result *results, int n, const int *sent_len);

#endif
