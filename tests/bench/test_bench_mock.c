/* tests/bench/test_bench_mock.c: `inferd bench serve` (bench_serve_run)
 * against the mock OpenAI server with known injected delays: exact request
 * and token accounting, TTFT/TPOT/ITL within 10% of the injected values,
 * ordered percentiles, concurrency limits, arrival times, failure classes
 * (unreachable port, HTTP 5xx/4xx, truncated or malformed streams, timeouts),
 * Ctrl-C partial results, the result JSON (--result-dir created, an
 * unwritable result an exit 1), vLLM's general --input-len/--output-len on
 * the random dataset, goodput and the selected percentiles against known
 * delays, and a few hundred concurrent streams. Everything runs on
 * 127.0.0.1 and takes a few seconds. */
#include <curl/curl.h>
#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <cjson/cJSON.h>

#include "common/alloc.h"
#include "common/util.h"
#include "mock_openai.h"
#include "bench/bench_serve.h"
#include "test_util.h"

static char g_url[64];

static mock_server *start_mock(mock_cfg cfg)
{
    mock_server *m = mock_start(&cfg);
    ck_assert_msg(m != NULL, "mock server did not start");
    snprintf(g_url, sizeof g_url, "http://127.0.0.1:%d", mock_port(m));
    return m;
}

static bench_serve_opts base_opts(int n, int conc, int in_len, int out_len)
{
    bench_serve_opts o;
    bench_serve_opts_default(&o);
    o.base_url = g_url;
    o.num_prompts = n;
    o.max_concurrency = conc;
    o.random_input_len = in_len;
    o.random_output_len = out_len;
    o.quiet = true;
    o.timeout_s = 20;
    return o;
}

static void assert_ordered(const char *name, const bench_dist *d)
{
    ck_assert_msg(d->median <= d->p90 && d->p90 <= d->p95 && d->p95 <= d->p99,
                  "%s percentiles out of order: %g %g %g %g", name, d->median, d->p90, d->p95, d->p99);
}

/* got within -rel of the mock's programmed delay, and at most 50% above it.
 * NOTE: asymmetric on purpose: a delay can only be measured too short by a
 * bug in the load generator, while a loaded CI machine (ctest -j next to
 * the sanitizer build) delays the mock's threads by tens of ms. */
static void assert_near(const char *name, double got, double want, double rel)
{
    ck_assert_msg(got >= want * (1 - rel) && got <= want * 1.5, "%s = %.2f ms, want %.2f ms -%.0f%%/+50%%", name,
                  got, want, rel * 100);
}

static void print_summary(const char *tag, const bench_summary *s)
{
    printf("%s: completed %d failed %d in %.3f s; out %lld tok; TTFT mean %.2f p99 %.2f ms; "
           "TPOT mean %.2f ms; ITL mean %.2f p99 %.2f ms; E2EL mean %.2f ms; peak conc %d\n",
           tag, s->completed, s->failed, s->duration_s, (long long)s->total_output_tokens, s->ttft.mean,
           s->ttft.p99, s->tpot.mean, s->itl.mean, s->itl.p99, s->e2el.mean, s->max_concurrent_requests);
}

/* The acceptance run: 16 requests at concurrency 8; first token after
 * 200 ms, then 10 tokens... 50 ms apart, with a usage chunk. */
START_TEST(test_stream_completions)
{
    mock_server *m = start_mock((mock_cfg){.first_delay_ms = 200, .token_delay_ms = 50});
    bench_serve_opts o = base_opts(16, 8, 32, 10);
    o.ignore_eos = true;
    bench_serve_report rep;
    int rc = bench_serve_run(&o, NULL, &rep);
    const bench_summary *s = &rep.summary;
    print_summary("completions 16@8", s);
    ck_assert_int_eq(rc, 0);
    ck_assert_int_eq(s->completed, 16);
    ck_assert_int_eq(s->failed, 0);
    ck_assert_int_eq(mock_requests(m), 16);
    ck_assert_int_eq(mock_bad_requests(m), 0);
    ck_assert_int_eq(mock_ignore_eos_seen(m), 16);
    ck_assert_int_eq(s->total_output_tokens, mock_usage_completion(m));
    ck_assert_int_eq(s->total_output_tokens, 160);
    ck_assert_int_eq(s->total_input_tokens, 16 * 32); /* ids arrive exactly */
    ck_assert_int_eq(mock_prompt_tokens(m), 16 * 32);
    ck_assert_int_eq(s->input_len_mismatches, 0);
    ck_assert_str_eq(rep.model_id, "mock-model");
    for (int i = 0; i < rep.n; i++) {
        const bench_result *r = &rep.results[i];
        ck_assert(r->err == BENCH_ERR_NONE && r->http_status == 200);
        ck_assert_msg(r->ttft_s <= r->e2el_s, "request %d: ttft %g > e2el %g", i, r->ttft_s, r->e2el_s);
        ck_assert_int_eq(r->n_chunks, 10);
        ck_assert_int_eq(r->output_tokens, 10);
    }
    assert_ordered("ttft", &s->ttft);
    assert_ordered("tpot", &s->tpot);
    assert_ordered("itl", &s->itl);
    assert_ordered("e2el", &s->e2el);
    assert_near("mean TTFT", s->ttft.mean, 200, 0.10);
    assert_near("mean TPOT", s->tpot.mean, 50, 0.10);
    assert_near("mean ITL", s->itl.mean, 50, 0.10);
    assert_near("mean E2EL", s->e2el.mean, 650, 0.10);
    ck_assert_int_le(mock_peak_active(m), 8);
    ck_assert_int_le(s->max_concurrent_requests, 8);
    ck_assert_int_ge(s->max_concurrent_requests, 2);
    ck_assert(s->duration_s > 1.2 && s->duration_s < 3.0); /* two waves of 650 ms */
    ck_assert(s->max_output_tokens_per_s > 0);
    bench_serve_report_free(&rep);
    mock_stop(m);
}
END_TEST

/* Chat: the role chunk comes at once and must not count as the first token. */
START_TEST(test_stream_chat)
{
    mock_server *m = start_mock((mock_cfg){.first_delay_ms = 200, .token_delay_ms = 50, .role_first = true});
    bench_serve_opts o = base_opts(8, 8, 16, 10);
    o.endpoint = "/v1/chat/completions";
    bench_serve_report rep;
    int rc = bench_serve_run(&o, NULL, &rep);
    print_summary("chat 8@8", &rep.summary);
    ck_assert_int_eq(rc, 0);
    ck_assert_int_eq(rep.summary.completed, 8);
    ck_assert_int_eq(mock_bad_requests(m), 0);
    ck_assert_int_eq(rep.summary.total_output_tokens, 80);
    ck_assert_int_eq(rep.summary.total_input_tokens, mock_prompt_tokens(m));
    assert_near("chat mean TTFT", rep.summary.ttft.mean, 200, 0.10);
    assert_near("chat mean TPOT", rep.summary.tpot.mean, 50, 0.10);
    bench_serve_report_free(&rep);
    mock_stop(m);
}
END_TEST

/* Output tokens come from usage when sent, from chunk counts otherwise. */
START_TEST(test_usage_accounting)
{
    static const struct {
        mock_cfg cfg;
        int64_t want_out;
        bool usage;
    } rows[] = {
        {{.first_delay_ms = 5, .token_delay_ms = 1, .usage_extra = 5}, 8 * 15, true},
        {{.first_delay_ms = 5, .token_delay_ms = 1, .no_usage = true}, 8 * 10, false},
        {{.first_delay_ms = 5, .token_delay_ms = 1, .split_writes = true}, 8 * 10, true},
    };
    for (size_t i = 0; i < INFERD_ARRAY_LEN(rows); i++) {
        mock_server *m = start_mock(rows[i].cfg);
        bench_serve_opts o = base_opts(8, 4, 8, 10);
        bench_serve_report rep;
        int rc = bench_serve_run(&o, NULL, &rep);
        ck_assert_msg(rc == 0 && rep.summary.completed == 8, "row %zu: rc %d", i, rc);
        ck_assert_int_eq(rep.summary.total_output_tokens, rows[i].want_out);
        if (rows[i].usage)
            ck_assert_int_eq(rep.summary.total_output_tokens, mock_usage_completion(m));
        for (int k = 0; k < rep.n; k++) {
            ck_assert(rep.results[k].usage_seen == rows[i].usage);
            ck_assert_int_eq(rep.results[k].n_chunks, 10);
        }
        bench_serve_report_free(&rep);
        mock_stop(m);
    }
}
END_TEST

START_TEST(test_unreachable)
{
    int port = mock_free_port();
    ck_assert(port > 0);
    snprintf(g_url, sizeof g_url, "http://127.0.0.1:%d", port);
    bench_serve_opts o = base_opts(12, 4, 8, 4);
    bench_serve_report rep;
    double t0 = util_now_s();
    int rc = bench_serve_run(&o, NULL, &rep);
    double dt = util_now_s() - t0;
    printf("unreachable: rc %d, %d connect errors in %.3f s\n", rc, rep.summary.errors[BENCH_ERR_CONNECT], dt);
    ck_assert_int_eq(rc, 1);
    ck_assert_int_eq(rep.summary.completed, 0);
    ck_assert_int_eq(rep.summary.failed, 12);
    ck_assert_int_eq(rep.summary.errors[BENCH_ERR_CONNECT], 12);
    ck_assert(rep.model_id == NULL);
    for (int i = 0; i < rep.n; i++) {
        ck_assert(rep.results[i].http_status == 0);
        ck_assert(rep.results[i].error && strstr(rep.results[i].error, "connection failed"));
    }
    ck_assert(dt < 5.0);
    bench_serve_report_free(&rep);
}
END_TEST

START_TEST(test_http_errors)
{
    static const struct {
        int status;
        bench_err err;
    } rows[] = {
        {500, BENCH_ERR_HTTP_5XX}, {503, BENCH_ERR_HTTP_5XX}, {429, BENCH_ERR_HTTP_4XX},
        {400, BENCH_ERR_HTTP_4XX}, {401, BENCH_ERR_HTTP_4XX},
    };
    for (size_t i = 0; i < INFERD_ARRAY_LEN(rows); i++) {
        mock_server *m = start_mock((mock_cfg){.status = rows[i].status});
        bench_serve_opts o = base_opts(10, 3, 8, 4);
        bench_serve_report rep;
        int rc = bench_serve_run(&o, NULL, &rep);
        ck_assert_int_eq(rc, 1);
        ck_assert_int_eq(rep.summary.completed, 0);
        ck_assert_int_eq(rep.summary.failed, 10);
        ck_assert_msg(rep.summary.errors[rows[i].err] == 10, "status %d: %d classified as %s", rows[i].status,
                      rep.summary.errors[rows[i].err], bench_err_name(rows[i].err));
        char want[64];
        snprintf(want, sizeof want, "HTTP %d: mock status %d", rows[i].status, rows[i].status);
        ck_assert_msg(strstr(rep.results[0].error, want), "message '%s'", rep.results[0].error);
        ck_assert_int_eq(rep.results[0].http_status, rows[i].status);
        ck_assert_int_eq(mock_requests(m), 10);
        bench_serve_report_free(&rep);
        mock_stop(m);
    }
}
END_TEST

START_TEST(test_bad_streams)
{
    static const mock_cfg rows[] = {
        {.first_delay_ms = 1, .token_delay_ms = 1, .omit_done = true},
        {.first_delay_ms = 1, .token_delay_ms = 1, .malformed = true},
    };
    for (size_t i = 0; i < INFERD_ARRAY_LEN(rows); i++) {
        mock_server *m = start_mock(rows[i]);
        bench_serve_opts o = base_opts(6, 3, 8, 4);
        bench_serve_report rep;
        int rc = bench_serve_run(&o, NULL, &rep);
        ck_assert_int_eq(rc, 1);
        ck_assert_int_eq(rep.summary.errors[BENCH_ERR_BAD_RESPONSE], 6);
        bench_serve_report_free(&rep);
        mock_stop(m);
    }
}
END_TEST

START_TEST(test_timeout)
{
    mock_server *m = start_mock((mock_cfg){.first_delay_ms = 3000, .token_delay_ms = 10});
    bench_serve_opts o = base_opts(4, 4, 8, 4);
    o.timeout_s = 0.3;
    bench_serve_report rep;
    int rc = bench_serve_run(&o, NULL, &rep);
    ck_assert_int_eq(rc, 1);
    ck_assert_int_eq(rep.summary.errors[BENCH_ERR_TIMEOUT], 4);
    ck_assert(rep.summary.duration_s < 1.5);
    bench_serve_report_free(&rep);
    mock_stop(m);
}
END_TEST

static volatile sig_atomic_t g_stop;

static void *stop_later(void *arg)
{
    (void)arg;
    struct timespec ts = {0, 300 * 1000 * 1000};
    nanosleep(&ts, NULL);
    g_stop = 1;
    return NULL;
}

/* Ctrl-C: in-flight requests are aborted, the rest never sent, and the
 * partial report comes back at once. */
START_TEST(test_interrupt)
{
    mock_server *m = start_mock((mock_cfg){.first_delay_ms = 200, .token_delay_ms = 50});
    bench_serve_opts o = base_opts(8, 4, 8, 10);
    bench_serve_report rep;
    g_stop = 0;
    pthread_t th;
    pthread_create(&th, NULL, stop_later, NULL);
    double t0 = util_now_s();
    int rc = bench_serve_run(&o, &g_stop, &rep);
    double dt = util_now_s() - t0;
    pthread_join(th, NULL);
    ck_assert_int_eq(rc, 1);
    ck_assert(rep.interrupted);
    ck_assert_int_eq(rep.summary.cancelled, 8);
    ck_assert_int_eq(rep.summary.completed, 0);
    ck_assert_int_eq(rep.summary.failed, 0);
    int not_sent = 0;
    for (int i = 0; i < rep.n; i++)
        not_sent += rep.results[i].start_s < 0;
    ck_assert_int_eq(not_sent, 4);
    ck_assert_msg(dt < 0.6, "interrupt took %.3f s", dt);
    bench_serve_report_free(&rep);
    mock_stop(m);
}
END_TEST

/* Launch times follow the seeded Poisson schedule; concurrency 1 serializes. */
START_TEST(test_arrival_schedule)
{
    mock_server *m = start_mock((mock_cfg){.first_delay_ms = 1, .token_delay_ms = 1, .n_tokens = 2});
    bench_serve_opts o = base_opts(10, 0, 8, 2);
    o.request_rate = 20;
    o.seed = 5;
    bench_serve_report rep;
    ck_assert_int_eq(bench_serve_run(&o, NULL, &rep), 0);
    double want[10];
    bench_arrivals(10, 20, 1.0, 5, want);
    for (int i = 0; i < 10; i++)
        ck_assert_msg(fabs(rep.results[i].start_s - want[i]) < 0.05, "request %d launched at %.3f, due %.3f", i,
                      rep.results[i].start_s, want[i]);
    ck_assert(rep.summary.duration_s >= want[9]);
    bench_serve_report_free(&rep);
    mock_stop(m);

    m = start_mock((mock_cfg){.first_delay_ms = 30, .token_delay_ms = 5, .n_tokens = 3});
    o = base_opts(4, 1, 8, 3);
    ck_assert_int_eq(bench_serve_run(&o, NULL, &rep), 0);
    ck_assert_int_eq(mock_peak_active(m), 1);
    for (int i = 1; i < 4; i++)
        ck_assert(rep.results[i].start_s >= rep.results[i - 1].start_s + rep.results[i - 1].e2el_s);
    ck_assert_int_eq(rep.summary.max_concurrent_requests, 1);
    bench_serve_report_free(&rep);
    mock_stop(m);
}
END_TEST

START_TEST(test_save_result)
{
    mock_server *m = start_mock((mock_cfg){.first_delay_ms = 20, .token_delay_ms = 5});
    char *dir = test_make_temp_dir("bench-result");
    char path[512];
    snprintf(path, sizeof path, "%s/out.json", dir);
    bench_serve_opts o = base_opts(6, 3, 8, 4);
    o.result_filename = path;
    bench_serve_report rep;
    ck_assert_int_eq(bench_serve_run(&o, NULL, &rep), 0);
    char *txt = NULL;
    ck_assert_int_eq(util_read_file(path, 0, &txt, NULL), INFERD_OK);
    cJSON *root = cJSON_Parse(txt);
    ck_assert(cJSON_IsObject(root));
    static const char *const keys[] = {
        "date", "backend", "model_id", "num_prompts", "request_rate", "burstiness", "max_concurrency",
        "duration", "completed", "failed", "total_input_tokens", "total_output_tokens",
        "request_throughput", "output_throughput", "total_token_throughput", "max_output_tokens_per_s",
        "max_concurrent_requests", "mean_ttft_ms", "median_ttft_ms", "std_ttft_ms", "p90_ttft_ms",
        "p95_ttft_ms", "p99_ttft_ms", "mean_tpot_ms", "median_tpot_ms", "p99_tpot_ms", "mean_itl_ms",
        "median_itl_ms", "p99_itl_ms", "mean_e2el_ms", "median_e2el_ms", "p99_e2el_ms", "failed_by_type",
    };
    for (size_t i = 0; i < INFERD_ARRAY_LEN(keys); i++)
        ck_assert_msg(cJSON_GetObjectItemCaseSensitive(root, keys[i]) != NULL, "missing key %s", keys[i]);
    ck_assert_int_eq(cJSON_GetObjectItem(root, "completed")->valueint, 6);
    ck_assert_int_eq(cJSON_GetObjectItem(root, "total_output_tokens")->valueint, 24);
    ck_assert_str_eq(cJSON_GetObjectItem(root, "request_rate")->valuestring, "inf");
    static const char *const arrays[] = {"input_lens", "output_lens", "ttfts", "itls", "errors", "e2els",
                                         "latencies"};
    for (size_t i = 0; i < INFERD_ARRAY_LEN(arrays); i++)
        ck_assert_int_eq(cJSON_GetArraySize(cJSON_GetObjectItem(root, arrays[i])), 6);
    ck_assert_int_eq(cJSON_GetArraySize(cJSON_GetArrayItem(cJSON_GetObjectItem(root, "itls"), 0)), 3);
    ck_assert_str_eq(cJSON_GetArrayItem(cJSON_GetObjectItem(root, "errors"), 0)->valuestring, "");
    cJSON_Delete(root);
    inferd_free(txt);
    unlink(path);
    rmdir(dir);
    free(dir);
    bench_serve_report_free(&rep);
    mock_stop(m);
}
END_TEST

/* vLLM's general lengths on the random dataset: --output-len was once
 * passed only as sharegpt/jsonl's fixed length, so random requests kept
 * --random-output-len. The mock answers max_tokens tokens, so the totals
 * show what was asked for; --input-len sets the prompts' id count. */
START_TEST(test_general_lengths)
{
    static const struct {
        int input_len, output_len, fixed_output_len;
        int want_in, want_out;
    } rows[] = {
        {0, 0, 0, 8, 10},  /* --random-*-len */
        {0, 3, 0, 8, 3},   /* --output-len wins over --random-output-len */
        {5, 0, 0, 5, 10},  /* --input-len wins over --random-input-len */
        {6, 4, 0, 6, 4},
        {0, 0, 7, 8, 10},  /* --sharegpt-output-len: not for random */
        {0, 2, 7, 8, 2},
    };
    mock_server *m = start_mock((mock_cfg){.first_delay_ms = 5, .token_delay_ms = 1});
    for (size_t i = 0; i < INFERD_ARRAY_LEN(rows); i++) {
        bench_serve_opts o = base_opts(6, 3, 8, 10);
        o.input_len = rows[i].input_len;
        o.output_len = rows[i].output_len;
        o.fixed_output_len = rows[i].fixed_output_len;
        int64_t seen_before = mock_prompt_tokens(m);
        bench_serve_report rep;
        int rc = bench_serve_run(&o, NULL, &rep);
        ck_assert_msg(rc == 0 && rep.summary.completed == 6, "row %zu: rc %d", i, rc);
        ck_assert_msg(rep.summary.total_output_tokens == 6 * rows[i].want_out, "row %zu: %lld output tokens", i,
                      (long long)rep.summary.total_output_tokens);
        ck_assert_int_eq(rep.summary.total_input_tokens, 6 * rows[i].want_in);
        ck_assert_int_eq(mock_prompt_tokens(m) - seen_before, 6 * rows[i].want_in);
        bench_serve_report_free(&rep);
    }
    mock_stop(m);
}
END_TEST

/* --result-dir is created (nested) and holds the default file name, or the
 * --result-filename joined to it; a result that cannot be written is exit 1
 * although every request completed. */
START_TEST(test_result_dir)
{
    mock_server *m = start_mock((mock_cfg){.first_delay_ms = 5, .token_delay_ms = 1});
    char *dir = test_make_temp_dir("bench-rdir");
    char sub[512], file[600], blocker[512];
    snprintf(sub, sizeof sub, "%s/new/nested", dir);
    bench_serve_opts o = base_opts(4, 2, 8, 3);
    o.save_result = true;
    o.result_dir = sub;
    bench_serve_report rep;
    ck_assert_int_eq(bench_serve_run(&o, NULL, &rep), 0);
    ck_assert_msg(rep.result_path && strncmp(rep.result_path, sub, strlen(sub)) == 0, "path %s", rep.result_path);
    ck_assert(strstr(rep.result_path, "openai-infqps-concurrency2-"));
    ck_assert(util_file_exists(rep.result_path));
    unlink(rep.result_path);
    bench_serve_report_free(&rep);

    o.result_filename = "named.json"; /* relative: inside --result-dir, as vLLM joins them */
    ck_assert_int_eq(bench_serve_run(&o, NULL, &rep), 0);
    snprintf(file, sizeof file, "%s/named.json", sub);
    ck_assert_str_eq(rep.result_path, file);
    ck_assert(util_file_exists(file));
    unlink(file);
    bench_serve_report_free(&rep);

    /* a regular file where a directory must be: exit 1, nothing written */
    snprintf(blocker, sizeof blocker, "%s/file", dir);
    FILE *f = fopen(blocker, "w");
    ck_assert(f);
    fclose(f);
    snprintf(sub, sizeof sub, "%s/file/sub", dir);
    o.result_filename = NULL;
    o.result_dir = sub;
    ck_assert_int_eq(bench_serve_run(&o, NULL, &rep), 1);
    ck_assert_int_eq(rep.summary.completed, 4);
    ck_assert(!util_file_exists(rep.result_path));
    bench_serve_report_free(&rep);
    /* an unwritable file name (a directory) without --result-dir */
    o.result_dir = NULL;
    o.result_filename = dir;
    ck_assert_int_eq(bench_serve_run(&o, NULL, &rep), 1);
    bench_serve_report_free(&rep);

    unlink(blocker);
    snprintf(sub, sizeof sub, "%s/new/nested", dir);
    rmdir(sub);
    snprintf(sub, sizeof sub, "%s/new", dir);
    rmdir(sub);
    rmdir(dir);
    free(dir);
    mock_stop(m);
}
END_TEST

/* Goodput and the selected percentiles against the mock's schedule: TTFT
 * ~60 ms and TPOT ~10 ms for every request, so an SLO well above them
 * counts every request good and one well below counts none. */
START_TEST(test_goodput_percentiles)
{
    mock_server *m = start_mock((mock_cfg){.first_delay_ms = 60, .token_delay_ms = 10});
    static const struct {
        const char *slos;
        int good;
    } rows[] = {
        {"ttft:5000 tpot:2000", 6},
        {"ttft:5", 0},
        {"tpot:1", 0},
        {"e2el:10000", 6},
    };
    char *dir = test_make_temp_dir("bench-goodput");
    char path[512];
    snprintf(path, sizeof path, "%s/r.json", dir);
    for (size_t i = 0; i < INFERD_ARRAY_LEN(rows); i++) {
        bench_serve_opts o = base_opts(6, 3, 8, 5);
        ck_assert(bench_parse_goodput(rows[i].slos, &o.report));
        ck_assert(bench_parse_metric_percentiles("50,99.9", &o.report));
        ck_assert(bench_parse_percentile_metrics("ttft,itl", &o.report));
        o.result_filename = path;
        bench_serve_report rep;
        ck_assert_int_eq(bench_serve_run(&o, NULL, &rep), 0);
        ck_assert_msg(rep.summary.good_completed == rows[i].good, "row %zu: %d good", i, rep.summary.good_completed);
        assert_near("P50 TTFT", rep.summary.ttft.pct[0], 60, 0.1);
        assert_near("P50 ITL", rep.summary.itl.pct[0], 10, 0.3);
        char *txt = NULL;
        ck_assert_int_eq(util_read_file(path, 0, &txt, NULL), INFERD_OK);
        cJSON *root = cJSON_Parse(txt);
        ck_assert(root);
        ck_assert(fabs(cJSON_GetObjectItem(root, "request_goodput")->valuedouble -
                       rows[i].good / rep.summary.duration_s) < 1e-6);
        ck_assert(cJSON_GetObjectItem(root, "p99.9_itl_ms") && cJSON_GetObjectItem(root, "p50_ttft_ms"));
        ck_assert(!cJSON_GetObjectItem(root, "p99_ttft_ms") && !cJSON_GetObjectItem(root, "mean_tpot_ms"));
        ck_assert_int_eq(cJSON_GetArraySize(cJSON_GetObjectItem(root, "latencies")), 6);
        cJSON_Delete(root);
        inferd_free(txt);
        bench_serve_report_free(&rep);
    }
    unlink(path);
    rmdir(dir);
    free(dir);
    mock_stop(m);
}
END_TEST

START_TEST(test_disable_stream)
{
    mock_server *m = start_mock((mock_cfg){.first_delay_ms = 50, .token_delay_ms = 10});
    bench_serve_opts o = base_opts(4, 4, 8, 6);
    o.disable_stream = true;
    bench_serve_report rep;
    ck_assert_int_eq(bench_serve_run(&o, NULL, &rep), 0);
    ck_assert_int_eq(mock_bad_requests(m), 0);
    ck_assert_int_eq(rep.summary.total_output_tokens, 24);
    for (int i = 0; i < rep.n; i++)
        ck_assert(rep.results[i].ttft_s == rep.results[i].e2el_s && rep.results[i].e2el_s >= 0.1);
    bench_serve_report_free(&rep);
    mock_stop(m);
}
END_TEST

/* Warm-up requests are sent but not counted; the API key travels as a
 * bearer token (flag, or $OPENAI_API_KEY). */
START_TEST(test_warmups_and_key)
{
    mock_server *m = start_mock((mock_cfg){.first_delay_ms = 5, .token_delay_ms = 1, .api_key = "sekrit"});
    bench_serve_opts o = base_opts(5, 2, 8, 3);
    o.num_warmups = 3;
    o.api_key = "sekrit";
    bench_serve_report rep;
    ck_assert_int_eq(bench_serve_run(&o, NULL, &rep), 0);
    ck_assert_int_eq(rep.summary.completed, 5);
    ck_assert_int_eq(rep.summary.total_output_tokens, 15);
    ck_assert_int_eq(mock_requests(m), 8);
    bench_serve_report_free(&rep);
    o.api_key = NULL;
    o.num_warmups = 0;
    unsetenv("OPENAI_API_KEY");
    ck_assert_int_eq(bench_serve_run(&o, NULL, &rep), 1);
    ck_assert_int_eq(rep.summary.errors[BENCH_ERR_HTTP_4XX], 5);
    ck_assert_int_eq(rep.results[0].http_status, 401);
    bench_serve_report_free(&rep);
    setenv("OPENAI_API_KEY", "sekrit", 1);
    ck_assert_int_eq(bench_serve_run(&o, NULL, &rep), 0);
    unsetenv("OPENAI_API_KEY");
    bench_serve_report_free(&rep);
    mock_stop(m);
}
END_TEST

/* Many concurrent streams from the single client thread. */
START_TEST(test_many_streams)
{
    enum { N = 300 };
    /* each stream is held 1 s before its first token: long enough for the
     * client to open most of them even on a loaded machine */
    mock_server *m = start_mock((mock_cfg){.first_delay_ms = 1000, .token_delay_ms = 20, .n_tokens = 5});
    bench_serve_opts o = base_opts(N, 0, 16, 5);
    bench_serve_report rep;
    int rc = bench_serve_run(&o, NULL, &rep);
    print_summary("300 at once", &rep.summary);
    ck_assert_int_eq(rc, 0);
    ck_assert_int_eq(rep.summary.completed, N);
    ck_assert_int_eq(rep.summary.total_output_tokens, N * 5);
    ck_assert_int_ge(mock_peak_active(m), N / 2);
    bench_serve_report_free(&rep);
    mock_stop(m);
}
END_TEST

int main(void)
{
    curl_global_init(CURL_GLOBAL_DEFAULT);
    Suite *s = suite_create("bench_mock");
    TCase *tc = tcase_create("core");
    tcase_set_timeout(tc, 60);
    tcase_add_test(tc, test_stream_completions);
    tcase_add_test(tc, test_stream_chat);
    tcase_add_test(tc, test_usage_accounting);
    tcase_add_test(tc, test_unreachable);
    tcase_add_test(tc, test_http_errors);
    tcase_add_test(tc, test_bad_streams);
    tcase_add_test(tc, test_timeout);
    tcase_add_test(tc, test_interrupt);
    tcase_add_test(tc, test_arrival_schedule);
    tcase_add_test(tc, test_save_result);
    tcase_add_test(tc, test_general_lengths);
    tcase_add_test(tc, test_result_dir);
    tcase_add_test(tc, test_goodput_percentiles);
    tcase_add_test(tc, test_disable_stream);
    tcase_add_test(tc, test_warmups_and_key);
    tcase_add_test(tc, test_many_streams);
    suite_add_tcase(s, tc);
    int rc = test_run_suite(s);
    curl_global_cleanup();
    return rc;
}
