/* bench/bench_latency.c: see bench_latency.h.
 *
 * One iteration of a row: submit `batch` requests (fresh random prompt ids
 * per iteration and request, so the prefix cache never hits), wait for all
 * to finish, then read the token timestamps their notify callbacks recorded
 * on the engine thread. Warm-up iterations run the same and are dropped.
 * Per row: prefill ms = median over iterations; decode ms/step = mean of
 * every pure decode step of every iteration; p50 / p99 over the same steps.
 * Everything the hot loop needs is allocated before the first submission.
 */
#include "bench/bench_latency.h"

#include <cjson/cJSON.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "common/alloc.h"
#include "common/log.h"
#include "common/rng.h"
#include "common/util.h"
#include "model/model_prof.h"

void bench_latency_opts_default(bench_latency_opts *o)
{
    memset(o, 0, sizeof *o);
    o->batch[0] = 8;
    o->n_batch = 1;
    o->input[0] = 32;
    o->n_input = 1;
    o->output[0] = 128;
    o->n_output = 1;
    o->num_iters_warmup = 1;
    o->num_iters = 3;
    o->seed = 1234;
}

bool bench_latency_parse_list(const char *text, int *out, int *n)
{
    *n = 0;
    const char *p = text;
    while (*p) {
        char *end = NULL;
        long v = strtol(p, &end, 10);
        if (end == p || v < 1 || v > (1 << 24) || (*end != ',' && *end != '\0')) {
            inferd_set_error(INFERD_ERR_INVALID_ARG, "'%s' is not a list of positive integers (1,16,64)", text);
            return false;
        }
        if (*n == BENCH_LAT_MAX_LIST) {
            inferd_set_error(INFERD_ERR_INVALID_ARG, "'%s': at most %d values", text, BENCH_LAT_MAX_LIST);
            return false;
        }
        out[(*n)++] = (int)v;
        p = *end == ',' ? end + 1 : end;
        if (*end == ',' && *p == '\0') {
            inferd_set_error(INFERD_ERR_INVALID_ARG, "'%s' ends with a comma", text);
            return false;
        }
    }
    if (*n == 0)
        return inferd_set_error(INFERD_ERR_INVALID_ARG, "empty list"), false;
    return true;
}

inferd_status bench_latency_ceilings(kern_backend be, int device_id, kern_ceilings *out)
{
    kern_ctx_opts ko = {.backend = be, .n_threads = 0, .device_id = device_id};
    kern_ctx *kc = NULL;
    inferd_status st = kern_ctx_create(&ko, &kc);
    if (st != INFERD_OK)
        return st;
    st = kern_measure_ceilings(kc, out);
    kern_ctx_free(kc);
    return st;
}

/* --- one row ----------------------------------------------------------------- */

/* Token timestamps of one request, written by the engine thread. */
typedef struct {
    double *t; /* [cap] */
    int n, cap;
} req_clock;

static void on_token(void *user)
{
    req_clock *c = user;
    if (c->n < c->cap)
        c->t[c->n++] = util_now_s();
}

typedef struct {
    int batch, input, output;
    double prefill_ms;         /* median over iterations */
    int64_t cached_tokens;     /* prompt tokens the prefix cache served in the timed iterations (0 expected) */
    double *steps_ms;          /* pure decode step durations, all iterations */
    int n_steps;
    double step_ms, p50_ms, p99_ms;
    double mean_ctx;           /* mean context of the measured steps */
    model_cost cost, pf_cost;  /* a decode step at mean_ctx; the whole prefill */
    double floor_ms, pct_roofline, pf_pct_gemm;
    model_prof_stats prof;     /* decode steps of the timed iterations */
    engine_host_times host;    /* the engine thread between their decode steps */
    char error[256];
} row_result;

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

static double percentile(const double *sorted, int n, double q)
{
    if (n == 0)
        return 0;
    double pos = q * (n - 1);
    int lo = (int)floor(pos), hi = lo + 1 < n ? lo + 1 : lo;
    return sorted[lo] + (sorted[hi] - sorted[lo]) * (pos - lo);
}

typedef struct {
    engine *e;
    int vocab;
    uint64_t seed;
    int32_t *prompt;       /* [batch, input] */
    engine_request *req;   /* [batch] */
    req_clock *clk;        /* [batch] */
    engine_stream **strm;  /* [batch] */
} row_ctx;

/* Submit the batch (at once: the first step sees every prompt, as a batch
 * handed to vLLM's generate), wait for it; prefill ms and the pure decode
 * steps (appended to r->steps_ms) of this iteration. */
static inferd_status run_iter(row_ctx *x, row_result *r, uint64_t iter, bool keep)
{
    for (int i = 0; i < r->batch; i++) {
        x->clk[i].n = 0;
        int32_t *p = x->prompt + (size_t)i * (size_t)r->input; /* [input] */
        for (int j = 0; j < r->input; j++) /* ids in [1, vocab): fresh per iteration and request */
            p[j] = 1 + (int32_t)(rng_uniform(x->seed + iter * 7919u + (uint64_t)i, (uint64_t)j) *
                                 (double)(x->vocab - 1));
        engine_request *q = &x->req[i];
        *q = (engine_request){.prompt_ids = p, .n_prompt = r->input, .notify = on_token, .notify_user = &x->clk[i]};
        sampling_params_default(&q->sp);
        q->sp.temperature = 0;
        q->sp.ignore_eos = true;
        q->sp.max_tokens = r->output;
    }
    double t0 = util_now_s();
    inferd_status st = engine_submit_many(x->e, x->req, r->batch, x->strm);
    if (st != INFERD_OK)
        return st;
    for (int i = 0; i < r->batch; i++) {
        engine_output o;
        bool done = false;
        while (!done) {
            memset(&o, 0, sizeof o);
            if (engine_stream_wait(x->strm[i], &o, 1000)) {
                done = o.finished;
                if (o.finished && keep)
                    r->cached_tokens += o.cached_tokens;
                if (o.finished && o.finish != FINISH_LENGTH && st == INFERD_OK)
                    st = inferd_set_error(INFERD_ERR_INTERNAL, "request %d finished with '%s' %s", i,
                                          finish_reason_str(o.finish), o.error);
                engine_output_free(&o);
            }
        }
        engine_stream_release(x->strm[i]);
    }
    /* NOTE: a stream shows `finished` before the engine thread has made its
     * last notify call; once the engine is idle every call has returned, so
     * none can land in the next iteration's clocks. */
    if (!engine_wait_idle(x->e, 60000) && st == INFERD_OK)
        st = inferd_set_error(INFERD_ERR_INTERNAL, "the engine did not go idle after the batch");
    if (st != INFERD_OK || !keep)
        return st;
    /* prefill: until every request has its first token */
    double t_pf = 0;
    for (int i = 0; i < r->batch; i++) {
        if (x->clk[i].n < r->output)
            return inferd_set_error(INFERD_ERR_INTERNAL, "request %d: %d token callbacks for %d tokens", i,
                                    x->clk[i].n, r->output);
        t_pf = fmax(t_pf, x->clk[i].t[0]);
    }
    r->prefill_ms = (t_pf - t0) * 1e3; /* the caller keeps the median */
    const req_clock *c = &x->clk[0];
    for (int k = 1; k < r->output; k++) {
        if (c->t[k - 1] < t_pf)
            continue; /* a step that still had prefill work in it */
        r->steps_ms[r->n_steps++] = (c->t[k] - c->t[k - 1]) * 1e3;
        r->mean_ctx += r->input + k; /* context of the step that made token k */
    }
    return INFERD_OK;
}

static void row_roofline(model *m, const kern_ceilings *ceil, row_result *r)
{
    int ctx = r->n_steps > 0 ? (int)lround(r->mean_ctx / r->n_steps) : r->input + 1;
    r->mean_ctx = ctx;
    model_step_cost(m, r->batch, 1, ctx, &r->cost);
    model_step_cost(m, r->batch, r->input, r->input, &r->pf_cost);
    double bw = ceil->copy_gbps * 1e9, fl = ceil->gemm_tflops * 1e12;
    if (bw > 0 && fl > 0) {
        double t_bytes = (r->cost.weight_bytes + r->cost.kv_bytes) / bw, t_flops = r->cost.flops / fl;
        r->floor_ms = fmax(t_bytes, t_flops) * 1e3;
        if (r->step_ms > 0)
            r->pct_roofline = 100.0 * r->floor_ms / r->step_ms;
        if (r->prefill_ms > 0)
            r->pf_pct_gemm = 100.0 * (r->pf_cost.flops / fl * 1e3) / r->prefill_ms;
    }
}

/* d = a - b, counter by counter (two snapshots of the engine's sums). */
static void host_times_diff(const engine_host_times *a, const engine_host_times *b, engine_host_times *d)
{
    d->gaps = a->gaps - b->gaps;
    d->outputs_s = a->outputs_s - b->outputs_s;
    d->loop_s = a->loop_s - b->loop_s;
    d->schedule_s = a->schedule_s - b->schedule_s;
    d->build_s = a->build_s - b->build_s;
}

static int run_row(model *m, engine *e, const kern_ceilings *ceil, const bench_latency_opts *o, row_result *r)
{
    /* NOTE: prompts differ between rows too (the row's batch and input in
     * the seed's high bits): with one seed for all, a longer row's prompts
     * began with a shorter row's, and the prefix cache served those tokens,
     * so its prefill was timed short. */
    const uint64_t row_key = (uint64_t)r->batch * 65537u + (uint64_t)r->input;
    row_ctx x = {.e = e, .vocab = model_get_config(m)->vocab_size, .seed = o->seed + (row_key << 32)};
    x.prompt = inferd_malloc(sizeof(int32_t) * (size_t)r->batch * (size_t)r->input);
    x.req = inferd_calloc((size_t)r->batch, sizeof(engine_request));
    x.clk = inferd_calloc((size_t)r->batch, sizeof(req_clock));
    x.strm = inferd_calloc((size_t)r->batch, sizeof(engine_stream *));
    for (int i = 0; i < r->batch; i++) {
        x.clk[i].cap = r->output + 4;
        x.clk[i].t = inferd_malloc(sizeof(double) * (size_t)x.clk[i].cap);
    }
    r->steps_ms = inferd_malloc(sizeof(double) * (size_t)o->num_iters * (size_t)r->output);
    double *pf = inferd_malloc(sizeof(double) * (size_t)o->num_iters);
    inferd_status st = INFERD_OK;
    engine_stats s0, s1;
    for (int it = 0; it < o->num_iters_warmup + o->num_iters && st == INFERD_OK; it++) {
        bool keep = it >= o->num_iters_warmup;
        if (it == o->num_iters_warmup) { /* the engine is idle between iterations */
            model_prof_reset(m);
            engine_get_stats(e, &s0);
        }
        st = run_iter(&x, r, (uint64_t)it, keep);
        if (keep)
            pf[it - o->num_iters_warmup] = r->prefill_ms;
    }
    if (st == INFERD_OK) {
        engine_get_stats(e, &s1);
        host_times_diff(&s1.host, &s0.host, &r->host);
        qsort(pf, (size_t)o->num_iters, sizeof *pf, cmp_double);
        r->prefill_ms = percentile(pf, o->num_iters, 0.5);
        double sum = 0;
        for (int i = 0; i < r->n_steps; i++)
            sum += r->steps_ms[i];
        r->step_ms = r->n_steps > 0 ? sum / r->n_steps : 0;
        double *sorted = inferd_malloc(sizeof(double) * (size_t)(r->n_steps > 0 ? r->n_steps : 1));
        memcpy(sorted, r->steps_ms, sizeof(double) * (size_t)r->n_steps);
        qsort(sorted, (size_t)r->n_steps, sizeof *sorted, cmp_double);
        r->p50_ms = percentile(sorted, r->n_steps, 0.5);
        r->p99_ms = percentile(sorted, r->n_steps, 0.99);
        inferd_free(sorted);
        row_roofline(m, ceil, r);
        model_prof_get(m, &r->prof);
    } else {
        snprintf(r->error, sizeof r->error, "%s", inferd_last_error());
    }
    for (int i = 0; i < r->batch; i++)
        inferd_free(x.clk[i].t);
    inferd_free(x.clk);
    inferd_free(x.strm);
    inferd_free(x.prompt);
    inferd_free(x.req);
    inferd_free(pf);
    return st == INFERD_OK ? 0 : 1;
}

/* --- output ------------------------------------------------------------------ */

void bench_print_device(FILE *f, model *m, const kern_ceilings *c)
{
    const model_config *cfg = model_get_config(m);
    model_graph_info gi;
    model_graph_info_get(m, &gi);
    fprintf(f, "device: %s (%s backend)\n", c->device, kern_backend_name(kern_ctx_backend(model_kern(m))));
    fprintf(f, "model: %s, %d layers, d %d, vocab %d, KV cache %s, norm fold %s\n", cfg->arch, cfg->n_layers,
            cfg->hidden_size, cfg->vocab_size, kern_dtype_name(model_kv_dtype(m)),
            model_norm_folded(m) ? "on" : "off");
    fprintf(f, "ceilings (measured now): copy %.1f GB/s (%lld MiB d2d), GEMM %.2f TFLOP/s (%dx%dx%d)\n",
            c->copy_gbps, (long long)(c->copy_bytes >> 20), c->gemm_tflops, c->gemm_m, c->gemm_n, c->gemm_k);
    if (gi.enabled)
        fprintf(f, "graphs: on, %d captured for batch 1..%d in %.2f s\n", gi.n_graphs, gi.max_batch, gi.capture_s);
    else
        fprintf(f, "graphs: off (%s)\n",
                kern_ctx_backend(model_kern(m)) == KERN_BACKEND_CUDA ? "--enforce-eager" : "CPU backend");
    if (model_knockout(m))
        fprintf(f, "knock-out: %s left out of every decode step (INFERD_KNOCKOUT; for timing only, the outputs "
                   "are wrong)\n", model_knockout(m));
}

static void print_header(FILE *f, model *m, const kern_ceilings *c, const bench_latency_opts *o)
{
    bench_print_device(f, m, c);
    fprintf(f, "iterations: %d warm-up + %d timed; floor = max(bytes / copy BW, FLOPs / GEMM rate)\n\n",
            o->num_iters_warmup, o->num_iters);
    if (o->profile_ops)
        fprintf(f, "profile: every step eager, an event before each op (--profile-ops)\n");
    fprintf(f, "\n");
    fprintf(f, "| batch | in | out | prefill ms | prefill tok/s | pf %%GEMM | decode ms/step | p50 ms | p99 ms | "
               "decode tok/s | MB/step | GFLOP/step | floor ms | %% roofline | steps |\n");
    fprintf(f, "|------:|---:|----:|-----------:|--------------:|---------:|---------------:|-------:|-------:|"
               "-------------:|--------:|-----------:|---------:|-----------:|------:|\n");
}

static double busy_ms(const row_result *r)
{
    return r->prof.busy_steps ? r->prof.busy_ms / (double)r->prof.busy_steps : 0;
}

static double gap_us(const row_result *r)
{
    return r->prof.gaps ? 1e3 * r->prof.gap_ms / (double)r->prof.gaps : 0;
}

static void print_row(FILE *f, const row_result *r)
{
    if (r->error[0]) {
        fprintf(f, "| %d | %d | %d | error: %s |\n", r->batch, r->input, r->output, r->error);
        return;
    }
    double pf_tps = r->prefill_ms > 0 ? (double)r->batch * r->input / (r->prefill_ms * 1e-3) : 0;
    double dec_tps = r->step_ms > 0 ? r->batch / (r->step_ms * 1e-3) : 0;
    fprintf(f, "| %d | %d | %d | %.2f | %.0f | %.1f%% | %.3f | %.3f | %.3f | %.1f | %.1f | %.3f | %.3f | %.1f%% | %d |\n",
            r->batch, r->input, r->output, r->prefill_ms, pf_tps, r->pf_pct_gemm, r->step_ms, r->p50_ms, r->p99_ms,
            dec_tps, (r->cost.weight_bytes + r->cost.kv_bytes) / 1e6, r->cost.flops / 1e9, r->floor_ms,
            r->pct_roofline, r->n_steps);
}

/* The GPU side of the decode steps, one line per row (after the table). */
static void print_gpu_side(FILE *f, const row_result *rows, int n)
{
    fprintf(f, "\ndecode steps on the GPU (events around each step): busy = step begin -> end, "
               "gap = GPU idle between consecutive decode steps\n\n");
    fprintf(f, "| batch | in | out | GPU busy ms/step | host gap us | max gap us | steps timed |\n");
    fprintf(f, "|------:|---:|----:|-----------------:|------------:|-----------:|------------:|\n");
    for (int i = 0; i < n; i++) {
        const row_result *r = &rows[i];
        if (r->error[0])
            continue;
        fprintf(f, "| %d | %d | %d | %.3f | %.1f | %.1f | %llu |\n", r->batch, r->input, r->output, busy_ms(r),
                gap_us(r), 1e3 * r->prof.gap_max_ms, (unsigned long long)r->prof.busy_steps);
    }
}

/* us a gap of one of the engine thread's host sums. */
static double host_us(const row_result *r, double sum_s)
{
    return r->host.gaps ? 1e6 * sum_s / (double)r->host.gaps : 0;
}

/* The engine thread between consecutive decode steps, one line per row:
 * the host's share of the gap above (and the whole step on the CPU). */
static void print_host_side(FILE *f, const row_result *rows, int n)
{
    fprintf(
        f, "\nthe engine thread between consecutive decode steps (wall clock, us a step): outputs = commit + "
           "the sampled tokens (stop checks, detokenizing, streaming), loop = stats + admission + aborts, "
           "schedule = the scheduler, build = the batch arrays + sampling parameters\n\n");
    fprintf(f, "| batch | in | out | outputs us | loop us | schedule us | build us | host us | gaps |\n");
    fprintf(f, "|------:|---:|----:|-----------:|--------:|------------:|---------:|--------:|-----:|\n");
    for (int i = 0; i < n; i++) {
        const row_result *r = &rows[i];
        if (r->error[0])
            continue;
        const engine_host_times *h = &r->host;
        fprintf(f, "| %d | %d | %d | %.1f | %.1f | %.1f | %.1f | %.1f | %llu |\n", r->batch, r->input,
                r->output, host_us(r, h->outputs_s), host_us(r, h->loop_s), host_us(r, h->schedule_s),
                host_us(r, h->build_s), host_us(r, h->outputs_s + h->loop_s + h->schedule_s + h->build_s),
                (unsigned long long)h->gaps);
    }
}

/* Per-op table of one kind of step (--profile-ops): per step, summed over
 * layers; GB/s = the op's bytes over its event time, TFLOP/s its FLOPs
 * over the same time (GEMMs, attention, lm_head), each against the
 * ceilings measured at start. */
static void print_ops_table(FILE *f, const model_prof_ops *o, const kern_ceilings *c)
{
    double steps = (double)o->steps, tot = 0, tot_b = 0, tot_f = 0;
    for (int op = 0; op < MODEL_OP_COUNT; op++) {
        tot += o->ms[op];
        tot_b += o->bytes[op];
        tot_f += o->flops[op];
    }
    fprintf(f, "| op | calls/step | us/step | %% of ops | MB/step | GB/s | %% copy BW | GFLOP/step | TFLOP/s | "
               "%% GEMM peak |\n");
    fprintf(f, "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|\n");
    for (int op = 0; op <= MODEL_OP_COUNT; op++) {
        const bool all = op == MODEL_OP_COUNT;
        if (!all && o->calls[op] == 0)
            continue;
        const double ms = (all ? tot : o->ms[op]) / steps, mb = (all ? tot_b : o->bytes[op]) / steps / 1e6;
        const double gf = (all ? tot_f : o->flops[op]) / steps / 1e9;
        const double gbs = ms > 0 ? mb / ms : 0, tfs = ms > 0 ? gf / ms : 0; /* MB/ms = GB/s, GFLOP/ms = TFLOP/s */
        if (all)
            fprintf(f, "| all ops | | %.1f | 100%% |", ms * 1e3);
        else
            fprintf(f, "| %s | %.0f | %.1f | %.1f%% |", model_op_name((model_op)op), (double)o->calls[op] / steps,
                    ms * 1e3, tot > 0 ? 100.0 * o->ms[op] / tot : 0);
        fprintf(f, " %.2f | %.0f | %.1f%% |", mb, gbs, c->copy_gbps > 0 ? 100.0 * gbs / c->copy_gbps : 0);
        if (gf > 0)
            fprintf(f, " %.4g | %.4g | %.1f%% |\n", gf, tfs, c->gemm_tflops > 0 ? 100.0 * tfs / c->gemm_tflops : 0);
        else
            fprintf(f, " | | |\n");
    }
}

/* The per-op tables of one row: its decode steps (with the GPU busy time
 * and host gap), then its steps with a prompt chunk. */
static void print_ops(FILE *f, const row_result *r, const kern_ceilings *c)
{
    const model_prof_stats *p = &r->prof;
    if (r->error[0])
        return;
    if (p->dec.steps > 0) {
        fprintf(f, "\nops of a decode step: batch %d, context ~%.0f, %llu steps profiled (eager)\n\n", r->batch,
                r->mean_ctx, (unsigned long long)p->dec.steps);
        print_ops_table(f, &p->dec, c);
        fprintf(f, "| GPU busy (step begin -> end) | | %.1f | | | | | | | |\n", busy_ms(r) * 1e3);
        fprintf(f, "| host gap (GPU idle between steps) | | %.1f | | | | | | | |\n", gap_us(r));
        fprintf(f, "| wall step (engine thread) | | %.1f | | | | | | | |\n", r->step_ms * 1e3);
    }
    if (p->pf.steps > 0) {
        fprintf(f, "\nops of a step with a prompt chunk: batch %d, input %d, %.0f new tokens a step, %llu steps "
                   "profiled (eager)\n\n",
                r->batch, r->input, p->pf.tokens / (double)p->pf.steps, (unsigned long long)p->pf.steps);
        print_ops_table(f, &p->pf, c);
    }
}

/* "ops_us_per_step"-style object of o (op name -> us per step). */
static void json_ops(cJSON *o, const char *key, const model_prof_ops *p)
{
    cJSON *ops = cJSON_AddObjectToObject(o, key);
    for (int op = 0; op < MODEL_OP_COUNT; op++)
        cJSON_AddNumberToObject(ops, model_op_name((model_op)op), 1e3 * p->ms[op] / (double)p->steps);
}

static int write_json(const char *path, model *m, const kern_ceilings *c, const row_result *rows, int n)
{
    model_graph_info gi;
    model_graph_info_get(m, &gi);
    cJSON *root = cJSON_CreateObject();
    cJSON_AddStringToObject(root, "device", c->device);
    cJSON_AddStringToObject(root, "backend", kern_backend_name(kern_ctx_backend(model_kern(m))));
    cJSON_AddStringToObject(root, "kv_cache_dtype", kern_dtype_name(model_kv_dtype(m)));
    cJSON_AddBoolToObject(root, "norm_fold", model_norm_folded(m));
    cJSON_AddBoolToObject(root, "graphs", gi.enabled);
    cJSON_AddNumberToObject(root, "graphs_captured", gi.n_graphs);
    cJSON_AddNumberToObject(root, "graph_capture_s", gi.capture_s);
    cJSON *cj = cJSON_AddObjectToObject(root, "ceilings");
    cJSON_AddNumberToObject(cj, "copy_gbps", c->copy_gbps);
    cJSON_AddNumberToObject(cj, "gemm_tflops", c->gemm_tflops);
    cJSON *arr = cJSON_AddArrayToObject(root, "rows");
    double total_lat = 0;
    for (int i = 0; i < n; i++) {
        const row_result *r = &rows[i];
        cJSON *o = cJSON_CreateObject();
        cJSON_AddNumberToObject(o, "batch_size", r->batch);
        cJSON_AddNumberToObject(o, "input_len", r->input);
        cJSON_AddNumberToObject(o, "output_len", r->output);
        if (r->error[0]) {
            cJSON_AddStringToObject(o, "error", r->error);
        } else {
            cJSON_AddNumberToObject(o, "prefill_ms", r->prefill_ms);
            cJSON_AddNumberToObject(o, "cached_prompt_tokens", (double)r->cached_tokens);
            cJSON_AddNumberToObject(o, "prefill_tok_s", r->batch * (double)r->input / (r->prefill_ms * 1e-3));
            cJSON_AddNumberToObject(o, "prefill_pct_gemm", r->pf_pct_gemm);
            cJSON_AddNumberToObject(o, "decode_ms_per_step", r->step_ms);
            cJSON_AddNumberToObject(o, "decode_p50_ms", r->p50_ms);
            cJSON_AddNumberToObject(o, "decode_p99_ms", r->p99_ms);
            cJSON_AddNumberToObject(o, "decode_tok_s", r->step_ms > 0 ? r->batch / (r->step_ms * 1e-3) : 0);
            cJSON_AddNumberToObject(o, "decode_steps", r->n_steps);
            cJSON_AddNumberToObject(o, "mean_context", r->mean_ctx);
            cJSON_AddNumberToObject(o, "weight_bytes_per_step", r->cost.weight_bytes);
            cJSON_AddNumberToObject(o, "kv_bytes_per_step", r->cost.kv_bytes);
            cJSON_AddNumberToObject(o, "flops_per_step", r->cost.flops);
            cJSON_AddNumberToObject(o, "floor_ms", r->floor_ms);
            cJSON_AddNumberToObject(o, "pct_roofline", r->pct_roofline);
            cJSON_AddNumberToObject(o, "gpu_busy_ms_per_step", busy_ms(r));
            cJSON_AddNumberToObject(o, "host_gap_us", gap_us(r));
            cJSON_AddNumberToObject(o, "host_gap_max_us", 1e3 * r->prof.gap_max_ms);
            const engine_host_times *h = &r->host;
            cJSON *hj = cJSON_AddObjectToObject(o, "engine_thread_us_per_gap");
            cJSON_AddNumberToObject(hj, "outputs", host_us(r, h->outputs_s));
            cJSON_AddNumberToObject(hj, "loop", host_us(r, h->loop_s));
            cJSON_AddNumberToObject(hj, "schedule", host_us(r, h->schedule_s));
            cJSON_AddNumberToObject(hj, "build", host_us(r, h->build_s));
            cJSON_AddNumberToObject(hj, "gaps", (double)h->gaps);
            if (r->prof.dec.steps > 0)
                json_ops(o, "ops_us_per_step", &r->prof.dec);
            if (r->prof.pf.steps > 0) {
                json_ops(o, "prefill_ops_us_per_step", &r->prof.pf);
                cJSON_AddNumberToObject(o, "prefill_ops_steps", (double)r->prof.pf.steps);
                cJSON_AddNumberToObject(o, "prefill_ops_tokens_per_step", r->prof.pf.tokens / (double)r->prof.pf.steps);
            }
            /* vLLM's field: one request's end-to-end latency, seconds */
            double lat = (r->prefill_ms + r->step_ms * (r->output - 1)) * 1e-3;
            cJSON_AddNumberToObject(o, "avg_latency", lat);
            total_lat += lat;
        }
        cJSON_AddItemToArray(arr, o);
    }
    cJSON_AddNumberToObject(root, "avg_latency", n > 0 ? total_lat / n : 0);
    char *text = cJSON_Print(root);
    cJSON_Delete(root);
    const bool ok = util_write_text_file(path, text);
    free(text);
    if (!ok) {
        fprintf(stderr, "inferd bench latency: cannot write %s\n", path);
        return 1;
    }
    return 0;
}

int bench_latency_run(model *m, const engine_opts *eo, const kern_ceilings *ceil, const bench_latency_opts *o,
                      FILE *out)
{
    engine *e = NULL;
    if (model_prof_enable(m, MODEL_PROF_GAPS | (o->profile_ops ? MODEL_PROF_OPS : 0u)) != INFERD_OK) {
        fprintf(stderr, "inferd bench latency: %s\n", inferd_last_error());
        return 1;
    }
    if (engine_create(eo, m, NULL, &e) != INFERD_OK || engine_start(e) != INFERD_OK) {
        fprintf(stderr, "inferd bench latency: %s\n", inferd_last_error());
        engine_free(e);
        return 1;
    }
    int n_rows = o->n_batch * o->n_input * o->n_output, k = 0, rc = 0;
    row_result *rows = inferd_calloc((size_t)n_rows, sizeof *rows);
    print_header(out, m, ceil, o);
    for (int bi = 0; bi < o->n_batch; bi++)
        for (int ii = 0; ii < o->n_input; ii++)
            for (int oi = 0; oi < o->n_output; oi++, k++) {
                row_result *r = &rows[k];
                r->batch = o->batch[bi];
                r->input = o->input[ii];
                r->output = o->output[oi];
                if (run_row(m, e, ceil, o, r) != 0) {
                    fprintf(stderr, "inferd bench latency: batch %d, input %d, output %d: %s\n", r->batch, r->input,
                            r->output, r->error);
                    rc = 1;
                }
                print_row(out, r);
                fflush(out);
                engine_wait_idle(e, 60000);
            }
    if (o->output_json && write_json(o->output_json, m, ceil, rows, n_rows) != 0)
        rc = 1;
    model_graph_info gi;
    model_graph_info_get(m, &gi);
    engine_stats est;
    engine_get_stats(e, &est);
    fprintf(out,
            "\nsteps: %llu through graphs, %llu eager; %llu launched while the step before ran (async "
            "scheduling)\n",
            (unsigned long long)gi.replays, (unsigned long long)gi.eager_steps,
            (unsigned long long)est.steps_ahead);
    for (int i = 0; i < n_rows; i++)
        if (rows[i].cached_tokens > 0)
            fprintf(out, "warning: batch %d, input %d: the prefix cache served %lld prompt tokens; its prefill "
                         "column is short by that work\n",
                    rows[i].batch, rows[i].input, (long long)rows[i].cached_tokens);
    for (int i = 0; i < n_rows; i++)
        if (!rows[i].error[0] && rows[i].output > 1 && rows[i].n_steps == 0)
            fprintf(out, "warning: batch %d, input %d: no step decoded the whole batch at once (it ran in parts, "
                         "most likely because %d KV blocks of %d tokens do not hold it together), so its decode "
                         "columns are empty\n",
                    rows[i].batch, rows[i].input, model_num_kv_blocks(m), model_block_size(m));
    print_gpu_side(out, rows, n_rows);
    print_host_side(out, rows, n_rows);
    for (int i = 0; i < n_rows && o->profile_ops; i++)
        print_ops(out, &rows[i], ceil);
    for (int i = 0; i < n_rows; i++)
        inferd_free(rows[i].steps_ms);
    inferd_free(rows);
    engine_free(e);
    model_prof_enable(m, 0);
    return rc;
}
