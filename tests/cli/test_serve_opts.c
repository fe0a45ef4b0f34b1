/* tests/cli/test_serve_opts.c: `inferd serve`'s options: flags over a
 * --config file (precedence), bad flags, strict config keys, --help. Moved
 * from tests/server/test_srv_unit.c when the parsing moved to cli/
 * (cli_serve.c); the assertions are unchanged, the fields are reached
 * through srv_opts' model/engine members.
 */
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "common/alloc.h"
#include "common/status.h"
#include "common/util.h"
#include "cli/cli_serve.h"
#include "test_util.h"

/* ---- options ----------------------------------------------------------------- */

START_TEST(test_opts)
{
    srv_opts o;
    srv_opts_default(&o);
    const char *cfg =
        "{\"model\": \"/m/dir/\", \"port\": 9000, \"max_num_seqs\": 3, \"enable-prefix-caching\": false,"
        " \"kv-cache-bytes\": \"1G\", \"chat-template\": \"llama-3\", \"request-timeout\": 2.5}";
    char *path = test_write_temp("srv-opts", cfg, strlen(cfg));
    char *argv[] = {"serve",
                    "--config",
                    path,
                    "--port=9100",
                    "--enable-prefix-caching",
                    "--max-num-seqs",
                    "7",
                    "--api-key",
                    "k",
                    "--device",
                    "cpu",
                    "--tp-reduce-dtype=bfloat16",
                    "--kv-cache-dtype=fp8",
                    NULL};
    FILE *null = fopen("/dev/null", "w");
    ck_assert_int_eq(o.model.tp_reduce_dtype, MODEL_TP_REDUCE_F32); /* the default */
    ck_assert_int_eq(o.model.kv_cache_dtype, MODEL_KV_CACHE_AUTO);  /* the default */
    ck_assert_int_eq(cli_serve_parse(&o, NULL, 13, argv, null), 0);
    ck_assert_int_eq(o.model.tp_reduce_dtype, MODEL_TP_REDUCE_ACT);
    ck_assert_int_eq(o.model.kv_cache_dtype, MODEL_KV_CACHE_FP8_E4M3);
    ck_assert_str_eq(o.model.model_dir, "/m/dir/");
    ck_assert_str_eq(o.served_model_name, "dir");
    ck_assert_int_eq(o.port, 9100);
    ck_assert_int_eq(o.model.max_num_seqs, 7);
    ck_assert(o.engine.enable_prefix_caching);
    ck_assert_int_eq(o.model.kv_cache_bytes, INT64_C(1) << 30);
    ck_assert_int_eq(o.chat_family, SRV_CHAT_LLAMA3);
    ck_assert_double_eq(o.request_timeout_s, 2.5);
    ck_assert_str_eq(o.api_key, "k");
    ck_assert(!o.model.device_auto && o.model.backend == KERN_BACKEND_CPU);
    srv_opts_free(&o);
    static const char *const bad[][4] = {
        {"serve", "--model", "m", "--port"},           {"serve", "--model", "m", "--port=70000"},
        {"serve", "--model", "m", "--bogus"},          {"serve", "--model", "m", "--device=tpu"},
        {"serve", "--model", "m", "--no-port"},        {"serve", "--model", "m", "--chat-template=x"},
        {"serve", "--model", "m", "--max-num-seqs=0"}, {"serve", "--model", "m", "extra"},
        {"serve", "dir1", "dir2", "--port=1"},         {"serve", "dir1", "--port=1", "--model=dir2"},
        {"serve", "--port", "1", "-x"},
        {"serve", "--host", "h", "--threads=-1"},
        {"serve", "--model", "m", "--gpu-memory-utilization=0"},
        {"serve", "--model", "m", "--kv-cache-bytes=1Q"},
        {"serve", "--model", "m", "--no-enable-prefix-caching=1"},
        {"serve", "--model", "m", "--log-level=loud"},
        {"serve", "--model", "m", "--load-format=gguf"},
        {"serve", "--model", "m", "--tp-reduce-dtype=fp8"},
        {"serve", "--model", "m", "--kv-cache-dtype=fp16"},
        {"serve", "--model", "m", "--kv-cache-dtype=fp8_e5m2"}, /* vLLM's other fp8: no kernel reads it */
        {"serve", "--model", "m", "--block-size=0"},
        {"serve", "--model", "m", "--max-model-len"},
        {"serve", "--model", "m", "--config"}, /* a trailing --config was ignored */
    };
    for (size_t i = 0; i < INFERD_ARRAY_LEN(bad); i++) {
        srv_opts_default(&o);
        ck_assert_msg(cli_serve_parse(&o, NULL, 4, (char **)bad[i], null) == 2, "row %zu accepted", i);
        srv_opts_free(&o);
    }
    /* --kv-cache-dtype: every name, as a flag and a config key; a bad one
     * is named with the accepted ones */
    static const struct {
        const char *name;
        int value;
    } kv[] = {{"auto", MODEL_KV_CACHE_AUTO}, {"fp8", MODEL_KV_CACHE_FP8_E4M3},
              {"fp8_e4m3", MODEL_KV_CACHE_FP8_E4M3}};
    for (size_t i = 0; i < INFERD_ARRAY_LEN(kv); i++) {
        char flag[64], json[96];
        snprintf(flag, sizeof flag, "--kv-cache-dtype=%s", kv[i].name);
        snprintf(json, sizeof json, "{\"model\": \"m\", \"kv_cache_dtype\": \"%s\"}", kv[i].name);
        char *a[] = {"serve", "--model", "m", flag, NULL};
        srv_opts_default(&o);
        ck_assert_int_eq(cli_serve_parse(&o, NULL, 4, a, null), 0);
        ck_assert_int_eq(o.model.kv_cache_dtype, kv[i].value);
        srv_opts_free(&o);
        srv_opts_default(&o);
        ck_assert_msg(cli_serve_apply_json(&o, NULL, json, "c"), "%s: %s", json, inferd_last_error());
        ck_assert_int_eq(o.model.kv_cache_dtype, kv[i].value);
        srv_opts_free(&o);
    }
    srv_opts_default(&o);
    char *kvbad[] = {"serve", "--model", "m", "--kv-cache-dtype", "fp16", NULL};
    ck_assert_int_eq(cli_serve_parse(&o, NULL, 5, kvbad, null), 2);
    const char *want = "--kv-cache-dtype: expected one of auto|fp8|fp8_e4m3, got 'fp16'";
    ck_assert_msg(strstr(inferd_last_error(), want), "%s", inferd_last_error());
    srv_opts_free(&o);
    srv_opts_default(&o);
    char *nomodel[] = {"serve", "--port", "1", NULL};
    ck_assert_int_eq(cli_serve_parse(&o, NULL, 3, nomodel, null), 2);
    srv_opts_free(&o);
    srv_opts_default(&o);
    ck_assert(!cli_serve_apply_json(&o, NULL, "{\"porrt\": 1}", "c"));
    ck_assert(strstr(inferd_last_error(), "porrt") != NULL);
    ck_assert(!cli_serve_apply_json(&o, NULL, "{\"port\": \"x\"}", "c"));
    ck_assert(!cli_serve_apply_json(&o, NULL, "{\"enable-prefix-caching\": 1}", "c"));
    ck_assert(!cli_serve_apply_json(&o, NULL, "[1]", "c"));
    srv_opts_free(&o);
    /* the positional model (vLLM's `vllm serve MODEL`): the same field as
     * --model, overriding the config file's "model"; --model with the same
     * directory is accepted */
    const struct {
        const char *argv[6];
        const char *want;
    } pos[] = {
        {{"serve", "/p/dir", NULL}, "/p/dir"},
        {{"serve", "--port", "8001", "/p/dir", NULL}, "/p/dir"},
        {{"serve", "/p/dir", "--port", "8001", NULL}, "/p/dir"},
        {{"serve", "--config", path, "/p/dir2", NULL}, "/p/dir2"},
        {{"serve", "--model", "/p/dir", "/p/dir", NULL}, "/p/dir"},
        {{"serve", "--config", path, NULL}, "/m/dir/"},
    };
    for (size_t i = 0; i < INFERD_ARRAY_LEN(pos); i++) {
        int argc = 0;
        while (pos[i].argv[argc])
            argc++;
        srv_opts_default(&o);
        ck_assert_msg(cli_serve_parse(&o, NULL, argc, (char **)pos[i].argv, null) == 0, "pos row %zu: %s", i,
                      inferd_last_error());
        ck_assert_str_eq(o.model.model_dir, pos[i].want);
        srv_opts_free(&o);
    }
    srv_opts_default(&o);
    char *twice[] = {"serve", "/a", "--model", "/b", NULL};
    ck_assert_int_eq(cli_serve_parse(&o, NULL, 4, twice, null), 2);
    ck_assert_ptr_nonnull(strstr(inferd_last_error(), "given twice"));
    srv_opts_free(&o);
    srv_opts_default(&o);
    char *help[] = {"serve", "--help", NULL};
    ck_assert_int_eq(cli_serve_parse(&o, NULL, 2, help, null), 1);
    srv_opts_free(&o);
    fclose(null);
    unlink(path);
    inferd_free(path);
}
END_TEST

int main(void)
{
    Suite *s = suite_create("serve_opts");
    TCase *tc = tcase_create("core");
    tcase_add_test(tc, test_opts);
    suite_add_tcase(s, tc);
    return test_run_suite(s);
}
