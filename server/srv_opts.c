/* server/srv_opts.c: see srv_opts.h.
 *
 * Precedence is built by order of application: defaults, then the config
 * file, then the command line (left to right, last wins). Config files are
 * strict: an unknown key or a value of the wrong type is an error, so a typo
 * does not silently fall back to a default.
 */
#include "server/srv_opts.h"

#include <cjson/cJSON.h>
#include <math.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>

#include "common/alloc.h"
#include "common/log.h"
#include "common/util.h"
#include "scheduler/engine.h"

typedef enum { K_STR, K_INT, K_SIZE, K_DOUBLE, K_BOOL, K_DEVICE, K_FORMAT, K_CHAT, K_LOGLEVEL } opt_kind;

typedef struct {
    const char *name;
    opt_kind kind;
    size_t off;
    double lo, hi;
    const char *help;
} opt_def;

#define OFF(f) offsetof(srv_opts, f)

static const opt_def k_opts[] = {
    {"config", K_STR, 0, 0, 0, "FILE: JSON object of options (keys as below); flags override it"},
    {"model", K_STR, OFF(model_dir), 0, 0, "DIR: HF model directory (config.json, *.safetensors)"},
    {"tokenizer", K_STR, OFF(tokenizer_dir), 0, 0, "DIR: tokenizer.json directory (default: --model)"},
    {"served-model-name", K_STR, OFF(served_model_name), 0, 0,
     "NAME: model id in the API (default: model dir name)"},
    {"chat-template", K_CHAT, OFF(chat_template), 0, 0,
     "NAME: llama-2|llama-3|llama-3.1|chatml|mistral (default: detect from tokenizer_config.json)"},
    {"load-format", K_FORMAT, OFF(load_format), 0, 0, "safetensors|dummy (dummy: random weights)"},
    {"device", K_DEVICE, OFF(backend), 0, 0, "cpu|cuda (default: cuda when a GPU is present)"},
    {"device-id", K_INT, OFF(device_id), 0, 1024, "N: CUDA device ordinal"},
    {"threads", K_INT, OFF(threads), 0, 4096, "N: CPU backend threads (0 = all cores)"},
    {"gpu-memory-utilization", K_DOUBLE, OFF(gpu_memory_utilization), 0.01, 1.0, "F: device memory fraction"},
    {"seed", K_SIZE, OFF(seed), 0, 9.2e18, "N: seed of dummy weights"},
    {"max-num-seqs", K_INT, OFF(max_num_seqs), 1, 1 << 20, "N: sequences per engine step"},
    {"max-num-batched-tokens", K_INT, OFF(max_num_batched_tokens), 1, 1 << 24, "N: tokens per engine step"},
    {"block-size", K_INT, OFF(block_size), 1, 4096, "N: KV cache block size (tokens)"},
    {"kv-cache-bytes", K_SIZE, OFF(kv_cache_bytes), 0, 9.2e18,
     "BYTES: KV cache size (K/M/G suffix; 0 = auto)"},
    {"enable-prefix-caching", K_BOOL, OFF(enable_prefix_caching), 0, 0,
     "prefix caching (--no-enable-prefix-caching)"},
    {"max-model-len", K_INT, OFF(max_model_len), 0, 1 << 24, "N: context length (0 = model's)"},
    {"max-queued-requests", K_INT, OFF(max_queued_requests), 1, 1 << 24, "N: waiting requests before 429"},
    {"request-timeout", K_DOUBLE, OFF(request_timeout_s), 0, 1e9,
     "SECONDS: abort requests running longer (0 = none)"},
    {"host", K_STR, OFF(host), 0, 0, "ADDR: listen address (default 127.0.0.1)"},
    {"port", K_INT, OFF(port), 0, 65535, "N: listen port (default 8000)"},
    {"api-key", K_STR, OFF(api_key), 0, 0,
     "KEY: require 'Authorization: Bearer KEY' on /v1, /tokenize, /detokenize"},
    {"http-threads", K_INT, OFF(http_threads), 1, 256,
     "N: HTTP event-loop threads (each polls many connections)"},
    {"max-connections", K_INT, OFF(max_connections), 1, 1 << 20, "N: concurrent connections"},
    {"max-body-bytes", K_SIZE, OFF(max_body_bytes), 1, 1 << 30, "BYTES: request body limit (413 beyond)"},
    {"shutdown-timeout", K_DOUBLE, OFF(shutdown_timeout_s), 0, 3600,
     "SECONDS: grace period on SIGINT/SIGTERM"},
    {"stats-interval", K_DOUBLE, OFF(stats_interval_s), 0, 86400,
     "SECONDS: stats log line period while busy (0 = off)"},
    {"log-level", K_LOGLEVEL, OFF(log_level), 0, 0, "debug|info|warn|error|off"},
};

void srv_opts_default(srv_opts *o)
{
    memset(o, 0, sizeof *o);
    model_opts mo;
    model_opts_default(&mo);
    engine_opts eo;
    engine_opts_default(&eo);
    o->load_format = mo.load_format;
    o->backend = mo.backend;
    o->device_auto = true;
    o->threads = mo.n_threads;
    o->device_id = mo.device_id;
    o->gpu_memory_utilization = mo.gpu_memory_utilization;
    o->seed = (int64_t)mo.dummy_seed;
    o->block_size = mo.block_size;
    o->kv_cache_bytes = mo.kv_cache_bytes;
    o->max_num_seqs = eo.max_num_seqs;
    o->max_num_batched_tokens = eo.max_num_batched_tokens;
    o->enable_prefix_caching = eo.enable_prefix_caching;
    o->max_model_len = eo.max_model_len;
    o->max_queued_requests = eo.max_queued_requests;
    o->host = xstrdup("127.0.0.1");
    o->port = 8000;
    o->http_threads = 4;
    o->max_connections = 10000;
    o->max_body_bytes = 8 << 20;
    o->shutdown_timeout_s = 10.0;
    o->stats_interval_s = 5.0;
    o->log_level = xstrdup("info");
}

void srv_opts_free(srv_opts *o)
{
    xfree(o->model_dir);
    xfree(o->tokenizer_dir);
    xfree(o->served_model_name);
    xfree(o->chat_template);
    xfree(o->host);
    xfree(o->api_key);
    xfree(o->log_level);
    memset(o, 0, sizeof *o);
}

void srv_opts_usage(FILE *f)
{
    fprintf(f, "usage: inferd serve --model DIR [options]\n\n"
               "OpenAI-compatible HTTP server: /v1/completions, /v1/chat/completions, /v1/models,\n"
               "/tokenize, /detokenize, /health, /metrics. Options (also as JSON keys in --config):\n\n");
    for (size_t i = 0; i < ARRAY_LEN(k_opts); i++)
        fprintf(f, "  --%-24s %s\n", k_opts[i].name, k_opts[i].help);
    fprintf(f, "  --%-24s %s\n", "help", "this text");
}

/* Set the thread's error message; always false. */
static bool opt_fail(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static bool opt_fail(const char *fmt, ...)
{
    char msg[512];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    inferd_set_error(INFERD_ERR_INVALID_ARG, "%s", msg);
    return false;
}

static const opt_def *find_opt(const char *name, size_t len)
{
    for (size_t i = 0; i < ARRAY_LEN(k_opts); i++) {
        const char *n = k_opts[i].name;
        if (strlen(n) != len)
            continue;
        size_t k = 0;
        while (k < len && (n[k] == name[k] || (n[k] == '-' && name[k] == '_')))
            k++;
        if (k == len)
            return &k_opts[i];
    }
    return NULL;
}

/* "123", "4K", "1.5G" (binary multiples) -> bytes. */
static bool parse_size(const char *s, int64_t *out)
{
    char *end;
    double v = strtod(s, &end);
    if (end == s || !isfinite(v) || v < 0)
        return false;
    double mul = 1;
    if (*end) {
        switch (*end) {
        case 'k':
        case 'K': mul = 1024.0; break;
        case 'm':
        case 'M': mul = 1024.0 * 1024; break;
        case 'g':
        case 'G': mul = 1024.0 * 1024 * 1024; break;
        case 't':
        case 'T': mul = 1024.0 * 1024 * 1024 * 1024; break;
        default: return false;
        }
        end++;
        if (*end == 'i')
            end++;
        if (*end == 'B' || *end == 'b')
            end++;
        if (*end)
            return false;
    }
    v *= mul;
    if (v > 9.2e18 || v != floor(v))
        return false;
    *out = (int64_t)v;
    return true;
}

static bool set_str(srv_opts *o, const opt_def *d, const char *val)
{
    char **p = (char **)((char *)o + d->off);
    xfree(*p);
    *p = xstrdup(val);
    return true;
}

static bool set_enum(srv_opts *o, const opt_def *d, const char *val)
{
    switch (d->kind) {
    case K_DEVICE:
        o->device_auto = false;
        if (strcmp(val, "cpu") == 0)
            o->backend = KERN_BACKEND_CPU;
        else if (strcmp(val, "cuda") == 0 || strcmp(val, "gpu") == 0)
            o->backend = KERN_BACKEND_CUDA;
        else
            return opt_fail("--device must be cpu or cuda, got '%s'", val);
        return true;
    case K_FORMAT:
        if (strcmp(val, "safetensors") == 0 || strcmp(val, "auto") == 0)
            o->load_format = MODEL_LOAD_SAFETENSORS;
        else if (strcmp(val, "dummy") == 0)
            o->load_format = MODEL_LOAD_DUMMY;
        else
            return opt_fail("--load-format must be safetensors or dummy, got '%s'", val);
        return true;
    case K_CHAT:
        if (!srv_chat_from_name(val, &o->chat_family))
            return opt_fail("--chat-template: unknown template '%s' (known: %s)", val, srv_chat_names());
        return set_str(o, d, val);
    case K_LOGLEVEL:
        if (log_parse_level(val) < 0)
            return opt_fail("--log-level: unknown level '%s'", val);
        return set_str(o, d, val);
    default: return false;
    }
}

/* Set option d from its text form. */
static bool set_value(srv_opts *o, const opt_def *d, const char *val)
{
    void *p = (char *)o + d->off;
    long long iv;
    double dv;
    int64_t sv;
    switch (d->kind) {
    case K_STR:
        if (!*val)
            return opt_fail("--%s must not be empty", d->name);
        return set_str(o, d, val);
    case K_INT:
        if (!util_parse_int(val, (long long)d->lo, (long long)d->hi, &iv))
            return opt_fail("--%s: expected an integer in [%.0f, %.0f], got '%s'", d->name, d->lo, d->hi,
                            val);
        *(int *)p = (int)iv;
        return true;
    case K_SIZE:
        if (!parse_size(val, &sv) || (double)sv < d->lo || (double)sv > d->hi)
            return opt_fail("--%s: expected a size in [%.0f, %.0f], got '%s'", d->name, d->lo, d->hi, val);
        *(int64_t *)p = sv;
        return true;
    case K_DOUBLE:
        if (!util_parse_double(val, &dv) || !(dv >= d->lo && dv <= d->hi))
            return opt_fail("--%s: expected a number in [%g, %g], got '%s'", d->name, d->lo, d->hi, val);
        *(double *)p = dv;
        return true;
    case K_BOOL:
        if (strcmp(val, "true") == 0 || strcmp(val, "1") == 0)
            *(bool *)p = true;
        else if (strcmp(val, "false") == 0 || strcmp(val, "0") == 0)
            *(bool *)p = false;
        else
            return opt_fail("--%s: expected true or false, got '%s'", d->name, val);
        return true;
    default: return set_enum(o, d, val);
    }
}

bool srv_opts_apply_json(srv_opts *o, const char *json, const char *name)
{
    cJSON *root = cJSON_Parse(json);
    if (!cJSON_IsObject(root)) {
        cJSON_Delete(root);
        inferd_set_error(INFERD_ERR_FORMAT, "%s: not a JSON object", name);
        return false;
    }
    bool ok = true;
    const cJSON *it;
    cJSON_ArrayForEach(it, root)
    {
        const opt_def *d = find_opt(it->string, strlen(it->string));
        char buf[64];
        const char *val = buf;
        if (!d || strcmp(d->name, "config") == 0) {
            inferd_set_error(INFERD_ERR_INVALID_ARG, "%s: unknown option '%s'", name, it->string);
            ok = false;
        } else if (cJSON_IsString(it) && d->kind != K_BOOL) {
            val = it->valuestring;
        } else if (cJSON_IsBool(it) && d->kind == K_BOOL) {
            snprintf(buf, sizeof buf, "%s", cJSON_IsTrue(it) ? "true" : "false");
        } else if (cJSON_IsNumber(it) && d->kind != K_BOOL && d->kind != K_STR) {
            double v = it->valuedouble;
            if (v == floor(v) && fabs(v) < 9e18)
                snprintf(buf, sizeof buf, "%lld", (long long)v);
            else
                snprintf(buf, sizeof buf, "%.17g", v);
        } else {
            inferd_set_error(INFERD_ERR_INVALID_ARG, "%s: option '%s' has a value of the wrong type", name,
                             it->string);
            ok = false;
        }
        if (ok && !set_value(o, d, val)) {
            char msg[512];
            snprintf(msg, sizeof msg, "%s", inferd_last_error());
            inferd_set_error(INFERD_ERR_INVALID_ARG, "%s: %s", name, msg);
            ok = false;
        }
        if (!ok)
            break;
    }
    cJSON_Delete(root);
    return ok;
}

/* Parse one argv entry at *i; advances *i past a consumed value. */
static bool parse_arg(srv_opts *o, int argc, char **argv, int *i)
{
    const char *a = argv[*i];
    if (strncmp(a, "--", 2) != 0)
        return opt_fail("unexpected argument '%s'", a);
    const char *name = a + 2;
    const char *eq = strchr(name, '=');
    size_t nlen = eq ? (size_t)(eq - name) : strlen(name);
    const opt_def *d = find_opt(name, nlen);
    bool negated = false;
    if (!d && nlen > 3 && strncmp(name, "no-", 3) == 0) {
        d = find_opt(name + 3, nlen - 3);
        negated = d && d->kind == K_BOOL;
        if (!negated)
            d = NULL;
    }
    if (!d)
        return opt_fail("unknown option '--%.*s'", (int)nlen, name);
    const char *val;
    if (d->kind == K_BOOL && !eq) {
        val = negated ? "false" : "true";
    } else if (negated) {
        return opt_fail("--no-%s takes no value", d->name);
    } else if (eq) {
        val = eq + 1;
    } else {
        if (*i + 1 >= argc)
            return opt_fail("--%s needs a value", d->name);
        val = argv[++*i];
    }
    if (strcmp(d->name, "config") == 0)
        return true; /* applied before the command line */
    return set_value(o, d, val);
}

static bool load_config(srv_opts *o, const char *path)
{
    char *text;
    size_t len;
    if (util_read_file(path, 16 << 20, &text, &len) != INFERD_OK)
        return false;
    bool ok = srv_opts_apply_json(o, text, path);
    xfree(text);
    return ok;
}

static void default_served_name(srv_opts *o)
{
    if (o->served_model_name || !o->model_dir)
        return;
    size_t n = strlen(o->model_dir);
    while (n > 1 && o->model_dir[n - 1] == '/')
        n--;
    size_t s = n;
    while (s > 0 && o->model_dir[s - 1] != '/')
        s--;
    o->served_model_name = n > s ? xstrndup(o->model_dir + s, n - s) : xstrdup(o->model_dir);
}

int srv_opts_parse(srv_opts *o, int argc, char **argv, FILE *out)
{
    const char *config = NULL;
    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "--help") == 0 || strcmp(argv[i], "-h") == 0) {
            srv_opts_usage(out);
            return 1;
        }
        if (strcmp(argv[i], "--config") == 0 && i + 1 < argc)
            config = argv[++i];
        else if (strncmp(argv[i], "--config=", 9) == 0)
            config = argv[i] + 9;
    }
    if (config && !load_config(o, config))
        return 2;
    for (int i = 1; i < argc; i++)
        if (!parse_arg(o, argc, argv, &i))
            return 2;
    if (!o->model_dir) {
        inferd_set_error(INFERD_ERR_INVALID_ARG, "--model DIR is required (or \"model\" in --config)");
        return 2;
    }
    default_served_name(o);
    return 0;
}
