/* server/cli_common.h: options shared by the subcommands that load a model
 * (generate, serve): model/tokenizer location, backend, memory and engine
 * flags, and the load/unload of model + tokenizer. */
#ifndef INFERD_SERVER_CLI_COMMON_H
#define INFERD_SERVER_CLI_COMMON_H

#include <stdio.h>

#include "model/model.h"
#include "model/tokenizer.h"
#include "scheduler/engine.h"

typedef struct {
    const char *model_dir;
    const char *tokenizer_dir;  /* default: model_dir */
    model_opts mo;
    engine_opts eo;
    bool device_set;            /* --device given (else cuda when available) */
} cli_model_args;

typedef struct {
    model *m;
    tokenizer *tok;             /* NULL when the directory has no tokenizer.json */
    engine_opts eo;
} cli_loaded;

void cli_model_args_default(cli_model_args *a);
/* Try to consume argv[*i] (and its value) as a model/engine flag.
 * 1 consumed (advances *i past the value), 0 not ours, -1 error printed. */
int cli_parse_model_flag(int argc, char **argv, int *i, cli_model_args *a);
void cli_model_usage(FILE *f);
/* Load model + tokenizer; 0 ok, else prints the error and returns 1. */
int cli_load(cli_model_args *a, cli_loaded *out);
void cli_unload(cli_loaded *l);
/* Print "inferd: error: <msg>" on stderr; returns -1. */
int cli_fail(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

#endif
