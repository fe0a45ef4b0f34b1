/* server/srv_opts.h: the public face of the server library: the plain
 * configuration a server is started from (the model options, the engine
 * options and the server's own fields, with the server's option table) and
 * srv_run, which runs one server until SIGINT/SIGTERM.
 *
 * The server reads no command line and no config file: cli/cli_serve.c fills
 * an srv_opts through the three tables (model_opts_rows, engine_opts_rows,
 * srv_opts_rows) from flags and --config JSON. srv_opts_validate checks a
 * whole srv_opts with the same rows, so a program embedding the server gets
 * the same bounds as the command line.
 */
#ifndef INFERD_SERVER_SRV_OPTS_H
#define INFERD_SERVER_SRV_OPTS_H

#include <stdbool.h>
#include <stdint.h>

#include "common/opt.h"
#include "common/status.h"
#include "model/model.h"
#include "scheduler/engine.h"
#include "server/srv_chat.h"

typedef struct {
    model_opts model;   /* model_opts_rows; model.model_dir is required */
    engine_opts engine; /* engine_opts_rows; step limits taken from model by srv_run */
    /* the server's rows (srv_opts_rows) */
    char *served_model_name;     /* NULL = basename of model.model_dir */
    srv_chat_family chat_family; /* --chat-template NAME: a built-in template; NONE = see chat_template */
    char *chat_template;         /* --chat-template FILE or inline Jinja (heap); NULL = the model's */
    bool allow_special_in_content; /* parse special-token text in message contents (trusted clients) */
    double request_timeout_s;    /* 0 = none */
    char *host;
    int port;
    char *api_key; /* NULL = no auth */
    int http_threads;
    int max_connections;
    int64_t max_body_bytes;
    double shutdown_timeout_s; /* grace period for in-flight requests */
    double stats_interval_s;   /* 0 = no stats line */
    /* exposure and abuse limits (srv_http_guard.c, srv_http_limits.c) */
    char *api_key_file;              /* key read from this file (NULL = none; INFERD_API_KEY env next) */
    char *allowed_hosts;             /* extra Host names, comma-separated; "*" = any */
    char *allowed_origins;           /* browser origins allowed cross-origin (CORS), comma list; "*" any */
    int max_connections_per_client;  /* per client address; 0 = no limit */
    double header_timeout_s;         /* request head (and idle keep-alive) deadline */
    int64_t min_body_rate;           /* bytes/s a body upload must keep up after the grace */
    int64_t max_body_buffer_bytes;   /* all buffered request bodies together */
    /* not a row: engine.max_queued_requests as set by srv_run, for the 429 message */
    int max_queued_requests;
    /* not rows: the sampling defaults in force (vLLM's --generation-config
     * auto), filled by srv_run after the model load from its
     * generation_config.json (model.generation_config picks which one, or
     * none): every request's sampling fields start from gen_defaults
     * (srv_opts_default: the table's defaults), and a request without
     * max_tokens gets gen_max_tokens (0 = none: the API's own default),
     * lowered to the room its prompt leaves. */
    sampling_params gen_defaults;
    int32_t gen_max_tokens;
} srv_opts;

/* Defaults of every row of the three tables; the device is "auto" (CUDA
 * when a GPU is present). */
void srv_opts_default(srv_opts *o);
/* Free the strings of o (model dirs included); o is zeroed. */
void srv_opts_free(srv_opts *o);
/* The server's own rows (offsets into srv_opts); *n = count. */
const opt_row *srv_opts_rows(size_t *n);
/* Check o with the rows of the three tables, require model.model_dir, and
 * fill served_model_name when NULL. INVALID_ARG naming the field. */
inferd_status srv_opts_validate(srv_opts *o);

/* Apply g (a model's generation_config.json defaults, model_config.gen)
 * to sp through the sampling rows (scheduler/params.c), which own the
 * ranges. Skips the keys whose row index (in sampling_rows()) has its bit
 * set in `given` (values the caller set itself: a request's or a flag's)
 * and the keys the engine has no row for. *max_tokens_set (may be NULL)
 * says whether max_tokens (max_new_tokens) was applied. desc (n bytes)
 * receives what was applied, "temperature=0.6 top_k=20", with skipped
 * unsupported keys noted, or "none". INVALID_ARG naming
 * generation_config.json and the field when a value is out of range (sp
 * may then be partly set). */
inferd_status srv_gen_defaults_apply(const model_gen_defaults *g, uint64_t given, sampling_params *sp,
                                     bool *max_tokens_set, char *desc, size_t n);

/* Run a server in this process: validate o (srv_opts_validate), start HTTP
 * (/health answers 503 while loading), load tokenizer, model and engine,
 * serve until SIGINT/SIGTERM, shut down gracefully (srv_main.c). Takes over
 * o's strings (o is zeroed). Must be called from the main thread before any
 * other thread exists: it blocks SIGINT/SIGTERM in every thread it starts.
 * Returns the exit code: 0 clean shutdown, 1 start-up failure, 2 invalid
 * options (message logged). */
int srv_run(srv_opts *o);

#endif
