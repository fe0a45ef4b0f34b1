/* server/srv_errors.c: see srv_errors.h. One table maps each error kind to
 * its HTTP status, OpenAI error `type` and machine-readable `code`; one
 * function renders the body. Keeping this in one place is what lets the bad
 * input tests check every status against its documented body.
 *
 * The body is OpenAI's error envelope, {"error": {message, type, param,
 * code}}, so OpenAI SDKs raise their usual exception classes (they map on
 * the HTTP status and read `message`). Threads: pure functions; srv_error
 * lives on the caller's stack, nothing here is shared.
 */
#include "server/srv_errors.h"

#include <cjson/cJSON.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include "common/alloc.h"
#include "common/check.h"
#include "server/srv_util.h"

typedef struct {
    int http;
    const char *type;
    const char *code;
} err_map;

/* Indexed by kind; a kind added to the enum without a row would read a
 * zero row (status 0), which is why the enum's COUNT sizes the array and
 * the unit tests render every kind. SRV_ERR_NONE never reaches a client:
 * rendering it is a bug, answered as a 500 rather than a 200 body. */
static const err_map k_map[SRV_ERR_KIND_COUNT] = {
    [SRV_ERR_NONE] = {500, "server_error", "internal_error"},
    [SRV_ERR_INVALID] = {400, "invalid_request_error", "invalid_request"},
    [SRV_ERR_CONTEXT_LENGTH] = {400, "invalid_request_error", "context_length_exceeded"},
    [SRV_ERR_NO_CHAT_TEMPLATE] = {400, "invalid_request_error", "chat_template_missing"},
    [SRV_ERR_AUTH] = {401, "authentication_error", "invalid_api_key"},
    [SRV_ERR_NOT_FOUND] = {404, "not_found_error", "not_found"},
    [SRV_ERR_MODEL_NOT_FOUND] = {404, "not_found_error", "model_not_found"},
    [SRV_ERR_METHOD] = {405, "invalid_request_error", "method_not_allowed"},
    [SRV_ERR_TOO_LARGE] = {413, "invalid_request_error", "request_too_large"},
    [SRV_ERR_QUEUE_FULL] = {429, "rate_limit_error", "queue_full"},
    [SRV_ERR_INTERNAL] = {500, "server_error", "internal_error"},
    [SRV_ERR_UNAVAILABLE] = {503, "service_unavailable", "unavailable"},
    [SRV_ERR_TIMEOUT] = {503, "timeout_error", "request_timeout"},
    [SRV_ERR_FORBIDDEN] = {403, "permission_error", "origin_not_allowed"},
    [SRV_ERR_URI_TOO_LONG] = {414, "invalid_request_error", "uri_too_long"},
    [SRV_ERR_MEDIA_TYPE] = {415, "invalid_request_error", "unsupported_media_type"},
    [SRV_ERR_HEADERS_TOO_LARGE] = {431, "invalid_request_error", "headers_too_large"},
    [SRV_ERR_NOT_IMPLEMENTED] = {501, "invalid_request_error", "not_implemented"},
    [SRV_ERR_BUSY] = {503, "service_unavailable", "server_busy"},
    [SRV_ERR_HTTP_VERSION] = {505, "invalid_request_error", "http_version_not_supported"},
};

/* Always returns false so a check can be `return srv_error_set(...)` in
 * a function returning bool. The message and param are truncated to their
 * fixed buffers (no allocation on the error path). */
bool srv_error_set(srv_error *e, srv_err_kind kind, const char *param, const char *fmt, ...)
{
    e->kind = kind;
    snprintf(e->param, sizeof e->param, "%s", param ? param : "");
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(e->message, sizeof e->message, fmt, ap);
    va_end(ap);
    return false;
}

/* The library's status codes in HTTP terms: the caller's fault (bad input,
 * too long) is 4xx, load and shutdown are 503, anything else is ours (500).
 * UNSUPPORTED is a 400: a valid request for a feature this server lacks. */
srv_err_kind srv_err_kind_from_status(inferd_status st)
{
    switch (st) {
    case INFERD_ERR_INVALID_ARG:
    case INFERD_ERR_FORMAT:
    case INFERD_ERR_UNSUPPORTED: return SRV_ERR_INVALID;
    case INFERD_ERR_TOO_LONG: return SRV_ERR_CONTEXT_LENGTH;
    case INFERD_ERR_QUEUE_FULL: return SRV_ERR_QUEUE_FULL;
    case INFERD_ERR_UNAVAILABLE:
    case INFERD_ERR_CANCELLED: return SRV_ERR_UNAVAILABLE;
    case INFERD_ERR_TIMEOUT: return SRV_ERR_TIMEOUT;
    case INFERD_ERR_NOT_FOUND: return SRV_ERR_NOT_FOUND;
    default: return SRV_ERR_INTERNAL;
    }
}

/* Uses the calling thread's last error text (inferd_last_error is
 * thread-local) and, when the caller names no field, the field the library
 * named. */
void srv_error_from_status(srv_error *e, inferd_status st, const char *param)
{
    const char *detail = inferd_last_error();
    if (!param)
        param = inferd_last_error_param();
    srv_error_set(e, srv_err_kind_from_status(st), param, "%s",
                  detail && *detail ? detail : inferd_status_str(st));
}

int srv_error_http_status(srv_err_kind kind)
{
    if ((int)kind < 0 || kind >= SRV_ERR_KIND_COUNT)
        kind = SRV_ERR_INTERNAL;
    return k_map[kind].http;
}

/* The body (heap, inferd_free) and, when http_status is not NULL, its
 * status. The message may quote client bytes ("no route for ..."), hence
 * the UTF-8 sanitizing before it becomes a JSON string; an empty message
 * falls back to the code so clients never show a blank error. */
char *srv_error_render(const srv_error *e, int *http_status)
{
    srv_err_kind kind = e->kind;
    if ((int)kind <= 0 || kind >= SRV_ERR_KIND_COUNT)
        kind = SRV_ERR_INTERNAL;
    const err_map *m = &k_map[kind];
    char *msg = srv_utf8_sanitize(e->message, strnlen(e->message, sizeof e->message));
    cJSON *root = cJSON_CreateObject();
    cJSON *err = cJSON_AddObjectToObject(root, "error");
    cJSON_AddStringToObject(err, "message", msg[0] ? msg : m->code);
    cJSON_AddStringToObject(err, "type", m->type);
    if (e->param[0]) {
        char *p = srv_utf8_sanitize(e->param, strnlen(e->param, sizeof e->param));
        cJSON_AddStringToObject(err, "param", p);
        inferd_free(p);
    } else {
        cJSON_AddNullToObject(err, "param");
    }
    cJSON_AddStringToObject(err, "code", m->code);
    char *out = cJSON_PrintUnformatted(root);
    INFERD_CHECK(out != NULL);
    cJSON_Delete(root);
    inferd_free(msg);
    char *body = inferd_strdup(out);
    cJSON_free(out);
    if (http_status)
        *http_status = m->http;
    return body;
}
