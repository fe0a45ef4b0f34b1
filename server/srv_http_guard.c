/* server/srv_http_guard.c: request-head checks (see srv_http_guard.h).
 *
 * Why here and not in libmicrohttpd: MHD 0.9.x parses leniently by default
 * (its STRICT_FOR_CLIENT mode would refuse "Host : x" too, but with its own
 * HTML page), so the server keeps MHD lenient and refuses what it must
 * itself, from the handler's first call, where every error is the
 * documented JSON body. What MHD still answers on its own (a request line it
 * cannot parse, an HTTP version it does not know, a Content-Length it cannot
 * parse or that overflows 64 bits, a head larger than its connection pool)
 * is listed in docs/API.md.
 *
 * Host and Origin are compared case-insensitively without the port: the
 * port a client names depends on proxies, and a DNS-rebinding page is
 * recognised by its name, not by its port.
 *
 * Threads: srv_guard_new/free and the start-up helpers run on the main
 * thread; the checks run on any event-loop thread concurrently, which is
 * safe because a srv_guard is immutable after srv_guard_new. Not done
 * here: routing, authentication and the body (srv_http.c).
 */
#include "server/srv_http_guard.h"

#include <arpa/inet.h>
#include <ctype.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <unistd.h>

#include "common/alloc.h"
#include "common/log.h"
#include "common/util.h"
#include "server/srv_util.h"

/* MAX_LIST: entries kept from --allowed-hosts / --allowed-origins (fixed
 * arrays in the guard; entries past it are ignored). KEY_FILE_MAX: a key
 * file is one short line; the cap stops a mistyped path (a model file)
 * from being read into memory. */
#define MAX_LIST 64
#define KEY_FILE_MAX 4096

struct srv_guard {
    char *hosts[MAX_LIST]; /* --allowed-hosts, lower case */
    int n_hosts;
    bool any_host;
    char *origins[MAX_LIST]; /* --allowed-origins, lower case, no trailing '/' */
    int n_origins;
    bool any_origin;
    char bound_name[256];    /* --host as given, lower case */
    char bound_numeric[64];  /* the resolved address */
    char hostname[256];      /* gethostname(), lower case ("" on loopback) */
    bool loopback, wildcard;
};

/* ---- small helpers ----------------------------------------------------- */

static void lower(char *s)
{
    for (; *s; s++)
        *s = (char)tolower((unsigned char)*s);
}

/* Split a comma list into lower-case entries; "*" sets *any.
 * Entries are trimmed of spaces; strip_slash drops one trailing '/' so
 * "https://a.b/" matches the Origin a browser sends ("https://a.b").
 * Returns the count (at most MAX_LIST); out[] entries are heap, owned by
 * the guard. */
static int split_list(const char *text, char **out, bool *any, bool strip_slash)
{
    int n = 0;
    *any = false;
    const char *p = text ? text : "";
    while (*p && n < MAX_LIST) {
        while (*p == ' ' || *p == ',')
            p++;
        const char *e = p;
        while (*e && *e != ',')
            e++;
        size_t len = (size_t)(e - p);
        while (len && p[len - 1] == ' ')
            len--;
        if (strip_slash && len && p[len - 1] == '/')
            len--;
        if (len == 1 && *p == '*')
            *any = true;
        else if (len) {
            out[n] = inferd_strndup(p, len);
            lower(out[n++]);
        }
        p = e;
    }
    return n;
}

/* RFC 9110 "tchar": the characters of a token (header names, and the
 * entries of Access-Control-Request-Headers). */
static bool is_tchar(unsigned char ch)
{
    return isalnum(ch) || (ch && strchr("!#$%&'*+-.^_`|~", ch));
}

static bool is_token(const char *s)
{
    if (!*s)
        return false;
    for (; *s; s++)
        if (!is_tchar((unsigned char)*s))
            return false;
    return true;
}

/* A numeric IPv4 or IPv6 address, which no DNS-rebinding page can use as
 * its name (rebinding needs a name that the attacker's DNS controls). */
static bool is_ip_literal(const char *name)
{
    unsigned char buf[sizeof(struct in6_addr)];
    return inet_pton(AF_INET, name, buf) == 1 || inet_pton(AF_INET6, name, buf) == 1;
}

/* The host part of a Host value or of an origin's authority, lower case,
 * without port and brackets; false when it is malformed. */
static bool host_part(const char *v, size_t n, char *out, size_t cap)
{
    /* h..he is the host; for "[v6]" h skips the bracket and he is the ']'.
     * What follows must be nothing or ":" and digits. Characters that could
     * smuggle a different authority (userinfo '@', path '/', '\\') are
     * refused, not cleaned, so the name we compare is the one the client
     * meant. */
    const char *end = v + n, *h = v, *he;
    if (n && *v == '[') {
        he = memchr(v, ']', n);
        if (!he)
            return false;
        h = v + 1;
        if (he + 1 < end && he[1] != ':')
            return false;
    } else {
        he = memchr(v, ':', n);
        if (!he)
            he = end;
    }
    const char *rest = h == v ? he : he + 1; /* after the host: "" or ":PORT" */
    if (rest < end && *rest != ':')
        return false;
    for (const char *d = rest + 1; d < end; d++)
        if (!isdigit((unsigned char)*d))
            return false;
    size_t len = (size_t)(he - h);
    if (len == 0 || len >= cap)
        return false;
    for (size_t i = 0; i < len; i++) {
        unsigned char ch = (unsigned char)h[i];
        if (ch <= 0x20 || ch >= 0x7f || strchr("/@\\?#\"", ch))
            return false;
        out[i] = (char)tolower(ch);
    }
    out[len] = '\0';
    return true;
}

/* Exact match, or suffix match for entries that start with '.'. The dot is
 * part of the compared suffix, so ".example.com" does not match
 * "badexample.com", nor "example.com" itself. */
static bool in_list(char *const *list, int n, const char *name)
{
    for (int i = 0; i < n; i++) {
        if (strcmp(list[i], name) == 0)
            return true;
        /* ".example.com" matches every subdomain */
        size_t ln = strlen(list[i]), nn = strlen(name);
        if (list[i][0] == '.' && nn > ln && strcmp(name + nn - ln, list[i]) == 0)
            return true;
    }
    return false;
}

/* ---- set-up ------------------------------------------------------------ */

/* Classify the bound address: loopback (127/8, ::1, v4-mapped 127/8) and
 * wildcard (0.0.0.0, ::) decide which Host names are implicitly allowed. */
static void describe_bind(srv_guard *g, const struct sockaddr *addr)
{
    if (addr->sa_family == AF_INET6) {
        const struct in6_addr *a = &((const struct sockaddr_in6 *)addr)->sin6_addr;
        inet_ntop(AF_INET6, a, g->bound_numeric, sizeof g->bound_numeric);
        g->loopback = IN6_IS_ADDR_LOOPBACK(a) ||
                      (IN6_IS_ADDR_V4MAPPED(a) && a->s6_addr[12] == 127);
        g->wildcard = IN6_IS_ADDR_UNSPECIFIED(a);
    } else {
        const struct in_addr *a = &((const struct sockaddr_in *)addr)->sin_addr;
        inet_ntop(AF_INET, a, g->bound_numeric, sizeof g->bound_numeric);
        g->loopback = (ntohl(a->s_addr) >> 24) == 127;
        g->wildcard = a->s_addr == htonl(INADDR_ANY);
    }
}

/* Main thread. Copies what it needs from o (the guard does not keep o).
 * The machine's hostname is allowed only when not bound to loopback: on
 * loopback no other machine can connect by that name, and allowing it
 * would only widen what a rebinding page may use. */
srv_guard *srv_guard_new(const srv_opts *o, const struct sockaddr *addr)
{
    srv_guard *g = inferd_calloc(1, sizeof *g);
    g->n_hosts = split_list(o->allowed_hosts, g->hosts, &g->any_host, false);
    g->n_origins = split_list(o->allowed_origins, g->origins, &g->any_origin, true);
    snprintf(g->bound_name, sizeof g->bound_name, "%s", o->host ? o->host : "");
    lower(g->bound_name);
    if (g->bound_name[0] == '[') { /* "[::1]" given as --host */
        memmove(g->bound_name, g->bound_name + 1, strlen(g->bound_name));
        char *rb = strchr(g->bound_name, ']');
        if (rb)
            *rb = '\0';
    }
    describe_bind(g, addr);
    if (!g->loopback && gethostname(g->hostname, sizeof g->hostname - 1) == 0)
        lower(g->hostname);
    else
        g->hostname[0] = '\0';
    return g;
}

void srv_guard_free(srv_guard *g)
{
    if (!g)
        return;
    for (int i = 0; i < g->n_hosts; i++)
        inferd_free(g->hosts[i]);
    for (int i = 0; i < g->n_origins; i++)
        inferd_free(g->origins[i]);
    inferd_free(g);
}

/* ---- the checks ---------------------------------------------------------- */

/* The DNS-rebinding defence: the Host name must be one that can only lead
 * here: the --host we bound, its numeric address, localhost names when
 * local, any IP literal when bound to the wildcard (the client connected
 * by address), our hostname, or an --allowed-hosts entry. "*" disables it. */
static bool host_allowed(const srv_guard *g, const char *name)
{
    if (g->any_host || strcmp(name, g->bound_name) == 0 || strcmp(name, g->bound_numeric) == 0)
        return true;
    size_t n = strlen(name);
    bool local_name = strcmp(name, "localhost") == 0 || (n > 10 && strcmp(name + n - 10, ".localhost") == 0);
    if ((g->loopback || g->wildcard) && local_name)
        return true;
    if (g->loopback && (strcmp(name, "127.0.0.1") == 0 || strcmp(name, "::1") == 0))
        return true;
    if (g->wildcard && is_ip_literal(name))
        return true;
    if (g->hostname[0] && strcmp(name, g->hostname) == 0)
        return true;
    return in_list(g->hosts, g->n_hosts, name);
}

/* Content-Length / Transfer-Encoding: one unambiguous framing.
 * Refuses what request smuggling relies on: both CL and TE, two different
 * CLs, and any TE other than a single "chunked" (MHD would otherwise pick
 * one reading and a proxy in front another). Repeated equal CLs are
 * tolerated (RFC 9112 6.3). NOTE: the value saturates at UINT64_MAX
 * instead of wrapping, so a huge length is "too large", never small. */
static bool check_framing(const srv_guard_req *r, srv_guard_out *out, srv_error *err)
{
    int n_te = 0;
    const char *te = NULL;
    for (size_t i = 0; i < r->n_hdrs; i++) {
        const char *k = r->hdrs[i].key, *v = r->hdrs[i].value ? r->hdrs[i].value : "";
        if (strcasecmp(k, "Transfer-Encoding") == 0) {
            n_te++;
            te = v;
        } else if (strcasecmp(k, "Content-Length") == 0) {
            uint64_t x = 0;
            const char *d = v;
            if (!*d)
                return srv_error_set(err, SRV_ERR_INVALID, NULL, "empty Content-Length header");
            for (; *d; d++) {
                if (!isdigit((unsigned char)*d))
                    return srv_error_set(err, SRV_ERR_INVALID, NULL, "Content-Length must be decimal digits");
                uint64_t dig = (uint64_t)(*d - '0');
                x = x > (UINT64_MAX - dig) / 10 ? UINT64_MAX : x * 10 + dig;
            }
            if (out->has_length && x != out->content_length)
                return srv_error_set(err, SRV_ERR_INVALID, NULL, "conflicting Content-Length headers");
            out->has_length = true;
            out->content_length = x;
        }
    }
    if (n_te && out->has_length)
        return srv_error_set(err, SRV_ERR_INVALID, NULL,
                             "Content-Length and Transfer-Encoding together are ambiguous; send one");
    if (n_te) {
        size_t s, len;
        srv_strip(te, strlen(te), &s, &len);
        if (n_te > 1 || len != 7 || strncasecmp(te + s, "chunked", 7) != 0)
            return srv_error_set(err, SRV_ERR_NOT_IMPLEMENTED, NULL,
                                 "Transfer-Encoding other than 'chunked' is not supported");
        out->chunked = true;
    }
    return true;
}

/* Origin: same-origin (scheme://Host), listed, or refused.
 * Same-origin compares the origin's whole authority, port included, with
 * the Host header: a page served by this server may always call it. A
 * listed origin gets CORS headers (out->cors_origin points into the
 * request's header value, valid for the request's first call only: the
 * caller copies it). Browsers send "null" from sandboxed or file pages:
 * refused unless listed or "*". */
static bool check_origin(const srv_guard *g, const srv_guard_req *r, const char *host, const char *origin,
                         srv_guard_out *out, srv_error *err)
{
    char ol[512];
    size_t on = strlen(origin);
    if (on >= sizeof ol)
        return srv_error_set(err, SRV_ERR_FORBIDDEN, NULL, "cross-origin request refused (Origin too long)");
    memcpy(ol, origin, on + 1);
    lower(ol);
    if (on && ol[on - 1] == '/')
        ol[--on] = '\0';
    const char *auth = strstr(ol, "://");
    if (host && auth && strcasecmp(auth + 3, host) == 0)
        return true; /* same origin: the page was served by this Host */
    if (g->any_origin || in_list(g->origins, g->n_origins, ol)) {
        out->cors_origin = origin;
        return true;
    }
    (void)r;
    return srv_error_set(err, SRV_ERR_FORBIDDEN, NULL,
                         "cross-origin request from '%.200s' refused (start the server with --allowed-origins "
                         "to allow it)",
                         origin);
}

/* Event-loop thread. The order is the order of the errors a client sees:
 * version, URL length, header size and names, framing, Host, Origin. The
 * framing result is filled even when a later check fails, so the caller
 * knows whether a body follows. total counts each line as "k: v\r\n". */
bool srv_guard_check_head(const srv_guard *g, const srv_guard_req *r, srv_guard_out *out, srv_error *err)
{
    memset(out, 0, sizeof *out);
    bool v11 = r->version && strcmp(r->version, "HTTP/1.1") == 0;
    if (!v11 && !(r->version && strcmp(r->version, "HTTP/1.0") == 0))
        return srv_error_set(err, SRV_ERR_HTTP_VERSION, NULL, "HTTP version '%.16s' is not supported",
                             r->version ? r->version : "");
    if (r->url && strlen(r->url) > SRV_GUARD_MAX_URL)
        return srv_error_set(err, SRV_ERR_URI_TOO_LONG, NULL, "the URL is longer than %d bytes",
                             SRV_GUARD_MAX_URL);
    size_t total = 0;
    int n_host = 0, n_origin = 0;
    const char *host = NULL, *origin = NULL, *acrm = NULL;
    for (size_t i = 0; i < r->n_hdrs; i++) {
        const char *k = r->hdrs[i].key ? r->hdrs[i].key : "", *v = r->hdrs[i].value ? r->hdrs[i].value : "";
        total += strlen(k) + strlen(v) + 4;
        if (!is_token(k))
            return srv_error_set(err, SRV_ERR_INVALID, NULL, "malformed header name '%.64s'", k);
        if (strcasecmp(k, "Host") == 0)
            n_host++, host = v;
        else if (strcasecmp(k, "Origin") == 0)
            n_origin++, origin = v;
        else if (strcasecmp(k, "Access-Control-Request-Method") == 0)
            acrm = v;
        else if (strcasecmp(k, "Access-Control-Request-Headers") == 0)
            out->cors_req_headers = v;
    }
    if (total > SRV_GUARD_MAX_HEADERS)
        return srv_error_set(err, SRV_ERR_HEADERS_TOO_LARGE, NULL, "request headers exceed %d bytes",
                             SRV_GUARD_MAX_HEADERS);
    if (!check_framing(r, out, err))
        return false;
    if (n_host > 1 || (v11 && n_host == 0))
        return srv_error_set(err, SRV_ERR_INVALID, NULL, "an HTTP/1.1 request needs exactly one Host header");
    char name[256];
    if (host && (!host_part(host, strlen(host), name, sizeof name) || !host_allowed(g, name)))
        return srv_error_set(err, SRV_ERR_INVALID, NULL,
                             "Host '%.100s' does not name this server (add it with --allowed-hosts)", host);
    if (n_origin > 1)
        return srv_error_set(err, SRV_ERR_INVALID, NULL, "more than one Origin header");
    if (origin && !check_origin(g, r, host, origin, out, err))
        return false;
    out->preflight = r->method && strcmp(r->method, "OPTIONS") == 0 && origin && acrm;
    return true;
}

/* POST routes only. Parameters after ';' (charset) are ignored; the media
 * type must be exactly application/json. Requiring it makes a cross-site
 * form POST (text/plain, no preflight) fail instead of reaching the model. */
bool srv_guard_check_ctype(const srv_guard_req *r, srv_error *err)
{
    const char *ct = NULL;
    for (size_t i = 0; i < r->n_hdrs; i++)
        if (strcasecmp(r->hdrs[i].key, "Content-Type") == 0)
            ct = r->hdrs[i].value ? r->hdrs[i].value : "";
    if (ct) {
        const char *semi = strchr(ct, ';');
        size_t n = semi ? (size_t)(semi - ct) : strlen(ct), s, len;
        char mt[64];
        snprintf(mt, sizeof mt, "%.*s", (int)(n < sizeof mt ? n : sizeof mt - 1), ct);
        srv_strip(mt, strlen(mt), &s, &len);
        if (len == 16 && strncasecmp(mt + s, "application/json", 16) == 0)
            return true;
    }
    return srv_error_set(err, SRV_ERR_MEDIA_TYPE, NULL,
                         "request bodies must be JSON: send 'Content-Type: application/json'%s%.64s%s",
                         ct ? " (got '" : "", ct ? ct : "", ct ? "')" : "");
}

/* Whether an Access-Control-Request-Headers value may be echoed: tokens,
 * commas and spaces only (nothing that could end the header line), and
 * shorter than 1024 bytes. */
bool srv_guard_header_list_ok(const char *v)
{
    size_t n = 0;
    for (; v[n]; n++)
        if (!is_tchar((unsigned char)v[n]) && v[n] != ',' && v[n] != ' ')
            return false;
    return n < 1024;
}

/* ---- start-up --------------------------------------------------------------- */

/* Main thread, before the server starts. Precedence: --api-key or
 * --api-key-file (not both), then INFERD_API_KEY. The file's first line,
 * trimmed, is the key; a trailing newline is the common case. The result
 * is heap, stored in o->api_key (freed with the options). */
inferd_status srv_guard_resolve_key(srv_opts *o)
{
    if (o->api_key && o->api_key_file)
        return inferd_set_error(INFERD_ERR_INVALID_ARG, "give --api-key or --api-key-file, not both");
    if (o->api_key_file) {
        char *text = NULL;
        size_t n = 0;
        if (util_read_file(o->api_key_file, KEY_FILE_MAX, &text, &n) != INFERD_OK)
            return inferd_set_error(INFERD_ERR_INVALID_ARG, "--api-key-file: cannot read '%s' (at most %d bytes)",
                                    o->api_key_file, KEY_FILE_MAX);
        size_t s, len; /* the first line, trimmed */
        srv_strip(text, strcspn(text, "\r\n"), &s, &len);
        if (len == 0) {
            inferd_free(text);
            return inferd_set_error(INFERD_ERR_INVALID_ARG, "--api-key-file: '%s' holds no key",
                                    o->api_key_file);
        }
        o->api_key = inferd_strndup(text + s, len);
        inferd_free(text);
        return INFERD_OK;
    }
    const char *env = getenv("INFERD_API_KEY");
    if (!o->api_key && env && *env)
        o->api_key = inferd_strdup(env);
    return INFERD_OK;
}

/* Warn, not refuse: serving on a LAN without a key is a legitimate choice
 * (a trusted network, a proxy that authenticates). */
void srv_guard_warn_exposure(const srv_opts *o, const struct sockaddr *addr)
{
    srv_guard g;
    memset(&g, 0, sizeof g);
    describe_bind(&g, addr);
    if (!g.loopback && !o->api_key)
        INFERD_LOG_WARN("listening on %s, which is not a loopback address, without an API key: anyone who can "
                        "reach it can use the model (set INFERD_API_KEY or --api-key-file)",
                        g.bound_numeric);
}
