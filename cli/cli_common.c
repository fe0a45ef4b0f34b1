/* cli/cli_common.c: see cli_common.h.
 *
 * The model/engine rows are the tables of model/ and scheduler/ (each limit
 * is written there once); the only rows of this file are the command
 * line's own (log level). `inferd generate` parses through
 * cli_parse_model_flag, `inferd serve` (cli_serve.c) binds the same tables
 * to the model_opts / engine_opts inside its srv_opts.
 *
 * Trade-off: the CLI owns no option bounds, so `--help` can never drift from
 * what model_load and engine_create accept; the price is that every
 * command-line-only option (log level) needs a row table of its own here.
 * Not done here: loading policy beyond "model dir, optional tokenizer dir"
 * (devices, weights and KV sizing are model_load's).
 */
#include "cli/cli_common.h"

#include <stdarg.h>
#include <string.h>

#include "bench/bench_latency.h"
#include "common/alloc.h"
#include "common/log.h"
#include "common/util.h"

/* The --log-level names, NULL-terminated (the opt_name convention). */
static const opt_name k_log_levels[] = {{"debug", LOG_LEVEL_DEBUG}, {"info", LOG_LEVEL_INFO},
                                        {"warn", LOG_LEVEL_WARN},   {"error", LOG_LEVEL_ERROR},
                                        {"off", LOG_LEVEL_OFF},     {NULL, 0}};

static const opt_row k_glue_rows[] = {
    {.name = "log-level", .kind = OPT_ENUM, .off = offsetof(cli_glue_opts, log_level), .names = k_log_levels,
     .def = LOG_LEVEL_INFO, .help = "log messages at or above this level"},
};

/* -1 so parse helpers can `return cli_fail(...)` in the 1/0/-1 protocol of
 * cli_parse_model_flag; callers map it to exit code 2. */
int cli_fail(const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    fprintf(stderr, "inferd: error: ");
    vfprintf(stderr, fmt, ap);
    fputc('\n', stderr);
    va_end(ap);
    return -1;
}

/* ---- the shared rows ----------------------------------------------------------- */

/* NOTE: the groups hold pointers into mo/eo/g: they are valid only while
 * those structs are, and must be rebuilt if the structs move (each caller
 * builds them on the stack right before parsing). */
void cli_shared_groups(model_opts *mo, engine_opts *eo, cli_glue_opts *g, opt_group out[CLI_SHARED_GROUPS])
{
    out[0].rows = model_opts_rows(&out[0].n);
    out[0].base = mo;
    out[1].rows = engine_opts_rows(&out[1].n);
    out[1].base = eo;
    out[2] = (opt_group){k_glue_rows, INFERD_ARRAY_LEN(k_glue_rows), g};
    out[3].rows = dist_rdzv_opts_rows(&out[3].n);
    out[3].base = &mo->dist;
}

void cli_glue_default(cli_glue_opts *g)
{
    memset(g, 0, sizeof *g);
    opt_defaults(k_glue_rows, INFERD_ARRAY_LEN(k_glue_rows), g);
}

/* Process-wide: the log level is global state of common/log. */
void cli_glue_apply(const cli_glue_opts *g)
{
    log_set_level((log_level)g->log_level);
}

void cli_shared_usage(FILE *f)
{
    size_t n;
    const opt_row *t = model_opts_rows(&n);
    opt_usage(f, t, n);
    t = engine_opts_rows(&n);
    opt_usage(f, t, n);
    t = dist_rdzv_opts_rows(&n);
    opt_usage(f, t, n);
    opt_usage(f, k_glue_rows, INFERD_ARRAY_LEN(k_glue_rows));
}

/* ---- `inferd generate`'s view of them ------------------------------------------ */

/* Every row's default, plus the one default that differs from the
 * library's: the command line picks the device automatically. The engine's
 * step limits start as the model rows' defaults (engine_opts_from_model). */
void cli_model_args_default(cli_model_args *a)
{
    memset(a, 0, sizeof *a);
    model_opts_default(&a->mo);
    a->mo.device_auto = true; /* the command line's default device: cuda when present */
    engine_opts_default(&a->eo);
    engine_opts_from_model(&a->eo, &a->mo);
    cli_glue_default(&a->glue);
}

/* Only the model rows own memory (their string options, e.g. model_dir);
 * the engine and glue rows are plain values. */
void cli_model_args_free(cli_model_args *a)
{
    model_opts_free(&a->mo);
    memset(a, 0, sizeof *a);
}

int cli_follow_node(model_opts *mo)
{
    if (mo->dist.nnodes <= 1 || mo->dist.node_rank == 0)
        return -1;
    model *m = NULL;
    INFERD_LOG_INFO("node %d of %d: loading this node's tensor-parallel ranks, then following node 0 (%s:%d)",
                    mo->dist.node_rank, mo->dist.nnodes, mo->dist.master_addr ? mo->dist.master_addr : "?",
                    mo->dist.master_port);
    inferd_status st = model_load(mo, &m);
    if (st == INFERD_OK)
        st = model_tp_follow(m);
    if (st != INFERD_OK)
        cli_fail("%s", inferd_last_error());
    model_free(m);
    return st == INFERD_OK ? 0 : 1;
}

void cli_model_usage(FILE *f)
{
    fprintf(f, "model and engine:\n");
    cli_shared_usage(f);
}

/* After every consumed flag the engine's step limits are re-copied from
 * the model options, so `--max-num-seqs` fills both structs however the
 * flags are ordered; the log level takes effect at once, so the messages
 * of model loading already obey it. */
int cli_parse_model_flag(int argc, char **argv, int *i, cli_model_args *a)
{
    opt_group g[CLI_SHARED_GROUPS];
    cli_shared_groups(&a->mo, &a->eo, &a->glue, g);
    const opt_row *row = NULL;
    int r = opt_parse_arg(g, CLI_SHARED_GROUPS, argc, argv, i, &row);
    if (r < 0)
        return cli_fail("%s", inferd_last_error());
    if (r == 0)
        return 0;
    if (row == &k_glue_rows[0])
        cli_glue_apply(&a->glue);
    engine_opts_from_model(&a->eo, &a->mo);
    a->model_dir = a->mo.model_dir;
    return 1;
}

/* The tokenizer is optional: without --tokenizer a missing tokenizer.json
 * in the model directory only means "no text" (ids in and out), while an
 * explicit --tokenizer directory without one is an error. The tokenizer is
 * loaded first, so a tokenizer error costs no model load. out->eo gets the
 * engine options with max_model_len resolved by the loaded model (the
 * option's 0 means "the config's"). On failure nothing stays loaded and
 * the error is printed. */
int cli_load(cli_model_args *a, cli_loaded *out)
{
    memset(out, 0, sizeof *out);
    const char *tdir = a->mo.tokenizer_dir ? a->mo.tokenizer_dir : a->mo.model_dir;
    char *tpath = util_path_join(tdir, "tokenizer.json");
    bool have_tok = util_file_exists(tpath);
    inferd_free(tpath);
    if (a->mo.tokenizer_dir && !have_tok) {
        cli_fail("--tokenizer %s: no tokenizer.json there", tdir);
        return 1;
    }
    if (have_tok && tok_load(tdir, &out->tok) != INFERD_OK) {
        cli_fail("%s", inferd_last_error());
        return 1;
    }
    if (model_load(&a->mo, &out->m) != INFERD_OK) {
        cli_fail("%s", inferd_last_error());
        tok_free(out->tok);
        out->tok = NULL;
        return 1;
    }
    out->eo = a->eo;
    out->eo.max_model_len = model_max_model_len(out->m);
    return 0;
}

int cli_bench_load(cli_model_args *a, const char *cmd, kern_ceilings *ceil, cli_loaded *l)
{
    if (a->mo.device_auto)
        a->mo.backend = kern_cuda_available() ? KERN_BACKEND_CUDA : KERN_BACKEND_CPU;
    a->mo.device_auto = false;
    memset(ceil, 0, sizeof *ceil);
    if (bench_latency_ceilings(a->mo.backend, a->mo.device_id, ceil) != INFERD_OK) {
        cli_fail("%s: measuring the ceilings: %s", cmd, inferd_last_error());
        cli_model_args_free(a);
        return 1;
    }
    if (cli_load(a, l) != 0) {
        cli_model_args_free(a);
        return 1;
    }
    return 0;
}

/* Free what cli_load loaded; l is left zeroed. The engine, if any, must be
 * freed first: it borrows both. */
void cli_unload(cli_loaded *l)
{
    model_free(l->m);
    if (l->tok)
        tok_free(l->tok);
    memset(l, 0, sizeof *l);
}
