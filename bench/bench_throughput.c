/* bench/bench_throughput.c: see bench_throughput.h.
 *
 * Three parts: the option table (vLLM's flag names, common/opt rows, so
 * --help and the bounds come from one place); the run (prompts from
 * bench_dataset, tokenized before the clock, all submitted at once, then
 * every stream drained in order: the engine never waits on this thread,
 * and output that piles up in a stream until it is read is a few ids);
 * and the report (vLLM's "Throughput:" line, a one-row roofline table, the
 * engine's counters, the JSON).
 *
 * Trade-off: the FLOPs are counted per request from its final counts
 * rather than per engine step, so they are the model's work whatever the
 * scheduler did (chunking, batching); what the engine did on top of it
 * (recomputation after preemption) shows as a lower % of the roofline, and
 * the preemption count is printed beside it.
 */
#include "bench/bench_throughput.h"

#include <cjson/cJSON.h>
#include <math.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>

#include "bench/bench_latency.h"
#include "common/alloc.h"
#include "common/status.h"
#include "common/util.h"

/* ---- options ----------------------------------------------------------------- */

#define OFF(f) offsetof(bench_throughput_opts, f)

/* vLLM's throughput benchmark takes these two datasets; jsonl is bench
 * serve's only. */
static const opt_name k_datasets[] = {{"random", BENCH_DATA_RANDOM}, {"sharegpt", BENCH_DATA_SHAREGPT}, {NULL, 0}};

/* Row order is the --help order. The bounds are sanity limits (counts
 * within int, what the dataset module accepts), not tuned values; the
 * lengths have no row default because "unset" differs by dataset. */
static const opt_row k_rows[] = {
    {.name = "input-len", .kind = OPT_INT, .off = OFF(input_len), .min = 1, .max = 1e7,
     .help = "random: prompt tokens (default 1024)", .flags = OPT_F_NO_DEFAULT},
    {.name = "output-len", .kind = OPT_INT, .off = OFF(output_len), .min = 1, .max = 1e7,
     .help = "generated tokens per request (random: default 128; sharegpt: default the data's)",
     .flags = OPT_F_NO_DEFAULT},
    {.name = "num-prompts", .kind = OPT_INT, .off = OFF(num_prompts), .min = 1, .max = 1e7, .def = 1000,
     .help = "requests, all submitted at once"},
    {.name = "dataset-name", .kind = OPT_ENUM, .off = OFF(dataset), .names = k_datasets, .def = BENCH_DATA_RANDOM,
     .help = "prompt source"},
    {.name = "dataset-path", .kind = OPT_STR, .off = OFF(dataset_path), .flags = OPT_F_BORROW,
     .help = "sharegpt: the conversations JSON"},
    {.name = "random-range-ratio", .kind = OPT_DOUBLE, .off = OFF(random_range_ratio), .min = 0, .max = 0.999999,
     .def = 0, .help = "random: lengths uniform in [L(1-r), L(1+r)]"},
    /* 9.2e18: just below 2^63, the largest bound a double row states safely */
    {.name = "seed", .kind = OPT_INT64, .off = OFF(seed), .min = 0, .max = 9.2e18, .def = 0,
     .help = "seed of the prompts and of the sampling"},
    {.name = "output-json", .kind = OPT_STR, .off = OFF(output_json), .flags = OPT_F_BORROW, .meta = "PATH",
     .help = "write the results as JSON"},
    {.name = "disable-detokenize", .kind = OPT_BOOL, .off = OFF(disable_detokenize),
     .flags = OPT_F_NO_NEGATE, .help = "no incremental detokenization in the engine (vLLM's flag)"},
};
#undef OFF

void bench_throughput_opts_default(bench_throughput_opts *o)
{
    memset(o, 0, sizeof *o);
    opt_defaults(k_rows, INFERD_ARRAY_LEN(k_rows), o);
}

const opt_row *bench_throughput_rows(size_t *n)
{
    *n = INFERD_ARRAY_LEN(k_rows);
    return k_rows;
}

int bench_throughput_parse_arg(int argc, char **argv, int *i, bench_throughput_opts *o)
{
    opt_group g = {k_rows, INFERD_ARRAY_LEN(k_rows), o};
    return opt_parse_arg(&g, 1, argc, argv, i, NULL);
}

bool bench_throughput_check(const bench_throughput_opts *o)
{
    if (o->dataset == BENCH_DATA_SHAREGPT && !o->dataset_path)
        return inferd_set_error(INFERD_ERR_INVALID_ARG, "--dataset-name sharegpt needs --dataset-path"), false;
    if (o->dataset == BENCH_DATA_SHAREGPT && o->input_len > 0)
        return inferd_set_error(INFERD_ERR_INVALID_ARG,
                                "--input-len is for the random dataset (sharegpt prompts keep their length)"),
               false;
    if (o->dataset == BENCH_DATA_RANDOM && o->dataset_path)
        return inferd_set_error(INFERD_ERR_INVALID_ARG, "--dataset-path is for sharegpt (random needs no file)"),
               false;
    return true;
}

void bench_throughput_usage(FILE *f)
{
    opt_usage(f, k_rows, INFERD_ARRAY_LEN(k_rows));
}

static int random_input_len(const bench_throughput_opts *o)
{
    return o->input_len > 0 ? o->input_len : BENCH_TPUT_DEFAULT_INPUT_LEN;
}

static int random_output_len(const bench_throughput_opts *o)
{
    return o->output_len > 0 ? o->output_len : BENCH_TPUT_DEFAULT_OUTPUT_LEN;
}

/* The upper end of bench_dataset's length range, ceil(L (1 + r)). */
int bench_throughput_max_len(const bench_throughput_opts *o)
{
    if (o->dataset != BENCH_DATA_RANDOM)
        return 0;
    double r = 1.0 + o->random_range_ratio;
    return (int)ceil(random_input_len(o) * r) + (int)ceil(random_output_len(o) * r);
}

/* ---- FLOPs ------------------------------------------------------------------- */

/* A decode step's FLOPs are affine in its context (model_step_cost: the
 * linear layers are fixed, attention grows by one key), so the sum over
 * the arithmetic series of contexts is its count times the mean of the
 * first and last terms: exact, in two calls instead of one per token. */
void bench_throughput_request_flops(const model *m, int prompt, int cached, int output, double *prefill,
                                    double *decode)
{
    model_cost c;
    int computed = INFERD_MAX(prompt - INFERD_MAX(cached, 0), 1);
    model_step_cost(m, 1, computed, prompt, &c);
    *prefill = c.flops;
    *decode = 0;
    if (output > 1) {
        model_cost first, last;
        model_step_cost(m, 1, 1, prompt + 1, &first);
        model_step_cost(m, 1, 1, prompt + output - 1, &last);
        *decode = (double)(output - 1) * (first.flops + last.flops) / 2.0;
    }
}

/* ---- requests ---------------------------------------------------------------- */

typedef struct {
    int n;
    int32_t **ids;   /* [n][n_ids[i]] prompt ids */
    int *n_ids;      /* [n] */
    int *out_len;    /* [n] tokens each request must generate */
    int *cached;     /* [n] prompt tokens the prefix cache served (filled by the run) */
} req_set;

static void req_set_free(req_set *rs)
{
    for (int i = 0; rs->ids && i < rs->n; i++)
        inferd_free(rs->ids[i]);
    inferd_free(rs->ids);
    inferd_free(rs->n_ids);
    inferd_free(rs->out_len);
    inferd_free(rs->cached);
    memset(rs, 0, sizeof *rs);
}

/* Random prompts arrive as ids (exact lengths); ShareGPT ones as text,
 * encoded here with the special tokens the server would add, as the
 * dataset's length filter counted them. Every id is checked against the
 * vocabulary so a mismatched tokenizer fails here, not in the engine. */
static inferd_status build_requests(const bench_throughput_opts *o, const tokenizer *tok, int vocab, req_set *rs)
{
    if (o->dataset == BENCH_DATA_SHAREGPT && !tok)
        return inferd_set_error(INFERD_ERR_INVALID_ARG,
                                "sharegpt needs a tokenizer (tokenizer.json in --model, or --tokenizer DIR)");
    bench_dataset_opts d = {
        .kind = o->dataset, .path = o->dataset_path, .num_prompts = o->num_prompts,
        .input_len = random_input_len(o), .output_len = random_output_len(o),
        .range_ratio = o->random_range_ratio, .fixed_output_len = o->output_len, .seed = o->seed,
        .text_only = false, .tok = tok,
    };
    bench_prompt *p = NULL;
    int n = 0;
    inferd_status st = bench_dataset_build(&d, &p, &n);
    if (st != INFERD_OK)
        return st;
    rs->n = n;
    rs->ids = inferd_calloc((size_t)n, sizeof *rs->ids);
    rs->n_ids = inferd_calloc((size_t)n, sizeof *rs->n_ids);
    rs->out_len = inferd_calloc((size_t)n, sizeof *rs->out_len);
    rs->cached = inferd_calloc((size_t)n, sizeof *rs->cached);
    for (int i = 0; i < n && st == INFERD_OK; i++) {
        rs->out_len[i] = p[i].output_len;
        if (p[i].ids) { /* taken over: bench_dataset_free skips NULL */
            rs->ids[i] = p[i].ids;
            rs->n_ids[i] = p[i].n_ids;
            p[i].ids = NULL;
        } else {
            st = tok_encode(tok, p[i].text, strlen(p[i].text), true, false, &rs->ids[i], &rs->n_ids[i]);
        }
        for (int k = 0; st == INFERD_OK && k < rs->n_ids[i]; k++)
            if (rs->ids[i][k] < 0 || rs->ids[i][k] >= vocab)
                st = inferd_set_error(INFERD_ERR_INVALID_ARG, "prompt %d: id %d outside the model's vocabulary (%d)",
                                      i, rs->ids[i][k], vocab);
    }
    bench_dataset_free(p, n);
    if (st != INFERD_OK)
        req_set_free(rs);
    return st;
}

/* ---- the run ----------------------------------------------------------------- */

/* Request i: vLLM's throughput sampling (temperature 1, top_p 1,
 * ignore_eos, max_tokens = its output length), seeded by its index. */
static engine_request make_request(const req_set *rs, int i, uint64_t seed)
{
    engine_request req = {.prompt_ids = rs->ids[i], .n_prompt = rs->n_ids[i]};
    sampling_params_default(&req.sp);
    req.sp.temperature = 1.0f;
    req.sp.top_p = 1.0f;
    req.sp.ignore_eos = true;
    req.sp.max_tokens = rs->out_len[i];
    req.sp.seed = seed + (uint64_t)i;
    req.sp.has_seed = true;
    return req;
}

/* Drain stream i to its end: its final counts go into r; a request that
 * did not finish by length with every token counts as failed (the first
 * such error is kept in why). Returns the engine's finish time (0: none). */
static double drain_one(engine_stream *s, req_set *rs, int i, bench_throughput_result *r, char *why,
                        size_t why_len)
{
    engine_output o;
    for (;;) {
        memset(&o, 0, sizeof o);
        if (engine_stream_wait(s, &o, 1000) && o.finished)
            break;
        engine_output_free(&o);
    }
    r->prompt_tokens += o.prompt_tokens;
    r->output_tokens += o.completion_tokens;
    r->cached_tokens += o.cached_tokens;
    rs->cached[i] = o.cached_tokens;
    if (o.finish != FINISH_LENGTH || o.completion_tokens != rs->out_len[i]) {
        if (r->failed++ == 0)
            snprintf(why, why_len, "request %d finished with '%s' after %d of %d tokens %s", i,
                     finish_reason_str(o.finish), o.completion_tokens, rs->out_len[i], o.error);
    }
    double t = o.times.finished;
    engine_output_free(&o);
    return t;
}

/* All requests at once (engine_submit_many: the engine's first step sees
 * every one, as vLLM's generate() over the whole list), then every stream
 * in order. The clock ends at the engine's last finish stamp (same
 * monotonic clock), not when this thread got round to reading it. */
static inferd_status run_all(engine *e, req_set *rs, const bench_throughput_opts *o, bench_throughput_result *r)
{
    engine_stream **strm = inferd_calloc((size_t)rs->n, sizeof *strm);
    engine_request *reqs = inferd_malloc((size_t)rs->n * sizeof *reqs);
    for (int i = 0; i < rs->n; i++)
        reqs[i] = make_request(rs, i, o->seed);
    double t0 = util_now_s();
    inferd_status st = engine_submit_many(e, reqs, rs->n, strm);
    inferd_free(reqs);
    if (st != INFERD_OK) {
        inferd_free(strm);
        return st;
    }
    double t_end = t0;
    char why[512] = "";
    for (int i = 0; i < rs->n; i++) {
        t_end = fmax(t_end, drain_one(strm[i], rs, i, r, why, sizeof why));
        engine_stream_release(strm[i]);
    }
    r->elapsed_s = t_end > t0 ? t_end - t0 : util_now_s() - t0;
    inferd_free(strm);
    if (!engine_wait_idle(e, 60000))
        return inferd_set_error(INFERD_ERR_INTERNAL, "the engine did not go idle after the run");
    if (r->failed > 0)
        return inferd_set_error(INFERD_ERR_INTERNAL, "%d of %d requests failed; first: %s", r->failed, rs->n, why);
    return INFERD_OK;
}

/* FLOPs of every request from its own lengths and prefix-cache hit, then
 * the roofline against the measured GEMM rate. */
static void count_flops(const model *m, const req_set *rs, bench_throughput_result *r, const kern_ceilings *ceil)
{
    for (int i = 0; i < rs->n; i++) {
        double pf = 0, dec = 0;
        bench_throughput_request_flops(m, rs->n_ids[i], rs->cached[i], rs->out_len[i], &pf, &dec);
        r->prefill_flops += pf;
        r->decode_flops += dec;
    }
    double flops = r->prefill_flops + r->decode_flops;
    if (ceil->gemm_tflops > 0)
        r->floor_s = flops / (ceil->gemm_tflops * 1e12);
    if (r->elapsed_s > 0) {
        r->achieved_tflops = flops / r->elapsed_s / 1e12;
        r->pct_roofline = 100.0 * r->floor_s / r->elapsed_s;
    }
}

/* ---- report ------------------------------------------------------------------ */

static const char *dataset_name(bench_data_kind k)
{
    return k == BENCH_DATA_SHAREGPT ? "sharegpt" : k == BENCH_DATA_JSONL ? "jsonl" : "random";
}

static void print_header(FILE *f, model *m, const engine_opts *eo, const kern_ceilings *c,
                         const bench_throughput_opts *o, int n_req)
{
    bench_print_device(f, m, c);
    fprintf(f,
            "engine: max-num-seqs %d, max-num-batched-tokens %d, max-model-len %d, prefix caching %s, async "
            "scheduling %s\n",
            eo->max_num_seqs, eo->max_num_batched_tokens, model_max_model_len(m),
            eo->enable_prefix_caching ? "on" : "off",
            eo->async_scheduling && model_step_chainable(m) ? "on" : "off");
    if (o->dataset == BENCH_DATA_RANDOM)
        fprintf(f, "dataset: random, %d requests, input %d, output %d, range ratio %g, seed %llu\n", n_req,
                random_input_len(o), random_output_len(o), o->random_range_ratio, (unsigned long long)o->seed);
    else
        fprintf(f, "dataset: sharegpt %s, %d requests, output %s, seed %llu\n", o->dataset_path, n_req,
                o->output_len > 0 ? "fixed by --output-len" : "the data's", (unsigned long long)o->seed);
    fprintf(f, "sampling: temperature 1, ignore_eos (every request runs to its output length), %s\n",
            o->disable_detokenize ? "no detokenization" : "detokenized when the model has a tokenizer");
    fprintf(f, "roofline: floor = model FLOPs (prefill + decode, attention included) / GEMM rate\n\n");
}

static double per_s(double v, double s)
{
    return s > 0 ? v / s : 0;
}

/* vLLM's three lines, then the roofline table and the engine's counters. */
static void print_result(FILE *f, model *m, const kern_ceilings *c, const bench_throughput_result *r)
{
    double total = (double)(r->prompt_tokens + r->output_tokens), flops = r->prefill_flops + r->decode_flops;
    fprintf(f, "Throughput: %.2f requests/s, %.2f total tokens/s, %.2f output tokens/s\n",
            per_s(r->num_requests, r->elapsed_s), per_s(total, r->elapsed_s),
            per_s((double)r->output_tokens, r->elapsed_s));
    fprintf(f, "Total num prompt tokens:  %lld\n", (long long)r->prompt_tokens);
    fprintf(f, "Total num output tokens:  %lld\n\n", (long long)r->output_tokens);
    fprintf(f, "| requests | prompt tok | output tok | elapsed s | req/s | total tok/s | output tok/s | "
               "prefill TFLOP | decode TFLOP | model TFLOP | GEMM TFLOP/s | floor s | achieved TFLOP/s | "
               "%% roofline |\n");
    fprintf(f, "|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|\n");
    fprintf(f, "| %d | %lld | %lld | %.3f | %.2f | %.1f | %.1f | %.4g | %.4g | %.4g | %.4g | %.4g | %.4g | %.1f%% |\n",
            r->num_requests, (long long)r->prompt_tokens, (long long)r->output_tokens, r->elapsed_s,
            per_s(r->num_requests, r->elapsed_s), per_s(total, r->elapsed_s),
            per_s((double)r->output_tokens, r->elapsed_s), r->prefill_flops / 1e12, r->decode_flops / 1e12,
            flops / 1e12, c->gemm_tflops, r->floor_s, r->achieved_tflops, r->pct_roofline);
    model_graph_info gi;
    model_graph_info_get(m, &gi);
    fprintf(
        f,
        "\nengine: %llu steps (%llu through graphs, %llu eager, %llu launched while the step before ran), "
        "%llu preemptions, prefix cache served %lld of %lld prompt tokens\n",
        (unsigned long long)r->stats.steps, (unsigned long long)gi.replays,
        (unsigned long long)gi.eager_steps, (unsigned long long)r->stats.steps_ahead,
        (unsigned long long)r->stats.preemptions, (long long)r->cached_tokens, (long long)r->prompt_tokens);
    const model_prof_stats *p = &r->prof;
    if (p->busy_steps > 0) {
        const double dec_s = p->busy_ms * 1e-3;
        fprintf(f, "time: %llu decode-only steps %.3f s of device time (%.2f ms each, %.1f us idle between "
                   "consecutive ones); the other %llu steps (with prompt chunks) and every gap %.3f s\n",
                (unsigned long long)p->busy_steps, dec_s, p->busy_ms / (double)p->busy_steps,
                p->gaps ? 1e3 * p->gap_ms / (double)p->gaps : 0.0,
                (unsigned long long)(r->stats.steps > p->busy_steps ? r->stats.steps - p->busy_steps : 0),
                r->elapsed_s - dec_s);
    }
    const engine_host_times *h = &r->stats.host;
    if (h->gaps > 0) {
        const double us = 1e6 / (double)h->gaps;
        fprintf(
            f,
            "engine thread between consecutive decode-only steps: %.1f us (outputs %.1f, loop %.1f, schedule "
            "%.1f, build %.1f) over %llu pairs\n",
            us * (h->outputs_s + h->loop_s + h->schedule_s + h->build_s), us * h->outputs_s, us * h->loop_s,
            us * h->schedule_s, us * h->build_s, (unsigned long long)h->gaps);
    }
}

/* vLLM's keys first (elapsed_time, num_requests, total_num_tokens,
 * requests_per_second, tokens_per_second), then ours. */
static int write_json(const char *path, model *m, const engine_opts *eo, const kern_ceilings *c,
                      const bench_throughput_opts *o, const bench_throughput_result *r)
{
    double total = (double)(r->prompt_tokens + r->output_tokens);
    cJSON *root = cJSON_CreateObject();
    cJSON_AddNumberToObject(root, "elapsed_time", r->elapsed_s);
    cJSON_AddNumberToObject(root, "num_requests", r->num_requests);
    cJSON_AddNumberToObject(root, "total_num_tokens", total);
    cJSON_AddNumberToObject(root, "requests_per_second", per_s(r->num_requests, r->elapsed_s));
    cJSON_AddNumberToObject(root, "tokens_per_second", per_s(total, r->elapsed_s));
    cJSON_AddNumberToObject(root, "output_tokens_per_second", per_s((double)r->output_tokens, r->elapsed_s));
    cJSON_AddNumberToObject(root, "total_prompt_tokens", (double)r->prompt_tokens);
    cJSON_AddNumberToObject(root, "total_output_tokens", (double)r->output_tokens);
    cJSON_AddNumberToObject(root, "cached_prompt_tokens", (double)r->cached_tokens);
    cJSON_AddNumberToObject(root, "failed", r->failed);
    cJSON_AddStringToObject(root, "dataset_name", dataset_name(o->dataset));
    if (o->dataset == BENCH_DATA_RANDOM) {
        cJSON_AddNumberToObject(root, "input_len", random_input_len(o));
        cJSON_AddNumberToObject(root, "output_len", random_output_len(o));
    }
    cJSON_AddStringToObject(root, "device", c->device);
    cJSON_AddStringToObject(root, "backend", kern_backend_name(kern_ctx_backend(model_kern(m))));
    cJSON *cj = cJSON_AddObjectToObject(root, "ceilings");
    cJSON_AddNumberToObject(cj, "copy_gbps", c->copy_gbps);
    cJSON_AddNumberToObject(cj, "gemm_tflops", c->gemm_tflops);
    cJSON_AddNumberToObject(root, "prefill_flops", r->prefill_flops);
    cJSON_AddNumberToObject(root, "decode_flops", r->decode_flops);
    cJSON_AddNumberToObject(root, "total_flops", r->prefill_flops + r->decode_flops);
    cJSON_AddNumberToObject(root, "floor_s", r->floor_s);
    cJSON_AddNumberToObject(root, "achieved_tflops", r->achieved_tflops);
    cJSON_AddNumberToObject(root, "pct_roofline", r->pct_roofline);
    model_graph_info gi;
    model_graph_info_get(m, &gi);
    cJSON *ej = cJSON_AddObjectToObject(root, "engine");
    cJSON_AddNumberToObject(ej, "max_num_seqs", eo->max_num_seqs);
    cJSON_AddNumberToObject(ej, "max_num_batched_tokens", eo->max_num_batched_tokens);
    cJSON_AddNumberToObject(ej, "max_model_len", model_max_model_len(m));
    cJSON_AddBoolToObject(ej, "enable_prefix_caching", eo->enable_prefix_caching);
    cJSON_AddBoolToObject(ej, "graphs", gi.enabled);
    cJSON_AddBoolToObject(ej, "norm_fold", model_norm_folded(m));
    cJSON_AddNumberToObject(ej, "steps", (double)r->stats.steps);
    cJSON_AddNumberToObject(ej, "steps_ahead", (double)r->stats.steps_ahead);
    cJSON_AddNumberToObject(ej, "preemptions", (double)r->stats.preemptions);
    cJSON_AddNumberToObject(ej, "decode_only_steps", (double)r->prof.busy_steps);
    cJSON_AddNumberToObject(ej, "decode_only_gpu_s", r->prof.busy_ms * 1e-3);
    const engine_host_times *h = &r->stats.host;
    cJSON *hj = cJSON_AddObjectToObject(ej, "engine_thread_s");
    cJSON_AddNumberToObject(hj, "outputs", h->outputs_s);
    cJSON_AddNumberToObject(hj, "loop", h->loop_s);
    cJSON_AddNumberToObject(hj, "schedule", h->schedule_s);
    cJSON_AddNumberToObject(hj, "build", h->build_s);
    cJSON_AddNumberToObject(hj, "pairs", (double)h->gaps);
    char *text = cJSON_Print(root);
    cJSON_Delete(root);
    const bool ok = util_write_text_file(path, text);
    free(text);
    if (!ok) {
        fprintf(stderr, "inferd bench throughput: cannot write %s\n", path);
        return 1;
    }
    return 0;
}

int bench_throughput_run(model *m, const tokenizer *tok, const engine_opts *eo, const kern_ceilings *ceil,
                         const bench_throughput_opts *o, FILE *out, bench_throughput_result *res)
{
    bench_throughput_result r;
    memset(&r, 0, sizeof r);
    req_set rs;
    memset(&rs, 0, sizeof rs);
    if (build_requests(o, tok, model_get_config(m)->vocab_size, &rs) != INFERD_OK) {
        fprintf(stderr, "inferd bench throughput: dataset: %s\n", inferd_last_error());
        return 1;
    }
    /* every request waits in the queue at once: it must hold them all */
    engine_opts e_opts = *eo;
    e_opts.max_queued_requests = INFERD_MAX(e_opts.max_queued_requests, rs.n);
    engine *e = NULL;
    if (engine_create(&e_opts, m, o->disable_detokenize ? NULL : tok, &e) != INFERD_OK ||
        engine_start(e) != INFERD_OK) {
        fprintf(stderr, "inferd bench throughput: %s\n", inferd_last_error());
        engine_free(e);
        req_set_free(&rs);
        return 1;
    }
    print_header(out, m, &e_opts, ceil, o, rs.n);
    fflush(out);
    r.num_requests = rs.n;
    int rc = 0;
    /* the engine is idle: no step runs while the profile is switched */
    const bool prof = model_prof_enable(m, MODEL_PROF_GAPS) == INFERD_OK;
    if (run_all(e, &rs, o, &r) != INFERD_OK) {
        fprintf(stderr, "inferd bench throughput: %s\n", inferd_last_error());
        rc = 1;
    }
    engine_get_stats(e, &r.stats);
    if (prof) { /* run_all waited for the engine to go idle */
        model_prof_get(m, &r.prof);
        model_prof_enable(m, 0);
    }
    engine_free(e);
    count_flops(m, &rs, &r, ceil);
    print_result(out, m, ceil, &r);
    fflush(out);
    if (o->output_json && write_json(o->output_json, m, &e_opts, ceil, o, &r) != 0)
        rc = 1;
    req_set_free(&rs);
    if (res)
        *res = r;
    return rc;
}
