/* server/srv_opts.c: see srv_opts.h.
 *
 * Precedence is built by order of application: defaults, then the config
 * file, then the command line (left to right, last wins). Config files are
 * strict: an unknown key or a value of the wrong type is an error, so a typo
 * does not silently fall back to a default.
 *
 * The model/engine options (--model, --device, --max-num-seqs, ...) are the
 * rows shared with `inferd generate` (cli_model_opt_table in cli_common.c);
 * this file adds the serve-only rows and maps the shared values onto
 * srv_opts' fields.
 */
#include "server/srv_opts.h"

#include <cjson/cJSON.h>
#include <math.h>
#include <stddef.h>
#include <string.h>

#include "common/alloc.h"
#include "common/log.h"
#include "common/util.h"
#include "scheduler/engine.h"
#include "cli/cli_common.h"

#define OFF(f) offsetof(srv_opts, f)

/* serve-only rows; the model/engine rows come from cli_model_opt_table().
 * "config" stays first: the help lists it before the shared rows. */
static const cli_opt_def k_opts[] = {
    {"config", CLI_OPT_STR, 0, 0, 0, "FILE: JSON object of options (keys as below); flags override it"},
    {"served-model-name", CLI_OPT_STR, OFF(served_model_name), 0, 0,
     "NAME: model id in the API (default: model dir name)"},
    {"chat-template", CLI_OPT_CUSTOM, OFF(chat_template), 0, 0,
     "NAME: llama-2|llama-3|llama-3.1|chatml|mistral (default: detect from tokenizer_config.json)"},
    {"device-id", CLI_OPT_INT, OFF(device_id), 0, 1024, "N: CUDA device ordinal"},
    {"seed", CLI_OPT_SIZE, OFF(seed), 0, 9.2e18, "N: seed of dummy weights"},
    {"max-queued-requests", CLI_OPT_INT, OFF(max_queued_requests), 1, 1 << 24,
     "N: waiting requests before 429"},
    {"request-timeout", CLI_OPT_DOUBLE, OFF(request_timeout_s), 0, 1e9,
     "SECONDS: abort requests running longer (0 = none)"},
    {"host", CLI_OPT_STR, OFF(host), 0, 0, "ADDR: listen address (default 127.0.0.1)"},
    {"port", CLI_OPT_INT, OFF(port), 0, 65535, "N: listen port (default 8000)"},
    {"api-key", CLI_OPT_STR, OFF(api_key), 0, 0,
     "KEY: require 'Authorization: Bearer KEY' on /v1, /tokenize, /detokenize"},
    {"http-threads", CLI_OPT_INT, OFF(http_threads), 1, 256,
     "N: HTTP event-loop threads (each polls many connections)"},
    {"max-connections", CLI_OPT_INT, OFF(max_connections), 1, 1 << 20, "N: concurrent connections"},
    {"max-body-bytes", CLI_OPT_SIZE, OFF(max_body_bytes), 1, 1 << 30,
     "BYTES: request body limit (413 beyond)"},
    {"shutdown-timeout", CLI_OPT_DOUBLE, OFF(shutdown_timeout_s), 0, 3600,
     "SECONDS: grace period on SIGINT/SIGTERM"},
    {"stats-interval", CLI_OPT_DOUBLE, OFF(stats_interval_s), 0, 86400,
     "SECONDS: stats log line period while busy (0 = off)"},
};

/* The shared values as they stand in o (strings borrowed). */
static cli_model_vals model_vals_of(const srv_opts *o)
{
    return (cli_model_vals){.model_dir = o->model_dir,
                            .tokenizer_dir = o->tokenizer_dir,
                            .load_format = o->load_format,
                            .backend = o->backend,
                            .device_auto = o->device_auto,
                            .threads = o->threads,
                            .gpu_memory_utilization = o->gpu_memory_utilization,
                            .max_num_seqs = o->max_num_seqs,
                            .max_num_batched_tokens = o->max_num_batched_tokens,
                            .block_size = o->block_size,
                            .kv_cache_bytes = o->kv_cache_bytes,
                            .enable_prefix_caching = o->enable_prefix_caching,
                            .max_model_len = o->max_model_len,
                            .log_level = o->log_level};
}

/* Store the shared values into o (takes over the strings). */
static void set_model_vals(srv_opts *o, const cli_model_vals *v)
{
    o->model_dir = v->model_dir;
    o->tokenizer_dir = v->tokenizer_dir;
    o->load_format = v->load_format;
    o->backend = v->backend;
    o->device_auto = v->device_auto;
    o->threads = v->threads;
    o->gpu_memory_utilization = v->gpu_memory_utilization;
    o->max_num_seqs = v->max_num_seqs;
    o->max_num_batched_tokens = v->max_num_batched_tokens;
    o->block_size = v->block_size;
    o->kv_cache_bytes = v->kv_cache_bytes;
    o->enable_prefix_caching = v->enable_prefix_caching;
    o->max_model_len = v->max_model_len;
    o->log_level = v->log_level;
}

/* Whether d is a row of the shared model/engine table. */
static bool is_shared(const cli_opt_def *d)
{
    size_t n;
    const cli_opt_def *t = cli_model_opt_table(&n);
    for (size_t i = 0; i < n; i++)
        if (d == &t[i])
            return true;
    return false;
}

void srv_opts_default(srv_opts *o)
{
    memset(o, 0, sizeof *o);
    cli_model_vals v;
    cli_model_vals_default(&v);
    set_model_vals(o, &v);
    model_opts mo;
    model_opts_default(&mo);
    engine_opts eo;
    engine_opts_default(&eo);
    o->device_id = mo.device_id;
    o->seed = (int64_t)mo.dummy_seed;
    o->max_queued_requests = eo.max_queued_requests;
    o->host = inferd_strdup("127.0.0.1");
    o->port = 8000;
    o->http_threads = 4;
    o->max_connections = 10000;
    o->max_body_bytes = 8 << 20;
    o->shutdown_timeout_s = 10.0;
    o->stats_interval_s = 5.0;
}

void srv_opts_free(srv_opts *o)
{
    inferd_free(o->model_dir);
    inferd_free(o->tokenizer_dir);
    inferd_free(o->served_model_name);
    inferd_free(o->chat_template);
    inferd_free(o->host);
    inferd_free(o->api_key);
    inferd_free(o->log_level);
    memset(o, 0, sizeof *o);
}

void srv_opts_usage(FILE *f)
{
    size_t n;
    const cli_opt_def *shared = cli_model_opt_table(&n);
    fprintf(f, "usage: inferd serve --model DIR [options]\n\n"
               "OpenAI-compatible HTTP server: /v1/completions, /v1/chat/completions, /v1/models,\n"
               "/tokenize, /detokenize, /health, /metrics. Options (also as JSON keys in --config):\n\n");
    cli_opt_usage(f, k_opts, 1);
    cli_opt_usage(f, shared, n);
    cli_opt_usage(f, k_opts + 1, INFERD_ARRAY_LEN(k_opts) - 1);
    fprintf(f, "  --%-24s %s\n", "help", "this text");
}

static const cli_opt_def *find_opt(const char *name, size_t len)
{
    size_t n;
    const cli_opt_def *shared = cli_model_opt_table(&n);
    const cli_opt_def *d = cli_opt_find(k_opts, INFERD_ARRAY_LEN(k_opts), name, len);
    return d ? d : cli_opt_find(shared, n, name, len);
}

/* Set option d from its text form. */
static bool set_value(srv_opts *o, const cli_opt_def *d, const char *val)
{
    if (is_shared(d)) {
        cli_model_vals v = model_vals_of(o);
        bool ok = cli_model_vals_set(&v, d, val); /* replaces a string it sets */
        set_model_vals(o, &v);
        return ok;
    }
    if (d->kind != CLI_OPT_CUSTOM)
        return cli_opt_set(o, d, val);
    /* chat-template */
    if (!srv_chat_from_name(val, &o->chat_family)) {
        inferd_set_error(INFERD_ERR_INVALID_ARG, "--chat-template: unknown template '%s' (known: %s)", val,
                         srv_chat_names());
        return false;
    }
    inferd_free(o->chat_template);
    o->chat_template = inferd_strdup(val);
    return true;
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
        const cli_opt_def *d = find_opt(it->string, strlen(it->string));
        char buf[64];
        const char *val = buf;
        if (!d || strcmp(d->name, "config") == 0) {
            inferd_set_error(INFERD_ERR_INVALID_ARG, "%s: unknown option '%s'", name, it->string);
            ok = false;
        } else if (cJSON_IsString(it) && d->kind != CLI_OPT_BOOL) {
            val = it->valuestring;
        } else if (cJSON_IsBool(it) && d->kind == CLI_OPT_BOOL) {
            snprintf(buf, sizeof buf, "%s", cJSON_IsTrue(it) ? "true" : "false");
        } else if (cJSON_IsNumber(it) && d->kind != CLI_OPT_BOOL && d->kind != CLI_OPT_STR) {
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
    if (strncmp(a, "--", 2) != 0) {
        inferd_set_error(INFERD_ERR_INVALID_ARG, "unexpected argument '%s'", a);
        return false;
    }
    size_t n;
    const cli_opt_def *shared = cli_model_opt_table(&n);
    const cli_opt_def *d = NULL;
    const char *val = NULL;
    int r = cli_opt_arg(k_opts, INFERD_ARRAY_LEN(k_opts), argc, argv, i, &d, &val);
    if (r == 0)
        r = cli_opt_arg(shared, n, argc, argv, i, &d, &val);
    if (r < 0)
        return false;
    if (r == 0) {
        size_t nlen = strcspn(a + 2, "=");
        inferd_set_error(INFERD_ERR_INVALID_ARG, "unknown option '--%.*s'", (int)nlen, a + 2);
        return false;
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
    inferd_free(text);
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
    o->served_model_name = n > s ? inferd_strndup(o->model_dir + s, n - s) : inferd_strdup(o->model_dir);
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
