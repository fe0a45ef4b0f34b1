/* bench/bench_serve.h: `inferd bench serve`, a load generator for any
 * OpenAI-compatible server, as a library: options (vLLM's flag names), the
 * run, and its report. cli/cli_bench.c is the command-line face;
 * tests drive bench_serve_run() directly.
 */
#ifndef INFERD_BENCH_BENCH_SERVE_H
#define INFERD_BENCH_BENCH_SERVE_H

#include <signal.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>

#include "bench/bench_client.h"
#include "bench/bench_dataset.h"
#include "bench/bench_stats.h"
#include "common/opt.h"

typedef struct {
    const char *base_url;     /* NULL: http://host:port */
    const char *host;
    int port;
    const char *endpoint;     /* /v1/completions or /v1/chat/completions */
    const char *model;        /* NULL: first id of GET /v1/models */
    const char *tokenizer;    /* dir with tokenizer.json; NULL: --model if a dir */
    bench_data_kind dataset;
    const char *dataset_path;
    int num_prompts;
    double request_rate;      /* INFINITY: all at once */
    double burstiness;
    int max_concurrency;      /* 0: unlimited */
    int random_input_len, random_output_len;
    double random_range_ratio;
    int input_len;            /* vLLM's general --input-len (0: unset): random's input length */
    int output_len;           /* vLLM's general --output-len (0: unset): random's output length,
                               * and the fixed one of sharegpt/jsonl */
    int fixed_output_len;     /* --sharegpt-output-len: sharegpt/jsonl only (0: the data's) */
    bool ignore_eos;
    double temperature;
    uint64_t seed;
    int num_warmups;
    bool save_result;
    const char *result_filename; /* implies save_result */
    const char *result_dir;
    const char *api_key;      /* NULL: $OPENAI_API_KEY when set */
    double timeout_s;         /* per request */
    bool disable_stream;
    bool disable_progress;    /* vLLM's --disable-tqdm */
    bool quiet;               /* no table or banner (tests) */
    bench_report_cfg report;  /* --percentile-metrics, --metric-percentiles, --goodput */
} bench_serve_opts;

/* Defaults: 127.0.0.1:8000, /v1/completions, random 1024 in / 128 out,
 * 1000 prompts, rate inf, burstiness 1, timeout 6 h (vLLM's); the report
 * shows every metric at P90/P95/P99, no goodput SLO. */
void bench_serve_opts_default(bench_serve_opts *o);

/* The option table of bench_serve_opts (common/opt rows, vLLM's flag
 * names); *n = count. Defaults, flags and --help all come from it. */
const opt_row *bench_serve_rows(size_t *n);

/* Parse `serve [flags]` (argv[0] is "serve") through the table. Flags take
 * "--f v" or "--f=v"; --goodput also takes vLLM's several-word form
 * (`--goodput ttft:200 tpot:50`). Strings point into argv. Returns 0 ok, 2
 * usage error (message printed on stderr); *help is set when --help was
 * given (help printed on stdout). */
int bench_serve_parse(int argc, char **argv, bench_serve_opts *o, bool *help);
/* The --help text: description and one line per row with range and default. */
void bench_serve_usage(FILE *f);

typedef struct {
    bench_summary summary;
    bench_result *results; /* [n] */
    int *sent_len;         /* [n] prompt length each request was built with */
    int n;
    char *model_id;        /* model sent, NULL when unknown */
    char *result_path;     /* JSON written, or NULL */
    bool interrupted;
} bench_serve_report;

/* Run the benchmark: resolve model and tokenizer, build prompts, warm up,
 * drive the requests, print the table on stdout (progress bar on stderr
 * when it is a TTY) and save the JSON when asked (--result-dir is created
 * when missing). `stop` (may be NULL) is polled: nonzero aborts in-flight
 * requests and reports partial results. Returns the process exit code: 0
 * when every request completed and the result (if asked for) was written,
 * 1 when any failed or was interrupted or none completed or setup failed or
 * the result could not be written, 2 for invalid options. `rep` (may be
 * NULL) receives the results; free with bench_serve_report_free. */
int bench_serve_run(const bench_serve_opts *o, volatile sig_atomic_t *stop, bench_serve_report *rep);
void bench_serve_report_free(bench_serve_report *rep);

#endif
