/* server/srv_routes.h: the synchronous endpoints (everything except
 * generation): /health, /v1/models, /metrics, /tokenize, /detokenize.
 * Each returns a heap JSON/text body, or NULL with *err set.
 */
#ifndef INFERD_SERVER_SRV_ROUTES_H
#define INFERD_SERVER_SRV_ROUTES_H

#include <stddef.h>

#include "server/srv_errors.h"
#include "server/srv_server.h"

/* 200 {"status":"ok"} when ready; NULL + 503 error while loading/stopping. */
char *srv_routes_health(srv_server *s, srv_error *err);
/* GET /v1/models (model_id NULL) or /v1/models/{model_id} (404 if unknown). */
char *srv_routes_models(srv_server *s, const char *model_id, srv_error *err);
/* Prometheus exposition. */
char *srv_routes_metrics(srv_server *s, size_t *len);
char *srv_routes_tokenize(srv_server *s, const char *body, size_t len, srv_error *err);
char *srv_routes_detokenize(srv_server *s, const char *body, size_t len, srv_error *err);

#endif
