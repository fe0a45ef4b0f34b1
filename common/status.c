/* common/status.c: status names and the per-thread error detail buffer. */
#include "common/status.h"

#include <stdarg.h>
#include <stdio.h>

static _Thread_local char g_err[1024];
static _Thread_local char g_param[64]; /* "" = no field named */

const char *inferd_status_str(inferd_status st)
{
    static const char *names[INFERD_STATUS_COUNT] = {
        [INFERD_OK] = "ok",
        [INFERD_ERR_INVALID_ARG] = "invalid argument",
        [INFERD_ERR_IO] = "i/o error",
        [INFERD_ERR_FORMAT] = "malformed input",
        [INFERD_ERR_UNSUPPORTED] = "unsupported",
        [INFERD_ERR_NOMEM] = "out of memory",
        [INFERD_ERR_NO_BLOCKS] = "no free KV blocks",
        [INFERD_ERR_QUEUE_FULL] = "queue full",
        [INFERD_ERR_NOT_FOUND] = "not found",
        [INFERD_ERR_TOO_LONG] = "too long",
        [INFERD_ERR_CANCELLED] = "cancelled",
        [INFERD_ERR_TIMEOUT] = "timeout",
        [INFERD_ERR_UNAVAILABLE] = "unavailable",
        [INFERD_ERR_DEVICE] = "device error",
        [INFERD_ERR_INTERNAL] = "internal error",
    };
    if ((unsigned)st >= INFERD_STATUS_COUNT)
        return "unknown status";
    return names[st];
}

inferd_status inferd_set_error(inferd_status st, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(g_err, sizeof g_err, fmt, ap);
    va_end(ap);
    g_param[0] = '\0';
    return st;
}

inferd_status inferd_set_error_at(inferd_status st, const char *param, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(g_err, sizeof g_err, fmt, ap);
    va_end(ap);
    snprintf(g_param, sizeof g_param, "%s", param ? param : "");
    return st;
}

inferd_status inferd_set_error_param(inferd_status st, const char *param)
{
    snprintf(g_param, sizeof g_param, "%s", param ? param : "");
    return st;
}

const char *inferd_last_error_param(void)
{
    return g_param[0] ? g_param : NULL;
}

const char *inferd_last_error(void)
{
    return g_err;
}

void inferd_clear_error(void)
{
    g_err[0] = '\0';
    g_param[0] = '\0';
}
