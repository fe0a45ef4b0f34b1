/* tests/tokenizer/test_tok_load.c: loading errors and pipeline semantics on
 * small hand-written tokenizer.json files (no fixtures needed).
 *
 * - a table of malformed or unsupported files: each gives the expected
 *   status and a message naming the problem, never a crash;
 * - BPE: merge priority, unknown-token fusing, byte fallback, ignore_merges;
 * - split behaviors, Metaspace and ByteLevel pre-tokenizers (HF's own
 *   documented examples), checked on the pre-tokenizer output directly;
 * - added tokens: lstrip / rstrip / single_word / normalized, parse_special;
 * - decoders, NFC/NFD, invalid UTF-8 input;
 * - 3000 randomly mutated files: a message or a working tokenizer, no crash.
 */
#include <stdio.h>
#include <string.h>

#include "common/alloc.h"
#include "common/log.h"
#include "common/rng.h"
#include "common/util.h"
#include "tokenizer/tok_internal.h"
#include "tokenizer/tok_nfc.h"
#include "test_util.h"

/* A BPE tokenizer.json around a vocab, merges and extra top-level fields. */
static char *mk_json(const char *vocab, const char *merges, const char *model_extra, const char *extra)
{
    char *buf = inferd_malloc(8192);
    snprintf(buf, 8192, "{\"model\": {\"type\": \"BPE\", \"vocab\": %s, \"merges\": %s%s}%s}", vocab, merges,
             model_extra, extra);
    return buf;
}

#define V_ABC "{\"a\":0,\"b\":1,\"c\":2,\"ab\":3,\"bc\":4,\"abc\":5,\"<unk>\":6,\"<0x78>\":7,\" \":8,\"-\":9}"

static const struct {
    const char *json;
    inferd_status st;
    const char *needle;
} k_bad[] = {
    {"", INFERD_ERR_FORMAT, "invalid JSON"},
    {"{", INFERD_ERR_FORMAT, "invalid JSON"},
    {"{\"model\": {\"type\": \"BPE\",}", INFERD_ERR_FORMAT, "invalid JSON"},
    {"[]", INFERD_ERR_FORMAT, "not a JSON object"},
    {"{}", INFERD_ERR_FORMAT, "missing \"model\""},
    {"{\"model\": 3}", INFERD_ERR_FORMAT, "missing \"model\""},
    {"{\"model\": {\"type\": \"WordPiece\", \"vocab\": {\"a\": 0}}}", INFERD_ERR_UNSUPPORTED, "'WordPiece'"},
    {"{\"model\": {\"type\": \"Unigram\", \"vocab\": [[\"a\", 0.0]]}}", INFERD_ERR_UNSUPPORTED, "'Unigram'"},
    {"{\"model\": {\"type\": \"WordLevel\", \"vocab\": {}}}", INFERD_ERR_UNSUPPORTED, "'WordLevel'"},
    {"{\"model\": {\"vocab\": {\"a\": 0}}}", INFERD_ERR_FORMAT, "no \"type\""},
    {"{\"model\": {\"type\": \"BPE\", \"merges\": []}}", INFERD_ERR_FORMAT, "model.vocab"},
    {"{\"model\": {\"type\": \"BPE\", \"vocab\": [], \"merges\": []}}", INFERD_ERR_FORMAT, "model.vocab"},
    {"{\"model\": {\"type\": \"BPE\", \"vocab\": {}, \"merges\": []}}", INFERD_ERR_FORMAT, "empty"},
    {"{\"model\": {\"type\": \"BPE\", \"vocab\": {\"a\": -1}, \"merges\": []}}", INFERD_ERR_FORMAT, "'a': id"},
    {"{\"model\": {\"type\": \"BPE\", \"vocab\": {\"a\": 1.5}, \"merges\": []}}", INFERD_ERR_FORMAT, "'a': id"},
    {"{\"model\": {\"type\": \"BPE\", \"vocab\": {\"a\": 1e12}, \"merges\": []}}", INFERD_ERR_FORMAT, "'a': id"},
    {"{\"model\": {\"type\": \"BPE\", \"vocab\": {\"a\": \"0\"}, \"merges\": []}}", INFERD_ERR_FORMAT, "'a': id"},
    {"{\"model\": {\"type\": \"BPE\", \"vocab\": {\"a\": 0, \"b\": 0}, \"merges\": []}}", INFERD_ERR_FORMAT,
     "used twice"},
    {"{\"model\": {\"type\": \"BPE\", \"vocab\": {\"a\": 0}}}", INFERD_ERR_FORMAT, "model.merges"},
    {"{\"model\": {\"type\": \"BPE\", \"vocab\": {\"a\": 0}, \"merges\": \"a b\"}}", INFERD_ERR_FORMAT,
     "model.merges"},
    {"{\"model\": {\"type\": \"BPE\", \"vocab\": " V_ABC ", \"merges\": [\"ab\"]}}", INFERD_ERR_FORMAT,
     "merges[0] 'ab' is not two tokens"},
    {"{\"model\": {\"type\": \"BPE\", \"vocab\": " V_ABC ", \"merges\": [\"a b\", \"a b c\"]}}", INFERD_ERR_FORMAT,
     "merges[1]"},
    {"{\"model\": {\"type\": \"BPE\", \"vocab\": " V_ABC ", \"merges\": [\"x b\"]}}", INFERD_ERR_FORMAT,
     "left token 'x' is not in the vocabulary"},
    {"{\"model\": {\"type\": \"BPE\", \"vocab\": " V_ABC ", \"merges\": [[\"a\", \"zz\"]]}}", INFERD_ERR_FORMAT,
     "right token 'zz'"},
    {"{\"model\": {\"type\": \"BPE\", \"vocab\": " V_ABC ", \"merges\": [\"c a\"]}}", INFERD_ERR_FORMAT,
     "merged token 'ca'"},
    {"{\"model\": {\"type\": \"BPE\", \"vocab\": " V_ABC ", \"merges\": [[\"a\", \"b\", \"c\"]]}}", INFERD_ERR_FORMAT,
     "merges[0] is neither"},
    {"{\"model\": {\"type\": \"BPE\", \"vocab\": " V_ABC ", \"merges\": [[0, 1]]}}", INFERD_ERR_FORMAT,
     "merges[0] is neither"},
    {"{\"model\": {\"type\": \"BPE\", \"vocab\": " V_ABC ", \"merges\": []}, \"added_tokens\": 5}",
     INFERD_ERR_FORMAT, "added_tokens"},
    {"{\"model\": {\"type\": \"BPE\", \"vocab\": " V_ABC ", \"merges\": []}, \"added_tokens\": [{\"id\": 9}]}",
     INFERD_ERR_FORMAT, "content"},
    {"{\"model\": {\"type\": \"BPE\", \"vocab\": " V_ABC
     ", \"merges\": []}, \"added_tokens\": [{\"id\": -3, \"content\": \"<x>\"}]}",
     INFERD_ERR_FORMAT, "'<x>': id"},
    {"{\"model\": {\"type\": \"BPE\", \"vocab\": " V_ABC ", \"merges\": []}, \"normalizer\": {\"type\": \"NFKD\"}}",
     INFERD_ERR_UNSUPPORTED, "normalizer type 'NFKD'"},
    {"{\"model\": {\"type\": \"BPE\", \"vocab\": " V_ABC ", \"merges\": []}, \"normalizer\": {}}", INFERD_ERR_FORMAT,
     "normalizer: missing \"type\""},
    {"{\"model\": {\"type\": \"BPE\", \"vocab\": " V_ABC
     ", \"merges\": []}, \"normalizer\": {\"type\": \"Sequence\", \"normalizers\": 1}}",
     INFERD_ERR_FORMAT, "not an array"},
    {"{\"model\": {\"type\": \"BPE\", \"vocab\": " V_ABC
     ", \"merges\": []}, \"normalizer\": {\"type\": \"Replace\", \"pattern\": {\"String\": \" \"}}}",
     INFERD_ERR_FORMAT, "\"content\""},
    {"{\"model\": {\"type\": \"BPE\", \"vocab\": " V_ABC
     ", \"merges\": []}, \"pre_tokenizer\": {\"type\": \"BertPreTokenizer\"}}",
     INFERD_ERR_UNSUPPORTED, "pre_tokenizer type 'BertPreTokenizer'"},
    {"{\"model\": {\"type\": \"BPE\", \"vocab\": " V_ABC ", \"merges\": []}, \"pre_tokenizer\": {\"type\": "
     "\"Split\", \"pattern\": {\"Regex\": \"(\"}, \"behavior\": \"Isolated\"}}",
     INFERD_ERR_FORMAT, "bad regex"},
    {"{\"model\": {\"type\": \"BPE\", \"vocab\": " V_ABC
     ", \"merges\": []}, \"pre_tokenizer\": {\"type\": \"Split\", \"behavior\": \"Isolated\"}}",
     INFERD_ERR_FORMAT, "\"pattern\""},
    {"{\"model\": {\"type\": \"BPE\", \"vocab\": " V_ABC ", \"merges\": []}, \"pre_tokenizer\": {\"type\": "
     "\"Split\", \"pattern\": {\"String\": \"-\"}, \"behavior\": \"Sideways\"}}",
     INFERD_ERR_FORMAT, "unknown behavior 'Sideways'"},
    {"{\"model\": {\"type\": \"BPE\", \"vocab\": " V_ABC
     ", \"merges\": []}, \"pre_tokenizer\": {\"type\": \"Metaspace\", \"prepend_scheme\": \"sometimes\"}}",
     INFERD_ERR_FORMAT, "prepend_scheme 'sometimes'"},
    {"{\"model\": {\"type\": \"BPE\", \"vocab\": " V_ABC ", \"merges\": []}, \"decoder\": {\"type\": \"WordPiece\"}}",
     INFERD_ERR_UNSUPPORTED, "decoder type 'WordPiece'"},
    {"{\"model\": {\"type\": \"BPE\", \"vocab\": " V_ABC
     ", \"merges\": []}, \"decoder\": {\"type\": \"Strip\", \"content\": \" \", \"start\": -1, \"stop\": 0}}",
     INFERD_ERR_FORMAT, "decoder Strip"},
    {"{\"model\": {\"type\": \"BPE\", \"vocab\": " V_ABC
     ", \"merges\": []}, \"post_processor\": {\"type\": \"BertProcessing\"}}",
     INFERD_ERR_UNSUPPORTED, "post_processor type 'BertProcessing'"},
    {"{\"model\": {\"type\": \"BPE\", \"vocab\": " V_ABC ", \"merges\": []}, \"post_processor\": {\"type\": "
     "\"TemplateProcessing\", \"single\": [{\"SpecialToken\": {\"id\": \"<s>\"}}], \"special_tokens\": {}}}",
     INFERD_ERR_FORMAT, "'<s>' has no \"ids\""},
    {"{\"model\": {\"type\": \"BPE\", \"vocab\": " V_ABC ", \"merges\": []}, \"post_processor\": {\"type\": "
     "\"TemplateProcessing\", \"single\": [{\"SpecialToken\": {\"id\": \"<s>\"}}], \"special_tokens\": "
     "{\"<s>\": {\"ids\": [99]}}}}",
     INFERD_ERR_FORMAT, "outside the vocabulary"},
    {"{\"model\": {\"type\": \"BPE\", \"vocab\": " V_ABC
     ", \"merges\": []}, \"post_processor\": {\"type\": \"TemplateProcessing\", \"single\": 3}}",
     INFERD_ERR_FORMAT, "\"single\""},
};

START_TEST(test_malformed_table)
{
    for (size_t i = 0; i < INFERD_ARRAY_LEN(k_bad); i++) {
        tokenizer *t = (tokenizer *)0x1;
        inferd_status st = tok_load_json(k_bad[i].json, NULL, &t);
        ck_assert_msg(st == k_bad[i].st, "row %zu: status %s, want %s (%s)", i, inferd_status_str(st),
                      inferd_status_str(k_bad[i].st), inferd_last_error());
        ck_assert_msg(strstr(inferd_last_error(), k_bad[i].needle) != NULL, "row %zu: message '%s' lacks '%s'", i,
                      inferd_last_error(), k_bad[i].needle);
        ck_assert_msg(strncmp(inferd_last_error(), "tokenizer.json: ", 16) == 0, "row %zu: '%s'", i,
                      inferd_last_error());
        ck_assert_ptr_null(t);
    }
    printf("malformed table: %zu rows\n", INFERD_ARRAY_LEN(k_bad));
}
END_TEST

START_TEST(test_deep_nesting)
{
    char pre[2048] = "", post[2048] = "";
    for (int i = 0; i < 20; i++) {
        strcat(pre, "{\"type\": \"Sequence\", \"normalizers\": [");
        strcat(post, "]}");
    }
    char *j = mk_json(V_ABC, "[]", "", "");
    size_t n = strlen(j);
    j[n - 1] = '\0';
    char *full = inferd_malloc(8192);
    snprintf(full, 8192, "%s, \"normalizer\": %s%s}", j, pre, post);
    tokenizer *t = NULL;
    ck_assert_int_eq(tok_load_json(full, NULL, &t), INFERD_ERR_FORMAT);
    ck_assert(strstr(inferd_last_error(), "nested too deep") != NULL);
    inferd_free(j);
    inferd_free(full);
}
END_TEST

START_TEST(test_load_files)
{
    tokenizer *t = NULL;
    ck_assert_int_eq(tok_load("/nonexistent/dir", &t), INFERD_ERR_NOT_FOUND);
    ck_assert(strstr(inferd_last_error(), "/nonexistent/dir") != NULL);
    char *dir = test_make_temp_dir("tok-bad");
    char *path = util_path_join(dir, "tokenizer.json");
    FILE *f = fopen(path, "w");
    fputs("{\"model\": {\"type\": \"Unigram\"}}", f);
    fclose(f);
    ck_assert_int_eq(tok_load(dir, &t), INFERD_ERR_UNSUPPORTED);
    ck_assert(strstr(inferd_last_error(), path) != NULL && strstr(inferd_last_error(), "Unigram") != NULL);
    char *ok = mk_json(V_ABC, "[]", "", "");
    f = fopen(path, "w");
    fputs(ok, f);
    fclose(f);
    char *cfg = util_path_join(dir, "tokenizer_config.json");
    f = fopen(cfg, "w");
    fputs("{not json", f);
    fclose(f);
    ck_assert_int_eq(tok_load(dir, &t), INFERD_ERR_FORMAT);
    ck_assert(strstr(inferd_last_error(), "tokenizer_config.json") != NULL);
    f = fopen(cfg, "w");
    fputs("{\"bos_token\": {\"content\": \"a\"}, \"eos_token\": \"b\", \"chat_template\": "
          "[{\"name\": \"tool_use\", \"template\": \"T\"}, {\"name\": \"default\", \"template\": \"D\"}]}",
          f);
    fclose(f);
    ck_assert_int_eq(tok_load(dir, &t), INFERD_OK);
    ck_assert_int_eq(tok_bos_id(t), 0);
    ck_assert_int_eq(tok_eos_id(t), 1);
    ck_assert_str_eq(tok_chat_template(t), "D");
    tok_free(t);
    remove(cfg);
    remove(path);
    remove(dir);
    inferd_free(cfg);
    inferd_free(ok);
    inferd_free(path);
    inferd_free(dir);
}
END_TEST

/* Encode with the given tokenizer JSON; compare against want[]. */
static void enc_eq(const char *json, const char *text, bool parse_special, const int32_t *want, int n_want)
{
    tokenizer *t = NULL;
    ck_assert_msg(tok_load_json(json, NULL, &t) == INFERD_OK, "%s", inferd_last_error());
    int32_t *ids = NULL;
    int n = 0;
    ck_assert_msg(tok_encode(t, text, strlen(text), true, parse_special, &ids, &n) == INFERD_OK, "%s",
                  inferd_last_error());
    char got[256] = "", exp[256] = "";
    for (int i = 0; i < n; i++)
        snprintf(got + strlen(got), sizeof got - strlen(got), "%d ", (int)ids[i]);
    for (int i = 0; i < n_want; i++)
        snprintf(exp + strlen(exp), sizeof exp - strlen(exp), "%d ", (int)want[i]);
    ck_assert_msg(strcmp(got, exp) == 0, "'%s': got [%s] want [%s]", text, got, exp);
    inferd_free(ids);
    tok_free(t);
}

#define IDS(...) (const int32_t[]){__VA_ARGS__}, (int)(sizeof((const int32_t[]){__VA_ARGS__}) / sizeof(int32_t))

START_TEST(test_bpe_semantics)
{
    char *j = mk_json(V_ABC, "[\"a b\", \"ab c\"]", "", "");
    enc_eq(j, "abc", true, IDS(5));
    enc_eq(j, "cab", true, IDS(2, 3));
    inferd_free(j);
    /* rank decides, not position: "b c" (rank 0) before "a b" */
    j = mk_json(V_ABC, "[\"b c\", \"a b\"]", "", "");
    enc_eq(j, "abc", true, IDS(0, 4));
    inferd_free(j);
    /* unknown characters: fused, not fused, dropped without unk_token */
    j = mk_json(V_ABC, "[]", ", \"unk_token\": \"<unk>\", \"fuse_unk\": true", "");
    enc_eq(j, "yya", true, IDS(6, 0));
    inferd_free(j);
    j = mk_json(V_ABC, "[]", ", \"unk_token\": \"<unk>\", \"fuse_unk\": false", "");
    enc_eq(j, "yya", true, IDS(6, 6, 0));
    inferd_free(j);
    j = mk_json(V_ABC, "[]", "", "");
    enc_eq(j, "yya", true, IDS(0));
    inferd_free(j);
    /* byte fallback: x -> <0x78>; y has no byte token -> unk */
    j = mk_json(V_ABC, "[]", ", \"byte_fallback\": true, \"unk_token\": \"<unk>\"", "");
    enc_eq(j, "xay", true, IDS(7, 0, 6));
    inferd_free(j);
    /* ignore_merges: a word in the vocab is emitted whole */
    j = mk_json(V_ABC, "[\"a b\"]", ", \"ignore_merges\": true", "");
    enc_eq(j, "abc", true, IDS(5));
    inferd_free(j);
    j = mk_json(V_ABC, "[\"a b\"]", "", "");
    enc_eq(j, "abc", true, IDS(3, 2));
    inferd_free(j);
    /* a later duplicate merge overwrites the earlier rank (HF HashMap) */
    j = mk_json(V_ABC, "[\"a b\", \"b c\", \"a b\"]", "", "");
    enc_eq(j, "abc", true, IDS(0, 4));
    inferd_free(j);
}
END_TEST

/* Pre-tokenize text with the JSON's pre_tokenizer; pieces joined by '|'. */
static void pretok_eq(const char *pre_json, const char *text, const char *want)
{
    char extra[1024];
    snprintf(extra, sizeof extra, ", \"pre_tokenizer\": %s", pre_json);
    char *j = mk_json(V_ABC, "[]", "", extra);
    tokenizer *t = NULL;
    ck_assert_msg(tok_load_json(j, NULL, &t) == INFERD_OK, "%s", inferd_last_error());
    tok_list io = {0}, tmp = {0};
    tok_list_push(&io, text, strlen(text), -1, 0);
    ck_assert(tok_pretokenize(t, &io, &tmp) == INFERD_OK);
    char got[512] = "";
    for (int i = 0; i < io.n; i++)
        snprintf(got + strlen(got), sizeof got - strlen(got), "%s%.*s", i ? "|" : "", (int)io.v[i].len,
                 tok_list_str(&io, i));
    ck_assert_msg(strcmp(got, want) == 0, "%s on '%s': got '%s' want '%s'", pre_json, text, got, want);
    tok_list_free(&io);
    tok_list_free(&tmp);
    tok_free(t);
    inferd_free(j);
}

#define SPLIT(b) "{\"type\": \"Split\", \"pattern\": {\"String\": \"-\"}, \"behavior\": \"" b "\"}"

START_TEST(test_pretokenizers)
{
    /* HF's documented examples for the delimiter behaviors */
    pretok_eq(SPLIT("Removed"), "the-final--countdown", "the|final|countdown");
    pretok_eq(SPLIT("Isolated"), "the-final--countdown", "the|-|final|-|-|countdown");
    pretok_eq(SPLIT("MergedWithPrevious"), "the-final--countdown", "the-|final-|-|countdown");
    pretok_eq(SPLIT("MergedWithNext"), "the-final--countdown", "the|-final|-|-countdown");
    pretok_eq(SPLIT("Contiguous"), "the-final--countdown", "the|-|final|--|countdown");
    pretok_eq("{\"type\": \"Split\", \"pattern\": {\"Regex\": \"\\\\s+\"}, \"behavior\": \"Removed\", "
              "\"invert\": true}",
              "a bc  d", " |  ");
    pretok_eq("{\"type\": \"Split\", \"pattern\": {\"Regex\": \"\\\\p{N}{1,3}\"}, \"behavior\": \"Isolated\"}",
              "x12345y", "x|123|45|y");
    /* Metaspace (HF's tests): runs of spaces stay separate pieces */
    pretok_eq("{\"type\": \"Metaspace\", \"replacement\": \"\xE2\x96\x81\", \"prepend_scheme\": \"always\"}",
              "Hey   friend!", "\xE2\x96\x81Hey|\xE2\x96\x81|\xE2\x96\x81|\xE2\x96\x81" "friend!");
    pretok_eq("{\"type\": \"Metaspace\", \"replacement\": \"\xE2\x96\x81\", \"prepend_scheme\": \"never\"}",
              "Hey friend", "Hey|\xE2\x96\x81" "friend");
    pretok_eq("{\"type\": \"Metaspace\", \"replacement\": \"\xE2\x96\x81\", \"add_prefix_space\": true, "
              "\"split\": false}",
              "Hey friend", "\xE2\x96\x81Hey\xE2\x96\x81" "friend");
    /* GPT-2 ByteLevel: regex split, prefix space, byte alphabet (space -> U+0120) */
    pretok_eq("{\"type\": \"ByteLevel\", \"add_prefix_space\": true, \"use_regex\": true}", "Hello world's",
              "\xC4\xA0Hello|\xC4\xA0world|'s");
    pretok_eq("{\"type\": \"ByteLevel\", \"add_prefix_space\": false, \"use_regex\": false}", "a\nb",
              "a\xC4\x8A" "b");
}
END_TEST

static const char k_added_base[] =
    "{\"model\": {\"type\": \"BPE\", \"vocab\": " V_ABC ", \"merges\": [], \"unk_token\": \"<unk>\"}, "
    "\"added_tokens\": [%s]%s}";

static char *mk_added(const char *tokens, const char *extra)
{
    char *buf = inferd_malloc(8192);
    snprintf(buf, 8192, k_added_base, tokens, extra);
    return buf;
}

START_TEST(test_added_tokens)
{
    /* plain */
    char *j = mk_added("{\"id\": 20, \"content\": \"<m>\", \"special\": true}", "");
    enc_eq(j, "a <m> b", true, IDS(0, 8, 20, 8, 1));
    enc_eq(j, "a <m> b", false, IDS(0, 8, 6, 6, 6, 8, 1)); /* left as text: < m > are unknown */
    inferd_free(j);
    /* lstrip + rstrip swallow the spaces around the token */
    j = mk_added("{\"id\": 20, \"content\": \"<m>\", \"special\": true, \"lstrip\": true, \"rstrip\": true}", "");
    enc_eq(j, "a  <m>  b", true, IDS(0, 20, 1));
    inferd_free(j);
    /* single_word: only where no word character touches it */
    j = mk_added("{\"id\": 21, \"content\": \"ab\", \"single_word\": true, \"normalized\": false}", "");
    enc_eq(j, "cab ab", true, IDS(2, 0, 1, 8, 21));
    inferd_free(j);
    /* longest match wins at the leftmost position */
    j = mk_added("{\"id\": 20, \"content\": \"<m\", \"normalized\": false}, {\"id\": 21, \"content\": \"<m>\", "
                 "\"normalized\": false}",
                 "");
    enc_eq(j, "<m><m", true, IDS(21, 20));
    inferd_free(j);
    /* a normalized token is matched after normalization (Replace b -> c) */
    j = mk_added("{\"id\": 22, \"content\": \"cc\", \"normalized\": true}",
                 ", \"normalizer\": {\"type\": \"Replace\", \"pattern\": {\"String\": \"b\"}, \"content\": \"c\"}");
    enc_eq(j, "abba", true, IDS(0, 22, 0));
    inferd_free(j);
    /* Prepend normalizer applies to each piece between special tokens (HF) */
    j = mk_added("{\"id\": 20, \"content\": \"<m>\", \"special\": true}",
                 ", \"normalizer\": {\"type\": \"Prepend\", \"prepend\": \"-\"}");
    enc_eq(j, "a<m>b", true, IDS(9, 0, 20, 9, 1));
    inferd_free(j);
}
END_TEST

/* Decode ids with a decoder JSON (or none). */
static void dec_eq(const char *extra, const int32_t *ids, int n, bool skip, const char *want)
{
    char *j = mk_added("{\"id\": 20, \"content\": \"<s>\", \"special\": true}", extra);
    tokenizer *t = NULL;
    ck_assert_msg(tok_load_json(j, NULL, &t) == INFERD_OK, "%s", inferd_last_error());
    char *text = NULL;
    size_t len = 0;
    ck_assert(tok_decode(t, ids, n, skip, &text, &len) == INFERD_OK);
    ck_assert_msg(strcmp(text, want) == 0, "%s: got '%s' want '%s'", extra, text, want);
    ck_assert_uint_eq(len, strlen(want));
    inferd_free(text);
    tok_free(t);
    inferd_free(j);
}

START_TEST(test_decoders)
{
    const int32_t ids[] = {20, 0, 8, 1, 7, 2};
    dec_eq("", ids, 6, false, "<s> a   b <0x78> c");
    dec_eq("", ids, 6, true, "a   b <0x78> c");
    dec_eq(", \"decoder\": {\"type\": \"Sequence\", \"decoders\": [{\"type\": \"ByteFallback\"}, "
           "{\"type\": \"Fuse\"}, {\"type\": \"Strip\", \"content\": \"<\", \"start\": 1, \"stop\": 0}]}",
           ids, 6, false, "s>a bxc");
    dec_eq(", \"decoder\": {\"type\": \"Sequence\", \"decoders\": [{\"type\": \"Replace\", \"pattern\": "
           "{\"String\": \"a\"}, \"content\": \"A\"}, {\"type\": \"Fuse\"}]}",
           ids, 6, true, "A b<0x78>c");
    /* a run of byte tokens becomes its text */
    const int32_t bad[] = {0, 7, 7};
    dec_eq(", \"decoder\": {\"type\": \"ByteFallback\"}", bad, 3, true, "axx");
    dec_eq(", \"decoder\": {\"type\": \"Metaspace\", \"replacement\": \"a\", \"prepend_scheme\": \"always\"}",
           (const int32_t[]){0, 3, 0}, 3, true, " b ");
}
END_TEST

/* NFC/NFD vectors (checked against Python's unicodedata, which also agreed
 * on every code point and 50,000 random mark/Hangul strings when written). */
START_TEST(test_nfc)
{
    static const struct {
        const char *in, *nfc, *nfd;
    } rows[] = {
        {"e\xCC\x81", "\xC3\xA9", "e\xCC\x81"},                                /* e + acute */
        {"\xC3\xA9", "\xC3\xA9", "e\xCC\x81"},
        {"\xE1\x84\x80\xE1\x85\xA1\xE1\x86\xA8", "\xEA\xB0\x81", "\xE1\x84\x80\xE1\x85\xA1\xE1\x86\xA8"}, /* Hangul */
        {"\xEA\xB0\x81", "\xEA\xB0\x81", "\xE1\x84\x80\xE1\x85\xA1\xE1\x86\xA8"},
        {"\xE2\x84\xAB", "\xC3\x85", "A\xCC\x8A"},                               /* Angstrom sign */
        {"a\xCC\x81\xCC\xA3", "\xE1\xBA\xA1\xCC\x81", "a\xCC\xA3\xCC\x81"},        /* reorder */
        {"\xCD\x84", "\xCC\x88\xCC\x81", "\xCC\x88\xCC\x81"},                       /* non-starter decomposition */
        {"\xE0\xA5\x98", "\xE0\xA4\x95\xE0\xA4\xBC", "\xE0\xA4\x95\xE0\xA4\xBC"},     /* exclusion */
        {"\xE0\xAD\x87\xE0\xAC\xBE", "\xE0\xAD\x8B", "\xE0\xAD\x87\xE0\xAC\xBE"},     /* starter + starter */
        {"plain ascii", "plain ascii", "plain ascii"},
    };
    for (size_t i = 0; i < INFERD_ARRAY_LEN(rows); i++) {
        inferd_buf a = {0}, b = {0};
        tok_unicode_normalize(rows[i].in, strlen(rows[i].in), true, &a);
        tok_unicode_normalize(rows[i].in, strlen(rows[i].in), false, &b);
        ck_assert_msg(a.len == strlen(rows[i].nfc) && memcmp(a.data, rows[i].nfc, a.len) == 0, "row %zu NFC", i);
        ck_assert_msg(b.len == strlen(rows[i].nfd) && memcmp(b.data, rows[i].nfd, b.len) == 0, "row %zu NFD", i);
        inferd_buf_free(&a);
        inferd_buf_free(&b);
    }
    /* through a tokenizer.json normalizer */
    char *j = mk_json(V_ABC, "[]", "", ", \"normalizer\": {\"type\": \"Sequence\", \"normalizers\": "
                                      "[{\"type\": \"NFC\"}, {\"type\": \"Prepend\", \"prepend\": \"-\"}]}");
    tokenizer *t = NULL;
    ck_assert_msg(tok_load_json(j, NULL, &t) == INFERD_OK, "%s", inferd_last_error());
    inferd_buf out = {0};
    ck_assert(tok_normalize(t, &t->norm, "e\xCC\x81", 3, &out) == INFERD_OK);
    ck_assert_str_eq(out.data, "-\xC3\xA9");
    inferd_buf_free(&out);
    tok_free(t);
    inferd_free(j);
}
END_TEST

START_TEST(test_bad_input)
{
    char *j = mk_json(V_ABC, "[]", "", "");
    tokenizer *t = NULL;
    ck_assert(tok_load_json(j, NULL, &t) == INFERD_OK);
    int32_t *ids = NULL;
    int n = 0;
    ck_assert_int_eq(tok_encode(t, "a\xff", 2, true, true, &ids, &n), INFERD_ERR_INVALID_ARG);
    ck_assert(strstr(inferd_last_error(), "UTF-8") != NULL);
    ck_assert_int_eq(tok_encode(t, "", 0, true, true, &ids, &n), INFERD_OK);
    ck_assert_int_eq(n, 0);
    inferd_free(ids);
    ck_assert_int_eq(tok_encode(t, "a\0b", 3, true, true, &ids, &n), INFERD_OK); /* NUL is a character */
    ck_assert_int_eq(n, 2);
    inferd_free(ids);
    tok_free(t);
    inferd_free(j);
}
END_TEST

/* Mutated files (byte changes, truncations): load either fails with a
 * message or gives a tokenizer that encodes and decodes; never a crash. */
START_TEST(test_mutations)
{
    char *base = mk_added(
        "{\"id\": 20, \"content\": \"<m>\", \"special\": true, \"lstrip\": true}",
        ", \"normalizer\": {\"type\": \"Sequence\", \"normalizers\": [{\"type\": \"NFC\"}, {\"type\": "
        "\"Replace\", \"pattern\": {\"String\": \" \"}, \"content\": \"-\"}]}, \"pre_tokenizer\": {\"type\": "
        "\"Split\", \"pattern\": {\"Regex\": \"\\\\p{L}+\"}, \"behavior\": \"Isolated\"}, \"post_processor\": "
        "{\"type\": \"TemplateProcessing\", \"single\": [{\"SpecialToken\": {\"id\": \"<m>\"}}, {\"Sequence\": "
        "{\"id\": \"A\"}}], \"special_tokens\": {\"<m>\": {\"ids\": [20]}}}, \"decoder\": {\"type\": "
        "\"Sequence\", \"decoders\": [{\"type\": \"ByteFallback\"}, {\"type\": \"Fuse\"}]}");
    tokenizer *t = NULL;
    ck_assert_msg(tok_load_json(base, NULL, &t) == INFERD_OK, "%s", inferd_last_error());
    tok_free(t);
    size_t n = strlen(base);
    static const char k_junk[] = "{}[]\",:0-9ae \\";
    int ok = 0, failed = 0;
    char *m = inferd_malloc(n + 1);
    for (uint64_t r = 0; r < 3000; r++) {
        memcpy(m, base, n + 1);
        uint64_t u = rng_mix64(r + 77);
        for (int k = 0; k < 1 + (int)(u % 3); k++) {
            uint64_t v = rng_mix64(u + (uint64_t)k);
            m[v % n] = k_junk[(v >> 32) % (sizeof k_junk - 1)];
        }
        if (u % 5 == 0)
            m[(u >> 16) % n] = '\0';
        t = NULL;
        if (tok_load_json(m, NULL, &t) != INFERD_OK) {
            ck_assert(inferd_last_error()[0] != '\0');
            ck_assert_ptr_null(t);
            failed++;
            continue;
        }
        int32_t *ids = NULL;
        int ni = 0;
        char *text = NULL;
        static const char k_text[] = "ab c<m>a\xCC\x81 bc";
        if (tok_encode(t, k_text, sizeof k_text - 1, true, true, &ids, &ni) == INFERD_OK) {
            if (tok_decode(t, ids, ni, false, &text, NULL) == INFERD_OK)
                inferd_free(text);
            inferd_free(ids);
        }
        tok_free(t);
        ok++;
    }
    printf("mutations: %d loaded, %d rejected with a message\n", ok, failed);
    ck_assert_int_gt(failed, 0);
    inferd_free(m);
    inferd_free(base);
}
END_TEST

int main(void)
{
    log_set_level(LOG_LEVEL_ERROR); /* mutated files warn about their unk_token */
    Suite *s = suite_create("tokenizer_load");
    TCase *tc = tcase_create("load");
    tcase_add_test(tc, test_malformed_table);
    tcase_add_test(tc, test_deep_nesting);
    tcase_add_test(tc, test_load_files);
    tcase_add_test(tc, test_bpe_semantics);
    tcase_add_test(tc, test_pretokenizers);
    tcase_add_test(tc, test_added_tokens);
    tcase_add_test(tc, test_decoders);
    tcase_add_test(tc, test_nfc);
    tcase_add_test(tc, test_mutations);
    tcase_add_test(tc, test_bad_input);
    suite_add_tcase(s, tc);
    return test_run_suite(s);
}
