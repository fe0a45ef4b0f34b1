/* tests/tokenizer/test_tok_cli.c: `inferd tokenize` / `inferd detokenize`
 * end to end through the built binary: golden ids on stdout as one JSON
 * line, --no-special, --keep-special, `--` before a dash-led TEXT, --help;
 * and a table of bad invocations, each exiting 2 (usage) or 1 (runtime)
 * with exactly one line on stderr. */
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "common/alloc.h"
#include "common/util.h"
#include "test_util.h"

typedef struct {
    int rc;
    char *out, *err;
} cli_result;

static char *slurp_fd(int fd)
{
    lseek(fd, 0, SEEK_SET);
    size_t cap = 4096, n = 0;
    char *b = inferd_malloc(cap);
    ssize_t r;
    while ((r = read(fd, b + n, cap - n - 1)) > 0) {
        n += (size_t)r;
        if (n + 1 == cap)
            b = inferd_realloc(b, cap *= 2);
    }
    b[n] = '\0';
    return b;
}

/* Run inferd with args (NULL-terminated) and capture everything. */
static cli_result run_cli(const char *const *args)
{
    const char *bin = test_inferd_bin();
    char out_t[] = "/tmp/tokcli-out-XXXXXX", err_t[] = "/tmp/tokcli-err-XXXXXX";
    int fo = mkstemp(out_t), fe = mkstemp(err_t);
    ck_assert(fo >= 0 && fe >= 0);
    unlink(out_t);
    unlink(err_t);
    const char *argv[32];
    int n = 0;
    argv[n++] = bin;
    for (int i = 0; args[i]; i++)
        argv[n++] = args[i];
    argv[n] = NULL;
    pid_t pid = fork();
    ck_assert(pid >= 0);
    if (pid == 0) {
        dup2(fo, 1);
        dup2(fe, 2);
        execv(bin, (char *const *)argv);
        _exit(127);
    }
    int status = 0;
    waitpid(pid, &status, 0);
    cli_result r = {WIFEXITED(status) ? WEXITSTATUS(status) : -1, slurp_fd(fo), slurp_fd(fe)};
    close(fo);
    close(fe);
    return r;
}

static void free_result(cli_result *r)
{
    inferd_free(r->out);
    inferd_free(r->err);
}

static char *g_llama2, *g_llama3, *g_stories;

static void setup(void)
{
    const char *bin = test_inferd_bin();
    if (!bin || access(bin, X_OK) != 0)
        test_skip("inferd binary not built (INFERD_BIN)");
    if (!test_fixtures_dir())
        test_skip("fixtures not found (set INFERD_FIXTURES)");
    inferd_free(g_llama2);
    inferd_free(g_llama3);
    inferd_free(g_stories);
    g_llama2 = test_fixture_path("tokenizers/llama2");
    g_llama3 = test_fixture_path("tokenizers/llama3");
    g_stories = test_fixture_path("models/stories260K");
}

static const struct {
    const char *args[8];
    int rc;
    const char *out; /* exact stdout, or NULL */
} k_ok[] = {
    {{"tokenize", "--model", "@S", "Once upon a time"}, 0, "[1, 403, 407, 261, 378]\n"},
    {{"tokenize", "--tokenizer", "@3", "<|begin_of_text|>Hello<|eot_id|>"}, 0, "[128000, 128000, 9906, 128009]\n"},
    {{"tokenize", "--tokenizer", "@2", "--no-special", "<s> and </s> written as plain text"},
     0,
     "[1, 529, 29879, 29958, 322, 1533, 29879, 29958, 3971, 408, 8656, 1426]\n"},
    {{"tokenize", "--tokenizer=@2", "Hello world! \xE4\xBD\xA0\xE5\xA5\xBD"}, 0,
     "[1, 15043, 3186, 29991, 29871, 30919, 31076]\n"},
    {{"tokenize", "--tokenizer", "@2", "--", "-"}, 0, "[1, 448]\n"},
    {{"tokenize", "--tokenizer", "@2", ""}, 0, "[1]\n"},
    {{"detokenize", "--tokenizer", "@2", "1,15043,3186"}, 0, "Hello world\n"},
    {{"detokenize", "--keep-special", "--tokenizer", "@2", "1,15043,3186,2"}, 0, "<s> Hello world</s>\n"},
    {{"detokenize", "--model", "@S", "1,403,407,261,378"}, 0, "Once upon a time\n"},
    {{"tokenize", "--help"}, 0, NULL},
    {{"detokenize", "-h"}, 0, NULL},
};

/* Replace @2/@3/@S placeholders (also after "--tokenizer=") by paths. */
static void expand(const char *const *in, const char **out, char **owned)
{
    int i = 0;
    for (; in[i]; i++) {
        const char *at = strchr(in[i], '@');
        owned[i] = NULL;
        if (!at) {
            out[i] = in[i];
            continue;
        }
        const char *path = at[1] == '2' ? g_llama2 : at[1] == '3' ? g_llama3 : g_stories;
        size_t n = (size_t)(at - in[i]) + strlen(path) + 1;
        owned[i] = inferd_malloc(n);
        snprintf(owned[i], n, "%.*s%s", (int)(at - in[i]), in[i], path);
        out[i] = owned[i];
    }
    out[i] = NULL;
}

START_TEST(test_cli_ok)
{
    setup();
    for (size_t k = 0; k < INFERD_ARRAY_LEN(k_ok); k++) {
        const char *args[9];
        char *owned[9];
        expand(k_ok[k].args, args, owned);
        cli_result r = run_cli(args);
        ck_assert_msg(r.rc == k_ok[k].rc, "row %zu: rc %d, stderr '%s'", k, r.rc, r.err);
        if (k_ok[k].out)
            ck_assert_msg(strcmp(r.out, k_ok[k].out) == 0, "row %zu: stdout '%s' want '%s'", k, r.out, k_ok[k].out);
        else
            ck_assert_msg(strstr(r.out, "usage: inferd") != NULL, "row %zu: no usage in '%s'", k, r.out);
        for (int i = 0; args[i]; i++)
            inferd_free(owned[i]);
        free_result(&r);
    }
}
END_TEST

static const struct {
    const char *args[8];
    int rc;
    const char *needle; /* in the stderr line */
} k_bad[] = {
    {{"tokenize", "hello"}, 2, "--model DIR or --tokenizer DIR"},
    {{"tokenize", "--model"}, 2, "needs a directory"},
    {{"tokenize", "--bogus", "--model", "@2", "x"}, 2, "unknown option '--bogus'"},
    {{"tokenize", "--model", "@2"}, 2, "missing TEXT"},
    {{"tokenize", "--model", "@2", "a", "b"}, 2, "more than one TEXT"},
    {{"tokenize", "--model", "/nonexistent/model", "x"}, 1, "no tokenizer.json"},
    {{"tokenize", "--model", "@2", "bad \xFF utf8"}, 1, "UTF-8"},
    {{"detokenize", "--model", "@2", "1,x,3"}, 2, "bad id list '1,x,3'"},
    {{"detokenize", "--model", "@2", ""}, 2, "bad id list"},
    {{"detokenize", "--model", "@2", "1,99999"}, 1, "99999 is not in the vocabulary"},
    {{"detokenize", "--model", "@2", "--", "-5"}, 1, "-5 is not in the vocabulary"},
    {{"detokenize", "--model", "@2", "-5"}, 2, "unknown option '-5'"},
    {{"detokenize", "--keep"}, 2, "unknown option '--keep'"},
};

START_TEST(test_cli_bad)
{
    setup();
    for (size_t k = 0; k < INFERD_ARRAY_LEN(k_bad); k++) {
        const char *args[9];
        char *owned[9];
        expand(k_bad[k].args, args, owned);
        cli_result r = run_cli(args);
        ck_assert_msg(r.rc == k_bad[k].rc, "row %zu: rc %d want %d (stderr '%s')", k, r.rc, k_bad[k].rc, r.err);
        ck_assert_msg(strstr(r.err, k_bad[k].needle) != NULL, "row %zu: stderr '%s' lacks '%s'", k, r.err,
                      k_bad[k].needle);
        size_t len = strlen(r.err);
        ck_assert_msg(len > 0 && r.err[len - 1] == '\n' && strchr(r.err, '\n') == r.err + len - 1,
                      "row %zu: stderr is not one line: '%s'", k, r.err);
        ck_assert_msg(r.out[0] == '\0', "row %zu: stdout not empty: '%s'", k, r.out);
        for (int i = 0; args[i]; i++)
            inferd_free(owned[i]);
        free_result(&r);
    }
}
END_TEST

int main(void)
{
    if (!test_inferd_bin())
        test_skip("inferd binary not built (INFERD_BIN)");
    if (!test_fixtures_dir())
        test_skip("fixtures not found (set INFERD_FIXTURES)");
    Suite *s = suite_create("tokenizer_cli");
    TCase *tc = tcase_create("cli");
    tcase_set_timeout(tc, 300);
    tcase_add_test(tc, test_cli_ok);
    tcase_add_test(tc, test_cli_bad);
    suite_add_tcase(s, tc);
    return test_run_suite(s);
}
