/* bench/bench_stats.c: percentiles, the run summary, the printed table and
 * the result JSON of `inferd bench serve` (definitions in bench_stats.h).
 *
 * The table mirrors `vllm bench serve` line for line where the metric exists
 * there (labels padded to 40 columns, section rules 50 wide) and adds P90/P95
 * rows, E2E latency and the failure classes; the JSON uses vLLM's key names so
 * existing plotting scripts read it unchanged.
 *
 * Only completed requests enter the latency and token metrics; failed and
 * cancelled ones are counted by class. Statistics are computed once, after
 * the run, from the raw per-request records (no streaming estimators), so
 * percentiles are exact at the cost of O(total chunks) memory, which the
 * records hold anyway. Pure functions: no I/O except the printers.
 */
#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <cjson/cJSON.h>

#include "common/alloc.h"
#include "common/util.h"
#include "bench/bench_stats.h"

/* (x > y) - (x < y) rather than x - y: no overflow, no truncation to int. */
static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

/* numpy's default ("linear"): rank p/100 * (n - 1), interpolated between
 * its two neighbours, so results match vLLM's numpy-computed numbers. */
double bench_percentile(const double *sorted, int n, double p)
{
    if (n <= 0)
        return 0.0;
    if (p <= 0)
        return sorted[0];
    if (p >= 100)
        return sorted[n - 1];
    double rank = p / 100.0 * (double)(n - 1);
    int lo = (int)floor(rank);
    int hi = INFERD_MIN(lo + 1, n - 1);
    double frac = rank - (double)lo;
    return sorted[lo] + (sorted[hi] - sorted[lo]) * frac;
}

/* Sorts vals in place (the caller's scratch array). The standard deviation
 * takes a second pass around the mean, numerically safer than the one-pass
 * sum of squares. */
void bench_dist_compute(double *vals, int n, bench_dist *d)
{
    memset(d, 0, sizeof *d);
    d->n = n;
    if (n <= 0)
        return;
    qsort(vals, (size_t)n, sizeof *vals, cmp_double);
    double sum = 0;
    for (int i = 0; i < n; i++)
        sum += vals[i];
    d->mean = sum / n;
    double ss = 0;
    for (int i = 0; i < n; i++)
        ss += (vals[i] - d->mean) * (vals[i] - d->mean);
    d->std = sqrt(ss / n);
    d->median = bench_percentile(vals, n, 50);
    d->p90 = bench_percentile(vals, n, 90);
    d->p95 = bench_percentile(vals, n, 95);
    d->p99 = bench_percentile(vals, n, 99);
}

/* Output tokens per 1 s bucket of the run clock; the largest bucket. */
/* Chunks are placed by absolute time (launch + arrival since launch); a
 * request's output_tokens is spread evenly over its chunks, since usage
 * gives only the total. A non-streamed request puts all its tokens in its
 * end bucket. Two spare buckets absorb rounding at the end of the run;
 * anything later is clamped into the last one. */
static double peak_output_rate(const bench_result *res, int n, double duration_s)
{
    /* 1 s buckets, as vLLM; a shorter run has one partial bucket */
    int nb = (int)ceil(INFERD_MAX(duration_s, 0.0)) + 2;
    double *bucket = inferd_calloc((size_t)nb, sizeof *bucket);
    for (int i = 0; i < n; i++) {
        const bench_result *r = &res[i];
        if (r->err != BENCH_ERR_NONE || r->output_tokens <= 0)
            continue;
        if (r->n_chunks == 0) {
            int b = (int)(r->start_s + r->e2el_s);
            bucket[INFERD_MIN(INFERD_MAX(b, 0), nb - 1)] += r->output_tokens;
            continue;
        }
        /* fractional weights: the bucket totals still sum to the tokens */
        double w = (double)r->output_tokens / r->n_chunks;
        for (int k = 0; k < r->n_chunks; k++) {
            int b = (int)(r->start_s + r->chunk_s[k]);
            bucket[INFERD_MIN(INFERD_MAX(b, 0), nb - 1)] += w;
        }
    }
    double peak = 0;
    for (int b = 0; b < nb; b++)
        peak = INFERD_MAX(peak, bucket[b]);
    inferd_free(bucket);
    return peak;
}

typedef struct {
    double t;
    int delta;
} conc_event;

/* NOTE: at equal times an end sorts before a start, so a request launched
 * the instant another finished does not count as overlapping it (that is
 * how max_concurrency slots are reused). */
static int cmp_event(const void *a, const void *b)
{
    const conc_event *x = a, *y = b;
    if (x->t != y->t)
        return x->t < y->t ? -1 : 1;
    return x->delta - y->delta; /* ends (-1) before starts (+1) */
}

/* Most requests in flight at once, from launch/end intervals. */
/* A sweep over +1/-1 events: O(n log n). Requests never launched
 * (start_s < 0) are left out; aborted ones count until their abort. */
static int peak_concurrency(const bench_result *res, int n)
{
    conc_event *ev = inferd_malloc((size_t)INFERD_MAX(2 * n, 1) * sizeof *ev);
    int m = 0;
    for (int i = 0; i < n; i++) {
        if (res[i].start_s < 0)
            continue;
        ev[m++] = (conc_event){res[i].start_s, +1};
        ev[m++] = (conc_event){res[i].start_s + res[i].e2el_s, -1};
    }
    qsort(ev, (size_t)m, sizeof *ev, cmp_event);
    int cur = 0, peak = 0;
    for (int i = 0; i < m; i++) {
        cur += ev[i].delta;
        peak = INFERD_MAX(peak, cur);
    }
    inferd_free(ev);
    return peak;
}

/* bench_dist_compute, then the cfg's percentiles of the sorted values. */
static void dist_cfg(double *vals, int n, const bench_report_cfg *c, bench_dist *d)
{
    bench_dist_compute(vals, n, d);
    for (int k = 0; k < c->n_pcts; k++)
        d->pct[k] = bench_percentile(vals, n, c->pcts[k]);
}

/* vLLM's goodput test of one completed request: every SLO given holds
 * (metric <= SLO, in ms); a one-token request's TPOT counts as 0. */
static bool within_slos(const bench_report_cfg *c, double ttft_ms, double tpot_ms, double e2el_ms)
{
    const double *slo = c->goodput_slo_ms;
    return !(slo[BENCH_METRIC_TTFT] >= 0 && ttft_ms > slo[BENCH_METRIC_TTFT]) &&
           !(slo[BENCH_METRIC_TPOT] >= 0 && tpot_ms > slo[BENCH_METRIC_TPOT]) &&
           !(slo[BENCH_METRIC_E2EL] >= 0 && e2el_ms > slo[BENCH_METRIC_E2EL]);
}

/* Input tokens prefer the server's usage (the truth for text prompts) and
 * fall back to the length we built the prompt with. TPOT is per request
 * and needs two tokens; ITL pools every gap of every request, so long
 * requests weigh more, as in vLLM. Throughputs divide by the run duration
 * (run start to last completion), 0 when it is 0. */
void bench_summarize(const bench_result *results, int n, const int *sent_len, const bool *sent_exact,
                     double duration_s, const bench_report_cfg *cfg, bench_summary *s)
{
    memset(s, 0, sizeof *s);
    if (cfg)
        s->cfg = *cfg;
    else
        bench_report_cfg_default(&s->cfg);
    bool goodput = bench_report_cfg_has_goodput(&s->cfg);
    s->num_prompts = n;
    s->duration_s = duration_s;
    size_t n_itl = 0;
    for (int i = 0; i < n; i++)
        if (results[i].err == BENCH_ERR_NONE && results[i].n_chunks > 1)
            n_itl += (size_t)results[i].n_chunks - 1;
    double *ttft = inferd_malloc((size_t)INFERD_MAX(n, 1) * sizeof *ttft);
    double *tpot = inferd_malloc((size_t)INFERD_MAX(n, 1) * sizeof *tpot);
    double *e2el = inferd_malloc((size_t)INFERD_MAX(n, 1) * sizeof *e2el);
    /* scratch arrays sized up front (first pass counted the ITL gaps), so
     * the main pass never grows anything; MAX(.., 1) avoids malloc(0) */
    double *itl = inferd_malloc(INFERD_MAX(n_itl, 1) * sizeof *itl);
    int n_tpot = 0;
    size_t k_itl = 0;
    for (int i = 0; i < n; i++) {
        const bench_result *r = &results[i];
        /* errors[] counts every class, NONE and CANCELLED included */
        s->errors[r->err]++;
        if (r->err == BENCH_ERR_CANCELLED) {
            s->cancelled++;
            continue;
        }
        if (r->err != BENCH_ERR_NONE) {
            s->failed++;
            continue;
        }
        int sent = sent_len ? sent_len[i] : 0;
        s->total_input_tokens += r->prompt_tokens >= 0 ? r->prompt_tokens : INFERD_MAX(sent, 0);
            /* token-id prompts: the server must count exactly what we sent;
             * a difference means it added tokens (BOS) or truncated */
        if (sent_exact && sent_exact[i] && r->prompt_tokens >= 0 && r->prompt_tokens != sent)
            s->input_len_mismatches++;
        s->total_output_tokens += r->output_tokens;
        ttft[s->completed] = r->ttft_s * 1e3;
        e2el[s->completed] = r->e2el_s * 1e3;
        s->completed++;
            /* TPOT excludes the first token: E2E - TTFT over the rest */
        double tpot_ms = 0;
        if (r->output_tokens > 1) {
            tpot_ms = (r->e2el_s - r->ttft_s) / (r->output_tokens - 1) * 1e3;
            tpot[n_tpot++] = tpot_ms;
        }
        if (goodput && within_slos(&s->cfg, r->ttft_s * 1e3, tpot_ms, r->e2el_s * 1e3))
            s->good_completed++;
        for (int k = 1; k < r->n_chunks; k++)
            itl[k_itl++] = (r->chunk_s[k] - r->chunk_s[k - 1]) * 1e3;
    }
    dist_cfg(ttft, s->completed, &s->cfg, &s->ttft);
    dist_cfg(tpot, n_tpot, &s->cfg, &s->tpot);
    dist_cfg(e2el, s->completed, &s->cfg, &s->e2el);
    dist_cfg(itl, (int)k_itl, &s->cfg, &s->itl);
    inferd_free(ttft);
    inferd_free(tpot);
    inferd_free(e2el);
    inferd_free(itl);
    if (duration_s > 0) {
        s->request_throughput = s->completed / duration_s;
        s->output_throughput = (double)s->total_output_tokens / duration_s;
        s->total_token_throughput = (double)(s->total_input_tokens + s->total_output_tokens) / duration_s;
        s->request_goodput = s->good_completed / duration_s;
    }
    s->max_output_tokens_per_s = peak_output_rate(results, n, duration_s);
    s->max_concurrent_requests = peak_concurrency(results, n);
}

/* ---- table --------------------------------------------------------------- */

/* A title centered in a 50-column rule, vLLM's table style. */
static void rule(FILE *f, const char *title, char c)
{
    enum { WIDTH = 50 };
    int len = (int)strlen(title);
    int pad = INFERD_MAX(WIDTH - len, 0);
    int left = pad / 2;
    for (int i = 0; i < left; i++)
        fputc(c, f);
    fputs(title, f);
    for (int i = 0; i < pad - left; i++)
        fputc(c, f);
    fputc('\n', f);
}

/* Label padded to 40 columns, as vLLM prints it. */
static void row_i(FILE *f, const char *label, long long v)
{
    fprintf(f, "%-40s %-10lld\n", label, v);
}

static void row_f(FILE *f, const char *label, double v)
{
    fprintf(f, "%-40s %-10.2f\n", label, v);
}

/* vLLM's spelling of a percentile in labels and keys: 99 -> "99",
 * 99.9 -> "99.9" (Python's str of the float, integral values as ints). */
static void pct_word(double p, char *buf, size_t len)
{
    if (p == floor(p))
        snprintf(buf, len, "%d", (int)p);
    else
        snprintf(buf, len, "%g", p);
}

/* Mean, Median, then one row per percentile of the cfg; nothing when the
 * metric is not selected. */
static void dist_rows(FILE *f, const bench_report_cfg *c, bench_metric metric, const char *title, const char *abbr,
                      const bench_dist *d)
{
    if (!(c->metrics & (1u << metric)))
        return;
    char label[64], word[32];
    rule(f, title, '-');
    snprintf(label, sizeof label, "Mean %s (ms):", abbr);
    row_f(f, label, d->mean);
    snprintf(label, sizeof label, "Median %s (ms):", abbr);
    row_f(f, label, d->median);
    for (int k = 0; k < c->n_pcts; k++) {
        pct_word(c->pcts[k], word, sizeof word);
        snprintf(label, sizeof label, "P%s %s (ms):", word, abbr);
        row_f(f, label, d->pct[k]);
    }
}

/* Failure classes are printed only when non-zero, and the interrupted line
 * only for an interrupted run, so a clean run's table matches vLLM's. */
void bench_print_table(FILE *f, const bench_summary *s, const bench_meta *m)
{
    static const char *const k_err_labels[BENCH_ERR_COUNT] = {
        "", "  connect errors:", "  timeouts:", "  HTTP 4xx:", "  HTTP 5xx:", "  bad responses:", "",
    };
    rule(f, " Serving Benchmark Result ", '=');
    row_i(f, "Successful requests:", s->completed);
    row_i(f, "Failed requests:", s->failed);
    /* failure classes only; cancellations have their own line below */
    for (int e = BENCH_ERR_CONNECT; e < BENCH_ERR_CANCELLED; e++)
        if (s->errors[e] > 0)
            row_i(f, k_err_labels[e], s->errors[e]);
    if (s->cancelled > 0 || m->interrupted)
        row_i(f, "Interrupted (not completed):", s->cancelled);
    if (m->max_concurrency > 0)
        row_i(f, "Maximum request concurrency:", m->max_concurrency);
    if (isinf(m->request_rate))
        fprintf(f, "%-40s %-10s\n", "Request rate configured (RPS):", "inf");
    else
        row_f(f, "Request rate configured (RPS):", m->request_rate);
    row_f(f, "Benchmark duration (s):", s->duration_s);
    row_i(f, "Total input tokens:", (long long)s->total_input_tokens);
    row_i(f, "Total generated tokens:", (long long)s->total_output_tokens);
    row_f(f, "Request throughput (req/s):", s->request_throughput);
    if (bench_report_cfg_has_goodput(&s->cfg))
        row_f(f, "Request goodput (req/s):", s->request_goodput);
    row_f(f, "Output token throughput (tok/s):", s->output_throughput);
    row_f(f, "Peak output token throughput (tok/s):", s->max_output_tokens_per_s);
    row_i(f, "Peak concurrent requests:", s->max_concurrent_requests);
    row_f(f, "Total Token throughput (tok/s):", s->total_token_throughput);
    dist_rows(f, &s->cfg, BENCH_METRIC_TTFT, "Time to First Token", "TTFT", &s->ttft);
    dist_rows(f, &s->cfg, BENCH_METRIC_TPOT, "Time per Output Token (excl. 1st token)", "TPOT", &s->tpot);
    dist_rows(f, &s->cfg, BENCH_METRIC_ITL, "Inter-token Latency", "ITL", &s->itl);
    dist_rows(f, &s->cfg, BENCH_METRIC_E2EL, "End-to-end Latency", "E2EL", &s->e2el);
    rule(f, "", '=');
}

/* ---- JSON ---------------------------------------------------------------- */

/* vLLM's keys for a selected metric: mean_ttft_ms, median_ttft_ms,
 * std_ttft_ms, then p<p>_ttft_ms per percentile of the cfg. */
static void add_dist(cJSON *o, const bench_report_cfg *c, bench_metric metric, const bench_dist *d)
{
    if (!(c->metrics & (1u << metric)))
        return;
    const char *name = bench_metric_name(metric);
    static const char *const k_stats[] = {"mean", "median", "std"};
    const double vals[] = {d->mean, d->median, d->std};
    char key[64], word[32];
    for (size_t i = 0; i < INFERD_ARRAY_LEN(vals); i++) {
        snprintf(key, sizeof key, "%s_%s_ms", k_stats[i], name);
        cJSON_AddNumberToObject(o, key, vals[i]);
    }
    for (int k = 0; k < c->n_pcts; k++) {
        pct_word(c->pcts[k], word, sizeof word);
        snprintf(key, sizeof key, "p%s_%s_ms", word, name);
        cJSON_AddNumberToObject(o, key, d->pct[k]);
    }
}

/* request_goodput as vLLM (null without SLOs), and the SLOs it was
 * measured against (our addition): {"ttft": 200, "tpot": 50}, or null. */
static void add_goodput(cJSON *o, const bench_summary *s)
{
    if (!bench_report_cfg_has_goodput(&s->cfg)) {
        cJSON_AddNullToObject(o, "request_goodput");
        cJSON_AddNullToObject(o, "goodput_slos_ms");
        return;
    }
    cJSON_AddNumberToObject(o, "request_goodput", s->request_goodput);
    cJSON_AddNumberToObject(o, "good_completed", s->good_completed);
    cJSON *slos = cJSON_AddObjectToObject(o, "goodput_slos_ms");
    for (int m = 0; m < BENCH_METRIC_COUNT; m++)
        if (s->cfg.goodput_slo_ms[m] >= 0)
            cJSON_AddNumberToObject(slos, bench_metric_name((bench_metric)m), s->cfg.goodput_slo_ms[m]);
}

static void add_str_or_null(cJSON *o, const char *key, const char *v)
{
    if (v)
        cJSON_AddStringToObject(o, key, v);
    else
        cJSON_AddNullToObject(o, key);
}

/* request_rate "inf" is a string, as vLLM writes it (JSON has no
 * infinity); the date is local time. */
static void add_meta(cJSON *o, const bench_summary *s, const bench_meta *m)
{
    char date[32];
    time_t now = time(NULL);
    struct tm tmv;
    localtime_r(&now, &tmv);
    strftime(date, sizeof date, "%Y%m%d-%H%M%S", &tmv);
    cJSON_AddStringToObject(o, "date", date);
    add_str_or_null(o, "backend", m->backend);
    add_str_or_null(o, "base_url", m->base_url);
    add_str_or_null(o, "endpoint", m->endpoint);
    add_str_or_null(o, "model_id", m->model_id);
    add_str_or_null(o, "tokenizer_id", m->tokenizer_id);
    add_str_or_null(o, "dataset_name", m->dataset_name);
    cJSON_AddNumberToObject(o, "num_prompts", s->num_prompts);
    if (isinf(m->request_rate))
        cJSON_AddStringToObject(o, "request_rate", "inf");
    else
        cJSON_AddNumberToObject(o, "request_rate", m->request_rate);
    cJSON_AddNumberToObject(o, "burstiness", m->burstiness);
    if (m->max_concurrency > 0)
        cJSON_AddNumberToObject(o, "max_concurrency", m->max_concurrency);
    else
        cJSON_AddNullToObject(o, "max_concurrency");
    cJSON_AddBoolToObject(o, "interrupted", m->interrupted);
}

static void add_summary(cJSON *o, const bench_summary *s)
{
    cJSON_AddNumberToObject(o, "duration", s->duration_s);
    cJSON_AddNumberToObject(o, "completed", s->completed);
    cJSON_AddNumberToObject(o, "failed", s->failed);
    cJSON_AddNumberToObject(o, "cancelled", s->cancelled);
    /* our addition to vLLM's keys: failures by class, names from
     * bench_err_name */
    cJSON *by = cJSON_AddObjectToObject(o, "failed_by_type");
    for (int e = BENCH_ERR_CONNECT; e < BENCH_ERR_CANCELLED; e++)
        cJSON_AddNumberToObject(by, bench_err_name((bench_err)e), s->errors[e]);
    cJSON_AddNumberToObject(o, "total_input_tokens", (double)s->total_input_tokens);
    cJSON_AddNumberToObject(o, "total_output_tokens", (double)s->total_output_tokens);
    cJSON_AddNumberToObject(o, "input_len_mismatches", s->input_len_mismatches);
    cJSON_AddNumberToObject(o, "request_throughput", s->request_throughput);
    add_goodput(o, s);
    cJSON_AddNumberToObject(o, "output_throughput", s->output_throughput);
    cJSON_AddNumberToObject(o, "total_token_throughput", s->total_token_throughput);
    cJSON_AddNumberToObject(o, "max_output_tokens_per_s", s->max_output_tokens_per_s);
    cJSON_AddNumberToObject(o, "max_concurrent_requests", s->max_concurrent_requests);
    add_dist(o, &s->cfg, BENCH_METRIC_TTFT, &s->ttft);
    add_dist(o, &s->cfg, BENCH_METRIC_TPOT, &s->tpot);
    add_dist(o, &s->cfg, BENCH_METRIC_ITL, &s->itl);
    add_dist(o, &s->cfg, BENCH_METRIC_E2EL, &s->e2el);
}

/* Parallel arrays, one entry per request in index order, in seconds (the
 * summary is in ms, as in vLLM's files). Failed requests get zeros for the
 * latency fields and their error text, so every array has n entries. */
static void add_per_request(cJSON *o, const bench_result *res, int n, const int *sent_len)
{
    cJSON *in = cJSON_AddArrayToObject(o, "input_lens");
    cJSON *out = cJSON_AddArrayToObject(o, "output_lens");
    cJSON *ttfts = cJSON_AddArrayToObject(o, "ttfts");
    cJSON *e2els = cJSON_AddArrayToObject(o, "e2els");
    cJSON *lats = cJSON_AddArrayToObject(o, "latencies"); /* vLLM's name; e2els kept for old readers */
    cJSON *starts = cJSON_AddArrayToObject(o, "start_times");
    cJSON *itls = cJSON_AddArrayToObject(o, "itls");
    cJSON *errors = cJSON_AddArrayToObject(o, "errors");
    cJSON *types = cJSON_AddArrayToObject(o, "error_types");
    cJSON *codes = cJSON_AddArrayToObject(o, "http_status");
    for (int i = 0; i < n; i++) {
        const bench_result *r = &res[i];
        bool ok = r->err == BENCH_ERR_NONE;
        int sent = sent_len ? sent_len[i] : 0;
        cJSON_AddItemToArray(in, cJSON_CreateNumber(r->prompt_tokens >= 0 ? r->prompt_tokens : sent));
        cJSON_AddItemToArray(out, cJSON_CreateNumber(ok ? r->output_tokens : 0));
        cJSON_AddItemToArray(ttfts, cJSON_CreateNumber(ok ? r->ttft_s : 0.0));
        cJSON_AddItemToArray(e2els, cJSON_CreateNumber(r->start_s >= 0 ? r->e2el_s : 0.0));
        cJSON_AddItemToArray(lats, cJSON_CreateNumber(r->start_s >= 0 ? r->e2el_s : 0.0));
        cJSON_AddItemToArray(starts, cJSON_CreateNumber(r->start_s));
        cJSON *gaps = cJSON_CreateArray();
        for (int k = 1; ok && k < r->n_chunks; k++)
            cJSON_AddItemToArray(gaps, cJSON_CreateNumber(r->chunk_s[k] - r->chunk_s[k - 1]));
        cJSON_AddItemToArray(itls, gaps);
        cJSON_AddItemToArray(errors, cJSON_CreateString(r->error ? r->error : ""));
        cJSON_AddItemToArray(types, cJSON_CreateString(bench_err_name(r->err)));
        cJSON_AddItemToArray(codes, cJSON_CreateNumber((double)r->http_status));
    }
}

/* Copied out of cJSON's allocator so the caller frees with inferd_free. */
char *bench_result_json(const bench_summary *s, const bench_meta *m, const bench_result *results,
                        int n, const int *sent_len)
{
    cJSON *o = cJSON_CreateObject();
    add_meta(o, s, m);
    add_summary(o, s);
    add_per_request(o, results, n, sent_len);
    char *txt = cJSON_PrintUnformatted(o);
    cJSON_Delete(o);
    char *copy = inferd_strdup(txt);
    cJSON_free(txt);
    return copy;
}

/* fclose's result is checked: a full disk often shows only at close. */
inferd_status bench_save_json(const char *path, const bench_summary *s, const bench_meta *m,
                              const bench_result *results, int n, const int *sent_len)
{
    char *txt = bench_result_json(s, m, results, n, sent_len);
    const bool ok = util_write_text_file(path, txt);
    inferd_free(txt);
    return ok ? INFERD_OK : inferd_set_error(INFERD_ERR_IO, "%s: cannot write (%s)", path, strerror(errno));
}
