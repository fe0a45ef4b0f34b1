/* model/tokenizer.h: HF tokenizer.json BPE tokenizers (SentencePiece-style
 * with byte fallback, and byte-level with a regex pre-tokenizer), special
 * tokens, and incremental detokenization for streaming.
 */
#ifndef INFERD_MODEL_TOKENIZER_H
#define INFERD_MODEL_TOKENIZER_H

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

/* Encode text with HF semantics: special-token text parsed when
 * parse_special, post-processor applied (BOS) when add_special.
 * *ids is heap (xfree). */
inferd_status tok_encode(const tokenizer *t, const char *text, size_t len, bool add_special,
                         bool parse_special, int32_t **ids, int *n_ids);

/* Full decode; *text is heap (xfree). */
inferd_status tok_decode(const tokenizer *t, const int32_t *ids, int n, bool skip_special,
                         char **text, size_t *len);

/* Incremental detokenizer: push ids one at a time; each push appends to the
 * returned delta only text that is complete UTF-8 and that a full decode of
 * all ids so far agrees on. Concatenated deltas == full decode. */
typedef struct tok_stream tok_stream;
tok_stream *tok_stream_new(const tokenizer *t, bool skip_special);
/* Optionally seed with prompt ids so the first generated token decodes in
 * context (e.g. SentencePiece leading-space handling); they emit nothing. */
void tok_stream_prefill(tok_stream *s, const int32_t *ids, int n);
/* *delta (heap, xfree) may be empty. */
inferd_status tok_stream_push(tok_stream *s, int32_t id, char **delta, size_t *delta_len);
void tok_stream_free(tok_stream *s);

#endif
