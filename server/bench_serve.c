/* server/bench_serve.c: placeholder until its issue lands (being written). */
#include <stdio.h>
#include "server/cli.h"
int cli_bench(int argc, char **argv) { (void)argc; (void)argv; fprintf(stderr, "inferd: 'cli_bench' is not built yet\n"); return 1; }
