/* server/srv_http_guard.h: the checks every request head passes before any
 * handler sees it (issue 11, findings 7 and 8), written against a plain view
 * of the request (method, URL, version, header list) so that they are unit
 * tested as tables without a socket.
 *
 * Strict framing (request smuggling behind proxies): HTTP/1.0 or 1.1 only
 * (505), header names must be RFC 9110 tokens ("Host : x" is 400), one Host
 * on HTTP/1.1 (400), Content-Length digits only and never two different
 * ones (400), Content-Length together with Transfer-Encoding (400), any
 * Transfer-Encoding but a single "chunked" (501), URL above 8 KiB (414),
 * header block above 16 KiB (431). The Content-Length value is parsed to
 * the full 64 bits (saturating), so a huge one still gets the early 413.
 *
 * Browser exposure (DNS rebinding, cross-site POSTs): Host must name the
 * bound address (or localhost on loopback, any IP literal on a wildcard
 * bind, this machine's hostname off loopback) or one of --allowed-hosts;
 * an Origin header must be same-origin or listed in --allowed-origins (403
 * otherwise); a listed origin gets CORS headers and its OPTIONS preflight is
 * answered; POST bodies must be application/json (415).
 */
#ifndef INFERD_SERVER_SRV_HTTP_GUARD_H
#define INFERD_SERVER_SRV_HTTP_GUARD_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/socket.h>

#include "common/status.h"
#include "server/srv_errors.h"
#include "server/srv_opts.h"

#define SRV_GUARD_MAX_URL 8192
#define SRV_GUARD_MAX_HEADERS 16384

typedef struct {
    const char *key, *value;
} srv_hdr;

/* One request head as the HTTP library parsed it. */
typedef struct {
    const char *method, *url, *version;
    const srv_hdr *hdrs; /* [n_hdrs], in arrival order, duplicates kept */
    size_t n_hdrs;
} srv_guard_req;

/* What the head checks found out (pointers into the request's headers). */
typedef struct {
    bool has_length;         /* a Content-Length header */
    uint64_t content_length; /* its value, UINT64_MAX when it overflows */
    bool chunked;            /* Transfer-Encoding: chunked */
    const char *cors_origin; /* allowed cross-origin Origin to echo, NULL none */
    bool preflight;          /* CORS preflight (OPTIONS + Access-Control-Request-Method) */
    const char *cors_req_headers; /* Access-Control-Request-Headers of a preflight, NULL none */
} srv_guard_out;

typedef struct srv_guard srv_guard;

/* Build the checker for a server bound to addr (the resolved --host) with
 * o's --allowed-hosts / --allowed-origins. */
srv_guard *srv_guard_new(const srv_opts *o, const struct sockaddr *addr);
void srv_guard_free(srv_guard *g);

/* Framing, version, header names, Host and Origin: every request, every
 * route. false with *err set (400/403/414/431/501/505). */
bool srv_guard_check_head(const srv_guard *g, const srv_guard_req *r, srv_guard_out *out, srv_error *err);

/* A POST body must be declared application/json (parameters such as
 * charset allowed): false with 415 otherwise. */
bool srv_guard_check_ctype(const srv_guard_req *r, srv_error *err);

/* Whether a preflight's requested header list may be echoed back (tokens,
 * commas and spaces only, bounded). */
bool srv_guard_header_list_ok(const char *v);

/* The API key from --api-key, else --api-key-file (first line, trimmed),
 * else the INFERD_API_KEY environment variable; sets o->api_key. Giving both
 * --api-key and --api-key-file, or an empty / unreadable file, is an error. */
inferd_status srv_guard_resolve_key(srv_opts *o);

/* Log a warning when addr is not loopback and no API key is set. */
void srv_guard_warn_exposure(const srv_opts *o, const struct sockaddr *addr);

#endif
