/* tokenizer/tok_json.h: tokenizer.json section parsers shared by tok_load.c and
 * tok_json.c. Internal to the tokenizer (only tok_*.c include it). */
#ifndef INFERD_TOKENIZER_TOK_JSON_H
#define INFERD_TOKENIZER_TOK_JSON_H

#include <cjson/cJSON.h>
#include <stdbool.h>

#include "tokenizer/tok_internal.h"

/* Field helpers: value of a bool/string field, or the default/NULL. */
bool tok_json_bool(const cJSON *o, const char *key, bool dflt);
const char *tok_json_str(const cJSON *o, const char *key);

/* Each section may be NULL or JSON null (absent stage). Unknown types give
 * INFERD_ERR_UNSUPPORTED naming the type; malformed ones INFERD_ERR_FORMAT. */
inferd_status tok_json_normalizer(const cJSON *o, tok_steps *out);
inferd_status tok_json_pre_tokenizer(const cJSON *o, tok_steps *out);
inferd_status tok_json_decoder(const cJSON *o, tok_steps *out, bool *has_decoder);
/* Needs t->n_ids set (template ids are range-checked). */
inferd_status tok_json_post_processor(tokenizer *t, const cJSON *o);

#endif
