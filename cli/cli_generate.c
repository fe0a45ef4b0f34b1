/* cli/cli_generate.c: `inferd generate`, offline generation.
 *
 * Every prompt runs through the engine (cli/gen_batch.c): --prompts-file as
 * many concurrent requests, --prompt / --prompt-ids as a batch of one with
 * the text streamed to stdout (or the ids, or with --json the same JSON line
 * --prompts-file prints) and a timing line on stderr taken from the
 * engine's timestamps. Sampling flags are the rows of the sampling table
 * (scheduler/engine.h): this file only matches "--name" to a row and hands
 * the text to it, so a flag accepts exactly what an API field accepts.
 * --dump-logits is a diagnostic prefill of the prompt alone, before the
 * engine starts (scripts/hf_reference.py compares those logits with HF's).
 *
 * Trade-off: one code path for one prompt and for many (the same engine,
 * stop handling and output JSON) at the cost of an engine thread for a
 * single prompt; a raw per-token timing loop is `inferd bench latency`'s
 * job, not this command's. Exit codes follow cli/cli.h: 2 for anything
 * wrong with the command line or the prompt, 1 when loading or running
 * fails.
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
#include "server/srv_opts.h"

/* Everything the command line says; strings point into argv (no copies),
 * except what cli_model_args owns. */
typedef struct {
    cli_model_args ma;
    const char *prompt;
    const char *prompt_ids;
    const char *prompts_file;
    const char *dump_logits; /* write the last prompt position's logits (f32) here */
    bool print_ids;          /* print generated ids instead of text */
    bool json;               /* one prompt: print the --prompts-file JSON line */
    sampling_params sp;      /* stop[] point into argv */
    uint64_t given;          /* bit i: sampling row i was set by a flag (beats generation_config.json) */
} gen_args;

/* The sampling rows' help lines: flag, range, help. */
/* Generated from the rows, so the printed ranges are the validator's. */
static void sampling_usage(FILE *f)
{
    size_t n;
    const sampling_row *rows = sampling_rows(&n);
    for (size_t i = 0; i < n; i++) {
        const opt_row *o = &rows[i].opt;
        char flag[48], range[64];
        snprintf(flag, sizeof flag, "--%s%s%s", o->name, o->meta ? " " : "", o->meta ? o->meta : "");
        fprintf(f, "  %-24s %s %s%s\n", flag, o->help, o->kind == OPT_BOOL ? "" : sampling_row_range(&rows[i], range, sizeof range),
                o->kind == OPT_CUSTOM && strcmp(o->name, "stop") == 0 ? ", repeatable" : "");
    }
}

/* `inferd generate --help`. The max-tokens note documents the one
 * difference from the API: generate's default is 256, not the table's 16,
 * and a defaulted value is capped to the context (gen_job.cap_max_tokens). */
static void gen_usage(FILE *f)
{
    fprintf(f,
            "usage: inferd generate --model DIR (--prompt TEXT | --prompt-ids 1,2,3 | --prompts-file FILE)\n"
            "                       [sampling options] [engine options]\n\n"
            "Runs every prompt through the engine. One prompt prints only the generated text on stdout\n"
            "and a timing line on stderr.\n\n"
            "prompt:\n"
            "  --prompt TEXT            text prompt (tokenized with the model's tokenizer, BOS added)\n"
            "  --prompt-ids LIST        comma-separated token ids, used as is\n"
            "  --prompts-file FILE      JSON lines ({\"prompt\": ...} or {\"prompt_ids\": [...]}, plus any\n"
            "                           sampling key) or plain text, one prompt per line; all run\n"
            "                           concurrently; JSON out\n"
            "sampling (also the keys of a prompts-file line and of an API request, with '_'):\n");
    sampling_usage(f);
    fprintf(f,
            "  (--max-tokens, default 256, is lowered to the room the prompt leaves in the context;\n"
            "   a prompts-file line's own max_tokens is not)\n"
            "  (a value no flag sets comes from the model's generation_config.json: temperature,\n"
            "   top_p, top_k, min_p, max_new_tokens; --generation-config vllm ignores the file)\n"
            "output:\n"
            "  --print-ids              print the generated token ids instead of text (a final stop\n"
            "                           token included, as in --prompts-file's token_ids)\n"
            "  --json                   one prompt: print the JSON line --prompts-file would print\n"
            "  --dump-logits FILE       write the logits of the last prompt position (raw f32) to FILE\n");
    cli_model_usage(f);
}

/* A list flag: --stop-token-ids LIST replaces, --stop STRING appends.
 * The count goes through the row before anything is stored (the fixed
 * arrays hold SAMPLING_MAX_STOP); entries themselves (id < vocab, UTF-8,
 * length) are checked by sampling_params_validate later.
 * NOTE: a --stop string is not copied: sp.stop[] points into argv, which
 * outlives the whole command; engine_submit copies it for the engine. */
/* A list flag: --stop-token-ids LIST replaces, --stop STRING appends. */
static int set_list(const sampling_row *row, const char *v, sampling_params *sp)
{
    if (strcmp(row->key, "stop") == 0) {
        if (sampling_row_check(row, sp->n_stop + 1) != INFERD_OK)
            return cli_fail("--stop: %s", inferd_last_error());
        sp->stop[sp->n_stop++] = v;
        return 1;
    }
    int32_t *ids;
    int n;
    if (util_parse_int_list(v, &ids, &n) != INFERD_OK)
        return cli_fail("--%s: %s", row->opt.name, inferd_last_error());
    if (sampling_row_check(row, n) != INFERD_OK) {
        inferd_free(ids);
        return cli_fail("--%s: %s", row->opt.name, inferd_last_error());
    }
    memcpy(sp->stop_token_ids, ids, sizeof(int32_t) * (size_t)n);
    sp->n_stop_token_ids = n;
    inferd_free(ids);
    return 1;
}

/* argv[*i] as a sampling flag ("--name V", "--name=V", "--ignore-eos"):
 * 1 consumed, 0 not a sampling flag, -1 error printed. */
static int parse_sampling(int argc, char **argv, int *i, gen_args *g)
{
    /* only a name that is some row's flag or key is ours; everything else
     * (including too long names) returns 0 for the caller's own flags */
    const char *a = argv[*i];
    if (strncmp(a, "--", 2) != 0)
        return 0;
    char name[64];
    const char *eq = strchr(a + 2, '=');
    size_t len = eq ? (size_t)(eq - (a + 2)) : strlen(a + 2);
    if (len >= sizeof name)
        return 0;
    memcpy(name, a + 2, len);
    name[len] = '\0';
    const sampling_row *row = sampling_row_find(name);
    if (!row)
        return 0;
    size_t n_rows;
    const int idx = (int)(row - sampling_rows(&n_rows));
    if (idx < 64)
        g->given |= (uint64_t)1 << idx;
        /* --ignore-eos is a switch: "--ignore-eos=false" is refused rather
         * than guessed (OPT_F_NO_NEGATE: there is no --no-ignore-eos) */
    if (row->opt.kind == OPT_BOOL) {
        if (eq)
            return cli_fail("--%s takes no value", row->opt.name);
        return sampling_row_set_number(row, &g->sp, 1) == INFERD_OK ? 1 : -1;
    }
    const char *v = eq ? eq + 1 : *i + 1 < argc ? argv[*i + 1] : NULL;
    if (!v)
        return cli_fail("--%s needs a value", row->opt.name);
    if (!eq)
        (*i)++;
    if (row->opt.kind == OPT_CUSTOM)
        return set_list(row, v, &g->sp);
    if (sampling_row_set_text(row, &g->sp, v) != INFERD_OK)
        return cli_fail("--%s: %s", row->opt.name, inferd_last_error());
    return 1;
}

/* 0 ok, 2 usage error (message printed), 3 --help shown.
 * Order of the attempts per argument: output switches, model/engine/glue
 * rows, sampling rows, then generate's own value flags; the first taker
 * wins, so a sampling row may never share a name with a model row.
 * Validation runs with vocab 0 (the model is not loaded yet): stop token
 * ids are checked against the vocabulary at engine_submit. */
/* 0 ok, 2 usage error (message printed), 3 --help shown. */
static int parse_args(int argc, char **argv, gen_args *g)
{
    memset(g, 0, sizeof *g);
    cli_model_args_default(&g->ma);
    sampling_params_default(&g->sp);
    /* a longer default than the API's 16: a command-line user wants a
     * visible answer; gen_job.cap_max_tokens keeps it within the context */
    g->sp.max_tokens = 256;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (strcmp(a, "--help") == 0 || strcmp(a, "-h") == 0) {
            gen_usage(stdout);
            return 3;
        }
        if (strcmp(a, "--print-ids") == 0 || strcmp(a, "--json") == 0) {
            *(a[2] == 'p' ? &g->print_ids : &g->json) = true;
            continue;
        }
        int r = cli_parse_model_flag(argc, argv, &i, &g->ma);
        if (r == 0)
            r = parse_sampling(argc, argv, &i, g);
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
    const char *param;
    if (sampling_params_validate(&g->sp, 0, &param) != INFERD_OK) {
        cli_fail("--%s: %s", sampling_row_find(param)->opt.name, inferd_last_error());
        return 2;
    }
    return 0;
}

/* Write the model's last logits row (vocab floats, host byte order) to
 * path; -1 with the error set when the file cannot be written.
 * NOTE: fclose()'s result is not checked, so a write error reported only
 * at close (full disk on a buffered tail) goes unnoticed. */
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

/* Diagnostic: prefill the prompt alone (blocks 1.., before the engine owns
 * the cache) and write the last position's logits. */
/* NOTE: this bypasses the engine and its pool: it may only run before the
 * engine is created, and it uses blocks 1..nb directly. Their contents are
 * garbage to the engine afterwards, which is harmless: no block is ever
 * read before it is written, and none is registered in the prefix cache.
 * The prompt is prefilled in chunks of the model's token budget, each
 * chunk producing the logits of its last position; the last chunk's are
 * the ones written. */
static int prefill_dump(model *m, const int32_t *ids, int n_ids, const char *path)
{
    int bs = model_block_size(m), nb = INFERD_CEIL_DIV(n_ids, bs);
    if (n_ids < 1 || n_ids > model_max_model_len(m) || nb + 1 > model_num_kv_blocks(m))
        return cli_fail("--dump-logits: the prompt (%d tokens) does not fit the model or the KV cache", n_ids);
    int32_t *table = inferd_malloc(sizeof(int32_t) * (size_t)nb);
    for (int i = 0; i < nb; i++)
        table[i] = i + 1; /* block 0 is the null block */
    int chunk = model_max_num_batched_tokens(m);
    inferd_status st = INFERD_OK;
    for (int off = 0; off < n_ids && st == INFERD_OK; off += chunk) {
        int n = INFERD_MIN(chunk, n_ids - off);
        st = model_forward_seq(m, table, ids + off, off, n, n - 1);
    }
    kern_sync(model_kern(m));
    inferd_free(table);
    if (st != INFERD_OK || dump_logits(m, path) != 0)
        return cli_fail("--dump-logits: %s", inferd_last_error());
    return 0;
}

/* One prompt through the engine as a batch of one. Without a tokenizer the
 * output falls back to ids (there is no text to print). The prompt buffer
 * stays the caller's: gen_run copies it. */
/* One prompt through the engine as a batch of one. */
static int run_single(gen_args *g, cli_loaded *L, const int32_t *ids, int n_ids)
{
    if (g->dump_logits && prefill_dump(L->m, ids, n_ids, g->dump_logits) != 0)
        return 1;
    gen_job job = {.defaults = &g->sp,
                   .cap_max_tokens = true,
                   .out = g->json ? GEN_OUT_JSON : g->print_ids || !L->tok ? GEN_OUT_IDS : GEN_OUT_TEXT,
                   .prompt_ids = ids,
                   .n_prompt = n_ids};
    return gen_run(L->m, L->tok, &L->eo, &job);
}

/* --prompt-ids as given, or --prompt tokenized with the model's tokenizer
 * (post-processor applied, so BOS when the tokenizer adds one;
 * special-token text parsed into special ids). *ids is the
 * caller's to free. Runs after the model load: --prompt needs the loaded
 * tokenizer, and --prompt-ids shares the path. */
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

/* The model's generation_config.json sampling defaults (vLLM's
 * --generation-config auto; "vllm" loads none) for every sampling value no
 * flag set; a prompts-file line's own keys still win over both. The
 * defaults in force are logged. */
static int apply_gen_defaults(gen_args *g, model *m)
{
    char desc[256];
    if (srv_gen_defaults_apply(&model_get_config(m)->gen, g->given, &g->sp, NULL, desc, sizeof desc) != INFERD_OK)
        return cli_fail("%s (--generation-config vllm ignores the file)", inferd_last_error());
    INFERD_LOG_INFO("sampling defaults from generation_config.json (--generation-config %s): %s",
                    g->ma.mo.generation_config ? g->ma.mo.generation_config : "auto", desc);
    return 0;
}

/* `inferd generate`: parse, load, run, unload. Every exit path frees what
 * the earlier steps allocated (cli_model_args owns its strings until the
 * end). */
int cli_generate(int argc, char **argv)
{
    gen_args g;
    int pr = parse_args(argc, argv, &g);
    if (pr != 0) {
        cli_model_args_free(&g.ma);
        return pr == 3 ? 0 : 2;
    }
    int fr = cli_follow_node(&g.ma.mo); /* --node-rank > 0: follow node 0, no generation here */
    if (fr >= 0) {
        cli_model_args_free(&g.ma);
        return fr;
    }
    cli_loaded L;
    if (cli_load(&g.ma, &L) != 0) {
        cli_model_args_free(&g.ma);
        return 1;
    }
    if (apply_gen_defaults(&g, L.m) != 0) {
        cli_unload(&L);
        cli_model_args_free(&g.ma);
        return 1;
    }
    int rc;
    if (g.prompts_file) {
        gen_job job = {.defaults = &g.sp,
                       .cap_max_tokens = true,
                       .out = GEN_OUT_JSON,
                       .prompts_file = g.prompts_file};
        rc = gen_run(L.m, L.tok, &L.eo, &job);
    } else {
        int32_t *ids = NULL;
        int n = 0;
        rc = prompt_to_ids(&g, L.tok, &ids, &n) != 0 ? 2 : run_single(&g, &L, ids, n);
        inferd_free(ids);
    }
    cli_unload(&L);
    cli_model_args_free(&g.ma);
    return rc;
}
