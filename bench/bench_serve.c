/* bench/bench_serve.c: bench_serve_opts' option table (vLLM's flag names)
 * and the parser of `inferd bench serve [flags]` built on it (common/opt).
 * The command-line face (mode dispatch, SIGINT, curl start-up) is
 * cli/cli_bench.c; the run itself is bench_run.c.
 *
 * Every flag is one row (name, kind, field offset, range, default, help), so
 * defaults, validation and --help come from the same place. Strings are
 * borrowed from argv (OPT_F_BORROW); booleans are vLLM's store_true flags
 * (OPT_F_NO_NEGATE: "--ignore-eos", no "--no-ignore-eos", no "=value").
 *
 * The bounds are sanity limits, not tuned values: they keep counts within
 * int, timeouts within what curl's millisecond options hold, and reject
 * what can only be a typo (a negative rate, a zero timeout). vLLM's flags
 * that make no sense here (backends, other datasets) are not accepted: an
 * unknown flag is an error, never ignored.
 */
#include <math.h>
#include <stddef.h>
#include <stdio.h>
#include <string.h>

#include "common/opt.h"
#include "common/status.h"
#include "common/util.h"
#include "bench/bench_serve.h"

#define OFF(f) offsetof(bench_serve_opts, f)
#define STR_ROW(nm, f, d, h) {.name = nm, .kind = OPT_STR, .off = OFF(f), .def_str = d, .help = h, .flags = OPT_F_BORROW}
#define BOOL_ROW(nm, f, h) {.name = nm, .kind = OPT_BOOL, .off = OFF(f), .help = h, .flags = OPT_F_NO_NEGATE}

/* --dataset-name values, NULL-terminated (the opt_name convention). */
static const opt_name k_datasets[] = {
    {"random", BENCH_DATA_RANDOM}, {"sharegpt", BENCH_DATA_SHAREGPT}, {"jsonl", BENCH_DATA_JSONL}, {NULL, 0}};

/* --percentile-metrics, --metric-percentiles, --goodput: parsed into the
 * report config (bench/bench_report_cfg.c); a bad value stores nothing. */
static bool parse_pct_metrics(void *base, const opt_row *row, const char *text)
{
    (void)row;
    return bench_parse_percentile_metrics(text, &((bench_serve_opts *)base)->report);
}

static bool parse_metric_pcts(void *base, const opt_row *row, const char *text)
{
    (void)row;
    return bench_parse_metric_percentiles(text, &((bench_serve_opts *)base)->report);
}

static bool parse_goodput(void *base, const opt_row *row, const char *text)
{
    (void)row;
    return bench_parse_goodput(text, &((bench_serve_opts *)base)->report);
}

/* Row order is the --help order. input-len and output-len are vLLM's
 * general lengths: they win over the dataset-specific rows (random-*-len,
 * and sharegpt-output-len / custom-output-len, which share one field, the
 * last one given winning). Rows with OPT_F_NO_DEFAULT use 0 for "unset". */
static const opt_row k_rows[] = {
    STR_ROW("base-url", base_url, NULL, "server URL, e.g. http://127.0.0.1:8000 (overrides host/port)"),
    STR_ROW("host", host, "127.0.0.1", "server host"),
    {.name = "port", .kind = OPT_INT, .off = OFF(port), .min = 1, .max = 65535, .def = 8000, .help = "server port"},
    STR_ROW("endpoint", endpoint, "/v1/completions", "/v1/completions or /v1/chat/completions"),
    STR_ROW("model", model, NULL, "model name (default: first of GET /v1/models)"),
    STR_ROW("tokenizer", tokenizer, NULL, "tokenizer dir (tokenizer.json) for exact prompt lengths"),
    {.name = "dataset-name", .kind = OPT_ENUM, .off = OFF(dataset), .names = k_datasets, .def = BENCH_DATA_RANDOM,
     .help = "prompt source"},
    STR_ROW("dataset-path", dataset_path, NULL, "dataset file (sharegpt JSON, JSONL)"),
    {.name = "num-prompts", .kind = OPT_INT, .off = OFF(num_prompts), .min = 1, .max = 1e8, .def = 1000,
     .help = "number of requests"},
    /* inf is a valid rate (all requests at t = 0), hence max INFINITY */
    {.name = "request-rate", .kind = OPT_DOUBLE, .off = OFF(request_rate), .min = 1e-6, .max = INFINITY,
     .def = INFINITY, .help = "requests/s, Poisson arrivals; inf = all at once"},
    {.name = "burstiness", .kind = OPT_DOUBLE, .off = OFF(burstiness), .min = 1e-3, .max = 1e6, .def = 1,
     .help = "gamma shape of inter-arrival times (1 = Poisson)"},
    {.name = "max-concurrency", .kind = OPT_INT, .off = OFF(max_concurrency), .min = 1, .max = 1e7,
     .help = "most requests in flight (default unlimited)", .flags = OPT_F_NO_DEFAULT},
    {.name = "random-input-len", .kind = OPT_INT, .off = OFF(random_input_len), .min = 1, .max = 1e7, .def = 1024,
     .help = "random: prompt tokens"},
    {.name = "random-output-len", .kind = OPT_INT, .off = OFF(random_output_len), .min = 1, .max = 1e7,
     .def = 128, .help = "random: max_tokens"},
    {.name = "random-range-ratio", .kind = OPT_DOUBLE, .off = OFF(random_range_ratio), .min = 0,
     .max = 0.999999, .def = 0, .help = "random: lengths in [L(1-r), L(1+r)]"},
    {.name = "input-len", .kind = OPT_INT, .off = OFF(input_len), .min = 1, .max = 1e7,
     .help = "prompt tokens of the random dataset (overrides --random-input-len)", .flags = OPT_F_NO_DEFAULT},
    {.name = "output-len", .kind = OPT_INT, .off = OFF(output_len), .min = 1, .max = 1e7,
     .help = "max_tokens: random's (overrides --random-output-len), sharegpt/jsonl's fixed one",
     .flags = OPT_F_NO_DEFAULT},
    {.name = "sharegpt-output-len", .kind = OPT_INT, .off = OFF(fixed_output_len), .min = 1, .max = 1e7,
     .help = "sharegpt/jsonl: fixed max_tokens (default: the data's)", .flags = OPT_F_NO_DEFAULT},
    {.name = "custom-output-len", .kind = OPT_INT, .off = OFF(fixed_output_len), .min = 1, .max = 1e7,
     .help = "alias of --sharegpt-output-len", .flags = OPT_F_NO_DEFAULT},
    BOOL_ROW("ignore-eos", ignore_eos, "send ignore_eos: true"),
    {.name = "temperature", .kind = OPT_DOUBLE, .off = OFF(temperature), .min = 0, .max = 100, .def = 0,
     .help = "sampling temperature"},
    /* 9.2e18: just below 2^63, the largest bound a double row states safely */
    {.name = "seed", .kind = OPT_INT64, .off = OFF(seed), .min = 0, .max = 9.2e18, .def = 0,
     .help = "seed of prompts and arrival times"},
    {.name = "num-warmups", .kind = OPT_INT, .off = OFF(num_warmups), .min = 0, .max = 1e6, .def = 0,
     .help = "warm-up requests before the run (not counted)"},
    {.name = "percentile-metrics", .kind = OPT_CUSTOM, .parse = parse_pct_metrics, .def_str = "ttft,tpot,itl,e2el",
     .meta = "LIST", .help = "metrics whose percentiles are printed and saved (vLLM's default: ttft,tpot,itl)"},
    {.name = "metric-percentiles", .kind = OPT_CUSTOM, .parse = parse_metric_pcts, .def_str = "90,95,99",
     .meta = "LIST", .help = "percentiles of those metrics, in [0, 100] (vLLM's default: 99)"},
    {.name = "goodput", .kind = OPT_CUSTOM, .parse = parse_goodput, .meta = "KEY:MS...",
     .help = "SLOs of a good request, e.g. ttft:200 tpot:50 (ttft, tpot, e2el in ms; default none)",
     .flags = OPT_F_NO_DEFAULT},
    BOOL_ROW("save-result", save_result, "write the result JSON"),
    STR_ROW("result-filename", result_filename, NULL, "result JSON path (implies --save-result; inside --result-dir "
                                                      "when both are given)"),
    STR_ROW("result-dir", result_dir, NULL, "directory of the result file (created when missing)"),
    STR_ROW("api-key", api_key, NULL, "bearer token (default $OPENAI_API_KEY)"),
    /* 6 h default: vLLM's client-side (aiohttp) request timeout */
    {.name = "timeout", .kind = OPT_DOUBLE, .off = OFF(timeout_s), .min = 1e-3, .max = 1e7, .def = 21600,
     .help = "per-request timeout in seconds"},
    BOOL_ROW("disable-stream", disable_stream, "non-streaming requests (TTFT = E2E)"),
    BOOL_ROW("disable-tqdm", disable_progress, "no progress bar"),
};
#undef OFF
#undef STR_ROW
#undef BOOL_ROW

/* The table, for --help and the option tests. */
const opt_row *bench_serve_rows(size_t *n)
{
    *n = INFERD_ARRAY_LEN(k_rows);
    return k_rows;
}

/* Every field from its row; fields without a row stay 0/false/NULL
 * (quiet: only tests set it). The report config starts at its defaults
 * (no goodput SLO: the goodput row has none) before the rows apply theirs. */
void bench_serve_opts_default(bench_serve_opts *o)
{
    memset(o, 0, sizeof *o);
    bench_report_cfg_default(&o->report);
    opt_defaults(k_rows, INFERD_ARRAY_LEN(k_rows), o);
}

void bench_serve_usage(FILE *f)
{
    fprintf(f, "usage: inferd bench serve [flags]\n\n"
               "Load generator for any OpenAI-compatible server (flags follow `vllm bench serve`).\n"
               "Streams every request, measures TTFT, TPOT, ITL and E2E latency, prints a table\n"
               "and optionally saves vLLM-style result JSON. Exit status: 0 when every request\n"
               "completed, 1 when any failed (or none completed, or interrupted), 2 bad flags.\n\n");
    opt_usage(f, k_rows, INFERD_ARRAY_LEN(k_rows));
}

/* The checks that involve two flags, or a value a row cannot express
 * (the endpoint's leading '/': it is appended to the base URL). Messages
 * go to stderr; false means exit code 2. */
/* The checks that involve two flags. */
static bool check_combined(const bench_serve_opts *o)
{
    if (o->dataset != BENCH_DATA_RANDOM && !o->dataset_path) {
        fprintf(stderr, "inferd bench serve: --dataset-name %s needs --dataset-path\n",
                o->dataset == BENCH_DATA_SHAREGPT ? "sharegpt" : "jsonl");
        return false;
    }
        /* the endpoint is appended verbatim to the base URL */
    if (o->endpoint[0] != '/') {
        fprintf(stderr, "inferd bench serve: --endpoint must start with '/'\n");
        return false;
    }
    return true;
}

/* Flags are applied left to right onto the caller's defaults (last wins);
 * --help prints and returns at once (flags after it are not looked at; a
 * bad flag before it is still an error). Positional arguments are
 * refused. */
int bench_serve_parse(int argc, char **argv, bench_serve_opts *o, bool *help)
{
    *help = false;
    /* one group: the load generator has no model/engine/glue rows */
    opt_group g = {k_rows, INFERD_ARRAY_LEN(k_rows), o};
    for (int i = 1; i < argc; i++) {
        const char *arg = argv[i];
        if (strcmp(arg, "--help") == 0 || strcmp(arg, "-h") == 0) {
            bench_serve_usage(stdout);
            *help = true;
            return 0;
        }
        const opt_row *row = NULL;
        int r = opt_parse_arg(&g, 1, argc, argv, &i, &row);
        if (r == 0) {
            fprintf(stderr, "inferd bench serve: unknown argument '%s' (see --help)\n", arg);
            return 2;
        }
        if (r < 0) {
            fprintf(stderr, "inferd bench serve: %s\n", inferd_last_error());
            return 2;
        }
        /* vLLM's --goodput is nargs="+": the words after it that are not
         * flags are more KEY:VALUE pairs (positionals are refused anyway) */
        while (row && row->parse == parse_goodput && i + 1 < argc && argv[i + 1][0] != '-') {
            if (!bench_parse_goodput(argv[++i], &o->report)) {
                fprintf(stderr, "inferd bench serve: --goodput: %s\n", inferd_last_error());
                return 2;
            }
        }
    }
    return check_combined(o) ? 0 : 2;
}
