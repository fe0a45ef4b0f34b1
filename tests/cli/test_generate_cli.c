/* tests/model/test_generate_cli.c: `inferd generate` end to end on the CPU
 * backend with stories260K: the golden cases from prompt ids and from text
 * (printed text == golden stdout_text minus the prompt), and a table of bad
 * invocations that must each fail with a one-line error and a non-zero exit.
 */
#include <cjson/cJSON.h>
#include <stdio.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "common/alloc.h"
#include "common/util.h"
#include "test_util.h"

static cJSON *g_golden;
static char *g_model;
static const char *g_bin;

static void run(char *const *argv, char **out, char **err, int *rc)
{
    ck_assert_msg(test_run_cmd(argv, out, err, rc), "cannot run %s", argv[0]);
}

static char *ids_csv(const cJSON *arr)
{
    char *s = inferd_calloc(1, 8192);
    const cJSON *it;
    cJSON_ArrayForEach(it, arr)
    {
        size_t n = strlen(s);
        snprintf(s + n, 8192 - n, "%s%d", n ? "," : "", it->valueint);
    }
    return s;
}

/* Run one golden case; from_text selects --prompt over --prompt-ids. */
static void golden_case(const cJSON *c, bool from_text)
{
    const char *prompt = cJSON_GetObjectItem(c, "prompt")->valuestring;
    const char *want_all = cJSON_GetObjectItem(c, "stdout_text")->valuestring;
    int steps = cJSON_GetObjectItem(c, "steps")->valueint;
    int np = cJSON_GetArraySize(cJSON_GetObjectItem(c, "prompt_ids"));
    char *ids = ids_csv(cJSON_GetObjectItem(c, "prompt_ids"));
    char maxtok[16];
    snprintf(maxtok, sizeof maxtok, "%d", steps - np + 1); /* run.c samples at every position */
    char *argv[] = {(char *)g_bin,
                    "generate",
                    "--model",
                    g_model,
                    from_text ? "--prompt" : "--prompt-ids",
                    from_text ? (char *)prompt : ids,
                    "--temperature",
                    "0",
                    "--stop-token-ids",
                    "1",
                    "--max-tokens",
                    maxtok,
                    "--device",
                    "cpu",
                    NULL};
    char *out, *err;
    int rc;
    run(argv, &out, &err, &rc);
    ck_assert_msg(rc == 0, "exit %d: %s", rc, err);
    ck_assert_msg(strncmp(want_all, prompt, strlen(prompt)) == 0, "golden text starts with the prompt");
    const char *want = want_all + strlen(prompt);
    ck_assert_msg(strcmp(out, want) == 0, "case '%s':\n got: '%s'\nwant: '%s'", prompt, out, want);
    ck_assert_msg(strstr(err, "prompt tokens:") && strstr(err, "tok/s"), "timing line: %s", err);
    inferd_free(out);
    inferd_free(err);
    inferd_free(ids);
}

START_TEST(test_golden_from_ids)
{
    const cJSON *c;
    cJSON_ArrayForEach(c, cJSON_GetObjectItem(g_golden, "cases")) golden_case(c, false);
}
END_TEST

START_TEST(test_golden_from_text)
{
    const cJSON *c;
    cJSON_ArrayForEach(c, cJSON_GetObjectItem(g_golden, "cases")) golden_case(c, true);
}
END_TEST

/* argv tail after "generate --model M --device cpu". */
static void gen(const char *const *tail, char **out, char **err)
{
    char *argv[24] = {(char *)g_bin, "generate", "--model", g_model, "--device", "cpu"};
    int k = 6, rc;
    for (int j = 0; tail[j]; j++)
        argv[k++] = (char *)tail[j];
    argv[k] = NULL;
    run(argv, out, err, &rc);
    ck_assert_msg(rc == 0, "exit %d: %s", rc, *err);
}

/* --prompt --stop stops on the string (text ends before it, finish reason
 * stop), and the one-prompt run prints what --prompts-file prints for the
 * same request: the same text, and with --json the same JSON line. */
START_TEST(test_stop_string_equals_prompts_file)
{
    static const char *const text_run[] = {"--prompt", "Once upon a time", "--temperature", "0", "--max-tokens",
                                           "40", "--stop", "zzz", "--stop", "Lily", NULL};
    static const char *const json_run[] = {"--prompt", "Once upon a time", "--temperature", "0", "--max-tokens",
                                           "40", "--stop", "zzz", "--stop", "Lily", "--json", NULL};
    char *out, *err, *jout, *jerr, *fout, *ferr;
    gen(text_run, &out, &err);
    ck_assert_str_eq(out, ", there was a little girl named ");
    ck_assert_msg(strstr(err, "prompt tokens:") && strstr(err, "tok/s"), "timing line: %s", err);
    gen(json_run, &jout, &jerr);
    const char *line = "{\"prompt\": \"Once upon a time\", \"max_tokens\": 40, \"temperature\": 0, "
                       "\"stop\": [\"zzz\", \"Lily\"]}\n";
    char *path = test_write_temp("gen-stop", line, strlen(line));
    const char *const file_run[] = {"--prompts-file", path, NULL};
    gen(file_run, &fout, &ferr);
    ck_assert_str_eq(jout, fout);
    cJSON *j = cJSON_Parse(fout);
    ck_assert_ptr_nonnull(j);
    ck_assert_str_eq(cJSON_GetObjectItem(j, "finish_reason")->valuestring, "stop");
    ck_assert_str_eq(cJSON_GetObjectItem(j, "text")->valuestring, out);
    cJSON_Delete(j);
    unlink(path);
    inferd_free(path);
    inferd_free(out);
    inferd_free(err);
    inferd_free(jout);
    inferd_free(jerr);
    inferd_free(fout);
    inferd_free(ferr);
}
END_TEST

/* --kv-cache-dtype fp8 (and its alias fp8_e4m3) runs: the fp8 KV cache is
 * logged, and text comes out. */
START_TEST(test_kv_cache_fp8)
{
    static const char *const names[] = {"fp8", "fp8_e4m3"};
    for (size_t i = 0; i < INFERD_ARRAY_LEN(names); i++) {
        const char *const tail[] = {"--prompt", "Once upon a time", "--temperature", "0", "--max-tokens", "16",
                                    "--log-level", "info", "--kv-cache-dtype", names[i], NULL};
        char *out, *err;
        gen(tail, &out, &err);
        ck_assert_msg(strlen(out) > 10, "--kv-cache-dtype %s: stdout '%s'", names[i], out);
        ck_assert_msg(strstr(err, "KV cache") && strstr(err, "FP8_E4M3"), "no fp8 KV cache in the log: %s",
                      err);
        inferd_free(out);
        inferd_free(err);
    }
}
END_TEST

START_TEST(test_bad_invocations)
{
    static const char *rows[][8] = {
        {"--bogus-flag", NULL},
        {"--prompt-ids", "1,2", NULL},                              /* no --model */
        {"--model", "/nonexistent/dir", "--prompt-ids", "1", NULL}, /* missing model */
        {"--model", "@M", NULL},                                    /* no prompt */
        {"--model", "@M", "--prompt-ids", "1,x,3", NULL},
        {"--model", "@M", "--prompt-ids", "1,99999", NULL}, /* id outside vocab */
        {"--model", "@M", "--prompt-ids", "1", "--max-tokens", "0", NULL},
        {"--model", "@M", "--prompt-ids", "1", "--temperature", "-1", NULL},
        {"--model", "@M", "--prompt-ids", "1", "--top-p", "1.5", NULL},
        {"--model", "@M", "--prompt-ids", "1", "--seed", "abc", NULL},
        {"--model", "@M", "--prompt-ids", "1", "--block-size", "0", NULL},
        {"--model", "@M", "--prompt-ids", "1", "--device", "tpu", NULL},
        {"--model", "@M", "--prompt-ids", "1", "--max-tokens", NULL}, /* missing value */
        {"--model", "@M", "--prompt", "x", "--prompt-ids", "1", NULL},
        {"--model", "@M", "--prompt-ids", "1", "--kv-cache-bytes", "100", NULL}, /* too small */
        {"--model", "@M", "--prompt-ids", "1", "--gpu-memory-utilization", "1.5", NULL},
        {"--model", "@M", "--prompt-ids", "1", "--load-format", "gguf", NULL},
        {"--model", "@M", "--prompt-ids", "1", "--kv-cache-dtype", "fp16", NULL},
        {"--model", "@M", "--prompt-ids", "1", "--log-level", "loud", NULL},
        {"--model", "@M", "--prompt-ids", "1", "--threads", "-1", NULL},
        {"--model", "@M", "--prompt-ids", "1", "--kv-cache-bytes", "1Q", NULL},
        {"--model", "@M", "--prompt-ids", "1", "--no-max-num-seqs", NULL}, /* not a boolean */
        {"--model", "@M", "--prompt-ids", "1", "--no-enable-prefix-caching=1", NULL},
        {"--model", "@M", "--prompt-ids", "1", "--max-model-len", NULL}, /* missing value */
        {"--model", "@M", "--prompt", "x", "--stop", "", NULL},                 /* empty stop string */
        {"--model", "@M", "--prompt-ids", "1", "--stop-token-ids", "1,600", NULL}, /* id outside vocab */
        {"--model", "@M", "--prompt-ids", "1", "--min-tokens", "300", NULL}, /* > max_tokens 256 */
    };
    for (size_t r = 0; r < INFERD_ARRAY_LEN(rows); r++) {
        char *argv[16] = {(char *)g_bin, "generate", "--device", "cpu"};
        int k = 4;
        for (int j = 0; rows[r][j]; j++)
            argv[k++] = strcmp(rows[r][j], "@M") == 0 ? g_model : (char *)rows[r][j];
        argv[k] = NULL;
        char *out, *err;
        int rc;
        run(argv, &out, &err, &rc);
        ck_assert_msg(rc > 0, "row %zu: exit %d (want a clean non-zero exit)", r, rc);
        ck_assert_msg(strstr(err, "error") != NULL, "row %zu: stderr '%s'", r, err);
        ck_assert_msg(strcmp(out, "") == 0, "row %zu: stdout '%s'", r, out);
        inferd_free(out);
        inferd_free(err);
    }
}
END_TEST

/* The multi-node flags end to end (CPU backend, one rank a process): node
 * 1 started in the background with --node-rank 1 follows node 0, which
 * prints exactly what one process at --tensor-parallel-size 2 prints, and
 * both exit 0. The port comes from a probe bind on loopback. */
START_TEST(test_two_nodes)
{
    char port[16];
    snprintf(port, sizeof port, "%d", test_free_port());
    char *base[] = {(char *)g_bin, "generate", "--model", g_model, "--device", "cpu", "--prompt", "Once upon a time",
                    "--temperature", "0", "--max-tokens", "48", "--tensor-parallel-size", "2", NULL};
    char *out1, *err1;
    int rc1;
    run(base, &out1, &err1, &rc1);
    ck_assert_msg(rc1 == 0, "one process: exit %d: %s", rc1, err1);
    char *node[2][32];
    for (int k = 0; k < 2; k++) {
        int j = 0;
        for (; base[j]; j++)
            node[k][j] = base[j];
        char *extra[] = {"--nnodes", "2", "--node-rank", k ? "1" : "0", "--master-addr", "127.0.0.1",
                         "--master-port", port, "--dist-timeout", "60", NULL};
        for (int e = 0; extra[e]; e++)
            node[k][j++] = extra[e];
        node[k][j] = NULL;
    }
    pid_t follower = fork();
    ck_assert(follower >= 0);
    if (follower == 0) {
        execv(g_bin, node[1]);
        _exit(127);
    }
    char *out0, *err0;
    int rc0;
    run(node[0], &out0, &err0, &rc0);
    int status = 0;
    ck_assert(waitpid(follower, &status, 0) == follower);
    ck_assert_msg(rc0 == 0, "node 0: exit %d: %s", rc0, err0);
    ck_assert_msg(WIFEXITED(status) && WEXITSTATUS(status) == 0, "node 1: status %d", status);
    ck_assert_msg(strlen(out1) > 20 && strcmp(out0, out1) == 0, "two nodes printed\n'%s'\none process\n'%s'", out0,
                  out1);
    inferd_free(out1);
    inferd_free(err1);
    inferd_free(out0);
    inferd_free(err0);
}
END_TEST

START_TEST(test_help)
{
    char *argv[] = {(char *)g_bin, "generate", "--help", NULL};
    char *out, *err;
    int rc;
    run(argv, &out, &err, &rc);
    ck_assert_int_eq(rc, 0);
    ck_assert(strstr(out, "--prompt-ids") != NULL);
    inferd_free(out);
    inferd_free(err);
}
END_TEST

int main(void)
{
    g_bin = test_inferd_bin();
    g_model = test_fixture_path("models/stories260K");
    if (!g_bin)
        test_skip("inferd binary not found (run through ctest)");
    g_golden = test_golden_stories();
    Suite *s = suite_create("generate cli");
    TCase *tc = tcase_create("cli");
    tcase_set_timeout(tc, 300);
    tcase_add_test(tc, test_golden_from_ids);
    tcase_add_test(tc, test_golden_from_text);
    tcase_add_test(tc, test_stop_string_equals_prompts_file);
    tcase_add_test(tc, test_kv_cache_fp8);
    tcase_add_test(tc, test_bad_invocations);
    tcase_add_test(tc, test_help);
    tcase_add_test(tc, test_two_nodes);
    suite_add_tcase(s, tc);
    int rc = test_run_suite(s);
    cJSON_Delete(g_golden);
    inferd_free(g_model);
    return rc;
}
