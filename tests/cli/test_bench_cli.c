/* tests/bench/test_bench_cli.c: the `inferd bench serve` command line, run
 * as a process ($INFERD_BIN) against the mock OpenAI server: exit status 0
 * with a vLLM-style table and result JSON on success; 1 with a clean report
 * for an unreachable server, HTTP errors and Ctrl-C (partial results); 2 for
 * bad flags. Skips when the binary has not been built. */
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
    double seconds;
} run_out;

static char *slurp(const char *path)
{
    char *s = NULL;
    if (util_read_file(path, 0, &s, NULL) != INFERD_OK)
        s = inferd_strdup("");
    return s;
}

/* Run inferd with args; SIGINT it after sigint_ms when > 0. */
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
        struct timespec ts = {sigint_ms / 1000, (long)(sigint_ms % 1000) * 1000000L};
        nanosleep(&ts, NULL);
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
        {{"bench", "--help", NULL}, 0, "serve"},
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
    ck_assert_msg(r.seconds < 2.0, "took %.2f s", r.seconds);
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
    suite_add_tcase(s, tc);
    return test_run_suite(s);
}
