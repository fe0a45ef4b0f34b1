/* server/srv_opts.h: `inferd serve` options: defaults, command-line flags
 * and a JSON config file (--config FILE), with flags overriding the file.
 *
 * Every option is described once, in a table: the model/engine rows are
 * shared with `inferd generate` (cli/cli_common.h), the rest are serve's
 * own. The same parser handles "--name VALUE", "--name=VALUE", boolean
 * "--name" / "--no-name", and the config file's {"name": value} (keys may
 * use '-' or '_').
 */
#ifndef INFERD_SERVER_SRV_OPTS_H
#define INFERD_SERVER_SRV_OPTS_H

#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>

#include "model/model.h"
#include "server/srv_chat.h"

typedef struct {
    /* model */
    char *model_dir;
    char *tokenizer_dir;     /* NULL = model_dir */
    char *served_model_name; /* NULL = basename of model_dir */
    char *chat_template;     /* NULL = detect from tokenizer_config.json */
    srv_chat_family chat_family;
    model_load_format load_format;
    kern_backend backend;
    bool device_auto; /* no --device: cuda when available, else cpu */
    int threads;
    int device_id;
    double gpu_memory_utilization;
    int64_t seed; /* dummy weights */
    /* engine */
    int max_num_seqs;
    int max_num_batched_tokens;
    int block_size;
    int64_t kv_cache_bytes;
    bool enable_prefix_caching;
    int max_model_len;
    int max_queued_requests;
    double request_timeout_s; /* 0 = none */
    /* http */
    char *host;
    int port;
    char *api_key;
    int http_threads;
    int max_connections;
    int64_t max_body_bytes;
    double shutdown_timeout_s; /* grace period for in-flight requests */
    double stats_interval_s;   /* 0 = no stats line */
    char *log_level;
} srv_opts;

/* Defaults (engine and model defaults come from engine_opts_default and
 * model_opts_default). */
void srv_opts_default(srv_opts *o);
void srv_opts_free(srv_opts *o);

/* Parse argv (argv[0] is "serve"). Returns 0 ok, 1 when --help was printed
 * to `out`, 2 on a usage error (message in inferd_last_error()). */
int srv_opts_parse(srv_opts *o, int argc, char **argv, FILE *out);

/* Apply one config-file JSON object (text); flags already applied are NOT
 * overridden when called before the command line. Returns false with
 * inferd_last_error() set. (Used by srv_opts_parse, exposed for tests.) */
bool srv_opts_apply_json(srv_opts *o, const char *json, const char *name);

void srv_opts_usage(FILE *f);

#endif
