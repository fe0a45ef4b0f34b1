/* tests/bench/test_bench_units.c: the pure parts of `inferd bench serve`:
 * percentile math on known arrays, the SSE parser (any split of the bytes,
 * CRLF, comments, role/finish chunks, usage, truncated and malformed
 * streams), the summary (TPOT excluding the first token, pooled ITL, peak
 * buckets, failure classes), gamma/Poisson arrivals, datasets (random,
 * JSONL, ShareGPT; exact lengths with a real tokenizer when fixtures exist),
 * flag parsing and the printed table; the report config (--percentile-
 * metrics, --metric-percentiles, --goodput: every bad value as a table),
 * goodput counting, and the selected percentiles in the table. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cjson/cJSON.h>

#include "common/alloc.h"
#include "common/util.h"
#include "bench/bench_client.h"
#include "bench/bench_dataset.h"
#include "bench/bench_serve.h"
#include "bench/bench_stats.h"
#include "test_util.h"

START_TEST(test_percentiles)
{
    static const struct {
        double v[8];
        int n;
        double p, want;
    } rows[] = {
        {{1, 2, 3, 4}, 4, 50, 2.5},   {{1, 2, 3, 4}, 4, 90, 3.7},   {{1, 2, 3, 4}, 4, 99, 3.97},
        {{1, 2, 3, 4}, 4, 0, 1},      {{1, 2, 3, 4}, 4, 100, 4},    {{5}, 1, 99, 5},
        {{0}, 0, 50, 0},              {{10, 20}, 2, 95, 19.5},      {{1, 1, 1, 9}, 4, 50, 1},
        {{0, 10, 20, 30, 40, 50, 60, 70}, 8, 90, 63},
    };
    for (size_t i = 0; i < INFERD_ARRAY_LEN(rows); i++) {
        double got = bench_percentile(rows[i].v, rows[i].n, rows[i].p);
        ck_assert_msg(fabs(got - rows[i].want) < 1e-9, "row %zu: p%g = %g, want %g", i, rows[i].p, got,
                      rows[i].want);
    }
    double vals[] = {9, 2, 5, 4, 4, 7, 5, 4}; /* mean 5, population std 2 */
    bench_dist d;
    bench_dist_compute(vals, 8, &d);
    ck_assert(fabs(d.mean - 5) < 1e-12 && fabs(d.std - 2) < 1e-12);
    ck_assert(fabs(d.median - 4.5) < 1e-12);
    ck_assert(d.median <= d.p90 && d.p90 <= d.p95 && d.p95 <= d.p99 && d.p99 <= 9);
    bench_dist_compute(vals, 0, &d);
    ck_assert(d.n == 0 && d.mean == 0 && d.p99 == 0);
}
END_TEST

static const char k_stream[] =
    ": keep-alive comment\r\n"
    "data: {\"choices\":[{\"index\":0,\"text\":\"Hel\",\"finish_reason\":null}]}\r\n\r\n"
    "event: message\n"
    "data:{\"choices\":[{\"index\":0,\"text\":\"\",\"finish_reason\":null}]}\n\n"
    "data: {\"choices\":[{\"index\":0,\"text\":\"lo\",\"finish_reason\":null}]}\n\n"
    "data: {\"choices\":[{\"index\":0,\"text\":\"\",\"finish_reason\":\"length\"}]}\n\n"
    "data: {\"choices\":[],\"usage\":{\"prompt_tokens\":7,\"completion_tokens\":3,\"total_tokens\":10}}\n\n"
    "data: [DONE]\n\n";

/* Feed `s` in pieces of `step` bytes (0: all at once), one ms apart. */
static void parse_stream(const char *s, size_t step, bool chat, bench_result *r)
{
    memset(r, 0, sizeof *r);
    r->prompt_tokens = -1;
    bench_sse p;
    bench_sse_init(&p, r, true, chat);
    size_t n = strlen(s), off = 0;
    double t = 0.001;
    while (off < n) {
        size_t k = step ? INFERD_MIN(step, n - off) : n;
        bench_sse_feed(&p, s + off, k, t);
        off += k;
        t += 0.001;
    }
    bench_sse_finish(&p, t);
    bench_sse_free(&p);
}

START_TEST(test_sse_splits)
{
    size_t steps[] = {0, 1, 2, 3, 7, 64};
    for (size_t i = 0; i < INFERD_ARRAY_LEN(steps); i++) {
        bench_result r;
        parse_stream(k_stream, steps[i], false, &r);
        ck_assert_msg(r.err == BENCH_ERR_NONE, "step %zu: %s", steps[i], r.error ? r.error : "");
        ck_assert_int_eq(r.n_chunks, 3); /* "Hel", held-back "", "lo"; not the finish chunk */
        ck_assert_int_eq(r.output_tokens, 3);
        ck_assert_int_eq(r.prompt_tokens, 7);
        ck_assert(r.usage_seen);
        ck_assert(r.ttft_s > 0 && r.ttft_s <= r.e2el_s);
        for (int k = 1; k < r.n_chunks; k++)
            ck_assert(r.chunk_s[k] >= r.chunk_s[k - 1]);
        bench_result_free(&r);
    }
}
END_TEST

START_TEST(test_sse_table)
{
    static const struct {
        const char *body;
        bool chat;
        bench_err err;
        int chunks, out;
    } rows[] = {
        /* chat: the role chunk is not a token, usage wins over chunk count */
        {"data: {\"choices\":[{\"delta\":{\"role\":\"assistant\",\"content\":\"\"},\"finish_reason\":null}]}\n\n"
         "data: {\"choices\":[{\"delta\":{\"content\":\"a\"},\"finish_reason\":null}]}\n\n"
         "data: {\"choices\":[{\"delta\":{\"content\":\"b\"},\"finish_reason\":null}]}\n\n"
         "data: {\"choices\":[{\"delta\":{},\"finish_reason\":\"stop\"}]}\n\n"
         "data: {\"choices\":[],\"usage\":{\"prompt_tokens\":1,\"completion_tokens\":5}}\n\ndata: [DONE]\n\n",
         true, BENCH_ERR_NONE, 2, 5},
        /* chat reasoning delta counts as content */
        {"data: {\"choices\":[{\"delta\":{\"reasoning_content\":\"hm\"}}]}\n\ndata: [DONE]\n\n", true,
         BENCH_ERR_NONE, 1, 1},
        /* no usage: output tokens = chunks; last line without newline */
        {"data: {\"choices\":[{\"text\":\"a\"}]}\n\ndata: {\"choices\":[{\"text\":\"b\"}]}\n\ndata: [DONE]", false,
         BENCH_ERR_NONE, 2, 2},
        /* zero tokens generated, reported by usage: fine */
        {"data: {\"choices\":[{\"text\":\"\",\"finish_reason\":\"stop\"}]}\n\n"
         "data: {\"choices\":[],\"usage\":{\"prompt_tokens\":3,\"completion_tokens\":0}}\n\ndata: [DONE]\n\n",
         false, BENCH_ERR_NONE, 0, 0},
        {"data: {\"choices\":[{\"text\":\"a\"}]}\n\n", false, BENCH_ERR_BAD_RESPONSE, 1, 1},       /* no [DONE] */
        {"data: {\"choices\":[{\"text\":\"a\"\n\ndata: [DONE]\n\n", false, BENCH_ERR_BAD_RESPONSE, 0, 0},
        {"data: {\"error\":{\"message\":\"boom\"}}\n\ndata: [DONE]\n\n", false, BENCH_ERR_BAD_RESPONSE, 0, 0},
        {"{\"choices\":[{\"text\":\"a\"}]}", false, BENCH_ERR_BAD_RESPONSE, 0, 0},     /* not SSE */
        {"", false, BENCH_ERR_BAD_RESPONSE, 0, 0},
        {"data: [DONE]\n\n", false, BENCH_ERR_BAD_RESPONSE, 0, 0},                       /* nothing */
        {"data: {\"choices\":[{\"text\":\"\",\"finish_reason\":\"stop\"}]}\n\ndata: [DONE]\n\n", false,
         BENCH_ERR_BAD_RESPONSE, 0, 0}, /* no content, no usage */
        {"data: [1,2]\n\ndata: [DONE]\n\n", false, BENCH_ERR_BAD_RESPONSE, 0, 0},
    };
    for (size_t i = 0; i < INFERD_ARRAY_LEN(rows); i++) {
        bench_result r;
        parse_stream(rows[i].body, 5, rows[i].chat, &r);
        ck_assert_msg(r.err == rows[i].err, "row %zu: err %s (%s)", i, bench_err_name(r.err), r.error ? r.error : "");
        if (r.err == BENCH_ERR_NONE) {
            ck_assert_msg(r.n_chunks == rows[i].chunks, "row %zu chunks %d", i, r.n_chunks);
            ck_assert_msg(r.output_tokens == rows[i].out, "row %zu out %d", i, r.output_tokens);
            ck_assert(r.ttft_s <= r.e2el_s);
        } else {
            ck_assert(r.error && r.error[0]);
        }
        bench_result_free(&r);
    }
}
END_TEST

START_TEST(test_sse_plain)
{
    const char *body = "{\"choices\":[{\"text\":\"hi\"}],\"usage\":{\"prompt_tokens\":4,\"completion_tokens\":9}}";
    bench_result r = {0};
    bench_sse p;
    bench_sse_init(&p, &r, false, false);
    bench_sse_feed(&p, body, 10, 0.1);
    bench_sse_feed(&p, body + 10, strlen(body) - 10, 0.2);
    bench_sse_finish(&p, 0.25);
    bench_sse_free(&p);
    ck_assert_int_eq(r.err, BENCH_ERR_NONE);
    ck_assert_int_eq(r.output_tokens, 9);
    ck_assert(r.ttft_s == 0.25 && r.e2el_s == 0.25);
    bench_result_free(&r);
}
END_TEST

static bench_result fake(bench_err err, double start, double ttft, int n_chunks, double gap, int out)
{
    bench_result r = {.err = err, .start_s = start, .ttft_s = ttft, .prompt_tokens = -1, .output_tokens = out};
    r.chunk_s = inferd_malloc((size_t)INFERD_MAX(n_chunks, 1) * sizeof(double));
    for (int k = 0; k < n_chunks; k++)
        r.chunk_s[k] = ttft + k * gap;
    r.n_chunks = r.cap_chunks = n_chunks;
    r.e2el_s = n_chunks ? r.chunk_s[n_chunks - 1] : ttft;
    return r;
}

START_TEST(test_summary)
{
    bench_result r[5];
    r[0] = fake(BENCH_ERR_NONE, 0.0, 0.2, 11, 0.05, 11); /* e2e 0.7: tpot 50 ms */
    r[1] = fake(BENCH_ERR_NONE, 0.0, 0.4, 5, 0.1, 5);    /* e2e 0.8: tpot 100 ms */
    r[2] = fake(BENCH_ERR_NONE, 1.5, 0.1, 1, 0.0, 1);    /* one token: no tpot */
    r[3] = fake(BENCH_ERR_HTTP_5XX, 0.1, 0.0, 0, 0, 0);
    r[4] = fake(BENCH_ERR_CONNECT, 0.2, 0.0, 0, 0, 0);
    r[3].e2el_s = r[4].e2el_s = 0.05;
    r[2].prompt_tokens = 9; /* usage beats the sent length */
    int sent[5] = {10, 10, 8, 10, 10};
    bool exact[5] = {true, true, true, true, true};
    bench_summary s;
    bench_summarize(r, 5, sent, exact, 2.0, NULL, &s);
    ck_assert_int_eq(s.completed, 3);
    ck_assert_int_eq(s.failed, 2);
    ck_assert_int_eq(s.errors[BENCH_ERR_HTTP_5XX], 1);
    ck_assert_int_eq(s.errors[BENCH_ERR_CONNECT], 1);
    ck_assert_int_eq(s.total_input_tokens, 29);
    ck_assert_int_eq(s.input_len_mismatches, 1);
    ck_assert_int_eq(s.total_output_tokens, 17);
    ck_assert(fabs(s.output_throughput - 8.5) < 1e-9);
    ck_assert(fabs(s.request_throughput - 1.5) < 1e-9);
    ck_assert_int_eq(s.tpot.n, 2);
    ck_assert(fabs(s.tpot.mean - 75.0) < 1e-6);
    ck_assert_int_eq(s.itl.n, 14); /* 10 + 4 gaps */
    ck_assert(fabs(s.itl.mean - (10 * 50.0 + 4 * 100.0) / 14) < 1e-6);
    ck_assert(fabs(s.ttft.median - 200.0) < 1e-9);
    ck_assert(fabs(s.e2el.mean - (700.0 + 800.0 + 100.0) / 3) < 1e-6);
    /* second [0,1): 11 + 5 tokens; [1,2): 1 */
    ck_assert(fabs(s.max_output_tokens_per_s - 16.0) < 1e-9);
    ck_assert_int_eq(s.max_concurrent_requests, 3); /* r0, r1 and r3 at t = 0.1 */
    for (int i = 0; i < 5; i++)
        bench_result_free(&r[i]);
}
END_TEST

/* Every parser of the report config on good and bad text: a bad value is
 * refused with a message naming it and leaves the config unchanged. */
START_TEST(test_report_cfg_table)
{
    enum { METRICS, PCTS, GOODPUT };
    static const struct {
        int which;
        const char *text;
        bool ok;
        const char *in_msg; /* error text must contain it */
    } rows[] = {
        {METRICS, "ttft", true, NULL},
        {METRICS, "ttft,tpot,itl,e2el", true, NULL},
        {METRICS, "e2el,ttft,e2el", true, NULL},
        {METRICS, "", false, "is not a metric"},
        {METRICS, "ttft,", false, "'' is not a metric"},
        {METRICS, ",ttft", false, "'' is not a metric"},
        {METRICS, "TTFT", false, "'TTFT'"},
        {METRICS, "ttft tpot", false, "'ttft tpot'"},
        {METRICS, "latency", false, "'latency'"},
        {PCTS, "99", true, NULL},
        {PCTS, "0,50,100", true, NULL},
        {PCTS, "99.9,.5", true, NULL},
        {PCTS, "1,2,3,4,5,6,7,8,9,10,11,12,13,14,15,16", true, NULL},
        {PCTS, "1,2,3,4,5,6,7,8,9,10,11,12,13,14,15,16,17", false, "at most 16"},
        {PCTS, "", false, "'' is not a percentile"},
        {PCTS, "100.0001", false, "'100.0001'"},
        {PCTS, "101", false, "'101'"},
        {PCTS, "-1", false, "'-1'"},
        {PCTS, "50,,90", false, "''"},
        {PCTS, "50,", false, "''"},
        {PCTS, "nan", false, "'nan'"},
        {PCTS, "inf", false, "'inf'"},
        {PCTS, "0x10", false, "'0x10'"},
        {PCTS, "1e1", false, "'1e1'"},
        {PCTS, "9..9", false, "'9..9'"},
        {PCTS, ".", false, "'.'"},
        {PCTS, " 50", false, "' 50'"},
        {PCTS, "50,50", false, "given twice"},
        {GOODPUT, "ttft:200", true, NULL},
        {GOODPUT, "ttft:200 tpot:50", true, NULL},
        {GOODPUT, "  e2el:0\ttpot:1000000000 ", true, NULL},
        {GOODPUT, "ttft:0.5", true, NULL},
        {GOODPUT, "", false, "expected KEY:VALUE"},
        {GOODPUT, "   ", false, "expected KEY:VALUE"},
        {GOODPUT, "ttft", false, "is not KEY:VALUE"},
        {GOODPUT, "ttft=200", false, "is not KEY:VALUE"},
        {GOODPUT, "ttft:", false, "number of ms"},
        {GOODPUT, "ttft:-1", false, "number of ms"},
        {GOODPUT, "ttft:1000000001", false, "number of ms"},
        {GOODPUT, "ttft:abc", false, "number of ms"},
        {GOODPUT, "ttft:nan", false, "number of ms"},
        {GOODPUT, "ttft:inf", false, "number of ms"},
        {GOODPUT, "ttft:200:5", false, "number of ms"},
        {GOODPUT, "itl:5", false, "ttft, tpot and e2el"},
        {GOODPUT, "bogus:5", false, "ttft, tpot and e2el"},
        {GOODPUT, ":5", false, "ttft, tpot and e2el"},
        {GOODPUT, "ttft:200 tpot", false, "'tpot' is not KEY:VALUE"},
    };
    for (size_t i = 0; i < INFERD_ARRAY_LEN(rows); i++) {
        bench_report_cfg c, before;
        bench_report_cfg_default(&c);
        before = c;
        bool ok = rows[i].which == METRICS ? bench_parse_percentile_metrics(rows[i].text, &c)
                  : rows[i].which == PCTS  ? bench_parse_metric_percentiles(rows[i].text, &c)
                                           : bench_parse_goodput(rows[i].text, &c);
        ck_assert_msg(ok == rows[i].ok, "row %zu '%s': %s", i, rows[i].text, ok ? "accepted" : inferd_last_error());
        if (!ok) {
            ck_assert_msg(strstr(inferd_last_error(), rows[i].in_msg), "row %zu: '%s' lacks '%s'", i,
                          inferd_last_error(), rows[i].in_msg);
            ck_assert_msg(memcmp(&c, &before, sizeof c) == 0, "row %zu: a failed parse changed the config", i);
        }
    }
    bench_report_cfg c;
    bench_report_cfg_default(&c);
    ck_assert(!bench_report_cfg_has_goodput(&c));
    ck_assert(bench_parse_percentile_metrics("e2el,ttft", &c));
    ck_assert_uint_eq(c.metrics, (1u << BENCH_METRIC_TTFT) | (1u << BENCH_METRIC_E2EL));
    ck_assert(bench_parse_metric_percentiles("99.9,50", &c));
    ck_assert(c.n_pcts == 2 && c.pcts[0] == 99.9 && c.pcts[1] == 50);
    ck_assert(bench_parse_goodput("ttft:200 tpot:50", &c));
    ck_assert(bench_parse_goodput("ttft:150", &c)); /* accumulates; a repeated key keeps the last */
    ck_assert(c.goodput_slo_ms[BENCH_METRIC_TTFT] == 150 && c.goodput_slo_ms[BENCH_METRIC_TPOT] == 50);
    ck_assert(c.goodput_slo_ms[BENCH_METRIC_E2EL] < 0 && c.goodput_slo_ms[BENCH_METRIC_ITL] < 0);
    ck_assert(bench_report_cfg_has_goodput(&c));
}
END_TEST

/* Goodput as vLLM counts it: completed requests within every SLO given
 * (<=), a one-token request's TPOT being 0; and the cfg's percentiles. */
START_TEST(test_goodput_summary)
{
    bench_result r[5];
    r[0] = fake(BENCH_ERR_NONE, 0.0, 0.2, 11, 0.05, 11); /* ttft 200, tpot 50, e2el 700 */
    r[1] = fake(BENCH_ERR_NONE, 0.0, 0.4, 5, 0.1, 5);    /* ttft 400, tpot 100, e2el 800 */
    r[2] = fake(BENCH_ERR_NONE, 1.5, 0.1, 1, 0.0, 1);    /* ttft 100, tpot (0), e2el 100 */
    r[3] = fake(BENCH_ERR_HTTP_5XX, 0.1, 0.0, 0, 0, 0);  /* failed: never good */
    r[4] = fake(BENCH_ERR_NONE, 0.0, 0.25, 3, 0.125, 3); /* exact in binary: ttft 250, tpot 125, e2el 500 */
    static const struct {
        const char *slos;
        int good;
    } rows[] = {
        {"ttft:250", 3},           {"ttft:249.9", 2},      {"tpot:125", 4},     {"tpot:124.9", 3},
        {"tpot:0", 1},             {"e2el:500", 2},        {"e2el:99", 0},      {"ttft:250 tpot:60", 2},
        {"ttft:1000000000", 4},    {"ttft:1000 tpot:1000 e2el:1000", 4},
    };
    for (size_t i = 0; i < INFERD_ARRAY_LEN(rows); i++) {
        bench_report_cfg c;
        bench_report_cfg_default(&c);
        ck_assert_msg(bench_parse_goodput(rows[i].slos, &c), "row %zu: %s", i, inferd_last_error());
        bench_summary s;
        bench_summarize(r, 5, NULL, NULL, 2.0, &c, &s);
        ck_assert_msg(s.good_completed == rows[i].good, "row %zu (%s): %d good", i, rows[i].slos, s.good_completed);
        ck_assert(fabs(s.request_goodput - rows[i].good / 2.0) < 1e-12);
    }
    bench_report_cfg c;
    bench_report_cfg_default(&c);
    ck_assert(bench_parse_metric_percentiles("50,100,0", &c));
    bench_summary s;
    bench_summarize(r, 5, NULL, NULL, 2.0, &c, &s);
    ck_assert_int_eq(s.good_completed, 0);
    ck_assert(s.request_goodput == 0);
    /* TTFTs 100, 200, 250, 400: P50, P100, P0 */
    ck_assert(fabs(s.ttft.pct[0] - 225) < 1e-9 && fabs(s.ttft.pct[1] - 400) < 1e-9 && fabs(s.ttft.pct[2] - 100) < 1e-9);
    ck_assert(fabs(s.ttft.p99 - bench_percentile((double[]){100, 200, 250, 400}, 4, 99)) < 1e-9);
    for (int i = 0; i < 5; i++)
        bench_result_free(&r[i]);
}
END_TEST

START_TEST(test_arrivals)
{
    enum { N = 20001 };
    double *t = inferd_malloc(N * sizeof *t);
    bench_arrivals(5, INFINITY, 1.0, 1, t);
    for (int i = 0; i < 5; i++)
        ck_assert(t[i] == 0.0);
    static const double shapes[] = {1.0, 0.5, 4.0};
    for (size_t k = 0; k < INFERD_ARRAY_LEN(shapes); k++) {
        bench_arrivals(N, 10.0, shapes[k], 42, t);
        ck_assert(t[0] == 0.0);
        double sum = 0, ss = 0;
        for (int i = 1; i < N; i++) {
            double g = t[i] - t[i - 1];
            ck_assert(g >= 0);
            sum += g;
            ss += g * g;
        }
        double mean = sum / (N - 1), var = ss / (N - 1) - mean * mean;
        double cv2 = var / (mean * mean); /* gamma: 1 / shape */
        ck_assert_msg(fabs(mean - 0.1) < 0.004, "shape %g mean %g", shapes[k], mean);
        ck_assert_msg(fabs(cv2 * shapes[k] - 1.0) < 0.1, "shape %g cv2 %g", shapes[k], cv2);
    }
    double *u = inferd_malloc(N * sizeof *u);
    bench_arrivals(100, 3.0, 1.0, 7, t);
    bench_arrivals(100, 3.0, 1.0, 7, u);
    ck_assert(memcmp(t, u, 100 * sizeof *t) == 0);
    inferd_free(t);
    inferd_free(u);
}
END_TEST

START_TEST(test_random_no_tokenizer)
{
    bench_dataset_opts o = {.kind = BENCH_DATA_RANDOM, .num_prompts = 200, .input_len = 100,
                            .output_len = 20, .range_ratio = 0.5, .seed = 3};
    bench_prompt *p = NULL;
    int n = 0;
    ck_assert_int_eq(bench_dataset_build(&o, &p, &n), INFERD_OK);
    ck_assert_int_eq(n, 200);
    int min_in = 1 << 30, max_in = 0;
    for (int i = 0; i < n; i++) {
        ck_assert(p[i].ids && !p[i].text && p[i].exact);
        ck_assert_int_eq(p[i].n_ids, p[i].prompt_len);
        ck_assert(p[i].prompt_len >= 50 && p[i].prompt_len <= 150);
        ck_assert(p[i].output_len >= 10 && p[i].output_len <= 30);
        min_in = INFERD_MIN(min_in, p[i].prompt_len);
        max_in = INFERD_MAX(max_in, p[i].prompt_len);
        for (int k = 0; k < p[i].n_ids; k++)
            ck_assert(p[i].ids[k] >= 3 && p[i].ids[k] < 259);
    }
    ck_assert(min_in < 60 && max_in > 140); /* the range is used */
    bench_dataset_free(p, n);
    o.text_only = true;
    o.range_ratio = 0;
    ck_assert_int_eq(bench_dataset_build(&o, &p, &n), INFERD_OK);
    for (int i = 0; i < n; i++) {
        ck_assert(p[i].text && !p[i].ids && !p[i].exact);
        ck_assert_int_eq(p[i].prompt_len, 100);
        ck_assert_int_eq(p[i].output_len, 20);
    }
    bench_dataset_free(p, n);
}
END_TEST

START_TEST(test_random_tokenizer)
{
    char *dir = test_fixture_path("models/stories260K");
    if (!dir || !util_file_exists(dir)) {
        printf("test_random_tokenizer: fixtures absent, not run\n");
        free(dir);
        return;
    }
    tokenizer *tok = NULL;
    ck_assert_msg(tok_load(dir, &tok) == INFERD_OK, "%s", inferd_last_error());
    bench_dataset_opts o = {.kind = BENCH_DATA_RANDOM, .num_prompts = 40, .input_len = 64,
                            .output_len = 8, .seed = 11, .tok = tok};
    bench_prompt *p = NULL;
    int n = 0;
    ck_assert_int_eq(bench_dataset_build(&o, &p, &n), INFERD_OK);
    for (int i = 0; i < n; i++) {
        ck_assert_int_eq(p[i].n_ids, 64);
        for (int k = 0; k < 64; k++)
            ck_assert(!tok_is_special(tok, p[i].ids[k]));
    }
    bench_dataset_free(p, n);
    o.text_only = true;
    ck_assert_int_eq(bench_dataset_build(&o, &p, &n), INFERD_OK);
    int exact = 0;
    for (int i = 0; i < n; i++) {
        int32_t *ids = NULL;
        int m = 0;
        ck_assert(util_utf8_valid(p[i].text, strlen(p[i].text)));
        ck_assert_int_eq(tok_encode(tok, p[i].text, strlen(p[i].text), false, false, &ids, &m), INFERD_OK);
        ck_assert_int_eq(m, p[i].prompt_len); /* the recorded length is the tokenizer's count */
        exact += m == 64;
        inferd_free(ids);
    }
    ck_assert_msg(exact >= n * 9 / 10, "only %d/%d text prompts hit 64 tokens", exact, n);
    bench_dataset_free(p, n);
    tok_free(tok);
    free(dir);
}
END_TEST

START_TEST(test_jsonl_table)
{
    static const struct {
        const char *file;
        bool ok;
        int out0, len0;
    } rows[] = {
        {"{\"prompt\":\"a b c d\",\"output_len\":7}\n\n{\"prompt\":[5,6,7]}\n", true, 7, 2},
        {"{\"prompt\":[5,6,7],\"max_tokens\":3}", true, 3, 3},
        {"{\"prompt\":\"x\"}\r\n", true, 256, 1},
        {"not json\n", false, 0, 0},
        {"{\"prompt\":5}\n", false, 0, 0},
        {"{\"prompt\":\"\"}\n", false, 0, 0},
        {"{\"prompt\":[1,-2]}\n", false, 0, 0},
        {"{\"prompt\":[1.5]}\n", false, 0, 0},
        {"{\"prompt\":[]}\n", false, 0, 0},
        {"{\"prompt\":\"a\",\"output_len\":0}\n", false, 0, 0},
        {"{\"prompt\":\"a\",\"output_len\":\"9\"}\n", false, 0, 0},
        /* non-integer and out-of-range lengths are errors, never truncated */
        {"{\"prompt\":\"a\",\"output_len\":2.5}\n", false, 0, 0},
        {"{\"prompt\":\"a\",\"output_len\":0.999}\n", false, 0, 0},
        {"{\"prompt\":\"a\",\"max_tokens\":7.01}\n", false, 0, 0},
        {"{\"prompt\":\"a\",\"output_len\":-1}\n", false, 0, 0},
        {"{\"prompt\":\"a\",\"output_len\":1000000001}\n", false, 0, 0},
        {"{\"prompt\":\"a\",\"output_len\":1e300}\n", false, 0, 0},
        {"{\"prompt\":5,\"output_len\":1e300}\n", false, 0, 0},
        {"{\"prompt\":\"a\",\"output_len\":true}\n", false, 0, 0},
        {"{\"prompt\":\"a\",\"output_len\":null}\n", false, 0, 0},
        {"{\"prompt\":\"a\",\"output_len\":[3]}\n", false, 0, 0},
        {"{\"prompt\":\"a\",\"output_len\":1}\n", true, 1, 1},
        {"{\"prompt\":\"a\",\"output_len\":3.0}\n", true, 3, 1},
        {"{\"prompt\":\"a\",\"max_tokens\":1000000000}\n", true, 1000000000, 1},
        {"\n\n", false, 0, 0},
    };
    for (size_t i = 0; i < INFERD_ARRAY_LEN(rows); i++) {
        char *path = test_write_temp("bench-jsonl", rows[i].file, strlen(rows[i].file));
        bench_dataset_opts o = {.kind = BENCH_DATA_JSONL, .path = path, .num_prompts = 5, .seed = 1};
        bench_prompt *p = NULL;
        int n = 0;
        inferd_status st = bench_dataset_build(&o, &p, &n);
        ck_assert_msg((st == INFERD_OK) == rows[i].ok, "row %zu: %s", i, inferd_last_error());
        if (st == INFERD_OK) {
            ck_assert_int_eq(n, 5);
            ck_assert_int_eq(p[0].output_len, rows[i].out0);
            ck_assert_int_eq(p[0].prompt_len, rows[i].len0);
            bench_dataset_free(p, n);
        } else {
            ck_assert(strstr(inferd_last_error(), path) != NULL); /* names the file */
            ck_assert_msg(!strstr(rows[i].file, "_len") || strstr(inferd_last_error(), "integer in [1, 1e9]") ||
                              strstr(inferd_last_error(), "\"prompt\""),
                          "row %zu: %s", i, inferd_last_error());
        }
        unlink(path);
        free(path);
    }
}
END_TEST

START_TEST(test_sharegpt)
{
    const char *file =
        "[{\"conversations\":[{\"from\":\"human\",\"value\":\"tell me a long story about a cat please\"},"
        "{\"from\":\"gpt\",\"value\":\"once upon a time there was a cat who sat on a mat all day\"}]},"
        "{\"conversations\":[{\"from\":\"human\",\"value\":\"hi\"},{\"from\":\"gpt\",\"value\":\"hello there friend\"}]},"
        "{\"conversations\":[{\"from\":\"human\",\"value\":\"only one turn here\"}]},"
        "{\"id\":\"no conversations\"}]";
    char *path = test_write_temp("bench-sharegpt", file, strlen(file));
    bench_dataset_opts o = {.kind = BENCH_DATA_SHAREGPT, .path = path, .num_prompts = 3, .seed = 5};
    bench_prompt *p = NULL;
    int n = 0;
    ck_assert_msg(bench_dataset_build(&o, &p, &n) == INFERD_OK, "%s", inferd_last_error());
    for (int i = 0; i < n; i++) { /* only the first conversation passes; cycled */
        ck_assert_str_eq(p[i].text, "tell me a long story about a cat please");
        ck_assert_int_eq(p[i].output_len, 15); /* 57 bytes / 4, rounded up */
    }
    bench_dataset_free(p, n);
    o.fixed_output_len = 2;
    ck_assert_int_eq(bench_dataset_build(&o, &p, &n), INFERD_OK);
    ck_assert_int_eq(p[0].output_len, 2);
    bench_dataset_free(p, n);
    unlink(path);
    free(path);
    path = test_write_temp("bench-sharegpt", "{\"a\":1}", 7);
    o.path = path;
    ck_assert_int_eq(bench_dataset_build(&o, &p, &n), INFERD_ERR_FORMAT);
    unlink(path);
    free(path);
}
END_TEST

START_TEST(test_flags)
{
    static const struct {
        const char *args[6];
        int rc;
    } rows[] = {
        {{"serve", "--num-prompts", "5"}, 0},
        {{"serve", "--num-prompts=5", "--request-rate", "inf"}, 0},
        {{"serve", "--request-rate", "2.5", "--burstiness", "0.5"}, 0},
        {{"serve", "--ignore-eos", "--save-result", "--disable-stream"}, 0},
        {{"serve", "--dataset-name", "jsonl", "--dataset-path", "x"}, 0},
        {{"serve", "--num-prompts", "0"}, 2},
        {{"serve", "--num-prompts"}, 2},
        {{"serve", "--num-prompts", "abc"}, 2},
        {{"serve", "--request-rate", "-1"}, 2},
        {{"serve", "--request-rate", "0"}, 2},
        {{"serve", "--random-range-ratio", "1.0"}, 2},
        {{"serve", "--port", "70000"}, 2},
        {{"serve", "--dataset-name", "bogus"}, 2},
        {{"serve", "--dataset-name", "sharegpt"}, 2},
        {{"serve", "--ignore-eos=1"}, 2},
        {{"serve", "--bogus"}, 2},
        {{"serve", "positional"}, 2},
        {{"serve", "--endpoint", "v1/completions"}, 2},
        {{"serve", "--model", ""}, 2},
        {{"serve", "--input-len", "5", "--output-len", "3"}, 0},
        {{"serve", "--input-len", "0"}, 2},
        {{"serve", "--output-len", "2.5"}, 2},
        {{"serve", "--percentile-metrics", "ttft,e2el"}, 0},
        {{"serve", "--percentile-metrics", "ttft,bogus"}, 2},
        {{"serve", "--percentile-metrics"}, 2},
        {{"serve", "--metric-percentiles", "50,90,99.9"}, 0},
        {{"serve", "--metric-percentiles=101"}, 2},
        {{"serve", "--goodput", "ttft:200", "tpot:50", "e2el:900"}, 0},
        {{"serve", "--goodput=ttft:200", "tpot:50", "--ignore-eos"}, 0},
        {{"serve", "--goodput", "ttft:200 tpot:50"}, 0},
        {{"serve", "--goodput", "ttft:200", "itl:5"}, 2},
        {{"serve", "--goodput", "ttft:200", "extra"}, 2},
        {{"serve", "--goodput"}, 2},
        {{"serve", "--goodput", "--ignore-eos"}, 2},
        {{"serve", "positional", "--goodput", "ttft:1"}, 2},
    };
    for (size_t i = 0; i < INFERD_ARRAY_LEN(rows); i++) {
        int argc = 0;
        while (argc < 6 && rows[i].args[argc])
            argc++;
        bench_serve_opts o;
        bench_serve_opts_default(&o);
        bool help = false;
        int rc = bench_serve_parse(argc, (char **)rows[i].args, &o, &help);
        ck_assert_msg(rc == rows[i].rc, "row %zu: rc %d", i, rc);
    }
    bench_serve_opts o;
    bench_serve_opts_default(&o);
    bool help = false;
    const char *args[] = {"serve", "--request-rate", "4", "--max-concurrency", "3", "--seed=9", "--ignore-eos"};
    ck_assert_int_eq(bench_serve_parse(7, (char **)args, &o, &help), 0);
    ck_assert(o.request_rate == 4.0 && o.max_concurrency == 3 && o.seed == 9 && o.ignore_eos);
    ck_assert(isinf(o.burstiness) == 0 && o.burstiness == 1.0 && o.num_prompts == 1000);
    /* the report's defaults, then vLLM's several-word --goodput and the
     * general lengths, which fill their own fields */
    ck_assert_uint_eq(o.report.metrics, 0xfu);
    ck_assert(o.report.n_pcts == 3 && o.report.pcts[2] == 99 && !bench_report_cfg_has_goodput(&o.report));
    bench_serve_opts_default(&o);
    const char *args2[] = {"serve", "--goodput", "ttft:200", "tpot:50", "--metric-percentiles", "50",
                           "--percentile-metrics", "itl", "--output-len", "7", "--sharegpt-output-len", "9",
                           "--input-len", "11"};
    ck_assert_int_eq(bench_serve_parse(14, (char **)args2, &o, &help), 0);
    ck_assert(o.report.goodput_slo_ms[BENCH_METRIC_TTFT] == 200 && o.report.goodput_slo_ms[BENCH_METRIC_TPOT] == 50);
    ck_assert(o.report.n_pcts == 1 && o.report.pcts[0] == 50 && o.report.metrics == 1u << BENCH_METRIC_ITL);
    ck_assert(o.output_len == 7 && o.fixed_output_len == 9 && o.input_len == 11 && o.random_output_len == 128);
}
END_TEST

START_TEST(test_table)
{
    bench_result r = fake(BENCH_ERR_NONE, 0, 0.2, 3, 0.05, 3);
    bench_summary s;
    bench_summarize(&r, 1, NULL, NULL, 1.0, NULL, &s);
    bench_meta m = {.request_rate = INFINITY, .burstiness = 1, .max_concurrency = 4};
    char *buf = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&buf, &len);
    bench_print_table(f, &s, &m);
    fclose(f);
    ck_assert(strncmp(buf, "============ Serving Benchmark Result ============\n", 51) == 0);
    ck_assert(strstr(buf, "Successful requests:                     1         \n"));
    ck_assert(strstr(buf, "Request rate configured (RPS):           inf"));
    ck_assert(strstr(buf, "---------------Time to First Token----------------\n"));
    ck_assert(strstr(buf, "-----Time per Output Token (excl. 1st token)------\n"));
    ck_assert(strstr(buf, "Mean TTFT (ms):                          200.00"));
    ck_assert(strstr(buf, "P99 E2EL (ms):"));
    ck_assert(strstr(buf, "\n==================================================\n"));
    ck_assert(!strstr(buf, "goodput"));
    free(buf);
    /* selected metrics and percentiles only, and the goodput line */
    bench_report_cfg c;
    bench_report_cfg_default(&c);
    ck_assert(bench_parse_percentile_metrics("ttft,e2el", &c) && bench_parse_metric_percentiles("50,99.9", &c) &&
              bench_parse_goodput("ttft:250", &c));
    bench_summarize(&r, 1, NULL, NULL, 1.0, &c, &s);
    f = open_memstream(&buf, &len);
    bench_print_table(f, &s, &m);
    fclose(f);
    ck_assert_msg(strstr(buf, "Request throughput (req/s):              1.00      \n"
                              "Request goodput (req/s):                 1.00      \n"),
                  "%s", buf);
    ck_assert(strstr(buf, "P50 TTFT (ms):                           200.00"));
    ck_assert(strstr(buf, "P99.9 TTFT (ms):"));
    ck_assert(strstr(buf, "P99.9 E2EL (ms):"));
    ck_assert(!strstr(buf, "TPOT") && !strstr(buf, "ITL") && !strstr(buf, "P99 TTFT") && !strstr(buf, "P90"));
    char *json = bench_result_json(&s, &m, &r, 1, NULL);
    cJSON *root = cJSON_Parse(json);
    ck_assert(root);
    static const char *const present[] = {"mean_ttft_ms", "median_ttft_ms", "std_ttft_ms", "p50_ttft_ms",
                                          "p99.9_ttft_ms", "p50_e2el_ms", "p99.9_e2el_ms", "request_goodput",
                                          "goodput_slos_ms", "latencies", "e2els"};
    static const char *const absent[] = {"mean_tpot_ms", "p99_itl_ms", "p90_ttft_ms", "p99_ttft_ms"};
    for (size_t i = 0; i < INFERD_ARRAY_LEN(present); i++)
        ck_assert_msg(cJSON_GetObjectItemCaseSensitive(root, present[i]), "missing %s", present[i]);
    for (size_t i = 0; i < INFERD_ARRAY_LEN(absent); i++)
        ck_assert_msg(!cJSON_GetObjectItemCaseSensitive(root, absent[i]), "unexpected %s", absent[i]);
    ck_assert(cJSON_GetObjectItem(root, "request_goodput")->valuedouble == 1.0);
    ck_assert(cJSON_GetObjectItem(cJSON_GetObjectItem(root, "goodput_slos_ms"), "ttft")->valuedouble == 250);
    ck_assert(fabs(cJSON_GetArrayItem(cJSON_GetObjectItem(root, "latencies"), 0)->valuedouble - r.e2el_s) < 1e-12);
    cJSON_Delete(root);
    inferd_free(json);
    free(buf);
    /* without SLOs, request_goodput is null, as vLLM writes it */
    bench_summarize(&r, 1, NULL, NULL, 1.0, NULL, &s);
    json = bench_result_json(&s, &m, &r, 1, NULL);
    root = cJSON_Parse(json);
    ck_assert(cJSON_IsNull(cJSON_GetObjectItem(root, "request_goodput")));
    cJSON_Delete(root);
    inferd_free(json);
    bench_result_free(&r);
}
END_TEST

int main(void)
{
    Suite *s = suite_create("bench_units");
    TCase *tc = tcase_create("core");
    tcase_add_test(tc, test_percentiles);
    tcase_add_test(tc, test_sse_splits);
    tcase_add_test(tc, test_sse_table);
    tcase_add_test(tc, test_sse_plain);
    tcase_add_test(tc, test_summary);
    tcase_add_test(tc, test_report_cfg_table);
    tcase_add_test(tc, test_goodput_summary);
    tcase_add_test(tc, test_arrivals);
    tcase_add_test(tc, test_random_no_tokenizer);
    tcase_add_test(tc, test_random_tokenizer);
    tcase_add_test(tc, test_jsonl_table);
    tcase_add_test(tc, test_sharegpt);
    tcase_add_test(tc, test_flags);
    tcase_add_test(tc, test_table);
    suite_add_tcase(s, tc);
    return test_run_suite(s);
}
