/* cli/gen_batch.c: `inferd generate` through the engine (see gen_batch.h).
 *
 * Three phases: parse and tokenize every prompt (any bad line stops here
 * with an error naming it, before the model does any work); submit
 * everything to one engine (when the engine's wait queue is full, collect
 * finished output first and retry); collect the streams in input order,
 * printing each result as soon as it and all earlier ones are done. The
 * engine thread does the batching; this thread only waits on streams. A
 * single --prompt is a list of one, so it shares every step.
 *
 * Sampling fields of a line are read through the sampling table
 * (sampling_row_set_number) and the whole line is checked with
 * sampling_params_validate, so a line accepts exactly what a flag or an API
 * request accepts.
 *
 * Design choice: results are printed in input order, not completion order,
 * so output lines pair with input lines and runs are diffable; the cost is
 * head-of-line buffering (a long first prompt holds back the lines of
 * finished later ones, whose output waits in their streams). Submission is
 * paced by the engine's queue bound, so a file of any length runs in
 * bounded engine memory. Not done here: retries, per-line timeouts, or
 * parallel tokenization (parsing is single-threaded and happens up front).
 */
#include <cjson/cJSON.h>
#include <ctype.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "common/alloc.h"
#include "common/usage.h"
#include "common/util.h"
#include "cli/gen_batch.h"

/* One prompt of the job, from parse to release. Owns ids and stops[]; the
 * stream is the consumer's reference while the request is submitted. */
typedef struct {
    int line; /* 1-based line number in the file */
    int32_t *ids;
    int n_ids;
    sampling_params sp; /* stop[] point into stops (file) or the caller's strings (one prompt) */
    char *stops[SAMPLING_MAX_STOP];
    bool max_tokens_given; /* by the line itself */
    engine_stream *stream;
} gb_item;

typedef struct {
    /* growable array (doubling), so parsing a file is O(lines) */
    gb_item *v;
    int n, cap;
} gb_list;

static int line_fail(const char *path, int line, const char *fmt, ...) __attribute__((format(printf, 3, 4)));

/* One-line error naming the file and line; returns exit code 2. */
static int line_fail(const char *path, int line, const char *fmt, ...)
{
    char msg[512];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    if (path)
        fprintf(stderr, "inferd: error: %s:%d: %s\n", path, line, msg);
    else
        fprintf(stderr, "inferd: error: %s\n", msg);
    return 2;
}

/* Free an item in any state: a failed parse, a queued request (the release
 * aborts it in the engine), or a collected one (stream already NULL). */
static void item_free(gb_item *it)
{
    inferd_free(it->ids);
    for (int i = 0; i < SAMPLING_MAX_STOP; i++)
        inferd_free(it->stops[i]);
    if (it->stream)
        engine_stream_release(it->stream);
}

/* --- parsing -------------------------------------------------------------- */

/* cJSON keeps every number as a double: an integer field must be integral
 * and in range as a double before the cast, which is otherwise undefined
 * for out-of-range values. */
static bool json_int(const cJSON *v, long long lo, long long hi, long long *out)
{
    if (!cJSON_IsNumber(v) || v->valuedouble != floor(v->valuedouble) || v->valuedouble < (double)lo ||
        v->valuedouble > (double)hi)
        return false;
    *out = (long long)v->valuedouble;
    return true;
}

/* A JSON list of non-negative int32 into a heap array (*ids, caller frees;
 * at least one element is allocated so an empty list is not a NULL
 * buffer). Returns NULL or a static error text naming no field (the caller
 * adds the key). On error *ids is NULL. */
static const char *parse_int_array(const cJSON *v, int max_n, int32_t **ids, int *n)
{
    if (!cJSON_IsArray(v))
        return "must be a list of integers";
    int cnt = cJSON_GetArraySize(v);
    if (cnt > max_n)
        return "has too many entries";
    *ids = inferd_malloc(sizeof(int32_t) * (size_t)(cnt > 0 ? cnt : 1));
    *n = 0;
    const cJSON *x;
    cJSON_ArrayForEach(x, v)
    {
        long long t;
        if (!json_int(x, 0, INT32_MAX, &t)) {
            inferd_free(*ids);
            *ids = NULL;
            return "must be a list of non-negative integers";
        }
        (*ids)[(*n)++] = (int32_t)t;
    }
    return NULL;
}

/* "stop": a string or a list of strings (count checked by the row, each
 * string by the validator). */
/* NOTE: the line's list replaces the defaults' list, it does not extend
 * it. The copies are owned by the item (it->stops); sp.stop[] is re-pointed
 * at them only after all entries were taken. */
static const char *parse_stop(const cJSON *v, gb_item *it)
{
    int cnt = cJSON_IsString(v) ? 1 : cJSON_IsArray(v) ? cJSON_GetArraySize(v) : -1;
    if (cnt < 0)
        return "\"stop\" must be a string or a list of strings";
    if (sampling_row_check(sampling_row_find("stop"), cnt) != INFERD_OK)
        return inferd_last_error();
    it->sp.n_stop = 0; /* the line's list replaces the defaults' */
    for (int i = 0; i < cnt; i++) {
        const cJSON *x = cJSON_IsString(v) ? v : cJSON_GetArrayItem(v, i);
        if (!cJSON_IsString(x))
            return "\"stop\" must be a string or a list of strings";
        inferd_free(it->stops[it->sp.n_stop]); /* a repeated "stop" key */
        it->stops[it->sp.n_stop++] = inferd_strdup(x->valuestring);
    }
    for (int i = 0; i < it->sp.n_stop; i++)
        it->sp.stop[i] = it->stops[i];
    return NULL;
}

/* "stop_token_ids": the count through the row first (so the error message
 * is the table's), then the entries; vocabulary bounds come later, from
 * sampling_params_validate with the real vocab size. Replaces the defaults'
 * list. */
static const char *parse_stop_ids(const cJSON *f, sampling_params *sp)
{
    if (cJSON_IsArray(f) && sampling_row_check(sampling_row_find("stop_token_ids"), cJSON_GetArraySize(f)) != INFERD_OK)
        return inferd_last_error();
    int32_t *ids = NULL;
    int n = 0;
    if (parse_int_array(f, SAMPLING_MAX_STOP, &ids, &n))
        return "\"stop_token_ids\" must be a list of non-negative integers";
    memcpy(sp->stop_token_ids, ids, sizeof(int32_t) * (size_t)n);
    sp->n_stop_token_ids = n;
    inferd_free(ids);
    return NULL;
}

/* One sampling field through its row; returns an error text or NULL.
 * *known = false when the key is no row's key. */
/* Only the API spelling (top_p) is a key here: sampling_row_find also
 * matches the flag spelling (top-p), which a JSON line must not use, hence
 * the exact comparison with row->key. A number or bool is stored through
 * the row, exactly as the OpenAI adapter does. */
static const char *parse_field(const cJSON *f, gb_item *it, bool *known)
{
    const sampling_row *row = sampling_row_find(f->string);
    *known = row && strcmp(row->key, f->string) == 0;
    if (!*known)
        return NULL;
    if (strcmp(row->key, "stop") == 0)
        return parse_stop(f, it);
    if (strcmp(row->key, "stop_token_ids") == 0)
        return parse_stop_ids(f, &it->sp);
    double v;
    if (row->opt.kind == OPT_BOOL) {
        if (!cJSON_IsBool(f)) {
            inferd_set_error(INFERD_ERR_INVALID_ARG, "\"%s\" must be true or false", row->key);
            return inferd_last_error();
        }
        v = cJSON_IsTrue(f);
    } else if (!cJSON_IsNumber(f)) {
        inferd_set_error(INFERD_ERR_INVALID_ARG, "\"%s\" must be %s", row->key,
                         row->opt.kind == OPT_FLOAT ? "a number" : "an integer");
        return inferd_last_error();
    } else {
        v = f->valuedouble;
    }
    if (sampling_row_set_number(row, &it->sp, v) != INFERD_OK)
        return inferd_last_error();
    if (strcmp(row->key, "max_tokens") == 0)
        it->max_tokens_given = true;
    return NULL;
}

/* One JSON line into *it (whose sp already holds the defaults): sampling
 * fields in file order, then the prompt. Strict: unknown keys, wrong types
 * and an empty prompt are errors naming the line. tok may be NULL (then
 * only prompt_ids). Returns 0 or exit code 2 with the message printed;
 * whatever was allocated stays in *it for item_free. */
static int parse_json_line(const char *path, int line, const char *s, size_t n, const tokenizer *tok,
                           gb_item *it)
{
    cJSON *j = cJSON_ParseWithLength(s, n);
    if (!j)
        return line_fail(path, line, "%s", "invalid JSON");
    int rc = 0;
    const cJSON *prompt = NULL, *prompt_ids = NULL;
    if (!cJSON_IsObject(j)) {
        rc = line_fail(path, line, "%s", "expected a JSON object");
        goto out;
    }
    const cJSON *f;
    cJSON_ArrayForEach(f, j)
    {
        bool known;
        if (strcmp(f->string, "prompt") == 0) {
            prompt = f;
            continue;
        }
        if (strcmp(f->string, "prompt_ids") == 0) {
            prompt_ids = f;
            continue;
        }
        const char *err = parse_field(f, it, &known);
        if (err) {
            rc = line_fail(path, line, "%s", err);
            goto out;
        }
        if (!known) {
            rc = line_fail(path, line, "unknown field \"%s\"", f->string);
            goto out;
        }
    }
    if (!!prompt == !!prompt_ids) {
        rc = line_fail(path, line, "%s", "give exactly one of \"prompt\" and \"prompt_ids\"");
        goto out;
    }
    if (prompt_ids) {
        /* 1 << 24 ids: a sanity bound far above any context length, so a
         * broken file cannot ask for gigabytes; the fit check is later */
        const char *err = parse_int_array(prompt_ids, 1 << 24, &it->ids, &it->n_ids);
        if (err)
            rc = line_fail(path, line, "\"prompt_ids\" %s", err);
    } else if (!cJSON_IsString(prompt)) {
        rc = line_fail(path, line, "%s", "\"prompt\" must be a string");
    } else if (!tok) {
        rc = line_fail(path, line, "%s", "\"prompt\" needs a tokenizer (or use \"prompt_ids\")");
    } else if (tok_encode(tok, prompt->valuestring, strlen(prompt->valuestring), true, true, &it->ids,
                          &it->n_ids) != INFERD_OK) {
        rc = line_fail(path, line, "cannot tokenize the prompt: %s", inferd_last_error());
    }
    if (rc == 0 && it->n_ids == 0)
        rc = line_fail(path, line, "%s", "the prompt is empty");
out:
    cJSON_Delete(j);
    return rc;
}

/* A plain-text line is the prompt itself, tokenized like --prompt
 * (post-processor applied, special-token text parsed). UTF-8 is checked here to name the line in
 * the error. NOTE: unlike the JSON path, an empty encoding is not refused
 * here; engine_submit then refuses it ("prompt is empty") mid-run. */
static int parse_text_line(const char *path, int line, const char *s, size_t n, const tokenizer *tok,
                           gb_item *it)
{
    if (!tok)
        return line_fail(path, line, "%s", "text prompts need a tokenizer");
    if (!util_utf8_valid(s, n))
        return line_fail(path, line, "%s", "the prompt is not valid UTF-8");
    if (tok_encode(tok, s, n, true, true, &it->ids, &it->n_ids) != INFERD_OK)
        return line_fail(path, line, "cannot tokenize the prompt: %s", inferd_last_error());
    return 0;
}

/* Whitespace-only lines are skipped in both formats. */
static bool blank(const char *s, size_t n)
{
    for (size_t i = 0; i < n; i++)
        if (!isspace((unsigned char)s[i]))
            return false;
    return true;
}

/* Parse the whole file into items; returns 0 or an exit code.
 * The format is decided once, by the first non-blank line: '{' means JSON
 * lines, anything else plain text; a later line is never re-sniffed (a text
 * prompt may start with '{'). CRLF line ends are accepted. Every line is
 * also validated against the sampling rules with the real vocab, so all
 * input errors surface before the first request runs.
 * NOTE: an item is counted in L->n even when its parse failed, so that
 * gen_run's cleanup frees what the failed parse allocated. */
/* Parse the whole file into items; returns 0 or an exit code. */
static int parse_file(const char *path, const tokenizer *tok, int vocab, const sampling_params *defaults,
                      gb_list *L)
{
    char *buf = NULL;
    size_t len = 0;
    if (util_read_file(path, 0, &buf, &len) != INFERD_OK) {
        fprintf(stderr, "inferd: error: %s\n", inferd_last_error());
        return 2;
    }
    int rc = 0, json = -1, line = 0;
    for (size_t off = 0; off < len && rc == 0;) {
        const char *s = buf + off;
        const char *nl = memchr(s, '\n', len - off);
        size_t n = nl ? (size_t)(nl - s) : len - off;
        off += n + (nl ? 1 : 0);
        line++;
        if (n > 0 && s[n - 1] == '\r')
            n--;
        if (blank(s, n))
            continue;
        if (json < 0) {
            size_t i = 0;
            /* bounded by the non-blank character blank() found */
            while (isspace((unsigned char)s[i]))
                i++;
            json = s[i] == '{';
        }
        if (L->n == L->cap) {
            L->cap = L->cap ? 2 * L->cap : 64;
            L->v = inferd_realloc(L->v, sizeof *L->v * (size_t)L->cap);
        }
        gb_item *it = &L->v[L->n];
        memset(it, 0, sizeof *it);
        it->line = line;
        it->sp = *defaults; /* stop strings borrowed from the caller until the line sets its own */
        rc = json ? parse_json_line(path, line, s, n, tok, it) : parse_text_line(path, line, s, n, tok, it);
        if (rc == 0 && sampling_params_validate(&it->sp, vocab, NULL) != INFERD_OK)
            rc = line_fail(path, line, "%s", inferd_last_error());
        L->n++;
    }
    if (rc == 0 && L->n == 0) {
        fprintf(stderr, "inferd: error: %s: no prompts\n", path);
        rc = 2;
    }
    inferd_free(buf);
    return rc;
}

/* --- running -------------------------------------------------------------- */

/* One request's output as it is collected. */
/* lps non-NULL from the start means "logprobs were asked for", which keeps
 * the two arrays parallel even when the first output has no tokens. */
typedef struct {
    int32_t *ids;
    engine_logprob *lps; /* NULL unless logprobs were asked */
    int n_ids, cap;
    char *text;
    size_t text_len;
} gb_out;

/* Append one poll's output; text stays NUL-terminated for cJSON. */
static void out_append(gb_out *a, const engine_output *o)
{
    if (a->n_ids + o->n_tokens > a->cap) {
        a->cap = 2 * (a->n_ids + o->n_tokens);
        a->ids = inferd_realloc(a->ids, sizeof *a->ids * (size_t)a->cap);
        if (o->logprobs || a->lps)
            a->lps = inferd_realloc(a->lps, sizeof *a->lps * (size_t)a->cap);
    }
    memcpy(a->ids + a->n_ids, o->token_ids, sizeof *a->ids * (size_t)o->n_tokens);
    if (o->logprobs && a->lps)
        memcpy(a->lps + a->n_ids, o->logprobs, sizeof *a->lps * (size_t)o->n_tokens);
    a->n_ids += o->n_tokens;
    a->text = inferd_realloc(a->text, a->text_len + o->text_len + 1);
    memcpy(a->text + a->text_len, o->text, o->text_len);
    a->text_len += o->text_len;
    a->text[a->text_len] = '\0';
}

/* [{"id", "logprob", "top": [[id, logprob], ...]}, ...], one per token. */
static cJSON *logprobs_json(const gb_out *a)
{
    cJSON *arr = cJSON_CreateArray();
    for (int i = 0; i < a->n_ids; i++) {
        const engine_logprob *lp = &a->lps[i];
        cJSON *t = cJSON_CreateObject();
        cJSON_AddNumberToObject(t, "id", lp->token);
        cJSON_AddNumberToObject(t, "logprob", lp->logprob);
        cJSON *top = cJSON_AddArrayToObject(t, "top");
        for (int k = 0; k < lp->n_top; k++) {
            cJSON *pair = cJSON_CreateArray();
            cJSON_AddItemToArray(pair, cJSON_CreateNumber(lp->top_ids[k]));
            cJSON_AddItemToArray(pair, cJSON_CreateNumber(lp->top_logprobs[k]));
            cJSON_AddItemToArray(top, pair);
        }
        cJSON_AddItemToArray(arr, t);
    }
    return arr;
}

/* One JSON result line (format in gen_batch.h), flushed at once so a
 * consumer of stdout sees each result as soon as it is final. prompt_tokens
 * is the item's own count, usage through the shared usage writer. */
static void print_result(const gb_item *it, int index, const gb_out *a, const engine_output *last)
{
    cJSON *o = cJSON_CreateObject();
    cJSON_AddNumberToObject(o, "index", index);
    cJSON_AddStringToObject(o, "text", a->text);
    cJSON *arr = cJSON_AddArrayToObject(o, "token_ids");
    for (int i = 0; i < a->n_ids; i++)
        cJSON_AddItemToArray(arr, cJSON_CreateNumber(a->ids[i]));
    cJSON_AddStringToObject(o, "finish_reason", finish_reason_str(last->finish));
    inferd_usage_add_counts(o, &(inferd_usage){.prompt_tokens = it->n_ids,
                                                 .completion_tokens = last->completion_tokens});
    if (it->sp.logprobs >= 0 && a->lps)
        cJSON_AddItemToObject(o, "logprobs", logprobs_json(a));
    if (last->finish == FINISH_ERROR)
        cJSON_AddStringToObject(o, "error", last->error);
    char *s = cJSON_PrintUnformatted(o);
    fputs(s, stdout);
    fputc('\n', stdout);
    fflush(stdout);
    cJSON_free(s);
    cJSON_Delete(o);
}

/* b - a, or 0 when a timestamp is missing (0) or out of order. */
static double span_s(double a, double b)
{
    return a > 0 && b >= a ? b - a : 0;
}

/* The per-request timing line of the text and ids modes, from the
 * engine's timestamps (the format scripts/bench_cpu.sh and bench_gpu.py
 * parse): prefill = first scheduled .. whole prompt computed; decode = the
 * gaps between generated tokens. */
static void print_timing(int n_prompt, int n_gen, const engine_times *t)
{
    double prefill = span_s(t->first_scheduled, t->prefill_done);
    double decode = n_gen > 1 ? span_s(t->first_token, t->last_token) / (n_gen - 1) : 0;
    fprintf(stderr,
            "prompt tokens: %d, prefill: %.2f ms (%.1f tok/s), generated tokens: %d, decode: %.3f ms/token "
            "(%.1f tok/s), queue: %.2f ms, ttft: %.2f ms\n",
            n_prompt, prefill * 1e3, n_prompt / (prefill > 0 ? prefill : 1e-9), n_gen, decode * 1e3,
            decode > 0 ? 1.0 / decode : 0.0, span_s(t->arrival, t->first_scheduled) * 1e3,
            span_s(t->arrival, t->first_token) * 1e3);
}

/* Text and ids modes print output as it arrives. */
/* Flushed every time: the point of the text mode is to watch tokens
 * arrive. */
static void print_delta(gen_out_mode mode, const engine_output *o)
{
    if (mode == GEN_OUT_TEXT && o->text_len)
        fwrite(o->text, 1, o->text_len, stdout);
    if (mode == GEN_OUT_IDS)
        for (int i = 0; i < o->n_tokens; i++)
            printf("%d ", o->token_ids[i]);
    fflush(stdout);
}

/* Wait for item i to finish and print it. Returns false on FINISH_ERROR.
 * Blocks on the stream (no timeout: the engine always finishes a request,
 * by stop, length, abort or error). The stream is released here, which
 * frees the engine's output; the item keeps only its prompt. In the text
 * mode the final newline is added only on a terminal, so a pipe receives
 * the exact generated bytes. */
/* Wait for item i to finish and print it. Returns false on FINISH_ERROR. */
static bool collect(gb_item *it, int index, gen_out_mode mode, uint64_t *gen_tokens)
{
    gb_out a = {.text = inferd_strdup("")};
    if (it->sp.logprobs >= 0)
        a.lps = inferd_malloc(sizeof *a.lps);
    engine_output o;
    for (;;) {
        if (engine_stream_wait(it->stream, &o, -1)) {
            out_append(&a, &o);
            print_delta(mode, &o);
        }
        bool done = o.finished;
        bool ok = !(done && o.finish == FINISH_ERROR);
        if (done && mode == GEN_OUT_JSON)
            print_result(it, index, &a, &o);
        if (done && mode != GEN_OUT_JSON) {
            if (isatty(STDOUT_FILENO) || mode == GEN_OUT_IDS)
                putchar('\n');
            fflush(stdout);
            if (!ok)
                fprintf(stderr, "inferd: error: generation failed: %s\n", o.error);
            print_timing(it->n_ids, a.n_ids, &o.times);
        }
        engine_output_free(&o);
        if (done) {
            *gen_tokens += (uint64_t)a.n_ids;
            inferd_free(a.ids);
            inferd_free(a.lps);
            inferd_free(a.text);
            engine_stream_release(it->stream);
            it->stream = NULL;
            return ok;
        }
    }
}

/* A prompt that did not choose max_tokens gets at most the room it leaves.
 * When the prompt leaves no room at all the value is kept and the submit
 * fails with TOO_LONG, naming the line. min_tokens follows max_tokens down
 * so the pair stays valid. */
/* A prompt that did not choose max_tokens gets at most the room it leaves. */
static void cap_max_tokens(engine *e, gb_item *it)
{
    sched_fit_limits lim;
    engine_get_fit_limits(e, &lim);
    int64_t room = sched_fit_room(&lim, it->n_ids);
    if (room >= 1 && it->sp.max_tokens > room)
        it->sp.max_tokens = (int32_t)room;
    if (it->sp.min_tokens > it->sp.max_tokens)
        it->sp.min_tokens = it->sp.max_tokens;
}

/* Submit ahead as far as the engine's queue allows, collect in order.
 * On QUEUE_FULL with results outstanding, collect the next one first (the
 * engine drains its queue meanwhile); with none outstanding, the count is stale (the engine
 * refreshes n_waiting_sched once per loop), so sleep 1 ms and retry.
 * Returns 0, 1 when some request ended in FINISH_ERROR, or 2 when the
 * engine refused a request (e.g. TOO_LONG for a line whose own max_tokens
 * does not fit).
 * NOTE: that refusal comes at submit time, so results of earlier lines may
 * already be printed: unlike parse errors, it is not an "all or nothing"
 * failure. Streams still open are released (aborted) by gen_run. */
static int run_all(engine *e, const gen_job *job, gb_list *L, uint64_t *prompt_tokens, uint64_t *gen_tokens)
{
    int next_submit = 0, rc = 0;
    for (int next_collect = 0; next_collect < L->n; next_collect++) {
        while (next_submit < L->n) {
            gb_item *it = &L->v[next_submit];
            if (job->cap_max_tokens && !it->max_tokens_given)
                cap_max_tokens(e, it);
            engine_request rq = {.prompt_ids = it->ids, .n_prompt = it->n_ids, .sp = it->sp};
            inferd_status st = engine_submit(e, &rq, &it->stream);
            if (st == INFERD_ERR_QUEUE_FULL) {
                if (next_submit > next_collect)
                    break;
                usleep(1000); /* the engine's queue count is a step behind */
                continue;
            }
            if (st != INFERD_OK) {
                line_fail(job->prompts_file, it->line, "%s", inferd_last_error());
                return 2;
            }
            *prompt_tokens += (uint64_t)it->n_ids;
            next_submit++;
        }
        if (!collect(&L->v[next_collect], next_collect, job->out, gen_tokens))
            rc = 1;
    }
    return rc;
}

/* Aggregate throughput and engine counters on stderr. */
/* The engine counters are read after a bounded idle wait; after a timeout
 * they may lag by a step, which only affects these diagnostics. */
static void print_summary(engine *e, int n_prompts, uint64_t pt, uint64_t gt, double dt)
{
    engine_stats st;
    engine_wait_idle(e, 10000); /* the stats snapshot is final once idle */
    engine_get_stats(e, &st);
    if (dt <= 0)
        dt = 1e-9;
    fprintf(
        stderr,
        "prompts: %d, prompt tokens: %llu (%.1f tok/s), generated tokens: %llu (%.1f tok/s), elapsed %.3f s, "
        "steps %llu, preemptions: %llu, prefix cache hits: %llu of %llu looked-up tokens\n",
        n_prompts, (unsigned long long)pt, pt / dt, (unsigned long long)gt, gt / dt, dt,
        (unsigned long long)st.steps, (unsigned long long)st.preemptions, (unsigned long long)st.prefix_hits,
        (unsigned long long)st.prefix_queries);
}

/* The job's prompts as a list: the file's lines, or the one prompt (its
 * stop strings borrowed from the caller). */
/* The single prompt is copied, so gen_run never keeps a pointer into the
 * caller's buffer; its sampling params (and thus stop strings) are the
 * defaults, borrowed for the duration of the run. */
static int build_list(const model *m, const tokenizer *tok, const gen_job *job, gb_list *L)
{
    int vocab = model_get_config(m)->vocab_size;
    if (job->prompts_file)
        return parse_file(job->prompts_file, tok, vocab, job->defaults, L);
    L->v = inferd_calloc(1, sizeof *L->v);
    L->n = L->cap = 1;
    gb_item *it = &L->v[0];
    it->line = 1;
    it->sp = *job->defaults;
    it->n_ids = job->n_prompt;
    it->ids = inferd_malloc(sizeof(int32_t) * (size_t)(job->n_prompt > 0 ? job->n_prompt : 1));
    memcpy(it->ids, job->prompt_ids, sizeof(int32_t) * (size_t)job->n_prompt);
    return 0;
}

/* Order: parse everything, then create and start the engine, so an input
 * error costs no engine. The engine is freed before returning (stopped:
 * requests still live are aborted); m and tok stay the caller's. The
 * summary is skipped on exit code 2 (the run stopped early). */
int gen_run(model *m, const tokenizer *tok, const engine_opts *eo, const gen_job *job)
{
    gb_list L = {0};
    int rc = build_list(m, tok, job, &L);
    engine *e = NULL;
    if (rc == 0 && engine_create(eo, m, tok, &e) != INFERD_OK) {
        fprintf(stderr, "inferd: error: cannot create the engine: %s\n", inferd_last_error());
        rc = 1;
    }
    if (rc == 0 && engine_start(e) != INFERD_OK) {
        fprintf(stderr, "inferd: error: %s\n", inferd_last_error());
        rc = 1;
    }
    if (rc == 0) {
        uint64_t pt = 0, gt = 0;
        double t0 = util_now_s();
        rc = run_all(e, job, &L, &pt, &gt);
        if (rc != 2 && job->out == GEN_OUT_JSON)
            print_summary(e, L.n, pt, gt, util_now_s() - t0);
    }
    for (int i = 0; i < L.n; i++)
        item_free(&L.v[i]);
    inferd_free(L.v);
    engine_free(e);
    return rc;
}

int gen_run_prompts_file(model *m, const tokenizer *tok, const engine_opts *eo,
                         const sampling_params *defaults, const char *path)
{
    gen_job job = {.defaults = defaults, .out = GEN_OUT_JSON, .prompts_file = path};
    return gen_run(m, tok, eo, &job);
}

/* The same parse and validation as a prompts-file line, without a
 * tokenizer, model or engine: the request-field table test runs it for
 * every row's boundary values. */
int gen_check_line(const char *line, int vocab, const sampling_params *defaults)
{
    gb_item it;
    memset(&it, 0, sizeof it);
    it.sp = *defaults;
    int rc = parse_json_line(NULL, 1, line, strlen(line), NULL, &it);
    if (rc == 0 && sampling_params_validate(&it.sp, vocab, NULL) != INFERD_OK)
        rc = line_fail(NULL, 1, "%s", inferd_last_error());
    item_free(&it);
    return rc;
}
