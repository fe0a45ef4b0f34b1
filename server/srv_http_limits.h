/* server/srv_http_limits.h: per-connection deadlines against slow clients
 * and the global budget for buffered request bodies (issue 11, findings 3
 * and 4). No HTTP library types: srv_http.c feeds it events.
 *
 * Deadlines (slowloris): a connection waiting for a request head (a new
 * connection, or a keep-alive one between requests) must complete the head
 * within --header-timeout; a body must then arrive at --min-body-rate on
 * average, after a grace of --header-timeout (deadline = body start + grace
 * + bytes received / rate). A connection past its deadline has its socket
 * shut down (the HTTP library then closes it); while a request is being
 * answered there is no deadline here. The per-address connection limit is
 * libmicrohttpd's (MHD_OPTION_PER_IP_CONNECTION_LIMIT).
 *
 * Body budget: every buffered body byte is reserved from one budget
 * (--max-body-buffer-bytes) and released when the body is freed; a body that
 * does not fit is refused (503 + Retry-After, or 413 when it could never
 * fit), so a crowd of large uploads cannot pin unbounded memory.
 *
 * Thread-safe: MHD threads report events, the watchdog thread scans.
 */
#ifndef INFERD_SERVER_SRV_HTTP_LIMITS_H
#define INFERD_SERVER_SRV_HTTP_LIMITS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "server/srv_errors.h"
#include "server/srv_opts.h"

typedef struct srv_limits srv_limits;
typedef struct srv_peer srv_peer;

srv_limits *srv_limits_new(const srv_opts *o);
/* Free (every peer must have been closed). */
void srv_limits_free(srv_limits *L);

/* A connection opened on socket fd; its head deadline starts now. */
srv_peer *srv_limits_peer_open(srv_limits *L, int fd);
/* The connection is closing: forget it. Must run before its fd is closed
 * (libmicrohttpd's CLOSED notification does), so a scan never touches a
 * reused descriptor. p may be NULL. */
void srv_limits_peer_close(srv_limits *L, srv_peer *p);
/* The head is complete; body_follows: a body is to be read next. */
void srv_limits_head_done(srv_limits *L, srv_peer *p, bool body_follows);
/* n more body bytes arrived. */
void srv_limits_body_progress(srv_limits *L, srv_peer *p, size_t n);
/* The body is complete: no deadline while the request is answered. */
void srv_limits_body_done(srv_limits *L, srv_peer *p);
/* The response went out: the next head's deadline starts now. */
void srv_limits_request_done(srv_limits *L, srv_peer *p);

/* Shut down the socket of every connection past its deadline; returns how
 * many (each only once). now: util_now_s(). */
int srv_limits_scan(srv_limits *L, double now);

/* Early check of a declared body size against the budget: true when it may
 * proceed; false with *err = 413 (larger than the whole budget) or 503 busy
 * (not now). */
bool srv_limits_body_admit(srv_limits *L, uint64_t declared, srv_error *err);
/* Reserve n buffered bytes; false (nothing reserved) beyond the budget. */
bool srv_limits_body_reserve(srv_limits *L, size_t n);
void srv_limits_body_release(srv_limits *L, size_t n);
/* Bytes reserved now. */
int64_t srv_limits_body_in_use(srv_limits *L);

#endif
