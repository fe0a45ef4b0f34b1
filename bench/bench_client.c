/* bench/bench_client.c: the request driver of `inferd bench serve`.
 *
 * One thread, one libcurl multi handle. The loop launches every request whose
 * arrival time has come while fewer than max_concurrency are in flight
 * (later arrivals wait for a free slot, as vLLM's semaphore does; the launch
 * time, not the arrival time, starts a request's clock), then lets curl move
 * all sockets and waits in curl_multi_poll() for socket activity, the next
 * arrival, or at most 50 ms so that a SIGINT is noticed promptly. Body bytes
 * are parsed in the write callback (bench_sse.c), so each content chunk is
 * stamped when curl hands it over rather than when the transfer ends.
 *
 * Trade-off: a single thread bounds the client's own throughput (roughly the
 * cost of one cJSON parse per chunk), but keeps timestamps free of lock
 * contention and scales to thousands of open streams; file descriptors are
 * the limit, so RLIMIT_NOFILE is raised to its hard limit when needed.
 */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>

#include <cjson/cJSON.h>
#include <curl/curl.h>

#include "common/alloc.h"
#include "common/log.h"
#include "common/util.h"
#include "bench/bench_client.h"

/* ERRBODY_MAX: only the head of an error body is kept, enough for an
 * OpenAI error object; a misbehaving server streaming megabytes of HTML on
 * a 500 cannot grow memory per request. GET_BODY_MAX bounds /v1/models. */
enum { ERRBODY_MAX = 2048, GET_BODY_MAX = 8 << 20 };

/* One in-flight request: its curl handle, its parser and its clock. Owned
 * by the driver from launch() to retire(); x->sse writes into out[idx]. */
typedef struct {
    CURL *easy;
    int idx;
    double t_launch; /* absolute, util_now_s() */
    bench_sse sse;
    bool status_checked, http_ok;
    char *errbody; /* first bytes of a non-2xx body */
    size_t errlen;
    char errbuf[CURL_ERROR_SIZE];
} xfer;

/* libcurl's write callback, on the driver thread, once per socket read.
 * The status is looked up once, at the first body bytes (headers are
 * complete by then): 2xx bodies go to the SSE parser with the read's
 * timestamp, others are kept (head only) for the error message. Always
 * returns n: a body is never refused, so curl's result reflects the
 * transport, not our parsing. */
static size_t on_write(char *ptr, size_t size, size_t nmemb, void *ud)
{
    xfer *x = ud;
    size_t n = size * nmemb;
    double t = util_now_s() - x->t_launch;
    if (!x->status_checked) {
        long code = 0;
        curl_easy_getinfo(x->easy, CURLINFO_RESPONSE_CODE, &code);
        x->status_checked = true;
        /* decided once: a transfer's status cannot change mid-body */
        x->http_ok = code >= 200 && code < 300;
    }
    if (x->http_ok) {
        bench_sse_feed(&x->sse, ptr, n, t);
    } else if (x->errlen < ERRBODY_MAX) {
        size_t take = INFERD_MIN(n, (size_t)ERRBODY_MAX - x->errlen);
        x->errbody = inferd_realloc(x->errbody, x->errlen + take + 1);
        memcpy(x->errbody + x->errlen, ptr, take);
        x->errlen += take;
        x->errbody[x->errlen] = '\0';
    }
    return n;
}

/* A heap copy of a formatted message, truncated at 511 bytes (error texts
 * end up in one-line reports and in the result JSON). */
static char *fmt_msg(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static char *fmt_msg(const char *fmt, ...)
{
    char buf[512];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(buf, sizeof buf, fmt, ap);
    va_end(ap);
    return inferd_strdup(buf);
}

/* "HTTP 429: <error.message or body head>"; newlines are flattened so
 * that a report line stays one line. body may be NULL or not JSON. */
/* "HTTP 429: <error.message or body head>" */
static char *http_error_msg(long code, const char *body)
{
    const char *detail = body ? body : "";
    cJSON *root = body ? cJSON_Parse(body) : NULL;
    const cJSON *e = cJSON_GetObjectItemCaseSensitive(root, "error");
    const cJSON *m = cJSON_IsObject(e) ? cJSON_GetObjectItemCaseSensitive(e, "message") : e;
    if (cJSON_IsString(m))
        detail = m->valuestring;
    char *msg = fmt_msg("HTTP %ld: %.200s", code, detail);
    cJSON_Delete(root);
    for (char *p = msg; *p; p++)
        if (*p == '\n' || *p == '\r')
            *p = ' ';
    return msg;
}

/* Classify a finished transfer into r. t: seconds since its launch.
 * Order matters: a timeout wins over the status (a stream cut by
 * --timeout after a 200 is a timeout, not a bad response); then an HTTP
 * error status; then "no status at all" (connect); then a non-2xx,
 * non-4xx/5xx status (e.g. a 3xx) or a transfer that broke after a status
 * (bad response). Only a clean 2xx goes to the parser's verdict. */
/* Classify a finished transfer into r. t: seconds since its launch. */
static void finish_xfer(xfer *x, CURLcode res, bench_result *r, double t)
{
    long code = 0;
    curl_easy_getinfo(x->easy, CURLINFO_RESPONSE_CODE, &code);
    r->http_status = code;
    /* only a complete 2xx transfer gets the parser's verdict (it may still
     * be BAD_RESPONSE: truncated stream, error event, no [DONE]) */
    if (res == CURLE_OK && code >= 200 && code < 300) {
        bench_sse_finish(&x->sse, t);
        return;
    }
    r->e2el_s = t;
    const char *cerr = x->errbuf[0] ? x->errbuf : curl_easy_strerror(res);
    if (res == CURLE_OPERATION_TIMEDOUT) {
        r->err = BENCH_ERR_TIMEOUT;
        r->error = fmt_msg("timeout after %.3f s: %s", t, cerr);
    } else if (code >= 400 && code < 600) {
        r->err = code < 500 ? BENCH_ERR_HTTP_4XX : BENCH_ERR_HTTP_5XX;
        r->error = http_error_msg(code, x->errbody);
    } else if (code == 0) {
        r->err = BENCH_ERR_CONNECT;
        r->error = fmt_msg("connection failed: %s", cerr);
    } else if (res == CURLE_OK) {
        r->err = BENCH_ERR_BAD_RESPONSE;
        r->error = http_error_msg(code, x->errbody);
    } else {
        r->err = BENCH_ERR_BAD_RESPONSE;
        r->error = fmt_msg("transfer failed after HTTP %ld: %s", code, cerr);
    }
}

/* Best effort: one socket per in-flight request plus slack for curl's
 * internals and stdio. Failure is only a warning; connections beyond the
 * limit then fail as connect errors, visible in the report. */
static void raise_fd_limit(int want)
{
    struct rlimit rl;
    if (getrlimit(RLIMIT_NOFILE, &rl) != 0 || rl.rlim_cur >= (rlim_t)want)
        return;
    /* an unprivileged process may raise its soft limit up to the hard one */
    rlim_t target = rl.rlim_max == RLIM_INFINITY ? (rlim_t)want : INFERD_MIN(rl.rlim_max, (rlim_t)want);
    rl.rlim_cur = target;
    if (setrlimit(RLIMIT_NOFILE, &rl) != 0)
        INFERD_LOG_WARN("bench: could not raise the open-file limit to %d", want);
}

/* Shared by every transfer of a run (curl does not copy the list; it is
 * freed after the last transfer). "Expect:" turns off curl's
 * 100-continue handshake for large POST bodies, which would otherwise add
 * a round trip (or a 1 s wait) to the measured latency. */
static struct curl_slist *make_headers(const bench_client_opts *o)
{
    struct curl_slist *h = NULL;
    h = curl_slist_append(h, "Content-Type: application/json");
    h = curl_slist_append(h, o->stream ? "Accept: text/event-stream" : "Accept: application/json");
    h = curl_slist_append(h, "Expect:");
    if (o->api_key && o->api_key[0]) {
        size_t n = strlen(o->api_key) + 32;
        char *line = inferd_malloc(n);
        snprintf(line, n, "Authorization: Bearer %s", o->api_key);
        h = curl_slist_append(h, line);
        inferd_free(line);
    }
    return h;
}

/* Every request shares the same transfer options but its body and parser.
 * r is reset here, so a result describes exactly one launch; its clock
 * starts right before the handle is added (curl starts connecting on the
 * next perform). NULL when curl cannot create or add the transfer.
 * NOTE: the body is not copied (CURLOPT_POSTFIELDS): o->bodies must outlive
 * the run. CURLOPT_NOSIGNAL: curl must not use signals (SIGALRM for DNS
 * timeouts); the process owns its signal handling. */
/* Every request shares the same transfer options but its body and parser. */
static xfer *launch(CURLM *multi, const bench_client_opts *o, struct curl_slist *hdrs, int idx,
                    bench_result *r, double t0)
{
    xfer *x = inferd_calloc(1, sizeof *x);
    x->idx = idx;
    x->easy = curl_easy_init();
    if (!x->easy) {
        inferd_free(x);
        return NULL;
    }
    CURL *e = x->easy;
    const char *body = o->bodies[idx];
    curl_easy_setopt(e, CURLOPT_URL, o->url);
    curl_easy_setopt(e, CURLOPT_POST, 1L);
    curl_easy_setopt(e, CURLOPT_POSTFIELDS, body);
    curl_easy_setopt(e, CURLOPT_POSTFIELDSIZE_LARGE, (curl_off_t)strlen(body));
    curl_easy_setopt(e, CURLOPT_HTTPHEADER, hdrs);
    curl_easy_setopt(e, CURLOPT_WRITEFUNCTION, on_write);
    curl_easy_setopt(e, CURLOPT_WRITEDATA, x);
    curl_easy_setopt(e, CURLOPT_PRIVATE, x);
    curl_easy_setopt(e, CURLOPT_ERRORBUFFER, x->errbuf);
    curl_easy_setopt(e, CURLOPT_NOSIGNAL, 1L);
    /* no Nagle delay on the small POSTs: it would be added to TTFT */
    curl_easy_setopt(e, CURLOPT_TCP_NODELAY, 1L);
    /* HTTP/1.1: no multiplexing, each in-flight request has a connection
     * of its own, so one slow stream cannot delay another's bytes */
    curl_easy_setopt(e, CURLOPT_HTTP_VERSION, (long)CURL_HTTP_VERSION_1_1);
    curl_easy_setopt(e, CURLOPT_USERAGENT, "inferd-bench/0.1");
    double ct = o->connect_timeout_s > 0 ? o->connect_timeout_s : 10.0;
    curl_easy_setopt(e, CURLOPT_CONNECTTIMEOUT_MS, (long)(ct * 1000.0));
    if (o->timeout_s > 0)
        curl_easy_setopt(e, CURLOPT_TIMEOUT_MS, (long)(o->timeout_s * 1000.0));
    memset(r, 0, sizeof *r);
    r->prompt_tokens = -1;
    bench_sse_init(&x->sse, r, o->stream, o->chat);
    x->t_launch = util_now_s();
    r->start_s = x->t_launch - t0;
    if (curl_multi_add_handle(multi, e) != CURLM_OK) {
        curl_easy_cleanup(e);
        bench_sse_free(&x->sse);
        inferd_free(x);
        return NULL;
    }
    return x;
}

/* Detach and free a transfer (finished or cancelled); r is kept. */
static void retire(CURLM *multi, xfer *x)
{
    curl_multi_remove_handle(multi, x->easy);
    curl_easy_cleanup(x->easy);
    bench_sse_free(&x->sse);
    inferd_free(x->errbody);
    inferd_free(x);
}

/* The driver's state, all on one thread. next: first request not yet
 * launched (launches are in index order, arrivals being nondecreasing);
 * done counts finished and failed-to-launch requests alike. */
typedef struct {
    CURLM *multi;
    const bench_client_opts *o;
    bench_result *out;
    struct curl_slist *hdrs;
    xfer **live; /* [n] in-flight transfers by request index */
    double t0, t_last_end, t_progress;
    int next, active, done, failed, peak;
    int64_t out_tokens;
} run_state;

/* Drain curl's completion messages: classify, free the transfer, update
 * the counters. CURLINFO_PRIVATE maps the easy handle back to its xfer. */
static void reap(run_state *st)
{
    CURLMsg *msg;
    int left;
    while ((msg = curl_multi_info_read(st->multi, &left))) {
        if (msg->msg != CURLMSG_DONE)
            continue;
        xfer *x = NULL;
        /* the char ** cast is what CURLINFO_PRIVATE's varargs expect */
        curl_easy_getinfo(msg->easy_handle, CURLINFO_PRIVATE, (char **)&x);
        double now = util_now_s();
        bench_result *r = &st->out[x->idx];
        finish_xfer(x, msg->data.result, r, now - x->t_launch);
        st->live[x->idx] = NULL;
        retire(st->multi, x);
        st->active--;
        st->done++;
        st->t_last_end = now;
        if (r->err == BENCH_ERR_NONE)
            st->out_tokens += r->output_tokens;
        else
            st->failed++;
    }
}

/* Interrupted: abort in-flight requests and mark the unlaunched ones. */
/* In-flight requests keep the chunk times they received (their partial
 * stream is not counted: cancelled results are excluded from the
 * latency and token metrics); unlaunched ones get start_s -1 so the concurrency and JSON
 * writers can tell "never sent" from "aborted". */
static void cancel_rest(run_state *st)
{
    double now = util_now_s();
    for (int i = 0; i < st->o->n; i++) {
        bench_result *r = &st->out[i];
        if (st->live[i]) {
            r->err = BENCH_ERR_CANCELLED;
            r->e2el_s = now - st->live[i]->t_launch;
            r->error = inferd_strdup("interrupted while in flight");
            retire(st->multi, st->live[i]);
            st->live[i] = NULL;
        } else if (i >= st->next) {
            memset(r, 0, sizeof *r);
            r->start_s = -1.0;
            r->prompt_tokens = -1;
            r->err = BENCH_ERR_CANCELLED;
            r->error = inferd_strdup("not sent: interrupted");
        }
    }
    st->t_last_end = now;
}

/* Launch, in order, every request whose arrival time has passed while a
 * concurrency slot is free. A request held back by the concurrency limit
 * launches late and its clock starts then (vLLM's semaphore semantics).
 * NOTE: a failed launch counts as done and failed right away, so the run
 * loop still terminates. */
static bool launch_due(run_state *st)
{
    const bench_client_opts *o = st->o;
    bool any = false;
    double now = util_now_s() - st->t0;
    while (st->next < o->n && (o->max_concurrency <= 0 || st->active < o->max_concurrency) &&
           (!o->arrival_s || o->arrival_s[st->next] <= now)) {
        int i = st->next++;
        xfer *x = launch(st->multi, o, st->hdrs, i, &st->out[i], st->t0);
        if (!x) {
            st->out[i].err = BENCH_ERR_BAD_RESPONSE;
            st->out[i].error = inferd_strdup("could not create a curl transfer");
            st->done++;
            st->failed++;
            continue;
        }
        st->live[i] = x;
        st->active++;
        st->peak = INFERD_MAX(st->peak, st->active);
        any = true;
    }
    return any;
}

/* How long curl_multi_poll may sleep: until the next arrival when a slot
 * is free, else 50 ms; never more than 50 ms, so a SIGINT is seen promptly even
 * when it does not wake the poll. */
static int wait_ms(const run_state *st)
{
    const bench_client_opts *o = st->o;
    int ms = 50;
    if (st->next < o->n && (o->max_concurrency <= 0 || st->active < o->max_concurrency)) {
        double due = o->arrival_s ? o->arrival_s[st->next] : 0.0;
        double dt = (due - (util_now_s() - st->t0)) * 1000.0;
        ms = dt <= 0 ? 0 : (int)INFERD_MIN(dt, 50.0);
    }
    return ms;
}

/* The loop: stop check, launch what is due, let curl move the sockets,
 * reap completions, report progress, then sleep in curl_multi_poll unless
 * something just completed (a freed slot may be launchable now). The
 * duration ends at the last completion, not at loop exit. */
inferd_status bench_client_run(const bench_client_opts *o, bench_result *out, double *duration_s,
                               int *peak_active)
{
    run_state st = {0};
    st.o = o;
    st.out = out;
    memset(out, 0, (size_t)o->n * sizeof *out);
    st.multi = curl_multi_init();
    if (!st.multi)
        return inferd_set_error(INFERD_ERR_INTERNAL, "bench: curl_multi_init failed");
    /* +256: curl's own descriptors, stdio, the tokenizer files */
    raise_fd_limit((o->max_concurrency > 0 ? INFERD_MIN(o->max_concurrency, o->n) : o->n) + 256);
    st.hdrs = make_headers(o);
    /* indexed by request: cancel_rest finds in-flight transfers in O(n) */
    st.live = inferd_calloc((size_t)INFERD_MAX(o->n, 1), sizeof *st.live);
    st.t0 = st.t_last_end = st.t_progress = util_now_s();
    while (st.done < o->n) {
        if (o->stop && *o->stop) {
            cancel_rest(&st);
            break;
        }
        launch_due(&st);
        int running = 0;
        /* `running` is not used: completions are counted by reap(), which
         * also sees the transfers that failed without ever running */
        curl_multi_perform(st.multi, &running);
        int before = st.done;
        reap(&st);
        double now = util_now_s();
        if (o->progress && now - st.t_progress >= 0.1) {
            st.t_progress = now;
            o->progress(o->progress_ud, st.done, st.failed, o->n, st.out_tokens, now - st.t0);
        }
        if (st.done == o->n || st.done != before)
            continue; /* finished, or slots freed: launch before waiting */
        curl_multi_poll(st.multi, NULL, 0, wait_ms(&st), NULL);
    }
    if (o->progress)
        o->progress(o->progress_ud, st.done, st.failed, o->n, st.out_tokens, st.t_last_end - st.t0);
    *duration_s = st.t_last_end - st.t0;
    if (peak_active)
        *peak_active = st.peak;
    inferd_free(st.live);
    curl_slist_free_all(st.hdrs);
    curl_multi_cleanup(st.multi);
    return INFERD_OK;
}

/* Returning less than n makes curl abort with a write error: the cap. */
static size_t on_get_write(char *ptr, size_t size, size_t nmemb, void *ud)
{
    inferd_buf *b = ud;
    size_t n = size * nmemb;
    if (b->len + n > GET_BODY_MAX)
        return 0;
    inferd_buf_append(b, ptr, n);
    return n;
}

/* A blocking one-off GET (used before the run, for /v1/models). A non-2xx
 * status is not an error here: the caller decides from *http_status. */
inferd_status bench_http_get(const char *url, const char *api_key, char **body, long *http_status)
{
    CURL *e = curl_easy_init();
    if (!e)
        return inferd_set_error(INFERD_ERR_INTERNAL, "bench: curl_easy_init failed");
    bench_client_opts ho = {.api_key = api_key, .stream = false};
    struct curl_slist *hdrs = make_headers(&ho);
    inferd_buf b = INFERD_BUF_INIT;
    char errbuf[CURL_ERROR_SIZE] = "";
    curl_easy_setopt(e, CURLOPT_URL, url);
    curl_easy_setopt(e, CURLOPT_HTTPHEADER, hdrs);
    curl_easy_setopt(e, CURLOPT_WRITEFUNCTION, on_get_write);
    curl_easy_setopt(e, CURLOPT_WRITEDATA, &b);
    curl_easy_setopt(e, CURLOPT_ERRORBUFFER, errbuf);
    curl_easy_setopt(e, CURLOPT_NOSIGNAL, 1L);
    curl_easy_setopt(e, CURLOPT_TIMEOUT_MS, 10000L);
    CURLcode res = curl_easy_perform(e);
    long code = 0;
    curl_easy_getinfo(e, CURLINFO_RESPONSE_CODE, &code);
    curl_slist_free_all(hdrs);
    curl_easy_cleanup(e);
    if (res != CURLE_OK) {
        inferd_buf_free(&b);
        return inferd_set_error(INFERD_ERR_UNAVAILABLE, "GET %s: %s", url,
                                errbuf[0] ? errbuf : curl_easy_strerror(res));
    }
    *body = inferd_buf_steal(&b, NULL);
    *http_status = code;
    return INFERD_OK;
}
