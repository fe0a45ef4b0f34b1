/* common/status.h: status codes returned by every recoverable operation.
 *
 * Recoverable failures (bad input, malformed files, no KV blocks, full queue)
 * return an inferd_status and leave state unchanged. A human-readable detail
 * message is kept per thread: the failing function sets it with
 * inferd_set_error() and callers read it with inferd_last_error(). This keeps
 * signatures short while still naming the file, field or tensor at fault.
 */
#ifndef INFERD_COMMON_STATUS_H
#define INFERD_COMMON_STATUS_H

typedef enum {
    INFERD_OK = 0,
    INFERD_ERR_INVALID_ARG,   /* bad parameter or request field */
    INFERD_ERR_IO,            /* open/read/mmap failed */
    INFERD_ERR_FORMAT,        /* malformed file or JSON */
    INFERD_ERR_UNSUPPORTED,   /* valid but not supported (dtype, model type, ...) */
    INFERD_ERR_NOMEM,         /* host or device allocation failed */
    INFERD_ERR_NO_BLOCKS,     /* KV cache has no free blocks */
    INFERD_ERR_QUEUE_FULL,    /* admission queue full */
    INFERD_ERR_NOT_FOUND,     /* missing file, tensor, route, request id */
    INFERD_ERR_TOO_LONG,      /* prompt/context beyond model or cache limits */
    INFERD_ERR_CANCELLED,     /* request aborted */
    INFERD_ERR_TIMEOUT,       /* deadline passed */
    INFERD_ERR_UNAVAILABLE,   /* not ready / shutting down */
    INFERD_ERR_DEVICE,        /* device (CUDA) error that is recoverable */
    INFERD_ERR_INTERNAL,      /* broken invariant reported as status */
    INFERD_STATUS_COUNT
} inferd_status;

/* Short constant name of a status, e.g. "invalid argument". */
const char *inferd_status_str(inferd_status st);

/* Set this thread's error detail (printf format) and return st, so callers can
 * write `return inferd_set_error(INFERD_ERR_FORMAT, "%s: bad header", path);` */
inferd_status inferd_set_error(inferd_status st, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));

/* Like inferd_set_error, and also name the request field at fault (an API
 * key such as "prompt" or "max_tokens"; copied, at most 63 bytes), so a
 * server can report it as the error's param. inferd_set_error clears it. */
inferd_status inferd_set_error_at(inferd_status st, const char *param, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

/* Name the field of the error already set on this thread (keeps its
 * message) and return st: for a caller that knows the field a callee's
 * error is about. */
inferd_status inferd_set_error_param(inferd_status st, const char *param);

/* The field named by this thread's last error, or NULL. */
const char *inferd_last_error_param(void);

/* This thread's last error detail ("" when none was set). */
const char *inferd_last_error(void);

/* Clear this thread's error detail and field. */
void inferd_clear_error(void);

#endif
