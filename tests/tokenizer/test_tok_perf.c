/* tests/tokenizer/test_tok_perf.c: encode timing of a 100 KB prompt with
 * the llama3, llama2 and stories260K tokenizers. Prints the milliseconds
 * (best of 5) and tokens per second; asserts only a generous sanity bound
 * (the target, well under 100 ms, is reported, not enforced, since test
 * machines vary). For llama2 the whole prompt is one BPE word (no
 * pre-tokenizer), so this also shows the merge loop is not quadratic. */
#include <stdio.h>
#include <string.h>

#include "common/alloc.h"
#include "common/util.h"
#include "tokenizer/tok_internal.h"
#include "test_util.h"
#include "tok_test_util.h"

#define PROMPT_BYTES (100 * 1024)

/* ~100 KB of mixed text: the golden strings (prose, code, numbers, CJK,
 * emoji) repeated, cut at a character boundary. */
static char *make_prompt(size_t *len)
{
    cJSON *g = tt_load_json("golden/tokenizers.json");
    char *buf = inferd_malloc(PROMPT_BYTES + 4096);
    size_t n = 0;
    while (n < PROMPT_BYTES) {
        const cJSON *c;
        cJSON_ArrayForEach(c, cJSON_GetObjectItemCaseSensitive(g, "cases"))
        {
            const char *s = cJSON_GetObjectItemCaseSensitive(c, "text")->valuestring;
            if (strchr(s, '<'))
                continue; /* keep special-token text out of the timing */
            size_t l = strlen(s);
            if (n + l + 1 > PROMPT_BYTES + 4000)
                break;
            memcpy(buf + n, s, l);
            n += l;
            buf[n++] = '\n';
        }
    }
    while (n > PROMPT_BYTES && ((unsigned char)buf[PROMPT_BYTES] & 0xC0) == 0x80)
        n--;
    n = n > PROMPT_BYTES ? PROMPT_BYTES : n;
    while (n > 0 && ((unsigned char)buf[n] & 0xC0) == 0x80)
        n--;
    buf[n] = '\0';
    cJSON_Delete(g);
    ck_assert(util_utf8_valid(buf, n));
    *len = n;
    return buf;
}

START_TEST(test_encode_100k)
{
    const tok_fixture *f = &k_tok_fixtures[_i == 2 ? 3 : _i];
    tokenizer *t = tt_load(f);
    size_t len;
    char *prompt = make_prompt(&len);
    double best = 1e9;
    int n_ids = 0;
    for (int rep = 0; rep < 5; rep++) {
        int32_t *ids = NULL;
        double t0 = util_now_s();
        ck_assert(tok_encode(t, prompt, len, true, true, &ids, &n_ids) == INFERD_OK);
        double dt = util_now_s() - t0;
        best = dt < best ? dt : best;
        inferd_free(ids);
    }
    /* decode it back as a throughput figure too */
    int32_t *ids = NULL;
    ck_assert(tok_encode(t, prompt, len, false, true, &ids, &n_ids) == INFERD_OK);
    char *text = NULL;
    size_t tl = 0;
    double t0 = util_now_s();
    ck_assert(tok_decode(t, ids, n_ids, true, &text, &tl) == INFERD_OK);
    double dec = util_now_s() - t0;
    if (strcmp(f->name, "llama3") == 0 || strcmp(f->name, "llama2") == 0)
        ck_assert(tl == len && memcmp(text, prompt, len) == 0);
    /* the chunked BPE path gives exactly the ids of the one-word path */
    if (t->chunk_meta) {
        t->chunk_meta = false;
        int32_t *ref = NULL;
        int n_ref = 0;
        double t1 = util_now_s();
        ck_assert(tok_encode(t, prompt, len, false, true, &ref, &n_ref) == INFERD_OK);
        printf("PERF encode %-12s without chunking: %.2f ms\n", f->name, (util_now_s() - t1) * 1e3);
        ck_assert_int_eq(n_ref, n_ids);
        ck_assert(memcmp(ref, ids, (size_t)n_ids * sizeof *ids) == 0);
        t->chunk_meta = true;
        inferd_free(ref);
    }
    printf("PERF encode %-12s %zu bytes -> %d tokens: %.2f ms (best of 5), %.0f tokens/s; decode %.2f ms\n", f->name,
           len, n_ids, best * 1e3, n_ids / best, dec * 1e3);
    ck_assert_msg(best < 2.0, "encode took %.0f ms: something is quadratic", best * 1e3);
    inferd_free(text);
    inferd_free(ids);
    inferd_free(prompt);
    tok_free(t);
}
END_TEST

int main(void)
{
    if (!test_fixtures_dir())
        test_skip("fixtures not found (set INFERD_FIXTURES)");
    Suite *s = suite_create("tokenizer_perf");
    TCase *tc = tcase_create("perf");
    tcase_set_timeout(tc, 300);
    tcase_add_loop_test(tc, test_encode_100k, 0, 3);
    suite_add_tcase(s, tc);
    return test_run_suite(s);
}
