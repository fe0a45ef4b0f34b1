/* bench/bench_run.c: one `inferd bench serve` run (bench_serve_run):
 * resolve the model (GET /v1/models when not given) and the tokenizer, build
 * the prompts and request bodies, warm up, drive the measured requests
 * through bench_client_run(), then print the table and save the JSON.
 *
 * The server is never trusted to be up: an unreachable server or failing
 * requests still end in a full report (every request classified) and a
 * non-zero exit status, never in a crash or a hang beyond --timeout.
 *
 * Everything that can be prepared is prepared before the clock starts:
 * prompts are tokenized and every request body is serialized up front, so
 * the measured loop only sends bytes and parses responses. Warm-up requests
 * reuse the first bodies and are not reported. Not done here: HTTP/2,
 * retries, or multiple runs (sweeps are the caller's loop).
 */
#include <errno.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include <cjson/cJSON.h>

#include "common/alloc.h"
#include "common/log.h"
#include "common/util.h"
#include "bench/bench_serve.h"

/* Everything a run owns, freed by free_ctx whatever stage it reached. */
typedef struct {
    const bench_serve_opts *o;
    char *base;       /* base URL without a trailing '/' */
    char *url;        /* base + endpoint */
    char *model;      /* NULL: unknown, field omitted */
    const char *tok_dir;
    tokenizer *tok;
    bool chat;
    const char *api_key;
    bench_prompt *prompts;
    int n;
    char **bodies;    /* [n] */
    double *arrivals; /* [n] */
} run_ctx;

/* A heap string of exactly the formatted length (two vsnprintf passes). */
static char *str_printf(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static char *str_printf(const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(NULL, 0, fmt, ap);
    va_end(ap);
    char *s = inferd_malloc((size_t)n + 1);
    va_start(ap, fmt);
    vsnprintf(s, (size_t)n + 1, fmt, ap);
    va_end(ap);
    return s;
}

/* --model doubles as the tokenizer directory when it names a local
 * directory. */
static bool is_dir(const char *p)
{
    struct stat st;
    return p && stat(p, &st) == 0 && S_ISDIR(st.st_mode);
}

/* First model id from GET /v1/models; NULL (with a warning) on any failure. */
static char *query_model(const run_ctx *c)
{
    char *url = str_printf("%s/v1/models", c->base);
    char *body = NULL;
    long code = 0;
    char *id = NULL;
    if (bench_http_get(url, c->api_key, &body, &code) != INFERD_OK) {
        INFERD_LOG_WARN("bench: could not list models (%s); requests carry no model name", inferd_last_error());
    } else {
        cJSON *root = cJSON_Parse(body);
        const cJSON *data = cJSON_GetObjectItemCaseSensitive(root, "data");
        const cJSON *first = cJSON_IsArray(data) ? cJSON_GetArrayItem(data, 0) : NULL;
        const cJSON *v = cJSON_GetObjectItemCaseSensitive(first, "id");
        if (code == 200 && cJSON_IsString(v))
            id = inferd_strdup(v->valuestring);
        else
            INFERD_LOG_WARN("bench: GET %s gave HTTP %ld without a model id; requests carry no model name", url, code);
        cJSON_Delete(root);
    }
    inferd_free(body);
    inferd_free(url);
    return id;
}

/* One request body, serialized once before the run. Chat requests carry
 * both max_tokens and max_completion_tokens (servers differ in which they
 * read); streamed requests ask for the usage chunk, which gives the true
 * token counts. Id prompts go out as a JSON array of ints (completions
 * only). The copy moves the text to inferd's allocator. */
static char *make_body(const run_ctx *c, const bench_prompt *p)
{
    const bench_serve_opts *o = c->o;
    cJSON *b = cJSON_CreateObject();
    if (c->model)
        cJSON_AddStringToObject(b, "model", c->model);
    if (c->chat) {
        cJSON *msgs = cJSON_AddArrayToObject(b, "messages");
        cJSON *m = cJSON_CreateObject();
        cJSON_AddStringToObject(m, "role", "user");
        cJSON_AddStringToObject(m, "content", p->text ? p->text : "");
        cJSON_AddItemToArray(msgs, m);
    } else if (p->ids) {
        cJSON *arr = cJSON_AddArrayToObject(b, "prompt");
        for (int i = 0; i < p->n_ids; i++)
            cJSON_AddItemToArray(arr, cJSON_CreateNumber(p->ids[i]));
    } else {
        cJSON_AddStringToObject(b, "prompt", p->text ? p->text : "");
    }
    cJSON_AddNumberToObject(b, "max_tokens", p->output_len);
    if (c->chat)
        cJSON_AddNumberToObject(b, "max_completion_tokens", p->output_len);
    cJSON_AddNumberToObject(b, "temperature", o->temperature);
    if (o->ignore_eos)
        cJSON_AddBoolToObject(b, "ignore_eos", true);
    cJSON_AddBoolToObject(b, "stream", !o->disable_stream);
    if (!o->disable_stream) {
        cJSON *so = cJSON_AddObjectToObject(b, "stream_options");
        cJSON_AddBoolToObject(so, "include_usage", true);
    }
    char *txt = cJSON_PrintUnformatted(b);
    cJSON_Delete(b);
    char *copy = inferd_strdup(txt);
    cJSON_free(txt);
    return copy;
}

/* Model, tokenizer, prompts, bodies, arrivals. Returns an exit code:
 * 2 for invalid dataset options, 1 for any other failure (tokenizer,
 * dataset file); c is left for free_ctx either way. An unreachable server
 * is not an error here: without --model the name is just omitted. */
static int prepare(run_ctx *c)
{
    const bench_serve_opts *o = c->o;
    /* --base-url wins over host/port; trailing slashes are trimmed so that
     * base + "/v1/..." never has "//" (some servers route it elsewhere) */
    c->base = o->base_url ? inferd_strdup(o->base_url) : str_printf("http://%s:%d", o->host, o->port);
    size_t bl = strlen(c->base);
    while (bl > 0 && c->base[bl - 1] == '/')
        c->base[--bl] = '\0';
    c->url = str_printf("%s%s", c->base, o->endpoint);
    /* the endpoint decides the body and the response shapes; any path
     * containing chat/completions is treated as chat */
    c->chat = strstr(o->endpoint, "chat/completions") != NULL;
    /* the environment string is borrowed: valid for the process lifetime */
    c->api_key = o->api_key ? o->api_key : getenv("OPENAI_API_KEY");
    c->model = o->model ? inferd_strdup(o->model) : query_model(c);
    c->tok_dir = o->tokenizer;
    if (!c->tok_dir && c->model && is_dir(c->model))
        c->tok_dir = c->model;
    if (c->tok_dir && tok_load(c->tok_dir, &c->tok) != INFERD_OK) {
        fprintf(stderr, "inferd bench serve: tokenizer %s: %s\n", c->tok_dir, inferd_last_error());
        return 1;
    }
    if (!c->tok && o->dataset == BENCH_DATA_RANDOM && !o->quiet)
        INFERD_LOG_WARN("bench: no --tokenizer: random prompts use %s; the server's usage gives the true lengths",
                 c->chat ? "English words (about one token each)" : "ids 3..258");
    /* vLLM's general --input-len / --output-len win over the dataset's own
     * flags: random takes them as its lengths (the range ratio still
     * applies), sharegpt/jsonl the output one as a fixed length */
    bench_dataset_opts dopt = {
        .kind = o->dataset, .path = o->dataset_path, .num_prompts = o->num_prompts,
        .input_len = o->input_len > 0 ? o->input_len : o->random_input_len,
        .output_len = o->output_len > 0 ? o->output_len : o->random_output_len,
        .range_ratio = o->random_range_ratio,
        .fixed_output_len = o->output_len > 0 ? o->output_len : o->fixed_output_len,
        .seed = o->seed, .text_only = c->chat, .tok = c->tok,
    };
    inferd_status st = bench_dataset_build(&dopt, &c->prompts, &c->n);
    if (st != INFERD_OK) {
        fprintf(stderr, "inferd bench serve: dataset: %s\n", inferd_last_error());
        return st == INFERD_ERR_INVALID_ARG ? 2 : 1;
    }
    /* bodies are serialized before the clock starts: no JSON work inside
     * the measured loop but the response parsing */
    c->bodies = inferd_calloc((size_t)c->n, sizeof *c->bodies);
    for (int i = 0; i < c->n; i++)
        c->bodies[i] = make_body(c, &c->prompts[i]);
    c->arrivals = inferd_malloc((size_t)c->n * sizeof *c->arrivals);
    /* the schedule is fixed before the run, so a slow server does not
     * lower the offered load (open loop, as vLLM) */
    bench_arrivals(c->n, o->request_rate, o->burstiness, o->seed, c->arrivals);
    return 0;
}

/* Safe on a partly prepared context (the fields start NULL/0). */
static void free_ctx(run_ctx *c)
{
    for (int i = 0; c->bodies && i < c->n; i++)
        inferd_free(c->bodies[i]);
    inferd_free(c->bodies);
    inferd_free(c->arrivals);
    bench_dataset_free(c->prompts, c->n);
    if (c->tok)
        tok_free(c->tok);
    inferd_free(c->model);
    inferd_free(c->url);
    inferd_free(c->base);
}

/* A one-line progress bar redrawn with '\r' on stderr (installed only when
 * stderr is a terminal), so stdout stays the clean table. */
static void draw_progress(void *ud, int n_done, int n_failed, int n_total, int64_t out_tokens, double t)
{
    (void)ud;
    enum { W = 30 };
    int fill = n_total > 0 ? (int)((int64_t)W * n_done / n_total) : W;
    char bar[W + 1];
    for (int i = 0; i < W; i++)
        /* fill is in [0, W]: computed in int64 so n_done * W cannot overflow */
        bar[i] = i < fill ? '=' : (i == fill ? '>' : ' ');
    bar[W] = '\0';
    fprintf(stderr, "\r%7d/%-7d [%s] %7.1fs  failed %d  %.0f out tok/s   ", n_done, n_total, bar, t,
            n_failed, t > 0 ? (double)out_tokens / t : 0.0);
    fflush(stderr);
}

/* The transfer settings shared by the warm-up and the measured run. */
static bench_client_opts client_opts(const run_ctx *c, volatile sig_atomic_t *stop)
{
    const bench_serve_opts *o = c->o;
    return (bench_client_opts){
        .url = c->url, .api_key = c->api_key, .stream = !o->disable_stream, .chat = c->chat,
        .timeout_s = o->timeout_s, .max_concurrency = o->max_concurrency, .stop = stop,
    };
}

/* k requests, all at once (no arrival schedule), cycling over the bodies;
 * their results are only counted for the one-line summary. A SIGINT here
 * also interrupts the measured run, which then reports nothing sent. */
static void warmup(const run_ctx *c, volatile sig_atomic_t *stop)
{
    int k = c->o->num_warmups;
    bench_client_opts co = client_opts(c, stop);
    /* borrowed pointers into c->bodies: only this array is freed */
    char **bodies = inferd_malloc((size_t)k * sizeof *bodies);
    for (int i = 0; i < k; i++)
        bodies[i] = c->bodies[i % c->n];
    co.bodies = bodies;
    co.n = k;
    bench_result *res = inferd_calloc((size_t)k, sizeof *res);
    double dur = 0;
    int ok = 0;
    if (bench_client_run(&co, res, &dur, NULL) == INFERD_OK)
        for (int i = 0; i < k; i++)
            ok += res[i].err == BENCH_ERR_NONE;
    if (!c->o->quiet)
        fprintf(stderr, "Warmup: %d/%d requests completed in %.2f s\n", ok, k, dur);
    for (int i = 0; i < k; i++)
        bench_result_free(&res[i]);
    inferd_free(res);
    inferd_free(bodies);
}

/* mkdir -p: every missing component of dir, mode 0777 (less the umask).
 * An existing directory is fine; anything else that blocks the path (a
 * file, no permission) is INFERD_ERR_IO naming the component. */
static inferd_status make_dirs(const char *dir)
{
    if (!dir[0])
        return inferd_set_error(INFERD_ERR_INVALID_ARG, "--result-dir: empty path");
    char *path = inferd_strdup(dir);
    inferd_status st = INFERD_OK;
    for (char *p = path + 1; st == INFERD_OK; p++) {
        bool end = *p == '\0';
        if (*p != '/' && !end)
            continue;
        char saved = *p;
        *p = '\0';
        struct stat sb;
        int err = mkdir(path, 0777) == 0 ? 0 : errno;
        if (err != 0 && !(err == EEXIST && stat(path, &sb) == 0 && S_ISDIR(sb.st_mode)))
            st = inferd_set_error(INFERD_ERR_IO, "--result-dir: cannot create %s: %s", path,
                                  err == EEXIST ? "not a directory" : strerror(err));
        *p = saved;
        if (end)
            break;
    }
    inferd_free(path);
    return st;
}

/* path inside --result-dir unless absolute (Python's os.path.join, as
 * vLLM joins them); heap. */
static char *in_result_dir(const bench_serve_opts *o, const char *name)
{
    if (!o->result_dir || name[0] == '/')
        return inferd_strdup(name);
    return str_printf("%s/%s", o->result_dir, name);
}

/* vLLM's file name: <backend>-<rate>qps[-concurrency<N>]-<model>-<date>.json
 * in --result-dir. The model part keeps only the last path component, with
 * '/' and ' ' replaced, so it is one file name. */
static char *default_result_path(const run_ctx *c)
{
    const bench_serve_opts *o = c->o;
    char rate[32], conc[32] = "", date[32];
    if (isinf(o->request_rate))
        snprintf(rate, sizeof rate, "inf");
    else
        snprintf(rate, sizeof rate, "%g", o->request_rate);
    if (o->max_concurrency > 0)
        snprintf(conc, sizeof conc, "-concurrency%d", o->max_concurrency);
    time_t now = time(NULL);
    struct tm tmv;
    localtime_r(&now, &tmv);
    strftime(date, sizeof date, "%Y%m%d-%H%M%S", &tmv);
    const char *model = c->model ? c->model : "unknown";
    const char *slash = strrchr(model, '/');
    char *base_model = inferd_strdup(slash && slash[1] ? slash + 1 : model);
    for (char *p = base_model; *p; p++)
        if (*p == '/' || *p == ' ')
            *p = '_';
    char *name = str_printf("%s-%sqps%s-%s-%s.json", c->chat ? "openai-chat" : "openai", rate, conc, base_model,
                            date);
    inferd_free(base_model);
    char *path = in_result_dir(o, name);
    inferd_free(name);
    return path;
}

/* Write the result JSON where the flags say; false (message printed) when
 * the directory cannot be made or the file cannot be written. *path_out
 * gets the path either way (heap). */
static bool save_result(const run_ctx *c, const bench_summary *s, const bench_meta *m, const bench_result *res,
                        const int *sent_len, char **path_out)
{
    const bench_serve_opts *o = c->o;
    char *path = o->result_filename ? in_result_dir(o, o->result_filename) : default_result_path(c);
    *path_out = path;
    if ((o->result_dir && make_dirs(o->result_dir) != INFERD_OK) ||
        bench_save_json(path, s, m, res, c->n, sent_len) != INFERD_OK) {
        fprintf(stderr, "inferd bench serve: cannot save the result: %s\n", inferd_last_error());
        return false;
    }
    if (!o->quiet)
        fprintf(stderr, "Result saved to %s\n", path);
    return true;
}

/* Table, JSON, warnings; returns the exit code.
 * Ownership: with rep, the results, sent_len and the path move to rep (the
 * caller frees with bench_serve_report_free); without it they are freed
 * here. Only the first three failures are printed: the table has the
 * counts by class and the JSON every message. A result that was asked for
 * and could not be written makes the exit code 1: a script must not take
 * a run whose numbers are lost for a success. */
static int report(const run_ctx *c, bench_result *res, double duration, bool interrupted,
                  bench_serve_report *rep)
{
    const bench_serve_opts *o = c->o;
    int *sent_len = inferd_malloc((size_t)c->n * sizeof *sent_len);
    bool *sent_exact = inferd_malloc((size_t)c->n * sizeof *sent_exact);
    for (int i = 0; i < c->n; i++) {
        sent_len[i] = c->prompts[i].prompt_len;
        sent_exact[i] = c->prompts[i].exact;
    }
    bench_summary s;
    bench_summarize(res, c->n, sent_len, sent_exact, duration, &o->report, &s);
    bench_meta m = {
        .backend = c->chat ? "openai-chat" : "openai", .base_url = c->base, .endpoint = o->endpoint,
        .model_id = c->model, .tokenizer_id = c->tok_dir,
        .dataset_name = o->dataset == BENCH_DATA_RANDOM ? "random"
                        : o->dataset == BENCH_DATA_SHAREGPT ? "sharegpt" : "jsonl",
        .request_rate = o->request_rate, .burstiness = o->burstiness,
        .max_concurrency = o->max_concurrency, .interrupted = interrupted,
    };
    if (!o->quiet) {
        if (interrupted) {
            int in_flight = 0;
            for (int i = 0; i < c->n; i++)
                in_flight += res[i].err == BENCH_ERR_CANCELLED && res[i].start_s >= 0;
            printf("Interrupted: partial results of %d finished requests (%d aborted in flight, %d not sent)\n",
                   s.completed + s.failed, in_flight, s.cancelled - in_flight);
        }
        bench_print_table(stdout, &s, &m);
        fflush(stdout);
        for (int i = 0, shown = 0; i < c->n && shown < 3; i++)
            if (res[i].err != BENCH_ERR_NONE && res[i].err != BENCH_ERR_CANCELLED && res[i].error) {
                fprintf(stderr, "request %d failed (%s): %s\n", i, bench_err_name(res[i].err), res[i].error);
                shown++;
            }
        if (s.input_len_mismatches > 0)
            fprintf(stderr, "warning: %d requests: the server counted a prompt length other than the %s sent\n",
                    s.input_len_mismatches, "token ids");
    }
    char *path = NULL;
    bool saved = true;
    if (o->save_result || o->result_filename)
        saved = save_result(c, &s, &m, res, sent_len, &path);
    /* 0 only for a clean, complete, saved run, so scripts can trust the numbers */
    int rc = (s.completed == 0 || s.failed > 0 || s.cancelled > 0 || interrupted || !saved) ? 1 : 0;
    if (rep) {
        rep->summary = s;
        rep->results = res;
        rep->sent_len = sent_len;
        rep->n = c->n;
        rep->model_id = c->model ? inferd_strdup(c->model) : NULL;
        rep->result_path = path;
        rep->interrupted = interrupted;
    } else {
        for (int i = 0; i < c->n; i++)
            bench_result_free(&res[i]);
        inferd_free(res);
        inferd_free(sent_len);
        inferd_free(path);
    }
    inferd_free(sent_exact);
    return rc;
}

/* `stop` is only read, never reset: the caller owns the flag. Writes the
 * table to stdout and progress/diagnostics to stderr (nothing when quiet).
 * NOTE: `interrupted` is read after the run, so a SIGINT that arrives
 * just after the last request completed still marks the run interrupted
 * (exit 1) although every result is complete. */
int bench_serve_run(const bench_serve_opts *o, volatile sig_atomic_t *stop, bench_serve_report *rep)
{
    if (rep)
        memset(rep, 0, sizeof *rep);
    run_ctx c = {.o = o};
    int rc = prepare(&c);
    if (rc != 0) {
        free_ctx(&c);
        return rc;
    }
    if (o->num_warmups > 0)
        warmup(&c, stop);
    if (!o->quiet) {
        char rate[32], conc[32];
        snprintf(rate, sizeof rate, isinf(o->request_rate) ? "inf" : "%g", o->request_rate);
        snprintf(conc, sizeof conc, o->max_concurrency > 0 ? "%d" : "none", o->max_concurrency);
        fprintf(stderr, "Starting benchmark: %d requests to %s (model %s), request rate %s, burstiness %g, "
                        "max concurrency %s\n",
                c.n, c.url, c.model ? c.model : "?", rate, o->burstiness, conc);
    }
    bench_client_opts co = client_opts(&c, stop);
    co.bodies = c.bodies;
    co.n = c.n;
    co.arrival_s = c.arrivals;
    if (!o->quiet && !o->disable_progress && isatty(STDERR_FILENO))
        co.progress = draw_progress;
    /* owned here until report(), which frees it or hands it to rep */
    bench_result *res = inferd_calloc((size_t)c.n, sizeof *res);
    double duration = 0;
    if (bench_client_run(&co, res, &duration, NULL) != INFERD_OK) {
        fprintf(stderr, "inferd bench serve: %s\n", inferd_last_error());
        inferd_free(res);
        free_ctx(&c);
        return 1;
    }
    /* end the '\r' progress line so the table starts on a fresh line */
    if (co.progress)
        fputc('\n', stderr);
    bool interrupted = stop && *stop;
    rc = report(&c, res, duration, interrupted, rep);
    free_ctx(&c);
    return rc;
}

/* Frees what report() moved into rep; rep is zeroed, NULL is a no-op. */
void bench_serve_report_free(bench_serve_report *rep)
{
    if (!rep)
        return;
    for (int i = 0; rep->results && i < rep->n; i++)
        bench_result_free(&rep->results[i]);
    inferd_free(rep->results);
    inferd_free(rep->sent_len);
    inferd_free(rep->model_id);
    inferd_free(rep->result_path);
    memset(rep, 0, sizeof *rep);
}
