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
 * Percentiles interpolate linearly between order statistics (numpy's
 * default); std is the population standard deviation. Empty sets give 0.
 */
#ifndef INFERD_BENCH_BENCH_STATS_H
#define INFERD_BENCH_BENCH_STATS_H

#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>

#include "bench/bench_client.h"

/* p-th percentile (0..100) of ascending `sorted[n]`; 0 when n == 0. */
double bench_percentile(const double *sorted, int n, double p);

typedef struct {
    int n;
    double mean, std, median, p90, p95, p99; /* milliseconds */
} bench_dist;

/* Distribution of vals[n] (milliseconds); vals is sorted in place. */
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
} bench_summary;

/* Summarize results[n]. sent_len[i]: the prompt length request i was built
 * with (used when the server reports no usage); sent_exact[i]: that length is
 * exactly what the server must count (token-id prompts), so a different
 * usage.prompt_tokens is a mismatch. Either array may be NULL. */
void bench_summarize(const bench_result *results, int n, const int *sent_len, const bool *sent_exact,
                     double duration_s, bench_summary *s);

/* Run description printed and saved beside the numbers. */
typedef struct {
    const char *backend;      /* "openai" or "openai-chat" */
    const char *base_url, *endpoint, *model_id, *tokenizer_id, *dataset_name;
    double request_rate;      /* inf: all at once */
    double burstiness;
    int max_concurrency;      /* <= 0: none */
    bool interrupted;
} bench_meta;

/* The `vllm bench serve` style table. */
void bench_print_table(FILE *f, const bench_summary *s, const bench_meta *m);

/* Result JSON (vLLM key names + per-request arrays); heap string (inferd_free). */
char *bench_result_json(const bench_summary *s, const bench_meta *m, const bench_result *results,
                        int n, const int *sent_len);

/* Write bench_result_json() to `path`. */
inferd_status bench_save_json(const char *path, const bench_summary *s, const bench_meta *m,
                              const bench_result *results, int n, const int *sent_len);

#endif
