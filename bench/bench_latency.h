/* bench/bench_latency.h: `inferd bench latency`, the offline latency
 * benchmark (vLLM's benchmarks/latency, printed like llama-bench).
 *
 * For every (batch size, input length, output length) row it submits
 * `batch` requests of random prompt ids to the real engine (scheduler,
 * batch build, forward, sampling: whatever a server step does), greedy with
 * ignore_eos, and times each request's tokens from the engine thread's
 * notify callback (no consumer wake-up in the measurement; the engine
 * makes those calls once the next step is launched, so every token's
 * clock is shifted alike and a step is still the gap between two tokens).
 * Prefill time is submission to the last request's first token; decode
 * steps are the gaps between request 0's consecutive tokens once every
 * request is decoding, so each one is a full-batch, decode-only engine
 * step.
 *
 * Each row also gets its roofline: bytes and FLOPs of a decode step at the
 * measured steps' mean context (model_step_cost: weights + KV read), the
 * device ceilings measured once at start (kern_measure_ceilings), the time
 * floor max(bytes / bandwidth, FLOPs / GEMM rate), and the % of it reached.
 *
 * The GPU side of the decode steps is measured too (model_prof.h): the mean
 * GPU busy time of a step and the idle gap between consecutive steps (host
 * work the GPU waits for), from events around every decode step, and the
 * engine thread's share of that gap by phase (engine_host_times: the
 * previous step's outputs, the thread loop, scheduling, batch build; wall
 * clock, on every backend). With
 * --profile-ops every step runs eagerly with an event before each op, and
 * per-op tables follow the main one, for the decode steps and for the steps
 * with a prompt chunk: time per step summed over layers, bytes, achieved
 * GB/s and % of the copy bandwidth, FLOPs, TFLOP/s and % of the GEMM rate.
 */
#ifndef INFERD_BENCH_LATENCY_H
#define INFERD_BENCH_LATENCY_H

#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>

#include "common/status.h"
#include "kernels/kernels.h"
#include "model/model.h"
#include "scheduler/engine.h"

#define BENCH_LAT_MAX_LIST 16

typedef struct {
    int batch[BENCH_LAT_MAX_LIST], n_batch;   /* --batch-size 1,16,64 */
    int input[BENCH_LAT_MAX_LIST], n_input;   /* --input-len 128,512 */
    int output[BENCH_LAT_MAX_LIST], n_output; /* --output-len 128 */
    int num_iters_warmup;
    int num_iters;
    uint64_t seed;           /* prompt ids */
    const char *output_json; /* NULL = none */
    bool profile_ops;        /* --profile-ops: eager steps, per-op event times */
} bench_latency_opts;

void bench_latency_opts_default(bench_latency_opts *o);

/* Parse "1,16,64" into out[<= BENCH_LAT_MAX_LIST] positive ints; false with
 * inferd_last_error() set on a malformed list. */
bool bench_latency_parse_list(const char *text, int *out, int *n);

/* Measure the ceilings of a backend on a fresh context (before the model
 * takes the device memory). */
inferd_status bench_latency_ceilings(kern_backend be, int device_id, kern_ceilings *out);

/* The lines every offline bench prints first: device and backend, model
 * shape, the ceilings measured at start, whether decode graphs are on. */
void bench_print_device(FILE *f, model *m, const kern_ceilings *c);

/* Run every row on an engine made from m + eo (started and stopped here),
 * print the table to out, write the JSON when asked. Returns 0 when every
 * row ran, 1 otherwise (the failing row's error printed on stderr). */
int bench_latency_run(model *m, const engine_opts *eo, const kern_ceilings *ceil, const bench_latency_opts *o,
                      FILE *out);

#endif
