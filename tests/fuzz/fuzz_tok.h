/* tests/fuzz/fuzz_tok.h: checks shared by the tokenizer harnesses
 * (fuzz_tok_load, fuzz_tok_encode). Header-only: only those link the
 * tokenizer library.
 *
 * fuzz_tok_encode_check: tok_encode, every id inside the vocab, then
 * fuzz_tok_decode_check on the ids.
 * fuzz_tok_decode_check: tok_decode and the incremental detokenizer
 * (tok_stream_*) on the same ids; the concatenated deltas must equal the
 * full decode (tokenizer.h's contract) whenever the full decode holds no
 * U+FFFD, since the one documented exception (an invalid "<0xNN>" byte run)
 * always shows as U+FFFD there. Deltas and the full decode must be valid
 * UTF-8 (the server puts them in JSON).
 */
#ifndef INFERD_TESTS_FUZZ_TOK_H
#define INFERD_TESTS_FUZZ_TOK_H

#include <stdbool.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "common/alloc.h"
#include "fuzz_util.h"
#include "tokenizer/tokenizer.h"

/* prefill: seed the stream with the first n_prefill ids (no equality check).
 * strict: the tokenizer is a real, complete one (every in-range id decodes);
 * a fuzzed tokenizer.json may have holes in its vocab. */
static inline void fuzz_tok_decode_check(const tokenizer *t, const int32_t *ids, int n, bool skip_special,
                                         int n_prefill, bool strict)
{
    int vocab = tok_vocab_size(t);
    bool in_range = true;
    for (int i = 0; i < n; i++)
        in_range = in_range && ids[i] >= 0 && ids[i] < vocab;

    char *full = NULL;
    size_t full_len = 0;
    inferd_status st = tok_decode(t, ids, n, skip_special, &full, &full_len);
    if (in_range && strict)
        FUZZ_ASSERT(st == INFERD_OK, "tok_decode failed on %d in-range ids", n);
    if (st == INFERD_OK) {
        FUZZ_ASSERT(full != NULL && full[full_len] == '\0', "decode text NULL or not terminated");
        FUZZ_ASSERT(fuzz_utf8_valid(full, full_len), "tok_decode returned invalid UTF-8 (%zu bytes)", full_len);
    }

    tok_stream *s = tok_stream_new(t, skip_special);
    FUZZ_ASSERT(s != NULL, "tok_stream_new");
    if (n_prefill > n)
        n_prefill = n;
    if (n_prefill > 0 && in_range)
        tok_stream_prefill(s, ids, n_prefill);
    else
        n_prefill = 0;
    char *cat = malloc(1);
    size_t cat_len = 0;
    bool stream_ok = true;
    for (int i = n_prefill; i <= n; i++) {
        char *d = NULL;
        size_t dl = 0;
        inferd_status ps = i < n ? tok_stream_push(s, ids[i], &d, &dl) : tok_stream_flush(s, &d, &dl);
        if (ps != INFERD_OK) {
            FUZZ_ASSERT(!in_range || !strict, "tok_stream_push/flush failed at %d of %d in-range ids", i, n);
            stream_ok = false;
            inferd_free(d);
            continue;
        }
        if (dl) {
            FUZZ_ASSERT(d != NULL, "delta NULL with length %zu", dl);
            FUZZ_ASSERT(fuzz_utf8_valid(d, dl), "delta %d of %d is invalid UTF-8", i, n);
            cat = realloc(cat, cat_len + dl + 1);
            if (!cat)
                abort();
            memcpy(cat + cat_len, d, dl);
            cat_len += dl;
        }
        inferd_free(d);
    }
    tok_stream_free(s);
    if (st == INFERD_OK && stream_ok && n_prefill == 0 && !memmem(full, full_len, "\xEF\xBF\xBD", 3)) {
        FUZZ_ASSERT(cat_len == full_len && memcmp(cat, full, full_len) == 0,
                    "stream != full decode (%zu vs %zu bytes, skip_special %d, %d ids)", cat_len, full_len,
                    (int)skip_special, n);
    }
    free(cat);
    inferd_free(full);
}

static inline void fuzz_tok_encode_check(const tokenizer *t, const char *text, size_t len, bool add_special,
                                         bool parse_special, bool skip_special, bool strict)
{
    int32_t *ids = NULL;
    int n = 0;
    inferd_status st = tok_encode(t, text, len, add_special, parse_special, &ids, &n);
    if (strict && fuzz_utf8_valid(text, len))
        FUZZ_ASSERT(st == INFERD_OK, "tok_encode failed on %zu bytes of valid UTF-8", len);
    if (st != INFERD_OK)
        return;
    int vocab = tok_vocab_size(t);
    FUZZ_ASSERT(n >= 0 && (n == 0 || ids), "n_ids %d", n);
    for (int i = 0; i < n; i++)
        FUZZ_ASSERT(ids[i] >= 0 && ids[i] < vocab, "encode produced id %d (vocab %d)", ids[i], vocab);
    fuzz_tok_decode_check(t, ids, n, skip_special, 0, strict);
    inferd_free(ids);
}

#endif
