/* tokenizer/tok_nfc.h: Unicode canonical normalization (NFC, NFD) for the
 * tokenizer's normalizers, through GNU libunistring. Internal to the
 * tokenizer. */
#ifndef INFERD_TOKENIZER_TOK_NFC_H
#define INFERD_TOKENIZER_TOK_NFC_H

#include <stdbool.h>
#include <stddef.h>

#include "tokenizer/tok_internal.h"

/* Append the NFC (compose) or NFD (!compose) form of valid UTF-8
 * s[0..n) to out. */
void tok_unicode_normalize(const char *s, size_t n, bool compose, inferd_buf *out);

#endif
