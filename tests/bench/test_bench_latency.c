/* tests/bench/test_bench_latency.c: `inferd bench latency` on the CPU
 * backend with stories260K (the CI smoke run of issue 12): the table has
 * one row per (batch, input) combination in order, each with every column
 * filled, and the JSON has the same rows with positive timings, bytes,
 * FLOPs, floor and % of roofline, and the ceilings, and no row's prompts
 * were served by the prefix cache. Speed is not checked.
 * With --profile-ops, a per-op table for the decode steps and one for the
 * steps with a prompt chunk, each with every layer op once per layer, and
 * the same per-op times in the JSON.
 * Bad flags (a zero or malformed list, an unknown flag, no --model) exit 2.
 * Skips (77) without the built binary or the fixtures.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cjson/cJSON.h>

#include "common/alloc.h"
#include "common/util.h"
#include "test_util.h"

static char *g_model;

/* One `inferd bench latency` run on the CPU backend with stories260K and
 * the given flags (NULL-terminated; model, device, JSON path and log level
 * are added), checked for exit 0: its stdout and parsed JSON. */
typedef struct {
    char *json, *out, *err, *text;
    cJSON *root;
} bl_run;

static void bl_start(bl_run *r, const char *const *flags)
{
    memset(r, 0, sizeof *r);
    r->json = test_write_temp("bench-latency", "", 0);
    const char *argv[40] = {test_inferd_bin(), "bench", "latency", "--model", g_model, "--device", "cpu"};
    int n = 7;
    while (*flags && n < 34)
        argv[n++] = *flags++;
    ck_assert(*flags == NULL);
    argv[n++] = "--output-json";
    argv[n++] = r->json;
    argv[n++] = "--log-level";
    argv[n++] = "warn";
    argv[n] = NULL;
    int rc = test_run_rc((char **)argv, &r->out, &r->err);
    ck_assert_msg(rc == 0, "exit %d\nstdout:\n%s\nstderr:\n%s", rc, r->out, r->err);
    size_t len = 0;
    ck_assert_msg(util_read_file(r->json, 1 << 20, &r->text, &len) == INFERD_OK, "no JSON at %s", r->json);
    r->root = cJSON_Parse(r->text);
    ck_assert_msg(r->root, "bad JSON: %s", r->text);
}

static void bl_done(bl_run *r)
{
    cJSON_Delete(r->root);
    inferd_free(r->text);
    unlink(r->json);
    inferd_free(r->json);
    free(r->out);
    free(r->err);
}

START_TEST(test_cpu_table_and_json)
{
    static const char *const flags[] = {"--batch-size", "1,3", "--input-len", "20,40", "--output-len", "6",
                                        "--num-iters-warmup", "1", "--num-iters", "2", NULL};
    bl_run run;
    bl_start(&run, flags);
    const char *out = run.out;
    ck_assert_msg(strstr(out, "ceilings (measured now): copy "), "%s", out);
    ck_assert_msg(strstr(out, "graphs: off (CPU backend)"), "%s", out);
    const char *hdr = strstr(out, "| batch | in | out | prefill ms |");
    ck_assert_msg(hdr, "no table header:\n%s", out);
    const int want[4][2] = {{1, 20}, {1, 40}, {3, 20}, {3, 40}};
    const char *p = strchr(hdr, '\n') + 1; /* the |---| line */
    p = strchr(p, '\n') + 1;
    for (int r = 0; r < 4; r++) {
        const char *eol = strchr(p, '\n');
        ck_assert_msg(eol, "row %d missing:\n%s", r, out);
        ck_assert_int_eq(test_count_char(p, (size_t)(eol - p), '|'), 16); /* 15 columns */
        int b = 0, in = 0, o = 0;
        ck_assert_msg(sscanf(p, "| %d | %d | %d |", &b, &in, &o) == 3, "row %d: %.*s", r, (int)(eol - p), p);
        ck_assert_int_eq(b, want[r][0]);
        ck_assert_int_eq(in, want[r][1]);
        ck_assert_int_eq(o, 6);
        ck_assert_msg(!memmem(p, (size_t)(eol - p), "error", 5), "row %d: %.*s", r, (int)(eol - p), p);
        p = eol + 1;
    }
    /* the engine thread's table: one 10-column line per row */
    const char *ht =
        strstr(out, "| batch | in | out | outputs us | loop us | schedule us | build us | host us | gaps |");
    ck_assert_msg(ht, "no engine-thread table:\n%s", out);
    p = strchr(strchr(ht, '\n') + 1, '\n') + 1;
    for (int r = 0; r < 4; r++) {
        const char *eol = strchr(p, '\n');
        ck_assert_msg(eol, "engine-thread row %d missing:\n%s", r, out);
        ck_assert_int_eq(test_count_char(p, (size_t)(eol - p), '|'), 10);
        int b = 0, in = 0;
        ck_assert_msg(sscanf(p, "| %d | %d |", &b, &in) == 2, "%.*s", (int)(eol - p), p);
        ck_assert_int_eq(b, want[r][0]);
        ck_assert_int_eq(in, want[r][1]);
        p = eol + 1;
    }
    const cJSON *root = run.root;
    ck_assert_str_eq(cJSON_GetObjectItem(root, "backend")->valuestring, "cpu");
    ck_assert(cJSON_IsFalse(cJSON_GetObjectItem(root, "graphs")));
    const cJSON *c = cJSON_GetObjectItem(root, "ceilings");
    ck_assert(cJSON_GetObjectItem(c, "copy_gbps")->valuedouble > 0);
    ck_assert(cJSON_GetObjectItem(c, "gemm_tflops")->valuedouble > 0);
    const cJSON *rows = cJSON_GetObjectItem(root, "rows");
    ck_assert_int_eq(cJSON_GetArraySize(rows), 4);
    static const char *k_pos[] = {"prefill_ms", "prefill_tok_s", "decode_ms_per_step", "decode_p50_ms",
                                  "decode_p99_ms", "decode_tok_s", "weight_bytes_per_step", "kv_bytes_per_step",
                                  "flops_per_step", "floor_ms", "pct_roofline", "avg_latency"};
    for (int r = 0; r < 4; r++) {
        const cJSON *row = cJSON_GetArrayItem(rows, r);
        ck_assert_int_eq(cJSON_GetObjectItem(row, "batch_size")->valueint, want[r][0]);
        ck_assert_int_eq(cJSON_GetObjectItem(row, "input_len")->valueint, want[r][1]);
        for (size_t k = 0; k < sizeof k_pos / sizeof k_pos[0]; k++) {
            const cJSON *v = cJSON_GetObjectItem(row, k_pos[k]);
            ck_assert_msg(v && cJSON_IsNumber(v) && v->valuedouble > 0, "row %d: %s missing or <= 0", r, k_pos[k]);
        }
        /* every row's prompts are its own: a 40-token row does not start with a
         * 20-token row's prompt, so the prefix cache (16-token blocks) serves none */
        ck_assert_int_eq(cJSON_GetObjectItem(row, "cached_prompt_tokens")->valueint, 0);
        /* every request decodes output - 1 steps; the ones after all prefills are counted */
        int steps = cJSON_GetObjectItem(row, "decode_steps")->valueint;
        ck_assert_msg(steps >= 1 && steps <= 2 * 5, "row %d: %d decode steps", r, steps);
        ck_assert(cJSON_GetObjectItem(row, "decode_p50_ms")->valuedouble <=
                  cJSON_GetObjectItem(row, "decode_p99_ms")->valuedouble);
        /* the timed decode steps follow each other: their gaps were timed,
         * and publishing the tokens takes time */
        const cJSON *h = cJSON_GetObjectItem(row, "engine_thread_us_per_gap");
        ck_assert_msg(h, "row %d: no engine_thread_us_per_gap", r);
        ck_assert_int_ge(cJSON_GetObjectItem(h, "gaps")->valueint, 1);
        ck_assert(cJSON_GetObjectItem(h, "outputs")->valuedouble > 0);
        static const char *k_host[] = {"loop", "schedule", "build"};
        for (size_t k = 0; k < 3; k++)
            ck_assert(cJSON_GetObjectItem(h, k_host[k])->valuedouble >= 0);
    }
    bl_done(&run);
}
END_TEST

/* The op lines of the table that follows title in out: each op of `want`
 * has calls/step == its count and a positive time; "all ops" closes it. */
static void check_ops_table(const char *out, const char *title)
{
    static const struct {
        const char *op;
        int calls; /* stories260K: 5 layers */
    } want[] = {{"QKV GEMM", 5}, {"attention", 5}, {"O GEMM", 5}, {"gate/up GEMM", 5}, {"SiLU * up", 5},
                {"down GEMM", 5}, {"lm_head", 1}, {"sampling", 1}};
    const char *t = strstr(out, title);
    ck_assert_msg(t, "no \"%s\" table:\n%s", title, out);
    const char *end = strstr(t, "| all ops | |");
    ck_assert_msg(end, "\"%s\": no all-ops line:\n%s", title, t);
    for (size_t i = 0; i < sizeof want / sizeof want[0]; i++) {
        char key[64];
        snprintf(key, sizeof key, "| %s | ", want[i].op);
        const char *l = strstr(t, key);
        ck_assert_msg(l && l < end, "\"%s\": no %s line", title, want[i].op);
        int calls = 0;
        double us = 0;
        ck_assert_int_eq(sscanf(l + strlen(key), "%d | %lf", &calls, &us), 2);
        ck_assert_msg(calls == want[i].calls && us > 0, "\"%s\" %s: %d calls, %.1f us", title, want[i].op, calls, us);
    }
}

START_TEST(test_cpu_profile_ops)
{
    static const char *const flags[] = {"--batch-size", "3", "--input-len", "20", "--output-len", "6",
                                        "--num-iters-warmup", "0", "--num-iters", "1", "--profile-ops", NULL};
    bl_run run;
    bl_start(&run, flags);
    check_ops_table(run.out, "ops of a decode step: batch 3");
    /* the three 20-token prompts fit one step's token budget */
    check_ops_table(run.out, "ops of a step with a prompt chunk: batch 3, input 20, 60 new tokens a step, 1 steps");
    const cJSON *row = cJSON_GetArrayItem(cJSON_GetObjectItem(run.root, "rows"), 0);
    static const char *k_ops[] = {"ops_us_per_step", "prefill_ops_us_per_step"};
    for (int k = 0; k < 2; k++) {
        const cJSON *ops = cJSON_GetObjectItem(row, k_ops[k]);
        ck_assert_msg(ops, "no %s", k_ops[k]);
        ck_assert_msg(cJSON_GetObjectItem(ops, "attention")->valuedouble > 0, "%s attention", k_ops[k]);
        ck_assert_msg(cJSON_GetObjectItem(ops, "gate/up GEMM")->valuedouble > 0, "%s gate/up", k_ops[k]);
    }
    ck_assert_int_eq(cJSON_GetObjectItem(row, "prefill_ops_steps")->valueint, 1);
    ck_assert_int_eq(cJSON_GetObjectItem(row, "prefill_ops_tokens_per_step")->valueint, 60);
    bl_done(&run);
}
END_TEST

/* INFERD_KNOCKOUT: the run says which ops its decode steps left out. */
START_TEST(test_cpu_knockout_named)
{
    static const char *const flags[] = {"--batch-size", "2", "--input-len", "8", "--output-len", "4",
                                        "--num-iters-warmup", "0", "--num-iters", "1", NULL};
    setenv("INFERD_KNOCKOUT", "silu,norm", 1);
    bl_run run;
    bl_start(&run, flags);
    unsetenv("INFERD_KNOCKOUT");
    ck_assert_msg(strstr(run.out, "knock-out: silu,norm left out of every decode step"), "%s", run.out);
    bl_done(&run);
    bl_start(&run, flags);
    ck_assert_msg(!strstr(run.out, "knock-out"), "%s", run.out);
    bl_done(&run);
}
END_TEST

/* The norm fold in the header and the JSON: off on stories260K by the size
 * rule, on when INFERD_NORM_FOLD=1 forces it. */
START_TEST(test_cpu_norm_fold_named)
{
    static const char *const flags[] = {"--batch-size", "2", "--input-len", "8", "--output-len", "4",
                                        "--num-iters-warmup", "0", "--num-iters", "1", NULL};
    for (int forced = 0; forced < 2; forced++) {
        if (forced)
            setenv("INFERD_NORM_FOLD", "1", 1);
        bl_run run;
        bl_start(&run, flags);
        unsetenv("INFERD_NORM_FOLD");
        ck_assert_msg(strstr(run.out, forced ? "norm fold on\n" : "norm fold off\n"), "%s", run.out);
        const cJSON *nf = cJSON_GetObjectItem(run.root, "norm_fold");
        ck_assert_msg(cJSON_IsBool(nf) && cJSON_IsTrue(nf) == forced, "norm_fold in the JSON");
        bl_done(&run);
    }
}
END_TEST

/* A batch the KV cache cannot hold at once (8 prompts of 200 tokens in 28
 * blocks of 16) runs in parts: its row has no decode steps, and a warning
 * names it, with the pool's size, instead of leaving bare zeros. */
START_TEST(test_cpu_batch_in_parts)
{
    static const char *const flags[] = {"--batch-size", "1,8", "--input-len", "200", "--output-len", "8",
                                        "--num-iters-warmup", "0", "--num-iters", "1", "--kv-cache-bytes",
                                        "573440", NULL}; /* 28 blocks: 5 layers x K, V x 16 tokens x 4 x 8 fp32 */
    bl_run run;
    bl_start(&run, flags);
    const cJSON *rows = cJSON_GetObjectItem(run.root, "rows");
    ck_assert_int_gt(cJSON_GetObjectItem(cJSON_GetArrayItem(rows, 0), "decode_steps")->valueint, 0);
    ck_assert_int_eq(cJSON_GetObjectItem(cJSON_GetArrayItem(rows, 1), "decode_steps")->valueint, 0);
    ck_assert_msg(strstr(run.out, "warning: batch 8, input 200: no step decoded the whole batch at once"), "%s",
                  run.out);
    ck_assert_msg(strstr(run.out, "28 KV blocks of 16 tokens"), "%s", run.out);
    ck_assert_msg(!strstr(run.out, "warning: batch 1,"), "%s", run.out);
    bl_done(&run);
}
END_TEST

/* --kv-cache-dtype fp8: the JSON names the KV cache's element, and the
 * roofline's KV bytes per step are a quarter of the fp32 cache's (1 byte an
 * element, not 4) while the weight bytes stay. */
START_TEST(test_cpu_kv_fp8)
{
    static const char *const auto_flags[] = {"--batch-size", "2", "--input-len", "20", "--output-len", "4",
                                             "--num-iters-warmup", "0", "--num-iters", "1", NULL};
    static const char *const fp8_flags[] = {"--batch-size", "2", "--input-len", "20", "--output-len", "4",
                                            "--num-iters-warmup", "0", "--num-iters", "1",
                                            "--kv-cache-dtype", "fp8", NULL};
    bl_run a, f;
    bl_start(&a, auto_flags);
    bl_start(&f, fp8_flags);
    ck_assert_str_eq(cJSON_GetObjectItem(a.root, "kv_cache_dtype")->valuestring, "F32");
    ck_assert_str_eq(cJSON_GetObjectItem(f.root, "kv_cache_dtype")->valuestring, "FP8_E4M3");
    ck_assert_msg(strstr(f.out, "KV cache FP8_E4M3"), "%s", f.out);
    const cJSON *ra = cJSON_GetArrayItem(cJSON_GetObjectItem(a.root, "rows"), 0);
    const cJSON *rf = cJSON_GetArrayItem(cJSON_GetObjectItem(f.root, "rows"), 0);
    const double kva = cJSON_GetObjectItem(ra, "kv_bytes_per_step")->valuedouble;
    const double kvf = cJSON_GetObjectItem(rf, "kv_bytes_per_step")->valuedouble;
    ck_assert_msg(kvf > 0 && kva == 4 * kvf, "kv bytes/step: auto %g, fp8 %g", kva, kvf);
    ck_assert(cJSON_GetObjectItem(ra, "weight_bytes_per_step")->valuedouble ==
              cJSON_GetObjectItem(rf, "weight_bytes_per_step")->valuedouble);
    bl_done(&a);
    bl_done(&f);
}
END_TEST

START_TEST(test_bad_flags)
{
    static const char *k_bad[][2] = {
        {"--batch-size", "0"}, {"--batch-size", "1,,2"}, {"--input-len", "8,"}, {"--output-len", "x"},
        {"--num-iters", "2,3"}, {"--no-such-flag", "1"}, {"--kv-cache-dtype", "fp16"},
    };
    for (size_t k = 0; k < sizeof k_bad / sizeof k_bad[0]; k++) {
        char *argv[] = {(char *)test_inferd_bin(), "bench", "latency", "--model", g_model, "--device", "cpu",
                        (char *)k_bad[k][0], (char *)k_bad[k][1], NULL};
        char *out = NULL, *err = NULL;
        int rc = test_run_rc(argv, &out, &err);
        ck_assert_msg(rc == 2, "%s %s: exit %d (%s)", k_bad[k][0], k_bad[k][1], rc, err);
        ck_assert_msg(strstr(err, "error"), "%s %s: no message: %s", k_bad[k][0], k_bad[k][1], err);
        free(out);
        free(err);
    }
    char *argv[] = {(char *)test_inferd_bin(), "bench", "latency", "--device", "cpu", NULL};
    char *out = NULL, *err = NULL;
    ck_assert_int_eq(test_run_rc(argv, &out, &err), 2);
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
    Suite *s = suite_create("bench_latency");
    TCase *tc = tcase_create("cli");
    tcase_set_timeout(tc, 300);
    tcase_add_test(tc, test_cpu_table_and_json);
    tcase_add_test(tc, test_cpu_profile_ops);
    tcase_add_test(tc, test_cpu_knockout_named);
    tcase_add_test(tc, test_cpu_norm_fold_named);
    tcase_add_test(tc, test_cpu_batch_in_parts);
    tcase_add_test(tc, test_cpu_kv_fp8);
    tcase_add_test(tc, test_bad_flags);
    suite_add_tcase(s, tc);
    return test_run_suite(s);
}
