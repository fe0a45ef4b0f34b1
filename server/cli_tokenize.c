/* server/cli_tokenize.c: placeholder until its issue lands (being written). */
#include <stdio.h>
#include "server/cli.h"
int cli_tokenize(int argc, char **argv) { (void)argc; (void)argv; fprintf(stderr, "inferd: 'cli_tokenize' is not built yet\n"); return 1; }
int cli_detokenize(int argc, char **argv) { (void)argc; (void)argv; fprintf(stderr, "inferd: 'cli_detokenize' is not built yet\n"); return 1; }
