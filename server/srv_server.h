/* server/srv_server.h: the state one `inferd serve` process shares between
 * its HTTP threads (srv_http.c), request handlers (srv_gen.c,
 * srv_routes.c) and the main thread (srv_main.c).
 *
 * Written once at start-up (model, tokenizer, engine, limits) before `ready`
 * is set; afterwards only the atomics change.
 */
#ifndef INFERD_SERVER_SRV_SERVER_H
#define INFERD_SERVER_SRV_SERVER_H

#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>

#include "model/model.h"
#include "tokenizer/tokenizer.h"
#include "scheduler/engine.h"
#include "server/srv_chat.h"
#include "server/srv_metrics.h"
#include "server/srv_opts.h"

typedef struct srv_http srv_http;

typedef struct srv_server {
    srv_opts opts;
    model *m;
    tokenizer *tok;
    engine *eng;
    srv_metrics *metrics;
    srv_http *http;
    /* chat template (srv_chat.h): never NULL once loaded; may be not ready */
    srv_chat *chat;
    /* limits */
    int max_model_len;
    int vocab_size;
    int64_t created; /* unix time the model was loaded */
    /* lifecycle */
    atomic_bool ready;    /* model loaded; API requests served */
    atomic_bool draining; /* shutting down: new requests get 503 */
    atomic_bool aborting; /* grace period over: in-flight requests aborted */
    atomic_int active;    /* generation requests in flight */
    atomic_uint_fast64_t next_id;
} srv_server;

#endif
