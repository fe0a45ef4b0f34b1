/* server/srv_http.c: libmicrohttpd front end (see srv_http.h).
 *
 * Per request, MHD calls on_request several times: once when the headers are
 * in (route, method, API key and Content-Length are checked here, so bad
 * requests are refused before their body is read), once per body piece, and
 * then until a response is queued. Generation requests are submitted to the
 * engine and then:
 *   - non-streaming: the connection is suspended; the engine's notify resumes
 *     it; on_request pumps the output and suspends again until finished;
 *   - streaming: a chunked response is queued at once; its reader callback
 *     hands out pending SSE bytes and suspends the connection when there are
 *     none, to be resumed by notify in the same way.
 *
 * The wait protocol (all under h->mu): the consumer clears `signaled`, pumps
 * the engine stream without the lock, then re-takes the lock and suspends
 * only if `signaled` is still false; notify sets `signaled` and resumes a
 * suspended connection. No engine call is made under h->mu, so the engine's
 * internal locks never nest inside ours.
 *
 * Notify reaches a connection through a slot with a stable address (chunks
 * that are never moved); the slot is detached under h->mu when the request
 * completes, so a late notify finds no connection and does nothing, and a
 * slot reused by another request only costs that request a spurious wakeup.
 *
 * MHD does not watch suspended sockets, so a watchdog thread polls the
 * sockets of suspended connections every 50 ms for a hang-up (POLLRDHUP)
 * and resumes them marked client_gone; the handler then returns MHD_NO, MHD
 * closes the connection, and on_completed releases the engine stream
 * (aborting the request, which frees its KV blocks within one engine step).
 * A hang-up seen as POLLRDHUP alone may be a half-close (shutdown(SHUT_WR),
 * `nc -N`): the client still reads. The watchdog then probes once by
 * writing something every HTTP/1.1 client ignores (an interim
 * "100 Continue" before a non-streaming answer, an SSE comment in a stream);
 * a client that really left answers the probe with a reset (POLLHUP/POLLERR)
 * and is cancelled then, a half-closed one gets its answer. HTTP/1.0
 * clients cannot be sent a 1xx: theirs run to completion.
 *
 * Request heads pass srv_http_guard.c (strict framing, Host, Origin / CORS,
 * Content-Type) and srv_http_limits.c (deadlines, body budget) first.
 */
#include "server/srv_http.h"

#include <arpa/inet.h>
#include <errno.h>
#include <microhttpd.h>
#include <netdb.h>
#include <poll.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "common/alloc.h"
#include "common/buf.h"
#include "common/list.h"
#include "common/log.h"
#include "common/util.h"
#include "server/srv_gen.h"
#include "server/srv_http_int.h"
#include "server/srv_log.h"
#include "server/srv_routes.h"
#include "server/srv_util.h"

/* Slots come in chunks of SLOT_CHUNK that are never moved or freed before
 * srv_http_free: the engine holds a slot's address as its notify cookie, so
 * a slot must outlive every request that could still be notified through it.
 * SSE_BLOCK is the buffer MHD hands sse_reader (one read's largest piece).
 * MAX_HDRS bounds the head we copy for the guard (a fixed array, no malloc
 * per request); MHD's own memory limit bounds the bytes, this the count. */
#define SLOT_CHUNK 256
#define SSE_BLOCK 8192
#define MAX_HDRS 100       /* more header lines: 431 */

/* The routes we serve. A fixed table scanned in order: nine entries make a
 * hash pointless, and the order matters (exact "/v1/models" before the
 * "/v1/models/" prefix). Unknown paths are a 404 decided at the head. */
typedef enum {
    R_HEALTH,
    R_MODELS,
    R_MODEL,
    R_METRICS,
    R_COMPLETIONS,
    R_CHAT,
    R_RESPONSES,
    R_TOKENIZE,
    R_DETOKENIZE
} route_id;

struct route {
    const char *path;
    bool prefix;      /* path is a prefix ("/v1/models/{id}") */
    bool post;        /* POST, else GET/HEAD */
    bool auth;        /* needs the API key when one is set */
    bool needs_model; /* 503 until the model is loaded */
    route_id id;
};

static const route k_routes[] = {
    {"/health", false, false, false, false, R_HEALTH},
    {"/metrics", false, false, false, false, R_METRICS},
    {"/v1/models", false, false, true, true, R_MODELS},
    {"/v1/models/", true, false, true, true, R_MODEL},
    {"/v1/completions", false, true, true, true, R_COMPLETIONS},
    {"/v1/chat/completions", false, true, true, true, R_CHAT},
    {"/v1/responses", false, true, true, true, R_RESPONSES},
    {"/tokenize", false, true, true, true, R_TOKENIZE},
    {"/detokenize", false, true, true, true, R_DETOKENIZE},
};

/* ---- slots and the request list (callers hold h->mu) ------------------- */

/* A free slot bound to c (caller holds h->mu). Grows by one chunk when the
 * free list is empty; chunks are only added, so every slot address handed
 * to the engine stays valid. Allocation failure aborts (inferd_calloc). */
static srv_slot *slot_alloc(srv_http *h, srv_conn *c)
{
    if (h->n_free == 0) {
        srv_slot *chunk = inferd_calloc(SLOT_CHUNK, sizeof *chunk);
        h->chunks = inferd_realloc(h->chunks, sizeof *h->chunks * (size_t)(h->n_chunks + 1));
        h->chunks[h->n_chunks++] = chunk;
        if (h->cap_free < h->n_free + SLOT_CHUNK) {
            h->cap_free = h->n_free + SLOT_CHUNK;
            h->free_slots = inferd_realloc(h->free_slots, sizeof *h->free_slots * (size_t)h->cap_free);
        }
        for (int i = SLOT_CHUNK - 1; i >= 0; i--) {
            chunk[i].h = h;
            h->free_slots[h->n_free++] = &chunk[i];
        }
    }
    srv_slot *s = h->free_slots[--h->n_free];
    s->c = c;
    return s;
}

/* Detach s from its request and return it to the free list (caller holds
 * h->mu). NOTE: the engine may still call on_notify with s afterwards (its
 * stream is released later, in srv_gen_free); on_notify then finds s->c
 * NULL, or a newer request, which costs that request one spurious wakeup. */
static void slot_release(srv_http *h, srv_slot *s)
{
    s->c = NULL;
    h->free_slots[h->n_free++] = s;
}

/* h->conns holds the requests with a generation, for srv_http_wake_all_locked
 * (shutdown) and the watchdog. Both helpers need h->mu; list_remove is
 * idempotent because on_completed runs for requests never added. */
static void list_add(srv_http *h, srv_conn *c)
{
    inferd_list_push_front(&h->conns, &c->link);
}

static void list_remove(srv_http *h, srv_conn *c)
{
    if (inferd_list_linked(&c->link))
        inferd_list_unlink(&h->conns, &c->link);
}

/* Resume a suspended connection (caller holds h->mu).
 * NOTE: MHD_resume_connection is legal from any thread, but a connection
 * must not be resumed twice nor resumed when not suspended: `suspended`,
 * only changed under h->mu, is what keeps try_suspend and this in step.
 * `signaled` is set even when the connection is running, so a consumer
 * between its pump and try_suspend sees the news and pumps again. */
void srv_http_wake_locked(srv_conn *c)
{
    c->signaled = true;
    if (c->suspended) {
        c->suspended = false;
        MHD_resume_connection(c->conn);
    }
}

/* Wake every request with a generation (caller holds h->mu). */
void srv_http_wake_all_locked(srv_http *h)
{
    inferd_list_node *it;
    INFERD_LIST_FOR_EACH(&h->conns, it)
        srv_http_wake_locked(CONN_OF(it));
}

/* Engine thread: new output for the request in this slot (srv_gen passes
 * this as the stream's notify). It takes only h->mu and never calls back into the engine, so the engine's
 * own lock, held or not by the caller, cannot deadlock with ours. */
static void on_notify(void *user)
{
    srv_slot *s = user;
    srv_http *h = s->h;
    pthread_mutex_lock(&h->mu);
    if (s->c)
        srv_http_wake_locked(s->c);
    pthread_mutex_unlock(&h->mu);
}

/* Suspend c unless output (or a reason to stop) arrived since the pump.
 * Returns true when suspended; false means "pump again".
 * Event-loop thread, from gen_wait or sse_reader only: MHD allows suspending
 * only from inside a callback for that connection. Declines when the
 * connection must act instead of sleep: new output (signaled), client gone,
 * server closing, or an abort still to be made (begin_pump does it). */
static bool try_suspend(srv_conn *c)
{
    srv_http *h = c->h;
    bool suspended = false;
    pthread_mutex_lock(&h->mu);
    bool abort_pending = atomic_load(&h->s->aborting) && !c->aborted;
    if (!c->signaled && !c->client_gone && !h->closing && !abort_pending) {
        c->suspended = true;
        MHD_suspend_connection(c->conn);
        suspended = true;
    }
    pthread_mutex_unlock(&h->mu);
    return suspended;
}

/* Before a pump: clear `signaled`; false when the request must be dropped
 * (client gone or server closing). Aborts the generation on shutdown.
 * Event-loop thread. NOTE: srv_gen_abort runs outside h->mu (engine calls
 * never nest inside our lock); c->aborted is touched only by this thread. */
static bool begin_pump(srv_conn *c)
{
    srv_http *h = c->h;
    pthread_mutex_lock(&h->mu);
    bool gone = c->client_gone || h->closing;
    c->signaled = false;
    pthread_mutex_unlock(&h->mu);
    if (gone) {
        c->note = c->client_gone ? "client disconnected" : "server closing";
        return false;
    }
    if (atomic_load(&h->s->aborting) && !c->aborted) {
        c->aborted = true;
        srv_gen_abort(c->gen);
    }
    return true;
}

/* Free the buffered body and give its bytes back to the budget. */
static void body_drop(srv_conn *c)
{
    inferd_buf_free(&c->body);
    srv_limits_body_release(c->h->limits, c->reserved);
    c->reserved = 0;
}

/* c is shared by MHD's request (the reference taken in conn_begin, dropped
 * in on_completed) and a streaming response (taken in gen_start, dropped by
 * sse_free when MHD destroys the response). Either may be last: MHD may
 * destroy the response after the request-completed callback. */
static void conn_unref(srv_conn *c)
{
    if (atomic_fetch_sub(&c->refs, 1) != 1)
        return;
    body_drop(c);
    inferd_free(c);
}

/* ---- responses ------------------------------------------------------------ */

/* MHD's free callback for bodies we allocated with inferd_*, so the pair of
 * allocator and free is ours, not libc's by assumption. */
static void free_body(void *p)
{
    inferd_free(p);
}

/* Queue body (heap, taken) with status. extra: NULL-terminated header pairs.
 * Event-loop thread. Ownership of body passes to MHD even on failure (freed
 * here then). Every response gets the CORS echo for an allowed origin, and
 * "Connection: close" while draining so keep-alive clients reconnect
 * elsewhere instead of holding a connection to a server that is leaving.
 * Records the status for the access log and the metrics. */
static enum MHD_Result reply(srv_conn *c, int status, char *body, size_t len, const char *ctype,
                             const char *const *extra)
{
    struct MHD_Response *r = MHD_create_response_from_buffer_with_free_callback(len, body, free_body);
    if (!r) {
        inferd_free(body);
        return MHD_NO;
    }
    MHD_add_response_header(r, MHD_HTTP_HEADER_CONTENT_TYPE, ctype);
    for (int i = 0; extra && extra[i]; i += 2)
        MHD_add_response_header(r, extra[i], extra[i + 1]);
    if (c->cors[0]) {
        MHD_add_response_header(r, "Access-Control-Allow-Origin", c->cors);
        MHD_add_response_header(r, "Vary", "Origin");
    }
    if (atomic_load(&c->h->s->draining))
        MHD_add_response_header(r, MHD_HTTP_HEADER_CONNECTION, "close");
    enum MHD_Result ret = MHD_queue_response(c->conn, (unsigned)status, r);
    MHD_destroy_response(r);
    c->status = status;
    srv_metrics_http(c->h->s->metrics, status);
    return ret;
}

/* body: NUL-terminated JSON, taken. */
static enum MHD_Result reply_json(srv_conn *c, int status, char *body)
{
    return reply(c, status, body, strlen(body), "application/json", NULL);
}

/* Every error response goes through srv_error_render (srv_errors.c). */
static enum MHD_Result reply_error(srv_conn *c, const srv_error *e)
{
    int status;
    char *body = srv_error_render(e, &status);
    const char *extra[5] = {NULL};
    if (e->kind == SRV_ERR_QUEUE_FULL || e->kind == SRV_ERR_BUSY) {
        extra[0] = "Retry-After";
        extra[1] = "1";
    } else if (e->kind == SRV_ERR_AUTH) {
        extra[0] = "WWW-Authenticate";
        extra[1] = "Bearer";
    } else if (e->kind == SRV_ERR_METHOD && c->rt) {
        extra[0] = "Allow";
        extra[1] = c->rt->post ? "POST" : "GET, HEAD";
    }
    return reply(c, status, body, strlen(body), "application/json", extra);
}

/* ---- routing and admission -------------------------------------------------- */

/* The route for url, or NULL (404). *method_ok tells whether method suits
 * it (else 405 with Allow); HEAD is served as GET (MHD drops the body). A
 * prefix route needs a non-empty remainder: "/v1/models/" alone is not a
 * model id. The query string is not part of url (MHD strips it). */
static const route *find_route(const char *url, bool *method_ok, const char *method)
{
    bool is_post = strcmp(method, "POST") == 0;
    bool is_get = strcmp(method, "GET") == 0 || strcmp(method, "HEAD") == 0;
    for (size_t i = 0; i < INFERD_ARRAY_LEN(k_routes); i++) {
        const route *r = &k_routes[i];
        bool match = r->prefix ? strncmp(url, r->path, strlen(r->path)) == 0 && url[strlen(r->path)] != '\0'
                               : strcmp(url, r->path) == 0;
        if (match) {
            *method_ok = r->post ? is_post : is_get;
            return r;
        }
    }
    return NULL;
}

/* The API key check, only for routes marked auth and only when a key is
 * set (health and metrics stay open for probes and scrapers). The scheme
 * is matched case-insensitively (RFC 9110); the key is compared in
 * constant time so response timing does not leak a matching prefix. */
static bool auth_ok(srv_conn *c, srv_error *err)
{
    const char *key = c->h->s->opts.api_key;
    if (!key || !c->rt->auth)
        return true;
    const char *v = MHD_lookup_connection_value(c->conn, MHD_HEADER_KIND, MHD_HTTP_HEADER_AUTHORIZATION);
    if (!v)
        return srv_error_set(err, SRV_ERR_AUTH, NULL,
                             "missing API key: send the header 'Authorization: Bearer YOUR_KEY'");
    if (strncasecmp(v, "Bearer ", 7) != 0)
        return srv_error_set(err, SRV_ERR_AUTH, NULL, "the Authorization header must be 'Bearer YOUR_KEY'");
    v += 7;
    if (!srv_ct_equal(v, strlen(v), key, strlen(key)))
        return srv_error_set(err, SRV_ERR_AUTH, NULL, "invalid API key");
    return true;
}

typedef struct {
    srv_hdr h[MAX_HDRS];
    size_t n;
    bool overflow;
/* Header lines copied (pointers into MHD's pool, valid for this call only)
 * for the guard's head checks. */
} hdr_list;

/* MHD_get_connection_values iterator: returning MHD_NO stops the walk, and
 * overflow turns into a 431 in admit. */
static enum MHD_Result collect_hdr(void *cls, enum MHD_ValueKind kind, const char *key, const char *value)
{
    (void)kind;
    hdr_list *l = cls;
    if (l->n == MAX_HDRS) {
        l->overflow = true;
        return MHD_NO;
    }
    l->h[l->n++] = (srv_hdr){key, value};
    return MHD_YES;
}

/* A CORS preflight from an allowed origin: 204 with what the route allows.
 * The requested header list is echoed only when the guard finds it a plain
 * token list (no CR/LF injection into our response); else the default. */
static enum MHD_Result reply_preflight(srv_conn *c, const char *req_headers)
{
    bool echo = req_headers && *req_headers && srv_guard_header_list_ok(req_headers);
    const char *extra[] = {"Access-Control-Allow-Methods",
                           c->rt->post ? "POST, OPTIONS" : "GET, HEAD, OPTIONS",
                           "Access-Control-Allow-Headers",
                           echo ? req_headers : "Authorization, Content-Type",
                           "Access-Control-Max-Age",
                           "600",
                           NULL};
    return reply(c, 204, inferd_strdup(""), 0, "text/plain", extra);
}

/* First call (headers in): refuse early what never needs the body (see
 * srv_http_guard.h for the head checks). *preflight: answer with
 * reply_preflight; *body_follows: a body is to be read. */
static bool admit(srv_conn *c, const char *url, const char *method, const char *version, bool *preflight,
                  bool *body_follows, srv_error *err)
{
    hdr_list hl;
    hl.n = 0;
    hl.overflow = false;
    MHD_get_connection_values(c->conn, MHD_HEADER_KIND, collect_hdr, &hl);
    if (hl.overflow)
        return srv_error_set(err, SRV_ERR_HEADERS_TOO_LARGE, NULL, "more than %d header lines", MAX_HDRS);
    srv_guard_req req = {method, url, version, hl.h, hl.n};
    srv_guard_out g;
    /* body_follows is read even on refusal: the limits module must know
     * whether a body will still arrive to apply the right deadline. */
    bool ok = srv_guard_check_head(c->h->guard, &req, &g, err);
    *body_follows = g.chunked || (g.has_length && g.content_length > 0);
    if (!ok)
        return false;
    if (g.cors_origin)
        snprintf(c->cors, sizeof c->cors, "%s", g.cors_origin);
    bool method_ok = false;
    c->rt = find_route(url, &method_ok, method);
    if (!c->rt)
        return srv_error_set(err, SRV_ERR_NOT_FOUND, NULL, "no route for %.16s %.100s", method, url);
    if (g.preflight)
        return *preflight = true;
    if (!method_ok)
        return srv_error_set(err, SRV_ERR_METHOD, NULL, "method %.16s is not allowed on %s (use %s)", method,
                             c->rt->path, c->rt->post ? "POST" : "GET");
    if (!auth_ok(c, err))
        return false;
    if (c->rt->post && !srv_guard_check_ctype(&req, err))
        return false;
    /* Content-Length known: refuse a too-large or over-budget body now,
     * before it is read. Chunked bodies are counted in conn_body. */
    int64_t max = c->h->s->opts.max_body_bytes;
    if (g.has_length && g.content_length > (uint64_t)max)
        return srv_error_set(err, SRV_ERR_TOO_LARGE, NULL, "request body of %llu bytes exceeds the limit of %lld bytes",
                             (unsigned long long)g.content_length, (long long)max);
    if (g.has_length && !srv_limits_body_admit(c->h->limits, g.content_length, err))
        return false;
    /* NOTE: draining and ready are read again in dispatch: both can change
     * while the body is read. */
    if (c->rt->needs_model && atomic_load(&c->h->s->draining))
        return srv_error_set(err, SRV_ERR_UNAVAILABLE, NULL, "the server is shutting down");
    if (c->rt->needs_model && !atomic_load(&c->h->s->ready))
        return srv_error_set(err, SRV_ERR_UNAVAILABLE, NULL, "the model is loading; retry shortly");
    return true;
}

/* ---- generation requests ------------------------------------------------- */

/* Non-streaming: pump until finished, suspending while there is nothing.
 * Event-loop thread, first from dispatch then from every on_request call
 * after a resume. Returns MHD_YES while suspended (MHD calls on_request
 * again on resume), MHD_NO to drop the connection (client gone, closing).
 * The loop runs again only when try_suspend declined: news arrived between
 * the pump and the lock, which is the lost-wakeup case it closes. */
static enum MHD_Result gen_wait(srv_conn *c)
{
    for (;;) {
        if (!begin_pump(c))
            return MHD_NO;
        if (srv_gen_pump(c->gen)) {
            int status;
            char *body = srv_gen_response(c->gen, &status);
            return reply_json(c, status, body);
        }
        if (try_suspend(c))
            return MHD_YES;
    }
}

/* Whether the watchdog asked for a half-close probe (and clear it).
 * Set by the watchdog thread, consumed here on the event-loop thread. */
static bool take_probe(srv_conn *c)
{
    pthread_mutex_lock(&c->h->mu);
    bool p = c->probe_sse;
    c->probe_sse = false;
    pthread_mutex_unlock(&c->h->mu);
    return p;
}

/* Streaming reader: pending SSE bytes, or suspend until notify.
 * MHD's content reader for a stream, on the event-loop thread. Returns
 * bytes copied; 0 means "nothing now" and is legal only because the
 * connection is suspended first (MHD would otherwise spin calling us);
 * END_OF_STREAM after the final event; END_WITH_ERROR closes the
 * connection (client gone, closing, or on_completed already freed c->gen).
 * The pump runs only when the buffered SSE is empty, so a slow reader
 * applies backpressure instead of growing the buffer without bound. */
static ssize_t sse_reader(void *cls, uint64_t pos, char *buf, size_t max)
{
    (void)pos;
    srv_conn *c = cls;
    for (;;) {
        if (!c->gen || !begin_pump(c))
            return MHD_CONTENT_READER_END_WITH_ERROR;
        bool done;
        size_t n = srv_gen_sse_read(c->gen, buf, max, &done);
        if (n == 0 && !done) {
            srv_gen_pump(c->gen);
            n = srv_gen_sse_read(c->gen, buf, max, &done);
        }
        if (n > 0)
            return (ssize_t)n;
        if (done)
            return MHD_CONTENT_READER_END_OF_STREAM;
        if (max >= sizeof PROBE_SSE - 1 && take_probe(c)) { /* an SSE comment: clients skip it */
            memcpy(buf, PROBE_SSE, sizeof PROBE_SSE - 1);
            return (ssize_t)(sizeof PROBE_SSE - 1);
        }
        if (try_suspend(c))
            return 0;
    }
}

/* The response's reference to c (see conn_unref). */
static void sse_free(void *cls)
{
    conn_unref(cls);
}

/* Event-loop thread: submit a generation and answer or start streaming.
 * The slot is bound before srv_gen_start because the engine may notify
 * before it returns. The body buffer is dropped after parsing: srv_gen
 * keeps what it needs, and the budget is released as early as possible.
 * NOTE: `active` counts requests with a generation; on_completed gives it
 * back. A failed MHD_create_response returns MHD_NO with c->gen still set:
 * on_completed frees it, which aborts the engine request. */
static enum MHD_Result gen_start(srv_conn *c, srv_api api)
{
    srv_http *h = c->h;
    pthread_mutex_lock(&h->mu);
    c->slot = slot_alloc(h, c);
    pthread_mutex_unlock(&h->mu);
    srv_error err;
    memset(&err, 0, sizeof err);
    c->gen = srv_gen_start(h->s, api, c->body.data ? c->body.data : "", c->body.len, c->t_recv, on_notify,
                           c->slot, &err);
    body_drop(c);
    pthread_mutex_lock(&h->mu);
    if (c->gen) {
        c->stream = srv_gen_is_stream(c->gen);
        list_add(h, c);
    } else {
        slot_release(h, c->slot);
        c->slot = NULL;
    }
    pthread_mutex_unlock(&h->mu);
    if (!c->gen)
        return reply_error(c, &err);
    atomic_fetch_add(&h->s->active, 1);
    if (!srv_gen_is_stream(c->gen))
        return gen_wait(c);
    struct MHD_Response *r =
        MHD_create_response_from_callback(MHD_SIZE_UNKNOWN, SSE_BLOCK, sse_reader, c, sse_free);
    if (!r)
        return MHD_NO;
    atomic_fetch_add(&c->refs, 1);
    MHD_add_response_header(r, MHD_HTTP_HEADER_CONTENT_TYPE, "text/event-stream");
    MHD_add_response_header(r, MHD_HTTP_HEADER_CACHE_CONTROL, "no-cache");
    /* nginx and similar proxies buffer responses; this header asks them not
     * to, so tokens reach the client as produced. */
    MHD_add_response_header(r, "X-Accel-Buffering", "no");
    enum MHD_Result ret = MHD_queue_response(c->conn, MHD_HTTP_OK, r);
    MHD_destroy_response(r);
    c->status = MHD_HTTP_OK;
    srv_metrics_http(h->s->metrics, MHD_HTTP_OK);
    return ret;
}

/* ---- dispatch -------------------------------------------------------------- */

/* Event-loop thread, once per request, after the whole body is in. The
 * checks repeat what admit could not know at the head: a chunked body's
 * size, the budget refusal recorded by conn_body, and a drain or load state
 * that changed while the body was read. Each route returns a heap body or
 * NULL with err set; generation routes answer through gen_start. */
static enum MHD_Result dispatch(srv_conn *c, const char *url)
{
    srv_server *s = c->h->s;
    srv_error err;
    memset(&err, 0, sizeof err);
    char *body = NULL;
    if (c->rt->post && c->body_seen > (uint64_t)s->opts.max_body_bytes) {
        srv_error_set(&err, SRV_ERR_TOO_LARGE, NULL, "request body exceeds the limit of %lld bytes",
                      (long long)s->opts.max_body_bytes);
        return reply_error(c, &err);
    }
    if (c->busy) {
        srv_error_set(&err, SRV_ERR_BUSY, NULL, "the server is buffering too many request bodies; retry shortly");
        return reply_error(c, &err);
    }
    if (c->rt->needs_model && (atomic_load(&s->draining) || !atomic_load(&s->ready))) {
        srv_error_set(&err, SRV_ERR_UNAVAILABLE, NULL, "the server is %s",
                      atomic_load(&s->draining) ? "shutting down" : "loading the model");
        return reply_error(c, &err);
    }
    const char *data = c->body.data ? c->body.data : "";
    switch (c->rt->id) {
    case R_HEALTH: body = srv_routes_health(s, &err); break;
    case R_MODELS: body = srv_routes_models(s, NULL, &err); break;
    case R_MODEL: body = srv_routes_models(s, url + strlen(c->rt->path), &err); break;
    case R_TOKENIZE: body = srv_routes_tokenize(s, data, c->body.len, &err); break;
    case R_DETOKENIZE: body = srv_routes_detokenize(s, data, c->body.len, &err); break;
    case R_METRICS: {
        size_t len;
        body = srv_routes_metrics(s, &len);
        return reply(c, 200, body, len, "text/plain; version=0.0.4; charset=utf-8", NULL);
    }
    case R_COMPLETIONS: return gen_start(c, SRV_API_COMPLETIONS);
    case R_CHAT: return gen_start(c, SRV_API_CHAT);
    case R_RESPONSES: return gen_start(c, SRV_API_RESPONSES);
    }
    return body ? reply_json(c, 200, body) : reply_error(c, &err);
}

/* First call of a request: its state, and the head checks.
 * Event-loop thread, first on_request call: allocate the request (owned by
 * *con_cls from here on, freed through on_completed), capture the fd for
 * the watchdog and the per-peer record for deadlines, and run admit. An
 * early refusal is queued before the body is read; MHD then discards the
 * body (conn_body drops it since c->status is set). srv_limits_head_done is
 * told the outcome either way so the header deadline stops. */
static enum MHD_Result conn_begin(srv_http *h, struct MHD_Connection *conn, const char *url, const char *method,
                                  const char *version, void **con_cls)
{
    srv_conn *c = inferd_calloc(1, sizeof *c);
    c->h = h;
    c->conn = conn;
    c->t_recv = util_now_s();
    c->fd = -1;
    atomic_init(&c->refs, 1);
    snprintf(c->method, sizeof c->method, "%s", method);
    snprintf(c->path, sizeof c->path, "%s", url);
    c->http11 = version && strcmp(version, "HTTP/1.1") == 0;
    const union MHD_ConnectionInfo *ci = MHD_get_connection_info(conn, MHD_CONNECTION_INFO_CONNECTION_FD);
    if (ci)
        c->fd = ci->connect_fd;
    ci = MHD_get_connection_info(conn, MHD_CONNECTION_INFO_SOCKET_CONTEXT);
    c->peer = ci ? ci->socket_context : NULL;
    *con_cls = c;
    atomic_fetch_add(&h->open, 1);
    srv_error err;
    memset(&err, 0, sizeof err);
    bool preflight = false, body_follows = false;
    bool ok = admit(c, url, method, version, &preflight, &body_follows, &err);
    srv_limits_head_done(h->limits, c->peer, body_follows);
    if (!ok)
        return reply_error(c, &err);
    return preflight ? reply_preflight(c, MHD_lookup_connection_value(conn, MHD_HEADER_KIND,
                                                                      "Access-Control-Request-Headers"))
                     : MHD_YES;
}

/* A piece of the body: buffer it within the size limit and the budget.
 * Event-loop thread, once per body piece. Bytes beyond max_body_bytes or
 * the server-wide budget are counted but not kept (dispatch answers 413 or
 * 503 from body_seen and busy). NOTE: once refused, the reservation already
 * taken is released at once so one oversized request cannot pin budget. */
static enum MHD_Result conn_body(srv_conn *c, const char *upload, size_t n)
{
    srv_http *h = c->h;
    srv_limits_body_progress(h->limits, c->peer, n);
    if (c->status)
        return MHD_YES; /* refused already: drop the body */
    c->body_seen += n;
    uint64_t max = (uint64_t)h->s->opts.max_body_bytes;
    if (c->body_seen <= max && !c->busy && srv_limits_body_reserve(h->limits, n)) {
        c->reserved += n;
        inferd_buf_append(&c->body, upload, n);
    } else {
        c->busy = c->busy || c->body_seen <= max; /* over the budget, not over the limit */
        body_drop(c);
    }
    /* a chunked upload far beyond the limit: stop reading it */
    return c->body_seen > 4 * max + (1 << 20) ? MHD_NO : MHD_YES;
}

/* MHD's access handler, on an event-loop thread. Call sequence per request:
 * head (c == NULL) -> body pieces (*upload_size > 0, which we must zero to
 * consume) -> one call with no data (dispatch) -> further calls only after a
 * resume of a non-streaming generation (gen_wait). A refused request that
 * has queued its answer just returns MHD_YES until MHD sends it. */
enum MHD_Result srv_http_on_request(void *cls, struct MHD_Connection *conn, const char *url, const char *method,
                                  const char *version, const char *upload, size_t *upload_size,
                                  void **con_cls)
{
    srv_http *h = cls;
    srv_conn *c = *con_cls;
    if (!c)
        return conn_begin(h, conn, url, method, version, con_cls);
    if (*upload_size) {
        size_t n = *upload_size;
        *upload_size = 0;
        return conn_body(c, upload, n);
    }
    if (!c->started)
        srv_limits_body_done(h->limits, c->peer);
    if (c->status && !c->gen)
        return MHD_YES;
    if (!c->started) {
        c->started = true;
        return dispatch(c, url);
    }
    if (c->gen && !srv_gen_is_stream(c->gen))
        return gen_wait(c);
    return MHD_YES;
}

/* MHD_OPTION_NOTIFY_COMPLETED, on the event-loop thread of the connection,
 * once per request that reached on_request (also for aborted ones). Order
 * matters: the slot is detached under h->mu first so no notify can resume
 * a connection MHD is closing; the engine stream is released afterwards,
 * outside the lock. A request with no status queued is logged as 499
 * (client closed), nginx's convention. */
void srv_http_on_completed(void *cls, struct MHD_Connection *conn, void **con_cls,
                         enum MHD_RequestTerminationCode toe)
{
    (void)conn;
    srv_http *h = cls;
    srv_conn *c = *con_cls;
    if (!c)
        return;
    *con_cls = NULL;
    pthread_mutex_lock(&h->mu);
    if (c->slot)
        slot_release(h, c->slot);
    c->slot = NULL;
    list_remove(h, c);
    c->suspended = false;
    pthread_mutex_unlock(&h->mu);
    srv_limits_request_done(h->limits, c->peer);
    srv_access a = {c->method, c->path, c->status ? c->status : 499,      NULL, 0,
                    0,         -1,      (util_now_s() - c->t_recv) * 1e3, NULL, c->note};
    if (!c->status)
        srv_metrics_http(h->s->metrics, 499);
    if (toe != MHD_REQUEST_TERMINATED_COMPLETED_OK && !a.note)
        a.note =
            toe == MHD_REQUEST_TERMINATED_CLIENT_ABORT ? "client disconnected" : "connection closed early";
    if (c->gen) {
        srv_gen_summary sum;
        srv_gen_get_summary(c->gen, &sum);
        a.id = sum.id;
        a.prompt_tokens = sum.prompt_tokens;
        a.completion_tokens = sum.completion_tokens;
        a.ttft_ms = sum.ttft_ms;
        a.finish = sum.finish;
    }
    srv_log_access(&a);
    if (c->gen) {
        srv_gen_free(c->gen); /* releases the engine stream: aborts if unfinished */
        c->gen = NULL;
        atomic_fetch_sub(&h->s->active, 1);
    }
    atomic_fetch_sub(&h->open, 1);
    conn_unref(c);
}

