/* tokenizer/tok_internal.h: definitions shared by the tokenizer's source files
 * (tok_load.c, tok_json.c, tok_bpe.c, tok_pretok.c, tok_added.c,
 * tok_encode.c, tok_decode.c, tok_util.c). Internal: only those include it.
 *
 * The tokenizer mirrors the HF `tokenizers` pipeline: added tokens are cut
 * out of the input first, the rest is normalized, pre-tokenized into words,
 * each word goes through the BPE model, and a post-processor adds BOS.
 * Decoding turns ids into token strings and runs the decoder chain over that
 * list of strings. Every stage works on a tok_list: many strings stored back
 * to back in one growable buffer, which keeps allocation per encode O(1)
 * amortized instead of one malloc per word.
 */
#ifndef INFERD_TOKENIZER_TOK_INTERNAL_H
#define INFERD_TOKENIZER_TOK_INTERNAL_H

#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "common/buf.h"
#include "common/status.h"
#include "tokenizer/tokenizer.h"

/* Largest id a tokenizer.json may use (bounds allocations from bad files). */
#define TOK_MAX_IDS (1 << 24)

/* ---- string list (tok_util.c) over the common byte buffer ---------------- */

/* One string of a tok_list: bytes [off, off+len) of the list's buffer.
 * added >= 0 marks an added token that later stages pass through unchanged.
 * orig is the byte offset in the original input where the piece starts
 * (Metaspace prepend_scheme "first" only prepends at offset 0). */
typedef struct {
    size_t off, len;
    int32_t added;
    int64_t orig;
} tok_piece;

typedef struct {
    inferd_buf buf;
    tok_piece *v;
    int n, cap;
} tok_list;

void tok_list_clear(tok_list *l);
void tok_list_free(tok_list *l);
/* Append a copy of s[0..n) as a new piece. */
void tok_list_push(tok_list *l, const char *s, size_t n, int32_t added, int64_t orig);
/* Start a piece whose bytes the caller appends to l->buf, then end it. */
void tok_list_begin(tok_list *l, int32_t added, int64_t orig);
void tok_list_end(tok_list *l);
static inline const char *tok_list_str(const tok_list *l, int i) { return l->buf.data + l->v[i].off; }

/* ---- UTF-8 helpers (tok_util.c) ----------------------------------------- */

/* Length of the UTF-8 sequence starting with lead byte c (1 for junk). */
static inline int tok_utf8_len(unsigned char c)
{
    return c < 0x80 ? 1 : c < 0xE0 ? 2 : c < 0xF0 ? 3 : 4;
}
/* Decode one code point of valid UTF-8 at s (n bytes left); sets *adv. */
uint32_t tok_utf8_decode(const char *s, size_t n, int *adv);
/* Encode cp into out (4 bytes room); returns the byte count. */
int tok_utf8_encode(uint32_t cp, char *out);
/* Rust char::is_whitespace (Unicode White_Space). */
bool tok_is_whitespace(uint32_t cp);
/* Append s[0..n) to b, replacing each maximal invalid subsequence with
 * U+FFFD like Rust's String::from_utf8_lossy. */
void tok_utf8_lossy(inferd_buf *b, const unsigned char *s, size_t n);
/* GPT-2 byte-level alphabet: byte -> UTF-8 of its code point, and back. */
const char *tok_bytelevel_char(uint8_t byte, int *len);
/* Byte of a byte-level code point, or -1 when cp is not in the alphabet. */
int tok_bytelevel_byte(uint32_t cp);

/* ---- regex (tok_util.c) -------------------------------------------------- */

typedef struct {
    pcre2_code *code;
    bool jit;
} tok_regex;

/* Compile with PCRE2_UTF | PCRE2_UCP (+ JIT when available). */
inferd_status tok_regex_compile(tok_regex *re, const char *pattern, size_t len, const char *what);
void tok_regex_free(tok_regex *re);
/* Find the next match in s[0..n) at or after start. Returns 1 with
 * [*ms, *me) set, 0 when none, -1 on a matcher error (message set). */
int tok_regex_find(const tok_regex *re, pcre2_match_data *md, const char *s, size_t n, size_t start,
                   size_t *ms, size_t *me);

/* ---- hash maps (tok_bpe.c) ----------------------------------------------- */

/* Open-addressing map from a token string to its id; the strings live in
 * the tokenizer's arena, slots hold id + 1 (0 = empty). */
typedef struct {
    uint32_t *slots;
    uint32_t mask;
    int n;
} tok_vocab_map;

/* Merge map: pair (left id, right id) -> (rank, merged id). */
typedef struct {
    uint64_t *keys;   /* [cap] (left << 32 | right) + 1, 0 = empty */
    uint32_t *rank;   /* [cap] */
    int32_t *merged;  /* [cap] */
    uint32_t mask;
    int n;
} tok_merge_map;

/* ---- pipeline steps ------------------------------------------------------ */

typedef enum {
    TOK_NORM_PREPEND,
    TOK_NORM_REPLACE,
    TOK_NORM_STRIP,
    TOK_NORM_NFC,
    TOK_NORM_NFD,
} tok_norm_kind;

typedef enum {
    TOK_SPLIT_REMOVED,
    TOK_SPLIT_ISOLATED,
    TOK_SPLIT_MERGED_PREV,
    TOK_SPLIT_MERGED_NEXT,
    TOK_SPLIT_CONTIGUOUS,
} tok_split_behavior;

typedef enum {
    TOK_PRE_SPLIT,
    TOK_PRE_BYTELEVEL,
    TOK_PRE_METASPACE,
} tok_pre_kind;

typedef enum {
    TOK_PREPEND_ALWAYS,
    TOK_PREPEND_FIRST,
    TOK_PREPEND_NEVER,
} tok_prepend_scheme;

typedef enum {
    TOK_DEC_REPLACE,
    TOK_DEC_BYTEFALLBACK,
    TOK_DEC_FUSE,
    TOK_DEC_STRIP,
    TOK_DEC_BYTELEVEL,
    TOK_DEC_METASPACE,
} tok_dec_kind;

/* One normalizer, pre-tokenizer or decoder step; Sequences are flattened.
 * Strings are NUL-terminated heap copies. */
typedef struct {
    int kind;              /* tok_norm_kind, tok_pre_kind or tok_dec_kind */
    char *pattern;         /* Replace / Split: literal pattern (NULL when regex) */
    size_t pattern_len;
    tok_regex re;          /* Replace / Split with a Regex pattern */
    char *content;         /* Prepend text, Replace content, Strip char, Metaspace replacement */
    size_t content_len;
    int start, stop;       /* Strip counts (decoder), left/right flags (normalizer) */
    tok_split_behavior behavior;
    bool invert;           /* Split */
    bool add_prefix_space; /* ByteLevel */
    bool use_regex;        /* ByteLevel */
    bool split;            /* Metaspace */
    tok_prepend_scheme prepend;
} tok_step;

typedef struct {
    tok_step *v;
    int n, cap;
} tok_steps;

/* Added token (special or not) matched in the input before BPE. */
typedef struct {
    char *content;
    size_t len;
    int32_t id;
    bool special, lstrip, rstrip, single_word, normalized;
} tok_added;

/* Byte trie over added-token contents for leftmost-longest matching. */
typedef struct {
    int32_t *first_child; /* [n_nodes] */
    int32_t *next_sib;    /* [n_nodes] */
    uint8_t *byte;        /* [n_nodes] */
    int32_t *term;        /* [n_nodes] index into added[] or -1 */
    int n, cap;
} tok_trie;

/* The special-token keys of tokenizer_config.json kept as text (order of
 * k_config_token_keys in tok_load.c). */
#define TOK_CONFIG_TOKENS 7

/* Post-processor template item: a special token's ids or the sequence. */
typedef struct {
    bool is_sequence;
    int32_t *ids;
    int n_ids;
} tok_tmpl_item;

struct tokenizer {
    inferd_buf arena;           /* model vocab strings, back to back */
    int n_ids;               /* max id + 1 over vocab and added tokens */
    uint32_t *piece_off;     /* [n_ids] offset in arena of the model piece */
    int32_t *piece_len;      /* [n_ids] byte length, -1 when id not in model vocab */
    int32_t *added_of;       /* [n_ids] index into added[], -1 when not added */
    tok_vocab_map vocab;

    /* BPE model */
    tok_merge_map merges;
    int32_t unk_id;          /* -1 when none */
    bool fuse_unk, byte_fallback, ignore_merges;
    char *cont_prefix;       /* continuing_subword_prefix or NULL */
    char *end_suffix;        /* end_of_word_suffix or NULL */
    int32_t byte_ids[256];   /* ids of "<0xNN>" tokens, -1 when missing */
    bool chunk_meta;         /* words may be cut before "▁" (see tok_bpe.c) */

    tok_steps norm, pre, dec;
    bool has_decoder;

    tok_added *added;
    int n_added;
    tok_trie trie_raw, trie_norm; /* added tokens with normalized false / true */
    tok_trie trie_special;        /* raw text of every special added token (tok_find_special) */
    size_t special_max_len;       /* longest special token text in bytes */
    size_t max_token_bytes;       /* longest piece or added-token text (tok_max_token_bytes) */
    tok_regex word_re;            /* single_word boundary test (compiled when needed) */

    tok_tmpl_item *tmpl;     /* post-processor single template, NULL when none */
    int n_tmpl;

    int32_t bos_id, eos_id;
    bool add_bos_token;      /* tokenizer_config.json, informational */
    bool has_config;         /* a tokenizer_config.json was given */
    char *config_tokens[TOK_CONFIG_TOKENS]; /* bos/eos/unk/sep/pad/cls/mask text or NULL */
    char *chat_template;
};

/* ---- tok_bpe.c ----------------------------------------------------------- */

void tok_vocab_init(tok_vocab_map *m, int n_expected);
void tok_vocab_free(tok_vocab_map *m);
/* Insert/overwrite: id's piece must already be in t->arena/piece_*. */
void tok_vocab_insert(tokenizer *t, int32_t id);
/* Model vocab id of s[0..n), or -1. */
int32_t tok_vocab_find(const tokenizer *t, const char *s, size_t n);

void tok_merges_init(tok_merge_map *m, int n_expected);
void tok_merges_free(tok_merge_map *m);
/* Later duplicates overwrite earlier ones, as in HF. */
void tok_merges_insert(tok_merge_map *m, int32_t a, int32_t b, uint32_t rank, int32_t merged);

/* Scratch reused across words of one encode call. */
typedef struct tok_bpe_scratch tok_bpe_scratch;
tok_bpe_scratch *tok_bpe_scratch_new(void);
void tok_bpe_scratch_free(tok_bpe_scratch *s);
/* BPE-encode one pre-tokenized word, appending ids to *ids (grown as
 * needed; the count and capacity are updated). */
/* Decide t->chunk_meta once the merges are loaded. */
void tok_bpe_check_chunking(tokenizer *t);
void tok_bpe_word(const tokenizer *t, tok_bpe_scratch *s, const char *w, size_t n, int32_t **ids, int *n_ids,
                  int *cap);

/* ---- tok_pretok.c -------------------------------------------------------- */

/* Run the normalizer steps over s[0..n); result (NUL-terminated) in out. */
inferd_status tok_normalize(const tokenizer *t, const tok_steps *steps, const char *s, size_t n, inferd_buf *out);
/* Pre-tokenize every non-added piece of *io in place (ping-pong with tmp). */
inferd_status tok_pretokenize(const tokenizer *t, tok_list *io, tok_list *tmp);
void tok_steps_free(tok_steps *s);
tok_step *tok_steps_push(tok_steps *s);

/* ---- tok_added.c --------------------------------------------------------- */

/* Build the two tries (raw and normalized contents) from t->added. */
inferd_status tok_added_build(tokenizer *t);
void tok_added_free(tokenizer *t);
/* Split s[0..n) at matches of trie; added pieces carry their id. Non-added
 * pieces keep orig = base_orig + offset. Special tokens are skipped (left
 * as text) unless parse_special, and also when their match
 * [base_orig + ms, base_orig + me) overlaps a span of protect[0..n_protect)
 * (sorted, disjoint; see tok_span). Empty pieces are dropped. */
void tok_added_split(const tokenizer *t, const tok_trie *trie, bool parse_special, const tok_span *protect,
                     int n_protect, const char *s, size_t n, int64_t base_orig, tok_list *out);
/* Whether [a, b) overlaps a protected span (tok_span's rule). */
bool tok_span_hit(const tok_span *protect, int n_protect, size_t a, size_t b);

/* ---- tok_decode.c -------------------------------------------------------- */

/* Decode ids into text appended to out; ids outside the vocab are errors. */
inferd_status tok_decode_into(const tokenizer *t, const int32_t *ids, int n, bool skip_special, inferd_buf *out);

#endif
