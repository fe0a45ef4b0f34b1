/* tests/cli/test_model_dir_cli.c: what `inferd serve` and `inferd generate`
 * say about a model that is not a local directory (issue 14, item 4): a
 * missing path, a Hugging Face hub id ("org/name", which vLLM would
 * download and inferd does not), a file; each exits 1 (a start-up
 * failure, as for a model that does not load) before anything starts, with
 * a message that says how to get an HF directory. (The positional
 * `inferd serve DIR` itself is parsed in test_serve_opts.)
 */
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "common/alloc.h"
#include "common/util.h"
#include "test_util.h"

typedef struct {
    const char *argv[8]; /* after the binary */
    int rc;
    const char *msg[3]; /* substrings of stderr */
} dir_row;

static const dir_row k_rows[] = {
    {{"serve", "/nonexistent/inferd-model", NULL}, 1, {"'/nonexistent/inferd-model' does not exist", "config.json"}},
    {{"serve", "meta-llama/Llama-3.1-8B-Instruct", NULL},
     1,
     {"looks like a Hugging Face hub id", "inferd does not download models",
      "huggingface-cli download meta-llama/Llama-3.1-8B-Instruct --local-dir models/Llama-3.1-8B-Instruct"}},
    {{"serve", "--model", "Qwen/Qwen3-0.6B", NULL}, 1, {"hub id", "https://huggingface.co/Qwen/Qwen3-0.6B"}},
    {{"serve", "./not/here", NULL}, 1, {"does not exist"}}, /* a relative path, not a hub id */
    {{"serve", "a/b/c", NULL}, 1, {"does not exist"}},
    {{"serve", "/proc/self/status", NULL}, 1, {"is a file, not a directory"}},
    {{"generate", "--model", "org/name", "--prompt", "x", NULL}, 1, {"hub id", "huggingface-cli download org/name"}},
    {{"generate", "--model", "/nonexistent/m", "--prompt", "x", NULL}, 1, {"does not exist"}},
};

START_TEST(test_model_dir_messages)
{
    const char *bin = test_inferd_bin();
    if (!bin)
        test_skip("INFERD_BIN not set (run through ctest)");
    for (size_t i = 0; i < INFERD_ARRAY_LEN(k_rows); i++) {
        const dir_row *r = &k_rows[i];
        char *argv[12] = {(char *)bin};
        int k = 1;
        for (int j = 0; r->argv[j]; j++)
            argv[k++] = (char *)r->argv[j];
        argv[k++] = "--device";
        argv[k++] = "cpu";
        argv[k] = NULL;
        char *out, *err;
        int rc;
        ck_assert(test_run_cmd(argv, &out, &err, &rc));
        ck_assert_msg(rc == r->rc, "row %zu (%s): exit %d, want %d: %s", i, r->argv[1], rc, r->rc, err);
        for (int m = 0; m < 3 && r->msg[m]; m++)
            ck_assert_msg(strstr(err, r->msg[m]), "row %zu: stderr lacks '%s':\n%s", i, r->msg[m], err);
        ck_assert_msg(!strstr(err, "listening on"), "row %zu: the server started", i);
        inferd_free(out);
        inferd_free(err);
    }
}
END_TEST

int main(void)
{
    Suite *s = suite_create("model_dir_cli");
    TCase *tc = tcase_create("core");
    tcase_set_timeout(tc, 120);
    tcase_add_test(tc, test_model_dir_messages);
    suite_add_tcase(s, tc);
    return test_run_suite(s);
}
