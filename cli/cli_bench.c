/* cli/cli_bench.c: `inferd bench MODE [flags]`, the command-line face of
 * bench/. Three modes: `latency` and `throughput` are handed whole to
 * cli_bench_latency and cli_bench_throughput (cli/cli_bench_latency.c,
 * cli/cli_bench_throughput.c); for `serve`, described below, the flags are
 * read by bench_serve_parse (bench/bench_serve.c, the option table next to
 * bench_serve_opts; kept in bench/ so the load generator's tests parse
 * flags without the CLI), then this file installs the process-wide state
 * a run needs (libcurl, SIGINT, SIGPIPE) and calls bench_serve_run.
 *
 * SIGINT: the first Ctrl-C sets the stop flag the run polls (in-flight
 * requests are aborted and partial results printed); SA_RESETHAND makes a
 * second one terminate the process. Handlers are restored afterwards.
 */
#include <signal.h>
#include <stdio.h>
#include <string.h>

#include <curl/curl.h>

#include "bench/bench_serve.h"
#include "cli/cli.h"

/* The only state a signal handler may write portably; bench_serve_run polls
 * it through a pointer, so bench/ itself installs no handler and stays
 * usable from tests. */
static volatile sig_atomic_t g_stop;

static void on_sigint(int sig)
{
    (void)sig;
    g_stop = 1; /* SA_RESETHAND: a second Ctrl-C terminates */
}

/* Run with SIGINT -> g_stop and SIGPIPE ignored; restores both.
 * SIGPIPE is ignored because a server that closes a connection mid-write
 * must turn into a failed request (EPIPE from send), not kill the load
 * generator. */
static int run_with_signals(const bench_serve_opts *o)
{
    struct sigaction sa, old_int, old_pipe, ign;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_sigint;
    sa.sa_flags = SA_RESETHAND;
    sigemptyset(&sa.sa_mask);
    sigaction(SIGINT, &sa, &old_int);
    memset(&ign, 0, sizeof ign);
    ign.sa_handler = SIG_IGN;
    sigaction(SIGPIPE, &ign, &old_pipe);
    g_stop = 0;
    int rc = bench_serve_run(o, &g_stop, NULL);
    sigaction(SIGINT, &old_int, NULL);
    sigaction(SIGPIPE, &old_pipe, NULL);
    return rc;
}

/* Exit codes as every command (cli/cli.h); bench_serve_parse prints its own
 * usage errors. curl_global_init is called here, once per process, because
 * libcurl requires it before any other thread exists. */
int cli_bench(int argc, char **argv)
{
    if (argc < 2 || strcmp(argv[1], "--help") == 0 || strcmp(argv[1], "-h") == 0) {
        FILE *f = argc < 2 ? stderr : stdout;
        fprintf(f, "usage: inferd bench serve|latency|throughput [flags]   (inferd bench MODE --help)\n\n"
                   "  serve        load generator for OpenAI-compatible servers\n"
                   "  latency      prefill and decode-step latency of the engine at fixed batch sizes\n"
                   "  throughput   offline throughput of the engine and its compute roofline\n");
        return argc < 2 ? 2 : 0;
    }
    if (strcmp(argv[1], "latency") == 0)
        return cli_bench_latency(argc - 1, argv + 1);
    if (strcmp(argv[1], "throughput") == 0)
        return cli_bench_throughput(argc - 1, argv + 1);
    if (strcmp(argv[1], "serve") != 0) {
        fprintf(stderr, "inferd bench: unknown mode '%s' (serve, latency or throughput)\n", argv[1]);
        return 2;
    }
    bench_serve_opts o;
    bench_serve_opts_default(&o);
    bool help = false;
    int rc = bench_serve_parse(argc - 1, argv + 1, &o, &help);
    if (rc != 0 || help)
        return rc;
    if (curl_global_init(CURL_GLOBAL_DEFAULT) != CURLE_OK) {
        fprintf(stderr, "inferd bench serve: curl_global_init failed\n");
        return 1;
    }
    rc = run_with_signals(&o);
    curl_global_cleanup();
    return rc;
}
