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
