/* cli/cli_generate.c: `inferd generate`, offline generation.
 *
 * One prompt (--prompt TEXT or --prompt-ids 1,2,3) runs as a single sequence
 * straight through model_forward: prefill in chunks of max_num_batched_tokens,
 * then one decode step per token, streaming the text to stdout as it is
 * decoded (incremental detokenizer) and a timing line to stderr. This path is
 * also the "alone" reference the engine's invariance tests compare against.
 * --prompts-file runs many prompts concurrently through the engine
 * (cli/gen_batch.c).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "common/alloc.h"
#include "common/log.h"
#include "common/util.h"
#include "model/model.h"
#include "tokenizer/tokenizer.h"
#include "scheduler/engine.h"
#include "cli/cli.h"
#include "cli/cli_common.h"
#include "cli/gen_batch.h"

typedef struct {
    cli_model_args ma;
    const char *prompt;
    const char *prompt_ids;
    const char *prompts_file;
    const char *dump_logits; /* write the last prompt position's logits (f32) here */
    bool print_ids;          /* print generated ids instead of text */
    sampling_params sp;
} gen_args;

static void gen_usage(FILE *f)
{
    fprintf(f,
            "usage: inferd generate --model DIR (--prompt TEXT | --prompt-ids 1,2,3 | --prompts-file FILE)\n"
            "                       [sampling options] [engine options]\n\n"
            "Prints only the generated text on stdout and a timing line on stderr.\n\n"
            "prompt:\n"
            "  --prompt TEXT            text prompt (tokenized with the model's tokenizer, BOS added)\n"
            "  --prompt-ids LIST        comma-separated token ids, used as is\n"
            "  --prompts-file FILE      JSON lines ({\"prompt\": ...} or {\"prompt_ids\": [...]}) or plain\n"
            "                           text, one prompt per line; all run concurrently; JSON out\n"
            "sampling:\n"
            "  --max-tokens N           tokens to generate (default 256)\n"
            "  --temperature T          0 = greedy (default 1.0)\n"
            "  --top-p P --top-k K --min-p P --seed S\n"
            "  --stop-token-ids LIST    stop when one of these ids is sampled\n"
            "  --ignore-eos             do not stop at the model's EOS ids\n"
            "output:\n"
            "  --print-ids              print the generated token ids instead of text\n"
            "  --dump-logits FILE       write the logits of the last prompt position (raw f32) to FILE\n");
    cli_model_usage(f);
}

static int parse_sampling(int argc, char **argv, int *i, sampling_params *sp)
{
    const char *a = argv[*i];
    const char *v = *i + 1 < argc ? argv[*i + 1] : NULL;
    long long x;
    double d;
    if (strcmp(a, "--ignore-eos") == 0) {
        sp->ignore_eos = true;
        return 1;
    }
    static const char *valued[] = {"--max-tokens", "--temperature", "--top-p",         "--top-k",
                                   "--min-p",      "--seed",        "--stop-token-ids"};
    size_t k = 0;
    while (k < INFERD_ARRAY_LEN(valued) && strcmp(a, valued[k]) != 0)
        k++;
    if (k == INFERD_ARRAY_LEN(valued))
        return 0;
    if (!v)
        return cli_fail("%s needs a value", a);
    (*i)++;
    switch (k) {
    case 0:
        if (!util_parse_int(v, 1, 1 << 24, &x))
            return cli_fail("--max-tokens: '%s' is not an integer >= 1", v);
        sp->max_tokens = (int32_t)x;
        break;
    case 1:
        if (!util_parse_double(v, &d) || d < 0 || d > 100)
            return cli_fail("--temperature: '%s' is not a number in [0, 100]", v);
        sp->temperature = (float)d;
        break;
    case 2:
        if (!util_parse_double(v, &d) || d <= 0 || d > 1)
            return cli_fail("--top-p: '%s' is not a number in (0, 1]", v);
        sp->top_p = (float)d;
        break;
    case 3:
        if (!util_parse_int(v, -1, 1 << 30, &x))
            return cli_fail("--top-k: '%s' is not an integer >= -1", v);
        sp->top_k = (int32_t)x;
        break;
    case 4:
        if (!util_parse_double(v, &d) || d < 0 || d > 1)
            return cli_fail("--min-p: '%s' is not a number in [0, 1]", v);
        sp->min_p = (float)d;
        break;
    case 5:
        if (!util_parse_int(v, 0, INT64_MAX, &x))
            return cli_fail("--seed: '%s' is not a non-negative integer", v);
        sp->seed = (uint64_t)x;
        sp->has_seed = true;
        break;
    default: {
        int32_t *ids;
        int n;
        if (util_parse_int_list(v, &ids, &n) != INFERD_OK)
            return cli_fail("--stop-token-ids: %s", inferd_last_error());
        if (n > SAMPLING_MAX_STOP) {
            inferd_free(ids);
            return cli_fail("--stop-token-ids: at most %d ids", SAMPLING_MAX_STOP);
        }
        memcpy(sp->stop_token_ids, ids, sizeof(int32_t) * (size_t)n);
        sp->n_stop_token_ids = n;
        inferd_free(ids);
    }
    }
    return 1;
}

/* 0 ok, 2 usage error (message printed), 3 --help shown. */
static int parse_args(int argc, char **argv, gen_args *g)
{
    memset(g, 0, sizeof *g);
    cli_model_args_default(&g->ma);
    sampling_params_default(&g->sp);
    g->sp.max_tokens = 256;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (strcmp(a, "--help") == 0 || strcmp(a, "-h") == 0) {
            gen_usage(stdout);
            return 3;
        }
        if (strcmp(a, "--print-ids") == 0) {
            g->print_ids = true;
            continue;
        }
        int r = cli_parse_model_flag(argc, argv, &i, &g->ma);
        if (r == 0)
            r = parse_sampling(argc, argv, &i, &g->sp);
        if (r < 0)
            return 2;
        if (r > 0)
            continue;
        const char **dst = strcmp(a, "--prompt") == 0         ? &g->prompt
                           : strcmp(a, "--prompt-ids") == 0   ? &g->prompt_ids
                           : strcmp(a, "--prompts-file") == 0 ? &g->prompts_file
                           : strcmp(a, "--dump-logits") == 0  ? &g->dump_logits
                                                              : NULL;
        if (!dst) {
            cli_fail("unknown option '%s' (see inferd generate --help)", a);
            return 2;
        }
        if (i + 1 >= argc) {
            cli_fail("%s needs a value", a);
            return 2;
        }
        *dst = argv[++i];
    }
    int n_src = !!g->prompt + !!g->prompt_ids + !!g->prompts_file;
    if (!g->ma.model_dir || n_src != 1) {
        cli_fail(!g->ma.model_dir ? "--model DIR is required"
                                  : "give exactly one of --prompt, --prompt-ids, --prompts-file");
        return 2;
    }
    return 0;
}

static bool is_stop(const model_config *c, const sampling_params *sp, int32_t tok, int n_gen)
{
    if (n_gen < sp->min_tokens)
        return false;
    for (int i = 0; i < sp->n_stop_token_ids; i++)
        if (sp->stop_token_ids[i] == tok)
            return true;
    if (!sp->ignore_eos)
        for (int i = 0; i < c->n_eos; i++)
            if (c->eos_ids[i] == tok)
                return true;
    return false;
}

static void emit(tok_stream *ts, int32_t tok)
{
    if (!ts) {
        printf("%d ", tok);
        return;
    }
    char *delta = NULL;
    size_t len = 0;
    if (tok_stream_push(ts, tok, &delta, &len) == INFERD_OK && len)
        fwrite(delta, 1, len, stdout);
    inferd_free(delta);
    fflush(stdout);
}

static int dump_logits(model *m, const char *path)
{
    int vocab = model_get_config(m)->vocab_size;
    float *buf = inferd_malloc(sizeof(float) * (size_t)vocab);
    model_logits_to_host(m, buf);
    FILE *f = fopen(path, "wb");
    size_t w = f ? fwrite(buf, sizeof(float), (size_t)vocab, f) : 0;
    if (f)
        fclose(f);
    inferd_free(buf);
    if (w != (size_t)vocab)
        inferd_set_error(INFERD_ERR_IO, "%s: cannot write logits", path);
    return w == (size_t)vocab ? 0 : -1;
}

static int run_single(gen_args *g, model *m, const tokenizer *tok, const int32_t *ids, int n_ids)
{
    const model_config *c = model_get_config(m);
    int max_len = model_max_model_len(m);
    if (n_ids < 1 || n_ids >= max_len) {
        cli_fail("prompt has %d tokens; the model takes 1..%d", n_ids, max_len - 1);
        return 1;
    }
    int max_new = INFERD_MIN(g->sp.max_tokens, max_len - n_ids);
    int nb = model_max_blocks_per_seq(m);
    if (nb + 1 > model_num_kv_blocks(m)) {
        cli_fail("KV cache too small for one sequence of %d tokens (%d blocks)", max_len,
                 model_num_kv_blocks(m));
        return 1;
    }
    int32_t *table = inferd_malloc(sizeof(int32_t) * (size_t)nb); /* the one sequence owns blocks 1..nb */
    for (int i = 0; i < nb; i++)
        table[i] = i + 1; /* block 0 is the null block */
    tok_stream *ts = tok && !g->print_ids ? tok_stream_new(tok, true) : NULL;
    if (ts)
        tok_stream_prefill(ts, ids, n_ids);
    uint64_t seed = g->sp.has_seed ? g->sp.seed : (uint64_t)util_now_us();
    int chunk = model_max_num_batched_tokens(m), n_gen = 0, rc = 0;
    double t0 = util_now_s();
    inferd_status st = INFERD_OK;
    for (int off = 0; off < n_ids && st == INFERD_OK; off += chunk) {
        int n = INFERD_MIN(chunk, n_ids - off);
        st = model_forward_seq(m, table, ids + off, off, n, n - 1);
    }
    kern_sync(model_kern(m)); /* kernels run asynchronously on the GPU */
    double t_prefill = util_now_s() - t0, t1 = util_now_s();
    if (st == INFERD_OK && g->dump_logits && dump_logits(m, g->dump_logits) != 0)
        st = INFERD_ERR_IO;
    while (st == INFERD_OK && n_gen < max_new) {
        kern_sample_params sp = {.temperature = g->sp.temperature,
                                 .top_p = g->sp.top_p,
                                 .min_p = g->sp.min_p,
                                 .top_k = g->sp.top_k,
                                 .seed = seed,
                                 .counter = (uint64_t)n_gen};
        int32_t next;
        if ((st = model_sample(m, &sp, &next)) != INFERD_OK)
            break;
        if (is_stop(c, &g->sp, next, n_gen))
            break;
        emit(ts, next);
        n_gen++;
        if (n_gen < max_new)
            st = model_forward_seq(m, table, &next, n_ids + n_gen - 1, 1, 0);
    }
    double t_decode = util_now_s() - t1;
    if (st != INFERD_OK) {
        cli_fail("generation failed: %s", inferd_last_error());
        rc = 1;
    }
    if (isatty(STDOUT_FILENO))
        putchar('\n');
    fflush(stdout);
    fprintf(stderr,
            "prompt tokens: %d, prefill: %.2f ms (%.1f tok/s), generated tokens: %d, decode: %.3f ms/token "
            "(%.1f tok/s)\n",
            n_ids, t_prefill * 1e3, n_ids / (t_prefill > 0 ? t_prefill : 1e-9), n_gen,
            n_gen ? t_decode * 1e3 / n_gen : 0.0, n_gen / (t_decode > 0 ? t_decode : 1e-9));
    if (ts)
        tok_stream_free(ts);
    inferd_free(table);
    return rc;
}

static int prompt_to_ids(const gen_args *g, const tokenizer *tok, int32_t **ids, int *n)
{
    if (g->prompt_ids) {
        if (util_parse_int_list(g->prompt_ids, ids, n) != INFERD_OK)
            return cli_fail("--prompt-ids: %s", inferd_last_error());
        return 0;
    }
    if (!tok)
        return cli_fail("--prompt needs a tokenizer (tokenizer.json in --model or --tokenizer DIR)");
    if (tok_encode(tok, g->prompt, strlen(g->prompt), true, true, ids, n) != INFERD_OK)
        return cli_fail("cannot tokenize the prompt: %s", inferd_last_error());
    return 0;
}

int cli_generate(int argc, char **argv)
{
    gen_args g;
    int pr = parse_args(argc, argv, &g);
    if (pr != 0) {
        cli_model_args_free(&g.ma);
        return pr == 3 ? 0 : 2;
    }
    cli_loaded L;
    if (cli_load(&g.ma, &L) != 0) {
        cli_model_args_free(&g.ma);
        return 1;
    }
    int rc;
    if (g.prompts_file) {
        rc = gen_run_prompts_file(L.m, L.tok, &L.eo, &g.sp, g.prompts_file);
    } else {
        int32_t *ids = NULL;
        int n = 0;
        rc = prompt_to_ids(&g, L.tok, &ids, &n) != 0 ? 2 : run_single(&g, L.m, L.tok, ids, n);
        inferd_free(ids);
    }
    cli_unload(&L);
    cli_model_args_free(&g.ma);
    return rc;
}
