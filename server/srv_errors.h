/* server/srv_errors.h: the server's error kinds and the ONE place that maps
 * them (and engine/library inferd_status codes) to an HTTP status and an
 * OpenAI-style error body {"error": {"message", "type", "param", "code"}}.
 *
 * Handlers fill a srv_error (kind, param, message) and hand it to the HTTP
 * layer; nothing else builds error JSON.
 */
#ifndef INFERD_SERVER_SRV_ERRORS_H
#define INFERD_SERVER_SRV_ERRORS_H

#include <stdbool.h>

#include "common/status.h"

typedef enum {
    SRV_ERR_NONE = 0,
    SRV_ERR_INVALID,          /* 400 invalid_request_error: malformed or invalid request */
    SRV_ERR_CONTEXT_LENGTH,   /* 400 invalid_request_error / context_length_exceeded */
    SRV_ERR_NO_CHAT_TEMPLATE, /* 400 invalid_request_error / chat_template_missing */
    SRV_ERR_AUTH,             /* 401 authentication_error / invalid_api_key */
    SRV_ERR_NOT_FOUND,        /* 404 not_found_error / not_found (route) */
    SRV_ERR_MODEL_NOT_FOUND,  /* 404 not_found_error / model_not_found */
    SRV_ERR_METHOD,           /* 405 invalid_request_error / method_not_allowed */
    SRV_ERR_TOO_LARGE,        /* 413 invalid_request_error / request_too_large */
    SRV_ERR_QUEUE_FULL,       /* 429 rate_limit_error / queue_full */
    SRV_ERR_INTERNAL,         /* 500 server_error / internal_error */
    SRV_ERR_UNAVAILABLE,      /* 503 service_unavailable / unavailable (loading, stopping) */
    SRV_ERR_TIMEOUT,          /* 503 timeout_error / request_timeout */
    /* HTTP-level refusals (srv_http_guard.c, srv_http_limits.c) */
    SRV_ERR_FORBIDDEN,        /* 403 permission_error / origin_not_allowed (browser cross-origin) */
    SRV_ERR_URI_TOO_LONG,     /* 414 invalid_request_error / uri_too_long */
    SRV_ERR_MEDIA_TYPE,       /* 415 invalid_request_error / unsupported_media_type */
    SRV_ERR_HEADERS_TOO_LARGE, /* 431 invalid_request_error / headers_too_large */
    SRV_ERR_NOT_IMPLEMENTED,  /* 501 invalid_request_error / not_implemented (Transfer-Encoding) */
    SRV_ERR_BUSY,             /* 503 service_unavailable / server_busy (body budget); Retry-After */
    SRV_ERR_HTTP_VERSION,     /* 505 invalid_request_error / http_version_not_supported */
    SRV_ERR_KIND_COUNT
} srv_err_kind;

typedef struct {
    srv_err_kind kind;
    char param[64]; /* offending request field, "" = none (JSON null) */
    char message[512];
} srv_error;

/* Fill *e (printf message, param may be NULL); returns false so validators can
 * write `return srv_error_set(...)`. */
bool srv_error_set(srv_error *e, srv_err_kind kind, const char *param, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));

/* The error kind for a library / engine status (INVALID_ARG -> INVALID,
 * TOO_LONG -> CONTEXT_LENGTH, QUEUE_FULL -> QUEUE_FULL, UNAVAILABLE ->
 * UNAVAILABLE, TIMEOUT -> TIMEOUT, NOT_FOUND -> NOT_FOUND, else INTERNAL). */
srv_err_kind srv_err_kind_from_status(inferd_status st);

/* Fill *e from a failed status and this thread's inferd_last_error(); a
 * NULL param takes the field the error names (inferd_last_error_param()),
 * if any. */
void srv_error_from_status(srv_error *e, inferd_status st, const char *param);

/* THE mapping: the HTTP status of e's kind and its JSON body (heap, inferd_free).
 * The message is made valid UTF-8 before it goes into the JSON. */
char *srv_error_render(const srv_error *e, int *http_status);

/* HTTP status of a kind (without building a body). */
int srv_error_http_status(srv_err_kind kind);

#endif
