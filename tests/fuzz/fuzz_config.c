/* tests/fuzz/fuzz_config.c: the config.json parser (model/config.h).
 *
 * The input is config.json, optionally followed by a NUL byte and a
 * generation_config.json. Both go through model_config_parse (the text
 * API) and model_config_load (files in a temp dir, generation config
 * included). On success the harness checks the invariants the forward pass
 * relies on (positive sizes, head_dim even, n_heads a multiple of n_kv_heads,
 * eos ids inside the vocab) and computes the RoPE frequencies, which must be
 * finite.
 */
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "fuzz_util.h"
#include "model/config.h"

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
    (void)argc;
    (void)argv;
    fuzz_quiet();
    fuzz_tmpdir();
    return 0;
}

static void check(const model_config *c, const char *what)
{
    FUZZ_ASSERT(c->hidden_size > 0 && c->intermediate_size > 0 && c->n_layers > 0, "%s: sizes", what);
    FUZZ_ASSERT(c->n_heads > 0 && c->n_kv_heads > 0 && c->n_heads % c->n_kv_heads == 0, "%s: heads %d/%d", what,
                c->n_heads, c->n_kv_heads);
    FUZZ_ASSERT(c->head_dim > 0 && c->head_dim % 2 == 0, "%s: head_dim %d", what, c->head_dim);
    FUZZ_ASSERT(c->vocab_size > 0 && c->max_position_embeddings > 0, "%s: vocab/max_pos", what);
    FUZZ_ASSERT(c->n_eos >= 0 && c->n_eos <= MODEL_MAX_EOS, "%s: n_eos %d", what, c->n_eos);
    for (int i = 0; i < c->n_eos; i++)
        FUZZ_ASSERT(c->eos_ids[i] >= 0 && c->eos_ids[i] < c->vocab_size, "%s: eos %d", what, c->eos_ids[i]);
    FUZZ_ASSERT(c->bos_id >= -1 && c->bos_id < c->vocab_size, "%s: bos %d", what, c->bos_id);
    FUZZ_ASSERT(memchr(c->arch, 0, sizeof c->arch) && memchr(c->torch_dtype, 0, sizeof c->torch_dtype),
                "%s: unterminated string", what);
    FUZZ_ASSERT(isfinite(c->rms_norm_eps) && isfinite(c->rope_theta) && c->rope_theta > 0, "%s: eps/theta",
                what);
    float *f = malloc(sizeof *f * (size_t)(c->head_dim / 2));
    if (!f)
        abort();
    model_rope_inv_freq(c, f);
    for (int i = 0; i < c->head_dim / 2; i++)
        FUZZ_ASSERT(isfinite(f[i]), "%s: inv_freq[%d] = %g", what, i, (double)f[i]);
    free(f);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    const uint8_t *nul = memchr(data, 0, size);
    size_t n_cfg = nul ? (size_t)(nul - data) : size;
    char *cfg_json = fuzz_cstr(data, n_cfg);

    model_config c;
    memset(&c, 0, sizeof c);
    if (model_config_parse(cfg_json, "config.json", &c) == INFERD_OK)
        check(&c, "parse");

    fuzz_write("config.json", data, n_cfg);
    if (nul)
        fuzz_write("generation_config.json", nul + 1, size - n_cfg - 1);
    else
        fuzz_unlink("generation_config.json");
    memset(&c, 0, sizeof c);
    if (model_config_load(fuzz_tmpdir(), &c) == INFERD_OK)
        check(&c, "load");
    free(cfg_json);
    return 0;
}
