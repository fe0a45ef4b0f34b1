/* bench/bench_serve.c: the `inferd bench` command line: `inferd bench serve
 * [flags]` parses vLLM-named flags into bench_serve_opts, installs the SIGINT
 * handler (the first Ctrl-C stops the run and prints partial results, a
 * second one kills the process) and runs bench_serve_run() (bench_run.c).
 *
 * The flag parser is a table of (name, type, field offset, bounds), so every
 * flag is validated the same way and the help text cannot drift from it.
 */
#include <math.h>
#include <signal.h>
#include <stddef.h>
#include <stdio.h>
#include <string.h>

#include <curl/curl.h>

#include "common/util.h"
#include "bench/bench_serve.h"
#include "cli/cli.h"

typedef enum { FT_STR, FT_INT, FT_DBL, FT_RATE, FT_BOOL, FT_DATASET, FT_U64 } flag_type;

typedef struct {
    const char *name;
    flag_type type;
    size_t off;
    double lo, hi; /* numeric bounds */
    const char *help;
} flag_def;

#define OFF(f) offsetof(bench_serve_opts, f)
static const flag_def k_flags[] = {
    {"--base-url", FT_STR, OFF(base_url), 0, 0, "server URL, e.g. http://127.0.0.1:8000 (overrides host/port)"},
    {"--host", FT_STR, OFF(host), 0, 0, "server host (default 127.0.0.1)"},
    {"--port", FT_INT, OFF(port), 1, 65535, "server port (default 8000)"},
    {"--endpoint", FT_STR, OFF(endpoint), 0, 0, "/v1/completions (default) or /v1/chat/completions"},
    {"--model", FT_STR, OFF(model), 0, 0, "model name (default: first of GET /v1/models)"},
    {"--tokenizer", FT_STR, OFF(tokenizer), 0, 0, "tokenizer dir (tokenizer.json) for exact prompt lengths"},
    {"--dataset-name", FT_DATASET, OFF(dataset), 0, 0, "random (default) | sharegpt | jsonl"},
    {"--dataset-path", FT_STR, OFF(dataset_path), 0, 0, "dataset file (sharegpt JSON, JSONL)"},
    {"--num-prompts", FT_INT, OFF(num_prompts), 1, 1e8, "number of requests (default 1000)"},
    {"--request-rate", FT_RATE, OFF(request_rate), 0, 0, "requests/s, Poisson arrivals; inf = all at once (default)"},
    {"--burstiness", FT_DBL, OFF(burstiness), 1e-3, 1e6, "gamma shape of inter-arrival times (1 = Poisson)"},
    {"--max-concurrency", FT_INT, OFF(max_concurrency), 1, 1e7, "most requests in flight (default unlimited)"},
    {"--random-input-len", FT_INT, OFF(random_input_len), 1, 1e7, "random: prompt tokens (default 1024)"},
    {"--random-output-len", FT_INT, OFF(random_output_len), 1, 1e7, "random: max_tokens (default 128)"},
    {"--random-range-ratio", FT_DBL, OFF(random_range_ratio), 0, 0.999999, "random: lengths in [L(1-r), L(1+r)]"},
    {"--output-len", FT_INT, OFF(output_len), 1, 1e7, "sharegpt/jsonl: fixed max_tokens"},
    {"--sharegpt-output-len", FT_INT, OFF(output_len), 1, 1e7, "alias of --output-len"},
    {"--custom-output-len", FT_INT, OFF(output_len), 1, 1e7, "alias of --output-len"},
    {"--ignore-eos", FT_BOOL, OFF(ignore_eos), 0, 0, "send ignore_eos: true"},
    {"--temperature", FT_DBL, OFF(temperature), 0, 100, "sampling temperature (default 0)"},
    {"--seed", FT_U64, OFF(seed), 0, 0, "seed of prompts and arrival times (default 0)"},
    {"--num-warmups", FT_INT, OFF(num_warmups), 0, 1e6, "warm-up requests before the run (not counted)"},
    {"--save-result", FT_BOOL, OFF(save_result), 0, 0, "write the result JSON"},
    {"--result-filename", FT_STR, OFF(result_filename), 0, 0, "result JSON path (implies --save-result)"},
    {"--result-dir", FT_STR, OFF(result_dir), 0, 0, "directory of the default result file name"},
    {"--api-key", FT_STR, OFF(api_key), 0, 0, "bearer token (default $OPENAI_API_KEY)"},
    {"--timeout", FT_DBL, OFF(timeout_s), 1e-3, 1e7, "per-request timeout in seconds (default 21600)"},
    {"--disable-stream", FT_BOOL, OFF(disable_stream), 0, 0, "non-streaming requests (TTFT = E2E)"},
    {"--disable-tqdm", FT_BOOL, OFF(disable_progress), 0, 0, "no progress bar"},
};
#undef OFF

void bench_serve_opts_default(bench_serve_opts *o)
{
    memset(o, 0, sizeof *o);
    o->host = "127.0.0.1";
    o->port = 8000;
    o->endpoint = "/v1/completions";
    o->dataset = BENCH_DATA_RANDOM;
    o->num_prompts = 1000;
    o->request_rate = INFINITY;
    o->burstiness = 1.0;
    o->random_input_len = 1024;
    o->random_output_len = 128;
    o->temperature = 0.0;
    o->timeout_s = 21600.0;
}

static void print_help(FILE *f)
{
    fprintf(f, "usage: inferd bench serve [flags]\n\n"
               "Load generator for any OpenAI-compatible server (flags follow `vllm bench serve`).\n"
               "Streams every request, measures TTFT, TPOT, ITL and E2E latency, prints a table\n"
               "and optionally saves vLLM-style result JSON. Exit status: 0 when every request\n"
               "completed, 1 when any failed (or none completed, or interrupted), 2 bad flags.\n\n");
    for (size_t i = 0; i < INFERD_ARRAY_LEN(k_flags); i++) {
        const char *arg = k_flags[i].type == FT_BOOL ? "" : " V";
        char left[64];
        snprintf(left, sizeof left, "%s%s", k_flags[i].name, arg);
        fprintf(f, "  %-26s %s\n", left, k_flags[i].help);
    }
}

static bool set_flag(const flag_def *fd, const char *v, bench_serve_opts *o)
{
    char *base = (char *)o + fd->off;
    long long iv;
    double dv;
    switch (fd->type) {
    case FT_STR:
        *(const char **)base = v;
        return v[0] != '\0';
    case FT_INT:
        if (!util_parse_int(v, (long long)fd->lo, (long long)fd->hi, &iv))
            return false;
        *(int *)base = (int)iv;
        return true;
    case FT_U64:
        if (!util_parse_int(v, 0, INT64_MAX, &iv))
            return false;
        *(uint64_t *)base = (uint64_t)iv;
        return true;
    case FT_DBL:
        if (!util_parse_double(v, &dv) || dv < fd->lo || dv > fd->hi)
            return false;
        *(double *)base = dv;
        return true;
    case FT_RATE:
        if (strcmp(v, "inf") == 0 || strcmp(v, "Infinity") == 0) {
            *(double *)base = INFINITY;
            return true;
        }
        if (!util_parse_double(v, &dv) || !(dv > 0))
            return false;
        *(double *)base = dv;
        return true;
    case FT_DATASET:
        return bench_data_kind_parse(v, (bench_data_kind *)base);
    case FT_BOOL:
        *(bool *)base = true;
        return true;
    }
    return false;
}

static const flag_def *find_flag(const char *arg, size_t name_len)
{
    for (size_t i = 0; i < INFERD_ARRAY_LEN(k_flags); i++)
        if (strlen(k_flags[i].name) == name_len && strncmp(arg, k_flags[i].name, name_len) == 0)
            return &k_flags[i];
    return NULL;
}

int bench_serve_parse(int argc, char **argv, bench_serve_opts *o, bool *help)
{
    *help = false;
    for (int i = 1; i < argc; i++) {
        const char *arg = argv[i];
        if (strcmp(arg, "--help") == 0 || strcmp(arg, "-h") == 0) {
            print_help(stdout);
            *help = true;
            return 0;
        }
        const char *eq = strchr(arg, '=');
        size_t name_len = eq ? (size_t)(eq - arg) : strlen(arg);
        const flag_def *fd = strncmp(arg, "--", 2) == 0 ? find_flag(arg, name_len) : NULL;
        if (!fd) {
            fprintf(stderr, "inferd bench serve: unknown argument '%s' (see --help)\n", arg);
            return 2;
        }
        const char *v = NULL;
        if (fd->type == FT_BOOL) {
            if (eq) {
                fprintf(stderr, "inferd bench serve: %s takes no value\n", fd->name);
                return 2;
            }
            v = "";
        } else if (eq) {
            v = eq + 1;
        } else if (i + 1 < argc) {
            v = argv[++i];
        } else {
            fprintf(stderr, "inferd bench serve: %s needs a value\n", fd->name);
            return 2;
        }
        if (!set_flag(fd, v, o)) {
            fprintf(stderr, "inferd bench serve: invalid value '%s' for %s\n", v, fd->name);
            return 2;
        }
    }
    if (o->dataset != BENCH_DATA_RANDOM && !o->dataset_path) {
        fprintf(stderr, "inferd bench serve: --dataset-name %s needs --dataset-path\n",
                o->dataset == BENCH_DATA_SHAREGPT ? "sharegpt" : "jsonl");
        return 2;
    }
    if (o->endpoint[0] != '/') {
        fprintf(stderr, "inferd bench serve: --endpoint must start with '/'\n");
        return 2;
    }
    return 0;
}

static volatile sig_atomic_t g_stop;

static void on_sigint(int sig)
{
    (void)sig;
    g_stop = 1; /* SA_RESETHAND: a second Ctrl-C terminates */
}

int cli_bench(int argc, char **argv)
{
    if (argc < 2 || strcmp(argv[1], "--help") == 0 || strcmp(argv[1], "-h") == 0) {
        FILE *f = argc < 2 ? stderr : stdout;
        fprintf(f, "usage: inferd bench serve [flags]   (inferd bench serve --help)\n\n"
                   "  serve   load generator for OpenAI-compatible servers\n");
        return argc < 2 ? 2 : 0;
    }
    if (strcmp(argv[1], "serve") != 0) {
        fprintf(stderr, "inferd bench: unknown mode '%s' (only 'serve' is available)\n", argv[1]);
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
    struct sigaction sa, old_int, old_pipe;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_sigint;
    sa.sa_flags = SA_RESETHAND;
    sigemptyset(&sa.sa_mask);
    sigaction(SIGINT, &sa, &old_int);
    struct sigaction ign;
    memset(&ign, 0, sizeof ign);
    ign.sa_handler = SIG_IGN;
    sigaction(SIGPIPE, &ign, &old_pipe);
    g_stop = 0;
    rc = bench_serve_run(&o, &g_stop, NULL);
    sigaction(SIGINT, &old_int, NULL);
    sigaction(SIGPIPE, &old_pipe, NULL);
    curl_global_cleanup();
    return rc;
}
