/* cli/cli_serve.h: `inferd serve`'s command line: flags and a --config JSON
 * file into an srv_opts (server/srv_opts.h), then srv_run. Exposed for the
 * option tests; cli_serve (cli/cli.h) is the command. */
#ifndef INFERD_CLI_CLI_SERVE_H
#define INFERD_CLI_CLI_SERVE_H

#include <stdbool.h>
#include <stdio.h>

#include "cli/cli_common.h"
#include "server/srv_opts.h"

/* Parse argv (argv[0] is "serve") into o (defaulted by srv_opts_default)
 * and glue (may be NULL: the glue options are then parsed and dropped).
 * Order: defaults, the --config file, then the flags left to right (last
 * wins), then srv_opts_validate. Returns 0 ok, 1 when --help was printed to
 * out, 2 on a usage error (message in inferd_last_error()). */
int cli_serve_parse(srv_opts *o, cli_glue_opts *glue, int argc, char **argv, FILE *out);

/* Apply one config-file JSON object (text) strictly: every key must be a
 * row of the model, engine, server or glue table, with a value of the row's
 * type. name names the source in messages. false with inferd_last_error(). */
bool cli_serve_apply_json(srv_opts *o, cli_glue_opts *glue, const char *json, const char *name);

/* The --help text: every row of the four tables with range and default. */
void cli_serve_usage(FILE *f);

#endif
