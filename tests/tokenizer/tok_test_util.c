/* tests/tokenizer/tok_test_util.c: see tok_test_util.h. */
#include "tok_test_util.h"

#include <check.h>
#include <stdio.h>
#include <string.h>

#include "common/alloc.h"
#include "common/util.h"
#include "test_util.h"

const tok_fixture k_tok_fixtures[] = {
    {"llama2", "tokenizers/llama2", "llama2", false},
    {"llama3", "tokenizers/llama3", "llama3", false},
    {"llama3-nobos", "tokenizers/llama3-nobos", "llama3", true},
    {"stories260K", "models/stories260K", "stories260K", false},
};
const int k_n_tok_fixtures = (int)INFERD_ARRAY_LEN(k_tok_fixtures);

tokenizer *tt_load(const tok_fixture *f)
{
    char *dir = test_fixture_path(f->dir);
    if (!dir || !util_file_exists(dir))
        test_skip("tokenizer fixtures not found (set INFERD_FIXTURES)");
    tokenizer *t = NULL;
    inferd_status st = tok_load(dir, &t);
    ck_assert_msg(st == INFERD_OK, "tok_load(%s): %s", dir, inferd_last_error());
    inferd_free(dir);
    return t;
}

cJSON *tt_load_json(const char *rel)
{
    char *path = test_fixture_path(rel);
    if (!path || !util_file_exists(path))
        test_skip("golden fixtures not found (set INFERD_FIXTURES)");
    char *text = NULL;
    size_t len = 0;
    ck_assert_msg(util_read_file(path, 0, &text, &len) == INFERD_OK, "%s", inferd_last_error());
    cJSON *j = cJSON_Parse(text);
    ck_assert_msg(j != NULL, "%s: invalid JSON", path);
    inferd_free(text);
    inferd_free(path);
    return j;
}

int tt_ids(const cJSON *arr, int32_t **out)
{
    int n = cJSON_GetArraySize(arr);
    *out = inferd_malloc((size_t)(n > 0 ? n : 1) * sizeof **out);
    for (int i = 0; i < n; i++)
        (*out)[i] = (int32_t)cJSON_GetArrayItem(arr, i)->valuedouble;
    return n;
}

const char *tt_fmt_ids(const int32_t *ids, int n, char *buf, size_t cap)
{
    size_t o = 0;
    buf[0] = '\0';
    o += (size_t)snprintf(buf + o, cap - o, "[");
    for (int i = 0; i < n && o + 16 < cap; i++)
        o += (size_t)snprintf(buf + o, cap - o, "%s%d", i ? ", " : "", (int)ids[i]);
    if (o + 2 < cap)
        snprintf(buf + o, cap - o, "]");
    return buf;
}

bool tt_encode_eq(const tokenizer *t, const char *text, bool parse_special, const int32_t *want, int n_want,
                  const char *what)
{
    int32_t *ids = NULL;
    int n = 0;
    inferd_status st = tok_encode(t, text, strlen(text), true, parse_special, &ids, &n);
    if (st != INFERD_OK) {
        printf("FAIL %s: tok_encode: %s\n", what, inferd_last_error());
        return false;
    }
    bool eq = n == n_want && memcmp(ids, want, (size_t)n * sizeof *ids) == 0;
    if (!eq) {
        char a[4096], b[4096];
        printf("FAIL %s\n  got  %s\n  want %s\n", what, tt_fmt_ids(ids, n, a, sizeof a),
               tt_fmt_ids(want, n_want, b, sizeof b));
    }
    inferd_free(ids);
    return eq;
}
