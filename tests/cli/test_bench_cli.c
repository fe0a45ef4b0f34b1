/* tests/cli/test_bench_cli.c: the `inferd bench serve` command line, run
 * as a process ($INFERD_BIN) against the mock OpenAI server: exit status 0
 * with a vLLM-style table and result JSON on success; 1 with a clean report
 * for an unreachable server, HTTP errors, Ctrl-C (partial results) and a
 * result that cannot be written; 2 for bad flags (every bad value of the
 * new flags as a table, each with a message naming the flag). Also as a
 * new user would try it: --output-len on the random dataset, a missing
 * --result-dir (created), --goodput and the selected percentiles printed.
 * Skips when the binary has not been built. */
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <cjson/cJSON.h>

#include "common/alloc.h"
#include "common/util.h"
#include "mock_openai.h"
#include "test_util.h"

typedef struct {
    int status; /* exit code, or 128 + signal */
    char *out, *err;
    double seconds; /* from the SIGINT (when sent) or the start to the exit */
} run_out;

static char *slurp(const char *path)
{
    char *s = NULL;
    if (util_read_file(path, 0, &s, NULL) != INFERD_OK)
        s = inferd_strdup("");
    return s;
}

/* Wait (up to 30 s) until the child's stderr file holds `what`. */
static void wait_for_stderr(const char *err_path, const char *what)
{
    for (int k = 0; k < 3000; k++) {
        char *s = slurp(err_path);
        bool seen = strstr(s, what) != NULL;
        inferd_free(s);
        if (seen)
            return;
        struct timespec ts = {0, 10 * 1000000L};
        nanosleep(&ts, NULL);
    }
    ck_abort_msg("the run never printed \"%s\"", what);
}

/* Run inferd with args; SIGINT it sigint_ms after the run started sending
 * (its "Starting benchmark" line) when > 0. NOTE: not after a fixed time
 * from exec: a CUDA build of the binary takes 1-3 s to start on a loaded
 * machine (loading cuBLAS), and a SIGINT before the handler is installed
 * kills it (exit 130). */
static run_out run_inferd(const char *const *args, int sigint_ms)
{
    char out_path[] = "/tmp/bench-cli-out-XXXXXX", err_path[] = "/tmp/bench-cli-err-XXXXXX";
    int fo = mkstemp(out_path), fe = mkstemp(err_path);
    ck_assert(fo >= 0 && fe >= 0);
    const char *argv[32];
    int argc = 0;
    argv[argc++] = test_inferd_bin();
    for (; args[argc - 1] && argc < 31; argc++)
        argv[argc] = args[argc - 1];
    argv[argc] = NULL;
    double t0 = util_now_s();
    pid_t pid = fork();
    ck_assert(pid >= 0);
    if (pid == 0) {
        dup2(fo, STDOUT_FILENO);
        dup2(fe, STDERR_FILENO);
        execv(argv[0], (char *const *)argv);
        _exit(127);
    }
    if (sigint_ms > 0) {
        wait_for_stderr(err_path, "Starting benchmark");
        struct timespec ts = {sigint_ms / 1000, (long)(sigint_ms % 1000) * 1000000L};
        nanosleep(&ts, NULL);
        t0 = util_now_s();
        kill(pid, SIGINT);
    }
    int ws = 0;
    waitpid(pid, &ws, 0);
    run_out r;
    r.seconds = util_now_s() - t0;
    r.status = WIFEXITED(ws) ? WEXITSTATUS(ws) : 128 + WTERMSIG(ws);
    close(fo);
    close(fe);
    r.out = slurp(out_path);
    r.err = slurp(err_path);
    unlink(out_path);
    unlink(err_path);
    return r;
}

static void run_free(run_out *r)
{
    inferd_free(r->out);
    inferd_free(r->err);
}

START_TEST(test_cli_ok)
{
    mock_cfg cfg = {.first_delay_ms = 50, .token_delay_ms = 10};
    mock_server *m = mock_start(&cfg);
    ck_assert(m);
    char url[64], json[] = "/tmp/bench-cli-json-XXXXXX";
    snprintf(url, sizeof url, "http://127.0.0.1:%d", mock_port(m));
    close(mkstemp(json));
    const char *args[] = {"bench", "serve", "--base-url", url, "--num-prompts", "8", "--max-concurrency", "4",
                          "--random-input-len", "16", "--random-output-len", "5", "--ignore-eos",
                          "--result-filename", json, NULL};
    run_out r = run_inferd(args, 0);
    ck_assert_msg(r.status == 0, "exit %d\nstdout:\n%s\nstderr:\n%s", r.status, r.out, r.err);
    ck_assert(strstr(r.out, "============ Serving Benchmark Result ============"));
    ck_assert(strstr(r.out, "Successful requests:                     8 "));
    ck_assert(strstr(r.out, "Total generated tokens:                  40 "));
    ck_assert(strstr(r.out, "Mean TPOT (ms):"));
    char *txt = slurp(json);
    cJSON *root = cJSON_Parse(txt);
    ck_assert(root);
    ck_assert_int_eq(cJSON_GetObjectItem(root, "completed")->valueint, 8);
    ck_assert_int_eq(cJSON_GetObjectItem(root, "total_input_tokens")->valueint, 8 * 16);
    cJSON_Delete(root);
    inferd_free(txt);
    unlink(json);
    run_free(&r);
    mock_stop(m);
}
END_TEST

START_TEST(test_cli_failures)
{
    char url[64];
    snprintf(url, sizeof url, "http://127.0.0.1:%d", mock_free_port());
    const char *args[] = {"bench", "serve", "--base-url", url, "--num-prompts", "6", "--random-input-len", "4",
                          "--random-output-len", "2", NULL};
    run_out r = run_inferd(args, 0);
    ck_assert_msg(r.status == 1, "unreachable: exit %d\n%s%s", r.status, r.out, r.err);
    ck_assert(strstr(r.out, "Successful requests:                     0 "));
    ck_assert(strstr(r.out, "Failed requests:                         6 "));
    ck_assert(strstr(r.out, "  connect errors:                        6 "));
    run_free(&r);

    mock_cfg cfg = {.status = 500};
    mock_server *m = mock_start(&cfg);
    ck_assert(m);
    snprintf(url, sizeof url, "http://127.0.0.1:%d", mock_port(m));
    r = run_inferd(args, 0);
    ck_assert_msg(r.status == 1, "HTTP 500: exit %d", r.status);
    ck_assert(strstr(r.out, "  HTTP 5xx:                              6 "));
    ck_assert(strstr(r.err, "HTTP 500"));
    run_free(&r);
    mock_stop(m);
}
END_TEST

START_TEST(test_cli_usage)
{
    static const struct {
        const char *args[6];
        int status;
        const char *in_out;
    } rows[] = {
        {{"bench", NULL}, 2, NULL},
        {{"bench", "latency", NULL}, 2, NULL},
        {{"bench", "serve", "--bogus", NULL}, 2, NULL},
        {{"bench", "serve", "--num-prompts", "-3", NULL}, 2, NULL},
        {{"bench", "serve", "--help", NULL}, 0, "--max-concurrency"},
        {{"bench", "--help", NULL}, 0, "throughput"},
        {{"bench", "throughput", NULL}, 2, NULL},
        {{"bench", "bogus", NULL}, 2, NULL},
        {{"bench", "serve", "--help", NULL}, 0, "--goodput"},
        {{"bench", "throughput", "--help", NULL}, 0, "--dataset-name"},
    };
    for (size_t i = 0; i < INFERD_ARRAY_LEN(rows); i++) {
        run_out r = run_inferd(rows[i].args, 0);
        ck_assert_msg(r.status == rows[i].status, "row %zu: exit %d", i, r.status);
        if (rows[i].in_out)
            ck_assert(strstr(r.out, rows[i].in_out));
        run_free(&r);
    }
}
END_TEST

/* As a new user types it: --output-len (vLLM's general flag) on the random
 * dataset sets max_tokens (the mock answers with that many tokens), and a
 * --result-dir that does not exist yet is created. */
START_TEST(test_cli_output_len_result_dir)
{
    mock_server *m = mock_start(&(mock_cfg){.first_delay_ms = 5, .token_delay_ms = 1});
    ck_assert(m);
    char url[64], sub[512];
    snprintf(url, sizeof url, "http://127.0.0.1:%d", mock_port(m));
    char *dir = test_make_temp_dir("bench-cli-rdir");
    snprintf(sub, sizeof sub, "%s/results/run1", dir);
    const char *args[] = {"bench", "serve", "--base-url", url, "--num-prompts", "8", "--random-input-len", "6",
                          "--random-output-len", "9", "--output-len", "3", "--save-result", "--result-dir", sub,
                          NULL};
    run_out r = run_inferd(args, 0);
    ck_assert_msg(r.status == 0, "exit %d\n%s%s", r.status, r.out, r.err);
    ck_assert_msg(strstr(r.out, "Total generated tokens:                  24 "), "%s", r.out);
    ck_assert(strstr(r.err, "Result saved to ") && strstr(r.err, sub));
    char cmd[700];
    snprintf(cmd, sizeof cmd, "test $(ls '%s' | grep -c '^openai-infqps-.*\\.json$') = 1", sub);
    ck_assert_msg(system(cmd) == 0, "no result file in %s", sub);
    run_free(&r);
    /* a result that cannot be written: every request completed, exit 1 */
    char blocked[600];
    snprintf(blocked, sizeof blocked, "%s/results/run1/sub", dir);
    snprintf(cmd, sizeof cmd, "rm -f '%s'/*.json && touch '%s/results/run1/x' ", sub, dir);
    ck_assert(system(cmd) == 0);
    snprintf(blocked, sizeof blocked, "%s/results/run1/x/sub", dir);
    const char *bad[] = {"bench", "serve", "--base-url", url, "--num-prompts", "4", "--random-input-len", "6",
                         "--random-output-len", "2", "--save-result", "--result-dir", blocked, NULL};
    r = run_inferd(bad, 0);
    ck_assert_msg(r.status == 1, "exit %d\n%s%s", r.status, r.out, r.err);
    ck_assert(strstr(r.out, "Successful requests:                     4 "));
    ck_assert_msg(strstr(r.err, "cannot save the result") && strstr(r.err, "cannot create"), "%s", r.err);
    run_free(&r);
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
    ck_assert(system(cmd) == 0);
    free(dir);
    mock_stop(m);
}
END_TEST

/* --goodput in vLLM's several-word form, --metric-percentiles and
 * --percentile-metrics, printed; the JSON has their keys. */
START_TEST(test_cli_goodput_percentiles)
{
    mock_server *m = mock_start(&(mock_cfg){.first_delay_ms = 20, .token_delay_ms = 2});
    ck_assert(m);
    char url[64], json[] = "/tmp/bench-cli-json-XXXXXX";
    snprintf(url, sizeof url, "http://127.0.0.1:%d", mock_port(m));
    close(mkstemp(json));
    const char *args[] = {"bench", "serve", "--base-url", url, "--num-prompts", "6", "--random-input-len", "4",
                          "--random-output-len", "4", "--goodput", "ttft:10000", "tpot:10000",
                          "--metric-percentiles", "50,99.9", "--percentile-metrics", "ttft,itl",
                          "--result-filename", json, NULL};
    run_out r = run_inferd(args, 0);
    ck_assert_msg(r.status == 0, "exit %d\n%s%s", r.status, r.out, r.err);
    ck_assert_msg(strstr(r.out, "Request goodput (req/s):"), "%s", r.out);
    ck_assert(strstr(r.out, "P50 TTFT (ms):") && strstr(r.out, "P99.9 ITL (ms):"));
    ck_assert(!strstr(r.out, "TPOT (ms)") && !strstr(r.out, "E2EL") && !strstr(r.out, "P99 TTFT"));
    char *txt = slurp(json);
    cJSON *root = cJSON_Parse(txt);
    ck_assert(root);
    ck_assert(cJSON_GetObjectItem(root, "request_goodput")->valuedouble > 0);
    ck_assert(cJSON_GetObjectItem(root, "p99.9_itl_ms") && cJSON_GetObjectItem(root, "p50_ttft_ms"));
    ck_assert_int_eq(cJSON_GetArraySize(cJSON_GetObjectItem(root, "latencies")), 6);
    cJSON_Delete(root);
    inferd_free(txt);
    unlink(json);
    run_free(&r);
    mock_stop(m);
}
END_TEST

/* Every bad value of the new flags: exit 2 before any request (the mock
 * sees none), a message naming the flag and the bad item. */
START_TEST(test_cli_new_flags_bad)
{
    mock_server *m = mock_start(&(mock_cfg){.first_delay_ms = 1, .token_delay_ms = 1});
    ck_assert(m);
    char url[64];
    snprintf(url, sizeof url, "http://127.0.0.1:%d", mock_port(m));
    static const struct {
        const char *flag, *v1, *v2;
        const char *in_err;
    } rows[] = {
        {"--percentile-metrics", "", NULL, "--percentile-metrics: '' is not a metric"},
        {"--percentile-metrics", "ttft,bogus", NULL, "'bogus' is not a metric"},
        {"--percentile-metrics", "ttft,", NULL, "'' is not a metric"},
        {"--percentile-metrics", "TTFT", NULL, "'TTFT'"},
        {"--percentile-metrics", NULL, NULL, "--percentile-metrics needs a value"},
        {"--metric-percentiles", "101", NULL, "--metric-percentiles: '101' is not a percentile in [0, 100]"},
        {"--metric-percentiles", "-1", NULL, "'-1' is not a percentile"},
        {"--metric-percentiles", "50,,99", NULL, "'' is not a percentile"},
        {"--metric-percentiles", "p99", NULL, "'p99'"},
        {"--metric-percentiles", "nan", NULL, "'nan'"},
        {"--metric-percentiles", "99,99", NULL, "given twice"},
        {"--metric-percentiles", "1,2,3,4,5,6,7,8,9,10,11,12,13,14,15,16,17", NULL, "at most 16"},
        {"--goodput", "ttft", NULL, "--goodput: 'ttft' is not KEY:VALUE"},
        {"--goodput", "ttft:-5", NULL, "the SLO must be a number of ms"},
        {"--goodput", "ttft:1000000001", NULL, "the SLO must be a number of ms"},
        {"--goodput", "ttft:fast", NULL, "the SLO must be a number of ms"},
        {"--goodput", "itl:50", NULL, "goodput metrics are ttft, tpot and e2el"},
        {"--goodput", "ttft:200", "tpot", "--goodput: 'tpot' is not KEY:VALUE"},
        {"--goodput", "", NULL, "expected KEY:VALUE pairs"},
        {"--goodput", NULL, NULL, "--goodput needs a value"},
        {"--input-len", "0", NULL, "--input-len"},
        {"--output-len", "2.5", NULL, "--output-len"},
        {"--output-len", "10000001", NULL, "--output-len"},
    };
    for (size_t i = 0; i < INFERD_ARRAY_LEN(rows); i++) {
        const char *args[16] = {"bench", "serve", "--base-url", url, "--num-prompts", "2", rows[i].flag};
        int n = 7;
        if (rows[i].v1)
            args[n++] = rows[i].v1;
        if (rows[i].v2)
            args[n++] = rows[i].v2;
        args[n] = NULL;
        run_out r = run_inferd(args, 0);
        ck_assert_msg(r.status == 2, "row %zu (%s): exit %d\n%s", i, rows[i].flag, r.status, r.err);
        ck_assert_msg(strstr(r.err, rows[i].in_err), "row %zu: stderr lacks \"%s\":\n%s", i, rows[i].in_err, r.err);
        run_free(&r);
    }
    ck_assert_int_eq(mock_requests(m), 0);
    mock_stop(m);
}
END_TEST

START_TEST(test_cli_sigint)
{
    mock_cfg cfg = {.first_delay_ms = 5000, .token_delay_ms = 10};
    mock_server *m = mock_start(&cfg);
    ck_assert(m);
    char url[64];
    snprintf(url, sizeof url, "http://127.0.0.1:%d", mock_port(m));
    const char *args[] = {"bench", "serve", "--base-url", url, "--num-prompts", "6", "--max-concurrency", "3",
                          "--random-input-len", "4", "--random-output-len", "2", NULL};
    run_out r = run_inferd(args, 500);
    ck_assert_msg(r.status == 1, "exit %d\n%s%s", r.status, r.out, r.err);
    ck_assert(strstr(r.out, "Interrupted"));
    ck_assert(strstr(r.out, "Interrupted (not completed):             6 "));
    ck_assert(strstr(r.out, "Serving Benchmark Result"));
    ck_assert_msg(r.seconds < 2.0, "exit %.2f s after the SIGINT", r.seconds);
    run_free(&r);
    mock_stop(m);
}
END_TEST

int main(void)
{
    const char *bin = test_inferd_bin();
    if (!bin || access(bin, X_OK) != 0)
        test_skip("inferd binary not built");
    Suite *s = suite_create("bench_cli");
    TCase *tc = tcase_create("core");
    tcase_set_timeout(tc, 60);
    tcase_add_test(tc, test_cli_ok);
    tcase_add_test(tc, test_cli_failures);
    tcase_add_test(tc, test_cli_usage);
    tcase_add_test(tc, test_cli_sigint);
    tcase_add_test(tc, test_cli_output_len_result_dir);
    tcase_add_test(tc, test_cli_goodput_percentiles);
    tcase_add_test(tc, test_cli_new_flags_bad);
    suite_add_tcase(s, tc);
    return test_run_suite(s);
}
