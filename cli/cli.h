/* cli/cli.h: the `inferd` subcommands. Each returns the process exit code
 * (0 ok, 1 runtime failure, 2 usage error) and prints its own --help. */
#ifndef INFERD_CLI_CLI_H
#define INFERD_CLI_CLI_H

int cli_generate(int argc, char **argv);   /* cli/cli_generate.c */
int cli_tokenize(int argc, char **argv);   /* cli/cli_tokenize.c */
int cli_detokenize(int argc, char **argv); /* cli/cli_tokenize.c */
int cli_serve(int argc, char **argv);      /* cli/cli_serve.c */
int cli_bench(int argc, char **argv);      /* cli/cli_bench.c */
int cli_bench_latency(int argc, char **argv); /* cli/cli_bench_latency.c */
int cli_bench_throughput(int argc, char **argv); /* cli/cli_bench_throughput.c */

#endif
