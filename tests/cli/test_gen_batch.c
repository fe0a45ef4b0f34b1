/* tests/scheduler/test_gen_batch.c: `inferd generate --prompts-file`
 * (cli/gen_batch.c) on the real stories260K model, CPU backend: JSON
 * lines and plain text input, output order and fields, golden greedy tokens
 * and text, the stderr summary, and a table of bad lines (each must give a
 * one-line error naming the line and a non-zero exit code). */
#include <cjson/cJSON.h>
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "common/alloc.h"
#include "common/log.h"
#include "common/util.h"
#include "cli/gen_batch.h"
#include "test_util.h"

static model *g_m;
static tokenizer *g_tok;

static void setup(void)
{
    char *dir = test_fixture_path("models/stories260K");
    model_opts o;
    model_opts_default(&o);
    o.model_dir = dir;
    o.n_threads = 1;
    o.max_num_seqs = 16;
    o.max_num_batched_tokens = 256;
    ck_assert_msg(model_load(&o, &g_m) == INFERD_OK, "%s", inferd_last_error());
    if (tok_load(dir, &g_tok) != INFERD_OK)
        g_tok = NULL;
    inferd_free(dir);
}

static void teardown(void)
{
    model_free(g_m);
    if (g_tok)
        tok_free(g_tok);
}

/* Run gen_run_prompts_file on `content`, capturing stdout and stderr. */
static int run(const char *content, char **out, char **err)
{
    char *path = test_write_temp("gb-in", content, strlen(content));
    char *po = test_write_temp("gb-out", "", 0), *pe = test_write_temp("gb-err", "", 0);
    fflush(stdout);
    fflush(stderr);
    int so = dup(1), se = dup(2);
    int fo = open(po, O_WRONLY | O_TRUNC), fe = open(pe, O_WRONLY | O_TRUNC);
    dup2(fo, 1);
    dup2(fe, 2);
    engine_opts eo;
    engine_opts_default(&eo);
    eo.max_num_seqs = 16;
    eo.max_num_batched_tokens = 256;
    sampling_params sp;
    sampling_params_default(&sp);
    sp.temperature = 0;
    sp.max_tokens = 24;
    int rc = gen_run_prompts_file(g_m, g_tok, &eo, &sp, path);
    fflush(stdout);
    fflush(stderr);
    dup2(so, 1);
    dup2(se, 2);
    close(so);
    close(se);
    close(fo);
    close(fe);
    size_t n;
    ck_assert_int_eq(util_read_file(po, 0, out, &n), INFERD_OK);
    ck_assert_int_eq(util_read_file(pe, 0, err, &n), INFERD_OK);
    unlink(path);
    unlink(po);
    unlink(pe);
    inferd_free(path);
    inferd_free(po);
    inferd_free(pe);
    return rc;
}

START_TEST(test_json_lines)
{
    static const int32_t golden[12] = {432, 383, 286, 261, 376, 298, 315, 421, 395, 317, 426, 338};
    char in[8192];
    size_t off = 0;
    off += (size_t)snprintf(in + off, sizeof in - off,
                            "{\"prompt_ids\": [1, 403, 407, 261, 378], \"max_tokens\": 12}\n\n");
    for (int i = 0; i < 16; i++)
        off +=
            (size_t)snprintf(in + off, sizeof in - off,
                             "{\"prompt_ids\": [1, %d, %d, 261], \"max_tokens\": %d, \"temperature\": 0.8, "
                             "\"top_p\": 0.9, \"seed\": %d, \"stop_token_ids\": [1], \"ignore_eos\": true}\n",
                             300 + i, 400 + i, 5 + i, i);
    char *out, *err;
    int rc = run(in, &out, &err);
    ck_assert_msg(rc == 0, "rc %d: %s", rc, err);
    ck_assert_msg(strstr(err, "prompt tokens: ") && strstr(err, "preemptions: ") && strstr(err, "tok/s"),
                  "%s", err);
    int n = 0;
    for (char *line = strtok(out, "\n"); line; line = strtok(NULL, "\n"), n++) {
        cJSON *j = cJSON_Parse(line);
        ck_assert_ptr_nonnull(j);
        ck_assert_int_eq(cJSON_GetObjectItem(j, "index")->valueint, n);
        const cJSON *ids = cJSON_GetObjectItem(j, "token_ids");
        int n_ids = cJSON_GetArraySize(ids);
        ck_assert_int_eq(cJSON_GetObjectItem(j, "completion_tokens")->valueint, n_ids);
        ck_assert(cJSON_IsString(cJSON_GetObjectItem(j, "text")));
        const char *fin = cJSON_GetObjectItem(j, "finish_reason")->valuestring;
        if (n == 0) {
            ck_assert_int_eq(n_ids, 12);
            for (int k = 0; k < 12; k++)
                ck_assert_int_eq(cJSON_GetArrayItem(ids, k)->valueint, golden[k]);
            ck_assert_str_eq(fin, "length");
            ck_assert_int_eq(cJSON_GetObjectItem(j, "prompt_tokens")->valueint, 5);
        } else {
            ck_assert(strcmp(fin, "length") == 0 || strcmp(fin, "stop") == 0);
            ck_assert_int_le(n_ids, 5 + (n - 1));
        }
        cJSON_Delete(j);
    }
    ck_assert_int_eq(n, 17);
    fprintf(stdout, "gen_batch summary: %s", err);
    inferd_free(out);
    inferd_free(err);
}
END_TEST

START_TEST(test_text_prompts)
{
    if (!g_tok) {
        printf("text prompts: SKIPPED (no tokenizer)\n");
        return;
    }
    char *out, *err;
    int rc = run("Once upon a time\n{\"x\": 1}\n", &out, &err);
    /* plain text mode: the second line is just text */
    ck_assert_msg(rc == 0, "rc %d: %s", rc, err);
    cJSON *j = cJSON_Parse(out);
    ck_assert_ptr_nonnull(j);
    const char *text = cJSON_GetObjectItem(j, "text")->valuestring;
    /* golden stdout_text of case 0 after the prompt */
    ck_assert_msg(strncmp(text, ", there was a little girl named Lily.", 37) == 0, "text '%s'", text);
    cJSON_Delete(j);
    inferd_free(out);
    inferd_free(err);
    rc = run("{\"prompt\": \"Once upon a time\", \"max_tokens\": 40, \"stop\": [\"Lily\", \"zzz\"]}\n", &out,
             &err);
    ck_assert_msg(rc == 0, "rc %d: %s", rc, err);
    j = cJSON_Parse(out);
    ck_assert_str_eq(cJSON_GetObjectItem(j, "text")->valuestring, ", there was a little girl named ");
    ck_assert_str_eq(cJSON_GetObjectItem(j, "finish_reason")->valuestring, "stop");
    cJSON_Delete(j);
    inferd_free(out);
    inferd_free(err);
}
END_TEST

START_TEST(test_bad_lines)
{
    static const struct {
        const char *line, *needle;
    } rows[] = {
        {"{\"prompt_ids\": [1, -3]}", "prompt_ids"},
        {"{\"prompt_ids\": [1, 1.5]}", "prompt_ids"},
        {"{\"prompt_ids\": [1, 9999]}", "vocabulary"},
        {"{\"prompt_ids\": []}", "empty"},
        {"{\"prompt\": 5}", "prompt"},
        {"{bad json", "invalid JSON"},
        {"[1, 2]", "expected a JSON object"},
        {"{\"prompt_ids\": [1], \"max_tokens\": 0}", "max_tokens"},
        {"{\"prompt_ids\": [1], \"temperature\": -1}", "temperature"},
        {"{\"prompt_ids\": [1], \"top_p\": 0}", "top_p"},
        {"{\"prompt_ids\": [1], \"seed\": 1.5}", "seed"}, /* any int64 is a seed (negatives too) */
        {"{\"prompt_ids\": [1], \"foo\": 1}", "unknown field \"foo\""},
        {"{\"prompt_ids\": [1], \"prompt\": \"x\"}", "exactly one"},
        {"{\"max_tokens\": 3}", "exactly one"},
        {"{\"prompt_ids\": [1], \"stop\": 3}", "stop"},
        {"{\"prompt_ids\": [1], \"stop_token_ids\": \"1\"}", "stop_token_ids"},
        {"{\"prompt_ids\": [1], \"ignore_eos\": 1}", "ignore_eos"},
        {"{\"prompt_ids\": [1, 2], \"max_tokens\": 600}", "maximum model length"},
    };
    for (size_t i = 0; i < INFERD_ARRAY_LEN(rows); i++) {
        char in[512];
        snprintf(in, sizeof in, "{\"prompt_ids\": [1, 403]}\n%s\n{\"prompt_ids\": [1]}\n", rows[i].line);
        char *out, *err;
        int rc = run(in, &out, &err);
        ck_assert_msg(rc != 0, "row %zu: accepted", i);
        ck_assert_msg(strstr(err, ":2: ") && strstr(err, rows[i].needle), "row %zu: '%s'", i, err);
        ck_assert_msg(strchr(err, '\n') == err + strlen(err) - 1, "row %zu: not one line: '%s'", i, err);
        ck_assert_str_eq(out, "");
        inferd_free(out);
        inferd_free(err);
    }
    char *out, *err;
    ck_assert_int_ne(run("\n  \n", &out, &err), 0);
    ck_assert(strstr(err, "no prompts"));
    inferd_free(out);
    inferd_free(err);
}
END_TEST

int main(void)
{
    log_set_level(LOG_LEVEL_ERROR);
    char *w = test_fixture_path("models/stories260K/model.safetensors");
    if (!w || !util_file_exists(w))
        test_skip("models/stories260K not found (set INFERD_FIXTURES)");
    inferd_free(w);
    Suite *s = suite_create("gen_batch");
    TCase *tc = tcase_create("core");
    tcase_set_timeout(tc, 600);
    tcase_add_checked_fixture(tc, setup, teardown);
    tcase_add_test(tc, test_json_lines);
    tcase_add_test(tc, test_text_prompts);
    tcase_add_test(tc, test_bad_lines);
    suite_add_tcase(s, tc);
    return test_run_suite(s);
}
