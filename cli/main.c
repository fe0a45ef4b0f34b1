/* cli/main.c: the `inferd` binary: dispatches to a subcommand. */
/*
 * The table below is the whole command surface: each entry hands argv
 * (shifted so that argv[0] is the command name) to a function of cli/ that
 * parses its own flags and returns the exit code (cli/cli.h: 0 ok,
 * 1 runtime failure, 2 usage error). No global flags are parsed here, so
 * `inferd --log-level debug serve` is a usage error: every option belongs
 * to a command and is listed by that command's --help. `inferd bench
 * latency|throughput` is dispatched one level down, by cli_bench.
 */
#include <stdio.h>
#include <string.h>

#include "cli/cli.h"

typedef struct {
    const char *name;
    int (*fn)(int argc, char **argv);
    const char *help;
} command;

/* Order is the order of `inferd --help`. */
static const command k_commands[] = {
    {"serve", cli_serve, "OpenAI-compatible HTTP server"},
    {"generate", cli_generate, "offline generation from a prompt or a prompts file"},
    {"tokenize", cli_tokenize, "print the token ids of a text"},
    {"detokenize", cli_detokenize, "print the text of token ids"},
    {"bench", cli_bench, "benchmarks: bench serve (load generator), bench latency, bench throughput"},
};

/* To stdout when asked for (--help, exit 0), to stderr on a usage error
 * (exit 2), so `inferd --help | less` works and errors do not pollute a
 * pipe. */
static void usage(FILE *f)
{
    fprintf(f, "usage: inferd <command> [options]   (inferd <command> --help)\n\ncommands:\n");
    for (size_t i = 0; i < sizeof k_commands / sizeof k_commands[0]; i++)
        fprintf(f, "  %-11s %s\n", k_commands[i].name, k_commands[i].help);
}

/* NOTE: no setlocale() here, on purpose: strtod in the option parsers and
 * printf in the JSON writers rely on the "C" locale's '.' decimal point. */
int main(int argc, char **argv)
{
    if (argc < 2) {
        usage(stderr);
        return 2;
    }
    if (strcmp(argv[1], "--help") == 0 || strcmp(argv[1], "-h") == 0 || strcmp(argv[1], "help") == 0) {
        usage(stdout);
        return 0;
    }
    for (size_t i = 0; i < sizeof k_commands / sizeof k_commands[0]; i++)
        if (strcmp(argv[1], k_commands[i].name) == 0)
            return k_commands[i].fn(argc - 1, argv + 1);
    fprintf(stderr, "inferd: unknown command '%s'\n", argv[1]);
    usage(stderr);
    return 2;
}
