/* tests/tokenizer/test_tok_stream.c: the incremental detokenizer. For every
 * fixture tokenizer and every golden string plus multi-byte extras (CJK,
 * emoji with ZWJ and skin tones, flags, combining marks, byte-fallback
 * characters), pushing the ids one at a time gives deltas that are each
 * valid UTF-8 and concatenate to the full decode, with and without special
 * tokens. Also: every truncation point (the flush emits the held-back
 * U+FFFD), prompt prefill, random id sequences, and invalid ids. */
#include <stdio.h>
#include <string.h>

#include "common/alloc.h"
#include "common/rng.h"
#include "common/util.h"
#include "test_util.h"
#include "tok_test_util.h"

static const char *const k_extras[] = {
    "日本語のテキスト、中文字符和한국어 텍스트",
    "emoji 🦙🔥👍🏽 family 👨\u200d👩\u200d👧\u200d👦 flag 🇫🇷 keycap 1\uFE0F\u20E3",
    "combining: e\u0301 n\u0303 a\u030A\u0323 Z\u0351\u0352\u0353 \u0915\u094D\u0937",
    "rare: 𠀀𪚥 \u0F00 ꙮ 𝔘𝔫𝔦𝔠𝔬𝔡𝔢 \u00A0nbsp",
    "नमस्ते दुनिया مرحبا بالعالم Привет мир",
    "tabs\tand\nnewlines\r\n\n  indented  ",
};

typedef struct {
    char *p;
    size_t len;
} str;

static void str_add(str *s, const char *d, size_t n)
{
    s->p = inferd_realloc(s->p, s->len + n + 1);
    memcpy(s->p + s->len, d, n);
    s->len += n;
    s->p[s->len] = '\0';
}

/* Stream ids[0..n) (after prefill ids[0..np)) and return the deltas; every
 * delta must be valid UTF-8. flush_empty: the flush must add nothing. */
static str stream_all(const tokenizer *t, const int32_t *ids, int np, int n, bool skip, bool flush_empty)
{
    str acc = {inferd_strdup(""), 0};
    tok_stream *s = tok_stream_new(t, skip);
    tok_stream_prefill(s, ids, np);
    for (int i = np; i <= n; i++) {
        char *d = NULL;
        size_t dl = 0;
        inferd_status st = i < n ? tok_stream_push(s, ids[i], &d, &dl) : tok_stream_flush(s, &d, &dl);
        ck_assert_msg(st == INFERD_OK, "%s", inferd_last_error());
        ck_assert_msg(util_utf8_valid(d, dl), "delta %d is not valid UTF-8", i);
        if (i == n && flush_empty)
            ck_assert_msg(dl == 0, "flush emitted '%s' for complete text", d);
        str_add(&acc, d, dl);
        inferd_free(d);
    }
    tok_stream_free(s);
    return acc;
}

static int tok_test_utf8(uint32_t cp, char *o)
{
    if (cp < 0x800) {
        o[0] = (char)(0xC0 | (cp >> 6));
        o[1] = (char)(0x80 | (cp & 0x3F));
        return 2;
    }
    if (cp < 0x10000) {
        o[0] = (char)(0xE0 | (cp >> 12));
        o[1] = (char)(0x80 | ((cp >> 6) & 0x3F));
        o[2] = (char)(0x80 | (cp & 0x3F));
        return 3;
    }
    o[0] = (char)(0xF0 | (cp >> 18));
    o[1] = (char)(0x80 | ((cp >> 12) & 0x3F));
    o[2] = (char)(0x80 | ((cp >> 6) & 0x3F));
    o[3] = (char)(0x80 | (cp & 0x3F));
    return 4;
}

static str full_decode(const tokenizer *t, const int32_t *ids, int n, bool skip)
{
    str f = {0};
    ck_assert(tok_decode(t, ids, n, skip, &f.p, &f.len) == INFERD_OK);
    return f;
}

static bool has_fffd(const str *s)
{
    return memmem(s->p, s->len, "\xEF\xBF\xBD", 3) != NULL;
}

/* One text: whole stream, every truncation, every clean prefill split. */
static int check_text(const tokenizer *t, const char *text, bool byte_level)
{
    int32_t *ids = NULL;
    int n = 0, checks = 0;
    ck_assert(tok_encode(t, text, strlen(text), true, true, &ids, &n) == INFERD_OK);
    for (int skip = 0; skip < 2; skip++) {
        str full = full_decode(t, ids, n, skip);
        str got = stream_all(t, ids, 0, n, skip, true);
        ck_assert_msg(got.len == full.len && memcmp(got.p, full.p, got.len) == 0,
                      "stream '%s' != decode '%s' (text '%s', skip %d)", got.p, full.p, text, skip);
        checks++;
        for (int k = 0; k < n; k++) {
            str pre = full_decode(t, ids, k, skip);
            /* SentencePiece ByteFallback turns a whole invalid byte run into
             * U+FFFD after the fact; a stream cannot take back what it sent */
            if (byte_level || !has_fffd(&pre)) {
                str g = stream_all(t, ids, 0, k, skip, false);
                ck_assert_msg(g.len == pre.len && memcmp(g.p, pre.p, g.len) == 0,
                              "truncated at %d: stream '%s' != decode '%s'", k, g.p, pre.p);
                inferd_free(g.p);
                checks++;
            }
            /* prefill the first k ids: the rest streams to full minus pre */
            if (!has_fffd(&pre) && pre.len <= full.len && memcmp(pre.p, full.p, pre.len) == 0) {
                str g = stream_all(t, ids, k, n, skip, true);
                ck_assert_msg(g.len == full.len - pre.len && memcmp(g.p, full.p + pre.len, g.len) == 0,
                              "prefill %d: '%s' != '%s'", k, g.p, full.p + pre.len);
                inferd_free(g.p);
                checks++;
            }
            inferd_free(pre.p);
        }
        inferd_free(full.p);
        inferd_free(got.p);
    }
    inferd_free(ids);
    return checks;
}

START_TEST(test_stream_golden_and_extras)
{
    const tok_fixture *f = &k_tok_fixtures[_i];
    bool byte_level = strncmp(f->name, "llama3", 6) == 0;
    tokenizer *t = tt_load(f);
    cJSON *g = tt_load_json("golden/tokenizers.json");
    int texts = 0, checks = 0;
    const cJSON *c;
    cJSON_ArrayForEach(c, cJSON_GetObjectItemCaseSensitive(g, "cases"))
    {
        checks += check_text(t, cJSON_GetObjectItemCaseSensitive(c, "text")->valuestring, byte_level);
        texts++;
    }
    for (size_t i = 0; i < INFERD_ARRAY_LEN(k_extras); i++) {
        checks += check_text(t, k_extras[i], byte_level);
        texts++;
    }
    printf("%s: %d texts, %d stream comparisons\n", f->name, texts, checks);
    cJSON_Delete(g);
    tok_free(t);
}
END_TEST

/* Random ids (normal, byte-fallback and special): deltas stay valid UTF-8;
 * they equal the full decode for byte-level tokenizers, and for
 * SentencePiece ones whenever the full decode has no U+FFFD. */
START_TEST(test_stream_random)
{
    const tok_fixture *f = &k_tok_fixtures[_i];
    bool byte_level = strncmp(f->name, "llama3", 6) == 0;
    tokenizer *t = tt_load(f);
    int vocab = tok_vocab_size(t), equal = 0;
    int32_t ids[48];
    for (int r = 0; r < 200; r++) {
        int i = 0;
        for (uint64_t k = 0; i < 48; k++) {
            uint64_t u = rng_mix64(rng_mix64((uint64_t)r * 131 + (uint64_t)_i) ^ k);
            int kind = (int)(u % 16);
            if (kind == 0) {
                ids[i++] = (int32_t)((u >> 8) % 3); /* <unk> <s> </s>, or ! " # */
            } else if (kind == 1 && !byte_level) {
                ids[i++] = 3 + (int32_t)((u >> 8) % 256); /* any <0xNN>: often invalid */
            } else if (kind <= 5 && !byte_level) {
                /* a whole character as <0xNN> tokens (byte-fallback run) */
                uint32_t cp = 0x80 + (uint32_t)((u >> 8) % 0x1FF80);
                if (cp >= 0xD800 && cp < 0xE000)
                    cp = 0x4E2D;
                char b[4];
                int nb = tok_test_utf8(cp, b);
                for (int j = 0; j < nb && i < 48; j++)
                    ids[i++] = 3 + (int32_t)(unsigned char)b[j];
            } else if (kind == 3 && byte_level) {
                ids[i++] = 128000 + (int32_t)((u >> 8) % 256);
            } else if (byte_level) {
                ids[i++] = (int32_t)((u >> 8) % (uint64_t)vocab);
            } else {
                ids[i++] = 259 + (int32_t)((u >> 8) % (uint64_t)(vocab - 259)); /* past the byte tokens */
            }
        }
        for (int skip = 0; skip < 2; skip++) {
            str full = full_decode(t, ids, 48, skip);
            str got = stream_all(t, ids, 0, 48, skip, false);
            if (byte_level || !has_fffd(&full)) {
                ck_assert_msg(got.len == full.len && memcmp(got.p, full.p, got.len) == 0,
                              "random %d: stream '%s' != decode '%s'", r, got.p, full.p);
                equal++;
            }
            inferd_free(full.p);
            inferd_free(got.p);
        }
    }
    printf("%s: 400 random streams, %d compared equal to the full decode\n", f->name, equal);
    ck_assert_int_gt(equal, 0);
    tok_free(t);
}
END_TEST

/* A decoder that strips more than one leading space (Strip, start 2, after
 * Fuse) on pieces whose first is a lone space: the stream's window must not
 * start on a token whose own text the decoder removes whole, or the strip
 * reaches into the next token (a fuzz_tok_load finding, tests/fuzz/crashes/
 * fuzz_tok_load-strip2_stream_window.bin): every id sequence of the rows
 * streams to its full decode. */
START_TEST(test_stream_strip_window)
{
    static const char *const k_json =
        "{\"model\": {\"type\": \"BPE\", \"vocab\": {\"<unk>\": 0, \"\u2581\": 1, \"\u2581a\": 2, \"b\": 3, "
        "\"\u2581b\": 4}, \"merges\": []}, \"decoder\": {\"type\": \"Sequence\", \"decoders\": ["
        "{\"type\": \"Replace\", \"pattern\": {\"String\": \"\u2581\"}, \"content\": \" \"}, "
        "{\"type\": \"Fuse\"}, {\"type\": \"Strip\", \"content\": \" \", \"start\": 2, \"stop\": 0}]}}";
    static const struct {
        int32_t ids[6];
        int n;
        const char *want;
    } rows[] = {
        {{2, 1, 4}, 3, "a  b"},       /* the lone space is not the text's first */
        {{2, 1, 1, 4}, 4, "a   b"},    /* two of them */
        {{1, 1, 1, 2}, 4, "  a"},      /* the text's first spaces: two of four stripped */
        {{1, 2, 1, 3, 1, 4}, 6, "a b  b"},
    };
    tokenizer *t = NULL;
    ck_assert_msg(tok_load_json(k_json, NULL, &t) == INFERD_OK, "%s", inferd_last_error());
    for (size_t i = 0; i < INFERD_ARRAY_LEN(rows); i++) {
        char *full = NULL;
        size_t fl = 0;
        ck_assert(tok_decode(t, rows[i].ids, rows[i].n, false, &full, &fl) == INFERD_OK);
        ck_assert_msg(strcmp(full, rows[i].want) == 0, "row %zu: full decode '%s', want '%s'", i, full, rows[i].want);
        str st = stream_all(t, rows[i].ids, 0, rows[i].n, false, true);
        ck_assert_msg(st.len == fl && memcmp(st.p, full, fl) == 0, "row %zu: stream '%s', full '%s'", i, st.p, full);
        inferd_free(st.p);
        inferd_free(full);
    }
    tok_free(t);
}
END_TEST

START_TEST(test_stream_bad_id)
{
    tokenizer *t = tt_load(&k_tok_fixtures[3]);
    tok_stream *s = tok_stream_new(t, true);
    char *d = NULL;
    size_t dl = 9;
    /* flushing a stream that holds no id is an empty delta (it once did
     * pointer arithmetic on a NULL id array: found by fuzz_tok_encode) */
    ck_assert(tok_stream_flush(s, &d, &dl) == INFERD_OK);
    ck_assert_str_eq(d, "");
    ck_assert_uint_eq(dl, 0);
    inferd_free(d);
    d = NULL;
    dl = 9;
    ck_assert(tok_stream_push(s, 512, &d, &dl) == INFERD_ERR_INVALID_ARG);
    ck_assert(strstr(inferd_last_error(), "512") != NULL);
    ck_assert(tok_stream_push(s, -1, &d, &dl) == INFERD_ERR_INVALID_ARG);
    ck_assert(tok_stream_push(s, 403, &d, &dl) == INFERD_OK); /* state unchanged by the failures */
    ck_assert_str_eq(d, "Once");
    inferd_free(d);
    tok_stream_free(s);
    int32_t bad[] = {1, 99999};
    char *text = NULL;
    ck_assert(tok_decode(t, bad, 2, true, &text, NULL) == INFERD_ERR_INVALID_ARG);
    tok_free(t);
}
END_TEST

int main(void)
{
    if (!test_fixtures_dir())
        test_skip("fixtures not found (set INFERD_FIXTURES)");
    Suite *s = suite_create("tokenizer_stream");
    TCase *tc = tcase_create("stream");
    tcase_set_timeout(tc, 600);
    tcase_add_loop_test(tc, test_stream_golden_and_extras, 0, k_n_tok_fixtures);
    tcase_add_loop_test(tc, test_stream_random, 0, k_n_tok_fixtures);
    tcase_add_test(tc, test_stream_bad_id);
    tcase_add_test(tc, test_stream_strip_window);
    suite_add_tcase(s, tc);
    return test_run_suite(s);
}
