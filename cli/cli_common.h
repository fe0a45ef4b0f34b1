/* cli/cli_common.h: options shared by the subcommands that load a model
 * (generate, serve): model/tokenizer location, backend, memory and engine
 * flags, and the load/unload of model + tokenizer.
 *
 * Options are described by tables of cli_opt_def rows. The model/engine rows
 * (cli_model_opt_table) are defined once here and used by both `inferd
 * generate` (cli_parse_model_flag) and `inferd serve` (srv_opts.c, which
 * also reads them from its JSON --config file); each command keeps its own
 * table for the options only it has. The same helpers parse "--name VALUE",
 * "--name=VALUE", boolean "--name" / "--no-name" and check values.
 */
#ifndef INFERD_CLI_CLI_COMMON_H
#define INFERD_CLI_CLI_COMMON_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "model/model.h"
#include "tokenizer/tokenizer.h"
#include "scheduler/engine.h"

/* How an option's text is checked and where its value is stored. */
typedef enum {
    CLI_OPT_STR,      /* char * (owned copy), not empty */
    CLI_OPT_INT,      /* int in [lo, hi] */
    CLI_OPT_SIZE,     /* int64_t bytes in [lo, hi]; K/M/G/T suffixes (binary) */
    CLI_OPT_DOUBLE,   /* double in [lo, hi] */
    CLI_OPT_BOOL,     /* bool: "--name" / "--no-name"; text true|false|1|0 */
    CLI_OPT_DEVICE,   /* kern_backend: cpu|cuda|gpu */
    CLI_OPT_FORMAT,   /* model_load_format: safetensors|auto|dummy */
    CLI_OPT_LOGLEVEL, /* char * (owned copy) naming a log level */
    CLI_OPT_CUSTOM,   /* checked and stored by the table's owner */
} cli_opt_kind;

typedef struct {
    const char *name; /* without the leading "--" */
    cli_opt_kind kind;
    size_t off; /* offset of the value in the struct the table describes */
    double lo, hi;
    const char *help;
} cli_opt_def;

/* Values of the shared model/engine options (cli_model_opt_table). */
typedef struct {
    char *model_dir;
    char *tokenizer_dir; /* NULL = model_dir */
    model_load_format load_format;
    kern_backend backend;
    bool device_auto; /* no --device: cuda when available, else cpu */
    int threads;
    double gpu_memory_utilization;
    int max_num_seqs;
    int max_num_batched_tokens;
    int block_size;
    int64_t kv_cache_bytes;
    bool enable_prefix_caching;
    int max_model_len;
    char *log_level;
} cli_model_vals;

typedef struct {
    const char *model_dir;
    const char *tokenizer_dir; /* default: model_dir */
    model_opts mo;
    engine_opts eo;
    bool device_set;  /* --device given (else cuda when available) */
    cli_model_vals v; /* the parsed values (owns the strings above) */
} cli_model_args;

typedef struct {
    model *m;
    tokenizer *tok; /* NULL when the directory has no tokenizer.json */
    engine_opts eo;
} cli_loaded;

void cli_model_args_default(cli_model_args *a);
/* Free what parsing allocated; a is left defaulted-empty (zeroed). */
void cli_model_args_free(cli_model_args *a);
/* Try to consume argv[*i] (and its value) as a model/engine flag.
 * 1 consumed (advances *i past the value), 0 not ours, -1 error printed. */
int cli_parse_model_flag(int argc, char **argv, int *i, cli_model_args *a);
void cli_model_usage(FILE *f);
/* Load model + tokenizer; 0 ok, else prints the error and returns 1. */
int cli_load(cli_model_args *a, cli_loaded *out);
void cli_unload(cli_loaded *l);
/* Print "inferd: error: <msg>" on stderr; returns -1. */
int cli_fail(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

/* ---- option tables ---------------------------------------------------------- */

/* The shared model/engine rows (offsets into cli_model_vals); *n = count. */
const cli_opt_def *cli_model_opt_table(size_t *n);
/* Defaults of the shared options (from model_opts_default and
 * engine_opts_default; log level "info"). */
void cli_model_vals_default(cli_model_vals *v);
/* Free the strings of v (not v itself); v is zeroed. */
void cli_model_vals_free(cli_model_vals *v);
/* Set shared option d (a row of cli_model_opt_table) from its text.
 * false with inferd_last_error() set ("--name: ...") on a bad value. */
bool cli_model_vals_set(cli_model_vals *v, const cli_opt_def *d, const char *val);

/* Row of t[0..n) named name[0..len) ('_' matches '-'), or NULL. */
const cli_opt_def *cli_opt_find(const cli_opt_def *t, size_t n, const char *name, size_t len);
/* Match argv[*i] against t: "--name VALUE", "--name=VALUE", and for
 * CLI_OPT_BOOL rows "--name" / "--no-name" (value "true" / "false").
 * 1: matched, *d and *val set, *i advanced past a separate value;
 * 0: not a row of t; -1: usage error (inferd_last_error() set). */
int cli_opt_arg(const cli_opt_def *t, size_t n, int argc, char **argv, int *i, const cli_opt_def **d,
                const char **val);
/* Check val for row d and store it at (char *)base + d->off (kinds STR,
 * INT, SIZE, DOUBLE, BOOL, DEVICE, FORMAT, LOGLEVEL; a DEVICE row does not
 * touch device_auto). false with inferd_last_error() set on a bad value. */
bool cli_opt_set(void *base, const cli_opt_def *d, const char *val);
/* "123", "4K", "1.5G", "2MiB" (binary multiples) -> bytes. */
bool cli_parse_size(const char *s, int64_t *out);
/* One help line per row: "  --name  help". */
void cli_opt_usage(FILE *f, const cli_opt_def *t, size_t n);

#endif
