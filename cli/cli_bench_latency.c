/* cli/cli_bench_latency.c: `inferd bench latency [flags]`, the command face
 * of bench/bench_latency.c: vLLM's flag names (--input-len, --output-len,
 * --batch-size, --num-iters-warmup, --num-iters, --output-json), each
 * length and batch flag also taking a list ("1,16,64": one table row per
 * combination), plus every model/engine flag of `inferd generate`
 * (cli_parse_model_flag: --model, --load-format dummy, --device,
 * --enforce-eager, ...).
 *
 * Order of work: parse; measure the device ceilings on a fresh context
 * (before the model takes the memory); load the model with max_num_seqs at
 * least the largest batch and, unless given, max_model_len = the longest
 * input + output; run the rows; print the table.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bench/bench_latency.h"
#include "cli/cli.h"
#include "cli/cli_common.h"
#include "common/util.h"

static void usage(FILE *f)
{
    fprintf(f, "usage: inferd bench latency --model DIR [flags]\n\n"
               "Latency of the engine at fixed batch sizes (vLLM's benchmarks/latency, printed like llama-bench):\n"
               "per row prefill time, decode step time (mean, p50, p99), and the roofline of a decode step\n"
               "against the device's copy bandwidth and GEMM rate measured at start.\n\n"
               "  --batch-size N[,N...]       concurrent requests per row (default 8)\n"
               "  --input-len N[,N...]        prompt tokens (random ids; default 32)\n"
               "  --output-len N[,N...]       generated tokens, greedy, ignore_eos (default 128)\n"
               "  --num-iters-warmup N        untimed iterations per row (default 1)\n"
               "  --num-iters N               timed iterations per row (default 3)\n"
               "  --output-json PATH          write every row as JSON\n"
               "  --seed N                    prompt ids seed (default 1234)\n"
               "  --profile-ops               run every step eagerly with an event before every op and print\n"
               "                              per-op tables of the decode steps and of the steps with a prompt\n"
               "                              chunk (time per step, bytes, GB/s, FLOPs, TFLOP/s, %% of ceilings)\n"
               "  (environment) INFERD_KNOCKOUT=OP[,OP...]  decode steps leave these ops out (norm, qkv, rope,\n"
               "                              attn, o, gateup, silu, down): a graph step's time without an op is\n"
               "                              its share of the step; for timing only, the outputs are wrong\n"
               "                              (norm: the norm kernels of the unfolded layers; the folded ones,\n"
               "                              the default where O and down are 1 MiB or more, have none)\n\n");
    cli_model_usage(f);
}

/* Parse one of this command's own flags at argv[*i]: 1 consumed, 0 not
 * ours, -1 error printed. */
static int parse_own(int argc, char **argv, int *i, bench_latency_opts *o, cli_model_args *a)
{
    const char *arg = argv[*i];
    if (strcmp(arg, "--profile-ops") == 0) {
        o->profile_ops = true;
        return 1;
    }
    static const char *k_valued[] = {"--batch-size", "--input-len", "--output-len", "--num-iters-warmup",
                                     "--num-iters", "--output-json", "--seed"};
    const char *val = NULL, *name = NULL;
    for (size_t k = 0; k < INFERD_ARRAY_LEN(k_valued) && !name; k++) {
        size_t len = strlen(k_valued[k]);
        if (strcmp(arg, k_valued[k]) == 0) {
            if (*i + 1 >= argc)
                return cli_fail("%s needs a value", arg);
            name = k_valued[k];
            val = argv[++*i];
        } else if (strncmp(arg, k_valued[k], len) == 0 && arg[len] == '=') {
            name = k_valued[k];
            val = arg + len + 1;
        }
    }
    if (!name)
        return 0;
    if (strcmp(name, "--output-json") == 0) {
        if (!*val)
            return cli_fail("--output-json needs a path");
        o->output_json = val;
        return 1;
    }
    if (strcmp(name, "--num-iters-warmup") == 0 && strcmp(val, "0") == 0) { /* the one value a list refuses */
        o->num_iters_warmup = 0;
        return 1;
    }
    int list[BENCH_LAT_MAX_LIST], n = 0;
    if (!bench_latency_parse_list(val, list, &n))
        return cli_fail("%s: %s", name, inferd_last_error());
    if (strcmp(name, "--batch-size") == 0 || strcmp(name, "--input-len") == 0 ||
        strcmp(name, "--output-len") == 0) {
        int *dst = name[2] == 'b' ? o->batch : name[2] == 'i' ? o->input : o->output;
        int *dn = name[2] == 'b' ? &o->n_batch : name[2] == 'i' ? &o->n_input : &o->n_output;
        memcpy(dst, list, sizeof(int) * (size_t)n);
        *dn = n;
        return 1;
    }
    if (n != 1)
        return cli_fail("%s takes one number", name);
    if (strcmp(name, "--num-iters-warmup") == 0)
        o->num_iters_warmup = list[0];
    else if (strcmp(name, "--num-iters") == 0)
        o->num_iters = list[0];
    else
        o->seed = (uint64_t)list[0];
    return 1;
}

static int max_of(const int *v, int n)
{
    int m = 0;
    for (int i = 0; i < n; i++)
        m = INFERD_MAX(m, v[i]);
    return m;
}

int cli_bench_latency(int argc, char **argv)
{
    bench_latency_opts o;
    bench_latency_opts_default(&o);
    cli_model_args a;
    cli_model_args_default(&a);
    int rc = 0;
    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "--help") == 0 || strcmp(argv[i], "-h") == 0) {
            usage(stdout);
            cli_model_args_free(&a);
            return 0;
        }
        int r = cli_parse_model_flag(argc, argv, &i, &a);
        if (r == 0)
            r = parse_own(argc, argv, &i, &o, &a);
        if (r == 0)
            r = cli_fail("bench latency: unknown flag '%s' (see --help)", argv[i]);
        if (r < 0) {
            cli_model_args_free(&a);
            return 2;
        }
    }
    if (!a.model_dir) {
        cli_fail("bench latency: --model DIR is required");
        cli_model_args_free(&a);
        return 2;
    }
    /* room for every row: all of a batch in one step, the longest request */
    int max_batch = max_of(o.batch, o.n_batch), max_len = max_of(o.input, o.n_input) + max_of(o.output, o.n_output);
    a.mo.max_num_seqs = a.eo.max_num_seqs = INFERD_MAX(a.mo.max_num_seqs, max_batch);
    a.eo.max_queued_requests = INFERD_MAX(a.eo.max_queued_requests, max_batch); /* a batch is submitted at once */
    if (a.mo.max_model_len == 0)
        a.mo.max_model_len = a.eo.max_model_len = max_len;
    if ((rc = cli_follow_node(&a.mo)) >= 0) { /* --node-rank > 0: node 0 benchmarks */
        cli_model_args_free(&a);
        return rc;
    }
    kern_ceilings ceil;
    cli_loaded l;
    if (cli_bench_load(&a, "bench latency", &ceil, &l) != 0)
        return 1;
    rc = bench_latency_run(l.m, &l.eo, &ceil, &o, stdout);
    cli_unload(&l);
    cli_model_args_free(&a);
    return rc;
}
