/* server/srv_main.c: placeholder until its issue lands (being written). */
#include <stdio.h>
#include "server/cli.h"
int cli_serve(int argc, char **argv) { (void)argc; (void)argv; fprintf(stderr, "inferd: 'cli_serve' is not built yet\n"); return 1; }
