/* server/srv_log.h: operator-facing log lines: one access-log line per HTTP
 * request and a periodic stats line while the engine is busy.
 */
#ifndef INFERD_SERVER_SRV_LOG_H
#define INFERD_SERVER_SRV_LOG_H

#include <stddef.h>

#include "scheduler/engine.h"

typedef struct {
    const char *method, *path;
    int status;     /* HTTP status; 499 = client closed before a response */
    const char *id; /* request id or NULL */
    int prompt_tokens, completion_tokens;
    double ttft_ms, total_ms; /* ttft < 0: none */
    const char *finish;       /* NULL for non-generation routes */
    const char *note;         /* "client disconnected", ... or NULL */
} srv_access;

/* Longest logged request-derived field, escapes included (longer ones end
 * in "..."). */
#define SRV_LOG_FIELD_MAX 512

/* Copy in (NULL = "") into out[cap] with every byte < 0x20, 0x7f, '\\' and
 * '"' written as \xNN, truncated with "..." to fit; always NUL-terminated
 * when cap > 0. Returns the length written. UTF-8 passes through. */
size_t srv_log_escape(const char *in, char *out, size_t cap);

/* One line: method path status id tokens ttft total [finish] [note], the
 * method and path escaped (srv_log_escape). */
void srv_log_access(const srv_access *a);

/* Stats line from two engine snapshots dt seconds apart; prints only when
 * something was running, waiting or produced tokens in between. Returns
 * whether it printed. */
bool srv_log_stats(const engine_stats *prev, const engine_stats *cur, double dt, int open_requests);

#endif
