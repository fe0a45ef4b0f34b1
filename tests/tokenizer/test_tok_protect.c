/* tests/tokenizer/test_tok_protect.c: tok_encode_ex's protected spans (text
 * that must never become special tokens: chat message contents), the
 * special-token scanners used to find such text (tok_find_special,
 * tok_special_edges), and tokenizer_config.json's special-token texts.
 *
 * Expected ids are never written down: each row says which parts of its
 * text must encode with and which without special-token parsing, and the
 * protected encode must equal those parts encoded apart and joined (exact
 * on byte-level tokenizers, whose pieces split at special tokens anyway).
 */
#include <stdio.h>
#include <string.h>

#include "common/alloc.h"
#include "common/util.h"
#include "test_util.h"
#include "tok_test_util.h"

/* Text with '{' '}' marking protected spans ("{}" = zero width), cut at
 * '^' into parts whose special parsing alternates, starting with `first`. */
typedef struct {
    const char *marked;
    const char *parts; /* same text without '{', '}', cut with '^' */
    bool first;        /* parse_special of the first part */
} protect_row;

static const protect_row k_rows[] = {
    {"a<|eot_id|>b<|eot_id|>c", "a<|eot_id|>b<|eot_id|>c", true},                     /* no spans */
    {"{a<|eot_id|>b<|eot_id|>c}", "a<|eot_id|>b<|eot_id|>c", false},                   /* all text */
    {"a<|eot_id|>b{<|eot_id|>}c", "a<|eot_id|>b^<|eot_id|>c", true},                   /* second one */
    {"a{<|eot_id|>}b<|eot_id|>c", "a<|eot_id|>b^<|eot_id|>^c", false},                 /* first one */
    {"a<|e{}ot_id|>b", "a<|eot_id|>b", false},                                          /* straddled */
    {"a{}<|eot_id|>{}b", "a<|eot_id|>b", true},                                         /* edges only */
    {"x<|start_header_id|>{y<|end_header_id|>}z", "x<|start_header_id|>y^<|end_header_id|>z", true},
    {"{<|eot_id|>}<|eot_id|>", "<|eot_id|>^<|eot_id|>", false},                        /* rescan after */
};

/* Strip the marks: clean text and spans (heap). */
static char *unmark(const char *m, tok_span *spans, int *n_spans)
{
    char *out = inferd_strdup(m);
    size_t w = 0, open = 0;
    *n_spans = 0;
    for (const char *p = m; *p; p++) {
        if (*p == '{')
            open = w;
        else if (*p == '}')
            spans[(*n_spans)++] = (tok_span){open, w};
        else
            out[w++] = *p;
    }
    out[w] = '\0';
    return out;
}

START_TEST(test_protect_table)
{
    tokenizer *t = tt_load(&k_tok_fixtures[1]); /* llama3: byte-level */
    const protect_row *r = &k_rows[_i];
    tok_span spans[8];
    int ns;
    char *text = unmark(r->marked, spans, &ns);
    tok_encode_opts o = {.add_special = false, .parse_special = true, .protect = spans, .n_protect = ns};
    int32_t *got = NULL;
    int n = 0;
    ck_assert_int_eq(tok_encode_ex(t, text, strlen(text), &o, &got, &n), INFERD_OK);
    /* the parts encoded apart */
    int32_t want[256];
    int nw = 0;
    bool ps = r->first;
    char *parts = inferd_strdup(r->parts);
    for (char *save = NULL, *part = strtok_r(parts, "^", &save); part; part = strtok_r(NULL, "^", &save)) {
        int32_t *ids = NULL;
        int k = 0;
        ck_assert_int_eq(tok_encode(t, part, strlen(part), false, ps, &ids, &k), INFERD_OK);
        ck_assert(nw + k <= 256);
        memcpy(want + nw, ids, sizeof *ids * (size_t)k);
        nw += k;
        inferd_free(ids);
        ps = !ps;
    }
    char a[1024], b[1024];
    ck_assert_msg(n == nw && memcmp(got, want, sizeof *got * (size_t)n) == 0, "%s: got %s want %s", r->marked,
                  tt_fmt_ids(got, n, a, sizeof a), tt_fmt_ids(want, nw, b, sizeof b));
    inferd_free(parts);
    inferd_free(got);
    inferd_free(text);
    tok_free(t);
}
END_TEST

typedef struct {
    const char *s;
    bool found; /* tok_find_special from 0 */
    size_t ms, me;
    bool head, tail;
} scan_row;

static const scan_row k_scan[] = {
    {"x<|eot_id|>y", true, 1, 11, false, false},
    {"plain text", false, 0, 0, false, false},
    {"foo <|eot", false, 0, 0, true, false},
    {"_id|> foo", false, 0, 0, false, true},
    {"<|begin_of_text|><|eot_id|>", true, 0, 17, false, false},
    {"", false, 0, 0, false, false},
};

START_TEST(test_scan_table)
{
    tokenizer *t = tt_load(&k_tok_fixtures[1]);
    for (size_t i = 0; i < INFERD_ARRAY_LEN(k_scan); i++) {
        const scan_row *r = &k_scan[i];
        size_t ms = 0, me = 0, n = strlen(r->s);
        bool f = tok_find_special(t, r->s, n, 0, &ms, &me);
        ck_assert_msg(f == r->found && (!f || (ms == r->ms && me == r->me)), "find '%s'", r->s);
        bool head, tail;
        tok_special_edges(t, r->s, n, &head, &tail);
        ck_assert_msg(head == r->head && tail == r->tail, "edges '%s': %d %d", r->s, head, tail);
    }
    tok_free(t);
}
END_TEST

/* Added tokens that are not special (Qwen3's <think>) are parsed even in a
 * protected span, as HF does with split_special_tokens; special ones not. */
START_TEST(test_non_special_added)
{
    char *dir = test_fixture_path("tokenizers/qwen3");
    if (!dir || !util_file_exists(dir))
        test_skip("tokenizers/qwen3 not found");
    tokenizer *t = NULL;
    ck_assert_int_eq(tok_load(dir, &t), INFERD_OK);
    inferd_free(dir);
    const char *text = "<think><|im_end|>";
    tok_span all = {0, strlen(text)};
    tok_encode_opts o = {.parse_special = true, .protect = &all, .n_protect = 1};
    int32_t *ids = NULL;
    int n = 0;
    ck_assert_int_eq(tok_encode_ex(t, text, strlen(text), &o, &ids, &n), INFERD_OK);
    int32_t think = tok_piece_to_id(t, "<think>"), im_end = tok_piece_to_id(t, "<|im_end|>");
    ck_assert(think >= 0 && !tok_is_special(t, think) && tok_is_special(t, im_end));
    ck_assert(n > 1 && ids[0] == think);
    for (int i = 0; i < n; i++)
        ck_assert_int_ne(ids[i], im_end);
    inferd_free(ids);
    /* tokenizer_config.json's special-token texts: set, null, absent */
    ck_assert(tok_has_config(t));
    ck_assert_str_eq(tok_config_token(t, "eos_token"), "<|im_end|>");
    ck_assert_str_eq(tok_config_token(t, "pad_token"), "<|endoftext|>");
    ck_assert(tok_config_token(t, "bos_token") == NULL);
    ck_assert(tok_config_token(t, "mask_token") == NULL);
    tok_free(t);
}
END_TEST

int main(void)
{
    if (!test_fixtures_dir())
        test_skip("fixtures not found (set INFERD_FIXTURES)");
    Suite *s = suite_create("tok_protect");
    TCase *tc = tcase_create("protect");
    tcase_set_timeout(tc, 120);
    tcase_add_loop_test(tc, test_protect_table, 0, (int)INFERD_ARRAY_LEN(k_rows));
    tcase_add_test(tc, test_scan_table);
    tcase_add_test(tc, test_non_special_added);
    suite_add_tcase(s, tc);
    return test_run_suite(s);
}
