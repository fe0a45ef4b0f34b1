/* tests/bench/test_bench_inferd.c: `inferd bench serve` against a real
 * `inferd serve` (CPU backend, stories260K, loopback), issue 7's acceptance
 * test. The bench runs as a child process of the built binary and writes its
 * result JSON; the test checks it against the server's own accounting:
 *
 * - completions: N requests at concurrency C all complete; the bench's
 *   total_output_tokens equals the server's inferd:generation_tokens_total
 *   delta (== N * output len, --ignore-eos) and total_input_tokens the
 *   inferd:prompt_tokens_total delta (== N * input len: random prompts go as
 *   id arrays, so the server sees exactly the drawn length); every request's
 *   TTFT <= E2E; median <= p90 <= p95 <= p99 for TTFT, TPOT, ITL and E2EL.
 * - chat (--endpoint /v1/chat/completions, server with --chat-template
 *   chatml): N complete, token totals equal the counter deltas (the chat
 *   template makes the prompt lengths differ from the drawn ones; the
 *   server's usage is the authority).
 * - an unreachable server (a free port with nothing listening): non-zero
 *   exit and a report with every request failed as a connect error.
 *
 * Cleanup: each test starts and stops its own server inside the test
 * function (Check forks per test). On the normal path ts_stop() sends SIGTERM,
 * reaps it and the test checks its clean exit (0). When an assertion ends the
 * forked test process instead, the server still gets SIGTERM and is reaped:
 * it is spawned here (not by ts_start(), whose PR_SET_PDEATHSIG is SIGKILL)
 * in its own process group (Check SIGKILLs the test's group) with
 * PR_SET_PDEATHSIG = SIGTERM; the runner process is a child subreaper,
 * so the orphaned server becomes its child; and an unchecked teardown, which
 * Check runs in the runner after every test, waits for the pid the test
 * recorded in a shared page (SIGKILL only after 30 s). The bench gets a
 * per-request --timeout so a stuck server cannot hang the test either.
 * Skips (77) without the built binary or the fixtures.
 */
#include <arpa/inet.h>
#include <curl/curl.h>
#include <fcntl.h>
#include <math.h>
#include <netinet/in.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cjson/cJSON.h>

#include "common/alloc.h"
#include "common/util.h"
#include "server/ts_client.h"
#include "test_util.h"

#define GEN_SERIES "inferd:generation_tokens_total"
#define PROMPT_SERIES "inferd:prompt_tokens_total"

enum { N_PROMPTS = 24, IN_LEN = 24, OUT_LEN = 12, CONCURRENCY = 6, N_CHAT = 12, N_UNREACHABLE = 6 };
enum { MAX_SERVER_ARGS = 32, START_TRIES = 3 };
#define HEALTH_TIMEOUT_S 30.0
#define STOP_TIMEOUT_S 30.0

/* The server the current test started (pid 0: none) and its log, in a
 * MAP_SHARED page so the runner's teardown sees what the forked test wrote. */
typedef struct {
    volatile pid_t pid;
    char log_path[256];
} live_server;
static live_server *g_live;

/* What one bench run left behind. */
typedef struct {
    int exit_code;
    char *out, *err; /* heap: the bench's stdout / stderr */
    cJSON *result;   /* parsed result JSON, NULL when absent or malformed */
} bench_run;

static void bench_run_free(bench_run *r)
{
    inferd_free(r->out);
    inferd_free(r->err);
    cJSON_Delete(r->result);
}

/* Heap path of the model fixture; skips (77) without it or the binary.
 * main() calls it before any test forks. */
static char *require_model(void)
{
    if (!test_inferd_bin())
        test_skip("INFERD_BIN not set (run through ctest)");
    char *model = test_fixture_path("models/stories260K");
    if (!model || access(model, R_OK) != 0)
        test_skip("fixture models/stories260K not found");
    return model;
}

/* A loopback port nothing listens on right now (bound, then released). */
static int unused_port(void)
{
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    ck_assert(fd >= 0);
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = 0, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    socklen_t len = sizeof a;
    ck_assert(bind(fd, (struct sockaddr *)&a, sizeof a) == 0);
    ck_assert(getsockname(fd, (struct sockaddr *)&a, &len) == 0);
    close(fd);
    return ntohs(a.sin_port);
}

/* Fork `inferd serve` with the test flags plus args; stdout and stderr go
 * to s->log_path. The child gets SIGTERM when the test process dies. */
static pid_t spawn_server(const ts_server *s, const char *model, const char *const *args)
{
    char port[16];
    snprintf(port, sizeof port, "%d", s->port);
    const char *argv[MAX_SERVER_ARGS] = {
        test_inferd_bin(), "serve",     "--model", model, "--device",    "cpu", "--threads", "1",
        "--host",          "127.0.0.1", "--port",  port,  "--log-level", "info"};
    size_t n = 14;
    for (size_t i = 0; args && args[i] && n < MAX_SERVER_ARGS - 1; i++)
        argv[n++] = args[i];
    argv[n] = NULL;
    pid_t parent = getpid();
    pid_t pid = fork();
    if (pid == 0) {
        /* own process group: Check SIGKILLs the test's group when a test
         * ends, which would cut the SIGTERM shutdown short */
        setpgid(0, 0);
        prctl(PR_SET_PDEATHSIG, SIGTERM);
        if (getppid() != parent) /* the test died before prctl */
            _exit(1);
        int fd = open(s->log_path, O_WRONLY | O_CREAT | O_APPEND, 0644);
        if (fd >= 0) {
            dup2(fd, STDOUT_FILENO);
            dup2(fd, STDERR_FILENO);
            close(fd);
        }
        execv(argv[0], (char *const *)argv);
        _exit(127);
    }
    return pid;
}

/* Poll /health until 200; false when the server exited or timeout_s passed. */
static bool wait_healthy(ts_server *s, double timeout_s)
{
    double end = ts_now() + timeout_s;
    while (ts_now() < end) {
        if (waitpid(s->pid, NULL, WNOHANG) == s->pid) {
            s->pid = -1;
            g_live->pid = 0;
            return false;
        }
        ts_resp r = ts_request(s, "GET", "/health", NULL, 0, "");
        long code = r.status;
        ts_resp_free(&r);
        if (code == 200)
            return true;
        ts_sleep_ms(50);
    }
    return false;
}

/* Start `inferd serve` on stories260K on a free loopback port (another port
 * when it could not bind) and wait for /health; the pid is recorded for the
 * teardown. Returns false (log printed) when it never came up. */
static bool start_server(ts_server *s, const char *model, const char *const *args)
{
    memset(s, 0, sizeof *s);
    snprintf(s->log_path, sizeof s->log_path, "/tmp/inferd-bench-e2e-%d.log", (int)getpid());
    for (int attempt = 0; attempt < START_TRIES; attempt++) {
        s->port = unused_port();
        snprintf(s->base, sizeof s->base, "http://127.0.0.1:%d", s->port);
        s->pid = spawn_server(s, model, args);
        ck_assert(s->pid > 0);
        snprintf(g_live->log_path, sizeof g_live->log_path, "%s", s->log_path);
        g_live->pid = s->pid;
        if (wait_healthy(s, HEALTH_TIMEOUT_S))
            return true;
        if (s->pid > 0) {
            kill(s->pid, SIGKILL);
            waitpid(s->pid, NULL, 0);
            s->pid = -1;
            g_live->pid = 0;
        }
    }
    ts_dump_log(s);
    return false;
}

/* Unchecked teardown, run in the runner process after each test: when the
 * test ended with its server still running (a failed assertion), SIGTERM it
 * (the kernel already sent one through PDEATHSIG) and reap it; SIGKILL after
 * STOP_TIMEOUT_S. Then reap any other orphan (a bench cut off by a timeout). */
static void reap_leftovers(void)
{
    pid_t pid = g_live->pid;
    if (pid > 0) {
        kill(pid, SIGTERM);
        double end = ts_now() + STOP_TIMEOUT_S;
        int st = 0;
        pid_t r = 0;
        while ((r = waitpid(pid, &st, WNOHANG)) == 0 && ts_now() < end)
            ts_sleep_ms(20);
        if (r == 0) {
            kill(pid, SIGKILL);
            waitpid(pid, &st, 0);
        }
        int rc = WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
        fprintf(stderr, "teardown: server pid %d left by a failed test stopped: %s, exit %d (log %s)\n",
                (int)pid, r == 0 ? "SIGKILL after timeout" : "SIGTERM", rc, g_live->log_path);
        g_live->pid = 0;
    }
    while (waitpid(-1, NULL, WNOHANG) > 0)
        ;
}

/* The id the server serves its model under (first of GET /v1/models). */
static char *served_model(const ts_server *s)
{
    ts_resp r = ts_request(s, "GET", "/v1/models", NULL, 0, NULL);
    ck_assert_int_eq(r.status, 200);
    cJSON *j = cJSON_Parse(r.body);
    const cJSON *id = cJSON_GetObjectItem(cJSON_GetArrayItem(cJSON_GetObjectItem(j, "data"), 0), "id");
    ck_assert_msg(cJSON_IsString(id), "GET /v1/models: no data[0].id in %s", r.body);
    char *name = inferd_strdup(id->valuestring);
    cJSON_Delete(j);
    ts_resp_free(&r);
    return name;
}

/* Run `inferd bench serve` with the fixed flags of these tests plus `extra`
 * (NULL-terminated) against base_url, and parse its result JSON. */
static bench_run run_bench(const char *base_url, const char *model_name, const char *tokenizer, int n_prompts,
                           const char *const *extra)
{
    char n_txt[16], in_txt[16], out_txt[16], conc_txt[16];
    snprintf(n_txt, sizeof n_txt, "%d", n_prompts);
    snprintf(in_txt, sizeof in_txt, "%d", IN_LEN);
    snprintf(out_txt, sizeof out_txt, "%d", OUT_LEN);
    snprintf(conc_txt, sizeof conc_txt, "%d", CONCURRENCY);
    char *json_path = test_write_temp("bench-inferd-result", "", 0);
    unlink(json_path); /* the bench must create it */
    const char *fixed[] = {test_inferd_bin(),
                           "bench",
                           "serve",
                           "--base-url",
                           base_url,
                           "--model",
                           model_name,
                           "--tokenizer",
                           tokenizer,
                           "--dataset-name",
                           "random",
                           "--random-input-len",
                           in_txt,
                           "--random-output-len",
                           out_txt,
                           "--num-prompts",
                           n_txt,
                           "--max-concurrency",
                           conc_txt,
                           "--ignore-eos",
                           "--seed",
                           "1",
                           "--timeout",
                           "60",
                           "--disable-tqdm",
                           "--save-result",
                           "--result-filename",
                           json_path};
    const char *argv[64];
    size_t n = 0;
    for (size_t i = 0; i < INFERD_ARRAY_LEN(fixed); i++)
        argv[n++] = fixed[i];
    for (size_t i = 0; extra && extra[i] && n < INFERD_ARRAY_LEN(argv) - 1; i++)
        argv[n++] = extra[i];
    argv[n] = NULL;

    bench_run r = {0};
    double t0 = util_now_s();
    ck_assert(test_run_cmd((char *const *)argv, &r.out, &r.err, &r.exit_code));
    fprintf(stderr, "bench (%d prompts, %s) exit %d in %.2f s\n", n_prompts, base_url, r.exit_code,
            util_now_s() - t0);
    char *txt = NULL;
    if (util_read_file(json_path, 0, &txt, NULL) == INFERD_OK) {
        r.result = cJSON_Parse(txt);
        inferd_free(txt);
    }
    unlink(json_path);
    inferd_free(json_path);
    return r;
}

static double num(const cJSON *o, const char *key)
{
    const cJSON *v = cJSON_GetObjectItem(o, key);
    ck_assert_msg(cJSON_IsNumber(v), "result JSON: %s missing or not a number", key);
    return v->valuedouble;
}

static const cJSON *array_of(const cJSON *o, const char *key, int n)
{
    const cJSON *a = cJSON_GetObjectItem(o, key);
    ck_assert_msg(cJSON_IsArray(a), "result JSON: %s missing", key);
    ck_assert_int_eq(cJSON_GetArraySize(a), n);
    return a;
}

/* median <= p90 <= p95 <= p99 (all >= 0) for each latency distribution;
 * prints them for the report. */
static void check_percentiles(const cJSON *res)
{
    static const char *const metrics[] = {"ttft", "tpot", "itl", "e2el"};
    static const char *const stats[] = {"mean", "median", "p90", "p95", "p99"};
    for (size_t m = 0; m < INFERD_ARRAY_LEN(metrics); m++) {
        double v[INFERD_ARRAY_LEN(stats)];
        for (size_t s = 0; s < INFERD_ARRAY_LEN(stats); s++) {
            char key[64];
            snprintf(key, sizeof key, "%s_%s_ms", stats[s], metrics[m]);
            v[s] = num(res, key);
            ck_assert_msg(v[s] >= 0.0, "%s = %g < 0", key, v[s]);
            ck_assert_msg(s < 2 || v[s] >= v[s - 1], "%s_%s_ms = %g < %s_%s_ms = %g", stats[s], metrics[m],
                          v[s], stats[s - 1], metrics[m], v[s - 1]);
        }
        fprintf(stderr, "  %-4s ms: mean %.3f median %.3f p90 %.3f p95 %.3f p99 %.3f\n", metrics[m], v[0],
                v[1], v[2], v[3], v[4]);
    }
}

/* Per-request records: every request succeeded with out_len tokens (and
 * in_len prompt tokens when in_len > 0), 0 < TTFT <= E2E, ITL gaps >= 0; the
 * lengths add up to the totals. */
static void check_requests(const cJSON *res, int n, int in_len, int out_len)
{
    const cJSON *ins = array_of(res, "input_lens", n), *outs = array_of(res, "output_lens", n);
    const cJSON *ttfts = array_of(res, "ttfts", n), *e2els = array_of(res, "e2els", n);
    const cJSON *itls = array_of(res, "itls", n), *types = array_of(res, "error_types", n);
    double sum_in = 0, sum_out = 0, max_ttft = 0, max_e2el = 0;
    for (int i = 0; i < n; i++) {
        const char *type = cJSON_GetStringValue(cJSON_GetArrayItem(types, i));
        ck_assert_msg(type && !*type, "request %d failed: %s", i, type ? type : "?");
        double in = cJSON_GetArrayItem(ins, i)->valuedouble, out = cJSON_GetArrayItem(outs, i)->valuedouble;
        double ttft = cJSON_GetArrayItem(ttfts, i)->valuedouble,
               e2el = cJSON_GetArrayItem(e2els, i)->valuedouble;
        if (in_len > 0)
            ck_assert_msg(in == in_len, "request %d: %g prompt tokens, want %d", i, in, in_len);
        ck_assert_msg(out == out_len, "request %d: %g output tokens, want %d", i, out, out_len);
        ck_assert_msg(ttft > 0.0 && ttft <= e2el, "request %d: ttft %g s, e2el %g s", i, ttft, e2el);
        const cJSON *gap;
        cJSON_ArrayForEach(gap, cJSON_GetArrayItem(itls, i))
            ck_assert_msg(gap->valuedouble >= 0.0, "request %d: negative ITL gap %g", i, gap->valuedouble);
        sum_in += in;
        sum_out += out;
        max_ttft = fmax(max_ttft, ttft);
        max_e2el = fmax(max_e2el, e2el);
    }
    ck_assert_double_eq(sum_in, num(res, "total_input_tokens"));
    ck_assert_double_eq(sum_out, num(res, "total_output_tokens"));
    fprintf(stderr, "  per request: max ttft %.3f s, max e2el %.3f s\n", max_ttft, max_e2el);
}

/* Wait (5 s) until `series` reaches want (counters are published after each
 * engine step, so they can trail the last response a moment), then return
 * its value. */
static double counter_after(const ts_server *s, const char *series, double want)
{
    (void)ts_wait_metric(s, series, want, 5.0);
    double v = ts_metric(s, series);
    ck_assert_msg(!isnan(v), "/metrics: %s missing", series);
    return v;
}

static double counter_now(const ts_server *s, const char *series)
{
    double v = ts_metric(s, series);
    ck_assert_msg(!isnan(v), "/metrics: %s missing", series);
    return v;
}

static void stop_ok(ts_server *s)
{
    int rc = ts_stop(s, STOP_TIMEOUT_S);
    g_live->pid = 0;
    if (rc != 0)
        ts_dump_log(s);
    ck_assert_msg(rc == 0, "server exit status %d after SIGTERM", rc);
}

/* Start the server with --max-num-seqs 16 (+ extra), run the bench with
 * bench_extra, check the report against the server's counters. in_len > 0
 * also pins the per-request and total prompt lengths. */
static void bench_against_server(const char *const *server_extra, const char *const *bench_extra, int n,
                                 int in_len)
{
    char *model = require_model();
    const char *args[8] = {"--max-num-seqs", "16"};
    for (size_t i = 0; server_extra && server_extra[i] && i + 3 < INFERD_ARRAY_LEN(args); i++)
        args[2 + i] = server_extra[i];
    ts_server s;
    ck_assert_msg(start_server(&s, model, args), "inferd serve did not come up");
    char *name = served_model(&s);
    double gen0 = counter_now(&s, GEN_SERIES), prompt0 = counter_now(&s, PROMPT_SERIES);

    bench_run r = run_bench(s.base, name, model, n, bench_extra);
    ck_assert_msg(r.exit_code == 0, "bench exit %d\nstdout:\n%s\nstderr:\n%s", r.exit_code, r.out, r.err);
    ck_assert_msg(r.result != NULL, "no result JSON\nstdout:\n%s", r.out);
    const cJSON *res = r.result;
    double out_tot = num(res, "total_output_tokens"), in_tot = num(res, "total_input_tokens");
    double gen = counter_after(&s, GEN_SERIES, gen0 + out_tot) - gen0;
    double prompt = counter_after(&s, PROMPT_SERIES, prompt0 + in_tot) - prompt0;
    fprintf(stderr,
            "  completed %g failed %g duration %.3f s; output tokens %g (server %g), input tokens %g (server "
            "%g); "
            "%.2f req/s, %.1f output tok/s, peak %.1f tok/s, peak concurrency %g\n",
            num(res, "completed"), num(res, "failed"), num(res, "duration"), out_tot, gen, in_tot, prompt,
            num(res, "request_throughput"), num(res, "output_throughput"),
            num(res, "max_output_tokens_per_s"), num(res, "max_concurrent_requests"));

    ck_assert_int_eq((int)num(res, "completed"), n);
    ck_assert_int_eq((int)num(res, "failed"), 0);
    ck_assert_double_eq(out_tot, gen);
    ck_assert_double_eq(out_tot, (double)n * OUT_LEN);
    ck_assert_double_eq(in_tot, prompt);
    if (in_len > 0) {
        ck_assert_double_eq(in_tot, (double)n * in_len);
        ck_assert_int_eq((int)num(res, "input_len_mismatches"), 0);
    }
    ck_assert(num(res, "max_concurrent_requests") <= CONCURRENCY);
    check_requests(res, n, in_len, OUT_LEN);
    check_percentiles(res);

    bench_run_free(&r);
    inferd_free(name);
    inferd_free(model);
    stop_ok(&s);
}

START_TEST(test_bench_completions)
{
    bench_against_server(NULL, NULL, N_PROMPTS, IN_LEN);
}
END_TEST

START_TEST(test_bench_chat)
{
    const char *server_extra[] = {"--chat-template", "chatml", NULL};
    const char *bench_extra[] = {"--endpoint", "/v1/chat/completions", NULL};
    bench_against_server(server_extra, bench_extra, N_CHAT, 0);
}
END_TEST

START_TEST(test_bench_unreachable)
{
    char *model = require_model();
    char url[64];
    snprintf(url, sizeof url, "http://127.0.0.1:%d", unused_port());
    bench_run r = run_bench(url, "stories260K", model, N_UNREACHABLE, NULL);
    ck_assert_msg(r.exit_code != 0, "unreachable server: exit 0\nstdout:\n%s", r.out);
    ck_assert_msg(r.exit_code != 127, "could not run the bench: %s", r.err);
    ck_assert_msg(r.result != NULL, "no result JSON\nstdout:\n%s\nstderr:\n%s", r.out, r.err);
    const cJSON *res = r.result;
    fprintf(stderr, "  unreachable: exit %d, completed %g, failed %g (connect %g)\n", r.exit_code,
            num(res, "completed"), num(res, "failed"),
            num(cJSON_GetObjectItem(res, "failed_by_type"), "connect"));
    ck_assert_int_eq((int)num(res, "completed"), 0);
    ck_assert_int_eq((int)num(res, "failed"), N_UNREACHABLE);
    ck_assert_int_eq((int)num(cJSON_GetObjectItem(res, "failed_by_type"), "connect"), N_UNREACHABLE);
    ck_assert_double_eq(num(res, "total_output_tokens"), 0);
    const cJSON *types = array_of(res, "error_types", N_UNREACHABLE);
    for (int i = 0; i < N_UNREACHABLE; i++)
        ck_assert_str_eq(cJSON_GetStringValue(cJSON_GetArrayItem(types, i)), "connect");
    ck_assert(strstr(r.out, "Failed requests:") != NULL);
    bench_run_free(&r);
    inferd_free(model);
}
END_TEST

/* One TCase per test: Check runs unchecked fixtures once per TCase, and the
 * teardown must follow every test. */
static void add_case(Suite *s, const char *name, const TTest *t)
{
    TCase *tc = tcase_create(name);
    tcase_set_timeout(tc, 180);
    tcase_add_unchecked_fixture(tc, NULL, reap_leftovers);
    tcase_add_test(tc, t);
    suite_add_tcase(s, tc);
}

static Suite *bench_inferd_suite(void)
{
    Suite *s = suite_create("bench_inferd");
    add_case(s, "completions", test_bench_completions);
    add_case(s, "chat", test_bench_chat);
    add_case(s, "unreachable", test_bench_unreachable);
    return s;
}

int main(void)
{
    /* skip here, before Check forks: a skip inside a forked test would count
     * as a failure */
    const char *bin = test_inferd_bin();
    if (!bin || access(bin, X_OK) != 0)
        test_skip("inferd binary not built (run through ctest)");
    inferd_free(require_model());
    void *page = mmap(NULL, sizeof(live_server), PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    if (page == MAP_FAILED) {
        perror("mmap");
        return 1;
    }
    g_live = page;
    /* orphans (a server whose test died) become our children, for the teardown */
    prctl(PR_SET_CHILD_SUBREAPER, 1);
    curl_global_init(CURL_GLOBAL_DEFAULT);
    int rc = test_run_suite(bench_inferd_suite());
    curl_global_cleanup();
    munmap(page, sizeof(live_server));
    return rc;
}
