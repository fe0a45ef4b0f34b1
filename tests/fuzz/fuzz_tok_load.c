/* tests/fuzz/fuzz_tok_load.c: the tokenizer.json loader (tokenizer/tokenizer.h
 * tok_load) on arbitrary files.
 *
 * The input is tokenizer.json, optionally followed by a NUL byte and a
 * tokenizer_config.json; both are written to a temp dir that tok_load reads
 * as a model directory would be read. A tokenizer that loads is then used:
 * the accessors, encode of a few fixed texts (plain, with special tokens and
 * the chat markers of every family) with decode and the incremental
 * detokenizer on the result, and decode of ids around the vocab's edges.
 */
#include <stdint.h>
#include <string.h>

#include "fuzz_tok.h"

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
    (void)argc;
    (void)argv;
    fuzz_quiet();
    fuzz_tmpdir();
    return 0;
}

static const char *const k_texts[] = {
    "Hello world",
    " leading  and trailing spaces \t\n",
    "caf\xC3\xA9 \xE4\xBD\xA0\xE5\xA5\xBD \xF0\x9F\x98\x80 1234567 can't",
    ("<s>[INST] hi [/INST]</s><|begin_of_text|><|start_header_id|>user<|end_header_id|>\n\nx<|eot_id|>"
     "<|im_start|>a<|im_end|><unk><0x41>"),
    "",
};

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    const uint8_t *nul = memchr(data, 0, size);
    size_t n_tok = nul ? (size_t)(nul - data) : size;
    fuzz_write("tokenizer.json", data, n_tok);
    if (nul)
        fuzz_write("tokenizer_config.json", nul + 1, size - n_tok - 1);
    else
        fuzz_unlink("tokenizer_config.json");

    tokenizer *t = NULL;
    if (tok_load(fuzz_tmpdir(), &t) != INFERD_OK) {
        FUZZ_ASSERT(t == NULL, "failed load left *out set");
        return 0;
    }
    int vocab = tok_vocab_size(t);
    FUZZ_ASSERT(vocab > 0, "vocab %d", vocab);
    int32_t bos = tok_bos_id(t), eos = tok_eos_id(t);
    FUZZ_ASSERT(bos >= -1 && bos < vocab && eos >= -1 && eos < vocab, "bos %d eos %d vocab %d", bos, eos, vocab);
    const char *tmpl = tok_chat_template(t);
    if (tmpl)
        (void)strlen(tmpl);
    (void)tok_add_bos_token(t);
    int32_t probe[] = {0, 1, 2, vocab / 2, vocab - 2, vocab - 1, vocab, -1};
    for (size_t i = 0; i < sizeof probe / sizeof probe[0]; i++) {
        const char *p = tok_id_to_piece(t, probe[i]);
        if (probe[i] < 0 || probe[i] >= vocab)
            FUZZ_ASSERT(p == NULL, "piece of out-of-range id %d", probe[i]);
        if (p) {
            int32_t back = tok_piece_to_id(t, p);
            FUZZ_ASSERT(back >= 0 && back < vocab, "piece_to_id(piece(%d)) = %d", probe[i], back);
        }
        (void)tok_is_special(t, probe[i]);
    }
    for (size_t i = 0; i < sizeof k_texts / sizeof k_texts[0]; i++) {
        fuzz_tok_encode_check(t, k_texts[i], strlen(k_texts[i]), true, i == 3, i % 2, false);
        if (i == 3)
            fuzz_tok_encode_check(t, k_texts[i], strlen(k_texts[i]), false, false, false, false);
    }
    fuzz_tok_decode_check(t, probe, (int)(sizeof probe / sizeof probe[0]) - 2, false, 0, false);
    fuzz_tok_decode_check(t, probe, (int)(sizeof probe / sizeof probe[0]) - 2, true, 2, false);
    tok_free(t);
    return 0;
}
