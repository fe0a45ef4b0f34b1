/* bench/bench_throughput.h: `inferd bench throughput`, the offline
 * throughput benchmark (vLLM's benchmarks/throughput: same flags, same
 * printed line and JSON keys, plus a compute roofline).
 *
 * Every request of a dataset (random ids of fixed lengths, or ShareGPT
 * conversations; bench/bench_dataset.c builds both) is submitted to the real
 * engine at once, and the scheduler batches them as it would a server's
 * (vLLM's LLM.generate). As in vLLM, every request runs to its output length
 * (ignore_eos) and samples at temperature 1 (seeded per request, so a run
 * is reproducible). The clock runs from the first submission to the last
 * request's finish; prompts are built and tokenized before it starts.
 *
 * The roofline is compute only: the model FLOPs of the run (each request's
 * prefill of its uncached prompt tokens and its decode steps, attention
 * included, counted by model_step_cost) over the bf16 GEMM rate measured in
 * the same process at start (kern_measure_ceilings); % roofline = that time
 * floor over the measured time. Work the engine redoes after a preemption
 * is not counted (it is not model work), so preemptions lower the %.
 *
 * Where the time went: the decode-only steps carry events around them
 * (model_prof.h, MODEL_PROF_GAPS; graphs stay on), so the report splits the
 * run into their GPU busy time and the rest (steps with prompt chunks, and
 * the GPU's idle gaps).
 */
#ifndef INFERD_BENCH_THROUGHPUT_H
#define INFERD_BENCH_THROUGHPUT_H

#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>

#include "bench/bench_dataset.h"
#include "common/opt.h"
#include "kernels/kernels.h"
#include "model/model.h"
#include "model/model_prof.h"
#include "scheduler/engine.h"
#include "tokenizer/tokenizer.h"

/* Defaults of the input and output lengths of the random dataset (vLLM's
 * RandomDataset), used when the flags are not given. */
#define BENCH_TPUT_DEFAULT_INPUT_LEN 1024
#define BENCH_TPUT_DEFAULT_OUTPUT_LEN 128

typedef struct {
    bench_data_kind dataset;  /* random or sharegpt */
    const char *dataset_path; /* sharegpt JSON */
    int input_len;            /* random prompt tokens; 0: unset */
    int output_len;           /* random: generated tokens; sharegpt: fixed length; 0: unset */
    int num_prompts;
    double random_range_ratio;
    uint64_t seed;            /* prompts, and each request's sampling seed (seed + index) */
    const char *output_json;  /* NULL: none */
    bool disable_detokenize;  /* the engine gets no tokenizer: no incremental detokenization */
} bench_throughput_opts;

/* Every row's default (1000 random prompts, lengths unset). */
void bench_throughput_opts_default(bench_throughput_opts *o);
/* The option table (common/opt rows, vLLM's flag names); *n = count. */
const opt_row *bench_throughput_rows(size_t *n);
/* Try argv[*i] as one of the rows: 1 consumed (advances *i past a separate
 * value), 0 not ours, -1 bad value (inferd_last_error() names the flag).
 * Strings point into argv. */
int bench_throughput_parse_arg(int argc, char **argv, int *i, bench_throughput_opts *o);
/* The checks that involve two flags (sharegpt needs --dataset-path and
 * takes no --input-len; random takes no --dataset-path). false with
 * inferd_last_error() set. */
bool bench_throughput_check(const bench_throughput_opts *o);
/* --help lines of the rows. */
void bench_throughput_usage(FILE *f);
/* Longest prompt + output a random run can draw (for max_model_len); 0 for
 * sharegpt (the data decides, the model's limit applies). */
int bench_throughput_max_len(const bench_throughput_opts *o);

/* Model FLOPs of one request: the prefill of its prompt tokens past the
 * cached prefix (at least the last one, which the engine always runs) and
 * its output - 1 decode steps at contexts prompt + 1 .. prompt + output - 1
 * (the first output token comes from the prefill's logits). */
void bench_throughput_request_flops(const model *m, int prompt, int cached, int output, double *prefill,
                                    double *decode);

typedef struct {
    int num_requests, failed;          /* failed: not finished by length with every token */
    int64_t prompt_tokens, output_tokens, cached_tokens;
    double elapsed_s;
    double prefill_flops, decode_flops;
    double floor_s, achieved_tflops, pct_roofline;
    engine_stats stats;                /* the engine's counters after the run */
    model_prof_stats prof;             /* GPU busy time of the decode-only steps (MODEL_PROF_GAPS) */
} bench_throughput_result;

/* Build the requests, run them on an engine made from m + eo (the queue is
 * raised to hold every request; started and stopped here), print the
 * report to out and write the JSON when asked. tok may be NULL (random ids
 * then come from bench_dataset's fallback range; sharegpt needs it).
 * Returns 0 when every request ran to its length and the JSON (if asked
 * for) was written, 1 otherwise (the error printed on stderr). res (may be
 * NULL) receives the numbers. */
int bench_throughput_run(model *m, const tokenizer *tok, const engine_opts *eo, const kern_ceilings *ceil,
                         const bench_throughput_opts *o, FILE *out, bench_throughput_result *res);

#endif
