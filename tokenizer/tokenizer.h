/* tokenizer/tokenizer.h: HF tokenizer.json BPE tokenizers (SentencePiece-style
 * with byte fallback, and byte-level with a regex pre-tokenizer), special
 * tokens, and incremental detokenization for streaming.
 *
 * Semantics are HF tokenizers' (the `tokenizers` library on tokenizer.json):
 * encode ids match it, including added/special tokens and the post-processor
 * (BOS). A loaded tokenizer is immutable: every function taking a const
 * tokenizer * may run concurrently from many threads. Implementation:
 * tokenizer/tok_*.c (tok_internal.h gives the map).
 */
#ifndef INFERD_TOKENIZER_TOKENIZER_H
#define INFERD_TOKENIZER_TOKENIZER_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "common/status.h"

typedef struct tokenizer tokenizer;

/* Load <dir>/tokenizer.json (+ tokenizer_config.json when present). */
inferd_status tok_load(const char *dir, tokenizer **out);
/* Load from JSON text (tests); config_json may be NULL. */
inferd_status tok_load_json(const char *tokenizer_json, const char *config_json, tokenizer **out);
void tok_free(tokenizer *t);

int tok_vocab_size(const tokenizer *t);
/* Bytes of the longest token text (model piece or added token): a text of
 * L bytes encodes to at least about L / tok_max_token_bytes tokens (exactly
 * so without a normalizer that shortens text, e.g. NFKC), which lets a
 * caller refuse a prompt that cannot fit a context before encoding it. */
size_t tok_max_token_bytes(const tokenizer *t);
int32_t tok_bos_id(const tokenizer *t);  /* -1 when none */
int32_t tok_eos_id(const tokenizer *t);  /* -1 when none */
bool tok_is_special(const tokenizer *t, int32_t id);
/* chat_template string from tokenizer_config.json, or NULL. */
const char *tok_chat_template(const tokenizer *t);
/* Token text as stored in the vocab (NULL when out of range). */
const char *tok_id_to_piece(const tokenizer *t, int32_t id);
/* Id of a token text (added tokens first, then the model vocab), or -1.
 * E.g. tok_piece_to_id(t, "<|eot_id|>") for chat stop tokens. */
int32_t tok_piece_to_id(const tokenizer *t, const char *piece);
/* add_bos_token from tokenizer_config.json (true when absent); informational:
 * tok_encode follows the post-processor, as HF tokenizers does. */
bool tok_add_bos_token(const tokenizer *t);

/* Encode text with HF semantics: special-token text parsed when
 * parse_special, post-processor applied (BOS) when add_special.
 * *ids is heap (inferd_free). */
inferd_status tok_encode(const tokenizer *t, const char *text, size_t len, bool add_special,
                         bool parse_special, int32_t **ids, int *n_ids);

/* A byte range [start, end) of an encode's input that must never be read
 * as special tokens: a special token whose text overlaps it (or, when
 * start == end, that straddles that offset) is left as ordinary text, as
 * with parse_special false. Used for text that came from a client inside a
 * rendered chat prompt (see server/srv_chat.c). */
typedef struct {
    size_t start, end;
} tok_span;

typedef struct {
    bool add_special;        /* apply the post-processor (BOS) */
    bool parse_special;      /* special-token text -> special ids */
    const tok_span *protect; /* sorted by start, not overlapping; NULL = none */
    int n_protect;
} tok_encode_opts;

/* tok_encode with protected spans (o->protect, only meaningful with
 * parse_special). Non-special added tokens are parsed everywhere, as HF
 * does with split_special_tokens. Special tokens whose `normalized` flag is
 * set are matched after normalization; within a normalized piece that
 * overlaps a protected span they are not parsed at all. */
inferd_status tok_encode_ex(const tokenizer *t, const char *text, size_t len, const tok_encode_opts *o,
                            int32_t **ids, int *n_ids);

/* Leftmost-longest occurrence of a special token's text (added tokens with
 * special: true) in s[from..n): true with [*ms, *me). */
bool tok_find_special(const tokenizer *t, const char *s, size_t n, size_t from, size_t *ms, size_t *me);
/* Whether s ends with a proper prefix of a special token's text (so that
 * text following s could complete it), and whether s starts with a proper
 * suffix of one (so that text before s could). */
void tok_special_edges(const tokenizer *t, const char *s, size_t n, bool *ends_with_head, bool *starts_with_tail);

/* A special token named in tokenizer_config.json ("bos_token", "eos_token",
 * "unk_token", "sep_token", "pad_token", "cls_token", "mask_token"): its
 * text, or NULL when the file has none, null or "" for it. */
const char *tok_config_token(const tokenizer *t, const char *key);
/* Whether a tokenizer_config.json was loaded with the tokenizer. */
bool tok_has_config(const tokenizer *t);

/* Full decode; *text is heap (inferd_free). */
inferd_status tok_decode(const tokenizer *t, const int32_t *ids, int n, bool skip_special,
                         char **text, size_t *len);

/* Incremental detokenizer: push ids one at a time; each push appends to the
 * returned delta only text that is complete UTF-8 and that a full decode of
 * all ids so far agrees on. Concatenated deltas == full decode.
 * NOTE: one exception, inherent to HF's ByteFallback decoder: a run of
 * "<0xNN>" byte tokens that is not valid UTF-8 as a whole decodes to one
 * U+FFFD per byte, so a later invalid byte can turn characters of the same
 * run that were already streamed into U+FFFD in the full decode. Streams of
 * well-formed text, and every byte-level (GPT-2 style) stream, match exactly. */
typedef struct tok_stream tok_stream;
tok_stream *tok_stream_new(const tokenizer *t, bool skip_special);
/* Optionally seed with prompt ids so the first generated token decodes in
 * context (e.g. SentencePiece leading-space handling); they emit nothing.
 * Call before the first push. */
void tok_stream_prefill(tok_stream *s, const int32_t *ids, int n);
/* *delta (heap, inferd_free) may be empty. */
inferd_status tok_stream_push(tok_stream *s, int32_t id, char **delta, size_t *delta_len);
/* End of stream: emit whatever text is held back, even an incomplete
 * character (as U+FFFD, like the full decode), so that all deltas including
 * this one concatenate to the full decode. *delta (heap, inferd_free) may be empty.
 * Meant for the end of a stream: after a flush that cut a character, later
 * pushes decode without the bytes that were flushed as U+FFFD. */
inferd_status tok_stream_flush(tok_stream *s, char **delta, size_t *delta_len);
void tok_stream_free(tok_stream *s);

#endif
