/* tests/tokenizer/test_tok_golden.c: the tokenizer reproduces every id of
 * golden/tokenizers.json (HF semantics, and the SentencePiece semantics of
 * `ids_no_special_parsing` with parse_special off) for llama2, llama3,
 * llama3-nobos (same ids minus BOS) and stories260K; decode(encode(s)) == s
 * where the golden says decode_roundtrip_ok; Meta's official llama2 vectors;
 * the stories260K generation prompts encode to their golden prompt_ids, and
 * the golden continuations decode (streamed after the prompt) to the printed
 * text; and four threads sharing one tokenizer get the same ids. Prints how
 * many ids were compared. */
#include <pthread.h>
#include <stdio.h>
#include <string.h>

#include "common/alloc.h"
#include "common/util.h"
#include "test_util.h"
#include "tok_test_util.h"

static int g_ids_checked; /* per fixture: Check forks each test */

/* Golden ids of case c for fixture f (BOS dropped for llama3-nobos). */
static int golden_ids(const cJSON *c, const tok_fixture *f, const char *field, int32_t **ids)
{
    const cJSON *e = cJSON_GetObjectItemCaseSensitive(c, f->golden_key);
    const cJSON *arr = e ? cJSON_GetObjectItemCaseSensitive(e, field) : NULL;
    if (!cJSON_IsArray(arr))
        return -1;
    int n = tt_ids(arr, ids);
    if (f->drop_bos && n > 0) {
        ck_assert_int_eq((*ids)[0], 128000);
        memmove(*ids, *ids + 1, (size_t)(n - 1) * sizeof **ids);
        n--;
    }
    return n;
}

static void check_fixture(const tok_fixture *f)
{
    tokenizer *t = tt_load(f);
    cJSON *g = tt_load_json("golden/tokenizers.json");
    const cJSON *cases = cJSON_GetObjectItemCaseSensitive(g, "cases");
    int failed = 0, idx = 0, n_cases = 0;
    const cJSON *c;
    cJSON_ArrayForEach(c, cases)
    {
        const char *text = cJSON_GetObjectItemCaseSensitive(c, "text")->valuestring;
        char what[128];
        int32_t *want = NULL;
        int n = golden_ids(c, f, "ids", &want);
        ck_assert_msg(n >= 0, "%s: case %d has no ids", f->name, idx);
        snprintf(what, sizeof what, "%s case %d", f->name, idx);
        failed += !tt_encode_eq(t, text, true, want, n, what);
        g_ids_checked += n;
        /* the bound servers use to refuse a prompt before encoding it */
        ck_assert_msg((size_t)n * tok_max_token_bytes(t) >= strlen(text), "%s: %zu bytes in %d tokens > max %zu",
                      what, strlen(text), n, tok_max_token_bytes(t));
        inferd_free(want);
        n = golden_ids(c, f, "ids_no_special_parsing", &want);
        if (n >= 0) {
            snprintf(what, sizeof what, "%s case %d (no special parsing)", f->name, idx);
            failed += !tt_encode_eq(t, text, false, want, n, what);
            g_ids_checked += n;
            inferd_free(want);
        }
        n_cases++;
        idx++;
    }
    printf("%s: %d golden cases, %d ids compared, %d failed\n", f->name, n_cases, g_ids_checked, failed);
    ck_assert_int_eq(failed, 0);
    ck_assert_int_gt(n_cases, 0);
    cJSON_Delete(g);
    tok_free(t);
}

START_TEST(test_golden_ids)
{
    g_ids_checked = 0;
    check_fixture(&k_tok_fixtures[_i]);
}
END_TEST

/* decode(encode(s)) == s where decode_roundtrip_ok says so (stories260K
 * shares llama2's semantics, so llama2's flag applies to it too). */
START_TEST(test_roundtrip)
{
    const tok_fixture *f = &k_tok_fixtures[_i];
    const char *flag_key = strcmp(f->golden_key, "stories260K") == 0 ? "llama2" : f->golden_key;
    tokenizer *t = tt_load(f);
    cJSON *g = tt_load_json("golden/tokenizers.json");
    int checked = 0, idx = 0;
    const cJSON *c;
    cJSON_ArrayForEach(c, cJSON_GetObjectItemCaseSensitive(g, "cases"))
    {
        const cJSON *ok = cJSON_GetObjectItemCaseSensitive(c, "decode_roundtrip_ok");
        const char *text = cJSON_GetObjectItemCaseSensitive(c, "text")->valuestring;
        idx++;
        if (!cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(ok, flag_key)))
            continue;
        int32_t *ids = NULL;
        int n = 0;
        ck_assert(tok_encode(t, text, strlen(text), true, true, &ids, &n) == INFERD_OK);
        char *out = NULL;
        size_t len = 0;
        ck_assert_msg(tok_decode(t, ids, n, true, &out, &len) == INFERD_OK, "%s", inferd_last_error());
        ck_assert_msg(len == strlen(text) && memcmp(out, text, len) == 0, "%s case %d: decode '%s' != '%s'",
                      f->name, idx - 1, out, text);
        checked++;
        inferd_free(out);
        inferd_free(ids);
    }
    printf("%s: %d round trips\n", f->name, checked);
    ck_assert_int_gt(checked, 15);
    cJSON_Delete(g);
    tok_free(t);
}
END_TEST

START_TEST(test_official_llama2)
{
    tokenizer *t = tt_load(&k_tok_fixtures[0]);
    cJSON *g = tt_load_json("golden/tokenizers.json");
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(g, "official_llama2_vectors");
    const cJSON *c;
    int n_cases = 0;
    cJSON_ArrayForEach(c, cJSON_GetObjectItemCaseSensitive(v, "cases"))
    {
        int32_t *want = NULL;
        int n = tt_ids(cJSON_GetObjectItemCaseSensitive(c, "ids"), &want);
        ck_assert(tt_encode_eq(t, cJSON_GetObjectItemCaseSensitive(c, "text")->valuestring, true, want, n,
                               "official llama2 vector"));
        inferd_free(want);
        n_cases++;
    }
    ck_assert_int_eq(n_cases, 3);
    cJSON_Delete(g);
    tok_free(t);
}
END_TEST

/* Stream the generated ids after the prompt; return the concatenation. */
static char *stream_continuation(const tokenizer *t, const int32_t *prompt, int np, const int32_t *gen, int ng)
{
    tok_stream *s = tok_stream_new(t, true);
    tok_stream_prefill(s, prompt, np);
    char *acc = inferd_strdup("");
    size_t acc_len = 0;
    for (int i = 0; i <= ng; i++) {
        char *d = NULL;
        size_t dl = 0;
        inferd_status st = i < ng ? tok_stream_push(s, gen[i], &d, &dl) : tok_stream_flush(s, &d, &dl);
        ck_assert(st == INFERD_OK);
        acc = inferd_realloc(acc, acc_len + dl + 1);
        memcpy(acc + acc_len, d, dl + 1);
        acc_len += dl;
        inferd_free(d);
    }
    tok_stream_free(s);
    return acc;
}

START_TEST(test_stories_prompts)
{
    tokenizer *t = tt_load(&k_tok_fixtures[3]);
    cJSON *g = tt_load_json("golden/stories260K.json");
    const cJSON *c;
    int n_cases = 0;
    cJSON_ArrayForEach(c, cJSON_GetObjectItemCaseSensitive(g, "cases"))
    {
        const char *prompt = cJSON_GetObjectItemCaseSensitive(c, "prompt")->valuestring;
        const char *out = cJSON_GetObjectItemCaseSensitive(c, "stdout_text")->valuestring;
        int32_t *want = NULL, *gen = NULL;
        int n = tt_ids(cJSON_GetObjectItemCaseSensitive(c, "prompt_ids"), &want);
        int ng = tt_ids(cJSON_GetObjectItemCaseSensitive(c, "generated_ids"), &gen);
        ck_assert(tt_encode_eq(t, prompt, true, want, n, prompt));
        /* printed text = prompt + continuation */
        size_t pl = strlen(prompt);
        ck_assert(strncmp(out, prompt, pl) == 0);
        char *cont = stream_continuation(t, want, n, gen, ng);
        ck_assert_msg(strcmp(cont, out + pl) == 0 || (strlen(out + pl) == strlen(cont) + 1 &&
                                                      strncmp(cont, out + pl, strlen(cont)) == 0 &&
                                                      out[strlen(out) - 1] == '\n'),
                      "case %d: continuation\n'%s'\n!=\n'%s'", n_cases, cont, out + pl);
        inferd_free(cont);
        inferd_free(want);
        inferd_free(gen);
        n_cases++;
    }
    printf("stories260K: %d generation prompts\n", n_cases);
    ck_assert_int_gt(n_cases, 0);
    cJSON_Delete(g);
    tok_free(t);
}
END_TEST

START_TEST(test_metadata)
{
    tokenizer *l2 = tt_load(&k_tok_fixtures[0]);
    ck_assert_int_eq(tok_vocab_size(l2), 32000);
    ck_assert_int_eq(tok_bos_id(l2), 1);
    ck_assert_int_eq(tok_eos_id(l2), 2);
    ck_assert(tok_is_special(l2, 1) && !tok_is_special(l2, 100));
    ck_assert_str_eq(tok_id_to_piece(l2, 15043), "\xE2\x96\x81Hello");
    /* the longest piece, as a scan of every id's text finds it */
    size_t longest = 0;
    for (int32_t id = 0; id < tok_vocab_size(l2); id++) {
        const char *p = tok_id_to_piece(l2, id);
        if (p && strlen(p) > longest)
            longest = strlen(p);
    }
    ck_assert_uint_eq(tok_max_token_bytes(l2), longest);
    ck_assert_uint_ge(longest, 16);
    ck_assert_str_eq(tok_id_to_piece(l2, 1), "<s>");
    ck_assert_ptr_null(tok_id_to_piece(l2, 32000));
    ck_assert_int_eq(tok_piece_to_id(l2, "<0x0A>"), 13);
    tok_free(l2);
    tokenizer *l3 = tt_load(&k_tok_fixtures[1]);
    ck_assert_int_eq(tok_vocab_size(l3), 128256);
    ck_assert_int_eq(tok_bos_id(l3), 128000);
    ck_assert_int_eq(tok_eos_id(l3), 128009);
    ck_assert_int_eq(tok_piece_to_id(l3, "<|eot_id|>"), 128009);
    ck_assert_ptr_nonnull(tok_chat_template(l3));
    ck_assert(strstr(tok_chat_template(l3), "start_header_id") != NULL);
    tok_free(l3);
    tokenizer *nb = tt_load(&k_tok_fixtures[2]);
    ck_assert_int_eq(tok_bos_id(nb), 128000);
    ck_assert_int_eq(tok_eos_id(nb), 128001);
    tok_free(nb);
}
END_TEST

typedef struct {
    const tokenizer *t;
    const cJSON *cases;
    int mismatches;
} thread_arg;

static void *encode_all(void *p)
{
    thread_arg *a = p;
    for (int rep = 0; rep < 20; rep++) {
        const cJSON *c;
        cJSON_ArrayForEach(c, a->cases)
        {
            const char *text = cJSON_GetObjectItemCaseSensitive(c, "text")->valuestring;
            int32_t *want = NULL, *ids = NULL;
            int nw = tt_ids(cJSON_GetObjectItemCaseSensitive(cJSON_GetObjectItemCaseSensitive(c, "llama3"), "ids"),
                            &want);
            int n = 0;
            if (tok_encode(a->t, text, strlen(text), true, true, &ids, &n) != INFERD_OK || n != nw ||
                memcmp(ids, want, (size_t)n * sizeof *ids) != 0)
                a->mismatches++;
            char *out = NULL;
            if (tok_decode(a->t, ids, n, true, &out, NULL) != INFERD_OK)
                a->mismatches++;
            inferd_free(out);
            inferd_free(ids);
            inferd_free(want);
        }
    }
    return NULL;
}

START_TEST(test_threads)
{
    tokenizer *t = tt_load(&k_tok_fixtures[1]);
    cJSON *g = tt_load_json("golden/tokenizers.json");
    pthread_t th[4];
    thread_arg args[4];
    for (int i = 0; i < 4; i++) {
        args[i] = (thread_arg){t, cJSON_GetObjectItemCaseSensitive(g, "cases"), 0};
        ck_assert_int_eq(pthread_create(&th[i], NULL, encode_all, &args[i]), 0);
    }
    for (int i = 0; i < 4; i++) {
        pthread_join(th[i], NULL);
        ck_assert_int_eq(args[i].mismatches, 0);
    }
    cJSON_Delete(g);
    tok_free(t);
}
END_TEST

/* The real Qwen3 tokenizer (../shared fixtures: byte-level BPE, 151,669
 * ids, Qwen2.5's BPE too) against HF tokenizers' ids for the shared golden
 * texts plus CJK, digits, emoji, code, whitespace runs and ChatML control
 * tokens: tests/tokenizer/golden_qwen3.json, made on the GPU machine by
 * `scripts/hf_reference.py tok-golden` (HF is installed there). */
START_TEST(test_qwen3_golden)
{
    static const tok_fixture qwen3 = {"qwen3", "tokenizers/qwen3", NULL, false};
    tokenizer *t = tt_load(&qwen3);
    char *path = util_path_join(INFERD_TEST_SOURCE_DIR, "tests/tokenizer/golden_qwen3.json");
    char *text = NULL;
    size_t len = 0;
    ck_assert_msg(util_read_file(path, (size_t)1 << 20, &text, &len) == INFERD_OK, "%s: %s", path, inferd_last_error());
    cJSON *g = cJSON_ParseWithLength(text, len);
    ck_assert(g != NULL);
    int failed = 0, n_cases = 0, n_ids = 0;
    const cJSON *c;
    cJSON_ArrayForEach(c, cJSON_GetObjectItemCaseSensitive(g, "cases"))
    {
        int32_t *want = NULL;
        const int n = tt_ids(cJSON_GetObjectItemCaseSensitive(c, "ids"), &want);
        char what[64];
        snprintf(what, sizeof what, "qwen3 case %d", n_cases);
        failed += !tt_encode_eq(t, cJSON_GetObjectItemCaseSensitive(c, "text")->valuestring, true, want, n, what);
        n_ids += n;
        n_cases++;
        inferd_free(want);
    }
    printf("qwen3: %d golden cases, %d ids compared, %d failed\n", n_cases, n_ids, failed);
    ck_assert_int_ge(n_cases, 30);
    ck_assert_int_eq(failed, 0);
    cJSON_Delete(g);
    inferd_free(text);
    inferd_free(path);
    tok_free(t);
}
END_TEST

int main(void)
{
    if (!test_fixtures_dir())
        test_skip("fixtures not found (set INFERD_FIXTURES)");
    Suite *s = suite_create("tokenizer_golden");
    TCase *tc = tcase_create("golden");
    tcase_set_timeout(tc, 300);
    tcase_add_loop_test(tc, test_golden_ids, 0, k_n_tok_fixtures);
    tcase_add_loop_test(tc, test_roundtrip, 0, k_n_tok_fixtures);
    tcase_add_test(tc, test_official_llama2);
    tcase_add_test(tc, test_stories_prompts);
    tcase_add_test(tc, test_metadata);
    tcase_add_test(tc, test_threads);
    tcase_add_test(tc, test_qwen3_golden);
    suite_add_tcase(s, tc);
    return test_run_suite(s);
}
