/* cli/cli_bench_throughput.c: `inferd bench throughput [flags]`, the
 * command face of bench/bench_throughput.c: vLLM's flag names (the rows of
 * bench_throughput_rows: --input-len, --output-len, --num-prompts,
 * --dataset-name, --dataset-path, --output-json, ...) plus every
 * model/engine flag of `inferd generate` (cli_parse_model_flag: --model,
 * --load-format dummy, --device, --max-num-seqs, ...).
 *
 * Order of work, as `bench latency`: parse; measure the device ceilings on
 * a fresh context (before the model takes the memory); load the model with
 * max_model_len, unless given, = the longest random prompt + output; run;
 * print. Two engine defaults differ from `inferd generate`'s, for a
 * throughput run: --max-num-seqs 256 and --max-num-batched-tokens 8192
 * (vLLM's); flags given on the command line still win.
 */
#include <stdio.h>
#include <string.h>

#include "bench/bench_latency.h"
#include "bench/bench_throughput.h"
#include "cli/cli.h"
#include "cli/cli_common.h"
#include "common/util.h"

/* This command's engine defaults (vLLM's), applied before the flags. */
enum { TPUT_MAX_NUM_SEQS = 256, TPUT_MAX_NUM_BATCHED_TOKENS = 8192 };

static void usage(FILE *f)
{
    fprintf(f, "usage: inferd bench throughput --model DIR [flags]\n\n"
               "Offline throughput of the engine (vLLM's benchmarks/throughput): every request of the dataset is\n"
               "submitted at once and batched by the scheduler; each runs to its output length (ignore_eos,\n"
               "temperature 1). Prints requests/s, total and output tokens/s, and the compute roofline of the\n"
               "run: the model FLOPs (prefill + decode, attention included) over the bf16 GEMM rate measured\n"
               "at start, with the %% of it reached.\n\n");
    bench_throughput_usage(f);
    fprintf(f, "\nengine defaults of this command: --max-num-seqs %d --max-num-batched-tokens %d (the table below\n"
               "shows `inferd generate`'s); --max-model-len defaults to the longest random prompt + output.\n\n",
            TPUT_MAX_NUM_SEQS, TPUT_MAX_NUM_BATCHED_TOKENS);
    cli_model_usage(f);
}

/* Flags into o and a; 0 ok, 1 --help printed, 2 usage error printed. */
static int parse(int argc, char **argv, bench_throughput_opts *o, cli_model_args *a)
{
    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "--help") == 0 || strcmp(argv[i], "-h") == 0) {
            usage(stdout);
            return 1;
        }
        int r = cli_parse_model_flag(argc, argv, &i, a);
        if (r == 0) {
            r = bench_throughput_parse_arg(argc, argv, &i, o);
            if (r < 0)
                r = cli_fail("%s", inferd_last_error());
        }
        if (r == 0)
            r = cli_fail("bench throughput: unknown flag '%s' (see --help)", argv[i]);
        if (r < 0)
            return 2;
    }
    if (!a->model_dir)
        return cli_fail("bench throughput: --model DIR is required"), 2;
    if (!bench_throughput_check(o))
        return cli_fail("bench throughput: %s", inferd_last_error()), 2;
    return 0;
}

int cli_bench_throughput(int argc, char **argv)
{
    bench_throughput_opts o;
    bench_throughput_opts_default(&o);
    cli_model_args a;
    cli_model_args_default(&a);
    a.mo.max_num_seqs = TPUT_MAX_NUM_SEQS;
    a.mo.max_num_batched_tokens = TPUT_MAX_NUM_BATCHED_TOKENS;
    engine_opts_from_model(&a.eo, &a.mo);
    int rc = parse(argc, argv, &o, &a);
    if (rc != 0) {
        cli_model_args_free(&a);
        return rc == 1 ? 0 : rc;
    }
    if (a.mo.max_model_len == 0)
        a.mo.max_model_len = a.eo.max_model_len = bench_throughput_max_len(&o);
    if ((rc = cli_follow_node(&a.mo)) >= 0) { /* --node-rank > 0: node 0 benchmarks */
        cli_model_args_free(&a);
        return rc;
    }
    kern_ceilings ceil;
    cli_loaded l;
    if (cli_bench_load(&a, "bench throughput", &ceil, &l) != 0)
        return 1;
    rc = bench_throughput_run(l.m, l.tok, &l.eo, &ceil, &o, stdout, NULL);
    cli_unload(&l);
    cli_model_args_free(&a);
    return rc;
}
