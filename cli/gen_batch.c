/* cli/gen_batch.c: `inferd generate --prompts-file FILE` (see
 * gen_batch.h).
 *
 * Three phases: parse and tokenize every line (any bad line stops here with
 * an error naming it, before the model does any work); submit everything to
 * one engine (when the engine's wait queue is full, collect finished output
 * first and retry); collect the streams in input order, printing one JSON
 * line per prompt as soon as it and all earlier ones are done. The engine
 * thread does the batching; this thread only waits on streams.
 */
#include <cjson/cJSON.h>
#include <ctype.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "common/alloc.h"
#include "common/util.h"
#include "cli/gen_batch.h"

typedef struct {
    int line; /* 1-based line number in the file */
    int32_t *ids;
    int n_ids;
    sampling_params sp; /* stop[] point into stops */
    char *stops[SAMPLING_MAX_STOP];
    engine_stream *stream;
} gb_item;

typedef struct {
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
    fprintf(stderr, "inferd: error: %s:%d: %s\n", path, line, msg);
    return 2;
}

static void item_free(gb_item *it)
{
    inferd_free(it->ids);
    for (int i = 0; i < SAMPLING_MAX_STOP; i++)
        inferd_free(it->stops[i]);
    if (it->stream)
        engine_stream_release(it->stream);
}

/* --- parsing -------------------------------------------------------------- */

static bool json_int(const cJSON *v, long long lo, long long hi, long long *out)
{
    if (!cJSON_IsNumber(v) || v->valuedouble != floor(v->valuedouble) || v->valuedouble < (double)lo ||
        v->valuedouble > (double)hi)
        return false;
    *out = (long long)v->valuedouble;
    return true;
}

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

static const char *parse_stop(const cJSON *v, gb_item *it)
{
    if (cJSON_IsString(v)) {
        it->stops[0] = inferd_strdup(v->valuestring);
        it->sp.n_stop = 1;
    } else if (cJSON_IsArray(v)) {
        if (cJSON_GetArraySize(v) > SAMPLING_MAX_STOP)
            return "\"stop\" has more than 16 strings";
        const cJSON *x;
        cJSON_ArrayForEach(x, v)
        {
            if (!cJSON_IsString(x))
                return "\"stop\" must be a string or a list of strings";
            it->stops[it->sp.n_stop++] = inferd_strdup(x->valuestring);
        }
    } else {
        return "\"stop\" must be a string or a list of strings";
    }
    for (int i = 0; i < it->sp.n_stop; i++)
        it->sp.stop[i] = it->stops[i];
    return NULL;
}

/* One sampling field; returns an error text or NULL. *known = false when
 * the key is not a sampling field. */
static const char *parse_field(const cJSON *f, gb_item *it, bool *known)
{
    const char *k = f->string;
    long long x;
    *known = true;
    sampling_params *sp = &it->sp;
    if (strcmp(k, "max_tokens") == 0) {
        if (!json_int(f, 1, 1 << 24, &x))
            return "\"max_tokens\" must be an integer >= 1";
        sp->max_tokens = (int32_t)x;
    } else if (strcmp(k, "min_tokens") == 0) {
        if (!json_int(f, 0, 1 << 24, &x))
            return "\"min_tokens\" must be an integer >= 0";
        sp->min_tokens = (int32_t)x;
    } else if (strcmp(k, "temperature") == 0) {
        if (!cJSON_IsNumber(f) || f->valuedouble < 0 || f->valuedouble > 100)
            return "\"temperature\" must be a number in [0, 100]";
        sp->temperature = (float)f->valuedouble;
    } else if (strcmp(k, "top_p") == 0) {
        if (!cJSON_IsNumber(f) || !(f->valuedouble > 0 && f->valuedouble <= 1))
            return "\"top_p\" must be a number in (0, 1]";
        sp->top_p = (float)f->valuedouble;
    } else if (strcmp(k, "top_k") == 0) {
        if (!json_int(f, -1, 1 << 30, &x))
            return "\"top_k\" must be an integer >= -1";
        sp->top_k = (int32_t)x;
    } else if (strcmp(k, "min_p") == 0) {
        if (!cJSON_IsNumber(f) || !(f->valuedouble >= 0 && f->valuedouble <= 1))
            return "\"min_p\" must be a number in [0, 1]";
        sp->min_p = (float)f->valuedouble;
    } else if (strcmp(k, "seed") == 0) {
        if (!json_int(f, 0, (long long)1 << 53, &x))
            return "\"seed\" must be a non-negative integer";
        sp->seed = (uint64_t)x;
        sp->has_seed = true;
    } else if (strcmp(k, "ignore_eos") == 0) {
        if (!cJSON_IsBool(f))
            return "\"ignore_eos\" must be true or false";
        sp->ignore_eos = cJSON_IsTrue(f);
    } else if (strcmp(k, "stop") == 0) {
        return parse_stop(f, it);
    } else if (strcmp(k, "stop_token_ids") == 0) {
        int32_t *ids = NULL;
        int n = 0;
        const char *err = parse_int_array(f, SAMPLING_MAX_STOP, &ids, &n);
        if (err)
            return "\"stop_token_ids\" must be a list of at most 16 non-negative integers";
        memcpy(sp->stop_token_ids, ids, sizeof(int32_t) * (size_t)n);
        sp->n_stop_token_ids = n;
        inferd_free(ids);
    } else {
        *known = false;
    }
    return NULL;
}

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

static bool blank(const char *s, size_t n)
{
    for (size_t i = 0; i < n; i++)
        if (!isspace((unsigned char)s[i]))
            return false;
    return true;
}

/* Parse the whole file into items; returns 0 or an exit code. */
static int parse_file(const char *path, const tokenizer *tok, const sampling_params *defaults, gb_list *L)
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
        it->sp = *defaults;
        it->sp.n_stop = 0;
        for (int i = 0; i < SAMPLING_MAX_STOP; i++)
            it->sp.stop[i] = NULL;
        rc = json ? parse_json_line(path, line, s, n, tok, it) : parse_text_line(path, line, s, n, tok, it);
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

static void print_result(const gb_item *it, int index, const int32_t *ids, int n_ids, const char *text,
                         const engine_output *last)
{
    cJSON *o = cJSON_CreateObject();
    cJSON_AddNumberToObject(o, "index", index);
    cJSON_AddStringToObject(o, "text", text);
    cJSON *arr = cJSON_AddArrayToObject(o, "token_ids");
    for (int i = 0; i < n_ids; i++)
        cJSON_AddItemToArray(arr, cJSON_CreateNumber(ids[i]));
    cJSON_AddStringToObject(o, "finish_reason", finish_reason_str(last->finish));
    cJSON_AddNumberToObject(o, "prompt_tokens", it->n_ids);
    cJSON_AddNumberToObject(o, "completion_tokens", last->completion_tokens);
    if (last->finish == FINISH_ERROR)
        cJSON_AddStringToObject(o, "error", last->error);
    char *s = cJSON_PrintUnformatted(o);
    fputs(s, stdout);
    fputc('\n', stdout);
    fflush(stdout);
    cJSON_free(s);
    cJSON_Delete(o);
}

/* Wait for item i to finish and print it. Returns false on FINISH_ERROR. */
static bool collect(gb_item *it, int index, uint64_t *gen_tokens)
{
    int32_t *ids = NULL;
    int n_ids = 0, cap = 0;
    char *text = inferd_strdup("");
    size_t text_len = 0;
    engine_output o;
    for (;;) {
        bool news = engine_stream_wait(it->stream, &o, -1);
        if (news) {
            if (n_ids + o.n_tokens > cap) {
                cap = 2 * (n_ids + o.n_tokens);
                ids = inferd_realloc(ids, sizeof *ids * (size_t)cap);
            }
            memcpy(ids + n_ids, o.token_ids, sizeof *ids * (size_t)o.n_tokens);
            n_ids += o.n_tokens;
            text = inferd_realloc(text, text_len + o.text_len + 1);
            memcpy(text + text_len, o.text, o.text_len);
            text_len += o.text_len;
            text[text_len] = '\0';
        }
        bool done = o.finished;
        if (done)
            print_result(it, index, ids, n_ids, text, &o);
        bool ok = !(done && o.finish == FINISH_ERROR);
        engine_output_free(&o);
        if (done) {
            *gen_tokens += (uint64_t)n_ids;
            inferd_free(ids);
            inferd_free(text);
            engine_stream_release(it->stream);
            it->stream = NULL;
            return ok;
        }
    }
}

static int run_all(engine *e, const char *path, gb_list *L, uint64_t *prompt_tokens, uint64_t *gen_tokens)
{
    int next_submit = 0, rc = 0;
    for (int next_collect = 0; next_collect < L->n; next_collect++) {
        while (next_submit < L->n) {
            gb_item *it = &L->v[next_submit];
            engine_request rq = {.prompt_ids = it->ids, .n_prompt = it->n_ids, .sp = it->sp};
            inferd_status st = engine_submit(e, &rq, &it->stream);
            if (st == INFERD_ERR_QUEUE_FULL) {
                if (next_submit > next_collect)
                    break;
                usleep(1000); /* the engine's queue count is a step behind */
                continue;
            }
            if (st != INFERD_OK) {
                line_fail(path, it->line, "%s", inferd_last_error());
                return 2;
            }
            *prompt_tokens += (uint64_t)it->n_ids;
            next_submit++;
        }
        if (!collect(&L->v[next_collect], next_collect, gen_tokens))
            rc = 1;
    }
    return rc;
}

/* Aggregate throughput and engine counters on stderr. */
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

int gen_run_prompts_file(model *m, const tokenizer *tok, const engine_opts *eo,
                         const sampling_params *defaults, const char *path)
{
    gb_list L = {0};
    int rc = parse_file(path, tok, defaults, &L);
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
        rc = run_all(e, path, &L, &pt, &gt);
        if (rc != 2)
            print_summary(e, L.n, pt, gt, util_now_s() - t0);
    }
    for (int i = 0; i < L.n; i++)
        item_free(&L.v[i]);
    inferd_free(L.v);
    engine_free(e);
    return rc;
}
