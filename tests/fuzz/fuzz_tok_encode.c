/* tests/fuzz/fuzz_tok_encode.c: encode, decode and the incremental
 * detokenizer on the real Llama-2 (SentencePiece BPE, byte fallback) and
 * Llama-3 (byte-level BPE, regex pre-tokenizer) tokenizers.
 *
 * The tokenizers are loaded once from $INFERD_FIXTURES/tokenizers/{llama2,
 * llama3} (default: the CMake fixtures path). Byte 0 of the input picks the
 * mode:
 *   bit 0      tokenizer (0 Llama-2, 1 Llama-3)
 *   bit 1      ids mode: the rest is a list of little-endian uint16/uint24
 *              ids (bit 5 picks the width), decoded in full and streamed, as
 *              the engine streams generated tokens (any id the model emits)
 *   bits 2-4   encode mode: add_special, parse_special, skip_special
 *   bit 6      ids mode: seed the stream with the first quarter of the ids
 * In encode mode the rest is the text: a prompt or a chat message, as the
 * server encodes it. Text that is valid UTF-8 must encode, its ids must be
 * in the vocab, and decode / stream must agree (see fuzz_tok.h).
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "fuzz_tok.h"

static tokenizer *g_tok[2];

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
    (void)argc;
    (void)argv;
    fuzz_quiet();
    static const char *const names[2] = {"llama2", "llama3"};
    for (int i = 0; i < 2; i++) {
        char dir[4096];
        snprintf(dir, sizeof dir, "%s/tokenizers/%s", fuzz_fixtures(), names[i]);
        if (tok_load(dir, &g_tok[i]) != INFERD_OK) {
            fprintf(stderr, "fuzz_tok_encode: cannot load %s (set INFERD_FIXTURES)\n", dir);
            exit(1);
        }
    }
    return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size < 1)
        return 0;
    unsigned mode = data[0];
    const tokenizer *t = g_tok[mode & 1];
    data++;
    size--;
    if (mode & 2) {
        int w = (mode & 32) ? 3 : 2;
        int n = (int)(size / (size_t)w);
        if (n > 4096)
            n = 4096;
        int32_t *ids = malloc(sizeof *ids * (size_t)(n ? n : 1));
        if (!ids)
            abort();
        for (int i = 0; i < n; i++) {
            const uint8_t *p = data + (size_t)i * (size_t)w;
            ids[i] = (int32_t)(p[0] | p[1] << 8 | (w == 3 ? p[2] << 16 : 0));
        }
        fuzz_tok_decode_check(t, ids, n, (mode & 16) != 0, (mode & 64) ? n / 4 : 0, true);
        free(ids);
        return 0;
    }
    char *text = fuzz_cstr(data, size);
    fuzz_tok_encode_check(t, text, size, (mode & 4) != 0, (mode & 8) != 0, (mode & 16) != 0, true);
    free(text);
    return 0;
}
