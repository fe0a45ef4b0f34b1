/* cli/cli_common.h: command-line glue shared by the subcommands that load a
 * model (generate, serve): the model and engine flags, the CLI's own rows
 * (log level), and the load/unload of model + tokenizer.
 *
 * The option rows themselves live next to the structs they fill
 * (model_opts_rows in model/model_opts.c, engine_opts_rows in
 * scheduler/engine_opts.c) and are parsed by common/opt; this file only
 * binds them to a command's structs (cli_shared_groups) and prints them.
 */
#ifndef INFERD_CLI_CLI_COMMON_H
#define INFERD_CLI_CLI_COMMON_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "common/opt.h"
#include "model/model.h"
#include "scheduler/engine.h"
#include "tokenizer/tokenizer.h"

/* Options of the command line itself (not of any library). */
typedef struct {
    int log_level; /* log_level enum */
} cli_glue_opts;

/* Model flags, engine flags and the glue rows bound to the structs they
 * fill: out[0] model rows -> mo, out[1] engine rows -> eo, out[2] glue
 * rows -> g, out[3] the multi-node rows (dist/) -> mo->dist. */
#define CLI_SHARED_GROUPS 4
void cli_shared_groups(model_opts *mo, engine_opts *eo, cli_glue_opts *g, opt_group out[CLI_SHARED_GROUPS]);
/* --nnodes > 1 and --node-rank > 0: this process holds only its
 * tensor-parallel ranks and runs the steps node 0 sends (vLLM's headless
 * nodes) until node 0 ends; the exit code, or -1 on node 0 (go on). */
int cli_follow_node(model_opts *mo);
/* Defaults of the glue rows (log level info). */
void cli_glue_default(cli_glue_opts *g);
/* Apply the glue options to the process (log level). */
void cli_glue_apply(const cli_glue_opts *g);
/* Help lines of the model, engine and glue rows, with ranges and defaults. */
void cli_shared_usage(FILE *f);

typedef struct {
    const char *model_dir; /* == mo.model_dir after each parsed flag (NULL: no --model yet) */
    model_opts mo;         /* owns its strings; device_auto on by default */
    engine_opts eo;        /* step limits copied from mo after each flag */
    cli_glue_opts glue;
} cli_model_args;

typedef struct {
    model *m;
    tokenizer *tok; /* NULL when the directory has no tokenizer.json */
    engine_opts eo;
} cli_loaded;

void cli_model_args_default(cli_model_args *a);
/* Free what parsing allocated; a is left zeroed. */
void cli_model_args_free(cli_model_args *a);
/* Try to consume argv[*i] (and its value) as a model/engine/glue flag.
 * 1 consumed (advances *i past the value), 0 not ours, -1 error printed. */
int cli_parse_model_flag(int argc, char **argv, int *i, cli_model_args *a);
/* "model and engine:" and the shared help lines. */
void cli_model_usage(FILE *f);
/* Load model + tokenizer; 0 ok, else prints the error and returns 1. */
int cli_load(cli_model_args *a, cli_loaded *out);
void cli_unload(cli_loaded *l);
/* The start of the bench commands: resolve --device auto, measure the
 * device's ceilings (bench_latency_ceilings) before anything else uses the
 * GPU, then cli_load. 0 ok; else the error is printed (prefixed by cmd),
 * a is freed and 1 returned. */
int cli_bench_load(cli_model_args *a, const char *cmd, kern_ceilings *ceil, cli_loaded *l);
/* Print "inferd: error: <msg>" on stderr; returns -1. */
int cli_fail(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

#endif
