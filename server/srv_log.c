/* server/srv_log.c: see srv_log.h. Lines go through INFERD_LOG_INFO so they carry
 * the common timestamp and are written whole (no interleaving across the
 * HTTP threads). Keys are plain key=value pairs that grep and awk can read.
 *
 * Request-derived fields (method, percent-decoded path) are client bytes:
 * they are escaped before they reach the log, so a "%0a" cannot forge a
 * line and an ESC sequence cannot reach an operator's terminal.
 */
#include "server/srv_log.h"

#include <stdbool.h>
#include <stdio.h>
#include <string.h>

#include "common/log.h"

/* Controls, DEL, '\\' and '"' become \xHH (so the escaping is reversible
 * and a quoted field cannot be closed early); bytes >= 0x80 pass, since
 * UTF-8 paths are legitimate and a terminal cannot be driven by them
 * alone. Output that would not fit ends in "..."; returns its length. */
size_t srv_log_escape(const char *in, char *out, size_t cap)
{
    static const char hex[] = "0123456789abcdef";
    size_t o = 0;
    if (cap == 0)
        return 0;
    for (const unsigned char *p = (const unsigned char *)(in ? in : ""); *p; p++) {
        bool plain = *p >= 0x20 && *p != 0x7f && *p != '\\' && *p != '"';
        size_t need = plain ? 1 : 4;
        if (o + need + 3 >= cap) { /* keep room for "..." and the NUL */
            if (o + 3 < cap) {
                memcpy(out + o, "...", 3);
                o += 3;
            }
            break;
        }
        if (plain) {
            out[o++] = (char)*p;
        } else {
            out[o++] = '\\';
            out[o++] = 'x';
            out[o++] = hex[*p >> 4];
            out[o++] = hex[*p & 15];
        }
    }
    out[o] = '\0';
    return o;
}

/* One line per finished request, from on_completed (event-loop thread).
 * Generation requests carry token counts and timings; others only the
 * status and time. note: why the request ended early, or NULL. */
void srv_log_access(const srv_access *a)
{
    char method[64], path[SRV_LOG_FIELD_MAX];
    srv_log_escape(a->method, method, sizeof method);
    srv_log_escape(a->path, path, sizeof path);
    char ttft[32] = "-";
    if (a->ttft_ms >= 0)
        snprintf(ttft, sizeof ttft, "%.1f", a->ttft_ms);
    if (a->finish)
        INFERD_LOG_INFO("access: %s %s %d id=%s prompt_tokens=%d completion_tokens=%d ttft_ms=%s total_ms=%.1f "
                 "finish=%s%s%s",
                 method, path, a->status, a->id ? a->id : "-", a->prompt_tokens, a->completion_tokens,
                 ttft, a->total_ms, a->finish, a->note ? " note=" : "", a->note ? a->note : "");
    else
        INFERD_LOG_INFO("access: %s %s %d total_ms=%.1f%s%s", method, path, a->status, a->total_ms,
                 a->note ? " note=" : "", a->note ? a->note : "");
}

/* The periodic stats line (main thread, srv_run's loop): rates over the
 * interval dt from two cumulative snapshots; nothing is logged (false)
 * while the server is idle, so an idle log stays quiet. The prefix hit
 * rate is cumulative since start, not per interval. */
bool srv_log_stats(const engine_stats *prev, const engine_stats *cur, double dt, int open_requests)
{
    uint64_t dp = cur->prompt_tokens - prev->prompt_tokens;
    uint64_t dg = cur->generation_tokens - prev->generation_tokens;
    if (cur->running == 0 && cur->waiting == 0 && dp == 0 && dg == 0)
        return false;
    if (dt <= 0)
        dt = 1e-9;
    INFERD_LOG_INFO("stats: running=%d waiting=%d open_http=%d kv_usage=%.1f%% prompt_tok/s=%.1f gen_tok/s=%.1f "
             "preemptions=%llu prefix_hit_rate=%.1f%%",
             cur->running, cur->waiting, open_requests, cur->kv_usage * 100.0, (double)dp / dt,
             (double)dg / dt, (unsigned long long)cur->preemptions,
             cur->prefix_queries ? 100.0 * (double)cur->prefix_hits / (double)cur->prefix_queries : 0.0);
    return true;
}
