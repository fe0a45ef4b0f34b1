/* server/srv_opts.c: the server's option rows (everything of srv_opts that
 * is not a model or engine option), its defaults, and the validation of a
 * whole srv_opts with the rows of the model, engine and server tables.
 *
 * Ranges, and why:
 *   port [0, 65535] (0 = any free port, reported in the log and by tests);
 *   http-threads [1, 256]: libmicrohttpd's thread pool; each thread polls
 *       many connections, so more than a few dozen buys nothing;
 *   max-body-bytes [1, 1 GiB]: bodies are buffered whole before parsing;
 *   max-body-buffer-bytes [1 MiB, 1 TiB], default 256 MiB (32 bodies of the
 *       default limit): the sum of every buffered body, the memory a crowd of
 *       large uploads can pin at once;
 *   max-connections-per-client, default 4096: one address cannot take the
 *       whole --max-connections (10,000), yet a load generator or a test
 *       with 1,200 connections from one host fits;
 *   header-timeout [0.1, 3600] s, default 30 (Apache 20-40, nginx 60);
 *   min-body-rate, default 1 KiB/s after the header-timeout grace
 *       (Apache's mod_reqtimeout MinRate is 500 B/s).
 *
 * Design choice: one row per option (issue 10, item 2): the CLI flag, the
 * --config key, --help and validation all read the same row, so the range a
 * user is told is the range that is enforced. The model and engine rows
 * belong to their modules; this file only adds the server's. Main thread
 * only: options are parsed and validated before any thread starts.
 */
#include "server/srv_opts.h"

#include <stddef.h>
#include <stdio.h>
#include <string.h>

#include "common/alloc.h"
#include "common/util.h"

#define OFF(f) offsetof(srv_opts, f)

/* --chat-template NAME|FILE|TEMPLATE: a built-in family, else a readable
 * file, else inline Jinja (vLLM's convention); anything else is refused
 * here rather than at the first chat request.
 * Stores either chat_family (a built-in) or chat_template (file path or
 * inline text, heap, owned by o), never both: srv_chat_load tries the
 * family first. A later --chat-template replaces an earlier one. NOTE:
 * whether a path is a file is decided again at load, so a file deleted
 * in between is read as inline text and fails to compile there. */
static bool parse_chat(void *base, const opt_row *row, const char *text)
{
    (void)row;
    srv_opts *o = base;
    srv_chat_family f;
    bool inline_jinja = strstr(text, "{{") || strstr(text, "{%");
    if (!srv_chat_from_name(text, &f) && !util_file_exists(text) && !inline_jinja) {
        inferd_set_error(INFERD_ERR_INVALID_ARG,
                         "unknown template '%s': not a built-in name (%s), a readable file or an inline "
                         "Jinja template",
                         text, srv_chat_names());
        return false;
    }
    inferd_free(o->chat_template);
    o->chat_template = NULL;
    o->chat_family = SRV_CHAT_NONE;
    if (!srv_chat_from_name(text, &o->chat_family))
        o->chat_template = inferd_strdup(text);
    return true;
}

/* Order is --help order. OPT_F_NO_DEFAULT: no default shown (the default
 * is "the model's own template", not a value). */
static const opt_row k_rows[] = {
    {.name = "served-model-name", .kind = OPT_STR, .off = OFF(served_model_name), .meta = "NAME",
     .help = "model id in the API (default: model dir name)"},
    {.name = "chat-template", .kind = OPT_CUSTOM, .parse = parse_chat, .meta = "NAME|FILE|TEMPLATE",
     .help = "llama-2|llama-3|llama-3.1|chatml|mistral, a Jinja file or inline Jinja (default: the "
             "model's tokenizer_config.json chat_template)",
     .flags = OPT_F_NO_DEFAULT},
    {.name = "allow-special-tokens-in-content", .kind = OPT_BOOL, .off = OFF(allow_special_in_content),
     .def = 0,
     .help = "parse special-token text inside chat message contents (trusted clients only: lets them "
             "forge turns)"},
    {.name = "request-timeout", .kind = OPT_DOUBLE, .off = OFF(request_timeout_s), .min = 0, .max = 1e9,
     .def = 0, .meta = "SECONDS", .help = "abort requests running longer (0 = none)"},
    {.name = "host", .kind = OPT_STR, .off = OFF(host), .def_str = "127.0.0.1", .meta = "ADDR",
     .help = "listen address"},
    {.name = "port", .kind = OPT_INT, .off = OFF(port), .min = 0, .max = 65535, .def = 8000,
     .help = "listen port (0 = any free port)"},
    {.name = "api-key", .kind = OPT_STR, .off = OFF(api_key), .meta = "KEY",
     .help = "require 'Authorization: Bearer KEY' on /v1, /tokenize, /detokenize"},
    {.name = "http-threads", .kind = OPT_INT, .off = OFF(http_threads), .min = 1, .max = 256, .def = 4,
     .help = "HTTP event-loop threads (each polls many connections)"},
    {.name = "max-connections", .kind = OPT_INT, .off = OFF(max_connections), .min = 1, .max = 1 << 20,
     .def = 10000, .help = "concurrent connections"},
    {.name = "max-body-bytes", .kind = OPT_INT64, .off = OFF(max_body_bytes), .min = 1, .max = 1 << 30,
     .def = 8 << 20, .meta = "BYTES", .help = "request body limit (413 beyond)"},
    {.name = "shutdown-timeout", .kind = OPT_DOUBLE, .off = OFF(shutdown_timeout_s), .min = 0, .max = 3600,
     .def = 10, .meta = "SECONDS", .help = "grace period on SIGINT/SIGTERM"},
    {.name = "stats-interval", .kind = OPT_DOUBLE, .off = OFF(stats_interval_s), .min = 0, .max = 86400,
     .def = 5, .meta = "SECONDS", .help = "stats log line period while busy (0 = off)"},
    {.name = "api-key-file", .kind = OPT_STR, .off = OFF(api_key_file), .meta = "FILE",
     .help = "read the API key from FILE (or set INFERD_API_KEY): keeps it out of the process list"},
    {.name = "allowed-hosts", .kind = OPT_STR, .off = OFF(allowed_hosts), .meta = "LIST",
     .help = "Host header names accepted besides the bound address, comma-separated ('*' = any)"},
    {.name = "allowed-origins", .kind = OPT_STR, .off = OFF(allowed_origins), .meta = "LIST",
     .help = "browser origins allowed cross-origin (CORS), e.g. https://app.example ('*' = any)"},
    {.name = "max-connections-per-client", .kind = OPT_INT, .off = OFF(max_connections_per_client), .min = 0,
     .max = 1 << 20, .def = 4096, .help = "concurrent connections from one client address (0 = no limit)"},
    {.name = "header-timeout", .kind = OPT_DOUBLE, .off = OFF(header_timeout_s), .min = 0.1, .max = 3600,
     .def = 30, .meta = "SECONDS", .help = "close a connection whose request head (or next request) is late"},
    {.name = "min-body-rate", .kind = OPT_INT64, .off = OFF(min_body_rate), .min = 1, .max = 1 << 30,
     .def = 1024, .meta = "BYTES", .help = "bytes/s a request body must average after --header-timeout"},
    {.name = "max-body-buffer-bytes", .kind = OPT_INT64, .off = OFF(max_body_buffer_bytes), .min = 1 << 20,
     .max = INT64_C(1) << 40, .def = 256 << 20, .meta = "BYTES",
     .help = "all buffered request bodies together (503 + Retry-After beyond)"},
};
#undef OFF

/* For the generic parser in cli/ and the table test. */
const opt_row *srv_opts_rows(size_t *n)
{
    *n = INFERD_ARRAY_LEN(k_rows);
    return k_rows;
}

/* device_auto: serve on the GPU when there is one (the model module's
 * default is the CPU, which suits tests and `generate`). The queue bound is
 * the engine's: the server reports the same number in its 429 message. */
void srv_opts_default(srv_opts *o)
{
    memset(o, 0, sizeof *o);
    model_opts_default(&o->model);
    o->model.device_auto = true;
    engine_opts_default(&o->engine);
    engine_opts_from_model(&o->engine, &o->model);
    opt_defaults(k_rows, INFERD_ARRAY_LEN(k_rows), o);
    o->chat_family = SRV_CHAT_NONE;
    o->max_queued_requests = o->engine.max_queued_requests;
    sampling_params_default(&o->gen_defaults);
}

/* Frees every string the rows own (model and server rows) and zeroes o;
 * safe on a zeroed or partly filled o. Engine options own no strings. */
void srv_opts_free(srv_opts *o)
{
    model_opts_free(&o->model);
    opt_free(k_rows, INFERD_ARRAY_LEN(k_rows), o);
    inferd_free(o->chat_template); /* CUSTOM row: opt_free leaves it */
    memset(o, 0, sizeof *o);
}

/* served_model_name = the last path component of the model directory.
 * Trailing slashes are ignored ("models/llama/" -> "llama"); a path that
 * is all slashes keeps itself as the name. */
static void default_served_name(srv_opts *o)
{
    const char *dir = o->model.model_dir;
    if (o->served_model_name || !dir)
        return;
    size_t n = strlen(dir);
    while (n > 1 && dir[n - 1] == '/')
        n--;
    size_t s = n;
    while (s > 0 && dir[s - 1] != '/')
        s--;
    o->served_model_name = n > s ? inferd_strndup(dir + s, n - s) : inferd_strdup(dir);
}

/* Validates in dependency order (model, then engine options derived from
 * the model's, then server) and fills the derived fields. Returns the
 * first error with its message set; o stays freeable either way. */
inferd_status srv_opts_validate(srv_opts *o)
{
    if (!o->model.model_dir)
        return inferd_set_error(INFERD_ERR_INVALID_ARG, "no model directory given (--model DIR or \"model\")");
    inferd_status st = model_opts_validate(&o->model);
    if (st != INFERD_OK)
        return st;
    engine_opts_from_model(&o->engine, &o->model);
    if ((st = engine_opts_validate(&o->engine)) != INFERD_OK)
        return st;
    if (!opt_validate(k_rows, INFERD_ARRAY_LEN(k_rows), o, "server options"))
        return INFERD_ERR_INVALID_ARG;
    o->max_queued_requests = o->engine.max_queued_requests;
    default_served_name(o);
    return INFERD_OK;
}

/* The row's index in the sampling table, for the `given` mask. */
static int row_index(const sampling_row *r)
{
    size_t n;
    const sampling_row *rows = sampling_rows(&n);
    return (int)(r - rows);
}

inferd_status srv_gen_defaults_apply(const model_gen_defaults *g, uint64_t given, sampling_params *sp,
                                     bool *max_tokens_set, char *desc, size_t n)
{
    size_t off = 0;
    if (max_tokens_set)
        *max_tokens_set = false;
    if (n > 0)
        desc[0] = '\0';
    for (int i = 0; g && i < g->n; i++) {
        const char *key = g->v[i].key;
        const sampling_row *row = sampling_row_find(key);
        const char *field = strcmp(key, "max_tokens") == 0 ? "max_new_tokens" : key;
        if (row && row_index(row) < 64 && (given >> row_index(row)) & 1)
            continue;
        if (row && sampling_row_set_number(row, sp, g->v[i].value) != INFERD_OK)
            return inferd_set_error(INFERD_ERR_INVALID_ARG, "generation_config.json: field '%s': %s", field,
                                    inferd_last_error());
        if (row && strcmp(key, "max_tokens") == 0 && max_tokens_set)
            *max_tokens_set = true;
        if (off < n)
            off += (size_t)snprintf(desc + off, n - off, "%s%s=%g%s", off ? " " : "", row ? key : field,
                                    g->v[i].value, row ? "" : " (not supported, ignored)");
    }
    if (off == 0 && n > 0)
        snprintf(desc, n, "none");
    return INFERD_OK;
}
