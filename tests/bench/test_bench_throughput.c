/* tests/bench/test_bench_throughput.c: `inferd bench throughput` on the CPU
 * backend with stories260K (the CI smoke run of issue 13): the vLLM lines,
 * the roofline table's shape (one row, every column filled) and the JSON's
 * keys, with the request and token counts of the run exact (random: n x
 * lengths; sharegpt: the tokenizer's counts of the conversations used).
 * Speed is not checked. In-process: the closed-form FLOP count of a
 * request against a per-step sum of model_step_cost, and every numeric
 * row of the option table at min-1/min/max/max+1. Bad flags exit 2 with a
 * message; a bad dataset file or a length the model cannot hold exit 1.
 * With INFERD_TEST_DEVICE=cuda the two runs use the CUDA backend (the GPU
 * machine's smoke run of the same checks).
 * Skips (77) without the built binary or the fixtures.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cjson/cJSON.h>

#include "bench/bench_throughput.h"
#include "common/alloc.h"
#include "common/util.h"
#include "test_util.h"

static char *g_model;
static const char *g_device; /* "cpu", or "cuda" with INFERD_TEST_DEVICE=cuda */

static cJSON *read_json(const char *path)
{
    char *text = NULL;
    size_t len = 0;
    ck_assert_msg(util_read_file(path, 1 << 20, &text, &len) == INFERD_OK, "no JSON at %s", path);
    cJSON *root = cJSON_Parse(text);
    ck_assert_msg(root, "bad JSON: %s", text);
    inferd_free(text);
    return root;
}

static double num(const cJSON *o, const char *key)
{
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, key);
    ck_assert_msg(cJSON_IsNumber(v), "JSON key %s missing or not a number", key);
    return v->valuedouble;
}

/* The table: header, |---| line, one row of 14 filled columns whose first
 * three are requests, prompt and output tokens. */
static void check_table(const char *out, int requests, long long prompt, long long output)
{
    ck_assert_msg(strstr(out, "ceilings (measured now): copy "), "%s", out);
    ck_assert_msg(strstr(out, "Throughput: ") && strstr(out, " requests/s, ") && strstr(out, " total tokens/s, ") &&
                      strstr(out, " output tokens/s\n"),
                  "no vLLM throughput line:\n%s", out);
    char want[96];
    snprintf(want, sizeof want, "Total num prompt tokens:  %lld\n", prompt);
    ck_assert_msg(strstr(out, want), "no '%s' in:\n%s", want, out);
    snprintf(want, sizeof want, "Total num output tokens:  %lld\n", output);
    ck_assert_msg(strstr(out, want), "no '%s' in:\n%s", want, out);
    const char *hdr = strstr(out, "| requests | prompt tok | output tok | elapsed s | req/s | total tok/s | "
                                  "output tok/s | prefill TFLOP | decode TFLOP | model TFLOP | GEMM TFLOP/s | "
                                  "floor s | achieved TFLOP/s | % roofline |\n");
    ck_assert_msg(hdr, "no table header:\n%s", out);
    const char *p = strchr(hdr, '\n') + 1;
    ck_assert(strncmp(p, "|---:|", 6) == 0);
    p = strchr(p, '\n') + 1;
    const char *eol = strchr(p, '\n');
    ck_assert_msg(eol, "no table row:\n%s", out);
    ck_assert_int_eq(test_count_char(p, (size_t)(eol - p), '|'), 15);
    ck_assert_msg(!memmem(p, (size_t)(eol - p), "| |", 3), "empty cell: %.*s", (int)(eol - p), p);
    int n = 0;
    long long in = 0, o = 0;
    ck_assert_msg(sscanf(p, "| %d | %lld | %lld |", &n, &in, &o) == 3, "row: %.*s", (int)(eol - p), p);
    ck_assert_int_eq(n, requests);
    ck_assert_int_eq(in, prompt);
    ck_assert_int_eq(o, output);
    ck_assert_msg(strstr(eol, "\nengine: ") && strstr(eol, " preemptions, prefix cache served "), "%s", out);
    /* the time split: every request decodes output - 1 > 0 times after its prefill */
    const char *t = strstr(eol, "\ntime: ");
    unsigned dec = 0;
    ck_assert_msg(t && sscanf(t, "\ntime: %u decode-only steps ", &dec) == 1 && dec >= 1, "%s", out);
}

/* The keys every run writes, vLLM's five first; counts exact, rates and
 * FLOPs positive, the roofline consistent with its parts. */
static void check_json(cJSON *root, int requests, long long prompt, long long output)
{
    ck_assert_int_eq((int)num(root, "num_requests"), requests);
    ck_assert_int_eq((long long)num(root, "total_prompt_tokens"), prompt);
    ck_assert_int_eq((long long)num(root, "total_output_tokens"), output);
    ck_assert_int_eq((long long)num(root, "total_num_tokens"), prompt + output);
    ck_assert_int_eq((int)num(root, "failed"), 0);
    static const char *const k_pos[] = {"elapsed_time", "requests_per_second", "tokens_per_second",
                                        "output_tokens_per_second", "prefill_flops", "decode_flops",
                                        "total_flops", "floor_s", "achieved_tflops", "pct_roofline"};
    for (size_t k = 0; k < INFERD_ARRAY_LEN(k_pos); k++)
        ck_assert_msg(num(root, k_pos[k]) > 0, "%s <= 0", k_pos[k]);
    double el = num(root, "elapsed_time");
    ck_assert(fabs(num(root, "requests_per_second") - requests / el) < 1e-6 * requests / el);
    ck_assert(fabs(num(root, "tokens_per_second") - (prompt + output) / el) < 1e-6 * (prompt + output) / el);
    ck_assert(fabs(num(root, "total_flops") - num(root, "prefill_flops") - num(root, "decode_flops")) <
              1e-9 * num(root, "total_flops"));
    const cJSON *c = cJSON_GetObjectItem(root, "ceilings");
    double gemm = num(c, "gemm_tflops");
    ck_assert(gemm > 0 && num(c, "copy_gbps") > 0);
    ck_assert(fabs(num(root, "floor_s") - num(root, "total_flops") / (gemm * 1e12)) < 1e-9 * num(root, "floor_s"));
    ck_assert(fabs(num(root, "pct_roofline") - 100 * num(root, "floor_s") / el) < 1e-6 * num(root, "pct_roofline"));
    ck_assert_str_eq(cJSON_GetObjectItem(root, "backend")->valuestring, g_device);
    const cJSON *e = cJSON_GetObjectItem(root, "engine");
    ck_assert(num(e, "steps") >= 1 && num(e, "max_num_seqs") >= 1 && num(e, "preemptions") >= 0);
    ck_assert(num(e, "steps_ahead") >= 0 && num(e, "steps_ahead") < num(e, "steps"));
    ck_assert(num(e, "decode_only_steps") >= 1 && num(e, "decode_only_steps") <= num(e, "steps"));
    ck_assert(num(e, "decode_only_gpu_s") > 0 && num(e, "decode_only_gpu_s") <= el);
}

START_TEST(test_cpu_random)
{
    char *json = test_write_temp("bench-tput", "", 0);
    char *argv[] = {(char *)test_inferd_bin(), "bench", "throughput", "--model", g_model, "--device", (char *)g_device,
                    "--input-len", "16", "--output-len", "8", "--num-prompts", "10", "--output-json", json,
                    "--log-level", "warn", NULL};
    char *out = NULL, *err = NULL;
    int rc = test_run_rc(argv, &out, &err);
    ck_assert_msg(rc == 0, "exit %d\nstdout:\n%s\nstderr:\n%s", rc, out, err);
    ck_assert_msg(strstr(out, "dataset: random, 10 requests, input 16, output 8"), "%s", out);
    ck_assert_msg(strstr(out, "engine: max-num-seqs 256, max-num-batched-tokens 8192, max-model-len 24"), "%s", out);
    check_table(out, 10, 160, 80);
    /* one prefill step, then 7 decode-only ones: 6 pairs with the engine
     * thread's time between them */
    double host_us = 0;
    unsigned pairs = 0;
    const char *h = strstr(out, "\nengine thread between consecutive decode-only steps: ");
    ck_assert_msg(
        h && sscanf(h,
                    "\nengine thread between consecutive decode-only steps: %lf us (outputs %*f, loop "
                    "%*f, schedule %*f, build %*f) over %u pairs",
                    &host_us, &pairs) == 2,
        "%s", out);
    ck_assert(host_us > 0);
    ck_assert_uint_eq(pairs, 6);
    cJSON *root = read_json(json);
    check_json(root, 10, 160, 80);
    const cJSON *hj = cJSON_GetObjectItem(cJSON_GetObjectItem(root, "engine"), "engine_thread_s");
    ck_assert_int_eq((int)num(hj, "pairs"), 6);
    ck_assert(num(hj, "outputs") > 0 && num(hj, "loop") >= 0 && num(hj, "schedule") >= 0 &&
              num(hj, "build") >= 0);
    ck_assert_str_eq(cJSON_GetObjectItem(root, "dataset_name")->valuestring, "random");
    ck_assert_int_eq((int)num(root, "input_len"), 16);
    ck_assert_int_eq((int)num(root, "output_len"), 8);
    ck_assert_int_eq((int)num(root, "cached_prompt_tokens"), 0); /* fresh random ids never hit */
    cJSON_Delete(root);
    unlink(json);
    inferd_free(json);
    free(out);
    free(err);
}
END_TEST

/* Token count of text with the model's tokenizer (specials as the bench
 * adds them: BOS for prompts, none for completions). */
static int n_tokens(const tokenizer *t, const char *text, bool add_special)
{
    int32_t *ids = NULL;
    int n = 0;
    ck_assert(tok_encode(t, text, strlen(text), add_special, false, &ids, &n) == INFERD_OK);
    inferd_free(ids);
    return n;
}

/* Two conversations that pass vLLM's filters, 6 requests: each is used
 * three times whatever the shuffle, so the totals are known; repeats share
 * prefixes, so the prefix cache serves some prompt tokens (counted, and
 * left out of the prefill FLOPs). --output-len fixes the lengths. */
START_TEST(test_cpu_sharegpt)
{
    static const char *const k_turns[2][2] = {
        {"Tell me a story about a little dog who found a red ball in the park.",
         "Once upon a time, a little dog named Max found a red ball. He played with it all day."},
        {"What did the cat see when it climbed the big tree near the river?",
         "The cat saw a bird and a nest. It was happy and sat in the sun."},
    };
    char file[1024];
    snprintf(file, sizeof file,
             "[{\"conversations\":[{\"from\":\"human\",\"value\":\"%s\"},{\"from\":\"gpt\",\"value\":\"%s\"}]},"
             "{\"conversations\":[{\"from\":\"human\",\"value\":\"%s\"},{\"from\":\"gpt\",\"value\":\"%s\"}]}]",
             k_turns[0][0], k_turns[0][1], k_turns[1][0], k_turns[1][1]);
    char *path = test_write_temp("bench-tput-sharegpt", file, strlen(file));
    tokenizer *t = NULL;
    ck_assert(tok_load(g_model, &t) == INFERD_OK);
    long long prompt = 3LL * (n_tokens(t, k_turns[0][0], true) + n_tokens(t, k_turns[1][0], true));
    long long output = 3LL * (n_tokens(t, k_turns[0][1], false) + n_tokens(t, k_turns[1][1], false));
    tok_free(t);
    char *json = test_write_temp("bench-tput", "", 0);
    for (int fixed = 0; fixed < 2; fixed++) {
        char *argv[] = {(char *)test_inferd_bin(), "bench", "throughput", "--model", g_model, "--device",
                        (char *)g_device, "--dataset-name", "sharegpt", "--dataset-path", path, "--num-prompts", "6",
                        "--output-json", json, "--log-level", "warn", "--max-num-seqs", "4",
                        fixed ? "--output-len" : NULL, "5", NULL};
        char *out = NULL, *err = NULL;
        int rc = test_run_rc(argv, &out, &err);
        ck_assert_msg(rc == 0, "exit %d\nstdout:\n%s\nstderr:\n%s", rc, out, err);
        long long want_out = fixed ? 6 * 5 : output;
        check_table(out, 6, prompt, want_out);
        cJSON *root = read_json(json);
        check_json(root, 6, prompt, want_out);
        ck_assert_str_eq(cJSON_GetObjectItem(root, "dataset_name")->valuestring, "sharegpt");
        ck_assert_msg(num(root, "cached_prompt_tokens") > 0 && num(root, "cached_prompt_tokens") < prompt,
                      "cached %g of %lld", num(root, "cached_prompt_tokens"), prompt);
        cJSON_Delete(root);
        free(out);
        free(err);
    }
    unlink(json);
    inferd_free(json);
    unlink(path);
    free(path);
}
END_TEST

/* The closed form (two model_step_cost calls per phase) equals the sum of
 * one call per decode step, for short and long requests and cached
 * prefixes; a whole-prompt hit still computes the last token. */
START_TEST(test_request_flops)
{
    model_opts mo;
    model_opts_default(&mo); /* owns its string rows: freed with opt_free below */
    mo.model_dir = inferd_strdup(g_model);
    mo.max_num_seqs = 4;
    mo.max_num_batched_tokens = 512;
    model *m = NULL;
    ck_assert_msg(model_load(&mo, &m) == INFERD_OK, "%s", inferd_last_error());
    static const struct {
        int prompt, cached, output;
    } rows[] = {{1, 0, 1}, {1, 0, 2}, {7, 0, 1}, {16, 0, 8}, {100, 0, 37}, {100, 32, 37}, {64, 64, 5}, {300, 0, 211}};
    for (size_t i = 0; i < INFERD_ARRAY_LEN(rows); i++) {
        double pf = 0, dec = 0;
        bench_throughput_request_flops(m, rows[i].prompt, rows[i].cached, rows[i].output, &pf, &dec);
        model_cost c;
        int computed = rows[i].prompt - rows[i].cached > 0 ? rows[i].prompt - rows[i].cached : 1;
        model_step_cost(m, 1, computed, rows[i].prompt, &c);
        ck_assert_msg(fabs(pf - c.flops) <= 1e-12 * c.flops, "row %zu: prefill %g vs %g", i, pf, c.flops);
        double sum = 0;
        for (int k = 1; k < rows[i].output; k++) { /* the step that makes token k + 1 */
            model_step_cost(m, 1, 1, rows[i].prompt + k, &c);
            sum += c.flops;
        }
        ck_assert_msg(fabs(dec - sum) <= 1e-12 * fmax(sum, 1), "row %zu: decode %.17g vs %.17g", i, dec, sum);
        ck_assert(pf > 0 && (rows[i].output > 1) == (dec > 0));
    }
    model_free(m);
    size_t n_rows = 0;
    const opt_row *rows_mo = model_opts_rows(&n_rows);
    opt_free(rows_mo, n_rows, &mo);
}
END_TEST

/* Every numeric row through the parser: min and max accepted, one past
 * either refused with the flag named; wrong types refused. */
START_TEST(test_parse_bounds)
{
    size_t n = 0;
    const opt_row *rows = bench_throughput_rows(&n);
    int checked = 0;
    for (size_t r = 0; r < n; r++) {
        if (rows[r].kind != OPT_INT && rows[r].kind != OPT_INT64 && rows[r].kind != OPT_DOUBLE)
            continue;
        bool integral = rows[r].kind != OPT_DOUBLE;
        double step = integral ? 1 : 1e-3;
        const double vals[] = {rows[r].min - step, rows[r].min, rows[r].max, rows[r].max + (integral ? 1 : 1e-3)};
        const bool want[] = {false, true, true, false};
        for (int k = 0; k < 4; k++) {
            if (rows[r].kind == OPT_INT64 && k == 3)
                continue; /* 9.2e18 + 1 is not representable as the row states it */
            char arg[128];
            snprintf(arg, sizeof arg, integral ? "--%s=%.0f" : "--%s=%.9g", rows[r].name, vals[k]);
            char *argv[] = {"throughput", arg, NULL};
            bench_throughput_opts o;
            bench_throughput_opts_default(&o);
            int i = 1;
            int got = bench_throughput_parse_arg(2, argv, &i, &o);
            ck_assert_msg((got == 1) == want[k], "%s: %d", arg, got);
            if (got < 0)
                ck_assert_msg(strstr(inferd_last_error(), rows[r].name), "%s: %s", arg, inferd_last_error());
        }
        checked++;
    }
    ck_assert_int_eq(checked, 5); /* input-len, output-len, num-prompts, random-range-ratio, seed */
    static const char *const k_bad[] = {"--num-prompts=abc", "--input-len=1.5", "--output-len=", "--seed=-1",
                                        "--dataset-name=jsonl", "--random-range-ratio=x", "--disable-detokenize=1"};
    for (size_t k = 0; k < INFERD_ARRAY_LEN(k_bad); k++) {
        char *argv[] = {"throughput", (char *)k_bad[k], NULL};
        bench_throughput_opts o;
        bench_throughput_opts_default(&o);
        int i = 1;
        ck_assert_msg(bench_throughput_parse_arg(2, argv, &i, &o) == -1, "%s accepted", k_bad[k]);
    }
    bench_throughput_opts o;
    bench_throughput_opts_default(&o);
    ck_assert(o.num_prompts == 1000 && o.dataset == BENCH_DATA_RANDOM && o.input_len == 0 && o.output_len == 0);
    ck_assert_int_eq(bench_throughput_max_len(&o), 1024 + 128);
    o.input_len = 100;
    o.output_len = 10;
    o.random_range_ratio = 0.5;
    ck_assert_int_eq(bench_throughput_max_len(&o), 150 + 15);
    o.dataset = BENCH_DATA_SHAREGPT;
    ck_assert_int_eq(bench_throughput_max_len(&o), 0);
}
END_TEST

/* Usage errors exit 2 with a message before anything loads; a missing
 * file, a prompt the model cannot hold, exit 1. */
START_TEST(test_bad_flags)
{
    static const struct {
        const char *a[6];
        int rc;
        const char *in_err;
    } rows[] = {
        {{"--input-len", "0"}, 2, "--input-len"},
        {{"--input-len", "10000001"}, 2, "--input-len"},
        {{"--output-len", "x"}, 2, "--output-len"},
        {{"--num-prompts", "0"}, 2, "--num-prompts"},
        {{"--num-prompts", "-5"}, 2, "--num-prompts"},
        {{"--dataset-name", "bogus"}, 2, "--dataset-name"},
        {{"--dataset-name", "sharegpt"}, 2, "needs --dataset-path"},
        {{"--dataset-name", "sharegpt", "--dataset-path", "x.json", "--input-len", "8"}, 2, "--input-len is for"},
        {{"--dataset-path", "x.json"}, 2, "--dataset-path is for sharegpt"},
        {{"--random-range-ratio", "1"}, 2, "--random-range-ratio"},
        {{"--seed", "-1"}, 2, "--seed"},
        {{"--output-json"}, 2, "--output-json"},
        {{"--no-such-flag", "1"}, 2, "unknown flag"},
        {{"--max-num-seqs", "0"}, 2, "max-num-seqs"},
        {{"--kv-cache-dtype", "fp16"}, 2, "--kv-cache-dtype: expected one of auto|fp8|fp8_e4m3"},
        {{"--dataset-name", "sharegpt", "--dataset-path", "/nonexistent/sharegpt.json"}, 1, "nonexistent"},
        {{"--input-len", "600", "--output-len", "4"}, 1, "max"},
    };
    for (size_t k = 0; k < INFERD_ARRAY_LEN(rows); k++) {
        char *argv[16] = {(char *)test_inferd_bin(), "bench", "throughput", "--model", g_model, "--device", "cpu",
                          "--num-prompts", "2"};
        int n = 9;
        for (int j = 0; j < 6 && rows[k].a[j]; j++)
            argv[n++] = (char *)rows[k].a[j];
        argv[n] = NULL;
        char *out = NULL, *err = NULL;
        int rc = test_run_rc(argv, &out, &err);
        ck_assert_msg(rc == rows[k].rc, "row %zu (%s): exit %d\n%s", k, rows[k].a[0], rc, err);
        ck_assert_msg(strstr(err, rows[k].in_err), "row %zu: stderr lacks \"%s\": %s", k, rows[k].in_err, err);
        free(out);
        free(err);
    }
    char *argv[] = {(char *)test_inferd_bin(), "bench", "throughput", "--device", "cpu", NULL};
    char *out = NULL, *err = NULL;
    ck_assert_int_eq(test_run_rc(argv, &out, &err), 2);
    ck_assert(strstr(err, "--model DIR is required"));
    free(out);
    free(err);
}
END_TEST

int main(void)
{
    if (!test_inferd_bin())
        test_skip("INFERD_BIN not set");
    g_model = test_fixture_path("models/stories260K");
    if (!g_model || !util_file_exists(g_model))
        test_skip("stories260K fixture missing");
    g_device = test_use_cuda() ? "cuda" : "cpu";
    Suite *s = suite_create("bench_throughput");
    TCase *tc = tcase_create("cli");
    tcase_set_timeout(tc, 300);
    tcase_add_test(tc, test_cpu_random);
    tcase_add_test(tc, test_cpu_sharegpt);
    tcase_add_test(tc, test_request_flops);
    tcase_add_test(tc, test_parse_bounds);
    tcase_add_test(tc, test_bad_flags);
    suite_add_tcase(s, tc);
    return test_run_suite(s);
}
