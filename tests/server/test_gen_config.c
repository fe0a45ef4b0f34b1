/* tests/server/test_gen_config.c: generation_config.json sampling defaults
 * (vLLM's --generation-config auto) through `inferd serve` and `inferd
 * generate` on stories260K, CPU backend.
 *
 * Each test builds a temporary model directory: symlinks to the fixture's
 * files plus its own generation_config.json. The acceptance case of issue
 * 14: temperature 0.01, top_k 1, max_new_tokens 7 gives identical outputs
 * for identical requests, 7 tokens when max_tokens is omitted, greedy
 * output (top_k 1), and a request's own values override every default.
 * Then: --generation-config vllm ignores the file, --generation-config DIR
 * reads another folder, and a bad file or folder stops the start-up with a
 * message naming the field or the path.
 */
#include <cjson/cJSON.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "common/alloc.h"
#include "common/util.h"
#include "test_util.h"
#include "ts_client.h"

static const char *const k_model_files[] = {"config.json", "model.safetensors", "tokenizer.json",
                                            "tokenizer_config.json", "special_tokens_map.json"};

static void write_text(const char *dir, const char *name, const char *text)
{
    char *p = util_path_join(dir, name);
    FILE *f = fopen(p, "w");
    ck_assert_msg(f, "cannot write %s", p);
    fputs(text, f);
    fclose(f);
    inferd_free(p);
}

/* A temporary copy (symlinks) of stories260K with generation_config.json
 * = gen (NULL: none). Skips when the fixture is absent. */
static char *model_copy(const char *gen)
{
    char *src = test_fixture_path("models/stories260K");
    if (!src || access(src, R_OK) != 0)
        test_skip("fixture models/stories260K not found");
    char *dir = test_make_temp_dir("inferd-gencfg");
    ck_assert_ptr_nonnull(dir);
    for (size_t i = 0; i < INFERD_ARRAY_LEN(k_model_files); i++) {
        char *from = util_path_join(src, k_model_files[i]), *to = util_path_join(dir, k_model_files[i]);
        if (util_file_exists(from))
            ck_assert_msg(symlink(from, to) == 0, "symlink %s", to);
        inferd_free(from);
        inferd_free(to);
    }
    if (gen)
        write_text(dir, "generation_config.json", gen);
    free(src);
    return dir;
}

static void model_remove(char *dir)
{
    for (size_t i = 0; i < INFERD_ARRAY_LEN(k_model_files); i++) {
        char *p = util_path_join(dir, k_model_files[i]);
        unlink(p);
        inferd_free(p);
    }
    char *p = util_path_join(dir, "generation_config.json");
    unlink(p);
    inferd_free(p);
    rmdir(dir);
    inferd_free(dir);
}

/* POST a completion; returns its text (heap) and completion token count. */
static char *complete(const ts_server *s, const char *body, int *n_tokens, const char **finish)
{
    long status;
    cJSON *j = ts_post_json(s, "/v1/completions", body, &status);
    ck_assert_msg(j && status == 200, "%s: status %ld", body, status);
    const cJSON *c0 = cJSON_GetArrayItem(cJSON_GetObjectItem(j, "choices"), 0);
    char *text = inferd_strdup(cJSON_GetObjectItem(c0, "text")->valuestring);
    *n_tokens = cJSON_GetObjectItem(cJSON_GetObjectItem(j, "usage"), "completion_tokens")->valueint;
    static char fin[32];
    snprintf(fin, sizeof fin, "%s", cJSON_GetObjectItem(c0, "finish_reason")->valuestring);
    if (finish)
        *finish = fin;
    cJSON_Delete(j);
    return text;
}

static const char *const k_acceptance = "{\"temperature\": 0.01, \"top_k\": 1, \"max_new_tokens\": 7}";

START_TEST(test_serve_defaults_applied)
{
    char *dir = model_copy(k_acceptance);
    const char *args[] = {"--model", dir, NULL};
    ts_server s;
    ck_assert(ts_start(&s, args));
    ck_assert(ts_log_contains(&s, "sampling defaults from generation_config.json (--generation-config auto): "
                                  "temperature=0.01 top_k=1 max_tokens=7"));
    const char *req = "{\"prompt\": \"Once upon a time\", \"ignore_eos\": true}";
    int n1, n2, n;
    const char *fin;
    char *a = complete(&s, req, &n1, &fin);
    ck_assert_str_eq(fin, "length");
    char *b = complete(&s, req, &n2, NULL);
    ck_assert_int_eq(n1, 7);
    ck_assert_int_eq(n2, 7);
    ck_assert_str_eq(a, b);
    /* top_k 1 is greedy: the same as an explicit temperature 0 request */
    char *g = complete(&s, "{\"prompt\": \"Once upon a time\", \"ignore_eos\": true, \"temperature\": 0,"
                           " \"max_tokens\": 7}", &n, NULL);
    ck_assert_str_eq(a, g);
    /* the request's own values win: max_tokens, and top_k / temperature
     * (with sampling back on, some seed leaves the greedy path) */
    char *c = complete(&s, "{\"prompt\": \"Once upon a time\", \"ignore_eos\": true, \"max_tokens\": 3}", &n,
                       NULL);
    ck_assert_int_eq(n, 3);
    ck_assert_msg(strncmp(a, c, strlen(c)) == 0, "'%s' is not a prefix of '%s'", c, a);
    int differ = 0;
    for (int seed = 1; seed <= 6; seed++) {
        char body[256];
        snprintf(body, sizeof body,
                 "{\"prompt\": \"Once upon a time\", \"ignore_eos\": true, \"top_k\": -1, \"temperature\": 1.5,"
                 " \"seed\": %d}", seed);
        char *t = complete(&s, body, &n, NULL);
        ck_assert_int_eq(n, 7); /* max_tokens still the file's */
        differ += strcmp(t, a) != 0;
        inferd_free(t);
    }
    ck_assert_msg(differ > 0, "top_k/temperature from the request were not applied");
    /* a chat request without max_tokens gets 7 too, when the model has a template */
    long status;
    cJSON *j = ts_post_json(&s, "/v1/chat/completions",
                            "{\"messages\": [{\"role\": \"user\", \"content\": \"Hi\"}], \"ignore_eos\": true}",
                            &status);
    if (status == 200)
        ck_assert_int_eq(cJSON_GetObjectItem(cJSON_GetObjectItem(j, "usage"), "completion_tokens")->valueint, 7);
    cJSON_Delete(j);
    inferd_free(a);
    inferd_free(b);
    inferd_free(c);
    inferd_free(g);
    ck_assert_int_eq(ts_stop(&s, 10), 0);
    model_remove(dir);
}
END_TEST

/* max_new_tokens larger than the room a prompt leaves is lowered to it (a
 * default, not the client's request, so no 400). */
START_TEST(test_serve_default_max_capped)
{
    char *dir = model_copy("{\"max_new_tokens\": 100000}");
    const char *args[] = {"--model", dir, "--max-model-len", "64", NULL};
    ts_server s;
    ck_assert(ts_start(&s, args));
    int n;
    char *t = complete(&s, "{\"prompt\": \"Once upon a time\", \"ignore_eos\": true, \"temperature\": 0}", &n, NULL);
    ck_assert_int_eq(n, 64 - 5); /* "Once upon a time" is 5 tokens with BOS */
    inferd_free(t);
    ck_assert_int_eq(ts_stop(&s, 10), 0);
    model_remove(dir);
}
END_TEST

START_TEST(test_serve_generation_config_vllm_and_dir)
{
    char *dir = model_copy(k_acceptance);
    char *other = model_copy("{\"max_new_tokens\": 5, \"top_k\": 50}");
    int n;
    /* vllm: the file is ignored; completions default to 16 tokens */
    const char *a1[] = {"--model", dir, "--generation-config", "vllm", NULL};
    ts_server s;
    ck_assert(ts_start(&s, a1));
    ck_assert(ts_log_contains(&s, "(--generation-config vllm): none"));
    char *t = complete(&s, "{\"prompt\": \"Once upon a time\", \"ignore_eos\": true}", &n, NULL);
    ck_assert_int_eq(n, 16);
    inferd_free(t);
    ck_assert_int_eq(ts_stop(&s, 10), 0);
    /* DIR: that folder's file (top_k 50 is HF's own default: dropped, as vLLM does) */
    const char *a2[] = {"--model", dir, "--generation-config", other, NULL};
    ck_assert(ts_start(&s, a2));
    ck_assert(ts_log_contains(&s, ": max_tokens=5"));
    t = complete(&s, "{\"prompt\": \"Once upon a time\", \"ignore_eos\": true}", &n, NULL);
    ck_assert_int_eq(n, 5);
    inferd_free(t);
    ck_assert_int_eq(ts_stop(&s, 10), 0);
    model_remove(other);
    model_remove(dir);
}
END_TEST

/* `inferd serve` / `inferd generate` with a bad generation config exit
 * non-zero with a message naming the file and field (or the folder). */
START_TEST(test_bad_generation_config)
{
    const char *bin = test_inferd_bin();
    if (!bin)
        test_skip("INFERD_BIN not set (run through ctest)");
    static const struct {
        const char *gen, *flag, *msg;
    } rows[] = {
        {"{\"temperature\": 7}", NULL, "generation_config.json: field 'temperature'"},
        {"{\"top_k\": -2}", NULL, "field 'top_k'"},
        {"{\"top_p\": 0}", NULL, "field 'top_p'"},
        {"{\"max_new_tokens\": 0}", NULL, "field 'max_new_tokens'"},
        {"{\"temperature\": \"hot\"}", NULL, "field 'temperature' must be a number"},
        {"{\"temperature\": 7}", "vllm", NULL}, /* ignored: starts */
        {NULL, "/nonexistent/gen-dir", "neither auto, vllm nor an existing directory"},
    };
    for (size_t i = 0; i < INFERD_ARRAY_LEN(rows); i++) {
        char *dir = model_copy(rows[i].gen);
        for (int gen = 0; gen < 2; gen++) {
            char *argv[16];
            int k = 0;
            argv[k++] = (char *)bin;
            if (gen) {
                argv[k++] = "generate";
                argv[k++] = "--prompt-ids"; /* no --max-tokens: it would override max_new_tokens */
                argv[k++] = "1,2,3";
            } else {
                argv[k++] = "serve";
                argv[k++] = "--port";
                argv[k++] = "1"; /* never reached when the model load fails first */
            }
            argv[k++] = "--model";
            argv[k++] = dir;
            argv[k++] = "--device";
            argv[k++] = "cpu";
            if (rows[i].flag) {
                argv[k++] = "--generation-config";
                argv[k++] = (char *)rows[i].flag;
            }
            argv[k] = NULL;
            if (!gen && !rows[i].msg) {
                continue; /* a good config would start serving: covered by the ts_start tests */
            }
            char *out, *err;
            int rc;
            ck_assert(test_run_cmd(argv, &out, &err, &rc));
            if (rows[i].msg) {
                ck_assert_msg(rc != 0, "row %zu %s: exit 0", i, argv[1]);
                ck_assert_msg(strstr(err, rows[i].msg), "row %zu %s: stderr lacks '%s':\n%s", i, argv[1],
                              rows[i].msg, err);
            } else {
                ck_assert_msg(rc == 0, "row %zu generate: exit %d: %s", i, rc, err);
            }
            inferd_free(out);
            inferd_free(err);
        }
        model_remove(dir);
    }
}
END_TEST

/* `inferd generate` honours the same defaults; its flags override them. */
START_TEST(test_generate_defaults)
{
    const char *bin = test_inferd_bin();
    if (!bin)
        test_skip("INFERD_BIN not set (run through ctest)");
    char *dir = model_copy(k_acceptance);
    static const struct {
        const char *extra[4];
        int want;
    } rows[] = {
        {{NULL}, 7},
        {{"--max-tokens", "3", NULL}, 3},
        {{"--generation-config", "vllm", NULL}, 256}, /* generate's own default */
    };
    char *first = NULL;
    for (size_t i = 0; i < INFERD_ARRAY_LEN(rows); i++) {
        char *argv[16] = {(char *)bin, "generate", "--model", dir, "--device", "cpu", "--prompt",
                          "Once upon a time", "--print-ids", "--ignore-eos"};
        int k = 10;
        for (int e = 0; rows[i].extra[e]; e++)
            argv[k++] = (char *)rows[i].extra[e];
        argv[k] = NULL;
        char *out, *err;
        int rc;
        ck_assert(test_run_cmd(argv, &out, &err, &rc));
        ck_assert_msg(rc == 0, "row %zu: exit %d: %s", i, rc, err);
        int n = 0;
        for (char *p = strtok(out, " \n"); p; p = strtok(NULL, " \n"))
            n++;
        ck_assert_msg(n == rows[i].want, "row %zu: %d ids, want %d", i, n, rows[i].want);
        ck_assert(strstr(err, "sampling defaults from generation_config.json"));
        if (i == 0)
            first = inferd_strdup(err);
        inferd_free(out);
        inferd_free(err);
    }
    ck_assert_ptr_nonnull(strstr(first, "temperature=0.01 top_k=1 max_tokens=7"));
    inferd_free(first);
    model_remove(dir);
}
END_TEST

int main(void)
{
    Suite *s = suite_create("gen_config");
    TCase *tc = tcase_create("core");
    tcase_set_timeout(tc, 300);
    tcase_add_test(tc, test_serve_defaults_applied);
    tcase_add_test(tc, test_serve_default_max_capped);
    tcase_add_test(tc, test_serve_generation_config_vllm_and_dir);
    tcase_add_test(tc, test_bad_generation_config);
    tcase_add_test(tc, test_generate_defaults);
    suite_add_tcase(s, tc);
    return test_run_suite(s);
}
